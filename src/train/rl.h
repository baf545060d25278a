/*
 * rl.h — refinement with the GLEU reward (Wu et al. 2016, GNMT §5): `tern train --init-from MODEL
 * --rl-gleu`.
 *
 * Per source x with reference y*, M translations y_1..y_M are sampled from the current parameters
 * (no dropout; the sampling is not differentiated), each rewarded with its sentence GLEU against
 * y* (r_m in [0, 1]: NLTK's sentence_gleu over the target token ids, 1..4-grams), the baseline is
 * the samples' mean b = mean_m r_m, and the objective maximized is
 *
 *   O = α · O_ML + O_RL,
 *   O_ML = (1 / N_tok) Σ_references Σ_t log p(y*_t | y*_<t, x)          (plain log-likelihood,
 *          per target token of the update: the trainer's usual normalization)
 *   O_RL = (1 / N_src) Σ_x (1 / M) Σ_m (r_m − b) · log p(y_m | x)       (per source of the update)
 *
 * with N_tok the reference target tokens and N_src the sources of the whole update (all
 * micro-batches, all ranks). Its gradient is that of the loss −O: the references' cross-entropy
 * with grad_scale α / N_tok (the trainer's usual pass) plus the samples' teacher-forced
 * cross-entropy (decoder input: start + y_m; output: y_m + EOS), sentence m weighted by (r_m − b)
 * (family.h's set_sentence_weights) with grad_scale 1 / (M · N_src). A sample that reached the
 * length limit without EOS is scored as if it ended there with EOS.
 *
 * Legend: B sources of a micro-batch, S / T padded source / reference lengths, M samples per source.
 */
#ifndef TERN_TRAIN_RL_H
#define TERN_TRAIN_RL_H

#include "base/base.h"
#include "text/score.h"
#include "train/family.h"

/* The target side's special ids. */
typedef struct {
    int pad, start, eos;
} rl_tokens_t;

/* What the workspace of the model holds (the family's ws_new arguments). */
typedef struct {
    int src_tokens, tgt_tokens, max_S, max_T;
} rl_caps_t;

/* Sums of one or more rl_samples_backward calls. */
typedef struct {
    double reward_sum;    /* Σ r_m over the samples */
    double weighted_nll;  /* Σ (r_m − b) · (−log p(y_m | x)) */
    long samples;         /* M · sources */
    long sample_tokens;   /* target tokens of the samples (EOS included) */
} rl_stats_t;

/* Sentence GLEU in [0, 1] of token ids hyp (hl) against ref (rl): NLTK's sentence_gleu of the two
 * id lists (1..4-grams, min of precision and recall; 0 when both are empty). ws: scratch reused
 * across calls (zero-initialized; bleu_workspace_free); buf/cap: a growing text scratch. */
tern_status_t rl_gleu_ids(double *score, bleu_workspace_t *ws, char **buf, size_t *cap, const int *hyp, int hl,
                          const int *ref, int rl);

/* The REINFORCE part of one micro-batch: src (B, S) right-padded sources, ref_out (B, T) their
 * references as the trainer's tgt_out (tokens, EOS, padding), samp[b·M + m] (slen[b·M + m] ids,
 * no start and no EOS) the samples of source b. Computes the rewards, the baselines and the
 * weights, and runs forward (no dropout) + backward of the samples in chunks that fit caps:
 * m->grads += scale · Σ_b Σ_m (r − b) · CE(y_m). rewards (B·M, may be NULL) receives r; st (may
 * be NULL) is added to. Leaves the family's sentence weights unset (NULL). */
tern_status_t rl_samples_backward(const train_family_t *fam, train_model_t *m, void *ws, const rl_caps_t *caps,
                                  const rl_tokens_t *tok, const int *src, int B, int S, const int *ref_out, int T,
                                  int M, const int *const *samp, const int *slen, float scale, double *rewards,
                                  rl_stats_t *st);

#endif
