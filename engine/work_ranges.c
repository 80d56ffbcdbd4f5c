/* work_ranges.c: contiguous ranges of items per share, claimed from the front by their owner and
 * from the back by the others once theirs are done. See work_ranges.h. */
#include "work_ranges.h"

#include <stdlib.h>

static inline uint64_t pack(uint32_t front, uint32_t back)
{
    return (uint64_t)front | (uint64_t)back << 32;
}

int ifl_work_ranges_init(ifl_work_ranges *w, int n)
{
    *w = (ifl_work_ranges){0};
    if (n < 1)
        return -1;
    size_t bytes = (size_t)n * IFL_WORK_RANGES_STRIDE * sizeof *w->slot;
    w->slot = aligned_alloc(64, (bytes + 63) & ~(size_t)63);
    if (!w->slot)
        return -1;
    for (size_t i = 0; i < (size_t)n * IFL_WORK_RANGES_STRIDE; i++)
        atomic_init(&w->slot[i], 0);
    w->n = n;
    return 0;
}

void ifl_work_ranges_free(ifl_work_ranges *w)
{
    free(w->slot);
    *w = (ifl_work_ranges){0};
}

void ifl_work_ranges_reset(ifl_work_ranges *w, int32_t n_items)
{
    if (n_items < 0)
        n_items = 0; /* cast to uint32 below, a negative count would hand out ~4e9 items */
    for (int s = 0; s < w->n; s++) {
        int64_t a = (int64_t)n_items * s / w->n, b = (int64_t)n_items * (s + 1) / w->n;
        atomic_store_explicit(&w->slot[(size_t)s * IFL_WORK_RANGES_STRIDE],
                              pack((uint32_t)a, (uint32_t)b), memory_order_relaxed);
    }
}

/* One item off the front (own) or the back (taken) of range r; -1 if it is empty. */
static int32_t take(ifl_work_ranges *w, int r, int own)
{
    _Atomic uint64_t *p = &w->slot[(size_t)r * IFL_WORK_RANGES_STRIDE];
    uint64_t v = atomic_load_explicit(p, memory_order_relaxed);
    for (;;) {
        uint32_t front = (uint32_t)v, back = (uint32_t)(v >> 32);
        if (front >= back)
            return -1;
        uint64_t nv = own ? pack(front + 1, back) : pack(front, back - 1);
        if (atomic_compare_exchange_weak_explicit(p, &v, nv, memory_order_relaxed,
                                                  memory_order_relaxed))
            return (int32_t)(own ? front : back - 1);
    }
}

int32_t ifl_work_ranges_claim(ifl_work_ranges *w, int s)
{
    int32_t item = take(w, s, 1);
    while (item < 0) {
        int best = -1;
        uint32_t most = 0;
        for (int r = 0; r < w->n; r++) {
            uint64_t v = atomic_load_explicit(&w->slot[(size_t)r * IFL_WORK_RANGES_STRIDE],
                                              memory_order_relaxed);
            uint32_t front = (uint32_t)v, back = (uint32_t)(v >> 32);
            if (r != s && back > front && back - front > most) {
                most = back - front;
                best = r;
            }
        }
        if (best < 0)
            return -1;
        item = take(w, best, 0); /* -1 if its owner and others emptied it meanwhile: look again */
    }
    return item;
}
