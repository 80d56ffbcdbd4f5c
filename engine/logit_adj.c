/* logit_adj.c: the seen-tokens record, a row's adjustments as ops and applied in place, and the
 * validation of penalties, logit_bias, stop ids and min_tokens (see logit_adj.h). */
#include "logit_adj.h"

#include <stdlib.h>
#include <string.h>

/* ---- the seen tokens ------------------------------------------------------------------------- */

int ifl_seen_init(ifl_seen *s, int32_t cap, ifl_err *err)
{
    memset(s, 0, sizeof *s);
    if (cap < 1)
        cap = 1;
    uint32_t slots = 16;
    while (slots < 2u * (uint32_t)cap) /* at most half full: short probes */
        slots *= 2;
    s->tok = malloc((size_t)cap * sizeof *s->tok);
    s->slot = calloc(slots, sizeof *s->slot);
    if (!s->tok || !s->slot) {
        ifl_seen_free(s);
        return ifl_err_set(err, "out of memory for the seen tokens of %d ids", cap);
    }
    s->cap = cap;
    s->mask = slots - 1;
    return 0;
}

void ifl_seen_free(ifl_seen *s)
{
    free(s->tok);
    free(s->slot);
    memset(s, 0, sizeof *s);
}

static uint32_t id_hash(int32_t id)
{
    return (uint32_t)id * 0x9E3779B1u; /* Fibonacci hashing: nearby ids spread out */
}

/* The slot holding id, or the empty slot where it would go. */
static uint32_t find_slot(const ifl_seen *s, int32_t id)
{
    uint32_t h = (id_hash(id) >> 7) & s->mask;
    while (s->slot[h] && s->tok[s->slot[h] - 1].id != id)
        h = (h + 1) & s->mask;
    return h;
}

const ifl_seen_tok *ifl_seen_find(const ifl_seen *s, int32_t id)
{
    if (!s->slot)
        return NULL;
    uint32_t h = find_slot(s, id);
    return s->slot[h] ? &s->tok[s->slot[h] - 1] : NULL;
}

void ifl_seen_add(ifl_seen *s, int32_t id, int generated)
{
    uint32_t h = find_slot(s, id);
    if (!s->slot[h]) {
        if (s->n == s->cap)
            return;
        s->tok[s->n] = (ifl_seen_tok){.id = id};
        s->slot[h] = ++s->n;
    }
    ifl_seen_tok *t = &s->tok[s->slot[h] - 1];
    if (generated)
        t->count++;
    else
        t->in_prompt = 1;
}

/* ---- a row's adjustments --------------------------------------------------------------------- */

ifl_logit_op ifl_logit_penalty_op(const ifl_penalties *p, const ifl_seen_tok *t)
{
    float sub = 0.0f;
    if (t->count > 0)
        sub = p->frequency * (float)t->count + p->presence;
    return (ifl_logit_op){.id = t->id,
                          .phase = IFL_LOGIT_PENALTY,
                          .a = ifl_repetition_on(p) ? p->repetition : 0.0f,
                          .b = sub};
}

ifl_logit_op ifl_logit_bias_op(const ifl_logit_bias *b)
{
    return (ifl_logit_op){.id = b->id, .phase = IFL_LOGIT_BIAS, .a = b->bias};
}

static int penalties_apply(const ifl_logit_adj *a)
{
    return a->seen && ifl_penalties_on(&a->pen);
}

int32_t ifl_logit_adj_n_ops(const ifl_logit_adj *a)
{
    return a->n_bias + (penalties_apply(a) ? a->seen->n : 0) + a->n_ban;
}

int32_t ifl_logit_adj_ops(const ifl_logit_adj *a, ifl_logit_op *out)
{
    int32_t n = 0;
    for (int32_t i = 0; i < a->n_bias; i++)
        out[n++] = ifl_logit_bias_op(&a->bias[i]);
    if (penalties_apply(a))
        for (int32_t i = 0; i < a->seen->n; i++)
            out[n++] = ifl_logit_penalty_op(&a->pen, &a->seen->tok[i]);
    for (int32_t i = 0; i < a->n_ban; i++)
        out[n++] = (ifl_logit_op){.id = a->ban[i], .phase = IFL_LOGIT_BAN};
    return n;
}

void ifl_logit_adj_apply(float *row, const ifl_logit_adj *a)
{
    for (int32_t i = 0; i < a->n_bias; i++) {
        ifl_logit_op op = ifl_logit_bias_op(&a->bias[i]);
        row[op.id] = ifl_logit_op_apply(row[op.id], &op);
    }
    if (penalties_apply(a))
        for (int32_t i = 0; i < a->seen->n; i++) {
            ifl_logit_op op = ifl_logit_penalty_op(&a->pen, &a->seen->tok[i]);
            row[op.id] = ifl_logit_op_apply(row[op.id], &op);
        }
    for (int32_t i = 0; i < a->n_ban; i++)
        row[a->ban[i]] = -INFINITY;
}

/* ---- validation ------------------------------------------------------------------------------ */

int ifl_penalties_validate(const ifl_penalties *p, ifl_err *err)
{
    if (!(p->repetition >= 0.0f && p->repetition <= IFL_MAX_REPETITION_PENALTY))
        return ifl_err_set(err, "repetition_penalty %g is outside (0, %g] (0 or 1: off)",
                           (double)p->repetition, (double)IFL_MAX_REPETITION_PENALTY);
    if (!(p->presence >= -2.0f && p->presence <= 2.0f))
        return ifl_err_set(err, "presence_penalty %g is outside [-2, 2]", (double)p->presence);
    if (!(p->frequency >= -2.0f && p->frequency <= 2.0f))
        return ifl_err_set(err, "frequency_penalty %g is outside [-2, 2]", (double)p->frequency);
    return 0;
}

int ifl_logit_bias_validate(const ifl_logit_bias *b, int32_t n, int32_t n_vocab, ifl_err *err)
{
    if (n < 0 || n > IFL_MAX_LOGIT_BIAS)
        return ifl_err_set(err, "logit_bias has %d entries: at most %d", n, IFL_MAX_LOGIT_BIAS);
    for (int32_t i = 0; i < n; i++) {
        if (b[i].id < 0 || b[i].id >= n_vocab)
            return ifl_err_set(err, "logit_bias entry %d: token id %d is outside the vocabulary "
                               "[0, %d)", i, b[i].id, n_vocab);
        if (!(b[i].bias >= -100.0f && b[i].bias <= 100.0f))
            return ifl_err_set(err,
                               "logit_bias entry %d (token %d): bias %g is outside [-100, 100]", i,
                               b[i].id, (double)b[i].bias);
        for (int32_t j = 0; j < i; j++) /* n <= 300: pairs are cheap */
            if (b[j].id == b[i].id)
                return ifl_err_set(err, "logit_bias: token id %d appears twice (entries %d and %d)",
                                   b[i].id, j, i);
    }
    return 0;
}

int ifl_stop_ids_validate(const int32_t *ids, int32_t n, int32_t n_vocab, ifl_err *err)
{
    if (n < 0 || n > IFL_MAX_STOP_IDS)
        return ifl_err_set(err, "stop_token_ids has %d ids: at most %d", n, IFL_MAX_STOP_IDS);
    for (int32_t i = 0; i < n; i++)
        if (ids[i] < 0 || ids[i] >= n_vocab)
            return ifl_err_set(err, "stop_token_ids entry %d is %d, outside the vocabulary [0, %d)",
                               i, ids[i], n_vocab);
    return 0;
}

int ifl_min_tokens_validate(int32_t min_tokens, int32_t max_tokens, ifl_err *err)
{
    if (min_tokens < 0)
        return ifl_err_set(err, "min_tokens %d is negative", min_tokens);
    if (min_tokens > max_tokens)
        return ifl_err_set(err, "min_tokens %d exceeds max_tokens %d", min_tokens, max_tokens);
    return 0;
}
