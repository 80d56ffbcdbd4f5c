/* defaults.h: the one place for the engine's default sizes and a request's default sampling, used
 * by the batcher, the backends, the engine start-up (runtime/), the server's options and the CLI's
 * help texts (IFL_STR turns a default into the text of a help line, so the two cannot drift).
 * What it is not: a configuration file; every value here can be overridden by its option. */
#ifndef IFL_DEFAULTS_H
#define IFL_DEFAULTS_H

/* ---- the batcher (batcher.h) ----------------------------------------------------------------- */
#define IFL_DEFAULT_MAX_BATCH 64    /* running sequences of a batcher (= its backend's max_seqs) */
#define IFL_DEFAULT_MAX_QUEUE 256   /* waiting requests of a batcher */
#define IFL_DEFAULT_STEP_TOKENS 256 /* token budget of one step (raised to max_batch if below) */

/* ---- a backend (backend.h), for the fields a caller leaves 0 --------------------------------- */
#define IFL_DEFAULT_KV_BLOCK_SIZE 16       /* tokens per KV block */
#define IFL_DEFAULT_BACKEND_MAX_TOKENS 512 /* most tokens in one step (raised to max_seqs) */
/* The KV pool holds max_seqs full contexts, capped at this much memory (but never below one full
 * context). The CPU backend stores f32 elements, the CUDA backend 16-bit ones. */
#define IFL_DEFAULT_KV_MEM_MB_CPU 2048
#define IFL_DEFAULT_KV_MEM_MB_CUDA 8192

/* ---- a request, when it does not say (serve's defaults, generate's options) ------------------ */
#define IFL_DEFAULT_MAX_NEW_TOKENS 64
#define IFL_DEFAULT_TEMPERATURE 0.8
#define IFL_DEFAULT_TOP_K 40
#define IFL_DEFAULT_TOP_P 0.95

/* IFL_STR(IFL_DEFAULT_MAX_BATCH) is "64": for help texts. */
#define IFL_STR_(x) #x
#define IFL_STR(x) IFL_STR_(x)

#endif
