/* generate.h: one sequence from prompt to completion on a backend: chunked prefill, then decode
 * and sample token by token, stopping at EOS or max_new. What `inflight generate` and the engine
 * tests use; the shared multi-request scheduler is the batcher's job, not this. */
#ifndef IFL_GENERATE_H
#define IFL_GENERATE_H

#include <stdint.h>

#include "backend.h"
#include "kv.h"
#include "sampler.h"

typedef struct {
    int32_t max_new; /* tokens to generate */
    ifl_sampling sampling;
    uint64_t seed;
    int ignore_eos;
    int32_t eos; /* stop token, -1 for none */
    /* Called for every generated token; non-zero stops generation. */
    int (*on_token)(void *ud, int32_t id);
    void *ud;
    float *logits_out; /* optional (V): the logits of the last prompt token */
} ifl_generate_opts;

typedef struct {
    int32_t n_prompt, n_generated;
    double prefill_s, decode_s; /* wall time of the prefill steps / the decode steps */
    const char *finish_reason;  /* "length", "eos" or "stopped" */
} ifl_generate_stats;

int ifl_generate(ifl_backend *be, const int32_t *prompt, int32_t n_prompt,
                 const ifl_generate_opts *o, ifl_generate_stats *st, ifl_err *err);

#endif
