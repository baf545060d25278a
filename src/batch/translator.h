/* translator.h — per-thread translation state and the id-level entry points shared by the batch
 * API and the streaming file translator. */
#ifndef TERN_TRANSLATOR_H
#define TERN_TRANSLATOR_H

#include "model/model.h"
#include "search/search.h"
#include "search/procs.h"

/* What one call runs with, apart from the translator's set-up: the request's search parameters
 * (or the translator's), its batch overrides and its hooks. A call points the translator at its
 * own call_t for its duration (tr->call); nothing of the translator's options changes. */
typedef struct translator_call {
    tern_search_params_t p;        /* the search parameters of the call */
    int max_batch_tokens, max_batch_size, max_input_length;
    int pretok;                    /* pieces in, pieces out (tern_request_t.pretokenized) */
    int no_sort;                   /* batches cut in input order, not sorted by length
                                      (tern_request_t.no_sort; no continuous batching) */
    int beams_apart;               /* each row of a step its own forward (tern_request_t.beams_apart) */
    int return_attention;          /* hypotheses keep their attention rows (tern_request_t.attention,
                                      or replace_unknowns) */
    int replace_unknowns;          /* tern_request_t.replace_unknowns */
    const char *const *sources;    /* with replace_unknowns: the request's sources, and their ids */
    int *const *src_ids;
    const int *src_len;
    int src_lang, tgt_lang;        /* tern_request_t's source_lang / target_lang as token ids (-1:
                                      none): the first source token; the forced first output token,
                                      left out of the results */
    const char *src_lang_code;     /* the source language's code (NULL: none), looked up in each
                                      ensemble member's vocabulary */
    const search_global_t *global; /* suppressed sequences, LMBR weights (NULL: none) */
    struct call_hooks *hooks;      /* callbacks and cancellation flag (NULL: none) */
} translator_call_t;

struct tern_translator {
    const tern_model_t *model;
    tern_translator_options_t opt;  /* the set-up, as created */
    tern_search_params_t search;    /* the default search parameters */
    translator_call_t *call;        /* the call under way (set by each entry point) */
    void *state;                 /* the model family's per-translator state */
    /* vocabulary map (model->vmap): candidates of the batch (V), scratch marks (V), tokens (rows) */
    int *vm_cand, *vm_tok, vm_tok_cap;
    uint8_t *vm_mark;
};

/* Search parameters given by an operator or a user field by field (a command line, a server's
 * flags): given's fields whose SP_* bit is in set, over base (a model's own defaults,
 * tern_model_search_params), so that what was given wins and the rest is the model's. */
enum {
    SP_BEAM = 1 << 0, SP_NHYP = 1 << 1, SP_LP = 1 << 2, SP_LNORM = 1 << 3, SP_CP = 1 << 4, SP_EOS = 1 << 5,
    SP_EARLY = 1 << 6, SP_MAXA = 1 << 7, SP_MAXB = 1 << 8, SP_MAXDEC = 1 << 9, SP_MINLEN = 1 << 10,
    SP_PRUNE_W = 1 << 11, SP_PRUNE_T = 1 << 12,
    SP_TOPK = 1 << 13, SP_TOPP = 1 << 14, SP_TEMP = 1 << 15, SP_NSAMP = 1 << 16, SP_SEED = 1 << 17, SP_REPPEN = 1 << 18,
    SP_NOREP = 1 << 19, SP_PATIENCE = 1 << 20, SP_PREFIX_BIAS = 1 << 21
};
tern_search_params_t search_params_over(const tern_search_params_t *given, unsigned set, tern_search_params_t base);

/* The 1.0.0 sizes of the public structs that grew since (include/tern.h, "Version and ABI"): what
 * struct_size 0 reads as, and what the TERN_1 versions of their defaults return (abi_compat.c).
 * A size is its last 1.0.0 field's end, rounded up to the struct's alignment. */
/* (ABI_SIZE_UPTO: base.h) */
#define SEARCH_PARAMS_SIZE_1_0 ABI_SIZE_UPTO(tern_search_params_t, prune_threshold)
#define REQUEST_SIZE_1_0 ABI_SIZE_UPTO(tern_request_t, stream_data)
/* tern_request_t as 1.2.0 shipped it (what tern_request_default@TERN_1.1 returns since it grew) */
#define REQUEST_SIZE_1_2 ABI_SIZE_UPTO(tern_request_t, token_scores)
#define MODEL_INFO_SIZE_1_0 ABI_SIZE_UPTO(tern_model_info_t, ensemble)

/* The caller's search parameters in this library's layout (NULL: the defaults), checked. */
tern_status_t search_params_in(tern_search_params_t *dst, const tern_search_params_t *src);
/* The caller's request in this library's layout (NULL: TERN_ERR_INVALID_ARG naming fn), with
 * num_sources and sources checked. */
tern_status_t request_in(tern_request_t *dst, const tern_request_t *src, const char *fn);

/* The call a request makes on tr: the request's parameters (NULL request or params: the
 * translator's), checked; the batch overrides resolved against the translator's. */
tern_status_t translator_call_init(const tern_translator_t *tr, const tern_request_t *req, translator_call_t *call);

/* Translates n token-id sources under tr->call (empty ones give num_hypotheses empty hypotheses,
 * no decoding) with per-sentence search data sd (n; NULL or entries NULL: none: forced prefixes,
 * restricted paths, LMBR posteriors): sorts them by length (not with the call's no_sort), cuts
 * batches by the token budget (a batch's padded width its longest source), restores the order in
 * res (n). */
/* 1 when translator_translate_ids_sd decodes with continuous batching (greedy or beam search with
 * finished sentences replaced by the call's later ones, search.h's greedy_search_stream and
 * beam_search_stream) for sentences without per-sentence data (sd NULL): then one call over many
 * sorted sentences keeps its batches full, where one call per batch lets each batch shrink. */
int translator_continuous(const tern_translator_t *tr);

/* keys (n): each sentence's sampling key (sample.h's sample_key of its index in the caller's whole
 * input, so that a draw never depends on the batch); NULL: sample_key(i, 0) for sentence i. */
tern_status_t translator_translate_ids_sd(tern_translator_t *tr, int *const *src, const int *len,
                                          const search_sentence_t *const *sd, const uint64_t *keys, int n,
                                          search_result_t *res);

/* A search result (vocabulary ids) as the API's result, under tr->call (pretokenized, return_scores). */
/* A search result as the API's result; src/src_len/text: its source's ids and (pretokenized input,
 * NULL otherwise) text, for replace_unknowns (src NULL: no replacement). */
tern_status_t translator_result(tern_translator_t *tr, const search_result_t *res, const int *src, int src_len,
                                const char *text, tern_result_t *r);

/* Sets the calling thread's intra-op threads from the options (0: all cores / workers). */
void translator_set_threads(const tern_translator_options_t *opt);
int tern_num_cores(void);

#endif
