/*
 * desc.h — the one form in which a model family describes its stored tensors and config keys
 * (issue 30): a model_desc_t is a static table of tensor specs and a table of config keys, over
 * a family's named dimensions (an int array indexed by the family's own dimension enum). The
 * loaders, the training tables (and through them the checkpoint writer), `tern convert` and
 * `tern info` ask these generic functions; a tensor name is spelled only in its family's table.
 *
 * A tensor spec:
 *   name    a printf pattern, with one %d for the layer when the tensor repeats per layer
 *   layers  [lo, min(dims[count], hi)) for a per-layer tensor (count a dimension; hi 0: no cap);
 *           count DESC_ONCE: one global tensor
 *   group   specs with the same non-zero group are enumerated layer-major (for each layer, each
 *           spec of the group in table order); group 0: the spec's layers in a row
 *   rows, cols  shape expressions mul × dims[dim] (cols.mul 0: rank 1)
 *   dtype   DESC_F32 (float32, never quantized), DESC_Q8 (a matrix that int8 may store per row
 *           with "<name>_scale")
 *   side    DESC_ENCODER / DESC_DECODER
 *   cond    a dimension that must be non-zero for the tensor to exist (DESC_ALWAYS: always)
 *   alias, alias_if  when dims[alias_if] != 0 the tensor is not stored but is the tensor named
 *           alias (followed when that is an alias too)
 *   module, part  what the family's callers call the tensor (their enums; 0 where unused)
 *
 * A config key: a rank-0 tensor of model.safetensors; its value is dims[dim] (dim DESC_CONST:
 * the constant value) written with dtype; read back (DESC_KEY_READ) into dims[dim], checked in
 * [lo, hi]; optional keys read as def when absent; DESC_KEY_READONLY keys are read, not written.
 */
#ifndef TERN_DESC_H
#define TERN_DESC_H

#include <stddef.h>
#include <stdint.h>

#include "model/weights.h"

enum { DESC_ONCE = -1, DESC_ALWAYS = -1, DESC_CONST = -1, DESC_MAX_DIMS = 24, DESC_MAX_KEYS = 16 };

typedef enum { DESC_F32 = 0, DESC_Q8 } desc_dtype_t;
typedef enum { DESC_ENCODER = 1, DESC_DECODER = 2 } desc_side_t;

typedef struct {
    int mul, dim; /* mul × dims[dim]; mul 0: absent (a rank-1 tensor's cols) */
} desc_expr_t;

typedef struct {
    const char *name;
    int count, lo, hi;   /* layers (count DESC_ONCE: global) */
    int group;
    desc_expr_t rows, cols;
    desc_dtype_t dtype;
    desc_side_t side;
    int cond;            /* DESC_ALWAYS or a dimension */
    const char *alias;   /* NULL or the tensor it may be tied to */
    int alias_if;        /* the dimension that ties it */
    int module, part;    /* the family's own handles for its callers (a module enum, a part enum) */
} desc_spec_t;

enum { DESC_KEY_OPTIONAL = 1, DESC_KEY_READONLY = 2 };

typedef struct {
    const char *name;
    dtype_t dtype;       /* DT_I32, DT_I16 or DT_I8 */
    int dim;             /* the dimension it holds, or DESC_CONST */
    int value;           /* DESC_CONST's value; the default of an optional key */
    int lo, hi;          /* the range a read value must be in */
    int flags;
} desc_key_t;

typedef struct {
    const char *family;            /* "rnn-gru", "gnmt", "transformer" */
    const desc_spec_t *specs;
    int n_specs;
    const desc_key_t *keys;
    int n_keys;
    const char *const *dim_names;  /* n_dims short names ("E", "He") for messages and `tern info` */
    int n_dims;
    /* Fills the derived dimensions of dims from the configured ones (NULL: none). */
    void (*derive)(int *dims);
    /* Other names a converter may give a tensor: pairs {other, canonical}, ended by {NULL, NULL}
     * (NULL: none). desc_parse reads the other name as the canonical one. */
    const char *const (*alt_names)[2];
    /* What a file of another variant of the family holds and this one cannot run (NULL-ended
     * lists, NULL: none): config keys that must be absent or 0, and name parts no tensor may
     * contain (desc_check_supported). */
    const char *const *unsupported_keys;
    const char *const *unsupported_parts;
} model_desc_t;

/* One tensor of a configuration. */
typedef struct {
    char name[96];
    int rank;      /* 1 or 2 */
    int shape[2];  /* shape[1] 0 for rank 1 */
    int spec;      /* index in the family's specs */
    int layer;     /* -1 for a global tensor */
} desc_tensor_t;

/* The name of spec s at layer l into buf. */
const char *desc_name(const model_desc_t *md, int s, int layer, char *buf, size_t n);
/* Whether spec s exists under dims (its condition). */
int desc_used(const model_desc_t *md, int s, const int *dims);
/* Whether spec s is stored under dims (used and not tied). */
int desc_stored(const model_desc_t *md, int s, const int *dims);
/* Spec s's shape under dims: rows, cols (0 for rank 1). */
void desc_shape(const model_desc_t *md, int s, const int *dims, int *rows, int *cols);
/* Every stored tensor under dims (aliases and absent tensors excluded) in the family's order;
 * out NULL: count only. Returns the count. */
int desc_tensors(const model_desc_t *md, const int *dims, desc_tensor_t *out);
/* Tied names under dims: names[i] is stored as targets[i] (at most max). Returns the count. */
int desc_aliases(const model_desc_t *md, const int *dims, const char **names, const char **targets, int max);
/* Parses a stored name into spec and layer; 0 when the family has no such tensor. */
int desc_parse(const model_desc_t *md, const char *name, int *spec, int *layer);
/* The name of the global spec of a module's part (the family's handles); NULL when none. */
const char *desc_global_name(const model_desc_t *md, int module, int part);
/* Whether the named tensor may be stored int8 with a per-row scale. */
int desc_quantizable(const model_desc_t *md, const char *name);
/* Whether w stores a tensor the family may quantize (desc_quantizable) as int8: the model was
 * written quantized (`tern convert --quantize int8`), so "auto" computes in int8. */
int desc_stored_int8(const model_desc_t *md, const weights_t *w);
/* TERN_ERR_UNSUPPORTED naming the file and the key or tensor when w holds what the family's
 * unsupported lists name. */
tern_status_t desc_check_supported(const model_desc_t *md, const weights_t *w);

/* Storage for the written keys as rank-0 tensors. */
typedef struct {
    union {
        int32_t i32;
        int16_t i16;
        int8_t i8;
    } v[DESC_MAX_KEYS];
    tensor_t t[DESC_MAX_KEYS];
} desc_scalars_t;

/* Fills s with the written keys of dims (in table order, pointing into s); returns the count. */
int desc_scalars(const model_desc_t *md, const int *dims, desc_scalars_t *s);

/* Reads key k of w into *v; 0 when absent (optional: *v = its default, 1). */
int desc_key_get(const model_desc_t *md, int k, const weights_t *w, int64_t *v);

#endif
