/* cmd_mbr.c — `tern mbr`: minimum Bayes-risk reranking of n-best lists (src/search/mbr.h). */
#include <getopt.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "search/mbr.h"
#include "search/nbest.h"

static void usage(FILE *f) {
    fprintf(f,
"usage: tern mbr [options] NBEST [NBEST2 ...]\n"
"\n"
"Chooses from each sentence's n-best list the hypothesis with the highest expected utility\n"
"against the others, E[U(h, e)] = sum_e p(e) U(h, e), with posteriors p(e) ~ exp(alpha * score)\n"
"within each file and, with several files (systems), their union weighted per file. Prints one line\n"
"per sentence (0 .. the highest index, or --lines N), empty where a sentence has no hypothesis.\n"
"N-best formats: 'i ||| hypothesis ||| score' (tern translate -n), Moses' 'i ||| hypothesis |||\n"
"features ||| score', or one hypothesis per line.\n"
"\n"
"  --metric NAME               bleu (sacrebleu.sentence_bleu, default) or chrf (sentence chrF2)\n"
"  --alpha A                   posterior sharpness (default 1)\n"
"  --weights W1,W2,...         per-file weights (default: all 1)\n"
"  --lines N                   number of sentences (the input's lines): a sentence without\n"
"                              hypotheses gives an empty line and a warning naming the file\n"
"  --scores                    print 'i ||| hypothesis ||| expected utility'\n"
"  -o, --output FILE           output file (default stdout)\n"
"  -h, --help                  this help\n");
}

enum { O_METRIC = 1000, O_ALPHA, O_WEIGHTS, O_LINES, O_SCORES };

static const struct option long_opts[] = {
    {"metric", required_argument, 0, O_METRIC}, {"alpha", required_argument, 0, O_ALPHA},
    {"weights", required_argument, 0, O_WEIGHTS}, {"lines", required_argument, 0, O_LINES},
    {"scores", no_argument, 0, O_SCORES},        {"output", required_argument, 0, 'o'},
    {"help", no_argument, 0, 'h'},               {0, 0, 0, 0},
};

int cmd_mbr(int argc, char **argv) {
    const char *C = "mbr", *out_path = NULL;
    mbr_metric_t metric = MBR_BLEU;
    float alpha = 1.0f, weights[64];
    int nw = 0, lines = -1, scores = 0, ok = 1, c;
    optind = 1;
    while (ok && (c = getopt_long(argc, argv, "o:h", long_opts, NULL)) != -1) {
        switch (c) {
        case O_METRIC:
            if (!strcmp(optarg, "bleu")) metric = MBR_BLEU;
            else if (!strcmp(optarg, "chrf")) metric = MBR_CHRF;
            else {
                fprintf(stderr, "tern mbr: --metric is bleu or chrf, got '%s'\n", optarg);
                ok = 0;
            }
            break;
        case O_ALPHA: ok = cli_float(C, "--alpha", optarg, 0, 1e6f, &alpha); break;
        case O_WEIGHTS:
            for (char *p = optarg, *q; ok && *p; p = *q ? q + 1 : q) {
                q = p + strcspn(p, ",");
                char tmp[64];
                snprintf(tmp, sizeof tmp, "%.*s", (int)(q - p), p);
                if (nw == 64) ok = 0;
                else ok = cli_float(C, "--weights", tmp, 0, 1e6f, &weights[nw++]);
            }
            break;
        case O_LINES: ok = cli_int(C, "--lines", optarg, 0, 1 << 28, &lines); break;
        case O_SCORES: scores = 1; break;
        case 'o': out_path = optarg; break;
        case 'h': usage(stdout); return 0;
        default: ok = 0; break;
        }
    }
    int F = argc - optind;
    if (!ok || F < 1 || F > 64 || (nw && nw != F)) {
        if (ok && F < 1) fprintf(stderr, "tern mbr: no n-best file\n");
        if (ok && nw && nw != F) fprintf(stderr, "tern mbr: --weights has %d values for %d files\n", nw, F);
        fprintf(stderr, "see tern mbr --help\n");
        return 2;
    }
    nbest_file_t *nb = calloc((size_t)F, sizeof *nb);
    if (!nb) return 1;
    int rc = 1, N = 0;
    tern_status_t st = TERN_OK;
    for (int f = 0; f < F; f++) {
        if ((st = nbest_read(&nb[f], argv[optind + f]))) {
            F = f;
            goto done;
        }
        if (nb[f].n > N) N = nb[f].n;
    }
    if (lines >= 0) {
        for (int f = 0; f < F; f++)
            if (nb[f].n > lines)
                fprintf(stderr, "tern mbr: warning: %s: hypotheses for sentence %d, but --lines is %d: ignored\n",
                        nb[f].path, nb[f].n - 1, lines);
        N = lines;
    }
    FILE *out = cli_open(C, out_path, "w");
    if (!out) goto done;
    mbr_workspace_t *ws = mbr_workspace_new();
    const char **texts = NULL;
    double *post = NULL, *util = NULL;
    int cap = 0;
    for (int i = 0; i < N && ws; i++) {
        int K = 0;
        for (int f = 0; f < F; f++) K += i < nb[f].n ? nb[f].sent[i].K : 0;
        if (K > cap) {
            cap = K;
            free(texts), free(post), free(util);
            texts = malloc((size_t)cap * sizeof *texts);
            post = malloc((size_t)cap * sizeof *post);
            util = malloc((size_t)cap * sizeof *util);
            if (!texts || !post || !util) {
                st = tern_error(TERN_ERR_NOMEM, "out of memory");
                break;
            }
        }
        /* posteriors: softmax(alpha * score) per file, weighted over the files with hypotheses;
         * identical texts merge */
        double wsum = 0;
        for (int f = 0; f < F; f++)
            if (i < nb[f].n && nb[f].sent[i].K) wsum += nw ? weights[f] : 1.0;
            else fprintf(stderr, "tern mbr: warning: %s: no hypothesis for sentence %d\n", nb[f].path, i);
        int k = 0;
        for (int f = 0; f < F; f++) {
            if (i >= nb[f].n || !nb[f].sent[i].K || wsum <= 0) continue;
            const nbest_sent_t *s = &nb[f].sent[i];
            double mx = -INFINITY, z = 0;
            for (int e = 0; e < s->K; e++) mx = fmax(mx, (double)alpha * s->score[e]);
            for (int e = 0; e < s->K; e++) z += exp((double)alpha * s->score[e] - mx);
            for (int e = 0; e < s->K; e++) {
                double p = (nw ? weights[f] : 1.0) / wsum * exp((double)alpha * s->score[e] - mx) / z;
                int j = 0;
                while (j < k && strcmp(texts[j], s->text[e])) j++;
                if (j < k) post[j] += p;
                else texts[k] = s->text[e], post[k++] = p;
            }
        }
        int best = -1;
        if (k && (st = mbr_choose(ws, texts, post, k, metric, util, &best))) {
            tern_error_prefix(st, "sentence %d", i);
            break;
        }
        int w;
        if (scores) w = fprintf(out, "%d ||| %s ||| %.6f\n", i, best >= 0 ? texts[best] : "", best >= 0 ? util[best] : 0.0);
        else w = fprintf(out, "%s\n", best >= 0 ? texts[best] : "");
        if (w < 0) {
            st = tern_error(TERN_ERR_IO, "cannot write the output");
            break;
        }
    }
    if (!ws) st = tern_error(TERN_ERR_NOMEM, "out of memory");
    free(texts), free(post), free(util);
    mbr_workspace_free(ws);
    if (!st && out != stdout && fclose(out) != 0) st = tern_error(TERN_ERR_IO, "cannot write '%s'", out_path);
    else if (out == stdout) fflush(stdout);
    if (!st) rc = 0;
done:
    if (st) cli_fail(C, st);
    for (int f = 0; f < F; f++) nbest_free(&nb[f]);
    free(nb);
    return rc;
}
