/* score_bootstrap.c — paired bootstrap resampling between two systems (Koehn 2004), exactly as
 * sacreBLEU 2.x does it (significance.py: _paired_bs_test, _bootstrap_resample, estimate_ci):
 *
 *   - the resamples: numpy.random.default_rng(seed).choice(N, size=(S, N)), i.e. PCG64 seeded
 *     through SeedSequence, 32-bit draws mapped to [0, N) by Lemire's method — reproduced below,
 *     so the default seed 12345 draws sacreBLEU's very resamples;
 *   - each resample's statistics are summed as float32 (numpy: stats_np = array(stats, 'float32'),
 *     sum over axis 0, one row after the other) and scored with the numpy >= 2 promotion rules
 *     (NEP 50: a Python float or int meeting a numpy float32 becomes float32), which runs BLEU's
 *     precisions and all of chrF in float32;
 *   - means are numpy's pairwise sums divided by the count; the interval takes the sorted scores
 *     at S/40 and S - S/40 - 1; the arrays are float32 when every score in them is a numpy float32.
 *
 * Dimension letters: N sentences, K statistics per sentence, S bootstrap samples. */
#include "text/score.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#ifdef __clang__
#pragma STDC FP_CONTRACT OFF /* numpy's float32/float64 operations, one rounding each */
#endif

__extension__ typedef unsigned __int128 u128;

/* ---------------------------------------------------------------- numpy SeedSequence + PCG64 */

#define SS_INIT_A 0x43b0d7e5u
#define SS_MULT_A 0x931e8875u
#define SS_INIT_B 0x8b51f9ddu
#define SS_MULT_B 0x58f38dedu
#define SS_MIX_MULT_L 0xca01f9ddu
#define SS_MIX_MULT_R 0x4973f715u
#define SS_XSHIFT 16
#define SS_POOL 4

static uint32_t ss_hashmix(uint32_t value, uint32_t *hash_const) {
    value ^= *hash_const;
    *hash_const *= SS_MULT_A;
    value *= *hash_const;
    value ^= value >> SS_XSHIFT;
    return value;
}

static uint32_t ss_mix(uint32_t x, uint32_t y) {
    uint32_t r = SS_MIX_MULT_L * x - SS_MIX_MULT_R * y;
    r ^= r >> SS_XSHIFT;
    return r;
}

/* SeedSequence(seed).generate_state(4, uint64) */
static void seed_sequence_state(uint64_t out[4], uint64_t seed) {
    uint32_t entropy[2] = {(uint32_t)seed, (uint32_t)(seed >> 32)};
    int nent = entropy[1] ? 2 : 1; /* the integer as little-endian 32-bit words */
    uint32_t pool[SS_POOL], hc = SS_INIT_A;
    for (int i = 0; i < SS_POOL; i++) pool[i] = ss_hashmix(i < nent ? entropy[i] : 0, &hc);
    for (int src = 0; src < SS_POOL; src++)
        for (int dst = 0; dst < SS_POOL; dst++)
            if (src != dst) pool[dst] = ss_mix(pool[dst], ss_hashmix(pool[src], &hc));
    uint32_t words[8], hb = SS_INIT_B;
    for (int i = 0; i < 8; i++) {
        uint32_t v = pool[i % SS_POOL];
        v ^= hb;
        hb *= SS_MULT_B;
        v *= hb;
        v ^= v >> SS_XSHIFT;
        words[i] = v;
    }
    for (int i = 0; i < 4; i++) out[i] = (uint64_t)words[2 * i] | ((uint64_t)words[2 * i + 1] << 32);
}

static const u128 PCG_MULT = ((u128)0x2360ED051FC65DA4ULL << 64) | 0x4385DF649FCCF645ULL;

static u128 get_state(const np_pcg64_t *g) { return ((u128)g->state_hi << 64) | g->state_lo; }
static u128 get_inc(const np_pcg64_t *g) { return ((u128)g->inc_hi << 64) | g->inc_lo; }
static void put_state(np_pcg64_t *g, u128 s) {
    g->state_hi = (uint64_t)(s >> 64);
    g->state_lo = (uint64_t)s;
}

void np_pcg64_seed(np_pcg64_t *g, uint64_t seed) {
    uint64_t v[4];
    seed_sequence_state(v, seed);
    u128 initstate = ((u128)v[0] << 64) | v[1], initseq = ((u128)v[2] << 64) | v[3];
    u128 inc = (initseq << 1) | 1;
    g->inc_hi = (uint64_t)(inc >> 64);
    g->inc_lo = (uint64_t)inc;
    u128 s = 0;
    s = s * PCG_MULT + inc;
    s += initstate;
    s = s * PCG_MULT + inc;
    put_state(g, s);
    g->has_u32 = 0;
    g->u32 = 0;
}

uint64_t np_pcg64_next_u64(np_pcg64_t *g) {
    u128 s = get_state(g) * PCG_MULT + get_inc(g);
    put_state(g, s);
    uint64_t x = (uint64_t)(s >> 64) ^ (uint64_t)s;
    unsigned rot = (unsigned)(s >> 122);
    return (x >> rot) | (x << ((64 - rot) & 63));
}

uint32_t np_pcg64_next_u32(np_pcg64_t *g) {
    if (g->has_u32) {
        g->has_u32 = 0;
        return g->u32;
    }
    uint64_t x = np_pcg64_next_u64(g);
    g->has_u32 = 1;
    g->u32 = (uint32_t)(x >> 32);
    return (uint32_t)x;
}

uint32_t np_pcg64_below(np_pcg64_t *g, uint64_t n) {
    uint64_t rng = n - 1; /* numpy's inclusive range */
    if (rng == 0) return 0;
    if (rng == 0xFFFFFFFFULL) return np_pcg64_next_u32(g);
    uint32_t excl = (uint32_t)n;
    uint64_t m = (uint64_t)np_pcg64_next_u32(g) * excl;
    uint32_t left = (uint32_t)m;
    if (left < excl) {
        uint32_t threshold = (uint32_t)((UINT32_MAX - rng) % excl);
        while (left < threshold) {
            m = (uint64_t)np_pcg64_next_u32(g) * excl;
            left = (uint32_t)m;
        }
    }
    return (uint32_t)(m >> 32);
}

void bootstrap_indices(uint32_t *idx, uint64_t seed, size_t N, int S) {
    np_pcg64_t g;
    np_pcg64_seed(&g, seed);
    for (size_t i = 0; i < (size_t)S * N; i++) idx[i] = np_pcg64_below(&g, N);
}

/* ---------------------------------------------------------------- resample scores */

double bleu_resample_score(const float *st, const void *user_data, int *is_f32) {
    const bleu_options_t *o = user_data;
    int N = o->max_order < 1 ? 1 : o->max_order > BLEU_MAX_ORDER ? BLEU_MAX_ORDER : o->max_order;
    *is_f32 = 0; /* bp * math.exp(...) is a Python float */
    int64_t sys_len = (int64_t)st[0], ref_len = (int64_t)st[1];
    float correct[BLEU_MAX_ORDER], total[BLEU_MAX_ORDER];
    for (int n = 0; n < N; n++) {
        correct[n] = st[2 + n];
        total[n] = st[2 + N + n];
    }
    double bp = 1.0;
    if (sys_len < ref_len) bp = sys_len > 0 ? exp(1.0 - (double)ref_len / (double)sys_len) : 0.0;
    int any = 0;
    for (int n = 0; n < N; n++) any |= correct[n] != 0;
    if (!any) return 0.0;
    double sv = o->smooth_value;
    if (sv < 0) sv = o->smooth == BLEU_SMOOTH_FLOOR ? 0.1 : 1.0;
    double prec[BLEU_MAX_ORDER] = {0}; /* Python 0.0 until set from float32 arithmetic */
    double smooth_mteval = 1.0;
    int eff_order = N;
    for (int n = 1; n <= N; n++) {
        if (o->smooth == BLEU_SMOOTH_ADD_K && n > 1) {
            correct[n - 1] = correct[n - 1] + (float)sv;
            total[n - 1] = total[n - 1] + (float)sv;
        }
        if (total[n - 1] == 0) break;
        if (o->effective_order) eff_order = n;
        if (correct[n - 1] == 0) {
            if (o->smooth == BLEU_SMOOTH_EXP) {
                smooth_mteval *= 2;
                prec[n - 1] = 100.f / ((float)smooth_mteval * total[n - 1]);
            } else if (o->smooth == BLEU_SMOOTH_FLOOR) {
                prec[n - 1] = (float)(100. * sv) / total[n - 1];
            }
        } else {
            prec[n - 1] = 100.f * correct[n - 1] / total[n - 1];
        }
    }
    double sum = 0.0;
    for (int n = 0; n < eff_order; n++) sum += prec[n] == 0.0 ? -9999999999.0 : log(prec[n]);
    return bp * exp(sum / eff_order);
}

/* A value that is either a Python float (double) or a numpy float32, with NEP 50's rules for
 * mixing them: float32 wins, the Python float is rounded to float32 first. */
typedef struct {
    double v;
    int f32;
} pyval_t;

static pyval_t py_f(double v) { pyval_t r = {v, 0}; return r; }
static pyval_t np_f(float v) { pyval_t r = {v, 1}; return r; }
static pyval_t pv_add(pyval_t a, pyval_t b) {
    return a.f32 || b.f32 ? np_f((float)a.v + (float)b.v) : py_f(a.v + b.v);
}
static pyval_t pv_mul(pyval_t a, pyval_t b) {
    return a.f32 || b.f32 ? np_f((float)a.v * (float)b.v) : py_f(a.v * b.v);
}
static pyval_t pv_div(pyval_t a, pyval_t b) {
    return a.f32 || b.f32 ? np_f((float)a.v / (float)b.v) : py_f(a.v / b.v);
}

double chrf_resample_score(const float *st, const void *user_data, int *is_f32) {
    const chrf_options_t *o = user_data;
    const double eps = 1e-16;
    int order = o->char_order + o->word_order;
    pyval_t factor = py_f((double)(o->beta * o->beta)); /* Python ints act as Python floats here */
    pyval_t one_plus = py_f((double)(1 + o->beta * o->beta));
    pyval_t score = py_f(0.0), avg_prec = py_f(0.0), avg_rec = py_f(0.0);
    int effective_order = 0;
    for (int i = 0; i < order; i++) {
        float n_hyp = st[3 * i], n_ref = st[3 * i + 1], n_match = st[3 * i + 2];
        pyval_t prec = n_hyp > 0 ? np_f(n_match / n_hyp) : py_f(eps);
        pyval_t rec = n_ref > 0 ? np_f(n_match / n_ref) : py_f(eps);
        pyval_t denom = pv_add(pv_mul(factor, prec), rec);
        score = pv_add(score, denom.v > 0 ? pv_div(pv_mul(pv_mul(one_plus, prec), rec), denom) : py_f(eps));
        if (n_hyp > 0 && n_ref > 0) {
            avg_prec = pv_add(avg_prec, prec);
            avg_rec = pv_add(avg_rec, rec);
            effective_order++;
        }
    }
    pyval_t r;
    if (o->eps_smoothing) {
        r = pv_div(pv_mul(py_f(100), score), py_f(order));
    } else {
        if (effective_order == 0) {
            avg_prec = avg_rec = py_f(0.0);
        } else {
            avg_prec = pv_div(avg_prec, py_f(effective_order));
            avg_rec = pv_div(avg_rec, py_f(effective_order));
        }
        if (pv_add(avg_prec, avg_rec).v != 0) {
            pyval_t s = pv_mul(pv_mul(one_plus, avg_prec), avg_rec);
            s = pv_div(s, pv_add(pv_mul(factor, avg_prec), avg_rec));
            r = pv_mul(py_f(100), s);
        } else {
            r = py_f(0.0);
        }
    }
    *is_f32 = r.f32;
    return r.v;
}

/* ---------------------------------------------------------------- numpy reductions */

/* numpy's pairwise summation (loops_utils.h: pairwise_sum, blocks of 128, 8 accumulators) */
static double pairwise_sum_f64(const double *a, size_t n) {
    if (n < 8) {
        double r = 0.;
        for (size_t i = 0; i < n; i++) r += a[i];
        return r;
    }
    if (n <= 128) {
        double r[8];
        for (int j = 0; j < 8; j++) r[j] = a[j];
        size_t i;
        for (i = 8; i < n - (n % 8); i += 8)
            for (int j = 0; j < 8; j++) r[j] += a[i + j];
        double res = ((r[0] + r[1]) + (r[2] + r[3])) + ((r[4] + r[5]) + (r[6] + r[7]));
        for (; i < n; i++) res += a[i];
        return res;
    }
    size_t n2 = n / 2;
    n2 -= n2 % 8;
    return pairwise_sum_f64(a, n2) + pairwise_sum_f64(a + n2, n - n2);
}

static float pairwise_sum_f32(const float *a, size_t n) {
    if (n < 8) {
        float r = 0.f;
        for (size_t i = 0; i < n; i++) r += a[i];
        return r;
    }
    if (n <= 128) {
        float r[8];
        for (int j = 0; j < 8; j++) r[j] = a[j];
        size_t i;
        for (i = 8; i < n - (n % 8); i += 8)
            for (int j = 0; j < 8; j++) r[j] += a[i + j];
        float res = ((r[0] + r[1]) + (r[2] + r[3])) + ((r[4] + r[5]) + (r[6] + r[7]));
        for (; i < n; i++) res += a[i];
        return res;
    }
    size_t n2 = n / 2;
    n2 -= n2 % 8;
    return pairwise_sum_f32(a, n2) + pairwise_sum_f32(a + n2, n - n2);
}

/* ndarray.mean(): the sum divided by an intp count (float32: in float64, then rounded) */
static double mean_f64(const double *a, size_t n) { return pairwise_sum_f64(a, n) / (double)n; }
static float mean_f32(const float *a, size_t n) { return (float)((double)pairwise_sum_f32(a, n) / (double)n); }

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}
static int cmp_float(const void *a, const void *b) {
    float x = *(const float *)a, y = *(const float *)b;
    return (x > y) - (x < y);
}

/* estimate_ci(): mean and half-width of the 95% interval. sc[S] (sorted in place here), f32 says
 * whether numpy holds them as a float32 array; tmp has room for S floats. */
static void estimate_ci(double *mean, double *ci, double *sc, int f32, float *tmp, int S) {
    int lo = S / 40, hi = S - lo - 1;
    if (f32) {
        for (int s = 0; s < S; s++) tmp[s] = (float)sc[s];
        qsort(tmp, (size_t)S, sizeof *tmp, cmp_float);
        *ci = 0.5f * (tmp[hi] - tmp[lo]);
        *mean = mean_f32(tmp, (size_t)S);
    } else {
        qsort(sc, (size_t)S, sizeof *sc, cmp_double);
        *ci = 0.5 * (sc[hi] - sc[lo]);
        *mean = mean_f64(sc, (size_t)S);
    }
}

/* ---------------------------------------------------------------- the test */

tern_status_t paired_bootstrap(paired_bs_result_t *res, const int64_t *base, const int64_t *sys,
                               const uint32_t *idx, score_stats_fn exact, score_resample_fn resample,
                               const void *user_data, uint64_t seed, size_t N, int K, int S) {
    if (N == 0 || N > UINT32_MAX || K <= 0 || S <= 0 || !exact || !resample)
        return tern_error(TERN_ERR_INVALID_ARG, "paired bootstrap: N=%zu K=%d S=%d", N, K, S);
    memset(res, 0, sizeof *res);
    res->samples = S;
    int64_t *ib = calloc((size_t)K, sizeof *ib), *is = calloc((size_t)K, sizeof *is);
    float *fb = malloc((size_t)K * sizeof *fb), *fs = malloc((size_t)K * sizeof *fs);
    double *bl = malloc((size_t)S * sizeof *bl), *sy = malloc((size_t)S * sizeof *sy);
    double *d64 = malloc((size_t)S * sizeof *d64);
    float *d32 = malloc((size_t)S * sizeof *d32);
    tern_status_t st = TERN_OK;
    if (!ib || !is || !fb || !fs || !bl || !sy || !d64 || !d32) {
        st = tern_error(TERN_ERR_NOMEM, "paired bootstrap: out of memory");
        goto done;
    }
    for (size_t i = 0; i < N; i++)
        for (int k = 0; k < K; k++) {
            ib[k] += base[i * (size_t)K + (size_t)k];
            is[k] += sys[i * (size_t)K + (size_t)k];
        }
    res->base_score = exact(ib, user_data);
    res->sys_score = exact(is, user_data);

    np_pcg64_t g;
    np_pcg64_seed(&g, seed);
    int bl_f32 = 1, sy_f32 = 1;
    for (int s = 0; s < S; s++) {
        memset(fb, 0, (size_t)K * sizeof *fb);
        memset(fs, 0, (size_t)K * sizeof *fs);
        for (size_t j = 0; j < N; j++) {
            size_t i = idx ? idx[(size_t)s * N + j] : np_pcg64_below(&g, N);
            if (i >= N) {
                st = tern_error(TERN_ERR_INVALID_ARG, "paired bootstrap: index %zu out of range (N=%zu)", i, N);
                goto done;
            }
            const int64_t *b = base + i * (size_t)K, *y = sys + i * (size_t)K;
            for (int k = 0; k < K; k++) { /* float32 accumulation, row after row, as numpy */
                fb[k] += (float)b[k];
                fs[k] += (float)y[k];
            }
        }
        int f;
        bl[s] = resample(fb, user_data, &f);
        bl_f32 &= f;
        sy[s] = resample(fs, user_data, &f);
        sy_f32 &= f;
    }
    {
        /* sample_diffs = |sys - bl|; stats = sample_diffs - sample_diffs.mean();
         * p = (#{stats > |real diff|} + 1) / (S + 1) */
        double diff = fabs(res->base_score - res->sys_score);
        int c = 0;
        if (bl_f32 && sy_f32) {
            for (int s = 0; s < S; s++) d32[s] = fabsf((float)sy[s] - (float)bl[s]);
            float m = mean_f32(d32, (size_t)S);
            for (int s = 0; s < S; s++) c += (float)(d32[s] - m) > (float)diff;
        } else {
            for (int s = 0; s < S; s++) d64[s] = fabs(sy[s] - bl[s]);
            double m = mean_f64(d64, (size_t)S);
            for (int s = 0; s < S; s++) c += d64[s] - m > diff;
        }
        res->p_value = (double)(c + 1) / (double)(S + 1);
        estimate_ci(&res->sys_mean, &res->sys_ci, sy, sy_f32, d32, S);
        estimate_ci(&res->base_mean, &res->base_ci, bl, bl_f32, d32, S);
    }
done:
    free(ib); free(is); free(fb); free(fs); free(bl); free(sy); free(d64); free(d32);
    return st;
}
