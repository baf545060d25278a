/*
 * checkpoint.h — training checkpoints: a Tern model directory that `tern translate -m` loads as
 * it is, plus trainer_state.safetensors (optimizer tensors, scalars such as the update count and
 * the learning rate, the data iterator's state), written atomically; keeping the last K;
 * averaging (`tern average`).
 *
 * A save directory holds
 *   checkpoint-00001200/            one per save, named by the update count (8 digits or more)
 *       config.json                 special tokens, add_source_bos/eos, pad_token, epsilon, "format": "tern"
 *       model.safetensors           the parameters under the family's names (the Transformer:
 *                                   CTranslate2 TransformerSpec names), its config scalars
 *                                   (num_heads, pre_norm, activation, ...), aliases as metadata
 *       shared_vocabulary.json      (or source_vocabulary.json + target_vocabulary.json)
 *       sentencepiece.model         (or source.spm + target.spm; none for pre-tokenized data)
 *       trainer_state.safetensors   optimizer tensors ("<group prefix><name>"), metadata: "update",
 *                                   "value:<name>" = "i:<int64>" | "u:<uint64>" | "f:<%.17g>",
 *                                   "data:seed" "data:epoch" "data:pos" "data:rng" "data:n_batches"
 *                                   "data:plan_hash" (decimal)
 *   .tmp-...                        a save or deletion in progress (or killed); removed by the next save
 * A checkpoint is written whole into a temporary directory, every file and the directory are
 * fsync'ed, then it is renamed to its name (an existing one of the same name is swapped out
 * atomically) and the save directory is fsync'ed: a kill at any point leaves either the complete
 * new checkpoint or none, never a partial one under a checkpoint name. One process writes to a
 * save directory at a time.
 *
 * The API takes generic named tensors (tensor_t of model/weights.h: name, shape, dtype, data),
 * so it does not depend on the training model's layout: the trainer passes
 * tmodel_tensor_views() of its parameter and moment buffers.
 */
#ifndef TERN_TRAIN_CHECKPOINT_H
#define TERN_TRAIN_CHECKPOINT_H

#include "base/base.h"
#include "model/weights.h"
#include "train/data.h"

/* Tensors stored as prefix + tensors[i].name ("adam_m/" + "encoder/...") in trainer_state. */
typedef struct {
    const char *prefix;
    const tensor_t *tensors;
    int n;
} ckpt_group_t;

typedef enum { CKPT_INT = 0, CKPT_UINT = 1, CKPT_FLOAT = 2 } ckpt_type_t;

/* A named scalar of the trainer (learning rate, loss scale, best validation loss...), exact. */
typedef struct {
    const char *name;
    ckpt_type_t type;
    int64_t i;   /* CKPT_INT */
    uint64_t u;  /* CKPT_UINT */
    double f;    /* CKPT_FLOAT */
} ckpt_value_t;

typedef struct {
    /* the model directory */
    const tensor_t *params;            /* parameters under TransformerSpec names (float32 from training) */
    int n_params;
    const char *const *alias_names;    /* tied tensors: alias_names[i] is alias_targets[i] */
    const char *const *alias_targets;
    int n_aliases;
    const tensor_t *scalars;           /* the family's config keys as rank-0 tensors (written after params; */
    int n_scalars;                     /*   the training table's scalars op), or none */
    const char *spec_name;             /* model.safetensors' "ct2_spec" metadata ("TransformerSpec"), or NULL */
    const char *architecture;          /* config.json's "architecture" (NULL: not written, the Transformer) */
    const data_vocab_t *vocab;         /* vocabularies, SentencePiece models, special tokens */
    float layer_norm_epsilon;          /* config.json's layer_norm_epsilon (<= 0: null, the default) */
    /* the trainer state */
    const ckpt_group_t *groups;        /* optimizer moments and other tensors */
    int n_groups;
    const ckpt_value_t *values;        /* scalars */
    int n_values;
    const data_iter_state_t *data;     /* NULL: none */
} ckpt_contents_t;

/* "SAVE_DIR/checkpoint-%08lld" into buf. */
void ckpt_path(char *buf, size_t n, const char *save_dir, int64_t update);

/* Writes checkpoint `update` into save_dir (created when absent) atomically, then deletes all
 * but the keep_last newest checkpoints (keep_last 0: none deleted) and any leftover temporary
 * directory. path_out (may be NULL) gets the checkpoint's directory. */
tern_status_t ckpt_save(const char *save_dir, int64_t update, const ckpt_contents_t *c, int keep_last,
                        char *path_out, size_t path_n);

/* Writes only c's model directory part (weights, config.json, vocabularies, SentencePiece models)
 * into dir (created when absent, files replaced): a model `tern translate` loads. */
tern_status_t ckpt_write_model(const char *dir, const ckpt_contents_t *c);

/* The update counts of the checkpoints in save_dir, ascending (*updates malloc'd; *n may be 0). */
tern_status_t ckpt_list(const char *save_dir, int64_t **updates, int *n);
/* The newest checkpoint's directory; TERN_ERR_IO naming save_dir when there is none. */
tern_status_t ckpt_latest(const char *save_dir, char *path, size_t n);

/* ------------------------------------------------------------ reading (resume) */

typedef struct ckpt ckpt_t;

/* Opens a checkpoint directory: model.safetensors and trainer_state.safetensors (mapped). */
tern_status_t ckpt_open(ckpt_t **out, const char *dir);
void ckpt_close(ckpt_t *c);
/* The parameters (for tmodel_load) and the trainer state's tensors. */
const weights_t *ckpt_model(const ckpt_t *c);
const weights_t *ckpt_state(const ckpt_t *c);
int64_t ckpt_update(const ckpt_t *c);
/* Copies the tensors stored as prefix + dst[i].name into dst[i].data (float32 of the same shape;
 * dst[i].data must point to writable memory, e.g. tmodel_tensor_views of a moment buffer). */
tern_status_t ckpt_read_group(const ckpt_t *c, const char *prefix, const tensor_t *dst, int n);
/* The value of that name and v->type (v->name names it); TERN_ERR_FORMAT when absent or of
 * another type. */
tern_status_t ckpt_get_value(const ckpt_t *c, ckpt_value_t *v);
tern_status_t ckpt_get_data_state(const ckpt_t *c, data_iter_state_t *s);

/* ------------------------------------------------------------ averaging */

/* Averages the parameters of n >= 1 model directories (checkpoints or any Tern-format model
 * with float tensors) into out_dir, written atomically as a checkpoint is: every float tensor
 * (F32/F16/BF16) becomes the float32 of the float64 mean (inputs summed in the given order, then
 * divided by n); integer tensors (the spec scalars) must be equal in every input; names, shapes
 * and aliases must agree. config.json, vocabularies and SentencePiece models come from the first
 * directory; no trainer_state. */
tern_status_t ckpt_average(const char *out_dir, const char *const *dirs, int n);

#endif
