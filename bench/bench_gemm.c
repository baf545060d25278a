/* bench_gemm.c — GFLOP/s of oneDNN (dnnl_sgemm) and OpenBLAS (cblas_sgemm) on the shapes a
 * Transformer-base translation model runs at inference, with 1 and 2 threads, plus the batched
 * attention gemms (loop of gemms vs oneDNN's batched matmul primitive) and the int8 u8s8s32 gemm
 * (oneDNN's BLAS-like dnnl_gemm_u8s8s32 beside the matmul kernel on weights packed once).
 *
 *   build-<x>/bench/bench_gemm [seconds_per_case] [--cpu] [--int8] [--f32] [--threads=N]
 *
 * seconds_per_case default 0.15; --cpu: time in process CPU seconds, not wall seconds (a shared,
 * loaded machine: with 1 thread the CPU time is the work); --int8: only the int8 section; --f32:
 * only the packed float32 section; --zoo: only the zoo shapes' output projections (58,101 x 512 and
 * 256,206 x 1024: Tern's panels against dnnl_sgemm, weights from memory); --threads=N: only N
 * threads (default 1 then 2).
 *
 * The packed float32 section times the decoder's linear layers as a decoder step meets them: "hot"
 * runs one weight again and again (it stays in the caches), "cold" cycles through copies of it
 * filling 256 MB, so every call reads its weights from memory, as in a step (a Transformer-base
 * decoder's weights, ~150 MB with the output projection, do not fit in the caches). "sgemm" is
 * dnnl_sgemm on the plain weight (what gemm_f32 runs), "packed" gemm_packed_forward, whose kernel
 * (oneDNN's brgemm, or Tern's AVX2 panels where oneDNN has none) is named in the last column.
 *
 * Linear layers: out[M,N] = inp[M,K] · W[N,K]^T (transB = 1), M = rows (batch × time).
 * Attention: batch = 8 heads; scores[L,L] = Q[L,64] · K[L,64]^T and ctx[L,64] = P[L,L] · V[L,64].
 * The last column says which library gemm_f32 (the dispatcher) picks for the shape; "packed" is
 * gemm_packed_forward on weights packed once (what the Transformer runs, gemm_packed.h). */
#include <cblas.h>
#include <omp.h>
#include <oneapi/dnnl/dnnl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/base.h"
#include "kernels/gemm_f32p.h"
#include "kernels/gemm_packed.h"
#include "kernels/gemm_s8.h"
#include "kernels/gemm_s8v.h"
#include "kernels/kernels.h"

static double budget = 0.15;
static int use_cpu_time;

/* Seconds: wall (time_now) or, with --cpu, this process's CPU time. */
static double now(void) {
    if (!use_cpu_time) return time_now();
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void fill(float *x, size_t n, unsigned seed) {
    for (size_t i = 0; i < n; i++) {
        seed = seed * 1664525u + 1013904223u;
        x[i] = (float)((seed >> 8) & 0xffff) / 65536.0f - 0.5f;
    }
}

typedef void (*gemm_fn)(int tA, int tB, int M, int N, int K, const float *A, int lda, const float *B,
                        int ldb, float *C, int ldc);

static void run_dnnl(int tA, int tB, int M, int N, int K, const float *A, int lda, const float *B,
                     int ldb, float *C, int ldc) {
    dnnl_sgemm(tA ? 'T' : 'N', tB ? 'T' : 'N', M, N, K, 1.0f, A, lda, B, ldb, 0.0f, C, ldc);
}
static void run_blas(int tA, int tB, int M, int N, int K, const float *A, int lda, const float *B,
                     int ldb, float *C, int ldc) {
    cblas_sgemm(CblasRowMajor, tA ? CblasTrans : CblasNoTrans, tB ? CblasTrans : CblasNoTrans, M, N, K,
                1.0f, A, lda, B, ldb, 0.0f, C, ldc);
}
static void run_tern(int tA, int tB, int M, int N, int K, const float *A, int lda, const float *B,
                     int ldb, float *C, int ldc) {
    gemm_f32(tA, tB, M, N, K, 1.0f, A, lda, B, ldb, 0.0f, C, ldc);
}

/* Seconds per call, repeated until `budget` seconds have passed (after one warm-up call). */
static double time_gemm(gemm_fn f, int tB, int M, int N, int K, const float *A, const float *B, float *C) {
    f(0, tB, M, N, K, A, K, B, tB ? K : N, C, N);
    int reps = 0;
    double t0 = now(), t;
    do {
        f(0, tB, M, N, K, A, K, B, tB ? K : N, C, N);
        reps++;
        t = now() - t0;
    } while (t < budget);
    return t / reps;
}

/* Seconds per gemm_packed_forward call (after one warm-up call that also makes the kernel). */
static double time_packed(const void *pk, int M, const float *A, float *C) {
    gemm_packed_forward(C, A, pk, M);
    int reps = 0;
    double t0 = now(), t;
    do {
        gemm_packed_forward(C, A, pk, M);
        reps++;
        t = now() - t0;
    } while (t < budget);
    return t / reps;
}

/* ---- batched attention: loop vs oneDNN matmul primitive ---- */
static dnnl_engine_t engine;
static dnnl_stream_t stream;

static void batched_dnnl_matmul(int tB, int M, int N, int K, const float *A, const float *B, float *C, int batch) {
    /* A (batch, M, K), B (batch, K, N) or (batch, N, K) when tB, C (batch, M, N); dense. */
    dnnl_memory_desc_t a_md, b_md, c_md;
    dnnl_dims_t ad = {batch, M, K}, bd = {batch, K, N}, cd = {batch, M, N};
    dnnl_dims_t as = {(dnnl_dim_t)M * K, K, 1}, cs = {(dnnl_dim_t)M * N, N, 1};
    dnnl_dims_t bs;
    if (tB) { bs[0] = (dnnl_dim_t)N * K; bs[1] = 1; bs[2] = K; }
    else { bs[0] = (dnnl_dim_t)K * N; bs[1] = N; bs[2] = 1; }
    dnnl_memory_desc_init_by_strides(&a_md, 3, ad, dnnl_f32, as);
    dnnl_memory_desc_init_by_strides(&b_md, 3, bd, dnnl_f32, bs);
    dnnl_memory_desc_init_by_strides(&c_md, 3, cd, dnnl_f32, cs);
    dnnl_matmul_desc_t desc;
    dnnl_matmul_desc_init(&desc, &a_md, &b_md, NULL, &c_md);
    dnnl_primitive_desc_t pd;
    if (dnnl_primitive_desc_create(&pd, &desc, NULL, engine, NULL) != dnnl_success) abort();
    dnnl_primitive_t prim;
    dnnl_primitive_create(&prim, pd);
    dnnl_memory_t am, bm, cm;
    dnnl_memory_create(&am, &a_md, engine, (void *)A);
    dnnl_memory_create(&bm, &b_md, engine, (void *)B);
    dnnl_memory_create(&cm, &c_md, engine, C);
    dnnl_exec_arg_t args[3] = {{DNNL_ARG_SRC, am}, {DNNL_ARG_WEIGHTS, bm}, {DNNL_ARG_DST, cm}};
    dnnl_primitive_execute(prim, stream, 3, args);
    dnnl_stream_wait(stream);
    dnnl_memory_destroy(am);
    dnnl_memory_destroy(bm);
    dnnl_memory_destroy(cm);
    dnnl_primitive_destroy(prim);
    dnnl_primitive_desc_destroy(pd);
}

static void batched_loop(gemm_fn f, int tB, int M, int N, int K, const float *A, const float *B, float *C, int batch) {
    for (int b = 0; b < batch; b++)
        f(0, tB, M, N, K, A + (size_t)b * M * K, K, B + (size_t)b * K * N, tB ? K : N, C + (size_t)b * M * N, N);
}

static void batched_tern(int tB, int M, int N, int K, const float *A, const float *B, float *C, int batch) {
    gemm_f32_batched(0, tB, M, N, K, 1.0f, A, K, (size_t)M * K, B, tB ? K : N, (size_t)K * N, 0.0f, C, N,
                     (size_t)M * N, batch);
}

static double time_batched(int which, int tB, int M, int N, int K, const float *A, const float *B, float *C, int batch) {
    int reps = 0;
    double t0 = 0, t = 0;
    for (int warm = 1; ; warm = 0) {
        if (!warm && reps == 0) t0 = now();
        switch (which) {
        case 0: batched_loop(run_dnnl, tB, M, N, K, A, B, C, batch); break;
        case 1: batched_loop(run_blas, tB, M, N, K, A, B, C, batch); break;
        case 2: batched_dnnl_matmul(tB, M, N, K, A, B, C, batch); break;
        default: batched_tern(tB, M, N, K, A, B, C, batch); break;
        }
        if (warm) continue;
        reps++;
        t = now() - t0;
        if (t >= budget) break;
    }
    return t / reps;
}

/* Seconds per call of sgemm (plain weights) or gemm_packed_forward, over `copies` weights in turn. */
static double time_cycled(int packed, void **w, int copies, int M, int N, int K, const float *A, float *C) {
    int reps = 0, c = 0;
    if (packed) gemm_packed_forward(C, A, w[0], M);
    else run_dnnl(0, 1, M, N, K, A, K, w[0], K, C, N);
    double t0 = now(), t;
    do {
        if (packed) gemm_packed_forward(C, A, w[c], M);
        else run_dnnl(0, 1, M, N, K, A, K, w[c], K, C, N);
        c = c + 1 < copies ? c + 1 : 0;
        reps++;
        t = now() - t0;
    } while (t < budget);
    return t / reps;
}

static void packed_f32_section(int threads, const float *A, const float *B, float *C) {
    static const int Ms[] = {1, 8, 16, 32, 128};
    static const int NK[][2] = {{1536, 512}, {512, 512}, {2048, 512}, {512, 2048}, {32000, 512}};
    printf("\n## packed float32 linear, threads=%d (GFLOP/s): dnnl_sgemm on the plain weight vs\n"
           "## gemm_packed_forward, hot (one weight, cached) and cold (weights cycled through 256 MB)\n",
           threads);
    printf("%5s %6s %5s | %9s %9s | %9s %9s | %s\n", "M", "N", "K", "sgemm hot", "pack hot", "sgemm cold",
           "pack cold", "packed kernel");
    for (size_t s = 0; s < sizeof NK / sizeof NK[0]; s++) {
        int N = NK[s][0], K = NK[s][1];
        size_t wbytes = (size_t)N * K * sizeof(float), pbytes = gemm_packed_size(N, K);
        int copies = (int)((256u << 20) / wbytes);
        if (copies < 2) copies = 2;
        void **plain = calloc((size_t)copies, sizeof *plain), **pk = calloc((size_t)copies, sizeof *pk);
        int ok = plain && pk && pbytes;
        for (int c = 0; ok && c < copies; c++) {
            plain[c] = aligned_alloc64(wbytes);
            pk[c] = aligned_alloc64(pbytes);
            ok = plain[c] && pk[c] && gemm_pack_linear(pk[c], B, NULL, N, K, 0) == 0;
            if (ok) memcpy(plain[c], B, wbytes);
        }
        for (size_t m = 0; ok && m < sizeof Ms / sizeof Ms[0]; m++) {
            int M = Ms[m];
            double fl = 2.0 * M * N * K * 1e-9;
            double sh = time_cycled(0, plain, 1, M, N, K, A, C), ph = time_cycled(1, pk, 1, M, N, K, A, C);
            double sc = time_cycled(0, plain, copies, M, N, K, A, C), pc = time_cycled(1, pk, copies, M, N, K, A, C);
            printf("%5d %6d %5d | %9.1f %9.1f | %9.1f %9.1f | %s\n", M, N, K, fl / sh, fl / ph, fl / sc, fl / pc,
                   gemm_packed_kernel_name(pk[0]));
        }
        if (!ok) printf("%5s %6d %5d | out of memory or no packing\n", "-", N, K);
        for (int c = 0; c < copies; c++) {
            if (plain) aligned_free(plain[c]);
            if (pk) aligned_free(pk[c]);
        }
        free(plain);
        free(pk);
    }
}

/* The output projections of the zoo shapes (bench_zoo.py): NLLB-600M's 256,206 x 1024 (1 GB) and
 * OPUS-MT's 58,101 x 512 (119 MB), packed (N not a multiple of oneDNN's block: Tern's panels, with
 * the tiles this CPU gets, f32p_tiles_name; TERN_F32P_AVX2=1 the AVX2 ones) against dnnl_sgemm on
 * the plain weight; each call reads its weight from memory (larger than the caches); best of 5
 * calls after one warm-up. */
static void zoo_proj_section(int threads) {
    static const int Ms[] = {4, 8, 16, 35, 64, 128};
    static const int NK[][2] = {{58101, 512}, {256206, 1024}};
    printf("\n## zoo output projections, threads=%d (GFLOP/s, weights from memory): dnnl_sgemm vs gemm_packed_forward\n",
           threads);
    printf("%5s %6s %5s | %9s %9s | %s\n", "M", "N", "K", "sgemm", "packed", "packed kernel");
    for (size_t s = 0; s < sizeof NK / sizeof NK[0]; s++) {
        int N = NK[s][0], K = NK[s][1];
        size_t wn = (size_t)N * K, pbytes = gemm_packed_size(N, K);
        float *W = aligned_alloc64(wn * sizeof(float)), *A = aligned_alloc64((size_t)128 * K * sizeof(float));
        float *C = aligned_alloc64((size_t)128 * N * sizeof(float));
        void *pk = pbytes ? aligned_alloc64(pbytes) : NULL;
        if (!W || !A || !C || !pk) {
            printf("%5s %6d %5d | out of memory\n", "-", N, K);
        } else {
            fill(W, wn, 3);
            fill(A, (size_t)128 * K, 4);
            if (gemm_pack_linear(pk, W, NULL, N, K, 0) == 0)
                for (size_t m = 0; m < sizeof Ms / sizeof Ms[0]; m++) {
                    int M = Ms[m];
                    double best_s = 1e30, best_p = 1e30;
                    for (int r = 0; r < 6; r++) {
                        double t0 = now();
                        dnnl_sgemm('N', 'T', M, N, K, 1.0f, A, K, W, K, 0.0f, C, N);
                        double t1 = now();
                        gemm_packed_forward(C, A, pk, M);
                        double t2 = now();
                        if (r && t1 - t0 < best_s) best_s = t1 - t0;
                        if (r && t2 - t1 < best_p) best_p = t2 - t1;
                    }
                    double fl = 2.0 * M * N * K * 1e-9;
                    printf("%5d %6d %5d | %9.1f %9.1f | %s (%s tiles)\n", M, N, K, fl / best_s, fl / best_p,
                           gemm_packed_kernel_name(pk), f32p_tiles_name());
                }
        }
        aligned_free(W), aligned_free(A), aligned_free(C), aligned_free(pk);
    }
}

static void set_threads(int n) {
    omp_set_num_threads(n);
    openblas_set_num_threads(n);
    kernels_set_num_threads(n);
}

int main(int argc, char **argv) {
    int int8_only = 0, f32_only = 0, only_threads = 0, zoo_only = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--cpu")) use_cpu_time = 1;
        else if (!strcmp(argv[i], "--int8")) int8_only = 1;
        else if (!strcmp(argv[i], "--f32")) f32_only = 1;
        else if (!strcmp(argv[i], "--zoo")) zoo_only = 1;
        else if (!strncmp(argv[i], "--threads=", 10)) only_threads = atoi(argv[i] + 10);
        else if (argv[i][0] != '-') budget = atof(argv[i]);
        else {
            fprintf(stderr, "usage: %s [seconds_per_case] [--cpu] [--int8] [--f32] [--zoo] [--threads=N]\n", argv[0]);
            return 2;
        }
    }
    if (dnnl_engine_create(&engine, dnnl_cpu, 0) != dnnl_success) return 1;
    if (dnnl_stream_create(&stream, engine, dnnl_stream_default_flags) != dnnl_success) return 1;
    const int Ms[] = {1, 4, 16, 64, 128, 256};
    const int NK[][2] = {{512, 512}, {1536, 512}, {2048, 512}, {512, 2048}, {32000, 512}};
    size_t maxA = 256 * 2048, maxB = 32000 * 512, maxC = 256 * 32000;
    float *A = aligned_alloc64(maxA * 4), *B = aligned_alloc64(maxB * 4), *C = aligned_alloc64(maxC * 4);
    if (!A || !B || !C) return 1;
    fill(A, maxA, 1);
    fill(B, maxB, 2);
    printf("# %s\n", openblas_get_config());
    const dnnl_version_t *v = dnnl_version();
    printf("# oneDNN %d.%d.%d, budget %.2f %s s per case; GFLOP/s (higher is better)\n", v->major, v->minor, v->patch,
           budget, use_cpu_time ? "CPU" : "wall");
    for (int threads = 1; threads <= 2; threads++) {
        if (only_threads && threads != only_threads) continue;
        set_threads(threads);
        if (zoo_only) {
            zoo_proj_section(threads);
            continue;
        }
        if (int8_only) goto int8;
        packed_f32_section(threads, A, B, C);
        if (f32_only) continue;
        printf("\n## linear layers, threads=%d: out[M,N] = inp[M,K] . W[N,K]^T\n", threads);
        printf("%5s %6s %5s | %9s %9s | %9s | %s\n", "M", "N", "K", "oneDNN", "OpenBLAS", "packed",
               "gemm_f32 (dispatch)");
        for (size_t s = 0; s < sizeof NK / sizeof NK[0]; s++) {
            int N = NK[s][0], K = NK[s][1];
            size_t pbytes = gemm_packed_size(N, K);
            void *pk = pbytes ? aligned_alloc64(pbytes) : NULL;
            if (pk && gemm_pack_linear(pk, B, NULL, N, K, 0)) {
                aligned_free(pk);
                pk = NULL;
            }
            for (size_t m = 0; m < sizeof Ms / sizeof Ms[0]; m++) {
                int M = Ms[m];
                double fl = 2.0 * M * N * K * 1e-9;
                double td = time_gemm(run_dnnl, 1, M, N, K, A, B, C);
                double tb = time_gemm(run_blas, 1, M, N, K, A, B, C);
                double tp = pk ? time_packed(pk, M, A, C) : 0;
                double tt = time_gemm(run_tern, 1, M, N, K, A, B, C);
                printf("%5d %6d %5d | %9.1f %9.1f | %9.1f | %9.1f %s\n", M, N, K, fl / td, fl / tb,
                       pk ? fl / tp : 0.0, fl / tt, gemm_f32_backend_name(0, 1, M, N, K));
            }
            aligned_free(pk);
        }
        printf("\n## attention, threads=%d, batch=8 heads, head dim 64 (GFLOP/s)\n", threads);
        printf("%-22s | %9s %9s %11s | %s\n", "shape", "loop dnnl", "loop blas", "dnnl matmul", "gemm_f32_batched");
        const int Ls[] = {1, 8, 16, 32, 64};
        for (size_t l = 0; l < sizeof Ls / sizeof Ls[0]; l++) {
            int L = Ls[l];
            for (int kind = 0; kind < 2; kind++) {
                /* kind 0: QK^T (M=1 or L query rows x N=L keys, K=64, tB=1); kind 1: PV (M, N=64, K=L). */
                int M = L, N = kind ? 64 : L, K = kind ? L : 64, tB = kind ? 0 : 1;
                double fl = 2.0 * 8 * M * N * K * 1e-9;
                char name[64];
                snprintf(name, sizeof name, "%s 8x%dx%dx%d", kind ? "PV " : "QKt", M, N, K);
                double t0 = time_batched(0, tB, M, N, K, A, B, C, 8);
                double t1 = time_batched(1, tB, M, N, K, A, B, C, 8);
                double t2 = time_batched(2, tB, M, N, K, A, B, C, 8);
                double t3 = time_batched(3, tB, M, N, K, A, B, C, 8);
                printf("%-22s | %9.2f %9.2f %11.2f | %9.2f\n", name, fl / t0, fl / t1, fl / t2, fl / t3);
            }
        }
    int8:
        printf("\n## int8 linear, threads=%d (GOP/s): linear_forward (quantize + int8 GEMM + dequantize) with %s,\n"
               "## and linear_forward_packed_s8 on weights packed once (\"lin packed\": with VNNI Tern's gemm_s8v, or\n"
               "## oneDNN's int8 matmul with TERN_INT8_PACKED=onednn; else Tern's packed AVX2 int16 kernel gemm_s8p;\n"
               "## 0 where not offered); the bare products: Tern's\n"
               "## exact AVX2 s8s8s32, oneDNN's BLAS-like u8s8s32 (exact only with VNNI: without it its 16-bit pair\n"
               "## sums saturate, so it is a speed reference there, not an option) and the product on the packed\n"
               "## weights (\"packed\": gemm_s8v_forward on signed byte rows, oneDNN's matmul, or gemm_s8p_forward on int16 rows)\n",
               threads, linear_int8_backend_name());
        printf("%5s %6s %5s | %9s %10s | %9s %9s %9s | %9s\n", "M", "N", "K", "linear", "lin packed", "tern s8",
               "onednn u8", "packed", "float32");
        static const int M8[] = {1, 8, 32, 128};
        for (size_t s = 0; s < sizeof NK / sizeof NK[0]; s++) {
            for (size_t m = 0; m < sizeof M8 / sizeof M8[0]; m++) {
                int M = M8[m], N = NK[s][0], K = NK[s][1];
                int8_t *q = aligned_alloc64((size_t)N * K);
                float *scale = aligned_alloc64((size_t)N * 4);
                int32_t *comp = aligned_alloc64((size_t)N * 4);
                quantize_rows_s8(q, scale, B, N, K);
                linear_prepare_s8(comp, q, N, K);
                linear_t ls = {.kind = WEIGHT_S8, .N = N, .K = K, .q = q, .scale = scale, .comp = comp};
                linear_t lf = {.kind = WEIGHT_F32, .N = N, .K = K, .w = B};
                void *ws = aligned_alloc64(linear_workspace_size(&ls, M) + 64);
                size_t pbytes = linear_packed_size_s8(&ls);
                void *pk = pbytes ? aligned_alloc64(pbytes) : NULL;
                if (pk && linear_pack_s8(pk, &ls)) {
                    aligned_free(pk);
                    pk = NULL;
                }
                double fl = 2.0 * M * N * K * 1e-9, ts[3] = {0, 0, 0};
                for (int w = 0; w < 3; w++) {
                    const linear_t *lin = w == 1 ? &lf : &ls;
                    if (w == 2 && !pk) break;
#define RUN_LIN() (w == 2 ? (void)linear_forward_packed_s8(C, A, lin, pk, M, ws) : linear_forward(C, A, lin, M, ws))
                    RUN_LIN();
                    int reps = 0;
                    double t0 = now(), t;
                    do { RUN_LIN(); reps++; t = now() - t0; } while (t < budget);
#undef RUN_LIN
                    ts[w] = t / reps;
                }
                /* bare int8 products on the same bytes */
                uint8_t *au = aligned_alloc64((size_t)M * K);
                int32_t *acc = aligned_alloc64((size_t)M * N * 4);
                for (size_t i = 0; i < (size_t)M * K; i++) au[i] = (uint8_t)(A[i] * 200.0f + 128.0f);
                /* the packed kernel: Tern's VNNI (signed byte rows), Tern's AVX2 (int16 rows) or oneDNN's */
                const char *pkn = linear_int8_packed_kernel_name();
                int s8v_pk = pk && strstr(pkn, "gemm_s8v") != NULL, tern_pk = pk && strstr(pkn, "gemm_s8p") != NULL;
                size_t lda8 = gemm_s8v_a_stride(K);
                int8_t *a8 = aligned_alloc64((size_t)M * lda8 + 64);
                for (int i = 0; i < M; i++)
                    for (size_t k = 0; k < lda8; k++) a8[i * lda8 + k] = k < (size_t)K ? (int8_t)(au[(size_t)i * K + k] - 128) : 0;
                size_t lda16 = gemm_s8p_a_stride(K);
                int16_t *a16 = aligned_alloc64((size_t)M * lda16 * sizeof(int16_t) + 64);
                for (int i = 0; i < M; i++)
                    for (size_t k = 0; k < lda16; k++) a16[i * lda16 + k] = k < (size_t)K ? (int16_t)(au[(size_t)i * K + k] - 128) : 0;
                double tb[3] = {0, 0, 0};
                for (int w = 0; w < 3; w++) {
                    if (w == 2 && !pk) break;
                    if (w == 2 && !tern_pk && !s8v_pk) gemm_packed_forward_s8(acc, au, pk, M); /* makes the kernel */
                    int reps = 0;
                    double t0 = now(), t;
                    do {
                        if (w == 0) gemm_s8s8s32(M, N, K, (const int8_t *)au, K, q, K, acc, N, 0);
                        else if (w == 1) dnnl_gemm_u8s8s32('N', 'T', 'R', M, N, K, 1.0f, au, K, 0, q, K, 0, 0.0f, acc, N, comp);
                        else if (s8v_pk) gemm_s8v_forward(acc, a8, pk, M);
                        else if (tern_pk) gemm_s8p_forward(acc, a16, pk, M);
                        else gemm_packed_forward_s8(acc, au, pk, M);
                        reps++;
                        t = now() - t0;
                    } while (t < budget || reps < 2);
                    tb[w] = t / reps;
                }
#define GOPS(t) ((t) > 0 ? fl / (t) : 0.0)
                printf("%5d %6d %5d | %9.1f %10.1f | %9.1f %9.1f %9.1f | %9.1f\n", M, N, K, GOPS(ts[0]), GOPS(ts[2]),
                       GOPS(tb[0]), GOPS(tb[1]), GOPS(tb[2]), GOPS(ts[1]));
#undef GOPS
                aligned_free(pk);
                aligned_free(au); aligned_free(acc); aligned_free(a16); aligned_free(a8);
                aligned_free(q); aligned_free(scale); aligned_free(comp); aligned_free(ws);
            }
        }
    }
    aligned_free(A); aligned_free(B); aligned_free(C);
    return 0;
}
