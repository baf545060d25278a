/* quality.h — per-sentence and per-word quality estimates from a hypothesis's token
 * log-probabilities (tern_request_t.token_scores), as Bergamot's unsupervised estimator.
 *
 * Sentence score: the mean of the token log-probabilities, end token included
 * (sum of log p(y_t | x, y_<t) for t = 1..T+1, over T+1). Words: a word is a run of target pieces
 * from one that starts with U+2581 ("▁", SentencePiece's word boundary; or the first piece) up
 * to the next such piece, the end token excluded; its score is the mean of its pieces'
 * log-probabilities, and its span the bytes [start, end) of the hypothesis text it became
 * (found by reading the pieces' surface text in order; a word whose pieces cannot be found there,
 * e.g. after replace_unknowns, spans up to the next white space). */
#ifndef TERN_SERVE_QUALITY_H
#define TERN_SERVE_QUALITY_H

#include <stddef.h>

#include "tern.h"

typedef struct {
    size_t start, end; /* bytes of the hypothesis text */
    float score;       /* mean log-probability of its pieces */
} quality_word_t;

/* *score and *words (malloc'd, *n_words entries; NULL when none) for the hypothesis text of
 * ts. 0, or -1 out of memory. An empty ts (no tokens) gives score 0 and no words. */
int quality_estimate(const tern_token_scores_t *ts, const char *text, double *score, quality_word_t **words,
                     int *n_words);

#endif
