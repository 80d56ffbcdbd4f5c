/* cmd_client.c: `inflight client` (placeholder until the client lands in this change). */
#include <stdio.h>

#include "cli.h"

int cmd_client(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    fprintf(stderr, "inflight client: not built yet\n");
    return 1;
}
