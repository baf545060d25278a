/* train_driver.c — drives the training code from files, for tests/test_train_torch.py.
 *
 *   train_driver step  IN.safetensors OUT.safetensors
 *       one forward + backward (dropout off) of batch 0: OUT holds every parameter gradient under
 *       the parameter's name (the mean over target tokens: grad_scale = 1 / ntokens) and, as
 *       metadata, loss_sum, nll_sum, ntokens, decoder_rows (the rows the decoder computed).
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

#define DRIVER_NAME "train_driver"
#include "train_driver_util.h"

typedef struct {
    tmodel_t *m;
    tmodel_ws_t *ws;
    int dropout_on;
} train_ctx_t;

static tern_status_t forward(void *ctx, const int *src, const int *tin, const int *tout, int B, int S, int T,
                             uint64_t step, train_loss_t *L) {
    train_ctx_t *c = ctx;
    return tmodel_forward(c->m, c->ws, src, tin, tout, B, S, T, c->dropout_on, 1, step, L);
}

static tern_status_t backward(void *ctx, float grad_scale) {
    train_ctx_t *c = ctx;
    return tmodel_backward(c->m, c->ws, grad_scale);
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
    driver_batches_t bt;
    if (read_batches(w, &bt)) return 1;
    tmodel_ws_t *ws;
    if (tmodel_ws_new(&ws, &m, bt.B * bt.S, bt.B * bt.T, bt.S, bt.T)) return fail("workspace");
    int dropout_on = c.dropout > 0 || c.attn_dropout > 0 || c.act_dropout > 0;
    train_ctx_t ctx = {&m, ws, dropout_on};
    driver_model_t dm = {&ctx, m.params, m.grads, m.n_params, forward, backward, NULL};

    if (!train) {
        tmodel_loss_t L;
        if (fwd_bwd(&dm, &bt, 0, 0, &L)) return 1;
        tensor_t *views = calloc((size_t)m.n_tensors, sizeof *views);
        tmodel_tensor_views(&m, m.grads, views);
        char rows[32]; /* the decoder rows Tern computed (target groups: <= B x T) */
        snprintf(rows, sizeof rows, "%d", tmodel_ws_decoder_rows(ws, NULL));
        if (write_step_extra(argv[3], views, m.n_tensors, &L, "decoder_rows", rows)) return 1;
        free(views);
    } else {
        tensor_t *views = calloc((size_t)m.n_tensors + 4, sizeof *views);
        tmodel_tensor_views(&m, m.params, views);
        if (run_train(w, &dm, &bt, 0, argv[3], views, m.n_tensors)) return 1;
        free(views);
    }
    tmodel_ws_free(ws);
    tmodel_free(&m);
    weights_free(w);
    return 0;
}
