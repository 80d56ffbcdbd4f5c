/* main.c: the `inflight` binary: dispatches to its subcommands (cli.h). */
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "cpu_isa.h"
#include "device.h"

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
               "  version      print the version (--devices: and the device and CPU kernels\n"
               "               serve would use here)\n"
               "\n"
               "Run 'inflight <command> --help' for the options of a command.\n");
}

/* The version; with devices, what --device auto and --isa auto resolve to on this machine (a
 * container's entry point prints it first, so a missing GPU is said at once). */
static int version(int devices)
{
    printf("inflight %s\n", INFLIGHT_VERSION);
    if (!devices)
        return 0;
    ifl_device got;
    char why[300];
    ifl_err err;
    if (ifl_device_resolve(IFL_DEVICE_AUTO, NULL, &got, why, (int)sizeof why, &err)) {
        printf("device: %s\n", err.msg);
        return 1;
    }
    printf("device: %s (%s)\n", ifl_device_name(got), why);
    printf("cpu: isa %s (the best this CPU has; it has %s)\n", ifl_isa_name(ifl_isa_best()),
           ifl_cpu_features());
    return 0;
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
    if (!strcmp(cmd, "version") || !strcmp(cmd, "--version"))
        return version(argc > 2 && !strcmp(argv[2], "--devices"));
    if (!strcmp(cmd, "help") || !strcmp(cmd, "--help") || !strcmp(cmd, "-h")) {
        usage(stdout);
        return 0;
    }
    fprintf(stderr, "inflight: unknown command '%s'\n\n", cmd);
    usage(stderr);
    return 2;
}
