/*
 * lmbr.h — LMBR n-gram posteriors for the search (Iglesias et al. 2018, after Tromble et al. 2008
 * and Stahlberg et al. 2017).
 *
 * Evidence: per sentence, n-best lists of one or more systems. Posteriors p_s(e) ∝ exp(α·score)
 * within each system s; several systems: p(e) = Σ_s w_s p_s(e) / Σ_s w_s over the systems that have
 * evidence for the sentence. n-gram posteriors P(u) = Σ_{e ∋ u} p(e), n = 1..4 (presence, not
 * counts). At every step a candidate y (not EOS) after the row's history h scores
 *     λ·log P_NMT(y) + Θ0 + Σ_{n=1..4} Θn·P(h_{n-1} y)
 * with Θ0 = -1 and Θn = 1 / (4·p·r^(n-1)); EOS scores λ·log P_NMT(EOS) (it adds no word). The
 * n-grams of the evidence are grouped by their history (the paper's matrix L, one row per history
 * of n-1 tokens seen in the evidence); a row looks its last 0..3 tokens up once per order.
 */
#ifndef TERN_SEARCH_LMBR_H
#define TERN_SEARCH_LMBR_H

#include "search/procs.h"

#define LMBR_ORDER 4

/* One system's evidence for one sentence: K hypotheses as token ids with their scores. */
typedef struct {
    const int *const *tok;
    const int *len;
    const float *score;
    int K;
} lmbr_evidence_t;

/* Builds the n-gram posteriors of a sentence from S systems' evidence (entries with K = 0 or
 * NULL are systems without evidence for it). weights (S) may be NULL (all 1). */
tern_status_t lmbr_sentence_build(lmbr_sentence_t **out, const lmbr_evidence_t *const *ev, const float *weights,
                                  int S, float alpha);
void lmbr_sentence_free(lmbr_sentence_t *s);

/* P(h y) for history h (n-1 tokens, oldest first) and token y; 0 when unseen. */
float lmbr_posterior(const lmbr_sentence_t *s, const int *h, int n, int y);
/* The number of distinct evidence n-grams (n = 1..4) of a sentence, and the index (0 ..
 * count-1) of the n-gram h y, or -1 when the evidence does not have it. */
int lmbr_ngram_count(const lmbr_sentence_t *s);
int lmbr_ngram_index(const lmbr_sentence_t *s, const int *h, int n, int y);
/* Clipping state of a row: the last LMBR_ORDER-1 tokens (-1 before the start), then one bit per
 * evidence n-gram the row has output. lmbr_clip_ints: its size in ints for `count` n-grams. */
int lmbr_clip_ints(int count);
void lmbr_clip_init(int *state, int count);
void lmbr_clip_advance(const lmbr_sentence_t *s, int *state, int tok, int eos);
/* What token tok (not EOS) adds to a row's LMBR gain after the row's last tokens (state: a
 * clipping state, whose bits are read only when p->clip): theta_0 + sum_n theta_n P(h_{n-1} tok). */
float lmbr_token_gain(const lmbr_sentence_t *s, const lmbr_params_t *p, const int *state, int tok);

/* Rewrites one row of log-probs x (V) in place: λ·x + Θ0 + Σ Θn·P(h y) for y != eos, λ·x for EOS.
 * hist (H): the row's last tokens, oldest first (-1 before the start). clip: the row's clipping
 * state (lmbr_clip_init), whose n-grams earn nothing again; NULL: no clipping. */
/* Under a vocabulary map (vmap.h): marks the sentence's evidence tokens in mark (V), and the
 * sentence with its tokens as positions in the sorted candidates cand (nc); n-gram indices stay. */
void lmbr_sentence_mark(const lmbr_sentence_t *s, uint8_t *mark, int V);
tern_status_t lmbr_sentence_remap(lmbr_sentence_t **out, const lmbr_sentence_t *s, const int *cand, int nc);

void lmbr_apply_row(const lmbr_sentence_t *s, const lmbr_params_t *p, float *x, int V, int eos, const int *hist,
                    int H, const int *clip);

#endif
