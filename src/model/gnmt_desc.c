/*
 * gnmt_desc.c — the GNMT family's tensor description (gnmt_desc.h).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/gnmt_desc.h"

int gnmt_enc_width(const gnmt_dims_t *d) { return d->enc_layers == 1 ? 2 * d->hidden : d->hidden; }
int gnmt_enc_input(const gnmt_dims_t *d, int l) { return l == 1 ? 2 * d->hidden : d->hidden; }
int gnmt_dec_input(const gnmt_dims_t *d, int l) { (void)l; return d->hidden + gnmt_enc_width(d); }

/* Shapes: mul × a dimension (desc.h); V: a vector (rank 1). */
#define D(m, d) {m, GND_##d}
#define V {0, 0}
#define ONE DESC_ONCE, 0, 0, 0
#define ENC DESC_ENCODER
#define DEC DESC_DECODER
#define A DESC_ALWAYS
#define NOALIAS NULL, 0
#define LSTM(path, count, lo, hi, group, K, side, mod)                                                           \
    {path "/weight_ih", count, lo, hi, group, D(4, H), K, DESC_Q8, side, A, NOALIAS, mod, GP_W_IH}

/* The stored tensors in storage order; the LSTM layers are enumerated layer by layer (groups 1
 * and 2): encoder layer l, then (l = 0) its reverse direction. Encoder layer 0 reads H, layer 1
 * the bidirectional 2H, layers >= 2 H. */
static const desc_spec_t SPECS[] = {
    {"encoder/embeddings/weight", ONE, D(1, VS), D(1, H), DESC_F32, ENC, A, NOALIAS, GN_ENC_EMB, GP_NONE},
    {"decoder/embeddings/weight", ONE, D(1, VT), D(1, H), DESC_F32, DEC, A, "encoder/embeddings/weight",
     GND_SHARE_EMB, GN_DEC_EMB, GP_NONE},
    LSTM("encoder/layer_%d", GND_LE, 0, 1, 1, D(1, H), ENC, GN_ENC_LSTM),
    LSTM("encoder/layer_%d", GND_LE, 1, 2, 1, D(2, H), ENC, GN_ENC_LSTM),
    LSTM("encoder/layer_%d", GND_LE, 2, 0, 1, D(1, H), ENC, GN_ENC_LSTM),
    {"encoder/layer_%d/weight_hh", GND_LE, 0, 0, 1, D(4, H), D(1, H), DESC_Q8, ENC, A, NOALIAS, GN_ENC_LSTM, GP_W_HH},
    {"encoder/layer_%d/bias_ih", GND_LE, 0, 0, 1, D(4, H), V, DESC_F32, ENC, A, NOALIAS, GN_ENC_LSTM, GP_B_IH},
    {"encoder/layer_%d/bias_hh", GND_LE, 0, 0, 1, D(4, H), V, DESC_F32, ENC, A, NOALIAS, GN_ENC_LSTM, GP_B_HH},
    LSTM("encoder/layer_%d_reverse", GND_LE, 0, 1, 1, D(1, H), ENC, GN_ENC_LSTM_REV),
    {"encoder/layer_%d_reverse/weight_hh", GND_LE, 0, 1, 1, D(4, H), D(1, H), DESC_Q8, ENC, A, NOALIAS,
     GN_ENC_LSTM_REV, GP_W_HH},
    {"encoder/layer_%d_reverse/bias_ih", GND_LE, 0, 1, 1, D(4, H), V, DESC_F32, ENC, A, NOALIAS, GN_ENC_LSTM_REV,
     GP_B_IH},
    {"encoder/layer_%d_reverse/bias_hh", GND_LE, 0, 1, 1, D(4, H), V, DESC_F32, ENC, A, NOALIAS, GN_ENC_LSTM_REV,
     GP_B_HH},
    LSTM("decoder/layer_%d", GND_LD, 0, 0, 2, D(1, DEC_IN), DEC, GN_DEC_LSTM),
    {"decoder/layer_%d/weight_hh", GND_LD, 0, 0, 2, D(4, H), D(1, H), DESC_Q8, DEC, A, NOALIAS, GN_DEC_LSTM, GP_W_HH},
    {"decoder/layer_%d/bias_ih", GND_LD, 0, 0, 2, D(4, H), V, DESC_F32, DEC, A, NOALIAS, GN_DEC_LSTM, GP_B_IH},
    {"decoder/layer_%d/bias_hh", GND_LD, 0, 0, 2, D(4, H), V, DESC_F32, DEC, A, NOALIAS, GN_DEC_LSTM, GP_B_HH},
    {"decoder/attention/linear_query/weight", ONE, D(1, A), D(1, H), DESC_Q8, DEC, A, NOALIAS, GN_ATT_WQ, GP_NONE},
    {"decoder/attention/linear_key/weight", ONE, D(1, A), D(1, DV), DESC_Q8, DEC, A, NOALIAS, GN_ATT_WK, GP_NONE},
    {"decoder/attention/linear_key/bias", ONE, D(1, A), V, DESC_F32, DEC, A, NOALIAS, GN_ATT_B, GP_NONE},
    {"decoder/attention/v", ONE, D(1, A), V, DESC_F32, DEC, A, NOALIAS, GN_ATT_V, GP_NONE},
    {"decoder/projection/weight", ONE, D(1, VT), D(1, H), DESC_Q8, DEC, A, "decoder/embeddings/weight", GND_TIE_PROJ,
     GN_PROJ_W, GP_NONE},
    {"decoder/projection/bias", ONE, D(1, VT), V, DESC_F32, DEC, A, NOALIAS, GN_PROJ_B, GP_NONE},
};
#undef D
#undef V
#undef ONE
#undef ENC
#undef DEC
#undef A
#undef NOALIAS
#undef LSTM

enum { N_SPECS = (int)(sizeof SPECS / sizeof SPECS[0]) };

/* The config keys, in gnmt_key_t order. */
static const desc_key_t KEYS[GKEY_COUNT] = {
    [GKEY_HIDDEN] = {"gnmt/hidden_size", DT_I32, GND_H, 0, 1, 1 << 16, 0},
    [GKEY_ATT] = {"gnmt/attention_size", DT_I32, GND_A, 0, 1, 1 << 16, 0},
    [GKEY_ENC_LAYERS] = {"gnmt/encoder_layers", DT_I32, GND_LE, 0, 1, 256, 0},
    [GKEY_DEC_LAYERS] = {"gnmt/decoder_layers", DT_I32, GND_LD, 0, 1, 256, 0},
};

static const char *const DIM_NAMES[GND_COUNT] = {"Vs", "Vt", "H", "A", "Le", "Ld", "share_emb", "tie_proj", "Dv",
                                                 "H+Dv"};

static void derive(int *d) {
    d[GND_DV] = d[GND_LE] == 1 ? 2 * d[GND_H] : d[GND_H];
    d[GND_DEC_IN] = d[GND_H] + d[GND_DV];
}

const model_desc_t GNMT_DESC = {
    .family = GNMT_ARCHITECTURE,
    .specs = SPECS,
    .n_specs = N_SPECS,
    .keys = KEYS,
    .n_keys = GKEY_COUNT,
    .dim_names = DIM_NAMES,
    .n_dims = GND_COUNT,
    .derive = derive,
};

void gnmt_dims_array(const gnmt_dims_t *d, int out[GND_COUNT]) {
    out[GND_VS] = d->src_vocab, out[GND_VT] = d->tgt_vocab, out[GND_H] = d->hidden, out[GND_A] = d->att;
    out[GND_LE] = d->enc_layers, out[GND_LD] = d->dec_layers;
    out[GND_SHARE_EMB] = d->share_emb, out[GND_TIE_PROJ] = d->tie_proj;
    derive(out);
}

/* The first spec of a module's part (part ignored outside the LSTMs). */
static int spec_of(gnmt_module_t mod, gnmt_part_t part) {
    for (int s = 0; s < N_SPECS; s++)
        if (SPECS[s].module == (int)mod && (SPECS[s].part == (int)part || SPECS[s].part == GP_NONE)) return s;
    return -1;
}

const char *gnmt_tensor_name(char *buf, size_t n, gnmt_module_t mod, int layer, gnmt_part_t part) {
    int s = spec_of(mod, part);
    if (s < 0) {
        snprintf(buf, n, "?");
        return buf;
    }
    return desc_name(&GNMT_DESC, s, layer, buf, n);
}

int gnmt_desc_tensors(const gnmt_dims_t *d, gnmt_tensor_t *out) {
    int dims[GND_COUNT];
    gnmt_dims_array(d, dims);
    int n = desc_tensors(&GNMT_DESC, dims, NULL);
    if (!out) return n;
    desc_tensor_t *all = malloc(sizeof *all * (size_t)(n ? n : 1));
    if (!all) return 0;
    desc_tensors(&GNMT_DESC, dims, all);
    for (int i = 0; i < n; i++) {
        gnmt_tensor_t *t = &out[i];
        memset(t, 0, sizeof *t);
        snprintf(t->name, sizeof t->name, "%s", all[i].name);
        t->rank = all[i].rank;
        t->shape[0] = all[i].shape[0];
        t->shape[1] = all[i].shape[1];
        t->module = (gnmt_module_t)SPECS[all[i].spec].module;
        t->part = (gnmt_part_t)SPECS[all[i].spec].part;
        t->layer = all[i].layer;
    }
    free(all);
    return n;
}

int gnmt_desc_aliases(const gnmt_dims_t *d, const char *names[2], const char *targets[2]) {
    int dims[GND_COUNT];
    gnmt_dims_array(d, dims);
    return desc_aliases(&GNMT_DESC, dims, names, targets, 2);
}

int gnmt_desc_quantizable(const char *name) { return desc_quantizable(&GNMT_DESC, name); }

const char *gnmt_key_name(gnmt_key_t k) { return (unsigned)k < GKEY_COUNT ? KEYS[k].name : "?"; }

int gnmt_desc_scalars(gnmt_scalars_t *s, const gnmt_dims_t *d) {
    int dims[GND_COUNT];
    gnmt_dims_array(d, dims);
    return desc_scalars(&GNMT_DESC, dims, s);
}

tern_status_t gnmt_desc_read(gnmt_dims_t *d, const weights_t *w) {
    const char *file = weights_path(w);
    memset(d, 0, sizeof *d);
    int dims[GND_COUNT] = {0};
    for (int k = 0; k < GKEY_COUNT; k++) {
        int64_t v;
        if (!desc_key_get(&GNMT_DESC, k, w, &v))
            return tern_error(TERN_ERR_FORMAT, "%s: tensor '%s' (a GNMT config key) is missing", file, KEYS[k].name);
        if (v < KEYS[k].lo || v > KEYS[k].hi)
            return tern_error(TERN_ERR_FORMAT, "%s: tensor '%s' = %lld is out of range [1, %d]", file, KEYS[k].name,
                              (long long)v, KEYS[k].hi);
        dims[KEYS[k].dim] = (int)v;
    }
    d->hidden = dims[GND_H], d->att = dims[GND_A], d->enc_layers = dims[GND_LE], d->dec_layers = dims[GND_LD];
    const char *n_es = SPECS[spec_of(GN_ENC_EMB, GP_NONE)].name, *n_ed = SPECS[spec_of(GN_DEC_EMB, GP_NONE)].name,
               *n_pw = SPECS[spec_of(GN_PROJ_W, GP_NONE)].name;
    const tensor_t *es = weights_get(w, n_es), *ed = weights_get(w, n_ed), *pw = weights_get(w, n_pw);
    if (!es) return tern_error(TERN_ERR_FORMAT, "%s: tensor '%s' is missing", file, n_es);
    if (!ed) return tern_error(TERN_ERR_FORMAT, "%s: tensor '%s' is missing", file, n_ed);
    if (!pw) return tern_error(TERN_ERR_FORMAT, "%s: tensor '%s' is missing", file, n_pw);
    if (es->rank != 2 || ed->rank != 2)
        return tern_error(TERN_ERR_FORMAT, "%s: tensor '%s' is not a matrix", file,
                          es->rank != 2 ? es->name : ed->name);
    d->src_vocab = (int)es->shape[0];
    d->tgt_vocab = (int)ed->shape[0];
    d->share_emb = ed->data == es->data;
    d->tie_proj = pw->data == ed->data;
    int n = gnmt_desc_tensors(d, NULL);
    gnmt_tensor_t *all = malloc(sizeof *all * (size_t)n);
    if (!all) return tern_error(TERN_ERR_NOMEM, "out of memory");
    gnmt_desc_tensors(d, all);
    tern_status_t st = TERN_OK;
    for (int i = 0; i < n && !st; i++) {
        const gnmt_tensor_t *g = &all[i];
        const tensor_t *t = weights_get(w, g->name);
        if (!t) {
            st = tern_error(TERN_ERR_FORMAT, "%s: tensor '%s' is missing (GNMT, %d+%d layers, hidden %d)", file,
                            g->name, d->enc_layers, d->dec_layers, d->hidden);
            break;
        }
        int ok = t->rank == g->rank && t->shape[0] == g->shape[0] && (g->rank == 1 || t->shape[1] == g->shape[1]);
        if (!ok) {
            char have[64];
            if (t->rank == 2) snprintf(have, sizeof have, "(%lld, %lld)", (long long)t->shape[0], (long long)t->shape[1]);
            else if (t->rank == 1) snprintf(have, sizeof have, "(%lld)", (long long)t->shape[0]);
            else snprintf(have, sizeof have, "rank %d", t->rank);
            if (g->rank == 2)
                st = tern_error(TERN_ERR_MISMATCH, "%s: tensor '%s' has shape %s, the config keys (hidden %d, attention "
                                "%d, %d+%d layers) need (%d, %d)", file, g->name, have, d->hidden, d->att,
                                d->enc_layers, d->dec_layers, g->shape[0], g->shape[1]);
            else
                st = tern_error(TERN_ERR_MISMATCH, "%s: tensor '%s' has shape %s, the config keys (hidden %d, attention "
                                "%d, %d+%d layers) need (%d)", file, g->name, have, d->hidden, d->att,
                                d->enc_layers, d->dec_layers, g->shape[0]);
        }
    }
    free(all);
    return st;
}
