/* segments.c — texts of a request into segments and back (see segments.h). */
#include "serve/segments.h"

#include <ctype.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <utf8proc.h>

#include "tern.h"

void segments_free(segments_t *g) {
    for (int i = 0; i < g->n; i++) free(g->seg[i]);
    for (int i = 0; g->tags && i < g->n; i++) free(g->tags[i]);
    free(g->seg), free(g->ntok), free(g->parts), free(g->item_first), free(g->item_count);
    free(g->tags), free(g->n_tags);
    memset(g, 0, sizeof *g);
}

static int add_part(segments_t *g, int seg, int escape, const char *lit, size_t len) {
    if (g->n_parts == g->parts_cap) {
        int cap = g->parts_cap ? 2 * g->parts_cap : 16;
        seg_part_t *p = realloc(g->parts, (size_t)cap * sizeof *p);
        if (!p) return -1;
        g->parts = p;
        g->parts_cap = cap;
    }
    g->parts[g->n_parts++] = (seg_part_t){seg, escape, lit, len};
    return 0;
}

static int add_literal(segments_t *g, const char *lit, size_t len) {
    return len ? add_part(g, -1, 0, lit, len) : 0;
}

/* Takes text (owned) as a new segment. */
static int add_segment(segments_t *g, char *text, int escape) {
    if (!text) return -1;
    if (g->n == g->cap) {
        int cap = g->cap ? 2 * g->cap : 16;
        char **s2 = realloc(g->seg, (size_t)cap * sizeof *s2);
        if (!s2) {
            free(text);
            return -1;
        }
        g->seg = s2;
        int *t2 = realloc(g->ntok, (size_t)cap * sizeof *t2);
        if (!t2) {
            free(text);
            return -1;
        }
        g->ntok = t2;
        seg_tag_t **g2 = realloc(g->tags, (size_t)cap * sizeof *g2);
        if (!g2) {
            free(text);
            return -1;
        }
        g->tags = g2;
        int *n2 = realloc(g->n_tags, (size_t)cap * sizeof *n2);
        if (!n2) {
            free(text);
            return -1;
        }
        g->n_tags = n2;
        g->cap = cap;
    }
    g->seg[g->n] = text;
    g->ntok[g->n] = 0;
    g->tags[g->n] = NULL;
    g->n_tags[g->n] = 0;
    return add_part(g, g->n++, escape, NULL, 0);
}

/* text[0..len) as segments: one, or with lang (sentence splitting on) one per sentence with the
 * white space between them kept as literals (pointing into text when it is the item's own, else
 * sep, a single space: an HTML run's white space is collapsed before). Takes owned (NULL: text is
 * the item's, copied) and frees it. */
static void add_sentences(segments_t *g, const char *text, size_t len, char *owned, int escape, const char *lang,
                          int *err) {
    size_t *sp = NULL;
    int n = 0;
    if (!lang || tern_split_sentences(text, len, lang, &sp, &n) != TERN_OK || n <= 1) {
        /* one sentence (or splitting off, or refused: the language was checked by the caller, so
         * only an allocation can fail here, and the text is then translated whole) */
        tern_sentences_free(sp);
        if (len && add_segment(g, owned ? owned : strndup(text, len), escape)) *err = 1;
        else if (!len) free(owned);
        return;
    }
    size_t prev = 0;
    for (int i = 0; i < n && !*err; i++) {
        size_t b = sp[2 * i], e = sp[2 * i + 1];
        if (b > prev && (owned ? add_literal(g, " ", 1) : add_literal(g, text + prev, b - prev))) *err = 1;
        if (add_segment(g, strndup(text + b, e - b), escape)) *err = 1;
        prev = e;
    }
    if (!*err && len > prev && !owned && add_literal(g, text + prev, len - prev)) *err = 1;
    tern_sentences_free(sp);
    free(owned);
}

static void build_text(segments_t *g, const char *p, const char *lang, int *err) {
    for (;;) {
        const char *nl = strchr(p, '\n');
        size_t len = nl ? (size_t)(nl - p) : strlen(p);
        size_t seg_len = len > 0 && p[len - 1] == '\r' ? len - 1 : len;
        add_sentences(g, p, seg_len, NULL, 0, lang, err);
        if (!nl) break;
        if (add_literal(g, "\n", 1)) *err = 1;
        p = nl + 1;
    }
}

/* ---------------------------------------------------------------- HTML */

static int is_ws(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f'; }

/* Appends the UTF-8 of a valid code point. */
static char *put_cp(char *d, long cp) {
    return d + utf8proc_encode_char((utf8proc_int32_t)cp, (utf8proc_uint8_t *)d);
}

/* Decodes character references and collapses white space of t[0..len) to d (at most len bytes),
 * out being the start of the text d continues (no space at its start, none doubled); returns the
 * new end. */
static char *html_decode(char *out, char *d, const char *t, size_t len) {
    static const struct {
        const char *name;
        long cp;
    } named[] = {{"amp", '&'}, {"lt", '<'}, {"gt", '>'}, {"quot", '"'}, {"apos", '\''}, {"nbsp", 0xA0}};
    for (size_t i = 0; i < len;) {
        if (is_ws(t[i])) {
            while (i < len && is_ws(t[i])) i++;
            if (d > out && d[-1] != ' ') *d++ = ' ';
            continue;
        }
        if (t[i] == '&') {
            const char *semi = memchr(t + i, ';', len - i < 12 ? len - i : 12);
            long cp = -1;
            if (semi && t[i + 1] == '#') {
                int hex = t[i + 2] == 'x' || t[i + 2] == 'X';
                const char *digits = t + i + (hex ? 3 : 2);
                char *e;
                cp = isxdigit((unsigned char)*digits) ? strtol(digits, &e, hex ? 16 : 10) : -1;
                if (cp >= 0 && e != semi) cp = -1;
            } else if (semi)
                for (size_t k = 0; k < sizeof named / sizeof named[0]; k++)
                    if ((size_t)(semi - (t + i + 1)) == strlen(named[k].name) &&
                        !strncmp(t + i + 1, named[k].name, strlen(named[k].name)))
                        cp = named[k].cp;
            if (cp >= 0) {
                i = (size_t)(semi - t) + 1;
                if (cp == ' ' || cp == '\t' || cp == '\n' || cp == '\r' || cp == '\f' || cp == 0xA0 || cp == 0 ||
                    cp > 0x10FFFF || !utf8proc_codepoint_valid((utf8proc_int32_t)cp)) {
                    if (d > out && d[-1] != ' ') *d++ = ' '; /* white space (or no character): collapsed */
                } else
                    d = put_cp(d, cp);
                continue;
            }
        }
        *d++ = t[i++];
    }
    return d;
}

/* Decodes character references and collapses white space of text[0..len) into a new string. */
static char *html_text(const char *t, size_t len) {
    char *out = malloc(len + 1); /* a reference never decodes longer than it is written */
    if (!out) return NULL;
    char *d = html_decode(out, out, t, len);
    while (d > out && d[-1] == ' ') d--;
    *d = 0;
    return out;
}

static int tag_start(const char *p) {
    return *p == '<' && (isalpha((unsigned char)p[1]) || p[1] == '/' || p[1] == '!' || p[1] == '?');
}

/* The end of the tag or comment at p. */
static const char *tag_end(const char *p) {
    if (!strncmp(p, "<!--", 4)) {
        const char *c = strstr(p + 4, "-->");
        return c ? c + 3 : p + strlen(p);
    }
    const char *gt = strchr(p, '>');
    return gt ? gt + 1 : p + strlen(p);
}

/* Inline elements: their tags are carried into the translation of the sentence they are in
 * (tags.h); every other tag (p, div, li, h1-h6, br, td, img, ...) ends a text run. */
static const char *const INLINE_TAGS[] = {"a",    "abbr", "b",      "bdi",    "bdo", "cite", "code", "data",
                                          "del",  "dfn",  "em",     "font",   "i",   "ins",  "kbd",  "mark",
                                          "q",    "s",    "samp",   "small",  "span", "strike", "strong", "sub",
                                          "sup",  "time", "tt",     "u",      "var", NULL};

/* 1 when the tag p..end is an inline element's opening or closing tag (not self-closing, ended by
 * '>'); *close, and its name's [*name, *name + *nlen). */
static int inline_tag(const char *p, const char *end, int *close, const char **name, size_t *nlen) {
    const char *q = p + 1;
    *close = *q == '/';
    if (*close) q++;
    const char *n0 = q;
    while (q < end && isalnum((unsigned char)*q)) q++;
    if (q == n0 || end - p < 3 || end[-1] != '>' || end[-2] == '/' || !(q[0] == '>' || is_ws(q[0]))) return 0;
    for (int k = 0; INLINE_TAGS[k]; k++)
        if (strlen(INLINE_TAGS[k]) == (size_t)(q - n0) && !strncasecmp(INLINE_TAGS[k], n0, (size_t)(q - n0))) {
            *name = n0, *nlen = (size_t)(q - n0);
            return 1;
        }
    return 0;
}

typedef struct {
    const char *p, *end; /* bytes in the item */
    int tag, close;      /* an inline tag (close: its closing one), else text */
    const char *name;
    size_t nlen;
    size_t offset;       /* a tag: its position in the run's text */
    int mate;            /* a tag: the run item of its other half, or -1 */
    int sent;            /* a tag: its sentence (-1: before the first, n: after the last) */
} run_item_t;

/* A text run with inline tags: its text (references decoded, white space collapsed, the tags
 * taken out) cut into sentences, each a segment carrying the tags that fall in it (the white space
 * around the run kept as it is; between sentences a single space). */
static void add_tagged_run(segments_t *g, run_item_t *it, int ni, const char *run, const char *run_end,
                           const char *lang, int *err) {
    size_t cap = (size_t)(run_end - run) + 1;
    char *plain = malloc(cap), *d = plain;
    int *stack = malloc((size_t)ni * sizeof(int)), sp = 0;
    size_t *sp_spans = NULL;
    int ns = 0;
    if (!plain || !stack) {
        *err = 1;
        goto done;
    }
    for (int k = 0; k < ni; k++) {
        if (!it[k].tag) d = html_decode(plain, d, it[k].p, (size_t)(it[k].end - it[k].p));
        else it[k].offset = (size_t)(d - plain);
    }
    while (d > plain && d[-1] == ' ') d--;
    *d = 0;
    size_t len = (size_t)(d - plain);
    if (len == 0) { /* no text: the run as it is */
        if (add_literal(g, run, (size_t)(run_end - run))) *err = 1;
        goto done;
    }
    for (int k = 0; k < ni; k++) { /* pairs: a closing tag takes the nearest open one of its name */
        if (!it[k].tag) continue;
        it[k].mate = -1;
        if (it[k].offset > len) it[k].offset = len;
        if (!it[k].close) {
            stack[sp++] = k;
            continue;
        }
        for (int j = sp - 1; j >= 0; j--)
            if (it[stack[j]].nlen == it[k].nlen && !strncasecmp(it[stack[j]].name, it[k].name, it[k].nlen)) {
                it[k].mate = stack[j], it[stack[j]].mate = k;
                sp = j;
                break;
            }
    }
    size_t one[2] = {0, len}, *spans = one;
    if (lang && tern_split_sentences(plain, len, lang, &sp_spans, &ns) == TERN_OK && ns > 1) spans = sp_spans;
    else ns = 1;
    int prev = -1;
    for (int k = 0; k < ni; k++) { /* each tag's sentence, never before the previous tag's */
        if (!it[k].tag) continue;
        size_t o = it[k].offset;
        int s = -1;
        if (!it[k].close) {
            s = ns;
            for (int i = 0; i < ns; i++)
                if (o < spans[2 * i + 1]) {
                    s = i;
                    break;
                }
        } else {
            for (int i = ns - 1; i >= 0; i--)
                if (o > spans[2 * i]) {
                    s = i;
                    break;
                }
        }
        if (s < prev) s = prev;
        it[k].sent = prev = s;
    }
    /* the white space before the run's text, the tags before its first sentence */
    const char *a = run;
    if (!it[0].tag)
        while (a < it[0].end && is_ws(*a)) a++;
    if (add_literal(g, run, (size_t)(a - run))) *err = 1;
    for (int k = 0; k < ni; k++)
        if (it[k].tag && it[k].sent < 0 && add_literal(g, it[k].p, (size_t)(it[k].end - it[k].p))) *err = 1;
    for (int i = 0; i < ns && !*err; i++) {
        size_t b = spans[2 * i], e = spans[2 * i + 1];
        if (i > 0 && b > spans[2 * i - 1] && add_literal(g, " ", 1)) *err = 1;
        int nt = 0;
        for (int k = 0; k < ni; k++) nt += it[k].tag && it[k].sent == i;
        if (add_segment(g, strndup(plain + b, e - b), 1)) {
            *err = 1;
            break;
        }
        if (!nt) continue;
        seg_tag_t *t = malloc((size_t)nt * sizeof *t);
        int *local = malloc((size_t)ni * sizeof(int));
        if (!t || !local) {
            free(t), free(local);
            *err = 1;
            break;
        }
        int m = 0;
        for (int k = 0; k < ni; k++) {
            if (!it[k].tag || it[k].sent != i) continue;
            size_t o = it[k].offset < b ? b : it[k].offset > e ? e : it[k].offset;
            local[k] = m;
            t[m++] = (seg_tag_t){it[k].p, (size_t)(it[k].end - it[k].p), o - b, it[k].close, -1};
        }
        for (int k = 0; k < ni; k++) /* the mates within the sentence */
            if (it[k].tag && it[k].sent == i && it[k].close && it[k].mate >= 0 && it[it[k].mate].sent == i) {
                t[local[k]].mate = local[it[k].mate];
                t[local[it[k].mate]].mate = local[k];
            }
        free(local);
        g->tags[g->n - 1] = t;
        g->n_tags[g->n - 1] = nt;
    }
    for (int k = 0; k < ni; k++)
        if (it[k].tag && it[k].sent >= ns && add_literal(g, it[k].p, (size_t)(it[k].end - it[k].p))) *err = 1;
    /* the white space after the run's text */
    const char *b = run_end;
    if (!it[ni - 1].tag)
        while (b > it[ni - 1].p && is_ws(b[-1])) b--;
    if (add_literal(g, b, (size_t)(run_end - b))) *err = 1;
done:
    free(plain), free(stack);
    tern_sentences_free(sp_spans);
}

/* The text run at p (text, and the inline tags in it, up to another tag or the end): *pp past it. */
static void build_run(segments_t *g, const char **pp, const char *lang, int *err) {
    const char *p = *pp, *q = p;
    run_item_t *it = NULL;
    int ni = 0, cap = 0, tags = 0;
    while (*q) {
        run_item_t x;
        memset(&x, 0, sizeof x);
        if (tag_start(q)) {
            const char *end = tag_end(q);
            if (!strncmp(q, "<!--", 4) || !inline_tag(q, end, &x.close, &x.name, &x.nlen)) break;
            x.tag = 1, x.p = q, x.end = end;
            tags++;
        } else {
            const char *e = q + 1;
            while (*e && !tag_start(e)) e++;
            x.p = q, x.end = e;
        }
        if (ni == cap) {
            cap = cap ? 2 * cap : 8;
            run_item_t *n2 = realloc(it, (size_t)cap * sizeof *it);
            if (!n2) {
                *err = 1;
                free(it);
                *pp = p + strlen(p);
                return;
            }
            it = n2;
        }
        it[ni++] = x;
        q = x.end;
    }
    *pp = q;
    if (tags) {
        add_tagged_run(g, it, ni, p, q, lang, err);
        free(it);
        return;
    }
    free(it);
    const char *a = p, *b = q;
    while (a < b && is_ws(*a)) a++;
    while (b > a && is_ws(b[-1])) b--;
    char *text = a < b ? html_text(a, (size_t)(b - a)) : NULL;
    if (a < b && !text) *err = 1;
    if (text && *text) {
        if (add_literal(g, p, (size_t)(a - p))) *err = 1;
        add_sentences(g, text, strlen(text), text, 1, lang, err);
        if (add_literal(g, b, (size_t)(q - b))) *err = 1;
    } else {
        free(text);
        if (add_literal(g, p, (size_t)(q - p))) *err = 1;
    }
}

static void build_html(segments_t *g, const char *p, const char *lang, int *err) {
    while (*p && !*err) {
        if (tag_start(p)) {
            const char *end = tag_end(p);
            int close;
            const char *name;
            size_t nlen;
            if (strncmp(p, "<!--", 4) && inline_tag(p, end, &close, &name, &nlen)) {
                build_run(g, &p, lang, err);
                continue;
            }
            if (add_literal(g, p, (size_t)(end - p))) *err = 1;
            /* raw text elements: kept whole up to their end tag */
            const char *raw = !strncasecmp(p, "<script", 7) && (is_ws(p[7]) || p[7] == '>') ? "</script"
                              : !strncasecmp(p, "<style", 6) && (is_ws(p[6]) || p[6] == '>') ? "</style"
                                                                                               : NULL;
            p = end;
            if (raw) {
                const char *q = p;
                while (*q && strncasecmp(q, raw, strlen(raw))) q++;
                if (add_literal(g, p, (size_t)(q - p))) *err = 1;
                p = q;
            }
            continue;
        }
        build_run(g, &p, lang, err);
    }
}

int segments_build(segments_t *g, const char *const *items, int n_items, int html, const char *split_lang) {
    g->item_first = malloc((size_t)(n_items ? n_items : 1) * sizeof(int));
    g->item_count = malloc((size_t)(n_items ? n_items : 1) * sizeof(int));
    if (!g->item_first || !g->item_count) return -1;
    int err = 0;
    for (int i = 0; i < n_items && !err; i++) {
        g->item_first[i] = g->n_parts;
        if (html) build_html(g, items[i], split_lang, &err);
        else build_text(g, items[i], split_lang, &err);
        g->item_count[i] = g->n_parts - g->item_first[i];
    }
    return err ? -1 : 0;
}

typedef struct {
    char *s;
    size_t len, cap;
    int oom;
} sbuf_t;

static void sput(sbuf_t *b, const char *s, size_t n) {
    if (b->oom) return;
    if (b->len + n + 1 > b->cap) {
        size_t cap = (b->len + n + 1) * 2;
        char *p = realloc(b->s, cap);
        if (!p) {
            b->oom = 1;
            return;
        }
        b->s = p, b->cap = cap;
    }
    memcpy(b->s + b->len, s, n);
    b->len += n;
    b->s[b->len] = 0;
}

char *segments_join_tags(const segments_t *g, int item, int h, segment_text_fn text, segment_render_fn render,
                         void *ctx) {
    sbuf_t b = {0};
    int np = g->item_count[item];
    const seg_part_t *parts = np ? g->parts + g->item_first[item] : NULL;
    sput(&b, "", 0);
    for (int k = 0; k < np; k++) {
        if (parts[k].seg < 0) {
            sput(&b, parts[k].lit, parts[k].len);
            continue;
        }
        int seg = parts[k].seg;
        const char *t = text(ctx, seg, h);
        if (g->n_tags && g->n_tags[seg] > 0) { /* the translation with the sentence's inline tags */
            char *r = render ? render(ctx, seg, h, g->tags[seg], g->n_tags[seg])
                             : tags_project(g->seg[seg], t, g->tags[seg], g->n_tags[seg], NULL);
            if (!r) b.oom = 1;
            else sput(&b, r, strlen(r));
            free(r);
            continue;
        }
        for (; t && *t; t++) {
            if (parts[k].escape && *t == '&') sput(&b, "&amp;", 5);
            else if (parts[k].escape && *t == '<') sput(&b, "&lt;", 4);
            else if (parts[k].escape && *t == '>') sput(&b, "&gt;", 4);
            else sput(&b, t, 1);
        }
    }
    if (b.oom) {
        free(b.s);
        return NULL;
    }
    return b.s;
}

char *segments_join(const segments_t *g, int item, int h, segment_text_fn text, void *ctx) {
    return segments_join_tags(g, item, h, text, NULL, ctx);
}

static const char *nth_out(void *ctx, int seg, int h) {
    (void)h;
    return ((char **)ctx)[seg];
}

char *segments_translate_html(const char *doc, const char *split_lang, segments_translate_fn fn, void *ctx) {
    segments_t g = {0};
    const char *items[1] = {doc ? doc : ""};
    char *out = NULL, **outs = NULL;
    if (segments_build(&g, items, 1, 1, split_lang) == 0 &&
        (outs = calloc((size_t)(g.n ? g.n : 1), sizeof *outs)) &&
        (g.n == 0 || fn(ctx, (const char *const *)g.seg, g.n, outs) == 0))
        out = segments_join(&g, 0, 0, nth_out, outs);
    for (int i = 0; outs && i < g.n; i++) free(outs[i]);
    free(outs);
    segments_free(&g);
    return out;
}
