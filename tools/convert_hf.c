/*
 * convert_hf.c — `tern convert --from DIR -o OUT --to hf`: a Tern Transformer (Tern's format, a
 * CTranslate2 directory, a Hugging Face MarianMT checkpoint) written as a Hugging Face MarianMT
 * checkpoint that transformers' MarianMTModel.from_pretrained loads and that computes what Tern
 * computes (docs/models.md, "Exporting to Hugging Face").
 *
 * transformers' MarianMTModel (modeling_marian.py) is post-norm (x = LN(x + f(x))) with
 * nn.LayerNorm's epsilon 1e-5, one activation, one embedding scale for both sides, a decoder
 * started from decoder_start_token_id's embedding, positions looked up from row 0 of an
 * nn.Embedding table (MarianSinusoidalPositionalEmbedding: a parameter, loaded from the file when
 * the file stores it), logits = lm_head(x) + final_logits_bias. What Tern's Transformer computes
 * maps onto it where the model is post-norm with epsilon 1e-5 and has no zero start embedding; the
 * rest is refused with the reason. Tern's position tables (CTranslate2's sinusoids from position 1,
 * or learned tables) are stored as embed_positions.weight, so transformers uses them as they are.
 *
 * Files: config.json (MarianConfig), model.safetensors (transformers' names, float32, metadata
 * "format": "pt"), vocab.json (+ target_vocab.json for separate vocabularies), source.spm and
 * target.spm (the model's SentencePiece models, when it has them), tokenizer_config.json,
 * special_tokens_map.json, generation_config.json (the model's decoding defaults and token ids).
 *
 * MarianMT needs a pad token (the padding of batches, generate's finished rows): the vocabulary's
 * "<pad>" where it has one; else a row "<pad>" is appended to each vocabulary, with a zero
 * embedding, a zero output row and a final_logits_bias of -1e9, so that its probability is exactly
 * 0 in float32 and every other token's log-probability is unchanged.
 */
#include <cjson/cJSON.h>
#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "model/generation.h"
#include "model/hf_format.h"
#include "model/model.h"
#include "model/model_dir.h"
#include "model/transformer.h"
#include "model/transformer_desc.h"
#include "model/weights.h"
#include "nn/layers.h"

#define HF_PAD "<pad>"
#define HF_PAD_BIAS (-1e9f)

/* The tensors written, each owning its float32 data. */
typedef struct {
    tensor_t *t;
    int n, cap;
} hf_out_t;

static float *out_add(hf_out_t *o, const char *name, int rank, int64_t r, int64_t c) {
    if (o->n == o->cap) {
        int cap = o->cap ? o->cap * 2 : 64;
        tensor_t *nt = realloc(o->t, sizeof *nt * (size_t)cap);
        if (!nt) return NULL;
        o->t = nt, o->cap = cap;
    }
    int64_t numel = rank == 2 ? r * c : r;
    float *d = calloc((size_t)(numel ? numel : 1), sizeof(float));
    char *nm = strdup(name);
    if (!d || !nm) {
        free(d), free(nm);
        return NULL;
    }
    tensor_t *t = &o->t[o->n++];
    memset(t, 0, sizeof *t);
    t->name = nm;
    t->dtype = DT_F32;
    t->rank = rank;
    t->shape[0] = r;
    if (rank == 2) t->shape[1] = c;
    t->numel = numel;
    t->data = d;
    t->nbytes = (size_t)numel * sizeof(float);
    return d;
}

static void out_free(hf_out_t *o) {
    for (int i = 0; i < o->n; i++) free((void *)o->t[i].name), free((void *)o->t[i].data);
    free(o->t);
}

typedef struct {
    const tern_model_t *m;
    const weights_t *w;
    int d, F, Le, Ld;
    hf_out_t out;
} exporter_t;

static const tensor_t *tget(const exporter_t *e, tmodule_t mod, int layer, tpart_t part) {
    char n[160];
    const tensor_t *t = weights_get(e->w, transformer_tensor_name(n, sizeof n, mod, layer, part));
    if (!t && mod == TM_ENC_EMB && part == TP_WEIGHT) t = weights_get(e->w, TRANSFORMER_ENC_EMB_ALT);
    return t;
}

/* rows [r0, r0 + nr) of t (float32 values, dequantized where int8) into dst (nr x cols); the
 * tensor is read whole once per call (small models; the export is not a hot path). */
static tern_status_t read_rows(const exporter_t *e, const tensor_t *t, int64_t r0, int64_t nr, float *dst) {
    float *all = malloc((size_t)t->numel * sizeof(float) + 1);
    if (!all) return tern_error(TERN_ERR_NOMEM, "tensor '%s': out of memory", t->name);
    tern_status_t st = weights_read_f32(e->w, t, all);
    int64_t cols = t->rank == 2 ? t->shape[1] : 1;
    if (!st) memcpy(dst, all + r0 * cols, (size_t)(nr * cols) * sizeof(float));
    free(all);
    return st;
}

/* A linear module (or rows [r0, r0 + N) of a fused one) as transformers' "<hf>.weight" and
 * "<hf>.bias" (zeros where Tern's layer has no bias). */
static tern_status_t put_linear(exporter_t *e, const char *hf, tmodule_t mod, int layer, int64_t r0, int64_t N,
                                int64_t K) {
    char n[300];
    const tensor_t *w = tget(e, mod, layer, TP_WEIGHT), *b = tget(e, mod, layer, TP_BIAS);
    if (!w) return tern_error(TERN_ERR_FORMAT, "%s: missing tensor '%s'", weights_path(e->w),
                              transformer_tensor_name(n, sizeof n, mod, layer, TP_WEIGHT));
    snprintf(n, sizeof n, "%s.weight", hf);
    float *dw = out_add(&e->out, n, 2, N, K);
    snprintf(n, sizeof n, "%s.bias", hf);
    float *db = dw ? out_add(&e->out, n, 1, N, 0) : NULL;
    if (!dw || !db) return tern_error(TERN_ERR_NOMEM, "out of memory");
    tern_status_t st = read_rows(e, w, r0, N, dw);
    if (!st && b) st = read_rows(e, b, r0, N, db);
    return st;
}

static tern_status_t put_norm(exporter_t *e, const char *hf, tmodule_t mod, int layer) {
    char n[300];
    const tensor_t *g = tget(e, mod, layer, TP_GAMMA), *b = tget(e, mod, layer, TP_BETA);
    if (!g || !b) return tern_error(TERN_ERR_FORMAT, "%s: missing tensor '%s'", weights_path(e->w),
                                    transformer_tensor_name(n, sizeof n, mod, layer, g ? TP_BETA : TP_GAMMA));
    snprintf(n, sizeof n, "%s.weight", hf);
    float *dg = out_add(&e->out, n, 1, e->d, 0);
    snprintf(n, sizeof n, "%s.bias", hf);
    float *db = dg ? out_add(&e->out, n, 1, e->d, 0) : NULL;
    if (!dg || !db) return tern_error(TERN_ERR_NOMEM, "out of memory");
    tern_status_t st = read_rows(e, g, 0, e->d, dg);
    return st ? st : read_rows(e, b, 0, e->d, db);
}

static tern_status_t put_layers(exporter_t *e) {
    char p[200];
    tern_status_t st = TERN_OK;
    int64_t C = e->d, F = e->F;
    for (int l = 0; l < e->Le && !st; l++) {
#define P(x) (snprintf(p, sizeof p, "model.encoder.layers.%d.%s", l, x), p)
        if ((st = put_linear(e, P("self_attn.q_proj"), TM_ENC_SELF_QKV, l, 0, C, C)) ||
            (st = put_linear(e, P("self_attn.k_proj"), TM_ENC_SELF_QKV, l, C, C, C)) ||
            (st = put_linear(e, P("self_attn.v_proj"), TM_ENC_SELF_QKV, l, 2 * C, C, C)) ||
            (st = put_linear(e, P("self_attn.out_proj"), TM_ENC_SELF_OUT, l, 0, C, C)) ||
            (st = put_norm(e, P("self_attn_layer_norm"), TM_ENC_SELF_LN, l)) ||
            (st = put_linear(e, P("fc1"), TM_ENC_FFN1, l, 0, F, C)) ||
            (st = put_linear(e, P("fc2"), TM_ENC_FFN2, l, 0, C, F)) ||
            (st = put_norm(e, P("final_layer_norm"), TM_ENC_FFN_LN, l)))
            return st;
#undef P
    }
    for (int l = 0; l < e->Ld && !st; l++) {
#define P(x) (snprintf(p, sizeof p, "model.decoder.layers.%d.%s", l, x), p)
        if ((st = put_linear(e, P("self_attn.q_proj"), TM_DEC_SELF_QKV, l, 0, C, C)) ||
            (st = put_linear(e, P("self_attn.k_proj"), TM_DEC_SELF_QKV, l, C, C, C)) ||
            (st = put_linear(e, P("self_attn.v_proj"), TM_DEC_SELF_QKV, l, 2 * C, C, C)) ||
            (st = put_linear(e, P("self_attn.out_proj"), TM_DEC_SELF_OUT, l, 0, C, C)) ||
            (st = put_norm(e, P("self_attn_layer_norm"), TM_DEC_SELF_LN, l)) ||
            (st = put_linear(e, P("encoder_attn.q_proj"), TM_DEC_CROSS_Q, l, 0, C, C)) ||
            (st = put_linear(e, P("encoder_attn.k_proj"), TM_DEC_CROSS_KV, l, 0, C, C)) ||
            (st = put_linear(e, P("encoder_attn.v_proj"), TM_DEC_CROSS_KV, l, C, C, C)) ||
            (st = put_linear(e, P("encoder_attn.out_proj"), TM_DEC_CROSS_OUT, l, 0, C, C)) ||
            (st = put_norm(e, P("encoder_attn_layer_norm"), TM_DEC_CROSS_LN, l)) ||
            (st = put_linear(e, P("fc1"), TM_DEC_FFN1, l, 0, F, C)) ||
            (st = put_linear(e, P("fc2"), TM_DEC_FFN2, l, 0, C, F)) ||
            (st = put_norm(e, P("final_layer_norm"), TM_DEC_FFN_LN, l)))
            return st;
#undef P
    }
    return st;
}

/* An embedding-shaped matrix (V, C) with extra zero rows appended (the added pad row). */
static tern_status_t put_matrix(exporter_t *e, const char *hf, const tensor_t *t, int64_t rows_out) {
    float *d = out_add(&e->out, hf, 2, rows_out, e->d);
    if (!d) return tern_error(TERN_ERR_NOMEM, "out of memory");
    return read_rows(e, t, 0, t->shape[0], d);
}

/* MarianMT's name of Tern's activation. */
static const char *hf_activation(int act) {
    switch (act) {
    case ACT_RELU: return "relu";
    case ACT_GELU_TANH: return "gelu_new";
    case ACT_SWISH: return "swish";
    case ACT_GELU: return "gelu";
    case ACT_GELU_SIGMOID: return "quick_gelu";
    case ACT_TANH: return "tanh";
    default: return NULL;
    }
}

/* 1 when two vocabularies hold the same pieces in the same order. */
static int same_vocab(const vocab_t *a, const vocab_t *b) {
    if (a == b) return 1;
    if (vocab_size(a) != vocab_size(b)) return 0;
    for (int i = 0; i < vocab_size(a); i++)
        if (strcmp(vocab_token(a, i), vocab_token(b, i))) return 0;
    return 1;
}

/* vocab.json: {piece: id} for ids 0 .. total - 1: the vocabulary's pieces, then "<pad>" when add_pad,
 * then "<unused_ID>" rows; a piece listed twice cannot be a key twice: refused, naming it. */
static tern_status_t write_vocab_json(const vocab_t *v, int add_pad, int total, const char *path, const char *from) {
    cJSON *root = cJSON_CreateObject();
    if (!root) return tern_error(TERN_ERR_NOMEM, "out of memory");
    tern_status_t st = TERN_OK;
    int n = vocab_size(v);
    char un[32];
    for (int i = 0; i < total && !st; i++) {
        snprintf(un, sizeof un, "<unused_%d>", i);
        const char *p = i < n ? vocab_token(v, i) : i == n && add_pad ? HF_PAD : un;
        const cJSON *old = cJSON_GetObjectItemCaseSensitive(root, p);
        if (old)
            st = tern_error(TERN_ERR_UNSUPPORTED, "%s: the piece '%s' is in the vocabulary twice (ids %d and %d): "
                            "vocab.json maps each piece to one id", from, p, (int)old->valuedouble, i);
        else if (!cJSON_AddNumberToObject(root, p, i))
            st = tern_error(TERN_ERR_NOMEM, "out of memory");
    }
    char *s = st ? NULL : cJSON_PrintUnformatted(root);
    if (!st && !s) st = tern_error(TERN_ERR_NOMEM, "out of memory");
    if (!st) st = model_dir_write_text(path, s);
    free(s);
    cJSON_Delete(root);
    return st;
}

static tern_status_t write_json(const char *path, cJSON *root) {
    char *s = root ? cJSON_Print(root) : NULL;
    tern_status_t st = s ? model_dir_write_text(path, s) : tern_error(TERN_ERR_NOMEM, "out of memory");
    free(s);
    cJSON_Delete(root);
    return st;
}

/* 1 when dir exists and holds an entry; *err set when it exists and cannot be read. */
static int dir_nonempty(const char *dir) {
    DIR *d = opendir(dir);
    if (!d) return 0;
    struct dirent *de;
    int n = 0;
    while ((de = readdir(d)))
        if (strcmp(de->d_name, ".") && strcmp(de->d_name, "..")) n++;
    closedir(d);
    return n > 0;
}

static const char *find_in(char *buf, size_t n, const char *dir, const char *const *names) {
    for (int i = 0; names[i]; i++)
        if (file_exists(path_join(buf, n, dir, names[i]))) return buf;
    return NULL;
}

tern_status_t convert_to_hf(const char *from, const char *out, int *dequantized) {
    *dequantized = 0;
    if (dir_nonempty(out))
        return tern_error(TERN_ERR_INVALID_ARG, "%s: the output directory exists and is not empty (--to hf writes a "
                          "new checkpoint directory)", out);
    tern_model_options_t o = tern_model_default_options();
    o.use_spm = 0; /* the tokenizer files are copied, not read */
    tern_model_t *m = NULL;
    tern_status_t st = tern_model_load(&m, from, &o);
    if (st) return st;
    exporter_t e;
    memset(&e, 0, sizeof e);
    e.m = m;
    hf_checkpoint_t hf;
    memset(&hf, 0, sizeof hf);
    weights_t *own_w = NULL;
    int is_hf = 0;
    cJSON *cfg = NULL, *gen = NULL;
    char p[4096], q[4096];
    if (m->n_members || !m->weights || strcmp(m->fam->name, "transformer")) {
        st = tern_error(TERN_ERR_UNSUPPORTED, "%s: a %s model: --to hf writes MarianMT checkpoints of Transformers",
                        from, m->n_members ? "ensemble" : m->fam->name);
        goto done;
    }
    /* The tensors as stored (the loaded model has packed and given back its own copies). */
    if (!strcmp(m->format, "huggingface")) {
        if ((st = hf_checkpoint_load(&hf, from, 0))) goto done;
        is_hf = 1;
        e.w = hf.weights;
    } else if (file_exists(path_join(p, sizeof p, from, "model.safetensors"))) {
        if ((st = weights_load_safetensors(&own_w, p))) goto done;
        e.w = own_w;
    } else {
        if ((st = weights_load_ct2(&own_w, path_join(p, sizeof p, from, "model.bin")))) goto done;
        e.w = own_w;
    }
    const weights_t *w = e.w;
    const transformer_t *net = m->net;
    const tensor_t *ee = tget(&e, TM_ENC_EMB, -1, TP_WEIGHT), *de = tget(&e, TM_DEC_EMB, -1, TP_WEIGHT),
                   *pw = tget(&e, TM_PROJ, -1, TP_WEIGHT), *pb = tget(&e, TM_PROJ, -1, TP_BIAS),
                   *f1 = tget(&e, TM_ENC_FFN1, 0, TP_WEIGHT), *epos = tget(&e, TM_ENC_POS, -1, TP_ENCODINGS),
                   *dpos = tget(&e, TM_DEC_POS, -1, TP_ENCODINGS);
    if (!ee || !de || !pw || !f1 || ee->rank != 2 || de->rank != 2 || f1->rank != 2) {
        st = tern_error(TERN_ERR_FORMAT, "%s: not a Transformer of Tern's layout (embeddings, projection, "
                        "feed-forward)", weights_path(w));
        goto done;
    }
    e.d = (int)ee->shape[1], e.F = (int)f1->shape[0];
    while (tget(&e, TM_ENC_FFN1, e.Le, TP_WEIGHT)) e.Le++;
    while (tget(&e, TM_DEC_FFN1, e.Ld, TP_WEIGHT)) e.Ld++;
    /* What MarianMT cannot express is refused, naming it. */
    int pre = net->pre_norm, act = (int)net->act, se = net->enc_scale_emb, sd = net->dec_scale_emb, heads = net->H;
    float eps = net->eps;
    if (net->dec_ssru) {
        st = tern_error(TERN_ERR_UNSUPPORTED, "%s: an SSRU decoder (Marian's --dec-cell ssru): MarianMT (transformers) "
                        "has no SSRU layer (tern translate -m runs it; tern convert writes it in Tern's format)", from);
        goto done;
    }
    if (pre) {
        st = tern_error(TERN_ERR_UNSUPPORTED, "%s: a pre-norm Transformer (encoder/pre_norm = 1): MarianMT's layers "
                        "are post-norm (layer norm after the residual), which cannot compute it (tern train "
                        "--post-norm --layer-norm-eps 1e-5 makes exportable models)", from);
        goto done;
    }
    if (fabsf(eps - 1e-5f) > 1e-9f) {
        st = tern_error(TERN_ERR_UNSUPPORTED, "%s: layer-norm epsilon %g (config.json \"layer_norm_epsilon\"%s): "
                        "MarianMT's layer norms use 1e-5 (torch's default), so its outputs would differ (tern train "
                        "--layer-norm-eps 1e-5 makes exportable models)", from,
                        (double)eps, m->cfg.layer_norm_epsilon > 0 ? "" : " absent: CTranslate2's default 1e-6");
        goto done;
    }
    const char *act_name = hf_activation(act);
    if (!act_name) {
        st = tern_error(TERN_ERR_UNSUPPORTED, "%s: activation %d has no MarianMT name", from, act);
        goto done;
    }
    if (se != sd) {
        st = tern_error(TERN_ERR_UNSUPPORTED, "%s: the encoder %s its embeddings by sqrt(d) and the decoder %s: "
                        "MarianConfig's scale_embedding is one switch for both", from, se ? "scales" : "does not scale",
                        sd ? "does" : "does not");
        goto done;
    }
    if (net->dec_zero_start) {
        st = tern_error(TERN_ERR_UNSUPPORTED, "%s: decoder/start_from_zero_embedding is set: MarianMT starts the "
                        "decoder from a token's embedding", from);
        goto done;
    }
    if (m->cfg.add_source_bos || !m->cfg.add_source_eos) {
        st = tern_error(TERN_ERR_UNSUPPORTED, "%s: config.json has add_source_bos %s and add_source_eos %s: "
                        "MarianTokenizer gives a source as its pieces followed by the end token (add_source_eos "
                        "true, add_source_bos false)", from, m->cfg.add_source_bos ? "true" : "false",
                        m->cfg.add_source_eos ? "true" : "false");
        goto done;
    }
    if (e.Le < 1 || e.Ld < 1 || heads < 1 || e.d % heads) {
        st = tern_error(TERN_ERR_FORMAT, "%s: %d encoder / %d decoder layers, %d heads of width %d", from, e.Le,
                        e.Ld, heads, e.d);
        goto done;
    }
    /* Positions: the tables Tern uses (learned, or CTranslate2's sinusoids, position p at row p),
     * stored, so that transformers looks them up as they are; one row count for both sides. */
    int P = epos || dpos ? 1 << 30 : 2048; /* a sinusoidal table has any length: Tern's loader makes 2048 */
    if (epos && epos->shape[0] < P) P = (int)epos->shape[0];
    if (dpos && dpos->shape[0] < P) P = (int)dpos->shape[0];
    /* Vocabularies and special tokens. */
    const vocab_t *sv = m->src_vocab, *tv = m->tgt_vocab;
    int Vs = vocab_size(sv), Vt = vocab_size(tv);
    int share = (ee == de || ee->data == de->data) && same_vocab(sv, tv);
    int joint = share || same_vocab(sv, tv);
    int tie = pw == de || pw->data == de->data;
    int tpad = vocab_lookup(tv, HF_PAD), spad = vocab_lookup(sv, HF_PAD);
    int add_t = tpad < 0, add_s = spad < 0;
    if (joint && add_s != add_t) add_s = add_t = 1;
    if (add_t) tpad = Vt;
    int Vs2 = Vs + add_s, Vt2 = Vt + add_t;
    /* transformers 4.40's MarianModel makes both embeddings copies of one nn.Embedding(vocab_size,
     * padding_idx = pad_token_id) even when the vocabularies are separate: the smaller side gets zero
     * rows "<unused_ID>" (a target one a final_logits_bias of -1e9, so never output) up to one size */
    if (!joint) {
        int V = Vs2 > Vt2 ? Vs2 : Vt2;
        Vs2 = Vt2 = V;
    }
    int eos = m->tgt_eos, start = m->tgt_start;
    /* Tensors. */
    char n[200];
    if (share) {
        if ((st = put_matrix(&e, "model.shared.weight", ee, Vs2))) goto done;
    } else {
        if ((st = put_matrix(&e, "model.encoder.embed_tokens.weight", ee, Vs2)) ||
            (st = put_matrix(&e, "model.decoder.embed_tokens.weight", de, Vt2)))
            goto done;
    }
    if (!tie && (st = put_matrix(&e, "lm_head.weight", pw, Vt2))) goto done;
    float *bias = out_add(&e.out, "final_logits_bias", 2, 1, Vt2);
    if (!bias) {
        st = tern_error(TERN_ERR_NOMEM, "out of memory");
        goto done;
    }
    if (pb && (st = read_rows(&e, pb, 0, Vt, bias))) goto done;
    for (int i = Vt; i < Vt2; i++) bias[i] = HF_PAD_BIAS; /* the added pad and unused rows */
    for (int side = 0; side < 2; side++) {
        const tensor_t *t = side ? dpos : epos;
        snprintf(n, sizeof n, "model.%s.embed_positions.weight", side ? "decoder" : "encoder");
        float *d = out_add(&e.out, n, 2, P, e.d);
        if (!d) {
            st = tern_error(TERN_ERR_NOMEM, "out of memory");
            goto done;
        }
        if (t) {
            if ((st = read_rows(&e, t, 0, P, d))) goto done;
        } else {
            nn_sinusoids(d, P, e.d);
        }
    }
    if ((st = put_layers(&e))) goto done;
    for (int i = 0; i < weights_count(w); i++)
        if (weights_at(w, i)->rank == 2 && (weights_at(w, i)->dtype == DT_I8 || weights_at(w, i)->dtype == DT_I16))
            *dequantized = 1;

    /* config.json: MarianConfig's keys. */
    cfg = cJSON_CreateObject();
    cJSON *arch = cJSON_AddArrayToObject(cfg, "architectures");
    cJSON_AddItemToArray(arch, cJSON_CreateString("MarianMTModel"));
    cJSON_AddStringToObject(cfg, "model_type", "marian");
    cJSON_AddStringToObject(cfg, "activation_function", act_name);
    cJSON_AddNumberToObject(cfg, "d_model", e.d);
    cJSON_AddNumberToObject(cfg, "encoder_layers", e.Le);
    cJSON_AddNumberToObject(cfg, "decoder_layers", e.Ld);
    cJSON_AddNumberToObject(cfg, "encoder_attention_heads", heads);
    cJSON_AddNumberToObject(cfg, "decoder_attention_heads", heads);
    cJSON_AddNumberToObject(cfg, "encoder_ffn_dim", e.F);
    cJSON_AddNumberToObject(cfg, "decoder_ffn_dim", e.F);
    cJSON_AddNumberToObject(cfg, "vocab_size", Vs2);
    cJSON_AddNumberToObject(cfg, "decoder_vocab_size", Vt2);
    cJSON_AddNumberToObject(cfg, "max_position_embeddings", P);
    cJSON_AddNumberToObject(cfg, "pad_token_id", tpad);
    cJSON_AddNumberToObject(cfg, "eos_token_id", eos);
    cJSON_AddNumberToObject(cfg, "decoder_start_token_id", start);
    cJSON_AddNumberToObject(cfg, "bos_token_id", start);
    cJSON_AddNullToObject(cfg, "forced_eos_token_id");
    cJSON_AddBoolToObject(cfg, "scale_embedding", se);
    cJSON_AddBoolToObject(cfg, "share_encoder_decoder_embeddings", share);
    cJSON_AddBoolToObject(cfg, "tie_word_embeddings", tie);
    cJSON_AddBoolToObject(cfg, "normalize_before", 0);
    cJSON_AddBoolToObject(cfg, "normalize_embedding", 0);
    cJSON_AddBoolToObject(cfg, "static_position_embeddings", 1);
    cJSON_AddBoolToObject(cfg, "is_encoder_decoder", 1);
    cJSON_AddNumberToObject(cfg, "dropout", 0.1);
    cJSON_AddNumberToObject(cfg, "attention_dropout", 0.0);
    cJSON_AddNumberToObject(cfg, "activation_dropout", 0.0);
    cJSON_AddNumberToObject(cfg, "init_std", 0.02);
    cJSON_AddStringToObject(cfg, "torch_dtype", "float32");
    cJSON *bw = cJSON_AddArrayToObject(cfg, "bad_words_ids"), *bw1 = cJSON_CreateArray();
    cJSON_AddItemToArray(bw1, cJSON_CreateNumber(tpad));
    cJSON_AddItemToArray(bw, bw1);
    /* generation_config.json: the model's decoding defaults (generation.h's keys, transformers'
     * counting of the start token) and the token ids generate needs. */
    const tern_search_params_t *s = &m->search;
    gen = cJSON_CreateObject();
    cJSON_AddNumberToObject(gen, "decoder_start_token_id", start);
    cJSON_AddNumberToObject(gen, "bos_token_id", start);
    cJSON_AddNumberToObject(gen, "eos_token_id", eos);
    cJSON_AddNumberToObject(gen, "pad_token_id", tpad);
    cJSON_AddNullToObject(gen, "forced_eos_token_id");
    cJSON_AddItemToObject(gen, "bad_words_ids", cJSON_Duplicate(bw, 1));
    cJSON_AddBoolToObject(gen, "renormalize_logits", 1);
    cJSON_AddNumberToObject(gen, "num_beams", s->beam_size);
    if (s->num_hypotheses > 1) cJSON_AddNumberToObject(gen, "num_return_sequences", s->num_hypotheses);
    cJSON_AddNumberToObject(gen, "length_penalty", s->length_penalty);
    cJSON_AddNumberToObject(gen, "max_length", s->max_decoding_length + 1);
    if (s->min_length > 0) cJSON_AddNumberToObject(gen, "min_length", s->min_length + 1);
    if (s->coverage_penalty != 0) cJSON_AddNumberToObject(gen, "coverage_penalty", s->coverage_penalty);
    if (s->length_norm == TERN_LENPEN_GNMT) cJSON_AddStringToObject(gen, "length_norm", "gnmt");
    cJSON_AddStringToObject(gen, "transformers_version", "4.40.2");

    /* Write (the directory only now: a refused model leaves nothing behind). */
    if ((st = model_dir_mkdir(out))) goto done;
    const char *mk[] = {"format"}, *mv[] = {"pt"};
    path_join(p, sizeof p, out, "model.safetensors");
    if ((st = safetensors_write(p, e.out.t, e.out.n, mk, mv, 1))) goto done;
    st = write_json(path_join(p, sizeof p, out, "config.json"), cfg);
    cfg = NULL;
    if (st) goto done;
    st = write_json(path_join(p, sizeof p, out, MODEL_GENERATION_FILE), gen);
    gen = NULL;
    if (st) goto done;
    if ((st = write_vocab_json(sv, add_s, Vs2, path_join(p, sizeof p, out, "vocab.json"), m->src_vocab_path))) goto done;
    if (!joint && (st = write_vocab_json(tv, add_t, Vt2, path_join(p, sizeof p, out, "target_vocab.json"),
                                         m->tgt_vocab_path)))
        goto done;
    /* SentencePiece models: the ones Tern reads for each side (model.c's names). */
    static const char *const srcn[] = {"source.spm", "sentencepiece.model", "spm.model", "source.model",
                                       "sentencepiece.bpe.model", NULL};
    static const char *const tgtn[] = {"target.spm", "target.model", NULL};
    const char *sp = find_in(p, sizeof p, from, srcn), *tp = find_in(q, sizeof q, from, tgtn);
    if (!tp) tp = sp;
    if (sp) {
        char o1[4096];
        if ((st = model_dir_copy_file(sp, path_join(o1, sizeof o1, out, "source.spm"))) ||
            (st = model_dir_copy_file(tp, path_join(o1, sizeof o1, out, "target.spm"))))
            goto done;
    }
    cJSON *tc = cJSON_CreateObject();
    cJSON_AddStringToObject(tc, "tokenizer_class", "MarianTokenizer");
    cJSON_AddBoolToObject(tc, "separate_vocabs", !joint);
    cJSON_AddStringToObject(tc, "eos_token", m->cfg.eos_token);
    cJSON_AddStringToObject(tc, "unk_token", m->cfg.unk_token);
    cJSON_AddStringToObject(tc, "pad_token", HF_PAD);
    cJSON_AddNumberToObject(tc, "model_max_length", P);
    cJSON_AddNullToObject(tc, "source_lang");
    cJSON_AddNullToObject(tc, "target_lang");
    cJSON_AddItemToObject(tc, "sp_model_kwargs", cJSON_CreateObject());
    if ((st = write_json(path_join(p, sizeof p, out, "tokenizer_config.json"), tc))) goto done;
    cJSON *sm = cJSON_CreateObject();
    cJSON_AddStringToObject(sm, "eos_token", m->cfg.eos_token);
    cJSON_AddStringToObject(sm, "unk_token", m->cfg.unk_token);
    cJSON_AddStringToObject(sm, "pad_token", HF_PAD);
    st = write_json(path_join(p, sizeof p, out, "special_tokens_map.json"), sm);
done:
    cJSON_Delete(cfg);
    cJSON_Delete(gen);
    out_free(&e.out);
    if (is_hf) hf_checkpoint_free(&hf);
    weights_free(own_w);
    tern_model_free(m);
    return st;
}
