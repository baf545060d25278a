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
