/*
 * transformer.h — the Transformer encoder-decoder used for inference (and, later, training).
 *
 * Legend: N sentences in a batch, R decoder rows (sentences × beams, flattened), S source
 * length (padded to the batch maximum), T decoded steps so far, d model width (C), H heads,
 * dh = d / H, F feed-forward width, V vocabulary.
 *
 * The weights (transformer_t) are read-only after loading and shared by every thread. The
 * per-thread state (transformer_state_t) holds the encoder output, the cross-attention keys and
 * values (projected once per batch) and the decoder self-attention cache (an SSRU decoder: one
 * state row per decoder row and layer instead, gathered by transformer_set_rows). The cache is a tree:
 * every decoder step appends one key/value slot per live row, and each row keeps the path of
 * slot ids it descends from, so reordering beams copies a few ints instead of the cached keys.
 */
#ifndef TERN_TRANSFORMER_H
#define TERN_TRANSFORMER_H

#include "kernels/kernels.h"
#include "kernels/screen.h"
#include "model/weights.h"

typedef struct {
    const float *gamma, *beta; /* (d) */
} layernorm_t;

/* An embedding table: float32 rows, or int8 rows with per-row scales. */
typedef struct {
    int V, d;
    const float *w;      /* (V, d) */
    const int8_t *q;     /* (V, d) */
    const float *scale;  /* (V) */
    const void *pk;      /* q NULL: the rows inside the tied output projection's packed copy
                          * (linear_packed_row_s8), read from there */
    /* w NULL, float32: the rows inside the tied output projection's packed float32 copy, element
     * (n, k) at pkw[pk_off_k[k] + pk_off_n[n]] (gemm_packed_offsets) */
    const float *pkw;
    const int64_t *pk_off_k, *pk_off_n;
} embedding_t;

typedef struct {
    layernorm_t ln_attn;  /* pre-norm: before self-attention; post-norm: after the residual */
    linear_t qkv;         /* (3d, d) fused Q, K, V */
    linear_t attn_out;    /* (d, d) */
    layernorm_t ln_ffn;
    linear_t ffn1;        /* (F, d) */
    linear_t ffn2;        /* (d, F) */
    /* the same weights packed for the GEMM kernel (gemm_packed.h), NULL when not packed; an int8
     * layer's q is NULL then (given back: the packed copy replaces it, linear_forward_packed_s8) */
    const void *pk_qkv, *pk_attn_out, *pk_ffn1, *pk_ffn2;
} enc_layer_t;

typedef struct {
    layernorm_t ln_self;
    linear_t qkv;         /* (3d, d) */
    linear_t self_out;    /* (d, d) */
    layernorm_t ln_cross;
    linear_t cross_q;     /* (d, d) */
    linear_t cross_kv;    /* (2d, d) fused K, V */
    linear_t cross_out;   /* (d, d) */
    layernorm_t ln_ffn;
    linear_t ffn1;        /* (F, d) */
    linear_t ffn2;        /* (d, F) */
    linear_t ssru;        /* dec_ssru: (2d, d) W and Wf stacked, bias (2d) 0 and bf; qkv and self_out
                             unused then */
    const void *pk_ssru;
    const void *pk_qkv, *pk_self_out, *pk_cross_q, *pk_cross_kv, *pk_cross_out, *pk_ffn1, *pk_ffn2;
} dec_layer_t;

typedef struct {
    /* shape */
    int enc_layers, dec_layers, d, H, F;
    int pre_norm;             /* 1 pre-norm, 0 post-norm */
    activation_t act;
    float eps;                /* layer norm epsilon */
    int enc_scale_emb, dec_scale_emb; /* multiply embeddings by sqrt(d) */
    int dec_zero_start;       /* decoder step 0 uses a zero embedding */
    int dec_raw_self_kv;      /* pre-norm: the decoder self-attention's keys and values of steps >= 1
                                 are projected from the layer's input before its norm (step 0's
                                 attention: from the normed input), as Marian 1.12 decodes
                                 (marian_format.h) */
    int dec_ssru;             /* the decoder's self-attention is Marian's SSRU (--dec-cell ssru): per
                                 layer u = x W, f = x Wf + bf, c = sigmoid(f) c' + (1 - sigmoid(f)) u
                                 (c' the row's previous c, 0 at step 0), output relu(c) into the
                                 sub-layer's residual and norm; each row carries its c per layer */
    int alignment_layer;      /* decoder layer whose cross-attention is returned (>= 0) */
    int alignment_heads;      /* heads averaged for it (0: all) */
    /* weights */
    embedding_t enc_emb, dec_emb;
    const float *enc_pos, *dec_pos; /* (max_pos, d): learned, or a generated sinusoidal table */
    int enc_max_pos, dec_max_pos;
    enc_layer_t *enc;         /* (enc_layers) */
    dec_layer_t *dec;         /* (dec_layers) */
    layernorm_t enc_ln, dec_ln; /* final layer norms (pre-norm models); gamma NULL when absent */
    linear_t proj;            /* (V, d) output projection */
    int src_vocab, tgt_vocab;
    int int8;                 /* linear weights run in int8 */
    const void *pk_proj;      /* proj packed (gemm_packed.h), or NULL */
    int keep_proj;            /* set before transformer_pack: proj stays unpacked (its rows are
                                 gathered by transformer_set_vocab: a vocabulary map) */
    linear_screen_t *screen;  /* float32 proj: its int8 pre-screen for steps that need only the
                                 argmax (transformer_set_argmax_only), or NULL */
    int ffn1_relu_packed;     /* packed ffn1 layers apply the ReLU themselves */
    size_t packed_bytes;      /* bytes of packed weights */
    size_t weight_bytes;      /* bytes of weights as run */
    tern_hparam_t hparams[7]; /* what tern_model_info() tells of the shape (transformer_family.c) */
    /* memory owned by the model (converted/quantized tensors, tables) */
    void **owned;
    int n_owned, cap_owned;
    /* the last float32 tensor quantized at load and its int8 rows (a tied embedding's second use) */
    const void *last_quantized;
    const int8_t *last_q;
    const float *last_q_scale;
} transformer_t;

/* Builds the model from CTranslate2 TransformerSpec variables (model.bin or Tern's safetensors).
 * compute: TERN_COMPUTE_AUTO / FLOAT32 / INT8 (see tern.h). eps < 0: default 1e-6. */
tern_status_t transformer_build(transformer_t *m, weights_t *w, tern_compute_type_t compute,
                                float eps);
void transformer_free(transformer_t *m);

/* Packs the linear weights for the GEMM kernel (gemm_packed.h), once, after transformer_build
 * (and then, for a float32 output projection not kept for a vocabulary map, builds its int8
 * pre-screen, m->screen: kernels/screen.h; not when the environment variable TERN_SCREEN is "0"):
 * float32 ones, and int8 ones where w is given (an int8 layer is packed only where its plain q can be
 * given back: nothing else reads it, or only the embeddings of a tied output projection, which then
 * read their rows from the packed copy where the layout is Tern's: embedding_t.pk). When w
 * is given, the plain weight of each packed layer that nothing else uses (no embedding, no other
 * layer) is given back to it right after (weights_release): the model then
 * holds one copy of each weight, and the peak stays near the weights' size; so is every other large
 * tensor the model does not read (float32 originals of layers quantized to int8 at load). Packs
 * nothing where the machine has no such kernel, or when the environment variable TERN_GEMM_PACKED
 * is "0" ("tern": float32 layers on Tern's AVX2 panels even where oneDNN has brgemm, gemm.c).
 * Errors only when out of memory. */
tern_status_t transformer_pack(transformer_t *m, weights_t *w);

typedef struct transformer_state transformer_state_t;

transformer_state_t *transformer_state_new(const transformer_t *m);
void transformer_state_free(transformer_state_t *st);

/* Encodes N sentences (token ids; lengths >= 1) and prepares decoding with one row per sentence
 * (row i -> sentence i). Projects the cross-attention keys/values of every layer once. */
tern_status_t transformer_encode(transformer_state_t *st, const int *const *src, const int *src_len,
                                 int N);

/* Continuous batching (greedy search): encodes n more sentences (lengths >= 1) and appends one row
 * per sentence after the current rows, at its step 0; the new sentences take the indices N, N+1, ...
 * after the state's N so far (set_rows' sent). The cross-attention keys and values of sentences no
 * row belongs to any more are given back first (the live ones move to the front), so the memory
 * stays that of the sentences in flight. Each row keeps its own step (position, self-attention
 * length): transformer_step's t counts the state's steps. A row's outputs do not depend on the other
 * rows: a sentence decodes to the same tokens admitted here or encoded with transformer_encode. */
tern_status_t transformer_admit(transformer_state_t *st, const int *const *src, const int *src_len, int n);

/* One decoder step for the current rows: tokens (R) are the previous tokens, t the step
 * (0 for the start token). Writes logits (R, V). When attn is not NULL, also writes the
 * alignment layer's cross-attention (R, S) (zeros past each sentence's length). */
tern_status_t transformer_step(transformer_state_t *st, const int *tokens, int t, float *logits,
                               float *attn);

/* Sets the next rows: new row i continues old row parent[i] (its cache path) and belongs to
 * sentence sent[i]. R may grow (beam expansion after step 0) or shrink (finished sentences). */
tern_status_t transformer_set_rows(transformer_state_t *st, const int *parent, const int *sent, int R);

/* on = 1: the following steps need only each row's argmax (greedy search without scores): where
 * the model has a screen of its float32 output projection (m->screen), step() writes the exact
 * logit of every token that can be the row's largest and, for every other, a value below the row's
 * largest logit (the argmax, first index on ties, is that of the full logits); on = 0: full logits
 * again. Not under a vocabulary
 * restriction (transformer_set_vocab), which takes precedence. */
void transformer_set_argmax_only(transformer_state_t *st, int on);
/* on = 1: the following steps run each row alone (one-row GEMMs; model_family_t.set_rows_apart) */
void transformer_set_rows_apart(transformer_state_t *st, int on);

/* For the next step only (rows: NULL, or one flag per row, read during that step): where rows[r] is
 * set and the step is screened (transformer_set_argmax_only), row r's written values also give its
 * argmax over the tokens other than tok (the row's full logits when tok is its largest). For a
 * minimum length on some rows (continuous batching: rows admitted at step 0). Returns -1 (nothing
 * set) where the screen's values are not the full layer's bits (its float32 layer unpacked). */
int transformer_set_argmax_ban(transformer_state_t *st, int tok, const unsigned char *rows);
/* In argmax-only mode, until set again (n = 0: none), no row's argmax may be one of toks (n <= 8):
 * a row whose screened largest value is one of them gets its full logits (model_family_t.set_argmax_never).
 * -1 where it cannot (a screen over an unpacked layer, more than 8 tokens). */
int transformer_set_argmax_never(transformer_state_t *st, const int *toks, int n);

/* Restricts the output of the following steps to the target ids[0..n) (increasing): step() then
 * writes logits (R, n), column i for ids[i]; n = 0: the whole vocabulary again. Gathers the output
 * projection's rows (float32 or int8 with their scales) once; errors when the model's plain
 * projection weights were given back after packing (set keep_proj before transformer_pack). */
tern_status_t transformer_set_vocab(transformer_state_t *st, const int *ids, int n);

int transformer_source_len(const transformer_state_t *st); /* padded S of the batch */

#endif
