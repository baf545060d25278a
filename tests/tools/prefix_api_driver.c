/* prefix_api_driver.c — tern_translate() with target prefixes (tern_source_extras_t) through the public C API, for
 * tests/test_search_constraints.py: prints one "hypothesis ||| score" line per source line.
 *
 * usage: prefix_api_driver MODEL_DIR BEAM SOURCES PREFIXES (pre-tokenized files, one line each) */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tern.h"

static char **read_lines(const char *path, int *n) {
    FILE *f = fopen(path, "r");
    if (!f) return NULL;
    char **v = NULL, *line = NULL;
    size_t cap = 0;
    ssize_t r;
    *n = 0;
    while ((r = getline(&line, &cap, f)) >= 0) {
        while (r > 0 && (line[r - 1] == '\n' || line[r - 1] == '\r')) line[--r] = 0;
        v = realloc(v, (size_t)(*n + 1) * sizeof *v);
        v[(*n)++] = strdup(line);
    }
    free(line);
    fclose(f);
    return v;
}

int main(int argc, char **argv) {
    if (argc != 5) {
        fprintf(stderr, "usage: prefix_api_driver MODEL_DIR BEAM SOURCES PREFIXES\n");
        return 2;
    }
    tern_model_options_t mo = tern_model_default_options();
    mo.use_spm = 0;
    tern_model_t *m = NULL;
    if (tern_model_load(&m, argv[1], &mo)) {
        fprintf(stderr, "%s\n", tern_last_error());
        return 1;
    }
    tern_search_params_t sp = tern_search_default_params();
    sp.beam_size = atoi(argv[2]);
    tern_translator_options_t o = tern_translator_default_options();
    o.search = &sp;
    o.threads_per_worker = 1;
    tern_translator_t *tr = NULL;
    if (tern_translator_create(&tr, m, &o)) return 1;
    int n = 0, np = 0;
    char **src = read_lines(argv[3], &n), **pre = read_lines(argv[4], &np);
    if (!src || !pre || n != np) return 1;
    tern_result_t *res = calloc((size_t)n, sizeof *res);
    tern_source_extras_t *ex = calloc((size_t)n, sizeof *ex);
    const tern_source_extras_t **exp = calloc((size_t)n, sizeof *exp);
    for (int i = 0; i < n; i++) {
        ex[i].struct_size = sizeof ex[i];
        ex[i].target_prefix = pre[i];
        exp[i] = &ex[i];
    }
    tern_request_t req = tern_request_default();
    req.sources = (const char *const *)src;
    req.num_sources = n;
    req.extras = exp;
    if (tern_translate(tr, &req, res)) {
        fprintf(stderr, "%s\n", tern_last_error());
        return 1;
    }
    for (int i = 0; i < n; i++) {
        printf("%s ||| %.6f\n", res[i].hypotheses[0], res[i].scores[0]);
        tern_result_free(&res[i]);
        free(src[i]), free(pre[i]);
    }
    free(res), free(src), free(pre), free(ex), free(exp);
    tern_translator_free(tr);
    tern_model_free(m);
    return 0;
}
