/*
 * model_table.c — the Transformer's training table (family.h) over src/train/model.c: its
 * configuration, its `tern train` options and its operations.
 */
#include "train/family.h"
#include "train/model.h"
#include "model/transformer_desc.h"

#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    tmodel_t m;
    transformer_scalars_t scalars; /* the config keys of the model files */
    int n_scalars;                 /* TKEY_WRITTEN, + 1 with decoder/marian_never_unk */
    int joint;                     /* one vocabulary for both sides (for describe) */
} tf_impl_t;

static tmodel_t *tm(const train_model_t *m) { return &((tf_impl_t *)m->impl)->m; }

static void tf_destroy(train_model_t *m) {
    if (!m->impl) return;
    tmodel_free(tm(m));
    free(m->impl);
    memset(m, 0, sizeof *m);
}

static tern_status_t tf_create(train_model_t *m, const void *config, const train_data_dims_t *data) {
    memset(m, 0, sizeof *m);
    tmodel_config_t c = *(const tmodel_config_t *)config;
    if (c.share_emb < 0) c.share_emb = data->joint_vocab; /* auto */
    c.src_vocab = data->src_vocab;
    c.tgt_vocab = data->tgt_vocab;
    c.pad_id = data->pad_id;
    if (c.max_pos < 0 && -c.max_pos < data->max_len) /* a model's learned table (--init-from) */
        return tern_error(TERN_ERR_INVALID_ARG, "the model's position tables have %d rows, but sentences of up to %d "
                          "tokens are accepted: lower --max-len to %d", -c.max_pos, data->max_len, -c.max_pos);
    c.max_pos = c.max_pos < 0 ? -c.max_pos : data->max_len;
    if (c.share_emb && !data->joint_vocab)
        return tern_error(TERN_ERR_INVALID_ARG, "shared embeddings need one joint vocabulary (the vocabulary has a "
                          "source and a target side)");
    tf_impl_t *impl = calloc(1, sizeof *impl);
    if (!impl) return tern_error(TERN_ERR_NOMEM, "out of memory");
    tern_status_t st = tmodel_init(&impl->m, &c);
    if (st) {
        free(impl);
        return st;
    }
    tmodel_t *t = &impl->m;
    impl->joint = data->joint_vocab;
    transformer_spec_t spec = {c.heads, c.pre_norm, (int)c.act, c.scale_emb};
    impl->n_scalars = transformer_desc_scalars(&impl->scalars, &spec);
    if (c.never_unk) { /* a Marian model's decoding rule, kept by its fine-tuned checkpoints */
        int k = impl->n_scalars++;
        impl->scalars.v[k].i8 = 1;
        impl->scalars.t[k] = (tensor_t){.name = transformer_key_name(TKEY_DEC_NEVER_UNK), .dtype = DT_I8, .rank = 0,
                                        .numel = 1, .data = &impl->scalars.v[k].i8, .nbytes = 1};
    }
    m->family = &train_family_transformer;
    m->impl = impl;
    m->n_params = t->n_params;
    m->params = t->params;
    m->grads = t->grads;
    m->n_tensors = t->n_tensors;
    m->tensors = t->tensors;
    m->n_aliases = t->n_aliases;
    m->alias_names = t->alias_name;
    m->alias_targets = t->alias_target;
    m->layer_norm_epsilon = c.eps;
    return TERN_OK;
}

/* A tensor of w by its description name, or NULL. */
static const tensor_t *tf_get(const weights_t *w, tmodule_t mod, int layer, tpart_t part) {
    char n[160];
    const tensor_t *t = weights_get(w, transformer_tensor_name(n, sizeof n, mod, layer, part));
    if (!t && mod == TM_ENC_EMB && part == TP_WEIGHT) t = weights_get(w, TRANSFORMER_ENC_EMB_ALT);
    return t;
}

static int64_t tf_key(const weights_t *w, tkey_t k, int64_t dflt) {
    int64_t v = dflt;
    weights_get_int(w, transformer_key_name(k), &v);
    return v;
}

/* --init-from: the shape of the model in w (and config.json's epsilon) over c. */
static tern_status_t tf_config_from_model(void *config, const weights_t *w, const model_config_t *mc) {
    tmodel_config_t *c = config;
    const char *file = weights_path(w);
    const tensor_t *ee = tf_get(w, TM_ENC_EMB, -1, TP_WEIGHT), *de = tf_get(w, TM_DEC_EMB, -1, TP_WEIGHT),
                   *pw = tf_get(w, TM_PROJ, -1, TP_WEIGHT), *f1 = tf_get(w, TM_ENC_FFN1, 0, TP_WEIGHT),
                   *pos = tf_get(w, TM_ENC_POS, -1, TP_ENCODINGS);
    if (!ee || !de || !pw || !f1 || ee->rank != 2 || f1->rank != 2)
        return tern_error(TERN_ERR_FORMAT, "%s: not a Transformer of Tern's or CTranslate2's layout (no encoder "
                          "embedding, decoder embedding, projection or first feed-forward layer)", file);
    if (tf_key(w, TKEY_DEC_SSRU, 0))
        return tern_error(TERN_ERR_UNSUPPORTED, "%s: an SSRU decoder (Marian's --dec-cell ssru): Tern decodes it but "
                          "trains self-attention decoders only", file);
    /* A pre-norm Marian model (decoder/marian_raw_self_kv): Marian's incremental decoder takes the
     * self-attention keys and values of steps >= 1 before the layer norm, but Marian trains it with
     * them after the norm, as every pre-norm Transformer. Training here is Marian's training; the
     * key is read-only, so the checkpoints are plain pre-norm Transformers that decode as they
     * trained (the trainer's log says so). */
    c->d = (int)ee->shape[1];
    c->ff = (int)f1->shape[0];
    c->enc_layers = c->dec_layers = 0;
    while (tf_get(w, TM_ENC_FFN1, c->enc_layers, TP_WEIGHT)) c->enc_layers++;
    while (tf_get(w, TM_DEC_FFN1, c->dec_layers, TP_WEIGHT)) c->dec_layers++;
    if (!c->dec_layers) return tern_error(TERN_ERR_FORMAT, "%s: no decoder layers", file);
    c->never_unk = (int)tf_key(w, TKEY_DEC_NEVER_UNK, 0) != 0;
    c->heads = (int)tf_key(w, TKEY_ENC_HEADS, 8);
    c->pre_norm = (int)tf_key(w, TKEY_ENC_PRE_NORM, 1);
    c->act = (activation_t)tf_key(w, TKEY_ENC_ACT, ACT_RELU);
    c->scale_emb = (int)tf_key(w, TKEY_ENC_SCALE_EMB, 1);
    if (c->heads < 1 || c->d % c->heads)
        return tern_error(TERN_ERR_MISMATCH, "%s: %d heads do not divide the width %d", file, c->heads, c->d);
    c->learned_pos = pos != NULL;
    c->max_pos = pos ? -(int)pos->shape[0] : 0; /* < 0: the model's table, kept (tf_create) */
    c->share_emb = de->data == ee->data;
    c->tie_proj = pw->data == de->data;
    c->proj_bias = tf_get(w, TM_PROJ, -1, TP_BIAS) != NULL;
    c->eps = mc->layer_norm_epsilon > 0 ? mc->layer_norm_epsilon : 1e-6f;
    return TERN_OK;
}

static void tf_init_params(train_model_t *m, uint64_t seed) { tmodel_init_params(tm(m), seed); }
static tern_status_t tf_load(train_model_t *m, const weights_t *w) { return tmodel_load(tm(m), w); }
static void tf_params_changed(train_model_t *m) { tmodel_params_changed(tm(m)); }

static int tf_config_values(const train_model_t *m, ckpt_value_t *v) {
    const tmodel_config_t *c = &tm(m)->cfg;
    enum { N = 15 };
    static const char *names[N] = {"model:src_vocab", "model:tgt_vocab", "model:d", "model:heads", "model:ff",
                                   "model:enc_layers", "model:dec_layers", "model:max_pos", "model:pre_norm",
                                   "model:act", "model:learned_pos", "model:scale_emb", "model:share_emb",
                                   "model:tie_proj", "model:proj_bias"};
    int vals[N] = {c->src_vocab, c->tgt_vocab, c->d, c->heads, c->ff, c->enc_layers, c->dec_layers,
                   c->max_pos, c->pre_norm, (int)c->act, c->learned_pos, c->scale_emb, c->share_emb,
                   c->tie_proj, c->proj_bias};
    for (int i = 0; i < N; i++) v[i] = (ckpt_value_t){.name = names[i], .type = CKPT_INT, .i = vals[i]};
    return N;
}

static int tf_scalars(const train_model_t *m, const tensor_t **out) {
    *out = ((const tf_impl_t *)m->impl)->scalars.t;
    return ((const tf_impl_t *)m->impl)->n_scalars;
}

static int tf_describe(const train_model_t *m, int line, char *buf, size_t n) {
    const tmodel_config_t *c = &tm(m)->cfg;
    if (line == 1 && c->precision == TPREC_BF16) {
        snprintf(buf, n, "precision: bfloat16 linear layers (bfloat16 operands, float32 accumulation; AVX512_BF16 "
                 "through oneDNN), float32 master weights, gradients and optimizer");
        return 1;
    }
    if (line != 0) return 0;
    static const char *acts[] = {"relu", "gelu-tanh", "swish", "gelu", "gelu-sigmoid", "tanh"};
    char voc[64];
    if (((const tf_impl_t *)m->impl)->joint) snprintf(voc, sizeof voc, "%d joint", c->src_vocab);
    else snprintf(voc, sizeof voc, "%d/%d", c->src_vocab, c->tgt_vocab);
    snprintf(buf, n, "%d+%d layers, d %d, ff %d, %d heads, %s, %s, vocabulary %s, %s embeddings, %.2fM parameters",
             c->enc_layers, c->dec_layers, c->d, c->ff, c->heads, c->pre_norm ? "pre-norm" : "post-norm",
             (unsigned)c->act < 6 ? acts[c->act] : "?", voc,
             c->share_emb ? (c->tie_proj ? "shared + tied" : "shared") : (c->tie_proj ? "tied" : "separate"),
             (double)tm(m)->n_params / 1e6);
    return 1;
}

/* tmodel_default_config(), the embeddings shared when the vocabulary is joint. */
static void tf_default_config(void *config) {
    tmodel_config_t *c = config;
    *c = tmodel_default_config();
    c->share_emb = -1;
}

/* ------------------------------------------------------------ `tern train` options */

#define F(field) offsetof(tmodel_config_t, field)
#define NO2 TRAIN_OPT_NO_FIELD2
static const char *const ACT_NAMES[] = {"relu", "gelu", "gelu-tanh", "swish", NULL};
static const int ACT_VALUES[] = {ACT_RELU, ACT_GELU, ACT_GELU_TANH, ACT_SWISH};

static const train_option_t TF_OPTIONS[] = {
    {"layers", TRAIN_OPT_INT, F(enc_layers), F(dec_layers), 1, 1000, 0, NULL, NULL,
     "  --layers N                  encoder and decoder layers (default 6); --encoder-layers N,\n"
     "                              --decoder-layers N for one side\n"},
    {"encoder-layers", TRAIN_OPT_INT, F(enc_layers), NO2, 1, 1000, 0, NULL, NULL, NULL},
    {"decoder-layers", TRAIN_OPT_INT, F(dec_layers), NO2, 1, 1000, 0, NULL, NULL, NULL},
    {"d-model", TRAIN_OPT_INT, F(d), NO2, 2, 1 << 16, 0, NULL, NULL,
     "  --d-model N                 width (default 512)\n"},
    {"ff", TRAIN_OPT_INT, F(ff), NO2, 1, 1 << 20, 0, NULL, NULL,
     "  --ff N                      feed-forward width (default 2048)\n"},
    {"heads", TRAIN_OPT_INT, F(heads), NO2, 1, 1024, 0, NULL, NULL,
     "  --heads N                   attention heads (default 8)\n"},
    {"pre-norm", TRAIN_OPT_SET, F(pre_norm), NO2, 0, 0, 1, NULL, NULL,
     "  --pre-norm | --post-norm    layer norm placement (default pre-norm)\n"},
    {"post-norm", TRAIN_OPT_SET, F(pre_norm), NO2, 0, 0, 0, NULL, NULL, NULL},
    {"activation", TRAIN_OPT_CHOICE, F(act), NO2, 0, 0, 0, ACT_NAMES, ACT_VALUES,
     "  --activation A              relu (default), gelu, gelu-tanh, swish\n"},
    TRAIN_OPT_SHARE_EMBEDDINGS(tmodel_config_t, share_emb,
     "  --share-embeddings | --no-share-embeddings\n"
     "                              one embedding matrix for encoder and decoder (default: when the\n"
     "                              vocabulary is joint)\n"),
    {"no-tie-projection", TRAIN_OPT_SET, F(tie_proj), NO2, 0, 0, 0, NULL, NULL,
     "  --no-tie-projection         an output projection of its own (default: the decoder embedding)\n"},
    {"projection-bias", TRAIN_OPT_SET, F(proj_bias), NO2, 0, 0, 1, NULL, NULL,
     "  --projection-bias           a bias on the output projection\n"},
    {"learned-positions", TRAIN_OPT_SET, F(learned_pos), NO2, 0, 0, 1, NULL, NULL,
     "  --learned-positions         learned position embeddings (default: sinusoids)\n"},
    {"no-scale-embeddings", TRAIN_OPT_SET, F(scale_emb), NO2, 0, 0, 0, NULL, NULL,
     "  --no-scale-embeddings       do not multiply embeddings by sqrt(d)\n"},
    {"layer-norm-eps", TRAIN_OPT_FLOAT, F(eps), NO2, 0, 1, 0, NULL, NULL,
     "  --layer-norm-eps E          (default 1e-6)\n"},
    TRAIN_OPT_LABEL_SMOOTHING(tmodel_config_t, label_smoothing),
    {"dropout", TRAIN_OPT_FLOAT, F(dropout), NO2, 0, 0.99, 0, NULL, NULL,
     "  --dropout P                 on embeddings and sublayer outputs (default 0.1)\n"},
    {"attention-dropout", TRAIN_OPT_FLOAT, F(attn_dropout), NO2, 0, 0.99, 0, NULL, NULL,
     "  --attention-dropout P       on attention weights (default 0)\n"},
    {"activation-dropout", TRAIN_OPT_FLOAT, F(act_dropout), NO2, 0, 0.99, 0, NULL, NULL,
     "  --activation-dropout P      on the feed-forward activation (default 0)\n"},
    TRAIN_OPT_PRECISION(tmodel_config_t, precision,
     "  --precision P               float32 (default) or bfloat16: linear layers with bfloat16 operands\n"
     "                              and float32 accumulation, float32 master weights (needs AVX512_BF16)\n"),
    TRAIN_OPT_END,
};
#undef F
#undef NO2

static const char *tf_check_options(const void *config) {
    const tmodel_config_t *c = config;
    return c->d % c->heads ? "--d-model must be a multiple of --heads" : NULL;
}

static tern_status_t tf_ws_new(void **ws, const train_model_t *m, int ms, int mt, int mS, int mT) {
    tern_status_t st = tmodel_ws_new((tmodel_ws_t **)ws, tm(m), ms, mt, mS, mT);
    if (!st && m->act_fq && (st = tmodel_ws_set_act_fq(*ws, tm(m), 1))) {
        tmodel_ws_free(*ws);
        *ws = NULL;
    }
    return st;
}
static void tf_ws_free(void *ws) { tmodel_ws_free(ws); }
static size_t tf_ws_bytes(const void *ws) { return tmodel_ws_bytes(ws); }

static tern_status_t tf_forward(train_model_t *m, void *ws, const int *src, const int *tgt_in, const int *tgt_out,
                                int B, int S, int T, int train, uint64_t seed, uint64_t step, train_loss_t *loss) {
    return tmodel_forward(tm(m), ws, src, tgt_in, tgt_out, B, S, T, train, seed, step, loss);
}
static tern_status_t tf_backward(train_model_t *m, void *ws, float grad_scale) {
    return tmodel_backward(tm(m), ws, grad_scale);
}
static int tf_backward_stages(const train_model_t *m) { return tmodel_backward_stages(tm(m)); }
static int tf_tensor_stage(const train_model_t *m, int i) { return tmodel_tensor_stage(tm(m), i); }
static void tf_set_hook(void *ws, train_backward_hook_t hook, void *user) {
    tmodel_ws_set_backward_hook(ws, hook, user);
}

static void tf_set_weights(void *ws, const float *w) { tmodel_ws_set_sentence_weights(ws, w); }

const train_family_t train_family_transformer = {
    .architecture = "transformer",
    .spec_name = TRANSFORMER_SPEC_NAME,
    .desc = &TRANSFORMER_DESC,
    .config_size = sizeof(tmodel_config_t),
    .options = TF_OPTIONS,
    .options_title = "Transformer (--architecture transformer, the default):",
    .check_options = tf_check_options,
    .create = tf_create,
    .destroy = tf_destroy,
    .init_params = tf_init_params,
    .load = tf_load,
    .config_from_model = tf_config_from_model,
    .params_changed = tf_params_changed,
    .config_values = tf_config_values,
    .scalars = tf_scalars,
    .describe = tf_describe,
    .default_config = tf_default_config,
    .ws_new = tf_ws_new,
    .ws_free = tf_ws_free,
    .ws_bytes = tf_ws_bytes,
    .forward = tf_forward,
    .backward = tf_backward,
    .backward_stages = tf_backward_stages,
    .tensor_stage = tf_tensor_stage,
    .set_backward_hook = tf_set_hook,
    .set_sentence_weights = tf_set_weights,
};
