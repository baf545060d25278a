/* test_gnmt.c — the GNMT family (architecture "gnmt"): training table, inference table, parity.
 *
 * For each shape (3+3 layers with shared embeddings; 1+2 layers, separate vocabularies and a tied
 * projection (the bidirectional layer is then the top encoder layer, Dv = 2H); 2+1 layers):
 *   1. the training table registered as "gnmt" creates and initializes the model (GNMT's uniform
 *      +-0.04 init: every parameter within it); its backward equals central finite differences of
 *      its forward loss (no dropout, no label smoothing) on 40 parameters spread over every tensor
 *      within 1e-3 + 3e-2 relative (float32 loss differences with h = 1e-2);
 *   2. the model written as a Tern model directory (model.safetensors with the description's
 *      names, aliases and config keys) builds through the registry (model_family_find with
 *      architecture "gnmt");
 *   3. parity: the training forward's log-probs (log-softmax of its logits) equal the inference
 *      step's for every valid (sentence, step) within 1e-4, float32, with the rows selected by
 *      set_rows between steps (rows repeated: 1 -> 2 and 3 rows; rows dropped and reordered);
 *      int8 (every matrix quantized per row): within 0.02 (measured 0.0011-0.0028);
 *      a second state restricted by set_vocab to the odd target ids writes those columns of the
 *      logits (within 1e-5), float32 and int8;
 *   4. the attention rows the step writes (coverage penalty) are distributions over each
 *      sentence's source (sum 1 within 1e-5, 0 past its length);
 *   5. bad input: a model directory with a tensor missing, and one whose config key disagrees with
 *      the tensors, fail to build with an error naming the file and the tensor.
 * Dropout (on the embeddings, on the input of every encoder and decoder layer above the first, and
 * before the softmax): with dropout 0 a training forward (train = 1) gives exactly the loss of the
 * evaluation forward; with dropout 0.3 and label smoothing 0.1 the backward equals central finite
 * differences of the training forward under the same masks (same seed and step), same tolerance.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "model/family.h"
#include "model/gnmt_desc.h"
#include "model/model_dir.h"
#include "tern.h"
#include "train/family.h"
#include "train/gnmt_table.h"

typedef struct {
    const char *label;
    int Vs, Vt, joint, H, A, Le, Ld, tie;
} shape_t;

enum { B = 3, S = 7, T = 6 };
static const int SRC_LEN[B] = {5, 3, 7}, TGT_LEN[B] = {6, 4, 5};

static void log_softmax_row(double *out, const float *x, int V) {
    double mx = -INFINITY, s = 0;
    for (int j = 0; j < V; j++) mx = x[j] > mx ? x[j] : mx;
    for (int j = 0; j < V; j++) s += exp(x[j] - mx);
    for (int j = 0; j < V; j++) out[j] = x[j] - mx - log(s);
}

/* Writes the model as a directory; drop: a tensor left out; bad_hidden: the config key changed. */
static tern_status_t write_model(const char *dir, const train_model_t *m, const char *drop, int bad_hidden) {
    int n = m->n_tensors;
    const tensor_t *sc;
    int ns = m->family->scalars(m, &sc);
    tensor_t *t = calloc((size_t)(n + ns), sizeof *t);
    train_model_views(m, m->params, t);
    int k = 0;
    for (int i = 0; i < n; i++)
        if (!drop || strcmp(t[i].name, drop)) t[k++] = t[i];
    int32_t hid = 0;
    for (int i = 0; i < ns; i++) {
        t[k] = sc[i];
        if (bad_hidden && !strcmp(sc[i].name, "gnmt/hidden_size")) {
            hid = *(const int32_t *)sc[i].data + 1;
            t[k].data = &hid;
        }
        k++;
    }
    const char *mk[] = {"ct2_spec"}, *mv[] = {GNMT_SPEC_NAME};
    tern_status_t st = model_dir_write_weights(dir, t, k, m->alias_names, m->alias_targets, m->n_aliases, mk, mv, 1);
    free(t);
    return st;
}

static void run_shape(const shape_t *sh) {
    const train_family_t *fam = train_family_find("gnmt");
    CHECK(fam != NULL);
    if (!fam) return;
    gnmt_train_config_t cfg;
    fam->default_config(&cfg);
    cfg.hidden = sh->H, cfg.att = sh->A, cfg.enc_layers = sh->Le, cfg.dec_layers = sh->Ld;
    cfg.share_emb = -1, cfg.tie_proj = sh->tie, cfg.init_range = 0.04f, cfg.dropout = 0, cfg.label_smoothing = 0;
    train_data_dims_t dd = {sh->Vs, sh->Vt, sh->joint, 0, 64};
    train_model_t m;
    tern_status_t st = fam->create(&m, &cfg, &dd);
    CHECK_MSG(!st, "%s: create: %s", sh->label, tern_last_error());
    if (st) return;
    fam->init_params(&m, 7);
    /* GNMT's init: every parameter in [-0.04, 0.04] */
    float amax = 0;
    for (size_t i = 0; i < m.n_params; i++) amax = fabsf(m.params[i]) > amax ? fabsf(m.params[i]) : amax;
    CHECK_MSG(amax <= 0.04f && amax > 0.03f, "%s: max |param| %g", sh->label, amax);
    /* larger weights than the init so that the function is far from uniform */
    for (size_t i = 0; i < m.n_params; i++) m.params[i] *= 12.0f;

    int src[B * S], tin[B * T], tout[B * T];
    unsigned r = 12345;
    for (int b = 0; b < B; b++) {
        for (int s = 0; s < S; s++) src[b * S + s] = s < SRC_LEN[b] ? 1 + (int)((r = r * 1103515245u + 12345u) >> 16) % (sh->Vs - 1) : 0;
        for (int t = 0; t < T; t++) {
            tin[b * T + t] = t < TGT_LEN[b] ? 1 + (int)((r = r * 1103515245u + 12345u) >> 16) % (sh->Vt - 1) : 0;
            tout[b * T + t] = t < TGT_LEN[b] ? 1 + (int)((r = r * 1103515245u + 12345u) >> 16) % (sh->Vt - 1) : 0;
        }
    }
    void *ws = NULL;
    st = fam->ws_new(&ws, &m, B * S, B * T, S, T);
    CHECK(!st);
    if (st) return;

    /* 1. backward vs finite differences */
    train_loss_t L;
    memset(m.grads, 0, m.n_params * sizeof(float));
    CHECK(!fam->forward(&m, ws, src, tin, tout, B, S, T, 1, 1, 1, &L));
    CHECK(!fam->backward(&m, ws, 1.0f));
    int nfd = 0, badfd = 0;
    double worst = 0;
    for (int i = 0; i < 40; i++) {
        const train_tensor_t *tt = &m.tensors[i % m.n_tensors];
        size_t j = tt->offset + ((size_t)i * 7919u) % tt->numel;
        if (strstr(tt->name, "embeddings")) { /* a row that the batch reads */
            int tok = strstr(tt->name, "encoder") ? src[i % (B * S) % SRC_LEN[0]] : tin[0];
            j = tt->offset + (size_t)tok * (size_t)tt->shape[1] + (size_t)i % (size_t)tt->shape[1];
        }
        float keep = m.params[j], h = 1e-2f;
        train_loss_t lp, lm;
        m.params[j] = keep + h;
        fam->forward(&m, ws, src, tin, tout, B, S, T, 0, 1, 1, &lp);
        m.params[j] = keep - h;
        fam->forward(&m, ws, src, tin, tout, B, S, T, 0, 1, 1, &lm);
        m.params[j] = keep;
        double fd = (lp.loss - lm.loss) / (2.0 * h), an = m.grads[j];
        double err = fabs(fd - an) / (1e-3 + 3e-2 * fabs(fd));
        worst = err > worst ? err : worst;
        nfd++;
        if (err > 1) {
            badfd++;
            fprintf(stderr, "%s: %s[%zu]: fd %.6g, backward %.6g\n", sh->label, tt->name, j - tt->offset, fd, an);
        }
    }
    CHECK_MSG(badfd == 0, "%s: %d of %d gradients off", sh->label, badfd, nfd);
    printf("%s: gradient check %d parameters, worst error/tolerance %.3f\n", sh->label, nfd, worst);

    /* the training forward's logits */
    CHECK(!gnmt_train_forward_logits(&m, ws, src, tin, B, S, T, 0, 0, 0));
    int V = sh->Vt;
    double *ref = malloc(sizeof *ref * (size_t)B * T * V), *lp = malloc(sizeof *lp * (size_t)V);
    const float *lg = gnmt_train_logits(ws);
    for (int i = 0; i < B * T; i++) log_softmax_row(ref + (size_t)i * V, lg + (size_t)i * V, V);

    /* 2. the model directory, through the registry */
    char dir[] = "/tmp/test_gnmt_XXXXXX";
    CHECK(mkdtemp(dir) != NULL);
    st = write_model(dir, &m, NULL, 0);
    CHECK_MSG(!st, "write: %s", tern_last_error());
    char path[512];
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    model_config_t mc;
    model_config_defaults(&mc);
    snprintf(mc.architecture, sizeof mc.architecture, "gnmt");
    const model_family_t *mf = NULL;
    CHECK(!model_family_find(&mf, &mc, "config.json") && mf == &model_family_gnmt);
    for (int q = 0; q < 2 && mf; q++) {
        weights_t *w = NULL;
        CHECK(!weights_load_safetensors(&w, path));
        void *net = NULL;
        st = mf->build(&net, w, &mc, q ? TERN_COMPUTE_INT8 : TERN_COMPUTE_FLOAT32, 0);
        CHECK_MSG(!st, "%s: build: %s", sh->label, tern_last_error());
        if (st) {
            weights_free(w);
            continue;
        }
        tern_model_info_t info;
        memset(&info, 0, sizeof info);
        mf->describe(net, &info);
        CHECK(!strcmp(info.family, "gnmt") && info.int8 == q && info.target_vocab_size == V);
        void *state = mf->state_new(net), *vstate = mf->state_new(net);
        const int *sp[B] = {src, src + S, src + 2 * S};
        CHECK(!mf->encode(state, sp, SRC_LEN, B));
        /* a second state restricted to the odd target ids (set_vocab), run in lockstep */
        int vids[64], nv = 0;
        for (int j = 1; j < V; j += 2) vids[nv++] = j;
        CHECK(!mf->encode(vstate, sp, SRC_LEN, B));
        CHECK(!mf->set_vocab(vstate, vids, nv));
        double vmax = 0;
        CHECK_EQ_INT(mf->source_len(state), S);
        /* rows: step 0 one per sentence; then [s0, s0, s1, s2, s2, s2]; from step 3 [s0(row1), s2, s2(row5), s0(row0)] */
        int rows[8] = {0, 1, 2}, R = B;
        float out[8 * 64], attn[8 * S];
        double maxd = 0, attn_err = 0;
        int attn_zero = 1;
        for (int t = 0; t < T; t++) {
            if (t == 1) {
                int parent[6] = {0, 0, 1, 2, 2, 2}, sent[6] = {0, 0, 1, 2, 2, 2};
                CHECK(!mf->set_rows(state, parent, sent, 6));
                CHECK(!mf->set_rows(vstate, parent, sent, 6));
                R = 6;
                memcpy(rows, sent, sizeof sent);
            } else if (t == 3) {
                int parent[4] = {1, 3, 5, 0}, sent[4] = {0, 2, 2, 0};
                CHECK(!mf->set_rows(state, parent, sent, 4));
                CHECK(!mf->set_rows(vstate, parent, sent, 4));
                R = 4;
                memcpy(rows, sent, sizeof sent);
            }
            int tok[8];
            for (int i = 0; i < R; i++) tok[i] = tin[rows[i] * T + t];
            CHECK(!mf->step(state, tok, t, out, attn));
            float vout[8 * 64];
            CHECK(!mf->step(vstate, tok, t, vout, NULL));
            for (int i = 0; i < R; i++)
                for (int j = 0; j < nv; j++) {
                    double dv = fabs(vout[i * nv + j] - out[(size_t)i * V + vids[j]]);
                    vmax = dv > vmax ? dv : vmax;
                }
            for (int i = 0; i < R; i++) {
                int b = rows[i];
                double sum = 0;
                for (int j = 0; j < S; j++) {
                    sum += attn[i * S + j];
                    if (j >= SRC_LEN[b] && attn[i * S + j] != 0.0f) attn_zero = 0;
                }
                attn_err = fabs(sum - 1) > attn_err ? fabs(sum - 1) : attn_err;
                if (t >= TGT_LEN[b]) continue;
                log_softmax_row(lp, out + (size_t)i * V, V);
                for (int j = 0; j < V; j++) {
                    double d = fabs(lp[j] - ref[((size_t)b * T + t) * V + j]);
                    maxd = d > maxd ? d : maxd;
                }
            }
        }
        printf("%s: %s step vs training forward: max |log-prob difference| %.3g\n", sh->label,
               q ? "int8" : "float32", maxd);
        if (q) CHECK_MSG(maxd <= 0.02, "%s int8: %g", sh->label, maxd);
        else CHECK_MSG(maxd <= 1e-4, "%s float32: %g", sh->label, maxd);
        CHECK_MSG(attn_err <= 1e-5 && attn_zero, "%s: attention rows: sum error %g, zero past the source %d",
                  sh->label, attn_err, attn_zero);
        CHECK_MSG(vmax <= 1e-5, "%s: set_vocab logits differ by %g", sh->label, vmax);
        mf->state_free(state);
        mf->state_free(vstate);
        mf->free(net);
        weights_free(w);
    }

    /* 5. bad input */
    if (mf) {
        const char *drop = "decoder/layer_0/weight_hh";
        for (int k = 0; k < 2; k++) {
            char bdir[] = "/tmp/test_gnmt_bad_XXXXXX";
            CHECK(mkdtemp(bdir) != NULL);
            CHECK(!write_model(bdir, &m, k == 0 ? drop : NULL, k == 1));
            char bp[512];
            snprintf(bp, sizeof bp, "%s/model.safetensors", bdir);
            weights_t *w = NULL;
            CHECK(!weights_load_safetensors(&w, bp));
            void *net = NULL;
            st = mf->build(&net, w, &mc, TERN_COMPUTE_FLOAT32, 0);
            const char *e = tern_last_error();
            CHECK_MSG(st != TERN_OK && net == NULL, "%s: bad model %d built", sh->label, k);
            CHECK_MSG(strstr(e, bp) != NULL && (k == 0 ? strstr(e, drop) != NULL : strstr(e, "tensor '") != NULL),
                      "%s: error '%s'", sh->label, e);
            printf("%s: bad model %d: %s\n", sh->label, k, e);
            weights_free(w);
            char cmd[600];
            snprintf(cmd, sizeof cmd, "rm -rf '%s'", bdir);
            CHECK(system(cmd) == 0);
        }
    }
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    CHECK(system(cmd) == 0);
    free(ref);
    free(lp);
    fam->ws_free(ws);
    fam->destroy(&m);
}

/* Dropout 0.3 under fixed masks: backward vs finite differences of the training forward. */
static void dropout_grad(const shape_t *sh) {
    const train_family_t *fam = train_family_find("gnmt");
    gnmt_train_config_t cfg;
    fam->default_config(&cfg);
    cfg.hidden = sh->H, cfg.att = sh->A, cfg.enc_layers = sh->Le, cfg.dec_layers = sh->Ld;
    cfg.share_emb = -1, cfg.tie_proj = sh->tie, cfg.init_range = 0.04f, cfg.label_smoothing = 0.1f;
    train_data_dims_t dd = {sh->Vs, sh->Vt, sh->joint, 0, 64};
    int src[B * S], tin[B * T], tout[B * T];
    unsigned r = 777;
    for (int b = 0; b < B; b++) {
        for (int s = 0; s < S; s++) src[b * S + s] = s < SRC_LEN[b] ? 1 + (int)((r = r * 1103515245u + 12345u) >> 16) % (sh->Vs - 1) : 0;
        for (int t = 0; t < T; t++) {
            tin[b * T + t] = t < TGT_LEN[b] ? 1 + (int)((r = r * 1103515245u + 12345u) >> 16) % (sh->Vt - 1) : 0;
            tout[b * T + t] = t < TGT_LEN[b] ? 1 + (int)((r = r * 1103515245u + 12345u) >> 16) % (sh->Vt - 1) : 0;
        }
    }
    for (int pass = 0; pass < 2; pass++) {
        cfg.dropout = pass ? 0.3f : 0.0f;
        train_model_t m;
        CHECK(!fam->create(&m, &cfg, &dd));
        fam->init_params(&m, 11);
        for (size_t i = 0; i < m.n_params; i++) m.params[i] *= 12.0f;
        void *ws = NULL;
        CHECK(!fam->ws_new(&ws, &m, B * S, B * T, S, T));
        train_loss_t L, L0;
        if (!pass) { /* dropout 0: the training forward is the evaluation forward, bit for bit */
            CHECK(!fam->forward(&m, ws, src, tin, tout, B, S, T, 1, 5, 9, &L));
            CHECK(!fam->forward(&m, ws, src, tin, tout, B, S, T, 0, 5, 9, &L0));
            CHECK_MSG(L.loss == L0.loss, "%s: dropout 0: training loss %.17g, evaluation %.17g", sh->label, L.loss,
                      L0.loss);
            printf("%s: dropout 0: training loss = evaluation loss (%.9g)\n", sh->label, L.loss);
            fam->ws_free(ws);
            fam->destroy(&m);
            continue;
        }
        memset(m.grads, 0, m.n_params * sizeof(float));
        CHECK(!fam->forward(&m, ws, src, tin, tout, B, S, T, 1, 5, 9, &L));
        CHECK(!fam->forward(&m, ws, src, tin, tout, B, S, T, 0, 5, 9, &L0));
        CHECK_MSG(L.loss != L0.loss, "%s: dropout 0.3 changes nothing", sh->label);
        CHECK(!fam->forward(&m, ws, src, tin, tout, B, S, T, 1, 5, 9, &L));
        CHECK(!fam->backward(&m, ws, 1.0f));
        int bad = 0, n = 0;
        double worst = 0;
        for (int i = 0; i < 60; i++) {
            const train_tensor_t *tt = &m.tensors[i % m.n_tensors];
            size_t j = tt->offset + ((size_t)i * 7919u) % tt->numel;
            if (strstr(tt->name, "embeddings")) {
                int tok = strstr(tt->name, "encoder") ? src[i % SRC_LEN[0]] : tin[i % TGT_LEN[0]];
                j = tt->offset + (size_t)tok * (size_t)tt->shape[1] + (size_t)i % (size_t)tt->shape[1];
            }
            float keep = m.params[j], h = 1e-2f;
            train_loss_t lp, lm;
            m.params[j] = keep + h;
            fam->forward(&m, ws, src, tin, tout, B, S, T, 1, 5, 9, &lp);
            m.params[j] = keep - h;
            fam->forward(&m, ws, src, tin, tout, B, S, T, 1, 5, 9, &lm);
            m.params[j] = keep;
            double fd = (lp.loss - lm.loss) / (2.0 * h), an = m.grads[j];
            double err = fabs(fd - an) / (1e-3 + 3e-2 * fabs(fd));
            worst = err > worst ? err : worst;
            n++;
            if (err > 1) {
                bad++;
                fprintf(stderr, "%s dropout: %s[%zu]: fd %.6g, backward %.6g\n", sh->label, tt->name, j - tt->offset,
                        fd, an);
            }
        }
        CHECK_MSG(bad == 0, "%s dropout: %d of %d gradients off", sh->label, bad, n);
        printf("%s: dropout 0.3 gradient check %d parameters (fixed masks), worst error/tolerance %.3f\n", sh->label,
               n, worst);
        fam->ws_free(ws);
        fam->destroy(&m);
    }
}

/* bfloat16 compute (`--precision bfloat16`) against float32: the same model, parameters and batch
 * (dropout 0.2, the same masks): loss within 1e-2 relative, every tensor's gradient within 3e-2
 * (max |bf16 - f32| / max |f32|). Without AVX512_BF16: the workspace is refused (UNSUPPORTED). */
static void bf16_check(const shape_t *sh) {
    const train_family_t *fam = train_family_find("gnmt");
    gnmt_train_config_t cfg;
    fam->default_config(&cfg);
    cfg.hidden = sh->H, cfg.att = sh->A, cfg.enc_layers = sh->Le, cfg.dec_layers = sh->Ld;
    cfg.share_emb = -1, cfg.tie_proj = sh->tie, cfg.dropout = 0.2f, cfg.label_smoothing = 0.1f;
    train_data_dims_t dd = {sh->Vs, sh->Vt, sh->joint, 0, 64};
    int src[B * S], tin[B * T], tout[B * T];
    unsigned r = 4242;
    for (int b = 0; b < B; b++) {
        for (int s = 0; s < S; s++) src[b * S + s] = s < SRC_LEN[b] ? 1 + (int)((r = r * 1103515245u + 12345u) >> 16) % (sh->Vs - 1) : 0;
        for (int t = 0; t < T; t++) {
            tin[b * T + t] = t < TGT_LEN[b] ? 1 + (int)((r = r * 1103515245u + 12345u) >> 16) % (sh->Vt - 1) : 0;
            tout[b * T + t] = t < TGT_LEN[b] ? 1 + (int)((r = r * 1103515245u + 12345u) >> 16) % (sh->Vt - 1) : 0;
        }
    }
    train_model_t m[2];
    void *ws[2] = {NULL, NULL};
    train_loss_t L[2];
    for (int k = 0; k < 2; k++) {
        cfg.bf16 = k;
        CHECK(!fam->create(&m[k], &cfg, &dd));
        fam->init_params(&m[k], 3);
        tern_status_t st = fam->ws_new(&ws[k], &m[k], B * S, B * T, S, T);
        if (k == 1 && st == TERN_ERR_UNSUPPORTED) {
            printf("%s: bfloat16: no AVX512_BF16 on this CPU; refused as it must be: %s\n", sh->label, tern_last_error());
            fam->destroy(&m[1]);
            fam->ws_free(ws[0]);
            fam->destroy(&m[0]);
            return;
        }
        CHECK_MSG(!st, "%s", tern_last_error());
        memset(m[k].grads, 0, m[k].n_params * sizeof(float));
        CHECK(!fam->forward(&m[k], ws[k], src, tin, tout, B, S, T, 1, 2, 6, &L[k]));
        CHECK(!fam->backward(&m[k], ws[k], 1.0f));
    }
    double le = fabs(L[1].loss - L[0].loss) / fabs(L[0].loss), worst = 0;
    const char *wn = "";
    for (int i = 0; i < m[0].n_tensors; i++) {
        const train_tensor_t *t = &m[0].tensors[i];
        double md = 0, mr = 0;
        for (size_t j = 0; j < t->numel; j++) {
            double a = m[1].grads[t->offset + j], g = m[0].grads[t->offset + j];
            md = fmax(md, fabs(a - g));
            mr = fmax(mr, fabs(g));
        }
        double e = mr > 0 ? md / mr : md;
        if (e > worst) worst = e, wn = t->name;
        CHECK_MSG(e <= 3e-2, "%s: bf16 gradient of %s: %.3g", sh->label, t->name, e);
    }
    printf("%s: bfloat16 vs float32: loss %.6f vs %.6f (rel %.2e), worst gradient max|diff|/max|ref| %.2e (%s)\n",
           sh->label, L[1].loss, L[0].loss, le, worst, wn);
    CHECK(le <= 1e-2 && le > 0);
    for (int k = 0; k < 2; k++) {
        fam->ws_free(ws[k]);
        fam->destroy(&m[k]);
    }
}

int main(void) {
    static const shape_t shapes[] = {
        {"3+3 shared", 23, 23, 1, 8, 6, 3, 3, 0},
        {"1+2 separate tied", 19, 21, 0, 6, 5, 1, 2, 1},
        {"2+1 shared tied", 17, 17, 1, 5, 7, 2, 1, 1},
    };
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) run_shape(&shapes[i]);
    static const shape_t deep = {"4+4 shared (residuals)", 23, 23, 1, 8, 6, 4, 4, 0};
    dropout_grad(&shapes[0]);
    dropout_grad(&deep);
    bf16_check(&shapes[0]);
    bf16_check(&deep);
    return check_report("test_gnmt");
}
