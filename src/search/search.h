/*
 * search.h — greedy and beam search, transparent to the model.
 *
 * A model is seen through decoder_iface_t only: step() gives the logits (or log-probabilities,
 * see decoder_iface_t.logprobs) of the current rows,
 * set_rows() reorders/expands/compacts the rows (the paper's GETMATRIXBYROWS). Sentences that
 * finish leave the batch at once. Legend: N sentences, B beam size, R rows, V vocabulary,
 * S padded source length.
 */
#ifndef TERN_SEARCH_H
#define TERN_SEARCH_H

#include "tern.h"
#include "search/proc.h"
#include "search/sample.h"

struct search_result;

typedef struct {
    void *self;
    int vocab_size;
    int source_len;  /* S of the current batch (for attention rows) */
    /* logits (R, V) for the current rows; attn (R, S) when not NULL */
    tern_status_t (*step)(void *self, const int *tokens, int t, float *logits, float *attn);
    /* new row i continues old row parent[i] and belongs to sentence sent[i] */
    tern_status_t (*set_rows)(void *self, const int *parent, const int *sent, int R);
    /* 0: step() writes logits, normalized here by a log-softmax; 1: it writes token scores in log
     * space (an ensemble's combination), used as they are -- except at steps before min_length,
     * where EOS is removed and the rest renormalized by a log-softmax as for logits */
    int logprobs;
    /* optional (NULL: none): greedy search calls it with 1 when it reads only each row's argmax
     * (no scores, no processors) and with 0 when it ends; step() may then write, for tokens that
     * cannot be the row's largest, any smaller value (model_family_t.set_argmax_only) */
    tern_status_t (*set_argmax_only)(void *self, int on);
    /* optional (NULL: none): for the next step, in argmax-only mode, rows r with rows[r] set need
     * the argmax over the tokens other than tok (model_family_t.set_argmax_ban) */
    tern_status_t (*set_argmax_ban)(void *self, int tok, const unsigned char *rows);
    /* optional (NULL: none): in argmax-only mode, from now until it is called with n = 0, every
     * row's argmax leaves out toks (n): a row whose largest value is one of them gets its full
     * logits (model_family_t.set_argmax_never); an error where the model cannot */
    tern_status_t (*set_argmax_never)(void *self, const int *toks, int n);
} decoder_iface_t;

typedef struct {
    int beam_size;            /* 1: greedy */
    int num_hypotheses;       /* n-best kept per sentence */
    float length_penalty;     /* alpha */
    tern_length_norm_t length_norm;
    float coverage_penalty;   /* beta */
    tern_eos_policy_t eos_policy;
    int early_stop;           /* 1: stop at B finished hypotheses (CT2/fairseq); 0: until no live
                                 hypothesis can beat the n-best finished ones */
    int min_length;
    int need_scores;          /* greedy: compute log-probs (else argmax of the logits) */
    int bos, eos;             /* start token, end token */
    const search_proc_t *procs; /* score processors run after the minimum length (proc.h) */
    int num_procs;
    /* beam pruning (GNMT; off when 0): a candidate more than prune_width below the best candidate of
     * its sentence at that step is dropped, and so is a live hypothesis whose normalized score is more
     * than prune_width below the best finished one's; a candidate whose token log-prob is below
     * log(prune_threshold) is dropped (the SDL paper's threshold; 0: off) */
    float prune_width;
    float patience;     /* with penalties: a sentence stops after round(B * patience) finished (0: 1) */
    float prune_threshold;
    /* random sampling (greedy search; sample.h): on when sampling.on; sample_key (N) each
     * sentence's key of the generator (its index in the caller's input and its sample index) */
    search_sampling_t sampling;
    const uint64_t *sample_key;
    /* hooks of one call (NULL: none; nothing is computed for them when absent) */
    const volatile int *cancel; /* read before each step: nonzero stops with TERN_ERR_CANCELLED */
    /* 1: each hypothesis keeps the model's attention row (step()'s attn, S wide) of each of its
     * tokens (hypothesis_t.attn); greedy_search and beam_search only */
    int return_attention;
    /* sentence n's search is finished; r is its final result (still the search's); nonzero: stop
     * with TERN_ERR_CANCELLED */
    int (*on_finish)(void *ctx, int n, const struct search_result *r);
    /* step t of sentence n: greedy, its hypothesis after the step's token (last: it ended at this
     * step); beam, its best live hypothesis (highest raw score) after the step, last 0; tokens
     * (len) are the search's (vocabulary positions under a vocabulary map); nonzero: stop */
    int (*on_step)(void *ctx, int n, int t, const int *tokens, int len, int last);
    void *hook_ctx;
} search_options_t;

/* 1 when the call's cancellation flag is set (a relaxed atomic load). */
static inline int search_cancelled(const search_options_t *o) {
    return o->cancel && __atomic_load_n(o->cancel, __ATOMIC_RELAXED);
}

/* One finished hypothesis. */
typedef struct {
    int *tokens;   /* without the start token and without EOS */
    int length;
    float score;   /* normalized (length/coverage penalties applied) */
    float raw;     /* sum of token log-probs (EOS included when it ended with EOS) */
    int unmet;     /* constraints it leaves unmet (0 without constraints); fewer come first */
    float *attn;   /* with search_options_t.return_attention: (length, S) the attention row of the
                      step that chose each token (S: the decoder's source_len), else NULL */
} hypothesis_t;

typedef struct search_result {
    int n;
    hypothesis_t *hyps; /* (n) best first */
} search_result_t;

void search_result_free(search_result_t *r);

/* Decodes N sentences whose rows (one per sentence, row i -> sentence i) are ready in the model.
 * max_len (N): maximum output tokens per sentence. results (N) are filled; on failure (a
 * cancellation included) they are left empty (n 0, hyps NULL) and nothing is allocated. */
tern_status_t greedy_search(const decoder_iface_t *dec, int N, const int *max_len,
                            const search_options_t *opt, search_result_t *results);
tern_status_t beam_search(const decoder_iface_t *dec, int N, const int *max_len,
                          const search_options_t *opt, search_result_t *results);

/* Continuous batching (greedy_search_stream): the sentences to decode, admitted in this order. */
typedef struct {
    /* Encodes sentences first .. first + n - 1 and appends one row each, at its step 0, after the
     * current rows, as the model's sentences (set_rows' sent) following those since the last fresh
     * start; fresh: no row is left, the model starts anew (its sentences and steps from 0). */
    tern_status_t (*admit)(void *ctx, int first, int n, int fresh);
    void *ctx;
    int N;              /* sentences */
    const int *src_len; /* (N) their source lengths (the token budget) */
    int max_rows;       /* rows in flight at most (>= 1) */
    long max_tokens;    /* rows x the longest source in flight at most (<= 0: no limit) */
    int min_admit;      /* admit when at least this many rows are free (or none is busy, or the
                           rest of the sentences fit): the encoder then runs on a few sentences */
    long *stats;        /* NULL, or (3) += decoder steps, rows over them, admissions */
} search_feed_t;

/* How many of the next sentences (from next) join now: at most free_slots, and while the token
 * budget holds (in_flight + joined sentences, times the longest source among them and the R
 * current rows' sentences row_sent, at most feed->max_tokens; the first always joins an empty
 * batch). The streaming searches' admission rule. */
int search_feed_take(const search_feed_t *feed, const int *row_sent, int R, int in_flight, int next, int free_slots);

/* Greedy search with continuous batching: up to feed->max_rows sentences in flight; as rows
 * finish, the next sentences are admitted (feed->admit) and start at their own step 0, so the steps
 * keep running on full batches. Each sentence gets what greedy_search gives it (the model's rows
 * must not depend on each other: model_family_t.admit). For a model that writes logits (not
 * dec->logprobs), without processors or coverage penalty (opt->num_procs 0, coverage_penalty 0):
 * the minimum length is applied per row. max_len, results (feed->N), hooks: as greedy_search
 * (on_step's t is the sentence's own step). */
tern_status_t greedy_search_stream(const decoder_iface_t *dec, const search_feed_t *feed, const int *max_len,
                                   const search_options_t *opt, search_result_t *results);

/* Beam search with continuous batching: up to feed->max_rows sentences in flight (each with up to
 * beam_size rows); as sentences finish, the next ones are admitted and start at their own step 0.
 * Each sentence gets what beam_search gives it; the same conditions as greedy_search_stream (no
 * processors, no coverage penalty, a model that writes logits); on_step's t is the sentence's own
 * step. */
tern_status_t beam_search_stream(const decoder_iface_t *dec, const search_feed_t *feed, const int *max_len,
                                 const search_options_t *opt, search_result_t *results);

/* Length normalization and coverage penalty as applied to finished hypotheses. */
float search_length_penalty(int length, float alpha, tern_length_norm_t norm);
float search_coverage_penalty(const float *coverage, int S, float beta);

#endif
