/* test_rnn_grad.c — finite-difference gradient checks of the recurrent layers (nn/rnn.h).
 *
 * Every layer's float32 forward and backward is compared with a double-precision reference forward
 * written here, independently, from the defining equations (per sentence and per step, plain
 * loops). The loss is L = Σ R ⊙ out with fixed random R (so dout = R); the reference gradient of
 * every input and parameter is the central difference (h = 1e-6) of the double forward. The error
 * of a tensor is
 *     max_i |analytic_i − fd_i| / max_i |fd_i|        (relative to the tensor's largest entry)
 * and must stay below 1e-4; the float forward must match the double reference within 1e-5 on the
 * same measure. Every gradient buffer starts at 0.25 and that is subtracted (the += convention).
 * Shapes are small, lengths include padding (sentences shorter than T, sources shorter than S), and
 * both directions run. The decoding steps of the cGRU and of GNMT's bottom decoder layer are also
 * checked against the training forward (same values at every step, within 1e-6).
 */
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "ref_rnn.h"
#include "nn/layers.h"
#include "nn/rnn.h"

#define GRAD_TOL 1e-4
#define FWD_TOL 1e-5
#define FD_H 1e-6
#define PRE 0.25f

static uint64_t g_seed = 777;

/* ------------------------------------------------------------ tensors under test */

typedef struct {
    const char *name;
    size_t n;
    float *f;  /* the float value the layer reads */
    double *d; /* the same values for the reference (perturbed by the finite differences) */
    float *g;  /* the analytic gradient (starts at PRE) */
} param_t;

#define MAXP 48
static param_t P[MAXP];
static int NP;

static param_t *add(const char *name, size_t n, double scale) {
    param_t *p = &P[NP++];
    p->name = name;
    p->n = n;
    p->f = malloc(n * sizeof(float));
    p->d = malloc(n * sizeof(double));
    p->g = malloc(n * sizeof(float));
    uint64_t key = rng_mix64(g_seed++);
    for (size_t i = 0; i < n; i++) {
        p->f[i] = (float)(scale * (2 * rng_uniform(key, i) - 1));
        p->d[i] = p->f[i];
        p->g[i] = PRE;
    }
    return p;
}

static void free_params(void) {
    for (int i = 0; i < NP; i++) {
        free(P[i].f);
        free(P[i].d);
        free(P[i].g);
    }
    NP = 0;
}

static double rel_err(const float *a, float pre, const double *b, size_t n) {
    double md = 0, mb = 0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - pre - b[i]);
        if (d > md || isnan(d)) md = isnan(d) ? INFINITY : d;
        if (fabs(b[i]) > mb) mb = fabs(b[i]);
    }
    return mb > 0 ? md / mb : md;
}

/* The reference forward writes the output (n_out doubles) from the P[].d values. */
typedef void (*ref_fn)(double *out);
static ref_fn g_ref;
static double *g_R, *g_out;
static size_t g_nout;

static double loss(void) {
    g_ref(g_out);
    double s = 0;
    for (size_t i = 0; i < g_nout; i++) s += g_R[i] * g_out[i];
    return s;
}

/* Checks the float forward out (n values) against the reference, then every tensor's gradient. */
static void check_all(const char *layer, const float *out, const double *R, size_t nout, ref_fn ref) {
    g_ref = ref;
    g_R = (double *)R;
    g_nout = nout;
    g_out = malloc(nout * sizeof(double));
    ref(g_out);
    double e = rel_err(out, 0, g_out, nout);
    printf("%-28s forward                        rel err %.2e\n", layer, e);
    CHECK_MSG(e <= FWD_TOL, "%s forward: %.3e > %.1e", layer, e, FWD_TOL);
    for (int k = 0; k < NP; k++) {
        param_t *p = &P[k];
        double *fd = malloc(p->n * sizeof(double));
        for (size_t i = 0; i < p->n; i++) {
            double save = p->d[i];
            p->d[i] = save + FD_H;
            double lp = loss();
            p->d[i] = save - FD_H;
            double lm = loss();
            p->d[i] = save;
            fd[i] = (lp - lm) / (2 * FD_H);
        }
        double ge = rel_err(p->g, PRE, fd, p->n);
        printf("%-28s d%-28s rel err %.2e\n", layer, p->name, ge);
        CHECK_MSG(ge <= GRAD_TOL, "%s d%s: %.3e > %.1e", layer, p->name, ge, GRAD_TOL);
        free(fd);
    }
    free(g_out);
}

static float *rand_f(size_t n, double scale, double **dcopy) {
    float *x = malloc(n * sizeof(float));
    double *d = malloc(n * sizeof(double));
    uint64_t key = rng_mix64(g_seed++);
    for (size_t i = 0; i < n; i++) d[i] = x[i] = (float)(scale * (2 * rng_uniform(key, i) - 1));
    *dcopy = d;
    return x;
}

static float *zeros(size_t n) { return calloc(n, sizeof(float)); }

/* ------------------------------------------------------------ double references (ref_rnn.h: the
 * cells, linear maps and the GRU's normalization, shared with the whole-model checks) */

/* A sequence per sentence: out[b, t] (stride ldo) = carried state; steps t >= len[b] keep it. */
static void ref_seq(double *out, int ldo, const double *inp, const double *h0, const double *c0, rr_cell_t w,
                    const int *len, int B, int T, int K, int H, int reverse, int lstm) {
    for (int b = 0; b < B; b++) {
        double h[64], c[64], hn[64], cn[64];
        for (int j = 0; j < H; j++) {
            h[j] = h0 ? h0[b * H + j] : 0;
            c[j] = c0 ? c0[b * H + j] : 0;
        }
        for (int s = 0; s < T; s++) {
            int t = reverse ? T - 1 - s : s;
            if (t < len[b]) {
                const double *x = inp + ((size_t)b * T + t) * K;
                if (lstm) rr_lstm_cell(hn, cn, x, h, c, w, K, H);
                else rr_gru_cell(hn, x, h, w, K, H);
                memcpy(h, hn, sizeof h);
                memcpy(c, cn, sizeof c);
            }
            memcpy(out + ((size_t)b * T + t) * ldo, h, (size_t)H * sizeof(double));
        }
    }
}

/* GRU cells added while g_ln is set are layer-normalized (four more tensors after the biases). */
static int g_ln;
static int cell_ln(param_t *p) { return p[0].name[strlen(p[0].name) - 1] == '+'; }

static rnn_cell_t fcell(param_t *p) {
    rnn_cell_t c = {.w_ih = p[0].f, .w_hh = p[1].f, .b_ih = p[2].f, .b_hh = p[3].f};
    if (cell_ln(p)) c.ln_ih_g = p[4].f, c.ln_ih_b = p[5].f, c.ln_hh_g = p[6].f, c.ln_hh_b = p[7].f;
    return c;
}
static rnn_cell_t gcell(param_t *p) {
    rnn_cell_t c = {.w_ih = p[0].g, .w_hh = p[1].g, .b_ih = p[2].g, .b_hh = p[3].g};
    if (cell_ln(p)) c.ln_ih_g = p[4].g, c.ln_ih_b = p[5].g, c.ln_hh_g = p[6].g, c.ln_hh_b = p[7].g;
    return c;
}
static rr_cell_t dcell(param_t *p) {
    rr_cell_t c = {p[0].d, p[1].d, p[2].d, p[3].d, NULL, NULL, NULL, NULL};
    if (cell_ln(p)) c.ig = p[4].d, c.ib = p[5].d, c.hg = p[6].d, c.hb = p[7].d;
    return c;
}

static param_t *add_cell(const char *prefix, int G, int K, int H) {
    static char names[16][8][48];
    static int used;
    int ln = g_ln && G == 3;
    char(*nm)[48] = names[used++ % 16];
    snprintf(nm[0], 48, "%sw_ih%s", prefix, ln ? " (ln)+" : ""); /* the '+' marks a normalized cell */
    snprintf(nm[1], 48, "%sw_hh", prefix);
    snprintf(nm[2], 48, "%sb_ih", prefix);
    snprintf(nm[3], 48, "%sb_hh", prefix);
    param_t *p = add(nm[0], (size_t)G * H * K, 0.6);
    add(nm[1], (size_t)G * H * H, 0.6);
    add(nm[2], (size_t)G * H, 0.3);
    add(nm[3], (size_t)G * H, 0.3);
    if (ln) {
        const char *ln_names[4] = {"ln_ih.gain", "ln_ih.bias", "ln_hh.gain", "ln_hh.bias"};
        for (int k = 0; k < 4; k++) {
            snprintf(nm[4 + k], 48, "%s%s", prefix, ln_names[k]);
            param_t *q = add(nm[4 + k], (size_t)G * H, 0.4);
            if (k % 2 == 0) /* gains around 1 */
                for (size_t i = 0; i < q->n; i++) q->f[i] += 1.0f, q->d[i] = q->f[i];
        }
    }
    return p;
}

/* ------------------------------------------------------------ GRU / LSTM sequences */

static struct {
    int B, T, K, H, reverse, lstm, bi;
    int *len;
    param_t *inp, *h0, *c0, *w, *wb;
} S;

static void ref_seq_case(double *out) {
    int W = S.bi ? 2 * S.H : S.H;
    ref_seq(out, W, S.inp->d, S.h0 ? S.h0->d : NULL, S.c0 ? S.c0->d : NULL, dcell(S.w), S.len, S.B, S.T, S.K, S.H,
            S.bi ? 0 : S.reverse, S.lstm);
    if (S.bi)
        ref_seq(out + S.H, W, S.inp->d, NULL, NULL, dcell(S.wb), S.len, S.B, S.T, S.K, S.H, 1, S.lstm);
}

static void test_seq_shape(int lstm, int bi, int reverse, int B, int T, int *len) {
    int K = 4, H = 3;
    int G = lstm ? 4 : 3, W = bi ? 2 * H : H;
    size_t BT = (size_t)B * T;
    memset(&S, 0, sizeof S);
    S.B = B, S.T = T, S.K = K, S.H = H, S.reverse = reverse, S.lstm = lstm, S.bi = bi, S.len = len;
    S.inp = add("inp", BT * K, 1.0);
    if (!bi) {
        S.h0 = add("h0", (size_t)B * H, 0.8);
        if (lstm) S.c0 = add("c0", (size_t)B * H, 0.8);
    }
    S.w = add_cell(bi ? "fwd." : "", G, K, H);
    if (bi) S.wb = add_cell("bwd.", G, K, H);
    double *Rd;
    float *R = rand_f(BT * W, 1.0, &Rd);
    float *out = zeros(BT * W), *gf = zeros(nn_gru_gates_size(BT, H, 1)), *gb = zeros(nn_gru_gates_size(BT, H, 1));
    float *cf = zeros(BT * H), *cb = zeros(BT * H);
    size_t ns = lstm ? nn_lstm_backward_scratch(B, T, H) : nn_gru_backward_scratch(B, T, H, g_ln);
    float *scr = zeros(ns);
    rnn_cell_t wf = fcell(S.w), dwf = gcell(S.w), wbk = {0}, dwb = {0};
    if (bi) wbk = fcell(S.wb), dwb = gcell(S.wb);
    char name[64];
    snprintf(name, sizeof name, "%s%s%s%s B=%d T=%d", bi ? "bi" : "", lstm ? "lstm" : "gru",
             !lstm && g_ln ? "-ln" : "", reverse ? " reverse" : "", B, T);
    if (!lstm && !bi) {
        nn_gru_forward(out, H, gf, S.inp->f, S.h0->f, &wf, len, B, T, K, H, reverse);
        nn_gru_backward(S.inp->g, S.h0->g, &dwf, scr, R, H, S.inp->f, S.h0->f, &wf, out, gf, len, B, T, K, H, reverse);
    } else if (!lstm) {
        nn_bigru_forward(out, gf, gb, S.inp->f, &wf, &wbk, len, B, T, K, H);
        nn_bigru_backward(S.inp->g, &dwf, &dwb, scr, R, S.inp->f, &wf, &wbk, out, gf, gb, len, B, T, K, H);
    } else if (!bi) {
        nn_lstm_forward(out, H, cf, gf, S.inp->f, S.h0->f, S.c0->f, &wf, len, B, T, K, H, reverse);
        nn_lstm_backward(S.inp->g, S.h0->g, S.c0->g, &dwf, scr, R, H, S.inp->f, S.h0->f, S.c0->f, &wf, out, cf, gf,
                         len, B, T, K, H, reverse);
    } else {
        nn_bilstm_forward(out, cf, cb, gf, gb, S.inp->f, &wf, &wbk, len, B, T, K, H);
        nn_bilstm_backward(S.inp->g, &dwf, &dwb, scr, R, S.inp->f, &wf, &wbk, out, cf, cb, gf, gb, len, B, T, K, H);
    }
    check_all(name, out, Rd, BT * W, ref_seq_case);
    free(R), free(Rd), free(out), free(gf), free(gb), free(cf), free(cb), free(scr);
    free_params();
}

static void test_seq(int lstm, int bi, int reverse) {
    static int len[3] = {5, 3, 1};
    test_seq_shape(lstm, bi, reverse, 3, 5, len);
}

/* ------------------------------------------------------------ cells (one step, R rows) */

static struct { int R, K, H, lstm; param_t *x, *h, *c, *w; } C1;

static void ref_cell_case(double *out) {
    int H = C1.H;
    for (int r = 0; r < C1.R; r++) {
        const double *x = C1.x->d + (size_t)r * C1.K, *hp = C1.h->d + (size_t)r * H;
        if (C1.lstm)
            rr_lstm_cell(out + (size_t)r * 2 * H, out + (size_t)r * 2 * H + H, x, hp, C1.c->d + (size_t)r * H,
                          dcell(C1.w), C1.K, H);
        else rr_gru_cell(out + (size_t)r * H, x, hp, dcell(C1.w), C1.K, H);
    }
}

static void test_cell(int lstm) {
    int R = 4, K = 5, H = 3, W = lstm ? 2 * H : H;
    memset(&C1, 0, sizeof C1);
    C1.R = R, C1.K = K, C1.H = H, C1.lstm = lstm;
    C1.x = add("x", (size_t)R * K, 1.0);
    C1.h = add("h_prev", (size_t)R * H, 0.8);
    if (lstm) C1.c = add("c_prev", (size_t)R * H, 0.8);
    C1.w = add_cell("", lstm ? 4 : 3, K, H);
    double *Rd;
    float *Rf = rand_f((size_t)R * W, 1.0, &Rd);
    float *out = zeros((size_t)R * W), *g = zeros(nn_gru_gates_size((size_t)R, H, 1));
    float *scr = zeros(nn_gru_cell_backward_scratch(R, H, 1));
    rnn_cell_t w = fcell(C1.w), dw = gcell(C1.w);
    if (lstm) {
        /* out rows: [h, c]; dh and dc are the two halves of R */
        float *h = zeros((size_t)R * H), *c = zeros((size_t)R * H), *dh = zeros((size_t)R * H), *dc = zeros((size_t)R * H);
        nn_lstm_cell_forward(h, c, g, C1.x->f, C1.h->f, C1.c->f, &w, R, K, H);
        for (int r = 0; r < R; r++) {
            memcpy(out + (size_t)r * W, h + (size_t)r * H, H * sizeof(float));
            memcpy(out + (size_t)r * W + H, c + (size_t)r * H, H * sizeof(float));
            memcpy(dh + (size_t)r * H, Rf + (size_t)r * W, H * sizeof(float));
            memcpy(dc + (size_t)r * H, Rf + (size_t)r * W + H, H * sizeof(float));
        }
        nn_lstm_cell_backward(C1.x->g, C1.h->g, C1.c->g, &dw, scr, dh, dc, C1.x->f, C1.h->f, C1.c->f, &w, g, c, R, K, H);
        free(h), free(c), free(dh), free(dc);
    } else {
        nn_gru_cell_forward(out, g, C1.x->f, C1.h->f, &w, R, K, H);
        nn_gru_cell_backward(C1.x->g, C1.h->g, &dw, scr, Rf, C1.x->f, C1.h->f, &w, g, R, K, H);
    }
    check_all(lstm ? "lstm cell" : g_ln ? "gru-ln cell" : "gru cell", out, Rd, (size_t)R * W, ref_cell_case);
    free(Rf), free(Rd), free(out), free(g), free(scr);
    free_params();
}

/* ------------------------------------------------------------ GNMT stacked encoder */

static struct { int B, T, K, H, L, bi; int *len; param_t *inp, *w[8]; } GE;

static void ref_gnmt_case(double *out) {
    int B = GE.B, T = GE.T, H = GE.H;
    size_t BT = (size_t)B * T;
    double *x = malloc(BT * 2 * H * sizeof(double)), *y = malloc(BT * 2 * H * sizeof(double));
    int W = GE.bi ? 2 * H : H;
    ref_seq(x, W, GE.inp->d, NULL, NULL, dcell(GE.w[0]), GE.len, B, T, GE.K, H, 0, 1);
    if (GE.bi) ref_seq(x + H, W, GE.inp->d, NULL, NULL, dcell(GE.w[GE.L]), GE.len, B, T, GE.K, H, 1, 1);
    for (int l = 1; l < GE.L; l++) {
        ref_seq(y, H, x, NULL, NULL, dcell(GE.w[l]), GE.len, B, T, W, H, 0, 1);
        if (l >= 2)
            for (size_t i = 0; i < BT * H; i++) y[i] += x[i];
        memcpy(x, y, BT * H * sizeof(double));
        W = H;
    }
    memcpy(out, x, BT * W * sizeof(double));
    free(x), free(y);
}

static void test_gnmt_encoder(int L, int bi) {
    int B = 3, T = 4, K = 3, H = 3;
    static int len[3] = {4, 2, 3};
    size_t BT = (size_t)B * T;
    memset(&GE, 0, sizeof GE);
    GE.B = B, GE.T = T, GE.K = K, GE.H = H, GE.L = L, GE.bi = bi, GE.len = len;
    GE.inp = add("inp", BT * K, 1.0);
    static char pre[8][16];
    for (int l = 0; l < L + (bi ? 1 : 0); l++) {
        snprintf(pre[l], sizeof pre[l], l == L ? "L0bwd." : "L%d.", l);
        int Kin = l == 0 || l == L ? K : l == 1 && bi ? 2 * H : H;
        GE.w[l] = add_cell(pre[l], 4, Kin, H);
    }
    int dirs = bi ? 2 : 1, Wout = L == 1 ? dirs * H : H;
    float *h[8], *y[8], *cell[8], *gates[8];
    for (int l = 0; l < L; l++) {
        int d = l == 0 ? dirs : 1;
        h[l] = zeros(BT * d * H), y[l] = l >= 2 ? zeros(BT * H) : NULL;
        cell[l] = zeros(d * BT * H), gates[l] = zeros(d * BT * 4 * H);
    }
    gnmt_encoder_acts_t acts = {h, y, cell, gates, NULL, 0.0f, NULL};
    rnn_cell_t w[8], dw[8];
    for (int l = 0; l < L + (bi ? 1 : 0); l++) w[l] = fcell(GE.w[l]), dw[l] = gcell(GE.w[l]);
    nn_gnmt_encoder_forward(&acts, GE.inp->f, w, len, B, T, K, H, L, bi);
    double *Rd;
    float *R = rand_f(BT * Wout, 1.0, &Rd);
    float *scr = zeros(nn_gnmt_encoder_backward_scratch(B, T, H, bi));
    nn_gnmt_encoder_backward(GE.inp->g, dw, scr, R, &acts, GE.inp->f, w, len, B, T, K, H, L, bi);
    char name[64];
    snprintf(name, sizeof name, "gnmt encoder L=%d%s", L, bi ? " bi" : "");
    check_all(name, nn_gnmt_encoder_output(&acts, L), Rd, BT * Wout, ref_gnmt_case);
    for (int l = 0; l < L; l++) free(h[l]), free(y[l]), free(cell[l]), free(gates[l]);
    free(R), free(Rd), free(scr);
    free_params();
}

/* ------------------------------------------------------------ additive attention */

static struct { int B, Tq, S, Dq, A, Dv; int *klen; param_t *q, *keys, *wq, *wk, *b, *v; } AT;

/* ctx of one query row against sentence b's keys (keys = values). */
static void ref_att_row(double *ctx, double *alpha, const double *q, const double *keys, const double *wq,
                        const double *wk, const double *bk, const double *v, int L, int S, int Dq, int A, int Dv) {
    double qp[64], kp[64], e[32], mx = -1e300, sum = 0;
    rr_lin(qp, wq, NULL, q, A, Dq);
    for (int j = 0; j < L; j++) {
        rr_lin(kp, wk, bk, keys + (size_t)j * Dv, A, Dv);
        double s = 0;
        for (int a = 0; a < A; a++) s += v[a] * tanh(qp[a] + kp[a]);
        e[j] = s;
        if (s > mx) mx = s;
    }
    for (int j = 0; j < L; j++) sum += e[j] = exp(e[j] - mx);
    for (int k = 0; k < Dv; k++) ctx[k] = 0;
    for (int j = 0; j < S; j++) {
        double a = j < L ? e[j] / sum : 0;
        if (alpha) alpha[j] = a;
        for (int k = 0; k < Dv && j < L; k++) ctx[k] += a * keys[(size_t)j * Dv + k];
    }
}

static void ref_att_case(double *out) {
    for (int r = 0; r < AT.B * AT.Tq; r++) {
        int b = r / AT.Tq;
        ref_att_row(out + (size_t)r * AT.Dv, NULL, AT.q->d + (size_t)r * AT.Dq, AT.keys->d + (size_t)b * AT.S * AT.Dv,
                    AT.wq->d, AT.wk->d, AT.b->d, AT.v->d, AT.klen[b], AT.S, AT.Dq, AT.A, AT.Dv);
    }
}

static void test_attention(void) {
    int B = 3, Tq = 2, S = 5, Dq = 3, A = 4, Dv = 6, R = B * Tq;
    static int klen[3] = {5, 2, 4};
    memset(&AT, 0, sizeof AT);
    AT.B = B, AT.Tq = Tq, AT.S = S, AT.Dq = Dq, AT.A = A, AT.Dv = Dv, AT.klen = klen;
    AT.q = add("query", (size_t)R * Dq, 1.0);
    AT.keys = add("keys (= values)", (size_t)B * S * Dv, 1.0);
    AT.wq = add("W_q", (size_t)A * Dq, 0.8);
    AT.wk = add("W_k", (size_t)A * Dv, 0.8);
    AT.b = add("b", (size_t)A, 0.3);
    AT.v = add("v", (size_t)A, 1.0);
    float *kp = zeros((size_t)B * S * A), *qp = zeros((size_t)R * A), *alpha = zeros((size_t)R * S);
    float *ctx = zeros((size_t)R * Dv), *dkp = zeros((size_t)B * S * A), *scr = zeros((size_t)2 * R * A);
    nn_additive_keys_forward(kp, AT.keys->f, AT.wk->f, AT.b->f, B, S, Dv, A);
    nn_additive_attention_forward(ctx, Dv, qp, alpha, AT.q->f, Dq, kp, AT.keys->f, klen, NULL, AT.wq->f, AT.v->f, R,
                                  Tq, S, Dq, A, Dv);
    double *Rd;
    float *Rf = rand_f((size_t)R * Dv, 1.0, &Rd);
    nn_additive_attention_backward(AT.q->g, Dq, AT.wq->g, AT.v->g, dkp, AT.keys->g, scr, Rf, Dv, AT.q->f, Dq, qp, kp,
                                   AT.keys->f, alpha, klen, NULL, AT.wq->f, AT.v->f, R, Tq, S, Dq, A, Dv);
    nn_additive_keys_backward(AT.keys->g, AT.wk->g, AT.b->g, dkp, AT.keys->f, AT.wk->f, B, S, Dv, A);
    /* alpha: masked keys exactly 0, rows sum to 1 */
    for (int r = 0; r < R; r++) {
        double s = 0;
        for (int j = 0; j < S; j++) {
            s += alpha[(size_t)r * S + j];
            if (j >= klen[r / Tq]) CHECK(alpha[(size_t)r * S + j] == 0.0f);
        }
        CHECK_NEAR(s, 1.0, 1e-6, 0);
    }
    check_all("additive attention", ctx, Rd, (size_t)R * Dv, ref_att_case);

    /* The same through a row map (beams: rows 0..3 read sentences 2, 0, 2, 1): ctx equals the
     * reference of each row's sentence within 1e-6. */
    int map[4] = {2, 0, 2, 1};
    float *ctx2 = zeros((size_t)4 * Dv), *qp2 = zeros((size_t)4 * A), *al2 = zeros((size_t)4 * S);
    nn_additive_attention_forward(ctx2, Dv, qp2, al2, AT.q->f, Dq, kp, AT.keys->f, klen, map, AT.wq->f, AT.v->f, 4, 1,
                                  S, Dq, A, Dv);
    double md = 0;
    for (int r = 0; r < 4; r++) {
        double ref[8];
        ref_att_row(ref, NULL, AT.q->d + (size_t)r * Dq, AT.keys->d + (size_t)map[r] * S * Dv, AT.wq->d, AT.wk->d,
                    AT.b->d, AT.v->d, klen[map[r]], S, Dq, A, Dv);
        for (int k = 0; k < Dv; k++) md = fmax(md, fabs(ctx2[(size_t)r * Dv + k] - ref[k]));
    }
    printf("%-28s forward with a row map         max abs err %.2e\n", "additive attention", md);
    CHECK(md <= 1e-6);
    free(ctx2), free(qp2), free(al2);
    free(kp), free(qp), free(alpha), free(ctx), free(dkp), free(scr), free(Rf), free(Rd);
    free_params();
}

/* ------------------------------------------------------------ conditional GRU decoder */

static struct {
    int B, T, S;
    cgru_dims_t d;
    int *slen;
    param_t *emb, *s0, *enc, *g1, *g2, *wq, *wk, *ab, *av, *ws, *wc, *we, *ob, *wo, *bo;
} CG;

static void ref_cgru_case(double *out) {
    cgru_dims_t d = CG.d;
    int H = d.H;
    for (int b = 0; b < CG.B; b++) {
        double s[64], s1[64], c[64], u[64], tmp[64];
        memcpy(s, CG.s0->d + (size_t)b * H, H * sizeof(double));
        const double *enc = CG.enc->d + (size_t)b * CG.S * d.Dv;
        for (int t = 0; t < CG.T; t++) {
            const double *e = CG.emb->d + ((size_t)b * CG.T + t) * d.E;
            rr_gru_cell(s1, e, s, dcell(CG.g1), d.E, H);
            ref_att_row(c, NULL, s1, enc, CG.wq->d, CG.wk->d, CG.ab->d, CG.av->d, CG.slen[b], CG.S, H, d.A, d.Dv);
            rr_gru_cell(s, c, s1, dcell(CG.g2), d.Dv, H);
            rr_lin(u, CG.ws->d, CG.ob->d, s, d.O, H);
            rr_lin(tmp, CG.wc->d, NULL, c, d.O, d.Dv);
            for (int o = 0; o < d.O; o++) u[o] += tmp[o];
            rr_lin(tmp, CG.we->d, NULL, e, d.O, d.E);
            for (int o = 0; o < d.O; o++) u[o] = tanh(u[o] + tmp[o]);
            rr_lin(out + ((size_t)b * CG.T + t) * d.V, CG.wo->d, CG.bo->d, u, d.V, d.O);
        }
    }
}

static void test_cgru(void) {
    int B = 3, T = 4, S = 5;
    cgru_dims_t d = {.H = 3, .E = 4, .Dv = 6, .A = 5, .O = 4, .V = 7, .ln = g_ln};
    static int slen[3] = {5, 2, 4};
    memset(&CG, 0, sizeof CG);
    CG.B = B, CG.T = T, CG.S = S, CG.d = d, CG.slen = slen;
    size_t BT = (size_t)B * T;
    CG.emb = add("emb", BT * d.E, 1.0);
    CG.s0 = add("s0", (size_t)B * d.H, 0.8);
    CG.enc = add("enc", (size_t)B * S * d.Dv, 1.0);
    CG.g1 = add_cell("gru1.", 3, d.E, d.H);
    CG.g2 = add_cell("gru2.", 3, d.Dv, d.H);
    CG.wq = add("att.W_q", (size_t)d.A * d.H, 0.8);
    CG.wk = add("att.W_k", (size_t)d.A * d.Dv, 0.8);
    CG.ab = add("att.b", (size_t)d.A, 0.3);
    CG.av = add("att.v", (size_t)d.A, 1.0);
    CG.ws = add("out.W_s", (size_t)d.O * d.H, 0.8);
    CG.wc = add("out.W_c", (size_t)d.O * d.Dv, 0.8);
    CG.we = add("out.W_e", (size_t)d.O * d.E, 0.8);
    CG.ob = add("out.b", (size_t)d.O, 0.3);
    CG.wo = add("out.W_o", (size_t)d.V * d.O, 0.8);
    CG.bo = add("out.b_o", (size_t)d.V, 0.3);
    cgru_weights_t w = {fcell(CG.g1), fcell(CG.g2), CG.wq->f, CG.wk->f, CG.ab->f, CG.av->f, CG.ws->f,
                        CG.wc->f, CG.we->f, CG.ob->f, CG.wo->f, CG.bo->f};
    cgru_weights_t dw = {gcell(CG.g1), gcell(CG.g2), CG.wq->g, CG.wk->g, CG.ab->g, CG.av->g, CG.ws->g,
                         CG.wc->g, CG.we->g, CG.ob->g, CG.wo->g, CG.bo->g};
    cgru_acts_t a = {zeros((size_t)B * S * d.A), zeros(nn_gru_gates_size(BT, d.H, d.ln)), zeros(BT * d.H), zeros(BT * d.A),
                     zeros(BT * S), zeros(BT * d.Dv), zeros(nn_gru_gates_size(BT, d.H, d.ln)), zeros(BT * d.H), zeros(BT * d.O),
                     zeros(BT * d.V), NULL, 0.0f, 0};
    nn_cgru_forward(&a, CG.emb->f, CG.s0->f, CG.enc->f, slen, &w, B, T, S, d);
    double *Rd;
    float *Rf = rand_f(BT * d.V, 1.0, &Rd);
    float *scr = zeros(nn_cgru_backward_scratch(B, T, S, d));
    nn_cgru_backward(CG.emb->g, CG.s0->g, CG.enc->g, &dw, scr, Rf, CG.emb->f, CG.s0->f, CG.enc->f, slen, &w, &a, B,
                     T, S, d);
    check_all(g_ln ? "cgru-ln decoder" : "cgru decoder", a.logits, Rd, BT * d.V, ref_cgru_case);

    /* The decoding step, run step by step over rows given in another order (row r = sentence
     * map[r]), gives the training forward's states, contexts, attention and logits. */
    int map[3] = {2, 0, 1}, R = 3;
    float *s = zeros((size_t)R * d.H), *sn = zeros((size_t)R * d.H), *ctx = zeros((size_t)R * d.Dv);
    float *al = zeros((size_t)R * S), *lg = zeros((size_t)R * d.V), *e = zeros((size_t)R * d.E);
    float *ss = zeros(nn_cgru_step_scratch(R, d));
    for (int r = 0; r < R; r++) memcpy(s + (size_t)r * d.H, CG.s0->f + (size_t)map[r] * d.H, d.H * sizeof(float));
    double md = 0;
    for (int t = 0; t < T; t++) {
        for (int r = 0; r < R; r++)
            memcpy(e + (size_t)r * d.E, CG.emb->f + ((size_t)map[r] * T + t) * d.E, d.E * sizeof(float));
        nn_cgru_step_forward(sn, ctx, al, lg, ss, e, s, a.kp, CG.enc->f, slen, map, &w, R, S, d);
        for (int r = 0; r < R; r++) {
            size_t bt = (size_t)map[r] * T + t;
            for (int j = 0; j < d.H; j++) md = fmax(md, fabs(sn[(size_t)r * d.H + j] - a.s[bt * d.H + j]));
            for (int j = 0; j < d.Dv; j++) md = fmax(md, fabs(ctx[(size_t)r * d.Dv + j] - a.ctx[bt * d.Dv + j]));
            for (int j = 0; j < d.V; j++) md = fmax(md, fabs(lg[(size_t)r * d.V + j] - a.logits[bt * d.V + j]));
            for (int j = 0; j < S; j++)
                md = fmax(md, fabs(al[(size_t)r * S + j] - a.alpha[((size_t)t * B + map[r]) * S + j]));
        }
        memcpy(s, sn, (size_t)R * d.H * sizeof(float));
    }
    printf("%-28s step forward vs training       max abs diff %.2e\n", g_ln ? "cgru-ln decoder" : "cgru decoder", md);
    CHECK(md <= 1e-6);
    free(s), free(sn), free(ctx), free(al), free(lg), free(e), free(ss);
    float **pa = (float **)&a;
    for (size_t i = 0; i < offsetof(cgru_acts_t, u_drop) / sizeof(float *); i++) free(pa[i]);
    free(Rf), free(Rd), free(scr);
    free_params();
}

/* ------------------------------------------------------------ GNMT's attentive bottom decoder layer */

static struct {
    int B, T, S, with_h0;
    gnmt_dec_dims_t d;
    int *slen;
    param_t *emb, *h0, *c0, *enc, *cell, *wq, *wk, *ab, *av;
} GD;

/* out = [y (B, T, H), ctx (B, T, Dv)] */
static void ref_gdec_case(double *out) {
    gnmt_dec_dims_t d = GD.d;
    int H = d.H, KI = d.E + d.Dv;
    double *ctxo = out + (size_t)GD.B * GD.T * H;
    for (int b = 0; b < GD.B; b++) {
        double h[64], c[64], hn[64], cn[64], x[128], a[64];
        for (int j = 0; j < H; j++) {
            h[j] = GD.with_h0 ? GD.h0->d[b * H + j] : 0;
            c[j] = GD.with_h0 ? GD.c0->d[b * H + j] : 0;
        }
        const double *enc = GD.enc->d + (size_t)b * GD.S * d.Dv;
        for (int t = 0; t < GD.T; t++) {
            ref_att_row(a, NULL, h, enc, GD.wq->d, GD.wk->d, GD.ab->d, GD.av->d, GD.slen[b], GD.S, H, d.A, d.Dv);
            memcpy(x, GD.emb->d + ((size_t)b * GD.T + t) * d.E, d.E * sizeof(double));
            memcpy(x + d.E, a, d.Dv * sizeof(double));
            rr_lstm_cell(hn, cn, x, h, c, dcell(GD.cell), KI, H);
            memcpy(h, hn, sizeof h);
            memcpy(c, cn, sizeof c);
            memcpy(out + ((size_t)b * GD.T + t) * H, h, H * sizeof(double));
            memcpy(ctxo + ((size_t)b * GD.T + t) * d.Dv, a, d.Dv * sizeof(double));
        }
    }
}

static void test_gnmt_dec_bottom(int with_h0) {
    int B = 3, T = 4, S = 5;
    gnmt_dec_dims_t d = {.H = 3, .E = 4, .Dv = 6, .A = 5};
    static int slen[3] = {5, 2, 4};
    memset(&GD, 0, sizeof GD);
    GD.B = B, GD.T = T, GD.S = S, GD.d = d, GD.slen = slen, GD.with_h0 = with_h0;
    size_t BT = (size_t)B * T;
    GD.emb = add("emb", BT * d.E, 1.0);
    if (with_h0) {
        GD.h0 = add("h0", (size_t)B * d.H, 0.8);
        GD.c0 = add("c0", (size_t)B * d.H, 0.8);
    }
    GD.enc = add("enc", (size_t)B * S * d.Dv, 1.0);
    GD.cell = add_cell("lstm.", 4, d.E + d.Dv, d.H);
    GD.wq = add("att.W_q", (size_t)d.A * d.H, 0.8);
    GD.wk = add("att.W_k", (size_t)d.A * d.Dv, 0.8);
    GD.ab = add("att.b", (size_t)d.A, 0.3);
    GD.av = add("att.v", (size_t)d.A, 1.0);
    gnmt_dec_weights_t w = {fcell(GD.cell), GD.wq->f, GD.wk->f, GD.ab->f, GD.av->f};
    gnmt_dec_weights_t dw = {gcell(GD.cell), GD.wq->g, GD.wk->g, GD.ab->g, GD.av->g};
    gnmt_dec_acts_t a = {zeros((size_t)B * S * d.A), zeros(BT * d.A), zeros(BT * S), zeros(BT * d.Dv),
                         zeros(BT * 4 * d.H), zeros(BT * d.H), zeros(BT * d.H)};
    const float *h0 = with_h0 ? GD.h0->f : NULL, *c0 = with_h0 ? GD.c0->f : NULL;
    nn_gnmt_dec_bottom_forward(&a, GD.emb->f, h0, c0, GD.enc->f, slen, &w, B, T, S, d);
    size_t nout = BT * (d.H + d.Dv);
    double *Rd;
    float *Rf = rand_f(nout, 1.0, &Rd), *out = zeros(nout);
    memcpy(out, a.y, BT * d.H * sizeof(float));
    memcpy(out + BT * d.H, a.ctx, BT * d.Dv * sizeof(float));
    float *scr = zeros(nn_gnmt_dec_bottom_backward_scratch(B, T, S, d));
    nn_gnmt_dec_bottom_backward(GD.emb->g, with_h0 ? GD.h0->g : NULL, with_h0 ? GD.c0->g : NULL, GD.enc->g, &dw, scr,
                                Rf, Rf + BT * d.H, GD.emb->f, h0, c0, GD.enc->f, slen, &w, &a, B, T, S, d);
    check_all(with_h0 ? "gnmt decoder bottom, h0 c0" : "gnmt decoder bottom", out, Rd, nout, ref_gdec_case);

    /* decoding step by step over rows in another order reproduces the training forward */
    int map[3] = {1, 2, 0}, R = 3;
    float *h = zeros((size_t)R * d.H), *c = zeros((size_t)R * d.H), *hn = zeros((size_t)R * d.H);
    float *cn = zeros((size_t)R * d.H), *ctx = zeros((size_t)R * d.Dv), *al = zeros((size_t)R * S);
    float *e = zeros((size_t)R * d.E), *ss = zeros(nn_gnmt_dec_bottom_step_scratch(R, d));
    if (with_h0)
        for (int r = 0; r < R; r++) {
            memcpy(h + (size_t)r * d.H, h0 + (size_t)map[r] * d.H, d.H * sizeof(float));
            memcpy(c + (size_t)r * d.H, c0 + (size_t)map[r] * d.H, d.H * sizeof(float));
        }
    double md = 0;
    for (int t = 0; t < T; t++) {
        for (int r = 0; r < R; r++)
            memcpy(e + (size_t)r * d.E, GD.emb->f + ((size_t)map[r] * T + t) * d.E, d.E * sizeof(float));
        nn_gnmt_dec_bottom_step_forward(hn, cn, ctx, al, ss, e, t == 0 && !with_h0 ? NULL : h,
                                        t == 0 && !with_h0 ? NULL : c, a.kp, GD.enc->f, slen, map, &w, R, S, d);
        for (int r = 0; r < R; r++) {
            size_t bt = (size_t)map[r] * T + t;
            for (int j = 0; j < d.H; j++) md = fmax(md, fabs(hn[(size_t)r * d.H + j] - a.y[bt * d.H + j]));
            for (int j = 0; j < d.Dv; j++) md = fmax(md, fabs(ctx[(size_t)r * d.Dv + j] - a.ctx[bt * d.Dv + j]));
            for (int j = 0; j < S; j++)
                md = fmax(md, fabs(al[(size_t)r * S + j] - a.alpha[((size_t)t * B + map[r]) * S + j]));
        }
        memcpy(h, hn, (size_t)R * d.H * sizeof(float));
        memcpy(c, cn, (size_t)R * d.H * sizeof(float));
    }
    printf("%-28s step forward vs training       max abs diff %.2e\n", "gnmt decoder bottom", md);
    CHECK(md <= 1e-6);
    free(h), free(c), free(hn), free(cn), free(ctx), free(al), free(e), free(ss);
    float **pa = (float **)&a;
    for (size_t i = 0; i < sizeof a / sizeof(float *); i++) free(pa[i]);
    free(Rf), free(Rd), free(out), free(scr);
    free_params();
}

int main(void) {
    for (int lstm = 0; lstm <= 1; lstm++) {
        test_cell(lstm);
        test_seq(lstm, 0, 0);
        test_seq(lstm, 0, 1);
        test_seq(lstm, 1, 0);
    }
    /* edge shapes: one step, one sentence, an empty sentence (length 0) */
    static int len1[2] = {1, 0}, len2[1] = {2};
    for (int lstm = 0; lstm <= 1; lstm++) {
        test_seq_shape(lstm, 0, 0, 2, 1, len1);
        test_seq_shape(lstm, 1, 0, 2, 1, len1);
        test_seq_shape(lstm, 0, 1, 1, 2, len2);
    }
    test_gnmt_encoder(4, 1);
    test_gnmt_encoder(3, 0);
    test_gnmt_encoder(1, 1);
    test_attention();
    test_cgru();
    test_gnmt_dec_bottom(1);
    test_gnmt_dec_bottom(0);
    /* the layer-normalized GRU (Nematus/Marian): cell, sequences both ways with h0 and padding,
     * bidirectional, edge shapes, the cGRU decoder and its step */
    g_ln = 1;
    test_cell(0);
    test_seq(0, 0, 0);
    test_seq(0, 0, 1);
    test_seq(0, 1, 0);
    test_seq_shape(0, 1, 0, 2, 1, len1);
    test_seq_shape(0, 0, 1, 1, 2, len2);
    test_cgru();
    g_ln = 0;
    return check_report("test_rnn_grad");
}
