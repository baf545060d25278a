/*
 * rnn_gru_desc.c — names, shapes and config keys of the GRU family (rnn_gru_desc.h).
 */
#include <stdio.h>
#include <string.h>

#include "model/rnn_gru_desc.h"
#include "nn/rnn.h"

/* Shapes: mul × a dimension (desc.h); V: a vector (rank 1). */
#define D(m, d) {m, RGD_##d}
#define V {0, 0}
#define ONE DESC_ONCE, 0, 0, 0
#define ENC DESC_ENCODER
#define DEC DESC_DECODER
#define A DESC_ALWAYS
#define LN RGD_LAYER_NORM

/* The stored tensors, in rg_tensor_t (buffer) order. */
static const desc_spec_t SPECS[RG_COUNT] = {
    [RG_ENC_EMB] = {"encoder/embeddings/weight", ONE, D(1, VS), D(1, E), DESC_F32, ENC, A, NULL, 0},
    [RG_ENC_F_WIH] = {"encoder/forward/w_ih", ONE, D(3, HE), D(1, E), DESC_Q8, ENC, A, NULL, 0},
    [RG_ENC_F_WHH] = {"encoder/forward/w_hh", ONE, D(3, HE), D(1, HE), DESC_Q8, ENC, A, NULL, 0},
    [RG_ENC_F_BIH] = {"encoder/forward/b_ih", ONE, D(3, HE), V, DESC_F32, ENC, A, NULL, 0},
    [RG_ENC_F_BHH] = {"encoder/forward/b_hh", ONE, D(3, HE), V, DESC_F32, ENC, A, NULL, 0},
    [RG_ENC_B_WIH] = {"encoder/backward/w_ih", ONE, D(3, HE), D(1, E), DESC_Q8, ENC, A, NULL, 0},
    [RG_ENC_B_WHH] = {"encoder/backward/w_hh", ONE, D(3, HE), D(1, HE), DESC_Q8, ENC, A, NULL, 0},
    [RG_ENC_B_BIH] = {"encoder/backward/b_ih", ONE, D(3, HE), V, DESC_F32, ENC, A, NULL, 0},
    [RG_ENC_B_BHH] = {"encoder/backward/b_hh", ONE, D(3, HE), V, DESC_F32, ENC, A, NULL, 0},
    [RG_DEC_EMB] = {"decoder/embeddings/weight", ONE, D(1, VT), D(1, E), DESC_F32, DEC, A,
                    "encoder/embeddings/weight", RGD_SHARE_EMB},
    [RG_INIT_W] = {"decoder/init/weight", ONE, D(1, HD), D(1, DV), DESC_Q8, DEC, A, NULL, 0},
    [RG_INIT_B] = {"decoder/init/bias", ONE, D(1, HD), V, DESC_F32, DEC, A, NULL, 0},
    [RG_GRU1_WIH] = {"decoder/gru1/w_ih", ONE, D(3, HD), D(1, E), DESC_Q8, DEC, A, NULL, 0},
    [RG_GRU1_WHH] = {"decoder/gru1/w_hh", ONE, D(3, HD), D(1, HD), DESC_Q8, DEC, A, NULL, 0},
    [RG_GRU1_BIH] = {"decoder/gru1/b_ih", ONE, D(3, HD), V, DESC_F32, DEC, A, NULL, 0},
    [RG_GRU1_BHH] = {"decoder/gru1/b_hh", ONE, D(3, HD), V, DESC_F32, DEC, A, NULL, 0},
    [RG_ATT_WQ] = {"decoder/attention/query/weight", ONE, D(1, A), D(1, HD), DESC_Q8, DEC, A, NULL, 0},
    [RG_ATT_WK] = {"decoder/attention/key/weight", ONE, D(1, A), D(1, DV), DESC_Q8, DEC, A, NULL, 0},
    [RG_ATT_B] = {"decoder/attention/key/bias", ONE, D(1, A), V, DESC_F32, DEC, A, NULL, 0},
    [RG_ATT_V] = {"decoder/attention/v", ONE, D(1, A), V, DESC_F32, DEC, A, NULL, 0},
    [RG_GRU2_WIH] = {"decoder/gru2/w_ih", ONE, D(3, HD), D(1, DV), DESC_Q8, DEC, A, NULL, 0},
    [RG_GRU2_WHH] = {"decoder/gru2/w_hh", ONE, D(3, HD), D(1, HD), DESC_Q8, DEC, A, NULL, 0},
    [RG_GRU2_BIH] = {"decoder/gru2/b_ih", ONE, D(3, HD), V, DESC_F32, DEC, A, NULL, 0},
    [RG_GRU2_BHH] = {"decoder/gru2/b_hh", ONE, D(3, HD), V, DESC_F32, DEC, A, NULL, 0},
    [RG_OUT_WS] = {"decoder/output/state/weight", ONE, D(1, O), D(1, HD), DESC_Q8, DEC, A, NULL, 0},
    [RG_OUT_WC] = {"decoder/output/context/weight", ONE, D(1, O), D(1, DV), DESC_Q8, DEC, A, NULL, 0},
    [RG_OUT_WE] = {"decoder/output/embedding/weight", ONE, D(1, O), D(1, E), DESC_Q8, DEC, A, NULL, 0},
    [RG_OUT_B] = {"decoder/output/bias", ONE, D(1, O), V, DESC_F32, DEC, A, NULL, 0},
    [RG_PROJ_W] = {"decoder/projection/weight", ONE, D(1, VT), D(1, O), DESC_Q8, DEC, A,
                   "decoder/embeddings/weight", RGD_TIE_PROJ},
    [RG_PROJ_B] = {"decoder/projection/bias", ONE, D(1, VT), V, DESC_F32, DEC, A, NULL, 0},
    /* layer normalization (rnn/layer_norm = 1) */
    {"encoder/forward/ln_ih/gain", ONE, D(3, HE), V, DESC_F32, ENC, LN, NULL, 0},
    {"encoder/forward/ln_ih/bias", ONE, D(3, HE), V, DESC_F32, ENC, LN, NULL, 0},
    {"encoder/forward/ln_hh/gain", ONE, D(3, HE), V, DESC_F32, ENC, LN, NULL, 0},
    {"encoder/forward/ln_hh/bias", ONE, D(3, HE), V, DESC_F32, ENC, LN, NULL, 0},
    {"encoder/backward/ln_ih/gain", ONE, D(3, HE), V, DESC_F32, ENC, LN, NULL, 0},
    {"encoder/backward/ln_ih/bias", ONE, D(3, HE), V, DESC_F32, ENC, LN, NULL, 0},
    {"encoder/backward/ln_hh/gain", ONE, D(3, HE), V, DESC_F32, ENC, LN, NULL, 0},
    {"encoder/backward/ln_hh/bias", ONE, D(3, HE), V, DESC_F32, ENC, LN, NULL, 0},
    {"decoder/gru1/ln_ih/gain", ONE, D(3, HD), V, DESC_F32, DEC, LN, NULL, 0},
    {"decoder/gru1/ln_ih/bias", ONE, D(3, HD), V, DESC_F32, DEC, LN, NULL, 0},
    {"decoder/gru1/ln_hh/gain", ONE, D(3, HD), V, DESC_F32, DEC, LN, NULL, 0},
    {"decoder/gru1/ln_hh/bias", ONE, D(3, HD), V, DESC_F32, DEC, LN, NULL, 0},
    {"decoder/gru2/ln_ih/gain", ONE, D(3, HD), V, DESC_F32, DEC, LN, NULL, 0},
    {"decoder/gru2/ln_ih/bias", ONE, D(3, HD), V, DESC_F32, DEC, LN, NULL, 0},
    {"decoder/gru2/ln_hh/gain", ONE, D(3, HD), V, DESC_F32, DEC, LN, NULL, 0},
    {"decoder/gru2/ln_hh/bias", ONE, D(3, HD), V, DESC_F32, DEC, LN, NULL, 0},
};

/* The config keys, in rg_key_t order (sizes in [1, 2^20]; rnn/layer_norm optional, 0 or 1). */
static const desc_key_t KEYS[RGKEY_COUNT] = {
    [RGKEY_EMB] = {"rnn/embedding_size", DT_I32, RGD_E, 0, 1, 1 << 20, 0},
    [RGKEY_ENC_HIDDEN] = {"rnn/encoder_hidden_size", DT_I32, RGD_HE, 0, 1, 1 << 20, 0},
    [RGKEY_DEC_HIDDEN] = {"rnn/decoder_hidden_size", DT_I32, RGD_HD, 0, 1, 1 << 20, 0},
    [RGKEY_ATT] = {"rnn/attention_size", DT_I32, RGD_A, 0, 1, 1 << 20, 0},
    [RGKEY_OUT] = {"rnn/output_size", DT_I32, RGD_O, 0, 1, 1 << 20, 0},
    [RGKEY_LAYER_NORM] = {"rnn/layer_norm", DT_I32, RGD_LAYER_NORM, 0, 0, 1, DESC_KEY_OPTIONAL},
    /* only `tern shrink` writes it (read-only for the checkpoint writer: training has one head) */
    [RGKEY_HEADS] = {"rnn/attention_heads", DT_I32, RGD_HEADS, 1, 1, 1 << 10, DESC_KEY_OPTIONAL | DESC_KEY_READONLY},
};
#undef D
#undef V
#undef ONE
#undef ENC
#undef DEC
#undef A
#undef LN

static const char *const DIM_NAMES[RGD_COUNT] = {"Vs", "Vt", "E", "He", "Hd", "A", "O", "layer_norm",
                                                 "share_emb", "tie_proj", "att_heads", "Dv"};

static void derive(int *d) { d[RGD_DV] = 2 * d[RGD_HE]; }

const model_desc_t RNN_GRU_DESC = {
    .family = RNN_GRU_ARCHITECTURE,
    .specs = SPECS,
    .n_specs = RG_COUNT,
    .keys = KEYS,
    .n_keys = RGKEY_COUNT,
    .dim_names = DIM_NAMES,
    .n_dims = RGD_COUNT,
    .derive = derive,
};

void rnn_gru_dims_array(const rnn_gru_dims_t *d, int out[RGD_COUNT]) {
    out[RGD_VS] = d->src_vocab, out[RGD_VT] = d->tgt_vocab, out[RGD_E] = d->emb, out[RGD_HE] = d->enc_hidden;
    out[RGD_HD] = d->dec_hidden, out[RGD_A] = d->att, out[RGD_O] = d->out, out[RGD_LAYER_NORM] = d->layer_norm;
    out[RGD_SHARE_EMB] = d->share_emb, out[RGD_TIE_PROJ] = d->tie_proj;
    out[RGD_HEADS] = d->att_heads > 1 ? d->att_heads : 1;
    derive(out);
}

const char *rnn_gru_tensor_name(rg_tensor_t i) { return (unsigned)i < RG_COUNT ? SPECS[i].name : "?"; }
const char *rnn_gru_key_name(rg_key_t k) { return (unsigned)k < RGKEY_COUNT ? KEYS[k].name : "?"; }

void rnn_gru_tensor_shape(const rnn_gru_dims_t *d, rg_tensor_t i, int *rows, int *cols) {
    int dims[RGD_COUNT];
    rnn_gru_dims_array(d, dims);
    desc_shape(&RNN_GRU_DESC, (int)i, dims, rows, cols);
}

int rnn_gru_tensor_used(const rnn_gru_dims_t *d, rg_tensor_t i) {
    int dims[RGD_COUNT];
    rnn_gru_dims_array(d, dims);
    return desc_used(&RNN_GRU_DESC, (int)i, dims);
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
    int dims[RGD_COUNT];
    rnn_gru_dims_array(d, dims);
    return desc_stored(&RNN_GRU_DESC, (int)i, dims);
}

int rnn_gru_desc_aliases(const rnn_gru_dims_t *d, const char *names[2], const char *targets[2]) {
    int dims[RGD_COUNT];
    rnn_gru_dims_array(d, dims);
    return desc_aliases(&RNN_GRU_DESC, dims, names, targets, 2);
}

int rnn_gru_tensor_is_gain(rg_tensor_t i) { return i >= RG_LN_FIRST && i <= RG_LN_LAST && (i - RG_LN_FIRST) % 2 == 0; }

int rnn_gru_tensor_is_matrix(rg_tensor_t i) { return (unsigned)i < RG_COUNT && SPECS[i].dtype == DESC_Q8; }

int rnn_gru_desc_scalars(rnn_gru_scalars_t *s, const rnn_gru_dims_t *d) {
    int dims[RGD_COUNT];
    rnn_gru_dims_array(d, dims);
    return desc_scalars(&RNN_GRU_DESC, dims, s);
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
    int dims[RGD_COUNT] = {0};
    for (int k = 0; k < RGKEY_COUNT; k++) {
        int64_t v = 0;
        /* optional rnn/layer_norm: models written before it have no normalization */
        if (!desc_key_get(&RNN_GRU_DESC, k, w, &v))
            return tern_error(TERN_ERR_FORMAT, "%s: config key tensor '%s' is missing (an rnn-gru model stores its "
                              "sizes as rank-0 tensors)", path, KEYS[k].name);
        if (v < KEYS[k].lo || v > KEYS[k].hi) {
            if (KEYS[k].flags & DESC_KEY_OPTIONAL)
                return tern_error(TERN_ERR_FORMAT, "%s: config key '%s' = %lld must be in [%d, %d]", path,
                                  KEYS[k].name, (long long)v, KEYS[k].lo, KEYS[k].hi);
            return tern_error(TERN_ERR_FORMAT, "%s: config key '%s' = %lld is out of range", path, KEYS[k].name,
                              (long long)v);
        }
        dims[KEYS[k].dim] = (int)v;
    }
    d->emb = dims[RGD_E], d->enc_hidden = dims[RGD_HE], d->dec_hidden = dims[RGD_HD], d->att = dims[RGD_A];
    d->out = dims[RGD_O], d->layer_norm = dims[RGD_LAYER_NORM], d->att_heads = dims[RGD_HEADS];
    if (d->att % d->att_heads || d->enc_hidden % d->att_heads)
        return tern_error(TERN_ERR_FORMAT, "%s: config key '%s' = %d must divide the attention size %d and the "
                          "encoder width %d", path, KEYS[RGKEY_HEADS].name, d->att_heads, d->att, d->enc_hidden);
    const tensor_t *es = weights_get(w, SPECS[RG_ENC_EMB].name), *et = weights_get(w, SPECS[RG_DEC_EMB].name);
    if (!es) return tern_error(TERN_ERR_FORMAT, "%s: tensor '%s' is missing", path, SPECS[RG_ENC_EMB].name);
    if (!et) return tern_error(TERN_ERR_FORMAT, "%s: tensor '%s' is missing", path, SPECS[RG_DEC_EMB].name);
    if (es->rank != 2 || et->rank != 2)
        return tern_error(TERN_ERR_FORMAT, "%s: tensor '%s' is not a matrix", path,
                          es->rank != 2 ? SPECS[RG_ENC_EMB].name : SPECS[RG_DEC_EMB].name);
    d->src_vocab = (int)es->shape[0];
    d->tgt_vocab = (int)et->shape[0];
    d->share_emb = is_alias_of(w, SPECS[RG_DEC_EMB].name, SPECS[RG_ENC_EMB].name);
    d->tie_proj = is_alias_of(w, SPECS[RG_PROJ_W].name, SPECS[RG_DEC_EMB].name) ||
                  is_alias_of(w, SPECS[RG_PROJ_W].name, SPECS[RG_ENC_EMB].name);
    rnn_gru_dims_array(d, dims);
    for (int i = 0; i < RG_COUNT; i++) {
        if (!desc_used(&RNN_GRU_DESC, i, dims)) continue;
        const char *name = SPECS[i].name;
        const tensor_t *t = weights_get(w, name);
        if (!t)
            return tern_error(TERN_ERR_FORMAT, "%s: tensor '%s' is missing%s", path, name,
                              i >= RG_LN_FIRST ? " (rnn/layer_norm = 1)" : "");
        int r, c;
        desc_shape(&RNN_GRU_DESC, i, dims, &r, &c);
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
                              "A %d, O %d) and vocabularies (%d/%d) give %s", path, name, got, d->emb,
                              d->enc_hidden, d->dec_hidden, d->att, d->out, d->src_vocab, d->tgt_vocab, want);
        }
        char sc[128];
        snprintf(sc, sizeof sc, "%s_scale", name);
        if (t->dtype == DT_I8 && !weights_get(w, sc))
            return tern_error(TERN_ERR_FORMAT, "%s: int8 tensor '%s' has no '%s'", path, name, sc);
    }
    return TERN_OK;
}
