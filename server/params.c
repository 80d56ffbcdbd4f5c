/* params.c: the request-parameter table (params.h) and what reads it: the field checks, the
 * parser of the value parameters, and the writers of its JSON (the page, the log) and markdown
 * (the docs). */
#include "params.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "defaults.h"
#include "logit_adj.h"
#include "protocol.h" /* proto_limits, proto_error: plain structs (no code of protocol.c) */

#define F(field) offsetof(req_params, field)
#define ALL PARAM_API_ALL
#define V1 PARAM_API_V1
#define CMPL PARAM_API_COMPLETIONS
#define CHAT PARAM_API_CHAT
#define WS PARAM_API_WS
#define V2 PARAM_API_V2
#define SEED_MAX 9007199254740991.0 /* 2^53 - 1: exact in a JSON number */

const param_def PARAMS[] = {
    /* the value parameters, in the order the docs and the page show them */
    {.name = "max_tokens", .apis = ALL, .alias = "max_completion_tokens", .alias_apis = CHAT,
     .type = PARAM_INT, .lo = 1, .hi_from = PARAM_FROM_MAX_TOKENS, .zero_apis = CMPL,
     .def_from = PARAM_FROM_DEF_MAX_TOKENS, .off = F(max_tokens), .label = "Max tokens",
     .doc = "most tokens to generate (the prompt and these must fit the context)"},
    {.name = "min_tokens", .apis = ALL, .type = PARAM_INT, .lo = 0,
     .hi_from = PARAM_FROM_MAX_TOKENS, .off = F(min_tokens), .label = "Min tokens",
     .doc = "tokens generated before EOS, a stop token id or a stop string may end the request; "
            "at most max_tokens"},
    {.name = "temperature", .apis = ALL, .type = PARAM_NUM, .lo = 0, .hi = 2,
     .def_from = PARAM_FROM_DEF_TEMPERATURE, .off = F(temperature), .label = "Temperature",
     .doc = "0: greedy (the most likely token); higher: flatter probabilities"},
    {.name = "top_k", .apis = ALL, .type = PARAM_INT, .lo = 0, .hi_from = PARAM_FROM_VOCAB,
     .def_from = PARAM_FROM_DEF_TOP_K, .off = F(top_k), .label = "Top-k",
     .doc = "draw among the k most likely tokens (0: all)"},
    {.name = "top_p", .apis = ALL, .type = PARAM_NUM, .lo = 0, .hi = 1, .lo_open = 1,
     .def_from = PARAM_FROM_DEF_TOP_P, .off = F(top_p), .label = "Top-p",
     .doc = "draw among the fewest most likely tokens whose probability reaches top_p"},
    {.name = "min_p", .apis = ALL, .type = PARAM_NUM, .lo = 0, .hi = 1, .off = F(min_p),
     .label = "Min-p",
     .doc = "drop tokens less than min_p times as likely as the most likely one (0: off)"},
    {.name = "presence_penalty", .apis = ALL, .type = PARAM_NUM, .lo = -2, .hi = 2,
     .off = F(presence_penalty), .label = "Presence penalty",
     .doc = "subtracted from the logit of every token generated so far (0: off)"},
    {.name = "frequency_penalty", .apis = ALL, .type = PARAM_NUM, .lo = -2, .hi = 2,
     .off = F(frequency_penalty), .label = "Frequency penalty",
     .doc = "subtracted from a token's logit once per time it was generated (0: off)"},
    {.name = "repetition_penalty", .apis = ALL, .type = PARAM_NUM, .lo = 0,
     .hi = IFL_MAX_REPETITION_PENALTY,
     .lo_open = 1, .def = 1, .off = F(repetition_penalty), .label = "Repetition penalty",
     .doc = "a token of the prompt or the output: its logit divided by this if positive, else "
            "multiplied (1: off)"},
    {.name = "logit_bias", .apis = ALL, .type = PARAM_LOGIT_BIAS, .lo = -100, .hi = 100,
     .label = "Logit bias",
     .doc = "{\"token id\": bias}: added to those tokens' logits (-100 bans, 100 forces)"},
    {.name = "seed", .apis = ALL, .type = PARAM_SEED, .lo = 0, .hi = SEED_MAX, .off = F(seed),
     .label = "Seed",
     .doc = "the same seed, prompt and parameters give the same tokens, whatever else runs "
            "(absent: the server draws one)"},
    {.name = "stop", .apis = ALL, .type = PARAM_STOP, .label = "Stop strings",
     .doc = "strings that end the request where they first appear (not sent)"},
    {.name = "stop_token_ids", .apis = ALL, .type = PARAM_TOKEN_IDS, .label = "Stop token ids",
     .doc = "token ids that end the request when drawn (no text of their own)"},
    {.name = "ignore_eos", .apis = ALL, .type = PARAM_BOOL, .off = F(ignore_eos),
     .label = "Ignore end-of-text", .doc = "run to max_tokens through end-of-text tokens"},

    /* the front ends' own fields */
    {.name = "type", .apis = WS, .type = PARAM_FRONT, .doc = "\"generate\""},
    {.name = "id", .apis = WS | V2, .type = PARAM_FRONT,
     .doc = "the client's id of the request, 1 to 64 bytes (/ws: required, unique in flight on "
            "the connection; /v2: echoed)"},
    {.name = "model", .apis = WS | V1, .type = PARAM_FRONT,
     .doc = "the policy: iterative or static (/v1: any model name of GET /v1/models, required)"},
    {.name = "prompt", .apis = WS | CMPL, .type = PARAM_FRONT,
     .doc = "the text to continue (/v1/completions: or an array of token ids)"},
    {.name = "messages", .apis = WS | CHAT, .type = PARAM_FRONT,
     .doc = "instead of prompt: a conversation, rendered with the chat template"},
    {.name = "conversation", .apis = WS, .type = PARAM_FRONT,
     .doc = "the client's conversation id, kept in the log (1 to 64 of A-Z a-z 0-9 _ -)"},
    {.name = "text_input", .apis = V2, .type = PARAM_FRONT, .doc = "the text to continue"},
    {.name = "parameters", .apis = V2, .type = PARAM_FRONT,
     .doc = "an object with the value parameters, instead of at the top level"},
    {.name = "stream", .apis = V1, .type = PARAM_FRONT,
     .doc = "true: server-sent events, one per token"},
    {.name = "stream_options", .apis = V1, .type = PARAM_FRONT,
     .doc = "{\"include_usage\": true}: a last event with the usage"},
    {.name = "user", .apis = V1, .type = PARAM_FRONT,
     .doc = "the client's user: one session of the batchers' fair shares"},

    /* scoring and several samples (docs/http-api.md "Log probabilities"): not on the page */
    {.name = "n", .apis = WS | V1, .type = PARAM_INT, .lo = 1, .hi = IFL_MAX_CHOICES, .def = 1,
     .off = F(n),
     .doc = "choices of the prompt, each drawn from its own stream of the seed (at most the "
            "server's --max-batch)"},
    {.name = "logprobs", .apis = WS | CMPL, .type = PARAM_OPT_INT, .lo = 0,
     .hi = IFL_MAX_TOP_LOGPROBS, .off = F(logprobs), .has_off = F(want_logprobs),
     .doc = "each generated token's log-probability, with this many of the most likely tokens "
            "at its position (absent: none)"},
    {.name = "logprobs", .apis = CHAT, .type = PARAM_BOOL, .off = F(want_logprobs),
     .doc = "each generated token's log-probability in the choice's logprobs.content"},
    {.name = "top_logprobs", .apis = CHAT, .type = PARAM_INT, .lo = 0,
     .hi = IFL_MAX_TOP_LOGPROBS, .off = F(logprobs),
     .doc = "with logprobs: this many of the most likely tokens at each position"},
    {.name = "truncate", .apis = WS | CHAT, .type = PARAM_BOOL, .def_from = PARAM_FROM_DEF_TRUNCATE,
     .off = F(truncate),
     .doc = "with messages: when the conversation and max_tokens do not fit the context, leave "
            "the oldest turns out (never a system message nor the newest user turn); the answer "
            "says how many (trimmed_messages, trimmed_tokens)"},
    {.name = "truncate_prompt_tokens", .apis = WS | CMPL, .type = PARAM_OPT_INT, .lo = 1,
     .hi_from = PARAM_FROM_MAX_TOKENS, .off = F(truncate_prompt_tokens),
     .has_off = F(has_truncate_prompt_tokens),
     .doc = "with prompt: keep only its last this many tokens (absent: an over-long prompt is "
            "refused); the answer says how many were left out (trimmed_tokens)"},
    {.name = "echo", .apis = CMPL, .type = PARAM_BOOL, .off = F(echo),
     .doc = "the prompt's text (with logprobs: its tokens, each scored but the first) before "
            "the completion; max_tokens 0 scores the prompt alone"},

    /* OpenAI's fields this server does not implement: their neutral values only */
    {.name = "best_of", .apis = CMPL, .type = PARAM_NEUTRAL, .neutral = PARAM_NEUTRAL_NULL_ONE,
     .doc = "one candidate per request"},
    {.name = "suffix", .apis = CMPL, .type = PARAM_NEUTRAL,
     .neutral = PARAM_NEUTRAL_NULL_EMPTY_STRING, .doc = "no text after the completion"},
    {.name = "response_format", .apis = CHAT, .type = PARAM_NEUTRAL,
     .neutral = PARAM_NEUTRAL_TEXT_FORMAT, .doc = "plain text"},
    {.name = "tools", .apis = CHAT, .type = PARAM_NEUTRAL,
     .neutral = PARAM_NEUTRAL_NULL_EMPTY_ARRAY, .doc = "no tools"},
    {.name = "tool_choice", .apis = CHAT, .type = PARAM_NEUTRAL, .neutral = PARAM_NEUTRAL_NULL_NONE,
     .doc = "no tools"},
    {.name = "functions", .apis = CHAT, .type = PARAM_NEUTRAL,
     .neutral = PARAM_NEUTRAL_NULL_EMPTY_ARRAY, .doc = "no functions"},
    {.name = "function_call", .apis = CHAT, .type = PARAM_NEUTRAL,
     .neutral = PARAM_NEUTRAL_NULL_NONE, .doc = "no functions"},
    {.name = "parallel_tool_calls", .apis = CHAT, .type = PARAM_NEUTRAL,
     .neutral = PARAM_NEUTRAL_ANY_BOOL, .doc = "ignored: there are no tools"},
    {.name = "modalities", .apis = CHAT, .type = PARAM_NEUTRAL,
     .neutral = PARAM_NEUTRAL_TEXT_MODALITY, .doc = "text only"},
    {.name = "store", .apis = V1, .type = PARAM_NEUTRAL, .neutral = PARAM_NEUTRAL_ANY_BOOL,
     .doc = "ignored: every request goes to the server's own log (--db)"},
    {.name = "metadata", .apis = V1, .type = PARAM_NEUTRAL, .neutral = PARAM_NEUTRAL_ANY_OBJECT,
     .doc = "ignored"},
    {.name = "service_tier", .apis = V1, .type = PARAM_NEUTRAL,
     .neutral = PARAM_NEUTRAL_ANY_STRING, .doc = "ignored: one tier"},
};
const int PARAMS_N = (int)(sizeof PARAMS / sizeof PARAMS[0]);

/* What each neutral kind accepts, in words (the error message and the docs). */
static const char *const NEUTRAL_TEXT[] = {
    [PARAM_NEUTRAL_NULL_FALSE] = "null or false",
    [PARAM_NEUTRAL_NULL_ONE] = "null or 1",
    [PARAM_NEUTRAL_NULL_ZERO] = "null or 0",
    [PARAM_NEUTRAL_NULL_EMPTY_STRING] = "null or \"\"",
    [PARAM_NEUTRAL_NULL_EMPTY_ARRAY] = "null or []",
    [PARAM_NEUTRAL_NULL_NONE] = "null or \"none\"",
    [PARAM_NEUTRAL_TEXT_FORMAT] = "null or {\"type\": \"text\"}",
    [PARAM_NEUTRAL_TEXT_MODALITY] = "null or [\"text\"]",
    [PARAM_NEUTRAL_ANY_BOOL] = "null or a boolean",
    [PARAM_NEUTRAL_ANY_STRING] = "null or a string",
    [PARAM_NEUTRAL_ANY_OBJECT] = "null or an object",
};

const char *params_neutral_text(param_neutral k)
{
    return NEUTRAL_TEXT[k];
}

int params_first_of_name(int i)
{
    for (int k = 0; k < i; k++)
        if (params_is_value(&PARAMS[k]) && !strcmp(PARAMS[k].name, PARAMS[i].name))
            return 0;
    return 1;
}

static int is_neutral(param_neutral k, const cJSON *v)
{
    if (cJSON_IsNull(v))
        return 1;
    switch (k) {
    case PARAM_NEUTRAL_NULL_FALSE: return cJSON_IsFalse(v);
    case PARAM_NEUTRAL_NULL_ONE: return cJSON_IsNumber(v) && v->valuedouble == 1;
    case PARAM_NEUTRAL_NULL_ZERO: return cJSON_IsNumber(v) && v->valuedouble == 0;
    case PARAM_NEUTRAL_NULL_EMPTY_STRING: return cJSON_IsString(v) && !v->valuestring[0];
    case PARAM_NEUTRAL_NULL_EMPTY_ARRAY: return cJSON_IsArray(v) && !v->child;
    case PARAM_NEUTRAL_NULL_NONE: return cJSON_IsString(v) && !strcmp(v->valuestring, "none");
    case PARAM_NEUTRAL_TEXT_FORMAT: {
        const cJSON *t = cJSON_GetObjectItemCaseSensitive(v, "type");
        return cJSON_IsObject(v) && cJSON_IsString(t) && !strcmp(t->valuestring, "text") &&
               !t->next && v->child == t;
    }
    case PARAM_NEUTRAL_TEXT_MODALITY:
        return cJSON_IsArray(v) && cJSON_GetArraySize(v) == 1 && cJSON_IsString(v->child) &&
               !strcmp(v->child->valuestring, "text");
    case PARAM_NEUTRAL_ANY_BOOL: return cJSON_IsBool(v);
    case PARAM_NEUTRAL_ANY_STRING: return cJSON_IsString(v);
    case PARAM_NEUTRAL_ANY_OBJECT: return cJSON_IsObject(v);
    }
    return 0;
}

const param_def *params_find(const char *name, param_api api)
{
    for (int i = 0; i < PARAMS_N; i++) {
        const param_def *d = &PARAMS[i];
        if (((d->apis & api) && !strcmp(d->name, name)) ||
            (d->alias && (d->alias_apis & api) && !strcmp(d->alias, name)))
            return d;
    }
    return NULL;
}

const char *params_name_in(const param_def *d, param_api api)
{
    return d->alias && (d->alias_apis & api) ? d->alias : d->name;
}

double params_hi(const param_def *d, const proto_limits *lim)
{
    switch (d->hi_from) {
    case PARAM_FROM_MAX_TOKENS: return lim ? lim->max_tokens : 0;
    case PARAM_FROM_VOCAB: return lim ? lim->n_vocab : 0;
    default: return d->hi;
    }
}

double params_default(const param_def *d, const proto_limits *lim)
{
    switch (d->def_from) {
    case PARAM_FROM_DEF_MAX_TOKENS: return lim ? lim->def_max_tokens : IFL_DEFAULT_MAX_NEW_TOKENS;
    case PARAM_FROM_DEF_TEMPERATURE: return lim ? lim->def_temperature : IFL_DEFAULT_TEMPERATURE;
    case PARAM_FROM_DEF_TOP_K: return lim ? lim->def_top_k : IFL_DEFAULT_TOP_K;
    case PARAM_FROM_DEF_TOP_P: return lim ? lim->def_top_p : IFL_DEFAULT_TOP_P;
    case PARAM_FROM_DEF_TRUNCATE: return lim ? lim->def_truncate : 1;
    default: return d->def;
    }
}

int params_clip_len(const char *s, size_t max)
{
    size_t n = strlen(s);
    if (n > max) {
        n = max;
        while (n > 0 && ((unsigned char)s[n] & 0xC0) == 0x80)
            n--;
    }
    return (int)n;
}

static int clip_len(const char *s)
{
    return params_clip_len(s, 64);
}

static int refuse(proto_error *err, ifl_code code, const char *field, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static int refuse(proto_error *err, ifl_code code, const char *field, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err->message, sizeof err->message, fmt, ap);
    va_end(ap);
    err->code = code;
    snprintf(err->param, sizeof err->param, "%.*s", params_clip_len(field, sizeof err->param - 1), field);
    return -1;
}

int params_check_fields(const cJSON *obj, param_api api, int front_ok, const char *where,
                        proto_error *err)
{
    const cJSON *f;
    cJSON_ArrayForEach(f, obj)
    {
        const char *name = f->string ? f->string : "";
        const param_def *d = params_find(name, api);
        if (!d || (!front_ok && d->type == PARAM_FRONT))
            return refuse(err, IFL_CODE_UNKNOWN_FIELD, name, "%s has no field '%.*s'", where,
                          clip_len(name), name);
        if (d->type == PARAM_NEUTRAL && !is_neutral(d->neutral, f))
            return refuse(err, IFL_CODE_UNSUPPORTED_FIELD, name,
                          "field '%s' is not supported by this server (%s): only %s is accepted",
                          name, d->doc, NEUTRAL_TEXT[d->neutral]);
    }
    return 0;
}

/* ---- the value parameters ---------------------------------------------------------------------- */

const char *params_json_type(const cJSON *v)
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

static const char *type_name(const cJSON *v)
{
    return params_json_type(v);
}

/* A number of the row's type and range (hi from the server where it says so; 0 too where the row's
 * zero_apis has api), into *out. */
static int read_number(const cJSON *v, const param_def *d, const char *name, param_api api,
                       const proto_limits *lim, double *out, proto_error *err)
{
    int integer = d->type != PARAM_NUM;
    double lo = (d->zero_apis & api) && cJSON_IsNumber(v) && v->valuedouble == 0 ? 0 : d->lo;
    double hi = params_hi(d, lim);
    if (!cJSON_IsNumber(v))
        return refuse(err, IFL_CODE_WRONG_TYPE, name, "field '%s' must be %s, not %s", name,
                      integer ? "an integer" : "a number", type_name(v));
    double x = v->valuedouble;
    if (integer && (!isfinite(x) || x != floor(x)))
        return refuse(err, IFL_CODE_WRONG_TYPE, name, "field '%s' is %g: must be an integer", name,
                      x);
    if (integer && (x < lo || x > hi))
        return refuse(err, IFL_CODE_OUT_OF_RANGE, name,
                      "field '%s' is %.6g: must be between %.0f and %.0f", name, x, lo, hi);
    if (!integer && (!isfinite(x) || x > hi || (d->lo_open ? x <= lo : x < lo)))
        return refuse(err, IFL_CODE_OUT_OF_RANGE, name,
                      "field '%s' is %g: must be %s %g and at most %g", name, x,
                      d->lo_open ? "above" : "at least", lo, hi);
    *out = x;
    return 0;
}

/* stop: an array of 1..IFL_MAX_STOPS strings of 1..IFL_MAX_STOP_BYTES bytes; OpenAI's APIs also
 * take one string. */
static int read_stop(const cJSON *v, param_api api, req_params *p, proto_error *err)
{
    if (cJSON_IsString(v) && (api & PARAM_API_V1)) {
        size_t len = strlen(v->valuestring);
        if (len < 1 || len > IFL_MAX_STOP_BYTES)
            return refuse(err, IFL_CODE_OUT_OF_RANGE, "stop",
                          "field 'stop' is %zu bytes: must be 1 to %d", len, IFL_MAX_STOP_BYTES);
        memcpy(p->stop[0], v->valuestring, len + 1);
        p->n_stop = 1;
        return 0;
    }
    if (!cJSON_IsArray(v))
        return refuse(err, IFL_CODE_WRONG_TYPE, "stop",
                      "field 'stop' must be an array of strings%s, not %s",
                      api & PARAM_API_V1 ? " or a string" : "", type_name(v));
    int n = cJSON_GetArraySize(v);
    if (n > IFL_MAX_STOPS)
        return refuse(err, IFL_CODE_OUT_OF_RANGE, "stop",
                      "field 'stop' has %d strings: at most %d", n, IFL_MAX_STOPS);
    int i = 0;
    const cJSON *s;
    cJSON_ArrayForEach(s, v)
    {
        if (!cJSON_IsString(s))
            return refuse(err, IFL_CODE_WRONG_TYPE, "stop", "stop[%d] must be a string, not %s",
                          i, type_name(s));
        size_t len = strlen(s->valuestring);
        if (len < 1 || len > IFL_MAX_STOP_BYTES)
            return refuse(err, IFL_CODE_OUT_OF_RANGE, "stop",
                          "stop[%d] is %zu bytes: must be 1 to %d", i, len, IFL_MAX_STOP_BYTES);
        memcpy(p->stop[i], s->valuestring, len + 1);
        i++;
    }
    p->n_stop = i;
    return 0;
}

/* A token id of the vocabulary, as a JSON number: -1 with *err naming where (what[i]). */
static int read_token_id(const cJSON *x, const char *field, int i, const proto_limits *lim,
                         int32_t *out, proto_error *err)
{
    if (!cJSON_IsNumber(x) || x->valuedouble != floor(x->valuedouble) || !isfinite(x->valuedouble))
        return refuse(err, IFL_CODE_WRONG_TYPE, field, "%s[%d] must be a token id (an integer)",
                      field, i);
    if (x->valuedouble < 0 || x->valuedouble >= lim->n_vocab)
        return refuse(err, IFL_CODE_OUT_OF_RANGE, field,
                      "%s[%d] is %.0f: token ids are 0 to %d", field, i, x->valuedouble,
                      lim->n_vocab - 1);
    *out = (int32_t)x->valuedouble;
    return 0;
}

static int read_stop_ids(const cJSON *v, const proto_limits *lim, req_params *p,
                         proto_error *err)
{
    const char *f = "stop_token_ids";
    if (!cJSON_IsArray(v))
        return refuse(err, IFL_CODE_WRONG_TYPE, f, "field '%s' must be an array of token ids, "
                      "not %s", f, type_name(v));
    int n = cJSON_GetArraySize(v);
    if (n > IFL_MAX_STOP_IDS)
        return refuse(err, IFL_CODE_OUT_OF_RANGE, f, "field '%s' has %d ids: at most %d", f, n,
                      IFL_MAX_STOP_IDS);
    int i = 0;
    const cJSON *x;
    cJSON_ArrayForEach(x, v)
    {
        if (read_token_id(x, f, i, lim, &p->stop_ids[i], err))
            return -1;
        i++;
    }
    p->n_stop_ids = i;
    return 0;
}

/* logit_bias: {"id": bias}, the ids decimal without sign or leading zeros. */
static int read_logit_bias(const cJSON *v, const param_def *d, const proto_limits *lim,
                           req_params *p, proto_error *err)
{
    const char *f = "logit_bias";
    if (!cJSON_IsObject(v))
        return refuse(err, IFL_CODE_WRONG_TYPE, f,
                      "field '%s' must be an object of token id: bias, not %s", f, type_name(v));
    int n = 0;
    const cJSON *e;
    cJSON_ArrayForEach(e, v)
    {
        const char *k = e->string ? e->string : "";
        size_t len = strlen(k);
        int digits = len >= 1 && len <= 9 && strspn(k, "0123456789") == len &&
                     (len == 1 || k[0] != '0');
        long id = digits ? strtol(k, NULL, 10) : -1;
        if (!digits || id >= lim->n_vocab)
            return refuse(err, IFL_CODE_OUT_OF_RANGE, f,
                          "logit_bias key \"%.*s\" is not a token id (0 to %d)", clip_len(k), k,
                          lim->n_vocab - 1);
        if (n == IFL_MAX_LOGIT_BIAS)
            return refuse(err, IFL_CODE_OUT_OF_RANGE, f, "field '%s' has more than %d entries", f,
                          IFL_MAX_LOGIT_BIAS);
        if (!cJSON_IsNumber(e) || !isfinite(e->valuedouble) || e->valuedouble < d->lo ||
            e->valuedouble > d->hi)
            return refuse(err, cJSON_IsNumber(e) ? IFL_CODE_OUT_OF_RANGE : IFL_CODE_WRONG_TYPE, f,
                          "logit_bias[\"%s\"] must be a number from %g to %g", k, d->lo, d->hi);
        p->logit_bias[n++] = (ifl_logit_bias){.id = (int32_t)id, .bias = (float)e->valuedouble};
    }
    p->n_logit_bias = n;
    return 0;
}

/* One value parameter of row d, given as name. */
static int read_value(const cJSON *v, const param_def *d, const char *name, param_api api,
                      const proto_limits *lim, req_params *p, proto_error *err)
{
    char *field = (char *)p + d->off;
    double x;
    switch (d->type) {
    case PARAM_INT:
    case PARAM_OPT_INT:
        if (read_number(v, d, name, api, lim, &x, err))
            return -1;
        *(int32_t *)field = (int32_t)x;
        if (d->type == PARAM_OPT_INT)
            *(int *)((char *)p + d->has_off) = 1;
        return 0;
    case PARAM_NUM:
        if (read_number(v, d, name, api, lim, &x, err))
            return -1;
        *(double *)field = x;
        return 0;
    case PARAM_SEED:
        if (read_number(v, d, name, api, lim, &x, err))
            return -1;
        p->seed = (uint64_t)x;
        p->has_seed = 1;
        return 0;
    case PARAM_BOOL:
        if (!cJSON_IsBool(v))
            return refuse(err, IFL_CODE_WRONG_TYPE, name, "field '%s' must be a boolean, not %s",
                          name, type_name(v));
        *(int *)field = cJSON_IsTrue(v);
        return 0;
    case PARAM_STOP: return read_stop(v, api, p, err);
    case PARAM_TOKEN_IDS: return read_stop_ids(v, lim, p, err);
    case PARAM_LOGIT_BIAS: return read_logit_bias(v, d, lim, p, err);
    default: return 0; /* front-end and neutral fields: not values */
    }
}

/* The checks between fields, once each is in its range. */
static int cross_checks(param_api api, const req_params *p, proto_error *err)
{
    if (p->min_tokens > p->max_tokens)
        return refuse(err, IFL_CODE_OUT_OF_RANGE, "min_tokens",
                      "field 'min_tokens' is %d: must be at most max_tokens (%d)", p->min_tokens,
                      p->max_tokens);
    if (p->max_tokens == 0 && !p->echo)
        return refuse(err, IFL_CODE_OUT_OF_RANGE, "max_tokens",
                      "field 'max_tokens' is 0: allowed only with \"echo\": true (the prompt "
                      "scored alone)");
    if (p->max_tokens == 0 && p->n > 1)
        return refuse(err, IFL_CODE_OUT_OF_RANGE, "n",
                      "field 'n' is %d: max_tokens 0 scores the prompt once, so n must be 1",
                      p->n);
    if (api == PARAM_API_CHAT && p->logprobs > 0 && !p->want_logprobs)
        return refuse(err, IFL_CODE_INVALID_REQUEST, "top_logprobs",
                      "field 'top_logprobs' is %d: it needs \"logprobs\": true", p->logprobs);
    return 0;
}

void params_set_defaults(req_params *p, const proto_limits *lim)
{
    for (int i = 0; i < PARAMS_N; i++) {
        const param_def *d = &PARAMS[i];
        char *field = (char *)p + d->off;
        if (d->type == PARAM_INT)
            *(int32_t *)field = (int32_t)params_default(d, lim);
        else if (d->type == PARAM_OPT_INT)
            *(int32_t *)field = 0, *(int *)((char *)p + d->has_off) = 0;
        else if (d->type == PARAM_NUM)
            *(double *)field = params_default(d, lim);
        else if (d->type == PARAM_BOOL)
            *(int *)field = params_default(d, lim) != 0;
    }
}

int params_parse(const cJSON *obj, param_api api, const proto_limits *lim, req_params *p,
                 proto_error *err)
{
    params_set_defaults(p, lim);
    const cJSON *f;
    cJSON_ArrayForEach(f, obj)
    {
        const char *name = f->string ? f->string : "";
        const param_def *d = params_find(name, api);
        if (!d || (cJSON_IsNull(f) && ((api & PARAM_API_V1) || d->type == PARAM_OPT_INT)))
            continue; /* OpenAI: null is the default; an optional integer's null is none */
        if (strcmp(name, d->name) && cJSON_GetObjectItemCaseSensitive(obj, d->name))
            continue; /* an alias beside the name itself: the name wins */
        if (read_value(f, d, name, api, lim, p, err))
            return -1;
    }
    if (cross_checks(api, p, err))
        return -1;
    p->from = api;
    err->param[0] = 0;
    return 0;
}

