/* cpu_kernels.c: the driver of the CPU kernels (see cpu_kernels.h): the choice of path per
 * matrix product, the split of work across threads, the partial sums and the epilogue (bias,
 * activation), the OpenBLAS path, and the process-wide entry points. What runs inside each
 * thread's share is a family's (kernels_scalar.c, kernels_avx2.c, kernels_avx512.c); the probes
 * are in cpu_probes.c. */
#include "cpu_kernels.h"

#include <math.h>
#include <sched.h>
#include <stdatomic.h>
#include <stddef.h>
#include <string.h>

#include "cpu_kernels_isa.h"
#include "cpu_matmul_impl.h"
#include "threadpool.h"
#include "util.h"

#ifdef INFLIGHT_HAVE_BLAS
#include <cblas.h>
#endif

/* ---- the families ---------------------------------------------------------------------------- */

const ifl_cpu_kernels *ifl_cpu_kernels_get(ifl_isa isa)
{
    if (isa == IFL_ISA_AUTO)
        isa = ifl_isa_current();
    switch (isa) {
    case IFL_ISA_SCALAR: return ifl_kernels_scalar();
    case IFL_ISA_AVX2: return ifl_kernels_avx2();
    case IFL_ISA_AVX512: return ifl_kernels_avx512();
    default: return NULL;
    }
}

static const ifl_cpu_kernels *cur(void)
{
    const ifl_cpu_kernels *k = ifl_cpu_kernels_get(ifl_isa_current());
    return k ? k : ifl_kernels_scalar();
}

const char *ifl_cpu_kernels_desc(const ifl_cpu_kernels *k)
{
    return k ? k->desc : "?";
}

void ifl_exp(float *y, const float *x, size_t n)
{
    cur()->exp(y, x, n);
}

void ifl_gelu_erf(float *x, size_t n)
{
    for (size_t i = 0; i < n; i++)
        x[i] = 0.5f * x[i] * (1.0f + erff(x[i] * 0.70710678118654752f));
}

float ifl_max(const float *x, size_t n)
{
    return cur()->max(x, n);
}

void ifl_softmax_k(const ifl_cpu_kernels *k, float *x, int32_t n)
{
    float mx = k->max(x, (size_t)n);
    for (int32_t i = 0; i < n; i++)
        x[i] -= mx;
    k->exp(x, x, (size_t)n);
    double sum = 0;
    for (int32_t i = 0; i < n; i++)
        sum += x[i];
    k->scale(x, (float)(1.0 / sum), (size_t)n);
}

/* ---- matrix products ------------------------------------------------------------------------- *
 *
 * Four ways, chosen per call by ifl_matmul_plan:
 *   MM_KN   (few rows, W (K, N) in IFL_LAYOUT_KN8): each thread streams a contiguous band of W's
 *           8-row panels, every weight read once and in address order, into its band's (M, N)
 *           partial sums, then takes over pieces of the columns of bands still in progress;
 *           ifl_matmul_finish_thread adds the partials, the bias and the activation.
 *   MM_NK   (few rows, W (N, K) in IFL_LAYOUT_NK4, the tied lm_head): dot products, each thread
 *           a contiguous range of 4-row panels.
 *   MM_GEMM (more rows, a family with a register-blocked product): each thread a range of
 *           16-column strips of y, W packed to f32 a block at a time.
 *   MM_BLAS (more rows, blas set): each thread runs single-threaded sgemm on a slice of the N
 *           outputs; weights that are not row-major f32 are unpacked to f32 one cache-sized block
 *           at a time.
 *   MM_Q8   (q8 weights, any rows, either orientation): like MM_NK, chunks of output tiles claimed
 *           from a counter, every output's whole sum in one thread; x quantized to int16 rows by
 *           each thread for itself (matmul_q8).
 * bf16 partial sums are in the family's bf16_group order (unpermuted in the finish); the NK
 * kernels take x permuted the same way.
 * Scratch per thread: [partials: max_m x pad32(max_n)] [x padded: max_m x pad32(max_k)]
 * [f32 block: the sgemm or gemm block]. */

size_t ifl_matmul_scratch_floats(int32_t max_k, int32_t max_n, int32_t max_m)
{
    ifl_matmul_args a = {.max_m = max_m, .max_n = max_n, .max_k = max_k};
    size_t conv = conv_floats(&a);
    size_t n = partial_floats(&a) + (size_t)(max_m > 4 ? max_m : 4) * (size_t)pad32(max_k) + conv;
    /* MM_Q8: q8_rows rows of x as int16 and their scales, and a chunk's outputs for a group */
    n += (size_t)q8_rows(&a) * ((size_t)pad32(max_k) / 2 + (size_t)pad32(max_k) / 32 + 16) +
         (size_t)IFL_Q8_MAX_M * (size_t)pad32(max_n);
    return (n + 15) & ~(size_t)15;
}

int32_t ifl_matmul_default_gemv_rows(const ifl_cpu_kernels *k, ifl_dtype dt)
{
    if (!k)
        k = cur();
    return k->gemm ? k->gemm_above[dt] : 1 << 30;
}

/* Bias and activation over rows 0..M-1, columns [n0, n1) of y. */
void ifl_mm_epilogue(const ifl_matmul_args *a, int32_t N, int32_t n0, int32_t n1)
{
    for (int32_t m = 0; m < a->M; m++) {
        float *y = a->y + (size_t)m * N;
        if (a->bias)
            for (int32_t n = n0; n < n1; n++)
                y[n] += a->bias[n];
        if (a->act == IFL_ACT_GELU_TANH)
            a->k->gelu_tanh(y + n0, (size_t)(n1 - n0));
        else if (a->act == IFL_ACT_GELU_ERF)
            ifl_gelu_erf(y + n0, (size_t)(n1 - n0));
    }
}

static void split(int32_t n, int ith, int nth, int32_t align, int32_t *c0, int32_t *c1)
{
    ifl_kernel_split(n, ith, nth, align, c0, c1);
}

/* x rows (M, ldx), K values each, copied into xp (M, KBCW) zero padded; with group g > 0 each g
 * elements are permuted into [g/2 even | g/2 odd] order (what a family's bf16 NK kernel multiplies
 * against). */
static void pad_x(float *xp, const float *x, int M, int32_t ldx, int32_t K, int32_t KBCW, int g)
{
    for (int m = 0; m < M; m++) {
        float *d = xp + (size_t)m * KBCW;
        const float *s = x + (size_t)m * ldx;
        if (!g) {
            memcpy(d, s, (size_t)K * sizeof *d);
            memset(d + K, 0, (size_t)(KBCW - K) * sizeof *d);
            continue;
        }
        int h = g / 2;
        for (int32_t k = 0; k < KBCW; k += g)
            for (int i = 0; i < h; i++) {
                d[k + i] = k + 2 * i < K ? s[k + 2 * i] : 0.0f;
                d[k + h + i] = k + 2 * i + 1 < K ? s[k + 2 * i + 1] : 0.0f;
            }
    }
}

/* ---- MM_KN: bands, chunks, pieces ------------------------------------------------------------ *
 *
 * Share b owns band b of W's 8-row panels (ifl_kernel_band: what the register-blocked product
 * reproduces) and sums it into its partials (thread_scratch(b)) a chunk of panels at a time, all
 * columns at once: one sequential stream through the band. A chunk is L2-sized where the rows of
 * x go in several groups (each sweeps it while it is in L2), 32 KiB where one call takes them all.
 * The columns come in IFL_KN_PIECES pieces, each claimed chunk by chunk. A share done with its own
 * band takes over the last piece of the band with the most chunks left whose share still holds two
 * or more: from the first chunk that share has not begun, once it has finished the one before (the
 * piece's `done`). Every column's sum is still one chain in k order through its band, whoever adds
 * each chunk, so every result keeps its bits; the time lost to a fixed half each on a busy host
 * went from 12.1% of the pool's time to 8.5% (docs/perf.md, 2026-12-05). */

typedef struct {
    const ifl_matmul_args *a;
    int32_t K, ldp, NB, chunk;
    int group; /* rows of x per call of the panel kernel */
    int nth;
    int take; /* pieces can change hands (the pieces were readied for nth shares) */
} kn_run;

/* Panels [*kb0, *kb1) of band b and its chunk count. */
static int32_t kn_band(const kn_run *r, int b, int32_t *kb0, int32_t *kb1)
{
    split((r->K + 7) / 8, b, r->nth, 1, kb0, kb1);
    return (*kb1 - *kb0 + r->chunk - 1) / r->chunk;
}

/* Panel columns [*j0, *j1) of piece q (even bounds: the avx512 f32 kernel goes in pairs). */
static void kn_piece_cols(const kn_run *r, int q, int32_t *j0, int32_t *j1)
{
    split(r->NB, q, IFL_KN_PIECES, 2, j0, j1);
}

/* what the threads write at every chunk lies a cache line or more from anything else */
_Static_assert(offsetof(ifl_kn_share, piece) >= 64 &&
                   offsetof(ifl_matmul_args, nk_next) - offsetof(ifl_matmul_args, pad_nk) >= 64 &&
                   offsetof(ifl_matmul_args, kn_taken) - offsetof(ifl_matmul_args, pad_taken) >= 64,
               "the pieces' counters want a cache line of padding before them");

static inline ifl_kn_piece *kn_piece(const kn_run *r, int b, int q)
{
    return (ifl_kn_piece *)&r->a->kn_share[b].piece[q];
}

/* Chunk c of band b over the pieces in mask (adjacent ones as one range of columns); the first
 * chunk starts the partial sums from zero. */
static void kn_sum_chunk(const kn_run *r, int b, int32_t c, unsigned mask)
{
    const ifl_matmul_args *a = r->a;
    const ifl_cpu_kernels *k = a->k;
    int32_t kb0, kb1;
    kn_band(r, b, &kb0, &kb1);
    int32_t c0 = kb0 + c * r->chunk, c1 = c0 + r->chunk < kb1 ? c0 + r->chunk : kb1;
    int32_t cw = ifl_panel_width(a->W->dtype), ldp = r->ldp;
    float *part = thread_scratch(a, b);
    for (int q = 0; q < IFL_KN_PIECES;) {
        if (!(mask >> q & 1)) {
            q++;
            continue;
        }
        int q1 = q;
        while (q1 + 1 < IFL_KN_PIECES && mask >> (q1 + 1) & 1)
            q1++;
        int32_t j0, j1, unused;
        kn_piece_cols(r, q, &j0, &unused);
        kn_piece_cols(r, q1, &unused, &j1);
        q = q1 + 1;
        if (c == 0)
            for (int32_t m = 0; m < a->M; m++)
                memset(part + (size_t)m * ldp + (size_t)j0 * cw, 0,
                       (size_t)(j1 - j0) * (size_t)cw * sizeof *part);
        for (int32_t m0 = 0; m0 < a->M; m0 += r->group) {
            int M = a->M - m0 < r->group ? (int)(a->M - m0) : r->group;
            k->kn_panels(part + (size_t)m0 * ldp, ldp, a->x + (size_t)m0 * r->K, r->K, r->K, c0, c1,
                         a->W->data, r->NB, j0, j1, M, a->W->dtype);
        }
    }
}

/* Chunk c of piece q of band b for its own share, unless another has taken the piece over. */
static int kn_claim_own(const kn_run *r, int b, int q, int32_t c)
{
    int held = b << 16 | c;
    return atomic_compare_exchange_strong_explicit(&kn_piece(r, b, q)->claim, &held,
                                                   b << 16 | (c + 1), memory_order_relaxed,
                                                   memory_order_relaxed);
}

/* Share b's own band, chunk by chunk, over the pieces it still holds. */
static void kn_own_band(const kn_run *r, int b)
{
    int32_t kb0, kb1, nc = kn_band(r, b, &kb0, &kb1);
    if (nc == 0) { /* no rows of W: the band adds zeros in the finish */
        memset(thread_scratch(r->a, b), 0, (size_t)r->a->M * (size_t)r->ldp * sizeof(float));
        return;
    }
    unsigned pieces = 0;
    for (int q = 0; q < IFL_KN_PIECES; q++) {
        int32_t j0, j1;
        kn_piece_cols(r, q, &j0, &j1);
        pieces |= (unsigned)(j0 < j1) << q;
    }
    for (int32_t c = 0; c < nc; c++) {
        unsigned mask = 0;
        for (int q = 0; q < IFL_KN_PIECES; q++)
            if (pieces >> q & 1 && (!r->take || kn_claim_own(r, b, q, c)))
                mask |= 1u << q;
        if (!mask)
            return; /* every piece taken over */
        kn_sum_chunk(r, b, c, mask);
        if (r->take)
            for (int q = 0; q < IFL_KN_PIECES; q++)
                if (mask >> q & 1)
                    atomic_store_explicit(&kn_piece(r, b, q)->done, c + 1, memory_order_release);
        pieces = mask;
    }
}

static void kn_wait_done(ifl_kn_piece *pc, int32_t chunks)
{
    for (unsigned spins = 1; atomic_load_explicit(&pc->done, memory_order_acquire) < chunks;
         spins++)
        if (spins % 64 == 0)
            sched_yield(); /* its share's thread may be waiting for this core */
#if defined(__x86_64__) || defined(__i386__)
        else
            __builtin_ia32_pause();
#endif
}

/* For share me, done with its band: takes over one piece of another band and sums the rest of
 * it. 0 when no band has a piece to give (its share holds fewer than two with chunks left). */
static int kn_take_piece(const kn_run *r, int me)
{
    int best = -1, best_q = 0;
    int32_t best_left = 0;
    for (int b = 0; b < r->nth; b++) {
        int32_t kb0, kb1, nc = kn_band(r, b, &kb0, &kb1), left = 0;
        int held = 0, last = 0;
        for (int q = 0; q < IFL_KN_PIECES && b != me; q++) {
            int32_t j0, j1;
            kn_piece_cols(r, q, &j0, &j1);
            int w = atomic_load_explicit(&kn_piece(r, b, q)->claim, memory_order_relaxed);
            if (j0 < j1 && w >> 16 == b && (w & 0xffff) < nc) {
                held++;
                left += nc - (w & 0xffff);
                last = q;
            }
        }
        if (held >= 2 && left > best_left) {
            best = b;
            best_q = last;
            best_left = left;
        }
    }
    if (best < 0)
        return 0;
    int32_t kb0, kb1, nc = kn_band(r, best, &kb0, &kb1);
    ifl_kn_piece *pc = kn_piece(r, best, best_q);
    int w = atomic_load_explicit(&pc->claim, memory_order_relaxed);
    if (w >> 16 != best || (w & 0xffff) >= nc ||
        !atomic_compare_exchange_strong_explicit(&pc->claim, &w, me << 16 | (w & 0xffff),
                                                 memory_order_relaxed, memory_order_relaxed))
        return 1; /* its share moved on meanwhile: look again */
    int32_t from = w & 0xffff;
    kn_wait_done(pc, from);
    for (int32_t c = from; c < nc; c++)
        kn_sum_chunk(r, best, c, 1u << best_q);
    atomic_fetch_add_explicit((atomic_int *)&r->a->kn_taken, 1, memory_order_relaxed);
    return 1;
}

/* MM_KN, share ith: its own band, then pieces of the others' while any can be taken over. */
static void matmul_kn(const ifl_matmul_args *a, int ith, int nth)
{
    const ifl_mat *W = a->W;
    int32_t N = W->cols, cw = ifl_panel_width(W->dtype);
    kn_run r = {.a = a, .K = W->rows, .ldp = pad32(N), .NB = (N + cw - 1) / cw, .nth = nth};
    size_t row_bytes = (size_t)r.ldp * 8 * ifl_dtype_size(W->dtype);
    r.group = a->M <= a->k->kn_one_pass_m ? (int)a->M : a->k->kn_max_m;
    r.chunk = (int32_t)((r.group >= a->M ? KN_PASS_CHUNK_BYTES : L2_CHUNK_BYTES) / row_bytes);
    r.chunk = r.chunk < 1 ? 1 : r.chunk;
    int32_t kb0, kb1;
    r.take = nth > 1 && nth == a->n_threads && nth <= IFL_KN_MAX_SHARES &&
             kn_band(&r, 0, &kb0, &kb1) < 0xffff; /* band 0 is the longest */
    kn_own_band(&r, ith);
    if (r.take)
        while (kn_take_piece(&r, ith))
            ;
}

/* MM_KN, after every thread's matmul_kn: y = y + p0 + p1 + ... (accumulate) or p0 + p1 + ...,
 * added left to right in thread order (what the register-blocked product reproduces), then the
 * bias and act; columns split across threads in blocks of 32 (a multiple of every bf16_group). */
static void matmul_kn_finish(const ifl_matmul_args *a, int ith, int nth)
{
    int32_t N = a->W->cols, ldp = pad32(N);
    int32_t c0, c1;
    split(N, ith, nth, 32, &c0, &c1);
    if (c0 >= c1)
        return;
    int32_t w = c1 - c0, wp = pad32(w);
    int unperm = a->W->dtype == IFL_DTYPE_BF16 && a->k->unpermute_bf16;
    for (int32_t m = 0; m < a->M; m++) {
        float *y = a->y + (size_t)m * N + c0;
        for (int t = 0; t < nth; t++) {
            float *p = thread_scratch(a, t) + (size_t)m * ldp + c0;
            if (unperm) /* this thread's columns of every partial: no other thread reads them */
                a->k->unpermute_bf16(p, wp);
            if (t == 0 && !a->accumulate)
                memcpy(y, p, (size_t)w * sizeof *y);
            else
                for (int32_t j = 0; j < w; j++)
                    y[j] += p[j];
        }
    }
    ifl_mm_epilogue(a, N, c0, c1);
}

/* The next chunk of MM_NK's work for whichever share asks (the args' one field the threads
 * write; ifl_matmul_plan resets it). */
int32_t ifl_mm_claim(const ifl_matmul_args *a)
{
    return atomic_fetch_add_explicit((atomic_int *)&a->nk_next, 1, memory_order_relaxed);
}

/* MM_NK, share ith: L2-sized chunks of 4-row panels of W (N, K), each claimed from a counter by
 * whichever share is free, so a thread the host slows takes fewer of them instead of holding up
 * the product (a static split left one thread idle a fifth of a batch-1 step on a busy host,
 * docs/perf.md); a chunk's rows of y are the same whoever computes them. Like MM_KN, every
 * group of rows of x sweeps a chunk while it is in L2, so W comes from memory once. */
static void matmul_nk(const ifl_matmul_args *a, int ith, int nth)
{
    (void)nth;
    const ifl_mat *W = a->W;
    const ifl_cpu_kernels *k = a->k;
    int32_t K = W->cols, N = W->rows;
    int32_t cw = ifl_panel_width(W->dtype), KB = (K + cw - 1) / cw, G = (N + 3) / 4;
    /* L2-sized chunks of panels, widened once to f32 where the family does that for this dtype
     * (the copy is the L2-sized chunk): each group of rows of x (in L1) sweeps the chunk in L2,
     * so W comes from memory once and every row's sums keep one order. L1-sized chunks, each
     * group of rows streaming the whole of x past them from L2, were slower at every row count
     * from 5 to 64 (docs/perf.md, 2026-12-05). A chunk is a whole number of 64-byte lines of y
     * (4 panels), so no two threads write one line. */
    int widen = W->dtype != IFL_DTYPE_F32 && k->nk_widen && a->M > k->nk_widen_above[W->dtype];
    const size_t panel_bytes = (size_t)KB * 256;
    int32_t chunk = (int32_t)(L2_CHUNK_BYTES / (panel_bytes * (widen ? 2 : 1))) & ~3;
    chunk = chunk < 4 ? 4 : chunk;
    int32_t n_chunks = (G + chunk - 1) / chunk;
    int32_t cur = ifl_mm_claim(a);
    if (cur >= n_chunks)
        return;
    float *xp = thread_xpad(a, ith);
    pad_x(xp, a->x, (int)a->M, K, K, KB * cw, W->dtype == IFL_DTYPE_BF16 ? k->bf16_group : 0);
    float *wide = thread_conv(a, ith); /* >= CONV_FLOATS (4 MiB): the widened chunk */
    /* the next chunk is claimed while this one is in use: its panels are prefetched */
    for (int32_t nxt = ifl_mm_claim(a); cur < n_chunks; cur = nxt, nxt = ifl_mm_claim(a)) {
        int32_t c0 = cur * chunk, c1 = c0 + chunk < G ? c0 + chunk : G;
        if (widen)
            k->nk_widen(wide, W->data, KB, c0, c1, W->dtype);
        /* widened: the next chunk's 16-bit panels toward L2, a slice before each group of rows,
         * so that widening it reads them from L2 rather than memory (bench-gemm-libs, lm_head, 64
         * rows, bf16: 187 -> 195 GFLOP/s; not widened, the kernels' own prefetches do better
         * alone: f16 and f32 were 3-12% slower with it, docs/perf.md) */
        int32_t c2 = nxt * chunk, c3 = nxt < n_chunks ? (c2 + chunk < G ? c2 + chunk : G) : c2;
        const char *next = (const char *)W->data + (size_t)c2 * panel_bytes;
        size_t next_bytes = (size_t)(c3 - c2) * panel_bytes, groups = 0, pf = 0;
        if (widen)
            groups = ((size_t)a->M + (size_t)k->nk_max_m - 1) / (size_t)k->nk_max_m;
        for (int32_t m0 = 0; m0 < a->M; m0 += k->nk_max_m) {
            int M = a->M - m0 < k->nk_max_m ? (int)(a->M - m0) : k->nk_max_m;
            if (groups) {
                size_t end = next_bytes * (size_t)(m0 / k->nk_max_m + 1) / groups;
                for (; pf < end; pf += 64)
                    __builtin_prefetch(next + pf, 0, 2);
            }
            float *y = a->y + (size_t)m0 * N + (size_t)c0 * 4;
            const float *xm = xp + (size_t)m0 * KB * cw;
            if (widen)
                k->nk_panels(y, N, xm, 2 * KB, wide, 0, c1 - c0, N - c0 * 4, M, IFL_DTYPE_F32);
            else
                k->nk_panels(y, N, xm, KB, W->data, c0, c1, N, M, W->dtype);
        }
        ifl_mm_epilogue(a, N, c0 * 4, c1 * 4 < N ? c1 * 4 : N);
    }
}

/* MM_GEMM, thread ith: its 16-column strips of y through the family's register-blocked product,
 * with the K bands of the streaming kernels' threads (so the sums come out the same). */
static void matmul_gemm(const ifl_matmul_args *a, int ith, int nth)
{
    const ifl_mat *W = a->W;
    int32_t K = W->rows, N = W->cols;
    int32_t n0, n1;
    split(N, ith, nth, 16, &n0, &n1);
    if (n0 >= n1)
        return;
    ifl_gemm_args g = {.y = a->y,
                       .x = a->x,
                       .M = a->M,
                       .K = K,
                       .N = N,
                       .W = W,
                       .accumulate = a->accumulate,
                       .n0 = n0,
                       .n1 = n1,
                       .n_bands = nth,
                       .scratch = thread_conv(a, ith)};
    a->k->gemm(&g);
    ifl_mm_epilogue(a, N, n0, n1);
}

#ifdef INFLIGHT_HAVE_BLAS
/* One 64-byte panel row (CW elements) as f32 in natural order. */
static inline void panel_row_f32(float *dst, const char *src, ifl_dtype dt)
{
    ifl_convert_to_f32(dst, dt, src, (size_t)ifl_panel_width(dt));
}

/* Columns [c0, c0 + w) of a (K, N) matrix as row-major f32 (K, ldd); for KN8, c0 and w are
 * multiples of CW except at the matrix's last column (ldd is then w rounded up to CW). */
static void unpack_kn(float *dst, int32_t ldd, const ifl_mat *W, int32_t c0, int32_t w)
{
    size_t es = ifl_dtype_size(W->dtype);
    int32_t K = W->rows;
    if (W->layout == IFL_LAYOUT_ROWS) {
        for (int32_t k = 0; k < K; k++)
            ifl_convert_to_f32(dst + (size_t)k * ldd, W->dtype,
                               (const char *)W->data + ((size_t)k * W->cols + (size_t)c0) * es,
                               (size_t)w);
        return;
    }
    int32_t cw = ifl_panel_width(W->dtype), NB = (W->cols + cw - 1) / cw;
    size_t row_bytes = 64, blk_bytes = 8 * row_bytes;
    for (int32_t kb = 0; kb < (K + 7) / 8; kb++)
        for (int32_t jb = c0 / cw; jb * cw < c0 + w; jb++) {
            const char *blk = (const char *)W->data + ((size_t)kb * NB + (size_t)jb) * blk_bytes;
            for (int r = 0; r < 8 && kb * 8 + r < K; r++)
                panel_row_f32(dst + (size_t)(kb * 8 + r) * ldd + (jb * cw - c0),
                              blk + r * row_bytes, W->dtype);
        }
}

/* Rows [r0, r0 + nr) of an (N, K) matrix as row-major f32 (nr, ldd); r0 a multiple of 4, ldd K
 * rounded up to CW. */
static void unpack_nk(float *dst, int32_t ldd, const ifl_mat *W, int32_t r0, int32_t nr)
{
    if (W->layout == IFL_LAYOUT_ROWS) {
        for (int32_t r = 0; r < nr; r++)
            ifl_mat_row_f32(W, r0 + r, dst + (size_t)r * ldd);
        return;
    }
    int32_t cw = ifl_panel_width(W->dtype), KB = (W->cols + cw - 1) / cw;
    for (int32_t g = r0 / 4; g * 4 < r0 + nr; g++)
        for (int32_t kb = 0; kb < KB; kb++) {
            const char *blk = (const char *)W->data + ((size_t)g * KB + (size_t)kb) * 256;
            for (int r = 0; r < 4; r++) {
                int32_t row = g * 4 + r - r0;
                if (row >= 0 && row < nr)
                    panel_row_f32(dst + (size_t)row * ldd + (size_t)kb * cw, blk + 64 * r,
                                  W->dtype);
            }
        }
}

/* MM_BLAS, thread ith: sgemm on its slice of the N outputs. */
static void matmul_blas(const ifl_matmul_args *a, int ith, int nth)
{
    const ifl_mat *W = a->W;
    int32_t M = a->M;
    int nk = a->w_is_nk;
    int32_t K = nk ? W->cols : W->rows, N = nk ? W->rows : W->cols;
    int32_t n0, n1;
    split(N, ith, nth, 32, &n0, &n1);
    if (n0 >= n1)
        return;
    float beta = a->accumulate ? 1.0f : 0.0f;
    float *conv = thread_conv(a, ith);
    const float *rows = W->dtype != IFL_DTYPE_F32      ? NULL
                        : W->layout == IFL_LAYOUT_ROWS ? W->data
                                                       : W->rows_data;
    if (rows && nk) {
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, M, n1 - n0, K, 1.0f, a->x, K,
                    rows + (size_t)n0 * K, K, beta, a->y + n0, N);
    } else if (rows) {
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, M, n1 - n0, K, 1.0f, a->x, K,
                    rows + n0, N, beta, a->y + n0, N);
    } else if (nk) {
        int32_t ldd = pad32(K);
        int32_t nb = (int32_t)(CONV_FLOATS / (size_t)ldd) & ~3;
        nb = nb < 4 ? 4 : nb;
        for (int32_t c = n0; c < n1; c += nb) {
            int32_t w = n1 - c < nb ? n1 - c : nb;
            unpack_nk(conv, ldd, W, c, w);
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, M, w, K, 1.0f, a->x, K, conv, ldd,
                        beta, a->y + c, N);
        }
    } else {
        int32_t nb = (int32_t)(CONV_FLOATS / (size_t)K) & ~31;
        nb = nb < 32 ? 32 : nb;
        for (int32_t c = n0; c < n1; c += nb) {
            int32_t w = n1 - c < nb ? n1 - c : nb;
            unpack_kn(conv, pad32(w), W, c, w);
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, M, w, K, 1.0f, a->x, K, conv,
                        pad32(w), beta, a->y + c, N);
        }
    }
    ifl_mm_epilogue(a, N, n0, n1);
}
#endif

int ifl_matmul_plan(ifl_matmul_args *a)
{
    if (!a->k)
        a->k = cur();
    if (a->W->dtype == IFL_DTYPE_Q8) {
        /* q8 has one path at every size: its tiles, in either orientation */
        if (a->W->layout != (a->w_is_nk ? IFL_LAYOUT_NK4 : IFL_LAYOUT_KN8) || !a->k->q8_tiles)
            return -1;
        int32_t K = a->w_is_nk ? a->W->cols : a->W->rows;
        if (K > a->max_k)
            return -1; /* more than the scratch was sized for */
        a->mode = MM_Q8;
        atomic_store_explicit(&a->nk_next, 0, memory_order_relaxed);
        return 0;
    }
    if (a->M > a->gemv_max_rows) {
#ifdef INFLIGHT_HAVE_BLAS
        if (a->blas) {
            a->mode = MM_BLAS;
            return 0;
        }
#endif
        if (a->k->gemm && !a->w_is_nk) {
            a->mode = MM_GEMM;
            return 0;
        }
    }
    ifl_layout want = a->w_is_nk ? IFL_LAYOUT_NK4 : IFL_LAYOUT_KN8;
    if (a->W->layout != want)
        return -1; /* the streaming kernels read only the panel layouts */
    if (a->w_is_nk && a->accumulate)
        return -1; /* dot products write y; nothing in GPT-2 adds them to it */
    if (a->M > a->max_m)
        return -1; /* more rows than the partial sums were sized for */
    a->mode = a->w_is_nk ? MM_NK : MM_KN;
    atomic_store_explicit(&a->nk_next, 0, memory_order_relaxed);
    atomic_store_explicit(&a->kn_taken, 0, memory_order_relaxed);
    for (int b = 0; b < a->n_threads && b < IFL_KN_MAX_SHARES; b++)
        for (int q = 0; q < IFL_KN_PIECES; q++) {
            atomic_store_explicit(&a->kn_share[b].piece[q].claim, b << 16, memory_order_relaxed);
            atomic_store_explicit(&a->kn_share[b].piece[q].done, 0, memory_order_relaxed);
        }
    return 0;
}

int ifl_matmul_needs_finish(const ifl_matmul_args *a)
{
    return a->mode == MM_KN;
}

void ifl_matmul_thread(const ifl_matmul_args *a, int ith, int nth)
{
    switch (a->mode) {
#ifdef INFLIGHT_HAVE_BLAS
    case MM_BLAS: matmul_blas(a, ith, nth); break;
#endif
    case MM_KN: matmul_kn(a, ith, nth); break;
    case MM_GEMM: matmul_gemm(a, ith, nth); break;
    case MM_Q8: ifl_matmul_q8_thread(a, ith, nth); break;
    default: matmul_nk(a, ith, nth); break;
    }
}

void ifl_matmul_finish_thread(const ifl_matmul_args *a, int ith, int nth)
{
    if (a->mode == MM_KN)
        matmul_kn_finish(a, ith, nth);
}
