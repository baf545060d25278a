/* extras.h — the files that steer a stream's search (suppressed sequences, target prefixes,
 * restricted paths, LMBR evidence) turned into the search's global and per-sentence data. Files of
 * one line per input are read in step with the input; n-best files are read whole. A file whose
 * lines do not match the input, an unknown piece, a line too long: a warning that names the file and
 * line, and the input line is still translated (one output line per input line). */
#ifndef TERN_BATCH_EXTRAS_H
#define TERN_BATCH_EXTRAS_H

#include "translator.h"

typedef struct decode_extras decode_extras_t;

/* *out is NULL when the options name no such file. */
tern_status_t extras_open(decode_extras_t **out, const tern_model_t *m, const tern_translate_options_t *o);
/* LMBR's lambda as run: o->lmbr_lambda, or when it is 0 (the default) 0.5 divided by the model's
 * number of members (1 for a single model), the paper's setting. */
float extras_lmbr_lambda(const tern_model_t *m, const tern_translate_options_t *o);
const search_global_t *extras_global(const decode_extras_t *x);
/* Data of input line `line` (from 0); lines must come in order. *out: free with extras_sentence_free. */
tern_status_t extras_next(decode_extras_t *x, long line, search_sentence_t **out);
void extras_sentence_free(search_sentence_t *s);
/* Warns about file lines beyond the `lines` input lines, then frees. */
void extras_close(decode_extras_t *x, long lines);

#endif
