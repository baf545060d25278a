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
    free(g->seg), free(g->ntok), free(g->parts), free(g->item_first), free(g->item_count);
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
        g->cap = cap;
    }
    g->seg[g->n] = text;
    g->ntok[g->n] = 0;
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

/* Decodes character references and collapses white space of text[0..len) into a new string. */
static char *html_text(const char *t, size_t len) {
    char *out = malloc(len + 1), *d = out; /* a reference never decodes longer than it is written */
    if (!out) return NULL;
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
    while (d > out && d[-1] == ' ') d--;
    *d = 0;
    return out;
}

static void build_html(segments_t *g, const char *p, const char *lang, int *err) {
    while (*p) {
        if (*p == '<' && (isalpha((unsigned char)p[1]) || p[1] == '/' || p[1] == '!' || p[1] == '?')) {
            const char *end;
            if (!strncmp(p, "<!--", 4)) {
                const char *c = strstr(p + 4, "-->");
                end = c ? c + 3 : p + strlen(p);
            } else {
                const char *gt = strchr(p, '>');
                end = gt ? gt + 1 : p + strlen(p);
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
        const char *q = p + 1;
        while (*q && !(*q == '<' && (isalpha((unsigned char)q[1]) || q[1] == '/' || q[1] == '!' || q[1] == '?'))) q++;
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
        p = q;
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

char *segments_join(const segments_t *g, int item, int h, segment_text_fn text, void *ctx) {
    size_t len = 0;
    int np = g->item_count[item];
    const seg_part_t *parts = np ? g->parts + g->item_first[item] : NULL;
    for (int k = 0; k < np; k++) {
        if (parts[k].seg < 0) {
            len += parts[k].len;
            continue;
        }
        const char *t = text(ctx, parts[k].seg, h);
        len += t ? (parts[k].escape ? 5 : 1) * strlen(t) : 0; /* "&amp;" is the longest escape */
    }
    char *out = malloc(len + 1), *d = out;
    if (!out) return NULL;
    for (int k = 0; k < np; k++) {
        if (parts[k].seg < 0) {
            memcpy(d, parts[k].lit, parts[k].len);
            d += parts[k].len;
            continue;
        }
        const char *t = text(ctx, parts[k].seg, h);
        for (; t && *t; t++) {
            if (parts[k].escape && *t == '&') memcpy(d, "&amp;", 5), d += 5;
            else if (parts[k].escape && *t == '<') memcpy(d, "&lt;", 4), d += 4;
            else if (parts[k].escape && *t == '>') memcpy(d, "&gt;", 4), d += 4;
            else *d++ = *t;
        }
    }
    *d = 0;
    return out;
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
