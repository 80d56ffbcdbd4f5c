/* reqlog.c: the stderr line and the SQLite records of requests and steps, and the budget of
 * refused requests' rows by client address and in all (reqlog.h). */
#include "reqlog.h"

#include "params.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>

double reqlog_unix_ms(const reqlog *lg, uint64_t mono_us)
{
    if (!mono_us)
        return 0;
    return lg->epoch_ms_at_t0 + ((double)mono_us - (double)lg->t0_us) / 1e3;
}

char *reqlog_params_json(const req_params *p, uint64_t seed)
{
    strbuf sb;
    sb_init(&sb, 0);
    params_log_json(&sb, p, seed);
    if (!sb_ok(&sb)) {
        sb_free(&sb);
        return NULL;
    }
    return sb_steal(&sb);
}

/* The format the served model's weights are held in ("q8"), or NULL. */
static const char *weights_name(const reqlog *lg)
{
    return lg->model ? ifl_model_dtype_name(lg->model) : NULL;
}

/* The fields every request record has, finished or refused. */
static ifl_dblog_request base_record(const reqlog *lg, const srv_req *r,
                                     char session[REQ_SESSION_HEX])
{
    req_session_hex(r->session, session);
    return (ifl_dblog_request){
        .session = session,
        .client_id = r->id,
        .policy = ifl_policy_name(r->policy),
        .api = req_api_name(r->api),
        .prompt = r->prompt ? r->prompt : "",
        .prompt_len = r->prompt ? r->prompt_len : 0,
        .prompt_bytes = r->prompt ? (int64_t)r->prompt_len : 0,
        .params_json = r->params,
        .prompt_tokens = r->prompt_tokens,
        .conversation = r->conversation,
        .cached_tokens = -1,
        .completion = sb_text(&r->completion) ? sb_text(&r->completion) : "",
        .completion_len = r->completion.len,
        .queued_at = reqlog_unix_ms(lg, r->t_arrival),
        .queue_ms = -1,
        .ttft_ms = -1,
        .total_ms = -1,
        .tokens_per_s = -1,
        .weights = weights_name(lg),
        .messages = r->messages,
        .trimmed_messages = r->trimmed_messages,
        .trimmed_tokens = r->trimmed_tokens,
    };
}

static void stderr_line(const reqlog *lg, const srv_req *r, const req_result *res, int owner_gone)
{
    if (!lg->lines)
        return;
    char session[REQ_SESSION_HEX];
    req_session_hex(r->session, session);
    char trimmed[64] = ""; /* what was left out of the prompt, when something was */
    if (r->trimmed_tokens)
        snprintf(trimmed, sizeof trimmed, " trimmed_messages=%d trimmed_tokens=%d",
                 r->trimmed_messages, r->trimmed_tokens);
    fprintf(stderr,
            "inflight: request %s/%s policy=%s weights=%s prompt_tokens=%d tokens=%d finish=%s "
            "queue_ms=%.1f ttft_ms=%.1f total_ms=%.1f tokens_per_s=%.1f%s%s%s%s\n",
            session, r->id, ifl_policy_name(r->policy),
            weights_name(lg) ? weights_name(lg) : "unknown", res->prompt_tokens,
            res->completion_tokens, ifl_finish_name(res->finish), res->queue_ms,
            res->ttft_ms < 0 ? 0 : res->ttft_ms, res->total_ms, res->tokens_per_s, trimmed,
            owner_gone ? " (connection closed)" : "", res->message ? " error=" : "",
            res->message ? res->message : "");
}

void reqlog_finished(reqlog *lg, const srv_req *r, const ifl_event *done, const req_result *res,
                     int owner_gone)
{
    stderr_line(lg, r, res, owner_gone);
    if (!lg->db)
        return;
    char session[REQ_SESSION_HEX];
    ifl_dblog_request q = base_record(lg, r, session);
    q.completion_tokens = res->completion_tokens;
    q.cached_tokens = res->cached_tokens;
    q.finish_reason = ifl_finish_name(res->finish);
    q.error_code = res->finish == IFL_FINISH_ERROR ? ifl_code_name(res->code) : NULL;
    q.admitted_at = reqlog_unix_ms(lg, done->t_admitted);
    q.first_token_at = reqlog_unix_ms(lg, done->t_first_token);
    q.finished_at = reqlog_unix_ms(lg, done->t_finished ? done->t_finished : r->t_last);
    q.queue_ms = res->queue_ms;
    q.ttft_ms = res->ttft_ms;
    q.total_ms = res->total_ms;
    q.tokens_per_s = res->tokens_per_s;
    q.offsets_us = r->offsets;
    q.n_offsets = r->offsets ? r->n_logged : 0; /* choice 0's tokens */
    ifl_dblog_request_done(lg->db, &q);
}

void reqlog_refused(reqlog *lg, const srv_req *r, ifl_code code)
{
    if (!lg->db)
        return;
    char session[REQ_SESSION_HEX];
    ifl_dblog_request q = base_record(lg, r, session);
    q.error_code = ifl_code_name(code);
    /* refusals cost the sender nothing: keep the start of the prompt, not all of it (the length
     * stays in prompt_bytes); cut at a character boundary, so the text stays UTF-8 */
    if (q.prompt_len > REQLOG_REFUSED_PROMPT_BYTES) {
        size_t n = REQLOG_REFUSED_PROMPT_BYTES;
        while (n > 0 && ((unsigned char)q.prompt[n] & 0xC0) == 0x80)
            n--;
        q.prompt_len = n;
    }
    ifl_dblog_request_done(lg->db, &q);
}

/* ---- the budget of refused requests' rows ---------------------------------------------------- */

void reqlog_peer_key(int fd, uint8_t key[REQ_PEER_BYTES])
{
    struct sockaddr_storage ss;
    socklen_t n = sizeof ss;
    memset(key, 0, REQ_PEER_BYTES);
    if (fd < 0 || getpeername(fd, (struct sockaddr *)&ss, &n))
        return;
    if (ss.ss_family == AF_INET) {
        const struct sockaddr_in *a = (const struct sockaddr_in *)&ss;
        key[10] = key[11] = 0xff; /* ::ffff:a.b.c.d, as an IPv4-mapped IPv6 peer shows */
        memcpy(key + 12, &a->sin_addr, 4);
    } else if (ss.ss_family == AF_INET6) {
        const struct sockaddr_in6 *a = (const struct sockaddr_in6 *)&ss;
        memcpy(key, &a->sin6_addr, IN6_IS_ADDR_V4MAPPED(&a->sin6_addr) ? 16 : 8);
    }
}

/* The bucket refilled to now_us at per_s rows a second. */
static void refill(reqlog_budget *b, uint64_t now_us, double per_s)
{
    if (b->t_us && now_us > b->t_us) {
        double r = (double)(now_us - b->t_us) * 1e-6 * per_s;
        b->used = b->used > r ? b->used - r : 0;
    }
    if (now_us > b->t_us)
        b->t_us = now_us;
}

static uint64_t mix64(uint64_t z)
{
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* The address's bucket, refilled to now_us: its slot, or one taken for it (see reqlog.h). */
static reqlog_budget *addr_budget(reqlog_refusals *f, const uint8_t peer[REQ_PEER_BYTES],
                                  uint64_t now_us)
{
    if (!f->key[0] && !f->key[1] && getrandom(f->key, sizeof f->key, GRND_NONBLOCK) < 0)
        f->key[0] = mix64(now_us ^ (uint64_t)(uintptr_t)f); /* no entropy yet: less secret */
    uint64_t w[2];
    memcpy(w, peer, sizeof w);
    uint64_t h = mix64(mix64(w[0] ^ f->key[0]) ^ w[1] ^ f->key[1]);
    reqlog_addr_budget *take = NULL;
    for (int i = 0; i < REQLOG_REFUSAL_PROBE; i++) {
        reqlog_addr_budget *e = &f->by_addr[(h + (uint64_t)i) & (REQLOG_REFUSAL_ADDRS - 1)];
        if (e->b.t_us && !memcmp(e->addr, peer, REQ_PEER_BYTES)) {
            refill(&e->b, now_us, REQLOG_REFUSALS_ADDR_PER_S);
            return &e->b;
        }
        if (e->b.t_us)
            refill(&e->b, now_us, REQLOG_REFUSALS_ADDR_PER_S);
        if (!e->b.t_us || e->b.used <= 0) { /* empty, or refilled: nothing to forget */
            if (!take || take->b.used > 0)
                take = e;
        } else if (!take || (take->b.used > 0 && e->b.t_us < take->b.t_us)) {
            take = e;
        }
    }
    memcpy(take->addr, peer, REQ_PEER_BYTES);
    take->b = (reqlog_budget){.used = 0, .t_us = now_us};
    return &take->b;
}

/* At most once every REQLOG_UNLOGGED_REPORT_S: how many refusals were not logged since the last
 * line (the first line comes at the first of them and says what the budget is). */
static void report_unlogged(reqlog_refusals *f, uint64_t now_us)
{
    if (!f->unlogged ||
        (f->reported_us && now_us - f->reported_us < REQLOG_UNLOGGED_REPORT_S * 1000000ull))
        return;
    if (!f->reported_us)
        fprintf(stderr,
                "inflight: request log: refused requests past the budget of %d rows per client "
                "address (then %d a second) and %d in all (then %d a second) are not written; "
                "counted in inflight_request_log_refusals_skipped_total and here at most every "
                "%d s\n",
                REQLOG_REFUSALS_ADDR_BURST, REQLOG_REFUSALS_ADDR_PER_S, REQLOG_REFUSALS_ALL_BURST,
                REQLOG_REFUSALS_ALL_PER_S, REQLOG_UNLOGGED_REPORT_S);
    fprintf(stderr, "inflight: request log: %llu refused request%s not logged in %.1f s\n",
            (unsigned long long)f->unlogged, f->unlogged == 1 ? "" : "s",
            (double)(now_us - f->unlogged_since) / 1e6);
    f->unlogged = 0;
    f->reported_us = now_us;
}

int reqlog_refusal_admit(reqlog *lg, const uint8_t peer[REQ_PEER_BYTES], uint64_t now_us)
{
    reqlog_refusals *f = &lg->refusals;
    reqlog_budget *a = addr_budget(f, peer, now_us);
    refill(&f->all, now_us, REQLOG_REFUSALS_ALL_PER_S);
    int ok =
        a->used + 1 <= REQLOG_REFUSALS_ADDR_BURST && f->all.used + 1 <= REQLOG_REFUSALS_ALL_BURST;
    if (ok) {
        a->used += 1;
        f->all.used += 1;
    } else if (!f->unlogged++) {
        f->unlogged_since = now_us;
    }
    report_unlogged(f, now_us);
    return ok;
}

void reqlog_session_row(reqlog *lg, req_owner *o)
{
    if (!o->session_row.session)
        return;
    if (lg->db)
        ifl_dblog_session_open(lg->db, &o->session_row);
    if (o->session_logged)
        *o->session_logged = 1;
    o->session_row.session = NULL;
}

void reqlog_step(reqlog *lg, const ifl_step_record *st)
{
    int pol = (int)st->policy;
    if (!lg->db || st->t_start < lg->last_step_logged[pol] + 100000)
        return;
    lg->last_step_logged[pol] = st->t_start;
    ifl_dblog_step rec = {.at_ms = reqlog_unix_ms(lg, st->t_start),
                          .policy = ifl_policy_name(st->policy),
                          .step = st->step,
                          .batch_size = st->n_seqs,
                          .prefill_tokens = st->prefill_tokens,
                          .decode_tokens = st->decode_tokens,
                          .running = st->running,
                          .waiting = st->waiting,
                          .kv_used = st->kv_used,
                          .step_ms = st->ms};
    ifl_dblog_step_sample(lg->db, &rec);
}
