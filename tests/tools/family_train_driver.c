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
 *   family_train_driver rlstep IN.safetensors OUT.safetensors
 *       RL refinement's step (src/train/rl.h) with fixed samples: the references (batch 0) forward
 *       (no dropout) + backward with grad_scale alpha / ntokens, then rl_samples_backward of the
 *       samples rl/samples (B*M, Ls) int32 (source b's sample m in row b*M + m, its first
 *       rl/sample_len[b*M + m] ids; no start, no EOS) with scale 1 / (M * B), on a workspace of
 *       the reference batch's size (so that the samples run in several chunks). Metadata: alpha,
 *       start_id, eos_id. OUT: the gradients, rl/rewards (B*M float32: Tern's GLEU rewards) and,
 *       as metadata, loss_sum, nll_sum, ntokens of the references and rl_weighted_nll
 *       (sum (r - b) * nll of the samples).
 *   family_train_driver rltrain IN.safetensors OUT.safetensors
 *       `updates` updates of Adam at a constant lr (lr, beta1, beta2, adam_eps, clip_norm) on
 *       rlstep's objective, the same references and samples every update: OUT holds the final
 *       parameters and losses (references' nll per token), rl_terms (sum (r - b) nll / (M B)),
 *       grad_norms per update.
 * Also architecture "transformer" (through the family table; configuration keys as
 * tests/tools/train_driver.c's: d heads ff enc_layers dec_layers max_pos pre_norm act eps
 * learned_pos scale_emb share_emb tie_proj proj_bias label_smoothing).
 * `step` with metadata qat = "int8" (any family): the forward and backward run on the fake-quantized
 * parameters of src/train/qat.h (qat_enter before, qat_leave after, as the trainer's update does):
 * OUT holds the straight-through gradients; metadata qat = "N,K": N tensors fake-quantized, K 1 when
 * the parameters after qat_leave equal the loaded ones bit for bit (the master values kept), else 0.
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
#include "train/model.h"
#include "train/qat.h"
#include "train/rl.h"
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

/* `rlstep` (see the top). */
static int rl_step(const train_family_t *fam, train_model_t *m, const weights_t *w, const driver_batches_t *bt,
                   const char *out) {
    const tensor_t *ts = weights_get(w, "rl/samples"), *tl = weights_get(w, "rl/sample_len");
    if (!ts || ts->dtype != DT_I32 || ts->rank != 2 || !tl || tl->dtype != DT_I32 || tl->rank != 1 ||
        tl->shape[0] != ts->shape[0] || ts->shape[0] % bt->B) {
        fprintf(stderr, DRIVER_NAME ": rl/samples (B*M, Ls) and rl/sample_len (B*M) int32 needed\n");
        return 1;
    }
    int B = bt->B, S = bt->S, T = bt->T, n = (int)ts->shape[0], M = n / B, Ls = (int)ts->shape[1];
    const int *samples = ts->data, *slen = tl->data;
    const int **samp = malloc((size_t)n * sizeof *samp);
    float *rw32 = malloc((size_t)n * sizeof *rw32);
    double *rw = malloc((size_t)n * sizeof *rw);
    if (!samp || !rw || !rw32) return fail("memory");
    for (int i = 0; i < n; i++) samp[i] = samples + (size_t)i * Ls;
    rl_caps_t caps = {B * S, B * TERN_MAX(T, Ls + 1), S, TERN_MAX(T, Ls + 1)};
    void *ws;
    if (fam->ws_new(&ws, m, caps.src_tokens, caps.tgt_tokens, caps.max_S, caps.max_T)) return fail("workspace");
    rl_tokens_t tok = {(int)meta(w, "pad_id", 0), (int)meta(w, "start_id", 1), (int)meta(w, "eos_id", 2)};
    float alpha = (float)meta(w, "alpha", 0.017);
    memset(m->grads, 0, m->n_params * sizeof(float));
    train_loss_t L;
    if (fam->forward(m, ws, bt->src, bt->tin, bt->tout, B, S, T, 0, 1, 0, &L)) return fail("forward");
    if (fam->backward(m, ws, alpha / (float)L.ntokens)) return fail("backward");
    rl_stats_t st = {0};
    if (rl_samples_backward(fam, m, ws, &caps, &tok, bt->src, B, S, bt->tout, T, M, (const int *const *)samp, slen,
                            1.0f / (float)(M * B), rw, &st))
        return fail("rl_samples_backward");
    for (int i = 0; i < n; i++) rw32[i] = (float)rw[i];
    tensor_t *views = views_of(m, m->grads, 1);
    if (!views) return fail("memory");
    f32_vector(&views[m->n_tensors], "rl/rewards", rw32, n);
    char wn[64];
    snprintf(wn, sizeof wn, "%.17g", st.weighted_nll);
    if (write_step_extra(out, views, m->n_tensors + 1, &L, "rl_weighted_nll", wn)) return 1;
    free(views), free(samp), free(rw), free(rw32);
    fam->ws_free(ws);
    return 0;
}

/* `rltrain` (see the top): `updates` updates of Adam at a constant lr (metadata lr, beta1, beta2,
 * adam_eps; clip_norm) on the objective of `rlstep`, the same references and fixed samples every
 * update. OUT: the final parameters, losses (the references' nll per token), rl_terms (the
 * samples' sum (r - b) * nll / (M * B)), grad_norms (before clipping), per update. */
static int rl_train(const train_family_t *fam, train_model_t *m, const weights_t *w, const driver_batches_t *bt,
                    const char *out) {
    const tensor_t *ts = weights_get(w, "rl/samples"), *tl = weights_get(w, "rl/sample_len");
    if (!ts || ts->dtype != DT_I32 || ts->rank != 2 || !tl || tl->dtype != DT_I32 || tl->rank != 1 ||
        tl->shape[0] != ts->shape[0] || ts->shape[0] % bt->B) {
        fprintf(stderr, DRIVER_NAME ": rl/samples (B*M, Ls) and rl/sample_len (B*M) int32 needed\n");
        return 1;
    }
    int B = bt->B, S = bt->S, T = bt->T, n = (int)ts->shape[0], M = n / B, Ls = (int)ts->shape[1];
    int updates = (int)meta(w, "updates", 200);
    const int **samp = malloc((size_t)n * sizeof *samp);
    float *losses = malloc((size_t)updates * sizeof(float)), *terms = malloc((size_t)updates * sizeof(float));
    float *norms = malloc((size_t)updates * sizeof(float));
    if (!samp || !losses || !terms || !norms || updates < 1) return fail("memory or updates");
    for (int i = 0; i < n; i++) samp[i] = (const int *)ts->data + (size_t)i * Ls;
    rl_caps_t caps = {B * S, B * TERN_MAX(T, Ls + 1), S, TERN_MAX(T, Ls + 1)};
    void *ws;
    if (fam->ws_new(&ws, m, caps.src_tokens, caps.tgt_tokens, caps.max_S, caps.max_T)) return fail("workspace");
    rl_tokens_t tok = {(int)meta(w, "pad_id", 0), (int)meta(w, "start_id", 1), (int)meta(w, "eos_id", 2)};
    float alpha = (float)meta(w, "alpha", 0.017), lr = (float)meta(w, "lr", 1e-3), clip = (float)meta(w, "clip_norm", 0);
    adam_config_t ac = adam_default_config();
    ac.beta1 = (float)meta(w, "beta1", ac.beta1);
    ac.beta2 = (float)meta(w, "beta2", ac.beta2);
    ac.eps = (float)meta(w, "adam_eps", ac.eps);
    ac.weight_decay = 0;
    adam_t adam;
    if (adam_init(&adam, m->n_params, &ac)) return fail("adam");
    for (int u = 0; u < updates; u++) {
        memset(m->grads, 0, m->n_params * sizeof(float));
        train_loss_t L;
        if (fam->forward(m, ws, bt->src, bt->tin, bt->tout, B, S, T, 0, 1, 0, &L)) return fail("forward");
        if (fam->backward(m, ws, alpha / (float)L.ntokens)) return fail("backward");
        rl_stats_t st = {0};
        if (rl_samples_backward(fam, m, ws, &caps, &tok, bt->src, B, S, bt->tout, T, M, samp,
                                (const int *)tl->data, 1.0f / (float)(M * B), NULL, &st))
            return fail("rl_samples_backward");
        norms[u] = (float)clip_grad_norm(m->grads, m->n_params, clip);
        adam_step(&adam, m->params, m->grads, lr);
        fam->params_changed(m);
        losses[u] = (float)(L.nll / L.ntokens);
        terms[u] = (float)(st.weighted_nll / (M * B));
    }
    tensor_t *views = views_of(m, m->params, 3);
    if (!views) return fail("memory");
    f32_vector(&views[m->n_tensors + 0], "losses", losses, updates);
    f32_vector(&views[m->n_tensors + 1], "rl_terms", terms, updates);
    f32_vector(&views[m->n_tensors + 2], "grad_norms", norms, updates);
    if (safetensors_write(out, views, m->n_tensors + 3, NULL, NULL, 0)) return fail("writing output");
    free(views), free(samp), free(losses), free(terms), free(norms);
    adam_free(&adam);
    fam->ws_free(ws);
    return 0;
}

int main(int argc, char **argv) {
    if (argc != 4 || (strcmp(argv[1], "layout") && strcmp(argv[1], "step") && strcmp(argv[1], "train") &&
                      strcmp(argv[1], "rlstep") && strcmp(argv[1], "rltrain"))) {
        fprintf(stderr, "usage: family_train_driver layout|step|train|rlstep|rltrain IN.safetensors OUT.safetensors\n");
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
    dims.max_len = (int)meta(w, "max_pos", 1024);
    if (dims.src_vocab < 1 || dims.tgt_vocab < 1) {
        fprintf(stderr, "family_train_driver: need src_vocab and tgt_vocab metadata\n");
        return 1;
    }
    union {
        rnn_gru_config_t gru;
        gnmt_train_config_t gnmt;
        tmodel_config_t tf;
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
        c->clip_delta = (float)meta(w, "clip_delta", c->clip_delta);
        c->clip_gamma = (float)meta(w, "clip_gamma", c->clip_gamma);
        c->dropout = 0.0f;
        share = c->share_emb;
    } else if (!strcmp(arch, "transformer")) {
        tmodel_config_t *c = &cfg.tf;
        fam->default_config(c);
        c->d = (int)meta(w, "d", c->d);
        c->heads = (int)meta(w, "heads", c->heads);
        c->ff = (int)meta(w, "ff", c->ff);
        c->enc_layers = (int)meta(w, "enc_layers", c->enc_layers);
        c->dec_layers = (int)meta(w, "dec_layers", c->dec_layers);
        c->pre_norm = (int)meta(w, "pre_norm", c->pre_norm);
        c->act = (activation_t)(int)meta(w, "act", c->act);
        c->eps = (float)meta(w, "eps", c->eps);
        c->learned_pos = (int)meta(w, "learned_pos", c->learned_pos);
        c->scale_emb = (int)meta(w, "scale_emb", c->scale_emb);
        c->share_emb = (int)meta(w, "share_emb", c->share_emb);
        c->tie_proj = (int)meta(w, "tie_proj", c->tie_proj);
        c->proj_bias = (int)meta(w, "proj_bias", c->proj_bias);
        c->label_smoothing = (float)meta(w, "label_smoothing", c->label_smoothing);
        c->max_pos = 0; /* dims.max_len */
        c->dropout = c->attn_dropout = c->act_dropout = 0.0f;
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
    if (!strcmp(mode, "rlstep")) return rl_step(fam, &m, w, &bt, argv[3]);
    if (!strcmp(mode, "rltrain")) return rl_train(fam, &m, w, &bt, argv[3]);
    void *ws;
    const char *qm = weights_metadata(w, "qat"); /* int8-act: the linear layers' inputs too */
    m.act_fq = qm && qat_mode_parse(qm) == QAT_INT8_ACT;
    if (fam->ws_new(&ws, &m, bt.B * bt.S, bt.B * bt.T, bt.S, bt.T)) return fail("workspace");
    family_ctx_t ctx = {fam, &m, ws};
    driver_model_t dm = {&ctx, m.params, m.grads, m.n_params, forward, backward, params_changed};

    if (!strcmp(mode, "step")) {
        train_loss_t L;
        const char *qmode = weights_metadata(w, "qat");
        qat_t *q = NULL;
        float *before = NULL;
        if (qmode && strcmp(qmode, "none")) {
            if (qat_mode_parse(qmode) < 0) {
                fprintf(stderr, "family_train_driver: qat must be int8, int8-act or none, got '%s'\n", qmode);
                return 1;
            }
            if (qat_new(&q, &m, (qat_mode_t)qat_mode_parse(qmode))) return fail("qat");
            if (!(before = malloc(m.n_params * sizeof(float)))) return fail("out of memory");
            memcpy(before, m.params, m.n_params * sizeof(float));
            qat_enter(q, &m);
        }
        if (fwd_bwd(&dm, &bt, 0, 0, &L)) return 1;
        char qs[48] = "0,1";
        if (q) {
            qat_leave(q, &m);
            snprintf(qs, sizeof qs, "%d,%d", qat_count(q), !memcmp(before, m.params, m.n_params * sizeof(float)));
            qat_free(q);
            free(before);
        }
        tensor_t *views = views_of(&m, m.grads, 0);
        if (!views) return fail("writing output");
        if (write_step_extra(argv[3], views, m.n_tensors, &L, "qat", qs)) return 1;
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
