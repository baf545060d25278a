/* bench_train.c — Tern's side of bench/bench_train.py (training speed, Tern vs PyTorch).
 *
 *   bench_train prepare --vocab DIR --src FILE --tgt FILE --cache FILE --max-tokens N --batches K
 *                       --layers L --d-model C --ff F --heads H [--seed S] OUT.safetensors
 *       The first K batches of Tern's own pipeline (src/train/data.c: length-sorted, cut by the
 *       token budget, shuffled with the seed) and the model's initial parameters
 *       (tmodel_init_params: fairseq's initialization), in one file that both engines read:
 *       parameters under their CTranslate2 names, batch k as batch/<k>/src (B, S),
 *       batch/<k>/tgt_in (B, T), batch/<k>/tgt_out (B, T) int32, the configuration as metadata.
 *       The model is the recipe's shape: pre-norm, ReLU, sinusoids, scaled, shared and tied
 *       embeddings, label smoothing 0.1.
 *   bench_train loss IN.safetensors
 *       One forward pass of batch 0 without dropout: prints {"loss_sum": .., "nll_sum": ..,
 *       "ntokens": ..} (the "same computation" check against PyTorch).
 *   bench_train run IN.safetensors --threads T --warmup W --updates N --dropout P
 *                   [--precision float32|bfloat16] [--no-target-groups]
 *       W + N full updates (forward, backward, clipping at norm 1, AdamW step with fairseq's
 *       inverse_sqrt), update u on batch u % K, dropout P on embeddings, sublayer outputs,
 *       attention weights and the feed-forward activation. Prints, as JSON, the target tokens
 *       (non-padding) and seconds of the last N updates, and their tokens/s.
 *       bfloat16 needs a build with TERN_HAVE_BF16_TRAIN; else it prints {"error": "not built"}
 *       and exits with status 3. Also "gemm_gflop": the float32 GEMM work of the timed updates
 *       (every gemm_f32 product, 2·M·N·K; gemm_count_flops), and "decoder_rows" / "padded_rows":
 *       the decoder rows the timed updates computed (target groups, src/train/model.c) and B·T.
 *       --no-target-groups runs the decoder on the whole padded B x T batches instead
 *       (tmodel_ws_set_target_groups(ws, 0)): the A/B of the grouping in one binary.
 *   bench_train peak [--threads T] [--rows M] [--shapes NxK,...] [--seconds S]
 *       The float32 GEMM peak of the library gemm_f32 calls, on a linear layer's three training
 *       products at M rows (peak_mode below): GFLOP per CPU second and per wall second.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "model/weights.h"
#include "train/data.h"
#include "train/model.h"
#include "train/optim.h"

static int fail(const char *what) {
    fprintf(stderr, "bench_train: %s: %s\n", what, tern_last_error());
    return 1;
}

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* CPU seconds of the whole process (all threads): on a machine shared with other work, tokens per
   CPU second compare the engines' work independently of the share of the cores each process got. */
static double cpu_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static const char *arg(int argc, char **argv, const char *name, const char *dflt) {
    for (int i = 2; i + 1 < argc; i++)
        if (!strcmp(argv[i], name)) return argv[i + 1];
    if (!dflt) {
        fprintf(stderr, "bench_train: missing %s\n", name);
        exit(2);
    }
    return dflt;
}

static double meta(const weights_t *w, const char *key, double dflt) {
    const char *v = weights_metadata(w, key);
    return v ? atof(v) : dflt;
}

/* ------------------------------------------------------------------ prepare */

static tensor_t i32_view(char *name, const int32_t *data, int rows, int cols) {
    tensor_t t;
    memset(&t, 0, sizeof t);
    t.name = name;
    t.dtype = DT_I32;
    t.rank = 2;
    t.shape[0] = rows;
    t.shape[1] = cols;
    t.numel = (int64_t)rows * cols;
    t.data = data;
    t.nbytes = (size_t)t.numel * sizeof(int32_t);
    return t;
}

static int prepare(int argc, char **argv) {
    const char *out = argv[argc - 1];
    int K = atoi(arg(argc, argv, "--batches", NULL));
    data_vocab_t v;
    if (data_vocab_load(&v, arg(argc, argv, "--vocab", NULL))) return fail("vocabulary");
    data_options_t dopt = data_default_options();
    data_corpus_t *corpus;
    if (data_corpus_open(&corpus, arg(argc, argv, "--cache", NULL), arg(argc, argv, "--src", NULL),
                         arg(argc, argv, "--tgt", NULL), &v, &dopt, NULL))
        return fail("corpus");
    data_batching_t b = data_default_batching();
    b.max_tokens = atoi(arg(argc, argv, "--max-tokens", "4096"));
    b.seed = (uint64_t)atoll(arg(argc, argv, "--seed", "1"));
    data_iter_t *it;
    if (data_iter_new(&it, corpus, &b)) return fail("batches");

    tmodel_config_t c = tmodel_default_config();
    c.src_vocab = vocab_size(v.src_vocab);
    c.tgt_vocab = vocab_size(v.tgt_vocab);
    c.pad_id = v.pad_id;
    c.share_emb = c.tie_proj = 1;
    c.enc_layers = c.dec_layers = atoi(arg(argc, argv, "--layers", NULL));
    c.d = atoi(arg(argc, argv, "--d-model", NULL));
    c.ff = atoi(arg(argc, argv, "--ff", NULL));
    c.heads = atoi(arg(argc, argv, "--heads", NULL));
    c.max_pos = dopt.max_src_len > dopt.max_tgt_len ? dopt.max_src_len : dopt.max_tgt_len;
    tmodel_t m;
    if (tmodel_init(&m, &c)) return fail("model");
    tmodel_init_params(&m, b.seed);

    int n = m.n_tensors + 3 * K;
    tensor_t *views = calloc((size_t)n, sizeof *views);
    char (*names)[64] = calloc((size_t)3 * K, sizeof *names);
    int32_t **copies = calloc((size_t)3 * K, sizeof *copies);
    tmodel_tensor_views(&m, m.params, views);
    long long src_tok = 0, tgt_tok = 0;
    for (int k = 0; k < K; k++) {
        const data_batch_t *bt;
        if (data_iter_next(it, &bt)) return fail("next batch");
        if (!bt) {
            fprintf(stderr, "bench_train: the epoch has fewer than %d batches\n", K);
            return 1;
        }
        const int32_t *src[3] = {bt->src, bt->tgt_in, bt->tgt_out};
        const char *what[3] = {"src", "tgt_in", "tgt_out"};
        for (int j = 0; j < 3; j++) {
            int cols = j ? bt->T : bt->S;
            size_t nb = (size_t)bt->B * cols * sizeof(int32_t);
            copies[3 * k + j] = malloc(nb);
            memcpy(copies[3 * k + j], src[j], nb);
            snprintf(names[3 * k + j], sizeof names[0], "batch/%d/%s", k, what[j]);
            views[m.n_tensors + 3 * k + j] = i32_view(names[3 * k + j], copies[3 * k + j], bt->B, cols);
        }
        src_tok += bt->n_src_tokens;
        tgt_tok += bt->n_tgt_tokens;
    }
    const char *keys[] = {"src_vocab", "tgt_vocab", "d", "heads", "ff", "enc_layers", "dec_layers", "max_pos",
                          "pre_norm", "act", "eps", "learned_pos", "scale_emb", "share_emb", "tie_proj", "proj_bias",
                          "pad_id", "label_smoothing", "batches", "max_tokens"};
    double nums[] = {c.src_vocab, c.tgt_vocab, c.d, c.heads, c.ff, c.enc_layers, c.dec_layers, c.max_pos,
                     c.pre_norm, (int)c.act, c.eps, c.learned_pos, c.scale_emb, c.share_emb, c.tie_proj,
                     c.proj_bias, c.pad_id, c.label_smoothing, K, b.max_tokens};
    int nk = (int)(sizeof nums / sizeof nums[0]);
    char (*sv)[32] = calloc((size_t)nk, sizeof *sv);
    const char **pv = calloc((size_t)nk, sizeof *pv);
    for (int i = 0; i < nk; i++) {
        snprintf(sv[i], sizeof sv[i], "%.9g", nums[i]);
        pv[i] = sv[i];
    }
    if (safetensors_write(out, views, n, keys, pv, nk)) return fail("writing");
    printf("{\"batches\": %d, \"src_tokens\": %lld, \"tgt_tokens\": %lld, \"params\": %zu}\n", K, src_tok, tgt_tok,
           m.n_params);
    for (int i = 0; i < 3 * K; i++) free(copies[i]);
    free(copies); free(names); free(views); free(sv); free(pv);
    tmodel_free(&m);
    data_iter_free(it);
    data_corpus_free(corpus);
    data_vocab_free(&v);
    return 0;
}

/* ------------------------------------------------------------------ loss and run */

typedef struct {
    int B, S, T;
    const int *src, *tin, *tout;
} batch_t;

static int load(const char *path, weights_t **w, tmodel_t *m, batch_t **batches, int *K, tmodel_ws_t **ws,
                float dropout, int bf16) {
    if (weights_load_safetensors(w, path)) return fail("loading input");
    tmodel_config_t c = tmodel_default_config();
    c.src_vocab = (int)meta(*w, "src_vocab", 0);
    c.tgt_vocab = (int)meta(*w, "tgt_vocab", 0);
    c.d = (int)meta(*w, "d", 0);
    c.heads = (int)meta(*w, "heads", 0);
    c.ff = (int)meta(*w, "ff", 0);
    c.enc_layers = (int)meta(*w, "enc_layers", 0);
    c.dec_layers = (int)meta(*w, "dec_layers", 0);
    c.max_pos = (int)meta(*w, "max_pos", 0);
    c.pad_id = (int)meta(*w, "pad_id", 0);
    c.label_smoothing = (float)meta(*w, "label_smoothing", 0.1);
    c.eps = (float)meta(*w, "eps", 1e-6);
    c.pre_norm = 1;
    c.act = ACT_RELU;
    c.share_emb = c.tie_proj = 1;
    c.dropout = c.attn_dropout = c.act_dropout = dropout;
    if (bf16) {
#ifdef TERN_HAVE_BF16_TRAIN
        c.precision = TPREC_BF16;
#else
        printf("{\"error\": \"not built\"}\n");
        exit(3);
#endif
    }
    if (tmodel_init(m, &c)) return fail("model");
    if (tmodel_load(m, *w)) return fail("parameters");
    *K = (int)meta(*w, "batches", 0);
    *batches = calloc((size_t)*K, sizeof **batches);
    int maxS = 0, maxT = 0, maxs = 0, maxt = 0;
    for (int k = 0; k < *K; k++) {
        char name[64];
        const char *what[3] = {"src", "tgt_in", "tgt_out"};
        const tensor_t *t[3];
        for (int j = 0; j < 3; j++) {
            snprintf(name, sizeof name, "batch/%d/%s", k, what[j]);
            t[j] = weights_get(*w, name);
            if (!t[j] || t[j]->dtype != DT_I32 || t[j]->rank != 2) {
                fprintf(stderr, "bench_train: %s missing or not int32 (B, L)\n", name);
                return 1;
            }
        }
        batch_t *b = &(*batches)[k];
        b->B = (int)t[0]->shape[0];
        b->S = (int)t[0]->shape[1];
        b->T = (int)t[1]->shape[1];
        b->src = t[0]->data;
        b->tin = t[1]->data;
        b->tout = t[2]->data;
        if (b->S > maxS) maxS = b->S;
        if (b->T > maxT) maxT = b->T;
        if (b->B * b->S > maxs) maxs = b->B * b->S;
        if (b->B * b->T > maxt) maxt = b->B * b->T;
    }
    if (tmodel_ws_new(ws, m, maxs, maxt, maxS, maxT)) return fail("workspace");
    return 0;
}

static int loss_mode(int argc, char **argv) {
    weights_t *w;
    tmodel_t m;
    batch_t *bt;
    int K;
    tmodel_ws_t *ws;
    if (load(argv[2], &w, &m, &bt, &K, &ws, 0.0f, 0)) return 1;
    (void)argc;
    tmodel_loss_t L;
    if (tmodel_forward(&m, ws, bt[0].src, bt[0].tin, bt[0].tout, bt[0].B, bt[0].S, bt[0].T, 0, 1, 0, &L))
        return fail("forward");
    printf("{\"loss_sum\": %.17g, \"nll_sum\": %.17g, \"ntokens\": %d}\n", L.loss, L.nll, L.ntokens);
    tmodel_ws_free(ws);
    tmodel_free(&m);
    free(bt);
    weights_free(w);
    return 0;
}

static int run_mode(int argc, char **argv) {
    int threads = atoi(arg(argc, argv, "--threads", "1"));
    int warmup = atoi(arg(argc, argv, "--warmup", "2"));
    int updates = atoi(arg(argc, argv, "--updates", "10"));
    float dropout = (float)atof(arg(argc, argv, "--dropout", "0.1"));
    const char *prec = arg(argc, argv, "--precision", "float32");
    int no_groups = 0;
    for (int i = 3; i < argc; i++)
        if (!strcmp(argv[i], "--no-target-groups")) no_groups = 1;
    int bf16 = !strcmp(prec, "bfloat16");
    if (!bf16 && strcmp(prec, "float32")) {
        fprintf(stderr, "bench_train: --precision float32 or bfloat16\n");
        return 2;
    }
    kernels_set_num_threads(threads);
    weights_t *w;
    tmodel_t m;
    batch_t *bt;
    int K;
    tmodel_ws_t *ws;
    if (load(argv[2], &w, &m, &bt, &K, &ws, dropout, bf16)) return 1;
    if (no_groups) tmodel_ws_set_target_groups(ws, 0);
    lr_schedule_t sched = {0};
    sched.kind = LR_INVERSE_SQRT;
    sched.lr = 5e-4f;
    sched.warmup = 4000;
    sched.warmup_init_lr = 1e-7f;
    adam_config_t ac = adam_default_config();
    ac.weight_decay = 1e-4f;
    ac.decoupled = 1;
    adam_t adam;
    if (adam_init(&adam, m.n_params, &ac)) return fail("adam");
    long long tokens = 0, dec_rows = 0, padded_rows = 0;
    double t0 = 0, c0 = 0, first_loss = 0;
    for (int u = 0; u < warmup + updates; u++) {
        if (u == warmup) {
            t0 = now();
            c0 = cpu_now();
            gemm_count_flops(1);
        }
        const batch_t *b = &bt[u % K];
        tmodel_loss_t L;
        tmodel_zero_grad(&m);
        if (tmodel_forward(&m, ws, b->src, b->tin, b->tout, b->B, b->S, b->T, dropout > 0, 1, (uint64_t)u, &L))
            return fail("forward");
        if (tmodel_backward(&m, ws, 1.0f / (float)L.ntokens)) return fail("backward");
        /* clip_grad_norm at 1 then adam_step, the clipping factor applied inside Adam's pass */
        float coef = clip_grad_coef(grad_global_norm(m.grads, m.n_params), 1.0f);
        adam_step_scaled(&adam, m.params, m.grads, coef, (float)lr_at(&sched, u));
        if (u == 0) first_loss = L.loss / L.ntokens;
        if (u >= warmup) {
            tokens += L.ntokens;
            dec_rows += tmodel_ws_decoder_rows(ws, NULL);
            padded_rows += (long long)b->B * b->T;
        }
    }
    double sec = now() - t0, cpu = cpu_now() - c0;
    double gflop = (double)gemm_flops_counted() * 1e-9; /* float32 GEMMs of the timed updates (bf16: 0) */
    gemm_count_flops(0);
    printf("{\"engine\": \"tern\", \"precision\": \"%s\", \"threads\": %d, \"tokens\": %lld, \"seconds\": %.6f, "
           "\"tok_per_s\": %.3f, \"cpu_seconds\": %.6f, \"tok_per_cpu_s\": %.3f, \"first_loss\": %.6f, "
           "\"gemm_gflop\": %.6f, \"decoder_rows\": %lld, \"padded_rows\": %lld}\n",
           prec, threads, tokens, sec, tokens / sec, cpu, tokens / cpu, first_loss, gflop, dec_rows, padded_rows);
    adam_free(&adam);
    tmodel_ws_free(ws);
    tmodel_free(&m);
    free(bt);
    weights_free(w);
    return 0;
}

/* The float32 GEMM peak of the library the trainer calls (gemm_f32: oneDNN's sgemm), on the three
 * products of a linear layer in training at a batch of M rows: forward out = x·Wᵀ (NT), input
 * gradient dx = dy·W (NN), weight gradient dW = dyᵀ·x (TN), for each (N, K) given; GFLOP per CPU
 * second and per wall second of the best of them (repeated for `--seconds` each). */
static int peak_mode(int argc, char **argv) {
    int threads = atoi(arg(argc, argv, "--threads", "1"));
    int M = atoi(arg(argc, argv, "--rows", "2048"));
    double budget = atof(arg(argc, argv, "--seconds", "1.0"));
    const char *shapes = arg(argc, argv, "--shapes", "2048x512,512x2048,1536x512,8000x512");
    kernels_set_num_threads(threads);
    printf("{\"engine\": \"tern\", \"library\": \"oneDNN dnnl_sgemm\", \"threads\": %d, \"rows\": %d, \"cases\": [",
           threads, M);
    double best_cpu = 0, best_wall = 0;
    int first = 1;
    for (const char *p = shapes; *p;) {
        int N, K;
        if (sscanf(p, "%dx%d", &N, &K) != 2 || N < 1 || K < 1) {
            fprintf(stderr, "bench_train: --shapes NxK,NxK,...\n");
            return 2;
        }
        size_t big = (size_t)M * (N > K ? N : K);
        float *x = calloc(big, sizeof(float)), *y = calloc(big, sizeof(float)), *wt = calloc((size_t)N * K, sizeof(float));
        float *o = calloc(big > (size_t)N * K ? big : (size_t)N * K, sizeof(float));
        if (!x || !y || !wt || !o) return fail("peak: out of memory");
        for (size_t i = 0; i < big; i++) x[i] = y[i] = (float)((i * 2654435761u) % 1000) * 1e-3f - 0.5f;
        for (size_t i = 0; i < (size_t)N * K; i++) wt[i] = (float)((i * 40503u) % 1000) * 1e-3f - 0.5f;
        for (int kind = 0; kind < 3; kind++) {
            static const char *names[3] = {"NT", "NN", "TN"};
            double flop = 2.0 * M * N * K, t0 = 0, c0 = 0;
            int reps = 0;
            for (int r = -1;; r++) { /* r = -1: warm-up */
                if (r == 0) t0 = now(), c0 = cpu_now();
                if (kind == 0) gemm_f32(0, 1, M, N, K, 1.0f, x, K, wt, K, 0.0f, o, N);
                else if (kind == 1) gemm_f32(0, 0, M, K, N, 1.0f, y, N, wt, K, 0.0f, o, K);
                else gemm_f32(1, 0, N, K, M, 1.0f, y, N, x, K, 1.0f, o, K);
                if (r >= 0) reps++;
                if (r >= 0 && now() - t0 >= budget) break;
            }
            double wall = now() - t0, cpu = cpu_now() - c0;
            double gc = flop * reps / cpu * 1e-9, gw = flop * reps / wall * 1e-9;
            if (gc > best_cpu) best_cpu = gc;
            if (gw > best_wall) best_wall = gw;
            printf("%s{\"N\": %d, \"K\": %d, \"op\": \"%s\", \"gflops_cpu\": %.2f, \"gflops_wall\": %.2f}", first ? "" : ", ",
                   N, K, names[kind], gc, gw);
            first = 0;
        }
        free(x), free(y), free(wt), free(o);
        p = strchr(p, ',');
        if (!p) break;
        p++;
    }
    printf("], \"best_gflops_cpu\": %.2f, \"best_gflops_wall\": %.2f}\n", best_cpu, best_wall);
    return 0;
}

int main(int argc, char **argv) {
    if (argc >= 3 && !strcmp(argv[1], "prepare")) return prepare(argc, argv);
    if (argc >= 3 && !strcmp(argv[1], "loss")) return loss_mode(argc, argv);
    if (argc >= 3 && !strcmp(argv[1], "run")) return run_mode(argc, argv);
    if (argc >= 2 && !strcmp(argv[1], "peak")) return peak_mode(argc, argv);
    fprintf(stderr, "usage: bench_train prepare|loss|run|peak ... (see the comment at the top of bench/bench_train.c)\n");
    return 2;
}
