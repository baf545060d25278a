/*
 * test_cuda_kernels.cu — the CUDA row kernels on a GPU against their host emulation (emulate.c,
 * itself tested against kernels_ref.c on every CPU by tests/c/test_cuda_host.c), on the same
 * random inputs:
 *   layer norm, top-k (logit values and indices), embedding + positions, gathers, int8 epilogue:
 *     bit-identical (the same float operations in the same order, no contraction on either side);
 *   softmax, log-softmax, top-k's log-probability values, attention (the same fmaf chains, the
 *     softmax's expf): within the device's expf/logf error,
 *     |d - h| <= 1e-6 (1 + |h|) (4 ulp-ish of CUDA's documented 2-ulp expf, 1-ulp logf).
 *   cuBLASLt products (tern_cuda_gemm, row-major, all transposes; float32 without TF32, float16
 *     and bfloat16 inputs with float32 sums): within 1e-5 sum_k |a b| of a double product of the
 *     same inputs; int8 (tern_cuda_gemm_s8): exact against an int64 product.
 * Without a GPU it prints "no CUDA device" and exits 77 (scripts/gpu_check.sh runs it only where
 * one is; the CPU test suite only compiles it).
 */
#include <cuda_runtime.h>

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

extern "C" {
#include "kernels/cuda/emulate.h"
}
#include "kernels/cuda/gemm_cuda.h"
#include "kernels/cuda/kernels_cuda.h"
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include "kernels/cuda/rowops.h"

static int checks = 0, failures = 0;
#define CHECK_MSG(cond, ...)                                                                                           \
    do {                                                                                                               \
        checks++;                                                                                                      \
        if (!(cond)) {                                                                                                 \
            failures++;                                                                                                \
            fprintf(stderr, "%s:%d: CHECK failed: %s: ", __FILE__, __LINE__, #cond);                                   \
            fprintf(stderr, __VA_ARGS__);                                                                              \
            fputc('\n', stderr);                                                                                       \
        }                                                                                                              \
    } while (0)

#define CUDA_OK(x)                                                                                                     \
    do {                                                                                                               \
        cudaError_t e_ = (x);                                                                                          \
        if (e_ != cudaSuccess) {                                                                                       \
            fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_));                         \
            exit(1);                                                                                                   \
        }                                                                                                              \
    } while (0)

static uint64_t rng = 88172645463325252ull;
static float urand(void) {
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (float)((rng >> 40) * (1.0 / (1 << 23)) - 1.0);
}

template <class X>
static X *up(const X *h, size_t n) {
    X *d;
    CUDA_OK(cudaMalloc(&d, n * sizeof(X) + 1));
    CUDA_OK(cudaMemcpy(d, h, n * sizeof(X), cudaMemcpyHostToDevice));
    return d;
}
template <class X>
static void down(X *h, const X *d, size_t n) {
    CUDA_OK(cudaDeviceSynchronize());
    CUDA_OK(cudaMemcpy(h, d, n * sizeof(X), cudaMemcpyDeviceToHost));
}

static long count_diff(const float *a, const float *b, long n, float rel) {
    long bad = 0;
    for (long i = 0; i < n; i++) {
        if (rel == 0) bad += memcmp(a + i, b + i, sizeof(float)) != 0;
        else bad += !(a[i] == b[i] || fabsf(a[i] - b[i]) <= rel * (1 + fabsf(b[i])));
    }
    return bad;
}

int main(void) {
    if (tern_cuda_device_count() == 0) {
        printf("no CUDA device\n");
        return 77;
    }
    cudaDeviceProp prop;
    CUDA_OK(cudaGetDeviceProperties(&prop, 0));
    printf("device: %s (sm_%d%d)\n", prop.name, prop.major, prop.minor);
    const int Cs[] = {1, 7, 255, 256, 257, 1000, 4096, 32000};
    for (int ci = 0; ci < (int)(sizeof Cs / sizeof *Cs); ci++) {
        int C = Cs[ci], M = 37;
        long n = (long)M * C;
        float *x = (float *)malloc(n * sizeof(float)), *g = (float *)malloc(C * sizeof(float));
        float *b = (float *)malloc(C * sizeof(float)), *h = (float *)malloc(n * sizeof(float));
        float *d = (float *)malloc(n * sizeof(float));
        for (long i = 0; i < n; i++) x[i] = 10.0f + 3.0f * urand();
        for (int c = 0; c < C; c++) g[c] = 1 + 0.5f * urand(), b[c] = urand();
        for (int c = 0; c < C; c++) x[C + c] = -INFINITY; /* row 1: all -inf (softmax's case) */
        for (int c = 0; c < C; c++) x[2 * C + c] = (float)(int)(3 * urand()); /* row 2: ties */
        float *dx = up(x, n), *dg = up(g, C), *db = up(b, C), *dy;
        CUDA_OK(cudaMalloc(&dy, n * sizeof(float)));
        /* layer norm (rows without -inf) */
        emu_layernorm(h + 2 * C, x + 2 * C, g, b, M - 2, C, 1e-5f);
        CHECK_MSG(tern_cuda_layernorm(dy + 2 * C, dx + 2 * C, dg, db, M - 2, C, 1e-5f, NULL) == 0, "%s",
                  tern_cuda_last_error());
        down(d + 2 * C, dy + 2 * C, n - 2 * C);
        long bad = count_diff(d + 2 * C, h + 2 * C, n - 2 * C, 0);
        CHECK_MSG(bad == 0, "layer norm C=%d: %ld values not bit-identical", C, bad);
        for (int lg = 0; lg < 2; lg++) {
            emu_softmax(h, x, M, C, lg);
            CHECK_MSG(tern_cuda_softmax(dy, dx, M, C, lg, NULL) == 0, "%s", tern_cuda_last_error());
            down(d, dy, n);
            bad = count_diff(d, h, n, 1e-6f);
            CHECK_MSG(bad == 0, "%s C=%d: %ld values off", lg ? "log-softmax" : "softmax", C, bad);
        }
        const int ks[] = {1, 4, 10, 32};
        for (int ki = 0; ki < 4; ki++) {
            int k = ks[ki];
            if (k > C) continue;
            for (int lp = 0; lp < 2; lp++) {
                float *hv = (float *)malloc(M * k * sizeof(float)), *dv = (float *)malloc(M * k * sizeof(float));
                int *hi = (int *)malloc(M * k * sizeof(int)), *di = (int *)malloc(M * k * sizeof(int));
                float *gv;
                int *gi;
                CUDA_OK(cudaMalloc(&gv, M * k * sizeof(float)));
                CUDA_OK(cudaMalloc(&gi, M * k * sizeof(int)));
                emu_topk(hv, hi, x, M, C, k, lp);
                CHECK_MSG(tern_cuda_topk(gv, gi, dx, M, C, k, lp, NULL) == 0, "%s", tern_cuda_last_error());
                down(dv, gv, M * k);
                down(di, gi, M * k);
                CHECK_MSG(memcmp(di, hi, M * k * sizeof(int)) == 0, "top-k C=%d k=%d: indices differ", C, k);
                bad = count_diff(dv, hv, M * k, lp ? 1e-6f : 0);
                CHECK_MSG(bad == 0, "top-k%s C=%d k=%d: %ld values off", lp ? " log-probs" : "", C, k, bad);
                cudaFree(gv), cudaFree(gi), free(hv), free(dv), free(hi), free(di);
            }
        }
        /* gathers and embeddings over the rows of x as a table */
        int rows[64], pids[64];
        for (int i = 0; i < 64; i++) rows[i] = (int)((urand() + 1) * 0.5f * (M - 1)), pids[i] = (i * 7) % M;
        rows[0] = M - 1;
        int *drows = up(rows, 64), *dpids = up(pids, 64);
        float *dz;
        CUDA_OK(cudaMalloc(&dz, 64L * C * sizeof(float)));
        float *hz = (float *)malloc(64L * C * sizeof(float)), *gz = (float *)malloc(64L * C * sizeof(float));
        emu_gather_rows(hz, x, rows, 64, C);
        CHECK_MSG(tern_cuda_gather_rows(dz, dx, drows, 64, C, NULL) == 0, "%s", tern_cuda_last_error());
        down(gz, dz, 64L * C);
        CHECK_MSG(memcmp(gz, hz, 64L * C * sizeof(float)) == 0, "gather C=%d differs", C);
        for (int i = 0; i < 64; i++) rows[i] = rows[i] == 1 ? 0 : rows[i]; /* no -inf row as an embedding */
        CUDA_OK(cudaMemcpy(drows, rows, sizeof rows, cudaMemcpyHostToDevice));
        float scale = sqrtf((float)C);
        for (int withpos = 0; withpos < 2; withpos++) {
            emu_embed(hz, x, rows, scale, withpos ? x : NULL, pids, 64, C);
            CHECK_MSG(tern_cuda_embed(dz, dx, drows, scale, withpos ? dx : NULL, dpids, 64, C, NULL) == 0, "%s",
                      tern_cuda_last_error());
            down(gz, dz, 64L * C);
            bad = count_diff(gz, hz, 64L * C, 0);
            CHECK_MSG(bad == 0, "embedding C=%d (positions %d): %ld values differ", C, withpos, bad);
        }
        /* the int8 epilogue: M x C int32 sums */
        int32_t *acc = (int32_t *)malloc(n * sizeof(int32_t));
        float *sa = (float *)malloc(M * sizeof(float)), *sw = (float *)malloc(C * sizeof(float));
        for (long i = 0; i < n; i++) acc[i] = (int32_t)(urand() * 2e6f);
        for (int m = 0; m < M; m++) sa[m] = 127 / (1 + fabsf(urand()));
        for (int c = 0; c < C; c++) sw[c] = 127 / (0.1f + fabsf(urand()));
        int32_t *dacc = up(acc, n);
        float *dsa = up(sa, M), *dsw = up(sw, C);
        emu_dequant(h, acc, sa, sw, b, M, C);
        CHECK_MSG(tern_cuda_dequant(dy, dacc, dsa, dsw, db, M, C, NULL) == 0, "%s", tern_cuda_last_error());
        down(d, dy, n);
        bad = count_diff(d, h, n, 0);
        CHECK_MSG(bad == 0, "int8 epilogue C=%d: %ld values differ", C, bad);
        cudaFree(dacc), cudaFree(dsa), cudaFree(dsw), free(acc), free(sa), free(sw);
        cudaFree(drows), cudaFree(dpids), cudaFree(dz), free(hz), free(gz);
        cudaFree(dx), cudaFree(dg), cudaFree(db), cudaFree(dy);
        free(x), free(g), free(b), free(h), free(d);
    }
    /* a decoder step's attention: 0..1000 keys, rows sharing a cache row, probabilities too */
    {
        enum { R = 6, H = 4, DH = 64, SMAX = 1000, C = H * DH };
        int len[R] = {0, 1, 7, 300, 1000, 300}, kv[R] = {0, 1, 2, 3, 4, 3};
        long nkv = 5L * SMAX * C;
        float *q = (float *)malloc(R * C * sizeof(float)), *K = (float *)malloc(nkv * sizeof(float));
        float *V = (float *)malloc(nkv * sizeof(float));
        float *ho = (float *)malloc(R * C * sizeof(float)), *go = (float *)malloc(R * C * sizeof(float));
        float *hp = (float *)calloc((size_t)R * H * SMAX, sizeof(float)), *gp = (float *)malloc((size_t)R * H * SMAX * sizeof(float));
        for (int i = 0; i < R * C; i++) q[i] = urand();
        for (long i = 0; i < nkv; i++) K[i] = urand(), V[i] = urand();
        float *dq = up(q, R * C), *dK = up(K, nkv), *dV = up(V, nkv), *dout, *dprobs;
        int *dkv = up(kv, R), *dlen = up(len, R);
        CUDA_OK(cudaMalloc(&dout, R * C * sizeof(float)));
        CUDA_OK(cudaMalloc(&dprobs, (size_t)R * H * SMAX * sizeof(float)));
        CUDA_OK(cudaMemset(dprobs, 0, (size_t)R * H * SMAX * sizeof(float)));
        emu_attention(ho, hp, q, K, V, kv, len, (long)SMAX * C, C, R, H, DH, SMAX, 0.125f);
        CHECK_MSG(tern_cuda_attention(dout, dprobs, dq, dK, dV, dkv, dlen, (long)SMAX * C, C, R, H, DH, SMAX, 0.125f,
                                      NULL) == 0, "%s", tern_cuda_last_error());
        down(go, dout, R * C);
        down(gp, dprobs, (size_t)R * H * SMAX);
        long bad = count_diff(go, ho, R * C, 1e-6f), badp = count_diff(gp, hp, (long)R * H * SMAX, 1e-6f);
        CHECK_MSG(bad == 0 && badp == 0, "attention: %ld outputs, %ld probabilities off", bad, badp);
        cudaFree(dq), cudaFree(dK), cudaFree(dV), cudaFree(dout), cudaFree(dprobs), cudaFree(dkv), cudaFree(dlen);
        free(q), free(K), free(V), free(ho), free(go), free(hp), free(gp);
    }
    /* cuBLASLt products, row-major, every transpose: float32 (no TF32), float16 and bfloat16 inputs
     * (float32 sums) within 1e-5 of sum_k |a b| of a double product of the same (rounded) inputs;
     * int8 exact against an int64 product */
    {
        tern_cuda_gemm_t *g = NULL;
        CHECK_MSG(tern_cuda_gemm_create(&g, 32u << 20) == 0, "%s", tern_cuda_gemm_last_error());
        const int shapes[][3] = {{1, 1, 1}, {7, 33, 65}, {64, 512, 256}, {130, 1000, 512}};
        for (int si = 0; g && si < 4; si++)
            for (int dt = 0; dt < 3; dt++)
                for (int tr = 0; tr < 4; tr++) {
                    int M = shapes[si][0], N = shapes[si][1], K = shapes[si][2], ta = tr & 1, tb = tr >> 1;
                    int lda = ta ? M : K, ldb = tb ? K : N;
                    float *a = (float *)malloc((size_t)M * K * 4), *b = (float *)malloc((size_t)K * N * 4);
                    float *c = (float *)malloc((size_t)M * N * 4);
                    size_t es = dt == 0 ? 4 : 2;
                    unsigned char *ha = (unsigned char *)malloc((size_t)M * K * es), *hb = (unsigned char *)malloc((size_t)K * N * es);
                    for (long i = 0; i < (long)M * K; i++) {
                        float v = urand();
                        if (dt == 1) { __half h = __float2half(v); memcpy(ha + i * 2, &h, 2); v = __half2float(h); }
                        else if (dt == 2) { __nv_bfloat16 h = __float2bfloat16(v); memcpy(ha + i * 2, &h, 2); v = __bfloat162float(h); }
                        else memcpy(ha + i * 4, &v, 4);
                        a[i] = v;
                    }
                    for (long i = 0; i < (long)K * N; i++) {
                        float v = urand();
                        if (dt == 1) { __half h = __float2half(v); memcpy(hb + i * 2, &h, 2); v = __half2float(h); }
                        else if (dt == 2) { __nv_bfloat16 h = __float2bfloat16(v); memcpy(hb + i * 2, &h, 2); v = __bfloat162float(h); }
                        else memcpy(hb + i * 4, &v, 4);
                        b[i] = v;
                    }
                    unsigned char *da = up(ha, (size_t)M * K * es), *db2 = up(hb, (size_t)K * N * es);
                    float *dc;
                    CUDA_OK(cudaMalloc(&dc, (size_t)M * N * 4));
                    CHECK_MSG(tern_cuda_gemm(g, (tern_cuda_dtype_t)dt, ta, tb, M, N, K, 1.0f, da, lda, db2, ldb, 0.0f, dc, N,
                                             NULL) == 0, "%s", tern_cuda_gemm_last_error());
                    down(c, dc, (size_t)M * N);
                    long bad = 0;
                    for (int m = 0; m < M; m++)
                        for (int n = 0; n < N; n++) {
                            double s = 0, mag = 0;
                            for (int k = 0; k < K; k++) {
                                double x = ta ? a[(long)k * M + m] : a[(long)m * K + k];
                                double y = tb ? b[(long)n * K + k] : b[(long)k * N + n];
                                s += x * y, mag += fabs(x * y);
                            }
                            if (!(fabs(c[(long)m * N + n] - s) <= 1e-5 * mag + 1e-30)) bad++;
                        }
                    CHECK_MSG(bad == 0, "gemm dtype %d M %d N %d K %d transA %d transB %d: %ld values off", dt, M, N, K, ta,
                              tb, bad);
                    cudaFree(da), cudaFree(db2), cudaFree(dc), free(a), free(b), free(c), free(ha), free(hb);
                }
        const int s8[][3] = {{1, 4, 4}, {5, 33, 64}, {64, 512, 512}};
        for (int si = 0; g && si < 3; si++) {
            int M = s8[si][0], N = s8[si][1], K = s8[si][2];
            int8_t *a = (int8_t *)malloc((size_t)M * K), *w = (int8_t *)malloc((size_t)N * K);
            int32_t *c = (int32_t *)malloc((size_t)M * N * 4);
            for (long i = 0; i < (long)M * K; i++) a[i] = (int8_t)(urand() * 127.9f);
            for (long i = 0; i < (long)N * K; i++) w[i] = (int8_t)(urand() * 127.9f);
            a[0] = -127, w[0] = -127;
            int8_t *da = up(a, (size_t)M * K), *dw = up(w, (size_t)N * K);
            int32_t *dc;
            CUDA_OK(cudaMalloc(&dc, (size_t)M * N * 4));
            CHECK_MSG(tern_cuda_gemm_s8(g, M, N, K, da, dw, dc, NULL) == 0, "%s", tern_cuda_gemm_last_error());
            down(c, dc, (size_t)M * N);
            long bad = 0;
            for (int m = 0; m < M; m++)
                for (int n = 0; n < N; n++) {
                    long long s = 0;
                    for (int k = 0; k < K; k++) s += (long long)a[(long)m * K + k] * w[(long)n * K + k];
                    bad += s != c[(long)m * N + n];
                }
            CHECK_MSG(bad == 0, "int8 gemm M %d N %d K %d: %ld values differ", M, N, K, bad);
            cudaFree(da), cudaFree(dw), cudaFree(dc), free(a), free(w), free(c);
        }
        CHECK_MSG(g && tern_cuda_gemm_s8(g, 1, 1, 3, NULL, NULL, NULL, NULL) == -1, "K = 3 accepted");
        tern_cuda_gemm_free(g);
    }
    /* bad arguments: an error naming the function, nothing launched */
    CHECK_MSG(tern_cuda_topk(NULL, NULL, NULL, 1, 10, 33, 0, NULL) == -1 &&
                  strstr(tern_cuda_last_error(), "tern_cuda_topk") != NULL,
              "%s", tern_cuda_last_error());
    CHECK_MSG(tern_cuda_layernorm(NULL, NULL, NULL, NULL, 1, 0, 1e-5f, NULL) == -1, "C = 0 accepted");
    printf("test_cuda_kernels: %d checks, %d failed\n", checks, failures);
    return failures ? 1 : 0;
}
