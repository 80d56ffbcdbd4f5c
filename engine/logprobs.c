/* logprobs.c: a row's log-sum-exp and its best tokens (logprobs.h).
 *
 * Three passes over the row: the maximum (lanes of LANES floats in plain C, which the compiler
 * vectorises at the baseline instruction set); the sum of exp(x - max) with the current kernel
 * family's exp (cpu_kernels.h, so --isa / INFLIGHT_ISA choose and test it like every kernel),
 * accumulated in float lanes over blocks of SUM_BLOCK entries and the blocks in double (each
 * float lane adds at most SUM_BLOCK / LANES terms, so the sum's relative error stays near 1e-6
 * whatever the row's length); and, when best tokens are wanted, one pass that looks at a lane
 * group's entries only when its maximum beats the current n-th best. */
#include "logprobs.h"

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "cpu_kernels.h"

enum { LANES = 16, SUM_BLOCK = 256 };

/* x's bits as an int32 that orders as the floats do (NaN aside): negative floats' magnitude bits
 * flipped. Its own inverse. The maximum is taken over these keys because GCC vectorises an int32
 * max reduction but not a float one (without -ffinite-math-only). */
static inline int32_t order_key(int32_t bits)
{
    return bits ^ (int32_t)((uint32_t)(bits >> 31) >> 1);
}

/* The maximum of n entries over their order keys (n a multiple of LANES, at least LANES). */
static inline float group_max(const float *row, int32_t n)
{
    int32_t lane[LANES];
    for (int j = 0; j < LANES; j++)
        lane[j] = INT32_MIN;
    for (int32_t i = 0; i < n; i += LANES)
        for (int j = 0; j < LANES; j++) {
            int32_t b;
            memcpy(&b, &row[i + j], sizeof b);
            b = order_key(b);
            lane[j] = b > lane[j] ? b : lane[j];
        }
    int32_t m = INT32_MIN;
    for (int j = 0; j < LANES; j++)
        m = lane[j] > m ? lane[j] : m;
    m = order_key(m);
    float mx;
    memcpy(&mx, &m, sizeof mx);
    return mx;
}

/* sum of exp(row[i] - mx) over n entries (a multiple of LANES, at most SUM_BLOCK), mx at least
 * their maximum: the differences into a block on the stack, e^x by the current kernel family's
 * exp (cpu_kernels.h: vectorised for the family's instruction set, picked with the others by
 * --isa / INFLIGHT_ISA), the sum in float lanes. */
static float group_sum_exp(const float *row, int32_t n, float mx)
{
    float d[SUM_BLOCK] = {0}; /* (zeroed: GCC cannot see that the exp writes what it reads) */
    for (int32_t i = 0; i < n; i++)
        d[i] = row[i] - mx;
    ifl_exp(d, d, (size_t)n);
    float lane[LANES] = {0};
    for (int32_t i = 0; i < n; i += LANES)
        for (int j = 0; j < LANES; j++)
            lane[j] += d[i + j];
    float s = 0;
    for (int j = 0; j < LANES; j++)
        s += lane[j];
    return s;
}

/* Adds a block's sum s, taken relative to its maximum bmax, to the running (sum, max). */
static void lse_add(double *sum, float *mx, double s, float bmax)
{
    if (bmax == -INFINITY)
        return;
    if (bmax > *mx) {
        *sum = *sum * exp((double)*mx - (double)bmax) + s;
        *mx = bmax;
    } else {
        *sum += s * exp((double)bmax - (double)*mx);
    }
}

/* The row's log-sum-exp in one pass over memory: block by block (SUM_BLOCK entries, still in L1
 * when the block's sum reads them again), each block's sum relative to its own maximum, the
 * blocks rescaled to the running maximum in double. A row with +inf has +inf; one of -inf, -inf. */
static float row_lse(const float *row, int32_t n)
{
    double sum = 0;
    float mx = -INFINITY;
    int32_t i = 0;
    while (i + LANES <= n) {
        int32_t len = n - i >= SUM_BLOCK ? SUM_BLOCK : (n - i) / LANES * LANES;
        float bmax = group_max(row + i, len);
        if (bmax == INFINITY)
            return INFINITY;
        if (bmax != -INFINITY)
            lse_add(&sum, &mx, group_sum_exp(row + i, len, bmax), bmax);
        i += len;
    }
    for (; i < n; i++) {
        if (row[i] == INFINITY)
            return INFINITY;
        lse_add(&sum, &mx, 1.0, row[i]);
    }
    return mx == -INFINITY ? mx : mx + (float)log(sum);
}

/* Puts (id, x) into best (count entries, best first, at most cap), if it belongs there: after
 * every entry at least as large (those have lower ids: the row is scanned in id order). */
static void top_insert(ifl_token_logprob *best, int32_t *count, int32_t cap, int32_t id, float x)
{
    int32_t at = *count < cap ? *count : cap - 1;
    if (*count == cap && !(x > best[cap - 1].logprob))
        return;
    while (at > 0 && x > best[at - 1].logprob) {
        best[at] = best[at - 1];
        at--;
    }
    best[at] = (ifl_token_logprob){.token = id, .logprob = x};
    if (*count < cap)
        (*count)++;
}

/* The n best of the row (values, not yet logprobs), best first, ties to the lower id. A group of
 * LANES entries is looked at one by one only when its maximum beats the n-th best so far. */
static void row_top(const float *row, int32_t n_vocab, int32_t n, ifl_token_logprob *best)
{
    int32_t count = 0, i = 0;
    for (; i < n_vocab && count < n; i++)
        top_insert(best, &count, n, i, row[i]);
    for (; i + LANES <= n_vocab; i += LANES) {
        float m = row[i];
        for (int j = 1; j < LANES; j++)
            m = row[i + j] > m ? row[i + j] : m;
        if (!(m > best[n - 1].logprob))
            continue;
        for (int j = 0; j < LANES; j++)
            top_insert(best, &count, n, i + j, row[i + j]);
    }
    for (; i < n_vocab; i++)
        top_insert(best, &count, n, i, row[i]);
}

void ifl_logprob_row(const float *row, int32_t n_vocab, int32_t n_top, ifl_logprob *out,
                     float *lse)
{
    float l = row_lse(row, n_vocab);
    if (n_top < 0)
        n_top = 0;
    if (n_top > IFL_MAX_TOP_LOGPROBS)
        n_top = IFL_MAX_TOP_LOGPROBS;
    if (n_top > n_vocab)
        n_top = n_vocab;
    out->token = -1;
    out->logprob = 0;
    out->n_top = n_top;
    if (n_top > 0) {
        row_top(row, n_vocab, n_top, out->top);
        for (int32_t k = 0; k < n_top; k++)
            out->top[k].logprob -= l;
    }
    *lse = l;
}

void ifl_logprob_score(const float *row, int32_t n_vocab, int32_t token, int32_t n_top,
                       ifl_logprob *out)
{
    float lse;
    ifl_logprob_row(row, n_vocab, n_top, out, &lse);
    ifl_logprob_set_token(out, token, row[token], lse);
}
