/* cmd_generate.c: `inflight generate`: streams the completion of one prompt to stdout. */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "backend.h"
#include "cli.h"
#include "generate.h"
#include "util.h"

static const char *const HELP =
    "usage: inflight generate --model DIR --prompt TEXT [options]\n"
    "\n"
    "Streams the completion of TEXT to stdout as it is produced, then a timing line on stderr.\n"
    "\n"
    "  --model DIR          Hugging Face GPT-2 directory (config.json, model.safetensors, vocab)\n"
    "  --prompt TEXT        the prompt ('-' reads it from stdin; empty starts from <|endoftext|>)\n"
    "  -n, --max-tokens N   tokens to generate (default 64)\n"
    "  --temperature X      0 = greedy (default 0.8)\n"
    "  --top-k N            keep the N most likely tokens, 0 = all (default 40)\n"
    "  --top-p X            nucleus sampling mass in (0, 1] (default 0.95)\n"
    "  --seed N             random seed (default: from the clock)\n"
    "  --ignore-eos         keep going past <|endoftext|>\n"
    "  --ids                print the generated token ids, space-separated, on one line\n"
    "  --special            a literal <|endoftext|> in the prompt is the end-of-text token\n"
    "  --weights T          hold weights as f32 | f16 | bf16 | auto (default auto: as stored)\n"
    "  --threads N          CPU threads (default: one per core)\n"
    "  --device D           auto | cpu | cuda (default auto: the GPU when this build has the CUDA\n"
    "                       backend and one is present, else the CPU; the choice is printed)\n"
    "  --logits-out FILE    write the logits of the last prompt token there (V little-endian\n"
    "                       float32), e.g. to compare with another implementation\n";

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

int cmd_generate(int argc, char **argv)
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
        {"logits-out", required_argument, 0, 'L'},
        {"help", no_argument, 0, 'h'},
        {0, 0, 0, 0},
    };
    const char *cmd = "generate", *dir = NULL, *prompt = NULL;
    int32_t n_new = 64, threads = 0;
    double temperature = 0.8, top_p = 0.95;
    int32_t top_k = 40;
    uint64_t seed = (uint64_t)time(NULL);
    int ignore_eos = 0, print_ids = 0, special = 0;
    ifl_device want = IFL_DEVICE_AUTO, device;
    const char *logits_path = NULL;
    ifl_model_opts mo = {.cpu_layout = 1};
    optind = 1;
    opterr = 0;
    int c;
    while ((c = getopt_long(argc, argv, ":n:", opts, NULL)) != -1) {
        switch (c) {
        case 'm': dir = optarg; break;
        case 'p': prompt = optarg; break;
        case 'n':
            if (cli_i32(cmd, "--max-tokens", optarg, 0, 1 << 20, &n_new))
                return 2;
            break;
        case 't':
            if (cli_f64(cmd, "--temperature", optarg, 0, 100, &temperature))
                return 2;
            break;
        case 'k':
            if (cli_i32(cmd, "--top-k", optarg, 0, 1 << 24, &top_k))
                return 2;
            break;
        case 'P':
            if (cli_f64(cmd, "--top-p", optarg, 0, 1, &top_p))
                return 2;
            if (top_p <= 0)
                return cli_usage_error(cmd, "--top-p must be in (0, 1]");
            break;
        case 's':
            if (cli_u64(cmd, "--seed", optarg, &seed))
                return 2;
            break;
        case 'E': ignore_eos = 1; break;
        case 'I': print_ids = 1; break;
        case 'S': special = 1; break;
        case 'w':
            if (cli_weights(cmd, optarg, &mo))
                return 2;
            break;
        case 'T':
            if (cli_i32(cmd, "--threads", optarg, 1, 1024, &threads))
                return 2;
            break;
        case 'D':
            if (cli_device(cmd, optarg, &want))
                return 2;
            break;
        case 'L': logits_path = optarg; break;
        case 'h': fputs(HELP, stdout); return 0;
        case ':': return cli_usage_error(cmd, "an option is missing its value");
        default: return cli_usage_error(cmd, "unknown option");
        }
    }
    if (optind < argc)
        return cli_usage_error(cmd, "unexpected argument");
    if (!dir)
        return cli_usage_error(cmd, "--model DIR is required");
    if (!prompt)
        return cli_usage_error(cmd, "--prompt TEXT is required");

    int rc = 1;
    ifl_err err;
    ifl_model model = {0};
    ifl_tokenizer *tok = NULL;
    ifl_backend *be = NULL;
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
    if (cli_resolve_device(cmd, want, &device, &mo))
        goto out;
    if (ifl_model_load(&model, dir, &mo, &err) || ifl_tokenizer_load(&tok, dir, &err)) {
        fprintf(stderr, "inflight generate: %s\n", err.msg);
        goto out;
    }
    if (ifl_tokenizer_n_vocab(tok) > model.cfg.n_vocab) {
        fprintf(stderr,
                "inflight generate: %s: the vocabulary has %d tokens but config.json says "
                "vocab_size %d\n",
                dir, ifl_tokenizer_n_vocab(tok), model.cfg.n_vocab);
        goto out;
    }
    if (ifl_tokenizer_encode(tok, prompt, strlen(prompt), special, &ids, &err)) {
        fprintf(stderr, "inflight generate: %s\n", err.msg);
        goto out;
    }
    if (ids.n == 0 && ifl_tokens_push(&ids, model.cfg.eos_token_id)) {
        fprintf(stderr, "inflight generate: out of memory\n");
        goto out;
    }
    ifl_backend_params bp = {.n_threads = threads, .max_seqs = 1};
    bp.kv_blocks = 0;
    be = ifl_backend_new(device, &model, &bp, &err);
    if (!be) {
        fprintf(stderr, "inflight generate: %s\n", err.msg);
        goto out;
    }
    char desc[256];
    be->ops->describe(be, desc, sizeof desc);
    fprintf(stderr, "inflight generate: %s (%d layers, %d wide); %s\n", dir, model.cfg.n_layer,
            model.cfg.n_embd, desc);

    sc.tok = tok;
    sc.ids = print_ids;
    sc.buf = malloc(ifl_utf8_stream_cap(4096));
    ifl_utf8_stream_init(&sc.utf8, IFL_UTF8_RAW);
    ifl_generate_opts go = {
        .max_new = n_new,
        .sampling = {.temperature = (float)temperature, .top_k = top_k, .top_p = (float)top_p},
        .seed = seed,
        .ignore_eos = ignore_eos,
        .eos = model.cfg.eos_token_id,
        .on_token = on_token,
        .ud = &sc,
    };
    if (logits_path) {
        prompt_logits = malloc((size_t)model.cfg.n_vocab * sizeof *prompt_logits);
        if (!prompt_logits) {
            fprintf(stderr, "inflight generate: out of memory\n");
            goto out;
        }
        go.logits_out = prompt_logits;
    }
    ifl_generate_stats st;
    if (!sc.buf || ifl_generate(be, ids.ids, (int32_t)ids.n, &go, &st, &err)) {
        fprintf(stderr, "\ninflight generate: %s\n", sc.buf ? err.msg : "out of memory");
        goto out;
    }
    if (!print_ids) {
        char tail[16];
        size_t k = ifl_utf8_stream_flush(&sc.utf8, tail);
        fwrite(tail, 1, k, stdout);
    }
    printf("\n");
    fflush(stdout);
    if (logits_path && ifl_write_file(logits_path, prompt_logits,
                                      (size_t)model.cfg.n_vocab * sizeof(float), &err)) {
        fprintf(stderr, "inflight generate: --logits-out: %s\n", err.msg);
        goto out;
    }
    int32_t decoded = st.n_generated > 1 ? st.n_generated - 1 : 0;
    fprintf(stderr,
            "inflight generate: prompt %d tokens in %.1f ms (%.1f tok/s); generated %d tokens, "
            "%.2f ms/token (%.1f tok/s); finish %s; seed %llu\n",
            st.n_prompt, st.prefill_s * 1e3, st.n_prompt / (st.prefill_s > 0 ? st.prefill_s : 1e-9),
            st.n_generated, decoded ? st.decode_s * 1e3 / decoded : 0.0,
            decoded ? decoded / (st.decode_s > 0 ? st.decode_s : 1e-9) : 0.0, st.finish_reason,
            (unsigned long long)seed);
    rc = 0;
out:
    free(prompt_logits);
    free(sc.buf);
    free(stdin_prompt);
    ifl_tokens_free(&ids);
    ifl_backend_free(be);
    ifl_tokenizer_free(tok);
    ifl_model_free(&model);
    return rc;
}
