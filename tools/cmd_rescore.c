/* cmd_rescore.c — `tern rescore`: force decoding. For each (source, target) line pair, prints the
 * log-probability of every target token and of the final end of sentence, then their sum. */
#include <getopt.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>

#include "cli.h"

static void usage(FILE *f) {
    fprintf(f,
"usage: tern rescore -m MODEL [-m MODEL ...] -s SOURCE --target TARGET [options] [OUTPUT]\n"
"\n"
"Force decoding: for each line pair prints one line\n"
"  \"LP_1 LP_2 ... LP_n LP_eos ||| TOTAL\"\n"
"the natural-log probability of each target token given the source and the previous target\n"
"tokens (as CTranslate2's score_batch), the end of sentence last, and their sum. An empty source\n"
"line gives \" ||| 0\". The two files must have the same number of lines. With several models\n"
"(an ensemble) each token's score is the members' combination (--ensemble-mode).\n"
"\n"
CLI_MODELS_HELP
"  -s, --source FILE           source sentences\n"
"  --target FILE               target sentences to score\n"
"  --compute-type TYPE         auto (default), float32, int8\n"
"  --pretokenized              both files hold space-separated vocabulary pieces\n"
"  --source-lang CODE, --target-lang CODE   a multilingual model's (M2M-100, NLLB) languages: the\n"
"                              source's code first in the source, the target's before the\n"
"                              target (its log-probability is not printed)\n"
"  --source-spm FILE, --target-spm FILE   SentencePiece models (default: found in DIR)\n"
"  --batch-size N              sentence pairs scored together (default 32)\n"
"  -t, --threads N             intra-op threads (default: all cores)\n"
"  -h, --help                  this help\n");
}

enum { O_TARGET = 1000, O_COMPUTE, O_PRETOK, O_SRC_SPM, O_TGT_SPM, O_BS, O_ENS_W, O_ENS_MODE, O_SRC_LANG, O_TGT_LANG };
static const struct option long_opts[] = {
    {"model", required_argument, 0, 'm'},       {"source", required_argument, 0, 's'},
    {"target", required_argument, 0, O_TARGET}, {"compute-type", required_argument, 0, O_COMPUTE},
    {"pretokenized", no_argument, 0, O_PRETOK}, {"source-spm", required_argument, 0, O_SRC_SPM},
    {"target-spm", required_argument, 0, O_TGT_SPM}, {"batch-size", required_argument, 0, O_BS},
    {"threads", required_argument, 0, 't'},     {"help", no_argument, 0, 'h'},
    {"ensemble-weights", required_argument, 0, O_ENS_W}, {"ensemble-mode", required_argument, 0, O_ENS_MODE},
    {"source-lang", required_argument, 0, O_SRC_LANG}, {"target-lang", required_argument, 0, O_TGT_LANG},
    {0, 0, 0, 0},
};

/* Reads one line without its end-of-line; returns -1 at EOF. */
static ssize_t read_line(char **buf, size_t *cap, FILE *f) {
    ssize_t r = getline(buf, cap, f);
    if (r < 0) return -1;
    while (r > 0 && ((*buf)[r - 1] == '\n' || (*buf)[r - 1] == '\r')) (*buf)[--r] = 0;
    return r;
}

int cmd_rescore(int argc, char **argv) {
    const char *C = "rescore";
    const char *src_path = NULL, *tgt_path = NULL, *src_lang = NULL, *tgt_lang = NULL;
    cli_models_t models = {0};
    tern_model_options_t mo = tern_model_default_options();
    tern_translator_options_t o = tern_translator_default_options();
    o.workers = 1;
    int batch = 32, ok = 1, c;
    optind = 1;
    while (ok && (c = getopt_long(argc, argv, "m:s:t:h", long_opts, NULL)) != -1) {
        switch (c) {
        case 'm': ok = cli_models_add(C, &models, optarg); break;
        case O_ENS_W: ok = cli_models_weights(C, &models, optarg); break;
        case O_ENS_MODE: ok = cli_models_mode(C, &models, optarg); break;
        case 's': src_path = optarg; break;
        case O_TARGET: tgt_path = optarg; break;
        case O_COMPUTE:
            if (!strcmp(optarg, "auto") || !strcmp(optarg, "default")) mo.compute_type = TERN_COMPUTE_AUTO;
            else if (!strcmp(optarg, "float32")) mo.compute_type = TERN_COMPUTE_FLOAT32;
            else if (!strcmp(optarg, "int8")) mo.compute_type = TERN_COMPUTE_INT8;
            else {
                fprintf(stderr, "tern rescore: --compute-type is auto, float32 or int8, got '%s'\n", optarg);
                ok = 0;
            }
            break;
        case O_PRETOK: mo.use_spm = 0; break;
        case O_SRC_LANG: src_lang = optarg; break;
        case O_TGT_LANG: tgt_lang = optarg; break;
        case O_SRC_SPM: mo.source_spm = optarg; break;
        case O_TGT_SPM: mo.target_spm = optarg; break;
        case O_BS: ok = cli_int(C, "--batch-size", optarg, 1, 1 << 16, &batch); break;
        case 't': ok = cli_int(C, "--threads", optarg, 1, 256, &o.threads_per_worker); break;
        case 'h': usage(stdout); return 0;
        default: ok = 0; break;
        }
    }
    if (!ok) {
        fprintf(stderr, "see tern rescore --help\n");
        return 2;
    }
    if (!models.n || !src_path || !tgt_path || argc - optind > 1) {
        fprintf(stderr, "tern rescore: needs -m MODEL -s SOURCE --target TARGET [OUTPUT]; see --help\n");
        return 2;
    }
    tern_model_t *model = NULL;
    tern_translator_t *tr = NULL;
    FILE *fs = NULL, *ft = NULL, *out = NULL;
    char **srcs = calloc((size_t)batch, sizeof(char *)), **tgts = calloc((size_t)batch, sizeof(char *));
    size_t *scap = calloc((size_t)batch, sizeof(size_t)), *tcap = calloc((size_t)batch, sizeof(size_t));
    float **lp = calloc((size_t)batch, sizeof(float *));
    int *cnt = calloc((size_t)batch, sizeof(int));
    int rc = 1;
    tern_status_t st;
    if (!srcs || !tgts || !scap || !tcap || !lp || !cnt) {
        fprintf(stderr, "tern rescore: out of memory\n");
        goto done;
    }
    if ((rc = cli_models_load(C, &models, &mo, &model))) goto done;
    rc = 1;
    if ((st = tern_translator_create(&tr, model, &o))) {
        cli_fail(C, st);
        goto done;
    }
    if (!(fs = cli_open(C, src_path, "r")) || !(ft = cli_open(C, tgt_path, "r")) ||
        !(out = cli_open(C, optind < argc ? argv[optind] : NULL, "w")))
        goto done;
    long line = 0;
    for (;;) {
        int n = 0, eof_s = 0, eof_t = 0;
        while (n < batch) {
            eof_s = read_line(&srcs[n], &scap[n], fs) < 0;
            eof_t = read_line(&tgts[n], &tcap[n], ft) < 0;
            if (eof_s || eof_t) break;
            n++;
        }
        if (eof_s != eof_t) {
            long ns = line + n + (eof_s ? 0 : 1), nt = line + n + (eof_t ? 0 : 1);
            while (!eof_s && read_line(&srcs[0], &scap[0], fs) >= 0) ns++;
            while (!eof_t && read_line(&tgts[0], &tcap[0], ft) >= 0) nt++;
            fprintf(stderr, "tern rescore: %s has %ld lines but %s has %ld\n", src_path, ns, tgt_path, nt);
            goto done;
        }
        if (n > 0) {
            tern_request_t req = tern_request_default();
            req.sources = (const char *const *)srcs;
            req.targets = (const char *const *)tgts;
            req.num_sources = n;
            req.source_lang = src_lang;
            req.target_lang = tgt_lang;
            if ((st = tern_score(tr, &req, lp, cnt))) {
                fprintf(stderr, "tern rescore: lines %ld-%ld: %s: %s\n", line + 1, line + n, tern_status_string(st),
                        tern_last_error());
                goto done;
            }
            for (int i = 0; i < n; i++) {
                double total = 0;
                for (int k = 0; k < cnt[i]; k++) {
                    fprintf(out, k ? " %.6f" : "%.6f", lp[i][k]);
                    total += lp[i][k];
                }
                fprintf(out, " ||| %.6f\n", total);
                free(lp[i]);
                lp[i] = NULL;
            }
            line += n;
        }
        if (eof_s) break;
    }
    if (fflush(out) != 0 || ferror(out)) {
        fprintf(stderr, "tern rescore: cannot write the output\n");
        goto done;
    }
    rc = 0;
done:
    for (int i = 0; i < batch && srcs; i++) free(srcs[i]), free(tgts[i]), free(lp[i]);
    free(srcs), free(tgts), free(scap), free(tcap), free(lp), free(cnt);
    cli_close(fs), cli_close(ft), cli_close(out);
    tern_translator_free(tr);
    tern_model_free(model);
    return rc;
}
