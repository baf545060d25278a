/*
 * cmd_convert.c — `tern convert --from-ct2 DIR -o OUTDIR [--quantize int8|float16|none]`:
 * writes Tern's own model format (docs/model-format.md) from a CTranslate2 model directory:
 * config.json (+ "format": "tern", "format_version": 1), model.safetensors with the same
 * variable names as model.bin (aliases as metadata "alias:<name>"), vocabularies as JSON lists,
 * and the SentencePiece models found beside them.
 */
#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <float.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cli.h"
#include "model/model_dir.h"
#include "model/family.h"
#include "model/generation.h"
#include "model/gnmt_desc.h"
#include "model/hf_format.h"
#include "model/marian_format.h"
#include "model/transformer_desc.h"
#include "model/weights.h"
#include "text/vocab.h"

static void usage(FILE *f) {
    fprintf(f, "usage: tern convert --from DIR -o OUTDIR [--to tern|ct2|hf] [--quantize int8|float16|none]\n"
               "\n"
               "Writes a model directory in Tern's format (model.safetensors, config.json,\n"
               "vocabularies, SentencePiece models) from a CTranslate2 directory (model.bin) or from\n"
               "a Tern directory (model.safetensors: a checkpoint, an average), e.g. to quantize it;\n"
               "with --to ct2, a CTranslate2 directory (model.bin) that ctranslate2 loads, also from a\n"
               "Hugging Face MarianMT, M2M-100 or NLLB checkpoint (config.json with \"model_type\");\n"
               "from a Marian model directory (model.npz with decoder.yml and its vocabularies) in\n"
               "either format.\n"
               "\n"
               "  --from DIR, --from-ct2 DIR, -m DIR  the model directory to read (all the same)\n"
               "  -o, --output OUTDIR         the model directory to write\n"
               "  --to tern                   Tern's format (default)\n"
               "  --to ct2                    CTranslate2's (model.bin, binary version 6; a Transformer\n"
               "                              only): what Tern trained, for ctranslate2 to run\n"
               "  --to hf                     a Hugging Face MarianMT checkpoint (config.json,\n"
               "                              model.safetensors, vocab.json, source.spm/target.spm,\n"
               "                              tokenizer and generation configs) that transformers'\n"
               "                              MarianMTModel loads: a post-norm Transformer with\n"
               "                              layer-norm epsilon 1e-5 (others are refused, saying why);\n"
               "                              int8 weights are dequantized; OUTDIR must be new or empty\n"
               "  --quantize int8             weight matrices to int8 with per-row scales (as\n"
               "                              CTranslate2's quantization=\"int8\"); other tensors unchanged\n"
               "  --quantize float16          every floating-point tensor to float16\n"
               "  --quantize none             tensors as stored (default)\n"
               "  --add-pad                   (a Marian model to Tern's format) append a \"<pad>\" token\n"
               "                              with zero embedding rows and start the decoder from it\n"
               "                              (Marian's zero start: the same computation); separate\n"
               "                              vocabularies of unequal sizes get \"<unused_N>\" rows up to\n"
               "                              one size; never generated (output bias -1e9,\n"
               "                              generation_config.json's bad_words_ids). The form\n"
               "                              `tern train --init-from` trains (it converts so itself)\n"
               "  --gnmt-clip-delta D         (a GNMT model) store GNMT's clip of the cell states and\n"
               "                              residual sums to [-D, D] (D >= 1) in the model: its int8\n"
               "                              decoding is then GNMT's quantized path (16-bit states over\n"
               "                              [-D, D]), its float32 decoding clips too. Post-training, on a\n"
               "                              model trained without the clip (tern train --gnmt-clip-delta\n"
               "                              trains with it): what quantizing it costs\n"
               "  --gnmt-clip-gamma G         (a GNMT model) store GNMT's logit clip to [-G, G] (G > 0)\n"
               "  -h, --help                  this help\n");
}

/* Per-row int8 exactly as CTranslate2's converter: amax = max|row| (127 when 0), scale = 127 / amax
 * in float32, q = rint(w * scale) (round half to even). */
static void quantize_row_ct2(int8_t *q, float *scale, const float *x, int64_t K) {
    float amax = 0.0f;
    for (int64_t k = 0; k < K; k++) amax = fmaxf(amax, fabsf(x[k]));
    if (amax == 0.0f) amax = 127.0f;
    if (amax < 127.0f / FLT_MAX) amax = 127.0f / FLT_MAX;
    float s = 127.0f / amax;
    for (int64_t k = 0; k < K; k++) {
        float v = rintf(x[k] * s);
        v = fminf(fmaxf(v, -128.0f), 127.0f);
        q[k] = (int8_t)v;
    }
    *scale = s;
}

/* float -> IEEE half, round to nearest even (overflow to inf, NaN kept). */
static uint16_t f32_to_f16(float f) {
    uint32_t x;
    memcpy(&x, &f, 4);
    uint32_t sign = (x >> 16) & 0x8000, ax = x & 0x7fffffff;
    if (ax >= 0x7f800000u) return (uint16_t)(sign | 0x7c00 | (ax > 0x7f800000u ? 0x200 : 0));
    if (ax >= 0x477ff000u) return (uint16_t)(sign | 0x7c00);
    if (ax < 0x38800000u) {
        if (ax <= 0x33000000u) return (uint16_t)sign; /* <= 2^-25 rounds to 0 (tie to even) */
        uint32_t e = ax >> 23, m = (ax & 0x7fffff) | 0x800000;
        int shift = 126 - (int)e;
        uint32_t q = m >> shift, rem = m & ((1u << shift) - 1), half = 1u << (shift - 1);
        if (rem > half || (rem == half && (q & 1))) q++;
        return (uint16_t)(sign | q);
    }
    uint32_t r = ax - ((uint32_t)(127 - 15) << 23), q = r >> 13, rem = r & 0x1fff;
    if (rem > 0x1000 || (rem == 0x1000 && (q & 1))) q++;
    return (uint16_t)(sign | q);
}

static int ends_with(const char *s, const char *suffix) {
    size_t a = strlen(s), b = strlen(suffix);
    return a >= b && !strcmp(s + a - b, suffix);
}

/* Stored as int8 + per-row scale by --quantize int8: what the family's description says of a
 * tensor it names (desc.h: DESC_Q8); a tensor it does not name, as CTranslate2 does, when it is a
 * matrix called ".../weight". */
static int quantizable(const model_desc_t *md, const char *name) {
    int spec, layer;
    if (desc_parse(md, name, &spec, &layer)) return md->specs[spec].dtype == DESC_Q8;
    return ends_with(name, "/weight");
}

static int is_float(dtype_t dt) { return dt == DT_F32 || dt == DT_F16 || dt == DT_BF16; }

typedef enum { Q_NONE, Q_INT8, Q_F16 } quant_t;

/* Builds the output tensor list; buffers it allocates are appended to owned. */
static tern_status_t convert_tensors(const weights_t *w, const model_desc_t *md, quant_t q, tensor_t **out, int *n_out,
                                     void ***owned, int *n_owned) {
    int n = weights_count(w);
    tensor_t *t = calloc((size_t)n * 2 + 1, sizeof *t);
    void **own = calloc((size_t)n * 3 + 1, sizeof *own);
    char name[1024];
    int k = 0, no = 0;
    if (!t || !own) {
        free(t);
        free(own);
        return tern_error(TERN_ERR_NOMEM, "out of memory");
    }
    *out = t;
    *owned = own;
    for (int i = 0; i < n; i++) {
        const tensor_t *s = weights_at(w, i);
        tensor_t *d = &t[k++];
        *d = *s;
        if (q == Q_INT8 && is_float(s->dtype) && s->rank == 2 && quantizable(md, s->name)) {
            snprintf(name, sizeof name, "%s_scale", s->name);
            if (weights_get(w, name)) continue; /* already has a scale */
            int64_t N = s->shape[0], K = s->shape[1];
            int8_t *qd = aligned_alloc64((size_t)(N * K));
            float *sc = aligned_alloc64((size_t)N * sizeof(float));
            float *row = aligned_alloc64((size_t)K * sizeof(float));
            char *sname = strdup(name);
            own[no++] = qd;
            own[no++] = sc;
            if (!qd || !sc || !row || !sname) {
                aligned_free(row);
                free(sname);
                *n_out = k;
                *n_owned = no;
                return tern_error(TERN_ERR_NOMEM, "tensor '%s': out of memory", s->name);
            }
            for (int64_t r = 0; r < N; r++) {
                for (int64_t c = 0; c < K; c++) row[c] = tensor_get_f32(s, r * K + c);
                quantize_row_ct2(qd + r * K, sc + r, row, K);
            }
            aligned_free(row);
            d->dtype = DT_I8;
            d->data = qd;
            d->nbytes = (size_t)(N * K);
            tensor_t *e = &t[k++];
            memset(e, 0, sizeof *e);
            e->name = sname;
            own[no++] = sname;
            e->dtype = DT_F32;
            e->rank = 1;
            e->shape[0] = N;
            e->numel = N;
            e->data = sc;
            e->nbytes = (size_t)N * sizeof(float);
        } else if (q == Q_F16 && s->rank > 0 && (s->dtype == DT_F32 || s->dtype == DT_BF16)) {
            uint16_t *h = aligned_alloc64((size_t)s->numel * 2);
            own[no++] = h;
            if (!h) {
                *n_out = k;
                *n_owned = no;
                return tern_error(TERN_ERR_NOMEM, "tensor '%s': out of memory", s->name);
            }
            for (int64_t j = 0; j < s->numel; j++) h[j] = f32_to_f16(tensor_get_f32(s, j));
            d->dtype = DT_F16;
            d->data = h;
            d->nbytes = (size_t)s->numel * 2;
        }
    }
    *n_out = k;
    *n_owned = no;
    return TERN_OK;
}

/* Tern's config.json writer with the CTranslate2 one's signature. */
static tern_status_t model_dir_write_config2(const char *out_dir, const char *from_config, const model_config_t *cfg) {
    return model_dir_write_config(out_dir, from_config, cfg, NULL);
}

/* OUT/model.bin: the spec of the model read (a CTranslate2 directory's, or what Tern's convert
 * kept in the safetensors metadata; else TransformerSpec, revision 7). */
static tern_status_t write_ct2(const weights_t *w, const char *out, const tensor_t *t, int n, const char **an,
                               const char **at, int na) {
    const char *spec = weights_spec_name(w), *rev = weights_metadata(w, "ct2_spec_revision");
    int revision = weights_spec_revision(w);
    if (!spec[0] && weights_metadata(w, "ct2_spec") && weights_metadata(w, "ct2_spec")[0]) {
        spec = weights_metadata(w, "ct2_spec");
        revision = rev ? atoi(rev) : 0;
    }
    if (!spec[0] || revision <= 0) spec = "TransformerSpec", revision = 7;
    char p[4096];
    path_join(p, sizeof p, out, "model.bin");
    return ct2_write(p, t, n, an, at, na, spec, revision);
}

/* A Hugging Face checkpoint's vocabularies (shared_vocabulary.json, or source_ and
 * target_vocabulary.json) and tokenizer files (source.spm, target.spm, sentencepiece.bpe.model,
 * generation_config.json) in out. */
static tern_status_t write_hf_side_files(const hf_checkpoint_t *hf, const char *from, const char *out) {
    char p[4096], q[4096];
    tern_status_t st;
    if (hf->src_vocab == hf->tgt_vocab) {
        st = model_dir_write_vocab(hf->src_vocab, path_join(p, sizeof p, out, "shared_vocabulary.json"));
    } else if (!(st = model_dir_write_vocab(hf->src_vocab, path_join(p, sizeof p, out, "source_vocabulary.json")))) {
        st = model_dir_write_vocab(hf->tgt_vocab, path_join(p, sizeof p, out, "target_vocabulary.json"));
    }
    static const char *const files[] = {"source.spm", "target.spm", "sentencepiece.bpe.model", "generation_config.json"};
    for (size_t i = 0; !st && i < sizeof files / sizeof files[0]; i++)
        if (file_exists(path_join(p, sizeof p, from, files[i])))
            st = model_dir_copy_file(p, path_join(q, sizeof q, out, files[i]));
    return st;
}

/* A Marian model's vocabularies (shared_vocabulary.json, or source_ and target_vocabulary.json)
 * and SentencePiece models (source.spm and target.spm) in out. */
static tern_status_t write_marian_side_files(const hf_checkpoint_t *m, const char *out) {
    char p[4096];
    tern_status_t st;
    if (m->src_vocab == m->tgt_vocab) {
        st = model_dir_write_vocab(m->src_vocab, path_join(p, sizeof p, out, "shared_vocabulary.json"));
    } else if (!(st = model_dir_write_vocab(m->src_vocab, path_join(p, sizeof p, out, "source_vocabulary.json")))) {
        st = model_dir_write_vocab(m->tgt_vocab, path_join(p, sizeof p, out, "target_vocabulary.json"));
    }
    if (!st && m->src_spm_path[0]) st = model_dir_copy_file(m->src_spm_path, path_join(p, sizeof p, out, "source.spm"));
    if (!st && m->tgt_spm_path[0]) st = model_dir_copy_file(m->tgt_spm_path, path_join(p, sizeof p, out, "target.spm"));
    return st;
}

/* --add-pad: Marian's vocabularies have no padding token, which Tern's trainer needs, and its
 * decoder starts from a zero embedding. Appending "<pad>" with zero embedding rows and starting the
 * decoder from it computes the same (the row is zero, position 0 is added) and the trainer never
 * updates the pad row (nn.Embedding's padding_idx); the output bias keeps it (and the "<unused_N>"
 * rows that bring separate vocabularies to one size, so that the pad has one id) out of every
 * softmax: -1e9. Done on the converted float32 tensors t[0..n) (their data owned or the
 * checkpoint's: replaced by owned copies); the new vocabularies in *sv and *tv (*tv == *sv when
 * joint), the pad id in *pad. */
static tern_status_t add_pad(hf_checkpoint_t *hf, tensor_t **tp, int *np, void ***own, int *no, vocab_t **sv,
                             vocab_t **tv, int *pad) {
    const char *PAD = "<pad>";
    int joint = hf->src_vocab == hf->tgt_vocab;
    int Vs = vocab_size(hf->src_vocab), Vt = vocab_size(hf->tgt_vocab), V2 = (Vs > Vt ? Vs : Vt) + 1;
    if (vocab_lookup(hf->src_vocab, PAD) >= 0 || vocab_lookup(hf->tgt_vocab, PAD) >= 0)
        return tern_error(TERN_ERR_UNSUPPORTED, "--add-pad: the vocabulary already has a \"%s\" token", PAD);
    *pad = V2 - 1;
    /* the vocabularies */
    const char **tok = malloc(sizeof *tok * (size_t)V2);
    char (*unused)[32] = malloc(sizeof *unused * (size_t)V2);
    if (!tok || !unused) {
        free(tok), free(unused);
        return tern_error(TERN_ERR_NOMEM, "out of memory");
    }
    tern_status_t st = TERN_OK;
    *sv = *tv = NULL;
    for (int side = 0; side < (joint ? 1 : 2) && !st; side++) {
        const vocab_t *v = side ? hf->tgt_vocab : hf->src_vocab;
        int V = vocab_size(v);
        for (int i = 0; i < V2; i++) {
            if (i < V) tok[i] = vocab_token(v, i);
            else if (i == V2 - 1) tok[i] = PAD;
            else {
                snprintf(unused[i], sizeof unused[i], "<unused_%d>", i);
                if (vocab_lookup(v, unused[i]) >= 0) {
                    st = tern_error(TERN_ERR_UNSUPPORTED, "--add-pad: the vocabulary already has \"%s\"", unused[i]);
                    break;
                }
                tok[i] = unused[i];
            }
        }
        if (!st) st = vocab_from_tokens(side ? tv : sv, tok, V2);
    }
    free(tok), free(unused);
    if (st) return st;
    if (joint) *tv = *sv;
    /* the tensors: embeddings and the output layer get rows up to V2 */
    char ne[160], nd[160], nw[160], nb[160];
    transformer_tensor_name(ne, sizeof ne, TM_ENC_EMB, -1, TP_WEIGHT);
    transformer_tensor_name(nd, sizeof nd, TM_DEC_EMB, -1, TP_WEIGHT);
    transformer_tensor_name(nw, sizeof nw, TM_PROJ, -1, TP_WEIGHT);
    transformer_tensor_name(nb, sizeof nb, TM_PROJ, -1, TP_BIAS);
    tensor_t *t = *tp;
    int n = *np, has_bias = 0;
    for (int i = 0; i < n; i++) {
        const char *nm = t[i].name;
        int emb = !strcmp(nm, ne) || !strcmp(nm, TRANSFORMER_ENC_EMB_ALT) || !strcmp(nm, nd) || !strcmp(nm, nw);
        int bias = !strcmp(nm, nb);
        if (!emb && !bias) continue;
        has_bias |= bias;
        int64_t rows = t[i].shape[0], cols = t[i].rank == 2 ? t[i].shape[1] : 1;
        if (t[i].dtype != DT_F32 || (emb && t[i].rank != 2) || (bias && t[i].rank != 1) || rows >= V2)
            return tern_error(TERN_ERR_UNSUPPORTED, "--add-pad: tensor '%s' is not a float32 %s of fewer than %d rows",
                              nm, emb ? "matrix" : "vector", V2);
        float *d = calloc((size_t)(V2 * cols), sizeof(float));
        void **o2 = realloc(*own, sizeof *o2 * (size_t)(*no + 1));
        if (!d || !o2) {
            free(d);
            if (o2) *own = o2;
            return tern_error(TERN_ERR_NOMEM, "out of memory");
        }
        *own = o2;
        (*own)[(*no)++] = d;
        memcpy(d, t[i].data, (size_t)(rows * cols) * sizeof(float));
        if (bias)
            for (int64_t r = rows; r < V2; r++) d[r] = -1e9f;
        t[i].data = d;
        t[i].shape[0] = V2;
        t[i].numel = V2 * cols;
        t[i].nbytes = (size_t)t[i].numel * sizeof(float);
    }
    if (!has_bias) { /* a model without an output bias gets one: zeros, -1e9 for the new rows */
        tensor_t *t2 = realloc(t, sizeof *t2 * (size_t)(n + 1));
        float *d = calloc((size_t)V2, sizeof(float));
        char *name = strdup(nb);
        void **o2 = realloc(*own, sizeof *o2 * (size_t)(*no + 2));
        if (t2) *tp = t = t2;
        if (o2) *own = o2;
        if (!t2 || !d || !name || !o2) {
            free(d), free(name);
            return tern_error(TERN_ERR_NOMEM, "out of memory");
        }
        (*own)[(*no)++] = d;
        (*own)[(*no)++] = name;
        for (int r = Vt; r < V2; r++) d[r] = -1e9f;
        memset(&t[n], 0, sizeof t[n]);
        t[n].name = name;
        t[n].dtype = DT_F32;
        t[n].rank = 1;
        t[n].shape[0] = V2;
        t[n].numel = V2;
        t[n].nbytes = (size_t)V2 * sizeof(float);
        t[n].data = d;
        *np = n + 1;
    }
    snprintf(hf->cfg.decoder_start_token, sizeof hf->cfg.decoder_start_token, "%s", PAD);
    return TERN_OK;
}

/* generation_config.json of an --add-pad model: the pad and unused rows never generated. */
static tern_status_t write_pad_generation(const char *out, int V, int pad) {
    char p[4096];
    FILE *f = fopen(path_join(p, sizeof p, out, MODEL_GENERATION_FILE), "w");
    if (!f) return tern_error(TERN_ERR_IO, "%s: cannot write: %s", p, strerror(errno));
    fprintf(f, "{\n  \"pad_token_id\": %d,\n  \"bad_words_ids\": [", pad);
    for (int i = V; i <= pad; i++) fprintf(f, "%s[%d]", i > V ? ", " : "", i);
    fprintf(f, "]\n}\n");
    if (fclose(f)) return tern_error(TERN_ERR_IO, "%s: write failed", p);
    return TERN_OK;
}

/* --gnmt-clip-delta / --gnmt-clip-gamma: the scalar keys GNMT reads (gnmt/clip_delta, gnmt/clip_gamma;
 * what tern train --gnmt-clip-* stores), replaced when present, appended when not. */
static tern_status_t set_gnmt_clips(tensor_t **tp, int *np, void ***own, int *no, const float vals[2]) {
    static const char *keys[2] = {GNMT_CLIP_DELTA_KEY, GNMT_CLIP_GAMMA_KEY};
    for (int k = 0; k < 2; k++) {
        if (!(vals[k] > 0)) continue;
        tensor_t *t = *tp;
        int n = *np, at = n;
        for (int i = 0; i < n; i++)
            if (!strcmp(t[i].name, keys[k])) at = i;
        float *v = malloc(sizeof *v);
        void **o2 = realloc(*own, (size_t)(*no + 1) * sizeof **own);
        if (o2) *own = o2;
        tensor_t *t2 = at == n ? realloc(t, (size_t)(n + 1) * sizeof *t) : t;
        if (t2) *tp = t = t2;
        if (!v || !o2 || !t2) {
            free(v);
            return tern_error(TERN_ERR_NOMEM, "out of memory");
        }
        (*own)[(*no)++] = v;
        *v = vals[k];
        memset(&t[at], 0, sizeof t[at]);
        t[at].name = keys[k];
        t[at].dtype = DT_F32;
        t[at].rank = 0;
        t[at].numel = 1;
        t[at].nbytes = sizeof(float);
        t[at].data = v;
        if (at == n) *np = n + 1;
    }
    return TERN_OK;
}

static void free_owned(void **own, int n) {
    for (int i = 0; i < n; i++) free(own[i]); /* aligned_alloc64 memory is free()-able */
    free(own);
}

int cmd_convert(int argc, char **argv) {
    const char *from = NULL, *out = NULL, *quant = "none", *to = "tern";
    int pad_it = 0;
    float clips[2] = {0, 0}; /* --gnmt-clip-delta, --gnmt-clip-gamma (0: not given) */
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            return 0;
        } else if ((!strcmp(a, "--from-ct2") || !strcmp(a, "--from") || !strcmp(a, "-m")) && i + 1 < argc) {
            from = argv[++i];
        } else if ((!strcmp(a, "-o") || !strcmp(a, "--output")) && i + 1 < argc) {
            out = argv[++i];
        } else if (!strcmp(a, "--add-pad")) {
            pad_it = 1;
        } else if (!strcmp(a, "--quantize") && i + 1 < argc) {
            quant = argv[++i];
        } else if ((!strcmp(a, "--gnmt-clip-delta") || !strcmp(a, "--gnmt-clip-gamma")) && i + 1 < argc) {
            int g = !strcmp(a, "--gnmt-clip-gamma");
            char *end = NULL;
            double v = strtod(argv[++i], &end);
            if (!end || end == argv[i] || *end || !(v >= (g ? 1e-6 : 1.0) && v <= 1e6)) {
                fprintf(stderr, "tern convert: %s must be a number in [%s, 1e6] (got '%s')\n", a, g ? "1e-6" : "1",
                        argv[i]);
                return 2;
            }
            clips[g] = (float)v;
        } else if (!strcmp(a, "--to") && i + 1 < argc) {
            to = argv[++i];
            if (strcmp(to, "tern") && strcmp(to, "ct2") && strcmp(to, "hf")) {
                fprintf(stderr, "tern convert: --to must be tern, ct2 or hf (got '%s')\n", to);
                return 2;
            }
        } else {
            fprintf(stderr, "tern convert: unknown or incomplete option '%s'\n", a);
            usage(stderr);
            return 2;
        }
    }
    if (!from || !out) {
        usage(stderr);
        return 2;
    }
    quant_t q;
    if (!strcmp(quant, "none")) q = Q_NONE;
    else if (!strcmp(quant, "int8")) q = Q_INT8;
    else if (!strcmp(quant, "float16")) q = Q_F16;
    else {
        fprintf(stderr, "tern convert: --quantize must be int8, float16 or none (got '%s')\n", quant);
        return 2;
    }
    if (pad_it && (strcmp(to, "tern") || q != Q_NONE || !marian_is_dir(from))) {
        fprintf(stderr, "tern convert: --add-pad applies to a Marian model directory written in Tern's format "
                "(--to tern, --quantize none)%s\n", marian_is_dir(from) ? "" : "; --from is not one");
        return 2;
    }
    if ((clips[0] > 0 || clips[1] > 0) && strcmp(to, "tern")) {
        fprintf(stderr, "tern convert: --gnmt-clip-delta/--gnmt-clip-gamma apply to a GNMT model written in Tern's "
                "format (--to tern)\n");
        return 2;
    }
    if (!strcmp(to, "hf")) {
        if (q != Q_NONE) {
            fprintf(stderr, "tern convert: --to hf writes float32 (MarianMT's); --quantize does not apply\n");
            return 2;
        }
        int deq = 0;
        if (convert_to_hf(from, out, &deq)) {
            fprintf(stderr, "tern convert: %s\n", tern_last_error());
            return 1;
        }
        fprintf(stderr, "tern convert: %s -> %s (Hugging Face MarianMT checkpoint, float32%s)\n", from, out,
                deq ? "; int8 weights dequantized: weight = q / scale per row, as Tern runs them in float32" : "");
        return 0;
    }
    char p[4096];
    weights_t *w = NULL;
    tensor_t *t = NULL;
    void **own = NULL;
    const char **an = NULL, **at = NULL;
    int n = 0, no = 0, rc = 1;
    hf_checkpoint_t hf;
    memset(&hf, 0, sizeof hf);
    vocab_t *pad_sv = NULL, *pad_tv = NULL;
    int pad_id = -1, pad_V = 0;
    int is_marian = marian_is_dir(from);
    int is_hf = is_marian || hf_is_checkpoint(path_join(p, sizeof p, from, "config.json"));
    if (is_hf && !is_marian && strcmp(to, "ct2")) {
        tern_error(TERN_ERR_UNSUPPORTED, "%s: a Hugging Face checkpoint (\"model_type\"): tern translate -m reads it as "
                   "it is (--compute-type int8 quantizes it at load); convert writes its CTranslate2 form with --to ct2",
                   p);
        goto fail;
    }
    if (is_hf) {
        /* the checkpoint as the loader presents it: the Transformer description's names */
        if (is_marian && !strcmp(to, "ct2")) {
            if (marian_checkpoint_load(&hf, from)) goto fail;
            int64_t raw = 0; /* (an SSRU model has no such key: refused below) */
            if (weights_get_int(hf.weights, transformer_key_name(TKEY_DEC_RAW_SELF_KV), &raw) && raw) {
                tern_error(TERN_ERR_UNSUPPORTED, "%s: a pre-norm Marian model: Marian decodes it with the decoder "
                           "self-attention's keys and values taken before the norm, which CTranslate2 does not do "
                           "(convert it to Tern's format)", from);
                goto fail;
            }
            hf_checkpoint_free(&hf);
        }
        if (is_marian ? marian_checkpoint_load(&hf, from) : hf_checkpoint_load(&hf, from, 0)) goto fail;
        w = hf.weights;
    } else if (file_exists(path_join(p, sizeof p, from, "model.safetensors"))) {
        if (weights_load_safetensors(&w, p)) goto fail;
    } else {
        path_join(p, sizeof p, from, "model.bin");
        if (weights_load_ct2(&w, p)) goto fail;
    }
    int64_t ssru = 0;
    if (!strcmp(to, "ct2") && weights_get_int(w, transformer_key_name(TKEY_DEC_SSRU), &ssru) && ssru) {
        tern_error(TERN_ERR_UNSUPPORTED, "%s: an SSRU decoder (Marian's --dec-cell ssru): CTranslate2 has no SSRU layer "
                   "(tern translate -m runs it; convert writes it in Tern's format without --to ct2)", from);
        goto fail;
    }
    /* The family (config.json's "architecture"; none: a CTranslate2 Transformer) and its description. */
    model_config_t cfg;
    model_config_defaults(&cfg);
    const model_family_t *fam;
    path_join(p, sizeof p, from, "config.json");
    if (is_hf) cfg = hf.cfg;
    else if (file_exists(p) && model_config_load(&cfg, p)) goto fail;
    if (model_family_find(&fam, &cfg, p)) goto fail;
    int ct2 = !strcmp(to, "ct2");
    if (ct2 && strcmp(fam->name, "transformer")) {
        tern_error(TERN_ERR_UNSUPPORTED, "%s: a %s model has no CTranslate2 form (--to ct2 writes Transformers)", from,
                   fam->name);
        goto fail;
    }
    if ((clips[0] > 0 || clips[1] > 0) && strcmp(fam->name, "gnmt")) {
        tern_error(TERN_ERR_UNSUPPORTED, "%s: --gnmt-clip-delta/--gnmt-clip-gamma apply to a GNMT model (this one is "
                   "a %s model)", from, fam->name);
        goto fail;
    }
    if (model_dir_mkdir(out)) goto fail;
    if (convert_tensors(w, fam->desc, q, &t, &n, &own, &no)) goto fail;
    if (set_gnmt_clips(&t, &n, &own, &no, clips)) goto fail;
    if (pad_it) {
        pad_V = vocab_size(hf.tgt_vocab);
        if (add_pad(&hf, &t, &n, &own, &no, &pad_sv, &pad_tv, &pad_id)) goto fail;
        /* the vocabularies written are the padded ones */
        if (hf.src_vocab != hf.tgt_vocab) vocab_free(hf.tgt_vocab);
        vocab_free(hf.src_vocab);
        hf.src_vocab = pad_sv;
        hf.tgt_vocab = pad_tv;
        pad_sv = pad_tv = NULL;
    }
    int na = weights_alias_count(w), nm = 0;
    an = calloc((size_t)na + 1, sizeof *an);
    at = calloc((size_t)na + 1, sizeof *at);
    if (!an || !at) {
        tern_error(TERN_ERR_NOMEM, "out of memory");
        goto fail;
    }
    for (int i = 0; i < na; i++) {
        /* Scale aliases derived by the loader are not stored (model.bin does not store them). */
        if (weights_alias_is_derived(w, i)) continue;
        an[nm] = weights_alias_at(w, i, &at[nm]);
        nm++;
    }
    if (ct2) {
        /* Tern's own read-only keys of a Marian model (decoder/marian_*): not CTranslate2's */
        int k = 0;
        for (int i = 0; i < n; i++)
            if (strncmp(t[i].name, "decoder/marian_", 15)) t[k++] = t[i];
        n = k;
        if (write_ct2(w, out, t, n, an, at, nm)) goto fail;
    } else {
        char rev[32], ver[32];
        snprintf(rev, sizeof rev, "%d", weights_spec_revision(w));
        snprintf(ver, sizeof ver, "%d", weights_binary_version(w));
        const char *mk[] = {"ct2_spec", "ct2_spec_revision", "ct2_binary_version"};
        const char *mv[] = {weights_spec_name(w), rev, ver};
        if (model_dir_write_weights(out, t, n, an, at, nm, mk, mv, 3)) goto fail;
    }
    path_join(p, sizeof p, from, "config.json");
    if (is_marian) { /* config.json from the loader's tokens; the vocabularies as lists; the SentencePiece models */
        if ((ct2 ? model_dir_write_ct2_config(out, NULL, &hf.cfg)
                 : model_dir_write_config(out, NULL, &hf.cfg, pad_id >= 0 ? "<pad>" : NULL)) ||
            write_marian_side_files(&hf, out))
            goto fail;
        if (pad_id >= 0 && write_pad_generation(out, pad_V, pad_id)) goto fail;
    } else if (is_hf) { /* config.json from the loader's tokens; the vocabularies as lists; the tokenizer models */
        if (model_dir_write_ct2_config(out, NULL, &hf.cfg) || write_hf_side_files(&hf, from, out)) goto fail;
    } else {
        if ((ct2 ? model_dir_write_ct2_config : model_dir_write_config2)(out, file_exists(p) ? p : NULL, NULL))
            goto fail;
        if (model_dir_copy_side_files(from, out)) goto fail;
    }
    fprintf(stderr, "tern convert: %s -> %s (%s, %d tensors, %d aliases, quantize %s)\n", from, out,
            ct2 ? "CTranslate2 model.bin" : "Tern", n, nm, quant);
    rc = 0;
fail:
    if (rc) fprintf(stderr, "tern convert: %s\n", tern_last_error());
    if (pad_tv != pad_sv) vocab_free(pad_tv);
    vocab_free(pad_sv);
    free(an);
    free(at);
    free(t);
    free_owned(own, no);
    if (is_hf) hf_checkpoint_free(&hf);
    else weights_free(w);
    return rc;
}
