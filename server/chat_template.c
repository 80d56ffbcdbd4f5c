/* chat_template.c: the chat template (chat_template.h). */
#include "chat_template.h"

#include <cjson/cJSON.h>
#include <stdio.h>
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

int chat_render(const cJSON *msgs, strbuf *sb, proto_error *err)
{
    if (!msgs)
        return fail(err, IFL_CODE_MISSING_FIELD, "messages", "field 'messages' is required");
    if (!cJSON_IsArray(msgs) || !cJSON_GetArraySize(msgs))
        return fail(err, IFL_CODE_WRONG_TYPE, "messages",
                    "field 'messages' must be a non-empty array of {role, content}");
    int i = 0;
    const cJSON *m;
    cJSON_ArrayForEach(m, msgs)
    {
        const cJSON *role = cJSON_GetObjectItemCaseSensitive(m, "role");
        const char *r = cJSON_IsString(role) ? role->valuestring : "";
        const char *label = !strcmp(r, "system") || !strcmp(r, "developer") ? "System"
                            : !strcmp(r, "user")                            ? "User"
                            : !strcmp(r, "assistant")                       ? "Assistant"
                                                                            : NULL;
        if (!label) {
            char param[32], msg[160];
            snprintf(param, sizeof param, "messages[%d].role", i);
            snprintf(msg, sizeof msg,
                     "messages[%d].role must be \"system\", \"user\" or \"assistant\"", i);
            return fail(err, IFL_CODE_OUT_OF_RANGE, param, msg);
        }
        const cJSON *content = cJSON_GetObjectItemCaseSensitive(m, "content");
        sb_printf(sb, "%s:%s", label, starts_with_space(content) ? "" : " ");
        if (put_content(sb, content, i, err))
            return -1;
        sb_puts(sb, "\n");
        i++;
    }
    sb_puts(sb, "Assistant:");
    return sb_ok(sb) ? 0
                     : fail(err, IFL_CODE_OUT_OF_MEMORY, "messages", "no memory for the prompt");
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
