/* bench_batching.c — what batching across requests can buy at all, outside the server: the same
 * stream of "requests" (1 to 10 consecutive lines drawn at random from a text file, as
 * bench/bench_serve.py sends them) translated through the C API either one request per
 * tern_translate() call ("alone": what `tern serve --no-cross-batching` decodes) or
 * GROUP sentences' worth of requests per call ("cross": the translator sorts them by length and
 * cuts batches under the token budget, as the server's scheduler does with what is waiting).
 * Same translator, same options (beam, threads, budget). Each round translates the same requests
 * both ways (the order alternating from round to round), so both modes get the same sentences and
 * a shared machine's load falls on both alike.
 *
 *   build/bench/bench_batching -m models/en-de -i ../shared/data/multi30k/test_2016_flickr.en \
 *       [-t 2] [-b 4] [--compute-type auto|float32|int8] [--seconds 30] [--group 352]
 *       [--max-batch-tokens 4096] [--modes alone,cross]
 *
 * Prints one JSON line per mode: sentences, wall seconds, sentences/s, process CPU seconds
 * (user + system, all threads), sentences per CPU second, decoder batches and their mean size
 * (the translator's cut, recomputed from the source token counts); then the ratio cross/alone. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

#include "tern.h"

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static double cpu_now(void) {
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (double)ru.ru_utime.tv_sec + 1e-6 * (double)ru.ru_utime.tv_usec + (double)ru.ru_stime.tv_sec +
           1e-6 * (double)ru.ru_stime.tv_usec;
}

static uint64_t rng_state = 88172645463325252ull;
static int rnd(int n) { /* xorshift64, uniform enough for a bench */
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (int)(rng_state % (uint64_t)n);
}

typedef struct {
    double wall, cpu;
    long sentences, batches, calls;
} tally_t;

static int cmp_desc(const void *a, const void *b) { return *(const int *)b - *(const int *)a; }

/* The translator's cut of one call into batches (translator.c: longest first, segments x longest
 * <= budget). */
static long count_batches(int *ntok, int n, int budget) {
    qsort(ntok, (size_t)n, sizeof *ntok, cmp_desc);
    long batches = 0;
    for (int a = 0; a < n;) {
        int w = ntok[a], b = 0;
        while (a + b < n && (b == 0 || (long)(b + 1) * w <= budget)) b++;
        a += b;
        batches++;
    }
    return batches;
}

int main(int argc, char **argv) {
    const char *model_dir = NULL, *input = NULL, *modes = "alone,cross";
    int threads = 2, beam = 4, group = 352, budget = 4096;
    double seconds = 30;
    tern_model_options_t mo = tern_model_default_options();
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!v) {
            fprintf(stderr, "%s: missing value\n", a);
            return 2;
        }
        i++;
        if (!strcmp(a, "-m")) model_dir = v;
        else if (!strcmp(a, "-i")) input = v;
        else if (!strcmp(a, "-t")) threads = atoi(v);
        else if (!strcmp(a, "-b")) beam = atoi(v);
        else if (!strcmp(a, "--seconds")) seconds = atof(v);
        else if (!strcmp(a, "--group")) group = atoi(v);
        else if (!strcmp(a, "--max-batch-tokens")) budget = atoi(v);
        else if (!strcmp(a, "--modes")) modes = v;
        else if (!strcmp(a, "--compute-type")) {
            if (!strcmp(v, "int8")) mo.compute_type = TERN_COMPUTE_INT8;
            else if (!strcmp(v, "float32")) mo.compute_type = TERN_COMPUTE_FLOAT32;
            else mo.compute_type = TERN_COMPUTE_AUTO;
        } else {
            fprintf(stderr, "unknown option %s\n", a);
            return 2;
        }
    }
    if (!model_dir || !input) {
        fprintf(stderr, "usage: bench_batching -m MODEL -i FILE [options] (see the source's header)\n");
        return 2;
    }
    FILE *f = fopen(input, "r");
    if (!f) {
        perror(input);
        return 1;
    }
    int nl = 0, cap = 1024;
    char **lines = malloc((size_t)cap * sizeof *lines), buf[65536];
    while (fgets(buf, sizeof buf, f)) {
        size_t l = strlen(buf);
        while (l && (buf[l - 1] == '\n' || buf[l - 1] == '\r')) buf[--l] = 0;
        if (!l) continue;
        if (nl == cap) lines = realloc(lines, (size_t)(cap *= 2) * sizeof *lines);
        lines[nl++] = strdup(buf);
    }
    fclose(f);
    if (nl < 11) {
        fprintf(stderr, "%s: fewer than 11 lines\n", input);
        return 1;
    }
    tern_model_t *model = NULL;
    tern_status_t st = tern_model_load(&model, model_dir, &mo);
    if (st) {
        fprintf(stderr, "%s\n", tern_last_error());
        return 1;
    }
    int *ntok_line = malloc((size_t)nl * sizeof(int));
    for (int i = 0; i < nl; i++)
        if ((st = tern_model_source_tokens(model, lines[i], &ntok_line[i]))) {
            fprintf(stderr, "%s\n", tern_last_error());
            return 1;
        }
    tern_search_params_t sp = tern_search_default_params();
    sp.beam_size = beam;
    tern_translator_options_t to = tern_translator_default_options();
    to.search = &sp;
    to.workers = 1;
    to.threads_per_worker = threads;
    to.max_batch_tokens = budget;
    tern_translator_t *tr = NULL;
    if ((st = tern_translator_create(&tr, model, &to))) {
        fprintf(stderr, "%s\n", tern_last_error());
        return 1;
    }
    tern_request_t call = tern_request_default();
    int maxn = group + 10;
    const char **src = malloc((size_t)maxn * sizeof *src);
    int *ntok = malloc((size_t)maxn * sizeof *ntok);
    tern_result_t *res = calloc((size_t)maxn, sizeof *res);
    int do_alone = strstr(modes, "alone") != NULL, do_cross = strstr(modes, "cross") != NULL;
    tally_t t[2] = {{0}};
    /* warm-up: one call of 20 lines (workspaces grow once) */
    for (int k = 0; k < 20; k++) src[k] = lines[k];
    if ((st = (call.sources = src, call.num_sources = 20, tern_translate(tr, &call, res)))) {
        fprintf(stderr, "%s\n", tern_last_error());
        return 1;
    }
    for (int k = 0; k < 20; k++) tern_result_free(&res[k]);
    /* Each round draws requests (1 to 10 consecutive lines each) until GROUP sentences, then
     * translates those same sentences both ways, the order of the two modes alternating from one
     * round to the next; rounds go on until SECONDS of wall time have passed in all. */
    int *req_at = malloc((size_t)maxn * sizeof *req_at), *req_n = malloc((size_t)maxn * sizeof *req_n);
    int *tmp = malloc((size_t)maxn * sizeof *tmp);
    double start = now();
    for (int round = 0; now() - start < seconds; round++) {
        int n = 0, nr = 0;
        do {
            int r = 1 + rnd(10), at = rnd(nl - r);
            req_at[nr] = n, req_n[nr++] = r;
            for (int k = 0; k < r; k++) {
                src[n] = lines[at + k];
                ntok[n] = ntok_line[at + k];
                n++;
            }
        } while (n < group);
        for (int j = 0; j < 2; j++) {
            int mode = (round & 1) ? 1 - j : j;
            if ((mode == 0 && !do_alone) || (mode == 1 && !do_cross)) continue;
            double t0 = now(), c0 = cpu_now();
            for (int q = 0; q < (mode == 0 ? nr : 1); q++) {
                int a = mode == 0 ? req_at[q] : 0, m = mode == 0 ? req_n[q] : n;
                if ((st = (call.sources = src + a, call.num_sources = m, tern_translate(tr, &call, res)))) {
                    fprintf(stderr, "%s\n", tern_last_error());
                    return 1;
                }
                for (int k = 0; k < m; k++) tern_result_free(&res[k]);
                memcpy(tmp, ntok + a, (size_t)m * sizeof *tmp);
                t[mode].batches += count_batches(tmp, m, budget);
                t[mode].calls++;
            }
            t[mode].wall += now() - t0;
            t[mode].cpu += cpu_now() - c0;
            t[mode].sentences += n;
        }
    }
    free(req_at), free(req_n), free(tmp);
    const char *name[2] = {"alone", "cross"};
    for (int mode = 0; mode < 2; mode++) {
        if (!t[mode].calls) continue;
        printf("{\"mode\": \"%s\", \"threads\": %d, \"beam\": %d, \"sentences\": %ld, \"wall_s\": %.2f, "
               "\"sentences_per_s\": %.1f, \"cpu_s\": %.2f, \"sentences_per_cpu_s\": %.1f, \"batches\": %ld, "
               "\"mean_batch\": %.1f}\n",
               name[mode], threads, beam, t[mode].sentences, t[mode].wall, t[mode].sentences / t[mode].wall,
               t[mode].cpu, t[mode].sentences / t[mode].cpu, t[mode].batches,
               (double)t[mode].sentences / (double)t[mode].batches);
    }
    if (t[0].calls && t[1].calls)
        printf("ratio cross/alone: %.2fx wall, %.2fx per CPU second\n",
               (t[1].sentences / t[1].wall) / (t[0].sentences / t[0].wall),
               (t[1].sentences / t[1].cpu) / (t[0].sentences / t[0].cpu));
    tern_translator_free(tr);
    tern_model_free(model);
    for (int i = 0; i < nl; i++) free(lines[i]);
    free(lines), free(ntok_line), free(src), free(ntok), free(res);
    return 0;
}
