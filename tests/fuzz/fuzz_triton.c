/* fuzz_triton.c: libFuzzer target for Triton's generate request body (server/http_triton.c,
 * triton_parse), POST /v2/models/NAME/generate[_stream]: one input is one body as http_gen.c parses
 * it (UTF-8 check, proto_parse_json_object, triton_parse). Checks (fuzz_common.h): no crash, no
 * leak, an error whose answer (triton_write_error, with the echoed id) is JSON, and accepted
 * requests within the documented ranges. */
#include "fuzz_common.h"
#include "http_api.h"

static void check_error(const proto_error *pe, const http_req_info *ri)
{
    fuzz_check_error(pe);
    strbuf sb;
    sb_init(&sb, 0);
    triton_write_error(&sb, ri, pe->code, pe->message, 0);
    fuzz_check_json_out(&sb);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *body = (const char *)data;
    if (!ifl_utf8_valid(body, size))
        return 0; /* http_gen.c answers invalid_message before any parsing */
    http_req_info ri;
    memset(&ri, 0, sizeof ri);
    ri.api = HTTP_API_TRITON;
    ri.policy = IFL_POLICY_ITERATIVE; /* the route's: /v2/models/iterative-gpt2/generate */
    proto_error pe;
    memset(&pe, 0, sizeof pe);
    cJSON *root = proto_parse_json_object(body, size, &pe);
    if (!root) {
        check_error(&pe, &ri);
        return 0;
    }
    FUZZ_CHECK(fuzz_escapes_ok(body, size));
    req_params p;
    memset(&p, 0, sizeof p);
    int rc = triton_parse(root, &FUZZ_LIM, &ri, &p, &pe);
    FUZZ_CHECK(rc == 0 || rc == -1);
    if (rc) {
        check_error(&pe, &ri);
    } else {
        fuzz_check_params(&p, &FUZZ_LIM, 0, 0);
        FUZZ_CHECK(!ri.has_id || (fuzz_str_ok(ri.id, sizeof ri.id) && ri.id[0]));
    }
    free(p.prompt);
    free(p.prompt_ids);
    cJSON_Delete(root);
    return 0;
}
