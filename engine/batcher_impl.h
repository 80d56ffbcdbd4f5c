/* batcher_impl.h: the batcher's state, shared by its two halves: batcher.c (queue, submission,
 * cancellation, lifetime: any thread) and batcher_loop.c (the batcher thread). Private to
 * engine/: nothing outside those two files includes it.
 *
 * Guards:
 *   {lock}   the waiting queue (one FIFO per session, visited round-robin), the running list's
 *            membership, cancel flags, counters for stats, `stopping`.
 *   batcher  everything about a running request's generation (KV table, sampler state, text),
 *   thread   the KV pool accounting, the backend, the step buffers: touched by the batcher thread
 *            only. */
#ifndef IFL_BATCHER_IMPL_H
#define IFL_BATCHER_IMPL_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "batcher.h"
#include "kv.h"
#include "logit_adj.h"
#include "sampler.h"
#include "util.h"

typedef struct req {
    uint64_t id, session;
    void *user;
    int32_t *prompt; /* (n_prompt + max_tokens): the prompt, then each generated token */
    int32_t n_prompt;
    int32_t n_cached; /* prompt tokens whose KV the prefix cache had at admission */
    int32_t max_tokens;
    ifl_sampling sampling;
    uint64_t seed; /* its Philox stream: draw n is ifl_philox_bits53(seed, n) (philox.h) */
    int ignore_eos;
    int n_stop;
    char stop[IFL_MAX_STOPS][IFL_MAX_STOP_BYTES + 1];
    size_t stop_len[IFL_MAX_STOPS];
    /* logit controls (batcher.h): nothing allocated when they are off */
    int32_t min_tokens;
    int32_t n_stop_ids; /* the stop ids are ban[0 .. n_stop_ids) */
    int32_t n_ban;      /* banned while n_generated < min_tokens: the stop ids, then EOS */
    int32_t ban[IFL_MAX_STOP_IDS + 1];
    ifl_logit_bias *bias; /* (adj.n_bias) the copy of logit_bias, or NULL */
    ifl_seen seen;        /* the prompt (with repetition) and generated tokens, with penalties */
    ifl_logit_adj adj;    /* the row's adjustments; n_ban set for each step (batcher_loop.c) */
    /* scoring and choices (batcher_choices.c) */
    int logprobs, prompt_logprobs;
    int32_t top_logprobs;
    int32_t choice;        /* 0 .. n_choices - 1 */
    int32_t n_choices;     /* of its request (the same in every choice) */
    struct req *children;  /* choice 0: choices 1.. (linked by next_choice), owned by it from
                              submission until its prompt is computed; then they run on their own */
    struct req *next_choice;
    uint64_t t_queued, t_admitted, t_first, t_finished;
    struct req *next; /* {lock} in its session's FIFO while waiting */
    int32_t position; /* {lock} last published queue position */
    int cancel;       /* {lock} set by cancel(), acted on by the batcher thread */
    /* batcher thread only, once admitted */
    ifl_kv_seq kv;
    int32_t n_done; /* prompt tokens already in the KV cache */
    int32_t n_generated;
    int32_t last_token;
    ifl_utf8_stream utf8;
    char *held; /* released text not yet sent: a possible stop-string start */
    size_t held_len, held_cap;
} req;

typedef struct {
    uint64_t session;
    req *head, *tail;
    int32_t count;
    int32_t running; /* its requests running: set by batcher_shares_begin, kept during admission */
} session_q;

struct ifl_batcher {
    ifl_batcher_params p;
    ifl_backend *be;
    const ifl_config *cfg;
    pthread_t thread;
    pthread_mutex_t lock;
    pthread_cond_t wake; /* {lock} new work or stop */
    pthread_cond_t idle; /* {lock} nothing waiting or running */
    /* {lock} */
    session_q *sq;            /* sessions with waiting requests, in round-robin order */
    int32_t n_sq, cap_sq, rr; /* rr: the session admitted from next */
    req **pos_cursor; /* (max_queue) publish_positions' scratch: each session's next request */
    int32_t n_waiting;
    req **running; /* admitted, in admission order (max_batch) */
    int32_t n_running;
    int32_t n_pending_choices; /* batch slots held by admitted choices waiting for their prompt */
    int32_t n_finishing; /* off the running list, done event not yet out */
    int stopping;
    int positions_dirty;
    int32_t batch_share;        /* batch slots a session may hold while others wait (admission) */
    uint64_t admit_interval_us; /* smoothed time between admissions while requests wait; 0: none */
    uint64_t backlog_since_us; /* the last admission (or the first arrival) with requests waiting */
    ifl_batcher_stats stats;
    /* batcher thread only */
    ifl_kv_pool pool;
    ifl_sampler sampler;
    float *logits; /* (logits_rows, V), for steps drawn or scored on the host (grown as needed) */
    int32_t logits_rows;
    ifl_sample_req *sreq; /* (2 max_batch) a run's draw, then the first draws of new choices */
    int32_t *next_tok;    /* (2 max_batch) */
    int32_t *draw_row;    /* (2 max_batch) the logits row of each draw */
    int32_t *n_rows;      /* (max_batch) rows each run asks of the step */
    int32_t *first_row;   /* (max_batch) its first row */
    ifl_logprob *tok_lp;  /* (2 max_batch) the drawn tokens' entries */
    ifl_logprob *prompt_lp; /* (step_tokens) the prompt positions scored this step */
    int32_t *cow_src, *cow_dst;     /* (max_batch) copy-on-write pairs of the step */
    int32_t *tokens, *run_start, *pos0, *nblk;
    const int32_t **tables;
    req **in_step;   /* (max_batch) the running list as this step saw it */
    req **step_reqs; /* (max_batch) the step's requests, in run order */
    req **cancelled; /* (max_batch) take_cancels' scratch */
    uint64_t *step_ids;
    uint8_t *step_prefill;
    int32_t *step_cached; /* (max_batch) the step record's cached */
    char *text;           /* token text scratch */
    size_t text_cap;
    uint64_t step_no;
};

/* ---- batcher.c's helpers that the loop uses -------------------------------------------------- */

void batcher_emit(ifl_batcher *b, const ifl_event *ev);
/* The done event of r (times, token counts, the finish reason and its message). */
void batcher_emit_done(ifl_batcher *b, req *r, ifl_finish f, const char *message);
void batcher_req_free(req *r);
/* The batcher's copy of a checked request (one choice of it); NULL when out of memory. */
req *batcher_req_copy(const ifl_batcher *b, const ifl_request_params *p);
/* {lock} The request admitted next in round-robin order, or NULL when none waits; it stays in the
 * queue until batcher_pop_next removes it. */
req *batcher_peek_next(ifl_batcher *b);
void batcher_pop_next(ifl_batcher *b);
/* {lock} Emits a queued event for each waiting request whose position changed. */
void batcher_publish_positions(ifl_batcher *b);

/* ---- batcher_share.c: the shares (all {lock}) ---------------------------------------------- */

/* The queue places kept for sessions with nothing waiting: a quarter of max_queue. */
int32_t batcher_queue_reserve(int32_t max_queue);
/* Whether a request of the session whose queue is q (NULL: nothing of it waits) may join the
 * queue; when not, the status (QUEUE_FULL), a sentence and the suggested wait. */
ifl_submit_status batcher_queue_room(const ifl_batcher *b, const session_q *q,
                                     int32_t *retry_after_ms, ifl_err *err);
/* Before an admission round: the batch share (max_batch over the sessions running or waiting,
 * rounded up) and each waiting session's running count. */
void batcher_shares_begin(ifl_batcher *b);
/* The request admitted next: round-robin from rr over the sessions below their share, else (none
 * is) the next in plain round-robin. It becomes the one batcher_pop_next takes (rr points at its
 * session); NULL when none waits. */
req *batcher_choose_next(ifl_batcher *b);
/* After an admission (the request already off the queue): the interval measured for retry_after. */
void batcher_note_admission(ifl_batcher *b, uint64_t now_us);

/* ---- batcher_choices.c: several choices of one prompt, and scoring ------------------------- */

/* The request and its choices from p (checked): choice 0 with the others on its children list,
 * each with its own stream (ifl_choice_seed). NULL when out of memory. */
req *batcher_req_group(const ifl_batcher *b, const ifl_request_params *p);
/* Frees a request and the choices it still owns. */
void batcher_req_free_group(req *r);
/* Every choice of a request that never ran ends with f (their done events, choice by choice). */
void batcher_emit_done_group(ifl_batcher *b, req *r, ifl_finish f, const char *message);
/* Admission of r's KV and of its choices' forks: all or nothing (-1, pool unchanged). */
int batcher_admit_kv(ifl_batcher *b, req *r);
/* The choices' first draws when r's prompt ends in this step: for each pending choice a copy of
 * r's row `row` at row (*free_row)++ of the logits (room made by the caller) and its sample
 * request at sreq[n_draw ..]. Returns the new n_draw. */
int32_t batcher_add_choice_draws(ifl_batcher *b, req *r, int32_t row, int32_t n_draw,
                                 int32_t *free_row);
/* How many choices r still holds (pending its prompt). */
int32_t batcher_count_choices(const req *r);
/* r's prompt is computed: its pending choices join the running list (their prompt done, their
 * slots no longer pending). Returns the first (follow next_choice); r holds none after. */
req *batcher_take_choices(ifl_batcher *b, req *r);
/* r ends before its prompt was computed: its pending choices end with it (KV back, done events). */
void batcher_end_pending_choices(ifl_batcher *b, req *r, ifl_finish f, const char *message);
/* Rows of logits the step's host buffer must hold: grows b->logits; -1 when out of memory. */
int batcher_logits_room(ifl_batcher *b, int32_t rows);

/* The thread's body (batcher_loop.c), started by ifl_batcher_start. */
void *batcher_main(void *arg);

#endif
