/* reqlog.c: the stderr line and the SQLite records of requests and steps (reqlog.h). */
#include "reqlog.h"

#include <stdio.h>
#include <string.h>

double reqlog_unix_ms(const reqlog *lg, uint64_t mono_us)
{
    if (!mono_us)
        return 0;
    return lg->epoch_ms_at_t0 + ((double)mono_us - (double)lg->t0_us) / 1e3;
}

void reqlog_params_json(const req_params *p, uint64_t seed, char *out, size_t cap)
{
    strbuf sb;
    sb_init(&sb, 0);
    sb_printf(&sb,
              "{\"max_tokens\":%d,\"temperature\":%.9g,\"top_k\":%d,\"top_p\":%.9g,"
              "\"seed\":%llu,\"stop\":[",
              p->max_tokens, p->temperature, p->top_k, p->top_p, (unsigned long long)seed);
    for (int i = 0; i < p->n_stop; i++) {
        if (i)
            sb_puts(&sb, ",");
        sb_json_str(&sb, p->stop[i], strlen(p->stop[i]));
    }
    sb_printf(&sb, "],\"ignore_eos\":%s}", p->ignore_eos ? "true" : "false");
    snprintf(out, cap, "%s", sb_ok(&sb) && sb.len < cap ? sb_text(&sb) : "{}");
    sb_free(&sb);
}

/* The fields every request record has, finished or refused. */
static ifl_dblog_request base_record(const reqlog *lg, const srv_req *r, char session[17])
{
    snprintf(session, 17, "%016llx", (unsigned long long)r->session);
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
    };
}

static void stderr_line(const reqlog *lg, const srv_req *r, const req_result *res, int owner_gone)
{
    if (!lg->lines)
        return;
    fprintf(stderr,
            "inflight: request %016llx/%s policy=%s prompt_tokens=%d tokens=%d finish=%s "
            "queue_ms=%.1f ttft_ms=%.1f total_ms=%.1f tokens_per_s=%.1f%s%s%s\n",
            (unsigned long long)r->session, r->id, ifl_policy_name(r->policy), res->prompt_tokens,
            res->completion_tokens, ifl_finish_name(res->finish), res->queue_ms,
            res->ttft_ms < 0 ? 0 : res->ttft_ms, res->total_ms, res->tokens_per_s,
            owner_gone ? " (connection closed)" : "", res->message ? " error=" : "",
            res->message ? res->message : "");
}

void reqlog_finished(reqlog *lg, const srv_req *r, const ifl_event *done, const req_result *res,
                     int owner_gone)
{
    stderr_line(lg, r, res, owner_gone);
    if (!lg->db)
        return;
    char session[17];
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
    q.n_offsets = r->offsets ? r->n_tokens : 0;
    ifl_dblog_request_done(lg->db, &q);
}

void reqlog_refused(reqlog *lg, const srv_req *r, ifl_code code)
{
    if (!lg->db)
        return;
    char session[17];
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

int reqlog_budget_take(reqlog_budget *b, uint64_t now_us)
{
    if (!b)
        return 1;
    if (b->t_us) {
        double refill = (double)(now_us - b->t_us) * 1e-6 * REQLOG_REFUSALS_PER_S;
        b->used = b->used > refill ? b->used - refill : 0;
    }
    b->t_us = now_us;
    if (b->used + 1 > REQLOG_REFUSALS_BURST)
        return 0;
    b->used += 1;
    return 1;
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
