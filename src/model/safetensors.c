/*
 * safetensors.c — reads and writes safetensors files:
 *   u64 N (little-endian); N bytes of JSON header {"name": {"dtype": "F32", "shape": [..],
 *   "data_offsets": [begin, end]}, ..., "__metadata__": {"key": "value"}}; then the data section
 *   (offsets are relative to its start).
 * The reader checks every offset (in range, non-overlapping, size = shape x dtype) and points
 * into the mapped file when a tensor is aligned to its dtype. The writer pads the header with
 * spaces so the data section starts 64-byte aligned, and lays tensors out by decreasing dtype
 * size without holes, so every tensor is aligned to its dtype and the file stays readable by the
 * reference safetensors library. Aliases are stored as metadata "alias:<name>" = "<target>".
 */
#include "model/weights_internal.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const struct {
    const char *name;
    dtype_t dt;
} st_dtypes[] = {{"F32", DT_F32}, {"F16", DT_F16}, {"BF16", DT_BF16},
                 {"I8", DT_I8},   {"I16", DT_I16}, {"I32", DT_I32}};

static const char *st_dtype_name(dtype_t dt) {
    for (size_t i = 0; i < sizeof st_dtypes / sizeof st_dtypes[0]; i++)
        if (st_dtypes[i].dt == dt) return st_dtypes[i].name;
    return NULL;
}

/* A JSON number that is a non-negative integer below 2^53; -1 otherwise. */
static int64_t json_index(const cJSON *x) {
    if (!cJSON_IsNumber(x)) return -1;
    double d = x->valuedouble;
    if (!(d >= 0.0) || d > 9007199254740992.0 || d != floor(d)) return -1;
    return (int64_t)d;
}

typedef struct {
    int64_t begin, end;
    const char *name;
} span_t;

static int span_cmp(const void *a, const void *b) {
    const span_t *x = a, *y = b;
    return x->begin < y->begin ? -1 : x->begin > y->begin ? 1 : (x->end > y->end) - (x->end < y->end);
}

tern_status_t weights_load_safetensors(weights_t **out, const char *path) {
    return weights_load_safetensors_flags(out, path, 0);
}

/* The header: its u64 length, within the file, then its JSON, which must be an object (*root is
 * set even when it is not, for the caller to free); *data and *data_size, the data section. */
static tern_status_t read_header(const weights_t *w, const char *path, cJSON **root, const uint8_t **data,
                                 int64_t *data_size) {
    const uint8_t *d = w->file.data;
    size_t size = w->file.size;
    if (size < 8) return tern_error(TERN_ERR_FORMAT, "%s: header: file too short (%zu bytes)", path, size);
    uint64_t hlen = 0;
    for (int i = 7; i >= 0; i--) hlen = hlen << 8 | d[i];
    if (hlen > size - 8)
        return tern_error(TERN_ERR_FORMAT, "%s: header: length %llu exceeds the file (%zu bytes)", path,
                          (unsigned long long)hlen, size);
    *root = cJSON_ParseWithLength((const char *)d + 8, (size_t)hlen);
    if (!*root || !cJSON_IsObject(*root)) return tern_error(TERN_ERR_FORMAT, "%s: header: not a JSON object", path);
    *data = d + 8 + hlen;
    *data_size = (int64_t)(size - 8 - hlen);
    return TERN_OK;
}

/* One tensor's entry {"dtype", "shape", "data_offsets"}: checked (dtype known, shape within
 * bounds, offsets in the data section and matching shape x dtype), added to w, and its byte
 * range recorded in *span. */
static tern_status_t load_tensor_entry(weights_t *w, const char *path, const cJSON *it, const uint8_t *data,
                                       int64_t data_size, span_t *span) {
    const char *name = it->string ? it->string : "";
    tern_status_t st;
    if (!cJSON_IsObject(it)) return tern_error(TERN_ERR_FORMAT, "%s: tensor '%s': not a JSON object", path, name);
    const cJSON *jdt = cJSON_GetObjectItemCaseSensitive(it, "dtype");
    const cJSON *jshape = cJSON_GetObjectItemCaseSensitive(it, "shape");
    const cJSON *joff = cJSON_GetObjectItemCaseSensitive(it, "data_offsets");
    if (!cJSON_IsString(jdt)) return tern_error(TERN_ERR_FORMAT, "%s: tensor '%s': missing dtype", path, name);
    int found = -1;
    for (size_t i = 0; i < sizeof st_dtypes / sizeof st_dtypes[0]; i++)
        if (!strcmp(jdt->valuestring, st_dtypes[i].name)) found = (int)i;
    if (found < 0)
        return tern_error(TERN_ERR_UNSUPPORTED, "%s: tensor '%s': dtype '%.32s' is not supported (F32, F16, "
                          "BF16, I8, I16, I32)", path, name, jdt->valuestring);
    dtype_t dt = st_dtypes[found].dt;
    if (!cJSON_IsArray(jshape)) return tern_error(TERN_ERR_FORMAT, "%s: tensor '%s': missing shape", path, name);
    int rank = cJSON_GetArraySize(jshape);
    if (rank > TENSOR_MAX_RANK)
        return tern_error(TERN_ERR_FORMAT, "%s: tensor '%s': rank %d exceeds %d", path, name, rank, TENSOR_MAX_RANK);
    int64_t shape[TENSOR_MAX_RANK];
    uint64_t numel = 1;
    int r = 0;
    for (const cJSON *x = jshape->child; x; x = x->next, r++) {
        int64_t v = json_index(x);
        if (v < 0) return tern_error(TERN_ERR_FORMAT, "%s: tensor '%s': invalid dimension %d", path, name, r);
        if (v > 0 && numel > (UINT64_C(1) << 53) / (uint64_t)v)
            return tern_error(TERN_ERR_FORMAT, "%s: tensor '%s': shape is too large", path, name);
        shape[r] = v;
        numel *= (uint64_t)v;
    }
    if (!cJSON_IsArray(joff) || cJSON_GetArraySize(joff) != 2)
        return tern_error(TERN_ERR_FORMAT, "%s: tensor '%s': missing data_offsets [begin, end]", path, name);
    int64_t b = json_index(joff->child), e = json_index(joff->child->next);
    if (b < 0 || e < 0 || b > e || e > data_size)
        return tern_error(TERN_ERR_FORMAT, "%s: tensor '%s': data_offsets [%lld, %lld] out of the data section "
                          "(%lld bytes)", path, name, (long long)b, (long long)e, (long long)data_size);
    uint64_t need = numel * dtype_size(dt);
    if ((uint64_t)(e - b) != need)
        return tern_error(TERN_ERR_FORMAT, "%s: tensor '%s': %lld bytes stored but shape and dtype %s need %llu",
                          path, name, (long long)(e - b), st_dtype_name(dt), (unsigned long long)need);
    if ((st = weights_add(w, name, strlen(name), dt, rank, shape, data + b, (size_t)(e - b), 1))) return st;
    span->begin = b;
    span->end = e;
    span->name = w->tensors[w->n - 1].name;
    return TERN_OK;
}

/* No two non-empty tensors share a byte (spans are sorted here). */
static tern_status_t check_overlaps(const char *path, span_t *spans, int n_spans) {
    qsort(spans, (size_t)n_spans, sizeof *spans, span_cmp);
    int last = -1; /* the non-empty span reaching furthest so far */
    for (int i = 0; i < n_spans; i++) {
        if (spans[i].end == spans[i].begin) continue;
        if (last >= 0 && spans[i].begin < spans[last].end)
            return tern_error(TERN_ERR_FORMAT, "%s: tensor '%s': data overlaps tensor '%s'", path, spans[i].name,
                              spans[last].name);
        last = i;
    }
    return TERN_OK;
}

/* __metadata__'s string values into w, then its "alias:<name>" entries as aliases. */
static tern_status_t load_metadata(weights_t *w, const char *path, const cJSON *meta) {
    tern_status_t st;
    for (const cJSON *it = meta->child; it; it = it->next) {
        if (!cJSON_IsString(it))
            return tern_error(TERN_ERR_FORMAT, "%s: header: __metadata__ value of '%s' is not a string", path,
                              it->string ? it->string : "");
        if ((st = weights_add_meta(w, it->string ? it->string : "", it->valuestring))) return st;
    }
    for (int i = 0; i < w->n_meta; i++)
        if (!strncmp(w->meta_keys[i], "alias:", 6) &&
            (st = weights_add_alias(w, w->meta_keys[i] + 6, w->meta_values[i])))
            return st;
    return TERN_OK;
}

tern_status_t weights_load_safetensors_flags(weights_t **out, const char *path, unsigned flags) {
    *out = NULL;
    weights_t *w = weights_new(path);
    if (!w) return tern_error(TERN_ERR_NOMEM, "%s: out of memory", path);
    w->defer = (flags & WEIGHTS_DEFER_COPIES) != 0;
    cJSON *root = NULL;
    span_t *spans = NULL;
    const uint8_t *data = NULL;
    int64_t data_size = 0;
    tern_status_t st = file_map(&w->file, path);
    if (st || (st = read_header(w, path, &root, &data, &data_size))) goto fail;
    int n_items = cJSON_GetArraySize(root), n_spans = 0;
    spans = calloc((size_t)n_items + 1, sizeof *spans);
    if (!spans) {
        st = tern_error(TERN_ERR_NOMEM, "%s: out of memory", path);
        goto fail;
    }
    const cJSON *meta = NULL;
    for (const cJSON *it = root->child; it; it = it->next) {
        const char *name = it->string ? it->string : "";
        if (!strcmp(name, "__metadata__")) {
            if (!cJSON_IsObject(it)) {
                st = tern_error(TERN_ERR_FORMAT, "%s: header: __metadata__ is not an object", path);
                goto fail;
            }
            meta = it;
            continue;
        }
        if ((st = load_tensor_entry(w, path, it, data, data_size, &spans[n_spans]))) goto fail;
        n_spans++;
    }
    if ((st = check_overlaps(path, spans, n_spans))) goto fail;
    if (meta && (st = load_metadata(w, path, meta))) goto fail;
    if ((st = weights_derive_scale_aliases(w))) goto fail;
    cJSON_Delete(root);
    free(spans);
    *out = w;
    return TERN_OK;
fail:
    cJSON_Delete(root);
    free(spans);
    weights_free(w);
    return st;
}

/* ------------------------------------------------------------------ writer */

static int write_all(int fd, const void *p, size_t n) {
    const uint8_t *b = p;
    while (n) {
        ssize_t r = write(fd, b, n);
        if (r < 0) {
            if (errno == EINTR) continue;
            return -1;
        }
        b += r;
        n -= (size_t)r;
    }
    return 0;
}

/* The data layout: tensors by decreasing dtype size (stable) in order, contiguous, each one's
 * offset in the data section in offset. */
static tern_status_t layout_tensors(const char *path, const tensor_t *tensors, int n, int *order, int64_t *offset) {
    int k = 0;
    for (size_t es = 8; es >= 1; es /= 2)
        for (int i = 0; i < n; i++)
            if (dtype_size(tensors[i].dtype) == es) order[k++] = i;
    if (k != n) return tern_error(TERN_ERR_INVALID_ARG, "%s: a tensor has an unknown dtype", path);
    int64_t pos = 0;
    for (int j = 0; j < n; j++) {
        const tensor_t *t = &tensors[order[j]];
        offset[order[j]] = pos;
        pos += (int64_t)t->nbytes;
    }
    return TERN_OK;
}

/* The header's JSON object: __metadata__ (when there is any), then each tensor's dtype, shape and
 * data_offsets. */
static tern_status_t build_header_json(cJSON *root, const char *path, const tensor_t *tensors, int n,
                                       const int64_t *offset, const char *const *meta_keys,
                                       const char *const *meta_values, int n_meta) {
    if (n_meta > 0) {
        cJSON *m = cJSON_AddObjectToObject(root, "__metadata__");
        for (int i = 0; m && i < n_meta; i++)
            if (!cJSON_AddStringToObject(m, meta_keys[i], meta_values[i])) m = NULL;
        if (!m) return tern_error(TERN_ERR_NOMEM, "%s: out of memory", path);
    }
    for (int i = 0; i < n; i++) {
        const tensor_t *t = &tensors[i];
        if ((size_t)t->numel * dtype_size(t->dtype) != t->nbytes)
            return tern_error(TERN_ERR_INVALID_ARG, "%s: tensor '%s': nbytes %zu != numel x dtype size",
                              path, t->name, t->nbytes);
        cJSON *o = cJSON_AddObjectToObject(root, t->name);
        cJSON *shape = o ? cJSON_AddArrayToObject(o, "shape") : NULL;
        cJSON *offs = o ? cJSON_AddArrayToObject(o, "data_offsets") : NULL;
        if (!o || !shape || !offs || !cJSON_AddStringToObject(o, "dtype", st_dtype_name(t->dtype)))
            return tern_error(TERN_ERR_NOMEM, "%s: out of memory", path);
        for (int r = 0; r < t->rank; r++) cJSON_AddItemToArray(shape, cJSON_CreateNumber((double)t->shape[r]));
        cJSON_AddItemToArray(offs, cJSON_CreateNumber((double)offset[i]));
        cJSON_AddItemToArray(offs, cJSON_CreateNumber((double)(offset[i] + (int64_t)t->nbytes)));
    }
    return TERN_OK;
}

/* The header's bytes into *header (8 + *hl of them): the u64 length, the JSON, then spaces up to
 * a 64-byte aligned data section. */
static tern_status_t pad_header(const char *path, const char *json, char **header, size_t *hl) {
    size_t jl = strlen(json);
    *hl = (8 + jl + 63) / 64 * 64 - 8; /* data section starts 64-byte aligned */
    *header = malloc(8 + *hl);
    if (!*header) return tern_error(TERN_ERR_NOMEM, "%s: out of memory", path);
    for (int i = 0; i < 8; i++) (*header)[i] = (char)(((uint64_t)*hl >> (8 * i)) & 0xff);
    memcpy(*header + 8, json, jl);
    memset(*header + 8 + jl, ' ', *hl - jl);
    return TERN_OK;
}

/* The file's bytes (header, then the tensors in order) into path.tmp, synced, then renamed to
 * path; path.tmp is removed on failure. */
static tern_status_t write_via_tmp(const char *path, const char *header, size_t hl, const tensor_t *tensors,
                                   const int *order, int n) {
    tern_status_t st = TERN_OK;
    int fd = -1;
    size_t pl = strlen(path);
    char *tmp = malloc(pl + 5);
    if (!tmp) {
        st = tern_error(TERN_ERR_NOMEM, "%s: out of memory", path);
        goto done;
    }
    memcpy(tmp, path, pl);
    memcpy(tmp + pl, ".tmp", 5);
    fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0) {
        st = tern_error(TERN_ERR_IO, "%s: cannot create: %s", tmp, strerror(errno));
        goto done;
    }
    int bad = write_all(fd, header, 8 + hl);
    for (int j = 0; j < n && !bad; j++) bad = write_all(fd, tensors[order[j]].data, tensors[order[j]].nbytes);
    if (bad || fsync(fd) != 0) {
        st = tern_error(TERN_ERR_IO, "%s: write failed: %s", tmp, strerror(errno));
        goto done;
    }
    if (close(fd) != 0) {
        fd = -1;
        st = tern_error(TERN_ERR_IO, "%s: close failed: %s", tmp, strerror(errno));
        goto done;
    }
    fd = -1;
    if (rename(tmp, path) != 0) {
        st = tern_error(TERN_ERR_IO, "%s: cannot rename to %s: %s", tmp, path, strerror(errno));
        goto done;
    }
done:
    if (fd >= 0) close(fd);
    if (st && tmp) unlink(tmp);
    free(tmp);
    return st;
}

tern_status_t safetensors_write(const char *path, const tensor_t *tensors, int n,
                                const char *const *meta_keys, const char *const *meta_values, int n_meta) {
    tern_status_t st = TERN_OK;
    int *order = malloc(sizeof(int) * (size_t)(n > 0 ? n : 1));
    int64_t *offset = malloc(sizeof(int64_t) * (size_t)(n > 0 ? n : 1));
    cJSON *root = cJSON_CreateObject();
    char *json = NULL, *header = NULL;
    size_t hl = 0;
    if (!order || !offset || !root) {
        st = tern_error(TERN_ERR_NOMEM, "%s: out of memory", path);
        goto done;
    }
    if ((st = layout_tensors(path, tensors, n, order, offset)) ||
        (st = build_header_json(root, path, tensors, n, offset, meta_keys, meta_values, n_meta)))
        goto done;
    json = cJSON_PrintUnformatted(root);
    if (!json) {
        st = tern_error(TERN_ERR_NOMEM, "%s: out of memory", path);
        goto done;
    }
    if ((st = pad_header(path, json, &header, &hl))) goto done;
    st = write_via_tmp(path, header, hl, tensors, order, n);
done:
    free(header);
    free(json);
    cJSON_Delete(root);
    free(order);
    free(offset);
    return st;
}
