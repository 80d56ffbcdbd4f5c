/* options.h: the one form of a subcommand's command-line options. Each command describes its
 * options as one table of cli_opt rows (name, short letter, type, range, default, destination
 * field, help); cli_parse reads argv with it (getopt_long), says what is wrong with a value
 * (naming the option and the value), sets the defaults and writes --help, all from that table.
 * The options every command spells alike (--model, --device, --isa, --max-tokens...) are rows
 * defined once below (CLI_OPT_*), so their names, letters, ranges and help agree everywhere. */
#ifndef IFL_OPTIONS_H
#define IFL_OPTIONS_H

#include <stddef.h>

typedef enum {
    CLI_HEADING,  /* no option: a heading line of the help (its text is `help`) */
    CLI_MODE,     /* a flag with no field: it chose this table (bench --engine) */
    CLI_FLAG,     /* int field set to 1 */
    CLI_FLAG_OFF, /* int field set to 0 (--no-...) */
    CLI_STR,      /* const char * field: the argument as given */
    CLI_WORD,     /* const char * field: one of `words` ("a|b|c") */
    CLI_INDEX,    /* int field: the index of the argument among `words` (an enum in that order) */
    CLI_I32,      /* int32_t field, in [lo, hi] */
    CLI_I64,      /* int64_t field, in [lo, hi] (hi 0: up to INT64_MAX) */
    CLI_U64,      /* uint64_t field, any non-negative integer */
    CLI_F64,      /* double field, in [lo, hi] (CLI_LO_OPEN: (lo, hi]) */
    CLI_CUSTOM,   /* parse(cmd, arg, field): 0, or -1 after printing what is wrong */
} cli_type;

enum {
    CLI_OPTIONAL_ARG = 1, /* --name or --name=VALUE (the value needs the '=') */
    CLI_LO_OPEN = 2,      /* CLI_F64: lo itself is out of range */
    /* A request's parameter (the option's name with '_' for '-' is a row of the parameter
     * table, server/params.h): its range is the table's where the table's is fixed (temperature,
     * top_p, the penalties; max_tokens' and top_k's are the command's), and so is its default
     * where the table's is its own (min_p, the penalties); a default the server sets (max_tokens,
     * temperature, top_k, top_p) is the command's (serve's and generate's: defaults.h's, as the
     * table's). */
    CLI_FROM_REQUEST = 4,
};

typedef struct {
    const char *name; /* long name, without "--" */
    char letter;      /* short option letter, 0: none */
    cli_type type;
    const char *arg; /* the value's name in the help (N, DIR); NULL for CLI_WORD/INDEX: words */
    double lo, hi;   /* range of CLI_I32/I64/F64 */
    const char *def; /* default, parsed into the field before argv; NULL: as the command set it */
    const char *def_text; /* the default in words, where it is no plain value ("one per core") */
    size_t off;           /* the field: offsetof(the command's options struct, field) */
    const char *words;    /* CLI_WORD, CLI_INDEX: the accepted words, '|'-separated */
    int (*parse)(const char *cmd, const char *arg, void *field); /* CLI_CUSTOM */
    unsigned flags;                                              /* CLI_OPTIONAL_ARG, ... */
    const char *help; /* one line of text, wrapped by cli_parse; "(default X)" is appended */
    /* Where the value's words and the help are computed (from a registry: --weights' formats),
     * writes them; NULL: arg and help as given. */
    void (*describe)(char *arg, size_t arg_cap, char *help, size_t help_cap);
} cli_opt;

typedef struct {
    const char *cmd;   /* as in "inflight CMD: ..." */
    const char *usage; /* the help before the option list (usage lines, what it does) */
    const cli_opt *opts;
    size_t n_opts;
    const char *unknown_hint; /* appended to "unknown option", or NULL */
    const char *extra_hint;   /* appended to "unexpected argument", or NULL */
} cli_spec;

#define CLI_SPEC(CMD, USAGE, TABLE, UNKNOWN_HINT, EXTRA_HINT)                                      \
    {                                                                                              \
        CMD, USAGE, TABLE, sizeof TABLE / sizeof TABLE[0], UNKNOWN_HINT, EXTRA_HINT                \
    }

/* Sets the table's defaults into dst (a struct of dst_size bytes), then parses argv[first..]
 * into it. --help / -h (every command has it) prints the help, with each option's default as dst
 * held before argv. Returns -1 when the command goes on, 0 after the help, 2 after a usage error
 * (printed: the option and the value, or an unknown option, a missing value, a stray
 * argument). */
int cli_parse(const cli_spec *spec, int argc, char **argv, int first, void *dst, size_t dst_size);

/* ---- the rows commands share (T: the command's options struct, F: its field) ---- */
#define CLI_ROW(NAME, LETTER, TYPE, ARG, LO, HI, T, F, HELP)                                       \
    {                                                                                              \
        .name = NAME, .letter = LETTER, .type = TYPE, .arg = ARG, .lo = LO, .hi = HI,              \
        .off = offsetof(T, F), .help = HELP                                                        \
    }
#define CLI_OPT_MODEL(T, F, HELP) CLI_ROW("model", 0, CLI_STR, "DIR", 0, 0, T, F, HELP)
#define CLI_OPT_THREADS(T, F)                                                                      \
    {                                                                                              \
        .name = "threads", .type = CLI_I32, .arg = "N", .lo = 1, .hi = 1024,                       \
        .def_text = "one per core", .off = offsetof(T, F), .help = "CPU threads"                   \
    }
/* TYPE: CLI_INDEX into an ifl_device, CLI_WORD into a string */
#define CLI_OPT_DEVICE(T, F, TYPE)                                                                 \
    {                                                                                              \
        .name = "device", .type = TYPE, .words = "auto|cpu|cuda", .off = offsetof(T, F),           \
        .help = "auto: the GPU when this build has the CUDA backend and one works, else the CPU; " \
                "the choice is printed"                                                            \
    }
#define CLI_OPT_ISA(T, F)                                                                          \
    {                                                                                              \
        .name = "isa", .type = CLI_CUSTOM, .arg = "auto|avx512|avx2|scalar", .def_text = "auto",   \
        .off = offsetof(T, F), .parse = cli_parse_isa,                                             \
        .help = "CPU kernels; auto: $INFLIGHT_ISA when set, else the best this CPU has (one it "   \
                "lacks is an error); the choice is printed"                                        \
    }
/* The formats and their help: the weight-format registry's (tensor.h), plus auto */
#define CLI_OPT_WEIGHTS(T, F)                                                                      \
    {                                                                                              \
        .name = "weights", .type = CLI_CUSTOM, .def_text = "auto: as stored",                      \
        .off = offsetof(T, F), .parse = cli_parse_weights, .describe = cli_describe_weights        \
    }
#define CLI_OPT_MAX_BATCH(T, F)                                                                    \
    CLI_ROW("max-batch", 0, CLI_I32, "N", 1, 1024, T, F, "most running sequences per batcher")
#define CLI_OPT_STEP_TOKENS(T, F)                                                                  \
    CLI_ROW("step-tokens", 0, CLI_I32, "N", 1, 1 << 16, T, F,                                      \
            "token budget of one step (raised to max-batch if below)")
/* TYPE: CLI_INDEX into a no_prefix_cache int ("on|off"), CLI_WORD into a string */
#define CLI_OPT_PREFIX_CACHE(T, F, TYPE, WORDS)                                                    \
    {                                                                                              \
        .name = "prefix-cache", .type = TYPE, .words = WORDS, .off = offsetof(T, F),               \
        .help = "keep the KV of full prompt blocks and reuse it for requests that begin the same " \
                "way (a shared opening, a conversation's next turn)"                               \
    }
/* the sampling parameters of a request (CLI_FROM_REQUEST) */
#define CLI_OPT_MAX_TOKENS(T, F, LO, HELP)                                                         \
    {                                                                                              \
        .name = "max-tokens", .letter = 'n', .type = CLI_I32, .arg = "N", .lo = LO, .hi = 1 << 20, \
        .off = offsetof(T, F), .flags = CLI_FROM_REQUEST, .help = HELP                             \
    }
#define CLI_OPT_TEMPERATURE(T, F, HELP) CLI_OPT_REQUEST_F64("temperature", T, F, HELP)
/* A number parameter of a request (its range and default: the parameter table's) */
#define CLI_OPT_REQUEST_F64(NAME, T, F, HELP)                                                      \
    {                                                                                              \
        .name = NAME, .type = CLI_F64, .arg = "X", .off = offsetof(T, F),                          \
        .flags = CLI_FROM_REQUEST, .help = HELP                                                    \
    }
#define CLI_OPT_TOP_K(T, F, HELP)                                                                  \
    {                                                                                              \
        .name = "top-k", .type = CLI_I32, .arg = "N", .lo = 0, .hi = 1 << 24,                      \
        .off = offsetof(T, F), .flags = CLI_FROM_REQUEST, .help = HELP                             \
    }
#define CLI_OPT_TOP_P(T, F, HELP) CLI_OPT_REQUEST_F64("top-p", T, F, HELP)
#define CLI_OPT_SEED(T, F, HELP)                                                                   \
    {                                                                                              \
        .name = "seed", .type = CLI_U64, .arg = "N", .off = offsetof(T, F),                        \
        .flags = CLI_FROM_REQUEST, .help = HELP                                                    \
    }

/* The CLI_CUSTOM parsers of the shared rows (cli_util.c): --isa into an ifl_isa (whether the CPU
 * has it is checked at start-up), --weights (a format of the registry, tensor.h, or auto) into an
 * ifl_model_opts; an unknown format is refused with the registry's list ("'q9' is not a weight
 * format: f32, f16, bf16, q8 or auto"). Which device can hold the format is decided at start-up
 * (device.h). */
int cli_parse_isa(const char *cmd, const char *arg, void *field);
int cli_parse_weights(const char *cmd, const char *arg, void *field);
/* --weights' words ("f32|f16|bf16|q8|auto") and help (each format, what it is, where it runs),
 * from the registry. */
void cli_describe_weights(char *arg, size_t arg_cap, char *help, size_t help_cap);
/* The registry's format names joined by sep, the last two by last_sep, then extra (NULL: none)
 * after last_sep; stored_only: only those a checkpoint holds. Returns buf. E.g. (", ", " or ",
 * "auto"): "f32, f16, bf16, q8 or auto". */
const char *cli_format_words(char *buf, size_t cap, int stored_only, const char *sep,
                             const char *last_sep, const char *extra);

#endif
