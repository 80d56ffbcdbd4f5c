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
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_report.h"
#include "bench_turns_common.h"
#include "rng.h"

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

/* What the profile adds to a turn's outcome (the run's ext). */
typedef struct {
    int32_t n_prompt;
    int32_t expect; /* the cached tokens that were there to find (see the help) */
} turn_rec;

/* One run (the cache on or off). */
typedef struct {
    bt_run base; /* first: the batcher's ud */
    int cache_on;
    int64_t steps, step_prefill, step_cached; /* from the step records {base.lock} */
} run_state;

static turn_rec *rec_at(const bt_run *run, int32_t u, int32_t k)
{
    return (turn_rec *)run->ext + bt_at(run, u, k);
}

/* Batcher thread: the step records' totals. */
static void on_step(void *ud, const ifl_step_record *rec)
{
    run_state *rs = ud;
    int64_t cached = 0;
    for (int32_t i = 0; i < rec->n_seqs; i++)
        cached += rec->cached[i];
    pthread_mutex_lock(&rs->base.lock);
    rs->steps++;
    rs->step_prefill += rec->prefill_tokens;
    rs->step_cached += cached;
    pthread_mutex_unlock(&rs->base.lock);
}

/* {lock} Extends user u's conversation for its turn k (bt_driver.prepare: its reply to turn
 * k - 1, then this turn's new tokens) and sets the turn's record. */
static void next_prompt(void *ctx, int32_t u, int32_t k)
{
    bt_run *run = ctx;
    const bt_cfg *c = run->cfg;
    turn_rec *r = rec_at(run, u, k);
    int32_t prev_prompt = run->n_ids[u], bs = c->block_size;
    if (k > 0)
        bt_append_reply(run, u, k - 1);
    bt_append_added(run, u, k);
    r->n_prompt = run->n_ids[u];
    /* the KV the cache can have: the opening's blocks, or the turn before's positions written
     * (its prompt and reply but the reply's last token), in whole blocks; never the last token */
    int32_t have = k == 0 ? c->opening : prev_prompt + c->reply - 1;
    if (have > r->n_prompt - 1)
        have = r->n_prompt - 1;
    r->expect = have / bs * bs;
}

/* Submits user u's prompt; a refusal is said on stderr. */
static void submit_turn(void *ctx, ifl_batcher *b, int32_t u, int32_t k)
{
    bt_run *run = ctx;
    int32_t n = rec_at(run, u, k)->n_prompt;
    ifl_err err;
    ifl_submit_status st = bt_submit(b, run, u, k, bt_ids(run, u), n, &err);
    if (st != IFL_SUBMIT_OK)
        fprintf(stderr, "inflight bench: user %d turn %d (%d tokens) refused (%s): %s\n", u + 1,
                k + 1, n, ifl_submit_status_name(st), err.msg);
}

/* User u's pause before turn k: exponential, mean think_ms, from (seed, u, k) alone. */
static uint64_t think_us(const bt_cfg *c, int32_t u, int32_t k)
{
    uint64_t x = c->seed ^ 0x7468696e6bull ^ ((uint64_t)(uint32_t)u << 32) ^ (uint32_t)k;
    double r = (double)(ifl_splitmix64(&x) >> 11) * 0x1p-53; /* [0, 1) */
    return (uint64_t)(-log(1.0 - r) * c->think_ms * 1e3);
}

/* {lock} When user u's turn k may start (bt_driver.start): a user's first turn at its interval,
 * each next one once its pause is over; a failed turn stops the user. */
static uint64_t turn_start(void *ctx, int32_t u, int32_t k)
{
    const bt_run *run = ctx;
    const bt_cfg *c = run->cfg;
    if (k == 0)
        return run->t0 + (uint64_t)((double)u * c->interval_ms * 1e3);
    const bt_outcome *last = bt_out(run, u, k - 1);
    if (last->finish != IFL_FINISH_LENGTH)
        return BT_NEVER; /* failed: the run is reported as failed */
    return c->think_ms > 0 ? last->t_done + think_us(c, u, k) : 0;
}

/* ---- the report -------------------------------------------------------------------------- */

typedef struct {
    int64_t prompt, cached, found, ok, failed;
    double p50, p90;
} turn_sum;

/* Turn k's figures; ttft: scratch of users entries. */
static void sum_turn(const run_state *rs, int32_t k, double *ttft, turn_sum *s)
{
    const bt_run *run = &rs->base;
    const bt_cfg *c = run->cfg;
    memset(s, 0, sizeof *s);
    for (int32_t u = 0; u < c->users; u++) {
        const bt_outcome *o = bt_out(run, u, k);
        const turn_rec *r = rec_at(run, u, k);
        if (!o->done)
            continue; /* never submitted: its user failed earlier */
        if (o->finish != IFL_FINISH_LENGTH || !o->t_first) {
            s->failed++;
            continue;
        }
        s->prompt += r->n_prompt;
        s->cached += o->cached;
        s->found += o->cached >= r->expect;
        ttft[s->ok++] = (double)(o->t_first - o->t_queued) / 1e3;
    }
    bench_sort(ttft, (size_t)s->ok);
    s->p50 = bench_pct(ttft, (size_t)s->ok, 50);
    s->p90 = bench_pct(ttft, (size_t)s->ok, 90);
}

/* Prints the run's table and totals; fills p90 (turns); returns the failed requests, else -1 when
 * the prefill accounting disagrees (the step records, the stats and the events), else 0. */
static int64_t print_run(const run_state *rs, double *ttft, double *p90)
{
    const bt_run *run = &rs->base;
    const bt_cfg *c = run->cfg;
    const ifl_batcher_stats *st = &run->st;
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
        tokens += run->out[i].done && run->out[i].finish >= 0 ? run->out[i].completion : 0;
    double wall = (double)(run->t1 - run->t0) / 1e6;
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
    const bt_cfg *c = on->base.cfg;
    const int32_t *gen_on = on->base.gen, *gen_off = off->base.gen;
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
                if (gen_on[at + i] != gen_off[at + i])
                    mk = k, mu = u, mi = (int32_t)i;
            bad += memcmp(gen_on + at, gen_off + at, R * sizeof *gen_on) != 0;
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
           bad, c->users * c->turns, mu + 1, mk + 1, mi, gen_on[at], gen_off[at]);
    return -1;
}

/* ---- the command ------------------------------------------------------------------------- */

/* One run on backend be: a batcher with the cache on or off, every conversation, its stats. */
static int run_one(const ifl_runtime *rt, ifl_backend *be, run_state *rs)
{
    bt_driver d = {.start = turn_start,
                   .prepare = next_prompt,
                   .submit = submit_turn,
                   .ctx = &rs->base,
                   .on_step = on_step};
    return bt_run_batcher(rt, be, &rs->base, !rs->cache_on, &d);
}

static const cli_opt OPTS[] = {
    BT_OPT_TURNS,
    BT_OPT_USERS,
    BT_ROW("opening", CLI_I32, "O", 0, 1 << 20, cfg.opening, "tokens of the shared opening"),
    BT_ROW("added", CLI_I32, "A", 1, 1 << 20, cfg.added, "new prompt tokens per turn"),
    BT_ROW("reply", CLI_I32, "R", 1, 1 << 20, cfg.reply, "tokens generated per turn"),
    BT_ROW("interval-ms", CLI_F64, "X", 0, 3.6e6, cfg.interval_ms,
           "the users' first turns X ms apart (0: together)"),
    BT_ROW("think-ms", CLI_F64, "X", 0, 3.6e6, cfg.think_ms,
           "a user reads the reply before the next turn: a seeded exponential pause of mean X ms "
           "after each turn, the same in both runs (0: at once, so users who start together stay "
           "in step)"),
    CLI_OPT_PREFIX_CACHE(bt_opts, runs, CLI_WORD, "on|off|both"),
    BT_OPTS_ENGINE,
};

/* The limits that need the model (bt_main's check). */
static int check_model(const bt_cfg *c)
{
    int64_t need = (int64_t)c->opening + (int64_t)c->turns * (c->added + c->reply);
    if (need > c->n_ctx) {
        fprintf(stderr,
                "inflight bench: --turns: the last turn needs opening + turns x (added + reply) = "
                "%lld positions, more than the model's context of %d tokens\n",
                (long long)need, c->n_ctx);
        return -1;
    }
    return 0;
}

/* The header, both runs (or one), their reports and the comparison; the exit status. */
static int bench_runs(const ifl_runtime *rt, const bt_opts *o)
{
    const bt_cfg *c = &o->cfg;
    printf("inflight bench --turns: %s (%d layers, %d wide, weights %s); %d users x %d turns: a "
           "shared opening of %d tokens, %d new tokens and a reply of %d (greedy, ignore_eos) a "
           "turn; first turns %s",
           o->dir, rt->model.cfg.n_layer, rt->model.cfg.n_embd, ifl_model_dtype_name(&rt->model),
           c->users, c->turns, c->opening, c->added, c->reply,
           c->interval_ms > 0 ? "" : "together");
    if (c->interval_ms > 0)
        printf("%.0f ms apart", c->interval_ms);
    if (c->think_ms > 0)
        printf(", a pause of %.0f ms on average before each next turn", c->think_ms);
    printf("; max batch %d, step budget %d\n", c->max_batch, c->step_tokens);
    fflush(stdout);
    int modes[2], n_modes = bt_modes(o, modes), rc = 1;
    run_state rs[2];
    int n_init = 0, bad = 0;
    double *ttft = malloc((size_t)c->users * sizeof *ttft);
    double *p90 = malloc(2 * (size_t)c->turns * sizeof *p90);
    if (!ttft || !p90)
        goto oom;
    for (; n_init < n_modes; n_init++) {
        rs[n_init] = (run_state){.cache_on = modes[n_init]};
        if (bt_run_init(&rs[n_init].base, c, sizeof(turn_rec))) {
            n_init++; /* (freed all the same) */
            goto oom;
        }
    }
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
        bt_run_free(&rs[i].base);
    free(ttft);
    free(p90);
    return rc;
}

int cmd_bench_turns(int argc, char **argv)
{
    for (int i = 1; i < argc; i++)
        if (!strcmp(argv[i], "--long"))
            return cmd_bench_turns_long(argc, argv);
    bt_opts o = bt_preset(10, 5, 512, 64, 32); /* users, turns, opening, added, reply */
    static const cli_spec spec = CLI_SPEC("bench", USAGE, OPTS, "bench --turns has its own",
                                          "the number of turns is --turns=T");
    return bt_main(&spec, argc, argv, &o, check_model, bench_runs);
}
