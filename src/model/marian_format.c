/*
 * marian_format.c — a Marian model (model.npz + model.yml options + vocabularies) as a Tern
 * Transformer (marian_format.h).
 *
 * Marian's transformer (src/models/transformer.h of Marian): embeddings times sqrt(dim-emb) plus
 * its sinusoids (sin in the first half of the width, cos in the second, frequency
 * exp(-i ln(10000) / (dim/2 - 1)), in float32), or with --transformer-train-position-embeddings
 * the learned table Wpos shared by both sides (embeddings unscaled; positions past its rows use
 * its last row); layers of --transformer-preprocess / --transformer-postprocess ops ('' / "dan":
 * post-norm; "n" / "da" with --transformer-postprocess-top "n": pre-norm with final norms);
 * multi-head attention with biases; the feed-forward block of two layers (relu, swish or gelu);
 * the output layer x W + b with W Wemb transposed when tied; the decoder's first input a zero
 * embedding (plus position 0); layer norm eps 1e-6.
 *
 * Files: model.npz is a zip archive (libzip) of NumPy .npy arrays ("NAME.npy": the magic
 * "\x93NUMPY", a version, a header dict {'descr': '<f4', 'fortran_order': False, 'shape': (R, C)}
 * and the data); its "special:model.yml" array (int8 bytes) and decoder.yml are YAML (libyaml).
 *
 * Legend: C width (dim-emb), F feed-forward width, V vocabulary, P position rows.
 */
#include "model/marian_format.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <minizip/unzip.h> /* minizip (its zip.h would shadow libzip's, src/serve/docfile.c) */
#include <yaml.h>

#include "kernels/kernels.h"
#include "model/transformer_desc.h"
#include "model/weights_internal.h"
#include "text/spm.h"

enum { MARIAN_POS_ROWS = 2048 }; /* the sinusoid table's rows (the longest input Tern then takes) */

/* ------------------------------------------------------------------ YAML: a mapping of scalars */

/* One key of a YAML mapping: its scalar value, or the scalars of its sequence value. */
typedef struct {
    char *key;
    char **vals;
    int n, is_seq;
} ykv_t;

typedef struct {
    ykv_t *kv;
    int n, cap;
} ymap_t;

static void ymap_free(ymap_t *m) {
    for (int i = 0; i < m->n; i++) {
        free(m->kv[i].key);
        for (int j = 0; j < m->kv[i].n; j++) free(m->kv[i].vals[j]);
        free(m->kv[i].vals);
    }
    free(m->kv);
    memset(m, 0, sizeof *m);
}

static tern_status_t ymap_push_key(ymap_t *m, const char *key) {
    if (m->n == m->cap) {
        int cap = m->cap ? 2 * m->cap : 64;
        ykv_t *kv = realloc(m->kv, (size_t)cap * sizeof *kv);
        if (!kv) return tern_error(TERN_ERR_NOMEM, "out of memory");
        m->kv = kv, m->cap = cap;
    }
    ykv_t *e = &m->kv[m->n];
    memset(e, 0, sizeof *e);
    if (!(e->key = strdup(key))) return tern_error(TERN_ERR_NOMEM, "out of memory");
    m->n++;
    return TERN_OK;
}

static tern_status_t ykv_push_val(ykv_t *e, const char *v) {
    char **vals = realloc(e->vals, (size_t)(e->n + 1) * sizeof *vals);
    if (!vals) return tern_error(TERN_ERR_NOMEM, "out of memory");
    e->vals = vals;
    if (!(e->vals[e->n] = strdup(v))) return tern_error(TERN_ERR_NOMEM, "out of memory");
    e->n++;
    return TERN_OK;
}

/* Parses YAML text whose root is a mapping; keys are scalars, values scalars or sequences of
 * scalars (anything deeper is skipped). what names the text in errors ("FILE" or "FILE: special:model.yml"). */
static tern_status_t ymap_parse(ymap_t *out, const char *text, size_t len, const char *what) {
    memset(out, 0, sizeof *out);
    yaml_parser_t p;
    if (!yaml_parser_initialize(&p)) return tern_error(TERN_ERR_NOMEM, "%s: cannot start the YAML parser", what);
    yaml_parser_set_input_string(&p, (const unsigned char *)text, len);
    tern_status_t st = TERN_OK;
    /* depth: 0 outside the root, 1 in the root mapping; state: 0 expecting a key, 1 a value, 2 in a
     * sequence value; skip: nesting depth of a value that is skipped */
    int depth = 0, state = 0, skip = 0, skip_ret = 0, done = 0, root_seen = 0;
    while (!st && !done) {
        yaml_event_t ev;
        if (!yaml_parser_parse(&p, &ev)) {
            st = tern_error(TERN_ERR_FORMAT, "%s: YAML error at line %zu, column %zu: %s", what,
                            (size_t)p.problem_mark.line + 1, (size_t)p.problem_mark.column + 1,
                            p.problem ? p.problem : "malformed");
            break;
        }
        yaml_event_type_t t = ev.type;
        if (t == YAML_STREAM_END_EVENT) done = 1;
        else if (skip > 0) {
            if (t == YAML_MAPPING_START_EVENT || t == YAML_SEQUENCE_START_EVENT) skip++;
            else if (t == YAML_MAPPING_END_EVENT || t == YAML_SEQUENCE_END_EVENT) {
                if (--skip == 0) state = skip_ret;
            }
        } else if (depth == 0) {
            if (t == YAML_MAPPING_START_EVENT) {
                if (root_seen) st = tern_error(TERN_ERR_FORMAT, "%s: more than one YAML document", what);
                depth = 1, state = 0, root_seen = 1;
            } else if (t == YAML_SCALAR_EVENT || t == YAML_SEQUENCE_START_EVENT) {
                st = tern_error(TERN_ERR_FORMAT, "%s: expected a YAML mapping (key: value lines) at line %zu", what,
                                (size_t)ev.start_mark.line + 1);
            }
        } else if (state == 0) {
            if (t == YAML_SCALAR_EVENT) {
                st = ymap_push_key(out, (const char *)ev.data.scalar.value);
                state = 1;
            } else if (t == YAML_MAPPING_END_EVENT) {
                depth = 0;
            } else {
                st = tern_error(TERN_ERR_FORMAT, "%s: line %zu: a key must be a plain value", what,
                                (size_t)ev.start_mark.line + 1);
            }
        } else if (state == 1) {
            ykv_t *e = &out->kv[out->n - 1];
            if (t == YAML_SCALAR_EVENT) {
                st = ykv_push_val(e, (const char *)ev.data.scalar.value);
                state = 0;
            } else if (t == YAML_SEQUENCE_START_EVENT) {
                e->is_seq = 1;
                state = 2;
            } else if (t == YAML_MAPPING_START_EVENT) {
                skip = 1, skip_ret = 0;
            } else if (t == YAML_ALIAS_EVENT) {
                state = 0;
            }
        } else { /* state 2: in a sequence value */
            ykv_t *e = &out->kv[out->n - 1];
            if (t == YAML_SCALAR_EVENT) st = ykv_push_val(e, (const char *)ev.data.scalar.value);
            else if (t == YAML_SEQUENCE_END_EVENT) state = 0;
            else if (t == YAML_MAPPING_START_EVENT || t == YAML_SEQUENCE_START_EVENT) skip = 1, skip_ret = 2;
        }
        yaml_event_delete(&ev);
    }
    yaml_parser_delete(&p);
    if (!st && !root_seen) st = tern_error(TERN_ERR_FORMAT, "%s: empty (expected a YAML mapping)", what);
    if (st) ymap_free(out);
    return st;
}

static tern_status_t ymap_read_file(ymap_t *out, const char *path) {
    char *text = NULL;
    size_t n = 0;
    tern_status_t st = file_read_all(path, &text, &n);
    if (st) return st;
    st = ymap_parse(out, text, n, path);
    free(text);
    return st;
}

static const ykv_t *ymap_get(const ymap_t *m, const char *key) {
    for (int i = 0; i < m->n; i++)
        if (!strcmp(m->kv[i].key, key)) return &m->kv[i];
    return NULL;
}

/* ------------------------------------------------------------------ model.npz */

typedef struct {
    char *name;       /* without ".npy" */
    dtype_t dtype;
    int rank;
    int64_t shape[TENSOR_MAX_RANK];
    int64_t numel;
    void *data;       /* malloc'd */
    size_t nbytes;
} npy_t;

typedef struct {
    char path[1100];
    npy_t *a;
    int n;
} npz_t;

static void npz_free(npz_t *z) {
    for (int i = 0; i < z->n; i++) free(z->a[i].name), free(z->a[i].data);
    free(z->a);
    z->a = NULL, z->n = 0;
}

static const npy_t *npz_get(const npz_t *z, const char *name) {
    for (int i = 0; i < z->n; i++)
        if (!strcmp(z->a[i].name, name)) return &z->a[i];
    return NULL;
}

/* The value of 'key' in a .npy header dict (a Python literal): points at its first character. */
static const char *npy_field(const char *h, const char *key) {
    char pat[32];
    snprintf(pat, sizeof pat, "'%s'", key);
    const char *s = strstr(h, pat);
    if (!s) return NULL;
    s += strlen(pat);
    while (*s == ' ') s++;
    if (*s != ':') return NULL;
    s++;
    while (*s == ' ') s++;
    return s;
}

/* Parses one .npy file's bytes (buf, n) into a (its data copied). */
static tern_status_t npy_parse(npy_t *a, const uint8_t *buf, size_t n, const char *path, const char *entry) {
    if (n < 10 || memcmp(buf, "\x93NUMPY", 6))
        return tern_error(TERN_ERR_FORMAT, "%s: array '%s': not a NumPy .npy array (no \\x93NUMPY magic)", path, entry);
    int major = buf[6];
    size_t hlen, off;
    if (major == 1) hlen = (size_t)buf[8] | (size_t)buf[9] << 8, off = 10;
    else if ((major == 2 || major == 3) && n >= 12)
        hlen = (size_t)buf[8] | (size_t)buf[9] << 8 | (size_t)buf[10] << 16 | (size_t)buf[11] << 24, off = 12;
    else return tern_error(TERN_ERR_FORMAT, "%s: array '%s': .npy version %d is not supported", path, entry, major);
    if (hlen > n - off || hlen > 65536)
        return tern_error(TERN_ERR_FORMAT, "%s: array '%s': truncated .npy header", path, entry);
    char h[65537];
    memcpy(h, buf + off, hlen);
    h[hlen] = 0;
    const char *d = npy_field(h, "descr"), *fo = npy_field(h, "fortran_order"), *sh = npy_field(h, "shape");
    if (!d || !fo || !sh || *d != '\'' || *sh != '(')
        return tern_error(TERN_ERR_FORMAT, "%s: array '%s': malformed .npy header '%s'", path, entry, h);
    static const struct {
        const char *descr;
        dtype_t dt;
    } types[] = {{"'<f4'", DT_F32}, {"'<f2'", DT_F16}, {"'|i1'", DT_I8}, {"'<i1'", DT_I8},
                 {"'|u1'", DT_I8},  {"'<i2'", DT_I16}, {"'<i4'", DT_I32}};
    int found = 0;
    for (size_t i = 0; i < sizeof types / sizeof types[0] && !found; i++)
        if (!strncmp(d, types[i].descr, strlen(types[i].descr))) a->dtype = types[i].dt, found = 1;
    if (!found) {
        char dd[16] = "";
        sscanf(d, "'%15[^']", dd);
        return tern_error(TERN_ERR_UNSUPPORTED, "%s: array '%s': dtype '%s' is not supported (float32 '<f4', "
                          "float16 '<f2', int8, int16, int32; a packed or quantized Marian model is not)", path, entry,
                          dd);
    }
    a->rank = 0;
    a->numel = 1;
    const char *s = sh + 1;
    while (*s && *s != ')') {
        while (*s == ' ' || *s == ',') s++;
        if (*s == ')') break;
        char *end;
        errno = 0;
        long long v = strtoll(s, &end, 10);
        if (end == s || v < 0 || errno || a->rank >= TENSOR_MAX_RANK || (v > 0 && a->numel > INT64_MAX / 4 / v))
            return tern_error(TERN_ERR_FORMAT, "%s: array '%s': malformed shape in .npy header '%s'", path, entry, h);
        a->shape[a->rank++] = v;
        a->numel *= v;
        s = end;
    }
    if (!strncmp(fo, "True", 4) && a->rank > 1)
        return tern_error(TERN_ERR_UNSUPPORTED, "%s: array '%s': Fortran-ordered arrays are not supported", path, entry);
    a->nbytes = (size_t)a->numel * dtype_size(a->dtype);
    if (n - off - hlen < a->nbytes)
        return tern_error(TERN_ERR_FORMAT, "%s: array '%s': truncated data (%zu bytes of %zu)", path, entry,
                          n - off - hlen, a->nbytes);
    if (!(a->data = malloc(a->nbytes ? a->nbytes : 1))) return tern_error(TERN_ERR_NOMEM, "out of memory");
    memcpy(a->data, buf + off + hlen, a->nbytes);
    return TERN_OK;
}

static tern_status_t npz_load(npz_t *z, const char *path) {
    memset(z, 0, sizeof *z);
    snprintf(z->path, sizeof z->path, "%s", path);
    if (!file_exists(path)) return tern_error(TERN_ERR_IO, "%s: not found", path);
    unzFile zip = unzOpen64(path);
    if (!zip) return tern_error(TERN_ERR_FORMAT, "%s: cannot read as a .npz (zip) archive (truncated or not a zip file)", path);
    unz_global_info64 gi;
    tern_status_t st = TERN_OK;
    if (unzGetGlobalInfo64(zip, &gi) != UNZ_OK || gi.number_entry == 0)
        st = tern_error(TERN_ERR_FORMAT, "%s: an empty or corrupt .npz archive", path);
    else if (gi.number_entry > (1u << 20)) /* a Marian model has hundreds of arrays */
        st = tern_error(TERN_ERR_FORMAT, "%s: implausible entry count %llu (corrupt archive?)", path,
                        (unsigned long long)gi.number_entry);
    if (!st && !(z->a = calloc((size_t)gi.number_entry, sizeof *z->a))) st = tern_error(TERN_ERR_NOMEM, "out of memory");
    int rc = st ? UNZ_OK : unzGoToFirstFile(zip);
    for (ZPOS64_T i = 0; !st && i < gi.number_entry; i++) {
        char name[512];
        unz_file_info64 fi;
        if (rc != UNZ_OK || unzGetCurrentFileInfo64(zip, &fi, name, sizeof name, NULL, 0, NULL, 0) != UNZ_OK) {
            st = tern_error(TERN_ERR_FORMAT, "%s: entry %llu: cannot read its header (truncated or corrupt archive?)",
                            path, (unsigned long long)i);
            break;
        }
        size_t nl = strlen(name);
        if (nl >= 4 && !strcmp(name + nl - 4, ".npy")) {
            if (fi.uncompressed_size > ((ZPOS64_T)1 << 40)) {
                st = tern_error(TERN_ERR_FORMAT, "%s: entry '%s': implausible size", path, name);
                break;
            }
            /* the buffer grows with what the entry really holds: its header's size is only a claim
             * (a few corrupt bytes there must not make the loader ask for terabytes) */
            size_t size = (size_t)fi.uncompressed_size, cap = size < ((size_t)1 << 20) ? size : (size_t)1 << 20;
            uint8_t *buf = malloc(cap + 1);
            int opened = buf && unzOpenCurrentFile(zip) == UNZ_OK;
            size_t got = 0;
            while (opened && got < size) {
                if (got == cap) {
                    size_t nc = cap > size / 2 ? size : 2 * cap;
                    uint8_t *nb = realloc(buf, nc + 1);
                    if (!nb) {
                        free(buf), buf = NULL;
                        break;
                    }
                    buf = nb, cap = nc;
                }
                unsigned chunk = cap - got > (1u << 30) ? (1u << 30) : (unsigned)(cap - got);
                int r = unzReadCurrentFile(zip, buf + got, chunk);
                if (r <= 0) break;
                got += (size_t)r;
            }
            int crc_ok = opened && unzCloseCurrentFile(zip) == UNZ_OK;
            if (!buf) st = tern_error(TERN_ERR_NOMEM, "out of memory");
            else if (!opened || got != size || !crc_ok)
                st = tern_error(TERN_ERR_FORMAT, "%s: entry '%s': cannot read it (%zu of %zu bytes%s: truncated or "
                                "corrupt archive?)", path, name, got, size, crc_ok || got != size ? "" : ", CRC error");
            npy_t *a = &z->a[z->n];
            if (!st && !(a->name = strndup(name, nl - 4))) st = tern_error(TERN_ERR_NOMEM, "out of memory");
            if (!st) st = npy_parse(a, buf, size, path, a->name);
            if (!st) z->n++;
            else free(a->name), a->name = NULL;
            free(buf);
        }
        if (!st && i + 1 < gi.number_entry) rc = unzGoToNextFile(zip);
    }
    unzClose(zip);
    if (st) npz_free(z);
    return st;
}

/* Marian's binary model (src/common/binary.cpp of Marian): u64 version 1, u64 n, n headers {u64
 * name length (with its NUL), u64 type, u64 shape length, u64 data length (padded)}, the names, the
 * shapes (int32), u64 padding length and the padding, then each item's data (its bytes, then
 * padding to the data length). Types: float32 0x0404, float16 0x0402, int8 0x0101. */
static tern_status_t bin_load(npz_t *z, const char *path) {
    memset(z, 0, sizeof *z);
    snprintf(z->path, sizeof z->path, "%s", path);
    mapped_file_t f;
    tern_status_t st = file_map(&f, path);
    if (st) return st;
    const uint8_t *p = f.data, *end = f.data + f.size;
    uint64_t ver = 0, n = 0;
#define NEED(bytes, what)                                                                                          \
    do {                                                                                                           \
        if ((uint64_t)(end - p) < (uint64_t)(bytes)) {                                                             \
            st = tern_error(TERN_ERR_FORMAT, "%s: truncated Marian binary model (%s)", path, what);                \
            goto done;                                                                                             \
        }                                                                                                          \
    } while (0)
    NEED(16, "header");
    memcpy(&ver, p, 8), memcpy(&n, p + 8, 8);
    p += 16;
    if (ver != 1) {
        st = tern_error(TERN_ERR_FORMAT, "%s: not a Marian binary model (version %llu, expected 1)", path,
                        (unsigned long long)ver);
        goto done;
    }
    if (n == 0 || n > (1u << 20)) {
        st = tern_error(TERN_ERR_FORMAT, "%s: implausible item count %llu", path, (unsigned long long)n);
        goto done;
    }
    NEED(n * 32, "item headers");
    const uint8_t *hdr = p;
    p += n * 32;
    if (!(z->a = calloc((size_t)n, sizeof *z->a))) {
        st = tern_error(TERN_ERR_NOMEM, "out of memory");
        goto done;
    }
    for (uint64_t i = 0; i < n; i++) { /* names */
        uint64_t nl;
        memcpy(&nl, hdr + i * 32, 8);
        if (nl == 0 || nl > 4096) {
            st = tern_error(TERN_ERR_FORMAT, "%s: item %llu: implausible name length", path, (unsigned long long)i);
            goto done;
        }
        NEED(nl, "names");
        if (p[nl - 1] || !(z->a[i].name = strndup((const char *)p, nl - 1))) {
            st = p[nl - 1] ? tern_error(TERN_ERR_FORMAT, "%s: item %llu: name not NUL-terminated", path,
                                        (unsigned long long)i)
                           : tern_error(TERN_ERR_NOMEM, "out of memory");
            goto done;
        }
        z->n = (int)i + 1;
        p += nl;
    }
    for (uint64_t i = 0; i < n; i++) { /* shapes */
        npy_t *a = &z->a[i];
        uint64_t sl, type;
        memcpy(&type, hdr + i * 32 + 8, 8), memcpy(&sl, hdr + i * 32 + 16, 8);
        if (sl > TENSOR_MAX_RANK) {
            st = tern_error(TERN_ERR_FORMAT, "%s: item '%s': rank %llu", path, a->name, (unsigned long long)sl);
            goto done;
        }
        NEED(sl * 4, "shapes");
        a->rank = (int)sl;
        a->numel = 1;
        for (uint64_t k = 0; k < sl; k++) {
            int32_t v;
            memcpy(&v, p + k * 4, 4);
            if (v < 0 || (v > 0 && a->numel > INT64_MAX / 8 / v)) {
                st = tern_error(TERN_ERR_FORMAT, "%s: item '%s': bad shape", path, a->name);
                goto done;
            }
            a->shape[k] = v;
            a->numel *= v;
        }
        p += sl * 4;
        if (type == 0x0404) a->dtype = DT_F32;
        else if (type == 0x0402) a->dtype = DT_F16;
        else if (type == 0x0101) a->dtype = DT_I8;
        else {
            st = tern_error(TERN_ERR_UNSUPPORTED, "%s: item '%s': Marian type 0x%llx is not supported (float32, "
                            "float16, int8; packed or intgemm-quantized models are not)", path, a->name,
                            (unsigned long long)type);
            goto done;
        }
        a->nbytes = (size_t)a->numel * dtype_size(a->dtype);
    }
    uint64_t pad;
    NEED(8, "padding");
    memcpy(&pad, p, 8);
    p += 8;
    NEED(pad, "padding");
    p += pad;
    for (uint64_t i = 0; i < n; i++) {
        npy_t *a = &z->a[i];
        uint64_t dl;
        memcpy(&dl, hdr + i * 32 + 24, 8);
        if (dl < a->nbytes) {
            st = tern_error(TERN_ERR_FORMAT, "%s: item '%s': %llu data bytes for %zu", path, a->name,
                            (unsigned long long)dl, a->nbytes);
            goto done;
        }
        NEED(dl, a->name);
        if (!(a->data = malloc(a->nbytes ? a->nbytes : 1))) {
            st = tern_error(TERN_ERR_NOMEM, "out of memory");
            goto done;
        }
        memcpy(a->data, p, a->nbytes);
        p += dl;
    }
#undef NEED
done:
    file_unmap(&f);
    if (st) npz_free(z);
    return st;
}

/* ------------------------------------------------------------------ model.yml options */

typedef struct {
    char path[1200];       /* "model.npz: special:model.yml" */
    ymap_t y;
    int C, F, H, enc_layers, dec_layers;
    int pre_norm, learned_pos, act;
    int ssru;              /* --transformer-decoder-autoreg rnn --dec-cell ssru */
} mcfg_t;

static const char *opt_str(const mcfg_t *c, const char *key, const char *def) {
    const ykv_t *e = ymap_get(&c->y, key);
    return e && !e->is_seq && e->n == 1 ? e->vals[0] : def;
}

static tern_status_t opt_int(const mcfg_t *c, const char *key, int def, int lo, int hi, int *v) {
    const char *s = opt_str(c, key, NULL);
    if (!s) {
        if (def < lo) return tern_error(TERN_ERR_FORMAT, "%s: missing option '%s'", c->path, key);
        *v = def;
        return TERN_OK;
    }
    char *end;
    long x = strtol(s, &end, 10);
    if (end == s || *end || x < lo || x > hi)
        return tern_error(TERN_ERR_FORMAT, "%s: option '%s': '%s' is not an integer in [%d, %d]", c->path, key, s, lo, hi);
    *v = (int)x;
    return TERN_OK;
}

static int opt_bool(const mcfg_t *c, const char *key) {
    const char *s = opt_str(c, key, "false");
    return !strcmp(s, "true") || !strcmp(s, "True") || !strcmp(s, "1");
}

/* Marian's options that change the network: what Tern computes, or an error naming the option. */
static tern_status_t read_options(mcfg_t *c) {
    tern_status_t st;
    const char *type = opt_str(c, "type", "");
    if (strcmp(type, "transformer"))
        return tern_error(TERN_ERR_UNSUPPORTED, "%s: option 'type': '%s' is not supported (Tern reads Marian's "
                          "'transformer' models)", c->path, type);
    const char *autoreg = opt_str(c, "transformer-decoder-autoreg", "self-attention");
    const char *cell = opt_str(c, "dec-cell", "?");
    c->ssru = !strcmp(autoreg, "rnn") && !strcmp(cell, "ssru");
    if (strcmp(autoreg, "self-attention") && !c->ssru)
        return tern_error(TERN_ERR_UNSUPPORTED, "%s: option 'transformer-decoder-autoreg': '%s' with --dec-cell %s is "
                          "not supported (self-attention, or rnn with the ssru cell)", c->path, autoreg, cell);
    if (c->ssru && opt_bool(c, "layer-normalization"))
        return tern_error(TERN_ERR_UNSUPPORTED, "%s: option 'layer-normalization' is true: the SSRU cell's own layer "
                          "norms are not supported", c->path);
    static const char *const off[] = {"transformer-no-projection", "transformer-no-bias", "transformer-no-affine",
                                      "right-left", "transformer-alibi-shift", "transformer-pool", "ulr"};
    for (size_t i = 0; i < sizeof off / sizeof off[0]; i++)
        if (opt_bool(c, off[i]))
            return tern_error(TERN_ERR_UNSUPPORTED, "%s: option '%s' is true: not supported", c->path, off[i]);
    const ykv_t *tied = ymap_get(&c->y, "transformer-tied-layers");
    if (tied && tied->n > 0)
        return tern_error(TERN_ERR_UNSUPPORTED, "%s: option 'transformer-tied-layers' is not supported", c->path);
    const ykv_t *it = ymap_get(&c->y, "input-types");
    if (it && it->n > 0)
        return tern_error(TERN_ERR_UNSUPPORTED, "%s: option 'input-types' (factored inputs) is not supported", c->path);
    const char *pre = opt_str(c, "transformer-preprocess", ""), *post = opt_str(c, "transformer-postprocess", "dan");
    const char *top = opt_str(c, "transformer-postprocess-top", ""), *emb = opt_str(c, "transformer-postprocess-emb", "d");
    if (!strcmp(pre, "") && !strcmp(post, "dan") && !strcmp(top, "")) c->pre_norm = 0;
    else if (!strcmp(pre, "n") && !strcmp(post, "da") && !strcmp(top, "n")) c->pre_norm = 1;
    else
        return tern_error(TERN_ERR_UNSUPPORTED, "%s: options 'transformer-preprocess' '%s', 'transformer-postprocess' "
                          "'%s', 'transformer-postprocess-top' '%s' are not supported (post-norm: '', 'dan', ''; "
                          "pre-norm: 'n', 'da', 'n'; 'd' ops, dropout, may be left out)", c->path, pre, post, top);
    if (strcmp(emb, "") && strcmp(emb, "d"))
        return tern_error(TERN_ERR_UNSUPPORTED, "%s: option 'transformer-postprocess-emb': '%s' is not supported ('d' "
                          "or ''; no embedding layer norm)", c->path, emb);
    const char *act = opt_str(c, "transformer-ffn-activation", "swish");
    if (!strcmp(act, "swish")) c->act = ACT_SWISH;
    else if (!strcmp(act, "relu")) c->act = ACT_RELU;
    else if (!strcmp(act, "gelu")) c->act = ACT_GELU; /* Marian 1.12's: 0.5 x (1 + erf(x / sqrt(2))) (before: x sigmoid(1.702 x)) */
    else
        return tern_error(TERN_ERR_UNSUPPORTED, "%s: option 'transformer-ffn-activation': '%s' is not supported (relu, "
                          "swish, gelu)", c->path, act);
    int fd, dfd, dff;
    if ((st = opt_int(c, "dim-emb", -1, 1, 1 << 16, &c->C)) || (st = opt_int(c, "enc-depth", -1, 1, 1024, &c->enc_layers)) ||
        (st = opt_int(c, "dec-depth", -1, 1, 1024, &c->dec_layers)) ||
        (st = opt_int(c, "transformer-heads", 8, 1, 1 << 15, &c->H)) ||
        (st = opt_int(c, "transformer-dim-ffn", 2048, 1, 1 << 24, &c->F)) ||
        (st = opt_int(c, "transformer-decoder-dim-ffn", 0, 0, 1 << 24, &dff)) ||
        (st = opt_int(c, "transformer-ffn-depth", 2, 0, 64, &fd)) ||
        (st = opt_int(c, "transformer-decoder-ffn-depth", 0, 0, 64, &dfd)))
        return st;
    if (fd == 0) fd = 2;
    if (dfd == 0) dfd = fd;
    if (fd != 2 || dfd != 2)
        return tern_error(TERN_ERR_UNSUPPORTED, "%s: options 'transformer-ffn-depth' %d and "
                          "'transformer-decoder-ffn-depth' %d: only feed-forward blocks of 2 layers are supported",
                          c->path, fd, dfd);
    if (dff && dff != c->F)
        return tern_error(TERN_ERR_UNSUPPORTED, "%s: options 'transformer-dim-ffn' %d and 'transformer-decoder-dim-ffn' "
                          "%d differ: not supported", c->path, c->F, dff);
    if (c->C % c->H)
        return tern_error(TERN_ERR_FORMAT, "%s: option 'transformer-heads' %d does not divide 'dim-emb' %d", c->path,
                          c->H, c->C);
    /* --transformer-train-positions: the learned table Wpos (the option
     * transformer-train-position-embeddings that model.yml also lists is not read by Marian's
     * transformer: it keeps the sinusoids) */
    c->learned_pos = opt_bool(c, "transformer-train-positions");
    if (opt_bool(c, "transformer-disable-position-embeddings"))
        return tern_error(TERN_ERR_UNSUPPORTED, "%s: option 'transformer-disable-position-embeddings' is not supported",
                          c->path);
    return TERN_OK;
}

/* ------------------------------------------------------------------ tensors */

typedef struct {
    const npz_t *z;
    weights_t *nw;
    const mcfg_t *c;
} builder_t;

static tern_status_t missing(const builder_t *b, const char *name) {
    return tern_error(TERN_ERR_FORMAT, "%s: missing array '%s' (%s)", b->z->path, name, b->c->path);
}

/* Marian's array name, with its shape checked: (rows, cols), or a bias/norm (1, rows) or (rows). */
static tern_status_t get(const builder_t *b, const char *name, int64_t rows, int64_t cols, const npy_t **out) {
    const npy_t *a = npz_get(b->z, name);
    if (!a) return missing(b, name);
    int ok;
    if (cols) ok = a->rank == 2 && a->shape[0] == rows && a->shape[1] == cols;
    else ok = (a->rank == 2 && a->shape[0] == 1 && a->shape[1] == rows) || (a->rank == 1 && a->shape[0] == rows);
    if (a->dtype != DT_F32 && a->dtype != DT_F16)
        return tern_error(TERN_ERR_FORMAT, "%s: array '%s': expected float32, got %s", b->z->path, name,
                          dtype_name(a->dtype));
    if (!ok) {
        char got[96] = "";
        for (int i = 0; i < a->rank && i < 4; i++)
            snprintf(got + strlen(got), sizeof got - strlen(got), "%s%lld", i ? ", " : "", (long long)a->shape[i]);
        if (cols)
            return tern_error(TERN_ERR_MISMATCH, "%s: array '%s': expected shape [%lld, %lld] (%s), got [%s]",
                              b->z->path, name, (long long)rows, (long long)cols, b->c->path, got);
        return tern_error(TERN_ERR_MISMATCH, "%s: array '%s': expected shape [1, %lld] (%s), got [%s]", b->z->path,
                          name, (long long)rows, b->c->path, got);
    }
    *out = a;
    return TERN_OK;
}

static float elem(const npy_t *a, int64_t i) {
    if (a->dtype == DT_F32) return ((const float *)a->data)[i];
    tensor_t t = {0};
    t.dtype = a->dtype;
    t.data = a->data;
    return tensor_get_f32(&t, i);
}

/* Adds the matrices parts[0..n) (each Marian (in K, out N)) transposed and stacked as one (sum N, K)
 * float32 weight under name; with biases (each (1, N)) stacked under bname. */
static tern_status_t add_linear(builder_t *b, const char *name, const char *bname, const char *const *w,
                                const char *const *bias, int n, int64_t K, int64_t N) {
    const npy_t *a[3], *ba[3];
    tern_status_t st;
    for (int i = 0; i < n; i++)
        if ((st = get(b, w[i], K, N, &a[i])) || (st = get(b, bias[i], N, 0, &ba[i]))) return st;
    int64_t rows = N * n;
    float *buf = malloc((size_t)(rows * K + rows) * sizeof(float));
    if (!buf) return tern_error(TERN_ERR_NOMEM, "out of memory");
    float *bb = buf + rows * K;
    for (int i = 0; i < n; i++)
        for (int64_t r = 0; r < N; r++) {
            for (int64_t k = 0; k < K; k++) buf[(i * N + r) * K + k] = elem(a[i], k * N + r);
            bb[i * N + r] = elem(ba[i], r);
        }
    int64_t shape[2] = {rows, K};
    st = weights_add(b->nw, name, strlen(name), DT_F32, 2, shape, buf, (size_t)(rows * K) * 4, 0);
    if (!st) st = weights_add(b->nw, bname, strlen(bname), DT_F32, 1, shape, bb, (size_t)rows * 4, 0);
    free(buf);
    return st;
}

/* A float array added as float32 under name with the given shape (a norm's (1, C) as (C)). */
static tern_status_t add_f32(builder_t *b, const char *name, const npy_t *a, int rank, const int64_t *shape) {
    float *buf = malloc((size_t)a->numel * sizeof(float) + 1);
    if (!buf) return tern_error(TERN_ERR_NOMEM, "out of memory");
    for (int64_t i = 0; i < a->numel; i++) buf[i] = elem(a, i);
    tern_status_t st = weights_add(b->nw, name, strlen(name), DT_F32, rank, shape, buf, (size_t)a->numel * 4, 0);
    free(buf);
    return st;
}

/* Layer norm prefix + "_ln_scale" / "_ln_bias" (+ "_pre" when pre-norm) as module mod's gamma, beta. */
static tern_status_t add_norm(builder_t *b, const char *prefix, const char *suffix, tmodule_t mod, int layer) {
    int64_t C = b->c->C;
    for (int p = 0; p < 2; p++) {
        char mn[256], tn[128];
        const npy_t *a;
        snprintf(mn, sizeof mn, "%s_ln_%s%s", prefix, p ? "bias" : "scale", suffix);
        tern_status_t st = get(b, mn, C, 0, &a);
        if (st) return st;
        transformer_tensor_name(tn, sizeof tn, mod, layer, p ? TP_BETA : TP_GAMMA);
        if ((st = add_f32(b, tn, a, 1, &C))) return st;
    }
    return TERN_OK;
}

/* An attention block prefix ("encoder_l1_self", "decoder_l2_context") of layer l (0-based). */
static tern_status_t add_attention(builder_t *b, const char *prefix, int l, tmodule_t ln, tmodule_t q, tmodule_t kv,
                                   tmodule_t qkv, tmodule_t out) {
    char w[3][128], bi[3][128], tn[128], tb[128], lp[160];
    static const char *const parts = "qkvo";
    const char *wp[3], *bp[3];
    for (int i = 0; i < 4; i++) {
        if (i < 3) {
            snprintf(w[i], sizeof w[i], "%s_W%c", prefix, parts[i]);
            snprintf(bi[i], sizeof bi[i], "%s_b%c", prefix, parts[i]);
            wp[i] = w[i], bp[i] = bi[i];
        }
    }
    int64_t C = b->c->C;
    tern_status_t st;
    if (qkv != TM_COUNT) {
        transformer_tensor_name(tn, sizeof tn, qkv, l, TP_WEIGHT);
        transformer_tensor_name(tb, sizeof tb, qkv, l, TP_BIAS);
        if ((st = add_linear(b, tn, tb, wp, bp, 3, C, C))) return st;
    } else {
        transformer_tensor_name(tn, sizeof tn, q, l, TP_WEIGHT);
        transformer_tensor_name(tb, sizeof tb, q, l, TP_BIAS);
        if ((st = add_linear(b, tn, tb, wp, bp, 1, C, C))) return st;
        transformer_tensor_name(tn, sizeof tn, kv, l, TP_WEIGHT);
        transformer_tensor_name(tb, sizeof tb, kv, l, TP_BIAS);
        if ((st = add_linear(b, tn, tb, wp + 1, bp + 1, 2, C, C))) return st;
    }
    char wo[128], bo[128];
    snprintf(wo, sizeof wo, "%s_Wo", prefix);
    snprintf(bo, sizeof bo, "%s_bo", prefix);
    const char *wop = wo, *bop = bo;
    transformer_tensor_name(tn, sizeof tn, out, l, TP_WEIGHT);
    transformer_tensor_name(tb, sizeof tb, out, l, TP_BIAS);
    if ((st = add_linear(b, tn, tb, &wop, &bop, 1, C, C))) return st;
    snprintf(lp, sizeof lp, "%s_Wo", prefix);
    return add_norm(b, lp, b->c->pre_norm ? "_pre" : "", ln, l);
}

static tern_status_t add_ffn(builder_t *b, const char *prefix, int l, tmodule_t ln, tmodule_t f1, tmodule_t f2) {
    char w1[128], b1[128], w2[128], b2[128], tn[128], tb[128], lp[160];
    snprintf(w1, sizeof w1, "%s_W1", prefix), snprintf(b1, sizeof b1, "%s_b1", prefix);
    snprintf(w2, sizeof w2, "%s_W2", prefix), snprintf(b2, sizeof b2, "%s_b2", prefix);
    const char *pw1 = w1, *pb1 = b1, *pw2 = w2, *pb2 = b2;
    int64_t C = b->c->C, F = b->c->F;
    tern_status_t st;
    transformer_tensor_name(tn, sizeof tn, f1, l, TP_WEIGHT);
    transformer_tensor_name(tb, sizeof tb, f1, l, TP_BIAS);
    if ((st = add_linear(b, tn, tb, &pw1, &pb1, 1, C, F))) return st;
    transformer_tensor_name(tn, sizeof tn, f2, l, TP_WEIGHT);
    transformer_tensor_name(tb, sizeof tb, f2, l, TP_BIAS);
    if ((st = add_linear(b, tn, tb, &pw2, &pb2, 1, F, C))) return st;
    snprintf(lp, sizeof lp, "%s_ffn", prefix);
    return add_norm(b, lp, b->c->pre_norm ? "_pre" : "", ln, l);
}

/* The SSRU in place of a decoder layer's self-attention (prefix "decoder_l1_rnn": Marian's
 * DecoderLayerRNN, src/rnn/cells.h SSRU): its W and Wf (each (C, C), Marian's (in, out)) transposed
 * and stacked as one (2C, C) linear whose bias is 0 for W's half and bf for Wf's; its norm the
 * sub-layer's: prefix "_ffn_ln_*" after the residual (post-norm: Marian post-processes prefix +
 * "_ffn"), prefix "_ln_*_pre" before the cell (pre-norm). */
static tern_status_t add_ssru(builder_t *b, const char *prefix, int l) {
    char w[128], wf[128], bf[128], tn[128], tb[128], lp[160];
    snprintf(w, sizeof w, "%s_W", prefix), snprintf(wf, sizeof wf, "%s_Wf", prefix), snprintf(bf, sizeof bf, "%s_bf", prefix);
    int64_t C = b->c->C;
    const npy_t *a[2], *bias;
    tern_status_t st;
    if ((st = get(b, w, C, C, &a[0])) || (st = get(b, wf, C, C, &a[1])) || (st = get(b, bf, C, 0, &bias))) return st;
    float *buf = malloc((size_t)(2 * C * C + 2 * C) * sizeof(float));
    if (!buf) return tern_error(TERN_ERR_NOMEM, "out of memory");
    float *bb = buf + 2 * C * C;
    for (int i = 0; i < 2; i++)
        for (int64_t r = 0; r < C; r++) {
            for (int64_t k = 0; k < C; k++) buf[(i * C + r) * C + k] = elem(a[i], k * C + r);
            bb[i * C + r] = i ? elem(bias, r) : 0.0f;
        }
    int64_t shape[2] = {2 * C, C};
    transformer_tensor_name(tn, sizeof tn, TM_DEC_SSRU, l, TP_WEIGHT);
    transformer_tensor_name(tb, sizeof tb, TM_DEC_SSRU, l, TP_BIAS);
    st = weights_add(b->nw, tn, strlen(tn), DT_F32, 2, shape, buf, (size_t)(2 * C * C) * 4, 0);
    if (!st) st = weights_add(b->nw, tb, strlen(tb), DT_F32, 1, shape, bb, (size_t)(2 * C) * 4, 0);
    free(buf);
    if (st) return st;
    snprintf(lp, sizeof lp, b->c->pre_norm ? "%s" : "%s_ffn", prefix);
    return add_norm(b, lp, b->c->pre_norm ? "_pre" : "", TM_DEC_SELF_LN, l);
}

/* Marian's sinusoids (inits::sinusoidalPositionEmbeddings), float32 as Marian computes them. */
static void marian_sinusoids(float *out, int P, int C) {
    float nt = (float)C / 2;
    float inc = logf(10000.f) / (nt - 1.f);
    memset(out, 0, (size_t)P * (size_t)C * sizeof(float));
    for (int p = 0; p < P; p++)
        for (int i = 0; i < nt; i++) {
            float v = (float)p * expf((float)i * -inc);
            out[(size_t)p * C + i] = sinf(v);
            out[(size_t)p * C + (int)nt + i] = cosf(v);
        }
}

/* The position tables: Marian's sinusoids, or Wpos (its rows, then its last row repeated). The
 * decoder's with the learned table: as Marian's step-by-step decoding looks it up (it indexes the
 * table by the position within the step's input, which is one token long: row 0 at every step). */
static tern_status_t add_positions(builder_t *b) {
    int64_t P = MARIAN_POS_ROWS, C = b->c->C, shape[2] = {P, C};
    float *enc = malloc((size_t)(P * C) * 2 * sizeof(float));
    if (!enc) return tern_error(TERN_ERR_NOMEM, "out of memory");
    float *dec = enc + P * C;
    tern_status_t st = TERN_OK;
    if (!b->c->learned_pos) {
        marian_sinusoids(enc, (int)P, (int)C);
        memcpy(dec, enc, (size_t)(P * C) * sizeof(float));
    } else {
        const npy_t *a = npz_get(b->z, "Wpos");
        if (!a) st = missing(b, "Wpos");
        else if (a->rank != 2 || a->shape[1] != C || a->shape[0] < 1)
            st = tern_error(TERN_ERR_MISMATCH, "%s: array 'Wpos': expected shape [positions, %lld] (%s)", b->z->path,
                            (long long)C, b->c->path);
        for (int64_t p = 0; p < P && !st; p++) {
            int64_t r = p < a->shape[0] ? p : a->shape[0] - 1;
            for (int64_t j = 0; j < C; j++) enc[p * C + j] = elem(a, r * C + j), dec[p * C + j] = elem(a, j);
        }
    }
    char en[128], dn[128];
    transformer_tensor_name(en, sizeof en, TM_ENC_POS, -1, TP_ENCODINGS);
    transformer_tensor_name(dn, sizeof dn, TM_DEC_POS, -1, TP_ENCODINGS);
    if (!st) st = weights_add(b->nw, en, strlen(en), DT_F32, 2, shape, enc, (size_t)(P * C) * 4, 0);
    if (!st) st = weights_add(b->nw, dn, strlen(dn), DT_F32, 2, shape, dec, (size_t)(P * C) * 4, 0);
    free(enc);
    return st;
}

/* Embeddings (Wemb shared, or encoder_Wemb and decoder_Wemb), the output layer
 * (decoder_ff_logit_out_W transposed, or tied to the decoder's embedding) and its bias. */
static tern_status_t add_embeddings(builder_t *b, const npy_t **emb) {
    char ee[128], de[128], pw[128], pb[128];
    transformer_tensor_name(ee, sizeof ee, TM_ENC_EMB, -1, TP_WEIGHT);
    transformer_tensor_name(de, sizeof de, TM_DEC_EMB, -1, TP_WEIGHT);
    transformer_tensor_name(pw, sizeof pw, TM_PROJ, -1, TP_WEIGHT);
    transformer_tensor_name(pb, sizeof pb, TM_PROJ, -1, TP_BIAS);
    const npy_t *e = npz_get(b->z, "encoder_Wemb"), *d = npz_get(b->z, "decoder_Wemb"), *shared = npz_get(b->z, "Wemb");
    if (!e) e = shared;
    if (!d) d = shared;
    if (!e) return missing(b, npz_get(b->z, "decoder_Wemb") ? "encoder_Wemb" : "Wemb");
    if (!d) return missing(b, "decoder_Wemb");
    int64_t C = b->c->C;
    tern_status_t st;
    for (int k = 0; k < 2; k++) {
        const npy_t *a = k ? d : e;
        if (a->rank != 2 || a->shape[1] != C || a->shape[0] < 1)
            return tern_error(TERN_ERR_MISMATCH, "%s: array '%s': expected shape [vocabulary, %lld] (%s: dim-emb)",
                              b->z->path, a->name, (long long)C, b->c->path);
    }
    if ((st = add_f32(b, ee, e, 2, e->shape))) return st;
    st = d == e ? weights_add_alias(b->nw, de, ee) : add_f32(b, de, d, 2, d->shape);
    if (st) return st;
    emb[0] = e, emb[1] = d;
    int64_t V = d->shape[0];
    const npy_t *w = npz_get(b->z, "decoder_ff_logit_out_W"), *wt = npz_get(b->z, "decoder_ff_logit_out_Wt");
    if (w) {
        const npy_t *chk;
        if ((st = get(b, "decoder_ff_logit_out_W", C, V, &chk))) return st;
        float *buf = malloc((size_t)(V * C) * sizeof(float));
        if (!buf) return tern_error(TERN_ERR_NOMEM, "out of memory");
        for (int64_t r = 0; r < V; r++)
            for (int64_t k = 0; k < C; k++) buf[r * C + k] = elem(w, k * V + r);
        int64_t shape[2] = {V, C};
        st = weights_add(b->nw, pw, strlen(pw), DT_F32, 2, shape, buf, (size_t)(V * C) * 4, 0);
        free(buf);
    } else if (wt) {
        const npy_t *chk;
        if ((st = get(b, "decoder_ff_logit_out_Wt", V, C, &chk))) return st;
        st = add_f32(b, pw, wt, 2, wt->shape);
    } else if (opt_bool(b->c, "tied-embeddings") || opt_bool(b->c, "tied-embeddings-all")) {
        st = weights_add_alias(b->nw, pw, de);
    } else {
        return missing(b, "decoder_ff_logit_out_W");
    }
    if (st) return st;
    const npy_t *bias = npz_get(b->z, "decoder_ff_logit_out_b");
    if (!bias) {
        if (opt_bool(b->c, "output-omit-bias")) return TERN_OK;
        return missing(b, "decoder_ff_logit_out_b");
    }
    if ((st = get(b, "decoder_ff_logit_out_b", V, 0, &bias))) return st;
    return add_f32(b, pb, bias, 1, &V);
}

static tern_status_t add_scalar(builder_t *b, const tensor_t *t) {
    return weights_add(b->nw, t->name, strlen(t->name), t->dtype, 0, t->shape, t->data, t->nbytes, 0);
}

/* The description's config keys, and the decoder's zero start. */
static tern_status_t add_keys(builder_t *b) {
    transformer_spec_t spec = {b->c->H, b->c->pre_norm, b->c->act, !b->c->learned_pos};
    transformer_scalars_t s;
    int n = transformer_desc_scalars(&s, &spec);
    tern_status_t st;
    for (int i = 0; i < n; i++)
        if ((st = add_scalar(b, &s.t[i]))) return st;
    int8_t one = 1;
    tensor_t z = {0};
    z.name = transformer_key_name(TKEY_DEC_ZERO_START);
    z.dtype = DT_I8;
    z.numel = 1;
    z.data = &one;
    z.nbytes = 1;
    tern_status_t s2 = add_scalar(b, &z);
    z.name = transformer_key_name(TKEY_DEC_NEVER_UNK); /* kept by tern convert: model.c reads it */
    if (!s2) s2 = add_scalar(b, &z);
    if (!s2 && b->c->ssru) { /* the decoder's self-attention is an SSRU (add_ssru) */
        z.name = transformer_key_name(TKEY_DEC_SSRU);
        return add_scalar(b, &z);
    }
    if (s2 || !b->c->pre_norm) return s2;
    /* Marian 1.12 decodes a pre-norm model step by step with the self-attention's keys and values
     * of steps >= 1 projected from the un-normed layer inputs (its decoder state keeps them) */
    z.name = transformer_key_name(TKEY_DEC_RAW_SELF_KV);
    return add_scalar(b, &z);
}

static tern_status_t build_weights(builder_t *b, const npy_t **emb) {
    tern_status_t st;
    if ((st = add_embeddings(b, emb)) || (st = add_keys(b)) || (st = add_positions(b))) return st;
    char p[96];
    for (int l = 0; l < b->c->enc_layers; l++) {
        snprintf(p, sizeof p, "encoder_l%d_self", l + 1);
        if ((st = add_attention(b, p, l, TM_ENC_SELF_LN, TM_COUNT, TM_COUNT, TM_ENC_SELF_QKV, TM_ENC_SELF_OUT))) return st;
        snprintf(p, sizeof p, "encoder_l%d_ffn", l + 1);
        if ((st = add_ffn(b, p, l, TM_ENC_FFN_LN, TM_ENC_FFN1, TM_ENC_FFN2))) return st;
    }
    for (int l = 0; l < b->c->dec_layers; l++) {
        snprintf(p, sizeof p, b->c->ssru ? "decoder_l%d_rnn" : "decoder_l%d_self", l + 1);
        if ((st = b->c->ssru ? add_ssru(b, p, l)
                             : add_attention(b, p, l, TM_DEC_SELF_LN, TM_COUNT, TM_COUNT, TM_DEC_SELF_QKV, TM_DEC_SELF_OUT)))
            return st;
        snprintf(p, sizeof p, "decoder_l%d_context", l + 1);
        if ((st = add_attention(b, p, l, TM_DEC_CROSS_LN, TM_DEC_CROSS_Q, TM_DEC_CROSS_KV, TM_COUNT, TM_DEC_CROSS_OUT)))
            return st;
        snprintf(p, sizeof p, "decoder_l%d_ffn", l + 1);
        if ((st = add_ffn(b, p, l, TM_DEC_FFN_LN, TM_DEC_FFN1, TM_DEC_FFN2))) return st;
    }
    /* a layer beyond enc-depth / dec-depth: the options do not describe these arrays */
    char extra[2][64];
    snprintf(extra[0], sizeof extra[0], "encoder_l%d_self_Wq", b->c->enc_layers + 1);
    snprintf(extra[1], sizeof extra[1], b->c->ssru ? "decoder_l%d_rnn_W" : "decoder_l%d_self_Wq", b->c->dec_layers + 1);
    for (int k = 0; k < 2; k++)
        if (npz_get(b->z, extra[k]))
            return tern_error(TERN_ERR_MISMATCH, "%s: array '%s' but %s says %s %d", b->z->path, extra[k], b->c->path,
                              k ? "dec-depth" : "enc-depth", k ? b->c->dec_layers : b->c->enc_layers);
    if (b->c->pre_norm) {
        if ((st = add_norm(b, "encoder_top", "", TM_ENC_FINAL_LN, -1)) ||
            (st = add_norm(b, "decoder_top", "", TM_DEC_FINAL_LN, -1)))
            return st;
    }
    return TERN_OK;
}

/* ------------------------------------------------------------------ vocabularies */

static int ends_with(const char *s, const char *suf) {
    size_t a = strlen(s), b = strlen(suf);
    return a >= b && !strcmp(s + a - b, suf);
}

/* tok[id] = s for ids below V (Marian drops the entries at or above its dim-vocabs). */
static tern_status_t vocab_put(char **tok, int V, long id, const char *s, const char *path) {
    if (id < 0) return tern_error(TERN_ERR_FORMAT, "%s: token '%s': negative id %ld", path, s, id);
    if (id >= V) return TERN_OK;
    if (tok[id])
        return tern_error(TERN_ERR_FORMAT, "%s: tokens '%s' and '%s' have the same id %ld", path, tok[id], s, id);
    if (!(tok[id] = strdup(s))) return tern_error(TERN_ERR_NOMEM, "out of memory");
    return TERN_OK;
}

/* A vocabulary file as Marian reads it: a SentencePiece model (.spm: its pieces at their ids), a
 * YAML or JSON map token -> id; V: the embedding's rows (tensor name emb in wpath). */
static tern_status_t load_vocab(vocab_t **out, const char *path, int V, const char *emb, const char *wpath) {
    char **tok = calloc((size_t)V, sizeof *tok);
    if (!tok) return tern_error(TERN_ERR_NOMEM, "out of memory");
    tern_status_t st = TERN_OK;
    int n = 0; /* entries in the file */
    if (!file_exists(path)) {
        st = tern_error(TERN_ERR_IO, "%s: vocabulary not found", path);
    } else if (ends_with(path, ".spm")) {
        spm_t *sp = NULL;
        if (!(st = spm_load(&sp, path))) {
            n = spm_piece_count(sp);
            for (int i = 0; i < n && !st; i++) st = vocab_put(tok, V, i, spm_id_to_piece(sp, i), path);
            spm_free(sp);
        }
    } else if (ends_with(path, ".json")) {
        cJSON *root = NULL;
        if (!(st = json_read_object(path, &root))) {
            for (const cJSON *it = root->child; it && !st; it = it->next, n++) {
                double d = cJSON_IsNumber(it) ? it->valuedouble : -1;
                if (d != floor(d) || d < 0)
                    st = tern_error(TERN_ERR_FORMAT, "%s: token '%s': the id must be a non-negative integer", path,
                                    it->string);
                else st = vocab_put(tok, V, (long)d, it->string, path);
            }
            cJSON_Delete(root);
        }
    } else if (ends_with(path, ".yml") || ends_with(path, ".yaml")) {
        ymap_t y;
        if (!(st = ymap_read_file(&y, path))) {
            for (int i = 0; i < y.n && !st; i++, n++) {
                const ykv_t *e = &y.kv[i];
                char *end = NULL;
                long id = e->n == 1 && !e->is_seq ? strtol(e->vals[0], &end, 10) : -1;
                if (!end || end == e->vals[0] || *end)
                    st = tern_error(TERN_ERR_FORMAT, "%s: token '%s': the id must be an integer", path, e->key);
                else st = vocab_put(tok, V, id, e->key, path);
            }
            ymap_free(&y);
        }
    } else {
        st = tern_error(TERN_ERR_UNSUPPORTED, "%s: not a vocabulary Tern reads (Marian's .spm, .yml or .json)", path);
    }
    for (int i = 0; i < V && !st; i++)
        if (!tok[i])
            st = tern_error(TERN_ERR_MISMATCH, "%s: no token with id %d (%d entries) but array '%s' in %s has %d rows",
                            path, i, n, emb, wpath, V);
    if (!st) st = vocab_from_tokens(out, (const char *const *)tok, V);
    for (int i = 0; i < V; i++) free(tok[i]);
    free(tok);
    return st;
}

/* ------------------------------------------------------------------ files of the directory */

static const char *const DECODER_YML[] = {"model.npz.decoder.yml", "model.bin.decoder.yml", "decoder.yml", NULL};

/* 1 when path starts as Marian's binary models do (u64 version 1; CTranslate2's model.bin starts
 * with its u32 version and a u16 spec-name length: never that) */
static int is_marian_bin(const char *path) {
    FILE *f = fopen(path, "rb");
    uint8_t b[8];
    int ok = f && fread(b, 1, 8, f) == 8 && b[0] == 1 && !b[1] && !b[2] && !b[3] && !b[4] && !b[5] && !b[6] && !b[7];
    if (f) fclose(f);
    return ok;
}

int marian_is_dir(const char *dir) {
    char p[1100];
    static const char *const other[] = {"config.json", "model.safetensors", NULL};
    for (int i = 0; other[i]; i++)
        if (file_exists(path_join(p, sizeof p, dir, other[i]))) return 0;
    if (file_exists(path_join(p, sizeof p, dir, "model.bin")) && !is_marian_bin(p)) return 0; /* CTranslate2's */
    for (int i = 0; DECODER_YML[i]; i++)
        if (file_exists(path_join(p, sizeof p, dir, DECODER_YML[i]))) return 1;
    return file_exists(path_join(p, sizeof p, dir, "model.npz")) || file_exists(path_join(p, sizeof p, dir, "model.bin"));
}

/* A path of decoder.yml: its file name under dir (the directory is what was asked for), else as it
 * is when absolute, else under dir (Marian writes them relative to where it ran). */
static tern_status_t resolve(char *out, size_t n, const char *dir, const char *p, const char *yml, const char *key) {
    const char *base = strrchr(p, '/');
    base = base ? base + 1 : p;
    if (file_exists(path_join(out, n, dir, base))) return TERN_OK; /* the directory's own file first */
    if (p[0] == '/' && file_exists(p)) {
        snprintf(out, n, "%s", p);
        return TERN_OK;
    }
    if (p[0] != '/' && file_exists(path_join(out, n, dir, p))) return TERN_OK;
    return tern_error(TERN_ERR_IO, "%s: '%s' entry '%s': not found (nor %s/%s)", yml, key, p, dir, base);
}

/* The model file and the two vocabularies: from decoder.yml, else model.npz and vocab.{spm,yml,json}
 * (joint) or vocab.src.* and vocab.trg.* in dir. */
static tern_status_t find_files(const char *dir, char *model, char *src, char *tgt, size_t n, char *shortlist,
                                size_t sn) {
    char yml[1100];
    int have = 0;
    for (int i = 0; DECODER_YML[i] && !have; i++) have = file_exists(path_join(yml, sizeof yml, dir, DECODER_YML[i]));
    if (have) {
        ymap_t y;
        tern_status_t st = ymap_read_file(&y, yml);
        if (st) return st;
        const ykv_t *m = ymap_get(&y, "models"), *v = ymap_get(&y, "vocabs");
        if (!m || m->n < 1 || !v || v->n < 1) st = tern_error(TERN_ERR_FORMAT, "%s: needs 'models' and 'vocabs' lists", yml);
        else if (m->n > 1)
            st = tern_error(TERN_ERR_UNSUPPORTED, "%s: %d models: an ensemble (load each model directory and ask for "
                            "an ensemble)", yml, m->n);
        else if (v->n > 2)
            st = tern_error(TERN_ERR_UNSUPPORTED, "%s: %d vocabularies: multi-source models are not supported", yml, v->n);
        if (!st) st = resolve(model, n, dir, m->vals[0], yml, "models");
        if (!st) st = resolve(src, n, dir, v->vals[0], yml, "vocabs");
        if (!st) st = resolve(tgt, n, dir, v->vals[v->n - 1], yml, "vocabs");
        const ykv_t *sl = ymap_get(&y, "shortlist"); /* Marian's --shortlist values: FILE first best threshold */
        if (!st && sl && sl->n > 0) {
            char p[1100];
            if (sl->n > 4)
                st = tern_error(TERN_ERR_FORMAT, "%s: 'shortlist' has %d values (FILE first best threshold)", yml, sl->n);
            if (!st) st = resolve(p, sizeof p, dir, sl->vals[0], yml, "shortlist");
            size_t k = st ? 0 : (size_t)snprintf(shortlist, sn, "%s", p);
            for (int i = 1; !st && i < sl->n && k < sn; i++) k += (size_t)snprintf(shortlist + k, sn - k, ",%s", sl->vals[i]);
        }
        ymap_free(&y);
        return st;
    }
    if (!file_exists(path_join(model, n, dir, "model.npz")) && !file_exists(path_join(model, n, dir, "model.bin")))
        return tern_error(TERN_ERR_IO, "%s: no model.npz.decoder.yml, model.bin.decoder.yml, decoder.yml, model.npz or "
                          "model.bin", dir);
    static const char *const ext[] = {"spm", "yml", "json"};
    char name[64];
    for (int i = 0; i < 3; i++) {
        snprintf(name, sizeof name, "vocab.%s", ext[i]);
        if (file_exists(path_join(src, n, dir, name))) {
            snprintf(tgt, n, "%s", src);
            return TERN_OK;
        }
        snprintf(name, sizeof name, "vocab.src.%s", ext[i]);
        if (file_exists(path_join(src, n, dir, name))) {
            snprintf(name, sizeof name, "vocab.trg.%s", ext[i]);
            if (file_exists(path_join(tgt, n, dir, name))) return TERN_OK;
            return tern_error(TERN_ERR_IO, "%s: missing (vocab.src.%s is there)", tgt, ext[i]);
        }
    }
    return tern_error(TERN_ERR_IO, "%s: no decoder.yml and no vocabulary (vocab.spm, vocab.yml, vocab.json, or "
                      "vocab.src.* and vocab.trg.*)", dir);
}

tern_status_t marian_checkpoint_load(hf_checkpoint_t *out, const char *dir) {
    memset(out, 0, sizeof *out);
    char model[1100], src[1100], tgt[1100];
    tern_status_t st = find_files(dir, model, src, tgt, sizeof model, out->shortlist, sizeof out->shortlist);
    if (st) return st;
    npz_t z;
    if ((st = ends_with(model, ".bin") ? bin_load(&z, model) : npz_load(&z, model))) return st;
    mcfg_t c;
    memset(&c, 0, sizeof c);
    snprintf(c.path, sizeof c.path, "%s: special:model.yml", model);
    const npy_t *y = npz_get(&z, "special:model.yml");
    if (!y) st = tern_error(TERN_ERR_FORMAT, "%s: missing array 'special:model.yml' (Marian's options)", model);
    if (!st) {
        size_t len = strnlen((const char *)y->data, y->nbytes);
        st = ymap_parse(&c.y, (const char *)y->data, len, c.path);
    }
    if (!st) st = read_options(&c);
    const npy_t *emb[2] = {NULL, NULL};
    if (!st && !(out->weights = weights_new(model))) st = tern_error(TERN_ERR_NOMEM, "out of memory");
    if (!st) {
        builder_t b = {&z, out->weights, &c};
        st = build_weights(&b, emb);
    }
    snprintf(out->src_vocab_path, sizeof out->src_vocab_path, "%s", src);
    snprintf(out->tgt_vocab_path, sizeof out->tgt_vocab_path, "%s", tgt);
    if (!st) st = load_vocab(&out->src_vocab, src, (int)emb[0]->shape[0], emb[0]->name, model);
    if (!st && !strcmp(src, tgt) && emb[1]->shape[0] == emb[0]->shape[0]) out->tgt_vocab = out->src_vocab;
    else if (!st) st = load_vocab(&out->tgt_vocab, tgt, (int)emb[1]->shape[0], emb[1]->name, model);
    if (!st && ends_with(src, ".spm")) snprintf(out->src_spm_path, sizeof out->src_spm_path, "%s", src);
    if (!st && ends_with(tgt, ".spm")) snprintf(out->tgt_spm_path, sizeof out->tgt_spm_path, "%s", tgt);
    if (!st) {
        model_config_t *m = &out->cfg;
        model_config_defaults(m);
        snprintf(m->eos_token, sizeof m->eos_token, "</s>");
        snprintf(m->unk_token, sizeof m->unk_token, "<unk>");
        snprintf(m->decoder_start_token, sizeof m->decoder_start_token, "</s>"); /* unused: a zero embedding starts */
        m->add_source_bos = 0;
        m->add_source_eos = 1;
        m->layer_norm_epsilon = 1e-6f;
        snprintf(m->architecture, sizeof m->architecture, "transformer");
        const char *need[2] = {"</s>", "<unk>"};
        for (int k = 0; k < 4 && !st; k++) {
            const vocab_t *v = k < 2 ? out->src_vocab : out->tgt_vocab;
            if (vocab_lookup(v, need[k % 2]) < 0)
                st = tern_error(TERN_ERR_MISMATCH, "%s: lacks Marian's token '%s'", k < 2 ? src : tgt, need[k % 2]);
        }
    }
    if (!st) { /* <unk> is never output (Marian without --allow-unk) */
        out->never[0] = vocab_lookup(out->tgt_vocab, "<unk>");
        out->never_off[0] = 0, out->never_off[1] = 1, out->n_never = 1;
    }
    snprintf(out->model_type, sizeof out->model_type, "marian-native");
    ymap_free(&c.y);
    npz_free(&z);
    if (st) hf_checkpoint_free(out);
    return st;
}
