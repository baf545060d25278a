/* chrf.c — sacreBLEU-exact chrF (Popović 2015) and chrF++ (Popović 2017).
 *
 * Character n-grams are counted on code points with whitespace removed (Python's str.split()
 * set); chrF++ adds word n-grams over sacreBLEU's punctuation-split words. With several
 * references, each sentence keeps the statistics of the reference with the best sentence F. */
#include "text/score.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef __clang__
#pragma STDC FP_CONTRACT OFF /* sacreBLEU's formulas, operation for operation (gcc: -std=c11 is off) */
#endif

enum { KIND_CHAR = 0, KIND_WORD = 1 };

chrf_options_t chrf_default_options(void) {
    chrf_options_t o;
    memset(&o, 0, sizeof o);
    o.char_order = 6;
    o.word_order = 0;
    o.beta = 2;
    return o;
}

void chrf_workspace_free(chrf_workspace_t *ws) {
    for (int s = 0; s < 2; s++) {
        free(ws->raw[s]);
        free(ws->chars[s]);
        free(ws->words[s]);
        free(ws->wbuf[s]);
    }
    str_intern_free(&ws->intern);
    ngram_table_free(&ws->table);
    memset(ws, 0, sizeof *ws);
}

/* string.punctuation */
static int is_ascii_punct(uint32_t c) {
    return (c >= 0x21 && c <= 0x2F) || (c >= 0x3A && c <= 0x40) || (c >= 0x5B && c <= 0x60) ||
           (c >= 0x7B && c <= 0x7E);
}

/* Decodes side s (0 hyp, 1 ref): raw code points (lowercased), chars (whitespace removed unless
 * o->whitespace) and, for chrF++, word ids. Returns TERN_OK and sets *nchars, *nwords. */
static tern_status_t prepare_side(chrf_workspace_t *ws, int s, const char *line,
                                  const chrf_options_t *o, size_t *nchars, size_t *nwords) {
    size_t len = strlen(line);
    size_t need = 2 * len + 1;
    if (need > ws->cap[s]) {
        uint32_t *r = realloc(ws->raw[s], need * sizeof *r);
        if (r) ws->raw[s] = r;
        uint32_t *c = realloc(ws->chars[s], need * sizeof *c);
        if (c) ws->chars[s] = c;
        uint32_t *w = realloc(ws->words[s], need * sizeof *w);
        if (w) ws->words[s] = w;
        if (!r || !c || !w) return tern_error(TERN_ERR_NOMEM, "chrF: out of memory");
        ws->cap[s] = need;
    }
    uint32_t *raw = ws->raw[s], *chars = ws->chars[s];
    size_t n = text_decode(chars, line, len); /* chars as scratch */
    if (o->lowercase) n = text_lower(raw, chars, n);
    else memcpy(raw, chars, n * sizeof *raw);
    size_t nc = 0;
    for (size_t i = 0; i < n; i++)
        if (o->whitespace || !text_is_py_space(raw[i])) chars[nc++] = raw[i];
    *nchars = nc;
    *nwords = 0;
    if (o->word_order <= 0) return TERN_OK;

    size_t wneed = 4 * n + 1;
    if (wneed > ws->wcap[s]) {
        char *b = realloc(ws->wbuf[s], wneed);
        if (!b) return tern_error(TERN_ERR_NOMEM, "chrF: out of memory");
        ws->wbuf[s] = b;
        ws->wcap[s] = wneed;
    }
    char *wb = ws->wbuf[s];
    size_t wlen = 0, nw = 0;
    int insert = s == 0;
    size_t i = 0;
    while (i < n) {
        while (i < n && text_is_py_space(raw[i])) i++;
        if (i >= n) break;
        size_t j = i;
        while (j < n && !text_is_py_space(raw[j])) j++;
        /* _remove_punctuation: split one ASCII punctuation mark off the end, else the start */
        size_t parts[2][2];
        int np = 0;
        size_t L = j - i;
        if (L == 1) { parts[0][0] = i; parts[0][1] = 1; np = 1; }
        else if (is_ascii_punct(raw[j - 1])) {
            parts[0][0] = i; parts[0][1] = L - 1; parts[1][0] = j - 1; parts[1][1] = 1; np = 2;
        } else if (is_ascii_punct(raw[i])) {
            parts[0][0] = i; parts[0][1] = 1; parts[1][0] = i + 1; parts[1][1] = L - 1; np = 2;
        } else { parts[0][0] = i; parts[0][1] = L; np = 1; }
        for (int p = 0; p < np; p++) {
            size_t bl = text_encode(wb + wlen, raw + parts[p][0], parts[p][1]);
            ws->words[s][nw++] = str_intern_id(&ws->intern, wb + wlen, (uint32_t)bl, insert);
            wlen += bl;
        }
        i = j;
    }
    *nwords = nw;
    return TERN_OK;
}

static int64_t count_of(size_t L, int n) { return L >= (size_t)n ? (int64_t)(L - (size_t)n + 1) : 0; }

static void count_side(chrf_workspace_t *ws, int s, int r, size_t nc, size_t nw,
                       const chrf_options_t *o) {
    for (int n = 1; n <= o->char_order; n++)
        for (size_t i = 0; i + (size_t)n <= nc; i++) {
            ngram_entry_t *e = ngram_table_get(&ws->table, ws->chars[s], KIND_CHAR, (uint32_t)i, n, s == 0);
            if (!e) continue;
            if (s == 0) { e->hyp++; continue; }
            if (e->ref_id != r) { e->ref_id = r; e->ref_cur = 0; }
            e->ref_cur++;
        }
    for (int n = 1; n <= o->word_order; n++)
        for (size_t i = 0; i + (size_t)n <= nw; i++) {
            if (s == 1) {
                int absent = 0;
                for (int k = 0; k < n && !absent; k++) absent = ws->words[1][i + k] == INTERN_ABSENT;
                if (absent) continue;
            }
            ngram_entry_t *e = ngram_table_get(&ws->table, ws->words[s], KIND_WORD, (uint32_t)i, n, s == 0);
            if (!e) continue;
            if (s == 0) { e->hyp++; continue; }
            if (e->ref_id != r) { e->ref_id = r; e->ref_cur = 0; }
            e->ref_cur++;
        }
}

tern_status_t chrf_sentence_stats(chrf_stats_t *st, chrf_workspace_t *ws, const char *hyp,
                                  const char *const *refs, const chrf_options_t *o, int R) {
    int order = o->char_order + o->word_order;
    if (o->char_order < 0 || o->word_order < 0 || order < 1 || order > CHRF_MAX_ORDER)
        return tern_error(TERN_ERR_INVALID_ARG, "chrF: orders %d + %d not in 1..%d", o->char_order,
                          o->word_order, CHRF_MAX_ORDER);
    if (R < 1) return tern_error(TERN_ERR_INVALID_ARG, "chrF: no reference");
    if (!hyp) return tern_error(TERN_ERR_INVALID_ARG, "chrF: NULL hypothesis");
    size_t hc, hw;
    tern_status_t s = str_intern_reset(&ws->intern, strlen(hyp) / 2 + 1);
    if (s) return s;
    if ((s = prepare_side(ws, 0, hyp, o, &hc, &hw))) return s;
    if ((s = ngram_table_reset(&ws->table, hc * (size_t)o->char_order + hw * (size_t)o->word_order)))
        return s;
    count_side(ws, 0, -1, hc, hw, o);

    int64_t hyp_tot[CHRF_MAX_ORDER];
    for (int k = 0; k < order; k++)
        hyp_tot[k] = k < o->char_order ? count_of(hc, k + 1) : count_of(hw, k - o->char_order + 1);

    double best_f = -1.0;
    memset(st, 0, sizeof *st);
    for (int r = 0; r < R; r++) {
        if (!refs[r]) return tern_error(TERN_ERR_INVALID_ARG, "chrF: NULL reference");
        size_t rc, rw;
        if ((s = prepare_side(ws, 1, refs[r], o, &rc, &rw))) return s;
        count_side(ws, 1, r, rc, rw, o);
        chrf_stats_t cur;
        memset(&cur, 0, sizeof cur);
        for (int k = 0; k < order; k++) {
            int64_t ref_tot = k < o->char_order ? count_of(rc, k + 1) : count_of(rw, k - o->char_order + 1);
            cur.v[3 * k + 0] = ref_tot > 0 ? hyp_tot[k] : 0;
            cur.v[3 * k + 1] = ref_tot;
        }
        for (size_t i = 0; i < ws->table.cap; i++) {
            const ngram_entry_t *e = &ws->table.e[i];
            if (!e->hash || e->ref_id != r) continue;
            int k = e->kind == KIND_CHAR ? e->n - 1 : o->char_order + e->n - 1;
            cur.v[3 * k + 2] += e->hyp < e->ref_cur ? e->hyp : e->ref_cur;
        }
        double f = chrf_compute(&cur, o);
        if (f > best_f) {
            best_f = f;
            *st = cur;
        }
    }
    return TERN_OK;
}

tern_status_t chrf_corpus_stats(chrf_stats_t *per_sentence, chrf_stats_t *total,
                                const char *const *hyps, const char *const *const *refs,
                                const chrf_options_t *o, size_t N, int R) {
    chrf_workspace_t ws;
    memset(&ws, 0, sizeof ws);
    memset(total, 0, sizeof *total);
    const char **rr = malloc((size_t)(R > 0 ? R : 1) * sizeof *rr);
    if (!rr) return tern_error(TERN_ERR_NOMEM, "chrF: out of memory");
    tern_status_t s = TERN_OK;
    int order = o->char_order + o->word_order;
    for (size_t i = 0; i < N; i++) {
        for (int r = 0; r < R; r++) rr[r] = refs[r][i];
        chrf_stats_t st;
        if ((s = chrf_sentence_stats(&st, &ws, hyps[i], rr, o, R))) {
            tern_error_prefix(s, "chrF: sentence %zu", i + 1);
            break;
        }
        if (per_sentence) per_sentence[i] = st;
        for (int k = 0; k < 3 * order; k++) total->v[k] += st.v[k];
    }
    free(rr);
    chrf_workspace_free(&ws);
    return s;
}

double chrf_compute(const chrf_stats_t *st, const chrf_options_t *o) {
    const double eps = 1e-16;
    int order = o->char_order + o->word_order;
    int factor = o->beta * o->beta;
    double score = 0.0, avg_prec = 0.0, avg_rec = 0.0;
    int effective_order = 0;
    for (int i = 0; i < order; i++) {
        int64_t n_hyp = st->v[3 * i], n_ref = st->v[3 * i + 1], n_match = st->v[3 * i + 2];
        double prec = n_hyp > 0 ? (double)n_match / (double)n_hyp : eps;
        double rec = n_ref > 0 ? (double)n_match / (double)n_ref : eps;
        double denom = (double)factor * prec + rec;
        score += denom > 0 ? (double)(1 + factor) * prec * rec / denom : eps;
        if (n_hyp > 0 && n_ref > 0) {
            avg_prec += prec;
            avg_rec += rec;
            effective_order++;
        }
    }
    if (o->eps_smoothing) return 100 * score / order;
    if (effective_order == 0) {
        avg_prec = avg_rec = 0.0;
    } else {
        avg_prec /= effective_order;
        avg_rec /= effective_order;
    }
    if (avg_prec + avg_rec != 0) {
        score = (double)(1 + factor) * avg_prec * avg_rec;
        score /= ((double)factor * avg_prec) + avg_rec;
        return 100 * score;
    }
    return 0.0;
}

tern_status_t chrf_corpus(double *score, const char *const *hyps, const char *const *const *refs,
                          const chrf_options_t *o, size_t N, int R) {
    chrf_stats_t total;
    tern_status_t s = chrf_corpus_stats(NULL, &total, hyps, refs, o, N, R);
    if (s) return s;
    *score = chrf_compute(&total, o);
    return TERN_OK;
}

double chrf_stats_score(const int64_t *stats, const void *user_data) {
    const chrf_options_t *o = user_data;
    chrf_stats_t st;
    memset(&st, 0, sizeof st);
    memcpy(st.v, stats, (size_t)(3 * (o->char_order + o->word_order)) * sizeof(int64_t));
    return chrf_compute(&st, o);
}

void chrf_name(char *buf, size_t size, const chrf_options_t *o) {
    int k = snprintf(buf, size, "chrF%d", o->beta);
    for (int i = 0; i < o->word_order && k + 1 < (int)size; i++) buf[k++] = '+';
    if (k < (int)size) buf[k] = 0;
}

void chrf_signature(char *buf, size_t size, const chrf_options_t *o, int R) {
    snprintf(buf, size, "nrefs:%d|case:%s|eff:%s|nc:%d|nw:%d|space:%s|version:tern-%s", R,
             o->lowercase ? "lc" : "mixed", o->eps_smoothing ? "no" : "yes", o->char_order,
             o->word_order, o->whitespace ? "yes" : "no", TERN_VERSION);
}
