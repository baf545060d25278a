/* cmd_filter.c — `tern filter` (not implemented yet). */
#include <stdio.h>
#include "cli.h"

int cmd_filter(int argc, char **argv) {
    (void)argc;
    (void)argv;
    fprintf(stderr, "tern filter: not implemented yet\n");
    return 1;
}
