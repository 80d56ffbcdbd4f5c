/* rng.h: the engine's random numbers: xoshiro256** seeded through splitmix64.
 *
 * Used by the sampler (one generator per request, so a seeded request draws the same numbers
 * however it is batched) and by make-model (weights from a seed). Not for cryptography. */
#ifndef IFL_RNG_H
#define IFL_RNG_H

#include <math.h>
#include <stdint.h>

typedef struct {
    uint64_t s[4];
} ifl_rng;

static inline uint64_t ifl_splitmix64(uint64_t *x)
{
    uint64_t z = (*x += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static inline void ifl_rng_seed(ifl_rng *r, uint64_t seed)
{
    for (int i = 0; i < 4; i++)
        r->s[i] = ifl_splitmix64(&seed);
}

static inline uint64_t ifl_rng_next(ifl_rng *r)
{
    uint64_t *s = r->s;
    uint64_t x = s[1] * 5;
    uint64_t result = ((x << 7) | (x >> 57)) * 9;
    uint64_t t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = (s[3] << 45) | (s[3] >> 19);
    return result;
}

/* Uniform in [0, 1) with 53 random bits. */
static inline double ifl_rng_uniform(ifl_rng *r)
{
    return (double)(ifl_rng_next(r) >> 11) * (1.0 / 9007199254740992.0);
}

/* Standard normal (Box-Muller; one value per call, the pair's second is discarded). */
static inline double ifl_rng_normal(ifl_rng *r)
{
    double u1 = ifl_rng_uniform(r), u2 = ifl_rng_uniform(r);
    if (u1 < 1e-300)
        u1 = 1e-300;
    return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}

/* Two independent standard normals (both halves of one Box-Muller draw). */
static inline void ifl_rng_normal2(ifl_rng *r, double *z0, double *z1)
{
    double u1 = ifl_rng_uniform(r), u2 = ifl_rng_uniform(r);
    if (u1 < 1e-300)
        u1 = 1e-300;
    double rad = sqrt(-2.0 * log(u1)), th = 6.283185307179586 * u2;
    *z0 = rad * cos(th);
    *z1 = rad * sin(th);
}

#endif
