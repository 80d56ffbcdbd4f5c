/* test_chat_trim.c: the trimming of long conversations (server/chat_trim.h) and what it rests on.
 * Checked:
 *   - the rule on hand-made conversations: nothing trimmed when it fits, never a system message nor
 *     the newest user turn, the kept part at most `keep` of the room after a trim and beginning
 *     with a user message, the refusal when the newest turn alone does not fit, trim 0;
 *   - stability, the point of the large steps: over a conversation grown turn by turn (each turn
 *     the conversation so far, its reply and a new user message), the cut of every turn is the
 *     cut of the turn before unless that turn's kept part no longer fits, and then it only moves
 *     forward; the turns between two trims therefore share their kept prefix, and a trim happens
 *     at most once per ~half the room of new tokens;
 *   - against an independent reference: a plain simulation that keeps the cut between requests
 *     (what a stateful server would do) gives the same cuts as the stateless replay;
 *   - the chat template's lines (chat_template.h): the prompt's tokens are the lines' tokens one
 *     after another, with the real GPT-2 vocabulary, on conversations with spaces, newlines,
 *     digits, punctuation and non-ASCII text at the ends of their contents; and the log's copy of
 *     the messages (messages_json) parses back to the contents as sent.
 * Usage: test_chat_trim <vocab-dir>. */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "chat_template.h"
#include "chat_trim.h"
#include "rng.h"
#include "testutil.h"
#include "tokenizer.h"

#define S CHAT_ROLE_SYSTEM
#define U CHAT_ROLE_USER
#define A CHAT_ROLE_ASSISTANT

static int32_t plan_of(const chat_turn *t, int32_t n, int32_t room, int trim, chat_trim_plan *p)
{
    return chat_trim(t, n, 2, room, trim, CHAT_TRIM_KEEP, p);
}

/* Hand-made conversations: what is kept and why. */
static void check_rule(void)
{
    chat_trim_plan p;
    /* fits: nothing left out */
    chat_turn a[] = {{10, S}, {10, U}, {10, A}, {10, U}};
    CHECK(plan_of(a, 4, 42, 1, &p) == 0 && p.first == 0 && p.trimmed_messages == 0 &&
          p.trimmed_tokens == 0 && p.prompt_tokens == 42 && p.newest == 3);
    /* one over: down to at most half the room (20), from a user message: system + the newest */
    CHECK(plan_of(a, 4, 41, 1, &p) == 0);
    CHECKF(p.first == 3 && p.trimmed_messages == 2 && p.trimmed_tokens == 20 &&
               p.prompt_tokens == 22,
           "first %d trimmed %d/%d prompt %d", p.first, p.trimmed_messages, p.trimmed_tokens,
           p.prompt_tokens);
    /* trim 0: the whole, refused when over */
    CHECK(plan_of(a, 4, 41, 0, &p) == -1 && p.first == 0 && p.prompt_tokens == 42);
    /* the newest user turn alone (with the system message) over the room: refused */
    chat_turn b[] = {{10, S}, {5, U}, {5, A}, {40, U}};
    CHECK(plan_of(b, 4, 45, 1, &p) == -1 && p.newest == 3 && p.prompt_tokens == 52);
    /* a system message in the middle stays; the kept part begins with a user message */
    chat_turn c[] = {{4, U}, {4, A}, {6, S}, {4, U}, {4, A}, {4, U}, {4, A}, {4, U}};
    CHECK(plan_of(c, 8, 30, 1, &p) == 0);
    CHECKF(p.prompt_tokens <= 15 && (p.first == 8 - 1 || c[p.first].role == U),
           "first %d prompt %d", p.first, p.prompt_tokens);
    int32_t want = 2 + 6;
    for (int32_t i = p.first; i < 8; i++)
        if (c[i].role != S)
            want += c[i].tokens;
    CHECKF(p.prompt_tokens == want, "prompt %d, kept lines and suffix %d", p.prompt_tokens, want);
    /* the last message an assistant's (a continuation): the newest user turn and it stay */
    chat_turn d[] = {{10, U}, {10, A}, {10, U}, {30, A}};
    CHECK(plan_of(d, 4, 50, 1, &p) == 0 && p.first == 2 && p.newest == 2 && p.prompt_tokens == 42);
    /* no user message at all: only the last message must stay */
    chat_turn e[] = {{10, S}, {30, A}, {30, A}};
    CHECK(plan_of(e, 3, 50, 1, &p) == 0 && p.first == 2 && p.prompt_tokens == 42);
}

/* The stateful reference: the cut kept between the requests of one conversation, moved only when
 * the request's prompt overflows, exactly as the rule says in words. */
typedef struct {
    int32_t cut;
} stateful;

static void stateful_request(stateful *st, const chat_turn *t, int32_t n, int32_t suffix,
                             int32_t room, double keep)
{
    int32_t newest = n - 1;
    while (newest > 0 && t[newest].role != U)
        newest--;
    int64_t total = suffix;
    for (int32_t i = 0; i < n; i++)
        if (t[i].role == S || i >= st->cut)
            total += t[i].tokens;
    if (total <= room)
        return;
    int64_t target = (int64_t)((double)room * keep);
    while (st->cut < newest && total > target) {
        if (t[st->cut].role != S)
            total -= t[st->cut].tokens;
        st->cut++;
    }
    while (st->cut < newest && t[st->cut].role != U) {
        if (t[st->cut].role != S)
            total -= t[st->cut].tokens;
        st->cut++;
    }
}

/* Conversations grown turn by turn: the replay against the stateful reference, and stability. */
static void check_replay(void)
{
    enum { MAX_MSG = 2 + 2 * 200 };
    chat_turn t[MAX_MSG];
    ifl_rng rng;
    ifl_rng_seed(&rng, 51);
    int trims = 0, turns = 0;
    const double keeps[] = {0.25, 0.5, 0.75};
    for (int conv = 0; conv < 60; conv++) {
        double keep = keeps[conv % 3];
        int32_t room = 64 + (int32_t)(ifl_rng_next(&rng) % 900), suffix = 2, n = 0;
        if (conv % 2)
            t[n++] = (chat_turn){.tokens = 1 + (int32_t)(ifl_rng_next(&rng) % 20), .role = S};
        stateful st = {0};
        int32_t prev_first = 0;
        for (int turn = 0; turn < 200 && n + 2 <= MAX_MSG; turn++) {
            if (turn > 0) /* the reply to the turn before */
                t[n++] = (chat_turn){.tokens = 1 + (int32_t)(ifl_rng_next(&rng) % 40), .role = A};
            int32_t user = 1 + (int32_t)(ifl_rng_next(&rng) % 30);
            t[n++] = (chat_turn){.tokens = user, .role = U};
            chat_trim_plan p;
            int rc = chat_trim(t, n, suffix, room, 1, keep, &p);
            stateful_request(&st, t, n, suffix, room, keep);
            turns++;
            CHECKF(p.first == st.cut, "conv %d turn %d: replay cut %d, stateful %d", conv, turn,
                   p.first, st.cut);
            CHECKF(p.first >= prev_first, "conv %d turn %d: the cut went back from %d to %d", conv,
                   turn, prev_first, p.first);
            /* the cut moves only when the turn before's kept part and this turn's new messages
             * overflow (else the two share the kept prefix: the prefix cache finds it) */
            if (p.first != prev_first) {
                trims++;
                int64_t before = suffix;
                for (int32_t i = 0; i < n; i++)
                    if (t[i].role == S || i >= prev_first)
                        before += t[i].tokens;
                CHECKF(before > room, "conv %d turn %d: moved the cut though %lld fit %d", conv,
                       turn, (long long)before, room);
                /* and then to at most keep of the room, unless only the newest turn is left */
                CHECKF(p.prompt_tokens <= (int64_t)((double)room * keep) || p.first == p.newest,
                       "conv %d turn %d: kept %d after a trim (room %d, keep %.2f)", conv, turn,
                       p.prompt_tokens, room, keep);
            }
            CHECKF(rc == 0 ? p.prompt_tokens <= room : p.first == p.newest,
                   "conv %d turn %d: rc %d prompt %d room %d first %d newest %d", conv, turn, rc,
                   p.prompt_tokens, room, p.first, p.newest);
            prev_first = p.first;
        }
    }
    CHECKF(trims > 100, "only %d trims over %d turns: the check saw too few", trims, turns);
    printf("  replay: %d conversations, %d turns, %d trims, every cut the stateful one's\n", 60,
           turns, trims);
}

/* The contents the tokenizer check renders: their ends are where a line's tokens could run into
 * the next line's. */
static const char *const CONTENTS[] = {
    "Hello", " Hello there.", "ends with a space ", "ends with spaces   ", "ends with a newline\n",
    "two newlines\n\n", "digits 12345", "12", "punctuation?!", "'s", "café", " naïve ☃",
    "tab\tinside\t", "x", "  leading spaces", "\nleading newline", "émoji 🙂", "a:b:c", "...",
};

static void check_lines(const char *vocab)
{
    ifl_err err;
    ifl_tokenizer *tok = NULL;
    int loaded = ifl_tokenizer_load(&tok, vocab, &err) == 0;
    CHECKF(loaded, "vocabulary %s: %s", vocab, err.msg);
    if (!tok)
        return;
    static const char *const ROLES[] = {"system", "user", "assistant", "developer"};
    const int n_contents = (int)(sizeof CONTENTS / sizeof CONTENTS[0]);
    ifl_rng rng;
    ifl_rng_seed(&rng, 7);
    int convs = 0;
    for (int conv = 0; conv < 200; conv++) {
        int n = 1 + (int)(ifl_rng_next(&rng) % 8);
        cJSON *msgs = cJSON_CreateArray();
        for (int i = 0; i < n; i++) {
            cJSON *m = cJSON_CreateObject();
            cJSON_AddStringToObject(m, "role", ROLES[ifl_rng_next(&rng) % 4]);
            cJSON_AddStringToObject(m, "content", CONTENTS[ifl_rng_next(&rng) % n_contents]);
            cJSON_AddItemToArray(msgs, m);
        }
        strbuf sb;
        sb_init(&sb, 0);
        req_chat *c = NULL;
        proto_error pe;
        memset(&pe, 0, sizeof pe);
        int rc = chat_render(msgs, &sb, &c, &pe);
        CHECKF(rc == 0 && c && c->n == n, "conv %d: render: %s", conv, pe.message);
        if (rc == 0 && c) {
            ifl_tokens whole = {0}, lines = {0};
            CHECK(ifl_tokenizer_encode(tok, sb_text(&sb), sb.len, 0, &whole, &err) == 0);
            size_t at[8 + 2];
            CHECK(chat_encode(tok, sb_text(&sb), c, &lines, at, &err) == 0);
            for (int i = 0; i < n; i++)
                CHECK(c->lines[i].off + c->lines[i].len <= c->suffix_off && at[i] <= at[i + 1]);
            CHECK(!strcmp(sb_text(&sb) + c->suffix_off, CHAT_SUFFIX));
            CHECKF(whole.n == lines.n &&
                       !memcmp(whole.ids, lines.ids, whole.n * sizeof *whole.ids),
                   "conv %d: the prompt's %zu tokens are not its lines' %zu", conv, whole.n,
                   lines.n);
            /* the log's copy: the contents as sent, roles by name (developer as system) */
            cJSON *back = cJSON_Parse(c->messages_json);
            CHECKF(cJSON_IsArray(back) && cJSON_GetArraySize(back) == n, "conv %d: %s", conv,
                   c->messages_json);
            for (int i = 0; back && i < n; i++) {
                const cJSON *got = cJSON_GetArrayItem(back, i), *sent = cJSON_GetArrayItem(msgs, i);
                const char *role = cJSON_GetObjectItem(sent, "role")->valuestring;
                CHECK(!strcmp(cJSON_GetObjectItem(got, "content")->valuestring,
                              cJSON_GetObjectItem(sent, "content")->valuestring));
                CHECK(!strcmp(cJSON_GetObjectItem(got, "role")->valuestring,
                              strcmp(role, "developer") ? role : "system"));
            }
            cJSON_Delete(back);
            ifl_tokens_free(&whole);
            ifl_tokens_free(&lines);
            convs++;
        }
        req_chat_free(c);
        sb_free(&sb);
        cJSON_Delete(msgs);
    }
    /* content given as parts is joined; a bad role is refused naming the message */
    cJSON *bad = cJSON_Parse("[{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"a\"},"
                             "{\"type\":\"text\",\"text\":\"b\"}]},{\"role\":\"tool\",\"content\":"
                             "\"x\"}]");
    strbuf sb;
    sb_init(&sb, 0);
    req_chat *c = NULL;
    proto_error pe;
    memset(&pe, 0, sizeof pe);
    CHECK(chat_render(bad, &sb, &c, &pe) == -1 && c == NULL &&
          !strcmp(pe.param, "messages[1].role"));
    sb_free(&sb);
    cJSON_Delete(bad);
    ifl_tokenizer_free(tok);
    printf("  lines: %d conversations, each prompt's tokens its lines' tokens\n", convs);
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: test_chat_trim <vocab-dir>\n");
        return 2;
    }
    check_rule();
    check_replay();
    check_lines(argv[1]);
    if (test_failures) {
        fprintf(stderr, "test_chat_trim: %d checks failed\n", test_failures);
        return 1;
    }
    printf("test_chat_trim: all checks passed\n");
    return 0;
}
