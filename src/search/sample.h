/*
 * sample.h — random sampling of a step's token (greedy search) and the repetition controls
 * (score processors, proc.h).
 *
 * Sampling is a step of the greedy search, not a processor: a processor changes scores, and the
 * hypothesis score must stay the model's log-probability (after the processors) of the token
 * drawn, while the draw uses that distribution divided by the temperature and cut to the top-k
 * tokens and the top-p nucleus (CTranslate2's order: temperature, top-k, top-p). The generator is
 * counter-based: the uniform number of a draw is a hash of (seed, key, step), key = the sentence's
 * index in the caller's input << 20 | its sample index, so a draw depends on nothing else (threads,
 * batch composition, the other rows).
 *
 * Legend: R rows, V vocabulary.
 */
#ifndef TERN_SEARCH_SAMPLE_H
#define TERN_SEARCH_SAMPLE_H

#include <stdint.h>

#include "search/proc.h"

typedef struct {
    int on;            /* 0: argmax (sampling_topk 1) */
    int topk;          /* 0: the whole vocabulary */
    float topp;        /* (0, 1]; 1: off */
    float temperature; /* > 0 */
    uint64_t seed;
} search_sampling_t;

/* The key of sample j of input sentence i. */
static inline uint64_t sample_key(uint64_t i, int j) { return i << 20 | (uint64_t)j; }

/* A uniform number in [0, 1) from (seed, key, step): splitmix64's finalizer over the three. */
double sample_uniform(uint64_t seed, uint64_t key, int step);

/* Scratch of sample_row: V of them. */
typedef struct {
    double w; /* exp(x / temperature - max) */
    int i;    /* token */
} sample_pair_t;

/* The token drawn from row x (V log-probabilities or logits; -inf: never) with uniform number u
 * in [0, 1); work (V) scratch. With topk 1: the argmax (the first of equal maxima). */
int sample_row(const search_sampling_t *s, const float *x, int V, double u, sample_pair_t *work);

/* The exact probabilities p (V) with which sample_row draws each token (for tests). */
void sample_distribution(const search_sampling_t *s, const float *x, int V, sample_pair_t *work, double *p);

/* The repetition controls of one batch (processors on the logits): penalty (1: off) and
 * no-repeat n-gram size (0: off), over the last `history` tokens of each row (the whole hypothesis
 * up to SEARCH_MAX_HISTORY_LONG tokens). out (2) receives the processors; returns their count, or
 * -1 when out of memory. Free with sample_repeat_free(). */
typedef struct sample_repeat sample_repeat_t;
int sample_repeat_procs(sample_repeat_t **self, float penalty, int ngram, int history, int V, search_proc_t *out);
void sample_repeat_free(sample_repeat_t *self);

#endif
