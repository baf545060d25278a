/* test_train_infer.c — the training model and the inference engine compute the same function.
 *
 * A training model (src/train/model.c) with random parameters is written as a safetensors
 * checkpoint (its TransformerSpec tensors, tied names as "alias:" metadata, the scalar flags the
 * loader reads), loaded by the inference engine (transformer_build), and run step by step with the
 * training batch's decoder inputs (teacher forcing). The inference's softmax(logits) at every
 * non-padding target position must equal the training forward's probabilities within 2e-6
 * (absolute; float32 through different GEMM shapes, packed vs padded batches), for pre-norm and
 * post-norm, shared/tied/separate embeddings, sinusoidal and learned positions, ReLU/GELU/GELU-tanh,
 * scaled and unscaled embeddings. This pins down the names, shapes and semantics (positions
 * starting at sin/cos(1·ts), embedding scale, layer-norm placement, fused QKV order) that a
 * checkpoint needs to translate as it was trained.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "model/transformer.h"
#include "model/weights.h"
#include "train/model.h"

#define PROB_TOL 2e-6

static void infer_case(const char *name, int pre_norm, int share, int tie, int learned, activation_t act,
                       int scale_emb) {
    tmodel_config_t c = tmodel_default_config();
    c.src_vocab = 17; c.tgt_vocab = share ? 17 : 19;
    c.d = 16; c.heads = 2; c.ff = 24; c.enc_layers = 2; c.dec_layers = 2; c.max_pos = 12;
    c.pre_norm = pre_norm; c.share_emb = share; c.tie_proj = tie; c.learned_pos = learned; c.act = act;
    c.scale_emb = scale_emb; c.pad_id = 0; c.eps = 1e-6f; c.proj_bias = !tie;
    tmodel_t m;
    CHECK(tmodel_init(&m, &c) == TERN_OK);
    tmodel_init_params(&m, 5);
    uint64_t key = rng_mix64(99);
    for (size_t i = 0; i < m.n_params; i++) m.params[i] += (float)(0.2 * (rng_uniform(key, i) - 0.5));

    /* checkpoint: parameters + flags + aliases */
    int nt = m.n_tensors + 6;
    tensor_t *views = calloc((size_t)nt, sizeof *views);
    tmodel_tensor_views(&m, m.params, views);
    static const char *flag_names[6] = {"encoder/num_heads", "encoder/pre_norm", "decoder/pre_norm",
                                        "encoder/activation", "encoder/scale_embeddings", "decoder/scale_embeddings"};
    int32_t flags[6] = {c.heads, c.pre_norm, c.pre_norm, (int32_t)c.act, c.scale_emb, c.scale_emb};
    for (int i = 0; i < 6; i++) {
        tensor_t *t = &views[m.n_tensors + i];
        t->name = flag_names[i];
        t->dtype = DT_I32;
        t->rank = 1;
        t->shape[0] = 1;
        t->numel = 1;
        t->data = &flags[i];
        t->nbytes = 4;
    }
    char keys[2][128];
    const char *kp[2], *vp[2];
    for (int i = 0; i < m.n_aliases; i++) {
        snprintf(keys[i], sizeof keys[i], "alias:%s", m.alias_name[i]);
        kp[i] = keys[i];
        vp[i] = m.alias_target[i];
    }
    char path[] = "/tmp/tern-train-infer-XXXXXX";
    int fd = mkstemp(path);
    CHECK(fd >= 0);
    close(fd);
    CHECK(safetensors_write(path, views, nt, kp, vp, m.n_aliases) == TERN_OK);
    weights_t *w = NULL;
    CHECK(weights_load_safetensors(&w, path) == TERN_OK);
    transformer_t tm;
    tern_status_t st = transformer_build(&tm, w, TERN_COMPUTE_FLOAT32, c.eps);
    CHECK_MSG(st == TERN_OK, "%s: %s", name, tern_last_error());

    /* the same batch through both */
    enum { B = 3, S = 7, T = 6 };
    int src[B * S] = {5, 6, 7, 8, 9, 10, 11, 3, 4, 0, 0, 0, 0, 0, 12, 13, 14, 15, 0, 0, 0};
    int src_len[B] = {7, 2, 4};
    int tin[B * T] = {1, 5, 6, 7, 8, 9, 1, 10, 0, 0, 0, 0, 1, 11, 12, 13, 14, 0};
    int tout[B * T] = {5, 6, 7, 8, 9, 2, 10, 2, 0, 0, 0, 0, 11, 12, 13, 14, 2, 0};
    tmodel_ws_t *ws;
    CHECK(tmodel_ws_new(&ws, &m, B * S, B * T, S, T) == TERN_OK);
    tmodel_loss_t L;
    CHECK(tmodel_forward(&m, ws, src, tin, tout, B, S, T, 0, 0, 0, &L) == TERN_OK);
    const float *probs = tmodel_ws_probs(ws);
    int V = c.tgt_vocab;
    double worst = 0;
    if (st == TERN_OK) {
        transformer_state_t *ts = transformer_state_new(&tm);
        const int *rows[B] = {src, src + S, src + 2 * S};
        CHECK(transformer_encode(ts, rows, src_len, B) == TERN_OK);
        float logits[B * 19];
        for (int t = 0; t < T; t++) {
            int tok[B];
            for (int b = 0; b < B; b++) tok[b] = tin[b * T + t];
            CHECK(transformer_step(ts, tok, t, logits, NULL) == TERN_OK);
            for (int b = 0; b < B; b++) {
                if (tout[b * T + t] == c.pad_id) continue;
                const float *lg = logits + b * V;
                double mx = -INFINITY, sum = 0;
                for (int v = 0; v < V; v++) mx = lg[v] > mx ? lg[v] : mx;
                for (int v = 0; v < V; v++) sum += exp(lg[v] - mx);
                for (int v = 0; v < V; v++) {
                    double p = exp(lg[v] - mx) / sum, e = fabs(p - probs[(size_t)(b * T + t) * V + v]);
                    if (e > worst) worst = e;
                }
            }
        }
        transformer_state_free(ts);
        transformer_free(&tm);
    }
    printf("  %-48s max |p_infer - p_train| %.2e\n", name, worst);
    CHECK_MSG(worst <= PROB_TOL, "%s: probabilities differ by %.3e", name, worst);
    tmodel_ws_free(ws);
    weights_free(w);
    unlink(path);
    free(views);
    tmodel_free(&m);
}

int main(void) {
    printf("training forward vs inference (transformer_build + transformer_step)\n");
    infer_case("pre-norm relu shared+tied sinusoid", 1, 1, 1, 0, ACT_RELU, 1);
    infer_case("post-norm gelu untied learned unscaled", 0, 0, 0, 1, ACT_GELU, 0);
    infer_case("pre-norm gelu-tanh tied-only learned", 1, 0, 1, 1, ACT_GELU_TANH, 1);
    infer_case("post-norm relu shared-untied sinusoid", 0, 1, 0, 0, ACT_RELU, 1);
    return check_report("test_train_infer");
}
