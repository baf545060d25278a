/*
 * procs.h — the standard score processors (proc.h) and what they read: suppressed piece
 * sequences, forced target prefixes, decoding restricted to given hypotheses (a prefix tree), and
 * LMBR n-gram posteriors (lmbr.h). Per-sentence data come in a search_sentence_t per sentence of
 * the batch; search_procs_bind() turns them into the processor chain of one batch.
 *
 * Legend: N sentences, V vocabulary.
 */
#ifndef TERN_SEARCH_PROCS_H
#define TERN_SEARCH_PROCS_H

#include <stdint.h>

#include "search/proc.h"

/* ------------------------------------------------------------ prefix tree of token sequences */

typedef struct {
    int tok;     /* token leading to this node (-1: root) */
    int child;   /* first child (-1: none) */
    int sibling; /* next sibling (-1: none) */
    int end;     /* a sequence ends here */
} trie_node_t;

typedef struct {
    trie_node_t *node; /* node[0] is the root */
    int n, cap;
} search_trie_t;

tern_status_t trie_init(search_trie_t *t);
void trie_free(search_trie_t *t);
/* Adds seq (len tokens); returns TERN_ERR_NOMEM on failure. */
tern_status_t trie_insert(search_trie_t *t, const int *seq, int len);
/* Child of node by token, or -1. */
int trie_child(const search_trie_t *t, int node, int tok);

/* ------------------------------------------------------------ per-sentence and global data */

typedef struct lmbr_sentence lmbr_sentence_t; /* lmbr.h */
typedef struct cons_sentence cons_sentence_t; /* constraints.h */

typedef struct {
    const int *prefix;   /* forced first tokens (NULL: none) */
    int prefix_len;
    const search_trie_t *restrict_to; /* only these sequences (each followed by EOS); NULL: free */
    const lmbr_sentence_t *lmbr;      /* n-gram posteriors; NULL: no LMBR for this sentence */
    const cons_sentence_t *constraints; /* target phrases that must appear (constraints.h); NULL: none */
    int prefix_plain;    /* 1: the step after the prefix is like any other (a forced language code,
                            transformers' forced_bos_token_id); 0: CTranslate2's target_prefix rule */
} search_sentence_t;

typedef struct {
    int **seq;     /* suppressed sequences: the last token is removed after the others */
    int *len;
    int n;
    int on_logprobs; /* 1: removed after the softmax, the others not renormalized (Marian's
                        suppression of <unk>); 0: before it (CTranslate2's) */
} search_suppress_t;

typedef struct {
    float lambda;  /* weight of the NMT log-probability */
    float theta[5]; /* Tromble's linear-BLEU weights: theta[0] per token, theta[n] per n-gram match */
    int clip;       /* 1: an evidence n-gram earns theta_n P(u) only the first time a hypothesis has it
                       (its count clipped to 1, as presence on the evidence side); 0: every time */
    int sum_gain;   /* 1: the length penalty divides only lambda * log P_NMT; the gain (theta terms)
                       stays a sum, as Tromble's linear gain (theta_0 its length term) */
} lmbr_params_t;

/* Everything one batch's processors use. */
typedef struct {
    const search_suppress_t *suppress; /* NULL: none */
    const lmbr_params_t *lmbr;         /* NULL: no LMBR */
} search_global_t;

typedef struct search_procs search_procs_t;

/* Builds the processors for a batch (beam: the beam size, 1 for greedy search; prefix_bias > 0:
 * prefixes bias instead of forcing, prefix_bias_beta): sd (N) per-sentence data (entries may be NULL), g global data
 * (may be NULL). *out is NULL when no processor applies; else free with search_procs_free(). */
tern_status_t search_procs_bind(search_procs_t **out, const search_global_t *g, const search_sentence_t *const *sd,
                                int N, int V, int eos, int beam, float prefix_bias);
void search_procs_free(search_procs_t *p);
const search_proc_t *search_procs_list(const search_procs_t *p, int *count);

/* ------------------------------------------------------------ under a vocabulary map (vmap.h)
 *
 * The search then runs over positions in the batch's sorted candidates cand (nc) and the
 * processors with it: search_procs_mark() adds to the candidates what they need (mark (V): the
 * model ids, set to 1), search_remap_new() gives their data in positions, for search_procs_bind().
 * What is added: a forced prefix's tokens, restrict-to hypotheses' tokens, constraint phrases'
 * tokens and LMBR evidence tokens (all must be decodable, as CTranslate2 adds a target prefix to
 * its vmap candidates); suppressed sequences add nothing: one with a token that is not a candidate
 * can never be completed and is left out. */
int search_id_position(const int *cand, int nc, int id); /* -1: not a candidate */
void search_procs_mark(const search_global_t *g, const search_sentence_t *const *sd, int N, int V, uint8_t *mark);

typedef struct search_remap search_remap_t;
tern_status_t search_remap_new(search_remap_t **out, const search_global_t *g, const search_sentence_t *const *sd,
                               int N, const int *cand, int nc);
/* The remapped global data (NULL when g was) and sentences (N entries, NULL where sd's were). */
const search_global_t *search_remap_global(const search_remap_t *r);
const search_sentence_t *const *search_remap_sentences(const search_remap_t *r);
void search_remap_free(search_remap_t *r);

/* The LMBR processor's data (lmbr.c): theta from p and r (Tromble et al.). */
lmbr_params_t lmbr_params(float lambda, float p, float r);

#endif
