/* request.h: the request layer: one generation request from any front end, whatever its wire
 * format. A front end (/ws in ws.c; OpenAI's /v1 and Triton's /v2 in http_gen.c) parses its
 * messages into req_params and writes results back in its own format through a req_sink; everything
 * in between happens here, once: checks that need the server's state (shutting down, duplicate id,
 * requests in flight per owner), tokenizing and the context check, submission to the batcher of the
 * chosen policy, routing the batcher's events back to the owner, the metrics, and the finished
 * request's log (stderr line and SQLite record, reqlog.h).
 *
 * Owners. Requests belong to a req_owner (a /ws connection; over HTTP, each request). An owner that
 * goes away first calls req_owner_gone: its requests are cancelled in the batchers and their
 * remaining events are dropped on arrival; each request is freed when its done event arrives.
 *
 * Threads: everything here runs on the service thread except req_batcher_event and
 * req_batcher_step, the batchers' callbacks, which copy the event into a bridge item (bridge.h)
 * and touch nothing else. What it is not: a parser or a writer of any wire format. */
#ifndef IFL_REQUEST_H
#define IFL_REQUEST_H

#include <stddef.h>
#include <stdint.h>

#include "api_table.h" /* req_api: the front ends */
#include "batcher.h"
#include "bridge.h"
#include "codes.h"
#include "dblog.h"
#include "logit_adj.h"
#include "metrics.h"
#include "params.h"
#include "strbuf.h"
#include "tokenizer.h"

#define REQ_MAX_ID 64     /* bytes of a client's request id */
#define REQ_MAX_CONV 64   /* characters of a conversation id */
#define REQ_SESSION_HEX 17 /* bytes of a session id in hex (req_session_hex), with the NUL */
#define REQ_PEER_BYTES 16 /* a client's address as the log's refusal budget keys it (reqlog.h) */


/* One prompt of OpenAI's batch: its text (heap, NUL-terminated), or its token ids (heap). */
typedef struct {
    char *text;
    size_t len;
    int32_t *ids;
    int32_t n_ids;
} req_prompt;

/* What a front end parsed: the parameters of one generation, defaults filled in. The value
 * parameters (max_tokens .. ignore_eos) are the rows of the parameter table (params.h), which
 * names, checks, logs and documents them. */
typedef struct req_params {
    char id[REQ_MAX_ID + 1]; /* the client's id, unique among its owner's requests in flight */
    char *prompt; /* heap, NUL-terminated; req_submit takes it for the request log (sets it to
                     NULL), else it stays the caller's to free */
    size_t prompt_len;
    int32_t *prompt_ids; /* instead of prompt: token ids (heap, the caller's; OpenAI's array) */
    int32_t n_prompt_ids;
    struct req_chat *chat; /* messages: the prompt's lines (chat_template.h), so that the request
                              layer can trim the conversation; heap, the caller's to free
                              (req_chat_free); NULL: a plain prompt */
    int truncate;          /* chat: leave the oldest turns out when they do not fit */
    int has_truncate_prompt_tokens;
    int32_t truncate_prompt_tokens; /* a plain prompt: keep its last this many tokens */
    ifl_policy policy;
    req_api api; /* REQ_API_WS unless an HTTP front end sets it */
    int32_t max_tokens, min_tokens;
    double temperature, top_p, min_p;
    int32_t top_k;
    double presence_penalty, frequency_penalty, repetition_penalty;
    int has_seed;
    uint64_t seed; /* 0 .. 2^53-1 */
    int ignore_eos;
    int n_stop;
    char stop[IFL_MAX_STOPS][IFL_MAX_STOP_BYTES + 1];
    int n_stop_ids;
    int32_t stop_ids[IFL_MAX_STOP_IDS];
    int n_logit_bias;
    ifl_logit_bias logit_bias[IFL_MAX_LOGIT_BIAS];
    int32_t n;             /* choices of the prompt, 1 .. IFL_MAX_CHOICES */
    int want_logprobs;     /* each token's logprob (completions', /ws' logprobs given; chat's
                              logprobs true) */
    int32_t logprobs;      /* with it, this many best tokens at each position (0 .. 20;
                              completions' logprobs, chat's top_logprobs) */
    int echo;              /* completions: the prompt (and with logprobs its scores) first */
    param_api from;        /* the API whose parser read these (the log's rows, params.h) */
    char conversation[REQ_MAX_CONV + 1]; /* the client's conversation id ("": none), logged */
    /* OpenAI's batch (a list of prompts): one request each, submitted by the front end (the
     * batch is its own: req_submit reads prompt / prompt_ids); prompt_index is this one's place,
     * its choices' index prompt_index * n + choice. */
    int32_t prompt_index;
} req_params;

/* The best tokens per logprob entry a request asks for; -1: no logprobs. */
static inline int32_t req_logprobs(const req_params *p)
{
    return p->want_logprobs ? p->logprobs : -1;
}

/* A finished request (or with n > 1, one of its choices), as every front end reports it. */
typedef struct {
    int is_choice;  /* 1: the end of choice `choice` of a request of n > 1 (choice_done); 0: the
                       request's end (with n > 1: usage summed over the choices, finish the first
                       of error and cancelled among them, else choice 0's) */
    int32_t choice;
    ifl_finish finish;
    int32_t prompt_tokens, completion_tokens;
    int32_t cached_tokens; /* of the prompt, found in the prefix cache */
    int32_t trimmed_messages, trimmed_tokens; /* left out of the prompt (srv_req's) */
    double queue_ms;       /* arrival to admission (to the end if never admitted) */
    double ttft_ms;        /* arrival to the first token; < 0: no token */
    double total_ms;       /* arrival to the end */
    double tokens_per_s;   /* (tokens - 1) over first to last token; 0 with fewer than 2 */
    ifl_code code;         /* why it failed (finish error): engine_error or out_of_memory */
    const char *message;   /* finish error: why, else NULL */
} req_result;

/* One generated token, as the sink is told it. */
typedef struct {
    int32_t choice; /* 0 .. n - 1 */
    int32_t index;  /* 0, 1, ... within its choice */
    int32_t token;
    const char *text; /* newly released text (valid UTF-8, may be empty) */
    size_t len;
    const ifl_logprob *lp; /* with logprobs: its entry (logprobs.h); else NULL */
} req_token;

typedef struct srv_req srv_req;
typedef struct req_owner req_owner;
typedef struct reqlog reqlog; /* reqlog.h */
struct ifl_runtime;           /* runtime.h */

/* How a front end is told about its requests (service thread). `fe` is req_owner.fe. */
typedef struct {
    void (*queued)(void *fe, const srv_req *r, int32_t position);
    void (*started)(void *fe, const srv_req *r);
    void (*token)(void *fe, const srv_req *r, const req_token *t);
    /* echo with logprobs: the prompt's positions [index, index + n) scored (index >= 1; in order,
     * after started and before any token). NULL: never asked for. */
    void (*prompt)(void *fe, const srv_req *r, int32_t index, const ifl_logprob *lp, int32_t n);
    /* n > 1: choice res->choice ended (res->is_choice); the request's done follows the last */
    void (*choice_done)(void *fe, const srv_req *r, const req_result *res);
    void (*done)(void *fe, const srv_req *r, const req_result *res); /* r is freed after this */
    /* a request refused (id is its id) or a message that failed: id NULL when unknown;
     * retry_after_ms > 0: the suggested wait before trying again (queue_full) */
    void (*error)(void *fe, const char *id, ifl_code code, const char *message,
                  int32_t retry_after_ms);
} req_sink;

struct req_owner {
    const req_sink *sink;
    void *fe;                     /* the front end's connection */
    uint64_t session;             /* fairness in the batchers; shared by the owners of a
                                     session (cancels go by request, never by session) */
    char session_hex[REQ_SESSION_HEX]; /* as logged (req_session_hex) */
    int32_t max_inflight;         /* requests in flight at most */
    uint8_t peer[REQ_PEER_BYTES]; /* the client's address (reqlog_peer_key): the budget of
                                     its refusals in the log; zero: unknown */
    /* Its sessions row when the front end leaves it to the log (HTTP): written before the owner's
     * first logged request, refused or accepted (reqlog_session_row), so that a connection whose
     * refusals were not logged leaves no row. session_row.session NULL: none to write. */
    ifl_dblog_session session_row;
    int *session_logged; /* set to 1 once the row is written (NULL: nothing to tell) */
    srv_req *reqs;       /* in flight, newest first */
    int32_t n_reqs;
};

/* One request in flight (service thread; the batcher sees it only as the `user` of its events). */
struct srv_req {
    req_owner *owner;     /* NULL once the owner went away */
    struct srv_req *next; /* in owner->reqs */
    char id[REQ_MAX_ID + 1];
    ifl_policy policy;
    req_api api;
    uint64_t rid;     /* the batcher's request id */
    uint64_t session; /* its owner's, kept for the log after the owner is gone */
    uint64_t seed;
    int32_t prompt_tokens;               /* -1 until tokenized */
    int is_chat;                         /* its prompt was messages */
    int32_t trimmed_messages;            /* messages left out of the conversation (truncate) */
    int32_t trimmed_tokens;              /* tokens left out (those messages', or of a plain
                                            prompt with truncate_prompt_tokens) */
    char *messages;                      /* chat, only with a database: the messages as logged
                                            (JSON, heap) */
    int32_t cached_tokens;               /* of them, found in the prefix cache (set when started) */
    char conversation[REQ_MAX_CONV + 1]; /* the client's ("": none) */
    int32_t max_tokens;
    int32_t n_choices;   /* 1 .. IFL_MAX_CHOICES */
    int32_t logprobs;    /* -1: none, else the best tokens per entry */
    int echo;            /* the prompt goes first in the answer */
    int score_prompt;    /* the engine scores the prompt (prompt events come) */
    int32_t prompt_index; /* in its front end's batch (req_params) */
    int32_t *prompt_ids; /* with echo: the prompt's tokens (prompt_tokens of them); else NULL */
    uint64_t t_arrival, t_first, t_last; /* monotonic us */
    int32_t n_tokens;                    /* token events received, all choices */
    int32_t choice_tokens[IFL_MAX_CHOICES]; /* of them, per choice */
    int32_t prompt_next; /* score_prompt: the next prompt position an event must bring */
    int lost;            /* an event was lost (out of memory): stopped */
    /* the choices' ends so far (n_choices > 1) */
    int32_t n_done;
    req_result sum;      /* usage summed, the finish that wins, the first first-token */
    uint64_t t_first_token; /* the earliest choice's first token (engine's stamp), 0: none */
    /* for the request log */
    char *prompt; /* copy, only with a database */
    size_t prompt_len;
    char *params;      /* JSON (params_log_json), heap; NULL: "{}" */
    strbuf completion; /* choice 0's token texts */
    uint32_t *offsets; /* (n_logged) us after t_arrival, choice 0's tokens */
    int32_t n_logged;
    int32_t cap_offsets;
    bridge_item *done;     /* (n_choices) the done events' queue items, allocated with the request:
                              a done needs no allocation when it comes */
    char (*done_msg)[IFL_ERR_MAX]; /* (n_choices) their messages (finish error) */
};

typedef struct {
    ifl_batcher *b[IFL_N_POLICIES]; /* by policy (their one owner); NULL until the engine is up
                                       and once stopped */
    const struct ifl_runtime *rt; /* the engine: its tokenizer and the model's context
                                     (rt->model.cfg), read once the batchers are up */
    int stopping; /* the server's stop has begun: refuse new requests with shutting_down (its one
                     flag: the rest of the server reads it here) */
    metrics *m;
    reqlog *log;
    bridge *bridge;
    uint64_t rng_state;
} req_layer;

/* Service thread. */
void req_owner_init(req_owner *o, const req_sink *sink, void *fe, uint64_t session,
                    int32_t max_inflight);
srv_req *req_find(const req_owner *o, const char *id);

/* Submits a request arrived at t_arrival (monotonic us). Refusals go to the owner's sink as an
 * error and into the log with their code; NULL then. */
srv_req *req_submit(req_layer *L, req_owner *o, req_params *p, uint64_t t_arrival);

/* Cancels the owner's request `id`; an unknown id is answered with an unknown_id error. */
void req_cancel(req_layer *L, req_owner *o, const char *id);

/* Cancels everything the owner has in flight, request by request: other owners' requests in the
 * same session go on (their done events still come). */
void req_owner_cancel_all(req_layer *L, req_owner *o);

/* The owner goes away: its requests are cancelled and their events dropped when they arrive. */
void req_owner_gone(req_layer *L, req_owner *o);

/* A batcher event, drained from the bridge (the done event frees the request). */
void req_handle_event(req_layer *L, const bridge_item *it);

/* A step record, drained from the bridge: metrics and the log's sample. */
void req_handle_step(req_layer *L, const ifl_step_record *st);

/* The batchers' callbacks (batcher threads): ud is the req_layer. */
void req_batcher_event(void *ud, const ifl_event *ev);
void req_batcher_step(void *ud, const ifl_step_record *rec);

/* A session id as it is logged and sent (hello's "session"): 16 lowercase hex digits. */
void req_session_hex(uint64_t session, char hex[REQ_SESSION_HEX]);

/* A random 64-bit value (seeds, session ids). */
uint64_t req_random_u64(req_layer *L);

#endif
