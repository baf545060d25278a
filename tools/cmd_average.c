/* cmd_average.c — `tern average`: averages the parameters of checkpoints (or any Tern-format
 * model directories of one shape) into a model directory (src/train/checkpoint.h). */
#include <getopt.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "train/checkpoint.h"

static void usage(FILE *f) {
    fprintf(f,
"usage: tern average -o OUT CHECKPOINT_DIR...\n"
"       tern average -o OUT --last K SAVE_DIR\n"
"\n"
"Averages the parameters of model directories (training checkpoints, or Tern-format models of\n"
"the same shape) into OUT, a model directory that `tern translate -m OUT` loads: each float\n"
"tensor becomes the mean of the inputs' (accumulated in float64, written as float32); the spec\n"
"scalars must agree; config.json, vocabularies and SentencePiece models come from the first\n"
"input. OUT is written whole under a temporary name and then renamed (an existing OUT is\n"
"replaced). Quantized (int8) models cannot be averaged: average, then `tern convert`-quantize.\n"
"\n"
"  -o, --output OUT    the averaged model directory\n"
"  --last K            average the K newest checkpoints (checkpoint-N directories) of SAVE_DIR\n"
"  -h, --help          this help\n");
}

enum { O_LAST = 1000 };
static const struct option long_opts[] = {
    {"output", required_argument, 0, 'o'},
    {"last", required_argument, 0, O_LAST},
    {"help", no_argument, 0, 'h'},
    {0, 0, 0, 0},
};

int cmd_average(int argc, char **argv) {
    const char *C = "average", *out = NULL;
    int last = 0, ok = 1, c;
    optind = 1;
    while (ok && (c = getopt_long(argc, argv, "o:h", long_opts, NULL)) != -1) {
        switch (c) {
        case 'o': out = optarg; break;
        case O_LAST: ok = cli_int(C, "--last", optarg, 1, 1000000, &last); break;
        case 'h': usage(stdout); return 0;
        default: ok = 0; break;
        }
    }
    int n = argc - optind;
    if (!ok || !out || n < 1 || (last && n != 1)) {
        if (ok && last && n != 1) fprintf(stderr, "tern average: --last K takes one save directory\n");
        usage(stderr);
        return 2;
    }
    const char **dirs = NULL;
    char **owned = NULL;
    tern_status_t st = TERN_OK;
    if (last) {
        int64_t *u;
        int k;
        if ((st = ckpt_list(argv[optind], &u, &k))) return cli_fail(C, st);
        if (k < last) {
            fprintf(stderr, "tern average: %s holds %d checkpoint(s), fewer than --last %d\n", argv[optind], k, last);
            free(u);
            return 1;
        }
        n = last;
        dirs = calloc((size_t)n, sizeof *dirs);
        owned = calloc((size_t)n, sizeof *owned);
        for (int i = 0; dirs && owned && i < n; i++) {
            if (!(owned[i] = malloc(4096))) break;
            ckpt_path(owned[i], 4096, argv[optind], u[k - n + i]);
            dirs[i] = owned[i];
        }
        free(u);
        if (!dirs || !owned || !owned[n - 1]) st = tern_error(TERN_ERR_NOMEM, "out of memory");
    } else {
        dirs = (const char **)(argv + optind);
    }
    if (!st) st = ckpt_average(out, dirs, n);
    if (!st) {
        fprintf(stderr, "tern average: %d model(s) -> %s:", n, out);
        for (int i = 0; i < n; i++) fprintf(stderr, " %s", dirs[i]);
        fputc('\n', stderr);
    }
    if (owned) {
        for (int i = 0; i < n; i++) free(owned[i]);
        free(owned);
        free(dirs);
    }
    return st ? cli_fail(C, st) : 0;
}
