/*
 * transformer_load.c — builds a transformer_t from CTranslate2 TransformerSpec variables.
 *
 * The same variable names serve CTranslate2's model.bin and Tern's model.safetensors. Weights are
 * used in place when their dtype is the one run (float32, or int8 run as int8); otherwise they
 * are converted once here (float16/bfloat16 -> float32, int8 -> float32, float32 -> int8).
 */
#include "model/transformer.h"
#include "model/transformer_desc.h"
#include "nn/layers.h"

#include <stddef.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SINUSOID_MAX_POS 2048

static void *own(transformer_t *m, void *p) {
    if (!p) return NULL;
    if (m->n_owned == m->cap_owned) {
        int cap = m->cap_owned ? m->cap_owned * 2 : 64;
        void **n = realloc(m->owned, (size_t)cap * sizeof *n);
        if (!n) {
            aligned_free(p);
            return NULL;
        }
        m->owned = n;
        m->cap_owned = cap;
    }
    m->owned[m->n_owned++] = p;
    return p;
}

static void *own_alloc(transformer_t *m, size_t bytes) { return own(m, aligned_alloc64(bytes)); }

static tern_status_t shape_error(const weights_t *w, const char *name, const tensor_t *t,
                                 int64_t d0, int64_t d1) {
    char got[128] = "[";
    for (int i = 0; i < t->rank; i++) {
        char b[32];
        snprintf(b, sizeof b, "%s%lld", i ? ", " : "", (long long)t->shape[i]);
        strncat(got, b, sizeof got - strlen(got) - 2);
    }
    strcat(got, "]");
    if (d1 >= 0)
        return tern_error(TERN_ERR_MISMATCH, "%s: tensor '%s': expected shape [%lld, %lld], got %s",
                          weights_path(w), name, (long long)d0, (long long)d1, got);
    return tern_error(TERN_ERR_MISMATCH, "%s: tensor '%s': expected shape [%lld], got %s",
                      weights_path(w), name, (long long)d0, got);
}

/* Fetches a tensor and checks its shape ([d0] when d1 < 0, else [d0, d1]). */
static tern_status_t get_checked(const weights_t *w, const char *name, int64_t d0, int64_t d1,
                                 int optional, const tensor_t **out) {
    const tensor_t *t = weights_get(w, name);
    *out = t;
    if (!t) {
        if (optional) return TERN_OK;
        return tern_error(TERN_ERR_FORMAT, "%s: missing tensor '%s'", weights_path(w), name);
    }
    if (d1 < 0) {
        if (t->rank != 1 || t->shape[0] != d0) return shape_error(w, name, t, d0, d1);
    } else if (t->rank != 2 || t->shape[0] != d0 || t->shape[1] != d1) {
        return shape_error(w, name, t, d0, d1);
    }
    return TERN_OK;
}

/* float32 view of a floating tensor (converted copy when stored as float16/bfloat16). */
static tern_status_t as_f32(transformer_t *m, weights_t *w, const tensor_t *t, const float **out) {
    tern_status_t st = weights_need(w, t); /* copied now if it waited unaligned in the file */
    if (st) return st;
    switch (t->dtype) {
    case DT_F32:
        *out = t->data;
        return TERN_OK;
    case DT_F16:
    case DT_BF16: {
        float *p = own_alloc(m, (size_t)t->numel * sizeof(float));
        if (!p) return tern_error(TERN_ERR_NOMEM, "tensor '%s': out of memory", t->name);
        if (t->dtype == DT_F16) half_to_float_array(p, t->data, (size_t)t->numel);
        else bf16_to_float_array(p, t->data, (size_t)t->numel);
        *out = p;
        return TERN_OK;
    }
    default:
        return tern_error(TERN_ERR_FORMAT, "%s: tensor '%s': expected a floating-point dtype, got %s",
                          weights_path(w), t->name, dtype_name(t->dtype));
    }
}

/* A weight matrix (N, K) as float32 or int8 + per-row scales, depending on how it is stored and
 * on the compute type. */
typedef struct {
    const float *w;
    const int8_t *q;
    const float *scale;
} matrix_t;

/* int8 rows + per-row scales of a float32 matrix (N, K), read where it lies (in the file, perhaps
 * not aligned to 4 bytes: rows go through a small aligned buffer then), never copied whole: its
 * file pages are given back once read. A tensor used twice (tied embeddings) is quantized once. */
static tern_status_t quantize_matrix(transformer_t *m, weights_t *w, const tensor_t *t, int64_t N, int64_t K,
                                     matrix_t *out) {
    if (m->last_quantized == t) {
        out->q = m->last_q;
        out->scale = m->last_q_scale;
        return TERN_OK;
    }
    const uint8_t *src = weights_bytes(w, t);
    int8_t *q = own_alloc(m, (size_t)(N * K));
    float *scale = own_alloc(m, (size_t)N * sizeof(float));
    if (!src || !q || !scale) return tern_error(TERN_ERR_NOMEM, "tensor '%s': out of memory", t->name);
    size_t row = (size_t)K * sizeof(float);
    if ((uintptr_t)src % sizeof(float) == 0) {
        quantize_rows_s8(q, scale, (const float *)(const void *)src, (int)N, (int)K);
    } else {
        int64_t chunk = (int64_t)((1u << 18) / row) + 1; /* rows per pass: ~256 KB */
        if (chunk > N) chunk = N;
        float *buf = aligned_alloc64((size_t)chunk * row);
        if (!buf) return tern_error(TERN_ERR_NOMEM, "tensor '%s': out of memory", t->name);
        for (int64_t r = 0; r < N; r += chunk) {
            int64_t n = N - r < chunk ? N - r : chunk;
            memcpy(buf, src + (size_t)r * row, (size_t)n * row);
            quantize_rows_s8(q + (size_t)r * K, scale + r, buf, (int)n, (int)K);
        }
        aligned_free(buf);
    }
    /* the float32 rows were read once, here: their file pages go now, not at the end of the
     * load (else the whole float32 model is resident beside the int8 one: the peak) */
    weights_drop_pages(w, src, (size_t)N * row);
    m->last_quantized = t;
    m->last_q = q;
    m->last_q_scale = scale;
    out->q = q;
    out->scale = scale;
    return TERN_OK;
}

static tern_status_t load_matrix(transformer_t *m, weights_t *w, const char *name, int64_t N,
                                 int64_t K, tern_compute_type_t compute, int want_int8_ok,
                                 matrix_t *out) {
    memset(out, 0, sizeof *out);
    const tensor_t *t;
    tern_status_t st = get_checked(w, name, N, K, 0, &t);
    if (st) return st;
    int run_int8 = want_int8_ok && (compute == TERN_COMPUTE_INT8 ||
                                    (compute == TERN_COMPUTE_AUTO && (t->dtype == DT_I8 || t->dtype == DT_I16)));
    if (t->dtype == DT_F32 && run_int8) return quantize_matrix(m, w, t, N, K, out);
    if ((st = weights_need(w, t))) return st;
    char sname[512];
    snprintf(sname, sizeof sname, "%s_scale", name); /* "<prefix>/weight_scale" */
    if (t->dtype == DT_I8 || t->dtype == DT_I16) {
        const tensor_t *s = weights_get(w, sname);
        if (!s) return tern_error(TERN_ERR_FORMAT, "%s: tensor '%s' is %s but '%s' is missing",
                                  weights_path(w), name, dtype_name(t->dtype), sname);
        const float *scale;
        if ((st = as_f32(m, w, s, &scale))) return st;
        int per_row = (s->numel == N);
        if (!per_row && s->numel != 1)
            return tern_error(TERN_ERR_MISMATCH, "%s: tensor '%s': expected %lld scales or 1, got %lld",
                              weights_path(w), sname, (long long)N, (long long)s->numel);
        if (t->dtype == DT_I8 && per_row && run_int8) {
            out->q = t->data;
            out->scale = scale;
            return TERN_OK;
        }
        /* Dequantize to float32 (and requantize per row below if int8 is wanted). */
        float *f = own_alloc(m, (size_t)(N * K) * sizeof(float));
        if (!f) return tern_error(TERN_ERR_NOMEM, "tensor '%s': out of memory", name);
        for (int64_t n = 0; n < N; n++) {
            float inv = 1.0f / scale[per_row ? n : 0];
            for (int64_t k = 0; k < K; k++) {
                float v = t->dtype == DT_I8 ? (float)((const int8_t *)t->data)[n * K + k]
                                            : (float)((const int16_t *)t->data)[n * K + k];
                f[n * K + k] = v * inv;
            }
        }
        out->w = f;
    } else {
        if ((st = as_f32(m, w, t, &out->w))) return st;
    }
    if (run_int8) { /* dequantized or converted above (float32 stored: quantize_matrix) */
        int8_t *q = own_alloc(m, (size_t)(N * K));
        float *scale = own_alloc(m, (size_t)N * sizeof(float));
        if (!q || !scale) return tern_error(TERN_ERR_NOMEM, "tensor '%s': out of memory", name);
        quantize_rows_s8(q, scale, out->w, (int)N, (int)K);
        out->q = q;
        out->scale = scale;
        out->w = NULL;
    }
    return TERN_OK;
}

static tern_status_t load_linear(transformer_t *m, weights_t *w, const char *prefix, int N,
                                 int K, tern_compute_type_t compute, linear_t *lin) {
    char name[512];
    matrix_t mat;
    memset(lin, 0, sizeof *lin);
    snprintf(name, sizeof name, "%s/weight", prefix);
    tern_status_t st = load_matrix(m, w, name, N, K, compute, 1, &mat);
    if (st) return st;
    lin->N = N;
    lin->K = K;
    if (mat.q) {
        lin->kind = WEIGHT_S8;
        lin->q = mat.q;
        lin->scale = mat.scale;
        int32_t *comp = own_alloc(m, (size_t)N * sizeof(int32_t));
        if (!comp) return tern_error(TERN_ERR_NOMEM, "tensor '%s': out of memory", name);
        linear_prepare(lin, comp);
        m->weight_bytes += (size_t)N * K + (size_t)N * 8;
    } else {
        lin->kind = WEIGHT_F32;
        lin->w = mat.w;
        m->weight_bytes += (size_t)N * K * 4;
    }
    snprintf(name, sizeof name, "%s/bias", prefix);
    const tensor_t *b;
    if ((st = get_checked(w, name, N, -1, 1, &b))) return st;
    if (b) {
        if ((st = as_f32(m, w, b, &lin->bias))) return st;
        m->weight_bytes += (size_t)N * 4;
    }
    return TERN_OK;
}

static tern_status_t load_ln(transformer_t *m, weights_t *w, const char *prefix, int d,
                             int optional, layernorm_t *ln) {
    char name[512];
    const tensor_t *g, *b;
    memset(ln, 0, sizeof *ln);
    snprintf(name, sizeof name, "%s/gamma", prefix);
    tern_status_t st = get_checked(w, name, d, -1, optional, &g);
    if (st || !g) return st;
    snprintf(name, sizeof name, "%s/beta", prefix);
    if ((st = get_checked(w, name, d, -1, 0, &b))) return st;
    if ((st = as_f32(m, w, g, &ln->gamma))) return st;
    if ((st = as_f32(m, w, b, &ln->beta))) return st;
    m->weight_bytes += (size_t)d * 8;
    return TERN_OK;
}

static tern_status_t load_embedding(transformer_t *m, weights_t *w, const char *name,
                                    tern_compute_type_t compute, embedding_t *e) {
    const tensor_t *t = weights_get(w, name);
    if (!t) return tern_error(TERN_ERR_FORMAT, "%s: missing tensor '%s'", weights_path(w), name);
    if (t->rank != 2 || t->shape[1] != m->d)
        return shape_error(w, name, t, t->rank >= 1 ? t->shape[0] : 0, m->d);
    e->V = (int)t->shape[0];
    e->d = m->d;
    matrix_t mat;
    tern_status_t st = load_matrix(m, w, name, e->V, e->d, compute, 1, &mat);
    if (st) return st;
    e->w = mat.w;
    e->q = mat.q;
    e->scale = mat.scale;
    m->weight_bytes += mat.q ? (size_t)e->V * e->d + (size_t)e->V * 4 : (size_t)e->V * e->d * 4;
    return TERN_OK;
}

/* The N of a name "side/layer_N/...", capped at cap (N >= cap gives cap), or -1 for other names. */
static long layer_index(const char *name, const char *side, size_t sl, long cap) {
    if (strncmp(name, side, sl) || strncmp(name + sl, "/layer_", 7)) return -1;
    const char *p = name + sl + 7, *digits = p;
    long idx = 0;
    for (; *p >= '0' && *p <= '9'; p++) idx = idx < cap ? idx * 10 + (*p - '0') : cap;
    if (p == digits || *p != '/' || (p - digits > 1 && *digits == '0')) return -1;
    return idx < cap ? idx : cap;
}

/* Number of layers side/layer_0/ .. side/layer_{n-1}/, in two passes over the names; *beyond is
 * set to a tensor of a layer past a gap (layer_2 without layer_1), or NULL. */
static int count_layers(const weights_t *w, const char *side, const char **beyond) {
    int count = weights_count(w), n = 0;
    *beyond = NULL;
    unsigned char *seen = calloc((size_t)count + 1, 1);
    if (!seen) return 0;
    size_t sl = strlen(side);
    for (int i = 0; i < count; i++) {
        long idx = layer_index(weights_at(w, i)->name, side, sl, count);
        if (idx >= 0) seen[idx] = 1;
    }
    while (n < count && seen[n]) n++;
    for (int i = 0; i < count && !*beyond; i++)
        if (layer_index(weights_at(w, i)->name, side, sl, count) >= n) *beyond = weights_at(w, i)->name;
    free(seen);
    return n;
}

static int64_t scalar_or(const weights_t *w, const char *name, int64_t dflt) {
    int64_t v = dflt;
    weights_get_int(w, name, &v);
    return v;
}

/* The sinusoidal table (transformer_desc.h: the one training uses too). */
static float *sinusoid_table(transformer_t *m, int max_pos, int d) {
    float *p = own_alloc(m, (size_t)max_pos * d * sizeof(float));
    if (p) nn_sinusoids(p, max_pos, d);
    return p;
}

static tern_status_t load_positions(transformer_t *m, weights_t *w, tmodule_t mod,
                                    const float **table, int *max_pos) {
    char name[128];
    transformer_tensor_name(name, sizeof name, mod, -1, TP_ENCODINGS);
    const tensor_t *t = weights_get(w, name);
    if (t) {
        if (t->rank != 2 || t->shape[1] != m->d) return shape_error(w, name, t, t->shape[0], m->d);
        *max_pos = (int)t->shape[0];
        tern_status_t st = as_f32(m, w, t, table);
        m->weight_bytes += (size_t)t->numel * 4;
        return st;
    }
    if (m->d % 2) /* sines in one half, cosines in the other */
        return tern_error(TERN_ERR_UNSUPPORTED, "%s: no tensor '%s': sinusoidal position encodings need an "
                          "even model width, got %d", weights_path(w), name, m->d);
    *max_pos = SINUSOID_MAX_POS;
    *table = sinusoid_table(m, SINUSOID_MAX_POS, m->d);
    return *table ? TERN_OK : tern_error(TERN_ERR_NOMEM, "position table: out of memory");
}

/* The layer fields the description's per-layer modules load into. */
typedef struct {
    tmodule_t mod;
    size_t off;
} layer_field_t;

static const layer_field_t ENC_FIELDS[] = {
    {TM_ENC_SELF_LN, offsetof(enc_layer_t, ln_attn)}, {TM_ENC_SELF_QKV, offsetof(enc_layer_t, qkv)},
    {TM_ENC_SELF_OUT, offsetof(enc_layer_t, attn_out)}, {TM_ENC_FFN_LN, offsetof(enc_layer_t, ln_ffn)},
    {TM_ENC_FFN1, offsetof(enc_layer_t, ffn1)}, {TM_ENC_FFN2, offsetof(enc_layer_t, ffn2)},
};

static const layer_field_t DEC_FIELDS[] = {
    {TM_DEC_SELF_LN, offsetof(dec_layer_t, ln_self)}, {TM_DEC_SELF_QKV, offsetof(dec_layer_t, qkv)},
    {TM_DEC_SELF_OUT, offsetof(dec_layer_t, self_out)}, {TM_DEC_CROSS_LN, offsetof(dec_layer_t, ln_cross)},
    {TM_DEC_CROSS_Q, offsetof(dec_layer_t, cross_q)}, {TM_DEC_CROSS_KV, offsetof(dec_layer_t, cross_kv)},
    {TM_DEC_CROSS_OUT, offsetof(dec_layer_t, cross_out)}, {TM_DEC_FFN_LN, offsetof(dec_layer_t, ln_ffn)},
    {TM_DEC_FFN1, offsetof(dec_layer_t, ffn1)}, {TM_DEC_FFN2, offsetof(dec_layer_t, ffn2)},
    {TM_DEC_SSRU, offsetof(dec_layer_t, ssru)},
};

/* A layer's module (a layer norm or a linear layer) under its description's name and shape. */
static tern_status_t load_module(transformer_t *m, weights_t *w, const transformer_dims_t *dims,
                                 tmodule_t mod, int layer, tern_compute_type_t compute, void *field) {
    char p[256];
    int rows, cols;
    transformer_module_path(p, sizeof p, mod, layer);
    transformer_module_shape(dims, mod, &rows, &cols);
    if (transformer_module_kind(mod) == TK_NORM) return load_ln(m, w, p, rows, 0, field);
    return load_linear(m, w, p, rows, cols, compute, field);
}

/* The width d, from the encoder embedding (or its alternative name, which then replaces
 * enc_emb_name): a [vocabulary, width] tensor with at least one row, so that d is bounded by the
 * file size. */
static tern_status_t read_width(transformer_t *m, weights_t *w, char *enc_emb_name, size_t n) {
    if (!weights_get(w, enc_emb_name) && weights_get(w, TRANSFORMER_ENC_EMB_ALT))
        snprintf(enc_emb_name, n, "%s", TRANSFORMER_ENC_EMB_ALT);
    const tensor_t *ee = weights_get(w, enc_emb_name);
    if (!ee)
        return tern_error(TERN_ERR_FORMAT, "%s: missing tensor '%s' (not a Transformer encoder-decoder model?)",
                          weights_path(w), enc_emb_name);
    if (ee->rank != 2 || ee->shape[0] < 1 || ee->shape[1] < 1 || ee->shape[1] > (1 << 20))
        return tern_error(TERN_ERR_MISMATCH, "%s: tensor '%s': expected shape [vocabulary >= 1, width "
                          "1..%d], got rank %d [%lld, %lld]", weights_path(w), enc_emb_name, 1 << 20,
                          ee->rank, (long long)(ee->rank > 0 ? ee->shape[0] : 0),
                          (long long)(ee->rank > 1 ? ee->shape[1] : 0));
    m->d = (int)ee->shape[1];
    return TERN_OK;
}

/* The encoder's and decoder's layer counts: both at least one, with no gap. */
static tern_status_t read_layer_counts(transformer_t *m, weights_t *w) {
    const char *gap_e, *gap_d;
    m->enc_layers = count_layers(w, "encoder", &gap_e);
    m->dec_layers = count_layers(w, "decoder", &gap_d);
    if (gap_e || gap_d)
        return tern_error(TERN_ERR_FORMAT, "%s: tensor '%s', but no tensors of layer %d before it (missing "
                          "layers?)", weights_path(w), gap_e ? gap_e : gap_d, gap_e ? m->enc_layers : m->dec_layers);
    if (m->enc_layers == 0 || m->dec_layers == 0)
        return tern_error(TERN_ERR_FORMAT, "%s: no encoder or decoder layers found", weights_path(w));
    return TERN_OK;
}

/* The head count H (stored, or the spec's default), dividing d, the same in the decoder. */
static tern_status_t read_heads(transformer_t *m, weights_t *w, const char *enc_emb_name) {
    const char *spec = weights_spec_name(w);
    int64_t heads_default = !strcmp(spec, "TransformerBig") ? 16 : !strcmp(spec, "TransformerBase") ? 8 : 0;
    const char *enc_heads = transformer_key_name(TKEY_ENC_HEADS);
    const char *heads_name = weights_get(w, enc_heads) ? enc_heads : TRANSFORMER_KEY_HEADS_ALT;
    int64_t heads = scalar_or(w, enc_heads, scalar_or(w, TRANSFORMER_KEY_HEADS_ALT, heads_default));
    if (heads <= 0 || heads > m->d || m->d % heads)
        return tern_error(TERN_ERR_MISMATCH, "%s: tensor '%s': %lld heads do not divide the width %d of '%s'",
                          weights_path(w), heads_name, (long long)heads, m->d, enc_emb_name);
    m->H = (int)heads;
    int dec_heads = (int)scalar_or(w, transformer_key_name(TKEY_DEC_HEADS), m->H);
    if (dec_heads != m->H)
        return tern_error(TERN_ERR_UNSUPPORTED, "%s: tensor 'decoder/num_heads': encoder and decoder head "
                          "counts differ (%d, %d)", weights_path(w), m->H, dec_heads);
    return TERN_OK;
}

/* The feed-forward width F, from the first encoder layer's first feed-forward weight (*f1). */
static tern_status_t read_ffn_width(transformer_t *m, weights_t *w, const char *ffn1_name, const tensor_t **f1) {
    *f1 = weights_get(w, ffn1_name);
    if (!*f1 || (*f1)->rank != 2)
        return tern_error(TERN_ERR_FORMAT, "%s: missing tensor '%s'", weights_path(w), ffn1_name);
    if ((*f1)->shape[0] < 1 || (*f1)->shape[0] > (1 << 24))
        return tern_error(TERN_ERR_MISMATCH, "%s: tensor '%s': feed-forward width %lld out of range",
                          weights_path(w), ffn1_name, (long long)(*f1)->shape[0]);
    m->F = (int)(*f1)->shape[0];
    return TERN_OK;
}

/* The scalar options: norm placement, activation, embedding scaling, decoder start, alignment
 * layer and heads; then eps and whether int8 computes. */
static tern_status_t read_options(transformer_t *m, weights_t *w, tern_compute_type_t compute, float eps,
                                  const tensor_t *f1) {
    m->pre_norm = (int)scalar_or(w, transformer_key_name(TKEY_ENC_PRE_NORM), 1);
    if (scalar_or(w, transformer_key_name(TKEY_DEC_PRE_NORM), m->pre_norm) != m->pre_norm)
        return tern_error(TERN_ERR_UNSUPPORTED, "%s: encoder and decoder norms differ", weights_path(w));
    int64_t act = scalar_or(w, transformer_key_name(TKEY_ENC_ACT), ACT_RELU);
    if (act < ACT_RELU || act > ACT_TANH)
        return tern_error(TERN_ERR_FORMAT, "%s: tensor '%s': unknown activation %lld", weights_path(w),
                          transformer_key_name(TKEY_ENC_ACT), (long long)act);
    m->act = (activation_t)act;
    m->enc_scale_emb = (int)scalar_or(w, transformer_key_name(TKEY_ENC_SCALE_EMB), 1);
    m->dec_scale_emb = (int)scalar_or(w, transformer_key_name(TKEY_DEC_SCALE_EMB), 1);
    m->dec_zero_start = (int)scalar_or(w, transformer_key_name(TKEY_DEC_ZERO_START), 0);
    int64_t ssru = scalar_or(w, transformer_key_name(TKEY_DEC_SSRU), 0);
    if (ssru != 0 && ssru != 1)
        return tern_error(TERN_ERR_FORMAT, "%s: tensor '%s': %lld (0 or 1)", weights_path(w),
                          transformer_key_name(TKEY_DEC_SSRU), (long long)ssru);
    m->dec_ssru = (int)ssru;
    /* (an SSRU decoder has no self-attention keys and values) */
    m->dec_raw_self_kv = (int)scalar_or(w, transformer_key_name(TKEY_DEC_RAW_SELF_KV), 0) && m->pre_norm && !m->dec_ssru;
    int al = (int)scalar_or(w, transformer_key_name(TKEY_DEC_ALIGN_LAYER), -1);
    m->alignment_layer = al < 0 ? m->dec_layers + al : al;
    if (m->alignment_layer < 0 || m->alignment_layer >= m->dec_layers) m->alignment_layer = m->dec_layers - 1;
    m->alignment_heads = (int)scalar_or(w, transformer_key_name(TKEY_DEC_ALIGN_HEADS), 1);
    if (m->alignment_heads > m->H || m->alignment_heads < 0) m->alignment_heads = 0;
    m->eps = eps > 0 ? eps : 1e-6f;
    m->int8 = compute == TERN_COMPUTE_INT8 ||
              (compute == TERN_COMPUTE_AUTO && f1->dtype == DT_I8);
    return TERN_OK;
}

/* The encoder and decoder layers, their final layer norms (required when pre-norm) and the output
 * projection. */
static tern_status_t load_layers(transformer_t *m, weights_t *w, tern_compute_type_t compute) {
    tern_status_t st;
    char p[256];
    int d = m->d, F = m->F;
    m->enc = calloc((size_t)m->enc_layers, sizeof *m->enc);
    m->dec = calloc((size_t)m->dec_layers, sizeof *m->dec);
    if (!m->enc || !m->dec) return tern_error(TERN_ERR_NOMEM, "out of memory");
    transformer_dims_t dims = {m->src_vocab, m->tgt_vocab, d, F, m->enc_layers, m->dec_layers, 0, m->pre_norm,
                               0, 0, 0, 0, m->dec_ssru};
    for (int l = 0; l < m->enc_layers; l++)
        for (size_t k = 0; k < sizeof ENC_FIELDS / sizeof ENC_FIELDS[0]; k++)
            if ((st = load_module(m, w, &dims, ENC_FIELDS[k].mod, l, compute, (char *)&m->enc[l] + ENC_FIELDS[k].off)))
                return st;
    for (int l = 0; l < m->dec_layers; l++)
        for (size_t k = 0; k < sizeof DEC_FIELDS / sizeof DEC_FIELDS[0]; k++)
            if (!(m->dec_ssru ? DEC_FIELDS[k].mod == TM_DEC_SELF_QKV || DEC_FIELDS[k].mod == TM_DEC_SELF_OUT
                              : DEC_FIELDS[k].mod == TM_DEC_SSRU) &&
                (st = load_module(m, w, &dims, DEC_FIELDS[k].mod, l, compute, (char *)&m->dec[l] + DEC_FIELDS[k].off)))
                return st;
    if ((st = load_ln(m, w, transformer_module_path(p, sizeof p, TM_ENC_FINAL_LN, -1), d, 1, &m->enc_ln))) return st;
    if ((st = load_ln(m, w, transformer_module_path(p, sizeof p, TM_DEC_FINAL_LN, -1), d, 1, &m->dec_ln))) return st;
    if (m->pre_norm && (!m->enc_ln.gamma || !m->dec_ln.gamma))
        return tern_error(TERN_ERR_FORMAT, "%s: pre-norm model without final layer norms "
                          "('encoder/layer_norm', 'decoder/layer_norm')", weights_path(w));
    if ((st = load_linear(m, w, transformer_module_path(p, sizeof p, TM_PROJ, -1), m->tgt_vocab, d, compute,
                          &m->proj)))
        return st;
    return TERN_OK;
}

tern_status_t transformer_build(transformer_t *m, weights_t *w, tern_compute_type_t compute,
                                float eps) {
    memset(m, 0, sizeof *m);
    tern_status_t st;
    if ((st = desc_check_supported(&TRANSFORMER_DESC, w))) return st;

    /* Shape from the variables. */
    char enc_emb_name[96], ffn1_name[96], dec_emb_name[96];
    transformer_tensor_name(enc_emb_name, sizeof enc_emb_name, TM_ENC_EMB, -1, TP_WEIGHT);
    transformer_tensor_name(dec_emb_name, sizeof dec_emb_name, TM_DEC_EMB, -1, TP_WEIGHT);
    transformer_tensor_name(ffn1_name, sizeof ffn1_name, TM_ENC_FFN1, 0, TP_WEIGHT);
    const tensor_t *f1 = NULL;
    if ((st = read_width(m, w, enc_emb_name, sizeof enc_emb_name)) || (st = read_layer_counts(m, w)) ||
        (st = read_heads(m, w, enc_emb_name)) || (st = read_ffn_width(m, w, ffn1_name, &f1)) ||
        (st = read_options(m, w, compute, eps, f1)))
        return st;

    /* Embeddings and positions. */
    if ((st = load_embedding(m, w, enc_emb_name, compute, &m->enc_emb))) return st;
    if ((st = load_embedding(m, w, dec_emb_name, compute, &m->dec_emb))) return st;
    m->src_vocab = m->enc_emb.V;
    m->tgt_vocab = m->dec_emb.V;

    if ((st = load_layers(m, w, compute))) return st;
    /* Positions last: the sinusoidal table (2048 x d floats) is only built once the layers have
     * shown that the file really holds weights of width d (a corrupt few-byte tensor could claim
     * any width). */
    if ((st = load_positions(m, w, TM_ENC_POS, &m->enc_pos, &m->enc_max_pos))) return st;
    if ((st = load_positions(m, w, TM_DEC_POS, &m->dec_pos, &m->dec_max_pos))) return st;
    return TERN_OK;
}

void transformer_free(transformer_t *m) {
    if (!m) return;
    if (m->screen && getenv("TERN_SCREEN_STATS")) {
        long rows, cands, fallbacks;
        linear_screen_stats(m->screen, &rows, &cands, &fallbacks);
        fprintf(stderr, "output projection screen: %ld rows, %ld candidates (%.2f per row), %ld fallbacks, "
                "float32 layer %s\n", rows, cands, rows ? (double)cands / rows : 0.0, fallbacks,
                m->pk_proj ? "packed" : "sgemm");
    }
    linear_screen_free(m->screen);
    for (int i = 0; i < m->n_owned; i++) aligned_free(m->owned[i]);
    free(m->owned);
    free(m->enc);
    free(m->dec);
    memset(m, 0, sizeof *m);
}
