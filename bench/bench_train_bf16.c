/* bench_train_bf16.c — training speed in float32 vs bfloat16 (--precision), interleaved in one
 * run, and the linear layers alone (float32 nn_linear vs bfloat16 lowp_linear, forward and
 * backward) on the model's shapes.
 *
 *   build/bench/bench_train_bf16 [-t THREADS] [--layers L] [--d C] [--ff F] [--heads H]
 *       [--vocab V] [--tokens N] [--len L] [--updates U] [--rounds R] [--layers-only]
 *
 * A training update: forward + backward of one batch of B = tokens / len sentences, source and
 * target padded to len (real lengths len/2..len, seeded), then Adam; the bfloat16 model remakes
 * its bfloat16 weight copy once per update. Rounds alternate float32 and bfloat16 (U updates
 * each, after one warm-up update), so that load on a shared machine hits both alike; the report
 * is tokens/s (target tokens) per round, the median of each, and the median of the per-round
 * ratios bf16 / f32. Default: the Multi30k recipe's model (4+4 layers, d 128, ff 512, 4 heads,
 * vocabulary 8000, dropout 0.3) at 4096 tokens, len 24. */
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kernels/gemm_bf16.h"
#include "nn/layers.h"
#include "nn/lowp.h"
#include "train/model.h"
#include "train/optim.h"

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static int cmp_d(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}
static double median(double *x, int n) {
    qsort(x, (size_t)n, sizeof *x, cmp_d);
    return n % 2 ? x[n / 2] : 0.5 * (x[n / 2 - 1] + x[n / 2]);
}

typedef struct {
    tmodel_t m;
    tmodel_ws_t *ws;
    adam_t adam;
} run_t;

static void die(tern_status_t st) {
    if (st) {
        fprintf(stderr, "bench_train_bf16: %s\n", tern_last_error());
        exit(1);
    }
}

/* One update; returns the loss per token. */
static double update(run_t *r, const int *src, const int *tin, const int *tout, int B, int L, uint64_t step) {
    tmodel_loss_t loss;
    tmodel_zero_grad(&r->m);
    die(tmodel_forward(&r->m, r->ws, src, tin, tout, B, L, L, 1, 1, step, &loss));
    die(tmodel_backward(&r->m, r->ws, 1.0f / (float)loss.ntokens));
    adam_step(&r->adam, r->m.params, r->m.grads, 1e-4f);
    tmodel_params_changed(&r->m);
    return loss.loss / loss.ntokens;
}

/* The linear layers alone: seconds per forward and per backward, float32 and bfloat16. */
static void layers_only(int M, int C, int F, int V, int reps) {
    struct { const char *name; int K, N; } sh[] = {
        {"qkv", C, 3 * C}, {"out", C, C}, {"kv", C, 2 * C}, {"fc1", C, F}, {"fc2", F, C}, {"proj", C, V}};
    size_t big = (size_t)M * (size_t)(V > F ? V : F) + (size_t)M * 3 * C;
    float *x = aligned_alloc64(big * 4), *y = aligned_alloc64(big * 4), *dx = aligned_alloc64(big * 4);
    float *w = aligned_alloc64((size_t)V * C * 4 + (size_t)F * C * 4), *dw = aligned_alloc64((size_t)V * C * 4 + (size_t)F * C * 4);
    bf16_t *w16 = aligned_alloc64(((size_t)V * C + (size_t)F * C) * 2);
    for (size_t i = 0; i < big; i++) x[i] = (float)((i * 2654435761u) % 1000) / 1000.0f - 0.5f, y[i] = x[i] * 0.1f;
    for (size_t i = 0; i < (size_t)V * C + (size_t)F * C; i++) w[i] = (float)((i * 40503u) % 1000) / 5000.0f - 0.1f;
    lowp_ws_t lw;
    die(lowp_ws_init(&lw, big, big));
    printf("linear layers alone, M = %d rows, %d thread(s): ms per call (f32 / bf16 = speed-up)\n", M,
           omp_get_max_threads());
    printf("  %-5s %5s %5s | %8s %8s %6s | %8s %8s %6s\n", "layer", "K", "N", "fwd f32", "fwd bf16", "x", "bwd f32",
           "bwd bf16", "x");
    for (size_t s = 0; s < sizeof sh / sizeof sh[0]; s++) {
        int K = sh[s].K, N = sh[s].N;
        bf16_from_f32(w16, w, (size_t)N * K);
        double t[4] = {1e9, 1e9, 1e9, 1e9};
        for (int r = 0; r < reps; r++) { /* interleaved, best of reps */
            double t0 = now();
            nn_linear_forward(y, x, w, NULL, M, K, N);
            double t1 = now();
            lowp_linear_forward(&lw, y, x, w16, NULL, M, K, N);
            double t2 = now();
            nn_linear_backward(dx, dw, NULL, y, x, w, M, K, N);
            double t3 = now();
            lowp_linear_backward(&lw, dx, dw, NULL, y, x, w16, M, K, N);
            double t4 = now();
            t[0] = fmin(t[0], t1 - t0), t[1] = fmin(t[1], t2 - t1), t[2] = fmin(t[2], t3 - t2), t[3] = fmin(t[3], t4 - t3);
        }
        printf("  %-5s %5d %5d | %8.3f %8.3f %6.2f | %8.3f %8.3f %6.2f\n", sh[s].name, K, N, t[0] * 1e3, t[1] * 1e3,
               t[0] / t[1], t[2] * 1e3, t[3] * 1e3, t[2] / t[3]);
    }
    /* the conversions alone: M x C and M x V */
    double tc = 1e9, tv = 1e9;
    for (int r = 0; r < reps; r++) {
        double t0 = now();
        bf16_from_f32(lw.a, x, (size_t)M * C);
        double t1 = now();
        bf16_from_f32(lw.g, x, (size_t)M * V);
        double t2 = now();
        tc = fmin(tc, t1 - t0), tv = fmin(tv, t2 - t1);
    }
    printf("  conversion f32 -> bf16: M x C %.3f ms, M x V %.3f ms\n", tc * 1e3, tv * 1e3);
    die(lowp_take_error(&lw));
    lowp_ws_free(&lw);
    aligned_free(x), aligned_free(y), aligned_free(dx), aligned_free(w), aligned_free(dw), aligned_free(w16);
}

int main(int argc, char **argv) {
    int threads = 1, layers = 4, C = 128, F = 512, H = 4, V = 8000, tokens = 4096, L = 24, U = 5, R = 5;
    int only_layers = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        int *dst = NULL;
        if (!strcmp(a, "-t")) dst = &threads;
        else if (!strcmp(a, "--layers")) dst = &layers;
        else if (!strcmp(a, "--d")) dst = &C;
        else if (!strcmp(a, "--ff")) dst = &F;
        else if (!strcmp(a, "--heads")) dst = &H;
        else if (!strcmp(a, "--vocab")) dst = &V;
        else if (!strcmp(a, "--tokens")) dst = &tokens;
        else if (!strcmp(a, "--len")) dst = &L;
        else if (!strcmp(a, "--updates")) dst = &U;
        else if (!strcmp(a, "--rounds")) dst = &R;
        else if (!strcmp(a, "--layers-only")) { only_layers = 1; continue; }
        if (!dst || i + 1 >= argc) {
            fprintf(stderr, "usage: bench_train_bf16 [-t N] [--layers L] [--d C] [--ff F] [--heads H] [--vocab V] "
                            "[--tokens N] [--len L] [--updates U] [--rounds R] [--layers-only]\n");
            return 2;
        }
        *dst = atoi(argv[++i]);
    }
    omp_set_num_threads(threads);
    die(bf16_check_cpu());
    if (only_layers) {
        layers_only(tokens, C, F, V, R * U);
        return 0;
    }
    int B = tokens / L;
    int *src = malloc(sizeof(int) * (size_t)B * L), *tin = malloc(sizeof(int) * (size_t)B * L),
        *tout = malloc(sizeof(int) * (size_t)B * L);
    uint64_t seed = 12345;
    for (int b = 0; b < B; b++) {
        seed = seed * 6364136223846793005ull + 1;
        int ls = L / 2 + (int)((seed >> 33) % (uint64_t)(L - L / 2 + 1)), lt = L / 2 + (int)((seed >> 45) % (uint64_t)(L - L / 2 + 1));
        if (b == 0) ls = lt = L; /* the batch is padded to L */
        for (int t = 0; t < L; t++) {
            seed = seed * 6364136223846793005ull + 1;
            src[b * L + t] = t < ls ? 3 + (int)((seed >> 20) % (uint64_t)(V - 3)) : 0;
            tin[b * L + t] = t < lt ? (t == 0 ? 2 : 3 + (int)((seed >> 40) % (uint64_t)(V - 3))) : 0;
        }
        for (int t = 0; t < L; t++) tout[b * L + t] = t + 1 < lt ? tin[b * L + t + 1] : (t + 1 == lt ? 1 : 0);
    }
    long ntok = 0;
    for (int i = 0; i < B * L; i++) ntok += tout[i] != 0;
    run_t r[2];
    for (int p = 0; p < 2; p++) {
        tmodel_config_t c = tmodel_default_config();
        c.src_vocab = c.tgt_vocab = V;
        c.d = C; c.heads = H; c.ff = F; c.enc_layers = c.dec_layers = layers; c.max_pos = L;
        c.dropout = 0.3f;
        c.precision = p ? TPREC_BF16 : TPREC_F32;
        die(tmodel_init(&r[p].m, &c));
        tmodel_init_params(&r[p].m, 1);
        die(tmodel_ws_new(&r[p].ws, &r[p].m, B * L, B * L, L, L));
        adam_config_t ac = adam_default_config();
        die(adam_init(&r[p].adam, r[p].m.n_params, &ac));
    }
    printf("model %d+%d layers, d %d, ff %d, %d heads, vocab %d, %.2fM parameters; batch %d x %d (%ld target "
           "tokens); %d thread(s); %d rounds of %d updates each way\n", layers, layers, C, F, H, V,
           (double)r[0].m.n_params / 1e6, B, L, ntok, threads, R, U);
    double *tps[2] = {calloc((size_t)R, sizeof(double)), calloc((size_t)R, sizeof(double))};
    double *ratio = calloc((size_t)R, sizeof(double)), loss[2] = {0, 0};
    for (int p = 0; p < 2; p++) loss[p] = update(&r[p], src, tin, tout, B, L, 0); /* warm-up */
    for (int k = 0; k < R; k++) {
        for (int q = 0; q < 2; q++) {
            int p = (k + q) % 2; /* alternate which goes first */
            double t0 = now();
            for (int u = 0; u < U; u++) loss[p] = update(&r[p], src, tin, tout, B, L, (uint64_t)(k * U + u + 1));
            tps[p][k] = (double)ntok * U / (now() - t0);
        }
        ratio[k] = tps[1][k] / tps[0][k];
        printf("  round %d: float32 %8.0f tok/s, bfloat16 %8.0f tok/s, bf16/f32 %.3f\n", k + 1, tps[0][k], tps[1][k],
               ratio[k]);
        fflush(stdout);
    }
    long calls, created;
    gemm_bf16_stats(&calls, &created);
    double m0 = median(tps[0], R), m1 = median(tps[1], R), mr = median(ratio, R);
    printf("median: float32 %.0f tok/s, bfloat16 %.0f tok/s; median ratio bf16/f32 %.3f (last loss f32 %.4f, bf16 "
           "%.4f; %ld bf16 GEMMs, %ld oneDNN primitives created)\n", m0, m1, mr, loss[0], loss[1], calls, created);
    for (int p = 0; p < 2; p++) {
        tmodel_ws_free(r[p].ws);
        adam_free(&r[p].adam);
        tmodel_free(&r[p].m);
    }
    free(tps[0]), free(tps[1]), free(ratio), free(src), free(tin), free(tout);
    gemm_bf16_cache_clear();
    return 0;
}
