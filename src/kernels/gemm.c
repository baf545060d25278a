/* gemm.c — float32 GEMM through oneDNN (dnnl_sgemm), the packed float32 linear layers
 * (gemm_packed.h) and intra-op thread control.
 *
 * Legend: M rows of op(A) and C, N columns of op(B) and C, K the shared dimension.
 *
 * Threads: kernels_set_num_threads(n) stores n in a thread-local and calls omp_set_num_threads(n),
 * which sets the OpenMP nthreads ICV of the calling thread only: oneDNN (built on OpenMP) then runs
 * that thread's gemms with n threads, and several translator threads can each have their own count.
 * (OpenBLAS was once a second backend chosen per shape; measured slower or equal on every shape the
 * models run, bench/bench_gemm.c, it is no longer called by the library.) */
#include <omp.h>
#include <oneapi/dnnl/dnnl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#if defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>
#endif

#include "base/base.h"
#include "kernels/extcheck.h"
#include "kernels/cpu_isa.h"
#include "kernels/gemm_f32p.h"
#include "kernels/gemm_packed.h"
#include "kernels/kernels.h"

static _Thread_local int tl_threads = 0; /* 0: never set on this thread -> omp_get_max_threads() */
void kernels_set_num_threads(int n) {
    if (n < 1) n = 1;
    tl_threads = n;
    omp_set_num_threads(n);
}

int kernels_get_num_threads(void) { return tl_threads > 0 ? tl_threads : omp_get_max_threads(); }

/* The library that runs gemm_f32 for a shape: oneDNN for every shape. */
const char *gemm_f32_backend_name(int transA, int transB, int M, int N, int K) {
    (void)transA, (void)transB, (void)M, (void)N, (void)K;
    return "oneDNN";
}

/* C = beta * C for a K == 0 product (the libraries disagree on this corner). */
static void scale_c(int M, int N, float beta, float *C, int ldc) {
    for (int m = 0; m < M; m++) {
        float *c = C + (size_t)m * ldc;
        if (beta == 0.0f) memset(c, 0, (size_t)N * sizeof(float));
        else for (int n = 0; n < N; n++) c[n] *= beta;
    }
}

/* Floating-point operations of every gemm_f32 / gemm_f32_batched call while counting is on (benches). */
static atomic_int g_count_flops;
static atomic_ullong g_flops;
void gemm_count_flops(int on) {
    atomic_store(&g_flops, 0);
    atomic_store(&g_count_flops, on);
}
unsigned long long gemm_flops_counted(void) { return atomic_load(&g_flops); }

static void gemm_one(int transA, int transB, int M, int N, int K, float alpha,
                     const float *A, int lda, const float *B, int ldb, float beta, float *C, int ldc) {
    if (atomic_load_explicit(&g_count_flops, memory_order_relaxed))
        atomic_fetch_add_explicit(&g_flops, 2ull * (unsigned long long)M * N * K, memory_order_relaxed);
    /* op(A) is M x K: stored M x K (K x M when transposed); op(B) K x N: stored K x N (N x K) */
    extcheck_2d("gemm_f32", "A", A, transA ? K : M, transA ? M : K, lda, sizeof(float));
    extcheck_2d("gemm_f32", "B", B, transB ? N : K, transB ? K : N, ldb, sizeof(float));
    extcheck_2d("gemm_f32", "C", C, M, N, ldc, sizeof(float));
    dnnl_sgemm(transA ? 'T' : 'N', transB ? 'T' : 'N', M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

void gemm_f32(int transA, int transB, int M, int N, int K, float alpha, const float *A, int lda,
              const float *B, int ldb, float beta, float *C, int ldc) {
    if (M <= 0 || N <= 0) return;
    if (K <= 0 || alpha == 0.0f) {
        scale_c(M, N, beta, C, ldc);
        return;
    }
    gemm_one(transA, transB, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

/* ------------------------------------------------------------ small products (gemm_f32_small)
 *
 * For the per-(sentence, head) products of training attention (a few dozen rows and columns, K
 * the head size), where dnnl_sgemm's fixed cost per call is larger than the arithmetic (measured
 * 2-12 µs for 16-40 x 16-40 x 64, 10-80 GFLOP/s; this kernel: a fraction of it). Register tiles of
 * 4 rows x 16 columns, K in order with FMAs (float sums, as a GEMM library's), masked column tails;
 * op(B) transposed (transB) is first copied to a K x nc panel on the stack, nc columns at a time. */
#if defined(__AVX2__) && defined(__FMA__)
#define SMALL_PANEL 8192 /* floats of the transposed-B panel on the stack (32 KiB) */

static inline __m256i small_mask(int n) { /* lanes [0, n) of 8 */
    const __m256i idx = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(n), idx);
}

/* One tile: 6 rows of op(A) (row r's element k at a + r·si + k·sk; rows past mr repeat row 0)
 * times columns [0, nr) of Bp (row stride ldb), into acc (12 accumulators: two per row); full:
 * nr == 16 (plain loads), else masked loads of the lanes under nr. */
#define SMALL_MR 6
static inline __attribute__((always_inline)) void small_tile_k(__m256 acc[12], const float *a, size_t si, int mr,
                                                               size_t sk, const float *b, int ldb, int K, int nr,
                                                               __m256i m0, __m256i m1, int full) {
    const float *ar[SMALL_MR];
    for (int r = 0; r < SMALL_MR; r++) ar[r] = a + (r < mr ? (size_t)r * si : 0);
    __m256 c[12];
    for (int i = 0; i < 12; i++) c[i] = _mm256_setzero_ps();
    if (full || nr > 8) {
        for (int k = 0; k < K; k++, b += ldb) {
            __m256 b0 = _mm256_loadu_ps(b), b1 = full ? _mm256_loadu_ps(b + 8) : _mm256_maskload_ps(b + 8, m1);
            size_t o = (size_t)k * sk;
            for (int r = 0; r < SMALL_MR; r++) {
                __m256 x = _mm256_broadcast_ss(ar[r] + o);
                c[2 * r] = _mm256_fmadd_ps(x, b0, c[2 * r]);
                c[2 * r + 1] = _mm256_fmadd_ps(x, b1, c[2 * r + 1]);
            }
        }
    } else {
        for (int k = 0; k < K; k++, b += ldb) {
            __m256 b0 = nr == 8 ? _mm256_loadu_ps(b) : _mm256_maskload_ps(b, m0);
            size_t o = (size_t)k * sk;
            for (int r = 0; r < SMALL_MR; r++) c[2 * r] = _mm256_fmadd_ps(_mm256_broadcast_ss(ar[r] + o), b0, c[2 * r]);
        }
    }
    for (int i = 0; i < 12; i++) acc[i] = c[i];
}

/* dst[k, j] = src[j, k] for j < w, k < K (dst row stride ldd, src row stride lds): 8 x 8 blocks in
 * registers, the edges one by one. */
static void small_transpose(float *dst, int ldd, const float *src, int lds, int w, int K) {
    int j8 = w / 8 * 8, k8 = K / 8 * 8;
    for (int j = 0; j < j8; j += 8) {
        for (int k = 0; k < k8; k += 8) {
            const float *s0 = src + (size_t)j * lds + k;
            __m256 r0 = _mm256_loadu_ps(s0), r1 = _mm256_loadu_ps(s0 + lds), r2 = _mm256_loadu_ps(s0 + 2 * (size_t)lds),
                   r3 = _mm256_loadu_ps(s0 + 3 * (size_t)lds), r4 = _mm256_loadu_ps(s0 + 4 * (size_t)lds),
                   r5 = _mm256_loadu_ps(s0 + 5 * (size_t)lds), r6 = _mm256_loadu_ps(s0 + 6 * (size_t)lds),
                   r7 = _mm256_loadu_ps(s0 + 7 * (size_t)lds);
            __m256 t0 = _mm256_unpacklo_ps(r0, r1), t1 = _mm256_unpackhi_ps(r0, r1), t2 = _mm256_unpacklo_ps(r2, r3),
                   t3 = _mm256_unpackhi_ps(r2, r3), t4 = _mm256_unpacklo_ps(r4, r5), t5 = _mm256_unpackhi_ps(r4, r5),
                   t6 = _mm256_unpacklo_ps(r6, r7), t7 = _mm256_unpackhi_ps(r6, r7);
            __m256 u0 = _mm256_shuffle_ps(t0, t2, 0x44), u1 = _mm256_shuffle_ps(t0, t2, 0xEE),
                   u2 = _mm256_shuffle_ps(t1, t3, 0x44), u3 = _mm256_shuffle_ps(t1, t3, 0xEE),
                   u4 = _mm256_shuffle_ps(t4, t6, 0x44), u5 = _mm256_shuffle_ps(t4, t6, 0xEE),
                   u6 = _mm256_shuffle_ps(t5, t7, 0x44), u7 = _mm256_shuffle_ps(t5, t7, 0xEE);
            float *d0 = dst + (size_t)k * ldd + j;
            _mm256_storeu_ps(d0, _mm256_permute2f128_ps(u0, u4, 0x20));
            _mm256_storeu_ps(d0 + ldd, _mm256_permute2f128_ps(u1, u5, 0x20));
            _mm256_storeu_ps(d0 + 2 * (size_t)ldd, _mm256_permute2f128_ps(u2, u6, 0x20));
            _mm256_storeu_ps(d0 + 3 * (size_t)ldd, _mm256_permute2f128_ps(u3, u7, 0x20));
            _mm256_storeu_ps(d0 + 4 * (size_t)ldd, _mm256_permute2f128_ps(u0, u4, 0x31));
            _mm256_storeu_ps(d0 + 5 * (size_t)ldd, _mm256_permute2f128_ps(u1, u5, 0x31));
            _mm256_storeu_ps(d0 + 6 * (size_t)ldd, _mm256_permute2f128_ps(u2, u6, 0x31));
            _mm256_storeu_ps(d0 + 7 * (size_t)ldd, _mm256_permute2f128_ps(u3, u7, 0x31));
        }
        for (int k = k8; k < K; k++)
            for (int jj = j; jj < j + 8; jj++) dst[(size_t)k * ldd + jj] = src[(size_t)jj * lds + k];
    }
    for (int j = j8; j < w; j++)
        for (int k = 0; k < K; k++) dst[(size_t)k * ldd + j] = src[(size_t)j * lds + k];
}

/* C[0:M, 0:N] = alpha · op(A) · Bp + beta · C, Bp K x N row-major with row stride ldb. */
static void small_tiles(int transA, int M, int N, int K, float alpha, const float *A, int lda, const float *Bp,
                        int ldb, float beta, float *C, int ldc) {
    const __m256 va = _mm256_set1_ps(alpha), vb = _mm256_set1_ps(beta);
    /* element (i, k) of op(A) at A + i·si + k·sk */
    size_t si = transA ? 1 : (size_t)lda, sk = transA ? (size_t)lda : 1;
    for (int j0 = 0; j0 < N; j0 += 16) {
        int nr = N - j0 < 16 ? N - j0 : 16;
        __m256i m0 = small_mask(nr), m1 = small_mask(nr - 8);
        for (int i0 = 0; i0 < M; i0 += SMALL_MR) {
            int mr = M - i0 < SMALL_MR ? M - i0 : SMALL_MR;
            const float *a = A + (size_t)i0 * si;
            __m256 acc[12];
            if (nr == 16) small_tile_k(acc, a, si, mr, sk, Bp + j0, ldb, K, nr, m0, m1, 1);
            else small_tile_k(acc, a, si, mr, sk, Bp + j0, ldb, K, nr, m0, m1, 0);
            for (int r = 0; r < mr; r++) {
                float *c = C + (size_t)(i0 + r) * ldc + j0;
                for (int h = 0; h < 2 && h * 8 < nr; h++) {
                    __m256 v = _mm256_mul_ps(va, acc[2 * r + h]);
                    if (nr - 8 * h >= 8) { /* the 8 lanes are all in C */
                        if (beta != 0.0f) v = _mm256_fmadd_ps(vb, _mm256_loadu_ps(c + 8 * h), v);
                        _mm256_storeu_ps(c + 8 * h, v);
                    } else {
                        __m256i mk = h ? m1 : m0;
                        if (beta != 0.0f) v = _mm256_fmadd_ps(vb, _mm256_maskload_ps(c + 8 * h, mk), v);
                        _mm256_maskstore_ps(c + 8 * h, mk, v);
                    }
                }
            }
        }
    }
}
#endif

void gemm_f32_small(int transA, int transB, int M, int N, int K, float alpha, const float *A, int lda,
                    const float *B, int ldb, float beta, float *C, int ldc) {
#if defined(__AVX2__) && defined(__FMA__)
    if (M > 0 && N > 0 && K > 0 && alpha != 0.0f && (!transB || K * 16 <= SMALL_PANEL)) {
        if (atomic_load_explicit(&g_count_flops, memory_order_relaxed))
            atomic_fetch_add_explicit(&g_flops, 2ull * (unsigned long long)M * N * K, memory_order_relaxed);
        extcheck_2d("gemm_f32_small", "A", A, transA ? K : M, transA ? M : K, lda, sizeof(float));
        extcheck_2d("gemm_f32_small", "B", B, transB ? N : K, transB ? K : N, ldb, sizeof(float));
        extcheck_2d("gemm_f32_small", "C", C, M, N, ldc, sizeof(float));
        float panel[SMALL_PANEL];
        if (!transB) {
            if ((size_t)K * N <= SMALL_PANEL && ldb != N) { /* B's rows next to each other */
                for (int k = 0; k < K; k++) {
                    const float *src = B + (size_t)k * ldb;
                    float *dst = panel + (size_t)k * N;
                    int j = 0;
                    /* inline (the barrier keeps the compiler from making these a memcpy call per row) */
                    for (; j + 8 <= N; j += 8) {
                        _mm256_storeu_ps(dst + j, _mm256_loadu_ps(src + j));
                        __asm__ volatile("" ::: "memory");
                    }
                    for (; j < N; j++) {
                        dst[j] = src[j];
                        __asm__ volatile("" ::: "memory");
                    }
                }
                small_tiles(transA, M, N, K, alpha, A, lda, panel, N, beta, C, ldc);
            } else {
                small_tiles(transA, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
            }
            return;
        }
        int nc = SMALL_PANEL / K / 16 * 16; /* >= 16 */
        for (int j0 = 0; j0 < N; j0 += nc) {
            int w = N - j0 < nc ? N - j0 : nc;
            small_transpose(panel, w, B + (size_t)j0 * ldb, ldb, w, K); /* op(B)[k, j0 + j] = B[j0 + j, k] */
            small_tiles(transA, M, w, K, alpha, A, lda, panel, w, beta, C + j0, ldc);
        }
        return;
    }
#endif
    gemm_f32(transA, transB, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
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
    /* Small per-head gemms: one gemm per thread (the libraries run single-threaded inside an OpenMP
     * parallel region) rather than every gemm split across threads. */
    int nt = threads < batch ? threads : batch;
    if (nt > 1 && (double)M * N * K <= 256.0 * 256 * 64) {
#pragma omp parallel for num_threads(nt) schedule(static)
        for (int b = 0; b < batch; b++)
            gemm_one(transA, transB, M, N, K, alpha, A + b * strideA, lda, B + b * strideB, ldb, beta,
                     C + b * strideC, ldc);
        return;
    }
    for (int b = 0; b < batch; b++)
        gemm_one(transA, transB, M, N, K, alpha, A + b * strideA, lda, B + b * strideB, ldb, beta,
                 C + b * strideC, ldc);
}

/* ------------------------------------------------------------ packed weights (gemm_packed.h)
 *
 * A packed layer: header | weights in the blocked layout oneDNN's brgemm matmul picked for the
 * shape, or, for float32 where oneDNN has no such kernel (oneDNN 2.6 below AVX512_CORE: AVX2-only
 * CPUs, ONEDNN_MAX_CPU_ISA=AVX2), header | Tern's panels (gemm_f32p.h) | the bias padded to the
 * panels (its own copy), run by gemm_f32p.c. oneDNN's kernels: Kernels (matmul primitives) depend on (N, K, M, bias, ReLU, threads), not on the weights:
 * one table, shared by every layer, model and thread, made on first use under a mutex. User-mode
 * scratchpads and per-thread streams and memory objects make concurrent runs of one kernel safe;
 * after the first call of a shape a call allocates nothing. */
typedef struct {
    int N, K, relu;
    int s8;                 /* int8 layer: u8 rows . s8 weights -> s32 (gemm_pack_s8) */
    int tern;               /* float32 in Tern's panels (gemm_f32p.c), not oneDNN's layout */
    const float *bias;      /* oneDNN: the caller's; tern: the padded copy in the buffer, or NULL */
    dnnl_memory_desc_t wmd; /* blocked (K, N) weights */
    size_t wbytes;
} packed_hdr_t;

#define GEMM_PACKED_S8_SMALL_M 32
#define GEMM_PACKED_S8_SMALL_BYTES (4u << 20)
#define PACKED_HDR_BYTES ((sizeof(packed_hdr_t) + 63) & ~(size_t)63)

static pthread_once_t dnnl_once = PTHREAD_ONCE_INIT;
static dnnl_engine_t g_engine;
static int g_engine_ok;

static void dnnl_engine_init(void) { g_engine_ok = dnnl_engine_create(&g_engine, dnnl_cpu, 0) == dnnl_success; }

static int engine_ready(void) {
    pthread_once(&dnnl_once, dnnl_engine_init);
    return g_engine_ok;
}

/* Matmul descriptor of M rows; wmd NULL: let the library choose the weight layout. s8: u8 source,
 * s8 weights, s32 destination (no bias, no ReLU), else float32 throughout. */
static int make_pd(dnnl_primitive_desc_t *pd, int M, int N, int K, const dnnl_memory_desc_t *wmd,
                   int has_bias, int relu, int s8) {
    dnnl_dims_t sd = {M, K}, wd = {K, N}, dd = {M, N}, bd = {1, N};
    dnnl_memory_desc_t smd, wany, dmd, bmd;
    int wmd_given = wmd != NULL;
    if (dnnl_memory_desc_init_by_tag(&smd, 2, sd, s8 ? dnnl_u8 : dnnl_f32, dnnl_ab) != dnnl_success ||
        dnnl_memory_desc_init_by_tag(&dmd, 2, dd, s8 ? dnnl_s32 : dnnl_f32, dnnl_ab) != dnnl_success ||
        dnnl_memory_desc_init_by_tag(&bmd, 2, bd, dnnl_f32, dnnl_ab) != dnnl_success)
        return -1;
    if (!wmd) {
        if (dnnl_memory_desc_init_by_tag(&wany, 2, wd, s8 ? dnnl_s8 : dnnl_f32, dnnl_format_tag_any) != dnnl_success)
            return -1;
        wmd = &wany;
    }
    dnnl_matmul_desc_t desc;
    if (dnnl_matmul_desc_init(&desc, &smd, wmd, has_bias ? &bmd : NULL, &dmd) != dnnl_success) return -1;
    dnnl_primitive_attr_t attr = NULL;
    dnnl_post_ops_t po = NULL;
    int ok = dnnl_primitive_attr_create(&attr) == dnnl_success &&
             dnnl_primitive_attr_set_scratchpad_mode(attr, dnnl_scratchpad_mode_user) == dnnl_success;
    if (ok && relu)
        ok = dnnl_post_ops_create(&po) == dnnl_success &&
             dnnl_post_ops_append_eltwise(po, 1.0f, dnnl_eltwise_relu, 0.0f, 0.0f) == dnnl_success &&
             dnnl_primitive_attr_set_post_ops(attr, po) == dnnl_success;
    ok = ok && dnnl_primitive_desc_create(pd, &desc, attr, g_engine, NULL) == dnnl_success;
    if (po) dnnl_post_ops_destroy(po);
    if (attr) dnnl_primitive_attr_destroy(attr);
    if (!ok) return -1;
    /* Probing the layout (wmd NULL), only a brgemm kernel makes packing worth it. With the layout
     * given, any kernel will do: the reference one (if ever picked for some M) is slow but right,
     * and the plain weights may be gone. */
    const char *impl = NULL;
    if (!wmd_given && (dnnl_primitive_desc_query(*pd, dnnl_query_impl_info_str, 0, &impl) != dnnl_success ||
                       !impl || strncmp(impl, "brg", 3) != 0)) {
        dnnl_primitive_desc_destroy(*pd);
        return -1;
    }
    return 0;
}

/* The weight layout the kernel wants for (N, K), probed with M = 32; -1 when there is no brgemm
 * kernel or the layout would pad (padding is rewritten on every use: not safe to share) or carries
 * extra data (an s8 compensation: only for s8 sources, which Tern does not use). */
static int probe_layout_uncached(dnnl_memory_desc_t *wmd, int N, int K, int s8) {
    if (N <= 0 || K <= 0 || !engine_ready()) return -1;
    dnnl_primitive_desc_t pd;
    if (make_pd(&pd, 32, N, K, NULL, 0, 0, s8)) return -1;
    const dnnl_memory_desc_t *q = dnnl_primitive_desc_query_md(pd, dnnl_query_weights_md, 0);
    int ok = q != NULL && q->format_kind == dnnl_blocked && q->extra.flags == 0;
    if (ok) {
        *wmd = *q;
        for (int i = 0; i < wmd->ndims; i++)
            if (wmd->padded_dims[i] != wmd->dims[i] || wmd->padded_offsets[i] != 0) ok = 0;
    }
    dnnl_primitive_desc_destroy(pd);
    return ok ? 0 : -1;
}

/* probe_layout_uncached, remembered per shape (a model has a handful of shapes). */
static struct {
    int N, K, s8, ok;
    dnnl_memory_desc_t wmd;
} g_layouts[64];
static int g_n_layouts;
static pthread_mutex_t g_layouts_mu = PTHREAD_MUTEX_INITIALIZER;

static int probe_layout(dnnl_memory_desc_t *wmd, int N, int K, int s8) {
    pthread_mutex_lock(&g_layouts_mu);
    int r = -2;
    for (int i = 0; i < g_n_layouts && r == -2; i++)
        if (g_layouts[i].N == N && g_layouts[i].K == K && g_layouts[i].s8 == s8) {
            r = g_layouts[i].ok ? 0 : -1;
            *wmd = g_layouts[i].wmd;
        }
    if (r == -2) {
        r = probe_layout_uncached(wmd, N, K, s8);
        if (g_n_layouts < 64) {
            g_layouts[g_n_layouts].N = N;
            g_layouts[g_n_layouts].K = K;
            g_layouts[g_n_layouts].s8 = s8;
            g_layouts[g_n_layouts].ok = r == 0;
            if (r == 0) g_layouts[g_n_layouts].wmd = *wmd;
            g_n_layouts++;
        }
    }
    pthread_mutex_unlock(&g_layouts_mu);
    return r;
}

#define ROUND64(x) (((x) + 63) & ~(size_t)63)

/* Tern's panels: header | panels | bias padded to whole panels (zeros past N). */
static size_t tern_size(int N, int K) {
    if (N <= 0 || K <= 0) return 0;
    return PACKED_HDR_BYTES + ROUND64(f32p_panel_floats(N, K) * sizeof(float)) +
           ROUND64(f32p_panel_floats(N, 1) * sizeof(float));
}

/* Where a float32 layer goes on Tern's panels although oneDNN has brgemm for it: with
 * TERN_GEMM_PACKED=tern (comparisons), and by default on CPUs that run 512-bit operations as two
 * 256-bit halves (cpu_avx512_halves: AMD Zen 4), where Tern's AVX2 kernel has the same peak as
 * oneDNN's AVX-512 one and streams cold weights faster at the few rows of a decoder step
 * (docs/kernels.md, "Packed float32 on AVX2-only CPUs"). TERN_GEMM_PACKED=onednn keeps oneDNN's
 * brgemm wherever it exists. */
enum { PREF_DEFAULT = 0, PREF_TERN_FORCED = 1, PREF_TERN_HALVES = 2, PREF_ONEDNN = 3 };

static int f32_pref(void) {
    static atomic_int v = -1;
    int r = atomic_load(&v);
    if (r < 0) {
        const char *e = getenv("TERN_GEMM_PACKED");
        if (e && !strcmp(e, "tern")) r = PREF_TERN_FORCED;
        else if (e && !strcmp(e, "onednn")) r = PREF_ONEDNN;
        else r = cpu_avx512_halves() ? PREF_TERN_HALVES : PREF_DEFAULT;
        atomic_store(&v, r);
    }
    return r;
}

static int force_tern(void) {
    int r = f32_pref();
    return r == PREF_TERN_FORCED || r == PREF_TERN_HALVES;
}

static size_t packed_size(int N, int K, int s8) {
    dnnl_memory_desc_t wmd;
    if (!s8 && force_tern()) return tern_size(N, K);
    if (probe_layout(&wmd, N, K, s8)) return s8 ? 0 : tern_size(N, K);
    return PACKED_HDR_BYTES + ROUND64(dnnl_memory_desc_get_size(&wmd));
}

size_t gemm_packed_size(int N, int K) { return packed_size(N, K, 0); }
size_t gemm_packed_size_s8(int N, int K) { return packed_size(N, K, 1); }

static int pack_tern(void *buf, const float *W, const float *bias, int N, int K, int relu) {
    packed_hdr_t *h = buf;
    if (N <= 0 || K <= 0) return -1;
    h->N = N;
    h->K = K;
    h->relu = relu != 0;
    h->tern = 1;
    h->wbytes = f32p_panel_floats(N, K) * sizeof(float);
    float *P = (float *)((char *)buf + PACKED_HDR_BYTES);
    f32p_pack(P, W, N, K);
    if (bias) {
        float *b = (float *)((char *)P + ROUND64(h->wbytes));
        size_t nb = f32p_panel_floats(N, 1);
        memcpy(b, bias, (size_t)N * sizeof(float));
        memset(b + N, 0, (nb - (size_t)N) * sizeof(float));
        h->bias = b;
    }
    return 0;
}

static int pack(void *buf, const void *W, const float *bias, int N, int K, int relu, int s8) {
    packed_hdr_t *h = buf;
    memset(h, 0, sizeof *h);
    if (!s8 && force_tern()) return pack_tern(buf, W, bias, N, K, relu);
    if (probe_layout(&h->wmd, N, K, s8)) return s8 ? -1 : pack_tern(buf, W, bias, N, K, relu);
    h->N = N;
    h->K = K;
    h->relu = relu != 0;
    h->s8 = s8;
    h->bias = bias;
    h->wbytes = dnnl_memory_desc_get_size(&h->wmd);
    /* W (N, K) row-major is the (K, N) matrix in layout "ba": reorder it into the blocked one. */
    dnnl_dims_t wd = {K, N};
    dnnl_memory_desc_t src_md;
    dnnl_memory_t from = NULL, to = NULL;
    dnnl_primitive_desc_t rpd = NULL;
    dnnl_primitive_t r = NULL;
    dnnl_stream_t s = NULL;
    int ok = dnnl_memory_desc_init_by_tag(&src_md, 2, wd, s8 ? dnnl_s8 : dnnl_f32, dnnl_ba) == dnnl_success &&
             dnnl_memory_create(&from, &src_md, g_engine, (void *)W) == dnnl_success &&
             dnnl_memory_create(&to, &h->wmd, g_engine, (char *)buf + PACKED_HDR_BYTES) == dnnl_success &&
             dnnl_reorder_primitive_desc_create(&rpd, &src_md, g_engine, &h->wmd, g_engine, NULL) == dnnl_success &&
             dnnl_primitive_create(&r, rpd) == dnnl_success &&
             dnnl_stream_create(&s, g_engine, dnnl_stream_default_flags) == dnnl_success;
    if (ok) {
        dnnl_exec_arg_t args[2] = {{DNNL_ARG_FROM, from}, {DNNL_ARG_TO, to}};
        ok = dnnl_primitive_execute(r, s, 2, args) == dnnl_success && dnnl_stream_wait(s) == dnnl_success;
    }
    if (s) dnnl_stream_destroy(s);
    if (r) dnnl_primitive_destroy(r);
    if (rpd) dnnl_primitive_desc_destroy(rpd);
    if (to) dnnl_memory_destroy(to);
    if (from) dnnl_memory_destroy(from);
    return ok ? 0 : -1;
}

int gemm_pack_linear(void *buf, const float *W, const float *bias, int N, int K, int relu) {
    return pack(buf, W, bias, N, K, relu, 0);
}

int gemm_pack_s8(void *buf, const int8_t *Q, int N, int K) { return pack(buf, Q, NULL, N, K, 0, 1); }

int gemm_packed_f32_is_tern(int N, int K) {
    dnnl_memory_desc_t wmd;
    return force_tern() || probe_layout(&wmd, N, K, 0) != 0;
}

size_t gemm_packed_size_tern(int N, int K) { return tern_size(N, K); }

int gemm_pack_linear_tern(void *buf, const float *W, const float *bias, int N, int K, int relu) {
    memset(buf, 0, sizeof(packed_hdr_t));
    return pack_tern(buf, W, bias, N, K, relu);
}

const void *gemm_packed_weights(const void *packed, size_t *bytes) {
    *bytes = ((const packed_hdr_t *)packed)->wbytes;
    return (const char *)packed + PACKED_HDR_BYTES;
}

const char *gemm_packed_f32_backend_name(void) {
    dnnl_memory_desc_t wmd;
    int wide = !strcmp(f32p_tiles_name(), "AVX-512");
    if (f32_pref() == PREF_TERN_FORCED)
        return wide ? "Tern panels, AVX-512 tiles (TERN_GEMM_PACKED=tern)" : "Tern panels, AVX2 tiles (TERN_GEMM_PACKED=tern)";
    if (probe_layout(&wmd, 512, 512, 0) != 0) return "Tern panels, AVX2 tiles (oneDNN has no brgemm here)";
    if (f32_pref() == PREF_TERN_HALVES)
        return "Tern panels, AVX2 tiles (this CPU runs 512-bit FMAs as two 256-bit halves)";
    return wide ? "oneDNN brgemm (packed weights; shapes it would pad: Tern panels, AVX-512 tiles)"
                : "oneDNN brgemm (packed weights; shapes it would pad: Tern panels, AVX2 tiles)";
}

const char *gemm_packed_kernel_name(const void *packed) {
    return ((const packed_hdr_t *)packed)->tern ? "Tern panels" : "oneDNN brgemm";
}

/* Offset (elements) of index idx along dimension dim of a blocked oneDNN layout, without offset0:
 * the index splits into the dimension's inner blocks (innermost last in inner_blks, each block's
 * place weighted by the product of the blocks inside it) and the outer index times the dimension's
 * stride. One term per dimension: the offset of (k, n) is offset0 + term(0, k) + term(1, n). */
static int64_t blocked_off(const dnnl_memory_desc_t *md, int dim, int64_t idx) {
    const dnnl_blocking_desc_t *bd = &md->format_desc.blocking;
    int64_t off = 0, inside = 1;
    for (int i = bd->inner_nblks - 1; i >= 0; i--) {
        if (bd->inner_idxs[i] == dim) {
            off += idx % bd->inner_blks[i] * inside;
            idx /= bd->inner_blks[i];
        }
        inside *= bd->inner_blks[i];
    }
    return off + idx * bd->strides[dim];
}

int gemm_packed_offsets(const void *packed, int64_t *off_k, int64_t *off_n) {
    const packed_hdr_t *h = packed;
    if (h->s8) return -1;
    if (h->tern) {
        for (int k = 0; k < h->K; k++) off_k[k] = f32p_off_k(k);
        for (int n = 0; n < h->N; n++) off_n[n] = f32p_off_n(n, h->K);
        return 0;
    }
    const dnnl_memory_desc_t *md = &h->wmd;
    if (md->format_kind != dnnl_blocked || md->ndims != 2 || md->dims[0] != h->K || md->dims[1] != h->N) return -1;
    for (int k = 0; k < h->K; k++) off_k[k] = md->offset0 + blocked_off(md, 0, k);
    for (int n = 0; n < h->N; n++) off_n[n] = blocked_off(md, 1, n);
    return 0;
}

float gemm_packed_weight_at(const void *packed, int n, int k) {
    const packed_hdr_t *h = packed;
    const float *w = (const float *)((const char *)packed + PACKED_HDR_BYTES);
    if (h->tern) return w[f32p_off_k(k) + f32p_off_n(n, h->K)];
    return w[h->wmd.offset0 + blocked_off(&h->wmd, 0, k) + blocked_off(&h->wmd, 1, n)];
}

/* ---- kernels, made on first use */

typedef struct {
    int N, K, M, relu, has_bias, s8, threads;
    int id;                      /* index into the per-thread memory objects */
    dnnl_primitive_t prim;
    dnnl_memory_desc_t smd, dmd, bmd, spmd, wmd;
    size_t scratch;              /* scratchpad bytes */
} kernel_t;

#define KERNEL_SLOTS 8192        /* open addressing; power of two */
static kernel_t *g_kernels[KERNEL_SLOTS];
static int g_n_kernels;
static pthread_mutex_t g_kernels_mu = PTHREAD_MUTEX_INITIALIZER;

static unsigned kernel_hash(int N, int K, int M, int flags, int threads) {
    uint64_t x = (uint64_t)N * 0x9E3779B97F4A7C15ull ^ (uint64_t)K * 0xC2B2AE3D27D4EB4Full ^
                 (uint64_t)M * 0x165667B19E3779F9ull ^ (uint64_t)(flags * 64 + threads) * 0x27D4EB2F165667C5ull;
    x ^= x >> 29;
    x *= 0xBF58476D1CE4E5B9ull;
    x ^= x >> 32;
    return (unsigned)x & (KERNEL_SLOTS - 1);
}

static const kernel_t *kernel_get(const packed_hdr_t *h, int M, int threads) {
    int has_bias = h->bias != NULL, flags = h->s8 * 4 + has_bias * 2 + h->relu;
    unsigned i = kernel_hash(h->N, h->K, M, flags, threads);
    kernel_t *found = NULL;
    pthread_mutex_lock(&g_kernels_mu);
    for (;;) {
        kernel_t *k = g_kernels[i];
        if (!k) break;
        if (k->N == h->N && k->K == h->K && k->M == M && k->relu == h->relu && k->has_bias == has_bias &&
            k->s8 == h->s8 && k->threads == threads) {
            found = k;
            break;
        }
        i = (i + 1) & (KERNEL_SLOTS - 1);
    }
    if (!found && g_n_kernels < KERNEL_SLOTS / 2) {
        dnnl_primitive_desc_t pd;
        kernel_t *k = calloc(1, sizeof *k);
        if (k && make_pd(&pd, M, h->N, h->K, &h->wmd, has_bias, h->relu, h->s8) == 0) {
            k->smd = *dnnl_primitive_desc_query_md(pd, dnnl_query_src_md, 0);
            k->dmd = *dnnl_primitive_desc_query_md(pd, dnnl_query_dst_md, 0);
            k->wmd = h->wmd;
            if (has_bias) k->bmd = *dnnl_primitive_desc_query_md(pd, dnnl_query_weights_md, 1);
            const dnnl_memory_desc_t *sp = dnnl_primitive_desc_query_md(pd, dnnl_query_scratchpad_md, 0);
            if (sp) k->spmd = *sp;
            k->scratch = sp ? dnnl_memory_desc_get_size(sp) : 0;
            if (dnnl_primitive_create(&k->prim, pd) == dnnl_success) {
                k->N = h->N, k->K = h->K, k->M = M, k->relu = h->relu, k->has_bias = has_bias, k->s8 = h->s8;
                k->threads = threads;
                k->id = g_n_kernels++;
                g_kernels[i] = k;
                found = k;
            }
            dnnl_primitive_desc_destroy(pd);
        }
        if (!found) free(k);
    }
    pthread_mutex_unlock(&g_kernels_mu);
    return found;
}

/* ---- per-thread stream, scratchpad and memory objects (handles set on every call) */

typedef struct {
    dnnl_memory_t src, wei, bias, dst, sp;
} thread_mems_t;

typedef struct {
    dnnl_stream_t stream;
    thread_mems_t *mems; /* (cap) by kernel id */
    int cap;
    void *scratch;
    size_t scratch_cap;
} thread_ctx_t;

static pthread_key_t g_ctx_key;
static pthread_once_t g_ctx_once = PTHREAD_ONCE_INIT;
static int g_ctx_key_ok;

static void thread_ctx_free(void *p) {
    thread_ctx_t *c = p;
    if (!c) return;
    for (int i = 0; i < c->cap; i++) {
        thread_mems_t *t = &c->mems[i];
        if (t->src) dnnl_memory_destroy(t->src);
        if (t->wei) dnnl_memory_destroy(t->wei);
        if (t->bias) dnnl_memory_destroy(t->bias);
        if (t->dst) dnnl_memory_destroy(t->dst);
        if (t->sp) dnnl_memory_destroy(t->sp);
    }
    free(c->mems);
    if (c->stream) dnnl_stream_destroy(c->stream);
    aligned_free(c->scratch);
    free(c);
}

static void ctx_key_init(void) { g_ctx_key_ok = pthread_key_create(&g_ctx_key, thread_ctx_free) == 0; }

static thread_ctx_t *thread_ctx(void) {
    pthread_once(&g_ctx_once, ctx_key_init);
    if (!g_ctx_key_ok) return NULL;
    thread_ctx_t *c = pthread_getspecific(g_ctx_key);
    if (c) return c;
    c = calloc(1, sizeof *c);
    if (!c) return NULL;
    if (dnnl_stream_create(&c->stream, g_engine, dnnl_stream_default_flags) != dnnl_success ||
        pthread_setspecific(g_ctx_key, c) != 0) {
        thread_ctx_free(c);
        return NULL;
    }
    return c;
}

static thread_mems_t *thread_mems(thread_ctx_t *c, const kernel_t *k) {
    if (k->id >= c->cap) {
        int cap = c->cap ? c->cap : 64;
        while (cap <= k->id) cap *= 2;
        thread_mems_t *m = realloc(c->mems, (size_t)cap * sizeof *m);
        if (!m) return NULL;
        memset(m + c->cap, 0, (size_t)(cap - c->cap) * sizeof *m);
        c->mems = m;
        c->cap = cap;
    }
    thread_mems_t *t = &c->mems[k->id];
    if (!t->src) {
        if (dnnl_memory_create(&t->wei, &k->wmd, g_engine, DNNL_MEMORY_NONE) != dnnl_success ||
            dnnl_memory_create(&t->dst, &k->dmd, g_engine, DNNL_MEMORY_NONE) != dnnl_success ||
            (k->has_bias && dnnl_memory_create(&t->bias, &k->bmd, g_engine, DNNL_MEMORY_NONE) != dnnl_success) ||
            (k->scratch && dnnl_memory_create(&t->sp, &k->spmd, g_engine, DNNL_MEMORY_NONE) != dnnl_success) ||
            dnnl_memory_create(&t->src, &k->smd, g_engine, DNNL_MEMORY_NONE) != dnnl_success) {
            if (t->wei) dnnl_memory_destroy(t->wei);
            if (t->dst) dnnl_memory_destroy(t->dst);
            if (t->bias) dnnl_memory_destroy(t->bias);
            if (t->sp) dnnl_memory_destroy(t->sp);
            memset(t, 0, sizeof *t);
            return NULL;
        }
    }
    return t;
}

/* out (M, N) = inp (M, K) . W^T [+ bias, ReLU]: float32 rows (es = 4) or u8 rows -> s32 (es = 1). */
static int packed_run(void *out, const void *inp, const void *packed, int M, const char *fn) {
    const packed_hdr_t *h = packed;
    size_t ies = h->s8 ? 1 : sizeof(float), oes = h->s8 ? sizeof(int32_t) : sizeof(float);
    if (M <= 0) return 0;
    thread_ctx_t *c = thread_ctx();
    if (!c) return -1;
    int threads = omp_get_max_threads();
    void *w = (char *)packed + PACKED_HDR_BYTES;
    /* int8 weights that stay in cache (all but a vocabulary projection) run in chunks of
     * GEMM_PACKED_S8_SMALL_M rows: the kernel blocks M by about as much itself (measured: no slower),
     * and a decoder whose row count varies makes ~4x fewer kernels (~50 KB of machine code each).
     * Integer sums: the same int32 results whatever the chunking. (float32 keeps one call per 128
     * rows: its sums' rounding could depend on the kernel's blocking for M.) */
    int chunk = h->s8 && h->wbytes <= GEMM_PACKED_S8_SMALL_BYTES ? GEMM_PACKED_S8_SMALL_M : GEMM_PACKED_MAX_M;
    for (int m0 = 0; m0 < M; m0 += chunk) {
        int rows = M - m0 < chunk ? M - m0 : chunk;
        const kernel_t *k = kernel_get(h, rows, threads);
        if (!k) return -1;
        thread_mems_t *t = thread_mems(c, k);
        if (!t) return -1;
        if (k->scratch > c->scratch_cap) {
            size_t cap = (k->scratch + 4095) & ~(size_t)4095;
            void *p = aligned_alloc64(cap);
            if (!p) return -1;
            aligned_free(c->scratch);
            c->scratch = p;
            c->scratch_cap = cap;
        }
        const char *src = (const char *)inp + (size_t)m0 * h->K * ies;
        char *dst = (char *)out + (size_t)m0 * h->N * oes;
        extcheck_2d(fn, "input", src, rows, h->K, h->K, ies);
        extcheck_2d(fn, "output", dst, rows, h->N, h->N, oes);
        extcheck_2d(fn, "packed weights", w, 1, h->wbytes, h->wbytes, 1);
        if (h->bias) extcheck_2d(fn, "bias", h->bias, 1, h->N, h->N, sizeof(float));
        if (k->scratch) extcheck_2d(fn, "scratchpad", c->scratch, 1, k->scratch, k->scratch, 1);
        dnnl_memory_set_data_handle(t->src, (void *)src);
        dnnl_memory_set_data_handle(t->wei, w);
        dnnl_memory_set_data_handle(t->dst, dst);
        dnnl_exec_arg_t args[5] = {{DNNL_ARG_SRC, t->src}, {DNNL_ARG_WEIGHTS, t->wei}, {DNNL_ARG_DST, t->dst}};
        int nargs = 3;
        if (t->bias) {
            dnnl_memory_set_data_handle(t->bias, (void *)h->bias);
            args[nargs++] = (dnnl_exec_arg_t){DNNL_ARG_BIAS, t->bias};
        }
        if (t->sp) {
            dnnl_memory_set_data_handle(t->sp, c->scratch);
            args[nargs++] = (dnnl_exec_arg_t){DNNL_ARG_SCRATCHPAD, t->sp};
        }
        if (dnnl_primitive_execute(k->prim, c->stream, nargs, args) != dnnl_success ||
            dnnl_stream_wait(c->stream) != dnnl_success)
            return -1;
    }
    return 0;
}

int gemm_packed_forward(float *out, const float *inp, const void *packed, int M) {
    const packed_hdr_t *h = packed;
    if (h->s8) return -1;
    if (h->tern) {
        f32p_forward(out, inp, (const float *)((const char *)packed + PACKED_HDR_BYTES), h->bias, h->relu, M, h->N,
                     h->K, kernels_get_num_threads());
        return 0;
    }
    return packed_run(out, inp, packed, M, "gemm_packed_forward");
}

int gemm_packed_forward_s8(int32_t *acc, const uint8_t *a, const void *packed, int M) {
    if (!((const packed_hdr_t *)packed)->s8) return -1;
    return packed_run(acc, a, packed, M, "gemm_packed_forward_s8");
}
