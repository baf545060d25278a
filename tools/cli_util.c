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
