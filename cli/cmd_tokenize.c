/* cmd_tokenize.c: `inflight tokenize`: GPT-2 token ids of stdin (or, with --decode, the text of
 * ids read from stdin). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

static const char *const USAGE =
    "usage: inflight tokenize --model DIR [--special] [--decode] < input\n"
    "\n"
    "Reads all of stdin and prints its GPT-2 token ids, space-separated, on one line.\n"
    "DIR holds vocab.json + merges.txt (or encoder.json + vocab.bpe).\n"
    "\n";

typedef struct {
    const char *dir;
    int special, decode;
} tokenize_opts;

static const cli_opt OPTS[] = {
    CLI_OPT_MODEL(tokenize_opts, dir, "model or vocabulary directory"),
    CLI_ROW("special", 0, CLI_FLAG, NULL, 0, 0, tokenize_opts, special,
            "treat the text <|endoftext|> as the end-of-text token (default: plain text, as the "
            "reference encoders do)"),
    CLI_ROW("decode", 0, CLI_FLAG, NULL, 0, 0, tokenize_opts, decode,
            "the reverse: read ids (whitespace-separated) and write their bytes"),
};

int cmd_tokenize(int argc, char **argv)
{
    static const cli_spec spec = CLI_SPEC("tokenize", USAGE, OPTS, NULL, NULL);
    tokenize_opts o = {0};
    int st = cli_parse(&spec, argc, argv, 1, &o, sizeof o);
    if (st >= 0)
        return st;
    if (!o.dir)
        return cli_usage_error(spec.cmd, "--model DIR is required");
    const char *dir = o.dir;
    int special = o.special, decode = o.decode;

    int rc = 1;
    ifl_err err;
    ifl_tokenizer *tok = NULL;
    ifl_tokens ids = {0};
    char *text = NULL, *dec = NULL;
    size_t len;
    if (ifl_tokenizer_load(&tok, dir, &err)) {
        fprintf(stderr, "inflight tokenize: %s\n", err.msg);
        goto out;
    }
    if (cli_read_stdin(&text, &len, (size_t)256 << 20)) {
        fprintf(stderr, "inflight tokenize: reading stdin: %s\n", strerror(errno));
        goto out;
    }
    if (decode) {
        char *p = text;
        for (;;) {
            while (*p == ' ' || *p == '\n' || *p == '\t' || *p == '\r')
                p++;
            if (!*p)
                break;
            char *end;
            errno = 0;
            long v = strtol(p, &end, 10);
            if (end == p || errno || v < 0 || v >= ifl_tokenizer_n_vocab(tok)) {
                fprintf(stderr,
                        "inflight tokenize: --decode: '%.20s' is not a token id in [0, %d)\n", p,
                        ifl_tokenizer_n_vocab(tok));
                goto out;
            }
            if (ifl_tokens_push(&ids, (int32_t)v)) {
                fprintf(stderr, "inflight tokenize: out of memory\n");
                goto out;
            }
            p = end;
        }
        size_t dl;
        if (ifl_tokenizer_decode(tok, ids.ids, ids.n, &dec, &dl, &err)) {
            fprintf(stderr, "inflight tokenize: %s\n", err.msg);
            goto out;
        }
        fwrite(dec, 1, dl, stdout);
    } else {
        if (ifl_tokenizer_encode(tok, text, len, special, &ids, &err)) {
            fprintf(stderr, "inflight tokenize: %s\n", err.msg);
            goto out;
        }
        for (size_t i = 0; i < ids.n; i++)
            printf(i ? " %d" : "%d", ids.ids[i]);
        printf("\n");
    }
    if (fflush(stdout) != 0) {
        fprintf(stderr, "inflight tokenize: writing stdout: %s\n", strerror(errno));
        goto out;
    }
    rc = 0;
out:
    free(dec);
    free(text);
    ifl_tokens_free(&ids);
    ifl_tokenizer_free(tok);
    return rc;
}
