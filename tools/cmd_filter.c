/* cmd_filter.c — `tern filter`: cleans a parallel corpus with src/text/filter.h, streaming both
 * files line by line (memory: the longest line plus the duplicate hash set). */
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "text/filter.h"
#include "text/spm.h"

static void usage(FILE *f) {
    fprintf(f,
"usage: tern filter [options] SRC TGT SRC_OUT TGT_OUT\n"
"\n"
"Cleans a parallel corpus as the Scaling-NMT (fairseq, with Moses' clean-corpus-n.perl) and\n"
"OpenNMT papers do: reads SRC and TGT line by line (line i of one is the translation of line i of\n"
"the other), writes the pairs it keeps to SRC_OUT and TGT_OUT unchanged and in order, and reports\n"
"how many pairs each rule removed. It streams: memory is the longest line plus, for the duplicate\n"
"hash set, 16 to 32 bytes per kept pair (48 while the set doubles), so corpora larger than memory\n"
"work.\n"
"\n"
"A pair is removed by the first rule it matches, in this order:\n"
"  1 invalid_utf8     either side is not valid UTF-8\n"
"  2 empty            either side is empty or whitespace only\n"
"  3 too_many_words   either side has more than --max-words words\n"
"  4 too_many_tokens  either side has more than --max-tokens tokens\n"
"  5 ratio            one side's length is more than --max-ratio times the other's\n"
"                     (len(src)/len(tgt) > R or len(tgt)/len(src) > R, as clean-corpus-n.perl)\n"
"  6 few_letters      on either side, letters / non-whitespace characters < --min-letters\n"
"  7 copy             the source equals the target (same words: whitespace normalized)\n"
"  8 repetition       (--max-repeats N only) a side holds a unit of 2 to 100 characters\n"
"                     (--repeat-length), the first not whitespace, more than N times in a row: a\n"
"                     translation loop such as \"Schel-Schel-Schel-\" or \"nnnnnn\" (N 2), as\n"
"                     OpusFilter's RepetitionFilter\n"
"  9 language         (--langid SRC,TGT only) a side is reliably in another language: CLD2's\n"
"                     best guess for it is reliable and is not the side's language\n"
" 10 duplicate        the same (source, target) pair, byte for byte, was kept before\n"
" 11 score            (--score-model only) the pair's length-normalized log-probability under a\n"
"                     model is at or below --min-score, or outside the best --keep-best P %%\n"
"Words are runs of non-whitespace characters (Unicode whitespace, as Python's str.split()).\n"
"Tokens are SentencePiece pieces when a model is given (--spm, --src-spm, --tgt-spm), else words;\n"
"the ratio counts tokens when both sides have a model, else words (a side with no piece at all is\n"
"not judged by the ratio). Letters are Unicode category\n"
"L* characters. Duplicates are detected by the 64-bit XXH3 hash of \"source\\ntarget\": with n\n"
"distinct pairs the chance that two share a hash (and one unique pair is dropped) is about\n"
"n^2/2^65, 2e-11 for 29,000 pairs and 3e-4 for 10^8. Lines are split on '\\n' only and written\n"
"back byte for byte; a last line without '\\n' counts.\n"
"\n"
"options:\n"
"  --max-words N       rule 3 (default 250, Scaling NMT's; 0: off)\n"
"  --max-tokens N      rule 4 (default 0: off)\n"
"  --max-ratio R       rule 5 (default 9, clean-corpus-n.perl's; Scaling NMT used 1.5 on BPE\n"
"                      tokens; 0: off)\n"
"  --min-letters F     rule 6, a fraction in 0..1 (default 0: off; e.g. 0.5)\n"
"  --keep-copies       turn rule 7 off\n"
"  --max-repeats N     turn rule 8 on: the most times a unit may appear in a row (N >= 1;\n"
"                      2 suits machine-translated text: distilled or back-translated corpora)\n"
"  --repeat-length MIN,MAX  rule 8's unit length in characters (default 2,100; 1 would count\n"
"                      letters such as German's \"fff\" in Schifffahrt)\n"
"  --langid SRC,TGT    turn rule 9 on: the languages of SRC and TGT as ISO 639-1 codes (en,de);\n"
"                      CLD2 (Debian's libcld2) detects each line as plain text, and a line it is\n"
"                      unsure of (too short, mixed) is kept\n"
"  --keep-duplicates   turn rule 10 off\n"
"  --spm MODEL         SentencePiece model for both sides' tokens\n"
"  --src-spm MODEL     SentencePiece model for the source (overrides --spm)\n"
"  --tgt-spm MODEL     SentencePiece model for the target (overrides --spm)\n"
"  --score-model DIR   turn rule 11 on: a translation model (Tern or CTranslate2 directory) scores\n"
"                      each pair that rules 1-10 keep: the mean over the target tokens and the\n"
"                      final end of sentence of log P(token | source, previous tokens) — the\n"
"                      TOTAL `tern rescore` prints divided by the number of scores it prints\n"
"  --min-score X       keep the pairs whose score is above X (strictly)\n"
"  --keep-best P       ... or the best P %% of the scored pairs (0 < P <= 100): the\n"
"                      round(P/100 x scored) highest scores, ties broken by line (earlier first)\n"
"  --scores FILE       write \"LINE<TAB>SCORE\" (%%.6f) for every scored pair\n"
"  --score-batch N     pairs scored together (default 32)\n"
"  -t, --threads N     scoring threads (default: all cores)\n"
"                      Rule 11 reads the files twice (scores, then writes): memory 9 bytes a line\n"
"  --report FILE       write the report there instead of standard error\n"
"  --removed FILE      write \"LINE<TAB>RULE\" for every removed pair (1-based line numbers)\n"
"  -h, --help          this help\n"
"\n"
"The report lists every rule with the pairs it removed (lines starting with '#' are comments):\n"
"  read            29000\n"
"  invalid_utf8    0\n"
"  ...\n"
"  duplicate       15\n"
"  kept            28412\n"
"Exit status: 0 done, 1 error (unreadable file, line counts differ: the outputs are removed),\n"
"2 usage error.\n");
}

static int parse_i64(const char *opt, const char *v, int64_t *out) {
    char *end;
    errno = 0;
    long long x = v ? strtoll(v, &end, 10) : -1;
    if (!v || *end || end == v || errno || x < 0) {
        fprintf(stderr, "tern filter: %s needs a non-negative integer (got '%s')\n", opt, v ? v : "");
        return 0;
    }
    *out = x;
    return 1;
}

static int parse_f64(const char *opt, const char *v, double lo, double hi, double *out) {
    char *end;
    double x = v ? strtod(v, &end) : -1;
    if (!v || *end || end == v || !(x >= lo && x <= hi)) {
        fprintf(stderr, "tern filter: %s needs a number in %g..%g (got '%s')\n", opt, lo, hi, v ? v : "");
        return 0;
    }
    *out = x;
    return 1;
}

/* getline() without the '\n'; -1 at the end of the file. */
static ssize_t read_line(char **buf, size_t *cap, FILE *f) {
    ssize_t n = getline(buf, cap, f);
    if (n > 0 && (*buf)[n - 1] == '\n') n--;
    return n;
}

static int64_t count_rest(FILE *f, char **buf, size_t *cap) {
    int64_t n = 0;
    while (read_line(buf, cap, f) >= 0) n++;
    return n;
}

/* ------------------------------------------------------------ rule 11: model scores */

typedef struct {
    int64_t n;          /* lines read */
    double *score;      /* (n) NAN: not scored (removed by rules 1-10) */
    uint8_t *keep;      /* (n) 1: kept by rule 11 */
    int64_t n_scored, n_keep;
} scored_t;

static int grow(scored_t *sc, int64_t *cap) {
    if (sc->n < *cap) return 1;
    int64_t nc = *cap ? 2 * *cap : 4096;
    double *p = realloc(sc->score, sizeof *p * (size_t)nc);
    if (!p) return 0;
    sc->score = p;
    *cap = nc;
    return 1;
}

/* Scores a batch: score[line[i]] = mean log-prob of its target tokens and eos (tern_score's). */
static int score_batch_run(tern_translator_t *tr, char **src, char **tgt, const int64_t *line, int n,
                           scored_t *sc, FILE *sf) {
    float **lp = calloc((size_t)n, sizeof *lp);
    int *cnt = calloc((size_t)n, sizeof *cnt);
    int rc = 1;
    if (!lp || !cnt) {
        fprintf(stderr, "tern filter: out of memory\n");
        goto done;
    }
    tern_request_t req = tern_request_default();
    req.sources = (const char *const *)src;
    req.targets = (const char *const *)tgt;
    req.num_sources = n;
    tern_status_t st = tern_score(tr, &req, lp, cnt);
    if (st) {
        fprintf(stderr, "tern filter: scoring lines %lld-%lld: %s: %s\n", (long long)line[0] + 1,
                (long long)line[n - 1] + 1, tern_status_string(st), tern_last_error());
        goto done;
    }
    for (int i = 0; i < n; i++) {
        double total = 0;
        for (int k = 0; k < cnt[i]; k++) total += lp[i][k];
        double v = cnt[i] > 0 ? total / cnt[i] : -INFINITY;
        sc->score[line[i]] = v;
        sc->n_scored++;
        if (sf) fprintf(sf, "%lld\t%.6f\n", (long long)line[i] + 1, v);
    }
    rc = 0;
done:
    for (int i = 0; lp && i < n; i++) free(lp[i]);
    free(lp);
    free(cnt);
    return rc;
}

/* The first pass: rules 1-10 (a filter of their own, as the second pass will judge) and the
 * scores of the pairs they keep. */
static int score_pass(const char *const *paths, const filter_options_t *o, const char *model_dir, int batch,
                      int threads, const char *scores_path, scored_t *sc) {
    int rc = 1;
    filter_t *f = NULL;
    tern_model_t *model = NULL;
    tern_translator_t *tr = NULL;
    FILE *in[2] = {NULL, NULL}, *sf = NULL;
    char *buf[2] = {NULL, NULL};
    size_t cap[2] = {0, 0};
    char **src = calloc((size_t)batch, sizeof *src), **tgt = calloc((size_t)batch, sizeof *tgt);
    int64_t *ln = calloc((size_t)batch, sizeof *ln), scap = 0;
    int nb = 0;
    if (!src || !tgt || !ln) {
        fprintf(stderr, "tern filter: out of memory\n");
        goto done;
    }
    tern_model_options_t mo = tern_model_default_options();
    tern_status_t st = tern_model_load(&model, model_dir, &mo);
    if (st) {
        fprintf(stderr, "tern filter: --score-model %s: %s\n", model_dir, tern_last_error());
        goto done;
    }
    tern_translator_options_t to = tern_translator_default_options();
    to.workers = 1;
    if (threads > 0) to.threads_per_worker = threads;
    if ((st = tern_translator_create(&tr, model, &to))) {
        fprintf(stderr, "tern filter: --score-model %s: %s\n", model_dir, tern_last_error());
        goto done;
    }
    if (filter_create(&f, o)) {
        fprintf(stderr, "tern filter: %s\n", tern_last_error());
        goto done;
    }
    for (int s = 0; s < 2; s++)
        if (!(in[s] = fopen(paths[s], "rb"))) {
            fprintf(stderr, "tern filter: cannot open %s: %s\n", paths[s], strerror(errno));
            goto done;
        }
    if (scores_path && !(sf = fopen(scores_path, "w"))) {
        fprintf(stderr, "tern filter: cannot create %s: %s\n", scores_path, strerror(errno));
        goto done;
    }
    for (;;) {
        ssize_t n0 = read_line(&buf[0], &cap[0], in[0]);
        ssize_t n1 = read_line(&buf[1], &cap[1], in[1]);
        if (n0 < 0 || n1 < 0) break; /* unequal counts and read errors: the second pass reports them */
        if (!grow(sc, &scap)) {
            fprintf(stderr, "tern filter: out of memory\n");
            goto done;
        }
        sc->score[sc->n] = NAN;
        filter_rule_t r;
        if (filter_pair(&r, f, buf[0], (size_t)n0, buf[1], (size_t)n1)) {
            fprintf(stderr, "tern filter: line %lld: %s\n", (long long)sc->n + 1, tern_last_error());
            goto done;
        }
        if (r == FILTER_KEEP) {
            src[nb] = strndup(buf[0], (size_t)n0);
            tgt[nb] = strndup(buf[1], (size_t)n1);
            if (!src[nb] || !tgt[nb]) {
                fprintf(stderr, "tern filter: out of memory\n");
                nb++;
                goto done;
            }
            ln[nb++] = sc->n;
        }
        sc->n++;
        if (nb == batch) {
            if (score_batch_run(tr, src, tgt, ln, nb, sc, sf)) goto done;
            for (int i = 0; i < nb; i++) free(src[i]), free(tgt[i]), src[i] = tgt[i] = NULL;
            nb = 0;
        }
    }
    if (nb > 0 && score_batch_run(tr, src, tgt, ln, nb, sc, sf)) goto done;
    if (sf) {
        int bad = ferror(sf) | fclose(sf);
        sf = NULL;
        if (bad) {
            fprintf(stderr, "tern filter: cannot write %s\n", scores_path);
            goto done;
        }
    }
    rc = 0;
done:
    for (int i = 0; i < nb && src; i++) free(src[i]), free(tgt[i]);
    free(src), free(tgt), free(ln);
    for (int s = 0; s < 2; s++) {
        if (in[s]) fclose(in[s]);
        free(buf[s]);
    }
    if (sf) fclose(sf);
    filter_free(f);
    tern_translator_free(tr);
    tern_model_free(model);
    return rc;
}

static const double *g_sort_scores;

static int by_score(const void *a, const void *b) {
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    double sx = g_sort_scores[x], sy = g_sort_scores[y];
    if (sx != sy) return sx > sy ? -1 : 1;
    return (x > y) - (x < y);
}

/* keep[i]: score above min_score, or among the round(P/100 x scored) best (ties: earlier line). */
static int select_scored(scored_t *sc, int has_min, double min_score, double keep_best) {
    sc->keep = calloc((size_t)(sc->n > 0 ? sc->n : 1), 1);
    if (!sc->keep) {
        fprintf(stderr, "tern filter: out of memory\n");
        return 1;
    }
    if (has_min) {
        for (int64_t i = 0; i < sc->n; i++)
            if (!isnan(sc->score[i]) && sc->score[i] > min_score) sc->keep[i] = 1, sc->n_keep++;
        return 0;
    }
    int64_t *idx = malloc(sizeof *idx * (size_t)(sc->n_scored > 0 ? sc->n_scored : 1)), m = 0;
    if (!idx) {
        fprintf(stderr, "tern filter: out of memory\n");
        return 1;
    }
    for (int64_t i = 0; i < sc->n; i++)
        if (!isnan(sc->score[i])) idx[m++] = i;
    g_sort_scores = sc->score;
    qsort(idx, (size_t)m, sizeof *idx, by_score);
    int64_t k = (int64_t)llround(keep_best / 100.0 * (double)m);
    if (k > m) k = m;
    for (int64_t j = 0; j < k; j++) sc->keep[idx[j]] = 1;
    sc->n_keep = k;
    free(idx);
    return 0;
}

int cmd_filter(int argc, char **argv) {
    const char *paths[4];
    int npaths = 0;
    const char *spm_both = NULL, *spm_path[2] = {NULL, NULL}, *report_path = NULL, *removed_path = NULL;
    filter_options_t o = filter_default_options();
    char langs[2][16];
    const char *score_model = NULL, *scores_path = NULL;
    double min_score = 0, keep_best = -1;
    int has_min = 0, score_batch = 32, score_threads = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
#define NEED_VALUE() do { if (!v) { fprintf(stderr, "tern filter: %s needs a value\n", a); return 2; } i++; } while (0)
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) { usage(stdout); return 0; }
        else if (!strcmp(a, "--max-words")) { NEED_VALUE(); if (!parse_i64(a, v, &o.max_words)) return 2; }
        else if (!strcmp(a, "--max-tokens")) { NEED_VALUE(); if (!parse_i64(a, v, &o.max_tokens)) return 2; }
        else if (!strcmp(a, "--max-ratio")) { NEED_VALUE(); if (!parse_f64(a, v, 0, 1e300, &o.max_ratio)) return 2; }
        else if (!strcmp(a, "--min-letters")) { NEED_VALUE(); if (!parse_f64(a, v, 0, 1, &o.min_letters)) return 2; }
        else if (!strcmp(a, "--keep-copies")) o.copies = 0;
        else if (!strcmp(a, "--max-repeats")) {
            NEED_VALUE();
            int64_t n;
            if (!parse_i64(a, v, &n)) return 2;
            if (n < 1 || n > 1000000) {
                fprintf(stderr, "tern filter: --max-repeats needs an integer in 1..1000000 (got '%s')\n", v);
                return 2;
            }
            o.max_repeats = (int)n;
        }
        else if (!strcmp(a, "--repeat-length")) {
            NEED_VALUE();
            int lo, hi, used = 0;
            if (sscanf(v, "%d,%d%n", &lo, &hi, &used) != 2 || v[used] || lo < 1 || hi < lo || hi > 10000) {
                fprintf(stderr, "tern filter: --repeat-length needs MIN,MAX characters with 1 <= MIN <= MAX <= 10000 "
                        "(got '%s')\n", v);
                return 2;
            }
            o.repeat_min = lo;
            o.repeat_max = hi;
        }
        else if (!strcmp(a, "--keep-duplicates")) o.duplicates = 0;
        else if (!strcmp(a, "--langid")) {
            NEED_VALUE();
            const char *comma = strchr(v, ',');
            if (!comma || comma == v || !comma[1] || strchr(comma + 1, ',') || comma - v >= (long)sizeof langs[0] ||
                strlen(comma + 1) >= sizeof langs[1]) {
                fprintf(stderr, "tern filter: --langid needs SRC,TGT language codes, e.g. en,de (got '%s')\n", v);
                return 2;
            }
            snprintf(langs[0], sizeof langs[0], "%.*s", (int)(comma - v), v);
            snprintf(langs[1], sizeof langs[1], "%s", comma + 1);
            o.src_lang = langs[0];
            o.tgt_lang = langs[1];
        }
        else if (!strcmp(a, "--spm")) { NEED_VALUE(); spm_both = v; }
        else if (!strcmp(a, "--src-spm")) { NEED_VALUE(); spm_path[0] = v; }
        else if (!strcmp(a, "--tgt-spm")) { NEED_VALUE(); spm_path[1] = v; }
        else if (!strcmp(a, "--report")) { NEED_VALUE(); report_path = v; }
        else if (!strcmp(a, "--score-model")) { NEED_VALUE(); score_model = v; }
        else if (!strcmp(a, "--min-score")) {
            NEED_VALUE();
            if (!parse_f64(a, v, -1e30, 1e30, &min_score)) return 2;
            has_min = 1;
        }
        else if (!strcmp(a, "--keep-best")) {
            NEED_VALUE();
            if (!parse_f64(a, v, 0, 100, &keep_best)) return 2;
            if (keep_best <= 0) {
                fprintf(stderr, "tern filter: --keep-best needs a percentage in (0, 100] (got '%s')\n", v);
                return 2;
            }
        }
        else if (!strcmp(a, "--scores")) { NEED_VALUE(); scores_path = v; }
        else if (!strcmp(a, "--score-batch")) {
            NEED_VALUE();
            int64_t b;
            if (!parse_i64(a, v, &b) || b < 1 || b > 65536) {
                fprintf(stderr, "tern filter: --score-batch needs an integer in 1..65536\n");
                return 2;
            }
            score_batch = (int)b;
        }
        else if (!strcmp(a, "-t") || !strcmp(a, "--threads")) {
            NEED_VALUE();
            int64_t t;
            if (!parse_i64(a, v, &t) || t < 1 || t > 256) {
                fprintf(stderr, "tern filter: %s needs an integer in 1..256\n", a);
                return 2;
            }
            score_threads = (int)t;
        }
        else if (!strcmp(a, "--removed")) { NEED_VALUE(); removed_path = v; }
        else if (a[0] == '-' && a[1]) {
            fprintf(stderr, "tern filter: unknown option '%s' (see tern filter --help)\n", a);
            return 2;
        } else {
            if (npaths == 4) { fprintf(stderr, "tern filter: too many files (SRC TGT SRC_OUT TGT_OUT)\n"); return 2; }
            paths[npaths++] = a;
        }
#undef NEED_VALUE
    }
    if (npaths != 4) {
        fprintf(stderr, "tern filter: needs SRC TGT SRC_OUT TGT_OUT; see tern filter --help\n");
        return 2;
    }
    if (score_model && has_min == (keep_best > 0)) {
        fprintf(stderr, "tern filter: --score-model needs one of --min-score X or --keep-best P\n");
        return 2;
    }
    if (!score_model && (has_min || keep_best > 0 || scores_path)) {
        fprintf(stderr, "tern filter: --min-score, --keep-best and --scores need --score-model DIR\n");
        return 2;
    }
    for (int s = 0; s < 2; s++)
        if (!spm_path[s]) spm_path[s] = spm_both;

    int rc = 1;
    spm_t *sp[2] = {NULL, NULL};
    FILE *in[2] = {NULL, NULL}, *out[2] = {NULL, NULL}, *rep = NULL, *rem = NULL;
    filter_t *f = NULL;
    char *buf[2] = {NULL, NULL};
    size_t cap[2] = {0, 0};
    int outputs_open = 0;
    scored_t scored = {0};
    int64_t score_removed = 0;
    for (int s = 0; s < 2; s++) {
        if (spm_path[s]) {
            if (s == 1 && spm_path[1] == spm_path[0]) { /* one model for both sides */
                continue;
            }
            if (spm_load(&sp[s], spm_path[s])) {
                fprintf(stderr, "tern filter: %s\n", tern_last_error());
                goto out;
            }
        }
    }
    o.src_spm = sp[0];
    o.tgt_spm = sp[1] ? sp[1] : (spm_path[1] ? sp[0] : NULL);
    if (filter_create(&f, &o)) {
        fprintf(stderr, "tern filter: %s\n", tern_last_error());
        goto out;
    }
    if (score_model) {
        if (score_pass(paths, &o, score_model, score_batch, score_threads, scores_path, &scored)) goto out;
        if (select_scored(&scored, has_min, min_score, keep_best)) goto out;
    }
    for (int s = 0; s < 2; s++) {
        if (!(in[s] = fopen(paths[s], "rb"))) {
            fprintf(stderr, "tern filter: cannot open %s: %s\n", paths[s], strerror(errno));
            goto out;
        }
    }
    for (int s = 0; s < 2; s++) {
        if (!(out[s] = fopen(paths[2 + s], "wb"))) {
            fprintf(stderr, "tern filter: cannot create %s: %s\n", paths[2 + s], strerror(errno));
            goto out;
        }
        outputs_open = 1;
        setvbuf(out[s], NULL, _IOFBF, 1 << 20);
    }
    if (removed_path && !(rem = fopen(removed_path, "w"))) {
        fprintf(stderr, "tern filter: cannot create %s: %s\n", removed_path, strerror(errno));
        goto out;
    }

    int64_t line = 0;
    for (;;) {
        ssize_t n0 = read_line(&buf[0], &cap[0], in[0]);
        ssize_t n1 = read_line(&buf[1], &cap[1], in[1]);
        if (n0 < 0 || n1 < 0) {
            if (ferror(in[0]) || ferror(in[1])) {
                fprintf(stderr, "tern filter: cannot read %s\n", paths[ferror(in[0]) ? 0 : 1]);
                goto out;
            }
            if (n0 >= 0 || n1 >= 0) {
                int longer = n0 >= 0 ? 0 : 1;
                int64_t more = line + 1 + count_rest(in[longer], &buf[longer], &cap[longer]);
                int64_t c0 = longer == 0 ? more : line, c1 = longer == 1 ? more : line;
                fprintf(stderr, "tern filter: line counts differ: source %s has %lld lines, target %s has %lld\n",
                        paths[0], (long long)c0, paths[1], (long long)c1);
                goto out;
            }
            break;
        }
        line++;
        filter_rule_t r;
        if (filter_pair(&r, f, buf[0], (size_t)n0, buf[1], (size_t)n1)) {
            fprintf(stderr, "tern filter: line %lld: %s\n", (long long)line, tern_last_error());
            goto out;
        }
        if (r == FILTER_KEEP && score_model && !(line - 1 < scored.n && scored.keep[line - 1])) {
            score_removed++;
            if (rem) fprintf(rem, "%lld\t%s\n", (long long)line, "score");
        } else if (r == FILTER_KEEP) {
            for (int s = 0; s < 2; s++) {
                fwrite(buf[s], 1, (size_t)(s ? n1 : n0), out[s]);
                fputc('\n', out[s]);
            }
        } else if (rem) {
            fprintf(rem, "%lld\t%s\n", (long long)line, filter_rule_name(r));
        }
    }
    for (int s = 0; s < 2; s++) {
        int bad = ferror(out[s]) | fclose(out[s]);
        out[s] = NULL;
        if (bad) {
            fprintf(stderr, "tern filter: cannot write %s\n", paths[2 + s]);
            goto out;
        }
    }
    if (rem) {
        int bad = ferror(rem) | fclose(rem);
        rem = NULL;
        if (bad) {
            fprintf(stderr, "tern filter: cannot write %s\n", removed_path);
            goto out;
        }
    }
    outputs_open = 0;

    rep = report_path ? fopen(report_path, "w") : stderr;
    if (!rep) {
        fprintf(stderr, "tern filter: cannot create %s: %s\n", report_path, strerror(errno));
        goto out;
    }
    const int64_t *c = filter_counts(f);
    size_t set_bytes;
    size_t set_n = filter_hash_set_size(f, &set_bytes);
    fprintf(rep, "# tern filter: %s %s -> %s %s\n", paths[0], paths[1], paths[2], paths[3]);
    fprintf(rep, "# a pair is counted under the first rule that removes it, in this order\n");
    fprintf(rep, "%-16s%lld\n", "read", (long long)line);
    char note[128];
    for (int r = 1; r < FILTER_NRULES; r++) {
        note[0] = 0;
        switch (r) {
        case FILTER_TOO_MANY_WORDS:
            if (o.max_words) snprintf(note, sizeof note, "max %lld words", (long long)o.max_words);
            else snprintf(note, sizeof note, "off");
            break;
        case FILTER_TOO_MANY_TOKENS:
            if (o.max_tokens)
                snprintf(note, sizeof note, "max %lld %s", (long long)o.max_tokens,
                         o.src_spm || o.tgt_spm ? "tokens (SentencePiece)" : "tokens (words)");
            else snprintf(note, sizeof note, "off");
            break;
        case FILTER_RATIO:
            if (o.max_ratio > 0)
                snprintf(note, sizeof note, "max %g, in %s", o.max_ratio,
                         o.src_spm && o.tgt_spm ? "SentencePiece tokens" : "words");
            else snprintf(note, sizeof note, "off");
            break;
        case FILTER_FEW_LETTERS:
            if (o.min_letters > 0) snprintf(note, sizeof note, "min %g letters", o.min_letters);
            else snprintf(note, sizeof note, "off");
            break;
        case FILTER_COPY:
            if (!o.copies) snprintf(note, sizeof note, "off");
            break;
        case FILTER_REPETITION:
            if (o.max_repeats)
                snprintf(note, sizeof note, "max %d in a row, units of %d..%d characters", o.max_repeats,
                         o.repeat_min, o.repeat_max);
            else snprintf(note, sizeof note, "off");
            break;
        case FILTER_LANGUAGE:
            if (o.src_lang) snprintf(note, sizeof note, "not %s / not %s (CLD2, reliable)", o.src_lang, o.tgt_lang);
            else snprintf(note, sizeof note, "off");
            break;
        case FILTER_DUPLICATE:
            if (o.duplicates) snprintf(note, sizeof note, "%zu hashes, %zu bytes", set_n, set_bytes);
            else snprintf(note, sizeof note, "off");
            break;
        }
        if (note[0]) fprintf(rep, "%-16s%-10lld# %s\n", filter_rule_name((filter_rule_t)r), (long long)c[r], note);
        else fprintf(rep, "%-16s%lld\n", filter_rule_name((filter_rule_t)r), (long long)c[r]);
    }
    if (score_model) {
        if (has_min) snprintf(note, sizeof note, "score <= %g (%lld scored)", min_score, (long long)scored.n_scored);
        else snprintf(note, sizeof note, "outside the best %g %% (%lld of %lld scored kept)", keep_best,
                      (long long)scored.n_keep, (long long)scored.n_scored);
        fprintf(rep, "%-16s%-10lld# %s\n", "score", (long long)score_removed, note);
    }
    fprintf(rep, "%-16s%lld\n", "kept", (long long)(c[FILTER_KEEP] - score_removed));
    if (report_path && fclose(rep)) {
        rep = NULL;
        fprintf(stderr, "tern filter: cannot write %s\n", report_path);
        goto out;
    }
    rep = NULL;
    rc = 0;
out:
    for (int s = 0; s < 2; s++) {
        if (in[s]) fclose(in[s]);
        if (out[s]) fclose(out[s]);
        free(buf[s]);
        spm_free(sp[s]);
    }
    if (rem) fclose(rem);
    if (rc && outputs_open)
        for (int s = 0; s < 2; s++) unlink(paths[2 + s]);
    filter_free(f);
    free(scored.score);
    free(scored.keep);
    return rc;
}
