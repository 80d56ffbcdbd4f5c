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
#include <pthread.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "batcher.h"
#include "chat_trim.h"
#include "cli.h"
#include "defaults.h"
#include "rng.h"
#include "runtime.h"
#include "util.h"

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

typedef struct {
    int32_t users, turns, opening, added, reply;
    double keep;
    int32_t max_batch, step_tokens;
    uint64_t seed;
    int32_t n_vocab, eos, n_ctx;
} long_cfg;

/* One turn: user u's turn k is rec[u * turns + k]. */
typedef struct {
    int32_t n_prompt; /* what was submitted */
    int32_t trimmed;  /* messages left out */
    int moved;        /* the cut moved at this turn: a trim */
    int after;        /* a turn after the one of the user's first trim */
    int32_t cached, completion;
    int finish; /* ifl_finish once done; -1: pending; -2: refused (status) */
    int status; /* ifl_submit_status of a refusal */
    int done;
} long_rec;

/* One run (trimming on or off), shared by the bench thread and the batcher's callbacks. */
typedef struct {
    pthread_mutex_t lock;
    pthread_cond_t cond; /* a turn done */
    const long_cfg *cfg;
    int trim;
    long_rec *rec;      /* (users * turns) {lock} */
    int32_t *gen;       /* (users * turns * reply) the generated ids {lock} */
    char refusal[1200]; /* the first refusal's message (bench thread) */
    uint64_t t0, t1;
    ifl_batcher_stats st; /* at the end */
} long_run;

static long_rec *rec_at(const long_run *rs, int32_t u, int32_t k)
{
    return &rs->rec[(size_t)u * (size_t)rs->cfg->turns + (size_t)k];
}

/* Batcher thread (queued: the submitting thread). */
static void on_event(void *ud, const ifl_event *ev)
{
    long_run *rs = ud;
    long_rec *r = ev->user;
    int32_t R = rs->cfg->reply;
    pthread_mutex_lock(&rs->lock);
    if (ev->type == IFL_EV_TOKEN && ev->index >= 0 && ev->index < R) {
        rs->gen[(size_t)(r - rs->rec) * (size_t)R + (size_t)ev->index] = ev->token;
    } else if (ev->type == IFL_EV_DONE) {
        r->cached = ev->cached_tokens;
        r->completion = ev->completion_tokens;
        r->finish = (int)ev->finish;
        if (ev->t_finished > rs->t1)
            rs->t1 = ev->t_finished;
        r->done = 1;
        pthread_cond_broadcast(&rs->cond);
    }
    pthread_mutex_unlock(&rs->lock);
}

/* The conversations of one run, owned by the bench thread. */
typedef struct {
    int32_t cap;         /* ids per conversation: opening + turns * (added + reply) */
    int32_t max_msg;     /* messages per conversation: 1 + 2 * turns */
    int32_t *ids;        /* (users * cap) */
    int32_t *n_ids;      /* (users) */
    chat_turn *msg;      /* (users * max_msg) */
    int32_t *off;        /* (users * max_msg) where each message begins in ids */
    int32_t *n_msg;      /* (users) */
    int32_t *cut;        /* (users) the last plan's first message */
    int32_t *first_trim; /* (users) the turn whose cut first moved; -1: none yet */
    int32_t *next;       /* (users) turns submitted */
    int32_t *todo;       /* (users) scratch: users to submit to */
    int32_t *prompt;     /* (cap) scratch: the prompt being submitted (the batcher copies it) */
} long_convs;

static void convs_free(long_convs *cs)
{
    free(cs->ids);
    free(cs->n_ids);
    free(cs->msg);
    free(cs->off);
    free(cs->n_msg);
    free(cs->cut);
    free(cs->first_trim);
    free(cs->next);
    free(cs->todo);
    free(cs->prompt);
}

/* n seeded ids in the vocabulary, never the end-of-text token. */
static void fill_ids(const long_cfg *c, uint64_t seed, int32_t *out, int32_t n)
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

/* Appends a message of n ids (copied from src, or seeded from seed when src is NULL). */
static void add_message(const long_cfg *c, long_convs *cs, int32_t u, chat_role role,
                        const int32_t *src, uint64_t seed, int32_t n)
{
    int32_t *ids = cs->ids + (size_t)u * (size_t)cs->cap;
    size_t m = (size_t)u * (size_t)cs->max_msg + (size_t)cs->n_msg[u]++;
    cs->msg[m] = (chat_turn){.tokens = n, .role = role};
    cs->off[m] = cs->n_ids[u];
    if (src)
        memcpy(ids + cs->n_ids[u], src, (size_t)n * sizeof *ids);
    else
        fill_ids(c, seed, ids + cs->n_ids[u], n);
    cs->n_ids[u] += n;
}

static int convs_init(long_convs *cs, const long_cfg *c)
{
    memset(cs, 0, sizeof *cs);
    size_t U = (size_t)c->users;
    cs->cap = c->opening + c->turns * (c->added + c->reply);
    cs->max_msg = 1 + 2 * c->turns;
    cs->ids = malloc(U * (size_t)cs->cap * sizeof *cs->ids);
    cs->n_ids = calloc(U, sizeof *cs->n_ids);
    cs->msg = malloc(U * (size_t)cs->max_msg * sizeof *cs->msg);
    cs->off = malloc(U * (size_t)cs->max_msg * sizeof *cs->off);
    cs->n_msg = calloc(U, sizeof *cs->n_msg);
    cs->cut = calloc(U, sizeof *cs->cut);
    cs->first_trim = malloc(U * sizeof *cs->first_trim);
    cs->next = calloc(U, sizeof *cs->next);
    cs->todo = malloc(U * sizeof *cs->todo);
    cs->prompt = malloc((size_t)cs->cap * sizeof *cs->prompt);
    if (!cs->ids || !cs->n_ids || !cs->msg || !cs->off || !cs->n_msg || !cs->cut ||
        !cs->first_trim || !cs->next || !cs->todo || !cs->prompt) {
        convs_free(cs);
        return -1;
    }
    for (int32_t u = 0; u < c->users; u++) {
        cs->first_trim[u] = -1;
        if (c->opening > 0) /* the same opening for every user: its blocks are shared */
            add_message(c, cs, u, CHAT_ROLE_SYSTEM, NULL, c->seed, c->opening);
    }
    return 0;
}

/* {lock} User u's turn k: its reply to turn k - 1 (when there was one), this turn's message,
 * the trimming plan; sets the turn's record (the prompt is built by submit_turn). */
static void next_turn(long_run *rs, long_convs *cs, int32_t u, int32_t k)
{
    const long_cfg *c = rs->cfg;
    long_rec *r = rec_at(rs, u, k);
    if (k > 0 && r[-1].finish == IFL_FINISH_LENGTH)
        add_message(c, cs, u, CHAT_ROLE_ASSISTANT, rs->gen + (size_t)(r - 1 - rs->rec) * c->reply,
                    0, c->reply);
    uint64_t mix = c->seed ^ ((uint64_t)(u + 1) << 32) ^ (uint64_t)(k + 1);
    add_message(c, cs, u, CHAT_ROLE_USER, NULL, ifl_splitmix64(&mix), c->added);
    chat_trim_plan plan;
    /* a plan over the room is submitted all the same: the batcher's refusal is the outcome */
    (void)chat_trim(cs->msg + (size_t)u * (size_t)cs->max_msg, cs->n_msg[u], 0, c->n_ctx - c->reply,
                    rs->trim, c->keep, &plan);
    r->moved = plan.first != cs->cut[u];
    cs->cut[u] = plan.first;
    if (r->moved && cs->first_trim[u] < 0)
        cs->first_trim[u] = k;
    r->after = cs->first_trim[u] >= 0 && k > cs->first_trim[u];
    r->trimmed = plan.trimmed_messages;
    r->n_prompt = plan.prompt_tokens;
    r->finish = -1;
}

/* User u's prompt (the system messages and those from the cut on) to the batcher; on refusal
 * the turn ends as refused. */
static void submit_turn(ifl_batcher *b, long_run *rs, long_convs *cs, int32_t u, int32_t k)
{
    const long_cfg *c = rs->cfg;
    long_rec *r = rec_at(rs, u, k);
    const int32_t *ids = cs->ids + (size_t)u * (size_t)cs->cap;
    const chat_turn *msg = cs->msg + (size_t)u * (size_t)cs->max_msg;
    const int32_t *off = cs->off + (size_t)u * (size_t)cs->max_msg;
    int32_t n = 0;
    for (int32_t i = 0; i < cs->n_msg[u]; i++)
        if (msg[i].role == CHAT_ROLE_SYSTEM || i >= cs->cut[u]) {
            memcpy(cs->prompt + n, ids + off[i], (size_t)msg[i].tokens * sizeof *ids);
            n += msg[i].tokens;
        }
    ifl_request_params rp = {.session = (uint64_t)u + 1,
                             .prompt = cs->prompt,
                             .n_prompt = n,
                             .max_tokens = c->reply,
                             .sampling = {.temperature = 0, .top_k = 0, .top_p = 1},
                             .seed = c->seed + (uint64_t)u,
                             .ignore_eos = 1,
                             .user = r};
    uint64_t id;
    ifl_err err = {0};
    ifl_submit_status st = ifl_batcher_submit(b, &rp, &id, NULL, &err);
    if (st == IFL_SUBMIT_OK)
        return;
    if (!rs->refusal[0])
        snprintf(rs->refusal, sizeof rs->refusal, "user %d turn %d, %d tokens: %s: %s", u + 1,
                 k + 1, n, ifl_submit_status_name(st), err.msg);
    pthread_mutex_lock(&rs->lock);
    r->finish = -2;
    r->status = (int)st;
    r->done = 1;
    pthread_mutex_unlock(&rs->lock);
}

/* Runs every user's conversation to its end on batcher b: a user's next turn is submitted as
 * soon as its last one is done (answered or not). */
static void drive(ifl_batcher *b, long_run *rs, long_convs *cs)
{
    const long_cfg *c = rs->cfg;
    rs->t0 = ifl_now_us();
    pthread_mutex_lock(&rs->lock);
    for (;;) {
        int32_t n = 0, busy = 0;
        for (int32_t u = 0; u < c->users; u++) {
            int32_t k = cs->next[u];
            if (k > 0 && !rec_at(rs, u, k - 1)->done) {
                busy++;
                continue;
            }
            if (k == c->turns)
                continue;
            next_turn(rs, cs, u, k);
            cs->next[u] = k + 1;
            cs->todo[n++] = u;
        }
        if (!n && !busy)
            break;
        if (!n) {
            pthread_cond_wait(&rs->cond, &rs->lock);
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

/* A run's figures over some of its turns. */
typedef struct {
    int64_t answered, failed, refused_long, refused_other;
    int64_t prompt, cached, trimmed, trims, tokens;
} long_sum;

static void sum_add(long_sum *s, const long_rec *r)
{
    if (!r->done)
        return;
    s->trims += r->moved;
    if (r->finish == -2) {
        s->failed++;
        if (r->status == IFL_SUBMIT_TOO_LONG)
            s->refused_long++;
        else
            s->refused_other++;
        return;
    }
    s->tokens += r->completion;
    if (r->finish != IFL_FINISH_LENGTH) {
        s->failed++;
        return;
    }
    s->answered++;
    s->prompt += r->n_prompt;
    s->cached += r->cached;
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
    const long_cfg *c = rs->cfg;
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
            const long_rec *r = rec_at(rs, u, k);
            sum_add(&s, r);
            sum_add(&all, r);
            if (r->after)
                sum_add(&after, r);
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
    const ifl_batcher_stats *st = &rs->st;
    printf("  prefix cache      : %llu lookups, %llu hits, %llu hit tokens, %llu evictions; %d "
           "blocks cached at the end, %d in the pool\n",
           (unsigned long long)st->prefix_lookups, (unsigned long long)st->prefix_hits,
           (unsigned long long)st->prefix_hit_tokens, (unsigned long long)st->prefix_evictions,
           st->kv_cached, st->kv_total);
    double wall = rs->t1 > rs->t0 ? (double)(rs->t1 - rs->t0) / 1e6 : 0;
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
    const long_cfg *c = rs->cfg;
    ifl_err err;
    long_convs cs;
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
                            .on_event = on_event,
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
    *failed = print_run(rs, &cs, after_share);
    convs_free(&cs);
    return 0;
}

static int run_init(long_run *rs, const long_cfg *c, int trim)
{
    memset(rs, 0, sizeof *rs);
    pthread_mutex_init(&rs->lock, NULL);
    pthread_cond_init(&rs->cond, NULL);
    rs->cfg = c;
    rs->trim = trim;
    size_t n = (size_t)c->users * (size_t)c->turns;
    rs->rec = calloc(n, sizeof *rs->rec);
    rs->gen = calloc(n * (size_t)c->reply, sizeof *rs->gen);
    return rs->rec && rs->gen ? 0 : -1;
}

static void run_free(long_run *rs)
{
    free(rs->rec);
    free(rs->gen);
    pthread_mutex_destroy(&rs->lock);
    pthread_cond_destroy(&rs->cond);
}

typedef struct {
    const char *dir, *trim;
    long_cfg cfg;
    int32_t threads;
    ifl_model_opts mo;
    ifl_device want;
    ifl_isa isa;
} long_opts;

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

#define ROW(NAME, TYPE, ARG, LO, HI, F, HELP)                                                      \
    CLI_ROW(NAME, 0, TYPE, ARG, LO, HI, long_opts, F, HELP)
static const cli_opt OPTS[] = {
    {.name = "turns",
     .type = CLI_I32,
     .arg = "T",
     .lo = 1,
     .hi = 10000,
     .off = offsetof(long_opts, cfg.turns),
     .flags = CLI_OPTIONAL_ARG,
     .help = "turns per user (the value needs the '=')"},
    {.name = "long", .type = CLI_MODE, .help = "the long-conversation profile"},
    ROW("users", CLI_I32, "U", 1, 10000, cfg.users, "users, each with its own session"),
    ROW("opening", CLI_I32, "O", 0, 1 << 20, cfg.opening, "tokens of the system opening (0: none)"),
    ROW("added", CLI_I32, "A", 1, 1 << 20, cfg.added, "tokens of each user message"),
    ROW("reply", CLI_I32, "R", 1, 1 << 20, cfg.reply, "tokens of each reply (max_tokens)"),
    {.name = "trim-keep",
     .type = CLI_CUSTOM,
     .arg = "F",
     .def_text = STR(CHAT_TRIM_KEEP) " (the server's)",
     .off = offsetof(long_opts, cfg.keep),
     .parse = parse_keep,
     .help = "what a trim leaves: at most this share (0 < F < 1) of the room, the context less "
             "R"},
    {.name = "trim",
     .type = CLI_WORD,
     .words = "on|off|both",
     .off = offsetof(long_opts, trim),
     .help = "run with trimming on, off, or on and then off"},
    CLI_OPT_BENCH_MODEL(long_opts, dir),
    CLI_OPT_WEIGHTS(long_opts, mo),
    CLI_OPT_MAX_BATCH(long_opts, cfg.max_batch),
    CLI_OPT_STEP_TOKENS(long_opts, cfg.step_tokens),
    CLI_OPT_THREADS(long_opts, threads),
    CLI_OPT_DEVICE(long_opts, want, CLI_INDEX),
    CLI_OPT_ISA(long_opts, isa),
    CLI_OPT_SEED(long_opts, cfg.seed, "seed of the token ids"),
};
#undef ROW

/* The limits that need the model; fills the model's figures into the profile. */
static int check_model(long_cfg *c, const ifl_runtime *rt)
{
    c->n_ctx = rt->model.cfg.n_ctx;
    if ((int64_t)c->opening + c->added + c->reply > c->n_ctx) {
        fprintf(stderr,
                "inflight bench: --turns --long: the opening, one user message and its reply "
                "(%d + %d + %d tokens) do not fit the model's context of %d tokens\n",
                c->opening, c->added, c->reply, c->n_ctx);
        return -1;
    }
    int32_t nv = ifl_tokenizer_n_vocab(rt->tok);
    c->n_vocab = nv < rt->model.cfg.n_vocab ? nv : rt->model.cfg.n_vocab;
    c->eos = rt->model.cfg.eos_token_id;
    return 0;
}

/* The runs, their reports and the comparison; the exit status. */
static int bench_runs(const ifl_runtime *rt, const long_opts *o)
{
    const long_cfg *c = &o->cfg;
    int modes[2], n_modes = 0, n_init = 0, rc = 1;
    if (strcmp(o->trim, "off"))
        modes[n_modes++] = 1;
    if (strcmp(o->trim, "on"))
        modes[n_modes++] = 0;
    long_run rs[2];
    int64_t failed[2] = {0, 0};
    double after[2] = {-1, -1};
    int64_t total = (int64_t)c->users * c->turns;
    for (; n_init < n_modes; n_init++)
        if (run_init(&rs[n_init], c, modes[n_init])) {
            fprintf(stderr, "inflight bench: out of memory\n");
            goto out;
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
        run_free(&rs[i]);
    return rc;
}

int cmd_bench_turns_long(int argc, char **argv)
{
    /* The preset, on GPT-2 124M's context of 1024: 64 + 30 x (48 + 24) = 2224 tokens, 2.2x
     * the context, so that at trim-keep 0.5 every cut moves three times (turns 14, 22, 30; 0.25:
     * twice, 0.75: four times). Short replies because decode steps cost the most here: 720 a run
     * (24-token replies) against 960 with 32: 228-255 s of CPU (user) for both runs on the 124M
     * bf16 model (2-core Zen 3, loaded), against 266 s for 24 + 32 a turn, which moved twice. */
    long_opts o = {.trim = "both",
                   .cfg = {.users = 10,
                           .turns = 30,
                           .opening = 64,
                           .added = 48,
                           .reply = 24,
                           .keep = CHAT_TRIM_KEEP,
                           .max_batch = IFL_DEFAULT_MAX_BATCH,
                           .step_tokens = IFL_DEFAULT_STEP_TOKENS,
                           .seed = 1},
                   .want = IFL_DEVICE_AUTO,
                   .isa = IFL_ISA_AUTO};
    static const cli_spec spec = CLI_SPEC("bench", USAGE, OPTS, "bench --turns --long has its own",
                                          "the number of turns is --turns=T");
    int st = cli_parse(&spec, argc, argv, 1, &o, sizeof o);
    if (st >= 0)
        return st;
    o.cfg.step_tokens = ifl_batcher_step_budget(o.cfg.max_batch, o.cfg.step_tokens);
    if (cli_bench_model(&o.dir))
        return 1;
    ifl_runtime rt = {0};
    ifl_runtime_opts ro = {.model_dir = o.dir,
                           .model_opts = o.mo,
                           .threads = o.threads,
                           .n_backends = 1,
                           .max_seqs = o.cfg.max_batch,
                           .max_tokens = o.cfg.step_tokens,
                           .prefault = 1}; /* trimming on, then off: on one warm pool */
    if (cli_runtime_open_model("bench", o.want, o.isa, &ro, &rt))
        return 1;
    if (check_model(&o.cfg, &rt)) {
        ifl_runtime_close(&rt);
        return 1;
    }
    if (cli_runtime_start_backends("bench", &ro, &rt))
        return 1;
    const long_cfg *c = &o.cfg;
    int64_t whole = (int64_t)c->opening + (int64_t)c->turns * (c->added + c->reply);
    printf("inflight bench --turns --long: %s (%d layers, %d wide, weights %s, context %d); %d "
           "users x %d turns: a system opening of %d tokens, a user message of %d and a reply "
           "of %d (greedy, ignore_eos) a turn, %lld tokens in all (%.1fx the context); room %d "
           "(the context less the reply); blocks of %d tokens; max batch %d, step budget %d\n",
           o.dir, rt.model.cfg.n_layer, rt.model.cfg.n_embd, ifl_model_dtype_name(&rt.model),
           c->n_ctx, c->users, c->turns, c->opening, c->added, c->reply, (long long)whole,
           (double)whole / c->n_ctx, c->n_ctx - c->reply, rt.be[0]->params.kv_block_size,
           c->max_batch, c->step_tokens);
    fflush(stdout);
    int rc = bench_runs(&rt, &o);
    ifl_runtime_close(&rt);
    return rc;
}
