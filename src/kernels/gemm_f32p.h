/*
 * gemm_f32p.h — Tern's own packed float32 linear layer in AVX2 + FMA (gemm_f32p.c): what
 * gemm_packed.h runs where oneDNN has no blocked (brgemm) float32 matmul, i.e. on AVX2-only CPUs
 * (oneDNN 2.6 offers brgemm float32 only from AVX512_CORE up; docs/kernels.md).
 *
 * Layout ("panels"): W (N, K) row-major is stored as ceil(N / 16) panels of 16 output features;
 * panel p holds, for k = 0 .. K-1, the 16 weights W[16p .. 16p+15][k] contiguously (K x 16 floats,
 * k-major), the columns past N zero. So W[n, k] lies at float offset
 *   f32p_off_n(n, K) + f32p_off_k(k)   with off_n = (n / 16) * 16 * K + n % 16, off_k = 16 * k.
 *
 * Sums: every output is one fused multiply-add chain over k ascending, started at 0, then + bias,
 * then max(x, 0) when relu: the same bits whatever M, the row's position, the tile shape or the
 * thread count (tests/c/test_kernels.c checks them against a scalar fmaf loop, bit for bit).
 *
 * Legend: M rows of activations, N output features, K input features.
 */
#ifndef TERN_KERNELS_GEMM_F32P_H
#define TERN_KERNELS_GEMM_F32P_H

#include <stddef.h>
#include <stdint.h>

#define F32P_NR 16 /* output features per panel */

/* Floats of the panels of an (N, K) weight (N rounded up to 16). */
size_t f32p_panel_floats(int N, int K);

/* Packs W (N, K) row-major into P (f32p_panel_floats(N, K) floats, 32-byte aligned). */
void f32p_pack(float *P, const float *W, int N, int K);

/* out (M, N) = inp (M, K) . W^T [+ bias] [then ReLU], W packed in P. bias: NULL, or N floats
 * followed by zeros up to a multiple of 16 (read in whole panels). Rows of inp and out are
 * contiguous (leading dimensions K and N). The panels are split across `threads` OpenMP threads
 * (1, or a small product: no parallel region). */
void f32p_forward(float *out, const float *inp, const float *P, const float *bias, int relu, int M, int N, int K,
                  int threads);

/* "AVX-512" or "AVX2": the tiles f32p_forward runs on this CPU (full-width AVX-512 allowed by
 * TERN_MAX_CPU_ISA, not Zen 4's halves, and TERN_F32P_AVX2 unset: the 512-bit tiles; the same
 * bits either way). */
const char *f32p_tiles_name(void);

/* Where W[n, k] lies in P (floats): off_n(n) + off_k(k). */
static inline int64_t f32p_off_n(int n, int K) {
    return (int64_t)(n / F32P_NR) * F32P_NR * K + n % F32P_NR;
}
static inline int64_t f32p_off_k(int k) { return (int64_t)k * F32P_NR; }

#endif
