/*
 * trainer.h — the training loop of `tern train`: raw parallel text and a vocabulary in, training
 * checkpoints that `tern translate` loads out.
 *
 * One run: vocabulary (a model directory written by `tern vocab --model-dir`, or SentencePiece
 * model(s)) -> token caches of the training and validation files (data.h) -> token-budget batches
 * -> updates of --update-freq batches each (forward, backward with grad_scale = 1 / target tokens
 * of the whole update, clipping by global norm, the schedule's learning rate, Adam or GNMT's SGD)
 * -> every N updates a log line, a validation (loss, nll, perplexity) and a checkpoint as asked;
 * at each epoch end a checkpoint, a validation and BLEU with beam search through the public
 * translator on the checkpoint just written (detokenized output, sacreBLEU's defaults) -> early
 * stopping with patience -> at the end a last checkpoint (`tern train` then plots the curves with
 * gnuplot: tools/train_plot.c).
 *
 * Files in the save directory:
 *   checkpoint-NNNNNNNN/   checkpoint.h's directories (the last keep_last kept)
 *   train.log              the log lines (also on stderr)
 *   train_curve.tsv        one row per update: update epoch loss nll ppl lr gnorm tokens elapsed
 *   valid_curve.tsv        one row per validation: update epoch loss nll ppl bleu (-1: not scored)
 *   curves.png             training and validation curves (written by `tern train`, not the library)
 *   train.cache, valid.cache  the token caches (in cache_dir when given)
 *
 * Exact resume: a checkpoint holds the parameters, Adam's moments and step, the update count,
 * the count of micro-batches (which keys the dropout masks), the data iterator's state (epoch,
 * position, shuffling generator), the early-stopping state, the log line accumulators and the
 * elapsed time. The learning rate is a function of the update count. A run resumed from a
 * checkpoint therefore computes the same updates, bit for bit on the same thread count, as the
 * run that wrote it; the curve files are cut back to the checkpoint's update when it resumes.
 *
 * Data-parallel (`mpirun -np N tern train`, dist.h): an update is N·k batches of the one shuffled
 * order, rank r trains on [r·k, (r+1)·k) of them (dropout keyed by the global micro-batch index),
 * the gradients are summed over the ranks in buckets during the last backward pass, every rank
 * steps identically; rank 0 alone writes files, validates and scores BLEU; stop decisions are
 * OR-reduced over the ranks every update.
 *
 * Legend: k = update_freq batches per update.
 */
#ifndef TERN_TRAIN_TRAINER_H
#define TERN_TRAIN_TRAINER_H

#include <signal.h>
#include <stdint.h>

#include "base/base.h"
#include "train/data.h"
#include "train/family.h"
#include "train/optim.h"

typedef enum { STOP_ON_LOSS = 0, STOP_ON_BLEU = 1 } trainer_stop_metric_t;

typedef struct {
    /* ---- model: a family (family.h) and its configuration, opaque here (the family's create()
     * sets the vocabularies, padding and positions from the data) */
    const char *architecture;   /* the training table (family.h) by name: NULL "transformer" */
    const void *model_config;   /* that family's configuration (train_family_t.config_size bytes);
                                   NULL: the family's defaults (its default_config()) */
    uint64_t seed;              /* parameter initialization, batch order, dropout masks (1) */
    const char *init_from;      /* a model directory (Tern or CTranslate2) whose parameters start a
                                   fresh run (fine-tuning): its family's shape is read from it
                                   (config_from_model), its tensors loaded, the optimizer fresh;
                                   NULL: initialization from seed */
    const char *init_enc_layers, *init_dec_layers; /* with init_from: the encoder / decoder layers
                                   of that model kept, in order ("0,3": its layers 0 and 3 become the
                                   new model's 0 and 1), the others dropped: a shallower student
                                   started from its teacher; NULL: every layer */
    const char *freeze;         /* parameters kept as they start: "embeddings" (token embeddings,
                                   position tables and a tied projection), "encoder" (every encoder
                                   tensor, its embeddings included); NULL: none */

    /* ---- data */
    const char *vocab_dir;      /* model directory from `tern vocab --model-dir` (config.json,
                                   vocabularies, SentencePiece models), or NULL with spm below */
    const char *src_spm, *tgt_spm; /* SentencePiece model(s) instead of vocab_dir (tgt_spm NULL:
                                   one joint model); the model must have a <pad> piece */
    const char *train_src, *train_tgt; /* raw text, one sentence a line */
    int n_train;                /* > 0: these corpora mixed by weight (data_iter_new_mix) instead of
                                   train_src/train_tgt; caches train.cache, train.1.cache, ... */
    const char *const *train_srcs, *const *train_tgts;
    const double *train_weights; /* (n_train) positive; NULL: all 1 */
    const char *valid_src, *valid_tgt; /* may be NULL: no validation */
    const char *cache_dir;      /* token caches (NULL: save_dir) */
    data_options_t data;        /* length limits, ratio filter, encoding threads */
    int max_tokens;             /* B * max(S, T) <= max_tokens per batch (4096) */
    int max_sentences;          /* B <= max_sentences (0: no limit) */
    int valid_max_tokens;       /* validation batches (0: max_tokens) */
    int shuffle;                /* 1: batch order shuffled every epoch (1) */

    /* ---- optimization */
    adam_config_t adam;
    lr_schedule_t sched;
    float clip_norm;            /* max global gradient norm (0: no clipping) */
    int update_freq;            /* batches per update (gradient accumulation) (1) */
    long max_updates;           /* stop after this many updates (0: no limit) */
    int max_epochs;             /* stop after this many epochs (0: no limit) */
    double max_time;            /* stop once the run's elapsed seconds (resumes added up) pass this (0: none) */
    int threads;                /* intra-op threads (0: all cores) */
    double bucket_mb;           /* data-parallel (mpirun): all-reduce buckets of about this many MB (2) */
    int comm_overlap;           /* 1: all-reduce buckets during the backward pass (1); 0: after it */

    /* ---- checkpoints */
    const char *save_dir;       /* required */
    int save_interval_updates;  /* also save every N updates (0: at epoch ends and the end only) */
    int keep_last;              /* keep the last K checkpoints (0: all) (10) */
    int resume;                 /* 1: continue from the newest checkpoint of save_dir when there is one */
    const char *resume_from;    /* a checkpoint directory to continue from (implies resume) */

    /* ---- validation and early stopping */
    int valid_interval_updates; /* also validate every N updates (0: at epoch ends only) */
    int bleu;                   /* 1: BLEU at every epoch end (1) */
    int bleu_beam;              /* beam size of that translation (5) */
    float bleu_length_penalty;  /* its length penalty (0: CTranslate2's default, none) */
    int bleu_max_sentences;     /* translate the first N validation sentences (0: all) */
    const char *bleu_output;    /* NULL; else the hypotheses of the last BLEU go to this file */
    int patience;               /* stop after this many validations without improvement (0: off) */
    trainer_stop_metric_t stop_metric; /* what "improvement" means: lower loss or higher BLEU */

    /* ---- watching */
    int log_interval;           /* a log line every N updates (100) */
    int progress;               /* -1: a progress bar when stderr is a terminal; 0 never; 1 always */
    int quiet;                  /* 1: log lines only to train.log, not stderr */
    volatile sig_atomic_t *stop; /* set (by a signal handler) to stop after the current update,
                                   with a checkpoint; may be NULL */

    /* ---- RL refinement with the GLEU reward (src/train/rl.h; GNMT §5): needs init_from */
    int rl_gleu;                /* 1: each update maximizes α·O_ML + O_RL: per source, rl_samples
                                   translations sampled from the current parameters (no dropout),
                                   rewarded with sentence GLEU against the reference, the sample
                                   mean as baseline; label smoothing off (O_ML: plain likelihood);
                                   interval validations (valid_interval_updates) also score BLEU */
    float rl_alpha;             /* α (0.017, the paper's) */
    int rl_samples;             /* M samples per source, >= 2 (15) */
    float rl_temperature;       /* sampling temperature (1) */
    int rl_topk;                /* sample among the K most probable tokens (0: all, the default) */

    /* ---- quantization-aware training (src/train/qat.h) */
    int qat;                    /* QAT_INT8 (1): every update's forward and backward passes run on the
                                   int8 weight matrices fake-quantized (int8 inference's per-row
                                   rounding), the straight-through gradient updates the float32
                                   master weights; validation loss on the fake-quantized weights,
                                   epoch-end BLEU in int8; stored in checkpoints. QAT_NONE (0): off */
} trainer_options_t;

/* fairseq-like defaults: seed 1, max_tokens 4096, shuffle, Adam (0.9, 0.98, 1e-8), inverse_sqrt
 * lr 5e-4 warm-up 4000 from 1e-7, no clipping, update_freq 1, keep_last 10, BLEU with beam 5 at
 * epoch ends, log every 100 updates, the default family with its default configuration. */
trainer_options_t trainer_default_options(void);

/* Figures of a finished run (for the CLI's summary and the tests). */
typedef struct {
    long updates;               /* total updates (including those before a resume) */
    int64_t epochs;             /* epochs begun */
    double best_valid_loss;     /* lowest validation loss (per target token; +inf when none) */
    double best_bleu;           /* highest epoch-end BLEU (-1 when none) */
    double last_valid_loss;
    double last_bleu;
    double train_seconds;       /* seconds of this run in forward/backward/update */
    int64_t train_tokens;       /* target tokens of this run's updates */
    const char *stop_reason;    /* "max updates", "max epochs", "max time", "early stop", "interrupted" */
    char last_checkpoint[1024];
} trainer_result_t;

/* Runs (or resumes) training as the options say. Writes log lines to stderr (unless quiet) and to
 * save_dir/train.log. Returns an error naming the file, option or update at fault. */
tern_status_t trainer_run(const trainer_options_t *o, trainer_result_t *result);

#endif
