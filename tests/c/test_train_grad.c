/* test_train_grad.c — finite-difference gradient checks of the training layers and model.
 *
 * Layers: each float32 backward is checked against central differences (h = 1e-6) of a
 * double-precision reference forward written here from the definitions (the loss is
 * L = Σ R ⊙ out with fixed random R, so dout = R). The error of a gradient tensor is
 *   max_i |analytic_i - fd_i| / max_i |fd_i|      (relative to the tensor's largest entry)
 * and must stay below 1e-4; the float forward must match the double reference within 1e-5 on
 * the same measure. The += convention is checked by starting every gradient buffer at a non-zero
 * value and subtracting it.
 *
 * Whole model: a tiny Transformer (pre-norm and post-norm, every kind of embedding tying, smooth
 * activations, dropout ON with fixed keys, label smoothing) against ref_model_loss(), a
 * double-precision transcription of the training forward written here on the layer references
 * (the same dropout masks: the model's counter-based generator at the model's sites). Its loss
 * must equal the float32 forward's within 1e-5 relative (the same function; measured 2e-9 to
 * 3e-8). EVERY parameter's float32 gradient is compared with central differences (h = 1e-5) of
 * that reference; the error of a tensor is max_i |analytic_i - fd_i| / max(max_i |fd_i|, 1e-2)
 * (the floor only guards a tensor whose gradient vanishes; the smallest here is 2.7e-2).
 *
 * Where the tolerances come from (u = 2^-24 = 6.0e-8, float32's unit roundoff):
 * - The references' own error is negligible: a double central difference errs by h^2 |f'''| / 6
 *   (~1e-10 at h = 1e-5) plus the double loss's rounding over h (~1e-16 |L| / h, ~1e-10 for the
 *   layers, ~1e-9 for the model); the model's worst errors change by < 1e-7 from h = 1e-4 to 1e-7.
 * - So a check measures the float32 code's rounding alone. A float32 dot product or sum of K terms
 *   errs by at most K·u of the sum of the terms' magnitudes (Higham, eq. 3.5), and a gradient entry
 *   is the end of a chain of such sums.
 *   Layers: chains of <= 4 sums of K <= 12 terms (the attention's softmax, the layer norm's mean
 *   and variance): 4·12·u = 2.9e-6 of the magnitudes, which exceed the tensor's largest entry by a
 *   factor of up to ~10 (cancellation in a backward): 3e-5, hence 1e-4 for gradients; a forward
 *   has no backward's cancellation: 1e-5. Measured: at most 4e-6 (gradients), 1e-7 (forwards).
 *   Model: chains of n ~ 40 sums (2 encoder and 2 decoder layers of layer norm, attention and 2-3
 *   linear layers; projection; loss) of K <= 15 terms (B·T rows in a weight's gradient; C 8, F 12,
 *   V 13): n·K·u = 3.6e-5 of the magnitudes, hence 1e-4 (the magnitudes within ~3x of the tensor's
 *   largest entry). Measured 1.0e-6 to 4.9e-6 (rounding errors add up like sqrt(n·K)·u ~ 1.5e-6,
 *   not linearly); a wrong gradient term errs by 1e-2 to 1.
 * The former whole-model check differentiated the float32 model itself (h = 4e-2, Richardson): its
 * float32 loss noise over h (75·ε/h) came to 1.2e-4 to 1.2e-3 of a tensor's largest entry, at its
 * 1e-3 bound, and tipped over on CPUs whose kernels sum in another order (AVX2-only Zen 3).
 * The comparison of every gradient with PyTorch's autograd is tests/test_train_torch.py.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "ref_rnn.h"
#include "nn/layers.h"
#include "train/model.h"
#include "train/optim.h"

#define LAYER_TOL 1e-4
#define FWD_TOL 1e-5
#define FD_H 1e-6
#define MODEL_TOL 1e-4
#define MODEL_FWD_TOL 1e-5
#define MODEL_FD_H 1e-5
#define MODEL_FLOOR 1e-2

static uint64_t g_seed = 12345;

static void rand_fill(float *x, size_t n, float lo, float hi) {
    uint64_t key = rng_mix64(g_seed++);
    for (size_t i = 0; i < n; i++) x[i] = (float)(lo + (hi - lo) * rng_uniform(key, i));
}

static double *to_double(const float *x, size_t n) {
    double *d = malloc(n * sizeof(double));
    for (size_t i = 0; i < n; i++) d[i] = x[i];
    return d;
}

/* max|a - b| / max|b| */
static double rel_err_fd(const float *a, const double *b, size_t n) {
    double md = 0, mb = 0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - b[i]);
        if (d > md || isnan(d)) md = isnan(d) ? INFINITY : d;
        if (fabs(b[i]) > mb) mb = fabs(b[i]);
    }
    return mb > 0 ? md / mb : md;
}

/* The loss function of the layer under test, over its double inputs. */
typedef double (*loss_fn)(void);

/* Central differences of f w.r.t. each x[i]; compares with analytic (float), after subtracting
 * the pre-filled value `pre` (the += check). */
static double fd_check(const char *what, double *x, size_t n, const float *analytic, float pre, loss_fn f) {
    double *fd = malloc(n * sizeof(double));
    float *a = malloc(n * sizeof(float));
    for (size_t i = 0; i < n; i++) {
        double save = x[i];
        x[i] = save + FD_H;
        double lp = f();
        x[i] = save - FD_H;
        double lm = f();
        x[i] = save;
        fd[i] = (lp - lm) / (2 * FD_H);
        a[i] = analytic[i] - pre;
    }
    double e = rel_err_fd(a, fd, n);
    printf("  %-44s max rel err %.2e\n", what, e);
    CHECK_MSG(e <= LAYER_TOL, "%s: gradient error %.3e > %.1e", what, e, LAYER_TOL);
    free(fd);
    free(a);
    return e;
}

static void check_forward(const char *what, const float *out, const double *ref, size_t n) {
    double e = rel_err_fd(out, ref, n);
    printf("  %-44s forward rel err %.2e\n", what, e);
    CHECK_MSG(e <= FWD_TOL, "%s: forward error %.3e > %.1e", what, e, FWD_TOL);
}

static double dot_d(const double *a, const double *b, size_t n) {
    double s = 0;
    for (size_t i = 0; i < n; i++) s += a[i] * b[i];
    return s;
}

static float *filled(size_t n, float v) {
    float *x = malloc(n * sizeof(float));
    for (size_t i = 0; i < n; i++) x[i] = v;
    return x;
}

#define PRE 0.25f /* every gradient buffer starts here: backward must add */

/* ------------------------------------------------------------------ embedding */

static struct { int B, T, C, pad; float scale; int *tok; double *wte, *pos, *R; } E;

static void ref_embedding(double *out) {
    for (int bt = 0; bt < E.B * E.T; bt++)
        for (int c = 0; c < E.C; c++)
            out[bt * E.C + c] = E.tok[bt] == E.pad ? 0.0
                                : E.scale * E.wte[E.tok[bt] * E.C + c] + E.pos[(bt % E.T) * E.C + c];
}

static double loss_embedding(void) {
    double out[64 * 8];
    ref_embedding(out);
    return dot_d(out, E.R, (size_t)E.B * E.T * E.C);
}

static void test_embedding(void) {
    printf("embedding (scale, positions, padding, repeated tokens)\n");
    int B = 2, T = 4, C = 8, pad = 1; /* V = 6 */
    int tok[8] = {3, 2, 3, 1, 5, 0, 0, 1};
    float wte[48], pos[32], R[64], out[64];
    rand_fill(wte, 48, -1, 1);
    rand_fill(pos, 32, -1, 1);
    rand_fill(R, 64, -1, 1);
    E.B = B; E.T = T; E.C = C; E.pad = pad; E.scale = sqrtf(8.0f); E.tok = tok;
    E.wte = to_double(wte, 48); E.pos = to_double(pos, 32); E.R = to_double(R, 64);
    nn_embedding_forward(out, tok, wte, pos, B, T, C, E.scale, pad);
    double ref[64];
    ref_embedding(ref);
    check_forward("embedding", out, ref, 64);
    float *dwte = filled(48, PRE), *dpos = filled(32, PRE);
    nn_embedding_backward(dwte, dpos, R, tok, B, T, C, E.scale, pad);
    fd_check("embedding dwte", E.wte, 48, dwte, PRE, loss_embedding);
    fd_check("embedding dpos", E.pos, 32, dpos, PRE, loss_embedding);
    for (int c = 0; c < C; c++) CHECK(dwte[pad * C + c] == PRE); /* padding row untouched */
    free(dwte); free(dpos); free(E.wte); free(E.pos); free(E.R);
}

/* ------------------------------------------------------------------ layer norm */

static struct { int M, C; float eps; double *x, *g, *b, *R; } LN;

static void ref_layernorm(double *out, const double *x, const double *g, const double *b, int M, int C, double eps) {
    for (int m = 0; m < M; m++) {
        double mu = 0, var = 0;
        for (int c = 0; c < C; c++) mu += x[m * C + c];
        mu /= C;
        for (int c = 0; c < C; c++) var += (x[m * C + c] - mu) * (x[m * C + c] - mu);
        var /= C;
        double rs = 1.0 / sqrt(var + eps);
        for (int c = 0; c < C; c++) out[m * C + c] = (x[m * C + c] - mu) * rs * g[c] + b[c];
    }
}

static double loss_layernorm(void) {
    double out[5 * 12];
    ref_layernorm(out, LN.x, LN.g, LN.b, LN.M, LN.C, LN.eps);
    return dot_d(out, LN.R, (size_t)LN.M * LN.C);
}

static void test_layernorm(void) {
    printf("layernorm\n");
    int M = 5, C = 12;
    float x[60], g[12], b[12], R[60], out[60], mean[5], rstd[5];
    rand_fill(x, 60, -2, 2);
    rand_fill(g, 12, 0.5f, 1.5f);
    rand_fill(b, 12, -0.5f, 0.5f);
    rand_fill(R, 60, -1, 1);
    LN.M = M; LN.C = C; LN.eps = 1e-5f;
    LN.x = to_double(x, 60); LN.g = to_double(g, 12); LN.b = to_double(b, 12); LN.R = to_double(R, 60);
    nn_layernorm_forward(out, mean, rstd, x, g, b, M, C, LN.eps);
    double ref[60];
    ref_layernorm(ref, LN.x, LN.g, LN.b, M, C, LN.eps);
    check_forward("layernorm", out, ref, 60);
    float *dx = filled(60, PRE), *dg = filled(12, PRE), *db = filled(12, PRE);
    nn_layernorm_backward(dx, dg, db, R, x, g, mean, rstd, M, C);
    fd_check("layernorm dinp", LN.x, 60, dx, PRE, loss_layernorm);
    fd_check("layernorm dgamma", LN.g, 12, dg, PRE, loss_layernorm);
    fd_check("layernorm dbeta", LN.b, 12, db, PRE, loss_layernorm);
    free(dx); free(dg); free(db); free(LN.x); free(LN.g); free(LN.b); free(LN.R);
}

/* ------------------------------------------------------------------ linear */

static struct { int M, K, N; double *x, *w, *b, *R; } LI;

static double loss_linear(void) {
    double s = 0;
    for (int m = 0; m < LI.M; m++)
        for (int n = 0; n < LI.N; n++) {
            double o = LI.b[n];
            for (int k = 0; k < LI.K; k++) o += LI.x[m * LI.K + k] * LI.w[n * LI.K + k];
            s += o * LI.R[m * LI.N + n];
        }
    return s;
}

static void test_linear(void) {
    printf("linear\n");
    int M = 6, K = 7, N = 5;
    float x[42], w[35], b[5], R[30], out[30];
    rand_fill(x, 42, -1, 1);
    rand_fill(w, 35, -1, 1);
    rand_fill(b, 5, -1, 1);
    rand_fill(R, 30, -1, 1);
    LI.M = M; LI.K = K; LI.N = N;
    LI.x = to_double(x, 42); LI.w = to_double(w, 35); LI.b = to_double(b, 5); LI.R = to_double(R, 30);
    nn_linear_forward(out, x, w, b, M, K, N);
    double ref[30];
    for (int m = 0; m < M; m++)
        for (int n = 0; n < N; n++) {
            ref[m * N + n] = LI.b[n];
            for (int k = 0; k < K; k++) ref[m * N + n] += LI.x[m * K + k] * LI.w[n * K + k];
        }
    check_forward("linear", out, ref, 30);
    float *dx = filled(42, PRE), *dw = filled(35, PRE), *db = filled(5, PRE);
    nn_linear_backward(dx, dw, db, R, x, w, M, K, N);
    fd_check("linear dinp", LI.x, 42, dx, PRE, loss_linear);
    fd_check("linear dweight", LI.w, 35, dw, PRE, loss_linear);
    fd_check("linear dbias", LI.b, 5, db, PRE, loss_linear);
    free(dx); free(dw); free(db); free(LI.x); free(LI.w); free(LI.b); free(LI.R);
}

/* ------------------------------------------------------------------ activations */

static struct { size_t n; activation_t act; double *x, *R; } AC;

static double ref_act(double x, activation_t act) {
    switch (act) {
    case ACT_RELU: return x > 0 ? x : 0;
    case ACT_GELU: return 0.5 * x * (1 + erf(x / sqrt(2.0)));
    case ACT_GELU_TANH: return 0.5 * x * (1 + tanh(sqrt(2 / M_PI) * (x + 0.044715 * x * x * x)));
    case ACT_SWISH: return x / (1 + exp(-x));
    case ACT_GELU_SIGMOID: return x / (1 + exp(-1.702 * x));
    case ACT_TANH: return tanh(x);
    }
    return x;
}

static double loss_act(void) {
    double s = 0;
    for (size_t i = 0; i < AC.n; i++) s += ref_act(AC.x[i], AC.act) * AC.R[i];
    return s;
}

static void test_activations(void) {
    printf("activations\n");
    static const char *names[] = {"relu", "gelu (tanh approximation)", "swish", "gelu (erf)", "gelu (sigmoid)", "tanh"};
    enum { N = 40 };
    for (int a = ACT_RELU; a <= ACT_TANH; a++) {
        float x[N], R[N], out[N];
        rand_fill(x, N, -4, 4);
        for (int i = 0; i < N; i++)
            if (fabsf(x[i]) < 1e-3f) x[i] = 0.5f; /* keep ReLU's kink away from the differences */
        rand_fill(R, N, -1, 1);
        AC.n = N; AC.act = (activation_t)a; AC.x = to_double(x, N); AC.R = to_double(R, N);
        nn_activation_forward(out, x, N, AC.act);
        double ref[N];
        for (int i = 0; i < N; i++) ref[i] = ref_act(AC.x[i], AC.act);
        char what[96];
        snprintf(what, sizeof what, "%s", names[a]);
        check_forward(what, out, ref, N);
        float *dx = filled(N, PRE);
        nn_activation_backward(dx, R, x, N, AC.act);
        snprintf(what, sizeof what, "%s dinp", names[a]);
        fd_check(what, AC.x, N, dx, PRE, loss_act);
        free(dx); free(AC.x); free(AC.R);
    }
}

/* ------------------------------------------------------------------ dropout, residual */

static uint32_t thr_of(float p) { return (uint32_t)((double)p * 4294967296.0); }

static void test_dropout(void) {
    printf("dropout and residual\n");
    enum { N = 200000 };
    float *x = malloc(N * sizeof(float)), *y = malloc(N * sizeof(float)), *y2 = malloc(N * sizeof(float));
    rand_fill(x, N, 0.5f, 1.5f);
    float p = 0.3f;
    uint64_t key = dropout_key(7, 3, 11);
    nn_dropout_forward(y, x, N, p, key);
    nn_dropout_forward(y2, x, N, p, key);
    CHECK(memcmp(y, y2, N * sizeof(float)) == 0); /* same key: same mask */
    int dropped = 0, bad = 0;
    for (int i = 0; i < N; i++) {
        int keep = rng_bits32(key, (uint32_t)i) >= thr_of(p);
        if (!keep) dropped++;
        float want = keep ? x[i] / (1.0f - p) : 0.0f;
        if (fabsf(y[i] - want) > 1e-6f * fabsf(want)) bad++;
    }
    CHECK_EQ_INT(bad, 0);
    /* dropped fraction within 5 standard deviations of p */
    double frac = (double)dropped / N, sd = sqrt(p * (1 - p) / N);
    printf("  dropout p = %.2f: dropped %.4f (sd %.4f)\n", p, frac, sd);
    CHECK(fabs(frac - p) < 5 * sd);
    /* another key: a different mask, the same rate */
    nn_dropout_forward(y2, x, N, p, dropout_key(7, 4, 11));
    int same = 0;
    for (int i = 0; i < N; i++) same += (y[i] == 0) == (y2[i] == 0);
    CHECK(same < N - 1000);
    /* in place equals out of place */
    memcpy(y2, x, N * sizeof(float));
    nn_dropout_forward(y2, y2, N, p, key);
    CHECK(memcmp(y, y2, N * sizeof(float)) == 0);
    /* backward: dinp += mask * dout / (1 - p); the derivative of a linear map is exact */
    float *d = filled(N, PRE);
    nn_dropout_backward(d, x, N, p, key);
    bad = 0;
    for (int i = 0; i < N; i++) {
        float want = PRE + (rng_bits32(key, (uint32_t)i) >= thr_of(p) ? x[i] / (1.0f - p) : 0.0f);
        if (fabsf(d[i] - want) > 1e-6f * fabsf(want)) bad++;
    }
    CHECK_EQ_INT(bad, 0);
    /* p = 0: identity */
    nn_dropout_forward(y2, x, N, 0.0f, key);
    CHECK(memcmp(x, y2, N * sizeof(float)) == 0);
    /* residual */
    float a[5] = {1, 2, 3, 4, 5}, b[5] = {0.5f, -1, 2, 0, 1}, o[5], da[5] = {1, 1, 1, 1, 1}, db[5] = {0};
    nn_residual_forward(o, a, b, 5);
    for (int i = 0; i < 5; i++) CHECK(o[i] == a[i] + b[i]);
    nn_residual_backward(da, db, b, 5);
    for (int i = 0; i < 5; i++) CHECK(da[i] == 1 + b[i] && db[i] == b[i]);
    free(x); free(y); free(y2); free(d);
}

/* ------------------------------------------------------------------ attention */

static struct {
    int B, Tq, Tk, C, H, causal, ldq, ldkv, fused;
    const int *klen;
    float p;
    uint64_t key;
    double *q, *kv, *R; /* fused: q holds (B, T, 3C) and kv == q */
} AT;

static void ref_attention(double *out) {
    int D = AT.C / AT.H;
    const double *q = AT.q, *k = AT.fused ? AT.q + AT.C : AT.kv, *v = AT.fused ? AT.q + 2 * AT.C : AT.kv + AT.C;
    double sc[64];
    uint32_t thr = thr_of(AT.p);
    for (int b = 0; b < AT.B; b++)
        for (int h = 0; h < AT.H; h++)
            for (int i = 0; i < AT.Tq; i++) {
                int kl = AT.klen ? AT.klen[b] : AT.Tk;
                int len = AT.causal && i + 1 < kl ? i + 1 : kl;
                double mx = -1e300, sum = 0;
                for (int j = 0; j < len; j++) {
                    double s = 0;
                    for (int d = 0; d < D; d++)
                        s += q[(b * AT.Tq + i) * AT.ldq + h * D + d] * k[(b * AT.Tk + j) * AT.ldkv + h * D + d];
                    sc[j] = s / sqrt((double)D);
                    if (sc[j] > mx) mx = sc[j];
                }
                for (int j = 0; j < len; j++) sum += (sc[j] = exp(sc[j] - mx));
                for (int j = 0; j < len; j++) {
                    sc[j] /= sum;
                    size_t idx = (((size_t)b * AT.H + h) * AT.Tq + i) * AT.Tk + j;
                    if (AT.p > 0) sc[j] = rng_bits32(AT.key, (uint32_t)idx) >= thr ? sc[j] / (1 - AT.p) : 0;
                }
                for (int d = 0; d < D; d++) {
                    double o = 0;
                    for (int j = 0; j < len; j++) o += sc[j] * v[(b * AT.Tk + j) * AT.ldkv + h * D + d];
                    out[(b * AT.Tq + i) * AT.C + h * D + d] = o;
                }
            }
}

static double loss_attention(void) {
    double out[2 * 6 * 8];
    ref_attention(out);
    return dot_d(out, AT.R, (size_t)AT.B * AT.Tq * AT.C);
}

static void attention_case(const char *name, int fused, int causal, const int *klen, float p) {
    int B = 2, C = 8, H = 2;
    int Tq = fused ? 6 : 5, Tk = 6;
    AT.B = B; AT.Tq = Tq; AT.Tk = Tk; AT.C = C; AT.H = H; AT.causal = causal; AT.klen = klen; AT.p = p;
    AT.fused = fused; AT.key = dropout_key(1, 2, 3);
    AT.ldq = fused ? 3 * C : C;
    AT.ldkv = fused ? 3 * C : 2 * C;
    size_t nq = (size_t)B * Tq * AT.ldq, nkv = fused ? 0 : (size_t)B * Tk * 2 * C, no = (size_t)B * Tq * C;
    size_t na = (size_t)B * H * Tq * Tk;
    float *q = malloc(nq * sizeof(float)), *kv = malloc((nkv ? nkv : 1) * sizeof(float));
    float *R = malloc(no * sizeof(float)), *out = malloc(no * sizeof(float));
    float *att = malloc(na * sizeof(float)), *scratch = malloc(na * sizeof(float));
    rand_fill(q, nq, -1.5f, 1.5f);
    rand_fill(kv, nkv ? nkv : 1, -1.5f, 1.5f);
    rand_fill(R, no, -1, 1);
    AT.q = to_double(q, nq); AT.kv = to_double(kv, nkv ? nkv : 1); AT.R = to_double(R, no);
    const float *k = fused ? q + C : kv, *v = fused ? q + 2 * C : kv + C;
    nn_attention_forward(out, att, scratch, q, AT.ldq, k, v, AT.ldkv, klen, B, Tq, Tk, C, H, causal, p, AT.key);
    double ref[2 * 6 * 8];
    ref_attention(ref);
    char what[96];
    snprintf(what, sizeof what, "attention %s", name);
    check_forward(what, out, ref, no);
    /* probabilities: rows sum to 1 over the allowed keys, 0 elsewhere */
    double worst = 0;
    int masked_bad = 0;
    for (int b = 0; b < B; b++)
        for (int h = 0; h < H; h++)
            for (int i = 0; i < Tq; i++) {
                int kl = klen ? klen[b] : Tk, len = causal && i + 1 < kl ? i + 1 : kl;
                double s = 0;
                for (int j = 0; j < Tk; j++) {
                    float a = att[(((size_t)b * H + h) * Tq + i) * Tk + j];
                    if (j < len) s += a;
                    else masked_bad += a != 0.0f;
                }
                if (fabs(s - 1) > worst) worst = fabs(s - 1);
            }
    CHECK(worst < 1e-6);
    CHECK_EQ_INT(masked_bad, 0);
    float *dq = filled(nq, PRE), *dkv = filled(nkv ? nkv : 1, PRE);
    float *dk = fused ? dq + C : dkv, *dv = fused ? dq + 2 * C : dkv + C;
    nn_attention_backward(dq, dk, dv, scratch, R, q, AT.ldq, k, v, AT.ldkv, att, B, Tq, Tk, C, H, p, AT.key);
    snprintf(what, sizeof what, "attention %s d%s", name, fused ? "qkv" : "q");
    fd_check(what, AT.q, nq, dq, PRE, loss_attention);
    if (!fused) {
        snprintf(what, sizeof what, "attention %s dkv", name);
        fd_check(what, AT.kv, nkv, dkv, PRE, loss_attention);
    }
    free(q); free(kv); free(R); free(out); free(att); free(scratch); free(dq); free(dkv);
    free(AT.q); free(AT.kv); free(AT.R);
}

static void test_attention(void) {
    printf("multi-head attention\n");
    int klen[2] = {6, 3}, klen_c[2] = {4, 6};
    attention_case("self, key padding", 1, 0, klen, 0.0f);
    attention_case("self, causal", 1, 1, NULL, 0.0f);
    attention_case("self, causal + padding", 1, 1, klen, 0.0f);
    attention_case("cross, key padding", 0, 0, klen_c, 0.0f);
    attention_case("self, padding, dropout 0.25", 1, 0, klen, 0.25f);
    attention_case("cross, padding, dropout 0.25", 0, 0, klen_c, 0.25f);
}

/* ------------------------------------------------------------------ cross-entropy */

static struct { int M, V, pad; float eps, gs; const int *y; double *x; } CE;

static double ref_ce(double *nll_sum, int *count) {
    double total = 0, ns = 0;
    int cnt = 0;
    for (int m = 0; m < CE.M; m++) {
        if (CE.y[m] == CE.pad) continue;
        const double *x = CE.x + m * CE.V;
        double mx = -1e300, s = 0, sum_lp = 0;
        for (int j = 0; j < CE.V; j++) mx = x[j] > mx ? x[j] : mx;
        for (int j = 0; j < CE.V; j++) s += exp(x[j] - mx);
        double lse = mx + log(s);
        for (int j = 0; j < CE.V; j++) sum_lp += x[j] - lse;
        double nll = lse - x[CE.y[m]];
        total += (1 - CE.eps) * nll - CE.eps / CE.V * sum_lp;
        ns += nll;
        cnt++;
    }
    if (nll_sum) *nll_sum = ns;
    if (count) *count = cnt;
    return total;
}

static double loss_ce(void) { return CE.gs * ref_ce(NULL, NULL); }

static void test_crossentropy(void) {
    printf("label-smoothed cross-entropy\n");
    int M = 6, V = 9, pad = 0;
    int y[6] = {3, 0, 8, 1, 0, 5};
    float x[54], probs[54], losses[6], nlls[6];
    rand_fill(x, 54, -3, 3);
    for (int e = 0; e < 2; e++) {
        CE.M = M; CE.V = V; CE.pad = pad; CE.eps = e ? 0.1f : 0.0f; CE.gs = 0.37f; CE.y = y; CE.x = to_double(x, 54);
        double ls, ns, rns;
        int rc;
        int cnt = nn_crossentropy_forward(probs, losses, nlls, &ls, &ns, x, y, M, V, CE.eps, pad);
        double rl = ref_ce(&rns, &rc);
        CHECK_EQ_INT(cnt, rc);
        CHECK_NEAR(ls, rl, 0, 1e-6);
        CHECK_NEAR(ns, rns, 0, 1e-6);
        CHECK(losses[1] == 0 && nlls[4] == 0);
        if (e == 0) CHECK_NEAR(ls, ns, 0, 1e-7);
        float *dx = malloc(54 * sizeof(float));
        nn_crossentropy_backward(dx, probs, y, M, V, CE.eps, pad, CE.gs);
        for (int j = 0; j < V; j++) CHECK(dx[1 * V + j] == 0.0f);
        fd_check(e ? "cross-entropy eps 0.1 dlogits" : "cross-entropy eps 0 dlogits", CE.x, 54, dx, 0.0f, loss_ce);
        /* in place: dlogits may alias probs */
        nn_crossentropy_backward(probs, probs, y, M, V, CE.eps, pad, CE.gs);
        CHECK(memcmp(probs, dx, sizeof probs) == 0);
        free(dx);
        free(CE.x);
    }
}

/* ------------------------------------------------------------------ whole model */

/* A double-precision transcription of the Transformer's training forward (model.c, target groups
 * off: the padded B x T batch), written from the definitions with the layer references above:
 * parameters are read from a double copy P of m->params at the float tensors' offsets (so tied
 * and shared tensors stay one), the sinusoid table (a constant, not a parameter) is the model's,
 * and the dropout masks are the model's generator at the model's sites: element i of a site is
 * kept when rng_bits32(key, i) >= p·2^32, its key dropout_key(seed, step, site) with site =
 * decoder << 32 | (layer + 1) << 8 | kind (model.c's site_key). Returns the label-smoothed loss
 * summed over the non-padding targets (tmodel_loss_t.loss). */
enum { RS_EMB = 0, RS_ATT = 1, RS_ATT_OUT = 2, RS_CATT = 3, RS_CATT_OUT = 4, RS_ACT = 5, RS_FFN_OUT = 6 };

static struct {
    const tmodel_t *m;
    double *P;               /* (n_params) the parameters in double */
    const int *src, *tin, *tout;
    int B, S, T;
    uint64_t seed, step;
} RM;

static uint64_t ref_site(int decoder, int layer, int kind) {
    uint64_t site = ((uint64_t)decoder << 32) | ((uint64_t)(layer + 1) << 8) | (uint64_t)kind;
    return dropout_key(RM.seed, RM.step, site);
}

/* x[i] = keep(key, i) ? x[i] / (1 - p) : 0 over n values */
static void ref_dropout(double *x, size_t n, double p, uint64_t key) {
    if (p <= 0) return;
    uint32_t thr = thr_of((float)p);
    for (size_t i = 0; i < n; i++) x[i] = rng_bits32(key, (uint32_t)i) >= thr ? x[i] / (1 - p) : 0;
}

static const double *ref_par(const float *f) { return f ? RM.P + (f - RM.m->params) : NULL; }

/* out (M, N) = inp (M, K) · w (N, K)^T + b */
static void ref_linear(double *out, const double *inp, const double *w, const double *b, int M, int K, int N) {
    for (int i = 0; i < M; i++)
        for (int n = 0; n < N; n++) {
            double o = b ? b[n] : 0;
            for (int k = 0; k < K; k++) o += inp[(size_t)i * K + k] * w[(size_t)n * K + k];
            out[(size_t)i * N + n] = o;
        }
}

/* out (B, Tq, C) = softmax(q k^T / sqrt(D)) (keys past klen[b] masked, causal: past i) with dropout
 * at flat index ((b·H + h)·Tq + i)·Tk + j, times v. */
static void ref_mha(double *out, const double *q, int ldq, const double *k, const double *v, int ldkv,
                    const int *klen, int B, int Tq, int Tk, int C, int H, int causal, double p, uint64_t key) {
    int D = C / H;
    double sc[64];
    uint32_t thr = thr_of((float)p);
    for (int b = 0; b < B; b++)
        for (int h = 0; h < H; h++)
            for (int i = 0; i < Tq; i++) {
                int kl = klen ? klen[b] : Tk, len = causal && i + 1 < kl ? i + 1 : kl;
                double mx = -1e300, sum = 0;
                for (int j = 0; j < len; j++) {
                    double s = 0;
                    for (int d = 0; d < D; d++)
                        s += q[((size_t)b * Tq + i) * ldq + h * D + d] * k[((size_t)b * Tk + j) * ldkv + h * D + d];
                    sc[j] = s / sqrt((double)D);
                    if (sc[j] > mx) mx = sc[j];
                }
                for (int j = 0; j < len; j++) sum += (sc[j] = exp(sc[j] - mx));
                for (int j = 0; j < len; j++) {
                    sc[j] /= sum;
                    size_t idx = (((size_t)b * H + h) * Tq + i) * Tk + j;
                    if (p > 0) sc[j] = rng_bits32(key, (uint32_t)idx) >= thr ? sc[j] / (1 - p) : 0;
                }
                for (int d = 0; d < D; d++) {
                    double o = 0;
                    for (int j = 0; j < len; j++) o += sc[j] * v[((size_t)b * Tk + j) * ldkv + h * D + d];
                    out[((size_t)b * Tq + i) * C + h * D + d] = o;
                }
            }
}

/* One sublayer around f's output f (M, C) already computed from in = sub_in(x): x <- the
 * sublayer's output: pre-norm x + dropout(f); post-norm LN(x + dropout(f)). */
static void ref_sub_out(double *x, double *f, const float *g, const float *b, int M, double p, uint64_t key) {
    const tmodel_config_t *c = &RM.m->cfg;
    size_t n = (size_t)M * c->d;
    ref_dropout(f, n, p, key);
    for (size_t i = 0; i < n; i++) f[i] += x[i];
    if (c->pre_norm) memcpy(x, f, n * sizeof(double));
    else ref_layernorm(x, f, ref_par(g), ref_par(b), M, c->d, c->eps);
}

/* The transformation's input: pre-norm LN(x), post-norm x. */
static const double *ref_sub_in(double *ln, const double *x, const float *g, const float *b, int M) {
    const tmodel_config_t *c = &RM.m->cfg;
    if (!c->pre_norm) return x;
    ref_layernorm(ln, x, ref_par(g), ref_par(b), M, c->d, c->eps);
    return ln;
}

static void ref_embed(double *x, const int *tok, const float *emb, const float *pos_table, int B, int T, int decoder) {
    const tmodel_config_t *c = &RM.m->cfg;
    int C = c->d;
    const double *E = ref_par(emb);
    const double *Pl = c->learned_pos ? ref_par(pos_table) : NULL;
    double scale = c->scale_emb ? sqrt((double)C) : 1.0;
    for (int bt = 0; bt < B * T; bt++)
        for (int ch = 0; ch < C; ch++) {
            double pos = Pl ? Pl[(bt % T) * C + ch] : (double)pos_table[(bt % T) * C + ch];
            x[(size_t)bt * C + ch] = tok[bt] == c->pad_id ? 0.0 : scale * E[(size_t)tok[bt] * C + ch] + pos;
        }
    ref_dropout(x, (size_t)B * T * C, c->dropout, ref_site(decoder, -1, RS_EMB));
}

/* The feed-forward sublayer: fc1, activation, dropout, fc2 into f (M, C). */
static void ref_ffn(double *f, double *h, const double *in, const float *w1, const float *b1, const float *w2,
                    const float *b2, int M, int decoder, int l) {
    const tmodel_config_t *c = &RM.m->cfg;
    int C = c->d, F = c->ff;
    ref_linear(h, in, ref_par(w1), ref_par(b1), M, C, F);
    for (size_t i = 0; i < (size_t)M * F; i++) h[i] = ref_act(h[i], c->act);
    ref_dropout(h, (size_t)M * F, c->act_dropout, ref_site(decoder, l, RS_ACT));
    ref_linear(f, h, ref_par(w2), ref_par(b2), M, F, C);
}

static double ref_model_loss(void) {
    const tmodel_t *m = RM.m;
    const tmodel_config_t *c = &m->cfg;
    const tparams_t *p = &m->p;
    int B = RM.B, S = RM.S, T = RM.T, C = c->d, F = c->ff, V = c->tgt_vocab, Ms = B * S, Mt = B * T;
    size_t C1 = (size_t)C, mx = (size_t)(Ms > Mt ? Ms : Mt);
    double *x = malloc(mx * C * sizeof(double)), *ln = malloc(mx * C * sizeof(double));
    double *f = malloc(mx * C * sizeof(double)), *big = malloc(mx * (3 * C1 + F) * sizeof(double));
    double *kv = malloc((size_t)Ms * 2 * C * sizeof(double)), *enc_out = malloc((size_t)Ms * C * sizeof(double));
    double *ctx = malloc(mx * C * sizeof(double));
    double *logits = malloc((size_t)Mt * V * sizeof(double));
    int klen[16];
    for (int b = 0; b < B; b++) {
        klen[b] = 0;
        while (klen[b] < S && RM.src[b * S + klen[b]] != c->pad_id) klen[b]++;
    }
    double drop = c->dropout, adrop = c->attn_dropout;
    /* encoder */
    ref_embed(x, RM.src, p->enc_emb, m->enc_pos_table, B, S, 0);
    for (int l = 0; l < c->enc_layers; l++) {
        const double *in = ref_sub_in(ln, x, p->e_ln1_g + l * C1, p->e_ln1_b + l * C1, Ms);
        ref_linear(big, in, ref_par(p->e_qkv_w + l * 3 * C1 * C1), ref_par(p->e_qkv_b + l * 3 * C1), Ms, C, 3 * C);
        ref_mha(ctx, big, 3 * C, big + C, big + 2 * C, 3 * C, klen, B, S, S, C, c->heads, 0, adrop,
                ref_site(0, l, RS_ATT));
        ref_linear(f, ctx, ref_par(p->e_o_w + l * C1 * C1), ref_par(p->e_o_b + l * C1), Ms, C, C);
        ref_sub_out(x, f, p->e_ln1_g + l * C1, p->e_ln1_b + l * C1, Ms, drop, ref_site(0, l, RS_ATT_OUT));
        in = ref_sub_in(ln, x, p->e_ln2_g + l * C1, p->e_ln2_b + l * C1, Ms);
        ref_ffn(f, big, in, p->e_fc1_w + l * F * C1, p->e_fc1_b + l * (size_t)F, p->e_fc2_w + l * C1 * F,
                p->e_fc2_b + l * C1, Ms, 0, l);
        ref_sub_out(x, f, p->e_ln2_g + l * C1, p->e_ln2_b + l * C1, Ms, drop, ref_site(0, l, RS_FFN_OUT));
    }
    if (c->pre_norm) ref_layernorm(enc_out, x, ref_par(p->e_lnf_g), ref_par(p->e_lnf_b), Ms, C, c->eps);
    else memcpy(enc_out, x, (size_t)Ms * C * sizeof(double));
    /* decoder */
    ref_embed(x, RM.tin, p->dec_emb, m->dec_pos_table, B, T, 1);
    for (int l = 0; l < c->dec_layers; l++) {
        const double *in = ref_sub_in(ln, x, p->d_ln1_g + l * C1, p->d_ln1_b + l * C1, Mt);
        ref_linear(big, in, ref_par(p->d_qkv_w + l * 3 * C1 * C1), ref_par(p->d_qkv_b + l * 3 * C1), Mt, C, 3 * C);
        ref_mha(ctx, big, 3 * C, big + C, big + 2 * C, 3 * C, NULL, B, T, T, C, c->heads, 1, adrop,
                ref_site(1, l, RS_ATT));
        ref_linear(f, ctx, ref_par(p->d_so_w + l * C1 * C1), ref_par(p->d_so_b + l * C1), Mt, C, C);
        ref_sub_out(x, f, p->d_ln1_g + l * C1, p->d_ln1_b + l * C1, Mt, drop, ref_site(1, l, RS_ATT_OUT));
        /* cross-attention: q from the decoder, fused k/v (2C) from the encoder's output */
        in = ref_sub_in(ln, x, p->d_ln2_g + l * C1, p->d_ln2_b + l * C1, Mt);
        ref_linear(big, in, ref_par(p->d_cq_w + l * C1 * C1), ref_par(p->d_cq_b + l * C1), Mt, C, C);
        ref_linear(kv, enc_out, ref_par(p->d_ckv_w + l * 2 * C1 * C1), ref_par(p->d_ckv_b + l * 2 * C1), Ms, C,
                   2 * C);
        ref_mha(ctx, big, C, kv, kv + C, 2 * C, klen, B, T, S, C, c->heads, 0, adrop, ref_site(1, l, RS_CATT));
        ref_linear(f, ctx, ref_par(p->d_co_w + l * C1 * C1), ref_par(p->d_co_b + l * C1), Mt, C, C);
        ref_sub_out(x, f, p->d_ln2_g + l * C1, p->d_ln2_b + l * C1, Mt, drop, ref_site(1, l, RS_CATT_OUT));
        in = ref_sub_in(ln, x, p->d_ln3_g + l * C1, p->d_ln3_b + l * C1, Mt);
        ref_ffn(f, big, in, p->d_fc1_w + l * F * C1, p->d_fc1_b + l * (size_t)F, p->d_fc2_w + l * C1 * F,
                p->d_fc2_b + l * C1, Mt, 1, l);
        ref_sub_out(x, f, p->d_ln3_g + l * C1, p->d_ln3_b + l * C1, Mt, drop, ref_site(1, l, RS_FFN_OUT));
    }
    const double *dec_out = x;
    if (c->pre_norm) {
        ref_layernorm(ln, x, ref_par(p->d_lnf_g), ref_par(p->d_lnf_b), Mt, C, c->eps);
        dec_out = ln;
    }
    ref_linear(logits, dec_out, ref_par(p->proj_w), ref_par(p->proj_b), Mt, C, V);
    /* label-smoothed cross-entropy, summed over the non-padding targets */
    double total = rr_xent(logits, RM.tout, Mt, V, c->label_smoothing, c->pad_id);
    free(x); free(ln); free(f); free(big); free(kv); free(enc_out); free(ctx); free(logits);
    return total;
}

static void model_case(const char *name, int pre_norm, int share, int tie, int learned, int proj_bias, activation_t act) {
    tmodel_config_t c = tmodel_default_config();
    c.src_vocab = 11; c.tgt_vocab = share ? 11 : 13;
    c.d = 8; c.heads = 2; c.ff = 12; c.enc_layers = 2; c.dec_layers = 2; c.max_pos = 8;
    c.pre_norm = pre_norm; c.share_emb = share; c.tie_proj = tie; c.learned_pos = learned; c.proj_bias = proj_bias;
    c.act = act; c.pad_id = 1; c.eps = 1e-5f;
    c.dropout = 0.1f; c.attn_dropout = 0.1f; c.act_dropout = 0.1f; c.label_smoothing = 0.1f;
    tmodel_t m;
    CHECK(tmodel_init(&m, &c) == TERN_OK);
    tmodel_init_params(&m, 42);
    /* make every parameter non-trivial (biases, layer norms, pad rows too) */
    uint64_t key = rng_mix64(777);
    for (size_t i = 0; i < m.n_params; i++) m.params[i] += (float)(0.2 * (rng_uniform(key, i) - 0.5));
    enum { B = 3, S = 6, T = 5 };
    int src[B * S] = {4, 5, 6, 7, 8, 2, 3, 9, 10, 2, 1, 1, 7, 2, 1, 1, 1, 1};
    int tin[B * T] = {0, 4, 5, 6, 7, 0, 8, 3, 1, 1, 0, 9, 1, 1, 1};
    int tout[B * T] = {4, 5, 6, 7, 2, 8, 3, 2, 1, 1, 9, 2, 1, 1, 1};
    tmodel_ws_t *ws;
    CHECK(tmodel_ws_new(&ws, &m, B * S, B * T, S, T) == TERN_OK);
    tmodel_ws_set_target_groups(ws, 0); /* the padded batch, as the reference computes it */
    tmodel_zero_grad(&m);
    tmodel_loss_t L;
    CHECK(tmodel_forward(&m, ws, src, tin, tout, B, S, T, 1, 99, 5, &L) == TERN_OK);
    CHECK_EQ_INT(L.ntokens, 10);
    CHECK(tmodel_backward(&m, ws, 1.0f) == TERN_OK);
    /* the reference computes the same function: its loss equals the float32 forward's */
    RM.m = &m; RM.P = malloc(m.n_params * sizeof(double));
    for (size_t i = 0; i < m.n_params; i++) RM.P[i] = m.params[i];
    RM.src = src; RM.tin = tin; RM.tout = tout; RM.B = B; RM.S = S; RM.T = T; RM.seed = 99; RM.step = 5;
    double lref = ref_model_loss(), fwd = fabs(L.loss - lref) / fabs(lref);
    CHECK_MSG(fwd <= MODEL_FWD_TOL, "model %s: float32 loss %.9g, double reference %.9g (rel %.3e)", name, L.loss,
              lref, fwd);
    /* every parameter: the float32 gradient against central differences of the double reference */
    double worst = 0, gscale = 0;
    const char *worst_name = "";
    for (int ti = 0; ti < m.n_tensors; ti++) {
        const tmodel_tensor_t *t = &m.tensors[ti];
        double dmax = 0, fmax = 0;
        for (size_t i = 0; i < t->numel; i++) {
            double *x = RM.P + t->offset + i, save = *x, hh = MODEL_FD_H;
            *x = save + hh;
            double lp = ref_model_loss();
            *x = save - hh;
            double lm = ref_model_loss();
            *x = save;
            double fd = (lp - lm) / (2 * hh), d = fabs(m.grads[t->offset + i] - fd);
            if (d > dmax) dmax = d;
            if (fabs(fd) > fmax) fmax = fabs(fd);
        }
        double err = dmax / (fmax > MODEL_FLOOR ? fmax : MODEL_FLOOR);
        if (fmax > gscale) gscale = fmax;
        if (err > worst) worst = err, worst_name = t->name;
    }
    printf("  model %-38s %d tensors: loss rel %.1e, gradients worst %.2e (%s)\n", name, m.n_tensors, fwd, worst,
           worst_name);
    CHECK_MSG(worst <= MODEL_TOL, "model %s: gradient error %.3e in %s", name, worst, worst_name);
    CHECK(gscale > 0.1); /* the gradients are not vanishing: the relative measure means something */
    free(RM.P);
    /* gradients accumulate: a second backward of the same batch doubles them */
    float *g1 = malloc(m.n_params * sizeof(float));
    memcpy(g1, m.grads, m.n_params * sizeof(float));
    CHECK(tmodel_forward(&m, ws, src, tin, tout, B, S, T, 1, 99, 5, &L) == TERN_OK);
    CHECK(tmodel_backward(&m, ws, 1.0f) == TERN_OK);
    double acc_err = 0;
    for (size_t i = 0; i < m.n_params; i++) {
        double e = fabs(m.grads[i] - 2 * g1[i]);
        if (e > acc_err) acc_err = e;
    }
    CHECK(acc_err <= 1e-5);
    /* a backward without a forward is refused */
    CHECK(tmodel_backward(&m, ws, 1.0f) == TERN_ERR_INVALID_ARG);
    free(g1);
    tmodel_ws_free(ws);
    tmodel_free(&m);
}

static void test_model(void) {
    printf("whole model (dropout on)\n");
    /* ReLU too: the differences (h = 1e-5, in double) cross its kink only where a pre-activation
     * lies within 1e-5 of 0, which none of this batch's does (a crossing would show as an error of
     * order 1, not pass unseen). */
    model_case("pre-norm swish shared+tied", 1, 1, 1, 0, 0, ACT_SWISH);
    model_case("post-norm gelu untied learned-pos bias", 0, 0, 0, 1, 1, ACT_GELU);
    model_case("pre-norm gelu-tanh tied-only", 1, 0, 1, 0, 0, ACT_GELU_TANH);
    model_case("post-norm gelu-sigmoid shared-untied", 0, 1, 0, 1, 0, ACT_GELU_SIGMOID);
    model_case("pre-norm relu untied learned-pos bias", 1, 0, 0, 1, 1, ACT_RELU);
}

static void test_model_errors(void) {
    printf("model argument checks\n");
    tmodel_config_t c = tmodel_default_config();
    c.d = 10; c.heads = 3;
    tmodel_t m;
    CHECK(tmodel_init(&m, &c) == TERN_ERR_INVALID_ARG);
    c = tmodel_default_config();
    c.src_vocab = 10; c.tgt_vocab = 12; c.share_emb = 1;
    CHECK(tmodel_init(&m, &c) == TERN_ERR_INVALID_ARG);
    c = tmodel_default_config();
    c.src_vocab = c.tgt_vocab = 10; c.d = 8; c.heads = 2; c.ff = 8; c.enc_layers = c.dec_layers = 1; c.max_pos = 8;
    CHECK(tmodel_init(&m, &c) == TERN_OK);
    /* names and sizes */
    CHECK(tmodel_find(&m, "encoder/layer_0/self_attention/linear_0/weight") != NULL);
    CHECK(tmodel_find(&m, "decoder/projection/weight") == tmodel_find(&m, "encoder/embeddings_0/weight"));
    CHECK(tmodel_find(&m, "decoder/layer_0/attention/linear_1/weight")->shape[0] == 16);
    size_t total = 0;
    for (int i = 0; i < m.n_tensors; i++) total += m.tensors[i].numel;
    CHECK(total == m.n_params);
    tmodel_ws_t *ws;
    CHECK(tmodel_ws_new(&ws, &m, 8, 8, 4, 4) == TERN_OK);
    int src[8] = {3, 4, 0, 0, 0, 0, 0, 0}, tin[4] = {2, 3, 4, 5}, tout[4] = {3, 4, 5, 6};
    /* empty source sentence (all padding) in sentence 1 */
    CHECK(tmodel_forward(&m, ws, src, tin, tout, 2, 4, 2, 0, 0, 0, NULL) == TERN_ERR_INVALID_ARG);
    int src2[4] = {3, 0, 4, 0};
    CHECK(tmodel_forward(&m, ws, src2, tin, tout, 1, 4, 4, 0, 0, 0, NULL) == TERN_ERR_INVALID_ARG); /* not right-padded */
    int src3[4] = {3, 11, 0, 0};
    CHECK(tmodel_forward(&m, ws, src3, tin, tout, 1, 4, 4, 0, 0, 0, NULL) == TERN_ERR_INVALID_ARG); /* id >= V */
    int src4[5] = {3, 4, 5, 6, 7};
    CHECK(tmodel_forward(&m, ws, src4, tin, tout, 1, 5, 4, 0, 0, 0, NULL) == TERN_ERR_INVALID_ARG); /* S > max */
    CHECK(tmodel_forward(&m, ws, src, tin, tout, 1, 4, 4, 0, 0, 0, NULL) == TERN_OK);
    tmodel_ws_free(ws);
    tmodel_free(&m);
}

/* ------------------------------------------------------------------ target groups */

/* The cost of the cheapest cut of the target lengths sorted longest first into contiguous groups,
 * by brute force over all 2^(B-1) cuts: min sum B_g·T_g + TMODEL_GROUP_COST·G (T_g: the group's
 * first). */
static long brute_cost(const int *len, int B) {
    int sorted[16];
    memcpy(sorted, len, (size_t)B * sizeof(int));
    for (int i = 1; i < B; i++) /* insertion sort, descending */
        for (int j = i; j > 0 && sorted[j] > sorted[j - 1]; j--) {
            int t = sorted[j]; sorted[j] = sorted[j - 1]; sorted[j - 1] = t;
        }
    long best = -1;
    for (unsigned cut = 0; cut < 1u << (B - 1); cut++) { /* bit i: a group starts at i + 1 */
        long rows = 0, G = 1;
        int T = sorted[0], n = 0;
        for (int k = 0; k < B; k++) {
            if (k > 0 && (cut >> (k - 1) & 1)) {
                rows += (long)n * T;
                G++;
                T = sorted[k];
                n = 0;
            }
            n++;
        }
        rows += (long)n * T;
        long cost = rows + TMODEL_GROUP_COST * G;
        if (best < 0 || cost < best) best = cost;
    }
    return best;
}

/* Grouped (the default) against tmodel_ws_set_target_groups(ws, 0), the padded B x T batch as
 * given: same loss, nll, token count, probabilities at every real target and every gradient
 * tensor, on random batches with very uneven target lengths (1-3 tokens beside long ones,
 * unsorted, a padding target inside a sentence, a sentence without any real target). */
static void groups_case(const char *name, int pre_norm, int share, int tie, int learned, int proj_bias) {
    tmodel_config_t c = tmodel_default_config();
    c.src_vocab = 23; c.tgt_vocab = share ? 23 : 29;
    c.d = 16; c.heads = 2; c.ff = 24; c.enc_layers = 2; c.dec_layers = 2; c.max_pos = 16;
    c.pre_norm = pre_norm; c.share_emb = share; c.tie_proj = tie; c.learned_pos = learned; c.proj_bias = proj_bias;
    c.act = ACT_GELU; c.pad_id = 1; c.eps = 1e-5f; c.label_smoothing = 0.1f;
    c.dropout = c.attn_dropout = c.act_dropout = 0.0f;
    tmodel_t m;
    CHECK(tmodel_init(&m, &c) == TERN_OK);
    tmodel_init_params(&m, 17);
    uint64_t key = rng_mix64(4242);
    for (size_t i = 0; i < m.n_params; i++) m.params[i] += (float)(0.2 * (rng_uniform(key, i) - 0.5));
    enum { B = 9, S = 7, T = 14 };
    tmodel_ws_t *wg, *wu;
    CHECK(tmodel_ws_new(&wg, &m, B * S, B * T, S, T) == TERN_OK);
    CHECK(tmodel_ws_new(&wu, &m, B * S, B * T, S, T) == TERN_OK);
    tmodel_ws_set_target_groups(wu, 0);
    float *gu = malloc(m.n_params * sizeof(float));
    double worst_g = 0, worst_p = 0, worst_l = 0;
    int min_rows = B * T, max_groups = 0;
    for (int trial = 0; trial < 6; trial++) {
        uint64_t k = rng_mix64(1000 + (uint64_t)trial * 7 + (uint64_t)pre_norm);
        int src[B * S], tin[B * T], tout[B * T], tl[B];
        for (int b = 0; b < B; b++) {
            int ls = 1 + (int)(rng_uniform(k, 100 + b) * S);
            /* lengths: mostly 1-3, two long ones at random places; trial 0 sorted ascending */
            int lt = 1 + (int)(rng_uniform(k, 200 + b) * 3);
            if (b == (trial * 3) % B) lt = T;
            if (b == (trial * 5 + 2) % B) lt = T - 1 - trial;
            if (trial == 0) lt = 1 + b * (T - 1) / (B - 1);
            tl[b] = lt;
            for (int s = 0; s < S; s++) src[b * S + s] = s < ls ? 2 + (int)(rng_uniform(k, 300 + b * S + s) * (c.src_vocab - 2)) : 1;
            for (int t = 0; t < T; t++) {
                int y = 2 + (int)(rng_uniform(k, 500 + b * T + t) * (c.tgt_vocab - 2));
                tout[b * T + t] = t < lt ? y : 1;
                tin[b * T + t] = t == 0 ? 0 : t < lt ? tout[b * T + t - 1] : 1;
            }
        }
        if (trial == 2) tout[4 * T + 1] = 1; /* a padding target inside a sentence (no loss there) */
        if (trial == 3) { /* a sentence with no real target */
            for (int t = 0; t < T; t++) tout[6 * T + t] = 1;
        }
        for (int b = 0; b < B; b++) { /* rows a sentence needs: through its last real target, at least 1 */
            tl[b] = T;
            while (tl[b] > 1 && tout[b * T + tl[b] - 1] == 1) tl[b]--;
        }
        tmodel_loss_t Lg, Lu;
        tmodel_zero_grad(&m);
        CHECK(tmodel_forward(&m, wu, src, tin, tout, B, S, T, 1, 3, (uint64_t)trial, &Lu) == TERN_OK);
        float *pu = malloc((size_t)B * T * c.tgt_vocab * sizeof(float));
        for (int b = 0; b < B; b++)
            for (int t = 0; t < T; t++) {
                const float *r = tmodel_ws_prob_row(wu, b, t);
                CHECK(r != NULL);
                if (r) memcpy(pu + (size_t)(b * T + t) * c.tgt_vocab, r, (size_t)c.tgt_vocab * sizeof(float));
            }
        CHECK(tmodel_backward(&m, wu, 0.5f) == TERN_OK);
        memcpy(gu, m.grads, m.n_params * sizeof(float));
        tmodel_zero_grad(&m);
        CHECK(tmodel_forward(&m, wg, src, tin, tout, B, S, T, 1, 3, (uint64_t)trial, &Lg) == TERN_OK);
        int G = 0, rows = tmodel_ws_decoder_rows(wg, &G);
        CHECK_EQ_INT(tmodel_ws_decoder_rows(wu, NULL), B * T);
        long cost = rows + (long)TMODEL_GROUP_COST * G, cost_ref = brute_cost(tl, B);
        CHECK_MSG(cost == cost_ref, "%s: the cut costs %ld (%d rows, %d groups), the best %ld", name, cost, rows, G,
                  cost_ref);
        if (rows < min_rows) min_rows = rows;
        if (G > max_groups) max_groups = G;
        for (int b = 0; b < B; b++)
            for (int t = 0; t < T; t++) {
                const float *r = tmodel_ws_prob_row(wg, b, t);
                if (tout[b * T + t] == c.pad_id) {
                    CHECK(t >= tl[b] || r != NULL);
                    continue;
                }
                CHECK(r != NULL);
                if (!r) continue;
                for (int v = 0; v < c.tgt_vocab; v++) {
                    double e = fabs(r[v] - pu[(size_t)(b * T + t) * c.tgt_vocab + v]);
                    if (e > worst_p) worst_p = e;
                }
            }
        free(pu);
        CHECK(tmodel_backward(&m, wg, 0.5f) == TERN_OK);
        CHECK_EQ_INT(Lg.ntokens, Lu.ntokens);
        double el = fabs(Lg.loss - Lu.loss) / fabs(Lu.loss), en = fabs(Lg.nll - Lu.nll) / fabs(Lu.nll);
        if (el > worst_l) worst_l = el;
        if (en > worst_l) worst_l = en;
        for (int ti = 0; ti < m.n_tensors; ti++) {
            const tmodel_tensor_t *t = &m.tensors[ti];
            double gmax = 0, e = 0;
            for (size_t i = 0; i < t->numel; i++) {
                double a = m.grads[t->offset + i], u = gu[t->offset + i];
                if (fabs(u) > gmax) gmax = fabs(u);
                if (fabs(a - u) > e) e = fabs(a - u);
            }
            CHECK_MSG(gmax > 0, "%s: %s has no gradient (the comparison would be vacuous)", name, t->name);
            if (gmax > 0 && e / gmax > worst_g) worst_g = e / gmax;
        }
    }
    printf("  %-40s rows %d of %d at least, up to %d groups; loss rel %.1e, probs %.1e, gradients rel %.1e\n", name,
           min_rows, B * T, max_groups, worst_l, worst_p, worst_g);
    CHECK_MSG(worst_l <= 1e-6, "%s: loss differs by %.3e (relative)", name, worst_l);
    CHECK_MSG(worst_p <= 1e-6, "%s: probabilities differ by %.3e", name, worst_p);
    CHECK_MSG(worst_g <= 1e-5, "%s: gradients differ by %.3e (max |diff| / max |g| of a tensor)", name, worst_g);
    CHECK(min_rows < B * T / 2 && max_groups >= 2);
    free(gu);
    tmodel_ws_free(wg);
    tmodel_ws_free(wu);
    tmodel_free(&m);
}

static void test_target_groups(void) {
    printf("target groups = the padded batch (dropout off)\n");
    groups_case("pre-norm shared+tied sinusoid", 1, 1, 1, 0, 0);
    groups_case("post-norm untied learned-pos bias", 0, 0, 0, 1, 1);
    groups_case("pre-norm tied-only learned-pos", 1, 0, 1, 1, 0);
}

/* ------------------------------------------------------------------ optimizer pieces */

static void test_optim(void) {
    printf("optimizer, schedules, clipping, loss scaler\n");
    /* Adam against a double-precision transcription of torch.optim.AdamW / Adam; N: the vector
     * loop (8 at a time) and the tail; dec 2: no weight decay */
    enum { N = 37 };
    for (int dec = 0; dec < 3; dec++) {
        float wd = dec == 2 ? 0.0f : 0.01f;
        adam_config_t ac = {0.9f, 0.98f, 1e-8f, wd, dec == 1};
        adam_t a;
        CHECK(adam_init(&a, N, &ac) == TERN_OK);
        float p[N], g[N];
        double pd[N], md[N] = {0}, vd[N] = {0};
        rand_fill(p, N, -1, 1);
        for (int i = 0; i < N; i++) pd[i] = p[i];
        double worst = 0;
        for (int t = 1; t <= 20; t++) {
            rand_fill(g, N, -1e-2f, 1e-2f);
            float lr = 1e-3f * (float)t;
            adam_step(&a, p, g, lr);
            double bc1 = 1 - pow(0.9, t), bc2 = 1 - pow(0.98, t);
            for (int i = 0; i < N; i++) {
                double gi = g[i];
                if (dec == 1) pd[i] *= 1 - (double)lr * 0.01;
                else if (dec == 0) gi += 0.01 * pd[i];
                md[i] = 0.9 * md[i] + 0.1 * gi;
                vd[i] = 0.98 * vd[i] + 0.02 * gi * gi;
                pd[i] -= lr / bc1 * md[i] / (sqrt(vd[i]) / sqrt(bc2) + 1e-8);
                double e = fabs(p[i] - pd[i]) / (fabs(pd[i]) + 1e-3);
                if (e > worst) worst = e;
            }
        }
        printf("  adam (%s decay) 20 steps: max rel err vs double %.2e\n", dec == 2 ? "no" : dec ? "decoupled" : "L2",
               worst);
        CHECK(worst < 1e-5);
        adam_free(&a);
    }
    /* adam_step_scaled(g, c) is grad_scale(g, c) then adam_step: bit for bit, the gradients kept */
    for (int dec = 0; dec < 3; dec++) {
        adam_config_t ac = {0.9f, 0.98f, 1e-8f, dec == 2 ? 0.0f : 0.01f, dec == 1};
        adam_t a1, a2;
        CHECK(adam_init(&a1, N, &ac) == TERN_OK);
        CHECK(adam_init(&a2, N, &ac) == TERN_OK);
        float p1[N], p2[N], g[N], gs[N];
        rand_fill(p1, N, -1, 1);
        memcpy(p2, p1, sizeof p1);
        int same = 1;
        for (int t = 1; t <= 5; t++) {
            rand_fill(g, N, -1, 1);
            float coef = clip_grad_coef(grad_global_norm(g, N), 0.5f);
            CHECK(coef < 1.0f);
            memcpy(gs, g, sizeof g);
            clip_grad_norm(gs, N, 0.5f);
            adam_step(&a1, p1, gs, 1e-3f);
            float g0 = g[0];
            adam_step_scaled(&a2, p2, g, coef, 1e-3f);
            same &= g[0] == g0 && !memcmp(p1, p2, sizeof p1) && !memcmp(a1.m, a2.m, N * sizeof(float)) &&
                    !memcmp(a1.v, a2.v, N * sizeof(float));
        }
        CHECK_MSG(same, "adam_step_scaled differs from clip_grad_norm + adam_step (mode %d)", dec);
        adam_free(&a1);
        adam_free(&a2);
    }
    CHECK(clip_grad_coef(0.5, 1.0f) == 1.0f && clip_grad_coef(2.0, 0.0f) == 1.0f && clip_grad_coef(NAN, 1.0f) == 1.0f);
    CHECK(clip_grad_coef(4.0, 1.0f) == (float)(1.0 / (4.0 + 1e-6)));
    /* SGD */
    float p1[2] = {1, -2}, g1[2] = {0.5f, 0.25f};
    sgd_step(p1, g1, 2, 0.1f, 0.0f);
    CHECK_NEAR(p1[0], 0.95, 1e-7, 0);
    CHECK_NEAR(p1[1], -2.025, 1e-6, 0);
    /* clipping */
    float g[4] = {3, 4, 0, 0};
    CHECK_NEAR(grad_global_norm(g, 4), 5.0, 1e-12, 0);
    double n = clip_grad_norm(g, 4, 1.0f);
    CHECK_NEAR(n, 5.0, 1e-12, 0);
    CHECK_NEAR(grad_global_norm(g, 4), 1.0, 1e-6, 0);
    float g2[2] = {0.3f, 0.4f};
    clip_grad_norm(g2, 2, 1.0f);
    CHECK(g2[0] == 0.3f && g2[1] == 0.4f);
    float g3[2] = {INFINITY, 1};
    CHECK(!isfinite(grad_global_norm(g3, 2)));
    /* inverse_sqrt as fairseq: 1e-7 -> 5e-4 over 4000 updates, then 5e-4 * sqrt(4000 / t) */
    lr_schedule_t s = {0};
    s.kind = LR_INVERSE_SQRT; s.lr = 5e-4f; s.warmup = 4000; s.warmup_init_lr = 1e-7f;
    CHECK(lr_schedule_check(&s) == TERN_OK);
    CHECK_NEAR(lr_at(&s, 0), 1e-7, 1e-12, 0);
    CHECK_NEAR(lr_at(&s, 2000), 1e-7 + 2000 * (5e-4 - 1e-7) / 4000, 1e-12, 1e-6);
    CHECK_NEAR(lr_at(&s, 4000), 5e-4, 0, 1e-6);
    CHECK_NEAR(lr_at(&s, 16000), 2.5e-4, 0, 1e-6);
    CHECK(!lr_use_sgd(&s, 100000));
    s.warmup = 0;
    CHECK(lr_schedule_check(&s) == TERN_ERR_INVALID_ARG);
    /* constant */
    lr_schedule_t k = {0};
    k.kind = LR_CONSTANT; k.lr = 0.01f;
    CHECK_NEAR(lr_at(&k, 12345), 0.01, 0, 1e-6);
    /* GNMT: Adam 1e-3 until 100, SGD 0.5 from 100, halved at 200, 250, 300 (3 times) */
    lr_schedule_t gn = {0};
    gn.kind = LR_GNMT; gn.lr = 1e-3f; gn.sgd_start = 100; gn.sgd_lr = 0.5f; gn.decay_start = 200;
    gn.decay_interval = 50; gn.decay_times = 3;
    CHECK(lr_schedule_check(&gn) == TERN_OK);
    CHECK(!lr_use_sgd(&gn, 99) && lr_use_sgd(&gn, 100));
    CHECK_NEAR(lr_at(&gn, 99), 1e-3, 0, 1e-6);
    CHECK_NEAR(lr_at(&gn, 150), 0.5, 0, 1e-7);
    CHECK_NEAR(lr_at(&gn, 200), 0.25, 0, 1e-7);
    CHECK_NEAR(lr_at(&gn, 249), 0.25, 0, 1e-7);
    CHECK_NEAR(lr_at(&gn, 250), 0.125, 0, 1e-7);
    CHECK_NEAR(lr_at(&gn, 300), 0.0625, 0, 1e-7);
    CHECK_NEAR(lr_at(&gn, 10000), 0.0625, 0, 1e-7);
    /* loss scaler: halve on overflow and skip; double after 3 clean updates */
    loss_scaler_t ls;
    loss_scaler_init(&ls, 1024.0f, 3);
    int apply;
    CHECK(loss_scaler_update(&ls, 1, &apply) == TERN_OK && !apply && ls.scale == 512.0f);
    CHECK(loss_scaler_update(&ls, 0, &apply) == TERN_OK && apply && ls.scale == 512.0f);
    CHECK(loss_scaler_update(&ls, 0, &apply) == TERN_OK && ls.scale == 512.0f);
    CHECK(loss_scaler_update(&ls, 0, &apply) == TERN_OK && apply && ls.scale == 1024.0f);
    CHECK(loss_scaler_update(&ls, 0, &apply) == TERN_OK && ls.scale == 1024.0f);
    CHECK(loss_scaler_update(&ls, 1, &apply) == TERN_OK && !apply && ls.scale == 512.0f && ls.clean == 0);
    CHECK_EQ_INT(ls.overflows, 2);
    loss_scaler_init(&ls, 1.5e-4f, 3);
    CHECK(loss_scaler_update(&ls, 1, &apply) == TERN_ERR_INPUT);
}

/* The fused passes of the Transformer's training (model.c) give bit for bit what the separate
 * layers they replace give (those are checked against references above). */
static void test_fused_passes(void) {
    printf("fused passes (bit-identical to the separate layers)\n");
    static const int shapes[][2] = {{53, 4100}, {7, 13}, {300, 512}};
    for (int sh = 0; sh < 3; sh++) {
        int M = shapes[sh][0], N = shapes[sh][1];
        size_t n = (size_t)M * N;
        float *x = malloc(n * sizeof(float)), *fc = malloc(n * sizeof(float)), *a = malloc(n * sizeof(float)),
              *b = malloc(n * sizeof(float)), *db1 = calloc((size_t)N, sizeof(float)),
              *db2 = calloc((size_t)N, sizeof(float));
        rand_fill(x, n, -1, 1);
        rand_fill(fc, n, -1, 1);
        for (int pi = 0; pi < 2; pi++) {
            float p = pi ? 0.1f : 0.0f;
            uint64_t key = dropout_key(5, (uint64_t)sh, (uint64_t)pi);
            /* forward: dropout(act(inp)) */
            nn_activation_forward(a, fc, n, ACT_RELU);
            nn_dropout_forward(a, a, n, p, key);
            nn_activation_dropout_forward(b, fc, n, ACT_RELU, p, key);
            CHECK_MSG(!memcmp(a, b, n * sizeof(float)), "activation+dropout %dx%d p %g", M, N, p);
            nn_activation_forward(a, fc, n, ACT_GELU);
            nn_dropout_forward(a, a, n, p, key);
            nn_activation_dropout_forward(b, fc, n, ACT_GELU, p, key);
            CHECK_MSG(!memcmp(a, b, n * sizeof(float)), "gelu+dropout %dx%d p %g", M, N, p);
            /* forward: dropout(sum) + x */
            memcpy(a, fc, n * sizeof(float));
            memcpy(b, fc, n * sizeof(float));
            nn_dropout_forward(a, a, n, p, key);
            nn_residual_forward(a, a, x, n);
            nn_dropout_residual_forward(b, x, n, p, key);
            CHECK_MSG(!memcmp(a, b, n * sizeof(float)), "dropout+residual %dx%d p %g", M, N, p);
            /* backward: act'(inp) * dropout(d), with the column sums */
            for (int act = 0; act < 2; act++) {
                activation_t f = act ? ACT_GELU : ACT_RELU;
                memcpy(a, x, n * sizeof(float));
                memcpy(b, x, n * sizeof(float));
                memset(db1, 0, (size_t)N * sizeof(float));
                memset(db2, 0, (size_t)N * sizeof(float));
                if (p > 0) nn_dropout_forward(a, a, n, p, key);
                nn_activation_backward_set(a, a, fc, n, f);
                nn_bias_backward(db1, a, M, N);
                nn_activation_backward_bias(b, fc, M, N, f, p, key, db2);
                CHECK_MSG(!memcmp(a, b, n * sizeof(float)) && !memcmp(db1, db2, (size_t)N * sizeof(float)),
                          "activation backward+bias %dx%d p %g act %d", M, N, p, act);
            }
            /* backward: dropout(d) into a fresh buffer, with the column sums */
            if (p > 0) {
                memset(db1, 0, (size_t)N * sizeof(float));
                memset(db2, 0, (size_t)N * sizeof(float));
                nn_dropout_forward(a, x, n, p, key);
                nn_bias_backward(db1, a, M, N);
                nn_dropout_forward_bias(b, x, M, N, p, key, db2);
                CHECK_MSG(!memcmp(a, b, n * sizeof(float)) && !memcmp(db1, db2, (size_t)N * sizeof(float)),
                          "dropout+bias %dx%d", M, N);
            }
        }
        /* the column sums against a double reference */
        memset(db1, 0, (size_t)N * sizeof(float));
        nn_bias_backward(db1, x, M, N);
        int bad = 0;
        for (int c = 0; c < N; c++) {
            double r = 0;
            for (int m = 0; m < M; m++) r += x[(size_t)m * N + c];
            if (fabs(db1[c] - r) > 1e-6 * (1 + fabs(r))) bad++;
        }
        CHECK_MSG(bad == 0, "%d column sums of %dx%d off", bad, M, N);
        free(x), free(fc), free(a), free(b), free(db1), free(db2);
    }
}

int main(void) {
    test_embedding();
    test_layernorm();
    test_linear();
    test_activations();
    test_dropout();
    test_fused_passes();
    test_attention();
    test_crossentropy();
    test_optim();
    test_model_errors();
    test_model();
    test_target_groups();
    return check_report("test_train_grad");
}
