/* cmd_rescore.c — `tern rescore` (not implemented yet). */
#include <stdio.h>
#include "cli.h"

int cmd_rescore(int argc, char **argv) {
    (void)argc;
    (void)argv;
    fprintf(stderr, "tern rescore: not implemented yet\n");
    return 1;
}
