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

#include "protocol.h"
#include "strbuf.h"

#define CHAT_STOP "\nUser:"

struct cJSON;
/* msgs: the "messages" value (a non-empty array of {role, content}; content a string or an array
 * of {"type":"text","text":...} parts). The prompt into sb; -1 with *err naming the field. */
int chat_render(const struct cJSON *msgs, strbuf *sb, proto_error *err);
/* Adds CHAT_STOP to p's stop strings when it is not there and there is room. */
void chat_add_stop(req_params *p);

#endif
