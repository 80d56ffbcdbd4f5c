/* request_prompt.h: a request's prompt as the model is given it, for the request layer
 * (request.c): the text tokenized (or the client's token ids checked against the vocabulary), a
 * chat's oldest turns left out when it does not fit (truncate; chat_trim.h decides, the lines of
 * chat_template.h are encoded one by one so the kept ones need no second encoding), a plain
 * prompt's first tokens dropped with truncate_prompt_tokens, and the check against the context,
 * whose refusals name the value that would fit. Service thread; what it is not: the refusal
 * itself (request.c answers and logs it). */
#ifndef IFL_REQUEST_PROMPT_H
#define IFL_REQUEST_PROMPT_H

#include "request.h"
#include "runtime.h"

/* Why a prompt was refused. */
typedef struct {
    ifl_code code;
    char msg[IFL_ERR_MAX + 160];
} req_refusal;

/* The prompt's tokens into *ids (empty on entry); sets r's prompt_tokens, trimmed counts, echo ids
 * and, for a trimmed chat whose log copy is `text`, that copy to what the model is given. 0, or -1
 * with *why and ids freed. */
int req_prompt_tokens(const ifl_runtime *rt, srv_req *r, const req_params *p, const char *text,
                      size_t len, ifl_tokens *ids, req_refusal *why);

#endif
