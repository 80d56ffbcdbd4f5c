/* test_tokenizer_parity.c: our GPT-2 tokenizer against the JavaScript reference encoder
 * (npm gpt-3-encoder@1.1.4) on every line of tests/tokenizer/corpus.jsonl: identical ids on every
 * line, and decode(encode(x)) == x. The reference ids come from tests/tokenizer/js_reference.js,
 * run by CTest just before this test (fixture tokenizer_js). usage: test_tokenizer_parity
 * CORPUS.jsonl JS_IDS.txt VOCAB_DIR */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"
#include "tokenizer.h"
#include "util.h"

/* Next line of buf (modifies it); NULL at the end. */
static char *next_line(char **p)
{
    if (!**p)
        return NULL;
    char *s = *p, *nl = strchr(s, '\n');
    if (nl) {
        *nl = 0;
        *p = nl + 1;
    } else {
        *p = s + strlen(s);
    }
    return s;
}

int main(int argc, char **argv)
{
    if (argc != 4) {
        fprintf(stderr, "usage: test_tokenizer_parity CORPUS.jsonl JS_IDS.txt VOCAB_DIR\n");
        return 2;
    }
    ifl_err err;
    ifl_tokenizer *tok;
    char *corpus, *js;
    size_t clen, jlen;
    if (ifl_tokenizer_load(&tok, argv[3], &err) ||
        ifl_read_file(argv[1], &corpus, &clen, (size_t)1 << 28, &err) ||
        ifl_read_file(argv[2], &js, &jlen, (size_t)1 << 28, &err)) {
        fprintf(stderr, "%s\n", err.msg);
        return 1;
    }
    char *cp = corpus, *jp = js, *line;
    int lineno = 0, mismatches = 0, roundtrip_bad = 0;
    size_t total_ids = 0, total_bytes = 0;
    ifl_tokens ids = {0};
    while ((line = next_line(&cp))) {
        lineno++;
        char *jline = next_line(&jp);
        if (!jline) {
            fprintf(stderr, "FAIL: %s has fewer lines than the corpus (%d)\n", argv[2], lineno);
            test_failures++;
            break;
        }
        cJSON *j = cJSON_Parse(line);
        if (!cJSON_IsString(j)) {
            fprintf(stderr, "FAIL: %s:%d is not a JSON string\n", argv[1], lineno);
            test_failures++;
            cJSON_Delete(j);
            continue;
        }
        const char *text = j->valuestring;
        size_t tlen = strlen(text);
        ids.n = 0;
        if (ifl_tokenizer_encode(tok, text, tlen, 0, &ids, &err)) {
            fprintf(stderr, "FAIL: line %d: %s\n", lineno, err.msg);
            test_failures++;
            cJSON_Delete(j);
            continue;
        }
        /* compare with the reference line */
        size_t k = 0;
        int same = 1;
        char *q = jline;
        while (*q) {
            char *end;
            long v = strtol(q, &end, 10);
            if (end == q)
                break;
            if (k >= ids.n || ids.ids[k] != v)
                same = 0;
            k++;
            q = end;
        }
        if (k != ids.n)
            same = 0;
        if (!same) {
            if (mismatches < 5) {
                fprintf(stderr, "MISMATCH line %d %s\n  js : %s\n  ours:", lineno, line, jline);
                for (size_t i = 0; i < ids.n; i++)
                    fprintf(stderr, " %d", ids.ids[i]);
                fprintf(stderr, "\n");
            }
            mismatches++;
        }
        char *dec;
        size_t dlen;
        if (ifl_tokenizer_decode(tok, ids.ids, ids.n, &dec, &dlen, &err) || dlen != tlen ||
            memcmp(dec, text, tlen)) {
            if (roundtrip_bad < 5)
                fprintf(stderr, "ROUND TRIP FAIL line %d\n", lineno);
            roundtrip_bad++;
        }
        free(dec);
        total_ids += ids.n;
        total_bytes += tlen;
        if (lineno <= 2) {
            printf("line %d: %.60s -> ", lineno, line);
            for (size_t i = 0; i < ids.n && i < 12; i++)
                printf("%d ", ids.ids[i]);
            printf("%s(js: %.60s)\n", ids.n > 12 ? "... " : "", jline);
        }
        cJSON_Delete(j);
    }
    if (next_line(&jp)) {
        fprintf(stderr, "FAIL: %s has more lines than the corpus\n", argv[2]);
        test_failures++;
    }
    CHECKF(lineno >= 2000, "corpus has only %d lines", lineno);
    CHECKF(mismatches == 0, "%d of %d lines differ from the JavaScript encoder", mismatches,
           lineno);
    CHECKF(roundtrip_bad == 0, "%d lines do not survive decode(encode(x))", roundtrip_bad);
    printf(
        "%d corpus lines, %zu bytes, %zu tokens: %d differ from gpt-3-encoder, %d fail the round "
        "trip\n",
        lineno, total_bytes, total_ids, mismatches, roundtrip_bad);
    ifl_tokens_free(&ids);
    free(corpus);
    free(js);
    ifl_tokenizer_free(tok);
    return test_finish("test_tokenizer_parity");
}
