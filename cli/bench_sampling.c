/* bench_sampling.c: the sampler's measurements in `inflight bench --engine` (cmd_bench.c): one
 * draw per mode over a row of V logits, and a batch-64 step's sampling with the logit controls
 * off and on, on one thread, with no model: what a step adds on top of the forward pass. */
#include <stdio.h>
#include <stdlib.h>

#include "backend.h"
#include "bench_report.h"
#include "bench_sampling.h"
#include "logit_adj.h"
#include "rng.h"
#include "sampler.h"
#include "util.h"

/* The sampler alone over one row of V logits (normal, sd 3, like a trained model's spread): mean
 * microseconds per draw for greedy, top-k 40, top-p 0.95, and both (temperature 0.8), printed. */
int bench_sampler(int32_t V, ifl_err *err)
{
    static const struct {
        const char *name;
        ifl_sampling p;
    } modes[] = {{"greedy", {.temperature = 0, .top_p = 1}},
                 {"top-k 40", {.temperature = 0.8f, .top_k = 40, .top_p = 1}},
                 {"top-p 0.95", {.temperature = 0.8f, .top_p = 0.95f}},
                 {"top-k 40 + top-p 0.95", {.temperature = 0.8f, .top_k = 40, .top_p = 0.95f}}};
    float *logits = malloc((size_t)V * sizeof *logits);
    ifl_sampler smp = {0};
    if (!logits || ifl_sampler_init(&smp, V, err)) {
        free(logits);
        return logits ? -1 : ifl_err_set(err, "out of memory");
    }
    ifl_rng rng;
    ifl_rng_seed(&rng, 7);
    for (int32_t i = 0; i < V; i++)
        logits[i] = (float)(3.0 * ifl_rng_normal(&rng));
    printf("  sampler over %d logits (us per draw):", V);
    for (size_t m = 0; m < sizeof modes / sizeof modes[0]; m++) {
        const int reps = 200;
        double t = ifl_now_s();
        for (int r = 0; r < reps; r++) /* another translation unit: not optimised away */
            (void)ifl_sample_u(&smp, logits, &modes[m].p, (r + 0.5) / reps);
        t = ifl_now_s() - t;
        printf("%s %s %.1f", m ? "," : "", modes[m].name, t / reps * 1e6);
    }
    printf("\n");
    ifl_sampler_free(&smp);
    free(logits);
    return 0;
}

/* One decode step's sampling at batch BATCH_CTL, on one thread (the CPU backend spreads rows over
 * its pool), with the controls off and with every control on as a chat request has them: a
 * 500-token prompt and 250 generated tokens seen (repetition, presence and frequency penalties),
 * 50 logit_bias entries, 3 bans, min_p 0.05; top_k 50 and top_p 0.9 in both. The penalties touch
 * only the seen ids, so the two should be within ~10%. Steps alternate off / on; the medians. */
#define BATCH_CTL 64
#define CTL_REPS 15
typedef struct {
    ifl_seen seen;
    ifl_logit_bias bias[50];
    int32_t ban[3];
    ifl_logit_adj adj;
    ifl_logit_op ops[50 + 750 + 3]; /* what the adjustments touch: restored after each step */
    int32_t n_ops;
} ctl_row;

static int ctl_rows_init(ctl_row *c, int32_t V, ifl_rng *rng, ifl_err *err)
{
    for (int s = 0; s < BATCH_CTL; s++) {
        ctl_row *r = &c[s];
        if (ifl_seen_init(&r->seen, 750, err))
            return -1;
        for (int i = 0; i < 750; i++)
            ifl_seen_add(&r->seen, (int32_t)(ifl_rng_next(rng) % (uint64_t)V), i >= 500);
        for (int i = 0; i < 50; i++)
            r->bias[i] = (ifl_logit_bias){(int32_t)((i * 1009 + s) % V), (float)(i % 9) - 4.0f};
        for (int i = 0; i < 3; i++)
            r->ban[i] = (int32_t)(ifl_rng_next(rng) % (uint64_t)V);
        r->adj = (ifl_logit_adj){.pen = {.repetition = 1.1f, .presence = 0.5f, .frequency = 0.3f},
                                 .seen = &r->seen,
                                 .bias = r->bias,
                                 .n_bias = 50,
                                 .ban = r->ban,
                                 .n_ban = 3};
        r->n_ops = ifl_logit_adj_ops(&r->adj, r->ops);
    }
    return 0;
}

/* Seconds of one step's draws over rows (BATCH_CTL x V, restored from clean afterwards). */
static double ctl_step(ifl_sampler *smp, float *rows, const float *clean, int32_t V,
                       const ifl_sampling *p, const ctl_row *c, int rep)
{
    double t = ifl_now_s();
    for (int s = 0; s < BATCH_CTL; s++) {
        ifl_sample_req q = {.sampling = *p,
                            .seed = (uint64_t)s,
                            .draw = (uint64_t)rep,
                            .active = 1,
                            .adj = c ? &c[s].adj : NULL};
        (void)ifl_backend_draw(smp, rows + (size_t)s * V, &q);
    }
    t = ifl_now_s() - t;
    for (int s = 0; c && s < BATCH_CTL; s++)
        for (int32_t i = 0; i < c[s].n_ops; i++) {
            size_t at = (size_t)s * V + (size_t)c[s].ops[i].id;
            rows[at] = clean[at];
        }
    return t;
}

int bench_sampler_controls(int32_t V, ifl_err *err)
{
    size_t n = (size_t)BATCH_CTL * V;
    float *rows = malloc(n * sizeof *rows), *clean = malloc(n * sizeof *clean);
    ctl_row *c = calloc(BATCH_CTL, sizeof *c);
    ifl_sampler smp = {0};
    ifl_rng rng;
    ifl_rng_seed(&rng, 11);
    int rc = -1;
    if (!rows || !clean || !c) {
        ifl_err_set(err, "out of memory for %d rows of %d logits", BATCH_CTL, V);
        goto out;
    }
    if (ifl_sampler_init(&smp, V, err) || ctl_rows_init(c, V, &rng, err))
        goto out;
    for (size_t i = 0; i < n; i++)
        clean[i] = rows[i] = (float)(3.0 * ifl_rng_normal(&rng));
    const ifl_sampling off = {.temperature = 0.8f, .top_k = 50, .top_p = 0.9f},
                       on = {.temperature = 0.8f, .top_k = 50, .top_p = 0.9f, .min_p = 0.05f};
    double t_off[CTL_REPS], t_on[CTL_REPS];
    for (int r = 0; r < CTL_REPS; r++) {
        t_off[r] = ctl_step(&smp, rows, clean, V, &off, NULL, r);
        t_on[r] = ctl_step(&smp, rows, clean, V, &on, c, r);
    }
    bench_sort(t_off, (size_t)CTL_REPS);
    bench_sort(t_on, (size_t)CTL_REPS);
    double m_off = t_off[CTL_REPS / 2] * 1e6, m_on = t_on[CTL_REPS / 2] * 1e6;
    printf("  sampling a batch-%d step on one thread (top_k 50, top_p 0.9; us per step): controls "
           "off %.0f, every control on %.0f (500 + 250 seen, 50 logit_bias, 3 bans, all penalties, "
           "min_p 0.05): ratio %.3f\n",
           BATCH_CTL, m_off, m_on, m_on / m_off);
    rc = 0;
out:
    for (int s = 0; c && s < BATCH_CTL; s++)
        ifl_seen_free(&c[s].seen);
    ifl_sampler_free(&smp);
    free(c);
    free(rows);
    free(clean);
    return rc;
}
