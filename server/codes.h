/* codes.h: the one registry of the error codes clients see (docs/protocol.md "error"): an enum,
 * and a table giving each its stable name, the HTTP status an HTTP front end answers it with, and a
 * line of meaning. The parser, the request layer, the front ends and /metrics all index it, so a
 * code cannot be misspelt, and /metrics has a series for every code from the start.
 * What it is not: the engine's statuses (engine/batcher.h), which the request layer maps here. */
#ifndef IFL_CODES_H
#define IFL_CODES_H

typedef enum {
    IFL_CODE_INVALID_JSON = 0,
    IFL_CODE_INVALID_MESSAGE,
    IFL_CODE_MISSING_FIELD,
    IFL_CODE_WRONG_TYPE,
    IFL_CODE_UNKNOWN_TYPE,
    IFL_CODE_UNKNOWN_FIELD,
    IFL_CODE_OUT_OF_RANGE,
    IFL_CODE_EMPTY_PROMPT,
    IFL_CODE_PROMPT_TOO_LONG,
    IFL_CODE_UNKNOWN_MODEL,
    IFL_CODE_UNKNOWN_TOPIC,
    IFL_CODE_DUPLICATE_ID,
    IFL_CODE_UNKNOWN_ID,
    IFL_CODE_TOO_MANY_REQUESTS,
    IFL_CODE_QUEUE_FULL,
    IFL_CODE_BINARY_FRAME,
    IFL_CODE_SHUTTING_DOWN,
    IFL_CODE_INVALID_REQUEST,
    IFL_CODE_OUT_OF_MEMORY,
    IFL_CODE_ENGINE_ERROR,
    IFL_CODE_UNAUTHORIZED,
    IFL_CODE_FORBIDDEN,
    IFL_CODE_HEADER_TOO_LARGE,
    IFL_CODE_TARGET_TOO_LONG,
    IFL_CODE_BAD_HTTP,
    IFL_CODE_REQUEST_TIMEOUT,
    IFL_CODE_TOO_MANY_CONNECTIONS,
    IFL_CODE_UNSUPPORTED_FIELD,
    IFL_N_CODES
} ifl_code;

typedef struct {
    const char *name;    /* stable, e.g. "out_of_range" */
    int http_status;     /* 400, 404, 429, 500, 503 ... */
    const char *meaning; /* one line, as in docs/protocol.md */
} ifl_code_info;

const ifl_code_info *
ifl_code_get(ifl_code c); /* never NULL: an out-of-range value -> engine_error */
const char *ifl_code_name(ifl_code c);
/* The code named `name`; -1 if there is none. */
int ifl_code_parse(const char *name, ifl_code *out);

#endif
