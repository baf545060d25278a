/* prefix_api_driver.c — tern_translate_batch_prefix() through the public C API, for
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
    tern_translate_options_t o = tern_translate_default_options();
    o.beam_size = atoi(argv[2]);
    o.threads_per_worker = 1;
    tern_translator_t *tr = NULL;
    if (tern_translator_create(&tr, m, &o)) return 1;
    int n = 0, np = 0;
    char **src = read_lines(argv[3], &n), **pre = read_lines(argv[4], &np);
    if (!src || !pre || n != np) return 1;
    tern_result_t *res = calloc((size_t)n, sizeof *res);
    if (tern_translate_batch_prefix(tr, (const char *const *)src, (const char *const *)pre, n, res)) {
        fprintf(stderr, "%s\n", tern_last_error());
        return 1;
    }
    for (int i = 0; i < n; i++) {
        printf("%s ||| %.6f\n", res[i].hypotheses[0], res[i].scores[0]);
        tern_result_free(&res[i]);
        free(src[i]), free(pre[i]);
    }
    free(res), free(src), free(pre);
    tern_translator_free(tr);
    tern_model_free(m);
    return 0;
}
