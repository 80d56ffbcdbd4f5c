/* test_prefix_cache.c: the prefix cache (engine/kv.c, the batcher's admission) changes no result.
 *   logits   on the CPU backend, a prompt whose first blocks come from the cache (computed by
 *            another sequence, in other chunks, some of them its generated tokens) gives logits
 *            bit-identical to the same prompt computed whole in a pool without a cache;
 *   batcher  requests sharing an opening, and a conversation's next turn, give the same tokens
 *            with the cache on and off (greedy and seeded sampling, both policies); the cached
 *            tokens are reported, fewer prompt tokens are computed, the pool returns to its total;
 *   pressure many distinct prompts through a pool of a few requests' blocks: every request
 *            finishes (admission stays exact), cached blocks are evicted, the tokens still equal
 *            the cache-off run's.
 * Run once per ISA the machine has (INFLIGHT_ISA). */
#include "batcher_fixture.h"

#include "kv.h"
#include "rng.h"

#define OPEN 40 /* the shared opening: two full 16-token blocks and a partial one */

static ifl_backend *backend_with(int32_t max_seqs, int32_t max_tokens, int32_t kv_blocks)
{
    ifl_err err;
    ifl_backend_params bp = {.max_seqs = max_seqs,
                             .max_tokens = max_tokens,
                             .pool = pool,
                             .kv_block_size = 16,
                             .kv_blocks = kv_blocks};
    ifl_backend *be = ifl_cpu_backend_new(&model, &bp, &err);
    CHECKF(be != NULL, "backend: %s", err.msg);
    if (!be)
        exit(1);
    return be;
}

/* One run of tokens[0..n) at positions pos0.. of s; the last row's logits into out. */
static int run(ifl_backend *be, ifl_kv_seq *s, const int32_t *tokens, int32_t n, int32_t pos0,
               float *out)
{
    int32_t run_start[2] = {0, n};
    const int32_t *tables[1] = {s->blocks};
    ifl_batch b = {.n_seqs = 1,
                   .n_tokens = n,
                   .tokens = tokens,
                   .run_start = run_start,
                   .pos0 = &pos0,
                   .block_tables = tables,
                   .n_blocks = &s->n_blocks};
    ifl_err err;
    int rc = ifl_backend_step(be, &b, out, &err);
    CHECKF(rc == 0, "step: %s", err.msg);
    return rc;
}

/* tokens[0..n) whole in a pool without a cache: the last row's logits. be must be a backend of
 * its own: the pool's block ids name the backend's storage, which the cached blocks live in. */
static void solo(ifl_backend *be, const int32_t *tokens, int32_t n, float *out)
{
    ifl_kv_pool p;
    ifl_err err;
    ifl_kv_pool_init(&p, be->params.kv_blocks, be->params.kv_block_size, &err);
    ifl_kv_seq s = {0};
    CHECK(ifl_kv_seq_reserve(&s, &p, n) == 0);
    run(be, &s, tokens, n, 0, out);
    ifl_kv_seq_free(&s, &p);
    ifl_kv_pool_free(&p);
}

/* tokens[0..n) admitted into pool p (which must find want_cached of them) and the rest computed
 * on be: the last logits must equal the whole prompt's on be_solo, bit for bit. */
static void cached_vs_whole(ifl_backend *be, ifl_backend *be_solo, ifl_kv_pool *p,
                            const int32_t *tokens, int32_t n, int32_t want_cached, const char *tag,
                            float *got, float *want)
{
    int32_t V = model.cfg.n_vocab, cached = -1;
    ifl_kv_seq s = {0};
    CHECK(ifl_kv_seq_admit(&s, p, tokens, n, n, &cached) == 0);
    CHECKF(cached == want_cached, "%s: %d tokens cached, expected %d", tag, cached, want_cached);
    run(be, &s, tokens + cached, n - cached, cached, got);
    solo(be_solo, tokens, n, want);
    CHECKF(!memcmp(got, want, (size_t)V * sizeof *got),
           "%s: logits with %d cached tokens differ from the whole prompt's (relative L2 %.3g)",
           tag, cached, rel_l2(got, want, (size_t)V));
    ifl_kv_seq_free(&s, p);
}

static void test_logits(void)
{
    ifl_backend *be = backend_with(4, 128, 64), *be_solo = backend_with(1, 128, 8);
    int32_t V = model.cfg.n_vocab;
    float *got = test_xmalloc((size_t)V * sizeof *got), *want = test_xmalloc((size_t)V * 4);
    ifl_rng rng;
    ifl_rng_seed(&rng, 5);
    int32_t a[64], b[64], c[64];
    for (int i = 0; i < 64; i++) {
        a[i] = (int32_t)(ifl_rng_next(&rng) % (uint64_t)V);
        b[i] = i < OPEN ? a[i] : (int32_t)(ifl_rng_next(&rng) % (uint64_t)V);
    }
    ifl_kv_pool p;
    ifl_err err;
    ifl_kv_pool_init(&p, be->params.kv_blocks, be->params.kv_block_size, &err);
    ifl_kv_pool_set_prefix_cache(&p, 1, 1);
    /* A: prompt a[0..47) in chunks of 20, 20, 7, then 5 decode inputs a[47..52), published as
     * they fill */
    ifl_kv_seq sa = {0};
    int32_t cached = -1;
    CHECK(ifl_kv_seq_admit(&sa, &p, a, 47, 52, &cached) == 0 && cached == 0);
    for (int32_t at = 0; at < 52;) {
        int32_t len = at < 47 ? (47 - at < 20 ? 47 - at : 20) : 1;
        run(be, &sa, a + at, len, at, got);
        at += len;
        ifl_kv_seq_publish(&sa, &p, a, at);
    }
    CHECK(p.n_published == 3); /* positions 0..47 */
    ifl_kv_seq_release(&sa, &p);
    /* B: the opening, then its own tokens: two blocks cached */
    cached_vs_whole(be, be_solo, &p, b, 57, 32, "B", got, want);
    /* C: A's prompt and generated inputs, then more: three blocks, the third holding both */
    memcpy(c, a, sizeof c);
    cached_vs_whole(be, be_solo, &p, c, 60, 48, "C", got, want);
    CHECK(ifl_kv_pool_used(&p) == 0 && ifl_kv_pool_available(&p) == p.n_blocks);
    printf("logits: bit-identical with 32 and 48 cached tokens\n");
    ifl_kv_seq_free(&sa, &p);
    ifl_kv_pool_free(&p);
    free(got);
    free(want);
    ifl_backend_free(be);
    ifl_backend_free(be_solo);
}

static ifl_batcher *start_cache(ifl_backend *be, ifl_policy pol, int32_t max_batch, int no_cache)
{
    ifl_err err;
    ifl_batcher_params p = {.policy = pol,
                            .max_batch = max_batch,
                            .max_queue = 256,
                            .step_tokens = 64,
                            .eos_token = 50256,
                            .tok = tok,
                            .on_event = on_event,
                            .on_step = on_step,
                            .no_prefix_cache = no_cache};
    ifl_batcher *b = ifl_batcher_start(be, &p, &err);
    CHECKF(b != NULL, "batcher: %s", err.msg);
    if (!b)
        exit(1);
    return b;
}

#define NREQ 8
#define NGEN 12

/* IFL_TEST_QUICK (the sanitizer and valgrind stages): fewer tokens and requests, the same cases */
static int32_t n_gen(void)
{
    return test_quick() ? 6 : NGEN;
}

typedef struct {
    int32_t ids[NREQ + 1][NGEN];
    int32_t cached[NREQ + 1];
    ifl_batcher_stats st;
} wave_result;

/* One request of prompt p (n) alone, then NREQ - 1 sharing its opening at once, then a second
 * turn: the first prompt, its reply's tokens, 5 more. Odd ones sampled (seeded), even greedy. */
static void run_waves(ifl_batcher *b, const int32_t *prompts, wave_result *out)
{
    uint64_t ids[NREQ + 1];
    log_clear();
    for (int r = 0; r < NREQ; r++) {
        ids[r] = submit(b, (uint64_t)(10 + r), prompts + r * 64, OPEN + 4 + r, n_gen(),
                        r % 5 ? 0.8f : 0.0f, (uint64_t)(900 + r), 0, NULL);
        if (r == 0)
            ifl_batcher_wait_idle(b);
    }
    ifl_batcher_wait_idle(b);
    for (int r = 0; r < NREQ; r++) {
        ifl_event done;
        int n = collect(ids[r], out->ids[r], NGEN, NULL, 0, &done);
        CHECKF(n == n_gen(), "request %d: %d tokens", r, n);
        out->cached[r] = done.cached_tokens;
    }
    int32_t turn2[128];
    int32_t n1 = OPEN + 4;
    memcpy(turn2, prompts, (size_t)n1 * sizeof *turn2);
    int32_t g = n_gen();
    memcpy(turn2 + n1, out->ids[0], (size_t)g * sizeof *turn2);
    for (int i = 0; i < 5; i++)
        turn2[n1 + g + i] = 1000 + i;
    ids[NREQ] = submit(b, 10, turn2, n1 + g + 5, g, 0.0f, 0, 0, NULL);
    ifl_batcher_wait_idle(b);
    ifl_event done;
    CHECK(collect(ids[NREQ], out->ids[NREQ], NGEN, NULL, 0, &done) == g);
    out->cached[NREQ] = done.cached_tokens;
    ifl_batcher_get_stats(b, &out->st);
}

static void test_batcher_on_off(ifl_policy pol)
{
    static int32_t prompts[NREQ * 64];
    ifl_rng rng;
    ifl_rng_seed(&rng, 11);
    for (int i = 0; i < NREQ * 64; i++)
        prompts[i] = (int32_t)(ifl_rng_next(&rng) % 50000);
    for (int r = 1; r < NREQ; r++)
        memcpy(prompts + r * 64, prompts, OPEN * sizeof *prompts);
    wave_result on, off;
    memset(&on, 0, sizeof on);
    memset(&off, 0, sizeof off);
    ifl_backend *be = make_backend(NREQ, 64);
    ifl_batcher *b = start_cache(be, pol, NREQ, 0);
    run_waves(b, prompts, &on);
    check_no_leak(b, "cache on");
    ifl_batcher_stop(b);
    b = start_cache(be, pol, NREQ, 1);
    run_waves(b, prompts, &off);
    check_no_leak(b, "cache off");
    ifl_batcher_stop(b);
    ifl_backend_free(be);
    const char *pn = ifl_policy_name(pol);
    for (int r = 0; r <= NREQ; r++) {
        CHECKF(!memcmp(on.ids[r], off.ids[r], sizeof on.ids[r]),
               "%s: request %d (%s) generated other tokens with the cache on", pn, r,
               r < NREQ && r % 5 ? "seeded sampling" : "greedy");
        CHECKF(off.cached[r] == 0, "%s: request %d: %d cached with the cache off", pn, r,
               off.cached[r]);
    }
    CHECKF(on.cached[0] == 0, "%s: the first request found %d cached", pn, on.cached[0]);
    for (int r = 1; r < NREQ; r++)
        CHECKF(on.cached[r] == 32, "%s: request %d: %d cached, expected the opening's 32", pn, r,
               on.cached[r]);
    /* turn 2: 44 prompt + 12 (quick: 6) generated, all but the last fed back, + 5: blocks 0..2
     * hold 48 computed tokens */
    CHECKF(on.cached[NREQ] == 48, "%s: the second turn found %d cached, expected 48", pn,
           on.cached[NREQ]);
    CHECK(on.st.prefix_cache && !off.st.prefix_cache);
    CHECKF(on.st.prompt_tokens_computed + 32 * (NREQ - 1) + 48 == off.st.prompt_tokens_computed,
           "%s: %llu prompt tokens computed with the cache, %llu without", pn,
           (unsigned long long)on.st.prompt_tokens_computed,
           (unsigned long long)off.st.prompt_tokens_computed);
    CHECK(on.st.prefix_lookups == NREQ + 1 && on.st.prefix_hits == NREQ &&
          on.st.prefix_hit_tokens == 32 * (NREQ - 1) + 48);
    CHECK(on.st.kv_used == 0 && on.st.kv_cached > 0 && on.st.kv_cached_unused == on.st.kv_cached);
    printf("%s: %d requests and a second turn, the same tokens with the cache on and off; "
           "prompt tokens computed %llu against %llu\n",
           pn, NREQ, (unsigned long long)on.st.prompt_tokens_computed,
           (unsigned long long)off.st.prompt_tokens_computed);
}

/* NP prompts of 40 tokens and NOUT out (3 blocks each), every third the same one and the others
 * distinct, 4 at a time through a pool of 16 blocks: 12 held by the running ones, the rest
 * cached, the distinct ones evicted, the repeated one found again. IFL_TEST_QUICK: 12 prompts of 4
 * out, still 3 blocks each, three waves (3 found cached, 6 evicted): the lm_head over 50257 tokens
 * for each token out made the test 221 s under valgrind with 18 of 8, 135 s so (2026-12-07). */
#define NP 40
#define NOUT 8
static int n_press(void)
{
    return test_quick() ? 12 : NP;
}
static int32_t n_press_out(void)
{
    return test_quick() ? 4 : NOUT;
}

static void pressure(int no_cache, int32_t out[NP][NOUT], ifl_batcher_stats *st)
{
    ifl_backend *be = backend_with(4, 64, 16);
    ifl_batcher *b = start_cache(be, IFL_POLICY_ITERATIVE, 4, no_cache);
    log_clear();
    uint64_t ids[NP];
    int32_t pr[40];
    for (int r = 0; r < n_press(); r++) {
        for (int i = 0; i < 40; i++)
            pr[i] = (int32_t)(((r % 3 ? r : 0) * 7919 + i * 104729) % 50000);
        ids[r] = submit(b, (uint64_t)(100 + r % 5), pr, 40, n_press_out(), 0.0f, 0, 0, NULL);
    }
    ifl_batcher_wait_idle(b);
    for (int r = 0; r < n_press(); r++) {
        ifl_event done;
        CHECKF(collect(ids[r], out[r], NOUT, NULL, 0, &done) == n_press_out() &&
                   done.finish == IFL_FINISH_LENGTH,
               "pressure: request %d did not finish with %d tokens", r, n_press_out());
    }
    check_no_leak(b, "pressure");
    ifl_batcher_get_stats(b, st);
    ifl_batcher_stop(b);
    ifl_backend_free(be);
}

static void test_pressure(void)
{
    static int32_t on[NP][NOUT], off[NP][NOUT];
    ifl_batcher_stats son, soff;
    pressure(0, on, &son);
    pressure(1, off, &soff);
    CHECK(!memcmp(on, off, sizeof on));
    CHECKF(son.prefix_evictions > 0 && son.prefix_hits > 0 && son.kv_cached <= 16 &&
               son.kv_cached_unused == son.kv_cached,
           "pressure: %llu evictions, %llu hits, %d cached",
           (unsigned long long)son.prefix_evictions, (unsigned long long)son.prefix_hits,
           son.kv_cached);
    for (int r = 3; r < n_press(); r += 3)
        CHECKF(!memcmp(on[r], on[0], sizeof on[r]), "pressure: request %d differs from 0", r);
    printf("pressure: %d prompts through 16 blocks: all finished, %llu found cached, %llu cached "
           "blocks evicted, the same tokens as without the cache\n",
           n_press(), (unsigned long long)son.prefix_hits,
           (unsigned long long)son.prefix_evictions);
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: test_prefix_cache VOCAB_DIR\n");
        return 2;
    }
    test_select_isa("test_prefix_cache");
    char dir[4096];
    if (fixture_setup(argv[1], "prefix", dir, sizeof dir))
        return 1;
    test_logits();
    test_batcher_on_off(IFL_POLICY_ITERATIVE);
    if (!test_quick()) /* (the sanitizer and valgrind stages: the admission code is shared) */
        test_batcher_on_off(IFL_POLICY_STATIC);
    test_pressure();
    log_clear();
    free(evlog);
    free(steps);
    free(step_ids);
    free(step_pre);
    fixture_teardown(dir);
    return test_finish("test_prefix_cache");
}
