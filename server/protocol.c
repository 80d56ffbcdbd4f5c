/* protocol.c: the client-message side of the protocol (protocol.h): cJSON builds the tree, after
 * the checks of what cJSON would let through (raw controls, NULs, bad \u escapes, bytes after the
 * value, an object with two members of one name); every field is then checked by hand so each
 * error names the field, what it holds and what it must be. The server's frames are
 * protocol_write.c's. */
#include "protocol.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "chat_template.h"
#include "params.h"

void proto_error_set(proto_error *e, ifl_code code, const char *fmt, ...)
{
    e->code = code;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->message, sizeof e->message, fmt, ap);
    va_end(ap);
}

void proto_msg_free(proto_msg *m)
{
    free(m->gen.prompt);
    m->gen.prompt = NULL;
    req_chat_free(m->gen.chat);
    m->gen.chat = NULL;
}

static const char *json_type_name(const cJSON *v)
{
    return params_json_type(v);
}

/* Copies a string for an error message: at most 40 bytes, cut at a character boundary. */
static void clip(char *dst, size_t cap, const char *s)
{
    size_t n = strlen(s);
    if (n > 40) {
        n = 40;
        while (n > 0 && ((unsigned char)s[n] & 0xC0) == 0x80)
            n--;
    }
    if (n >= cap)
        n = cap - 1;
    memcpy(dst, s, n);
    dst[n] = 0;
    if (n < strlen(s) && n + 4 < cap)
        strcat(dst, "...");
}

static void set_param(proto_error *err, const char *field)
{
    snprintf(err->param, sizeof err->param, "%s", field);
}

static int want_string(const cJSON *v, const char *field, proto_error *err)
{
    if (cJSON_IsString(v) && v->valuestring)
        return 0;
    set_param(err, field);
    proto_error_set(err, IFL_CODE_WRONG_TYPE, "field '%s' must be a string, not %s", field,
                    json_type_name(v));
    return -1;
}

/* The fields of the messages other than generate (whose fields are the parameter table's). */
static int field_allowed(proto_kind k, const char *name)
{
    static const char *const cancel[] = {"type", "id", NULL};
    static const char *const sub[] = {"type", "topic", NULL};
    static const char *const ping[] = {"type", "id", NULL};
    const char *const *list = k == PROTO_CANCEL ? cancel : k == PROTO_PING ? ping : sub;
    for (; *list; list++)
        if (!strcmp(*list, name))
            return 1;
    return 0;
}

static int parse_prompt(const cJSON *root, const char *field, req_params *m, proto_error *err)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(root, field);
    set_param(err, field);
    if (!v) {
        proto_error_set(err, IFL_CODE_MISSING_FIELD, "generate needs a '%s'", field);
        return -1;
    }
    if (want_string(v, field, err))
        return -1;
    if (!v->valuestring[0]) {
        proto_error_set(err, IFL_CODE_EMPTY_PROMPT, "field '%s' is empty", field);
        return -1;
    }
    m->prompt_len = strlen(v->valuestring);
    m->prompt = malloc(m->prompt_len + 1);
    if (!m->prompt) {
        proto_error_set(err, IFL_CODE_OUT_OF_MEMORY, "no memory for the prompt");
        return -1;
    }
    memcpy(m->prompt, v->valuestring, m->prompt_len + 1);
    err->param[0] = 0;
    return 0;
}

int proto_parse_params(const cJSON *obj, param_api api, const char *prompt_field,
                       const proto_limits *lim, req_params *m, proto_error *err)
{
    m->policy = IFL_POLICY_ITERATIVE;
    if (prompt_field && parse_prompt(obj, prompt_field, m, err))
        return -1;
    return params_parse(obj, api, lim, m, err);
}

/* messages instead of prompt: rendered with the chat template (chat_template.h). */
static int parse_messages(const cJSON *root, req_params *m, proto_error *err)
{
    if (cJSON_GetObjectItemCaseSensitive(root, "prompt")) {
        set_param(err, "messages");
        proto_error_set(err, IFL_CODE_INVALID_MESSAGE,
                        "generate takes 'prompt' or 'messages', not both");
        return -1;
    }
    if (chat_parse(root, m, err))
        return -1;
    err->param[0] = 0;
    return 0;
}

int proto_conversation_valid(const char *s)
{
    size_t n = strlen(s);
    if (n < 1 || n > REQ_MAX_CONV)
        return 0;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '_' || c == '-'))
            return 0;
    }
    return 1;
}

/* conversation: 1 to REQ_MAX_CONV characters of [A-Za-z0-9_-]. */
static int parse_conversation(const cJSON *v, req_params *m, proto_error *err)
{
    if (want_string(v, "conversation", err))
        return -1;
    if (!proto_conversation_valid(v->valuestring)) {
        set_param(err, "conversation");
        proto_error_set(err, IFL_CODE_OUT_OF_RANGE,
                        "field 'conversation' must be 1 to %d characters of A-Z a-z 0-9 _ -",
                        REQ_MAX_CONV);
        return -1;
    }
    memcpy(m->conversation, v->valuestring, strlen(v->valuestring) + 1);
    return 0;
}

static int parse_generate(const cJSON *root, const proto_limits *lim, req_params *m,
                          proto_error *err)
{
    const cJSON *v;
    params_set_defaults(m, lim);
    m->policy = IFL_POLICY_ITERATIVE;
    int chat = cJSON_GetObjectItemCaseSensitive(root, "messages") != NULL;
    if (chat ? parse_messages(root, m, err) : parse_prompt(root, "prompt", m, err))
        return -1;
    if ((v = cJSON_GetObjectItemCaseSensitive(root, "conversation")) &&
        parse_conversation(v, m, err))
        return -1;
    if ((v = cJSON_GetObjectItemCaseSensitive(root, "model"))) {
        if (want_string(v, "model", err))
            return -1;
        if (ifl_policy_parse(v->valuestring, &m->policy)) {
            char c[64];
            clip(c, sizeof c, v->valuestring);
            proto_error_set(err, IFL_CODE_UNKNOWN_MODEL,
                            "field 'model' is \"%s\": must be \"iterative\" or \"static\"", c);
            return -1;
        }
    }
    if (params_parse(root, PARAM_API_WS, lim, m, err))
        return -1;
    if (chat && m->has_truncate_prompt_tokens) {
        set_param(err, "truncate_prompt_tokens");
        proto_error_set(err, IFL_CODE_INVALID_MESSAGE,
                        "truncate_prompt_tokens cuts a prompt; a conversation (messages) leaves "
                        "whole turns out instead (truncate)");
        return -1;
    }
    if (chat)
        chat_add_stop(m);
    return 0;
}

/* The offset of the first byte JSON forbids raw that cJSON would take: a control character
 * (U+0000-U+001F) inside a string, or a NUL anywhere (cJSON reads NUL-terminated strings, so
 * "abc<NUL>def" would run as "abc" and "max_tokens<NUL>zz" pass as max_tokens); -1 if none. */
static long find_raw_control(const char *t, size_t n, int *in_string)
{
    int in_str = 0;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)t[i];
        if (c == 0 || (in_str && c < 0x20)) {
            *in_string = in_str;
            return (long)i;
        }
        if (!in_str)
            in_str = c == '"';
        else if (c == '"')
            in_str = 0;
        else if (c == '\\' && i + 1 < n && (unsigned char)t[i + 1] >= 0x20)
            i++; /* the escaped character; a raw control after the backslash is still refused */
    }
    return -1;
}

/* The \u escapes inside the text's JSON strings, in one pass: returns the offset of the first one
 * not followed by four hex digits (-1: none), which JSON forbids and cJSON 1.7 decodes as U+0000,
 * cutting the string there ("max_tokens\uzzzz" read as max_tokens, "a\u00zzb" as "a"); and sets
 * *nul_at to the first \u0000 (-1: none): cJSON hands strings over NUL-terminated, so a U+0000
 * would silently cut a prompt, an id or a stop string. Both are refused. */
static long find_u_escapes(const char *t, size_t n, long *nul_at)
{
    static const char hex[] = "0123456789abcdefABCDEF";
    int in_str = 0;
    *nul_at = -1;
    for (size_t i = 0; i < n; i++) {
        if (!in_str) {
            in_str = t[i] == '"';
            continue;
        }
        if (t[i] == '"') {
            in_str = 0;
        } else if (t[i] == '\\' && i + 1 < n) {
            if (t[i + 1] == 'u') {
                for (size_t k = i + 2; k < i + 6; k++)
                    if (k >= n || !t[k] || !strchr(hex, t[k]))
                        return (long)i;
                if (*nul_at < 0 && !memcmp(t + i + 2, "0000", 4))
                    *nul_at = (long)i;
            }
            i++; /* the escaped character (\uXXXX's digits are plain characters) */
        }
    }
    return -1;
}

/* The tree of one JSON value with nothing but whitespace after it; NULL with err filled. */
/* *nul_at: where the first \u0000 is (-1: none), for the caller to refuse once it knows the id. */
static cJSON *parse_json(const char *text, size_t len, long *nul_at, proto_error *err)
{
    *nul_at = -1;
    int in_str = 0;
    long raw = find_raw_control(text, len, &in_str);
    if (raw >= 0 && in_str) {
        proto_error_set(err, IFL_CODE_INVALID_JSON,
                        "message is not valid JSON: raw control character 0x%02x inside a string "
                        "at byte %ld (JSON requires it escaped, as \\u%04x)",
                        (unsigned char)text[raw], raw, (unsigned char)text[raw]);
        return NULL;
    }
    if (raw >= 0) {
        proto_error_set(err, IFL_CODE_INVALID_JSON,
                        "message is not valid JSON: a NUL byte at byte %ld", raw);
        return NULL;
    }
    long bad = find_u_escapes(text, len, nul_at);
    if (bad >= 0) {
        proto_error_set(err, IFL_CODE_INVALID_JSON,
                        "message is not valid JSON: the \\u escape at byte %ld is not followed by "
                        "four hex digits",
                        bad);
        return NULL;
    }
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithLengthOpts(text, len, &end, 0);
    if (!root) {
        size_t at = end && end >= text && end <= text + len ? (size_t)(end - text) : 0;
        proto_error_set(err, IFL_CODE_INVALID_JSON, "message is not valid JSON (near byte %zu)",
                        at);
        return NULL;
    }
    if (end) {
        const char *p = end;
        while (p < text + len && (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r'))
            p++;
        if (p < text + len) {
            proto_error_set(err, IFL_CODE_INVALID_JSON,
                            "message has bytes after its JSON value (at byte %zu)",
                            (size_t)(p - text));
            cJSON_Delete(root);
            return NULL;
        }
    }
    return root;
}

static int name_cmp(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* A name that appears twice among the members of obj (an object with n members), or NULL. Sorted
 * when there are many (n log n: a 64 KiB body holds thousands), pairwise when few. */
static const char *object_duplicate(const cJSON *obj, size_t n)
{
    const char **names = n > 16 ? malloc(n * sizeof *names) : NULL;
    if (!names) { /* few members (or no memory for the sort) */
        for (const cJSON *f = obj->child; f; f = f->next)
            for (const cJSON *g = obj->child; g != f; g = g->next)
                if (!strcmp(g->string, f->string))
                    return f->string;
        return NULL;
    }
    size_t i = 0;
    for (const cJSON *f = obj->child; f; f = f->next)
        names[i++] = f->string;
    qsort(names, n, sizeof *names, name_cmp);
    const char *dup = NULL;
    for (i = 1; i < n && !dup; i++)
        if (!strcmp(names[i - 1], names[i]))
            dup = names[i];
    free(names);
    return dup;
}

/* The first object, depth first, with two members of the same name: that name, or NULL. cJSON
 * keeps both, and which one a reader gets would be an accident of the lookup. */
static const char *find_duplicate(const cJSON *v)
{
    if (!cJSON_IsObject(v) && !cJSON_IsArray(v))
        return NULL;
    size_t n = 0;
    for (const cJSON *f = v->child; f; f = f->next) {
        const char *d = find_duplicate(f);
        if (d)
            return d;
        n++;
    }
    return cJSON_IsObject(v) ? object_duplicate(v, n) : NULL;
}

/* Refuses a tree with a duplicate key, naming it (and as the error's param). */
static int refuse_duplicate(const cJSON *root, proto_error *err)
{
    const char *d = find_duplicate(root);
    if (!d)
        return 0;
    char c[sizeof err->param]; /* clip keeps 40 bytes and "..." */
    clip(c, sizeof c, d);
    set_param(err, c);
    proto_error_set(err, IFL_CODE_INVALID_MESSAGE,
                    "duplicate key \"%s\": an object names the same member twice", c);
    return -1;
}

struct cJSON *proto_parse_json_object(const char *text, size_t len, proto_error *err)
{
    long nul;
    cJSON *root = parse_json(text, len, &nul, err);
    if (!root)
        return NULL;
    if (!cJSON_IsObject(root)) {
        proto_error_set(err, IFL_CODE_INVALID_MESSAGE, "the body must be a JSON object, not %s",
                        json_type_name(root));
        cJSON_Delete(root);
        return NULL;
    }
    if (nul >= 0) {
        proto_error_set(err, IFL_CODE_INVALID_MESSAGE,
                        "a string holds the character U+0000 (\\u0000 at byte %ld): not allowed",
                        nul);
        cJSON_Delete(root);
        return NULL;
    }
    if (refuse_duplicate(root, err)) {
        cJSON_Delete(root);
        return NULL;
    }
    return root;
}

const char *proto_json_type_name(const struct cJSON *v)
{
    return json_type_name(v);
}

/* The message's type; -1 with err filled. */
static int parse_type(const cJSON *root, proto_kind *kind, proto_error *err)
{
    const cJSON *type = cJSON_GetObjectItemCaseSensitive(root, "type");
    if (!type) {
        proto_error_set(err, IFL_CODE_MISSING_FIELD, "message needs a 'type'");
        return -1;
    }
    if (want_string(type, "type", err))
        return -1;
    static const struct {
        const char *name;
        proto_kind kind;
    } types[] = {{"generate", PROTO_GENERATE},
                 {"cancel", PROTO_CANCEL},
                 {"subscribe", PROTO_SUBSCRIBE},
                 {"unsubscribe", PROTO_UNSUBSCRIBE},
                 {"ping", PROTO_PING}};
    for (size_t i = 0; i < sizeof types / sizeof types[0]; i++)
        if (!strcmp(type->valuestring, types[i].name)) {
            *kind = types[i].kind;
            return 0;
        }
    char c[64];
    clip(c, sizeof c, type->valuestring);
    proto_error_set(err, IFL_CODE_UNKNOWN_TYPE,
                    "type \"%s\" is unknown: expected generate, cancel, subscribe, unsubscribe or "
                    "ping",
                    c);
    return -1;
}

/* Every field known to this type (none twice: refuse_duplicate saw to that). */
static int check_fields(const cJSON *root, proto_kind kind, const char *type, proto_error *err)
{
    if (kind == PROTO_GENERATE)
        return params_check_fields(root, PARAM_API_WS, 1, type, err);
    for (const cJSON *f = root->child; f; f = f->next) {
        char c[64];
        clip(c, sizeof c, f->string ? f->string : "");
        if (!field_allowed(kind, f->string ? f->string : "")) {
            proto_error_set(err, IFL_CODE_UNKNOWN_FIELD, "%s has no field '%s'", type, c);
            return -1;
        }
    }
    return 0;
}

/* The id a message must (generate, cancel) or may (ping) carry. */
static int check_id(const cJSON *id, proto_kind kind, const char *type, proto_error *err)
{
    int needs_id = kind == PROTO_GENERATE || kind == PROTO_CANCEL;
    if (!id && !needs_id)
        return 0;
    if (!id) {
        proto_error_set(err, IFL_CODE_MISSING_FIELD, "%s needs an 'id'", type);
        return -1;
    }
    if (want_string(id, "id", err))
        return -1;
    size_t n = strlen(id->valuestring);
    if (n < 1 || n > PROTO_MAX_ID) {
        proto_error_set(err, IFL_CODE_OUT_OF_RANGE, "field 'id' is %zu bytes: must be 1 to %d", n,
                        PROTO_MAX_ID);
        return -1;
    }
    return 0;
}

static int parse_topic(const cJSON *root, proto_msg *m, const char *type, proto_error *err)
{
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(root, "topic");
    if (!t) {
        proto_error_set(err, IFL_CODE_MISSING_FIELD, "%s needs a 'topic'", type);
        return -1;
    }
    if (want_string(t, "topic", err))
        return -1;
    if (strcmp(t->valuestring, "steps")) {
        char c[64];
        clip(c, sizeof c, t->valuestring);
        proto_error_set(err, IFL_CODE_UNKNOWN_TOPIC,
                        "topic \"%s\" is unknown: the only topic is \"steps\"", c);
        return -1;
    }
    strcpy(m->topic, "steps");
    return 0;
}

int proto_parse(const char *text, size_t len, const proto_limits *lim, proto_msg *m,
                proto_error *err)
{
    memset(m, 0, sizeof *m);
    memset(err, 0, sizeof *err);
    long nul;
    cJSON *root = parse_json(text, len, &nul, err);
    if (!root)
        return -1;
    int rc = -1;
    if (!cJSON_IsObject(root)) {
        proto_error_set(err, IFL_CODE_INVALID_MESSAGE, "message must be a JSON object, not %s",
                        json_type_name(root));
        goto out;
    }
    /* the id first, so that later errors can name the request */
    const cJSON *id = cJSON_GetObjectItemCaseSensitive(root, "id");
    if (id && cJSON_IsString(id) && id->valuestring) {
        size_t n = strlen(id->valuestring);
        if (n >= 1 && n <= PROTO_MAX_ID) {
            memcpy(m->id, id->valuestring, n + 1);
            m->has_id = 1;
            memcpy(err->id, id->valuestring, n + 1);
            err->has_id = 1;
        }
    }
    if (nul >= 0) {
        proto_error_set(err, IFL_CODE_INVALID_MESSAGE,
                        "a string holds the character U+0000 (\\u0000 at byte %ld): not allowed",
                        nul);
        goto out;
    }
    if (refuse_duplicate(root, err))
        goto out;
    if (parse_type(root, &m->kind, err))
        goto out;
    const char *type = cJSON_GetObjectItemCaseSensitive(root, "type")->valuestring;
    if (check_fields(root, m->kind, type, err) || check_id(id, m->kind, type, err))
        goto out;
    if (m->kind == PROTO_GENERATE) {
        memcpy(m->gen.id, m->id, sizeof m->gen.id);
        if (parse_generate(root, lim, &m->gen, err))
            goto out;
    } else if (m->kind == PROTO_SUBSCRIBE || m->kind == PROTO_UNSUBSCRIBE) {
        if (parse_topic(root, m, type, err))
            goto out;
    }
    rc = 0;
out:
    cJSON_Delete(root);
    return rc;
}
