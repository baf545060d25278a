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
#include "model/weights.h"
#include "text/vocab.h"

static void usage(FILE *f) {
    fprintf(f, "usage: tern convert --from-ct2 DIR -o OUTDIR [--quantize int8|float16|none]\n"
               "  Converts a CTranslate2 model directory into Tern's format (model.safetensors,\n"
               "  config.json, vocabularies, SentencePiece models).\n"
               "  --quantize int8     weight matrices to int8 with per-row scales (as CTranslate2's\n"
               "                      quantization=\"int8\"); other tensors unchanged\n"
               "  --quantize float16  every floating-point tensor to float16\n");
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

static int is_float(dtype_t dt) { return dt == DT_F32 || dt == DT_F16 || dt == DT_BF16; }

static int copy_file(const char *from, const char *to) {
    char *data;
    size_t size;
    if (file_read_all(from, &data, &size)) return -1;
    char tmp[4200];
    snprintf(tmp, sizeof tmp, "%s.tmp", to);
    FILE *f = fopen(tmp, "wb");
    int ok = f && fwrite(data, 1, size, f) == size;
    if (f && fclose(f) != 0) ok = 0;
    free(data);
    if (!ok || rename(tmp, to) != 0) {
        tern_error(TERN_ERR_IO, "%s: cannot write: %s", to, strerror(errno));
        remove(tmp);
        return -1;
    }
    return 0;
}

static int write_text(const char *path, const char *text) {
    char tmp[4200];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    FILE *f = fopen(tmp, "wb");
    int ok = f && fputs(text, f) >= 0 && fputc('\n', f) != EOF;
    if (f && fclose(f) != 0) ok = 0;
    if (!ok || rename(tmp, path) != 0) {
        tern_error(TERN_ERR_IO, "%s: cannot write: %s", path, strerror(errno));
        remove(tmp);
        return -1;
    }
    return 0;
}

/* Rewrites a vocabulary (.json or legacy .txt) as a JSON list. */
static int convert_vocab(const char *from, const char *to) {
    vocab_t *v;
    if (vocab_load(&v, from)) return -1;
    cJSON *arr = cJSON_CreateArray();
    for (int i = 0; arr && i < vocab_size(v); i++) cJSON_AddItemToArray(arr, cJSON_CreateString(vocab_token(v, i)));
    char *s = arr ? cJSON_PrintUnformatted(arr) : NULL;
    cJSON_Delete(arr);
    vocab_free(v);
    if (!s) {
        tern_error(TERN_ERR_NOMEM, "%s: out of memory", to);
        return -1;
    }
    int r = write_text(to, s);
    free(s);
    return r;
}

static int write_config(const char *from_dir, const char *out_dir) {
    char p[4096];
    path_join(p, sizeof p, from_dir, "config.json");
    cJSON *root = NULL;
    if (file_exists(p)) {
        char *text;
        size_t size;
        if (file_read_all(p, &text, &size)) return -1;
        root = cJSON_ParseWithLength(text, size);
        free(text);
        if (!root || !cJSON_IsObject(root)) {
            cJSON_Delete(root);
            tern_error(TERN_ERR_FORMAT, "%s: not a JSON object", p);
            return -1;
        }
        model_config_t c; /* validates the keys the engine reads */
        model_config_defaults(&c);
        if (model_config_load(&c, p)) {
            cJSON_Delete(root);
            return -1;
        }
    } else {
        model_config_t c;
        model_config_defaults(&c);
        root = cJSON_CreateObject();
        cJSON_AddStringToObject(root, "unk_token", c.unk_token);
        cJSON_AddStringToObject(root, "bos_token", c.bos_token);
        cJSON_AddStringToObject(root, "eos_token", c.eos_token);
        cJSON_AddStringToObject(root, "decoder_start_token", c.decoder_start_token);
        cJSON_AddBoolToObject(root, "add_source_bos", 0);
        cJSON_AddBoolToObject(root, "add_source_eos", 0);
        cJSON_AddNullToObject(root, "layer_norm_epsilon");
    }
    cJSON_DeleteItemFromObjectCaseSensitive(root, "format");
    cJSON_DeleteItemFromObjectCaseSensitive(root, "format_version");
    cJSON_AddStringToObject(root, "format", "tern");
    cJSON_AddNumberToObject(root, "format_version", 1);
    char *s = cJSON_Print(root);
    cJSON_Delete(root);
    if (!s) {
        tern_error(TERN_ERR_NOMEM, "out of memory");
        return -1;
    }
    path_join(p, sizeof p, out_dir, "config.json");
    int r = write_text(p, s);
    free(s);
    return r;
}

static int copy_side_files(const char *from_dir, const char *out_dir) {
    char a[4096], b[4096];
    static const char *vocabs[][2] = {{"shared_vocabulary", NULL}, {"source_vocabulary", NULL},
                                      {"target_vocabulary", NULL}};
    int found_shared = 0;
    for (size_t i = 0; i < sizeof vocabs / sizeof vocabs[0]; i++) {
        if (i > 0 && found_shared) break;
        static const char *exts[] = {".json", ".txt"};
        for (int e = 0; e < 2; e++) {
            char name[64];
            snprintf(name, sizeof name, "%s%s", vocabs[i][0], exts[e]);
            path_join(a, sizeof a, from_dir, name);
            if (!file_exists(a)) continue;
            snprintf(name, sizeof name, "%s.json", vocabs[i][0]);
            path_join(b, sizeof b, out_dir, name);
            if (convert_vocab(a, b)) return -1;
            if (i == 0) found_shared = 1;
            break;
        }
    }
    static const char *spms[] = {"source.spm", "target.spm", "sentencepiece.model", "spm.model",
                                 "source.model", "target.model"};
    for (size_t i = 0; i < sizeof spms / sizeof spms[0]; i++) {
        path_join(a, sizeof a, from_dir, spms[i]);
        if (!file_exists(a)) continue;
        path_join(b, sizeof b, out_dir, spms[i]);
        if (copy_file(a, b)) return -1;
    }
    return 0;
}

static int name_cmp(const void *a, const void *b) {
    return strcmp(((const tensor_t *)a)->name, ((const tensor_t *)b)->name);
}

typedef enum { Q_NONE, Q_INT8, Q_F16 } quant_t;

/* Builds the output tensor list; buffers it allocates are appended to owned. */
static tern_status_t convert_tensors(const weights_t *w, quant_t q, tensor_t **out, int *n_out,
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
        if (q == Q_INT8 && is_float(s->dtype) && s->rank == 2 && ends_with(s->name, "/weight")) {
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
    qsort(t, (size_t)k, sizeof *t, name_cmp);
    *n_out = k;
    *n_owned = no;
    return TERN_OK;
}

static void free_owned(void **own, int n) {
    for (int i = 0; i < n; i++) free(own[i]); /* aligned_alloc64 memory is free()-able */
    free(own);
}

int cmd_convert(int argc, char **argv) {
    const char *from = NULL, *out = NULL, *quant = "none";
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            return 0;
        } else if (!strcmp(a, "--from-ct2") && i + 1 < argc) {
            from = argv[++i];
        } else if ((!strcmp(a, "-o") || !strcmp(a, "--output")) && i + 1 < argc) {
            out = argv[++i];
        } else if (!strcmp(a, "--quantize") && i + 1 < argc) {
            quant = argv[++i];
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
    char p[4096];
    path_join(p, sizeof p, from, "model.bin");
    weights_t *w = NULL;
    tensor_t *t = NULL;
    void **own = NULL;
    const char **mk = NULL, **mv = NULL;
    int n = 0, no = 0, rc = 1;
    if (weights_load_ct2(&w, p)) goto fail;
    if (mkdir(out, 0755) != 0 && errno != EEXIST) {
        tern_error(TERN_ERR_IO, "%s: cannot create directory: %s", out, strerror(errno));
        goto fail;
    }
    if (convert_tensors(w, q, &t, &n, &own, &no)) goto fail;
    int na = weights_alias_count(w), nm = 0;
    mk = calloc((size_t)na + 4, sizeof *mk);
    mv = calloc((size_t)na + 4, sizeof *mv);
    if (!mk || !mv) {
        tern_error(TERN_ERR_NOMEM, "out of memory");
        goto fail;
    }
    char rev[32], ver[32];
    snprintf(rev, sizeof rev, "%d", weights_spec_revision(w));
    snprintf(ver, sizeof ver, "%d", weights_binary_version(w));
    mk[nm] = "format", mv[nm++] = "tern";
    mk[nm] = "ct2_spec", mv[nm++] = weights_spec_name(w);
    mk[nm] = "ct2_spec_revision", mv[nm++] = rev;
    mk[nm] = "ct2_binary_version", mv[nm++] = ver;
    for (int i = 0; i < na; i++) {
        const char *target, *alias = weights_alias_at(w, i, &target);
        /* Scale aliases derived by the loader are not stored (model.bin does not store them). */
        if (weights_alias_is_derived(w, i)) continue;
        size_t l = strlen(alias) + 7;
        char *key = malloc(l);
        if (!key) {
            tern_error(TERN_ERR_NOMEM, "out of memory");
            goto fail;
        }
        snprintf(key, l, "alias:%s", alias);
        mk[nm] = key;
        mv[nm++] = target;
        void **g = realloc(own, sizeof *own * (size_t)(no + 1));
        if (!g) {
            free(key);
            tern_error(TERN_ERR_NOMEM, "out of memory");
            goto fail;
        }
        own = g;
        own[no++] = key;
    }
    path_join(p, sizeof p, out, "model.safetensors");
    if (safetensors_write(p, t, n, mk, mv, nm)) goto fail;
    if (write_config(from, out)) goto fail;
    if (copy_side_files(from, out)) goto fail;
    fprintf(stderr, "tern convert: %s -> %s (%d tensors, %d aliases, quantize %s)\n", from, out, n,
            nm - 4, quant);
    rc = 0;
fail:
    if (rc) fprintf(stderr, "tern convert: %s\n", tern_last_error());
    free(mk);
    free(mv);
    free(t);
    free_owned(own, no);
    weights_free(w);
    return rc;
}
