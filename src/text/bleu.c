/* bleu.c — sacreBLEU-exact BLEU (corpus and sentence) and the n-gram tables the scorers share.
 *
 * Dimension letters: N sentences, R references per sentence. */
#include "text/score.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef __clang__
#pragma STDC FP_CONTRACT OFF /* sacreBLEU's formulas, operation for operation (gcc: -std=c11 is off) */
#endif

/* ---------------------------------------------------------------- hashing and tables */

static inline uint64_t mix64(uint64_t h) {
    h ^= h >> 33;
    h *= 0xff51afd7ed558ccdULL;
    h ^= h >> 33;
    h *= 0xc4ceb9fe1a85ec53ULL;
    h ^= h >> 33;
    return h;
}

static uint64_t hash_units(const uint32_t *u, int n, int kind) {
    uint64_t h = 0x9E3779B97F4A7C15ULL * (uint64_t)(kind * 64 + n + 1);
    for (int i = 0; i < n; i++) h = (h ^ u[i]) * 0x100000001B3ULL + (h >> 29);
    return mix64(h) | 1; /* never 0: 0 marks an empty slot */
}

static uint64_t hash_bytes(const char *s, uint32_t len) {
    uint64_t h = 0xcbf29ce484222325ULL ^ len;
    for (uint32_t i = 0; i < len; i++) h = (h ^ (unsigned char)s[i]) * 0x100000001B3ULL;
    return mix64(h) | 1;
}

static size_t pow2_at_least(size_t n) {
    size_t c = 64;
    while (c < n) c *= 2;
    return c;
}

tern_status_t ngram_table_reset(ngram_table_t *t, size_t expected) {
    size_t cap = pow2_at_least(2 * expected + 1);
    if (cap > t->alloc) {
        free(t->e);
        t->e = malloc(cap * sizeof *t->e);
        if (!t->e) {
            t->alloc = t->cap = t->used = 0;
            return tern_error(TERN_ERR_NOMEM, "n-gram table: out of memory (%zu entries)", cap);
        }
        t->alloc = cap;
    }
    t->cap = cap;
    t->used = 0;
    memset(t->e, 0, cap * sizeof *t->e);
    return TERN_OK;
}

void ngram_table_free(ngram_table_t *t) {
    free(t->e);
    memset(t, 0, sizeof *t);
}

ngram_entry_t *ngram_table_get(ngram_table_t *t, const uint32_t *seq, int kind, uint32_t start,
                               int n, int insert) {
    uint64_t h = hash_units(seq + start, n, kind);
    size_t mask = t->cap - 1, i = (size_t)h & mask;
    for (;;) {
        ngram_entry_t *e = &t->e[i];
        if (!e->hash) {
            if (!insert || t->used + 1 >= t->cap) return NULL;
            e->hash = h;
            e->seq = seq;
            e->start = start;
            e->n = (uint16_t)n;
            e->kind = (uint16_t)kind;
            e->ref_id = -1;
            t->used++;
            return e;
        }
        if (e->hash == h && e->n == n && e->kind == kind &&
            !memcmp(e->seq + e->start, seq + start, (size_t)n * sizeof *seq))
            return e;
        i = (i + 1) & mask;
    }
}

tern_status_t str_intern_reset(str_intern_t *in, size_t expected) {
    size_t cap = pow2_at_least(2 * expected + 1);
    if (cap > in->alloc) {
        free(in->slot);
        in->slot = malloc(cap * sizeof *in->slot);
        if (!in->slot) {
            in->alloc = in->cap = in->used = 0;
            return tern_error(TERN_ERR_NOMEM, "token table: out of memory");
        }
        in->alloc = cap;
    }
    in->cap = cap;
    in->used = 0;
    memset(in->slot, 0, cap * sizeof *in->slot);
    return TERN_OK;
}

void str_intern_free(str_intern_t *in) {
    free(in->slot);
    memset(in, 0, sizeof *in);
}

uint32_t str_intern_id(str_intern_t *in, const char *s, uint32_t len, int insert) {
    uint64_t h = hash_bytes(s, len);
    size_t mask = in->cap - 1, i = (size_t)h & mask;
    for (;;) {
        struct intern_slot *sl = &in->slot[i];
        if (!sl->hash) {
            if (!insert || in->used + 1 >= in->cap) return INTERN_ABSENT;
            sl->hash = h;
            sl->s = s;
            sl->len = len;
            sl->id = (uint32_t)in->used++;
            return sl->id;
        }
        if (sl->hash == h && sl->len == len && !memcmp(sl->s, s, len)) return sl->id;
        i = (i + 1) & mask;
    }
}

size_t tokens_to_ids(uint32_t **ids, size_t *cap, str_intern_t *in, const char *text, size_t len,
                     int insert) {
    size_t n = 0;
    size_t i = 0;
    while (i < len) {
        while (i < len && text[i] == ' ') i++;
        if (i >= len) break;
        size_t j = i;
        while (j < len && text[j] != ' ') j++;
        if (n == *cap) {
            size_t c = *cap ? 2 * *cap : 64;
            uint32_t *p = realloc(*ids, c * sizeof *p);
            if (!p) return (size_t)-1;
            *ids = p;
            *cap = c;
        }
        (*ids)[n++] = str_intern_id(in, text + i, (uint32_t)(j - i), insert);
        i = j;
    }
    return n;
}

/* ---------------------------------------------------------------- options, workspace */

bleu_options_t bleu_default_options(void) {
    bleu_options_t o;
    memset(&o, 0, sizeof o);
    o.tokenize = SCORE_TOK_13A;
    o.lowercase = 0;
    o.max_order = BLEU_MAX_ORDER;
    o.smooth = BLEU_SMOOTH_EXP;
    o.smooth_value = -1;
    o.effective_order = 0;
    return o;
}

void bleu_workspace_free(bleu_workspace_t *ws) {
    text_buf_free(&ws->tb);
    for (int i = 0; i < ws->nside; i++) {
        free(ws->tok[i]);
        free(ws->ids[i]);
    }
    free(ws->tok);
    free(ws->tok_cap);
    free(ws->ids);
    free(ws->ids_cap);
    free(ws->ids_len);
    str_intern_free(&ws->intern);
    ngram_table_free(&ws->table);
    memset(ws, 0, sizeof *ws);
}

static tern_status_t ws_sides(bleu_workspace_t *ws, int nside) {
    if (nside <= ws->nside) return TERN_OK;
    char **tok = realloc(ws->tok, (size_t)nside * sizeof *tok);
    if (tok) ws->tok = tok;
    size_t *tc = realloc(ws->tok_cap, (size_t)nside * sizeof *tc);
    if (tc) ws->tok_cap = tc;
    uint32_t **ids = realloc(ws->ids, (size_t)nside * sizeof *ids);
    if (ids) ws->ids = ids;
    size_t *ic = realloc(ws->ids_cap, (size_t)nside * sizeof *ic);
    if (ic) ws->ids_cap = ic;
    size_t *il = realloc(ws->ids_len, (size_t)nside * sizeof *il);
    if (il) ws->ids_len = il;
    if (!tok || !tc || !ids || !ic || !il) return tern_error(TERN_ERR_NOMEM, "BLEU: out of memory");
    for (int i = ws->nside; i < nside; i++) {
        ws->tok[i] = NULL;
        ws->tok_cap[i] = 0;
        ws->ids[i] = NULL;
        ws->ids_cap[i] = 0;
        ws->ids_len[i] = 0;
    }
    ws->nside = nside;
    return TERN_OK;
}

tern_status_t bleu_prepare(bleu_workspace_t *ws, const char *hyp, const char *const *refs,
                             const bleu_options_t *o, int R) {
    if (R < 1) return tern_error(TERN_ERR_INVALID_ARG, "BLEU: no reference");
    tern_status_t st = ws_sides(ws, R + 1);
    if (st) return st;
    for (int s = 0; s <= R; s++) {
        const char *line = s == 0 ? hyp : refs[s - 1];
        if (!line) return tern_error(TERN_ERR_INVALID_ARG, "BLEU: NULL %s", s ? "reference" : "hypothesis");
        const char *t;
        size_t tl;
        if ((st = text_tokenize(&t, &tl, &ws->tb, line, o->tokenize, o->lowercase))) return st;
        if (tl + 1 > ws->tok_cap[s]) {
            char *p = realloc(ws->tok[s], tl + 1);
            if (!p) return tern_error(TERN_ERR_NOMEM, "BLEU: out of memory");
            ws->tok[s] = p;
            ws->tok_cap[s] = tl + 1;
        }
        memcpy(ws->tok[s], t, tl + 1);
        if (s == 0 && (st = str_intern_reset(&ws->intern, tl / 2 + 1))) return st;
        size_t n = tokens_to_ids(&ws->ids[s], &ws->ids_cap[s], &ws->intern, ws->tok[s], tl, s == 0);
        if (n == (size_t)-1) return tern_error(TERN_ERR_NOMEM, "BLEU: out of memory");
        ws->ids_len[s] = n;
    }
    return TERN_OK;
}

tern_status_t bleu_count_hyp(bleu_workspace_t *ws, int max_order) {
    size_t L = ws->ids_len[0];
    tern_status_t st = ngram_table_reset(&ws->table, L * (size_t)max_order);
    if (st) return st;
    for (int n = 1; n <= max_order; n++)
        for (size_t i = 0; i + (size_t)n <= L; i++) {
            ngram_entry_t *e = ngram_table_get(&ws->table, ws->ids[0], 0, (uint32_t)i, n, 1);
            if (!e) return tern_error(TERN_ERR_INTERNAL, "n-gram table full");
            e->hyp++;
        }
    return TERN_OK;
}

void bleu_count_ref(bleu_workspace_t *ws, int r, int max_order) {
    const uint32_t *ids = ws->ids[1 + r];
    size_t L = ws->ids_len[1 + r];
    for (int n = 1; n <= max_order; n++)
        for (size_t i = 0; i + (size_t)n <= L; i++) {
            int absent = 0;
            for (int k = 0; k < n && !absent; k++) absent = ids[i + k] == INTERN_ABSENT;
            if (absent) continue;
            ngram_entry_t *e = ngram_table_get(&ws->table, ids, 0, (uint32_t)i, n, 0);
            if (!e) continue;
            if (e->ref_id != r) {
                e->ref_id = r;
                e->ref_cur = 0;
            }
            if (++e->ref_cur > e->ref_max) e->ref_max = e->ref_cur;
        }
}

tern_status_t bleu_sentence_stats(bleu_stats_t *st, bleu_workspace_t *ws, const char *hyp,
                                  const char *const *refs, const bleu_options_t *o, int R) {
    int N = o->max_order;
    if (N < 1 || N > BLEU_MAX_ORDER)
        return tern_error(TERN_ERR_INVALID_ARG, "BLEU: max_order %d not in 1..%d", N, BLEU_MAX_ORDER);
    tern_status_t s = bleu_prepare(ws, hyp, refs, o, R);
    if (s) return s;
    if ((s = bleu_count_hyp(ws, N))) return s;
    for (int r = 0; r < R; r++) bleu_count_ref(ws, r, N);
    memset(st, 0, sizeof *st);
    for (size_t i = 0; i < ws->table.cap; i++) {
        const ngram_entry_t *e = &ws->table.e[i];
        if (!e->hash) continue;
        st->total[e->n - 1] += e->hyp;
        st->correct[e->n - 1] += e->hyp < e->ref_max ? e->hyp : e->ref_max;
    }
    int64_t hyp_len = (int64_t)ws->ids_len[0];
    int64_t best = -1, best_diff = -1;
    for (int r = 0; r < R; r++) {
        int64_t rl = (int64_t)ws->ids_len[1 + r];
        int64_t d = hyp_len > rl ? hyp_len - rl : rl - hyp_len;
        if (best_diff < 0 || d < best_diff) {
            best_diff = d;
            best = rl;
        } else if (d == best_diff && rl < best) {
            best = rl;
        }
    }
    st->hyp_len = hyp_len;
    st->ref_len = best;
    return TERN_OK;
}

static void stats_add(bleu_stats_t *a, const bleu_stats_t *b) {
    a->hyp_len += b->hyp_len;
    a->ref_len += b->ref_len;
    for (int n = 0; n < BLEU_MAX_ORDER; n++) {
        a->correct[n] += b->correct[n];
        a->total[n] += b->total[n];
    }
}

tern_status_t bleu_corpus_stats(bleu_stats_t *per_sentence, bleu_stats_t *total,
                                const char *const *hyps, const char *const *const *refs,
                                const bleu_options_t *o, size_t N, int R) {
    bleu_workspace_t ws;
    memset(&ws, 0, sizeof ws);
    memset(total, 0, sizeof *total);
    const char **rr = malloc((size_t)(R > 0 ? R : 1) * sizeof *rr);
    if (!rr) return tern_error(TERN_ERR_NOMEM, "BLEU: out of memory");
    tern_status_t s = TERN_OK;
    for (size_t i = 0; i < N; i++) {
        for (int r = 0; r < R; r++) rr[r] = refs[r][i];
        bleu_stats_t st;
        if ((s = bleu_sentence_stats(&st, &ws, hyps[i], rr, o, R))) {
            tern_error_prefix(s, "BLEU: sentence %zu", i + 1);
            break;
        }
        if (per_sentence) per_sentence[i] = st;
        stats_add(total, &st);
    }
    free(rr);
    bleu_workspace_free(&ws);
    return s;
}

static double my_log(double x) { return x == 0.0 ? -9999999999.0 : log(x); }

bleu_result_t bleu_compute(const bleu_stats_t *st, const bleu_options_t *o) {
    bleu_result_t r;
    memset(&r, 0, sizeof r);
    int N = o->max_order < 1 ? 1 : o->max_order > BLEU_MAX_ORDER ? BLEU_MAX_ORDER : o->max_order;
    r.max_order = N;
    r.hyp_len = st->hyp_len;
    r.ref_len = st->ref_len;
    r.ratio = st->ref_len ? (double)st->hyp_len / (double)st->ref_len : 0.0;
    double sv = o->smooth_value;
    if (sv < 0) sv = o->smooth == BLEU_SMOOTH_FLOOR ? 0.1 : 1.0;

    r.bp = 1.0;
    if (st->hyp_len < st->ref_len)
        r.bp = st->hyp_len > 0 ? exp(1.0 - (double)st->ref_len / (double)st->hyp_len) : 0.0;

    int any = 0;
    for (int n = 0; n < N; n++) any |= st->correct[n] != 0;
    if (!any) return r; /* score 0, precisions 0 (sacreBLEU #141) */

    double smooth_mteval = 1.0;
    int eff_order = N;
    for (int n = 1; n <= N; n++) {
        double correct = (double)st->correct[n - 1], total = (double)st->total[n - 1];
        if (o->smooth == BLEU_SMOOTH_ADD_K && n > 1) {
            correct += sv;
            total += sv;
        }
        if (total == 0) break;
        if (o->effective_order) eff_order = n;
        if (correct == 0) {
            if (o->smooth == BLEU_SMOOTH_EXP) {
                smooth_mteval *= 2;
                r.precisions[n - 1] = 100. / (smooth_mteval * total);
            } else if (o->smooth == BLEU_SMOOTH_FLOOR) {
                r.precisions[n - 1] = 100. * sv / total;
            }
        } else {
            r.precisions[n - 1] = 100. * correct / total;
        }
    }
    double sum = 0.0; /* Python's sum(): left to right */
    for (int n = 0; n < eff_order; n++) sum += my_log(r.precisions[n]);
    r.score = r.bp * exp(sum / eff_order);
    return r;
}

tern_status_t bleu_corpus(bleu_result_t *res, const char *const *hyps,
                          const char *const *const *refs, const bleu_options_t *o, size_t N, int R) {
    bleu_stats_t total;
    tern_status_t s = bleu_corpus_stats(NULL, &total, hyps, refs, o, N, R);
    if (s) return s;
    *res = bleu_compute(&total, o);
    return TERN_OK;
}

tern_status_t bleu_sentence(bleu_result_t *res, bleu_workspace_t *ws, const char *hyp,
                            const char *const *refs, const bleu_options_t *o, int R) {
    bleu_stats_t st;
    tern_status_t s = bleu_sentence_stats(&st, ws, hyp, refs, o, R);
    if (s) return s;
    *res = bleu_compute(&st, o);
    return TERN_OK;
}

double bleu_stats_score(const int64_t *stats, const void *user_data) {
    bleu_stats_t st;
    memcpy(&st, stats, sizeof st);
    return bleu_compute(&st, (const bleu_options_t *)user_data).score;
}

void bleu_signature(char *buf, size_t size, const bleu_options_t *o, int R) {
    char smooth[32];
    switch (o->smooth) {
    case BLEU_SMOOTH_EXP: snprintf(smooth, sizeof smooth, "exp"); break;
    case BLEU_SMOOTH_NONE: snprintf(smooth, sizeof smooth, "none"); break;
    case BLEU_SMOOTH_FLOOR:
        snprintf(smooth, sizeof smooth, "floor[%.2f]", o->smooth_value < 0 ? 0.1 : o->smooth_value);
        break;
    case BLEU_SMOOTH_ADD_K:
        snprintf(smooth, sizeof smooth, "add-k[%.2f]", o->smooth_value < 0 ? 1.0 : o->smooth_value);
        break;
    }
    snprintf(buf, size, "nrefs:%d|case:%s|eff:%s|tok:%s|smooth:%s|version:tern-%s", R,
             o->lowercase ? "lc" : "mixed", o->effective_order ? "yes" : "no",
             score_tokenizer_name(o->tokenize), smooth, TERN_VERSION);
}

void bleu_format(char *buf, size_t size, const bleu_result_t *r, int width) {
    size_t k = (size_t)snprintf(buf, size, "%.*f ", width, r->score);
    for (int n = 0; n < r->max_order && k < size; n++)
        k += (size_t)snprintf(buf + k, size - k, "%s%.1f", n ? "/" : "", r->precisions[n]);
    if (k < size)
        snprintf(buf + k, size - k, " (BP = %.3f ratio = %.3f hyp_len = %lld ref_len = %lld)", r->bp,
                 r->ratio, (long long)r->hyp_len, (long long)r->ref_len);
}
