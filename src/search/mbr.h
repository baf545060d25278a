/*
 * mbr.h — minimum Bayes-risk reranking of n-best lists: among a sentence's K hypotheses, the one
 * with the highest expected utility E_p[U(h, e)] = Σ_e p(e) U(h, e), the evidence e ranging over the
 * same hypotheses, U sentence BLEU (sacrebleu.sentence_bleu) or chrF (sacrebleu.sentence_chrf).
 *
 * Fast: each hypothesis is tokenized (13a for BLEU; code points without whitespace for chrF) and its
 * n-grams are packed into exact sorted keys once; a pair then costs one merge of sorted lists
 * (clipped counts), and the score comes from the library's bleu_compute / chrf_compute (score.h),
 * so a pair's utility equals sacreBLEU's to the last bit. K² pairs per sentence.
 */
#ifndef TERN_SEARCH_MBR_H
#define TERN_SEARCH_MBR_H

#include "base/base.h"

typedef enum { MBR_BLEU = 0, MBR_CHRF = 1 } mbr_metric_t;

typedef struct mbr_workspace mbr_workspace_t;

mbr_workspace_t *mbr_workspace_new(void);
void mbr_workspace_free(mbr_workspace_t *ws);

/* hyps (K) texts, post (K) posteriors (summing to 1). utility (K, may be NULL): the expected
 * utility of each. *best: the index of the highest (the first on ties). */
tern_status_t mbr_choose(mbr_workspace_t *ws, const char *const *hyps, const double *post, int K,
                         mbr_metric_t metric, double *utility, int *best);

/* The utility of one pair (hyp against the reference ref), for tests and tools. */
tern_status_t mbr_utility(mbr_workspace_t *ws, const char *hyp, const char *ref, mbr_metric_t metric,
                          double *u);

#endif
