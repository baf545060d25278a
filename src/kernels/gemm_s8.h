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

#endif
