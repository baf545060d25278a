/* test_desc.c — the common description form (src/model/desc.h) over the three families' tables:
 *   1. every enumerated tensor parses back (desc_parse) to its spec and layer, names are unique,
 *      shapes are positive, quantizable tensors are matrices;
 *   2. the enumeration agrees with the families' wrappers (rnn_gru_tensor_stored / _shape,
 *      gnmt_desc_tensors, transformer_desc_tensors): same names, shapes and order;
 *   3. aliases: each tied name is a used, unstored spec and its target is stored;
 *   4. the written config keys: names and dtypes of the table, values of the dims;
 *   5. names outside a family do not parse.
 */
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "model/desc.h"
#include "model/gnmt_desc.h"
#include "model/rnn_gru_desc.h"
#include "model/transformer_desc.h"

/* 1, 3, 4 for one configuration of a family. */
static void check_generic(const char *label, const model_desc_t *md, const int *dims) {
    int n = desc_tensors(md, dims, NULL);
    CHECK_MSG(n > 0, "%s", label);
    if (n <= 0) return;
    desc_tensor_t *t = calloc((size_t)n, sizeof *t);
    CHECK(desc_tensors(md, dims, t) == n);
    for (int i = 0; i < n; i++) {
        int s = -1, l = -2;
        CHECK_MSG(desc_parse(md, t[i].name, &s, &l), "%s: %s parses", label, t[i].name);
        char buf[160];
        if (s >= 0) { /* the spec found names the same tensor (a repeated pattern: another range) */
            desc_name(md, s, l, buf, sizeof buf);
            CHECK_MSG(!strcmp(buf, t[i].name) && l == t[i].layer, "%s: %s", label, t[i].name);
        }
        CHECK_MSG(t[i].shape[0] > 0 && (t[i].rank == 1 || t[i].shape[1] > 0), "%s: %s shape", label, t[i].name);
        CHECK_MSG(!desc_quantizable(md, t[i].name) || t[i].rank == 2, "%s: %s quantizable vector", label,
                  t[i].name);
        for (int j = 0; j < i; j++) CHECK_MSG(strcmp(t[i].name, t[j].name), "%s: %s twice", label, t[i].name);
    }
    const char *names[8], *targets[8];
    int na = desc_aliases(md, dims, names, targets, 8);
    for (int a = 0; a < na; a++) {
        int s, l, stored = 0;
        CHECK_MSG(desc_parse(md, names[a], &s, &l) && desc_used(md, s, dims) && !desc_stored(md, s, dims),
                  "%s: alias %s", label, names[a]);
        for (int i = 0; i < n; i++) stored |= !strcmp(t[i].name, targets[a]);
        CHECK_MSG(stored, "%s: alias %s -> %s: target stored", label, names[a], targets[a]);
    }
    desc_scalars_t sc;
    int ns = desc_scalars(md, dims, &sc), k = 0;
    for (int i = 0; i < md->n_keys; i++) {
        const desc_key_t *key = &md->keys[i];
        if (key->flags & DESC_KEY_READONLY) continue;
        CHECK_MSG(k < ns && !strcmp(sc.t[k].name, key->name) && sc.t[k].dtype == key->dtype && sc.t[k].rank == 0,
                  "%s: key %s", label, key->name);
        int want = key->dim == DESC_CONST ? key->value : dims[key->dim];
        int got = key->dtype == DT_I16 ? sc.v[k].i16 : key->dtype == DT_I8 ? sc.v[k].i8 : sc.v[k].i32;
        CHECK_MSG(got == want, "%s: key %s = %d, want %d", label, key->name, got, want);
        k++;
    }
    CHECK(k == ns);
    CHECK(!desc_parse(md, "encoder/nothing/weight", &k, &k));
    CHECK(!desc_parse(md, "", &k, &k));
    printf("  %-34s %3d tensors, %d aliases, %d config keys\n", label, n, na, ns);
    free(t);
}

static void check_gru(int share, int tie, int ln) {
    rnn_gru_dims_t d = {40, share ? 40 : 50, 8, 6, 7, 5, tie ? 8 : 9, share, tie, ln, 1};
    int dims[RGD_COUNT];
    rnn_gru_dims_array(&d, dims);
    char label[64];
    snprintf(label, sizeof label, "rnn-gru share %d tie %d ln %d", share, tie, ln);
    check_generic(label, &RNN_GRU_DESC, dims);
    desc_tensor_t *t = calloc(RG_COUNT, sizeof *t);
    int n = desc_tensors(&RNN_GRU_DESC, dims, t), k = 0;
    for (int i = 0; i < RG_COUNT; i++) { /* the wrappers' stored tensors in rg_tensor_t order */
        if (!rnn_gru_tensor_stored(&d, (rg_tensor_t)i)) continue;
        int r, c;
        rnn_gru_tensor_shape(&d, (rg_tensor_t)i, &r, &c);
        CHECK_MSG(k < n && t[k].spec == i && !strcmp(t[k].name, rnn_gru_tensor_name((rg_tensor_t)i)) &&
                      t[k].shape[0] == r && t[k].shape[1] == c,
                  "%s: %s", label, rnn_gru_tensor_name((rg_tensor_t)i));
        CHECK(desc_quantizable(&RNN_GRU_DESC, rnn_gru_tensor_name((rg_tensor_t)i)) ==
              rnn_gru_tensor_is_matrix((rg_tensor_t)i));
        k++;
    }
    CHECK(k == n);
    free(t);
}

static void check_gnmt(int Le, int Ld, int share, int tie) {
    gnmt_dims_t d = {30, share ? 30 : 35, 6, 5, Le, Ld, share, tie};
    int dims[GND_COUNT];
    gnmt_dims_array(&d, dims);
    char label[64];
    snprintf(label, sizeof label, "gnmt %d+%d share %d tie %d", Le, Ld, share, tie);
    check_generic(label, &GNMT_DESC, dims);
    int n = gnmt_desc_tensors(&d, NULL);
    if (n <= 0) return;
    gnmt_tensor_t *g = calloc((size_t)n, sizeof *g);
    gnmt_desc_tensors(&d, g);
    for (int i = 0; i < n; i++) { /* the LSTMs' input widths (gnmt_enc_input, gnmt_dec_input) */
        if (g[i].part != GP_W_IH) continue;
        int K = g[i].module == GN_DEC_LSTM ? gnmt_dec_input(&d, g[i].layer) : gnmt_enc_input(&d, g[i].layer);
        CHECK_MSG(g[i].shape[1] == K && g[i].shape[0] == 4 * d.hidden, "%s: %s", label, g[i].name);
        char buf[96];
        CHECK(!strcmp(gnmt_tensor_name(buf, sizeof buf, g[i].module, g[i].layer, GP_W_IH), g[i].name));
    }
    free(g);
}

static void check_transformer(int pre_norm, int learned, int share, int tie, int bias, int ssru) {
    transformer_dims_t d = {40, share ? 40 : 45, 8, 16, 2, 3, 12, pre_norm, learned, share, tie, bias, ssru};
    transformer_spec_t spec = {2, pre_norm, 1, 1};
    int dims[TD_COUNT];
    transformer_dims_array(&d, &spec, dims);
    char label[64];
    snprintf(label, sizeof label, "transformer pre %d pos %d sh %d tie %d b %d ssru %d", pre_norm, learned, share, tie,
             bias, ssru);
    check_generic(label, &TRANSFORMER_DESC, dims);
    int n = transformer_desc_tensors(&d, NULL);
    if (n <= 0) return;
    transformer_tensor_t *t = calloc((size_t)n, sizeof *t);
    transformer_desc_tensors(&d, t);
    for (int i = 0; i < n; i++) {
        char buf[96];
        CHECK(!strcmp(transformer_tensor_name(buf, sizeof buf, t[i].module, t[i].layer, t[i].part), t[i].name));
        CHECK(desc_quantizable(&TRANSFORMER_DESC, t[i].name) == transformer_desc_quantizable(t[i].name));
        /* an SSRU decoder (Marian's --dec-cell ssru): its (2C, C) linear per decoder layer in place of the
         * self-attention's two, whose layer norm stays */
        int self_lin = t[i].module == TM_DEC_SELF_QKV || t[i].module == TM_DEC_SELF_OUT;
        CHECK_MSG(ssru ? !self_lin : t[i].module != TM_DEC_SSRU, "%s: %s", label, t[i].name);
        if (t[i].module == TM_DEC_SSRU && t[i].part == TP_WEIGHT)
            CHECK(t[i].shape[0] == 16 && t[i].shape[1] == 8 && transformer_desc_quantizable(t[i].name));
    }
    int n_ssru = 0, n_self_ln = 0;
    for (int i = 0; i < n; i++) {
        n_ssru += t[i].module == TM_DEC_SSRU;
        n_self_ln += t[i].module == TM_DEC_SELF_LN;
    }
    CHECK_MSG(n_ssru == (ssru ? 2 * 3 : 0) && n_self_ln == 2 * 3, "%s: %d SSRU tensors, %d norms", label, n_ssru, n_self_ln);
    free(t);
}

int main(void) {
    printf("the common description form (src/model/desc.h)\n");
    for (int m = 0; m < 8; m++) check_gru(m & 1, (m >> 1) & 1, m >> 2);
    for (int Le = 1; Le <= 4; Le++)
        for (int m = 0; m < 4; m++) check_gnmt(Le, 1 + (Le % 3), m & 1, m >> 1);
    for (int m = 0; m < 64; m++) check_transformer(m & 1, (m >> 1) & 1, (m >> 2) & 1, (m >> 3) & 1, (m >> 4) & 1, m >> 5);
    return check_report("test_desc");
}
