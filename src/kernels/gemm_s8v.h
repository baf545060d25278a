/*
 * gemm_s8v.h — the int8 linear layers' exact product on weights packed once, with AVX512_VNNI
 * (gemm_s8v.c): what the Transformer's packed int8 layers run where the CPU has VNNI and
 * TERN_MAX_CPU_ISA allows it (linear.c decides; the caller must not call it elsewhere).
 *
 * Legend: M rows of activations and outputs, N output features, K input features.
 */
#ifndef TERN_KERNELS_GEMM_S8V_H
#define TERN_KERNELS_GEMM_S8V_H

#include <stddef.h>
#include <stdint.h>

/* Largest K for which every int32 sum is exact (K * 255 * 128 < 2^31, K rounded up to 4). */
#define GEMM_S8V_MAX_K 65532

/* gemm_s8v_size: bytes of the packed form of Q (N, K) int8 row-major (header + about N * K bytes),
 * 0 when K > GEMM_S8V_MAX_K or a size is not positive. gemm_s8v_pack: buf 64-byte aligned,
 * read-only after, shareable by threads; 0 or -1. gemm_s8v_dims: N and K of a packed weight (-1:
 * not one). gemm_s8v_a_stride: the activation rows' stride in bytes (K rounded up to 4).
 * gemm_s8v_forward: C (M, N) int32, row stride N, C[m, n] = sum_k A[m, k] Q[n, k] exactly, A signed
 * bytes (M rows of gemm_s8v_a_stride(K), 64-byte aligned base, pad bytes 0); uses the calling
 * thread's OpenMP team (kernels_set_num_threads); -1 when pk is not a packed weight.
 * gemm_s8v_forward_deq: the same sums dequantized in the store, out (M, N) float:
 * out[m, n] = float(sum) * (1 / scale_a[m]) / scale_w[n] + bias[n] (bias may be NULL), each
 * operation rounded separately in this order (linear.c's dequantize_rows); relu: then max(v, 0). */
size_t gemm_s8v_size(int N, int K);
int gemm_s8v_pack(void *buf, const int8_t *Q, int N, int K);
int gemm_s8v_dims(const void *pk, int *N, int *K);
size_t gemm_s8v_a_stride(int K);
/* Elements [k0, k1) of weight row n (0 <= n < N) as the int8 values packed (a tied embedding's row
 * read from the output projection's packed copy); -1: not a packed weight, or out of range. */
int gemm_s8v_row(const void *pk, int n, int k0, int k1, int8_t *out);
int gemm_s8v_forward(int32_t *C, const int8_t *A, const void *pk, int M);
int gemm_s8v_forward_deq(float *out, const int8_t *A, const void *pk, int M, const float *scale_a,
                         const float *scale_w, const float *bias, int relu);

#endif
