/* api_table.c: the rows of the API tables (api_table.h: the front ends and the model names;
 * http_api.h: the HTTP generation APIs), and the look-ups over them. */
#include "api_table.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <string.h>

#include "http_api.h"

/* ---- the front ends -------------------------------------------------------------------------- */

/* {"error": message, "code": code}: the errors of the paths outside /v1 and /v2. */
static void plain_error(strbuf *sb, int status, ifl_code code, const char *message)
{
    (void)status;
    sb_puts(sb, "{\"error\":");
    sb_json_str(sb, message, strlen(message));
    sb_printf(sb, ",\"code\":\"%s\"}", ifl_code_name(code));
}

static void openai_error(strbuf *sb, int status, ifl_code code, const char *message)
{
    openai_write_error(sb, status, code, NULL, message, 0);
}

static void triton_error(strbuf *sb, int status, ifl_code code, const char *message)
{
    (void)status;
    triton_write_error(sb, NULL, code, message, 0);
}

const api_front_end API_FRONT_ENDS[REQ_N_APIS] = {
    [REQ_API_WS] = {.name = "ws", .prefix = NULL, .write_error = plain_error},
    [REQ_API_OPENAI] = {.name = "openai", .prefix = "/v1/", .write_error = openai_error},
    [REQ_API_TRITON] = {.name = "triton", .prefix = "/v2", .write_error = triton_error},
};

const char *req_api_name(req_api a)
{
    return API_FRONT_ENDS[(unsigned)a < REQ_N_APIS ? a : REQ_API_WS].name;
}

req_api api_front_end_of(const char *t, size_t n)
{
    for (int a = 0; a < REQ_N_APIS; a++) {
        const char *pre = API_FRONT_ENDS[a].prefix;
        size_t k = pre ? strlen(pre) : 0;
        if (!pre || n < k || memcmp(t, pre, k))
            continue;
        if (pre[k - 1] == '/' || n == k || t[k] == '/' || t[k] == '?')
            return (req_api)a;
    }
    return REQ_API_WS;
}

/* ---- the model names ------------------------------------------------------------------------- */

const api_model API_MODELS[] = {
    {"iterative-gpt2", IFL_POLICY_ITERATIVE, 1}, /* the seed tutorial's Triton models */
    {"simple-gpt2", IFL_POLICY_STATIC, 1},
    {"iterative", IFL_POLICY_ITERATIVE, 0}, /* the policies' own names */
    {"static", IFL_POLICY_STATIC, 0},
};
const int API_N_MODELS = (int)(sizeof API_MODELS / sizeof API_MODELS[0]);

int api_model_policy(const char *name, size_t len, const char *served, int triton_only,
                     ifl_policy *policy)
{
    for (int i = 0; i < API_N_MODELS; i++)
        if ((API_MODELS[i].triton || !triton_only) && strlen(API_MODELS[i].name) == len &&
            !memcmp(name, API_MODELS[i].name, len)) {
            *policy = API_MODELS[i].policy;
            return 0;
        }
    if (!triton_only && served && served[0] && strlen(served) == len &&
        !memcmp(name, served, len)) {
        *policy = API_SERVED_POLICY;
        return 0;
    }
    return -1;
}

void api_model_list(strbuf *sb, int triton_only, const char *sep, const char *last_sep)
{
    int n = 0, last = -1;
    for (int i = 0; i < API_N_MODELS; i++)
        if (API_MODELS[i].triton || !triton_only)
            last = i;
    for (int i = 0; i < API_N_MODELS; i++)
        if (API_MODELS[i].triton || !triton_only) {
            if (n++)
                sb_puts(sb, i == last ? last_sep : sep);
            sb_puts(sb, API_MODELS[i].name);
        }
}

/* ---- the HTTP generation APIs ---------------------------------------------------------------- */

int http_route_path(const http_api_desc *a, const char *path, http_req_info *ri, char *msg,
                    size_t cap)
{
    (void)ri, (void)msg, (void)cap;
    return strcmp(path, a->path) ? -1 : 0;
}

static int triton_parse_body(const cJSON *root, const proto_limits *lim, const char *served,
                             http_req_info *ri, req_params *p, proto_error *err)
{
    (void)served;
    return triton_parse(root, lim, ri, p, err);
}

static void triton_error_answer(strbuf *sb, const http_req_info *ri, int status, ifl_code code,
                                const char *param, const char *message, int stream)
{
    (void)status, (void)param;
    triton_write_error(sb, ri, code, message, stream);
}

static void openai_error_answer(strbuf *sb, const http_req_info *ri, int status, ifl_code code,
                                const char *param, const char *message, int stream)
{
    (void)ri;
    openai_write_error(sb, status, code, param, message, stream);
}

const http_api_desc HTTP_APIS[HTTP_N_APIS] = {
    [HTTP_API_TRITON] = {.front_end = REQ_API_TRITON,
                         .route = triton_route,
                         .form_bodies = 1,
                         .parse = triton_parse_body,
                         .write_token = triton_write_token,
                         .write_end = triton_write_end,
                         .write_error = triton_error_answer},
    [HTTP_API_COMPLETIONS] = {.front_end = REQ_API_OPENAI,
                              .route = http_route_path,
                              .path = "/v1/completions",
                              .parse = openai_parse,
                              .resp_id_prefix = "cmpl",
                              .write_token = openai_write_token,
                              .write_prompt_end = openai_write_prompt_end,
                              .write_end = openai_write_end,
                              .write_error = openai_error_answer,
                              .openai = &OPENAI_COMPLETIONS_SHAPE},
    [HTTP_API_CHAT] = {.front_end = REQ_API_OPENAI,
                       .route = http_route_path,
                       .path = "/v1/chat/completions",
                       .parse = openai_parse,
                       .resp_id_prefix = "chatcmpl",
                       .write_token = openai_write_token,
                       .write_prompt_end = openai_write_prompt_end,
                       .write_end = openai_write_end,
                       .write_error = openai_error_answer,
                       .openai = &OPENAI_CHAT_SHAPE},
};
