/* bench_turns_common.h: what the two multi-turn profiles of `inflight bench` share
 * (cmd_bench_turns.c, --turns: the prefix cache; cmd_bench_turns_long.c, --turns --long: the
 * trimming rule): their options and figures, the engine's start-up, a run's state (each turn's
 * outcome from the batcher's events, the generated ids), the seeded token ids, the submission of
 * a user's turn and the loop that drives every user's conversation to its end on a batcher. */
#ifndef IFL_BENCH_TURNS_COMMON_H
#define IFL_BENCH_TURNS_COMMON_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "batcher.h"
#include "cli.h"
#include "runtime.h"

/* A profile's figures: U users hold T-turn conversations of an opening of O tokens and, per
 * turn, A new tokens and a reply of R. */
typedef struct {
    int32_t users, turns, opening, added, reply;
    double interval_ms, think_ms; /* --turns: first turns apart, the pause before a next turn */
    double keep;                  /* --turns --long: what a trim leaves (chat_trim.h) */
    int32_t max_batch, step_tokens;
    uint64_t seed;
    int32_t n_vocab, eos, n_ctx, block_size; /* the model's and the backend's (bt_main) */
} bt_cfg;

/* A profile's options. */
typedef struct {
    const char *dir;
    const char *runs; /* on|off|both: --prefix-cache (--turns) or --trim (--turns --long) */
    bt_cfg cfg;
    int32_t threads;
    ifl_model_opts mo;
    ifl_device want;
    ifl_isa isa;
} bt_opts;

/* The rows both profiles' options begin with: --turns (the profile's mode, its value optional). */
#define BT_OPT_TURNS                                                                               \
    {                                                                                              \
        .name = "turns", .type = CLI_I32, .arg = "T", .lo = 1, .hi = 10000,                        \
        .off = offsetof(bt_opts, cfg.turns), .flags = CLI_OPTIONAL_ARG,                            \
        .help = "turns per user (the value needs the '=')"                                         \
    }
/* A row of bt_opts. */
#define BT_ROW(NAME, TYPE, ARG, LO, HI, F, HELP)                                                   \
    CLI_ROW(NAME, 0, TYPE, ARG, LO, HI, bt_opts, F, HELP)
#define BT_OPT_USERS                                                                               \
    BT_ROW("users", CLI_I32, "U", 1, 10000, cfg.users, "users, each with its own session")
/* The rows both end with: the model and the engine, the seed. */
#define BT_OPTS_ENGINE                                                                             \
    CLI_OPT_BENCH_MODEL(bt_opts, dir), CLI_OPT_WEIGHTS(bt_opts, mo),                               \
        CLI_OPT_MAX_BATCH(bt_opts, cfg.max_batch), CLI_OPT_STEP_TOKENS(bt_opts, cfg.step_tokens),  \
        CLI_OPT_THREADS(bt_opts, threads), CLI_OPT_DEVICE(bt_opts, want, CLI_INDEX),               \
        CLI_OPT_ISA(bt_opts, isa), CLI_OPT_SEED(bt_opts, cfg.seed, "seed of the token ids")

/* A profile's preset: both runs, the batcher's default batch and step budget, seed 1, the device
 * and the ISA chosen at start-up. */
bt_opts bt_preset(int32_t users, int32_t turns, int32_t opening, int32_t added, int32_t reply);
/* A profile's command: parses argv into o (the preset), then opens the engine: the model at
 * o->dir (the benchmarks' default made when none is named), its figures into o->cfg (n_vocab,
 * eos, n_ctx), check (the profile's limits on them: -1 after saying why), one backend with room
 * for the batch, its pool prefaulted (the runs, one after the other, on one warm pool), and
 * o->cfg.block_size; then profile (its runs and reports: the exit status). The exit status (help:
 * 0, a usage error: 2, a failure to start: 1). */
int bt_main(const cli_spec *spec, int argc, char **argv, bt_opts *o, int (*check)(const bt_cfg *c),
            int (*profile)(const ifl_runtime *rt, const bt_opts *o));
/* The runs o->runs asks for into modes, the "on" one first (1: on, 0: off); how many. */
int bt_modes(const bt_opts *o, int modes[2]);

/* How a turn ended: from its done event, or its refusal. */
typedef struct {
    int32_t cached, completion;
    int finish; /* ifl_finish once done; -1: pending; -2: refused (status) */
    int status; /* the ifl_submit_status of a refusal */
    int done;
    uint64_t t_queued, t_first, t_done;
} bt_outcome;

/* One run (the cache or trimming on or off), shared by the bench thread and the batcher's
 * callbacks; the first member of the profile's own run, so that one ud serves both. */
typedef struct {
    pthread_mutex_t lock;
    pthread_cond_t cond; /* CLOCK_MONOTONIC (the clock of ifl_now_us); a turn done */
    const bt_cfg *cfg;
    bt_outcome *out;      /* (users * turns) user u's turn k at u * turns + k {lock} */
    void *ext;            /* (users * turns) what the profile adds to each turn, in that order */
    int32_t *gen;         /* (users * turns * reply) the generated ids, in that order {lock} */
    int32_t cap;          /* ids per conversation: opening + turns * (added + reply) */
    int32_t *ids;         /* (users * cap) each user's conversation so far (bench thread) */
    int32_t *n_ids;       /* (users) */
    int32_t *next;        /* (users) turns submitted (bench thread) */
    int32_t *todo;        /* (users) scratch: the users due (bench thread) */
    uint64_t t0, t1;      /* the start, the last turn done (t0 when none was) */
    ifl_batcher_stats st; /* at the end */
} bt_run;

/* Every turn pending, its ext (ext_size bytes a turn) zero; each conversation the opening (the
 * same for every user, so its blocks are shared). 0, or -1 out of memory (then bt_run_free all
 * the same). */
int bt_run_init(bt_run *run, const bt_cfg *c, size_t ext_size);
void bt_run_free(bt_run *run);

static inline size_t bt_at(const bt_run *run, int32_t u, int32_t k)
{
    return (size_t)u * (size_t)run->cfg->turns + (size_t)k;
}
static inline bt_outcome *bt_out(const bt_run *run, int32_t u, int32_t k)
{
    return &run->out[bt_at(run, u, k)];
}
/* User u's reply to turn k. */
static inline int32_t *bt_gen(const bt_run *run, int32_t u, int32_t k)
{
    return run->gen + bt_at(run, u, k) * (size_t)run->cfg->reply;
}

/* User u's conversation. */
static inline int32_t *bt_ids(const bt_run *run, int32_t u)
{
    return run->ids + (size_t)u * (size_t)run->cap;
}
/* Appends to user u's conversation its reply to turn k, as generated. */
void bt_append_reply(bt_run *run, int32_t u, int32_t k);
/* Appends to user u's conversation the new tokens of its turn k (seeded from the seed, u and k:
 * distinct per user and turn, and the same in every run). */
void bt_append_added(bt_run *run, int32_t u, int32_t k);

/* Submits user u's turn k, the prompt of n ids (greedy, ignore_eos, reply tokens; session u + 1);
 * on refusal its outcome ends as refused and err says why. Returns the submit status. */
ifl_submit_status bt_submit(ifl_batcher *b, bt_run *run, int32_t u, int32_t k,
                            const int32_t *prompt, int32_t n, ifl_err *err);

/* The profile's side of bt_run_batcher. A user's turn k is due once its turn k - 1 is done (the
 * first at once) and start allows it. */
#define BT_NEVER UINT64_MAX
typedef struct {
    /* {lock} When user u's turn k may start, its turn k - 1 done: a time of ifl_now_us (0: now),
     * or BT_NEVER: the user stops (NULL: always now). */
    uint64_t (*start)(void *ctx, int32_t u, int32_t k);
    /* {lock} Makes user u's turn k ready to submit (its prompt, the profile's record). */
    void (*prepare)(void *ctx, int32_t u, int32_t k);
    /* Submits user u's turn k (without the lock). */
    void (*submit)(void *ctx, ifl_batcher *b, int32_t u, int32_t k);
    void *ctx;
    /* The batcher's step records (NULL: none), with the run as ud. */
    void (*on_step)(void *ud, const ifl_step_record *rec);
} bt_driver;

/* One run on backend be: an iterative batcher (the prefix cache on unless no_prefix_cache), every
 * user's conversation driven to its end, the stats, run->t1; the batcher stopped. 0, or -1 after
 * saying why it could not start. */
int bt_run_batcher(const ifl_runtime *rt, ifl_backend *be, bt_run *run, int no_prefix_cache,
                   const bt_driver *d);

#endif
