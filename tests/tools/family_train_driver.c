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

#define DRIVER_NAME "family_train_driver"
#include "train_driver_util.h"

/* Every tensor of buf (params or grads) as views, plus `extra` more slots at the end. */
static tensor_t *views_of(const train_model_t *m, const float *buf, int extra) {
    tensor_t *v = calloc((size_t)(m->n_tensors + extra), sizeof *v);
    if (v) train_model_views(m, buf, v);
    return v;
}

typedef struct {
    const train_family_t *fam;
    train_model_t *m;
    void *ws;
} family_ctx_t;

static tern_status_t forward(void *ctx, const int *src, const int *tin, const int *tout, int B, int S, int T,
                             uint64_t step, train_loss_t *L) {
    family_ctx_t *c = ctx;
    return c->fam->forward(c->m, c->ws, src, tin, tout, B, S, T, 0, 1, step, L);
}

static tern_status_t backward(void *ctx, float grad_scale) {
    family_ctx_t *c = ctx;
    return c->fam->backward(c->m, c->ws, grad_scale);
}

static void params_changed(void *ctx) {
    family_ctx_t *c = ctx;
    c->fam->params_changed(c->m);
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
    driver_batches_t bt;
    if (read_batches(w, &bt)) return 1;
    void *ws;
    if (fam->ws_new(&ws, &m, bt.B * bt.S, bt.B * bt.T, bt.S, bt.T)) return fail("workspace");
    family_ctx_t ctx = {fam, &m, ws};
    driver_model_t dm = {&ctx, m.params, m.grads, m.n_params, forward, backward, params_changed};

    if (!strcmp(mode, "step")) {
        train_loss_t L;
        if (fwd_bwd(&dm, &bt, 0, 0, &L)) return 1;
        tensor_t *views = views_of(&m, m.grads, 0);
        if (!views) return fail("writing output");
        if (write_step(argv[3], views, m.n_tensors, &L)) return 1;
        free(views);
    } else {
        tensor_t *views = views_of(&m, m.params, 4);
        if (!views) {
            fprintf(stderr, "family_train_driver: out of memory\n");
            return 1;
        }
        if (run_train(w, &dm, &bt, 1, argv[3], views, m.n_tensors)) return 1;
        free(views);
    }
    fam->ws_free(ws);
    fam->destroy(&m);
    weights_free(w);
    return 0;
}
