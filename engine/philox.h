/* philox.h: Philox4x32-10, the counter-based random generator of Salmon et al. (SC'11), for the
 * sampler's per-request streams.
 *
 * A counter-based generator has no state to carry: draw n of a request is a pure function of
 * (seed, n). The CPU sampler and the CUDA sampling kernel compute it from the same code (this
 * header compiles as C and as CUDA), so a seeded request draws the same numbers on either backend,
 * in any batch, after any preemption. Not for cryptography. */
#ifndef IFL_PHILOX_H
#define IFL_PHILOX_H

#include <stdint.h>

#ifdef __CUDACC__
#define IFL_HD __host__ __device__
#else
#define IFL_HD
#endif

/* One Philox4x32 block: 10 rounds over counter ctr with key key, into out. */
IFL_HD static inline void ifl_philox4x32_10(const uint32_t ctr[4], const uint32_t key[2],
                                            uint32_t out[4])
{
    uint32_t c0 = ctr[0], c1 = ctr[1], c2 = ctr[2], c3 = ctr[3];
    uint32_t k0 = key[0], k1 = key[1];
    for (int r = 0; r < 10; r++) {
        uint64_t p0 = (uint64_t)0xD2511F53u * c0;
        uint64_t p1 = (uint64_t)0xCD9E8D57u * c2;
        uint32_t hi0 = (uint32_t)(p0 >> 32), lo0 = (uint32_t)p0;
        uint32_t hi1 = (uint32_t)(p1 >> 32), lo1 = (uint32_t)p1;
        c0 = hi1 ^ c1 ^ k0;
        c1 = lo1;
        c2 = hi0 ^ c3 ^ k1;
        c3 = lo0;
        k0 += 0x9E3779B9u;
        k1 += 0xBB67AE85u;
    }
    out[0] = c0;
    out[1] = c1;
    out[2] = c2;
    out[3] = c3;
}

/* 53 uniformly random bits: draw `draw` of the stream keyed by `seed`. */
IFL_HD static inline uint64_t ifl_philox_bits53(uint64_t seed, uint64_t draw)
{
    uint32_t ctr[4] = {(uint32_t)draw, (uint32_t)(draw >> 32), 0x5a4d504cu /* "sampling" lane */,
                       0};
    uint32_t key[2] = {(uint32_t)seed, (uint32_t)(seed >> 32)};
    uint32_t out[4];
    ifl_philox4x32_10(ctr, key, out);
    return (((uint64_t)out[0] << 32) | out[1]) >> 11;
}

/* Uniform in [0, 1): ifl_philox_bits53 / 2^53. */
IFL_HD static inline double ifl_philox_uniform(uint64_t seed, uint64_t draw)
{
    return (double)ifl_philox_bits53(seed, draw) * (1.0 / 9007199254740992.0);
}

#endif
