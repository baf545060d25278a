/*
 * weights.h — named tensors read from model files (CTranslate2 model.bin, safetensors).
 *
 * A weights_t is a read-only table of tensors. Tensor data points into the memory-mapped file
 * when it is suitably aligned, else into an aligned copy owned by the table (loaded with
 * WEIGHTS_DEFER_COPIES, a large one is copied only when asked for: see below). Aliases (tied
 * weights in model.bin) resolve to their target. Loaders check every length and offset against
 * the file size: a truncated or corrupt file gives TERN_ERR_FORMAT with a message naming the file
 * and the tensor, never a crash.
 */
#ifndef TERN_WEIGHTS_H
#define TERN_WEIGHTS_H

#include "base/base.h"

typedef enum {
    DT_F32 = 0, DT_I8 = 1, DT_I16 = 2, DT_I32 = 3, DT_F16 = 4, DT_BF16 = 5
} dtype_t; /* numbering equals CTranslate2's model.bin dtype byte */

size_t dtype_size(dtype_t dt);
const char *dtype_name(dtype_t dt);

#define TENSOR_MAX_RANK 8

typedef struct {
    const char *name;
    dtype_t dtype;
    int rank;                       /* 0 for scalars */
    int64_t shape[TENSOR_MAX_RANK];
    int64_t numel;                  /* product of shape (1 for scalars) */
    const void *data;               /* numel * dtype_size(dtype) bytes, aligned to the dtype (NULL:
                                     * released, or pending: see WEIGHTS_DEFER_COPIES) */
    size_t nbytes;
} tensor_t;

typedef struct weights weights_t;

/* CTranslate2 model.bin, binary versions 1..6. */
tern_status_t weights_load_ct2(weights_t **out, const char *path);
/* safetensors (F32, F16, BF16, I8, I16, I32 tensors). */
tern_status_t weights_load_safetensors(weights_t **out, const char *path);

/* Loading flags. WEIGHTS_DEFER_COPIES: a tensor of at least WEIGHTS_DEFER_MIN_BYTES whose bytes
 * are not aligned to its dtype in the file is not copied at load: its data is NULL ("pending")
 * until weights_need() copies it; weights_bytes() reads it in place (e.g. to quantize it without
 * a float32 copy). The caller ends with weights_settle() (every pending tensor copied) or
 * weights_release_pending() (given back). Smaller and aligned tensors are as without the flag. */
#define WEIGHTS_DEFER_COPIES 1u
#define WEIGHTS_DEFER_MIN_BYTES ((size_t)4096) /* a page: smaller copies give nothing back */
tern_status_t weights_load_ct2_flags(weights_t **out, const char *path, unsigned flags);
tern_status_t weights_load_safetensors_flags(weights_t **out, const char *path, unsigned flags);
/* Copies a pending tensor (t from weights_get/weights_at) so that t->data is valid; nothing for
 * the others. TERN_ERR_NOMEM naming the tensor when the copy cannot be allocated. */
tern_status_t weights_need(weights_t *w, const tensor_t *t);
/* t's bytes: t->data, or for a pending tensor its bytes in the file, NOT aligned to the dtype
 * (read them with memcpy). NULL once released. */
const void *weights_bytes(const weights_t *w, const tensor_t *t);
/* Copies every pending tensor (after it, every tensor's data is valid or released). */
tern_status_t weights_settle(weights_t *w);
/* Gives back the file pages of every pending tensor; their data stays NULL (released). */
void weights_release_pending(weights_t *w);
/* Keeps layers keep[0..n_keep) of those named prefix + K + "/..." (e.g. prefix "decoder/layer_"),
 * renumbered 0..n_keep-1 in that order; the other layers' tensors and aliases are renamed
 * "unused/<name>" (still owned, never looked up by a model). TERN_ERR_MISMATCH naming the layer
 * when one of keep is not in w, TERN_ERR_INVALID_ARG when one is given twice. For starting a
 * shallower model from a deeper one (tern train --init-decoder-layers). */
tern_status_t weights_keep_layers(weights_t *w, const char *prefix, const int *keep, int n_keep);
void weights_free(weights_t *w);

/* Tensor by name (aliases resolved), or NULL. */
const tensor_t *weights_get(const weights_t *w, const char *name);
int weights_count(const weights_t *w);
const tensor_t *weights_at(const weights_t *w, int i);
/* The file it was loaded from, and for model.bin the spec name, revision and binary version. */
const char *weights_path(const weights_t *w);
const char *weights_spec_name(const weights_t *w);   /* "" for safetensors */
int weights_spec_revision(const weights_t *w);
int weights_binary_version(const weights_t *w);
/* Metadata of a safetensors header's "__metadata__" (string values), or NULL. */
const char *weights_metadata(const weights_t *w, const char *key);

/* Scalar helper: read a rank-0 (or 1-element) tensor of any integer/float dtype.
 * Return 0 and leave *v unchanged when the tensor is absent. */
int weights_get_int(const weights_t *w, const char *name, int64_t *v);

/* Writes tensors as a safetensors file (atomically: tmp file + rename), with optional
 * metadata (n_meta key/value pairs). Used by `tern convert` and training checkpoints. */
tern_status_t safetensors_write(const char *path, const tensor_t *tensors, int n,
                                const char *const *meta_keys, const char *const *meta_values, int n_meta);
/* Writes CTranslate2's model.bin (binary version 6, ct2_format.c's layout): spec name and
 * revision, the tensors sorted by name, then the aliases (alias_names[i] -> alias_targets[i]).
 * A tensor's size must fit CTranslate2's u32 byte count, its rank its u8. Written to a temporary
 * file first and renamed, so a failed write leaves no partial model.bin. */
tern_status_t ct2_write(const char *path, const tensor_t *tensors, int n, const char *const *alias_names,
                        const char *const *alias_targets, int n_aliases, const char *spec, int revision);

/* Aliases (i < weights_alias_count): returns the alias name and sets *target to the name of the
 * tensor it resolves to. */
int weights_alias_count(const weights_t *w);
const char *weights_alias_at(const weights_t *w, int i, const char **target);
/* 1 when alias i was not stored in the file but derived by the loader: for an alias A -> T whose
 * target has a quantization scale T_scale, the loader adds A_scale -> T_scale (as CTranslate2). */
int weights_alias_is_derived(const weights_t *w, int i);

/* Gives back the memory of the tensor(s) whose data is `data`, once nothing reads it any more
 * (the Transformer packed a copy for its GEMM kernel): a copy made at load is freed, pages of the
 * mapped file are dropped. Their data becomes NULL. */
void weights_release(weights_t *w, const void *data);
/* Gives back the resident pages of [p, p + n) where they lie in the file mapping (whole pages of a
 * range of at least 1 MB; elsewhere nothing). The tensor stays valid: a page read again is read
 * from the file again. For a loader that has converted a tensor (float32 -> int8). */
void weights_drop_pages(const weights_t *w, const void *p, size_t n);

/* Element i of a tensor of any dtype, as float. */
float tensor_get_f32(const tensor_t *t, int64_t i);

/* The values of t (a tensor of w) as float32 into dst (t->numel floats): floating-point dtypes
 * converted, an int8 tensor divided by its per-row (or single) scale "<name>_scale" as
 * `tern convert --quantize int8` and CTranslate2 store it. An int8 tensor without a scale of 1
 * or rows elements is an error naming the file and the tensor. */
tern_status_t weights_read_f32(const weights_t *w, const tensor_t *t, float *dst);

#endif
