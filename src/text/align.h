/*
 * align.h — word (piece) alignment of a parallel corpus: IBM Model 2 with fast_align's
 * diagonal reparameterization (Dyer et al. 2013), trained by EM, with a NULL source word.
 *
 * No aligner is packaged in Debian (fast_align, GIZA++, eflomal are not), so Tern has its own
 * (docs/vmap.md). The model, for a target piece f_j (j = 1..n) and source pieces e_1..e_m:
 *   p(a_j = 0)            = p0                                       (NULL)
 *   p(a_j = i), i >= 1    = (1 - p0) * exp(-lambda * |i/m - j/n|) / Z_j
 *   p(f_j | a_j = i)      = t(f_j | e_i)                             (e_0 = NULL)
 * with p0 and lambda fixed (fast_align's defaults 0.08 and 4) and t estimated by EM from a
 * uniform start. All sums are in double precision. Legend: m source length, n target length.
 */
#ifndef TERN_ALIGN_H
#define TERN_ALIGN_H

#include "base/base.h"

typedef struct {
    int iterations;     /* EM iterations (5) */
    double p0;          /* probability of aligning to NULL (0.08) */
    double tension;     /* lambda, the pull towards the diagonal; 0: IBM Model 1 (4.0) */
} align_options_t;

align_options_t align_default_options(void);

typedef struct align_model align_model_t;

/* A corpus of n sentence pairs of token ids (source ids < src_vocab, target ids < tgt_vocab).
 * Pairs with an empty side take no part. */
typedef struct {
    int n;
    const int *const *src; const int *slen;
    const int *const *tgt; const int *tlen;
} align_corpus_t;

/* Trains the lexical table t(f | e) by EM. */
tern_status_t align_train(align_model_t **out, const align_corpus_t *c, int src_vocab, int tgt_vocab,
                          const align_options_t *opt);
void align_free(align_model_t *m);

/* t(f | e); e = -1 is NULL. 0 for a pair never seen together. */
double align_prob(const align_model_t *m, int e, int f);

/* Viterbi alignment of one pair: a[j] (n) = the source position 0..m-1 of target piece j, or -1
 * for NULL. Ties go to the lowest position (NULL first). */
void align_viterbi(const align_model_t *m, const int *src, int slen, const int *tgt, int tlen, int *a);

#endif
