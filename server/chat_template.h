/* chat_template.h: the plain-text chat template GPT-2 is given (it has none of its own), shared by
 * POST /v1/chat/completions and /ws's generate with `messages`, so a conversation continued on
 * either is the same text, and its earlier turns are the same tokens (the prefix cache finds them).
 *
 * Each message becomes a line "System: ...", "User: ..." or "Assistant: ..." (a "developer"
 * message counts as System); a content that already begins with a space (as the model's replies
 * do: " Hello") is not given a second one. Then "Assistant:", where the reply begins. The stop
 * string "\nUser:" is added so the reply ends where the model would begin the user's next turn. */
#ifndef IFL_CHAT_TEMPLATE_H
#define IFL_CHAT_TEMPLATE_H

#include "chat_trim.h"
#include "protocol.h"
#include "strbuf.h"
#include "tokenizer.h"

#define CHAT_STOP "\nUser:"
#define CHAT_SUFFIX "Assistant:" /* after the last message: where the reply begins */

/* A conversation as the request layer trims it: each message's line in the rendered prompt, the
 * suffix after them, and the messages as the log keeps them. */
typedef struct {
    size_t off, len; /* in the prompt */
    chat_role role;
} chat_line;

typedef struct req_chat {
    int32_t n;        /* messages */
    chat_line *lines; /* (n) heap */
    size_t suffix_off; /* CHAT_SUFFIX's offset in the prompt: the rest of it */
    char *messages_json; /* [{"role": ..., "content": "..."}], each content's text parts joined;
                            heap, the log's (req_submit takes it) */
} req_chat;

void req_chat_free(req_chat *c); /* and c itself; NULL is fine */

/* The prompt's tokens (prompt as rendered with c's lines) appended to ids, a line at a time: line
 * i's are ids [at[i], at[i + 1]), the suffix's [at[n], at[n + 1]) (at: n + 2 entries). The same
 * tokens as the whole prompt's: GPT-2's pre-tokenizer starts a piece at each line's label (a letter
 * after a newline), and splits a line's final newline from the whitespace before it (the
 * lookahead of its `\s+(?!\S)` sees the next label), so each line is encoded as its text and then
 * its newline on their own. 0, or -1 (out of memory) with *err. */
int chat_encode(const ifl_tokenizer *tok, const char *prompt, const req_chat *c, ifl_tokens *ids,
                size_t *at, ifl_err *err);

struct cJSON;
/* msgs: the "messages" value (a non-empty array of {role, content}; content a string or an array
 * of {"type":"text","text":...} parts). The prompt into sb and, with chat non-NULL, *chat its
 * lines and the log's copy of the messages (a heap req_chat); -1 with *err naming the field. */
int chat_render(const struct cJSON *msgs, strbuf *sb, req_chat **chat, proto_error *err);
/* The body's "messages" into m->prompt and m->chat (the caller adds CHAT_STOP after params_parse,
 * which sets the stop strings: chat_add_stop); -1 with *err naming the field. */
int chat_parse(const struct cJSON *root, req_params *m, proto_error *err);
/* Adds CHAT_STOP to p's stop strings when it is not there and there is room. */
void chat_add_stop(req_params *p);

#endif
