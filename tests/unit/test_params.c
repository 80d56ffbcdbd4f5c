/* test_params.c: walks the request-parameter table (server/params.h) and checks that every front
 * end, the request log, the hello frame and the docs agree with it:
 *   - each value parameter on each API that knows it (/ws through proto_parse, /v1 completions and
 *     chat through openai_parse, /v2 through triton_parse, at the top level and under
 *     "parameters"): a value inside its range reaches req_params (read back through the log's
 *     JSON, params_log_json), a value past either bound is out_of_range and a value of the wrong
 *     JSON type wrong_type, each naming the field;
 *   - each OpenAI field the server does not implement: its neutral values pass, another value is
 *     unsupported_field naming it;
 *   - every field of the table sent to an API that does not know it is unknown_field;
 *   - the log writes every value parameter, the hello's "params" lists /ws's in the table's order;
 *   - each `<!-- params:API -->` block of the docs given is params_write_markdown's table.
 * Usage: test_params [--write] DOC.md...   (--write: rewrite the blocks instead of checking) */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "chat_template.h"
#include "http_api.h"
#include "params.h"
#include "protocol.h"
#include "testutil.h"
#include "utf8.h"

static const proto_limits LIM = {.max_tokens = 255,
                                 .n_vocab = 50257,
                                 .def_max_tokens = 16,
                                 .def_temperature = 0.8,
                                 .def_top_k = 40,
                                 .def_top_p = 0.95};

static const param_api APIS[] = {PARAM_API_WS, PARAM_API_COMPLETIONS, PARAM_API_CHAT,
                                 PARAM_API_V2};
static const char *const API_NAMES[] = {"ws", "completions", "chat", "v2"};

/* What one front end made of a request: rc, the params, the error. */
typedef struct {
    int rc;
    req_params p;
    proto_error e;
} outcome;

/* A request of api with `"NAME": VALUE` added (in_params: under /v2's "parameters"), parsed by
 * that API's own parser. */
static outcome parse_with(param_api api, const char *name, const char *value, int in_params)
{
    static const char *const base[] = {
        "{\"type\":\"generate\",\"id\":\"t\",\"prompt\":\"x\"",
        "{\"model\":\"iterative\",\"prompt\":\"x\"",
        "{\"model\":\"iterative\",\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]",
        "{\"text_input\":\"x\"",
    };
    int k = api == PARAM_API_WS ? 0 : api == PARAM_API_COMPLETIONS ? 1 : api == PARAM_API_CHAT ? 2 : 3;
    char text[4096];
    /* chat's top_logprobs needs logprobs true beside it (params_parse's cross-field check) */
    const char *with = api == PARAM_API_CHAT && !strcmp(name, "top_logprobs")
                           ? ",\"logprobs\":true"
                           : "";
    snprintf(text, sizeof text,
             in_params ? "%s%s,\"parameters\":{\"%s\":%s}}" : "%s%s,\"%s\":%s}", base[k], with,
             name, value);
    outcome o;
    memset(&o, 0, sizeof o);
    if (api == PARAM_API_WS) {
        proto_msg m;
        o.rc = proto_parse(text, strlen(text), &LIM, &m, &o.e);
        o.p = m.gen;
        m.gen.prompt = NULL;
        proto_msg_free(&m); /* and its chat */
        free(o.p.prompt);
        o.p.prompt = NULL;
        o.p.chat = NULL;
        return o;
    }
    cJSON *root = proto_parse_json_object(text, strlen(text), &o.e);
    CHECKF(root != NULL, "%s: not JSON: %s", text, o.e.message);
    if (!root) {
        o.rc = -1;
        return o;
    }
    http_req_info ri;
    memset(&ri, 0, sizeof ri);
    ri.api = k == 1 ? HTTP_API_COMPLETIONS : k == 2 ? HTTP_API_CHAT : HTTP_API_TRITON;
    o.rc = k == 3 ? triton_parse(root, &LIM, &ri, &o.p, &o.e)
                  : openai_parse(root, &LIM, "gpt2", &ri, &o.p, &o.e);
    cJSON_Delete(root);
    free(o.p.prompt);
    free(o.p.prompt_ids);
    req_chat_free(o.p.chat);
    o.p.chat = NULL;
    o.p.prompt = NULL;
    o.p.prompt_ids = NULL;
    return o;
}

static void expect_refused(param_api api, const char *name, const char *value, int in_params,
                           ifl_code code, const char *api_name)
{
    outcome o = parse_with(api, name, value, in_params);
    CHECKF(o.rc == -1 && o.e.code == code && !strcmp(o.e.param, name),
           "%s%s: %s = %s: want %s naming it, got rc %d %s param '%s' (%s)", api_name,
           in_params ? " (parameters)" : "", name, value, ifl_code_name(code), o.rc,
           ifl_code_name(o.e.code), o.e.param, o.e.message);
}

/* A value inside d's range, one past each bound (NULL: none), one of the wrong type. */
typedef struct {
    char ok[64], above[64], below[64], wrong[16];
} samples;

static samples samples_of(const param_def *d)
{
    samples s = {.wrong = "\"x\""};
    double hi = d->type == PARAM_TOKEN_IDS ? LIM.n_vocab - 1 : params_hi(d, &LIM);
    switch (d->type) {
    case PARAM_INT:
    case PARAM_OPT_INT:
    case PARAM_SEED:
        snprintf(s.ok, sizeof s.ok, "%.0f", d->lo + 1);
        snprintf(s.above, sizeof s.above, "%.0f", hi + 1);
        snprintf(s.below, sizeof s.below, "%.0f", d->lo - 1);
        break;
    case PARAM_NUM:
        snprintf(s.ok, sizeof s.ok, "%g", (d->lo + hi) / 2);
        snprintf(s.above, sizeof s.above, "%g", hi + 0.5);
        snprintf(s.below, sizeof s.below, "%g", d->lo_open ? d->lo : d->lo - 0.5);
        break;
    case PARAM_BOOL:
        strcpy(s.ok, "true");
        strcpy(s.wrong, "1");
        break;
    case PARAM_STOP:
        strcpy(s.ok, "[\"ab\",\"c\"]");
        strcpy(s.above, "[\"a\",\"b\",\"c\",\"d\",\"e\"]");
        strcpy(s.wrong, "7");
        break;
    case PARAM_TOKEN_IDS:
        strcpy(s.ok, "[3,50256]");
        snprintf(s.above, sizeof s.above, "[%.0f]", hi + 1);
        strcpy(s.below, "[-1]");
        break;
    case PARAM_LOGIT_BIAS:
        snprintf(s.ok, sizeof s.ok, "{\"5\":%g,\"50256\":%g}", d->lo, d->hi / 4);
        snprintf(s.above, sizeof s.above, "{\"5\":%g}", d->hi + 1);
        snprintf(s.below, sizeof s.below, "{\"5\":%g}", d->lo - 1);
        strcpy(s.wrong, "[]");
        break;
    default: break;
    }
    return s;
}

/* The value a parse left in p, as the log writes it, equals sent. */
static void expect_logged(const req_params *p, const param_def *d, const char *sent,
                          const char *where)
{
    strbuf sb;
    sb_init(&sb, 0);
    params_log_json(&sb, p, p->seed);
    cJSON *log = cJSON_Parse(sb_text(&sb));
    cJSON *want = cJSON_Parse(sent);
    const cJSON *got = cJSON_GetObjectItemCaseSensitive(log, d->name);
    CHECKF(log && want && got && cJSON_Compare(got, want, 1), "%s: %s = %s: the log has %s", where,
           d->name, sent, got ? cJSON_PrintUnformatted(got) : "nothing");
    cJSON_Delete(log);
    cJSON_Delete(want);
    sb_free(&sb);
}

static int n_value_checks, n_neutral_checks, n_unknown_checks;

static void walk_value(const param_def *d, param_api api, const char *api_name, int in_params)
{
    samples s = samples_of(d);
    char where[64];
    snprintf(where, sizeof where, "%s%s", api_name, in_params ? " (parameters)" : "");
    const char *name = params_name_in(d, api);
    outcome o = parse_with(api, name, s.ok, in_params);
    CHECKF(o.rc == 0, "%s: %s = %s refused: %s", where, name, s.ok, o.e.message);
    if (o.rc == 0 && api == PARAM_API_CHAT && d->type == PARAM_STOP) /* + the template's stop */
        expect_logged(&o.p, d, "[\"ab\",\"c\",\"\\nUser:\"]", where);
    else if (o.rc == 0)
        expect_logged(&o.p, d, s.ok, where);
    if (s.above[0])
        expect_refused(api, name, s.above, in_params, IFL_CODE_OUT_OF_RANGE, where);
    if (s.below[0])
        expect_refused(api, name, s.below, in_params, IFL_CODE_OUT_OF_RANGE, where);
    expect_refused(api, name, s.wrong, in_params, IFL_CODE_WRONG_TYPE, where);
    n_value_checks++;
}

/* Neutral values of each kind, then one that is not (separated by '|'). */
static const char *const NEUTRAL_SAMPLES[] = {
    [PARAM_NEUTRAL_NULL_FALSE] = "null|false||true",
    [PARAM_NEUTRAL_NULL_ONE] = "null|1||2",
    [PARAM_NEUTRAL_NULL_ZERO] = "null|0||3",
    [PARAM_NEUTRAL_NULL_EMPTY_STRING] = "null|\"\"||\"x\"",
    [PARAM_NEUTRAL_NULL_EMPTY_ARRAY] = "null|[]||[1]",
    [PARAM_NEUTRAL_NULL_NONE] = "null|\"none\"||\"auto\"",
    [PARAM_NEUTRAL_TEXT_FORMAT] = "null|{\"type\":\"text\"}||{\"type\":\"json_object\"}",
    [PARAM_NEUTRAL_TEXT_MODALITY] = "null|[\"text\"]||[\"audio\"]",
    [PARAM_NEUTRAL_ANY_BOOL] = "null|true|false||\"yes\"",
    [PARAM_NEUTRAL_ANY_STRING] = "null|\"x\"||1",
    [PARAM_NEUTRAL_ANY_OBJECT] = "null|{}|{\"a\":\"b\"}||[]",
};

static void walk_neutral(const param_def *d, param_api api, const char *api_name)
{
    char buf[128];
    snprintf(buf, sizeof buf, "%s", NEUTRAL_SAMPLES[d->neutral]);
    char *bad = strstr(buf, "||");
    CHECK(bad != NULL);
    if (!bad)
        return;
    *bad = 0;
    bad += 2;
    for (char *v = strtok(buf, "|"); v; v = strtok(NULL, "|")) {
        outcome o = parse_with(api, d->name, v, 0);
        CHECKF(o.rc == 0, "%s: %s = %s (neutral) refused: %s", api_name, d->name, v, o.e.message);
    }
    expect_refused(api, d->name, bad, 0, IFL_CODE_UNSUPPORTED_FIELD, api_name);
    n_neutral_checks++;
}

static void walk_table(void)
{
    for (int i = 0; i < PARAMS_N; i++) {
        const param_def *d = &PARAMS[i];
        for (size_t a = 0; a < sizeof APIS / sizeof APIS[0]; a++) {
            param_api api = APIS[a];
            if (!(d->apis & api)) {
                if (!params_find(d->name, api)) {
                    expect_refused(api, d->name, "1", 0, IFL_CODE_UNKNOWN_FIELD, API_NAMES[a]);
                    n_unknown_checks++;
                }
                continue;
            }
            if (d->type == PARAM_NEUTRAL) {
                walk_neutral(d, api, API_NAMES[a]);
            } else if (d->type == PARAM_FRONT) {
                if (api == PARAM_API_V2) /* the front end's own fields are not parameters */
                    expect_refused(api, d->name, "1", 1, IFL_CODE_UNKNOWN_FIELD, "v2 parameters");
            } else {
                walk_value(d, api, API_NAMES[a], 0);
                if (api == PARAM_API_V2)
                    walk_value(d, api, API_NAMES[a], 1);
                if (d->alias && (d->alias_apis & api))
                    walk_value(d, api, API_NAMES[a], 0); /* params_name_in: the alias */
            }
        }
    }
    /* the alias: max_completion_tokens on chat, refused elsewhere; max_tokens wins beside it */
    outcome o = parse_with(PARAM_API_CHAT, "max_completion_tokens", "7,\"max_tokens\":5", 0);
    CHECKF(o.rc == 0 && o.p.max_tokens == 5, "chat: max_tokens beside max_completion_tokens: %d",
           o.p.max_tokens);
    expect_refused(PARAM_API_COMPLETIONS, "max_completion_tokens", "7", 0, IFL_CODE_UNKNOWN_FIELD,
                   "completions");
    /* the cross-field check and OpenAI's null (the default) */
    expect_refused(PARAM_API_WS, "min_tokens", "17", 0, IFL_CODE_OUT_OF_RANGE, "ws");
    o = parse_with(PARAM_API_COMPLETIONS, "temperature", "null", 0);
    CHECKF(o.rc == 0 && o.p.temperature == LIM.def_temperature, "completions: null temperature");
    expect_refused(PARAM_API_WS, "temperature", "null", 0, IFL_CODE_WRONG_TYPE, "ws");
    /* scoring: max_tokens 0 only with echo (and n 1), top_logprobs only with logprobs */
    o = parse_with(PARAM_API_COMPLETIONS, "max_tokens", "0,\"echo\":true,\"logprobs\":2", 0);
    CHECKF(o.rc == 0 && o.p.max_tokens == 0 && o.p.echo && req_logprobs(&o.p) == 2,
           "completions: max_tokens 0 with echo: %s", o.e.message);
    expect_refused(PARAM_API_COMPLETIONS, "max_tokens", "0", 0, IFL_CODE_OUT_OF_RANGE,
                   "completions");
    expect_refused(PARAM_API_WS, "max_tokens", "0", 0, IFL_CODE_OUT_OF_RANGE, "ws");
    expect_refused(PARAM_API_COMPLETIONS, "n", "2,\"echo\":true,\"max_tokens\":0", 0,
                   IFL_CODE_OUT_OF_RANGE, "completions");
    o = parse_with(PARAM_API_CHAT, "logprobs", "false", 0);
    CHECKF(o.rc == 0 && req_logprobs(&o.p) == -1, "chat: logprobs false");
    o = parse_with(PARAM_API_COMPLETIONS, "logprobs", "null", 0);
    CHECKF(o.rc == 0 && req_logprobs(&o.p) == -1, "completions: logprobs null");
    o = parse_with(PARAM_API_COMPLETIONS, "logprobs", "0", 0);
    CHECKF(o.rc == 0 && req_logprobs(&o.p) == 0, "completions: logprobs 0 is the tokens' own");
    o = parse_with(PARAM_API_CHAT, "top_logprobs", "0", 0); /* (with logprobs true) */
    CHECKF(o.rc == 0 && req_logprobs(&o.p) == 0, "chat: logprobs true, top_logprobs 0");
    o = parse_with(PARAM_API_CHAT, "seed", "1", 0);
    CHECKF(o.rc == 0 && req_logprobs(&o.p) == -1, "chat: no logprobs by default");
    {
        outcome t = {0};
        const char *body = "{\"model\":\"iterative\",\"messages\":[{\"role\":\"user\","
                           "\"content\":\"x\"}],\"top_logprobs\":3}";
        cJSON *root = proto_parse_json_object(body, strlen(body), &t.e);
        http_req_info ri = {.api = HTTP_API_CHAT};
        t.rc = openai_parse(root, &LIM, "gpt2", &ri, &t.p, &t.e);
        CHECKF(t.rc == -1 && t.e.code == IFL_CODE_INVALID_REQUEST &&
                   !strcmp(t.e.param, "top_logprobs"),
               "chat: top_logprobs without logprobs: rc %d %s", t.rc, t.e.message);
        free(t.p.prompt);
        req_chat_free(t.p.chat);
        cJSON_Delete(root);
    }
    /* an unknown name longer than the error's param: cut at a character, never inside one (the
     * fuzz targets found "é" x 30 cut after 47 bytes) */
    char name[128] = "";
    for (int i = 0; i < 30; i++)
        strcat(name, "\xc3\xa9");
    o = parse_with(PARAM_API_WS, name, "1", 0);
    CHECKF(o.rc == -1 && o.e.code == IFL_CODE_UNKNOWN_FIELD && strlen(o.e.param) == 46 &&
               ifl_utf8_valid(o.e.param, strlen(o.e.param)),
           "a long multibyte unknown name: param of %zu bytes", strlen(o.e.param));
}

/* The log writes every value parameter; the hello lists /ws's, in the table's order. */
static void check_log_and_hello(void)
{
    req_params p;
    memset(&p, 0, sizeof p);
    params_set_defaults(&p, &LIM);
    strbuf sb;
    sb_init(&sb, 0);
    params_log_json(&sb, &p, 9);
    cJSON *log = cJSON_Parse(sb_text(&sb));
    sb_free(&sb);
    sb_init(&sb, 0);
    params_write_json(&sb, &LIM);
    cJSON *hello = cJSON_Parse(sb_text(&sb));
    sb_free(&sb);
    CHECK(log && cJSON_IsArray(hello));
    const cJSON *h = hello ? hello->child : NULL;
    int n_values = 0;
    for (int i = 0; i < PARAMS_N; i++) {
        const param_def *d = &PARAMS[i];
        if (!params_is_value(d) || !params_first_of_name(i))
            continue;
        n_values++;
        CHECKF(cJSON_GetObjectItemCaseSensitive(log, d->name), "the log lacks %s", d->name);
        if (!d->label || !(d->apis & PARAM_API_WS))
            continue; /* not on the page (n, logprobs): not in the hello's table */
        const cJSON *name = cJSON_GetObjectItemCaseSensitive(h, "name");
        CHECKF(h && cJSON_IsString(name) && !strcmp(name->valuestring, d->name),
               "hello params: %s out of place", d->name);
        if (h && (d->type == PARAM_INT || d->type == PARAM_NUM)) {
            const cJSON *def = cJSON_GetObjectItemCaseSensitive(h, "default");
            CHECKF(cJSON_IsNumber(def) && def->valuedouble == params_default(d, &LIM),
                   "hello params: %s's default", d->name);
        }
        h = h ? h->next : NULL;
    }
    CHECKF(cJSON_GetArraySize(log) == n_values, "the log has %d members, the table %d values",
           cJSON_GetArraySize(log), n_values);
    CHECK(h == NULL);
    cJSON_Delete(log);
    cJSON_Delete(hello);
}

static char *read_file(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    strbuf sb;
    sb_init(&sb, 0);
    char buf[4096];
    size_t n;
    while ((n = fread(buf, 1, sizeof buf, f)) > 0)
        sb_append(&sb, buf, n);
    fclose(f);
    return sb_steal(&sb);
}

/* Each block of a doc: checked against the table's markdown, or (write) rewritten. Returns the
 * number of blocks. */
static int check_doc(const char *path, int write)
{
    char *text = read_file(path);
    CHECKF(text != NULL, "cannot read %s", path);
    if (!text)
        return 0;
    strbuf out;
    sb_init(&out, 0);
    int n = 0;
    const char *p = text, *open;
    while ((open = strstr(p, "<!-- params:"))) {
        const char *name = open + 12, *eol = strstr(open, "-->\n"),
                   *close = strstr(open, "<!-- /params -->");
        CHECKF(eol && close && close > eol, "%s: a params block is not closed", path);
        if (!eol || !close || close < eol)
            break;
        param_api api = !strncmp(name, "ws ", 3)   ? PARAM_API_WS
                        : !strncmp(name, "v1 ", 3) ? PARAM_API_V1
                        : !strncmp(name, "v2 ", 3) ? PARAM_API_V2
                                                   : 0;
        CHECKF(api != 0, "%s: unknown params block %.10s", path, name);
        strbuf want;
        sb_init(&want, 0);
        params_write_markdown(&want, api);
        const char *body = eol + 4;
        CHECKF(write || ((size_t)(close - body) == want.len && !memcmp(body, sb_text(&want), want.len)),
               "%s: the params:%.2s table differs from the parameter table's (test_params "
               "--write %s rewrites it)",
               path, name, path);
        sb_append(&out, p, (size_t)(body - p));
        sb_append(&out, sb_text(&want), want.len);
        sb_free(&want);
        p = close;
        n++;
    }
    sb_puts(&out, p);
    if (write) {
        FILE *f = fopen(path, "wb");
        CHECK(f && fwrite(sb_text(&out), 1, out.len, f) == out.len);
        if (f)
            fclose(f);
    }
    sb_free(&out);
    free(text);
    return n;
}

int main(int argc, char **argv)
{
    int write = argc > 1 && !strcmp(argv[1], "--write");
    walk_table();
    check_log_and_hello();
    int blocks = 0;
    for (int i = 1 + write; i < argc; i++)
        blocks += check_doc(argv[i], write);
    CHECKF(argc <= 1 + write || blocks >= 3, "%d params blocks in the docs: want /ws, /v1, /v2",
           blocks);
    printf("test_params: %d parameters: %d value checks, %d neutral, %d unknown-field, %d doc "
           "tables\n",
           PARAMS_N, n_value_checks, n_neutral_checks, n_unknown_checks, blocks);
    if (test_failures) {
        fprintf(stderr, "test_params: %d check(s) failed\n", test_failures);
        return 1;
    }
    printf("test_params: ok\n");
    return 0;
}
