/* engine.h — the translation side of `tern serve`: one sentence queue per model, a scheduler
 * that batches sentences across requests, a pool of translators per model sharing one copy of
 * the weights, and model reload without dropping requests. No HTTP here (server.c is the HTTP
 * side); tests and tools may drive an engine directly.
 *
 * A request (translate or score) is a list of segments. Its segments join the model's queue;
 * workers form length-sorted batches under the token budget from whatever is waiting (a segment
 * that arrives while a batch runs joins the next one) and the request completes when its last
 * segment does: the caller waits on request_fd() (an eventfd, readable once complete) or
 * request_wait(). A request cancelled by its caller (a client gone) leaves the queue at the next
 * batch; segments already in a running batch finish and are discarded. */
#ifndef TERN_SERVE_ENGINE_H
#define TERN_SERVE_ENGINE_H

#include <pthread.h>
#include <stdint.h>

#include "tern.h"

typedef enum { REQ_TRANSLATE = 0, REQ_SCORE = 1 } request_kind_t;

typedef struct engine engine_t;
typedef struct engine_model engine_model_t;
typedef struct serve_request serve_request_t;

typedef struct {
    const char *name;  /* "en-de": the pair, source-target */
    const char *dir;   /* model directory */
} engine_model_spec_t;

typedef struct {
    tern_model_options_t model_options;
    tern_translator_options_t translator_options; /* threads, batch budget (its search unused) */
    tern_search_params_t search;  /* the default search parameters of a request: the fields in */
    unsigned search_set;          /* search_set (SP_*, batch/translator.h) over each model's own
                                     defaults (its generation_config.json, tern_model_search_params) */
    int workers;          /* translators per model, each on its own thread */
    int max_queue;        /* segments waiting per model before new requests are refused */
    int cross_batching;   /* 1: a batch takes segments of every waiting request; 0: one request's */
} engine_options_t;

/* Statistics for /metrics (totals since start). */
typedef struct {
    uint64_t batches, batch_segments, batch_tokens;
    uint64_t batch_size_hist[11]; /* batches of <= 1, 2, 4, ..., 512, more segments */
    uint64_t segments, source_tokens, target_tokens;
    int queued;         /* segments waiting now */
    int running;        /* segments in batches now */
    uint64_t reloads, reload_failures;
} engine_stats_t;

tern_status_t engine_create(engine_t **engine, const engine_model_spec_t *specs, int n_specs,
                            const engine_options_t *options);
/* Stops the workers once the queues are empty (the caller has stopped submitting), frees all. */
void engine_free(engine_t *engine);

int engine_num_models(const engine_t *engine);
engine_model_t *engine_model_at(engine_t *engine, int i);
engine_model_t *engine_find(engine_t *engine, const char *name);
const char *engine_model_name(const engine_model_t *m);
const char *engine_model_dir(const engine_model_t *m);
/* A multilingual model's language codes as the model names them ("deu_Latn", "__de__"; *n 0 for a
 * model of one pair), as loaded at engine_create. */
const char *const *engine_model_languages(const engine_model_t *m, int *n);
tern_search_params_t engine_default_params(const engine_t *engine);
/* A model's default search parameters (the operator's over the model's own; as of its current
 * generation, which a reload may change). Thread-safe. */
tern_search_params_t engine_model_params(engine_model_t *m);
void engine_model_stats(engine_model_t *m, engine_stats_t *out);

/* Loads every model again from its directory and swaps it in: batches under way finish on the
 * old one, later batches use the new one; nothing waiting is dropped. On failure the old model
 * stays and the error is returned (all-or-nothing per model). */
tern_status_t engine_reload(engine_t *engine);

/* Token count of text for the model's budget (source tokens with EOS). */
tern_status_t engine_count_tokens(engine_model_t *m, const char *text, int *count);
/* The source pieces the model reads for text (its end token last; an ensemble: its first
 * member's), for aligning through the attention; free with engine_pieces_free(). */
tern_status_t engine_source_pieces(engine_model_t *m, const char *text, char ***pieces, int *n);
void engine_pieces_free(char **pieces, int n);

/* A request of n segments (copied), with its search parameters (copied; unused for scoring).
 * targets: NULL for translation, the n targets for scoring. */
serve_request_t *request_new(request_kind_t kind, const tern_search_params_t *params, int n,
                             const char *const *sources, const char *const *targets, const int *ntokens);
/* A multilingual model's source and target languages for every segment of r (copied; NULL: none):
 * tern_request_t's source_lang/target_lang. A batch takes only requests with the same ones.
 * Before engine_submit; -1 when out of memory. */
int request_set_langs(serve_request_t *r, const char *source_lang, const char *target_lang);
/* Queues the request's segments (the engine takes a reference). Returns 0, or -1 when the queue
 * would pass max_queue (nothing queued: answer 503). */
int engine_submit(engine_model_t *m, serve_request_t *r);
/* An eventfd readable once the request completed (or failed). */
int request_fd(const serve_request_t *r);
/* Blocks until complete. */
void request_wait(serve_request_t *r);
/* Marks the request abandoned: its waiting segments are dropped, running ones discarded. */
void request_cancel(serve_request_t *r);
/* Drops the caller's reference (the request is freed with its last reference). */
void request_release(serve_request_t *r);

/* After completion: status (TERN_OK or the error of a batch) and its message. Call it before
 * reading the results (it orders the reads after the workers' writes). */
tern_status_t request_status(const serve_request_t *r, const char **message);
int request_size(const serve_request_t *r);
const tern_result_t *request_result(const serve_request_t *r, int i);    /* translate */
const float *request_logprobs(const serve_request_t *r, int i, int *count); /* score */
/* Before engine_submit(), translate: each segment's result also carries its token scores
 * (tern_request_t.token_scores) and/or attention (tern_request_t.attention); segments batch only
 * with segments that want the same. 0, or -1 (out of memory, or a score request). */
enum { REQ_WANT_TOKEN_SCORES = 1, REQ_WANT_ATTENTION = 2 };
int request_want(serve_request_t *r, unsigned want);
const tern_token_scores_t *request_token_scores(const serve_request_t *r, int i); /* NULL: not wanted */
const tern_attention_t *request_attention(const serve_request_t *r, int i);      /* NULL: not wanted */

#endif
