/*
 * transformer_desc.h — the one description of the Transformer's stored tensors: names, shapes
 * and config keys (the scalars of CTranslate2's TransformerSpec). The inference loader
 * (transformer_load.c), the training model (src/train/model.c), the checkpoint writer (through
 * the training table) and `tern convert` all read the names from here; nothing else spells them.
 *
 * The functions training and inference both compute on the model's inputs (the sinusoidal
 * position table, one embedding + position row) are layers: src/nn/layers.h.
 *
 * Legend: C model width, F feed-forward width, Vs/Vt source/target vocabulary, P rows of a
 * learned position table, Le/Ld encoder/decoder layers.
 *
 * Names are CTranslate2's TransformerSpec variable names, which are also Tern's (a Tern
 * checkpoint's model.safetensors uses them as they are). Where CTranslate2 has a second spelling
 * that the loader accepts (older single-source models: "encoder/embeddings/weight"; the global
 * "num_heads"), transformer_desc lists it as the alternative (TRANSFORMER_ENC_EMB_ALT,
 * TRANSFORMER_KEY_HEADS_ALT).
 */
#ifndef TERN_TRANSFORMER_DESC_H
#define TERN_TRANSFORMER_DESC_H

#include <stddef.h>
#include <stdint.h>

#include "model/desc.h"
#include "model/weights.h"

/* The modules of the model: each is a group of tensors under one path prefix. */
typedef enum {
    TM_ENC_EMB = 0,    /* encoder/embeddings_0                   embedding  (Vs, C) */
    TM_DEC_EMB,        /* decoder/embeddings                     embedding  (Vt, C) */
    TM_ENC_POS,        /* encoder/position_encodings             positions  (P, C)  learned only */
    TM_DEC_POS,        /* decoder/position_encodings             positions  (P, C)  learned only */
    /* encoder layer l: encoder/layer_l/... */
    TM_ENC_SELF_LN,    /* self_attention/layer_norm              norm       (C) */
    TM_ENC_SELF_QKV,   /* self_attention/linear_0                linear     (3C, C) fused Q, K, V */
    TM_ENC_SELF_OUT,   /* self_attention/linear_1                linear     (C, C) */
    TM_ENC_FFN_LN,     /* ffn/layer_norm                         norm       (C) */
    TM_ENC_FFN1,       /* ffn/linear_0                           linear     (F, C) */
    TM_ENC_FFN2,       /* ffn/linear_1                           linear     (C, F) */
    TM_ENC_FINAL_LN,   /* encoder/layer_norm                     norm       (C)  pre-norm only */
    /* decoder layer l: decoder/layer_l/... */
    TM_DEC_SELF_LN,    /* self_attention/layer_norm              norm       (C) */
    TM_DEC_SELF_QKV,   /* self_attention/linear_0                linear     (3C, C) */
    TM_DEC_SELF_OUT,   /* self_attention/linear_1                linear     (C, C) */
    TM_DEC_SSRU,       /* ssru/linear_0                          linear     (2C, C) the SSRU decoder
                          (Marian's --dec-cell ssru): W and Wf stacked, bias 0 and bf; in place of
                          the self-attention's linears (its layer_norm kept: the sub-layer's norm) */
    TM_DEC_CROSS_LN,   /* attention/layer_norm                   norm       (C) */
    TM_DEC_CROSS_Q,    /* attention/linear_0                     linear     (C, C) */
    TM_DEC_CROSS_KV,   /* attention/linear_1                     linear     (2C, C) fused K, V */
    TM_DEC_CROSS_OUT,  /* attention/linear_2                     linear     (C, C) */
    TM_DEC_FFN_LN,     /* ffn/layer_norm                         norm       (C) */
    TM_DEC_FFN1,       /* ffn/linear_0                           linear     (F, C) */
    TM_DEC_FFN2,       /* ffn/linear_1                           linear     (C, F) */
    TM_DEC_FINAL_LN,   /* decoder/layer_norm                     norm       (C)  pre-norm only */
    TM_PROJ,           /* decoder/projection                     linear     (Vt, C) */
    TM_COUNT
} tmodule_t;

typedef enum { TK_EMBEDDING, TK_POSITIONS, TK_NORM, TK_LINEAR } tmodule_kind_t;

/* The tensors of a module: linear weight + bias, norm gamma + beta, embedding weight,
 * positions encodings. */
typedef enum { TP_WEIGHT = 0, TP_BIAS, TP_GAMMA, TP_BETA, TP_ENCODINGS } tpart_t;

tmodule_kind_t transformer_module_kind(tmodule_t mod);
/* 0 global, 1 encoder layer, 2 decoder layer. */
int transformer_module_side(tmodule_t mod);
/* The path of a module ("encoder/layer_3/self_attention/linear_0"; layer ignored for global
 * modules) into buf; returns buf. */
const char *transformer_module_path(char *buf, size_t n, tmodule_t mod, int layer);
/* The last path component of a part ("weight", "bias", "gamma", "beta", "encodings"). */
const char *transformer_part_name(tpart_t part);
/* path + "/" + part into buf; returns buf. */
const char *transformer_tensor_name(char *buf, size_t n, tmodule_t mod, int layer, tpart_t part);

/* What the tensors' shapes depend on. */
typedef struct {
    int src_vocab, tgt_vocab; /* Vs, Vt */
    int d, ff;                /* C, F */
    int enc_layers, dec_layers;
    int max_pos;              /* P (learned positions) */
    int pre_norm;             /* 1: final layer norms exist */
    int learned_pos;          /* 1: position tables are tensors */
    int share_emb;            /* the decoder embedding is the encoder's (an alias) */
    int tie_proj;             /* the projection weight is the decoder embedding (an alias) */
    int proj_bias;            /* the projection has a bias */
    int ssru;                 /* 1: the decoder's self-attention is Marian's SSRU (TM_DEC_SSRU) */
} transformer_dims_t;

/* The shape of a module's weight (linear (N, K), embedding (V, C), positions (P, C)) or of a
 * norm's gamma ((C), *cols = 0). A linear's bias is (N). */
void transformer_module_shape(const transformer_dims_t *dims, tmodule_t mod, int *rows, int *cols);

/* One stored tensor. */
typedef struct {
    char name[96];
    int rank;         /* 1 or 2 */
    int shape[2];     /* shape[1] 0 for rank 1 */
    tmodule_t module;
    tpart_t part;
    int layer;        /* -1 for global modules */
} transformer_tensor_t;

/* Every stored tensor of a model with these dims (aliases excluded), in a fixed order: modules
 * in tmodule_t order, within a module its parts, within a part the layers (so that one part of
 * all layers is contiguous when the caller lays the tensors out in this order: the training
 * model's flat buffer). out NULL: counts only. Returns the count. */
int transformer_desc_tensors(const transformer_dims_t *dims, transformer_tensor_t *out);

/* Tied names: names[i] is stored as targets[i] (at most 2). Returns the count. */
int transformer_desc_aliases(const transformer_dims_t *dims, const char *names[2], const char *targets[2]);

/* Parses a stored tensor name of the description (alternative spellings included) into module,
 * layer and part; 0 when the name is not one of the description's. */
int transformer_desc_parse(const char *name, tmodule_t *mod, int *layer, tpart_t *part);

/* Whether CTranslate2 (and `tern convert --quantize int8`) stores this tensor as int8 with a
 * per-row "<name>_scale": linear weights and embeddings. */
int transformer_desc_quantizable(const char *name);

/* Alternative spellings the loader accepts. */
#define TRANSFORMER_ENC_EMB_ALT "encoder/embeddings/weight"
#define TRANSFORMER_KEY_HEADS_ALT "num_heads"

/* ------------------------------------------------------------ config keys */

/* The spec scalars (rank-0 tensors of model.bin / model.safetensors). */
typedef enum {
    TKEY_ENC_HEADS = 0,       /* encoder/num_heads          int16 */
    TKEY_DEC_HEADS,           /* decoder/num_heads          int16 */
    TKEY_DEC_ALIGN_LAYER,     /* decoder/alignment_layer    int16 (-1: the last) */
    TKEY_DEC_ALIGN_HEADS,     /* decoder/alignment_heads    int16 */
    TKEY_ENC_PRE_NORM,        /* encoder/pre_norm           int8 */
    TKEY_DEC_PRE_NORM,        /* decoder/pre_norm           int8 */
    TKEY_ENC_ACT,             /* encoder/activation         int8 (activation_t) */
    TKEY_DEC_ACT,             /* decoder/activation         int8 */
    TKEY_ENC_SCALE_EMB,       /* encoder/scale_embeddings   int8 */
    TKEY_DEC_SCALE_EMB,       /* decoder/scale_embeddings   int8 */
    TKEY_WRITTEN,             /* the keys above are the ones a Tern checkpoint writes */
    TKEY_DEC_ZERO_START = TKEY_WRITTEN, /* decoder/start_from_zero_embedding (read only) */
    TKEY_DEC_RAW_SELF_KV,     /* decoder/marian_raw_self_kv: Marian 1.12's incremental pre-norm
                                 decoding (read only; Tern's, not CTranslate2's) */
    TKEY_DEC_SSRU,            /* decoder/ssru: the decoder's self-attention is an SSRU (Marian's
                                 --dec-cell ssru; read only, Tern's; its linears TM_DEC_SSRU) */
    TKEY_DEC_NEVER_UNK,       /* decoder/marian_never_unk: <unk> is never output, its log-probability
                                 -inf after the softmax (read only; Tern's: a converted Marian model) */
    TKEY_COUNT
} tkey_t;

const char *transformer_key_name(tkey_t key);

/* The values of the written keys. */
typedef struct {
    int num_heads;
    int pre_norm;
    int activation;          /* activation_t */
    int scale_embeddings;
} transformer_spec_t;

/* Storage for the written keys as rank-0 tensors. */
typedef desc_scalars_t transformer_scalars_t;

/* Fills s with the TKEY_WRITTEN rank-0 tensors (in tkey_t order, dtypes as listed) of spec;
 * returns TKEY_WRITTEN. The tensors point into s. */
int transformer_desc_scalars(transformer_scalars_t *s, const transformer_spec_t *spec);

/* The family's description in the common form (desc.h): each spec's module and part are a
 * tmodule_t and a tpart_t; dimensions are indexed by tdim_t. */
typedef enum {
    TD_VS = 0, TD_VT, TD_C, TD_F, TD_LE, TD_LD, TD_P, TD_PRE_NORM, TD_LEARNED_POS, TD_SHARE_EMB, TD_TIE_PROJ,
    TD_PROJ_BIAS,
    TD_HEADS, TD_ACT, TD_SCALE_EMB, /* the written config keys' values (transformer_spec_t) */
    TD_SSRU,       /* transformer_dims_t.ssru */
    TD_SELF_ATTN,  /* derived: !TD_SSRU (the decoder self-attention's linears exist) */
    TD_COUNT
} tdim_t;
extern const model_desc_t TRANSFORMER_DESC;
/* dims (and spec, NULL: zeros) as the description's dimension array. */
void transformer_dims_array(const transformer_dims_t *dims, const transformer_spec_t *spec, int out[TD_COUNT]);

/* The spec name written as model.safetensors' "ct2_spec" metadata. */
#define TRANSFORMER_SPEC_NAME "TransformerSpec"

#endif
