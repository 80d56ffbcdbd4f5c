/* test_protocol.c: the client-message parser of the WebSocket protocol (server/protocol.c): every
 * documented error code from the message that causes it, the id carried into errors, defaults and
 * ranges, that well-formed messages parse to the right values, the chat template of `messages`
 * (chat_template.h) rendered exactly, and duplicate keys refused at any depth. */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <string.h>

#include "protocol.h"
#include "testutil.h"

static const proto_limits LIM = {.max_tokens = 255,
                                 .n_vocab = 50257,
                                 .def_max_tokens = 64,
                                 .def_temperature = 0.8,
                                 .def_top_p = 0.95,
                                 .def_top_k = 40};

static int failures;

/* Expects `json` to be refused with `code`; `want_id` (or NULL) is the id the error must carry. */
static void expect_error(const char *json, const char *code, const char *want_id)
{
    proto_msg m;
    proto_error e;
    int rc = proto_parse(json, strlen(json), &LIM, &m, &e);
    int ok = rc == -1 && !strcmp(ifl_code_name(e.code), code) && e.message[0] &&
             (want_id ? e.has_id && !strcmp(e.id, want_id) : !e.has_id);
    if (!ok) {
        fprintf(stderr, "FAIL %s: want %s (id %s), got rc %d code %s id %s: %s\n", json, code,
                want_id ? want_id : "none", rc, rc ? ifl_code_name(e.code) : "-",
                e.has_id ? e.id : "none", e.message);
        failures++;
    } else {
        printf("  %-16s <- %.60s : %s\n", code, json, e.message);
    }
    proto_msg_free(&m);
}

/* `len` bytes of `json` (raw NULs included) refused as invalid_json naming `want` in its message.
 */
static void expect_raw(const char *json, size_t len, const char *want)
{
    proto_msg m;
    proto_error e;
    int rc = proto_parse(json, len, &LIM, &m, &e);
    if (rc != -1 || e.code != IFL_CODE_INVALID_JSON || !strstr(e.message, want)) {
        fprintf(stderr, "FAIL raw %zu bytes: want invalid_json with \"%s\", got rc %d %s: %s\n",
                len, want, rc, rc ? ifl_code_name(e.code) : "-", rc ? e.message : "");
        failures++;
    } else {
        printf("  invalid_json     <- %zu raw bytes : %s\n", len, e.message);
    }
    proto_msg_free(&m);
}

/* Raw control characters, which JSON forbids inside strings and cJSON would take (a NUL cut the
 * string it was in), a NUL after the value, and \u escapes that are not four hex digits: each
 * refused with the byte it is at. */
static void raw_controls(void)
{
    static const char cut[] = "{\"type\":\"generate\",\"id\":\"a\",\"prompt\":\"abc\0def\"}";
    expect_raw(cut, sizeof cut - 1, "raw control character 0x00 inside a string at byte 41");
    static const char key[] =
        "{\"type\":\"generate\",\"id\":\"a\",\"prompt\":\"x\",\"max_tokens\0zz\":3}";
    expect_raw(key, sizeof key - 1, "0x00 inside a string at byte 52");
    static const char after[] = "{\"type\":\"ping\"}\0garbage";
    expect_raw(after, sizeof after - 1, "a NUL byte at byte 15");
    static const char tab[] = "{\"type\":\"generate\",\"id\":\"a\",\"prompt\":\"a\tb\"}";
    expect_raw(tab, sizeof tab - 1, "0x09 inside a string at byte 39");
    static const char nl[] = "{\"type\":\"generate\",\"id\":\"a\",\"prompt\":\"a\\\nb\"}";
    expect_raw(nl, sizeof nl - 1,
               "0x0a inside a string at byte 40"); /* a backslash does not excuse it */
    /* whitespace between tokens is not in a string: fine; escaped controls are fine */
    static const char ok[] =
        "{\n\t\"type\":\"generate\",\"id\":\"a\",\r\n\"prompt\":\"a\\tb\\nc\"}";
    proto_msg m;
    proto_error e;
    if (proto_parse(ok, sizeof ok - 1, &LIM, &m, &e) != 0 || !m.gen.prompt ||
        strcmp(m.gen.prompt, "a\tb\nc")) {
        fprintf(stderr, "FAIL whitespace and escapes: %s\n", e.message);
        failures++;
    }
    proto_msg_free(&m);
    /* a \u escape without four hex digits: cJSON reads it as U+0000, which cut the string
     * ("max_tokens\u00zz" was read as max_tokens); a good one still passes */
    static const char bad_u[] =
        "{\"type\":\"generate\",\"id\":\"a\",\"prompt\":\"Tell me\\uzzzz more\"}";
    expect_raw(bad_u, sizeof bad_u - 1, "the \\u escape at byte 45 is not followed by four hex");
    static const char bad_key[] =
        "{\"type\":\"generate\",\"id\":\"a\",\"prompt\":\"x\",\"max_tokens\\u00zz\":5}";
    expect_raw(bad_key, sizeof bad_key - 1, "\\u escape at byte 52");
    static const char good_u[] =
        "{\"type\":\"generate\",\"id\":\"a\",\"prompt\":\"\\u00e9t\\u00E9\"}";
    if (proto_parse(good_u, sizeof good_u - 1, &LIM, &m, &e) != 0 || !m.gen.prompt ||
        strcmp(m.gen.prompt, "\xc3\xa9t\xc3\xa9")) {
        fprintf(stderr, "FAIL \\u00e9 escapes: %s\n", e.message);
        failures++;
    }
    proto_msg_free(&m);
}

/* A generate with messages (the JSON of the array) parses, and renders to want with the chat
 * stop string last among n_stop stops. */
static void expect_chat(const char *messages, const char *extra, const char *want, int n_stop)
{
    char json[2048];
    snprintf(json, sizeof json, "{\"type\":\"generate\",\"id\":\"c\",\"messages\":%s%s}", messages,
             extra);
    proto_msg m;
    proto_error e;
    int rc = proto_parse(json, strlen(json), &LIM, &m, &e);
    CHECKF(rc == 0, "%s: refused: %s", json, e.message);
    if (rc == 0) {
        CHECKF(!strcmp(m.gen.prompt, want) && m.gen.prompt_len == strlen(want),
               "%s: rendered \"%s\", expected \"%s\"", json, m.gen.prompt, want);
        CHECKF(m.gen.n_stop == n_stop && !strcmp(m.gen.stop[n_stop - 1], "\nUser:"),
               "%s: %d stops, the last \"%s\"", json, m.gen.n_stop,
               m.gen.n_stop ? m.gen.stop[m.gen.n_stop - 1] : "");
    }
    proto_msg_free(&m);
}

static void chat_and_conversations(void)
{
    expect_chat("[{\"role\":\"user\",\"content\":\"Hi\"}]", "", "User: Hi\nAssistant:", 1);
    /* a reply's leading space is not doubled; system and developer are System */
    expect_chat(
        "[{\"role\":\"system\",\"content\":\"Be brief.\"},{\"role\":\"user\",\"content\":"
        "\"Tell me about the sea.\"},{\"role\":\"assistant\",\"content\":\" The sea is big."
        "\"},{\"role\":\"developer\",\"content\":[{\"type\":\"text\",\"text\":\"Short.\"}]},"
        "{\"role\":\"user\",\"content\":\"And the sky?\"}]",
        ",\"conversation\":\"c-7f3a_9\"",
        "System: Be brief.\nUser: Tell me about the sea.\nAssistant: The sea is big.\n"
        "System: Short.\nUser: And the sky?\nAssistant:",
        1);
    /* the stop string joins the client's, once */
    expect_chat("[{\"role\":\"user\",\"content\":\"Hi\"}]", ",\"stop\":[\"\\n\\n\"]",
                "User: Hi\nAssistant:", 2);
    expect_chat("[{\"role\":\"user\",\"content\":\"Hi\"}]", ",\"stop\":[\"\\nUser:\"]",
                "User: Hi\nAssistant:", 1);
    const char *g = "{\"type\":\"generate\",\"id\":\"c\",";
    char json[512];
    static const char *const bad[][2] = {
        {"\"prompt\":\"x\",\"messages\":[{\"role\":\"user\",\"content\":\"Hi\"}]",
         "invalid_message"},
        {"\"messages\":[]", "wrong_type"},
        {"\"messages\":\"Hi\"", "wrong_type"},
        {"\"messages\":[{\"role\":\"robot\",\"content\":\"Hi\"}]", "out_of_range"},
        {"\"messages\":[{\"role\":\"user\",\"content\":7}]", "wrong_type"},
        {"\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"image\"}]}]", "wrong_type"},
        {"\"prompt\":\"x\",\"conversation\":\"\"", "out_of_range"},
        {"\"prompt\":\"x\",\"conversation\":\"a b\"", "out_of_range"},
        {"\"prompt\":\"x\",\"conversation\":\"x/../y\"", "out_of_range"},
        {"\"prompt\":\"x\",\"conversation\":7", "wrong_type"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        snprintf(json, sizeof json, "%s%s}", g, bad[i][0]);
        expect_error(json, bad[i][1], "c");
    }
    char conv[80];
    memset(conv, 'k', 65);
    conv[65] = 0;
    snprintf(json, sizeof json, "%s\"prompt\":\"x\",\"conversation\":\"%s\"}", g, conv);
    expect_error(json, "out_of_range", "c"); /* 65 characters */
    conv[64] = 0;
    snprintf(json, sizeof json, "%s\"prompt\":\"x\",\"conversation\":\"%s\"}", g, conv);
    proto_msg m;
    proto_error e;
    CHECK(proto_parse(json, strlen(json), &LIM, &m, &e) == 0 && !strcmp(m.gen.conversation, conv) &&
          m.gen.n_stop == 0);
    proto_msg_free(&m);
}

/* proto_parse_json_object on text: NULL want means it must parse; else refused as invalid_message
 * whose message holds want and whose param is the key. */
static void expect_object(const char *text, const char *want, const char *param)
{
    proto_error e;
    memset(&e, 0, sizeof e);
    struct cJSON *root = proto_parse_json_object(text, strlen(text), &e);
    int ok = want ? !root && e.code == IFL_CODE_INVALID_MESSAGE && strstr(e.message, want) &&
                        !strcmp(e.param, param)
                  : root != NULL;
    if (!ok) {
        fprintf(stderr, "FAIL %.80s: want %s, got %s (%s, param %s)\n", text, want ? want : "ok",
                root ? "ok" : "refused", e.message, e.param);
        failures++;
    }
    cJSON_Delete(root);
}

/* An object, at any depth, with two members of one name is refused naming the key (cJSON keeps
 * both); the same name in two objects is not a duplicate; 5,000 keys are checked by a sort. */
static void duplicate_keys(void)
{
    expect_object("{\"a\":1,\"b\":2,\"a\":3}", "duplicate key \"a\"", "a");
    expect_object("{\"m\":[{\"role\":\"u\",\"x\":1,\"role\":\"v\"}]}", "duplicate key \"role\"",
                  "role");
    expect_object("{\"a\":{\"b\":{\"c\":[[{\"d\":1,\"d\":1}]]}}}", "duplicate key \"d\"", "d");
    /* the same name, escaped */
    expect_object("{\"a\":1,\"\\u0061\":2}", "duplicate key \"a\"", "a");
    expect_object("{\"a\":{\"x\":1},\"b\":{\"x\":2},\"c\":[{\"x\":1},{\"x\":2}]}", NULL, NULL);
    expect_object("{\"A\":1,\"a\":2}", NULL, NULL); /* names are case-sensitive */
    static char big[80000];
    size_t n = 0;
    big[n++] = '{';
    for (int i = 0; i < 5000; i++)
        n += (size_t)snprintf(big + n, sizeof big - n, "%s\"k%04d\":%d", i ? "," : "", i, i);
    snprintf(big + n, sizeof big - n, "}");
    expect_object(big, NULL, NULL);
    snprintf(big + n, sizeof big - n, ",\"k2500\":0}");
    expect_object(big, "duplicate key \"k2500\"", "k2500");
    expect_error("{\"type\":\"generate\",\"id\":\"d\",\"messages\":[{\"role\":\"user\","
                 "\"content\":\"a\",\"content\":\"b\"}]}",
                 "invalid_message", "d");
}

int main(void)
{
    char big_id[80], long_stop[200], long_prompt[600];
    memset(big_id, 'x', 65);
    big_id[65] = 0;
    char json[1024];

    expect_error("{bad", "invalid_json", NULL);
    expect_error("", "invalid_json", NULL);
    expect_error("{\"type\":\"ping\"} x", "invalid_json", NULL);
    raw_controls();
    expect_error("[1,2]", "invalid_message", NULL);
    expect_error("42", "invalid_message", NULL);
    expect_error("\"generate\"", "invalid_message", NULL);
    expect_error("{\"id\":\"a\",\"prompt\":\"x\"}", "missing_field", "a");
    expect_error("{\"type\":7,\"id\":\"a\"}", "wrong_type", "a");
    expect_error("{\"type\":\"launch\",\"id\":\"a\"}", "unknown_type", "a");
    expect_error("{\"type\":\"generate\",\"id\":\"a\",\"prompt\":\"x\",\"max_token\":3}",
                 "unknown_field", "a");
    expect_error("{\"type\":\"generate\",\"id\":\"a\",\"prompt\":\"x\",\"prompt\":\"y\"}",
                 "invalid_message", "a");
    expect_error("{\"type\":\"generate\",\"prompt\":\"x\"}", "missing_field", NULL);
    expect_error("{\"type\":\"generate\",\"id\":5,\"prompt\":\"x\"}", "wrong_type", NULL);
    snprintf(json, sizeof json, "{\"type\":\"generate\",\"id\":\"%s\",\"prompt\":\"x\"}", big_id);
    expect_error(json, "out_of_range", NULL);
    expect_error("{\"type\":\"generate\",\"id\":\"\",\"prompt\":\"x\"}", "out_of_range", NULL);
    expect_error("{\"type\":\"generate\",\"id\":\"a\"}", "missing_field", "a");
    expect_error("{\"type\":\"generate\",\"id\":\"a\",\"prompt\":[\"x\"]}", "wrong_type", "a");
    expect_error("{\"type\":\"generate\",\"id\":\"a\",\"prompt\":\"\"}", "empty_prompt", "a");
    expect_error("{\"type\":\"generate\",\"id\":\"a\",\"prompt\":\"x\",\"model\":\"fast\"}",
                 "unknown_model", "a");
    expect_error("{\"type\":\"generate\",\"id\":\"a\",\"prompt\":\"x\",\"model\":1}", "wrong_type",
                 "a");
    expect_error("{\"type\":\"generate\",\"id\":\"a\",\"prompt\":\"x\",\"max_tokens\":0}",
                 "out_of_range", "a");
    expect_error("{\"type\":\"generate\",\"id\":\"a\",\"prompt\":\"x\",\"max_tokens\":-3}",
                 "out_of_range", "a");
    expect_error("{\"type\":\"generate\",\"id\":\"a\",\"prompt\":\"x\",\"max_tokens\":256}",
                 "out_of_range", "a");
    expect_error("{\"type\":\"generate\",\"id\":\"a\",\"prompt\":\"x\",\"max_tokens\":1.5}",
                 "wrong_type", "a");
    expect_error("{\"type\":\"generate\",\"id\":\"a\",\"prompt\":\"x\",\"max_tokens\":\"32\"}",
                 "wrong_type", "a");
    expect_error("{\"type\":\"generate\",\"id\":\"a\",\"prompt\":\"x\",\"temperature\":-1}",
                 "out_of_range", "a");
    expect_error("{\"type\":\"generate\",\"id\":\"a\",\"prompt\":\"x\",\"temperature\":2.5}",
                 "out_of_range", "a");
    expect_error("{\"type\":\"generate\",\"id\":\"a\",\"prompt\":\"x\",\"temperature\":null}",
                 "wrong_type", "a");
    expect_error("{\"type\":\"generate\",\"id\":\"a\",\"prompt\":\"x\",\"top_k\":-1}",
                 "out_of_range", "a");
    expect_error("{\"type\":\"generate\",\"id\":\"a\",\"prompt\":\"x\",\"top_k\":50258}",
                 "out_of_range", "a");
    expect_error("{\"type\":\"generate\",\"id\":\"a\",\"prompt\":\"x\",\"top_p\":0}",
                 "out_of_range", "a");
    expect_error("{\"type\":\"generate\",\"id\":\"a\",\"prompt\":\"x\",\"top_p\":1.5}",
                 "out_of_range", "a");
    expect_error("{\"type\":\"generate\",\"id\":\"a\",\"prompt\":\"x\",\"seed\":-1}",
                 "out_of_range", "a");
    expect_error("{\"type\":\"generate\",\"id\":\"a\",\"prompt\":\"x\",\"seed\":1e300}",
                 "out_of_range", "a");
    expect_error("{\"type\":\"generate\",\"id\":\"a\",\"prompt\":\"x\",\"ignore_eos\":1}",
                 "wrong_type", "a");
    expect_error("{\"type\":\"generate\",\"id\":\"a\",\"prompt\":\"x\",\"stop\":\"\\n\"}",
                 "wrong_type", "a");
    expect_error("{\"type\":\"generate\",\"id\":\"a\",\"prompt\":\"x\",\"stop\":[1]}", "wrong_type",
                 "a");
    expect_error("{\"type\":\"generate\",\"id\":\"a\",\"prompt\":\"x\",\"stop\":[\"\"]}",
                 "out_of_range", "a");
    expect_error(
        "{\"type\":\"generate\",\"id\":\"a\",\"prompt\":\"x\",\"stop\":[\"a\",\"b\",\"c\",\"d\","
        "\"e\"]}",
        "out_of_range", "a");
    memset(long_stop, 'z', 65);
    long_stop[65] = 0;
    snprintf(json, sizeof json,
             "{\"type\":\"generate\",\"id\":\"a\",\"prompt\":\"x\",\"stop\":[\"%s\"]}", long_stop);
    expect_error(json, "out_of_range", "a");
    expect_error("{\"type\":\"generate\",\"id\":\"a\",\"prompt\":\"x\\u0000y\"}", "invalid_message",
                 "a");
    expect_error("{\"type\":\"generate\",\"id\":\"a\",\"prompt\":\"x\",\"stop\":[\"\\u0000\"]}",
                 "invalid_message", "a");
    expect_error("{\"type\":\"cancel\"}", "missing_field", NULL);
    expect_error("{\"type\":\"cancel\",\"id\":\"a\",\"prompt\":\"x\"}", "unknown_field", "a");
    expect_error("{\"type\":\"subscribe\"}", "missing_field", NULL);
    expect_error("{\"type\":\"subscribe\",\"topic\":\"tokens\"}", "unknown_topic", NULL);
    expect_error("{\"type\":\"subscribe\",\"topic\":3}", "wrong_type", NULL);

    /* well-formed messages */
    proto_msg m;
    proto_error e;
    memset(long_prompt, 'a', sizeof long_prompt - 1);
    long_prompt[sizeof long_prompt - 1] = 0;
    const char *full = "{\"type\":\"generate\",\"id\":\"a1\",\"prompt\":\"Tab\\there \\u00e9\","
                       "\"model\":\"static\",\"max_tokens\":32,\"temperature\":0,\"top_k\":0,"
                       "\"top_p\":1,\"seed\":9007199254740991,\"stop\":[\"\\n\\n\",\"END\"],"
                       "\"ignore_eos\":true}";
    CHECK(proto_parse(full, strlen(full), &LIM, &m, &e) == 0);
    CHECK(m.kind == PROTO_GENERATE && !strcmp(m.id, "a1"));
    CHECK(!strcmp(m.gen.prompt, "Tab\there \xc3\xa9") && m.gen.prompt_len == 11);
    CHECK(m.gen.policy == IFL_POLICY_STATIC && m.gen.max_tokens == 32 && m.gen.temperature == 0 &&
          m.gen.top_k == 0 && m.gen.top_p == 1);
    CHECK(m.gen.has_seed && m.gen.seed == 9007199254740991ull);
    CHECK(m.gen.n_stop == 2 && !strcmp(m.gen.stop[0], "\n\n") && !strcmp(m.gen.stop[1], "END"));
    CHECK(m.gen.ignore_eos == 1);
    proto_msg_free(&m);
    const char *minimal = "{\"type\":\"generate\",\"id\":\"b\",\"prompt\":\"hi\"}";
    CHECK(proto_parse(minimal, strlen(minimal), &LIM, &m, &e) == 0);
    CHECK(m.gen.policy == IFL_POLICY_ITERATIVE && m.gen.max_tokens == 64 &&
          m.gen.temperature == 0.8 && m.gen.top_k == 40 && m.gen.top_p == 0.95 && !m.gen.has_seed &&
          !m.gen.n_stop && !m.gen.ignore_eos);
    proto_msg_free(&m);
    snprintf(json, sizeof json, "{\"type\":\"generate\",\"id\":\"c\",\"prompt\":\"%s\"}",
             long_prompt);
    CHECK(proto_parse(json, strlen(json), &LIM, &m, &e) == 0 && m.gen.prompt_len == 599);
    proto_msg_free(&m);
    const char *cancel = " {\"type\":\"cancel\",\"id\":\"a1\"} \n";
    CHECK(proto_parse(cancel, strlen(cancel), &LIM, &m, &e) == 0 && m.kind == PROTO_CANCEL &&
          !strcmp(m.id, "a1"));
    proto_msg_free(&m);
    const char *sub = "{\"type\":\"subscribe\",\"topic\":\"steps\"}";
    CHECK(proto_parse(sub, strlen(sub), &LIM, &m, &e) == 0 && m.kind == PROTO_SUBSCRIBE);
    proto_msg_free(&m);
    const char *ping = "{\"type\":\"ping\"}";
    CHECK(proto_parse(ping, strlen(ping), &LIM, &m, &e) == 0 && m.kind == PROTO_PING && !m.has_id);
    proto_msg_free(&m);
    chat_and_conversations();
    duplicate_keys();
    if (failures)
        fprintf(stderr, "test_protocol: %d error cases failed\n", failures);
    CHECK(failures == 0);
    if (test_failures)
        return 1;
    printf("test_protocol: ok\n");
    return 0;
}
