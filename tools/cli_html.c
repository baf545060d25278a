/* cli_html.c — `tern translate --format html`: the whole input is one HTML document, translated as
 * `tern serve` translates format "html" (src/serve/segments.h): the text between tags, inline tags
 * carried into their sentence's translation by the attention (src/serve/tags.h), everything else
 * kept. Sentences are split with --split-sentences (else a text run is one segment).
 * `tern translate --file-format txt|html|docx|odt`: a document cut into items by the server's
 * src/serve/docfile.c (/translate_file's code), the items translated the same way (format text or
 * html), the document rebuilt. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "batch/translator.h"
#include "cli.h"
#include "serve/docfile.h"
#include "serve/segments.h"
#include "text/vocab.h"

#define CHUNK 64

typedef struct {
    const tern_model_t *model;
    const segments_t *g;
    tern_result_t *res;          /* [g->n] */
    tern_attention_t *att;       /* [g->n] (segments with tags) */
    tern_token_scores_t *ts;     /* [g->n] */
    int max_input_length;
} html_ctx_t;

static const char *seg_text(void *ctx, int seg, int h) {
    const tern_result_t *r = &((html_ctx_t *)ctx)->res[seg];
    return r->num_hypotheses ? r->hypotheses[h < r->num_hypotheses ? h : 0] : NULL;
}

/* The source pieces the model reads for text (its first member's for an ensemble). */
static char **source_pieces(const html_ctx_t *c, const char *text, int *n) {
    const tern_model_t *m0 = c->model->n_members ? c->model->members[0] : c->model;
    int *ids = NULL, len = 0, trunc = 0;
    char **p = NULL;
    *n = 0;
    if (model_encode_source(m0, text, strlen(text), c->max_input_length, &ids, &len, &trunc) == TERN_OK && len > 0 &&
        (p = calloc((size_t)len, sizeof *p)))
        for (int i = 0; i < len; i++) {
            const char *piece = vocab_token(m0->src_vocab, ids[i]);
            if (!(p[i] = strdup(piece ? piece : ""))) break;
            *n = i + 1;
        }
    free(ids);
    return p;
}

static char *render(void *ctx, int seg, int h, const seg_tag_t *tags, int n_tags) {
    html_ctx_t *c = ctx;
    const tern_attention_t *att = &c->att[seg];
    const tern_token_scores_t *ts = &c->ts[seg];
    const char *hyp = seg_text(ctx, seg, h);
    int n_src = 0;
    char **src = NULL;
    tag_alignment_t al;
    int aligned = h == 0 && att->num_hypotheses > 0 && att->weights && att->weights[0] &&
                  ts->num_tokens - 1 == att->target_lengths[0] && (src = source_pieces(c, c->g->seg[seg], &n_src));
    if (aligned)
        al = (tag_alignment_t){(const char *const *)src, n_src, (const char *const *)ts->tokens, ts->num_tokens,
                               att->weights[0], att->target_lengths[0], att->source_length};
    char *out = tags_project(c->g->seg[seg], hyp, tags, n_tags, aligned ? &al : NULL);
    for (int i = 0; src && i < n_src; i++) free(src[i]);
    free(src);
    return out;
}

/* The whole of in, or NULL (an error set). */
static char *read_all(FILE *in) {
    size_t cap = 1 << 16, n = 0;
    char *s = malloc(cap);
    while (s) {
        n += fread(s + n, 1, cap - n - 1, in);
        if (ferror(in)) {
            free(s);
            tern_error(TERN_ERR_IO, "cannot read the input");
            return NULL;
        }
        if (feof(in)) break;
        char *s2 = n + 1 >= cap ? realloc(s, cap *= 2) : s;
        if (!s2) free(s);
        s = s2;
    }
    if (!s) {
        tern_error(TERN_ERR_NOMEM, "out of memory");
        return NULL;
    }
    s[n] = 0;
    size_t at = strlen(s);
    if (at != n) { /* a NUL byte: refused, not cut there */
        free(s);
        tern_error(TERN_ERR_INPUT, "the HTML input has a NUL byte at offset %zu", at);
        return NULL;
    }
    return s;
}

/* Translates n items (HTML when html) as the server does: outs[i] malloc'd (the caller frees). */
static tern_status_t translate_items(const tern_model_t *model, const tern_translator_options_t *options,
                                     const tern_request_t *base, const char *const *items, int n, int html,
                                     const char *split_lang, char **outs) {
    segments_t g = {0};
    tern_translator_t *tr = NULL;
    html_ctx_t c = {model, &g, NULL, NULL, NULL, options->max_input_length > 0 ? options->max_input_length : 1024};
    tern_status_t st = TERN_OK;
    if (segments_build(&g, items, n, html, split_lang && *split_lang ? split_lang : split_lang ? "" : NULL)) {
        st = tern_error(TERN_ERR_NOMEM, "out of memory");
        goto done;
    }
    size_t nn = (size_t)(g.n ? g.n : 1);
    c.res = calloc(nn, sizeof *c.res), c.att = calloc(nn, sizeof *c.att), c.ts = calloc(nn, sizeof *c.ts);
    if (!c.res || !c.att || !c.ts) {
        st = tern_error(TERN_ERR_NOMEM, "out of memory");
        goto done;
    }
    if ((st = tern_translator_create(&tr, model, options))) goto done;
    int tagged = 0;
    for (int i = 0; g.n_tags && i < g.n; i++) tagged |= g.n_tags[i] > 0;
    for (int i = 0; i < g.n && !st; i += CHUNK) {
        tern_request_t req = *base;
        req.sources = (const char *const *)g.seg + i;
        req.num_sources = g.n - i < CHUNK ? g.n - i : CHUNK;
        req.attention = tagged ? c.att + i : NULL;
        req.token_scores = tagged ? c.ts + i : NULL;
        st = tern_translate(tr, &req, c.res + i);
    }
    for (int k = 0; k < n && !st; k++)
        if (!(outs[k] = segments_join_tags(&g, k, 0, seg_text, render, &c))) st = tern_error(TERN_ERR_NOMEM, "out of memory");
done:
    for (int i = 0; i < g.n; i++) {
        if (c.res) tern_result_free(&c.res[i]);
        if (c.att) tern_attention_free(&c.att[i]);
        if (c.ts) tern_token_scores_free(&c.ts[i]);
    }
    free(c.res), free(c.att), free(c.ts);
    tern_translator_free(tr);
    segments_free(&g);
    return st;
}

tern_status_t cli_translate_html(const tern_model_t *model, const tern_translator_options_t *options,
                                 const tern_request_t *base, FILE *in, FILE *out, const char *split_lang) {
    char *doc = read_all(in);
    if (!doc) return strstr(tern_last_error(), "NUL") ? TERN_ERR_INPUT : strstr(tern_last_error(), "memory") ? TERN_ERR_NOMEM : TERN_ERR_IO;
    const char *items[1] = {doc};
    char *txt = NULL;
    tern_status_t st = translate_items(model, options, base, items, 1, 1, split_lang, &txt);
    if (!st && (fputs(txt, out) < 0 || fflush(out) != 0)) st = tern_error(TERN_ERR_IO, "cannot write the output");
    free(txt);
    free(doc);
    return st;
}

/* The bytes of in (*len), or NULL (an error set); at most limit bytes. */
static char *read_bytes(FILE *in, size_t limit, size_t *len) {
    size_t cap = 1 << 16, n = 0;
    char *s = malloc(cap);
    while (s) {
        n += fread(s + n, 1, cap - n, in);
        if (ferror(in)) {
            free(s);
            tern_error(TERN_ERR_IO, "cannot read the input");
            return NULL;
        }
        if (feof(in)) break;
        if (n > limit) {
            free(s);
            tern_error(TERN_ERR_INPUT, "the input is larger than %zu bytes", limit);
            return NULL;
        }
        char *s2 = n == cap ? realloc(s, cap *= 2) : s;
        if (!s2) free(s);
        s = s2;
    }
    if (!s) tern_error(TERN_ERR_NOMEM, "out of memory");
    *len = n;
    return s;
}

tern_status_t cli_translate_document(const tern_model_t *model, const tern_translator_options_t *options,
                                     const tern_request_t *base, int kind, FILE *in, FILE *out,
                                     const char *split_lang) {
    size_t len = 0;
    char *data = read_bytes(in, (size_t)1 << 30, &len);
    if (!data) return strstr(tern_last_error(), "memory") ? TERN_ERR_NOMEM : strstr(tern_last_error(), "larger") ? TERN_ERR_INPUT : TERN_ERR_IO;
    doc_t *d = NULL;
    char err[512];
    doc_limits_t lim = {(size_t)1 << 30, 100000};
    int ds = doc_open(&d, (doc_kind_t)kind, data, len, &lim, err, sizeof err);
    free(data);
    if (ds) return tern_error(ds == 500 ? TERN_ERR_NOMEM : TERN_ERR_INPUT, "%s", err);
    int n = doc_num_items(d);
    const char **items = calloc((size_t)(n ? n : 1), sizeof *items);
    char **outs = calloc((size_t)(n ? n : 1), sizeof *outs);
    tern_status_t st = TERN_OK;
    if (!items || !outs) st = tern_error(TERN_ERR_NOMEM, "out of memory");
    for (int i = 0; !st && i < n; i++) items[i] = doc_item(d, i);
    if (!st && n > 0) st = translate_items(model, options, base, items, n, doc_items_html(d), split_lang, outs);
    for (int i = 0; !st && i < n; i++)
        if (doc_set(d, i, outs[i])) st = tern_error(TERN_ERR_NOMEM, "out of memory");
    char *bytes = NULL;
    size_t blen = 0;
    if (!st && doc_write(d, &bytes, &blen, err, sizeof err)) st = tern_error(TERN_ERR_NOMEM, "%s", err);
    if (!st && (fwrite(bytes, 1, blen, out) != blen || fflush(out) != 0))
        st = tern_error(TERN_ERR_IO, "cannot write the output");
    free(bytes);
    for (int i = 0; outs && i < n; i++) free(outs[i]);
    free(outs);
    free(items);
    doc_free(d);
    return st;
}
