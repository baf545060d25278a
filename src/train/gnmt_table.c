/*
 * gnmt_table.c — GNMT's training table (gnmt_table.h) over the recurrent layers of nn/rnn.h.
 *
 * Legend: B sentences, S / T padded source / target lengths, H hidden, A attention, Dv top encoder
 * width, V target vocabulary, Le / Ld layers.
 *
 * One flat parameter buffer laid out in gnmt_desc_tensors order (train_tensor_t views name it);
 * the gradient buffer has the same layout. The workspace is sized once for the largest batch.
 *
 * Forward (teacher-forced):
 *   xs = dropout(E_src[src])                                     (B, S, H)
 *   enc = GNMT encoder(xs)  (nn_gnmt_encoder_forward; dropout on the input of every layer l >= 1,
 *                            the residual adding the input before dropout)  (B, S, Dv)
 *   xt = dropout(E_tgt[tgt_in])                                  (B, T, H)
 *   y0, a = attentive bottom layer(xt, enc) (nn_gnmt_dec_bottom_forward)
 *   y_l = LSTM_l([dropout(y_{l-1}); a]) (+ y_{l-1} for l >= 2)   (nn_lstm_forward), l = 1 .. Ld-1
 *   logits = W_p dropout(y_{Ld-1}) + b_p; label-smoothed cross-entropy.
 */
#include "train/model.h"
#include "train/gnmt_table.h"

#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/gnmt_desc.h"
#include "nn/layers.h"
#include "nn/rnn.h"

enum { GN_MAX_LAYERS = 64 };

/* Pointers into one buffer (parameters or gradients). */
typedef struct {
    float *enc_emb, *dec_emb;       /* (Vs, H), (Vt, H) (dec_emb == enc_emb when shared) */
    rnn_cell_t enc[GN_MAX_LAYERS + 1]; /* enc[l], l < Le; enc[Le] layer 0's reverse direction */
    rnn_cell_t dec[GN_MAX_LAYERS];
    float *att_wq, *att_wk, *att_b, *att_v; /* (A, H), (A, Dv), (A), (A) */
    float *proj_w, *proj_b;         /* (Vt, H) (the decoder embedding when tied), (Vt) */
} gn_views_t;

typedef struct {
    gnmt_train_config_t cfg;
    gnmt_dims_t d;
    int pad_id, joint;
    float *params, *grads;
    train_tensor_t *tensors;
    int n_tensors;
    const char *alias_names[2], *alias_targets[2];
    int n_aliases;
    gn_views_t p, g;
    gnmt_scalars_t scalars;
    tensor_t all_scalars[GKEY_COUNT + 2]; /* the config keys, then gnmt/clip_delta, gnmt/clip_gamma */
    float clip_vals[2];
    int n_scalars;
    float delta;                          /* δ of the last training forward (the eval forwards use it) */
} gn_impl_t;

typedef struct {
    int ms, mt;                /* max B·S, B·T */
    int *slen;                 /* (B) */
    float *xs, *xt;            /* (B, S, H), (B, T, H) embeddings after dropout */
    float *eh[GN_MAX_LAYERS], *ey[GN_MAX_LAYERS], *ecell[GN_MAX_LAYERS], *egates[GN_MAX_LAYERS];
    float *exd[GN_MAX_LAYERS];  /* (B, S, K_l) encoder layer l >= 1's input after dropout */
    uint64_t ekeys[GN_MAX_LAYERS]; /* their masks' keys */
    gnmt_dec_acts_t bot;
    float *dx[GN_MAX_LAYERS];  /* (B, T, H + Dv) inputs of decoder layers l >= 1 */
    float *dh[GN_MAX_LAYERS], *dy[GN_MAX_LAYERS], *dcell[GN_MAX_LAYERS], *dgates[GN_MAX_LAYERS];
    float *top;                /* (B, T, H) the top output after dropout */
    float *logits, *probs;     /* (B, T, V) */
    float *losses, *nlls;      /* (B, T) */
    /* backward */
    float *dtop, *dcur, *dtmp, *dinp, *dctx, *denc, *dxs, *dxt, *scratch;
    size_t bytes;
    /* the last forward */
    const int *src, *tgt_in, *tgt_out;
    int B, S, T, train;
    uint64_t seed, step;
    train_backward_hook_t hook;
    void *hook_user;
    nn_rnn_lowp_t lowp;        /* bfloat16 compute (cfg.bf16) */
    const float *sent_w;       /* (B) per-sentence loss weights, or NULL */
} gn_ws_t;

static gn_impl_t *impl_of(const train_model_t *m) { return m->impl; }

static gnmt_dec_dims_t dec_dims(const gnmt_dims_t *d) {
    return (gnmt_dec_dims_t){d->hidden, d->hidden, gnmt_enc_width(d), d->att};
}

/* The views of buf (params or grads). */
static void make_views(gn_views_t *v, float *buf, const gn_impl_t *im) {
    memset(v, 0, sizeof *v);
    int Le = im->d.enc_layers;
    gnmt_tensor_t *all = malloc(sizeof *all * (size_t)im->n_tensors);
    if (!all) return; /* checked by the caller through v->enc_emb */
    gnmt_desc_tensors(&im->d, all);
    for (int i = 0; i < im->n_tensors; i++) {
        float *p = buf + im->tensors[i].offset;
        const gnmt_tensor_t *g = &all[i];
        rnn_cell_t *c = NULL;
        if (g->module == GN_ENC_LSTM) c = &v->enc[g->layer];
        else if (g->module == GN_ENC_LSTM_REV) c = &v->enc[Le];
        else if (g->module == GN_DEC_LSTM) c = &v->dec[g->layer];
        if (c) {
            if (g->part == GP_W_IH) c->w_ih = p;
            else if (g->part == GP_W_HH) c->w_hh = p;
            else if (g->part == GP_B_IH) c->b_ih = p;
            else c->b_hh = p;
            continue;
        }
        switch (g->module) {
        case GN_ENC_EMB: v->enc_emb = p; break;
        case GN_DEC_EMB: v->dec_emb = p; break;
        case GN_ATT_WQ: v->att_wq = p; break;
        case GN_ATT_WK: v->att_wk = p; break;
        case GN_ATT_B: v->att_b = p; break;
        case GN_ATT_V: v->att_v = p; break;
        case GN_PROJ_W: v->proj_w = p; break;
        case GN_PROJ_B: v->proj_b = p; break;
        default: break;
        }
    }
    free(all);
    if (im->d.share_emb) v->dec_emb = v->enc_emb;
    if (im->d.tie_proj) v->proj_w = v->dec_emb;
}

static void gn_destroy(train_model_t *m) {
    gn_impl_t *im = m->impl;
    if (im) {
        free(im->params);
        free(im->grads);
        free(im->tensors);
        free(im);
    }
    memset(m, 0, sizeof *m);
}

static tern_status_t gn_create(train_model_t *m, const void *config, const train_data_dims_t *data) {
    memset(m, 0, sizeof *m);
    gnmt_train_config_t c = *(const gnmt_train_config_t *)config;
    if (c.share_emb < 0) c.share_emb = data->joint_vocab;
    if (c.att <= 0) c.att = c.hidden;
    if (c.share_emb && !data->joint_vocab)
        return tern_error(TERN_ERR_INVALID_ARG, "gnmt: shared embeddings need one joint vocabulary");
    if (c.enc_layers < 1 || c.dec_layers < 1 || c.enc_layers > GN_MAX_LAYERS || c.dec_layers > GN_MAX_LAYERS)
        return tern_error(TERN_ERR_INVALID_ARG, "gnmt: layers must be in [1, %d]", GN_MAX_LAYERS);
    if (c.hidden < 1) return tern_error(TERN_ERR_INVALID_ARG, "gnmt: hidden size must be >= 1");
    gn_impl_t *im = calloc(1, sizeof *im);
    if (!im) return tern_error(TERN_ERR_NOMEM, "out of memory");
    im->cfg = c;
    im->pad_id = data->pad_id;
    im->joint = data->joint_vocab;
    im->d = (gnmt_dims_t){data->src_vocab, data->tgt_vocab, c.hidden, c.att, c.enc_layers, c.dec_layers,
                          c.share_emb, c.tie_proj};
    int n = gnmt_desc_tensors(&im->d, NULL);
    gnmt_tensor_t *all = malloc(sizeof *all * (size_t)n);
    im->tensors = calloc((size_t)n, sizeof *im->tensors);
    if (!all || !im->tensors) {
        free(all);
        free(im->tensors);
        free(im);
        return tern_error(TERN_ERR_NOMEM, "out of memory");
    }
    gnmt_desc_tensors(&im->d, all);
    size_t off = 0;
    for (int i = 0; i < n; i++) {
        train_tensor_t *t = &im->tensors[i];
        snprintf(t->name, sizeof t->name, "%s", all[i].name);
        t->rank = all[i].rank;
        t->shape[0] = all[i].shape[0];
        t->shape[1] = all[i].shape[1];
        t->numel = (size_t)all[i].shape[0] * (size_t)(all[i].rank == 2 ? all[i].shape[1] : 1);
        t->offset = off;
        off += (t->numel + 15) & ~(size_t)15; /* 64-byte aligned views */
    }
    free(all);
    im->n_tensors = n;
    im->params = calloc(off, sizeof(float));
    im->grads = calloc(off, sizeof(float));
    m->impl = im;
    if (!im->params || !im->grads) {
        gn_destroy(m);
        return tern_error(TERN_ERR_NOMEM, "gnmt: out of memory for %zu parameters", off);
    }
    make_views(&im->p, im->params, im);
    make_views(&im->g, im->grads, im);
    if (!im->p.enc_emb || !im->g.enc_emb) {
        gn_destroy(m);
        return tern_error(TERN_ERR_NOMEM, "out of memory");
    }
    im->n_aliases = gnmt_desc_aliases(&im->d, im->alias_names, im->alias_targets);
    gnmt_desc_scalars(&im->scalars, &im->d);
    memcpy(im->all_scalars, im->scalars.t, sizeof(tensor_t) * GKEY_COUNT);
    im->n_scalars = GKEY_COUNT;
    im->clip_vals[0] = c.clip_delta;
    im->clip_vals[1] = c.clip_gamma;
    static const char *clip_names[2] = {GNMT_CLIP_DELTA_KEY, GNMT_CLIP_GAMMA_KEY};
    for (int k = 0; k < 2; k++) {
        if (im->clip_vals[k] <= 0) continue;
        im->all_scalars[im->n_scalars++] = (tensor_t){.name = clip_names[k], .dtype = DT_F32, .rank = 0, .numel = 1,
                                                      .data = &im->clip_vals[k], .nbytes = sizeof(float)};
    }
    im->delta = gnmt_clip_delta_at(&c, 0);
    m->family = &train_family_gnmt;
    m->n_params = off;
    m->params = im->params;
    m->grads = im->grads;
    m->n_tensors = n;
    m->tensors = im->tensors;
    m->n_aliases = im->n_aliases;
    m->alias_names = im->alias_names;
    m->alias_targets = im->alias_targets;
    m->layer_norm_epsilon = 0;
    return TERN_OK;
}

static void gn_init_params(train_model_t *m, uint64_t seed) {
    gn_impl_t *im = impl_of(m);
    memset(im->params, 0, m->n_params * sizeof(float));
    for (int i = 0; i < im->n_tensors; i++) {
        const train_tensor_t *t = &im->tensors[i];
        float r = im->cfg.init_range;
        if (r <= 0) {
            int emb = strstr(t->name, "embeddings") != NULL;
            int fan = t->rank == 2 ? t->shape[1] : im->d.hidden;
            r = emb ? 0.1f : 1.0f / sqrtf((float)fan);
        }
        uint64_t key = rng_mix64(seed ^ rng_mix64(0x676e6d74ull + (uint64_t)i));
        float *p = im->params + t->offset;
        for (size_t j = 0; j < t->numel; j++) p[j] = (float)((2.0 * rng_uniform(key, j) - 1.0) * r);
    }
}

static tern_status_t gn_load(train_model_t *m, const weights_t *w) {
    gn_impl_t *im = impl_of(m);
    for (int i = 0; i < im->n_tensors; i++) {
        const train_tensor_t *t = &im->tensors[i];
        tern_status_t st = train_tensor_load(im->params + t->offset, w, t->name, t->rank, t->shape[0], t->shape[1],
                                             t->numel);
        if (st) return st;
    }
    return TERN_OK;
}

static void gn_params_changed(train_model_t *m) { (void)m; }

static int gn_config_values(const train_model_t *m, ckpt_value_t *v) {
    const gn_impl_t *im = impl_of(m);
    enum { N = 8 };
    static const char *names[N] = {"model:src_vocab", "model:tgt_vocab", "model:hidden", "model:att",
                                   "model:enc_layers", "model:dec_layers", "model:share_emb", "model:tie_proj"};
    const gnmt_dims_t *d = &im->d;
    int vals[N] = {d->src_vocab, d->tgt_vocab, d->hidden, d->att, d->enc_layers, d->dec_layers, d->share_emb,
                   d->tie_proj};
    for (int i = 0; i < N; i++) v[i] = (ckpt_value_t){.name = names[i], .type = CKPT_INT, .i = vals[i]};
    return N;
}

static int gn_scalars(const train_model_t *m, const tensor_t **out) {
    *out = impl_of(m)->all_scalars;
    return impl_of(m)->n_scalars;
}

float gnmt_clip_delta_at(const gnmt_train_config_t *c, uint64_t step) {
    if (c->clip_delta <= 0) return 0.0f;
    if (c->clip_anneal <= 0 || c->clip_delta_start <= c->clip_delta || step >= (uint64_t)c->clip_anneal)
        return c->clip_delta;
    double f = 1.0 - (double)step / (double)c->clip_anneal;
    return (float)(c->clip_delta + (c->clip_delta_start - c->clip_delta) * f);
}

/* Every LSTM cell of the parameter views clips at δ. */
static void set_clip(gn_impl_t *im, float delta) {
    im->delta = delta;
    for (int l = 0; l <= im->d.enc_layers; l++) im->p.enc[l].clip = delta;
    for (int l = 0; l < im->d.dec_layers; l++) im->p.dec[l].clip = delta;
}

static int gn_describe(const train_model_t *m, int line, char *buf, size_t n) {
    if (line != 0) return 0;
    const gn_impl_t *im = impl_of(m);
    const gnmt_dims_t *d = &im->d;
    snprintf(buf, n, "GNMT: %d+%d LSTM layers (bottom encoder layer bidirectional, residuals from the third), "
             "hidden %d, attention %d, vocabulary %d%s, %s embeddings, init %s, %.2fM parameters",
             d->enc_layers, d->dec_layers, d->hidden, d->att, d->src_vocab, im->joint ? " joint" : "",
             d->share_emb ? (d->tie_proj ? "shared + tied" : "shared") : (d->tie_proj ? "tied" : "separate"),
             im->cfg.init_range > 0 ? "uniform" : "fan-in", (double)m->n_params / 1e6);
    if (im->cfg.bf16) snprintf(buf + strlen(buf), n > strlen(buf) ? n - strlen(buf) : 0,
                                "; bfloat16 GEMMs (float32 accumulation and master weights)");
    if (im->cfg.clip_delta > 0) {
        size_t k = strlen(buf);
        if (im->cfg.clip_anneal > 0 && im->cfg.clip_delta_start > im->cfg.clip_delta)
            snprintf(buf + k, n > k ? n - k : 0, "; cell and residual clip delta %g annealed from %g over %d "
                     "micro-batches", im->cfg.clip_delta, im->cfg.clip_delta_start, im->cfg.clip_anneal);
        else snprintf(buf + k, n > k ? n - k : 0, "; cell and residual clip delta %g", im->cfg.clip_delta);
    }
    if (im->cfg.clip_gamma > 0) {
        size_t k = strlen(buf);
        snprintf(buf + k, n > k ? n - k : 0, "; logit clip gamma %g", im->cfg.clip_gamma);
    }
    return 1;
}

/* --init-from: the shape of the GNMT model in w over config (hidden, attention size, layers,
 * sharing and tying; dropout, smoothing and initialization stay the run's). */
static tern_status_t gn_config_from_model(void *config, const weights_t *w, const model_config_t *mc) {
    (void)mc;
    gnmt_train_config_t *c = config;
    const char *file = weights_path(w);
    const tensor_t *ee = weights_get(w, "encoder/embeddings/weight"), *de = weights_get(w, "decoder/embeddings/weight");
    const tensor_t *q = weights_get(w, "decoder/attention/linear_query/weight");
    const tensor_t *pw = weights_get(w, "decoder/projection/weight");
    if (!ee || ee->rank != 2 || !q || q->rank != 2)
        return tern_error(TERN_ERR_FORMAT, "%s: not a GNMT model of Tern's layout (no encoder embedding or "
                          "attention query)", file);
    char name[96];
    c->hidden = (int)ee->shape[1];
    c->att = (int)q->shape[0];
    c->enc_layers = c->dec_layers = 0;
    for (;;) {
        snprintf(name, sizeof name, "encoder/layer_%d/weight_ih", c->enc_layers);
        if (!weights_get(w, name)) break;
        c->enc_layers++;
    }
    for (;;) {
        snprintf(name, sizeof name, "decoder/layer_%d/weight_ih", c->dec_layers);
        if (!weights_get(w, name)) break;
        c->dec_layers++;
    }
    if (c->enc_layers < 1 || c->dec_layers < 1 || c->enc_layers > GN_MAX_LAYERS || c->dec_layers > GN_MAX_LAYERS)
        return tern_error(TERN_ERR_FORMAT, "%s: %d encoder and %d decoder LSTM layers (1..%d)", file, c->enc_layers,
                          c->dec_layers, GN_MAX_LAYERS);
    c->share_emb = !de || de->data == ee->data;
    c->tie_proj = !pw || pw->data == (de ? de : ee)->data;
    return TERN_OK;
}

static void gn_default_config(void *config) {
    *(gnmt_train_config_t *)config = (gnmt_train_config_t){
        .hidden = 512, .att = 0, .enc_layers = 4, .dec_layers = 4, .share_emb = -1, .tie_proj = 0,
        .init_range = 0, .dropout = 0.2f, .label_smoothing = 0.1f, .clip_delta_start = 8.0f};
}

/* ------------------------------------------------------------ workspace */

static void gn_ws_free(void *p) {
    gn_ws_t *ws = p;
    if (!ws) return;
    free(ws->slen);
    nn_rnn_lowp_free(&ws->lowp);
    float **all[] = {&ws->xs, &ws->xt, &ws->bot.kp, &ws->bot.qp, &ws->bot.alpha, &ws->bot.ctx, &ws->bot.gates,
                     &ws->bot.cell, &ws->bot.y, &ws->top, &ws->logits, &ws->probs, &ws->losses, &ws->nlls,
                     &ws->dtop, &ws->dcur, &ws->dtmp, &ws->dinp, &ws->dctx, &ws->denc, &ws->dxs, &ws->dxt,
                     &ws->scratch};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) free(*all[i]);
    for (int l = 0; l < GN_MAX_LAYERS; l++) {
        free(ws->eh[l]), free(ws->ey[l]), free(ws->ecell[l]), free(ws->egates[l]), free(ws->exd[l]);
        free(ws->dx[l]), free(ws->dh[l]), free(ws->dy[l]), free(ws->dcell[l]), free(ws->dgates[l]);
    }
    free(ws);
}

static float *falloc(gn_ws_t *ws, size_t n, int *bad) {
    if (!n) n = 1;
    float *p = malloc(n * sizeof(float));
    if (!p) *bad = 1;
    ws->bytes += n * sizeof(float);
    return p;
}

static size_t zmax(size_t a, size_t b) { return a > b ? a : b; }

static tern_status_t gn_ws_new(void **out, const train_model_t *m, int ms, int mt, int mS, int mT) {
    if (m->act_fq)
        return tern_error(TERN_ERR_UNSUPPORTED, "--qat int8-act: the gnmt family fake-quantizes its weights only "
                          "(--qat int8); activations: the Transformer and rnn-gru");
    (void)mS;
    (void)mT;
    const gn_impl_t *im = impl_of(m);
    const gnmt_dims_t *d = &im->d;
    size_t H = (size_t)d->hidden, A = (size_t)d->att, Dv = (size_t)gnmt_enc_width(d), V = (size_t)d->tgt_vocab;
    size_t S = (size_t)ms, T = (size_t)mt, Bm = (size_t)(ms < mt ? ms : mt);
    gn_ws_t *ws = calloc(1, sizeof *ws);
    if (!ws) return tern_error(TERN_ERR_NOMEM, "out of memory");
    ws->ms = ms, ws->mt = mt;
    int bad = 0;
    ws->slen = malloc(sizeof(int) * Bm);
    if (!ws->slen) bad = 1;
    ws->xs = falloc(ws, S * H, &bad);
    ws->xt = falloc(ws, T * H, &bad);
    for (int l = 0; l < d->enc_layers; l++) {
        size_t dirs = l == 0 ? 2 : 1;
        ws->eh[l] = falloc(ws, S * H * dirs, &bad);
        if (l >= 2) ws->ey[l] = falloc(ws, S * H, &bad);
        ws->ecell[l] = falloc(ws, dirs * S * H, &bad);
        ws->egates[l] = falloc(ws, dirs * S * 4 * H, &bad);
        if (l >= 1) ws->exd[l] = falloc(ws, S * H * (l == 1 ? 2 : 1), &bad);
    }
    ws->bot.kp = falloc(ws, S * A, &bad);
    ws->bot.qp = falloc(ws, T * A, &bad);
    ws->bot.alpha = falloc(ws, T * (size_t)(mS > 0 ? mS : 1), &bad);
    ws->bot.ctx = falloc(ws, T * Dv, &bad);
    ws->bot.gates = falloc(ws, T * 4 * H, &bad);
    ws->bot.cell = falloc(ws, T * H, &bad);
    ws->bot.y = falloc(ws, T * H, &bad);
    for (int l = 1; l < d->dec_layers; l++) {
        ws->dx[l] = falloc(ws, T * (H + Dv), &bad);
        ws->dh[l] = falloc(ws, T * H, &bad);
        if (l >= 2) ws->dy[l] = falloc(ws, T * H, &bad);
        ws->dcell[l] = falloc(ws, T * H, &bad);
        ws->dgates[l] = falloc(ws, T * 4 * H, &bad);
    }
    ws->top = falloc(ws, T * H, &bad);
    ws->logits = falloc(ws, T * V, &bad);
    ws->probs = falloc(ws, T * V, &bad);
    ws->losses = falloc(ws, T, &bad);
    ws->nlls = falloc(ws, T, &bad);
    ws->dtop = falloc(ws, T * H, &bad);
    ws->dcur = falloc(ws, T * H, &bad);
    ws->dtmp = falloc(ws, T * H, &bad);
    ws->dinp = falloc(ws, T * (H + Dv), &bad);
    ws->dctx = falloc(ws, T * Dv, &bad);
    ws->denc = falloc(ws, S * zmax(Dv, 2 * H), &bad);
    ws->dxs = falloc(ws, S * H, &bad);
    ws->dxt = falloc(ws, T * H, &bad);
    size_t lstm = T * 4 * H + 4 * Bm * H;
    size_t enc = 4 * S * H + S * 4 * H + 4 * Bm * H;
    size_t bot = T * 4 * H + 4 * Bm * H + Bm * Dv + 2 * Bm * A + S * A;
    ws->scratch = falloc(ws, zmax(lstm, zmax(enc, bot)), &bad);
    if (!bad && im->cfg.bf16) { /* the largest GEMM operand */
        size_t cap = zmax(T * zmax(V, zmax(4 * H, H + Dv)), S * zmax(4 * H, zmax(2 * H, A)));
        cap = zmax(cap, zmax(V * H, 4 * H * zmax(H + Dv, 2 * H)));
        cap = zmax(cap, A * zmax(H, Dv));
        tern_status_t st = nn_rnn_lowp_init(&ws->lowp, cap);
        if (st) {
            gn_ws_free(ws);
            return st;
        }
        ws->bytes += 2 * cap * sizeof(uint16_t);
    }
    if (bad) {
        gn_ws_free(ws);
        return tern_error(TERN_ERR_NOMEM, "gnmt: out of memory for the training workspace (%d source, %d target "
                          "tokens)", ms, mt);
    }
    *out = ws;
    return TERN_OK;
}

static size_t gn_ws_bytes(const void *ws) { return ((const gn_ws_t *)ws)->bytes; }

/* ------------------------------------------------------------ forward / backward */

/* Dropout sites: the embeddings, the top decoder output, the input of encoder layer l >= 1
 * (SITE_ENC + l) and of decoder layer l >= 1 (SITE_DEC + l). */
enum { SITE_SRC = 1, SITE_TGT = 2, SITE_TOP = 3, SITE_ENC = 16, SITE_DEC = 16 + GN_MAX_LAYERS };

static gnmt_encoder_acts_t enc_acts(gn_ws_t *ws, float p) {
    return (gnmt_encoder_acts_t){ws->eh, ws->ey, ws->ecell, ws->egates, ws->exd, p, ws->ekeys};
}

static gnmt_dec_weights_t bot_weights(const gn_views_t *v, const gnmt_dims_t *d) {
    (void)d;
    return (gnmt_dec_weights_t){v->dec[0], v->att_wq, v->att_wk, v->att_b, v->att_v};
}


/* [y; ctx] rows for the upper decoder layers. */
static void concat_rows(float *x, const float *y, const float *ctx, size_t M, int H, int Dv) {
    for (size_t m = 0; m < M; m++) {
        memcpy(x + m * (size_t)(H + Dv), y + m * (size_t)H, (size_t)H * sizeof(float));
        memcpy(x + m * (size_t)(H + Dv) + H, ctx + m * (size_t)Dv, (size_t)Dv * sizeof(float));
    }
}

static const float *dec_out(const gn_ws_t *ws, int l) {
    return l == 0 ? ws->bot.y : l == 1 ? ws->dh[1] : ws->dy[l];
}


static tern_status_t gn_forward(train_model_t *m, void *wsp, const int *src, const int *tgt_in, const int *tgt_out,
                                int B, int S, int T, int train, uint64_t seed, uint64_t step, train_loss_t *loss) {
    gn_impl_t *im = impl_of(m);
    gn_ws_t *ws = wsp;
    tern_status_t st = gnmt_train_forward_logits(m, wsp, src, tgt_in, B, S, T, train, seed, step);
    if (st) return st;
    ws->tgt_out = tgt_out;
    double ls = 0, nl = 0;
    int nt = nn_crossentropy_forward(ws->probs, ws->losses, ws->nlls, &ls, &nl, ws->logits, tgt_out, B * T,
                                     im->d.tgt_vocab, im->cfg.label_smoothing, im->pad_id);
    if (ws->sent_w) train_weighted_sums(ws->losses, ws->nlls, ws->sent_w, B, T, &ls, &nl);
    loss->loss = ls;
    loss->nll = nl;
    loss->ntokens = nt;
    return TERN_OK;
}

/* The forward up to the logits (B, T, V) (gnmt_train_logits); also the parity test's entry. */
tern_status_t gnmt_train_forward_logits(train_model_t *m, void *wsp, const int *src, const int *tgt_in, int B, int S,
                                        int T, int train, uint64_t seed, uint64_t step) {
    gn_impl_t *im = impl_of(m);
    gn_ws_t *ws = wsp;
    const gnmt_dims_t *d = &im->d;
    int H = d->hidden, Dv = gnmt_enc_width(d), V = d->tgt_vocab, pad = im->pad_id;
    if ((size_t)B * S > (size_t)ws->ms || (size_t)B * T > (size_t)ws->mt)
        return tern_error(TERN_ERR_INVALID_ARG, "gnmt: batch %dx%d/%dx%d exceeds the workspace", B, S, B, T);
    if (im->cfg.bf16) nn_rnn_lowp_begin(&ws->lowp);
    set_clip(im, train ? gnmt_clip_delta_at(&im->cfg, step) : im->delta);
    ws->src = src, ws->tgt_in = tgt_in, ws->B = B, ws->S = S, ws->T = T, ws->train = train;
    ws->seed = seed, ws->step = step;
    for (int b = 0; b < B; b++) {
        int n = 0;
        for (int s = 0; s < S; s++)
            if (src[(size_t)b * S + s] != pad) n = s + 1;
        ws->slen[b] = n > 0 ? n : 1;
    }
    float p = train ? im->cfg.dropout : 0.0f;
    size_t BS = (size_t)B * S, BT = (size_t)B * T;
    nn_embedding_forward(ws->xs, src, im->p.enc_emb, NULL, B, S, H, 1.0f, pad);
    if (p > 0) nn_dropout_forward(ws->xs, ws->xs, BS * H, p, dropout_key(seed, step, SITE_SRC));
    for (int l = 1; l < d->enc_layers; l++) ws->ekeys[l] = dropout_key(seed, step, SITE_ENC + (uint64_t)l);
    gnmt_encoder_acts_t ea = enc_acts(ws, p);
    nn_gnmt_encoder_forward(&ea, ws->xs, im->p.enc, ws->slen, B, S, H, H, d->enc_layers, 1);
    const float *enc = nn_gnmt_encoder_output(&ea, d->enc_layers);
    nn_embedding_forward(ws->xt, tgt_in, im->p.dec_emb, NULL, B, T, H, 1.0f, pad);
    if (p > 0) nn_dropout_forward(ws->xt, ws->xt, BT * H, p, dropout_key(seed, step, SITE_TGT));
    gnmt_dec_weights_t bw = bot_weights(&im->p, d);
    nn_gnmt_dec_bottom_forward(&ws->bot, ws->xt, NULL, NULL, enc, ws->slen, &bw, B, T, S, dec_dims(d));
    for (int l = 1; l < d->dec_layers; l++) {
        const float *yp = dec_out(ws, l - 1);
        if (p > 0) { /* dropout on the layer's input (ws->dtmp: free until the backward) */
            nn_dropout_forward(ws->dtmp, yp, BT * H, p, dropout_key(seed, step, SITE_DEC + (uint64_t)l));
            concat_rows(ws->dx[l], ws->dtmp, ws->bot.ctx, BT, H, Dv);
        } else {
            concat_rows(ws->dx[l], yp, ws->bot.ctx, BT, H, Dv);
        }
        nn_lstm_forward(ws->dh[l], H, ws->dcell[l], ws->dgates[l], ws->dx[l], NULL, NULL, &im->p.dec[l], NULL, B, T,
                        H + Dv, H, 0);
        if (l >= 2) {
            nn_residual_forward(ws->dy[l], ws->dh[l], yp, BT * H);
            nn_clip_forward(ws->dy[l], BT * H, im->delta);
        }
    }
    const float *top = dec_out(ws, d->dec_layers - 1);
    nn_dropout_forward(ws->top, top, BT * H, p, dropout_key(seed, step, SITE_TOP));
    nn_rnn_linear_forward(ws->logits, ws->top, im->p.proj_w, im->p.proj_b, (int)BT, H, V);
    nn_clip_forward(ws->logits, BT * V, im->cfg.clip_gamma);
    return nn_rnn_lowp_end();
}

const float *gnmt_train_logits(const void *ws) { return ((const gn_ws_t *)ws)->logits; }

static tern_status_t gn_backward(train_model_t *m, void *wsp, float grad_scale) {
    gn_impl_t *im = impl_of(m);
    gn_ws_t *ws = wsp;
    const gnmt_dims_t *d = &im->d;
    int H = d->hidden, Dv = gnmt_enc_width(d), V = d->tgt_vocab, pad = im->pad_id, B = ws->B, S = ws->S, T = ws->T;
    size_t BS = (size_t)B * S, BT = (size_t)B * T;
    float p = ws->train ? im->cfg.dropout : 0.0f;
    nn_crossentropy_backward(ws->probs, ws->probs, ws->tgt_out, (int)BT, V, im->cfg.label_smoothing, pad, grad_scale);
    if (ws->sent_w) train_scale_sentence_rows(ws->probs, ws->sent_w, B, T, V);
    nn_clip_backward(ws->probs, ws->logits, BT * V, im->cfg.clip_gamma);
    memset(ws->dtop, 0, BT * H * sizeof(float));
    if (im->cfg.bf16) nn_rnn_lowp_begin(&ws->lowp);
    nn_rnn_linear_backward(ws->dtop, im->g.proj_w, im->g.proj_b, ws->probs, ws->top, im->p.proj_w, (int)BT, H, V);
    memset(ws->dcur, 0, BT * H * sizeof(float));
    nn_dropout_backward(ws->dcur, ws->dtop, BT * H, p, dropout_key(ws->seed, ws->step, SITE_TOP));
    memset(ws->dctx, 0, BT * Dv * sizeof(float));
    for (int l = d->dec_layers - 1; l >= 1; l--) {
        if (l >= 2) /* x = clip(m + x_prev, δ) */
            nn_residual_clip_backward(ws->dcur, ws->dh[l], dec_out(ws, l - 1), BT * H, im->delta);
        memset(ws->dinp, 0, BT * (H + Dv) * sizeof(float));
        nn_lstm_backward(ws->dinp, NULL, NULL, &im->g.dec[l], ws->scratch, ws->dcur, H, ws->dx[l], NULL, NULL,
                         &im->p.dec[l], ws->dh[l], ws->dcell[l], ws->dgates[l], NULL, B, T, H + Dv, H, 0);
        for (size_t r = 0; r < BT; r++) {
            const float *di = ws->dinp + r * (size_t)(H + Dv);
            float *dn = ws->dtmp + r * (size_t)H, *dc = ws->dctx + r * (size_t)Dv;
            memcpy(dn, di, (size_t)H * sizeof(float));
            for (int j = 0; j < Dv; j++) dc[j] += di[H + j];
        }
        if (p > 0) /* the input's dropout: its mask again */
            nn_dropout_forward(ws->dtmp, ws->dtmp, BT * H, p, dropout_key(ws->seed, ws->step, SITE_DEC + (uint64_t)l));
        if (l >= 2) /* the residual's branch (the input before dropout) */
            for (size_t i = 0; i < BT * H; i++) ws->dtmp[i] += ws->dcur[i];
        float *t = ws->dcur;
        ws->dcur = ws->dtmp;
        ws->dtmp = t;
    }
    gnmt_encoder_acts_t ea = enc_acts(ws, p);
    const float *enc = nn_gnmt_encoder_output(&ea, d->enc_layers);
    gnmt_dec_weights_t bw = bot_weights(&im->p, d), bg = bot_weights(&im->g, d);
    memset(ws->denc, 0, BS * Dv * sizeof(float));
    memset(ws->dxt, 0, BT * H * sizeof(float));
    nn_gnmt_dec_bottom_backward(ws->dxt, NULL, NULL, ws->denc, &bg, ws->scratch, ws->dcur, ws->dctx, ws->xt, NULL,
                                NULL, enc, ws->slen, &bw, &ws->bot, B, T, S, dec_dims(d));
    memset(ws->dxs, 0, BS * H * sizeof(float));
    nn_gnmt_encoder_backward(ws->dxs, im->g.enc, ws->scratch, ws->denc, &ea, ws->xs, im->p.enc, ws->slen, B, S, H, H,
                             d->enc_layers, 1);
    /* dropout on the embeddings, then the embeddings (dtmp/dcur as the pre-dropout gradients) */
    float *dt = ws->dtop; /* (BT, H), free now */
    memset(dt, 0, BT * H * sizeof(float));
    nn_dropout_backward(dt, ws->dxt, BT * H, p, dropout_key(ws->seed, ws->step, SITE_TGT));
    nn_embedding_backward(im->g.dec_emb, NULL, dt, ws->tgt_in, B, T, H, 1.0f, pad);
    float *ds = ws->denc; /* (BS, >= H), free now */
    memset(ds, 0, BS * H * sizeof(float));
    nn_dropout_backward(ds, ws->dxs, BS * H, p, dropout_key(ws->seed, ws->step, SITE_SRC));
    nn_embedding_backward(im->g.enc_emb, NULL, ds, ws->src, B, S, H, 1.0f, pad);
    return nn_rnn_lowp_end();
}

static int gn_backward_stages(const train_model_t *m) { (void)m; return 1; }
static int gn_tensor_stage(const train_model_t *m, int i) { (void)m; (void)i; return 0; }
static void gn_set_hook(void *ws, train_backward_hook_t hook, void *user) {
    ((gn_ws_t *)ws)->hook = hook;
    ((gn_ws_t *)ws)->hook_user = user;
}

/* ------------------------------------------------------------ `tern train` options */

#define F(field) offsetof(gnmt_train_config_t, field)
#define NO2 TRAIN_OPT_NO_FIELD2

static const train_option_t GN_OPTIONS[] = {
    {"layers", TRAIN_OPT_INT, F(enc_layers), F(dec_layers), 1, 1000, 0, NULL, NULL,
     "  --layers N                  encoder and decoder LSTM layers (default 4; GNMT: 8);\n"
     "                              --encoder-layers N, --decoder-layers N for one side\n"},
    {"encoder-layers", TRAIN_OPT_INT, F(enc_layers), NO2, 1, 1000, 0, NULL, NULL, NULL},
    {"decoder-layers", TRAIN_OPT_INT, F(dec_layers), NO2, 1, 1000, 0, NULL, NULL, NULL},
    {"hidden", TRAIN_OPT_INT, F(hidden), NO2, 1, 1 << 16, 0, NULL, NULL,
     "  --hidden N                  LSTM state and embedding width (default 512; --d-model N alike)\n"},
    {"d-model", TRAIN_OPT_INT, F(hidden), NO2, 1, 1 << 16, 0, NULL, NULL, NULL},
    {"attention-size", TRAIN_OPT_INT, F(att), NO2, 1, 1 << 16, 0, NULL, NULL,
     "  --attention-size N          attention hidden size (default: --hidden)\n"},
    {"init-uniform", TRAIN_OPT_FLOAT, F(init_range), NO2, 0, 10, 0, NULL, NULL,
     "  --init-uniform R            every parameter uniform in [-R, R] (GNMT: 0.04; default: +-1/sqrt(fan-in))\n"},
    {"tie-projection", TRAIN_OPT_SET, F(tie_proj), NO2, 0, 0, 1, NULL, NULL,
     "  --tie-projection            the output projection is the decoder embedding\n"},
    TRAIN_OPT_SHARE_EMBEDDINGS(gnmt_train_config_t, share_emb,
     "  --share-embeddings | --no-share-embeddings\n"
     "                              one embedding matrix for both sides (default: when the vocabulary\n"
     "                              is joint)\n"),
    TRAIN_OPT_LABEL_SMOOTHING(gnmt_train_config_t, label_smoothing),
    {"dropout", TRAIN_OPT_FLOAT, F(dropout), NO2, 0, 0.99, 0, NULL, NULL,
     "  --dropout P                 on the embeddings, between layers and before the softmax\n"
     "                              (default 0.2; GNMT clips at --clip-norm 5)\n"},
    TRAIN_OPT_PRECISION(gnmt_train_config_t, bf16,
     "  --precision P               float32 (default) or bfloat16 GEMMs (needs AVX512_BF16)\n"),
    {"gnmt-clip-delta", TRAIN_OPT_FLOAT, F(clip_delta), NO2, 0, 1e6, 0, NULL, NULL,
     "  --gnmt-clip-delta D         GNMT's quantizable model: clip every LSTM cell state and residual\n"
     "                              layer output to [-D, D] in training and inference (D >= 1; paper: 1)\n"},
    {"gnmt-clip-delta-start", TRAIN_OPT_FLOAT, F(clip_delta_start), NO2, 1, 1e6, 0, NULL, NULL,
     "  --gnmt-clip-delta-start D0  anneal the clip linearly from D0 (default 8, the paper's) ...\n"},
    {"gnmt-clip-anneal", TRAIN_OPT_INT, F(clip_anneal), NO2, 0, 1 << 30, 0, NULL, NULL,
     "  --gnmt-clip-anneal N        ... to D over the first N training micro-batches (default 0: D throughout)\n"},
    {"gnmt-clip-gamma", TRAIN_OPT_FLOAT, F(clip_gamma), NO2, 0, 1e6, 0, NULL, NULL,
     "  --gnmt-clip-gamma G         clip the softmax logits to [-G, G] (paper: 25)\n"},
    TRAIN_OPT_END,
};
#undef F
#undef NO2

static const char *gn_check_options(const void *config) {
    const gnmt_train_config_t *c = config;
    if (c->clip_delta > 0 && c->clip_delta < 1)
        return "--gnmt-clip-delta must be 0 (off) or >= 1 (a layer's output o*tanh(c) lies in [-1, 1])";
    if (c->clip_delta <= 0 && c->clip_anneal > 0) return "--gnmt-clip-anneal needs --gnmt-clip-delta";
    if (c->clip_anneal > 0 && c->clip_delta_start < c->clip_delta)
        return "--gnmt-clip-delta-start must be >= --gnmt-clip-delta";
    return NULL;
}

static void gn_set_weights(void *ws, const float *w) { ((gn_ws_t *)ws)->sent_w = w; }

const train_family_t train_family_gnmt = {
    .architecture = GNMT_ARCHITECTURE,
    .spec_name = GNMT_SPEC_NAME,
    .desc = &GNMT_DESC,
    .config_size = sizeof(gnmt_train_config_t),
    .options = GN_OPTIONS,
    .options_title = "GNMT (--architecture gnmt; docs/rnn.md):",
    .check_options = gn_check_options,
    .create = gn_create,
    .destroy = gn_destroy,
    .init_params = gn_init_params,
    .load = gn_load,
    .config_from_model = gn_config_from_model,
    .params_changed = gn_params_changed,
    .config_values = gn_config_values,
    .scalars = gn_scalars,
    .describe = gn_describe,
    .default_config = gn_default_config,
    .ws_new = gn_ws_new,
    .ws_free = gn_ws_free,
    .ws_bytes = gn_ws_bytes,
    .forward = gn_forward,
    .backward = gn_backward,
    .backward_stages = gn_backward_stages,
    .tensor_stage = gn_tensor_stage,
    .set_backward_hook = gn_set_hook,
    .set_sentence_weights = gn_set_weights,
};
