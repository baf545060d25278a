/*
 * mini_model.h — builds tiny random-weight Transformer models in memory and serializes them the
 * way CTranslate2 (model.bin, binary versions 1..6) and Tern (model.safetensors) store them,
 * independently of the loaders under test: the variables, names, scalar flags and aliases are
 * those CTranslate2 4.x writes for a TransformerSpec (see tests/peer/make_models.py for the real
 * thing). Used by tests/c/test_model_files.c (corrupting these files field by field) and by the
 * fuzz targets (fuzz/) to write their seed corpus.
 *
 * Header-only (static functions); the includer links libtern (dtype_size, float_to_half).
 * Every function exits the process on allocation failure: this is test code.
 */
#ifndef TERN_MINI_MODEL_H
#define TERN_MINI_MODEL_H

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/kernels.h"
#include "model/weights.h"

#define MM_NAME_MAX 160

typedef struct {
    char name[MM_NAME_MAX];
    dtype_t dt;
    int rank;
    int64_t shape[TENSOR_MAX_RANK];
    uint8_t *data;
    size_t nbytes;
} mm_var_t;

typedef struct {
    mm_var_t *v;
    int n, cap;
    char (*alias)[2][MM_NAME_MAX]; /* alias, target */
    int n_alias;
} mm_model_t;

typedef struct {
    int enc_layers, dec_layers, d, heads, ffn, src_vocab, tgt_vocab;
    int pre_norm;       /* 1: pre-norm with final layer norms */
    int tie_output;     /* decoder/projection/weight is an alias of decoder/embeddings/weight */
    int learned_pos;    /* {encoder,decoder}/position_encodings/encodings [max_pos, d] */
    int int8;           /* linear and embedding weights int8 with <name>_scale float32 [rows] */
    int float16;        /* floating weights as float16 */
    unsigned seed;
} mm_shape_t;

static const mm_shape_t MM_TINY = {1, 1, 4, 2, 6, 7, 7, 1, 1, 0, 0, 0, 1};

static inline void *mm_xalloc(size_t n) {
    void *p = calloc(1, n ? n : 1);
    if (!p) {
        fprintf(stderr, "mini_model: out of memory\n");
        exit(2);
    }
    return p;
}

static inline uint32_t mm_rand(unsigned *s) {
    *s = *s * 1103515245u + 12345u;
    return (*s >> 8) & 0xffffff;
}

static inline mm_var_t *mm_find(mm_model_t *m, const char *name) {
    for (int i = 0; i < m->n; i++)
        if (!strcmp(m->v[i].name, name)) return &m->v[i];
    return NULL;
}

/* Adds (or replaces) a variable; data copied (NULL: zeros). */
static inline mm_var_t *mm_add(mm_model_t *m, const char *name, dtype_t dt, int rank, const int64_t *shape,
                        const void *data) {
    mm_var_t *v = mm_find(m, name);
    if (!v) {
        if (m->n == m->cap) {
            m->cap = m->cap ? 2 * m->cap : 64;
            mm_var_t *nv = realloc(m->v, (size_t)m->cap * sizeof *nv);
            if (!nv) exit(2);
            m->v = nv;
        }
        v = &m->v[m->n++];
    } else {
        free(v->data);
    }
    memset(v, 0, sizeof *v);
    snprintf(v->name, sizeof v->name, "%s", name);
    v->dt = dt;
    v->rank = rank;
    size_t numel = 1;
    for (int i = 0; i < rank; i++) {
        v->shape[i] = shape[i];
        numel *= (size_t)shape[i];
    }
    v->nbytes = numel * dtype_size(dt);
    v->data = mm_xalloc(v->nbytes);
    if (data) memcpy(v->data, data, v->nbytes);
    return v;
}

static inline void mm_remove(mm_model_t *m, const char *name) {
    mm_var_t *v = mm_find(m, name);
    if (!v) return;
    free(v->data);
    *v = m->v[--m->n];
}

static inline void mm_add_alias(mm_model_t *m, const char *alias, const char *target) {
    void *na = realloc(m->alias, (size_t)(m->n_alias + 1) * sizeof *m->alias);
    if (!na) exit(2);
    m->alias = na;
    snprintf(m->alias[m->n_alias][0], MM_NAME_MAX, "%s", alias);
    snprintf(m->alias[m->n_alias][1], MM_NAME_MAX, "%s", target);
    m->n_alias++;
}

static inline void mm_free(mm_model_t *m) {
    for (int i = 0; i < m->n; i++) free(m->v[i].data);
    free(m->v);
    free(m->alias);
    memset(m, 0, sizeof *m);
}

static inline int mm_cmp(const void *a, const void *b) {
    return strcmp(((const mm_var_t *)a)->name, ((const mm_var_t *)b)->name);
}

static inline void mm_sort(mm_model_t *m) { qsort(m->v, (size_t)m->n, sizeof *m->v, mm_cmp); }

static inline void mm_scalar(mm_model_t *m, const char *name, dtype_t dt, int64_t value) {
    int8_t i8 = (int8_t)value;
    int16_t i16 = (int16_t)value;
    int32_t i32 = (int32_t)value;
    mm_add(m, name, dt, 0, NULL, dt == DT_I8 ? (void *)&i8 : dt == DT_I16 ? (void *)&i16 : (void *)&i32);
}

/* A float tensor [rows, cols] (cols 0: [rows]) of random values scaled by std, stored as float32,
 * float16 or (quant && int8) int8 with a <name>_scale tensor. */
static inline void mm_weight(mm_model_t *m, const mm_shape_t *s, unsigned *seed, const char *name, int64_t rows,
                      int64_t cols, float std, float offset, int quant) {
    int rank = cols ? 2 : 1;
    int64_t shape[2] = {rows, cols};
    size_t n = (size_t)rows * (size_t)(cols ? cols : 1);
    float *f = mm_xalloc(n * sizeof(float));
    for (size_t i = 0; i < n; i++) f[i] = offset + std * ((float)mm_rand(seed) / 8388608.0f - 1.0f);
    if (quant && s->int8 && rank == 2) {
        int8_t *q = mm_xalloc(n);
        float *scale = mm_xalloc((size_t)rows * sizeof(float));
        for (int64_t r = 0; r < rows; r++) {
            float amax = 0;
            for (int64_t c = 0; c < cols; c++) amax = fabsf(f[r * cols + c]) > amax ? fabsf(f[r * cols + c]) : amax;
            scale[r] = amax > 0 ? 127.0f / amax : 1.0f;
            for (int64_t c = 0; c < cols; c++) q[r * cols + c] = (int8_t)lrintf(f[r * cols + c] * scale[r]);
        }
        mm_add(m, name, DT_I8, 2, shape, q);
        char sn[MM_NAME_MAX];
        snprintf(sn, sizeof sn, "%s_scale", name);
        mm_add(m, sn, DT_F32, 1, shape, scale);
        free(q);
        free(scale);
    } else if (s->float16) {
        uint16_t *h = mm_xalloc(n * 2);
        for (size_t i = 0; i < n; i++) h[i] = float_to_half(f[i]);
        mm_add(m, name, DT_F16, rank, shape, h);
        free(h);
    } else {
        mm_add(m, name, DT_F32, rank, shape, f);
    }
    free(f);
}

static inline void mm_linear(mm_model_t *m, const mm_shape_t *s, unsigned *seed, const char *prefix, int64_t N, int64_t K) {
    char nm[MM_NAME_MAX];
    snprintf(nm, sizeof nm, "%s/weight", prefix);
    mm_weight(m, s, seed, nm, N, K, 1.0f / (float)K, 0.0f, 1);
    snprintf(nm, sizeof nm, "%s/bias", prefix);
    mm_weight(m, s, seed, nm, N, 0, 0.1f, 0.0f, 0);
}

static inline void mm_layernorm(mm_model_t *m, const mm_shape_t *s, unsigned *seed, const char *prefix, int64_t d) {
    char nm[MM_NAME_MAX];
    snprintf(nm, sizeof nm, "%s/gamma", prefix);
    mm_weight(m, s, seed, nm, d, 0, 0.1f, 1.0f, 0);
    snprintf(nm, sizeof nm, "%s/beta", prefix);
    mm_weight(m, s, seed, nm, d, 0, 0.1f, 0.0f, 0);
}

/* The variables of a TransformerSpec as CTranslate2 4.x writes them (sorted by name). */
static inline void mm_build(mm_model_t *m, const mm_shape_t *s) {
    memset(m, 0, sizeof *m);
    unsigned seed = s->seed ? s->seed : 1;
    int64_t d = s->d, F = s->ffn;
    char p[MM_NAME_MAX];
    for (int side = 0; side < 2; side++) {
        const char *S = side ? "decoder" : "encoder";
        int L = side ? s->dec_layers : s->enc_layers;
        snprintf(p, sizeof p, "%s/%s", S, side ? "embeddings/weight" : "embeddings_0/weight");
        mm_weight(m, s, &seed, p, side ? s->tgt_vocab : s->src_vocab, d, 1.0f, 0.0f, 1);
        if (s->learned_pos) {
            snprintf(p, sizeof p, "%s/position_encodings/encodings", S);
            mm_weight(m, s, &seed, p, 16, d, 0.3f, 0.0f, 0);
        }
        for (int l = 0; l < L; l++) {
            char q[MM_NAME_MAX];
            snprintf(q, sizeof q, "%s/layer_%d/self_attention/layer_norm", S, l);
            mm_layernorm(m, s, &seed, q, d);
            snprintf(q, sizeof q, "%s/layer_%d/self_attention/linear_0", S, l);
            mm_linear(m, s, &seed, q, 3 * d, d);
            snprintf(q, sizeof q, "%s/layer_%d/self_attention/linear_1", S, l);
            mm_linear(m, s, &seed, q, d, d);
            if (side) {
                snprintf(q, sizeof q, "%s/layer_%d/attention/layer_norm", S, l);
                mm_layernorm(m, s, &seed, q, d);
                snprintf(q, sizeof q, "%s/layer_%d/attention/linear_0", S, l);
                mm_linear(m, s, &seed, q, d, d);
                snprintf(q, sizeof q, "%s/layer_%d/attention/linear_1", S, l);
                mm_linear(m, s, &seed, q, 2 * d, d);
                snprintf(q, sizeof q, "%s/layer_%d/attention/linear_2", S, l);
                mm_linear(m, s, &seed, q, d, d);
            }
            snprintf(q, sizeof q, "%s/layer_%d/ffn/layer_norm", S, l);
            mm_layernorm(m, s, &seed, q, d);
            snprintf(q, sizeof q, "%s/layer_%d/ffn/linear_0", S, l);
            mm_linear(m, s, &seed, q, F, d);
            snprintf(q, sizeof q, "%s/layer_%d/ffn/linear_1", S, l);
            mm_linear(m, s, &seed, q, d, F);
        }
        if (s->pre_norm) {
            snprintf(p, sizeof p, "%s/layer_norm", S);
            mm_layernorm(m, s, &seed, p, d);
        }
        snprintf(p, sizeof p, "%s/num_heads", S);
        mm_scalar(m, p, DT_I16, s->heads);
        snprintf(p, sizeof p, "%s/pre_norm", S);
        mm_scalar(m, p, DT_I8, s->pre_norm);
        snprintf(p, sizeof p, "%s/activation", S);
        mm_scalar(m, p, DT_I8, 0);
        snprintf(p, sizeof p, "%s/scale_embeddings", S);
        mm_scalar(m, p, DT_I8, 1);
    }
    mm_scalar(m, "decoder/alignment_heads", DT_I16, 1);
    mm_scalar(m, "decoder/alignment_layer", DT_I16, -1);
    mm_scalar(m, "decoder/start_from_zero_embedding", DT_I8, 0);
    mm_scalar(m, "encoder/multi_query_attention", DT_I8, 0);
    if (s->tie_output) {
        mm_add_alias(m, "decoder/projection/weight", "decoder/embeddings/weight");
    } else {
        mm_weight(m, s, &seed, "decoder/projection/weight", s->tgt_vocab, d, 1.0f, 0.0f, 1);
    }
    mm_weight(m, s, &seed, "decoder/projection/bias", s->tgt_vocab, 0, 0.5f, 0.0f, 0);
    mm_sort(m);
}

/* ------------------------------------------------------------ byte buffer */

typedef struct {
    uint8_t *p;
    size_t n, cap;
} mm_buf_t;

static inline void mm_put(mm_buf_t *b, const void *src, size_t n) {
    if (b->n + n > b->cap) {
        size_t nc = b->cap ? b->cap * 2 : 4096;
        while (nc < b->n + n) nc *= 2;
        uint8_t *np = realloc(b->p, nc);
        if (!np) exit(2);
        b->p = np;
        b->cap = nc;
    }
    if (n) memcpy(b->p + b->n, src, n);
    b->n += n;
}

static inline void mm_u8(mm_buf_t *b, uint32_t v) {
    uint8_t x = (uint8_t)v;
    mm_put(b, &x, 1);
}
static inline void mm_u16(mm_buf_t *b, uint32_t v) {
    uint8_t x[2] = {(uint8_t)v, (uint8_t)(v >> 8)};
    mm_put(b, x, 2);
}
static inline void mm_u32(mm_buf_t *b, uint32_t v) {
    uint8_t x[4] = {(uint8_t)v, (uint8_t)(v >> 8), (uint8_t)(v >> 16), (uint8_t)(v >> 24)};
    mm_put(b, x, 4);
}
static inline void mm_str(mm_buf_t *b, const char *s) {
    size_t n = strlen(s);
    mm_u16(b, (uint32_t)n + 1);
    mm_put(b, s, n + 1);
}

/* Where each part of a serialized model.bin lies, for tests that cut or patch it. */
typedef struct {
    size_t header_end;               /* after the variable count */
    int n;                           /* variables */
    size_t *rec, *name_end, *rank_at, *dtype_at, *size_at, *data_at, *rec_end; /* per variable */
    size_t alias_at;                 /* the alias count (version >= 3), else the end */
    size_t size;
} mm_layout_t;

static inline void mm_layout_free(mm_layout_t *l) {
    free(l->rec);
    free(l->name_end);
    free(l->rank_at);
    free(l->dtype_at);
    free(l->size_at);
    free(l->data_at);
    free(l->rec_end);
    memset(l, 0, sizeof *l);
}

/* model.bin of binary version 1..6. Versions < 3 have no aliases: the alias targets are stored
 * again under the alias names (as CTranslate2 did); versions < 4 store an item size and an
 * element count instead of a dtype and a byte count (only float32/int16/int8 exist there). */
static inline void mm_serialize_ct2(const mm_model_t *m0, int version, mm_buf_t *b, mm_layout_t *lay) {
    mm_model_t m = {0};
    for (int i = 0; i < m0->n; i++)
        mm_add(&m, m0->v[i].name, m0->v[i].dt, m0->v[i].rank, m0->v[i].shape, m0->v[i].data);
    int n_alias = m0->n_alias;
    if (version < 3) {
        for (int a = 0; a < m0->n_alias; a++) {
            mm_var_t *t = mm_find(&m, m0->alias[a][1]);
            if (t) {
                mm_var_t copy = *t;
                mm_add(&m, m0->alias[a][0], copy.dt, copy.rank, copy.shape, copy.data);
            }
        }
        n_alias = 0;
    }
    mm_sort(&m);
    memset(b, 0, sizeof *b);
    mm_layout_t L = {0};
    L.n = m.n;
    L.rec = mm_xalloc(sizeof(size_t) * (size_t)(m.n + 1));
    L.name_end = mm_xalloc(sizeof(size_t) * (size_t)(m.n + 1));
    L.rank_at = mm_xalloc(sizeof(size_t) * (size_t)(m.n + 1));
    L.dtype_at = mm_xalloc(sizeof(size_t) * (size_t)(m.n + 1));
    L.size_at = mm_xalloc(sizeof(size_t) * (size_t)(m.n + 1));
    L.data_at = mm_xalloc(sizeof(size_t) * (size_t)(m.n + 1));
    L.rec_end = mm_xalloc(sizeof(size_t) * (size_t)(m.n + 1));
    mm_u32(b, (uint32_t)version);
    if (version >= 2) {
        mm_str(b, "TransformerSpec");
        mm_u32(b, 7);
    }
    mm_u32(b, (uint32_t)m.n);
    L.header_end = b->n;
    for (int i = 0; i < m.n; i++) {
        const mm_var_t *v = &m.v[i];
        L.rec[i] = b->n;
        mm_str(b, v->name);
        L.name_end[i] = b->n;
        L.rank_at[i] = b->n;
        mm_u8(b, (uint32_t)v->rank);
        for (int r = 0; r < v->rank; r++) mm_u32(b, (uint32_t)v->shape[r]);
        L.dtype_at[i] = b->n;
        if (version >= 4) {
            mm_u8(b, (uint32_t)v->dt);
            L.size_at[i] = b->n;
            mm_u32(b, (uint32_t)v->nbytes);
        } else {
            size_t es = dtype_size(v->dt);
            mm_u8(b, (uint32_t)es);
            L.size_at[i] = b->n;
            mm_u32(b, (uint32_t)(v->nbytes / es));
        }
        L.data_at[i] = b->n;
        mm_put(b, v->data, v->nbytes);
        L.rec_end[i] = b->n;
    }
    L.alias_at = b->n;
    if (version >= 3) {
        mm_u32(b, (uint32_t)n_alias);
        for (int a = 0; a < n_alias; a++) {
            mm_str(b, m0->alias[a][0]);
            mm_str(b, m0->alias[a][1]);
        }
    }
    L.size = b->n;
    mm_free(&m);
    if (lay) *lay = L;
    else mm_layout_free(&L);
}

static inline const char *mm_st_dtype(dtype_t dt) {
    switch (dt) {
    case DT_F32: return "F32";
    case DT_I8: return "I8";
    case DT_I16: return "I16";
    case DT_I32: return "I32";
    case DT_F16: return "F16";
    case DT_BF16: return "BF16";
    }
    return "?";
}

/* safetensors written by hand: header JSON (tensors in the model's order, then __metadata__ with
 * "alias:<name>": "<target>"), padded with spaces to a multiple of 8, data packed in order
 * (no alignment: float32 tensors may start at odd offsets, which the reader must copy). */
static inline void mm_serialize_safetensors(const mm_model_t *m, mm_buf_t *b) {
    mm_buf_t j = {0};
    char tmp[512];
    mm_put(&j, "{", 1);
    size_t off = 0;
    for (int i = 0; i < m->n; i++) {
        const mm_var_t *v = &m->v[i];
        int k = snprintf(tmp, sizeof tmp, "%s\"%s\":{\"dtype\":\"%s\",\"shape\":[", i ? "," : "", v->name,
                         mm_st_dtype(v->dt));
        mm_put(&j, tmp, (size_t)k);
        for (int r = 0; r < v->rank; r++) {
            k = snprintf(tmp, sizeof tmp, "%s%lld", r ? "," : "", (long long)v->shape[r]);
            mm_put(&j, tmp, (size_t)k);
        }
        k = snprintf(tmp, sizeof tmp, "],\"data_offsets\":[%zu,%zu]}", off, off + v->nbytes);
        mm_put(&j, tmp, (size_t)k);
        off += v->nbytes;
    }
    if (m->n_alias) {
        mm_put(&j, ",\"__metadata__\":{", 17);
        for (int a = 0; a < m->n_alias; a++) {
            int k = snprintf(tmp, sizeof tmp, "%s\"alias:%s\":\"%s\"", a ? "," : "", m->alias[a][0], m->alias[a][1]);
            mm_put(&j, tmp, (size_t)k);
        }
        mm_put(&j, "}", 1);
    }
    mm_put(&j, "}", 1);
    while (j.n % 8) mm_put(&j, " ", 1);
    memset(b, 0, sizeof *b);
    uint8_t len[8];
    for (int i = 0; i < 8; i++) len[i] = (uint8_t)((uint64_t)j.n >> (8 * i));
    mm_put(b, len, 8);
    mm_put(b, j.p, j.n);
    for (int i = 0; i < m->n; i++) mm_put(b, m->v[i].data, m->v[i].nbytes);
    free(j.p);
}

static inline int mm_write_file(const char *path, const void *data, size_t n) {
    FILE *f = fopen(path, "wb");
    if (!f) return -1;
    size_t w = n ? fwrite(data, 1, n, f) : 0;
    int bad = fclose(f) != 0 || w != n;
    return bad ? -1 : 0;
}

static inline int mm_write_text(const char *dir, const char *name, const char *text) {
    char p[1024];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    return mm_write_file(p, text, strlen(text));
}

/* A JSON vocabulary of n tokens: <unk> <s> </s> then t3 t4 ... */
static inline void mm_vocab_json(char *out, size_t cap, int n) {
    static const char *specials[] = {"<unk>", "<s>", "</s>"};
    size_t k = 0;
    k += (size_t)snprintf(out + k, cap - k, "[");
    for (int i = 0; i < n && k < cap; i++) {
        if (i < 3) k += (size_t)snprintf(out + k, cap - k, "%s\"%s\"", i ? ", " : "", specials[i]);
        else k += (size_t)snprintf(out + k, cap - k, ", \"t%d\"", i);
    }
    if (k < cap) snprintf(out + k, cap - k, "]");
}

static const char MM_CONFIG[] =
    "{\n  \"add_source_bos\": false,\n  \"add_source_eos\": false,\n  \"bos_token\": \"<s>\",\n"
    "  \"decoder_start_token\": \"<s>\",\n  \"eos_token\": \"</s>\",\n  \"layer_norm_epsilon\": null,\n"
    "  \"unk_token\": \"<unk>\"\n}\n";

/* Writes config.json and the vocabularies (shared when the sizes are equal) into dir. */
static inline int mm_write_side_files(const char *dir, int src_vocab, int tgt_vocab) {
    char *v = mm_xalloc(64 * (size_t)(src_vocab + tgt_vocab) + 64);
    int bad = mm_write_text(dir, "config.json", MM_CONFIG);
    if (src_vocab == tgt_vocab) {
        mm_vocab_json(v, 64 * (size_t)(src_vocab + tgt_vocab) + 64, src_vocab);
        bad |= mm_write_text(dir, "shared_vocabulary.json", v);
    } else {
        mm_vocab_json(v, 64 * (size_t)(src_vocab + tgt_vocab) + 64, src_vocab);
        bad |= mm_write_text(dir, "source_vocabulary.json", v);
        mm_vocab_json(v, 64 * (size_t)(src_vocab + tgt_vocab) + 64, tgt_vocab);
        bad |= mm_write_text(dir, "target_vocabulary.json", v);
    }
    free(v);
    return bad;
}

#endif
