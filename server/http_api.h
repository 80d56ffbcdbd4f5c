/* http_api.h: what each HTTP generation API gives http_gen.c, which does everything else (the
 * body, the request layer, the stream): how a request body becomes req_params, and how the answer,
 * the stream's events and errors are written. Triton's generate extension is http_triton.c,
 * OpenAI's completions and chat completions http_openai.c. Pure functions: JSON in, bytes out; the
 * checks of the fields /ws also has are protocol.c's (proto_parse_params). Service thread. */
#ifndef IFL_HTTP_API_H
#define IFL_HTTP_API_H

#include <stdint.h>

#include "protocol.h"
#include "request.h"
#include "strbuf.h"

typedef enum { HTTP_API_TRITON = 0, HTTP_API_COMPLETIONS, HTTP_API_CHAT } http_api_kind;

#define HTTP_MODEL_MAX 64
/* A request header longer than the buffer it is read into (lws names no constant for it): refused,
 * never read as absent. */
#define HTTP_STATUS_HEADER_TOO_LARGE 431

/* One request as its API sees it: set by the route and the parser, read by the writers. */
typedef struct {
    http_api_kind api;
    int stream;
    int include_usage; /* OpenAI stream_options.include_usage */
    ifl_policy policy;
    char model[HTTP_MODEL_MAX + 1]; /* the model as the answer names it */
    char id[REQ_MAX_ID + 1];        /* Triton: the client's id, echoed */
    int has_id;
    char resp_id[48];          /* OpenAI: cmpl-... / chatcmpl-... */
    long long created;         /* OpenAI: unix seconds */
    int sent_role;             /* OpenAI chat stream: the role went out in the first delta */
    char user[REQ_MAX_ID + 1]; /* OpenAI user: the session of the batchers' fairness */
    int has_user;
} http_req_info;

/* The model names a request may give (OpenAI "model"; Triton's is in the path): iterative-gpt2,
 * simple-gpt2, iterative, static, and served_name (the model directory's name, meaning
 * iterative). 0 with *policy set, or -1. */
int http_model_policy(const char *name, const char *served_name, ifl_policy *policy);
/* How many bytes of the UTF-8 string s an error message quotes ("%.*s"): all of them up to max,
 * else max cut back to a character boundary, so the message stays UTF-8 (and its answer JSON). */
int http_clip_len(const char *s, size_t max);

/* ---- Triton (http_triton.c) ---- */
/* The Triton model named by the len bytes at name: iterative-gpt2 or simple-gpt2; 0 with *policy
 * set, or -1 with msg (cap bytes) saying which models there are. */
int triton_model(const char *name, size_t len, ifl_policy *policy, char *msg, size_t cap);
int triton_parse(const struct cJSON *root, const proto_limits *lim, http_req_info *ri,
                 req_params *p, proto_error *err);
/* A stream event for one token: the whole "data: ...\n\n". */
void triton_write_token(strbuf *sb, const http_req_info *ri, const char *text, size_t len);
/* The end: the JSON answer (text: the completion), or the stream's last event. */
void triton_write_end(strbuf *sb, const http_req_info *ri, const req_result *res, const char *text,
                      size_t len);
void triton_write_error(strbuf *sb, const http_req_info *ri, ifl_code code, const char *message,
                        int stream);

/* http_v2.c: whether GET would serve this path under /v2 (its metadata, a probe); 0 with msg (cap
 * bytes) saying why not: the route table's 404 or 405 for another method. */
int http_v2_known(const char *path, char *msg, size_t cap);

/* ---- OpenAI (http_openai.c) ---- */
/* served_name: see http_model_policy. */
int openai_parse(const struct cJSON *root, const proto_limits *lim, const char *served_name,
                 http_req_info *ri, req_params *p, proto_error *err);
void openai_write_token(strbuf *sb, http_req_info *ri, const char *text, size_t len);
void openai_write_end(strbuf *sb, http_req_info *ri, const req_result *res, const char *text,
                      size_t len);
/* {"error":{"message","type","param","code"}} (or its stream event); param may be NULL. */
void openai_write_error(strbuf *sb, int status, ifl_code code, const char *param,
                        const char *message, int stream);
/* GET /v1/models */
void openai_write_models(strbuf *sb, const char *served_name, long long created);

#endif
