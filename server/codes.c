/* codes.c: the table of codes.h, in the enum's order (checked at compile time by its length). */
#include "codes.h"

#include <string.h>

static const ifl_code_info CODES[] = {
    [IFL_CODE_INVALID_JSON] = {"invalid_json", 400,
                               "the text frame is not one JSON value (raw control characters "
                               "in strings refused)"},
    [IFL_CODE_INVALID_MESSAGE] = {"invalid_message", 400,
                                  "the JSON is not an object, has a field twice, or a string "
                                  "holds U+0000"},
    [IFL_CODE_MISSING_FIELD] = {"missing_field", 400, "a required field is absent"},
    [IFL_CODE_WRONG_TYPE] = {"wrong_type", 400, "a field has the wrong JSON type"},
    [IFL_CODE_UNKNOWN_TYPE] = {"unknown_type", 400, "`type` is not one of the client messages"},
    [IFL_CODE_UNKNOWN_FIELD] = {"unknown_field", 400, "a field this message type does not have"},
    [IFL_CODE_OUT_OF_RANGE] = {"out_of_range", 400, "a number or string outside its range"},
    [IFL_CODE_EMPTY_PROMPT] = {"empty_prompt", 400, "`prompt` is empty"},
    [IFL_CODE_PROMPT_TOO_LONG] = {"prompt_too_long", 400,
                                  "prompt tokens + max_tokens exceed the context or the KV pool"},
    [IFL_CODE_UNKNOWN_MODEL] = {"unknown_model", 404, "`model` is not a model this server serves"},
    [IFL_CODE_UNKNOWN_TOPIC] = {"unknown_topic", 400, "a subscription to an unknown topic"},
    [IFL_CODE_DUPLICATE_ID] = {"duplicate_id", 400,
                               "a request with this id is still in flight on this connection"},
    [IFL_CODE_UNKNOWN_ID] = {"unknown_id", 404, "a cancel of an id not in flight"},
    [IFL_CODE_TOO_MANY_REQUESTS] = {"too_many_requests", 429,
                                    "the connection has its limit of requests in flight"},
    [IFL_CODE_QUEUE_FULL] = {"queue_full", 429, "the batcher's waiting queue is full; try again"},
    [IFL_CODE_BINARY_FRAME] = {"binary_frame", 400, "a binary frame: only JSON text is understood"},
    [IFL_CODE_SHUTTING_DOWN] = {"shutting_down", 503, "the server is stopping"},
    [IFL_CODE_INVALID_REQUEST] = {"invalid_request", 400,
                                  "the request cannot be run as given (e.g. its prompt cannot be "
                                  "tokenized)"},
    [IFL_CODE_OUT_OF_MEMORY] = {"out_of_memory", 503,
                                "the server ran out of memory for this request"},
    [IFL_CODE_ENGINE_ERROR] = {"engine_error", 500, "the engine failed while running the request"},
    [IFL_CODE_UNAUTHORIZED] = {"unauthorized", 401,
                               "the server has an API key (--api-key) and the request lacks it"},
    [IFL_CODE_FORBIDDEN] = {"forbidden", 403,
                            "the page's Origin or the Host is not one this server answers "
                            "(--allowed-origins, --allowed-hosts)"},
    [IFL_CODE_HEADER_TOO_LARGE] = {"header_too_large", 431,
                                   "the request head, or one header's value, is larger than the "
                                   "server takes"},
    [IFL_CODE_TARGET_TOO_LONG] = {"target_too_long", 414, "the request target is too long"},
    [IFL_CODE_BAD_HTTP] = {"bad_http", 400,
                           "the request is not well-formed HTTP/1.1 (a control character, %00, a "
                           "bad Content-Length, too many query parameters)"},
    [IFL_CODE_REQUEST_TIMEOUT] = {"request_timeout", 408,
                                  "the request's head and body did not arrive within "
                                  "--request-timeout, or its body came slower than "
                                  "--min-body-rate"},
    [IFL_CODE_TOO_MANY_CONNECTIONS] = {"too_many_connections", 503,
                                       "the server holds --max-connections sockets and none could "
                                       "make room; try again"},
    [IFL_CODE_UNSUPPORTED_FIELD] = {"unsupported_field", 400,
                                    "a known field with a value this server does not support "
                                    "(only its neutral values are accepted)"},
};

_Static_assert(sizeof CODES / sizeof CODES[0] == IFL_N_CODES, "codes.c: one entry per ifl_code");

const ifl_code_info *ifl_code_get(ifl_code c)
{
    return (unsigned)c < IFL_N_CODES ? &CODES[c] : &CODES[IFL_CODE_ENGINE_ERROR];
}

const char *ifl_code_name(ifl_code c)
{
    return ifl_code_get(c)->name;
}

int ifl_code_parse(const char *name, ifl_code *out)
{
    for (int i = 0; i < IFL_N_CODES; i++)
        if (!strcmp(CODES[i].name, name)) {
            *out = (ifl_code)i;
            return 0;
        }
    return -1;
}
