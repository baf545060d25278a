/* gemm_s8v.c — the int8 linear layers' product on weights packed once, with AVX512_VNNI's vpdpbusd
 * (docs/kernels.md, "Packed int8 weights with VNNI: Tern's kernel").
 *
 * The sums: CTranslate2's activations are u8 = a + 128 (a in [-128, 127] the signed value), its
 * weights s8 w in [-127, 127] (any byte works here), and the layer wants the exact int32
 * S = sum_k a_k w_k. vpdpbusd multiplies unsigned bytes of its first source by signed bytes of its
 * second, four products summed into each 32-bit lane with no narrower intermediate (no
 * saturation: that is vpdpbusds). Here the weights are the unsigned operand, stored once as
 * w + 128 in [0, 255], and the signed activation bytes a are the second operand, broadcast from
 * memory four at a time ({1to16}: one instruction, no separate broadcast). So each lane sums
 * (w + 128) a = w a + 128 a, and S = sum - 128 sum_k a_k, the second term one integer per row,
 * computed once per call. Every term is exact in int32 while K * 255 * 128 < 2^31
 * (GEMM_S8V_MAX_K), so S is the same integer as oneDNN's u8s8s32 plus compensation and as the
 * AVX2 kernels give, and the dequantization below the same IEEE operations as linear.c's
 * dequantize_rows: the same bits.
 *
 * Why a kernel of our own beside oneDNN's (which also runs vpdpbusd): in a decoder step the rows
 * are few (M = 1..128) and every weight is read once per step, from memory, for those rows. This
 * kernel streams each 32-column panel once (its 32 x K bytes stay in L1/L2 while every row block
 * passes over it, and the next panel is prefetched meanwhile), where oneDNN's matmul read the
 * vocabulary projection's 16 MB at a lower rate (bench/bench_gemm: 258 GOP/s at M = 32, N =
 * 32000 against 412 at N = 2048, same run).
 *
 * Layout: panel p holds columns [32p, 32p + 32); for each quad t of K (k = 4t..4t+3), 128 bytes:
 * columns 0..15 of the panel, 4 bytes each (k order), then columns 16..31. Padding (columns past
 * N, k past K) is the byte 128, i.e. weight 0. Activations: rows of gemm_s8v_a_stride(K) signed
 * bytes (K rounded up to a multiple of 4; the pad bytes must be 0).
 *
 * Micro-kernel: up to 12 rows x 32 columns (24 zmm accumulators, 2 weight registers), K in quads.
 *
 * Legend: M rows (activations, outputs), N columns (output features), K input features. */
#include <immintrin.h>
#include <omp.h>
#include <stdint.h>
#include <string.h>

#include "kernels/gemm_s8v.h"
#include "kernels/kernels.h"

#define VNR 32 /* columns per panel */
#define VMR 12 /* rows per micro-kernel */
#define S8V_HEAD 64
#define S8V_MAGIC 0x56385356u /* "VS8V" */

#define VNNI_TARGET __attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni")))
#define VNNI_INLINE static inline __attribute__((always_inline, target("avx512f,avx512bw,avx512vl,avx512vnni")))

typedef struct {
    uint32_t magic;
    int32_t N, K, Kp;
} s8v_head_t;

static int s8v_kp(int K) { return (K + 3) & ~3; }

size_t gemm_s8v_size(int N, int K) {
    if (N <= 0 || K <= 0 || K > GEMM_S8V_MAX_K) return 0;
    size_t panels = ((size_t)N + VNR - 1) / VNR;
    return S8V_HEAD + panels * VNR * (size_t)s8v_kp(K);
}

size_t gemm_s8v_a_stride(int K) { return (size_t)s8v_kp(K); }

int gemm_s8v_pack(void *buf, const int8_t *Q, int N, int K) {
    if (!gemm_s8v_size(N, K)) return -1;
    s8v_head_t h = {S8V_MAGIC, N, K, s8v_kp(K)};
    memset(buf, 0, S8V_HEAD);
    memcpy(buf, &h, sizeof h);
    uint8_t *w = (uint8_t *)buf + S8V_HEAD;
    int panels = (N + VNR - 1) / VNR, Kp = h.Kp;
    for (int p = 0; p < panels; p++) {
        uint8_t *pw = w + (size_t)p * VNR * Kp;
        for (int t = 0; t < Kp / 4; t++)
            for (int j = 0; j < VNR; j++) {
                int n = p * VNR + j;
                for (int e = 0; e < 4; e++) {
                    int k = 4 * t + e;
                    int v = n < N && k < K ? Q[(size_t)n * K + k] : 0;
                    pw[(size_t)t * 128 + (size_t)(j / 16) * 64 + (size_t)(j % 16) * 4 + e] = (uint8_t)(v + 128);
                }
            }
    }
    return 0;
}

int gemm_s8v_row(const void *pk, int n, int k0, int k1, int8_t *out) {
    s8v_head_t h;
    memcpy(&h, pk, sizeof h);
    if (h.magic != S8V_MAGIC || n < 0 || n >= h.N || k0 < 0 || k1 > h.K || k0 > k1) return -1;
    const uint8_t *pw = (const uint8_t *)pk + S8V_HEAD + (size_t)(n / VNR) * VNR * h.Kp;
    size_t col = (size_t)(n % VNR / 16) * 64 + (size_t)(n % 16) * 4;
    for (int k = k0; k < k1; k++) out[k - k0] = (int8_t)(pw[(size_t)(k / 4) * 128 + col + (size_t)(k % 4)] - 128);
    return 0;
}

int gemm_s8v_dims(const void *pk, int *N, int *K) {
    s8v_head_t h;
    memcpy(&h, pk, sizeof h);
    if (h.magic != S8V_MAGIC) return -1;
    *N = h.N, *K = h.K;
    return 0;
}

/* Dequantization fused into the store (NULL: int32 sums into C). The same three separately
 * rounded operations as linear.c's dequantize_rows: float(S) * (1 / scale_a[m]), / scale_w[n],
 * + bias[n]; relu: then max(v, 0). */
typedef struct {
    float *out;
    const float *scale_a, *scale_w, *bias; /* scale_a: rows of this block; scale_w, bias: this panel's columns */
    int relu;
} s8v_deq_t;

VNNI_INLINE void s8v_store_row(int32_t *c, __m512i v0, __m512i v1, __mmask16 k0, __mmask16 k1, const s8v_deq_t *dq,
                               int i, size_t ldc) {
    if (!dq) {
        _mm512_mask_storeu_epi32(c, k0, v0);
        _mm512_mask_storeu_epi32(c + 16, k1, v1);
        return;
    }
    float *y = dq->out + (size_t)i * ldc;
    __m512 vr = _mm512_set1_ps(1.0f / dq->scale_a[i]), one = _mm512_set1_ps(1.0f);
    __m512 f0 = _mm512_mul_ps(_mm512_cvtepi32_ps(v0), vr), f1 = _mm512_mul_ps(_mm512_cvtepi32_ps(v1), vr);
    f0 = _mm512_div_ps(f0, _mm512_mask_loadu_ps(one, k0, dq->scale_w));
    f1 = _mm512_div_ps(f1, _mm512_mask_loadu_ps(one, k1, dq->scale_w + 16));
    if (dq->bias) {
        f0 = _mm512_add_ps(f0, _mm512_maskz_loadu_ps(k0, dq->bias));
        f1 = _mm512_add_ps(f1, _mm512_maskz_loadu_ps(k1, dq->bias + 16));
    }
    if (dq->relu) {
        f0 = _mm512_max_ps(f0, _mm512_setzero_ps());
        f1 = _mm512_max_ps(f1, _mm512_setzero_ps());
    }
    _mm512_mask_storeu_ps(y, k0, f0);
    _mm512_mask_storeu_ps(y + 16, k1, f1);
}

/* mr x 32 block over the whole K: A signed byte rows (stride lda bytes, Kp columns), w the panel,
 * corr[i] = 128 * sum_k A[i][k]; pf: bytes to a later panel (prefetched alongside), 0 for none.
 * Named accumulators (an array of them can make GCC keep some on the stack). */
/* acc += dpbusd(w, broadcast of the 4 bytes at p), in place: written as one instruction with its
 * memory broadcast because GCC 12, given the intrinsic, copied every accumulator through the stack
 * on each iteration (the tied operand). */
#define S8V_DP(acc, w, p) __asm__("vpdpbusd %2%{1to16%}, %1, %0" : "+v"(acc) : "v"(w), "m"(*(const int32_t *)(p)))
#define S8V_ROW(i)                                                                                 \
    if (mr > i) {                                                                                  \
        S8V_DP(c##i##0, w0, a##i + t);                                                             \
        S8V_DP(c##i##1, w1, a##i + t);                                                             \
    }
#define S8V_STORE(i)                                                                               \
    if (mr > i) {                                                                                  \
        __m512i cr = _mm512_set1_epi32(corr[i]);                                                   \
        s8v_store_row(dq ? NULL : C + (size_t)i * ldc, _mm512_sub_epi32(c##i##0, cr), _mm512_sub_epi32(c##i##1, cr), k0, k1, dq, \
                      i, ldc);                                                                     \
    }

VNNI_INLINE void s8v_block(const int mr, int Kp, const int8_t *A, size_t lda, const uint8_t *w, size_t pf,
                           const int32_t *corr, int32_t *C, size_t ldc, int nc, const s8v_deq_t *dq) {
    __m512i c00 = _mm512_setzero_si512(), c01 = c00, c10 = c00, c11 = c00, c20 = c00, c21 = c00, c30 = c00,
            c31 = c00, c40 = c00, c41 = c00, c50 = c00, c51 = c00, c60 = c00, c61 = c00, c70 = c00, c71 = c00,
            c80 = c00, c81 = c00, c90 = c00, c91 = c00, c100 = c00, c101 = c00, c110 = c00, c111 = c00;
    const int32_t *a0 = (const int32_t *)A, *a1 = (const int32_t *)(A + lda), *a2 = (const int32_t *)(A + 2 * lda),
                  *a3 = (const int32_t *)(A + 3 * lda), *a4 = (const int32_t *)(A + 4 * lda),
                  *a5 = (const int32_t *)(A + 5 * lda), *a6 = (const int32_t *)(A + 6 * lda),
                  *a7 = (const int32_t *)(A + 7 * lda), *a8 = (const int32_t *)(A + 8 * lda),
                  *a9 = (const int32_t *)(A + 9 * lda), *a10 = (const int32_t *)(A + 10 * lda),
                  *a11 = (const int32_t *)(A + 11 * lda);
    for (int t = 0; t < Kp / 4; t++) {
        const uint8_t *wt = w + (size_t)t * 128;
        if (pf) { /* a later panel's two lines of this quad, into L2 */
            _mm_prefetch((const char *)(wt + pf), _MM_HINT_T1);
            _mm_prefetch((const char *)(wt + pf + 64), _MM_HINT_T1);
        }
        __m512i w0 = _mm512_load_si512((const void *)wt), w1 = _mm512_load_si512((const void *)(wt + 64));
        S8V_ROW(0) S8V_ROW(1) S8V_ROW(2) S8V_ROW(3) S8V_ROW(4) S8V_ROW(5)
        S8V_ROW(6) S8V_ROW(7) S8V_ROW(8) S8V_ROW(9) S8V_ROW(10) S8V_ROW(11)
    }
    __mmask16 k0 = nc >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << nc) - 1);
    __mmask16 k1 = nc >= 32 ? (__mmask16)0xFFFF : nc > 16 ? (__mmask16)((1u << (nc - 16)) - 1) : (__mmask16)0;
    S8V_STORE(0) S8V_STORE(1) S8V_STORE(2) S8V_STORE(3) S8V_STORE(4) S8V_STORE(5)
    S8V_STORE(6) S8V_STORE(7) S8V_STORE(8) S8V_STORE(9) S8V_STORE(10) S8V_STORE(11)
}

/* One panel (nc <= 32 columns) for M rows: row blocks of VMR, then the remainder. dq0 NULL: int32
 * into C; else floats into dq0->out, its pointers at row 0 and this panel's first column. */
VNNI_TARGET static void s8v_panel(int M, int Kp, const int8_t *A, size_t lda, const uint8_t *w, size_t pf,
                                  const int32_t *corr, int32_t *C, size_t ldc, int nc, const s8v_deq_t *dq0) {
    s8v_deq_t d;
    const s8v_deq_t *dq = dq0 ? &d : NULL;
    if (dq0) d = *dq0;
    int m = 0;
    for (; m + VMR <= M; m += VMR) {
        if (dq0) d.out = dq0->out + (size_t)m * ldc, d.scale_a = dq0->scale_a + m;
        s8v_block(VMR, Kp, A + (size_t)m * lda, lda, w, m == 0 ? pf : 0, corr + m, C ? C + (size_t)m * ldc : NULL,
                  ldc, nc, dq);
    }
    if (m == M) return;
    if (dq0) d.out = dq0->out + (size_t)m * ldc, d.scale_a = dq0->scale_a + m;
    const int8_t *a = A + (size_t)m * lda;
    int32_t *c = C ? C + (size_t)m * ldc : NULL;
    size_t p = m == 0 ? pf : 0;
    switch (M - m) {
#define S8V_CASE(r)                                                                                \
    case r: s8v_block(r, Kp, a, lda, w, p, corr + m, c, ldc, nc, dq); break;
        S8V_CASE(11) S8V_CASE(10) S8V_CASE(9) S8V_CASE(8) S8V_CASE(7) S8V_CASE(6)
        S8V_CASE(5) S8V_CASE(4) S8V_CASE(3) S8V_CASE(2) S8V_CASE(1)
#undef S8V_CASE
    default: break;
    }
}

/* 128 * sum_k A[m][k] for each row (the u8 shift of the weights, taken back out). */
static void s8v_corr(int32_t *corr, const int8_t *A, size_t lda, int M, int Kp) {
    for (int m = 0; m < M; m++) {
        const int8_t *r = A + (size_t)m * lda;
        __m256i acc = _mm256_setzero_si256();
        int k = 0;
        for (; k + 32 <= Kp; k += 32) { /* sign-extended to int16 and summed in pairs: exact */
            __m256i v = _mm256_loadu_si256((const __m256i *)(r + k));
            __m256i lo = _mm256_cvtepi8_epi16(_mm256_castsi256_si128(v)), hi = _mm256_cvtepi8_epi16(_mm256_extracti128_si256(v, 1));
            acc = _mm256_add_epi32(acc, _mm256_madd_epi16(_mm256_add_epi16(lo, hi), _mm256_set1_epi16(1)));
        }
        int32_t s[8];
        _mm256_storeu_si256((__m256i *)s, acc);
        int32_t sum = s[0] + s[1] + s[2] + s[3] + s[4] + s[5] + s[6] + s[7];
        for (; k < Kp; k++) sum += r[k];
        corr[m] = 128 * sum;
    }
}

#define S8V_PF 2          /* panels ahead that the first row block prefetches (into L2) */
#define S8V_MAX_CHUNK 256 /* rows per call of the panel loop (their corrections on the stack) */

VNNI_TARGET static void s8v_run(int32_t *C, const int8_t *A, const s8v_head_t *h, const uint8_t *w, int M,
                                const s8v_deq_t *dq) {
    const int N = h->N, Kp = h->Kp, panels = (N + VNR - 1) / VNR;
    const size_t lda = (size_t)Kp, ldc = (size_t)N, pstride = (size_t)VNR * Kp;
    /* rows per chunk: their activations (mc x Kp bytes) at most ~96 KB, a multiple of VMR */
    int mc = (int)((96u << 10) / (size_t)Kp) / VMR * VMR;
    if (mc < VMR) mc = VMR;
    if (mc > S8V_MAX_CHUNK) mc = S8V_MAX_CHUNK / VMR * VMR;
    int threads = kernels_get_num_threads();
    double work = (double)M * N * Kp;
    if (threads > panels) threads = panels;
    if (work < 2e6) threads = 1;
    int32_t corr[S8V_MAX_CHUNK];
    for (int m0 = 0; m0 < M; m0 += mc) {
        int mr = M - m0 < mc ? M - m0 : mc;
        const int8_t *a = A + (size_t)m0 * lda;
        int32_t *c = C ? C + (size_t)m0 * ldc : NULL;
        s8v_corr(corr, a, lda, mr, Kp);
#define S8V_PANEL(p)                                                                               \
    do {                                                                                           \
        int n0 = (p) * VNR, nc = N - n0 < VNR ? N - n0 : VNR;                                      \
        s8v_deq_t dp;                                                                              \
        if (dq)                                                                                    \
            dp = (s8v_deq_t){dq->out + (size_t)m0 * ldc + n0, dq->scale_a + m0, dq->scale_w + n0,  \
                             dq->bias ? dq->bias + n0 : NULL, dq->relu};                           \
        s8v_panel(mr, Kp, a, lda, w + (size_t)(p) * pstride, (p) + S8V_PF < panels ? S8V_PF * pstride : 0, corr, \
                  c ? c + n0 : NULL, ldc, nc, dq ? &dp : NULL);                                    \
    } while (0)
        if (threads <= 1) {
            for (int p = 0; p < panels; p++) S8V_PANEL(p);
        } else {
            /* panels taken in turn, about 8 chunks per thread */
#pragma omp parallel for num_threads(threads) schedule(dynamic, kernels_chunk(panels, threads, 8))
            for (int p = 0; p < panels; p++) S8V_PANEL(p);
        }
#undef S8V_PANEL
    }
}

int gemm_s8v_forward(int32_t *C, const int8_t *A, const void *pk, int M) {
    s8v_head_t h;
    memcpy(&h, pk, sizeof h);
    if (h.magic != S8V_MAGIC) return -1;
    if (M > 0) s8v_run(C, A, &h, (const uint8_t *)pk + S8V_HEAD, M, NULL);
    return 0;
}

int gemm_s8v_forward_deq(float *out, const int8_t *A, const void *pk, int M, const float *scale_a,
                         const float *scale_w, const float *bias, int relu) {
    s8v_head_t h;
    memcpy(&h, pk, sizeof h);
    if (h.magic != S8V_MAGIC) return -1;
    s8v_deq_t dq = {out, scale_a, scale_w, bias, relu != 0};
    if (M > 0) s8v_run(NULL, A, &h, (const uint8_t *)pk + S8V_HEAD, M, &dq);
    return 0;
}
