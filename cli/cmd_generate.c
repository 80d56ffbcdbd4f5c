/* cmd_generate.c: `inflight generate`: streams the completion of one prompt to stdout. */
#include <errno.h>
#include <getopt.h>
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

/* The defaults are spliced into the text (IFL_STR), which clang-format would scatter. */
/* clang-format off */
static const char *const HELP =
    "usage: inflight generate --model DIR --prompt TEXT [options]\n"
    "\n"
    "Streams the completion of TEXT to stdout as it is produced, then a timing line on stderr.\n"
    "\n"
    "  --model DIR          Hugging Face GPT-2 directory (config.json, model.safetensors, vocab;\n"
    "                       without vocabulary files there: $INFLIGHT_VOCAB_DIR, else the npm\n"
    "                       package's)\n"
    "  --prompt TEXT        the prompt ('-' reads it from stdin; empty starts from <|endoftext|>)\n"
    "  -n, --max-tokens N   tokens to generate (default " IFL_STR(IFL_DEFAULT_MAX_NEW_TOKENS) ")\n"
    "  --temperature X      0 = greedy (default " IFL_STR(IFL_DEFAULT_TEMPERATURE) ")\n"
    "  --top-k N            keep the N most likely tokens, 0 = all (default "
                            IFL_STR(IFL_DEFAULT_TOP_K) ")\n"
    "  --top-p X            nucleus sampling mass in (0, 1] (default "
                            IFL_STR(IFL_DEFAULT_TOP_P) ")\n"
    "  --seed N             random seed (default: from the clock)\n"
    "  --ignore-eos         keep going past <|endoftext|>\n"
    "  --ids                print the generated token ids, space-separated, on one line\n"
    "  --special            a literal <|endoftext|> in the prompt is the end-of-text token\n"
    "  --weights T          hold weights as f32 | f16 | bf16 | auto (default auto: as stored)\n"
    "  --threads N          CPU threads (default: one per core)\n"
    "  --device D           auto | cpu | cuda (default auto: the GPU when this build has the CUDA\n"
    "                       backend and one is present, else the CPU; the choice is printed)\n"
    "  --isa I              CPU kernels: auto | avx512 | avx2 | scalar (default auto: $INFLIGHT_ISA\n"
    "                       when set, else the best this CPU has; one it lacks is an error; the\n"
    "                       choice is printed)\n"
    "  --logits-out FILE    write the logits of the last prompt token there (V little-endian\n"
    "                       float32), e.g. to compare with another implementation\n";
/* clang-format on */

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
    int32_t n_new, threads, top_k;
    double temperature, top_p;
    uint64_t seed;
    int ignore_eos, print_ids, special;
    ifl_device want;
    ifl_isa isa;
    ifl_model_opts mo;
} gen_opts;

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
    if (ifl_tokenizer_encode(tok, prompt, strlen(prompt), o->special, &ids, &err)) {
        fprintf(stderr, "inflight generate: %s\n", err.msg);
        goto out;
    }
    if (ids.n == 0 && ifl_tokens_push(&ids, model->cfg.eos_token_id)) {
        fprintf(stderr, "inflight generate: out of memory\n");
        goto out;
    }
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
                     .top_p = (float)o->top_p},
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

/* -1: go on; else the exit status (help: 0, a usage error: 2). */
static int parse_opts(int argc, char **argv, gen_opts *o)
{
    static const struct option opts[] = {
        {"model", required_argument, 0, 'm'},
        {"prompt", required_argument, 0, 'p'},
        {"max-tokens", required_argument, 0, 'n'},
        {"temperature", required_argument, 0, 't'},
        {"top-k", required_argument, 0, 'k'},
        {"top-p", required_argument, 0, 'P'},
        {"seed", required_argument, 0, 's'},
        {"ignore-eos", no_argument, 0, 'E'},
        {"ids", no_argument, 0, 'I'},
        {"special", no_argument, 0, 'S'},
        {"weights", required_argument, 0, 'w'},
        {"threads", required_argument, 0, 'T'},
        {"device", required_argument, 0, 'D'},
        {"isa", required_argument, 0, 'A'},
        {"logits-out", required_argument, 0, 'L'},
        {"help", no_argument, 0, 'h'},
        {0, 0, 0, 0},
    };
    const char *cmd = "generate";
    optind = 1;
    opterr = 0;
    int c;
    while ((c = getopt_long(argc, argv, ":n:", opts, NULL)) != -1) {
        int bad = 0;
        switch (c) {
        case 'm': o->dir = optarg; break;
        case 'p': o->prompt = optarg; break;
        case 'n': bad = cli_i32(cmd, "--max-tokens", optarg, 0, 1 << 20, &o->n_new); break;
        case 't': bad = cli_f64(cmd, "--temperature", optarg, 0, 100, &o->temperature); break;
        case 'k': bad = cli_i32(cmd, "--top-k", optarg, 0, 1 << 24, &o->top_k); break;
        case 'P':
            if (cli_f64(cmd, "--top-p", optarg, 0, 1, &o->top_p))
                return 2;
            if (o->top_p <= 0)
                return cli_usage_error(cmd, "--top-p must be in (0, 1]");
            break;
        case 's': bad = cli_u64(cmd, "--seed", optarg, &o->seed); break;
        case 'E': o->ignore_eos = 1; break;
        case 'I': o->print_ids = 1; break;
        case 'S': o->special = 1; break;
        case 'w': bad = cli_weights(cmd, optarg, &o->mo); break;
        case 'T': bad = cli_i32(cmd, "--threads", optarg, 1, 1024, &o->threads); break;
        case 'D': bad = cli_device(cmd, optarg, &o->want); break;
        case 'A': bad = cli_isa(cmd, optarg, &o->isa); break;
        case 'L': o->logits_path = optarg; break;
        case 'h': fputs(HELP, stdout); return 0;
        case ':': return cli_usage_error(cmd, "an option is missing its value");
        default: return cli_usage_error(cmd, "unknown option");
        }
        if (bad)
            return 2;
    }
    if (optind < argc)
        return cli_usage_error(cmd, "unexpected argument");
    if (!o->dir)
        return cli_usage_error(cmd, "--model DIR is required");
    if (!o->prompt)
        return cli_usage_error(cmd, "--prompt TEXT is required");
    return -1;
}

int cmd_generate(int argc, char **argv)
{
    gen_opts o = {.n_new = IFL_DEFAULT_MAX_NEW_TOKENS,
                  .temperature = IFL_DEFAULT_TEMPERATURE,
                  .top_p = IFL_DEFAULT_TOP_P,
                  .top_k = IFL_DEFAULT_TOP_K,
                  .seed = (uint64_t)time(NULL),
                  .want = IFL_DEVICE_AUTO,
                  .isa = IFL_ISA_AUTO};
    int st = parse_opts(argc, argv, &o);
    return st >= 0 ? st : run_generate(&o);
}
