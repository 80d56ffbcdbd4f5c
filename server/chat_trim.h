/* chat_trim.h: which messages of a conversation the model is given when the whole does not fit its
 * context (the request's `truncate`, the server's --trim; docs/protocol.md "Long conversations").
 *
 * The rule, in large steps so that the turns that follow start with the same kept prefix and find
 * it in the prefix cache (as llama.cpp's context shift keeps n_keep and discards half the rest):
 * when the rendered conversation and max_tokens would not fit, the oldest messages go, never a
 * system message and never the newest user turn (nor what follows it), until what is left is at
 * most `keep` (a share, CHAT_TRIM_KEEP) of the room the prompt has (the context less max_tokens);
 * the cut then moves on to the next user message, so that what the model sees begins with a user
 * turn. The cut stays where it is until the kept part overflows again.
 *
 * Stateless: the cut is replayed from the conversation itself, turn by turn (each user message is
 * where an earlier request of the same conversation ended), so every request of a conversation,
 * on /ws or /v1, from any client, gets the same cut without the server remembering anything, and
 * the cut only moves when the replay overflows. Pure functions: any thread. Part of the
 * inflight_params library, so that `inflight bench --turns` replays the same rule in-process. */
#ifndef IFL_CHAT_TRIM_H
#define IFL_CHAT_TRIM_H

#include <stdint.h>

/* What is left after a trim, as a share of the room (bench --turns' --trim-keep measures others:
 * docs/perf-history.md "Long conversations"). */
#define CHAT_TRIM_KEEP 0.5

typedef enum { CHAT_ROLE_SYSTEM = 0, CHAT_ROLE_USER = 1, CHAT_ROLE_ASSISTANT = 2 } chat_role;

typedef struct {
    int32_t tokens; /* the message's tokens as rendered (its whole line) */
    chat_role role;
} chat_turn;

typedef struct {
    int32_t first;            /* messages [0, first) that are not system ones are left out */
    int32_t trimmed_messages; /* how many those are */
    int32_t trimmed_tokens;   /* and their tokens */
    int32_t prompt_tokens;    /* what the model is given: kept messages and the suffix */
    int32_t newest;           /* the newest user turn (what must stay): its index */
} chat_trim_plan;

/* The plan for messages t[0..n) (n >= 1) followed by suffix_tokens (the template's "Assistant:"),
 * with `room` tokens for the prompt. trim 0: nothing is left out (first 0), the plan says only
 * what the prompt is. Returns 0 when the plan's prompt fits the room; -1 when it does not (with
 * trim: the system messages and the newest user turn alone do not fit). */
int chat_trim(const chat_turn *t, int32_t n, int32_t suffix_tokens, int32_t room, int trim,
              double keep, chat_trim_plan *out);

#endif
