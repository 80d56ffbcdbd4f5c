/* http_v2.c: Triton's (KServe v2) probes and metadata under /v2, for the clients of the seed's
 * tutorial: GET /v2 (server metadata), /v2/health/live, /v2/health/ready,
 * /v2/models/NAME[/versions/V] (model metadata) and .../ready. The models are the tutorial's names
 * for the two policies: iterative-gpt2 (the iterative batcher) and simple-gpt2 (static batches),
 * each with the one version "1". A probe answers 200 when true and 400 when false, as Triton does,
 * here with a JSON body saying why; errors are Triton's {"error": "..."}: 404 for an unknown path,
 * model or version. GET and HEAD only (http.c answers 405 otherwise). Service thread. */
#include <stdio.h>
#include <string.h>

#include "http_api.h"
#include "service.h"

/* Why the server is not ready, or NULL when it is. */
static const char *not_ready_reason(server *s)
{
    if (s->stopping)
        return "shutting down";
    if (atomic_load(&s->load_failed))
        return "the model failed to load";
    if (!atomic_load(&s->ready))
        return "not ready: loading the model";
    return NULL;
}

static int v2_json(srv_conn *c, struct lws *wsi, int status, strbuf *sb, int head_only)
{
    return http_respond_json(c, wsi, status, sb, head_only, NULL, NULL);
}

/* {"error": msg} with status. */
static int v2_error(srv_conn *c, struct lws *wsi, int status, const char *msg, int head_only)
{
    strbuf sb;
    sb_init(&sb, 0);
    sb_puts(&sb, "{\"error\":");
    sb_json_str(&sb, msg, strlen(msg));
    sb_puts(&sb, "}");
    return v2_json(c, wsi, status, &sb, head_only);
}

/* A probe: 200 with an empty body when true, 400 with why when false. */
static int v2_probe(srv_conn *c, struct lws *wsi, const char *why_not, int head_only)
{
    if (why_not)
        return v2_error(c, wsi, HTTP_STATUS_BAD_REQUEST, why_not, head_only);
    return http_respond(c, wsi, HTTP_STATUS_OK, "application/json", NULL, 0, head_only, NULL, NULL);
}

static int v2_server_metadata(srv_conn *c, struct lws *wsi, int head_only)
{
    strbuf sb;
    sb_init(&sb, 0);
    sb_puts(&sb, "{\"name\":\"inflight\",\"version\":\"" INFLIGHT_VERSION
                 "\",\"extensions\":[\"generate\"]}");
    return v2_json(c, wsi, HTTP_STATUS_OK, &sb, head_only);
}

static int v2_model_metadata(server *s, srv_conn *c, struct lws *wsi, const char *name,
                             ifl_policy policy, int head_only)
{
    strbuf sb;
    sb_init(&sb, 0);
    sb_puts(&sb, "{\"name\":");
    sb_json_str(&sb, name, strlen(name));
    sb_printf(&sb,
              ",\"versions\":[\"1\"],\"platform\":\"inflight\",\"parameters\":{\"policy\":\"%s\","
              "\"max_tokens\":%d",
              ifl_policy_name(policy), (int)s->lim.max_tokens);
    if (s->rl.n_ctx > 0) /* known once the model is loaded */
        sb_printf(&sb, ",\"n_ctx\":%d", (int)s->rl.n_ctx);
    sb_puts(&sb, "},"
                 "\"inputs\":[{\"name\":\"text_input\",\"datatype\":\"BYTES\",\"shape\":[1]},"
                 "{\"name\":\"max_tokens\",\"datatype\":\"INT32\",\"shape\":[1]}],"
                 "\"outputs\":[{\"name\":\"text_output\",\"datatype\":\"BYTES\",\"shape\":[1]}]}");
    return v2_json(c, wsi, HTTP_STATUS_OK, &sb, head_only);
}

/* /v2/models/NAME[/versions/V][/ready]: rest is what follows "/v2/models/". */
static int v2_model(server *s, srv_conn *c, struct lws *wsi, const char *rest, int head_only)
{
    const char *slash = strchr(rest, '/');
    size_t nlen = slash ? (size_t)(slash - rest) : strlen(rest);
    ifl_policy policy;
    char name[HTTP_MODEL_MAX + 1], msg[300];
    if (triton_model(rest, nlen, &policy, msg, sizeof msg))
        return v2_error(c, wsi, HTTP_STATUS_NOT_FOUND, msg, head_only);
    snprintf(name, sizeof name, "%.*s", (int)nlen, rest);
    const char *tail = rest + nlen;
    if (!strncmp(tail, "/versions/", 10)) {
        const char *v = tail + 10, *vend = strchr(v, '/');
        size_t vlen = vend ? (size_t)(vend - v) : strlen(v);
        if (vlen != 1 || v[0] != '1') {
            snprintf(msg, sizeof msg, "model '%s' has no version '%.*s': its one version is 1",
                     name, (int)(vlen > 64 ? 64 : vlen), v);
            return v2_error(c, wsi, HTTP_STATUS_NOT_FOUND, msg, head_only);
        }
        tail = v + vlen;
    }
    if (!*tail)
        return v2_model_metadata(s, c, wsi, name, policy, head_only);
    if (!strcmp(tail, "/ready"))
        return v2_probe(c, wsi, not_ready_reason(s), head_only);
    snprintf(msg, sizeof msg, "no such endpoint under model '%s' (GET: its metadata, or /ready)",
             name);
    return v2_error(c, wsi, HTTP_STATUS_NOT_FOUND, msg, head_only);
}

int http_v2(server *s, srv_conn *c, struct lws *wsi, const char *path, int head_only)
{
    if (!strcmp(path, "/v2") || !strcmp(path, "/v2/"))
        return v2_server_metadata(c, wsi, head_only);
    if (!strcmp(path, "/v2/health/live"))
        return v2_probe(c, wsi, NULL, head_only);
    if (!strcmp(path, "/v2/health/ready"))
        return v2_probe(c, wsi, not_ready_reason(s), head_only);
    if (!strncmp(path, "/v2/models/", 11) && path[11])
        return v2_model(s, c, wsi, path + 11, head_only);
    return v2_error(c, wsi, HTTP_STATUS_NOT_FOUND,
                    "no such endpoint: /v2 has /v2/health/live, /v2/health/ready and "
                    "/v2/models/{iterative-gpt2,simple-gpt2}[/ready]",
                    head_only);
}
