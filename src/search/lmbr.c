/*
 * lmbr.c — n-gram posteriors of an evidence space and the step-wise LMBR scores (lmbr.h).
 *
 * The matrix L: the distinct n-grams u of the evidence (n = 1..4) with their posteriors P(u),
 * sorted by (n, tokens), so that the n-grams sharing a history of n-1 tokens are contiguous; an
 * open-addressing table maps (n, history) to that range. A step costs, per row, one pass over the
 * vocabulary (λ·x + Θ0) and one lookup per order.
 */
#include "search/lmbr.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"

typedef struct {
    int n;
    int h[LMBR_ORDER - 1];
    int start, count; /* into tok/post */
} hist_t;

struct lmbr_sentence {
    hist_t *tab;  /* (cap) open addressing; n == 0: empty slot */
    int cap;
    int *tok;     /* (M) last token of each n-gram */
    float *post;  /* (M) its posterior */
    int M;
};

typedef struct {
    int n;
    int t[LMBR_ORDER];
    int hyp;      /* global hypothesis index (presence: one count per hypothesis) */
    double p;
} gram_t;

static int cmp_gram(const void *a, const void *b) {
    const gram_t *x = a, *y = b;
    if (x->n != y->n) return x->n < y->n ? -1 : 1;
    for (int i = 0; i < x->n; i++)
        if (x->t[i] != y->t[i]) return x->t[i] < y->t[i] ? -1 : 1;
    if (x->hyp != y->hyp) return x->hyp < y->hyp ? -1 : 1;
    return 0;
}

static uint64_t hist_hash(int n, const int *h) {
    uint64_t x = (uint64_t)n * 0x9E3779B97F4A7C15ULL;
    for (int i = 0; i < n - 1; i++) {
        x ^= (uint64_t)(uint32_t)h[i] + 0x632BE59BD9B4E019ULL + (x << 6) + (x >> 2);
        x *= 0xBF58476D1CE4E5B9ULL;
    }
    return x ^ (x >> 31);
}

static int same_hist(const hist_t *e, int n, const int *h) {
    if (e->n != n) return 0;
    for (int i = 0; i < n - 1; i++)
        if (e->h[i] != h[i]) return 0;
    return 1;
}

static hist_t *hist_find(const lmbr_sentence_t *s, int n, const int *h) {
    if (!s->cap) return NULL;
    size_t mask = (size_t)s->cap - 1, i = (size_t)hist_hash(n, h) & mask;
    for (;; i = (i + 1) & mask) {
        hist_t *e = &s->tab[i];
        if (e->n == 0) return NULL;
        if (same_hist(e, n, h)) return e;
    }
}

/* How many n-grams (orders 1..LMBR_ORDER, with repeats) the S systems' evidence holds; *wsum: the
 * weights of the systems with evidence. */
static size_t count_grams(const lmbr_evidence_t *const *ev, const float *weights, int S, double *wsum) {
    size_t G = 0;
    for (int k = 0; k < S; k++) {
        if (!ev[k] || ev[k]->K <= 0) continue;
        *wsum += weights ? weights[k] : 1.0;
        for (int e = 0; e < ev[k]->K; e++) {
            int L = ev[k]->len[e];
            for (int n = 1; n <= LMBR_ORDER; n++) G += L >= n ? (size_t)(L - n + 1) : 0;
        }
    }
    return G;
}

/* Every n-gram of every evidence hypothesis into g, with its hypothesis (numbered over all the
 * systems) and that hypothesis's posterior; their number. */
static size_t collect_grams(gram_t *g, const lmbr_evidence_t *const *ev, const float *weights, int S, float alpha,
                            double wsum) {
    size_t m = 0;
    int hyp = 0;
    for (int k = 0; k < S; k++) {
        const lmbr_evidence_t *E = ev[k];
        if (!E || E->K <= 0 || wsum <= 0) continue;
        /* p_s(e) = softmax(alpha * score) within the system, weighted */
        double mx = -INFINITY, z = 0;
        for (int e = 0; e < E->K; e++) mx = fmax(mx, (double)alpha * E->score[e]);
        for (int e = 0; e < E->K; e++) z += exp((double)alpha * E->score[e] - mx);
        double w = (weights ? weights[k] : 1.0) / wsum;
        for (int e = 0; e < E->K; e++, hyp++) {
            double p = w * exp((double)alpha * E->score[e] - mx) / z;
            int L = E->len[e];
            for (int n = 1; n <= LMBR_ORDER; n++)
                for (int i = 0; i + n <= L; i++) {
                    gram_t *x = &g[m++];
                    memset(x, 0, sizeof *x);
                    x->n = n;
                    memcpy(x->t, E->tok[e] + i, (size_t)n * sizeof(int));
                    x->hyp = hyp;
                    x->p = p;
                }
        }
    }
    return m;
}

/* In the sorted grams: g[i] starts a new n-gram; a new history (its first n - 1 tokens). */
static int new_gram_at(const gram_t *g, size_t i) {
    return i == 0 || g[i].n != g[i - 1].n || memcmp(g[i].t, g[i - 1].t, (size_t)g[i].n * sizeof(int));
}

static int new_hist_at(const gram_t *g, size_t i) {
    return i == 0 || g[i].n != g[i - 1].n || memcmp(g[i].t, g[i - 1].t, (size_t)(g[i].n - 1) * sizeof(int));
}

/* The distinct n-grams among the m sorted ones; *nh: their distinct histories. */
static size_t count_distinct(const gram_t *g, size_t m, size_t *nh) {
    size_t M = 0;
    for (size_t i = 0; i < m; i++)
        if (new_gram_at(g, i)) {
            *nh += new_hist_at(g, i);
            M++;
        }
    return M;
}

/* The distinct n-grams' last tokens and posteriors (each hypothesis counted once: presence), and
 * the table of histories, each with its n-grams' range. */
static void fill_posteriors(lmbr_sentence_t *s, const gram_t *g, size_t m) {
    int j = -1;
    hist_t *cur = NULL;
    double acc = 0;
    for (size_t i = 0; i < m; i++) {
        int new_gram = new_gram_at(g, i);
        if (new_gram) {
            if (j >= 0) s->post[j] = (float)acc;
            int new_hist = new_hist_at(g, i);
            j++;
            s->tok[j] = g[i].t[g[i].n - 1];
            acc = 0;
            if (new_hist) {
                size_t mask = (size_t)s->cap - 1, h = (size_t)hist_hash(g[i].n, g[i].t) & mask;
                while (s->tab[h].n) h = (h + 1) & mask;
                cur = &s->tab[h];
                cur->n = g[i].n;
                memcpy(cur->h, g[i].t, (size_t)(g[i].n - 1) * sizeof(int));
                cur->start = j;
                cur->count = 0;
            }
            cur->count++;
        }
        if (i == 0 || new_gram || g[i].hyp != g[i - 1].hyp) acc += g[i].p;
    }
    if (j >= 0) s->post[j] = (float)acc;
}

tern_status_t lmbr_sentence_build(lmbr_sentence_t **out, const lmbr_evidence_t *const *ev, const float *weights,
                                  int S, float alpha) {
    *out = NULL;
    lmbr_sentence_t *s = calloc(1, sizeof *s);
    if (!s) return tern_error(TERN_ERR_NOMEM, "lmbr: out of memory");
    double wsum = 0;
    size_t G = count_grams(ev, weights, S, &wsum);
    gram_t *g = malloc((G ? G : 1) * sizeof *g);
    if (!g) {
        free(s);
        return tern_error(TERN_ERR_NOMEM, "lmbr: out of memory");
    }
    size_t m = collect_grams(g, ev, weights, S, alpha, wsum);
    qsort(g, m, sizeof *g, cmp_gram);
    size_t nh = 0, M = count_distinct(g, m, &nh);
    s->M = (int)M;
    s->tok = malloc((M ? M : 1) * sizeof(int));
    s->post = malloc((M ? M : 1) * sizeof(float));
    s->cap = 16;
    while ((size_t)s->cap < 2 * nh + 2) s->cap *= 2;
    s->tab = calloc((size_t)s->cap, sizeof *s->tab);
    if (!s->tok || !s->post || !s->tab) {
        free(g);
        lmbr_sentence_free(s);
        return tern_error(TERN_ERR_NOMEM, "lmbr: out of memory");
    }
    fill_posteriors(s, g, m);
    free(g);
    *out = s;
    return TERN_OK;
}

void lmbr_sentence_free(lmbr_sentence_t *s) {
    if (!s) return;
    free(s->tab), free(s->tok), free(s->post);
    free(s);
}

float lmbr_posterior(const lmbr_sentence_t *s, const int *h, int n, int y) {
    const hist_t *e = hist_find(s, n, h);
    if (!e) return 0.0f;
    for (int i = 0; i < e->count; i++)
        if (s->tok[e->start + i] == y) return s->post[e->start + i];
    return 0.0f;
}

int lmbr_ngram_count(const lmbr_sentence_t *s) { return s ? s->M : 0; }

int lmbr_ngram_index(const lmbr_sentence_t *s, const int *h, int n, int y) {
    const hist_t *e = hist_find(s, n, h);
    if (!e) return -1;
    for (int i = 0; i < e->count; i++)
        if (s->tok[e->start + i] == y) return e->start + i;
    return -1;
}

int lmbr_clip_ints(int count) { return LMBR_ORDER - 1 + (count + 31) / 32; }

void lmbr_clip_init(int *state, int count) {
    for (int i = 0; i < LMBR_ORDER - 1; i++) state[i] = -1;
    memset(state + LMBR_ORDER - 1, 0, (size_t)((count + 31) / 32) * sizeof(int));
}

void lmbr_clip_advance(const lmbr_sentence_t *s, int *state, int tok, int eos) {
    if (tok == eos) return;
    unsigned *bits = (unsigned *)(state + LMBR_ORDER - 1);
    for (int n = 1; s && n <= LMBR_ORDER; n++) {
        const int *h = state + (LMBR_ORDER - 1) - (n - 1);
        if (n > 1 && h[0] < 0) break;
        int j = lmbr_ngram_index(s, h, n, tok);
        if (j >= 0) bits[j >> 5] |= 1u << (j & 31);
    }
    for (int i = 0; i + 1 < LMBR_ORDER - 1; i++) state[i] = state[i + 1];
    state[LMBR_ORDER - 2] = tok;
}

float lmbr_token_gain(const lmbr_sentence_t *s, const lmbr_params_t *p, const int *state, int tok) {
    const unsigned *used = p->clip ? (const unsigned *)(state + LMBR_ORDER - 1) : NULL;
    float g = p->theta[0];
    for (int n = 1; s && n <= LMBR_ORDER; n++) {
        const int *h = state + (LMBR_ORDER - 1) - (n - 1);
        if (n > 1 && h[0] < 0) break;
        int j = lmbr_ngram_index(s, h, n, tok);
        if (j < 0 || (used && (used[j >> 5] >> (j & 31) & 1u))) continue;
        g += p->theta[n] * s->post[j];
    }
    return g;
}

lmbr_params_t lmbr_params(float lambda, float p, float r) {
    lmbr_params_t q;
    q.lambda = lambda;
    q.clip = 0;
    q.sum_gain = 0;
    q.theta[0] = -1.0f;
    for (int n = 1; n <= LMBR_ORDER; n++) q.theta[n] = (float)(1.0 / (4.0 * p * pow(r, n - 1)));
    return q;
}

void lmbr_apply_row(const lmbr_sentence_t *s, const lmbr_params_t *p, float *x, int V, int eos, const int *hist,
                    int H, const int *clip) {
    const unsigned *used = clip ? (const unsigned *)(clip + LMBR_ORDER - 1) : NULL;
    const float lam = p->lambda, t0 = p->theta[0];
    float xe = x[eos];
    for (int v = 0; v < V; v++) x[v] = lam * x[v] + t0;
    x[eos] = lam * xe;
    if (!s) return;
    for (int n = 1; n <= LMBR_ORDER; n++) {
        if (n - 1 > H) break;
        const int *h = hist + (H - (n - 1));
        if (n > 1 && h[0] < 0) break; /* the row has fewer than n-1 tokens */
        const hist_t *e = hist_find(s, n, h);
        if (!e) continue;
        const float th = p->theta[n];
        for (int i = 0; i < e->count; i++) {
            int j = e->start + i, y = s->tok[j];
            if (used && (used[j >> 5] >> (j & 31) & 1u)) continue;
            if (y != eos && y >= 0 && y < V) x[y] += th * s->post[j];
        }
    }
}

void lmbr_sentence_mark(const lmbr_sentence_t *s, uint8_t *mark, int V) {
    for (int j = 0; s && j < s->M; j++)
        if (s->tok[j] >= 0 && s->tok[j] < V) mark[s->tok[j]] = 1;
}

tern_status_t lmbr_sentence_remap(lmbr_sentence_t **out, const lmbr_sentence_t *s, const int *cand, int nc) {
    *out = NULL;
    lmbr_sentence_t *r = calloc(1, sizeof *r);
    if (!r) return tern_error(TERN_ERR_NOMEM, "lmbr: out of memory");
    r->M = s->M;
    r->cap = s->cap;
    r->tok = malloc((size_t)(s->M ? s->M : 1) * sizeof(int));
    r->post = malloc((size_t)(s->M ? s->M : 1) * sizeof(float));
    r->tab = calloc((size_t)(s->cap ? s->cap : 1), sizeof *r->tab);
    if (!r->tok || !r->post || !r->tab) {
        lmbr_sentence_free(r);
        return tern_error(TERN_ERR_NOMEM, "lmbr: out of memory");
    }
    /* the n-gram indices stay (clipping bits); tokens become positions in cand (-1: none, never
     * matched: a row's tokens are positions, and its history has -1 only before its start, where
     * the lookups stop) */
    for (int j = 0; j < s->M; j++) r->tok[j] = search_id_position(cand, nc, s->tok[j]);
    memcpy(r->post, s->post, (size_t)s->M * sizeof(float));
    size_t mask = (size_t)r->cap - 1;
    for (int i = 0; i < s->cap; i++) {
        const hist_t *e = &s->tab[i];
        if (!e->n) continue;
        hist_t x = *e;
        for (int k = 0; k < e->n - 1; k++) x.h[k] = search_id_position(cand, nc, e->h[k]);
        size_t h = (size_t)hist_hash(x.n, x.h) & mask;
        while (r->tab[h].n) h = (h + 1) & mask;
        r->tab[h] = x;
    }
    *out = r;
    return TERN_OK;
}
