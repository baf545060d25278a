/*
 * nn/rnn.c — forward and backward of the recurrent layers (see nn/rnn.h).
 *
 * Legend: B sentences, T steps, S source length, K input features, H state size, R rows of a step,
 * A attention hidden size, Dq/Dv query/value widths, E embedding width, O deep-output width,
 * V vocabulary, M rows in general; ld* are row strides in floats.
 *
 * Gate buffers. The GRU keeps per row (4H): [r, z, hn, n] where hn = W_hn h + b_hn (which the
 * reset gate multiplies) sits beside the three gates so that ONE GEMM per step, over columns
 * [0, 3H) with beta = 1, adds the recurrent projection W_hh h to the input projection that was
 * computed for all steps at once (r and z: added; hn: its slot starts at b_hn). The input's n
 * projection lives in column block 3 and becomes n after the activation. The LSTM keeps the four
 * gates [i, f, g, o] (4H) and its per-step GEMM also adds into them.
 * Sigmoids are computed as 0.5 + 0.5 tanh(x / 2) with the kernels' vectorized tanh.
 */
#include "nn/rnn.h"

#include <math.h>
#include <string.h>

#include "kernels/gemm_bf16.h"
#include "kernels/kernels.h"

/* Below this many elements a per-step elementwise loop runs on one thread. */
#define RNN_PAR_MIN 16384
/* Chunk of the attention's hidden units whose tanh is computed at once (stack buffer). */
#define ATT_CHUNK 256

/* ------------------------------------------------------------ helpers */

/* bfloat16 compute of the calling thread (nn_rnn_lowp_begin), NULL: float32. */
static _Thread_local nn_rnn_lowp_t *g_lowp;

tern_status_t nn_rnn_lowp_init(nn_rnn_lowp_t *lp, size_t cap) {
    memset(lp, 0, sizeof *lp);
    tern_status_t st = bf16_check_cpu();
    if (st) return st;
    lp->a = aligned_alloc64((cap * sizeof(bf16_t) + 63) & ~(size_t)63);
    lp->b = aligned_alloc64((cap * sizeof(bf16_t) + 63) & ~(size_t)63);
    if (!lp->a || !lp->b) {
        nn_rnn_lowp_free(lp);
        return tern_error(TERN_ERR_NOMEM, "bfloat16 workspace of the recurrent layers: out of memory (%zu bytes)",
                          2 * cap * sizeof(bf16_t));
    }
    lp->cap = cap;
    return TERN_OK;
}

void nn_rnn_lowp_free(nn_rnn_lowp_t *lp) {
    if (!lp) return;
    aligned_free(lp->a);
    aligned_free(lp->b);
    memset(lp, 0, sizeof *lp);
}

void nn_rnn_lowp_begin(nn_rnn_lowp_t *lp) { g_lowp = lp; }

tern_status_t nn_rnn_lowp_end(void) {
    nn_rnn_lowp_t *lp = g_lowp;
    g_lowp = NULL;
    if (!lp) return TERN_OK;
    tern_status_t st = lp->st;
    lp->st = TERN_OK;
    return st;
}

/* dst (rows, cols) packed = bf16(±src) (row stride ld). */
static void pack_bf16(bf16_t *dst, const float *src, int rows, int cols, int ld, int neg) {
    if (ld == cols && !neg) {
        bf16_from_f32(dst, src, (size_t)rows * cols);
        return;
    }
#pragma omp parallel for schedule(static) if ((size_t)rows * cols >= RNN_PAR_MIN)
    for (int r = 0; r < rows; r++) {
        const float *x = src + (size_t)r * ld;
        bf16_t *o = dst + (size_t)r * cols;
        if (!neg) {
            bf16_from_f32(o, x, (size_t)cols);
        } else {
            for (int c = 0; c < cols; c++) o[c] = bf16_round(-x[c]);
        }
    }
}

/* C = alpha · op(A) · op(B) + beta · C; alpha ±1. Float32, or (bfloat16 compute) bfloat16 operands
 * with float32 accumulation and output, as the Transformer's linear layers (lowp.h). */
static void gemm_any(int ta, int tb, int M, int N, int K, float alpha, const float *A, int lda, const float *Bm,
                     int ldb, float beta, float *C, int ldc) {
    if (M <= 0 || N <= 0 || K <= 0) return;
    nn_rnn_lowp_t *lp = g_lowp;
    if (lp) {
        int ar = ta ? K : M, ac = ta ? M : K, br = tb ? N : K, bc = tb ? K : N;
        if ((size_t)ar * ac <= lp->cap && (size_t)br * bc <= lp->cap) {
            pack_bf16(lp->a, A, ar, ac, lda, alpha < 0);
            pack_bf16(lp->b, Bm, br, bc, ldb, 0);
            tern_status_t st = gemm_bf16(ta, tb, M, N, K, lp->a, ac, lp->b, bc, beta, C, ldc);
            if (st && !lp->st) lp->st = st;
            return;
        }
        if (!lp->st)
            lp->st = tern_error(TERN_ERR_INTERNAL, "bfloat16 recurrent layers: a GEMM operand of %zu elements exceeds "
                                "the workspace (%zu)", (size_t)ar * ac > (size_t)br * bc ? (size_t)ar * ac :
                                (size_t)br * bc, lp->cap);
    }
    gemm_f32(ta, tb, M, N, K, alpha, A, lda, Bm, ldb, beta, C, ldc);
}

/* Fake-quantized activations of the calling thread (nn_rnn_actq_begin), NULL: none. */
static _Thread_local nn_rnn_actq_t *g_actq;

tern_status_t nn_rnn_actq_init(nn_rnn_actq_t *aq, size_t cap) {
    memset(aq, 0, sizeof *aq);
    aq->buf = aligned_alloc64(((cap ? cap : 1) * sizeof(float) + 63) & ~(size_t)63);
    if (!aq->buf)
        return tern_error(TERN_ERR_NOMEM, "fake-quantized activations of the recurrent layers: out of memory (%zu "
                          "bytes)", cap * sizeof(float));
    aq->cap = cap;
    return TERN_OK;
}

void nn_rnn_actq_free(nn_rnn_actq_t *aq) {
    if (!aq) return;
    aligned_free(aq->buf);
    memset(aq, 0, sizeof *aq);
}

void nn_rnn_actq_begin(nn_rnn_actq_t *aq) { g_actq = aq; }

tern_status_t nn_rnn_actq_end(void) {
    nn_rnn_actq_t *aq = g_actq;
    g_actq = NULL;
    if (!aq) return TERN_OK;
    tern_status_t st = aq->st;
    aq->st = TERN_OK;
    return st;
}

/* The M input rows x (row stride *ld, K wide) of a product with an int8 matrix in inference: as
 * they are, or (between nn_rnn_actq_begin and _end) rounded as int8 inference rounds them, into the
 * scratch (*ld becomes K). One operand at a time: the next call overwrites it. */
static const float *act_rows(const float *x, size_t *ld, int M, int K) {
    nn_rnn_actq_t *aq = g_actq;
    if (!aq || !x || M <= 0 || K <= 0) return x;
    if ((size_t)M * K > aq->cap) {
        if (!aq->st)
            aq->st = tern_error(TERN_ERR_INTERNAL, "fake-quantized activations: an operand of %zu values exceeds the "
                                "workspace (%zu)", (size_t)M * K, aq->cap);
        return x;
    }
    const size_t ldx = *ld;
    float *o = aq->buf;
#pragma omp parallel for schedule(static) if ((size_t)M * K >= RNN_PAR_MIN)
    for (int m = 0; m < M; m++) fake_quantize_rows_act(o + (size_t)m * K, x + (size_t)m * ldx, 1, K);
    *ld = (size_t)K;
    return o;
}

static void mm(int ta, int tb, int M, int N, int K, const float *A, int lda, const float *Bm, int ldb,
               float beta, float *C, int ldc) {
    gemm_any(ta, tb, M, N, K, 1.0f, A, lda, Bm, ldb, beta, C, ldc);
}

void nn_rnn_linear_forward(float *out, const float *inp, const float *w, const float *b, int M, int K, int N) {
    size_t ld = (size_t)K;
    inp = act_rows(inp, &ld, M, K);
    mm(0, 1, M, N, K, inp, K, w, K, 0.0f, out, N);
    if (b) nn_bias_forward(out, b, M, N);
}

void nn_rnn_linear_backward(float *dinp, float *dw, float *db, const float *dout, const float *inp, const float *w,
                            int M, int K, int N) {
    if (dinp) mm(0, 0, M, K, N, dout, N, w, K, 1.0f, dinp, K);
    size_t ld = (size_t)K;
    inp = act_rows(inp, &ld, M, K);
    mm(1, 0, N, K, M, dout, N, inp, K, 1.0f, dw, K);
    if (db) nn_bias_backward(db, dout, M, N);
}

static void tanh_inplace(float *x, int n) { activation_forward(x, (size_t)n, ACT_TANH); }

/* sigmoid over n values in place: 0.5 + 0.5 tanh(x / 2). */
static void sigmoid_inplace(float *x, int n) {
    for (int j = 0; j < n; j++) x[j] *= 0.5f;
    tanh_inplace(x, n);
    for (int j = 0; j < n; j++) x[j] = 0.5f + 0.5f * x[j];
}

/* acc[n] += sum over M rows (stride ld) of x[m, n], in double. */
static void colsum_acc(float *acc, const float *x, size_t ld, int M, int N) {
    if (!acc || M <= 0) return;
    int nblk = (N + 15) / 16;
#pragma omp parallel for schedule(static) if ((size_t)M * N >= RNN_PAR_MIN)
    for (int blk = 0; blk < nblk; blk++) {
        int c0 = blk * 16, c1 = c0 + 16 < N ? c0 + 16 : N;
        double s[16] = {0};
        for (int m = 0; m < M; m++) {
            const float *r = x + (size_t)m * ld;
            for (int c = c0; c < c1; c++) s[c - c0] += r[c];
        }
        for (int c = c0; c < c1; c++) acc[c] += (float)s[c - c0];
    }
}

static inline int active(const int *len, int m, int t) { return !len || t < len[m]; }

/* The recurrent weights' gradient of a whole sequence at once, after the steps: dW_hh (NG, H) +=
 * Σ_t dg_t^T · h_prev(t) where dg (B, T, ·) holds every step's gate gradients (row stride 4H, the
 * first NG columns used) and h_prev(t) is out at t − 1 (t + 1 when reverse), h0 at the first step.
 * Row (b, t) of dg pairs with row (b, t ∓ 1) of out (row stride ldo): ONE GEMM over the B·T − 1
 * row pairs i ↔ i ∓ 1, minus the B − 1 pairs that cross from one sentence into the next, plus h0's
 * term; instead of T GEMMs whose inner dimension is only B. Padded steps have dg = 0. */
static void rec_weight_grad(float *dwhh, const float *dg, int G, int NG, const float *out, size_t ldo, const float *h0,
                            int B, int T, int H, int reverse) {
    int BT = B * T;
    out = act_rows(out, &ldo, BT, H); /* the states as the products multiplied them (--qat int8-act) */
    size_t ldg = (size_t)T * G, ldt = (size_t)T * ldo, ldh0 = (size_t)H;
    if (!reverse) {
        mm(1, 0, NG, H, BT - 1, dg + G, G, out, (int)ldo, 1.0f, dwhh, H);
        if (B > 1) gemm_any(1, 0, NG, H, B - 1, -1.0f, dg + ldg, (int)ldg, out + (size_t)(T - 1) * ldo, (int)ldt, 1.0f, dwhh, H);
        if (h0) {
            h0 = act_rows(h0, &ldh0, B, H);
            mm(1, 0, NG, H, B, dg, (int)ldg, h0, (int)ldh0, 1.0f, dwhh, H);
        }
    } else {
        mm(1, 0, NG, H, BT - 1, dg, G, out + ldo, (int)ldo, 1.0f, dwhh, H);
        if (B > 1)
            gemm_any(1, 0, NG, H, B - 1, -1.0f, dg + (size_t)(T - 1) * G, (int)ldg, out + ldt, (int)ldt, 1.0f, dwhh, H);
        if (h0) {
            h0 = act_rows(h0, &ldh0, B, H);
            mm(1, 0, NG, H, B, dg + (size_t)(T - 1) * G, (int)ldg, h0, (int)ldh0, 1.0f, dwhh, H);
        }
    }
}

/* ------------------------------------------------------------ GRU
 * Layer normalization (optional; Nematus/Marian's layer-normalized GRU): when the cell has gains
 * (w->ln_ih_g), the input projection a = W_ih x and the recurrent projection c = W_hh h are each
 * normalized in two blocks, [r; z] (2H) and [n] (H), then scaled and shifted per unit:
 *   â = [LN(a_rz); LN(a_n)] ⊙ γ_ih + β_ih,   ĉ = [LN(c_rz); LN(c_n)] ⊙ γ_hh + β_hh
 * and take the places of W_ih x and W_hh h in the equations (b_ih, b_hh are still added).
 * LN(v) = (v − mean v) / sqrt(var v + ε), ε = 1e-5 (Nematus'), biased variance. A zero state
 * (h = NULL) has c = 0, so ĉ = β_hh. The saved values follow the gates: per row (GRU_LNS floats)
 * [â normalized (3H) | ĉ normalized (3H) | rstd of a_rz, a_n, c_rz, c_n]. */

#define GRU_LN_EPS 1e-5f
static inline size_t gru_lns(int H) { return (size_t)6 * H + 4; }

size_t nn_gru_gates_size(size_t M, int H, int ln) { return M * 4 * H + (ln ? M * gru_lns(H) : 0); }

/* x (n) <- (x − mean) · rstd; returns rstd. */
static float ln_norm(float *x, int n) {
    double m = 0, v = 0;
    for (int j = 0; j < n; j++) m += x[j];
    m /= n;
    for (int j = 0; j < n; j++) v += ((double)x[j] - m) * ((double)x[j] - m);
    float rs = (float)(1.0 / sqrt(v / n + (double)GRU_LN_EPS));
    for (int j = 0; j < n; j++) x[j] = (float)((x[j] - m) * rs);
    return rs;
}

/* dx (n) = the gradient of the raw values given dy (n) of LN(·) ⊙ γ: rstd (γ dy − mean(γ dy) −
 * x̂ mean(γ dy x̂)). dx may alias dy. */
static void ln_back(float *dx, const float *dy, const float *xh, const float *gain, float rs, int n) {
    double s1 = 0, s2 = 0;
    for (int j = 0; j < n; j++) {
        double d = (double)dy[j] * gain[j];
        s1 += d;
        s2 += d * xh[j];
    }
    float m1 = (float)(s1 / n), m2 = (float)(s2 / n);
    for (int j = 0; j < n; j++) dx[j] = rs * (dy[j] * gain[j] - m1 - xh[j] * m2);
}

void nn_gru_ln_apply(float *g, int ldg, int M, int H, const float *gain, const float *beta, const float *bias) {
    for (int m = 0; m < M; m++) {
        float *r = g + (size_t)m * ldg;
        ln_norm(r, 2 * H);
        ln_norm(r + 2 * H, H);
        for (int j = 0; j < 3 * H; j++) r[j] = r[j] * gain[j] + beta[j] + (bias ? bias[j] : 0.0f);
    }
}

/* Input side of M rows (x stride ldx) into gates (stride ldg): [W_ir x + b_ir + b_hr,
 * W_iz x + b_iz + b_hz, b_hn, W_in x + b_in] (W_i· x normalized when ln; ln: saved rows, stride ldl). */
static void gru_input(float *g, size_t ldg, float *ln, size_t ldl, const float *x, size_t ldx, int M,
                      const rnn_cell_t *w, int K, int H) {
    x = act_rows(x, &ldx, M, K);
    if (w->ln_ih_g) {
        mm(0, 1, M, 3 * H, K, x, (int)ldx, w->w_ih, K, 0.0f, ln, (int)ldl);
#pragma omp parallel for schedule(static) if ((size_t)M * H >= RNN_PAR_MIN)
        for (int m = 0; m < M; m++) {
            float *xi = ln + (size_t)m * ldl, *rs = xi + 6 * H, *r = g + (size_t)m * ldg;
            const float *gn = w->ln_ih_g, *bn = w->ln_ih_b;
            rs[0] = ln_norm(xi, 2 * H);
            rs[1] = ln_norm(xi + 2 * H, H);
            for (int j = 0; j < 2 * H; j++)
                r[j] = xi[j] * gn[j] + bn[j] + (w->b_ih ? w->b_ih[j] : 0.0f) + (w->b_hh ? w->b_hh[j] : 0.0f);
            for (int j = 0; j < H; j++) r[2 * H + j] = w->b_hh ? w->b_hh[2 * H + j] : 0.0f;
            for (int j = 2 * H; j < 3 * H; j++) r[H + j] = xi[j] * gn[j] + bn[j] + (w->b_ih ? w->b_ih[j] : 0.0f);
        }
        return;
    }
    mm(0, 1, M, 2 * H, K, x, (int)ldx, w->w_ih, K, 0.0f, g, (int)ldg);
    mm(0, 1, M, H, K, x, (int)ldx, w->w_ih + (size_t)2 * H * K, K, 0.0f, g + 3 * H, (int)ldg);
#pragma omp parallel for schedule(static) if ((size_t)M * H >= RNN_PAR_MIN)
    for (int m = 0; m < M; m++) {
        float *r = g + (size_t)m * ldg;
        if (w->b_ih)
            for (int j = 0; j < 2 * H; j++) r[j] += w->b_ih[j];
        if (w->b_hh)
            for (int j = 0; j < 2 * H; j++) r[j] += w->b_hh[j];
        for (int j = 0; j < H; j++) r[2 * H + j] = w->b_hh ? w->b_hh[2 * H + j] : 0.0f;
        if (w->b_ih)
            for (int j = 0; j < H; j++) r[3 * H + j] += w->b_ih[2 * H + j];
    }
}

/* gates[:, 0:3H] += h_prev · W_hh^T (one GEMM over the M rows; normalized when ln); nothing for a
 * zero state without ln. */
static void gru_hidden(float *g, size_t ldg, float *ln, size_t ldl, const float *hp, size_t ldh, int M,
                       const rnn_cell_t *w, int H) {
    hp = act_rows(hp, &ldh, M, H);
    if (!w->ln_hh_g) {
        if (hp) mm(0, 1, M, 3 * H, H, hp, (int)ldh, w->w_hh, H, 1.0f, g, (int)ldg);
        return;
    }
    if (hp) mm(0, 1, M, 3 * H, H, hp, (int)ldh, w->w_hh, H, 0.0f, ln + 3 * H, (int)ldl);
#pragma omp parallel for schedule(static) if ((size_t)M * H >= RNN_PAR_MIN)
    for (int m = 0; m < M; m++) {
        float *xh = ln + (size_t)m * ldl + 3 * H, *rs = ln + (size_t)m * ldl + 6 * H, *r = g + (size_t)m * ldg;
        if (!hp) memset(xh, 0, (size_t)3 * H * sizeof(float));
        rs[2] = ln_norm(xh, 2 * H);
        rs[3] = ln_norm(xh + 2 * H, H);
        for (int j = 0; j < 3 * H; j++) r[j] += xh[j] * w->ln_hh_g[j] + w->ln_hh_b[j];
    }
}

/* The gates' activations and the new state of M rows; rows past their length (t >= len[m]) copy
 * the previous state. h may not alias hp (rows of different steps). */
static void gru_act(float *h, size_t ldo, float *g, size_t ldg, const float *hp, size_t ldh, int M,
                    int H, const int *len, int t) {
#pragma omp parallel for schedule(static) if ((size_t)M * H >= RNN_PAR_MIN)
    for (int m = 0; m < M; m++) {
        float *hr = h + (size_t)m * ldo;
        const float *pr = hp ? hp + (size_t)m * ldh : NULL;
        if (!active(len, m, t)) {
            if (pr) memcpy(hr, pr, (size_t)H * sizeof(float));
            else memset(hr, 0, (size_t)H * sizeof(float));
            continue;
        }
        float *gr = g + (size_t)m * ldg;
        sigmoid_inplace(gr, 2 * H);
        const float *r = gr, *hn = gr + 2 * H;
        float *n = gr + 3 * H;
        for (int j = 0; j < H; j++) n[j] += r[j] * hn[j];
        tanh_inplace(n, H);
        const float *z = gr + H;
        for (int j = 0; j < H; j++) hr[j] = (1.0f - z[j]) * n[j] + z[j] * (pr ? pr[j] : 0.0f);
    }
}

/* Gradients of the pre-activations dg (stride lddg: [dr, dz, dhn, dn]) from dh (stride lddh);
 * dhp (may be NULL) += the direct term z ⊙ dh (the whole dh on inactive rows). */
static void gru_act_back(float *dg, size_t lddg, float *dhp, size_t ldhp, const float *dh, size_t lddh,
                         const float *g, size_t ldg, const float *hp, size_t ldh, int M, int H,
                         const int *len, int t) {
#pragma omp parallel for schedule(static) if ((size_t)M * H >= RNN_PAR_MIN)
    for (int m = 0; m < M; m++) {
        float *dgr = dg + (size_t)m * lddg;
        const float *dhr = dh + (size_t)m * lddh;
        float *dpr = dhp ? dhp + (size_t)m * ldhp : NULL;
        if (!active(len, m, t)) {
            memset(dgr, 0, (size_t)4 * H * sizeof(float));
            if (dpr)
                for (int j = 0; j < H; j++) dpr[j] += dhr[j];
            continue;
        }
        const float *gr = g + (size_t)m * ldg, *pr = hp ? hp + (size_t)m * ldh : NULL;
        const float *r = gr, *z = gr + H, *hn = gr + 2 * H, *n = gr + 3 * H;
        for (int j = 0; j < H; j++) {
            float d = dhr[j], hv = pr ? pr[j] : 0.0f;
            float dnp = d * (1.0f - z[j]) * (1.0f - n[j] * n[j]);
            float dz = d * (hv - n[j]);
            dgr[j] = dnp * hn[j] * r[j] * (1.0f - r[j]);
            dgr[H + j] = dz * z[j] * (1.0f - z[j]);
            dgr[2 * H + j] = dnp * r[j];
            dgr[3 * H + j] = dnp;
            if (dpr) dpr[j] += d * z[j];
        }
    }
}

/* The recurrent projection's gradient of M rows: drh (stride lddr, 3H) from the gate gradients dg
 * (slots [dr dz dhn]) through the normalization (ln only; without ln the caller uses dg itself). */
static void gru_ln_hidden_raw(float *drh, size_t lddr, const float *dg, size_t lddg, const float *ln, size_t ldl,
                              const rnn_cell_t *w, int M, int H) {
#pragma omp parallel for schedule(static) if ((size_t)M * H >= RNN_PAR_MIN)
    for (int m = 0; m < M; m++) {
        const float *dy = dg + (size_t)m * lddg, *xh = ln + (size_t)m * ldl + 3 * H, *rs = ln + (size_t)m * ldl + 6 * H;
        float *o = drh + (size_t)m * lddr;
        ln_back(o, dy, xh, w->ln_hh_g, rs[2], 2 * H);
        ln_back(o + 2 * H, dy + 2 * H, xh + 2 * H, w->ln_hh_g + 2 * H, rs[3], H);
    }
}

/* In place: the gate gradients' input slots [dr dz · dn] of M rows become the raw input projection's
 * gradient (ln only). */
static void gru_ln_input_raw(float *dg, size_t lddg, const float *ln, size_t ldl, const rnn_cell_t *w, int M, int H) {
#pragma omp parallel for schedule(static) if ((size_t)M * H >= RNN_PAR_MIN)
    for (int m = 0; m < M; m++) {
        float *dy = dg + (size_t)m * lddg;
        const float *xi = ln + (size_t)m * ldl, *rs = xi + 6 * H;
        ln_back(dy, dy, xi, w->ln_ih_g, rs[0], 2 * H);
        ln_back(dy + 3 * H, dy + 3 * H, xi + 2 * H, w->ln_ih_g + 2 * H, rs[1], H);
    }
}

/* acc_g[n] += Σ_m dy[m, n] x̂[m, n], acc_b[n] += Σ_m dy[m, n] over M rows, in double. */
static void ln_param_grad(float *acc_g, float *acc_b, const float *dy, size_t lddy, const float *xh, size_t ldx,
                          int M, int N) {
    int nblk = (N + 15) / 16;
#pragma omp parallel for schedule(static) if ((size_t)M * N >= RNN_PAR_MIN)
    for (int blk = 0; blk < nblk; blk++) {
        int c0 = blk * 16, c1 = c0 + 16 < N ? c0 + 16 : N;
        double sg[16] = {0}, sb[16] = {0};
        for (int m = 0; m < M; m++) {
            const float *d = dy + (size_t)m * lddy, *x = xh + (size_t)m * ldx;
            for (int c = c0; c < c1; c++) sg[c - c0] += (double)d[c] * x[c], sb[c - c0] += d[c];
        }
        for (int c = c0; c < c1; c++) acc_g[c] += (float)sg[c - c0], acc_b[c] += (float)sb[c - c0];
    }
}

/* The biases' (and, with ln, the gains' and shifts') gradients of M rows from the gate gradients dg. */
static void gru_bias_grads(const rnn_cell_t *dw, const float *dg, size_t lddg, const float *ln, size_t ldl,
                           const rnn_cell_t *w, int M, int H) {
    if (w->b_hh) colsum_acc(dw->b_hh, dg, lddg, M, 3 * H);
    if (w->b_ih) {
        colsum_acc(dw->b_ih, dg, lddg, M, 2 * H);
        colsum_acc(dw->b_ih + 2 * H, dg + 3 * H, lddg, M, H);
    }
    if (w->ln_hh_g) ln_param_grad(dw->ln_hh_g, dw->ln_hh_b, dg, lddg, ln + 3 * H, ldl, M, 3 * H);
    if (w->ln_ih_g) {
        ln_param_grad(dw->ln_ih_g, dw->ln_ih_b, dg, lddg, ln, ldl, M, 2 * H);
        ln_param_grad(dw->ln_ih_g + 2 * H, dw->ln_ih_b + 2 * H, dg + 3 * H, lddg, ln + 2 * H, ldl, M, H);
    }
}

/* The input side's GEMMs from the raw input projection's gradient dg (slots [dr dz · dn]):
 * dx += [dr dz] · W_i[rz] + dn · W_in (dx may be NULL), dW_ih += (biases: gru_bias_grads). */
static void gru_input_back(float *dx, size_t lddx, const rnn_cell_t *dw, const float *dg, size_t lddg,
                           const float *x, size_t ldx, int M, const rnn_cell_t *w, int K, int H) {
    const float *wn = w->w_ih + (size_t)2 * H * K;
    if (dx) {
        mm(0, 0, M, K, 2 * H, dg, (int)lddg, w->w_ih, K, 1.0f, dx, (int)lddx);
        mm(0, 0, M, K, H, dg + 3 * H, (int)lddg, wn, K, 1.0f, dx, (int)lddx);
    }
    x = act_rows(x, &ldx, M, K);
    mm(1, 0, 2 * H, K, M, dg, (int)lddg, x, (int)ldx, 1.0f, dw->w_ih, K);
    mm(1, 0, H, K, M, dg + 3 * H, (int)lddg, x, (int)ldx, 1.0f, dw->w_ih + (size_t)2 * H * K, K);
}

void nn_gru_cell_forward(float *h, float *gates, const float *x, const float *h_prev,
                         const rnn_cell_t *w, int R, int K, int H) {
    size_t G = (size_t)4 * H;
    float *ln = gates + (size_t)R * G;
    gru_input(gates, G, ln, gru_lns(H), x, (size_t)K, R, w, K, H);
    gru_hidden(gates, G, ln, gru_lns(H), h_prev, (size_t)H, R, w, H);
    gru_act(h, (size_t)H, gates, G, h_prev, (size_t)H, R, H, NULL, 0);
}

void nn_gru_cell_backward(float *dx, float *dh_prev, const rnn_cell_t *dw, float *scratch,
                          const float *dh, const float *x, const float *h_prev, const rnn_cell_t *w,
                          const float *gates, int R, int K, int H) {
    size_t G = (size_t)4 * H, LS = gru_lns(H);
    const float *ln = gates + (size_t)R * G;
    float *dg = scratch, *drh = dg;
    size_t ldr = G;
    gru_act_back(dg, G, dh_prev, (size_t)H, dh, (size_t)H, gates, G, h_prev, (size_t)H, R, H, NULL, 0);
    gru_bias_grads(dw, dg, G, ln, LS, w, R, H);
    if (w->ln_hh_g) {
        drh = dg + (size_t)R * G, ldr = (size_t)3 * H;
        gru_ln_hidden_raw(drh, ldr, dg, G, ln, LS, w, R, H);
    }
    if (dh_prev) mm(0, 0, R, H, 3 * H, drh, (int)ldr, w->w_hh, H, 1.0f, dh_prev, H);
    size_t ldp = (size_t)H;
    const float *hq = act_rows(h_prev, &ldp, R, H);
    if (hq) mm(1, 0, 3 * H, H, R, drh, (int)ldr, hq, (int)ldp, 1.0f, dw->w_hh, H);
    if (w->ln_ih_g) gru_ln_input_raw(dg, G, ln, LS, w, R, H);
    gru_input_back(dx, (size_t)K, dw, dg, G, x, (size_t)K, R, w, K, H);
}

size_t nn_gru_cell_backward_scratch(int R, int H, int ln) { return (size_t)R * (4 + (ln ? 3 : 0)) * H; }

void nn_gru_forward(float *out, int ldo, float *gates, const float *inp, const float *h0,
                    const rnn_cell_t *w, const int *len, int B, int T, int K, int H, int reverse) {
    size_t G = (size_t)4 * H, ldg = (size_t)T * G, ldt = (size_t)T * ldo, LS = gru_lns(H), ldl = (size_t)T * LS;
    float *ln = gates + (size_t)B * T * G;
    gru_input(gates, G, ln, LS, inp, (size_t)K, B * T, w, K, H); /* all steps: one GEMM */
    for (int s = 0; s < T; s++) {
        int t = reverse ? T - 1 - s : s, tp = reverse ? t + 1 : t - 1;
        const float *hp = s == 0 ? h0 : out + (size_t)tp * ldo;
        size_t ldh = s == 0 ? (size_t)H : ldt;
        float *g = gates + (size_t)t * G;
        gru_hidden(g, ldg, ln + (size_t)t * LS, ldl, hp, ldh, B, w, H); /* the whole batch: one GEMM */
        gru_act(out + (size_t)t * ldo, ldt, g, ldg, hp, ldh, B, H, len, t);
    }
}

size_t nn_gru_backward_scratch(int B, int T, int H, int ln) {
    return (size_t)B * T * (4 + (ln ? 3 : 0)) * H + (size_t)2 * B * H;
}

void nn_gru_backward(float *dinp, float *dh0, const rnn_cell_t *dw, float *scratch,
                     const float *dout, int ldo, const float *inp, const float *h0,
                     const rnn_cell_t *w, const float *out, const float *gates, const int *len,
                     int B, int T, int K, int H, int reverse) {
    size_t G = (size_t)4 * H, ldg = (size_t)T * G, ldt = (size_t)T * ldo, LS = gru_lns(H), ldl = (size_t)T * LS;
    int lnh = w->ln_hh_g != NULL;
    const float *ln = gates + (size_t)B * T * G;
    float *dg = scratch, *dh = dg + (size_t)B * T * G, *carry = dh + (size_t)B * H, *drh = carry + (size_t)B * H;
    size_t R3 = lnh ? (size_t)3 * H : G; /* row stride of the recurrent projection's gradient */
    if (!lnh) drh = dg;
    memset(carry, 0, (size_t)B * H * sizeof(float));
    for (int s = T - 1; s >= 0; s--) {
        int t = reverse ? T - 1 - s : s, tp = reverse ? t + 1 : t - 1;
        const float *hp = s == 0 ? h0 : out + (size_t)tp * ldo;
        size_t ldh = s == 0 ? (size_t)H : ldt;
        for (int b = 0; b < B; b++) {
            const float *d = dout + (size_t)b * ldt + (size_t)t * ldo;
            float *o = dh + (size_t)b * H, *c = carry + (size_t)b * H;
            for (int j = 0; j < H; j++) o[j] = d[j] + c[j];
        }
        memset(carry, 0, (size_t)B * H * sizeof(float));
        float *dgt = dg + (size_t)t * G, *drt = drh + (size_t)t * R3;
        gru_act_back(dgt, ldg, carry, (size_t)H, dh, (size_t)H, gates + (size_t)t * G, ldg, hp, ldh, B, H,
                     len, t);
        if (lnh) gru_ln_hidden_raw(drt, (size_t)T * R3, dgt, ldg, ln + (size_t)t * LS, ldl, w, B, H);
        mm(0, 0, B, H, 3 * H, drt, (int)((size_t)T * R3), w->w_hh, H, 1.0f, carry, H); /* the state's gradient */
    }
    if (lnh && !h0) {
        /* The first step's recurrent input is the zero state: its projection's gradient (through
         * the normalization of a zero vector, rstd = 1/sqrt(ε) ≈ 316) adds nothing to dW_hh. Zero
         * it (it served the carry above) so that rec_weight_grad's shifted GEMM does not add and
         * then subtract it against the previous sentence's last state: float32 cancellation of a
         * term 316x the others cost 30-50x the gradient's rounding error (measured 2e-5..4e-5
         * relative against PyTorch, tests/test_rnn_gru_train_torch.py). */
        int t0 = reverse ? T - 1 : 0;
        for (int b = 0; b < B; b++) memset(drh + ((size_t)b * T + t0) * R3, 0, (size_t)3 * H * sizeof(float));
    }
    rec_weight_grad(dw->w_hh, drh, (int)R3, 3 * H, out, (size_t)ldo, h0, B, T, H, reverse);
    gru_bias_grads(dw, dg, G, ln, LS, w, B * T, H);
    if (dh0)
        for (size_t i = 0; i < (size_t)B * H; i++) dh0[i] += carry[i];
    if (w->ln_ih_g) gru_ln_input_raw(dg, G, ln, LS, w, B * T, H);
    gru_input_back(dinp, (size_t)K, dw, dg, G, inp, (size_t)K, B * T, w, K, H); /* all steps */
}

void nn_bigru_forward(float *out, float *gates_f, float *gates_b, const float *inp,
                      const rnn_cell_t *wf, const rnn_cell_t *wb, const int *len, int B, int T,
                      int K, int H) {
    nn_gru_forward(out, 2 * H, gates_f, inp, NULL, wf, len, B, T, K, H, 0);
    nn_gru_forward(out + H, 2 * H, gates_b, inp, NULL, wb, len, B, T, K, H, 1);
}

void nn_bigru_backward(float *dinp, const rnn_cell_t *dwf, const rnn_cell_t *dwb, float *scratch,
                       const float *dout, const float *inp, const rnn_cell_t *wf,
                       const rnn_cell_t *wb, const float *out, const float *gates_f,
                       const float *gates_b, const int *len, int B, int T, int K, int H) {
    nn_gru_backward(dinp, NULL, dwf, scratch, dout, 2 * H, inp, NULL, wf, out, gates_f, len, B, T, K, H, 0);
    nn_gru_backward(dinp, NULL, dwb, scratch, dout + H, 2 * H, inp, NULL, wb, out + H, gates_b, len, B, T,
                    K, H, 1);
}

/* ------------------------------------------------------------ LSTM */

static void lstm_input(float *g, size_t ldg, const float *x, size_t ldx, int M, const rnn_cell_t *w,
                       int K, int H) {
    mm(0, 1, M, 4 * H, K, x, (int)ldx, w->w_ih, K, 0.0f, g, (int)ldg);
    if (!w->b_ih && !w->b_hh) return;
#pragma omp parallel for schedule(static) if ((size_t)M * H >= RNN_PAR_MIN)
    for (int m = 0; m < M; m++) {
        float *r = g + (size_t)m * ldg;
        if (w->b_ih)
            for (int j = 0; j < 4 * H; j++) r[j] += w->b_ih[j];
        if (w->b_hh)
            for (int j = 0; j < 4 * H; j++) r[j] += w->b_hh[j];
    }
}

static void lstm_hidden(float *g, size_t ldg, const float *hp, size_t ldh, int M, const rnn_cell_t *w,
                        int H) {
    if (hp) mm(0, 1, M, 4 * H, H, hp, (int)ldh, w->w_hh, H, 1.0f, g, (int)ldg);
}

static inline float clip_val(float x, float clip) { return x > clip ? clip : x < -clip ? -clip : x; }

void nn_clip_forward(float *x, size_t n, float clip) {
    if (clip <= 0) return;
    for (size_t i = 0; i < n; i++) x[i] = x[i] > clip ? clip : x[i] < -clip ? -clip : x[i];
}

void nn_clip_backward(float *dx, const float *y, size_t n, float clip) {
    if (clip <= 0) return;
    for (size_t i = 0; i < n; i++)
        if (!(fabsf(y[i]) < clip)) dx[i] = 0.0f;
}

void nn_residual_clip_backward(float *dx, const float *a, const float *b, size_t n, float clip) {
    if (clip <= 0) return;
    for (size_t i = 0; i < n; i++)
        if (!(fabsf(a[i] + b[i]) <= clip)) dx[i] = 0.0f;
}

void nn_lstm_point(float *h, float *c, float *g, const float *c_prev, int H, float clip) {
    /* sigmoid(x) = 0.5 + 0.5 tanh(x / 2): one tanh pass over all four gates */
    for (int j = 0; j < 2 * H; j++) g[j] *= 0.5f;
    for (int j = 3 * H; j < 4 * H; j++) g[j] *= 0.5f;
    tanh_inplace(g, 4 * H);
    for (int j = 0; j < 2 * H; j++) g[j] = 0.5f + 0.5f * g[j];
    for (int j = 3 * H; j < 4 * H; j++) g[j] = 0.5f + 0.5f * g[j];
    const float *i = g, *f = g + H, *gg = g + 2 * H, *o = g + 3 * H;
    if (clip > 0 && c_prev)
        for (int j = 0; j < H; j++) c[j] = f[j] * clip_val(c_prev[j], clip) + i[j] * gg[j];
    else
        for (int j = 0; j < H; j++) c[j] = f[j] * (c_prev ? c_prev[j] : 0.0f) + i[j] * gg[j];
    memcpy(h, c, (size_t)H * sizeof(float));
    tanh_inplace(h, H);
    for (int j = 0; j < H; j++) h[j] *= o[j];
}

static void lstm_act(float *h, size_t ldo, float *c, size_t ldc, float *g, size_t ldg, const float *hp,
                     size_t ldh, const float *cp, size_t ldcp, int M, int H, const int *len, int t, float clip) {
#pragma omp parallel for schedule(static) if ((size_t)M * H >= RNN_PAR_MIN)
    for (int m = 0; m < M; m++) {
        float *hr = h + (size_t)m * ldo, *cr = c + (size_t)m * ldc;
        const float *hpr = hp ? hp + (size_t)m * ldh : NULL, *cpr = cp ? cp + (size_t)m * ldcp : NULL;
        if (!active(len, m, t)) {
            if (hpr) memcpy(hr, hpr, (size_t)H * sizeof(float));
            else memset(hr, 0, (size_t)H * sizeof(float));
            if (cpr) memcpy(cr, cpr, (size_t)H * sizeof(float));
            else memset(cr, 0, (size_t)H * sizeof(float));
            continue;
        }
        nn_lstm_point(hr, cr, g + (size_t)m * ldg, cpr, H, clip);
    }
}

/* dg (stride lddg) from dh (stride lddh) and dc (stride lddc; may be NULL); dhp, dcp += the
 * direct terms (the whole dh, dc on inactive rows). */
static void lstm_act_back(float *dg, size_t lddg, float *dhp, size_t ldhp, float *dcp, size_t ldcp,
                          const float *dh, size_t lddh, const float *dc, size_t lddc, const float *g,
                          size_t ldg, const float *c, size_t ldc, const float *cp, size_t ldcpv, int M,
                          int H, const int *len, int t, float clip) {
#pragma omp parallel for schedule(static) if ((size_t)M * H >= RNN_PAR_MIN)
    for (int m = 0; m < M; m++) {
        float *dgr = dg + (size_t)m * lddg;
        const float *dhr = dh + (size_t)m * lddh, *dcr = dc ? dc + (size_t)m * lddc : NULL;
        float *dhpr = dhp ? dhp + (size_t)m * ldhp : NULL, *dcpr = dcp ? dcp + (size_t)m * ldcp : NULL;
        if (!active(len, m, t)) {
            memset(dgr, 0, (size_t)4 * H * sizeof(float));
            if (dhpr)
                for (int j = 0; j < H; j++) dhpr[j] += dhr[j];
            if (dcpr && dcr)
                for (int j = 0; j < H; j++) dcpr[j] += dcr[j];
            continue;
        }
        const float *gr = g + (size_t)m * ldg, *cr = c + (size_t)m * ldc;
        const float *cpr = cp ? cp + (size_t)m * ldcpv : NULL;
        const float *i = gr, *f = gr + H, *gg = gr + 2 * H, *o = gr + 3 * H;
        float *tc = dgr + 3 * H; /* tanh(c) recomputed in the o slot, read before overwritten */
        memcpy(tc, cr, (size_t)H * sizeof(float));
        tanh_inplace(tc, H);
        for (int j = 0; j < H; j++) {
            float tcj = tc[j], d = dhr[j];
            float dct = (dcr ? dcr[j] : 0.0f) + d * o[j] * (1.0f - tcj * tcj);
            float cv = cpr ? cpr[j] : 0.0f, pass = 1.0f;
            if (clip > 0) { /* the step read clip(c_{t-1}): its subgradient */
                pass = fabsf(cv) <= clip ? 1.0f : 0.0f;
                cv = clip_val(cv, clip);
            }
            dgr[j] = dct * gg[j] * i[j] * (1.0f - i[j]);
            dgr[H + j] = dct * cv * f[j] * (1.0f - f[j]);
            dgr[2 * H + j] = dct * i[j] * (1.0f - gg[j] * gg[j]);
            dgr[3 * H + j] = d * tcj * o[j] * (1.0f - o[j]);
            if (dcpr) dcpr[j] += dct * f[j] * pass;
        }
    }
}

static void lstm_hidden_back(float *dhp, size_t ldhp, const rnn_cell_t *dw, const float *dg, size_t lddg,
                             const float *hp, size_t ldh, int M, const rnn_cell_t *w, int H) {
    if (dhp) mm(0, 0, M, H, 4 * H, dg, (int)lddg, w->w_hh, H, 1.0f, dhp, (int)ldhp);
    if (hp) mm(1, 0, 4 * H, H, M, dg, (int)lddg, hp, (int)ldh, 1.0f, dw->w_hh, H);
    if (w->b_hh) colsum_acc(dw->b_hh, dg, lddg, M, 4 * H);
}

static void lstm_input_back(float *dx, size_t lddx, const rnn_cell_t *dw, const float *dg, size_t lddg,
                            const float *x, size_t ldx, int M, const rnn_cell_t *w, int K, int H) {
    if (dx) mm(0, 0, M, K, 4 * H, dg, (int)lddg, w->w_ih, K, 1.0f, dx, (int)lddx);
    mm(1, 0, 4 * H, K, M, dg, (int)lddg, x, (int)ldx, 1.0f, dw->w_ih, K);
    if (w->b_ih) colsum_acc(dw->b_ih, dg, lddg, M, 4 * H);
}

void nn_lstm_cell_forward(float *h, float *c, float *gates, const float *x, const float *h_prev,
                          const float *c_prev, const rnn_cell_t *w, int R, int K, int H) {
    size_t G = (size_t)4 * H;
    lstm_input(gates, G, x, (size_t)K, R, w, K, H);
    lstm_hidden(gates, G, h_prev, (size_t)H, R, w, H);
    lstm_act(h, (size_t)H, c, (size_t)H, gates, G, h_prev, (size_t)H, c_prev, (size_t)H, R, H, NULL, 0, w->clip);
}

void nn_lstm_cell_backward(float *dx, float *dh_prev, float *dc_prev, const rnn_cell_t *dw,
                           float *scratch, const float *dh, const float *dc, const float *x,
                           const float *h_prev, const float *c_prev, const rnn_cell_t *w,
                           const float *gates, const float *c, int R, int K, int H) {
    size_t G = (size_t)4 * H;
    lstm_act_back(scratch, G, dh_prev, (size_t)H, dc_prev, (size_t)H, dh, (size_t)H, dc, (size_t)H, gates, G,
                  c, (size_t)H, c_prev, (size_t)H, R, H, NULL, 0, w->clip);
    lstm_hidden_back(dh_prev, (size_t)H, dw, scratch, G, h_prev, (size_t)H, R, w, H);
    lstm_input_back(dx, (size_t)K, dw, scratch, G, x, (size_t)K, R, w, K, H);
}

void nn_lstm_forward(float *out, int ldo, float *cell, float *gates, const float *inp,
                     const float *h0, const float *c0, const rnn_cell_t *w, const int *len, int B,
                     int T, int K, int H, int reverse) {
    size_t G = (size_t)4 * H, ldg = (size_t)T * G, ldt = (size_t)T * ldo, ldc = (size_t)T * H;
    lstm_input(gates, G, inp, (size_t)K, B * T, w, K, H);
    for (int s = 0; s < T; s++) {
        int t = reverse ? T - 1 - s : s, tp = reverse ? t + 1 : t - 1;
        const float *hp = s == 0 ? h0 : out + (size_t)tp * ldo;
        const float *cp = s == 0 ? c0 : cell + (size_t)tp * H;
        size_t ldh = s == 0 ? (size_t)H : ldt, ldcp = s == 0 ? (size_t)H : ldc;
        float *g = gates + (size_t)t * G;
        lstm_hidden(g, ldg, hp, ldh, B, w, H);
        lstm_act(out + (size_t)t * ldo, ldt, cell + (size_t)t * H, ldc, g, ldg, hp, ldh, cp, ldcp, B, H, len, t, w->clip);
    }
}

size_t nn_lstm_backward_scratch(int B, int T, int H) {
    return (size_t)B * T * 4 * H + (size_t)4 * B * H;
}

void nn_lstm_backward(float *dinp, float *dh0, float *dc0, const rnn_cell_t *dw, float *scratch,
                      const float *dout, int ldo, const float *inp, const float *h0,
                      const float *c0, const rnn_cell_t *w, const float *out, const float *cell,
                      const float *gates, const int *len, int B, int T, int K, int H, int reverse) {
    size_t G = (size_t)4 * H, ldg = (size_t)T * G, ldt = (size_t)T * ldo, ldc = (size_t)T * H, BH = (size_t)B * H;
    float *dg = scratch, *dh = dg + (size_t)B * T * G, *dc = dh + BH, *ch = dc + BH, *cc = ch + BH;
    memset(ch, 0, 2 * BH * sizeof(float)); /* carries of h and c */
    for (int s = T - 1; s >= 0; s--) {
        int t = reverse ? T - 1 - s : s, tp = reverse ? t + 1 : t - 1;
        const float *cp = s == 0 ? c0 : cell + (size_t)tp * H;
        size_t ldcp = s == 0 ? (size_t)H : ldc;
        for (int b = 0; b < B; b++) {
            const float *d = dout + (size_t)b * ldt + (size_t)t * ldo;
            float *o = dh + (size_t)b * H, *c = ch + (size_t)b * H;
            for (int j = 0; j < H; j++) o[j] = d[j] + c[j];
        }
        memcpy(dc, cc, BH * sizeof(float));
        memset(ch, 0, 2 * BH * sizeof(float));
        float *dgt = dg + (size_t)t * G;
        lstm_act_back(dgt, ldg, ch, (size_t)H, cc, (size_t)H, dh, (size_t)H, dc, (size_t)H, gates + (size_t)t * G,
                      ldg, cell + (size_t)t * H, ldc, cp, ldcp, B, H, len, t, w->clip);
        mm(0, 0, B, H, 4 * H, dgt, (int)ldg, w->w_hh, H, 1.0f, ch, H);
    }
    rec_weight_grad(dw->w_hh, dg, 4 * H, 4 * H, out, (size_t)ldo, h0, B, T, H, reverse);
    if (w->b_hh) colsum_acc(dw->b_hh, dg, G, B * T, 4 * H);
    if (dh0)
        for (size_t i = 0; i < BH; i++) dh0[i] += ch[i];
    if (dc0)
        for (size_t i = 0; i < BH; i++) dc0[i] += cc[i];
    lstm_input_back(dinp, (size_t)K, dw, dg, G, inp, (size_t)K, B * T, w, K, H);
}

void nn_bilstm_forward(float *out, float *cell_f, float *cell_b, float *gates_f, float *gates_b,
                       const float *inp, const rnn_cell_t *wf, const rnn_cell_t *wb,
                       const int *len, int B, int T, int K, int H) {
    nn_lstm_forward(out, 2 * H, cell_f, gates_f, inp, NULL, NULL, wf, len, B, T, K, H, 0);
    nn_lstm_forward(out + H, 2 * H, cell_b, gates_b, inp, NULL, NULL, wb, len, B, T, K, H, 1);
}

void nn_bilstm_backward(float *dinp, const rnn_cell_t *dwf, const rnn_cell_t *dwb, float *scratch,
                        const float *dout, const float *inp, const rnn_cell_t *wf,
                        const rnn_cell_t *wb, const float *out, const float *cell_f,
                        const float *cell_b, const float *gates_f, const float *gates_b,
                        const int *len, int B, int T, int K, int H) {
    nn_lstm_backward(dinp, NULL, NULL, dwf, scratch, dout, 2 * H, inp, NULL, NULL, wf, out, cell_f, gates_f,
                     len, B, T, K, H, 0);
    nn_lstm_backward(dinp, NULL, NULL, dwb, scratch, dout + H, 2 * H, inp, NULL, NULL, wb, out + H, cell_b,
                     gates_b, len, B, T, K, H, 1);
}

/* ------------------------------------------------------------ GNMT's stacked encoder */

/* The output of layer l (after its residual from l = 2 up). */
static const float *gnmt_y(const gnmt_encoder_acts_t *a, int l) { return l >= 2 ? a->y[l] : a->h[l]; }

const float *nn_gnmt_encoder_output(const gnmt_encoder_acts_t *acts, int L) { return gnmt_y(acts, L - 1); }

void nn_gnmt_encoder_forward(const gnmt_encoder_acts_t *acts, const float *inp,
                             const rnn_cell_t *w, const int *len, int B, int T, int K, int H,
                             int L, int bi) {
    size_t BT = (size_t)B * T;
    if (bi)
        nn_bilstm_forward(acts->h[0], acts->cell[0], acts->cell[0] + BT * H, acts->gates[0],
                          acts->gates[0] + BT * 4 * H, inp, &w[0], &w[L], len, B, T, K, H);
    else
        nn_lstm_forward(acts->h[0], H, acts->cell[0], acts->gates[0], inp, NULL, NULL, &w[0], len, B, T, K, H, 0);
    int drop = acts->xd && acts->drop > 0;
    for (int l = 1; l < L; l++) {
        const float *x = gnmt_y(acts, l - 1), *xin = x;
        int Kin = l == 1 ? H * (bi ? 2 : 1) : H;
        if (drop) {
            nn_dropout_forward(acts->xd[l], x, BT * (size_t)Kin, acts->drop, acts->drop_keys[l]);
            xin = acts->xd[l];
        }
        nn_lstm_forward(acts->h[l], H, acts->cell[l], acts->gates[l], xin, NULL, NULL, &w[l], len, B, T, Kin, H, 0);
        if (l >= 2) {
            nn_residual_forward(acts->y[l], acts->h[l], x, BT * H);
            nn_clip_forward(acts->y[l], BT * H, w[l].clip);
        }
    }
}

size_t nn_gnmt_encoder_backward_scratch(int B, int T, int H, int bi) {
    (void)bi;
    return (size_t)4 * B * T * H + nn_lstm_backward_scratch(B, T, H);
}

void nn_gnmt_encoder_backward(float *dinp, const rnn_cell_t *dw, float *scratch,
                              const float *dout, const gnmt_encoder_acts_t *acts,
                              const float *inp, const rnn_cell_t *w, const int *len, int B, int T,
                              int K, int H, int L, int bi) {
    size_t BT = (size_t)B * T;
    float *dcur = scratch, *dnext = dcur + BT * 2 * H, *rs = dnext + BT * 2 * H;
    int wout = L == 1 && bi ? 2 * H : H; /* the encoder output's width */
    memcpy(dcur, dout, BT * (size_t)wout * sizeof(float));
    int drop = acts->xd && acts->drop > 0;
    for (int l = L - 1; l >= 1; l--) {
        const float *x = gnmt_y(acts, l - 1);
        int Kin = l == 1 ? H * (bi ? 2 : 1) : H;
        if (l >= 2) nn_residual_clip_backward(dcur, acts->h[l], x, BT * H, w[l].clip);
        if (drop) { /* the LSTM's input gradient through the mask, then the residual's branch */
            memset(dnext, 0, BT * (size_t)Kin * sizeof(float));
            nn_lstm_backward(dnext, NULL, NULL, &dw[l], rs, dcur, H, acts->xd[l], NULL, NULL, &w[l], acts->h[l],
                             acts->cell[l], acts->gates[l], len, B, T, Kin, H, 0);
            nn_dropout_forward(dnext, dnext, BT * (size_t)Kin, acts->drop, acts->drop_keys[l]);
            if (l >= 2)
                for (size_t i = 0; i < BT * H; i++) dnext[i] += dcur[i];
            float *tmp = dcur;
            dcur = dnext;
            dnext = tmp;
            continue;
        }
        if (l >= 2) memcpy(dnext, dcur, BT * H * sizeof(float)); /* the residual's branch */
        else memset(dnext, 0, BT * (size_t)Kin * sizeof(float));
        nn_lstm_backward(dnext, NULL, NULL, &dw[l], rs, dcur, H, x, NULL, NULL, &w[l], acts->h[l], acts->cell[l],
                         acts->gates[l], len, B, T, Kin, H, 0);
        float *tmp = dcur;
        dcur = dnext;
        dnext = tmp;
    }
    if (bi)
        nn_bilstm_backward(dinp, &dw[0], &dw[L], rs, dcur, inp, &w[0], &w[L], acts->h[0], acts->cell[0],
                           acts->cell[0] + BT * H, acts->gates[0], acts->gates[0] + BT * 4 * H, len, B, T, K, H);
    else
        nn_lstm_backward(dinp, NULL, NULL, &dw[0], rs, dcur, H, inp, NULL, NULL, &w[0], acts->h[0], acts->cell[0],
                         acts->gates[0], len, B, T, K, H, 0);
}

/* ------------------------------------------------------------ additive attention */

void nn_additive_keys_forward(float *kp, const float *keys, const float *wk, const float *b,
                              int B, int S, int Dv, int A) {
    nn_rnn_linear_forward(kp, keys, wk, b, B * S, Dv, A);
}

void nn_additive_keys_backward(float *dkeys, float *dwk, float *db, const float *dkp,
                               const float *keys, const float *wk, int B, int S, int Dv, int A) {
    nn_rnn_linear_backward(dkeys, dwk, db, dkp, keys, wk, B * S, Dv, A);
}

static inline int src_row(const int *src_of_row, int r, int Tq) { return src_of_row ? src_of_row[r] : r / Tq; }

/* e = v · tanh(qp + kpj) over A, the tanh in chunks on the stack. */
static float att_score(const float *qp, const float *kpj, const float *v, int A) {
    float buf[ATT_CHUNK];
    double e = 0;
    for (int a0 = 0; a0 < A; a0 += ATT_CHUNK) {
        int n = A - a0 < ATT_CHUNK ? A - a0 : ATT_CHUNK;
        for (int a = 0; a < n; a++) buf[a] = qp[a0 + a] + kpj[a0 + a];
        tanh_inplace(buf, n);
        float s = 0;
        for (int a = 0; a < n; a++) s += v[a0 + a] * buf[a];
        e += s;
    }
    return (float)e;
}

void nn_additive_attention_forward(float *ctx, int ldc, float *qp, float *alpha, const float *q,
                                   int ldq, const float *kp, const float *values, const int *klen,
                                   const int *src_of_row, const float *wq, const float *v, int R,
                                   int Tq, int S, int Dq, int A, int Dv) {
    size_t lq = (size_t)ldq;
    if ((q = act_rows(q, &lq, R, Dq))) mm(0, 1, R, A, Dq, q, (int)lq, wq, Dq, 0.0f, qp, A);
    else memset(qp, 0, (size_t)R * A * sizeof(float));
    nn_additive_attention_apply(ctx, ldc, alpha, qp, kp, values, klen, src_of_row, v, R, Tq, S, A, Dv);
}

void nn_additive_attention_apply(float *ctx, int ldc, float *alpha, const float *qp, const float *kp,
                                 const float *values, const int *klen, const int *src_of_row, const float *v,
                                 int R, int Tq, int S, int A, int Dv) {
#pragma omp parallel for schedule(dynamic, 1) if ((size_t)R * S * A >= RNN_PAR_MIN)
    for (int r = 0; r < R; r++) {
        int b = src_row(src_of_row, r, Tq), L = klen ? klen[b] : S;
        if (L > S) L = S;
        const float *kpb = kp + (size_t)b * S * A, *qr = qp + (size_t)r * A;
        float *al = alpha + (size_t)r * S, *cr = ctx + (size_t)r * ldc;
        float mx = -INFINITY;
        for (int j = 0; j < L; j++) {
            al[j] = att_score(qr, kpb + (size_t)j * A, v, A);
            if (al[j] > mx) mx = al[j];
        }
        double sum = 0;
        for (int j = 0; j < L; j++) {
            al[j] = expf(al[j] - mx);
            sum += al[j];
        }
        for (int j = 0; j < L; j++) al[j] = (float)(al[j] / sum);
        for (int j = L < 0 ? 0 : L; j < S; j++) al[j] = 0.0f;
        memset(cr, 0, (size_t)Dv * sizeof(float));
        const float *vb = values + (size_t)b * S * Dv;
        for (int j = 0; j < L; j++) axpy(cr, al[j], vb + (size_t)j * Dv, (size_t)Dv);
    }
}

void nn_additive_attention_heads_apply(float *ctx, int ldc, float *alpha, float *scratch, const float *qp,
                                       const float *kp, const float *values, const int *klen, const int *src_of_row,
                                       const float *v, int R, int S, int A, int Dv, int heads) {
    const int Ah = A / heads, Hh = Dv / (2 * heads), half = Dv / 2;
#pragma omp parallel for schedule(dynamic, 1) if ((size_t)R * S * A >= RNN_PAR_MIN)
    for (int r = 0; r < R; r++) {
        int b = src_row(src_of_row, r, 1), L = klen ? klen[b] : S;
        if (L > S) L = S;
        const float *kpb = kp + (size_t)b * S * A, *qr = qp + (size_t)r * A, *vb = values + (size_t)b * S * Dv;
        float *al = alpha + (size_t)r * S, *w = scratch + (size_t)r * S, *cr = ctx + (size_t)r * ldc;
        memset(al, 0, (size_t)S * sizeof(float));
        memset(cr, 0, (size_t)Dv * sizeof(float));
        for (int h = 0; h < heads; h++) {
            const int a0 = h * Ah;
            float mx = -INFINITY;
            for (int j = 0; j < L; j++) {
                w[j] = att_score(qr + a0, kpb + (size_t)j * A + a0, v + a0, Ah);
                if (w[j] > mx) mx = w[j];
            }
            double sum = 0;
            for (int j = 0; j < L; j++) {
                w[j] = expf(w[j] - mx);
                sum += w[j];
            }
            for (int j = 0; j < L; j++) {
                w[j] = (float)(w[j] / sum);
                al[j] += w[j] / (float)heads;
                const float *vj = vb + (size_t)j * Dv;
                axpy(cr + h * Hh, w[j], vj + h * Hh, (size_t)Hh);
                axpy(cr + half + h * Hh, w[j], vj + half + h * Hh, (size_t)Hh);
            }
        }
    }
}

/* The backward of one query row r (sentence b): dvalues, dkp rows of b and dqp, dvp rows of r. */
static void att_row_back(float *dqp, float *dvp, float *dkp, float *dvalues, const float *dctx, int ldc,
                         const float *qp, const float *kp, const float *values, const float *alpha,
                         const float *v, int r, int b, int L, int S, int A, int Dv) {
    const float *dc = dctx + (size_t)r * ldc, *al = alpha + (size_t)r * S, *vb = values + (size_t)b * S * Dv;
    const float *qr = qp + (size_t)r * A, *kpb = kp + (size_t)b * S * A;
    float *dqr = dqp + (size_t)r * A, *dvr = dvp + (size_t)r * A, *dkb = dkp + (size_t)b * S * A;
    double dot = 0;
    /* dα_j = dctx · val_j; softmax backward: de_j = α_j (dα_j − Σ α dα) */
    float dal[L > 0 ? L : 1];
    for (int j = 0; j < L; j++) {
        const float *vj = vb + (size_t)j * Dv;
        double s = 0;
        for (int k = 0; k < Dv; k++) s += (double)dc[k] * vj[k];
        dal[j] = (float)s;
        dot += (double)al[j] * s;
        if (dvalues) axpy(dvalues + ((size_t)b * S + j) * Dv, al[j], dc, (size_t)Dv);
    }
    float buf[ATT_CHUNK];
    for (int j = 0; j < L; j++) {
        float de = al[j] * (float)(dal[j] - dot);
        const float *kpj = kpb + (size_t)j * A;
        float *dkj = dkb + (size_t)j * A;
        for (int a0 = 0; a0 < A; a0 += ATT_CHUNK) {
            int n = A - a0 < ATT_CHUNK ? A - a0 : ATT_CHUNK;
            for (int a = 0; a < n; a++) buf[a] = qr[a0 + a] + kpj[a0 + a];
            tanh_inplace(buf, n);
            for (int a = 0; a < n; a++) {
                float hid = buf[a], dp = de * v[a0 + a] * (1.0f - hid * hid);
                dvr[a0 + a] += de * hid;
                dqr[a0 + a] += dp;
                dkj[a0 + a] += dp;
            }
        }
    }
}

void nn_additive_attention_backward(float *dq, int lddq, float *dwq, float *dv, float *dkp, float *dvalues,
                                    float *scratch, const float *dctx, int ldc, const float *q,
                                    int ldq, const float *qp, const float *kp, const float *values,
                                    const float *alpha, const int *klen, const int *src_of_row,
                                    const float *wq, const float *v, int R, int Tq, int S, int Dq,
                                    int A, int Dv) {
    float *dqp = scratch, *dvp = scratch + (size_t)R * A;
    memset(scratch, 0, (size_t)2 * R * A * sizeof(float));
    if (!src_of_row) {
        /* rows of sentence b are [b·Tq, (b+1)·Tq): one thread per sentence (its dkp, dvalues) */
        int B = (R + Tq - 1) / Tq;
#pragma omp parallel for schedule(dynamic, 1) if ((size_t)R * S * A >= RNN_PAR_MIN)
        for (int b = 0; b < B; b++) {
            int L = klen ? klen[b] : S;
            if (L > S) L = S;
            for (int r = b * Tq; r < (b + 1) * Tq && r < R; r++)
                att_row_back(dqp, dvp, dkp, dvalues, dctx, ldc, qp, kp, values, alpha, v, r, b, L, S, A, Dv);
        }
    } else {
        for (int r = 0; r < R; r++) {
            int b = src_of_row[r], L = klen ? klen[b] : S;
            if (L > S) L = S;
            att_row_back(dqp, dvp, dkp, dvalues, dctx, ldc, qp, kp, values, alpha, v, r, b, L, S, A, Dv);
        }
    }
    if (dq && q) mm(0, 0, R, Dq, A, dqp, A, wq, Dq, 1.0f, dq, lddq);
    size_t lq = (size_t)ldq;
    if ((q = act_rows(q, &lq, R, Dq))) mm(1, 0, A, Dq, R, dqp, A, q, (int)lq, 1.0f, dwq, Dq);
    colsum_acc(dv, dvp, (size_t)A, R, A);
}

/* ------------------------------------------------------------ conditional GRU decoder */

/* u = tanh(W_s s + W_c c + W_e e + b) and logits = W_o u + b_o over M rows (strides given). */
static void deep_output_forward(float *u, float *logits, const float *s, int lds, const float *c, int ldc,
                                const float *e, int lde, int M, const cgru_weights_t *w, cgru_dims_t d) {
    size_t l = (size_t)lds;
    s = act_rows(s, &l, M, d.H);
    mm(0, 1, M, d.O, d.H, s, (int)l, w->out_ws, d.H, 0.0f, u, d.O);
    l = (size_t)ldc;
    c = act_rows(c, &l, M, d.Dv);
    mm(0, 1, M, d.O, d.Dv, c, (int)l, w->out_wc, d.Dv, 1.0f, u, d.O);
    l = (size_t)lde;
    e = act_rows(e, &l, M, d.E);
    mm(0, 1, M, d.O, d.E, e, (int)l, w->out_we, d.E, 1.0f, u, d.O);
    if (w->out_b) nn_bias_forward(u, w->out_b, M, d.O);
    nn_activation_forward(u, u, (size_t)M * d.O, ACT_TANH);
    if (logits) nn_rnn_linear_forward(logits, u, w->out_wo, w->out_bo, M, d.O, d.V);
}

void nn_cgru_forward(const cgru_acts_t *a, const float *emb, const float *s0, const float *enc,
                     const int *slen, const cgru_weights_t *w, int B, int T, int S, cgru_dims_t d) {
    int H = d.H, BT = B * T;
    size_t G = (size_t)4 * H, ldg = (size_t)T * G, ldh = (size_t)T * H, ldc = (size_t)T * d.Dv;
    size_t LS = gru_lns(H), ldl = (size_t)T * LS;
    float *ln1 = a->g1 + (size_t)BT * G, *ln2 = a->g2 + (size_t)BT * G; /* used with layer normalization */
    nn_additive_keys_forward(a->kp, enc, w->att_wk, w->att_b, B, S, d.Dv, d.A);
    gru_input(a->g1, G, ln1, LS, emb, (size_t)d.E, BT, &w->gru1, d.E, H); /* GRU1's inputs: all steps, one GEMM */
    for (int t = 0; t < T; t++) {
        const float *sp = t == 0 ? s0 : a->s + (size_t)(t - 1) * H;
        size_t ldsp = t == 0 ? (size_t)H : ldh;
        float *g1 = a->g1 + (size_t)t * G, *g2 = a->g2 + (size_t)t * G;
        float *l1 = ln1 + (size_t)t * LS, *l2 = ln2 + (size_t)t * LS;
        float *s1 = a->s1 + (size_t)t * H, *st = a->s + (size_t)t * H, *ct = a->ctx + (size_t)t * d.Dv;
        gru_hidden(g1, ldg, l1, ldl, sp, ldsp, B, &w->gru1, H);
        gru_act(s1, ldh, g1, ldg, sp, ldsp, B, H, NULL, 0);
        nn_additive_attention_forward(ct, (int)ldc, a->qp + (size_t)t * B * d.A, a->alpha + (size_t)t * B * S, s1,
                                      (int)ldh, a->kp, enc, slen, NULL, w->att_wq, w->att_v, B, 1, S, H, d.A,
                                      d.Dv);
        gru_input(g2, ldg, l2, ldl, ct, ldc, B, &w->gru2, d.Dv, H);
        gru_hidden(g2, ldg, l2, ldl, s1, ldh, B, &w->gru2, H);
        gru_act(st, ldh, g2, ldg, s1, ldh, B, H, NULL, 0);
    }
    if (a->u_drop && a->drop > 0) { /* dropout on the deep output */
        deep_output_forward(a->u, NULL, a->s, H, a->ctx, d.Dv, emb, d.E, BT, w, d);
        nn_dropout_forward(a->u_drop, a->u, (size_t)BT * d.O, a->drop, a->drop_key);
        nn_rnn_linear_forward(a->logits, a->u_drop, w->out_wo, w->out_bo, BT, d.O, d.V);
        return;
    }
    deep_output_forward(a->u, a->logits, a->s, H, a->ctx, d.Dv, emb, d.E, BT, w, d); /* all steps */
}

size_t nn_cgru_backward_scratch(int B, int T, int S, cgru_dims_t d) {
    size_t BT = (size_t)B * T;
    return BT * d.O + BT * d.Dv + BT * d.H + BT * 4 * d.H + BT * 4 * d.H + (size_t)B * d.H +
           (size_t)2 * B * d.A + (size_t)B * S * d.A + (size_t)B * d.H + (d.ln ? BT * 10 * (size_t)d.H : 0);
}

void nn_cgru_backward(float *demb, float *ds0, float *denc, const cgru_weights_t *dw,
                      float *scratch, const float *dlogits, const float *emb, const float *s0,
                      const float *enc, const int *slen, const cgru_weights_t *w,
                      const cgru_acts_t *a, int B, int T, int S, cgru_dims_t d) {
    int H = d.H, BT = B * T;
    size_t G = (size_t)4 * H, ldg = (size_t)T * G, ldh = (size_t)T * H, ldc = (size_t)T * d.Dv;
    size_t LS = gru_lns(H), ldl = (size_t)T * LS;
    const float *ln1 = a->g1 + (size_t)BT * G, *ln2 = a->g2 + (size_t)BT * G;
    int lnh1 = w->gru1.ln_hh_g != NULL, lnh2 = w->gru2.ln_hh_g != NULL, lni2 = w->gru2.ln_ih_g != NULL;
    float *du = scratch, *dctx = du + (size_t)BT * d.O, *ds = dctx + (size_t)BT * d.Dv;
    float *dg1 = ds + (size_t)BT * H, *dg2 = dg1 + (size_t)BT * G, *ds1 = dg2 + (size_t)BT * G;
    float *datt = ds1 + (size_t)B * H, *dkp = datt + (size_t)2 * B * d.A, *carry = dkp + (size_t)B * S * d.A;
    /* with layer normalization: the raw projections' gradients (GRU1's recurrent, GRU2's recurrent
     * and input); without, the gate gradients themselves */
    float *ext = carry + (size_t)B * H;
    float *drh1 = lnh1 ? ext : dg1, *drh2 = lnh2 ? ext + (size_t)BT * 3 * H : dg2;
    float *dri2 = lni2 ? ext + (size_t)BT * 6 * H : dg2;
    size_t R1 = lnh1 ? (size_t)3 * H : G, R2 = lnh2 ? (size_t)3 * H : G;

    /* deep output, all steps at once (dropout: the output layer read u_drop; the mask again on du) */
    int drop = a->u_drop && a->drop > 0;
    mm(0, 0, BT, d.O, d.V, dlogits, d.V, w->out_wo, d.O, 0.0f, du, d.O);
    size_t l = (size_t)d.O; /* the weights' gradients against the rows the products multiplied */
    const float *xq = act_rows(drop ? a->u_drop : a->u, &l, BT, d.O);
    mm(1, 0, d.V, d.O, BT, dlogits, d.V, xq, (int)l, 1.0f, dw->out_wo, d.O);
    if (w->out_bo) colsum_acc(dw->out_bo, dlogits, (size_t)d.V, BT, d.V);
    if (drop) nn_dropout_forward(du, du, (size_t)BT * d.O, a->drop, a->drop_key);
    for (size_t i = 0; i < (size_t)BT * d.O; i++) du[i] *= 1.0f - a->u[i] * a->u[i];
    l = (size_t)H, xq = act_rows(a->s, &l, BT, H);
    mm(1, 0, d.O, H, BT, du, d.O, xq, (int)l, 1.0f, dw->out_ws, H);
    l = (size_t)d.Dv, xq = act_rows(a->ctx, &l, BT, d.Dv);
    mm(1, 0, d.O, d.Dv, BT, du, d.O, xq, (int)l, 1.0f, dw->out_wc, d.Dv);
    l = (size_t)d.E, xq = act_rows(emb, &l, BT, d.E);
    mm(1, 0, d.O, d.E, BT, du, d.O, xq, (int)l, 1.0f, dw->out_we, d.E);
    if (w->out_b) colsum_acc(dw->out_b, du, (size_t)d.O, BT, d.O);
    mm(0, 0, BT, H, d.O, du, d.O, w->out_ws, H, 0.0f, ds, H);
    mm(0, 0, BT, d.Dv, d.O, du, d.O, w->out_wc, d.Dv, 0.0f, dctx, d.Dv);
    if (demb) mm(0, 0, BT, d.E, d.O, du, d.O, w->out_we, d.E, 1.0f, demb, d.E);

    memset(dkp, 0, (size_t)B * S * d.A * sizeof(float));
    memset(carry, 0, (size_t)B * H * sizeof(float));
    for (int t = T - 1; t >= 0; t--) {
        const float *sp = t == 0 ? s0 : a->s + (size_t)(t - 1) * H;
        size_t ldsp = t == 0 ? (size_t)H : ldh;
        float *dst = ds + (size_t)t * H, *dct = dctx + (size_t)t * d.Dv, *dg1t = dg1 + (size_t)t * G;
        const float *s1 = a->s1 + (size_t)t * H;
        for (int b = 0; b < B; b++)
            for (int j = 0; j < H; j++) dst[(size_t)b * ldh + j] += carry[(size_t)b * H + j];
        memset(carry, 0, (size_t)B * H * sizeof(float));
        memset(ds1, 0, (size_t)B * H * sizeof(float));
        /* GRU2: input ctx_t, state s'_t; per step only the gradients of s'_t and ctx_t */
        float *dg2t = dg2 + (size_t)t * G;
        float *drh2t = drh2 + (size_t)t * R2, *dri2t = dri2 + (size_t)t * G;
        gru_act_back(dg2t, ldg, ds1, (size_t)H, dst, ldh, a->g2 + (size_t)t * G, ldg, s1, ldh, B, H, NULL, 0);
        if (lnh2) gru_ln_hidden_raw(drh2t, (size_t)T * R2, dg2t, ldg, ln2 + (size_t)t * LS, ldl, &w->gru2, B, H);
        if (lni2) {
            for (int b = 0; b < B; b++)
                memcpy(dri2t + (size_t)b * ldg, dg2t + (size_t)b * ldg, G * sizeof(float));
            gru_ln_input_raw(dri2t, ldg, ln2 + (size_t)t * LS, ldl, &w->gru2, B, H);
        }
        mm(0, 0, B, H, 3 * H, drh2t, (int)((size_t)T * R2), w->gru2.w_hh, H, 1.0f, ds1, H);
        mm(0, 0, B, d.Dv, 2 * H, dri2t, (int)ldg, w->gru2.w_ih, d.Dv, 1.0f, dct, (int)ldc);
        mm(0, 0, B, d.Dv, H, dri2t + 3 * H, (int)ldg, w->gru2.w_ih + (size_t)2 * H * d.Dv, d.Dv, 1.0f, dct, (int)ldc);
        /* attention with query s'_t */
        nn_additive_attention_backward(ds1, H, dw->att_wq, dw->att_v, dkp, denc, datt, dct, (int)ldc, s1, (int)ldh,
                                       a->qp + (size_t)t * B * d.A, a->kp, enc, a->alpha + (size_t)t * B * S, slen,
                                       NULL, w->att_wq, w->att_v, B, 1, S, H, d.A, d.Dv);
        /* GRU1: state s_{t-1}; its weights' gradients wait for the end (all steps at once) */
        gru_act_back(dg1t, ldg, carry, (size_t)H, ds1, (size_t)H, a->g1 + (size_t)t * G, ldg, sp, ldsp, B, H, NULL,
                     0);
        float *drh1t = drh1 + (size_t)t * R1;
        if (lnh1) gru_ln_hidden_raw(drh1t, (size_t)T * R1, dg1t, ldg, ln1 + (size_t)t * LS, ldl, &w->gru1, B, H);
        mm(0, 0, B, H, 3 * H, drh1t, (int)((size_t)T * R1), w->gru1.w_hh, H, 1.0f, carry, H);
    }
    if (ds0)
        for (size_t i = 0; i < (size_t)B * H; i++) ds0[i] += carry[i];
    /* the weights' gradients of all steps: a few GEMMs over B·T rows */
    rec_weight_grad(dw->gru1.w_hh, drh1, (int)R1, 3 * H, a->s, (size_t)H, s0, B, T, H, 0);
    gru_bias_grads(&dw->gru1, dg1, G, ln1, LS, &w->gru1, BT, H);
    if (w->gru1.ln_ih_g) gru_ln_input_raw(dg1, G, ln1, LS, &w->gru1, BT, H);
    gru_input_back(demb, (size_t)d.E, &dw->gru1, dg1, G, emb, (size_t)d.E, BT, &w->gru1, d.E, H);
    l = (size_t)H, xq = act_rows(a->s1, &l, BT, H);
    mm(1, 0, 3 * H, H, BT, drh2, (int)R2, xq, (int)l, 1.0f, dw->gru2.w_hh, H); /* GRU2's state is s' of the same step */
    gru_bias_grads(&dw->gru2, dg2, G, ln2, LS, &w->gru2, BT, H);
    gru_input_back(NULL, 0, &dw->gru2, dri2, G, a->ctx, (size_t)d.Dv, BT, &w->gru2, d.Dv, H);
    nn_additive_keys_backward(denc, dw->att_wk, w->att_b ? dw->att_b : NULL, dkp, enc, w->att_wk, B, S, d.Dv, d.A);
}

size_t nn_cgru_step_scratch(int R, cgru_dims_t d) {
    return (size_t)R * (8 * d.H + d.H + d.A + d.O) + (d.ln ? 2 * (size_t)R * gru_lns(d.H) : 0);
}

void nn_cgru_step_forward(float *s, float *ctx, float *alpha, float *logits, float *scratch,
                          const float *e_prev, const float *s_prev, const float *kp,
                          const float *enc, const int *slen, const int *src_of_row,
                          const cgru_weights_t *w, int R, int S, cgru_dims_t d) {
    int H = d.H;
    size_t GL = nn_gru_gates_size((size_t)R, H, d.ln); /* a cell's gates (and normalization values) */
    float *g1 = scratch, *g2 = g1 + GL, *s1 = g2 + GL;
    float *qp = s1 + (size_t)R * H, *u = qp + (size_t)R * d.A;
    nn_gru_cell_forward(s1, g1, e_prev, s_prev, &w->gru1, R, d.E, H);
    nn_additive_attention_forward(ctx, d.Dv, qp, alpha, s1, H, kp, enc, slen, src_of_row, w->att_wq, w->att_v, R,
                                  1, S, H, d.A, d.Dv);
    nn_gru_cell_forward(s, g2, ctx, s1, &w->gru2, R, d.Dv, H);
    if (logits) deep_output_forward(u, logits, s, H, ctx, d.Dv, e_prev, d.E, R, w, d);
}

/* ------------------------------------------------------------ GNMT's attentive bottom decoder layer */

static void add_biases(float *g, size_t ldg, int M, const float *b1, const float *b2, int N) {
    if (!b1 && !b2) return;
#pragma omp parallel for schedule(static) if ((size_t)M * N >= RNN_PAR_MIN)
    for (int m = 0; m < M; m++) {
        float *r = g + (size_t)m * ldg;
        if (b1)
            for (int j = 0; j < N; j++) r[j] += b1[j];
        if (b2)
            for (int j = 0; j < N; j++) r[j] += b2[j];
    }
}

void nn_gnmt_dec_bottom_forward(const gnmt_dec_acts_t *a, const float *emb, const float *h0,
                                const float *c0, const float *enc, const int *slen,
                                const gnmt_dec_weights_t *w, int B, int T, int S, gnmt_dec_dims_t d) {
    int H = d.H, KI = d.E + d.Dv, BT = B * T;
    size_t G = (size_t)4 * H, ldg = (size_t)T * G, ldh = (size_t)T * H, ldc = (size_t)T * d.Dv;
    nn_additive_keys_forward(a->kp, enc, w->att_wk, w->att_b, B, S, d.Dv, d.A);
    /* e_t's share of the input projection and the biases: all steps, one GEMM */
    mm(0, 1, BT, 4 * H, d.E, emb, d.E, w->lstm.w_ih, KI, 0.0f, a->gates, (int)G);
    add_biases(a->gates, G, BT, w->lstm.b_ih, w->lstm.b_hh, 4 * H);
    for (int t = 0; t < T; t++) {
        const float *hp = t == 0 ? h0 : a->y + (size_t)(t - 1) * H;
        const float *cp = t == 0 ? c0 : a->cell + (size_t)(t - 1) * H;
        size_t ldp = t == 0 ? (size_t)H : ldh;
        float *ct = a->ctx + (size_t)t * d.Dv, *g = a->gates + (size_t)t * G;
        nn_additive_attention_forward(ct, (int)ldc, a->qp + (size_t)t * B * d.A, a->alpha + (size_t)t * B * S, hp,
                                      (int)ldp, a->kp, enc, slen, NULL, w->att_wq, w->att_v, B, 1, S, H, d.A, d.Dv);
        mm(0, 1, B, 4 * H, d.Dv, ct, (int)ldc, w->lstm.w_ih + d.E, KI, 1.0f, g, (int)ldg);
        lstm_hidden(g, ldg, hp, ldp, B, &w->lstm, H);
        lstm_act(a->y + (size_t)t * H, ldh, a->cell + (size_t)t * H, ldh, g, ldg, hp, ldp, cp, ldp, B, H, NULL, 0, w->lstm.clip);
    }
}

size_t nn_gnmt_dec_bottom_backward_scratch(int B, int T, int S, gnmt_dec_dims_t d) {
    return (size_t)B * T * 4 * d.H + (size_t)4 * B * d.H + (size_t)B * d.Dv + (size_t)2 * B * d.A +
           (size_t)B * S * d.A;
}

void nn_gnmt_dec_bottom_backward(float *demb, float *dh0, float *dc0, float *denc,
                                 const gnmt_dec_weights_t *dw, float *scratch, const float *dy,
                                 const float *dctx, const float *emb, const float *h0,
                                 const float *c0, const float *enc, const int *slen,
                                 const gnmt_dec_weights_t *w, const gnmt_dec_acts_t *a, int B,
                                 int T, int S, gnmt_dec_dims_t d) {
    int H = d.H, KI = d.E + d.Dv, BT = B * T;
    size_t G = (size_t)4 * H, ldg = (size_t)T * G, ldh = (size_t)T * H, ldc = (size_t)T * d.Dv, BH = (size_t)B * H;
    float *dg = scratch, *dh = dg + (size_t)BT * G, *dc = dh + BH, *ch = dc + BH, *cc = ch + BH;
    float *da = cc + BH, *datt = da + (size_t)B * d.Dv, *dkp = datt + (size_t)2 * B * d.A;
    memset(ch, 0, 2 * BH * sizeof(float));
    memset(dkp, 0, (size_t)B * S * d.A * sizeof(float));
    for (int t = T - 1; t >= 0; t--) {
        const float *hp = t == 0 ? h0 : a->y + (size_t)(t - 1) * H;
        const float *cp = t == 0 ? c0 : a->cell + (size_t)(t - 1) * H;
        size_t ldp = t == 0 ? (size_t)H : ldh;
        for (int b = 0; b < B; b++) {
            const float *d0 = dy + (size_t)b * ldh + (size_t)t * H;
            for (int j = 0; j < H; j++) dh[(size_t)b * H + j] = d0[j] + ch[(size_t)b * H + j];
        }
        memcpy(dc, cc, BH * sizeof(float));
        memset(ch, 0, 2 * BH * sizeof(float));
        float *dgt = dg + (size_t)t * G;
        lstm_act_back(dgt, ldg, ch, (size_t)H, cc, (size_t)H, dh, (size_t)H, dc, (size_t)H, a->gates + (size_t)t * G,
                      ldg, a->cell + (size_t)t * H, ldh, cp, ldp, B, H, NULL, 0, w->lstm.clip);
        mm(0, 0, B, H, 4 * H, dgt, (int)ldg, w->lstm.w_hh, H, 1.0f, ch, H);
        /* the context a_t: from the upper layers and from this layer's input */
        for (int b = 0; b < B; b++) {
            float *o = da + (size_t)b * d.Dv;
            if (dctx) memcpy(o, dctx + (size_t)b * ldc + (size_t)t * d.Dv, (size_t)d.Dv * sizeof(float));
            else memset(o, 0, (size_t)d.Dv * sizeof(float));
        }
        mm(0, 0, B, d.Dv, 4 * H, dgt, (int)ldg, w->lstm.w_ih + d.E, KI, 1.0f, da, d.Dv);
        /* the attention's query is the previous output (h0 at t = 0): its gradient joins the carry */
        nn_additive_attention_backward(hp ? ch : NULL, H, dw->att_wq, dw->att_v, dkp, denc, datt, da, d.Dv, hp,
                                       (int)ldp, a->qp + (size_t)t * B * d.A, a->kp, enc,
                                       a->alpha + (size_t)t * B * S, slen, NULL, w->att_wq, w->att_v, B, 1, S, H,
                                       d.A, d.Dv);
    }
    if (dh0)
        for (size_t i = 0; i < BH; i++) dh0[i] += ch[i];
    if (dc0)
        for (size_t i = 0; i < BH; i++) dc0[i] += cc[i];
    /* the weights' gradients of all steps at once */
    rec_weight_grad(dw->lstm.w_hh, dg, 4 * H, 4 * H, a->y, (size_t)H, h0, B, T, H, 0);
    if (w->lstm.b_hh) colsum_acc(dw->lstm.b_hh, dg, G, BT, 4 * H);
    if (w->lstm.b_ih) colsum_acc(dw->lstm.b_ih, dg, G, BT, 4 * H);
    if (demb) mm(0, 0, BT, d.E, 4 * H, dg, (int)G, w->lstm.w_ih, KI, 1.0f, demb, d.E);
    mm(1, 0, 4 * H, d.E, BT, dg, (int)G, emb, d.E, 1.0f, dw->lstm.w_ih, KI);
    mm(1, 0, 4 * H, d.Dv, BT, dg, (int)G, a->ctx, d.Dv, 1.0f, dw->lstm.w_ih + d.E, KI);
    nn_additive_keys_backward(denc, dw->att_wk, w->att_b ? dw->att_b : NULL, dkp, enc, w->att_wk, B, S, d.Dv, d.A);
}

size_t nn_gnmt_dec_bottom_step_scratch(int R, gnmt_dec_dims_t d) {
    return (size_t)R * (d.E + d.Dv + 4 * d.H + d.A);
}

void nn_gnmt_dec_bottom_step_forward(float *h, float *c, float *ctx, float *alpha, float *scratch,
                                     const float *e, const float *h_prev, const float *c_prev,
                                     const float *kp, const float *enc, const int *slen,
                                     const int *src_of_row, const gnmt_dec_weights_t *w, int R,
                                     int S, gnmt_dec_dims_t d) {
    int KI = d.E + d.Dv;
    float *x = scratch, *g = x + (size_t)R * KI, *qp = g + (size_t)R * 4 * d.H;
    nn_additive_attention_forward(ctx, d.Dv, qp, alpha, h_prev, d.H, kp, enc, slen, src_of_row, w->att_wq, w->att_v,
                                  R, 1, S, d.H, d.A, d.Dv);
    for (int r = 0; r < R; r++) {
        memcpy(x + (size_t)r * KI, e + (size_t)r * d.E, (size_t)d.E * sizeof(float));
        memcpy(x + (size_t)r * KI + d.E, ctx + (size_t)r * d.Dv, (size_t)d.Dv * sizeof(float));
    }
    nn_lstm_cell_forward(h, c, g, x, h_prev, c_prev, &w->lstm, R, KI, d.H);
}

/* ------------------------------------------------------------ the attention GRU's initial state */

void nn_gru_init_state_forward(float *s0, float *mean, const float *enc, const int *slen, const float *w_init,
                               const float *b_init, int N, int S, int Dv, int Hd) {
    for (int i = 0; i < N; i++) {
        float *m = mean + (size_t)i * Dv;
        int L = slen ? slen[i] : S;
        memset(m, 0, sizeof(float) * (size_t)Dv);
        for (int j = 0; j < L; j++) {
            const float *e = enc + ((size_t)i * S + j) * Dv;
            for (int k = 0; k < Dv; k++) m[k] += e[k];
        }
        float inv = L > 0 ? 1.0f / (float)L : 0.0f;
        for (int k = 0; k < Dv; k++) m[k] *= inv;
    }
    size_t l = (size_t)Dv;
    const float *mq = act_rows(mean, &l, N, Dv);
    gemm_f32(0, 1, N, Hd, Dv, 1.0f, mq, (int)l, w_init, Dv, 0.0f, s0, Hd);
    for (int i = 0; i < N; i++)
        for (int k = 0; k < Hd; k++) {
            float *x = s0 + (size_t)i * Hd + k;
            *x = tanhf(*x + (b_init ? b_init[k] : 0.0f));
        }
}

void nn_gru_init_state_backward(float *denc, float *dw_init, float *db_init, float *scratch, const float *ds0,
                                 const float *s0, const float *mean, const int *slen, const float *w_init, int N,
                                 int S, int Dv, int Hd) {
    float *dp = scratch;
    for (size_t i = 0; i < (size_t)N * Hd; i++) dp[i] = ds0[i] * (1.0f - s0[i] * s0[i]);
    size_t l = (size_t)Dv;
    const float *mq = act_rows(mean, &l, N, Dv);
    gemm_f32(1, 0, Hd, Dv, N, 1.0f, dp, Hd, mq, (int)l, 1.0f, dw_init, Dv);
    if (db_init)
        for (int i = 0; i < N; i++)
            for (int k = 0; k < Hd; k++) db_init[k] += dp[(size_t)i * Hd + k];
    if (!denc) return;
    for (int i = 0; i < N; i++) {
        int L = slen ? slen[i] : S;
        if (L <= 0) continue;
        /* dmean = dp · W_init / L, spread over the valid positions */
        float *dm = scratch + (size_t)N * Hd;
        gemm_f32(0, 0, 1, Dv, Hd, 1.0f / (float)L, dp + (size_t)i * Hd, Hd, w_init, Dv, 0.0f, dm, Dv);
        for (int j = 0; j < L; j++) {
            float *de = denc + ((size_t)i * S + j) * Dv;
            for (int k = 0; k < Dv; k++) de[k] += dm[k];
        }
    }
}
