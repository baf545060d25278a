/* cmd_score.c — `tern score`: corpus BLEU / chrF / GLEU as sacreBLEU 2.x computes them, sentence
 * scores, and paired bootstrap resampling between two systems. A thin user of src/text/score.h:
 * this file reads files strictly (UTF-8 checked with line numbers, line counts compared) and
 * prints. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "cli.h"
#include "text/score.h"

#define MAX_REFS 64

static void usage(FILE *f) {
    fprintf(f,
"usage: tern score -r REF [-r REF2 ...] [options] [HYP]\n"
"       tern score -r REF [-r REF2 ...] --paired-bs [options] BASELINE SYSTEM\n"
"\n"
"Scores a detokenized hypothesis file (HYP, or standard input when absent or '-') against one or\n"
"more reference files, line by line, exactly as sacreBLEU 2.x does with the same options. Lines\n"
"are read as sacreBLEU's CLI reads them: split on '\\n' only, trailing whitespace stripped.\n"
"Files must be valid UTF-8 and have the same number of lines (else exit 1 with the reason).\n"
"\n"
"options:\n"
"  -r, --ref FILE          a reference file; repeat for multiple references (at most %d)\n"
"  -m, --metrics LIST      comma-separated metrics among bleu, chrf, gleu (default: bleu)\n"
"  -tok, --tokenize NAME   BLEU/GLEU tokenizer: 13a (default), intl, char, none\n"
"  -lc, --lowercase        case-insensitive scores (Python str.lower())\n"
"  --smooth METHOD         BLEU smoothing: exp (default), none, floor, add-k\n"
"  --smooth-value V        value for floor (default 0.1) or add-k (default 1)\n"
"  --max-order N           BLEU/GLEU maximum n-gram order, 1..4 (default 4)\n"
"  --chrf-char-order N     chrF character n-gram order (default 6)\n"
"  --chrf-word-order N     chrF word n-gram order (default 0; 2 gives chrF++)\n"
"  --chrf-beta N           chrF recall weight beta (default 2)\n"
"  --chrf-whitespace       keep whitespace in chrF character n-grams\n"
"  --chrf-eps-smoothing    chrF++.py-style epsilon smoothing instead of effective order\n"
"  --sentence              one score per line (one metric only); BLEU then uses the effective\n"
"                          order (eff:yes), as sacrebleu --sentence-level and sentence_bleu() do\n"
"  --paired-bs             paired bootstrap resampling: two hypothesis files, BASELINE then\n"
"                          SYSTEM; prints both scores, their bootstrap means and 95%% intervals,\n"
"                          and the p-value of the difference (sacreBLEU's definition)\n"
"  --paired-bs-n N         bootstrap samples (default 1000)\n"
"  --seed N                seed of the resampling (default 12345, sacreBLEU's): the resamples are\n"
"                          numpy.random.default_rng(N).choice(lines, (samples, lines)), drawn\n"
"                          with numpy's own generator (PCG64, SeedSequence) reimplemented, so the\n"
"                          p-value, means and intervals equal sacrebleu --paired-bs's with\n"
"                          SACREBLEU_SEED=N\n"
"  --bs-indices FILE       use these resamples instead: whitespace-separated 0-based line\n"
"                          indices, N per sample (the sample count is taken from the file)\n"
"  -w, --width N           decimals of printed scores (default 2)\n"
"  -b, --score-only        print the score(s) only\n"
"  --json                  machine-readable output (full-precision numbers)\n"
"  -h, --help              this help\n"
"\n"
"Text output mirrors sacreBLEU's, e.g.\n"
"  BLEU|nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp|version:tern-" TERN_VERSION " = 34.56 65.2/40.1/27.0/19.0\n"
"  (BP = 1.000 ratio = 1.023 hyp_len = 1000 ref_len = 978)\n"
"The signature names tern's version where sacreBLEU names its own; the numbers are sacreBLEU's.\n"
"GLEU is GNMT's (Wu et al. 2016; NLTK's sentence_gleu): per sentence, min of n-gram precision\n"
"and recall over 1..4-grams pooled = matches / max(hyp n-grams, ref n-grams); the corpus score is\n"
"the mean of the sentence scores, in percent; the pooled ratio sum(matches) / sum(max(...))\n"
"(NLTK's corpus_gleu) is printed beside it.\n",
            MAX_REFS);
}

/* ---------------------------------------------------------------- strict line reading */

typedef struct {
    char *buf;
    char **lines;
    size_t n;
    const char *path;
} lines_t;

static void lines_free(lines_t *l) {
    free(l->buf);
    free(l->lines);
    memset(l, 0, sizeof *l);
}

static char *slurp(const char *path, size_t *size) {
    FILE *f = strcmp(path, "-") ? fopen(path, "rb") : stdin;
    if (!f) {
        fprintf(stderr, "tern score: cannot open %s: %s\n", path, strerror(errno));
        return NULL;
    }
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap + 1);
    while (buf) {
        if (n == cap) {
            char *b = realloc(buf, 2 * cap + 1);
            if (!b) { free(buf); buf = NULL; break; }
            buf = b;
            cap *= 2;
        }
        size_t k = fread(buf + n, 1, cap - n, f);
        n += k;
        if (k == 0) break;
    }
    int err = ferror(f);
    if (f != stdin) fclose(f);
    if (!buf || err) {
        fprintf(stderr, "tern score: cannot read %s\n", path);
        free(buf);
        return NULL;
    }
    buf[n] = 0;
    *size = n;
    return buf;
}

/* Reads a file as sacreBLEU does: lines split on '\n' (a final line without '\n' counts when not
 * empty), then rstrip()-ed. Invalid UTF-8 and NUL bytes are errors naming the line. */
static int read_lines(lines_t *l, const char *path) {
    memset(l, 0, sizeof *l);
    l->path = strcmp(path, "-") ? path : "<stdin>";
    size_t size;
    l->buf = slurp(path, &size);
    if (!l->buf) return 0;
    size_t cap = 1024;
    l->lines = malloc(cap * sizeof *l->lines);
    if (!l->lines) goto nomem;
    size_t pos = 0;
    uint32_t cps[1];
    while (pos < size) {
        char *s = l->buf + pos;
        char *e = memchr(s, '\n', size - pos);
        size_t len = e ? (size_t)(e - s) : size - pos;
        pos += len + (e ? 1 : 0);
        size_t lineno = l->n + 1, bad;
        if (memchr(s, 0, len)) {
            fprintf(stderr, "tern score: %s: line %zu: NUL byte in text\n", l->path, lineno);
            lines_free(l);
            return 0;
        }
        if (!text_utf8_valid(s, len, &bad)) {
            fprintf(stderr, "tern score: %s: line %zu: invalid UTF-8 (byte 0x%02x at byte %zu of the line)\n",
                    l->path, lineno, (unsigned char)s[bad], bad + 1);
            lines_free(l);
            return 0;
        }
        /* rstrip: cut after the last non-whitespace character */
        size_t end = 0, i = 0;
        while (i < len) {
            size_t k = 1;
            unsigned char c = (unsigned char)s[i];
            if (c >= 0xF0) k = 4; else if (c >= 0xE0) k = 3; else if (c >= 0xC0) k = 2;
            text_decode(cps, s + i, k);
            i += k;
            if (!text_is_py_space(cps[0])) end = i;
        }
        s[end] = 0;
        if (l->n == cap) {
            char **p = realloc(l->lines, 2 * cap * sizeof *p);
            if (!p) goto nomem;
            l->lines = p;
            cap *= 2;
        }
        l->lines[l->n++] = s;
    }
    return 1;
nomem:
    fprintf(stderr, "tern score: %s: out of memory\n", l->path);
    lines_free(l);
    return 0;
}

/* ---------------------------------------------------------------- output helpers */

enum { MET_BLEU = 1, MET_CHRF = 2, MET_GLEU = 4 };

typedef struct {
    bleu_options_t bleu;
    chrf_options_t chrf;
    int width, score_only, json;
} out_opts_t;

/* cJSON prints numbers with 15 significant digits when they read back within one ulp, which loses
 * the last bit; scores are printed here with 17 (always round-trip exact), integers as integers. */
static void add_num(cJSON *obj, const char *key, double v) {
    char buf[64];
    if (v != v || v - v != 0) snprintf(buf, sizeof buf, "null"); /* NaN, inf: not JSON numbers */
    else if (v == (double)(long long)v && v > -1e15 && v < 1e15) snprintf(buf, sizeof buf, "%lld", (long long)v);
    else snprintf(buf, sizeof buf, "%.17g", v);
    if (cJSON_IsArray(obj)) cJSON_AddItemToArray(obj, cJSON_CreateRaw(buf));
    else cJSON_AddRawToObject(obj, key, buf);
}

static void add_signature_fields(cJSON *obj, const char *sig) {
    char tmp[512];
    snprintf(tmp, sizeof tmp, "%s", sig);
    for (char *tok = strtok(tmp, "|"); tok; tok = strtok(NULL, "|")) {
        char *colon = strchr(tok, ':');
        if (!colon) continue;
        *colon = 0;
        cJSON_AddStringToObject(obj, tok, colon + 1);
    }
}

static cJSON *bleu_json(const bleu_result_t *r, const bleu_stats_t *st, const char *sig, const char *verbose) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "name", "BLEU");
    add_num(o, "score", r->score);
    cJSON_AddStringToObject(o, "signature", sig);
    cJSON_AddStringToObject(o, "verbose_score", verbose);
    cJSON *p = cJSON_AddArrayToObject(o, "precisions");
    cJSON *c = cJSON_AddArrayToObject(o, "counts");
    cJSON *t = cJSON_AddArrayToObject(o, "totals");
    for (int n = 0; n < r->max_order; n++) {
        add_num(p, NULL, r->precisions[n]);
        add_num(c, NULL, (double)st->correct[n]);
        add_num(t, NULL, (double)st->total[n]);
    }
    add_num(o, "bp", r->bp);
    add_num(o, "ratio", r->ratio);
    add_num(o, "hyp_len", (double)r->hyp_len);
    add_num(o, "ref_len", (double)r->ref_len);
    add_signature_fields(o, sig);
    return o;
}

static cJSON *plain_json(const char *name, double score, const char *sig) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "name", name);
    add_num(o, "score", score);
    cJSON_AddStringToObject(o, "signature", sig);
    add_signature_fields(o, sig);
    return o;
}

static void print_line(const out_opts_t *oo, const char *name, const char *sig, double score,
                       const char *verbose) {
    if (oo->score_only) printf("%.*f\n", oo->width, score);
    else if (verbose && *verbose) printf("%s|%s = %.*f %s\n", name, sig, oo->width, score, verbose);
    else printf("%s|%s = %.*f\n", name, sig, oo->width, score);
}

static void gleu_signature(char *buf, size_t size, const bleu_options_t *o, int R) {
    snprintf(buf, size, "nrefs:%d|case:%s|tok:%s|order:%d|version:tern-%s", R,
             o->lowercase ? "lc" : "mixed", score_tokenizer_name(o->tokenize), o->max_order, TERN_VERSION);
}

static void print_json(cJSON *j, int compact) {
    char *s = compact ? cJSON_PrintUnformatted(j) : cJSON_Print(j);
    if (s) printf("%s\n", s);
    free(s);
}

/* ---------------------------------------------------------------- modes */

static int run_sentence(int metric, const out_opts_t *oo, lines_t *hyp, lines_t *refs, int R) {
    const char *rr[MAX_REFS];
    char sig[512], verbose[256], name[32];
    bleu_workspace_t bws;
    chrf_workspace_t cws;
    memset(&bws, 0, sizeof bws);
    memset(&cws, 0, sizeof cws);
    int rc = 0;
    for (size_t i = 0; i < hyp->n && !rc; i++) {
        for (int r = 0; r < R; r++) rr[r] = refs[r].lines[i];
        double score = 0;
        cJSON *j = NULL;
        verbose[0] = 0;
        tern_status_t s = TERN_OK;
        if (metric == MET_BLEU) {
            bleu_stats_t st;
            if (!(s = bleu_sentence_stats(&st, &bws, hyp->lines[i], rr, &oo->bleu, R))) {
                bleu_result_t r = bleu_compute(&st, &oo->bleu);
                char full[320];
                bleu_format(full, sizeof full, &r, oo->width);
                snprintf(verbose, sizeof verbose, "%s", strchr(full, ' ') + 1);
                bleu_signature(sig, sizeof sig, &oo->bleu, R);
                snprintf(name, sizeof name, "BLEU");
                score = r.score;
                if (oo->json) j = bleu_json(&r, &st, sig, verbose);
            }
        } else if (metric == MET_CHRF) {
            chrf_stats_t st;
            if (!(s = chrf_sentence_stats(&st, &cws, hyp->lines[i], rr, &oo->chrf, R))) {
                score = chrf_compute(&st, &oo->chrf);
                chrf_name(name, sizeof name, &oo->chrf);
                chrf_signature(sig, sizeof sig, &oo->chrf, R);
                if (oo->json) j = plain_json(name, score, sig);
            }
        } else {
            gleu_stats_t st;
            if (!(s = gleu_sentence_stats(&st, &bws, hyp->lines[i], rr, &oo->bleu, R))) {
                score = gleu_sentence_score(&st);
                snprintf(name, sizeof name, "GLEU");
                gleu_signature(sig, sizeof sig, &oo->bleu, R);
                if (oo->json) {
                    j = plain_json(name, score, sig);
                    add_num(j, "match", (double)st.match);
                    add_num(j, "all", (double)st.all);
                }
            }
        }
        if (s) {
            fprintf(stderr, "tern score: line %zu: %s\n", i + 1, tern_last_error());
            rc = 1;
        } else if (j) {
            print_json(j, 1);
        } else {
            print_line(oo, name, sig, score, verbose);
        }
        cJSON_Delete(j);
    }
    bleu_workspace_free(&bws);
    chrf_workspace_free(&cws);
    return rc;
}

static int run_corpus(int metrics, const out_opts_t *oo, lines_t *hyp, lines_t *refs, int R) {
    const char *const *rr[MAX_REFS];
    for (int r = 0; r < R; r++) rr[r] = (const char *const *)refs[r].lines;
    const char *const *hh = (const char *const *)hyp->lines;
    char sig[512], verbose[256], name[32];
    cJSON *arr = cJSON_CreateArray();
    int count = 0;
    if (metrics & MET_BLEU) {
        bleu_stats_t st;
        if (bleu_corpus_stats(NULL, &st, hh, rr, &oo->bleu, hyp->n, R)) goto fail;
        bleu_result_t r = bleu_compute(&st, &oo->bleu);
        char full[320];
        bleu_format(full, sizeof full, &r, oo->width);
        snprintf(verbose, sizeof verbose, "%s", strchr(full, ' ') + 1);
        bleu_signature(sig, sizeof sig, &oo->bleu, R);
        if (oo->json) cJSON_AddItemToArray(arr, bleu_json(&r, &st, sig, verbose));
        else print_line(oo, "BLEU", sig, r.score, verbose);
        count++;
    }
    if (metrics & MET_CHRF) {
        double score;
        if (chrf_corpus(&score, hh, rr, &oo->chrf, hyp->n, R)) goto fail;
        chrf_name(name, sizeof name, &oo->chrf);
        chrf_signature(sig, sizeof sig, &oo->chrf, R);
        if (oo->json) cJSON_AddItemToArray(arr, plain_json(name, score, sig));
        else print_line(oo, name, sig, score, NULL);
        count++;
    }
    if (metrics & MET_GLEU) {
        gleu_result_t g;
        if (gleu_corpus(&g, NULL, hh, rr, &oo->bleu, hyp->n, R)) goto fail;
        gleu_signature(sig, sizeof sig, &oo->bleu, R);
        if (oo->json) {
            cJSON *j = plain_json("GLEU", g.mean, sig);
            add_num(j, "pooled", g.pooled);
            add_num(j, "match", (double)g.match);
            add_num(j, "all", (double)g.all);
            cJSON_AddItemToArray(arr, j);
        } else {
            snprintf(verbose, sizeof verbose, "(mean of sentence GLEU; pooled = %.*f)", oo->width, g.pooled);
            print_line(oo, "GLEU", sig, g.mean, verbose);
        }
        count++;
    }
    if (oo->json) print_json(count == 1 ? cJSON_GetArrayItem(arr, 0) : arr, 0);
    cJSON_Delete(arr);
    return 0;
fail:
    fprintf(stderr, "tern score: %s\n", tern_last_error());
    cJSON_Delete(arr);
    return 1;
}

static uint32_t *read_indices(const char *path, size_t N, int *S) {
    size_t size;
    char *buf = slurp(path, &size);
    if (!buf) return NULL;
    size_t cap = 1 << 16, n = 0;
    uint32_t *idx = malloc(cap * sizeof *idx);
    char *p = buf;
    while (idx) {
        while (*p == ' ' || *p == '\n' || *p == '\t' || *p == '\r' || *p == ',') p++;
        if (!*p) break;
        char *end;
        unsigned long v = strtoul(p, &end, 10);
        if (end == p || v >= N) {
            fprintf(stderr, "tern score: %s: bad index near byte %zu (must be 0..%zu)\n", path,
                    (size_t)(p - buf), N - 1);
            free(idx);
            free(buf);
            return NULL;
        }
        if (n == cap) {
            uint32_t *q = realloc(idx, 2 * cap * sizeof *q);
            if (!q) { free(idx); idx = NULL; break; }
            idx = q;
            cap *= 2;
        }
        idx[n++] = (uint32_t)v;
        p = end;
    }
    free(buf);
    if (!idx) { fprintf(stderr, "tern score: out of memory\n"); return NULL; }
    if (n == 0 || n % N) {
        fprintf(stderr, "tern score: %s: %zu indices is not a multiple of %zu lines\n", path, n, N);
        free(idx);
        return NULL;
    }
    *S = (int)(n / N);
    return idx;
}

static int run_paired(int metrics, const out_opts_t *oo, lines_t *sys2, lines_t *refs, int R,
                      int S, uint64_t seed, const char *idx_path) {
    const char *const *rr[MAX_REFS];
    for (int r = 0; r < R; r++) rr[r] = (const char *const *)refs[r].lines;
    size_t N = sys2[0].n;
    uint32_t *idx = NULL;
    if (idx_path && !(idx = read_indices(idx_path, N, &S))) return 1;
    cJSON *arr = cJSON_CreateArray();
    int rc = 0, count = 0;
    for (int m = MET_BLEU; m <= MET_CHRF && !rc; m <<= 1) {
        if (!(metrics & m)) continue;
        int K = m == MET_BLEU ? BLEU_NSTATS : 3 * (oo->chrf.char_order + oo->chrf.word_order);
        int64_t *st[2] = {malloc(N * (size_t)K * sizeof(int64_t)), malloc(N * (size_t)K * sizeof(int64_t))};
        if (!st[0] || !st[1]) { free(st[0]); free(st[1]); rc = 1; fprintf(stderr, "tern score: out of memory\n"); break; }
        for (int s = 0; s < 2 && !rc; s++) {
            const char *const *hh = (const char *const *)sys2[s].lines;
            if (m == MET_BLEU) {
                bleu_stats_t *ps = malloc(N * sizeof *ps), tot;
                if (!ps || bleu_corpus_stats(ps, &tot, hh, rr, &oo->bleu, N, R)) rc = 1;
                else for (size_t i = 0; i < N; i++) memcpy(st[s] + i * (size_t)K, &ps[i], sizeof ps[i]);
                free(ps);
            } else {
                chrf_stats_t *ps = malloc(N * sizeof *ps), tot;
                if (!ps || chrf_corpus_stats(ps, &tot, hh, rr, &oo->chrf, N, R)) rc = 1;
                else for (size_t i = 0; i < N; i++) memcpy(st[s] + i * (size_t)K, ps[i].v, (size_t)K * sizeof(int64_t));
                free(ps);
            }
            if (rc) fprintf(stderr, "tern score: %s: %s\n", sys2[s].path, tern_last_error());
        }
        paired_bs_result_t res;
        if (!rc) {
            const void *ud = m == MET_BLEU ? (const void *)&oo->bleu : (const void *)&oo->chrf;
            score_stats_fn fn = m == MET_BLEU ? bleu_stats_score : chrf_stats_score;
            score_resample_fn rfn = m == MET_BLEU ? bleu_resample_score : chrf_resample_score;
            if (paired_bootstrap(&res, st[0], st[1], idx, fn, rfn, ud, seed, N, K, S)) {
                fprintf(stderr, "tern score: %s\n", tern_last_error());
                rc = 1;
            }
        }
        free(st[0]);
        free(st[1]);
        if (rc) break;
        char sig[512], base[512], name[32], seedstr[32];
        if (m == MET_BLEU) { bleu_signature(base, sizeof base, &oo->bleu, R); snprintf(name, sizeof name, "BLEU"); }
        else { chrf_signature(base, sizeof base, &oo->chrf, R); chrf_name(name, sizeof name, &oo->chrf); }
        if (idx) snprintf(seedstr, sizeof seedstr, "given");
        else snprintf(seedstr, sizeof seedstr, "%llu", (unsigned long long)seed);
        const char *rest = strchr(base, '|');
        snprintf(sig, sizeof sig, "nrefs:%d|bs:%d|seed:%s%s", R, S, seedstr, rest ? rest : "");
        if (oo->json) {
            cJSON *o = cJSON_CreateObject();
            cJSON_AddStringToObject(o, "name", name);
            cJSON_AddStringToObject(o, "signature", sig);
            cJSON *b = cJSON_AddObjectToObject(o, "baseline");
            cJSON_AddStringToObject(b, "file", sys2[0].path);
            add_num(b, "score", res.base_score);
            add_num(b, "mean", res.base_mean);
            add_num(b, "ci", res.base_ci);
            cJSON *y = cJSON_AddObjectToObject(o, "system");
            cJSON_AddStringToObject(y, "file", sys2[1].path);
            add_num(y, "score", res.sys_score);
            add_num(y, "mean", res.sys_mean);
            add_num(y, "ci", res.sys_ci);
            add_num(o, "p_value", res.p_value);
            add_num(o, "samples", S);
            cJSON_AddItemToArray(arr, o);
        } else {
            printf("%s|%s\n", name, sig);
            printf("  baseline %-40s %.*f (μ = %.*f ± %.*f)\n", sys2[0].path, oo->width, res.base_score,
                   oo->width, res.base_mean, oo->width, res.base_ci);
            printf("  system   %-40s %.*f (μ = %.*f ± %.*f) (p = %.4f)%s\n", sys2[1].path, oo->width,
                   res.sys_score, oo->width, res.sys_mean, oo->width, res.sys_ci, res.p_value,
                   res.p_value < 0.05 ? " *" : "");
        }
        count++;
    }
    if (!rc && oo->json) print_json(count == 1 ? cJSON_GetArrayItem(arr, 0) : arr, 0);
    if (!rc && !oo->json) printf("(* p < 0.05: the system differs significantly from the baseline)\n");
    cJSON_Delete(arr);
    free(idx);
    return rc;
}

/* ---------------------------------------------------------------- main */

static int parse_int(const char *opt, const char *v, int lo, int hi, int *out) {
    char *end;
    long x = v ? strtol(v, &end, 10) : 0;
    if (!v || *end || end == v || x < lo || x > hi) {
        fprintf(stderr, "tern score: %s needs an integer in %d..%d (got '%s')\n", opt, lo, hi, v ? v : "");
        return 0;
    }
    *out = (int)x;
    return 1;
}

int cmd_score(int argc, char **argv) {
    const char *ref_paths[MAX_REFS];
    const char *hyp_paths[2] = {NULL, NULL};
    int R = 0, nhyp = 0, metrics = 0, sentence = 0, paired = 0, S = 1000;
    unsigned long long seed = 12345;
    const char *idx_path = NULL;
    out_opts_t oo;
    memset(&oo, 0, sizeof oo);
    oo.bleu = bleu_default_options();
    oo.chrf = chrf_default_options();
    oo.width = 2;

    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
#define NEED_VALUE() do { if (!v) { fprintf(stderr, "tern score: %s needs a value\n", a); return 2; } i++; } while (0)
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) { usage(stdout); return 0; }
        else if (!strcmp(a, "-r") || !strcmp(a, "--ref") || !strcmp(a, "--refs")) {
            NEED_VALUE();
            if (R == MAX_REFS) { fprintf(stderr, "tern score: at most %d references\n", MAX_REFS); return 2; }
            ref_paths[R++] = v;
        } else if (!strcmp(a, "-m") || !strcmp(a, "--metrics")) {
            NEED_VALUE();
            char tmp[256];
            snprintf(tmp, sizeof tmp, "%s", v);
            for (char *t = strtok(tmp, ", "); t; t = strtok(NULL, ", ")) {
                if (!strcmp(t, "bleu")) metrics |= MET_BLEU;
                else if (!strcmp(t, "chrf")) metrics |= MET_CHRF;
                else if (!strcmp(t, "gleu")) metrics |= MET_GLEU;
                else { fprintf(stderr, "tern score: unknown metric '%s' (bleu, chrf, gleu)\n", t); return 2; }
            }
        } else if (!strcmp(a, "-tok") || !strcmp(a, "--tokenize")) {
            NEED_VALUE();
            int t = score_tokenizer_parse(v);
            if (t < 0) { fprintf(stderr, "tern score: unknown tokenizer '%s' (13a, intl, char, none)\n", v); return 2; }
            oo.bleu.tokenize = (score_tokenizer_t)t;
        } else if (!strcmp(a, "-lc") || !strcmp(a, "--lowercase")) {
            oo.bleu.lowercase = oo.chrf.lowercase = 1;
        } else if (!strcmp(a, "--smooth")) {
            NEED_VALUE();
            if (!strcmp(v, "exp")) oo.bleu.smooth = BLEU_SMOOTH_EXP;
            else if (!strcmp(v, "none")) oo.bleu.smooth = BLEU_SMOOTH_NONE;
            else if (!strcmp(v, "floor")) oo.bleu.smooth = BLEU_SMOOTH_FLOOR;
            else if (!strcmp(v, "add-k")) oo.bleu.smooth = BLEU_SMOOTH_ADD_K;
            else { fprintf(stderr, "tern score: unknown smoothing '%s' (exp, none, floor, add-k)\n", v); return 2; }
        } else if (!strcmp(a, "--smooth-value")) {
            NEED_VALUE();
            char *end;
            oo.bleu.smooth_value = strtod(v, &end);
            if (*end || end == v || oo.bleu.smooth_value < 0) { fprintf(stderr, "tern score: bad --smooth-value '%s'\n", v); return 2; }
        } else if (!strcmp(a, "--max-order")) {
            NEED_VALUE();
            if (!parse_int(a, v, 1, BLEU_MAX_ORDER, &oo.bleu.max_order)) return 2;
        } else if (!strcmp(a, "--chrf-char-order")) {
            NEED_VALUE();
            if (!parse_int(a, v, 0, CHRF_MAX_ORDER, &oo.chrf.char_order)) return 2;
        } else if (!strcmp(a, "--chrf-word-order")) {
            NEED_VALUE();
            if (!parse_int(a, v, 0, CHRF_MAX_ORDER, &oo.chrf.word_order)) return 2;
        } else if (!strcmp(a, "--chrf-beta")) {
            NEED_VALUE();
            if (!parse_int(a, v, 0, 100, &oo.chrf.beta)) return 2;
        } else if (!strcmp(a, "--chrf-whitespace")) {
            oo.chrf.whitespace = 1;
        } else if (!strcmp(a, "--chrf-eps-smoothing")) {
            oo.chrf.eps_smoothing = 1;
        } else if (!strcmp(a, "--sentence") || !strcmp(a, "-sl") || !strcmp(a, "--sentence-level")) {
            sentence = 1;
        } else if (!strcmp(a, "--paired-bs")) {
            paired = 1;
        } else if (!strcmp(a, "--paired-bs-n")) {
            NEED_VALUE();
            if (!parse_int(a, v, 1, 1000000, &S)) return 2;
        } else if (!strcmp(a, "--seed")) {
            NEED_VALUE();
            char *end;
            seed = strtoull(v, &end, 10);
            if (*end || end == v) { fprintf(stderr, "tern score: bad --seed '%s'\n", v); return 2; }
        } else if (!strcmp(a, "--bs-indices")) {
            NEED_VALUE();
            idx_path = v;
        } else if (!strcmp(a, "-w") || !strcmp(a, "--width")) {
            NEED_VALUE();
            if (!parse_int(a, v, 0, 17, &oo.width)) return 2;
        } else if (!strcmp(a, "-b") || !strcmp(a, "--score-only")) {
            oo.score_only = 1;
        } else if (!strcmp(a, "--json")) {
            oo.json = 1;
        } else if (a[0] == '-' && a[1]) {
            fprintf(stderr, "tern score: unknown option '%s' (see tern score --help)\n", a);
            return 2;
        } else {
            if (nhyp == 2) { fprintf(stderr, "tern score: too many hypothesis files\n"); return 2; }
            hyp_paths[nhyp++] = a;
        }
#undef NEED_VALUE
    }
    if (!metrics) metrics = MET_BLEU;
    if (R == 0) { fprintf(stderr, "tern score: no reference (-r REF); see tern score --help\n"); return 2; }
    if (oo.chrf.char_order + oo.chrf.word_order < 1 || oo.chrf.char_order + oo.chrf.word_order > CHRF_MAX_ORDER) {
        fprintf(stderr, "tern score: chrF orders must add up to 1..%d\n", CHRF_MAX_ORDER);
        return 2;
    }
    if (paired) {
        if (nhyp != 2) { fprintf(stderr, "tern score: --paired-bs needs two hypothesis files: BASELINE SYSTEM\n"); return 2; }
        if (sentence) { fprintf(stderr, "tern score: --paired-bs and --sentence exclude each other\n"); return 2; }
        if (metrics & MET_GLEU) { fprintf(stderr, "tern score: --paired-bs supports bleu and chrf\n"); return 2; }
    } else {
        if (nhyp > 1) { fprintf(stderr, "tern score: one hypothesis file (two only with --paired-bs)\n"); return 2; }
        if (idx_path) { fprintf(stderr, "tern score: --bs-indices needs --paired-bs\n"); return 2; }
        if (nhyp == 0) hyp_paths[nhyp++] = "-";
    }
    if (sentence) {
        if (metrics & (metrics - 1)) { fprintf(stderr, "tern score: --sentence takes one metric\n"); return 2; }
        oo.bleu.effective_order = 1;
    }

    lines_t refs[MAX_REFS], hyps[2];
    memset(refs, 0, sizeof refs);
    memset(hyps, 0, sizeof hyps);
    int rc = 1, nref_read = 0, nhyp_read = 0;
    for (; nref_read < R; nref_read++)
        if (!read_lines(&refs[nref_read], ref_paths[nref_read])) goto out;
    for (; nhyp_read < nhyp; nhyp_read++)
        if (!read_lines(&hyps[nhyp_read], hyp_paths[nhyp_read])) goto out;
    for (int h = 0; h < nhyp; h++)
        for (int r = 0; r < R; r++)
            if (hyps[h].n != refs[r].n) {
                fprintf(stderr, "tern score: line counts differ: hypothesis %s has %zu lines, reference %s has %zu\n",
                        hyps[h].path, hyps[h].n, refs[r].path, refs[r].n);
                goto out;
            }
    if (hyps[0].n == 0) {
        fprintf(stderr, "tern score: %s is empty\n", hyps[0].path);
        goto out;
    }
    if (paired) rc = run_paired(metrics, &oo, hyps, refs, R, S, seed, idx_path);
    else if (sentence) rc = run_sentence(metrics, &oo, &hyps[0], refs, R);
    else rc = run_corpus(metrics, &oo, &hyps[0], refs, R);
out:
    for (int r = 0; r < nref_read; r++) lines_free(&refs[r]);
    for (int h = 0; h < nhyp_read; h++) lines_free(&hyps[h]);
    return rc;
}
