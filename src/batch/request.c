/*
 * request.c — the request API's small parts: search parameters (defaults, check), a request's
 * defaults and its reading in this library's layout, the call a request makes on a translator,
 * the source token count a batch budget uses, and tern_version().
 *
 * A translator keeps its set-up (tern_translator_options_t) and its default search parameters; a
 * request's own parameters and batch overrides live in the call's translator_call_t, never in
 * the translator, so nothing is saved or restored around a call.
 */
#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "batch/translator.h"

/* The defaults of the two structs that grew in 1.1 are returned by value: these are their
 * default versions (what the programs linked since and the library itself call by the public
 * names): tern_search_default_params's TERN_1.1, tern_request_default's TERN_1.3 (tern_request_t
 * grew again after 1.2.0: no_sort, beams_apart). abi_compat.c has the older ones that fill the 1.0.0 layouts
 * (TERN_1) and the 1.2.0 layout of tern_request_t (TERN_1.1) (include/tern.h, "Version and ABI"). */
tern_search_params_t tern_search_default_params_1_1(void);
tern_request_t tern_request_default_1_3(void);
__asm__(".symver tern_search_default_params_1_1, tern_search_default_params@@TERN_1.1");
__asm__(".symver tern_request_default_1_3, tern_request_default@@TERN_1.3");

tern_search_params_t tern_search_default_params_1_1(void) {
    tern_search_params_t p;
    memset(&p, 0, sizeof p);
    p.struct_size = sizeof p;
    p.beam_size = 4;
    p.num_hypotheses = 1;
    p.length_penalty = 0.0f;
    p.length_norm = TERN_LENPEN_PLAIN;
    p.coverage_penalty = 0.0f;
    p.eos_policy = TERN_EOS_COMMON;
    p.early_stop = 1;
    p.max_length_a = 0.0f;
    p.max_length_b = 0;
    p.max_decoding_length = 256;
    p.min_length = 1;
    p.return_scores = 1;
    p.sampling_topk = 1;
    p.sampling_topp = 1.0f;
    p.sampling_temperature = 1.0f;
    p.num_samples = 1;
    p.seed = 12345;
    p.repetition_penalty = 1.0f;
    p.patience = 1.0f;
    p.no_repeat_ngram_size = 0;
    return p;
}

tern_request_t tern_request_default_1_3(void) {
    tern_request_t r;
    memset(&r, 0, sizeof r);
    r.struct_size = sizeof r;
    return r;
}

tern_status_t request_in(tern_request_t *dst, const tern_request_t *src, const char *fn) {
    if (!src) return tern_error(TERN_ERR_INVALID_ARG, "%s: NULL request", fn);
    tern_request_t d = tern_request_default();
    tern_status_t st = api_struct_in(dst, src, &d, sizeof *dst, REQUEST_SIZE_1_0, "tern_request_t");
    if (st) return st;
    if (dst->num_sources < 0 || (dst->num_sources > 0 && !dst->sources))
        return tern_error(TERN_ERR_INVALID_ARG, "%s: NULL sources or num_sources < 0", fn);
    if (dst->max_batch_size < 0 || dst->max_batch_tokens < 0 || dst->max_input_length < 0)
        return tern_error(TERN_ERR_INVALID_ARG, "max_batch_size, max_batch_tokens and max_input_length must be >= 0");
    if (dst->no_sort != 0 && dst->no_sort != 1)
        return tern_error(TERN_ERR_INVALID_ARG, "%s: no_sort must be 0 or 1 (got %d)", fn, dst->no_sort);
    if (dst->beams_apart != 0 && dst->beams_apart != 1)
        return tern_error(TERN_ERR_INVALID_ARG, "%s: beams_apart must be 0 or 1 (got %d)", fn, dst->beams_apart);
    if (dst->num_suppress < 0 || (dst->num_suppress > 0 && !dst->suppress))
        return tern_error(TERN_ERR_INVALID_ARG, "%s: NULL suppress or num_suppress < 0", fn);
    return TERN_OK;
}

/* The sampling and repetition fields (tern.h): ranges and contradictions. */
static tern_status_t check_sampling(const tern_search_params_t *c) {
    if (c->sampling_topk < 0)
        return tern_error(TERN_ERR_INVALID_ARG, "sampling_topk must be >= 0 (got %d)", c->sampling_topk);
    if (!(c->sampling_topp > 0 && c->sampling_topp <= 1))
        return tern_error(TERN_ERR_INVALID_ARG, "sampling_topp must be in (0, 1] (got %g)", (double)c->sampling_topp);
    if (!(c->sampling_temperature > 0) || isinf(c->sampling_temperature))
        return tern_error(TERN_ERR_INVALID_ARG, "sampling_temperature must be > 0 (got %g)",
                          (double)c->sampling_temperature);
    if (c->num_samples < 1 || c->num_samples > 1024)
        return tern_error(TERN_ERR_INVALID_ARG, "num_samples must be in 1..1024 (got %d)", c->num_samples);
    if (c->sampling_topk != 1 && c->beam_size > 1)
        return tern_error(TERN_ERR_INVALID_ARG, "sampling (sampling_topk %d) needs beam_size 1 (got %d)",
                          c->sampling_topk, c->beam_size);
    if (c->num_samples > 1 && c->sampling_topk == 1)
        return tern_error(TERN_ERR_INVALID_ARG, "num_samples %d needs sampling (sampling_topk 0 or > 1, got 1)",
                          c->num_samples);
    if (!(c->repetition_penalty > 0) || isinf(c->repetition_penalty))
        return tern_error(TERN_ERR_INVALID_ARG, "repetition_penalty must be > 0 (got %g)", (double)c->repetition_penalty);
    if (c->no_repeat_ngram_size < 0)
        return tern_error(TERN_ERR_INVALID_ARG, "no_repeat_ngram_size must be >= 0 (got %d)", c->no_repeat_ngram_size);
    return TERN_OK;
}

static tern_status_t check_params(const tern_search_params_t *c) {
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
    if (c->eos_policy != TERN_EOS_COMMON && c->eos_policy != TERN_EOS_PAPER && c->eos_policy != TERN_EOS_MARIAN)
        return tern_error(TERN_ERR_INVALID_ARG, "eos_policy must be common or paper");
    if (!(c->prefix_bias_beta >= 0 && c->prefix_bias_beta < 1))
        return tern_error(TERN_ERR_INVALID_ARG, "prefix_bias_beta must be in [0, 1) (got %g)", (double)c->prefix_bias_beta);
    if (c->prefix_bias_beta > 0 && c->beam_size <= 1)
        return tern_error(TERN_ERR_INVALID_ARG, "prefix_bias_beta needs beam search (beam_size > 1), as CTranslate2's");
    if (!(c->patience > 0) || !isfinite(c->patience))
        return tern_error(TERN_ERR_INVALID_ARG, "patience must be > 0 (got %g)", (double)c->patience);
    if (!(c->prune_width >= 0) || !(c->prune_threshold >= 0) || c->prune_threshold > 1)
        return tern_error(TERN_ERR_INVALID_ARG, "prune_width must be >= 0 and prune_threshold in 0..1");
    return check_sampling(c);
}

tern_status_t search_params_in(tern_search_params_t *dst, const tern_search_params_t *src) {
    tern_search_params_t d = tern_search_default_params();
    tern_status_t st = api_struct_in(dst, src, &d, sizeof *dst, SEARCH_PARAMS_SIZE_1_0, "tern_search_params_t");
    return st ? st : check_params(dst);
}

tern_search_params_t search_params_over(const tern_search_params_t *f, unsigned set, tern_search_params_t b) {
#define OVER(bit, field)                                                                                             \
    if (set & (bit)) b.field = f->field
    OVER(SP_BEAM, beam_size);
    OVER(SP_NHYP, num_hypotheses);
    OVER(SP_LP, length_penalty);
    OVER(SP_LNORM, length_norm);
    OVER(SP_CP, coverage_penalty);
    OVER(SP_EOS, eos_policy);
    OVER(SP_EARLY, early_stop);
    OVER(SP_MAXA, max_length_a);
    OVER(SP_MAXB, max_length_b);
    OVER(SP_MAXDEC, max_decoding_length);
    OVER(SP_MINLEN, min_length);
    OVER(SP_PRUNE_W, prune_width);
    OVER(SP_PRUNE_T, prune_threshold);
    OVER(SP_TOPK, sampling_topk);
    OVER(SP_TOPP, sampling_topp);
    OVER(SP_TEMP, sampling_temperature);
    OVER(SP_NSAMP, num_samples);
    OVER(SP_SEED, seed);
    OVER(SP_REPPEN, repetition_penalty);
    OVER(SP_NOREP, no_repeat_ngram_size);
    OVER(SP_PATIENCE, patience);
    OVER(SP_PREFIX_BIAS, prefix_bias_beta);
#undef OVER
    return b;
}

tern_status_t tern_search_params_check(const tern_search_params_t *params) {
    if (!params) return tern_error(TERN_ERR_INVALID_ARG, "search parameters: NULL");
    tern_search_params_t copy;
    return search_params_in(&copy, params);
}

/* A language code of the request as a token id of the model's source (side 0) or target vocabulary:
 * an error naming field when the model has no languages or not this one. */
static tern_status_t call_language(const tern_model_t *m, const char *code, const char *field, int side, int *id,
                                   const char **name) {
    const tern_model_t *m0 = m->n_members ? m->members[0] : m;
    if (m0->n_langs == 0)
        return tern_error(TERN_ERR_INVALID_ARG, "%s '%s': %s is not a multilingual model (it has no language codes)",
                          field, code, m->dir);
    size_t n = strlen(code);
    for (int i = 0; i < m0->n_langs; i++) /* M2M-100's "__de__" is also "de", as M2M100Tokenizer takes it */
        if (!strcmp(m0->langs[i], code) || (!strncmp(m0->langs[i], "__", 2) && !strncmp(m0->langs[i] + 2, code, n) &&
                                             !strcmp(m0->langs[i] + 2 + n, "__"))) {
            *name = m0->langs[i];
            *id = vocab_lookup(side ? m0->tgt_vocab : m0->src_vocab, *name);
            if (*id >= 0) return TERN_OK;
        }
    return tern_error(TERN_ERR_INVALID_ARG, "%s '%s': not a language of %s (%d codes, e.g. '%s'; tern info -m lists "
                      "them)", field, code, m->dir, m0->n_langs, m0->langs[0]);
}

tern_status_t translator_call_init(const tern_translator_t *tr, const tern_request_t *req, translator_call_t *c) {
    memset(c, 0, sizeof *c);
    if (req && req->params) {
        tern_status_t st = search_params_in(&c->p, req->params);
        if (st) return st;
    } else {
        c->p = tr->search;
    }
    c->max_batch_tokens = req && req->max_batch_tokens > 0 ? req->max_batch_tokens : tr->opt.max_batch_tokens;
    c->max_batch_size = req && req->max_batch_size > 0 ? req->max_batch_size : tr->opt.max_batch_size;
    c->max_input_length = req && req->max_input_length > 0 ? req->max_input_length : tr->opt.max_input_length;
    c->pretok = req ? req->pretokenized : 0;
    c->no_sort = req && req->no_sort;
    c->beams_apart = req && req->beams_apart;
    if (c->beams_apart && !tr->model->fam->set_rows_apart)
        return tern_error(TERN_ERR_UNSUPPORTED, "beams_apart (--batch-beams off): the %s model family decodes its "
                          "rows as one batch only (a Transformer can)", tr->model->fam->name);
    c->replace_unknowns = req && req->replace_unknowns;
    c->return_attention = req && (req->attention || req->replace_unknowns);
    c->sources = NULL, c->src_ids = NULL, c->src_len = NULL;
    c->src_lang = c->tgt_lang = -1;
    c->src_lang_code = NULL;
    const char *tgt_name = NULL;
    tern_status_t st = TERN_OK;
    if (req && req->source_lang && (st = call_language(tr->model, req->source_lang, "source_lang", 0, &c->src_lang,
                                                          &c->src_lang_code)))
        return st;
    if (req && req->target_lang && (st = call_language(tr->model, req->target_lang, "target_lang", 1, &c->tgt_lang,
                                                          &tgt_name)))
        return st;
    if (c->tgt_lang >= 0 && c->p.prefix_bias_beta > 0)
        return tern_error(TERN_ERR_INVALID_ARG, "prefix_bias_beta cannot be combined with target_lang (the language "
                          "code is a forced first token)");
    const tern_model_t *m0 = tr->model->n_members ? tr->model->members[0] : tr->model;
    if (m0->n_langs > 0 && !c->pretok && (c->src_lang < 0 || c->tgt_lang < 0))
        return tern_error(TERN_ERR_INVALID_ARG, "%s is multilingual: raw text needs a source and a target language "
                          "(source_lang, target_lang; tern translate --source-lang, --target-lang), e.g. '%s'",
                          tr->model->dir, m0->langs[0]);
    if (c->p.sampling_topk > tr->model->info.target_vocab_size)
        return tern_error(TERN_ERR_INVALID_ARG, "sampling_topk %d is larger than the target vocabulary (%d)",
                          c->p.sampling_topk, tr->model->info.target_vocab_size);
    return TERN_OK;
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
