/* http_triton.c: Triton's generate extension as http_gen.c serves it (http_api.h): the request
 * {"text_input": "...", "max_tokens": N, ...} with the value parameters of the parameter table
 * (params.h) at the top level or under "parameters" (not both), "id" echoed, any other field
 * refused; the answer
 * {"model_name", "model_version": "1", "text_output", "finish_reason", "prompt_tokens",
 * "completion_tokens"}; a stream event per token {"model_name", "model_version", "text_output"}
 * and a last one with the finish; errors {"error": "..."}. */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <string.h>

#include "http_api.h"

/* The request as /ws's generate would have it: a copy of the body's object with the fields of
 * "parameters" moved to the top level (a field in both is an error), unknown fields refused, and
 * the id (a string of 1..64 bytes) taken out. NULL with *err. */
static cJSON *flatten(const cJSON *root, http_req_info *ri, proto_error *err)
{
    if (params_check_fields(root, PARAM_API_V2, 1, "the request", err))
        return NULL;
    const cJSON *id = cJSON_GetObjectItemCaseSensitive(root, "id");
    if (id) {
        size_t n = cJSON_IsString(id) && id->valuestring ? strlen(id->valuestring) : 0;
        if (!n || n > REQ_MAX_ID) {
            proto_error_set(err, IFL_CODE_WRONG_TYPE,
                            "field 'id' must be a string of 1 to %d bytes", REQ_MAX_ID);
            return NULL;
        }
        memcpy(ri->id, id->valuestring, n + 1);
        ri->has_id = 1;
    }
    cJSON *flat = cJSON_Duplicate(root, 1);
    if (!flat) {
        proto_error_set(err, IFL_CODE_OUT_OF_MEMORY, "no memory for the request");
        return NULL;
    }
    cJSON_DeleteItemFromObjectCaseSensitive(flat, "id");
    cJSON *params = cJSON_DetachItemFromObjectCaseSensitive(flat, "parameters");
    if (!params)
        return flat;
    if (!cJSON_IsObject(params)) {
        proto_error_set(err, IFL_CODE_WRONG_TYPE, "field 'parameters' must be an object, not %s",
                        proto_json_type_name(params));
        goto fail;
    }
    if (params_check_fields(params, PARAM_API_V2, 0, "'parameters'", err))
        goto fail;
    cJSON *p;
    while ((p = params->child)) {
        const char *name = p->string ? p->string : "";
        if (cJSON_GetObjectItemCaseSensitive(flat, name)) {
            proto_error_set(err, IFL_CODE_INVALID_REQUEST,
                            "field '%s' is given both at the top level and under 'parameters'",
                            name);
            goto fail;
        }
        cJSON_AddItemToObject(flat, name, cJSON_DetachItemViaPointer(params, p));
    }
    cJSON_Delete(params);
    return flat;
fail:
    cJSON_Delete(params);
    cJSON_Delete(flat);
    return NULL;
}

int triton_model(const char *name, size_t len, ifl_policy *policy, char *msg, size_t cap)
{
    if (!api_model_policy(name, len, NULL, 1, policy))
        return 0;
    strbuf names;
    sb_init(&names, 0);
    api_model_list(&names, 1, ", ", ", ");
    snprintf(msg, cap, "unknown model '%.*s': this server has %s", (int)(len > 128 ? 128 : len),
             name, sb_ok(&names) ? sb_text(&names) : "");
    sb_free(&names);
    return -1;
}

int triton_route(const http_api_desc *a, const char *path, http_req_info *ri, char *msg,
                 size_t cap)
{
    (void)a;
    if (strncmp(path, "/v2/models/", 11))
        return -1;
    const char *name = path + 11, *ver = NULL;
    size_t nlen = strcspn(name, "/"), vlen = 0;
    const char *tail = name + nlen;
    if (!strncmp(tail, "/versions/", 10)) {
        ver = tail + 10;
        vlen = strcspn(ver, "/");
        tail = ver + vlen;
    }
    if (!nlen || (ver && !vlen) || (strcmp(tail, "/generate") && strcmp(tail, "/generate_stream")))
        return -1;
    ri->stream = !strcmp(tail, "/generate_stream");
    if (triton_model(name, nlen, &ri->policy, msg, cap))
        return -2;
    if (ver && (vlen != 1 || ver[0] != '1')) {
        snprintf(msg, cap, "model '%.*s' has no version '%.*s': its one version is 1", (int)nlen,
                 name, http_clip_len(ver, vlen < 64 ? vlen : 64), ver);
        return -2;
    }
    snprintf(ri->model, sizeof ri->model, "%.*s", (int)nlen, name);
    return 0;
}

int triton_parse(const cJSON *root, const proto_limits *lim, http_req_info *ri, req_params *p,
                 proto_error *err)
{
    cJSON *flat = flatten(root, ri, err);
    if (!flat)
        return -1;
    int rc = proto_parse_params(flat, PARAM_API_V2, "text_input", lim, p, err);
    cJSON_Delete(flat);
    return rc;
}

/* {"model_name":...,"model_version":"1"[,"id":...] (left open) */
static void put_head(strbuf *sb, const http_req_info *ri)
{
    sb_puts(sb, "{\"model_name\":");
    sb_json_str(sb, ri->model, strlen(ri->model));
    sb_puts(sb, ",\"model_version\":\"1\"");
    if (ri->has_id) {
        sb_puts(sb, ",\"id\":");
        sb_json_str(sb, ri->id, strlen(ri->id));
    }
}

void triton_write_token(strbuf *sb, http_req_info *ri, http_choices *h, int32_t k,
                        const req_token *t, const strbuf *ev_lp)
{
    (void)h, (void)k, (void)ev_lp;
    sb_puts(sb, "data: ");
    put_head(sb, ri);
    sb_puts(sb, ",\"text_output\":");
    sb_json_str(sb, t->text, t->len);
    sb_puts(sb, "}\n\n");
}

void triton_write_end(strbuf *sb, http_req_info *ri, const req_result *res, http_choices *h)
{
    const char *text = sb_text(&h->c[0].text) ? sb_text(&h->c[0].text) : "";
    size_t len = h->c[0].text.len;
    if (ri->stream)
        sb_puts(sb, "data: ");
    put_head(sb, ri);
    sb_puts(sb, ",\"text_output\":");
    sb_json_str(sb, ri->stream ? "" : text, ri->stream ? 0 : len);
    if (res->finish == IFL_FINISH_ERROR) {
        const char *m = res->message ? res->message : "the engine failed";
        sb_puts(sb, ",\"error\":");
        sb_json_str(sb, m, strlen(m));
    }
    sb_printf(sb, ",\"finish_reason\":\"%s\",\"prompt_tokens\":%d,\"completion_tokens\":%d}",
              ifl_finish_name(res->finish), (int)res->prompt_tokens, (int)res->completion_tokens);
    if (ri->stream)
        sb_puts(sb, "\n\n");
}

void triton_write_error(strbuf *sb, const http_req_info *ri, ifl_code code, const char *message,
                        int stream)
{
    (void)code;
    if (stream) {
        sb_puts(sb, "data: ");
        put_head(sb, ri);
        sb_puts(sb, ",");
    } else {
        sb_puts(sb, "{");
    }
    sb_puts(sb, "\"error\":");
    sb_json_str(sb, message, strlen(message));
    if (!stream && ri && ri->has_id) {
        sb_puts(sb, ",\"id\":");
        sb_json_str(sb, ri->id, strlen(ri->id));
    }
    sb_puts(sb, stream ? "}\n\n" : "}");
}
