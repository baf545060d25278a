/*
 * gnmt_desc.c — the GNMT family's tensor description (gnmt_desc.h).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/gnmt_desc.h"

int gnmt_enc_width(const gnmt_dims_t *d) { return d->enc_layers == 1 ? 2 * d->hidden : d->hidden; }
int gnmt_enc_input(const gnmt_dims_t *d, int l) { return l == 1 ? 2 * d->hidden : d->hidden; }
int gnmt_dec_input(const gnmt_dims_t *d, int l) { (void)l; return d->hidden + gnmt_enc_width(d); }

static const char *PARTS[] = {"weight_ih", "weight_hh", "bias_ih", "bias_hh"};

const char *gnmt_tensor_name(char *buf, size_t n, gnmt_module_t mod, int layer, gnmt_part_t part) {
    const char *p = (unsigned)part < GP_NONE ? PARTS[part] : "?";
    switch (mod) {
    case GN_ENC_EMB: snprintf(buf, n, "encoder/embeddings/weight"); break;
    case GN_DEC_EMB: snprintf(buf, n, "decoder/embeddings/weight"); break;
    case GN_ENC_LSTM: snprintf(buf, n, "encoder/layer_%d/%s", layer, p); break;
    case GN_ENC_LSTM_REV: snprintf(buf, n, "encoder/layer_%d_reverse/%s", layer, p); break;
    case GN_DEC_LSTM: snprintf(buf, n, "decoder/layer_%d/%s", layer, p); break;
    case GN_ATT_WQ: snprintf(buf, n, "decoder/attention/linear_query/weight"); break;
    case GN_ATT_WK: snprintf(buf, n, "decoder/attention/linear_key/weight"); break;
    case GN_ATT_B: snprintf(buf, n, "decoder/attention/linear_key/bias"); break;
    case GN_ATT_V: snprintf(buf, n, "decoder/attention/v"); break;
    case GN_PROJ_W: snprintf(buf, n, "decoder/projection/weight"); break;
    case GN_PROJ_B: snprintf(buf, n, "decoder/projection/bias"); break;
    default: snprintf(buf, n, "?"); break;
    }
    return buf;
}

static int add(gnmt_tensor_t *out, int i, gnmt_module_t mod, int layer, gnmt_part_t part, int r, int c) {
    if (out) {
        gnmt_tensor_t *t = &out[i];
        memset(t, 0, sizeof *t);
        gnmt_tensor_name(t->name, sizeof t->name, mod, layer, part);
        t->rank = c ? 2 : 1;
        t->shape[0] = r;
        t->shape[1] = c;
        t->module = mod;
        t->part = part;
        t->layer = layer;
    }
    return i + 1;
}

static int add_lstm(gnmt_tensor_t *out, int i, gnmt_module_t mod, int l, int H, int K) {
    i = add(out, i, mod, l, GP_W_IH, 4 * H, K);
    i = add(out, i, mod, l, GP_W_HH, 4 * H, H);
    i = add(out, i, mod, l, GP_B_IH, 4 * H, 0);
    return add(out, i, mod, l, GP_B_HH, 4 * H, 0);
}

int gnmt_desc_tensors(const gnmt_dims_t *d, gnmt_tensor_t *out) {
    int i = 0, H = d->hidden, A = d->att, Dv = gnmt_enc_width(d);
    i = add(out, i, GN_ENC_EMB, -1, GP_NONE, d->src_vocab, H);
    if (!d->share_emb) i = add(out, i, GN_DEC_EMB, -1, GP_NONE, d->tgt_vocab, H);
    for (int l = 0; l < d->enc_layers; l++) {
        i = add_lstm(out, i, GN_ENC_LSTM, l, H, gnmt_enc_input(d, l));
        if (l == 0) i = add_lstm(out, i, GN_ENC_LSTM_REV, 0, H, gnmt_enc_input(d, 0));
    }
    for (int l = 0; l < d->dec_layers; l++) i = add_lstm(out, i, GN_DEC_LSTM, l, H, gnmt_dec_input(d, l));
    i = add(out, i, GN_ATT_WQ, -1, GP_NONE, A, H);
    i = add(out, i, GN_ATT_WK, -1, GP_NONE, A, Dv);
    i = add(out, i, GN_ATT_B, -1, GP_NONE, A, 0);
    i = add(out, i, GN_ATT_V, -1, GP_NONE, A, 0);
    if (!d->tie_proj) i = add(out, i, GN_PROJ_W, -1, GP_NONE, d->tgt_vocab, H);
    return add(out, i, GN_PROJ_B, -1, GP_NONE, d->tgt_vocab, 0);
}

int gnmt_desc_aliases(const gnmt_dims_t *d, const char *names[2], const char *targets[2]) {
    int n = 0;
    if (d->share_emb) names[n] = "decoder/embeddings/weight", targets[n++] = "encoder/embeddings/weight";
    if (d->tie_proj)
        names[n] = "decoder/projection/weight",
        targets[n++] = d->share_emb ? "encoder/embeddings/weight" : "decoder/embeddings/weight";
    return n;
}

int gnmt_desc_quantizable(const char *name) {
    size_t n = strlen(name);
    return (n > 10 && !strcmp(name + n - 10, "/weight_ih")) || (n > 10 && !strcmp(name + n - 10, "/weight_hh")) ||
           !strcmp(name, "decoder/attention/linear_query/weight") ||
           !strcmp(name, "decoder/attention/linear_key/weight") || !strcmp(name, "decoder/projection/weight");
}

static const char *KEYS[GKEY_COUNT] = {"gnmt/hidden_size", "gnmt/attention_size", "gnmt/encoder_layers",
                                       "gnmt/decoder_layers"};

const char *gnmt_key_name(gnmt_key_t k) { return (unsigned)k < GKEY_COUNT ? KEYS[k] : "?"; }

int gnmt_desc_scalars(gnmt_scalars_t *s, const gnmt_dims_t *d) {
    memset(s, 0, sizeof *s);
    s->v[GKEY_HIDDEN] = d->hidden;
    s->v[GKEY_ATT] = d->att;
    s->v[GKEY_ENC_LAYERS] = d->enc_layers;
    s->v[GKEY_DEC_LAYERS] = d->dec_layers;
    for (int k = 0; k < GKEY_COUNT; k++) {
        tensor_t *t = &s->t[k];
        t->name = KEYS[k];
        t->dtype = DT_I32;
        t->rank = 0;
        t->numel = 1;
        t->data = &s->v[k];
        t->nbytes = sizeof(int32_t);
    }
    return GKEY_COUNT;
}

tern_status_t gnmt_desc_read(gnmt_dims_t *d, const weights_t *w) {
    const char *file = weights_path(w);
    memset(d, 0, sizeof *d);
    int *dst[GKEY_COUNT] = {&d->hidden, &d->att, &d->enc_layers, &d->dec_layers};
    static const int lim[GKEY_COUNT] = {1 << 16, 1 << 16, 256, 256};
    for (int k = 0; k < GKEY_COUNT; k++) {
        int64_t v;
        if (!weights_get_int(w, KEYS[k], &v))
            return tern_error(TERN_ERR_FORMAT, "%s: tensor '%s' (a GNMT config key) is missing", file, KEYS[k]);
        if (v < 1 || v > lim[k])
            return tern_error(TERN_ERR_FORMAT, "%s: tensor '%s' = %lld is out of range [1, %d]", file, KEYS[k],
                              (long long)v, lim[k]);
        *dst[k] = (int)v;
    }
    const tensor_t *es = weights_get(w, "encoder/embeddings/weight"), *ed = weights_get(w, "decoder/embeddings/weight"),
                   *pw = weights_get(w, "decoder/projection/weight");
    if (!es) return tern_error(TERN_ERR_FORMAT, "%s: tensor 'encoder/embeddings/weight' is missing", file);
    if (!ed) return tern_error(TERN_ERR_FORMAT, "%s: tensor 'decoder/embeddings/weight' is missing", file);
    if (!pw) return tern_error(TERN_ERR_FORMAT, "%s: tensor 'decoder/projection/weight' is missing", file);
    if (es->rank != 2 || ed->rank != 2)
        return tern_error(TERN_ERR_FORMAT, "%s: tensor '%s' is not a matrix", file,
                          es->rank != 2 ? es->name : ed->name);
    d->src_vocab = (int)es->shape[0];
    d->tgt_vocab = (int)ed->shape[0];
    d->share_emb = ed->data == es->data;
    d->tie_proj = pw->data == ed->data;
    int n = gnmt_desc_tensors(d, NULL);
    gnmt_tensor_t *all = malloc(sizeof *all * (size_t)n);
    if (!all) return tern_error(TERN_ERR_NOMEM, "out of memory");
    gnmt_desc_tensors(d, all);
    tern_status_t st = TERN_OK;
    for (int i = 0; i < n && !st; i++) {
        const gnmt_tensor_t *g = &all[i];
        const tensor_t *t = weights_get(w, g->name);
        if (!t) {
            st = tern_error(TERN_ERR_FORMAT, "%s: tensor '%s' is missing (GNMT, %d+%d layers, hidden %d)", file,
                            g->name, d->enc_layers, d->dec_layers, d->hidden);
            break;
        }
        int ok = t->rank == g->rank && t->shape[0] == g->shape[0] && (g->rank == 1 || t->shape[1] == g->shape[1]);
        if (!ok) {
            char have[64];
            if (t->rank == 2) snprintf(have, sizeof have, "(%lld, %lld)", (long long)t->shape[0], (long long)t->shape[1]);
            else if (t->rank == 1) snprintf(have, sizeof have, "(%lld)", (long long)t->shape[0]);
            else snprintf(have, sizeof have, "rank %d", t->rank);
            if (g->rank == 2)
                st = tern_error(TERN_ERR_MISMATCH, "%s: tensor '%s' has shape %s, the config keys (hidden %d, attention "
                                "%d, %d+%d layers) need (%d, %d)", file, g->name, have, d->hidden, d->att,
                                d->enc_layers, d->dec_layers, g->shape[0], g->shape[1]);
            else
                st = tern_error(TERN_ERR_MISMATCH, "%s: tensor '%s' has shape %s, the config keys (hidden %d, attention "
                                "%d, %d+%d layers) need (%d)", file, g->name, have, d->hidden, d->att,
                                d->enc_layers, d->dec_layers, g->shape[0]);
        }
    }
    free(all);
    return st;
}
