/* cli_util.c — small helpers shared by the subcommands: strict number parsing, file opening. */
#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

int cli_int(const char *cmd, const char *opt, const char *s, int lo, int hi, int *out) {
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || end == s || *end || v < lo || v > hi) {
        fprintf(stderr, "tern %s: %s expects an integer in %d..%d, got '%s'\n", cmd, opt, lo, hi, s);
        return 0;
    }
    *out = (int)v;
    return 1;
}

int cli_float(const char *cmd, const char *opt, const char *s, float lo, float hi, float *out) {
    char *end;
    errno = 0;
    float v = strtof(s, &end);
    if (errno || end == s || *end || !(v >= lo && v <= hi)) {
        fprintf(stderr, "tern %s: %s expects a number in %g..%g, got '%s'\n", cmd, opt, lo, hi, s);
        return 0;
    }
    *out = v;
    return 1;
}

FILE *cli_open(const char *cmd, const char *path, const char *mode) {
    if (!path || !strcmp(path, "-")) return mode[0] == 'r' ? stdin : stdout;
    FILE *f = fopen(path, mode);
    if (!f) fprintf(stderr, "tern %s: cannot open '%s': %s\n", cmd, path, strerror(errno));
    return f;
}

void cli_close(FILE *f) {
    if (f && f != stdin && f != stdout) fclose(f);
}

int cli_fail(const char *cmd, tern_status_t st) {
    fprintf(stderr, "tern %s: %s: %s\n", cmd, tern_status_string(st), tern_last_error());
    return 1;
}

int cli_models_add(const char *cmd, cli_models_t *m, const char *dir) {
    if (m->n >= CLI_MAX_MODELS) {
        fprintf(stderr, "tern %s: at most %d models (-m)\n", cmd, CLI_MAX_MODELS);
        return 0;
    }
    m->dirs[m->n++] = dir;
    return 1;
}

int cli_models_weights(const char *cmd, cli_models_t *m, const char *list) {
    m->n_weights = 0;
    m->ensemble = 1;
    for (const char *p = list;;) {
        char *end;
        errno = 0;
        float v = strtof(p, &end);
        if (errno || end == p || !(v > 0) || v > 1e30f || (*end && *end != ',') || m->n_weights >= CLI_MAX_MODELS) {
            fprintf(stderr, "tern %s: --ensemble-weights expects positive numbers separated by commas, got '%s'\n",
                    cmd, list);
            return 0;
        }
        m->weights[m->n_weights++] = v;
        if (!*end) return 1;
        p = end + 1;
    }
}

int cli_models_mode(const char *cmd, cli_models_t *m, const char *s) {
    m->ensemble = 1;
    if (!strcmp(s, "logprob-mean")) m->mode = TERN_ENSEMBLE_LOGPROB_MEAN;
    else if (!strcmp(s, "prob-mean")) m->mode = TERN_ENSEMBLE_PROB_MEAN;
    else if (!strcmp(s, "logit-mean")) m->mode = TERN_ENSEMBLE_LOGIT_MEAN;
    else {
        fprintf(stderr, "tern %s: --ensemble-mode is logprob-mean, prob-mean or logit-mean, got '%s'\n", cmd, s);
        return 0;
    }
    return 1;
}

int cli_models_load(const char *cmd, const cli_models_t *m, const tern_model_options_t *o, tern_model_t **out) {
    *out = NULL;
    if (m->n == 0) {
        fprintf(stderr, "tern %s: no model (-m DIR); see tern %s --help\n", cmd, cmd);
        return 2;
    }
    if (m->n_weights && m->n_weights != m->n) {
        fprintf(stderr, "tern %s: --ensemble-weights gives %d weights for %d models\n", cmd, m->n_weights, m->n);
        return 2;
    }
    /* names of installed models become their directories (cli_models.c) */
    enum { DIR_MAX = 4096 };
    char *bufs = malloc((size_t)m->n * DIR_MAX);
    const char *dirs[CLI_MAX_MODELS];
    if (!bufs) {
        fprintf(stderr, "tern %s: out of memory\n", cmd);
        return 1;
    }
    for (int i = 0; i < m->n; i++)
        if (!(dirs[i] = cli_model_dir(cmd, m->dirs[i], bufs + (size_t)i * DIR_MAX, DIR_MAX))) {
            free(bufs);
            return 1;
        }
    tern_status_t st = m->n == 1 && !m->ensemble
                           ? tern_model_load(out, dirs[0], o)
                           : tern_model_load_ensemble(out, dirs, m->n, m->n_weights ? m->weights : NULL, m->mode, o);
    free(bufs);
    return st ? cli_fail(cmd, st) : 0;
}

