/* sample.cu: the next token of each row of logits, on the device (ifl_cuda_sample, kernels.h).
 *
 * Grid: one block of 1024 threads per row; no global scratch. Every phase reads the row's logits
 * straight from global memory (a row is 200 KB at V = 50257, so repeated passes hit L2), coalesced
 * (thread t takes ids t, t + 1024, ...) except the last, where each thread owns a contiguous id
 * range. Per row:
 *   1. argmax (max of (key, ~id) packed in 64 bits): greedy rows stop here;
 *   min_p: a token below its cut weighs 0 (key_mass) in every phase below, so it is never kept;
 *   2. top-k: radix select of the k-th best key, 4 passes of 8 bits over a 256-bin shared
 *      histogram of counts;
 *   3. top-p: the same radix select over histograms of probability mass (64-bit fixed point);
 *   4. the draw: each thread sums the kept mass of its id range, a block-wide exclusive scan
 *      orders the ranges by id, and the thread whose range holds the target walks it.
 * The key of a logit is its f32 bits mapped to an order-preserving uint32 (-0 taken as +0), so
 * "better" is "larger key, then lower id". A token's weight is the fixed-point probability
 * q = floor(2^40 exp((l - max) / T)), a pure function of its key (the argmax weighs 2^40; sums stay
 * below V 2^40 < 2^64 for V < 2^24). Every sum is an integer sum (shared-memory atomics on
 * integers, integer scans), so the result does not depend on thread scheduling. */
#include <math.h>
#include <stdint.h>

#include <cuda_runtime.h>

#include "kernels.h"
#include "philox.h"

namespace
{

typedef unsigned long long u64;

constexpr int kBlock = 1024;
constexpr int kWarps = kBlock / 32;
constexpr int kBins = 256;
constexpr u64 kOne = 1ull << 40; /* the weight of the argmax: p = 1 */

struct Shared {
    u64 hist[kBins];
    u64 warp[kWarps];
    u64 total;
    u64 best;
    u64 excl;
    uint32_t digit;
    int32_t chosen;
};

/* Order-preserving map of f32 bits to uint32: larger float, larger key. -0 is taken as +0, and
 * NaN as key 0, below -inf: its weight is 0 and it is never the argmax (unless all are NaN). */
__device__ __forceinline__ uint32_t float_key(float f)
{
    uint32_t u = __float_as_uint(f);
    if ((u & 0x7fffffffu) > 0x7f800000u)
        return 0;
    if (u == 0x80000000u)
        u = 0;
    return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

__device__ __forceinline__ float key_float(uint32_t k)
{
    return __uint_as_float((k & 0x80000000u) ? (k & 0x7fffffffu) : ~k);
}

/* The fixed-point weight of key: floor(exp((l - m) * inv_t) * 2^40), exactly 2^40 for the max, 0
 * below min_p's cut ((l - m) * inv_t < cut: ifl_sampling_min_p_cut, -inf without min_p). Not
 * inlined, so that every phase uses the one compiled copy and gets bit-identical weights. */
__device__ __noinline__ u64 key_mass(uint32_t key, uint32_t maxkey, float m, float inv_t,
                                     float cut)
{
    if (key == maxkey)
        return kOne;
    float d = __fmul_rn(__fsub_rn(key_float(key), m), inv_t);
    if (!(d >= cut)) /* as the CPU sampler compares them */
        return 0;
    float p = expf(d);
    if (!(p > 0.0f))
        return 0;
    return __float2ull_rz(fminf(p, 1.0f) * 1099511627776.0f); /* 2^40: exact scaling */
}

__device__ __forceinline__ u64 warp_incl_scan(u64 v)
{
    const int lane = threadIdx.x & 31;
    for (int o = 1; o < 32; o <<= 1) {
        u64 y = __shfl_up_sync(0xffffffffu, v, o);
        if (lane >= o)
            v += y;
    }
    return v;
}

__device__ __forceinline__ u64 warp_max(u64 v)
{
    for (int o = 16; o > 0; o >>= 1) {
        u64 y = __shfl_xor_sync(0xffffffffu, v, o);
        v = y > v ? y : v;
    }
    return v;
}

/* Exclusive scan of v over the block in thread order; *total gets the sum. All threads call it. */
__device__ u64 block_excl_scan(u64 v, Shared &sh, u64 *total)
{
    const int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
    u64 x = warp_incl_scan(v);
    if (lane == 31)
        sh.warp[w] = x;
    __syncthreads();
    if (w == 0) /* each lane reads and rewrites only its own slot */
        sh.warp[lane] = warp_incl_scan(sh.warp[lane]);
    __syncthreads();
    u64 off = w ? sh.warp[w - 1] : 0;
    *total = sh.warp[kWarps - 1];
    __syncthreads(); /* sh.warp is free again */
    return off + x - v;
}

/* nucleus size in mass: floor(top_p * total), within [1, total] */
__device__ __forceinline__ u64 nucleus_want(float top_p, u64 total)
{
    double w = (double)top_p * (double)total;
    if (!(w >= 1.0))
        return 1;
    if (w >= (double)total)
        return total;
    u64 want = (u64)w;
    return want < total ? want : total;
}

struct Sel {
    uint32_t key; /* the threshold key */
    u64 rem;      /* what is still needed at the threshold key (count or mass), >= 1 */
};

/* Radix select, most significant byte first, of the threshold key in best-first (descending key)
 * order where the running weight first reaches `need`. Every thread of the block calls it and gets
 * the same result.
 * Counts (mass false): every token weighs 1 and need is k; the result is the k-th best key, and rem
 * is how many tokens of that key are taken (the lowest ids).
 * Mass: tokens weigh key_mass; if has_lo, only tokens with key > lo_key count, plus lo_ties tokens
 * of key lo_key (the top-k set); need is nucleus_want(top_p, total weight), known after the first
 * pass. */
__device__ Sel radix_select(const float *__restrict__ x, int32_t V, bool mass, u64 need,
                            float top_p, bool has_lo, uint32_t lo_key, u64 lo_ties, uint32_t maxkey,
                            float m, float inv_t, float cut, Shared &sh)
{
    const int t = threadIdx.x;
    const u64 lo_w = (mass && has_lo) ? lo_ties * key_mass(lo_key, maxkey, m, inv_t, cut) : 0;
    uint32_t prefix = 0, mask = 0;
    for (int shift = 24; shift >= 0; shift -= 8) {
        if (t < kBins)
            sh.hist[t] = 0;
        __syncthreads();
        /* Runs of one digit are summed in a register before the atomic: in the first pass most
         * logits share their top byte, and this keeps them from serialising on one bin. */
        int cur = -1;
        u64 acc = 0;
        for (int32_t i = t; i < V; i += kBlock) {
            uint32_t key = float_key(x[i]);
            if ((key & mask) != prefix)
                continue;
            u64 wt = 1;
            if (mass) {
                if (has_lo && key <= lo_key)
                    continue;
                wt = key_mass(key, maxkey, m, inv_t, cut);
                if (wt == 0)
                    continue;
            }
            int d = (int)((key >> shift) & 0xffu);
            if (d != cur) {
                if (cur >= 0)
                    atomicAdd(&sh.hist[cur], acc);
                cur = d;
                acc = 0;
            }
            acc += wt;
        }
        if (cur >= 0)
            atomicAdd(&sh.hist[cur], acc);
        if (t == 0 && lo_w != 0 && (lo_key & mask) == prefix)
            atomicAdd(&sh.hist[(lo_key >> shift) & 0xffu], lo_w);
        __syncthreads();

        /* Suffix sums over the digits, highest first: thread t < 256 takes digit 255 - t. */
        const int lane = t & 31, w = t >> 5;
        u64 v = t < kBins ? sh.hist[kBins - 1 - t] : 0;
        u64 incl = warp_incl_scan(v);
        if (lane == 31 && w < kBins / 32)
            sh.warp[w] = incl;
        __syncthreads();
        if (t < kBins)
            for (int j = 0; j < w; j++)
                incl += sh.warp[j];
        u64 excl = incl - v;
        if (t == kBins - 1)
            sh.total = incl;
        __syncthreads();
        if (mass && shift == 24)
            need = nucleus_want(top_p, sh.total);
        /* exactly one digit has excl < need <= incl, as need <= the total of this pass */
        if (t < kBins && excl < need && need <= incl) {
            sh.digit = (uint32_t)(kBins - 1 - t);
            sh.excl = excl;
        }
        __syncthreads();
        prefix |= sh.digit << shift;
        mask |= 0xffu << shift;
        need -= sh.excl;
    }
    return Sel{prefix, need};
}

__global__ void __launch_bounds__(kBlock)
    sample_kernel(int32_t *__restrict__ tokens, const float *__restrict__ logits,
                  const ifl_cuda_sample_req *__restrict__ reqs, int32_t V, int32_t ld)
{
    __shared__ Shared sh;
    const int t = threadIdx.x, lane = t & 31, w = t >> 5;
    const int32_t s = (int32_t)blockIdx.x;
    const ifl_cuda_sample_req r = reqs[s];
    if (!r.active || V <= 0) {
        if (t == 0)
            tokens[s] = -1;
        return;
    }
    const float *__restrict__ x = logits + (size_t)s * (size_t)ld;

    /* 1. argmax: the largest (key, ~id), i.e. the best key, lowest id on ties */
    u64 best = 0;
    for (int32_t i = t; i < V; i += kBlock) {
        u64 c = ((u64)float_key(x[i]) << 32) | (u64)(~(uint32_t)i);
        best = c > best ? c : best;
    }
    best = warp_max(best);
    if (lane == 0)
        sh.warp[w] = best;
    __syncthreads();
    if (w == 0) {
        best = warp_max(sh.warp[lane]);
        if (lane == 0)
            sh.best = best;
    }
    __syncthreads();
    best = sh.best;
    const uint32_t maxkey = (uint32_t)(best >> 32);
    const int32_t best_id = (int32_t) ~(uint32_t)best;
    if (r.temperature <= 0.0f || r.top_k == 1) {
        if (t == 0)
            tokens[s] = best_id;
        return;
    }
    const float m = key_float(maxkey);
    const float inv_t = 1.0f / r.temperature;
    /* min_p: a token below the cut weighs 0 in every phase */
    const float cut = r.min_p > 0.0f ? r.min_p_cut : -INFINITY;

    /* 2, 3: the kept set is every token with key > fkey plus the fties lowest ids of key fkey
     * (without top-k and top-p: fkey 0 and fties V, everything) */
    uint32_t fkey = 0;
    u64 fties = (u64)V;
    const bool has_k = r.top_k > 0 && r.top_k < V;
    if (has_k) {
        Sel k = radix_select(x, V, false, (u64)r.top_k, 1.0f, false, 0, 0, maxkey, m, inv_t, cut,
                             sh);
        fkey = k.key;
        fties = k.rem;
    }
    if (r.top_p < 1.0f) {
        Sel p =
            radix_select(x, V, true, 0, r.top_p, has_k, fkey, fties, maxkey, m, inv_t, cut, sh);
        /* at the threshold every token weighs the same: take the fewest lowest ids reaching rem */
        u64 q = key_mass(p.key, maxkey, m, inv_t, cut);
        u64 n = q ? (p.rem + q - 1) / q : 1;
        if (has_k && p.key == fkey && n > fties)
            n = fties;
        fkey = p.key;
        fties = n;
    }

    /* 4. the draw over the kept tokens in id order: thread t owns ids [lo, hi) */
    const u64 qf = key_mass(fkey, maxkey, m, inv_t, cut);
    const int32_t chunk = (V + kBlock - 1) / kBlock;
    const int32_t lo = t * chunk < V ? t * chunk : V;
    const int32_t hi = V - lo > chunk ? lo + chunk : V;
    u64 above = 0, ties = 0;
    for (int32_t i = lo; i < hi; i++) {
        uint32_t key = float_key(x[i]);
        if (key > fkey)
            above += key_mass(key, maxkey, m, inv_t, cut);
        else if (key == fkey)
            ties++;
    }
    u64 all_ties, all_above;
    const u64 tbase = block_excl_scan(ties, sh, &all_ties);
    const u64 mbase = block_excl_scan(above, sh, &all_above);
    const u64 adm_lo = tbase < fties ? tbase : fties;
    const u64 adm_hi = tbase + ties < fties ? tbase + ties : fties;
    const u64 start = mbase + qf * adm_lo;
    const u64 mine = above + qf * (adm_hi - adm_lo);
    const u64 total = all_above + qf * (all_ties < fties ? all_ties : fties); /* >= 2^40 */
    /* target = floor(bits * total / 2^53) < total, from the 117-bit product */
    const u64 bits = ifl_philox_bits53(r.seed, r.draw);
    const u64 target = (__umul64hi(bits, total) << 11) | ((bits * total) >> 53);
    if (t == 0)
        sh.chosen = best_id; /* not reached: the walk below always finds its token */
    __syncthreads();
    if (start <= target && target < start + mine) {
        u64 cum = start, rank = tbase;
        for (int32_t i = lo; i < hi; i++) {
            uint32_t key = float_key(x[i]);
            u64 wt = 0;
            if (key > fkey) {
                wt = key_mass(key, maxkey, m, inv_t, cut);
            } else if (key == fkey) {
                wt = rank < fties ? qf : 0;
                rank++;
            }
            cum += wt;
            if (cum > target) {
                sh.chosen = i;
                break;
            }
        }
    }
    __syncthreads();
    if (t == 0)
        tokens[s] = sh.chosen;
}

} // namespace

extern "C" size_t ifl_cuda_sample_scratch_bytes(int32_t S, int32_t V)
{
    (void)S;
    (void)V;
    return 0; /* the kernel reads the logits in place and keeps its state in shared memory */
}

extern "C" int ifl_cuda_sample(int32_t *tokens, const float *logits, const ifl_cuda_sample_req *req,
                               int32_t S, int32_t V, int32_t ld, void *scratch, cudaStream_t stream)
{
    (void)scratch;
    if (S <= 0)
        return 0;
    if (ld < V)
        return (int)cudaErrorInvalidValue;
    sample_kernel<<<S, kBlock, 0, stream>>>(tokens, logits, req, V, ld);
    return (int)cudaGetLastError();
}
