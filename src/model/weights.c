/*
 * weights.c — the table of named tensors shared by the model.bin and safetensors loaders:
 * dtype helpers, a hash map from names (and aliases) to tensors, metadata, scalar helpers.
 */
#include "model/weights_internal.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

size_t dtype_size(dtype_t dt) {
    switch (dt) {
    case DT_F32: return 4;
    case DT_I8: return 1;
    case DT_I16: return 2;
    case DT_I32: return 4;
    case DT_F16: return 2;
    case DT_BF16: return 2;
    }
    return 0;
}

const char *dtype_name(dtype_t dt) {
    switch (dt) {
    case DT_F32: return "float32";
    case DT_I8: return "int8";
    case DT_I16: return "int16";
    case DT_I32: return "int32";
    case DT_F16: return "float16";
    case DT_BF16: return "bfloat16";
    }
    return "unknown";
}

/* ------------------------------------------------------------------ hash map of names */

static uint64_t hash_name(const char *s) {
    uint64_t h = 1469598103934665603ull; /* FNV-1a */
    for (; *s; s++) h = (h ^ (uint8_t)*s) * 1099511628211ull;
    return h;
}

static const char *slot_name(const weights_t *w, int code) {
    return code > 0 ? w->tensors[code - 1].name : w->aliases[-code - 1].name;
}

/* Slot index holding name, or the empty slot where it would go. */
static size_t slot_find(const weights_t *w, const char *name) {
    size_t mask = w->n_slots - 1, i = (size_t)hash_name(name) & mask;
    while (w->slots[i] != 0 && strcmp(slot_name(w, w->slots[i]), name) != 0) i = (i + 1) & mask;
    return i;
}

static int slots_grow(weights_t *w) {
    size_t used = (size_t)w->n + (size_t)w->n_alias + 1;
    if (w->slots && used * 2 <= w->n_slots) return 0;
    size_t ns = w->n_slots ? w->n_slots * 2 : 64;
    while (used * 2 > ns) ns *= 2;
    int *old = w->slots;
    size_t on = w->n_slots;
    w->slots = calloc(ns, sizeof *w->slots);
    if (!w->slots) {
        w->slots = old;
        return -1;
    }
    w->n_slots = ns;
    for (size_t i = 0; i < on; i++)
        if (old[i]) w->slots[slot_find(w, slot_name(w, old[i]))] = old[i];
    free(old);
    return 0;
}

static int lookup_code(const weights_t *w, const char *name) {
    if (!w || !w->slots || !name) return 0;
    return w->slots[slot_find(w, name)];
}

/* ------------------------------------------------------------------ building */

weights_t *weights_new(const char *path) {
    weights_t *w = calloc(1, sizeof *w);
    if (!w) return NULL;
    w->path = strdup(path ? path : "");
    w->spec_name = strdup("");
    if (!w->path || !w->spec_name) {
        weights_free(w);
        return NULL;
    }
    return w;
}

static int grow(void **p, int *cap, int need, size_t elem) {
    if (need <= *cap) return 0;
    int nc = *cap ? *cap * 2 : 16;
    while (nc < need) nc *= 2;
    void *q = realloc(*p, (size_t)nc * elem);
    if (!q) return -1;
    *p = q;
    *cap = nc;
    return 0;
}

/* Gives back the resident pages of [p, p + n) when they lie in the file mapping (whole pages only,
 * large ranges only). The mapping is private and read-only: a page touched again is read again
 * from the file, so this only returns memory. */
static void drop_mapped_pages(const weights_t *w, const void *p, size_t n) {
    if (!w->file.is_mmap || n < (1u << 20)) return;
    uintptr_t a = (uintptr_t)p, b = a + n, lo = (uintptr_t)w->file.data, hi = lo + w->file.size;
    if (a < lo || b > hi) return;
    long pg = sysconf(_SC_PAGESIZE);
    if (pg <= 0) return;
    uintptr_t s = (a + (uintptr_t)pg - 1) & ~((uintptr_t)pg - 1), e = b & ~((uintptr_t)pg - 1);
    if (e > s) madvise((void *)s, e - s, MADV_DONTNEED);
}

void weights_drop_pages(const weights_t *w, const void *p, size_t n) {
    if (w && p) drop_mapped_pages(w, p, n);
}

/* Copies pending tensor i into an owned aligned buffer; the file pages it was read from go. */
static tern_status_t materialize(weights_t *w, int i) {
    tensor_t *t = &w->tensors[i];
    const void *src = w->pending[i];
    if (!src) return TERN_OK;
    void *copy = aligned_alloc64(t->nbytes);
    if (!copy)
        return tern_error(TERN_ERR_NOMEM, "%s: tensor '%s': cannot allocate %zu bytes", w->path, t->name,
                          t->nbytes);
    memcpy(copy, src, t->nbytes);
    drop_mapped_pages(w, src, t->nbytes);
    w->owned[i] = copy;
    w->pending[i] = NULL;
    t->data = copy;
    return TERN_OK;
}

tern_status_t weights_need(weights_t *w, const tensor_t *t) {
    if (!w || !t || t < w->tensors || t >= w->tensors + w->n) return TERN_OK;
    return materialize(w, (int)(t - w->tensors));
}

const void *weights_bytes(const weights_t *w, const tensor_t *t) {
    if (!w || !t || t->data || t < w->tensors || t >= w->tensors + w->n) return t ? t->data : NULL;
    return w->pending[t - w->tensors];
}

tern_status_t weights_settle(weights_t *w) {
    tern_status_t st = TERN_OK;
    for (int i = 0; w && i < w->n && !st; i++) st = materialize(w, i);
    return st;
}

void weights_release_pending(weights_t *w) {
    for (int i = 0; w && i < w->n; i++)
        if (w->pending[i]) {
            drop_mapped_pages(w, w->pending[i], w->tensors[i].nbytes);
            w->pending[i] = NULL;
        }
}

void weights_release(weights_t *w, const void *data) {
    if (!w || !data) return;
    for (int i = 0; i < w->n; i++) {
        tensor_t *t = &w->tensors[i];
        if (t->data != data) continue;
        if (w->owned[i]) {
            aligned_free(w->owned[i]);
            w->owned[i] = NULL;
        } else {
            drop_mapped_pages(w, data, t->nbytes);
        }
        t->data = NULL;
    }
}

tern_status_t weights_add(weights_t *w, const char *name, size_t name_len, dtype_t dt, int rank,
                          const int64_t *shape, const void *src, size_t nbytes, int may_point) {
    char *nm = malloc(name_len + 1);
    if (!nm) return tern_error(TERN_ERR_NOMEM, "%s: out of memory", w->path);
    memcpy(nm, name, name_len);
    nm[name_len] = 0;
    if (memchr(nm, 0, name_len)) {
        tern_status_t st = tern_error(TERN_ERR_FORMAT, "%s: tensor '%s': name contains a NUL byte",
                                      w->path, nm);
        free(nm);
        return st;
    }
    if (lookup_code(w, nm)) {
        tern_status_t st = tern_error(TERN_ERR_FORMAT, "%s: tensor '%s': duplicate name", w->path, nm);
        free(nm);
        return st;
    }
    if (rank < 0 || rank > TENSOR_MAX_RANK) {
        tern_status_t st = tern_error(TERN_ERR_FORMAT, "%s: tensor '%s': rank %d exceeds %d",
                                      w->path, nm, rank, TENSOR_MAX_RANK);
        free(nm);
        return st;
    }
    int cap2 = w->cap, cap3 = w->cap;
    if (grow((void **)&w->owned, &cap2, w->n + 1, sizeof *w->owned) ||
        grow((void **)&w->pending, &cap3, w->n + 1, sizeof *w->pending) ||
        grow((void **)&w->tensors, &w->cap, w->n + 1, sizeof *w->tensors) || slots_grow(w)) {
        free(nm);
        return tern_error(TERN_ERR_NOMEM, "%s: out of memory", w->path);
    }
    tensor_t *t = &w->tensors[w->n];
    memset(t, 0, sizeof *t);
    t->name = nm;
    t->dtype = dt;
    t->rank = rank;
    /* numel: 0 when any dimension is 0 (whatever the others, which may be huge), else the
     * product, refused when it does not fit in int64 (the loaders already bound it by the file). */
    int zero = 0, bad = 0;
    for (int i = 0; i < rank; i++) {
        zero |= shape[i] == 0;
        bad |= shape[i] < 0;
    }
    t->numel = zero ? 0 : 1;
    for (int i = 0; i < rank; i++) {
        t->shape[i] = shape[i];
        if (!zero && !bad) {
            if (t->numel > INT64_MAX / shape[i]) bad = 1;
            else t->numel *= shape[i];
        }
    }
    if (bad) {
        tern_status_t st = tern_error(TERN_ERR_FORMAT, "%s: tensor '%s': shape is too large or negative",
                                      w->path, nm);
        free(nm);
        return st;
    }
    t->nbytes = nbytes;
    w->owned[w->n] = NULL;
    w->pending[w->n] = NULL;
    size_t es = dtype_size(dt);
    if (may_point && ((uintptr_t)src % (es ? es : 1)) == 0) {
        t->data = src;
    } else if (may_point && w->defer && nbytes >= WEIGHTS_DEFER_MIN_BYTES) {
        t->data = NULL; /* copied by weights_need, read in place through weights_bytes */
        w->pending[w->n] = src;
    } else {
        void *copy = aligned_alloc64(nbytes);
        if (!copy) {
            free(nm);
            return tern_error(TERN_ERR_NOMEM, "%s: tensor '%s': cannot allocate %zu bytes", w->path,
                              t->name, nbytes);
        }
        if (nbytes) memcpy(copy, src, nbytes);
        drop_mapped_pages(w, src, nbytes); /* the copy is what counts now */
        w->owned[w->n] = copy;
        t->data = copy;
    }
    w->n++;
    w->slots[slot_find(w, nm)] = w->n; /* code = index + 1 */
    return TERN_OK;
}

tern_status_t weights_add_alias(weights_t *w, const char *alias, const char *target) {
    int code = lookup_code(w, target);
    if (code == 0)
        return tern_error(TERN_ERR_FORMAT, "%s: alias '%s' -> unknown '%s'", w->path, alias, target);
    int idx = code > 0 ? code - 1 : w->aliases[-code - 1].target; /* alias of an alias */
    if (lookup_code(w, alias))
        return tern_error(TERN_ERR_FORMAT, "%s: alias '%s': name already used", w->path, alias);
    if (grow((void **)&w->aliases, &w->cap_alias, w->n_alias + 1, sizeof *w->aliases) || slots_grow(w))
        return tern_error(TERN_ERR_NOMEM, "%s: out of memory", w->path);
    char *nm = strdup(alias);
    if (!nm) return tern_error(TERN_ERR_NOMEM, "%s: out of memory", w->path);
    w->aliases[w->n_alias].name = nm;
    w->aliases[w->n_alias].target = idx;
    w->aliases[w->n_alias].derived = 0;
    w->n_alias++;
    w->slots[slot_find(w, nm)] = -w->n_alias;
    return TERN_OK;
}

tern_status_t weights_derive_scale_aliases(weights_t *w) {
    int n = w->n_alias;
    for (int i = 0; i < n; i++) {
        const char *a = w->aliases[i].name, *t = w->tensors[w->aliases[i].target].name;
        size_t la = strlen(a), lt = strlen(t);
        char *as = malloc(la + 7), *ts = malloc(lt + 7);
        if (!as || !ts) {
            free(as);
            free(ts);
            return tern_error(TERN_ERR_NOMEM, "%s: out of memory", w->path);
        }
        memcpy(as, a, la);
        memcpy(as + la, "_scale", 7);
        memcpy(ts, t, lt);
        memcpy(ts + lt, "_scale", 7);
        tern_status_t st = TERN_OK;
        if (!lookup_code(w, as) && lookup_code(w, ts)) {
            st = weights_add_alias(w, as, ts);
            if (!st) w->aliases[w->n_alias - 1].derived = 1;
        }
        free(as);
        free(ts);
        if (st) return st;
    }
    return TERN_OK;
}

int weights_alias_is_derived(const weights_t *w, int i) {
    return (w && i >= 0 && i < w->n_alias) ? w->aliases[i].derived : 0;
}

tern_status_t weights_add_meta(weights_t *w, const char *key, const char *value) {
    int c1 = w->cap_meta, c2 = w->cap_meta;
    if (grow((void **)&w->meta_keys, &c1, w->n_meta + 1, sizeof(char *)) ||
        grow((void **)&w->meta_values, &c2, w->n_meta + 1, sizeof(char *)))
        return tern_error(TERN_ERR_NOMEM, "%s: out of memory", w->path);
    w->cap_meta = TERN_MIN(c1, c2);
    char *k = strdup(key), *v = strdup(value);
    if (!k || !v) {
        free(k);
        free(v);
        return tern_error(TERN_ERR_NOMEM, "%s: out of memory", w->path);
    }
    w->meta_keys[w->n_meta] = k;
    w->meta_values[w->n_meta] = v;
    w->n_meta++;
    return TERN_OK;
}

/* A name's new form under weights_keep_layers: prefix + K + '/' ... with K at position i of keep
 * becomes prefix + i + '/' ...; with K not kept, "unused/" + name; other names unchanged (NULL,
 * *oom 0). NULL with *oom set: out of memory. */
static char *keep_layers_name(const char *name, const char *prefix, const int *keep, int n_keep, int *oom) {
    size_t lp = strlen(prefix);
    *oom = 0;
    if (strncmp(name, prefix, lp) || name[lp] < '0' || name[lp] > '9') return NULL;
    char *end;
    long k = strtol(name + lp, &end, 10);
    if (*end != '/') return NULL;
    int at = -1;
    for (int i = 0; i < n_keep; i++)
        if (keep[i] == k) at = i;
    size_t n = strlen(name) + 32;
    char *out = malloc(n);
    if (!out) {
        *oom = 1;
        return NULL;
    }
    if (at < 0) snprintf(out, n, "unused/%s", name);
    else snprintf(out, n, "%.*s%d%s", (int)lp, prefix, at, end);
    return out;
}

tern_status_t weights_keep_layers(weights_t *w, const char *prefix, const int *keep, int n_keep) {
    for (int i = 0; i < n_keep; i++) {
        char probe[256];
        int found = 0;
        snprintf(probe, sizeof probe, "%s%d/", prefix, keep[i]);
        for (int j = 0; j < w->n && !found; j++) found = !strncmp(w->tensors[j].name, probe, strlen(probe));
        if (!found)
            return tern_error(TERN_ERR_MISMATCH, "%s: no layer %s%d (keeping layers of the model)", w->path, prefix,
                              keep[i]);
        for (int j = 0; j < i; j++)
            if (keep[j] == keep[i])
                return tern_error(TERN_ERR_INVALID_ARG, "%s: layer %s%d kept twice", w->path, prefix, keep[i]);
    }
    for (int i = 0; i < w->n + w->n_alias; i++) {
        char **nm = i < w->n ? (char **)&w->tensors[i].name : &w->aliases[i - w->n].name;
        int oom;
        char *nn = keep_layers_name(*nm, prefix, keep, n_keep, &oom);
        if (oom) return tern_error(TERN_ERR_NOMEM, "%s: out of memory", w->path);
        if (nn) {
            free(*nm);
            *nm = nn;
        }
    }
    free(w->slots); /* the names changed: hash them again */
    w->slots = NULL;
    w->n_slots = 0;
    if (slots_grow(w)) return tern_error(TERN_ERR_NOMEM, "%s: out of memory", w->path);
    for (int i = 0; i < w->n; i++) w->slots[slot_find(w, w->tensors[i].name)] = i + 1;
    for (int i = 0; i < w->n_alias; i++) w->slots[slot_find(w, w->aliases[i].name)] = -(i + 1);
    return TERN_OK;
}

void weights_free(weights_t *w) {
    if (!w) return;
    for (int i = 0; i < w->n; i++) {
        free((void *)w->tensors[i].name);
        aligned_free(w->owned[i]);
    }
    for (int i = 0; i < w->n_alias; i++) free(w->aliases[i].name);
    for (int i = 0; i < w->n_meta; i++) {
        free(w->meta_keys[i]);
        free(w->meta_values[i]);
    }
    free(w->tensors);
    free(w->owned);
    free(w->pending);
    free(w->aliases);
    free(w->meta_keys);
    free(w->meta_values);
    free(w->slots);
    file_unmap(&w->file);
    free(w->path);
    free(w->spec_name);
    free(w);
}

/* ------------------------------------------------------------------ queries */

const tensor_t *weights_get(const weights_t *w, const char *name) {
    int c = lookup_code(w, name);
    if (c > 0) return &w->tensors[c - 1];
    if (c < 0) return &w->tensors[w->aliases[-c - 1].target];
    return NULL;
}

int weights_count(const weights_t *w) { return w ? w->n : 0; }

const tensor_t *weights_at(const weights_t *w, int i) {
    return (w && i >= 0 && i < w->n) ? &w->tensors[i] : NULL;
}

const char *weights_path(const weights_t *w) { return w ? w->path : ""; }
const char *weights_spec_name(const weights_t *w) { return w ? w->spec_name : ""; }
int weights_spec_revision(const weights_t *w) { return w ? w->spec_revision : 0; }
int weights_binary_version(const weights_t *w) { return w ? w->binary_version : 0; }

const char *weights_metadata(const weights_t *w, const char *key) {
    if (!w || !key) return NULL;
    for (int i = 0; i < w->n_meta; i++)
        if (!strcmp(w->meta_keys[i], key)) return w->meta_values[i];
    return NULL;
}

int weights_alias_count(const weights_t *w) { return w ? w->n_alias : 0; }

const char *weights_alias_at(const weights_t *w, int i, const char **target) {
    if (!w || i < 0 || i >= w->n_alias) return NULL;
    if (target) *target = w->tensors[w->aliases[i].target].name;
    return w->aliases[i].name;
}

/* float16 / bfloat16 -> float */
static float f16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000) << 16, exp = (h >> 10) & 0x1f, man = h & 0x3ff, bits;
    if (exp == 0) {
        if (man == 0) {
            bits = sign;
        } else { /* subnormal: normalize */
            exp = 127 - 15 + 1;
            while (!(man & 0x400)) {
                man <<= 1;
                exp--;
            }
            man &= 0x3ff;
            bits = sign | (exp << 23) | (man << 13);
        }
    } else if (exp == 31) {
        bits = sign | 0x7f800000u | (man << 13);
    } else {
        bits = sign | ((exp - 15 + 127) << 23) | (man << 13);
    }
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

static float bf16_to_float(uint16_t h) {
    uint32_t bits = (uint32_t)h << 16;
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

float tensor_get_f32(const tensor_t *t, int64_t i) {
    const uint8_t *p = t->data;
    switch (t->dtype) {
    case DT_F32: return ((const float *)p)[i];
    case DT_I8: return (float)((const int8_t *)p)[i];
    case DT_I16: return (float)((const int16_t *)p)[i];
    case DT_I32: return (float)((const int32_t *)p)[i];
    case DT_F16: return f16_to_f32(((const uint16_t *)p)[i]);
    case DT_BF16: return bf16_to_float(((const uint16_t *)p)[i]);
    }
    return 0.0f;
}

tern_status_t weights_read_f32(const weights_t *w, const tensor_t *t, float *dst) {
    if (!t->data && t->numel)
        return tern_error(TERN_ERR_FORMAT, "%s: tensor '%s' has no data", weights_path(w), t->name);
    if (t->dtype == DT_F32) {
        memcpy(dst, t->data, (size_t)t->numel * sizeof(float));
        return TERN_OK;
    }
    if (t->dtype != DT_I8) {
        for (int64_t k = 0; k < t->numel; k++) dst[k] = tensor_get_f32(t, k);
        return TERN_OK;
    }
    char sc[512];
    snprintf(sc, sizeof sc, "%s_scale", t->name);
    const tensor_t *s = weights_get(w, sc);
    int64_t rows = t->rank >= 1 ? t->shape[0] : 1, cols = rows ? t->numel / rows : 0;
    if (!s || !s->data || (s->numel != 1 && s->numel != rows))
        return tern_error(TERN_ERR_FORMAT, "%s: int8 tensor '%s' needs '%s' with 1 or %lld values%s", weights_path(w),
                          t->name, sc, (long long)rows, s ? "" : ": it is missing");
    for (int64_t k = 0; k < t->numel; k++)
        dst[k] = tensor_get_f32(t, k) / tensor_get_f32(s, s->numel == 1 ? 0 : k / cols);
    return TERN_OK;
}

int weights_get_int(const weights_t *w, const char *name, int64_t *v) {
    const tensor_t *t = weights_get(w, name);
    if (!t || t->numel != 1) return 0;
    const uint8_t *p = t->data;
    switch (t->dtype) {
    case DT_I8: *v = ((const int8_t *)p)[0]; break;
    case DT_I16: *v = ((const int16_t *)p)[0]; break;
    case DT_I32: *v = ((const int32_t *)p)[0]; break;
    default: { /* a float scalar: saturated (NaN -> INT64_MIN), never an out-of-range conversion */
        float f = tensor_get_f32(t, 0);
        *v = f != f ? INT64_MIN : f >= 9223372036854775807.0f ? INT64_MAX
           : f <= -9223372036854775808.0f ? INT64_MIN : (int64_t)f;
        break;
    }
    }
    return 1;
}

