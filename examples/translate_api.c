/*
 * translate_api.c — Tern's C API in one page: load a model, create a translator, translate a
 * batch of sentences, print the n-best lists with their scores, and report errors.
 *
 *   build/examples/translate_api MODEL_DIR [BEAM] < sentences.txt
 *
 * Reads up to 64 lines from stdin, translates them as one batch and prints, for each line,
 * "i ||| hypothesis ||| score" for its hypotheses (best first).
 *
 * Against an installed Tern: cc -std=c11 translate_api.c $(pkg-config --cflags --libs tern)
 */
#define _POSIX_C_SOURCE 200809L /* strdup */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tern.h"

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: %s MODEL_DIR [BEAM] < sentences.txt\n", argv[0]);
        return 2;
    }
    int beam = argc > 2 ? atoi(argv[2]) : 4;

    /* 1. The model: read-only weights, vocabularies and tokenizers, shareable between threads. */
    tern_model_options_t mo = tern_model_default_options();
    tern_model_t *model = NULL;
    tern_status_t st = tern_model_load(&model, argv[1], &mo);
    if (st != TERN_OK) {
        fprintf(stderr, "cannot load %s: %s: %s\n", argv[1], tern_status_string(st), tern_last_error());
        return 1;
    }

    /* 2. A translator: per-thread state. Options start from the defaults; the search parameters
     *    start from the model's own (its generation_config.json over Tern's defaults), and those
     *    given here are the translator's defaults (a request may bring its own). */
    tern_search_params_t sp = tern_model_search_params(model, NULL);
    sp.beam_size = beam > 0 ? beam : 1;
    sp.num_hypotheses = sp.beam_size < 2 ? sp.beam_size : 2;
    tern_translator_options_t to = tern_translator_default_options();
    to.search = &sp;
    to.threads_per_worker = 1;
    tern_translator_t *tr = NULL;
    if ((st = tern_translator_create(&tr, model, &to)) != TERN_OK) {
        fprintf(stderr, "cannot create a translator: %s\n", tern_last_error());
        tern_model_free(model);
        return 1;
    }

    /* 3. A batch of raw sentences (SentencePiece is applied when the model ships one). */
    char *lines[64];
    int n = 0;
    char buf[8192];
    while (n < 64 && fgets(buf, sizeof buf, stdin)) {
        buf[strcspn(buf, "\r\n")] = 0;
        lines[n++] = strdup(buf);
    }
    /* 4. One request: the sources (and, when needed, per-source prefixes or constraints, its own
     *    search parameters, callbacks, a cancellation flag). */
    tern_result_t results[64];
    tern_request_t req = tern_request_default();
    req.sources = (const char *const *)lines;
    req.num_sources = n;
    st = tern_translate(tr, &req, results);
    if (st != TERN_OK) {
        fprintf(stderr, "translation failed: %s: %s\n", tern_status_string(st), tern_last_error());
    } else {
        for (int i = 0; i < n; i++) {
            for (int k = 0; k < results[i].num_hypotheses; k++)
                printf("%d ||| %s ||| %.6f\n", i, results[i].hypotheses[k],
                       results[i].scores ? results[i].scores[k] : 0.0f);
            tern_result_free(&results[i]);
        }
    }
    for (int i = 0; i < n; i++) free(lines[i]);
    tern_translator_free(tr);
    tern_model_free(model);
    return st == TERN_OK ? 0 : 1;
}
