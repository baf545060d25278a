/*
 * sample.c — the sampling step of greedy search and the repetition processors (sample.h).
 */
#include "search/sample.h"
#include "nn/layers.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* splitmix64's finalizer: the project's rng_mix64 (nn/layers.h) less its increment */
static uint64_t mix64(uint64_t z) { return rng_mix64(z - 0x9e3779b97f4a7c15ULL); }

double sample_uniform(uint64_t seed, uint64_t key, int step) {
    uint64_t h = rng_mix64(seed);
    h = mix64(h ^ key);
    h = mix64(h ^ ((uint64_t)(uint32_t)step + 0x632be59bd9b4e019ULL));
    return (double)(h >> 11) * (1.0 / 9007199254740992.0); /* 53 bits */
}

/* The order of the candidates: larger weight first, then smaller token (a total order, so the
 * kept set never depends on the sort's algorithm). */
static int pair_before(const sample_pair_t *a, const sample_pair_t *b) {
    return a->w > b->w || (a->w == b->w && a->i < b->i);
}

static int pair_cmp(const void *a, const void *b) {
    const sample_pair_t *x = a, *y = b;
    return pair_before(x, y) ? -1 : pair_before(y, x) ? 1 : 0;
}

/* Moves the k first of a (n) in pair order to a[0..k-1] (any order): quickselect. */
static void select_first(sample_pair_t *a, int n, int k) {
    int lo = 0, hi = n - 1;
    while (lo < hi) {
        sample_pair_t piv = a[lo + (hi - lo) / 2];
        int i = lo, j = hi;
        while (i <= j) {
            while (pair_before(&a[i], &piv)) i++;
            while (pair_before(&piv, &a[j])) j--;
            if (i <= j) {
                sample_pair_t t = a[i];
                a[i++] = a[j];
                a[j--] = t;
            }
        }
        if (k - 1 <= j) hi = j;
        else if (k - 1 >= i) lo = i;
        else return;
    }
}

/* The candidates a draw chooses among, in work[0..m-1] (returned m), best first when topk or
 * topp cut them (else in token order), with their weights; *total: the sum of the m weights. */
static int sample_keep(const search_sampling_t *s, const float *x, int V, sample_pair_t *work, double *total) {
    const double inv_t = 1.0 / (double)s->temperature;
    float mx = -INFINITY;
    for (int v = 0; v < V; v++) mx = x[v] > mx ? x[v] : mx;
    int n = 0;
    for (int v = 0; v < V; v++)
        if (x[v] > -INFINITY) work[n++] = (sample_pair_t){exp(((double)x[v] - mx) * inv_t), v};
    int m = n;
    if (s->topk > 0 && s->topk < n) {
        select_first(work, n, s->topk);
        m = s->topk;
    }
    if (s->topk > 0 || s->topp < 1.0f) qsort(work, (size_t)m, sizeof *work, pair_cmp);
    double sum = 0;
    for (int i = 0; i < m; i++) sum += work[i].w;
    if (s->topp < 1.0f) { /* the fewest best candidates whose probability sums to >= topp */
        double want = (double)s->topp * sum, c = 0;
        int k = 0;
        while (k < m && (k == 0 || c < want)) c += work[k++].w;
        m = k, sum = c;
    }
    *total = sum;
    return m;
}

int sample_row(const search_sampling_t *s, const float *x, int V, double u, sample_pair_t *work) {
    if (s->topk == 1) {
        int best = 0;
        for (int v = 1; v < V; v++)
            if (x[v] > x[best]) best = v;
        return best;
    }
    double total;
    int m = sample_keep(s, x, V, work, &total);
    if (m == 0) return 0; /* every token removed: nothing to draw from */
    double target = u * total, c = 0;
    for (int i = 0; i < m; i++) {
        c += work[i].w;
        if (target < c) return work[i].i;
    }
    return work[m - 1].i; /* rounding: u * total at the very top */
}

void sample_distribution(const search_sampling_t *s, const float *x, int V, sample_pair_t *work, double *p) {
    for (int v = 0; v < V; v++) p[v] = 0;
    if (s->topk == 1) {
        p[sample_row(s, x, V, 0, work)] = 1;
        return;
    }
    double total;
    int m = sample_keep(s, x, V, work, &total);
    for (int i = 0; i < m; i++) p[work[i].i] = work[i].w / total;
}

/* ------------------------------------------------------------------ repetition controls */

struct sample_repeat {
    float penalty;
    int ngram;
    int V;
    int *stamp; /* (V) the last row (+1) a token was penalized in */
    int mark;
};

/* The first valid position of a row's history (tokens before it are -1). */
static int hist_start(const int *h, int H) {
    int s = H;
    while (s > 0 && h[s - 1] >= 0) s--;
    return s;
}

/* CTranslate2's repetition penalty: each token the row has, once. */
static void penalty_apply(void *self, float *x, const search_rows_t *rows) {
    sample_repeat_t *p = self;
    for (int r = 0; r < rows->R; r++) {
        const int *h = rows->hist + (size_t)r * rows->H;
        float *xr = x + (size_t)r * rows->V;
        if (++p->mark == 0x7fffffff) memset(p->stamp, 0, (size_t)p->V * sizeof(int)), p->mark = 1;
        for (int j = hist_start(h, rows->H); j < rows->H; j++) {
            int tok = h[j];
            if (tok >= rows->V || p->stamp[tok] == p->mark) continue;
            p->stamp[tok] = p->mark;
            xr[tok] = xr[tok] > 0 ? xr[tok] / p->penalty : xr[tok] * p->penalty;
        }
    }
}

/* No n-gram twice: the tokens that would complete an n-gram the row already has are removed. */
static void ngram_apply(void *self, float *x, const search_rows_t *rows) {
    const sample_repeat_t *p = self;
    const int N = p->ngram, H = rows->H;
    for (int r = 0; r < rows->R; r++) {
        const int *h = rows->hist + (size_t)r * H;
        float *xr = x + (size_t)r * rows->V;
        int s = hist_start(h, H);
        if (H - s < N - 1 || H - s < 1) continue;
        const int *tail = h + H - (N - 1); /* the last N - 1 tokens */
        for (int i = s; i + N - 1 < H; i++) { /* the n-gram h[i .. i + N - 1], complete in the history */
            if (N > 1 && memcmp(h + i, tail, (size_t)(N - 1) * sizeof(int)) != 0) continue;
            int tok = h[i + N - 1];
            if (tok < rows->V) xr[tok] = -INFINITY;
        }
    }
}

int sample_repeat_procs(sample_repeat_t **self, float penalty, int ngram, int history, int V, search_proc_t *out) {
    *self = NULL;
    int np = 0;
    if (penalty == 1.0f && ngram <= 0) return 0;
    sample_repeat_t *p = calloc(1, sizeof *p);
    if (!p || !(p->stamp = calloc((size_t)V, sizeof(int)))) {
        free(p);
        return -1;
    }
    p->penalty = penalty, p->ngram = ngram, p->V = V;
    if (history > SEARCH_MAX_HISTORY_LONG) history = SEARCH_MAX_HISTORY_LONG;
    if (history < 1) history = 1;
    if (penalty != 1.0f)
        out[np++] = (search_proc_t){.self = p, .stage = SEARCH_STAGE_LOGITS, .history = history, .apply = penalty_apply};
    if (ngram > 0)
        out[np++] = (search_proc_t){.self = p, .stage = SEARCH_STAGE_LOGITS, .history = history, .apply = ngram_apply};
    *self = p;
    return np;
}

void sample_repeat_free(sample_repeat_t *self) {
    if (!self) return;
    free(self->stamp);
    free(self);
}
