/* ops.c — row ops and elementwise kernels, vectorized with AVX2/FMA (the build's baseline,
 * -march=x86-64-v3): layernorm, softmax / log-softmax / masked softmax, activations, add / scale /
 * axpy / bias, argmax, top-k, float16 / bfloat16 conversions (F16C), log-add-exp (with an AVX-512
 * variant chosen at run time under TERN_MAX_CPU_ISA, see cpu_isa.h).
 * Each one has a scalar reference in kernels_ref.c; tests/c/test_kernels.c states the tolerances.
 *
 * Legend: M rows, C columns (channels) of a row, n a flat element count. */
#include <immintrin.h>
#include <math.h>
#include <string.h>

#include "kernels/cpu_isa.h"
#include "kernels/kernels.h"

/* ------------------------------------------------------------ vector math (AVX2 + FMA) */

static inline float hsum256(__m256 v) {
    __m128 h = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    h = _mm_add_ps(h, _mm_movehl_ps(h, h));
    h = _mm_add_ss(h, _mm_shuffle_ps(h, h, 1));
    return _mm_cvtss_f32(h);
}

static inline float hmax256(__m256 v) {
    __m128 h = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    h = _mm_max_ps(h, _mm_movehl_ps(h, h));
    h = _mm_max_ss(h, _mm_shuffle_ps(h, h, 1));
    return _mm_cvtss_f32(h);
}

static inline double hsum256d(__m256d v) {
    __m128d h = _mm_add_pd(_mm256_castpd256_pd128(v), _mm256_extractf128_pd(v, 1));
    h = _mm_add_sd(h, _mm_unpackhi_pd(h, h));
    return _mm_cvtsd_f64(h);
}

/* Cephes' polynomial coefficients (highest degree first), shared by the AVX2 and AVX-512 code so
 * that both widths run the same operations: expf's on r in [-ln2/2, ln2/2], logf's on f in
 * [sqrt(1/2) - 1, sqrt(2) - 1]. */
enum { EXP_POLY_N = 6, LOG_POLY_N = 9 };
static const float EXP_POLY[EXP_POLY_N] = {1.9875691500E-4f, 1.3981999507E-3f, 8.3334519073E-3f,
                                           4.1665795894E-2f, 1.6666665459E-1f, 5.0000001201E-1f};
static const float LOG_POLY[LOG_POLY_N] = {7.0376836292E-2f,  -1.1514610310E-1f, 1.1676998740E-1f,
                                           -1.2420140846E-1f, 1.4249322787E-1f,  -1.6668057665E-1f,
                                           2.0000714765E-1f,  -2.4999993993E-1f, 3.3333331174E-1f};

/* The common part of exp256 and exp256_le0: x (already clamped) = n ln2 + r, |r| <= ln2/2 (ln2 in
 * two parts), the degree-7 polynomial p(r) ~ e^r; n returned through *np. */
static inline __m256 exp256_poly(__m256 x, __m256 *np) {
    __m256 n = _mm256_floor_ps(_mm256_fmadd_ps(x, _mm256_set1_ps(1.44269504088896341f), _mm256_set1_ps(0.5f)));
    __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x);
    r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
    __m256 p = _mm256_set1_ps(EXP_POLY[0]);
    for (int k = 1; k < EXP_POLY_N; k++) p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(EXP_POLY[k]));
    __m256 r2 = _mm256_mul_ps(r, r);
    *np = n;
    return _mm256_fmadd_ps(p, r2, _mm256_add_ps(r, _mm256_set1_ps(1.0f)));
}

/* exp(x), Cephes-style: x = n ln2 + r, |r| <= ln2/2, degree-7 polynomial; about 1 ulp.
 * Inputs below -88 give 0 (exactly 0 for -inf), above 88.37 they saturate near FLT_MAX. */
static inline __m256 exp256(__m256 x) {
    const __m256 hi = _mm256_set1_ps(88.3762626647949f), lo = _mm256_set1_ps(-88.0f);
    __m256 zero_mask = _mm256_cmp_ps(x, lo, _CMP_LT_OQ), n;
    __m256 p = exp256_poly(_mm256_min_ps(_mm256_max_ps(x, lo), hi), &n);
    __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
    p = _mm256_mul_ps(p, _mm256_castsi256_ps(e));
    return _mm256_andnot_ps(zero_mask, p);
}

/* exp256 for x <= 0 (or NaN), with the same bits as exp256 in two operations fewer: no clamp at
 * 88.37 (min(x, hi) returns x there), and 2^n made by adding n to 2^23 + 127 (n is an integer in
 * [-127, 0]: the sum is exact and its low bits are n + 127) instead of converting n to int32 and
 * adding 127. Checked equal to exp256 on every float of [-100, -0] and on NaNs (maxps gives lo for
 * both). For row_sum_exp, whose inputs are x - max(x). */
static inline __m256 exp256_le0(__m256 x) {
    const __m256 lo = _mm256_set1_ps(-88.0f);
    __m256 zero_mask = _mm256_cmp_ps(x, lo, _CMP_LT_OQ), n;
    __m256 p = exp256_poly(_mm256_max_ps(x, lo), &n);
    __m256i e = _mm256_slli_epi32(_mm256_castps_si256(_mm256_add_ps(n, _mm256_set1_ps(8388735.0f))), 23);
    p = _mm256_mul_ps(p, _mm256_castsi256_ps(e));
    return _mm256_andnot_ps(zero_mask, p);
}

/* tanh(x): odd polynomial for |x| < 0.625 (Cephes tanhf), 1 - 2 / (exp(2|x|) + 1) above. */
static inline __m256 tanh256(__m256 x) {
    const __m256 sign = _mm256_set1_ps(-0.0f);
    __m256 ax = _mm256_andnot_ps(sign, x), sx = _mm256_and_ps(sign, x);
    __m256 z = _mm256_mul_ps(x, x);
    __m256 p = _mm256_set1_ps(-5.70498872745E-3f);
    p = _mm256_fmadd_ps(p, z, _mm256_set1_ps(2.06390887954E-2f));
    p = _mm256_fmadd_ps(p, z, _mm256_set1_ps(-5.37397155531E-2f));
    p = _mm256_fmadd_ps(p, z, _mm256_set1_ps(1.33314422036E-1f));
    p = _mm256_fmadd_ps(p, z, _mm256_set1_ps(-3.33332819422E-1f));
    __m256 small = _mm256_fmadd_ps(_mm256_mul_ps(p, z), x, x);
    __m256 e = exp256(_mm256_add_ps(ax, ax));
    __m256 big = _mm256_sub_ps(_mm256_set1_ps(1.0f),
                               _mm256_div_ps(_mm256_set1_ps(2.0f), _mm256_add_ps(e, _mm256_set1_ps(1.0f))));
    big = _mm256_or_ps(big, sx);
    return _mm256_blendv_ps(big, small, _mm256_cmp_ps(ax, _mm256_set1_ps(0.625f), _CMP_LT_OQ));
}

/* erfc(|z|) with relative error < 1.2e-7 (Numerical Recipes' Chebyshev fit), z given as |z|. */
static inline __m256 erfc_abs256(__m256 az) {
    __m256 t = _mm256_div_ps(_mm256_set1_ps(1.0f), _mm256_fmadd_ps(_mm256_set1_ps(0.5f), az, _mm256_set1_ps(1.0f)));
    __m256 p = _mm256_set1_ps(0.17087277f);
    p = _mm256_fmadd_ps(p, t, _mm256_set1_ps(-0.82215223f));
    p = _mm256_fmadd_ps(p, t, _mm256_set1_ps(1.48851587f));
    p = _mm256_fmadd_ps(p, t, _mm256_set1_ps(-1.13520398f));
    p = _mm256_fmadd_ps(p, t, _mm256_set1_ps(0.27886807f));
    p = _mm256_fmadd_ps(p, t, _mm256_set1_ps(-0.18628806f));
    p = _mm256_fmadd_ps(p, t, _mm256_set1_ps(0.09678418f));
    p = _mm256_fmadd_ps(p, t, _mm256_set1_ps(0.37409196f));
    p = _mm256_fmadd_ps(p, t, _mm256_set1_ps(1.00002368f));
    p = _mm256_fmadd_ps(p, t, _mm256_set1_ps(-1.26551223f));
    __m256 arg = _mm256_fnmadd_ps(az, az, p); /* -z^2 + p */
    return _mm256_mul_ps(t, exp256(arg));
}

/* 0.5 x (1 + erf(x / sqrt 2)) = 0.5 x erfc(-x / sqrt 2), computed from erfc(|z|) so that the
 * negative side keeps its relative accuracy. */
static inline __m256 gelu256(__m256 x) {
    const __m256 sign = _mm256_set1_ps(-0.0f);
    __m256 az = _mm256_mul_ps(_mm256_andnot_ps(sign, x), _mm256_set1_ps(0.70710678118654752f));
    __m256 ec = erfc_abs256(az);
    __m256 pos = _mm256_sub_ps(_mm256_set1_ps(2.0f), ec);
    __m256 f = _mm256_blendv_ps(pos, ec, x); /* sign bit of x selects erfc(|z|) for x < 0 */
    return _mm256_mul_ps(_mm256_mul_ps(_mm256_set1_ps(0.5f), x), f);
}

static inline __m256 sigmoid_mul256(__m256 x, __m256 a) { /* x / (1 + exp(-a x)) */
    __m256 e = exp256(_mm256_mul_ps(_mm256_xor_ps(a, _mm256_set1_ps(-0.0f)), x));
    return _mm256_div_ps(x, _mm256_add_ps(_mm256_set1_ps(1.0f), e));
}

static inline __m256 act256(__m256 x, activation_t act) {
    switch (act) {
    case ACT_RELU: return _mm256_max_ps(x, _mm256_setzero_ps());
    case ACT_GELU_TANH: {
        __m256 x3 = _mm256_mul_ps(_mm256_mul_ps(x, x), x);
        __m256 u = _mm256_mul_ps(_mm256_set1_ps(0.7978845608028654f), _mm256_fmadd_ps(_mm256_set1_ps(0.044715f), x3, x));
        __m256 t = _mm256_add_ps(_mm256_set1_ps(1.0f), tanh256(u));
        return _mm256_mul_ps(_mm256_mul_ps(_mm256_set1_ps(0.5f), x), t);
    }
    case ACT_SWISH: return sigmoid_mul256(x, _mm256_set1_ps(1.0f));
    case ACT_GELU: return gelu256(x);
    case ACT_GELU_SIGMOID: return sigmoid_mul256(x, _mm256_set1_ps(1.702f));
    case ACT_TANH: return tanh256(x);
    default: return x;
    }
}

/* Loads n < 8 floats (rest 0) / stores the first n lanes. */
static inline __m256i tail_mask(int n) {
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(n), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

/* ------------------------------------------------------------ activations */

void activation_forward(float *x, size_t n, activation_t act) {
    size_t i = 0;
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(x + i, act256(_mm256_loadu_ps(x + i), act));
    if (i < n) {
        __m256i m = tail_mask((int)(n - i));
        __m256 v = _mm256_maskload_ps(x + i, m);
        _mm256_maskstore_ps(x + i, m, act256(v, act));
    }
}

/* ------------------------------------------------------------ layernorm */

void layernorm_forward(float *out, float *mean, float *rstd, const float *inp, const float *gamma,
                       const float *beta, int M, int C, float eps) {
    for (int m = 0; m < M; m++) {
        const float *x = inp + (size_t)m * C;
        float *y = out + (size_t)m * C;
        /* Two passes: mean, then the mean of squared deviations (no cancellation). */
        __m256 s0 = _mm256_setzero_ps(), s1 = _mm256_setzero_ps();
        int c = 0;
        for (; c + 16 <= C; c += 16) {
            s0 = _mm256_add_ps(s0, _mm256_loadu_ps(x + c));
            s1 = _mm256_add_ps(s1, _mm256_loadu_ps(x + c + 8));
        }
        float sum = hsum256(_mm256_add_ps(s0, s1));
        for (; c < C; c++) sum += x[c];
        float mu = C > 0 ? sum / (float)C : 0.0f;
        __m256 vmu = _mm256_set1_ps(mu);
        s0 = _mm256_setzero_ps();
        s1 = _mm256_setzero_ps();
        for (c = 0; c + 16 <= C; c += 16) {
            __m256 d0 = _mm256_sub_ps(_mm256_loadu_ps(x + c), vmu);
            __m256 d1 = _mm256_sub_ps(_mm256_loadu_ps(x + c + 8), vmu);
            s0 = _mm256_fmadd_ps(d0, d0, s0);
            s1 = _mm256_fmadd_ps(d1, d1, s1);
        }
        float sq = hsum256(_mm256_add_ps(s0, s1));
        for (; c < C; c++) sq += (x[c] - mu) * (x[c] - mu);
        float var = C > 0 ? sq / (float)C : 0.0f;
        float rs = 1.0f / sqrtf(var + eps);
        if (mean) mean[m] = mu;
        if (rstd) rstd[m] = rs;
        __m256 vrs = _mm256_set1_ps(rs);
        for (c = 0; c + 8 <= C; c += 8) {
            __m256 d = _mm256_mul_ps(_mm256_sub_ps(_mm256_loadu_ps(x + c), vmu), vrs);
            _mm256_storeu_ps(y + c, _mm256_fmadd_ps(d, _mm256_loadu_ps(gamma + c), _mm256_loadu_ps(beta + c)));
        }
        for (; c < C; c++) y[c] = (x[c] - mu) * rs * gamma[c] + beta[c];
    }
}

/* ------------------------------------------------------------ softmax */

static float row_max(const float *x, int n) {
    __m256 vm = _mm256_set1_ps(-INFINITY);
    int i = 0;
    for (; i + 8 <= n; i += 8) vm = _mm256_max_ps(vm, _mm256_loadu_ps(x + i));
    float mx = hmax256(vm);
    for (; i < n; i++) mx = x[i] > mx ? x[i] : mx;
    return mx;
}

/* sum of exp(x - mx) over n entries (mx: the row's max, so x - mx <= 0), accumulated in double;
 * writes the exps into y when y != NULL. Four vectors per iteration (their exps independent, added
 * in the same order as one at a time: the same sums). */
/* The end of row_sum_exp from element i: 8 at a time, then the masked tail, into the accumulators
 * a0 (lanes 0-3) and a1 (lanes 4-7), then their sum. */
static inline double row_sum_exp_rest(float *y, const float *x, int n, int i, float mx, __m256d a0, __m256d a1) {
    const __m256 vmx = _mm256_set1_ps(mx);
    for (; i + 8 <= n; i += 8) {
        __m256 e = exp256_le0(_mm256_sub_ps(_mm256_loadu_ps(x + i), vmx));
        if (y) _mm256_storeu_ps(y + i, e);
        a0 = _mm256_add_pd(a0, _mm256_cvtps_pd(_mm256_castps256_ps128(e)));
        a1 = _mm256_add_pd(a1, _mm256_cvtps_pd(_mm256_extractf128_ps(e, 1)));
    }
    if (i < n) {
        __m256i m = tail_mask(n - i);
        __m256 e = exp256_le0(_mm256_sub_ps(_mm256_maskload_ps(x + i, m), vmx));
        e = _mm256_and_ps(e, _mm256_castsi256_ps(m));
        if (y) _mm256_maskstore_ps(y + i, m, e);
        a0 = _mm256_add_pd(a0, _mm256_cvtps_pd(_mm256_castps256_ps128(e)));
        a1 = _mm256_add_pd(a1, _mm256_cvtps_pd(_mm256_extractf128_ps(e, 1)));
    }
    return hsum256d(_mm256_add_pd(a0, a1));
}

static double row_sum_exp512(float *y, const float *x, int n, float mx);
static double row_sum_exp256(float *y, const float *x, int n, float mx);
static double row_sum_exp(float *y, const float *x, int n, float mx) {
    if (n >= 32 && cpu_isa_effective() >= CPU_ISA_AVX512_CORE) return row_sum_exp512(y, x, n, mx);
    return row_sum_exp256(y, x, n, mx);
}

double row_sum_exp_width(float *y, const float *x, int n, float mx, int wide) {
    return wide ? row_sum_exp512(y, x, n, mx) : row_sum_exp256(y, x, n, mx);
}

static double row_sum_exp256(float *y, const float *x, int n, float mx) {
    __m256 vmx = _mm256_set1_ps(mx);
    __m256d a0 = _mm256_setzero_pd(), a1 = _mm256_setzero_pd();
    int i = 0;
#define RSE_ACC(e)                                                                                 \
    a0 = _mm256_add_pd(a0, _mm256_cvtps_pd(_mm256_castps256_ps128(e)));                            \
    a1 = _mm256_add_pd(a1, _mm256_cvtps_pd(_mm256_extractf128_ps(e, 1)))
    for (; i + 32 <= n; i += 32) {
        __m256 e0 = exp256_le0(_mm256_sub_ps(_mm256_loadu_ps(x + i), vmx));
        __m256 e1 = exp256_le0(_mm256_sub_ps(_mm256_loadu_ps(x + i + 8), vmx));
        __m256 e2 = exp256_le0(_mm256_sub_ps(_mm256_loadu_ps(x + i + 16), vmx));
        __m256 e3 = exp256_le0(_mm256_sub_ps(_mm256_loadu_ps(x + i + 24), vmx));
        if (y) {
            _mm256_storeu_ps(y + i, e0);
            _mm256_storeu_ps(y + i + 8, e1);
            _mm256_storeu_ps(y + i + 16, e2);
            _mm256_storeu_ps(y + i + 24, e3);
        }
        RSE_ACC(e0);
        RSE_ACC(e1);
        RSE_ACC(e2);
        RSE_ACC(e3);
    }
#undef RSE_ACC
    return row_sum_exp_rest(y, x, n, i, mx, a0, a1);
}

static void fill_row(float *y, int n, float v) {
    for (int i = 0; i < n; i++) y[i] = v;
}

static void softmax_row(float *y, const float *x, int n) {
    if (n <= 0) return;
    float mx = row_max(x, n);
    if (mx == -INFINITY) { /* every entry masked: probabilities 0 */
        fill_row(y, n, 0.0f);
        return;
    }
    double sum = row_sum_exp(y, x, n, mx);
    scale_inplace(y, (float)(1.0 / sum), (size_t)n);
}

void softmax_forward(float *out, const float *inp, int M, int C) {
    for (int m = 0; m < M; m++) softmax_row(out + (size_t)m * C, inp + (size_t)m * C, C);
}

void log_softmax_forward(float *out, const float *inp, int M, int C) {
    for (int m = 0; m < M; m++) {
        const float *x = inp + (size_t)m * C;
        float *y = out + (size_t)m * C;
        if (C <= 0) continue;
        float mx = row_max(x, C);
        if (mx == -INFINITY) {
            fill_row(y, C, -INFINITY);
            continue;
        }
        float lse = (float)log(row_sum_exp(NULL, x, C, mx));
        __m256 vmx = _mm256_set1_ps(mx), vl = _mm256_set1_ps(lse);
        int i = 0;
        for (; i + 8 <= C; i += 8)
            _mm256_storeu_ps(y + i, _mm256_sub_ps(_mm256_sub_ps(_mm256_loadu_ps(x + i), vmx), vl));
        for (; i < C; i++) y[i] = (x[i] - mx) - lse;
    }
}

/* Max and sum (in double) of a row, in one pass. */
static float row_max_sum(const float *x, int n, double *sum) {
    __m256 vm = _mm256_set1_ps(-INFINITY);
    __m256d a0 = _mm256_setzero_pd(), a1 = _mm256_setzero_pd();
    int i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 v = _mm256_loadu_ps(x + i);
        vm = _mm256_max_ps(vm, v);
        a0 = _mm256_add_pd(a0, _mm256_cvtps_pd(_mm256_castps256_ps128(v)));
        a1 = _mm256_add_pd(a1, _mm256_cvtps_pd(_mm256_extractf128_ps(v, 1)));
    }
    float mx = hmax256(vm);
    double s = hsum256d(_mm256_add_pd(a0, a1));
    for (; i < n; i++) {
        mx = x[i] > mx ? x[i] : mx;
        s += x[i];
    }
    *sum = s;
    return mx;
}

void softmax_lse_forward(float *out, double *lse, double *sum_in, const float *inp, int M, int C) {
    for (int m = 0; m < M; m++) {
        const float *x = inp + (size_t)m * C;
        float *y = out + (size_t)m * C;
        if (C <= 0) continue;
        float mx = row_max_sum(x, C, &sum_in[m]);
        if (mx == -INFINITY) {
            fill_row(y, C, 0.0f);
            lse[m] = -INFINITY;
            continue;
        }
        double sum = row_sum_exp(y, x, C, mx);
        scale_inplace(y, (float)(1.0 / sum), (size_t)C);
        lse[m] = (double)mx + log(sum);
    }
}

void log_softmax_stats(float *max_value, float *lse, const float *inp, int M, int C) {
    for (int m = 0; m < M; m++) {
        const float *x = inp + (size_t)m * C;
        float mx = C > 0 ? row_max(x, C) : -INFINITY;
        max_value[m] = mx;
        lse[m] = mx == -INFINITY ? 0.0f : (float)log(row_sum_exp(NULL, x, C, mx));
    }
}

void softmax_masked_forward(float *out, const float *inp, const int *len, int M, int C) {
    for (int m = 0; m < M; m++) {
        int n = len[m] < 0 ? 0 : len[m] > C ? C : len[m];
        softmax_row(out + (size_t)m * C, inp + (size_t)m * C, n);
        fill_row(out + (size_t)m * C + n, C - n, 0.0f);
    }
}

/* ------------------------------------------------------------ log-add-exp (ensembles' prob-mean) */

/* Both widths run the same IEEE operations in the same order (exp256 / exp512 and the log1p
 * below), so the AVX2 and AVX-512 paths give the same bits; tests/c/test_kernels.c checks it. */

/* log1p(y) for y in [0, 1] (y = exp(-d), d >= 0), Cephes logf's polynomial on f in
 * [sqrt(1/2) - 1, sqrt(2) - 1]: below sqrt(2) - 1, log1p(y) = f + poly(f) with f = y itself (no
 * rounding of 1 + y, so small y keep their relative accuracy); above, log1p(y) = ln 2 +
 * log1p((y - 1) / 2). */
static inline __m256 log1p_unit256(__m256 y) {
    __m256 big = _mm256_cmp_ps(y, _mm256_set1_ps(0.414213562373095f), _CMP_GE_OQ);
    __m256 f = _mm256_blendv_ps(y, _mm256_fmsub_ps(y, _mm256_set1_ps(0.5f), _mm256_set1_ps(0.5f)), big);
    __m256 e = _mm256_and_ps(big, _mm256_set1_ps(1.0f));
    __m256 z = _mm256_mul_ps(f, f);
    __m256 p = _mm256_set1_ps(LOG_POLY[0]);
    for (int k = 1; k < LOG_POLY_N; k++) p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(LOG_POLY[k]));
    p = _mm256_mul_ps(_mm256_mul_ps(p, f), z);
    p = _mm256_fmadd_ps(e, _mm256_set1_ps(-2.12194440e-4f), p);
    p = _mm256_fnmadd_ps(_mm256_set1_ps(0.5f), z, p);
    return _mm256_fmadd_ps(e, _mm256_set1_ps(0.693359375f), _mm256_add_ps(f, p));
}

/* log(exp(a) + exp(b)) = max + log1p(exp(min - max)); max when min is -inf (both -inf: -inf),
 * NaN when either is NaN. */
static inline __m256 logaddexp256(__m256 a, __m256 b) {
    __m256 mx = _mm256_max_ps(a, b), mn = _mm256_min_ps(a, b);
    __m256 r = _mm256_add_ps(mx, log1p_unit256(exp256(_mm256_sub_ps(mn, mx))));
    r = _mm256_blendv_ps(r, mx, _mm256_cmp_ps(mn, _mm256_set1_ps(-INFINITY), _CMP_EQ_OQ));
    return _mm256_blendv_ps(r, _mm256_add_ps(a, b), _mm256_cmp_ps(a, b, _CMP_UNORD_Q));
}

void logaddexp_inplace_avx2(float *y, const float *x, float c, size_t n) {
    const __m256 vc = _mm256_set1_ps(c);
    size_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(y + i, logaddexp256(_mm256_loadu_ps(y + i), _mm256_add_ps(_mm256_loadu_ps(x + i), vc)));
    if (i < n) {
        __m256i m = tail_mask((int)(n - i));
        __m256 r = logaddexp256(_mm256_maskload_ps(y + i, m), _mm256_add_ps(_mm256_maskload_ps(x + i, m), vc));
        _mm256_maskstore_ps(y + i, m, r);
    }
}

#define AVX512_TARGET __attribute__((target("avx512f,avx512dq,avx512bw,avx512vl")))

/* exp256 at 16 lanes: the same operations. */
AVX512_TARGET static inline __m512 exp512(__m512 x) {
    const __m512 hi = _mm512_set1_ps(88.3762626647949f), lo = _mm512_set1_ps(-88.0f);
    __mmask16 zero = _mm512_cmp_ps_mask(x, lo, _CMP_LT_OQ);
    x = _mm512_min_ps(_mm512_max_ps(x, lo), hi);
    __m512 n = _mm512_roundscale_ps(_mm512_fmadd_ps(x, _mm512_set1_ps(1.44269504088896341f), _mm512_set1_ps(0.5f)),
                                    _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC);
    __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), x);
    r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
    __m512 p = _mm512_set1_ps(EXP_POLY[0]);
    for (int k = 1; k < EXP_POLY_N; k++) p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(EXP_POLY[k]));
    __m512 r2 = _mm512_mul_ps(r, r);
    p = _mm512_fmadd_ps(p, r2, _mm512_add_ps(r, _mm512_set1_ps(1.0f)));
    __m512i e = _mm512_slli_epi32(_mm512_add_epi32(_mm512_cvtps_epi32(n), _mm512_set1_epi32(127)), 23);
    p = _mm512_mul_ps(p, _mm512_castsi512_ps(e));
    return _mm512_mask_blend_ps(zero, p, _mm512_setzero_ps());
}

/* row_sum_exp with the exps of its 32-element blocks taken 16 at a time (exp512: the same bits as
 * exp256_le0 for x - mx <= 0 and NaN), added into the two double accumulators in the same order
 * as row_sum_exp's (a0: elements 0-3, 8-11, 16-19, 24-27 of a block, a1: the others): the same sum,
 * bit for bit; the rest as row_sum_exp. */
AVX512_TARGET static double row_sum_exp512(float *y, const float *x, int n, float mx) {
    const __m512 vmx = _mm512_set1_ps(mx);
    __m256d a0 = _mm256_setzero_pd(), a1 = _mm256_setzero_pd();
    int i = 0;
#define RSE_ACC(e)                                                                                 \
    a0 = _mm256_add_pd(a0, _mm256_cvtps_pd(_mm256_castps256_ps128(e)));                            \
    a1 = _mm256_add_pd(a1, _mm256_cvtps_pd(_mm256_extractf128_ps(e, 1)))
    for (; i + 32 <= n; i += 32) {
        __m512 z0 = exp512(_mm512_sub_ps(_mm512_loadu_ps(x + i), vmx));
        __m512 z1 = exp512(_mm512_sub_ps(_mm512_loadu_ps(x + i + 16), vmx));
        if (y) {
            _mm512_storeu_ps(y + i, z0);
            _mm512_storeu_ps(y + i + 16, z1);
        }
        __m256 e0 = _mm512_castps512_ps256(z0), e1 = _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(z0), 1));
        __m256 e2 = _mm512_castps512_ps256(z1), e3 = _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(z1), 1));
        RSE_ACC(e0);
        RSE_ACC(e1);
        RSE_ACC(e2);
        RSE_ACC(e3);
    }
#undef RSE_ACC
    return row_sum_exp_rest(y, x, n, i, mx, a0, a1);
}

AVX512_TARGET static inline __m512 log1p_unit512(__m512 y) {
    __mmask16 big = _mm512_cmp_ps_mask(y, _mm512_set1_ps(0.414213562373095f), _CMP_GE_OQ);
    __m512 f = _mm512_mask_blend_ps(big, y, _mm512_fmsub_ps(y, _mm512_set1_ps(0.5f), _mm512_set1_ps(0.5f)));
    __m512 e = _mm512_maskz_mov_ps(big, _mm512_set1_ps(1.0f));
    __m512 z = _mm512_mul_ps(f, f);
    __m512 p = _mm512_set1_ps(LOG_POLY[0]);
    for (int k = 1; k < LOG_POLY_N; k++) p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(LOG_POLY[k]));
    p = _mm512_mul_ps(_mm512_mul_ps(p, f), z);
    p = _mm512_fmadd_ps(e, _mm512_set1_ps(-2.12194440e-4f), p);
    p = _mm512_fnmadd_ps(_mm512_set1_ps(0.5f), z, p);
    return _mm512_fmadd_ps(e, _mm512_set1_ps(0.693359375f), _mm512_add_ps(f, p));
}

AVX512_TARGET static inline __m512 logaddexp512(__m512 a, __m512 b) {
    __m512 mx = _mm512_max_ps(a, b), mn = _mm512_min_ps(a, b);
    __m512 r = _mm512_add_ps(mx, log1p_unit512(exp512(_mm512_sub_ps(mn, mx))));
    r = _mm512_mask_blend_ps(_mm512_cmp_ps_mask(mn, _mm512_set1_ps(-INFINITY), _CMP_EQ_OQ), r, mx);
    return _mm512_mask_blend_ps(_mm512_cmp_ps_mask(a, b, _CMP_UNORD_Q), r, _mm512_add_ps(a, b));
}

AVX512_TARGET void logaddexp_inplace_avx512(float *y, const float *x, float c, size_t n) {
    const __m512 vc = _mm512_set1_ps(c);
    size_t i = 0;
    for (; i + 16 <= n; i += 16)
        _mm512_storeu_ps(y + i, logaddexp512(_mm512_loadu_ps(y + i), _mm512_add_ps(_mm512_loadu_ps(x + i), vc)));
    if (i < n) {
        __mmask16 m = (__mmask16)((1u << (n - i)) - 1u);
        __m512 r = logaddexp512(_mm512_maskz_loadu_ps(m, y + i), _mm512_add_ps(_mm512_maskz_loadu_ps(m, x + i), vc));
        _mm512_mask_storeu_ps(y + i, m, r);
    }
}

void logaddexp_inplace(float *y, const float *x, float c, size_t n) {
    if (cpu_isa_effective() >= CPU_ISA_AVX512_CORE) logaddexp_inplace_avx512(y, x, c, n);
    else logaddexp_inplace_avx2(y, x, c, n);
}

/* ------------------------------------------------------------ elementwise */

void add_inplace(float *y, const float *x, size_t n) {
    size_t i = 0;
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, _mm256_add_ps(_mm256_loadu_ps(y + i), _mm256_loadu_ps(x + i)));
    for (; i < n; i++) y[i] += x[i];
}

void scale_inplace(float *y, float a, size_t n) {
    __m256 va = _mm256_set1_ps(a);
    size_t i = 0;
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, _mm256_mul_ps(_mm256_loadu_ps(y + i), va));
    for (; i < n; i++) y[i] *= a;
}

void axpy(float *y, float a, const float *x, size_t n) {
    __m256 va = _mm256_set1_ps(a);
    size_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(y + i, _mm256_fmadd_ps(_mm256_loadu_ps(x + i), va, _mm256_loadu_ps(y + i)));
    for (; i < n; i++) y[i] = fmaf(x[i], a, y[i]);
}

void add_bias_rows(float *x, const float *bias, int M, int C) {
    for (int m = 0; m < M; m++) add_inplace(x + (size_t)m * C, bias, (size_t)C);
}

/* ------------------------------------------------------------ argmax, top-k */

void argmax_rows(int *out, float *max_value, const float *x, int M, int C) {
    for (int m = 0; m < M; m++) {
        const float *r = x + (size_t)m * C;
        if (C <= 0) {
            out[m] = 0;
            if (max_value) max_value[m] = -INFINITY;
            continue;
        }
        float mx = row_max(r, C);
        /* First index holding the max (if the row has NaNs, fall back to a scalar scan). */
        int best = -1;
        __m256 vm = _mm256_set1_ps(mx);
        int c = 0;
        for (; c + 8 <= C && best < 0; c += 8) {
            int mask = _mm256_movemask_ps(_mm256_cmp_ps(_mm256_loadu_ps(r + c), vm, _CMP_EQ_OQ));
            if (mask) best = c + __builtin_ctz((unsigned)mask);
        }
        for (; c < C && best < 0; c++) if (r[c] == mx) best = c;
        if (best < 0) {
            best = 0;
            for (c = 1; c < C; c++) if (r[c] > r[best]) best = c;
        }
        out[m] = best;
        if (max_value) max_value[m] = r[best];
    }
}

void topk(float *values, int *indices, const float *x, int n, int k) {
    if (k > n) k = n;
    if (k <= 0) return;
    int len = 0, i = 0;
    for (; i < n && len < k; i++) topk_insert(values, indices, &len, k, x[i], i);
    for (; i < n; i++) {
        /* Skip blocks of 8 that cannot enter (all <= the current k-th value). */
        if ((i & 7) == 0) {
            while (i + 8 <= n) {
                __m256 th = _mm256_set1_ps(values[k - 1]);
                int mask = _mm256_movemask_ps(_mm256_cmp_ps(_mm256_loadu_ps(x + i), th, _CMP_GT_OQ));
                if (mask) break;
                i += 8;
            }
            if (i >= n) break;
        }
        if (x[i] > values[k - 1]) topk_insert(values, indices, &len, k, x[i], i);
    }
}

/* ------------------------------------------------------------ conversions (F16C) */

float half_to_float(uint16_t h) { return _cvtsh_ss(h); }

uint16_t float_to_half(float f) { return (uint16_t)_cvtss_sh(f, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC); }

float bf16_to_float(uint16_t b) {
    uint32_t bits = (uint32_t)b << 16;
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

uint16_t float_to_bf16(float f) {
    uint32_t bits;
    memcpy(&bits, &f, 4);
    if ((bits & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((bits >> 16) | 0x0040); /* quiet NaN */
    bits += 0x7fffu + ((bits >> 16) & 1u);                                               /* nearest even */
    return (uint16_t)(bits >> 16);
}

void half_to_float_array(float *out, const uint16_t *in, size_t n) {
    size_t i = 0;
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(out + i, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(in + i))));
    for (; i < n; i++) out[i] = _cvtsh_ss(in[i]);
}

void bf16_to_float_array(float *out, const uint16_t *in, size_t n) {
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256i v = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)(in + i)));
        _mm256_storeu_si256((__m256i *)(out + i), _mm256_slli_epi32(v, 16));
    }
    for (; i < n; i++) out[i] = bf16_to_float(in[i]);
}
