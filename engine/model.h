/* model.h: a GPT-2 checkpoint loaded from a Hugging Face directory (config.json +
 * model.safetensors), read-only once loaded and shared by every backend and thread.
 *
 * The safetensors file is mmap'd; a weight matrix whose stored dtype and layout are the ones asked
 * for points straight into the mapping, anything else (a different --weights dtype, the CPU panel
 * layouts, LayerNorm vectors and biases, which are always f32) lives in one arena allocated at
 * load. Tensor names are accepted with or without the "transformer." prefix; attn.bias /
 * attn.masked_bias mask buffers are ignored; the lm_head is wte unless config.json unties them.
 * What it is not: the tokenizer (tokenizer.h) or any run state (backends own activations and the KV
 * pool). */
#ifndef IFL_MODEL_H
#define IFL_MODEL_H

#include <stdint.h>

#include "config.h"
#include "error.h"
#include "safetensors.h"
#include "tensor.h"

typedef struct {
    const float *ln1_w, *ln1_b; /* (C) */
    ifl_mat qkv_w;              /* (C, 3C) Conv1D layout: in x out; columns q | k | v */
    const float *qkv_b;         /* (3C) */
    ifl_mat attn_proj_w;        /* (C, C) */
    const float *attn_proj_b;   /* (C) */
    const float *ln2_w, *ln2_b; /* (C) */
    ifl_mat fc_w;               /* (C, F) */
    const float *fc_b;          /* (F) */
    ifl_mat mlp_proj_w;         /* (F, C) */
    const float *mlp_proj_b;    /* (C) */
} ifl_layer;

typedef struct {
    ifl_config cfg;
    ifl_mat wte;                /* (V, C) token embeddings */
    ifl_mat wpe;                /* (P, C) position embeddings */
    ifl_layer *layers;          /* (L) */
    const float *lnf_w, *lnf_b; /* (C) */
    ifl_mat lm_head;            /* (V, C): wte unless untied */
    char *dir;                  /* the directory it came from */
    int mixed_dtypes;           /* 1 when matrices are held in more than one dtype */
    size_t weight_bytes;        /* bytes of all weights as held */
    /* private */
    ifl_safetensors st;
    void *arena;
    size_t arena_size;
} ifl_model;

typedef struct {
    int convert; /* 0: hold each matrix as stored; 1: convert every matrix to `dtype` */
    ifl_dtype dtype;
    int cpu_layout; /* 1: store the matrices in the CPU backend's panel layouts (tensor.h) at load,
                       so the backend need not keep a second copy */
} ifl_model_opts;

/* Loads DIR/config.json and DIR/model.safetensors. On failure the model is left empty. */
int ifl_model_load(ifl_model *m, const char *dir, const ifl_model_opts *opts, ifl_err *err);
void ifl_model_free(ifl_model *m);

/* "f32", "bf16", ... or "mixed": the dtype the matrices are held in. */
const char *ifl_model_dtype_name(const ifl_model *m);

#endif
