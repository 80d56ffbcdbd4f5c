/* cmd_bench_turns_long.c: `inflight bench --turns --long`: the long-conversation profile of the
 * trimming rule (server/chat_trim.h), in-process against the iterative batcher with the prefix
 * cache on. U users hold T-turn conversations that outgrow the model's context several times: a
 * system opening of O tokens (shared by all), then per turn a user message of A new tokens
 * (seeded, distinct per user and turn) and the reply of R greedy tokens exactly as generated.
 * Before each turn the user's messages go through chat_trim (the server's rule, with suffix 0
 * and the room n_ctx - R), and the prompt is the opening and the messages from the cut on. Run
 * with trimming on, then off (two batchers on one backend, one after the other), it prints per
 * turn the answered and failed requests, the prompt and the messages left out (means), the users
 * whose cut moved and the share of prompt tokens found in the prefix cache; overall the turns
 * answered with and without trimming (without, the batcher refuses the prompts that no longer
 * fit) and the cached share over the turns after each user's first trim against the goal
 * (>= 0.60). Exit status 1 when a turn fails with trimming on or that share misses the goal. */
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_turns_common.h"
#include "chat_trim.h"

#define GOAL_SHARE 0.60 /* with trimming, the cached share after each user's first trim */
#define STR_(x) #x
#define STR(x) STR_(x)

/* clang-format off */
static const char *const USAGE =
    "usage: inflight bench --turns[=T] --long [options]   (long conversations: trimming)\n"
    "\n"
    "U users hold T-turn conversations that outgrow the model's context, in-process against the\n"
    "iterative batcher with the prefix cache on (each user its own session). A conversation is\n"
    "messages of token ids: a system opening of O tokens (the same for all users), then per turn\n"
    "a user message of A new tokens (seeded, distinct per user and turn) and the reply of R\n"
    "tokens exactly as generated (greedy, ignore_eos). Before each turn the user's messages go\n"
    "through the server's trimming rule (server/chat_trim.h: when the prompt and the reply would\n"
    "not fit the context, the oldest messages go until what is left is at most --trim-keep of\n"
    "the room, n_ctx - R; the system opening stays), and the prompt is the opening and the\n"
    "messages from the cut on. A user's next turn is submitted as soon as its last one is done.\n"
    "The profile runs with trimming on, then off, on the same weights and backend; without it\n"
    "the batcher refuses the prompts that no longer fit (counted as failed turns). It prints per\n"
    "turn the turns answered and failed, the prompt tokens and the messages left out (means over\n"
    "the answered), the users whose cut moved (trims) and the share of prompt tokens found in\n"
    "the prefix cache; overall the turns answered with and without trimming and, with it, the\n"
    "cached share over the turns after each user's first trim (its turns after the one whose cut\n"
    "first moved), against the goal of at least 0.60. Exit status 1 when a turn fails with\n"
    "trimming on, or when that share is below the goal.\n"
    "\n"
    "\n";
/* clang-format on */

/* What the profile adds to a turn's outcome (the run's ext). */
typedef struct {
    int32_t n_prompt; /* what was submitted */
    int32_t trimmed;  /* messages left out */
    int moved;        /* the cut moved at this turn: a trim */
    int after;        /* a turn after the one of the user's first trim */
} long_rec;

/* One run (trimming on or off). */
typedef struct {
    bt_run base; /* first: the batcher's ud */
    int trim;
    char refusal[1200]; /* the first refusal's message (bench thread) */
} long_run;

static long_rec *rec_at(const bt_run *run, int32_t u, int32_t k)
{
    return (long_rec *)run->ext + bt_at(run, u, k);
}

/* The messages of one run's conversations (bt_run.ids), owned by the bench thread. */
typedef struct {
    long_run *rs;
    int32_t max_msg;     /* messages per conversation: 1 + 2 * turns */
    chat_turn *msg;      /* (users * max_msg) */
    int32_t *off;        /* (users * max_msg) where each message begins in the ids */
    int32_t *n_msg;      /* (users) */
    int32_t *cut;        /* (users) the last plan's first message */
    int32_t *first_trim; /* (users) the turn whose cut first moved; -1: none yet */
    int32_t *prompt;     /* (cap) scratch: the prompt being submitted (the batcher copies it) */
} long_convs;

static void convs_free(long_convs *cs)
{
    free(cs->msg);
    free(cs->off);
    free(cs->n_msg);
    free(cs->cut);
    free(cs->first_trim);
    free(cs->prompt);
}

/* Records user u's newest message: the last n ids of its conversation. */
static void add_message(long_convs *cs, int32_t u, chat_role role, int32_t n)
{
    size_t m = (size_t)u * (size_t)cs->max_msg + (size_t)cs->n_msg[u]++;
    cs->msg[m] = (chat_turn){.tokens = n, .role = role};
    cs->off[m] = cs->rs->base.n_ids[u] - n;
}

static int convs_init(long_convs *cs, long_run *rs)
{
    const bt_cfg *c = rs->base.cfg;
    memset(cs, 0, sizeof *cs);
    size_t U = (size_t)c->users;
    cs->rs = rs;
    cs->max_msg = 1 + 2 * c->turns;
    cs->msg = malloc(U * (size_t)cs->max_msg * sizeof *cs->msg);
    cs->off = malloc(U * (size_t)cs->max_msg * sizeof *cs->off);
    cs->n_msg = calloc(U, sizeof *cs->n_msg);
    cs->cut = calloc(U, sizeof *cs->cut);
    cs->first_trim = malloc(U * sizeof *cs->first_trim);
    cs->prompt = malloc((size_t)rs->base.cap * sizeof *cs->prompt);
    if (!cs->msg || !cs->off || !cs->n_msg || !cs->cut || !cs->first_trim || !cs->prompt) {
        convs_free(cs);
        return -1;
    }
    for (int32_t u = 0; u < c->users; u++) {
        cs->first_trim[u] = -1;
        if (c->opening > 0) /* the system opening, the same for every user (bt_run_init) */
            add_message(cs, u, CHAT_ROLE_SYSTEM, c->opening);
    }
    return 0;
}

/* {lock} User u's turn k: its reply to turn k - 1 (when there was one), this turn's message,
 * the trimming plan; sets the turn's record (the prompt is built by submit_turn). */
static void next_turn(void *ctx, int32_t u, int32_t k)
{
    long_convs *cs = ctx;
    bt_run *run = &cs->rs->base;
    const bt_cfg *c = run->cfg;
    long_rec *r = rec_at(run, u, k);
    if (k > 0 && bt_out(run, u, k - 1)->finish == IFL_FINISH_LENGTH) {
        bt_append_reply(run, u, k - 1);
        add_message(cs, u, CHAT_ROLE_ASSISTANT, c->reply);
    }
    bt_append_added(run, u, k);
    add_message(cs, u, CHAT_ROLE_USER, c->added);
    chat_trim_plan plan;
    /* a plan over the room is submitted all the same: the batcher's refusal is the outcome */
    (void)chat_trim(cs->msg + (size_t)u * (size_t)cs->max_msg, cs->n_msg[u], 0, c->n_ctx - c->reply,
                    cs->rs->trim, c->keep, &plan);
    r->moved = plan.first != cs->cut[u];
    cs->cut[u] = plan.first;
    if (r->moved && cs->first_trim[u] < 0)
        cs->first_trim[u] = k;
    r->after = cs->first_trim[u] >= 0 && k > cs->first_trim[u];
    r->trimmed = plan.trimmed_messages;
    r->n_prompt = plan.prompt_tokens;
}

/* User u's prompt (the system messages and those from the cut on) to the batcher; the first
 * refusal is kept for the report. */
static void submit_turn(void *ctx, ifl_batcher *b, int32_t u, int32_t k)
{
    long_convs *cs = ctx;
    long_run *rs = cs->rs;
    const int32_t *ids = bt_ids(&rs->base, u);
    const chat_turn *msg = cs->msg + (size_t)u * (size_t)cs->max_msg;
    const int32_t *off = cs->off + (size_t)u * (size_t)cs->max_msg;
    int32_t n = 0;
    for (int32_t i = 0; i < cs->n_msg[u]; i++)
        if (msg[i].role == CHAT_ROLE_SYSTEM || i >= cs->cut[u]) {
            memcpy(cs->prompt + n, ids + off[i], (size_t)msg[i].tokens * sizeof *ids);
            n += msg[i].tokens;
        }
    ifl_err err;
    ifl_submit_status st = bt_submit(b, &rs->base, u, k, cs->prompt, n, &err);
    if (st != IFL_SUBMIT_OK && !rs->refusal[0])
        snprintf(rs->refusal, sizeof rs->refusal, "user %d turn %d, %d tokens: %s: %s", u + 1,
                 k + 1, n, ifl_submit_status_name(st), err.msg);
}

/* ---- the report -------------------------------------------------------------------------- */

/* A run's figures over some of its turns. */
typedef struct {
    int64_t answered, failed, refused_long, refused_other;
    int64_t prompt, cached, trimmed, trims, tokens;
} long_sum;

static void sum_add(long_sum *s, const long_rec *r, const bt_outcome *o)
{
    if (!o->done)
        return;
    s->trims += r->moved;
    if (o->finish == -2) {
        s->failed++;
        if (o->status == IFL_SUBMIT_TOO_LONG)
            s->refused_long++;
        else
            s->refused_other++;
        return;
    }
    s->tokens += o->completion;
    if (o->finish != IFL_FINISH_LENGTH) {
        s->failed++;
        return;
    }
    s->answered++;
    s->prompt += r->n_prompt;
    s->cached += o->cached;
    s->trimmed += r->trimmed;
}

static double share(int64_t part, int64_t whole)
{
    return whole > 0 ? (double)part / (double)whole : 0;
}

/* Prints the run's table and totals; *after_share: the cached share after each user's first
 * trim (-1: no trim happened). Returns the failed turns. */
static int64_t print_run(const long_run *rs, const long_convs *cs, double *after_share)
{
    const bt_run *run = &rs->base;
    const bt_cfg *c = run->cfg;
    int32_t room = c->n_ctx - c->reply;
    long_sum all = {0}, after = {0};
    if (rs->trim)
        printf("trimming on (a trim keeps at most %.2f of the room: %d of %d tokens):\n", c->keep,
               (int32_t)((double)room * c->keep), room);
    else
        printf("trimming off:\n");
    printf("  turn  answered  failed  prompt mean  trimmed mean  trims  cached share\n");
    for (int32_t k = 0; k < c->turns; k++) {
        long_sum s = {0};
        for (int32_t u = 0; u < c->users; u++) {
            const long_rec *r = rec_at(run, u, k);
            const bt_outcome *o = bt_out(run, u, k);
            sum_add(&s, r, o);
            sum_add(&all, r, o);
            if (r->after)
                sum_add(&after, r, o);
        }
        if (s.answered)
            printf("  %4d  %8lld  %6lld  %11.1f  %12.2f  %5lld  %12.2f\n", k + 1,
                   (long long)s.answered, (long long)s.failed,
                   (double)s.prompt / (double)s.answered, (double)s.trimmed / (double)s.answered,
                   (long long)s.trims, share(s.cached, s.prompt));
        else
            printf("  %4d  %8lld  %6lld  %11s  %12s  %5lld  %12s\n", k + 1, 0LL,
                   (long long)s.failed, "-", "-", (long long)s.trims, "-");
    }
    int64_t total = (int64_t)c->users * c->turns;
    printf("  turns answered    : %lld of %lld", (long long)all.answered, (long long)total);
    if (all.failed)
        printf(" (%lld failed: %lld refused as too long, the prompt and max_tokens over the "
               "context of %d; %lld refused otherwise; %lld did not finish)",
               (long long)all.failed, (long long)all.refused_long, c->n_ctx,
               (long long)all.refused_other,
               (long long)(all.failed - all.refused_long - all.refused_other));
    printf("\n");
    if (rs->refusal[0])
        printf("  first refusal     : %s\n", rs->refusal);
    int32_t lo = -1, hi = -1, trimmed_users = 0;
    for (int32_t u = 0; u < c->users; u++) {
        int32_t f = cs->first_trim[u];
        if (f < 0)
            continue;
        trimmed_users++;
        lo = lo < 0 || f < lo ? f : lo;
        hi = f > hi ? f : hi;
    }
    if (rs->trim) {
        printf("  trims             : %lld (the cut moved; %.1f a user)", (long long)all.trims,
               (double)all.trims / c->users);
        if (trimmed_users)
            printf(", the first at turn %d..%d (%d of %d users)", lo + 1, hi + 1, trimmed_users,
                   c->users);
        printf("\n");
    }
    printf("  cached share      : %.3f of the prompt tokens answered (%lld of %lld)\n",
           share(all.cached, all.prompt), (long long)all.cached, (long long)all.prompt);
    *after_share = -1;
    if (rs->trim && after.prompt > 0) {
        *after_share = share(after.cached, after.prompt);
        printf("  after first trim  : %.3f of the prompt tokens of the %lld turns after each "
               "user's first trim (%lld of %lld; goal >= %.2f: %s)\n",
               *after_share, (long long)after.answered, (long long)after.cached,
               (long long)after.prompt, GOAL_SHARE, *after_share >= GOAL_SHARE ? "met" : "MISSED");
    } else if (rs->trim) {
        printf("  after first trim  : not measured (no turn after a trim was answered; goal >= "
               "%.2f)\n",
               GOAL_SHARE);
    }
    const ifl_batcher_stats *st = &run->st;
    printf("  prefix cache      : %llu lookups, %llu hits, %llu hit tokens, %llu evictions; %d "
           "blocks cached at the end, %d in the pool\n",
           (unsigned long long)st->prefix_lookups, (unsigned long long)st->prefix_hits,
           (unsigned long long)st->prefix_hit_tokens, (unsigned long long)st->prefix_evictions,
           st->kv_cached, st->kv_total);
    double wall = run->t1 > run->t0 ? (double)(run->t1 - run->t0) / 1e6 : 0;
    printf("  wall              : %.2f s, %lld tokens generated (%.1f tokens/s)\n", wall,
           (long long)all.tokens, wall > 0 ? (double)all.tokens / wall : 0);
    fflush(stdout);
    return all.failed;
}

/* ---- the command ------------------------------------------------------------------------- */

/* One run on backend be: a batcher with the prefix cache on, every conversation, its report. */
static int run_one(const ifl_runtime *rt, ifl_backend *be, long_run *rs, int64_t *failed,
                   double *after_share)
{
    long_convs cs;
    if (convs_init(&cs, rs)) {
        fprintf(stderr, "inflight bench: out of memory\n");
        return -1;
    }
    /* each next turn as soon as the last one is done, answered or not */
    bt_driver d = {.prepare = next_turn, .submit = submit_turn, .ctx = &cs};
    int rc = bt_run_batcher(rt, be, &rs->base, 0, &d);
    if (rc == 0)
        *failed = print_run(rs, &cs, after_share);
    convs_free(&cs);
    return rc;
}

/* --trim-keep: a share in (0, 1). */
static int parse_keep(const char *cmd, const char *arg, void *field)
{
    double v;
    if (cli_f64(cmd, "--trim-keep", arg, 0, 1, &v))
        return -1;
    if (v <= 0 || v >= 1) {
        fprintf(stderr, "inflight %s: --trim-keep: '%s' is not a number in (0, 1)\n", cmd, arg);
        return -1;
    }
    *(double *)field = v;
    return 0;
}

static const cli_opt OPTS[] = {
    BT_OPT_TURNS,
    {.name = "long", .type = CLI_MODE, .help = "the long-conversation profile"},
    BT_OPT_USERS,
    BT_ROW("opening", CLI_I32, "O", 0, 1 << 20, cfg.opening,
           "tokens of the system opening (0: none)"),
    BT_ROW("added", CLI_I32, "A", 1, 1 << 20, cfg.added, "tokens of each user message"),
    BT_ROW("reply", CLI_I32, "R", 1, 1 << 20, cfg.reply, "tokens of each reply (max_tokens)"),
    {.name = "trim-keep",
     .type = CLI_CUSTOM,
     .arg = "F",
     .def_text = STR(CHAT_TRIM_KEEP) " (the server's)",
     .off = offsetof(bt_opts, cfg.keep),
     .parse = parse_keep,
     .help = "what a trim leaves: at most this share (0 < F < 1) of the room, the context less "
             "R"},
    {.name = "trim",
     .type = CLI_WORD,
     .words = "on|off|both",
     .off = offsetof(bt_opts, runs),
     .help = "run with trimming on, off, or on and then off"},
    BT_OPTS_ENGINE,
};

/* The limits that need the model (bt_main's check). */
static int check_model(const bt_cfg *c)
{
    if ((int64_t)c->opening + c->added + c->reply > c->n_ctx) {
        fprintf(stderr,
                "inflight bench: --turns --long: the opening, one user message and its reply "
                "(%d + %d + %d tokens) do not fit the model's context of %d tokens\n",
                c->opening, c->added, c->reply, c->n_ctx);
        return -1;
    }
    return 0;
}

/* The header, the runs, their reports and the comparison; the exit status. */
static int bench_runs(const ifl_runtime *rt, const bt_opts *o)
{
    const bt_cfg *c = &o->cfg;
    int64_t whole = (int64_t)c->opening + (int64_t)c->turns * (c->added + c->reply);
    printf("inflight bench --turns --long: %s (%d layers, %d wide, weights %s, context %d); %d "
           "users x %d turns: a system opening of %d tokens, a user message of %d and a reply "
           "of %d (greedy, ignore_eos) a turn, %lld tokens in all (%.1fx the context); room %d "
           "(the context less the reply); blocks of %d tokens; max batch %d, step budget %d\n",
           o->dir, rt->model.cfg.n_layer, rt->model.cfg.n_embd, ifl_model_dtype_name(&rt->model),
           c->n_ctx, c->users, c->turns, c->opening, c->added, c->reply, (long long)whole,
           (double)whole / c->n_ctx, c->n_ctx - c->reply, c->block_size, c->max_batch,
           c->step_tokens);
    fflush(stdout);
    int modes[2], n_modes = bt_modes(o, modes), n_init = 0, rc = 1;
    long_run rs[2];
    int64_t failed[2] = {0, 0};
    double after[2] = {-1, -1};
    int64_t total = (int64_t)c->users * c->turns;
    for (; n_init < n_modes; n_init++) {
        rs[n_init] = (long_run){.trim = modes[n_init]};
        if (bt_run_init(&rs[n_init].base, c, sizeof(long_rec))) {
            n_init++; /* (freed all the same) */
            fprintf(stderr, "inflight bench: out of memory\n");
            goto out;
        }
    }
    for (int i = 0; i < n_modes; i++)
        if (run_one(rt, rt->be[0], &rs[i], &failed[i], &after[i]))
            goto out; /* (it said why) */
    rc = 0;
    printf("trimming on / off (trim-keep %.2f):\n", c->keep);
    for (int i = 0; i < n_modes; i++)
        printf("  turns answered %-3s: %lld of %lld (%lld failed)\n", modes[i] ? "on" : "off",
               (long long)(total - failed[i]), (long long)total, (long long)failed[i]);
    if (modes[0]) {
        if (after[0] >= 0)
            printf("  cached share after each user's first trim: %.3f (goal >= %.2f: %s)\n",
                   after[0], GOAL_SHARE, after[0] >= GOAL_SHARE ? "met" : "MISSED");
        else
            printf("  cached share after each user's first trim: not measured (no trim)\n");
        if (failed[0] || (after[0] >= 0 && after[0] < GOAL_SHARE))
            rc = 1;
    }
out:
    for (int i = 0; i < n_init; i++)
        bt_run_free(&rs[i].base);
    return rc;
}

int cmd_bench_turns_long(int argc, char **argv)
{
    /* The preset, on GPT-2 124M's context of 1024: 64 + 30 x (48 + 24) = 2224 tokens, 2.2x
     * the context, so that at trim-keep 0.5 every cut moves three times (turns 14, 22, 30; 0.25:
     * twice, 0.75: four times). Short replies because decode steps cost the most here: 720 a run
     * (24-token replies) against 960 with 32: 228-255 s of CPU (user) for both runs on the 124M
     * bf16 model (2-core Zen 3, loaded), against 266 s for 24 + 32 a turn, which moved twice. */
    bt_opts o = bt_preset(10, 30, 64, 48, 24); /* users, turns, opening, added, reply */
    o.cfg.keep = CHAT_TRIM_KEEP;
    static const cli_spec spec = CLI_SPEC("bench", USAGE, OPTS, "bench --turns --long has its own",
                                          "the number of turns is --turns=T");
    return bt_main(&spec, argc, argv, &o, check_model, bench_runs);
}
