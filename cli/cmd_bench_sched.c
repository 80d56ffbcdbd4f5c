/* cmd_bench_sched.c: `inflight bench` (without --engine; --turns goes to cmd_bench_turns.c): the
 * seed's profiler, in-process against the batcher. Closed loop: rounds of N concurrent requests
 * submitted 50 ms apart (default: 10 x "Hello, how are you?", max_tokens 32, ignore_eos), each
 * round waiting for its requests to end.
 * Open loop: Poisson arrivals at a given rate. Prints response throughput, time to first token,
 * inter-token latency (p50/p90/p99) and mean time to last response, per policy. With
 * --long-prompt N, then a long prompt joining running decoders: its steps' times from the step
 * records against the decode-only steps (the timing test_batcher does not assert). */
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

static const char *const USAGE =
    "usage: inflight bench [options]          (the scheduler profile)\n"
    "       inflight bench --engine [options] (the engine alone: see inflight bench --engine "
    "--help)\n"
    "       inflight bench --turns[=T] [options] (multi-turn conversations, the prefix cache on\n"
    "                                           and off: see inflight bench --turns --help)\n"
    "       inflight bench --choices[=N] [options] (n choices of one prompt against one: see\n"
    "                                           inflight bench --choices --help)\n"
    "       inflight bench --db-writer [options] (the request log's writer: see inflight bench\n"
    "                                           --db-writer --help)\n"
    "\n"
    "Runs the seed's profiler in-process against the batcher: rounds of N concurrent requests\n"
    "submitted --interval-ms apart, each round waiting for its requests to finish (closed loop), "
    "or\n"
    "with --rate, Poisson arrivals (open loop). Prints response throughput, time to first token,\n"
    "inter-token latency (p50/p90/p99) and mean time to last response.\n"
    "\n";

typedef struct {
    uint64_t t_submit, t_first, t_done, t_last_token;
    int32_t tokens;
    int done;
    int finish;
} req_stat;

/* One step as --long-prompt looks at it. */
typedef struct {
    double ms;
    int32_t n_seqs, prefill_tokens;
    int long_chunk; /* the step carried a chunk of the long prompt */
} step_stat;

/* Shared by the bench thread and the batcher's callbacks; every field {lock}. */
typedef struct {
    pthread_mutex_t lock;
    pthread_cond_t cond; /* a request done; with --long-prompt also every token */
    req_stat *r;
    int32_t n_done;
    double *itl; /* milliseconds */
    size_t n_itl, cap_itl;
    /* --long-prompt */
    const req_stat *long_r; /* the long prompt's entry, to know its started event */
    uint64_t long_id;       /* its request id, from that event (before its first step) */
    int recording;          /* on_step appends to steps */
    step_stat *steps;
    size_t n_steps, cap_steps;
} bench_state;

/* An array of `size`-byte items with room for item n: items itself, or a larger copy (cap is
 * updated); NULL when out of memory (items is then unchanged). */
static void *grow(void *items, size_t *cap, size_t n, size_t size)
{
    if (n < *cap)
        return items;
    size_t c = *cap ? 2 * *cap : 4096;
    void *p = realloc(items, c * size);
    if (p)
        *cap = c;
    return p;
}

/* Batcher thread (queued: the submitting thread). */
static void on_event(void *ud, const ifl_event *ev)
{
    bench_state *bs = ud;
    req_stat *r = ev->user;
    uint64_t now = ifl_now_us();
    pthread_mutex_lock(&bs->lock);
    if (ev->type == IFL_EV_STARTED && r == bs->long_r) {
        bs->long_id = ev->request_id;
    } else if (ev->type == IFL_EV_TOKEN) {
        if (r->tokens == 0) {
            r->t_first = now;
        } else {
            double *itl = grow(bs->itl, &bs->cap_itl, bs->n_itl, sizeof *itl);
            if (itl) {
                bs->itl = itl;
                itl[bs->n_itl++] = (double)(now - r->t_last_token) / 1e3;
            }
        }
        r->t_last_token = now;
        r->tokens++;
        if (bs->recording)
            pthread_cond_broadcast(&bs->cond);
    } else if (ev->type == IFL_EV_DONE) {
        r->t_done = now;
        r->done = 1;
        r->finish = (int)ev->finish;
        bs->n_done++;
        pthread_cond_broadcast(&bs->cond);
    }
    pthread_mutex_unlock(&bs->lock);
}

/* Batcher thread: the step records, while --long-prompt records them. */
static void on_step(void *ud, const ifl_step_record *rec)
{
    bench_state *bs = ud;
    pthread_mutex_lock(&bs->lock);
    step_stat *steps =
        bs->recording ? grow(bs->steps, &bs->cap_steps, bs->n_steps, sizeof *steps) : NULL;
    if (steps) {
        bs->steps = steps;
        int chunk = 0;
        for (int32_t k = 0; k < rec->n_seqs; k++)
            chunk |= rec->is_prefill[k] && bs->long_id && rec->request_ids[k] == bs->long_id;
        steps[bs->n_steps++] = (step_stat){.ms = rec->ms,
                                           .n_seqs = rec->n_seqs,
                                           .prefill_tokens = rec->prefill_tokens,
                                           .long_chunk = chunk};
    }
    pthread_mutex_unlock(&bs->lock);
}

static void sleep_until_us(uint64_t t)
{
    for (;;) {
        uint64_t now = ifl_now_us();
        if (now >= t)
            return;
        uint64_t d = t - now;
        struct timespec ts = {.tv_sec = (time_t)(d / 1000000u),
                              .tv_nsec = (long)(d % 1000000u) * 1000};
        nanosleep(&ts, NULL);
    }
}

typedef struct {
    int32_t concurrency, rounds, n_open;
    double interval_ms, rate;
    int32_t max_tokens;
    int ignore_eos;
    float temperature;
    uint64_t seed;
    const ifl_tokens *prompt;
    int32_t long_prompt; /* --long-prompt N, 0: off */
    int32_t max_batch, step_tokens;
    int no_prefix_cache; /* --prefix-cache off */
} bench_cfg;

/* Submits request k of the profile; 1 if the batcher refused it (then counted as done). */
static int submit_profile_request(ifl_batcher *b, bench_state *bs, const bench_cfg *cfg, int32_t k)
{
    req_stat *r = &bs->r[k];
    ifl_request_params rp = {.session = (uint64_t)k + 1,
                             .prompt = cfg->prompt->ids,
                             .n_prompt = (int32_t)cfg->prompt->n,
                             .max_tokens = cfg->max_tokens,
                             .sampling = {.temperature = cfg->temperature, .top_k = 0, .top_p = 1},
                             .seed = cfg->seed + (uint64_t)k,
                             .ignore_eos = cfg->ignore_eos,
                             .user = r};
    r->t_submit = ifl_now_us();
    uint64_t id;
    ifl_err err;
    ifl_submit_status st = ifl_batcher_submit(b, &rp, &id, NULL, &err);
    if (st == IFL_SUBMIT_OK)
        return 0;
    fprintf(stderr, "inflight bench: request %d refused (%s): %s\n", k, ifl_submit_status_name(st),
            err.msg);
    pthread_mutex_lock(&bs->lock);
    r->done = 1;
    r->finish = -1;
    bs->n_done++;
    pthread_mutex_unlock(&bs->lock);
    return 1;
}

static int run_profile(ifl_batcher *b, bench_state *bs, const bench_cfg *cfg, bench_result *res)
{
    int32_t total = cfg->rate > 0 ? cfg->n_open : cfg->concurrency * cfg->rounds;
    bs->r = calloc((size_t)total, sizeof *bs->r);
    bs->n_done = 0;
    bs->n_itl = 0;
    if (!bs->r)
        return -1;
    ifl_rng arrivals;
    ifl_rng_seed(&arrivals, cfg->seed);
    uint64_t t0 = ifl_now_us(), next = t0;
    int32_t submitted = 0, failed = 0;
    while (submitted < total) {
        int32_t in_round = cfg->rate > 0 ? total : cfg->concurrency;
        for (int32_t i = 0; i < in_round; i++) {
            sleep_until_us(next);
            failed += submit_profile_request(b, bs, cfg, submitted);
            submitted++;
            if (cfg->rate > 0) /* exponential gaps: Poisson arrivals */
                next += (uint64_t)(-log(1.0 - ifl_rng_uniform(&arrivals)) / cfg->rate * 1e6);
            else
                next += (uint64_t)(cfg->interval_ms * 1e3);
        }
        /* closed loop: the next round starts when this one has finished */
        pthread_mutex_lock(&bs->lock);
        while (bs->n_done < submitted)
            pthread_cond_wait(&bs->cond, &bs->lock);
        pthread_mutex_unlock(&bs->lock);
        next = ifl_now_us();
    }
    uint64_t t1 = 0;
    double *ttft = malloc((size_t)total * sizeof *ttft);
    if (!ttft) {
        free(bs->r);
        bs->r = NULL;
        return -1;
    }
    double last_sum = 0;
    int64_t tokens = 0;
    int32_t ok = 0;
    for (int32_t i = 0; i < total; i++) {
        req_stat *r = &bs->r[i];
        if (r->finish < 0 || !r->tokens)
            continue;
        ttft[ok++] = (double)(r->t_first - r->t_submit) / 1e3;
        last_sum += (double)(r->t_done - r->t_submit) / 1e6;
        tokens += r->tokens;
        t1 = r->t_done > t1 ? r->t_done : t1;
    }
    memset(res, 0, sizeof *res);
    res->requests = total;
    res->failed = failed;
    res->tokens = tokens;
    res->wall_s = (double)(t1 - t0) / 1e6;
    res->throughput = res->wall_s > 0 ? (double)tokens / res->wall_s : 0;
    bench_ttft(res, ttft, (size_t)ok);
    bench_itl(res, bs->itl, bs->n_itl);
    res->last_mean = ok ? last_sum / ok : 0;
    free(ttft);
    free(bs->r);
    bs->r = NULL;
    return 0;
}

/* ---- --long-prompt ----------------------------------------------------------------------- */

#define LP_WARM 8  /* tokens every decoder has (decode-only steps) before the long prompt joins */
#define LP_AFTER 8 /* decode steps the decoders still have to run after its prefill, at least */

typedef struct {
    int32_t n_dec;       /* requests decoding while the long prompt was prefilled */
    int32_t chunk_steps; /* steps that carried a chunk of it */
    int32_t dec_steps;   /* decode-only steps of the same n_dec requests */
    double worst_ms, median_ms;
} long_result;

/* Waits ({lock} held) until each of the n requests has k tokens or is done. */
static void wait_tokens(bench_state *bs, const req_stat *r, int32_t n, int32_t k)
{
    for (;;) {
        int32_t i = 0;
        while (i < n && (r[i].tokens >= k || r[i].done))
            i++;
        if (i == n)
            return;
        pthread_cond_wait(&bs->cond, &bs->lock);
    }
}

static int submit_one(ifl_batcher *b, const bench_cfg *cfg, req_stat *r, uint64_t session,
                      const int32_t *ids, int32_t n, int32_t max_tokens)
{
    ifl_request_params rp = {.session = session,
                             .prompt = ids,
                             .n_prompt = n,
                             .max_tokens = max_tokens,
                             .sampling = {.temperature = cfg->temperature, .top_k = 0, .top_p = 1},
                             .seed = cfg->seed + session,
                             .ignore_eos = 1,
                             .user = r};
    r->t_submit = ifl_now_us();
    uint64_t id;
    ifl_err err;
    if (ifl_batcher_submit(b, &rp, &id, NULL, &err) == IFL_SUBMIT_OK)
        return 0;
    fprintf(stderr, "inflight bench: --long-prompt: a request of %d tokens was refused: %s\n", n,
            err.msg);
    return -1;
}

/* The recorded steps into out: the chunk steps' worst, the decode-only steps' median. */
static int summarize_long(bench_state *bs, long_result *out)
{
    double *dec = malloc((bs->n_steps + 1) * sizeof *dec);
    if (!dec)
        return -1;
    size_t n = 0;
    for (size_t i = 0; i < bs->n_steps; i++) {
        const step_stat *st = &bs->steps[i];
        if (st->long_chunk) {
            out->chunk_steps++;
            out->worst_ms = st->ms > out->worst_ms ? st->ms : out->worst_ms;
        } else if (st->prefill_tokens == 0 && st->n_seqs == out->n_dec) {
            dec[n++] = st->ms;
        }
    }
    bench_sort(dec, n);
    out->dec_steps = (int32_t)n;
    out->median_ms = bench_pct(dec, n, 50);
    free(dec);
    return 0;
}

/* n_dec requests of the profile's prompt decode; once each has LP_WARM tokens the long prompt
 * (the profile's prompt repeated to N tokens, max_tokens 1) joins them; all run to their end. */
static int run_long_prompt(ifl_batcher *b, bench_state *bs, const bench_cfg *cfg, int32_t n_ctx,
                           long_result *out)
{
    int rc = -1;
    int32_t N = cfg->long_prompt, np = (int32_t)cfg->prompt->n, submitted = 0;
    memset(out, 0, sizeof *out);
    out->n_dec = cfg->concurrency < cfg->max_batch - 1 ? cfg->concurrency : cfg->max_batch - 1;
    int32_t room = cfg->step_tokens - out->n_dec; /* > 0: step_tokens >= max_batch > n_dec */
    int32_t dec_max = 1 + LP_WARM + (N + room - 1) / room + LP_AFTER + 16;
    if (dec_max > n_ctx - np)
        dec_max = n_ctx - np;
    int32_t *ids = malloc((size_t)N * sizeof *ids);
    req_stat *r = calloc((size_t)out->n_dec + 1, sizeof *r);
    if (!ids || !r) {
        fprintf(stderr, "inflight bench: --long-prompt: out of memory\n");
        goto out;
    }
    for (int32_t i = 0; i < N; i++)
        ids[i] = cfg->prompt->ids[i % np];
    pthread_mutex_lock(&bs->lock);
    bs->n_done = 0;
    bs->n_steps = 0;
    bs->long_id = 0;
    bs->long_r = &r[out->n_dec];
    bs->recording = 1;
    pthread_mutex_unlock(&bs->lock);
    for (; submitted < out->n_dec; submitted++)
        if (submit_one(b, cfg, &r[submitted], (uint64_t)submitted + 1, cfg->prompt->ids, np,
                       dec_max))
            goto wait;
    pthread_mutex_lock(&bs->lock);
    wait_tokens(bs, r, out->n_dec, 1 + LP_WARM);
    pthread_mutex_unlock(&bs->lock);
    if (submit_one(b, cfg, &r[out->n_dec], (uint64_t)out->n_dec + 1, ids, N, 1))
        goto wait;
    submitted++;
    rc = 0;
wait:
    pthread_mutex_lock(&bs->lock);
    while (bs->n_done < submitted)
        pthread_cond_wait(&bs->cond, &bs->lock);
    bs->recording = 0;
    bs->long_r = NULL;
    if (rc == 0 && summarize_long(bs, out))
        rc = -1;
    pthread_mutex_unlock(&bs->lock);
out:
    free(ids);
    free(r);
    return rc;
}

static void long_result_print(const bench_cfg *cfg, const long_result *lr)
{
    printf("  long prompt           : %d tokens joined %d decoding: slowest step with a chunk "
           "%.2f ms (of %d, budget %d) vs median decode-only %.2f ms (of %d): %.1fx\n",
           cfg->long_prompt, lr->n_dec, lr->worst_ms, lr->chunk_steps, cfg->step_tokens,
           lr->median_ms, lr->dec_steps, lr->median_ms > 0 ? lr->worst_ms / lr->median_ms : 0);
    fflush(stdout);
}

/* ---- the command -------------------------------------------------------------------------- */

typedef struct {
    const char *dir, *prompt, *policy;
    bench_cfg cfg;
    int32_t threads;
    double temperature;
    ifl_model_opts mo;
    ifl_device want;
    ifl_isa isa;
} bench_opts;

#define ROW(NAME, TYPE, ARG, LO, HI, F, DEF, HELP)                                                 \
    {                                                                                              \
        .name = NAME, .type = TYPE, .arg = ARG, .lo = LO, .hi = HI, .def = DEF,                    \
        .off = offsetof(bench_opts, F), .help = HELP                                               \
    }
static const cli_opt OPTS[] = {
    {.name = "policy",
     .type = CLI_WORD,
     .words = "iterative|static|both",
     .def = "both",
     .off = offsetof(bench_opts, policy),
     .help = "both: the same weights, one after the other, and their ratio"},
    CLI_OPT_BENCH_MODEL(bench_opts, dir),
    CLI_OPT_WEIGHTS(bench_opts, mo),
    ROW("concurrency", CLI_I32, "N", 1, 100000, cfg.concurrency, "10", "requests per round"),
    ROW("rounds", CLI_I32, "N", 1, 100000, cfg.rounds, "1", "rounds"),
    ROW("interval-ms", CLI_F64, "X", 0, 3.6e6, cfg.interval_ms, "50",
        "between submissions in a round"),
    {.name = "rate",
     .type = CLI_F64,
     .arg = "R",
     .lo = 1e-3,
     .hi = 1e6,
     .off = offsetof(bench_opts, cfg.rate),
     .def_text = "off: closed loop",
     .help = "open loop: R requests per second, Poisson arrivals"},
    ROW("requests", CLI_I32, "N", 1, 1000000, cfg.n_open, "50", "open loop: how many"),
    ROW("prompt", CLI_STR, "TEXT", 0, 0, prompt, "Hello, how are you?", "the prompt"),
    CLI_OPT_MAX_TOKENS(bench_opts, cfg.max_tokens, 1, "per request"),
    {.name = "no-ignore-eos",
     .type = CLI_FLAG_OFF,
     .def = "1",
     .off = offsetof(bench_opts, cfg.ignore_eos),
     .def_text = "ignore it, as the seed's profile does",
     .help = "stop at <|endoftext|>"},
    CLI_OPT_TEMPERATURE(bench_opts, temperature, "0: greedy"),
    CLI_OPT_MAX_BATCH(bench_opts, cfg.max_batch),
    CLI_OPT_STEP_TOKENS(bench_opts, cfg.step_tokens),
    CLI_OPT_THREADS(bench_opts, threads),
    CLI_OPT_DEVICE(bench_opts, want, CLI_INDEX),
    CLI_OPT_ISA(bench_opts, isa),
    CLI_OPT_SEED(bench_opts, cfg.seed, "seed of the open-loop arrivals and of sampling"),
    {.name = "long-prompt",
     .type = CLI_I32,
     .arg = "N",
     .lo = 1,
     .hi = 1 << 20,
     .off = offsetof(bench_opts, cfg.long_prompt),
     .def_text = "0: off",
     .help = "after the iterative profile: min(concurrency, max-batch - 1) requests of the prompt "
             "decode; once each has 8 tokens an N-token prompt joins them (max_tokens 1). From "
             "the batcher's step records it prints the slowest step that carried a chunk of it, "
             "the median decode-only step of the same requests, and their ratio (the static "
             "policy never admits into a running batch, so it is not measured)"},
    CLI_OPT_PREFIX_CACHE(bench_opts, cfg.no_prefix_cache, CLI_INDEX, "on|off"),
};
#undef ROW

/* -1: go on; else the exit status (help: 0, a usage error: 2). */
static int parse_opts(int argc, char **argv, bench_opts *o)
{
    static const cli_spec spec = CLI_SPEC("bench", USAGE, OPTS, NULL, NULL);
    int st = cli_parse(&spec, argc, argv, 1, o, sizeof *o);
    bench_cfg *cfg = &o->cfg;
    cfg->step_tokens = ifl_batcher_step_budget(cfg->max_batch, cfg->step_tokens);
    cfg->temperature = (float)o->temperature;
    return st;
}

/* One policy's profile (and --long-prompt) on backend be; prints its report into res. */
static int bench_policy(const ifl_runtime *rt, ifl_backend *be, ifl_policy pol, bench_state *bs,
                        const bench_cfg *cfg, bench_result *res)
{
    ifl_err err;
    int32_t max_queue = cfg->rate > 0 ? cfg->n_open : cfg->concurrency + 1;
    if (cfg->long_prompt && max_queue < cfg->concurrency + 1)
        max_queue = cfg->concurrency + 1;
    ifl_batcher_params p = {.policy = pol,
                            .max_batch = cfg->max_batch,
                            .max_queue = max_queue,
                            .step_tokens = cfg->step_tokens,
                            .eos_token = rt->model.cfg.eos_token_id,
                            .tok = rt->tok,
                            .no_prefix_cache = cfg->no_prefix_cache,
                            .on_event = on_event,
                            .on_step = cfg->long_prompt ? on_step : NULL,
                            .ud = bs};
    ifl_batcher *b = ifl_batcher_start(be, &p, &err);
    if (!b) {
        fprintf(stderr, "inflight bench: %s\n", err.msg);
        return -1;
    }
    int rc = run_profile(b, bs, cfg, res);
    if (rc)
        fprintf(stderr, "inflight bench: out of memory\n");
    else
        bench_result_print(ifl_policy_name(pol), res);
    long_result lr;
    if (rc == 0 && cfg->long_prompt && pol == IFL_POLICY_ITERATIVE) {
        rc = run_long_prompt(b, bs, cfg, rt->model.cfg.n_ctx, &lr);
        if (rc == 0)
            long_result_print(cfg, &lr);
    } else if (rc == 0 && cfg->long_prompt) {
        printf("  long prompt           : not measured (the static policy admits only into an "
               "empty batch)\n");
    }
    ifl_batcher_stop(b);
    return rc;
}

/* The --long-prompt limits that need the model and the batch. */
static int check_long_prompt(const bench_cfg *cfg, const ifl_model *m)
{
    if (!cfg->long_prompt)
        return 0;
    if (cfg->long_prompt >= m->cfg.n_ctx || cfg->prompt->n + 1 >= (size_t)m->cfg.n_ctx) {
        fprintf(stderr,
                "inflight bench: --long-prompt %d: it and the prompt must fit the model's "
                "context of %d tokens\n",
                cfg->long_prompt, m->cfg.n_ctx);
        return -1;
    }
    if (cfg->max_batch < 2) {
        fprintf(stderr, "inflight bench: --long-prompt needs --max-batch of at least 2 (it joins "
                        "running requests)\n");
        return -1;
    }
    return 0;
}

int cmd_bench_scheduler(int argc, char **argv)
{
    for (int i = 1; i < argc; i++)
        if (!strcmp(argv[i], "--turns") || !strncmp(argv[i], "--turns=", 8))
            return cmd_bench_turns(argc, argv);
        else if (!strcmp(argv[i], "--choices") || !strncmp(argv[i], "--choices=", 10))
            return cmd_bench_choices(argc, argv);
    bench_opts o = {.cfg = {.max_tokens = 32,
                            .seed = 1,
                            .max_batch = IFL_DEFAULT_MAX_BATCH,
                            .step_tokens = IFL_DEFAULT_STEP_TOKENS},
                    .want = IFL_DEVICE_AUTO,
                    .isa = IFL_ISA_AUTO};
    int st = parse_opts(argc, argv, &o);
    if (st >= 0)
        return st;
    ifl_policy pols[2] = {IFL_POLICY_ITERATIVE, IFL_POLICY_STATIC};
    int n_pols = strcmp(o.policy, "both") ? 1 : 2;
    if (n_pols == 1) /* a word of --policy: a policy's name */
        (void)ifl_policy_parse(o.policy, &pols[0]);
    int rc = 1;
    ifl_err err;
    ifl_runtime rt = {0};
    ifl_tokens ids = {0};
    bench_state bs = {.lock = PTHREAD_MUTEX_INITIALIZER, .cond = PTHREAD_COND_INITIALIZER};
    if (cli_bench_model(&o.dir))
        return 1;
    /* one backend per policy, over one set of weights and one CPU thread pool (as the server) */
    ifl_runtime_opts ro = {.model_dir = o.dir,
                           .model_opts = o.mo,
                           .threads = o.threads,
                           .n_backends = n_pols,
                           .max_seqs = o.cfg.max_batch,
                           .max_tokens = o.cfg.step_tokens};
    if (cli_runtime_open("bench", o.want, o.isa, &ro, &rt))
        goto out;
    if (ifl_tokenizer_encode(rt.tok, o.prompt, strlen(o.prompt), 0, &ids, &err) || ids.n == 0) {
        fprintf(stderr, "inflight bench: the prompt is empty\n");
        goto out;
    }
    o.cfg.prompt = &ids;
    if (check_long_prompt(&o.cfg, &rt.model))
        goto out;
    printf("inflight bench: %s (%d layers, %d wide, weights %s); prompt \"%s\" (%zu tokens), "
           "max_tokens %d%s\n",
           o.dir, rt.model.cfg.n_layer, rt.model.cfg.n_embd, ifl_model_dtype_name(&rt.model),
           o.prompt, ids.n, o.cfg.max_tokens, o.cfg.ignore_eos ? " (ignore_eos)" : "");
    if (o.cfg.rate > 0)
        printf("  open loop: %d requests, Poisson arrivals at %.2f/s\n", o.cfg.n_open, o.cfg.rate);
    else
        printf("  closed loop: %d round(s) of %d requests submitted %.0f ms apart\n", o.cfg.rounds,
               o.cfg.concurrency, o.cfg.interval_ms);
    bench_result res[2];
    for (int k = 0; k < n_pols; k++)
        if (bench_policy(&rt, rt.be[k], pols[k], &bs, &o.cfg, &res[k]))
            goto out;
    if (n_pols == 2)
        bench_compare_print(&res[0], &res[1]);
    rc = 0;
out:
    free(bs.itl);
    free(bs.steps);
    ifl_tokens_free(&ids);
    ifl_runtime_close(&rt);
    return rc;
}
