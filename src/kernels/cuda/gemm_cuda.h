/*
 * gemm_cuda.h — matrix products on the GPU (cuBLASLt), row-major as kernels.h's gemm_f32
 * (built only with `make CUDA=1`). Pointers are device pointers; stream a cudaStream_t (NULL: the
 * default stream). Each returns 0, or -1 with tern_cuda_gemm_last_error() saying why.
 */
#ifndef TERN_GEMM_CUDA_H
#define TERN_GEMM_CUDA_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum { TERN_CUDA_F32 = 0, TERN_CUDA_F16 = 1, TERN_CUDA_BF16 = 2 } tern_cuda_dtype_t;

/* A cuBLASLt handle and its device workspace (one per stream, as a translator owns one). */
typedef struct tern_cuda_gemm tern_cuda_gemm_t;
int tern_cuda_gemm_create(tern_cuda_gemm_t **g, size_t workspace_bytes);
void tern_cuda_gemm_free(tern_cuda_gemm_t *g);
const char *tern_cuda_gemm_last_error(void);

/* C[M, N] (float32) = alpha op(A) op(B) + beta C; A and B of dtype (float32 without TF32; float16
 * and bfloat16 accumulate in float32), lda/ldb/ldc their row strides as stored. */
int tern_cuda_gemm(tern_cuda_gemm_t *g, tern_cuda_dtype_t dtype, int transA, int transB, int M, int N, int K,
                   float alpha, const void *A, int lda, const void *B, int ldb, float beta, float *C, int ldc,
                   void *stream);
/* C[M, N] (int32) = A[M, K] (int8) W[N, K]^T (int8), exact (K a multiple of 4: cuBLASLt's int8
 * kernels' requirement); the dequantization is tern_cuda_dequant's. */
int tern_cuda_gemm_s8(tern_cuda_gemm_t *g, int M, int N, int K, const int8_t *A, const int8_t *W, int32_t *C,
                      void *stream);

#ifdef __cplusplus
}
#endif

#endif
