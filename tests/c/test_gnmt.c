/* test_gnmt.c — the GNMT family (architecture "gnmt"): training table, inference table, parity.
 *
 * For each shape (3+3 layers with shared embeddings; 1+2 layers, separate vocabularies and a tied
 * projection (the bidirectional layer is then the top encoder layer, Dv = 2H); 2+1 layers):
 *   1. the training table registered as "gnmt" creates and initializes the model (GNMT's uniform
 *      +-0.04 init: every parameter within it); with the weights scaled by 12 (far from uniform
 *      outputs), its float32 loss (no dropout, no label smoothing) equals ref_gnmt_loss(), a
 *      double-precision transcription of the training forward, within MODEL_FWD_TOL relative, and
 *      its backward equals central differences (h = 1e-5) of that reference for EVERY entry of
 *      every tensor within MODEL_TOL (below);
 *   2. the model written as a Tern model directory (model.safetensors with the description's
 *      names, aliases and config keys) builds through the registry (model_family_find with
 *      architecture "gnmt");
 *   3. parity: the training forward's log-probs (log-softmax of its logits) equal the inference
 *      step's for every valid (sentence, step) within 1e-4, float32, with the rows selected by
 *      set_rows between steps (rows repeated: 1 -> 2 and 3 rows; rows dropped and reordered);
 *      int8 (every matrix quantized per row): within 0.02 (measured 0.0011-0.0028);
 *      a second state restricted by set_vocab to the odd target ids writes those columns of the
 *      logits (within 1e-5), float32 and int8;
 *   4. the attention rows the step writes (coverage penalty) are distributions over each
 *      sentence's source (sum 1 within 1e-5, 0 past its length);
 *   5. bad input: a model directory with a tensor missing, and one whose config key disagrees with
 *      the tensors, fail to build with an error naming the file and the tensor.
 * Dropout (on the embeddings, on the input of every encoder and decoder layer above the first, and
 * before the softmax): with dropout 0 a training forward (train = 1) gives exactly the loss of the
 * evaluation forward; with dropout 0.3 and label smoothing 0.1 (3+3 and 4+4 layers, the latter with
 * residuals in both stacks) the same whole-model check as 1., the reference drawing the model's
 * masks (its counter-based generator at gnmt_table.c's sites, keys dropout_key(5, 9, site)).
 *
 * The whole-model check. The reference (ref_gnmt_loss, on tests/c/ref_rnn.h's cells) reads the
 * parameters from a double copy of m->params at the float tensors' offsets, so shared and tied
 * tensors stay one. The error of a gradient tensor is
 *     max_i |g_i - fd_i| / max(max_i |fd_i|, MODEL_FLOOR)
 * and EVERY entry is compared (1346 to 6963 per case).
 * Where the tolerances come from (u = 2^-24 = 6.0e-8, float32's unit roundoff):
 * - The reference's own error is negligible: a double central difference errs by h^2 |f'''| / 6
 *   (~1e-10 at h = 1e-5) plus the double loss's rounding over h (~1e-16 |L| / h, L ~ 47: ~5e-10);
 *   the worst errors below change by < 1e-6 from h = 1e-4 to 1e-6.
 * - So a check measures the float32 code's rounding: a float32 sum of K terms errs by at most
 *   K·u of the sum of the terms' magnitudes (Higham, eq. 3.5), an activation (the kernels' tanh;
 *   sigmoid = 0.5 + 0.5 tanh(x/2)) by a few u, and the errors along a chain of dependent
 *   operations add. Here (H <= 8, A <= 7, Dv <= 12, B = 3, S = 7, T = 6, V <= 23, up to 4+4
 *   layers) the longest forward chain is: the encoder's grid of cells, at most 7 + (Le - 1) + 6 =
 *   16 cells (the reverse direction down to position 0, then up the layers and along the source),
 *   each one accumulated sum of the input and recurrent projections (K <= 16 + 8): <= 384; the
 *   keys' projection, 12; the bottom decoder layer, 6 steps of query (8), score (7), softmax (7),
 *   context (7) and the LSTM's sum over [e; a; h] (<= 24): 6 x 53 = 318; <= 3 upper cells (<= 24
 *   each): 72; the projection (8) and the log-sum-exp (23): 31. Sum of K ~ 820, plus ~10 u per
 *   cell for its activations along the ~30 cells of the chain: ~1100 u forward.
 *   Loss: ~1100 u = 6.6e-5 of the logits' magnitude, which is within ~3x of the per-token loss
 *   (~3): MODEL_FWD_TOL = 2e-4.
 *   Gradients: the backward runs the chain back and ends in a sum over the B·T = 18 (B·S = 21)
 *   rows of a weight: 2·1100 + 21 ~ 2200 u = 1.3e-4 of the terms' magnitudes, which stay within
 *   ~3x of the tensor's largest entry: 4e-4, hence MODEL_TOL = 5e-4.
 *   MODEL_FLOOR = 1e-2 (test_train_grad.c's) is 0.4-0.7% of the largest gradient here (1.5 to
 *   2.4); it matters only for the attention's query weight, whose gradient (max 7.9e-6 to 2.4e-4)
 *   is a sum of terms of the model's scale that cancel: measured against the floor, its absolute
 *   error must stay below MODEL_TOL·1e-2.
 * Measured (x86-64 AVX2, also under TERN_MAX_CPU_ISA=AVX2 with oneDNN and OpenBLAS capped alike):
 * loss 1.9e-10 to 2.6e-9 relative; gradients 1.4e-7 to 5.0e-7 (without the floor <= 1.3e-4: the
 * query weight's, whose tiny entries there meet the reference's own rounding ~4e-10) — rounding
 * errors add up like sqrt(2200)·u ~ 3e-6, not linearly; a wrong gradient term errs by 1e-2 to 1.
 * The former check differentiated the float32 loss itself (h = 1e-2, 40 or 60 parameters,
 * tolerance 1e-3 + 3e-2 |fd|): the float32 loss noise over h and the O(h^2) truncation set its
 * bound, not the backward's error.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "ref_rnn.h"
#include "model/family.h"
#include "model/gnmt_desc.h"
#include "model/model_dir.h"
#include "tern.h"
#include "train/family.h"
#include "train/gnmt_table.h"

typedef struct {
    const char *label;
    int Vs, Vt, joint, H, A, Le, Ld, tie;
} shape_t;

enum { B = 3, S = 7, T = 6 };
/* the whole-model gradient check (see the header) */
#define MODEL_FWD_TOL 2e-4
#define MODEL_TOL 5e-4
#define MODEL_FD_H 1e-5
#define MODEL_FLOOR 1e-2
static const int SRC_LEN[B] = {5, 3, 7}, TGT_LEN[B] = {6, 4, 5};

static void log_softmax_row(double *out, const float *x, int V) {
    double mx = -INFINITY, s = 0;
    for (int j = 0; j < V; j++) mx = x[j] > mx ? x[j] : mx;
    for (int j = 0; j < V; j++) s += exp(x[j] - mx);
    for (int j = 0; j < V; j++) out[j] = x[j] - mx - log(s);
}

/* Writes the model as a directory; drop: a tensor left out; bad_hidden: the config key changed. */
static tern_status_t write_model(const char *dir, const train_model_t *m, const char *drop, int bad_hidden) {
    int n = m->n_tensors;
    const tensor_t *sc;
    int ns = m->family->scalars(m, &sc);
    tensor_t *t = calloc((size_t)(n + ns), sizeof *t);
    train_model_views(m, m->params, t);
    int k = 0;
    for (int i = 0; i < n; i++)
        if (!drop || strcmp(t[i].name, drop)) t[k++] = t[i];
    int32_t hid = 0;
    for (int i = 0; i < ns; i++) {
        t[k] = sc[i];
        if (bad_hidden && !strcmp(sc[i].name, "gnmt/hidden_size")) {
            hid = *(const int32_t *)sc[i].data + 1;
            t[k].data = &hid;
        }
        k++;
    }
    const char *mk[] = {"ct2_spec"}, *mv[] = {GNMT_SPEC_NAME};
    tern_status_t st = model_dir_write_weights(dir, t, k, m->alias_names, m->alias_targets, m->n_aliases, mk, mv, 1);
    free(t);
    return st;
}

/* ------------------------------------------------------------ the double-precision reference
 * ref_gnmt_loss(): the training table's forward (gnmt_table.c) transcribed in double from the
 * definitions on ref_rnn.h's cells, reading the parameters from a double copy of m->params at the
 * float tensors' offsets (shared and tied tensors: one array, as in the model):
 *   xs = dropout(E_src[src], site 1); encoder layer 0 = [LSTM_f(xs); LSTM_b(xs)] (B, S, 2H),
 *   layer l >= 1: h_l = LSTM_l(dropout(y_{l-1}, site 16 + l)), y_l = h_l (+ y_{l-1} from l = 2),
 *   every encoder LSTM over each sentence's length L (the last non-padding position + 1, at least
 *   1) from zero states, states carried past L; enc = y_{Le-1};
 *   xt = dropout(E_tgt[tgt_in], site 2); bottom decoder layer per step from zero states:
 *   a_t = Att(W_q y0_{t-1}; W_k enc_j + b, j < L), y0_t = LSTM_0([xt_t; a_t]);
 *   layer l >= 1: y_l = LSTM_l([dropout(y_{l-1}, site 80 + l); a]) (+ y_{l-1} from l = 2) over all
 *   T steps (no length: padded targets run and reach no loss);
 *   logits = W_p dropout(y_{Ld-1}, site 3) + b_p; label-smoothed cross-entropy over the
 *   non-padding targets.
 * Sites as gnmt_table.c numbers them (SITE_SRC 1, SITE_TGT 2, SITE_TOP 3, SITE_ENC 16,
 * SITE_DEC 16 + GN_MAX_LAYERS = 80); element i (flat index over the (B, ·, ·) tensor) is kept when
 * rng_bits32(dropout_key(seed, step, site), i) >= p·2^32 — the model's generator at its keys. */
enum { GS_SRC = 1, GS_TGT = 2, GS_TOP = 3, GS_ENC = 16, GS_DEC = 16 + 64 };

/* The reference runs in stages, each keeping its output: 0 the source embedding, 1 + l encoder
 * layer l, Le + 1 the decoder's bottom layer (keys' projection, target embedding, attention),
 * Le + 1 + l decoder layer l, Le + Ld + 1 the output layer and the loss. GR.from: the first stage
 * recomputed (the earlier ones' outputs are reused: ref_begin() fills them with the unperturbed
 * parameters before a tensor's differences, then starts from the first stage that reads it). */
static struct {
    int H, A, Le, Ld, Vt, pad;
    float p, eps;
    double *P;
    const double *enc_emb, *dec_emb, *wq, *wk, *ab, *av, *proj_w, *proj_b;
    rr_cell_t enc[9], dec[8]; /* enc[Le]: layer 0's reverse direction */
    const int *src, *tin, *tout;
    int B, S, T, from;
    uint64_t seed, step;
    double *buf; /* the stages' outputs and scratch */
} GR;

static double ref_gnmt_loss(void) {
    int B = GR.B, S = GR.S, T = GR.T, H = GR.H, A = GR.A, Le = GR.Le, Ld = GR.Ld, V = GR.Vt, from = GR.from;
    size_t BS = (size_t)B * S, BT = (size_t)B * T;
    double *xs = GR.buf, *ex[8], *p = xs + BS * H;
    for (int l = 0; l < Le; l++) ex[l] = p, p += BS * 2 * H;
    double *in = p, *kp = in + BS * 2 * H, *xt = kp + BS * A, *ctx = xt + BT * H, *dy[8];
    p = ctx + BT * 2 * H;
    for (int l = 0; l < Ld; l++) dy[l] = p, p += BT * H;
    double *dd = p, *din = dd + BT * H, *top = din + BT * 3 * H, *logits = top + BT * H;
    int slen[8];
    for (int b = 0; b < B; b++) {
        int n = 0;
        for (int s = 0; s < S; s++)
            if (GR.src[b * S + s] != GR.pad) n = s + 1;
        slen[b] = n > 0 ? n : 1;
    }
    /* encoder */
    if (from <= 0) {
        rr_embed(xs, GR.enc_emb, GR.src, (int)BS, H, GR.pad);
        rr_dropout(xs, BS * H, GR.p, dropout_key(GR.seed, GR.step, GS_SRC));
    }
    if (from <= 1) {
        rr_seq(ex[0], 2 * H, xs, GR.enc[0], slen, B, S, H, H, 0, 1);
        rr_seq(ex[0] + H, 2 * H, xs, GR.enc[Le], slen, B, S, H, H, 1, 1);
    }
    for (int l = 1; l < Le; l++) {
        int W = l == 1 ? 2 * H : H;
        if (from > 1 + l) continue;
        memcpy(in, ex[l - 1], BS * W * sizeof(double));
        rr_dropout(in, BS * W, GR.p, dropout_key(GR.seed, GR.step, GS_ENC + (uint64_t)l));
        rr_seq(ex[l], H, in, GR.enc[l], slen, B, S, W, H, 0, 1);
        if (l >= 2)
            for (size_t i = 0; i < BS * H; i++) ex[l][i] += ex[l - 1][i];
    }
    const double *enc = ex[Le - 1];
    int Dv = Le == 1 ? 2 * H : H;
    /* decoder: the attentive bottom layer, step by step */
    if (from <= Le + 1) {
        for (size_t r = 0; r < BS; r++) rr_lin(kp + r * A, GR.wk, GR.ab, enc + r * Dv, A, Dv);
        rr_embed(xt, GR.dec_emb, GR.tin, (int)BT, H, GR.pad);
        rr_dropout(xt, BT * H, GR.p, dropout_key(GR.seed, GR.step, GS_TGT));
        for (int b = 0; b < B; b++) {
            double h[RR_MAXH] = {0}, c[RR_MAXH] = {0}, hn[RR_MAXH], cn[RR_MAXH], qp[RR_MAXH], xin[3 * RR_MAXH];
            for (int t = 0; t < T; t++) {
                size_t r = (size_t)b * T + t;
                rr_lin(qp, GR.wq, NULL, h, A, H);
                rr_att(ctx + r * Dv, qp, kp + (size_t)b * S * A, enc + (size_t)b * S * Dv, GR.av, slen[b], A, Dv);
                memcpy(xin, xt + r * H, (size_t)H * sizeof(double));
                memcpy(xin + H, ctx + r * Dv, (size_t)Dv * sizeof(double));
                rr_lstm_cell(hn, cn, xin, h, c, GR.dec[0], H + Dv, H);
                memcpy(h, hn, (size_t)H * sizeof(double));
                memcpy(c, cn, (size_t)H * sizeof(double));
                memcpy(dy[0] + r * H, h, (size_t)H * sizeof(double));
            }
        }
    }
    /* the upper layers over [dropout(y_{l-1}); a] */
    for (int l = 1; l < Ld; l++) {
        if (from > Le + 1 + l) continue;
        memcpy(dd, dy[l - 1], BT * H * sizeof(double));
        rr_dropout(dd, BT * H, GR.p, dropout_key(GR.seed, GR.step, GS_DEC + (uint64_t)l));
        for (size_t r = 0; r < BT; r++) {
            memcpy(din + r * (H + Dv), dd + r * H, (size_t)H * sizeof(double));
            memcpy(din + r * (H + Dv) + H, ctx + r * Dv, (size_t)Dv * sizeof(double));
        }
        rr_seq(dy[l], H, din, GR.dec[l], NULL, B, T, H + Dv, H, 0, 1);
        if (l >= 2)
            for (size_t i = 0; i < BT * H; i++) dy[l][i] += dy[l - 1][i];
    }
    memcpy(top, dy[Ld - 1], BT * H * sizeof(double));
    rr_dropout(top, BT * H, GR.p, dropout_key(GR.seed, GR.step, GS_TOP));
    for (size_t r = 0; r < BT; r++) rr_lin(logits + r * V, GR.proj_w, GR.proj_b, top + r * H, V, H);
    return rr_xent(logits, GR.tout, (int)BT, V, GR.eps, GR.pad);
}

/* The first stage that reads the parameter at x. */
static int ref_stage(const double *x) {
    int Le = GR.Le, Ld = GR.Ld;
    if (x == GR.enc_emb) return 0;
    for (int l = 0; l <= Le; l++) {
        const rr_cell_t *c = &GR.enc[l];
        if (x == c->wih || x == c->whh || x == c->bih || x == c->bhh) return l == Le ? 1 : 1 + l;
    }
    for (int l = 0; l < Ld; l++) {
        const rr_cell_t *c = &GR.dec[l];
        if (x == c->wih || x == c->whh || x == c->bih || x == c->bhh) return Le + 1 + l;
    }
    if (x == GR.dec_emb || x == GR.wq || x == GR.wk || x == GR.ab || x == GR.av) return Le + 1;
    return Le + Ld + 1; /* the output layer */
}

static void ref_begin(const train_tensor_t *t) {
    GR.from = 0;
    (void)ref_gnmt_loss();
    GR.from = ref_stage(GR.P + t->offset);
}

static rr_cell_t ref_lstm(const train_model_t *m, double *P, gnmt_module_t mod, int l) {
    char n[4][96];
    for (int k = 0; k < 4; k++) gnmt_tensor_name(n[k], sizeof n[k], mod, l, (gnmt_part_t)k);
    rr_cell_t c = {rr_param(m, P, n[0]), rr_param(m, P, n[1]), rr_param(m, P, n[2]), rr_param(m, P, n[3]),
                   NULL, NULL, NULL, NULL};
    CHECK_MSG(c.wih && c.whh && c.bih && c.bhh, "%s: missing", n[0]);
    return c;
}

/* The float32 loss L (of the forward whose backward filled m->grads: train with dropout p under
 * (seed, step), label smoothing eps) against ref_gnmt_loss(), and every entry of every tensor's
 * gradient against central differences of the reference. */
static void model_check(const char *label, const shape_t *sh, const train_model_t *m, double loss, const int *src,
                        const int *tin, const int *tout, float p, float eps, uint64_t seed, uint64_t step) {
    CHECK(sh->Le <= 8 && sh->Ld <= 8 && B <= 8 && 4 * sh->H <= RR_MAXH); /* the reference's arrays */
    double *P = malloc(m->n_params * sizeof(double));
    for (size_t i = 0; i < m->n_params; i++) P[i] = m->params[i];
    memset(&GR, 0, sizeof GR);
    GR.H = sh->H, GR.A = sh->A, GR.Le = sh->Le, GR.Ld = sh->Ld, GR.Vt = sh->Vt, GR.pad = 0, GR.p = p, GR.eps = eps;
    char n[96];
    GR.enc_emb = rr_param(m, P, gnmt_tensor_name(n, sizeof n, GN_ENC_EMB, -1, GP_NONE));
    GR.dec_emb = sh->joint ? GR.enc_emb : rr_param(m, P, gnmt_tensor_name(n, sizeof n, GN_DEC_EMB, -1, GP_NONE));
    GR.wq = rr_param(m, P, gnmt_tensor_name(n, sizeof n, GN_ATT_WQ, -1, GP_NONE));
    GR.wk = rr_param(m, P, gnmt_tensor_name(n, sizeof n, GN_ATT_WK, -1, GP_NONE));
    GR.ab = rr_param(m, P, gnmt_tensor_name(n, sizeof n, GN_ATT_B, -1, GP_NONE));
    GR.av = rr_param(m, P, gnmt_tensor_name(n, sizeof n, GN_ATT_V, -1, GP_NONE));
    GR.proj_w = sh->tie ? GR.dec_emb : rr_param(m, P, gnmt_tensor_name(n, sizeof n, GN_PROJ_W, -1, GP_NONE));
    GR.proj_b = rr_param(m, P, gnmt_tensor_name(n, sizeof n, GN_PROJ_B, -1, GP_NONE));
    CHECK(GR.enc_emb && GR.dec_emb && GR.wq && GR.wk && GR.ab && GR.av && GR.proj_w && GR.proj_b);
    for (int l = 0; l < sh->Le; l++) GR.enc[l] = ref_lstm(m, P, GN_ENC_LSTM, l);
    GR.enc[sh->Le] = ref_lstm(m, P, GN_ENC_LSTM_REV, 0);
    for (int l = 0; l < sh->Ld; l++) GR.dec[l] = ref_lstm(m, P, GN_DEC_LSTM, l);
    GR.src = src, GR.tin = tin, GR.tout = tout, GR.B = B, GR.S = S, GR.T = T, GR.seed = seed, GR.step = step;
    GR.P = P;
    GR.buf = malloc(sizeof(double) * ((size_t)B * S * ((3 + 2 * (size_t)sh->Le) * sh->H + sh->A) +
                                      (size_t)B * T * ((9 + (size_t)sh->Ld) * sh->H + sh->Vt)));
    double lref = ref_gnmt_loss(), fwd = fabs(loss - lref) / fabs(lref);
    CHECK_MSG(fwd <= MODEL_FWD_TOL, "%s: float32 loss %.9g, double reference %.9g (rel %.3e)", label, loss, lref,
              fwd);
    rr_grad_t g = rr_grad_check(m, P, ref_gnmt_loss, ref_begin, MODEL_FD_H, MODEL_FLOOR);
    printf("%s: loss %.6g, rel %.1e; gradients, %zu entries of %d tensors: worst %.2e (%s) "
           "[without the floor %.2e (%s)]; "
           "max|fd| %.2g (%s) to %.2g\n", label, lref, fwd, g.n, m->n_tensors, g.worst, g.worst_name, g.worst_raw,
           g.worst_raw_name, g.gmin, g.gmin_name, g.gmax);
    CHECK_MSG(g.worst <= MODEL_TOL, "%s: gradient error %.3e in %s", label, g.worst, g.worst_name);
    CHECK(g.gmax > 0.1); /* the gradients are not vanishing: the relative measure means something */
    GR.from = 0;
    free(GR.buf);
    free(P);
}

static void run_shape(const shape_t *sh) {
    const train_family_t *fam = train_family_find("gnmt");
    CHECK(fam != NULL);
    if (!fam) return;
    gnmt_train_config_t cfg;
    fam->default_config(&cfg);
    cfg.hidden = sh->H, cfg.att = sh->A, cfg.enc_layers = sh->Le, cfg.dec_layers = sh->Ld;
    cfg.share_emb = -1, cfg.tie_proj = sh->tie, cfg.init_range = 0.04f, cfg.dropout = 0, cfg.label_smoothing = 0;
    train_data_dims_t dd = {sh->Vs, sh->Vt, sh->joint, 0, 64};
    train_model_t m;
    tern_status_t st = fam->create(&m, &cfg, &dd);
    CHECK_MSG(!st, "%s: create: %s", sh->label, tern_last_error());
    if (st) return;
    fam->init_params(&m, 7);
    /* GNMT's init: every parameter in [-0.04, 0.04] */
    float amax = 0;
    for (size_t i = 0; i < m.n_params; i++) amax = fabsf(m.params[i]) > amax ? fabsf(m.params[i]) : amax;
    CHECK_MSG(amax <= 0.04f && amax > 0.03f, "%s: max |param| %g", sh->label, amax);
    /* larger weights than the init so that the function is far from uniform */
    for (size_t i = 0; i < m.n_params; i++) m.params[i] *= 12.0f;

    int src[B * S], tin[B * T], tout[B * T];
    unsigned r = 12345;
    for (int b = 0; b < B; b++) {
        for (int s = 0; s < S; s++) src[b * S + s] = s < SRC_LEN[b] ? 1 + (int)((r = r * 1103515245u + 12345u) >> 16) % (sh->Vs - 1) : 0;
        for (int t = 0; t < T; t++) {
            tin[b * T + t] = t < TGT_LEN[b] ? 1 + (int)((r = r * 1103515245u + 12345u) >> 16) % (sh->Vt - 1) : 0;
            tout[b * T + t] = t < TGT_LEN[b] ? 1 + (int)((r = r * 1103515245u + 12345u) >> 16) % (sh->Vt - 1) : 0;
        }
    }
    void *ws = NULL;
    st = fam->ws_new(&ws, &m, B * S, B * T, S, T);
    CHECK(!st);
    if (st) return;

    /* 1. the loss against the double reference, every gradient against its central differences */
    train_loss_t L;
    memset(m.grads, 0, m.n_params * sizeof(float));
    CHECK(!fam->forward(&m, ws, src, tin, tout, B, S, T, 1, 1, 1, &L));
    CHECK(!fam->backward(&m, ws, 1.0f));
    model_check(sh->label, sh, &m, L.loss, src, tin, tout, 0.0f, 0.0f, 1, 1);

    /* the training forward's logits */
    CHECK(!gnmt_train_forward_logits(&m, ws, src, tin, B, S, T, 0, 0, 0));
    int V = sh->Vt;
    double *ref = malloc(sizeof *ref * (size_t)B * T * V), *lp = malloc(sizeof *lp * (size_t)V);
    const float *lg = gnmt_train_logits(ws);
    for (int i = 0; i < B * T; i++) log_softmax_row(ref + (size_t)i * V, lg + (size_t)i * V, V);

    /* 2. the model directory, through the registry */
    char dir[] = "/tmp/test_gnmt_XXXXXX";
    CHECK(mkdtemp(dir) != NULL);
    st = write_model(dir, &m, NULL, 0);
    CHECK_MSG(!st, "write: %s", tern_last_error());
    char path[512];
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    model_config_t mc;
    model_config_defaults(&mc);
    snprintf(mc.architecture, sizeof mc.architecture, "gnmt");
    const model_family_t *mf = NULL;
    CHECK(!model_family_find(&mf, &mc, "config.json") && mf == &model_family_gnmt);
    for (int q = 0; q < 2 && mf; q++) {
        weights_t *w = NULL;
        CHECK(!weights_load_safetensors(&w, path));
        void *net = NULL;
        st = mf->build(&net, w, &mc, q ? TERN_COMPUTE_INT8 : TERN_COMPUTE_FLOAT32, 0);
        CHECK_MSG(!st, "%s: build: %s", sh->label, tern_last_error());
        if (st) {
            weights_free(w);
            continue;
        }
        tern_model_info_t info;
        memset(&info, 0, sizeof info);
        mf->describe(net, &info);
        CHECK(!strcmp(info.family, "gnmt") && info.int8 == q && info.target_vocab_size == V);
        void *state = mf->state_new(net), *vstate = mf->state_new(net);
        const int *sp[B] = {src, src + S, src + 2 * S};
        CHECK(!mf->encode(state, sp, SRC_LEN, B));
        /* a second state restricted to the odd target ids (set_vocab), run in lockstep */
        int vids[64], nv = 0;
        for (int j = 1; j < V; j += 2) vids[nv++] = j;
        CHECK(!mf->encode(vstate, sp, SRC_LEN, B));
        CHECK(!mf->set_vocab(vstate, vids, nv));
        double vmax = 0;
        CHECK_EQ_INT(mf->source_len(state), S);
        /* rows: step 0 one per sentence; then [s0, s0, s1, s2, s2, s2]; from step 3 [s0(row1), s2, s2(row5), s0(row0)] */
        int rows[8] = {0, 1, 2}, R = B;
        float out[8 * 64], attn[8 * S];
        double maxd = 0, attn_err = 0;
        int attn_zero = 1;
        for (int t = 0; t < T; t++) {
            if (t == 1) {
                int parent[6] = {0, 0, 1, 2, 2, 2}, sent[6] = {0, 0, 1, 2, 2, 2};
                CHECK(!mf->set_rows(state, parent, sent, 6));
                CHECK(!mf->set_rows(vstate, parent, sent, 6));
                R = 6;
                memcpy(rows, sent, sizeof sent);
            } else if (t == 3) {
                int parent[4] = {1, 3, 5, 0}, sent[4] = {0, 2, 2, 0};
                CHECK(!mf->set_rows(state, parent, sent, 4));
                CHECK(!mf->set_rows(vstate, parent, sent, 4));
                R = 4;
                memcpy(rows, sent, sizeof sent);
            }
            int tok[8];
            for (int i = 0; i < R; i++) tok[i] = tin[rows[i] * T + t];
            CHECK(!mf->step(state, tok, t, out, attn));
            float vout[8 * 64];
            CHECK(!mf->step(vstate, tok, t, vout, NULL));
            for (int i = 0; i < R; i++)
                for (int j = 0; j < nv; j++) {
                    double dv = fabs(vout[i * nv + j] - out[(size_t)i * V + vids[j]]);
                    vmax = dv > vmax ? dv : vmax;
                }
            for (int i = 0; i < R; i++) {
                int b = rows[i];
                double sum = 0;
                for (int j = 0; j < S; j++) {
                    sum += attn[i * S + j];
                    if (j >= SRC_LEN[b] && attn[i * S + j] != 0.0f) attn_zero = 0;
                }
                attn_err = fabs(sum - 1) > attn_err ? fabs(sum - 1) : attn_err;
                if (t >= TGT_LEN[b]) continue;
                log_softmax_row(lp, out + (size_t)i * V, V);
                for (int j = 0; j < V; j++) {
                    double d = fabs(lp[j] - ref[((size_t)b * T + t) * V + j]);
                    maxd = d > maxd ? d : maxd;
                }
            }
        }
        printf("%s: %s step vs training forward: max |log-prob difference| %.3g\n", sh->label,
               q ? "int8" : "float32", maxd);
        if (q) CHECK_MSG(maxd <= 0.02, "%s int8: %g", sh->label, maxd);
        else CHECK_MSG(maxd <= 1e-4, "%s float32: %g", sh->label, maxd);
        CHECK_MSG(attn_err <= 1e-5 && attn_zero, "%s: attention rows: sum error %g, zero past the source %d",
                  sh->label, attn_err, attn_zero);
        CHECK_MSG(vmax <= 1e-5, "%s: set_vocab logits differ by %g", sh->label, vmax);
        mf->state_free(state);
        mf->state_free(vstate);
        mf->free(net);
        weights_free(w);
    }

    /* 5. bad input */
    if (mf) {
        const char *drop = "decoder/layer_0/weight_hh";
        for (int k = 0; k < 2; k++) {
            char bdir[] = "/tmp/test_gnmt_bad_XXXXXX";
            CHECK(mkdtemp(bdir) != NULL);
            CHECK(!write_model(bdir, &m, k == 0 ? drop : NULL, k == 1));
            char bp[512];
            snprintf(bp, sizeof bp, "%s/model.safetensors", bdir);
            weights_t *w = NULL;
            CHECK(!weights_load_safetensors(&w, bp));
            void *net = NULL;
            st = mf->build(&net, w, &mc, TERN_COMPUTE_FLOAT32, 0);
            const char *e = tern_last_error();
            CHECK_MSG(st != TERN_OK && net == NULL, "%s: bad model %d built", sh->label, k);
            CHECK_MSG(strstr(e, bp) != NULL && (k == 0 ? strstr(e, drop) != NULL : strstr(e, "tensor '") != NULL),
                      "%s: error '%s'", sh->label, e);
            printf("%s: bad model %d: %s\n", sh->label, k, e);
            weights_free(w);
            char cmd[600];
            snprintf(cmd, sizeof cmd, "rm -rf '%s'", bdir);
            CHECK(system(cmd) == 0);
        }
    }
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    CHECK(system(cmd) == 0);
    free(ref);
    free(lp);
    fam->ws_free(ws);
    fam->destroy(&m);
}

/* Dropout 0.3 under fixed masks: backward vs finite differences of the training forward. */
static void dropout_grad(const shape_t *sh) {
    const train_family_t *fam = train_family_find("gnmt");
    gnmt_train_config_t cfg;
    fam->default_config(&cfg);
    cfg.hidden = sh->H, cfg.att = sh->A, cfg.enc_layers = sh->Le, cfg.dec_layers = sh->Ld;
    cfg.share_emb = -1, cfg.tie_proj = sh->tie, cfg.init_range = 0.04f, cfg.label_smoothing = 0.1f;
    train_data_dims_t dd = {sh->Vs, sh->Vt, sh->joint, 0, 64};
    int src[B * S], tin[B * T], tout[B * T];
    unsigned r = 777;
    for (int b = 0; b < B; b++) {
        for (int s = 0; s < S; s++) src[b * S + s] = s < SRC_LEN[b] ? 1 + (int)((r = r * 1103515245u + 12345u) >> 16) % (sh->Vs - 1) : 0;
        for (int t = 0; t < T; t++) {
            tin[b * T + t] = t < TGT_LEN[b] ? 1 + (int)((r = r * 1103515245u + 12345u) >> 16) % (sh->Vt - 1) : 0;
            tout[b * T + t] = t < TGT_LEN[b] ? 1 + (int)((r = r * 1103515245u + 12345u) >> 16) % (sh->Vt - 1) : 0;
        }
    }
    for (int pass = 0; pass < 2; pass++) {
        cfg.dropout = pass ? 0.3f : 0.0f;
        train_model_t m;
        CHECK(!fam->create(&m, &cfg, &dd));
        fam->init_params(&m, 11);
        for (size_t i = 0; i < m.n_params; i++) m.params[i] *= 12.0f;
        void *ws = NULL;
        CHECK(!fam->ws_new(&ws, &m, B * S, B * T, S, T));
        train_loss_t L, L0;
        if (!pass) { /* dropout 0: the training forward is the evaluation forward, bit for bit */
            CHECK(!fam->forward(&m, ws, src, tin, tout, B, S, T, 1, 5, 9, &L));
            CHECK(!fam->forward(&m, ws, src, tin, tout, B, S, T, 0, 5, 9, &L0));
            CHECK_MSG(L.loss == L0.loss, "%s: dropout 0: training loss %.17g, evaluation %.17g", sh->label, L.loss,
                      L0.loss);
            printf("%s: dropout 0: training loss = evaluation loss (%.9g)\n", sh->label, L.loss);
            fam->ws_free(ws);
            fam->destroy(&m);
            continue;
        }
        memset(m.grads, 0, m.n_params * sizeof(float));
        CHECK(!fam->forward(&m, ws, src, tin, tout, B, S, T, 1, 5, 9, &L));
        CHECK(!fam->forward(&m, ws, src, tin, tout, B, S, T, 0, 5, 9, &L0));
        CHECK_MSG(L.loss != L0.loss, "%s: dropout 0.3 changes nothing", sh->label);
        CHECK(!fam->forward(&m, ws, src, tin, tout, B, S, T, 1, 5, 9, &L));
        CHECK(!fam->backward(&m, ws, 1.0f));
        char label[96];
        snprintf(label, sizeof label, "%s: dropout 0.3, label smoothing 0.1 (fixed masks)", sh->label);
        model_check(label, sh, &m, L.loss, src, tin, tout, 0.3f, 0.1f, 5, 9);
        fam->ws_free(ws);
        fam->destroy(&m);
    }
}

/* bfloat16 compute (`--precision bfloat16`) against float32: the same model, parameters and batch
 * (dropout 0.2, the same masks): loss within 1e-2 relative, every tensor's gradient within 3e-2
 * (max |bf16 - f32| / max |f32|). Without AVX512_BF16: the workspace is refused (UNSUPPORTED). */
static void bf16_check(const shape_t *sh) {
    const train_family_t *fam = train_family_find("gnmt");
    gnmt_train_config_t cfg;
    fam->default_config(&cfg);
    cfg.hidden = sh->H, cfg.att = sh->A, cfg.enc_layers = sh->Le, cfg.dec_layers = sh->Ld;
    cfg.share_emb = -1, cfg.tie_proj = sh->tie, cfg.dropout = 0.2f, cfg.label_smoothing = 0.1f;
    train_data_dims_t dd = {sh->Vs, sh->Vt, sh->joint, 0, 64};
    int src[B * S], tin[B * T], tout[B * T];
    unsigned r = 4242;
    for (int b = 0; b < B; b++) {
        for (int s = 0; s < S; s++) src[b * S + s] = s < SRC_LEN[b] ? 1 + (int)((r = r * 1103515245u + 12345u) >> 16) % (sh->Vs - 1) : 0;
        for (int t = 0; t < T; t++) {
            tin[b * T + t] = t < TGT_LEN[b] ? 1 + (int)((r = r * 1103515245u + 12345u) >> 16) % (sh->Vt - 1) : 0;
            tout[b * T + t] = t < TGT_LEN[b] ? 1 + (int)((r = r * 1103515245u + 12345u) >> 16) % (sh->Vt - 1) : 0;
        }
    }
    train_model_t m[2];
    void *ws[2] = {NULL, NULL};
    train_loss_t L[2];
    for (int k = 0; k < 2; k++) {
        cfg.bf16 = k;
        CHECK(!fam->create(&m[k], &cfg, &dd));
        fam->init_params(&m[k], 3);
        tern_status_t st = fam->ws_new(&ws[k], &m[k], B * S, B * T, S, T);
        if (k == 1 && st == TERN_ERR_UNSUPPORTED) {
            printf("%s: bfloat16: no AVX512_BF16 on this CPU; refused as it must be: %s\n", sh->label, tern_last_error());
            fam->destroy(&m[1]);
            fam->ws_free(ws[0]);
            fam->destroy(&m[0]);
            return;
        }
        CHECK_MSG(!st, "%s", tern_last_error());
        memset(m[k].grads, 0, m[k].n_params * sizeof(float));
        CHECK(!fam->forward(&m[k], ws[k], src, tin, tout, B, S, T, 1, 2, 6, &L[k]));
        CHECK(!fam->backward(&m[k], ws[k], 1.0f));
    }
    double le = fabs(L[1].loss - L[0].loss) / fabs(L[0].loss), worst = 0;
    const char *wn = "";
    for (int i = 0; i < m[0].n_tensors; i++) {
        const train_tensor_t *t = &m[0].tensors[i];
        double md = 0, mr = 0;
        for (size_t j = 0; j < t->numel; j++) {
            double a = m[1].grads[t->offset + j], g = m[0].grads[t->offset + j];
            md = fmax(md, fabs(a - g));
            mr = fmax(mr, fabs(g));
        }
        double e = mr > 0 ? md / mr : md;
        if (e > worst) worst = e, wn = t->name;
        CHECK_MSG(e <= 3e-2, "%s: bf16 gradient of %s: %.3g", sh->label, t->name, e);
    }
    printf("%s: bfloat16 vs float32: loss %.6f vs %.6f (rel %.2e), worst gradient max|diff|/max|ref| %.2e (%s)\n",
           sh->label, L[1].loss, L[0].loss, le, worst, wn);
    CHECK(le <= 1e-2 && le > 0);
    for (int k = 0; k < 2; k++) {
        fam->ws_free(ws[k]);
        fam->destroy(&m[k]);
    }
}

/* GNMT's clip schedule (gnmt_clip_delta_at: linear from clip_delta_start to clip_delta over
 * clip_anneal micro-batches) in closed form, and the training forward at micro-batch s clipping at
 * δ(s): its loss equals that of a model of the same weights clipping at the constant δ(s). */
static void clip_schedule(const shape_t *sh) {
    gnmt_train_config_t c = {0};
    c.clip_delta = 1.0f, c.clip_delta_start = 8.0f, c.clip_anneal = 100;
    CHECK(gnmt_clip_delta_at(&c, 0) == 8.0f);
    CHECK(fabsf(gnmt_clip_delta_at(&c, 50) - 4.5f) < 1e-6f);
    CHECK(fabsf(gnmt_clip_delta_at(&c, 90) - 1.7f) < 1e-6f);
    CHECK(gnmt_clip_delta_at(&c, 100) == 1.0f && gnmt_clip_delta_at(&c, 1000) == 1.0f);
    c.clip_anneal = 0;
    CHECK(gnmt_clip_delta_at(&c, 0) == 1.0f);
    c.clip_delta = 0;
    CHECK(gnmt_clip_delta_at(&c, 0) == 0.0f);

    const train_family_t *fam = train_family_find("gnmt");
    gnmt_train_config_t a;
    fam->default_config(&a);
    a.hidden = sh->H, a.att = sh->A, a.enc_layers = sh->Le, a.dec_layers = sh->Ld;
    a.share_emb = -1, a.tie_proj = sh->tie, a.init_range = 0.04f, a.dropout = 0, a.label_smoothing = 0;
    a.clip_delta = 1.0f, a.clip_delta_start = 3.0f, a.clip_anneal = 10;
    gnmt_train_config_t b = a;
    b.clip_anneal = 0;
    train_data_dims_t dd = {sh->Vs, sh->Vt, sh->joint, 0, 64};
    train_model_t ma, mb;
    if (fam->create(&ma, &a, &dd)) {
        CHECK_MSG(0, "create: %s", tern_last_error());
        return;
    }
    if (fam->create(&mb, &b, &dd)) {
        CHECK_MSG(0, "create: %s", tern_last_error());
        fam->destroy(&ma);
        return;
    }
    fam->init_params(&ma, 7);
    for (size_t i = 0; i < ma.n_params; i++) ma.params[i] *= 30.0f; /* cell states beyond 1 */
    memcpy(mb.params, ma.params, ma.n_params * sizeof(float));
    int src[B * S], tin[B * T], tout[B * T];
    unsigned r = 999;
    for (int i = 0; i < B * S; i++) src[i] = 1 + (int)((r = r * 1103515245u + 12345u) >> 16) % (sh->Vs - 1);
    for (int i = 0; i < B * T; i++) tin[i] = 1 + (int)((r = r * 1103515245u + 12345u) >> 16) % (sh->Vt - 1);
    for (int i = 0; i < B * T; i++) tout[i] = 1 + (int)((r = r * 1103515245u + 12345u) >> 16) % (sh->Vt - 1);
    void *wa = NULL, *wb = NULL;
    CHECK(!fam->ws_new(&wa, &ma, B * S, B * T, S, T) && !fam->ws_new(&wb, &mb, B * S, B * T, S, T));
    double prev = 0;
    for (int step = 0; wa && wb && step <= 12; step += 3) {
        train_loss_t la, lb;
        CHECK(!fam->forward(&ma, wa, src, tin, tout, B, S, T, 1, 1, (uint64_t)step, &la));
        /* b: constant δ(step) (a fresh model of that δ) */
        gnmt_train_config_t bc = b;
        bc.clip_delta = gnmt_clip_delta_at(&a, (uint64_t)step);
        train_model_t mc;
        if (fam->create(&mc, &bc, &dd)) break;
        memcpy(mc.params, ma.params, ma.n_params * sizeof(float));
        CHECK(!fam->forward(&mc, wb, src, tin, tout, B, S, T, 0, 0, 0, &lb));
        CHECK_MSG(la.loss == lb.loss, "clip schedule step %d: loss %.9g, constant delta %g gives %.9g", step, la.loss,
                  (double)bc.clip_delta, lb.loss);
        if (step) CHECK_MSG(la.loss != prev, "step %d: the annealed clip does not change the loss", step);
        prev = la.loss;
        fam->destroy(&mc);
    }
    if (wa) fam->ws_free(wa);
    if (wb) fam->ws_free(wb);
    fam->destroy(&ma);
    fam->destroy(&mb);
}

int main(void) {
    static const shape_t shapes[] = {
        {"3+3 shared", 23, 23, 1, 8, 6, 3, 3, 0},
        {"1+2 separate tied", 19, 21, 0, 6, 5, 1, 2, 1},
        {"2+1 shared tied", 17, 17, 1, 5, 7, 2, 1, 1},
    };
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) run_shape(&shapes[i]);
    static const shape_t deep = {"4+4 shared (residuals)", 23, 23, 1, 8, 6, 4, 4, 0};
    dropout_grad(&shapes[0]);
    dropout_grad(&deep);
    bf16_check(&shapes[0]);
    bf16_check(&deep);
    clip_schedule(&deep);
    return check_report("test_gnmt");
}
