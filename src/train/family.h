/*
 * family.h — the training table: how the trainer reaches a model family.
 *
 * The trainer (trainer.c), the optimizer (optim.h), checkpoints (checkpoint.h), data-parallel
 * gradients (dist.h) and averaging see a model only as a train_model_t: parameters and gradients
 * as two flat float buffers of n_params floats, with named views (train_tensor_t: name, shape,
 * offset, the same in both buffers and in every optimizer moment), plus the family's operations
 * (train_family_t): create from a configuration and the data's vocabulary, initialize, load,
 * forward and backward of a teacher-forced batch, describe. A family registers its table under
 * its architecture name (train_family_find); a second family plugs in without a change to the
 * trainer, the optimizer, the checkpoints, MPI or averaging.
 *
 * Legend: B sentences, S / T padded source / target lengths.
 */
#ifndef TERN_TRAIN_FAMILY_H
#define TERN_TRAIN_FAMILY_H

#include "base/base.h"
#include "model/weights.h"
#include "model/desc.h"
#include "train/checkpoint.h"

/* One named view of the parameter buffer (and of the gradient and moment buffers). */
typedef struct {
    char name[96];     /* the name the checkpoint stores it under */
    int rank;          /* 1 or 2 */
    int shape[2];
    size_t numel;
    size_t offset;     /* floats from the start of the buffer */
} train_tensor_t;

/* Sums over a batch's target tokens. */
typedef struct {
    double loss;   /* the (label-smoothed) training loss */
    double nll;    /* -log p(y) */
    int ntokens;   /* non-padding target tokens */
} train_loss_t;

/* What a model takes from the data. */
typedef struct {
    int src_vocab, tgt_vocab;
    int joint_vocab;   /* one vocabulary for both sides */
    int pad_id;
    int max_len;       /* longest source or target sentence of the data options */
} train_data_dims_t;

typedef struct train_family train_family_t;

/* A model under training, as every family exposes it. */
typedef struct {
    const train_family_t *family;
    void *impl;                        /* the family's model */
    size_t n_params;                   /* floats in each buffer */
    float *params, *grads;             /* (n_params) */
    int n_tensors;
    const train_tensor_t *tensors;     /* (n_tensors) every stored tensor once, in buffer order */
    int n_aliases;                     /* tied names: alias_names[i] is stored as alias_targets[i] */
    const char *const *alias_names, *const *alias_targets;
    float layer_norm_epsilon;          /* config.json's (<= 0: none) */
    int act_fq;                        /* --qat int8-act: the linear layers' inputs fake-quantized as
                                          int8 inference quantizes them (set before ws_new; families
                                          that cannot refuse it in ws_new) */
} train_model_t;

/* A backward-progress callback (dist.h): called with s after backward stage s. */
typedef void (*train_backward_hook_t)(void *user, int stage);

enum { TRAIN_MAX_CONFIG_VALUES = 32 };

/* One of a family's own `tern train` options: the CLI builds its option list and the family's
 * section of --help from the family's table (a NULL name ends it), so that a family parses its
 * own flags and a flag of another family is an error naming that family. */
typedef enum {
    TRAIN_OPT_INT,    /* N: an int field (and field2, when set), in [min, max] */
    TRAIN_OPT_FLOAT,  /* X: a float field, in [min, max] */
    TRAIN_OPT_SET,    /* a flag: the int field = value */
    TRAIN_OPT_CHOICE  /* NAME: the int field = values[i] of choices[i] */
} train_opt_kind_t;

typedef struct {
    const char *name;           /* the long option without "--" */
    train_opt_kind_t kind;
    size_t field;               /* offsetof() the field in the family's configuration */
    size_t field2;              /* TRAIN_OPT_INT: a second int field set alike (+1: none) */
    double min, max;            /* TRAIN_OPT_INT, TRAIN_OPT_FLOAT: the accepted range */
    int value;                  /* TRAIN_OPT_SET */
    const char *const *choices; /* TRAIN_OPT_CHOICE: names and their values, NULL-terminated */
    const int *values;
    const char *usage;          /* its --help lines as printed (NULL: told by the line before) */
} train_option_t;

#define TRAIN_OPT_NO_FIELD2 ((size_t)-1)

/* The options several families share, as entries of their tables (T: the configuration type):
 * --share-embeddings / --no-share-embeddings on an int field (1 / 0), --label-smoothing on a float
 * field, --precision float32|bfloat16 on an int field (0 / 1: TPREC_F32 / TPREC_BF16). */
extern const char *const train_precision_names[];
extern const int train_precision_values[];
#define TRAIN_OPT_SHARE_EMBEDDINGS(T, field, usage)                                                              \
    {"share-embeddings", TRAIN_OPT_SET, offsetof(T, field), TRAIN_OPT_NO_FIELD2, 0, 0, 1, NULL, NULL, usage},   \
    {"no-share-embeddings", TRAIN_OPT_SET, offsetof(T, field), TRAIN_OPT_NO_FIELD2, 0, 0, 0, NULL, NULL, NULL}
#define TRAIN_OPT_LABEL_SMOOTHING(T, field)                                                                      \
    {"label-smoothing", TRAIN_OPT_FLOAT, offsetof(T, field), TRAIN_OPT_NO_FIELD2, 0, 0.999, 0, NULL, NULL,      \
     "  --label-smoothing E         (default 0.1)\n"}
#define TRAIN_OPT_PRECISION(T, field, usage)                                                                     \
    {"precision", TRAIN_OPT_CHOICE, offsetof(T, field), TRAIN_OPT_NO_FIELD2, 0, 0, 0, train_precision_names,     \
     train_precision_values, usage}
#define TRAIN_OPT_END {NULL, 0, 0, 0, 0, 0, 0, NULL, NULL, NULL}

struct train_family {
    const char *architecture;  /* registry key (config.json "architecture") */
    const char *spec_name;     /* model.safetensors' "ct2_spec" metadata */
    /* Its stored tensors (desc.h): which of them int8 inference quantizes (DESC_Q8), for
     * `tern train --qat int8` (qat.h); NULL: the family cannot be trained with --qat. */
    const model_desc_t *desc;
    /* The configuration: its size (the trainer and the CLI hold it opaque), the family's own
     * `tern train` options and their --help heading, and the check of a combination of them (a
     * usage error, or NULL). */
    size_t config_size;
    const train_option_t *options;
    const char *options_title;
    const char *(*check_options)(const void *config);
    /* Creates the model (parameters zero) from the family's configuration and the data. */
    tern_status_t (*create)(train_model_t *m, const void *config, const train_data_dims_t *data);
    void (*destroy)(train_model_t *m);
    /* Deterministic initialization from seed. */
    void (*init_params)(train_model_t *m, uint64_t seed);
    /* Parameters from named tensors (a checkpoint's model, or any model of the family Tern loads:
     * int8 and float16 tensors are read as float32). */
    tern_status_t (*load)(train_model_t *m, const weights_t *w);
    /* Optional (NULL: the family cannot start from a model): the shape part of the configuration
     * (layers, widths, heads, norms, tying; not dropout or smoothing) read from a model's tensors
     * and config.json (mc), over config, for `tern train --init-from`. */
    tern_status_t (*config_from_model)(void *config, const weights_t *w, const model_config_t *mc);
    /* Tells the model that m->params changed (after an optimizer step). */
    void (*params_changed)(train_model_t *m);
    /* The configuration as named integers ("model:<key>"), stored in a checkpoint and checked
     * on resume; returns the count (<= TRAIN_MAX_CONFIG_VALUES). */
    int (*config_values)(const train_model_t *m, ckpt_value_t *v);
    /* The config keys the model files carry as rank-0 tensors (valid while m lives). */
    int (*scalars)(const train_model_t *m, const tensor_t **out);
    /* Line `line` (0, 1, ...) of the model's description for the log (0: layers, widths,
     * parameters); returns 0 when there is no such line. */
    int (*describe)(const train_model_t *m, int line, char *buf, size_t n);
    /* The family's default configuration into config (its configuration type). */
    void (*default_config)(void *config);
    /* Workspace for batches with B·S <= max_src_tokens, B·T <= max_tgt_tokens, S <= max_S,
     * T <= max_T; reused by every batch. */
    tern_status_t (*ws_new)(void **ws, const train_model_t *m, int max_src_tokens, int max_tgt_tokens, int max_S,
                            int max_T);
    void (*ws_free)(void *ws);
    size_t (*ws_bytes)(const void *ws);
    /* Teacher-forced forward of a batch: src (B, S), tgt_in / tgt_out (B, T), right-padded; train:
     * dropout keyed by (seed, step). */
    tern_status_t (*forward)(train_model_t *m, void *ws, const int *src, const int *tgt_in, const int *tgt_out,
                             int B, int S, int T, int train, uint64_t seed, uint64_t step, train_loss_t *loss);
    /* grads += d(grad_scale · loss)/dθ of the last forward. */
    tern_status_t (*backward)(train_model_t *m, void *ws, float grad_scale);
    /* Backward stages and the stage after which tensor i's gradient is final (for the
     * all-reduce buckets); the hook is called after every stage but the last. */
    int (*backward_stages)(const train_model_t *m);
    int (*tensor_stage)(const train_model_t *m, int i);
    void (*set_backward_hook)(void *ws, train_backward_hook_t hook, void *user);
    /* Per-sentence loss weights (RL refinement, src/train/rl.h): w (B floats, the caller's
     * sentence order; caller-owned, read by the next forward and its backward) or NULL (all 1).
     * The forward's loss and nll sums become sum_b w[b] * (sentence b's sums) (ntokens unchanged),
     * and the backward adds d(grad_scale * sum_b w[b] * loss_b)/dθ. Kept until set again. */
    void (*set_sentence_weights)(void *ws, const float *w);
};

/* Views of buf (params, grads or an optimizer moment: n_params floats) as named tensors
 * (float32, the shapes of m->tensors), out[0..n_tensors), for checkpoints. */
void train_model_views(const train_model_t *m, const float *buf, tensor_t *out);

/* set_sentence_weights for a family whose loss rows are (B, T) row-major (row b·T + t):
 * *loss_sum, *nll_sum = sum_b w[b] * sum_t losses/nlls[b·T + t]; train_scale_sentence_rows
 * multiplies dlogits' rows of sentence b (T rows of V) by w[b]. */
void train_weighted_sums(const float *losses, const float *nlls, const float *w, int B, int T, double *loss_sum,
                         double *nll_sum);
void train_scale_sentence_rows(float *dlogits, const float *w, int B, int T, int V);

/* The registry (src/train/family.c): the family of that architecture, or NULL; the i-th family
 * (0, 1, ...; NULL past the last), the default first. */
const train_family_t *train_family_find(const char *architecture);
const train_family_t *train_family_at(int i);
/* "transformer": the default. */
#define TRAIN_DEFAULT_ARCHITECTURE "transformer"

/* The registry's list: each family's table train_family_<name>, defined in the family's own files
 * (the Transformer's in src/train/model_table.c, a tmodel_config_t; the attention GRU's in
 * src/train/rnn_gru_train.c, an rnn_gru_config_t; GNMT's in src/train/gnmt_table.c, a
 * gnmt_train_config_t), the default first. A new family is one more X(name) here
 * (docs/model-families.md); family.c, these declarations and `tern train`'s options and --help
 * follow from the list. */
#define TRAIN_FAMILIES(X) X(transformer) X(rnn_gru) X(gnmt)
#define TRAIN_FAMILY_DECLARE(name) extern const train_family_t train_family_##name;
TRAIN_FAMILIES(TRAIN_FAMILY_DECLARE)

#endif
