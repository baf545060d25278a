/* extras.h — what a request steers the search with, in memory (tern_request_t: suppressed
 * sequences and LMBR parameters; tern_source_extras_t: each source's prefix, constraints,
 * restriction and LMBR evidence), turned into the search's global and per-sentence data. A bad
 * entry (an unknown piece, a phrase, prefix or hypothesis longer than the maximum length) is a
 * warning naming the entry's origin (tern_text_t.origin, prefix_origin, constraints_origin), and
 * the source is still translated. The library opens no file here: the CLI reads them
 * (tools/cli_extras.c). */
#ifndef TERN_BATCH_EXTRAS_H
#define TERN_BATCH_EXTRAS_H

#include "batch/translator.h"

typedef struct request_extras request_extras_t;

/* The request's global data (req->suppress, req->lmbr) for the call's parameters, and the context
 * extras_sentence() converts each source's extras with. */
tern_status_t extras_new(request_extras_t **out, const tern_model_t *m, const tern_request_t *req,
                         const translator_call_t *call);
/* NULL when the request has neither suppressed sequences nor LMBR. */
const search_global_t *extras_global(const request_extras_t *x);
/* Source i's search data from e (always a sentence, empty when e gives nothing); free with
 * extras_sentence_free. */
tern_status_t extras_sentence(const request_extras_t *x, long i, const tern_source_extras_t *e,
                              search_sentence_t **out);
void extras_sentence_free(search_sentence_t *s);
void extras_free(request_extras_t *x);

#endif
