/* cli.h — the subcommands of the `tern` command-line tool and the helpers they share. Each
 * subcommand returns the process exit code (0 ok, 1 error, 2 usage error). The CLI is a thin user
 * of the library (include/tern.h). */
#ifndef TERN_CLI_H
#define TERN_CLI_H

#include <stdio.h>

#include "tern.h"

int cmd_translate(int argc, char **argv);
int cmd_rescore(int argc, char **argv);
int cmd_info(int argc, char **argv);
int cmd_score(int argc, char **argv);
int cmd_filter(int argc, char **argv);
int cmd_convert(int argc, char **argv);
int cmd_vocab(int argc, char **argv);
int cmd_average(int argc, char **argv);
int cmd_train(int argc, char **argv);
int cmd_cpu(int argc, char **argv);
int cmd_serve(int argc, char **argv);

/* Strict parsing of an option's value in [lo, hi]; prints "tern CMD: OPT expects ..." and
 * returns 0 on a bad value. */
int cli_int(const char *cmd, const char *opt, const char *s, int lo, int hi, int *out);
int cli_float(const char *cmd, const char *opt, const char *s, float lo, float hi, float *out);
/* Opens path ("-" or NULL: stdin/stdout by mode); prints the error naming the file on failure. */
FILE *cli_open(const char *cmd, const char *path, const char *mode);
void cli_close(FILE *f);
/* Prints "tern CMD: <status>: <last error>" and returns 1. */
int cli_fail(const char *cmd, tern_status_t st);

#endif
