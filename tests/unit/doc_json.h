/* doc_json.h: for tests that check a Markdown document against the code: the JSON examples of a
 * document (```json blocks, which may hold several values, and `{...}` spans of the prose, with
 * their line numbers), the names in the first column of a table under a heading, and a comparison
 * of two JSON values by shape and value (the same fields in the same order, types, values; a
 * string "..." in the expected value is a placeholder that matches any string). Static functions
 * over cJSON and testutil.h's CHECK macros: include it in one test. */
#ifndef IFL_DOC_JSON_H
#define IFL_DOC_JSON_H

#include <cjson/cJSON.h>
#include <stdio.h>
#include <string.h>

#include "testutil.h"

/* ---- comparing JSON ------------------------------------------------------------------------- */

static int is_placeholder(const cJSON *v)
{
    return cJSON_IsString(v) && !strcmp(v->valuestring, "...");
}

/* Same type, same fields in the same order, same values (a "..." in `want` matches any string).
 * On a difference writes its path into `where`. */
static int same_json(const cJSON *want, const cJSON *got, char *where, size_t cap)
{
    if ((want->type & 0xff) != (got->type & 0xff)) {
        snprintf(where, cap, "type differs");
        return 0;
    }
    if (cJSON_IsObject(want) || cJSON_IsArray(want)) {
        const cJSON *a = want->child, *b = got->child;
        int i = 0;
        for (; a && b; a = a->next, b = b->next, i++) {
            if (cJSON_IsObject(want) && strcmp(a->string, b->string)) {
                snprintf(where, cap, "field %d is '%s', expected '%s'", i, b->string, a->string);
                return 0;
            }
            char inner[400];
            if (!same_json(a, b, inner, sizeof inner)) {
                if (cJSON_IsObject(want))
                    snprintf(where, cap, ".%s: %s", a->string, inner);
                else
                    snprintf(where, cap, "[%d]: %s", i, inner);
                return 0;
            }
        }
        if (a || b) {
            snprintf(where, cap, "%s", a ? "a field or element is missing" : "one too many");
            return 0;
        }
        return 1;
    }
    if (is_placeholder(want))
        return 1;
    if (!cJSON_Compare(want, got, 1)) {
        char *w = cJSON_PrintUnformatted(want), *g = cJSON_PrintUnformatted(got);
        snprintf(where, cap, "%s, expected %s", g ? g : "?", w ? w : "?");
        cJSON_free(w);
        cJSON_free(g);
        return 0;
    }
    return 1;
}

/* ---- the document --------------------------------------------------------------------------- */

#define DOC_MAX_EXAMPLES 256
#define DOC_MAX_CODES 64

typedef struct {
    char *text; /* the JSON text as written (NUL-terminated) */
    cJSON *json;
    int line;
} doc_example;

typedef struct {
    doc_example ex[DOC_MAX_EXAMPLES];
    int n_ex;
    char codes[DOC_MAX_CODES][32]; /* the first column of the table under `### error` */
    int n_codes;
} doc_json;

/* Every JSON value in text[0..n): a code block may hold several, one after the other. */
static void take_values(doc_json *d, const char *text, size_t n, int line)
{
    size_t at = 0;
    while (at < n) {
        while (at < n && (text[at] == ' ' || text[at] == '\n' || text[at] == '\t'))
            at++;
        if (at >= n)
            break;
        const char *end = NULL;
        cJSON *v = cJSON_ParseWithLengthOpts(text + at, n - at, &end, 0);
        CHECKF(v && end, "docs line %d: an example that is not JSON: %.60s", line, text + at);
        CHECKF(d->n_ex < DOC_MAX_EXAMPLES, "more than %d examples", DOC_MAX_EXAMPLES);
        if (!v || !end || d->n_ex == DOC_MAX_EXAMPLES) {
            cJSON_Delete(v);
            return;
        }
        size_t len = (size_t)(end - (text + at));
        doc_example *e = &d->ex[d->n_ex++];
        e->text = test_xmalloc(len + 1);
        memcpy(e->text, text + at, len);
        e->text[len] = 0;
        e->json = v;
        e->line = line;
        at += len;
    }
}

/* The ```json blocks, and `{...}` spans of the prose; the names of the error table's codes. */
static void doc_json_read(doc_json *d, char *doc)
{
    int line = 1, in_errors = 0;
    for (char *p = doc; *p;) {
        char *eol = strchr(p, '\n');
        size_t ll = eol ? (size_t)(eol - p) : strlen(p);
        if (!strncmp(p, "```json", 7)) {
            char *body = eol ? eol + 1 : p + ll, *close = strstr(body, "\n```");
            int start = line + 1;
            if (!close)
                break;
            take_values(d, body, (size_t)(close - body), start);
            for (char *q = p; q < close + 1; q++)
                line += *q == '\n';
            p = close + 4;
            p = strchr(p, '\n') ? strchr(p, '\n') + 1 : p + strlen(p);
            line++;
            continue;
        }
        if (!strncmp(p, "### ", 4))
            in_errors = !strncmp(p, "### error", 9);
        if (in_errors && !strncmp(p, "| `", 3) && d->n_codes < DOC_MAX_CODES) {
            char *q = p + 3, *e = memchr(q, '`', ll - 3);
            if (e && e - q < 32) {
                memcpy(d->codes[d->n_codes], q, (size_t)(e - q));
                d->codes[d->n_codes++][e - q] = 0;
            }
        }
        for (char *q = p; q < p + ll; q++) {
            if (q[0] != '`' || q[1] != '{')
                continue;
            char *e = memchr(q + 1, '`', (size_t)(p + ll - q - 1));
            if (!e)
                break;
            take_values(d, q + 1, (size_t)(e - q - 1), line);
            q = e;
        }
        if (!eol)
            break;
        p = eol + 1;
        line++;
    }
}

static void doc_json_free(doc_json *d)
{
    for (int i = 0; i < d->n_ex; i++) {
        free(d->ex[i].text);
        cJSON_Delete(d->ex[i].json);
    }
    d->n_ex = 0;
}

#endif
