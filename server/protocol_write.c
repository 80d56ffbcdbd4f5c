/* protocol_write.c: the server's frames of the protocol (protocol.h): one function per frame,
 * appending to a strbuf in the documented field order (docs/protocol.md; test_frames checks every
 * example there against these). */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "protocol.h"

static void put_str(strbuf *sb, const char *s)
{
    sb_json_str(sb, s, strlen(s));
}

/* ,"id":"..." or ,"id":null */
static void put_id(strbuf *sb, const char *id)
{
    sb_puts(sb, ",\"id\":");
    if (id)
        put_str(sb, id);
    else
        sb_puts(sb, "null");
}

void proto_write_hello(strbuf *sb, const proto_hello *h)
{
    sb_puts(sb, "{\"type\":\"hello\",\"session\":");
    put_str(sb, h->session);
    sb_puts(sb, ",\"server\":");
    put_str(sb, h->server);
    sb_puts(sb, ",\"model\":{\"name\":");
    put_str(sb, h->model_name);
    sb_printf(sb, ",\"n_layer\":%d,\"n_head\":%d,\"n_embd\":%d,\"n_ctx\":%d,\"vocab_size\":%d,",
              h->n_layer, h->n_head, h->n_embd, h->n_ctx, h->n_vocab);
    sb_puts(sb, "\"weights\":");
    put_str(sb, h->weights);
    sb_puts(sb, ",\"device\":");
    put_str(sb, h->device);
    sb_puts(sb, ",\"isa\":");
    put_str(sb, h->isa);
    sb_printf(sb,
              "},\"policies\":[\"iterative\",\"static\"],\"limits\":{\"max_context\":%d,"
              "\"max_tokens\":%d,\"max_message_bytes\":%d,\"max_requests_in_flight\":%d,"
              "\"max_stop\":%d,\"max_stop_bytes\":%d,\"max_batch\":%d,\"max_queue\":%d,"
              "\"max_outbox_bytes\":%d},",
              h->n_ctx, h->max_tokens, h->max_message, h->max_inflight, IFL_MAX_STOPS,
              IFL_MAX_STOP_BYTES, h->max_batch, h->max_queue, h->max_outbox);
    proto_limits lim = {.max_tokens = h->max_tokens,
                        .n_vocab = h->n_vocab,
                        .def_max_tokens = h->def_max_tokens,
                        .def_temperature = h->def_temperature,
                        .def_top_k = h->def_top_k,
                        .def_top_p = h->def_top_p,
                        .def_truncate = h->def_truncate};
    sb_puts(sb, "\"defaults\":{\"model\":\"iterative\"");
    params_write_server_defaults(sb, &lim);
    sb_puts(sb, "},\"params\":");
    params_write_json(sb, &lim);
    sb_puts(sb, ",");
    sb_printf(sb, "\"user_key\":%s,\"history\":", h->user_key ? "true" : "false");
    put_str(sb, h->history);
    sb_puts(sb, "}");
}

void proto_write_queued(strbuf *sb, const char *id, ifl_policy policy, uint64_t rid,
                        int32_t position)
{
    sb_puts(sb, "{\"type\":\"queued\"");
    put_id(sb, id);
    sb_printf(sb, ",\"model\":\"%s\",\"rid\":%llu,\"position\":%d}", ifl_policy_name(policy),
              (unsigned long long)rid, position);
}

void proto_write_started(strbuf *sb, const char *id, ifl_policy policy, uint64_t rid,
                         int32_t prompt_tokens, int32_t cached_tokens, int32_t trimmed_messages,
                         int32_t trimmed_tokens, uint64_t seed)
{
    sb_puts(sb, "{\"type\":\"started\"");
    put_id(sb, id);
    sb_printf(sb,
              ",\"model\":\"%s\",\"rid\":%llu,\"prompt_tokens\":%d,\"cached_tokens\":%d,"
              "\"trimmed_messages\":%d,\"trimmed_tokens\":%d,\"seed\":%llu}",
              ifl_policy_name(policy), (unsigned long long)rid, prompt_tokens, cached_tokens,
              trimmed_messages, trimmed_tokens, (unsigned long long)seed);
}

void proto_put_logprob(strbuf *sb, float x)
{
    if (isfinite(x))
        sb_printf(sb, "%.9g", (double)x);
    else
        sb_puts(sb, "null");
}

void proto_write_token(strbuf *sb, const char *id, const req_token *t, int32_t n_choices)
{
    sb_puts(sb, "{\"type\":\"token\"");
    put_id(sb, id);
    if (n_choices > 1)
        sb_printf(sb, ",\"choice\":%d", t->choice);
    sb_printf(sb, ",\"index\":%d,\"token\":%d,\"text\":", t->index, t->token);
    sb_json_str(sb, t->text ? t->text : "", t->text ? t->len : 0);
    if (t->lp) {
        sb_puts(sb, ",\"logprob\":");
        proto_put_logprob(sb, t->lp->logprob);
        sb_puts(sb, ",\"top\":[");
        for (int32_t k = 0; k < t->lp->n_top; k++) {
            sb_printf(sb, "%s[%d,", k ? "," : "", t->lp->top[k].token);
            proto_put_logprob(sb, t->lp->top[k].logprob);
            sb_puts(sb, "]");
        }
        sb_puts(sb, "]");
    }
    sb_puts(sb, "}");
}

void proto_write_done(strbuf *sb, const char *id, const req_result *res)
{
    sb_puts(sb, "{\"type\":\"done\"");
    put_id(sb, id);
    if (res->is_choice)
        sb_printf(sb, ",\"choice\":%d", res->choice);
    sb_printf(sb,
              ",\"finish_reason\":\"%s\",\"usage\":{\"prompt_tokens\":%d,"
              "\"completion_tokens\":%d,\"cached_tokens\":%d,\"trimmed_messages\":%d,"
              "\"trimmed_tokens\":%d},\"timing\":{\"queue_ms\":",
              ifl_finish_name(res->finish), res->prompt_tokens, res->completion_tokens,
              res->cached_tokens, res->trimmed_messages, res->trimmed_tokens);
    sb_json_num(sb, res->queue_ms, 3);
    sb_puts(sb, ",\"ttft_ms\":");
    if (res->ttft_ms >= 0)
        sb_json_num(sb, res->ttft_ms, 3);
    else
        sb_puts(sb, "null");
    sb_puts(sb, ",\"total_ms\":");
    sb_json_num(sb, res->total_ms, 3);
    sb_puts(sb, ",\"tokens_per_s\":");
    sb_json_num(sb, res->tokens_per_s, 2);
    sb_puts(sb, "}");
    if (res->message) {
        sb_puts(sb, ",\"message\":");
        put_str(sb, res->message);
    }
    sb_puts(sb, "}");
}

void proto_write_error(strbuf *sb, const char *id, ifl_code code, const char *message,
                       int32_t retry_after_ms)
{
    sb_puts(sb, "{\"type\":\"error\"");
    put_id(sb, id);
    sb_puts(sb, ",\"code\":");
    put_str(sb, ifl_code_name(code));
    sb_puts(sb, ",\"message\":");
    put_str(sb, message);
    if (retry_after_ms > 0)
        sb_printf(sb, ",\"retry_after_ms\":%d", retry_after_ms);
    sb_puts(sb, "}");
}

void proto_write_step(strbuf *sb, const ifl_step_record *st, double t_ms)
{
    sb_printf(sb,
              "{\"type\":\"step\",\"model\":\"%s\",\"step\":%llu,\"t_ms\":%.3f,\"ms\":%.3f,"
              "\"prefill_tokens\":%d,\"decode_tokens\":%d,\"running\":%d,\"waiting\":%d,"
              "\"kv_used\":%d,\"kv_total\":%d,\"seqs\":[",
              ifl_policy_name(st->policy), (unsigned long long)st->step, t_ms, st->ms,
              st->prefill_tokens, st->decode_tokens, st->running, st->waiting, st->kv_used,
              st->kv_total);
    for (int32_t i = 0; i < st->n_seqs; i++) {
        sb_printf(sb, "%s[%llu,%d", i ? "," : "", (unsigned long long)st->request_ids[i],
                  st->is_prefill[i] ? 1 : 0);
        if (st->cached && st->cached[i] > 0) /* the run after a cached prefix of that many */
            sb_printf(sb, ",%d", st->cached[i]);
        sb_puts(sb, "]");
    }
    sb_puts(sb, "],\"dropped\":");
}

void proto_write_step_end(strbuf *sb, uint64_t dropped)
{
    sb_printf(sb, "%llu}", (unsigned long long)dropped);
}

void proto_write_subscription(strbuf *sb, int subscribed)
{
    sb_printf(sb, "{\"type\":\"%s\",\"topic\":\"steps\"}",
              subscribed ? "subscribed" : "unsubscribed");
}

void proto_write_pong(strbuf *sb, const char *id, int64_t time_ms)
{
    sb_puts(sb, "{\"type\":\"pong\"");
    if (id)
        put_id(sb, id);
    sb_printf(sb, ",\"time_ms\":%lld}", (long long)time_ms);
}
