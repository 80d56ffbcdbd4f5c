/* protocol.h: the client side of the WebSocket protocol (docs/protocol.md): parsing and checking
 * one client message, with the stable error codes and a sentence naming the field and value.
 * Pure functions: no sockets, no batcher; used by the server and unit-tested on their own. */
#ifndef IFL_PROTOCOL_H
#define IFL_PROTOCOL_H

#include <stddef.h>
#include <stdint.h>

#include "batcher.h"

#define PROTO_MAX_ID 64 /* bytes of a client request id */

typedef enum {
    PROTO_GENERATE = 0,
    PROTO_CANCEL,
    PROTO_SUBSCRIBE,
    PROTO_UNSUBSCRIBE,
    PROTO_PING,
} proto_kind;

/* Server-side limits the parser checks against. */
typedef struct {
    int32_t max_tokens; /* most tokens a request may ask for */
    int32_t n_vocab;    /* top_k upper bound */
    /* defaults for absent fields */
    int32_t def_max_tokens;
    double def_temperature, def_top_p;
    int32_t def_top_k;
} proto_limits;

typedef struct {
    proto_kind kind;
    int has_id;
    char id[PROTO_MAX_ID + 1];
    /* generate */
    char *prompt; /* heap, NUL-terminated; free with proto_msg_free */
    size_t prompt_len;
    ifl_policy policy;
    int32_t max_tokens;
    double temperature, top_p;
    int32_t top_k;
    int has_seed;
    uint64_t seed;
    int ignore_eos;
    int n_stop;
    char stop[IFL_MAX_STOPS][IFL_MAX_STOP_BYTES + 1];
    /* subscribe / unsubscribe */
    char topic[16];
} proto_msg;

typedef struct {
    const char *code; /* stable code of docs/protocol.md, e.g. "out_of_range" */
    char message[512];
    int has_id; /* the message carried a readable id */
    char id[PROTO_MAX_ID + 1];
} proto_error;

/* Parses one text message (UTF-8 already checked by the caller). 0 on success; -1 with *err
 * filled. Either way call proto_msg_free. */
int proto_parse(const char *text, size_t len, const proto_limits *lim, proto_msg *out,
                proto_error *err);
void proto_msg_free(proto_msg *m);

void proto_error_set(proto_error *e, const char *code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

#endif
