/* client_api.c: the APIs `inflight client` speaks, one row each of CLIENT_APIS: --api ws, our
 * /ws protocol (docs/protocol.md: generate frames out; hello, token, done and error frames back);
 * --api openai, /v1/completions with "stream": true (and include_usage); --api triton,
 * /v2/models/{iterative-gpt2|simple-gpt2}/generate_stream (docs/http-api.md). Each row names
 * its transport (client_ws.c, client_http.c), its path, the JSON it sends and how it reads what
 * comes back; the rest of the client reads the row. */
#include <string.h>

#include "client.h"

static const char *str_item(const cJSON *m, const char *key)
{
    return cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(m, key));
}

const char *client_error_of(const cJSON *m, const char **code)
{
    const cJSON *e = cJSON_GetObjectItemCaseSensitive(m, "error");
    *code = "error";
    if (cJSON_IsString(e))
        return e->valuestring;
    if (!cJSON_IsObject(e))
        return NULL;
    const char *c = str_item(e, "code"), *t = str_item(e, "type"), *msg = str_item(e, "message");
    *code = c ? c : t ? t : "error";
    return msg ? msg : "(no message)";
}

const char *client_model(const client *cl)
{
    return cl->api->models[strcmp(cl->policy, "iterative") != 0];
}

/* ---- request bodies ---- */

/* The sampling parameters every API shares, and the closing brace. */
static void write_sampling(strbuf *b, const client *cl, uint64_t seed)
{
    sb_printf(b, ",\"max_tokens\":%d,\"temperature\":%g,\"seed\":%llu%s}", cl->max_tokens,
              cl->temperature, (unsigned long long)seed,
              cl->ignore_eos ? ",\"ignore_eos\":true" : "");
}

static void ws_body(strbuf *b, const client *cl, const creq *r, const char *prompt, uint64_t seed)
{
    sb_puts(b, "{\"type\":\"generate\",\"id\":");
    sb_json_str(b, r->id, strlen(r->id));
    sb_puts(b, ",\"prompt\":");
    sb_json_str(b, prompt, strlen(prompt));
    sb_printf(b, ",\"model\":\"%s\"", client_model(cl));
    write_sampling(b, cl, seed);
}

static void openai_body(strbuf *b, const client *cl, const creq *r, const char *prompt,
                        uint64_t seed)
{
    (void)r;
    sb_printf(b, "{\"model\":\"%s\",\"prompt\":", client_model(cl));
    sb_json_str(b, prompt, strlen(prompt));
    sb_puts(b, ",\"stream\":true,\"stream_options\":{\"include_usage\":true}");
    write_sampling(b, cl, seed);
}

static void triton_body(strbuf *b, const client *cl, const creq *r, const char *prompt,
                        uint64_t seed)
{
    (void)r;
    sb_puts(b, "{\"text_input\":");
    sb_json_str(b, prompt, strlen(prompt));
    write_sampling(b, cl, seed);
}

/* ---- what comes back ---- */

static void ws_parse(const cJSON *m, client_event *ev)
{
    const char *type = str_item(m, "type");
    ev->id = str_item(m, "id");
    if (!type) {
        /* not one of ours: ignored */
    } else if (!strcmp(type, "hello")) {
        ev->kind = CLIENT_EV_HELLO;
    } else if (!strcmp(type, "token")) {
        ev->kind = CLIENT_EV_TOKEN;
        ev->text = str_item(m, "text");
    } else if (!strcmp(type, "done")) {
        const cJSON *timing = cJSON_GetObjectItemCaseSensitive(m, "timing");
        const cJSON *tt = cJSON_GetObjectItemCaseSensitive(timing, "ttft_ms");
        const cJSON *tp = cJSON_GetObjectItemCaseSensitive(timing, "tokens_per_s");
        ev->kind = CLIENT_EV_DONE;
        ev->finish = str_item(m, "finish_reason");
        ev->ttft_ms = cJSON_IsNumber(tt) ? tt->valuedouble : 0;
        ev->tps = cJSON_IsNumber(tp) ? tp->valuedouble : 0;
    } else if (!strcmp(type, "error")) {
        ev->kind = CLIENT_EV_ERROR;
        ev->code = str_item(m, "code");
        ev->message = str_item(m, "message");
    }
}

/* An SSE event with its text and finish reason read: an error first, then the end, then a
 * token; neither is a bad event. */
static void sse_classify(const cJSON *m, client_event *ev)
{
    ev->message = client_error_of(m, &ev->code);
    if (ev->message) {
        ev->kind = CLIENT_EV_ERROR;
    } else if (ev->finish) {
        ev->kind = CLIENT_EV_DONE;
    } else if (ev->text) {
        ev->kind = CLIENT_EV_TOKEN;
    } else {
        ev->kind = CLIENT_EV_ERROR;
        ev->code = "bad_event";
        ev->message = "an event carries neither text nor an end";
    }
}

static void openai_parse(const cJSON *m, client_event *ev)
{
    const cJSON *ch = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(m, "choices"), 0);
    ev->text = str_item(ch, "text");
    ev->finish = str_item(ch, "finish_reason");
    const char *code;
    if (!ch && !client_error_of(m, &code))
        return; /* the usage chunk */
    sse_classify(m, ev);
}

static void triton_parse(const cJSON *m, client_event *ev)
{
    ev->text = str_item(m, "text_output");
    ev->finish = str_item(m, "finish_reason");
    sse_classify(m, ev);
}

/* ---- the table ---- */

/* The HTTP APIs' transport: a POST per request on its own connection, answered with SSE. */
#define HTTP_TRANSPORT                                                                             \
    .http = 1, .default_url = "http://127.0.0.1:8080", .callback = client_http_callback,           \
    .per_session_size = 0, .start = client_http_start, .send = client_http_send

static const client_api CLIENT_APIS[] = {
    {.name = "ws",
     .http = 0,
     .default_url = "ws://127.0.0.1:8080/ws",
     .callback = client_ws_callback,
     .per_session_size = sizeof(strbuf), /* a frame's fragments, reassembled */
     .start = client_ws_connect,
     .send = client_ws_send,
     .path = NULL,
     .models = {"iterative", "static"},
     .write_body = ws_body,
     .parse = ws_parse,
     .server_timing = 1},
    {.name = "openai",
     HTTP_TRANSPORT,
     .path = "/v1/completions",
     .models = {"iterative", "static"}, /* /v1/models's explicit ids */
     .write_body = openai_body,
     .parse = openai_parse,
     .server_timing = 0},
    {.name = "triton",
     HTTP_TRANSPORT,
     .path = "/v2/models/{model}/generate_stream",
     .models = {"iterative-gpt2", "simple-gpt2"},
     .write_body = triton_body,
     .parse = triton_parse,
     .server_timing = 0},
};
#undef HTTP_TRANSPORT

const client_api *client_api_find(const char *name)
{
    for (size_t i = 0; i < sizeof CLIENT_APIS / sizeof *CLIENT_APIS; i++)
        if (!strcmp(CLIENT_APIS[i].name, name))
            return &CLIENT_APIS[i];
    return NULL;
}
