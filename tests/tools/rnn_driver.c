/* rnn_driver.c — runs one recurrent layer's forward and backward from files, for
 * tests/test_rnn_torch.py (compared with tests/tools/rnn_torch_ref.py, PyTorch).
 *
 *   rnn_driver IN.safetensors OUT.safetensors
 *
 * IN: metadata "layer" (gru, lstm, bigru, bilstm, gnmt, attention, cgru, gnmt_dec), "reverse" (0/1)
 * and the dimensions (B T K H; gnmt: L bi; attention: B Tq S Dq A Dv; cgru: B T S H E Dv A O V;
 * gnmt_dec: B T S H E Dv A; its output is [y (B, T, H), ctx (B, T, Dv)] flattened); float32
 * tensors: the inputs and parameters under the names listed per layer below, "R" (the loss
 * weights: loss = Σ out ⊙ R, so dout = R); int32 tensors "len" (B) (sequence lengths; attention
 * and cgru: source lengths).
 * OUT: "out" (the layer's output) and "grad/<name>" for every float input and parameter.
 */
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/weights.h"
#include "nn/rnn.h"

#define MAXT 64

static struct {
    const char *name[MAXT];
    float *val[MAXT], *grad[MAXT];
    int64_t shape[MAXT][TENSOR_MAX_RANK];
    int rank[MAXT];
    size_t n[MAXT];
    int count;
} TT;

static const weights_t *g_w;

static double meta(const char *key, double dflt) {
    const char *v = weights_metadata(g_w, key);
    return v ? atof(v) : dflt;
}

static int find(const char *name) {
    for (int i = 0; i < TT.count; i++)
        if (!strcmp(TT.name[i], name)) return i;
    return -1;
}

/* The value (or, with grad, the gradient buffer) of a float tensor; exits when absent. */
static float *V(const char *name) {
    int i = find(name);
    if (i < 0) {
        fprintf(stderr, "rnn_driver: tensor %s missing\n", name);
        exit(1);
    }
    return TT.val[i];
}
static float *Gd(const char *name) {
    V(name);
    return TT.grad[find(name)];
}
/* Optional (NULL when absent). */
static float *Vo(const char *name) { return find(name) >= 0 ? TT.val[find(name)] : NULL; }
static float *Go(const char *name) { return find(name) >= 0 ? TT.grad[find(name)] : NULL; }

/* A cell's tensors; a GRU cell with "<prefix>ln_ih.gain" (and ln_ih.bias, ln_hh.gain, ln_hh.bias)
 * is layer-normalized. */
static rnn_cell_t cell(const char *prefix, int grad) {
    char n[8][64];
    const char *s[8] = {"w_ih", "w_hh", "b_ih", "b_hh", "ln_ih.gain", "ln_ih.bias", "ln_hh.gain", "ln_hh.bias"};
    for (int k = 0; k < 8; k++) snprintf(n[k], sizeof n[k], "%s%s", prefix, s[k]);
    rnn_cell_t c;
    if (grad) c = (rnn_cell_t){.w_ih = Gd(n[0]), .w_hh = Gd(n[1]), .b_ih = Go(n[2]), .b_hh = Go(n[3])};
    else c = (rnn_cell_t){.w_ih = V(n[0]), .w_hh = V(n[1]), .b_ih = Vo(n[2]), .b_hh = Vo(n[3])};
    if (find(n[4]) >= 0) {
        float *(*get)(const char *) = grad ? Gd : V;
        c.ln_ih_g = get(n[4]), c.ln_ih_b = get(n[5]), c.ln_hh_g = get(n[6]), c.ln_hh_b = get(n[7]);
    }
    return c;
}

static float *zeros(size_t n) { return calloc(n ? n : 1, sizeof(float)); }

int main(int argc, char **argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: rnn_driver IN.safetensors OUT.safetensors\n");
        return 2;
    }
    weights_t *w;
    if (weights_load_safetensors(&w, argv[1])) {
        fprintf(stderr, "rnn_driver: %s\n", tern_last_error());
        return 1;
    }
    g_w = w;
    const int *len = NULL;
    for (int i = 0; i < weights_count(w); i++) {
        const tensor_t *t = weights_at(w, i);
        if (t->dtype == DT_I32 && !strcmp(t->name, "len")) len = t->data;
        if (t->dtype != DT_F32) continue;
        int k = TT.count++;
        TT.name[k] = t->name;
        TT.n[k] = (size_t)t->numel;
        TT.val[k] = malloc(TT.n[k] * sizeof(float));
        memcpy(TT.val[k], t->data, TT.n[k] * sizeof(float));
        TT.grad[k] = zeros(TT.n[k]);
        TT.rank[k] = t->rank;
        memcpy(TT.shape[k], t->shape, sizeof t->shape);
    }
    const char *layer = weights_metadata(w, "layer");
    if (!layer) {
        fprintf(stderr, "rnn_driver: no layer in metadata\n");
        return 1;
    }
    int B = (int)meta("B", 0), T = (int)meta("T", 0), K = (int)meta("K", 0), H = (int)meta("H", 0);
    int rev = (int)meta("reverse", 0);
    const float *R = V("R");
    float *out = NULL;
    size_t nout = 0;
    size_t BT = (size_t)B * T;

    if (!strcmp(layer, "gru") || !strcmp(layer, "lstm") || !strcmp(layer, "bigru") || !strcmp(layer, "bilstm")) {
        int lstm = strstr(layer, "lstm") != NULL, bi = layer[0] == 'b';
        int W = bi ? 2 * H : H;
        nout = BT * W;
        out = zeros(nout);
        float *gf = zeros(nn_gru_gates_size(BT, H, 1)), *gb = zeros(nn_gru_gates_size(BT, H, 1));
        float *cf = zeros(BT * H), *cb = zeros(BT * H);
        float *scr = zeros(lstm ? nn_lstm_backward_scratch(B, T, H) : nn_gru_backward_scratch(B, T, H, 1));
        if (bi) {
            rnn_cell_t wf = cell("fwd.", 0), wb = cell("bwd.", 0), dwf = cell("fwd.", 1), dwb = cell("bwd.", 1);
            if (lstm) {
                nn_bilstm_forward(out, cf, cb, gf, gb, V("inp"), &wf, &wb, len, B, T, K, H);
                nn_bilstm_backward(Gd("inp"), &dwf, &dwb, scr, R, V("inp"), &wf, &wb, out, cf, cb, gf, gb, len, B,
                                   T, K, H);
            } else {
                nn_bigru_forward(out, gf, gb, V("inp"), &wf, &wb, len, B, T, K, H);
                nn_bigru_backward(Gd("inp"), &dwf, &dwb, scr, R, V("inp"), &wf, &wb, out, gf, gb, len, B, T, K, H);
            }
        } else {
            rnn_cell_t wc = cell("", 0), dwc = cell("", 1);
            if (lstm) {
                nn_lstm_forward(out, H, cf, gf, V("inp"), V("h0"), V("c0"), &wc, len, B, T, K, H, rev);
                nn_lstm_backward(Gd("inp"), Gd("h0"), Gd("c0"), &dwc, scr, R, H, V("inp"), V("h0"), V("c0"), &wc,
                                 out, cf, gf, len, B, T, K, H, rev);
            } else {
                nn_gru_forward(out, H, gf, V("inp"), V("h0"), &wc, len, B, T, K, H, rev);
                nn_gru_backward(Gd("inp"), Gd("h0"), &dwc, scr, R, H, V("inp"), V("h0"), &wc, out, gf, len, B, T,
                                K, H, rev);
            }
        }
        free(gf), free(gb), free(cf), free(cb), free(scr);
    } else if (!strcmp(layer, "gnmt")) {
        int L = (int)meta("L", 2), bi = (int)meta("bi", 1), dirs = bi ? 2 : 1;
        float *h[16], *y[16], *c[16], *g[16];
        rnn_cell_t wc[17], dwc[17];
        for (int l = 0; l < L; l++) {
            int d = l == 0 ? dirs : 1;
            h[l] = zeros(BT * d * H), y[l] = l >= 2 ? zeros(BT * H) : NULL;
            c[l] = zeros(d * BT * H), g[l] = zeros(d * BT * 4 * H);
        }
        for (int l = 0; l < L + (bi ? 1 : 0); l++) {
            char p[32];
            snprintf(p, sizeof p, l == L ? "layer_0.bwd." : "layer_%d.", l);
            wc[l] = cell(p, 0), dwc[l] = cell(p, 1);
        }
        gnmt_encoder_acts_t acts = {h, y, c, g, NULL, 0.0f, NULL};
        nn_gnmt_encoder_forward(&acts, V("inp"), wc, len, B, T, K, H, L, bi);
        float *scr = zeros(nn_gnmt_encoder_backward_scratch(B, T, H, bi));
        nn_gnmt_encoder_backward(Gd("inp"), dwc, scr, R, &acts, V("inp"), wc, len, B, T, K, H, L, bi);
        nout = BT * (L == 1 ? dirs * H : H);
        out = zeros(nout);
        memcpy(out, nn_gnmt_encoder_output(&acts, L), nout * sizeof(float));
        free(scr);
        for (int l = 0; l < L; l++) free(h[l]), free(y[l]), free(c[l]), free(g[l]);
    } else if (!strcmp(layer, "attention")) {
        int Tq = (int)meta("Tq", 1), S = (int)meta("S", 0), Dq = (int)meta("Dq", 0), A = (int)meta("A", 0);
        int Dv = (int)meta("Dv", 0), Rr = B * Tq;
        float *kp = zeros((size_t)B * S * A), *qp = zeros((size_t)Rr * A), *al = zeros((size_t)Rr * S);
        float *dkp = zeros((size_t)B * S * A), *scr = zeros((size_t)2 * Rr * A);
        nout = (size_t)Rr * Dv;
        out = zeros(nout);
        nn_additive_keys_forward(kp, V("keys"), V("W_k"), Vo("b"), B, S, Dv, A);
        nn_additive_attention_forward(out, Dv, qp, al, V("q"), Dq, kp, V("keys"), len, NULL, V("W_q"), V("v"), Rr,
                                      Tq, S, Dq, A, Dv);
        nn_additive_attention_backward(Gd("q"), Dq, Gd("W_q"), Gd("v"), dkp, Gd("keys"), scr, R, Dv, V("q"), Dq, qp,
                                       kp, V("keys"), al, len, NULL, V("W_q"), V("v"), Rr, Tq, S, Dq, A, Dv);
        nn_additive_keys_backward(Gd("keys"), Gd("W_k"), Go("b"), dkp, V("keys"), V("W_k"), B, S, Dv, A);
        free(kp), free(qp), free(al), free(dkp), free(scr);
    } else if (!strcmp(layer, "cgru")) {
        int S = (int)meta("S", 0);
        cgru_dims_t d = {H, (int)meta("E", 0), (int)meta("Dv", 0), (int)meta("A", 0), (int)meta("O", 0),
                         (int)meta("V", 0), find("gru1.ln_ih.gain") >= 0};
        cgru_weights_t cw = {cell("gru1.", 0), cell("gru2.", 0), V("att.W_q"), V("att.W_k"), Vo("att.b"),
                             V("att.v"), V("out.W_s"), V("out.W_c"), V("out.W_e"), Vo("out.b"), V("out.W_o"),
                             Vo("out.b_o")};
        cgru_weights_t dcw = {cell("gru1.", 1), cell("gru2.", 1), Gd("att.W_q"), Gd("att.W_k"), Go("att.b"),
                              Gd("att.v"), Gd("out.W_s"), Gd("out.W_c"), Gd("out.W_e"), Go("out.b"),
                              Gd("out.W_o"), Go("out.b_o")};
        cgru_acts_t a = {zeros((size_t)B * S * d.A), zeros(nn_gru_gates_size(BT, H, d.ln)), zeros(BT * H),
                         zeros(BT * d.A), zeros(BT * S), zeros(BT * d.Dv), zeros(nn_gru_gates_size(BT, H, d.ln)),
                         zeros(BT * H), zeros(BT * d.O),
                         zeros(BT * d.V), NULL, 0.0f, 0};
        nn_cgru_forward(&a, V("emb"), V("s0"), V("enc"), len, &cw, B, T, S, d);
        float *scr = zeros(nn_cgru_backward_scratch(B, T, S, d));
        nn_cgru_backward(Gd("emb"), Gd("s0"), Gd("enc"), &dcw, scr, R, V("emb"), V("s0"), V("enc"), len, &cw, &a, B,
                         T, S, d);
        nout = BT * d.V;
        out = zeros(nout);
        memcpy(out, a.logits, nout * sizeof(float));
        free(scr);
        float **pa = (float **)&a;
        for (size_t i = 0; i < offsetof(cgru_acts_t, u_drop) / sizeof(float *); i++) free(pa[i]);
    } else if (!strcmp(layer, "gnmt_dec")) {
        int S = (int)meta("S", 0);
        gnmt_dec_dims_t d = {H, (int)meta("E", 0), (int)meta("Dv", 0), (int)meta("A", 0)};
        gnmt_dec_weights_t gw = {cell("lstm.", 0), V("att.W_q"), V("att.W_k"), Vo("att.b"), V("att.v")};
        gnmt_dec_weights_t dgw = {cell("lstm.", 1), Gd("att.W_q"), Gd("att.W_k"), Go("att.b"), Gd("att.v")};
        gnmt_dec_acts_t a = {zeros((size_t)B * S * d.A), zeros(BT * d.A), zeros(BT * S), zeros(BT * d.Dv),
                             zeros(BT * 4 * H), zeros(BT * H), zeros(BT * H)};
        nn_gnmt_dec_bottom_forward(&a, V("emb"), Vo("h0"), Vo("c0"), V("enc"), len, &gw, B, T, S, d);
        float *scr = zeros(nn_gnmt_dec_bottom_backward_scratch(B, T, S, d));
        nn_gnmt_dec_bottom_backward(Gd("emb"), Go("h0"), Go("c0"), Gd("enc"), &dgw, scr, R, R + BT * H, V("emb"),
                                    Vo("h0"), Vo("c0"), V("enc"), len, &gw, &a, B, T, S, d);
        nout = BT * (H + d.Dv);
        out = zeros(nout);
        memcpy(out, a.y, BT * H * sizeof(float));
        memcpy(out + BT * H, a.ctx, BT * d.Dv * sizeof(float));
        free(scr);
        float **pa = (float **)&a;
        for (size_t i = 0; i < sizeof a / sizeof(float *); i++) free(pa[i]);
    } else {
        fprintf(stderr, "rnn_driver: unknown layer %s\n", layer);
        return 1;
    }

    tensor_t *views = calloc((size_t)TT.count + 1, sizeof *views);
    char **names = calloc((size_t)TT.count, sizeof *names);
    int n = 0;
    views[n++] = (tensor_t){.name = "out", .dtype = DT_F32, .rank = 1, .shape = {(int64_t)nout},
                            .numel = (int64_t)nout, .data = out, .nbytes = nout * sizeof(float)};
    for (int i = 0; i < TT.count; i++) {
        if (!strcmp(TT.name[i], "R")) continue;
        names[i] = malloc(strlen(TT.name[i]) + 6);
        sprintf(names[i], "grad/%s", TT.name[i]);
        tensor_t v = {.name = names[i], .dtype = DT_F32, .rank = TT.rank[i], .numel = (int64_t)TT.n[i],
                      .data = TT.grad[i], .nbytes = TT.n[i] * sizeof(float)};
        memcpy(v.shape, TT.shape[i], sizeof v.shape);
        views[n++] = v;
    }
    if (safetensors_write(argv[2], views, n, NULL, NULL, 0)) {
        fprintf(stderr, "rnn_driver: %s\n", tern_last_error());
        return 1;
    }
    for (int i = 0; i < TT.count; i++) free(names[i]), free(TT.val[i]), free(TT.grad[i]);
    free(names), free(views), free(out);
    weights_free(w);
    return 0;
}
