/* fuzz_openai.c: libFuzzer target for OpenAI's request bodies (server/http_openai.c, openai_parse):
 * one input is one body as http_gen.c parses it (UTF-8 check, proto_parse_json_object), then read
 * as POST /v1/completions and as POST /v1/chat/completions. Checks (fuzz_common.h): no crash, no
 * leak, an error whose answer (openai_write_error) is JSON, and accepted requests within the
 * documented ranges (a batch's prompts each). */
#include "fuzz_common.h"
#include "chat_template.h"
#include "http_api.h"

static void check_error(const proto_error *pe)
{
    fuzz_check_error(pe);
    strbuf sb;
    sb_init(&sb, 0);
    openai_write_error(&sb, ifl_code_get(pe->code)->http_status, pe->code,
                       pe->param[0] ? pe->param : NULL, pe->message, 0);
    fuzz_check_json_out(&sb);
}

static void parse_as(const cJSON *root, http_api_kind api)
{
    http_req_info ri;
    memset(&ri, 0, sizeof ri);
    ri.api = api;
    req_params p;
    memset(&p, 0, sizeof p);
    proto_error pe;
    memset(&pe, 0, sizeof pe);
    int rc = openai_parse(root, &FUZZ_LIM, FUZZ_SERVED_NAME, &ri, &p, &pe);
    FUZZ_CHECK(rc == 0 || rc == -1);
    if (rc) {
        check_error(&pe);
    } else {
        fuzz_check_params(&p, &FUZZ_LIM, api == HTTP_API_COMPLETIONS, ri.prompts != NULL);
        FUZZ_CHECK(!ri.prompts || (api == HTTP_API_COMPLETIONS && ri.n_prompts >= 1 &&
                                   ri.n_prompts <= HTTP_MAX_PROMPTS));
        for (int32_t i = 0; ri.prompts && i < ri.n_prompts; i++)
            fuzz_check_prompt(ri.prompts[i].text, ri.prompts[i].len, ri.prompts[i].ids,
                              ri.prompts[i].n_ids, &FUZZ_LIM, 1);
        FUZZ_CHECK(fuzz_str_ok(ri.model, sizeof ri.model) && ri.model[0]);
        FUZZ_CHECK(ri.policy == IFL_POLICY_ITERATIVE || ri.policy == IFL_POLICY_STATIC);
        FUZZ_CHECK(!ri.include_usage || ri.stream);
        FUZZ_CHECK(!ri.has_user || (fuzz_str_ok(ri.user, sizeof ri.user) && ri.user[0]));
        if (api == HTTP_API_CHAT) { /* the template's stop, unless the four were taken */
            int found = 0;
            for (int i = 0; i < p.n_stop; i++)
                found |= !strcmp(p.stop[i], "\nUser:");
            FUZZ_CHECK(found || p.n_stop == IFL_MAX_STOPS);
            /* the lines the request layer trims by: in order, inside the prompt, each ending with
             * its newline, then the suffix to the end */
            FUZZ_CHECK(p.chat && p.chat->n >= 1);
            size_t at = 0;
            for (int32_t i = 0; p.chat && i < p.chat->n; i++) {
                const chat_line *l = &p.chat->lines[i];
                FUZZ_CHECK(l->off == at && l->len >= 2 && p.prompt[l->off + l->len - 1] == '\n');
                at = l->off + l->len;
            }
            FUZZ_CHECK(!p.chat || (p.chat->suffix_off == at &&
                                   !strcmp(p.prompt + at, CHAT_SUFFIX) && p.chat->messages_json));
        }
    }
    req_chat_free(p.chat);
    free(p.prompt);
    free(p.prompt_ids);
    openai_free_prompts(&ri);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *body = (const char *)data;
    if (!ifl_utf8_valid(body, size))
        return 0; /* http_gen.c answers invalid_message before any parsing */
    proto_error pe;
    memset(&pe, 0, sizeof pe);
    cJSON *root = proto_parse_json_object(body, size, &pe);
    if (!root) {
        check_error(&pe);
        return 0;
    }
    FUZZ_CHECK(fuzz_escapes_ok(body, size));
    parse_as(root, HTTP_API_COMPLETIONS);
    parse_as(root, HTTP_API_CHAT);
    cJSON_Delete(root);
    return 0;
}
