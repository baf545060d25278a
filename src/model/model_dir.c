/*
 * model_dir.c — writing Tern model directories: config.json, model.safetensors with Tern's
 * metadata, JSON vocabularies and SentencePiece models (see model_dir.h). Moved here from
 * `tern convert` so that checkpoints and `tern average` write the same directories.
 */
#include "model/model_dir.h"
#include "model/generation.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

tern_status_t model_dir_mkdir(const char *dir) {
    /* the missing parents first, as mkdir -p (and Python's os.makedirs in the converters) */
    size_t n = strlen(dir);
    char *p = malloc(n + 1);
    if (!p) return tern_error(TERN_ERR_NOMEM, "%s: out of memory", dir);
    memcpy(p, dir, n + 1);
    for (size_t i = 1; i < n; i++) {
        if (p[i] != '/' || p[i - 1] == '/') continue;
        p[i] = 0;
        int bad = mkdir(p, 0755) != 0 && errno != EEXIST;
        int err = errno;
        p[i] = '/';
        if (bad) {
            free(p);
            return tern_error(TERN_ERR_IO, "%s: cannot create directory: %s", dir, strerror(err));
        }
    }
    free(p);
    if (mkdir(dir, 0755) != 0 && errno != EEXIST)
        return tern_error(TERN_ERR_IO, "%s: cannot create directory: %s", dir, strerror(errno));
    struct stat st;
    if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode))
        return tern_error(TERN_ERR_IO, "%s: not a directory", dir);
    return TERN_OK;
}

/* Writes size bytes to path through path.tmp + rename. */
static tern_status_t write_bytes(const char *path, const char *data, size_t size, int newline) {
    size_t pl = strlen(path);
    char *tmp = malloc(pl + 5);
    if (!tmp) return tern_error(TERN_ERR_NOMEM, "%s: out of memory", path);
    memcpy(tmp, path, pl);
    memcpy(tmp + pl, ".tmp", 5);
    FILE *f = fopen(tmp, "wb");
    int ok = f && fwrite(data, 1, size, f) == size && (!newline || fputc('\n', f) != EOF);
    int err = errno;
    if (f && fclose(f) != 0) ok = 0, err = errno;
    if (!ok || rename(tmp, path) != 0) {
        if (ok) err = errno;
        remove(tmp);
        free(tmp);
        return tern_error(TERN_ERR_IO, "%s: cannot write: %s", path, strerror(err));
    }
    free(tmp);
    return TERN_OK;
}

tern_status_t model_dir_write_text(const char *path, const char *text) {
    return write_bytes(path, text, strlen(text), 1);
}

tern_status_t model_dir_copy_file(const char *from, const char *to) {
    char *data;
    size_t size;
    tern_status_t st = file_read_all(from, &data, &size);
    if (st) return st;
    st = write_bytes(to, data, size, 0);
    free(data);
    return st;
}

tern_status_t model_dir_write_vocab(const vocab_t *v, const char *path) {
    cJSON *arr = cJSON_CreateArray();
    for (int i = 0; arr && i < vocab_size(v); i++) {
        cJSON *s = cJSON_CreateString(vocab_token(v, i));
        if (!s) {
            cJSON_Delete(arr);
            arr = NULL;
            break;
        }
        cJSON_AddItemToArray(arr, s);
    }
    char *s = arr ? cJSON_PrintUnformatted(arr) : NULL;
    cJSON_Delete(arr);
    if (!s) return tern_error(TERN_ERR_NOMEM, "%s: out of memory", path);
    tern_status_t st = model_dir_write_text(path, s);
    free(s);
    return st;
}

tern_status_t model_dir_convert_vocab(const char *from, const char *to) {
    vocab_t *v;
    tern_status_t st = vocab_load(&v, from);
    if (st) return st;
    st = model_dir_write_vocab(v, to);
    vocab_free(v);
    return st;
}

static tern_status_t write_config(const char *out_dir, const char *from_config, const model_config_t *cfg,
                                  const char *pad_token, int tern_format) {
    char p[4096];
    cJSON *root = NULL;
    tern_status_t st;
    if (from_config) {
        char *text;
        size_t size;
        if ((st = file_read_all(from_config, &text, &size))) return st;
        root = cJSON_ParseWithLength(text, size);
        free(text);
        if (!root || !cJSON_IsObject(root)) {
            cJSON_Delete(root);
            return tern_error(TERN_ERR_FORMAT, "%s: not a JSON object", from_config);
        }
        model_config_t c; /* validates the keys the engine reads */
        model_config_defaults(&c);
        if ((st = model_config_load(&c, from_config))) {
            cJSON_Delete(root);
            return st;
        }
    } else {
        model_config_t c;
        model_config_defaults(&c);
        if (!cfg) cfg = &c;
        root = cJSON_CreateObject();
        if (root) {
            if (cfg->architecture[0]) cJSON_AddStringToObject(root, "architecture", cfg->architecture);
            cJSON_AddStringToObject(root, "unk_token", cfg->unk_token);
            cJSON_AddStringToObject(root, "bos_token", cfg->bos_token);
            cJSON_AddStringToObject(root, "eos_token", cfg->eos_token);
            cJSON_AddStringToObject(root, "decoder_start_token", cfg->decoder_start_token);
            cJSON_AddBoolToObject(root, "add_source_bos", cfg->add_source_bos != 0);
            cJSON_AddBoolToObject(root, "add_source_eos", cfg->add_source_eos != 0);
            if (cfg->layer_norm_epsilon > 0)
                cJSON_AddNumberToObject(root, "layer_norm_epsilon", cfg->layer_norm_epsilon);
            else
                cJSON_AddNullToObject(root, "layer_norm_epsilon");
        }
    }
    if (!root) return tern_error(TERN_ERR_NOMEM, "out of memory");
    if (pad_token) {
        cJSON_DeleteItemFromObjectCaseSensitive(root, "pad_token");
        cJSON_AddStringToObject(root, "pad_token", pad_token);
    }
    cJSON_DeleteItemFromObjectCaseSensitive(root, "format");
    cJSON_DeleteItemFromObjectCaseSensitive(root, "format_version");
    if (tern_format) {
        cJSON_AddStringToObject(root, "format", "tern");
        cJSON_AddNumberToObject(root, "format_version", 1);
    } else {
        cJSON_DeleteItemFromObjectCaseSensitive(root, "architecture"); /* CTranslate2's: a Transformer */
    }
    char *s = cJSON_Print(root);
    cJSON_Delete(root);
    path_join(p, sizeof p, out_dir, "config.json");
    if (!s) return tern_error(TERN_ERR_NOMEM, "%s: out of memory", p);
    st = model_dir_write_text(p, s);
    free(s);
    return st;
}

tern_status_t model_dir_write_config(const char *out_dir, const char *from_config, const model_config_t *cfg,
                                     const char *pad_token) {
    return write_config(out_dir, from_config, cfg, pad_token, 1);
}

tern_status_t model_dir_write_ct2_config(const char *out_dir, const char *from_config, const model_config_t *cfg) {
    return write_config(out_dir, from_config, cfg, NULL, 0);
}

static int name_cmp(const void *a, const void *b) {
    return strcmp(((const tensor_t *)a)->name, ((const tensor_t *)b)->name);
}

tern_status_t model_dir_write_weights(const char *out_dir, const tensor_t *tensors, int n,
                                      const char *const *alias_names, const char *const *alias_targets,
                                      int n_aliases, const char *const *meta_keys,
                                      const char *const *meta_values, int n_meta) {
    char p[4096];
    path_join(p, sizeof p, out_dir, "model.safetensors");
    tern_status_t st = TERN_OK;
    int nm = 1 + n_meta + n_aliases, k = 0;
    tensor_t *t = malloc(sizeof *t * (size_t)(n > 0 ? n : 1));
    const char **mk = calloc((size_t)nm, sizeof *mk), **mv = calloc((size_t)nm, sizeof *mv);
    char **keys = calloc((size_t)(n_aliases > 0 ? n_aliases : 1), sizeof *keys);
    if (!t || !mk || !mv || !keys) {
        st = tern_error(TERN_ERR_NOMEM, "%s: out of memory", p);
        goto done;
    }
    if (n > 0) memcpy(t, tensors, sizeof *t * (size_t)n);
    qsort(t, (size_t)n, sizeof *t, name_cmp);
    mk[k] = "format", mv[k++] = "tern";
    for (int i = 0; i < n_meta; i++) mk[k] = meta_keys[i], mv[k++] = meta_values[i];
    for (int i = 0; i < n_aliases; i++) {
        size_t l = strlen(alias_names[i]) + 7;
        if (!(keys[i] = malloc(l))) {
            st = tern_error(TERN_ERR_NOMEM, "%s: out of memory", p);
            goto done;
        }
        snprintf(keys[i], l, "alias:%s", alias_names[i]);
        mk[k] = keys[i], mv[k++] = alias_targets[i];
    }
    st = safetensors_write(p, t, n, mk, mv, k);
done:
    for (int i = 0; keys && i < n_aliases; i++) free(keys[i]);
    free(keys);
    free(mk);
    free(mv);
    free(t);
    return st;
}

tern_status_t model_dir_copy_side_files(const char *from_dir, const char *out_dir) {
    char a[4096], b[4096];
    tern_status_t st;
    static const char *vocabs[] = {"shared_vocabulary", "source_vocabulary", "target_vocabulary"};
    int found_shared = 0;
    for (size_t i = 0; i < sizeof vocabs / sizeof vocabs[0]; i++) {
        if (i > 0 && found_shared) break;
        static const char *exts[] = {".json", ".txt"};
        for (int e = 0; e < 2; e++) {
            char name[64];
            snprintf(name, sizeof name, "%s%s", vocabs[i], exts[e]);
            path_join(a, sizeof a, from_dir, name);
            if (!file_exists(a)) continue;
            snprintf(name, sizeof name, "%s.json", vocabs[i]);
            path_join(b, sizeof b, out_dir, name);
            if ((st = model_dir_convert_vocab(a, b))) return st;
            if (i == 0) found_shared = 1;
            break;
        }
    }
    static const char *spms[] = {"source.spm", "target.spm", "sentencepiece.model", "spm.model",
                                 "source.model", "target.model", MODEL_GENERATION_FILE};
    for (size_t i = 0; i < sizeof spms / sizeof spms[0]; i++) {
        path_join(a, sizeof a, from_dir, spms[i]);
        if (!file_exists(a)) continue;
        path_join(b, sizeof b, out_dir, spms[i]);
        if ((st = model_dir_copy_file(a, b))) return st;
    }
    return TERN_OK;
}
