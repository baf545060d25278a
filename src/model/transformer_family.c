/*
 * transformer_family.c — the Transformer behind the model family table (family.h): the only
 * place outside transformer*.c/h that would otherwise name it is the registry's one entry.
 */
#include <stdlib.h>
#include <string.h>

#include "model/family.h"
#include "model/transformer.h"
#include "model/transformer_desc.h"

static tern_status_t tf_build(void **net, weights_t *w, const model_config_t *cfg, tern_compute_type_t compute,
                              unsigned flags) {
    *net = NULL;
    transformer_t *m = calloc(1, sizeof *m);
    if (!m) return tern_error(TERN_ERR_NOMEM, "out of memory");
    tern_status_t st = transformer_build(m, w, compute, cfg->layer_norm_epsilon);
    m->keep_proj = (flags & MODEL_BUILD_VOCAB_MAP) != 0;
    if (!st) st = transformer_pack(m, w);
    if (st) {
        transformer_free(m);
        free(m);
        return st;
    }
    tern_hparam_t *h = m->hparams;
    h[0] = (tern_hparam_t){"encoder_layers", m->enc_layers, NULL};
    h[1] = (tern_hparam_t){"decoder_layers", m->dec_layers, NULL};
    h[2] = (tern_hparam_t){"d_model", m->d, NULL};
    h[3] = (tern_hparam_t){"num_heads", m->H, NULL};
    h[4] = (tern_hparam_t){"ffn_dim", m->F, NULL};
    h[5] = (tern_hparam_t){"norm", m->pre_norm, m->pre_norm ? "pre" : "post"};
    h[6] = (tern_hparam_t){"decoder_self", m->dec_ssru, m->dec_ssru ? "ssru" : "attention"}; /* Marian's --dec-cell ssru */
    *net = m;
    return TERN_OK;
}

static void tf_free(void *net) {
    if (!net) return;
    transformer_free(net);
    free(net);
}

static void tf_describe(const void *net, tern_model_info_t *in) {
    const transformer_t *m = net;
    in->family = "transformer";
    in->source_vocab_size = m->src_vocab;
    in->target_vocab_size = m->tgt_vocab;
    in->max_source_length = m->enc_max_pos;
    in->max_target_length = m->dec_max_pos;
    in->int8 = m->int8;
    in->weight_bytes = m->weight_bytes;
    in->num_hparams = m->dec_ssru ? 7 : 6; /* decoder_self only where it is an SSRU */
    in->hparams = m->hparams;
}

static const char *tf_vocab_tensor(const void *net, const weights_t *w, int target) {
    (void)net;
    const char *enc = desc_global_name(&TRANSFORMER_DESC, TM_ENC_EMB, TP_WEIGHT);
    if (target) return desc_global_name(&TRANSFORMER_DESC, TM_DEC_EMB, TP_WEIGHT);
    return weights_get(w, enc) ? enc : TRANSFORMER_ENC_EMB_ALT;
}

static void *tf_state_new(const void *net) { return transformer_state_new(net); }
static void tf_state_free(void *st) { transformer_state_free(st); }
static tern_status_t tf_encode(void *st, const int *const *src, const int *len, int N) {
    return transformer_encode(st, src, len, N);
}
static tern_status_t tf_admit(void *st, const int *const *src, const int *len, int n) {
    return transformer_admit(st, src, len, n);
}
static tern_status_t tf_set_argmax_never(void *st, const int *toks, int n) {
    if (transformer_set_argmax_never(st, toks, n))
        return tern_error(TERN_ERR_UNSUPPORTED, "argmax without %d token(s): not with this projection", n);
    return TERN_OK;
}

static tern_status_t tf_set_argmax_ban(void *st, int tok, const unsigned char *rows) {
    if (transformer_set_argmax_ban(st, tok, rows))
        return tern_error(TERN_ERR_UNSUPPORTED, "screened steps are not the full layer's bits here");
    return TERN_OK;
}
static int tf_source_len(const void *st) { return transformer_source_len(st); }
static tern_status_t tf_step(void *st, const int *tokens, int t, float *out, float *attn) {
    return transformer_step(st, tokens, t, out, attn);
}
static tern_status_t tf_set_rows(void *st, const int *parent, const int *sent, int R) {
    return transformer_set_rows(st, parent, sent, R);
}
static tern_status_t tf_set_vocab(void *st, const int *ids, int n) { return transformer_set_vocab(st, ids, n); }
static tern_status_t tf_set_rows_apart(void *st, int on) {
    transformer_set_rows_apart(st, on);
    return TERN_OK;
}
static tern_status_t tf_set_argmax_only(void *st, int on) {
    transformer_set_argmax_only(st, on);
    return TERN_OK;
}

const model_family_t model_family_transformer = {
    .name = "transformer",
    .desc = &TRANSFORMER_DESC,
    .step_logprobs = 0,
    .build = tf_build,
    .deferred_weights = 1,
    .free = tf_free,
    .describe = tf_describe,
    .vocab_tensor = tf_vocab_tensor,
    .state_new = tf_state_new,
    .state_free = tf_state_free,
    .encode = tf_encode,
    .source_len = tf_source_len,
    .step = tf_step,
    .set_rows = tf_set_rows,
    .set_vocab = tf_set_vocab,
    .set_argmax_only = tf_set_argmax_only,
    .admit = tf_admit,
    .set_argmax_ban = tf_set_argmax_ban,
    .set_argmax_never = tf_set_argmax_never,
    .set_rows_apart = tf_set_rows_apart,
};
