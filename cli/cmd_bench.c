/* cmd_bench.c: `inflight bench --engine`: decode throughput at several batch sizes and prefill
 * throughput of the engine alone (no scheduler, no sockets), on a given model or on a random
 * GPT-2-124M-shaped one made (once) for the purpose. */
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "bench_report.h"
#include "bench_sampling.h"
#include "cli.h"
#include "cpu_kernels.h"
#include "defaults.h"
#include "kv.h"
#include "logit_adj.h"
#include "make_model.h"
#include "rng.h"
#include "sampler.h"
#include "runtime.h"
#include "threadpool.h"
#include "util.h"

static const char *const USAGE =
    "usage: inflight bench --engine [options]\n"
    "\n"
    "Measures the engine: decode tok/s with B sequences stepping together (each with an 8-token\n"
    "prompt), and the time of one long prefill. Greedy sampling is included in decode steps.\n"
    "\n";

#define BENCH_PROMPT 8

/* The probes between slices of a decode round's timed steps (CPU). Every `every` steps the clock
 * stops for the read-bandwidth and FMA probes (slice_probe), and the steps that follow are set
 * against what those read: this host's bandwidth and FMA rate swing by a quarter to a half within
 * seconds (docs/perf.md), so probes taken once before a round let the drift during it land on the
 * ratios, in either direction (rounds at 54% and at 118% of the floor in one run, 2026-12-05). The
 * sums are over the round's timed steps. */
typedef struct {
    ifl_threadpool *tp;
    const ifl_read_probe *rd;
    int32_t every;          /* steps per slice */
    double step_bytes;      /* the memory floor's bytes of one step (weights + KV) */
    double step_flops;      /* the FMAs' FLOPs of one step */
    double gbs, peak;       /* the current slice's probes */
    double floor_s, peak_s; /* the steps' time at the probed bandwidth, at the probed peak */
    double gbs_lo, gbs_hi;  /* the range of the slices' bandwidth */
} slice_probes;

/* Each probe twice, at the start of a slice, the faster pass kept: a pass is short (8-20 ms of
 * reading, 7 of FMAs), so one slowed by an interruption would set the slice's steps against a
 * floor or a peak too low; the best of two errs the other way, against the steps. */
static void slice_probe(slice_probes *sp)
{
    sp->gbs = ifl_read_probe_gbs(sp->tp, sp->rd, 2);
    sp->peak = ifl_fma_peak_gflops(sp->tp, NULL, 2);
    sp->gbs_lo = sp->gbs_lo == 0 || sp->gbs < sp->gbs_lo ? sp->gbs : sp->gbs_lo;
    sp->gbs_hi = sp->gbs > sp->gbs_hi ? sp->gbs : sp->gbs_hi;
}

/* Decode benchmark at batch B; returns seconds per step (the probes' time left out). sp: NULL, or
 * the probes to run between slices of the timed steps. */
/* The buffers of a decode measurement: B sequences of KV, their token ids and the step's batch. */
typedef struct {
    int32_t B;
    ifl_kv_pool pool;
    ifl_kv_seq *seqs;
    int32_t *tokens, *run_start, *pos0, *nblk, *next;
    const int32_t **tables;
    float *logits;
    ifl_sample_req *greedy;
    ifl_logprob *lp; /* (B) with_lp: each drawn token's entry */
    int32_t lp_top;  /* with_lp: its best tokens */
    int with_lp;
    ifl_sampler sampler;
} decode_run;

static void decode_run_free(decode_run *r)
{
    if (r->seqs)
        for (int32_t s = 0; s < r->B; s++)
            ifl_kv_seq_free(&r->seqs[s], &r->pool);
    ifl_kv_pool_free(&r->pool);
    free(r->seqs);
    free(r->tokens);
    free(r->run_start);
    free(r->pos0);
    free(r->nblk);
    free(r->tables);
    free(r->logits);
    free(r->next);
    free(r->greedy);
    free(r->lp);
    ifl_sampler_free(&r->sampler);
}

/* B sequences with room for total tokens each, their random prompts and greedy sampling; -1 with
 * err (r then freed by the caller). */
static int decode_run_init(decode_run *r, ifl_backend *be, int32_t B, int32_t total, ifl_err *err)
{
    const ifl_config *c = &be->model->cfg;
    r->B = B;
    r->seqs = calloc((size_t)B, sizeof *r->seqs);
    r->tokens = malloc((size_t)B * BENCH_PROMPT * sizeof *r->tokens);
    r->run_start = malloc((size_t)(B + 1) * sizeof *r->run_start);
    r->pos0 = malloc((size_t)B * sizeof *r->pos0);
    r->nblk = malloc((size_t)B * sizeof *r->nblk);
    r->tables = malloc((size_t)B * sizeof *r->tables);
    r->logits = malloc((size_t)B * c->n_vocab * sizeof *r->logits);
    r->next = malloc((size_t)B * sizeof *r->next);
    r->greedy = calloc((size_t)B, sizeof *r->greedy);
    r->lp = calloc((size_t)B, sizeof *r->lp);
    if (!r->seqs || !r->tokens || !r->run_start || !r->pos0 || !r->nblk || !r->tables ||
        !r->logits || !r->next || !r->greedy || !r->lp)
        return ifl_err_set(err, "out of memory");
    for (int32_t s = 0; s < B; s++)
        r->greedy[s] = (ifl_sample_req){.sampling = {.temperature = 0, .top_p = 1},
                                        .active = 1,
                                        .lp = r->with_lp ? &r->lp[s] : NULL,
                                        .n_top = r->lp_top};
    if (ifl_kv_pool_init(&r->pool, be->params.kv_blocks, be->params.kv_block_size, err) ||
        ifl_sampler_init(&r->sampler, c->n_vocab, err))
        return -1;
    ifl_rng rng;
    ifl_rng_seed(&rng, 42);
    for (int32_t s = 0; s < B; s++) {
        if (ifl_kv_seq_reserve(&r->seqs[s], &r->pool, total))
            return ifl_err_set(err, "KV pool too small for batch %d", B);
        r->tables[s] = r->seqs[s].blocks;
        r->nblk[s] = r->seqs[s].n_blocks;
        for (int32_t i = 0; i < BENCH_PROMPT; i++)
            r->tokens[s * BENCH_PROMPT + i] = (int32_t)(ifl_rng_next(&rng) % (uint64_t)c->n_vocab);
    }
    return 0;
}

/* One step over n sequences from s0, each with `each` tokens at position pos (r->tokens + s0 *
 * each); the sampled ids into r->next + s0. */
static int decode_run_step(ifl_backend *be, decode_run *r, int32_t s0, int32_t n, int32_t each,
                           int32_t pos, ifl_err *err)
{
    for (int32_t i = 0; i <= n; i++)
        r->run_start[i] = i * each;
    for (int32_t i = 0; i < n; i++)
        r->pos0[i] = pos;
    ifl_batch b = {.n_seqs = n,
                   .n_tokens = n * each,
                   .tokens = r->tokens + s0 * each,
                   .run_start = r->run_start,
                   .pos0 = r->pos0,
                   .block_tables = r->tables + s0,
                   .n_blocks = r->nblk + s0};
    return ifl_backend_step_sample(be, &b, r->greedy, r->next + s0, r->logits, &r->sampler, err);
}

static int bench_decode(ifl_backend *be, int32_t B, int32_t steps, slice_probes *sp,
                        int32_t lp_top, double *sec_per_step, ifl_err *err)
{
    int32_t warm = 2;
    decode_run r = {.with_lp = lp_top >= 0, .lp_top = lp_top};
    int rc = -1;
    if (decode_run_init(&r, be, B, BENCH_PROMPT + warm + steps + 1, err))
        goto out;
    /* prefill, as many sequences per step as the token budget allows */
    for (int32_t s0 = 0, per = be->params.max_tokens / BENCH_PROMPT; s0 < B; s0 += per)
        if (decode_run_step(be, &r, s0, B - s0 < per ? B - s0 : per, BENCH_PROMPT, 0, err))
            goto out;
    double t0 = 0, timed = 0;
    for (int32_t it = 0; it < warm + steps; it++) {
        if (sp && it >= warm && (it - warm) % sp->every == 0) {
            if (it > warm)
                timed += ifl_now_s() - t0;
            slice_probe(sp);
            t0 = ifl_now_s();
        } else if (it == warm)
            t0 = ifl_now_s();
        memcpy(r.tokens, r.next, (size_t)B * sizeof *r.tokens);
        if (decode_run_step(be, &r, 0, B, 1, BENCH_PROMPT + it, err))
            goto out;
        if (sp && it >= warm) {
            sp->floor_s += sp->gbs > 0 ? sp->step_bytes / (sp->gbs * 1e9) : 0;
            sp->peak_s += sp->peak > 0 ? sp->step_flops / (sp->peak * 1e9) : 0;
        }
    }
    *sec_per_step = (timed + ifl_now_s() - t0) / steps;
    rc = 0;
out:
    decode_run_free(&r);
    return rc;
}

/* One timed prefill of P random tokens in chunks of the backend's token budget: *sec. With
 * score_top >= 0, as an echo with logprobs asks: every position's row (the lm_head over all of
 * them) and each scored at the next token with score_top best (ifl_backend_score). */
static int bench_prefill(ifl_backend *be, int32_t P, int32_t score_top, double *sec, ifl_err *err)
{
    const ifl_config *c = &be->model->cfg;
    int rc = -1;
    ifl_kv_pool pool = {0};
    ifl_kv_seq seq = {0};
    int32_t chunk = be->params.max_tokens, rows_max = score_top >= 0 ? chunk : 1;
    int32_t *tokens = malloc((size_t)(P + 1) * sizeof *tokens);
    ifl_logprob *lp = score_top >= 0 ? malloc((size_t)chunk * sizeof *lp) : NULL;
    float *logits = malloc((size_t)rows_max * c->n_vocab * sizeof *logits);
    if (!tokens || !logits || (score_top >= 0 && !lp)) {
        ifl_err_set(err, "out of memory");
        goto out;
    }
    if (ifl_kv_pool_init(&pool, be->params.kv_blocks, be->params.kv_block_size, err))
        goto out;
    if (ifl_kv_seq_reserve(&seq, &pool, P)) {
        ifl_err_set(err, "KV pool too small for a %d-token prefill", P);
        goto out;
    }
    ifl_rng rng;
    ifl_rng_seed(&rng, 7);
    for (int32_t i = 0; i <= P; i++)
        tokens[i] = (int32_t)(ifl_rng_next(&rng) % (uint64_t)c->n_vocab);
    {
        double t0 = ifl_now_s();
        for (int32_t pos = 0; pos < P;) {
            int32_t len = P - pos < chunk ? P - pos : chunk;
            int32_t rs[2] = {0, len};
            const int32_t *tables[1] = {seq.blocks};
            ifl_batch b = {.n_seqs = 1,
                           .n_tokens = len,
                           .tokens = tokens + pos,
                           .run_start = rs,
                           .pos0 = &pos,
                           .block_tables = tables,
                           .n_blocks = &seq.n_blocks,
                           .n_rows = score_top >= 0 ? &len : NULL};
            if (ifl_backend_step(be, &b, logits, err))
                goto out;
            if (score_top >= 0) /* row k predicts token pos + k + 1 */
                ifl_backend_score(be, logits, len, NULL, tokens + pos + 1, score_top, lp);
            pos += len;
        }
        *sec = ifl_now_s() - t0;
    }
    rc = 0;
out:
    ifl_kv_seq_free(&seq, &pool);
    ifl_kv_pool_free(&pool);
    free(tokens);
    free(lp);
    free(logits);
    return rc;
}

/* The memory floor of a decode step: every weight read once (wpe: one row) plus the KV of every
 * sequence. On the CPU at the read bandwidth measured now (this machine's varies run to run); on
 * the GPU the weights and KV are 16-bit, at the HBM bandwidth a device-to-device copy reaches on
 * an H200 (4.3 TB/s, docs/perf.md; IFL_HBM_GBS overrides it for other cards). Prints its line. */
static void memory_floor(const ifl_runtime *rt, double *gbs, double *wbytes, double *kv_per_tok)
{
    const ifl_model *model = &rt->model;
    const ifl_config *mc = &model->cfg;
    if (rt->device == IFL_DEVICE_CUDA) {
        const char *hbm = getenv("IFL_HBM_GBS");
        *gbs = hbm && atof(hbm) > 0 ? atof(hbm) : 4300.0;
        double C = mc->n_embd, F = ifl_config_n_inner(mc), L = mc->n_layer;
        double mats = (double)mc->n_vocab * C * (model->lm_head.data == model->wte.data ? 1 : 2) +
                      C + L * (4 * C * C + 2 * C * F); /* wte (+ lm_head), one wpe row, layers */
        double vecs = 2 * C + L * (9 * C + F);         /* LayerNorms and biases, f32 */
        *wbytes = mats * 2.0 + vecs * 4.0;
        *kv_per_tok = (double)mc->n_layer * 2 * mc->n_embd * 2;
        printf("  HBM bandwidth assumed: %.0f GB/s%s; weights read per step: %.1f MB (16-bit)\n",
               *gbs, hbm ? " (IFL_HBM_GBS)" : " (H200)", *wbytes / 1e6);
    } else {
        /* the backends' own pool, idle between steps */
        *gbs = rt->pool ? ifl_memory_read_gbs(rt->pool, (size_t)512 << 20, 5) : 0;
        *wbytes = (double)model->weight_bytes -
                  (double)mc->n_ctx * mc->n_embd * (double)ifl_dtype_size(model->wpe.dtype);
        *kv_per_tok = (double)mc->n_layer * 2 * mc->n_embd * 4;
        printf("  memory read bandwidth now: %.1f GB/s; weights read per step: %.1f MB\n", *gbs,
               *wbytes / 1e6);
    }
}

/* Floating-point operations of one step over B sequences of T new tokens each at mean context ctx:
 * 2 per weight of the layers' products per token, 4 per (token, position) per layer and width in
 * attention (scores and values), and the lm_head for each sequence's last token. */
static double step_flops(const ifl_config *mc, double B, double T, double ctx)
{
    double C = mc->n_embd, F = ifl_config_n_inner(mc), L = mc->n_layer;
    return B * (T * (2 * L * (4 * C * C + 2 * C * F) + 4 * L * C * ctx) + 2 * C * mc->n_vocab);
}

/* The CPU's multiply-add peak on the backends' pool now ("FMA peak"), printed; 0 on the GPU. */
static double compute_peak(const ifl_runtime *rt)
{
    if (rt->device == IFL_DEVICE_CUDA || !rt->pool)
        return 0;
    double peak = ifl_fma_peak_gflops(rt->pool, NULL, 5);
    printf("  FMA peak now: %.1f GFLOP/s (isa %s, %d thread%s)\n", peak,
           ifl_isa_name(ifl_isa_current()), ifl_threadpool_size(rt->pool),
           ifl_threadpool_size(rt->pool) == 1 ? "" : "s");
    return peak;
}

/* The CPU's read bandwidth and FMA peak now, measured quietly (no line printed): the probes
 * each prefill round runs just before its steps. 0 on the GPU. */
static void probe_now(const ifl_runtime *rt, double *gbs, double *peak)
{
    *gbs = *peak = 0;
    if (rt->device == IFL_DEVICE_CUDA || !rt->pool)
        return;
    *gbs = ifl_memory_read_gbs(rt->pool, (size_t)512 << 20, 3);
    *peak = ifl_fma_peak_gflops(rt->pool, NULL, 3);
}

static double median_of(double *v, int32_t n)
{
    bench_sort(v, (size_t)n);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* Decode at batch B, `rounds` times. On the CPU the probes run between slices of each round's
 * steps (slice_probes: 8 slices a round), so the floor and the peak a round is set against are
 * those of the moments its steps ran. Prints the medians of the rounds' step times, floors, and
 * ratios, and the range the probes spanned. */
static int bench_batch(const ifl_runtime *rt, int32_t B, int32_t st, int32_t rounds, double wbytes,
                       double kv_per_tok, double cuda_gbs, ifl_err *err)
{
    const ifl_config *mc = &rt->model.cfg;
    double *v = calloc((size_t)rounds * 4, sizeof *v); /* step s, floor ms, floor %, peak % */
    ifl_read_probe rd = {0};
    if (!v)
        return ifl_err_set(err, "out of memory");
    int cpu = rt->device != IFL_DEVICE_CUDA && rt->pool;
    if (cpu && ifl_read_probe_init(&rd, (size_t)512 << 20)) {
        free(v);
        return ifl_err_set(err, "out of memory for the 512 MiB bandwidth probe");
    }
    /* mean context over the timed steps: prompt + warm-up + half the steps */
    double ctx = BENCH_PROMPT + 2 + st / 2.0, flops = step_flops(mc, B, 1, ctx);
    double bytes = wbytes + B * ctx * kv_per_tok;
    slice_probes sp = {.tp = rt->pool,
                       .rd = &rd,
                       .every = st >= 8 ? st / 8 : 1,
                       .step_bytes = bytes,
                       .step_flops = flops};
    int rc = 0;
    for (int32_t r = 0; r < rounds && !rc; r++) {
        sp.floor_s = sp.peak_s = 0;
        double sps;
        if ((rc = bench_decode(rt->be[0], B, st, cpu ? &sp : NULL, -1, &sps, err)))
            break;
        double floor_s = cpu ? sp.floor_s / st : cuda_gbs > 0 ? bytes / (cuda_gbs * 1e9) : 0;
        v[r] = sps;
        v[rounds + r] = floor_s * 1e3;
        v[2 * rounds + r] = 100.0 * floor_s / sps;
        v[3 * rounds + r] = cpu ? 100.0 * sp.peak_s / st / sps : 0;
    }
    if (!rc) {
        double sps = median_of(v, rounds), floor_ms = median_of(v + rounds, rounds);
        double floor_pct = median_of(v + 2 * rounds, rounds),
               peak_pct = median_of(v + 3 * rounds, rounds);
        printf("  decode  batch %4d: %8.2f ms/step  %8.1f tok/s  (%d steps; memory floor %.2f ms, "
               "%.0f%% of it; %.1f GFLOP/s, %.0f%% of the FMA peak",
               B, sps * 1e3, B / sps, st, floor_ms, floor_pct, flops / sps / 1e9, peak_pct);
        if (rounds > 1)
            printf("; median of %d rounds", rounds);
        if (cpu)
            printf("; probes every %d steps: bandwidth %.1f-%.1f GB/s", sp.every, sp.gbs_lo,
                   sp.gbs_hi);
        printf(")\n");
        fflush(stdout);
    }
    ifl_read_probe_free(&rd);
    free(v);
    return rc;
}

/* The prefill of P tokens, `rounds` times, each after its own probes on the CPU (as
 * bench_batch): prints the median time and the median of the rounds' ratios to the FMA peak. */
static int bench_prefill_rounds(const ifl_runtime *rt, int32_t P, int32_t rounds, ifl_err *err)
{
    double *v = calloc((size_t)rounds * 2, sizeof *v); /* seconds, peak % */
    if (!v)
        return ifl_err_set(err, "out of memory");
    double flops = step_flops(&rt->model.cfg, 1, P, P / 2.0);
    for (int32_t r = 0; r < rounds; r++) {
        double gbs, peak = 0;
        if (rt->device != IFL_DEVICE_CUDA)
            probe_now(rt, &gbs, &peak);
        if (bench_prefill(rt->be[0], P, -1, &v[r], err)) {
            free(v);
            return -1;
        }
        v[rounds + r] = peak > 0 ? 100.0 * flops / v[r] / 1e9 / peak : 0;
    }
    double med = median_of(v, rounds), peak_pct = median_of(v + rounds, rounds);
    printf("  prefill %4d tokens: %8.3f s        %8.1f tok/s  (median of %d, chunks of %d; "
           "%.1f GFLOP/s, %.0f%% of the FMA peak%s)\n",
           P, med, P / med, rounds, rt->be[0]->params.max_tokens, flops / med / 1e9, peak_pct,
           rounds > 1 && rt->device != IFL_DEVICE_CUDA ? "; each round after its own probes" : "");
    free(v);
    return 0;
}

/* What scoring costs, side by side: st decode steps at batch B with each drawn token's logprob entry
 * (5 best, ifl_sample_req.lp) against the same steps without, and a P-token prefill with every
 * position's row scored (an echo with logprobs 1: the lm_head over all rows and their log-softmax)
 * against the plain prefill (one row). Rounds alternate plain / scored; the medians and ratios. */
static int bench_scoring(const ifl_runtime *rt, int32_t B, int32_t st, int32_t P, int32_t rounds,
                         ifl_err *err)
{
    double *v = calloc((size_t)rounds * 4, sizeof *v); /* decode off, on, prefill off, on */
    if (!v)
        return ifl_err_set(err, "out of memory");
    int rc = 0;
    for (int32_t r = 0; r < rounds && !rc; r++)
        rc = bench_decode(rt->be[0], B, st, NULL, -1, &v[r], err) ||
             bench_decode(rt->be[0], B, st, NULL, 5, &v[rounds + r], err) ||
             (P > 0 && (bench_prefill(rt->be[0], P, -1, &v[2 * rounds + r], err) ||
                        bench_prefill(rt->be[0], P, 1, &v[3 * rounds + r], err)));
    if (!rc) {
        double d0 = median_of(v, rounds), d1 = median_of(v + rounds, rounds);
        printf("  logprobs: decode batch %d %.2f ms/step plain, %.2f with each token's logprob and "
               "5 best: ratio %.3f (median of %d, alternated)\n",
               B, d0 * 1e3, d1 * 1e3, d1 / d0, rounds);
        if (P > 0) {
            double p0 = median_of(v + 2 * rounds, rounds), p1 = median_of(v + 3 * rounds, rounds);
            printf("  logprobs: prefill %d tokens %.3f s plain, %.3f s with every position scored "
                   "(echo, logprobs 1): ratio %.3f\n",
                   P, p0, p1, p1 / p0);
        }
        fflush(stdout);
    }
    free(v);
    return rc ? -1 : 0;
}

/* The measurements of bench --engine, on a started engine (one backend). */
static int bench_engine_run(const ifl_runtime *rt, const char *dir, const int32_t *batches,
                            int n_batches, int32_t steps, int32_t prefill, int32_t repeat)
{
    ifl_err err;
    const ifl_config *mc = &rt->model.cfg;
    printf("inflight bench --engine: %s: %d layers, %d heads, %d wide, vocab %d\n  %s\n", dir,
           mc->n_layer, mc->n_head, mc->n_embd, mc->n_vocab, rt->desc);
    double gbs, wbytes, kv_per_tok;
    memory_floor(rt, &gbs, &wbytes, &kv_per_tok);
    (void)compute_peak(rt); /* the start-up line; every round probes again */
    if (bench_sampler(mc->n_vocab, &err) || bench_sampler_controls(mc->n_vocab, &err)) {
        fprintf(stderr, "inflight bench: sampler: %s\n", err.msg);
        return 1;
    }
    for (int i = 0; i < n_batches; i++) {
        int32_t B = batches[i];
        int32_t st = steps ? steps : (B == 1 ? 64 : 32);
        if (bench_batch(rt, B, st, repeat, wbytes, kv_per_tok, gbs, &err)) {
            fprintf(stderr, "inflight bench: batch %d: %s\n", B, err.msg);
            return 1;
        }
    }
    if (prefill > 0 && bench_prefill_rounds(rt, prefill, repeat, &err)) {
        fprintf(stderr, "inflight bench: prefill: %s\n", err.msg);
        return 1;
    }
    int32_t score_b = batches[n_batches - 1] < rt->be[0]->params.max_seqs
                          ? batches[n_batches - 1] : rt->be[0]->params.max_seqs;
    int32_t score_st = steps ? steps : 32; /* as the decode rounds (the pool is sized for them) */
    if (bench_scoring(rt, score_b, score_st, prefill, repeat > 3 ? repeat : 3, &err)) {
        fprintf(stderr, "inflight bench: scoring: %s\n", err.msg);
        return 1;
    }
    return 0;
}

typedef struct {
    const char *dir;
    int32_t threads, steps, prefill, repeat, sgemm_above;
    int32_t batches[32];
    int n_batches;
    ifl_model_opts mo;
    ifl_device want;
    ifl_isa isa;
} engine_opts;

/* --batches LIST into o; -1 after printing the error. */
static int parse_batches(const char *cmd, const char *arg, void *field)
{
    engine_opts *o = field;
    o->n_batches = 0;
    char *list = strdup(arg), *save = NULL;
    if (!list)
        return -1;
    int rc = 0;
    for (char *t = strtok_r(list, ",", &save); t && !rc; t = strtok_r(NULL, ",", &save)) {
        if (o->n_batches == 32 || cli_i32(cmd, "--batches", t, 1, 4096, &o->batches[o->n_batches]))
            rc = -1;
        else
            o->n_batches++;
    }
    free(list);
    if (!rc && !o->n_batches) {
        cli_usage_error(cmd, "--batches needs at least one size");
        rc = -1;
    }
    return rc;
}

#define ROW(NAME, ARG, LO, HI, F, HELP) CLI_ROW(NAME, 0, CLI_I32, ARG, LO, HI, engine_opts, F, HELP)
static const cli_opt ENGINE_OPTS[] = {
    {.name = "engine", .type = CLI_MODE, .help = "run the engine benchmark"},
    CLI_OPT_BENCH_MODEL(engine_opts, dir),
    CLI_OPT_WEIGHTS(engine_opts, mo),
    CLI_OPT_THREADS(engine_opts, threads),
    {.name = "batches",
     .type = CLI_CUSTOM,
     .arg = "LIST",
     .def = "1,8,64",
     .parse = parse_batches,
     .help = "comma-separated batch sizes"},
    {.name = "steps",
     .type = CLI_I32,
     .arg = "N",
     .lo = 1,
     .hi = 100000,
     .def_text = "32; 64 at batch 1",
     .off = offsetof(engine_opts, steps),
     .help = "timed decode steps per batch size"},
    ROW("prefill", "N", 0, 1 << 20, prefill, "prompt length of the prefill measurement (0 = skip)"),
    ROW("repeat", "N", 1, 1000, repeat,
        "rounds of every measurement, the median is reported; on the CPU the bandwidth and FMA "
        "probes run between slices of each decode round (8 a round), the steps of a slice set "
        "against the probes just before them; each prefill round runs right after its own probes"),
    CLI_OPT_DEVICE(engine_opts, want, CLI_INDEX),
    CLI_OPT_ISA(engine_opts, isa),
    {.name = "sgemm-above",
     .type = CLI_I32,
     .arg = "N",
     .lo = 1,
     .hi = 1 << 30,
     .def_text = "the kernel family's own products at every size",
     .off = offsetof(engine_opts, sgemm_above),
     .help =
         "use OpenBLAS sgemm for products of more than N rows (for comparing with the default)"},
};
#undef ROW

static int bench_engine(int argc, char **argv)
{
    static const cli_spec spec = CLI_SPEC("bench", USAGE, ENGINE_OPTS, NULL, NULL);
    engine_opts o = {.prefill = 512, .repeat = 3, .want = IFL_DEVICE_AUTO, .isa = IFL_ISA_AUTO};
    int st = cli_parse(&spec, argc, argv, 1, &o, sizeof o);
    if (st >= 0)
        return st;
    const char *cmd = "bench";
    if (cli_bench_model(&o.dir))
        return 1;
    int32_t max_b = 1;
    for (int i = 0; i < o.n_batches; i++)
        max_b = o.batches[i] > max_b ? o.batches[i] : max_b;
    int32_t max_steps = o.steps ? o.steps : 64;
    int32_t bs = IFL_DEFAULT_KV_BLOCK_SIZE;
    int32_t per_seq = BENCH_PROMPT + max_steps + 4;
    int32_t blocks = (per_seq + bs - 1) / bs * max_b, pre_blocks = (o.prefill + bs - 1) / bs;
    ifl_runtime_opts ro = {
        .model_dir = o.dir,
        .no_tokenizer = 1, /* random token ids: no vocabulary needed */
        .model_opts = o.mo,
        .threads = o.threads,
        .kv_block_size = bs,
        .kv_blocks = blocks > pre_blocks ? blocks : pre_blocks,
        .max_seqs = max_b,
        .max_tokens =
            IFL_DEFAULT_BACKEND_MAX_TOKENS > max_b ? IFL_DEFAULT_BACKEND_MAX_TOKENS : max_b,
        .sgemm_above = o.sgemm_above,
        /* the pool's pages faulted in before the timed steps, as a serving process's are after
         * its first requests: at batch 1 the first touches of each KV block cost ~0.15 ms a step
         * (f16, 7.2 ms steps, docs/perf.md 2026-12-06), a start-up cost, not decode's */
        .prefault = 1,
    };
    ifl_runtime rt = {0};
    if (cli_runtime_open_model(cmd, o.want, o.isa, &ro, &rt))
        return 1;
    if (o.prefill > rt.model.cfg.n_ctx) { /* before the KV pool is sized for it */
        fprintf(stderr, "inflight bench: --prefill %d exceeds the model's context of %d\n",
                o.prefill, rt.model.cfg.n_ctx);
        ifl_runtime_close(&rt);
        return 1;
    }
    if (cli_runtime_start_backends(cmd, &ro, &rt))
        return 1;
    int rc = bench_engine_run(&rt, o.dir, o.batches, o.n_batches, o.steps, o.prefill, o.repeat);
    ifl_runtime_close(&rt);
    return rc;
}

int cmd_bench(int argc, char **argv)
{
    for (int i = 1; i < argc; i++)
        if (!strcmp(argv[i], "--engine"))
            return bench_engine(argc, argv);
#ifdef INFLIGHT_HAVE_SERVER
        else if (!strcmp(argv[i], "--db-writer"))
            return cmd_bench_db(argc, argv);
#else
        else if (!strcmp(argv[i], "--db-writer")) {
            fprintf(stderr,
                    "inflight bench: --db-writer is not in this build (INFLIGHT_SERVER=OFF: "
                    "no SQLite)\n");
            return 2;
        }
#endif
    return cmd_bench_scheduler(argc, argv);
}
