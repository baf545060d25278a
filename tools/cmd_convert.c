/* cmd_convert.c — `tern convert` (not implemented yet). */
#include <stdio.h>
#include "cli.h"

int cmd_convert(int argc, char **argv) {
    (void)argc;
    (void)argv;
    fprintf(stderr, "tern convert: not implemented yet\n");
    return 1;
}
