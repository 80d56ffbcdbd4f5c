/* api_table.h: the tables that say what the server's APIs are, so that the code that serves them
 * reads a row instead of branching on which API it serves:
 *   the front ends    ws, openai, triton (req_api): the log's requests.api, /metrics' api label,
 *                     the paths each answers under and the shape of its errors there (the wire
 *                     guard's answers, before any route);
 *   the model names   every name a request may give for a policy (OpenAI's "model", Triton's path,
 *                     GET /v1/models, /v2's metadata, the error messages that list them).
 * The HTTP generation APIs (Triton's generate, OpenAI's completions and chat completions) are one
 * row each of HTTP_APIS (http_api.h), defined in api_table.c with these.
 * Adding a front end: a req_api value and its row; a model name: its row. Pure data and pure
 * functions: any thread. */
#ifndef IFL_API_TABLE_H
#define IFL_API_TABLE_H

#include <stddef.h>

#include "batcher.h"
#include "codes.h"
#include "strbuf.h"

/* The front end a request came through (the log's requests.api, /metrics' api label). */
typedef enum { REQ_API_WS = 0, REQ_API_OPENAI, REQ_API_TRITON, REQ_N_APIS } req_api;

typedef struct {
    const char *name;   /* as logged and labelled: "ws", "openai", "triton" */
    const char *prefix; /* the request targets it answers under: one that starts with it, followed
                           by the end, '/' or '?' (or ends in '/'); NULL: every other target */
    /* An error answered before any route (the wire guard's): the JSON body. */
    void (*write_error)(strbuf *sb, int status, ifl_code code, const char *message);
} api_front_end;

extern const api_front_end API_FRONT_ENDS[REQ_N_APIS];

const char *req_api_name(req_api a); /* its row's name; out of range: the default front end's */
/* The front end whose paths the request target t (its first n bytes; not NUL-terminated) is
 * under: the row with a matching prefix, else REQ_API_WS (plain errors). */
req_api api_front_end_of(const char *t, size_t n);

/* A model name and the policy it serves; triton: also one of Triton's models (/v2/models/NAME). */
typedef struct {
    const char *name;
    ifl_policy policy;
    int triton;
} api_model;

extern const api_model API_MODELS[];
extern const int API_N_MODELS;
/* The policy of the served model's own name (the model directory's: an OpenAI model id). */
#define API_SERVED_POLICY IFL_POLICY_ITERATIVE

/* The model named by the len bytes at name (triton_only: only Triton's), or served (when not NULL
 * or empty; not for triton_only): 0 with *policy set, or -1. */
int api_model_policy(const char *name, size_t len, const char *served, int triton_only,
                     ifl_policy *policy);
/* The names (triton_only: Triton's), sep between them and last_sep before the last, appended to
 * sb. */
void api_model_list(strbuf *sb, int triton_only, const char *sep, const char *last_sep);

#endif
