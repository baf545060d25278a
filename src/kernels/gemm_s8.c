/* gemm_s8.c — exact int8 GEMM in AVX2 for CPUs without VNNI (docs/kernels.md, "int8 on AVX2").
 *
 * C[m, n] = sum_k A[m, k] * B[n, k], A and B signed 8-bit with K contiguous (activations (M, K),
 * weights (N, K) as stored), C int32: the exact integer product, whatever the CPU.
 *
 * Why not oneDNN here: without VNNI, oneDNN's u8*s8 GEMM (and the u8s8 matmul primitive) multiply
 * with vpmaddubsw, which adds each pair of u8*s8 products into a 16-bit lane with signed
 * saturation: 255*127 + 255*127 = 64770 does not fit in 32767, so the shifted activations CTranslate2
 * hands it (x + 128 in [1, 255]) overflow and the result is silently wrong (tests/c/test_kernels.c
 * saw 16,379 of 16,384 outputs wrong on random full-range operands).
 *
 * The method: vpmaddubsw(|a|, sign(b, a)). vpabsb gives |a| as an unsigned byte (0..128) and
 * vpsignb gives b with a's sign (b * sgn(a); 0 where a is 0), so every byte product equals a * b,
 * and each pair sum is at most 2 * 128 * 127 = 32512 <= 32767: vpmaddubsw cannot saturate. The
 * pair sums are widened to 32 bits by vpmaddwd with ones (4 products per 32-bit lane, at most
 * 65024) and accumulated in 32-bit lanes; the int32 total is exact as long as K * 128 * 127 fits,
 * i.e. K < 132,000 (checked). The one case vpsignb cannot express is b = -128 with a < 0 (it
 * would give -128 for +128): a weight matrix that holds -128 (CTranslate2's converter never writes
 * it, values lie in [-127, 127]) is multiplied by the sign-extended 16-bit kernel instead
 * (vpmovsxbw + vpmaddwd, exact for every byte, half the rate).
 *
 * Blocking: 4 rows of A × 2 rows of B per micro-kernel (8 accumulators), K in 32-byte steps with
 * a scalar tail; N split into panels of 64 weight rows whose 64 × K bytes stay in L2 while every
 * row block of A passes over them; panels shared among the OpenMP team of the calling thread.
 *
 * Legend: M rows of A and C, N rows of B and columns of C, K the shared dimension. */
#include <immintrin.h>
#include <omp.h>
#include <stdint.h>
#include <string.h>

#include "kernels/gemm_s8.h"
#include "kernels/kernels.h"

#define MR 4
#define NR 2
#define NC 64 /* weight rows per panel */

/* --------------------------------------------------------------- vpsignb kernel (b != -128) */

static inline __attribute__((always_inline)) __m256i dot32(__m256i abs_a, __m256i a, __m256i b,
                                                           __m256i ones) {
    __m256i p16 = _mm256_maddubs_epi16(abs_a, _mm256_sign_epi8(b, a));
    return _mm256_madd_epi16(p16, ones);
}

static inline __attribute__((always_inline)) int32_t hsum8(__m256i v) {
    __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4e));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xb1));
    return _mm_cvtsi128_si32(s);
}

static inline __attribute__((always_inline)) int32_t tail_dot(const int8_t *a, const int8_t *b, int k0, int K) {
    int32_t s = 0;
    for (int k = k0; k < K; k++) s += (int32_t)a[k] * b[k];
    return s;
}

/* mr x nr block (mr <= MR, nr <= NR compile-time constants after inlining). */
static inline __attribute__((always_inline)) void block_sign(int mr, int nr, int K, const int8_t *A, int lda,
                                                             const int8_t *B, int ldb, int32_t *C, int ldc) {
    __m256i acc[MR][NR];
    const __m256i ones = _mm256_set1_epi16(1);
    for (int i = 0; i < mr; i++)
        for (int j = 0; j < nr; j++) acc[i][j] = _mm256_setzero_si256();
    int k = 0;
    for (; k + 32 <= K; k += 32) {
        __m256i b[NR];
        for (int j = 0; j < nr; j++) b[j] = _mm256_loadu_si256((const __m256i *)(B + (size_t)j * ldb + k));
        for (int i = 0; i < mr; i++) {
            __m256i a = _mm256_loadu_si256((const __m256i *)(A + (size_t)i * lda + k));
            __m256i abs_a = _mm256_abs_epi8(a);
            for (int j = 0; j < nr; j++) acc[i][j] = _mm256_add_epi32(acc[i][j], dot32(abs_a, a, b[j], ones));
        }
    }
    if (mr == MR && nr == NR) { /* 8 sums at once: C rows i, columns j, in one vector [i*NR + j] */
        __m256i t0 = _mm256_hadd_epi32(acc[0][0], acc[0][1]), t1 = _mm256_hadd_epi32(acc[1][0], acc[1][1]);
        __m256i t2 = _mm256_hadd_epi32(acc[2][0], acc[2][1]), t3 = _mm256_hadd_epi32(acc[3][0], acc[3][1]);
        __m256i u0 = _mm256_hadd_epi32(t0, t1), u1 = _mm256_hadd_epi32(t2, t3);
        /* u0 = [r0c0 r0c1 r1c0 r1c1 | same, upper halves]; likewise u1 for rows 2, 3 */
        __m256i s = _mm256_add_epi32(_mm256_permute2x128_si256(u0, u1, 0x20), _mm256_permute2x128_si256(u0, u1, 0x31));
        int32_t out[8];
        _mm256_storeu_si256((__m256i *)out, s);
        for (int i = 0; i < MR; i++)
            for (int j = 0; j < NR; j++) {
                int32_t v = out[i * NR + j];
                if (k < K) v += tail_dot(A + (size_t)i * lda, B + (size_t)j * ldb, k, K);
                C[(size_t)i * ldc + j] = v;
            }
        return;
    }
    for (int i = 0; i < mr; i++)
        for (int j = 0; j < nr; j++) {
            int32_t v = hsum8(acc[i][j]);
            if (k < K) v += tail_dot(A + (size_t)i * lda, B + (size_t)j * ldb, k, K);
            C[(size_t)i * ldc + j] = v;
        }
}

/* ----------------------------------------------------- 16-bit kernel (any byte, b = -128 too) */

static void block_wide(int mr, int nr, int K, const int8_t *A, int lda, const int8_t *B, int ldb, int32_t *C,
                       int ldc) {
    for (int i = 0; i < mr; i++)
        for (int j = 0; j < nr; j++) {
            const int8_t *a = A + (size_t)i * lda, *b = B + (size_t)j * ldb;
            __m256i acc = _mm256_setzero_si256();
            int k = 0;
            for (; k + 16 <= K; k += 16) {
                __m256i a16 = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)(a + k)));
                __m256i b16 = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)(b + k)));
                acc = _mm256_add_epi32(acc, _mm256_madd_epi16(a16, b16)); /* |pair| <= 2 * 128 * 128 */
            }
            C[(size_t)i * ldc + j] = hsum8(acc) + tail_dot(a, b, k, K);
        }
}

/* --------------------------------------------------------------- driver */

static void panel(int M, int n0, int n1, int K, const int8_t *A, int lda, const int8_t *B, int ldb, int32_t *C,
                  int ldc, int wide) {
    for (int m = 0; m < M; m += MR) {
        int mr = M - m < MR ? M - m : MR;
        const int8_t *a = A + (size_t)m * lda;
        for (int n = n0; n < n1; n += NR) {
            int nr = n1 - n < NR ? n1 - n : NR;
            const int8_t *b = B + (size_t)n * ldb;
            int32_t *c = C + (size_t)m * ldc + n;
            if (wide) {
                block_wide(mr, nr, K, a, lda, b, ldb, c, ldc);
                continue;
            }
            /* each call site inlines block_sign with constant sizes */
            if (nr == 2) {
                switch (mr) {
                case 4: block_sign(4, 2, K, a, lda, b, ldb, c, ldc); break;
                case 3: block_sign(3, 2, K, a, lda, b, ldb, c, ldc); break;
                case 2: block_sign(2, 2, K, a, lda, b, ldb, c, ldc); break;
                default: block_sign(1, 2, K, a, lda, b, ldb, c, ldc); break;
                }
            } else {
                switch (mr) {
                case 4: block_sign(4, 1, K, a, lda, b, ldb, c, ldc); break;
                case 3: block_sign(3, 1, K, a, lda, b, ldb, c, ldc); break;
                case 2: block_sign(2, 1, K, a, lda, b, ldb, c, ldc); break;
                default: block_sign(1, 1, K, a, lda, b, ldb, c, ldc); break;
                }
            }
        }
    }
}

int gemm_s8_has_min(const int8_t *B, size_t n) {
    size_t i = 0;
    const __m256i min = _mm256_set1_epi8(-128);
    for (; i + 32 <= n; i += 32)
        if (_mm256_movemask_epi8(_mm256_cmpeq_epi8(_mm256_loadu_si256((const __m256i *)(B + i)), min))) return 1;
    for (; i < n; i++)
        if (B[i] == -128) return 1;
    return 0;
}

void gemm_s8s8s32(int M, int N, int K, const int8_t *A, int lda, const int8_t *B, int ldb, int32_t *C, int ldc,
                  int b_has_min) {
    if (M <= 0 || N <= 0) return;
    if (K <= 0) {
        for (int m = 0; m < M; m++) memset(C + (size_t)m * ldc, 0, (size_t)N * sizeof(int32_t));
        return;
    }
    int panels = (N + NC - 1) / NC;
    int threads = kernels_get_num_threads();
    /* a parallel region costs a few microseconds: only where each thread gets real work */
    double work = (double)M * N * K;
    if (threads > panels) threads = panels;
    if (work < 2e6) threads = 1;
    if (threads <= 1) {
        for (int p = 0; p < panels; p++) {
            int n0 = p * NC, n1 = n0 + NC < N ? n0 + NC : N;
            panel(M, n0, n1, K, A, lda, B, ldb, C, ldc, b_has_min);
        }
        return;
    }
#pragma omp parallel for num_threads(threads) schedule(static)
    for (int p = 0; p < panels; p++) {
        int n0 = p * NC, n1 = n0 + NC < N ? n0 + NC : N;
        panel(M, n0, n1, K, A, lda, B, ldb, C, ldc, b_has_min);
    }
}

/* ================================================================ packed weights, int16 products
 *
 * gemm_s8p_*: the same exact product on weights packed once (at load) for a broadcast kernel.
 *
 * Layout: a 64-byte header, then the weights in panels of PNR = 16 output columns (N padded to a
 * multiple of 16 with zero rows), K padded to Kp = K rounded up to even with zeros. Panel p holds,
 * for each pair of k (2t, 2t + 1), 32 bytes: columns 0..7 as byte pairs (q[n][2t], q[n][2t + 1]),
 * then columns 8..15 likewise. vpmovsxbw widens each 16-byte half to 16 int16 = 8 pairs, one
 * per 32-bit lane; the activations (int16, rows of Kp, quantize_rows_s16) are broadcast a pair at
 * a time (vpbroadcastd), and vpmaddwd forms a[2t] q[n][2t] + a[2t+1] q[n][2t+1] in the 32-bit lane
 * of column n: |pair| <= 2 * 128 * 128 = 32768, exact in int32 (vpmaddwd saturates nothing: its
 * only overflow, both products (-32768)^2, needs 16-bit operands). Each lane accumulates in int32
 * with vpaddd, exact while K * 128 * 128 < 2^31 (GEMM_S8_MAX_K). No horizontal sums: one
 * accumulator register holds 8 finished outputs of one row.
 *
 * Micro-kernel: PMR = 6 rows x 16 columns (12 accumulators, 2 weight registers, 1 broadcast).
 * Loop order: row chunks of at most MC rows (their int16 activations stay in L2), then panels
 * (shared among the calling thread's OpenMP team), then row blocks of 6 over the whole K. */

#define PNR 16
#define PMR 6

typedef struct {
    uint32_t magic;
    int32_t N, K, Kp;
} s8p_head_t;

#define S8P_MAGIC 0x38533250u /* "P2S8" */
#define S8P_HEAD 64

static int s8p_kp(int K) { return (K + 1) & ~1; }

size_t gemm_s8p_size(int N, int K) {
    if (N <= 0 || K <= 0 || K > GEMM_S8_MAX_K) return 0;
    size_t panels = ((size_t)N + PNR - 1) / PNR;
    return S8P_HEAD + panels * PNR * (size_t)s8p_kp(K);
}

int gemm_s8p_pack(void *buf, const int8_t *Q, int N, int K) {
    if (!gemm_s8p_size(N, K)) return -1;
    s8p_head_t h = {S8P_MAGIC, N, K, s8p_kp(K)};
    memset(buf, 0, S8P_HEAD);
    memcpy(buf, &h, sizeof h);
    int8_t *w = (int8_t *)buf + S8P_HEAD;
    int panels = (N + PNR - 1) / PNR, Kp = h.Kp;
    for (int p = 0; p < panels; p++) {
        int8_t *pw = w + (size_t)p * PNR * Kp;
        for (int t = 0; t < Kp / 2; t++)
            for (int j = 0; j < PNR; j++) {
                int n = p * PNR + j;
                for (int e = 0; e < 2; e++) {
                    int k = 2 * t + e;
                    pw[(size_t)t * 32 + (j / 8) * 16 + (j % 8) * 2 + e] = n < N && k < K ? Q[(size_t)n * K + k] : 0;
                }
            }
    }
    return 0;
}

int gemm_s8p_row(const void *pk, int n, int k0, int k1, int8_t *out) {
    s8p_head_t h;
    memcpy(&h, pk, sizeof h);
    if (h.magic != S8P_MAGIC || n < 0 || n >= h.N || k0 < 0 || k1 > h.K || k0 > k1) return -1;
    const int8_t *pw = (const int8_t *)pk + S8P_HEAD + (size_t)(n / PNR) * PNR * h.Kp;
    size_t col = (size_t)(n % PNR / 8) * 16 + (size_t)(n % 8) * 2;
    for (int k = k0; k < k1; k++) out[k - k0] = pw[(size_t)(k / 2) * 32 + col + (size_t)(k % 2)];
    return 0;
}

int gemm_s8p_dims(const void *pk, int *N, int *K) {
    s8p_head_t h;
    memcpy(&h, pk, sizeof h);
    if (h.magic != S8P_MAGIC) return -1;
    *N = h.N, *K = h.K;
    return 0;
}

size_t gemm_s8p_a_stride(int K) { return (size_t)s8p_kp(K); }

/* mr x 16 block over the whole K: A int16 rows (stride lda elements, Kp columns), w the panel,
 * C int32 rows (stride ldc), nc <= 16 valid columns. Written row by row with named accumulators
 * (an array of them made GCC keep some on the stack). */
#define S8P_ROW(i)                                                                                 \
    if (mr > i) {                                                                                  \
        __m256i b = _mm256_set1_epi32(a##i[t]);                                                    \
        c##i##0 = _mm256_add_epi32(c##i##0, _mm256_madd_epi16(b, w0));                             \
        c##i##1 = _mm256_add_epi32(c##i##1, _mm256_madd_epi16(b, w1));                             \
    }
/* Dequantization fused into the store (gemm_s8p_forward_deq): out = float(acc) * (1 / scale_a[m]) /
 * scale_w[n] + bias[n], three separately rounded operations in this order, as linear.c's
 * dequantize_rows (vector body and scalar tail give the same IEEE results). */
typedef struct {
    float *out;
    const float *scale_a, *scale_w, *bias; /* scale_a: rows of this block; scale_w, bias: columns of this panel */
    int relu;                              /* then max(v, 0) (as activation_forward's ReLU) */
} s8p_deq_t;

static inline __attribute__((always_inline)) void s8p_store_row(int32_t *c, __m256i v0, __m256i v1, int nc,
                                                                const s8p_deq_t *dq, int i, size_t ldc) {
    if (!dq) {
        if (nc == PNR) {
            _mm256_storeu_si256((__m256i *)c, v0);
            _mm256_storeu_si256((__m256i *)(c + 8), v1);
        } else {
            int32_t tmp[PNR];
            _mm256_storeu_si256((__m256i *)tmp, v0);
            _mm256_storeu_si256((__m256i *)(tmp + 8), v1);
            memcpy(c, tmp, (size_t)nc * sizeof(int32_t));
        }
        return;
    }
    float r = 1.0f / dq->scale_a[i], *y = dq->out + i * ldc;
    if (nc == PNR) {
        __m256 vr = _mm256_set1_ps(r);
        __m256 f0 = _mm256_mul_ps(_mm256_cvtepi32_ps(v0), vr), f1 = _mm256_mul_ps(_mm256_cvtepi32_ps(v1), vr);
        f0 = _mm256_div_ps(f0, _mm256_loadu_ps(dq->scale_w));
        f1 = _mm256_div_ps(f1, _mm256_loadu_ps(dq->scale_w + 8));
        if (dq->bias) {
            f0 = _mm256_add_ps(f0, _mm256_loadu_ps(dq->bias));
            f1 = _mm256_add_ps(f1, _mm256_loadu_ps(dq->bias + 8));
        }
        _mm256_storeu_ps(y, f0);
        _mm256_storeu_ps(y + 8, f1);
        return;
    }
    int32_t tmp[PNR];
    _mm256_storeu_si256((__m256i *)tmp, v0);
    _mm256_storeu_si256((__m256i *)(tmp + 8), v1);
    for (int j = 0; j < nc; j++) {
        float v = (float)tmp[j] * r;
        v = v / dq->scale_w[j];
        if (dq->bias) v = v + dq->bias[j];
        y[j] = v;
    }
}

#define S8P_STORE(i)                                                                               \
    if (mr > i) s8p_store_row(C + i * ldc, c##i##0, c##i##1, nc, dq, i, ldc);

static inline __attribute__((always_inline)) void s8p_block(int mr, int Kp, const int16_t *A, size_t lda,
                                                            const int8_t *w, size_t pf, int32_t *C, size_t ldc,
                                                            int nc, const s8p_deq_t *dq) {
    __m256i c00 = _mm256_setzero_si256(), c01 = c00, c10 = c00, c11 = c00, c20 = c00, c21 = c00, c30 = c00,
            c31 = c00, c40 = c00, c41 = c00, c50 = c00, c51 = c00;
    /* pair t of row i: a_i[t] (int16 pairs read as int32: A is 4-byte aligned, Kp even) */
    const int32_t *a0 = (const int32_t *)A, *a1 = (const int32_t *)(A + lda), *a2 = (const int32_t *)(A + 2 * lda),
                  *a3 = (const int32_t *)(A + 3 * lda), *a4 = (const int32_t *)(A + 4 * lda),
                  *a5 = (const int32_t *)(A + 5 * lda);
    for (int t = 0; t < Kp / 2; t++) {
        _mm_prefetch((const char *)(w + pf + (size_t)t * 32), _MM_HINT_T0);
        __m256i w0 = _mm256_cvtepi8_epi16(_mm_load_si128((const __m128i *)(w + (size_t)t * 32)));
        __m256i w1 = _mm256_cvtepi8_epi16(_mm_load_si128((const __m128i *)(w + (size_t)t * 32 + 16)));
        S8P_ROW(0) S8P_ROW(1) S8P_ROW(2) S8P_ROW(3) S8P_ROW(4) S8P_ROW(5)
    }
    S8P_STORE(0) S8P_STORE(1) S8P_STORE(2) S8P_STORE(3) S8P_STORE(4) S8P_STORE(5)
}

/* ReLU of the mr x nc block just stored at y (row stride ldc), still in L1: max(v, 0) as
 * activation_forward's ReLU (maxps(v, 0): 0 for NaN and -0). Kept out of s8p_block, whose
 * accumulators then stay in registers (a flag read in its store made GCC spill one: 30% slower). */
static void s8p_relu_block(float *y, size_t ldc, int mr, int nc) {
    for (int i = 0; i < mr; i++, y += ldc) {
        int j = 0;
        for (; j + 8 <= nc; j += 8) _mm256_storeu_ps(y + j, _mm256_max_ps(_mm256_loadu_ps(y + j), _mm256_setzero_ps()));
        for (; j < nc; j++) y[j] = y[j] > 0.0f ? y[j] : 0.0f;
    }
}

/* One panel (nc <= 16 columns) for M rows. dq0 NULL: int32 into C; else floats into dq0->out (C
 * unused), dq0's pointers at row 0 and this panel's first column. */
static void s8p_panel(int M, int Kp, const int16_t *A, size_t lda, const int8_t *w, size_t pf, int32_t *C,
                      size_t ldc, int nc, const s8p_deq_t *dq0) {
    s8p_deq_t d;
    const s8p_deq_t *dq = dq0 ? &d : NULL;
    if (dq0) d = *dq0;
    int m = 0;
    for (; m + PMR <= M; m += PMR) {
        if (dq0) d.out = dq0->out + m * ldc, d.scale_a = dq0->scale_a + m;
        s8p_block(PMR, Kp, A + m * lda, lda, w, pf, C + m * ldc, ldc, nc, dq);
        if (dq0 && dq0->relu) s8p_relu_block(d.out, ldc, PMR, nc);
    }
    if (dq0) d.out = dq0->out + m * ldc, d.scale_a = dq0->scale_a + m;
    const int16_t *a = A + m * lda;
    int32_t *c = C + m * ldc;
    switch (M - m) {
    case 5: s8p_block(5, Kp, a, lda, w, pf, c, ldc, nc, dq); break;
    case 4: s8p_block(4, Kp, a, lda, w, pf, c, ldc, nc, dq); break;
    case 3: s8p_block(3, Kp, a, lda, w, pf, c, ldc, nc, dq); break;
    case 2: s8p_block(2, Kp, a, lda, w, pf, c, ldc, nc, dq); break;
    case 1: s8p_block(1, Kp, a, lda, w, pf, c, ldc, nc, dq); break;
    default: break;
    }
    if (dq0 && dq0->relu && M > m) s8p_relu_block(d.out, ldc, M - m, nc);
}

static void s8p_run(int32_t *C, const int16_t *A, const s8p_head_t *h, const int8_t *w, int M,
                    const s8p_deq_t *dq) {
    const int N = h->N, Kp = h->Kp, panels = (N + PNR - 1) / PNR;
    const size_t lda = (size_t)Kp, ldc = (size_t)N, pstride = (size_t)PNR * Kp;
    /* rows per chunk: their activations (MC x Kp int16) at most ~192 KB, a multiple of PMR */
    int mc = (int)((192u << 10) / ((size_t)Kp * 2)) / PMR * PMR;
    if (mc < PMR) mc = PMR;
    int threads = kernels_get_num_threads();
    double work = (double)M * N * Kp;
    if (threads > panels) threads = panels;
    if (work < 2e6) threads = 1;
    for (int m0 = 0; m0 < M; m0 += mc) {
        int mr = M - m0 < mc ? M - m0 : mc;
        const int16_t *a = A + m0 * lda;
        int32_t *c = C ? C + m0 * ldc : NULL;
#define S8P_PANEL(p)                                                                                              \
    do {                                                                                                          \
        int n0 = (p) * PNR, nc = N - n0 < PNR ? N - n0 : PNR;                                                     \
        s8p_deq_t dp;                                                                                             \
        if (dq)                                                                                                   \
            dp = (s8p_deq_t){dq->out + m0 * ldc + n0, dq->scale_a + m0, dq->scale_w + n0,                         \
                             dq->bias ? dq->bias + n0 : NULL, dq->relu};                                          \
        s8p_panel(mr, Kp, a, lda, w + (p) * pstride, (p) + 1 < panels ? pstride : 0, c ? c + n0 : NULL, ldc, nc, dq ? &dp : NULL);                \
    } while (0)
        if (threads <= 1) {
            for (int p = 0; p < panels; p++) S8P_PANEL(p);
        } else {
            /* panels taken in turn, about 8 chunks per thread */
#pragma omp parallel for num_threads(threads) schedule(dynamic, kernels_chunk(panels, threads, 8))
            for (int p = 0; p < panels; p++) S8P_PANEL(p);
        }
#undef S8P_PANEL
    }
}

int gemm_s8p_forward(int32_t *C, const int16_t *A, const void *pk, int M) {
    s8p_head_t h;
    memcpy(&h, pk, sizeof h);
    if (h.magic != S8P_MAGIC) return -1;
    if (M > 0) s8p_run(C, A, &h, (const int8_t *)pk + S8P_HEAD, M, NULL);
    return 0;
}

int gemm_s8p_forward_deq(float *out, const int16_t *A, const void *pk, int M, const float *scale_a,
                         const float *scale_w, const float *bias, int relu) {
    s8p_head_t h;
    memcpy(&h, pk, sizeof h);
    if (h.magic != S8P_MAGIC) return -1;
    s8p_deq_t dq = {out, scale_a, scale_w, bias, relu != 0};
    if (M > 0) s8p_run(NULL, A, &h, (const int8_t *)pk + S8P_HEAD, M, &dq);
    return 0;
}
