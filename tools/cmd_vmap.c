/* cmd_vmap.c — `tern vmap`: builds a vocabulary map (target vocabulary reduction) for a model from
 * a parallel corpus. */
#include <getopt.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

static void usage(FILE *f) {
    fprintf(f,
"usage: tern vmap -m MODEL --source FILE --target FILE -o VMAP [options]\n"
"\n"
"Builds a vocabulary map for target vocabulary reduction (CTranslate2 paper, section 3.7): the\n"
"corpus is split into the model's pieces and aligned (IBM Model 2 with fast_align's diagonal\n"
"prior, trained by EM), then for every source n-gram (n <= --max-ngram) the --top-n target pieces\n"
"most often aligned to it are kept, plus the --top-k most frequent target pieces, which are always\n"
"candidates. The file is CTranslate2's vmap format (\"n-gram<TAB>pieces\" lines): `tern translate\n"
"--vmap FILE` uses it, and so does CTranslate2's use_vmap when it is saved as vmap.txt in a\n"
"CTranslate2 model directory.\n"
"\n"
"  -m, --model DIR          model whose SentencePiece models and vocabularies split the corpus\n"
"                           (or an installed model's name, as tern translate -m)\n"
"  --source FILE            source side of the parallel corpus (one sentence a line)\n"
"  --target FILE            target side (same number of lines)\n"
"  -o, --output FILE        the map to write\n"
"  --max-ngram N            longest source n-gram, 1..3 (default 3)\n"
"  --top-n N                target pieces per source n-gram, 1..256 (default 20)\n"
"  --top-k N                most frequent target pieces always kept (default 200)\n"
"  --min-count N            n-grams of 2+ pieces seen in fewer sentence pairs get no rule (default 2)\n"
"  --iterations N           EM iterations of the aligner (default 5)\n"
"  --tension X              aligner's pull towards the diagonal, 0 = IBM Model 1 (default 4)\n"
"  --max-pairs N            use the first N sentence pairs only (default: all)\n"
"  --pretokenized           the files hold space-separated vocabulary pieces\n"
"  -q, --quiet              no summary line\n"
"  -h, --help               this help\n");
}

enum { O_SRC = 1000, O_TGT, O_NG, O_TOPN, O_TOPK, O_MINC, O_IT, O_TENSION, O_MAXP, O_PRETOK };
static const struct option long_opts[] = {
    {"model", required_argument, 0, 'm'},       {"source", required_argument, 0, O_SRC},
    {"target", required_argument, 0, O_TGT},    {"output", required_argument, 0, 'o'},
    {"max-ngram", required_argument, 0, O_NG},  {"top-n", required_argument, 0, O_TOPN},
    {"top-k", required_argument, 0, O_TOPK},    {"min-count", required_argument, 0, O_MINC},
    {"iterations", required_argument, 0, O_IT}, {"tension", required_argument, 0, O_TENSION},
    {"max-pairs", required_argument, 0, O_MAXP}, {"pretokenized", no_argument, 0, O_PRETOK},
    {"quiet", no_argument, 0, 'q'},             {"help", no_argument, 0, 'h'},
    {0, 0, 0, 0},
};

static void report_line(const char *line, void *user_data) {
    (void)user_data;
    fprintf(stderr, "%s\n", line);
}

int cmd_vmap(int argc, char **argv) {
    const char *C = "vmap", *model_dir = NULL, *src = NULL, *tgt = NULL, *out = NULL;
    tern_vmap_options_t o = tern_vmap_default_options();
    tern_model_options_t mo = tern_model_default_options();
    int ok = 1, quiet = 0, c, maxp = 0;
    optind = 1;
    while (ok && (c = getopt_long(argc, argv, "m:o:qh", long_opts, NULL)) != -1) {
        switch (c) {
        case 'm': model_dir = optarg; break;
        case O_SRC: src = optarg; break;
        case O_TGT: tgt = optarg; break;
        case 'o': out = optarg; break;
        case O_NG: ok = cli_int(C, "--max-ngram", optarg, 1, 3, &o.max_ngram); break;
        case O_TOPN: ok = cli_int(C, "--top-n", optarg, 1, 256, &o.top_n); break;
        case O_TOPK: ok = cli_int(C, "--top-k", optarg, 0, 1 << 21, &o.top_k); break;
        case O_MINC: ok = cli_int(C, "--min-count", optarg, 1, 1 << 30, &o.min_count); break;
        case O_IT: ok = cli_int(C, "--iterations", optarg, 1, 1000, &o.iterations); break;
        case O_TENSION: ok = cli_float(C, "--tension", optarg, 0, 1000, &o.tension); break;
        case O_MAXP: ok = cli_int(C, "--max-pairs", optarg, 1, 1 << 30, &maxp); break;
        case O_PRETOK: mo.use_spm = 0; break;
        case 'q': quiet = 1; break;
        case 'h': usage(stdout); return 0;
        default: ok = 0; break;
        }
    }
    if (ok && (!model_dir || !src || !tgt || !out || optind != argc)) {
        fprintf(stderr, "tern vmap: needs -m MODEL, --source FILE, --target FILE and -o VMAP (and nothing else)\n");
        ok = 0;
    }
    if (!ok) {
        usage(stderr);
        return 2;
    }
    o.max_pairs = maxp;
    char dir_buf[4096];
    if (!(model_dir = cli_model_dir(C, model_dir, dir_buf, sizeof dir_buf))) return 1;
    tern_model_t *m = NULL;
    tern_status_t st = tern_model_load(&m, model_dir, &mo);
    if (st) return cli_fail(C, st);
    st = tern_vmap_build(m, src, tgt, out, &o, quiet ? NULL : report_line, NULL);
    tern_model_free(m);
    return st ? cli_fail(C, st) : 0;
}
