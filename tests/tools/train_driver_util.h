/* train_driver_util.h — what the training drivers (train_driver.c for the Transformer,
 * family_train_driver.c for the training table's families) share: reading the input file's
 * metadata and batches, the optimizer loop of their `train` mode and the output files of `step`
 * and `train`. Static functions: each driver is its own program (the Makefile builds every
 * .c file of tests/tools into one), so this header is included, not linked.
 *
 * The including file defines DRIVER_NAME (the program's name, for messages) before including it.
 */
#ifndef TERN_TESTS_TRAIN_DRIVER_UTIL_H
#define TERN_TESTS_TRAIN_DRIVER_UTIL_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/weights.h"
#include "train/family.h"
#include "train/optim.h"

#ifndef DRIVER_NAME
#error "define DRIVER_NAME before including train_driver_util.h"
#endif

static int fail(const char *what) {
    fprintf(stderr, DRIVER_NAME ": %s: %s\n", what, tern_last_error());
    return 1;
}

static double meta(const weights_t *w, const char *key, double dflt) {
    const char *v = weights_metadata(w, key);
    return v ? atof(v) : dflt;
}

static const int *batch_tensor(const weights_t *w, const char *name, int *nb, int *b, int *len) {
    const tensor_t *t = weights_get(w, name);
    if (!t || t->dtype != DT_I32 || t->rank != 3) {
        fprintf(stderr, DRIVER_NAME ": %s: missing or not int32 (NB, B, L)\n", name);
        return NULL;
    }
    *nb = (int)t->shape[0];
    *b = (int)t->shape[1];
    *len = (int)t->shape[2];
    return t->data;
}

/* The batches of the input: NB batches of B sentences, sources S long, targets T long. */
typedef struct {
    const int *src, *tin, *tout;
    int NB, B, S, T;
} driver_batches_t;

static int read_batches(const weights_t *w, driver_batches_t *bt) {
    int NB2, B2, NB3, B3, T3;
    bt->src = batch_tensor(w, "batch/src", &bt->NB, &bt->B, &bt->S);
    bt->tin = batch_tensor(w, "batch/tgt_in", &NB2, &B2, &bt->T);
    bt->tout = batch_tensor(w, "batch/tgt_out", &NB3, &B3, &T3);
    if (!bt->src || !bt->tin || !bt->tout || bt->NB != NB2 || bt->NB != NB3 || bt->B != B2 || bt->B != B3 ||
        bt->T != T3) {
        fprintf(stderr, DRIVER_NAME ": batch tensors disagree\n");
        return 1;
    }
    return 0;
}

/* `step`'s output: the gradient views and, as metadata, loss_sum, nll_sum, ntokens, and
 * extra_key = extra_val when extra_key is not NULL. */
static inline int write_step_extra(const char *path, tensor_t *views, int n, const train_loss_t *L,
                                   const char *extra_key, const char *extra_val) {
    char ls[64], ns[64], nt[32];
    snprintf(ls, sizeof ls, "%.17g", L->loss);
    snprintf(ns, sizeof ns, "%.17g", L->nll);
    snprintf(nt, sizeof nt, "%d", L->ntokens);
    const char *keys[] = {"loss_sum", "nll_sum", "ntokens", extra_key}, *vals[] = {ls, ns, nt, extra_val};
    return safetensors_write(path, views, n, keys, vals, extra_key ? 4 : 3) ? fail("writing output") : 0;
}

static inline int write_step(const char *path, tensor_t *views, int n, const train_loss_t *L) {
    return write_step_extra(path, views, n, L, NULL, NULL);
}

static void f32_vector(tensor_t *t, const char *name, float *data, int n) {
    t->name = name;
    t->dtype = DT_F32;
    t->rank = 1;
    t->shape[0] = n;
    t->numel = (size_t)n;
    t->data = data;
    t->nbytes = (size_t)n * sizeof(float);
}

/* The model a driver drives: its flat parameter and gradient buffers and its forward (train mode,
 * dropout as the driver set it up) and backward, each returning a status (nonzero: failed). */
typedef struct {
    void *ctx;
    float *params, *grads;
    size_t n_params;
    tern_status_t (*forward)(void *ctx, const int *src, const int *tin, const int *tout, int B, int S, int T,
                             uint64_t step, train_loss_t *L);
    tern_status_t (*backward)(void *ctx, float grad_scale);
    void (*params_changed)(void *ctx); /* after each optimizer step, or NULL */
} driver_model_t;

/* Update u's forward + backward of batch k: gradients zeroed, grad_scale 1 / ntokens. 0, or 1
 * after a message. */
static int fwd_bwd(const driver_model_t *dm, const driver_batches_t *bt, int u, int k, train_loss_t *L) {
    size_t B = (size_t)bt->B;
    const int *s = bt->src + (size_t)k * B * bt->S, *ti = bt->tin + (size_t)k * B * bt->T,
              *to = bt->tout + (size_t)k * B * bt->T;
    memset(dm->grads, 0, dm->n_params * sizeof(float));
    if (dm->forward(dm->ctx, s, ti, to, bt->B, bt->S, bt->T, (uint64_t)u, L)) return fail("forward");
    if (L->ntokens < 1) {
        fprintf(stderr, DRIVER_NAME ": batch %d has no target tokens\n", k);
        return 1;
    }
    if (dm->backward(dm->ctx, 1.0f / (float)L->ntokens)) return fail("backward");
    return 0;
}

/* `train`: `updates` updates read from the metadata (updates lr warmup warmup_init_lr beta1 beta2
 * adam_eps weight_decay decoupled clip_norm; with allow_sgd, also sgd_after sgd_lr decay_start
 * decay_interval decay_times: GNMT's Adam-then-SGD schedule), update u on batch u % NB: fwd_bwd,
 * clip, the schedule's rate, Adam (or SGD) on the parameters. Writes the final parameters (views:
 * n_tensors of them and 4 free slots at the end) with losses, nlls, grad_norms, lrs to path. 0, or
 * 1 after a message. */
static int run_train(const weights_t *w, const driver_model_t *dm, const driver_batches_t *bt, int allow_sgd,
                     const char *path, tensor_t *views, int n_tensors) {
    int updates = (int)meta(w, "updates", 200);
    if (updates < 1) {
        fprintf(stderr, DRIVER_NAME ": updates must be >= 1\n");
        return 1;
    }
    lr_schedule_t sched = {0};
    sched.lr = (float)meta(w, "lr", 5e-4);
    if (allow_sgd && weights_metadata(w, "sgd_after")) {
        sched.kind = LR_GNMT;
        sched.sgd_start = (long)meta(w, "sgd_after", 0);
        sched.sgd_lr = (float)meta(w, "sgd_lr", 0);
        sched.decay_start = (long)meta(w, "decay_start", (double)updates + sched.sgd_start);
        sched.decay_interval = (long)meta(w, "decay_interval", 1);
        sched.decay_times = (int)meta(w, "decay_times", 0);
    } else {
        sched.kind = LR_INVERSE_SQRT;
        sched.warmup = (int)meta(w, "warmup", 4000);
        sched.warmup_init_lr = (float)meta(w, "warmup_init_lr", 1e-7);
    }
    if (lr_schedule_check(&sched)) return fail("schedule");
    adam_config_t ac = adam_default_config();
    ac.beta1 = (float)meta(w, "beta1", ac.beta1);
    ac.beta2 = (float)meta(w, "beta2", ac.beta2);
    ac.eps = (float)meta(w, "adam_eps", ac.eps);
    ac.weight_decay = (float)meta(w, "weight_decay", 0);
    ac.decoupled = (int)meta(w, "decoupled", 1);
    float clip = (float)meta(w, "clip_norm", 0);
    adam_t adam;
    if (adam_init(&adam, dm->n_params, &ac)) return fail("adam");
    float *losses = malloc((size_t)updates * sizeof(float)), *nlls = malloc((size_t)updates * sizeof(float));
    float *norms = malloc((size_t)updates * sizeof(float)), *lrs = malloc((size_t)updates * sizeof(float));
    if (!losses || !nlls || !norms || !lrs) {
        fprintf(stderr, DRIVER_NAME ": out of memory\n");
        return 1;
    }
    for (int u = 0; u < updates; u++) {
        train_loss_t L;
        if (fwd_bwd(dm, bt, u, u % bt->NB, &L)) return 1;
        double norm = clip_grad_norm(dm->grads, dm->n_params, clip);
        double lr = lr_at(&sched, u);
        if (lr_use_sgd(&sched, u)) sgd_step(dm->params, dm->grads, dm->n_params, (float)lr, ac.weight_decay);
        else adam_step(&adam, dm->params, dm->grads, (float)lr);
        if (dm->params_changed) dm->params_changed(dm->ctx);
        losses[u] = (float)(L.loss / L.ntokens);
        nlls[u] = (float)(L.nll / L.ntokens);
        norms[u] = (float)norm;
        lrs[u] = (float)lr;
    }
    f32_vector(&views[n_tensors + 0], "losses", losses, updates);
    f32_vector(&views[n_tensors + 1], "nlls", nlls, updates);
    f32_vector(&views[n_tensors + 2], "grad_norms", norms, updates);
    f32_vector(&views[n_tensors + 3], "lrs", lrs, updates);
    if (safetensors_write(path, views, n_tensors + 4, NULL, NULL, 0)) return fail("writing output");
    free(losses), free(nlls), free(norms), free(lrs);
    adam_free(&adam);
    return 0;
}

#endif
