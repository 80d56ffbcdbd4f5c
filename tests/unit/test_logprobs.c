/* test_logprobs.c: a row's log-softmax (logprobs.h) against a float64 computation of the same
 * float row: random rows of small and GPT-2-sized vocabularies at ordinary and large magnitudes,
 * rows with -inf entries, exp's whole range (rows of one 0 and entries d <= 0), ties (to the lower
 * id), and n_top 0 and 20, on each kernel family (whose exp the sum uses; INFLIGHT_ISA picks it).
 * The float result carries the rounding of raw - lse in float: the bound is 1e-5 plus two float
 * epsilons of the operands' magnitudes (nothing at ordinary magnitudes, ~1e-3 at +-1e4). */
#include <float.h>
#include <math.h>
#include <stdlib.h>

#include "logprobs.h"
#include "rng.h"
#include "testutil.h"

/* The float64 log-sum-exp of row (entries of -inf contribute nothing). */
static double ref_lse(const float *row, int32_t n)
{
    double mx = -INFINITY, sum = 0;
    for (int32_t i = 0; i < n; i++)
        mx = row[i] > mx ? row[i] : mx;
    for (int32_t i = 0; i < n; i++)
        sum += exp((double)row[i] - mx);
    return mx + log(sum);
}

static double tol_of(double x, double lse)
{
    return 1e-5 + 2.0 * FLT_EPSILON * (fabs(x) + fabs(lse));
}

static const float *cmp_row;
/* Best first: higher value, then lower id. */
static int by_value_then_id(const void *a, const void *b)
{
    int32_t i = *(const int32_t *)a, j = *(const int32_t *)b;
    if (cmp_row[i] != cmp_row[j])
        return cmp_row[i] > cmp_row[j] ? -1 : 1;
    return i < j ? -1 : i > j;
}

/* Scores row at token with n_top best and checks everything against the reference. */
static void check_row(const char *what, const float *row, int32_t n, int32_t token, int32_t n_top)
{
    ifl_logprob e;
    ifl_logprob_score(row, n, token, n_top, &e);
    double lse = ref_lse(row, n);
    double want = (double)row[token] - lse;
    CHECKF(e.token == token, "%s: token %d", what, e.token);
    CHECKF(fabs((double)e.logprob - want) <= tol_of(row[token], lse),
           "%s (V %d): logprob %.9g, float64 %.9g", what, n, (double)e.logprob, want);
    int32_t want_top = n_top < n ? n_top : n;
    CHECKF(e.n_top == want_top, "%s: n_top %d, want %d", what, e.n_top, want_top);
    int32_t *ids = test_xmalloc((size_t)n * sizeof *ids);
    for (int32_t i = 0; i < n; i++)
        ids[i] = i;
    cmp_row = row;
    qsort(ids, (size_t)n, sizeof *ids, by_value_then_id);
    for (int32_t k = 0; k < e.n_top && k < want_top; k++) {
        CHECKF(e.top[k].token == ids[k], "%s (V %d): top %d is %d, want %d", what, n, k,
               e.top[k].token, ids[k]);
        double w = (double)row[ids[k]] - lse;
        CHECKF((double)e.top[k].logprob == w || fabs((double)e.top[k].logprob - w) <=
                                                     tol_of(row[ids[k]], lse),
               "%s: top %d logprob %.9g, float64 %.9g", what, k, (double)e.top[k].logprob, w);
    }
    free(ids);
}

static float gauss(ifl_rng *r)
{
    double u1 = ((double)(ifl_rng_next(r) >> 11) + 1.0) / 9007199254740993.0;
    double u2 = (double)(ifl_rng_next(r) >> 11) / 9007199254740992.0;
    return (float)(sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2));
}

static void random_rows(ifl_rng *r, float *row)
{
    static const int32_t sizes[] = {1, 2, 15, 16, 17, 255, 256, 257, 1000, 50257};
    static const float scales[] = {1.0f, 5.0f, 30.0f, 1e4f};
    char what[96];
    for (size_t si = 0; si < sizeof sizes / sizeof sizes[0]; si++)
        for (size_t ci = 0; ci < sizeof scales / sizeof scales[0]; ci++) {
            int32_t n = sizes[si];
            float offset = ci == 3 ? 0.0f : -60.0f; /* GPT-2's logits sit well below 0 */
            for (int32_t i = 0; i < n; i++)
                row[i] = offset + scales[ci] * gauss(r);
            int32_t tok = (int32_t)(ifl_rng_next(r) % (uint64_t)n);
            snprintf(what, sizeof what, "random x%g", (double)scales[ci]);
            check_row(what, row, n, tok, 0);
            check_row(what, row, n, tok, 5);
            check_row(what, row, n, tok, IFL_MAX_TOP_LOGPROBS);
        }
}

/* exp over its range: one entry 0 (the max) and the rest d, for d from 0 down past -87. */
static void exp_range(float *row)
{
    for (int32_t n = 2; n <= 256; n += 254)
        for (float d = 0.0f; d > -100.0f; d -= 0.0371f) {
            row[0] = 0.0f;
            for (int32_t i = 1; i < n; i++)
                row[i] = d;
            check_row("exp range", row, n, n - 1, 1);
        }
}

static void special_rows(ifl_rng *r, float *row)
{
    int32_t n = 50257;
    for (int32_t i = 0; i < n; i++) /* ties everywhere: the lowest ids win */
        row[i] = 1.5f;
    check_row("all equal", row, n, 777, IFL_MAX_TOP_LOGPROBS);
    for (int32_t i = 0; i < n; i++) /* a few values, many ties among the best */
        row[i] = (float)(ifl_rng_next(r) % 4);
    check_row("four values", row, n, 3, IFL_MAX_TOP_LOGPROBS);
    for (int32_t i = 0; i < n; i++) /* banned entries: -inf everywhere but a few */
        row[i] = i % 1000 == 7 ? gauss(r) : -INFINITY;
    check_row("mostly -inf", row, n, 7, IFL_MAX_TOP_LOGPROBS);
    ifl_logprob e;
    ifl_logprob_score(row, n, 8, 3, &e);
    CHECKF(e.logprob == -INFINITY, "a -inf entry's logprob is %g", (double)e.logprob);
    for (int32_t i = 0; i < n; i++)
        row[i] = -INFINITY;
    row[n - 1] = -3.0f;
    check_row("one finite, last", row, n, n - 1, 2);
    row[0] = 0.0f; /* n_top past the vocabulary: clamped to it */
    ifl_logprob_score(row, 1, 0, IFL_MAX_TOP_LOGPROBS, &e);
    CHECKF(e.n_top == 1 && e.top[0].token == 0 && e.top[0].logprob == 0.0f && e.logprob == 0.0f,
           "V 1: n_top %d, logprob %g", e.n_top, (double)e.logprob);
    float lse;
    ifl_logprob_row(row, 1, 0, &e, &lse);
    CHECKF(e.token == -1 && e.logprob == 0.0f && e.n_top == 0 && lse == 0.0f,
           "row without a token: token %d, lse %g", e.token, (double)lse);
}

int main(void)
{
    test_select_isa("test_logprobs"); /* the exp of the sum is the kernel family's */
    float *row = test_xmalloc(50257 * sizeof *row);
    ifl_rng r;
    ifl_rng_seed(&r, 2024);
    random_rows(&r, row);
    exp_range(row);
    special_rows(&r, row);
    free(row);
    return test_finish("test_logprobs");
}
