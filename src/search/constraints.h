/*
 * constraints.h — terminology constraints: lexically constrained beam search with dynamic beam
 * allocation (Post & Vilar 2018), in the batched N×B form of beam.c.
 *
 * Per sentence, C target phrases (token sequences) must appear in the output. A row's state is
 * (met: bit j set when phrase j is complete; prog: j * 4096 + position while phrase j is in
 * progress, -1 otherwise). Each step, for each sentence, the candidates are the plain top-K over its
 * rows, every row's best token, and every row's tokens that advance an unmet phrase (the next token
 * of the phrase in progress, else the first token of each unmet phrase). Candidates are grouped in
 * banks by the number of constraint tokens they have met; the B beam slots are spread over the
 * banks (B / banks each, then the rest one at a time from the highest bank down, to banks that
 * still have candidates), each bank keeping its best. EOS is removed from rows with unmet phrases,
 * so a finished hypothesis has met them all; a hypothesis cut at the maximum length may not, and
 * those with fewer unmet phrases rank first.
 */
#ifndef TERN_SEARCH_CONSTRAINTS_H
#define TERN_SEARCH_CONSTRAINTS_H

#include "search/procs.h"

#define CONS_MAX 31 /* phrases per sentence */

struct cons_sentence {
    int C;        /* phrases */
    int *len;     /* (C) */
    int **tok;    /* (C) token ids */
    int total;    /* constraint tokens: sum of len */
};

/* Copies C phrases. Phrases beyond CONS_MAX or empty ones are an INVALID_ARG error. */
tern_status_t cons_sentence_new(cons_sentence_t **out, const int *const *phr, const int *len, int C);
void cons_sentence_free(cons_sentence_t *s);

/* The row state of a new hypothesis (2 ints), its update after a token, and its counts. */
void cons_state_init(int *state);
void cons_state_advance(const cons_sentence_t *s, int *state, int tok);
int cons_state_met_tokens(const cons_sentence_t *s, const int *state); /* the bank */
int cons_state_unmet(const cons_sentence_t *s, const int *state);      /* phrases not complete */

/* Workspace of the selection for beams up to B, K candidates, phrases up to CONS_MAX and up to
 * max_total constraint tokens per sentence (sized once per batch: nothing allocated per step). */
typedef struct cons_workspace cons_workspace_t;
cons_workspace_t *cons_workspace_new(int B, int K, int max_total);
void cons_workspace_free(cons_workspace_t *w);

/* The DBA selection of one sentence (the select of search_proc_t), with the rows' states at off. */
int cons_select(cons_workspace_t *w, const cons_sentence_t *s, const float *x, const float *score, int b, int V,
                const int *state, int W, int off, int B, int K, int eos, float *values, int *indices);

#endif
