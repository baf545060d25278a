/* cmd_lmbr_tune.c — `tern lmbr-tune`: coordinate search of LMBR's alpha, p, r and lambda on a
 * development set for corpus BLEU (score.h's sacreBLEU-exact BLEU). Each setting translates the
 * development set in memory (cli_translate_file over fmemopen/open_memstream); settings already
 * evaluated are not translated again. */
#include <getopt.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "batch/translator.h"
#include "cli.h"
#include "text/score.h"

static void usage(FILE *f) {
    fprintf(f,
"usage: tern lmbr-tune -m MODEL -s SOURCE -r REFERENCE --lmbr-evidence FILE [...] [options]\n"
"\n"
"Tunes LMBR's parameters on a development set: starting from the defaults, each parameter in turn\n"
"takes every value of its grid with the others held, the best corpus BLEU (sacreBLEU's, 13a) is\n"
"kept, and rounds repeat until none improves. Prints every setting tried with its BLEU, the plain\n"
"beam search's BLEU, and the best setting as tern translate options. lambda starts at tern\n"
"translate's default, 0.5 divided by the number of models.\n"
"\n"
CLI_MODELS_HELP
"  -s, --source FILE           development source\n"
"  -r, --ref FILE              its reference\n"
"  --lmbr-evidence FILE        n-best list of a system for the development source (repeatable)\n"
"  --lmbr-weights W1,W2,...    per-system weights (default: all 1; with --grid-weights, the start)\n"
"  --grid-alpha LIST           values of alpha (default 0.25,0.5,1,2)\n"
"  --grid-p LIST               values of p (default 0.6,0.75,0.85,0.95)\n"
"  --grid-r LIST               values of r (default 0.5,0.6,0.7,0.8)\n"
"  --grid-lambda LIST          values of lambda (default 0.1,0.25,0.5,1,2)\n"
"  --grid-weights LIST         values of the weight of each system after the first (the first's\n"
"                              stays 1): one more coordinate per system (default: not tuned)\n"
"  --rounds N                  at most N rounds (default 3)\n"
"  -b, --beam-size N           beam size (default: the model's, as tern translate; else 4)\n"
"  --length-penalty A          length normalization exponent (default: the model's, as\n"
"                              tern translate; else 0)\n"
"  --lmbr-clip                 each evidence n-gram earns its posterior once per hypothesis (as\n"
"                              tern translate's --lmbr-clip)\n"
"  --lmbr-sum-gain             the length penalty divides only the NMT log-probability (as tern\n"
"                              translate's --lmbr-sum-gain)\n"
"  --pretokenized              source, evidence and output are pieces (no SentencePiece)\n"
"  -t, --threads N             intra-op threads (default: all cores)\n"
"  -h, --help                  this help\n");
}

enum { O_EV = 1000, O_W, O_GA, O_GP, O_GR, O_GL, O_ROUNDS, O_PRETOK, O_ENS_W, O_ENS_MODE, O_LP, O_GW, O_CLIP, O_SUM };

static const struct option long_opts[] = {
    {"model", required_argument, 0, 'm'},         {"source", required_argument, 0, 's'},
    {"ref", required_argument, 0, 'r'},           {"lmbr-evidence", required_argument, 0, O_EV},
    {"lmbr-weights", required_argument, 0, O_W},  {"grid-alpha", required_argument, 0, O_GA},
    {"grid-p", required_argument, 0, O_GP},       {"grid-r", required_argument, 0, O_GR},
    {"grid-lambda", required_argument, 0, O_GL},  {"rounds", required_argument, 0, O_ROUNDS},
    {"beam-size", required_argument, 0, 'b'},     {"pretokenized", no_argument, 0, O_PRETOK},
    {"threads", required_argument, 0, 't'},       {"help", no_argument, 0, 'h'},
    {"ensemble-weights", required_argument, 0, O_ENS_W}, {"ensemble-mode", required_argument, 0, O_ENS_MODE},
    {"length-penalty", required_argument, 0, O_LP}, {"grid-weights", required_argument, 0, O_GW},
    {"lmbr-clip", no_argument, 0, O_CLIP}, {"lmbr-sum-gain", no_argument, 0, O_SUM},
    {0, 0, 0, 0},
};

#define MAXG 32
#define MAXEV 64
#define NV (4 + MAXEV) /* alpha, p, r, lambda, then the systems' weights */

static int parse_list(const char *opt, const char *s, float *v, int *n) {
    *n = 0;
    for (const char *p = s, *q; *p; p = *q ? q + 1 : q) {
        q = p + strcspn(p, ",");
        char tmp[64];
        snprintf(tmp, sizeof tmp, "%.*s", (int)(q - p), p);
        if (*n == MAXG || !cli_float("lmbr-tune", opt, tmp, 1e-6f, 1e6f, &v[(*n)++])) return 0;
    }
    return *n > 0;
}

static char *slurp(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    char *buf = NULL;
    size_t cap = 0, n = 0, r;
    do {
        if (n + 65536 > cap) {
            cap = cap ? cap * 2 : 1 << 20;
            char *b = realloc(buf, cap + 1);
            if (!b) {
                free(buf), fclose(f);
                return NULL;
            }
            buf = b;
        }
        r = fread(buf + n, 1, cap - n, f);
        n += r;
    } while (r > 0);
    fclose(f);
    buf[n] = 0;
    *len = n;
    return buf;
}

/* splits text into lines in place (trailing '\r' removed) */
static char **split_lines(char *text, size_t len, int *n) {
    int cap = 1024;
    char **v = malloc((size_t)cap * sizeof *v);
    *n = 0;
    if (!v) return NULL;
    char *p = text, *end = text + len;
    while (p < end) {
        char *nl = memchr(p, '\n', (size_t)(end - p));
        char *e = nl ? nl : end;
        if (e > p && e[-1] == '\r') e[-1] = 0;
        *e = 0;
        if (*n == cap) {
            cap *= 2;
            char **w = realloc(v, (size_t)cap * sizeof *w);
            if (!w) {
                free(v);
                return NULL;
            }
            v = w;
        }
        v[(*n)++] = p;
        p = nl ? nl + 1 : end;
    }
    return v;
}

typedef struct {
    float v[NV];
    double bleu;
} eval_t;

/* What every setting shares: the translator's set-up, the search, LMBR's files and parameters. */
typedef struct {
    tern_translator_options_t to;
    tern_search_params_t sp;
    tern_lmbr_params_t lm;
    cli_extras_files_t files;
} tune_t;

/* BLEU of one setting (lmbr 0: plain beam search) */
static tern_status_t evaluate(const tern_model_t *m, const tune_t *base, const float *v, int lmbr,
                              const char *src, size_t src_len, const char *const *refs, int nref, double *bleu) {
    tern_lmbr_params_t lm = base->lm;
    lm.alpha = v[0], lm.p = v[1], lm.r = v[2], lm.lambda = v[3];
    if (lm.weights) lm.weights = v + 4;
    tern_request_t req = tern_request_default();
    req.params = &base->sp;
    req.lmbr = lmbr ? &lm : NULL;
    cli_extras_files_t none = {0};
    cli_extras_t *x = NULL;
    tern_status_t st = cli_extras_open(&x, lmbr ? &base->files : &none);
    if (st) return st;
    FILE *in = fmemopen((void *)src, src_len ? src_len : 1, "r");
    char *obuf = NULL;
    size_t olen = 0;
    FILE *out = open_memstream(&obuf, &olen);
    if (!in || !out) {
        if (in) fclose(in);
        if (out) fclose(out);
        free(obuf);
        cli_extras_close(x, -1);
        return tern_error(TERN_ERR_NOMEM, "out of memory");
    }
    st = src_len ? cli_translate_file(m, &base->to, &req, x, in, out, 0, NULL) : TERN_OK;
    if (!src_len) cli_extras_close(x, -1);
    fclose(in);
    fclose(out);
    if (st) {
        free(obuf);
        return st;
    }
    int nh = 0;
    char **hyps = split_lines(obuf, olen, &nh);
    if (!hyps) st = tern_error(TERN_ERR_NOMEM, "out of memory");
    else if (nh != nref) st = tern_error(TERN_ERR_INPUT, "%d translations for %d references", nh, nref);
    else {
        bleu_options_t bo = bleu_default_options();
        bleu_result_t br;
        const char *const *rr[1] = {refs};
        if (!(st = bleu_corpus(&br, (const char *const *)hyps, rr, &bo, (size_t)nh, 1))) *bleu = br.score;
    }
    free(hyps);
    free(obuf);
    return st;
}

int cmd_lmbr_tune(int argc, char **argv) {
    const char *C = "lmbr-tune", *src_path = NULL, *ref_path = NULL;
    const char *ev[MAXEV];
    float w[MAXEV], gw[MAXG], grid[4][MAXG] = {{0.25f, 0.5f, 1, 2}, {0.6f, 0.75f, 0.85f, 0.95f}, {0.5f, 0.6f, 0.7f, 0.8f},
                                  {0.1f, 0.25f, 0.5f, 1, 2}};
    int ng[4] = {4, 4, 4, 5}, ngw = 0, nev = 0, nw = 0, rounds = 3, ok = 1, c;
    cli_models_t models = {0};
    tern_model_options_t mo = tern_model_default_options();
    unsigned set = 0; /* the search flags given (SP_*), over the model's own defaults */
    tune_t o = {tern_translator_default_options(), tern_search_default_params(), tern_lmbr_default_params(), {0}};
    o.to.workers = 1;
    optind = 1;
    while (ok && (c = getopt_long(argc, argv, "m:s:r:b:t:h", long_opts, NULL)) != -1) {
        switch (c) {
        case 'm': ok = cli_models_add(C, &models, optarg); break;
        case O_ENS_W: ok = cli_models_weights(C, &models, optarg); break;
        case O_ENS_MODE: ok = cli_models_mode(C, &models, optarg); break;
        case 's': src_path = optarg; break;
        case 'r': ref_path = optarg; break;
        case O_EV:
            if (nev == MAXEV) ok = 0;
            else ev[nev++] = optarg;
            break;
        case O_W: ok = parse_list("--lmbr-weights", optarg, w, &nw); break;
        case O_GA: ok = parse_list("--grid-alpha", optarg, grid[0], &ng[0]); break;
        case O_GP: ok = parse_list("--grid-p", optarg, grid[1], &ng[1]); break;
        case O_GR: ok = parse_list("--grid-r", optarg, grid[2], &ng[2]); break;
        case O_GL: ok = parse_list("--grid-lambda", optarg, grid[3], &ng[3]); break;
        case O_GW: ok = parse_list("--grid-weights", optarg, gw, &ngw); break;
        case O_CLIP: o.lm.clip = 1; break;
        case O_SUM: o.lm.sum_gain = 1; break;
        case O_ROUNDS: ok = cli_int(C, "--rounds", optarg, 1, 100, &rounds); break;
        case 'b': ok = cli_int(C, "--beam-size", optarg, 1, 1024, &o.sp.beam_size), set |= SP_BEAM; break;
        case O_PRETOK: mo.use_spm = 0; break;
        case O_LP: ok = cli_float(C, "--length-penalty", optarg, 0, 100, &o.sp.length_penalty), set |= SP_LP; break;
        case 't': ok = cli_int(C, "--threads", optarg, 1, 256, &o.to.threads_per_worker); break;
        case 'h': usage(stdout); return 0;
        default: ok = 0; break;
        }
    }
    if (!ok || models.n == 0 || !src_path || !ref_path || nev == 0 || (nw && nw != nev)) {
        if (ok) fprintf(stderr, "tern lmbr-tune: needs -m, -s, -r and --lmbr-evidence (and as many weights as files)\n");
        fprintf(stderr, "see tern lmbr-tune --help\n");
        return 2;
    }
    o.files.evidence = ev;
    o.files.n_evidence = nev;
    o.lm.num_systems = nev;
    o.lm.weights = nw || ngw ? w : NULL;
    if (!nw)
        for (int k = 0; k < nev; k++) w[k] = 1;
    tern_set_log_level(TERN_LOG_ERROR);
    size_t src_len = 0, ref_len = 0;
    char *src = slurp(src_path, &src_len), *ref = slurp(ref_path, &ref_len);
    if (!src || !ref) {
        fprintf(stderr, "tern lmbr-tune: cannot read '%s'\n", !src ? src_path : ref_path);
        free(src), free(ref);
        return 1;
    }
    int nref = 0;
    char **refs = split_lines(ref, ref_len, &nref);
    tern_model_t *m = NULL;
    if (!refs) {
        fprintf(stderr, "tern lmbr-tune: out of memory\n");
        free(src), free(ref);
        return 1;
    }
    int lrc = cli_models_load(C, &models, &mo, &m);
    if (lrc) {
        free(refs), free(src), free(ref);
        return lrc;
    }
    o.sp = search_params_over(&o.sp, set, tern_model_search_params(m, NULL)); /* as tern translate */
    o.lm.lambda = tern_lmbr_lambda(m, &o.lm);
    tern_status_t st = TERN_OK;
    eval_t *done = NULL;
    int ndone = 0, cap = 0;
    double plain = 0;
    float cur[NV] = {o.lm.alpha, o.lm.p, o.lm.r, o.lm.lambda}, best_v[NV];
    memcpy(cur + 4, w, (size_t)nev * sizeof *w);
    /* coordinates: alpha, p, r, lambda; with --grid-weights the weights of systems 2..nev */
    int ncoord = 4 + (ngw ? nev - 1 : 0);
    double best = -1;
    if (!st) st = evaluate(m, &o, cur, 0, src, src_len, (const char *const *)refs, nref, &plain);
    if (!st) printf("plain beam search (beam %d, length penalty %g): BLEU %.2f\n", o.sp.beam_size, o.sp.length_penalty, plain);
    memcpy(best_v, cur, sizeof cur);
    for (int round = 0; !st && round < rounds; round++) {
        int improved = 0;
        for (int k = -1; !st && k < ncoord; k++) {
            for (int g = 0; !st && g < (k < 0 ? 1 : k < 4 ? ng[k] : ngw); g++) {
                float v[NV];
                memcpy(v, best_v, sizeof v);
                if (k >= 4) v[k + 1] = gw[g];
                else if (k >= 0) v[k] = grid[k][g];
                int seen = -1;
                for (int i = 0; i < ndone; i++)
                    if (!memcmp(done[i].v, v, sizeof v)) seen = i;
                if (seen >= 0) continue;
                double b = 0;
                if ((st = evaluate(m, &o, v, 1, src, src_len, (const char *const *)refs, nref, &b))) break;
                if (ndone == cap) {
                    cap = cap ? 2 * cap : 64;
                    eval_t *d = realloc(done, (size_t)cap * sizeof *d);
                    if (!d) {
                        st = tern_error(TERN_ERR_NOMEM, "out of memory");
                        break;
                    }
                    done = d;
                }
                memcpy(done[ndone].v, v, sizeof v);
                done[ndone++].bleu = b;
                printf("alpha %g p %g r %g lambda %g", v[0], v[1], v[2], v[3]);
                if (o.lm.weights)
                    for (int i = 0; i < nev; i++) printf("%s%g", i ? "," : " weights ", v[4 + i]);
                printf(": BLEU %.2f\n", b);
                fflush(stdout);
                if (b > best) {
                    if (best >= 0) improved = 1;
                    best = b;
                    memcpy(best_v, v, sizeof v);
                }
            }
        }
        if (!improved && round > 0) break;
    }
    int rc = 1;
    if (!st) {
        printf("best: --lmbr-alpha %g --lmbr-p %g --lmbr-r %g --lmbr-lambda %g", best_v[0], best_v[1], best_v[2],
               best_v[3]);
        if (o.lm.weights)
            for (int i = 0; i < nev; i++) printf("%s%g", i ? "," : " --lmbr-weights ", best_v[4 + i]);
        if (o.lm.clip) printf(" --lmbr-clip");
        if (o.lm.sum_gain) printf(" --lmbr-sum-gain");
        printf("  BLEU %.2f (plain %.2f, %+.2f)\n", best, plain, best - plain);
        rc = 0;
    } else cli_fail(C, st);
    free(done), free(refs), free(src), free(ref);
    tern_model_free(m);
    return rc;
}
