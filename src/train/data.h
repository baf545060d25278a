/*
 * data.h — the training data pipeline: raw parallel text -> token ids (SentencePiece and the
 * model directory's vocabularies, as the inference encodes) -> a binary cache on disk,
 * memory-mapped -> length-filtered pairs -> batches cut by a token budget from length-sorted
 * order, shuffled per epoch with a seed, with an iterator state that can be saved and restored.
 *
 * Legend: B pairs in a batch, S source length, T target length (both padded to the batch's
 * longest, special tokens included).
 *
 * The cache (docs/training-data.md has the byte layout) holds EVERY line pair of the files,
 * encoded once, without special tokens; it records a hash of the inputs (sizes and modification
 * times of the text files, bytes of the SentencePiece models, the vocabularies' tokens) and is
 * rebuilt when that hash or its own checksum does not match. Building streams the files (bounded
 * memory); later runs map the file and touch only what they read. Length filters and special
 * tokens apply when a corpus is opened, so changing them needs no re-encoding.
 *
 * Token ids and special tokens follow the inference side (src/model/model.c): pieces are looked
 * up in the vocabulary (unknown pieces -> unk), the source gets bos/eos as config.json's
 * add_source_bos/add_source_eos say, the decoder input starts with decoder_start_token and the
 * target output ends with eos_token; padding is config.json's "pad_token" (default "<pad>"),
 * which must have the same id on both sides.
 */
#ifndef TERN_TRAIN_DATA_H
#define TERN_TRAIN_DATA_H

#include <stdint.h>

#include "base/base.h"
#include "text/spm.h"
#include "text/vocab.h"

/* ------------------------------------------------------------ vocabularies and special tokens */

typedef struct {
    vocab_t *src_vocab, *tgt_vocab;    /* owned; tgt_vocab == src_vocab when shared */
    spm_t *src_spm, *tgt_spm;          /* owned; NULL: pre-tokenized text (space-separated pieces) */
    char src_spm_path[1024], tgt_spm_path[1024]; /* "" when none; equal when one model serves both */
    char generation_path[1024];        /* the vocabulary directory's generation_config.json ("" none):
                                        * copied into every checkpoint (decoding defaults, bad_words_ids) */
    model_config_t cfg;                /* special tokens, add_source_bos/eos */
    char pad_token[64];
    int src_bos, src_eos, src_unk;     /* source ids (-1: absent) */
    int tgt_start, tgt_eos, tgt_unk;   /* target ids */
    int pad_id;                        /* both sides */
} data_vocab_t;

/* Loads what a model directory (or one written by `tern vocab --model-dir`) holds for encoding:
 * config.json (optional), shared_vocabulary.json or source_/target_vocabulary.json (.txt too),
 * and the SentencePiece model(s) the inference would find (source.spm, sentencepiece.model,
 * spm.model, source.model; target.spm, target.model); none: pre-tokenized text. */
tern_status_t data_vocab_load(data_vocab_t *v, const char *dir);
/* Takes ownership of src_vocab and tgt_vocab (may be the same pointer); spm paths may be NULL
 * (pre-tokenized) and tgt_spm NULL means src_spm; cfg NULL: model_config_defaults; pad_token
 * NULL: "<pad>". On error the vocabularies are freed too. */
tern_status_t data_vocab_init(data_vocab_t *v, vocab_t *src_vocab, vocab_t *tgt_vocab, const char *src_spm,
                              const char *tgt_spm, const model_config_t *cfg, const char *pad_token);
void data_vocab_free(data_vocab_t *v);
/* One line of text -> vocabulary ids, without special tokens (*ids malloc'd; *n may be 0).
 * side 0 source, 1 target. *n_unk counts the pieces that were not in the vocabulary. */
tern_status_t data_vocab_encode(const data_vocab_t *v, int side, const char *text, size_t len, int32_t **ids,
                                int *n, int *n_unk);

/* ------------------------------------------------------------ corpus (cache) */

typedef struct {
    int max_src_len;   /* pairs whose source (special tokens included) is longer are skipped (256) */
    int max_tgt_len;   /* same for the target, counted as T = tokens + 1 (256); both <= 65535 */
    float max_ratio;   /* skip when max(ns, nt) / min(ns, nt) > max_ratio, token counts without
                          special tokens (9, as Moses' clean-corpus-n); 0: no ratio filter */
    int threads;       /* encoding threads when the cache is built (0: OpenMP's default) */
} data_options_t;

data_options_t data_default_options(void);

typedef struct {
    int64_t pairs;                    /* line pairs in the files */
    int64_t kept;                     /* pairs that batches draw from */
    int64_t empty, too_long, bad_ratio; /* skipped, each pair counted once, in this order */
    int64_t src_tokens, tgt_tokens;   /* real tokens of the kept pairs: S and T sums */
    int64_t src_unk, tgt_unk;         /* pieces mapped to unk when encoding (all pairs) */
    int rebuilt;                      /* 1: this open (re)built the cache; 0: mapped it as it was */
    double build_seconds;             /* encoding time when rebuilt */
    uint64_t cache_bytes;
} data_stats_t;

typedef struct data_corpus data_corpus_t;

/* Maps cache_path when it is valid for these inputs, else (re)builds it from the text files
 * (written to cache_path.tmp.<pid> then renamed, so concurrent builders and kills are safe), then
 * applies the length filters. stats (may be NULL) gets the counts. */
tern_status_t data_corpus_open(data_corpus_t **out, const char *cache_path, const char *src_path,
                               const char *tgt_path, const data_vocab_t *v, const data_options_t *o,
                               data_stats_t *stats);
void data_corpus_free(data_corpus_t *c);
int64_t data_corpus_pairs(const data_corpus_t *c);
/* Pair i (0-based line number) as stored: ids without special tokens, pointing into the map. */
void data_corpus_pair(const data_corpus_t *c, int64_t i, const int32_t **src, int *ns, const int32_t **tgt,
                      int *nt);
/* 1 when pair i passed the filters. */
int data_corpus_kept(const data_corpus_t *c, int64_t i);

/* ------------------------------------------------------------ batches */

typedef struct {
    int max_tokens;    /* B * max(S, T) <= max_tokens (fairseq's --max-tokens); >= the length limits */
    int max_sentences; /* B <= max_sentences (0: no limit) */
    int shuffle;       /* 1: batch order shuffled every epoch (training); 0: length order (validation) */
    uint64_t seed;     /* ties in the length sort and the shuffles */
    int rank, world;   /* data parallel: this process takes batches rank, rank + world, ... of every
                          epoch's order (world 1: all); each rank gets floor(batches / world) */
} data_batching_t;

data_batching_t data_default_batching(void); /* 4096 tokens, no sentence limit, shuffle, seed 1, 0/1 */

typedef struct {
    int B, S, T;
    const int32_t *src;      /* (B, S) right-padded with pad_id */
    const int32_t *src_len;  /* (B) tokens before padding, special tokens included */
    const int32_t *tgt_in;   /* (B, T) decoder input: decoder start token, then the target */
    const int32_t *tgt_out;  /* (B, T) the target, then eos; pad where no loss */
    const int32_t *tgt_len;  /* (B) tokens before padding (target + 1) */
    const int64_t *ids;      /* (B) line numbers of the pairs (0-based) in their corpus */
    int pad_id;
    int n_src_tokens;        /* sum of src_len */
    int n_tgt_tokens;        /* sum of tgt_len: the tokens the loss counts */
    const int32_t *corpus;   /* (B) which corpus of data_iter_new_mix each pair comes from */
} data_batch_t;

/* Where an iterator stands; restoring it replays exactly the same batches. */
typedef struct {
    uint64_t seed;       /* data_batching_t.seed */
    int64_t epoch;       /* current epoch, from 0 */
    int64_t pos;         /* batches of this epoch already returned (to this rank) */
    uint64_t rng;        /* shuffling generator state at the start of this epoch */
    int64_t n_batches;   /* batches per epoch of the plan (all ranks) */
    uint64_t plan_hash;  /* hash of the plan (pairs of every batch); a restore checks it */
} data_iter_state_t;

typedef struct data_iter data_iter_t;

/* Plans the batches (sorts the kept pairs by source then target length, ties in seeded random
 * order, and cuts them greedily by the budget) and allocates buffers for the largest batch: no
 * allocation per batch afterwards. The corpus must outlive the iterator. */
tern_status_t data_iter_new(data_iter_t **out, const data_corpus_t *c, const data_batching_t *b);
/* Several corpora mixed by weight (fairseq-style resampling, drawn again every epoch): corpus k
 * contributes floor(w_k) copies of each of its kept pairs plus round(frac(w_k) x kept_k) distinct
 * kept pairs drawn uniformly without replacement (a generator keyed by the seed, the epoch and k),
 * so an epoch has exactly sum_k of those counts; the drawn pairs are then length-sorted, cut and
 * shuffled as one corpus. weights NULL: all 1; every weight > 0 and finite. One corpus of weight 1
 * is data_iter_new (one plan for every epoch). Buffers (and data_iter_max_shape) are sized for any
 * epoch's plan. The corpora must outlive the iterator. */
tern_status_t data_iter_new_mix(data_iter_t **out, const data_corpus_t *const *corpora, const double *weights,
                                int n_corpora, const data_batching_t *b);
int data_iter_corpora(const data_iter_t *it);
/* Pairs of corpus k in the current epoch's plan (all ranks; batches a rank drops included). */
int64_t data_iter_epoch_count(const data_iter_t *it, int k);
void data_iter_free(data_iter_t *it);
/* The next batch (*batch points into the iterator, valid until the next call), or *batch = NULL
 * at the end of an epoch — the state has then moved to the start of the next epoch. */
tern_status_t data_iter_next(data_iter_t *it, const data_batch_t **batch);
data_iter_state_t data_iter_state(const data_iter_t *it);
/* Back to a saved state (same corpus, filters and batching, else TERN_ERR_MISMATCH). */
tern_status_t data_iter_restore(data_iter_t *it, const data_iter_state_t *s);
int64_t data_iter_batches_per_epoch(const data_iter_t *it); /* for this rank */
/* Largest batch of the plan: for sizing the model's workspace (tmodel_ws_new). */
void data_iter_max_shape(const data_iter_t *it, int *max_B, int *max_S, int *max_T, int *max_src_tokens,
                         int *max_tgt_tokens);

#endif
