/* family_train_driver.c — drives any family of the training table (src/train/family.h) from
 * files, for the whole-model PyTorch checks (tests/test_rnn_gru_train_torch.py, GNMT's).
 *
 *   family_train_driver layout IN.safetensors OUT.safetensors
 *       creates the model from IN's metadata alone (no tensors needed), initializes it
 *       (init_params with metadata `seed`, default 1) and writes every parameter tensor under its
 *       checkpoint name to OUT; OUT's metadata: architecture, n_params, aliases ("name=target"
 *       joined by ';', the tied names, which are not stored).
 *   family_train_driver step IN.safetensors OUT.safetensors
 *       loads the parameters (the family's load), one forward (train 0: no dropout) + backward of
 *       batch 0 with grad_scale = 1 / ntokens: OUT holds every parameter gradient under the
 *       parameter's name and, as metadata, loss_sum, nll_sum, ntokens.
 *   family_train_driver train IN.safetensors OUT.safetensors
 *       `updates` updates with the trainer's optimizer code (optim.h: Adam, the inverse_sqrt
 *       schedule or, given `sgd_after`, GNMT's Adam-then-SGD schedule, clip_grad_norm), update u
 *       on batch u % NB as the trainer does one update: OUT holds losses, nlls, grad_norms, lrs
 *       (updates; the loss and nll per target token) and the final parameters.
 *
 * IN: the batches as int32 tensors batch/src (NB, B, S), batch/tgt_in (NB, B, T), batch/tgt_out
 * (NB, B, T), right-padded with pad_id; the parameters (step, train) under their checkpoint names;
 * the configuration as safetensors metadata (strings):
 *   architecture: "rnn-gru" or "gnmt" (any registered training family; default "transformer" is
 *     not supported here: tests/tools/train_driver.c drives it)
 *   rnn-gru: src_vocab tgt_vocab pad_id emb enc_hidden dec_hidden att out share_emb tie_proj
 *     layer_norm label_smoothing init_scale
 *   gnmt: src_vocab tgt_vocab pad_id hidden att enc_layers dec_layers share_emb tie_proj
 *     label_smoothing init_range
 *   joint_vocab (default: share_emb > 0) — one vocabulary for both sides, as the data would say
 *   train: updates lr warmup warmup_init_lr beta1 beta2 adam_eps weight_decay decoupled clip_norm;
 *     optionally sgd_after sgd_lr decay_start decay_interval decay_times (GNMT's schedule, no
 *     warm-up: Adam at lr for sgd_after updates, then SGD at sgd_lr, halved as optim.h says).
 * Dropout is always 0. A missing tensor or a mismatched configuration: a message, exit 1.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/weights.h"
#include "train/family.h"
#include "train/gnmt_table.h"
#include "train/optim.h"
#include "train/rnn_gru_train.h"

static int fail(const char *what) {
    fprintf(stderr, "family_train_driver: %s: %s\n", what, tern_last_error());
    return 1;
}

static double meta(const weights_t *w, const char *key, double dflt) {
    const char *v = weights_metadata(w, key);
    return v ? atof(v) : dflt;
}

static const int *batch_tensor(const weights_t *w, const char *name, int *nb, int *b, int *len) {
    const tensor_t *t = weights_get(w, name);
    if (!t || t->dtype != DT_I32 || t->rank != 3) {
        fprintf(stderr, "family_train_driver: %s: missing or not int32 (NB, B, L)\n", name);
        return NULL;
    }
    *nb = (int)t->shape[0];
    *b = (int)t->shape[1];
    *len = (int)t->shape[2];
    return t->data;
}

/* Every tensor of buf (params or grads) as views, plus `extra` more slots at the end. */
static tensor_t *views_of(const train_model_t *m, const float *buf, int extra) {
    tensor_t *v = calloc((size_t)(m->n_tensors + extra), sizeof *v);
    if (v) train_model_views(m, buf, v);
    return v;
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

int main(int argc, char **argv) {
    if (argc != 4 || (strcmp(argv[1], "layout") && strcmp(argv[1], "step") && strcmp(argv[1], "train"))) {
        fprintf(stderr, "usage: family_train_driver layout|step|train IN.safetensors OUT.safetensors\n");
        return 2;
    }
    const char *mode = argv[1];
    weights_t *w;
    if (weights_load_safetensors(&w, argv[2])) return fail("loading input");
    const char *arch = weights_metadata(w, "architecture");
    if (!arch) {
        fprintf(stderr, "family_train_driver: %s: no `architecture` metadata\n", argv[2]);
        return 1;
    }
    const train_family_t *fam = train_family_find(arch);
    if (!fam) {
        fprintf(stderr, "family_train_driver: unknown architecture \"%s\"\n", arch);
        return 1;
    }

    train_data_dims_t dims = {0};
    dims.src_vocab = (int)meta(w, "src_vocab", 0);
    dims.tgt_vocab = (int)meta(w, "tgt_vocab", 0);
    dims.pad_id = (int)meta(w, "pad_id", 0);
    dims.max_len = 1024;
    if (dims.src_vocab < 1 || dims.tgt_vocab < 1) {
        fprintf(stderr, "family_train_driver: need src_vocab and tgt_vocab metadata\n");
        return 1;
    }
    union {
        rnn_gru_config_t gru;
        gnmt_train_config_t gnmt;
    } cfg;
    int share;
    if (!strcmp(arch, "rnn-gru")) {
        rnn_gru_config_t *c = &cfg.gru;
        fam->default_config(c);
        c->emb = (int)meta(w, "emb", c->emb);
        c->enc_hidden = (int)meta(w, "enc_hidden", c->enc_hidden);
        c->dec_hidden = (int)meta(w, "dec_hidden", c->dec_hidden);
        c->att = (int)meta(w, "att", c->att);
        c->out = (int)meta(w, "out", c->out);
        c->share_emb = (int)meta(w, "share_emb", c->share_emb);
        c->tie_proj = (int)meta(w, "tie_proj", c->tie_proj);
        c->layer_norm = (int)meta(w, "layer_norm", c->layer_norm);
        c->label_smoothing = (float)meta(w, "label_smoothing", c->label_smoothing);
        c->init_scale = (float)meta(w, "init_scale", c->init_scale);
        c->dropout = 0.0f;
        share = c->share_emb;
    } else if (!strcmp(arch, "gnmt")) {
        gnmt_train_config_t *c = &cfg.gnmt;
        fam->default_config(c);
        c->hidden = (int)meta(w, "hidden", c->hidden);
        c->att = (int)meta(w, "att", c->att);
        c->enc_layers = (int)meta(w, "enc_layers", c->enc_layers);
        c->dec_layers = (int)meta(w, "dec_layers", c->dec_layers);
        c->share_emb = (int)meta(w, "share_emb", c->share_emb);
        c->tie_proj = (int)meta(w, "tie_proj", c->tie_proj);
        c->label_smoothing = (float)meta(w, "label_smoothing", c->label_smoothing);
        c->init_range = (float)meta(w, "init_range", c->init_range);
        c->dropout = 0.0f;
        share = c->share_emb;
    } else {
        fprintf(stderr, "family_train_driver: architecture \"%s\" has no configuration reader here "
                "(the Transformer: tests/tools/train_driver.c)\n", arch);
        return 1;
    }
    dims.joint_vocab = (int)meta(w, "joint_vocab", share > 0);

    train_model_t m;
    if (fam->create(&m, &cfg, &dims)) return fail("model");

    if (!strcmp(mode, "layout")) {
        fam->init_params(&m, (uint64_t)meta(w, "seed", 1));
        tensor_t *views = views_of(&m, m.params, 0);
        size_t cap = 64;
        for (int i = 0; i < m.n_aliases; i++) cap += strlen(m.alias_names[i]) + strlen(m.alias_targets[i]) + 2;
        char *aliases = calloc(cap, 1), np[32];
        if (!views || !aliases) {
            fprintf(stderr, "family_train_driver: out of memory\n");
            return 1;
        }
        for (int i = 0; i < m.n_aliases; i++)
            snprintf(aliases + strlen(aliases), cap - strlen(aliases), "%s%s=%s", i ? ";" : "", m.alias_names[i],
                     m.alias_targets[i]);
        snprintf(np, sizeof np, "%zu", m.n_params);
        const char *keys[] = {"architecture", "n_params", "aliases"}, *vals[] = {arch, np, aliases};
        if (safetensors_write(argv[3], views, m.n_tensors, keys, vals, 3)) return fail("writing output");
        free(views);
        free(aliases);
        fam->destroy(&m);
        weights_free(w);
        return 0;
    }

    if (fam->load(&m, w)) return fail("parameters");
    fam->params_changed(&m);
    int NB, B, S, NB2, B2, T, NB3, B3, T3;
    const int *src = batch_tensor(w, "batch/src", &NB, &B, &S);
    const int *tin = batch_tensor(w, "batch/tgt_in", &NB2, &B2, &T);
    const int *tout = batch_tensor(w, "batch/tgt_out", &NB3, &B3, &T3);
    if (!src || !tin || !tout || NB != NB2 || NB != NB3 || B != B2 || B != B3 || T != T3) {
        fprintf(stderr, "family_train_driver: batch tensors disagree\n");
        return 1;
    }
    void *ws;
    if (fam->ws_new(&ws, &m, B * S, B * T, S, T)) return fail("workspace");

    if (!strcmp(mode, "step")) {
        train_loss_t L;
        memset(m.grads, 0, m.n_params * sizeof(float));
        if (fam->forward(&m, ws, src, tin, tout, B, S, T, 0, 1, 0, &L)) return fail("forward");
        if (L.ntokens < 1) {
            fprintf(stderr, "family_train_driver: batch 0 has no target tokens\n");
            return 1;
        }
        if (fam->backward(&m, ws, 1.0f / (float)L.ntokens)) return fail("backward");
        tensor_t *views = views_of(&m, m.grads, 0);
        char ls[64], ns[64], nt[32];
        snprintf(ls, sizeof ls, "%.17g", L.loss);
        snprintf(ns, sizeof ns, "%.17g", L.nll);
        snprintf(nt, sizeof nt, "%d", L.ntokens);
        const char *keys[] = {"loss_sum", "nll_sum", "ntokens"}, *vals[] = {ls, ns, nt};
        if (!views || safetensors_write(argv[3], views, m.n_tensors, keys, vals, 3)) return fail("writing output");
        free(views);
    } else {
        int updates = (int)meta(w, "updates", 200);
        if (updates < 1) {
            fprintf(stderr, "family_train_driver: updates must be >= 1\n");
            return 1;
        }
        lr_schedule_t sched = {0};
        sched.lr = (float)meta(w, "lr", 5e-4);
        if (weights_metadata(w, "sgd_after")) {
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
        if (adam_init(&adam, m.n_params, &ac)) return fail("adam");
        float *losses = malloc((size_t)updates * sizeof(float)), *nlls = malloc((size_t)updates * sizeof(float));
        float *norms = malloc((size_t)updates * sizeof(float)), *lrs = malloc((size_t)updates * sizeof(float));
        if (!losses || !nlls || !norms || !lrs) {
            fprintf(stderr, "family_train_driver: out of memory\n");
            return 1;
        }
        for (int u = 0; u < updates; u++) {
            int k = u % NB;
            const int *s = src + (size_t)k * B * S, *ti = tin + (size_t)k * B * T, *to = tout + (size_t)k * B * T;
            train_loss_t L;
            memset(m.grads, 0, m.n_params * sizeof(float));
            if (fam->forward(&m, ws, s, ti, to, B, S, T, 0, 1, (uint64_t)u, &L)) return fail("forward");
            if (L.ntokens < 1) {
                fprintf(stderr, "family_train_driver: batch %d has no target tokens\n", k);
                return 1;
            }
            if (fam->backward(&m, ws, 1.0f / (float)L.ntokens)) return fail("backward");
            double norm = clip_grad_norm(m.grads, m.n_params, clip);
            double lr = lr_at(&sched, u);
            if (lr_use_sgd(&sched, u)) sgd_step(m.params, m.grads, m.n_params, (float)lr, ac.weight_decay);
            else adam_step(&adam, m.params, m.grads, (float)lr);
            fam->params_changed(&m);
            losses[u] = (float)(L.loss / L.ntokens);
            nlls[u] = (float)(L.nll / L.ntokens);
            norms[u] = (float)norm;
            lrs[u] = (float)lr;
        }
        tensor_t *views = views_of(&m, m.params, 4);
        if (!views) {
            fprintf(stderr, "family_train_driver: out of memory\n");
            return 1;
        }
        f32_vector(&views[m.n_tensors + 0], "losses", losses, updates);
        f32_vector(&views[m.n_tensors + 1], "nlls", nlls, updates);
        f32_vector(&views[m.n_tensors + 2], "grad_norms", norms, updates);
        f32_vector(&views[m.n_tensors + 3], "lrs", lrs, updates);
        if (safetensors_write(argv[3], views, m.n_tensors + 4, NULL, NULL, 0)) return fail("writing output");
        free(views);
        free(losses), free(nlls), free(norms), free(lrs);
        adam_free(&adam);
    }
    fam->ws_free(ws);
    fam->destroy(&m);
    weights_free(w);
    return 0;
}
