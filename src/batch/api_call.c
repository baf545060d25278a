/*
 * api_call.c — per-call options over a translator (what a server or a binding changes from one
 * request to the next), the source token count a batch budget uses, and tern_version().
 *
 * A translator keeps its set-up options (threads, batch budget, file mode); a call overrides
 * only the search options of tern_call_options_t, for that call, and leaves the translator's own
 * options as they were.
 */
#include <stdlib.h>
#include <string.h>

#include "translator.h"

tern_call_options_t tern_call_options_from(const tern_translate_options_t *options) {
    tern_translate_options_t d = tern_translate_default_options();
    /* a bad struct_size leaves the defaults here and marks the result as one that
     * tern_call_options_check() refuses (the message stays in tern_last_error()) */
    int bad = API_STRUCT_IN(&d, options, &d, tern_translate_options_t) != TERN_OK;
    const tern_translate_options_t *o = &d;
    tern_call_options_t c;
    memset(&c, 0, sizeof c);
    c.struct_size = bad ? (size_t)-1 : sizeof c;
    c.beam_size = o->beam_size;
    c.num_hypotheses = o->num_hypotheses;
    c.length_penalty = o->length_penalty;
    c.length_norm = o->length_norm;
    c.coverage_penalty = o->coverage_penalty;
    c.max_length_a = o->max_length_a;
    c.max_length_b = o->max_length_b;
    c.max_decoding_length = o->max_decoding_length;
    c.min_length = o->min_length;
    c.return_scores = o->return_scores;
    return c;
}

/* The caller's call options in this library's layout (API_STRUCT_IN; the defaults are
 * tern_call_options_from(NULL)'s). */
static tern_status_t call_in(tern_call_options_t *dst, const tern_call_options_t *c) {
    tern_call_options_t d = tern_call_options_from(NULL);
    return API_STRUCT_IN(dst, c, &d, tern_call_options_t);
}

tern_status_t tern_call_options_check(const tern_call_options_t *call) {
    if (!call) return tern_error(TERN_ERR_INVALID_ARG, "call options: NULL");
    tern_call_options_t copy;
    tern_status_t st = call_in(&copy, call);
    if (st) return st;
    const tern_call_options_t *c = &copy;
    if (c->beam_size < 1) return tern_error(TERN_ERR_INVALID_ARG, "beam_size must be >= 1 (got %d)", c->beam_size);
    if (c->num_hypotheses < 1 || c->num_hypotheses > c->beam_size)
        return tern_error(TERN_ERR_INVALID_ARG, "num_hypotheses must be in 1..beam_size (got %d, beam_size %d)",
                          c->num_hypotheses, c->beam_size);
    if (c->max_decoding_length < 1)
        return tern_error(TERN_ERR_INVALID_ARG, "max_decoding_length must be >= 1 (got %d)", c->max_decoding_length);
    if (c->min_length < 0 || c->min_length > c->max_decoding_length)
        return tern_error(TERN_ERR_INVALID_ARG, "min_length must be in 0..max_decoding_length (got %d)", c->min_length);
    if (!(c->length_penalty >= 0) || !(c->coverage_penalty >= 0))
        return tern_error(TERN_ERR_INVALID_ARG, "length_penalty and coverage_penalty must be >= 0");
    if (!(c->max_length_a >= 0) || c->max_length_b < 0)
        return tern_error(TERN_ERR_INVALID_ARG, "max_length_a and max_length_b must be >= 0");
    if (c->length_norm != TERN_LENPEN_PLAIN && c->length_norm != TERN_LENPEN_GNMT)
        return tern_error(TERN_ERR_INVALID_ARG, "length_norm must be plain or gnmt");
    return TERN_OK;
}

tern_status_t tern_translate_batch_with(tern_translator_t *tr, const char *const *sources, int n,
                                        const tern_call_options_t *c, tern_result_t *results) {
    if (!results && n > 0) return tern_error(TERN_ERR_INVALID_ARG, "tern_translate_batch_with: NULL results");
    return tern_translate_batch_ex(tr, sources, NULL, n, c, results);
}

tern_status_t tern_translate_batch_ex(tern_translator_t *tr, const char *const *sources,
                                      const char *const *prefixes, int n, const tern_call_options_t *call,
                                      tern_result_t *results) {
    if (!tr || n < 0 || (n > 0 && !sources))
        return tern_error(TERN_ERR_INVALID_ARG, "tern_translate_batch_ex: NULL translator or sources");
    tern_status_t st = tern_call_options_check(call);
    if (st) return st;
    tern_call_options_t copy;
    if ((st = call_in(&copy, call))) return st;
    const tern_call_options_t *c = &copy;
    if (n > 0 && !results && !c->on_result)
        return tern_error(TERN_ERR_INVALID_ARG, "tern_translate_batch_ex: NULL results without on_result");
    if (c->max_batch_size < 0 || c->max_batch_tokens < 0 || c->max_input_length < 0)
        return tern_error(TERN_ERR_INVALID_ARG, "max_batch_size, max_batch_tokens and max_input_length must be >= 0");
    tern_translate_options_t saved = tr->opt;
    tr->opt.beam_size = c->beam_size;
    tr->opt.num_hypotheses = c->num_hypotheses;
    tr->opt.length_penalty = c->length_penalty;
    tr->opt.length_norm = c->length_norm;
    tr->opt.coverage_penalty = c->coverage_penalty;
    tr->opt.max_length_a = c->max_length_a;
    tr->opt.max_length_b = c->max_length_b;
    tr->opt.max_decoding_length = c->max_decoding_length;
    tr->opt.min_length = c->min_length;
    tr->opt.return_scores = c->return_scores;
    if (c->max_batch_size > 0) tr->opt.max_batch_size = c->max_batch_size;
    if (c->max_batch_tokens > 0) tr->opt.max_batch_tokens = c->max_batch_tokens;
    if (c->max_input_length > 0) tr->opt.max_input_length = c->max_input_length;
    st = translator_translate_strings(tr, sources, prefixes, n, c, results);
    tr->opt = saved;
    return st;
}

tern_status_t tern_score_batch_with(tern_translator_t *tr, const char *const *sources, const char *const *targets,
                                    int n, const tern_call_options_t *call, float **token_logprobs, int *token_counts) {
    if (!tr || n < 0 || (n > 0 && (!sources || !targets || !token_logprobs || !token_counts)))
        return tern_error(TERN_ERR_INVALID_ARG, "tern_score_batch_with: NULL translator, sources, targets or outputs");
    tern_call_options_t copy;
    const tern_call_options_t *c = NULL;
    if (call) {
        tern_status_t st = call_in(&copy, call);
        if (st) return st;
        c = &copy;
    }
    return translator_score_strings(tr, sources, targets, n, c ? c->pretokenized : 0, c ? c->cancel : NULL,
                                    token_logprobs, token_counts);
}

tern_status_t tern_model_source_tokens(const tern_model_t *m, const char *text, int *count) {
    *count = 0;
    if (!m || !text) return tern_error(TERN_ERR_INVALID_ARG, "tern_model_source_tokens: NULL model or text");
    int *ids = NULL, n = 0, trunc = 0;
    tern_status_t st = model_encode_source(m, text, strlen(text), 1 << 30, &ids, &n, &trunc);
    free(ids);
    if (!st) *count = n;
    return st;
}

const char *tern_version(void) { return TERN_VERSION; }
