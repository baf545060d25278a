/*
 * hf_format.c — a Hugging Face MarianMT or M2M-100/NLLB checkpoint as a Tern Transformer
 * (hf_format.h).
 *
 * transformers' MarianMTModel (modeling_marian.py): post-norm layers (residual, then
 * self_attn_layer_norm / encoder_attn_layer_norm / final_layer_norm), embeddings times
 * sqrt(d_model) when scale_embedding, sinusoidal positions from 0 (sin in the first half of the
 * width, cos in the second, frequency 1/10000^(2 (j div 2) / d)), no final layer norms, logits =
 * lm_head(x) + final_logits_bias, the decoder started from decoder_start_token_id (the pad token),
 * which generation never outputs (config.json's bad_words_ids).
 *
 * transformers' M2M100ForConditionalGeneration (modeling_m2m_100.py, NLLB's class too): pre-norm
 * layers with a final layer_norm on each side, embeddings times sqrt(d_model) when
 * scale_embedding, fairseq's sinusoids (frequency exp(-j ln(10000) / (C/2 - 1)), sines then
 * cosines, in float32) looked up at position + pad_token_id + 1 (position ids start after the
 * padding index), the lm_head tied to the shared embedding, no logits bias, the decoder started
 * from </s> (decoder_start_token_id) and then the target language's code (forced_bos_token_id:
 * the caller's target language, a forced first token). Vocabulary: NllbTokenizer's (no
 * vocab.json: <s> <pad> </s> <unk>, then sentencepiece.bpe.model's pieces from its id 3 on at
 * id + 1) or M2M100Tokenizer's (vocab.json), with the added tokens (language codes, <mask>) at
 * the ids tokenizer_config.json's added_tokens_decoder gives.
 *
 * Legend: C width (d_model), F feed-forward width, V vocabulary, P position rows.
 */
#include "model/hf_format.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/kernels.h"
#include "model/transformer_desc.h"
#include "model/weights_internal.h"
#include "text/spm.h"

enum { REQUIRED = -0x7fffffff };

/* config.json's keys that shape the model. */
typedef struct {
    char path[1100];
    char model_type[32];
    int m2m;                 /* model_type m2m_100 (else marian) */
    int d, enc_layers, dec_layers, enc_heads, dec_heads, enc_ffn, dec_ffn;
    int act;                 /* activation_t */
    int scale_emb, max_pos, vocab, dec_vocab;
    int pad, eos, start;
    int share_emb, tie;
} hf_config_t;

/* ------------------------------------------------------------------ config.json */

static tern_status_t json_int(const cJSON *root, const char *path, const char *key, int lo, int hi, int def, int *v) {
    const cJSON *it = cJSON_GetObjectItemCaseSensitive(root, key);
    if (!it || cJSON_IsNull(it)) {
        if (def == REQUIRED) return tern_error(TERN_ERR_FORMAT, "%s: missing key \"%s\"", path, key);
        *v = def;
        return TERN_OK;
    }
    double d = cJSON_IsNumber(it) ? it->valuedouble : NAN;
    if (!(d >= lo && d <= hi) || d != floor(d))
        return tern_error(TERN_ERR_FORMAT, "%s: \"%s\" must be an integer in [%d, %d]", path, key, lo, hi);
    *v = (int)d;
    return TERN_OK;
}

static tern_status_t json_bool(const cJSON *root, const char *path, const char *key, int def, int *v) {
    const cJSON *it = cJSON_GetObjectItemCaseSensitive(root, key);
    *v = def;
    if (!it || cJSON_IsNull(it)) return TERN_OK;
    if (!cJSON_IsBool(it)) return tern_error(TERN_ERR_FORMAT, "%s: \"%s\" must be true or false", path, key);
    *v = cJSON_IsTrue(it);
    return TERN_OK;
}

/* transformers' ACT2FN names. */
static tern_status_t read_activation(const cJSON *root, const char *path, const char *def, int *act) {
    static const struct {
        const char *name;
        activation_t act;
    } names[] = {{"relu", ACT_RELU},           {"swish", ACT_SWISH},        {"silu", ACT_SWISH},
                 {"gelu", ACT_GELU},           {"gelu_new", ACT_GELU_TANH}, {"gelu_pytorch_tanh", ACT_GELU_TANH},
                 {"gelu_fast", ACT_GELU_TANH}, {"quick_gelu", ACT_GELU_SIGMOID}, {"tanh", ACT_TANH}};
    const cJSON *it = cJSON_GetObjectItemCaseSensitive(root, "activation_function");
    const char *s = it && cJSON_IsString(it) ? it->valuestring : def;
    if (it && !cJSON_IsNull(it) && !cJSON_IsString(it))
        return tern_error(TERN_ERR_FORMAT, "%s: \"activation_function\" must be a string", path);
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (!strcmp(s, names[i].name)) {
            *act = (int)names[i].act;
            return TERN_OK;
        }
    return tern_error(TERN_ERR_UNSUPPORTED, "%s: \"activation_function\": '%s' is not supported (relu, swish, silu, "
                      "gelu, gelu_new, gelu_pytorch_tanh, gelu_fast, quick_gelu, tanh)", path, s);
}

/* The sizes (MarianConfig's or M2M100Config's defaults where a key is absent) and the special
 * token ids. */
static tern_status_t read_sizes(hf_config_t *c, const cJSON *r) {
    const char *p = c->path;
    tern_status_t st;
    int m2m = c->m2m;
    if ((st = json_int(r, p, "d_model", 1, 1 << 16, 1024, &c->d)) ||
        (st = json_int(r, p, "encoder_layers", 1, 1024, 12, &c->enc_layers)) ||
        (st = json_int(r, p, "decoder_layers", 1, 1024, 12, &c->dec_layers)) ||
        (st = json_int(r, p, "encoder_attention_heads", 1, 1 << 15, 16, &c->enc_heads)) ||
        (st = json_int(r, p, "decoder_attention_heads", 1, 1 << 15, 16, &c->dec_heads)) ||
        (st = json_int(r, p, "encoder_ffn_dim", 1, 1 << 24, 4096, &c->enc_ffn)) ||
        (st = json_int(r, p, "decoder_ffn_dim", 1, 1 << 24, 4096, &c->dec_ffn)) ||
        (st = json_int(r, p, "max_position_embeddings", 1, 1 << 20, 1024, &c->max_pos)) ||
        (st = json_int(r, p, "vocab_size", 1, 1 << 24, REQUIRED, &c->vocab)) ||
        (st = json_int(r, p, "decoder_vocab_size", 1, 1 << 24, c->vocab, &c->dec_vocab)) ||
        (st = json_int(r, p, "pad_token_id", 0, c->dec_vocab - 1, m2m ? 1 : REQUIRED, &c->pad)) ||
        (st = json_int(r, p, "eos_token_id", 0, c->dec_vocab - 1, m2m ? 2 : REQUIRED, &c->eos)) ||
        (st = json_int(r, p, "decoder_start_token_id", 0, c->dec_vocab - 1, m2m ? c->eos : c->pad, &c->start)) ||
        (st = json_bool(r, p, "scale_embedding", m2m, &c->scale_emb)) ||
        (st = json_bool(r, p, "share_encoder_decoder_embeddings", 1, &c->share_emb)) ||
        (st = json_bool(r, p, "tie_word_embeddings", 1, &c->tie)) || (st = read_activation(r, p, m2m ? "relu" : "gelu", &c->act)))
        return st;
    if (c->enc_heads != c->dec_heads || c->d % c->enc_heads)
        return tern_error(TERN_ERR_UNSUPPORTED, "%s: \"encoder_attention_heads\" (%d) and \"decoder_attention_heads\" "
                          "(%d) must be equal and divide \"d_model\" (%d)", p, c->enc_heads, c->dec_heads, c->d);
    if (c->enc_ffn != c->dec_ffn)
        return tern_error(TERN_ERR_UNSUPPORTED, "%s: \"encoder_ffn_dim\" (%d) and \"decoder_ffn_dim\" (%d) differ",
                          p, c->enc_ffn, c->dec_ffn);
    if (c->share_emb && c->dec_vocab != c->vocab)
        return tern_error(TERN_ERR_FORMAT, "%s: shared embeddings but \"decoder_vocab_size\" (%d) differs from "
                          "\"vocab_size\" (%d)", p, c->dec_vocab, c->vocab);
    return TERN_OK;
}

int hf_is_checkpoint(const char *config_path) {
    cJSON *root = NULL;
    if (!file_exists(config_path) || json_read_object(config_path, &root)) return 0;
    const cJSON *mt = cJSON_GetObjectItemCaseSensitive(root, "model_type");
    const cJSON *fmt = cJSON_GetObjectItemCaseSensitive(root, "format");
    int hf = mt && !(cJSON_IsString(fmt) && !strcmp(fmt->valuestring, "tern"));
    cJSON_Delete(root);
    return hf;
}

static tern_status_t read_config(hf_config_t *c, const char *dir, cJSON **root) {
    memset(c, 0, sizeof *c);
    path_join(c->path, sizeof c->path, dir, "config.json");
    tern_status_t st = json_read_object(c->path, root);
    if (st) return st;
    const cJSON *mt = cJSON_GetObjectItemCaseSensitive(*root, "model_type");
    if (!cJSON_IsString(mt)) return tern_error(TERN_ERR_FORMAT, "%s: \"model_type\" must be a string", c->path);
    snprintf(c->model_type, sizeof c->model_type, "%s", mt->valuestring);
    c->m2m = !strcmp(mt->valuestring, "m2m_100");
    if (strcmp(mt->valuestring, "marian") && !c->m2m)
        return tern_error(TERN_ERR_UNSUPPORTED, "%s: \"model_type\" '%s' is not supported (Tern reads Hugging Face "
                          "checkpoints of model_type 'marian' and 'm2m_100')", c->path, mt->valuestring);
    return read_sizes(c, *root);
}

/* ------------------------------------------------------------------ tensors */

typedef struct {
    const weights_t *hf;     /* model.safetensors as stored */
    weights_t *nw;           /* the tensors under the Transformer's names */
    const hf_config_t *c;
} builder_t;

/* The stored tensor of a transformers name: "model." + name, else name itself; NULL when neither. */
static const tensor_t *hf_get(const weights_t *hf, const char *name) {
    char b[300];
    snprintf(b, sizeof b, "model.%s", name);
    const tensor_t *t = weights_get(hf, b);
    return t ? t : weights_get(hf, name);
}

static tern_status_t missing(const builder_t *b, const char *name) {
    return tern_error(TERN_ERR_FORMAT, "%s: missing tensor 'model.%s' (or '%s')", weights_path(b->hf), name, name);
}

static tern_status_t check_shape(const builder_t *b, const tensor_t *t, int64_t rows, int64_t cols) {
    int ok = cols ? t->rank == 2 && t->shape[0] == rows && t->shape[1] == cols : t->rank == 1 && t->shape[0] == rows;
    if (ok) return TERN_OK;
    char got[96] = "";
    for (int i = 0; i < t->rank && i < 4; i++)
        snprintf(got + strlen(got), sizeof got - strlen(got), "%s%lld", i ? ", " : "", (long long)t->shape[i]);
    if (cols)
        return tern_error(TERN_ERR_MISMATCH, "%s: tensor '%s': expected shape [%lld, %lld] (%s), got [%s]",
                          weights_path(b->hf), t->name, (long long)rows, (long long)cols, b->c->path, got);
    return tern_error(TERN_ERR_MISMATCH, "%s: tensor '%s': expected shape [%lld] (%s), got [%s]", weights_path(b->hf),
                      t->name, (long long)rows, b->c->path, got);
}

/* Adds stored tensor t under name with the given shape (its bytes unchanged): pointed to where
 * it lies in the file, copied where the reader had to copy it. */
static tern_status_t add_as(builder_t *b, const char *name, const tensor_t *t, int rank, const int64_t *shape) {
    const uint8_t *lo = b->nw->file.data, *p = t->data;
    int in_file = lo && p >= lo && p + t->nbytes <= lo + b->nw->file.size;
    if (!(t->dtype == DT_F32 || t->dtype == DT_F16 || t->dtype == DT_BF16))
        return tern_error(TERN_ERR_FORMAT, "%s: tensor '%s': expected a floating-point dtype, got %s",
                          weights_path(b->hf), t->name, dtype_name(t->dtype));
    return weights_add(b->nw, name, strlen(name), t->dtype, rank, shape, t->data, t->nbytes, in_file);
}

/* Adds the n stored tensors stacked along their first dimension under name (fused q, k, v). */
static tern_status_t add_fused(builder_t *b, const char *name, const tensor_t *const *t, int n) {
    size_t bytes = 0;
    int64_t shape[2] = {0, t[0]->rank == 2 ? t[0]->shape[1] : 0};
    for (int i = 0; i < n; i++) {
        if (t[i]->dtype != t[0]->dtype)
            return tern_error(TERN_ERR_FORMAT, "%s: tensors '%s' and '%s' have different dtypes (%s, %s)",
                              weights_path(b->hf), t[0]->name, t[i]->name, dtype_name(t[0]->dtype),
                              dtype_name(t[i]->dtype));
        bytes += t[i]->nbytes;
        shape[0] += t[i]->shape[0];
    }
    uint8_t *buf = malloc(bytes ? bytes : 1);
    if (!buf) return tern_error(TERN_ERR_NOMEM, "tensor '%s': out of memory", name);
    for (size_t i = 0, off = 0; i < (size_t)n; off += t[i]->nbytes, i++) {
        memcpy(buf + off, t[i]->data, t[i]->nbytes);
        /* the parts are read once, here: their file pages go now, not with the whole mapping at
         * the end of the load (NLLB-600M: 400 MB of q, k, v pages resident beside the fused copies) */
        weights_drop_pages(b->nw, t[i]->data, t[i]->nbytes);
        weights_drop_pages(b->hf, t[i]->data, t[i]->nbytes);
    }
    tensor_t f = *t[0];
    f.data = buf;
    f.nbytes = bytes;
    tern_status_t st = TERN_OK;
    if (!(f.dtype == DT_F32 || f.dtype == DT_F16 || f.dtype == DT_BF16))
        st = tern_error(TERN_ERR_FORMAT, "%s: tensor '%s': expected a floating-point dtype, got %s",
                        weights_path(b->hf), t[0]->name, dtype_name(f.dtype));
    if (!st) st = weights_add(b->nw, name, strlen(name), f.dtype, t[0]->rank, shape, buf, bytes, 0);
    free(buf);
    return st;
}

/* A layer module and the transformers modules it is made of (q, k, v stacked in that order). */
typedef struct {
    tmodule_t mod;
    const char *hf[3];
    int n;
    int rows_ffn, cols_ffn;  /* each part's rows / columns are F (else C) */
} hf_module_t;

static const hf_module_t ENC_MODULES[] = {
    {TM_ENC_SELF_LN, {"self_attn_layer_norm"}, 1, 0, 0},
    {TM_ENC_SELF_QKV, {"self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj"}, 3, 0, 0},
    {TM_ENC_SELF_OUT, {"self_attn.out_proj"}, 1, 0, 0},
    {TM_ENC_FFN_LN, {"final_layer_norm"}, 1, 0, 0},
    {TM_ENC_FFN1, {"fc1"}, 1, 1, 0},
    {TM_ENC_FFN2, {"fc2"}, 1, 0, 1},
};

static const hf_module_t DEC_MODULES[] = {
    {TM_DEC_SELF_LN, {"self_attn_layer_norm"}, 1, 0, 0},
    {TM_DEC_SELF_QKV, {"self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj"}, 3, 0, 0},
    {TM_DEC_SELF_OUT, {"self_attn.out_proj"}, 1, 0, 0},
    {TM_DEC_CROSS_LN, {"encoder_attn_layer_norm"}, 1, 0, 0},
    {TM_DEC_CROSS_Q, {"encoder_attn.q_proj"}, 1, 0, 0},
    {TM_DEC_CROSS_KV, {"encoder_attn.k_proj", "encoder_attn.v_proj"}, 2, 0, 0},
    {TM_DEC_CROSS_OUT, {"encoder_attn.out_proj"}, 1, 0, 0},
    {TM_DEC_FFN_LN, {"final_layer_norm"}, 1, 0, 0},
    {TM_DEC_FFN1, {"fc1"}, 1, 1, 0},
    {TM_DEC_FFN2, {"fc2"}, 1, 0, 1},
};

/* Layer l's module m of side ("encoder", "decoder"): its weight (a norm's gamma) and bias (beta). */
static tern_status_t add_module(builder_t *b, const char *side, int l, const hf_module_t *m) {
    int norm = transformer_module_kind(m->mod) == TK_NORM;
    int64_t C = b->c->d, F = b->c->enc_ffn;
    int64_t rows = m->rows_ffn ? F : C, cols = norm ? 0 : m->cols_ffn ? F : C;
    static const char *const suffix[2] = {"weight", "bias"};
    for (int p = 0; p < 2; p++) {
        const tensor_t *t[3];
        char hn[256], tn[128];
        for (int k = 0; k < m->n; k++) {
            snprintf(hn, sizeof hn, "%s.layers.%d.%s.%s", side, l, m->hf[k], suffix[p]);
            if (!(t[k] = hf_get(b->hf, hn))) return missing(b, hn);
            tern_status_t st = check_shape(b, t[k], rows, p ? 0 : cols);
            if (st) return st;
        }
        tpart_t part = norm ? (p ? TP_BETA : TP_GAMMA) : (p ? TP_BIAS : TP_WEIGHT);
        transformer_tensor_name(tn, sizeof tn, m->mod, l, part);
        tern_status_t st = m->n == 1 ? add_as(b, tn, t[0], t[0]->rank, t[0]->shape) : add_fused(b, tn, t, m->n);
        if (st) return st;
    }
    return TERN_OK;
}

/* transformers' MarianSinusoidalPositionalEmbedding: out (P, C), computed in double as numpy does. */
static void marian_positions(float *out, int P, int C) {
    int half = C % 2 ? C / 2 + 1 : C / 2;
    for (int pos = 0; pos < P; pos++)
        for (int j = 0; j < C; j++) {
            double a = (double)pos / pow(10000.0, (double)(2 * (j / 2)) / (double)C);
            if (j % 2 == 0) out[(size_t)pos * C + j / 2] = (float)sin(a);
            else out[(size_t)pos * C + half + j / 2] = (float)cos(a);
        }
}

/* transformers' M2M100SinusoidalPositionalEmbedding.get_embedding (fairseq's), in float32 as torch
 * computes it, rows from + offset on (position p is row p + pad_token_id + 1): out (P, C). */
static void m2m_positions(float *out, int P, int C, int offset) {
    int half = C / 2;
    float step = (float)(log(10000.0) / (double)(half - 1 > 0 ? half - 1 : 1));
    for (int pos = 0; pos < P; pos++) {
        float *row = out + (size_t)pos * C;
        for (int j = 0; j < half; j++) {
            float a = (float)(pos + offset) * expf((float)j * -step);
            row[j] = sinf(a);
            row[half + j] = cosf(a);
        }
        if (C % 2) row[C - 1] = 0.0f;
    }
}

/* The encoder's or decoder's position table: stored (embed_positions.weight) or computed. */
static tern_status_t add_positions(builder_t *b, const char *side, tmodule_t mod) {
    char hn[128], tn[128];
    int64_t shape[2] = {b->c->max_pos, b->c->d};
    snprintf(hn, sizeof hn, "%s.embed_positions.weight", side);
    transformer_tensor_name(tn, sizeof tn, mod, -1, TP_ENCODINGS);
    const tensor_t *t = b->c->m2m ? NULL : hf_get(b->hf, hn); /* M2M-100's is never stored */
    if (t) {
        tern_status_t st = check_shape(b, t, shape[0], shape[1]);
        return st ? st : add_as(b, tn, t, 2, shape);
    }
    float *p = malloc((size_t)shape[0] * (size_t)shape[1] * sizeof(float));
    if (!p) return tern_error(TERN_ERR_NOMEM, "position table: out of memory");
    if (b->c->m2m) m2m_positions(p, (int)shape[0], (int)shape[1], b->c->pad + 1);
    else marian_positions(p, (int)shape[0], (int)shape[1]);
    tern_status_t st = weights_add(b->nw, tn, strlen(tn), DT_F32, 2, shape, p, (size_t)(shape[0] * shape[1]) * 4, 0);
    free(p);
    return st;
}

/* Embeddings (shared or not), the output projection (lm_head or tied) and final_logits_bias. */
static tern_status_t add_embeddings(builder_t *b, const tensor_t **emb) {
    const hf_config_t *c = b->c;
    char ee[128], de[128], pw[128], pb[128];
    transformer_tensor_name(ee, sizeof ee, TM_ENC_EMB, -1, TP_WEIGHT);
    transformer_tensor_name(de, sizeof de, TM_DEC_EMB, -1, TP_WEIGHT);
    transformer_tensor_name(pw, sizeof pw, TM_PROJ, -1, TP_WEIGHT);
    transformer_tensor_name(pb, sizeof pb, TM_PROJ, -1, TP_BIAS);
    const tensor_t *e = hf_get(b->hf, "encoder.embed_tokens.weight"), *shared = hf_get(b->hf, "shared.weight");
    const tensor_t *d = hf_get(b->hf, "decoder.embed_tokens.weight");
    if (!e) e = shared;
    if (!d && c->share_emb) d = shared ? shared : e;
    if (!e) return missing(b, "shared.weight");
    if (!d) return missing(b, "decoder.embed_tokens.weight");
    tern_status_t st;
    if ((st = check_shape(b, e, c->vocab, c->d)) || (st = check_shape(b, d, c->dec_vocab, c->d))) return st;
    if ((st = add_as(b, ee, e, 2, e->shape))) return st;
    st = d == e ? weights_add_alias(b->nw, de, ee) : add_as(b, de, d, 2, d->shape);
    if (st) return st;
    emb[0] = e, emb[1] = d;
    const tensor_t *head = weights_get(b->hf, "lm_head.weight");
    if (head) {
        if ((st = check_shape(b, head, c->dec_vocab, c->d)) || (st = add_as(b, pw, head, 2, head->shape))) return st;
    } else if (!c->tie) {
        return tern_error(TERN_ERR_FORMAT, "%s: missing tensor 'lm_head.weight' (%s: \"tie_word_embeddings\" is "
                          "false)", weights_path(b->hf), c->path);
    } else if ((st = weights_add_alias(b->nw, pw, de))) {
        return st;
    }
    const tensor_t *bias = hf_get(b->hf, "final_logits_bias");
    if (!bias) return TERN_OK; /* transformers then starts from zeros */
    int64_t V = c->dec_vocab;
    if (!((bias->rank == 2 && bias->shape[0] == 1 && bias->shape[1] == V) || (bias->rank == 1 && bias->shape[0] == V)))
        return check_shape(b, bias, V, 0);
    return add_as(b, pb, bias, 1, &V);
}

/* The description's config keys: heads, post-norm (Marian) or pre-norm (M2M-100), activation,
 * embedding scale. */
static tern_status_t add_keys(builder_t *b) {
    transformer_spec_t spec = {b->c->enc_heads, b->c->m2m, b->c->act, b->c->scale_emb};
    transformer_scalars_t s;
    int n = transformer_desc_scalars(&s, &spec);
    for (int i = 0; i < n; i++) {
        const tensor_t *t = &s.t[i];
        tern_status_t st = weights_add(b->nw, t->name, strlen(t->name), t->dtype, 0, t->shape, t->data, t->nbytes, 0);
        if (st) return st;
    }
    return TERN_OK;
}

static tern_status_t build_weights(builder_t *b, const tensor_t **emb) {
    tern_status_t st;
    if ((st = add_embeddings(b, emb)) || (st = add_keys(b)) ||
        (st = add_positions(b, "encoder", TM_ENC_POS)) || (st = add_positions(b, "decoder", TM_DEC_POS)))
        return st;
    for (int l = 0; l < b->c->enc_layers; l++)
        for (size_t k = 0; k < sizeof ENC_MODULES / sizeof ENC_MODULES[0]; k++)
            if ((st = add_module(b, "encoder", l, &ENC_MODULES[k]))) return st;
    for (int l = 0; l < b->c->dec_layers; l++)
        for (size_t k = 0; k < sizeof DEC_MODULES / sizeof DEC_MODULES[0]; k++)
            if ((st = add_module(b, "decoder", l, &DEC_MODULES[k]))) return st;
    if (!b->c->m2m) return TERN_OK;
    /* pre-norm: the final layer norms (encoder.layer_norm, decoder.layer_norm) */
    static const hf_module_t FINAL[2] = {{TM_ENC_FINAL_LN, {"layer_norm"}, 1, 0, 0},
                                         {TM_DEC_FINAL_LN, {"layer_norm"}, 1, 0, 0}};
    for (int k = 0; k < 2; k++) {
        const char *side = k ? "decoder" : "encoder";
        for (int p = 0; p < 2; p++) {
            char hn[128], tn[128];
            snprintf(hn, sizeof hn, "%s.layer_norm.%s", side, p ? "bias" : "weight");
            const tensor_t *t = hf_get(b->hf, hn);
            if (!t) return missing(b, hn);
            if ((st = check_shape(b, t, b->c->d, 0))) return st;
            transformer_tensor_name(tn, sizeof tn, FINAL[k].mod, -1, p ? TP_BETA : TP_GAMMA);
            if ((st = add_as(b, tn, t, 1, t->shape))) return st;
        }
    }
    return TERN_OK;
}

/* model.safetensors read, then presented under the Transformer's names; the new table takes over
 * the file mapping, so that the renamed tensors point into the file. */
static tern_status_t load_weights(hf_checkpoint_t *out, const hf_config_t *c, const char *dir, const tensor_t **emb,
                                  weights_t **hf_out) {
    char p[1100];
    path_join(p, sizeof p, dir, "model.safetensors");
    if (!file_exists(p))
        return tern_error(TERN_ERR_IO, "%s: missing (a Hugging Face checkpoint's weights; a pytorch_model.bin must be "
                          "converted to safetensors first)", p);
    weights_t *hf = NULL;
    tern_status_t st = weights_load_safetensors(&hf, p);
    if (st) return st;
    *hf_out = hf;
    out->weights = weights_new(p);
    if (!out->weights) return tern_error(TERN_ERR_NOMEM, "out of memory");
    out->weights->file = hf->file;
    memset(&hf->file, 0, sizeof hf->file);
    builder_t b = {hf, out->weights, c};
    return build_weights(&b, emb);
}

/* ------------------------------------------------------------------ vocabulary, tokens */

/* vocab.json (a dict piece -> id, ids 0..n-1 each once) as a vocabulary; rows: the embedding's. */
static tern_status_t load_vocab_json(vocab_t **out, const char *path, const tensor_t *emb, const char *wpath) {
    cJSON *root = NULL;
    tern_status_t st = json_read_object(path, &root);
    if (st) return st;
    int n = cJSON_GetArraySize(root);
    const char **tok = calloc((size_t)(n ? n : 1), sizeof *tok);
    if (!tok) st = tern_error(TERN_ERR_NOMEM, "out of memory");
    for (const cJSON *it = root->child; it && !st; it = it->next) {
        double d = cJSON_IsNumber(it) ? it->valuedouble : -1;
        if (!(d >= 0 && d < n) || d != floor(d))
            st = tern_error(TERN_ERR_FORMAT, "%s: piece '%s': id must be an integer in [0, %d)", path, it->string, n);
        else if (tok[(int)d])
            st = tern_error(TERN_ERR_FORMAT, "%s: pieces '%s' and '%s' have the same id %d", path, tok[(int)d],
                            it->string, (int)d);
        else
            tok[(int)d] = it->string;
    }
    if (!st && n != emb->shape[0])
        st = tern_error(TERN_ERR_MISMATCH, "%s: %d pieces but tensor '%s' in %s has %lld rows", path, n, emb->name,
                        wpath, (long long)emb->shape[0]);
    if (!st) st = vocab_from_tokens(out, tok, n);
    free(tok);
    cJSON_Delete(root);
    return st;
}

/* ------------------------------------------------------------------ M2M-100 / NLLB vocabulary */

/* tok[id] = a copy of s (an id outside [0, V) is an error naming path). */
static tern_status_t put_token(char **tok, int V, double id, const char *s, const char *path) {
    if (!(id >= 0 && id < V) || id != floor(id))
        return tern_error(TERN_ERR_MISMATCH, "%s: token '%s': id %g is not in [0, %d) (the embedding's rows)", path, s,
                          id, V);
    free(tok[(int)id]);
    if (!(tok[(int)id] = strdup(s))) return tern_error(TERN_ERR_NOMEM, "out of memory");
    return TERN_OK;
}

/* The base vocabulary: M2M100Tokenizer's vocab.json, else NllbTokenizer's ids over
 * sentencepiece.bpe.model (fairseq's: <s> <pad> </s> <unk> at 0-3, SentencePiece id i >= 3 at i + 1). */
static tern_status_t m2m_base_vocab(hf_checkpoint_t *out, const char *dir, char **tok, int V, int *has_json,
                                    int *base_n) {
    path_join(out->src_vocab_path, sizeof out->src_vocab_path, dir, "vocab.json");
    tern_status_t st = TERN_OK;
    if ((*has_json = file_exists(out->src_vocab_path))) {
        cJSON *root = NULL;
        if ((st = json_read_object(out->src_vocab_path, &root))) return st;
        *base_n = cJSON_GetArraySize(root);
        for (const cJSON *it = root->child; it && !st; it = it->next)
            st = put_token(tok, V, cJSON_IsNumber(it) ? it->valuedouble : -1, it->string, out->src_vocab_path);
        cJSON_Delete(root);
        return st;
    }
    path_join(out->src_vocab_path, sizeof out->src_vocab_path, dir, "sentencepiece.bpe.model");
    if (!file_exists(out->src_vocab_path))
        return tern_error(TERN_ERR_IO, "%s: missing (NllbTokenizer's SentencePiece model; M2M100Tokenizer's has a "
                          "vocab.json beside it)", out->src_vocab_path);
    spm_t *sp = NULL;
    if ((st = spm_load(&sp, out->src_vocab_path))) return st;
    static const char *const special[4] = {"<s>", "<pad>", "</s>", "<unk>"};
    int n = spm_piece_count(sp);
    *base_n = n;
    for (int i = 0; i < 4 && !st; i++) st = put_token(tok, V, i, special[i], out->src_vocab_path);
    for (int i = 3; i < n && !st; i++) st = put_token(tok, V, i + 1, spm_id_to_piece(sp, i), out->src_vocab_path);
    spm_free(sp);
    return st;
}

/* A token of a tokenizer file: a string or {"content": string}. */
static const char *token_content(const cJSON *it) {
    if (cJSON_IsString(it)) return it->valuestring;
    const cJSON *c = cJSON_GetObjectItemCaseSensitive(it, "content");
    return cJSON_IsString(c) ? c->valuestring : NULL;
}

/* M2M100Tokenizer's language lists (its "language_codes" key), whose codes "__xx__" follow
 * vocab.json's ids in this order. */
static const char *const M2M100_CODES[] = {
    "af", "am", "ar", "ast", "az", "ba", "be", "bg", "bn", "br", "bs", "ca", "ceb", "cs", "cy", "da", "de", "el", "en",
    "es", "et", "fa", "ff", "fi", "fr", "fy", "ga", "gd", "gl", "gu", "ha", "he", "hi", "hr", "ht", "hu", "hy", "id",
    "ig", "ilo", "is", "it", "ja", "jv", "ka", "kk", "km", "kn", "ko", "lb", "lg", "ln", "lo", "lt", "lv", "mg", "mk",
    "ml", "mn", "mr", "ms", "my", "ne", "nl", "no", "ns", "oc", "or", "pa", "pl", "ps", "pt", "ro", "ru", "sd", "si",
    "sk", "sl", "so", "sq", "sr", "ss", "su", "sv", "sw", "ta", "th", "tl", "tn", "tr", "uk", "ur", "uz", "vi", "wo",
    "xh", "yi", "yo", "zh", "zu", NULL};
static const char *const WMT21_CODES[] = {"en", "ha", "is", "ja", "cs", "ru", "zh", "de", NULL};

/* M2M100Tokenizer without additional_special_tokens: its "language_codes" list (m2m100 by default)
 * as the codes "__xx__". */
static tern_status_t m2m100_codes(hf_checkpoint_t *out, const cJSON *tc, const char *path) {
    const cJSON *lc = tc ? cJSON_GetObjectItemCaseSensitive(tc, "language_codes") : NULL;
    const char *name = cJSON_IsString(lc) ? lc->valuestring : "m2m100";
    const char *const *codes = !strcmp(name, "m2m100") ? M2M100_CODES : !strcmp(name, "wmt21") ? WMT21_CODES : NULL;
    if (!codes)
        return tern_error(TERN_ERR_UNSUPPORTED, "%s: \"language_codes\" '%s' is not M2M100Tokenizer's (m2m100, "
                          "wmt21)", path, name);
    int n = 0;
    while (codes[n]) n++;
    if (!(out->langs = calloc((size_t)n, sizeof *out->langs))) return tern_error(TERN_ERR_NOMEM, "out of memory");
    for (int i = 0; i < n; i++) {
        char b[32];
        snprintf(b, sizeof b, "__%s__", codes[i]);
        if (!(out->langs[out->n_langs++] = strdup(b))) return tern_error(TERN_ERR_NOMEM, "out of memory");
    }
    return TERN_OK;
}

/* The added tokens (language codes, <mask>) at their ids and the language codes.
 * NllbTokenizer: the ids of tokenizer_config.json's added_tokens_decoder ({"id": {"content": ...}}),
 * else of added_tokens.json ({token: id}), else fairseq's order (the codes after the SentencePiece
 * pieces, then <mask>); the codes are additional_special_tokens (tokenizer_config.json, else
 * special_tokens_map.json). M2M100Tokenizer (vocab.json): the codes follow vocab.json's ids, from
 * additional_special_tokens or its "language_codes" list. */
static tern_status_t m2m_added_tokens(hf_checkpoint_t *out, const char *dir, char **tok, int V, int has_json,
                                      int base_n) {
    char p[1100], q[1100];
    cJSON *tc = NULL, *root = NULL;
    tern_status_t st = TERN_OK;
    path_join(p, sizeof p, dir, "tokenizer_config.json");
    if (file_exists(p) && (st = json_read_object(p, &tc))) return st;
    const cJSON *atd = tc ? cJSON_GetObjectItemCaseSensitive(tc, "added_tokens_decoder") : NULL;
    int explicit_ids = 1;
    if (cJSON_IsObject(atd)) {
        for (const cJSON *it = atd->child; it && !st; it = it->next) {
            const char *s = token_content(it);
            char *end = NULL;
            double id = strtod(it->string, &end);
            st = s && end && !*end ? put_token(tok, V, id, s, p)
                                   : tern_error(TERN_ERR_FORMAT, "%s: \"added_tokens_decoder\": entry '%s' must map an "
                                                "id to {\"content\": token}", p, it->string);
        }
    } else if (file_exists(path_join(q, sizeof q, dir, "added_tokens.json"))) {
        if (!(st = json_read_object(q, &root)))
            for (const cJSON *it = root->child; it && !st; it = it->next)
                st = put_token(tok, V, cJSON_IsNumber(it) ? it->valuedouble : -1, it->string, q);
        cJSON_Delete(root);
        root = NULL;
    } else {
        explicit_ids = 0;
    }
    const cJSON *langs = tc ? cJSON_GetObjectItemCaseSensitive(tc, "additional_special_tokens") : NULL;
    const char *lpath = p;
    if (!st && !cJSON_IsArray(langs) && file_exists(path_join(q, sizeof q, dir, "special_tokens_map.json")) &&
        !(st = json_read_object(q, &root))) {
        langs = cJSON_GetObjectItemCaseSensitive(root, "additional_special_tokens");
        lpath = q;
    }
    int n = cJSON_IsArray(langs) ? cJSON_GetArraySize(langs) : 0;
    if (!st && n > 0 && !(out->langs = calloc((size_t)n, sizeof *out->langs)))
        st = tern_error(TERN_ERR_NOMEM, "out of memory");
    for (const cJSON *it = n > 0 ? langs->child : NULL; it && !st; it = it->next) {
        const char *s = token_content(it);
        if (!s) st = tern_error(TERN_ERR_FORMAT, "%s: \"additional_special_tokens\" must list tokens", lpath);
        else if (!(out->langs[out->n_langs++] = strdup(s))) st = tern_error(TERN_ERR_NOMEM, "out of memory");
    }
    snprintf(out->langs_path, sizeof out->langs_path, "%s", lpath);
    if (!st && has_json && out->n_langs == 0) {
        snprintf(out->langs_path, sizeof out->langs_path, "%s", p);
        st = m2m100_codes(out, tc, p);
    }
    if (has_json || !explicit_ids) /* the codes at their tokenizer's ids: after vocab.json, or fairseq's */
        for (int i = 0; i < out->n_langs && !st; i++)
            st = put_token(tok, V, base_n + (has_json ? 0 : 1) + i, out->langs[i], out->langs_path);
    if (!st && !has_json && !explicit_ids) st = put_token(tok, V, base_n + 1 + out->n_langs, "<mask>", out->langs_path);
    cJSON_Delete(root);
    cJSON_Delete(tc);
    return st;
}

/* The joint vocabulary of an M2M-100/NLLB checkpoint: as many tokens as the embedding has rows
 * (rows no tokenizer file names, as NLLB's spare ones, are "<unused_ID>"). */
static tern_status_t load_m2m_vocab(hf_checkpoint_t *out, const char *dir, const tensor_t *emb) {
    int V = (int)emb->shape[0];
    char **tok = calloc((size_t)V, sizeof *tok);
    if (!tok) return tern_error(TERN_ERR_NOMEM, "out of memory");
    int has_json = 0, base_n = 0;
    tern_status_t st = m2m_base_vocab(out, dir, tok, V, &has_json, &base_n);
    if (!st) st = m2m_added_tokens(out, dir, tok, V, has_json, base_n);
    for (int i = 0; i < V && !st; i++) {
        char b[32];
        snprintf(b, sizeof b, "<unused_%d>", i);
        if (!tok[i] && !(tok[i] = strdup(b))) st = tern_error(TERN_ERR_NOMEM, "out of memory");
    }
    if (!st) st = vocab_from_tokens(&out->src_vocab, (const char *const *)tok, V);
    for (int i = 0; i < V; i++) free(tok[i]);
    free(tok);
    if (st) return st;
    out->tgt_vocab = out->src_vocab;
    memcpy(out->tgt_vocab_path, out->src_vocab_path, sizeof out->tgt_vocab_path);
    for (int i = 0; i < out->n_langs; i++)
        if (vocab_lookup(out->src_vocab, out->langs[i]) < 0)
            return tern_error(TERN_ERR_MISMATCH, "%s: language code '%s' is not a token of the vocabulary (%s and "
                              "the added tokens)", out->langs_path, out->langs[i], out->src_vocab_path);
    return TERN_OK;
}

static tern_status_t load_vocabs(hf_checkpoint_t *out, const char *dir, const tensor_t *const *emb, int m2m) {
    char p[1100];
    if (m2m) return load_m2m_vocab(out, dir, emb[0]);
    path_join(out->src_vocab_path, sizeof out->src_vocab_path, dir, "vocab.json");
    if (!file_exists(out->src_vocab_path))
        return tern_error(TERN_ERR_IO, "%s: missing (MarianTokenizer's vocabulary: a dict piece -> id)",
                          out->src_vocab_path);
    const char *wpath = weights_path(out->weights);
    tern_status_t st = load_vocab_json(&out->src_vocab, out->src_vocab_path, emb[0], wpath);
    if (st) return st;
    path_join(p, sizeof p, dir, "target_vocab.json");
    if (!file_exists(p)) { /* joint */
        out->tgt_vocab = out->src_vocab;
        memcpy(out->tgt_vocab_path, out->src_vocab_path, sizeof out->tgt_vocab_path);
        if (emb[1]->shape[0] == vocab_size(out->src_vocab)) return TERN_OK;
        return tern_error(TERN_ERR_MISMATCH, "%s: %d pieces but tensor '%s' in %s has %lld rows (and there is no "
                          "target_vocab.json)", out->src_vocab_path, vocab_size(out->src_vocab), emb[1]->name, wpath,
                          (long long)emb[1]->shape[0]);
    }
    memcpy(out->tgt_vocab_path, p, sizeof out->tgt_vocab_path);
    return load_vocab_json(&out->tgt_vocab, p, emb[1], wpath);
}

/* cfg's token names from the ids of config.json. */
static tern_status_t set_tokens(hf_checkpoint_t *out, const hf_config_t *c) {
    model_config_t *m = &out->cfg;
    model_config_defaults(m);
    const struct {
        char *dst;
        int id;
        const char *key;
    } tk[] = {{m->eos_token, c->eos, "eos_token_id"}, {m->decoder_start_token, c->start, "decoder_start_token_id"}};
    for (size_t i = 0; i < sizeof tk / sizeof tk[0]; i++) {
        const char *s = vocab_token(out->tgt_vocab, tk[i].id);
        if (!s || strlen(s) >= sizeof m->eos_token)
            return tern_error(TERN_ERR_FORMAT, "%s: \"%s\" %d: %s", c->path, tk[i].key, tk[i].id,
                              s ? "piece name too long" : "not in the vocabulary");
        snprintf(tk[i].dst, sizeof m->eos_token, "%s", s);
    }
    if (vocab_lookup(out->src_vocab, m->eos_token) < 0)
        return tern_error(TERN_ERR_FORMAT, "%s: the source vocabulary lacks the end token '%s'", out->src_vocab_path,
                          m->eos_token);
    m->add_source_bos = 0;
    m->add_source_eos = 1; /* MarianTokenizer, M2M100Tokenizer and NllbTokenizer append </s> */
    m->layer_norm_epsilon = 1e-5f;
    snprintf(m->architecture, sizeof m->architecture, "transformer");
    return TERN_OK;
}

/* Adds one sequence to never (a duplicate of one already there is skipped). */
static void add_never(hf_checkpoint_t *out, const int *seq, int n, const char *path) {
    for (int i = 0; i < out->n_never; i++) {
        int a = out->never_off[i], len = out->never_off[i + 1] - a;
        if (len == n && !memcmp(out->never + a, seq, (size_t)n * sizeof *seq)) return;
    }
    int at = out->never_off[out->n_never];
    if (at + n > HF_MAX_NEVER) {
        TERN_WARN("%s: bad_words_ids: more than %d tokens in all: the rest is ignored", path, HF_MAX_NEVER);
        return;
    }
    memcpy(out->never + at, seq, (size_t)n * sizeof *seq);
    out->never_off[++out->n_never] = at + n;
}

/* bad_words_ids of a JSON file (a list of lists of token ids), when it has it. */
static tern_status_t read_bad_words(hf_checkpoint_t *out, const cJSON *root, const char *path, int V) {
    const cJSON *bw = cJSON_GetObjectItemCaseSensitive(root, "bad_words_ids");
    if (!bw || cJSON_IsNull(bw)) return TERN_OK;
    const char *bad = "must be a list of lists of token ids";
    if (!cJSON_IsArray(bw)) return tern_error(TERN_ERR_FORMAT, "%s: \"bad_words_ids\" %s", path, bad);
    for (const cJSON *s = bw->child; s; s = s->next) {
        int seq[HF_MAX_NEVER], n = 0;
        if (!cJSON_IsArray(s)) return tern_error(TERN_ERR_FORMAT, "%s: \"bad_words_ids\" %s", path, bad);
        for (const cJSON *x = s->child; x; x = x->next) {
            double d = cJSON_IsNumber(x) ? x->valuedouble : -1;
            if (!(d >= 0 && d < V) || d != floor(d))
                return tern_error(TERN_ERR_FORMAT, "%s: \"bad_words_ids\": %s in [0, %d)", path, bad, V);
            if (n < HF_MAX_NEVER) seq[n++] = (int)d;
        }
        if (n == 0) return tern_error(TERN_ERR_FORMAT, "%s: \"bad_words_ids\": an empty sequence", path);
        add_never(out, seq, n, path);
    }
    return TERN_OK;
}

tern_status_t hf_generation_never(hf_checkpoint_t *out, const char *dir, int V) {
    char p[1100];
    path_join(p, sizeof p, dir, "generation_config.json");
    if (!file_exists(p)) return TERN_OK;
    cJSON *gen = NULL;
    tern_status_t st = json_read_object(p, &gen);
    if (st) return st;
    st = read_bad_words(out, gen, p, V);
    cJSON_Delete(gen);
    return st;
}

static tern_status_t read_never(hf_checkpoint_t *out, const hf_config_t *c, const cJSON *config, const char *dir) {
    add_never(out, &c->pad, 1, c->path); /* the pad token starts the decoder, never ends up in the output */
    tern_status_t st = read_bad_words(out, config, c->path, c->dec_vocab);
    char p[1100];
    path_join(p, sizeof p, dir, "generation_config.json");
    if (st || !file_exists(p)) return st;
    cJSON *gen = NULL;
    if ((st = json_read_object(p, &gen))) return st;
    st = read_bad_words(out, gen, p, c->dec_vocab);
    cJSON_Delete(gen);
    return st;
}

static tern_status_t check_spm(const char *dir, int m2m) {
    static const char *const files[] = {"source.spm", "target.spm"};
    char p[1100];
    if (m2m && !file_exists(path_join(p, sizeof p, dir, "sentencepiece.bpe.model")))
        return tern_error(TERN_ERR_IO, "%s: missing (the tokenizer's SentencePiece model; --pretokenized reads and "
                          "writes vocabulary pieces without it)", p);
    if (m2m) return TERN_OK;
    for (int i = 0; i < 2; i++)
        if (!file_exists(path_join(p, sizeof p, dir, files[i])))
            return tern_error(TERN_ERR_IO, "%s: missing (MarianTokenizer's SentencePiece model of the %s side; "
                              "--pretokenized reads and writes vocabulary pieces without it)", p, i ? "target" : "source");
    return TERN_OK;
}

void hf_checkpoint_free(hf_checkpoint_t *c) {
    if (!c) return;
    weights_free(c->weights);
    if (c->tgt_vocab != c->src_vocab) vocab_free(c->tgt_vocab);
    for (int i = 0; i < c->n_langs; i++) free(c->langs[i]);
    free(c->langs);
    vocab_free(c->src_vocab);
    memset(c, 0, sizeof *c);
}

tern_status_t hf_checkpoint_load(hf_checkpoint_t *out, const char *dir, int need_spm) {
    memset(out, 0, sizeof *out);
    hf_config_t c;
    cJSON *config = NULL;
    weights_t *hf = NULL;
    const tensor_t *emb[2] = {NULL, NULL};
    tern_status_t st = read_config(&c, dir, &config);
    if (!st) st = load_weights(out, &c, dir, emb, &hf);
    if (!st) st = load_vocabs(out, dir, emb, c.m2m);
    if (!st) st = set_tokens(out, &c);
    if (!st) st = read_never(out, &c, config, dir);
    if (!st && need_spm) st = check_spm(dir, c.m2m);
    snprintf(out->model_type, sizeof out->model_type, "%s", c.model_type);
    /* the stored table's tensors that were copied at load (unaligned) were copied again above */
    weights_free(hf);
    cJSON_Delete(config);
    if (st) hf_checkpoint_free(out);
    return st;
}
