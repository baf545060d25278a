/*
 * transformer_desc.c — the Transformer's tensor names, shapes and config keys (see
 * transformer_desc.h), and the input computations training and inference share.
 */
#include "model/transformer_desc.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

/* Per module: its kind, side and path (a printf format with %d for the layer when per layer). */
static const struct {
    tmodule_kind_t kind;
    int side;
    const char *path;
} MODULES[TM_COUNT] = {
    [TM_ENC_EMB] = {TK_EMBEDDING, 0, "encoder/embeddings_0"},
    [TM_DEC_EMB] = {TK_EMBEDDING, 0, "decoder/embeddings"},
    [TM_ENC_POS] = {TK_POSITIONS, 0, "encoder/position_encodings"},
    [TM_DEC_POS] = {TK_POSITIONS, 0, "decoder/position_encodings"},
    [TM_ENC_SELF_LN] = {TK_NORM, 1, "encoder/layer_%d/self_attention/layer_norm"},
    [TM_ENC_SELF_QKV] = {TK_LINEAR, 1, "encoder/layer_%d/self_attention/linear_0"},
    [TM_ENC_SELF_OUT] = {TK_LINEAR, 1, "encoder/layer_%d/self_attention/linear_1"},
    [TM_ENC_FFN_LN] = {TK_NORM, 1, "encoder/layer_%d/ffn/layer_norm"},
    [TM_ENC_FFN1] = {TK_LINEAR, 1, "encoder/layer_%d/ffn/linear_0"},
    [TM_ENC_FFN2] = {TK_LINEAR, 1, "encoder/layer_%d/ffn/linear_1"},
    [TM_ENC_FINAL_LN] = {TK_NORM, 0, "encoder/layer_norm"},
    [TM_DEC_SELF_LN] = {TK_NORM, 2, "decoder/layer_%d/self_attention/layer_norm"},
    [TM_DEC_SELF_QKV] = {TK_LINEAR, 2, "decoder/layer_%d/self_attention/linear_0"},
    [TM_DEC_SELF_OUT] = {TK_LINEAR, 2, "decoder/layer_%d/self_attention/linear_1"},
    [TM_DEC_CROSS_LN] = {TK_NORM, 2, "decoder/layer_%d/attention/layer_norm"},
    [TM_DEC_CROSS_Q] = {TK_LINEAR, 2, "decoder/layer_%d/attention/linear_0"},
    [TM_DEC_CROSS_KV] = {TK_LINEAR, 2, "decoder/layer_%d/attention/linear_1"},
    [TM_DEC_CROSS_OUT] = {TK_LINEAR, 2, "decoder/layer_%d/attention/linear_2"},
    [TM_DEC_FFN_LN] = {TK_NORM, 2, "decoder/layer_%d/ffn/layer_norm"},
    [TM_DEC_FFN1] = {TK_LINEAR, 2, "decoder/layer_%d/ffn/linear_0"},
    [TM_DEC_FFN2] = {TK_LINEAR, 2, "decoder/layer_%d/ffn/linear_1"},
    [TM_DEC_FINAL_LN] = {TK_NORM, 0, "decoder/layer_norm"},
    [TM_PROJ] = {TK_LINEAR, 0, "decoder/projection"},
};

static const char *const PARTS[] = {"weight", "bias", "gamma", "beta", "encodings"};

static const char *const KEYS[TKEY_COUNT] = {
    [TKEY_ENC_HEADS] = "encoder/num_heads",
    [TKEY_DEC_HEADS] = "decoder/num_heads",
    [TKEY_DEC_ALIGN_LAYER] = "decoder/alignment_layer",
    [TKEY_DEC_ALIGN_HEADS] = "decoder/alignment_heads",
    [TKEY_ENC_PRE_NORM] = "encoder/pre_norm",
    [TKEY_DEC_PRE_NORM] = "decoder/pre_norm",
    [TKEY_ENC_ACT] = "encoder/activation",
    [TKEY_DEC_ACT] = "decoder/activation",
    [TKEY_ENC_SCALE_EMB] = "encoder/scale_embeddings",
    [TKEY_DEC_SCALE_EMB] = "decoder/scale_embeddings",
    [TKEY_DEC_ZERO_START] = "decoder/start_from_zero_embedding",
};

tmodule_kind_t transformer_module_kind(tmodule_t mod) { return MODULES[mod].kind; }

int transformer_module_side(tmodule_t mod) { return MODULES[mod].side; }

const char *transformer_module_path(char *buf, size_t n, tmodule_t mod, int layer) {
    if (MODULES[mod].side) snprintf(buf, n, MODULES[mod].path, layer);
    else snprintf(buf, n, "%s", MODULES[mod].path);
    return buf;
}

const char *transformer_part_name(tpart_t part) { return PARTS[part]; }

const char *transformer_tensor_name(char *buf, size_t n, tmodule_t mod, int layer, tpart_t part) {
    char p[96];
    transformer_module_path(p, sizeof p, mod, layer);
    snprintf(buf, n, "%s/%s", p, PARTS[part]);
    return buf;
}

const char *transformer_key_name(tkey_t key) { return KEYS[key]; }

void transformer_module_shape(const transformer_dims_t *dims, tmodule_t mod, int *rows, int *cols) {
    int C = dims->d, F = dims->ff;
    *cols = C;
    switch (mod) {
    case TM_ENC_EMB: *rows = dims->src_vocab; break;
    case TM_DEC_EMB: *rows = dims->tgt_vocab; break;
    case TM_ENC_POS: case TM_DEC_POS: *rows = dims->max_pos; break;
    case TM_ENC_SELF_QKV: case TM_DEC_SELF_QKV: *rows = 3 * C; break;
    case TM_DEC_CROSS_KV: *rows = 2 * C; break;
    case TM_ENC_FFN1: case TM_DEC_FFN1: *rows = F; break;
    case TM_ENC_FFN2: case TM_DEC_FFN2: *rows = C, *cols = F; break;
    case TM_PROJ: *rows = dims->tgt_vocab; break;
    default:
        *rows = C;
        if (MODULES[mod].kind == TK_NORM) *cols = 0;
        break;
    }
}

/* Whether a model with these dims stores this part of this module. */
static int stored(const transformer_dims_t *dims, tmodule_t mod, tpart_t part) {
    switch (mod) {
    case TM_DEC_EMB: return !dims->share_emb;
    case TM_ENC_POS: case TM_DEC_POS: return dims->learned_pos;
    case TM_ENC_FINAL_LN: case TM_DEC_FINAL_LN: return dims->pre_norm;
    case TM_PROJ: return part == TP_WEIGHT ? !dims->tie_proj : dims->proj_bias;
    default: return 1;
    }
}

/* The parts of a module kind, in storage order. */
static int kind_parts(tmodule_kind_t kind, tpart_t parts[2]) {
    switch (kind) {
    case TK_EMBEDDING: parts[0] = TP_WEIGHT; return 1;
    case TK_POSITIONS: parts[0] = TP_ENCODINGS; return 1;
    case TK_NORM: parts[0] = TP_GAMMA, parts[1] = TP_BETA; return 2;
    default: parts[0] = TP_WEIGHT, parts[1] = TP_BIAS; return 2;
    }
}

int transformer_desc_tensors(const transformer_dims_t *dims, transformer_tensor_t *out) {
    int n = 0;
    for (int mi = 0; mi < TM_COUNT; mi++) {
        tmodule_t mod = (tmodule_t)mi;
        tpart_t parts[2];
        int np = kind_parts(MODULES[mod].kind, parts), rows, cols;
        int side = MODULES[mod].side, L = side == 1 ? dims->enc_layers : side == 2 ? dims->dec_layers : 1;
        transformer_module_shape(dims, mod, &rows, &cols);
        for (int k = 0; k < np; k++) {
            if (!stored(dims, mod, parts[k])) continue;
            for (int l = 0; l < L; l++, n++) {
                if (!out) continue;
                transformer_tensor_t *t = &out[n];
                transformer_tensor_name(t->name, sizeof t->name, mod, l, parts[k]);
                t->module = mod;
                t->part = parts[k];
                t->layer = side ? l : -1;
                int vec = parts[k] == TP_BIAS || parts[k] == TP_GAMMA || parts[k] == TP_BETA;
                t->rank = vec ? 1 : 2;
                t->shape[0] = rows;
                t->shape[1] = vec ? 0 : cols;
            }
        }
    }
    return n;
}

int transformer_desc_aliases(const transformer_dims_t *dims, const char *names[2], const char *targets[2]) {
    static const char *enc_emb = "encoder/embeddings_0/weight", *dec_emb = "decoder/embeddings/weight",
                      *proj = "decoder/projection/weight";
    int n = 0;
    if (dims->share_emb) names[n] = dec_emb, targets[n++] = enc_emb;
    if (dims->tie_proj) names[n] = proj, targets[n++] = dims->share_emb ? enc_emb : dec_emb;
    return n;
}

int transformer_desc_parse(const char *name, tmodule_t *mod, int *layer, tpart_t *part) {
    if (!strcmp(name, TRANSFORMER_ENC_EMB_ALT)) {
        *mod = TM_ENC_EMB, *layer = -1, *part = TP_WEIGHT;
        return 1;
    }
    const char *slash = strrchr(name, '/');
    if (!slash) return 0;
    int pi = -1;
    for (int k = 0; k < (int)(sizeof PARTS / sizeof PARTS[0]); k++)
        if (!strcmp(slash + 1, PARTS[k])) pi = k;
    if (pi < 0) return 0;
    size_t plen = (size_t)(slash - name);
    int l = -1;
    if ((!strncmp(name, "encoder/layer_", 14) || !strncmp(name, "decoder/layer_", 14)) && name[14] >= '0' &&
        name[14] <= '9') {
        const char *p = name + 14;
        l = 0;
        for (; *p >= '0' && *p <= '9' && l < (1 << 20); p++) l = l * 10 + (*p - '0');
    }
    char buf[160];
    for (int mi = 0; mi < TM_COUNT; mi++) {
        if ((MODULES[mi].side != 0) != (l >= 0)) continue;
        transformer_module_path(buf, sizeof buf, (tmodule_t)mi, l);
        if (strlen(buf) != plen || strncmp(buf, name, plen)) continue;
        tpart_t parts[2];
        int np = kind_parts(MODULES[mi].kind, parts);
        for (int k = 0; k < np; k++)
            if ((int)parts[k] == pi) {
                *mod = (tmodule_t)mi, *layer = l, *part = (tpart_t)pi;
                return 1;
            }
    }
    return 0;
}

int transformer_desc_quantizable(const char *name) {
    tmodule_t mod;
    int layer;
    tpart_t part;
    if (!transformer_desc_parse(name, &mod, &layer, &part)) return 0;
    tmodule_kind_t k = MODULES[mod].kind;
    return part == TP_WEIGHT && (k == TK_LINEAR || k == TK_EMBEDDING);
}

static void scalar(tensor_t *t, const char *name, dtype_t dt, const void *data) {
    memset(t, 0, sizeof *t);
    t->name = name;
    t->dtype = dt;
    t->rank = 0;
    t->numel = 1;
    t->data = data;
    t->nbytes = dtype_size(dt);
}

int transformer_desc_scalars(transformer_scalars_t *s, const transformer_spec_t *spec) {
    memset(s, 0, sizeof *s);
    s->i16[TKEY_ENC_HEADS] = s->i16[TKEY_DEC_HEADS] = (int16_t)spec->num_heads;
    s->i16[TKEY_DEC_ALIGN_LAYER] = -1; /* the last layer */
    s->i16[TKEY_DEC_ALIGN_HEADS] = 1;
    s->i8[TKEY_ENC_PRE_NORM] = s->i8[TKEY_DEC_PRE_NORM] = (int8_t)(spec->pre_norm != 0);
    s->i8[TKEY_ENC_ACT] = s->i8[TKEY_DEC_ACT] = (int8_t)spec->activation;
    s->i8[TKEY_ENC_SCALE_EMB] = s->i8[TKEY_DEC_SCALE_EMB] = (int8_t)(spec->scale_embeddings != 0);
    for (int k = 0; k < TKEY_WRITTEN; k++) {
        int wide = k <= TKEY_DEC_ALIGN_HEADS;
        scalar(&s->t[k], KEYS[k], wide ? DT_I16 : DT_I8, wide ? (const void *)&s->i16[k] : (const void *)&s->i8[k]);
    }
    return TKEY_WRITTEN;
}
