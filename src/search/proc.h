/*
 * proc.h — score processors: the hook of greedy and beam search (the paper's line 11). A chain of
 * processors acts on the scores of all rows of a step at once, before the top-k. Search stays
 * transparent to the model: processors see rows, their sentence, their recent tokens and a few
 * ints of per-row state that the search keeps and reorders with the rows; never a model.
 *
 * Two stages:
 *   SEARCH_STAGE_LOGITS    before normalization: a -inf here removes the token and renormalizes
 *                          the others (the minimum length, suppressed sequences, as CTranslate2);
 *   SEARCH_STAGE_LOGPROBS  on the log-probabilities: the value written is what the hypothesis
 *                          score adds (forced prefixes, restricted paths, LMBR posteriors).
 * Processors run in the chain's order within a stage. Nothing is allocated per step: a chain is
 * sized once for the largest batch (rows) and the processors keep their own workspaces.
 *
 * Legend: N sentences, R rows (N x B), V vocabulary, H history tokens per row, W state ints.
 */
#ifndef TERN_SEARCH_PROC_H
#define TERN_SEARCH_PROC_H

#include "tern.h"

enum { SEARCH_STAGE_LOGITS = 0, SEARCH_STAGE_LOGPROBS = 1 };

/* What a processor sees of the rows of one step. */
typedef struct {
    int t;            /* step: tokens each row has output so far */
    int R, V;
    const int *sent;  /* (R) batch-local sentence of each row */
    const int *hist;  /* (R, H) the last H tokens of each row, oldest first; -1 before the start */
    int H;
    const int *state; /* (R, W) per-row state of every processor */
    int W;
    int off;          /* this processor's first state int within a row */
} search_rows_t;

typedef struct {
    void *self;
    int stage;       /* SEARCH_STAGE_LOGITS or SEARCH_STAGE_LOGPROBS */
    int history;     /* recent tokens per row it reads (<= SEARCH_MAX_HISTORY_LONG) */
    int state_ints;  /* per-row state ints the search keeps for it (<= SEARCH_MAX_STATE) */
    int may_raise;   /* 1: it can add positive amounts, so a hypothesis score may grow with its length
                        (the search then drops its exact "cannot beat the finished" stopping bound) */
    /* state of sentence n's first row (state_ints > 0) */
    void (*init_state)(void *self, int n, int *state);
    /* x (R, V): the step's logits or log-probs, changed in place */
    void (*apply)(void *self, float *x, const search_rows_t *rows);
    /* the row of sentence n took token tok: update its state in place (state_ints > 0) */
    void (*advance)(void *self, int n, int *state, int tok);
    /* optional, beam search only (one processor at most): chooses the candidates of sentence n
     * instead of the plain top-K. x (b, V): the rows' log-probs after every processor, score (b) the
     * rows' scores, state (b, W) with this processor's ints at off. Writes exactly K candidates
     * (value = score + log-prob, index = row * V + token, rows from 0; -inf values pad), the first B
     * of them the next beam in any order the caller takes them in, the rest replacements, and
     * returns 1; returns 0 to leave the sentence to the plain top-K. */
    int (*select)(void *self, int n, const float *x, const float *score, int b, int V, const int *state, int W,
                  int off, int B, int K, float *values, int *indices);
    /* optional: how many of sentence n's requirements a row state leaves unmet (finished hypotheses
     * with fewer unmet come first) */
    int (*unmet)(void *self, int n, const int *state);
    /* optional: the part of a finished hypothesis' raw score that the length penalty leaves alone
     * (LMBR's gain with --lmbr-sum-gain), from its row state: score = (raw - u) / lp + u */
    float (*unnormalized)(void *self, int n, const int *state);
    /* optional (n_bans > 0): apply() only sets these tokens of every row to -inf at every step (an
     * unconditional suppression of single tokens, on logits or log-probabilities: its stage; no
     * history, no state): greedy search may then read only each row's argmax if the model keeps
     * these tokens out of it (decoder_iface_t.set_argmax_never, on logits), and the continuous
     * batching searches take such processors (search_procs_only_bans) */
    const int *bans;
    int n_bans;
    /* optional (0: none): from step `until` on, apply() changes nothing (a forced prefix's last
     * step is behind): greedy search without scores then reads the logits' argmax alone */
    int until;
} search_proc_t;

/* 1 when every one of the np processors is an unconditional ban of single tokens (n_bans > 0, no
 * history, state, selection or score of its own): what continuous batching runs; 0 otherwise. */
int search_procs_only_bans(const search_proc_t *procs, int np);

#define SEARCH_MAX_PROCS 16
#define SEARCH_MAX_HISTORY 8 /* of suppressed sequences (their length - 1) */
#define SEARCH_MAX_HISTORY_LONG 1024 /* of any processor (the repetition controls read whole hypotheses) */
#define SEARCH_MAX_STATE 1024 /* LMBR clipping keeps a bit per evidence n-gram */

/* The chain as the search runs it: the minimum length first, then the caller's processors; the
 * rows' history and state in two buffers (current, next) sized for max_rows. */
typedef struct {
    search_proc_t p[SEARCH_MAX_PROCS];
    int off[SEARCH_MAX_PROCS];
    int np;
    int H, W;
    int has_stage[2];
    int may_raise;
    int *hist, *hist2;   /* (max_rows, H) */
    int *state, *state2; /* (max_rows, W) */
    int min_length, eos; /* the built-in minimum-length processor */
    int sel;             /* the processor with select/unmet (-1: none) */
} proc_chain_t;

/* procs (np): the caller's processors (may be NULL). Returns TERN_ERR_NOMEM / INVALID_ARG. */
tern_status_t proc_chain_init(proc_chain_t *c, const search_proc_t *procs, int np, int min_length, int eos,
                              int max_rows);
void proc_chain_free(proc_chain_t *c);
/* Row n = sentence n, at the start, for n < N. */
void proc_chain_start(proc_chain_t *c, int N);
/* Runs the processors of one stage on x (R, V). */
void proc_chain_apply(proc_chain_t *c, int stage, float *x, int R, int V, int t, const int *sent);
/* The next rows: new row i continues old row parent[i] (sentence sent2[i]) with token tok2[i].
 * in_place: parent[i] <= i for every i (greedy's compaction) and the rows stay in their buffers. */
void proc_chain_advance(proc_chain_t *c, const int *parent, const int *sent2, const int *tok2, int R2, int in_place);
/* Unmet requirements of row r (sentence n) after it takes tok (-1: nothing, e.g. EOS): 0 without a
 * processor that counts them. */
int proc_chain_unmet(const proc_chain_t *c, int r, int n, int tok);
/* The unnormalized part of row r's raw score (sentence n) after it takes tok (-1: nothing, e.g.
 * EOS): the sum of the processors' unnormalized() (0 without one). */
float proc_chain_unnormalized(const proc_chain_t *c, int r, int n, int tok);

#endif
