/*
 * transformer_desc.c — the Transformer's tensor names, shapes and config keys (see
 * transformer_desc.h), and the input computations training and inference share.
 */
#include "model/transformer_desc.h"

#include <math.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>

/* Per module: its kind (what parts it has). */
static const tmodule_kind_t KIND[TM_COUNT] = {
    [TM_ENC_EMB] = TK_EMBEDDING, [TM_DEC_EMB] = TK_EMBEDDING, [TM_ENC_POS] = TK_POSITIONS,
    [TM_DEC_POS] = TK_POSITIONS, [TM_ENC_SELF_LN] = TK_NORM, [TM_ENC_SELF_QKV] = TK_LINEAR,
    [TM_ENC_SELF_OUT] = TK_LINEAR, [TM_ENC_FFN_LN] = TK_NORM, [TM_ENC_FFN1] = TK_LINEAR,
    [TM_ENC_FFN2] = TK_LINEAR, [TM_ENC_FINAL_LN] = TK_NORM, [TM_DEC_SELF_LN] = TK_NORM,
    [TM_DEC_SELF_QKV] = TK_LINEAR, [TM_DEC_SELF_OUT] = TK_LINEAR, [TM_DEC_SSRU] = TK_LINEAR, [TM_DEC_CROSS_LN] = TK_NORM,
    [TM_DEC_CROSS_Q] = TK_LINEAR, [TM_DEC_CROSS_KV] = TK_LINEAR, [TM_DEC_CROSS_OUT] = TK_LINEAR,
    [TM_DEC_FFN_LN] = TK_NORM, [TM_DEC_FFN1] = TK_LINEAR, [TM_DEC_FFN2] = TK_LINEAR,
    [TM_DEC_FINAL_LN] = TK_NORM, [TM_PROJ] = TK_LINEAR,
};

static const char *const PARTS[] = {"weight", "bias", "gamma", "beta", "encodings"};

/* Shapes: mul × a dimension (desc.h); V: a vector (rank 1). */
#define D(m, d) {m, TD_##d}
#define V {0, 0}
#define ONE DESC_ONCE, 0, 0, 0
#define EL TD_LE, 0, 0, 0
#define DL TD_LD, 0, 0, 0
#define ENC DESC_ENCODER
#define DEC DESC_DECODER
#define A DESC_ALWAYS
#define NOALIAS NULL, 0
#define Q8 DESC_Q8
#define F32 DESC_F32
/* a linear module's weight (N, K) and bias (N) */
/* the same, existing when cond */
#define LINEAR_IF(path, layers, N, K, side, cond, mod)                                                           \
    {path "/weight", layers, N, K, Q8, side, cond, NOALIAS, mod, TP_WEIGHT},                                    \
    {path "/bias", layers, N, V, F32, side, cond, NOALIAS, mod, TP_BIAS}
#define LINEAR(path, layers, N, K, side, mod)                                                                    \
    {path "/weight", layers, N, K, Q8, side, A, NOALIAS, mod, TP_WEIGHT},                                       \
    {path "/bias", layers, N, V, F32, side, A, NOALIAS, mod, TP_BIAS}
/* a layer norm's gamma and beta (C) */
#define NORM(path, layers, side, cond, mod)                                                                      \
    {path "/gamma", layers, D(1, C), V, F32, side, cond, NOALIAS, mod, TP_GAMMA},                               \
    {path "/beta", layers, D(1, C), V, F32, side, cond, NOALIAS, mod, TP_BETA}

/* The stored tensors in storage order: modules in tmodule_t order, within a module its parts,
 * within a part the layers (one part of all layers contiguous: the training model's buffer). */
static const desc_spec_t SPECS[] = {
    {"encoder/embeddings_0/weight", ONE, D(1, VS), D(1, C), Q8, ENC, A, NOALIAS, TM_ENC_EMB, TP_WEIGHT},
    {"decoder/embeddings/weight", ONE, D(1, VT), D(1, C), Q8, DEC, A, "encoder/embeddings_0/weight", TD_SHARE_EMB,
     TM_DEC_EMB, TP_WEIGHT},
    {"encoder/position_encodings/encodings", ONE, D(1, P), D(1, C), F32, ENC, TD_LEARNED_POS, NOALIAS, TM_ENC_POS,
     TP_ENCODINGS},
    {"decoder/position_encodings/encodings", ONE, D(1, P), D(1, C), F32, DEC, TD_LEARNED_POS, NOALIAS, TM_DEC_POS,
     TP_ENCODINGS},
    NORM("encoder/layer_%d/self_attention/layer_norm", EL, ENC, A, TM_ENC_SELF_LN),
    LINEAR("encoder/layer_%d/self_attention/linear_0", EL, D(3, C), D(1, C), ENC, TM_ENC_SELF_QKV),
    LINEAR("encoder/layer_%d/self_attention/linear_1", EL, D(1, C), D(1, C), ENC, TM_ENC_SELF_OUT),
    NORM("encoder/layer_%d/ffn/layer_norm", EL, ENC, A, TM_ENC_FFN_LN),
    LINEAR("encoder/layer_%d/ffn/linear_0", EL, D(1, F), D(1, C), ENC, TM_ENC_FFN1),
    LINEAR("encoder/layer_%d/ffn/linear_1", EL, D(1, C), D(1, F), ENC, TM_ENC_FFN2),
    NORM("encoder/layer_norm", ONE, ENC, TD_PRE_NORM, TM_ENC_FINAL_LN),
    NORM("decoder/layer_%d/self_attention/layer_norm", DL, DEC, A, TM_DEC_SELF_LN),
    LINEAR_IF("decoder/layer_%d/self_attention/linear_0", DL, D(3, C), D(1, C), DEC, TD_SELF_ATTN, TM_DEC_SELF_QKV),
    LINEAR_IF("decoder/layer_%d/self_attention/linear_1", DL, D(1, C), D(1, C), DEC, TD_SELF_ATTN, TM_DEC_SELF_OUT),
    LINEAR_IF("decoder/layer_%d/ssru/linear_0", DL, D(2, C), D(1, C), DEC, TD_SSRU, TM_DEC_SSRU),
    NORM("decoder/layer_%d/attention/layer_norm", DL, DEC, A, TM_DEC_CROSS_LN),
    LINEAR("decoder/layer_%d/attention/linear_0", DL, D(1, C), D(1, C), DEC, TM_DEC_CROSS_Q),
    LINEAR("decoder/layer_%d/attention/linear_1", DL, D(2, C), D(1, C), DEC, TM_DEC_CROSS_KV),
    LINEAR("decoder/layer_%d/attention/linear_2", DL, D(1, C), D(1, C), DEC, TM_DEC_CROSS_OUT),
    NORM("decoder/layer_%d/ffn/layer_norm", DL, DEC, A, TM_DEC_FFN_LN),
    LINEAR("decoder/layer_%d/ffn/linear_0", DL, D(1, F), D(1, C), DEC, TM_DEC_FFN1),
    LINEAR("decoder/layer_%d/ffn/linear_1", DL, D(1, C), D(1, F), DEC, TM_DEC_FFN2),
    NORM("decoder/layer_norm", ONE, DEC, TD_PRE_NORM, TM_DEC_FINAL_LN),
    {"decoder/projection/weight", ONE, D(1, VT), D(1, C), Q8, DEC, A, "decoder/embeddings/weight", TD_TIE_PROJ, TM_PROJ,
     TP_WEIGHT},
    {"decoder/projection/bias", ONE, D(1, VT), V, F32, DEC, TD_PROJ_BIAS, NOALIAS, TM_PROJ, TP_BIAS},
};
#undef D
#undef V
#undef ONE
#undef EL
#undef DL
#undef ENC
#undef DEC
#undef A
#undef NOALIAS
#undef Q8
#undef F32
#undef LINEAR
#undef LINEAR_IF
#undef NORM

enum { N_SPECS = (int)(sizeof SPECS / sizeof SPECS[0]) };

/* The config keys, in tkey_t order; the written ones are the values of a transformer_spec_t. */
static const desc_key_t KEYS[TKEY_COUNT] = {
    [TKEY_ENC_HEADS] = {"encoder/num_heads", DT_I16, TD_HEADS, 0, 1, 1 << 15, 0},
    [TKEY_DEC_HEADS] = {"decoder/num_heads", DT_I16, TD_HEADS, 0, 1, 1 << 15, 0},
    [TKEY_DEC_ALIGN_LAYER] = {"decoder/alignment_layer", DT_I16, DESC_CONST, -1, -1, 1 << 15, 0}, /* the last */
    [TKEY_DEC_ALIGN_HEADS] = {"decoder/alignment_heads", DT_I16, DESC_CONST, 1, 0, 1 << 15, 0},
    [TKEY_ENC_PRE_NORM] = {"encoder/pre_norm", DT_I8, TD_PRE_NORM, 0, 0, 1, 0},
    [TKEY_DEC_PRE_NORM] = {"decoder/pre_norm", DT_I8, TD_PRE_NORM, 0, 0, 1, 0},
    [TKEY_ENC_ACT] = {"encoder/activation", DT_I8, TD_ACT, 0, 0, 127, 0},
    [TKEY_DEC_ACT] = {"decoder/activation", DT_I8, TD_ACT, 0, 0, 127, 0},
    [TKEY_ENC_SCALE_EMB] = {"encoder/scale_embeddings", DT_I8, TD_SCALE_EMB, 0, 0, 1, 0},
    [TKEY_DEC_SCALE_EMB] = {"decoder/scale_embeddings", DT_I8, TD_SCALE_EMB, 0, 0, 1, 0},
    [TKEY_DEC_ZERO_START] = {"decoder/start_from_zero_embedding", DT_I8, DESC_CONST, 0, 0, 1,
                             DESC_KEY_OPTIONAL | DESC_KEY_READONLY},
    [TKEY_DEC_RAW_SELF_KV] = {"decoder/marian_raw_self_kv", DT_I8, DESC_CONST, 0, 0, 1,
                              DESC_KEY_OPTIONAL | DESC_KEY_READONLY},
    [TKEY_DEC_SSRU] = {"decoder/ssru", DT_I8, TD_SSRU, 0, 0, 1, DESC_KEY_OPTIONAL | DESC_KEY_READONLY},
    [TKEY_DEC_NEVER_UNK] = {"decoder/marian_never_unk", DT_I8, DESC_CONST, 0, 0, 1,
                            DESC_KEY_OPTIONAL | DESC_KEY_READONLY},
};

static const char *const DIM_NAMES[TD_COUNT] = {"Vs", "Vt", "C", "F", "Le", "Ld", "P", "pre_norm", "learned_pos",
                                                "share_emb", "tie_proj", "proj_bias", "heads", "activation",
                                                "scale_embeddings", "ssru", "self_attn"};

/* CTranslate2's other name of the encoder's embeddings (a single-embedding spec). */
static const char *const ALT_NAMES[][2] = {{TRANSFORMER_ENC_EMB_ALT, "encoder/embeddings_0/weight"}, {NULL, NULL}};
/* CTranslate2 Transformer variants Tern does not run: their flags and their tensors' name parts. */
static const char *const UNSUPPORTED_KEYS[] = {"decoder/alibi", "encoder/multi_query_attention",
                                               "decoder/multi_query_attention", NULL};
static const char *const UNSUPPORTED_PARTS[] = {"rotary", "relative_position", "input_layer_norm", "/rms",
                                                "layer_scalar", "embeddings_1/", NULL};

/* The decoder self-attention's linears exist unless its layers are SSRUs. */
static void derive(int *dims) { dims[TD_SELF_ATTN] = !dims[TD_SSRU]; }

const model_desc_t TRANSFORMER_DESC = {
    .family = "transformer",
    .alt_names = ALT_NAMES,
    .unsupported_keys = UNSUPPORTED_KEYS,
    .unsupported_parts = UNSUPPORTED_PARTS,
    .specs = SPECS,
    .n_specs = N_SPECS,
    .keys = KEYS,
    .n_keys = TKEY_COUNT,
    .dim_names = DIM_NAMES,
    .n_dims = TD_COUNT,
    .derive = derive,
};

void transformer_dims_array(const transformer_dims_t *d, const transformer_spec_t *spec, int out[TD_COUNT]) {
    memset(out, 0, sizeof(int) * TD_COUNT);
    if (d) {
        out[TD_VS] = d->src_vocab, out[TD_VT] = d->tgt_vocab, out[TD_C] = d->d, out[TD_F] = d->ff;
        out[TD_LE] = d->enc_layers, out[TD_LD] = d->dec_layers, out[TD_P] = d->max_pos;
        out[TD_PRE_NORM] = d->pre_norm, out[TD_LEARNED_POS] = d->learned_pos, out[TD_SHARE_EMB] = d->share_emb;
        out[TD_TIE_PROJ] = d->tie_proj, out[TD_PROJ_BIAS] = d->proj_bias, out[TD_SSRU] = d->ssru != 0;
    }
    derive(out);
    if (spec) {
        out[TD_HEADS] = spec->num_heads, out[TD_PRE_NORM] = spec->pre_norm != 0, out[TD_ACT] = spec->activation;
        out[TD_SCALE_EMB] = spec->scale_embeddings != 0;
    }
}

/* The spec of a module's part; -1 when the module has no such part. */
static int spec_of(tmodule_t mod, tpart_t part) {
    for (int s = 0; s < N_SPECS; s++)
        if (SPECS[s].module == (int)mod && SPECS[s].part == (int)part) return s;
    return -1;
}

/* The first spec of a module. */
static int first_spec(tmodule_t mod) {
    for (int s = 0; s < N_SPECS; s++)
        if (SPECS[s].module == (int)mod) return s;
    return 0;
}

tmodule_kind_t transformer_module_kind(tmodule_t mod) { return KIND[mod]; }

int transformer_module_side(tmodule_t mod) {
    const desc_spec_t *p = &SPECS[first_spec(mod)];
    return p->count == DESC_ONCE ? 0 : p->side == DESC_ENCODER ? 1 : 2;
}

const char *transformer_module_path(char *buf, size_t n, tmodule_t mod, int layer) {
    desc_name(&TRANSFORMER_DESC, first_spec(mod), layer, buf, n);
    char *slash = strrchr(buf, '/'); /* less the part */
    if (slash) *slash = '\0';
    return buf;
}

const char *transformer_part_name(tpart_t part) { return PARTS[part]; }

const char *transformer_tensor_name(char *buf, size_t n, tmodule_t mod, int layer, tpart_t part) {
    int s = spec_of(mod, part);
    if (s >= 0) return desc_name(&TRANSFORMER_DESC, s, layer, buf, n);
    char p[96];
    transformer_module_path(p, sizeof p, mod, layer);
    snprintf(buf, n, "%s/%s", p, PARTS[part]);
    return buf;
}

const char *transformer_key_name(tkey_t key) { return KEYS[key].name; }

void transformer_module_shape(const transformer_dims_t *dims, tmodule_t mod, int *rows, int *cols) {
    int d[TD_COUNT];
    transformer_dims_array(dims, NULL, d);
    desc_shape(&TRANSFORMER_DESC, first_spec(mod), d, rows, cols);
}

int transformer_desc_tensors(const transformer_dims_t *dims, transformer_tensor_t *out) {
    int d[TD_COUNT];
    transformer_dims_array(dims, NULL, d);
    int n = desc_tensors(&TRANSFORMER_DESC, d, NULL);
    if (!out) return n;
    desc_tensor_t *all = malloc(sizeof *all * (size_t)(n ? n : 1));
    if (!all) return 0;
    desc_tensors(&TRANSFORMER_DESC, d, all);
    for (int i = 0; i < n; i++) {
        transformer_tensor_t *t = &out[i];
        snprintf(t->name, sizeof t->name, "%s", all[i].name);
        t->rank = all[i].rank;
        t->shape[0] = all[i].shape[0];
        t->shape[1] = all[i].shape[1];
        t->module = (tmodule_t)SPECS[all[i].spec].module;
        t->part = (tpart_t)SPECS[all[i].spec].part;
        t->layer = all[i].layer;
    }
    free(all);
    return n;
}

int transformer_desc_aliases(const transformer_dims_t *dims, const char *names[2], const char *targets[2]) {
    int d[TD_COUNT];
    transformer_dims_array(dims, NULL, d);
    return desc_aliases(&TRANSFORMER_DESC, d, names, targets, 2);
}

int transformer_desc_parse(const char *name, tmodule_t *mod, int *layer, tpart_t *part) {
    int s, l;
    if (!desc_parse(&TRANSFORMER_DESC, name, &s, &l)) return 0;
    *mod = (tmodule_t)SPECS[s].module, *layer = l, *part = (tpart_t)SPECS[s].part;
    return 1;
}

int transformer_desc_quantizable(const char *name) { return desc_quantizable(&TRANSFORMER_DESC, name); }

int transformer_desc_scalars(transformer_scalars_t *s, const transformer_spec_t *spec) {
    int d[TD_COUNT];
    transformer_dims_array(NULL, spec, d);
    return desc_scalars(&TRANSFORMER_DESC, d, s);
}
