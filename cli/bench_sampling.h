/* bench_sampling.h: the sampler's lines of `inflight bench --engine` (bench_sampling.c). */
#ifndef IFL_BENCH_SAMPLING_H
#define IFL_BENCH_SAMPLING_H

#include <stdint.h>

#include "error.h"

/* Microseconds per draw over one row of V logits for greedy, top-k, top-p and both: printed. */
int bench_sampler(int32_t V, ifl_err *err);
/* A batch-64 step's sampling on one thread, every logit control off and on (alternated; the
 * medians and their ratio): printed. */
int bench_sampler_controls(int32_t V, ifl_err *err);

#endif
