/* test_batcher.c: the shared batcher, both policies over the same weights in one process:
 * exact token/done counts at 1, 8 and 64 concurrent requests; iterative interleaving vs static
 * run-to-completion (event order); a seeded request gives the same tokens alone and in a busy
 * batch; a 512-token prompt joins 16 decoding sequences in the chunks the step budget leaves,
 * without starving them (step records, not step times); round-robin fairness across sessions;
 * cancellation within one step (also of a whole session); stop strings, end-of-text and text that adds up to the completion; no KV block leaked
 * after any test. Every verdict is what the scheduler decided (events, step records), never how
 * fast a step ran. IFL_TEST_QUICK=1 (sanitizer stages): a smaller model and shorter completions,
 * the same cases. Refusals and the sessions' shares are test_batcher_shares.c's.
 * usage: test_batcher VOCAB_DIR */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "batcher.h"
#include "batcher_fixture.h"
#include "batcher_log.h"
#include "make_model.h"
#include "model.h"
#include "testutil.h"
#include "threadpool.h"
#include "util.h"

/* What the token ids decode to, through the same streaming UTF-8 repair as the batcher. */
static void decode_stream(const int32_t *ids, int n, char *out)
{
    ifl_utf8_stream st;
    ifl_utf8_stream_init(&st, IFL_UTF8_REPLACE);
    size_t o = 0;
    for (int i = 0; i < n; i++) {
        size_t len;
        const char *b = ifl_tokenizer_token_bytes(tok, ids[i], &len);
        o += ifl_utf8_stream_push(&st, b, len, out + o);
    }
    o += ifl_utf8_stream_flush(&st, out + o);
    out[o] = 0;
}

/* ---- the tests ---- */

static void test_counts(ifl_batcher *b)
{
    static const int32_t ns[] = {1, 8, 64};
    const int32_t n_tok = test_quick() ? 4 : 32;
    for (int t = 0; t < 3; t++) {
        log_clear();
        uint64_t ids[64];
        for (int i = 0; i < ns[t]; i++)
            ids[i] = submit(b, (uint64_t)(100 + i), hello.ids, (int32_t)hello.n, n_tok,
                            i % 2 ? 0.8f : 0.0f, (uint64_t)i, 0, NULL);
        ifl_batcher_wait_idle(b);
        int good = 0;
        for (int i = 0; i < ns[t]; i++) {
            int32_t toks[64];
            char text[8192], want[8192];
            ifl_event done;
            int n = collect(ids[i], toks, 64, text, sizeof text, &done);
            decode_stream(toks, n, want);
            CHECKF(n == n_tok && done.finish == IFL_FINISH_LENGTH &&
                       done.completion_tokens == n_tok && done.prompt_tokens == (int32_t)hello.n,
                   "%s, %d concurrent: request %d got %d tokens, finish %s, %d completion tokens",
                   ifl_batcher_name(b), ns[t], i, n, ifl_finish_name(done.finish),
                   done.completion_tokens);
            CHECKF(!strcmp(text, want),
                   "%s: request %d: token texts do not add up to the completion",
                   ifl_batcher_name(b), i);
            CHECK(done.t_queued <= done.t_admitted && done.t_admitted <= done.t_first_token &&
                  done.t_first_token <= done.t_finished);
            good += n == n_tok;
        }
        printf("%-9s %2d concurrent: %d/%d requests got exactly %d tokens and one done\n",
               ifl_batcher_name(b), ns[t], good, ns[t], n_tok);
        check_no_leak(b, "counts");
    }
}

/* A request arriving while 8 others are mid-generation. Iterative: it joins their batch (every
 * step it runs in holds the 8 too: step records) and its first token comes before any of them
 * finishes; the 8 are long and cancelled only once it is done, so no preemption of this thread can
 * let them finish first. Static: it waits for their batch to finish (no step holds it with any of
 * them; its first token after their last done). */
static void test_interleave(ifl_batcher *b)
{
    int iterative = !strcmp(ifl_batcher_name(b), "iterative");
    int32_t n_run = iterative ? 400 : (test_quick() ? 16 : 48);
    log_clear();
    uint64_t ids[8];
    for (int i = 0; i < 8; i++)
        ids[i] = submit(b, 1, hello.ids, (int32_t)hello.n, n_run, 0, 0, 0, NULL);
    for (int i = 0; i < 8; i++)
        wait_events(ids[i], IFL_EV_TOKEN, 4);
    uint64_t late = submit(b, 2, hello.ids, (int32_t)hello.n, 8, 0, 0, 0, NULL);
    if (iterative) {
        wait_events(late, IFL_EV_DONE, 1);
        for (int i = 0; i < 8; i++)
            ifl_batcher_cancel(b, ids[i]);
    }
    ifl_batcher_wait_idle(b);
    long first = event_seq(late, IFL_EV_TOKEN, 0);
    long first_done = -1, last_done = -1;
    for (int i = 0; i < 8; i++) {
        long d = event_seq(ids[i], IFL_EV_DONE, 0);
        first_done = first_done < 0 || d < first_done ? d : first_done;
        last_done = d > last_done ? d : last_done;
    }
    int n_late = 0, n_all = 0, n_any = 0;
    pthread_mutex_lock(&log_lock);
    steps_with(late, ids, 8, &n_late, &n_all);
    for (int i = 0; i < 8; i++) {
        int nl, na;
        steps_with(late, &ids[i], 1, &nl, &na);
        n_any += na;
    }
    pthread_mutex_unlock(&log_lock);
    if (iterative) {
        CHECKF(first >= 0 && first < first_done,
               "iterative: the late request's first token (event %ld) came after a running request "
               "finished (event %ld)",
               first, first_done);
        CHECKF(n_late >= 1 && n_all == n_late,
               "iterative: the late request ran in %d steps, %d of them with all 8 running ones",
               n_late, n_all);
        printf("iterative: late request's first token at event %ld, first of the 8 done at %ld; "
               "it ran in %d steps, every one with the 8\n",
               first, first_done, n_late);
    } else {
        CHECKF(first > last_done && n_any == 0,
               "static: the late request's first token (event %ld) came before "
               "the running batch finished (event %ld), or it shared %d steps with it",
               first, last_done, n_any);
        printf("static:    late request's first token at event %ld, last of the 8 done at %ld; no "
               "step holds it with any of them (%d steps of its own)\n",
               first, last_done, n_late);
    }
    check_no_leak(b, "interleave");
}

static void test_seeded(ifl_batcher *b)
{
    const int32_t n_tok = test_quick() ? 8 : 32;
    log_clear();
    int32_t alone[32], busy[32];
    uint64_t id = submit(b, 7, hello.ids, (int32_t)hello.n, n_tok, 0.8f, 1234, 0, NULL);
    ifl_batcher_wait_idle(b);
    int n1 = collect(id, alone, 32, NULL, 0, NULL);
    log_clear();
    uint64_t mine = 0;
    for (int i = 0; i < 32; i++) {
        if (i == 13)
            mine = submit(b, 7, hello.ids, (int32_t)hello.n, n_tok, 0.8f, 1234, 0, NULL);
        else /* others: different prompts (lengths) and seeds */
            submit(b, (uint64_t)(200 + i), hello.ids, (int32_t)hello.n - (i % 4), n_tok, 0.8f,
                   (uint64_t)(5000 + i), 0, NULL);
    }
    ifl_batcher_wait_idle(b);
    int n2 = collect(mine, busy, 32, NULL, 0, NULL);
    CHECKF(
        n1 == n_tok && n2 == n_tok && !memcmp(alone, busy, (size_t)n_tok * sizeof *alone),
        "seeded request (temperature 0.8, top-k 40, seed 1234) differs alone and in a batch of 32");
    printf(
        "seeded request: tokens identical alone and inside a batch of 32 (first: %d %d %d ...)\n",
        alone[0], alone[1], alone[2]);
    check_no_leak(b, "seeded");
}

/* The prefill chunks the scheduler must cut for a prompt of n_prompt tokens joining `decoders`
 * decoding sequences under a step budget: each step decodes every running sequence first, then
 * gives the prompt what is left, min(remaining prompt, budget - decode tokens). Returns the number
 * of chunks, their sizes in chunk[] (up to cap). */
static int expected_chunks(int32_t n_prompt, int32_t decoders, int32_t budget, int32_t *chunk,
                           int cap)
{
    int n = 0;
    for (int32_t left = n_prompt; left > 0 && budget > decoders; n++) {
        int32_t c = left < budget - decoders ? left : budget - decoders;
        if (n < cap)
            chunk[n] = c;
        left -= c;
    }
    return n;
}

enum { LP_DEC = 16, LP_LONG = 512, LP_MAX_CHUNKS = 64 };

/* What the step records say about a long prompt `big` joining LP_DEC decoding sequences ids[]. */
typedef struct {
    int n_chunks, chunk[LP_MAX_CHUNKS]; /* the prefill of each step that carried a chunk */
    int big_steps, starved, over_budget, bad_chunk, prefilled;
    double worst_ms; /* the slowest chunk step (information) */
} lp_scan;

/* Reads the step records from `from` on ({log_lock} taken here). A chunk must be min(remaining
 * prompt, budget - the step's decode tokens): decode tokens first, then what the budget leaves. */
static void scan_long_prompt(size_t from, uint64_t big, const uint64_t *ids, int32_t budget,
                             lp_scan *o)
{
    memset(o, 0, sizeof *o);
    pthread_mutex_lock(&log_lock);
    for (size_t s = from; s < n_steps; s++) {
        const ifl_step_record *st = &steps[s];
        if (st->prefill_tokens + st->decode_tokens > budget) {
            o->over_budget++;
            fprintf(stderr, "step %llu ran %d tokens, over the budget of %d\n",
                    (unsigned long long)st->step, st->prefill_tokens + st->decode_tokens, budget);
        }
        int has_big = 0, big_prefill = 0, decoders = 0;
        for (int32_t k = 0; k < st->n_seqs; k++) {
            if (step_ids[s][k] == big) {
                has_big = 1;
                big_prefill = step_pre[s][k];
            }
            for (int i = 0; i < LP_DEC; i++)
                decoders += step_ids[s][k] == ids[i] && !step_pre[s][k];
        }
        if (!has_big)
            continue;
        o->big_steps++;
        o->starved += decoders != LP_DEC;
        if (!big_prefill)
            continue;
        int32_t left = LP_LONG - o->prefilled, room = budget - st->decode_tokens;
        int32_t expect = left < room ? left : room;
        if (st->prefill_tokens != expect) {
            o->bad_chunk++;
            fprintf(stderr,
                    "step %llu: a chunk of %d prompt tokens with %d decode tokens and %d of the "
                    "prompt left (expected min(%d, %d - %d) = %d)\n",
                    (unsigned long long)st->step, st->prefill_tokens, st->decode_tokens, left, left,
                    budget, st->decode_tokens, expect);
        }
        if (o->n_chunks < LP_MAX_CHUNKS)
            o->chunk[o->n_chunks] = st->prefill_tokens;
        o->n_chunks++;
        o->prefilled += st->prefill_tokens;
        o->worst_ms = st->ms > o->worst_ms ? st->ms : o->worst_ms;
    }
    pthread_mutex_unlock(&log_lock);
}

/* A 512-token prompt admitted while 16 sequences decode: what the scheduler decided, step by step
 * (from the step records): every running sequence decoded in every step that carried the prompt,
 * no step over the token budget, each chunk min(remaining prompt, budget - decode tokens), the
 * prompt split over the expected number of steps. The step times (slowest chunk step against the
 * median decode-only step) are printed, not asserted: they are a benchmark figure (`inflight
 * bench`), and on a shared 2-core machine a preempted pool thread makes any step slow. */
static void test_long_prompt(ifl_batcher *b, int32_t budget)
{
    const int settle = test_quick() ? 2 : 12; /* decode-only steps before and after the prompt */
    log_clear();
    uint64_t ids[LP_DEC];
    for (int i = 0; i < LP_DEC; i++)
        ids[i] = submit(b, (uint64_t)(300 + i), hello.ids, (int32_t)hello.n, 120, 0, 0, 0, NULL);
    for (int i = 0; i < LP_DEC; i++)
        wait_events(ids[i], IFL_EV_TOKEN, settle);
    int32_t longp[LP_LONG];
    for (int i = 0; i < LP_LONG; i++)
        longp[i] = hello.ids[i % hello.n];
    pthread_mutex_lock(&log_lock);
    size_t step_mark = n_steps;
    pthread_mutex_unlock(&log_lock);
    uint64_t big = submit(b, 399, longp, LP_LONG, 4, 0, 0, 0, NULL);
    wait_events(big, IFL_EV_TOKEN, 1);
    /* more decode steps: every step of the prompt's prefill is recorded by then */
    wait_events(ids[0], IFL_EV_TOKEN, count_events(ids[0], IFL_EV_TOKEN) + settle);
    int32_t want[LP_MAX_CHUNKS];
    int n_want = expected_chunks(LP_LONG, LP_DEC, budget, want, LP_MAX_CHUNKS);
    lp_scan o;
    scan_long_prompt(step_mark, big, ids, budget, &o);
    int same = o.n_chunks == n_want;
    char chunks[512];
    size_t cl = 0;
    for (int i = 0; i < o.n_chunks && i < LP_MAX_CHUNKS; i++) {
        same = same && o.chunk[i] == want[i];
        if (cl + 8 < sizeof chunks)
            cl +=
                (size_t)snprintf(chunks + cl, sizeof chunks - cl, "%s%d", i ? "," : "", o.chunk[i]);
    }
    chunks[cl] = 0;
    CHECKF(o.starved == 0,
           "%d of %d steps with the long prompt left a running sequence without a token", o.starved,
           o.big_steps);
    CHECKF(o.over_budget == 0, "%d steps over the budget of %d tokens", o.over_budget, budget);
    CHECKF(o.bad_chunk == 0 && o.prefilled == LP_LONG,
           "%d chunks not min(remaining prompt, budget - decode tokens); %d of %d prompt tokens "
           "prefilled in the steps recorded",
           o.bad_chunk, o.prefilled, LP_LONG);
    CHECKF(same, "the %d-token prompt took %d chunk steps (%s), expected %d of min(left, %d - %d)",
           LP_LONG, o.n_chunks, chunks, n_want, budget, LP_DEC);
    int n_dec_only;
    double median = median_decode_ms(&n_dec_only);
    printf("%d-token prompt with %d decoding (budget %d tokens): %d chunk steps (%s), every one "
           "decoded all %d, none over the budget\n",
           LP_LONG, LP_DEC, budget, o.n_chunks, chunks, LP_DEC);
    printf("  (information, not asserted) slowest chunk step %.2f ms vs median decode-only step "
           "%.2f ms over %d steps (%.1fx)\n",
           o.worst_ms, median, n_dec_only, median > 0 ? o.worst_ms / median : 0);
    for (int i = 0; i < LP_DEC; i++)
        ifl_batcher_cancel(b, ids[i]);
    check_no_leak(b, "long prompt");
}

/* Session A queues 40, then B queues 1: B is admitted within the next max_batch admissions. The
 * batch is kept full by session C until both have queued, so every admission counted below happens
 * after B is in the queue. */
static void test_fairness(ifl_batcher *b, int32_t max_batch)
{
    log_clear();
    uint64_t blockers[64];
    for (int i = 0; i < max_batch; i++)
        blockers[i] = submit(b, 0xC, hello.ids, (int32_t)hello.n, 400, 0, 0, 0, NULL);
    for (int i = 0; i < max_batch; i++)
        wait_events(blockers[i], IFL_EV_TOKEN, 1);
    for (int i = 0; i < 40; i++)
        submit(b, 0xA, hello.ids, (int32_t)hello.n, 6, 0, 0, 0, NULL);
    uint64_t bid = submit(b, 0xB, hello.ids, (int32_t)hello.n, 6, 0, 0, 0, NULL);
    CHECK(ifl_batcher_cancel_session(b, 0xC) == max_batch);
    ifl_batcher_wait_idle(b);
    int admissions_before = 0, found = 0;
    pthread_mutex_lock(&log_lock);
    for (size_t i = 0; i < n_log; i++) {
        const ifl_event *e = &evlog[i].ev;
        if (e->type != IFL_EV_STARTED || e->session == 0xC)
            continue;
        if (e->request_id == bid) {
            found = 1;
            break;
        }
        admissions_before++; /* an A admitted before B */
    }
    pthread_mutex_unlock(&log_lock);
    CHECKF(found && admissions_before < max_batch,
           "session B's request waited for %d admissions of session A (max_batch %d)",
           admissions_before, max_batch);
    printf("fairness: session B admitted after %d admission(s) of A's 40 queued before it "
           "(max_batch %d)\n",
           admissions_before, max_batch);
    check_no_leak(b, "fairness");
}

static void test_cancel(ifl_batcher *b)
{
    log_clear();
    uint64_t id = submit(b, 9, hello.ids, (int32_t)hello.n, 400, 0, 0, 0, NULL);
    wait_events(id, IFL_EV_TOKEN, 3);
    CHECK(ifl_batcher_cancel(b, id) == 1);
    /* counted once the cancel is in: the step in flight may still add its token, no later one.
     * (Counted before the call, a preemption of this thread would let steps go by.) */
    int before = count_events(id, IFL_EV_TOKEN);
    wait_events(id, IFL_EV_DONE, 1);
    int after = count_events(id, IFL_EV_TOKEN);
    ifl_event done;
    collect(id, NULL, 0, NULL, 0, &done);
    CHECKF(done.finish == IFL_FINISH_CANCELLED && after - before <= 1,
           "cancel: finish %s, %d tokens after the cancel", ifl_finish_name(done.finish),
           after - before);
    CHECK(ifl_batcher_cancel(b, id) == 0); /* already gone */
    check_no_leak(b, "cancel");
    /* a session going away: running and waiting requests alike */
    log_clear();
    uint64_t s_ids[6];
    for (int i = 0; i < 6; i++)
        s_ids[i] = submit(b, 77, hello.ids, (int32_t)hello.n, 300, 0, 0, 0, NULL);
    uint64_t other = submit(b, 78, hello.ids, (int32_t)hello.n, 5, 0, 0, 0, NULL);
    wait_events(s_ids[0], IFL_EV_TOKEN, 2);
    CHECK(ifl_batcher_cancel_session(b, 77) == 6);
    ifl_batcher_wait_idle(b);
    int all_cancelled = 1;
    for (int i = 0; i < 6; i++) {
        collect(s_ids[i], NULL, 0, NULL, 0, &done);
        all_cancelled &= done.finish == IFL_FINISH_CANCELLED;
    }
    collect(other, NULL, 0, NULL, 0, &done);
    CHECK(all_cancelled && done.finish == IFL_FINISH_LENGTH && done.completion_tokens == 5);
    printf("cancel: done(cancelled) with %d token(s) after the call; a session's 6 requests "
           "cancelled, another session's finished\n",
           after - before);
    check_no_leak(b, "cancel session");
}

/* Stop strings and end-of-text against a greedy reference run. */
static void test_stops(ifl_backend *be)
{
    log_clear();
    ifl_batcher *b = start(be, IFL_POLICY_ITERATIVE, 4, 16, 64);
    int32_t ref[48];
    char ref_text[16384];
    uint64_t id = submit(b, 1, hello.ids, (int32_t)hello.n, 48, 0, 0, 0, NULL);
    ifl_batcher_wait_idle(b);
    int n = collect(id, ref, 48, ref_text, sizeof ref_text, NULL);
    size_t rl = strlen(ref_text);
    CHECK(n == 48 && rl > 40);
    /* 1. a stop string taken from the middle of the reference text (a whole UTF-8 run) */
    size_t at = rl / 2;
    while (at < rl && ((unsigned char)ref_text[at] & 0xC0) == 0x80)
        at++;
    size_t sl = 1;
    while (sl < 6 && at + sl < rl) {
        sl++;
        while (at + sl < rl && ((unsigned char)ref_text[at + sl] & 0xC0) == 0x80)
            sl++;
    }
    char stop[64];
    memcpy(stop, ref_text + at, sl);
    stop[sl] = 0;
    const char *first_hit = strstr(ref_text, stop);
    const char *stops[1] = {stop};
    log_clear();
    id = submit(b, 1, hello.ids, (int32_t)hello.n, 48, 0, 0, 1, stops);
    ifl_batcher_wait_idle(b);
    char got[16384];
    ifl_event done;
    collect(id, NULL, 0, got, sizeof got, &done);
    CHECKF(done.finish == IFL_FINISH_STOP && strlen(got) == (size_t)(first_hit - ref_text) &&
               !memcmp(got, ref_text, strlen(got)) && !strstr(got, stop),
           "stop string \"%s\": finish %s, %zu bytes of text (want %zu)", stop,
           ifl_finish_name(done.finish), strlen(got), (size_t)(first_hit - ref_text));
    printf("stop string (%zu bytes from the middle of the text): finish %s after %d tokens, text "
           "is the reference up to it, the stop string not emitted\n",
           sl, ifl_finish_name(done.finish), done.completion_tokens);
    /* 2. a stop string the text only starts: held back, then released at the end (length) */
    char tail_stop[64];
    size_t tl = 3 < rl ? 3 : rl;
    while (tl < rl && ((unsigned char)ref_text[rl - tl] & 0xC0) == 0x80)
        tl++; /* start on a character boundary */
    memcpy(tail_stop, ref_text + rl - tl, tl);
    strcpy(tail_stop + tl, "\x01never");
    const char *stops2[1] = {tail_stop};
    if (!strstr(ref_text, tail_stop)) {
        log_clear();
        id = submit(b, 1, hello.ids, (int32_t)hello.n, 48, 0, 0, 1, stops2);
        ifl_batcher_wait_idle(b);
        collect(id, NULL, 0, got, sizeof got, &done);
        CHECKF(done.finish == IFL_FINISH_LENGTH && !strcmp(got, ref_text),
               "held-back text was not released at the end");
    }
    ifl_batcher_stop(b);
    /* 3. end-of-text: make the 5th greedy token the batcher's EOS */
    log_clear();
    ifl_err err;
    ifl_batcher_params p = {.policy = IFL_POLICY_ITERATIVE,
                            .max_batch = 4,
                            .max_queue = 16,
                            .step_tokens = 64,
                            .eos_token = ref[4],
                            .tok = tok,
                            .on_event = on_event,
                            .on_step = on_step};
    b = ifl_batcher_start(be, &p, &err);
    ifl_request_params rp = {.session = 1,
                             .prompt = hello.ids,
                             .n_prompt = (int32_t)hello.n,
                             .max_tokens = 48,
                             .sampling = {0, 0, 1},
                             .ignore_eos = 0};
    ifl_batcher_submit(b, &rp, &id, NULL, &err);
    ifl_batcher_wait_idle(b);
    int32_t toks[48];
    int first_eos = 0;
    while (ref[first_eos] != ref[4])
        first_eos++;
    int ne = collect(id, toks, 48, NULL, 0, &done);
    CHECKF(done.finish == IFL_FINISH_EOS && ne == first_eos + 1 && done.completion_tokens == ne,
           "eos: finish %s after %d tokens (want %d)", ifl_finish_name(done.finish), ne,
           first_eos + 1);
    ifl_batcher_stop(b);
    /* 4. a stop string and end-of-text as the very first token: no text is held yet when the
     * stop strings are looked for (the search once read a NULL buffer: UBSan, 2026-12-06) */
    log_clear();
    p.eos_token = ref[0];
    b = ifl_batcher_start(be, &p, &err);
    rp.n_stop = 1;
    rp.stop[0] = stop;
    ifl_batcher_submit(b, &rp, &id, NULL, &err);
    ifl_batcher_wait_idle(b);
    ne = collect(id, toks, 48, got, sizeof got, &done);
    CHECKF(done.finish == IFL_FINISH_EOS && ne == 1 && got[0] == 0,
           "eos first, with a stop string: finish %s after %d tokens, %zu bytes of text (want eos "
           "after 1, no text)",
           ifl_finish_name(done.finish), ne, strlen(got));
    ifl_batcher_stop(b);
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: test_batcher VOCAB_DIR\n");
        return 2;
    }
    char dir[4096];
    if (fixture_setup(argv[1], "batcher", dir, sizeof dir))
        return 1;

    /* Both policies over the same weights in one process, sharing one thread pool. */
    ifl_backend *be_it = make_backend(64, 128), *be_st = make_backend(64, 128);
    ifl_batcher *it = start(be_it, IFL_POLICY_ITERATIVE, 64, 256, 128);
    ifl_batcher *st = start(be_st, IFL_POLICY_STATIC, 64, 256, 128);
    test_counts(it);
    test_counts(st);
    test_interleave(it);
    test_interleave(st);
    test_seeded(it);
    ifl_batcher_stop(it);
    ifl_batcher_stop(st);
    ifl_backend_free(be_st);

    int32_t budget = 48;
    ifl_batcher *lp = start(be_it, IFL_POLICY_ITERATIVE, 32, 64, budget);
    test_long_prompt(lp, budget);
    ifl_batcher_stop(lp);
    ifl_batcher *fb = start(be_it, IFL_POLICY_ITERATIVE, 4, 64, 64);
    test_fairness(fb, 4);
    test_cancel(fb);
    ifl_batcher_stop(fb);
    test_stops(be_it);

    log_clear();
    free(evlog);
    free(steps);
    free(step_ids);
    free(step_pre);
    ifl_backend_free(be_it);
    fixture_teardown(dir);
    return test_finish("test_batcher");
}
