/* ref_rnn.h — double-precision references of the recurrent families' training forward, shared by
 * tests/c/test_rnn_gru.c and tests/c/test_gnmt.c (whole-model gradient checks) and
 * tests/c/test_rnn_grad.c (the layers).
 *
 * Everything here is written from the defining equations, per sentence and per step, in plain
 * double loops (tests/c/test_rnn_grad.c checks the layers against the same cells): the GRU cell (PyTorch's
 * gates [r; z; n], optionally layer-normalized as Nematus/Marian: [LN(W_i[rz] x); LN(W_in x)] ⊙ γ +
 * β, LN over the blocks 2H and H with ε = 1e-5), the LSTM cell (gates [i; f; g; o]), a sequence
 * that carries its state past a sentence's length, additive (Bahdanau) attention over a
 * sentence's valid keys, the library's inverted dropout (element i of a site kept when
 * rng_bits32(key, i) >= p·2^32, kept values scaled by 1 / (1 − p)) and the label-smoothed
 * cross-entropy of layers.c ((1 − ε) nll − ε / V Σ_j log p_j over the non-padding targets).
 *
 * rr_grad_check() differentiates a reference loss by central differences for EVERY entry of every
 * tensor of a train_model_t (the reference reads its parameters from a double copy of m->params,
 * at the float tensors' offsets, so shared and tied tensors stay one) and measures each tensor's
 * error as max_i |g_i − fd_i| / max(max_i |fd_i|, floor).
 *
 * All functions are static inline: a test includes the header and uses what it needs.
 */
#ifndef TERN_TESTS_REF_RNN_H
#define TERN_TESTS_REF_RNN_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "train/family.h"
#include "nn/layers.h"

enum { RR_MAXH = 64 }; /* the widest gate block (4H) and input (K) a reference cell handles */

/* One cell's parameters in double (the GRU's layer normalization: ig, ib, hg, hb; NULL: none). */
typedef struct {
    const double *wih, *whh, *bih, *bhh;
    const double *ig, *ib, *hg, *hb;
} rr_cell_t;

static inline double rr_sig(double x) { return 1.0 / (1.0 + exp(-x)); }

/* y (N) = W (N, K) x (K) + b (N, or NULL) */
static inline void rr_lin(double *y, const double *W, const double *b, const double *x, int N, int K) {
    for (int i = 0; i < N; i++) {
        double s = b ? b[i] : 0;
        const double *w = W + (size_t)i * K;
        for (int k = 0; k < K; k++) s += w[k] * x[k];
        y[i] = s;
    }
}

/* v (3H) <- [LN(v[0, 2H)); LN(v[2H, 3H))] ⊙ g + b + bias (bias may be NULL) */
static inline void rr_ln3(double *v, const double *g, const double *b, const double *bias, int H) {
    for (int blk = 0; blk < 2; blk++) {
        int o = blk ? 2 * H : 0, n = blk ? H : 2 * H;
        double m = 0, var = 0;
        for (int j = 0; j < n; j++) m += v[o + j];
        m /= n;
        for (int j = 0; j < n; j++) var += (v[o + j] - m) * (v[o + j] - m);
        var /= n;
        double rs = 1.0 / sqrt(var + 1e-5);
        for (int j = 0; j < n; j++) v[o + j] = (v[o + j] - m) * rs;
    }
    for (int j = 0; j < 3 * H; j++) v[j] = v[j] * g[j] + b[j] + (bias ? bias[j] : 0);
}

/* h (H) = GRUCell(x (K), hp (H)) (torch.nn.GRUCell; layer-normalized when w.ig is set). h may not
 * alias hp. */
static inline void rr_gru_cell(double *h, const double *x, const double *hp, rr_cell_t w, int K, int H) {
    double gi[3 * RR_MAXH], gh[3 * RR_MAXH];
    if (w.ig) {
        rr_lin(gi, w.wih, NULL, x, 3 * H, K);
        rr_ln3(gi, w.ig, w.ib, w.bih, H);
        rr_lin(gh, w.whh, NULL, hp, 3 * H, H);
        rr_ln3(gh, w.hg, w.hb, w.bhh, H);
    } else {
        rr_lin(gi, w.wih, w.bih, x, 3 * H, K);
        rr_lin(gh, w.whh, w.bhh, hp, 3 * H, H);
    }
    for (int j = 0; j < H; j++) {
        double r = rr_sig(gi[j] + gh[j]), z = rr_sig(gi[H + j] + gh[H + j]);
        double n = tanh(gi[2 * H + j] + r * gh[2 * H + j]);
        h[j] = (1 - z) * n + z * hp[j];
    }
}

/* h, c (H) = LSTMCell(x (K), (hp, cp)) (torch.nn.LSTMCell). h, c may not alias hp, cp. */
static inline void rr_lstm_cell(double *h, double *c, const double *x, const double *hp, const double *cp,
                                rr_cell_t w, int K, int H) {
    double gi[4 * RR_MAXH], gh[4 * RR_MAXH];
    rr_lin(gi, w.wih, w.bih, x, 4 * H, K);
    rr_lin(gh, w.whh, w.bhh, hp, 4 * H, H);
    for (int j = 0; j < H; j++) {
        double i = rr_sig(gi[j] + gh[j]), f = rr_sig(gi[H + j] + gh[H + j]);
        double g = tanh(gi[2 * H + j] + gh[2 * H + j]), o = rr_sig(gi[3 * H + j] + gh[3 * H + j]);
        c[j] = f * cp[j] + i * g;
        h[j] = o * tanh(c[j]);
    }
}

/* A sequence per sentence from zero states: out[b, t] (row stride ldo) = the state after step t
 * over inp (B, T, K); reverse runs t = T-1 .. 0; a step t >= len[b] (len NULL: none) keeps the
 * state (the forward direction carries the last valid state, the reverse one the zero state). */
static inline void rr_seq(double *out, int ldo, const double *inp, rr_cell_t w, const int *len, int B, int T, int K,
                          int H, int reverse, int lstm) {
    for (int b = 0; b < B; b++) {
        double h[RR_MAXH] = {0}, c[RR_MAXH] = {0}, hn[RR_MAXH], cn[RR_MAXH];
        for (int s = 0; s < T; s++) {
            int t = reverse ? T - 1 - s : s;
            if (!len || t < len[b]) {
                const double *x = inp + ((size_t)b * T + t) * K;
                if (lstm) rr_lstm_cell(hn, cn, x, h, c, w, K, H);
                else rr_gru_cell(hn, x, h, w, K, H);
                memcpy(h, hn, (size_t)H * sizeof(double));
                memcpy(c, cn, (size_t)H * sizeof(double));
            }
            memcpy(out + ((size_t)b * T + t) * ldo, h, (size_t)H * sizeof(double));
        }
    }
}

/* Additive attention of one query: e_j = v · tanh(qp + kp_j) over the L valid keys (kp (L, A) the
 * keys' projection W_k k_j + b, qp (A) the query's W_q q), α = softmax(e), ctx (Dv) = Σ_j α_j val_j. */
static inline void rr_att(double *ctx, const double *qp, const double *kp, const double *val, const double *v, int L,
                          int A, int Dv) {
    double e[64], mx = -1e300, sum = 0;
    for (int j = 0; j < L; j++) {
        double s = 0;
        for (int a = 0; a < A; a++) s += v[a] * tanh(qp[a] + kp[(size_t)j * A + a]);
        e[j] = s;
        if (s > mx) mx = s;
    }
    for (int j = 0; j < L; j++) sum += e[j] = exp(e[j] - mx);
    for (int k = 0; k < Dv; k++) ctx[k] = 0;
    for (int j = 0; j < L; j++)
        for (int k = 0; k < Dv; k++) ctx[k] += e[j] / sum * val[(size_t)j * Dv + k];
}

/* x (n) <- inverted dropout with probability p under key (the float p of the configuration, its
 * threshold as layers.c computes it); nothing when p <= 0. */
static inline void rr_dropout(double *x, size_t n, float p, uint64_t key) {
    if (p <= 0.0f) return;
    double t = (double)p * 4294967296.0;
    uint32_t thr = t >= 4294967295.0 ? 4294967295u : (uint32_t)t;
    for (size_t i = 0; i < n; i++) x[i] = rng_bits32(key, (uint32_t)i) >= thr ? x[i] / (1.0 - (double)p) : 0.0;
}

/* out (M, C) = the embedding rows of tok (padding: zero rows). */
static inline void rr_embed(double *out, const double *E, const int *tok, int M, int C, int pad) {
    for (int m = 0; m < M; m++)
        for (int c = 0; c < C; c++) out[(size_t)m * C + c] = tok[m] == pad ? 0.0 : E[(size_t)tok[m] * C + c];
}

/* The label-smoothed cross-entropy summed over the M rows of logits z (M, V) whose target is not
 * padding: (1 − ε)(lse − z_y) − ε / V Σ_j (z_j − lse). */
static inline double rr_xent(const double *logits, const int *y, int M, int V, float eps_f, int pad) {
    double eps = eps_f, total = 0;
    for (int r = 0; r < M; r++) {
        if (y[r] == pad) continue;
        const double *z = logits + (size_t)r * V;
        double zm = -1e300, s = 0, sum_lp = 0;
        for (int j = 0; j < V; j++) zm = z[j] > zm ? z[j] : zm;
        for (int j = 0; j < V; j++) s += exp(z[j] - zm);
        double lse = zm + log(s);
        for (int j = 0; j < V; j++) sum_lp += z[j] - lse;
        total += (1 - eps) * (lse - z[y[r]]) - eps / V * sum_lp;
    }
    return total;
}

/* The double pointer of the tensor named name in m (its offset into P), NULL when m has none. */
static inline double *rr_param(const train_model_t *m, double *P, const char *name) {
    for (int i = 0; i < m->n_tensors; i++)
        if (!strcmp(m->tensors[i].name, name)) return P + m->tensors[i].offset;
    return NULL;
}

/* The result of rr_grad_check. */
typedef struct {
    double worst;          /* max over tensors of max_i |g_i − fd_i| / max(max_i |fd_i|, gfloor) */
    const char *worst_name;
    double worst_raw;      /* max over tensors of max_i |g_i − fd_i| / max_i |fd_i| (no floor) */
    const char *worst_raw_name;
    double gmax;           /* max over tensors of max_i |fd_i| */
    double gmin;           /* min over tensors of max_i |fd_i| (below gfloor: measured absolutely) */
    const char *gmin_name;
    size_t n;              /* entries compared */
} rr_grad_t;

/* Every entry of every tensor of m: central differences (step h) of loss() over P (the double
 * copy of m->params the reference reads) against m->grads. begin (may be NULL) is called before a
 * tensor's entries are perturbed (a reference may then recompute only what depends on it). */
static inline rr_grad_t rr_grad_check(const train_model_t *m, double *P, double (*loss)(void),
                                      void (*begin)(const train_tensor_t *), double h, double gfloor) {
    rr_grad_t r = {0, "", 0, "", 0, INFINITY, "", 0};
    for (int ti = 0; ti < m->n_tensors; ti++) {
        const train_tensor_t *t = &m->tensors[ti];
        double dmax = 0, fmax = 0;
        if (begin) begin(t);
        for (size_t i = 0; i < t->numel; i++) {
            double *x = P + t->offset + i, save = *x;
            *x = save + h;
            double lp = loss();
            *x = save - h;
            double lm = loss();
            *x = save;
            double fd = (lp - lm) / (2 * h), d = fabs((double)m->grads[t->offset + i] - fd);
            if (d > dmax || isnan(d)) dmax = isnan(d) ? INFINITY : d;
            if (fabs(fd) > fmax) fmax = fabs(fd);
            r.n++;
        }
        double err = dmax / (fmax > gfloor ? fmax : gfloor);
        double raw = fmax > 0 ? dmax / fmax : dmax;
        if (err > r.worst || ti == 0) r.worst = err, r.worst_name = t->name;
        if (raw > r.worst_raw || ti == 0) r.worst_raw = raw, r.worst_raw_name = t->name;
        if (fmax > r.gmax) r.gmax = fmax;
        if (fmax < r.gmin) r.gmin = fmax, r.gmin_name = t->name;
    }
    return r;
}

#endif
