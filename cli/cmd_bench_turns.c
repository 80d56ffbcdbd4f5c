/* cmd_bench_turns.c: `inflight bench --turns`: the multi-turn profile of the prefix cache,
 * in-process against the iterative batcher. U users (sessions) hold T-turn conversations that
 * share an opening of O tokens; each turn adds A new tokens (seeded, distinct per user and turn)
 * after the conversation so far (the opening, every earlier turn's tokens and every earlier
 * reply as generated) and generates R greedy tokens; a user's next turn is submitted as soon as
 * its last one is done. Run with the prefix cache on, then off (two batchers on one backend, one
 * after the other), it prints per turn TTFT p50/p90 and the prompt tokens computed and cached,
 * overall throughput and the cache's counters, the on/off TTFT ratios against the goal (from
 * turn 2 on, p90 at most 0.3x of cache-off), and checks that greedy replies are identical with
 * the cache on and off (the exit status says whether they are). */
#include <stddef.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "batcher.h"
#include "bench_report.h"
#include "cli.h"
#include "defaults.h"
#include "rng.h"
#include "runtime.h"
#include "util.h"

#define GOAL_RATIO 0.3 /* from turn 2 on, TTFT p90 with the cache <= this x without */

/* clang-format off */
static const char *const USAGE =
    "usage: inflight bench --turns[=T] [options]   (the multi-turn prefix-cache profile)\n"
    "\n"
    "U users hold T-turn conversations in-process against the iterative batcher (each user its\n"
    "own session). All share an opening of O tokens; each turn adds A new tokens (seeded ids,\n"
    "distinct per user and turn) after the conversation so far, replies so far included exactly\n"
    "as generated, and generates R tokens (greedy, ignore_eos). A user's next turn is submitted\n"
    "as soon as its last one is done. The profile runs with the prefix cache on, then off, on the\n"
    "same weights and backend, and prints per turn the time to first token (p50/p90, arrival to\n"
    "first token), the prompt tokens, those computed and those found cached, and how many\n"
    "requests found all they could (turn 1: the opening's whole blocks; later turns: the whole\n"
    "blocks of the turn before, reply included); overall the throughput, the prefill computed\n"
    "and the cache's counters; and the ratio cache-on / cache-off of the TTFT p90 per turn. The\n"
    "self-check: greedy replies must be identical with the cache on and off (exit status 1 when\n"
    "they are not, or when a request fails).\n"
    "\n"
    "With --long: the long-conversation profile instead, conversations that outgrow the context,\n"
    "trimmed by the server's rule or not (see inflight bench --turns --long --help).\n"
    "\n"
    "\n";
/* clang-format on */

typedef struct {
    int32_t users, turns, opening, added, reply;
    double interval_ms, think_ms;
    int32_t max_batch, step_tokens;
    uint64_t seed;
    int32_t n_vocab, eos, block_size;
} turns_cfg;

/* One request: user u's turn k is rec[u * turns + k]. */
typedef struct {
    int32_t n_prompt;
    int32_t expect; /* the cached tokens that were there to find (see the help) */
    int32_t cached, completion;
    int finish; /* ifl_finish once done; -2: refused */
    int done;
    uint64_t t_queued, t_first, t_done;
} turn_rec;

/* One run (the cache on or off), shared by the bench thread and the batcher's callbacks. */
typedef struct {
    pthread_mutex_t lock;
    pthread_cond_t cond; /* CLOCK_MONOTONIC; a request done */
    const turns_cfg *cfg;
    int cache_on;
    turn_rec *rec; /* (users * turns) {lock} */
    int32_t *gen;  /* (users * turns * reply) the generated ids {lock} */
    int32_t n_done;
    int64_t steps, step_prefill, step_cached; /* from the step records {lock} */
    uint64_t t0, t1;
    ifl_batcher_stats st; /* at the end */
} run_state;

/* Batcher thread (queued: the submitting thread). */
static void on_event(void *ud, const ifl_event *ev)
{
    run_state *rs = ud;
    turn_rec *r = ev->user;
    int32_t R = rs->cfg->reply;
    pthread_mutex_lock(&rs->lock);
    if (ev->type == IFL_EV_TOKEN && ev->index >= 0 && ev->index < R) {
        rs->gen[(size_t)(r - rs->rec) * (size_t)R + (size_t)ev->index] = ev->token;
    } else if (ev->type == IFL_EV_DONE) {
        r->cached = ev->cached_tokens;
        r->completion = ev->completion_tokens;
        r->finish = (int)ev->finish;
        r->t_queued = ev->t_queued;
        r->t_first = ev->t_first_token;
        r->t_done = ev->t_finished;
        r->done = 1;
        rs->n_done++;
        pthread_cond_broadcast(&rs->cond);
    }
    pthread_mutex_unlock(&rs->lock);
}

/* Batcher thread: the step records' totals. */
static void on_step(void *ud, const ifl_step_record *rec)
{
    run_state *rs = ud;
    int64_t cached = 0;
    for (int32_t i = 0; i < rec->n_seqs; i++)
        cached += rec->cached[i];
    pthread_mutex_lock(&rs->lock);
    rs->steps++;
    rs->step_prefill += rec->prefill_tokens;
    rs->step_cached += cached;
    pthread_mutex_unlock(&rs->lock);
}

/* n seeded ids in the vocabulary, never the end-of-text token. */
static void fill_ids(const turns_cfg *c, uint64_t seed, int32_t *out, int32_t n)
{
    ifl_rng rng;
    ifl_rng_seed(&rng, seed);
    for (int32_t i = 0; i < n; i++) {
        int32_t id;
        do
            id = (int32_t)(ifl_rng_next(&rng) % (uint64_t)c->n_vocab);
        while (id == c->eos);
        out[i] = id;
    }
}

/* The conversations of one run, owned by the bench thread. */
typedef struct {
    int32_t cap;   /* tokens per conversation: opening + turns * (added + reply) */
    int32_t *conv; /* (users * cap) */
    int32_t *n;    /* (users) tokens so far */
    int32_t *next; /* (users) turns submitted */
    int32_t *todo; /* (users) scratch: users to submit to */
} convs;

static void convs_free(convs *cs)
{
    free(cs->conv);
    free(cs->n);
    free(cs->next);
    free(cs->todo);
}

static int convs_init(convs *cs, const turns_cfg *c)
{
    memset(cs, 0, sizeof *cs);
    size_t U = (size_t)c->users;
    cs->cap = c->opening + c->turns * (c->added + c->reply);
    cs->conv = malloc(U * (size_t)cs->cap * sizeof *cs->conv);
    cs->n = calloc(U, sizeof *cs->n);
    cs->next = calloc(U, sizeof *cs->next);
    cs->todo = malloc(U * sizeof *cs->todo);
    if (!cs->conv || !cs->n || !cs->next || !cs->todo) {
        convs_free(cs);
        return -1;
    }
    for (int32_t u = 0; u < c->users; u++) {
        fill_ids(c, c->seed, cs->conv + (size_t)u * (size_t)cs->cap, c->opening);
        cs->n[u] = c->opening;
    }
    return 0;
}

/* {lock} Extends user u's conversation for its turn k (its reply to turn k - 1, then this turn's
 * new tokens) and sets the turn's record. */
static void next_prompt(run_state *rs, convs *cs, int32_t u, int32_t k)
{
    const turns_cfg *c = rs->cfg;
    int32_t *conv = cs->conv + (size_t)u * (size_t)cs->cap, bs = c->block_size;
    turn_rec *r = &rs->rec[(size_t)u * (size_t)c->turns + (size_t)k];
    int32_t prev_prompt = cs->n[u];
    if (k > 0) {
        memcpy(conv + cs->n[u], rs->gen + (size_t)(r - 1 - rs->rec) * (size_t)c->reply,
               (size_t)c->reply * sizeof *conv);
        cs->n[u] += c->reply;
    }
    uint64_t mix = c->seed ^ ((uint64_t)(u + 1) << 32) ^ (uint64_t)(k + 1);
    fill_ids(c, ifl_splitmix64(&mix), conv + cs->n[u], c->added);
    cs->n[u] += c->added;
    r->n_prompt = cs->n[u];
    /* the KV the cache can have: the opening's blocks, or the turn before's positions written
     * (its prompt and reply but the reply's last token), in whole blocks; never the last token */
    int32_t have = k == 0 ? c->opening : prev_prompt + c->reply - 1;
    if (have > r->n_prompt - 1)
        have = r->n_prompt - 1;
    r->expect = have / bs * bs;
    r->finish = -1;
}

/* Submits user u's prompt; on refusal the record ends as refused. */
static void submit_turn(ifl_batcher *b, run_state *rs, convs *cs, int32_t u, int32_t k)
{
    const turns_cfg *c = rs->cfg;
    turn_rec *r = &rs->rec[(size_t)u * (size_t)c->turns + (size_t)k];
    ifl_request_params rp = {.session = (uint64_t)u + 1,
                             .prompt = cs->conv + (size_t)u * (size_t)cs->cap,
                             .n_prompt = r->n_prompt,
                             .max_tokens = c->reply,
                             .sampling = {.temperature = 0, .top_k = 0, .top_p = 1},
                             .seed = c->seed + (uint64_t)u,
                             .ignore_eos = 1,
                             .user = r};
    uint64_t id;
    ifl_err err;
    ifl_submit_status st = ifl_batcher_submit(b, &rp, &id, NULL, &err);
    if (st == IFL_SUBMIT_OK)
        return;
    fprintf(stderr, "inflight bench: user %d turn %d (%d tokens) refused (%s): %s\n", u + 1, k + 1,
            r->n_prompt, ifl_submit_status_name(st), err.msg);
    pthread_mutex_lock(&rs->lock);
    r->finish = -2;
    r->done = 1;
    rs->n_done++;
    pthread_mutex_unlock(&rs->lock);
}

/* User u's pause before turn k: exponential, mean think_ms, from (seed, u, k) alone. */
static uint64_t think_us(const turns_cfg *c, int32_t u, int32_t k)
{
    uint64_t x = c->seed ^ 0x7468696e6bull ^ ((uint64_t)(uint32_t)u << 32) ^ (uint32_t)k;
    double r = (double)(ifl_splitmix64(&x) >> 11) * 0x1p-53; /* [0, 1) */
    return (uint64_t)(-log(1.0 - r) * c->think_ms * 1e3);
}

/* {lock} The users whose next turn is due now into cs->todo (their prompts built); *wake: the
 * earliest start of a user not yet due (0: none). Returns how many, or -1 when all are done. */
static int32_t due_users(run_state *rs, convs *cs, uint64_t now, uint64_t *wake)
{
    const turns_cfg *c = rs->cfg;
    int32_t n = 0, busy = 0;
    *wake = 0;
    for (int32_t u = 0; u < c->users; u++) {
        int32_t k = cs->next[u];
        const turn_rec *last = k ? &rs->rec[(size_t)u * (size_t)c->turns + (size_t)k - 1] : NULL;
        if (k == 0) {
            uint64_t at = rs->t0 + (uint64_t)((double)u * c->interval_ms * 1e3);
            if (now < at) {
                *wake = !*wake || at < *wake ? at : *wake;
                busy++;
                continue;
            }
        } else if (!last->done) {
            busy++;
            continue;
        } else if (k == c->turns || last->finish != IFL_FINISH_LENGTH) {
            continue; /* finished (or failed: the run is reported as failed) */
        } else if (c->think_ms > 0) {
            uint64_t at = last->t_done + think_us(c, u, k);
            if (now < at) {
                *wake = !*wake || at < *wake ? at : *wake;
                busy++;
                continue;
            }
        }
        next_prompt(rs, cs, u, k);
        cs->next[u] = k + 1;
        cs->todo[n++] = u;
    }
    return n || busy ? n : -1;
}

static void wait_until(run_state *rs, uint64_t wake)
{
    if (!wake) {
        pthread_cond_wait(&rs->cond, &rs->lock);
        return;
    }
    struct timespec ts = {.tv_sec = (time_t)(wake / 1000000u),
                          .tv_nsec = (long)(wake % 1000000u) * 1000};
    pthread_cond_timedwait(&rs->cond, &rs->lock, &ts);
}

/* Runs every user's conversation to its end on batcher b. */
static void drive(ifl_batcher *b, run_state *rs, convs *cs)
{
    rs->t0 = ifl_now_us();
    pthread_mutex_lock(&rs->lock);
    for (;;) {
        uint64_t wake;
        int32_t n = due_users(rs, cs, ifl_now_us(), &wake);
        if (n < 0)
            break;
        if (n == 0) {
            wait_until(rs, wake);
            continue;
        }
        pthread_mutex_unlock(&rs->lock);
        for (int32_t i = 0; i < n; i++)
            submit_turn(b, rs, cs, cs->todo[i], cs->next[cs->todo[i]] - 1);
        pthread_mutex_lock(&rs->lock);
    }
    pthread_mutex_unlock(&rs->lock);
}

/* ---- the report -------------------------------------------------------------------------- */

typedef struct {
    int64_t prompt, cached, found, ok, failed;
    double p50, p90;
} turn_sum;

/* Turn k's figures; ttft: scratch of users entries. */
static void sum_turn(const run_state *rs, int32_t k, double *ttft, turn_sum *s)
{
    const turns_cfg *c = rs->cfg;
    memset(s, 0, sizeof *s);
    for (int32_t u = 0; u < c->users; u++) {
        const turn_rec *r = &rs->rec[(size_t)u * (size_t)c->turns + (size_t)k];
        if (!r->done)
            continue; /* never submitted: its user failed earlier */
        if (r->finish != IFL_FINISH_LENGTH || !r->t_first) {
            s->failed++;
            continue;
        }
        s->prompt += r->n_prompt;
        s->cached += r->cached;
        s->found += r->cached >= r->expect;
        ttft[s->ok++] = (double)(r->t_first - r->t_queued) / 1e3;
    }
    bench_sort(ttft, (size_t)s->ok);
    s->p50 = bench_pct(ttft, (size_t)s->ok, 50);
    s->p90 = bench_pct(ttft, (size_t)s->ok, 90);
}

/* Prints the run's table and totals; fills p90 (turns); returns the failed requests, else -1 when
 * the prefill accounting disagrees (the step records, the stats and the events), else 0. */
static int64_t print_run(const run_state *rs, double *ttft, double *p90)
{
    const turns_cfg *c = rs->cfg;
    const ifl_batcher_stats *st = &rs->st;
    int64_t failed = 0, prompt = 0, cached = 0, tokens = 0;
    printf("prefix cache %s:\n", rs->cache_on ? "on" : "off");
    printf("  turn  requests   prompt  computed    cached  found all  TTFT p50 ms  TTFT p90 ms\n");
    for (int32_t k = 0; k < c->turns; k++) {
        turn_sum s;
        sum_turn(rs, k, ttft, &s);
        char found[32] = "      -  ";
        if (rs->cache_on)
            snprintf(found, sizeof found, "%4lld/%-4lld", (long long)s.found, (long long)s.ok);
        printf("  %4d  %8lld %8lld  %8lld  %8lld  %s  %11.1f  %11.1f\n", k + 1, (long long)s.ok,
               (long long)s.prompt, (long long)(s.prompt - s.cached), (long long)s.cached, found,
               s.p50, s.p90);
        p90[k] = s.p90;
        failed += s.failed;
        prompt += s.prompt;
        cached += s.cached;
    }
    for (size_t i = 0; i < (size_t)c->users * (size_t)c->turns; i++)
        tokens += rs->rec[i].done && rs->rec[i].finish >= 0 ? rs->rec[i].completion : 0;
    double wall = (double)(rs->t1 - rs->t0) / 1e6;
    int ok = rs->step_prefill == (int64_t)st->prompt_tokens_computed &&
             rs->step_prefill == prompt - cached && rs->step_cached == cached;
    printf("  throughput        : %.1f tokens/s (%lld generated in %.2f s)\n",
           wall > 0 ? (double)tokens / wall : 0, (long long)tokens, wall);
    printf("  prefill computed  : %lld tokens of %lld (step records %lld, stats %llu, prompts - "
           "cached %lld: %s)\n",
           (long long)rs->step_prefill, (long long)prompt, (long long)rs->step_prefill,
           (unsigned long long)st->prompt_tokens_computed, (long long)(prompt - cached),
           failed ? "not checked: requests failed"
           : ok   ? "consistent"
                  : "INCONSISTENT");
    printf("  prefix cache      : %llu lookups, %llu hits, %llu hit tokens, %llu evictions; %d "
           "blocks cached at the end (%d unused), blocks of %d tokens, %d in the pool\n",
           (unsigned long long)st->prefix_lookups, (unsigned long long)st->prefix_hits,
           (unsigned long long)st->prefix_hit_tokens, (unsigned long long)st->prefix_evictions,
           st->kv_cached, st->kv_cached_unused, c->block_size, st->kv_total);
    if (failed)
        printf("  FAILED            : %lld request(s) did not run to their %d tokens\n",
               (long long)failed, c->reply);
    fflush(stdout);
    return failed ? failed : ok ? 0 : -1;
}

/* The on/off comparison: TTFT p90 ratios, the goal, the identical-tokens check. 0: identical. */
static int compare_runs(const run_state *on, const run_state *off, const double *p90_on,
                        const double *p90_off)
{
    const turns_cfg *c = on->cfg;
    printf("cache on / off:\n  TTFT p90 per turn :");
    double worst = 0;
    int32_t worst_k = 0;
    for (int32_t k = 0; k < c->turns; k++) {
        double r = p90_off[k] > 0 ? p90_on[k] / p90_off[k] : 0;
        printf("%s %d: %.2fx", k ? "," : "", k + 1, r);
        if (k > 0 && (worst_k == 0 || r > worst))
            worst = r, worst_k = k + 1;
    }
    printf("\n");
    if (worst_k)
        printf("  from turn 2 on, TTFT p90 <= %.1fx of cache-off: %s (worst turn %d: %.2fx)\n",
               GOAL_RATIO, worst <= GOAL_RATIO ? "met" : "missed", worst_k, worst);
    else
        printf("  from turn 2 on, TTFT p90 <= %.1fx of cache-off: not measured (one turn)\n",
               GOAL_RATIO);
    size_t R = (size_t)c->reply;
    int32_t bad = 0, mk = 0, mu = 0, mi = 0;
    for (int32_t k = c->turns - 1; k >= 0; k--) /* the first mismatch: earliest turn, user */
        for (int32_t u = c->users - 1; u >= 0; u--) {
            size_t at = ((size_t)u * (size_t)c->turns + (size_t)k) * R;
            for (size_t i = R; i-- > 0;)
                if (on->gen[at + i] != off->gen[at + i])
                    mk = k, mu = u, mi = (int32_t)i;
            bad += memcmp(on->gen + at, off->gen + at, R * sizeof *on->gen) != 0;
        }
    if (!bad) {
        printf("  identical tokens  : passed (every user's %d x %d greedy tokens are the same "
               "with the cache on and off)\n",
               c->turns, c->reply);
        return 0;
    }
    size_t at = ((size_t)mu * (size_t)c->turns + (size_t)mk) * R + (size_t)mi;
    printf("  identical tokens  : FAILED: %d of %d replies differ; the first at user %d, turn %d, "
           "index %d (on %d, off %d)\n",
           bad, c->users * c->turns, mu + 1, mk + 1, mi, on->gen[at], off->gen[at]);
    return -1;
}

/* ---- the command ------------------------------------------------------------------------- */

/* One run on backend be: a batcher with the cache on or off, every conversation, its stats. */
static int run_one(const ifl_runtime *rt, ifl_backend *be, run_state *rs)
{
    const turns_cfg *c = rs->cfg;
    ifl_err err;
    convs cs;
    if (convs_init(&cs, c)) {
        fprintf(stderr, "inflight bench: out of memory\n");
        return -1;
    }
    ifl_batcher_params p = {.policy = IFL_POLICY_ITERATIVE,
                            .max_batch = c->max_batch,
                            .max_queue = c->users + 1,
                            .step_tokens = c->step_tokens,
                            .eos_token = rt->model.cfg.eos_token_id,
                            .tok = rt->tok,
                            .no_prefix_cache = !rs->cache_on,
                            .on_event = on_event,
                            .on_step = on_step,
                            .ud = rs};
    ifl_batcher *b = ifl_batcher_start(be, &p, &err);
    if (!b) {
        fprintf(stderr, "inflight bench: %s\n", err.msg);
        convs_free(&cs);
        return -1;
    }
    drive(b, rs, &cs);
    ifl_batcher_wait_idle(b);
    ifl_batcher_get_stats(b, &rs->st);
    ifl_batcher_stop(b);
    rs->t1 = rs->t0;
    for (size_t i = 0; i < (size_t)c->users * (size_t)c->turns; i++)
        rs->t1 = rs->rec[i].t_done > rs->t1 ? rs->rec[i].t_done : rs->t1;
    convs_free(&cs);
    return 0;
}

static int run_state_init(run_state *rs, const turns_cfg *c, int cache_on)
{
    memset(rs, 0, sizeof *rs);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC); /* the clock of ifl_now_us */
    pthread_mutex_init(&rs->lock, NULL);
    pthread_cond_init(&rs->cond, &ca);
    pthread_condattr_destroy(&ca);
    rs->cfg = c;
    rs->cache_on = cache_on;
    size_t n = (size_t)c->users * (size_t)c->turns;
    rs->rec = calloc(n, sizeof *rs->rec);
    rs->gen = calloc(n * (size_t)c->reply, sizeof *rs->gen);
    return rs->rec && rs->gen ? 0 : -1;
}

static void run_state_free(run_state *rs)
{
    free(rs->rec);
    free(rs->gen);
    pthread_mutex_destroy(&rs->lock);
    pthread_cond_destroy(&rs->cond);
}

typedef struct {
    const char *dir, *cache;
    turns_cfg cfg;
    int32_t threads;
    ifl_model_opts mo;
    ifl_device want;
    ifl_isa isa;
} turns_opts;

#define ROW(NAME, TYPE, ARG, LO, HI, F, HELP)                                                      \
    CLI_ROW(NAME, 0, TYPE, ARG, LO, HI, turns_opts, F, HELP)
static const cli_opt OPTS[] = {
    {.name = "turns",
     .type = CLI_I32,
     .arg = "T",
     .lo = 1,
     .hi = 10000,
     .off = offsetof(turns_opts, cfg.turns),
     .flags = CLI_OPTIONAL_ARG,
     .help = "turns per user (the value needs the '=')"},
    ROW("users", CLI_I32, "U", 1, 10000, cfg.users, "users, each with its own session"),
    ROW("opening", CLI_I32, "O", 0, 1 << 20, cfg.opening, "tokens of the shared opening"),
    ROW("added", CLI_I32, "A", 1, 1 << 20, cfg.added, "new prompt tokens per turn"),
    ROW("reply", CLI_I32, "R", 1, 1 << 20, cfg.reply, "tokens generated per turn"),
    ROW("interval-ms", CLI_F64, "X", 0, 3.6e6, cfg.interval_ms,
        "the users' first turns X ms apart (0: together)"),
    ROW("think-ms", CLI_F64, "X", 0, 3.6e6, cfg.think_ms,
        "a user reads the reply before the next turn: a seeded exponential pause of mean X ms "
        "after each turn, the same in both runs (0: at once, so users who start together stay "
        "in step)"),
    CLI_OPT_PREFIX_CACHE(turns_opts, cache, CLI_WORD, "on|off|both"),
    CLI_OPT_BENCH_MODEL(turns_opts, dir),
    CLI_OPT_WEIGHTS(turns_opts, mo),
    CLI_OPT_MAX_BATCH(turns_opts, cfg.max_batch),
    CLI_OPT_STEP_TOKENS(turns_opts, cfg.step_tokens),
    CLI_OPT_THREADS(turns_opts, threads),
    CLI_OPT_DEVICE(turns_opts, want, CLI_INDEX),
    CLI_OPT_ISA(turns_opts, isa),
    CLI_OPT_SEED(turns_opts, cfg.seed, "seed of the token ids"),
};
#undef ROW

/* -1: go on; else the exit status (help: 0, a usage error: 2). */
static int parse_opts(int argc, char **argv, turns_opts *o)
{
    static const cli_spec spec = CLI_SPEC("bench", USAGE, OPTS, "bench --turns has its own",
                                          "the number of turns is --turns=T");
    int st = cli_parse(&spec, argc, argv, 1, o, sizeof *o);
    o->cfg.step_tokens = ifl_batcher_step_budget(o->cfg.max_batch, o->cfg.step_tokens);
    return st;
}

/* The limits that need the model; fills the model's figures into the profile. */
static int check_model(turns_cfg *c, const ifl_runtime *rt)
{
    int64_t need = (int64_t)c->opening + (int64_t)c->turns * (c->added + c->reply);
    if (need > rt->model.cfg.n_ctx) {
        fprintf(stderr,
                "inflight bench: --turns: the last turn needs opening + turns x (added + reply) = "
                "%lld positions, more than the model's context of %d tokens\n",
                (long long)need, rt->model.cfg.n_ctx);
        return -1;
    }
    int32_t nv = ifl_tokenizer_n_vocab(rt->tok);
    c->n_vocab = nv < rt->model.cfg.n_vocab ? nv : rt->model.cfg.n_vocab;
    c->eos = rt->model.cfg.eos_token_id;
    return 0;
}

/* Both runs (or one), their reports and the comparison; the exit status. */
static int bench_runs(const ifl_runtime *rt, const turns_opts *o)
{
    const turns_cfg *c = &o->cfg;
    int modes[2], n_modes = 0, rc = 1;
    if (strcmp(o->cache, "off"))
        modes[n_modes++] = 1;
    if (strcmp(o->cache, "on"))
        modes[n_modes++] = 0;
    run_state rs[2];
    int n_init = 0, bad = 0;
    double *ttft = malloc((size_t)c->users * sizeof *ttft);
    double *p90 = malloc(2 * (size_t)c->turns * sizeof *p90);
    if (!ttft || !p90)
        goto oom;
    for (; n_init < n_modes; n_init++)
        if (run_state_init(&rs[n_init], c, modes[n_init]))
            goto oom;
    for (int i = 0; i < n_modes; i++) {
        if (run_one(rt, rt->be[0], &rs[i]))
            goto out; /* (it said why) */
        int64_t f = print_run(&rs[i], ttft, p90 + (size_t)i * (size_t)c->turns);
        bad += f ? 1 : 0;
    }
    if (n_modes == 2 && compare_runs(&rs[0], &rs[1], p90, p90 + c->turns))
        bad++;
    else if (n_modes == 1)
        printf("identical tokens  : not checked (it needs --prefix-cache both)\n");
    rc = bad ? 1 : 0;
    goto out;
oom:
    fprintf(stderr, "inflight bench: out of memory\n");
out:
    for (int i = 0; i < n_init; i++)
        run_state_free(&rs[i]);
    free(ttft);
    free(p90);
    return rc;
}

int cmd_bench_turns(int argc, char **argv)
{
    for (int i = 1; i < argc; i++)
        if (!strcmp(argv[i], "--long"))
            return cmd_bench_turns_long(argc, argv);
    turns_opts o = {.cache = "both",
                    .cfg = {.users = 10,
                            .turns = 5,
                            .opening = 512,
                            .added = 64,
                            .reply = 32,
                            .max_batch = IFL_DEFAULT_MAX_BATCH,
                            .step_tokens = IFL_DEFAULT_STEP_TOKENS,
                            .seed = 1},
                    .want = IFL_DEVICE_AUTO,
                    .isa = IFL_ISA_AUTO};
    int st = parse_opts(argc, argv, &o);
    if (st >= 0)
        return st;
    if (cli_bench_model(&o.dir))
        return 1;
    ifl_runtime rt = {0};
    ifl_runtime_opts ro = {.model_dir = o.dir,
                           .model_opts = o.mo,
                           .threads = o.threads,
                           .n_backends = 1,
                           .max_seqs = o.cfg.max_batch,
                           .max_tokens = o.cfg.step_tokens,
                           .prefault = 1}; /* cache on, then off: on one warm pool */
    if (cli_runtime_open_model("bench", o.want, o.isa, &ro, &rt))
        return 1;
    if (check_model(&o.cfg, &rt)) {
        ifl_runtime_close(&rt);
        return 1;
    }
    if (cli_runtime_start_backends("bench", &ro, &rt))
        return 1;
    o.cfg.block_size = rt.be[0]->params.kv_block_size;
    const turns_cfg *c = &o.cfg;
    printf("inflight bench --turns: %s (%d layers, %d wide, weights %s); %d users x %d turns: a "
           "shared opening of %d tokens, %d new tokens and a reply of %d (greedy, ignore_eos) a "
           "turn; first turns %s",
           o.dir, rt.model.cfg.n_layer, rt.model.cfg.n_embd, ifl_model_dtype_name(&rt.model),
           c->users, c->turns, c->opening, c->added, c->reply,
           c->interval_ms > 0 ? "" : "together");
    if (c->interval_ms > 0)
        printf("%.0f ms apart", c->interval_ms);
    if (c->think_ms > 0)
        printf(", a pause of %.0f ms on average before each next turn", c->think_ms);
    printf("; max batch %d, step budget %d\n", c->max_batch, c->step_tokens);
    fflush(stdout);
    int rc = bench_runs(&rt, &o);
    ifl_runtime_close(&rt);
    return rc;
}
