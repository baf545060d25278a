/* cmd_info.c — `tern info` (not implemented yet). */
#include <stdio.h>
#include "cli.h"

int cmd_info(int argc, char **argv) {
    (void)argc;
    (void)argv;
    fprintf(stderr, "tern info: not implemented yet\n");
    return 1;
}
