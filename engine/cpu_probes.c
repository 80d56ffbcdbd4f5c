/* cpu_probes.c: what this machine reaches right now, for judging the kernels' figures against:
 * the streaming read bandwidth (a buffer read across the pool's threads with a family's
 * stream_read, the decode kernels' access pattern) and the peak multiply-add rate (a family's
 * independent FMA chains on registers). Declared in cpu_kernels.h. */
#include <stddef.h>
#include <sys/mman.h>

#include "cpu_kernels.h"
#include "cpu_kernels_isa.h"
#include "threadpool.h"
#include "util.h"

/* The process's family (the scalar one where none is selected). */
static const ifl_cpu_kernels *family(void)
{
    const ifl_cpu_kernels *k = ifl_cpu_kernels_get(ifl_isa_current());
    return k ? k : ifl_kernels_scalar();
}

typedef struct {
    const ifl_cpu_kernels *k;
    const float *p;
    size_t n;
    int64_t iters;
    float sums[64];
    double flops[64];
} probe_ctx;

static void probe_task(void *c_, int ith, int nth)
{
    probe_ctx *c = c_;
    size_t per = c->n / (size_t)nth / 64 * 64;
    c->sums[ith % 64] = c->k->stream_read(c->p + per * (size_t)ith, per);
}

int ifl_read_probe_init(ifl_read_probe *pr, size_t bytes)
{
    *pr = (ifl_read_probe){0};
    float *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED)
        return -1;
#ifdef MADV_HUGEPAGE
    madvise(p, bytes, MADV_HUGEPAGE);
#endif
    size_t n = bytes / sizeof(float);
    for (size_t i = 0; i < n; i++)
        p[i] = 1.0f;
    pr->p = p;
    pr->n = n;
    return 0;
}

double ifl_read_probe_gbs(ifl_threadpool *tp, const ifl_read_probe *pr, int reps)
{
    if (!pr->p)
        return 0;
    probe_ctx c = {.k = family(), .p = pr->p, .n = pr->n};
    int nth = ifl_threadpool_size(tp);
    double bytes = (double)(pr->n / (size_t)nth / 64 * 64 * (size_t)nth) * sizeof(float), best = 0;
    for (int r = 0; r < reps; r++) {
        double t = ifl_now_s();
        ifl_threadpool_run(tp, probe_task, &c);
        t = ifl_now_s() - t;
        best = bytes / t / 1e9 > best ? bytes / t / 1e9 : best;
    }
    return best;
}

void ifl_read_probe_free(ifl_read_probe *pr)
{
    if (pr->p)
        munmap(pr->p, pr->n * sizeof(float));
    *pr = (ifl_read_probe){0};
}

double ifl_memory_read_gbs(ifl_threadpool *tp, size_t bytes, int reps)
{
    ifl_read_probe pr;
    if (ifl_read_probe_init(&pr, bytes))
        return 0;
    double best = ifl_read_probe_gbs(tp, &pr, reps);
    ifl_read_probe_free(&pr);
    return best;
}

static void fma_task(void *c_, int ith, int nth)
{
    (void)nth;
    probe_ctx *c = c_;
    c->flops[ith % 64] = c->k->fma_loop(c->iters, &c->sums[ith % 64]);
}

double ifl_fma_peak_gflops(ifl_threadpool *tp, const ifl_cpu_kernels *k, int reps)
{
    probe_ctx c = {.k = k ? k : family(), .iters = 1 << 22};
    int nth = ifl_threadpool_size(tp);
    double best = 0;
    for (int r = 0; r < reps; r++) {
        double t = ifl_now_s();
        ifl_threadpool_run(tp, fma_task, &c);
        t = ifl_now_s() - t;
        double flops = 0;
        for (int i = 0; i < nth && i < 64; i++)
            flops += c.flops[i];
        best = flops / t / 1e9 > best ? flops / t / 1e9 : best;
    }
    return best;
}
