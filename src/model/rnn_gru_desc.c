/*
 * rnn_gru_desc.c — names, shapes and config keys of the GRU family (rnn_gru_desc.h).
 */
#include <stdio.h>
#include <string.h>

#include "model/rnn_gru_desc.h"
#include "nn/rnn.h"

static const char *const NAMES[RG_COUNT] = {
    "encoder/embeddings/weight",
    "encoder/forward/w_ih", "encoder/forward/w_hh", "encoder/forward/b_ih", "encoder/forward/b_hh",
    "encoder/backward/w_ih", "encoder/backward/w_hh", "encoder/backward/b_ih", "encoder/backward/b_hh",
    "decoder/embeddings/weight",
    "decoder/init/weight", "decoder/init/bias",
    "decoder/gru1/w_ih", "decoder/gru1/w_hh", "decoder/gru1/b_ih", "decoder/gru1/b_hh",
    "decoder/attention/query/weight",
    "decoder/attention/key/weight", "decoder/attention/key/bias",
    "decoder/attention/v",
    "decoder/gru2/w_ih", "decoder/gru2/w_hh", "decoder/gru2/b_ih", "decoder/gru2/b_hh",
    "decoder/output/state/weight", "decoder/output/context/weight", "decoder/output/embedding/weight",
    "decoder/output/bias",
    "decoder/projection/weight", "decoder/projection/bias",
    "encoder/forward/ln_ih/gain", "encoder/forward/ln_ih/bias", "encoder/forward/ln_hh/gain",
    "encoder/forward/ln_hh/bias",
    "encoder/backward/ln_ih/gain", "encoder/backward/ln_ih/bias", "encoder/backward/ln_hh/gain",
    "encoder/backward/ln_hh/bias",
    "decoder/gru1/ln_ih/gain", "decoder/gru1/ln_ih/bias", "decoder/gru1/ln_hh/gain", "decoder/gru1/ln_hh/bias",
    "decoder/gru2/ln_ih/gain", "decoder/gru2/ln_ih/bias", "decoder/gru2/ln_hh/gain", "decoder/gru2/ln_hh/bias",
};

static const char *const KEYS[RGKEY_COUNT] = {
    "rnn/embedding_size", "rnn/encoder_hidden_size", "rnn/decoder_hidden_size", "rnn/attention_size",
    "rnn/output_size", "rnn/layer_norm",
};

const char *rnn_gru_tensor_name(rg_tensor_t i) { return (unsigned)i < RG_COUNT ? NAMES[i] : "?"; }
const char *rnn_gru_key_name(rg_key_t k) { return (unsigned)k < RGKEY_COUNT ? KEYS[k] : "?"; }

void rnn_gru_tensor_shape(const rnn_gru_dims_t *d, rg_tensor_t i, int *rows, int *cols) {
    int E = d->emb, He = d->enc_hidden, Hd = d->dec_hidden, Dv = 2 * He, A = d->att, O = d->out;
    int r = 0, c = 0;
    switch (i) {
    case RG_ENC_EMB: r = d->src_vocab, c = E; break;
    case RG_ENC_F_WIH: case RG_ENC_B_WIH: r = 3 * He, c = E; break;
    case RG_ENC_F_WHH: case RG_ENC_B_WHH: r = 3 * He, c = He; break;
    case RG_ENC_F_BIH: case RG_ENC_F_BHH: case RG_ENC_B_BIH: case RG_ENC_B_BHH: r = 3 * He; break;
    case RG_DEC_EMB: r = d->tgt_vocab, c = E; break;
    case RG_INIT_W: r = Hd, c = Dv; break;
    case RG_INIT_B: r = Hd; break;
    case RG_GRU1_WIH: r = 3 * Hd, c = E; break;
    case RG_GRU1_WHH: case RG_GRU2_WHH: r = 3 * Hd, c = Hd; break;
    case RG_GRU1_BIH: case RG_GRU1_BHH: case RG_GRU2_BIH: case RG_GRU2_BHH: r = 3 * Hd; break;
    case RG_ATT_WQ: r = A, c = Hd; break;
    case RG_ATT_WK: r = A, c = Dv; break;
    case RG_ATT_B: case RG_ATT_V: r = A; break;
    case RG_GRU2_WIH: r = 3 * Hd, c = Dv; break;
    case RG_OUT_WS: r = O, c = Hd; break;
    case RG_OUT_WC: r = O, c = Dv; break;
    case RG_OUT_WE: r = O, c = E; break;
    case RG_OUT_B: r = O; break;
    case RG_PROJ_W: r = d->tgt_vocab, c = O; break;
    case RG_PROJ_B: r = d->tgt_vocab; break;
    default:
        if (i >= RG_LN_FIRST && i <= RG_LN_LAST) r = 3 * (i < RG_LN_FIRST + 8 ? He : Hd);
        break;
    }
    *rows = r;
    *cols = c;
}

int rnn_gru_tensor_used(const rnn_gru_dims_t *d, rg_tensor_t i) {
    return i < RG_LN_FIRST || d->layer_norm;
}

void rnn_gru_views(const rnn_gru_dims_t *d, float *const *P, void *enc_f, void *enc_b, void *dec) {
    rnn_cell_t *cells[4];
    cgru_weights_t *w = dec;
    *(rnn_cell_t *)enc_f = (rnn_cell_t){.w_ih = P[RG_ENC_F_WIH], .w_hh = P[RG_ENC_F_WHH], .b_ih = P[RG_ENC_F_BIH],
                                        .b_hh = P[RG_ENC_F_BHH]};
    *(rnn_cell_t *)enc_b = (rnn_cell_t){.w_ih = P[RG_ENC_B_WIH], .w_hh = P[RG_ENC_B_WHH], .b_ih = P[RG_ENC_B_BIH],
                                        .b_hh = P[RG_ENC_B_BHH]};
    *w = (cgru_weights_t){
        .gru1 = {.w_ih = P[RG_GRU1_WIH], .w_hh = P[RG_GRU1_WHH], .b_ih = P[RG_GRU1_BIH], .b_hh = P[RG_GRU1_BHH]},
        .gru2 = {.w_ih = P[RG_GRU2_WIH], .w_hh = P[RG_GRU2_WHH], .b_ih = P[RG_GRU2_BIH], .b_hh = P[RG_GRU2_BHH]},
        .att_wq = P[RG_ATT_WQ], .att_wk = P[RG_ATT_WK], .att_b = P[RG_ATT_B], .att_v = P[RG_ATT_V],
        .out_ws = P[RG_OUT_WS], .out_wc = P[RG_OUT_WC], .out_we = P[RG_OUT_WE], .out_b = P[RG_OUT_B],
        .out_wo = P[RG_PROJ_W], .out_bo = P[RG_PROJ_B],
    };
    if (!d->layer_norm) return;
    cells[0] = enc_f, cells[1] = enc_b, cells[2] = &w->gru1, cells[3] = &w->gru2;
    for (int c = 0; c < 4; c++) {
        const int k = RG_LN_FIRST + 4 * c;
        cells[c]->ln_ih_g = P[k], cells[c]->ln_ih_b = P[k + 1];
        cells[c]->ln_hh_g = P[k + 2], cells[c]->ln_hh_b = P[k + 3];
    }
}

int rnn_gru_tensor_stored(const rnn_gru_dims_t *d, rg_tensor_t i) {
    if (!rnn_gru_tensor_used(d, i)) return 0;
    if (i == RG_DEC_EMB && d->share_emb) return 0;
    if (i == RG_PROJ_W && d->tie_proj) return 0;
    return 1;
}

int rnn_gru_desc_aliases(const rnn_gru_dims_t *d, const char *names[2], const char *targets[2]) {
    int n = 0;
    if (d->share_emb) names[n] = NAMES[RG_DEC_EMB], targets[n++] = NAMES[RG_ENC_EMB];
    if (d->tie_proj)
        names[n] = NAMES[RG_PROJ_W], targets[n++] = d->share_emb ? NAMES[RG_ENC_EMB] : NAMES[RG_DEC_EMB];
    return n;
}

int rnn_gru_tensor_is_matrix(rg_tensor_t i) {
    switch (i) {
    case RG_ENC_F_WIH: case RG_ENC_F_WHH: case RG_ENC_B_WIH: case RG_ENC_B_WHH: case RG_INIT_W:
    case RG_GRU1_WIH: case RG_GRU1_WHH: case RG_ATT_WQ: case RG_ATT_WK: case RG_GRU2_WIH: case RG_GRU2_WHH:
    case RG_OUT_WS: case RG_OUT_WC: case RG_OUT_WE: case RG_PROJ_W:
        return 1;
    default:
        return 0;
    }
}

int rnn_gru_desc_scalars(rnn_gru_scalars_t *s, const rnn_gru_dims_t *d) {
    int32_t v[RGKEY_COUNT] = {d->emb, d->enc_hidden, d->dec_hidden, d->att, d->out, d->layer_norm};
    for (int k = 0; k < RGKEY_COUNT; k++) {
        s->v[k] = v[k];
        memset(&s->t[k], 0, sizeof s->t[k]);
        s->t[k].name = KEYS[k];
        s->t[k].dtype = DT_I32;
        s->t[k].rank = 0;
        s->t[k].numel = 1;
        s->t[k].data = &s->v[k];
        s->t[k].nbytes = sizeof(int32_t);
    }
    return RGKEY_COUNT;
}

/* Whether name is stored as an alias of target in w. */
static int is_alias_of(const weights_t *w, const char *name, const char *target) {
    for (int i = 0; i < weights_alias_count(w); i++) {
        const char *t = NULL, *a = weights_alias_at(w, i, &t);
        if (a && t && !strcmp(a, name) && !strcmp(t, target)) return 1;
    }
    return 0;
}

tern_status_t rnn_gru_desc_read(rnn_gru_dims_t *d, const weights_t *w) {
    const char *path = weights_path(w);
    memset(d, 0, sizeof *d);
    int *dst[RGKEY_COUNT] = {&d->emb, &d->enc_hidden, &d->dec_hidden, &d->att, &d->out, &d->layer_norm};
    for (int k = 0; k < RGKEY_COUNT; k++) {
        int64_t v = 0;
        if (k == RGKEY_LAYER_NORM) { /* optional: models written before it have no normalization */
            if (!weights_get_int(w, KEYS[k], &v)) v = 0;
            if (v != 0 && v != 1)
                return tern_error(TERN_ERR_FORMAT, "%s: config key '%s' = %lld must be 0 or 1", path, KEYS[k],
                                  (long long)v);
            *dst[k] = (int)v;
            continue;
        }
        if (!weights_get_int(w, KEYS[k], &v))
            return tern_error(TERN_ERR_FORMAT, "%s: config key tensor '%s' is missing (an rnn-gru model stores its "
                              "sizes as rank-0 tensors)", path, KEYS[k]);
        if (v < 1 || v > (1 << 20))
            return tern_error(TERN_ERR_FORMAT, "%s: config key '%s' = %lld is out of range", path, KEYS[k],
                              (long long)v);
        *dst[k] = (int)v;
    }
    const tensor_t *es = weights_get(w, NAMES[RG_ENC_EMB]), *et = weights_get(w, NAMES[RG_DEC_EMB]);
    if (!es) return tern_error(TERN_ERR_FORMAT, "%s: tensor '%s' is missing", path, NAMES[RG_ENC_EMB]);
    if (!et) return tern_error(TERN_ERR_FORMAT, "%s: tensor '%s' is missing", path, NAMES[RG_DEC_EMB]);
    if (es->rank != 2 || et->rank != 2)
        return tern_error(TERN_ERR_FORMAT, "%s: tensor '%s' is not a matrix", path,
                          es->rank != 2 ? NAMES[RG_ENC_EMB] : NAMES[RG_DEC_EMB]);
    d->src_vocab = (int)es->shape[0];
    d->tgt_vocab = (int)et->shape[0];
    d->share_emb = is_alias_of(w, NAMES[RG_DEC_EMB], NAMES[RG_ENC_EMB]);
    d->tie_proj = is_alias_of(w, NAMES[RG_PROJ_W], NAMES[RG_DEC_EMB]) ||
                  is_alias_of(w, NAMES[RG_PROJ_W], NAMES[RG_ENC_EMB]);
    for (int i = 0; i < RG_COUNT; i++) {
        if (!rnn_gru_tensor_used(d, (rg_tensor_t)i)) continue;
        const tensor_t *t = weights_get(w, NAMES[i]);
        if (!t)
            return tern_error(TERN_ERR_FORMAT, "%s: tensor '%s' is missing%s", path, NAMES[i],
                              i >= RG_LN_FIRST ? " (rnn/layer_norm = 1)" : "");
        int r, c;
        rnn_gru_tensor_shape(d, (rg_tensor_t)i, &r, &c);
        int rank = c ? 2 : 1;
        if (t->rank != rank || t->shape[0] != r || (rank == 2 && t->shape[1] != c)) {
            char got[64];
            if (t->rank == 2) snprintf(got, sizeof got, "(%lld, %lld)", (long long)t->shape[0], (long long)t->shape[1]);
            else if (t->rank == 1) snprintf(got, sizeof got, "(%lld)", (long long)t->shape[0]);
            else snprintf(got, sizeof got, "rank %d", t->rank);
            char want[64];
            if (rank == 2) snprintf(want, sizeof want, "(%d, %d)", r, c);
            else snprintf(want, sizeof want, "(%d)", r);
            return tern_error(TERN_ERR_FORMAT, "%s: tensor '%s' has shape %s, but the config keys (E %d, He %d, Hd %d, "
                              "A %d, O %d) and vocabularies (%d/%d) give %s", path, NAMES[i], got, d->emb,
                              d->enc_hidden, d->dec_hidden, d->att, d->out, d->src_vocab, d->tgt_vocab, want);
        }
        char sc[128];
        snprintf(sc, sizeof sc, "%s_scale", NAMES[i]);
        if (t->dtype == DT_I8 && !weights_get(w, sc))
            return tern_error(TERN_ERR_FORMAT, "%s: int8 tensor '%s' has no '%s'", path, NAMES[i], sc);
    }
    return TERN_OK;
}
