/* spm.h — C interface to SentencePiece (the shim spm.cc is the only C++ in Tern). */
#ifndef TERN_SPM_H
#define TERN_SPM_H

#include "base/base.h"

typedef struct spm spm_t;

tern_status_t spm_load(spm_t **out, const char *path);
void spm_free(spm_t *s);

/* Encodes text (len bytes, need not be NUL-terminated; invalid UTF-8 never crashes) into pieces.
 * *pieces is one malloc'd block: an array of n pointers followed by the strings; free(*pieces). */
tern_status_t spm_encode(const spm_t *s, const char *text, size_t len, char ***pieces, int *n);
/* Decodes pieces into text (malloc'd, NUL-terminated). */
tern_status_t spm_decode(const spm_t *s, const char *const *pieces, int n, char **text);

/* Trains a model (sentencepiece_train; src/text/spm_train.cc, in the training library); args as
 * SentencePieceTrainer::Train takes them. */
tern_status_t spm_train(const char *args);

/* The model's pieces: count, and the piece of an id (NULL when out of range; valid while s lives). */
int spm_piece_count(const spm_t *s);
const char *spm_id_to_piece(const spm_t *s, int id);

/* Training options of spm_train_files() (src/text/spm_train.cc); start from
 * spm_train_default_options(), whose values are noted in parentheses. */
typedef struct {
    const char *const *inputs;  /* text files, one sentence a line (all read, in order) */
    int n_inputs;
    const char *model_prefix;   /* writes PREFIX.model and PREFIX.vocab */
    int vocab_size;             /* pieces, specials included (8000) */
    const char *model_type;     /* "unigram", "bpe", "char", "word" ("unigram") */
    float character_coverage;   /* share of characters covered, the rest map to <unk> (1.0) */
    long input_sentence_size;   /* 0: every line; else a uniform random sample of this many lines,
                                   drawn with seed (by the shim: the library's ignores its seed) (0) */
    unsigned seed;              /* the sample, and SentencePiece's random generator (1) */
    int threads;                /* trainer threads (1) */
    int pad_id, unk_id, bos_id, eos_id; /* ids of <pad> <unk> <s> </s>; -1 disables one (0 1 2 3) */
    const char *user_symbols;   /* comma-separated pieces always kept whole, or NULL (NULL) */
    int max_sentence_length;    /* bytes; longer sentences are skipped (4192) */
    int verbose;                /* 1: SentencePiece's progress log on stderr (0) */
} spm_train_options_t;

spm_train_options_t spm_train_default_options(void);

/* Trains a SentencePiece model through libsentencepiece's trainer, reading the inputs itself
 * (an unreadable input gives TERN_ERR_IO naming the file). */
tern_status_t spm_train_files(const spm_train_options_t *o);

#endif
