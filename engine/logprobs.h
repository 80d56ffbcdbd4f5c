/* logprobs.h: log-probabilities of tokens from a row of logits, as clients ask for them (OpenAI's
 * `logprobs`/`top_logprobs`, `echo` with prompt scoring, lm-evaluation-harness's loglikelihood):
 * the log-softmax of the row at one token, and the row's best tokens with theirs.
 *
 * Values are the log-softmax of the model's raw logits: before temperature, penalties, logit_bias
 * and bans (vLLM's default, "raw logprobs"), so that a score does not depend on how it was
 * sampled. The row's log-sum-exp is accumulated so that a logprob is within 1e-5 of the float64
 * value of the same float row; ties among the best go to the lower token id, so the top list does
 * not depend on the kernel family or the thread count. */
#ifndef IFL_LOGPROBS_H
#define IFL_LOGPROBS_H

#include <stdint.h>

#define IFL_MAX_TOP_LOGPROBS 20 /* OpenAI's limit on top_logprobs (and completions' logprobs) */

typedef struct {
    int32_t token;
    float logprob;
} ifl_token_logprob;

/* One position's entry. */
typedef struct {
    int32_t token; /* the token scored (drawn, or the prompt's next token) */
    float logprob; /* its log-softmax in the raw row */
    int32_t n_top; /* entries in top */
    ifl_token_logprob top[IFL_MAX_TOP_LOGPROBS]; /* the n_top best of the row, best first */
} ifl_logprob;

/* A row's log-softmax without a token yet: its log-sum-exp and its n_top best (n_top 0 ..
 * IFL_MAX_TOP_LOGPROBS). out->token is -1 and out->logprob 0 until ifl_logprob_set_token. */
void ifl_logprob_row(const float *row, int32_t n_vocab, int32_t n_top, ifl_logprob *out,
                     float *lse);
/* The entry's token: logprob = raw_logit - lse. */
static inline void ifl_logprob_set_token(ifl_logprob *e, int32_t token, float raw_logit, float lse)
{
    e->token = token;
    e->logprob = raw_logit - lse;
}
/* Both at once: the row's entry for token. */
void ifl_logprob_score(const float *row, int32_t n_vocab, int32_t token, int32_t n_top,
                       ifl_logprob *out);

#endif
