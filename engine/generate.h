/* generate.h: one sequence from prompt to completion on a backend: chunked prefill, then decode
 * and sample token by token, stopping at EOS or max_new. What `inflight generate` and the engine
 * tests use; the shared multi-request scheduler is the batcher's job, not this. */
#ifndef IFL_GENERATE_H
#define IFL_GENERATE_H

#include <stdint.h>

#include "backend.h"
#include "kv.h"
#include "logit_adj.h"
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
    float *logits_out; /* optional (V): the logits of the last prompt token (before any control) */
    /* The logit controls, as the batcher has them (batcher.h's ifl_request_params): */
    ifl_penalties penalties; /* zero: off */
    int32_t min_tokens; /* 0: off; while fewer were generated, EOS (unless ignore_eos) and the stop
                           ids are banned; <= max_new */
    int32_t n_stop_ids; /* <= IFL_MAX_STOP_IDS, in [0, V): a generated one stops ("stop") */
    const int32_t *stop_ids;
    int32_t n_logit_bias; /* <= IFL_MAX_LOGIT_BIAS, one entry per id */
    const ifl_logit_bias *logit_bias;
} ifl_generate_opts;

typedef struct {
    int32_t n_prompt, n_generated;
    double prefill_s, decode_s; /* wall time of the prefill steps / the decode steps */
    const char *finish_reason;  /* "length", "eos", "stop" (a stop id) or "stopped" (on_token) */
} ifl_generate_stats;

int ifl_generate(ifl_backend *be, const int32_t *prompt, int32_t n_prompt,
                 const ifl_generate_opts *o, ifl_generate_stats *st, ifl_err *err);

#endif
