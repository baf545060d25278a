/*
 * test_screen.c — the int8 pre-screen of a float32 layer's argmax (src/kernels/screen.h) and the
 * reader of packed float32 weights it uses (gemm_packed_offsets / gemm_packed_weight_at).
 *
 *   packed layout reader   every W[n, k] read back from the packed form equals the plain weight
 *                          (shapes where this CPU packs; none under the AVX2 cap)
 *   bound                  for every element, |y - approx| <= err, for y the real value (double
 *                          sum), the float32 value summed with one fma per k in order (the scalar
 *                          reference below) and, where packed, oneDNN's packed kernel's value;
 *                          the largest ratio |y - approx| / err is printed
 *   argmax                 on random rows, rows with a dominant token, and rows with exact and
 *                          near ties (duplicated and one-ulp-perturbed weight rows, biases set to
 *                          make two outputs within 1e-6), the argmax of linear_screen_forward's
 *                          output (first index on ties) equals that of the full float32 outputs:
 *                          the scalar fma reference, and oneDNN's packed kernel where packed; every
 *                          output either equals the reference bit for bit (the candidates, at
 *                          least as many as the call returned) or lies below the row's largest;
 *                          the mean number of candidates per row is printed
 *   fallback               an input row with NaN or infinity is refused (-1)
 * Plain and packed weight sources, 1 and 2 threads.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "check.h"
#include "kernels/gemm_packed.h"
#include "kernels/kernels.h"
#include "kernels/screen.h"

static unsigned g_seed = 12345;
static float urand(void) { /* [-0.5, 0.5) */
    g_seed = g_seed * 1103515245u + 12345u;
    return (float)((g_seed >> 8) & 0xffffff) / 16777216.0f - 0.5f;
}
static float grand(void) { return (urand() + urand() + urand() + urand()) * 1.7f; }

/* the float32 layer as a scalar loop: one fma per k in increasing k, then the bias */
static float ref_dot(const float *x, const float *w, int K, float b) {
    float a = 0;
    for (int k = 0; k < K; k++) a = fmaf(x[k], w[k], a);
    return a + b;
}

static int first_argmax(const float *y, int N) {
    int b = 0;
    for (int n = 1; n < N; n++)
        if (y[n] > y[b]) b = n;
    return b;
}

static void test_layout(int N, int K) {
    size_t bytes = gemm_packed_size(N, K);
    if (!bytes) return;
    float *W = malloc((size_t)N * K * sizeof(float));
    for (size_t i = 0; i < (size_t)N * K; i++) W[i] = urand();
    void *pk = aligned_alloc64(bytes);
    CHECK(gemm_pack_linear(pk, W, NULL, N, K, 0) == 0);
    int64_t *ok = malloc((size_t)K * sizeof(int64_t)), *on = malloc((size_t)N * sizeof(int64_t));
    CHECK(gemm_packed_offsets(pk, ok, on) == 0);
    size_t wb;
    const float *pw = gemm_packed_weights(pk, &wb);
    long bad = 0;
    for (int n = 0; n < N; n++)
        for (int k = 0; k < K; k++) {
            float v = W[(size_t)n * K + k];
            bad += pw[ok[k] + on[n]] != v || gemm_packed_weight_at(pk, n, k) != v;
            bad += ok[k] + on[n] < 0 || (size_t)(ok[k] + on[n]) >= wb / sizeof(float);
        }
    CHECK_MSG(bad == 0, "packed layout %dx%d: %ld weights read back wrong", N, K, bad);
    printf("packed layout %dx%d: every weight read back\n", N, K);
    free(ok), free(on), aligned_free(pk), free(W);
}

/* One shape: W (N, K) with some duplicated / perturbed rows, rows of several kinds. */
static void test_shape(int N, int K, int M, int threads, int use_packed, int with_bias) {
    kernels_set_num_threads(threads);
    float *W = malloc((size_t)N * K * sizeof(float)), *b = malloc((size_t)N * sizeof(float));
    for (size_t i = 0; i < (size_t)N * K; i++) W[i] = grand() * 0.05f;
    for (int n = 0; n < N; n++) b[n] = grand() * 0.5f;
    /* exact duplicates (ties), and rows one ulp away from another (near ties) */
    for (int n = 8; n + 2 < N; n += 97) {
        memcpy(W + (size_t)(n + 1) * K, W + (size_t)n * K, (size_t)K * sizeof(float));
        memcpy(W + (size_t)(n + 2) * K, W + (size_t)n * K, (size_t)K * sizeof(float));
        float *p = W + (size_t)(n + 2) * K + (n % K);
        *p = nextafterf(*p, INFINITY);
        b[n + 1] = b[n + 2] = b[n];
    }
    const float *bias = with_bias ? b : NULL;
    void *pk = NULL;
    size_t pbytes = use_packed ? gemm_packed_size(N, K) : 0;
    if (use_packed && !pbytes) {
        free(W), free(b);
        return; /* no packed kernel for this shape here */
    }
    if (pbytes) {
        pk = aligned_alloc64(pbytes);
        CHECK(gemm_pack_linear(pk, W, bias, N, K, 0) == 0);
    }
    /* packed: the screen reads (and quantizes) the rows back from the packed form */
    linear_screen_t *s = linear_screen_new(pk ? NULL : W, pk, bias, N, K);
    CHECK(s != NULL);
    if (!s) return;
    float *x = malloc((size_t)M * K * sizeof(float));
    int *kind = malloc((size_t)M * sizeof(int));
    for (int m = 0; m < M; m++) {
        float *r = x + (size_t)m * K;
        kind[m] = m % 4;
        float amp = m % 3 == 0 ? 1.0f : m % 3 == 1 ? 8.0f : 0.05f;
        for (int k = 0; k < K; k++) r[k] = grand() * amp;
        if (kind[m] == 1 || kind[m] == 2) { /* a dominant token: the row leans on a weight row */
            int t = kind[m] == 2 ? 8 + 97 * ((m / 4) % ((N - 10) / 97 + 1)) : (int)((urand() + 0.5f) * (N - 1));
            if (t >= N) t = N - 1;
            for (int k = 0; k < K; k++) r[k] += W[(size_t)t * K + k] * (kind[m] == 1 ? 40.0f : 25.0f);
        }
    }
    /* rows of kind 3: the bias of the runner-up moved to make it within ~1e-6 of the best */
    float *y = malloc((size_t)M * N * sizeof(float)), *yp = malloc((size_t)M * N * sizeof(float));
    double *yd = malloc((size_t)M * N * sizeof(double));
    float *approx = malloc((size_t)M * N * sizeof(float)), *err = malloc((size_t)M * N * sizeof(float));
    float *out = malloc((size_t)M * N * sizeof(float));
    void *ws = aligned_alloc64(linear_screen_workspace_size(s, M) + 64);
    /* bound: on the rows as they are */
    for (int m = 0; m < M; m++)
        for (int n = 0; n < N; n++) {
            const float *xr = x + (size_t)m * K, *w = W + (size_t)n * K;
            double d = bias ? bias[n] : 0;
            for (int k = 0; k < K; k++) d += (double)xr[k] * w[k];
            yd[(size_t)m * N + n] = d;
            y[(size_t)m * N + n] = ref_dot(xr, w, K, bias ? bias[n] : 0.0f);
        }
    if (pk) CHECK(gemm_packed_forward(yp, x, pk, M) == 0);
    CHECK(linear_screen_bounds(approx, err, x, s, M, ws) == 0);
    double worst = 0;
    long over = 0;
    for (size_t i = 0; i < (size_t)M * N; i++) {
        double e = err[i];
        double r1 = fabs(yd[i] - approx[i]) / e, r2 = fabs((double)y[i] - approx[i]) / e;
        double r3 = pk ? fabs((double)yp[i] - approx[i]) / e : 0;
        double r = r1 > r2 ? r1 : r2;
        r = r > r3 ? r : r3;
        if (!(r <= 1.0)) over++;
        if (r > worst) worst = r;
    }
    CHECK_MSG(over == 0, "%dx%d: %ld outputs outside their bound", N, K, over);
    /* argmax: the rows as they are, then with near ties made through the bias (kind 3) */
    long cands = 0, rows = 0, ties = 0;
    for (int pass = 0; pass < 2; pass++) {
        float *b2 = NULL;
        if (pass == 1) {
            if (!bias) break;
            /* per row of kind 3, set the runner-up's bias so it lands within ~1e-6 of the best:
             * one shared bias is changed per pass, so only the first such row is steered */
            int m3 = -1;
            for (int m = 0; m < M && m3 < 0; m++)
                if (kind[m] == 3) m3 = m;
            if (m3 < 0) break;
            int best = first_argmax(y + (size_t)m3 * N, N), second = best == 0 ? 1 : 0;
            for (int n = 0; n < N; n++)
                if (n != best && y[(size_t)m3 * N + n] > y[(size_t)m3 * N + second]) second = n;
            b2 = b; /* bias is b: steer it in place, re-pack and rebuild */
            b2[second] += (y[(size_t)m3 * N + best] - y[(size_t)m3 * N + second]) - 1e-6f * fabsf(y[(size_t)m3 * N + best]);
            linear_screen_free(s);
            if (pk) CHECK(gemm_pack_linear(pk, W, bias, N, K, 0) == 0);
            s = linear_screen_new(pk ? NULL : W, pk, bias, N, K);
            CHECK(s != NULL);
            if (!s) break;
            for (int m = 0; m < M; m++)
                for (int n = 0; n < N; n++)
                    y[(size_t)m * N + n] = ref_dot(x + (size_t)m * K, W + (size_t)n * K, K, bias[n]);
            if (pk) CHECK(gemm_packed_forward(yp, x, pk, M) == 0);
        }
        long r = linear_screen_forward(out, x, s, M, ws);
        CHECK_MSG(r >= M, "%dx%d: screen refused (%ld)", N, K, r);
        if (r < M) break;
        cands += r;
        rows += M;
        long bad_arg = 0, bad_val = 0, bad_pk = 0, bad_inf = 0, got = 0;
        for (int m = 0; m < M; m++) {
            const float *o = out + (size_t)m * N, *yr = y + (size_t)m * N;
            int a = first_argmax(o, N), e = first_argmax(yr, N);
            bad_arg += a != e;
            if (pk) bad_pk += a != first_argmax(yp + (size_t)m * N, N);
            for (int n = 0; n < N; n++) {
                if (o[n] == yr[n]) {
                    got++;
                    if (pk) bad_pk += o[n] != yp[(size_t)m * N + n];
                } else
                    bad_val += !(o[n] < yr[e]);
            }
            bad_val += o[e] != yr[e];
            /* a tie within 1e-5 of the best among the candidates */
            for (int n = 0; n < N; n++)
                if (n != e && yr[n] >= yr[e] - 1e-5f * fabsf(yr[e])) {
                    ties++;
                    break;
                }
        }
        bad_inf = got < r;
        CHECK_MSG(bad_arg == 0, "%dx%d: %ld rows whose argmax differs from the reference", N, K, bad_arg);
        CHECK_MSG(bad_val == 0, "%dx%d: %ld outputs neither the fma reference's value nor below the row's largest",
                  N, K, bad_val);
        CHECK_MSG(bad_pk == 0, "%dx%d: %ld values / argmaxes differ from the packed kernel", N, K, bad_pk);
        CHECK_MSG(!bad_inf, "%dx%d: %ld outputs equal the reference for %ld candidates", N, K, got, r);
    }
    printf("screen %5dx%-4d M=%-3d threads=%d %-6s bias=%d: bound ratio max %.3f, %.2f candidates/row, "
           "%ld rows with a near tie (1e-5)\n",
           N, K, M, threads, pk ? "packed" : "plain", with_bias, worst, rows ? (double)cands / rows : 0.0, ties);
    /* refusals: NaN and infinity in an input row */
    x[3] = NAN;
    CHECK(linear_screen_forward(out, x, s, M, ws) == -1);
    x[3] = INFINITY;
    CHECK(linear_screen_forward(out, x, s, M, ws) == -1);
    long sr, sc, sf;
    linear_screen_stats(s, &sr, &sc, &sf);
    CHECK(sf == 2 && sc >= sr);
    linear_screen_free(s);
    aligned_free(ws), aligned_free(pk);
    free(W), free(b), free(x), free(kind), free(y), free(yp), free(yd), free(approx), free(err), free(out);
}

int main(void) {
    test_layout(2048, 512);
    test_layout(1024, 64);
    int shapes[][3] = {{2048, 512, 37}, {1000, 96, 9}, {1027, 33, 5}, {4096, 256, 64}, {64, 8, 3}};
    for (int i = 0; i < 5; i++)
        for (int packed = 0; packed < 2; packed++)
            for (int bias = 0; bias < 2; bias++)
                test_shape(shapes[i][0], shapes[i][1], shapes[i][2], 1 + (i + bias) % 2, packed, bias);
    /* invalid weights: no screen */
    float w[8] = {1, 2, 3, NAN, 5, 6, 7, 8};
    CHECK(linear_screen_new(w, NULL, NULL, 2, 4) == NULL);
    CHECK(linear_screen_new(NULL, NULL, NULL, 2, 4) == NULL);
    return check_report("test_screen");
}
