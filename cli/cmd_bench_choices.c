/* cmd_bench_choices.c: `inflight bench --choices[=N]`: what n choices of one prompt cost against
 * one, in-process against the batcher. Rounds alternate a request of one choice and one of N
 * (default 8), each on a fresh random prompt of --prompt-tokens (default 512) so the prefix cache
 * finds nothing, with the batch otherwise empty. Prints per mode the median time to first token
 * (queued to the first token event), the prompt tokens prefilled and the KV blocks held after the
 * step that ended the prompt (from the step records), and their ratios: the prompt is computed
 * once and its blocks held once however many choices draw from it (batcher_choices.c). */
#include <pthread.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "batcher.h"
#include "bench_report.h"
#include "cli.h"
#include "defaults.h"
#include "options.h"
#include "rng.h"
#include "runtime.h"
#include "util.h"

static const char *const USAGE =
    "usage: inflight bench --choices[=N] [options]\n"
    "\n"
    "Alternates requests of one choice and of N choices (OpenAI's n; default 8) of a fresh random\n"
    "prompt, at temperature 1 with seeds, the batch otherwise empty, and prints the median time to\n"
    "first token, the prompt tokens computed and the KV blocks held after the prompt.\n"
    "\n";

typedef struct {
    const char *dir;
    int32_t choices, prompt_tokens, max_tokens, rounds, threads;
    ifl_model_opts mo;
    ifl_device want;
    ifl_isa isa;
} choices_opts;

#define ROW(NAME, TYPE, ARG, LO, HI, F, HELP)                                                      \
    CLI_ROW(NAME, 0, TYPE, ARG, LO, HI, choices_opts, F, HELP)
static const cli_opt OPTS[] = {
    {.name = "choices",
     .type = CLI_I32,
     .arg = "N",
     .lo = 2,
     .hi = IFL_MAX_CHOICES,
     .off = offsetof(choices_opts, choices),
     .flags = CLI_OPTIONAL_ARG,
     .help = "choices of the prompt (the value needs the '=')"},
    ROW("prompt-tokens", CLI_I32, "P", 1, 1 << 20, prompt_tokens, "tokens of each prompt"),
    ROW("max-tokens", CLI_I32, "M", 1, 1 << 20, max_tokens, "tokens each choice generates"),
    ROW("rounds", CLI_I32, "R", 1, 1000, rounds, "rounds (one request of each kind a round)"),
    CLI_OPT_BENCH_MODEL(choices_opts, dir),
    CLI_OPT_WEIGHTS(choices_opts, mo),
    CLI_OPT_THREADS(choices_opts, threads),
    CLI_OPT_DEVICE(choices_opts, want, CLI_INDEX),
    CLI_OPT_ISA(choices_opts, isa),
};
#undef ROW

/* What one request showed: filled by the callbacks (batcher thread), read after it is idle. */
typedef struct {
    pthread_mutex_t lock;
    uint64_t t_first; /* first token event, monotonic us */
    uint64_t t_queued;
    int32_t prompt_blocks; /* kv_used after the step that ended the prompt */
    int32_t prefilled;     /* prompt tokens computed */
    int32_t dones;
} probe;

static void on_event(void *ud, const ifl_event *ev)
{
    probe *p = ud;
    pthread_mutex_lock(&p->lock);
    if (ev->type == IFL_EV_TOKEN && !p->t_first)
        p->t_first = ifl_now_us();
    if (ev->type == IFL_EV_DONE) {
        p->t_queued = ev->t_queued;
        p->dones++;
    }
    pthread_mutex_unlock(&p->lock);
}

static void on_step(void *ud, const ifl_step_record *rec)
{
    probe *p = ud;
    pthread_mutex_lock(&p->lock);
    p->prefilled += rec->prefill_tokens;
    if (rec->prefill_tokens && !p->prompt_blocks && rec->decode_tokens == 0 && p->t_first)
        p->prompt_blocks = rec->kv_used;
    pthread_mutex_unlock(&p->lock);
}

/* One request of n choices on a fresh prompt: its time to first token (ms), the prompt tokens
 * computed and the blocks held once the prompt ended. */
static int one_request(ifl_batcher *b, probe *p, const choices_opts *o, int32_t n, ifl_rng *rng,
                       int32_t n_vocab, double *ttft_ms, int32_t *blocks, int32_t *prefilled)
{
    int32_t *prompt = malloc((size_t)o->prompt_tokens * sizeof *prompt);
    if (!prompt)
        return -1;
    for (int32_t i = 0; i < o->prompt_tokens; i++)
        prompt[i] = (int32_t)(ifl_rng_next(rng) % (uint64_t)n_vocab);
    pthread_mutex_lock(&p->lock);
    p->t_first = p->t_queued = 0;
    p->prompt_blocks = p->prefilled = p->dones = 0;
    pthread_mutex_unlock(&p->lock);
    ifl_request_params rp = {.session = 1,
                             .prompt = prompt,
                             .n_prompt = o->prompt_tokens,
                             .max_tokens = o->max_tokens,
                             .sampling = {.temperature = 1, .top_p = 1},
                             .seed = ifl_rng_next(rng) >> 11,
                             .ignore_eos = 1,
                             .n_choices = n};
    uint64_t id;
    ifl_err err;
    ifl_submit_status st = ifl_batcher_submit(b, &rp, &id, NULL, &err);
    free(prompt);
    if (st != IFL_SUBMIT_OK) {
        fprintf(stderr, "inflight bench: --choices: %s\n", err.msg);
        return -1;
    }
    ifl_batcher_wait_idle(b);
    pthread_mutex_lock(&p->lock);
    *ttft_ms = (double)(p->t_first - p->t_queued) / 1e3;
    *blocks = p->prompt_blocks;
    *prefilled = p->prefilled;
    int ok = p->dones == n;
    pthread_mutex_unlock(&p->lock);
    if (!ok)
        fprintf(stderr, "inflight bench: --choices: %d done events for %d choices\n", p->dones, n);
    return ok ? 0 : -1;
}

static int run(const ifl_runtime *rt, const choices_opts *o)
{
    probe p = {0};
    pthread_mutex_init(&p.lock, NULL);
    ifl_batcher_params bp = {.policy = IFL_POLICY_ITERATIVE,
                             .max_batch = rt->be[0]->params.max_seqs,
                             .step_tokens = rt->be[0]->params.max_tokens,
                             .eos_token = rt->model.cfg.eos_token_id,
                             .tok = rt->tok,
                             .on_event = on_event,
                             .on_step = on_step,
                             .ud = &p};
    ifl_err err;
    ifl_batcher *b = ifl_batcher_start(rt->be[0], &bp, &err);
    if (!b) {
        fprintf(stderr, "inflight bench: %s\n", err.msg);
        pthread_mutex_destroy(&p.lock);
        return 1;
    }
    double *t = calloc(2 * (size_t)o->rounds, sizeof *t);
    int32_t blocks[2] = {0}, pre[2] = {0}, n_of[2] = {1, o->choices};
    ifl_rng rng;
    ifl_rng_seed(&rng, 5);
    int rc = t ? 0 : -1;
    /* one warm-up request of each kind, then the rounds, alternated */
    for (int32_t r = -1; r < o->rounds && !rc; r++)
        for (int k = 0; k < 2 && !rc; k++) {
            double ms = 0;
            rc = one_request(b, &p, o, n_of[k], &rng, rt->model.cfg.n_vocab, &ms, &blocks[k],
                             &pre[k]);
            if (r >= 0)
                t[k * o->rounds + r] = ms;
        }
    if (!rc) {
        bench_sort(t, (size_t)o->rounds);
        bench_sort(t + o->rounds, (size_t)o->rounds);
        double m1 = t[o->rounds / 2], mn = t[o->rounds + o->rounds / 2];
        printf("  n = 1: time to first token %8.1f ms; prompt tokens computed %d; KV blocks held "
               "after the prompt %d\n",
               m1, pre[0], blocks[0]);
        printf("  n = %d: time to first token %8.1f ms (%.2fx); prompt tokens computed %d; KV "
               "blocks held after the prompt %d (%d separate requests: %d)\n",
               o->choices, mn, mn / m1, pre[1], blocks[1], o->choices, o->choices * blocks[0]);
        printf("  (medians of %d rounds, alternated, after one warm-up of each)\n", o->rounds);
    }
    free(t);
    ifl_batcher_stop(b);
    pthread_mutex_destroy(&p.lock);
    return rc ? 1 : 0;
}

int cmd_bench_choices(int argc, char **argv)
{
    choices_opts o = {.choices = 8,
                      .prompt_tokens = 512,
                      .max_tokens = 16,
                      .rounds = 5,
                      .want = IFL_DEVICE_AUTO,
                      .isa = IFL_ISA_AUTO};
    static const cli_spec spec =
        CLI_SPEC("bench", USAGE, OPTS, "bench --choices has its own", "N is --choices=N");
    int st = cli_parse(&spec, argc, argv, 1, &o, sizeof o);
    if (st >= 0)
        return st;
    if (cli_bench_model(&o.dir))
        return 1;
    ifl_runtime rt = {0};
    ifl_runtime_opts ro = {.model_dir = o.dir,
                           .model_opts = o.mo,
                           .threads = o.threads,
                           .n_backends = 1,
                           .max_seqs = IFL_DEFAULT_MAX_BATCH,
                           .max_tokens = IFL_DEFAULT_BACKEND_MAX_TOKENS,
                           .prefault = 1};
    if (cli_runtime_open_model("bench", o.want, o.isa, &ro, &rt))
        return 1;
    if (o.prompt_tokens + o.max_tokens > rt.model.cfg.n_ctx) {
        fprintf(stderr, "inflight bench: --choices: %d + %d tokens exceed the context of %d\n",
                o.prompt_tokens, o.max_tokens, rt.model.cfg.n_ctx);
        ifl_runtime_close(&rt);
        return 2;
    }
    if (cli_runtime_start_backends("bench", &ro, &rt))
        return 1;
    printf("inflight bench --choices=%d: %s (%d layers, %d wide, weights %s); a %d-token prompt, "
           "%d tokens a choice\n  %s\n",
           o.choices, o.dir, rt.model.cfg.n_layer, rt.model.cfg.n_embd,
           ifl_model_dtype_name(&rt.model), o.prompt_tokens, o.max_tokens, rt.desc);
    int rc = run(&rt, &o);
    ifl_runtime_close(&rt);
    return rc;
}
