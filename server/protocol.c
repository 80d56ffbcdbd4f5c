/* protocol.c: parsing client messages (protocol.h). cJSON builds the tree; every field is then
 * checked by hand so each error names the field, what it holds and what it must be. */
#include "protocol.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void proto_error_set(proto_error *e, const char *code, const char *fmt, ...)
{
    e->code = code;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->message, sizeof e->message, fmt, ap);
    va_end(ap);
}

void proto_msg_free(proto_msg *m)
{
    free(m->prompt);
    m->prompt = NULL;
}

static const char *json_type_name(const cJSON *v)
{
    if (cJSON_IsString(v))
        return "a string";
    if (cJSON_IsNumber(v))
        return "a number";
    if (cJSON_IsBool(v))
        return "a boolean";
    if (cJSON_IsNull(v))
        return "null";
    if (cJSON_IsArray(v))
        return "an array";
    if (cJSON_IsObject(v))
        return "an object";
    return "invalid";
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

static int want_string(const cJSON *v, const char *field, proto_error *err)
{
    if (cJSON_IsString(v) && v->valuestring)
        return 0;
    proto_error_set(err, "wrong_type", "field '%s' must be a string, not %s", field,
                    json_type_name(v));
    return -1;
}

static int want_int(const cJSON *v, const char *field, double lo, double hi, double *out,
                    proto_error *err)
{
    if (!cJSON_IsNumber(v)) {
        proto_error_set(err, "wrong_type", "field '%s' must be an integer, not %s", field,
                        json_type_name(v));
        return -1;
    }
    double d = v->valuedouble;
    if (!isfinite(d) || d != floor(d)) {
        proto_error_set(err, "wrong_type", "field '%s' is %g: must be an integer", field, d);
        return -1;
    }
    if (d < lo || d > hi) {
        proto_error_set(err, "out_of_range", "field '%s' is %.6g: must be between %.0f and %.0f",
                        field, d, lo, hi);
        return -1;
    }
    *out = d;
    return 0;
}

static int want_num(const cJSON *v, const char *field, double lo, double hi, int lo_open,
                    double *out, proto_error *err)
{
    if (!cJSON_IsNumber(v)) {
        proto_error_set(err, "wrong_type", "field '%s' must be a number, not %s", field,
                        json_type_name(v));
        return -1;
    }
    double d = v->valuedouble;
    if (!isfinite(d) || d > hi || (lo_open ? d <= lo : d < lo)) {
        proto_error_set(err, "out_of_range", "field '%s' is %g: must be %s %g and at most %g",
                        field, d, lo_open ? "above" : "at least", lo, hi);
        return -1;
    }
    *out = d;
    return 0;
}

/* The fields each message type may carry. */
static int field_allowed(proto_kind k, const char *name)
{
    static const char *const gen[] = {"type",       "id",          "prompt",     "model",
                                      "max_tokens", "temperature", "top_k",      "top_p",
                                      "seed",       "stop",        "ignore_eos", NULL};
    static const char *const cancel[] = {"type", "id", NULL};
    static const char *const sub[] = {"type", "topic", NULL};
    static const char *const ping[] = {"type", "id", NULL};
    const char *const *list = k == PROTO_GENERATE ? gen
                              : k == PROTO_CANCEL ? cancel
                              : k == PROTO_PING   ? ping
                                                  : sub;
    for (; *list; list++)
        if (!strcmp(*list, name))
            return 1;
    return 0;
}

static int parse_generate(const cJSON *root, const proto_limits *lim, proto_msg *m,
                          proto_error *err)
{
    const cJSON *v;
    double d;
    m->policy = IFL_POLICY_ITERATIVE;
    m->max_tokens = lim->def_max_tokens;
    m->temperature = lim->def_temperature;
    m->top_k = lim->def_top_k;
    m->top_p = lim->def_top_p;

    v = cJSON_GetObjectItemCaseSensitive(root, "prompt");
    if (!v) {
        proto_error_set(err, "missing_field", "generate needs a 'prompt'");
        return -1;
    }
    if (want_string(v, "prompt", err))
        return -1;
    if (!v->valuestring[0]) {
        proto_error_set(err, "empty_prompt", "field 'prompt' is empty");
        return -1;
    }
    m->prompt_len = strlen(v->valuestring);
    m->prompt = malloc(m->prompt_len + 1);
    if (!m->prompt) {
        proto_error_set(err, "out_of_memory", "no memory for the prompt");
        return -1;
    }
    memcpy(m->prompt, v->valuestring, m->prompt_len + 1);

    if ((v = cJSON_GetObjectItemCaseSensitive(root, "model"))) {
        if (want_string(v, "model", err))
            return -1;
        if (ifl_policy_parse(v->valuestring, &m->policy)) {
            char c[64];
            clip(c, sizeof c, v->valuestring);
            proto_error_set(err, "unknown_model",
                            "field 'model' is \"%s\": must be \"iterative\" or \"static\"", c);
            return -1;
        }
    }
    if ((v = cJSON_GetObjectItemCaseSensitive(root, "max_tokens"))) {
        if (want_int(v, "max_tokens", 1, lim->max_tokens, &d, err))
            return -1;
        m->max_tokens = (int32_t)d;
    }
    if ((v = cJSON_GetObjectItemCaseSensitive(root, "temperature"))) {
        if (want_num(v, "temperature", 0, 2, 0, &d, err))
            return -1;
        m->temperature = d;
    }
    if ((v = cJSON_GetObjectItemCaseSensitive(root, "top_k"))) {
        if (want_int(v, "top_k", 0, lim->n_vocab, &d, err))
            return -1;
        m->top_k = (int32_t)d;
    }
    if ((v = cJSON_GetObjectItemCaseSensitive(root, "top_p"))) {
        if (want_num(v, "top_p", 0, 1, 1, &d, err))
            return -1;
        m->top_p = d;
    }
    if ((v = cJSON_GetObjectItemCaseSensitive(root, "seed"))) {
        if (want_int(v, "seed", 0, 9007199254740991.0, &d, err))
            return -1;
        m->has_seed = 1;
        m->seed = (uint64_t)d;
    }
    if ((v = cJSON_GetObjectItemCaseSensitive(root, "ignore_eos"))) {
        if (!cJSON_IsBool(v)) {
            proto_error_set(err, "wrong_type", "field 'ignore_eos' must be a boolean, not %s",
                            json_type_name(v));
            return -1;
        }
        m->ignore_eos = cJSON_IsTrue(v);
    }
    if ((v = cJSON_GetObjectItemCaseSensitive(root, "stop"))) {
        if (!cJSON_IsArray(v)) {
            proto_error_set(err, "wrong_type", "field 'stop' must be an array of strings, not %s",
                            json_type_name(v));
            return -1;
        }
        int n = cJSON_GetArraySize(v);
        if (n > IFL_MAX_STOPS) {
            proto_error_set(err, "out_of_range", "field 'stop' has %d strings: at most %d", n,
                            IFL_MAX_STOPS);
            return -1;
        }
        int i = 0;
        const cJSON *s;
        cJSON_ArrayForEach(s, v)
        {
            if (!cJSON_IsString(s) || !s->valuestring) {
                proto_error_set(err, "wrong_type", "stop[%d] must be a string, not %s", i,
                                json_type_name(s));
                return -1;
            }
            size_t len = strlen(s->valuestring);
            if (len < 1 || len > IFL_MAX_STOP_BYTES) {
                proto_error_set(err, "out_of_range", "stop[%d] is %zu bytes: must be 1 to %d", i,
                                len, IFL_MAX_STOP_BYTES);
                return -1;
            }
            memcpy(m->stop[i], s->valuestring, len + 1);
            i++;
        }
        m->n_stop = i;
    }
    return 0;
}

/* Offset of a \u0000 escape inside a JSON string of the text, or -1. cJSON hands strings over
 * NUL-terminated, so a U+0000 would silently cut a prompt, an id or a stop string: refused. */
static long find_nul_escape(const char *t, size_t n)
{
    int in_str = 0;
    for (size_t i = 0; i < n; i++) {
        if (!in_str) {
            in_str = t[i] == '"';
            continue;
        }
        if (t[i] == '"') {
            in_str = 0;
        } else if (t[i] == '\\' && i + 1 < n) {
            if (t[i + 1] == 'u' && i + 5 < n && !memcmp(t + i + 2, "0000", 4))
                return (long)i;
            i++; /* the escaped character (\uXXXX's digits are plain characters) */
        }
    }
    return -1;
}

int proto_parse(const char *text, size_t len, const proto_limits *lim, proto_msg *m,
                proto_error *err)
{
    memset(m, 0, sizeof *m);
    memset(err, 0, sizeof *err);
    int rc = -1;
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithLengthOpts(text, len, &end, 0);
    if (!root) {
        size_t at = end && end >= text && end <= text + len ? (size_t)(end - text) : 0;
        proto_error_set(err, "invalid_json", "message is not valid JSON (near byte %zu)", at);
        return -1;
    }
    /* trailing bytes after the value (other than whitespace) are not one JSON value */
    if (end) {
        const char *p = end;
        while (p < text + len && (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r'))
            p++;
        if (p < text + len && *p) {
            proto_error_set(err, "invalid_json",
                            "message has bytes after its JSON value (at byte %zu)",
                            (size_t)(p - text));
            goto out;
        }
    }
    if (!cJSON_IsObject(root)) {
        proto_error_set(err, "invalid_message", "message must be a JSON object, not %s",
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
    long nul = find_nul_escape(text, len);
    if (nul >= 0) {
        proto_error_set(err, "invalid_message",
                        "a string holds the character U+0000 (\\u0000 at byte %ld): not allowed",
                        nul);
        goto out;
    }
    const cJSON *type = cJSON_GetObjectItemCaseSensitive(root, "type");
    if (!type) {
        proto_error_set(err, "missing_field", "message needs a 'type'");
        goto out;
    }
    if (want_string(type, "type", err))
        goto out;
    static const struct {
        const char *name;
        proto_kind kind;
    } types[] = {{"generate", PROTO_GENERATE},
                 {"cancel", PROTO_CANCEL},
                 {"subscribe", PROTO_SUBSCRIBE},
                 {"unsubscribe", PROTO_UNSUBSCRIBE},
                 {"ping", PROTO_PING}};
    int found = 0;
    for (size_t i = 0; i < sizeof types / sizeof types[0]; i++)
        if (!strcmp(type->valuestring, types[i].name)) {
            m->kind = types[i].kind;
            found = 1;
        }
    if (!found) {
        char c[64];
        clip(c, sizeof c, type->valuestring);
        proto_error_set(err, "unknown_type",
                        "type \"%s\" is unknown: expected generate, cancel, subscribe, "
                        "unsubscribe or ping",
                        c);
        goto out;
    }
    /* every field known to this type, and none twice */
    for (const cJSON *f = root->child; f; f = f->next) {
        char c[64];
        clip(c, sizeof c, f->string ? f->string : "");
        if (!field_allowed(m->kind, f->string ? f->string : "")) {
            proto_error_set(err, "unknown_field", "%s has no field '%s'", type->valuestring, c);
            goto out;
        }
        for (const cJSON *g = root->child; g != f; g = g->next)
            if (!strcmp(g->string, f->string)) {
                proto_error_set(err, "invalid_message", "field '%s' appears twice", c);
                goto out;
            }
    }
    int needs_id = m->kind == PROTO_GENERATE || m->kind == PROTO_CANCEL;
    if (id || needs_id) {
        if (!id) {
            proto_error_set(err, "missing_field", "%s needs an 'id'", type->valuestring);
            goto out;
        }
        if (want_string(id, "id", err))
            goto out;
        size_t n = strlen(id->valuestring);
        if (n < 1 || n > PROTO_MAX_ID) {
            proto_error_set(err, "out_of_range", "field 'id' is %zu bytes: must be 1 to %d", n,
                            PROTO_MAX_ID);
            goto out;
        }
    }
    if (m->kind == PROTO_GENERATE) {
        if (parse_generate(root, lim, m, err))
            goto out;
    } else if (m->kind == PROTO_SUBSCRIBE || m->kind == PROTO_UNSUBSCRIBE) {
        const cJSON *t = cJSON_GetObjectItemCaseSensitive(root, "topic");
        if (!t) {
            proto_error_set(err, "missing_field", "%s needs a 'topic'", type->valuestring);
            goto out;
        }
        if (want_string(t, "topic", err))
            goto out;
        if (strcmp(t->valuestring, "steps")) {
            char c[64];
            clip(c, sizeof c, t->valuestring);
            proto_error_set(err, "unknown_topic",
                            "topic \"%s\" is unknown: the only topic is "
                            "\"steps\"",
                            c);
            goto out;
        }
        strcpy(m->topic, "steps");
    }
    rc = 0;
out:
    cJSON_Delete(root);
    return rc;
}
