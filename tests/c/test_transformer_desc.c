/* test_transformer_desc.c — the one description of the Transformer's tensors
 * (src/model/transformer_desc.h) against an independent spelling of CTranslate2's TransformerSpec:
 * tests/c/mini_model.h, which writes the variables CTranslate2 4.x stores, by hand.
 *
 * For each shape (pre/post-norm, tied/untied projection, learned/sinusoidal positions, int8):
 *   - every tensor of the description is in the mini model with the same rank and shape, and
 *     every non-scalar mini-model tensor (scales aside) is in the description, or is an alias of
 *     the description (the tied projection);
 *   - the description's aliases are the mini model's;
 *   - parse(name) gives back the module, layer and part of every tensor (and the CTranslate2
 *     alternative spelling of the encoder embedding parses as it);
 *   - quantizable(name) holds exactly for the tensors the int8 mini model stores with a
 *     "<name>_scale" (CTranslate2 quantizes linear weights and embeddings);
 *   - the written config keys are the mini model's scalars, with its dtypes;
 *   - the training table (src/train/family.h) registered as "transformer" builds the model
 *     tmodel_init builds for the data's vocabulary (same tensors, offsets, parameters after the
 *     same seed) and its forward gives the same loss bit for bit; an unknown architecture has no
 *     table;
 *   - the sinusoid table equals a double-precision evaluation of CTranslate2's formula within
 *     5e-5 (float32 arguments (p + 1)·ts up to 300 carry a rounding of ~300 · 6e-8 = 2e-5;
 *     measured 9e-6), and the embedding row is scale·e + p exactly.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "mini_model.h"
#include "model/transformer_desc.h"
#include "train/family.h"
#include "train/model.h"

static void check_shape(const mm_shape_t *s, const char *label) {
    mm_model_t mm;
    mm_build(&mm, s);
    transformer_dims_t dims = {s->src_vocab, s->tgt_vocab, s->d, s->ffn, s->enc_layers, s->dec_layers, 16,
                               s->pre_norm, s->learned_pos, 0, s->tie_output, 1, 0};
    int n = transformer_desc_tensors(&dims, NULL);
    transformer_tensor_t *t = calloc((size_t)n, sizeof *t);
    CHECK(transformer_desc_tensors(&dims, t) == n);
    int found = 0;
    for (int i = 0; i < n; i++) {
        mm_var_t *v = mm_find(&mm, t[i].name);
        CHECK_MSG(v != NULL, "%s: '%s' of the description is not in the CTranslate2 model", label, t[i].name);
        if (!v) continue;
        found++;
        int ok = v->rank == t[i].rank && v->shape[0] == t[i].shape[0] && (t[i].rank == 1 || v->shape[1] == t[i].shape[1]);
        CHECK_MSG(ok, "%s: '%s': description [%d, %d], model [%lld, %lld]", label, t[i].name, t[i].shape[0],
                  t[i].shape[1], (long long)v->shape[0], (long long)(v->rank > 1 ? v->shape[1] : 0));
        tmodule_t mod;
        int layer;
        tpart_t part;
        CHECK(transformer_desc_parse(t[i].name, &mod, &layer, &part) && mod == t[i].module && layer == t[i].layer &&
              part == t[i].part);
        char sn[MM_NAME_MAX];
        snprintf(sn, sizeof sn, "%s_scale", t[i].name);
        if (s->int8)
            CHECK_MSG(transformer_desc_quantizable(t[i].name) == (mm_find(&mm, sn) != NULL),
                      "%s: '%s': quantizable %d, CTranslate2 int8 scale %s", label, t[i].name,
                      transformer_desc_quantizable(t[i].name), mm_find(&mm, sn) ? "present" : "absent");
    }
    /* the other direction: every stored tensor of the model is described */
    const char *an[2], *at[2];
    int na = transformer_desc_aliases(&dims, an, at);
    int stored = 0;
    for (int i = 0; i < mm.n; i++) {
        const mm_var_t *v = &mm.v[i];
        size_t len = strlen(v->name);
        if (v->rank == 0 || (len > 6 && !strcmp(v->name + len - 6, "_scale"))) continue;
        stored++;
        int in = 0;
        for (int k = 0; k < n && !in; k++) in = !strcmp(t[k].name, v->name);
        CHECK_MSG(in, "%s: model tensor '%s' is not in the description", label, v->name);
    }
    CHECK_MSG(stored == found, "%s: %d stored tensors, %d described", label, stored, found);
    CHECK(na == mm.n_alias);
    for (int k = 0; k < na && k < mm.n_alias; k++)
        CHECK(!strcmp(an[k], mm.alias[k][0]) && !strcmp(at[k], mm.alias[k][1]));
    /* config keys */
    transformer_spec_t spec = {s->heads, s->pre_norm, 0, 1};
    transformer_scalars_t sc;
    int ns = transformer_desc_scalars(&sc, &spec);
    for (int k = 0; k < ns; k++) {
        mm_var_t *v = mm_find(&mm, sc.t[k].name);
        CHECK_MSG(v && v->rank == 0 && v->dt == sc.t[k].dtype, "%s: config key '%s'", label, sc.t[k].name);
        if (v && v->dt == sc.t[k].dtype)
            CHECK_MSG(!memcmp(v->data, sc.t[k].data, dtype_size(v->dt)), "%s: config key '%s' value", label,
                      sc.t[k].name);
    }
    printf("  %-32s %3d tensors, %d aliases, %d config keys: as CTranslate2 names them\n", label, n, na, ns);
    free(t);
    mm_free(&mm);
}

int main(void) {
    printf("transformer_desc vs CTranslate2's TransformerSpec (tests/c/mini_model.h)\n");
    mm_shape_t s = MM_TINY;
    check_shape(&s, "pre-norm tied learned");
    s.enc_layers = 2, s.dec_layers = 3, s.pre_norm = 0, s.tie_output = 0, s.learned_pos = 0, s.tgt_vocab = 9;
    check_shape(&s, "post-norm untied sinusoid 2+3");
    s = MM_TINY;
    s.int8 = 1, s.enc_layers = 2;
    check_shape(&s, "int8 pre-norm tied");
    s.tie_output = 0;
    check_shape(&s, "int8 untied");

    tmodule_t mod;
    int layer;
    tpart_t part;
    CHECK(transformer_desc_parse(TRANSFORMER_ENC_EMB_ALT, &mod, &layer, &part) && mod == TM_ENC_EMB);
    CHECK(!transformer_desc_parse("encoder/layer_0/self_attention/linear_3/weight", &mod, &layer, &part));
    CHECK(!transformer_desc_parse("encoder/layer_x/ffn/linear_0/weight", &mod, &layer, &part));
    CHECK(!transformer_desc_parse("decoder/projection/gamma", &mod, &layer, &part));
    CHECK(!transformer_desc_quantizable("decoder/position_encodings/encodings"));

    /* shared computations */
    enum { P = 300, C = 24 };
    float *tab = malloc(sizeof(float) * P * C);
    nn_sinusoids(tab, P, C);
    double worst = 0;
    for (int p = 0; p < P; p++)
        for (int i = 0; i < C / 2; i++) {
            double ts = exp(-(double)i * log(10000.0) / (C / 2 - 1)), v = (p + 1) * ts;
            worst = fmax(worst, fabs(tab[p * C + i] - sin(v)));
            worst = fmax(worst, fabs(tab[p * C + C / 2 + i] - cos(v)));
        }
    printf("  sinusoids (%d x %d): max |table - formula| %.2e\n", P, C, worst);
    CHECK_MSG(worst <= 5e-5, "sinusoid table off by %.3e", worst);
    float e[5] = {1, -2, 0.5f, 3, 0}, pos[5] = {0.25f, 0.5f, -1, 2, 7}, out[5];
    nn_embed_row(out, e, 2.0f, pos, 5);
    for (int c = 0; c < 5; c++) CHECK(out[c] == 2.0f * e[c] + pos[c]);
    nn_embed_row(out, e, 3.0f, NULL, 5);
    for (int c = 0; c < 5; c++) CHECK(out[c] == 3.0f * e[c]);
    free(tab);

    /* the training table */
    const train_family_t *f = train_family_find("transformer");
    CHECK(f == &train_family_transformer && !train_family_find("gru"));
    tmodel_config_t cfg = tmodel_default_config();
    cfg.d = 16, cfg.heads = 2, cfg.ff = 24, cfg.enc_layers = 1, cfg.dec_layers = 2, cfg.share_emb = -1;
    train_data_dims_t dd = {20, 20, 1, 0, 10};
    train_model_t tm;
    CHECK(f->create(&tm, &cfg, &dd) == TERN_OK);
    tmodel_config_t direct = cfg;
    direct.src_vocab = direct.tgt_vocab = 20, direct.share_emb = 1, direct.max_pos = 10;
    tmodel_t m;
    CHECK(tmodel_init(&m, &direct) == TERN_OK);
    CHECK(tm.n_params == m.n_params && tm.n_tensors == m.n_tensors && tm.n_aliases == m.n_aliases);
    for (int i = 0; i < m.n_tensors && i < tm.n_tensors; i++)
        CHECK(!strcmp(tm.tensors[i].name, m.tensors[i].name) && tm.tensors[i].offset == m.tensors[i].offset);
    f->init_params(&tm, 3);
    tmodel_init_params(&m, 3);
    CHECK(!memcmp(tm.params, m.params, m.n_params * sizeof(float)));
    int src[2 * 3] = {4, 5, 2, 6, 2, 0}, tin[2 * 3] = {1, 7, 8, 1, 9, 0}, tout[2 * 3] = {7, 8, 2, 9, 2, 0};
    void *ws = NULL;
    tmodel_ws_t *mws = NULL;
    CHECK(f->ws_new(&ws, &tm, 6, 6, 3, 3) == TERN_OK);
    CHECK(tmodel_ws_new(&mws, &m, 6, 6, 3, 3) == TERN_OK);
    train_loss_t a, b;
    CHECK(f->forward(&tm, ws, src, tin, tout, 2, 3, 3, 1, 5, 1, &a) == TERN_OK);
    CHECK(tmodel_forward(&m, mws, src, tin, tout, 2, 3, 3, 1, 5, 1, &b) == TERN_OK);
    CHECK(a.loss == b.loss && a.nll == b.nll && a.ntokens == b.ntokens && a.ntokens == 5);
    char line[256];
    CHECK(f->describe(&tm, 0, line, sizeof line) && strstr(line, "1+2 layers, d 16") && !f->describe(&tm, 1, line, sizeof line));
    printf("  training table 'transformer': %d tensors, %zu parameters, loss %.6f as tmodel_forward\n", tm.n_tensors,
           tm.n_params, a.loss);
    f->ws_free(ws);
    tmodel_ws_free(mws);
    f->destroy(&tm);
    tmodel_free(&m);
    return check_report("test_transformer_desc");
}
