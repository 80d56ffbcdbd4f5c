/* params_write.c: the writers of the request-parameter table (params.h): the hello's "params" and
 * "defaults" (JSON for the page), a request's parameters for the log, and the docs' tables
 * (markdown). The table and its parser are params.c's. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "defaults.h"
#include "logit_adj.h"
#include "params.h"
#include "protocol.h" /* proto_limits, req_params: plain structs */

#define SEED_MAX 9007199254740991.0 /* 2^53 - 1: exact in a JSON number */

static const char *const TYPE_JSON[] = {
    [PARAM_INT] = "int",          [PARAM_NUM] = "number",        [PARAM_BOOL] = "bool",
    [PARAM_SEED] = "seed",        [PARAM_OPT_INT] = "int_or_none", [PARAM_STOP] = "strings",      [PARAM_TOKEN_IDS] = "token_ids",
    [PARAM_LOGIT_BIAS] = "logit_bias", [PARAM_FRONT] = "front", [PARAM_NEUTRAL] = "neutral",
};

/* A number for JSON: integers in full (2^53 - 1), others as the shortest of 9 digits. */
static void put_num(strbuf *sb, double x)
{
    if (x == floor(x) && fabs(x) <= SEED_MAX)
        sb_printf(sb, "%.0f", x);
    else
        sb_printf(sb, "%.9g", x);
}

/* The most items of a list parameter (0: not a list) and the bounds of its items. */
static int max_items(const param_def *d)
{
    return d->type == PARAM_STOP         ? IFL_MAX_STOPS
           : d->type == PARAM_TOKEN_IDS  ? IFL_MAX_STOP_IDS
           : d->type == PARAM_LOGIT_BIAS ? IFL_MAX_LOGIT_BIAS
                                         : 0;
}

void params_write_json(strbuf *sb, const proto_limits *lim)
{
    sb_puts(sb, "[");
    int first = 1;
    for (int i = 0; i < PARAMS_N; i++) {
        const param_def *d = &PARAMS[i];
        if (!params_is_value(d) || !(d->apis & PARAM_API_WS) || !d->label)
            continue; /* (not on the page: n, logprobs) */
        sb_printf(sb, "%s{\"name\":\"%s\",\"type\":\"%s\"", first ? "" : ",", d->name,
                  TYPE_JSON[d->type]);
        first = 0;
        double hi = d->type == PARAM_TOKEN_IDS ? lim->n_vocab - 1 : params_hi(d, lim);
        if (d->type != PARAM_BOOL && d->type != PARAM_STOP) {
            sb_puts(sb, ",\"min\":");
            put_num(sb, d->lo);
            sb_puts(sb, ",\"max\":");
            put_num(sb, hi);
        }
        if (d->lo_open)
            sb_puts(sb, ",\"min_open\":true");
        if (d->type == PARAM_INT || d->type == PARAM_NUM) {
            sb_puts(sb, ",\"default\":");
            put_num(sb, params_default(d, lim));
        } else if (d->type == PARAM_BOOL)
            sb_printf(sb, ",\"default\":%s", params_default(d, lim) ? "true" : "false");
        if (max_items(d))
            sb_printf(sb, ",\"max_items\":%d", max_items(d));
        if (d->type == PARAM_STOP)
            sb_printf(sb, ",\"max_bytes\":%d", IFL_MAX_STOP_BYTES);
        sb_puts(sb, ",\"label\":");
        sb_json_str(sb, d->label, strlen(d->label));
        sb_puts(sb, ",\"doc\":");
        sb_json_str(sb, d->doc, strlen(d->doc));
        sb_puts(sb, "}");
    }
    sb_puts(sb, "]");
}

void params_write_server_defaults(strbuf *sb, const proto_limits *lim)
{
    for (int i = 0; i < PARAMS_N; i++) {
        const param_def *d = &PARAMS[i];
        if (d->def_from == PARAM_FIXED)
            continue;
        sb_printf(sb, ",\"%s\":", d->name);
        if (d->type == PARAM_BOOL)
            sb_puts(sb, params_default(d, lim) ? "true" : "false");
        else
            put_num(sb, params_default(d, lim));
    }
}

void params_log_json(strbuf *sb, const req_params *p, uint64_t seed)
{
    sb_puts(sb, "{");
    for (int i = 0, first = 1; i < PARAMS_N; i++) {
        const param_def *d = &PARAMS[i];
        if (!params_is_value(d) || !(p->from ? (d->apis & p->from) != 0 : params_first_of_name(i)))
            continue;
        const char *field = (const char *)p + d->off;
        sb_printf(sb, "%s\"%s\":", first ? "" : ",", d->name);
        first = 0;
        switch (d->type) {
        case PARAM_INT: sb_printf(sb, "%d", (int)*(const int32_t *)field); break;
        case PARAM_OPT_INT:
            if (!*(const int *)((const char *)p + d->has_off))
                sb_puts(sb, "null");
            else
                sb_printf(sb, "%d", (int)*(const int32_t *)field);
            break;
        case PARAM_NUM: sb_printf(sb, "%.9g", *(const double *)field); break;
        case PARAM_BOOL: sb_puts(sb, *(const int *)field ? "true" : "false"); break;
        case PARAM_SEED: sb_printf(sb, "%llu", (unsigned long long)seed); break;
        case PARAM_STOP:
            sb_puts(sb, "[");
            for (int k = 0; k < p->n_stop; k++) {
                sb_puts(sb, k ? "," : "");
                sb_json_str(sb, p->stop[k], strlen(p->stop[k]));
            }
            sb_puts(sb, "]");
            break;
        case PARAM_TOKEN_IDS:
            sb_puts(sb, "[");
            for (int k = 0; k < p->n_stop_ids; k++)
                sb_printf(sb, "%s%d", k ? "," : "", (int)p->stop_ids[k]);
            sb_puts(sb, "]");
            break;
        case PARAM_LOGIT_BIAS:
            sb_puts(sb, "{");
            for (int k = 0; k < p->n_logit_bias; k++)
                sb_printf(sb, "%s\"%d\":%.9g", k ? "," : "", (int)p->logit_bias[k].id,
                          (double)p->logit_bias[k].bias);
            sb_puts(sb, "}");
            break;
        default: break;
        }
    }
    sb_puts(sb, "}");
}

/* The range column of a row, in words. */
static void md_range(strbuf *sb, const param_def *d, param_api api)
{
    const char *hi = d->hi_from == PARAM_FROM_MAX_TOKENS ? "the context - 1 (hello's `limits.max_tokens`)"
                     : d->hi_from == PARAM_FROM_VOCAB    ? "the vocabulary's size"
                                                         : NULL;
    switch (d->type) {
    case PARAM_INT:
    case PARAM_SEED:
        if (hi)
            sb_printf(sb, "integer, %g to %s", d->lo, hi);
        else
            sb_printf(sb, "integer, %.17g to %.17g", d->lo, d->hi);
        if (d->zero_apis & api)
            sb_puts(sb, "; 0 with `echo`");
        break;
    case PARAM_OPT_INT:
        if (hi)
            sb_printf(sb, "integer, %g to %s, or null", d->lo, hi);
        else
            sb_printf(sb, "integer, %g to %g, or null", d->lo, d->hi);
        break;
    case PARAM_NUM:
        sb_printf(sb, "number, %s %g, at most %g", d->lo_open ? "above" : "from", d->lo, d->hi);
        break;
    case PARAM_BOOL: sb_puts(sb, "boolean"); break;
    case PARAM_STOP:
        sb_printf(sb, "%sarray of up to %d strings of 1 to %d bytes",
                  api & PARAM_API_V1 ? "a string, or an " : "", IFL_MAX_STOPS, IFL_MAX_STOP_BYTES);
        break;
    case PARAM_TOKEN_IDS:
        sb_printf(sb, "array of up to %d token ids", IFL_MAX_STOP_IDS);
        break;
    case PARAM_LOGIT_BIAS:
        sb_printf(sb, "object of up to %d token ids (as strings): a number from %g to %g",
                  IFL_MAX_LOGIT_BIAS, d->lo, d->hi);
        break;
    case PARAM_FRONT: sb_puts(sb, "see below"); break;
    case PARAM_NEUTRAL: sb_printf(sb, "only %s", params_neutral_text(d->neutral)); break;
    }
}

static void md_default(strbuf *sb, const param_def *d)
{
    switch (d->def_from) {
    case PARAM_FROM_DEF_MAX_TOKENS:
        sb_printf(sb, "%d (`serve --max-tokens`)", IFL_DEFAULT_MAX_NEW_TOKENS);
        return;
    case PARAM_FROM_DEF_TEMPERATURE:
        sb_printf(sb, "%g (`serve --temperature`)", IFL_DEFAULT_TEMPERATURE);
        return;
    case PARAM_FROM_DEF_TOP_K: sb_printf(sb, "%d (`serve --top-k`)", IFL_DEFAULT_TOP_K); return;
    case PARAM_FROM_DEF_TOP_P: sb_printf(sb, "%g (`serve --top-p`)", IFL_DEFAULT_TOP_P); return;
    case PARAM_FROM_DEF_TRUNCATE: sb_puts(sb, "true (`serve --trim`)"); return;
    default: break;
    }
    if (d->type == PARAM_INT || d->type == PARAM_NUM)
        sb_printf(sb, "%g", d->def);
    else if (d->type == PARAM_BOOL)
        sb_puts(sb, d->def ? "true" : "false");
    else if (d->type == PARAM_SEED)
        sb_puts(sb, "drawn by the server");
    else if (d->type == PARAM_OPT_INT)
        sb_puts(sb, "none");
    else
        sb_puts(sb, d->type == PARAM_FRONT || d->type == PARAM_NEUTRAL ? "" : "none");
}

/* "chat ", "completions ", ... (a row known to some of the APIs of one table). */
static const char *api_words(unsigned apis)
{
    return apis == PARAM_API_CHAT          ? "chat: "
           : apis == PARAM_API_COMPLETIONS ? "completions: "
           : apis == PARAM_API_WS          ? "/ws: "
           : apis == PARAM_API_V2          ? "/v2: "
                                           : "";
}

void params_write_markdown(strbuf *sb, param_api api)
{
    sb_puts(sb, "| field | accepts | default | what it does |\n|---|---|---|---|\n");
    for (int i = 0; i < PARAMS_N; i++) {
        const param_def *d = &PARAMS[i];
        if (!(d->apis & api) || d->type == PARAM_FRONT)
            continue;
        sb_printf(sb, "| `%s`", d->name);
        if (d->alias && (d->alias_apis & api))
            sb_printf(sb, " (%sor `%s`)", d->alias_apis == api ? "" : api_words(d->alias_apis),
                      d->alias);
        if ((d->apis & api) != api)
            sb_printf(sb, " (%.*s only)", (int)strlen(api_words(d->apis & api)) - 2,
                      api_words(d->apis & api));
        sb_puts(sb, " | ");
        md_range(sb, d, api);
        sb_puts(sb, " | ");
        md_default(sb, d);
        sb_printf(sb, " | %s |\n", d->doc);
    }
}
