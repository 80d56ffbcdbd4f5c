/* test_sampler.c: greedy is argmax (lowest id on ties); top-k and top-p keep exactly the right
 * support; min_p keeps exactly the tokens whose probability reaches min_p of the best (against a
 * float64 reference), with top_k (the shorter wins) and before top_p (whose nucleus is taken from
 * the mass min_p leaves); sampled frequencies match the softmax at the temperature (a chi-square
 * bound over 200k draws); a seed gives the same sequence every time and different seeds differ;
 * bad parameters are rejected with a message; Philox4x32-10 matches its published known answers.
 * Also the KV pool accounting: all-or-nothing reservations, no leaks. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kv.h"
#include "philox.h"
#include "sampler.h"
#include "testutil.h"

#define V 1000

/* Philox4x32-10 against the Random123 known-answer vectors (kat_vectors, philox4x32 10), and the
 * sampler's use of it: ifl_philox_uniform has the mean and variance of U[0, 1), bits53 < 2^53, and
 * a draw is a pure function of (seed, draw). */
static void test_philox(void)
{
    static const struct {
        uint32_t ctr[4], key[2], out[4];
    } kat[] = {
        {{0, 0, 0, 0}, {0, 0}, {0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8}},
        {{0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff},
         {0xffffffff, 0xffffffff},
         {0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd}},
        {{0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344},
         {0xa4093822, 0x299f31d0},
         {0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1}},
    };
    for (size_t v = 0; v < sizeof kat / sizeof kat[0]; v++) {
        uint32_t out[4];
        ifl_philox4x32_10(kat[v].ctr, kat[v].key, out);
        CHECKF(!memcmp(out, kat[v].out, sizeof out),
               "philox4x32-10 vector %zu: got %08x %08x %08x %08x, want %08x %08x %08x %08x", v,
               out[0], out[1], out[2], out[3], kat[v].out[0], kat[v].out[1], kat[v].out[2],
               kat[v].out[3]);
    }

    int n = 100000, over = 0;
    double sum = 0, sum2 = 0;
    for (int d = 0; d < n; d++) {
        uint64_t b = ifl_philox_bits53(12345, (uint64_t)d);
        over += b >= (1ull << 53);
        double u = ifl_philox_uniform(12345, (uint64_t)d);
        sum += u;
        sum2 += u * u;
    }
    double mean = sum / n, var = sum2 / n - mean * mean;
    /* U[0, 1): mean 1/2 (sd of the estimate 0.29 / sqrt(n) = 0.0009), variance 1/12 = 0.08333 (sd
     * of the estimate ~0.0003): 6 sigma bounds. */
    CHECKF(over == 0, "%d bits53 values >= 2^53", over);
    CHECKF(fabs(mean - 0.5) < 0.0055, "philox uniform mean %.5f", mean);
    CHECKF(fabs(var - 1.0 / 12) < 0.002, "philox uniform variance %.5f", var);
    printf("philox: known answers checked; %d uniforms: mean %.5f, variance %.5f\n", n, mean, var);
    CHECK(ifl_philox_bits53(7, 99) == ifl_philox_bits53(7, 99));
    CHECK(ifl_philox_bits53(7, 99) != ifl_philox_bits53(8, 99));
    CHECK(ifl_philox_bits53(7, 99) != ifl_philox_bits53(7, 100));
    CHECK(ifl_philox_bits53(7, 99) != ifl_philox_bits53(7, 99 + (1ull << 32)));
}

/* The distinct ids drawn with p over a grid of n uniforms (every token of probability > 1/n is
 * hit) into hit (V), and how many. */
static int drawn_set(ifl_sampler *s, const float *l, const ifl_sampling *p, int n, int *hit)
{
    memset(hit, 0, (size_t)s->n_vocab * sizeof *hit);
    int distinct = 0;
    for (int j = 0; j < n; j++) {
        int32_t id = ifl_sample_u(s, l, p, (j + 0.5) / n);
        distinct += !hit[id];
        hit[id] = 1;
    }
    return distinct;
}

/* min_p: the kept set against a float64 reference (exp((l - max) / T) >= min_p), alone, with
 * top_k and before top_p; greedy ignores it. */
static void test_min_p(ifl_sampler *s, ifl_rng *rng)
{
    static int hit[V];
    float l[V];
    /* planted: ratios to the best 1, e^-0.5 = 0.61, e^-1 = 0.37, e^-1.8 = 0.17, e^-2.5 = 0.08 */
    for (int i = 0; i < V; i++)
        l[i] = -30.0f;
    const int ids[5] = {500, 7, 900, 3, 250};
    const float lv[5] = {2.0f, 1.5f, 1.0f, 0.2f, -0.5f};
    for (int i = 0; i < 5; i++)
        l[ids[i]] = lv[i];
    struct {
        ifl_sampling p;
        int kept; /* the first `kept` of ids */
    } cases[] = {
        {{.temperature = 1, .top_p = 1, .min_p = 0.3f}, 3},
        {{.temperature = 1, .top_p = 1, .min_p = 0.1f}, 4},
        {{.temperature = 1, .top_p = 1, .min_p = 1.0f}, 1},
        {{.temperature = 1, .top_p = 1, .min_p = 0.0f}, 5},
        {{.temperature = 2, .top_p = 1, .min_p = 0.25f}, 5}, /* T 2: ratios ^0.5: e^-1.25 = 0.29 */
        {{.temperature = 1, .top_k = 2, .top_p = 1, .min_p = 0.3f}, 2}, /* top_k shorter */
        {{.temperature = 1, .top_k = 4, .top_p = 1, .min_p = 0.3f}, 3}, /* min_p shorter */
        /* top_p over what min_p left: masses 1, .61, .37 (total 1.97): 0.8 of it needs two;
         * without min_p (total 2.22) 0.8 needs three */
        {{.temperature = 1, .top_p = 0.8f, .min_p = 0.3f}, 2},
        {{.temperature = 1, .top_p = 0.8f}, 3},
        {{.temperature = 0, .top_p = 1, .min_p = 0.9f}, 1}, /* greedy ignores min_p */
    };
    /* quick (valgrind, 285 s at the full grids): a tenth of the draws; the planted tokens are
     * still hit (the least likely kept one has 1/28 of the mass), and the random rows' "missed"
     * bound scales with the grid */
    const int planted_grid = test_quick() ? 2000 : 20000, random_grid = test_quick() ? 5000 : 50000;
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        int n = drawn_set(s, l, &cases[c].p, planted_grid, hit), inside = 0;
        for (int i = 0; i < cases[c].kept; i++)
            inside += hit[ids[i]];
        CHECKF(n == cases[c].kept && inside == n,
               "min_p case %zu (T %g, top_k %d, top_p %g, min_p %g): %d tokens drawn, %d of the "
               "%d expected",
               c, (double)cases[c].p.temperature, cases[c].p.top_k, (double)cases[c].p.top_p,
               (double)cases[c].p.min_p, n, inside, cases[c].kept);
    }
    /* random logits: every drawn token is in the reference's kept set, and every kept token
     * likely enough to be hit by the grid was */
    static const float mins[] = {0.02f, 0.1f, 0.5f};
    for (int r = 0; r < 6; r++) {
        for (int i = 0; i < V; i++)
            l[i] = (float)(2.0 * ifl_rng_normal(rng));
        ifl_sampling p = {.temperature = r % 2 ? 0.7f : 1.3f, .top_p = 1, .min_p = mins[r % 3]};
        int n = drawn_set(s, l, &p, random_grid, hit);
        double mx = -1e30, z = 0;
        for (int i = 0; i < V; i++)
            mx = l[i] > mx ? l[i] : mx;
        for (int i = 0; i < V; i++) {
            double ratio = exp(((double)l[i] - mx) / p.temperature);
            z += ratio >= p.min_p ? ratio : 0;
        }
        int bad = 0, missed = 0, kept = 0;
        for (int i = 0; i < V; i++) {
            double ratio = exp(((double)l[i] - mx) / p.temperature);
            int in = ratio >= p.min_p * (1 + 1e-5), out = ratio < p.min_p * (1 - 1e-5);
            kept += in;
            bad += hit[i] && out;
            missed += in && !hit[i] && ratio / z > 2.0 / random_grid;
        }
        CHECKF(bad == 0 && missed == 0,
               "min_p %g, T %g: %d drawn (%d kept by the reference): %d outside, %d missed",
               (double)p.min_p, (double)p.temperature, n, kept, bad, missed);
    }
    printf("min_p: planted cases and random rows match the float64 reference's kept set\n");
}

int main(void)
{
    test_select_isa("test_sampler");
    test_philox();
    ifl_sampler s;
    ifl_err err;
    if (ifl_sampler_init(&s, V, &err)) {
        fprintf(stderr, "%s\n", err.msg);
        return 1;
    }
    float logits[V];
    ifl_rng rng;
    ifl_rng_seed(&rng, 1);
    for (int i = 0; i < V; i++)
        logits[i] = (float)ifl_rng_normal(&rng);
    int best = 0;
    for (int i = 1; i < V; i++)
        if (logits[i] > logits[best])
            best = i;
    ifl_sampling greedy = {.temperature = 0, .top_k = 0, .top_p = 1};
    CHECK(ifl_sample(&s, logits, &greedy, &rng) == best);
    ifl_sampling k1 = {.temperature = 1, .top_k = 1, .top_p = 1};
    CHECK(ifl_sample(&s, logits, &k1, &rng) == best);
    float tie[V] = {0};
    tie[7] = tie[3] = 2.0f;
    CHECK(ifl_sample(&s, tie, &greedy, &rng) == 3);

    /* Frequencies: 5 tokens with known probabilities at temperature 0.7. */
    float small[V];
    for (int i = 0; i < V; i++)
        small[i] = -1e9f;
    float l5[5] = {1.0f, 0.5f, 0.0f, -0.5f, 2.0f};
    for (int i = 0; i < 5; i++)
        small[100 + i] = l5[i];
    double p[5], z = 0;
    for (int i = 0; i < 5; i++)
        z += p[i] = exp(l5[i] / 0.7);
    ifl_sampling t07 = {.temperature = 0.7f, .top_k = 0, .top_p = 1};
    int counts[5] = {0}, outside = 0, N = test_quick() ? 20000 : 200000;
    for (int d = 0; d < N; d++) {
        int id = ifl_sample(&s, small, &t07, &rng);
        if (id >= 100 && id < 105)
            counts[id - 100]++;
        else
            outside++;
    }
    double chi2 = 0;
    for (int i = 0; i < 5; i++) {
        double e = N * p[i] / z;
        chi2 += (counts[i] - e) * (counts[i] - e) / e;
    }
    /* 4 degrees of freedom: P(chi2 > 25) ~ 5e-5 */
    CHECKF(chi2 < 25 && outside == 0, "chi-square %.2f, %d draws outside the support", chi2,
           outside);
    printf("temperature 0.7 over 5 tokens, %d draws: chi-square %.2f (4 dof)\n", N, chi2);

    /* top-k: only the k best ever appear. */
    ifl_sampling topk = {.temperature = 1.5f, .top_k = 3, .top_p = 1};
    int seen_bad = 0;
    for (int d = 0; d < 5000; d++) {
        int id = ifl_sample(&s, small, &topk, &rng);
        seen_bad += !(id == 104 || id == 100 || id == 101);
    }
    CHECKF(seen_bad == 0, "top-k 3 drew %d tokens outside the top 3", seen_bad);

    /* top-p: probabilities 0.5, 0.3, 0.15, 0.05 -> top_p 0.7 keeps the first two, 0.8 (exactly the
     * sum of two) keeps two, 0.81 keeps three. */
    float q[V];
    for (int i = 0; i < V; i++)
        q[i] = -1e9f;
    q[10] = logf(0.5f);
    q[20] = logf(0.3f);
    q[30] = logf(0.15f);
    q[40] = logf(0.05f);
    struct {
        float top_p;
        int allowed;
    } pc[] = {{0.7f, 2}, {0.79f, 2}, {0.81f, 3}, {0.3f, 1}, {1.0f, 4}};
    for (size_t c = 0; c < sizeof pc / sizeof pc[0]; c++) {
        ifl_sampling tp = {.temperature = 1, .top_k = 0, .top_p = pc[c].top_p};
        int hit[4] = {0};
        for (int d = 0; d < (test_quick() ? 2000 : 20000); d++) {
            int id = ifl_sample(&s, q, &tp, &rng);
            CHECK(id == 10 || id == 20 || id == 30 || id == 40);
            hit[id / 10 - 1]++;
        }
        int used = 0;
        for (int i = 0; i < 4; i++)
            used += hit[i] > 0;
        CHECKF(used == pc[c].allowed, "top_p %.2f: %d tokens drawn, want %d", pc[c].top_p, used,
               pc[c].allowed);
    }
    /* top-p over a large vocabulary goes through the threshold prefilter: same support as a sort.
     */
    {
        ifl_sampler big;
        int32_t BV = 50257;
        ifl_sampler_init(&big, BV, &err);
        float *bl = malloc((size_t)BV * sizeof *bl);
        for (int i = 0; i < BV; i++)
            bl[i] = (float)ifl_rng_normal(&rng) * 3;
        ifl_sampling tp = {.temperature = 1, .top_k = 0, .top_p = 0.9f};
        for (int d = 0; d < (test_quick() ? 20 : 200); d++) {
            int id = ifl_sample(&big, bl, &tp, &rng);
            /* every drawn id must have probability at least the nucleus's smallest: check that the
             * mass of strictly larger logits is below top_p */
            double zz = 0, above = 0;
            float mx = -1e30f;
            for (int i = 0; i < BV; i++)
                mx = bl[i] > mx ? bl[i] : mx;
            for (int i = 0; i < BV; i++) {
                double e = exp((double)bl[i] - mx);
                zz += e;
                if (bl[i] > bl[id])
                    above += e;
            }
            CHECKF(above / zz < 0.9 + 1e-6, "drew id %d outside the 0.9 nucleus (mass above %.4f)",
                   id, above / zz);
        }
        free(bl);
        ifl_sampler_free(&big);
    }

    /* Seeds: reproducible, and different seeds differ. */
    ifl_sampling samp = {.temperature = 0.8f, .top_k = 40, .top_p = 0.95f};
    int a[64], b[64], c2[64];
    ifl_rng r1, r2, r3;
    ifl_rng_seed(&r1, 7);
    ifl_rng_seed(&r2, 7);
    ifl_rng_seed(&r3, 8);
    for (int i = 0; i < 64; i++) {
        a[i] = ifl_sample(&s, logits, &samp, &r1);
        b[i] = ifl_sample(&s, logits, &samp, &r2);
        c2[i] = ifl_sample(&s, logits, &samp, &r3);
    }
    CHECK(!memcmp(a, b, sizeof a));
    CHECK(memcmp(a, c2, sizeof a) != 0);
    test_min_p(&s, &rng);

    /* Validation */
    ifl_sampling badp[] = {{-1, 0, 1, 0},    {0.5f, -2, 1, 0},    {0.5f, 0, 0, 0},
                           {0.5f, 0, 1.5f, 0}, {1e9f, 0, 1, 0},     {0.5f, 0, 1, -0.1f},
                           {0.5f, 0, 1, 1.5f}, {0.5f, 0, 1, NAN}};
    for (size_t i = 0; i < sizeof badp / sizeof badp[0]; i++) {
        CHECK(ifl_sampling_validate(&badp[i], &err) != 0);
        printf("rejected: %s\n", err.msg);
    }
    ifl_sampler_free(&s);

    /* KV pool accounting */
    ifl_kv_pool pool;
    CHECK(ifl_kv_pool_init(&pool, 10, 4, &err) == 0);
    ifl_kv_seq x = {0}, y = {0};
    CHECK(ifl_kv_seq_reserve(&x, &pool, 9) == 0 && x.n_blocks == 3); /* 9 tokens: 3 blocks */
    CHECK(ifl_kv_seq_reserve(&x, &pool, 12) == 0 && x.n_blocks == 3);
    CHECK(ifl_kv_seq_reserve(&y, &pool, 29) == -1 && y.n_blocks == 0); /* 8 blocks, 7 free */
    CHECK(ifl_kv_seq_reserve(&y, &pool, 28) == 0 && y.n_blocks == 7);
    CHECK(ifl_kv_pool_used(&pool) == 10);
    CHECK(ifl_kv_seq_reserve(&x, &pool, 13) == -1 && x.n_blocks == 3); /* full: nothing changes */
    CHECK(ifl_kv_pool_used(&pool) == 10);
    ifl_kv_seq_release(&y, &pool);
    CHECK(ifl_kv_pool_used(&pool) == 3);
    CHECK(ifl_kv_seq_reserve(&x, &pool, 40) == 0 && x.n_blocks == 10);
    int dup = 0;
    for (int i = 0; i < 10; i++)
        for (int j = i + 1; j < 10; j++)
            dup += x.blocks[i] == x.blocks[j];
    CHECK(dup == 0);
    ifl_kv_seq_free(&x, &pool);
    ifl_kv_seq_free(&y, &pool);
    CHECK(ifl_kv_pool_used(&pool) == 0);
    ifl_kv_pool_free(&pool);
    CHECK(ifl_kv_pool_init(&pool, 0, 4, &err) != 0);
    return test_finish("test_sampler");
}
