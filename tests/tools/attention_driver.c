/* attention_driver.c — tern_translate() with tern_request_t.attention through the public C API, for
 * tests/test_attention.py: for each source line, one line per hypothesis:
 *   hypothesis pieces ||| T S ||| the T x S weights, row-major, space-separated (%.9g)
 *
 * usage: attention_driver MODEL_DIR BEAM NUM_HYPOTHESES < SOURCES (pre-tokenized, one a line) */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tern.h"

int main(int argc, char **argv) {
    if (argc != 4) {
        fprintf(stderr, "usage: attention_driver MODEL_DIR BEAM NUM_HYPOTHESES < SOURCES\n");
        return 2;
    }
    char **src = NULL, *line = NULL;
    size_t cap = 0;
    ssize_t r;
    int n = 0;
    while ((r = getline(&line, &cap, stdin)) >= 0) {
        while (r > 0 && (line[r - 1] == '\n' || line[r - 1] == '\r')) line[--r] = 0;
        src = realloc(src, (size_t)(n + 1) * sizeof *src);
        src[n++] = strdup(line);
    }
    free(line);
    tern_model_t *model = NULL;
    tern_translator_t *tr = NULL;
    tern_model_options_t mo = tern_model_default_options();
    mo.compute_type = TERN_COMPUTE_FLOAT32;
    tern_translator_options_t to = tern_translator_default_options();
    to.threads_per_worker = 1;
    if (tern_model_load(&model, argv[1], &mo) || tern_translator_create(&tr, model, &to)) {
        fprintf(stderr, "attention_driver: %s\n", tern_last_error());
        return 1;
    }
    tern_search_params_t p = tern_model_search_params(model, NULL);
    p.beam_size = atoi(argv[2]);
    p.num_hypotheses = atoi(argv[3]);
    p.max_decoding_length = 40;
    tern_request_t req = tern_request_default();
    req.sources = (const char *const *)src;
    req.num_sources = n;
    req.params = &p;
    req.pretokenized = 1;
    tern_result_t *res = calloc((size_t)n + 1, sizeof *res);
    tern_attention_t *att = calloc((size_t)n + 1, sizeof *att);
    req.attention = att;
    if (tern_translate(tr, &req, res)) {
        fprintf(stderr, "attention_driver: %s\n", tern_last_error());
        return 1;
    }
    for (int i = 0; i < n; i++) {
        for (int k = 0; k < res[i].num_hypotheses; k++) {
            int T = att[i].target_lengths[k], S = att[i].source_length;
            printf("%s ||| %d %d |||", res[i].hypotheses[k], T, S);
            for (int j = 0; j < T * S; j++) printf(" %.9g", att[i].weights[k][j]);
            printf("\n");
        }
        tern_result_free(&res[i]);
        tern_attention_free(&att[i]);
        free(src[i]);
    }
    free(res), free(att), free(src);
    tern_translator_free(tr);
    tern_model_free(model);
    return 0;
}
