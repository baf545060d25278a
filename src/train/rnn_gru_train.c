/*
 * rnn_gru_train.c — the GRU family's training table (rnn_gru_train.h).
 *
 * Legend: B sentences, S / T padded source / target lengths, E embedding, He encoder GRU width,
 * Hd decoder GRU width, Dv = 2·He, A attention, O deep output, Vs/Vt vocabularies.
 *
 * Forward of a batch:
 *   xs = dropout(Emb_s[src])            (B, S, E)
 *   enc = BiGRU(xs, len)                (B, S, Dv)   nn_bigru_forward
 *   s0 = tanh(W_init mean(enc) + b)     (B, Hd)      nn_gru_init_state_forward (shared with inference)
 *   xt = dropout(Emb_t[tgt_in])         (B, T, E)
 *   logits = cGRU(xt, s0, enc)          (B, T, Vt)   nn_cgru_forward (dropout on its deep output u)
 *   loss = label-smoothed cross-entropy over tgt_out
 * The backward runs the same chain in reverse; parameter gradients accumulate (+=).
 * --qat int8-act (train_model_t.act_fq): the layers run between nn_rnn_actq_begin and _end, so that
 * every product int8 inference runs in int8 multiplies its input rows rounded as that inference
 * rounds them (nn/rnn.h: the GRUs' input and recurrent projections, the attention's query and key
 * projections, the initial state's, the deep output's and the output layer's), the weights'
 * gradients taken against the rounded rows, the inputs' passed straight through.
 */
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "train/rnn_gru_train.h"
#include "nn/layers.h"
#include "train/model.h"
#include "nn/rnn.h"
#include "model/rnn_gru_desc.h"

void rnn_gru_default_config(rnn_gru_config_t *c) {
    memset(c, 0, sizeof *c);
    c->emb = 256;
    c->enc_hidden = 256;
    c->dec_hidden = 256;
    c->att = 0;
    c->out = 0;
    c->share_emb = -1;
    c->tie_proj = 1;
    c->init_scale = 0.0f;
    c->dropout = 0.1f;
    c->label_smoothing = 0.1f;
}

typedef struct {
    rnn_gru_config_t c;
    rnn_gru_dims_t d;
    cgru_dims_t cd;
    int joint;
    train_tensor_t tensors[RG_COUNT];
    int n_tensors;
    size_t off[RG_COUNT]; /* every tensor's offset (aliases: their target's) */
    const char *alias_names[2], *alias_targets[2];
    int n_aliases;
    rnn_gru_scalars_t scalars;
    float *params, *grads;
} gru_impl_t;

typedef struct {
    int cap_ms, cap_mt, cap_B, max_S, max_T;
    float *mem;
    size_t n_floats;
    int *src, *tgt_in, *tgt_out, *slen; /* copies of the batch */
    float *xs, *enc, *gf, *gb, *mean, *s0, *xt, *losses, *nlls;
    cgru_acts_t acts;
    float *dxs, *denc, *ds0, *dxt, *scratch;
    size_t scratch_n;
    int B, S, T, train;
    uint64_t seed, step;
    nn_rnn_lowp_t lowp; /* bfloat16 compute (c.bf16) */
    nn_rnn_actq_t actq; /* --qat int8-act: the products' rounded input rows (act_fq), else empty */
    const float *sent_w; /* (B) per-sentence loss weights, or NULL */
} gru_ws_t;

static gru_impl_t *impl(const train_model_t *m) { return m->impl; }

/* Views of buf as the layers' weight structs. */
static void views(const gru_impl_t *g, float *buf, rnn_cell_t *ef, rnn_cell_t *eb, cgru_weights_t *w,
                  float **P) {
    for (int i = 0; i < RG_COUNT; i++) P[i] = buf + g->off[i];
    rnn_gru_views(&g->d, P, ef, eb, w);
}

static void gru_destroy(train_model_t *m) {
    gru_impl_t *g = m->impl;
    if (!g) return;
    free(g->params);
    free(g->grads);
    free(g);
    memset(m, 0, sizeof *m);
}

static tern_status_t gru_create(train_model_t *m, const void *config, const train_data_dims_t *data) {
    memset(m, 0, sizeof *m);
    rnn_gru_config_t c = *(const rnn_gru_config_t *)config;
    if (c.share_emb < 0) c.share_emb = data->joint_vocab;
    if (c.att <= 0) c.att = c.dec_hidden;
    if (c.out <= 0) c.out = c.emb;
    c.src_vocab = data->src_vocab;
    c.tgt_vocab = data->tgt_vocab;
    c.pad_id = data->pad_id;
    if (c.emb < 1 || c.enc_hidden < 1 || c.dec_hidden < 1)
        return tern_error(TERN_ERR_INVALID_ARG, "rnn-gru: sizes must be positive (emb %d, encoder %d, decoder %d)",
                          c.emb, c.enc_hidden, c.dec_hidden);
    if (c.share_emb && !data->joint_vocab)
        return tern_error(TERN_ERR_INVALID_ARG, "rnn-gru: shared embeddings need one joint vocabulary");
    if (c.tie_proj && c.out != c.emb)
        return tern_error(TERN_ERR_INVALID_ARG, "rnn-gru: a tied projection needs the deep-output width (%d) to equal "
                          "the embedding width (%d); give --no-tie-projection", c.out, c.emb);
    gru_impl_t *g = calloc(1, sizeof *g);
    if (!g) return tern_error(TERN_ERR_NOMEM, "out of memory");
    g->c = c;
    g->joint = data->joint_vocab;
    g->d = (rnn_gru_dims_t){c.src_vocab, c.tgt_vocab, c.emb, c.enc_hidden, c.dec_hidden, c.att, c.out,
                            c.share_emb, c.tie_proj, c.layer_norm, 1};
    g->cd = (cgru_dims_t){.H = c.dec_hidden, .E = c.emb, .Dv = 2 * c.enc_hidden, .A = c.att, .O = c.out,
                          .V = c.tgt_vocab, .ln = c.layer_norm};
    size_t total = 0;
    for (int i = 0; i < RG_COUNT; i++) {
        if (!rnn_gru_tensor_stored(&g->d, (rg_tensor_t)i)) continue;
        train_tensor_t *t = &g->tensors[g->n_tensors++];
        snprintf(t->name, sizeof t->name, "%s", rnn_gru_tensor_name((rg_tensor_t)i));
        int r, cc;
        rnn_gru_tensor_shape(&g->d, (rg_tensor_t)i, &r, &cc);
        t->rank = cc ? 2 : 1;
        t->shape[0] = r;
        t->shape[1] = cc;
        t->numel = (size_t)r * (cc ? cc : 1);
        t->offset = total;
        g->off[i] = total;
        total += t->numel;
    }
    if (c.share_emb) g->off[RG_DEC_EMB] = g->off[RG_ENC_EMB];
    if (c.tie_proj) g->off[RG_PROJ_W] = g->off[RG_DEC_EMB];
    g->n_aliases = rnn_gru_desc_aliases(&g->d, g->alias_names, g->alias_targets);
    rnn_gru_desc_scalars(&g->scalars, &g->d);
    g->params = calloc(total, sizeof(float));
    g->grads = calloc(total, sizeof(float));
    if (!g->params || !g->grads) {
        free(g->params);
        free(g->grads);
        free(g);
        return tern_error(TERN_ERR_NOMEM, "rnn-gru: out of memory for %zu parameters", total);
    }
    m->family = &train_family_rnn_gru;
    m->impl = g;
    m->n_params = total;
    m->params = g->params;
    m->grads = g->grads;
    m->n_tensors = g->n_tensors;
    m->tensors = g->tensors;
    m->n_aliases = g->n_aliases;
    m->alias_names = g->alias_names;
    m->alias_targets = g->alias_targets;
    m->layer_norm_epsilon = 0.0f;
    return TERN_OK;
}

static void gru_init_params(train_model_t *m, uint64_t seed) {
    gru_impl_t *g = impl(m);
    for (int i = 0; i < g->n_tensors; i++) {
        const train_tensor_t *t = &g->tensors[i];
        float *x = m->params + t->offset;
        uint64_t key = rng_mix64(seed ^ rng_mix64((uint64_t)i + 101));
        if (t->rank == 1) { /* biases 0, layer normalization gains 1 */
            int s, l;
            float v = desc_parse(&RNN_GRU_DESC, t->name, &s, &l) && rnn_gru_tensor_is_gain((rg_tensor_t)s) ? 1.0f : 0.0f;
            for (size_t k = 0; k < t->numel; k++) x[k] = v;
            continue;
        }
        double bound = g->c.init_scale > 0 ? g->c.init_scale : sqrt(6.0 / (double)(t->shape[0] + t->shape[1]));
        for (size_t k = 0; k < t->numel; k++) x[k] = (float)((2.0 * rng_uniform(key, k) - 1.0) * bound);
        int is_emb = !strcmp(t->name, rnn_gru_tensor_name(RG_ENC_EMB)) || !strcmp(t->name, rnn_gru_tensor_name(RG_DEC_EMB));
        if (is_emb && g->c.pad_id >= 0 && g->c.pad_id < t->shape[0])
            memset(x + (size_t)g->c.pad_id * t->shape[1], 0, (size_t)t->shape[1] * sizeof(float));
    }
}

static tern_status_t gru_load(train_model_t *m, const weights_t *w) {
    gru_impl_t *g = impl(m);
    int64_t ln = 0;
    if (weights_get_int(w, rnn_gru_key_name(RGKEY_LAYER_NORM), &ln) && ln != g->c.layer_norm)
        return tern_error(TERN_ERR_MISMATCH, "%s: the model has %s = %lld, this run %d (--layer-norm)",
                          weights_path(w), rnn_gru_key_name(RGKEY_LAYER_NORM), (long long)ln, g->c.layer_norm);
    int64_t heads = 1;
    if (weights_get_int(w, rnn_gru_key_name(RGKEY_HEADS), &heads) && heads != 1)
        return tern_error(TERN_ERR_UNSUPPORTED, "%s: the model has %s = %lld (an unfolded ensemble from `tern shrink`); "
                          "training supports one attention head", weights_path(w), rnn_gru_key_name(RGKEY_HEADS),
                          (long long)heads);
    for (int i = 0; i < g->n_tensors; i++) {
        const train_tensor_t *t = &g->tensors[i];
        tern_status_t st = train_tensor_load(m->params + t->offset, w, t->name, t->rank, t->shape[0], t->shape[1],
                                             t->numel);
        if (st) return st;
    }
    return TERN_OK;
}

static void gru_params_changed(train_model_t *m) { (void)m; }

static int gru_config_values(const train_model_t *m, ckpt_value_t *v) {
    const rnn_gru_config_t *c = &impl(m)->c;
    enum { N = 10 };
    static const char *names[N] = {"model:src_vocab", "model:tgt_vocab", "model:emb", "model:enc_hidden",
                                   "model:dec_hidden", "model:att", "model:out", "model:share_emb",
                                   "model:tie_proj", "model:layer_norm"};
    int vals[N] = {c->src_vocab, c->tgt_vocab, c->emb, c->enc_hidden, c->dec_hidden, c->att, c->out,
                   c->share_emb, c->tie_proj, c->layer_norm};
    /* "model:layer_norm" only when set: checkpoints written before it resume unchanged */
    int n = c->layer_norm ? N : N - 1;
    for (int i = 0; i < n; i++) v[i] = (ckpt_value_t){.name = names[i], .type = CKPT_INT, .i = vals[i]};
    return n;
}

static int gru_scalars(const train_model_t *m, const tensor_t **out) {
    *out = impl(m)->scalars.t;
    return RGKEY_COUNT - 1; /* all but rnn/attention_heads (read-only: training has one head) */
}

static int gru_describe(const train_model_t *m, int line, char *buf, size_t n) {
    if (line != 0) return 0;
    const gru_impl_t *g = impl(m);
    const rnn_gru_config_t *c = &g->c;
    char voc[64];
    if (g->joint) snprintf(voc, sizeof voc, "%d joint", c->src_vocab);
    else snprintf(voc, sizeof voc, "%d/%d", c->src_vocab, c->tgt_vocab);
    snprintf(buf, n, "rnn-gru: bidirectional GRU encoder %d, conditional GRU decoder %d%s, embeddings %d, "
             "attention %d, deep output %d, vocabulary %s, %s embeddings, %.2fM parameters",
             c->enc_hidden, c->dec_hidden, c->layer_norm ? " (layer-normalized)" : "", c->emb, c->att, c->out, voc,
             c->share_emb ? (c->tie_proj ? "shared + tied" : "shared") : (c->tie_proj ? "tied" : "separate"),
             (double)m->n_params / 1e6);
    if (c->bf16) snprintf(buf + strlen(buf), n > strlen(buf) ? n - strlen(buf) : 0,
                          "; bfloat16 GEMMs (float32 accumulation and master weights)");
    return 1;
}

/* --init-from: the shape of the attention-GRU model in w over config (widths, attention and output
 * sizes, layer norm, sharing and tying; dropout, smoothing and initialization stay the run's). */
static tern_status_t gru_config_from_model(void *config, const weights_t *w, const model_config_t *mc) {
    (void)mc;
    rnn_gru_config_t *c = config;
    const char *file = weights_path(w);
    const tensor_t *ee = weights_get(w, "encoder/embeddings/weight"), *de = weights_get(w, "decoder/embeddings/weight");
    const tensor_t *whh = weights_get(w, "encoder/forward/w_hh"), *init = weights_get(w, "decoder/init/weight");
    const tensor_t *q = weights_get(w, "decoder/attention/query/weight");
    const tensor_t *os = weights_get(w, "decoder/output/state/weight"), *pw = weights_get(w, "decoder/projection/weight");
    if (!ee || ee->rank != 2 || !whh || whh->rank != 2 || !init || init->rank != 2 || !q || q->rank != 2 || !os ||
        os->rank != 2)
        return tern_error(TERN_ERR_FORMAT, "%s: not an attention-GRU model of Tern's layout (no encoder embedding, "
                          "encoder GRU, decoder init, attention query or deep output)", file);
    c->emb = (int)ee->shape[1];
    c->enc_hidden = (int)whh->shape[1];
    c->dec_hidden = (int)init->shape[0];
    c->att = (int)q->shape[0];
    c->out = (int)os->shape[0];
    c->layer_norm = weights_get(w, "encoder/forward/ln_ih/gain") != NULL;
    c->share_emb = !de || de->data == ee->data;
    c->tie_proj = !pw || pw->data == (de ? de : ee)->data;
    return TERN_OK;
}

static void gru_default_config(void *config) { rnn_gru_default_config(config); }

static void gru_ws_free(void *p) {
    gru_ws_t *ws = p;
    if (!ws) return;
    free(ws->mem);
    nn_rnn_lowp_free(&ws->lowp);
    nn_rnn_actq_free(&ws->actq);
    free(ws->src), free(ws->tgt_in), free(ws->tgt_out), free(ws->slen);
    free(ws);
}

static tern_status_t gru_ws_new(void **out, const train_model_t *m, int ms, int mt, int mS, int mT) {
    const gru_impl_t *g = impl(m);
    const cgru_dims_t d = g->cd;
    int E = d.E, He = g->c.enc_hidden, Hd = d.H, Dv = d.Dv, A = d.A, O = d.O, V = d.V;
    int mB = ms < mt ? ms : mt;
    *out = NULL;
    gru_ws_t *ws = calloc(1, sizeof *ws);
    if (!ws) return tern_error(TERN_ERR_NOMEM, "out of memory");
    ws->cap_ms = ms, ws->cap_mt = mt, ws->cap_B = mB, ws->max_S = mS, ws->max_T = mT;
    /* bounds of nn_cgru_backward_scratch and nn_gru_backward_scratch (linear in B·T, B·S and B) */
    int ln = g->c.layer_norm;
    size_t cg = (size_t)mt * (O + Dv + Hd + 8 * (size_t)Hd) + (size_t)mB * (2 * Hd + 2 * A) + (size_t)ms * A +
                (ln ? (size_t)mt * 10 * Hd : 0);
    size_t gg = (size_t)ms * (ln ? 7 : 4) * He + (size_t)2 * mB * He;
    size_t ig = (size_t)mB * (Hd + Dv), eg = (size_t)(ms > mt ? ms : mt) * E; /* init state; dropout */
    ws->scratch_n = cg > gg ? cg : gg;
    if (ws->scratch_n < ig) ws->scratch_n = ig;
    if (ws->scratch_n < eg) ws->scratch_n = eg;
    size_t sizes[] = {
        (size_t)ms * E, (size_t)ms * Dv, nn_gru_gates_size((size_t)ms, He, ln), nn_gru_gates_size((size_t)ms, He, ln),
        (size_t)mB * Dv, (size_t)mB * Hd, (size_t)mt * E, (size_t)mt, (size_t)mt,
        /* acts */ (size_t)ms * A, nn_gru_gates_size((size_t)mt, Hd, ln), (size_t)mt * Hd, (size_t)mt * A,
        (size_t)mt * mS, (size_t)mt * Dv, nn_gru_gates_size((size_t)mt, Hd, ln), (size_t)mt * Hd, (size_t)mt * O,
        (size_t)mt * V, (size_t)mt * O,
        /* grads */ (size_t)ms * E, (size_t)ms * Dv, (size_t)mB * Hd, (size_t)mt * E, ws->scratch_n,
    };
    enum { NB = sizeof sizes / sizeof sizes[0] };
    size_t total = 0;
    for (int i = 0; i < NB; i++) total += (sizes[i] + 15) & ~(size_t)15;
    ws->mem = malloc(total * sizeof(float));
    ws->src = malloc(sizeof(int) * (size_t)ms);
    ws->tgt_in = malloc(sizeof(int) * (size_t)mt);
    ws->tgt_out = malloc(sizeof(int) * (size_t)mt);
    ws->slen = malloc(sizeof(int) * (size_t)mB);
    if (!ws->mem || !ws->src || !ws->tgt_in || !ws->tgt_out || !ws->slen) {
        gru_ws_free(ws);
        return tern_error(TERN_ERR_NOMEM, "rnn-gru: out of memory for the training workspace (%zu MB)",
                          total * sizeof(float) >> 20);
    }
    ws->n_floats = total;
    float **dst[] = {&ws->xs, &ws->enc, &ws->gf, &ws->gb, &ws->mean, &ws->s0, &ws->xt, &ws->losses, &ws->nlls,
                     &ws->acts.kp, &ws->acts.g1, &ws->acts.s1, &ws->acts.qp, &ws->acts.alpha, &ws->acts.ctx,
                     &ws->acts.g2, &ws->acts.s, &ws->acts.u, &ws->acts.logits, &ws->acts.u_drop,
                     &ws->dxs, &ws->denc, &ws->ds0, &ws->dxt, &ws->scratch};
    float *p = ws->mem;
    for (int i = 0; i < NB; i++) {
        *dst[i] = p;
        p += (sizes[i] + 15) & ~(size_t)15;
    }
    if (g->c.bf16) { /* the largest GEMM operand */
        size_t cap = (size_t)mt * (size_t)(V > 4 * Hd ? V : 4 * Hd), c2 = (size_t)ms * (4 * (size_t)He + Dv + E + A);
        size_t c3 = (size_t)V * O, c4 = (size_t)3 * Hd * (Dv > E ? (Dv > Hd ? Dv : Hd) : (E > Hd ? E : Hd));
        size_t c5 = (size_t)mt * (Dv + O + E + A), c6 = (size_t)3 * He * (E > He ? E : He);
        size_t c7 = (size_t)(A > O ? A : O) * (Dv + Hd + E);
        size_t cs[] = {c2, c3, c4, c5, c6, c7};
        for (int i = 0; i < 6; i++) cap = cs[i] > cap ? cs[i] : cap;
        tern_status_t st = nn_rnn_lowp_init(&ws->lowp, cap);
        if (st) {
            gru_ws_free(ws);
            return st;
        }
    }
    if (m->act_fq) { /* the largest rounded operand: the rows of a batch's sources or targets, one input each */
        int K = E > Dv ? E : Dv;
        K = K > Hd ? K : Hd;
        K = K > O ? K : O;
        tern_status_t st = nn_rnn_actq_init(&ws->actq, (size_t)(ms > mt ? ms : mt) * (size_t)K);
        if (st) {
            gru_ws_free(ws);
            return st;
        }
    }
    *out = ws;
    return TERN_OK;
}

const float *rnn_gru_train_probs(const void *ws) { return ((const gru_ws_t *)ws)->acts.logits; }

static size_t gru_ws_bytes(const void *p) {
    const gru_ws_t *ws = p;
    return ws->n_floats * sizeof(float) + 2 * ws->lowp.cap * sizeof(uint16_t) + ws->actq.cap * sizeof(float);
}

static tern_status_t gru_forward(train_model_t *m, void *pws, const int *src, const int *tgt_in, const int *tgt_out,
                                 int B, int S, int T, int train, uint64_t seed, uint64_t step, train_loss_t *loss) {
    gru_impl_t *g = impl(m);
    gru_ws_t *ws = pws;
    const cgru_dims_t d = g->cd;
    int E = d.E, He = g->c.enc_hidden, pad = g->c.pad_id;
    if ((size_t)B * S > (size_t)ws->cap_ms || (size_t)B * T > (size_t)ws->cap_mt || S > ws->max_S ||
        T > ws->max_T || B > ws->cap_B)
        return tern_error(TERN_ERR_INVALID_ARG, "rnn-gru: batch %dx%d/%d exceeds the workspace", B, S, T);
    memcpy(ws->src, src, sizeof(int) * (size_t)B * S);
    memcpy(ws->tgt_in, tgt_in, sizeof(int) * (size_t)B * T);
    memcpy(ws->tgt_out, tgt_out, sizeof(int) * (size_t)B * T);
    for (int b = 0; b < B; b++) {
        int L = 0;
        while (L < S && src[(size_t)b * S + L] != pad) L++;
        ws->slen[b] = L > 0 ? L : 1;
    }
    ws->B = B, ws->S = S, ws->T = T, ws->train = train, ws->seed = seed, ws->step = step;
    rnn_cell_t ef, eb;
    cgru_weights_t w;
    float *P[RG_COUNT];
    views(g, m->params, &ef, &eb, &w, P);
    float p = train ? g->c.dropout : 0.0f;
    if (g->c.bf16) nn_rnn_lowp_begin(&ws->lowp);
    if (ws->actq.buf) nn_rnn_actq_begin(&ws->actq);
    nn_embedding_forward(ws->xs, src, P[RG_ENC_EMB], NULL, B, S, E, 1.0f, pad);
    if (p > 0) nn_dropout_forward(ws->xs, ws->xs, (size_t)B * S * E, p, dropout_key(seed, step, 0));
    nn_bigru_forward(ws->enc, ws->gf, ws->gb, ws->xs, &ef, &eb, ws->slen, B, S, E, He);
    nn_gru_init_state_forward(ws->s0, ws->mean, ws->enc, ws->slen, P[RG_INIT_W], P[RG_INIT_B], B, S, d.Dv, d.H);
    nn_embedding_forward(ws->xt, tgt_in, P[RG_DEC_EMB], NULL, B, T, E, 1.0f, pad);
    if (p > 0) nn_dropout_forward(ws->xt, ws->xt, (size_t)B * T * E, p, dropout_key(seed, step, 1));
    ws->acts.drop = p; /* on the deep output, before the output layer */
    ws->acts.drop_key = dropout_key(seed, step, 2);
    nn_cgru_forward(&ws->acts, ws->xt, ws->s0, ws->enc, ws->slen, &w, B, T, S, d);
    tern_status_t sa = nn_rnn_actq_end(), st = nn_rnn_lowp_end();
    if (st || (st = sa)) return st;
    double ls = 0, ns = 0;
    int count = nn_crossentropy_forward(ws->acts.logits, ws->losses, ws->nlls, &ls, &ns, ws->acts.logits, tgt_out,
                                        B * T, d.V, g->c.label_smoothing, pad);
    if (ws->sent_w) train_weighted_sums(ws->losses, ws->nlls, ws->sent_w, B, T, &ls, &ns);
    if (loss) {
        loss->loss = ls;
        loss->nll = ns;
        loss->ntokens = count;
    }
    return TERN_OK;
}

static tern_status_t gru_backward(train_model_t *m, void *pws, float grad_scale) {
    gru_impl_t *g = impl(m);
    gru_ws_t *ws = pws;
    const cgru_dims_t d = g->cd;
    int B = ws->B, S = ws->S, T = ws->T, E = d.E, He = g->c.enc_hidden, pad = g->c.pad_id;
    rnn_cell_t ef, eb, def, deb;
    cgru_weights_t w, dw;
    float *P[RG_COUNT], *G[RG_COUNT];
    views(g, m->params, &ef, &eb, &w, P);
    views(g, m->grads, &def, &deb, &dw, G);
    float *dlogits = ws->acts.logits; /* the probabilities, overwritten by their gradient */
    nn_crossentropy_backward(dlogits, ws->acts.logits, ws->tgt_out, B * T, d.V, g->c.label_smoothing, pad, grad_scale);
    if (ws->sent_w) train_scale_sentence_rows(dlogits, ws->sent_w, B, T, d.V);
    if (g->c.bf16) nn_rnn_lowp_begin(&ws->lowp);
    if (ws->actq.buf) nn_rnn_actq_begin(&ws->actq);
    memset(ws->dxt, 0, sizeof(float) * (size_t)B * T * E);
    memset(ws->ds0, 0, sizeof(float) * (size_t)B * d.H);
    memset(ws->denc, 0, sizeof(float) * (size_t)B * S * d.Dv);
    nn_cgru_backward(ws->dxt, ws->ds0, ws->denc, &dw, ws->scratch, dlogits, ws->xt, ws->s0, ws->enc, ws->slen, &w,
                     &ws->acts, B, T, S, d);
    nn_gru_init_state_backward(ws->denc, G[RG_INIT_W], G[RG_INIT_B], ws->scratch, ws->ds0, ws->s0, ws->mean,
                                ws->slen, P[RG_INIT_W], B, S, d.Dv, d.H);
    memset(ws->dxs, 0, sizeof(float) * (size_t)B * S * E);
    nn_bigru_backward(ws->dxs, &def, &deb, ws->scratch, ws->denc, ws->xs, &ef, &eb, ws->enc, ws->gf, ws->gb, ws->slen,
                      B, S, E, He);
    float p = ws->train ? g->c.dropout : 0.0f;
    if (p > 0) { /* dropout's gradient: the mask again (into the scratch, then back) */
        float *tmp = ws->scratch;
        size_t n = (size_t)B * T * E;
        memset(tmp, 0, n * sizeof(float));
        nn_dropout_backward(tmp, ws->dxt, n, p, dropout_key(ws->seed, ws->step, 1));
        memcpy(ws->dxt, tmp, n * sizeof(float));
        n = (size_t)B * S * E;
        memset(tmp, 0, n * sizeof(float));
        nn_dropout_backward(tmp, ws->dxs, n, p, dropout_key(ws->seed, ws->step, 0));
        memcpy(ws->dxs, tmp, n * sizeof(float));
    }
    nn_embedding_backward(G[RG_DEC_EMB], NULL, ws->dxt, ws->tgt_in, B, T, E, 1.0f, pad);
    nn_embedding_backward(G[RG_ENC_EMB], NULL, ws->dxs, ws->src, B, S, E, 1.0f, pad);
    tern_status_t sa = nn_rnn_actq_end(), st = nn_rnn_lowp_end();
    return st ? st : sa;
}

static int gru_backward_stages(const train_model_t *m) {
    (void)m;
    return 1;
}
static int gru_tensor_stage(const train_model_t *m, int i) {
    (void)m, (void)i;
    return 0;
}
static void gru_set_hook(void *ws, train_backward_hook_t hook, void *user) { (void)ws, (void)hook, (void)user; }

/* ------------------------------------------------------------ `tern train` options */

#define F(field) offsetof(rnn_gru_config_t, field)
#define NO2 TRAIN_OPT_NO_FIELD2

static const train_option_t GRU_OPTIONS[] = {
    {"emb-dim", TRAIN_OPT_INT, F(emb), NO2, 1, 1 << 16, 0, NULL, NULL,
     "  --emb-dim N                 embedding width (default 256)\n"},
    {"rnn-dim", TRAIN_OPT_INT, F(enc_hidden), F(dec_hidden), 1, 1 << 16, 0, NULL, NULL,
     "  --rnn-dim N                 encoder (per direction) and decoder GRU width (default 256);\n"
     "                              --encoder-rnn-dim N, --decoder-rnn-dim N for one side\n"},
    {"encoder-rnn-dim", TRAIN_OPT_INT, F(enc_hidden), NO2, 1, 1 << 16, 0, NULL, NULL, NULL},
    {"decoder-rnn-dim", TRAIN_OPT_INT, F(dec_hidden), NO2, 1, 1 << 16, 0, NULL, NULL, NULL},
    {"attention-dim", TRAIN_OPT_INT, F(att), NO2, 1, 1 << 16, 0, NULL, NULL,
     "  --attention-dim N           attention hidden size (default: the decoder GRU width)\n"},
    {"output-dim", TRAIN_OPT_INT, F(out), NO2, 1, 1 << 16, 0, NULL, NULL,
     "  --output-dim N              deep-output width (default: --emb-dim, needed by a tied projection)\n"},
    {"init-scale", TRAIN_OPT_FLOAT, F(init_scale), NO2, 0, 10, 0, NULL, NULL,
     "  --init-scale S              weights uniform in [-S, S] (default 0: Glorot-uniform)\n"},
    {"layer-norm", TRAIN_OPT_SET, F(layer_norm), NO2, 0, 0, 1, NULL, NULL,
     "  --layer-norm                layer-normalized GRU cells (Nematus/Marian: the input and recurrent\n"
     "                              projections of every GRU transition, gains and shifts per unit)\n"},
    TRAIN_OPT_SHARE_EMBEDDINGS(rnn_gru_config_t, share_emb,
     "  --share-embeddings | --no-share-embeddings\n"
     "                              one embedding matrix for both sides (default: when the vocabulary\n"
     "                              is joint)\n"),
    {"no-tie-projection", TRAIN_OPT_SET, F(tie_proj), NO2, 0, 0, 0, NULL, NULL,
     "  --no-tie-projection         an output layer of its own (default: the target embedding)\n"},
    TRAIN_OPT_LABEL_SMOOTHING(rnn_gru_config_t, label_smoothing),
    {"dropout", TRAIN_OPT_FLOAT, F(dropout), NO2, 0, 0.99, 0, NULL, NULL,
     "  --dropout P                 on the embeddings and the deep output (default 0.1)\n"},
    TRAIN_OPT_PRECISION(rnn_gru_config_t, bf16,
     "  --precision P               float32 (default) or bfloat16 GEMMs (needs AVX512_BF16)\n"),
    TRAIN_OPT_END,
};
#undef F
#undef NO2

static void gru_set_weights(void *ws, const float *w) { ((gru_ws_t *)ws)->sent_w = w; }

const train_family_t train_family_rnn_gru = {
    .architecture = RNN_GRU_ARCHITECTURE,
    .spec_name = RNN_GRU_SPEC_NAME,
    .desc = &RNN_GRU_DESC,
    .config_size = sizeof(rnn_gru_config_t),
    .options = GRU_OPTIONS,
    .options_title = "Attention GRU (--architecture rnn-gru; docs/rnn.md):",
    .create = gru_create,
    .destroy = gru_destroy,
    .init_params = gru_init_params,
    .load = gru_load,
    .config_from_model = gru_config_from_model,
    .params_changed = gru_params_changed,
    .config_values = gru_config_values,
    .scalars = gru_scalars,
    .describe = gru_describe,
    .default_config = gru_default_config,
    .ws_new = gru_ws_new,
    .ws_free = gru_ws_free,
    .ws_bytes = gru_ws_bytes,
    .forward = gru_forward,
    .backward = gru_backward,
    .backward_stages = gru_backward_stages,
    .tensor_stage = gru_tensor_stage,
    .set_backward_hook = gru_set_hook,
    .set_sentence_weights = gru_set_weights,
};
