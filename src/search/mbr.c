/* mbr.c — MBR reranking with sentence BLEU / chrF utilities (mbr.h). */
#include "search/mbr.h"

#include <stdlib.h>
#include <string.h>

#include "text/score.h"

#define MBR_MAX_ORDER 6

typedef struct {
    uint64_t a, b; /* up to 6 units of 21 bits: exact */
    int32_t count;
} gram_t;

typedef struct {
    int len;                          /* tokens (BLEU) or characters (chrF) */
    int off[MBR_MAX_ORDER], n[MBR_MAX_ORDER]; /* distinct n-grams of each order in grams[] */
} hyp_t;

struct mbr_workspace {
    text_buf_t tb;
    str_intern_t intern;
    char *arena;
    size_t arena_len, arena_cap;
    size_t *toff, *tlen;  /* (K) tokenized texts in the arena */
    uint32_t *units;      /* units of one hypothesis */
    size_t units_cap;
    uint32_t *ids;
    size_t ids_cap;
    gram_t *grams, *tmp;
    size_t grams_len, grams_cap, tmp_cap;
    hyp_t *h;
    int hcap;
};

mbr_workspace_t *mbr_workspace_new(void) { return calloc(1, sizeof(mbr_workspace_t)); }

void mbr_workspace_free(mbr_workspace_t *ws) {
    if (!ws) return;
    text_buf_free(&ws->tb);
    str_intern_free(&ws->intern);
    free(ws->arena), free(ws->toff), free(ws->tlen), free(ws->units), free(ws->ids);
    free(ws->grams), free(ws->tmp), free(ws->h);
    free(ws);
}

static int cmp_gram(const void *x, const void *y) {
    const gram_t *p = x, *q = y;
    if (p->a != q->a) return p->a < q->a ? -1 : 1;
    if (p->b != q->b) return p->b < q->b ? -1 : 1;
    return 0;
}

static int grow(void **p, size_t *cap, size_t need, size_t elem) {
    if (need <= *cap) return 1;
    size_t c = *cap ? *cap : 64;
    while (c < need) c *= 2;
    void *q = realloc(*p, c * elem);
    if (!q) return 0;
    *p = q;
    *cap = c;
    return 1;
}

/* n-grams of orders 1..O of u[0..L) into ws->grams (sorted, counted) for hypothesis h */
static tern_status_t add_grams(mbr_workspace_t *ws, hyp_t *h, const uint32_t *u, int L, int O) {
    h->len = L;
    for (int n = 1; n <= O; n++) {
        int m = L - n + 1 > 0 ? L - n + 1 : 0;
        if (!grow((void **)&ws->tmp, &ws->tmp_cap, (size_t)(m ? m : 1), sizeof(gram_t)) ||
            !grow((void **)&ws->grams, &ws->grams_cap, ws->grams_len + (size_t)m + 1, sizeof(gram_t)))
            return tern_error(TERN_ERR_NOMEM, "mbr: out of memory");
        for (int i = 0; i < m; i++) {
            uint64_t a = 0, b = 0;
            for (int j = 0; j < n; j++) {
                uint64_t v = (uint64_t)(u[i + j] & 0x1FFFFF) + 0; /* units < 2^21 */
                if (j < 3) a |= v << (21 * j);
                else b |= v << (21 * (j - 3));
            }
            ws->tmp[i] = (gram_t){a, b, 1};
        }
        qsort(ws->tmp, (size_t)m, sizeof(gram_t), cmp_gram);
        h->off[n - 1] = (int)ws->grams_len;
        int d = 0;
        for (int i = 0; i < m; i++) {
            if (d > 0 && !cmp_gram(&ws->grams[ws->grams_len + d - 1], &ws->tmp[i])) ws->grams[ws->grams_len + d - 1].count++;
            else ws->grams[ws->grams_len + d++] = ws->tmp[i];
        }
        h->n[n - 1] = d;
        ws->grams_len += (size_t)d;
    }
    return TERN_OK;
}

static int64_t clipped(const mbr_workspace_t *ws, const hyp_t *x, const hyp_t *y, int o) {
    const gram_t *p = ws->grams + x->off[o], *q = ws->grams + y->off[o];
    int i = 0, j = 0, ni = x->n[o], nj = y->n[o];
    int64_t m = 0;
    while (i < ni && j < nj) {
        int c = cmp_gram(&p[i], &q[j]);
        if (c < 0) i++;
        else if (c > 0) j++;
        else {
            m += p[i].count < q[j].count ? p[i].count : q[j].count;
            i++, j++;
        }
    }
    return m;
}

/* prepares the K hypotheses in ws->h */
static tern_status_t prepare(mbr_workspace_t *ws, const char *const *hyps, int K, mbr_metric_t metric) {
    if (K > ws->hcap) {
        hyp_t *h = realloc(ws->h, (size_t)K * sizeof *h);
        size_t *o = realloc(ws->toff, (size_t)K * sizeof *o);
        if (o) ws->toff = o;
        size_t *l = realloc(ws->tlen, (size_t)K * sizeof *l);
        if (l) ws->tlen = l;
        if (h) ws->h = h;
        if (!h || !o || !l) return tern_error(TERN_ERR_NOMEM, "mbr: out of memory");
        ws->hcap = K;
    }
    ws->grams_len = 0;
    tern_status_t st;
    if (metric == MBR_BLEU) {
        /* 13a tokenization of every hypothesis into the arena, then interned token ids */
        ws->arena_len = 0;
        size_t total = 0;
        for (int k = 0; k < K; k++) {
            const char *t;
            size_t tl;
            if ((st = text_tokenize(&t, &tl, &ws->tb, hyps[k] ? hyps[k] : "", SCORE_TOK_13A, 0))) return st;
            if (!grow((void **)&ws->arena, &ws->arena_cap, ws->arena_len + tl + 1, 1))
                return tern_error(TERN_ERR_NOMEM, "mbr: out of memory");
            memcpy(ws->arena + ws->arena_len, t, tl);
            ws->arena[ws->arena_len + tl] = 0;
            ws->toff[k] = ws->arena_len;
            ws->tlen[k] = tl;
            ws->arena_len += tl + 1;
            total += tl / 2 + 1;
        }
        if ((st = str_intern_reset(&ws->intern, total + 16))) return st;
        for (int k = 0; k < K; k++) {
            size_t n = tokens_to_ids(&ws->ids, &ws->ids_cap, &ws->intern, ws->arena + ws->toff[k], ws->tlen[k], 1);
            if (n == (size_t)-1) return tern_error(TERN_ERR_NOMEM, "mbr: out of memory");
            if ((st = add_grams(ws, &ws->h[k], ws->ids, (int)n, BLEU_MAX_ORDER))) return st;
        }
    } else {
        chrf_options_t co = chrf_default_options();
        for (int k = 0; k < K; k++) {
            const char *s = hyps[k] ? hyps[k] : "";
            size_t len = strlen(s);
            if (!grow((void **)&ws->units, &ws->units_cap, len + 1, sizeof(uint32_t)))
                return tern_error(TERN_ERR_NOMEM, "mbr: out of memory");
            size_t n = text_decode(ws->units, s, len), nc = 0;
            for (size_t i = 0; i < n; i++)
                if (!text_is_py_space(ws->units[i])) ws->units[nc++] = ws->units[i];
            if ((st = add_grams(ws, &ws->h[k], ws->units, (int)nc, co.char_order))) return st;
        }
    }
    return TERN_OK;
}

static double pair_utility(const mbr_workspace_t *ws, int x, int y, mbr_metric_t metric) {
    const hyp_t *h = &ws->h[x], *r = &ws->h[y];
    if (metric == MBR_BLEU) {
        bleu_options_t o = bleu_default_options();
        o.effective_order = 1;
        bleu_stats_t s;
        memset(&s, 0, sizeof s);
        s.hyp_len = h->len;
        s.ref_len = r->len;
        for (int n = 0; n < BLEU_MAX_ORDER; n++) {
            s.total[n] = h->len - n > 0 ? h->len - n : 0;
            s.correct[n] = clipped(ws, h, r, n);
        }
        return bleu_compute(&s, &o).score;
    }
    chrf_options_t o = chrf_default_options();
    chrf_stats_t s;
    memset(&s, 0, sizeof s);
    for (int n = 0; n < o.char_order; n++) {
        s.v[3 * n] = h->len - n > 0 ? h->len - n : 0;
        s.v[3 * n + 1] = r->len - n > 0 ? r->len - n : 0;
        s.v[3 * n + 2] = clipped(ws, h, r, n);
    }
    return chrf_compute(&s, &o);
}

tern_status_t mbr_choose(mbr_workspace_t *ws, const char *const *hyps, const double *post, int K,
                         mbr_metric_t metric, double *utility, int *best) {
    *best = -1;
    if (K <= 0) return TERN_OK;
    tern_status_t st = prepare(ws, hyps, K, metric);
    if (st) return st;
    double bu = 0;
    for (int x = 0; x < K; x++) {
        double u = 0;
        for (int y = 0; y < K; y++)
            if (post[y] > 0) u += post[y] * pair_utility(ws, x, y, metric);
        if (utility) utility[x] = u;
        if (*best < 0 || u > bu) {
            bu = u;
            *best = x;
        }
    }
    return TERN_OK;
}

tern_status_t mbr_utility(mbr_workspace_t *ws, const char *hyp, const char *ref, mbr_metric_t metric, double *u) {
    const char *two[2] = {hyp, ref};
    tern_status_t st = prepare(ws, two, 2, metric);
    if (st) return st;
    *u = pair_utility(ws, 0, 1, metric);
    return TERN_OK;
}
