/*
 * ct2_format.c — reads CTranslate2's model.bin (binary versions 1..6), little-endian:
 *   u32 version; [v>=2: string spec_name, u32 revision]; u32 n_variables;
 *   n x { string name, u8 rank, u32 dims[rank],
 *         v>=4: u8 dtype, u32 n_bytes | v<4: u8 item_size, u32 n_elements; bytes data }
 *   [v>=3: u32 n_aliases; n x { string alias, string target }]
 * A string is a u16 length counting a terminating NUL, then the bytes and the NUL.
 * Every length, count, rank and size is checked against the bytes left in the file.
 * ct2_write writes the same layout (version 6), for `tern convert --to ct2`.
 */
#include "model/weights_internal.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    const uint8_t *p;
    size_t left;
} cursor_t;

static int rd_u8(cursor_t *c, uint32_t *v) {
    if (c->left < 1) return -1;
    *v = c->p[0];
    c->p += 1;
    c->left -= 1;
    return 0;
}

static int rd_u16(cursor_t *c, uint32_t *v) {
    if (c->left < 2) return -1;
    *v = (uint32_t)c->p[0] | (uint32_t)c->p[1] << 8;
    c->p += 2;
    c->left -= 2;
    return 0;
}

static int rd_u32(cursor_t *c, uint32_t *v) {
    if (c->left < 4) return -1;
    *v = (uint32_t)c->p[0] | (uint32_t)c->p[1] << 8 | (uint32_t)c->p[2] << 16 | (uint32_t)c->p[3] << 24;
    c->p += 4;
    c->left -= 4;
    return 0;
}

/* A string: on success *s points at the bytes (not NUL-terminated in general: the stored NUL is
 * checked) and *len excludes the NUL. Returns an error text or NULL. */
static const char *rd_string(cursor_t *c, const char **s, size_t *len) {
    uint32_t n;
    if (rd_u16(c, &n)) return "truncated string length";
    if (n == 0) return "string length 0 (must count the terminating NUL)";
    if (c->left < n) return "string runs past the end of the file";
    if (c->p[n - 1] != 0) return "string is not NUL-terminated";
    *s = (const char *)c->p;
    *len = n - 1;
    if (memchr(*s, 0, *len)) return "string contains a NUL byte";
    c->p += n;
    c->left -= n;
    return NULL;
}

static dtype_t dtype_from_item_size(uint32_t item) {
    return item == 4 ? DT_F32 : item == 2 ? DT_I16 : DT_I8;
}

/* The header: binary version, spec name and revision (v >= 2), number of variables. */
static tern_status_t ct2_read_header(weights_t *w, cursor_t *c, const char *path, uint32_t *version,
                                     uint32_t *count) {
    const char *err = NULL;
    uint32_t revision = 0;
#define HEADER_FAIL(...) return tern_error(TERN_ERR_FORMAT, "%s: header: " __VA_ARGS__)
    if (rd_u32(c, version)) HEADER_FAIL("%s", path, "truncated binary version");
    if (*version > 6 && *version < 256) /* a plausible later version: say so */
        return tern_error(TERN_ERR_UNSUPPORTED, "%s: header: binary version %u is newer than 6 (not supported; "
                          "convert the model with CTranslate2 <= 4.x)", path, *version);
    if (*version < 1 || *version > 6)
        return tern_error(TERN_ERR_FORMAT, "%s: header: binary version %u is invalid (not a CTranslate2 "
                          "model.bin?)", path, *version);
    w->binary_version = (int)*version;
    if (*version >= 2) {
        const char *s;
        size_t len;
        if ((err = rd_string(c, &s, &len))) HEADER_FAIL("spec name: %s", path, err);
        char *sn = malloc(len + 1);
        if (!sn) return tern_error(TERN_ERR_NOMEM, "%s: out of memory", path);
        memcpy(sn, s, len);
        sn[len] = 0;
        free(w->spec_name);
        w->spec_name = sn;
        if (rd_u32(c, &revision)) HEADER_FAIL("%s", path, "truncated spec revision");
        w->spec_revision = (int)revision;
    }
    if (rd_u32(c, count)) HEADER_FAIL("%s", path, "truncated number of variables");
    /* No check of count against the file size here: each variable takes at least 9 bytes, so a
     * count too large for the file ends at the first variable that runs past the end, and that
     * error names the variable (what a truncated file needs). Nothing is allocated by count. */
#undef HEADER_FAIL
    return TERN_OK;
}

/* Variable #k: name (into name, for later messages), shape, dtype and data, added to w. */
static tern_status_t ct2_read_tensor(weights_t *w, cursor_t *c, const char *path, uint32_t version, uint32_t k,
                                     char *name, size_t name_size) {
    const char *err, *s;
    size_t len;
    if ((err = rd_string(c, &s, &len)))
        return tern_error(TERN_ERR_FORMAT, "%s: tensor #%u (after '%s'): name: %s", path, k, name, err);
    snprintf(name, name_size, "%.*s", (int)TERN_MIN(len, name_size - 1), s);
#define TFAIL(msg) return tern_error(TERN_ERR_FORMAT, "%s: tensor '%s': %s", path, name, msg)
    uint32_t rank, dim, tag, size;
    int64_t shape[TENSOR_MAX_RANK];
    if (rd_u8(c, &rank)) TFAIL("truncated rank");
    if (rank > TENSOR_MAX_RANK) TFAIL("rank exceeds 8");
    /* numel is capped at 2^40 while it is multiplied (a file cannot hold more elements than
     * bytes, so anything above its size is an error below), which keeps numel * dtype size
     * from wrapping around: dims [2^31, 2^31] of float32 must not pass as 0 bytes. */
    uint64_t numel = 1;
    int too_large = 0;
    for (uint32_t i = 0; i < rank; i++) {
        if (rd_u32(c, &dim)) TFAIL("truncated shape");
        shape[i] = dim;
        numel *= dim;
        if (numel > (UINT64_C(1) << 40)) {
            too_large = 1;
            numel = UINT64_C(1) << 40;
        }
    }
    if (too_large && numel != 0) TFAIL("shape is too large"); /* (a zero dim makes numel 0) */
    dtype_t dt;
    uint64_t nbytes;
    if (version >= 4) {
        if (rd_u8(c, &tag)) TFAIL("truncated dtype");
        if (tag > DT_BF16) return tern_error(TERN_ERR_FORMAT, "%s: tensor '%s': unknown dtype id %u", path, name, tag);
        dt = (dtype_t)tag;
        if (rd_u32(c, &size)) TFAIL("truncated byte count");
        nbytes = size;
        if (nbytes != numel * dtype_size(dt))
            return tern_error(TERN_ERR_FORMAT, "%s: tensor '%s': %llu bytes stored but its shape "
                              "and dtype %s need %llu", path, name, (unsigned long long)nbytes,
                              dtype_name(dt), (unsigned long long)(numel * dtype_size(dt)));
    } else {
        if (rd_u8(c, &tag)) TFAIL("truncated item size");
        if (tag != 1 && tag != 2 && tag != 4)
            return tern_error(TERN_ERR_FORMAT, "%s: tensor '%s': item size %u (expected 1, 2 or 4)", path, name, tag);
        dt = dtype_from_item_size(tag);
        if (rd_u32(c, &size)) TFAIL("truncated element count");
        if (size != numel)
            return tern_error(TERN_ERR_FORMAT, "%s: tensor '%s': %u elements stored but its shape "
                              "holds %llu", path, name, size, (unsigned long long)numel);
        nbytes = numel * tag;
    }
#undef TFAIL
    if (nbytes > c->left)
        return tern_error(TERN_ERR_FORMAT, "%s: tensor '%s': data truncated (%llu bytes needed, "
                          "%zu left in the file)", path, name, (unsigned long long)nbytes, c->left);
    tern_status_t st = weights_add(w, s, len, dt, (int)rank, shape, c->p, (size_t)nbytes, 1);
    if (st) return st;
    c->p += nbytes;
    c->left -= nbytes;
    return TERN_OK;
}

/* The alias table (v >= 3); last is the last tensor's name, for the message of a truncated file. */
static tern_status_t ct2_read_aliases(weights_t *w, cursor_t *c, const char *path, const char *last) {
    const char *err;
    uint32_t n_alias;
    if (rd_u32(c, &n_alias))
        return tern_error(TERN_ERR_FORMAT, "%s: aliases: truncated number of aliases (after the "
                          "last tensor '%s')", path, last);
    for (uint32_t k = 0; k < n_alias; k++) {
        const char *a, *t;
        size_t al, tl;
        char an[1024], tn[1024];
        if ((err = rd_string(c, &a, &al)))
            return tern_error(TERN_ERR_FORMAT, "%s: alias #%u of %u: name: %s", path, k, n_alias, err);
        snprintf(an, sizeof an, "%.*s", (int)TERN_MIN(al, sizeof an - 1), a);
        if ((err = rd_string(c, &t, &tl)))
            return tern_error(TERN_ERR_FORMAT, "%s: alias '%s': target: %s", path, an, err);
        if (al >= sizeof an || tl >= sizeof tn)
            return tern_error(TERN_ERR_FORMAT, "%s: alias '%s': name too long", path, an);
        snprintf(tn, sizeof tn, "%.*s", (int)tl, t);
        tern_status_t st = weights_add_alias(w, an, tn);
        if (st) return st;
    }
    return TERN_OK;
}

tern_status_t weights_load_ct2(weights_t **out, const char *path) { return weights_load_ct2_flags(out, path, 0); }

tern_status_t weights_load_ct2_flags(weights_t **out, const char *path, unsigned flags) {
    *out = NULL;
    weights_t *w = weights_new(path);
    if (!w) return tern_error(TERN_ERR_NOMEM, "%s: out of memory", path);
    w->defer = (flags & WEIGHTS_DEFER_COPIES) != 0;
    tern_status_t st = file_map(&w->file, path);
    if (st) {
        weights_free(w);
        return st;
    }
    cursor_t c = {w->file.data, w->file.size};
    char name[1024];
    uint32_t version = 0, count = 0;
    if ((st = ct2_read_header(w, &c, path, &version, &count))) goto fail;
    snprintf(name, sizeof name, "(first)");
    for (uint32_t k = 0; k < count; k++)
        if ((st = ct2_read_tensor(w, &c, path, version, k, name, sizeof name))) goto fail;
    if (version >= 3 && (st = ct2_read_aliases(w, &c, path, name))) goto fail;
    if ((st = weights_derive_scale_aliases(w))) goto fail;
    *out = w;
    return TERN_OK;
fail:
    weights_free(w);
    return st;
}

/* ---------------------------------------------------------------- writing (version 6) */

static int wr_u8(FILE *f, uint32_t v) { return fputc((int)(v & 0xff), f) == EOF ? -1 : 0; }

static int wr_u16(FILE *f, uint32_t v) {
    uint8_t b[2] = {(uint8_t)v, (uint8_t)(v >> 8)};
    return fwrite(b, 1, 2, f) == 2 ? 0 : -1;
}

static int wr_u32(FILE *f, uint32_t v) {
    uint8_t b[4] = {(uint8_t)v, (uint8_t)(v >> 8), (uint8_t)(v >> 16), (uint8_t)(v >> 24)};
    return fwrite(b, 1, 4, f) == 4 ? 0 : -1;
}

static int wr_string(FILE *f, const char *s) {
    size_t n = strlen(s) + 1;
    if (n > 0xffff) return -1;
    return wr_u16(f, (uint32_t)n) || fwrite(s, 1, n, f) != n ? -1 : 0;
}

static int by_name(const void *a, const void *b) {
    return strcmp((*(const tensor_t *const *)a)->name, (*(const tensor_t *const *)b)->name);
}

static tern_status_t ct2_write_body(FILE *f, const char *path, const tensor_t **t, int n,
                                    const char *const *an, const char *const *at, int na, const char *spec,
                                    int revision) {
    if (wr_u32(f, 6) || wr_string(f, spec) || wr_u32(f, (uint32_t)revision) || wr_u32(f, (uint32_t)n))
        return tern_error(TERN_ERR_IO, "%s: write failed", path);
    for (int i = 0; i < n; i++) {
        const tensor_t *x = t[i];
        if (x->rank > 255 || x->nbytes > UINT32_MAX || strlen(x->name) + 1 > 0xffff)
            return tern_error(TERN_ERR_UNSUPPORTED, "%s: tensor '%s' does not fit model.bin (rank, name or %zu bytes)",
                              path, x->name, x->nbytes);
        int bad = wr_string(f, x->name) || wr_u8(f, (uint32_t)x->rank);
        for (int d = 0; d < x->rank && !bad; d++) {
            if (x->shape[d] < 0 || x->shape[d] > UINT32_MAX)
                return tern_error(TERN_ERR_UNSUPPORTED, "%s: tensor '%s': dimension %lld does not fit model.bin",
                                  path, x->name, (long long)x->shape[d]);
            bad = wr_u32(f, (uint32_t)x->shape[d]);
        }
        bad = bad || wr_u8(f, (uint32_t)x->dtype) || wr_u32(f, (uint32_t)x->nbytes) ||
              (x->nbytes && fwrite(x->data, 1, x->nbytes, f) != x->nbytes);
        if (bad) return tern_error(TERN_ERR_IO, "%s: write failed at tensor '%s'", path, x->name);
    }
    if (wr_u32(f, (uint32_t)na)) return tern_error(TERN_ERR_IO, "%s: write failed", path);
    for (int i = 0; i < na; i++)
        if (wr_string(f, an[i]) || wr_string(f, at[i])) return tern_error(TERN_ERR_IO, "%s: write failed", path);
    return TERN_OK;
}

tern_status_t ct2_write(const char *path, const tensor_t *tensors, int n, const char *const *alias_names,
                        const char *const *alias_targets, int n_aliases, const char *spec, int revision) {
    const tensor_t **t = malloc(sizeof *t * (size_t)(n > 0 ? n : 1));
    char tmp[4200];
    if (!t) return tern_error(TERN_ERR_NOMEM, "out of memory");
    for (int i = 0; i < n; i++) t[i] = &tensors[i];
    qsort(t, (size_t)n, sizeof *t, by_name);
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    FILE *f = fopen(tmp, "wb");
    if (!f) {
        free(t);
        return tern_error(TERN_ERR_IO, "%s: cannot write", tmp);
    }
    tern_status_t st = ct2_write_body(f, path, t, n, alias_names, alias_targets, n_aliases, spec, revision);
    free(t);
    if (fclose(f) && !st) st = tern_error(TERN_ERR_IO, "%s: write failed", tmp);
    if (!st && rename(tmp, path)) st = tern_error(TERN_ERR_IO, "%s: cannot rename to %s", tmp, path);
    if (st) remove(tmp);
    return st;
}
