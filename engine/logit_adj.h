/* logit_adj.h: a request's own changes to its row of logits before sampling: logit_bias, the
 * repetition / presence / frequency penalties, and tokens banned for a step (min_tokens keeps EOS
 * and the stop ids away). vLLM v1's order: bias first (z += bias), then repetition for a token
 * seen in the prompt or generated (z / r if z > 0, else z * r), then z -= frequency x count +
 * presence x (count > 0) with count over the generated tokens only, then bans (z = -inf).
 *
 * Only listed ids are touched, never the whole vocabulary: the penalties walk the request's seen
 * tokens (ifl_seen, kept incrementally: each distinct id once), the bias its entries, the bans
 * theirs. Each adjustment is an ifl_logit_op, applied by ifl_logit_op_apply: the one formula the
 * CPU applies to host rows and the CUDA backend applies on the device (this header compiles as C
 * and as CUDA), with every operation rounded on its own (no fused multiply-add), so both give the
 * same logits bit for bit. */
#ifndef IFL_LOGIT_ADJ_H
#define IFL_LOGIT_ADJ_H

#include <math.h>
#include <stdint.h>

#include "error.h"

typedef struct {
    int32_t id;
    float bias;
} ifl_logit_bias;

typedef struct {
    float repetition; /* 0 or 1: off; > 0: a seen logit z becomes z / r if z > 0, else z * r */
    float presence;   /* 0: off; [-2, 2]: z -= presence if the token was generated at least once */
    float frequency;  /* 0: off; [-2, 2]: z -= frequency x times generated */
} ifl_penalties;

#define IFL_MAX_LOGIT_BIAS 300
#define IFL_MAX_STOP_IDS 16
#define IFL_MAX_REPETITION_PENALTY 100.0f /* a sanity bound: vLLM has none, 2 is already strong */

static inline int ifl_repetition_on(const ifl_penalties *p)
{
    return p->repetition != 0.0f && p->repetition != 1.0f;
}

/* 1 when some penalty changes logits. */
static inline int ifl_penalties_on(const ifl_penalties *p)
{
    return ifl_repetition_on(p) || p->presence != 0.0f || p->frequency != 0.0f;
}

/* ---- one adjustment of one token (C and CUDA) ------------------------------------------------ */

typedef enum {
    IFL_LOGIT_BIAS = 0,    /* z += a */
    IFL_LOGIT_PENALTY = 1, /* a != 0: z = z > 0 ? z / a : z * a; then z -= b */
    IFL_LOGIT_BAN = 2,     /* z = -inf */
} ifl_logit_phase;
#define IFL_LOGIT_PHASES 3 /* applied phase by phase: every bias, then penalties, then bans */

typedef struct {
    int32_t id;
    int32_t phase; /* ifl_logit_phase */
    float a, b;
} ifl_logit_op;

#ifdef __CUDACC__
#define IFL_ADJ_HD __host__ __device__
#else
#define IFL_ADJ_HD
#endif
#if defined(__CUDA_ARCH__) /* round each step: nvcc would fuse z * a - b into one FMA */
#define IFL_ADJ_ADD(x, y) __fadd_rn(x, y)
#define IFL_ADJ_SUB(x, y) __fsub_rn(x, y)
#define IFL_ADJ_MUL(x, y) __fmul_rn(x, y)
#define IFL_ADJ_DIV(x, y) __fdiv_rn(x, y)
#else /* C11 without GNU extensions: GCC contracts nothing (-ffp-contract=off) */
#define IFL_ADJ_ADD(x, y) ((x) + (y))
#define IFL_ADJ_SUB(x, y) ((x) - (y))
#define IFL_ADJ_MUL(x, y) ((x) * (y))
#define IFL_ADJ_DIV(x, y) ((x) / (y))
#endif

/* The logit z after op. */
IFL_ADJ_HD static inline float ifl_logit_op_apply(float z, const ifl_logit_op *op)
{
    switch (op->phase) {
    case IFL_LOGIT_BIAS:
        return IFL_ADJ_ADD(z, op->a);
    case IFL_LOGIT_PENALTY:
        if (op->a != 0.0f)
            z = z > 0.0f ? IFL_ADJ_DIV(z, op->a) : IFL_ADJ_MUL(z, op->a);
        return op->b != 0.0f ? IFL_ADJ_SUB(z, op->b) : z;
    default:
        return -INFINITY;
    }
}

#ifdef __cplusplus
extern "C" {
#endif

/* ---- the tokens a request has seen ----------------------------------------------------------- */

typedef struct {
    int32_t id;
    int32_t count;     /* times generated */
    int32_t in_prompt; /* 1: the prompt holds it */
} ifl_seen_tok;

/* Each distinct id once, in order of first sight; an open-addressing table (ids hashed) finds an
 * id's entry. Sized once for the most distinct ids it will hold: adding never allocates. */
typedef struct {
    ifl_seen_tok *tok; /* (cap) */
    int32_t n, cap;
    int32_t *slot; /* (mask + 1): 1 + the index of an entry in tok, 0: empty */
    uint32_t mask;
} ifl_seen;

/* Room for cap distinct ids (cap >= 1). */
int ifl_seen_init(ifl_seen *s, int32_t cap, ifl_err *err);
void ifl_seen_free(ifl_seen *s); /* also of a zeroed, never initialised record */
/* Records one occurrence of id: generated (count + 1) or from the prompt. Beyond cap distinct
 * ids, a new id is dropped (callers size cap from prompt + max_tokens, so it never is). */
void ifl_seen_add(ifl_seen *s, int32_t id, int generated);
/* The entry of id, or NULL. */
const ifl_seen_tok *ifl_seen_find(const ifl_seen *s, int32_t id);

/* ---- one row's adjustments ------------------------------------------------------------------- */

typedef struct {
    ifl_penalties pen;
    const ifl_seen *seen; /* the tokens the penalties look at; NULL: none */
    const ifl_logit_bias *bias;
    int32_t n_bias;
    const int32_t *ban; /* banned this step */
    int32_t n_ban;
} ifl_logit_adj;

/* 1 when applying a may change a logit. */
static inline int ifl_logit_adj_on(const ifl_logit_adj *a)
{
    return a && (a->n_bias > 0 || a->n_ban > 0 || (a->seen && ifl_penalties_on(&a->pen)));
}

/* The op of a seen token (the penalties) and of a bias entry. */
ifl_logit_op ifl_logit_penalty_op(const ifl_penalties *p, const ifl_seen_tok *t);
ifl_logit_op ifl_logit_bias_op(const ifl_logit_bias *b);

/* How many ops ifl_logit_adj_ops writes for a. */
int32_t ifl_logit_adj_n_ops(const ifl_logit_adj *a);
/* a's ops, phase by phase (within a phase every id is distinct, but bans may repeat); returns
 * their number. What a backend that adjusts rows elsewhere (the device) uploads. */
int32_t ifl_logit_adj_ops(const ifl_logit_adj *a, ifl_logit_op *out);

/* Applies a to row (V logits) in place, phase by phase, touching only the ids a lists. */
void ifl_logit_adj_apply(float *row, const ifl_logit_adj *a);

/* ---- validation (messages name the field and the value) -------------------------------------- */

/* repetition_penalty 0 or in (0, IFL_MAX_REPETITION_PENALTY]; presence_penalty and
 * frequency_penalty in [-2, 2]. */
int ifl_penalties_validate(const ifl_penalties *p, ifl_err *err);
/* At most IFL_MAX_LOGIT_BIAS entries, ids in [0, n_vocab), biases in [-100, 100], one per id. */
int ifl_logit_bias_validate(const ifl_logit_bias *b, int32_t n, int32_t n_vocab, ifl_err *err);
/* At most IFL_MAX_STOP_IDS ids, each in [0, n_vocab). */
int ifl_stop_ids_validate(const int32_t *ids, int32_t n, int32_t n_vocab, ifl_err *err);
/* min_tokens in [0, max_tokens]. */
int ifl_min_tokens_validate(int32_t min_tokens, int32_t max_tokens, ifl_err *err);

#ifdef __cplusplus
}
#endif

#endif
