/*
 * gnmt_table.h — GNMT's training table (family.h; architecture "gnmt"): an encoder of Le LSTM
 * layers (bottom bidirectional, residuals from the third layer up), a decoder of Ld LSTM layers
 * with GNMT's attention from the bottom decoder layer, the context fed to every decoder layer,
 * a softmax over the (shared) wordpieces. Tensors: src/model/gnmt_desc.h; layers:
 * src/nn/rnn.h; docs/rnn.md.
 */
#ifndef TERN_TRAIN_GNMT_TABLE_H
#define TERN_TRAIN_GNMT_TABLE_H

#include "train/family.h"

/* The configuration (`tern train --architecture gnmt`). */
typedef struct {
    int hidden;            /* H: LSTM state and embedding width (default 512) */
    int att;               /* A: attention hidden size (0: H) */
    int enc_layers, dec_layers; /* Le, Ld (default 4 + 4; GNMT: 8 + 8) */
    int share_emb;         /* one embedding for both sides (-1: when the vocabulary is joint) */
    int tie_proj;          /* the output projection is the decoder embedding (default 0) */
    float init_range;      /* > 0: every parameter uniform in [-r, r] (GNMT: 0.04); 0: uniform
                              +-1/sqrt(fan-in) (PyTorch's LSTM/Linear), embeddings +-0.1 */
    float dropout;         /* on the embeddings, between the LSTM layers (the input of every encoder
                              and decoder layer above the first) and on the top decoder output
                              before the softmax (default 0.2) */
    float label_smoothing; /* (default 0.1) */
    int bf16;              /* bfloat16 compute of every GEMM (nn/rnn.h; `--precision bfloat16`) */
    /* GNMT's quantizable model (Wu et al. 2016, section 6; docs/training.md "Quantization-aware
     * training"): clip_delta > 0 clips every LSTM layer's cell state and every residual layer's
     * output to [-δ, δ] (δ >= 1: a layer's output m = o·tanh(c) is inside [-1, 1] already);
     * δ is annealed linearly from clip_delta_start to clip_delta over the first clip_anneal
     * training micro-batches (0: δ = clip_delta throughout). clip_gamma > 0 clips the softmax
     * logits to [-γ, γ]. The model files store δ (the target) and γ (gnmt/clip_delta,
     * gnmt/clip_gamma) and inference applies the same clips. */
    float clip_delta, clip_delta_start, clip_gamma;
    int clip_anneal;
} gnmt_train_config_t;

/* δ at training micro-batch `step` (the linear annealing above; 0: no clipping). */
float gnmt_clip_delta_at(const gnmt_train_config_t *c, uint64_t step);


/* The teacher-forced forward up to the logits (for the parity test): after it,
 * gnmt_train_logits(ws) holds the (B, T, V) logits of the batch (train 0: no dropout). */
tern_status_t gnmt_train_forward_logits(train_model_t *m, void *ws, const int *src, const int *tgt_in, int B, int S,
                                        int T, int train, uint64_t seed, uint64_t step);
const float *gnmt_train_logits(const void *ws);

#endif
