/* cmd_translate.c — `tern translate` (not implemented yet). */
#include <stdio.h>
#include "cli.h"

int cmd_translate(int argc, char **argv) {
    (void)argc;
    (void)argv;
    fprintf(stderr, "tern translate: not implemented yet\n");
    return 1;
}
