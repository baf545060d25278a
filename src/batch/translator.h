/* translator.h — per-thread translation state and the id-level entry points shared by the batch
 * API and the streaming file translator. */
#ifndef TERN_TRANSLATOR_H
#define TERN_TRANSLATOR_H

#include "model/model.h"
#include "search/search.h"
#include "search/procs.h"

struct tern_translator {
    const tern_model_t *model;
    tern_translate_options_t opt;
    void *state;                 /* the model family's per-translator state */
    /* vocabulary map (model->vmap): candidates of the batch (V), scratch marks (V), tokens (rows) */
    int *vm_cand, *vm_tok, vm_tok_cap;
    uint8_t *vm_mark;
    const search_global_t *global; /* suppressed sequences, LMBR weights (NULL: none) */
    struct call_hooks *hooks;      /* callbacks and cancellation flag of the current call (NULL: none) */
};

/* Translates n token-id sources (empty ones give num_hypotheses empty hypotheses, no decoding):
 * sorts them by length, cuts batches by the token budget, restores the order in res (n). */
tern_status_t translator_translate_ids(tern_translator_t *tr, int *const *src, const int *len, int n,
                                       search_result_t *res);

/* The same with per-sentence search data sd (n; NULL or entries NULL: none): forced prefixes,
 * restricted paths, LMBR posteriors. */
/* 1 when translator_translate_ids_sd decodes with continuous batching (greedy or beam search with
 * finished sentences replaced by the call's later ones, search.h's greedy_search_stream and
 * beam_search_stream) for sentences without per-sentence data (sd NULL): then one call over many
 * sorted sentences keeps its batches full, where one call per batch lets each batch shrink. */
int translator_continuous(const tern_translator_t *tr);

tern_status_t translator_translate_ids_sd(tern_translator_t *tr, int *const *src, const int *len,
                                          const search_sentence_t *const *sd, int n, search_result_t *res);

/* tern_translate_batch_prefix() with the hooks of a call (callbacks, cancel flag, pretokenized; call
 * NULL: none); the options in tr->opt are the call's. results may be NULL with call->on_result. */
tern_status_t translator_translate_strings(tern_translator_t *tr, const char *const *sources,
                                           const char *const *prefixes, int n, const tern_call_options_t *call,
                                           tern_result_t *results);
/* tern_score_batch() with pretok and a cancellation flag (NULL: none). */
tern_status_t translator_score_strings(tern_translator_t *tr, const char *const *sources, const char *const *targets,
                                       int n, int pretok, const volatile int *cancel, float **token_logprobs,
                                       int *token_counts);

/* Sets the calling thread's intra-op threads from the options (0: all cores / workers). */
void translator_set_threads(const tern_translate_options_t *opt);
int tern_num_cores(void);

#endif
