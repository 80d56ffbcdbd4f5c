/* test_request.c: the request layer (server/request.c) between a front end and the batchers,
 * without sockets: a small random GPT-2 behind real batchers, a sink that records what the front
 * end is told, and the bridge drained by hand as the service thread drains it. Checked: the
 * refusals request.c decides (shutting down, duplicate id, requests in flight per owner, token ids
 * out of the vocabulary, prompt + max_tokens over the context, the batcher's queue full) with their
 * codes and messages naming the value; the seed (given, or drawn below 2^53); the events routed
 * back in order with the finished request's result and metrics; cancel (known and unknown ids),
 * cancel-all and an owner that went away (only its own requests: another owner's in the same
 * session runs on); and a lost token event ending its request with out_of_memory. Usage: test_request <vocab-dir>. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backend.h"
#include "batcher.h"
#include "bridge.h"
#include "make_model.h"
#include "metrics.h"
#include "model.h"
#include "reqlog.h"
#include "request.h"
#include "runtime.h"
#include "testutil.h"
#include "threadpool.h"
#include "util.h"

#define N_CTX 1024 /* the model's context */
#define MAX_CALLS 4096

/* ---- the recording sink ---------------------------------------------------------------------- */

typedef struct {
    char kind; /* 'q'ueued, 's'tarted, 't'oken, 'd'one, 'e'rror */
    char id[REQ_MAX_ID + 1];
    int32_t n; /* queued: position; token: index */
    ifl_code code;
    char message[256];
    int32_t retry_after_ms;
    req_result res; /* done (res.message points into `message`) */
} call;

typedef struct {
    call calls[MAX_CALLS];
    int n;
    uint64_t dones;
} recorder;

static recorder rec;

static call *record(char kind, const char *id)
{
    if (rec.n == MAX_CALLS) {
        fprintf(stderr, "test_request: more than %d sink calls\n", MAX_CALLS);
        exit(1);
    }
    call *c = &rec.calls[rec.n++];
    memset(c, 0, sizeof *c);
    c->kind = kind;
    snprintf(c->id, sizeof c->id, "%s", id ? id : "(null)");
    return c;
}

static void on_queued(void *fe, const srv_req *r, int32_t position)
{
    (void)fe;
    record('q', r->id)->n = position;
}

static void on_started(void *fe, const srv_req *r)
{
    (void)fe;
    record('s', r->id);
}

static void on_token(void *fe, const srv_req *r, const req_token *t)
{
    (void)fe;
    record('t', r->id)->n = t->index;
}

static void on_done(void *fe, const srv_req *r, const req_result *res)
{
    (void)fe;
    call *c = record('d', r->id);
    c->res = *res;
    if (res->message)
        snprintf(c->message, sizeof c->message, "%s", res->message);
    c->res.message = res->message ? c->message : NULL;
    rec.dones++;
}

static void on_error(void *fe, const char *id, ifl_code code, const char *message,
                     int32_t retry_after_ms)
{
    (void)fe;
    call *c = record('e', id);
    c->code = code;
    snprintf(c->message, sizeof c->message, "%s", message);
    c->retry_after_ms = retry_after_ms;
}

static const req_sink sink = {.queued = on_queued,
                              .started = on_started,
                              .token = on_token,
                              .done = on_done,
                              .error = on_error};

/* The n-th call (0, 1, ...) of `kind` for `id` since call `from`; NULL when there is none. */
static const call *find_call(int from, char kind, const char *id, int nth)
{
    for (int i = from; i < rec.n; i++)
        if (rec.calls[i].kind == kind && !strcmp(rec.calls[i].id, id) && nth-- == 0)
            return &rec.calls[i];
    return NULL;
}

static int count_calls(int from, char kind, const char *id)
{
    int n = 0;
    while (find_call(from, kind, id, n))
        n++;
    return n;
}

/* ---- the fixture: a model, batchers, the layer ----------------------------------------------- */

static ifl_runtime rt; /* only what the layer reads of it: the model and the tokenizer */
static ifl_threadpool *pool;
static ifl_backend *backends[IFL_N_POLICIES];
static metrics m;
static reqlog lg;
static bridge br;
static req_layer L;

static ifl_batcher *start_batcher(int slot, ifl_policy pol, int32_t max_batch, int32_t max_queue)
{
    ifl_err err;
    ifl_backend_params bp = {
        .max_seqs = max_batch, .max_tokens = 64, .pool = pool, .kv_block_size = 16};
    backends[slot] = ifl_cpu_backend_new(&rt.model, &bp, &err);
    ifl_batcher_params p = {.policy = pol,
                            .max_batch = max_batch,
                            .max_queue = max_queue,
                            .step_tokens = 64,
                            .eos_token = 50256,
                            .tok = rt.tok,
                            .on_event = req_batcher_event,
                            .on_step = req_batcher_step,
                            .ud = &L};
    ifl_batcher *b = backends[slot] ? ifl_batcher_start(backends[slot], &p, &err) : NULL;
    if (!b) {
        fprintf(stderr, "test_request: batcher: %s\n", err.msg);
        exit(1);
    }
    return b;
}

static int setup(const char *vocab_dir, char *dir, size_t dir_cap)
{
    test_tmpdir(dir, dir_cap, "request");
    ifl_make_model_opts o;
    ifl_make_model_defaults(&o);
    o.cfg.n_layer = 2;
    o.cfg.n_head = 4;
    o.cfg.n_embd = 64;
    o.cfg.n_ctx = N_CTX;
    o.seed = 47;
    o.scale = 0.05;
    o.vocab_dir = vocab_dir;
    ifl_err err;
    ifl_model_opts mo = {.cpu_layout = 1};
    if (ifl_make_model(dir, &o, &err) || ifl_model_load(&rt.model, dir, &mo, &err) ||
        ifl_tokenizer_load(&rt.tok, dir, &err)) {
        fprintf(stderr, "test_request: setup: %s\n", err.msg);
        return 1;
    }
    pool = ifl_threadpool_new(ifl_n_cores());
    bridge_init(&br);
    metrics_init(&m);
    lg = (reqlog){.t0_us = ifl_now_us()}; /* no database, no stderr lines */
    L = (req_layer){.rt = &rt, .m = &m, .log = &lg, .bridge = &br, .rng_state = 1};
    /* the static batcher stays NULL until the queue check: a policy without one is refused */
    L.b[IFL_POLICY_ITERATIVE] = start_batcher(0, IFL_POLICY_ITERATIVE, 4, 64);
    return 0;
}

/* Hands the bridge's items to the layer as the service thread does. drop_user/drop_index: the
 * token event of that request and index is dropped, as when its item could not be allocated. */
static void drain_once(const void *drop_user, int32_t drop_index)
{
    bridge_item *it = bridge_take_all(&br);
    while (it) {
        bridge_item *next = bridge_next(it); /* handling may free an embedded item */
        int embedded = it->embedded;
        if (it->kind == BRIDGE_STEP) {
            req_handle_step(&L, &it->step);
        } else if (it->kind == BRIDGE_EVENT) {
            int drop = drop_user && it->ev.user == drop_user && it->ev.type == IFL_EV_TOKEN &&
                       it->ev.index == drop_index;
            if (!drop)
                req_handle_event(&L, it);
        }
        if (!embedded)
            free(it);
        it = next;
    }
}

/* Drains until *counter (done calls, a metric) reaches target, 120 s at most. */
static void drain_until(const uint64_t *counter, uint64_t target, const void *drop_user,
                        int32_t drop_index)
{
    uint64_t end = ifl_now_us() + 120000000ull;
    while (*counter < target && ifl_now_us() < end) {
        drain_once(drop_user, drop_index);
        if (*counter < target)
            usleep(1000);
    }
    CHECKF(*counter >= target, "after 120 s the count is %llu, expected %llu",
           (unsigned long long)*counter, (unsigned long long)target);
}

static void teardown(const char *dir)
{
    for (int p = 0; p < IFL_N_POLICIES; p++)
        if (L.b[p]) {
            ifl_batcher_stop(L.b[p]);
            ifl_backend_free(backends[p]);
        }
    drain_once(NULL, 0);
    bridge_destroy(&br);
    ifl_threadpool_free(pool);
    ifl_tokenizer_free(rt.tok);
    ifl_model_free(&rt.model);
    test_rmdir(dir);
}

/* ---- helpers of the checks ------------------------------------------------------------------- */

/* Parameters of a request for "Hello, how are you?" (6 tokens), greedy, max_tokens n. */
static req_params params(const char *id, int32_t n)
{
    req_params p;
    memset(&p, 0, sizeof p);
    snprintf(p.id, sizeof p.id, "%s", id);
    p.prompt = strdup("Hello, how are you?");
    p.prompt_len = strlen(p.prompt);
    p.policy = IFL_POLICY_ITERATIVE;
    p.max_tokens = n;
    p.temperature = 0;
    p.top_p = 1;
    p.ignore_eos = 1;
    p.has_seed = 1;
    p.seed = 7;
    return p;
}

/* Submits p; the prompt stays the caller's unless the layer took it (it does with a database). */
static srv_req *submit(req_owner *o, req_params *p)
{
    srv_req *r = req_submit(&L, o, p, ifl_now_us());
    free(p->prompt);
    p->prompt = NULL;
    return r;
}

/* Submits a request the layer must refuse; checks the one error call: its id, code and message. */
static void check_refused(req_owner *o, req_params *p, ifl_code code, const char *message)
{
    int from = rec.n;
    uint64_t errors = m.errors[code];
    int32_t in_flight = o->n_reqs;
    char id[REQ_MAX_ID + 1];
    snprintf(id, sizeof id, "%s", p->id);
    srv_req *r = submit(o, p);
    CHECKF(r == NULL, "%s: accepted, expected refused with %s", id, ifl_code_name(code));
    CHECKF(rec.n == from + 1, "%s: %d sink calls, expected the one error", id, rec.n - from);
    const call *e = find_call(from, 'e', id, 0);
    CHECKF(e != NULL, "%s: no error call", id);
    if (e) {
        CHECKF(e->code == code, "%s: code %s, expected %s", id, ifl_code_name(e->code),
               ifl_code_name(code));
        CHECKF(!strcmp(e->message, message), "%s: message \"%s\", expected \"%s\"", id, e->message,
               message);
    }
    CHECKF(m.errors[code] == errors + 1, "%s: errors{%s} went from %llu to %llu", id,
           ifl_code_name(code), (unsigned long long)errors, (unsigned long long)m.errors[code]);
    CHECKF(o->n_reqs == in_flight, "%s: %d in flight after a refusal, expected %d", id, o->n_reqs,
           in_flight);
}

/* The calls of one request that ran to its done: queued (>= 1), started, token 0..n-1, done (n < 0:
 * any number of tokens). Returns its done call. */
static const call *check_ran(int from, const char *id, int32_t n, ifl_finish finish)
{
    int i = from, tokens = 0;
    while (i < rec.n && strcmp(rec.calls[i].id, id))
        i++;
    CHECKF(i < rec.n && rec.calls[i].kind == 'q' && rec.calls[i].n >= 1,
           "%s: the first call is not queued with a position", id);
    while (i < rec.n && (strcmp(rec.calls[i].id, id) || rec.calls[i].kind == 'q'))
        i++;
    /* a request cancelled while it waited ends without having started */
    int started = i < rec.n && rec.calls[i].kind == 's';
    CHECKF(started || finish == IFL_FINISH_CANCELLED, "%s: no started after queued", id);
    for (i += started; i < rec.n && (strcmp(rec.calls[i].id, id) || rec.calls[i].kind == 't'); i++)
        if (!strcmp(rec.calls[i].id, id)) {
            CHECKF(rec.calls[i].n == tokens, "%s: token index %d, expected %d", id, rec.calls[i].n,
                   tokens);
            tokens++;
        }
    const call *d = i < rec.n ? &rec.calls[i] : NULL;
    CHECKF(d && d->kind == 'd', "%s: no done after %d tokens", id, tokens);
    CHECKF(count_calls(i + 1, 'd', id) + count_calls(i + 1, 't', id) == 0,
           "%s: calls after its done", id);
    if (n >= 0)
        CHECKF(tokens == n, "%s: %d tokens, expected %d", id, tokens, n);
    if (!d || d->kind != 'd')
        return NULL;
    CHECKF(d->res.finish == finish, "%s: finish %s, expected %s", id,
           ifl_finish_name(d->res.finish), ifl_finish_name(finish));
    return d;
}

/* Tokens of params()' prompt, counted with the model's tokenizer. */
static int32_t prompt_tokens(void)
{
    ifl_tokens t = {0};
    ifl_err err;
    const char *text = "Hello, how are you?";
    if (ifl_tokenizer_encode(rt.tok, text, strlen(text), 0, &t, &err)) {
        fprintf(stderr, "test_request: encode: %s\n", err.msg);
        exit(1);
    }
    int32_t n = (int32_t)t.n;
    ifl_tokens_free(&t);
    return n;
}

/* ---- the checks ------------------------------------------------------------------------------ */

static void check_names_and_owner(void)
{
    CHECK(!strcmp(req_api_name(REQ_API_WS), "ws"));
    CHECK(!strcmp(req_api_name(REQ_API_OPENAI), "openai"));
    CHECK(!strcmp(req_api_name(REQ_API_TRITON), "triton"));
    CHECK(!strcmp(req_api_name((req_api)9), "ws")); /* out of range: the default front end */
    req_owner o;
    int fe;
    req_owner_init(&o, &sink, &fe, 0xabcull, 3);
    CHECK(o.sink == &sink && o.fe == &fe && o.session == 0xabc && o.max_inflight == 3);
    CHECKF(!strcmp(o.session_hex, "0000000000000abc"), "session_hex \"%s\"", o.session_hex);
    CHECK(o.reqs == NULL && o.n_reqs == 0 && req_find(&o, "x") == NULL);
}

/* A stopping server, and a policy whose batcher is not up, refuse with shutting_down. */
static void check_shutting_down(void)
{
    req_owner o;
    req_owner_init(&o, &sink, NULL, 1, 4);
    req_params p = params("stop-1", 4);
    L.stopping = 1;
    check_refused(&o, &p, IFL_CODE_SHUTTING_DOWN, "the server is shutting down");
    L.stopping = 0;
    p = params("stop-2", 4);
    p.policy = IFL_POLICY_STATIC; /* no static batcher yet */
    check_refused(&o, &p, IFL_CODE_SHUTTING_DOWN, "the server is shutting down");
}

/* One request through: its seed and API as given, its events in order, its result and metrics. */
static void check_one_request(void)
{
    req_owner o;
    req_owner_init(&o, &sink, NULL, 2, 4);
    const int pol = IFL_POLICY_ITERATIVE, api = REQ_API_OPENAI;
    uint64_t tokens = m.tokens[pol], done = m.requests[pol][IFL_FINISH_LENGTH];
    uint64_t api_tokens = m.api_tokens[api], api_done = m.api_requests[api][IFL_FINISH_LENGTH];
    uint64_t prompt = m.prompt_tokens[pol];
    int from = rec.n;
    req_params p = params("one", 5);
    p.api = REQ_API_OPENAI;
    p.seed = 12345;
    srv_req *r = submit(&o, &p);
    CHECK(r != NULL);
    if (!r)
        return;
    CHECK(r->seed == 12345 && r->api == REQ_API_OPENAI && r->policy == IFL_POLICY_ITERATIVE);
    CHECKF(r->prompt_tokens == prompt_tokens(), "prompt_tokens %d", r->prompt_tokens);
    CHECK(req_find(&o, "one") == r && o.n_reqs == 1);
    drain_until(&rec.dones, rec.dones + 1, NULL, 0);
    const call *d = check_ran(from, "one", 5, IFL_FINISH_LENGTH);
    if (d) {
        CHECK(d->res.completion_tokens == 5 && d->res.prompt_tokens == prompt_tokens());
        CHECKF(d->res.ttft_ms >= 0 && d->res.ttft_ms <= d->res.total_ms &&
                   d->res.queue_ms <= d->res.ttft_ms,
               "queue %.3f ttft %.3f total %.3f ms", d->res.queue_ms, d->res.ttft_ms,
               d->res.total_ms);
        CHECK(d->res.message == NULL && d->res.tokens_per_s >= 0);
    }
    CHECK(o.n_reqs == 0 && req_find(&o, "one") == NULL);
    CHECK(m.tokens[pol] == tokens + 5 && m.requests[pol][IFL_FINISH_LENGTH] == done + 1);
    CHECK(m.api_tokens[api] == api_tokens + 5 &&
          m.api_requests[api][IFL_FINISH_LENGTH] == api_done + 1);
    CHECK(m.prompt_tokens[pol] == prompt + (uint64_t)prompt_tokens());
    CHECKF(m.steps[pol] >= 1 && m.batch[pol].total == m.steps[pol],
           "%llu steps, %llu batch observations", (unsigned long long)m.steps[pol],
           (unsigned long long)m.batch[pol].total);
}

/* No seed: one is drawn below 2^53, a new one per request. An API out of range counts as ws. */
static void check_drawn_seed(void)
{
    req_owner o;
    req_owner_init(&o, &sink, NULL, 3, 4);
    req_params p1 = params("seed-1", 1), p2 = params("seed-2", 1);
    p1.has_seed = p2.has_seed = 0;
    p1.api = (req_api)7;
    uint64_t dones = rec.dones;
    srv_req *r1 = submit(&o, &p1), *r2 = submit(&o, &p2);
    CHECK(r1 && r2);
    if (r1 && r2) {
        CHECKF(r1->seed < (1ull << 53) && r2->seed < (1ull << 53), "seeds %llu %llu",
               (unsigned long long)r1->seed, (unsigned long long)r2->seed);
        CHECK(r1->seed != r2->seed);
        CHECK(r1->api == REQ_API_WS);
    }
    drain_until(&rec.dones, dones + (r1 != NULL) + (r2 != NULL), NULL, 0);
}

/* Per owner: an id may be in flight once, and max_inflight requests at most; both free up at
 * done. */
static void check_owner_limits(void)
{
    req_owner o;
    req_owner_init(&o, &sink, NULL, 4, 2);
    uint64_t dones = rec.dones;
    req_params p = params("a", 8);
    CHECK(submit(&o, &p) != NULL);
    p = params("a", 8);
    check_refused(&o, &p, IFL_CODE_DUPLICATE_ID,
                  "a request with id \"a\" is already in flight on this connection");
    p = params("b", 8);
    CHECK(submit(&o, &p) != NULL);
    p = params("c", 8);
    check_refused(&o, &p, IFL_CODE_TOO_MANY_REQUESTS,
                  "this connection already has 2 requests in flight (limit 2)");
    drain_until(&rec.dones, dones + 2, NULL, 0);
    CHECK(o.n_reqs == 0);
    int from = rec.n;
    p = params("a", 2); /* its id is free again */
    CHECK(submit(&o, &p) != NULL);
    drain_until(&rec.dones, dones + 3, NULL, 0);
    check_ran(from, "a", 2, IFL_FINISH_LENGTH);
}

/* Token ids must be in the vocabulary; prompt + max_tokens must fit the context (the limit itself
 * is accepted). The messages name the value. */
static void check_prompt_limits(void)
{
    req_owner o;
    req_owner_init(&o, &sink, NULL, 5, 4);
    int32_t nv = ifl_tokenizer_n_vocab(rt.tok), n = prompt_tokens();
    char msg[256];
    int32_t bad[2][2] = {{15496, nv}, {-1, 11}};
    for (int i = 0; i < 2; i++) {
        req_params p = params("ids", 4);
        free(p.prompt);
        p.prompt = NULL;
        p.prompt_ids = bad[i];
        p.n_prompt_ids = 2;
        snprintf(msg, sizeof msg, "prompt[%d] is %d: a token id must be from 0 to %d", i ? 0 : 1,
                 i ? -1 : nv, nv - 1);
        check_refused(&o, &p, IFL_CODE_OUT_OF_RANGE, msg);
    }
    req_params p = params("long", N_CTX - n + 1);
    snprintf(msg, sizeof msg,
             "the prompt is %d tokens; with max_tokens %d that is %d, over the model's context "
             "of %d (truncate_prompt_tokens %d keeps the last tokens that fit)",
             n, N_CTX - n + 1, N_CTX + 1, N_CTX, n - 1);
    check_refused(&o, &p, IFL_CODE_PROMPT_TOO_LONG, msg);
    /* token ids in range, and a request exactly at the context: accepted (then cancelled) */
    uint64_t dones = rec.dones;
    int from = rec.n;
    int32_t good[2] = {15496, nv - 1};
    p = params("ids-ok", 2);
    free(p.prompt);
    p.prompt = NULL;
    p.prompt_ids = good;
    p.n_prompt_ids = 2;
    srv_req *r = submit(&o, &p);
    CHECK(r != NULL && r->prompt_tokens == 2);
    p = params("at-limit", N_CTX - n);
    r = submit(&o, &p);
    CHECK(r != NULL && r->prompt_tokens == n && r->max_tokens == N_CTX - n);
    req_cancel(&L, &o, "at-limit");
    drain_until(&rec.dones, dones + 2, NULL, 0);
    check_ran(from, "ids-ok", 2, IFL_FINISH_LENGTH);
    check_ran(from, "at-limit", -1, IFL_FINISH_CANCELLED);
}

/* An unknown id is answered with unknown_id naming it. */
static void check_cancel_unknown(void)
{
    req_owner o;
    req_owner_init(&o, &sink, NULL, 6, 4);
    int from = rec.n;
    uint64_t errors = m.errors[IFL_CODE_UNKNOWN_ID];
    req_cancel(&L, &o, "zz");
    const call *e = find_call(from, 'e', "zz", 0);
    CHECK(rec.n == from + 1 && e != NULL);
    if (e) {
        CHECK(e->code == IFL_CODE_UNKNOWN_ID);
        CHECKF(!strcmp(e->message, "no request with id \"zz\" is in flight on this connection"),
               "message \"%s\"", e->message);
    }
    CHECK(m.errors[IFL_CODE_UNKNOWN_ID] == errors + 1);
}

/* An owner that goes away: its request is cancelled, none of its events reach the sink, and it is
 * freed (valgrind) when its done arrives, counted as cancelled. Another owner in the same session
 * (OpenAI's "user" shares one between connections) keeps its request: it runs to its length. */
static void check_owner_gone(void)
{
    req_owner o, other;
    req_owner_init(&o, &sink, NULL, 7, 4);
    req_owner_init(&other, &sink, NULL, 7, 4);
    const int pol = IFL_POLICY_ITERATIVE;
    uint64_t cancelled = m.requests[pol][IFL_FINISH_CANCELLED], dones = rec.dones;
    int from = rec.n;
    const int stays = test_quick() ? 24 : 200; /* (valgrind: a token is ~0.3 s) */
    req_params q = params("stays", stays);
    CHECK(submit(&other, &q) != NULL);
    req_params p = params("gone", N_CTX - prompt_tokens());
    CHECK(submit(&o, &p) != NULL);
    req_owner_gone(&L, &o);
    CHECK(o.reqs == NULL && o.n_reqs == 0);
    CHECK(other.n_reqs == 1);
    drain_until(&m.requests[pol][IFL_FINISH_CANCELLED], cancelled + 1, NULL, 0);
    drain_until(&rec.dones, dones + 1, NULL, 0);
    int gone_calls = count_calls(from, 'q', "gone") + count_calls(from, 's', "gone") +
                     count_calls(from, 't', "gone") + count_calls(from, 'd', "gone");
    CHECKF(gone_calls == 0, "%d sink calls for an owner that went away", gone_calls);
    check_ran(from, "stays", stays, IFL_FINISH_LENGTH);
    CHECK(other.n_reqs == 0);
    CHECK(m.requests[pol][IFL_FINISH_CANCELLED] == cancelled + 1);
}

/* A token event lost on the way (its item could not be allocated): no token after the gap is
 * passed on, the request is stopped and its done says out_of_memory. */
static void check_lost_token(void)
{
    req_owner o;
    req_owner_init(&o, &sink, NULL, 8, 4);
    const int pol = IFL_POLICY_ITERATIVE;
    uint64_t errors = m.errors[IFL_CODE_OUT_OF_MEMORY], failed = m.requests[pol][IFL_FINISH_ERROR];
    int from = rec.n;
    req_params p = params("lossy", 30);
    srv_req *r = submit(&o, &p);
    CHECK(r != NULL);
    drain_until(&rec.dones, rec.dones + 1, r, 2);
    const call *d = check_ran(from, "lossy", 2, IFL_FINISH_ERROR);
    if (d) {
        CHECK(d->res.code == IFL_CODE_OUT_OF_MEMORY);
        CHECKF(d->res.message && !strcmp(d->res.message, "out of memory: a token could not be "
                                                         "passed on, so the request was stopped"),
               "message \"%s\"", d->res.message ? d->res.message : "(null)");
    }
    CHECK(m.errors[IFL_CODE_OUT_OF_MEMORY] == errors + 1);
    CHECK(m.requests[pol][IFL_FINISH_ERROR] == failed + 1);
}

/* The static batcher with room for one waiting request: a refusal of the batcher reaches the
 * sink as queue_full with a suggested wait; cancel-all then ends every accepted one. */
static void check_queue_full_and_cancel_all(void)
{
    L.b[IFL_POLICY_STATIC] = start_batcher(1, IFL_POLICY_STATIC, 1, 1);
    req_owner o;
    req_owner_init(&o, &sink, NULL, 9, 8);
    uint64_t dones = rec.dones, full = m.errors[IFL_CODE_QUEUE_FULL];
    int from = rec.n, accepted = 0;
    char id[16];
    for (int i = 0; i < 4; i++) {
        snprintf(id, sizeof id, "full-%d", i);
        req_params p = params(id, 400);
        p.policy = IFL_POLICY_STATIC;
        accepted += submit(&o, &p) != NULL;
    }
    CHECKF(accepted >= 1 && accepted <= 3 && o.n_reqs == accepted, "%d accepted, %d in flight",
           accepted, o.n_reqs);
    int refused = 0;
    for (int i = 0; i < 4; i++) {
        snprintf(id, sizeof id, "full-%d", i);
        const call *e = find_call(from, 'e', id, 0);
        if (!e)
            continue;
        refused++;
        CHECKF(e->code == IFL_CODE_QUEUE_FULL && e->retry_after_ms > 0 && e->message[0],
               "%s: %s (retry after %d ms): %s", id, ifl_code_name(e->code), e->retry_after_ms,
               e->message);
    }
    CHECK(refused == 4 - accepted && m.errors[IFL_CODE_QUEUE_FULL] == full + (uint64_t)refused);
    req_owner_cancel_all(&L, &o);
    drain_until(&rec.dones, dones + (uint64_t)accepted, NULL, 0);
    CHECK(o.n_reqs == 0);
    for (int i = 0; i < 4; i++) {
        snprintf(id, sizeof id, "full-%d", i);
        if (!find_call(from, 'e', id, 0))
            check_ran(from, id, -1, IFL_FINISH_CANCELLED);
    }
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: test_request <vocab-dir>\n");
        return 2;
    }
    char dir[4096];
    if (setup(argv[1], dir, sizeof dir))
        return 1;
    check_names_and_owner();
    check_shutting_down();
    check_one_request();
    check_drawn_seed();
    check_owner_limits();
    check_prompt_limits();
    check_cancel_unknown();
    check_owner_gone();
    check_lost_token();
    check_queue_full_and_cancel_all();
    teardown(dir);
    if (test_failures) {
        fprintf(stderr, "test_request: %d checks failed\n", test_failures);
        return 1;
    }
    printf("test_request: all checks passed\n");
    return 0;
}
