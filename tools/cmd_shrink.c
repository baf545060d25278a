/* cmd_shrink.c — `tern shrink`: unfolds an ensemble of GRU models into one model and shrinks it
 * data-free (src/train/shrink.h, docs/shrink.md). */
#include <getopt.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "train/shrink.h"

static void usage(FILE *f) {
    fprintf(f,
"usage: tern shrink -m MODEL_A -m MODEL_B [-m MODEL_C ...] [--size S] [--ensemble-weights W1,W2,..] -o OUT\n"
"\n"
"Unfolds an ensemble of GRU models (architecture rnn-gru, one shape, one vocabulary, not\n"
"layer-normalized, float32) into one wide model that computes what the ensemble computes with\n"
"--ensemble-mode logit-mean (the softmax of the members' weighted mean logits): every layer is the\n"
"concatenation of the members' (block-diagonal weights), each member's attention one head of the\n"
"unfolded model (rnn/attention_heads = K). Then shrinks it data-free (Stahlberg & Byrne 2017): in\n"
"the encoder and decoder GRU layers, the attention and the deep output, the neurons whose incoming\n"
"weights the remaining neurons' reconstruct best (least squares) are removed and their outgoing\n"
"weights folded into those neurons', down to S of the unfolded width. Embeddings keep their width.\n"
"OUT is a model directory that `tern translate -m OUT` loads (config and vocabularies: the first\n"
"member's). See docs/shrink.md.\n"
"\n"
"  -m, --model DIR            an ensemble member (a Tern model directory); two or more\n"
"  -o, --output OUT           the model directory written\n"
"  --size S                   the width kept: a fraction in (0, 1] or a percentage (50%%); 1/K keeps\n"
"                             a member's width (default 1: the unfolded model, unchanged)\n"
"  --ensemble-weights W1,..   one positive weight per -m (normalized to sum 1; default equal)\n"
"  -h, --help                 this help\n");
}

enum { O_SIZE = 1000, O_WEIGHTS };
static const struct option long_opts[] = {
    {"model", required_argument, 0, 'm'},
    {"output", required_argument, 0, 'o'},
    {"size", required_argument, 0, O_SIZE},
    {"ensemble-weights", required_argument, 0, O_WEIGHTS},
    {"help", no_argument, 0, 'h'},
    {0, 0, 0, 0},
};

/* S as a fraction: "0.5", "50%" or "1/3". */
static int parse_size(const char *s, double *out) {
    char *end;
    double v = strtod(s, &end);
    if (end == s) return 0;
    if (*end == '%') v /= 100.0, end++;
    else if (*end == '/') {
        char *e2;
        double q = strtod(end + 1, &e2);
        if (e2 == end + 1 || !(q > 0)) return 0;
        v /= q, end = e2;
    }
    if (*end || !(v > 0 && v <= 1)) return 0;
    *out = v;
    return 1;
}

int cmd_shrink(int argc, char **argv) {
    const char *C = "shrink", *out = NULL, *wstr = NULL;
    const char *models[64];
    int K = 0, ok = 1, c;
    shrink_options_t opt = {.size = 1.0, .weights = NULL};
    optind = 1;
    while (ok && (c = getopt_long(argc, argv, "m:o:h", long_opts, NULL)) != -1) {
        switch (c) {
        case 'm':
            if (K == 64) {
                fprintf(stderr, "tern shrink: at most 64 members\n");
                return 2;
            }
            models[K++] = optarg;
            break;
        case 'o': out = optarg; break;
        case O_SIZE:
            if (!parse_size(optarg, &opt.size)) {
                fprintf(stderr, "tern shrink: --size '%s' is not a fraction in (0, 1] (0.5, 50%%, 1/3)\n", optarg);
                return 2;
            }
            break;
        case O_WEIGHTS: wstr = optarg; break;
        case 'h': usage(stdout); return 0;
        default: ok = 0; break;
        }
    }
    if (!ok || !out || K < 1 || optind != argc) {
        if (ok && optind != argc) fprintf(stderr, "tern shrink: unexpected argument '%s'\n", argv[optind]);
        usage(stderr);
        return 2;
    }
    float w[64];
    if (wstr) {
        int n = 0;
        const char *p = wstr;
        while (*p) {
            char *end;
            double v = strtod(p, &end);
            if (end == p || !(v > 0) || n == 64 || (*end && *end != ',')) {
                fprintf(stderr, "tern shrink: --ensemble-weights '%s': positive numbers separated by commas\n", wstr);
                return 2;
            }
            w[n++] = (float)v;
            p = *end ? end + 1 : end;
        }
        if (n != K) {
            fprintf(stderr, "tern shrink: --ensemble-weights has %d weights for %d models\n", n, K);
            return 2;
        }
        opt.weights = w;
    }
    char info[512];
    tern_status_t st = shrink_ensemble(out, models, K, &opt, info, sizeof info);
    if (st) return cli_fail(C, st);
    fprintf(stderr, "tern shrink: %s -> %s\n", info, out);
    return 0;
}
