/* test_cuda_sample.c: the CUDA sampling kernel (ifl_cuda_sample, cuda/sample.cu) against the host.
 *
 * Greedy rows give the host argmax (lowest id on ties, planted ties included) for small and GPT-2
 * vocabularies; top-k picks lie in the host's top-k set (ties at the threshold: lowest ids); top-p
 * picks lie in the host's nucleus (computed in double, accepting boundary tokens within 1e-6 of the
 * mass); sampled frequencies match the renormalised softmax (chi-square, rejecting only beyond
 * p < 1e-6) with and without top-k / top-p; the same (logits, seed, draw) gives the same token on
 * every run and whatever else is in the launch; the GPU follows the CPU sampler's random stream
 * (ifl_sample_u with ifl_philox_uniform), with min_p too; min_p picks lie in the host's kept set;
 * the device's logit adjustments (ifl_cuda_logit_adjust: bias, penalties, bans) leave rows equal
 * bit for bit to the host's ifl_logit_adj_apply, and sampling the adjusted rows follows the CPU;
 * inactive rows give -1. Exits 77 without a CUDA device. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime.h>

#include "kernels.h"
#include "logit_adj.h"
#include "philox.h"
#include "rng.h"
#include "sampler.h"
#include "testutil.h"

#define MAX_S 512
#define MAX_V 50257
#define GPT2_V 50257
#define POISON_BYTE 0xA5 /* tokens start as 0xA5A5A5A5: negative, and not the inactive -1 */

#define CUDA_OK(call)                                                                              \
    do {                                                                                           \
        cudaError_t e_ = (call);                                                                   \
        if (e_ != cudaSuccess) {                                                                   \
            fprintf(stderr, "FAIL %s:%d: %s: %s\n", __FILE__, __LINE__, #call,                     \
                    cudaGetErrorString(e_));                                                       \
            exit(1);                                                                               \
        }                                                                                          \
    } while (0)

static float *d_logits;
static ifl_cuda_sample_req *d_req;
static int32_t *d_tok;
static void *d_scratch;

/* Runs the kernel on S rows of V, out[S]; checks every active row got a token in [0, V) and every
 * inactive row -1. The rows lie LD_PAD floats further apart than V on the device (as the backend's
 * lm_head leaves them), the gaps filled with 0x7f7f7f7f (3.4e38, which argmax would pick), so a
 * kernel reading rows V apart, or past V, gives other tokens than the CPU sampler. */
#define LD_PAD 7
static void gpu_sample(const float *logits, const ifl_cuda_sample_req *req, int32_t S, int32_t V,
                       int32_t *out)
{
    int32_t ld = V + LD_PAD;
    CUDA_OK(cudaMemset(d_logits, 0x7f, (size_t)S * (size_t)ld * sizeof *logits));
    CUDA_OK(cudaMemcpy2D(d_logits, (size_t)ld * sizeof *logits, logits, (size_t)V * sizeof *logits,
                         (size_t)V * sizeof *logits, (size_t)S, cudaMemcpyHostToDevice));
    CUDA_OK(cudaMemcpy(d_req, req, (size_t)S * sizeof *req, cudaMemcpyHostToDevice));
    CUDA_OK(cudaMemset(d_tok, POISON_BYTE, (size_t)S * sizeof *d_tok));
    CHECK(ifl_cuda_sample(d_tok, d_logits, d_req, S, V, V - 1, d_scratch, 0) != 0); /* ld < V */
    int rc = ifl_cuda_sample(d_tok, d_logits, d_req, S, V, ld, d_scratch, 0);
    CHECKF(rc == 0, "ifl_cuda_sample: %s", cudaGetErrorString((cudaError_t)rc));
    CUDA_OK(cudaGetLastError());
    CUDA_OK(cudaDeviceSynchronize());
    CUDA_OK(cudaMemcpy(out, d_tok, (size_t)S * sizeof *out, cudaMemcpyDeviceToHost));
    int bad = 0;
    for (int32_t s = 0; s < S; s++)
        bad += req[s].active ? !(out[s] >= 0 && out[s] < V) : out[s] != -1;
    CHECKF(bad == 0, "%d of %d rows (V %d) out of range or wrong for inactive", bad, S, V);
}

static ifl_cuda_sample_req mkreq(float temperature, int32_t top_k, float top_p, uint64_t seed,
                                 uint64_t draw)
{
    ifl_cuda_sample_req r;
    memset(&r, 0, sizeof r);
    r.temperature = temperature;
    r.top_k = top_k;
    r.top_p = top_p;
    r.active = 1;
    r.seed = seed;
    r.draw = draw;
    return r;
}

/* The device request for host settings p, as the backend builds it (min_p's cut on the host). */
static ifl_cuda_sample_req req_of(const ifl_sampling *p, uint64_t seed, uint64_t draw)
{
    ifl_cuda_sample_req r = mkreq(p->temperature, p->top_k, p->top_p, seed, draw);
    r.min_p = p->min_p;
    r.min_p_cut = ifl_sampling_min_p_cut(p);
    return r;
}

static void fill_normal(float *l, int32_t V, double scale, ifl_rng *rng)
{
    for (int32_t i = 0; i < V; i++)
        l[i] = (float)(ifl_rng_normal(rng) * scale);
}

static int32_t rand_below(ifl_rng *rng, int32_t n)
{
    return (int32_t)(ifl_rng_next(rng) % (uint64_t)n);
}

static int32_t host_argmax(const float *l, int32_t V)
{
    int32_t best = 0;
    for (int32_t i = 1; i < V; i++)
        if (l[i] > l[best])
            best = i;
    return best;
}

/* ---- Host reference: the best-first order (higher logit, then lower id) -----------------------
 */

typedef struct {
    float v;
    int32_t id;
} cand;

static int cmp_best_first(const void *pa, const void *pb)
{
    const cand *a = pa, *b = pb;
    if (a->v != b->v)
        return a->v > b->v ? -1 : 1;
    return (a->id > b->id) - (a->id < b->id);
}

/* order[0..V): the ids best first; pos[id]: where id stands in it. */
static void best_first(const float *l, int32_t V, cand *order, int32_t *pos)
{
    for (int32_t i = 0; i < V; i++)
        order[i] = (cand){l[i], i};
    qsort(order, (size_t)V, sizeof *order, cmp_best_first);
    for (int32_t i = 0; i < V; i++)
        pos[order[i].id] = i;
}

/* The host's probabilities over the kept set, in double: prob[i] for the i-th best (0 outside).
 * Returns the number kept. top-p boundary tokens whose inclusion is ambiguous within `slack` of
 * the mass (relative) are kept. */
static int32_t host_kept(int32_t V, const ifl_cuda_sample_req *r, const cand *order, double slack,
                         double *prob)
{
    int32_t n = r->top_k > 0 && r->top_k < V ? r->top_k : V;
    double m = order[0].v, total = 0;
    for (int32_t i = 0; i < n; i++)
        total += prob[i] = exp(((double)order[i].v - m) / (double)r->temperature);
    if (r->min_p > 0.0f) { /* prob[i] is the ratio to the best here: keep those >= min_p */
        int32_t keep = 0;
        total = 0;
        while (keep < n && prob[keep] >= (double)r->min_p * (1 - slack))
            total += prob[keep++];
        n = keep;
    }
    if (r->top_p < 1.0f) {
        double cum = 0;
        int32_t keep = 0;
        while (keep < n && cum < ((double)r->top_p + slack) * total)
            cum += prob[keep++];
        n = keep;
    }
    double kept = 0;
    for (int32_t i = 0; i < n; i++)
        kept += prob[i];
    for (int32_t i = 0; i < V; i++)
        prob[i] = i < n ? prob[i] / kept : 0;
    return n;
}

static cand order_buf[MAX_V];
static int32_t pos_buf[MAX_V];
static double prob_buf[MAX_V];

/* ---- Greedy ------------------------------------------------------------------------------------
 */

static void test_greedy(float *h, int32_t *out, ifl_rng *rng)
{
    static const int32_t vs[] = {5, 7, 64, 1000, GPT2_V};
    ifl_cuda_sample_req req[MAX_S];
    for (size_t vi = 0; vi < sizeof vs / sizeof vs[0]; vi++) {
        int32_t V = vs[vi], S = V == GPT2_V ? 128 : MAX_S, wrong = 0, ties = 0;
        for (int32_t s = 0; s < S; s++) {
            float *l = h + (size_t)s * (size_t)V;
            if (s % 5 == 4) { /* few distinct values: ties everywhere */
                for (int32_t i = 0; i < V; i++)
                    l[i] = (float)rand_below(rng, 4);
            } else {
                fill_normal(l, V, 2.0, rng);
            }
            if (s % 3 == 0 && V > 1) { /* plant copies of the max, before and after it */
                int32_t b = host_argmax(l, V);
                for (int c = 0; c < 2; c++)
                    l[rand_below(rng, V)] = l[b];
            }
            /* temperature 0, or top_k 1 at any temperature; top_p is then ignored */
            req[s] = s % 2 ? mkreq(0.0f, 0, 1.0f, (uint64_t)s, 0)
                           : mkreq(0.7f, 1, 0.5f, (uint64_t)s, (uint64_t)s);
            int32_t b = host_argmax(l, V), n_max = 0;
            for (int32_t i = 0; i < V; i++)
                n_max += l[i] == l[b];
            ties += n_max > 1;
        }
        gpu_sample(h, req, S, V, out);
        for (int32_t s = 0; s < S; s++)
            wrong += out[s] != host_argmax(h + (size_t)s * (size_t)V, V);
        CHECKF(wrong == 0, "greedy V %d: %d of %d rows differ from the argmax", V, wrong, S);
        printf("greedy V %d: %d rows (%d with tied maxima), %d differ\n", V, S, ties, wrong);
    }
    /* -0 and +0 are equal: the lowest id wins */
    float z[8] = {-1.0f, -0.0f, 0.0f, -0.0f, -2.0f, 0.0f, -3.0f, -0.0f};
    req[0] = mkreq(0.0f, 0, 1.0f, 0, 0);
    gpu_sample(z, req, 1, 8, out);
    CHECKF(out[0] == 1, "greedy over signed zeros picked %d, want 1", out[0]);
}

/* ---- top-k and top-p support
 * --------------------------------------------------------------------- */

static void test_support(float *h, int32_t *out, ifl_rng *rng)
{
    static const int32_t vs[] = {5, 7, 64, 1000, GPT2_V};
    static const struct {
        float temperature;
        int32_t top_k;
        float top_p;
    } modes[] = {{1.0f, 2, 1.0f}, {0.7f, 5, 1.0f},   {1.5f, 40, 1.0f}, {1.0f, 1000, 1.0f},
                 {1.0f, 0, 0.3f}, {0.8f, 0, 0.9f},   {1.0f, 0, 0.95f}, {0.8f, 40, 0.95f},
                 {2.0f, 3, 0.5f}, {1.0f, 50, 0.05f}, {1.0f, 0, 1e-6f}, {3.0f, 7, 0.999f}};
    ifl_cuda_sample_req req[MAX_S];
    for (size_t vi = 0; vi < sizeof vs / sizeof vs[0]; vi++) {
        int32_t V = vs[vi], S = V == GPT2_V ? 96 : MAX_S;
        int32_t outside_k = 0, outside_p = 0, n_k = 0, n_p = 0, inactive = 0;
        for (int32_t s = 0; s < S; s++) {
            float *l = h + (size_t)s * (size_t)V;
            if (s % 4 == 3) { /* quantised: ties at the top-k and top-p thresholds */
                for (int32_t i = 0; i < V; i++)
                    l[i] = (float)rand_below(rng, 6) * 0.5f;
            } else {
                fill_normal(l, V, s % 4 == 0 ? 1.0 : 3.0, rng);
            }
            size_t mi = (size_t)s % (sizeof modes / sizeof modes[0]);
            req[s] = mkreq(modes[mi].temperature, modes[mi].top_k, modes[mi].top_p,
                           0x1234u + (uint64_t)s, (uint64_t)s * 3);
            if (s % 13 == 12) {
                req[s].active = 0;
                inactive++;
            }
        }
        /* each row several times: the draws differ, the support does not */
        for (int rep = 0; rep < 4; rep++) {
            for (int32_t s = 0; s < S; s++)
                req[s].draw += 1000003;
            gpu_sample(h, req, S, V, out);
            for (int32_t s = 0; s < S; s++) {
                if (!req[s].active) {
                    CHECK(out[s] == -1);
                    continue;
                }
                const float *l = h + (size_t)s * (size_t)V;
                if (out[s] < 0 || out[s] >= V)
                    continue; /* counted by gpu_sample */
                best_first(l, V, order_buf, pos_buf);
                int32_t kept = host_kept(V, &req[s], order_buf, 1e-6, prob_buf);
                int32_t at = pos_buf[out[s]];
                if (req[s].top_k > 0 && req[s].top_k < V) {
                    n_k++;
                    outside_k += at >= req[s].top_k;
                }
                if (req[s].top_p < 1.0f) {
                    n_p++;
                    outside_p += at >= kept;
                }
                if (at >= kept || prob_buf[at] <= 0)
                    fprintf(stderr,
                            "  V %d row %d (T %g k %d p %g): token %d at rank %d, kept %d\n", V, s,
                            (double)req[s].temperature, req[s].top_k, (double)req[s].top_p, out[s],
                            at, kept);
            }
        }
        CHECKF(outside_k == 0, "V %d: %d of %d top-k picks outside the top-k set", V, outside_k,
               n_k);
        CHECKF(outside_p == 0, "V %d: %d of %d top-p picks outside the nucleus", V, outside_p, n_p);
        printf("support V %d: %d top-k picks, %d top-p picks, %d + %d outside; %d inactive rows\n",
               V, n_k, n_p, outside_k, outside_p, inactive);
    }
}

/* ---- Frequencies -------------------------------------------------------------------------------
 */

/* chi-square quantiles at upper tail 1e-6, for 1 .. 15 degrees of freedom */
static const double chi2_1e6[16] = {0,     23.93, 27.63, 30.66, 33.38, 35.89, 38.26, 40.52,
                                    42.70, 44.81, 46.86, 48.87, 50.83, 52.75, 54.64, 56.49};

static void test_frequencies(float *h, int32_t *out)
{
    enum { V16 = 16, N = 20000 };
    static const int32_t perm[V16] = {3, 14, 0, 9, 7, 12, 1, 15, 5, 10, 2, 8, 13, 4, 11, 6};
    float row[V16];
    for (int32_t i = 0; i < V16; i++)
        row[i] = 0.25f * (float)perm[i] - 1.0f;
    static const struct {
        const char *name;
        int32_t top_k;
        float top_p;
    } cases[] = {{"softmax", 0, 1.0f}, {"top_k 4", 4, 1.0f}, {"top_p 0.5", 0, 0.5f}};
    ifl_cuda_sample_req req[MAX_S];
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        ifl_cuda_sample_req r = mkreq(1.0f, cases[c].top_k, cases[c].top_p, 0xfeedu, 0);
        best_first(row, V16, order_buf, pos_buf);
        /* no slack: the nucleus boundary of this row is far from ambiguous (0.40 / 0.54) */
        int32_t kept = host_kept(V16, &r, order_buf, 0.0, prob_buf);
        long counts[V16] = {0};
        const int32_t S = 500;
        for (int32_t base = 0; base < N; base += S) {
            for (int32_t s = 0; s < S; s++) {
                memcpy(h + (size_t)s * V16, row, sizeof row);
                req[s] = r;
                req[s].draw = (uint64_t)(base + s);
            }
            gpu_sample(h, req, S, V16, out);
            for (int32_t s = 0; s < S; s++)
                if (out[s] >= 0 && out[s] < V16)
                    counts[out[s]]++;
        }
        double chi2 = 0;
        long outside = 0;
        for (int32_t i = 0; i < V16; i++) {
            double p = prob_buf[pos_buf[i]], e = p * N;
            if (p > 0)
                chi2 += (counts[i] - e) * (counts[i] - e) / e;
            else
                outside += counts[i];
        }
        int dof = kept - 1;
        printf("frequencies, %s over %d tokens (%d kept), %d draws: chi-square %.2f (%d dof, "
               "bound %.2f), %ld outside\n",
               cases[c].name, V16, kept, N, chi2, dof, dof > 0 ? chi2_1e6[dof] : 0.0, outside);
        CHECKF(outside == 0, "%s: %ld draws outside the kept set", cases[c].name, outside);
        CHECKF(dof < 1 || chi2 < chi2_1e6[dof], "%s: chi-square %.2f over %d dof", cases[c].name,
               chi2, dof);
    }
}

/* ---- Reproducibility and batch independence
 * ------------------------------------------------------ */

static void mixed_batch(float *h, ifl_cuda_sample_req *req, int32_t S, int32_t V, ifl_rng *rng)
{
    for (int32_t s = 0; s < S; s++) {
        fill_normal(h + (size_t)s * (size_t)V, V, 2.5, rng);
        switch (s % 5) {
        case 0: req[s] = mkreq(1.0f, 0, 1.0f, 77u + (uint64_t)s, 5); break;
        case 1: req[s] = mkreq(0.8f, 40, 0.95f, 77u + (uint64_t)s, 9); break;
        case 2: req[s] = mkreq(0.7f, 0, 0.9f, 77u + (uint64_t)s, 1u << 20); break;
        case 3: req[s] = mkreq(1.3f, 200, 1.0f, 77u + (uint64_t)s, 3); break;
        default: req[s] = mkreq(0.0f, 0, 1.0f, 77u + (uint64_t)s, 0); break;
        }
        req[s].active = s % 11 != 10;
    }
}

static void test_reproducible(float *h, int32_t *out, ifl_rng *rng)
{
    enum { S = 300 };
    const int32_t V = GPT2_V;
    static ifl_cuda_sample_req req[S], req2[S];
    static int32_t first[S], second[S];
    mixed_batch(h, req, S, V, rng);
    gpu_sample(h, req, S, V, first);
    gpu_sample(h, req, S, V, second);
    int differ = 0;
    for (int32_t s = 0; s < S; s++)
        differ += first[s] != second[s];
    CHECKF(differ == 0, "%d of %d rows differ between two identical launches", differ, S);

    /* the same rows permuted: row s moves to (7 s + 11) mod 300 */
    float *h2 = malloc((size_t)S * (size_t)V * sizeof *h2);
    if (!h2) {
        fprintf(stderr, "out of memory\n");
        exit(1);
    }
    for (int32_t s = 0; s < S; s++) {
        int32_t to = (7 * s + 11) % S;
        memcpy(h2 + (size_t)to * (size_t)V, h + (size_t)s * (size_t)V, (size_t)V * sizeof *h);
        req2[to] = req[s];
    }
    gpu_sample(h2, req2, S, V, out);
    int moved = 0;
    for (int32_t s = 0; s < S; s++)
        moved += out[(7 * s + 11) % S] != first[s];
    CHECKF(moved == 0, "%d of %d rows changed when moved to another index", moved, S);

    /* some rows alone */
    int alone = 0;
    for (int32_t s = 0; s < S; s += 37) {
        int32_t tok;
        gpu_sample(h + (size_t)s * (size_t)V, &req[s], 1, V, &tok);
        alone += tok != first[s];
    }
    CHECKF(alone == 0, "%d rows changed when launched alone", alone);
    printf("reproducible: %d rows twice (%d differ), permuted (%d differ), alone (%d differ)\n", S,
           differ, moved, alone);
    free(h2);
}

/* ---- The CPU sampler's random stream ------------------------------------------------------------
 */

/* The GPU sums 64-bit fixed-point weights from expf while the CPU sums floats from its own exp in
 * double: a draw landing within ~1e-6 of a boundary between two tokens' cumulative masses (or a
 * top-p cut within that of the nucleus mass) may go either way, so agreement is required for 99%
 * of rows in general, and for every row where one token holds >= 0.999 of the mass. */
static void test_cpu_parity(float *h, int32_t *out, ifl_rng *rng)
{
    static const int32_t vs[] = {64, GPT2_V};
    static const struct {
        float temperature;
        int32_t top_k;
        float top_p;
    } modes[] = {
        {1.0f, 0, 1.0f}, {0.8f, 40, 0.95f}, {0.7f, 0, 0.9f}, {1.2f, 200, 1.0f}, {1.0f, 5, 0.8f}};
    ifl_cuda_sample_req req[MAX_S];
    for (size_t vi = 0; vi < sizeof vs / sizeof vs[0]; vi++) {
        int32_t V = vs[vi], S = MAX_S, rounds = V == GPT2_V ? 2 : 8;
        ifl_sampler smp;
        ifl_err err;
        if (ifl_sampler_init(&smp, V, &err)) {
            fprintf(stderr, "%s\n", err.msg);
            exit(1);
        }
        int agree = 0, total = 0, dom = 0, dom_agree = 0;
        for (int round = 0; round < rounds; round++) {
            static unsigned char dominant[MAX_S];
            for (int32_t s = 0; s < S; s++) {
                float *l = h + (size_t)s * (size_t)V;
                fill_normal(l, V, 4.0, rng); /* peaked: a few tokens hold most of the mass */
                if (s % 4 == 0)
                    l[rand_below(rng, V)] += 40.0f;
                size_t mi = (size_t)(s + round) % (sizeof modes / sizeof modes[0]);
                req[s] = mkreq(modes[mi].temperature, modes[mi].top_k, modes[mi].top_p,
                               ifl_rng_next(rng), ifl_rng_next(rng) >> 20);
                /* mass of the best token under the plain softmax (restrictions only raise it) */
                int32_t b = host_argmax(l, V);
                double z = 0;
                for (int32_t i = 0; i < V; i++)
                    z += exp(((double)l[i] - l[b]) / (double)req[s].temperature);
                dominant[s] = 1.0 / z >= 0.999;
            }
            gpu_sample(h, req, S, V, out);
            for (int32_t s = 0; s < S; s++) {
                ifl_sampling p = {req[s].temperature, req[s].top_k, req[s].top_p, 0};
                int32_t cpu = ifl_sample_u(&smp, h + (size_t)s * (size_t)V, &p,
                                           ifl_philox_uniform(req[s].seed, req[s].draw));
                total++;
                agree += cpu == out[s];
                dom += dominant[s];
                dom_agree += dominant[s] && cpu == out[s];
                if (cpu != out[s])
                    printf("  parity V %d: row %d (T %g k %d p %g): cpu %d gpu %d%s\n", V, s,
                           (double)p.temperature, p.top_k, (double)p.top_p, cpu, out[s],
                           dominant[s] ? " (dominant row)" : "");
            }
        }
        ifl_sampler_free(&smp);
        printf("cpu parity V %d: %d of %d rows agree; %d of %d rows with a dominant token\n", V,
               agree, total, dom_agree, dom);
        CHECKF(agree * 100 >= total * 99, "V %d: the GPU and CPU agree on %d of %d rows", V, agree,
               total);
        CHECKF(dom_agree == dom, "V %d: %d of %d dominant rows agree", V, dom_agree, dom);
    }
}

/* ---- min_p and the logit adjustments -------------------------------------------------------- */

static const ifl_sampling min_p_modes[] = {
    {.temperature = 1.0f, .top_p = 1.0f, .min_p = 0.05f},
    {.temperature = 0.8f, .top_k = 50, .top_p = 0.9f, .min_p = 0.05f},
    {.temperature = 1.2f, .top_p = 0.95f, .min_p = 0.2f},
    {.temperature = 0.7f, .top_k = 5, .top_p = 1.0f, .min_p = 0.5f},
    {.temperature = 1.5f, .top_k = 400, .top_p = 1.0f, .min_p = 0.01f}};
#define N_MIN_P_MODES (int)(sizeof min_p_modes / sizeof min_p_modes[0])

/* Rows with min_p: every pick in the host's kept set (float64, min_p then top_k then top_p), and
 * the CPU sampler's draw on >= 99% of rows (the boundary argument of test_cpu_parity). */
static void test_min_p(float *h, int32_t *out, ifl_rng *rng)
{
    static const int32_t vs[] = {1000, GPT2_V};
    ifl_cuda_sample_req req[MAX_S];
    for (size_t vi = 0; vi < sizeof vs / sizeof vs[0]; vi++) {
        int32_t V = vs[vi], S = V == GPT2_V ? 128 : MAX_S, outside = 0, agree = 0;
        ifl_sampler smp;
        ifl_err err;
        if (ifl_sampler_init(&smp, V, &err)) {
            fprintf(stderr, "%s\n", err.msg);
            exit(1);
        }
        for (int32_t s = 0; s < S; s++) {
            fill_normal(h + (size_t)s * (size_t)V, V, 2.0 + s % 3, rng);
            req[s] = req_of(&min_p_modes[s % N_MIN_P_MODES], ifl_rng_next(rng), (uint64_t)s);
        }
        gpu_sample(h, req, S, V, out);
        for (int32_t s = 0; s < S; s++) {
            const float *l = h + (size_t)s * (size_t)V;
            best_first(l, V, order_buf, pos_buf);
            int32_t kept = host_kept(V, &req[s], order_buf, 1e-6, prob_buf);
            outside += out[s] < 0 || out[s] >= V || pos_buf[out[s]] >= kept;
            agree += ifl_sample_u(&smp, l, &min_p_modes[s % N_MIN_P_MODES],
                                  ifl_philox_uniform(req[s].seed, req[s].draw)) == out[s];
        }
        ifl_sampler_free(&smp);
        printf("min_p V %d: %d rows, %d picks outside the host's kept set, %d agree with the CPU\n",
               V, S, outside, agree);
        CHECKF(outside == 0, "V %d: %d min_p picks outside the kept set", V, outside);
        CHECKF(agree * 100 >= S * 99, "V %d: min_p rows agree with the CPU on %d of %d", V, agree,
               S);
    }
}

/* Random adjustments for row s: penalties over ~750 seen ids, 50 biases, 3 bans (every fifth row
 * none; odd rows no bans). */
static void random_adj(int32_t s, int32_t V, ifl_seen *seen, ifl_logit_bias *bias, int32_t *ban,
                       ifl_logit_adj *a, ifl_rng *rng)
{
    ifl_err err;
    memset(a, 0, sizeof *a);
    if (s % 5 == 4)
        return;
    if (ifl_seen_init(seen, 800, &err)) {
        fprintf(stderr, "%s\n", err.msg);
        exit(1);
    }
    for (int i = 0; i < 500; i++)
        ifl_seen_add(seen, rand_below(rng, V), 0);
    for (int i = 0; i < 250; i++)
        ifl_seen_add(seen, rand_below(rng, 2000), 1);
    for (int i = 0; i < 50; i++)
        bias[i] = (ifl_logit_bias){.id = (i * 1009 + s * 17) % V,
                                   .bias = (float)(ifl_rng_uniform(rng) * 20.0 - 10.0)};
    for (int i = 0; i < 3; i++)
        ban[i] = rand_below(rng, V);
    *a = (ifl_logit_adj){.pen = {.repetition = 1.0f + (float)(s % 4) * 0.15f,
                                 .presence = s % 3 ? 0.5f : -0.7f,
                                 .frequency = (float)(s % 5) * 0.2f},
                         .seen = seen,
                         .bias = bias,
                         .n_bias = 50,
                         .ban = ban,
                         .n_ban = s % 2 ? 0 : 3};
}

/* The device adjusts rows (ld > V apart) exactly as the host does; the adjusted rows then sample
 * as the CPU does (every control on: penalties, bias, bans, min_p, top_k, top_p). */
static void test_logit_adjust(float *h, int32_t *out, ifl_rng *rng)
{
    enum { S = 64 };
    const int32_t V = GPT2_V, ld = V + LD_PAD;
    static ifl_seen seen[S];
    static ifl_logit_bias bias[S][50];
    static int32_t ban[S][3];
    static ifl_logit_adj adj[S];
    static int32_t rows[S + 1];
    float *ref = test_xmalloc((size_t)S * V * sizeof *ref);
    fill_normal(h, S * V, 3.0, rng);
    memcpy(ref, h, (size_t)S * V * sizeof *ref);
    int32_t n_ops = 0;
    for (int32_t s = 0; s < S; s++) {
        random_adj(s, V, &seen[s], bias[s], ban[s], &adj[s], rng);
        ifl_logit_adj_apply(ref + (size_t)s * V, &adj[s]);
        n_ops += ifl_logit_adj_n_ops(&adj[s]);
    }
    ifl_logit_op *ops = test_xmalloc((size_t)n_ops * sizeof *ops), *d_ops;
    int32_t *d_rows, at = 0;
    for (int32_t s = 0; s < S; s++) {
        rows[s] = at;
        at += ifl_logit_adj_ops(&adj[s], ops + at);
    }
    rows[S] = at;
    CUDA_OK(cudaMalloc((void **)&d_ops, (size_t)n_ops * sizeof *ops));
    CUDA_OK(cudaMalloc((void **)&d_rows, sizeof rows));
    CUDA_OK(cudaMemcpy(d_ops, ops, (size_t)n_ops * sizeof *ops, cudaMemcpyHostToDevice));
    CUDA_OK(cudaMemcpy(d_rows, rows, sizeof rows, cudaMemcpyHostToDevice));
    CUDA_OK(cudaMemcpy2D(d_logits, (size_t)ld * sizeof *h, h, (size_t)V * sizeof *h,
                         (size_t)V * sizeof *h, S, cudaMemcpyHostToDevice));
    int rc = ifl_cuda_logit_adjust(d_logits, ld, V, d_ops, d_rows, S, 0);
    CHECKF(rc == 0, "ifl_cuda_logit_adjust: %s", cudaGetErrorString((cudaError_t)rc));
    CUDA_OK(cudaDeviceSynchronize());
    CUDA_OK(cudaMemcpy2D(h, (size_t)V * sizeof *h, d_logits, (size_t)ld * sizeof *h,
                         (size_t)V * sizeof *h, S, cudaMemcpyDeviceToHost));
    int rows_differ = 0;
    for (int32_t s = 0; s < S; s++)
        rows_differ += memcmp(h + (size_t)s * V, ref + (size_t)s * V, (size_t)V * sizeof *h) != 0;
    CHECKF(rows_differ == 0, "%d of %d rows adjusted on the device differ from the host's",
           rows_differ, S);
    /* sampling the adjusted rows (gpu_sample uploads them again, the gaps poisoned) */
    ifl_cuda_sample_req req[S];
    const ifl_sampling p = {.temperature = 0.9f, .top_k = 50, .top_p = 0.9f, .min_p = 0.05f};
    for (int32_t s = 0; s < S; s++)
        req[s] = req_of(&p, 77 + (uint64_t)s, (uint64_t)s);
    gpu_sample(ref, req, S, V, out);
    ifl_sampler smp;
    ifl_err err;
    int agree = 0, banned = 0;
    if (ifl_sampler_init(&smp, V, &err)) {
        fprintf(stderr, "%s\n", err.msg);
        exit(1);
    }
    for (int32_t s = 0; s < S; s++) {
        const float *l = ref + (size_t)s * V;
        agree += ifl_sample_u(&smp, l, &p, ifl_philox_uniform(req[s].seed, req[s].draw)) == out[s];
        banned += out[s] >= 0 && out[s] < V && l[out[s]] == -INFINITY;
    }
    printf("logit adjustments: %d ops over %d rows, %d rows differ from the host; sampled: %d of "
           "%d agree with the CPU, %d banned picks\n",
           n_ops, S, rows_differ, agree, S, banned);
    CHECKF(agree * 100 >= S * 98 && banned == 0, "adjusted rows: %d of %d agree, %d banned picks",
           agree, S, banned);
    ifl_sampler_free(&smp);
    for (int32_t s = 0; s < S; s++)
        ifl_seen_free(&seen[s]);
    CUDA_OK(cudaFree(d_ops));
    CUDA_OK(cudaFree(d_rows));
    free(ops);
    free(ref);
}

int main(void)
{
    int n_dev = 0;
    cudaError_t e = cudaGetDeviceCount(&n_dev);
    if (e != cudaSuccess || n_dev == 0) {
        printf("no CUDA device: skipped (%s)\n",
               e != cudaSuccess ? cudaGetErrorString(e) : "no devices");
        return 77;
    }
    size_t scratch = ifl_cuda_sample_scratch_bytes(MAX_S, MAX_V);
    printf("scratch for %d rows of %d: %zu bytes\n", MAX_S, MAX_V, scratch);
    CUDA_OK(cudaMalloc((void **)&d_logits, (size_t)MAX_S * (MAX_V + LD_PAD) * sizeof(float)));
    CUDA_OK(cudaMalloc((void **)&d_req, MAX_S * sizeof(ifl_cuda_sample_req)));
    CUDA_OK(cudaMalloc((void **)&d_tok, MAX_S * sizeof(int32_t)));
    if (scratch)
        CUDA_OK(cudaMalloc(&d_scratch, scratch));
    float *h = malloc((size_t)MAX_S * MAX_V * sizeof *h);
    int32_t *out = malloc(MAX_S * sizeof *out);
    if (!h || !out) {
        fprintf(stderr, "out of memory\n");
        return 1;
    }
    ifl_rng rng;
    ifl_rng_seed(&rng, 2024);

    test_greedy(h, out, &rng);
    test_support(h, out, &rng);
    test_frequencies(h, out);
    test_reproducible(h, out, &rng);
    test_cpu_parity(h, out, &rng);
    test_min_p(h, out, &rng);
    test_logit_adjust(h, out, &rng);

    /* a launch of inactive rows only */
    {
        ifl_cuda_sample_req req[3];
        for (int i = 0; i < 3; i++) {
            req[i] = mkreq(1.0f, 0, 1.0f, 1, (uint64_t)i);
            req[i].active = 0;
        }
        fill_normal(h, 3 * 100, 1.0, &rng);
        gpu_sample(h, req, 3, 100, out);
        CHECK(out[0] == -1 && out[1] == -1 && out[2] == -1);
    }

    free(h);
    free(out);
    CUDA_OK(cudaFree(d_logits));
    CUDA_OK(cudaFree(d_req));
    CUDA_OK(cudaFree(d_tok));
    if (d_scratch)
        CUDA_OK(cudaFree(d_scratch));
    return test_failures ? 1 : 0;
}
