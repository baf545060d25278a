/*
 * rnn_gru_train.h — the GRU family's training table (`tern train --architecture rnn-gru`): the
 * tensors of src/model/rnn_gru_desc.h in one flat buffer, forward and backward through
 * src/nn/rnn.h, the label-smoothed cross-entropy of layers.h.
 */
#ifndef TERN_TRAIN_RNN_GRU_TRAIN_H
#define TERN_TRAIN_RNN_GRU_TRAIN_H

#include "train/family.h"

/* The configuration (train_family_t.create's config for "rnn-gru"). */
typedef struct {
    int emb;              /* E: embedding width (default 256) */
    int enc_hidden;       /* He: encoder GRU width per direction (default 256) */
    int dec_hidden;       /* Hd: decoder GRU width (default 256) */
    int att;              /* A: attention hidden size (default: Hd) */
    int out;              /* O: deep-output width (default: E, so the projection can be tied) */
    int share_emb;        /* one embedding for both sides: 1, 0, -1 when the vocabulary is joint */
    int tie_proj;         /* the output projection is the target embedding (needs O == E) */
    float init_scale;     /* > 0: every weight uniform in [-s, s]; 0: Glorot-uniform matrices */
    int layer_norm;       /* layer-normalized GRU cells (Nematus/Marian; nn/rnn.h) */
    float dropout;        /* on the source and target embeddings and on the deep output (before the
                             output layer) */
    float label_smoothing;
    int bf16;             /* bfloat16 compute of every GEMM (nn/rnn.h; `--precision bfloat16`) */
    /* from the data (set by create) */
    int src_vocab, tgt_vocab, pad_id;
} rnn_gru_config_t;

void rnn_gru_default_config(rnn_gru_config_t *c);

/* The probabilities (B·T, Vt) of the last forward (the softmax of its logits), for the parity
 * test with the inference step (tests/c/test_rnn_gru.c); valid until the backward. */
const float *rnn_gru_train_probs(const void *ws);


#endif
