/* config.h: the GPT-2 hyper-parameters, read from a Hugging Face config.json.
 *
 * Shape letters used across the engine: L layers, C n_embd, H n_head, D = C/H head size,
 * F n_inner (4C), V n_vocab, P n_ctx (positions). */
#ifndef IFL_CONFIG_H
#define IFL_CONFIG_H

#include <stdint.h>

#include "error.h"

typedef enum {
    IFL_GELU_TANH = 0, /* "gelu_new", "gelu_pytorch_tanh", "gelu_fast": GPT-2's */
    IFL_GELU_ERF = 1,  /* "gelu" */
} ifl_gelu;

typedef struct {
    int32_t n_layer; /* L */
    int32_t n_head;  /* H */
    int32_t n_embd;  /* C */
    int32_t n_inner; /* F (config n_inner, null means 4C) */
    int32_t n_ctx;   /* P (n_positions) */
    int32_t n_vocab; /* V (vocab_size) */
    double ln_eps;   /* layer_norm_epsilon */
    ifl_gelu gelu;
    int scale_attn_weights;              /* 1: scores / sqrt(D) */
    int scale_attn_by_inverse_layer_idx; /* 1: scores also / (layer + 1) */
    int tie_word_embeddings;             /* 1: lm_head is wte */
    int32_t bos_token_id, eos_token_id;
} ifl_config;

/* F: the MLP width (config n_inner, or 4C when it is null). */
static inline int32_t ifl_config_n_inner(const ifl_config *c)
{
    return c->n_inner ? c->n_inner : 4 * c->n_embd;
}

/* Reads and validates config.json. Errors name the file and the field. */
int ifl_config_load(ifl_config *c, const char *path, ifl_err *err);

/* Checks ranges and consistency (n_embd divisible by n_head, ...). `what` names the source. */
int ifl_config_validate(const ifl_config *c, const char *what, ifl_err *err);

/* The standard GPT-2 config for n_layer/n_head/n_embd/n_ctx/n_vocab set by the caller. */
void ifl_config_default(ifl_config *c);

/* Writes a config.json Hugging Face transformers loads (GPT2LMHeadModel). */
int ifl_config_write(const ifl_config *c, const char *path, ifl_err *err);

#endif
