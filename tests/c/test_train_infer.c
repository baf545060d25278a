/* test_train_infer.c — the training model and the inference engine compute the same function.
 *
 * A training model (src/train/model.c) with random parameters is written as a safetensors
 * checkpoint (its TransformerSpec tensors, tied names as "alias:" metadata, the scalar flags the
 * loader reads), loaded by the inference engine (transformer_build), and run step by step with the
 * training batch's decoder inputs (teacher forcing), on every inference path:
 *   plain    float32, unpacked weights (transformer_build)
 *   packed   float32 with the GEMM-packed weights of production (transformer_build +
 *            transformer_pack, as tern_model_load does); the test checks that layers were packed
 *   int8     int8 weights and activations (TERN_COMPUTE_INT8 + transformer_pack, as production)
 * each on two row schedules:
 *   straight one row per sentence for every step
 *   set_rows after step 1 the rows become (sentence 2, 0, 0): row 1 dropped, row 0 repeated
 *            (transformer_set_rows, the search's GETMATRIXBYROWS); after step 3 they shrink to
 *            (old rows 2, 0) = sentences (0, 2); each row keeps reading its sentence's inputs
 * Compared at every non-padding target position: the inference's log-softmax(logits) against the
 * log of the training forward's probabilities.
 *
 * Tolerances:
 *   float32 (plain, packed): |Δ log p| <= 1e-4 (measured <= 3e-6) and |Δp| <= 2e-6 (measured <= 5e-7):
 *   float32 through different GEMM shapes and kernels, packed vs padded batches.
 *   int8: the weights of the int8 run are first snapped to their per-row int8 grid (every linear
 *   and embedding row rounded to round(x·127/amax)·amax/127, which the loader's quantizer maps
 *   back exactly), so that the only difference left is the run-time int8 quantization of each
 *   GEMM's input rows: an error of at most half a step, u = 1/254 of the row's largest value, per
 *   element. To first order each of the model's G quantized GEMMs (4 per encoder layer, 7 per
 *   decoder layer, the projection: G = 23 here) then moves the logits by at most u times their
 *   scale Z = max(1, max|logit|) (layer norms keep the residual stream at unit scale), and
 *   log-softmax at most doubles a logit perturbation (|Δ log p_v| <= |Δz_v| + max|Δz|): the
 *   bound is |Δ log p| <= 2·G·u·Z (about 0.18·Z; measured: a tenth of it or less). The int8 run
 *   must also differ from float32 by more than 1e-5 somewhere (else the int8 path silently ran
 *   in float32).
 *
 * Covered: pre-norm and post-norm, shared/tied/separate embeddings, sinusoidal and learned
 * positions, ReLU/GELU/GELU-tanh, scaled and unscaled embeddings. This pins down the names,
 * shapes and semantics (positions starting at sin/cos(1·ts), embedding scale, layer-norm
 * placement, fused QKV order) that a checkpoint needs to translate as it was trained.
 */
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "model/transformer.h"
#include "model/transformer_desc.h"
#include "model/weights.h"
#include "train/model.h"

#define PROB_TOL 2e-6
#define LOGP_TOL_F32 1e-4
#define INT8_HALF_STEP (1.0 / 254.0)
#define INT8_MIN_DIFF 1e-5

enum { B = 3, S = 7, T = 6, VMAX = 128 };
static const int SRC[B * S] = {5, 6, 7, 8, 9, 10, 11, 3, 4, 0, 0, 0, 0, 0, 12, 13, 14, 15, 0, 0, 0};
static const int SRC_LEN[B] = {7, 2, 4};
static const int TIN[B * T] = {1, 5, 6, 7, 8, 9, 1, 10, 0, 0, 0, 0, 1, 11, 12, 13, 14, 0};
static const int TOUT[B * T] = {5, 6, 7, 8, 9, 2, 10, 2, 0, 0, 0, 0, 11, 12, 13, 14, 2, 0};

typedef enum { PATH_PLAIN, PATH_PACKED, PATH_INT8 } path_t;
static const char *PATH_NAMES[] = {"float32 plain", "float32 packed", "int8"};

/* Rounds every int8-quantizable weight row (linear weights, embeddings) to its int8 grid. */
static void snap_int8(tmodel_t *m) {
    for (int i = 0; i < m->n_tensors; i++) {
        const tmodel_tensor_t *t = &m->tensors[i];
        if (t->rank != 2 || !transformer_desc_quantizable(t->name)) continue;
        for (int r = 0; r < t->shape[0]; r++) {
            float *row = m->params + t->offset + (size_t)r * t->shape[1], amax = 0;
            for (int k = 0; k < t->shape[1]; k++) amax = fabsf(row[k]) > amax ? fabsf(row[k]) : amax;
            if (amax == 0) continue;
            float s = 127.0f / amax;
            for (int k = 0; k < t->shape[1]; k++) row[k] = nearbyintf(row[k] * s) / s;
        }
    }
    tmodel_params_changed(m);
}

/* Writes m as a checkpoint the loader reads; returns the loaded weights. */
static weights_t *write_and_load(const tmodel_t *m, char *path) {
    const tmodel_config_t *c = &m->cfg;
    int nt = m->n_tensors + 6;
    tensor_t *views = calloc((size_t)nt, sizeof *views);
    tmodel_tensor_views(m, m->params, views);
    static const char *flag_names[6] = {"encoder/num_heads", "encoder/pre_norm", "decoder/pre_norm",
                                        "encoder/activation", "encoder/scale_embeddings", "decoder/scale_embeddings"};
    int32_t flags[6] = {c->heads, c->pre_norm, c->pre_norm, (int32_t)c->act, c->scale_emb, c->scale_emb};
    for (int i = 0; i < 6; i++) {
        tensor_t *t = &views[m->n_tensors + i];
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
    for (int i = 0; i < m->n_aliases; i++) {
        snprintf(keys[i], sizeof keys[i], "alias:%s", m->alias_name[i]);
        kp[i] = keys[i];
        vp[i] = m->alias_target[i];
    }
    strcpy(path, "/tmp/tern-train-infer-XXXXXX");
    int fd = mkstemp(path);
    CHECK(fd >= 0);
    close(fd);
    CHECK(safetensors_write(path, views, nt, kp, vp, m->n_aliases) == TERN_OK);
    free(views);
    weights_t *w = NULL;
    CHECK(weights_load_safetensors(&w, path) == TERN_OK);
    return w;
}

/* Steps the inference through the batch on one path and schedule; returns the largest
 * |log p_infer - log p_train| (and the largest |p_infer - p_train| in *dp). */
static double run_path(const char *path, path_t kind, int reorder, const tmodel_config_t *c, const tmodel_ws_t *ws,
                       double *dp, double *zmax) {
    weights_t *w = NULL;
    CHECK(weights_load_safetensors(&w, path) == TERN_OK);
    transformer_t tm;
    tern_status_t st = transformer_build(&tm, w, kind == PATH_INT8 ? TERN_COMPUTE_INT8 : TERN_COMPUTE_FLOAT32, c->eps);
    CHECK_MSG(st == TERN_OK, "%s: %s", PATH_NAMES[kind], tern_last_error());
    if (st) {
        weights_free(w);
        *dp = *zmax = INFINITY;
        return INFINITY;
    }
    if (kind != PATH_PLAIN) CHECK(transformer_pack(&tm, w) == TERN_OK);
    if (kind == PATH_PACKED)
        CHECK_MSG(tm.packed_bytes > 0 && tm.enc[0].pk_qkv && tm.dec[1].pk_ffn2 && tm.pk_proj, "not packed: %zu bytes, %p %p %p", tm.packed_bytes, tm.enc[0].pk_qkv, tm.dec[1].pk_ffn2, tm.pk_proj);
    if (kind == PATH_INT8) CHECK(tm.int8 && tm.enc[0].qkv.kind == WEIGHT_S8 && tm.proj.kind == WEIGHT_S8);
    transformer_state_t *ts = transformer_state_new(&tm);
    const int *rows[B] = {SRC, SRC + S, SRC + 2 * S};
    CHECK(transformer_encode(ts, rows, SRC_LEN, B) == TERN_OK);
    int V = c->tgt_vocab, R = B, sent[B] = {0, 1, 2};
    float logits[B * VMAX];
    double worst = 0, worst_p = 0, z = 1;
    for (int t = 0; t < T; t++) {
        if (reorder && (t == 2 || t == 4)) {
            /* t 2: rows (2, 0, 0) — row 1 dropped, row 0 repeated; t 4: rows (old 2, old 0) */
            int parent3[3] = {2, 0, 0}, parent2[2] = {2, 0}, *parent = t == 2 ? parent3 : parent2, n = t == 2 ? 3 : 2;
            int ns[B];
            for (int r = 0; r < n; r++) ns[r] = sent[parent[r]];
            CHECK(transformer_set_rows(ts, parent, ns, n) == TERN_OK);
            R = n;
            memcpy(sent, ns, sizeof ns);
        }
        int tok[B];
        for (int r = 0; r < R; r++) tok[r] = TIN[sent[r] * T + t];
        CHECK(transformer_step(ts, tok, t, logits, NULL) == TERN_OK);
        for (int r = 0; r < R; r++) {
            int b = sent[r];
            if (TOUT[b * T + t] == c->pad_id) continue;
            const float *prow = tmodel_ws_prob_row(ws, b, t); /* every real target has its row */
            CHECK(prow != NULL);
            if (!prow) continue;
            const float *lg = logits + r * V;
            double mx = -INFINITY, sum = 0;
            for (int v = 0; v < V; v++) mx = lg[v] > mx ? lg[v] : mx;
            for (int v = 0; v < V; v++) sum += exp(lg[v] - mx);
            for (int v = 0; v < V; v++) z = fabs(lg[v]) > z ? fabs(lg[v]) : z;
            for (int v = 0; v < V; v++) {
                double lp = lg[v] - mx - log(sum), pt = prow[v];
                double e = fabs(lp - log(pt)), ep = fabs(exp(lp) - pt);
                if (e > worst) worst = e;
                if (ep > worst_p) worst_p = ep;
            }
        }
    }
    transformer_state_free(ts);
    transformer_free(&tm);
    weights_free(w);
    *dp = worst_p;
    *zmax = z;
    return worst;
}

static void infer_case(const char *name, int pre_norm, int share, int tie, int learned, activation_t act,
                       int scale_emb) {
    tmodel_config_t c = tmodel_default_config();
    /* widths oneDNN's packed layout takes without padding (else transformer_pack leaves layers plain) */
    c.src_vocab = 64; c.tgt_vocab = share ? 64 : 128;
    c.d = 64; c.heads = 4; c.ff = 128; c.enc_layers = 2; c.dec_layers = 2; c.max_pos = 12;
    c.pre_norm = pre_norm; c.share_emb = share; c.tie_proj = tie; c.learned_pos = learned; c.act = act;
    c.scale_emb = scale_emb; c.pad_id = 0; c.eps = 1e-6f; c.proj_bias = !tie;
    tmodel_t m;
    CHECK(tmodel_init(&m, &c) == TERN_OK);
    tmodel_init_params(&m, 5);
    uint64_t key = rng_mix64(99);
    for (size_t i = 0; i < m.n_params; i++) m.params[i] += (float)(0.2 * (rng_uniform(key, i) - 0.5));
    tmodel_ws_t *ws;
    CHECK(tmodel_ws_new(&ws, &m, B * S, B * T, S, T) == TERN_OK);
    printf("  %s\n", name);
    for (int pass = 0; pass < 2; pass++) { /* 0: float32 paths; 1: int8 (weights snapped to the int8 grid) */
        if (pass == 1) snap_int8(&m);
        char path[64];
        weights_t *w = write_and_load(&m, path);
        weights_free(w);
        tmodel_loss_t L;
        CHECK(tmodel_forward(&m, ws, SRC, TIN, TOUT, B, S, T, 0, 0, 0, &L) == TERN_OK);
        for (int k = pass ? PATH_INT8 : PATH_PLAIN; k <= (pass ? PATH_INT8 : PATH_PACKED); k++)
            for (int reorder = 0; reorder < 2; reorder++) {
                double dp = INFINITY, z = INFINITY, e = run_path(path, (path_t)k, reorder, &c, ws, &dp, &z);
                int G = 4 * c.enc_layers + 7 * c.dec_layers + 1; /* quantized GEMMs */
                double tol = k == PATH_INT8 ? 2.0 * G * INT8_HALF_STEP * z : LOGP_TOL_F32;
                printf("    %-15s %-9s max |log p_infer - log p_train| %.2e  (bound %.2e; |dp| %.2e)\n",
                       PATH_NAMES[k], reorder ? "set_rows" : "straight", e, tol, dp);
                CHECK_MSG(e <= tol, "%s, %s%s: log-probabilities differ by %.3e (tolerance %g)", name, PATH_NAMES[k],
                          reorder ? " after set_rows" : "", e, tol);
                if (k != PATH_INT8) CHECK_MSG(dp <= PROB_TOL, "%s, %s: probabilities differ by %.3e", name,
                                              PATH_NAMES[k], dp);
                else CHECK_MSG(e > INT8_MIN_DIFF, "%s: the int8 path equals float32 (%.3e): not quantized?", name, e);
            }
        unlink(path);
    }
    tmodel_ws_free(ws);
    tmodel_free(&m);
}

int main(void) {
    printf("training forward vs inference (transformer_build [+ transformer_pack] + transformer_step)\n");
    infer_case("pre-norm relu shared+tied sinusoid", 1, 1, 1, 0, ACT_RELU, 1);
    infer_case("post-norm gelu untied learned unscaled", 0, 0, 0, 1, ACT_GELU, 0);
    infer_case("pre-norm gelu-tanh tied-only learned", 1, 0, 1, 1, ACT_GELU_TANH, 1);
    infer_case("post-norm relu shared-untied sinusoid", 0, 1, 0, 0, ACT_RELU, 1);
    return check_report("test_train_infer");
}
