/*
 * fuzz_segments.c — the cutting of /translate texts into segments and back (src/serve/segments.c),
 * on arbitrary bytes: the first byte picks plain text or HTML ('t', 'h'; 's' and 'H' the same with
 * sentence splitting for English, ICU's break iterator), the rest is the text (made
 * NUL-terminated, as cJSON hands it over). Checks: no crash, overflow, undefined behaviour or leak
 * (ASan/UBSan/LSan); every segment non-empty; in plain text, putting every segment back as it is
 * gives the text again with the "\r" before each line end dropped; in HTML, the same with
 * doubled segments has each of them twice (the lengths add up) and parsing the output again is
 * stable (a second round gives the first round's output). Inline tags (<b>, <a href>, ...) stay
 * in their sentence's segment and are put back by tags_project() (without an alignment): the
 * output has the input's tags, in order, none dropped or doubled, and so has a second round,
 * with the same text (a space may move from one side of a tag to the other); each tag is put
 * back once, so the doubled output is still longer by exactly the segments' text.
 *
 * TERN_FUZZ_SEEDS=DIR makes LLVMFuzzerInitialize write seed texts into DIR (scripts/fuzz_ci.sh).
 */
#include <ctype.h>
#include <stdint.h>
#include <strings.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "serve/segments.h"

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const char *const seeds[] = {
    "tA man is riding a bicycle.\nTwo dogs.\r\n\nThe end",
    ("h<p>A man is riding\n a bicycle.</p><p class=\"x\"> Two <b>dogs</b> play. </p><!-- c -->"
     "<script>if (a < b) x();</script><style>p{}</style>Tom &amp; Jerry &lt; 3 &#x263A; &#169;&nbsp;<br/>"),
    "h a < b && c > d &unknown; &#;&#x; &#99999999999; <!-- unterminated",
    "h<SCRIPT>never closed",
    "sMr. Smith rides a bicycle.  A dog runs?!\r\n  \"Go.\" 3.5 p.m. \xe4\xbb\x8a\xe3\x80\x82\xff end",
    "H<p>One sentence. Another <b>one</b>!  Third.</p><li>Dr. X &amp; Y. Z.",
    /* inline tags carried inside their sentence (src/serve/tags.c): nested, broken, crossing */
    "H<p>A man rides a <b>red</b> bicycle. <a href=\"x?a=1&amp;b=2\">Two <i>dogs</i></a> play.</p>",
    "h<b><i>crossing</b> tags</i> here. </b>stray <u>unclosed <span></span>empty <em>a. B</em>.",
    "H  <b>Sentence one. Sentence two</b> ends.\n<i> </i><code>x &lt; y</code> ab<b></b>c <sup>2</sup>",
};

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc, (void)argv;
    const char *dir = getenv("TERN_FUZZ_SEEDS");
    if (!dir) return 0;
    for (size_t i = 0; i < sizeof seeds / sizeof seeds[0]; i++) {
        char path[1024];
        snprintf(path, sizeof path, "%s/seed%zu", dir, i);
        FILE *f = fopen(path, "wb");
        if (!f) continue;
        fwrite(seeds[i], 1, strlen(seeds[i]), f);
        fclose(f);
    }
    return 0;
}

static const char *same(void *ctx, int seg, int h) {
    (void)h;
    return ((segments_t *)ctx)->seg[seg];
}

static char doubled_buf[1 << 16];
static const char *twice(void *ctx, int seg, int h) {
    (void)h;
    const char *t = ((segments_t *)ctx)->seg[seg];
    size_t n = strlen(t);
    if (2 * n + 1 > sizeof doubled_buf) return t;
    memcpy(doubled_buf, t, n);
    memcpy(doubled_buf + n, t, n + 1);
    return doubled_buf;
}

static const char *split_lang;

/* The tags of an HTML text as segments.c reads them ('<' and a letter, '/', '!' or '?' up to '>';
 * comments; the content of <script> and <style> skipped), concatenated with a NUL after each. */
static char *tag_list(const char *p, size_t *n) {
    size_t cap = strlen(p) * 2 + 1, k = 0;
    char *out = malloc(cap);
    if (!out) abort();
    while (*p) {
        if (!(*p == '<' && (isalpha((unsigned char)p[1]) || p[1] == '/' || p[1] == '!' || p[1] == '?'))) {
            p++;
            continue;
        }
        const char *e;
        if (!strncmp(p, "<!--", 4)) e = strstr(p + 4, "-->") ? strstr(p + 4, "-->") + 3 : p + strlen(p);
        else e = strchr(p, '>') ? strchr(p, '>') + 1 : p + strlen(p);
        memcpy(out + k, p, (size_t)(e - p));
        k += (size_t)(e - p);
        out[k++] = 0;
        const char *raw = !strncasecmp(p, "<script", 7) && (p[7] == '>' || isspace((unsigned char)p[7])) ? "</script"
                          : !strncasecmp(p, "<style", 6) && (p[6] == '>' || isspace((unsigned char)p[6])) ? "</style"
                                                                                                          : NULL;
        p = e;
        if (raw)
            while (*p && strncasecmp(p, raw, strlen(raw))) p++;
    }
    *n = k;
    return out;
}

/* The text without tags and without white space. */
static char *bare(const char *p) {
    char *out = malloc(strlen(p) + 1), *d = out;
    if (!out) abort();
    size_t nt;
    char *t = tag_list(p, &nt);
    free(t);
    while (*p) {
        if (*p == '<' && (isalpha((unsigned char)p[1]) || p[1] == '/' || p[1] == '!' || p[1] == '?')) {
            const char *e = !strncmp(p, "<!--", 4) ? (strstr(p + 4, "-->") ? strstr(p + 4, "-->") + 3 : p + strlen(p))
                                                  : (strchr(p, '>') ? strchr(p, '>') + 1 : p + strlen(p));
            p = e;
            continue;
        }
        if (!isspace((unsigned char)*p)) *d++ = *p;
        p++;
    }
    *d = 0;
    return out;
}

static int same_tags(const char *a, const char *b) {
    size_t na, nb;
    char *ta = tag_list(a, &na), *tb = tag_list(b, &nb);
    int ok = na == nb && !memcmp(ta, tb, na);
    free(ta), free(tb);
    return ok;
}

static char *round_trip(const char *text, int html, segment_text_fn fn, segments_t *keep) {
    segments_t g = {0};
    const char *items[1] = {text};
    char *out = NULL;
    if (segments_build(&g, items, 1, html, split_lang) == 0) {
        for (int i = 0; i < g.n; i++)
            if (!g.seg[i][0]) abort(); /* an empty segment */
        out = segments_join(&g, 0, 0, fn, &g);
    }
    if (keep) *keep = g;
    else segments_free(&g);
    return out;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1 || size > 16384) return 0;
    int html = data[0] == 'h' || data[0] == 'H';
    split_lang = data[0] == 's' || data[0] == 'H' ? "en" : NULL;
    char *text = malloc(size);
    if (!text) return 0;
    memcpy(text, data + 1, size - 1);
    text[size - 1] = 0;
    char *out = round_trip(text, html, same, NULL);
    if (!out) abort();
    if (!html) {
        /* the text without the "\r" before each "\n" (and at the end), cut at the first NUL */
        size_t n = strlen(text), k = 0;
        char *want = malloc(n + 1);
        for (size_t i = 0; i < n; i++)
            if (!(text[i] == '\r' && (i + 1 == n || text[i + 1] == '\n'))) want[k++] = text[i];
        want[k] = 0;
        if (strcmp(out, want)) abort();
        free(want);
    } else {
        segments_t g1;
        char *again = round_trip(out, 1, same, NULL);
        free(round_trip(text, 1, same, &g1));
        int tagged = 0;
        for (int i = 0; i < g1.n; i++) tagged |= g1.n_tags[i] > 0;
        segments_free(&g1);
        if (!again) abort();
        if (!tagged && strcmp(again, out)) abort(); /* no inline tags: stable */
        if (tagged) { /* inline tags: never dropped, doubled or reordered; the text kept (its spaces
                         may move around a tag) */
            if (!same_tags(text, out) || !same_tags(out, again)) abort();
            char *b1 = bare(out), *b2 = bare(again);
            if (strcmp(b1, b2)) abort();
            free(b1), free(b2);
        }
        free(again);
        segments_t g;
        char *dbl = round_trip(text, 1, twice, &g);
        size_t extra = 0;
        for (int i = 0; i < g.n; i++) {
            size_t e = 0;
            for (const char *t = g.seg[i]; *t; t++) e += *t == '&' ? 5 : *t == '<' || *t == '>' ? 4 : 1;
            if (2 * strlen(g.seg[i]) + 1 <= sizeof doubled_buf) extra += e;
        }
        if (!dbl || strlen(dbl) != strlen(out) + extra) abort();
        free(dbl);
        segments_free(&g);
    }
    free(out);
    free(text);
    return 0;
}
