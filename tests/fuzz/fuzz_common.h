/* fuzz_common.h: what the libFuzzer targets of tests/fuzz share: the limits of a GPT-2 server
 * (n_ctx 1024, the vocabulary's 50257 tokens, the default sampling settings), and the checks every
 * parse result must pass besides not crashing or leaking: an error has a known code and a message,
 * param and id that are NUL-terminated UTF-8 (they go into JSON frames and WebSocket text frames,
 * which must be UTF-8), the answer the server would write with them is JSON, a text with a \u
 * escape cJSON misreads is never accepted, and accepted parameters lie in their documented ranges.
 * A failed check aborts, which libFuzzer reports as a crash with the input that caused it. */
#ifndef IFL_FUZZ_COMMON_H
#define IFL_FUZZ_COMMON_H

#include <cjson/cJSON.h>
#include <ctype.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "defaults.h"
#include "protocol.h"
#include "strbuf.h"
#include "utf8.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* The served model's name (its directory's), which OpenAI's "model" may give. */
#define FUZZ_SERVED_NAME "gpt2"

static const proto_limits FUZZ_LIM = {.max_tokens = 1023,
                                      .n_vocab = 50257,
                                      .def_max_tokens = IFL_DEFAULT_MAX_NEW_TOKENS,
                                      .def_temperature = IFL_DEFAULT_TEMPERATURE,
                                      .def_top_p = IFL_DEFAULT_TOP_P,
                                      .def_top_k = IFL_DEFAULT_TOP_K};

#define FUZZ_CHECK(cond)                                                                           \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond);               \
            abort();                                                                               \
        }                                                                                          \
    } while (0)

/* s (in a cap-byte array) is NUL-terminated there and valid UTF-8. */
static inline int fuzz_str_ok(const char *s, size_t cap)
{
    size_t n = strnlen(s, cap);
    return n < cap && ifl_utf8_valid(s, n);
}

static inline void fuzz_check_error(const proto_error *e)
{
    FUZZ_CHECK((int)e->code >= 0 && e->code < IFL_N_CODES);
    FUZZ_CHECK(fuzz_str_ok(e->message, sizeof e->message) && e->message[0]);
    FUZZ_CHECK(fuzz_str_ok(e->param, sizeof e->param));
    if (e->has_id)
        FUZZ_CHECK(fuzz_str_ok(e->id, sizeof e->id) && e->id[0]);
}

/* The written answer (sb) is valid UTF-8 and one JSON value; frees sb. */
static inline void fuzz_check_json_out(strbuf *sb)
{
    FUZZ_CHECK(sb_ok(sb));
    const char *t = sb_text(sb);
    FUZZ_CHECK(ifl_utf8_valid(t, sb->len));
    const char *end = NULL;
    cJSON *v = cJSON_ParseWithLengthOpts(t, sb->len, &end, 0);
    FUZZ_CHECK(v != NULL && end == t + sb->len);
    cJSON_Delete(v);
    sb_free(sb);
}

/* Every \u escape of the JSON text t[0..n) has four hex digits. cJSON 1.7 decodes \u with any other
 * characters as U+0000, which cuts the string there ("max_tokens\uzzzz" would read as max_tokens):
 * a text the parser accepts must pass this. */
static inline int fuzz_escapes_ok(const char *t, size_t n)
{
    for (size_t i = 0; i + 1 < n; i++) {
        if (t[i] != '\\')
            continue;
        if (t[i + 1] == 'u') {
            if (i + 5 >= n)
                return 0;
            for (size_t k = 2; k <= 5; k++)
                if (!isxdigit((unsigned char)t[i + k]))
                    return 0;
        }
        i++; /* the escaped character */
    }
    return 1;
}

/* One prompt: non-empty valid UTF-8 text, or (ids_ok) 1 to max_tokens + 1 token ids (each checked
 * against the vocabulary by the request layer, not the parser). */
static inline void fuzz_check_prompt(const char *text, size_t len, const int32_t *ids,
                                     int32_t n_ids, const proto_limits *lim, int ids_ok)
{
    if (ids) {
        FUZZ_CHECK(ids_ok && !text);
        FUZZ_CHECK(n_ids >= 1 && n_ids <= lim->max_tokens + 1); /* (their range: request.c) */
    } else {
        FUZZ_CHECK(text && len >= 1 && strlen(text) == len);
        FUZZ_CHECK(ifl_utf8_valid(text, len));
    }
}

/* Accepted generation parameters: in the ranges of docs/protocol.md. ids_ok: the prompt may be
 * token ids (OpenAI completions) instead of text. batch: the prompts are a batch's (OpenAI
 * completions: checked by the caller), and p holds none of its own. */
static inline void fuzz_check_params(const req_params *p, const proto_limits *lim, int ids_ok,
                                     int batch)
{
    if (batch)
        FUZZ_CHECK(!p->prompt && !p->prompt_ids);
    else
        fuzz_check_prompt(p->prompt, p->prompt_len, p->prompt_ids, p->n_prompt_ids, lim, ids_ok);
    FUZZ_CHECK(p->policy == IFL_POLICY_ITERATIVE || p->policy == IFL_POLICY_STATIC);
    /* 0 only to score a prompt (echo) */
    FUZZ_CHECK(p->max_tokens >= (p->echo ? 0 : 1) && p->max_tokens <= lim->max_tokens);
    FUZZ_CHECK(p->n >= 1 && p->n <= IFL_MAX_CHOICES);
    FUZZ_CHECK(!p->want_logprobs || (p->logprobs >= 0 && p->logprobs <= IFL_MAX_TOP_LOGPROBS));
    FUZZ_CHECK(p->temperature >= 0 && p->temperature <= 2);
    FUZZ_CHECK(p->top_k >= 0 && p->top_k <= lim->n_vocab);
    FUZZ_CHECK(p->top_p > 0 && p->top_p <= 1);
    FUZZ_CHECK(!p->has_seed || p->seed <= 9007199254740991ull);
    FUZZ_CHECK(p->min_tokens >= 0 && p->min_tokens <= p->max_tokens);
    FUZZ_CHECK(p->min_p >= 0 && p->min_p <= 1);
    FUZZ_CHECK(p->presence_penalty >= -2 && p->presence_penalty <= 2);
    FUZZ_CHECK(p->frequency_penalty >= -2 && p->frequency_penalty <= 2);
    FUZZ_CHECK(p->repetition_penalty > 0 && p->repetition_penalty <= IFL_MAX_REPETITION_PENALTY);
    FUZZ_CHECK(p->n_stop_ids >= 0 && p->n_stop_ids <= IFL_MAX_STOP_IDS);
    for (int i = 0; i < p->n_stop_ids; i++)
        FUZZ_CHECK(p->stop_ids[i] >= 0 && p->stop_ids[i] < lim->n_vocab);
    FUZZ_CHECK(p->n_logit_bias >= 0 && p->n_logit_bias <= IFL_MAX_LOGIT_BIAS);
    for (int i = 0; i < p->n_logit_bias; i++)
        FUZZ_CHECK(p->logit_bias[i].id >= 0 && p->logit_bias[i].id < lim->n_vocab &&
                   p->logit_bias[i].bias >= -100 && p->logit_bias[i].bias <= 100);
    FUZZ_CHECK(p->n_stop >= 0 && p->n_stop <= IFL_MAX_STOPS);
    for (int i = 0; i < p->n_stop; i++) {
        size_t n = strnlen(p->stop[i], sizeof p->stop[i]);
        FUZZ_CHECK(n >= 1 && n <= IFL_MAX_STOP_BYTES && ifl_utf8_valid(p->stop[i], n));
    }
}

#endif
