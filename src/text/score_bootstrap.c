/* score_bootstrap.c — paired bootstrap resampling between two systems (Koehn 2004), with
 * sacreBLEU's statistic and p-value (significance.py: _paired_bs_test, estimate_ci).
 *
 * Dimension letters: N sentences, K statistics per sentence, S bootstrap samples. */
#include "score.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* xoshiro256** seeded by splitmix64 */
typedef struct { uint64_t s[4]; } rng_t;

static uint64_t splitmix64(uint64_t *x) {
    uint64_t z = (*x += 0x9E3779B97F4A7C15ULL);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}
static uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }
static uint64_t rng_next(rng_t *r) {
    uint64_t *s = r->s, res = rotl(s[1] * 5, 7) * 9, t = s[1] << 17;
    s[2] ^= s[0]; s[3] ^= s[1]; s[1] ^= s[2]; s[0] ^= s[3]; s[2] ^= t; s[3] = rotl(s[3], 45);
    return res;
}
/* uniform in [0, n) without bias (Lemire) */
static uint32_t rng_below(rng_t *r, uint32_t n) {
    uint64_t m = (rng_next(r) >> 32) * n;
    uint32_t lo = (uint32_t)m;
    if (lo < n) {
        uint32_t t = (uint32_t)(-n) % n;
        while (lo < t) { m = (rng_next(r) >> 32) * n; lo = (uint32_t)m; }
    }
    return (uint32_t)(m >> 32);
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* mean and half-width of the 95% interval of scores (sorted in place) */
static void estimate_ci(double *mean, double *ci, double *scores, int S) {
    double sum = 0.0;
    for (int s = 0; s < S; s++) sum += scores[s];
    qsort(scores, (size_t)S, sizeof *scores, cmp_double);
    int lo = S / 40, hi = S - lo - 1;
    *ci = 0.5 * (scores[hi] - scores[lo]);
    *mean = sum / S;
}

tern_status_t paired_bootstrap(paired_bs_result_t *res, const int64_t *base, const int64_t *sys,
                               const uint32_t *idx, score_stats_fn fn, const void *user_data,
                               uint64_t seed, size_t N, int K, int S) {
    if (N == 0 || K <= 0 || S <= 0 || !fn)
        return tern_error(TERN_ERR_INVALID_ARG, "paired bootstrap: N=%zu K=%d S=%d", N, K, S);
    memset(res, 0, sizeof *res);
    res->samples = S;
    int64_t *sb = calloc((size_t)K, sizeof *sb), *ss = calloc((size_t)K, sizeof *ss);
    double *bl = malloc((size_t)S * sizeof *bl), *sy = malloc((size_t)S * sizeof *sy);
    if (!sb || !ss || !bl || !sy) {
        free(sb); free(ss); free(bl); free(sy);
        return tern_error(TERN_ERR_NOMEM, "paired bootstrap: out of memory");
    }
    for (size_t i = 0; i < N; i++)
        for (int k = 0; k < K; k++) {
            sb[k] += base[i * (size_t)K + (size_t)k];
            ss[k] += sys[i * (size_t)K + (size_t)k];
        }
    res->base_score = fn(sb, user_data);
    res->sys_score = fn(ss, user_data);

    rng_t rng;
    uint64_t x = seed;
    for (int i = 0; i < 4; i++) rng.s[i] = splitmix64(&x);
    tern_status_t st = TERN_OK;
    for (int s = 0; s < S; s++) {
        memset(sb, 0, (size_t)K * sizeof *sb);
        memset(ss, 0, (size_t)K * sizeof *ss);
        for (size_t j = 0; j < N; j++) {
            size_t i = idx ? idx[(size_t)s * N + j] : rng_below(&rng, (uint32_t)N);
            if (i >= N) {
                st = tern_error(TERN_ERR_INVALID_ARG, "paired bootstrap: index %zu out of range (N=%zu)", i, N);
                goto done;
            }
            const int64_t *b = base + i * (size_t)K, *y = sys + i * (size_t)K;
            for (int k = 0; k < K; k++) {
                sb[k] += b[k];
                ss[k] += y[k];
            }
        }
        bl[s] = fn(sb, user_data);
        sy[s] = fn(ss, user_data);
    }
    {
        /* statistic: |sys - base| per sample, centred; p = (#{> real |diff|} + 1) / (S + 1) */
        double diff = fabs(res->base_score - res->sys_score), mean = 0.0;
        for (int s = 0; s < S; s++) mean += fabs(sy[s] - bl[s]);
        mean /= S;
        int c = 0;
        for (int s = 0; s < S; s++) c += fabs(sy[s] - bl[s]) - mean > diff;
        res->p_value = (double)(c + 1) / (double)(S + 1);
        estimate_ci(&res->sys_mean, &res->sys_ci, sy, S);
        estimate_ci(&res->base_mean, &res->base_ci, bl, S);
    }
done:
    free(sb); free(ss); free(bl); free(sy);
    return st;
}
