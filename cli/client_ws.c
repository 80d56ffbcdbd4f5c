/* client_ws.c: `inflight client` over our own /ws protocol (docs/protocol.md): --connections
 * sockets opened up front, requests spread over them round-robin as generate frames, and the
 * hello, token, done and error frames that come back handed to cmd_client.c. */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "client.h"
#include "util.h"

static void conn_queue(client *cl, int ci, strbuf *sb)
{
    cconn *c = &cl->conns[ci];
    if (c->n_out == c->cap_out) {
        int cap = c->cap_out ? 2 * c->cap_out : 16;
        strbuf *q = malloc((size_t)cap * sizeof *q);
        if (!q) {
            sb_free(sb);
            return;
        }
        for (int i = 0; i < c->n_out; i++)
            q[i] = c->outq[(c->head_out + i) % c->cap_out];
        free(c->outq);
        c->outq = q;
        c->cap_out = cap;
        c->head_out = 0;
    }
    c->outq[(c->head_out + c->n_out) % c->cap_out] = *sb;
    c->n_out++;
    lws_callback_on_writable(c->wsi);
}

void client_ws_send(client *cl, creq *r, const char *prompt, uint64_t seed)
{
    strbuf sb;
    sb_init(&sb, LWS_PRE);
    sb_puts(&sb, "{\"type\":\"generate\",\"id\":");
    sb_json_str(&sb, r->id, strlen(r->id));
    sb_puts(&sb, ",\"prompt\":");
    sb_json_str(&sb, prompt, strlen(prompt));
    sb_printf(&sb, ",\"model\":\"%s\",\"max_tokens\":%d,\"temperature\":%g,\"seed\":%llu%s}",
              cl->policy, cl->max_tokens, cl->temperature, (unsigned long long)seed,
              cl->ignore_eos ? ",\"ignore_eos\":true" : "");
    r->t_send = ifl_now_us();
    conn_queue(cl, r->conn, &sb);
}

static const char *str_item(const cJSON *m, const char *key)
{
    return cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(m, key));
}

static void on_frame(client *cl, int ci, const char *text, size_t len)
{
    uint64_t now = ifl_now_us();
    cJSON *m = cJSON_ParseWithLength(text, len);
    if (!m)
        return;
    const char *type = str_item(m, "type"), *id = str_item(m, "id");
    creq *r = id ? client_find_req(cl, id) : NULL;
    if (!type) {
        /* not one of ours: ignored */
    } else if (!strcmp(type, "hello")) {
        if (!cl->conns[ci].ready) {
            cl->conns[ci].ready = 1;
            cl->n_ready++;
        }
        if (cl->n_ready == cl->n_conns && cl->phase == 0)
            client_start(cl);
    } else if (!strcmp(type, "token") && r) {
        client_on_token(cl, r, str_item(m, "text"), now);
    } else if (!strcmp(type, "done") && r && !r->done) {
        const cJSON *timing = cJSON_GetObjectItemCaseSensitive(m, "timing");
        const cJSON *tt = cJSON_GetObjectItemCaseSensitive(timing, "ttft_ms");
        const cJSON *tp = cJSON_GetObjectItemCaseSensitive(timing, "tokens_per_s");
        r->ttft_ms = cJSON_IsNumber(tt) ? tt->valuedouble : 0;
        r->tps = cJSON_IsNumber(tp) ? tp->valuedouble : 0;
        client_on_done(cl, r, str_item(m, "finish_reason"), now);
    } else if (!strcmp(type, "error")) {
        const char *msg = str_item(m, "message"), *code = str_item(m, "code");
        if (r)
            client_on_refused(cl, r, code, msg, now);
        else
            fprintf(stderr, "\ninflight client: the server said: %s: %s\n", code ? code : "?",
                    msg ? msg : "?");
    }
    cJSON_Delete(m);
}

int client_ws_callback(struct lws *wsi, enum lws_callback_reasons reason, void *user, void *in,
                       size_t len)
{
    client *cl = lws_context_user(lws_get_context(wsi));
    int ci = (int)(intptr_t)lws_get_opaque_user_data(wsi);
    switch (reason) {
    case LWS_CALLBACK_CLIENT_CONNECTION_ERROR:
        cl->conns[ci].closed = 1;
        cl->conns[ci].wsi = NULL;
        client_fail(cl, "cannot connect: %s", in ? (const char *)in : "connection refused");
        break;
    case LWS_CALLBACK_CLIENT_RECEIVE: {
        /* reassemble fragments in a per-connection buffer */
        strbuf *b = user;
        if (lws_is_first_fragment(wsi))
            sb_reset(b);
        sb_append(b, in, len);
        if (lws_is_final_fragment(wsi) && !lws_remaining_packet_payload(wsi) && sb_ok(b))
            on_frame(cl, ci, sb_text(b), b->len);
        break;
    }
    case LWS_CALLBACK_CLIENT_WRITEABLE: {
        cconn *c = &cl->conns[ci];
        if (!c->n_out)
            break;
        strbuf *sb = &c->outq[c->head_out];
        int n = lws_write(wsi, (unsigned char *)sb_text(sb), sb->len, LWS_WRITE_TEXT);
        int ok = n >= (int)sb->len;
        sb_free(sb);
        c->head_out = (c->head_out + 1) % c->cap_out;
        c->n_out--;
        if (!ok)
            return -1;
        if (c->n_out)
            lws_callback_on_writable(wsi);
        break;
    }
    case LWS_CALLBACK_CLIENT_CLOSED:
        cl->conns[ci].closed = 1;
        cl->conns[ci].wsi = NULL;
        if (cl->phase != 2)
            client_fail(cl, "the server closed the connection");
        break;
    case LWS_CALLBACK_WS_PEER_INITIATED_CLOSE:
        if (len >= 2 && cl->phase != 2) {
            const unsigned char *p = in;
            client_fail(cl, "the server closed the connection: %d %.*s", (p[0] << 8) | p[1],
                        (int)(len - 2), (const char *)p + 2);
        }
        break;
    case LWS_CALLBACK_CLOSED_CLIENT_HTTP:
    case LWS_CALLBACK_WSI_DESTROY:
        if (user)
            sb_free((strbuf *)user);
        break;
    default: break;
    }
    return 0;
}

int client_ws_connect(client *cl)
{
    cl->conns = calloc((size_t)cl->n_conns, sizeof *cl->conns);
    if (!cl->conns) {
        client_fail(cl, "out of memory");
        return -1;
    }
    /* the key, when the server wants one, goes in the query (browsers cannot set headers),
     * percent-encoded but for RFC 3986's unreserved characters */
    char path[1024];
    size_t n =
        (size_t)snprintf(path, sizeof path, "%s%s", cl->path, cl->api_key ? "?api_key=" : "");
    for (const char *k = cl->api_key; k && *k && n + 4 < sizeof path; k++) {
        unsigned char ch = (unsigned char)*k;
        if ((ch >= 'A' && ch <= 'Z') || (ch >= 'a' && ch <= 'z') || (ch >= '0' && ch <= '9') ||
            strchr("-._~", ch))
            path[n++] = (char)ch;
        else
            n += (size_t)snprintf(path + n, sizeof path - n, "%%%02X", ch);
    }
    path[n < sizeof path ? n : sizeof path - 1] = 0;
    for (int i = 0; i < cl->n_conns; i++) {
        if (!client_connect(cl, path, NULL, i, &cl->conns[i].wsi))
            return -1;
    }
    return 0;
}

void client_ws_free(client *cl)
{
    for (int i = 0; cl->conns && i < cl->n_conns; i++) {
        cconn *c = &cl->conns[i];
        for (int k = 0; k < c->n_out; k++)
            sb_free(&c->outq[(c->head_out + k) % c->cap_out]);
        free(c->outq);
    }
    free(cl->conns);
    cl->conns = NULL;
}
