/*
 * weights_internal.h — what the loaders (ct2_format.c, safetensors.c) share with weights.c:
 * the table's layout and the helpers that add tensors, aliases and metadata to it.
 * Not part of the contract in weights.h; only the model-file layer includes it.
 */
#ifndef TERN_WEIGHTS_INTERNAL_H
#define TERN_WEIGHTS_INTERNAL_H

#include "model/weights.h"

typedef struct {
    char *name;
    int target;          /* index into tensors */
    int derived;         /* added by weights_derive_scale_aliases, not stored in the file */
} weights_alias_t;

struct weights {
    char *path;
    char *spec_name;     /* "" for safetensors */
    int spec_revision;
    int binary_version;
    mapped_file_t file;  /* tensors point into it when aligned */

    tensor_t *tensors;   /* n tensors; names and copies owned */
    void **owned;        /* owned[i]: the aligned copy of tensor i's data, or NULL */
    const void **pending; /* pending[i]: tensor i's bytes in the file, not copied yet (data NULL) */
    int defer;           /* WEIGHTS_DEFER_COPIES: large unaligned tensors wait in pending */
    int n, cap;

    weights_alias_t *aliases;
    int n_alias, cap_alias;

    char **meta_keys, **meta_values;
    int n_meta, cap_meta;

    /* Open-addressing hash of names: slot holds id + 1 (0 = empty); id < n is a tensor,
     * id >= n_max_tensor... encoded as: tensor i -> i + 1, alias j -> -(j + 1). */
    int *slots;
    size_t n_slots;      /* power of two */
};

weights_t *weights_new(const char *path);
/* Adds a tensor whose bytes are at src (inside the mapped file or any buffer that outlives the
 * call when copy is needed: the data is pointed to when aligned to the dtype and `may_point` is
 * set, else copied into an owned 64-byte aligned buffer; with may_point and w->defer set, a large
 * unaligned tensor is not copied yet: it waits in pending until weights_need). name need not be
 * NUL-terminated. */
tern_status_t weights_add(weights_t *w, const char *name, size_t name_len, dtype_t dt, int rank,
                          const int64_t *shape, const void *src, size_t nbytes, int may_point);
/* Adds alias -> target (target must be a tensor already added). */
tern_status_t weights_add_alias(weights_t *w, const char *alias, const char *target);
tern_status_t weights_add_meta(weights_t *w, const char *key, const char *value);
/* For every alias A -> T where T_scale exists and A_scale does not, adds A_scale -> T_scale
 * (as CTranslate2 does: tied int8 weights share their scales). Loaders call it last. */
tern_status_t weights_derive_scale_aliases(weights_t *w);

#endif
