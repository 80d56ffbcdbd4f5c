/* client_ws.c: `inflight client`'s WebSocket transport, for our own /ws protocol
 * (docs/protocol.md): --connections sockets opened up front, requests spread over them
 * round-robin as the API row's frames, and the frames that come back read by its parser and
 * handed to cmd_client.c (the hellos here: once every socket said one, the sends start). */
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
    cl->api->write_body(&sb, cl, r, prompt, seed);
    r->t_send = ifl_now_us();
    conn_queue(cl, r->conn, &sb);
}

static void on_frame(client *cl, int ci, const char *text, size_t len)
{
    uint64_t now = ifl_now_us();
    cJSON *m = cJSON_ParseWithLength(text, len);
    if (!m)
        return;
    client_event ev = {.kind = CLIENT_EV_NONE};
    cl->api->parse(m, &ev);
    if (ev.kind == CLIENT_EV_HELLO) {
        if (!cl->conns[ci].ready) {
            cl->conns[ci].ready = 1;
            cl->n_ready++;
        }
        if (cl->n_ready == cl->n_conns && cl->phase == 0)
            client_start(cl);
    } else {
        client_on_event(cl, ev.id ? client_find_req(cl, ev.id) : NULL, &ev, now);
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
