/* align.c — IBM Model 2 with a diagonal prior (fast_align's), trained by EM (align.h).
 *
 * The lexical table is sparse: one entry per (source, target) id pair that occurs together in a
 * sentence pair, found through an open-addressing hash of 64-bit keys. Each sentence pair's
 * entries are looked up once, before the first iteration (idx: (m + 1) x n per pair), so the EM
 * iterations are plain array passes. Legend: m source length, n target length, i source position
 * (0 = NULL), j target position. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/hash64.h"
#include "text/align.h"

struct align_model {
    align_options_t opt;
    int src_vocab, tgt_vocab;
    hash64_t pairs;   /* (e + 1) << 32 | f -> entry */
    double *t;        /* (entries) t(f | e) */
};

align_options_t align_default_options(void) {
    align_options_t o = {5, 0.08, 4.0};
    return o;
}

static uint64_t pair_key(int e, int f) { return ((uint64_t)(uint32_t)(e + 1) << 32) | (uint32_t)f; }

/* Weights of a_j = i for i = 0..m (prior times t), into w (m + 1); returns their sum. */
static double position_weights(const align_model_t *am, const int32_t *idx_j, const double *t, int m,
                               int n, int j, double *w) {
    const double p0 = am->opt.p0, lam = am->opt.tension;
    double z = 0;
    for (int i = 1; i <= m; i++) {
        w[i] = exp(-lam * fabs((double)i / m - (double)(j + 1) / n));
        z += w[i];
    }
    double sum = w[0] = p0 * (idx_j[0] >= 0 ? t[idx_j[0]] : 0);
    for (int i = 1; i <= m; i++) {
        w[i] = (1 - p0) * w[i] / z * (idx_j[i] >= 0 ? t[idx_j[i]] : 0);
        sum += w[i];
    }
    return sum;
}

tern_status_t align_train(align_model_t **out, const align_corpus_t *c, int src_vocab, int tgt_vocab,
                          const align_options_t *opt) {
    *out = NULL;
    tern_status_t st = TERN_OK;
    align_model_t *am = calloc(1, sizeof *am);
    if (!am) return tern_error(TERN_ERR_NOMEM, "align: out of memory");
    am->opt = opt ? *opt : align_default_options();
    am->src_vocab = src_vocab;
    am->tgt_vocab = tgt_vocab;
    if (am->opt.iterations < 1 || am->opt.p0 < 0 || am->opt.p0 >= 1 || am->opt.tension < 0) {
        free(am);
        return tern_error(TERN_ERR_INVALID_ARG, "align: iterations >= 1, 0 <= p0 < 1, tension >= 0");
    }
    /* per pair: offsets into one index array of (m + 1) * n entries */
    size_t *off = malloc(((size_t)c->n + 1) * sizeof *off);
    if (!off) {
        free(am);
        return tern_error(TERN_ERR_NOMEM, "align: out of memory");
    }
    size_t total = 0;
    int max_m = 0;
    for (int s = 0; s < c->n; s++) {
        off[s] = total;
        for (int k = 0; k < c->slen[s]; k++)
            if (c->src[s][k] < 0 || c->src[s][k] >= src_vocab) st = TERN_ERR_INVALID_ARG;
        for (int k = 0; k < c->tlen[s]; k++)
            if (c->tgt[s][k] < 0 || c->tgt[s][k] >= tgt_vocab) st = TERN_ERR_INVALID_ARG;
        if (st) {
            free(off);
            free(am);
            return tern_error(st, "align: pair %d holds an id outside the vocabulary", s + 1);
        }
        if (c->slen[s] > 0 && c->tlen[s] > 0) total += (size_t)(c->slen[s] + 1) * c->tlen[s];
        if (c->slen[s] > max_m) max_m = c->slen[s];
    }
    off[c->n] = total;
    int32_t *idx = malloc((total ? total : 1) * sizeof *idx);
    double *w = malloc(((size_t)max_m + 1) * sizeof *w);
    double *cnt = NULL, *tot = calloc((size_t)src_vocab + 1, sizeof *tot);
    if (!idx || !w || !tot) {
        st = tern_error(TERN_ERR_NOMEM, "align: out of memory for %zu links", total);
        goto done;
    }
    for (int s = 0; s < c->n && !st; s++) {
        int m = c->slen[s], n = c->tlen[s];
        if (m == 0 || n == 0) continue;
        for (int j = 0; j < n && !st; j++)
            for (int i = 0; i <= m && !st; i++) {
                int32_t e = hash64_insert(&am->pairs, pair_key(i ? c->src[s][i - 1] : -1, c->tgt[s][j]), NULL);
                if (e < 0) st = TERN_ERR_NOMEM;
                idx[off[s] + (size_t)j * (m + 1) + i] = e;
            }
    }
    if (st) goto done;
    am->t = malloc((am->pairs.count ? am->pairs.count : 1) * sizeof *am->t);
    cnt = malloc((am->pairs.count ? am->pairs.count : 1) * sizeof *cnt);
    if (!am->t || !cnt) {
        st = tern_error(TERN_ERR_NOMEM, "align: out of memory for %zu pairs", am->pairs.count);
        goto done;
    }
    for (size_t k = 0; k < am->pairs.count; k++) am->t[k] = 1.0;
    /* e of each entry, for the M step */
    int32_t *ent_e = malloc((am->pairs.count ? am->pairs.count : 1) * sizeof *ent_e);
    if (!ent_e) {
        st = tern_error(TERN_ERR_NOMEM, "align: out of memory");
        goto done;
    }
    for (size_t h = 0; h < am->pairs.cap; h++)
        if (am->pairs.keys[h] != UINT64_MAX) ent_e[am->pairs.index[h]] = (int32_t)(am->pairs.keys[h] >> 32); /* e + 1 */
    for (int it = 0; it < am->opt.iterations; it++) {
        memset(cnt, 0, am->pairs.count * sizeof *cnt);
        for (int s = 0; s < c->n; s++) {
            int m = c->slen[s], n = c->tlen[s];
            if (m == 0 || n == 0) continue;
            for (int j = 0; j < n; j++) {
                const int32_t *ij = idx + off[s] + (size_t)j * (m + 1);
                double sum = position_weights(am, ij, am->t, m, n, j, w);
                if (!(sum > 0)) continue;
                for (int i = 0; i <= m; i++) cnt[ij[i]] += w[i] / sum;
            }
        }
        memset(tot, 0, ((size_t)src_vocab + 1) * sizeof *tot);
        for (size_t k = 0; k < am->pairs.count; k++) tot[ent_e[k]] += cnt[k];
        for (size_t k = 0; k < am->pairs.count; k++) am->t[k] = tot[ent_e[k]] > 0 ? cnt[k] / tot[ent_e[k]] : 0;
    }
    free(ent_e);
done:
    free(off);
    free(idx);
    free(w);
    free(cnt);
    free(tot);
    if (st) {
        align_free(am);
        return st;
    }
    *out = am;
    return TERN_OK;
}

void align_free(align_model_t *m) {
    if (!m) return;
    hash64_free(&m->pairs);
    free(m->t);
    free(m);
}

double align_prob(const align_model_t *m, int e, int f) {
    int32_t k = hash64_find(&m->pairs, pair_key(e, f));
    return k >= 0 ? m->t[k] : 0.0;
}

void align_viterbi(const align_model_t *am, const int *src, int slen, const int *tgt, int tlen, int *a) {
    const double p0 = am->opt.p0, lam = am->opt.tension;
    for (int j = 0; j < tlen; j++) {
        a[j] = -1;
        if (slen == 0) continue;
        double z = 0;
        for (int i = 1; i <= slen; i++) z += exp(-lam * fabs((double)i / slen - (double)(j + 1) / tlen));
        double best = p0 * align_prob(am, -1, tgt[j]);
        for (int i = 1; i <= slen; i++) {
            double v = (1 - p0) * exp(-lam * fabs((double)i / slen - (double)(j + 1) / tlen)) / z *
                       align_prob(am, src[i - 1], tgt[j]);
            if (v > best) {
                best = v;
                a[j] = i - 1;
            }
        }
    }
}
