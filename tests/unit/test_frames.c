/* test_frames.c: docs/protocol.md against the code, so the document and the code cannot drift.
 * Every JSON example of the document (```json blocks, and `{...}` spans in the prose) is taken:
 *   - a server frame (hello, queued, started, token, done, error, step, subscribed, unsubscribed,
 *     pong): its values are fed to the frame's writer (protocol.h), whose output must be exactly
 *     the example: the same fields in the same order, the same types and values;
 *   - a client message (generate, cancel, subscribe, unsubscribe, ping): the parser must accept
 *     it and read every field as the example says;
 *   - an answer of the history API ({"scope":..}, {"request":..}, {"error":..}): the example's
 *     request is written into a real SQLite file (the migrations of migrations/), the history
 *     thread (history.h) is asked for it, and its answer must be the example.
 * Also: every code of the error table is in codes.h's registry and the other way round, and every
 * kind of example was seen at least once. A string value "..." in an example is a placeholder:
 * only its type is compared. usage: test_frames docs/protocol.md */
#include <cjson/cJSON.h>
#include <pthread.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "codes.h"
#include "doc_json.h"
#include "db.h"
#include "history.h"
#include "protocol.h"
#include "reqlog.h"
#include "sha256.h"
#include "testutil.h"
#include "util.h"

static int n_checked[32]; /* by example kind (see kinds[]) */
static const char *const kinds[] = {
    "hello",     "queued",      "started",      "token",        "done",        "error",
    "step",      "subscribed",  "unsubscribed", "pong",         "generate",    "cancel",
    "subscribe", "unsubscribe", "ping",         "history list", "history one", "history error"};
#define N_KINDS ((int)(sizeof kinds / sizeof kinds[0]))

static void count_kind(const char *k)
{
    for (int i = 0; i < N_KINDS; i++)
        if (!strcmp(kinds[i], k))
            n_checked[i]++;
}

/* The writer's output (sb) must be the example. */
static void expect_frame(const cJSON *ex, const char *kind, strbuf *sb)
{
    CHECKF(sb_ok(sb), "%s: the writer ran out of memory", kind);
    cJSON *got = sb_ok(sb) ? cJSON_ParseWithLength(sb_text(sb), sb->len) : NULL;
    char where[512] = "not JSON";
    int ok = got && same_json(ex, got, where, sizeof where);
    CHECKF(ok, "%s: the writer's frame %.*s differs from the example: %s", kind,
           (int)(sb->len > 400 ? 400 : sb->len), sb_text(sb) ? sb_text(sb) : "", where);
    if (ok) {
        printf("  %-14s %.100s%s\n", kind, sb_text(sb), sb->len > 100 ? "..." : "");
        count_kind(kind);
    }
    cJSON_Delete(got);
    sb_free(sb);
}

static const char *str(const cJSON *o, const char *k)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    return cJSON_IsString(v) ? v->valuestring : NULL;
}

static double num(const cJSON *o, const char *k)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    return cJSON_IsNumber(v) ? v->valuedouble : -1;
}

static const cJSON *obj(const cJSON *o, const char *k)
{
    return cJSON_GetObjectItemCaseSensitive(o, k);
}

static ifl_policy policy_of(const cJSON *ex)
{
    ifl_policy p = IFL_POLICY_ITERATIVE;
    const char *m = str(ex, "model");
    CHECKF(m && ifl_policy_parse(m, &p) == 0, "model %s", m ? m : "(none)");
    return p;
}

static ifl_finish finish_of(const char *name)
{
    for (int f = 0; f <= IFL_FINISH_ERROR; f++)
        if (name && !strcmp(ifl_finish_name((ifl_finish)f), name))
            return (ifl_finish)f;
    CHECKF(0, "finish_reason %s is not one of the batcher's", name ? name : "(none)");
    return IFL_FINISH_ERROR;
}

/* ---- server frames -------------------------------------------------------------------------- */

static void check_hello(const cJSON *ex)
{
    const cJSON *m = obj(ex, "model"), *l = obj(ex, "limits"), *d = obj(ex, "defaults");
    CHECK(m && l && d);
    if (!m || !l || !d)
        return;
    CHECKF(!strcmp(str(ex, "server") ? str(ex, "server") : "", "inflight " INFLIGHT_VERSION),
           "hello.server is \"%s\" in the document, the build is inflight %s", str(ex, "server"),
           INFLIGHT_VERSION);
    const char *hist = str(ex, "history");
    proto_hello h = {.session = str(ex, "session"),
                     .server = str(ex, "server"),
                     .model_name = str(m, "name"),
                     .weights = str(m, "weights"),
                     .device = str(m, "device"),
                     .isa = str(m, "isa"),
                     .n_layer = (int32_t)num(m, "n_layer"),
                     .n_head = (int32_t)num(m, "n_head"),
                     .n_embd = (int32_t)num(m, "n_embd"),
                     .n_ctx = (int32_t)num(m, "n_ctx"),
                     .n_vocab = (int32_t)num(m, "vocab_size"),
                     .max_tokens = (int32_t)num(l, "max_tokens"),
                     .max_message = (int32_t)num(l, "max_message_bytes"),
                     .max_inflight = (int32_t)num(l, "max_requests_in_flight"),
                     .max_batch = (int32_t)num(l, "max_batch"),
                     .max_queue = (int32_t)num(l, "max_queue"),
                     .max_outbox = (int32_t)num(l, "max_outbox_bytes"),
                     .def_max_tokens = (int32_t)num(d, "max_tokens"),
                     .def_top_k = (int32_t)num(d, "top_k"),
                     .def_temperature = num(d, "temperature"),
                     .def_top_p = num(d, "top_p"),
                     .def_truncate = cJSON_IsTrue(obj(d, "truncate")),
                     .user_key = cJSON_IsTrue(obj(ex, "user_key")),
                     .history = hist};
    CHECKF(num(l, "max_context") == h.n_ctx, "hello: limits.max_context is the model's n_ctx");
    strbuf sb;
    sb_init(&sb, 0);
    proto_write_hello(&sb, &h);
    expect_frame(ex, "hello", &sb);
}

static void check_done(const cJSON *ex)
{
    const cJSON *u = obj(ex, "usage"), *t = obj(ex, "timing");
    CHECK(u && t);
    if (!u || !t)
        return;
    const cJSON *ttft = obj(t, "ttft_ms");
    req_result res = {.is_choice = obj(ex, "choice") != NULL,
                      .choice = (int32_t)num(ex, "choice"),
                      .finish = finish_of(str(ex, "finish_reason")),
                      .prompt_tokens = (int32_t)num(u, "prompt_tokens"),
                      .completion_tokens = (int32_t)num(u, "completion_tokens"),
                      .cached_tokens = (int32_t)num(u, "cached_tokens"),
                      .trimmed_messages = (int32_t)num(u, "trimmed_messages"),
                      .trimmed_tokens = (int32_t)num(u, "trimmed_tokens"),
                      .queue_ms = num(t, "queue_ms"),
                      .ttft_ms = cJSON_IsNumber(ttft) ? ttft->valuedouble : -1,
                      .total_ms = num(t, "total_ms"),
                      .tokens_per_s = num(t, "tokens_per_s"),
                      .message = str(ex, "message")};
    strbuf sb;
    sb_init(&sb, 0);
    proto_write_done(&sb, str(ex, "id"), &res);
    expect_frame(ex, "done", &sb);
}

static void check_step(const cJSON *ex)
{
    const cJSON *seqs = obj(ex, "seqs");
    int n = cJSON_GetArraySize(seqs);
    uint64_t ids[64];
    uint8_t pre[64];
    int32_t cached[64];
    CHECK(n <= 64);
    for (int i = 0; i < n && i < 64; i++) {
        const cJSON *pair = cJSON_GetArrayItem(seqs, i);
        ids[i] = (uint64_t)cJSON_GetArrayItem(pair, 0)->valuedouble;
        pre[i] = (uint8_t)cJSON_GetArrayItem(pair, 1)->valuedouble;
        const cJSON *c = cJSON_GetArrayItem(pair, 2);
        cached[i] = c ? (int32_t)c->valuedouble : 0;
    }
    ifl_step_record st = {.step = (uint64_t)num(ex, "step"),
                          .policy = policy_of(ex),
                          .ms = num(ex, "ms"),
                          .n_seqs = n,
                          .prefill_tokens = (int32_t)num(ex, "prefill_tokens"),
                          .decode_tokens = (int32_t)num(ex, "decode_tokens"),
                          .request_ids = ids,
                          .is_prefill = pre,
                          .cached = cached,
                          .running = (int32_t)num(ex, "running"),
                          .waiting = (int32_t)num(ex, "waiting"),
                          .kv_used = (int32_t)num(ex, "kv_used"),
                          .kv_total = (int32_t)num(ex, "kv_total")};
    strbuf sb;
    sb_init(&sb, 0);
    proto_write_step(&sb, &st, num(ex, "t_ms"));
    proto_write_step_end(&sb, (uint64_t)num(ex, "dropped"));
    expect_frame(ex, "step", &sb);
}

static void check_server_frame(const cJSON *ex, const char *type)
{
    strbuf sb;
    sb_init(&sb, 0);
    const char *id = str(ex, "id");
    if (!strcmp(type, "hello")) {
        sb_free(&sb);
        check_hello(ex);
    } else if (!strcmp(type, "queued")) {
        proto_write_queued(&sb, id, policy_of(ex), (uint64_t)num(ex, "rid"),
                           (int32_t)num(ex, "position"));
        expect_frame(ex, type, &sb);
    } else if (!strcmp(type, "started")) {
        proto_write_started(&sb, id, policy_of(ex), (uint64_t)num(ex, "rid"),
                            (int32_t)num(ex, "prompt_tokens"), (int32_t)num(ex, "cached_tokens"),
                            (int32_t)num(ex, "trimmed_messages"),
                            (int32_t)num(ex, "trimmed_tokens"), (uint64_t)num(ex, "seed"));
        expect_frame(ex, type, &sb);
    } else if (!strcmp(type, "token")) {
        const char *text = str(ex, "text");
        ifl_logprob lp = {.token = (int32_t)num(ex, "token"), .logprob = (float)num(ex, "logprob")};
        const cJSON *top = obj(ex, "top"), *pair;
        cJSON_ArrayForEach(pair, top) /* [[id, logprob], ...] */
        {
            if (lp.n_top < IFL_MAX_TOP_LOGPROBS)
                lp.top[lp.n_top++] = (ifl_token_logprob){
                    .token = (int32_t)cJSON_GetArrayItem(pair, 0)->valuedouble,
                    .logprob = (float)cJSON_GetArrayItem(pair, 1)->valuedouble};
        }
        req_token t = {.choice = (int32_t)num(ex, "choice"),
                       .index = (int32_t)num(ex, "index"),
                       .token = (int32_t)num(ex, "token"),
                       .text = text,
                       .len = text ? strlen(text) : 0,
                       .lp = obj(ex, "logprob") ? &lp : NULL};
        proto_write_token(&sb, id, &t, obj(ex, "choice") ? 2 : 1);
        expect_frame(ex, type, &sb);
    } else if (!strcmp(type, "done")) {
        sb_free(&sb);
        check_done(ex);
    } else if (!strcmp(type, "error")) {
        ifl_code code = IFL_CODE_ENGINE_ERROR;
        CHECKF(str(ex, "code") && ifl_code_parse(str(ex, "code"), &code) == 0,
               "error example: code %s is not in codes.h", str(ex, "code"));
        proto_write_error(&sb, id, code, str(ex, "message") ? str(ex, "message") : "",
                          (int32_t)num(ex, "retry_after_ms"));
        expect_frame(ex, type, &sb);
    } else if (!strcmp(type, "step")) {
        sb_free(&sb);
        check_step(ex);
    } else if (!strcmp(type, "subscribed") || !strcmp(type, "unsubscribed")) {
        proto_write_subscription(&sb, !strcmp(type, "subscribed"));
        expect_frame(ex, type, &sb);
    } else if (!strcmp(type, "pong")) {
        proto_write_pong(&sb, id, (int64_t)num(ex, "time_ms"));
        expect_frame(ex, type, &sb);
    } else {
        sb_free(&sb);
        CHECKF(0, "an example of type \"%s\", which is no frame or message of the protocol", type);
    }
}

/* ---- client messages ------------------------------------------------------------------------ */

static void check_generate(const cJSON *ex, const proto_msg *m)
{
    const req_params *g = &m->gen;
    CHECK(!strcmp(g->id, str(ex, "id")));
    const char *conv = str(ex, "conversation");
    CHECK(!strcmp(g->conversation, conv ? conv : ""));
    if (obj(ex, "messages")) { /* rendered: the template's own test is test_protocol's */
        CHECK(g->prompt && g->prompt_len > 10 &&
              !strcmp(g->prompt + g->prompt_len - 10, "Assistant:"));
        CHECK(g->n_stop >= 1 && !strcmp(g->stop[g->n_stop - 1], "\nUser:"));
        return;
    }
    CHECK(!strcmp(g->prompt, str(ex, "prompt")) && g->prompt_len == strlen(str(ex, "prompt")));
    CHECK(g->policy == policy_of(ex));
    CHECK(g->max_tokens == (int32_t)num(ex, "max_tokens"));
    CHECK(g->temperature == num(ex, "temperature") && g->top_p == num(ex, "top_p"));
    CHECK(g->top_k == (int32_t)num(ex, "top_k"));
    CHECK(g->has_seed && g->seed == (uint64_t)num(ex, "seed"));
    CHECK(g->ignore_eos == cJSON_IsTrue(obj(ex, "ignore_eos")));
    const cJSON *stop = obj(ex, "stop");
    CHECK(g->n_stop == cJSON_GetArraySize(stop));
    for (int i = 0; i < g->n_stop && i < cJSON_GetArraySize(stop); i++)
        CHECK(!strcmp(g->stop[i], cJSON_GetArrayItem(stop, i)->valuestring));
}

static void check_client_message(const char *text, size_t len, const cJSON *ex, const char *type)
{
    static const proto_limits lim = {.max_tokens = 1023,
                                     .n_vocab = 50257,
                                     .def_max_tokens = 64,
                                     .def_temperature = 0.8,
                                     .def_top_p = 0.95,
                                     .def_top_k = 40};
    proto_msg m;
    proto_error e;
    int rc = proto_parse(text, len, &lim, &m, &e);
    CHECKF(rc == 0, "the documented %s message is refused: %s %s", type, ifl_code_name(e.code),
           e.message);
    if (rc == 0) {
        static const char *const names[] = {"generate", "cancel", "subscribe", "unsubscribe",
                                            "ping"};
        CHECKF(!strcmp(names[m.kind], type), "%s parsed as %s", type, names[m.kind]);
        if (m.kind == PROTO_GENERATE)
            check_generate(ex, &m);
        if (str(ex, "id"))
            CHECK(m.has_id && !strcmp(m.id, str(ex, "id")));
        if (m.kind == PROTO_SUBSCRIBE || m.kind == PROTO_UNSUBSCRIBE)
            CHECK(!strcmp(m.topic, str(ex, "topic")));
        printf("  %-14s parsed: %.80s\n", type, text);
        count_kind(type);
    }
    proto_msg_free(&m);
}

/* ---- the history API, through a real database and the history thread ----------------------- */

typedef struct {
    pthread_mutex_t lock;
    pthread_cond_t cond;
    int answered;
} answers;

static void on_answer(void *ud, history_job *job)
{
    (void)job;
    answers *a = ud;
    pthread_mutex_lock(&a->lock);
    a->answered++;
    pthread_cond_broadcast(&a->cond);
    pthread_mutex_unlock(&a->lock);
}

static const char USER_KEY[] = "frames-test-user-key-0001";

/* The key as the server keeps it: SHA-256, hex. */
static void key_hash(char hex[65])
{
    ifl_sha256 h;
    unsigned char d[32];
    ifl_sha256_init(&h);
    ifl_sha256_update(&h, USER_KEY, strlen(USER_KEY));
    ifl_sha256_final(&h, d);
    for (int i = 0; i < 32; i++)
        snprintf(hex + 2 * i, 3, "%02x", d[i]);
}

static void bind_num(sqlite3_stmt *st, int i, const cJSON *v)
{
    if (cJSON_IsNumber(v))
        sqlite3_bind_double(st, i, v->valuedouble);
    else
        sqlite3_bind_null(st, i);
}

static void bind_txt(sqlite3_stmt *st, int i, const cJSON *v)
{
    if (cJSON_IsString(v))
        sqlite3_bind_text(st, i, v->valuestring, -1, SQLITE_TRANSIENT);
    else
        sqlite3_bind_null(st, i);
}

/* Writes the request of an example (the fields of the list's rows, plus the detail's) as the
 * server's writer would. */
static void insert_request(sqlite3 *db, const cJSON *r)
{
    char hash[65];
    key_hash(hash);
    sqlite3_stmt *st = NULL;
    sqlite3_prepare_v2(db,
                       "INSERT OR IGNORE INTO sessions (session, user_key, connected_at) VALUES "
                       "(?1, ?2, ?3)",
                       -1, &st, NULL);
    bind_txt(st, 1, obj(r, "session"));
    sqlite3_bind_text(st, 2, hash, -1, SQLITE_TRANSIENT);
    sqlite3_bind_double(st, 3, num(r, "queued_at_ms") - 1000);
    CHECK(sqlite3_step(st) == SQLITE_DONE);
    sqlite3_finalize(st);
    sqlite3_prepare_v2(db,
                       "INSERT INTO requests (id, session_id, client_id, policy, prompt, params, "
                       "prompt_tokens, completion_tokens, completion, finish_reason, error_code, "
                       "queued_at, admitted_at, first_token_at, finished_at, queue_ms, ttft_ms, "
                       "total_ms, tokens_per_s, conversation, cached_tokens, messages, "
                       "trimmed_messages, trimmed_tokens) VALUES (?1, (SELECT "
                       "id FROM sessions WHERE session = ?2), ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, "
                       "?11, ?12, ?13, ?14, ?15, ?16, ?17, ?18, ?19, ?20, ?21, ?22, ?23, ?24)",
                       -1, &st, NULL);
    sqlite3_bind_int64(st, 1, (int64_t)num(r, "id"));
    bind_txt(st, 2, obj(r, "session"));
    bind_txt(st, 3, obj(r, "client_id"));
    bind_txt(st, 4, obj(r, "policy"));
    bind_txt(st, 5, obj(r, "prompt"));
    char *params = obj(r, "params") ? cJSON_PrintUnformatted(obj(r, "params")) : NULL;
    sqlite3_bind_text(st, 6, params ? params : "{}", -1, SQLITE_TRANSIENT);
    cJSON_free(params);
    bind_num(st, 7, obj(r, "prompt_tokens"));
    bind_num(st, 8, obj(r, "completion_tokens"));
    bind_txt(st, 9, obj(r, "completion"));
    bind_txt(st, 10, obj(r, "finish_reason"));
    bind_txt(st, 11, obj(r, "error_code"));
    bind_num(st, 12, obj(r, "queued_at_ms"));
    bind_num(st, 13, obj(r, "admitted_at_ms"));
    bind_num(st, 14, obj(r, "first_token_at_ms"));
    bind_num(st, 15, obj(r, "finished_at_ms"));
    bind_num(st, 16, obj(r, "queue_ms"));
    bind_num(st, 17, obj(r, "ttft_ms"));
    bind_num(st, 18, obj(r, "total_ms"));
    bind_num(st, 19, obj(r, "tokens_per_s"));
    bind_txt(st, 20, obj(r, "conversation"));
    bind_num(st, 21, obj(r, "cached_tokens"));
    char *msgs = cJSON_IsArray(obj(r, "messages")) ? cJSON_PrintUnformatted(obj(r, "messages"))
                                                   : NULL;
    if (msgs)
        sqlite3_bind_text(st, 22, msgs, -1, SQLITE_TRANSIENT);
    cJSON_free(msgs);
    bind_num(st, 23, obj(r, "trimmed_messages"));
    bind_num(st, 24, obj(r, "trimmed_tokens"));
    CHECKF(sqlite3_step(st) == SQLITE_DONE, "insert: %s", sqlite3_errmsg(db));
    sqlite3_finalize(st);
    const cJSON *offs = obj(r, "token_offsets_us");
    int n = cJSON_GetArraySize(offs);
    if (n > 0) {
        uint32_t *o = test_xmalloc((size_t)n * sizeof *o);
        for (int i = 0; i < n; i++)
            o[i] = (uint32_t)cJSON_GetArrayItem(offs, i)->valuedouble;
        sqlite3_prepare_v2(db,
                           "INSERT INTO request_tokens (request_id, n_tokens, offsets_us) VALUES "
                           "(?1, ?2, ?3)",
                           -1, &st, NULL);
        sqlite3_bind_int64(st, 1, (int64_t)num(r, "id"));
        sqlite3_bind_int(st, 2, n);
        sqlite3_bind_blob(st, 3, o, n * (int)sizeof *o, SQLITE_TRANSIENT);
        CHECK(sqlite3_step(st) == SQLITE_DONE);
        sqlite3_finalize(st);
        free(o);
    }
}

/* The params of an example as the server's log writes them (reqlog.h): the document must show
 * exactly that. Returns the JSON text (static). */
static const char *params_as_logged(const cJSON *params)
{
    static char out[4096];
    static const proto_limits lim = {.max_tokens = 1 << 20, .n_vocab = 50257};
    req_params p = {0};
    proto_error e = {0};
    CHECKF(params_parse(params, PARAM_API_WS, &lim, &p, &e) == 0,
           "history: the document's params are not a request's: %s", e.message);
    char *logged = reqlog_params_json(&p, (uint64_t)num(params, "seed"));
    CHECK(logged != NULL);
    snprintf(out, sizeof out, "%s", logged);
    free(logged);
    cJSON *got = cJSON_Parse(out);
    char where[512] = "not JSON";
    CHECKF(got && same_json(params, got, where, sizeof where),
           "history: the log writes params as %s, the document shows otherwise: %s", out, where);
    cJSON_Delete(got);
    return out;
}

typedef struct {
    answers a;
    ifl_history *h;
    char hash[65];
} history_rig;

static void ask(history_rig *rig, history_job *j)
{
    pthread_mutex_lock(&rig->a.lock);
    int before = rig->a.answered;
    pthread_mutex_unlock(&rig->a.lock);
    ifl_history_submit(rig->h, j);
    pthread_mutex_lock(&rig->a.lock);
    while (rig->a.answered == before)
        pthread_cond_wait(&rig->a.cond, &rig->a.lock);
    pthread_mutex_unlock(&rig->a.lock);
}

/* The history thread's answer to j must be `ex` with HTTP status `status`. */
static void expect_answer(history_rig *rig, history_job *j, int status, const cJSON *ex,
                          const char *kind)
{
    ask(rig, j);
    CHECKF(j->status == status, "%s: HTTP %d, expected %d", kind, j->status, status);
    strbuf sb = {.buf = j->body, .len = j->len, .cap = j->len};
    if (!j->body)
        sb.oom = 1;
    expect_frame(ex, kind, &sb); /* frees the body */
    j->body = NULL;
}

static void check_history(const cJSON *list_ex, const cJSON *one_ex, const cJSON *err_ex)
{
    CHECKF(list_ex && one_ex && err_ex,
           "the document needs an example of each history answer (list %d, one %d, error %d)",
           !!list_ex, !!one_ex, !!err_ex);
    if (!list_ex || !one_ex || !err_ex)
        return;
    char dir[4096], path[4200];
    test_tmpdir(dir, sizeof dir, "frames");
    snprintf(path, sizeof path, "%s/log.db", dir);
    sqlite3 *db = NULL;
    ifl_err err;
    int applied = 0;
    CHECKF(ifl_db_open(&db, path, 0, 1000, &err) == 0 &&
               ifl_db_migrate(db, path, 0, &applied, &err) == 0,
           "%s", err.msg);
    /* the detail's request, with its params as the log writes them */
    cJSON *one = cJSON_Duplicate(obj(one_ex, "request"), 1);
    const cJSON *params = obj(one, "params");
    if (params)
        cJSON_ReplaceItemInObjectCaseSensitive(one, "params",
                                               cJSON_Parse(params_as_logged(params)));
    insert_request(db, one);
    /* the list's next page starts after its last request: an older one must exist */
    const cJSON *rows = obj(list_ex, "requests");
    int n_rows = cJSON_GetArraySize(rows);
    if (cJSON_IsNumber(obj(list_ex, "next_before"))) {
        cJSON *older = cJSON_Duplicate(one, 1);
        cJSON_ReplaceItemInObjectCaseSensitive(older, "id", cJSON_CreateNumber(num(one, "id") - 1));
        cJSON_ReplaceItemInObjectCaseSensitive(
            older, "queued_at_ms", cJSON_CreateNumber(num(one, "queued_at_ms") - 60000));
        insert_request(db, older);
        cJSON_Delete(older);
    }
    sqlite3_close(db);
    history_rig rig = {.a = {.lock = PTHREAD_MUTEX_INITIALIZER, .cond = PTHREAD_COND_INITIALIZER}};
    key_hash(rig.hash);
    rig.h =
        ifl_history_start(path, !strcmp(str(list_ex, "scope") ? str(list_ex, "scope") : "", "all"),
                          on_answer, &rig.a);
    CHECK(rig.h != NULL);
    if (rig.h) {
        history_job j = {.kind = HISTORY_LIST, .limit = n_rows};
        memcpy(j.user_hash, rig.hash, sizeof j.user_hash);
        expect_answer(&rig, &j, 200, list_ex, "history list");
        history_job k = {.kind = HISTORY_ONE, .id = (int64_t)num(one, "id")};
        memcpy(k.user_hash, rig.hash, sizeof k.user_hash);
        expect_answer(&rig, &k, 200, one_ex, "history one");
        history_job e = {.kind = HISTORY_ONE, .id = 999999};
        memcpy(e.user_hash, rig.hash, sizeof e.user_hash);
        expect_answer(&rig, &e, 404, err_ex, "history error");
        ifl_history_stop(rig.h);
    }
    cJSON_Delete(one);
    test_rmdir(dir);
}

static void check_codes(const char codes[][32], int n)
{
    for (int i = 0; i < n; i++) {
        ifl_code c;
        CHECKF(ifl_code_parse(codes[i], &c) == 0,
               "docs/protocol.md lists the code %s, which codes.h does not have", codes[i]);
    }
    for (int c = 0; c < IFL_N_CODES; c++) {
        int found = 0;
        for (int i = 0; i < n; i++)
            found |= !strcmp(codes[i], ifl_code_name((ifl_code)c));
        CHECKF(found, "codes.h has %s, which the error table of docs/protocol.md does not list",
               ifl_code_name((ifl_code)c));
        CHECKF(ifl_code_get((ifl_code)c)->meaning && ifl_code_get((ifl_code)c)->http_status >= 400,
               "codes.c: %s has no meaning or HTTP status", ifl_code_name((ifl_code)c));
    }
    printf("error codes: %d in the document, %d in codes.h\n", n, IFL_N_CODES);
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: test_frames docs/protocol.md\n");
        return 2;
    }
    char *doc = NULL;
    size_t len = 0;
    ifl_err err;
    if (ifl_read_file(argv[1], &doc, &len, 1 << 20, &err)) {
        fprintf(stderr, "%s\n", err.msg);
        return 1;
    }
    static doc_json d;
    doc_json_read(&d, doc);
    printf("%d JSON examples in %s\n", d.n_ex, argv[1]);
    check_codes(d.codes, d.n_codes);
    const cJSON *list_ex = NULL, *one_ex = NULL, *err_ex = NULL;
    static const char *const client[] = {"generate", "cancel", "subscribe", "unsubscribe", "ping"};
    for (int i = 0; i < d.n_ex; i++) {
        const doc_example *x = &d.ex[i];
        const cJSON *e = x->json;
        const char *type = str(e, "type");
        int is_client = 0;
        for (int k = 0; type && k < 5; k++)
            is_client |= !strcmp(type, client[k]);
        if (is_client)
            check_client_message(x->text, strlen(x->text), e, type);
        else if (type)
            check_server_frame(e, type);
        else if (obj(e, "scope"))
            list_ex = e;
        else if (obj(e, "request"))
            one_ex = e;
        else if (obj(e, "error"))
            err_ex = e;
        else
            CHECKF(0,
                   "docs line %d: an example that is neither a frame, a message nor a history "
                   "answer: %.60s",
                   x->line, x->text);
    }
    check_history(list_ex, one_ex, err_ex);
    for (int k = 0; k < N_KINDS; k++)
        CHECKF(n_checked[k] > 0,
               "no example of \"%s\" was checked: the document lacks one, or it "
               "differs from the code",
               kinds[k]);
    doc_json_free(&d);
    free(doc);
    return test_finish("test_frames");
}
