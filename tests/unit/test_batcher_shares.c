/* test_batcher_shares.c: the batcher's refusals and its shares (batcher.h, "Shares"): a session
 * with requests waiting is refused the places kept for newcomers, a newcomer takes one, the whole
 * queue full refuses everyone, each with a suggested wait; with several sessions waiting none
 * holds more than its share of the queue; a batch slot goes to a session below its share of the
 * batch before one at it (plain round-robin would give it to the latter); queue positions as
 * others are admitted; too long and invalid requests; stopping with requests queued. Verdicts are
 * the batcher's decisions (statuses, event order), never times.
 * usage: test_batcher_shares VOCAB_DIR */
#include <stdio.h>
#include <string.h>

#include "batcher.h"
#include "batcher_fixture.h"
#include "batcher_log.h"
#include "testutil.h"
#include "util.h"

/* A request of session s for max_tokens tokens of "hello": its status, id, wait and message. */
static ifl_submit_status try_submit(ifl_batcher *b, uint64_t s, int32_t max_tokens, uint64_t *id,
                                    int32_t *retry_ms, ifl_err *err)
{
    ifl_request_params rp = {.session = s,
                             .prompt = hello.ids,
                             .n_prompt = (int32_t)hello.n,
                             .max_tokens = max_tokens,
                             .sampling = {0, 0, 1},
                             .ignore_eos = 1};
    return ifl_batcher_submit(b, &rp, id, retry_ms, err);
}

/* A queue_full refusal whose message has `why` and whose wait is in [50 ms, 30 s]. */
static void expect_full(ifl_batcher *b, uint64_t s, const char *why, const char *what)
{
    uint64_t id = 0;
    int32_t retry = -1;
    ifl_err err;
    ifl_submit_status st = try_submit(b, s, 5, &id, &retry, &err);
    CHECKF(st == IFL_SUBMIT_QUEUE_FULL && strstr(err.msg, why) && retry >= 50 && retry <= 30000,
           "%s: status %d, retry_after %d ms, \"%s\" (wanted queue_full naming \"%s\")", what,
           (int)st, retry, st ? err.msg : "", why);
    printf("%s: queue_full, retry after %d ms: %s\n", what, retry, err.msg);
}

/* max_batch 1, max_queue 4 (one place kept): the kept place, the full queue, the positions. */
static void test_refusals(ifl_backend *be)
{
    log_clear();
    ifl_batcher *b = start(be, IFL_POLICY_ITERATIVE, 1, 4, 64);
    ifl_err err;
    uint64_t id, first = submit(b, 1, hello.ids, (int32_t)hello.n, 500, 0, 0, 0, NULL);
    wait_events(first, IFL_EV_TOKEN, 1); /* running: the batch of 1 is full */
    uint64_t waiting[3];
    for (int i = 0; i < 3; i++)
        waiting[i] = submit(b, 1, hello.ids, (int32_t)hello.n, 5, 0, 0, 0, NULL);
    expect_full(b, 1, "keeps its last 1 places", "session 1's 4th waiting request");
    int32_t retry = -1;
    CHECKF(try_submit(b, 2, 5, &id, &retry, &err) == IFL_SUBMIT_OK && retry == 0,
           "a newcomer into the kept place: %s", err.msg);
    printf("a newcomer (session 2) queued in the kept place behind session 1's 3\n");
    expect_full(b, 3, "queue is full (4 waiting)", "session 3 with the queue full");
    ifl_request_params rp = {.session = 3,
                             .prompt = hello.ids,
                             .n_prompt = (int32_t)hello.n,
                             .max_tokens = model.cfg.n_ctx,
                             .sampling = {0, 0, 1}};
    ifl_submit_status st = ifl_batcher_submit(b, &rp, &id, NULL, &err);
    CHECK(st == IFL_SUBMIT_TOO_LONG && strstr(err.msg, "context"));
    printf("prompt_too_long: %s\n", err.msg);
    rp.max_tokens = 5;
    rp.n_prompt = 0;
    st = ifl_batcher_submit(b, &rp, &id, NULL, &err);
    CHECK(st == IFL_SUBMIT_INVALID);
    printf("invalid: %s\n", err.msg);
    int32_t bad_tok = 999999;
    rp.prompt = &bad_tok;
    rp.n_prompt = 1;
    CHECK(ifl_batcher_submit(b, &rp, &id, NULL, &err) == IFL_SUBMIT_INVALID &&
          strstr(err.msg, "999999"));
    rp.prompt = hello.ids;
    rp.n_prompt = (int32_t)hello.n;
    rp.sampling.top_p = 0;
    CHECK(ifl_batcher_submit(b, &rp, &id, NULL, &err) == IFL_SUBMIT_INVALID &&
          strstr(err.msg, "top_p"));
    rp.sampling.top_p = 1;
    rp.n_stop = 1;
    rp.stop[0] = "\xff\xfe";
    CHECK(ifl_batcher_submit(b, &rp, &id, NULL, &err) == IFL_SUBMIT_INVALID &&
          strstr(err.msg, "stop"));
    ifl_batcher_cancel(b, first);
    ifl_batcher_wait_idle(b);
    /* Session 1's last request was 3rd; session 2 joined the cycle ahead of it (4th), then the
     * others were admitted in turn: 1, 2, 1, 1. */
    int32_t seen[8] = {0}, n_seen = 0;
    pthread_mutex_lock(&log_lock);
    for (size_t i = 0; i < n_log && n_seen < 8; i++)
        if (evlog[i].ev.request_id == waiting[2] && evlog[i].ev.type == IFL_EV_QUEUED)
            seen[n_seen++] = evlog[i].ev.position;
    pthread_mutex_unlock(&log_lock);
    CHECKF(n_seen == 5 && seen[0] == 3 && seen[1] == 4 && seen[2] == 3 && seen[3] == 2 &&
               seen[4] == 1,
           "queue positions of session 1's third waiting request: %d events (%d %d %d %d %d)",
           n_seen, seen[0], n_seen > 1 ? seen[1] : -1, n_seen > 2 ? seen[2] : -1,
           n_seen > 3 ? seen[3] : -1, n_seen > 4 ? seen[4] : -1);
    printf("queue positions published: 3, 4 (a newcomer ahead), 3, 2, 1\n");
    check_no_leak(b, "refusals");
    /* stopping the batcher with requests queued: they all end cancelled */
    log_clear();
    uint64_t a = submit(b, 1, hello.ids, (int32_t)hello.n, 500, 0, 0, 0, NULL);
    uint64_t c = submit(b, 1, hello.ids, (int32_t)hello.n, 500, 0, 0, 0, NULL);
    wait_events(a, IFL_EV_TOKEN, 1);
    ifl_batcher_stop(b);
    ifl_event da, dc;
    collect(a, NULL, 0, NULL, 0, &da);
    collect(c, NULL, 0, NULL, 0, &dc);
    CHECK(da.finish == IFL_FINISH_CANCELLED && dc.finish == IFL_FINISH_CANCELLED);
}

/* max_queue 16 (4 kept, 12 open) behind a full batch: with two sessions waiting each may hold 6;
 * the open places taken, newcomers fill the kept ones; then the queue is full for everyone. */
static void test_queue_share(ifl_backend *be)
{
    log_clear();
    ifl_batcher *b = start(be, IFL_POLICY_ITERATIVE, 1, 16, 64);
    uint64_t first = submit(b, 1, hello.ids, (int32_t)hello.n, 500, 0, 0, 0, NULL);
    wait_events(first, IFL_EV_TOKEN, 1);
    for (int i = 0; i < 5; i++)
        submit(b, 1, hello.ids, (int32_t)hello.n, 5, 0, 0, 0, NULL);
    int n2 = 0;
    uint64_t id;
    int32_t retry;
    ifl_err err;
    while (n2 < 16 && try_submit(b, 2, 5, &id, &retry, &err) == IFL_SUBMIT_OK)
        n2++;
    CHECKF(n2 == 6, "session 2 queued %d requests beside session 1's 5 (its share is 12 / 2 = 6)",
           n2);
    printf("session 2 queued %d beside session 1's 5 (share of 12 open places / 2 sessions)\n", n2);
    expect_full(b, 2, "its share while 2 sessions wait", "session 2's 7th");
    CHECK(try_submit(b, 1, 5, &id, &retry, &err) == IFL_SUBMIT_OK); /* session 1's 6th: 12 */
    expect_full(b, 1, "keeps its last 4 places", "session 1's 7th with the open places taken");
    for (uint64_t s = 3; s <= 6; s++)
        CHECKF(try_submit(b, s, 5, &id, &retry, &err) == IFL_SUBMIT_OK,
               "newcomer session %llu refused: %s", (unsigned long long)s, err.msg);
    printf("newcomers 3-6 queued in the 4 kept places\n");
    expect_full(b, 7, "queue is full (16 waiting)", "newcomer 7 with all 16 places taken");
    for (uint64_t s = 1; s <= 6; s++)
        ifl_batcher_cancel_session(b, s);
    check_no_leak(b, "queue share");
    ifl_batcher_stop(b);
}

/* max_batch 2: session A runs a long and a medium request, then queues two short ones; B queues
 * one. Plain round-robin would give the slot the medium one frees to A (A was in the cycle first);
 * with two sessions active the share is one slot each, A holds it with its long request, so B's
 * starts before either of A's. */
static void test_batch_share(ifl_backend *be)
{
    log_clear();
    ifl_batcher *b = start(be, IFL_POLICY_ITERATIVE, 2, 64, 64);
    uint64_t a_long = submit(b, 0xA, hello.ids, (int32_t)hello.n, 500, 0, 0, 0, NULL);
    wait_events(a_long, IFL_EV_TOKEN, 1);
    uint64_t a_mid = submit(b, 0xA, hello.ids, (int32_t)hello.n, 40, 0, 0, 0, NULL);
    wait_events(a_mid, IFL_EV_TOKEN, 1); /* A alone holds the whole batch */
    uint64_t a3 = submit(b, 0xA, hello.ids, (int32_t)hello.n, 6, 0, 0, 0, NULL);
    uint64_t a4 = submit(b, 0xA, hello.ids, (int32_t)hello.n, 6, 0, 0, 0, NULL);
    uint64_t b1 = submit(b, 0xB, hello.ids, (int32_t)hello.n, 6, 0, 0, 0, NULL);
    wait_events(b1, IFL_EV_DONE, 1);
    long mid_done = event_seq(a_mid, IFL_EV_DONE, 0), b_start = event_seq(b1, IFL_EV_STARTED, 0),
         a3_start = event_seq(a3, IFL_EV_STARTED, 0);
    CHECKF(mid_done >= 0 && b_start > mid_done && (a3_start < 0 || a3_start > b_start),
           "B's request started at event %ld, A's next at %ld, after A's medium one ended at %ld",
           b_start, a3_start, mid_done);
    ifl_batcher_cancel(b, a_long);
    ifl_batcher_wait_idle(b);
    a3_start = event_seq(a3, IFL_EV_STARTED, 0);
    long a4_start = event_seq(a4, IFL_EV_STARTED, 0);
    CHECKF(a3_start > b_start && a4_start > a3_start, "A's short requests started at %ld and %ld",
           a3_start, a4_start);
    printf("batch share: the slot A's medium request freed (event %ld) went to B (started at %ld), "
           "A's queued ones after it (%ld, %ld)\n",
           mid_done, b_start, a3_start, a4_start);
    check_no_leak(b, "batch share");
    ifl_batcher_stop(b);
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: test_batcher_shares VOCAB_DIR\n");
        return 2;
    }
    char dir[4096];
    if (fixture_setup(argv[1], "batcher_shares", dir, sizeof dir))
        return 1;
    ifl_backend *be = make_backend(4, 64);
    test_refusals(be);
    test_queue_share(be);
    test_batch_share(be);
    log_clear();
    free(evlog);
    free(steps);
    free(step_ids);
    free(step_pre);
    ifl_backend_free(be);
    fixture_teardown(dir);
    return test_finish("test_batcher_shares");
}
