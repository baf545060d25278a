/* score.h — sacreBLEU-exact evaluation: BLEU (corpus and sentence), chrF/chrF++, GNMT's GLEU, the
 * tokenizers they use (13a, intl, char, none) and paired bootstrap resampling.
 *
 * Everything works on in-memory, NUL-terminated UTF-8 strings (the trainer scores its validation
 * set with these functions); files are the CLI's business (tools/cmd_score.c).
 *
 * The shape (llm.c style): each metric has
 *   - an options struct with a comment on every field and a *_default_options() function,
 *   - a stats struct of integer sufficient statistics that add up over sentences,
 *   - *_sentence_stats()  stats of one hypothesis against its references,
 *   - *_corpus_stats()    per-sentence stats (optional output) and their sum over a corpus,
 *   - *_compute()         the score from (summed) stats: a pure function of integers, so that
 *                         bootstrap resampling is a sum over resampled rows plus one call.
 * Arguments come in a fixed order: outputs, inputs, options, dimensions.
 * Dimension letters: N sentences, R references per sentence, K statistics per sentence,
 * S bootstrap samples.
 *
 * Exactness: the floating-point formulas are sacreBLEU 2.x's, operation for operation (no FMA
 * contraction), so scores equal sacreBLEU's to the last bit on the same libm. Lowercasing follows
 * Python's str.lower() (full mapping of U+0130, final sigma), whitespace follows Python's
 * str.split()/rstrip(), and the regex substitutions of the tokenizers reproduce re.sub()'s
 * left-to-right, non-overlapping matching.
 */
#ifndef TERN_SCORE_H
#define TERN_SCORE_H

#include <stddef.h>
#include <stdint.h>

#include "base/base.h"

/* ---------------------------------------------------------------- text helpers */

typedef enum {
    SCORE_TOK_NONE = 0, /* no tokenization: split on whitespace only */
    SCORE_TOK_13A,      /* mteval-v13a (sacreBLEU's default) */
    SCORE_TOK_INTL,     /* mteval-v14 international: Unicode punctuation and symbols */
    SCORE_TOK_CHAR      /* every character is a token */
} score_tokenizer_t;

/* "none", "13a", "intl", "char"; parse returns -1 for an unknown name. */
const char *score_tokenizer_name(score_tokenizer_t tok);
int score_tokenizer_parse(const char *name);

/* 1 when cp is whitespace for Python's str.split()/str.strip(). */
int text_is_py_space(uint32_t cp);

/* Checks that s[0..len) is valid UTF-8 (as Python's strict decoder: no surrogates, no overlong
 * forms, nothing above U+10FFFF). Returns 1 if valid; else 0 and *bad_offset = first bad byte. */
int text_utf8_valid(const char *s, size_t len, size_t *bad_offset);

/* Decodes UTF-8 into code points. out must hold len entries; returns the count. Invalid bytes
 * decode as U+FFFD (callers validate first; this never reads past len). */
size_t text_decode(uint32_t *out, const char *s, size_t len);
/* Encodes n code points as UTF-8 into out (room for 4*n bytes); returns bytes written. */
size_t text_encode(char *out, const uint32_t *cps, size_t n);

/* Python's str.lower() on code points: out needs room for 2*n entries (U+0130 becomes two);
 * returns the new length. */
size_t text_lower(uint32_t *out, const uint32_t *cps, size_t n);

/* Python's str.rstrip(): the length without trailing whitespace. */
size_t text_rstrip_len(const uint32_t *cps, size_t n);

/* A growable buffer reused between calls (no allocation once warm). Zero-initialize it; free
 * with text_buf_free(). */
typedef struct {
    uint32_t *a, *b;     /* code point scratch (two, for ping-pong rewriting) */
    size_t cap;          /* entries in each of a, b */
    char *out;           /* UTF-8 output of the tokenizer */
    size_t out_cap;
} text_buf_t;
void text_buf_free(text_buf_t *tb);

/* sacreBLEU's BLEU preprocessing: [lowercase], rstrip, tokenize, then ' '.join(split()).
 * *out points into tb (valid until the next call with tb); *out_len its length in bytes. */
tern_status_t text_tokenize(const char **out, size_t *out_len, text_buf_t *tb, const char *line,
                            score_tokenizer_t tok, int lowercase);

/* ---------------------------------------------------------------- n-gram counting (internal) */

/* Sequences are arrays of uint32 units: code points, or token ids from a str_intern_t (equal
 * tokens get equal ids within one sentence). An n-gram is a span of one sequence; equal spans
 * (compared unit by unit, never by hash alone) share one entry, which keeps the hypothesis count
 * and, for references, the count in the current reference and the maximum over references. */
typedef struct {
    uint64_t hash;
    const uint32_t *seq; /* the sequence the n-gram was first seen in */
    uint32_t start;      /* first unit */
    uint16_t n;          /* order (number of units) */
    uint16_t kind;       /* distinguishes families sharing a table (chrF: char vs word) */
    int32_t hyp, ref_cur, ref_max, ref_id;
} ngram_entry_t;

typedef struct {
    ngram_entry_t *e;
    size_t cap, used; /* slots in use now (a power of two) and filled */
    size_t alloc;     /* slots allocated; reused across sentences (cleared, not freed) */
} ngram_table_t;

tern_status_t ngram_table_reset(ngram_table_t *t, size_t expected);
void ngram_table_free(ngram_table_t *t);
/* Finds seq[start..start+n) of the given kind; when absent, inserts it if `insert` (zero counts,
 * ref_id -1) or returns NULL. Hypothesis n-grams are inserted, references only looked up (an
 * n-gram absent from the hypothesis never matters), so entries only point into the hypothesis.
 * The table never fills when reset with the right `expected` count. */
ngram_entry_t *ngram_table_get(ngram_table_t *t, const uint32_t *seq, int kind, uint32_t start,
                               int n, int insert);

/* Interns byte strings into small ids (per sentence; the strings must outlive the table's use).
 * Lookups of absent strings without `insert` return INTERN_ABSENT. */
#define INTERN_ABSENT UINT32_MAX
typedef struct {
    struct intern_slot { uint64_t hash; const char *s; uint32_t len, id; } *slot;
    size_t cap, used, alloc; /* as ngram_table_t */
} str_intern_t;
tern_status_t str_intern_reset(str_intern_t *in, size_t expected);
void str_intern_free(str_intern_t *in);
uint32_t str_intern_id(str_intern_t *in, const char *s, uint32_t len, int insert);

/* Splits text on ASCII spaces (tokenizer output) into interned ids; returns the count, or
 * (size_t)-1 on allocation failure. *ids grows as needed (*cap entries). */
size_t tokens_to_ids(uint32_t **ids, size_t *cap, str_intern_t *in, const char *text, size_t len,
                     int insert);

/* ---------------------------------------------------------------- BLEU */

#define BLEU_MAX_ORDER 4

typedef enum { BLEU_SMOOTH_EXP = 0, BLEU_SMOOTH_NONE, BLEU_SMOOTH_FLOOR, BLEU_SMOOTH_ADD_K } bleu_smooth_t;

typedef struct {
    score_tokenizer_t tokenize; /* default SCORE_TOK_13A */
    int lowercase;              /* 1: case-insensitive (Python str.lower()) */
    int max_order;              /* n-gram orders 1..max_order (1..BLEU_MAX_ORDER, default 4) */
    bleu_smooth_t smooth;       /* default BLEU_SMOOTH_EXP */
    double smooth_value;        /* floor: default 0.1; add-k: default 1; < 0: the default */
    int effective_order;        /* 1: stop at the first order with no n-grams (sentence BLEU) */
} bleu_options_t;

bleu_options_t bleu_default_options(void);

typedef struct {
    int64_t hyp_len, ref_len;          /* tokens; ref_len is the closest reference length */
    int64_t correct[BLEU_MAX_ORDER];   /* clipped matching n-grams of each order */
    int64_t total[BLEU_MAX_ORDER];     /* hypothesis n-grams of each order */
} bleu_stats_t;
#define BLEU_NSTATS (2 + 2 * BLEU_MAX_ORDER) /* int64 fields of bleu_stats_t, in order */

typedef struct {
    double score;                      /* 0..100 */
    double precisions[BLEU_MAX_ORDER]; /* percent */
    double bp, ratio;                  /* brevity penalty; hyp_len / ref_len */
    int64_t hyp_len, ref_len;
    int max_order;
} bleu_result_t;

/* Scratch reused across sentences. Zero-initialize; free with bleu_workspace_free(). */
typedef struct {
    text_buf_t tb;
    char **tok;         /* [1 + R] tokenized strings (hypothesis first) */
    size_t *tok_cap;
    uint32_t **ids;     /* [1 + R] token ids */
    size_t *ids_cap, *ids_len;
    int nside;          /* entries allocated in the arrays above */
    str_intern_t intern;
    ngram_table_t table;
} bleu_workspace_t;
void bleu_workspace_free(bleu_workspace_t *ws);

/* Internal steps shared with GLEU: tokenize hyp and refs into ws (ids: hypothesis tokens
 * interned, reference tokens looked up); count hypothesis n-grams of orders 1..max_order into
 * ws->table; count reference r's n-grams (ref_cur/ref_max of entries whose ref_id is r). */
tern_status_t bleu_prepare(bleu_workspace_t *ws, const char *hyp, const char *const *refs,
                           const bleu_options_t *o, int R);
tern_status_t bleu_count_hyp(bleu_workspace_t *ws, int max_order);
void bleu_count_ref(bleu_workspace_t *ws, int r, int max_order);

/* Stats of one hypothesis against R references. */
tern_status_t bleu_sentence_stats(bleu_stats_t *st, bleu_workspace_t *ws, const char *hyp,
                                  const char *const *refs, const bleu_options_t *o, int R);
/* Corpus stats: per_sentence (may be NULL) gets N rows; total gets their sum.
 * refs[r][i] is reference r of sentence i. On error, the message names the sentence. */
tern_status_t bleu_corpus_stats(bleu_stats_t *per_sentence, bleu_stats_t *total,
                                const char *const *hyps, const char *const *const *refs,
                                const bleu_options_t *o, size_t N, int R);
/* The score from stats (sacreBLEU's compute_bleu). */
bleu_result_t bleu_compute(const bleu_stats_t *st, const bleu_options_t *o);
/* Convenience: corpus BLEU of N hypotheses against R references each. */
tern_status_t bleu_corpus(bleu_result_t *res, const char *const *hyps,
                          const char *const *const *refs, const bleu_options_t *o, size_t N, int R);
/* Sentence BLEU as sacrebleu.sentence_bleu() (caller sets effective_order = 1 for that). */
tern_status_t bleu_sentence(bleu_result_t *res, bleu_workspace_t *ws, const char *hyp,
                            const char *const *refs, const bleu_options_t *o, int R);

/* "nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp|version:tern-0.1.0" */
void bleu_signature(char *buf, size_t size, const bleu_options_t *o, int R);
/* "34.56 65.2/40.1/27.0/19.0 (BP = 1.000 ratio = 1.023 hyp_len = 100 ref_len = 98)" with the
 * score printed with `width` decimals (sacreBLEU's layout). */
void bleu_format(char *buf, size_t size, const bleu_result_t *r, int width);

/* ---------------------------------------------------------------- chrF / chrF++ */

#define CHRF_MAX_ORDER 16 /* char_order + word_order */

typedef struct {
    int char_order;     /* character n-gram orders 1..char_order (default 6) */
    int word_order;     /* word n-gram orders 1..word_order (default 0; 2 is chrF++) */
    int beta;           /* recall weight (default 2) */
    int lowercase;      /* 1: Python str.lower() first */
    int whitespace;     /* 1: keep whitespace in character n-grams (default 0) */
    int eps_smoothing;  /* 1: chrF++.py's epsilon smoothing; 0 (default): effective order */
} chrf_options_t;

chrf_options_t chrf_default_options(void);

typedef struct {
    /* for each order k < char_order + word_order: hyp n-grams, ref n-grams, matches */
    int64_t v[3 * CHRF_MAX_ORDER];
} chrf_stats_t;

typedef struct {
    uint32_t *raw[2];     /* decoded (and lowercased) code points: hypothesis, reference */
    uint32_t *chars[2];   /* the same without whitespace (character n-grams) */
    uint32_t *words[2];   /* word ids of chrF++'s punctuation-split words */
    char *wbuf[2];        /* UTF-8 of the words, for interning */
    size_t cap[2], wcap[2];
    str_intern_t intern;
    ngram_table_t table;
} chrf_workspace_t;
void chrf_workspace_free(chrf_workspace_t *ws);

tern_status_t chrf_sentence_stats(chrf_stats_t *st, chrf_workspace_t *ws, const char *hyp,
                                  const char *const *refs, const chrf_options_t *o, int R);
tern_status_t chrf_corpus_stats(chrf_stats_t *per_sentence, chrf_stats_t *total,
                                const char *const *hyps, const char *const *const *refs,
                                const chrf_options_t *o, size_t N, int R);
/* The score (0..100) from stats (sacreBLEU's _compute_f_score). */
double chrf_compute(const chrf_stats_t *st, const chrf_options_t *o);
tern_status_t chrf_corpus(double *score, const char *const *hyps, const char *const *const *refs,
                          const chrf_options_t *o, size_t N, int R);
/* "chrF2" or "chrF2++" */
void chrf_name(char *buf, size_t size, const chrf_options_t *o);
/* "nrefs:1|case:mixed|eff:yes|nc:6|nw:0|space:no|version:tern-0.1.0" */
void chrf_signature(char *buf, size_t size, const chrf_options_t *o, int R);

/* ---------------------------------------------------------------- GLEU (Wu et al. 2016) */

/* Sentence GLEU (GNMT's, as NLTK's sentence_gleu) = min(precision, recall) over all
 * 1..max_order-grams pooled = matches / max(hypothesis n-grams, reference n-grams); with several
 * references the first one with the highest ratio; 0 when neither side has an n-gram.
 * Tokenization and lowercasing as BLEU's options say.
 * Corpus GLEU, as the issue defines it and `tern score` prints it: the mean of the sentence scores,
 * 100 * (g_1 + ... + g_N) / N. The pooled ratio of Wu et al.'s e-mail (NLTK's corpus_gleu),
 * 100 * sum(matches) / sum(max(...)), comes with it. */
typedef struct {
    int64_t match, all; /* of the chosen reference; all = 0: no n-grams */
} gleu_stats_t;

typedef struct {
    double mean;          /* 0..100: mean of sentence GLEU */
    double pooled;        /* 0..100: sum(match) / sum(all) (NLTK corpus_gleu) */
    int64_t match, all;   /* the sums */
} gleu_result_t;

tern_status_t gleu_sentence_stats(gleu_stats_t *st, bleu_workspace_t *ws, const char *hyp,
                                  const char *const *refs, const bleu_options_t *o, int R);
/* per_sentence may be NULL. */
tern_status_t gleu_corpus(gleu_result_t *res, gleu_stats_t *per_sentence, const char *const *hyps,
                          const char *const *const *refs, const bleu_options_t *o, size_t N, int R);
double gleu_sentence_score(const gleu_stats_t *st); /* 0..100: 100 * (match / all) */

/* ---------------------------------------------------------------- paired bootstrap */

/* The score of summed stats (K int64 per sentence), exactly as sacreBLEU scores a corpus:
 * bleu_stats_score / chrf_stats_score take their options as user_data. */
typedef double (*score_stats_fn)(const int64_t *stats, const void *user_data);
double bleu_stats_score(const int64_t *stats, const void *user_data);
double chrf_stats_score(const int64_t *stats, const void *user_data);

/* The score of one bootstrap resample as sacreBLEU 2.x computes it: it sums the per-sentence
 * statistics as numpy float32 and, under numpy >= 2's promotion rules (NEP 50), part of the formula
 * then runs in float32 (BLEU: the precisions; chrF: all of it). These functions reproduce that
 * arithmetic operation for operation. *is_f32 is set to 1 when sacreBLEU's value is a numpy
 * float32 (chrF, except its degenerate 0.0 / all-epsilon cases), 0 when it is a Python float. */
typedef double (*score_resample_fn)(const float *stats, const void *user_data, int *is_f32);
double bleu_resample_score(const float *stats, const void *user_data, int *is_f32);
double chrf_resample_score(const float *stats, const void *user_data, int *is_f32);

/* numpy's default random generator, bit for bit: PCG64 (XSL-RR 128/64) seeded through
 * SeedSequence(seed), as numpy.random.default_rng(seed). */
typedef struct {
    uint64_t state_hi, state_lo, inc_hi, inc_lo; /* the 128-bit LCG state and increment */
    int has_u32;                                 /* a buffered upper half for next_u32 */
    uint32_t u32;
} np_pcg64_t;
void np_pcg64_seed(np_pcg64_t *g, uint64_t seed);
uint64_t np_pcg64_next_u64(np_pcg64_t *g);
uint32_t np_pcg64_next_u32(np_pcg64_t *g); /* low half of a 64-bit draw, then the high half */
/* One draw of Generator.integers(0, n) for 1 <= n <= 2^32 (numpy's buffered Lemire method). */
uint32_t np_pcg64_below(np_pcg64_t *g, uint64_t n);

/* numpy.random.default_rng(seed).choice(N, size=(S, N), replace=True), row-major: the resamples
 * sacreBLEU's paired bootstrap draws with SACREBLEU_SEED=seed (default 12345). N <= 2^32. */
void bootstrap_indices(uint32_t *idx, uint64_t seed, size_t N, int S);

typedef struct {
    double base_score, sys_score;  /* actual corpus scores (exact, from integer stats) */
    double p_value;                /* (#{s : d_s - mean(d) > |real diff|} + 1) / (S + 1), d_s = |sys_s - base_s| */
    double base_mean, base_ci;     /* mean of resampled scores, half-width of the 95% interval */
    double sys_mean, sys_ci;
    int samples;
} paired_bs_result_t;

/* Paired bootstrap resampling (Koehn 2004) with sacreBLEU 2.x's statistic, p-value, means and
 * intervals (significance.py: _paired_bs_test, estimate_ci), reproducing its arithmetic: resample
 * scores by `resample`, float32 or float64 arrays as numpy would hold them, numpy's pairwise
 * summation for means. base and sys are [N, K] row-major per-sentence stats. idx: [S, N] resample
 * indices, or NULL to draw them as bootstrap_indices(seed) does (so the default seed 12345 gives
 * sacreBLEU's own resamples and p-value). `exact` gives the actual scores. */
tern_status_t paired_bootstrap(paired_bs_result_t *res, const int64_t *base, const int64_t *sys,
                               const uint32_t *idx, score_stats_fn exact, score_resample_fn resample,
                               const void *user_data, uint64_t seed, size_t N, int K, int S);

#endif
