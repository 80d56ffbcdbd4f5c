/* http_openai.c: OpenAI's completions and chat completions as http_gen.c serves them (http_api.h),
 * and GET /v1/models.
 *
 * Requests: the fields the parameter table (params.h) gives completions and chat: model
 * (required: iterative-gpt2, simple-gpt2, iterative, static, or the served model's name, meaning
 * iterative), prompt (completions: a string, or an array of token ids) or messages (chat), stream,
 * stream_options.include_usage, user (the session of the batchers' fairness), the value
 * parameters (OpenAI's and vLLM's: null is the default), and OpenAI's fields this server does not
 * implement with a neutral value (another value: unsupported_field). Any other field is refused,
 * naming it.
 *
 * The chat template is chat_template.h's (the same as /ws's generate with messages).
 *
 * Answers: text_completion / chat.completion objects with usage; streams of text_completion /
 * chat.completion.chunk events (the chat's first carries the role), the last with its
 * finish_reason, then the usage chunk when asked for, then "data: [DONE]". Errors
 * {"error":{"message","type","param","code"}}. */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "chat_template.h"
#include "http_api.h"

int http_model_policy(const char *name, const char *served, ifl_policy *policy)
{
    return api_model_policy(name, strlen(name), served, 0, policy);
}

/* The shape of the OpenAI API the request came through (its row's). */
static const openai_shape *shape_of(const http_req_info *ri)
{
    return HTTP_APIS[ri->api].openai;
}

static int fail(proto_error *err, ifl_code code, const char *param, const char *msg)
{
    proto_error_set(err, code, "%s", msg);
    snprintf(err->param, sizeof err->param, "%.*s", http_clip_len(param, sizeof err->param - 1),
             param);
    return -1;
}

/* Every field known (the parameter table's), then model, stream, stream_options, user: what
 * proto_parse_params does not read. */
static int parse_openai_fields(const cJSON *root, const char *served, http_req_info *ri,
                               proto_error *err)
{
    char msg[300];
    if (params_check_fields(root, shape_of(ri)->params, 1, "the request", err))
        return -1;
    const cJSON *m = cJSON_GetObjectItemCaseSensitive(root, "model");
    if (!m)
        return fail(err, IFL_CODE_MISSING_FIELD, "model", "field 'model' is required");
    if (!cJSON_IsString(m) || !m->valuestring)
        return fail(err, IFL_CODE_WRONG_TYPE, "model", "field 'model' must be a string");
    if (strlen(m->valuestring) > HTTP_MODEL_MAX ||
        http_model_policy(m->valuestring, served, &ri->policy)) {
        strbuf names;
        sb_init(&names, 0);
        api_model_list(&names, 0, ", ", " and ");
        snprintf(msg, sizeof msg,
                 "the model '%.*s' does not exist: this server has %s, %s (GET /v1/models)",
                 http_clip_len(m->valuestring, 64), m->valuestring, served,
                 sb_ok(&names) ? sb_text(&names) : "");
        sb_free(&names);
        return fail(err, IFL_CODE_UNKNOWN_MODEL, "model", msg);
    }
    snprintf(ri->model, sizeof ri->model, "%s", m->valuestring);
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(root, "stream");
    if (v && !cJSON_IsNull(v)) {
        if (!cJSON_IsBool(v))
            return fail(err, IFL_CODE_WRONG_TYPE, "stream", "field 'stream' must be a boolean");
        ri->stream = cJSON_IsTrue(v);
    }
    v = cJSON_GetObjectItemCaseSensitive(root, "stream_options");
    if (v && !cJSON_IsNull(v)) {
        const cJSON *u = cJSON_GetObjectItemCaseSensitive(v, "include_usage");
        if (!cJSON_IsObject(v) || (u && !cJSON_IsBool(u)) || (v->child && (!u || v->child->next)))
            return fail(err, IFL_CODE_WRONG_TYPE, "stream_options",
                        "field 'stream_options' must be {\"include_usage\": true|false}");
        if (!ri->stream)
            return fail(err, IFL_CODE_INVALID_REQUEST, "stream_options",
                        "field 'stream_options' is only allowed with \"stream\": true");
        ri->include_usage = cJSON_IsTrue(u);
    }
    v = cJSON_GetObjectItemCaseSensitive(root, "user");
    if (v && !cJSON_IsNull(v)) {
        size_t n = cJSON_IsString(v) && v->valuestring ? strlen(v->valuestring) : 0;
        if (!n || n > REQ_MAX_ID)
            return fail(err, IFL_CODE_WRONG_TYPE, "user",
                        "field 'user' must be a string of 1 to 64 bytes");
        memcpy(ri->user, v->valuestring, n + 1);
        ri->has_user = 1;
    }
    return 0;
}

/* Chat's messages: rendered into the prompt, their lines kept for trimming (chat_template.h);
 * after the parameter table's fields, so that its stop goes after the client's. */
static int chat_finish(const cJSON *root, req_params *p, proto_error *err)
{
    if (chat_parse(root, p, err))
        return -1;
    chat_add_stop(p);
    return 0;
}

/* Token ids of a prompt: a non-empty array of integers (their range is the request layer's check,
 * against the vocabulary); what names it in messages: "prompt" or "prompt[i]". */
static int read_ids(const cJSON *v, const proto_limits *lim, const char *what, int32_t **out,
                    int32_t *n_out, proto_error *err)
{
    char msg[160];
    int n = cJSON_GetArraySize(v);
    if (n < 1 || n > lim->max_tokens + 1) {
        snprintf(msg, sizeof msg, "%s as token ids must hold 1 to n_ctx ids", what);
        return fail(err, IFL_CODE_OUT_OF_RANGE, "prompt", msg);
    }
    int32_t *ids = malloc((size_t)n * sizeof *ids);
    if (!ids)
        return fail(err, IFL_CODE_OUT_OF_MEMORY, "prompt", "no memory for the prompt");
    int i = 0;
    const cJSON *x;
    cJSON_ArrayForEach(x, v)
    {
        double d = cJSON_IsNumber(x) ? x->valuedouble : -1.5;
        if (d != floor(d) || d < -2147483648.0 || d > 2147483647.0) {
            free(ids);
            snprintf(msg, sizeof msg, "%s as token ids must hold integers only (item %d is %s)",
                     what, i, cJSON_IsNumber(x) ? "not an integer" : proto_json_type_name(x));
            return fail(err, IFL_CODE_WRONG_TYPE, "prompt", msg);
        }
        ids[i++] = (int32_t)d;
    }
    *out = ids;
    *n_out = n;
    return 0;
}

/* One prompt of a batch: a non-empty string or an array of token ids. */
static int read_batch_item(const cJSON *x, int i, const proto_limits *lim, req_prompt *out,
                           proto_error *err)
{
    char what[32], msg[160];
    snprintf(what, sizeof what, "prompt[%d]", i);
    if (cJSON_IsArray(x))
        return read_ids(x, lim, what, &out->ids, &out->n_ids, err);
    if (!cJSON_IsString(x) || !x->valuestring) {
        snprintf(msg, sizeof msg, "%s must be a string or an array of token ids, not %s", what,
                 proto_json_type_name(x));
        return fail(err, IFL_CODE_WRONG_TYPE, "prompt", msg);
    }
    if (!x->valuestring[0]) {
        snprintf(msg, sizeof msg, "%s is empty", what);
        return fail(err, IFL_CODE_EMPTY_PROMPT, "prompt", msg);
    }
    out->len = strlen(x->valuestring);
    out->text = malloc(out->len + 1);
    if (!out->text)
        return fail(err, IFL_CODE_OUT_OF_MEMORY, "prompt", "no memory for the prompt");
    memcpy(out->text, x->valuestring, out->len + 1);
    return 0;
}

void openai_free_prompts(http_req_info *ri)
{
    for (int32_t i = 0; ri->prompts && i < ri->n_prompts; i++) {
        free(ri->prompts[i].text);
        free(ri->prompts[i].ids);
    }
    free(ri->prompts);
    ri->prompts = NULL;
    ri->n_prompts = 0;
}

/* A batch: [prompt, ...] of strings or id arrays, 1 to HTTP_MAX_PROMPTS of them. */
static int take_batch(const cJSON *v, const proto_limits *lim, http_req_info *ri,
                      proto_error *err)
{
    char msg[160];
    int n = cJSON_GetArraySize(v);
    if (n > HTTP_MAX_PROMPTS) {
        snprintf(msg, sizeof msg, "field 'prompt' holds %d prompts: at most %d", n,
                 HTTP_MAX_PROMPTS);
        return fail(err, IFL_CODE_OUT_OF_RANGE, "prompt", msg);
    }
    ri->prompts = calloc((size_t)n, sizeof *ri->prompts);
    if (!ri->prompts)
        return fail(err, IFL_CODE_OUT_OF_MEMORY, "prompt", "no memory for the prompts");
    ri->n_prompts = n;
    int i = 0;
    const cJSON *x;
    cJSON_ArrayForEach(x, v)
    {
        if (read_batch_item(x, i, lim, &ri->prompts[i], err)) {
            openai_free_prompts(ri);
            return -1;
        }
        i++;
    }
    return 0;
}

/* A completions prompt that is an array: token ids (one prompt) or a batch. 1 when taken, 0 when
 * it is not an array, -1 with *err. */
static int take_prompt_array(const cJSON *root, const proto_limits *lim, http_req_info *ri,
                             req_params *p, proto_error *err)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(root, "prompt");
    if (!cJSON_IsArray(v))
        return 0;
    if (!v->child)
        return fail(err, IFL_CODE_OUT_OF_RANGE, "prompt",
                    "field 'prompt' is an empty list: give a string, token ids, or a list of "
                    "either");
    if (cJSON_IsNumber(v->child))
        return read_ids(v, lim, "field 'prompt'", &p->prompt_ids, &p->n_prompt_ids, err) ? -1 : 1;
    return take_batch(v, lim, ri, err) ? -1 : 1;
}

int openai_parse(const cJSON *root, const proto_limits *lim, const char *served, http_req_info *ri,
                 req_params *p, proto_error *err)
{
    if (parse_openai_fields(root, served, ri, err))
        return -1;
    const openai_shape *sh = shape_of(ri);
    int ids = sh->prompt_ids ? take_prompt_array(root, lim, ri, p, err) : 0;
    if (ids < 0)
        return -1;
    if (proto_parse_params(root, sh->params, ids || !sh->prompt_field ? NULL : sh->prompt_field,
                           lim, p, err) ||
        (sh->finish && sh->finish(root, p, err))) {
        openai_free_prompts(ri);
        return -1;
    }
    return 0;
}

/* ---- writers --------------------------------------------------------------------------------- */

/* OpenAI's finish_reason: "length" or "stop" (end-of-text, a stop string, a stop token id). The
 * other ends (error, cancelled) are answered as errors, never as a finish_reason. */
static const char *finish_reason(ifl_finish f)
{
    return f == IFL_FINISH_LENGTH ? "length" : "stop";
}

/* {"id":...,"object":...,"created":...,"model":..., (left open) */
static void put_head(strbuf *sb, const http_req_info *ri, int chunk)
{
    const char *object = chunk ? shape_of(ri)->chunk_object : shape_of(ri)->object;
    sb_puts(sb, "{\"id\":");
    sb_json_str(sb, ri->resp_id, strlen(ri->resp_id));
    sb_printf(sb, ",\"object\":\"%s\",\"created\":%lld,\"model\":", object, ri->created);
    sb_json_str(sb, ri->model, strlen(ri->model));
}

/* Completions' choice content: its text ("" in a stream's last event). */
static void completion_text(strbuf *sb, const char *text, size_t len)
{
    sb_puts(sb, "\"text\":");
    sb_json_str(sb, text ? text : "", text ? len : 0);
}

static void completion_delta(strbuf *sb, int *first, const char *text, size_t len)
{
    *first = 0;
    completion_text(sb, text, len);
}

/* Chat's: a stream event's delta (the role in the choice's first one), the answer's message. */
static void chat_delta(strbuf *sb, int *first, const char *text, size_t len)
{
    sb_puts(sb, "\"delta\":{");
    if (*first) {
        sb_puts(sb, "\"role\":\"assistant\"");
        *first = 0;
        if (text)
            sb_puts(sb, ",");
    }
    if (text) {
        sb_puts(sb, "\"content\":");
        sb_json_str(sb, text, len);
    }
    sb_puts(sb, "}");
}

static void chat_message(strbuf *sb, const char *text, size_t len)
{
    sb_puts(sb, "\"message\":{\"role\":\"assistant\",\"content\":");
    sb_json_str(sb, text, len);
    sb_puts(sb, "}");
}

/* ,"logprobs":VALUE as the shape has it: lp its JSON (NULL: null; chat leaves null out). */
static void put_logprobs(strbuf *sb, const http_req_info *ri, const char *lp, size_t lp_len)
{
    if (!lp && !shape_of(ri)->logprobs_always)
        return;
    sb_puts(sb, ",\"logprobs\":");
    if (lp)
        sb_append(sb, lp, lp_len);
    else
        sb_puts(sb, "null");
}

/* One streamed event of choice k: the shape's delta, its logprobs, finish NULL while it runs. */
static void put_chunk(strbuf *sb, http_req_info *ri, http_choice *c, int32_t k, const char *text,
                      size_t len, const strbuf *lp, const char *finish)
{
    int first = !c->sent_first;
    sb_puts(sb, "data: ");
    put_head(sb, ri, 1);
    sb_printf(sb, ",\"choices\":[{\"index\":%d,", k);
    shape_of(ri)->put_delta(sb, &first, text, len);
    c->sent_first = !first;
    put_logprobs(sb, ri, lp && lp->len ? sb_text(lp) : NULL, lp ? lp->len : 0);
    if (finish)
        sb_printf(sb, ",\"finish_reason\":\"%s\"}]}\n\n", finish);
    else
        sb_puts(sb, ",\"finish_reason\":null}]}\n\n");
}

static void put_usage(strbuf *sb, const req_result *res)
{
    sb_printf(sb,
              "\"usage\":{\"prompt_tokens\":%d,\"completion_tokens\":%d,\"total_tokens\":%d,"
              "\"prompt_tokens_details\":{\"cached_tokens\":%d},\"trimmed_messages\":%d,"
              "\"trimmed_tokens\":%d}",
              (int)res->prompt_tokens, (int)res->completion_tokens,
              (int)(res->prompt_tokens + res->completion_tokens), (int)res->cached_tokens,
              (int)res->trimmed_messages, (int)res->trimmed_tokens);
}

/* Echo in a stream: choice k's first event is its prompt's text and logprobs. */
static void put_echo_chunk(strbuf *sb, http_req_info *ri, http_choices *h, int32_t k)
{
    const http_choice *e = &h->echo_part[k / h->n];
    strbuf lp;
    sb_init(&lp, 0);
    if (h->logprobs >= 0)
        http_choices_write_echo_lp(&lp, h, k / h->n);
    put_chunk(sb, ri, &h->c[k], k, sb_text(&e->text) ? sb_text(&e->text) : "", e->text.len, &lp,
              NULL);
    sb_free(&lp);
}

void openai_write_token(strbuf *sb, http_req_info *ri, http_choices *h, int32_t k,
                        const req_token *t, const strbuf *ev_lp)
{
    if (h->echo && !h->c[k].sent_first)
        put_echo_chunk(sb, ri, h, k);
    put_chunk(sb, ri, &h->c[k], k, t->text, t->len, ev_lp, NULL);
}

void openai_write_prompt_end(strbuf *sb, http_req_info *ri, http_choices *h, int32_t p)
{
    for (int32_t k = p * h->n; k < (p + 1) * h->n; k++) {
        if (h->echo && !h->c[k].sent_first)
            put_echo_chunk(sb, ri, h, k);
        put_chunk(sb, ri, &h->c[k], k, NULL, 0, NULL, finish_reason(h->c[k].finish));
    }
}

/* The whole answer's choices, in index order. */
static void put_choices(strbuf *sb, const http_req_info *ri, const http_choices *h)
{
    sb_puts(sb, ",\"choices\":[");
    strbuf text, lp;
    for (int32_t k = 0; k < h->n_prompts * h->n; k++) {
        const http_choice *c = &h->c[k];
        sb_init(&text, 0);
        if (h->echo)
            sb_append(&text, sb_text(&h->echo_part[k / h->n].text),
                      h->echo_part[k / h->n].text.len);
        sb_append(&text, sb_text(&c->text), c->text.len);
        sb_printf(sb, "%s{\"index\":%d,", k ? "," : "", k);
        shape_of(ri)->put_whole(sb, sb_text(&text) ? sb_text(&text) : "", text.len);
        sb_free(&text);
        sb_init(&lp, 0);
        if (h->logprobs >= 0)
            http_choices_write_lp(&lp, h, k, 1);
        put_logprobs(sb, ri, lp.len ? sb_text(&lp) : NULL, lp.len);
        sb_free(&lp);
        sb_printf(sb, ",\"finish_reason\":\"%s\"}", finish_reason(c->finish));
    }
    sb_puts(sb, "],");
}

void openai_write_end(strbuf *sb, http_req_info *ri, const req_result *res, http_choices *h)
{
    if (ri->stream) {
        if (res->finish == IFL_FINISH_ERROR) {
            const char *m = res->message ? res->message : "the engine failed";
            openai_write_error(sb, 500, res->code, NULL, m, 1);
        } else if (res->finish == IFL_FINISH_CANCELLED) {
            openai_write_error(sb, 503, IFL_CODE_SHUTTING_DOWN, NULL, OPENAI_CANCELLED_MESSAGE, 1);
        }
        if (ri->include_usage) {
            sb_puts(sb, "data: ");
            put_head(sb, ri, 1);
            sb_puts(sb, ",\"choices\":[],");
            put_usage(sb, res);
            sb_puts(sb, "}\n\n");
        }
        sb_puts(sb, "data: [DONE]\n\n");
        return;
    }
    put_head(sb, ri, 0);
    put_choices(sb, ri, h);
    put_usage(sb, res);
    sb_puts(sb, "}");
}

static const char *error_type(int status)
{
    switch (status) {
    case 401: return "authentication_error";
    case 404: return "invalid_request_error";
    case 429: return "rate_limit_error";
    default: return status >= 500 ? "server_error" : "invalid_request_error";
    }
}

void openai_write_error(strbuf *sb, int status, ifl_code code, const char *param,
                        const char *message, int stream)
{
    if (stream)
        sb_puts(sb, "data: ");
    sb_puts(sb, "{\"error\":{\"message\":");
    sb_json_str(sb, message, strlen(message));
    sb_printf(sb, ",\"type\":\"%s\",\"param\":", error_type(status));
    if (param && param[0])
        sb_json_str(sb, param, strlen(param));
    else
        sb_puts(sb, "null");
    sb_printf(sb, ",\"code\":\"%s\"}}", ifl_code_name(code));
    if (stream)
        sb_puts(sb, "\n\n");
}

void openai_write_model(strbuf *sb, const char *id, ifl_policy policy, long long created)
{
    sb_puts(sb, "{\"id\":");
    sb_json_str(sb, id, strlen(id));
    sb_printf(sb,
              ",\"object\":\"model\",\"created\":%lld,\"owned_by\":\"inflight\","
              "\"policy\":\"%s\"}",
              created, ifl_policy_name(policy));
}

void openai_write_models(strbuf *sb, const char *served, long long created)
{
    sb_puts(sb, "{\"object\":\"list\",\"data\":[");
    openai_write_model(sb, served, API_SERVED_POLICY, created);
    for (int i = 0; i < API_N_MODELS; i++) {
        if (strcmp(API_MODELS[i].name, served)) {
            sb_puts(sb, ",");
            openai_write_model(sb, API_MODELS[i].name, API_MODELS[i].policy, created);
        }
    }
    sb_puts(sb, "],\"chat_template\":\"per message 'System: ...\\n', 'User: ...\\n' or "
                "'Assistant: ...\\n' (no second space before a content that begins with one), then "
                "'Assistant:'; stop '\\nUser:'\"}");
}

/* ---- the two APIs' shapes (their rows: api_table.c) ------------------------------------------ */

const openai_shape OPENAI_COMPLETIONS_SHAPE = {.params = PARAM_API_COMPLETIONS,
                                               .prompt_field = "prompt",
                                               .prompt_ids = 1,
                                               .object = "text_completion",
                                               .chunk_object = "text_completion",
                                               .put_delta = completion_delta,
                                               .put_whole = completion_text,
                                               .logprobs_always = 1};

const openai_shape OPENAI_CHAT_SHAPE = {.params = PARAM_API_CHAT,
                                        .finish = chat_finish,
                                        .object = "chat.completion",
                                        .chunk_object = "chat.completion.chunk",
                                        .put_delta = chat_delta,
                                        .put_whole = chat_message};
