/* cmd_score.c — `tern score` (not implemented yet). */
#include <stdio.h>
#include "cli.h"

int cmd_score(int argc, char **argv) {
    (void)argc;
    (void)argv;
    fprintf(stderr, "tern score: not implemented yet\n");
    return 1;
}
