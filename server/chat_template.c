/* chat_template.c: the chat template (chat_template.h). */
#include "chat_template.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int fail(proto_error *err, ifl_code code, const char *param, const char *msg)
{
    proto_error_set(err, code, "%s", msg);
    snprintf(err->param, sizeof err->param, "%s", param);
    return -1;
}

/* One message's content: a string, or an array of {"type":"text","text":...} parts. */
static int put_content(strbuf *sb, const cJSON *content, int i, proto_error *err)
{
    char param[48];
    snprintf(param, sizeof param, "messages[%d].content", i);
    if (cJSON_IsString(content) && content->valuestring) {
        sb_puts(sb, content->valuestring);
        return 0;
    }
    if (!cJSON_IsArray(content))
        return fail(err, IFL_CODE_WRONG_TYPE, param,
                    "a message's content must be a string or an array of text parts");
    const cJSON *part;
    cJSON_ArrayForEach(part, content)
    {
        const cJSON *t = cJSON_GetObjectItemCaseSensitive(part, "type");
        const cJSON *x = cJSON_GetObjectItemCaseSensitive(part, "text");
        if (!cJSON_IsString(t) || strcmp(t->valuestring, "text") || !cJSON_IsString(x))
            return fail(err, IFL_CODE_WRONG_TYPE, param,
                        "a content part must be {\"type\": \"text\", \"text\": \"...\"}");
        sb_puts(sb, x->valuestring);
    }
    return 0;
}

/* Whether the content (string or parts) begins with a space. */
static int starts_with_space(const cJSON *content)
{
    if (cJSON_IsArray(content))
        content = cJSON_GetObjectItemCaseSensitive(cJSON_GetArrayItem(content, 0), "text");
    return cJSON_IsString(content) && content->valuestring && content->valuestring[0] == ' ';
}

void req_chat_free(req_chat *c)
{
    if (!c)
        return;
    free(c->lines);
    free(c->messages_json);
    free(c);
}

/* The role's label in the template, and its chat_role; NULL when the role is not one. */
static const char *role_label(const cJSON *m, chat_role *role)
{
    const cJSON *r = cJSON_GetObjectItemCaseSensitive(m, "role");
    const char *s = cJSON_IsString(r) ? r->valuestring : "";
    if (!strcmp(s, "system") || !strcmp(s, "developer")) {
        *role = CHAT_ROLE_SYSTEM;
        return "System";
    }
    *role = !strcmp(s, "user") ? CHAT_ROLE_USER : CHAT_ROLE_ASSISTANT;
    return !strcmp(s, "user") ? "User" : !strcmp(s, "assistant") ? "Assistant" : NULL;
}

static const char *const ROLE_NAMES[] = {"system", "user", "assistant"};

/* The log's copy of message i: {"role":...,"content":"..."}, its content the n bytes rendered. */
static void put_logged(strbuf *js, int i, chat_role role, const char *content, size_t n)
{
    sb_printf(js, "%s{\"role\":\"%s\",\"content\":", i ? "," : "", ROLE_NAMES[role]);
    sb_json_str(js, content, n);
    sb_puts(js, "}");
}

int chat_render(const cJSON *msgs, strbuf *sb, req_chat **chat, proto_error *err)
{
    if (!msgs)
        return fail(err, IFL_CODE_MISSING_FIELD, "messages", "field 'messages' is required");
    if (!cJSON_IsArray(msgs) || !cJSON_GetArraySize(msgs))
        return fail(err, IFL_CODE_WRONG_TYPE, "messages",
                    "field 'messages' must be a non-empty array of {role, content}");
    int n = cJSON_GetArraySize(msgs), i = 0;
    req_chat *c = NULL;
    strbuf js;
    sb_init(&js, 0);
    if (chat && (!(c = calloc(1, sizeof *c)) || !(c->lines = calloc((size_t)n, sizeof *c->lines))))
        goto oom;
    sb_puts(&js, "[");
    const cJSON *m;
    cJSON_ArrayForEach(m, msgs)
    {
        chat_role role;
        const char *label = role_label(m, &role);
        if (!label) {
            char param[32], msg[160];
            snprintf(param, sizeof param, "messages[%d].role", i);
            snprintf(msg, sizeof msg,
                     "messages[%d].role must be \"system\", \"user\" or \"assistant\"", i);
            fail(err, IFL_CODE_OUT_OF_RANGE, param, msg);
            goto fail;
        }
        const cJSON *content = cJSON_GetObjectItemCaseSensitive(m, "content");
        size_t off = sb->len;
        sb_printf(sb, "%s:%s", label, starts_with_space(content) ? "" : " ");
        size_t text_off = sb->len;
        if (put_content(sb, content, i, err))
            goto fail;
        if (c && sb_ok(sb))
            put_logged(&js, i, role, sb_text(sb) + text_off, sb->len - text_off);
        sb_puts(sb, "\n");
        if (c)
            c->lines[i] = (chat_line){.off = off, .len = sb->len - off, .role = role};
        i++;
    }
    sb_puts(&js, "]");
    size_t suffix_off = sb->len;
    sb_puts(sb, CHAT_SUFFIX);
    if (!sb_ok(sb) || (c && !sb_ok(&js)))
        goto oom;
    if (c) {
        c->n = n;
        c->suffix_off = suffix_off;
        c->messages_json = sb_steal(&js);
        *chat = c;
    }
    sb_free(&js);
    return 0;
oom:
    fail(err, IFL_CODE_OUT_OF_MEMORY, "messages", "no memory for the prompt");
fail:
    sb_free(&js);
    req_chat_free(c);
    return -1;
}

int chat_encode(const ifl_tokenizer *tok, const char *prompt, const req_chat *c, ifl_tokens *ids,
                size_t *at, ifl_err *err)
{
    for (int32_t i = 0; i < c->n; i++) {
        const chat_line *l = &c->lines[i];
        at[i] = ids->n;
        if (ifl_tokenizer_encode(tok, prompt + l->off, l->len - 1, 0, ids, err) ||
            ifl_tokenizer_encode(tok, prompt + l->off + l->len - 1, 1, 0, ids, err))
            return -1;
    }
    at[c->n] = ids->n;
    if (ifl_tokenizer_encode(tok, prompt + c->suffix_off, strlen(prompt + c->suffix_off), 0, ids,
                             err))
        return -1;
    at[c->n + 1] = ids->n;
    return 0;
}

int chat_parse(const cJSON *root, req_params *m, proto_error *err)
{
    strbuf sb;
    sb_init(&sb, 0);
    if (chat_render(cJSON_GetObjectItemCaseSensitive(root, "messages"), &sb, &m->chat, err)) {
        sb_free(&sb);
        return -1;
    }
    m->prompt_len = sb.len;
    m->prompt = sb_steal(&sb);
    if (!m->prompt) {
        req_chat_free(m->chat);
        m->chat = NULL;
        return fail(err, IFL_CODE_OUT_OF_MEMORY, "messages", "no memory for the prompt");
    }
    return 0;
}

void chat_add_stop(req_params *p)
{
    if (p->n_stop >= IFL_MAX_STOPS)
        return;
    for (int i = 0; i < p->n_stop; i++)
        if (!strcmp(p->stop[i], CHAT_STOP))
            return;
    snprintf(p->stop[p->n_stop++], sizeof p->stop[0], "%s", CHAT_STOP);
}
