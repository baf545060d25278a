/* test_rnn_gru.c — the GRU family (`architecture: "rnn-gru"`): the training forward against every
 * inference path, and bad model files.
 *
 * Parity (float32): random weights (biases included, uniform in [-0.5, 0.5]) of two shapes —
 * separate vocabularies and untied projection; joint vocabulary with shared embeddings and a tied
 * projection (aliases in the file) — written as a model file by the checkpoint writer's function
 * (model_dir_write_weights) and built by the inference family from the registry. For a padded
 * batch of B sentences the training table's teacher-forced log-probabilities (log of its softmax)
 * equal the inference step's log-softmax of the logits on every vocabulary entry of every valid
 * target position within 1e-4 (both float32, same layer functions; measured ~1e-6):
 *   - plain (row r = sentence r),
 *   - after set_rows with a repeated and a dropped row (parents {0, 0, 2, 3, ...}), the rows
 *     continuing their sentence's reference,
 *   - with a vocabulary map (set_vocab): the columns are the full step's columns of those ids.
 * The same three with int8 weights (TERN_COMPUTE_INT8: every matrix quantized per output row and
 * run by linear_forward): within TOL_INT8.
 * The attention rows the step writes sum to 1 over each row's source and are 0 past its length.
 *
 * Gradients (the whole model): the training table's float32 loss (label smoothing 0.1, a padded
 * batch; separate; shared + tied; dropout 0.3 on the embeddings and the deep output under fixed
 * keys) equals ref_gru_loss(), a double-precision transcription of the training forward (on
 * tests/c/ref_rnn.h's cells; the parameters read from a double copy of m->params at the float
 * tensors' offsets, so shared and tied tensors stay one; the dropout masks drawn by the model's
 * counter-based generator at its sites and keys, dropout_key(7, 3, site)), within MODEL_FWD_TOL
 * relative; and its backward equals central differences (h = 1e-5) of that reference for EVERY
 * entry of every stored tensor (1021 to 1373 per case): the error of a tensor,
 *     max_i |g_i - fd_i| / max(max_i |fd_i|, MODEL_FLOOR),
 * stays within MODEL_TOL. With dropout 0 a training forward gives exactly the evaluation
 * forward's loss.
 * Where the tolerances come from (u = 2^-24 = 6.0e-8, float32's unit roundoff):
 * - The reference's own error is negligible: a double central difference errs by h^2 |f'''| / 6
 *   (~1e-10 at h = 1e-5) plus the double loss's rounding over h (~1e-16 |L| / h, L ~ 18: ~2e-10);
 *   the worst errors below change by < 3e-7 from h = 1e-4 to 1e-6.
 * - So a check measures the float32 code's rounding: a float32 sum of K terms errs by at most
 *   K·u of the sum of the terms' magnitudes (Higham, eq. 3.5), an activation (the kernels' tanh;
 *   sigmoid = 0.5 + 0.5 tanh(x/2)) or a normalization (its mean and variance summed in double)
 *   by a few u, and the errors along a chain of dependent operations add. Here (E = 6, He = 5,
 *   Hd = 4, A = 3, O <= 7, V <= 11, B = 3, S = 5, T = 4) the longest forward chain is: 5 encoder
 *   cells, each one accumulated sum of the input and recurrent projections (K = 6 + 5): 55; the
 *   initial state's mean (5) and projection (Dv = 10): 15; 4 decoder steps of GRU1 (6 + 4),
 *   query (4), score (3), softmax (5), context (5) and GRU2 (10 + 4): 4 x 41 = 164; the deep
 *   output (Hd + Dv + E = 20), the projection (7) and the log-sum-exp (11): 38. Sum of K ~ 270,
 *   plus ~10 u per cell (13 cells) for the activations, ~8 u per cell for the normalizations
 *   and ~40 u for the attention's and the deep output's: ~550 u forward at most.
 *   Loss: ~550 u = 3.3e-5 of the logits' magnitude, which is within ~3x of the per-token loss
 *   (~2.3): MODEL_FWD_TOL = 1e-4.
 *   Gradients: the backward runs the chain back and ends in a sum over the B·T = 12 (B·S = 15)
 *   rows of a weight: 2·550 + 15 ~ 1100 u = 6.6e-5 of the terms' magnitudes, which stay within
 *   ~3x of the tensor's largest entry: 2e-4, hence MODEL_TOL = 2e-4.
 *   MODEL_FLOOR = 1e-2 (test_train_grad.c's) is 0.4-1% of the largest gradient here (0.95 to
 *   2.4); it matters only for the attention's query weight, whose gradient (max 2e-4 to 1.7e-3)
 *   is a sum of terms of the model's scale that cancel: measured against the floor, its absolute
 *   error must stay below MODEL_TOL·1e-2.
 * Measured (x86-64 AVX2, also under TERN_MAX_CPU_ISA=AVX2 with oneDNN and OpenBLAS capped alike):
 * loss 1.0e-9 to 6.1e-9 relative; gradients 4.8e-7 to 7.7e-7 (without the floor <= 5.6e-6) —
 * rounding errors add up like sqrt(1100)·u ~ 2e-6, not linearly; a wrong gradient term errs by
 * 1e-2 to 1. The former check differentiated the float32 loss itself (h = 1e-2, 4 entries per
 * tensor, tolerance 2e-2 (0.01 + |fd|)): the float32 loss noise over h and the O(h^2)
 * truncation set its bound, not the backward's error.
 *
 * Bad input: config keys that do not match the tensors, a missing recurrent tensor, and an
 * unknown architecture give errors naming the file and the tensor (or the architecture).
 *
 * The layer-normalized GRU (rnn/layer_norm = 1): the same whole-model gradient checks (separate;
 * shared + tied with dropout) and the same parity passes (float32 and int8, both shapes), and a
 * model missing a normalization tensor is refused naming it.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "ref_rnn.h"
#include "model/family.h"
#include "model/model_dir.h"
#include "model/rnn_gru_desc.h"
#include "nn/rnn.h"
#include "train/family.h"
#include "train/rnn_gru_train.h"

static uint64_t rs = 88172645463325252ull;
static double urand(void) {
    rs ^= rs << 13, rs ^= rs >> 7, rs ^= rs << 17;
    return (double)(rs >> 11) / 9007199254740992.0;
}

enum { B = 5, S = 7, T = 6 };
/* the whole-model gradient check (see the header) */
#define MODEL_FWD_TOL 1e-4
#define MODEL_TOL 2e-4
#define MODEL_FD_H 1e-5
#define MODEL_FLOOR 1e-2
/* int8 (every matrix per output row, activations per row) against the float32 training forward
 * on these random models (weights in [-0.5, 0.5], log-probs of ~20 entries): measured 0.0097 */
#define TOL_INT8 0.03

/* Writes m's tensors (+ scalars, aliases) as DIR/model.safetensors; skip: a tensor name not
 * written; scal_over: a config key index whose value is replaced by over_val (-1: none). */
static void write_model(const char *dir, const train_model_t *m, const char *skip, int scal_over, int over_val) {
    tensor_t t[64];
    train_model_views(m, m->params, t);
    int n = 0;
    for (int i = 0; i < m->n_tensors; i++)
        if (!skip || strcmp(t[i].name, skip)) t[n++] = t[i];
    const tensor_t *sc;
    int ns = m->family->scalars(m, &sc);
    static int32_t over;
    for (int i = 0; i < ns; i++) {
        t[n] = sc[i];
        if (i == scal_over) {
            over = over_val;
            t[n].data = &over;
        }
        n++;
    }
    const char *mk[] = {"ct2_spec"}, *mv[] = {RNN_GRU_SPEC_NAME};
    tern_status_t st = model_dir_write_weights(dir, t, n, m->alias_names, m->alias_targets, m->n_aliases, mk, mv, 1);
    CHECK_MSG(st == TERN_OK, "%s", tern_last_error());
}

static void log_softmax(float *x, int n) {
    double mx = x[0], s = 0;
    for (int i = 1; i < n; i++) mx = x[i] > mx ? x[i] : mx;
    for (int i = 0; i < n; i++) s += exp(x[i] - mx);
    double l = mx + log(s);
    for (int i = 0; i < n; i++) x[i] = (float)(x[i] - l);
}

static void parity(int joint, int ln, const char *dir) {
    const train_family_t *fam = train_family_find("rnn-gru");
    CHECK(fam == &train_family_rnn_gru);
    rnn_gru_config_t c;
    rnn_gru_default_config(&c);
    c.emb = 8, c.enc_hidden = 6, c.dec_hidden = 7, c.att = 5, c.out = joint ? 8 : 9;
    c.share_emb = joint, c.tie_proj = joint, c.dropout = 0, c.label_smoothing = 0;
    c.layer_norm = ln;
    int Vs = 23, Vt = joint ? 23 : 19, pad = 0;
    train_data_dims_t dd = {Vs, Vt, joint, pad, 64};
    train_model_t m;
    tern_status_t st = fam->create(&m, &c, &dd);
    CHECK_MSG(st == TERN_OK, "%s", tern_last_error());
    if (st) return;
    for (size_t i = 0; i < m.n_params; i++) m.params[i] = (float)(urand() - 0.5);
    /* a padded batch: lengths differ; tgt_in starts with the start token 1 */
    int slen[B] = {7, 3, 5, 1, 6}, tlen[B] = {6, 2, 4, 5, 1};
    int src[B * S], tin[B * T], tout[B * T];
    for (int b = 0; b < B; b++) {
        for (int j = 0; j < S; j++) src[b * S + j] = j < slen[b] ? 1 + (int)(urand() * (Vs - 1)) : pad;
        for (int t = 0; t < T; t++) {
            tout[b * T + t] = t < tlen[b] ? 1 + (int)(urand() * (Vt - 1)) : pad;
            tin[b * T + t] = t == 0 ? 1 : (t < tlen[b] ? tout[b * T + t - 1] : pad);
        }
    }
    void *ws = NULL;
    st = fam->ws_new(&ws, &m, B * S, B * T, S, T);
    CHECK(st == TERN_OK);
    train_loss_t loss;
    st = fam->forward(&m, ws, src, tin, tout, B, S, T, 0, 1, 0, &loss);
    CHECK(st == TERN_OK);
    const float *probs = rnn_gru_train_probs(ws);

    write_model(dir, &m, NULL, -1, 0);
    char path[512];
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    weights_t *w = NULL;
    st = weights_load_safetensors(&w, path);
    CHECK_MSG(st == TERN_OK, "%s", tern_last_error());
    model_config_t cfg;
    model_config_defaults(&cfg);
    snprintf(cfg.architecture, sizeof cfg.architecture, "rnn-gru");
    const model_family_t *inf = NULL;
    CHECK(model_family_find(&inf, &cfg, "config.json") == TERN_OK && inf == &model_family_rnn_gru);
    void *net = NULL;
    for (int q8 = 0; q8 < 2; q8++) {
    st = inf->build(&net, w, &cfg, q8 ? TERN_COMPUTE_INT8 : TERN_COMPUTE_FLOAT32, MODEL_BUILD_VOCAB_MAP);
    CHECK_MSG(st == TERN_OK, "%s", tern_last_error());
    tern_model_info_t info;
    memset(&info, 0, sizeof info);
    inf->describe(net, &info);
    CHECK_EQ_INT(info.source_vocab_size, Vs);
    CHECK_EQ_INT(info.target_vocab_size, Vt);
    CHECK_EQ_INT(info.int8, q8);
    CHECK_EQ_INT(tern_model_hparam(&info, "layer_norm", -1), ln);
    CHECK_EQ_INT(tern_model_hparam(&info, "decoder_hidden_size", -1), 7);
    double tol = q8 ? TOL_INT8 : 1e-4;
    void *state = inf->state_new(net);
    const int *sp[B];
    for (int b = 0; b < B; b++) sp[b] = src + b * S;

    /* 3 passes: plain; set_rows after step 1; a vocabulary map */
    for (int pass = 0; pass < 3; pass++) {
        double maxd = 0, attn_err = 0;
        st = inf->encode(state, sp, slen, B);
        CHECK(st == TERN_OK);
        CHECK_EQ_INT(inf->source_len(state), S);
        int R = B, sent[2 * B] = {0};
        for (int r = 0; r < R; r++) sent[r] = r;
        int ids[32], nid = 0;
        if (pass == 2) {
            for (int v = 0; v < Vt; v += 2) ids[nid++] = v;
            CHECK(inf->set_vocab(state, ids, nid) == TERN_OK);
        }
        float out[2 * B * 32], attn[2 * B * S];
        for (int t = 0; t < T; t++) {
            if (pass == 1 && t == 1) { /* repeat row 0, drop row 1, grow by one row (sentence 4 twice) */
                int parent[B + 1] = {0, 0, 2, 3, 4, 4};
                int ns[B + 1];
                for (int i = 0; i < B + 1; i++) ns[i] = sent[parent[i]];
                CHECK(inf->set_rows(state, parent, ns, B + 1) == TERN_OK);
                R = B + 1;
                memcpy(sent, ns, sizeof ns);
            }
            int tok[2 * B];
            for (int r = 0; r < R; r++) tok[r] = tin[sent[r] * T + t] == pad ? 2 : tin[sent[r] * T + t];
            st = inf->step(state, tok, t, out, attn);
            CHECK(st == TERN_OK);
            int V = pass == 2 ? nid : Vt;
            for (int r = 0; r < R; r++) {
                int b = sent[r];
                double as = 0;
                for (int j = 0; j < S; j++) {
                    if (j >= slen[b]) attn_err = fmax(attn_err, fabs(attn[r * S + j]));
                    as += attn[r * S + j];
                }
                attn_err = fmax(attn_err, fabs(as - 1.0));
                if (t >= tlen[b]) continue;
                if (pass == 2) { /* compare logits' differences (log-softmax over a subset shifts) */
                    float full[32];
                    for (int v = 0; v < Vt; v++) full[v] = logf(probs[((size_t)b * T + t) * Vt + v]);
                    for (int i = 1; i < nid; i++)
                        maxd = fmax(maxd, fabs((out[r * V + i] - out[r * V]) - (full[ids[i]] - full[ids[0]])));
                    continue;
                }
                log_softmax(out + r * V, V);
                for (int v = 0; v < Vt; v++)
                    maxd = fmax(maxd, fabs(out[r * V + v] - logf(probs[((size_t)b * T + t) * Vt + v])));
            }
        }
        if (pass == 2) CHECK(inf->set_vocab(state, NULL, 0) == TERN_OK);
        printf("rnn-gru parity (%s, %s%s, %s): max |log p_train - log p_step| = %.3g, attention row error %.3g\n",
               q8 ? "int8" : "float32", joint ? "joint, shared + tied" : "separate, untied", ln ? ", layer norm" : "",
               pass == 0 ? "plain" : pass == 1 ? "after set_rows" : "vocabulary map (logit differences)", maxd,
               attn_err);
        CHECK(maxd <= tol);
        CHECK(attn_err <= 1e-5);
    }
    inf->state_free(state);
    inf->free(net);
    }
    weights_free(w);
    fam->ws_free(ws);

    /* bad input */
    if (!joint && ln) { /* a layer-normalized model without one of its normalization tensors */
        const char *lt = "decoder/gru2/ln_hh/gain";
        write_model(dir, &m, lt, -1, 0);
        CHECK(weights_load_safetensors(&w, path) == TERN_OK);
        st = inf->build(&net, w, &cfg, TERN_COMPUTE_FLOAT32, 0);
        CHECK(st == TERN_ERR_FORMAT);
        CHECK_MSG(strstr(tern_last_error(), lt) && strstr(tern_last_error(), path), "%s", tern_last_error());
        printf("missing normalization tensor: %s\n", tern_last_error());
        weights_free(w);
    }
    if (!joint && !ln) {
        const char *rec = "decoder/gru1/w_hh";
        write_model(dir, &m, rec, -1, 0);
        CHECK(weights_load_safetensors(&w, path) == TERN_OK);
        st = inf->build(&net, w, &cfg, TERN_COMPUTE_FLOAT32, 0);
        CHECK(st != TERN_OK);
        CHECK_MSG(strstr(tern_last_error(), rec) && strstr(tern_last_error(), path), "%s", tern_last_error());
        printf("missing tensor: %s\n", tern_last_error());
        weights_free(w);
        write_model(dir, &m, NULL, RGKEY_DEC_HIDDEN, 11);
        CHECK(weights_load_safetensors(&w, path) == TERN_OK);
        st = inf->build(&net, w, &cfg, TERN_COMPUTE_FLOAT32, 0);
        CHECK(st == TERN_ERR_FORMAT);
        CHECK_MSG(strstr(tern_last_error(), path) && strstr(tern_last_error(), "decoder/init/weight"), "%s",
                  tern_last_error());
        printf("sizes: %s\n", tern_last_error());
        weights_free(w);
        snprintf(cfg.architecture, sizeof cfg.architecture, "rnn-lstm-x");
        st = model_family_find(&inf, &cfg, "/m/config.json");
        CHECK(st == TERN_ERR_UNSUPPORTED);
        CHECK_MSG(strstr(tern_last_error(), "/m/config.json") && strstr(tern_last_error(), "rnn-lstm-x"), "%s",
                  tern_last_error());
        printf("architecture: %s\n", tern_last_error());
    }
    fam->destroy(&m);
}

/* ------------------------------------------------------------ the double-precision reference
 * ref_gru_loss(): the training table's forward (rnn_gru_train.c) transcribed in double from the
 * definitions on ref_rnn.h's cells, reading the parameters from a double copy of m->params at the
 * float tensors' offsets (RG.t; shared and tied tensors: one array, as in the model):
 *   xs = dropout(Emb_s[src], site 0); enc = [GRU_f(xs); GRU_b(xs)] over each sentence's length
 *   L (the first padding, at least 1), zero initial states, states carried past L;
 *   s0 = tanh(W_init mean_{j<L} enc_j + b_init); xt = dropout(Emb_t[tgt_in], site 1);
 *   per step: s' = GRU1(xt_t, s), c = Att(W_q s'; W_k enc_j + b, j < L), s = GRU2(c, s'),
 *   u = tanh(W_s s + W_c c + W_e xt_t + b) (all B·T rows), u = dropout(u, site 2),
 *   logits = W_o u + b_o; label-smoothed cross-entropy summed over the non-padding targets.
 * Dropout: element i (flat index over the (B, T, ·) tensor) of a site is kept when
 * rng_bits32(dropout_key(seed, step, site), i) >= p·2^32 — the model's generator at its keys. */
static struct {
    const double *t[RG_COUNT]; /* every tensor (aliases: their target's), NULL when unused */
    int E, He, Hd, A, O, V, ln, pad;
    float p, eps;
    const int *src, *tin, *tout;
    int B, S, T;
    uint64_t seed, step;
} RG;

static rr_cell_t ref_cell(int wih, int cell) {
    rr_cell_t c = {RG.t[wih], RG.t[wih + 1], RG.t[wih + 2], RG.t[wih + 3], NULL, NULL, NULL, NULL};
    if (RG.ln) {
        int k = RG_LN_FIRST + 4 * cell;
        c.ig = RG.t[k], c.ib = RG.t[k + 1], c.hg = RG.t[k + 2], c.hb = RG.t[k + 3];
    }
    return c;
}

static double ref_gru_loss(void) {
    int B = RG.B, S = RG.S, T = RG.T, E = RG.E, He = RG.He, Hd = RG.Hd, Dv = 2 * He, A = RG.A, O = RG.O, V = RG.V;
    double xs[8 * 8 * 16], enc[8 * 8 * 32], xt[8 * 8 * 16], u[8 * 8 * 16], logits[8 * 8 * 32], kp[8 * 16];
    int slen[8];
    for (int b = 0; b < B; b++) {
        int L = 0;
        while (L < S && RG.src[b * S + L] != RG.pad) L++;
        slen[b] = L > 0 ? L : 1;
    }
    rr_embed(xs, RG.t[RG_ENC_EMB], RG.src, B * S, E, RG.pad);
    rr_dropout(xs, (size_t)B * S * E, RG.p, dropout_key(RG.seed, RG.step, 0));
    rr_seq(enc, Dv, xs, ref_cell(RG_ENC_F_WIH, 0), slen, B, S, E, He, 0, 0);
    rr_seq(enc + He, Dv, xs, ref_cell(RG_ENC_B_WIH, 1), slen, B, S, E, He, 1, 0);
    rr_embed(xt, RG.t[RG_DEC_EMB], RG.tin, B * T, E, RG.pad);
    rr_dropout(xt, (size_t)B * T * E, RG.p, dropout_key(RG.seed, RG.step, 1));
    rr_cell_t g1 = ref_cell(RG_GRU1_WIH, 2), g2 = ref_cell(RG_GRU2_WIH, 3);
    for (int b = 0; b < B; b++) {
        const double *eb = enc + (size_t)b * S * Dv;
        double mean[32] = {0}, s[16], s1[16], qp[16], c[32], tmp[16];
        for (int j = 0; j < slen[b]; j++)
            for (int k = 0; k < Dv; k++) mean[k] += eb[(size_t)j * Dv + k];
        for (int k = 0; k < Dv; k++) mean[k] /= slen[b];
        rr_lin(s, RG.t[RG_INIT_W], RG.t[RG_INIT_B], mean, Hd, Dv);
        for (int k = 0; k < Hd; k++) s[k] = tanh(s[k]);
        for (int j = 0; j < slen[b]; j++)
            rr_lin(kp + (size_t)j * A, RG.t[RG_ATT_WK], RG.t[RG_ATT_B], eb + (size_t)j * Dv, A, Dv);
        for (int t = 0; t < T; t++) {
            const double *e = xt + ((size_t)b * T + t) * E;
            double *ur = u + ((size_t)b * T + t) * O;
            rr_gru_cell(s1, e, s, g1, E, Hd);
            rr_lin(qp, RG.t[RG_ATT_WQ], NULL, s1, A, Hd);
            rr_att(c, qp, kp, eb, RG.t[RG_ATT_V], slen[b], A, Dv);
            rr_gru_cell(s, c, s1, g2, Dv, Hd);
            rr_lin(ur, RG.t[RG_OUT_WS], RG.t[RG_OUT_B], s, O, Hd);
            rr_lin(tmp, RG.t[RG_OUT_WC], NULL, c, O, Dv);
            for (int o = 0; o < O; o++) ur[o] += tmp[o];
            rr_lin(tmp, RG.t[RG_OUT_WE], NULL, e, O, E);
            for (int o = 0; o < O; o++) ur[o] = tanh(ur[o] + tmp[o]);
        }
    }
    rr_dropout(u, (size_t)B * T * O, RG.p, dropout_key(RG.seed, RG.step, 2));
    for (int r = 0; r < B * T; r++)
        rr_lin(logits + (size_t)r * V, RG.t[RG_PROJ_W], RG.t[RG_PROJ_B], u + (size_t)r * O, V, O);
    return rr_xent(logits, RG.tout, B * T, V, RG.eps, RG.pad);
}

/* The whole training table's float32 loss against ref_gru_loss(), and its backward against central
 * differences of the reference for EVERY entry of every stored tensor (label smoothing, padding,
 * shared/tied names accumulating into one tensor; dropout under fixed keys). */
static void grad_check(int joint, float dropout, int ln) {
    const train_family_t *fam = &train_family_rnn_gru;
    rnn_gru_config_t c;
    rnn_gru_default_config(&c);
    c.emb = 6, c.enc_hidden = 5, c.dec_hidden = 4, c.att = 3, c.out = joint ? 6 : 7;
    c.share_emb = joint, c.tie_proj = joint, c.dropout = dropout, c.label_smoothing = 0.1f;
    c.layer_norm = ln;
    int tr = dropout > 0;
    int Vs = 11, Vt = joint ? 11 : 9, pad = 0;
    train_data_dims_t dd = {Vs, Vt, joint, pad, 64};
    train_model_t m;
    CHECK(fam->create(&m, &c, &dd) == TERN_OK);
    for (size_t i = 0; i < m.n_params; i++) m.params[i] = (float)(urand() - 0.5);
    enum { GB = 3, GS = 5, GT = 4 };
    int slen[GB] = {5, 2, 4}, tlen[GB] = {4, 3, 1};
    int src[GB * GS], tin[GB * GT], tout[GB * GT];
    for (int b = 0; b < GB; b++) {
        for (int j = 0; j < GS; j++) src[b * GS + j] = j < slen[b] ? 1 + (int)(urand() * (Vs - 1)) : pad;
        for (int t = 0; t < GT; t++) {
            tout[b * GT + t] = t < tlen[b] ? 1 + (int)(urand() * (Vt - 1)) : pad;
            tin[b * GT + t] = t == 0 ? 1 : (t < tlen[b] ? tout[b * GT + t - 1] : pad);
        }
    }
    void *ws = NULL;
    CHECK(fam->ws_new(&ws, &m, GB * GS, GB * GT, GS, GT) == TERN_OK);
    train_loss_t L, L1, L0;
    /* dropout 0: the training forward is the evaluation forward, bit for bit; dropout > 0 changes it */
    fam->forward(&m, ws, src, tin, tout, GB, GS, GT, 1, 7, 3, &L1);
    fam->forward(&m, ws, src, tin, tout, GB, GS, GT, 0, 7, 3, &L0);
    if (!tr) CHECK_MSG(L1.loss == L0.loss, "dropout 0: training loss %.17g, evaluation %.17g", L1.loss, L0.loss);
    else CHECK(L1.loss != L0.loss);
    memset(m.grads, 0, m.n_params * sizeof(float));
    fam->forward(&m, ws, src, tin, tout, GB, GS, GT, tr, 7, 3, &L);
    fam->backward(&m, ws, 1.0f);
    /* the reference: every tensor at its offset in the double copy (aliases at their target's) */
    double *P = malloc(m.n_params * sizeof(double));
    for (size_t i = 0; i < m.n_params; i++) P[i] = m.params[i];
    memset(&RG, 0, sizeof RG);
    for (int i = 0; i < RG_COUNT; i++) RG.t[i] = rr_param(&m, P, rnn_gru_tensor_name((rg_tensor_t)i));
    if (joint) RG.t[RG_DEC_EMB] = RG.t[RG_ENC_EMB];
    if (joint) RG.t[RG_PROJ_W] = RG.t[RG_DEC_EMB];
    RG.E = c.emb, RG.He = c.enc_hidden, RG.Hd = c.dec_hidden, RG.A = c.att, RG.O = c.out, RG.V = Vt, RG.ln = ln;
    RG.pad = pad, RG.p = tr ? dropout : 0.0f, RG.eps = c.label_smoothing;
    RG.src = src, RG.tin = tin, RG.tout = tout, RG.B = GB, RG.S = GS, RG.T = GT, RG.seed = 7, RG.step = 3;
    CHECK(GB <= 8 && GS <= 8 && GT <= 8 && c.emb <= 16 && 2 * c.enc_hidden <= 32 && c.dec_hidden <= 16 &&
          c.att <= 16 && c.out <= 16 && Vt <= 32); /* the reference's arrays */
    for (int i = 0; i < RG_COUNT; i++)
        CHECK_MSG(!RG.t[i] == (i >= RG_LN_FIRST && !ln), "tensor %s", rnn_gru_tensor_name((rg_tensor_t)i));
    double lref = ref_gru_loss(), fwd = fabs(L.loss - lref) / fabs(lref);
    CHECK_MSG(fwd <= MODEL_FWD_TOL, "float32 loss %.9g, double reference %.9g (rel %.3e)", L.loss, lref, fwd);
    rr_grad_t g = rr_grad_check(&m, P, ref_gru_loss, NULL, MODEL_FD_H, MODEL_FLOOR);
    printf("rnn-gru gradients (%s, dropout %.1f%s): loss %.6g, rel %.1e; %zu entries of %d tensors: worst %.2e (%s) "
           "[without the floor %.2e (%s)]; max|fd| %.2g (%s) to %.2g\n",
           joint ? "shared + tied" : "separate", dropout, ln ? ", layer norm" : "", lref, fwd, g.n, m.n_tensors,
           g.worst, g.worst_name, g.worst_raw, g.worst_raw_name, g.gmin, g.gmin_name, g.gmax);
    CHECK_MSG(g.worst <= MODEL_TOL, "gradient error %.3e in %s", g.worst, g.worst_name);
    CHECK(g.gmax > 0.1); /* the gradients are not vanishing: the relative measure means something */
    /* the random stream the parity checks draw from stays as it was (4 draws per tensor here) */
    for (int i = 0; i < 4 * m.n_tensors; i++) (void)urand();
    free(P);
    fam->ws_free(ws);
    fam->destroy(&m);
}

/* bfloat16 compute (`--precision bfloat16`): the same model, parameters and batch (dropout on, the
 * same masks) in bfloat16 and float32; the loss within BF16_LOSS_TOL relative and every tensor's
 * gradient within BF16_GRAD_TOL (max |bf16 - f32| / max |f32| per tensor). Without AVX512_BF16 the
 * bfloat16 workspace is refused with TERN_ERR_UNSUPPORTED. */
#define BF16_LOSS_TOL 1e-2
#define BF16_GRAD_TOL 3e-2
static void bf16_check(int ln) {
    const train_family_t *fam = &train_family_rnn_gru;
    rnn_gru_config_t c;
    rnn_gru_default_config(&c);
    c.emb = 32, c.enc_hidden = 24, c.dec_hidden = 32, c.att = 16, c.out = 32;
    c.share_emb = 1, c.tie_proj = 1, c.dropout = 0.1f, c.label_smoothing = 0.1f, c.layer_norm = ln;
    int V = 50, pad = 0;
    train_data_dims_t dd = {V, V, 1, pad, 64};
    train_model_t m[2];
    void *ws[2] = {NULL, NULL};
    train_loss_t L[2];
    enum { QB = 6, QS = 9, QT = 8 };
    int src[QB * QS], tin[QB * QT], tout[QB * QT];
    for (int b = 0; b < QB; b++) {
        int sl = QS - b % 4, tl = QT - b % 3;
        for (int j = 0; j < QS; j++) src[b * QS + j] = j < sl ? 1 + (int)(urand() * (V - 1)) : pad;
        for (int t = 0; t < QT; t++) {
            tout[b * QT + t] = t < tl ? 1 + (int)(urand() * (V - 1)) : pad;
            tin[b * QT + t] = t == 0 ? 1 : (t < tl ? tout[b * QT + t - 1] : pad);
        }
    }
    for (int k = 0; k < 2; k++) {
        c.bf16 = k;
        CHECK(fam->create(&m[k], &c, &dd) == TERN_OK);
        fam->init_params(&m[k], 5);
        tern_status_t st = fam->ws_new(&ws[k], &m[k], QB * QS, QB * QT, QS, QT);
        if (k == 1 && st == TERN_ERR_UNSUPPORTED) {
            printf("rnn-gru bfloat16: this CPU has no AVX512_BF16; refused as it must be: %s\n", tern_last_error());
            fam->destroy(&m[1]);
            fam->ws_free(ws[0]);
            fam->destroy(&m[0]);
            return;
        }
        CHECK_MSG(st == TERN_OK, "%s", tern_last_error());
        memset(m[k].grads, 0, m[k].n_params * sizeof(float));
        CHECK(fam->forward(&m[k], ws[k], src, tin, tout, QB, QS, QT, 1, 3, 4, &L[k]) == TERN_OK);
        CHECK(fam->backward(&m[k], ws[k], 1.0f) == TERN_OK);
    }
    double le = fabs(L[1].loss - L[0].loss) / fabs(L[0].loss), worst = 0;
    const char *wn = "";
    for (int i = 0; i < m[0].n_tensors; i++) {
        const train_tensor_t *t = &m[0].tensors[i];
        double md = 0, mr = 0;
        for (size_t j = 0; j < t->numel; j++) {
            double a = m[1].grads[t->offset + j], r = m[0].grads[t->offset + j];
            md = fmax(md, fabs(a - r));
            mr = fmax(mr, fabs(r));
        }
        double e = mr > 0 ? md / mr : md;
        if (e > worst) worst = e, wn = t->name;
        CHECK_MSG(e <= BF16_GRAD_TOL, "bf16 gradient of %s: %.3g", t->name, e);
    }
    printf("rnn-gru bfloat16 vs float32%s: loss %.6f vs %.6f (rel %.2e), worst gradient max|diff|/max|ref| %.2e (%s)\n",
           ln ? " (layer norm)" : "", L[1].loss, L[0].loss, le, worst, wn);
    CHECK(le <= BF16_LOSS_TOL);
    CHECK(le > 0); /* the bfloat16 GEMMs did run */
    for (int k = 0; k < 2; k++) {
        fam->ws_free(ws[k]);
        fam->destroy(&m[k]);
    }
}

/* nn_additive_attention_heads_apply: 1 head is nn_additive_attention_apply; h heads are h separate
 * attentions, head i over its units and the encoder columns [i·Hh, (i+1)·Hh) of each direction
 * (the specification: each head run alone through nn_additive_attention_apply on copied slices). */
static void heads_check(void) {
    enum { R = 5, S = 7, A = 12, Dv = 24, B = 2 };
    float qp[R * A], kp[B * S * A], val[B * S * Dv], v[A];
    int klen[B] = {7, 4}, src[R] = {0, 1, 1, 0, 1};
    uint64_t key = 99;
    for (int i = 0; i < R * A; i++) qp[i] = (float)sin(0.37 * i + key);
    for (int i = 0; i < B * S * A; i++) kp[i] = (float)cos(0.23 * i);
    for (int i = 0; i < B * S * Dv; i++) val[i] = (float)sin(0.11 * i + 1.0);
    for (int i = 0; i < A; i++) v[i] = (float)cos(0.5 * i + 2.0);
    float ctx[R * Dv], al[R * S], scr[R * S], ctx1[R * Dv], al1[R * S];
    nn_additive_attention_heads_apply(ctx, Dv, al, scr, qp, kp, val, klen, src, v, R, S, A, Dv, 1);
    nn_additive_attention_apply(ctx1, Dv, al1, qp, kp, val, klen, src, v, R, 1, S, A, Dv);
    double e = 0;
    for (int i = 0; i < R * Dv; i++) e = fmax(e, fabs(ctx[i] - ctx1[i]));
    for (int i = 0; i < R * S; i++) e = fmax(e, fabs(al[i] - al1[i]));
    CHECK_MSG(e < 1e-6, "1 head: max |diff| %g", e);
    for (int h = 2; h <= 3; h++) {
        const int Ah = A / h, Hh = Dv / (2 * h);
        nn_additive_attention_heads_apply(ctx, Dv, al, scr, qp, kp, val, klen, src, v, R, S, A, Dv, h);
        float mean[R * S];
        memset(mean, 0, sizeof mean);
        e = 0;
        for (int i = 0; i < h; i++) {
            float q[R * A], k[B * S * A], x[B * S * Dv], c[R * Dv], a[R * S];
            for (int r = 0; r < R; r++) memcpy(q + r * Ah, qp + r * A + i * Ah, sizeof(float) * Ah);
            for (int j = 0; j < B * S; j++) {
                memcpy(k + j * Ah, kp + j * A + i * Ah, sizeof(float) * Ah);
                memcpy(x + j * 2 * Hh, val + j * Dv + i * Hh, sizeof(float) * Hh);
                memcpy(x + j * 2 * Hh + Hh, val + j * Dv + Dv / 2 + i * Hh, sizeof(float) * Hh);
            }
            nn_additive_attention_apply(c, 2 * Hh, a, q, k, x, klen, src, v + i * Ah, R, 1, S, Ah, 2 * Hh);
            for (int r = 0; r < R; r++) {
                for (int j = 0; j < Hh; j++) {
                    e = fmax(e, fabs(ctx[r * Dv + i * Hh + j] - c[r * 2 * Hh + j]));
                    e = fmax(e, fabs(ctx[r * Dv + Dv / 2 + i * Hh + j] - c[r * 2 * Hh + Hh + j]));
                }
                for (int j = 0; j < S; j++) mean[r * S + j] += a[r * S + j] / h;
            }
        }
        for (int i = 0; i < R * S; i++) e = fmax(e, fabs(al[i] - mean[i]));
        CHECK_MSG(e < 1e-6, "%d heads: max |diff| %g", h, e);
    }
}

int main(void) {
    heads_check();
    grad_check(0, 0.0f, 0);
    grad_check(1, 0.0f, 0);
    grad_check(0, 0.3f, 0);
    grad_check(0, 0.0f, 1);
    grad_check(1, 0.3f, 1);
    bf16_check(0);
    bf16_check(1);
    char dir[] = "/tmp/test_rnn_gru_XXXXXX";
    if (!mkdtemp(dir)) return 2;
    parity(0, 0, dir);
    parity(1, 0, dir);
    parity(0, 1, dir);
    parity(1, 1, dir);
    char p[600];
    snprintf(p, sizeof p, "%s/model.safetensors", dir);
    unlink(p);
    rmdir(dir);
    return check_report("test_rnn_gru");
}
