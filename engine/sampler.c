/* sampler.c: greedy / temperature / min-p / top-k / top-p sampling (see sampler.h).
 *
 * min-p: a cut on the scaled logit (ifl_sampling_min_p_cut) as the weights are computed.
 * top-k: quickselect of the k best logits. top-p: the nucleus is the shortest prefix, best first,
 * whose probability reaches top_p; to avoid sorting the whole vocabulary, a threshold pass first
 * keeps only probabilities >= tau, lowering tau until the kept mass alone reaches top_p (then the
 * nucleus lies inside the kept set), and sorts just those. */
#include "sampler.h"

#include <math.h>
#include "cpu_kernels.h"
#include <stdlib.h>
#include <string.h>

int ifl_sampler_init(ifl_sampler *s, int32_t n_vocab, ifl_err *err)
{
    memset(s, 0, sizeof *s);
    s->n_vocab = n_vocab;
    s->cand = malloc((size_t)n_vocab * sizeof *s->cand);
    s->tmp = malloc((size_t)n_vocab * sizeof *s->tmp);
    s->raw = malloc((size_t)n_vocab * sizeof *s->raw);
    if (!s->cand || !s->tmp || !s->raw) {
        ifl_sampler_free(s);
        return ifl_err_set(err, "sampler: out of memory for %d candidates", n_vocab);
    }
    return 0;
}

void ifl_sampler_free(ifl_sampler *s)
{
    free(s->cand);
    free(s->tmp);
    free(s->raw);
    memset(s, 0, sizeof *s);
}

int ifl_sampling_validate(const ifl_sampling *p, ifl_err *err)
{
    if (!(p->temperature >= 0.0f && p->temperature <= 100.0f))
        return ifl_err_set(err, "temperature %g is outside [0, 100]", (double)p->temperature);
    if (p->top_k < 0)
        return ifl_err_set(err, "top_k %d is negative", p->top_k);
    if (!(p->top_p > 0.0f && p->top_p <= 1.0f))
        return ifl_err_set(err, "top_p %g is outside (0, 1]", (double)p->top_p);
    if (!(p->min_p >= 0.0f && p->min_p <= 1.0f))
        return ifl_err_set(err, "min_p %g is outside [0, 1]", (double)p->min_p);
    return 0;
}

/* Best first: higher value, then lower id. */
static inline int better(const ifl_sample_cand *a, const ifl_sample_cand *b)
{
    return a->p > b->p || (a->p == b->p && a->id < b->id);
}

static int cmp_cand(const void *pa, const void *pb)
{
    const ifl_sample_cand *a = pa, *b = pb;
    return better(a, b) ? -1 : better(b, a) ? 1 : 0;
}

static int cmp_id(const void *pa, const void *pb)
{
    const ifl_sample_cand *a = pa, *b = pb;
    return (a->id > b->id) - (a->id < b->id);
}

/* Moves the k best of c[0..n) to the front, in any order. */
static void select_top(ifl_sample_cand *c, int32_t n, int32_t k)
{
    int32_t lo = 0, hi = n - 1;
    while (lo < hi) {
        ifl_sample_cand pivot = c[lo + (hi - lo) / 2];
        int32_t i = lo, j = hi;
        while (i <= j) {
            while (better(&c[i], &pivot))
                i++;
            while (better(&pivot, &c[j]))
                j--;
            if (i <= j) {
                ifl_sample_cand t = c[i];
                c[i] = c[j];
                c[j] = t;
                i++;
                j--;
            }
        }
        if (k - 1 <= j)
            hi = j;
        else if (k - 1 >= i)
            lo = i;
        else
            break;
    }
}

int32_t ifl_sample(ifl_sampler *s, const float *logits, const ifl_sampling *p, ifl_rng *rng)
{
    return ifl_sample_u(s, logits, p, ifl_sampling_is_greedy(p) ? 0.0 : ifl_rng_uniform(rng));
}

/* The weights of the candidates c[0..n): p = exp((l - mx) / T) from the logits row[0..n) (ids
 * 0..n-1) or, without a row, the logits in c[i].p (the top-k). With min_p (cut > -inf) only those
 * with (l - mx) / T >= cut stay, in the same order. Returns how many stay; *total is their mass. */
static int32_t weigh(ifl_sampler *s, const float *row, int32_t n, float inv_t, float cut,
                     double *total)
{
    ifl_sample_cand *c = s->cand;
    float *d = s->tmp;
    float mx = -INFINITY;
    if (row)
        mx = ifl_max(row, (size_t)n);
    else
        for (int32_t i = 0; i < n; i++)
            mx = fmaxf(mx, c[i].p);
    int32_t m = 0;
    if (row && cut == -INFINITY) { /* every token stays: one pass the compiler vectorises */
        for (int32_t i = 0; i < n; i++)
            d[i] = (row[i] - mx) * inv_t;
        m = n;
    } else {
        for (int32_t i = 0; i < n; i++) {
            float x = ((row ? row[i] : c[i].p) - mx) * inv_t;
            if (x >= cut || cut == -INFINITY) { /* (without min_p even NaNs stay, as before) */
                c[m].id = row ? i : c[i].id;
                d[m++] = x;
            }
        }
    }
    ifl_exp(d, d, (size_t)m);
    double sum = 0;
    if (row && cut == -INFINITY)
        for (int32_t i = 0; i < m; i++)
            c[i] = (ifl_sample_cand){d[i], i};
    else
        for (int32_t i = 0; i < m; i++)
            c[i].p = d[i];
    for (int32_t i = 0; i < m; i++)
        sum += c[i].p;
    *total = sum;
    return m;
}

float ifl_sampling_min_p_cut(const ifl_sampling *p)
{
    return p->min_p > 0.0f ? logf(p->min_p) : -INFINITY;
}

/* The first of the largest logits (NaNs never win). */
static int32_t argmax(const float *logits, int32_t V)
{
    float mx = ifl_max(logits, (size_t)V);
    for (int32_t i = 0; i < V; i++)
        if (logits[i] == mx)
            return i;
    return 0;
}

int32_t ifl_sample_u(ifl_sampler *s, const float *logits, const ifl_sampling *p, double u)
{
    int32_t V = s->n_vocab;
    if (ifl_sampling_is_greedy(p))
        return argmax(logits, V);
    ifl_sample_cand *c = s->cand;
    float inv_t = 1.0f / p->temperature, cut = ifl_sampling_min_p_cut(p);
    int32_t n;
    double total = 0;
    int reordered = 0; /* candidates no longer in token-id order */
    if (p->top_k > 0 && p->top_k < V) { /* min_p and top_k both keep the best: the shorter wins */
        for (int32_t i = 0; i < V; i++)
            c[i] = (ifl_sample_cand){logits[i], i};
        select_top(c, V, p->top_k);
        reordered = 1;
        n = weigh(s, NULL, p->top_k, inv_t, cut, &total);
    } else {
        n = weigh(s, logits, V, inv_t, cut, &total);
    }
    if (n == 0) /* min_p kept nothing: every logit NaN or -inf (all banned) */
        return argmax(logits, V);
    if (p->top_p < 1.0f) {
        double want = (double)p->top_p * total;
        if (n > 256) {
            float tau = 0.5f; /* the best candidate has p = 1 */
            for (;;) {
                double mass = 0;
                for (int32_t i = 0; i < n; i++)
                    if (c[i].p >= tau)
                        mass += c[i].p;
                if (mass >= want || tau == 0.0f)
                    break;
                tau = tau < 1e-30f ? 0.0f : tau * (1.0f / 16);
            }
            int32_t m = 0;
            for (int32_t i = 0; i < n; i++)
                if (c[i].p >= tau)
                    c[m++] = c[i];
            n = m;
        }
        qsort(c, (size_t)n, sizeof *c, cmp_cand);
        reordered = 1;
        double cum = 0;
        int32_t keep = 0;
        while (keep < n) {
            cum += c[keep].p;
            keep++;
            if (cum >= want)
                break;
        }
        n = keep;
        total = cum;
    }
    /* Walk the candidates in token-id order: the draw then does not depend on how the selection
     * above happened to order them, which tiny changes in the logits (another batch size, another
     * kernel) could alter. */
    if (reordered)
        qsort(c, (size_t)n, sizeof *c, cmp_id);
    u *= total;
    double cum = 0;
    for (int32_t i = 0; i < n; i++) {
        cum += c[i].p;
        if (u < cum)
            return c[i].id;
    }
    return c[n - 1].id;
}
