/* spm.h — C interface to SentencePiece (the shim spm.cc is the only C++ in Tern). */
#ifndef TERN_SPM_H
#define TERN_SPM_H

#include "../base/base.h"

typedef struct spm spm_t;

tern_status_t spm_load(spm_t **out, const char *path);
void spm_free(spm_t *s);

/* Encodes text (len bytes, need not be NUL-terminated; invalid UTF-8 never crashes) into pieces.
 * *pieces is one malloc'd block: an array of n pointers followed by the strings; free(*pieces). */
tern_status_t spm_encode(const spm_t *s, const char *text, size_t len, char ***pieces, int *n);
/* Decodes pieces into text (malloc'd, NUL-terminated). */
tern_status_t spm_decode(const spm_t *s, const char *const *pieces, int n, char **text);

/* Trains a model (sentencepiece_train); args as SentencePieceTrainer::Train takes them. */
tern_status_t spm_train(const char *args);

#endif
