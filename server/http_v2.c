/* http_v2.c: Triton's (KServe v2) probes and metadata under /v2, for the clients of the seed's
 * tutorial: GET /v2 (server metadata), /v2/health/live, /v2/health/ready,
 * /v2/models/NAME[/versions/V] (model metadata) and .../ready. The models are the tutorial's names
 * for the two policies: iterative-gpt2 (the iterative batcher) and simple-gpt2 (static batches),
 * each with the one version "1". A probe answers 200 when true and 400 when false, as Triton does,
 * here with a JSON body saying why; errors are Triton's {"error": "..."}: 404 for an unknown path,
 * model or version. GET and HEAD only: http.c's route table answers another method with 405 where
 * http_v2_known says the path is one of these, else 404. Service thread. */
#include <stdio.h>
#include <string.h>

#include "http_api.h"
#include "service.h"

/* Why the server is not ready, or NULL when it is. */
static const char *not_ready_reason(server *s)
{
    if (s->rl.stopping)
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
    if (atomic_load(&s->ready)) /* the context is known once the model is loaded */
        sb_printf(&sb, ",\"n_ctx\":%d", (int)s->rt.model.cfg.n_ctx);
    sb_puts(&sb, "},"
                 "\"inputs\":[{\"name\":\"text_input\",\"datatype\":\"BYTES\",\"shape\":[1]},"
                 "{\"name\":\"max_tokens\",\"datatype\":\"INT32\",\"shape\":[1]}],"
                 "\"outputs\":[{\"name\":\"text_output\",\"datatype\":\"BYTES\",\"shape\":[1]}]}");
    return v2_json(c, wsi, HTTP_STATUS_OK, &sb, head_only);
}

/* What a path under /v2 names. */
typedef enum { V2_NONE, V2_SERVER, V2_LIVE, V2_READY, V2_MODEL, V2_MODEL_READY } v2_target;

typedef struct {
    char name[HTTP_MODEL_MAX + 1]; /* V2_MODEL, V2_MODEL_READY: the model */
    ifl_policy policy;
    char msg[300]; /* V2_NONE: why (the 404's message) */
} v2_where;

/* /v2/models/NAME[/versions/V][/ready]: rest is what follows "/v2/models/". */
static v2_target v2_model(const char *rest, v2_where *w)
{
    const char *slash = strchr(rest, '/');
    size_t nlen = slash ? (size_t)(slash - rest) : strlen(rest);
    if (triton_model(rest, nlen, &w->policy, w->msg, sizeof w->msg))
        return V2_NONE;
    snprintf(w->name, sizeof w->name, "%.*s", (int)nlen, rest);
    const char *tail = rest + nlen;
    if (!strncmp(tail, "/versions/", 10)) {
        const char *v = tail + 10, *vend = strchr(v, '/');
        size_t vlen = vend ? (size_t)(vend - v) : strlen(v);
        if (vlen != 1 || v[0] != '1') {
            snprintf(w->msg, sizeof w->msg,
                     "model '%s' has no version '%.*s': its one version is 1", w->name,
                     http_clip_len(v, vlen > 64 ? 64 : vlen), v);
            return V2_NONE;
        }
        tail = v + vlen;
    }
    if (!*tail)
        return V2_MODEL;
    if (!strcmp(tail, "/ready"))
        return V2_MODEL_READY;
    snprintf(w->msg, sizeof w->msg,
             "no such endpoint under model '%s' (GET: its metadata, or /ready; POST: /generate, "
             "/generate_stream)",
             w->name);
    return V2_NONE;
}

static v2_target v2_resolve(const char *path, v2_where *w)
{
    if (!strcmp(path, "/v2") || !strcmp(path, "/v2/"))
        return V2_SERVER;
    if (!strcmp(path, "/v2/health/live"))
        return V2_LIVE;
    if (!strcmp(path, "/v2/health/ready"))
        return V2_READY;
    if (!strncmp(path, "/v2/models/", 11) && path[11])
        return v2_model(path + 11, w);
    strbuf models;
    sb_init(&models, 0);
    api_model_list(&models, 1, ",", ",");
    snprintf(w->msg, sizeof w->msg,
             "no such endpoint: /v2 has /v2/health/live, /v2/health/ready and "
             "/v2/models/{%s}[/versions/1][/ready] (GET), "
             ".../generate and .../generate_stream (POST)",
             sb_ok(&models) ? sb_text(&models) : "");
    sb_free(&models);
    return V2_NONE;
}

int http_v2_known(const char *path, char *msg, size_t cap)
{
    v2_where w;
    if (v2_resolve(path, &w) != V2_NONE)
        return 1;
    snprintf(msg, cap, "%s", w.msg);
    return 0;
}

int http_v2(server *s, srv_conn *c, struct lws *wsi, const char *path, int head_only)
{
    v2_where w;
    switch (v2_resolve(path, &w)) {
    case V2_SERVER: return v2_server_metadata(c, wsi, head_only);
    case V2_LIVE: return v2_probe(c, wsi, NULL, head_only);
    case V2_READY:
    case V2_MODEL_READY: return v2_probe(c, wsi, not_ready_reason(s), head_only);
    case V2_MODEL: return v2_model_metadata(s, c, wsi, w.name, w.policy, head_only);
    default: return v2_error(c, wsi, HTTP_STATUS_NOT_FOUND, w.msg, head_only);
    }
}
