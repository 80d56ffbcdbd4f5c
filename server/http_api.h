/* http_api.h: what each HTTP generation API gives http_gen.c, which does everything else (the
 * body, the request layer, the stream): its row of HTTP_APIS (defined in api_table.c), saying how
 * its POST paths are routed, how a request body becomes req_params, and how the answer, the
 * stream's events and errors are written. Triton's generate extension is http_triton.c, OpenAI's
 * completions and chat completions http_openai.c (the two differ by their openai_shape). Adding an
 * API: an http_api_kind and its row; adding to every API's answers: a writer in the row. Pure
 * functions: JSON in, bytes out; the fields and their checks are the parameter table's
 * (params.h). Service thread. */
#ifndef IFL_HTTP_API_H
#define IFL_HTTP_API_H

#include <stdint.h>

#include "api_table.h"
#include "http_choices.h"
#include "protocol.h"
#include "request.h"
#include "strbuf.h"

/* The HTTP generation APIs: each one's row in HTTP_APIS. */
typedef enum {
    HTTP_API_TRITON = 0,
    HTTP_API_COMPLETIONS,
    HTTP_API_CHAT,
    HTTP_N_APIS
} http_api_kind;

#define HTTP_MODEL_MAX 64
#define HTTP_MAX_PROMPTS 64 /* prompts of one OpenAI batch (completions' list of prompts) */
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
    char user[REQ_MAX_ID + 1]; /* OpenAI user: the session of the batchers' fairness */
    int has_user;
    /* OpenAI's batch: the body's prompts, one request each (req_params.prompt_index); NULL, 0:
     * the one prompt is req_params' own. Heap, freed with the request's state (http_gen.c). */
    req_prompt *prompts;
    int32_t n_prompts;
} http_req_info;

/* How OpenAI's completions and chat completions differ (http_openai.c reads its API's row). */
typedef struct {
    param_api params;          /* its fields: the parameter table's rows for this API */
    const char *prompt_field;  /* the prompt's field (NULL: finish makes the prompt) */
    int prompt_ids;            /* "prompt" may be an array of token ids */
    /* After the parameter table's fields: the API's own (chat: its messages rendered into the
     * prompt, and its stop); 0, or -1 with *err. NULL: none. */
    int (*finish)(const struct cJSON *root, req_params *p, proto_error *err);
    const char *object, *chunk_object;    /* the answer's "object", a stream event's */
    /* A choice's content, after "index": a stream event's (text NULL: the last event's, with the
     * finish; *first: the choice's first event is still to go, chat's role goes with it), and the
     * whole answer's. */
    void (*put_delta)(strbuf *sb, int *first, const char *text, size_t len);
    void (*put_whole)(strbuf *sb, const char *text, size_t len);
    int logprobs_always; /* "logprobs": null when none were asked for (completions) */
} openai_shape;

extern const openai_shape OPENAI_COMPLETIONS_SHAPE, OPENAI_CHAT_SHAPE; /* http_openai.c */
/* finish_reason carries OpenAI's values only ("stop", "length"): a request cancelled by the
 * server's stop is answered as an error (503 shutting_down; in a stream, its error event). */
#define OPENAI_CANCELLED_MESSAGE "the server stopped before the request finished"

/* One HTTP generation API. */
typedef struct http_api_desc http_api_desc;
struct http_api_desc {
    req_api front_end; /* the log's and /metrics' (and the 401's shape) */
    /* The route of a POST path: 0 when it is this API's (*ri's stream and model set, the rest
     * zero), -1 when not, -2 when it names an unknown model or version (msg, cap bytes, says
     * so). */
    int (*route)(const http_api_desc *a, const char *path, http_req_info *ri, char *msg,
                 size_t cap);
    const char *path; /* the one POST path, for http_route_path; NULL for another route */
    int form_bodies; /* Content-Type may also be none or application/x-www-form-urlencoded (curl
                        -d's, as Triton's own examples send) */
    /* served: the model directory's name (an OpenAI model id meaning iterative) */
    int (*parse)(const struct cJSON *root, const proto_limits *lim, const char *served,
                 http_req_info *ri, req_params *p, proto_error *err);
    const char *resp_id_prefix; /* the answer's id ("cmpl" -> ri->resp_id "cmpl-..."; ri->created
                                   set with it); NULL: the answer has none */
    /* A stream's event(s) for token t of choice k (ev_lp: its logprobs value, or NULL). */
    void (*write_token)(strbuf *sb, http_req_info *ri, http_choices *h, int32_t k,
                        const req_token *t, const strbuf *ev_lp);
    /* A stream's events when prompt p's request ended well (its choices' finishes); NULL: none. */
    void (*write_prompt_end)(strbuf *sb, http_req_info *ri, http_choices *h, int32_t p);
    /* The end: the JSON answer (every choice), or the stream's last events. */
    void (*write_end)(strbuf *sb, http_req_info *ri, const req_result *res, http_choices *h);
    /* An error answer (stream: its event); param (the field at fault) may be NULL. */
    void (*write_error)(strbuf *sb, const http_req_info *ri, int status, ifl_code code,
                        const char *param, const char *message, int stream);
    const openai_shape *openai; /* OpenAI's APIs: how this one differs; NULL for another */
};

extern const http_api_desc HTTP_APIS[HTTP_N_APIS];

/* The route of an API with one POST path (a->path): 0 for that path, else -1. */
int http_route_path(const http_api_desc *a, const char *path, http_req_info *ri, char *msg,
                    size_t cap);

/* The model names a request may give (OpenAI "model"; Triton's is in the path): API_MODELS' and
 * served_name (the model directory's name, meaning iterative). 0 with *policy set, or -1. */
int http_model_policy(const char *name, const char *served_name, ifl_policy *policy);
/* How many bytes of the UTF-8 string s an error message quotes ("%.*s"): all of them up to max,
 * else max cut back to a character boundary, so the message stays UTF-8 (and its answer JSON). */
static inline int http_clip_len(const char *s, size_t max)
{
    return params_clip_len(s, max);
}

/* ---- Triton (http_triton.c) ---- */
/* The Triton model named by the len bytes at name: iterative-gpt2 or simple-gpt2; 0 with *policy
 * set, or -1 with msg (cap bytes) saying which models there are. */
int triton_model(const char *name, size_t len, ifl_policy *policy, char *msg, size_t cap);
/* Triton's route: /v2/models/M/generate[_stream], also with /versions/V after M (V: its one
 * version, 1). */
int triton_route(const http_api_desc *a, const char *path, http_req_info *ri, char *msg,
                 size_t cap);
int triton_parse(const struct cJSON *root, const proto_limits *lim, http_req_info *ri,
                 req_params *p, proto_error *err);
/* A stream event for one token: the whole "data: ...\n\n". */
void triton_write_token(strbuf *sb, http_req_info *ri, http_choices *h, int32_t k,
                        const req_token *t, const strbuf *ev_lp);
/* The end: the JSON answer (the completion: choice 0's text), or the stream's last event. */
void triton_write_end(strbuf *sb, http_req_info *ri, const req_result *res, http_choices *h);
void triton_write_error(strbuf *sb, const http_req_info *ri, ifl_code code, const char *message,
                        int stream);

/* http_v2.c: whether GET would serve this path under /v2 (its metadata, a probe); 0 with msg (cap
 * bytes) saying why not: the route table's 404 or 405 for another method. */
int http_v2_known(const char *path, char *msg, size_t cap);

/* ---- OpenAI (http_openai.c) ---- */
/* served_name: see http_model_policy. */
int openai_parse(const struct cJSON *root, const proto_limits *lim, const char *served_name,
                 http_req_info *ri, req_params *p, proto_error *err);
/* The batch's prompts (ri->prompts), freed. */
void openai_free_prompts(http_req_info *ri);
void openai_write_token(strbuf *sb, http_req_info *ri, http_choices *h, int32_t k,
                        const req_token *t, const strbuf *ev_lp);
void openai_write_prompt_end(strbuf *sb, http_req_info *ri, http_choices *h, int32_t p);
void openai_write_end(strbuf *sb, http_req_info *ri, const req_result *res, http_choices *h);
/* {"error":{"message","type","param","code"}} (or its stream event); param may be NULL. */
void openai_write_error(strbuf *sb, int status, ifl_code code, const char *param,
                        const char *message, int stream);
/* GET /v1/models: the served name (API_SERVED_POLICY), then API_MODELS' names */
void openai_write_models(strbuf *sb, const char *served_name, long long created);
/* One model object (GET /v1/models/ID; an element of the list). */
void openai_write_model(strbuf *sb, const char *id, ifl_policy policy, long long created);

#endif
