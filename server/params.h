/* params.h: the request-parameter table, in the spirit of redis' config.c: every field a generation
 * request may carry, once, with where it is known (/ws's generate, /v1 completions, /v1 chat, /v2
 * generate), its type, range, default and one line of doc, and for the OpenAI fields this server
 * does not implement, which values of them are neutral (accepted, changing nothing).
 *
 * What is derived from it, and nothing else defines a parameter:
 *   parsing and range checks on every front end  params_check_fields, params_parse
 *   the hello frame's "params" (the page builds its settings panel from it) and its
 *   "defaults" / "limits"                         params_write_json
 *   the request log's params                       params_log_json
 *   the docs' parameter tables                     params_write_markdown (`inflight params`;
 *                                                  tests/unit/test_params.c checks the docs)
 *   the CLI's --temperature, --top-k, ...          params_find (cli/options.c)
 * Adding a parameter: one row in params.c, its field in req_params and its engine code.
 * Pure data and pure functions: any thread. Its own library (inflight_params), built with or
 * without the server, so that the CLI reads it too. */
#ifndef IFL_PARAMS_H
#define IFL_PARAMS_H

#include <stddef.h>
#include <stdint.h>

#include "codes.h"
#include "strbuf.h"

struct cJSON;
typedef struct req_params req_params; /* request.h */
typedef struct proto_limits proto_limits; /* protocol.h */
typedef struct proto_error proto_error;   /* protocol.h */

/* Where a field is known: a bit per API. */
typedef enum {
    PARAM_API_WS = 1,          /* /ws: the generate message */
    PARAM_API_COMPLETIONS = 2, /* /v1/completions */
    PARAM_API_CHAT = 4,        /* /v1/chat/completions */
    PARAM_API_V2 = 8,          /* /v2/models/M/generate[_stream], top level or "parameters" */
} param_api;
#define PARAM_API_V1 (PARAM_API_COMPLETIONS | PARAM_API_CHAT)
#define PARAM_API_ALL (PARAM_API_WS | PARAM_API_V1 | PARAM_API_V2)
#define PARAM_N_APIS 4

typedef enum {
    PARAM_INT,        /* an integer in [lo, hi] */
    PARAM_NUM,        /* a number in [lo, hi] ((lo, hi] with lo_open) */
    PARAM_BOOL,       /* true or false */
    PARAM_SEED,       /* an integer in [lo, hi]; absent: the server draws one */
    PARAM_OPT_INT,    /* an integer in [lo, hi], or absent (OpenAI: or null): then the int at
                         has_off is 0 */
    PARAM_STOP,       /* up to IFL_MAX_STOPS strings of 1..IFL_MAX_STOP_BYTES bytes (OpenAI: also
                         one string, or null) */
    PARAM_TOKEN_IDS,  /* up to IFL_MAX_STOP_IDS token ids */
    PARAM_LOGIT_BIAS, /* {"token id": bias in [lo, hi]}, up to IFL_MAX_LOGIT_BIAS entries */
    PARAM_FRONT,      /* the front end's own field (prompt, model, stream, ...): read there */
    PARAM_NEUTRAL,    /* known, not supported: accepted only with a neutral value */
} param_type;

/* A bound or default that is the server's (its options), not a constant. */
typedef enum {
    PARAM_FIXED = 0,
    PARAM_FROM_MAX_TOKENS,     /* hi: the server's --max-tokens limit */
    PARAM_FROM_VOCAB,          /* hi: the vocabulary's size */
    PARAM_FROM_DEF_MAX_TOKENS, /* default: the server's default max_tokens */
    PARAM_FROM_DEF_TEMPERATURE,
    PARAM_FROM_DEF_TOP_K,
    PARAM_FROM_DEF_TOP_P,
    PARAM_FROM_DEF_TRUNCATE, /* default: the server's --trim */
} param_from;

/* A neutral value of a PARAM_NEUTRAL field. */
typedef enum {
    PARAM_NEUTRAL_NULL_FALSE, /* null or false */
    PARAM_NEUTRAL_NULL_ONE,   /* null or 1 */
    PARAM_NEUTRAL_NULL_ZERO,  /* null or 0 */
    PARAM_NEUTRAL_NULL_EMPTY_STRING,
    PARAM_NEUTRAL_NULL_EMPTY_ARRAY,
    PARAM_NEUTRAL_NULL_NONE, /* null or "none" */
    PARAM_NEUTRAL_TEXT_FORMAT,  /* null or {"type": "text"} */
    PARAM_NEUTRAL_TEXT_MODALITY, /* null or ["text"] */
    PARAM_NEUTRAL_ANY_BOOL,   /* null or a boolean (it changes nothing here) */
    PARAM_NEUTRAL_ANY_STRING, /* null or a string */
    PARAM_NEUTRAL_ANY_OBJECT, /* null or an object */
} param_neutral;

typedef struct {
    const char *name;  /* as every API where it is known spells it */
    unsigned apis;     /* param_api bits */
    const char *alias; /* another name, in alias_apis only (chat's max_completion_tokens) */
    unsigned alias_apis;
    param_type type;
    double lo, hi;
    int lo_open;       /* PARAM_NUM: lo itself is out */
    param_from hi_from; /* hi from the server instead */
    double def;        /* the default (PARAM_INT, NUM, BOOL) */
    param_from def_from;
    size_t off;        /* the field in req_params (value types) */
    param_neutral neutral; /* PARAM_NEUTRAL */
    size_t has_off;        /* PARAM_OPT_INT: the int in req_params set to 1 when it is given */
    unsigned zero_apis; /* PARAM_INT: 0 is also accepted in these APIs, below lo (max_tokens 0 with
                           completions' echo: params_parse's cross-field checks decide) */
    const char *label; /* the page's label ("Top-p"); NULL: not on the page (nor in the hello's
                          "params": n and logprobs, which the page does not show) */
    const char *doc;   /* one line */
} param_def;

extern const param_def PARAMS[];
extern const int PARAMS_N;

/* How many bytes of the UTF-8 string s a message quotes ("%.*s"): all of them up to max, cut at a
 * character boundary (the server's one such cut: http_clip_len is this). */
int params_clip_len(const char *s, size_t max);
/* "a string", "a number", ... for error messages. */
const char *params_json_type(const struct cJSON *v);
/* A value parameter's row (not the front end's own field, not a neutral one). */
static inline int params_is_value(const param_def *d)
{
    return d->type != PARAM_FRONT && d->type != PARAM_NEUTRAL;
}
/* What a neutral kind accepts, in words ("null or 1"). */
const char *params_neutral_text(param_neutral k);
/* The first row named `name` among the value rows before row i (two rows may share a name in
 * different APIs: chat's boolean logprobs beside completions' integer one): 1 when row i is the
 * first of its name. */
int params_first_of_name(int i);

/* The row of name as api spells it (alias included), or NULL. */
const param_def *params_find(const char *name, param_api api);
/* A row's bounds and default with the server's limits filled in (lim NULL: the fixed bounds, 0
 * for the server's, and the built-in defaults of defaults.h, what `serve` starts from). */
double params_hi(const param_def *d, const proto_limits *lim);
double params_default(const param_def *d, const proto_limits *lim);
/* The parameter api's name for it: its alias there, else its name. */
const char *params_name_in(const param_def *d, param_api api);

/* Every member of obj known to api: an unknown one is unknown_field naming it ("WHERE has no
 * field 'X'" where WHERE is the message's name for the object), a PARAM_NEUTRAL one with another
 * value unsupported_field ("field 'X' is not supported by this server: only ... is accepted").
 * skip_front: front-end rows are also refused (Triton's "parameters" object). 0 or -1 with *err. */
int params_check_fields(const struct cJSON *obj, param_api api, int front_ok, const char *where,
                        proto_error *err);

/* The defaults into p, then every value field of obj that api knows, checked (each error names
 * the field, what it holds and what it must be; then the cross-field checks: min_tokens <=
 * max_tokens; max_tokens 0 only with echo and n 1; chat's top_logprobs only with logprobs true).
 * Fields not known to api are left alone (params_check_fields refuses them). p->from is set to
 * api. 0 or -1 with *err. */
void params_set_defaults(req_params *p, const proto_limits *lim);
int params_parse(const struct cJSON *obj, param_api api, const proto_limits *lim, req_params *p,
                 proto_error *err);

/* The table as JSON for the page: [{"name","type","min","max","min_open","default","label",
 * "doc"}...] of the value parameters /ws knows, bounds and defaults as this server has them. */
void params_write_json(strbuf *sb, const proto_limits *lim);
/* ,"name":value for each parameter whose default is the server's (serve --max-tokens,
 * --temperature, --top-k, --top-p): the hello's "defaults". */
void params_write_server_defaults(strbuf *sb, const proto_limits *lim);
/* A request's parameters for the log: every value parameter of the API that parsed p (p->from;
 * 0: every name once), as JSON, seed the one used. */
void params_log_json(strbuf *sb, const req_params *p, uint64_t seed);
/* The docs' table of the fields api knows (markdown), bounds from lim (NULL: as documented:
 * the server's own in words). */
void params_write_markdown(strbuf *sb, param_api api);

#endif
