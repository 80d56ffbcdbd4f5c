/* bench_turns_common.c: what `inflight bench --turns` and `--turns --long` share: options, the
 * engine's start-up, a run's state and callbacks, submission and the driving loop
 * (bench_turns_common.h). */
#include "bench_turns_common.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "defaults.h"
#include "rng.h"
#include "util.h"

bt_opts bt_preset(int32_t users, int32_t turns, int32_t opening, int32_t added, int32_t reply)
{
    return (bt_opts){.runs = "both",
                     .cfg = {.users = users,
                             .turns = turns,
                             .opening = opening,
                             .added = added,
                             .reply = reply,
                             .max_batch = IFL_DEFAULT_MAX_BATCH,
                             .step_tokens = IFL_DEFAULT_STEP_TOKENS,
                             .seed = 1},
                     .want = IFL_DEVICE_AUTO,
                     .isa = IFL_ISA_AUTO};
}

int bt_modes(const bt_opts *o, int modes[2])
{
    int n = 0;
    if (strcmp(o->runs, "off"))
        modes[n++] = 1;
    if (strcmp(o->runs, "on"))
        modes[n++] = 0;
    return n;
}

/* The engine (bt_main). 0, or -1 after saying why (rt closed). */
static int bt_open(bt_opts *o, int (*check)(const bt_cfg *c), ifl_runtime *rt)
{
    if (cli_bench_model(&o->dir))
        return -1;
    bt_cfg *c = &o->cfg;
    ifl_runtime_opts ro = {.model_dir = o->dir,
                           .model_opts = o->mo,
                           .threads = o->threads,
                           .n_backends = 1,
                           .max_seqs = c->max_batch,
                           .max_tokens = c->step_tokens,
                           .prefault = 1}; /* the runs, one after the other, on one warm pool */
    if (cli_runtime_open_model("bench", o->want, o->isa, &ro, rt))
        return -1;
    int32_t nv = ifl_tokenizer_n_vocab(rt->tok);
    c->n_vocab = nv < rt->model.cfg.n_vocab ? nv : rt->model.cfg.n_vocab;
    c->eos = rt->model.cfg.eos_token_id;
    c->n_ctx = rt->model.cfg.n_ctx;
    if (check(c)) {
        ifl_runtime_close(rt);
        return -1;
    }
    if (cli_runtime_start_backends("bench", &ro, rt))
        return -1;
    c->block_size = rt->be[0]->params.kv_block_size;
    return 0;
}

int bt_main(const cli_spec *spec, int argc, char **argv, bt_opts *o, int (*check)(const bt_cfg *c),
            int (*profile)(const ifl_runtime *rt, const bt_opts *o))
{
    int st = cli_parse(spec, argc, argv, 1, o, sizeof *o);
    if (st >= 0)
        return st;
    o->cfg.step_tokens = ifl_batcher_step_budget(o->cfg.max_batch, o->cfg.step_tokens);
    ifl_runtime rt = {0};
    if (bt_open(o, check, &rt))
        return 1;
    int rc = profile(&rt, o);
    ifl_runtime_close(&rt);
    return rc;
}

/* n seeded ids in the model's vocabulary, never the end-of-text token. */
static void fill_ids(const bt_cfg *c, uint64_t seed, int32_t *out, int32_t n)
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

int bt_run_init(bt_run *run, const bt_cfg *c, size_t ext_size)
{
    memset(run, 0, sizeof *run);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC); /* the clock of ifl_now_us */
    pthread_mutex_init(&run->lock, NULL);
    pthread_cond_init(&run->cond, &ca);
    pthread_condattr_destroy(&ca);
    run->cfg = c;
    size_t U = (size_t)c->users, n = U * (size_t)c->turns;
    run->out = calloc(n, sizeof *run->out);
    run->ext = calloc(n, ext_size);
    run->gen = calloc(n * (size_t)c->reply, sizeof *run->gen);
    run->cap = c->opening + c->turns * (c->added + c->reply);
    run->ids = malloc(U * (size_t)run->cap * sizeof *run->ids);
    run->n_ids = calloc(U, sizeof *run->n_ids);
    run->next = calloc(U, sizeof *run->next);
    run->todo = calloc(U, sizeof *run->todo);
    if (!run->out || !run->ext || !run->gen || !run->ids || !run->n_ids || !run->next || !run->todo)
        return -1;
    for (size_t i = 0; i < n; i++)
        run->out[i].finish = -1;
    for (int32_t u = 0; u < c->users; u++) {
        fill_ids(c, c->seed, bt_ids(run, u), c->opening);
        run->n_ids[u] = c->opening;
    }
    return 0;
}

void bt_run_free(bt_run *run)
{
    free(run->out);
    free(run->ext);
    free(run->gen);
    free(run->ids);
    free(run->n_ids);
    free(run->next);
    free(run->todo);
    pthread_mutex_destroy(&run->lock);
    pthread_cond_destroy(&run->cond);
}

void bt_append_reply(bt_run *run, int32_t u, int32_t k)
{
    int32_t R = run->cfg->reply;
    memcpy(bt_ids(run, u) + run->n_ids[u], bt_gen(run, u, k), (size_t)R * sizeof *run->ids);
    run->n_ids[u] += R;
}

void bt_append_added(bt_run *run, int32_t u, int32_t k)
{
    const bt_cfg *c = run->cfg;
    uint64_t mix = c->seed ^ ((uint64_t)(u + 1) << 32) ^ (uint64_t)(k + 1);
    fill_ids(c, ifl_splitmix64(&mix), bt_ids(run, u) + run->n_ids[u], c->added);
    run->n_ids[u] += c->added;
}

/* Batcher thread (queued: the submitting thread); ud: the run (its bt_run first). */
static void on_event(void *ud, const ifl_event *ev)
{
    bt_run *run = ud;
    bt_outcome *o = ev->user;
    int32_t R = run->cfg->reply;
    pthread_mutex_lock(&run->lock);
    if (ev->type == IFL_EV_TOKEN && ev->index >= 0 && ev->index < R) {
        run->gen[(size_t)(o - run->out) * (size_t)R + (size_t)ev->index] = ev->token;
    } else if (ev->type == IFL_EV_DONE) {
        o->cached = ev->cached_tokens;
        o->completion = ev->completion_tokens;
        o->finish = (int)ev->finish;
        o->t_queued = ev->t_queued;
        o->t_first = ev->t_first_token;
        o->t_done = ev->t_finished;
        o->done = 1;
        pthread_cond_broadcast(&run->cond);
    }
    pthread_mutex_unlock(&run->lock);
}

ifl_submit_status bt_submit(ifl_batcher *b, bt_run *run, int32_t u, int32_t k,
                            const int32_t *prompt, int32_t n, ifl_err *err)
{
    const bt_cfg *c = run->cfg;
    bt_outcome *o = bt_out(run, u, k);
    ifl_request_params rp = {.session = (uint64_t)u + 1,
                             .prompt = prompt,
                             .n_prompt = n,
                             .max_tokens = c->reply,
                             .sampling = {.temperature = 0, .top_k = 0, .top_p = 1},
                             .seed = c->seed + (uint64_t)u,
                             .ignore_eos = 1,
                             .user = o};
    uint64_t id;
    *err = (ifl_err){0};
    ifl_submit_status st = ifl_batcher_submit(b, &rp, &id, NULL, err);
    if (st == IFL_SUBMIT_OK)
        return st;
    pthread_mutex_lock(&run->lock);
    o->finish = -2;
    o->status = (int)st;
    o->done = 1;
    pthread_mutex_unlock(&run->lock);
    return st;
}

static void wait_until(bt_run *run, uint64_t wake)
{
    if (!wake) {
        pthread_cond_wait(&run->cond, &run->lock);
        return;
    }
    struct timespec ts = {.tv_sec = (time_t)(wake / 1000000u),
                          .tv_nsec = (long)(wake % 1000000u) * 1000};
    pthread_cond_timedwait(&run->cond, &run->lock, &ts);
}

/* {lock} The users whose next turn is due at now into run->todo (their turns prepared,
 * run->next advanced); *wake: when the earliest user not yet due will be (0: none, wait for a
 * turn done). Returns how many, or -1 when every user is done. */
static int32_t due_users(bt_run *run, const bt_driver *d, uint64_t now, uint64_t *wake)
{
    const bt_cfg *c = run->cfg;
    int32_t n = 0, busy = 0;
    *wake = 0;
    for (int32_t u = 0; u < c->users; u++) {
        int32_t k = run->next[u];
        if (k > 0 && !bt_out(run, u, k - 1)->done) {
            busy++;
            continue;
        }
        if (k == c->turns)
            continue;
        uint64_t at = d->start ? d->start(d->ctx, u, k) : 0;
        if (at == BT_NEVER)
            continue;
        if (now < at) {
            *wake = !*wake || at < *wake ? at : *wake;
            busy++;
            continue;
        }
        d->prepare(d->ctx, u, k);
        run->next[u] = k + 1;
        run->todo[n++] = u;
    }
    return n || busy ? n : -1;
}

/* Runs every user's conversation to its end on batcher b. */
static void drive(ifl_batcher *b, bt_run *run, const bt_driver *d)
{
    run->t0 = ifl_now_us();
    pthread_mutex_lock(&run->lock);
    for (;;) {
        uint64_t wake;
        int32_t n = due_users(run, d, ifl_now_us(), &wake);
        if (n < 0)
            break;
        if (n == 0) {
            wait_until(run, wake);
            continue;
        }
        pthread_mutex_unlock(&run->lock);
        for (int32_t i = 0; i < n; i++)
            d->submit(d->ctx, b, run->todo[i], run->next[run->todo[i]] - 1);
        pthread_mutex_lock(&run->lock);
    }
    pthread_mutex_unlock(&run->lock);
}

int bt_run_batcher(const ifl_runtime *rt, ifl_backend *be, bt_run *run, int no_prefix_cache,
                   const bt_driver *d)
{
    const bt_cfg *c = run->cfg;
    ifl_err err;
    ifl_batcher_params p = {.policy = IFL_POLICY_ITERATIVE,
                            .max_batch = c->max_batch,
                            .max_queue = c->users + 1,
                            .step_tokens = c->step_tokens,
                            .eos_token = rt->model.cfg.eos_token_id,
                            .tok = rt->tok,
                            .no_prefix_cache = no_prefix_cache,
                            .on_event = on_event,
                            .on_step = d->on_step,
                            .ud = run};
    ifl_batcher *b = ifl_batcher_start(be, &p, &err);
    if (!b) {
        fprintf(stderr, "inflight bench: %s\n", err.msg);
        return -1;
    }
    drive(b, run, d);
    ifl_batcher_wait_idle(b);
    ifl_batcher_get_stats(b, &run->st);
    ifl_batcher_stop(b);
    run->t1 = run->t0;
    for (size_t i = 0; i < (size_t)c->users * (size_t)c->turns; i++)
        run->t1 = run->out[i].t_done > run->t1 ? run->out[i].t_done : run->t1;
    return 0;
}
