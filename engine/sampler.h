/* sampler.h: choosing the next token from a row of logits: greedy, temperature, min-p, top-k,
 * top-p (vLLM v1's order: temperature, then min_p and top_k, which both keep "the best", then top_p
 * over the mass that remains).
 *
 * Randomness comes only from the caller's ifl_rng, one per request, so a seeded request draws the
 * same numbers however it is batched. Ties are broken by the lower token id, so results do not
 * depend on sort stability. An ifl_sampler holds scratch for one thread. */
#ifndef IFL_SAMPLER_H
#define IFL_SAMPLER_H

#include <stdint.h>

#include "error.h"
#include "rng.h"

typedef struct {
    float temperature; /* 0: greedy (argmax) */
    int32_t top_k;     /* 0: no limit */
    float top_p;       /* 1: no limit; (0, 1] */
    float min_p;       /* 0: off; (0, 1]: after temperature, keep only tokens whose probability is
                          at least min_p times the most likely token's (p_i/p_max =
                          exp((l_i - l_max)/T) >= min_p, decided as ifl_sampling_min_p_cut says) */
} ifl_sampling;

typedef struct {
    float p; /* logit, then probability */
    int32_t id;
} ifl_sample_cand;

typedef struct {
    int32_t n_vocab;
    ifl_sample_cand *cand; /* (V) */
    float *tmp;            /* (V) */
    float *raw; /* (V) a row as the model wrote it, kept while its adjustments change it in place
                   (backend.h: ifl_backend_draw reads the drawn token's raw logit here) */
} ifl_sampler;

int ifl_sampler_init(ifl_sampler *s, int32_t n_vocab, ifl_err *err);
void ifl_sampler_free(ifl_sampler *s);

/* Checks ranges: temperature in [0, 100], top_k >= 0, top_p in (0, 1], min_p in [0, 1]. */
int ifl_sampling_validate(const ifl_sampling *p, ifl_err *err);

/* Picks a token from logits (V). Greedy draws no random number; every other mode draws one. */
int32_t ifl_sample(ifl_sampler *s, const float *logits, const ifl_sampling *p, ifl_rng *rng);

/* The same with the uniform number u in [0, 1) given (ignored when greedy): what the batcher and
 * generate use, with u = ifl_philox_uniform(seed, draw) (philox.h). */
int32_t ifl_sample_u(ifl_sampler *s, const float *logits, const ifl_sampling *p, double u);

/* min_p as a cut on d = (l_i - l_max) x (1 / T), both in float: a token is kept when d >= cut,
 * cut = logf(min_p) (-inf when min_p is 0). The CPU sampler and the CUDA kernel (which gets the
 * cut computed here) compare the same floats, so they keep the same tokens. */
float ifl_sampling_min_p_cut(const ifl_sampling *p);

/* 1 when p picks the argmax without drawing (temperature 0 or top_k 1). */
static inline int ifl_sampling_is_greedy(const ifl_sampling *p)
{
    return p->temperature <= 0.0f || p->top_k == 1;
}

#endif
