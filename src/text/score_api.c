/* score_api.c — the public face of the sacreBLEU-exact metrics (score.h): corpus BLEU and chrF
 * with options named as sacreBLEU names them, for bindings (the Python package's tern.score). */
#include <string.h>

#include "text/score.h"

tern_bleu_options_t tern_bleu_default_options(void) {
    tern_bleu_options_t o;
    memset(&o, 0, sizeof o);
    o.struct_size = sizeof o;
    o.tokenize = "13a";
    o.smooth_method = "exp";
    o.smooth_value = -1;
    o.max_ngram_order = 4;
    return o;
}

tern_status_t tern_corpus_bleu(tern_bleu_score_t *out, const char *const *hyps, const char *const *const *refs,
                               size_t n, int num_refs, const tern_bleu_options_t *options) {
    tern_bleu_options_t d = tern_bleu_default_options();
    tern_status_t ost = API_STRUCT_IN(&d, options, &d, tern_bleu_options_t);
    if (ost) return ost;
    const tern_bleu_options_t *o = &d;
    if (!out || (n > 0 && (!hyps || !refs)) || num_refs < 1)
        return tern_error(TERN_ERR_INVALID_ARG, "corpus BLEU: NULL argument or no reference stream");
    memset(out, 0, sizeof *out);
    bleu_options_t bo = bleu_default_options();
    int tok = score_tokenizer_parse(o->tokenize ? o->tokenize : "13a");
    if (tok < 0) return tern_error(TERN_ERR_INVALID_ARG, "corpus BLEU: unknown tokenizer '%s'", o->tokenize);
    bo.tokenize = (score_tokenizer_t)tok;
    bo.lowercase = o->lowercase != 0;
    const char *sm = o->smooth_method ? o->smooth_method : "exp";
    if (!strcmp(sm, "exp")) bo.smooth = BLEU_SMOOTH_EXP;
    else if (!strcmp(sm, "none")) bo.smooth = BLEU_SMOOTH_NONE;
    else if (!strcmp(sm, "floor")) bo.smooth = BLEU_SMOOTH_FLOOR;
    else if (!strcmp(sm, "add-k")) bo.smooth = BLEU_SMOOTH_ADD_K;
    else return tern_error(TERN_ERR_INVALID_ARG, "corpus BLEU: unknown smoothing '%s'", sm);
    bo.smooth_value = o->smooth_value;
    if (o->max_ngram_order < 1 || o->max_ngram_order > BLEU_MAX_ORDER)
        return tern_error(TERN_ERR_INVALID_ARG, "corpus BLEU: max_ngram_order must be in 1..%d", BLEU_MAX_ORDER);
    bo.max_order = o->max_ngram_order;
    bo.effective_order = o->effective_order != 0;
    for (size_t i = 0; i < n; i++)
        for (int r = 0; r < num_refs; r++)
            if (!hyps[i] || !refs[r] || !refs[r][i])
                return tern_error(TERN_ERR_INVALID_ARG, "corpus BLEU: sentence %zu: NULL string", i);
    bleu_result_t res;
    tern_status_t st = bleu_corpus(&res, hyps, refs, &bo, n, num_refs);
    if (st) return st;
    out->score = res.score;
    for (int k = 0; k < BLEU_MAX_ORDER; k++) out->precisions[k] = res.precisions[k];
    out->bp = res.bp;
    out->ratio = res.ratio;
    out->sys_len = res.hyp_len;
    out->ref_len = res.ref_len;
    return TERN_OK;
}

tern_chrf_options_t tern_chrf_default_options(void) {
    tern_chrf_options_t o;
    memset(&o, 0, sizeof o);
    o.struct_size = sizeof o;
    o.char_order = 6;
    o.beta = 2;
    return o;
}

tern_status_t tern_corpus_chrf(double *score, const char *const *hyps, const char *const *const *refs, size_t n,
                               int num_refs, const tern_chrf_options_t *options) {
    tern_chrf_options_t d = tern_chrf_default_options();
    tern_status_t ost = API_STRUCT_IN(&d, options, &d, tern_chrf_options_t);
    if (ost) return ost;
    const tern_chrf_options_t *o = &d;
    if (!score || (n > 0 && (!hyps || !refs)) || num_refs < 1)
        return tern_error(TERN_ERR_INVALID_ARG, "corpus chrF: NULL argument or no reference stream");
    *score = 0;
    if (o->char_order < 0 || o->word_order < 0 || o->char_order + o->word_order < 1 ||
        o->char_order + o->word_order > CHRF_MAX_ORDER || o->beta < 0)
        return tern_error(TERN_ERR_INVALID_ARG, "corpus chrF: orders must be >= 0 with 1..%d in all, beta >= 0",
                          CHRF_MAX_ORDER);
    for (size_t i = 0; i < n; i++)
        for (int r = 0; r < num_refs; r++)
            if (!hyps[i] || !refs[r] || !refs[r][i])
                return tern_error(TERN_ERR_INVALID_ARG, "corpus chrF: sentence %zu: NULL string", i);
    chrf_options_t co = chrf_default_options();
    co.char_order = o->char_order;
    co.word_order = o->word_order;
    co.beta = o->beta;
    co.lowercase = o->lowercase != 0;
    co.whitespace = o->whitespace != 0;
    co.eps_smoothing = o->eps_smoothing != 0;
    return chrf_corpus(score, hyps, refs, &co, n, num_refs);
}
