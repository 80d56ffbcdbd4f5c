/* work_ranges.h: items 0..n-1 handed to the shares of a parallel region as contiguous ranges, one
 * per share, each share claiming from the front of its own; a share done with its own takes single
 * items from the back of the range with the most left. So each share walks adjacent items (for
 * attention, adjacent heads: adjacent KV memory) and a share the host slows still does less.
 * Each range sits on a cache line of its own. Reset before each region, from one thread. */
#ifndef IFL_WORK_RANGES_H
#define IFL_WORK_RANGES_H

#include <stdatomic.h>
#include <stdint.h>

typedef struct {
    _Atomic uint64_t *slot; /* share s: slot[s * IFL_WORK_RANGES_STRIDE] = front | back << 32 */
    int n;                  /* shares */
} ifl_work_ranges;

#define IFL_WORK_RANGES_STRIDE 8 /* 64 bytes between two shares' ranges */

/* Room for n shares (n >= 1); -1 if out of memory. */
int ifl_work_ranges_init(ifl_work_ranges *w, int n);
void ifl_work_ranges_free(ifl_work_ranges *w);
/* Items [0, n_items) split into the shares' ranges: share s gets [n_items * s / n,
 * n_items * (s + 1) / n); a negative n_items counts as 0. Not concurrent with claims. */
void ifl_work_ranges_reset(ifl_work_ranges *w, int32_t n_items);
/* The next item for share s: the front of its own range, else the back of the range with the
 * most items left; -1 when none is left anywhere. Every item is returned exactly once per reset. */
int32_t ifl_work_ranges_claim(ifl_work_ranges *w, int s);

#endif
