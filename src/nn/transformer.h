/*
 * nn/transformer.h — the Transformer's layers: the one forward that inference
 * (src/model/transformer.c) and training (src/train/model.c) both run.
 *
 * Legend: M rows (tokens), B sentences, S their longest length, C model width, H heads,
 * F feed-forward width.
 *
 * A sublayer (attention or feed-forward, f) sits in a residual frame, pre-norm or post-norm:
 *   pre-norm:  y = x + dropout(f(LN(x)))
 *   post-norm: y = LN(x + dropout(f(x)))
 * nn_sublayer_in gives f's input, nn_sublayer_out the frame's output. An encoder layer is the
 * self-attention sublayer then the feed-forward one (nn_encoder_layer_forward). Training passes
 * buffers that keep every activation its backward reads (per layer) and its dropout rates;
 * inference passes a few scratch buffers that the layers reuse, in place where a value is dead,
 * and rates of 0 (the same arithmetic, element for element). The decoder's layers are these same
 * sublayers around its attentions: over whole target sequences in training, one step over a cache
 * in inference (model/transformer.c: the only inference-specific part).
 */
#ifndef TERN_NN_TRANSFORMER_H
#define TERN_NN_TRANSFORMER_H

#include <stdint.h>

#include "nn/dense.h"
#include "nn/layers.h"

/* A layer norm's gain and bias (C). */
typedef struct {
    const float *g, *b;
} nn_norm_t;

/* The input of a sublayer's transformation: pre-norm, LN(x) written to ln (mean and rstd saved
 * when not NULL); post-norm, x itself. */
const float *nn_sublayer_in(float *ln, float *mean, float *rstd, const float *x, const nn_norm_t *norm, int M,
                            int C, float eps, int pre_norm);

/* The frame's output, f's output in f: sum = x + dropout(f) (p, key: nn_dropout_forward's; sum is
 * f itself, or with p = 0 any buffer, x included); post-norm, then LN(sum) into ln (may be sum;
 * mean, rstd saved when not NULL). Returns the output: sum (pre-norm) or ln. */
const float *nn_sublayer_out(float *sum, float *ln, float *mean, float *rstd, const float *f, const float *x,
                             const nn_norm_t *norm, int M, int C, float eps, int pre_norm, float p, uint64_t key);

/* The feed-forward block: out = w2(dropout(act(w1(in)))) over M rows. fc (M, F) not NULL
 * (training): w1's output is kept there, before the activation, and h = dropout(act(fc)) (p, key);
 * fc NULL (inference): h = act(w1(in)), the activation fused into a packed kernel where it can be. */
tern_status_t nn_ffn_forward(float *out, float *fc, float *h, const float *in, const nn_dense_t *w1,
                             const nn_dense_t *w2, activation_t act, float p, uint64_t key, int M, nn_scratch_t *ws);

/* A batch of source sentences as the encoder lays out its rows. */
typedef struct {
    int B, S;           /* sentences; the longest length */
    const int *len;     /* (B) lengths, 1..S */
    const int *off;     /* (B) packed: sentence b's tokens are rows off[b] .. off[b] + len[b] - 1
                           (inference: no padding rows); NULL: padded, rows b·S .. b·S + S - 1
                           (training: the positions past len[b] are computed and masked) */
} nn_batch_t;

/* Multi-head self-attention without a causal mask (the encoder's): ctx (rows, C) from the fused
 * qkv (rows, 3C). A padded batch runs nn_attention_forward: att (B, H, S, S) receives the
 * probabilities (the backward reads them) and dropout p (key) needs scratch (B, H, S, S). A packed
 * batch runs one (sentence, head) task per thread with its own scores (from ws): nothing saved,
 * p must be 0 (att, scratch unused). */
tern_status_t nn_encoder_attention_forward(float *ctx, float *att, float *scratch, const float *qkv,
                                           const nn_batch_t *bt, int C, int H, float p, uint64_t key,
                                           nn_scratch_t *ws);

/* The sizes and options of a Transformer's layers. */
typedef struct {
    int C, H, F;
    activation_t act;
    float eps;           /* layer norm epsilon */
    int pre_norm;        /* 1 pre-norm, 0 post-norm */
} nn_tdims_t;

/* One encoder layer's dropout: rates (0 in inference) and the keys of its sites. */
typedef struct {
    float p;             /* the residual branches' (after attention, after the feed-forward) */
    float p_att;         /* the attention probabilities' */
    float p_act;         /* the feed-forward activation's */
    uint64_t k_att, k_att_out, k_act, k_ffn_out;
} nn_tdrop_t;

typedef struct {
    nn_norm_t ln_att, ln_ffn;
    nn_dense_t qkv, out;     /* (3C, C) fused Q, K, V; (C, C) */
    nn_dense_t ffn1, ffn2;   /* (F, C), (C, F) */
} nn_encoder_layer_t;

/* The buffers of one encoder layer's forward: training gives each layer its own (the backward
 * reads them all); inference gives every layer the same few, aliased where a value is dead (see
 * model/transformer.c). mean/rstd may be NULL (not saved). */
typedef struct {
    float *ln1, *mean1, *rstd1;  /* (M, C), (M), (M): the attention sublayer's layer norm */
    float *qkv;                  /* (M, 3C) */
    float *att, *att_scratch;    /* padded batches: (B, H, S, S) probabilities, dropout scratch */
    float *ctx;                  /* (M, C) the heads' outputs */
    float *sum1;                 /* (M, C) the attention output, then x + dropout(it) */
    float *ln2, *mean2, *rstd2;  /* the feed-forward sublayer's layer norm */
    float *fc;                   /* (M, F) the first feed-forward layer's output (training), or NULL */
    float *h;                    /* (M, F) after the activation */
    float *sum2;                 /* (M, C) the feed-forward output, then y's sum */
} nn_encoder_acts_t;

/* One encoder layer over the batch's rows x (M = B·S padded, or the sum of lengths packed):
 * *y receives the layer's output (sum2 pre-norm, ln2 post-norm). */
tern_status_t nn_encoder_layer_forward(const float **y, const nn_encoder_acts_t *a, const float *x,
                                       const nn_encoder_layer_t *w, const nn_batch_t *bt, int M,
                                       const nn_tdims_t *d, const nn_tdrop_t *dr, nn_scratch_t *ws);

#endif
