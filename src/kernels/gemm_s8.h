/*
 * gemm_s8.h — exact signed int8 GEMM in AVX2 (gemm_s8.c): the int8 linear layers' product on CPUs
 * whose oneDNN int8 GEMM would saturate (no VNNI, or ONEDNN_MAX_CPU_ISA below it).
 *
 * Legend: M rows of A and C, N rows of B and columns of C, K the shared dimension.
 */
#ifndef TERN_KERNELS_GEMM_S8_H
#define TERN_KERNELS_GEMM_S8_H

#include <stddef.h>
#include <stdint.h>

/* Largest K for which the int32 accumulation is exact (K * 128 * 128 < 2^31). */
#define GEMM_S8_MAX_K 131071

/* C[m, n] = sum_k A[m, k] * B[n, k] exactly, A (M, K) and B (N, K) int8 with row strides lda,
 * ldb, C (M, N) int32 with row stride ldc. b_has_min: B holds a -128 (gemm_s8_has_min), which the
 * fast kernel cannot multiply; the 16-bit kernel then runs. K <= GEMM_S8_MAX_K. Uses the OpenMP
 * team size set by kernels_set_num_threads() on the calling thread. */
void gemm_s8s8s32(int M, int N, int K, const int8_t *A, int lda, const int8_t *B, int ldb, int32_t *C, int ldc,
                  int b_has_min);

/* Whether any of the n bytes of B is -128. */
int gemm_s8_has_min(const int8_t *B, size_t n);

/* The same exact product on weights packed once (gemm_s8.c, "packed weights"): Q (N, K) int8
 * row-major packed into panels of 16 columns, multiplied in int16 (vpmaddwd, 32-bit sums, any
 * byte including -128) with int16 activation rows of gemm_s8p_a_stride(K) elements (K rounded up
 * to even; the pad element may hold anything: its weight is 0).
 * gemm_s8p_size: bytes of the packed form (header + about N * K bytes), 0 when K > GEMM_S8_MAX_K
 * or a size is not positive. gemm_s8p_pack: buf 64-byte aligned, read-only after, shareable by
 * threads; returns 0 or -1. gemm_s8p_forward: C (M, N) int32, row stride N = sum_k A[m, k] Q[n, k]
 * exactly; uses the calling thread's OpenMP team (kernels_set_num_threads); -1 when pk is not a
 * packed weight. gemm_s8p_dims: N and K of a packed weight (-1: not one). */
size_t gemm_s8p_size(int N, int K);
int gemm_s8p_pack(void *buf, const int8_t *Q, int N, int K);
int gemm_s8p_forward(int32_t *C, const int16_t *A, const void *pk, int M);
int gemm_s8p_dims(const void *pk, int *N, int *K);
/* gemm_s8p_forward with the int8 linear layer's dequantization fused into the store: out (M, N)
 * float, row stride N, out[m, n] = float(sum) * (1 / scale_a[m]) / scale_w[n] + bias[n] (bias may
 * be NULL), each operation rounded separately in this order (as linear.c's dequantize_rows); relu:
 * then max(out, 0) as _mm256_max_ps(v, 0) gives it (activation_forward's ReLU: 0 for NaN). */
int gemm_s8p_forward_deq(float *out, const int16_t *A, const void *pk, int M, const float *scale_a,
                         const float *scale_w, const float *bias, int relu);
size_t gemm_s8p_a_stride(int K);
/* Elements [k0, k1) of weight row n of a gemm_s8p packed weight (as gemm_s8v_row). */
int gemm_s8p_row(const void *pk, int n, int k0, int k1, int8_t *out);

#endif
