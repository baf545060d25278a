/*
 * shrink.h — unfolding an ensemble of GRU models (`architecture: "rnn-gru"`) into one wide model,
 * and shrinking it data-free (Stahlberg & Byrne 2017, "Unfolding and Shrinking Neural Machine
 * Translation Ensembles"; `tern shrink`, docs/shrink.md).
 *
 * Unfolding: K members of one shape become one model whose every layer is the concatenation of
 * theirs (block-diagonal matrices, concatenated biases and embeddings); each member keeps its own
 * attention as one head of the unfolded model (rnn/attention_heads = K: a single softmax over the
 * source cannot be K of them); the projection reads the concatenated deep outputs with weights
 * w_k, so the logits are sum_k w_k z_k and the softmax is the ensemble's `logit-mean` combination
 * (the renormalized weighted geometric mean, TERN_ENSEMBLE_LOGIT_MEAN) — exact, up to float
 * rounding. Layer-normalized members are refused: the normalization over a concatenated layer
 * mixes the members' statistics.
 *
 * Shrinking (the paper's data-free "linear combination" method): in each layer the neuron whose
 * incoming weight vector is best reconstructed, in least squares, by the remaining neurons' is
 * removed, repeatedly, down to the asked width; each removed neuron's outgoing weights are folded
 * into the kept neurons' with its reconstruction coefficients (its activity is taken as that
 * combination of theirs). Layers shrunk: the encoder GRU units (each direction, within each head),
 * the attention units (within each head), the decoder GRU units (GRU1 and GRU2 share theirs: the
 * cGRU interpolates s from s'), the deep-output units. Embeddings keep their width.
 */
#ifndef TERN_TRAIN_SHRINK_H
#define TERN_TRAIN_SHRINK_H

#include "base/base.h"

typedef struct {
    double size;   /* the fraction of the unfolded model's width each shrunk layer keeps, (0, 1];
                    * 1: the unfolded model itself */
    const float *weights; /* (K) member weights (normalized to sum 1), or NULL: equal */
} shrink_options_t;

/* Unfolds the K model directories dirs into out_dir, shrunk to opt->size. Writes a summary of the
 * widths (before and after) into info (may be NULL). Errors name the member at fault: not a GRU
 * model, layer-normalized, quantized, shapes or vocabularies that differ. */
tern_status_t shrink_ensemble(const char *out_dir, const char *const *dirs, int K, const shrink_options_t *opt,
                              char *info, size_t info_n);

#endif
