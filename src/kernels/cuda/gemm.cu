/*
 * gemm.cu — matrix products on the GPU through cuBLASLt, in Tern's row-major convention
 * (kernels.h: C[M, N] = alpha op(A) op(B) + beta C; weights stored [N, K]).
 *
 * cuBLASLt is column-major: a row-major X [r, c] is the column-major X^T [c, r]. So the row-major
 * product C = op(A) op(B) is computed as the column-major C^T = op(B)^T op(A)^T: the operands
 * swapped, each keeping its transpose flag, m = N and n = M. float32 runs in CUBLAS_COMPUTE_32F
 * (no TF32: the CPU's float32 results are the reference), float16 and bfloat16 inputs accumulate
 * in float32 with float32 output (what the Transformer's mixed precision needs). int8: C (int32)
 * = A (int8 [M, K]) W^T (int8 [N, K]), the TN form cuBLASLt's int8 kernels take; its epilogue is
 * tern_cuda_dequant.
 */
#include <cublasLt.h>
#include <cuda_runtime.h>

#include <stdio.h>
#include <stdlib.h>

#include "kernels/cuda/gemm_cuda.h"

struct tern_cuda_gemm {
    cublasLtHandle_t lt;
    void *workspace; /* device, ws_bytes */
    size_t ws_bytes;
};

static __thread char gemm_error[512];
extern "C" const char *tern_cuda_gemm_last_error(void) { return gemm_error; }

static int lt_fail(const char *what, cublasStatus_t st) {
    snprintf(gemm_error, sizeof gemm_error, "%s: cuBLASLt status %d", what, (int)st);
    return -1;
}

extern "C" int tern_cuda_gemm_create(tern_cuda_gemm_t **out, size_t workspace_bytes) {
    *out = NULL;
    tern_cuda_gemm_t *g = (tern_cuda_gemm_t *)calloc(1, sizeof *g);
    if (!g) return snprintf(gemm_error, sizeof gemm_error, "out of memory"), -1;
    cublasStatus_t st = cublasLtCreate(&g->lt);
    if (st != CUBLAS_STATUS_SUCCESS) {
        free(g);
        return lt_fail("cublasLtCreate", st);
    }
    if (workspace_bytes && cudaMalloc(&g->workspace, workspace_bytes) != cudaSuccess) {
        cudaGetLastError();
        cublasLtDestroy(g->lt);
        free(g);
        snprintf(gemm_error, sizeof gemm_error, "cudaMalloc of the %zu-byte GEMM workspace failed", workspace_bytes);
        return -1;
    }
    g->ws_bytes = workspace_bytes;
    *out = g;
    return 0;
}

extern "C" void tern_cuda_gemm_free(tern_cuda_gemm_t *g) {
    if (!g) return;
    if (g->workspace) cudaFree(g->workspace);
    cublasLtDestroy(g->lt);
    free(g);
}

/* One cublasLtMatmul: column-major D[m, n] = alpha op(a)[m, k] op(b)[k, n] + beta D, a and b of
 * type in_t (lda, ldb: their stored column strides), D of out_t. */
static int lt_matmul(tern_cuda_gemm_t *g, cublasComputeType_t compute, cudaDataType_t scale_t, cudaDataType_t in_t,
                     cudaDataType_t out_t, int ta, int tb, int m, int n, int k, const void *alpha, const void *a,
                     int lda, const void *b, int ldb, const void *beta, void *d, int ldd, cudaStream_t stream) {
    cublasLtMatmulDesc_t op = NULL;
    cublasLtMatrixLayout_t la = NULL, lb = NULL, ld = NULL;
    cublasLtMatmulPreference_t pref = NULL;
    cublasOperation_t opa = ta ? CUBLAS_OP_T : CUBLAS_OP_N, opb = tb ? CUBLAS_OP_T : CUBLAS_OP_N;
    int rc = -1;
    cublasStatus_t st;
    cublasLtMatmulHeuristicResult_t heur;
    int found = 0;
#define LT(call, what)                                                                                                 \
    if ((st = (call)) != CUBLAS_STATUS_SUCCESS) {                                                                      \
        lt_fail(what, st);                                                                                             \
        goto done;                                                                                                     \
    }
    LT(cublasLtMatmulDescCreate(&op, compute, scale_t), "cublasLtMatmulDescCreate");
    LT(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSA, &opa, sizeof opa), "TRANSA");
    LT(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSB, &opb, sizeof opb), "TRANSB");
    LT(cublasLtMatrixLayoutCreate(&la, in_t, ta ? k : m, ta ? m : k, lda), "layout A");
    LT(cublasLtMatrixLayoutCreate(&lb, in_t, tb ? n : k, tb ? k : n, ldb), "layout B");
    LT(cublasLtMatrixLayoutCreate(&ld, out_t, m, n, ldd), "layout D");
    LT(cublasLtMatmulPreferenceCreate(&pref), "preference");
    LT(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &g->ws_bytes,
                                            sizeof g->ws_bytes),
       "workspace preference");
    LT(cublasLtMatmulAlgoGetHeuristic(g->lt, op, la, lb, ld, ld, pref, 1, &heur, &found), "heuristic");
    if (found == 0) {
        snprintf(gemm_error, sizeof gemm_error, "cuBLASLt has no algorithm for this product (m %d n %d k %d)", m, n, k);
        goto done;
    }
    LT(cublasLtMatmul(g->lt, op, alpha, a, la, b, lb, beta, d, ld, d, ld, &heur.algo, g->workspace, g->ws_bytes,
                      stream),
       "cublasLtMatmul");
    rc = 0;
done:
#undef LT
    if (pref) cublasLtMatmulPreferenceDestroy(pref);
    if (ld) cublasLtMatrixLayoutDestroy(ld);
    if (lb) cublasLtMatrixLayoutDestroy(lb);
    if (la) cublasLtMatrixLayoutDestroy(la);
    if (op) cublasLtMatmulDescDestroy(op);
    return rc;
}

extern "C" int tern_cuda_gemm(tern_cuda_gemm_t *g, tern_cuda_dtype_t dtype, int transA, int transB, int M, int N,
                              int K, float alpha, const void *A, int lda, const void *B, int ldb, float beta, float *C,
                              int ldc, void *stream) {
    if (!g || M < 0 || N < 0 || K < 0) return snprintf(gemm_error, sizeof gemm_error, "tern_cuda_gemm: bad arguments"), -1;
    if (M == 0 || N == 0) return 0;
    cudaDataType_t in_t = dtype == TERN_CUDA_F16 ? CUDA_R_16F : dtype == TERN_CUDA_BF16 ? CUDA_R_16BF : CUDA_R_32F;
    /* row-major C = op(A) op(B)  <=>  column-major C^T = op(B)^T op(A)^T */
    return lt_matmul(g, CUBLAS_COMPUTE_32F, CUDA_R_32F, in_t, CUDA_R_32F, transB, transA, N, M, K, &alpha, B, ldb, A,
                     lda, &beta, C, ldc, (cudaStream_t)stream);
}

extern "C" int tern_cuda_gemm_s8(tern_cuda_gemm_t *g, int M, int N, int K, const int8_t *A, const int8_t *W,
                                 int32_t *C, void *stream) {
    if (!g || M < 0 || N < 0 || K < 0) return snprintf(gemm_error, sizeof gemm_error, "tern_cuda_gemm_s8: bad arguments"), -1;
    if (K % 4 != 0)
        return snprintf(gemm_error, sizeof gemm_error, "tern_cuda_gemm_s8: K (%d) must be a multiple of 4", K), -1;
    if (M == 0 || N == 0) return 0;
    int32_t one = 1, zero = 0;
    /* column-major C^T [N, M] = W [N, K] (stored as W^T: transposed back) times A^T [K, M] */
    return lt_matmul(g, CUBLAS_COMPUTE_32I, CUDA_R_32I, CUDA_R_8I, CUDA_R_32I, 1, 0, N, M, K, &one, W, K, A, K, &zero,
                     C, N, (cudaStream_t)stream);
}
