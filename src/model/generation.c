/* generation.c — a model directory's decoding defaults (generation.h). */
#include "model/generation.h"
#include "text/vocab.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* key as an integer in [lo, hi] into *v; 0 when absent, 1 when read, -1 (error set) when wrong. */
static int get_int(const cJSON *root, const char *path, const char *key, int lo, int hi, int *v) {
    const cJSON *it = cJSON_GetObjectItemCaseSensitive(root, key);
    if (!it || cJSON_IsNull(it)) return 0;
    double d = cJSON_IsNumber(it) ? it->valuedouble : NAN;
    if (!(d >= lo && d <= hi) || d != floor(d)) {
        tern_error(TERN_ERR_FORMAT, "%s: \"%s\" must be an integer in [%d, %d]", path, key, lo, hi);
        return -1;
    }
    *v = (int)d;
    return 1;
}

static int get_float(const cJSON *root, const char *path, const char *key, double lo, double hi, float *v) {
    const cJSON *it = cJSON_GetObjectItemCaseSensitive(root, key);
    if (!it || cJSON_IsNull(it)) return 0;
    double d = cJSON_IsNumber(it) ? it->valuedouble : NAN;
    if (!(d >= lo && d <= hi)) {
        tern_error(TERN_ERR_FORMAT, "%s: \"%s\" must be a number in [%g, %g]", path, key, lo, hi);
        return -1;
    }
    *v = (float)d;
    return 1;
}

static tern_status_t read_keys(tern_search_params_t *p, const cJSON *root, const char *path) {
    int v, r;
    if ((r = get_int(root, path, "num_beams", 1, 1024, &p->beam_size)) < 0) return TERN_ERR_FORMAT;
    if ((r = get_int(root, path, "num_return_sequences", 1, 1024, &p->num_hypotheses)) < 0) return TERN_ERR_FORMAT;
    if ((r = get_float(root, path, "length_penalty", 0, 100, &p->length_penalty)) < 0) return TERN_ERR_FORMAT;
    if (r == 0) p->length_penalty = 1.0f; /* transformers' default */
    if ((r = get_int(root, path, "max_length", 2, 1 << 20, &v)) < 0) return TERN_ERR_FORMAT;
    if (r) p->max_decoding_length = v - 1;
    if ((r = get_int(root, path, "max_new_tokens", 1, 1 << 20, &p->max_decoding_length)) < 0) return TERN_ERR_FORMAT;
    if ((r = get_int(root, path, "min_length", 0, 1 << 20, &v)) < 0) return TERN_ERR_FORMAT;
    if (r) p->min_length = v > 0 ? v - 1 : 0;
    if ((r = get_float(root, path, "coverage_penalty", 0, 100, &p->coverage_penalty)) < 0) return TERN_ERR_FORMAT;
    const cJSON *ln = cJSON_GetObjectItemCaseSensitive(root, "length_norm");
    if (ln && !cJSON_IsNull(ln)) {
        const char *s = cJSON_IsString(ln) ? ln->valuestring : "";
        if (!strcmp(s, "plain")) p->length_norm = TERN_LENPEN_PLAIN;
        else if (!strcmp(s, "gnmt")) p->length_norm = TERN_LENPEN_GNMT;
        else return tern_error(TERN_ERR_FORMAT, "%s: \"length_norm\" must be \"plain\" or \"gnmt\"", path);
    }
    if (p->num_hypotheses > p->beam_size)
        return tern_error(TERN_ERR_FORMAT, "%s: \"num_return_sequences\" (%d) exceeds \"num_beams\" (%d)", path,
                          p->num_hypotheses, p->beam_size);
    if (p->min_length > p->max_decoding_length)
        return tern_error(TERN_ERR_FORMAT, "%s: \"min_length\" exceeds the maximum length", path);
    return TERN_OK;
}

/* path as a JSON object into *root (NULL when the file does not exist). */
static tern_status_t read_object(const char *path, cJSON **root) {
    *root = NULL;
    return file_exists(path) ? json_read_object(path, root) : TERN_OK;
}

/* The keys a transformers checkpoint of before GenerationConfig keeps in config.json (OPUS-MT's:
 * num_beams, max_length, bad_words_ids): read when config.json has a "model_type" and at least
 * one of them, as transformers reads them when there is no generation_config.json. */
static int legacy_hf_config(const cJSON *root) {
    static const char *const keys[] = {"num_beams", "max_length", "length_penalty", "min_length", NULL};
    if (!cJSON_GetObjectItemCaseSensitive(root, "model_type")) return 0;
    for (int i = 0; keys[i]; i++)
        if (cJSON_GetObjectItemCaseSensitive(root, keys[i])) return 1;
    return 0;
}

tern_status_t model_generation_load(tern_search_params_t *p, char *source, size_t n, const char *dir) {
    char path[2048];
    cJSON *root;
    source[0] = 0;
    path_join(path, sizeof path, dir, MODEL_GENERATION_FILE);
    tern_status_t st = read_object(path, &root);
    if (st) return st;
    if (!root) {
        path_join(path, sizeof path, dir, "config.json");
        if ((st = read_object(path, &root))) return st;
        if (root && !legacy_hf_config(root)) {
            cJSON_Delete(root);
            return TERN_OK;
        }
        if (!root) return TERN_OK;
    }
    tern_search_params_t q = *p;
    st = read_keys(&q, root, path);
    cJSON_Delete(root);
    if (st) return st;
    *p = q;
    snprintf(source, n, "%s", path);
    return TERN_OK;
}
