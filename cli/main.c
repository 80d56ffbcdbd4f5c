/* main.c: the `inflight` binary: dispatches to its subcommands (cli.h). */
#include <stdio.h>
#include <string.h>

#include "cli.h"

static void usage(FILE *f)
{
    fprintf(f, "usage: inflight <command> [options]\n"
               "\n"
               "commands:\n"
               "  generate     stream a completion of a prompt to stdout\n"
               "  tokenize     print the GPT-2 token ids of stdin\n"
               "  make-model   write a random GPT-2 in the Hugging Face layout\n"
               "  serve        the chat page and WebSocket API in front of both batchers\n"
               "  client       the terminal demo and the benchmark against a running server\n"
               "  db           the request log's schema: migrate, status\n"
               "  bench        measure the scheduler in-process (or the engine: --engine)\n"
               "  version      print the version\n"
               "\n"
               "Run 'inflight <command> --help' for the options of a command.\n");
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    const char *cmd = argv[1];
    static const struct {
        const char *name;
        int (*fn)(int, char **);
    } cmds[] = {
        {"generate", cmd_generate}, {"tokenize", cmd_tokenize}, {"make-model", cmd_make_model},
        {"bench", cmd_bench},
#ifdef INFLIGHT_HAVE_SERVER
        {"serve", cmd_serve},       {"client", cmd_client},     {"db", cmd_db},
#endif
    };
    for (size_t i = 0; i < sizeof cmds / sizeof cmds[0]; i++)
        if (!strcmp(cmd, cmds[i].name))
            return cmds[i].fn(argc - 1, argv + 1);
#ifndef INFLIGHT_HAVE_SERVER
    if (!strcmp(cmd, "serve") || !strcmp(cmd, "client") || !strcmp(cmd, "db")) {
        fprintf(stderr,
                "inflight: '%s' is not in this build (configured with INFLIGHT_SERVER=OFF: "
                "no libwebsockets or SQLite)\n",
                cmd);
        return 2;
    }
#endif
    if (!strcmp(cmd, "version") || !strcmp(cmd, "--version")) {
        printf("inflight %s\n", INFLIGHT_VERSION);
        return 0;
    }
    if (!strcmp(cmd, "help") || !strcmp(cmd, "--help") || !strcmp(cmd, "-h")) {
        usage(stdout);
        return 0;
    }
    fprintf(stderr, "inflight: unknown command '%s'\n\n", cmd);
    usage(stderr);
    return 2;
}
