/* test_batcher_choices.c: scoring and several choices through the batcher (batcher.h,
 * batcher_choices.c) on a tiny random model: choice i of a request of n draws exactly what a
 * request of one choice seeded ifl_choice_seed(seed, i) draws (the fork and its copy on write
 * change nothing), for a prompt ending inside a block and one ending on a block boundary; the
 * prompt's KV is held once (the step record's kv_used); prompt events score every prompt position
 * after the first, in order, equal to scoring a whole-prompt step's rows directly, also when the
 * prompt is prefilled in chunks; token events carry their token's raw logprob (a logit_bias does
 * not change it); cancelling a request of n choices, waiting or running, ends every choice once;
 * submit refuses bad values naming the field; nothing is left in the pool.
 * IFL_TEST_QUICK=1: a smaller model, the same cases.
 * usage: test_batcher_choices VOCAB_DIR */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "batcher.h"
#include "batcher_fixture.h"
#include "batcher_log.h"
#include "logprobs.h"
#include "testutil.h"

#define MAX_TOK 12

static int32_t prompt40[40];

static ifl_request_params params(const int32_t *prompt, int32_t n, int32_t max_tokens, uint64_t seed)
{
    return (ifl_request_params){.session = 1,
                                .prompt = prompt,
                                .n_prompt = n,
                                .max_tokens = max_tokens,
                                .sampling = {.temperature = 1.0f, .top_k = 0, .top_p = 1},
                                .seed = seed,
                                .ignore_eos = 1};
}

static uint64_t submit_p(ifl_batcher *b, const ifl_request_params *rp)
{
    uint64_t id = 0;
    ifl_err err;
    ifl_submit_status st = ifl_batcher_submit(b, rp, &id, NULL, &err);
    CHECKF(st == IFL_SUBMIT_OK, "submit refused: %s", err.msg);
    return id;
}

/* The tokens of choice `choice` of request id, in order; returns how many. */
static int choice_tokens(uint64_t id, int32_t choice, int32_t *out, int cap)
{
    int n = 0;
    pthread_mutex_lock(&log_lock);
    for (size_t i = 0; i < n_log; i++) {
        const ifl_event *e = &evlog[i].ev;
        if (e->request_id == id && e->type == IFL_EV_TOKEN && e->choice == choice && n < cap) {
            CHECKF(e->index == n, "choice %d: token %d came as index %d", choice, n, e->index);
            out[n++] = e->token;
        }
    }
    pthread_mutex_unlock(&log_lock);
    return n;
}

/* Choice i of n equals the solo request seeded ifl_choice_seed(seed, i). */
static void test_choices_match_solo(ifl_batcher *b, const int32_t *prompt, int32_t n_prompt)
{
    const int n = 4;
    uint64_t seed = 77;
    ifl_request_params rp = params(prompt, n_prompt, MAX_TOK, seed);
    rp.n_choices = n;
    uint64_t id = submit_p(b, &rp);
    wait_events(id, IFL_EV_DONE, n);
    int32_t got[4][MAX_TOK];
    int distinct = 0;
    for (int c = 0; c < n; c++) {
        CHECKF(choice_tokens(id, c, got[c], MAX_TOK) == MAX_TOK, "choice %d: %d tokens", c,
               choice_tokens(id, c, got[c], MAX_TOK));
        ifl_request_params solo = params(prompt, n_prompt, MAX_TOK, ifl_choice_seed(seed, c));
        uint64_t sid = submit_p(b, &solo);
        wait_events(sid, IFL_EV_DONE, 1);
        int32_t want[MAX_TOK];
        CHECK(choice_tokens(sid, 0, want, MAX_TOK) == MAX_TOK);
        CHECKF(!memcmp(got[c], want, sizeof want),
               "prompt of %d: choice %d of %d differs from its solo request", n_prompt, c, n);
        distinct += c > 0 && memcmp(got[c], got[0], sizeof want) != 0;
    }
    CHECKF(distinct > 0, "prompt of %d: all %d choices drew the same tokens", n_prompt, n);
    check_no_leak(b, "choices");
    log_clear();
}

/* n = 8 on a 40-token prompt (blocks of 16): the prompt's 3 blocks once, one own block (the copy
 * of the partly filled third) and a spare for every choice but the first, and the first's spare:
 * 3 + 7 + 1 = 11 blocks, where 8 requests would hold 24. */
static void test_kv_once(ifl_batcher *b)
{
    ifl_request_params rp = params(prompt40, 40, 8, 5);
    rp.n_choices = 8;
    uint64_t id = submit_p(b, &rp);
    wait_events(id, IFL_EV_DONE, 8);
    pthread_mutex_lock(&log_lock);
    /* this request's first step (a step record may come after the done event of its request:
     * one of an earlier test's would come first; seen under ASan on a loaded machine) */
    size_t f = n_steps;
    for (size_t s = 0; s < n_steps && f == n_steps; s++)
        for (int32_t q = 0; q < steps[s].n_seqs; q++)
            if (step_ids[s][q] == id)
                f = s;
    CHECKF(f < n_steps && steps[f].prefill_tokens == 40, "first step prefilled %d tokens",
           f < n_steps ? steps[f].prefill_tokens : -1);
    CHECKF(f < n_steps && steps[f].kv_used == 11,
           "after the prefill of n = 8: %d KV blocks held, want 11",
           f < n_steps ? steps[f].kv_used : -1);
    CHECKF(f + 1 < n_steps && steps[f + 1].n_seqs == 8, "second step ran %d sequences, want 8",
           f + 1 < n_steps ? steps[f + 1].n_seqs : -1);
    pthread_mutex_unlock(&log_lock);
    check_no_leak(b, "kv once");
    log_clear();
}

/* Prompt events against ifl_logprob_score of a whole-prompt step's rows on a fresh backend. */
static void test_prompt_logprobs(ifl_batcher *b, const char *what)
{
    const int32_t n = 40, top = 5;
    int32_t V = model.cfg.n_vocab;
    ifl_backend *ref = make_backend(1, 64);
    int32_t table[4] = {0, 1, 2, 3}, nb = 4, rs[2] = {0, n}, pos0 = 0, rows = n;
    const int32_t *tables[1] = {table};
    ifl_batch batch = {.n_seqs = 1, .n_tokens = n, .tokens = prompt40, .run_start = rs,
                       .pos0 = &pos0, .block_tables = tables, .n_blocks = &nb, .n_rows = &rows};
    float *logits = malloc((size_t)n * V * sizeof *logits);
    ifl_err err;
    CHECKF(ifl_backend_step(ref, &batch, logits, &err) == 0, "reference step: %s", err.msg);

    ifl_request_params rp = params(prompt40, n, 0, 1);
    rp.prompt_logprobs = 1;
    rp.top_logprobs = top;
    uint64_t id = submit_p(b, &rp);
    wait_events(id, IFL_EV_DONE, 1);
    CHECKF(count_events(id, IFL_EV_TOKEN) == 0, "%s: max_tokens 0 drew %d tokens", what,
           count_events(id, IFL_EV_TOKEN));
    int32_t next = 1;
    pthread_mutex_lock(&log_lock);
    for (size_t i = 0; i < n_log; i++) {
        const ifl_event *e = &evlog[i].ev;
        if (e->request_id != id)
            continue;
        if (e->type == IFL_EV_DONE)
            CHECKF(e->finish == IFL_FINISH_LENGTH && e->completion_tokens == 0,
                   "%s: done %s with %d tokens", what, ifl_finish_name(e->finish),
                   e->completion_tokens);
        if (e->type != IFL_EV_PROMPT)
            continue;
        CHECKF(e->index == next, "%s: prompt event starts at %d, want %d", what, e->index, next);
        for (int32_t k = 0; k < e->n_lp; k++) {
            int32_t pos = e->index + k;
            ifl_logprob want;
            ifl_logprob_score(logits + (size_t)(pos - 1) * V, V, prompt40[pos], top, &want);
            const ifl_logprob *got = &e->lp[k];
            CHECKF(got->token == prompt40[pos] && got->n_top == top,
                   "%s: position %d scored token %d with %d best", what, pos, got->token,
                   got->n_top);
            CHECKF(got->logprob == want.logprob, "%s: position %d logprob %.9g, direct %.9g", what,
                   pos, got->logprob, want.logprob);
            for (int32_t t = 0; t < top; t++)
                CHECKF(got->top[t].token == want.top[t].token &&
                           got->top[t].logprob == want.top[t].logprob,
                       "%s: position %d best %d differs", what, pos, t);
        }
        next += e->n_lp;
    }
    pthread_mutex_unlock(&log_lock);
    CHECKF(next == n, "%s: prompt events covered positions 1..%d, want 1..%d", what, next - 1,
           n - 1);
    free(logits);
    ifl_backend_free(ref);
    check_no_leak(b, what);
    log_clear();
}

/* Token events carry the drawn token's raw entry: greedy takes the best; a +100 bias forces a
 * token whose raw logprob stays that of a random model's guess (far below 0). */
static void test_token_logprobs(ifl_batcher *b)
{
    ifl_request_params rp = params(hello.ids, (int32_t)hello.n, 6, 3);
    rp.sampling.temperature = 0;
    rp.logprobs = 1;
    rp.top_logprobs = 3;
    uint64_t g = submit_p(b, &rp);
    static const ifl_logit_bias force[] = {{11, 100}};
    rp.n_logit_bias = 1;
    rp.logit_bias = force;
    rp.top_logprobs = 0;
    uint64_t f = submit_p(b, &rp);
    wait_events(g, IFL_EV_DONE, 1);
    wait_events(f, IFL_EV_DONE, 1);
    pthread_mutex_lock(&log_lock);
    for (size_t i = 0; i < n_log; i++) {
        const ifl_event *e = &evlog[i].ev;
        if (e->type != IFL_EV_TOKEN)
            continue;
        CHECKF(e->lp && e->lp->token == e->token, "token %d without its entry", e->index);
        if (e->request_id == g) {
            CHECKF(e->lp->n_top == 3 && e->lp->top[0].token == e->token &&
                       e->lp->top[0].logprob == e->lp->logprob &&
                       e->lp->top[0].logprob >= e->lp->top[1].logprob &&
                       e->lp->top[1].logprob >= e->lp->top[2].logprob,
                   "greedy token %d: entry not the row's best", e->index);
        } else {
            CHECKF(e->token == 11 && e->lp->n_top == 0 && e->lp->logprob < -1.0f,
                   "forced token %d is %d with raw logprob %g", e->index, e->token,
                   e->lp->logprob);
        }
    }
    pthread_mutex_unlock(&log_lock);
    check_no_leak(b, "token logprobs");
    log_clear();
}

/* Every choice of a cancelled request ends once, cancelled. */
static void check_cancelled_choices(uint64_t id, int n, const char *what)
{
    wait_events(id, IFL_EV_DONE, n);
    int seen[IFL_MAX_CHOICES] = {0};
    pthread_mutex_lock(&log_lock);
    for (size_t i = 0; i < n_log; i++) {
        const ifl_event *e = &evlog[i].ev;
        if (e->request_id == id && e->type == IFL_EV_DONE) {
            CHECKF(e->choice >= 0 && e->choice < n, "%s: done of choice %d", what, e->choice);
            seen[e->choice]++;
        }
    }
    pthread_mutex_unlock(&log_lock);
    for (int c = 0; c < n; c++)
        CHECKF(seen[c] == 1, "%s: choice %d ended %d times", what, c, seen[c]);
}

static void test_cancel(ifl_backend *be)
{
    ifl_batcher *b = start(be, IFL_POLICY_ITERATIVE, 2, 8, 64);
    /* one slot busy: a request of 2 choices waits */
    ifl_request_params lr = params(hello.ids, (int32_t)hello.n, 200, 9);
    uint64_t busy = submit_p(b, &lr);
    wait_events(busy, IFL_EV_TOKEN, 1);
    ifl_request_params rp = params(prompt40, 40, 8, 4);
    rp.n_choices = 2;
    uint64_t w = submit_p(b, &rp);
    CHECK(ifl_batcher_cancel(b, w) >= 1);
    check_cancelled_choices(w, 2, "waiting");
    CHECK(ifl_batcher_cancel(b, busy) == 1);
    wait_events(busy, IFL_EV_DONE, 1);
    /* running (in its prompt, or its choices already started): each ends once */
    for (int t = 0; t < 3; t++) {
        uint64_t r = submit_p(b, &rp);
        if (t)
            wait_events(r, t == 1 ? IFL_EV_STARTED : IFL_EV_TOKEN, 1);
        ifl_batcher_cancel(b, r);
        check_cancelled_choices(r, 2, "running");
    }
    check_no_leak(b, "cancel");
    log_clear();
    ifl_batcher_stop(b);
}

static void expect_refused(ifl_batcher *b, ifl_request_params rp, const char *field)
{
    uint64_t id;
    ifl_err err;
    ifl_submit_status st = ifl_batcher_submit(b, &rp, &id, NULL, &err);
    CHECKF(st == IFL_SUBMIT_INVALID && strstr(err.msg, field), "%s: status %d, message '%s'",
           field, st, st == IFL_SUBMIT_OK ? "" : err.msg);
}

static void test_refusals(ifl_batcher *b)
{
    ifl_request_params rp = params(hello.ids, (int32_t)hello.n, 4, 1);
    rp.n_choices = IFL_MAX_CHOICES + 1;
    expect_refused(b, rp, "n_choices");
    rp.n_choices = 9; /* over this batcher's max_batch of 8 */
    expect_refused(b, rp, "n_choices");
    rp.n_choices = 1;
    rp.top_logprobs = IFL_MAX_TOP_LOGPROBS + 1;
    expect_refused(b, rp, "top_logprobs");
    rp.top_logprobs = 0;
    rp.max_tokens = 0;
    expect_refused(b, rp, "max_tokens");
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: test_batcher_choices VOCAB_DIR\n");
        return 2;
    }
    char dir[256];
    if (fixture_setup(argv[1], "choices", dir, sizeof dir))
        return 1;
    for (int i = 0; i < 40; i++)
        prompt40[i] = (int32_t)((i * 7919 + 13) % 50000);
    ifl_backend *be = make_backend(8, 64);
    ifl_batcher *b = start(be, IFL_POLICY_ITERATIVE, 8, 16, 64);
    test_choices_match_solo(b, prompt40, 40); /* ends inside a block: copy on write */
    test_choices_match_solo(b, prompt40, 32); /* ends on a boundary: nothing to copy */
    test_token_logprobs(b);
    test_refusals(b);
    test_prompt_logprobs(b, "whole prompt");
    ifl_batcher_stop(b);
    log_clear(); /* its last step's record may come after that test's done event */
    /* a fresh batcher: its first step is the prefill of n = 8 */
    b = start(be, IFL_POLICY_ITERATIVE, 8, 16, 64);
    test_kv_once(b);
    ifl_batcher_stop(b);
    /* 8-token steps: the prompt is scored chunk by chunk */
    b = start(be, IFL_POLICY_ITERATIVE, 8, 16, 8);
    test_prompt_logprobs(b, "chunked prompt");
    ifl_batcher_stop(b);
    test_cancel(be);
    ifl_backend_free(be);
    log_clear();
    free(evlog);
    free(steps);
    free(step_ids);
    free(step_pre);
    fixture_teardown(dir);
    return test_finish("test_batcher_choices");
}
