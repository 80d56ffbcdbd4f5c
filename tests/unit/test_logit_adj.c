/* test_logit_adj.c: a row's logit adjustments (engine/logit_adj.h) against an independent float64
 * reference of vLLM's formulas (bias, then repetition over prompt and generated tokens, then
 * frequency x count + presence over generated tokens, then bans): random logits and random
 * prompt / generated histories, every control alone and all together; the adjusted tokens within
 * float rounding of the reference, every other token unchanged bit for bit; the ops a device
 * uploads give the same row bit for bit; the seen record's counts; min_p after the adjustments
 * against the reference's kept set; validation messages naming the field and the value. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "logit_adj.h"
#include "rng.h"
#include "sampler.h"
#include "testutil.h"

#define V 5000

typedef struct {
    int32_t prompt[400], gen[300];
    int32_t n_prompt, n_gen;
    ifl_logit_bias bias[IFL_MAX_LOGIT_BIAS];
    int32_t n_bias;
    int32_t ban[IFL_MAX_STOP_IDS + 1];
    int32_t n_ban;
    ifl_penalties pen;
} history;

/* ids drawn from a small range, so that tokens repeat as in text */
static int32_t rand_id(ifl_rng *rng, int32_t range)
{
    return (int32_t)(ifl_rng_next(rng) % (uint64_t)range);
}

static void make_history(history *h, ifl_rng *rng, int bias, int ban, ifl_penalties pen)
{
    memset(h, 0, sizeof *h);
    h->n_prompt = 100 + rand_id(rng, 300);
    h->n_gen = rand_id(rng, 300);
    for (int32_t i = 0; i < h->n_prompt; i++)
        h->prompt[i] = rand_id(rng, 600);
    for (int32_t i = 0; i < h->n_gen; i++)
        h->gen[i] = 300 + rand_id(rng, 600); /* overlaps the prompt's ids in [300, 600) */
    if (bias) {
        h->n_bias = 50 + rand_id(rng, 250);
        for (int32_t i = 0; i < h->n_bias; i++) /* distinct ids, some seen, some not */
            h->bias[i] = (ifl_logit_bias){.id = (int32_t)((i * 37 + 11) % V),
                                          .bias = (float)(200.0 * ifl_rng_uniform(rng) - 100.0)};
    }
    if (ban) {
        h->n_ban = 1 + rand_id(rng, IFL_MAX_STOP_IDS);
        for (int32_t i = 0; i < h->n_ban; i++)
            h->ban[i] = rand_id(rng, V);
    }
    h->pen = pen;
}

/* The float64 reference of one token's adjusted logit. */
static double reference(const history *h, int32_t id, double z)
{
    for (int32_t i = 0; i < h->n_bias; i++)
        if (h->bias[i].id == id)
            z += h->bias[i].bias;
    int in_prompt = 0, count = 0;
    for (int32_t i = 0; i < h->n_prompt; i++)
        in_prompt |= h->prompt[i] == id;
    for (int32_t i = 0; i < h->n_gen; i++)
        count += h->gen[i] == id;
    double r = h->pen.repetition;
    if (r != 0 && r != 1 && (in_prompt || count > 0))
        z = z > 0 ? z / r : z * r;
    z -= (double)h->pen.frequency * count + (count > 0 ? (double)h->pen.presence : 0.0);
    for (int32_t i = 0; i < h->n_ban; i++)
        if (h->ban[i] == id)
            z = -INFINITY;
    return z;
}

/* The engine's record and adjustments for h (the seen tokens as the batcher keeps them). */
static void engine_adj(const history *h, ifl_seen *seen, ifl_logit_adj *a)
{
    ifl_err err;
    CHECK(ifl_seen_init(seen, h->n_prompt + h->n_gen, &err) == 0);
    for (int32_t i = 0; ifl_repetition_on(&h->pen) && i < h->n_prompt; i++)
        ifl_seen_add(seen, h->prompt[i], 0);
    for (int32_t i = 0; i < h->n_gen; i++)
        ifl_seen_add(seen, h->gen[i], 1);
    *a = (ifl_logit_adj){.pen = h->pen,
                         .seen = ifl_penalties_on(&h->pen) ? seen : NULL,
                         .bias = h->bias,
                         .n_bias = h->n_bias,
                         .ban = h->ban,
                         .n_ban = h->n_ban};
}

static ifl_logit_op ops_buf[IFL_MAX_LOGIT_BIAS + 400 + 300 + IFL_MAX_STOP_IDS + 1];

/* One history: the row adjusted in place against the reference, token by token; the ops give
 * the same row bit for bit. Returns how many tokens changed. */
static int check_case(const char *what, const history *h, ifl_rng *rng, int print)
{
    static float before[V], after[V], via_ops[V];
    for (int32_t i = 0; i < V; i++)
        before[i] = (float)(3.0 * ifl_rng_normal(rng));
    before[h->n_prompt > 0 ? h->prompt[0] : 0] = 0.0f; /* a zero logit: z > 0 is false */
    memcpy(after, before, sizeof after);
    memcpy(via_ops, before, sizeof via_ops);
    ifl_seen seen;
    ifl_logit_adj a;
    engine_adj(h, &seen, &a);
    ifl_logit_adj_apply(after, &a);
    int32_t n_ops = ifl_logit_adj_ops(&a, ops_buf);
    CHECK(n_ops == ifl_logit_adj_n_ops(&a));
    for (int phase = 0; phase < IFL_LOGIT_PHASES; phase++)
        for (int32_t i = 0; i < n_ops; i++)
            if (ops_buf[i].phase == phase)
                via_ops[ops_buf[i].id] = ifl_logit_op_apply(via_ops[ops_buf[i].id], &ops_buf[i]);
    int changed = 0, bad = 0, printed = 0;
    for (int32_t id = 0; id < V; id++) {
        double want = reference(h, id, before[id]);
        int same_bits = !memcmp(&after[id], &before[id], sizeof(float));
        if (want == (double)before[id]) {
            bad += !same_bits; /* untouched: bit for bit */
            continue;
        }
        changed++;
        double tol = 1e-6 * (fabs(want) + 1.0);
        int ok = isinf(want) ? after[id] == -INFINITY : fabs((double)after[id] - want) <= tol;
        bad += !ok;
        if ((print && printed < 3) || !ok) {
            printf("  %s: token %d: %.6f -> %.6f (reference %.6f)\n", what, id, (double)before[id],
                   (double)after[id], want);
            printed++;
        }
    }
    CHECKF(bad == 0, "%s: %d tokens differ from the reference", what, bad);
    CHECKF(!memcmp(after, via_ops, sizeof after), "%s: the ops give another row than the apply",
           what);
    ifl_seen_free(&seen);
    return changed;
}

static void test_against_reference(ifl_rng *rng)
{
    static const struct {
        const char *name;
        int bias, ban;
        ifl_penalties pen;
    } cases[] = {
        {"logit_bias", 1, 0, {.repetition = 0}},
        {"repetition 1.3", 0, 0, {.repetition = 1.3f}},
        {"repetition 0.7", 0, 0, {.repetition = 0.7f}},
        {"presence 0.8", 0, 0, {.presence = 0.8f}},
        {"frequency -0.6", 0, 0, {.frequency = -0.6f}},
        {"bans", 0, 1, {.repetition = 0}},
        {"everything", 1, 1, {.repetition = 1.2f, .presence = 0.5f, .frequency = 0.3f}},
        {"everything, negative", 1, 1, {.repetition = 0.9f, .presence = -1.5f, .frequency = 2.0f}},
        {"off (repetition 1)", 0, 0, {.repetition = 1.0f}},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        int changed = 0;
        for (int rep = 0; rep < 4; rep++) {
            history h;
            make_history(&h, rng, cases[c].bias, cases[c].ban, cases[c].pen);
            changed += check_case(cases[c].name, &h, rng, rep == 0);
        }
        int off = c + 1 == sizeof cases / sizeof cases[0];
        CHECKF(off ? changed == 0 : changed > 0, "%s: %d tokens changed", cases[c].name, changed);
        printf("%-22s %5d tokens changed over 4 histories, all as the reference\n", cases[c].name,
               changed);
    }
}

/* The seen record's counts against a count by hand, as tokens arrive one by one. */
static void test_seen(ifl_rng *rng)
{
    ifl_seen s;
    ifl_err err;
    CHECK(ifl_seen_init(&s, 700, &err) == 0);
    int count[1000] = {0}, prompt[1000] = {0};
    for (int i = 0; i < 400; i++) {
        int32_t id = rand_id(rng, 1000);
        ifl_seen_add(&s, id, 0);
        prompt[id] = 1;
    }
    int bad = 0;
    for (int i = 0; i < 300; i++) {
        int32_t id = rand_id(rng, 1000);
        ifl_seen_add(&s, id, 1);
        count[id]++;
        const ifl_seen_tok *t = ifl_seen_find(&s, id);
        bad += !t || t->count != count[id] || t->in_prompt != prompt[id];
    }
    int distinct = 0;
    for (int id = 0; id < 1000; id++) {
        const ifl_seen_tok *t = ifl_seen_find(&s, id);
        int seen = count[id] || prompt[id];
        distinct += seen;
        bad += seen ? !t || t->count != count[id] || t->in_prompt != prompt[id] : t != NULL;
    }
    CHECKF(bad == 0 && s.n == distinct, "seen: %d wrong entries, %d recorded, %d distinct", bad,
           s.n, distinct);
    ifl_seen_free(&s);
    ifl_seen_free(&s); /* freeing twice (a zeroed record) is fine */
}

/* min_p after every control: the drawn tokens are the reference's kept set over the reference's
 * adjusted logits (a banned token never). */
static void test_min_p_after(ifl_rng *rng)
{
    static float row[V], work[V];
    static double ref[V];
    ifl_sampler smp;
    ifl_err err;
    CHECK(ifl_sampler_init(&smp, V, &err) == 0);
    history h;
    make_history(&h, rng, 1, 1, (ifl_penalties){.repetition = 1.3f, .presence = 1, .frequency = 1});
    for (int32_t i = 0; i < V; i++)
        row[i] = (float)(2.0 * ifl_rng_normal(rng));
    h.bias[0] = (ifl_logit_bias){.id = h.ban[0], .bias = 100}; /* the best, but banned */
    double mx = -INFINITY;
    for (int32_t i = 0; i < V; i++) {
        ref[i] = reference(&h, i, row[i]);
        mx = ref[i] > mx ? ref[i] : mx;
    }
    ifl_seen seen;
    ifl_logit_adj a;
    engine_adj(&h, &seen, &a);
    ifl_logit_adj_apply(row, &a);
    ifl_sampling p = {.temperature = 0.9f, .top_p = 1, .min_p = 0.05f};
    int bad = 0, kept = 0, n = 20000;
    static int hit[V];
    memset(hit, 0, sizeof hit);
    for (int j = 0; j < n; j++) {
        memcpy(work, row, sizeof work);
        hit[ifl_sample_u(&smp, work, &p, (j + 0.5) / n)] = 1;
    }
    for (int32_t i = 0; i < V; i++) {
        double ratio = exp((ref[i] - mx) / p.temperature);
        int in = ratio >= p.min_p * (1 + 1e-5), out = ratio < p.min_p * (1 - 1e-5);
        kept += in;
        bad += (hit[i] && out) || (in && !hit[i] && ratio > 0.2);
    }
    CHECKF(bad == 0 && kept > 1, "min_p after the controls: %d tokens wrong (%d kept)", bad, kept);
    printf("min_p 0.05 after every control: %d tokens kept, as the reference\n", kept);
    ifl_seen_free(&seen);
    ifl_sampler_free(&smp);
}

static void expect_refusal(int rc, const ifl_err *err, const char *must_contain)
{
    CHECKF(rc != 0 && strstr(err->msg, must_contain), "want a refusal naming '%s', got rc %d: %s",
           must_contain, rc, rc ? err->msg : "(accepted)");
    if (rc)
        printf("rejected: %s\n", err->msg);
}

static void test_validation(void)
{
    ifl_err err;
    ifl_penalties ok = {.repetition = 1.1f, .presence = -2, .frequency = 2};
    CHECK(ifl_penalties_validate(&ok, &err) == 0);
    ifl_penalties zero = {0};
    CHECK(ifl_penalties_validate(&zero, &err) == 0);
    ifl_penalties bad_r = {.repetition = -0.5f}, bad_p = {.presence = 2.5f},
                  bad_f = {.frequency = NAN};
    expect_refusal(ifl_penalties_validate(&bad_r, &err), &err, "repetition_penalty -0.5");
    expect_refusal(ifl_penalties_validate(&bad_p, &err), &err, "presence_penalty 2.5");
    expect_refusal(ifl_penalties_validate(&bad_f, &err), &err, "frequency_penalty nan");
    ifl_logit_bias b[3] = {{1, 5}, {2, -100}, {3, 100}};
    CHECK(ifl_logit_bias_validate(b, 3, V, &err) == 0);
    CHECK(ifl_logit_bias_validate(NULL, 0, V, &err) == 0);
    b[1].id = V;
    expect_refusal(ifl_logit_bias_validate(b, 3, V, &err), &err, "token id 5000");
    b[1] = (ifl_logit_bias){2, 100.5f};
    expect_refusal(ifl_logit_bias_validate(b, 3, V, &err), &err, "bias 100.5");
    b[1] = (ifl_logit_bias){3, 1};
    expect_refusal(ifl_logit_bias_validate(b, 3, V, &err), &err, "token id 3 appears twice");
    expect_refusal(ifl_logit_bias_validate(b, IFL_MAX_LOGIT_BIAS + 1, V, &err), &err,
                   "logit_bias has 301 entries");
    int32_t stops[IFL_MAX_STOP_IDS + 1] = {5, 7, -1};
    CHECK(ifl_stop_ids_validate(stops, 2, V, &err) == 0);
    expect_refusal(ifl_stop_ids_validate(stops, 3, V, &err), &err, "stop_token_ids entry 2 is -1");
    expect_refusal(ifl_stop_ids_validate(stops, IFL_MAX_STOP_IDS + 1, V, &err), &err,
                   "stop_token_ids has 17 ids");
    CHECK(ifl_min_tokens_validate(0, 1, &err) == 0 && ifl_min_tokens_validate(5, 5, &err) == 0);
    expect_refusal(ifl_min_tokens_validate(-1, 5, &err), &err, "min_tokens -1");
    expect_refusal(ifl_min_tokens_validate(6, 5, &err), &err, "min_tokens 6 exceeds max_tokens 5");
}

int main(void)
{
    ifl_rng rng;
    ifl_rng_seed(&rng, 48);
    test_against_reference(&rng);
    test_seen(&rng);
    test_min_p_after(&rng);
    test_validation();
    return test_finish("test_logit_adj");
}
