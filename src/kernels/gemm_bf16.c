/* gemm_bf16.c — bfloat16 GEMM (oneDNN matmul, bf16 src/weights, f32 dst) with a per-thread
 * primitive cache, the float32 -> bfloat16 conversion, and the CPU check (see gemm_bf16.h). */
#include "kernels/gemm_bf16.h"

#include <cpuid.h>
#include <immintrin.h>
#include <oneapi/dnnl/dnnl.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------------ CPU check */

static int cpu_has_avx512bf16(void) {
    unsigned a, b, c, d;
    if (!__get_cpuid(1, &a, &b, &c, &d) || !(c & (1u << 27))) return 0; /* OSXSAVE */
    unsigned lo, hi;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    if ((lo & 0xe6u) != 0xe6u) return 0; /* XMM, YMM, opmask, ZMM state enabled by the OS */
    if (!__get_cpuid_count(7, 0, &a, &b, &c, &d) || !(b & (1u << 16))) return 0; /* AVX512F */
    if (a < 1) return 0;
    if (!__get_cpuid_count(7, 1, &a, &b, &c, &d)) return 0;
    return (a >> 5) & 1u; /* AVX512_BF16 */
}

static int onednn_has_bf16(void) {
    unsigned isa = (unsigned)dnnl_get_effective_cpu_isa();
    unsigned need = (unsigned)dnnl_cpu_isa_avx512_core_bf16;
    return (isa & need) == need;
}

int bf16_cpu_supported(void) { return cpu_has_avx512bf16() && onednn_has_bf16(); }

tern_status_t bf16_check_cpu(void) {
    if (!cpu_has_avx512bf16())
        return tern_error(TERN_ERR_UNSUPPORTED, "bfloat16 compute needs a CPU with AVX512_BF16 (cpuid leaf 7.1 "
                          "EAX bit 5, e.g. Intel Cooper Lake / Sapphire Rapids, AMD Zen 4); this CPU does not have "
                          "it: use --precision float32");
    if (!onednn_has_bf16())
        return tern_error(TERN_ERR_UNSUPPORTED, "bfloat16 compute: the CPU has AVX512_BF16 but oneDNN's effective "
                          "ISA (0x%x) does not include avx512_core_bf16 (is ONEDNN_MAX_CPU_ISA set?): use "
                          "--precision float32", (unsigned)dnnl_get_effective_cpu_isa());
    return TERN_OK;
}

/* ------------------------------------------------------------------ conversion */

void bf16_from_f32_ref(bf16_t *dst, const float *src, size_t n) {
    for (size_t i = 0; i < n; i++) dst[i] = bf16_round(src[i]);
}

__attribute__((target("avx512f,avx512bw,avx512bf16"))) static void cvt_avx512(bf16_t *dst, const float *src,
                                                                                size_t n) {
    size_t i = 0;
    for (; i + 32 <= n; i += 32) {
        __m512 lo = _mm512_loadu_ps(src + i), hi = _mm512_loadu_ps(src + i + 16);
        __m512bh r = _mm512_cvtne2ps_pbh(hi, lo);
        _mm512_storeu_si512((void *)(dst + i), (__m512i)r);
    }
    if (i < n) {
        size_t rest = n - i;
        __mmask16 m0 = (__mmask16)(rest >= 16 ? 0xffffu : ((1u << rest) - 1u));
        __mmask16 m1 = (__mmask16)(rest > 16 ? ((1u << (rest - 16)) - 1u) : 0u);
        __m512 lo = _mm512_maskz_loadu_ps(m0, src + i), hi = _mm512_maskz_loadu_ps(m1, src + i + 16);
        __m512bh r = _mm512_cvtne2ps_pbh(hi, lo);
        __mmask32 m = (__mmask32)(rest >= 32 ? 0xffffffffu : ((1u << rest) - 1u));
        _mm512_mask_storeu_epi16((void *)(dst + i), m, (__m512i)r);
    }
}

static pthread_once_t g_cvt_once = PTHREAD_ONCE_INIT;
static int g_cvt_fast;
static void cvt_init(void) { g_cvt_fast = cpu_has_avx512bf16(); }

void bf16_from_f32(bf16_t *dst, const float *src, size_t n) {
    pthread_once(&g_cvt_once, cvt_init);
    const size_t chunk = (size_t)1 << 16;
    if (n <= chunk) {
        if (g_cvt_fast) cvt_avx512(dst, src, n);
        else bf16_from_f32_ref(dst, src, n);
        return;
    }
    long nchunks = (long)((n + chunk - 1) / chunk);
#pragma omp parallel for schedule(static)
    for (long c = 0; c < nchunks; c++) {
        size_t i0 = (size_t)c * chunk, len = n - i0 < chunk ? n - i0 : chunk;
        if (g_cvt_fast) cvt_avx512(dst + i0, src + i0, len);
        else bf16_from_f32_ref(dst + i0, src + i0, len);
    }
}

/* ------------------------------------------------------------------ matmul primitives */

static pthread_once_t g_once = PTHREAD_ONCE_INIT;
static dnnl_engine_t g_engine;
static int g_engine_ok;
static void engine_init(void) { g_engine_ok = dnnl_engine_create(&g_engine, dnnl_cpu, 0) == dnnl_success; }

/* One primitive per (transA, transB, accumulate): every dimension and stride is a runtime value
 * (DNNL_RUNTIME_DIM_VAL), given at execution by the memory objects. A training batch has a new
 * row count M almost every time, and a primitive per shape would be created (JIT code generated)
 * for nearly every call: measured 2,234 primitives in 100 updates of a tiny model. With runtime
 * dimensions oneDNN 2.6 picks its bfloat16 GEMM ("gemm:jit", avx512_core_bf16), as fast here as
 * its per-shape brgemm kernels (bench numbers in docs/training.md). */
typedef struct {
    dnnl_primitive_t prim;
    int ready;
} entry_t;

static _Thread_local entry_t t_cache[2][2][2];
static _Thread_local long t_calls, t_created;
static _Thread_local dnnl_stream_t t_stream;

void gemm_bf16_cache_clear(void) {
    for (int i = 0; i < 8; i++) {
        entry_t *e = &t_cache[i >> 2][(i >> 1) & 1][i & 1];
        if (e->prim) dnnl_primitive_destroy(e->prim);
        memset(e, 0, sizeof *e);
    }
    if (t_stream) dnnl_stream_destroy(t_stream);
    t_stream = NULL;
}

void gemm_bf16_stats(long *calls, long *created) {
    if (calls) *calls = t_calls;
    if (created) *created = t_created;
}

/* Matrix X (rows, cols) as stored with row stride ld, seen as op(X) = X^T when trans; rows < 0:
 * every dimension and stride a runtime value. */
static int md_of(dnnl_memory_desc_t *md, int trans, int64_t rows, int64_t cols, int64_t ld, dnnl_data_type_t dt) {
    dnnl_dims_t dims = {rows, cols}, strides = {ld, 1};
    if (trans) strides[0] = 1, strides[1] = ld;
    return dnnl_memory_desc_init_by_strides(md, 2, dims, dt, strides) == dnnl_success;
}

static int entry_create(entry_t *e, int transA, int transB, int sum) {
    const int64_t R = DNNL_RUNTIME_DIM_VAL;
    dnnl_memory_desc_t amd, bmd, cmd;
    if (!md_of(&amd, transA, R, R, R, dnnl_bf16) || !md_of(&bmd, transB, R, R, R, dnnl_bf16) ||
        !md_of(&cmd, 0, R, R, R, dnnl_f32))
        return 0;
    dnnl_matmul_desc_t desc;
    if (dnnl_matmul_desc_init(&desc, &amd, &bmd, NULL, &cmd) != dnnl_success) return 0;
    dnnl_primitive_attr_t attr = NULL;
    dnnl_post_ops_t po = NULL;
    int ok = dnnl_primitive_attr_create(&attr) == dnnl_success;
    if (ok && sum)
        ok = dnnl_post_ops_create(&po) == dnnl_success && dnnl_post_ops_append_sum(po, 1.0f) == dnnl_success &&
             dnnl_primitive_attr_set_post_ops(attr, po) == dnnl_success;
    dnnl_primitive_desc_t pd = NULL;
    ok = ok && dnnl_primitive_desc_create(&pd, &desc, attr, g_engine, NULL) == dnnl_success;
    if (po) dnnl_post_ops_destroy(po);
    if (attr) dnnl_primitive_attr_destroy(attr);
    ok = ok && dnnl_primitive_create(&e->prim, pd) == dnnl_success;
    if (pd) dnnl_primitive_desc_destroy(pd);
    e->ready = ok;
    if (ok) t_created++;
    return ok;
}

tern_status_t gemm_bf16(int transA, int transB, int M, int N, int K, const bf16_t *A, int lda,
                        const bf16_t *B, int ldb, float beta, float *C, int ldc) {
    if (M <= 0 || N <= 0) return TERN_OK;
    if (K <= 0) {
        if (beta == 0.0f)
            for (int m = 0; m < M; m++) memset(C + (size_t)m * ldc, 0, (size_t)N * sizeof(float));
        return TERN_OK;
    }
    if (beta != 0.0f && beta != 1.0f)
        return tern_error(TERN_ERR_INVALID_ARG, "gemm_bf16: beta must be 0 or 1 (got %g)", beta);
    pthread_once(&g_once, engine_init);
    if (!g_engine_ok) return tern_error(TERN_ERR_INTERNAL, "gemm_bf16: cannot create the oneDNN CPU engine");
    if (!t_stream && dnnl_stream_create(&t_stream, g_engine, dnnl_stream_default_flags) != dnnl_success) {
        t_stream = NULL;
        return tern_error(TERN_ERR_INTERNAL, "gemm_bf16: cannot create a oneDNN stream");
    }
    entry_t *e = &t_cache[transA != 0][transB != 0][beta != 0.0f];
    if (!e->ready && !entry_create(e, transA != 0, transB != 0, beta != 0.0f))
        return tern_error(TERN_ERR_INTERNAL, "gemm_bf16: oneDNN has no bfloat16 matmul (trans %d%d, accumulate %d)",
                          transA != 0, transB != 0, beta != 0.0f);
    t_calls++;
    /* op(A) (M, K), op(B) (K, N) (B^T of a stored (N, K) when transB), C (M, N) */
    dnnl_memory_desc_t amd, bmd, cmd;
    dnnl_memory_t ma = NULL, mb = NULL, mc = NULL;
    int ok = md_of(&amd, transA, M, K, lda, dnnl_bf16) && md_of(&bmd, transB, K, N, ldb, dnnl_bf16) &&
             md_of(&cmd, 0, M, N, ldc, dnnl_f32) &&
             dnnl_memory_create(&ma, &amd, g_engine, (void *)A) == dnnl_success &&
             dnnl_memory_create(&mb, &bmd, g_engine, (void *)B) == dnnl_success &&
             dnnl_memory_create(&mc, &cmd, g_engine, C) == dnnl_success;
    if (ok) {
        dnnl_exec_arg_t args[3] = {{DNNL_ARG_SRC, ma}, {DNNL_ARG_WEIGHTS, mb}, {DNNL_ARG_DST, mc}};
        ok = dnnl_primitive_execute(e->prim, t_stream, 3, args) == dnnl_success &&
             dnnl_stream_wait(t_stream) == dnnl_success;
    }
    if (ma) dnnl_memory_destroy(ma);
    if (mb) dnnl_memory_destroy(mb);
    if (mc) dnnl_memory_destroy(mc);
    if (!ok)
        return tern_error(TERN_ERR_INTERNAL, "gemm_bf16: oneDNN matmul failed (M %d, N %d, K %d, trans %d%d, ld "
                          "%d/%d/%d)", M, N, K, transA != 0, transB != 0, lda, ldb, ldc);
    return TERN_OK;
}
