/* cli.h — the subcommands of the `tern` command-line tool. Each returns the process exit code
 * (0 ok, 1 error, 2 usage error). The CLI is a thin user of the library. */
#ifndef TERN_CLI_H
#define TERN_CLI_H

int cmd_translate(int argc, char **argv);
int cmd_rescore(int argc, char **argv);
int cmd_info(int argc, char **argv);
int cmd_score(int argc, char **argv);
int cmd_filter(int argc, char **argv);
int cmd_convert(int argc, char **argv);

#endif
