/* batcher.h: the shared batcher: one thread that owns a backend and its KV pool, takes requests
 * from a bounded queue and runs GPT-2 step by step for all of them, emitting events.
 *
 * Two policies (Triton's tutorial names in brackets):
 *   IFL_POLICY_STATIC    (simple-gpt2): take up to max_batch waiting requests, run them until every
 *                        one has finished, only then look at the queue again.
 *   IFL_POLICY_ITERATIVE (iterative-gpt2): every step, admit waiting requests while KV blocks and
 *                        the step's token budget allow; a step runs the decode token of every
 *                        running sequence first, then prefill chunks of new ones within the budget.
 * Admission reserves KV blocks for prompt + max_tokens, so a running request is never evicted.
 * With the prefix cache (on unless no_prefix_cache; kv.h), admission first takes the longest
 * cached prefix of the prompt in whole blocks and prefills only the rest; every full block a
 * request computes (prompt or generated) is published as it fills, so a later request that
 * shares the opening, or continues the conversation, finds it. Cached blocks nobody holds count
 * as free for admission and are evicted, least recently released first, only for room.
 * Admission goes round-robin across sessions (the owner of a request: a connection, a user), so
 * one session's 50 queued requests cannot starve another's one.
 *
 * Shares (batcher_share.c), so that no session locks others out before the queue either:
 *   the batch  a session alone may fill it; while others run or wait, a slot goes first to a
 *              session below its share, max_batch / (sessions running or waiting) rounded up.
 *              Nothing is preempted: a session over its share keeps what runs and gets no more
 *              until the others are served; a slot no one below their share can take is not
 *              left idle.
 *   the queue  the last quarter of max_queue is kept for sessions with nothing waiting, so a
 *              newcomer is queued unless the whole queue is full; a session with requests waiting
 *              may hold at most (the other three quarters) / (sessions waiting).
 *   refusals   IFL_SUBMIT_QUEUE_FULL with a sentence saying which limit, and a suggested wait:
 *              the smoothed interval between admissions while requests wait, times the
 *              admissions until a place frees for this session (50 ms to 30 s).
 * Queue positions are the plain round-robin order: a request of a session below its share may
 * start sooner than its position says, one of a session above it later.
 *
 * Threads: ifl_batcher_submit / cancel / cancel_session / stats may be called from any thread. All
 * events reach the caller through one callback: `queued` events are emitted under the queue lock
 * (from the submitting thread, or the batcher thread when positions change), every other event
 * from the batcher thread. A request's events are therefore ordered: queued (position updates)...,
 * started, token 0..n-1, done. The callback must be quick and must not call into the batcher.
 * What it is not: a tokenizer (requests carry token ids; stop strings are bytes) or a server. */
#ifndef IFL_BATCHER_H
#define IFL_BATCHER_H

#include <stddef.h>
#include <stdint.h>

#include "backend.h"
#include "error.h"
#include "logit_adj.h"
#include "logprobs.h"
#include "sampler.h"
#include "tokenizer.h"

typedef enum { IFL_POLICY_ITERATIVE = 0, IFL_POLICY_STATIC = 1 } ifl_policy;
#define IFL_N_POLICIES 2 /* the policies above, 0 .. IFL_N_POLICIES-1 */
const char *ifl_policy_name(ifl_policy p); /* "iterative", "static" */
int ifl_policy_parse(const char *s, ifl_policy *out);

typedef enum {
    IFL_FINISH_LENGTH = 0, /* max_tokens reached */
    IFL_FINISH_EOS = 1,    /* the end-of-text token */
    IFL_FINISH_STOP = 2,   /* a stop string or a stop id */
    IFL_FINISH_CANCELLED = 3,
    IFL_FINISH_ERROR = 4, /* the backend failed; the message is in the done event */
} ifl_finish;
const char *ifl_finish_name(ifl_finish f); /* "length", "eos", "stop", "cancelled", "error" */

/* Why a submission was refused. The engine's own statuses: a front end maps them to what its
 * clients see (server/request.c maps them to the protocol's codes). */
typedef enum {
    IFL_SUBMIT_OK = 0,
    IFL_SUBMIT_QUEUE_FULL = 1,    /* the waiting queue holds max_queue requests */
    IFL_SUBMIT_TOO_LONG = 2,      /* prompt + max_tokens > the context or the whole KV pool */
    IFL_SUBMIT_INVALID = 3,       /* bad parameters (the message says which) */
    IFL_SUBMIT_SHUTTING_DOWN = 4, /* the batcher is stopping */
    IFL_SUBMIT_NO_MEMORY = 5,     /* out of memory for the request */
} ifl_submit_status;
/* A short name for messages: "ok", "queue full", "too long", "invalid", "shutting down",
 * "out of memory". */
const char *ifl_submit_status_name(ifl_submit_status s);

#define IFL_MAX_STOPS 4
#define IFL_MAX_STOP_BYTES 64
#define IFL_MAX_CHOICES 16 /* n: choices of one prompt (OpenAI's n) */

/* The Philox stream of choice `choice` of a request seeded `seed`: choice 0 is the seed itself (n
 * = 1 draws what it always drew), choice i of any n the same for one seed. */
static inline uint64_t ifl_choice_seed(uint64_t seed, int32_t choice)
{
    return choice ? seed + (uint64_t)choice * 0x9e3779b97f4a7c15ull : seed;
}

typedef struct {
    uint64_t session;      /* owner: fairness and cancel-all */
    const int32_t *prompt; /* token ids (copied) */
    int32_t n_prompt;
    int32_t max_tokens; /* >= 1; 0 only with prompt_logprobs (the prompt is scored alone) */
    ifl_sampling sampling;
    uint64_t seed;
    int ignore_eos;
    int n_stop; /* stop strings (bytes, copied); never emitted */
    const char *stop[IFL_MAX_STOPS];
    void *user; /* handed back in every event of the request */
    /* Logit controls (logit_adj.h), each request's own: with all of them off (zero) a request
     * allocates nothing for them and costs nothing per step. */
    ifl_penalties penalties; /* zero: off */
    int32_t min_tokens; /* 0: off; while fewer tokens were generated: EOS (unless ignore_eos) and
                           every stop id are banned (-inf), and stop strings are not looked for
                           (text is released as it comes; a stop string counts only if it lies
                           wholly in text of tokens from index min_tokens on); <= max_tokens */
    int32_t n_stop_ids; /* copied; <= IFL_MAX_STOP_IDS; ids in [0, V). A sampled stop id ends the
                           request with IFL_FINISH_STOP; like EOS it releases no text of its own
                           (its token event has the id and empty text) and counts as a
                           completion token */
    const int32_t *stop_ids;
    int32_t n_logit_bias; /* copied; <= IFL_MAX_LOGIT_BIAS; ids in [0, V); bias in [-100, 100];
                             one entry per id */
    const ifl_logit_bias *logit_bias;
    /* Scoring and several samples (logprobs.h). Zero: off. */
    int32_t n_choices; /* 0 or 1: one; 2 .. IFL_MAX_CHOICES (and <= max_batch): choices of the
                          prompt, prefilled once and forked (kv.h); choice i draws from
                          ifl_choice_seed(seed, i); each counts as a running sequence */
    int logprobs;          /* 1: every token event carries its token's logprob entry */
    int prompt_logprobs;   /* 1: prompt events score every prompt token after the first (the
                              prompt is then computed whole: no prefix cache lookup) */
    int32_t top_logprobs;  /* 0 .. IFL_MAX_TOP_LOGPROBS best tokens in each entry */
} ifl_request_params;

typedef enum {
    IFL_EV_QUEUED = 0,  /* position: 1 = next to be admitted (sent again when it changes) */
    IFL_EV_STARTED = 1, /* admitted: KV reserved, prefill begins */
    IFL_EV_TOKEN = 2,   /* one per generated token (of each choice) */
    IFL_EV_DONE = 3,    /* last event of a choice: a request has n_choices of them */
    IFL_EV_PROMPT = 4,  /* prompt_logprobs: entries for prompt positions [index, index + n_lp),
                           after started and before any token, in position order (one event per
                           prefill chunk); position 0 has none (no token predicts it) */
} ifl_event_type;

typedef struct {
    ifl_event_type type;
    uint64_t request_id;
    uint64_t session;
    void *user;
    int32_t position; /* QUEUED */
    int32_t index;    /* TOKEN: 0, 1, ... of its choice; PROMPT: the first position */
    int32_t choice;   /* TOKEN, DONE: 0 .. n_choices - 1 */
    int32_t token;    /* TOKEN: the id */
    const ifl_logprob *lp; /* TOKEN with logprobs: the token's entry; PROMPT: n_lp entries; else
                              NULL. Valid during the callback */
    int32_t n_lp;          /* PROMPT */
    const char *text; /* TOKEN: newly released text, valid UTF-8 (may be empty). The
                         concatenation of a request's token texts is its completion. */
    size_t text_len;
    ifl_finish finish;                        /* DONE */
    int32_t prompt_tokens, completion_tokens; /* DONE (completion: of its choice) */
    int32_t cached_tokens; /* STARTED, DONE: prompt tokens found in the prefix cache */
    /* DONE: monotonic microseconds (ifl_now_us); 0 when the stage was never reached */
    uint64_t t_queued, t_admitted, t_first_token, t_finished;
    const char *message; /* DONE with IFL_FINISH_ERROR */
} ifl_event;

/* One step, for metrics and the live batch view. */
typedef struct {
    uint64_t step; /* 1, 2, ... per batcher */
    ifl_policy policy;
    uint64_t t_start; /* monotonic microseconds */
    double ms;        /* wall time of the backend step (+ sampling) */
    int32_t n_seqs;   /* sequences in the step */
    int32_t prefill_tokens, decode_tokens;
    const uint64_t *request_ids; /* (n_seqs) valid during the callback */
    const uint8_t *is_prefill;   /* (n_seqs) 1: a prefill chunk, 0: a decode token */
    const int32_t *cached;       /* (n_seqs) the request's cached prefix on the run that begins
                                    its prompt after it, else 0 */
    int32_t running, waiting;    /* after the step */
    int32_t kv_used, kv_total;   /* blocks */
} ifl_step_record;

typedef struct {
    ifl_policy policy;
    /* 0: the defaults of defaults.h (IFL_DEFAULT_MAX_BATCH, _MAX_QUEUE, _STEP_TOKENS) */
    int32_t max_batch;        /* most running sequences */
    int32_t max_queue;        /* most waiting requests */
    int32_t step_tokens;      /* token budget of a step (>= max_batch) */
    int32_t eos_token;        /* -1: none */
    const ifl_tokenizer *tok; /* for token text and stop strings (required) */
    int no_prefix_cache;      /* 1: every prompt is computed whole (kv.h) */
    uint64_t cache_salt;      /* folded into the prefix cache's keys (the model, weights, device) */
    void (*on_event)(void *ud, const ifl_event *ev);
    void (*on_step)(void *ud, const ifl_step_record *rec); /* optional */
    void *ud;
} ifl_batcher_params;

typedef struct ifl_batcher ifl_batcher;

/* The step budget a batcher of max_batch runs with when asked for step_tokens: at least one
 * token per running sequence (a decode step needs max_batch). */
static inline int32_t ifl_batcher_step_budget(int32_t max_batch, int32_t step_tokens)
{
    return step_tokens < max_batch ? max_batch : step_tokens;
}

/* Starts the batcher thread. The backend must have been created with max_seqs >= max_batch and
 * max_tokens >= step_tokens; the batcher uses it exclusively (and frees nothing of it). */
ifl_batcher *ifl_batcher_start(ifl_backend *be, const ifl_batcher_params *p, ifl_err *err);

/* Stops the thread: every request still waiting or running ends with done(cancelled). */
void ifl_batcher_stop(ifl_batcher *b);

/* Queues a request. On success *id is set and a queued event has been emitted. On refusal the
 * status says why and err has a sentence for the user; no event is emitted. *retry_after_ms
 * (when not NULL) is the suggested wait before trying again for QUEUE_FULL, else 0. */
ifl_submit_status ifl_batcher_submit(ifl_batcher *b, const ifl_request_params *p, uint64_t *id,
                                     int32_t *retry_after_ms, ifl_err *err);

/* Cancels one request (0 if it was unknown or already done) or all of a session's; a waiting one
 * ends at once, a running one at the end of the step in flight. Returns how many were found. */
int ifl_batcher_cancel(ifl_batcher *b, uint64_t request_id);
int ifl_batcher_cancel_session(ifl_batcher *b, uint64_t session);

typedef struct {
    int32_t running, waiting;
    int32_t kv_used, kv_total;
    uint64_t steps;
    uint64_t tokens_generated;
    /* the prefix cache (kv.h) */
    int prefix_cache;                /* on */
    int32_t kv_cached;               /* published blocks (held or not) */
    int32_t kv_cached_unused;        /* of them, held by no request (available to admission) */
    uint64_t prefix_lookups;         /* admissions that looked */
    uint64_t prefix_hits;            /* of them, those that found at least one block */
    uint64_t prefix_hit_tokens;      /* prompt tokens not computed thanks to the cache */
    uint64_t prefix_evictions;       /* cached blocks evicted for room */
    uint64_t prompt_tokens_computed; /* prompt tokens prefilled (the cached ones not counted) */
} ifl_batcher_stats;
void ifl_batcher_get_stats(ifl_batcher *b, ifl_batcher_stats *out);

/* Blocks until no request is waiting or running (for tests and benchmarks). */
void ifl_batcher_wait_idle(ifl_batcher *b);

const char *ifl_batcher_name(const ifl_batcher *b);

#endif
