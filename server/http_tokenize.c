/* http_tokenize.c: the tokenizer endpoints in vLLM's shapes, for clients that count or cut tokens
 * without a copy of the tokenizer (evaluation harnesses, token counters):
 *   POST /tokenize        {"prompt": "..."} or {"messages": [...]} (rendered with the chat
 *                         template, chat_template.h, as /v1/chat/completions renders them)
 *                         -> {"count", "max_model_len", "tokens"};
 *   POST /detokenize      {"tokens": [id, ...]} -> {"prompt": "..."};
 *   GET  /tokenizer_info  -> eos_token, bos_token, pad_token, chat_template, model_max_length.
 * The text is encoded as the request layer encodes a prompt: "<|endoftext|>" in it is plain text.
 * Their routes (http.c) give them /v1's Host, Origin and API key rules; the body is read as a
 * generation body is (http_gen_begin_body); errors in OpenAI's shape. Service thread. */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "chat_template.h"
#include "http_api.h"
#include "service.h"

/* GPT-2's one special token: its end of text, also its beginning (Hugging Face's gpt2 sets both
 * bos_token and eos_token to it, and no pad_token). */
#define EOT_TEXT "<|endoftext|>"

/* The chat template of chat_template.c written in Jinja (what /tokenizer_info's clients render
 * with): a line "Role: content" per message, no second space before a content that begins with
 * one, then "Assistant:". */
static const char CHAT_TEMPLATE_JINJA[] =
    "{% for m in messages %}"
    "{% if m['role'] == 'user' %}User:{% elif m['role'] == 'assistant' %}Assistant:"
    "{% else %}System:{% endif %}"
    "{% if not m['content'].startswith(' ') %} {% endif %}{{ m['content'] }}\n"
    "{% endfor %}"
    "{% if add_generation_prompt is not defined or add_generation_prompt %}Assistant:{% endif %}";

static int fail(proto_error *err, ifl_code code, const char *param, const char *msg)
{
    proto_error_set(err, code, "%s", msg);
    snprintf(err->param, sizeof err->param, "%s", param);
    return -1;
}

/* The error answer (OpenAI's shape), counted in /metrics. */
static int answer_error(server *s, srv_conn *c, struct lws *wsi, const proto_error *pe)
{
    metrics_count_error(&s->m, pe->code);
    strbuf sb;
    sb_init(&sb, 0);
    int status = ifl_code_get(pe->code)->http_status;
    openai_write_error(&sb, status, pe->code, pe->param[0] ? pe->param : NULL, pe->message, 0);
    return http_respond_json(c, wsi, status, &sb, 0, NULL, NULL);
}

/* The body as a JSON object whose fields are all in `fields` (NULL-terminated) and whose "model",
 * when there, is one this server serves; NULL with *err. */
static cJSON *parse_body(server *s, const char *body, size_t len, const char *const *fields,
                         proto_error *err)
{
    if (!ifl_utf8_valid(body, len)) {
        fail(err, IFL_CODE_INVALID_MESSAGE, "", "the body is not valid UTF-8");
        return NULL;
    }
    cJSON *root = proto_parse_json_object(body, len, err);
    if (!root)
        return NULL;
    char msg[160];
    const cJSON *f;
    cJSON_ArrayForEach(f, root)
    {
        const char *name = f->string ? f->string : "";
        size_t i = 0;
        while (fields[i] && strcmp(fields[i], name))
            i++;
        if (!fields[i]) {
            snprintf(msg, sizeof msg, "unknown field '%.*s'", http_clip_len(name, 64), name);
            fail(err, IFL_CODE_UNKNOWN_FIELD, name, msg);
            goto bad;
        }
    }
    const cJSON *m = cJSON_GetObjectItemCaseSensitive(root, "model");
    ifl_policy pol;
    if (m && (!cJSON_IsString(m) || !m->valuestring)) {
        fail(err, IFL_CODE_WRONG_TYPE, "model", "field 'model' must be a string");
        goto bad;
    }
    if (m && http_model_policy(m->valuestring, http_gen_served_name(s), &pol)) {
        snprintf(msg, sizeof msg, "the model '%.*s' does not exist (GET /v1/models)",
                 http_clip_len(m->valuestring, 64), m->valuestring);
        fail(err, IFL_CODE_UNKNOWN_MODEL, "model", msg);
        goto bad;
    }
    return root;
bad:
    cJSON_Delete(root);
    return NULL;
}

/* The optional boolean field `name` into *out (left as it is when absent); -1 with *err. */
static int get_bool(const cJSON *root, const char *name, int *out, proto_error *err)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(root, name);
    if (!v)
        return 0;
    if (!cJSON_IsBool(v)) {
        char msg[120];
        snprintf(msg, sizeof msg, "field '%s' must be a boolean, not %s", name,
                 proto_json_type_name(v));
        return fail(err, IFL_CODE_WRONG_TYPE, name, msg);
    }
    *out = cJSON_IsTrue(v);
    return 0;
}

/* The text /tokenize encodes: "prompt" (a string), or "messages" rendered with the chat template
 * (without its final "Assistant:" when add_generation_prompt is false). Into sb; -1 with *err. */
static int text_of(const cJSON *root, strbuf *sb, proto_error *err)
{
    const cJSON *p = cJSON_GetObjectItemCaseSensitive(root, "prompt");
    const cJSON *msgs = cJSON_GetObjectItemCaseSensitive(root, "messages");
    int add_special = 1, gen_prompt = 1;
    if (get_bool(root, "add_special_tokens", &add_special, err) || /* GPT-2 adds none */
        get_bool(root, "add_generation_prompt", &gen_prompt, err))
        return -1;
    if (p && msgs)
        return fail(err, IFL_CODE_INVALID_MESSAGE, "messages",
                    "/tokenize takes 'prompt' or 'messages', not both");
    if (!p && !msgs)
        return fail(err, IFL_CODE_MISSING_FIELD, "prompt",
                    "/tokenize needs 'prompt' (a string) or 'messages' (a chat)");
    if (p) {
        if (!cJSON_IsString(p) || !p->valuestring) {
            char msg[120];
            snprintf(msg, sizeof msg, "field 'prompt' must be a string, not %s",
                     proto_json_type_name(p));
            return fail(err, IFL_CODE_WRONG_TYPE, "prompt", msg);
        }
        sb_puts(sb, p->valuestring);
    } else {
        if (chat_render(msgs, sb, NULL, err))
            return -1;
        if (!gen_prompt && sb_ok(sb))
            sb->len -= strlen(CHAT_SUFFIX); /* chat_render ends with it */
    }
    return sb_ok(sb) ? 0 : fail(err, IFL_CODE_OUT_OF_MEMORY, "", "no memory for the text");
}

static int tokenize_body(server *s, srv_conn *c, struct lws *wsi, const char *body, size_t len)
{
    static const char *const FIELDS[] = {
        "model", "prompt", "messages", "add_special_tokens", "add_generation_prompt", NULL};
    proto_error pe;
    memset(&pe, 0, sizeof pe);
    strbuf text;
    sb_init(&text, 0);
    cJSON *root = parse_body(s, body, len, FIELDS, &pe);
    int bad = !root || text_of(root, &text, &pe);
    cJSON_Delete(root);
    ifl_tokens ids = {0};
    ifl_err err;
    if (!bad && ifl_tokenizer_encode(s->rt.tok, sb_text(&text), text.len, 0, &ids, &err)) {
        fail(&pe, IFL_CODE_OUT_OF_MEMORY, "", err.msg);
        bad = 1;
    }
    sb_free(&text);
    if (bad) {
        ifl_tokens_free(&ids);
        return answer_error(s, c, wsi, &pe);
    }
    strbuf sb;
    sb_init(&sb, 0);
    sb_printf(&sb, "{\"count\":%zu,\"max_model_len\":%d,\"tokens\":[", ids.n,
              (int)s->rt.model.cfg.n_ctx);
    for (size_t i = 0; i < ids.n; i++)
        sb_printf(&sb, "%s%d", i ? "," : "", (int)ids.ids[i]);
    sb_puts(&sb, "]}");
    ifl_tokens_free(&ids);
    return http_respond_json(c, wsi, HTTP_STATUS_OK, &sb, 0, NULL, NULL);
}

/* "tokens": an array of ids of the vocabulary, into *ids; -1 with *err naming the first bad one. */
static int token_ids(const cJSON *root, int32_t n_vocab, ifl_tokens *ids, proto_error *err)
{
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(root, "tokens");
    if (!t)
        return fail(err, IFL_CODE_MISSING_FIELD, "tokens", "field 'tokens' is required");
    if (!cJSON_IsArray(t))
        return fail(err, IFL_CODE_WRONG_TYPE, "tokens",
                    "field 'tokens' must be an array of token ids");
    int i = 0;
    const cJSON *v;
    char param[32], msg[160];
    cJSON_ArrayForEach(v, t)
    {
        snprintf(param, sizeof param, "tokens[%d]", i);
        if (!cJSON_IsNumber(v)) {
            snprintf(msg, sizeof msg, "tokens[%d] must be a token id (an integer), not %s", i,
                     proto_json_type_name(v));
            return fail(err, IFL_CODE_WRONG_TYPE, param, msg);
        }
        double d = v->valuedouble;
        if (!(d >= 0 && d < n_vocab)) {
            snprintf(msg, sizeof msg, "tokens[%d] is %.17g: a token id must be from 0 to %d", i, d,
                     (int)n_vocab - 1);
            return fail(err, IFL_CODE_OUT_OF_RANGE, param, msg);
        }
        if (d != (double)(int32_t)d) {
            snprintf(msg, sizeof msg, "tokens[%d] is %.17g: a token id is an integer", i, d);
            return fail(err, IFL_CODE_WRONG_TYPE, param, msg);
        }
        if (ifl_tokens_push(ids, (int32_t)d))
            return fail(err, IFL_CODE_OUT_OF_MEMORY, "tokens", "no memory for the ids");
        i++;
    }
    return 0;
}

static int detokenize_body(server *s, srv_conn *c, struct lws *wsi, const char *body, size_t len)
{
    static const char *const FIELDS[] = {"model", "tokens", NULL};
    proto_error pe;
    memset(&pe, 0, sizeof pe);
    ifl_tokens ids = {0};
    cJSON *root = parse_body(s, body, len, FIELDS, &pe);
    int bad = !root || token_ids(root, ifl_tokenizer_n_vocab(s->rt.tok), &ids, &pe);
    cJSON_Delete(root);
    char *bytes = NULL, *text = NULL;
    size_t n = 0, tn = 0;
    ifl_err err;
    if (!bad && ifl_tokenizer_decode(s->rt.tok, ids.ids, ids.n, &bytes, &n, &err)) {
        fail(&pe, IFL_CODE_OUT_OF_MEMORY, "", err.msg);
        bad = 1;
    }
    ifl_tokens_free(&ids);
    /* ids that end or break a character: U+FFFD, as Hugging Face's decode gives (valid JSON) */
    if (!bad && !(text = malloc(ifl_utf8_stream_cap(n) + 12))) {
        fail(&pe, IFL_CODE_OUT_OF_MEMORY, "", "no memory for the text");
        bad = 1;
    }
    if (bad) {
        free(bytes);
        return answer_error(s, c, wsi, &pe);
    }
    ifl_utf8_stream u;
    ifl_utf8_stream_init(&u, IFL_UTF8_REPLACE);
    tn = ifl_utf8_stream_push(&u, bytes, n, text);
    tn += ifl_utf8_stream_flush(&u, text + tn);
    free(bytes);
    strbuf sb;
    sb_init(&sb, 0);
    sb_puts(&sb, "{\"prompt\":");
    sb_json_str(&sb, text, tn);
    sb_puts(&sb, "}");
    free(text);
    return http_respond_json(c, wsi, HTTP_STATUS_OK, &sb, 0, NULL, NULL);
}

/* The tokenizer is the loader thread's until the server is ready: 503 before. */
static int answer_not_ready(srv_conn *c, struct lws *wsi, int head_only)
{
    strbuf sb;
    sb_init(&sb, 0);
    openai_write_error(&sb, HTTP_STATUS_SERVICE_UNAVAILABLE, IFL_CODE_SHUTTING_DOWN, NULL,
                       "not ready: loading the model", 0);
    return http_respond_json(c, wsi, HTTP_STATUS_SERVICE_UNAVAILABLE, &sb, head_only, NULL, NULL);
}

int http_tokenize(server *s, srv_conn *c, struct lws *wsi, const char *path, int head_only)
{
    (void)path, (void)head_only;
    return http_gen_begin_body(s, c, wsi, tokenize_body);
}

int http_detokenize(server *s, srv_conn *c, struct lws *wsi, const char *path, int head_only)
{
    (void)path, (void)head_only;
    return http_gen_begin_body(s, c, wsi, detokenize_body);
}

int http_tokenizer_info(server *s, srv_conn *c, struct lws *wsi, const char *path, int head_only)
{
    (void)path;
    if (!atomic_load(&s->ready) || !s->rt.tok)
        return answer_not_ready(c, wsi, head_only);
    strbuf sb;
    sb_init(&sb, 0);
    int has_eot = ifl_tokenizer_eot(s->rt.tok) >= 0;
    const char *eot = has_eot ? "\"" EOT_TEXT "\"" : "null";
    sb_printf(&sb,
              "{\"tokenizer_class\":\"GPT2TokenizerFast\",\"eos_token\":%s,\"bos_token\":%s,"
              "\"unk_token\":%s,\"pad_token\":null,\"model_max_length\":%d,\"vocab_size\":%d,"
              "\"chat_template\":",
              eot, eot, eot, (int)s->rt.model.cfg.n_ctx, (int)ifl_tokenizer_n_vocab(s->rt.tok));
    sb_json_str(&sb, CHAT_TEMPLATE_JINJA, strlen(CHAT_TEMPLATE_JINJA));
    sb_puts(&sb, "}");
    return http_respond_json(c, wsi, HTTP_STATUS_OK, &sb, head_only, NULL, NULL);
}
