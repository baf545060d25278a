/*
 * test_sampling.c — random sampling and the repetition controls (src/search/sample.c).
 *
 *   distributions  10^5 draws of sample_row on a fixed row of 8 logits (one -inf) under
 *                  temperature 0.7, top-k 3, top-p 0.8, top-k 5 + top-p 0.9 + temperature 1.5 and
 *                  full sampling: each token's frequency within 5 standard errors
 *                  (5 sqrt(p (1 - p) / n)) of the exact probability computed here by brute force
 *                  (sorted candidates, softmax, cut); tokens outside the cut never drawn;
 *                  sample_distribution equals the brute force (1e-12); top-k 1 = the argmax.
 *   generator      the same (seed, key, step) gives the same number; other keys, steps or seeds
 *                  other streams (at most 2 equal draws in 1000); the mean of 10^5 draws 0.5 +- 0.005.
 *   greedy         sampling in greedy_search over a mock decoder (fixed logits per step): the same
 *                  keys give the same hypotheses whatever the order of the sentences in the batch;
 *                  a hypothesis' raw score is the sum of its tokens' log-probabilities (1e-5).
 *   repetition     the penalty divides positive / multiplies negative logits of the tokens in the
 *                  history once each; no-repeat-ngram removes exactly the tokens that would repeat
 *                  an n-gram of the history (sizes 1, 2, 3).
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "search/sample.h"
#include "search/search.h"

#define V 8
static const float ROW[V] = {1.0f, 2.5f, -0.5f, 0.3f, 2.0f, -INFINITY, 0.9f, 1.7f};

/* The exact probabilities of CTranslate2's rule, by brute force: temperature, the K best (ties:
 * smaller token), the fewest best with mass >= P. */
static void reference(const search_sampling_t *s, const float *x, double *p) {
    int idx[V], n = 0;
    for (int v = 0; v < V; v++)
        if (x[v] > -INFINITY) idx[n++] = v;
    for (int i = 0; i < n; i++) /* selection sort, larger first */
        for (int j = i + 1; j < n; j++)
            if (x[idx[j]] > x[idx[i]] || (x[idx[j]] == x[idx[i]] && idx[j] < idx[i])) {
                int t = idx[i];
                idx[i] = idx[j], idx[j] = t;
            }
    int m = s->topk > 0 && s->topk < n ? s->topk : n;
    double w[V], sum = 0;
    for (int i = 0; i < m; i++) sum += (w[i] = exp((double)x[idx[i]] / s->temperature));
    int k = m;
    if (s->topp < 1) {
        double c = 0;
        for (k = 0; k < m && (k == 0 || c < s->topp * sum);) c += w[k++];
        sum = c;
    }
    for (int v = 0; v < V; v++) p[v] = 0;
    for (int i = 0; i < k; i++) p[idx[i]] = w[i] / sum;
}

static void test_distribution(search_sampling_t s, const char *name) {
    enum { NDRAW = 100000 };
    sample_pair_t work[V];
    double p[V], q[V];
    long count[V] = {0};
    reference(&s, ROW, p);
    sample_distribution(&s, ROW, V, work, q);
    for (int v = 0; v < V; v++) CHECK_NEAR(q[v], p[v], 1e-12, 0);
    for (int i = 0; i < NDRAW; i++) count[sample_row(&s, ROW, V, sample_uniform(s.seed, 77, i), work)]++;
    double worst = 0;
    for (int v = 0; v < V; v++) {
        double f = (double)count[v] / NDRAW, se = sqrt(p[v] * (1 - p[v]) / NDRAW);
        if (p[v] == 0) CHECK_MSG(count[v] == 0, "%s: token %d drawn %ld times outside the cut", name, v, count[v]);
        else {
            CHECK_MSG(fabs(f - p[v]) <= 5 * se, "%s: token %d frequency %.5f, p %.5f (5 se %.5f)", name, v, f, p[v], 5 * se);
            worst = fabs(f - p[v]) / se > worst ? fabs(f - p[v]) / se : worst;
        }
    }
    printf("%-28s largest deviation %.2f standard errors\n", name, worst);
}

static void test_distributions(void) {
    search_sampling_t base = {1, 0, 1.0f, 1.0f, 2024};
    search_sampling_t s = base;
    test_distribution(s, "full");
    s = base, s.temperature = 0.7f;
    test_distribution(s, "temperature 0.7");
    s = base, s.topk = 3;
    test_distribution(s, "top-k 3");
    s = base, s.topp = 0.8f;
    test_distribution(s, "top-p 0.8");
    s = base, s.topk = 5, s.topp = 0.9f, s.temperature = 1.5f;
    test_distribution(s, "top-k 5 top-p 0.9 temp 1.5");
    s = base, s.topk = 1;
    sample_pair_t work[V];
    for (int i = 0; i < 100; i++) CHECK_EQ_INT(sample_row(&s, ROW, V, sample_uniform(1, 2, i), work), 1);
}

static void test_generator(void) {
    CHECK(sample_uniform(5, 9, 3) == sample_uniform(5, 9, 3));
    int same_key = 0, same_step = 0, same_seed = 0;
    double mean = 0;
    for (int i = 0; i < 1000; i++) {
        double u = sample_uniform(5, sample_key(9, 0), i);
        same_key += u == sample_uniform(5, sample_key(9, 1), i);
        same_step += u == sample_uniform(5, sample_key(9, 0), i + 1);
        same_seed += u == sample_uniform(6, sample_key(9, 0), i);
    }
    CHECK(same_key <= 2 && same_step <= 2 && same_seed <= 2);
    for (int i = 0; i < 100000; i++) {
        double u = sample_uniform(1, 3, i);
        CHECK(u >= 0 && u < 1);
        mean += u;
    }
    CHECK_NEAR(mean / 100000, 0.5, 0.005, 0);
}

/* ------------------------------------------------------------------ greedy over a mock decoder */

enum { MV = 6, EOS = 5, BOS = 4 };
typedef struct {
    int R;
} mock_t;

/* The logits of every row at step t: a fixed table, EOS growing with t. */
static void mock_row(int t, float *x) {
    static const float base[MV] = {1.0f, 0.8f, 0.5f, 0.2f, -2.0f, -1.0f};
    for (int v = 0; v < MV; v++) x[v] = base[v];
    x[EOS] += 0.4f * (float)t;
}

static tern_status_t mock_step(void *self, const int *tokens, int t, float *logits, float *attn) {
    mock_t *m = self;
    for (int r = 0; r < m->R; r++) mock_row(t, logits + (size_t)r * MV);
    return TERN_OK;
}

static tern_status_t mock_set_rows(void *self, const int *parent, const int *sent, int R) {
    ((mock_t *)self)->R = R;
    return TERN_OK;
}

static void run_greedy(const uint64_t *keys, int N, search_result_t *res) {
    mock_t m = {N};
    decoder_iface_t dec = {&m, MV, 0, mock_step, mock_set_rows, 0, NULL, NULL, NULL};
    search_options_t so = {0};
    so.beam_size = so.num_hypotheses = 1;
    so.need_scores = 1;
    so.bos = BOS, so.eos = EOS;
    so.sampling = (search_sampling_t){1, 0, 0.95f, 1.2f, 99};
    so.sample_key = keys;
    int max_len[8];
    for (int n = 0; n < N; n++) max_len[n] = 20;
    CHECK(greedy_search(&dec, N, max_len, &so, res) == TERN_OK);
}

static void test_greedy(void) {
    uint64_t keys[6], rkeys[6];
    for (int n = 0; n < 6; n++) keys[n] = sample_key((uint64_t)n / 2, n % 2), rkeys[5 - n] = keys[n];
    search_result_t a[6], b[6];
    run_greedy(keys, 6, a);
    run_greedy(rkeys, 6, b);
    int distinct = 0;
    for (int n = 0; n < 6; n++) {
        const hypothesis_t *x = &a[n].hyps[0], *y = &b[5 - n].hyps[0];
        CHECK(x->length == y->length && memcmp(x->tokens, y->tokens, (size_t)x->length * sizeof(int)) == 0);
        CHECK(x->raw == y->raw);
        double raw = 0; /* the log-probs of the tokens, EOS included when it ended with EOS */
        float row[MV];
        for (int t = 0; t <= x->length && t < 20; t++) {
            mock_row(t, row);
            double mx = row[0], s = 0;
            for (int v = 0; v < MV; v++) mx = row[v] > mx ? row[v] : mx;
            for (int v = 0; v < MV; v++) s += exp(row[v] - mx);
            raw += (t < x->length ? row[x->tokens[t]] : row[EOS]) - mx - log(s);
        }
        CHECK_NEAR(x->raw, raw, 1e-5, 1e-5);
        if (n && (x->length != a[n - 1].hyps[0].length ||
                  memcmp(x->tokens, a[n - 1].hyps[0].tokens, (size_t)x->length * sizeof(int))))
            distinct++;
    }
    CHECK(distinct >= 3); /* different keys, different samples */
    for (int n = 0; n < 6; n++) search_result_free(&a[n]), search_result_free(&b[n]);
}

/* ------------------------------------------------------------------ repetition controls */

static void test_repetition(void) {
    enum { H = 6, RV = 10 };
    int hist[2 * H] = {-1, 3, 7, 3, 8, 7, /* row 1: */ 1, 2, 1, 2, 1, 2};
    search_rows_t rows = {5, 2, RV, NULL, hist, H, NULL, 0, 0};
    search_proc_t p[2];
    sample_repeat_t *rep;
    CHECK(sample_repeat_procs(&rep, 2.0f, 0, H, RV, p) == 1);
    float x[2 * RV];
    for (int i = 0; i < 2 * RV; i++) x[i] = i % 2 ? 1.5f : -1.5f;
    p[0].apply(p[0].self, x, &rows);
    for (int v = 0; v < RV; v++) {
        int in = v == 3 || v == 7 || v == 8;
        float want = !in ? (v % 2 ? 1.5f : -1.5f) : (v % 2 ? 0.75f : -3.0f);
        CHECK(x[v] == want);
    }
    sample_repeat_free(rep);
    CHECK(sample_repeat_procs(&rep, 1.0f, 0, H, RV, p) == 0 && rep == NULL);
    for (int n = 1; n <= 3; n++) {
        CHECK(sample_repeat_procs(&rep, 1.0f, n, H, RV, p) == 1);
        for (int i = 0; i < 2 * RV; i++) x[i] = 0;
        p[0].apply(p[0].self, x, &rows);
        for (int r = 0; r < 2; r++) /* brute force: tok banned iff tail + tok is an n-gram of the history */
            for (int v = 0; v < RV; v++) {
                const int *h = hist + r * H;
                int s = 0, banned = 0;
                while (h[s] < 0) s++;
                int seq[H + 1];
                memcpy(seq, h + s, (size_t)(H - s) * sizeof(int));
                int L = H - s;
                seq[L] = v;
                for (int i = 0; i + n <= L; i++)
                    banned |= memcmp(seq + i, seq + L + 1 - n, (size_t)n * sizeof(int)) == 0;
                CHECK_MSG((x[r * RV + v] == -INFINITY) == banned, "n %d row %d token %d", n, r, v);
            }
        sample_repeat_free(rep);
    }
}

int main(void) {
    test_distributions();
    test_generator();
    test_greedy();
    test_repetition();
    return check_report("test_sampling");
}
