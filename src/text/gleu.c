/* gleu.c — GNMT's GLEU (Wu et al. 2016, as NLTK's sentence_gleu): per sentence, all 1..4-grams
 * of hypothesis and reference pooled; GLEU = min(precision, recall) = matches / max(hypothesis
 * n-grams, reference n-grams); with several references the best one. Corpus GLEU here is the mean
 * of the sentence scores (the definition); the pooled ratio (NLTK's corpus_gleu) comes
 * with it. Tokenization and lowercasing as BLEU's options say. */
#include "text/score.h"

#include <stdlib.h>
#include <string.h>

static int64_t ngrams_upto(size_t L, int max_order) {
    int64_t t = 0;
    for (int n = 1; n <= max_order; n++)
        if (L >= (size_t)n) t += (int64_t)(L - (size_t)n + 1);
    return t;
}

tern_status_t gleu_sentence_stats(gleu_stats_t *st, bleu_workspace_t *ws, const char *hyp,
                                  const char *const *refs, const bleu_options_t *o, int R) {
    int N = o->max_order;
    if (N < 1 || N > BLEU_MAX_ORDER)
        return tern_error(TERN_ERR_INVALID_ARG, "GLEU: max_order %d not in 1..%d", N, BLEU_MAX_ORDER);
    tern_status_t s = bleu_prepare(ws, hyp, refs, o, R);
    if (s) return s;
    if ((s = bleu_count_hyp(ws, N))) return s;
    int64_t tpfp = ngrams_upto(ws->ids_len[0], N);
    st->match = 0;
    st->all = 0;
    for (int r = 0; r < R; r++) {
        bleu_count_ref(ws, r, N);
        int64_t tp = 0;
        for (size_t i = 0; i < ws->table.cap; i++) {
            const ngram_entry_t *e = &ws->table.e[i];
            if (!e->hash || e->ref_id != r) continue;
            tp += e->hyp < e->ref_cur ? e->hyp : e->ref_cur;
        }
        int64_t tpfn = ngrams_upto(ws->ids_len[1 + r], N);
        int64_t all = tpfp > tpfn ? tpfp : tpfn;
        if (all == 0) continue;
        /* the first reference with the highest tp / all */
        if (st->all == 0 || tp * st->all > st->match * all) {
            st->match = tp;
            st->all = all;
        }
    }
    return TERN_OK;
}

double gleu_sentence_score(const gleu_stats_t *st) {
    return st->all ? 100.0 * ((double)st->match / (double)st->all) : 0.0;
}

tern_status_t gleu_corpus(gleu_result_t *res, gleu_stats_t *per_sentence, const char *const *hyps,
                          const char *const *const *refs, const bleu_options_t *o, size_t N, int R) {
    bleu_workspace_t ws;
    memset(&ws, 0, sizeof ws);
    const char **rr = malloc((size_t)(R > 0 ? R : 1) * sizeof *rr);
    if (!rr) return tern_error(TERN_ERR_NOMEM, "GLEU: out of memory");
    tern_status_t s = TERN_OK;
    double sum = 0.0;
    memset(res, 0, sizeof *res);
    for (size_t i = 0; i < N; i++) {
        for (int r = 0; r < R; r++) rr[r] = refs[r][i];
        gleu_stats_t st;
        if ((s = gleu_sentence_stats(&st, &ws, hyps[i], rr, o, R))) {
            tern_error_prefix(s, "GLEU: sentence %zu", i + 1);
            break;
        }
        if (per_sentence) per_sentence[i] = st;
        sum += st.all ? (double)st.match / (double)st.all : 0.0;
        res->match += st.match;
        res->all += st.all;
    }
    free(rr);
    bleu_workspace_free(&ws);
    res->mean = N ? 100.0 * sum / (double)N : 0.0;
    res->pooled = res->all ? 100.0 * ((double)res->match / (double)res->all) : 0.0;
    return s;
}
