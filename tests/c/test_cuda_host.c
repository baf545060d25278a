/*
 * test_cuda_host.c — the host side of the CUDA backend, on every CPU (no GPU needed):
 *
 *   emulate.c: the device row kernels' arithmetic (rowops.h, run thread by thread with the same
 *   tree as kernels.cu) against the double-precision scalar references of kernels_ref.c:
 *     layer norm              |y - ref| <= 1e-5 (1 + |ref|)   (float partial sums over 256 strided
 *                                                             slices and a tree; two-pass variance)
 *     softmax                 |p - ref| <= 1e-6 + 1e-5 ref     (expf's error, the float sum's)
 *     log-softmax             |l - ref| <= 1e-5 (1 + |ref|)
 *     top-k (logits)          exact: the same indices and values as topk_ref, ties by lower index,
 *                             k 1..32, rows of 1..32000 columns, many ties; NaN never selected
 *     top-k (log-probs)       the same indices; values as log-softmax's (1e-5 (1 + |ref|))
 *     embedding + positions,  exact against the scalar formula (one rounding per operation, no
 *     gather, int8 epilogue   contraction: this file and emulate.c are built -ffp-contract=off)
 *     attention (decoder     outputs |o - ref| <= 1e-5 (1 + |ref|), probabilities 1e-6 + 1e-5 p
 *     step, KV cache)        (fmaf chains over the head's 64 features and over up to 1000 keys)
 *   A row of -inf: softmax 0, log-softmax -inf, as the references.
 *
 *   dalloc.c: size classes, reuse of a freed block of the same class, statistics, trimming, the
 *   backend failing once (the cache given back, the request retried), a foreign pointer refused,
 *   and every backend block given back by dalloc_free (counting backend).
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "kernels/cuda/dalloc.h"
#include "kernels/cuda/emulate.h"
#include "kernels/cuda/rowops.h"
#include "kernels/kernels.h"

static uint64_t rng = 88172645463325252ull;
static float urand(void) { /* [-1, 1) */
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (float)((rng >> 40) * (1.0 / (1 << 23)) - 1.0);
}

static void test_layernorm(void) {
    const int Cs[] = {1, 7, 255, 256, 257, 512, 1000, 4096};
    for (size_t ci = 0; ci < sizeof Cs / sizeof *Cs; ci++) {
        int C = Cs[ci], M = 3;
        float *x = malloc(sizeof(float) * M * C), *g = malloc(sizeof(float) * C), *b = malloc(sizeof(float) * C);
        float *y = malloc(sizeof(float) * M * C), *r = malloc(sizeof(float) * M * C);
        for (int i = 0; i < M * C; i++) x[i] = 10.0f + 3.0f * urand(); /* an offset: cancellation */
        for (int c = 0; c < C; c++) g[c] = 1.0f + 0.5f * urand(), b[c] = urand();
        emu_layernorm(y, x, g, b, M, C, 1e-5f);
        layernorm_forward_ref(r, x, g, b, M, C, 1e-5f);
        int bad = 0;
        for (int i = 0; i < M * C; i++)
            if (!(fabsf(y[i] - r[i]) <= 1e-5f * (1 + fabsf(r[i])))) bad++;
        CHECK_MSG(bad == 0, "layer norm C=%d: %d of %d values off", C, bad, M * C);
        free(x), free(g), free(b), free(y), free(r);
    }
}

static void test_softmax(void) {
    const int Cs[] = {1, 3, 256, 300, 1000, 32000};
    for (size_t ci = 0; ci < sizeof Cs / sizeof *Cs; ci++) {
        int C = Cs[ci], M = 3;
        float *x = malloc(sizeof(float) * M * C), *y = malloc(sizeof(float) * M * C), *r = malloc(sizeof(float) * M * C);
        for (int i = 0; i < M * C; i++) x[i] = 8.0f * urand();
        for (int c = 0; c < C; c++) x[2 * C + c] = -INFINITY; /* a row of -inf */
        int bad = 0, badl = 0;
        emu_softmax(y, x, M, C, 0);
        softmax_forward_ref(r, x, M, C);
        for (int i = 0; i < M * C; i++)
            if (!(fabsf(y[i] - r[i]) <= 1e-6f + 1e-5f * r[i])) bad++;
        emu_softmax(y, x, M, C, 1);
        log_softmax_forward_ref(r, x, M, C);
        for (int i = 0; i < M * C; i++)
            if (!(y[i] == r[i] || fabsf(y[i] - r[i]) <= 1e-5f * (1 + fabsf(r[i])))) badl++;
        CHECK_MSG(bad == 0, "softmax C=%d: %d values off", C, bad);
        CHECK_MSG(badl == 0, "log-softmax C=%d: %d values off", C, badl);
        CHECK(y[2 * C] == -INFINITY);
        free(x), free(y), free(r);
    }
}

static void test_topk(void) {
    const int Cs[] = {1, 5, 33, 300, 4096, 32000};
    const int ks[] = {1, 4, 8, 32};
    for (size_t ci = 0; ci < sizeof Cs / sizeof *Cs; ci++)
        for (size_t ki = 0; ki < sizeof ks / sizeof *ks; ki++) {
            int C = Cs[ci], k = ks[ki], M = 2;
            if (k > C) continue;
            float *x = malloc(sizeof(float) * M * C), *ls = malloc(sizeof(float) * M * C);
            float v[2 * ROW_TOPK_MAX], rv[ROW_TOPK_MAX];
            int ix[2 * ROW_TOPK_MAX], ri[ROW_TOPK_MAX];
            for (int i = 0; i < C; i++) x[i] = 4.0f * urand();
            for (int i = 0; i < C; i++) x[C + i] = (float)(int)(3.0f * urand()); /* ties: -2..2 */
            emu_topk(v, ix, x, M, C, k, 0);
            int bad = 0;
            for (int m = 0; m < M; m++) {
                topk_ref(rv, ri, x + (long)m * C, C, k);
                for (int j = 0; j < k; j++)
                    if (ix[m * k + j] != ri[j] || v[m * k + j] != rv[j]) bad++;
            }
            CHECK_MSG(bad == 0, "top-k C=%d k=%d: %d entries differ", C, k, bad);
            /* log-probabilities: the same picks, log-softmax's values */
            emu_topk(v, ix, x, M, C, k, 1);
            log_softmax_forward_ref(ls, x, M, C);
            bad = 0;
            for (int m = 0; m < M; m++) {
                topk_ref(rv, ri, x + (long)m * C, C, k);
                for (int j = 0; j < k; j++) {
                    float want = ls[(long)m * C + ri[j]];
                    if (ix[m * k + j] != ri[j] || !(fabsf(v[m * k + j] - want) <= 1e-5f * (1 + fabsf(want)))) bad++;
                }
            }
            CHECK_MSG(bad == 0, "top-k log-probs C=%d k=%d: %d entries differ", C, k, bad);
            free(x), free(ls);
        }
    /* NaN is never picked; fewer than k finite entries leave index -1 */
    float x[5] = {NAN, 1.0f, NAN, 2.0f, NAN}, v[4];
    int ix[4];
    emu_topk(v, ix, x, 1, 5, 4, 0);
    CHECK(ix[0] == 3 && ix[1] == 1 && ix[2] == -1 && ix[3] == -1 && v[0] == 2.0f && v[2] == -INFINITY);
}

static void test_exact_elementwise(void) {
    enum { M = 5, C = 37, V = 11, P = 9, N = 13 };
    float emb[V * C], pos[P * C], y[M * C], g[M * C];
    int ids[M] = {3, 0, 10, 3, 7}, pids[M] = {0, 1, 2, 8, 4}, rows[M] = {4, 4, 0, 2, 1};
    for (int i = 0; i < V * C; i++) emb[i] = urand();
    for (int i = 0; i < P * C; i++) pos[i] = urand();
    float scale = sqrtf((float)C);
    emu_embed(y, emb, ids, scale, pos, pids, M, C);
    int bad = 0;
    for (int m = 0; m < M; m++)
        for (int c = 0; c < C; c++) {
            float a = emb[ids[m] * C + c] * scale;
            if (y[m * C + c] != a + pos[pids[m] * C + c]) bad++;
        }
    emu_embed(g, emb, ids, scale, NULL, NULL, M, C);
    for (int m = 0; m < M; m++)
        for (int c = 0; c < C; c++)
            if (g[m * C + c] != emb[ids[m] * C + c] * scale) bad++;
    CHECK_MSG(bad == 0, "embedding: %d values differ", bad);
    emu_gather_rows(g, y, rows, M, C);
    for (int i = 0; i < M; i++) CHECK(memcmp(g + i * C, y + rows[i] * C, C * sizeof(float)) == 0);
    int32_t acc[M * N];
    float sa[M], sw[N], bias[N], out[M * N];
    for (int i = 0; i < M * N; i++) acc[i] = (int32_t)(urand() * 2e6);
    for (int m = 0; m < M; m++) sa[m] = 127.0f / (1 + fabsf(urand()));
    for (int n = 0; n < N; n++) sw[n] = 127.0f / (0.1f + fabsf(urand())), bias[n] = urand();
    emu_dequant(out, acc, sa, sw, bias, M, N);
    bad = 0;
    for (int m = 0; m < M; m++)
        for (int n = 0; n < N; n++)
            if (out[m * N + n] != (float)acc[m * N + n] / (sa[m] * sw[n]) + bias[n]) bad++;
    CHECK_MSG(bad == 0, "int8 epilogue: %d values differ", bad);
}

/* A decoder step's attention against a double-precision reference: rows with 0, 1 and up to
 * 1000 keys, several query rows reading one cache row (cross-attention's beams), 4 heads of 64. */
static void test_attention(void) {
    enum { R = 6, H = 4, DH = 64, SMAX = 1000, C = H * DH };
    const int len[R] = {0, 1, 7, 300, 1000, 300};
    const int kv[R] = {0, 1, 2, 3, 4, 3};
    float *q = malloc(sizeof(float) * R * C), *K = malloc(sizeof(float) * 5L * SMAX * C);
    float *V = malloc(sizeof(float) * 5L * SMAX * C), *out = malloc(sizeof(float) * R * C);
    float *probs = malloc(sizeof(float) * R * H * SMAX);
    double *sc = malloc(sizeof(double) * SMAX);
    for (int i = 0; i < R * C; i++) q[i] = urand();
    for (long i = 0; i < 5L * SMAX * C; i++) K[i] = urand(), V[i] = urand();
    float scale = 1.0f / 8.0f;
    emu_attention(out, probs, q, K, V, kv, len, (long)SMAX * C, C, R, H, DH, SMAX, scale);
    int bad = 0, badp = 0;
    for (int r = 0; r < R; r++)
        for (int h = 0; h < H; h++) {
            const float *qr = q + (long)r * C + h * DH;
            const float *Kr = K + (long)kv[r] * SMAX * C + h * DH, *Vr = V + (long)kv[r] * SMAX * C + h * DH;
            int n = len[r];
            double mx = -INFINITY, sum = 0;
            for (int j = 0; j < n; j++) {
                double s = 0;
                for (int d = 0; d < DH; d++) s += (double)qr[d] * Kr[(long)j * C + d];
                sc[j] = s * scale;
                mx = sc[j] > mx ? sc[j] : mx;
            }
            for (int j = 0; j < n; j++) sum += exp(sc[j] - mx);
            for (int j = 0; j < n; j++) {
                sc[j] = exp(sc[j] - mx) / sum;
                float got = probs[((long)r * H + h) * SMAX + j];
                if (!(fabs(got - sc[j]) <= 1e-6 + 1e-5 * sc[j])) badp++;
            }
            for (int d = 0; d < DH; d++) {
                double o = 0;
                for (int j = 0; j < n; j++) o += sc[j] * Vr[(long)j * C + d];
                if (!(fabs(out[(long)r * C + h * DH + d] - o) <= 1e-5 * (1 + fabs(o)))) bad++;
            }
        }
    CHECK_MSG(bad == 0, "attention: %d outputs off", bad);
    CHECK_MSG(badp == 0, "attention: %d probabilities off", badp);
    for (int d = 0; d < C; d++) CHECK(out[d] == 0.0f); /* row 0 has no keys */
    free(q), free(K), free(V), free(out), free(probs), free(sc);
}

/* A counting backend over malloc that can be told to fail. */
typedef struct {
    long live, fail_next;
} counting_t;
static void *c_alloc(size_t n, void *ctx) {
    counting_t *c = ctx;
    if (c->fail_next > 0) {
        c->fail_next--;
        return NULL;
    }
    c->live++;
    return malloc(n);
}
static void c_release(void *p, void *ctx) {
    ((counting_t *)ctx)->live--;
    free(p);
}

static void test_dalloc(void) {
    CHECK(dalloc_round(0) == 0 && dalloc_round(1) == 512 && dalloc_round(512) == 512 && dalloc_round(513) == 1024);
    CHECK(dalloc_round((size_t)1 << 20) == (size_t)1 << 20);
    CHECK(dalloc_round(((size_t)1 << 20) + 1) == (size_t)2 << 20);
    CHECK(dalloc_round(((size_t)5 << 20) + 7) == (size_t)6 << 20);
    CHECK(dalloc_round((size_t)-1) == 0);
    counting_t cnt = {0, 0};
    dalloc_t *a = dalloc_new((dalloc_backend_t){c_alloc, c_release, &cnt});
    CHECK(a != NULL);
    CHECK(dalloc_get(a, 0) == NULL);
    void *p = dalloc_get(a, 1000), *q = dalloc_get(a, 3000);
    CHECK(p && q && p != q);
    dalloc_stats_t s = dalloc_stats(a);
    CHECK(s.in_use == 1024 + 3072 && s.cached == 0 && s.backend_allocs == 2 && s.hits == 0);
    CHECK(dalloc_put(a, p) == 0);
    CHECK(dalloc_put(a, p) == -1);           /* already free */
    CHECK(dalloc_put(a, (void *)&cnt) == -1); /* not ours */
    void *r = dalloc_get(a, 1024); /* the same class: the cached block */
    CHECK(r == p);
    s = dalloc_stats(a);
    CHECK(s.hits == 1 && s.backend_allocs == 2 && s.in_use == 1024 + 3072 && s.cached == 0);
    void *big = dalloc_get(a, 3u << 20);
    CHECK(big != NULL && dalloc_stats(a).in_use == 1024 + 3072 + (4u << 20));
    CHECK(dalloc_put(a, big) == 0 && dalloc_stats(a).cached == 4u << 20);
    /* the backend fails once: the cached 4 MiB go back, the request is retried and succeeds */
    cnt.fail_next = 1;
    void *other = dalloc_get(a, 7u << 20);
    s = dalloc_stats(a);
    CHECK(other != NULL && s.cached == 0 && s.backend_frees == 1 && s.in_use == 1024 + 3072 + (8u << 20));
    CHECK(s.peak >= 1024 + 3072 + (8u << 20));
    /* failing twice: NULL, nothing leaked */
    cnt.fail_next = 2;
    CHECK(dalloc_get(a, 100) == NULL);
    CHECK(dalloc_put(a, q) == 0);
    dalloc_trim(a);
    CHECK(dalloc_stats(a).cached == 0 && cnt.live == 2);
    dalloc_free(a); /* blocks in use given back too */
    CHECK(cnt.live == 0);
    CHECK(dalloc_new((dalloc_backend_t){NULL, c_release, NULL}) == NULL);
}

int main(void) {
    test_layernorm();
    test_softmax();
    test_topk();
    test_exact_elementwise();
    test_attention();
    test_dalloc();
    return check_report("test_cuda_host");
}
