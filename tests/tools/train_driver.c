/* train_driver.c — drives the training code from files, for tests/test_train_torch.py.
 *
 *   train_driver step  IN.safetensors OUT.safetensors
 *       one forward + backward (dropout off) of batch 0: OUT holds every parameter gradient under
 *       the parameter's name (the mean over target tokens: grad_scale = 1 / ntokens) and, as
 *       metadata, loss_sum, nll_sum, ntokens.
 *   train_driver train IN.safetensors OUT.safetensors
 *       `updates` Adam updates with fairseq's inverse_sqrt schedule and gradient clipping, update u
 *       on batch u % NB: OUT holds losses, nlls, grad_norms, lrs (updates) and the final parameters.
 *
 * IN: the model's parameters under their CTranslate2 names; the batches as int32 tensors
 * batch/src (NB, B, S), batch/tgt_in (NB, B, T), batch/tgt_out (NB, B, T); the configuration as
 * safetensors metadata (strings): src_vocab tgt_vocab d heads ff enc_layers dec_layers max_pos
 * pre_norm act eps learned_pos scale_emb share_emb tie_proj proj_bias pad_id label_smoothing
 * dropout attn_dropout act_dropout, and for train: updates lr warmup warmup_init_lr beta1 beta2
 * adam_eps weight_decay decoupled clip_norm.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/weights.h"
#include "train/model.h"
#include "train/optim.h"

static int fail(const char *what) {
    fprintf(stderr, "train_driver: %s: %s\n", what, tern_last_error());
    return 1;
}

static double meta(const weights_t *w, const char *key, double dflt) {
    const char *v = weights_metadata(w, key);
    return v ? atof(v) : dflt;
}

static const int *batch_tensor(const weights_t *w, const char *name, int *nb, int *b, int *len) {
    const tensor_t *t = weights_get(w, name);
    if (!t || t->dtype != DT_I32 || t->rank != 3) {
        fprintf(stderr, "train_driver: %s: missing or not int32 (NB, B, L)\n", name);
        return NULL;
    }
    *nb = (int)t->shape[0];
    *b = (int)t->shape[1];
    *len = (int)t->shape[2];
    return t->data;
}

int main(int argc, char **argv) {
    if (argc != 4 || (strcmp(argv[1], "step") && strcmp(argv[1], "train"))) {
        fprintf(stderr, "usage: train_driver step|train IN.safetensors OUT.safetensors\n");
        return 2;
    }
    int train = !strcmp(argv[1], "train");
    weights_t *w;
    if (weights_load_safetensors(&w, argv[2])) return fail("loading input");

    tmodel_config_t c = tmodel_default_config();
    c.src_vocab = (int)meta(w, "src_vocab", c.src_vocab);
    c.tgt_vocab = (int)meta(w, "tgt_vocab", c.tgt_vocab);
    c.d = (int)meta(w, "d", c.d);
    c.heads = (int)meta(w, "heads", c.heads);
    c.ff = (int)meta(w, "ff", c.ff);
    c.enc_layers = (int)meta(w, "enc_layers", c.enc_layers);
    c.dec_layers = (int)meta(w, "dec_layers", c.dec_layers);
    c.max_pos = (int)meta(w, "max_pos", c.max_pos);
    c.pre_norm = (int)meta(w, "pre_norm", c.pre_norm);
    c.act = (activation_t)(int)meta(w, "act", c.act);
    c.eps = (float)meta(w, "eps", c.eps);
    c.learned_pos = (int)meta(w, "learned_pos", c.learned_pos);
    c.scale_emb = (int)meta(w, "scale_emb", c.scale_emb);
    c.share_emb = (int)meta(w, "share_emb", c.share_emb);
    c.tie_proj = (int)meta(w, "tie_proj", c.tie_proj);
    c.proj_bias = (int)meta(w, "proj_bias", c.proj_bias);
    c.pad_id = (int)meta(w, "pad_id", c.pad_id);
    c.label_smoothing = (float)meta(w, "label_smoothing", c.label_smoothing);
    c.dropout = (float)meta(w, "dropout", 0);
    c.attn_dropout = (float)meta(w, "attn_dropout", 0);
    c.act_dropout = (float)meta(w, "act_dropout", 0);

    tmodel_t m;
    if (tmodel_init(&m, &c)) return fail("model");
    if (tmodel_load(&m, w)) return fail("parameters");
    int NB, B, S, NB2, B2, T, NB3, B3, T3;
    const int *src = batch_tensor(w, "batch/src", &NB, &B, &S);
    const int *tin = batch_tensor(w, "batch/tgt_in", &NB2, &B2, &T);
    const int *tout = batch_tensor(w, "batch/tgt_out", &NB3, &B3, &T3);
    if (!src || !tin || !tout || NB != NB2 || NB != NB3 || B != B2 || B != B3 || T != T3) {
        fprintf(stderr, "train_driver: batch tensors disagree\n");
        return 1;
    }
    tmodel_ws_t *ws;
    if (tmodel_ws_new(&ws, &m, B * S, B * T, S, T)) return fail("workspace");
    int dropout_on = c.dropout > 0 || c.attn_dropout > 0 || c.act_dropout > 0;

    if (!train) {
        tmodel_loss_t L;
        tmodel_zero_grad(&m);
        if (tmodel_forward(&m, ws, src, tin, tout, B, S, T, dropout_on, 1, 0, &L)) return fail("forward");
        if (tmodel_backward(&m, ws, 1.0f / (float)L.ntokens)) return fail("backward");
        tensor_t *views = calloc((size_t)m.n_tensors, sizeof *views);
        tmodel_tensor_views(&m, m.grads, views);
        char ls[64], ns[64], nt[32];
        snprintf(ls, sizeof ls, "%.17g", L.loss);
        snprintf(ns, sizeof ns, "%.17g", L.nll);
        snprintf(nt, sizeof nt, "%d", L.ntokens);
        const char *keys[] = {"loss_sum", "nll_sum", "ntokens"}, *vals[] = {ls, ns, nt};
        if (safetensors_write(argv[3], views, m.n_tensors, keys, vals, 3)) return fail("writing output");
        free(views);
    } else {
        int updates = (int)meta(w, "updates", 200);
        lr_schedule_t sched = {0};
        sched.kind = LR_INVERSE_SQRT;
        sched.lr = (float)meta(w, "lr", 5e-4);
        sched.warmup = (int)meta(w, "warmup", 4000);
        sched.warmup_init_lr = (float)meta(w, "warmup_init_lr", 1e-7);
        if (lr_schedule_check(&sched)) return fail("schedule");
        adam_config_t ac = adam_default_config();
        ac.beta1 = (float)meta(w, "beta1", ac.beta1);
        ac.beta2 = (float)meta(w, "beta2", ac.beta2);
        ac.eps = (float)meta(w, "adam_eps", ac.eps);
        ac.weight_decay = (float)meta(w, "weight_decay", 0);
        ac.decoupled = (int)meta(w, "decoupled", 1);
        float clip = (float)meta(w, "clip_norm", 0);
        adam_t adam;
        if (adam_init(&adam, m.n_params, &ac)) return fail("adam");
        float *losses = malloc((size_t)updates * sizeof(float)), *nlls = malloc((size_t)updates * sizeof(float));
        float *norms = malloc((size_t)updates * sizeof(float)), *lrs = malloc((size_t)updates * sizeof(float));
        for (int u = 0; u < updates; u++) {
            int k = u % NB;
            const int *s = src + (size_t)k * B * S, *ti = tin + (size_t)k * B * T, *to = tout + (size_t)k * B * T;
            tmodel_loss_t L;
            tmodel_zero_grad(&m);
            if (tmodel_forward(&m, ws, s, ti, to, B, S, T, dropout_on, 1, (uint64_t)u, &L)) return fail("forward");
            if (tmodel_backward(&m, ws, 1.0f / (float)L.ntokens)) return fail("backward");
            double norm = clip_grad_norm(m.grads, m.n_params, clip);
            double lr = lr_at(&sched, u);
            adam_step(&adam, m.params, m.grads, (float)lr);
            losses[u] = (float)(L.loss / L.ntokens);
            nlls[u] = (float)(L.nll / L.ntokens);
            norms[u] = (float)norm;
            lrs[u] = (float)lr;
        }
        int n = m.n_tensors + 4;
        tensor_t *views = calloc((size_t)n, sizeof *views);
        tmodel_tensor_views(&m, m.params, views);
        const char *names[4] = {"losses", "nlls", "grad_norms", "lrs"};
        float *arrs[4] = {losses, nlls, norms, lrs};
        for (int i = 0; i < 4; i++) {
            tensor_t *t = &views[m.n_tensors + i];
            t->name = names[i];
            t->dtype = DT_F32;
            t->rank = 1;
            t->shape[0] = updates;
            t->numel = updates;
            t->data = arrs[i];
            t->nbytes = (size_t)updates * sizeof(float);
        }
        if (safetensors_write(argv[3], views, n, NULL, NULL, 0)) return fail("writing output");
        free(views);
        free(losses); free(nlls); free(norms); free(lrs);
        adam_free(&adam);
    }
    tmodel_ws_free(ws);
    tmodel_free(&m);
    weights_free(w);
    return 0;
}
