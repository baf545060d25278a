/*
 * ensemble.h — an ensemble of models as one more implementation of the model family table
 * (family.h): the search, the translator and scoring see it as one model.
 *
 * At each step every member computes its next-token log-probabilities (R, V) for the same rows
 * and tokens (the members' target vocabularies are identical), and the ensemble writes their
 * combination with weights w_k (sum 1): TERN_ENSEMBLE_LOGPROB_MEAN  sum_k w_k log p_k (Marian's;
 * not renormalized), TERN_ENSEMBLE_PROB_MEAN  log sum_k w_k p_k (fairseq's), TERN_ENSEMBLE_LOGIT_MEAN
 * log softmax(sum_k w_k log p_k) (the renormalized geometric mean: an unfolded ensemble's), as token scores
 * (step_logprobs = 1). The attention row is the weighted mean of the members' rows (each zero
 * past its own source length). One member with weight 1 writes its log-probabilities unchanged.
 *
 * Each member has its own source encoding, so an ensemble's source for one sentence is its
 * members' sources one after the other, each prefixed by its length:
 *   n_0, ids_0[0..n_0), n_1, ids_1[0..n_1), ...   (every n_k >= 1)
 * and the length the translator batches by is max_k n_k (model_encode_source builds this).
 */
#ifndef TERN_ENSEMBLE_H
#define TERN_ENSEMBLE_H

#include "model/family.h"

extern const model_family_t model_family_ensemble;

/* An ensemble of K members (family and network each; not owned: they must outlive it). weights
 * (K, each > 0 and finite; NULL: equal) are normalized to sum 1. */
tern_status_t ensemble_new(void **net, const model_family_t *const *fams, void *const *nets, const float *weights,
                           int K, tern_ensemble_mode_t mode);

#endif
