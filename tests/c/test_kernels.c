/*
 * test_kernels.c — every kernel of src/kernels/kernels.h against its scalar reference
 * (src/kernels/kernels_ref.c, or a one-line scalar loop here for the kernels that are a single
 * IEEE operation per element), at shapes that exercise the vector bodies and their tails
 * (1, 3, 7, 17, 33, 64, 100 and 1000+), with a stated tolerance per kernel:
 *
 *   gemm_f32, gemm_f32_batched   |c - ref| <= 1e-5 * (|alpha| sum_k |a_mk b_kn| + |beta c0|)
 *                                (relative to the magnitude of the exact sum), both backends
 *                                (oneDNN dnnl_sgemm, OpenBLAS cblas_sgemm), all four transposes,
 *                                padded leading dimensions, alpha/beta, K = 0; 1 vs 2 threads.
 *                                gemm.c's rule picks oneDNN for every shape today, so OpenBLAS is
 *                                tested by calling cblas_sgemm exactly as gemm.c calls it
 *   linear_forward float32       as gemm: 1e-5 relative to sum_k |a_k w_nk| + |bias|
 *   linear_forward int8          bit-exact against linear_forward_ref (the int32 product is
 *                                exact, the dequantization the same three float operations);
 *                                the int32 product itself checked exactly (scales 1; extreme
 *                                +-127 rows that saturate a 16-bit pair sum), on every CPU; against
 *                                the float32 product within the quantization error bound
 *                                sum_k (0.501/sa |w^_nk| + 0.5/sw_n |a_k|) + 1e-5 sum_k |a_k w_nk|;
 *                                1 vs 2 threads bit-identical
 *   gemm_s8s8s32                 exact (int64 reference), -128 included, 1 vs 2 threads
 *   quantize_rows_s8 / _u8       bit-exact (values and scales), rounding ties, NaN and inf included
 *   linear_prepare_s8            exact
 *   linear_forward_packed_s8     bit-exact against linear_forward_ref and linear_forward (int8 weights
 *                                packed for oneDNN's matmul, VNNI only; the plain q not read), M over
 *                                one kernel call (128 rows), 1 vs 2 threads, int32 extremes exact;
 *                                _act with ReLU bit-exact against the reference then max(v, 0)
 *   f32p_forward (Tern's packed  bit-exact against a scalar fmaf chain per output (k ascending from 0,
 *   float32, AVX2)               then + bias, then ReLU: the order the kernel promises), and within
 *                                (K + 1) 2^-24 (sum_k |a_k w_nk| + |bias_n|) of a double-precision
 *                                reference (the bound of recursive FMA summation); M 1..14 and 17..130
 *                                (every tile shape, row chunks), K = 0, N and K off the panel (16) and
 *                                vector (8) sizes, bias and ReLU on/off, 1, 2 and 3 threads; nothing
 *                                written past the output
 *   gemm_packed_forward float32  the dispatched packed layer (oneDNN brgemm where oneDNN has it, Tern's
 *                                panels otherwise: under ONEDNN_MAX_CPU_ISA=AVX2 it must be Tern's):
 *                                within the same bound of the double reference, bit-exact against the
 *                                fmaf chain when Tern's; gemm_packed_weight_at / gemm_packed_offsets
 *                                give back every W[n, k] exactly
 *   layernorm_forward            |y - ref| <= 5e-6 (1 + |ref|); mean and rstd 1e-6 relative
 *   softmax / masked softmax     |p - ref| <= (1e-6 + 1.2e-7 |x - max|) ref + 1e-37: 1e-6 relative,
 *                                plus the float rounding of x - max that exp amplifies, plus an
 *                                absolute floor for results below FLT_MIN
 *   log_softmax                  |y - ref| <= 5e-7 (1 + |ref|); -inf exactly where ref is -inf
 *   activations                  relu exact; tanh 2e-7 relative; swish, gelu_sigmoid 2e-7, gelu
 *                                5e-7 relative, plus the rounding of the exp argument t
 *                                (2.4e-7 |t| relative); gelu_tanh 2e-7 relative + 1.2e-7 |x|
 *                                absolute (its float 1 + tanh cancels for x < 0): act_tol()
 *   add_inplace, scale_inplace, axpy, add_bias_rows   bit-exact (one rounding per element; axpy
 *                                is a fused multiply-add in body and tail)
 *   argmax_rows, topk            exact indices and values, ties to the lower index
 *   float16 / bfloat16           bit-exact both ways against the bit-arithmetic references, on
 *                                all 65,536 halves / bfloat16s and on a sweep of floats with every
 *                                exponent, rounding ties (even and odd), the overflow threshold,
 *                                subnormals, infinities and NaN payloads; plus anchor values
 *                                computed by hand
 * Elementwise kernels are also checked not to write past n (guard values after the end).
 */
#include <cblas.h>
#include <cpuid.h>
#include <float.h>
#include <math.h>
#include <oneapi/dnnl/dnnl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "check.h"
#include "kernels/cpu_isa.h"
#include "kernels/gemm_f32p.h"
#include "kernels/gemm_packed.h"
#include "kernels/gemm_s8.h"
#include "kernels/gemm_s8v.h"
#include "kernels/kernels.h"

/* ------------------------------------------------------------ helpers */

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;

static uint64_t rng_u64(void) { /* xorshift64* */
    rng_state ^= rng_state >> 12;
    rng_state ^= rng_state << 25;
    rng_state ^= rng_state >> 27;
    return rng_state * 0x2545f4914f6cdd1dull;
}

static uint32_t rng_u32(void) { return (uint32_t)(rng_u64() >> 32); }

/* uniform in [lo, hi) */
static float rng_uniform(float lo, float hi) {
    return lo + (hi - lo) * (float)((double)(rng_u64() >> 11) / 9007199254740992.0);
}

static float rng_normal(void) {
    double u1 = ((double)(rng_u64() >> 11) + 1.0) / 9007199254740993.0;
    double u2 = (double)(rng_u64() >> 11) / 9007199254740992.0;
    return (float)(sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2));
}

static void fill_normal(float *x, size_t n, float scale, float offset) {
    for (size_t i = 0; i < n; i++) x[i] = offset + scale * rng_normal();
}

static uint32_t fbits(float f) {
    uint32_t b;
    memcpy(&b, &f, 4);
    return b;
}

static float bitsf(uint32_t b) {
    float f;
    memcpy(&f, &b, 4);
    return f;
}

static float *falloc(size_t n) {
    float *p = aligned_alloc64((n ? n : 1) * sizeof(float));
    if (!p) {
        fprintf(stderr, "out of memory\n");
        exit(2);
    }
    return p;
}

#define GUARD 8
#define GUARD_VALUE 12345.678f

/* ------------------------------------------------------------ GEMM */

/* The reference with |A|, |B|, |alpha|, |beta|, |C0|: the magnitude the error is relative to. */
static void gemm_abs_scale(float *S, int transA, int transB, int M, int N, int K, float alpha,
                           const float *A, int lda, size_t nA, const float *B, int ldb, size_t nB,
                           float beta, const float *C0, int ldc) {
    float *aA = falloc(nA), *aB = falloc(nB);
    for (size_t i = 0; i < nA; i++) aA[i] = fabsf(A[i]);
    for (size_t i = 0; i < nB; i++) aB[i] = fabsf(B[i]);
    for (int m = 0; m < M; m++)
        for (int n = 0; n < N; n++) S[(size_t)m * ldc + n] = fabsf(C0[(size_t)m * ldc + n]);
    gemm_f32_ref(transA, transB, M, N, K, fabsf(alpha), aA, lda, aB, ldb, fabsf(beta), S, ldc);
    aligned_free(aA);
    aligned_free(aB);
}

typedef enum { VIA_DISPATCH = 0, VIA_ONEDNN = 1, VIA_OPENBLAS = 2, VIA_SMALL = 3 } gemm_via_t;
static const char *via_name[] = {"gemm_f32", "dnnl_sgemm", "cblas_sgemm", "gemm_f32_small"};

/* The two libraries called exactly as gemm.c calls them (row-major, 'N'/'T'). */
static void gemm_via(gemm_via_t via, int tA, int tB, int M, int N, int K, float alpha, const float *A,
                     int lda, const float *B, int ldb, float beta, float *C, int ldc) {
    if (via == VIA_DISPATCH) gemm_f32(tA, tB, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
    else if (via == VIA_SMALL) gemm_f32_small(tA, tB, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
    else if (via == VIA_ONEDNN) dnnl_sgemm(tA ? 'T' : 'N', tB ? 'T' : 'N', M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
    else cblas_sgemm(CblasRowMajor, tA ? CblasTrans : CblasNoTrans, tB ? CblasTrans : CblasNoTrans, M, N, K,
                     alpha, A, lda, B, ldb, beta, C, ldc);
}

#define GEMM_RTOL 1e-5
static double gemm_worst = 0; /* largest |c - ref| / scale seen */

/* One gemm case: returns the number of failing elements. */
static int gemm_case(gemm_via_t via, int tA, int tB, int M, int N, int K, float alpha, float beta, int pad) {
    int rowsA = tA ? K : M, colsA = tA ? M : K, rowsB = tB ? N : K, colsB = tB ? K : N;
    int lda = colsA + pad, ldb = colsB + pad, ldc = N + pad;
    size_t nA = (size_t)rowsA * lda, nB = (size_t)rowsB * ldb, nC = (size_t)M * ldc;
    float *A = falloc(nA), *B = falloc(nB), *C = falloc(nC), *R = falloc(nC), *S = falloc(nC), *C0 = falloc(nC);
    fill_normal(A, nA, 1.0f, 0.0f);
    fill_normal(B, nB, 1.0f, 0.25f);
    fill_normal(C0, nC, 1.0f, 0.0f);
    memcpy(C, C0, nC * sizeof(float));
    memcpy(R, C0, nC * sizeof(float));
    gemm_via(via, tA, tB, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
    gemm_f32_ref(tA, tB, M, N, K, alpha, A, lda, B, ldb, beta, R, ldc);
    gemm_abs_scale(S, tA, tB, M, N, K, alpha, A, lda, nA, B, ldb, nB, beta, C0, ldc);
    int bad = 0;
    for (int m = 0; m < M; m++) {
        for (int n = 0; n < ldc; n++) {
            size_t i = (size_t)m * ldc + n;
            if (n >= N) { /* padding columns of C are never written */
                if (fbits(C[i]) != fbits(C0[i])) bad++;
                continue;
            }
            double err = fabs((double)C[i] - R[i]), scale = S[i] > 0 ? S[i] : 1e-30;
            if (err / scale > gemm_worst) gemm_worst = err / scale;
            if (!(err <= GEMM_RTOL * scale + 1e-30)) {
                if (bad < 3)
                    fprintf(stderr, "%s tA=%d tB=%d M=%d N=%d K=%d alpha=%g beta=%g pad=%d: C[%d,%d] = %.9g, "
                            "ref %.9g, scale %.3g\n", via_name[via], tA, tB, M, N, K, alpha, beta, pad, m, n,
                            C[i], R[i], S[i]);
                bad++;
            }
        }
    }
    aligned_free(A);
    aligned_free(B);
    aligned_free(C);
    aligned_free(R);
    aligned_free(S);
    aligned_free(C0);
    return bad;
}

static const int gemm_shapes[][3] = {
    {1, 1, 1},    {1, 3, 7},    {3, 7, 17},  {7, 17, 33},   {17, 33, 64}, {33, 64, 100}, {64, 100, 3},
    {100, 1, 64}, {2, 1031, 17}, {3, 17, 1500}, {1003, 3, 7}, {8, 8, 8},   {16, 24, 40},
    /* training attention's per-head shapes (gemm_f32_small): Tq x Tk x D, Tq x D x Tk */
    {25, 25, 64}, {23, 31, 64}, {31, 64, 23}, {5, 9, 64}, {44, 28, 128}, {9, 600, 64},
};

static void test_gemm(void) {
    int nshapes = (int)(sizeof gemm_shapes / sizeof gemm_shapes[0]);
    kernels_set_num_threads(1);
    for (int via = VIA_DISPATCH; via <= VIA_SMALL; via++) {
        for (int s = 0; s < nshapes; s++) {
            int M = gemm_shapes[s][0], N = gemm_shapes[s][1], K = gemm_shapes[s][2];
            for (int t = 0; t < 4; t++) {
                int tA = t & 1, tB = t >> 1;
                CHECK_MSG(gemm_case(via, tA, tB, M, N, K, 1.0f, 0.0f, 0) == 0, "%s %dx%dx%d", via_name[via], M, N, K);
                CHECK_MSG(gemm_case(via, tA, tB, M, N, K, -0.75f, 1.5f, 3) == 0, "%s %dx%dx%d ab", via_name[via], M, N, K);
            }
        }
    }
    /* The dispatch names one of the two libraries for every shape. */
    for (int s = 0; s < nshapes; s++) {
        const char *b = gemm_f32_backend_name(0, 1, gemm_shapes[s][0], gemm_shapes[s][1], gemm_shapes[s][2]);
        CHECK(b && (!strcmp(b, "oneDNN") || !strcmp(b, "OpenBLAS")));
    }
    /* K = 0: C = beta C (and exactly 0 for beta 0, even over NaN garbage); M = 0, N = 0: no-op. */
    float C[6] = {1, 2, 3, 4, 5, 6}, A[1] = {7}, B[1] = {9};
    gemm_f32(0, 0, 2, 3, 0, 1.0f, A, 1, B, 3, 0.5f, C, 3);
    for (int i = 0; i < 6; i++) CHECK(C[i] == 0.5f * (float)(i + 1));
    for (int i = 0; i < 6; i++) C[i] = NAN;
    gemm_f32(0, 0, 2, 3, 0, 1.0f, A, 1, B, 3, 0.0f, C, 3);
    for (int i = 0; i < 6; i++) CHECK(C[i] == 0.0f && !signbit(C[i]));
    C[0] = 42.0f;
    gemm_f32(0, 0, 0, 3, 5, 1.0f, A, 1, B, 3, 0.0f, C, 3);
    gemm_f32(0, 0, 2, 0, 5, 1.0f, A, 1, B, 3, 0.0f, C, 3);
    CHECK(C[0] == 42.0f);
    /* alpha = 0: C = beta C without touching A, B. */
    for (int i = 0; i < 6; i++) C[i] = (float)i;
    gemm_f32(0, 0, 2, 3, 4, 0.0f, NULL, 4, NULL, 3, 2.0f, C, 3);
    for (int i = 0; i < 6; i++) CHECK(C[i] == 2.0f * (float)i);
    printf("gemm: worst |c - ref| / scale = %.3g (tolerance %.0e)\n", gemm_worst, GEMM_RTOL);
}

/* Multi-threaded gemm agrees with the reference and with the single-threaded result. */
static void test_gemm_threads(void) {
    const int M = 192, N = 160, K = 288;
    float *A = falloc((size_t)M * K), *B = falloc((size_t)N * K), *C1 = falloc((size_t)M * N),
          *C2 = falloc((size_t)M * N), *R = falloc((size_t)M * N), *S = falloc((size_t)M * N);
    fill_normal(A, (size_t)M * K, 1.0f, 0.0f);
    fill_normal(B, (size_t)N * K, 1.0f, 0.0f);
    memset(R, 0, (size_t)M * N * sizeof(float));
    memset(S, 0, (size_t)M * N * sizeof(float));
    gemm_f32_ref(0, 1, M, N, K, 1.0f, A, K, B, K, 0.0f, R, N);
    gemm_abs_scale(S, 0, 1, M, N, K, 1.0f, A, K, (size_t)M * K, B, K, (size_t)N * K, 0.0f, S, N);
    kernels_set_num_threads(1);
    CHECK_EQ_INT(kernels_get_num_threads(), 1);
    gemm_f32(0, 1, M, N, K, 1.0f, A, K, B, K, 0.0f, C1, N);
    kernels_set_num_threads(2);
    CHECK_EQ_INT(kernels_get_num_threads(), 2);
    gemm_f32(0, 1, M, N, K, 1.0f, A, K, B, K, 0.0f, C2, N);
    int bad = 0;
    for (size_t i = 0; i < (size_t)M * N; i++) {
        if (!(fabs((double)C1[i] - R[i]) <= GEMM_RTOL * S[i])) bad++;
        if (!(fabs((double)C2[i] - R[i]) <= GEMM_RTOL * S[i])) bad++;
        if (!(fabs((double)C2[i] - C1[i]) <= 2 * GEMM_RTOL * S[i])) bad++;
    }
    CHECK_MSG(bad == 0, "%d elements of the 1- and 2-thread gemm disagree", bad);
    kernels_set_num_threads(0); /* below 1: one thread */
    CHECK_EQ_INT(kernels_get_num_threads(), 1);
    aligned_free(A);
    aligned_free(B);
    aligned_free(C1);
    aligned_free(C2);
    aligned_free(R);
    aligned_free(S);
}

static void test_gemm_batched(void) {
    static const int cases[][5] = { /* M, N, K, batch, transposes (bit 0 A, bit 1 B) */
        {1, 7, 17, 8, 2}, {7, 7, 16, 3, 0}, {33, 17, 64, 5, 2}, {3, 33, 7, 4, 1},
        {17, 100, 8, 3, 3}, {64, 64, 64, 2, 2}, {1, 1003, 5, 3, 0}, {300, 300, 80, 2, 2}};
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        int M = cases[c][0], N = cases[c][1], K = cases[c][2], batch = cases[c][3];
        int tA = cases[c][4] & 1, tB = cases[c][4] >> 1;
        int lda = (tA ? M : K) + 1, ldb = (tB ? K : N) + 2, ldc = N + 1;
        size_t sA = (size_t)(tA ? K : M) * lda + 5, sB = (size_t)(tB ? N : K) * ldb + 3, sC = (size_t)M * ldc + 7;
        float *A = falloc(sA * batch), *B = falloc(sB * batch), *C0 = falloc(sC * batch), *R = falloc(sC * batch),
              *S = falloc(sC * batch), *C1 = falloc(sC * batch), *C2 = falloc(sC * batch);
        fill_normal(A, sA * batch, 1.0f, 0.0f);
        fill_normal(B, sB * batch, 1.0f, 0.0f);
        fill_normal(C0, sC * batch, 1.0f, 0.0f);
        memcpy(R, C0, sC * batch * sizeof(float));
        memcpy(C1, C0, sC * batch * sizeof(float));
        memcpy(C2, C0, sC * batch * sizeof(float));
        for (int b = 0; b < batch; b++) {
            gemm_f32_ref(tA, tB, M, N, K, 0.5f, A + b * sA, lda, B + b * sB, ldb, -1.0f, R + b * sC, ldc);
            gemm_abs_scale(S + b * sC, tA, tB, M, N, K, 0.5f, A + b * sA, lda, sA, B + b * sB, ldb, sB, -1.0f,
                           C0 + b * sC, ldc);
        }
        kernels_set_num_threads(1);
        gemm_f32_batched(tA, tB, M, N, K, 0.5f, A, lda, sA, B, ldb, sB, -1.0f, C1, ldc, sC, batch);
        kernels_set_num_threads(2);
        gemm_f32_batched(tA, tB, M, N, K, 0.5f, A, lda, sA, B, ldb, sB, -1.0f, C2, ldc, sC, batch);
        int bad = 0, untouched = 0;
        for (int b = 0; b < batch; b++)
            for (size_t i = 0; i < sC; i++) {
                size_t j = b * sC + i;
                int m = (int)(i / ldc), n = (int)(i % ldc);
                if (m >= M || n >= N) { /* outside the M x N view: never written */
                    untouched += fbits(C1[j]) != fbits(C0[j]) || fbits(C2[j]) != fbits(C0[j]);
                    continue;
                }
                bad += !(fabs((double)C1[j] - R[j]) <= GEMM_RTOL * S[j]);
                bad += !(fabs((double)C2[j] - R[j]) <= GEMM_RTOL * S[j]);
            }
        CHECK_MSG(bad == 0, "batched %dx%dx%d x%d: %d elements off", M, N, K, batch, bad);
        CHECK_MSG(untouched == 0, "batched %dx%dx%d x%d: %d elements outside C written", M, N, K, batch, untouched);
        aligned_free(A);
        aligned_free(B);
        aligned_free(C0);
        aligned_free(R);
        aligned_free(S);
        aligned_free(C1);
        aligned_free(C2);
    }
    kernels_set_num_threads(1);
}

/* ------------------------------------------------------------ quantization and linear */

static void fill_quant_rows(float *x, int M, int K) {
    for (int m = 0; m < M; m++) {
        float *r = x + (size_t)m * K;
        switch (m % 6) {
        case 0: fill_normal(r, K, 1.0f, 0.0f); break;
        case 1: for (int k = 0; k < K; k++) r[k] = 0.0f; break;              /* all zero: scale 1 */
        case 2: /* max 127 -> scale 1: rounding ties at x.5 (half to even) */
            for (int k = 0; k < K; k++) r[k] = (float)((int)(rng_u32() % 255) - 127) + ((k & 1) ? 0.5f : 0.0f);
            r[0] = 127.0f;
            break;
        case 3: fill_normal(r, K, 1e-30f, 0.0f); break;                       /* tiny but normal */
        case 4: fill_normal(r, K, 1.0f, 0.0f); r[K / 2] = 1e4f; break;        /* one outlier */
        default: fill_normal(r, K, 1000.0f, 50.0f); break;
        }
    }
}

static void test_quantize(void) {
    static const int Ks[] = {1, 3, 7, 8, 9, 17, 33, 64, 100, 1031};
    for (size_t i = 0; i < sizeof Ks / sizeof Ks[0]; i++) {
        int K = Ks[i], M = 10;
        float *x = falloc((size_t)M * K), s1[10], s2[10];
        int8_t *q1 = malloc((size_t)M * K), *q2 = malloc((size_t)M * K);
        uint8_t *u1 = malloc((size_t)M * K), *u2 = malloc((size_t)M * K);
        fill_quant_rows(x, M, K);
        /* rows 7-9: NaNs (skipped by max|x|, quantized to -127 / 0), infinities, all NaN */
        for (int k = 0; k < K; k++) {
            if (k % 5 == 2 || k == K - 1) x[(size_t)7 * K + k] = NAN;
            if (k % 7 == 3 || k == 0) x[(size_t)8 * K + k] = k & 1 ? INFINITY : -INFINITY;
            x[(size_t)9 * K + k] = -NAN;
        }
        quantize_rows_s8(q1, s1, x, M, K);
        quantize_rows_s8_ref(q2, s2, x, M, K);
        CHECK_MSG(!memcmp(q1, q2, (size_t)M * K) && !memcmp(s1, s2, sizeof s1), "quantize_rows_s8 K=%d", K);
        quantize_rows_u8(u1, s1, x, M, K);
        quantize_rows_u8_ref(u2, s2, x, M, K);
        CHECK_MSG(!memcmp(u1, u2, (size_t)M * K) && !memcmp(s1, s2, sizeof s1), "quantize_rows_u8 K=%d", K);
        free(q1);
        free(q2);
        free(u1);
        free(u2);
        aligned_free(x);
    }
    /* Worked example: max 127 -> scale 1; ties round half to even. */
    float x[8] = {127.0f, 0.5f, 1.5f, 2.5f, -0.5f, -1.5f, -2.5f, -127.0f}, s;
    int8_t q[8];
    uint8_t u[8];
    static const int8_t q_want[8] = {127, 0, 2, 2, 0, -2, -2, -127};
    static const uint8_t u_want[8] = {255, 128, 130, 130, 128, 126, 126, 1};
    quantize_rows_s8(q, &s, x, 1, 8);
    CHECK(s == 1.0f);
    for (int i = 0; i < 8; i++) CHECK_EQ_INT(q[i], q_want[i]);
    quantize_rows_u8(u, &s, x, 1, 8);
    CHECK(s == 1.0f);
    for (int i = 0; i < 8; i++) CHECK_EQ_INT(u[i], u_want[i]);
    /* A subnormal row: the s8 scale is clamped to stay finite (127 / (127 / FLT_MAX) = FLT_MAX). */
    float tiny[3] = {1e-40f, -1e-41f, 0.0f};
    quantize_rows_s8(q, &s, tiny, 1, 3);
    CHECK(isfinite(s) && s == 127.0f / (127.0f / FLT_MAX));
    float s_ref;
    int8_t q_ref[3];
    quantize_rows_s8_ref(q_ref, &s_ref, tiny, 1, 3);
    CHECK(!memcmp(q, q_ref, 3) && s == s_ref);
}

static void test_prepare_s8(void) {
    static const int shapes[][2] = {{1, 1}, {3, 7}, {17, 33}, {5, 1031}, {64, 100}};
    for (size_t c = 0; c < sizeof shapes / sizeof shapes[0]; c++) {
        int N = shapes[c][0], K = shapes[c][1];
        int8_t *q = malloc((size_t)N * K);
        int32_t *comp = malloc((size_t)N * sizeof(int32_t));
        for (int i = 0; i < N * K; i++) q[i] = (int8_t)((int)(rng_u32() % 255) - 127);
        if (c == 3) memset(q, 127, (size_t)K); /* extreme row: -128 * 127 * K */
        linear_prepare_s8(comp, q, N, K);
        for (int n = 0; n < N; n++) {
            int64_t sum = 0;
            for (int k = 0; k < K; k++) sum += q[(size_t)n * K + k];
            CHECK_EQ_INT(comp[n], -128 * sum);
        }
        free(q);
        free(comp);
    }
}

typedef struct {
    float *w, *wq_scale, *bias;
    int8_t *q;
    int32_t *comp;
} linear_buf_t;

static void linear_make(linear_buf_t *b, int N, int K, int with_bias) {
    b->w = falloc((size_t)N * K);
    b->wq_scale = falloc((size_t)N);
    b->bias = with_bias ? falloc((size_t)N) : NULL;
    b->q = aligned_alloc64((size_t)N * K);
    b->comp = aligned_alloc64((size_t)N * sizeof(int32_t));
    fill_normal(b->w, (size_t)N * K, 1.0f / sqrtf((float)K), 0.0f);
    if (with_bias) fill_normal(b->bias, (size_t)N, 0.5f, 0.0f);
    quantize_rows_s8_ref(b->q, b->wq_scale, b->w, N, K);
    linear_prepare_s8(b->comp, b->q, N, K);
}

static void linear_release(linear_buf_t *b) {
    aligned_free(b->w);
    aligned_free(b->wq_scale);
    aligned_free(b->bias);
    aligned_free(b->q);
    aligned_free(b->comp);
}

static double linear_int8_worst = 0; /* largest |int8 - f32| / bound */

static void linear_case(int M, int N, int K, int with_bias, int with_comp) {
    linear_buf_t b;
    linear_make(&b, N, K, with_bias);
    float *x = falloc((size_t)M * K), *y = falloc((size_t)M * N), *r = falloc((size_t)M * N),
          *y2 = falloc((size_t)M * N);
    fill_quant_rows(x, M, K);
    for (int m = 0; m < M; m++) /* rows of magnitude ~1 or larger (tiny rows lose all bits in f32 here) */
        if (m % 6 == 3) fill_normal(x + (size_t)m * K, K, 1.0f, 0.0f);

    /* float32 */
    linear_t lf = {.kind = WEIGHT_F32, .N = N, .K = K, .w = b.w, .bias = b.bias};
    CHECK(linear_workspace_size(&lf, M) == 0);
    linear_forward(y, x, &lf, M, NULL);
    linear_forward_ref(r, x, &lf, M);
    int bad = 0;
    for (int m = 0; m < M; m++)
        for (int n = 0; n < N; n++) {
            double scale = with_bias ? fabs(b.bias[n]) : 0;
            for (int k = 0; k < K; k++) scale += fabs((double)x[(size_t)m * K + k] * b.w[(size_t)n * K + k]);
            if (!(fabs((double)y[(size_t)m * N + n] - r[(size_t)m * N + n]) <= GEMM_RTOL * scale + 1e-30)) bad++;
        }
    CHECK_MSG(bad == 0, "linear f32 M=%d N=%d K=%d: %d off", M, N, K, bad);

    /* int8: bit-exact against the reference */
    linear_t lq = {.kind = WEIGHT_S8, .N = N, .K = K, .q = b.q, .scale = b.wq_scale,
                   .comp = with_comp ? b.comp : NULL, .bias = b.bias};
    size_t wsz = linear_workspace_size(&lq, M);
    CHECK(wsz == linear_workspace_size_s8(M, N, K, with_comp));
    CHECK(wsz >= (size_t)M * K + (size_t)M * 4 + (size_t)M * N * 4);
    void *ws = aligned_alloc64(wsz);
    linear_forward(y, x, &lq, M, ws);
    linear_forward_ref(r, x, &lq, M);
    bad = 0;
    for (size_t i = 0; i < (size_t)M * N; i++)
        if (fbits(y[i]) != fbits(r[i])) {
            if (bad < 3) fprintf(stderr, "linear int8 M=%d N=%d K=%d [%zu]: %.9g vs ref %.9g\n", M, N, K, i, y[i], r[i]);
            bad++;
        }
    CHECK_MSG(bad == 0, "linear int8 M=%d N=%d K=%d comp=%d: %d elements differ from the reference", M, N, K,
              with_comp, bad);

    /* int8 against the float32 product, within the quantization error bound */
    float *xs = falloc((size_t)M);
    uint8_t *xq = malloc((size_t)M * K);
    quantize_rows_u8_ref(xq, xs, x, M, K);
    linear_forward_ref(y2, x, &lf, M);
    bad = 0;
    for (int m = 0; m < M; m++)
        for (int n = 0; n < N; n++) {
            double bound = 0, mag = with_bias ? fabs(b.bias[n]) : 0;
            for (int k = 0; k < K; k++) {
                double a = x[(size_t)m * K + k], wh = b.q[(size_t)n * K + k] / (double)b.wq_scale[n];
                bound += 0.501 / xs[m] * fabs(wh) + 0.5 / b.wq_scale[n] * fabs(a);
                mag += fabs(a * b.w[(size_t)n * K + k]);
            }
            bound += GEMM_RTOL * mag + 1e-30;
            double err = fabs((double)y[(size_t)m * N + n] - y2[(size_t)m * N + n]);
            if (err / bound > linear_int8_worst) linear_int8_worst = err / bound;
            if (!(err <= bound)) bad++;
        }
    CHECK_MSG(bad == 0, "linear int8 vs float32 M=%d N=%d K=%d: %d outside the quantization bound", M, N, K, bad);

    /* threads: int8 bit-identical, float32 within the gemm tolerance of the reference */
    kernels_set_num_threads(2);
    linear_forward(y2, x, &lq, M, ws);
    CHECK_MSG(!memcmp(y, y2, (size_t)M * N * sizeof(float)), "linear int8 M=%d N=%d K=%d: 2 threads differ", M, N, K);
    linear_forward(y2, x, &lf, M, NULL);
    linear_forward_ref(r, x, &lf, M);
    bad = 0;
    for (int m = 0; m < M; m++)
        for (int n = 0; n < N; n++) {
            double scale = with_bias ? fabs(b.bias[n]) : 0;
            for (int k = 0; k < K; k++) scale += fabs((double)x[(size_t)m * K + k] * b.w[(size_t)n * K + k]);
            if (!(fabs((double)y2[(size_t)m * N + n] - r[(size_t)m * N + n]) <= GEMM_RTOL * scale + 1e-30)) bad++;
        }
    CHECK_MSG(bad == 0, "linear f32 2 threads M=%d N=%d K=%d: %d off", M, N, K, bad);
    kernels_set_num_threads(1);

    aligned_free(ws);
    aligned_free(xs);
    free(xq);
    aligned_free(x);
    aligned_free(y);
    aligned_free(y2);
    aligned_free(r);
    linear_release(&b);
}

/* The int32 product exactly, on every CPU: integer inputs with max |x| = 127 (activation scale 1)
 * and weight scales 1, so out = (float)(sum_k x_k q_nk) exactly (|sum| < 2^24). Weights span
 * [-127, 127] with the extreme rows (all +127 activations against all -127 and all +127 weights:
 * after the u8 shift, 255 * 127 pairs that saturate a 16-bit pair sum without VNNI). */
static void test_linear_int32_exact(void) {
    int wmax = 127;
    printf("int8 GEMM: %s (TERN_MAX_CPU_ISA effective %s, detected %s)\n", linear_int8_backend_name(),
           cpu_isa_name(cpu_isa_effective()), cpu_isa_name(cpu_isa_detected()));
    printf("int8 packed layers: %s\n", linear_int8_packed_kernel_name());
    static const int shapes[][3] = {{1, 1, 1}, {3, 7, 17}, {7, 17, 64}, {5, 33, 1031}, {17, 100, 33}, {9, 130, 512}};
    for (size_t c = 0; c < sizeof shapes / sizeof shapes[0]; c++) {
        int M = shapes[c][0], N = shapes[c][1], K = shapes[c][2];
        float *x = falloc((size_t)M * K), *y = falloc((size_t)M * N), *ones = falloc((size_t)N);
        int8_t *q = aligned_alloc64((size_t)N * K);
        for (int i = 0; i < M * K; i++) x[i] = (float)((int)(rng_u32() % 255) - 127);
        for (int i = 0; i < N * K; i++) q[i] = (int8_t)((int)(rng_u32() % (2 * wmax + 1)) - wmax);
        for (int m = 0; m < M; m++) x[(size_t)m * K] = 127.0f;
        if (M > 1) for (int k = 0; k < K; k++) x[(size_t)1 * K + k] = 127.0f;      /* all +127 */
        if (N > 1) for (int k = 0; k < K; k++) q[(size_t)1 * K + k] = (int8_t)-wmax; /* against all -wmax */
        if (N > 2) for (int k = 0; k < K; k++) q[(size_t)2 * K + k] = (int8_t)wmax;
        for (int n = 0; n < N; n++) ones[n] = 1.0f;
        linear_t lq = {.kind = WEIGHT_S8, .N = N, .K = K, .q = q, .scale = ones};
        void *ws = aligned_alloc64(linear_workspace_size(&lq, M));
        for (int threads = 1; threads <= 2; threads++) {
            kernels_set_num_threads(threads);
            linear_forward(y, x, &lq, M, ws);
            int bad = 0;
            for (int m = 0; m < M; m++)
                for (int n = 0; n < N; n++) {
                    int64_t acc = 0;
                    for (int k = 0; k < K; k++) acc += (int64_t)x[(size_t)m * K + k] * q[(size_t)n * K + k];
                    if ((double)y[(size_t)m * N + n] != (double)acc) {
                        if (bad < 3) fprintf(stderr, "int32 product M=%d N=%d K=%d [%d,%d]: %.1f vs exact %lld\n", M,
                                             N, K, m, n, y[(size_t)m * N + n], (long long)acc);
                        bad++;
                    }
                }
            CHECK_MSG(bad == 0, "int8 product %dx%dx%d (%d threads) not exact in int32 (%d elements)", M, N, K,
                      threads, bad);
        }
        kernels_set_num_threads(1);
        aligned_free(ws);
        aligned_free(x);
        aligned_free(y);
        aligned_free(ones);
        aligned_free(q);
    }
}

/* gemm_s8s8s32 (the AVX2 kernel, whatever the CPU) against the exact int64 sum: full signed range
 * including -128 on both sides (the 16-bit kernel where B holds -128), micro-kernel and panel edges
 * (M % 4, N % 2, N around 64), K tails (K % 32), 1 vs 2 threads bit-identical, and the largest K
 * whose sum fits int32 with every product 128 * 128. */
static void test_gemm_s8(void) {
    static const int shapes[][3] = {{1, 1, 1},   {1, 1, 31},  {1, 2, 32},   {2, 3, 33},   {4, 2, 64},
                                    {5, 65, 95}, {8, 64, 96}, {9, 129, 512}, {3, 130, 1031}, {17, 7, 2048}};
    long checked = 0;
    for (size_t c = 0; c < sizeof shapes / sizeof shapes[0]; c++)
        for (int with_min = 0; with_min <= 1; with_min++) {
            int M = shapes[c][0], N = shapes[c][1], K = shapes[c][2];
            int8_t *A = malloc((size_t)M * K), *B = malloc((size_t)N * K);
            int32_t *C = malloc((size_t)M * N * 4), *C2 = malloc((size_t)M * N * 4);
            int lo = with_min ? -128 : -127;
            for (int i = 0; i < M * K; i++) A[i] = (int8_t)(lo + (int)(rng_u32() % (unsigned)(128 - lo)));
            for (int i = 0; i < N * K; i++) B[i] = (int8_t)(lo + (int)(rng_u32() % (unsigned)(128 - lo)));
            for (int k = 0; k < K; k++) { /* extreme rows: saturate any 16-bit pair sum */
                A[k] = (int8_t)(k & 1 ? lo : 127);
                B[k] = (int8_t)(k & 1 ? lo : 127);
                if (N > 1) B[(size_t)K + k] = (int8_t)(k & 1 ? 127 : lo);
            }
            int has_min = gemm_s8_has_min(B, (size_t)N * K), want_min = 0;
            for (int i = 0; i < N * K; i++) want_min |= B[i] == -128;
            CHECK(has_min == want_min && (want_min || !with_min || N * K < 2));
            for (int threads = 1; threads <= 2; threads++) {
                kernels_set_num_threads(threads);
                int32_t *out = threads == 1 ? C : C2;
                gemm_s8s8s32(M, N, K, A, K, B, K, out, N, has_min);
            }
            kernels_set_num_threads(1);
            int bad = 0;
            for (int m = 0; m < M; m++)
                for (int n = 0; n < N; n++) {
                    int64_t acc = 0;
                    for (int k = 0; k < K; k++) acc += (int64_t)A[(size_t)m * K + k] * B[(size_t)n * K + k];
                    if (C[(size_t)m * N + n] != acc) bad++;
                    checked++;
                }
            CHECK_MSG(bad == 0, "gemm_s8s8s32 %dx%dx%d (-128: %d): %d sums differ from the exact one", M, N, K,
                      with_min, bad);
            CHECK_MSG(!memcmp(C, C2, (size_t)M * N * 4), "gemm_s8s8s32 %dx%dx%d: 2 threads differ", M, N, K);
            free(A), free(B), free(C), free(C2);
        }
    /* K at the int32 limit: every product +16384 (-128 * -128), and 127 * -128 */
    int K = GEMM_S8_MAX_K;
    int8_t *A = malloc((size_t)2 * K), *B = malloc((size_t)2 * K);
    memset(A, 0x80, (size_t)K);
    memset(A + K, 127, (size_t)K);
    memset(B, 0x80, (size_t)2 * K);
    int32_t C[4];
    gemm_s8s8s32(2, 2, K, A, K, B, K, C, 2, 1);
    CHECK_MSG(C[0] == 16384 * K && C[1] == 16384 * K, "gemm_s8s8s32 K=%d: %d, %d vs %d", K, C[0], C[1], 16384 * K);
    CHECK_MSG(C[2] == -16256 * K && C[3] == -16256 * K, "gemm_s8s8s32 K=%d: %d vs %d", K, C[2], -16256 * K);
    free(A), free(B);
    printf("gemm_s8s8s32: %ld sums exact, K up to %d\n", checked, K);
}

/* A packed exact int8 kernel under test (gemm_s8p: int16 activation rows whose pad element may
 * hold anything; gemm_s8v: signed byte rows whose pad bytes are 0). */
typedef struct {
    const char *name;
    int a_bytes; /* 2: int16 activations, 1: int8 */
    int pad;     /* what the test writes into the activation rows past K */
    size_t (*a_stride)(int K);
    size_t (*size)(int N, int K);
    int (*pack)(void *buf, const int8_t *Q, int N, int K);
    int (*dims)(const void *pk, int *N, int *K);
    int (*forward)(int32_t *C, const void *A, const void *pk, int M);
    int (*row)(const void *pk, int n, int k0, int k1, int8_t *out);
} packed_s8_kernel_t;

static int fwd_s8p(int32_t *C, const void *A, const void *pk, int M) { return gemm_s8p_forward(C, A, pk, M); }
static int fwd_s8v(int32_t *C, const void *A, const void *pk, int M) { return gemm_s8v_forward(C, A, pk, M); }

static int a_get(const void *A, size_t i, int bytes) {
    return bytes == 2 ? ((const int16_t *)A)[i] : ((const int8_t *)A)[i];
}
static void a_set(void *A, size_t i, int v, int bytes) {
    if (bytes == 2) ((int16_t *)A)[i] = (int16_t)v;
    else ((int8_t *)A)[i] = (int8_t)v;
}

/* The kernel's sums against the exact int64 ones for every M from 1 to 130 (13 for the last two
 * shapes), activations and weights over the whole byte range with rows of extremes (-128, 127),
 * 1 vs 2 threads. Returns the number of sums compared. */
static long packed_s8_exact(const packed_s8_kernel_t *kk, const int (*NKs)[2], size_t ncases) {
    long checked = 0;
    for (size_t c = 0; c < ncases; c++) {
        int N = NKs[c][0], K = NKs[c][1], Mmax = c + 2 < ncases ? 130 : 13, ab = kk->a_bytes;
        size_t lda = kk->a_stride(K), bytes = kk->size(N, K);
        CHECK(lda >= (size_t)K && bytes > 0);
        void *A = aligned_alloc64((size_t)Mmax * lda * ab);
        int8_t *B = malloc((size_t)N * K);
        int32_t *C = malloc((size_t)Mmax * N * 4), *C2 = malloc((size_t)Mmax * N * 4);
        void *pk = aligned_alloc64(bytes);
        for (int m = 0; m < Mmax; m++)
            for (size_t k = 0; k < lda; k++)
                a_set(A, m * lda + k, k < (size_t)K ? (int)(rng_u32() % 256) - 128 : kk->pad, ab);
        for (int i = 0; i < N * K; i++) B[i] = (int8_t)((int)(rng_u32() % 256) - 128);
        for (int k = 0; k < K; k++) { /* row 0 of A and rows 0, 1 of B: extremes */
            a_set(A, k, k & 1 ? -128 : 127, ab);
            if (Mmax > 1) a_set(A, lda + k, -128, ab);
            B[k] = (int8_t)(k & 1 ? -128 : 127);
            if (N > 1) B[(size_t)K + k] = -128;
        }
        CHECK(kk->pack(pk, B, N, K) == 0);
        int pn = 0, pkk = 0;
        CHECK(kk->dims(pk, &pn, &pkk) == 0 && pn == N && pkk == K);
        /* every weight row read back from the packed layout (what a tied embedding reads), whole
         * and in a middle range; out of range refused */
        int8_t *rb = malloc((size_t)K);
        int bad_rows = 0;
        for (int n = 0; n < N; n++) {
            CHECK(kk->row(pk, n, 0, K, rb) == 0);
            bad_rows += memcmp(rb, B + (size_t)n * K, (size_t)K) != 0;
            CHECK(kk->row(pk, n, K / 3, K - K / 4, rb) == 0);
            bad_rows += memcmp(rb, B + (size_t)n * K + K / 3, (size_t)(K - K / 4 - K / 3)) != 0;
        }
        CHECK_MSG(bad_rows == 0, "%s N=%d K=%d: %d rows read back wrong", kk->name, N, K, bad_rows);
        CHECK(kk->row(pk, N, 0, 1, rb) == -1 && kk->row(pk, 0, 0, K + 1, rb) == -1);
        CHECK(linear_packed_row_s8(pk, N - 1, 0, K, rb) == 0 && memcmp(rb, B + (size_t)(N - 1) * K, (size_t)K) == 0);
        free(rb);
        int bad = 0, bad_threads = 0;
        for (int M = 1; M <= Mmax; M++) {
            for (int threads = 1; threads <= 2; threads++) {
                kernels_set_num_threads(threads);
                CHECK(kk->forward(threads == 1 ? C : C2, A, pk, M) == 0);
            }
            kernels_set_num_threads(1);
            for (int m = 0; m < M; m++)
                for (int n = 0; n < N; n++) {
                    int64_t acc = 0;
                    for (int k = 0; k < K; k++) acc += (int64_t)a_get(A, m * lda + k, ab) * B[(size_t)n * K + k];
                    bad += C[(size_t)m * N + n] != acc;
                    checked++;
                }
            bad_threads += memcmp(C, C2, (size_t)M * N * 4) != 0;
        }
        CHECK_MSG(bad == 0, "%s N=%d K=%d (M 1..%d): %d sums differ from the exact one", kk->name, N, K, Mmax, bad);
        CHECK_MSG(bad_threads == 0, "%s N=%d K=%d: 2 threads differ for %d values of M", kk->name, N, K, bad_threads);
        aligned_free(A), aligned_free(pk), free(B), free(C), free(C2);
    }
    return checked;
}

/* gemm_s8p_* (the packed AVX2 kernel, whatever the CPU) against the exact int64 sum: every M from 1
 * to 130 (row blocks of 6 and their tails, row chunks), N around the 16-column panels, K odd and
 * even (the pad element of the int16 rows holds garbage: its weights must be 0), operands over the
 * whole range the layer gives them (activations u - 128 for u in 0..255, weights -128..127, with
 * rows of extremes that saturate any 16-bit pair sum), 1 vs 2 threads bit-identical, and the
 * largest K whose sum fits int32 with every product (-128)^2. */
static void test_gemm_s8p(void) {
    static const int NKs[][2] = {{1, 1}, {7, 3}, {16, 2}, {17, 31}, {33, 64}, {100, 513}, {48, 1031}, {5, 2048}};
    static const packed_s8_kernel_t kk = {"gemm_s8p", 2, 0x7fff, gemm_s8p_a_stride, gemm_s8p_size, gemm_s8p_pack,
                                          gemm_s8p_dims, fwd_s8p, gemm_s8p_row};
    CHECK(gemm_s8p_a_stride(3) % 2 == 0);
    long checked = packed_s8_exact(&kk, NKs, sizeof NKs / sizeof NKs[0]);
    /* K at the int32 limit: every product (-128)^2 = 16384, and 127 * -128 */
    int K = GEMM_S8_MAX_K;
    size_t lda = gemm_s8p_a_stride(K);
    int16_t *A = aligned_alloc64(2 * lda * sizeof(int16_t));
    int8_t *B = malloc((size_t)2 * K);
    void *pk = aligned_alloc64(gemm_s8p_size(2, K));
    for (size_t k = 0; k < lda; k++) A[k] = -128, A[lda + k] = 127; /* pad included: its weight is 0 */
    memset(B, 0x80, (size_t)2 * K);
    int32_t Cx[4];
    CHECK(gemm_s8p_pack(pk, B, 2, K) == 0 && gemm_s8p_forward(Cx, A, pk, 2) == 0);
    CHECK_MSG(Cx[0] == 16384 * K && Cx[1] == 16384 * K, "gemm_s8p K=%d: %d, %d vs %d", K, Cx[0], Cx[1], 16384 * K);
    CHECK_MSG(Cx[2] == -16256 * K && Cx[3] == -16256 * K, "gemm_s8p K=%d: %d vs %d", K, Cx[2], -16256 * K);
    CHECK(gemm_s8p_size(2, K + 1) == 0 && gemm_s8p_size(0, 5) == 0 && gemm_s8p_pack(pk, B, 2, K + 1) == -1);
    CHECK(gemm_s8p_forward(Cx, A, B, 1) == -1); /* not a packed weight */
    aligned_free(A), aligned_free(pk), free(B);
    printf("gemm_s8p (packed AVX2 int16 kernel): %ld sums exact, K up to %d\n", checked, K);
}

/* gemm_s8v_forward (Tern's VNNI kernel, weights as w + 128, signed activation bytes broadcast)
 * against the exact int64 sum for every M from 1 to 130 (every row-block remainder, several row
 * chunks), N around the 32-column panels, K around the 4-byte quads (pad bytes 0, as the caller's
 * quantizer writes them), operands over the whole byte range with rows of extremes, 1 vs 2
 * threads, and K at its int32 limit. Only where the CPU has VNNI and TERN_MAX_CPU_ISA allows it. */
static void test_gemm_s8v(void) {
    if (cpu_isa_effective() < CPU_ISA_AVX512_CORE_VNNI) {
        printf("gemm_s8v (packed VNNI kernel): not run, effective ISA %s has no AVX512_VNNI\n",
               cpu_isa_name(cpu_isa_effective()));
        return;
    }
    static const int NKs[][2] = {{1, 1}, {7, 3}, {32, 4}, {33, 31}, {64, 64}, {100, 513}, {47, 1031}, {5, 2048}};
    static const packed_s8_kernel_t kk = {"gemm_s8v", 1, 0, gemm_s8v_a_stride, gemm_s8v_size, gemm_s8v_pack,
                                          gemm_s8v_dims, fwd_s8v, gemm_s8v_row};
    CHECK(gemm_s8v_a_stride(5) % 4 == 0);
    long checked = packed_s8_exact(&kk, NKs, sizeof NKs / sizeof NKs[0]);
    /* K at the int32 limit: the lane sums (w + 128) a reach 255 * 128 * K before the correction */
    int K = GEMM_S8V_MAX_K;
    size_t lda = gemm_s8v_a_stride(K);
    int8_t *A = aligned_alloc64(2 * lda);
    int8_t *B = malloc((size_t)2 * K);
    void *pk = aligned_alloc64(gemm_s8v_size(2, K));
    for (size_t k = 0; k < lda; k++) A[k] = -128, A[lda + k] = 127;
    for (int k = 0; k < K; k++) B[k] = 127, B[(size_t)K + k] = -128;
    int32_t Cx[4];
    CHECK(gemm_s8v_pack(pk, B, 2, K) == 0 && gemm_s8v_forward(Cx, A, pk, 2) == 0);
    CHECK_MSG(Cx[0] == -16256 * K && Cx[1] == 16384 * K, "gemm_s8v K=%d: %d, %d", K, Cx[0], Cx[1]);
    CHECK_MSG(Cx[2] == 16129 * K && Cx[3] == -16256 * K, "gemm_s8v K=%d: %d, %d", K, Cx[2], Cx[3]);
    CHECK(gemm_s8v_size(2, K + 1) == 0 && gemm_s8v_size(0, 5) == 0 && gemm_s8v_pack(pk, B, 2, K + 1) == -1);
    CHECK(gemm_s8v_forward(Cx, A, B, 1) == -1); /* not a packed weight */
    aligned_free(A), aligned_free(pk), free(B);
    printf("gemm_s8v (packed VNNI kernel): %ld sums exact, K up to %d\n", checked, K);
}

static void test_linear(void) {
    static const int shapes[][3] = {{1, 1, 1}, {3, 7, 17}, {7, 33, 64}, {17, 100, 33}, {5, 1003, 7},
                                    {2, 3, 1031}, {100, 64, 100}, {12, 8, 8}};
    kernels_set_num_threads(1);
    for (size_t c = 0; c < sizeof shapes / sizeof shapes[0]; c++) {
        linear_case(shapes[c][0], shapes[c][1], shapes[c][2], 1, 1);
        linear_case(shapes[c][0], shapes[c][1], shapes[c][2], c & 1, 0);
    }
    printf("linear int8 vs float32: worst error / quantization bound = %.3g\n", linear_int8_worst);
}

/* linear_forward_packed_s8 against linear_forward_ref (bit-exact) and against linear_forward on the
 * plain weights (bit-identical: what the Transformer ran before packing), with the plain q gone
 * (NULL) from the linear_t it runs on. Model shapes (K a multiple of 64: oneDNN's layout needs no
 * padding there) and M from 1 to past one kernel call (GEMM_PACKED_MAX_M = 128 rows); int32
 * extremes (integer activations, weights +-127 with scales 1: out is the exact int32 sum). */
static void test_linear_packed_s8(void) {
    static const int shapes[][3] = {{1, 512, 512}, {3, 64, 64}, {32, 1536, 512}, {8, 512, 2048},
                                    {130, 128, 256}, {300, 64, 128}, {5, 100, 64}, {4, 64, 100}, {2, 7, 17},
                                    {7, 33, 3},      {61, 17, 31},   {1, 1, 1},  {40, 2048, 64}, {36, 2050, 64}, {300, 64, 512}};
    int onednn = !strncmp(linear_int8_packed_kernel_name(), "oneDNN", 6), packed = 0;
    for (size_t c = 0; c < sizeof shapes / sizeof shapes[0]; c++)
        for (int extreme = 0; extreme <= 1; extreme++) {
            int M = shapes[c][0], N = shapes[c][1], K = shapes[c][2];
            linear_buf_t b;
            linear_make(&b, N, K, !extreme);
            float *x = falloc((size_t)M * K), *y = falloc((size_t)M * N), *r = falloc((size_t)M * N),
                  *y2 = falloc((size_t)M * N);
            fill_quant_rows(x, M, K);
            if (!extreme && M >= 3) /* NaNs (quantized to u = 0): in the vector body and the scalar tail */
                x[(size_t)2 * K] = NAN, x[(size_t)2 * K + K - 1] = NAN;
            if (extreme) { /* all +127 rows against all -127 / +127 weight rows, scales 1 */
                for (int i = 0; i < M * K; i++) x[i] = (float)((int)(rng_u32() % 255) - 127);
                for (int m = 0; m < M; m++) x[(size_t)m * K] = 127.0f;
                for (int k = 0; M > 1 && k < K; k++) x[(size_t)K + k] = 127.0f;
                for (int i = 0; i < N * K; i++) b.q[i] = (int8_t)((int)(rng_u32() % 255) - 127);
                for (int k = 0; k < K; k++) b.q[k] = -127, b.q[(size_t)(N > 1) * K + k] = 127;
                for (int n = 0; n < N; n++) b.wq_scale[n] = 1.0f;
                linear_prepare_s8(b.comp, b.q, N, K);
            }
            linear_t lq = {.kind = WEIGHT_S8, .N = N, .K = K, .q = b.q, .scale = b.wq_scale, .comp = b.comp,
                           .bias = b.bias};
            size_t bytes = linear_packed_size_s8(&lq);
            /* Tern's packed AVX2 kernel takes every shape; oneDNN's layout only those it need not pad */
            CHECK_MSG(onednn || bytes > 0, "int8 packing not offered for %dx%d (%s)", N, K,
                      linear_int8_packed_kernel_name());
            if (!bytes) goto next;
            packed++;
            void *pk = aligned_alloc64(bytes), *ws = aligned_alloc64(linear_workspace_size(&lq, M));
            CHECK(linear_pack_s8(pk, &lq) == 0);
            linear_t lp = lq;
            lp.q = NULL;
            linear_forward_ref(r, x, &lq, M);
            linear_forward(y2, x, &lq, M, ws);
            for (int threads = 1; threads <= 2; threads++) {
                kernels_set_num_threads(threads);
                memset(y, 0xff, (size_t)M * N * sizeof(float));
                CHECK(linear_forward_packed_s8(y, x, &lp, pk, M, ws) == 0);
                int bad = 0, bad_plain = 0;
                for (size_t i = 0; i < (size_t)M * N; i++) {
                    if (fbits(y[i]) != fbits(r[i])) {
                        if (bad < 3) fprintf(stderr, "packed int8 M=%d N=%d K=%d [%zu]: %.9g vs ref %.9g\n", M, N, K,
                                             i, y[i], r[i]);
                        bad++;
                    }
                    bad_plain += fbits(y[i]) != fbits(y2[i]);
                }
                CHECK_MSG(bad == 0, "packed int8 M=%d N=%d K=%d extreme=%d threads=%d: %d differ from the reference",
                          M, N, K, extreme, threads, bad);
                CHECK_MSG(bad_plain == 0, "packed int8 M=%d N=%d K=%d: %d differ from linear_forward", M, N, K,
                          bad_plain);
                if (extreme) { /* exact int32 sums: out = sum_k x q */
                    int off = 0;
                    for (int m = 0; m < M; m++)
                        for (int n = 0; n < N; n++) {
                            int64_t acc = 0;
                            for (int k = 0; k < K; k++) acc += (int64_t)x[(size_t)m * K + k] * b.q[(size_t)n * K + k];
                            off += (double)y[(size_t)m * N + n] != (double)acc;
                        }
                    CHECK_MSG(off == 0, "packed int8 %dx%dx%d: %d int32 sums not exact", M, N, K, off);
                }
                /* ReLU fused into the dequantization: the reference's values, then max(v, 0) with
                 * maxps's rules (+0 for NaN, -0 and negatives) */
                memset(y, 0xff, (size_t)M * N * sizeof(float));
                CHECK(linear_forward_packed_s8_act(y, x, &lp, pk, M, ws, 1) == 0);
                int bad_relu = 0;
                for (size_t i = 0; i < (size_t)M * N; i++) {
                    float want = r[i] > 0.0f ? r[i] : 0.0f;
                    bad_relu += fbits(y[i]) != fbits(want);
                }
                CHECK_MSG(bad_relu == 0, "packed int8 + ReLU M=%d N=%d K=%d threads=%d: %d differ", M, N, K, threads,
                          bad_relu);
            }
            kernels_set_num_threads(1);
            aligned_free(pk);
            aligned_free(ws);
        next:
            aligned_free(x), aligned_free(y), aligned_free(r), aligned_free(y2);
            linear_release(&b);
        }
    /* the model shapes pack wherever the int8 GEMM is oneDNN's (else the fast path is silently off) */
    CHECK_MSG(packed >= 10, "int8 packing: only %d of the cases packed", packed);
    printf("packed int8 linear: %d cases packed (%s)\n", packed,
           onednn ? "oneDNN int8 matmul" : "Tern's packed AVX2 int16 kernel");
}

/* ------------------------------------------------------------ packed float32 linear layers */

/* The packed float32 layer's references for out (M, N) = x (M, K) . W^T + bias [ReLU]: fm, one
 * fmaf chain per output over k ascending from 0, then + bias, then ReLU (the order Tern's kernel
 * promises); dr, the same in double, rounded once; sc, sum_k |x w| + |bias| (the error scale). */
static void f32p_refs(float *fm, double *dr, double *sc, const float *x, const float *W, const float *bias,
                      int relu, int M, int N, int K) {
    for (int m = 0; m < M; m++)
        for (int n = 0; n < N; n++) {
            const float *a = x + (size_t)m * K, *w = W + (size_t)n * K;
            float acc = 0.0f;
            double d = 0, s = 0;
            for (int k = 0; k < K; k++) {
                acc = fmaf(a[k], w[k], acc);
                d += (double)a[k] * w[k];
                s += fabs((double)a[k] * w[k]);
            }
            float b = bias ? bias[n] : 0.0f;
            acc = acc + b;
            d += b;
            if (relu) acc = acc > 0.0f ? acc : 0.0f, d = d > 0 ? d : 0;
            fm[(size_t)m * N + n] = acc;
            dr[(size_t)m * N + n] = d;
            sc[(size_t)m * N + n] = s + fabs(b);
        }
}

/* Compares y with the references: returns the elements off (bit-exact against fm when exact, else
 * within the rounding bound (K + 1) 2^-24 sc of dr). */
static int f32p_compare(const char *what, const float *y, const float *fm, const double *dr, const double *sc,
                        int M, int N, int K, int exact, int relu, int bias, int threads) {
    int bad = 0;
    for (size_t i = 0; i < (size_t)M * N; i++) {
        double tol = (K + 1) * ldexp(1.0, -24) * sc[i];
        int off = !(fabs((double)y[i] - dr[i]) <= tol) || (exact && fbits(y[i]) != fbits(fm[i]));
        if (off && bad < 3)
            fprintf(stderr, "%s M=%d N=%d K=%d relu=%d bias=%d threads=%d [%zu,%zu]: %.9g, fmaf chain %.9g, double "
                    "%.9g, tol %.3g\n", what, M, N, K, relu, bias, threads, i / N, i % N, y[i], fm[i], dr[i], tol);
        bad += off;
    }
    return bad;
}

/* Tern's panels (gemm_f32p.h, AVX2 or AVX-512 tiles) called directly: every shape of tile, tails in N and K, row
 * chunks (K = 2048: 48 rows a chunk; K = 20000: 6), bias/ReLU on and off, 1-3 threads. */
static void test_f32p(void) {
    static const int nk[][2] = {{1, 1}, {7, 3}, {15, 17}, {16, 16}, {17, 33}, {33, 64}, {64, 100},
                                {65, 7}, {100, 129}, {129, 5}, {40, 2048}, {20, 20000}, {5, 0}};
    static const int ms[] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 17, 31, 33, 64, 100, 127, 128, 129, 130};
    int cases = 0, fails = 0;
    for (size_t c = 0; c < sizeof nk / sizeof nk[0]; c++) {
        int N = nk[c][0], K = nk[c][1], Mmax = K > 4096 ? 13 : 130;
        size_t np = f32p_panel_floats(N, 1);
        float *W = falloc((size_t)N * K), *P = falloc(f32p_panel_floats(N, K)), *bias = falloc(np);
        float *x = falloc((size_t)Mmax * K), *y = falloc((size_t)Mmax * N + GUARD), *fm = falloc((size_t)Mmax * N);
        double *dr = malloc((size_t)Mmax * N * sizeof(double)), *sc = malloc((size_t)Mmax * N * sizeof(double));
        fill_normal(W, (size_t)N * K, 0.5f, 0.01f);
        fill_normal(x, (size_t)Mmax * K, 1.0f, 0.0f);
        fill_normal(bias, (size_t)N, 1.0f, 0.0f);
        for (size_t i = (size_t)N; i < np; i++) bias[i] = 0.0f; /* the padding the kernel reads */
        f32p_pack(P, W, N, K);
        for (size_t mi = 0; mi < sizeof ms / sizeof ms[0]; mi++) {
            int M = ms[mi];
            if (M > Mmax) continue;
            for (int v = 0; v < 4; v++) {
                int relu = v & 1, hb = v >> 1;
                f32p_refs(fm, dr, sc, x, W, hb ? bias : NULL, relu, M, N, K);
                for (int threads = 1; threads <= 3; threads++) {
                    if (threads > 1 && (M % 3 != 1 || v == 1)) continue; /* threads on a third of the cases */
                    for (int i = 0; i < M * N + GUARD; i++) y[i] = GUARD_VALUE;
                    f32p_forward(y, x, P, hb ? bias : NULL, relu, M, N, K, threads);
                    int bad = f32p_compare("f32p_forward", y, fm, dr, sc, M, N, K, 1, relu, hb, threads), past = 0;
                    for (int i = M * N; i < M * N + GUARD; i++) past += fbits(y[i]) != fbits(GUARD_VALUE);
                    CHECK_MSG(bad == 0, "f32p_forward M=%d N=%d K=%d relu=%d bias=%d threads=%d: %d off", M, N, K,
                              relu, hb, threads, bad);
                    CHECK_MSG(past == 0, "f32p_forward M=%d N=%d K=%d: %d floats written past the output", M, N, K,
                              past);
                    cases++;
                    fails += bad != 0 || past != 0;
                }
            }
        }
        aligned_free(W), aligned_free(P), aligned_free(bias), aligned_free(x), aligned_free(y), aligned_free(fm);
        free(dr), free(sc);
    }
    printf("f32p (Tern's packed float32, %s tiles): %d cases, %d failed\n", f32p_tiles_name(), cases, fails);
}

/* The dispatched packed float32 layer (gemm_packed.h): whichever kernel this machine (and cap) gets. */
static void test_gemm_packed_f32(void) {
    static const int shapes[][2] = {{512, 512}, {1536, 512}, {64, 2048}, {100, 64}, {17, 33}, {1000, 100}};
    static const int ms[] = {1, 5, 32, 130};
    dnnl_cpu_isa_t isa = dnnl_get_effective_cpu_isa();
    int brgemm_possible = ((unsigned)isa & (unsigned)dnnl_cpu_isa_avx512_core) == (unsigned)dnnl_cpu_isa_avx512_core;
    int tern = 0, onednn = 0;
    for (size_t c = 0; c < sizeof shapes / sizeof shapes[0]; c++) {
        int N = shapes[c][0], K = shapes[c][1], Mmax = 130;
        float *W = falloc((size_t)N * K), *bias = falloc((size_t)N), *x = falloc((size_t)Mmax * K),
              *y = falloc((size_t)Mmax * N), *fm = falloc((size_t)Mmax * N);
        double *dr = malloc((size_t)Mmax * N * sizeof(double)), *sc = malloc((size_t)Mmax * N * sizeof(double));
        int64_t *ok_ = malloc((size_t)K * sizeof(int64_t)), *on_ = malloc((size_t)N * sizeof(int64_t));
        fill_normal(W, (size_t)N * K, 0.5f, 0.01f);
        fill_normal(x, (size_t)Mmax * K, 1.0f, 0.0f);
        fill_normal(bias, (size_t)N, 1.0f, 0.0f);
        size_t bytes = gemm_packed_size(N, K);
        CHECK_MSG(bytes > 0, "gemm_packed_size(%d, %d) = 0: float32 layers always pack", N, K);
        for (int relu = 0; relu <= 1 && bytes; relu++) {
            void *pk = aligned_alloc64(bytes);
            /* the bias of a oneDNN layer must outlive the buffer; Tern's keeps a copy */
            CHECK(gemm_pack_linear(pk, W, relu ? bias : NULL, N, K, relu) == 0);
            const char *name = gemm_packed_kernel_name(pk);
            int is_tern = !strcmp(name, "Tern panels");
            tern += is_tern, onednn += !is_tern;
            CHECK_MSG(is_tern || brgemm_possible, "%dx%d packed for %s below AVX512_CORE", N, K, name);
            int wrong = 0;
            size_t wbytes;
            const float *wp = gemm_packed_weights(pk, &wbytes);
            CHECK(gemm_packed_offsets(pk, ok_, on_) == 0);
            for (int n = 0; n < N; n++)
                for (int k = 0; k < K; k++) {
                    float w = W[(size_t)n * K + k];
                    int64_t o = ok_[k] + on_[n];
                    wrong += fbits(gemm_packed_weight_at(pk, n, k)) != fbits(w) || o < 0 ||
                             (size_t)o >= wbytes / sizeof(float) || fbits(wp[o]) != fbits(w);
                }
            CHECK_MSG(wrong == 0, "%s %dx%d: %d weights read back wrong", name, N, K, wrong);
            for (size_t mi = 0; mi < sizeof ms / sizeof ms[0]; mi++)
                for (int threads = 1; threads <= 2; threads++) {
                    int M = ms[mi];
                    kernels_set_num_threads(threads);
                    f32p_refs(fm, dr, sc, x, W, relu ? bias : NULL, relu, M, N, K);
                    memset(y, 0xff, (size_t)M * N * sizeof(float));
                    CHECK(gemm_packed_forward(y, x, pk, M) == 0);
                    int bad = f32p_compare(name, y, fm, dr, sc, M, N, K, is_tern, relu, relu, threads);
                    CHECK_MSG(bad == 0, "gemm_packed_forward (%s) M=%d N=%d K=%d relu=%d threads=%d: %d off", name, M,
                              N, K, relu, threads, bad);
                }
            kernels_set_num_threads(1);
            aligned_free(pk);
        }
        aligned_free(W), aligned_free(bias), aligned_free(x), aligned_free(y), aligned_free(fm);
        free(dr), free(sc), free(ok_), free(on_);
    }
    CHECK_MSG(brgemm_possible || onednn == 0, "oneDNN packing below AVX512_CORE");
    printf("packed float32 linear: %d layers on Tern's panels (%s tiles), %d on oneDNN's brgemm\n", tern,
           f32p_tiles_name(), onednn);
}

/* ------------------------------------------------------------ row ops */

static const int row_lens[] = {1, 2, 3, 7, 8, 9, 15, 16, 17, 33, 64, 100, 1000, 1031};
#define N_ROW_LENS ((int)(sizeof row_lens / sizeof row_lens[0]))

#define LN_TOL 5e-6
static void test_layernorm(void) {
    double worst = 0;
    for (int i = 0; i < N_ROW_LENS; i++) {
        int C = row_lens[i], M = 4;
        float *x = falloc((size_t)M * C), *y = falloc((size_t)M * C), *r = falloc((size_t)M * C),
              *g = falloc(C), *be = falloc(C), mean[4], rstd[4];
        for (int m = 0; m < M; m++) fill_normal(x + (size_t)m * C, C, m == 3 ? 0.01f : 1.0f + m, m == 2 ? 30.0f : 0.0f);
        fill_normal(g, C, 0.2f, 1.0f);
        fill_normal(be, C, 0.2f, 0.0f);
        float eps = (i & 1) ? 1e-5f : 1e-6f;
        layernorm_forward(y, mean, rstd, x, g, be, M, C, eps);
        layernorm_forward_ref(r, x, g, be, M, C, eps);
        int bad = 0;
        for (size_t k = 0; k < (size_t)M * C; k++) {
            double e = fabs((double)y[k] - r[k]) / (1 + fabs(r[k]));
            if (e > worst) worst = e;
            bad += !(e <= LN_TOL);
        }
        CHECK_MSG(bad == 0, "layernorm C=%d: %d off", C, bad);
        for (int m = 0; m < M; m++) {
            double mu = 0, var = 0, mabs = 0;
            for (int c = 0; c < C; c++) mu += x[(size_t)m * C + c], mabs += fabs(x[(size_t)m * C + c]);
            mu /= C;
            mabs /= C;
            for (int c = 0; c < C; c++) var += (x[(size_t)m * C + c] - mu) * (x[(size_t)m * C + c] - mu);
            var /= C;
            /* a float mean's rounding error scales with mean |x|, not with |mean| (which cancels) */
            CHECK_NEAR(mean[m], mu, 1e-6 * mabs, 1e-6);
            CHECK_NEAR(rstd[m], 1.0 / sqrt(var + eps), 0, 1e-5);
        }
        /* in place gives the same bits; NULL mean/rstd accepted */
        memcpy(r, x, (size_t)M * C * sizeof(float));
        layernorm_forward(r, NULL, NULL, r, g, be, M, C, eps);
        CHECK_MSG(!memcmp(r, y, (size_t)M * C * sizeof(float)), "layernorm C=%d in place", C);
        aligned_free(x);
        aligned_free(y);
        aligned_free(r);
        aligned_free(g);
        aligned_free(be);
    }
    printf("layernorm: worst |y - ref| / (1 + |ref|) = %.3g (tolerance %.0e)\n", worst, LN_TOL);
}

#define SOFTMAX_RTOL 1e-6
#define SOFTMAX_ATOL 1e-37
/* exp(x - max) is taken of the float difference x - max, rounded to 2^-24 relative: that error,
 * |x - max| 2^-24, is amplified into the relative error of the probability. So the bound is
 * relative 1e-6 + 1.2e-7 |x - max| (1e-6 for every probability above e^-8 = 3e-4). */
static double softmax_tol(double ref, double x, double mx) {
    double d = isinf(x) ? 0 : fabs(x - mx);
    return SOFTMAX_ATOL + (SOFTMAX_RTOL + 1.2e-7 * d) * ref;
}

static float row_max_of(const float *x, int n) {
    float mx = -INFINITY;
    for (int i = 0; i < n; i++) mx = x[i] > mx ? x[i] : mx;
    return mx;
}
#define LOGSOFTMAX_TOL 5e-7

/* Rows: normal logits, large spread (exp underflows), -inf entries, all -inf, big offsets, ties. */
static void fill_logit_rows(float *x, int M, int C) {
    for (int m = 0; m < M; m++) {
        float *r = x + (size_t)m * C;
        switch (m % 6) {
        case 0: fill_normal(r, C, 3.0f, 0.0f); break;
        case 1: fill_normal(r, C, 40.0f, 0.0f); break;
        case 2: fill_normal(r, C, 2.0f, 0.0f); for (int c = 0; c < C; c += 3) r[c] = -INFINITY; break;
        case 3: for (int c = 0; c < C; c++) r[c] = -INFINITY; break;
        case 4: fill_normal(r, C, 1.0f, 1e4f); break;
        default: for (int c = 0; c < C; c++) r[c] = (float)(c % 3); break;
        }
    }
}

/* softmax_forward bit-exact against a scalar model of its vector arithmetic: the Cephes exp of
 * ops.c (clamp at -88, n = floor(x log2 e + 1/2), two-step reduction, degree-7 polynomial, 2^n
 * from n + 127 in the exponent bits; 0 below -88) as one fmaf / multiply / add per vector
 * operation, the exps summed in double in the vector code's lanes (element i into lane i % 8, the
 * lanes reduced as (l0 + l4 + l2 + l6) + (l1 + l5 + l3 + l7), i.e. (s0 + s2) + (s1 + s3) with
 * s_l = lane l + lane l + 4), then each exp times (float)(1 / sum). Checks that row_sum_exp's
 * exp256_le0 and its four-vector loop keep exp256's bits (one fused multiply-add computed as two
 * roundings in the model makes 16 of the 56 rows differ); a different summation order rarely
 * shows through the float rounding of 1 / sum. */
static const float EXP_POLY_MODEL[6] = {1.9875691500E-4f, 1.3981999507E-3f, 8.3334519073E-3f,
                                        4.1665795894E-2f, 1.6666665459E-1f, 5.0000001201E-1f};
static float exp_model(float x) { /* x <= 0 or NaN */
    if (x < -88.0f) return 0.0f;
    float xc = x > -88.0f ? x : -88.0f; /* maxps(x, -88): -88 for NaN */
    float n = floorf(fmaf(xc, 1.44269504088896341f, 0.5f));
    float r = fmaf(-n, 0.693359375f, xc);
    r = fmaf(-n, -2.12194440e-4f, r);
    float p = EXP_POLY_MODEL[0];
    for (int k = 1; k < 6; k++) p = fmaf(p, r, EXP_POLY_MODEL[k]);
    float r2 = r * r;
    p = fmaf(p, r2, r + 1.0f);
    uint32_t bits = (uint32_t)((int)n + 127) << 23;
    float sc;
    memcpy(&sc, &bits, sizeof sc);
    return p * sc;
}

static void test_softmax_exact(void) {
    static const int lens[] = {1, 5, 8, 9, 31, 32, 33, 63, 64, 65, 100, 257, 1000, 32000};
    int bad_rows = 0, rows = 0;
    for (size_t li = 0; li < sizeof lens / sizeof lens[0]; li++)
        for (int kind = 0; kind < 4; kind++) {
            int C = lens[li];
            float *x = falloc((size_t)C), *y = falloc((size_t)C), *want = falloc((size_t)C);
            float sc = kind == 0 ? 1.0f : kind == 1 ? 30.0f : kind == 2 ? 1e-3f : 200.0f;
            for (int c = 0; c < C; c++) x[c] = ((float)(rng_u32() % 2000001) / 1e6f - 1.0f) * sc;
            if (kind == 3 && C > 3) x[1] = -INFINITY, x[C - 1] = -1e30f, x[C / 2] = 1e-40f;
            float mx = -INFINITY;
            for (int c = 0; c < C; c++) mx = x[c] > mx ? x[c] : mx;
            double lane[8] = {0};
            for (int c = 0; c < C; c++) {
                want[c] = exp_model(x[c] - mx);
                lane[c % 8] += (double)want[c];
            }
            double s[4];
            for (int l = 0; l < 4; l++) s[l] = lane[l] + lane[l + 4];
            double sum = (s[0] + s[2]) + (s[1] + s[3]);
            float inv = (float)(1.0 / sum);
            for (int c = 0; c < C; c++) want[c] *= inv;
            softmax_forward(y, x, 1, C);
            int bad = 0;
            for (int c = 0; c < C; c++) bad += fbits(y[c]) != fbits(want[c]);
            if (bad) {
                if (bad_rows < 3) fprintf(stderr, "softmax exact C=%d kind=%d: %d of %d differ\n", C, kind, bad, C);
                bad_rows++;
            }
            rows++;
            aligned_free(x), aligned_free(y), aligned_free(want);
        }
    CHECK_MSG(bad_rows == 0, "softmax vs its scalar model: %d of %d rows differ", bad_rows, rows);
    /* the AVX2 and AVX-512 bodies of the softmaxes' sum of exps: the same sum and the same exps, bit
     * for bit (run where AVX-512 is allowed: the code above takes the width the CPU gives) */
    if (cpu_isa_effective() < CPU_ISA_AVX512_CORE) return;
    int bad_w = 0, rows_w = 0;
    for (int C = 1; C <= 300; C += C < 70 ? 1 : 37)
        for (int kind = 0; kind < 5; kind++) {
            float *x = falloc((size_t)C), *y2 = falloc((size_t)C), *y5 = falloc((size_t)C);
            float sc = kind == 0 ? 1.0f : kind == 1 ? 30.0f : kind == 2 ? 1e-3f : 200.0f;
            for (int c = 0; c < C; c++) x[c] = ((float)(rng_u32() % 2000001) / 1e6f - 1.0f) * sc;
            if (kind >= 3 && C > 3) x[1] = -INFINITY, x[C - 1] = -1e30f, x[C / 2] = 1e-40f;
            if (kind == 4 && C > 5) x[C - 2] = NAN, x[2] = -95.0f;
            float mx = -INFINITY;
            for (int c = 0; c < C; c++) mx = x[c] > mx ? x[c] : mx;
            double s2 = row_sum_exp_width(y2, x, C, mx, 0), s5 = row_sum_exp_width(y5, x, C, mx, 1);
            int bad = memcmp(&s2, &s5, sizeof s2) != 0 && !(s2 != s2 && s5 != s5);
            for (int c = 0; c < C; c++) bad += fbits(y2[c]) != fbits(y5[c]);
            bad += memcmp(&s2, &(double){row_sum_exp_width(NULL, x, C, mx, 1)}, sizeof s2) != 0 && s2 == s2;
            if (bad && bad_w < 3) fprintf(stderr, "row_sum_exp widths C=%d kind=%d: %d differ\n", C, kind, bad);
            bad_w += bad != 0;
            rows_w++;
            aligned_free(x), aligned_free(y2), aligned_free(y5);
        }
    CHECK_MSG(bad_w == 0, "row_sum_exp, AVX2 vs AVX-512 bodies: %d of %d rows differ", bad_w, rows_w);
    printf("row_sum_exp: AVX2 and AVX-512 bodies bit-identical on %d rows\n", rows_w);
}

static void test_softmax(void) {
    double worst_p = 0, worst_l = 0;
    for (int i = 0; i < N_ROW_LENS; i++) {
        int C = row_lens[i], M = 6;
        size_t n = (size_t)M * C;
        float *x = falloc(n), *y = falloc(n), *r = falloc(n);
        fill_logit_rows(x, M, C);
        softmax_forward(y, x, M, C);
        softmax_forward_ref(r, x, M, C);
        int bad = 0;
        for (size_t k = 0; k < n; k++) {
            double e = fabs((double)y[k] - r[k]), mx = row_max_of(x + k / C * C, C);
            if (r[k] > 1e-30 && x[k] - mx > -8 && e / r[k] > worst_p) worst_p = e / r[k];
            if (!(e <= softmax_tol(r[k], x[k], mx))) {
                if (bad < 3) fprintf(stderr, "softmax C=%d [%zu] x=%.9g: %.9g vs ref %.9g\n", C, k, x[k], y[k], r[k]);
                bad++;
            }
        }
        CHECK_MSG(bad == 0, "softmax C=%d: %d off", C, bad);
        for (int m = 0; m < M; m++) { /* rows sum to 1 (0 for the all -inf row) */
            double s = 0;
            for (int c = 0; c < C; c++) s += y[(size_t)m * C + c];
            double want = row_max_of(x + (size_t)m * C, C) == -INFINITY ? 0.0 : 1.0; /* 0 for an all -inf row */
            CHECK_MSG(fabs(s - want) <= 1e-5, "softmax C=%d row %d sums to %.9g", C, m, s);
        }
        memcpy(r, x, n * sizeof(float));
        softmax_forward(r, r, M, C);
        CHECK_MSG(!memcmp(r, y, n * sizeof(float)), "softmax C=%d in place", C);

        /* softmax_lse_forward: softmax_forward's probabilities bit for bit (in place too); lse
         * against float64 exps with log_softmax's tolerance, |lse - ref| <= LOGSOFTMAX_TOL (1 + |ref|)
         * (the exps are the float kernel's); the row sum (accumulated in double) within 1e-12 of
         * the sum of |x|, and equal where infinite; lse -inf for an all -inf row */
        {
            double lse[6], sx[6];
            memcpy(r, x, n * sizeof(float));
            softmax_lse_forward(r, lse, sx, r, M, C);
            CHECK_MSG(!memcmp(r, y, n * sizeof(float)), "softmax_lse C=%d: probabilities differ from softmax_forward", C);
            for (int m = 0; m < M; m++) {
                const float *xr = x + (size_t)m * C;
                double mx = row_max_of(xr, C), se = 0, sum = 0, sabs = 0;
                for (int c = 0; c < C; c++) {
                    if (mx != -INFINITY) se += exp((double)xr[c] - mx);
                    sum += xr[c];
                    sabs += fabs((double)xr[c]);
                }
                if (mx == -INFINITY) {
                    CHECK_MSG(lse[m] == -INFINITY, "softmax_lse C=%d row %d: lse %.17g for an all -inf row", C, m, lse[m]);
                    continue;
                }
                double want = mx + log(se);
                CHECK_MSG(fabs(lse[m] - want) <= LOGSOFTMAX_TOL * (1 + fabs(want)), "softmax_lse C=%d row %d: lse %.17g vs %.17g",
                          C, m, lse[m], want);
                CHECK_MSG(isinf(sum) ? sx[m] == sum : fabs(sx[m] - sum) <= 1e-12 * sabs + 1e-300, "softmax_lse C=%d row %d: sum %.17g vs %.17g", C, m,
                          sx[m], sum);
            }
        }

        log_softmax_forward(y, x, M, C);
        log_softmax_forward_ref(r, x, M, C);
        bad = 0;
        for (size_t k = 0; k < n; k++) {
            if (isinf(r[k]) || isinf(y[k])) {
                bad += !(y[k] == r[k]);
                continue;
            }
            double e = fabs((double)y[k] - r[k]) / (1 + fabs(r[k]));
            if (e > worst_l) worst_l = e;
            bad += !(e <= LOGSOFTMAX_TOL);
        }
        CHECK_MSG(bad == 0, "log_softmax C=%d: %d off", C, bad);
        memcpy(r, x, n * sizeof(float));
        log_softmax_forward(r, r, M, C);
        CHECK_MSG(!memcmp(r, y, n * sizeof(float)), "log_softmax C=%d in place", C);

        /* masked: lengths 0, 1, C/2, C, > C, < 0 */
        int len[6] = {0, 1, C / 2, C, C + 5, -3};
        for (int m = 0; m < M; m++) fill_normal(x + (size_t)m * C, C, 3.0f, 0.0f);
        for (size_t k = 0; k < n; k++) y[k] = r[k] = GUARD_VALUE;
        softmax_masked_forward(y, x, len, M, C);
        softmax_masked_forward_ref(r, x, len, M, C);
        bad = 0;
        for (int m = 0; m < M; m++)
            for (int c = 0; c < C; c++) {
                size_t k = (size_t)m * C + c;
                int live = c < (len[m] < 0 ? 0 : len[m]);
                if (!live) bad += y[k] != 0.0f; /* probability exactly 0 past the length */
                int live_n = len[m] < 0 ? 0 : len[m] > C ? C : len[m];
                double tol = live ? softmax_tol(r[k], x[k], row_max_of(x + (size_t)m * C, live_n)) : 0.0;
                bad += !(fabs((double)y[k] - r[k]) <= tol);
            }
        CHECK_MSG(bad == 0, "softmax_masked C=%d: %d off", C, bad);
        aligned_free(x);
        aligned_free(y);
        aligned_free(r);
    }
    printf("softmax: worst relative error of p > e^-8 max %.3g (tolerance %.0e); log_softmax: %.3g (tolerance %.0e)\n",
           worst_p, SOFTMAX_RTOL, worst_l, LOGSOFTMAX_TOL);
}

/* ------------------------------------------------------------ log-add-exp (ensembles' prob-mean) */

/* logaddexp_inplace(y, x, c, n): y = log(exp(y) + exp(x + c)), the fold an ensemble's prob-mean
 * runs once per extra member (src/model/ensemble.c, c = log w_k). Against double precision:
 *   one call  y, x log-probabilities (log_softmax of normal logits, scale 3 or 40: differences past
 *             88 where exp underflows), -inf entries in y, in x, in both, c = log w, w in (0, 1];
 *             |y - ref| <= LAE_ATOL + LAE_RTOL |ref|, ref = log(exp(y) + exp(fl(x + c))) in double;
 *             -inf exactly where both terms are -inf, NaN where y or x is NaN; the guard past n
 *             untouched (vector tails: n = 1..1031, not multiples of 8 or 16).
 *   the fold  K = 2..4 members with random weights: out = lp_0 + log w_0, then one call per member
 *             k >= 1, as combine() does, against log(sum_k w_k exp(lp_k)) in double (weights
 *             exact): |out - ref| <= (K - 1) (LAE_ATOL + LAE_RTOL |ref|) + 2^-23 |ref|.
 *   ISA       the AVX2 and AVX-512 versions give the same bits (where the CPU has AVX-512), and
 *             logaddexp_inplace runs the one cpu_isa_effective() (TERN_MAX_CPU_ISA) allows. */
#define LAE_ATOL 1e-7
#define LAE_RTOL 1.2e-7 /* 1 ulp */

static void fill_logprob_row(float *x, int n, int kind) {
    fill_normal(x, (size_t)n, kind == 1 ? 40.0f : 3.0f, 0.0f);
    log_softmax_forward(x, x, 1, n);
    if (kind == 2)
        for (int i = 0; i < n; i += 3) x[i] = -INFINITY; /* masked pieces */
}

static double lae_ref(double a, double b) {
    if (a == -INFINITY && b == -INFINITY) return -INFINITY;
    double mx = a > b ? a : b, mn = a > b ? b : a;
    return mx + log1p(exp(mn - mx));
}

static void test_logaddexp(void) {
    const int have512 = cpu_isa_detected() >= CPU_ISA_AVX512_CORE;
    double worst = 0, worst_fold = 0; /* largest |err| / (LAE_ATOL + LAE_RTOL |ref|) */
    long n_inf = 0;
    for (int li = 0; li < N_ROW_LENS; li++) {
        const int n = row_lens[li];
        float *y0 = falloc((size_t)n + GUARD), *x = falloc((size_t)n), *y = falloc((size_t)n + GUARD),
              *y2 = falloc((size_t)n + GUARD);
        for (int kind = 0; kind < 4; kind++) {
            fill_logprob_row(y0, n, kind == 3 ? 0 : kind);
            fill_logprob_row(x, n, kind == 3 ? 2 : kind == 2 ? 0 : kind);
            if (kind == 3) /* -inf in y only, in x only (above), in both */
                for (int i = 1; i < n; i += 3) y0[i] = -INFINITY;
            for (int i = 0; kind == 3 && i < n; i += 6) y0[i] = -INFINITY;
            const float c = logf(rng_uniform(0.01f, 1.0f));
            for (int g = 0; g < GUARD; g++) y0[n + g] = GUARD_VALUE;
            memcpy(y, y0, ((size_t)n + GUARD) * sizeof(float));
            logaddexp_inplace(y, x, c, (size_t)n);
            int bad = 0;
            for (int i = 0; i < n; i++) {
                double ref = lae_ref(y0[i], (float)(x[i] + c));
                if (ref == -INFINITY) {
                    n_inf++;
                    bad += y[i] != -INFINITY;
                    continue;
                }
                double tol = LAE_ATOL + LAE_RTOL * fabs(ref), e = fabs((double)y[i] - ref);
                if (e / tol > worst) worst = e / tol;
                if (!(e <= tol)) {
                    if (bad < 3)
                        fprintf(stderr, "logaddexp n=%d [%d] y=%.9g x=%.9g c=%.9g: %.9g vs %.9g\n", n, i, y0[i], x[i], c,
                                y[i], ref);
                    bad++;
                }
            }
            for (int g = 0; g < GUARD; g++) bad += y[n + g] != GUARD_VALUE;
            CHECK_MSG(bad == 0, "logaddexp n=%d kind %d: %d off", n, kind, bad);
            /* the two ISA versions: the same bits */
            memcpy(y, y0, ((size_t)n + GUARD) * sizeof(float));
            memcpy(y2, y0, ((size_t)n + GUARD) * sizeof(float));
            logaddexp_inplace_avx2(y, x, c, (size_t)n);
            if (have512) {
                logaddexp_inplace_avx512(y2, x, c, (size_t)n);
                CHECK_MSG(!memcmp(y, y2, ((size_t)n + GUARD) * sizeof(float)), "logaddexp n=%d: AVX2 and AVX-512 differ", n);
            }
            memcpy(y2, y0, ((size_t)n + GUARD) * sizeof(float));
            logaddexp_inplace_ref(y2, x, c, (size_t)n); /* the scalar reference in kernels_ref.c */
            bad = 0;
            for (int i = 0; i < n; i++)
                bad += !(y[i] == y2[i] || fabs((double)y[i] - y2[i]) <= LAE_ATOL + LAE_RTOL * fabs((double)y2[i]));
            CHECK_MSG(bad == 0, "logaddexp n=%d: %d off logaddexp_inplace_ref", n, bad);
        }
        /* NaN in y or in x: NaN (both versions) */
        {
            fill_logprob_row(y0, n, 0);
            fill_logprob_row(x, n, 0);
            y0[0] = NAN;
            x[n - 1] = NAN;
            if (n == 1) x[0] = 0.5f;
            memcpy(y, y0, (size_t)n * sizeof(float));
            logaddexp_inplace_avx2(y, x, -0.5f, (size_t)n);
            CHECK_MSG(isnan(y[0]) && isnan(y[n - 1]), "logaddexp n=%d: NaN lost (AVX2)", n);
            if (have512) {
                memcpy(y, y0, (size_t)n * sizeof(float));
                logaddexp_inplace_avx512(y, x, -0.5f, (size_t)n);
                CHECK_MSG(isnan(y[0]) && isnan(y[n - 1]), "logaddexp n=%d: NaN lost (AVX-512)", n);
            }
        }
        /* the fold of K members */
        for (int K = 2; K <= 4; K++) {
            float *lp = falloc((size_t)K * n);
            double w[4], ws = 0;
            for (int k = 0; k < K; k++) ws += w[k] = rng_uniform(0.05f, 1.0f);
            for (int k = 0; k < K; k++) {
                w[k] /= ws;
                fill_logprob_row(lp + (size_t)k * n, n, (k + K) % 3);
            }
            for (int i = 0; i < n; i += 7) /* pieces masked by every member */
                for (int k = 0; k < K; k++) lp[(size_t)k * n + i] = -INFINITY;
            const float lw0 = logf((float)w[0]);
            for (int i = 0; i < n; i++) y[i] = lp[i] + lw0;
            for (int k = 1; k < K; k++) logaddexp_inplace(y, lp + (size_t)k * n, logf((float)w[k]), (size_t)n);
            int bad = 0;
            for (int i = 0; i < n; i++) {
                double s = 0;
                for (int k = 0; k < K; k++) s += w[k] * exp((double)lp[(size_t)k * n + i]);
                double ref = log(s);
                if (ref == -INFINITY) {
                    bad += y[i] != -INFINITY;
                    continue;
                }
                double tol = (K - 1) * (LAE_ATOL + LAE_RTOL * fabs(ref)) + 0x1p-23 * fabs(ref);
                double e = fabs((double)y[i] - ref);
                if (e / tol > worst_fold) worst_fold = e / tol;
                if (!(e <= tol)) {
                    if (bad < 3) fprintf(stderr, "logaddexp fold K=%d n=%d [%d]: %.9g vs %.9g\n", K, n, i, y[i], ref);
                    bad++;
                }
            }
            CHECK_MSG(bad == 0, "logaddexp fold K=%d n=%d: %d off", K, n, bad);
            aligned_free(lp);
        }
        aligned_free(y0);
        aligned_free(x);
        aligned_free(y);
        aligned_free(y2);
    }
    /* dispatch: logaddexp_inplace runs the version TERN_MAX_CPU_ISA allows (same bits either way,
     * so this checks it does not crash under a cap and matches the AVX2 version) */
    {
        float a[19], b[19], r[19];
        fill_normal(a, 19, 3.0f, -5.0f);
        fill_normal(b, 19, 3.0f, -5.0f);
        memcpy(r, a, sizeof a);
        logaddexp_inplace(a, b, -1.0f, 19);
        logaddexp_inplace_avx2(r, b, -1.0f, 19);
        CHECK(!memcmp(a, r, sizeof a));
    }
    CHECK(n_inf > 0);
    printf("logaddexp (%s, AVX-512 version %s): worst error / tolerance %.3f one call, %.3f the fold of 2-4 members "
           "(tolerance %.0e + %.1e |ref| per call)\n", cpu_isa_name(cpu_isa_effective()),
           have512 ? "checked" : "not run: no AVX-512", worst, worst_fold, LAE_ATOL, LAE_RTOL);
}

/* Tolerance per activation for input x and reference value ref. The fast versions compute
 * exp(t) of a float argument t (t = -x, -1.702 x, -x^2/2 after two or three roundings): its
 * rounding, about |t| 2^-24 per operation, is a relative error of the result, which is why the
 * bound grows with |t| (it only matters where the result is already tiny). */
static double act_tol(activation_t act, double x, double ref) {
    double ax = fabs(x), ar = fabs(ref);
    switch (act) {
    case ACT_RELU: return 0.0;                                   /* exact */
    case ACT_TANH: return 2e-7 * ar + 1e-37;                     /* ~2 ulp */
    case ACT_SWISH:                                              /* exp(-x); clamped below -88: |x| e^-88 */
        return (2e-7 + 2.4e-7 * ax) * ar + 1e-37 + 1e-38 * ax;
    case ACT_GELU_SIGMOID:                                       /* exp(-1.702 x) */
        return (2e-7 + 2.4e-7 * 1.702 * ax) * ar + 1e-37 + 1e-38 * ax;
    case ACT_GELU:                   /* erfc fit (1.2e-7) of exp(-x^2 / 2) and a division: 5e-7 */
        return (5e-7 + 2.4e-7 * 0.5 * ax * ax) * ar + 1e-37;
    case ACT_GELU_TANH:
        /* 0.5 x (1 + tanh(u)) in float, as the formula is written: for x < 0, 1 + tanh(u) cancels
         * to an absolute error of about one float ulp of 1, times 0.5 |x|. */
        return 2e-7 * ar + 1.2e-7 * ax + 1e-37;
    }
    return 0.0;
}

static const struct {
    activation_t act;
    const char *name;
} ACTS[] = {{ACT_RELU, "relu"}, {ACT_GELU_TANH, "gelu_tanh"}, {ACT_SWISH, "swish"},
            {ACT_GELU, "gelu"}, {ACT_GELU_SIGMOID, "gelu_sigmoid"}, {ACT_TANH, "tanh"}};

static void test_activations(void) {
    static const float specials[] = {0.0f, -0.0f, 1e-40f, -1e-40f, 1e-20f, -1e-20f, 0.625f, -0.625f,
                                     0.6249999f, 1.0f, -1.0f, 5.0f, -5.0f, 9.0f, -9.0f, 15.0f, -15.0f,
                                     30.0f, -30.0f, 87.0f, -87.0f, 89.0f, -89.0f, 100.0f, -100.0f,
                                     1e4f, -1e4f, 1e20f, -1e20f};
    const int ns = (int)(sizeof specials / sizeof specials[0]);
    for (size_t a = 0; a < sizeof ACTS / sizeof ACTS[0]; a++) {
        double worst = 0, worst_x = 0, worst_rel = 0;
        for (int i = 0; i < N_ROW_LENS + 1; i++) {
            int n = i < N_ROW_LENS ? row_lens[i] : 4096 + ns;
            float *x = falloc((size_t)n + GUARD), *r = falloc((size_t)n), *xin = falloc((size_t)n);
            for (int k = 0; k < n; k++) x[k] = rng_uniform(-12.0f, 12.0f);
            if (i == N_ROW_LENS) { /* a dense sweep of [-12, 12] and the special values */
                for (int k = 0; k < 4096; k++) x[k] = -12.0f + 24.0f * (float)k / 4095.0f;
                memcpy(x + 4096, specials, sizeof specials);
            }
            for (int k = n; k < n + GUARD; k++) x[k] = GUARD_VALUE;
            memcpy(r, x, (size_t)n * sizeof(float));
            memcpy(xin, x, (size_t)n * sizeof(float));
            activation_forward(x, (size_t)n, ACTS[a].act);
            activation_forward_ref(r, (size_t)n, ACTS[a].act);
            int bad = 0;
            for (int k = 0; k < n; k++) {
                double err = fabs((double)x[k] - r[k]), tol = act_tol(ACTS[a].act, xin[k], r[k]);
                if (tol > 0 && err / tol > worst) {
                    worst = err / tol;
                    worst_x = xin[k];
                }
                if (fabs(xin[k]) <= 5 && fabs(r[k]) > 1e-3 && err / fabs(r[k]) > worst_rel) worst_rel = err / fabs(r[k]);
                if (!(err <= tol) && !(isnan(x[k]) && isnan(r[k]))) {
                    if (bad < 3) fprintf(stderr, "%s(%.9g) = %.9g, ref %.9g\n", ACTS[a].name, xin[k], x[k], r[k]);
                    bad++;
                }
            }
            for (int k = n; k < n + GUARD; k++) bad += x[k] != GUARD_VALUE;
            CHECK_MSG(bad == 0, "%s n=%d: %d off", ACTS[a].name, n, bad);
            aligned_free(x);
            aligned_free(r);
            aligned_free(xin);
        }
        printf("%s: worst error / tolerance %.3g (at x = %.7g); worst relative error on |x| <= 5 %.3g\n",
               ACTS[a].name, worst, worst_x, worst_rel);
    }
}

static void elementwise_reset(float *y, float *r, int n) {
    fill_normal(y, (size_t)n, 1.0f, 0.0f);
    for (int k = n; k < n + GUARD; k++) y[k] = GUARD_VALUE;
    memcpy(r, y, (size_t)n * sizeof(float));
}

/* y (n values + GUARD guards) bit-equal to r, guards untouched. */
static void elementwise_compare(const char *what, const float *y, const float *r, int n) {
    int bad = 0;
    for (int k = 0; k < n; k++) bad += fbits(y[k]) != fbits(r[k]);
    for (int k = n; k < n + GUARD; k++) bad += y[k] != GUARD_VALUE;
    CHECK_MSG(bad == 0, "%s n=%d: %d off", what, n, bad);
}

static void test_elementwise(void) {
    for (int i = 0; i < N_ROW_LENS; i++) {
        int n = row_lens[i];
        float *x = falloc((size_t)n), *y = falloc((size_t)n + GUARD), *r = falloc((size_t)n);
        fill_normal(x, (size_t)n, 1.0f, 0.0f);
        float a = rng_normal();
        elementwise_reset(y, r, n);
        add_inplace(y, x, (size_t)n);
        for (int k = 0; k < n; k++) r[k] = r[k] + x[k];
        elementwise_compare("add_inplace", y, r, n);
        elementwise_reset(y, r, n);
        scale_inplace(y, a, (size_t)n);
        for (int k = 0; k < n; k++) r[k] = r[k] * a;
        elementwise_compare("scale_inplace", y, r, n);
        elementwise_reset(y, r, n);
        axpy(y, a, x, (size_t)n);
        for (int k = 0; k < n; k++) r[k] = fmaf(x[k], a, r[k]);
        elementwise_compare("axpy", y, r, n);
        aligned_free(x);
        aligned_free(y);
        aligned_free(r);
    }
    /* add_bias_rows over (M, C) */
    static const int shapes[][2] = {{1, 1}, {3, 7}, {5, 17}, {2, 100}, {3, 1031}};
    for (size_t c = 0; c < sizeof shapes / sizeof shapes[0]; c++) {
        int M = shapes[c][0], C = shapes[c][1];
        size_t n = (size_t)M * C;
        float *x = falloc(n + GUARD), *r = falloc(n), *b = falloc(C);
        fill_normal(x, n, 1.0f, 0.0f);
        fill_normal(b, C, 1.0f, 0.0f);
        for (size_t k = n; k < n + GUARD; k++) x[k] = GUARD_VALUE;
        for (size_t k = 0; k < n; k++) r[k] = x[k];
        add_bias_rows(x, b, M, C);
        int bad = 0;
        for (size_t k = 0; k < n; k++) bad += fbits(x[k]) != fbits(r[k] + b[k % C]);
        for (size_t k = n; k < n + GUARD; k++) bad += x[k] != GUARD_VALUE;
        CHECK_MSG(bad == 0, "add_bias_rows %dx%d: %d off", M, C, bad);
        aligned_free(x);
        aligned_free(r);
        aligned_free(b);
    }
}

static void test_argmax_topk(void) {
    for (int i = 0; i < N_ROW_LENS; i++) {
        int C = row_lens[i], M = 5;
        float *x = falloc((size_t)M * C), v1[5], v2[5];
        int o1[5], o2[5];
        for (int m = 0; m < M; m++) {
            float *r = x + (size_t)m * C;
            switch (m) {
            case 0: fill_normal(r, C, 1.0f, 0.0f); break;
            case 1: for (int c = 0; c < C; c++) r[c] = (float)(rng_u32() % 4); break; /* many ties */
            case 2: for (int c = 0; c < C; c++) r[c] = -INFINITY; break;
            case 3: fill_normal(r, C, 1.0f, 0.0f); r[C - 1] = 100.0f; break;        /* max in the tail */
            default: fill_normal(r, C, 1.0f, -1e30f); r[C / 2] = -INFINITY; break;
            }
        }
        argmax_rows(o1, v1, x, M, C);
        argmax_rows_ref(o2, v2, x, M, C);
        for (int m = 0; m < M; m++) {
            CHECK_EQ_INT(o1[m], o2[m]);
            CHECK(fbits(v1[m]) == fbits(v2[m]));
        }
        argmax_rows(o1, NULL, x, M, C); /* max_value may be NULL */
        for (int m = 0; m < M; m++) CHECK_EQ_INT(o1[m], o2[m]);

        static const int ks[] = {1, 2, 3, 4, 5, 8, 10, 17};
        for (int m = 0; m < M; m++)
            for (size_t j = 0; j < sizeof ks / sizeof ks[0]; j++) {
                int k = ks[j], kk = k < C ? k : C;
                float tv1[17], tv2[17];
                int ti1[17], ti2[17];
                topk(tv1, ti1, x + (size_t)m * C, C, k);
                topk_ref(tv2, ti2, x + (size_t)m * C, C, k);
                int bad = 0;
                for (int t = 0; t < kk; t++) bad += ti1[t] != ti2[t] || fbits(tv1[t]) != fbits(tv2[t]);
                CHECK_MSG(bad == 0, "topk C=%d k=%d row %d: %d entries differ", C, k, m, bad);
            }
        aligned_free(x);
    }
    /* Worked example: ties go to the lower index. */
    float x[7] = {1, 3, 2, 3, -1, 3, 2}, v[4];
    int idx[4], am;
    topk(v, idx, x, 7, 4);
    CHECK(idx[0] == 1 && idx[1] == 3 && idx[2] == 5 && idx[3] == 2 && v[3] == 2.0f);
    argmax_rows(&am, NULL, x, 1, 7);
    CHECK_EQ_INT(am, 1);
}

/* ------------------------------------------------------------ conversions */

static void test_half_bf16_to_float(void) {
    static uint16_t all[65536];
    static float out[65536];
    for (int i = 0; i < 65536; i++) all[i] = (uint16_t)i;
    int bad_h = 0, bad_b = 0;
    for (int i = 0; i < 65536; i++) {
        bad_h += fbits(half_to_float(all[i])) != fbits(half_to_float_ref(all[i]));
        bad_b += fbits(bf16_to_float(all[i])) != fbits(bf16_to_float_ref(all[i]));
    }
    CHECK_MSG(bad_h == 0, "half_to_float: %d of 65536 differ from the reference", bad_h);
    CHECK_MSG(bad_b == 0, "bf16_to_float: %d of 65536 differ from the reference", bad_b);
    /* arrays, at every start offset mod 8 and lengths with tails */
    static const int lens[] = {0, 1, 3, 7, 8, 9, 17, 33, 100, 1031, 65536 - 7};
    for (size_t l = 0; l < sizeof lens / sizeof lens[0]; l++)
        for (int off = 0; off < 8 && off + lens[l] <= 65536; off += 3) {
            int n = lens[l], bh = 0, bb = 0;
            out[n < 65536 ? n : 0] = GUARD_VALUE;
            half_to_float_array(out, all + off, (size_t)n);
            for (int i = 0; i < n; i++) bh += fbits(out[i]) != fbits(half_to_float_ref(all[off + i]));
            if (n < 65536) bh += out[n] != GUARD_VALUE;
            bf16_to_float_array(out, all + off, (size_t)n);
            for (int i = 0; i < n; i++) bb += fbits(out[i]) != fbits(bf16_to_float_ref(all[off + i]));
            if (n < 65536) bb += out[n] != GUARD_VALUE;
            CHECK_MSG(bh == 0 && bb == 0, "conversion arrays n=%d offset=%d: %d half, %d bf16 off", n, off, bh, bb);
        }
    /* anchors */
    CHECK(half_to_float(0x3c00) == 1.0f);
    CHECK(half_to_float(0x7bff) == 65504.0f);
    CHECK(half_to_float(0x0001) == 0x1p-24f);
    CHECK(half_to_float(0x03ff) == 1023 * 0x1p-24f);
    CHECK(half_to_float(0x0400) == 0x1p-14f);
    CHECK(half_to_float(0xfc00) == -INFINITY);
    CHECK(fbits(half_to_float(0x8000)) == 0x80000000u);
    CHECK(isnan(half_to_float(0x7e00)) && isnan(half_to_float(0x7c01)));
    CHECK(bf16_to_float(0x3f80) == 1.0f);
    CHECK(bf16_to_float(0x0001) == 0x1p-133f);
    CHECK(bf16_to_float(0x7f7f) == 0x1.fep127f);
    CHECK(bf16_to_float(0xff80) == -INFINITY);
    CHECK(isnan(bf16_to_float(0x7fc0)) && isnan(bf16_to_float(0x7f81)));
}

static int conv_bad_h = 0, conv_bad_b = 0;

static void conv_check(float f) {
    uint16_t h = float_to_half(f), hr = float_to_half_ref(f);
    uint16_t b = float_to_bf16(f), br = float_to_bf16_ref(f);
    if (h != hr) {
        if (conv_bad_h < 3) fprintf(stderr, "float_to_half(%a, 0x%08x) = 0x%04x, ref 0x%04x\n", f, fbits(f), h, hr);
        conv_bad_h++;
    }
    if (b != br) {
        if (conv_bad_b < 3) fprintf(stderr, "float_to_bf16(%a, 0x%08x) = 0x%04x, ref 0x%04x\n", f, fbits(f), b, br);
        conv_bad_b++;
    }
}

static void test_float_to_half_bf16(void) {
    long n = 0;
    /* every exponent and sign, with mantissas at and around the rounding points of both formats */
    static const uint32_t mants[] = {0,        1,        2,        0x7fffff, 0x400000, 0x7fe000, 0x001000,
                                     0x000fff, 0x001001, 0x002000, 0x003000, 0x005000, 0x7ff000, 0x7fefff,
                                     0x008000, 0x018000, 0x007fff, 0x008001, 0x010000, 0x7f8000, 0x7f7fff,
                                     0x7f0000, 0x00ffff, 0x3fffff, 0x600000, 0x7fa000, 0x7fb000, 0x7fd000};
    for (uint32_t sign = 0; sign < 2; sign++)
        for (uint32_t e = 0; e < 256; e++) {
            for (size_t i = 0; i < sizeof mants / sizeof mants[0]; i++, n++)
                conv_check(bitsf(sign << 31 | e << 23 | mants[i]));
            for (int i = 0; i < 64; i++, n++) conv_check(bitsf(sign << 31 | e << 23 | (rng_u32() & 0x7fffff)));
            /* ties at every shift (half subnormals round at bit 13..23 plus the exponent gap) */
            for (int s = 1; s < 23; s++)
                for (uint32_t lsb = 0; lsb < 2; lsb++) {
                    uint32_t m = (1u << (s - 1)) | (lsb << s) | (rng_u32() & ~((2u << s) - 1) & 0x7fffff);
                    conv_check(bitsf(sign << 31 | e << 23 | (m & 0x7fffff)));
                    conv_check(bitsf(sign << 31 | e << 23 | ((m + 1) & 0x7fffff)));
                    conv_check(bitsf(sign << 31 | e << 23 | ((m - 1) & 0x7fffff)));
                    n += 3;
                }
        }
    /* every float in the half range's critical binades at a prime stride, and random bits */
    for (uint32_t bits = 0x32800000u; bits < 0x47800000u; bits += 4099, n += 2) {
        conv_check(bitsf(bits));
        conv_check(bitsf(bits | 0x80000000u));
    }
    for (int i = 0; i < 1000000; i++, n++) conv_check(bitsf(rng_u32()));
    CHECK_MSG(conv_bad_h == 0, "float_to_half: %d of %ld differ from the reference", conv_bad_h, n);
    CHECK_MSG(conv_bad_b == 0, "float_to_bf16: %d of %ld differ from the reference", conv_bad_b, n);

    /* anchors (hand-computed): ties to even, overflow threshold, subnormals, infinities, NaN */
    static const struct { float f; uint16_t h; } H[] = {
        {1.0f, 0x3c00}, {-2.0f, 0xc000}, {65504.0f, 0x7bff}, {65519.996f, 0x7bff}, {65520.0f, 0x7c00},
        {1e10f, 0x7c00}, {0x1p-24f, 0x0001}, {0x1p-25f, 0x0000}, {0x1.8p-25f, 0x0001}, {0x1.8p-24f, 0x0002},
        {0x1p-14f, 0x0400}, {0x1.ffcp-15f, 0x0400}, {1.0f + 0x1p-11f, 0x3c00}, {1.0f + 0x1.8p-10f, 0x3c02},
        {1.0f + 0x1p-10f, 0x3c01}, {-0.0f, 0x8000}, {INFINITY, 0x7c00}, {-INFINITY, 0xfc00}, {1e-30f, 0x0000},
        {0x1.002p0f, 0x3c00}, {0x1.006p0f, 0x3c02}};
    for (size_t i = 0; i < sizeof H / sizeof H[0]; i++) {
        CHECK_MSG(float_to_half(H[i].f) == H[i].h, "float_to_half(%a) = 0x%04x, want 0x%04x", H[i].f,
                  float_to_half(H[i].f), H[i].h);
        CHECK_MSG(float_to_half_ref(H[i].f) == H[i].h, "float_to_half_ref(%a) = 0x%04x, want 0x%04x", H[i].f,
                  float_to_half_ref(H[i].f), H[i].h);
    }
    static const struct { float f; uint16_t b; } B[] = {
        {1.0f, 0x3f80}, {1.0f + 0x1p-8f, 0x3f80}, {1.0f + 0x1.8p-7f, 0x3f82}, {1.0f + 0x1p-7f, 0x3f81},
        {0x1.fep127f, 0x7f7f}, {FLT_MAX, 0x7f80}, {-FLT_MAX, 0xff80}, {0x1p-133f, 0x0001}, {0x1p-134f, 0x0000},
        {0x1.8p-134f, 0x0001}, {0x1p-149f, 0x0000}, {0x1p-126f, 0x0080}, {-0.0f, 0x8000}, {INFINITY, 0x7f80},
        {-INFINITY, 0xff80}};
    for (size_t i = 0; i < sizeof B / sizeof B[0]; i++) {
        CHECK_MSG(float_to_bf16(B[i].f) == B[i].b, "float_to_bf16(%a) = 0x%04x, want 0x%04x", B[i].f,
                  float_to_bf16(B[i].f), B[i].b);
        CHECK_MSG(float_to_bf16_ref(B[i].f) == B[i].b, "float_to_bf16_ref(%a) = 0x%04x, want 0x%04x", B[i].f,
                  float_to_bf16_ref(B[i].f), B[i].b);
    }
    /* NaN: stays NaN, quiet, sign and top payload kept */
    CHECK_EQ_INT(float_to_half(bitsf(0x7fc00000u)), 0x7e00);
    CHECK_EQ_INT(float_to_half(bitsf(0xff800001u)), 0xfe00);
    CHECK_EQ_INT(float_to_half(bitsf(0x7fa02000u)), 0x7e01 | 0x100);
    CHECK_EQ_INT(float_to_bf16(bitsf(0x7f800001u)), 0x7fc0);
    CHECK_EQ_INT(float_to_bf16(bitsf(0xffa10000u)), 0xffe1);
    /* round trips: every finite half and bfloat16 survives float and back */
    int bad = 0;
    for (uint32_t i = 0; i < 65536; i++) {
        uint16_t u = (uint16_t)i;
        if ((u & 0x7c00) != 0x7c00) bad += float_to_half(half_to_float(u)) != u;
        if ((u & 0x7f80) != 0x7f80) bad += float_to_bf16(bf16_to_float(u)) != u;
    }
    CHECK_EQ_INT(bad, 0);
}

int main(void) {
    test_gemm();
    test_gemm_threads();
    test_gemm_batched();
    test_quantize();
    test_prepare_s8();
    test_linear_int32_exact();
    test_linear_packed_s8();
    test_f32p();
    test_gemm_packed_f32();
    test_gemm_s8();
    test_gemm_s8p();
    test_gemm_s8v();
    test_linear();
    test_layernorm();
    test_softmax();
    test_softmax_exact();
    test_logaddexp();
    test_activations();
    test_elementwise();
    test_argmax_topk();
    test_half_bf16_to_float();
    test_float_to_half_bf16();
    return check_report("test_kernels");
}
