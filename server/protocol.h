/* protocol.h: the WebSocket protocol of docs/protocol.md, both directions: parsing and checking
 * one client message (with a stable code from codes.h and a sentence naming the field and value),
 * and writing every server frame (hello, queued, started, token, done, error, step, subscribed /
 * unsubscribed, pong). Pure functions: no sockets, no batcher, no state; the writers append one
 * JSON object to a strbuf. tests/unit/test_protocol.c checks the parser against every documented
 * error, and tests/unit/test_frames.c every example of docs/protocol.md against these writers. */
#ifndef IFL_PROTOCOL_H
#define IFL_PROTOCOL_H

#include <stddef.h>
#include <stdint.h>

#include "batcher.h"
#include "codes.h"
#include "params.h"
#include "request.h"
#include "strbuf.h"

#define PROTO_MAX_ID REQ_MAX_ID /* bytes of a client request id */

typedef enum {
    PROTO_GENERATE = 0,
    PROTO_CANCEL,
    PROTO_SUBSCRIBE,
    PROTO_UNSUBSCRIBE,
    PROTO_PING,
} proto_kind;

/* Server-side limits the parser checks against. */
typedef struct proto_limits {
    int32_t max_tokens; /* most tokens a request may ask for */
    int32_t n_vocab;    /* top_k upper bound */
    /* defaults for absent fields */
    int32_t def_max_tokens;
    double def_temperature, def_top_p;
    int32_t def_top_k;
    int def_truncate; /* a chat's truncate when absent (serve --trim) */
} proto_limits;

typedef struct {
    proto_kind kind;
    int has_id;
    char id[PROTO_MAX_ID + 1];
    req_params gen; /* generate: its parameters (gen.id = id); free with proto_msg_free */
    char topic[16]; /* subscribe / unsubscribe */
} proto_msg;

typedef struct proto_error {
    ifl_code code; /* stable code of docs/protocol.md, e.g. IFL_CODE_OUT_OF_RANGE */
    char message[512];
    char param[48]; /* the field it is about ("" when none): OpenAI's error.param */
    int has_id;     /* the message carried a readable id */
    char id[PROTO_MAX_ID + 1];
} proto_error;

/* Parses one text message (UTF-8 already checked by the caller). 0 on success; -1 with *err
 * filled. Either way call proto_msg_free. */
int proto_parse(const char *text, size_t len, const proto_limits *lim, proto_msg *out,
                proto_error *err);
void proto_msg_free(proto_msg *m);

/* The generation parameters of one JSON object, for the HTTP APIs: the prompt from prompt_field
 * (a non-empty string; NULL: the caller takes the prompt itself), then the value parameters api
 * knows (params_parse: defaults from lim, each checked); the policy is left as iterative (the
 * caller's route decides). Unknown fields are the caller's to check (params_check_fields). 0, or
 * -1 with *err; either way free m->prompt. */
struct cJSON;
int proto_parse_params(const struct cJSON *obj, param_api api, const char *prompt_field,
                       const proto_limits *lim, req_params *m, proto_error *err);
/* A JSON object from text (UTF-8 checked by the caller), refusing trailing bytes, \u0000 escapes
 * and an object at any depth with two members of one name (`duplicate key "NAME"`, param NAME) as
 * proto_parse does; NULL with *err. cJSON_Delete it. */
struct cJSON *proto_parse_json_object(const char *text, size_t len, proto_error *err);
/* "a string", "a number", ... for error messages. */
const char *proto_json_type_name(const struct cJSON *v);

/* Whether s is a conversation id: 1 to REQ_MAX_CONV characters of [A-Za-z0-9_-]. */
int proto_conversation_valid(const char *s);

void proto_error_set(proto_error *e, ifl_code code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* ---- frames to the client ------------------------------------------------------------------ */

/* What hello tells a new connection. */
typedef struct {
    const char *session;                       /* 16 hex digits */
    const char *server;                        /* "inflight 0.1.0" */
    const char *model_name, *weights, *device; /* model_name: its directory's name */
    const char *isa; /* the CPU kernel family in use: "avx512", "avx2", "scalar" */
    int32_t n_layer, n_head, n_embd, n_ctx, n_vocab;
    int32_t max_tokens, max_message, max_inflight, max_batch, max_queue, max_outbox;
    int32_t def_max_tokens, def_top_k;
    double def_temperature, def_top_p;
    int def_truncate;
    int user_key;        /* the connection presented a valid key */
    const char *history; /* "own", "all", "off" */
} proto_hello;

void proto_write_hello(strbuf *sb, const proto_hello *h);
void proto_write_queued(strbuf *sb, const char *id, ifl_policy policy, uint64_t rid,
                        int32_t position);
/* The trimmed counts: what the request layer left out of the prompt (request.h's srv_req). */
void proto_write_started(strbuf *sb, const char *id, ifl_policy policy, uint64_t rid,
                         int32_t prompt_tokens, int32_t cached_tokens, int32_t trimmed_messages,
                         int32_t trimmed_tokens, uint64_t seed);
/* A token: "choice" when the request has n_choices > 1, "logprob" and "top" when t->lp is set. */
void proto_write_token(strbuf *sb, const char *id, const req_token *t, int32_t n_choices);
/* "choice" when res->is_choice (the end of one choice of n > 1). */
void proto_write_done(strbuf *sb, const char *id, const req_result *res);
/* A log-probability as JSON: the float's shortest round trip (%.9g); null if not finite. The one
 * format of every API's logprobs, so that /ws and /v1 give the same digits. */
void proto_put_logprob(strbuf *sb, float x);
/* id NULL: "id":null (the message had no readable id). */
/* retry_after_ms > 0 adds "retry_after_ms" (queue_full's suggested wait) */
void proto_write_error(strbuf *sb, const char *id, ifl_code code, const char *message,
                       int32_t retry_after_ms);
/* A step frame is the same for every subscriber but its last field: write the shared part once
 * with proto_write_step, then per subscriber copy it and close it with proto_write_step_end. */
void proto_write_step(strbuf *sb, const ifl_step_record *st, double t_ms);
void proto_write_step_end(strbuf *sb, uint64_t dropped);
void proto_write_subscription(strbuf *sb, int subscribed);
void proto_write_pong(strbuf *sb, const char *id, int64_t time_ms); /* id NULL: no id */

#endif
