/* logprobs.c: a row's log-sum-exp and its best tokens (logprobs.h).
 *
 * Three passes over the row, each written so that the compiler vectorises it at the baseline
 * instruction set (lanes of LANES floats in plain C, no intrinsics): the maximum; the sum of
 * exp(x - max) with a polynomial exp (exp_nonpos: about 2 ulp, no libm call, so it vectorises
 * without -ffast-math), accumulated in float lanes over blocks of SUM_BLOCK entries and the blocks
 * in double (each float lane adds at most SUM_BLOCK / LANES terms, so the sum's relative error
 * stays near 1e-6 whatever the row's length); and, when best tokens are wanted, one pass that
 * looks at a lane group's entries only when its maximum beats the current n-th best. */
#include "logprobs.h"

#include <math.h>
#include <stdint.h>
#include <string.h>

enum { LANES = 16, SUM_BLOCK = 256 };

/* On x86-64 the log-sum-exp is also compiled for AVX2 and the loader picks the clone the CPU runs
 * (GCC's and clang's target_clones): 64 rows of 50257 took 6.0 ms at the baseline's SSE2 and
 * 2.7 ms with AVX2 on one core of the build machine. Without FMA in the clone nothing is
 * contracted, so both clones compute the same float operations in the same order: the same
 * bits, as the kernel families promise (cpu_isa.h). */
#if defined(__x86_64__) && defined(__linux__) && (defined(__GNUC__) || defined(__clang__))
#define LSE_CLONES __attribute__((target_clones("avx2", "default")))
#else
#define LSE_CLONES
#endif

/* exp(d) for d <= 0 (d below -87 counts as -87: e^-87 ~ 1.6e-38, nothing next to the row's
 * maximum's term 1). d = n ln2 + r with n = round(d / ln2) and |r| <= ln2 / 2 (ln2 in two parts
 * so that n ln2 is exact), e^r by a degree-6 polynomial (the Cephes expf coefficients), 2^n put
 * into the exponent bits. */
static inline float exp_nonpos(float d)
{
    const float round_magic = 12582912.0f; /* 1.5 * 2^23: adding it rounds to an integer */
    /* the clamp on the bits: a float select would not vectorise without -fno-trapping-math. For
     * d <= 0 (and -0, -inf, NaN) the bits as unsigned grow with the magnitude; +0 is 0 */
    uint32_t u;
    memcpy(&u, &d, sizeof u);
    u = u > 0xC2AE0000u ? 0xC2AE0000u : u; /* -87.0f */
    memcpy(&d, &u, sizeof d);
    float n = (d * 1.44269504088896341f + round_magic) - round_magic;
    float r = d - n * 0.693359375f;
    r = r - n * -2.12194440e-4f;
    float p = 1.9875691500e-4f;
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    p = p * r * r + r + 1.0f;
    int32_t bits = ((int32_t)n + 127) << 23; /* n in [-126, 0]: a normal power of two */
    float scale;
    memcpy(&scale, &bits, sizeof scale);
    return p * scale;
}

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

/* sum of exp(row[i] - mx) over n entries (a multiple of LANES), mx at least their maximum. */
static inline float group_sum_exp(const float *row, int32_t n, float mx)
{
    float lane[LANES] = {0};
    for (int32_t i = 0; i < n; i += LANES)
        for (int j = 0; j < LANES; j++)
            lane[j] += exp_nonpos(row[i + j] - mx);
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
LSE_CLONES static float row_lse(const float *row, int32_t n)
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
