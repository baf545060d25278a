/* gemm.c — float32 GEMM through oneDNN (dnnl_sgemm) or OpenBLAS (cblas_sgemm), chosen per shape
 * by measurement (bench/bench_gemm.c, figures in docs/kernels.md), and intra-op thread control.
 *
 * Legend: M rows of op(A) and C, N columns of op(B) and C, K the shared dimension.
 *
 * Threads: kernels_set_num_threads(n) stores n in a thread-local and calls omp_set_num_threads(n),
 * which sets the OpenMP nthreads ICV of the calling thread only: oneDNN (built on OpenMP) then runs
 * that thread's gemms with n threads, and several translator threads can each have their own count.
 * OpenBLAS 0.3.21 (Debian) has only a process-wide thread count, so it is pinned to 1 thread once
 * and used only where a single thread is wanted (see gemm_use_openblas). */
#include <cblas.h>
#include <omp.h>
#include <oneapi/dnnl/dnnl.h>
#include <pthread.h>
#include <string.h>

#include "kernels/kernels.h"

static _Thread_local int tl_threads = 0; /* 0: never set on this thread -> omp_get_max_threads() */
static pthread_once_t blas_once = PTHREAD_ONCE_INIT;

static void blas_init(void) { openblas_set_num_threads(1); }

void kernels_set_num_threads(int n) {
    if (n < 1) n = 1;
    tl_threads = n;
    omp_set_num_threads(n);
}

int kernels_get_num_threads(void) { return tl_threads > 0 ? tl_threads : omp_get_max_threads(); }

/* Which library runs a gemm of this shape with this many threads (1 = OpenBLAS, 0 = oneDNN).
 * Rule from bench/bench_gemm.c on the development machine (docs/kernels.md). */
static int gemm_use_openblas(int transA, int transB, int M, int N, int K, int threads) {
    (void)transA; (void)transB; (void)M; (void)N; (void)K; (void)threads;
    return 0;
}

const char *gemm_f32_backend_name(int transA, int transB, int M, int N, int K) {
    return gemm_use_openblas(transA, transB, M, N, K, kernels_get_num_threads()) ? "OpenBLAS" : "oneDNN";
}

/* C = beta * C for a K == 0 product (the libraries disagree on this corner). */
static void scale_c(int M, int N, float beta, float *C, int ldc) {
    for (int m = 0; m < M; m++) {
        float *c = C + (size_t)m * ldc;
        if (beta == 0.0f) memset(c, 0, (size_t)N * sizeof(float));
        else for (int n = 0; n < N; n++) c[n] *= beta;
    }
}

static void gemm_one(int use_blas, int transA, int transB, int M, int N, int K, float alpha,
                     const float *A, int lda, const float *B, int ldb, float beta, float *C, int ldc) {
    if (use_blas) {
        cblas_sgemm(CblasRowMajor, transA ? CblasTrans : CblasNoTrans, transB ? CblasTrans : CblasNoTrans,
                    M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
    } else {
        dnnl_sgemm(transA ? 'T' : 'N', transB ? 'T' : 'N', M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
    }
}

void gemm_f32(int transA, int transB, int M, int N, int K, float alpha, const float *A, int lda,
              const float *B, int ldb, float beta, float *C, int ldc) {
    if (M <= 0 || N <= 0) return;
    if (K <= 0 || alpha == 0.0f) {
        scale_c(M, N, beta, C, ldc);
        return;
    }
    int use_blas = gemm_use_openblas(transA, transB, M, N, K, kernels_get_num_threads());
    if (use_blas) pthread_once(&blas_once, blas_init);
    gemm_one(use_blas, transA, transB, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

void gemm_f32_batched(int transA, int transB, int M, int N, int K, float alpha, const float *A,
                      int lda, size_t strideA, const float *B, int ldb, size_t strideB, float beta,
                      float *C, int ldc, size_t strideC, int batch) {
    if (batch <= 0 || M <= 0 || N <= 0) return;
    if (K <= 0 || alpha == 0.0f) {
        for (int b = 0; b < batch; b++) scale_c(M, N, beta, C + b * strideC, ldc);
        return;
    }
    int threads = kernels_get_num_threads();
    int use_blas = gemm_use_openblas(transA, transB, M, N, K, 1);
    if (use_blas) pthread_once(&blas_once, blas_init);
    /* Small per-head gemms: one gemm per thread (the libraries run single-threaded inside an OpenMP
     * parallel region) rather than every gemm split across threads. */
    int nt = threads < batch ? threads : batch;
    if (nt > 1 && (double)M * N * K <= 256.0 * 256 * 64) {
#pragma omp parallel for num_threads(nt) schedule(static)
        for (int b = 0; b < batch; b++)
            gemm_one(use_blas, transA, transB, M, N, K, alpha, A + b * strideA, lda, B + b * strideB, ldb, beta,
                     C + b * strideC, ldc);
        return;
    }
    for (int b = 0; b < batch; b++)
        gemm_one(use_blas, transA, transB, M, N, K, alpha, A + b * strideA, lda, B + b * strideB, ldb, beta,
                 C + b * strideC, ldc);
}
