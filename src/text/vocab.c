/*
 * vocab.c — token vocabularies (JSON list of strings, or one token per line) with a hash map for
 * lookup (the first id wins for duplicate tokens), and the model directory's config.json.
 */
#include "text/vocab.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct vocab {
    int n;
    char **tokens;      /* n pointers into blob */
    size_t *lens;       /* byte length of each token (tokens may hold NUL bytes from JSON \u0000) */
    char *blob;         /* all tokens, NUL-terminated, back to back */
    int *slots;         /* open addressing: id + 1, 0 = empty */
    size_t n_slots;     /* power of two, > 2n */
};

static uint64_t hash_bytes(const char *s, size_t n) {
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++) h = (h ^ (uint8_t)s[i]) * 1099511628211ull;
    return h;
}

void vocab_free(vocab_t *v) {
    if (!v) return;
    free(v->tokens);
    free(v->lens);
    free(v->blob);
    free(v->slots);
    free(v);
}

/* Builds from n tokens given as (pointer, length); copies them. */
static tern_status_t build(vocab_t **out, const char *const *toks, const size_t *lens, int n, const char *what) {
    *out = NULL;
    vocab_t *v = calloc(1, sizeof *v);
    if (!v) return tern_error(TERN_ERR_NOMEM, "%s: out of memory", what);
    size_t total = 0;
    for (int i = 0; i < n; i++) total += lens[i] + 1;
    v->n = n;
    v->tokens = malloc(sizeof(char *) * (size_t)(n ? n : 1));
    v->lens = malloc(sizeof(size_t) * (size_t)(n ? n : 1));
    v->blob = malloc(total ? total : 1);
    v->n_slots = 16;
    while (v->n_slots < (size_t)n * 2 + 2) v->n_slots *= 2;
    v->slots = calloc(v->n_slots, sizeof *v->slots);
    if (!v->tokens || !v->lens || !v->blob || !v->slots) {
        vocab_free(v);
        return tern_error(TERN_ERR_NOMEM, "%s: out of memory", what);
    }
    char *p = v->blob;
    size_t mask = v->n_slots - 1;
    for (int i = 0; i < n; i++) {
        memcpy(p, toks[i], lens[i]);
        p[lens[i]] = 0;
        v->tokens[i] = p;
        v->lens[i] = lens[i];
        size_t s = (size_t)hash_bytes(p, lens[i]) & mask;
        int dup = 0;
        while (v->slots[s]) {
            int j = v->slots[s] - 1;
            if (v->lens[j] == lens[i] && !memcmp(v->tokens[j], p, lens[i])) {
                dup = 1; /* the first id wins */
                break;
            }
            s = (s + 1) & mask;
        }
        if (!dup) v->slots[s] = i + 1;
        p += lens[i] + 1;
    }
    *out = v;
    return TERN_OK;
}

tern_status_t vocab_from_tokens(vocab_t **out, const char *const *tokens, int n) {
    *out = NULL;
    if (n < 0 || (n > 0 && !tokens)) return tern_error(TERN_ERR_INVALID_ARG, "vocab_from_tokens: bad arguments");
    size_t *lens = malloc(sizeof(size_t) * (size_t)(n ? n : 1));
    if (!lens) return tern_error(TERN_ERR_NOMEM, "vocabulary: out of memory");
    for (int i = 0; i < n; i++) {
        if (!tokens[i]) {
            free(lens);
            return tern_error(TERN_ERR_INVALID_ARG, "vocab_from_tokens: token %d is NULL", i);
        }
        lens[i] = strlen(tokens[i]);
    }
    tern_status_t st = build(out, tokens, lens, n, "vocabulary");
    free(lens);
    return st;
}

static int ends_with(const char *s, const char *suffix) {
    size_t a = strlen(s), b = strlen(suffix);
    return a >= b && !strcmp(s + a - b, suffix);
}

static tern_status_t load_json(vocab_t **out, const char *path, const char *text, size_t size) {
    cJSON *root = cJSON_ParseWithLength(text, size);
    if (!root) return tern_error(TERN_ERR_FORMAT, "%s: not valid JSON", path);
    if (!cJSON_IsArray(root)) {
        cJSON_Delete(root);
        return tern_error(TERN_ERR_FORMAT, "%s: expected a JSON list of token strings", path);
    }
    int n = cJSON_GetArraySize(root), i = 0;
    const char **toks = malloc(sizeof(char *) * (size_t)(n ? n : 1));
    size_t *lens = malloc(sizeof(size_t) * (size_t)(n ? n : 1));
    tern_status_t st = TERN_OK;
    if (!toks || !lens) {
        st = tern_error(TERN_ERR_NOMEM, "%s: out of memory", path);
        goto done;
    }
    for (const cJSON *it = root->child; it; it = it->next, i++) {
        if (!cJSON_IsString(it)) {
            st = tern_error(TERN_ERR_FORMAT, "%s: entry %d is not a string", path, i);
            goto done;
        }
        toks[i] = it->valuestring;
        lens[i] = strlen(it->valuestring);
    }
    st = build(out, toks, lens, n, path);
done:
    free(toks);
    free(lens);
    cJSON_Delete(root);
    return st;
}

static tern_status_t load_txt(vocab_t **out, const char *path, const char *text, size_t size) {
    int n = 0;
    for (size_t i = 0; i < size; i++) n += text[i] == '\n';
    if (size > 0 && text[size - 1] != '\n') n++; /* last line without newline */
    const char **toks = malloc(sizeof(char *) * (size_t)(n ? n : 1));
    size_t *lens = malloc(sizeof(size_t) * (size_t)(n ? n : 1));
    if (!toks || !lens) {
        free(toks);
        free(lens);
        return tern_error(TERN_ERR_NOMEM, "%s: out of memory", path);
    }
    int k = 0;
    size_t start = 0;
    for (size_t i = 0; i <= size && k < n; i++) {
        if (i == size || text[i] == '\n') {
            size_t len = i - start;
            if (len > 0 && text[start + len - 1] == '\r') len--;
            toks[k] = text + start;
            lens[k] = len;
            k++;
            start = i + 1;
        }
    }
    tern_status_t st = build(out, toks, lens, k, path);
    free(toks);
    free(lens);
    return st;
}

tern_status_t vocab_load(vocab_t **out, const char *path) {
    *out = NULL;
    char *text;
    size_t size;
    tern_status_t st = file_read_all(path, &text, &size);
    if (st) return st;
    /* .json: a JSON list; anything else: one token per line. */
    if (ends_with(path, ".json"))
        st = load_json(out, path, text, size);
    else
        st = load_txt(out, path, text, size);
    free(text);
    return st;
}

int vocab_size(const vocab_t *v) { return v ? v->n : 0; }

const char *vocab_token(const vocab_t *v, int id) {
    return (v && id >= 0 && id < v->n) ? v->tokens[id] : NULL;
}

int vocab_lookup_n(const vocab_t *v, const char *token, size_t len) {
    if (!v || !token) return -1;
    size_t mask = v->n_slots - 1, s = (size_t)hash_bytes(token, len) & mask;
    while (v->slots[s]) {
        int j = v->slots[s] - 1;
        if (v->lens[j] == len && !memcmp(v->tokens[j], token, len)) return j;
        s = (s + 1) & mask;
    }
    return -1;
}

int vocab_lookup(const vocab_t *v, const char *token) {
    return token ? vocab_lookup_n(v, token, strlen(token)) : -1;
}

/* ------------------------------------------------------------------ config.json */

void model_config_defaults(model_config_t *c) {
    memset(c, 0, sizeof *c);
    strcpy(c->unk_token, "<unk>");
    strcpy(c->bos_token, "<s>");
    strcpy(c->eos_token, "</s>");
    strcpy(c->decoder_start_token, "<s>");
    c->add_source_bos = 0;
    c->add_source_eos = 0;
    c->layer_norm_epsilon = -1.0f;
}

static tern_status_t get_token(char *dst, size_t n, const cJSON *root, const char *key, const char *path) {
    const cJSON *x = cJSON_GetObjectItemCaseSensitive(root, key);
    if (!x || cJSON_IsNull(x)) return TERN_OK;
    if (!cJSON_IsString(x)) return tern_error(TERN_ERR_FORMAT, "%s: '%s' must be a string", path, key);
    if (strlen(x->valuestring) >= n)
        return tern_error(TERN_ERR_FORMAT, "%s: '%s' is longer than %zu bytes", path, key, n - 1);
    strcpy(dst, x->valuestring);
    return TERN_OK;
}

static tern_status_t get_bool(int *dst, const cJSON *root, const char *key, const char *path) {
    const cJSON *x = cJSON_GetObjectItemCaseSensitive(root, key);
    if (!x || cJSON_IsNull(x)) return TERN_OK;
    if (cJSON_IsBool(x)) *dst = cJSON_IsTrue(x);
    else if (cJSON_IsNumber(x)) *dst = x->valuedouble != 0;
    else return tern_error(TERN_ERR_FORMAT, "%s: '%s' must be true or false", path, key);
    return TERN_OK;
}

tern_status_t json_read_object(const char *path, cJSON **root) {
    char *text = NULL;
    size_t n = 0;
    *root = NULL;
    tern_status_t st = file_read_all(path, &text, &n);
    if (st) return st;
    *root = cJSON_ParseWithLength(text, n);
    free(text);
    if (!cJSON_IsObject(*root)) {
        cJSON_Delete(*root);
        *root = NULL;
        return tern_error(TERN_ERR_FORMAT, "%s: not a JSON object", path);
    }
    return TERN_OK;
}

tern_status_t model_config_load(model_config_t *c, const char *path) {
    char *text;
    size_t size;
    tern_status_t st = file_read_all(path, &text, &size);
    if (st) return st;
    cJSON *root = cJSON_ParseWithLength(text, size);
    free(text);
    if (!root) return tern_error(TERN_ERR_FORMAT, "%s: not valid JSON", path);
    if (!cJSON_IsObject(root)) {
        cJSON_Delete(root);
        return tern_error(TERN_ERR_FORMAT, "%s: expected a JSON object", path);
    }
    if ((st = get_token(c->unk_token, sizeof c->unk_token, root, "unk_token", path)) ||
        (st = get_token(c->bos_token, sizeof c->bos_token, root, "bos_token", path)) ||
        (st = get_token(c->eos_token, sizeof c->eos_token, root, "eos_token", path)) ||
        (st = get_token(c->decoder_start_token, sizeof c->decoder_start_token, root,
                        "decoder_start_token", path)) ||
        (st = get_bool(&c->add_source_bos, root, "add_source_bos", path)) ||
        (st = get_bool(&c->add_source_eos, root, "add_source_eos", path)) ||
        (st = get_token(c->architecture, sizeof c->architecture, root, "architecture", path)))
        goto done;
    const cJSON *eps = cJSON_GetObjectItemCaseSensitive(root, "layer_norm_epsilon");
    if (eps && !cJSON_IsNull(eps)) {
        if (!cJSON_IsNumber(eps) || !(eps->valuedouble > 0)) {
            st = tern_error(TERN_ERR_FORMAT, "%s: 'layer_norm_epsilon' must be a positive number", path);
            goto done;
        }
        c->layer_norm_epsilon = (float)eps->valuedouble;
    }
done:
    cJSON_Delete(root);
    return st;
}
