/* chat_trim.c: the trimming rule of long conversations (chat_trim.h). */
#include "chat_trim.h"

#include <math.h>

int chat_trim(const chat_turn *t, int32_t n, int32_t suffix_tokens, int32_t room, int trim,
              double keep, chat_trim_plan *out)
{
    int64_t target = (int64_t)floor((double)room * keep);
    int64_t sys = 0, kept = 0; /* system tokens of [0, j]; other tokens of [k, j] */
    int32_t k = 0, user = -1;  /* the cut; the newest user message so far */
    for (int32_t j = 0; j < n; j++) {
        if (t[j].role == CHAT_ROLE_SYSTEM)
            sys += t[j].tokens;
        else
            kept += t[j].tokens;
        if (t[j].role == CHAT_ROLE_USER)
            user = j;
        /* a checkpoint: an earlier request of the conversation ended here (or this one does) */
        if (!trim || (t[j].role != CHAT_ROLE_USER && j != n - 1))
            continue;
        if (sys + kept + suffix_tokens <= room)
            continue;
        int32_t stay = user >= 0 ? user : j; /* the newest user turn and what follows stay */
        while (k < stay && sys + kept + suffix_tokens > target) {
            if (t[k].role != CHAT_ROLE_SYSTEM)
                kept -= t[k].tokens;
            k++;
        }
        while (k < stay && t[k].role != CHAT_ROLE_USER) { /* begin with a user turn */
            if (t[k].role != CHAT_ROLE_SYSTEM)
                kept -= t[k].tokens;
            k++;
        }
    }
    out->first = k;
    out->trimmed_messages = 0;
    out->trimmed_tokens = 0;
    for (int32_t i = 0; i < k; i++)
        if (t[i].role != CHAT_ROLE_SYSTEM) {
            out->trimmed_messages++;
            out->trimmed_tokens += t[i].tokens;
        }
    out->newest = user >= 0 ? user : n - 1;
    int64_t prompt = sys + kept + suffix_tokens;
    out->prompt_tokens = prompt > INT32_MAX ? INT32_MAX : (int32_t)prompt;
    return prompt <= room ? 0 : -1;
}
