/* runtime.c: the engine start-up (runtime.h): device, CPU kernel family, model, tokenizer by the
 * vocabulary rule, CPU thread pool, backends, description. Not the device registry itself
 * (device.c) nor anything that runs requests (the batcher). */
#include "runtime.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "threadpool.h"
#include "util.h"

/* --isa (runtime.h): selects the family and says in rt->isa_why where it came from. */
static int resolve_isa(ifl_runtime *rt, ifl_isa want, ifl_err *err)
{
    if (ifl_isa_select(want, err))
        return -1;
    rt->isa = ifl_isa_current();
    const char *env = getenv("INFLIGHT_ISA");
    int from_env = want == IFL_ISA_AUTO && env && *env && strcmp(env, "auto");
    if (want == IFL_ISA_AUTO && !from_env)
        snprintf(rt->isa_why, sizeof rt->isa_why, "auto: the best this CPU has; it has %s",
                 ifl_cpu_features());
    else
        snprintf(rt->isa_why, sizeof rt->isa_why, "%s%s; the CPU has %s",
                 from_env ? "$INFLIGHT_ISA=" : "--isa ", ifl_isa_name(rt->isa), ifl_cpu_features());
    return 0;
}

int ifl_runtime_resolve(ifl_runtime *rt, ifl_device want, ifl_isa isa,
                        const ifl_model_opts *weights, ifl_err *err)
{
    memset(rt, 0, sizeof *rt);
    rt->device = IFL_DEVICE_CPU;
    rt->isa = IFL_ISA_SCALAR;
    if (resolve_isa(rt, isa, err))
        return -1;
    return ifl_device_resolve(want, weights, &rt->device, rt->why, (int)sizeof rt->why, err);
}

/* $INFLIGHT_VOCAB_DIR, or NULL when unset or empty. */
static const char *env_vocab_dir(void)
{
    const char *e = getenv("INFLIGHT_VOCAB_DIR");
    return e && *e ? e : NULL;
}

const char *ifl_runtime_default_vocab_dir(void)
{
    const char *e = env_vocab_dir();
    return e ? e : INFLIGHT_DEFAULT_VOCAB_DIR;
}

/* Loads the tokenizer from dir into rt (and remembers where from). */
static int load_vocab_from(ifl_runtime *rt, const char *dir, ifl_err *err)
{
    if (ifl_tokenizer_load(&rt->tok, dir, err))
        return -1;
    snprintf(rt->vocab_dir, sizeof rt->vocab_dir, "%s", dir);
    return 0;
}

/* The vocabulary rule (runtime.h): the explicit directory, else the first of the model directory,
 * $INFLIGHT_VOCAB_DIR and the built-in default that holds vocabulary files. */
static int load_tokenizer(ifl_runtime *rt, const ifl_runtime_opts *o, ifl_err *err)
{
    if (o->vocab_dir)
        return load_vocab_from(rt, o->vocab_dir, err);
    const char *places[3] = {o->model_dir, env_vocab_dir(), INFLIGHT_DEFAULT_VOCAB_DIR};
    static const char *const what[3] = {"the model directory", "$INFLIGHT_VOCAB_DIR",
                                        "the built-in default"};
    char tried[1024] = "";
    size_t n = 0;
    for (int i = 0; i < 3; i++) {
        if (!places[i] || (i == 2 && places[1] && !strcmp(places[1], places[2])))
            continue;
        if (ifl_tokenizer_dir_has_vocab(places[i]))
            return load_vocab_from(rt, places[i], err);
        if (n < sizeof tried)
            n += (size_t)snprintf(tried + n, sizeof tried - n, "%s%s (%s)", n ? ", " : "",
                                  places[i], what[i]);
    }
    return ifl_err_set(err,
                       "no vocabulary (vocab.json + merges.txt or encoder.json + vocab.bpe) in "
                       "any of: %s",
                       tried);
}

/* The tokenizer's ids must all be valid rows of the model's embedding. */
static int check_vocab_fits(const ifl_runtime *rt, const ifl_runtime_opts *o, ifl_err *err)
{
    int32_t nv = ifl_tokenizer_n_vocab(rt->tok);
    if (nv > rt->model.cfg.n_vocab)
        return ifl_err_set(err,
                           "%s: the vocabulary (%s) has %d tokens but config.json says "
                           "vocab_size %d",
                           o->model_dir, rt->vocab_dir, nv, rt->model.cfg.n_vocab);
    return 0;
}

int ifl_runtime_start_backends(ifl_runtime *rt, const ifl_runtime_opts *o, ifl_err *err)
{
    int32_t n = o->n_backends > 0 ? o->n_backends : 1;
    if (!rt->model.layers)
        return ifl_err_set(err, "backends before the model: call ifl_runtime_load_model first");
    if (n > IFL_RUNTIME_MAX_BACKENDS)
        return ifl_err_set(err, "n_backends %d: at most %d", n, IFL_RUNTIME_MAX_BACKENDS);
    if (rt->device == IFL_DEVICE_CPU) {
        int nth = o->threads > 0 ? o->threads : ifl_n_cores();
        rt->pool = ifl_threadpool_new(nth);
        if (!rt->pool)
            return ifl_err_set(err, "cannot start %d CPU threads", nth);
    }
    for (int32_t i = 0; i < n; i++) {
        ifl_backend_params bp = {.n_threads = o->threads,
                                 .kv_blocks = o->kv_blocks,
                                 .kv_block_size = o->kv_block_size,
                                 .max_tokens = o->max_tokens,
                                 .max_seqs = o->max_seqs,
                                 .kv_mem_mb = o->kv_mem_mb,
                                 .sgemm_above = o->sgemm_above,
                                 .pool = rt->pool,
                                 .prefault = o->prefault};
        rt->be[i] = ifl_backend_new(rt->device, &rt->model, &bp, err);
        if (!rt->be[i])
            return -1;
        rt->n_backends = i + 1;
    }
    ifl_backend_describe(rt->be[0], rt->desc, (int)sizeof rt->desc);
    size_t len = strlen(rt->desc);
    snprintf(rt->desc + len, sizeof rt->desc - len, ", %sisa %s",
             rt->device == IFL_DEVICE_CPU ? "" : "host ", ifl_isa_name(rt->isa));
    return 0;
}

int ifl_runtime_load_model(ifl_runtime *rt, const ifl_runtime_opts *o, ifl_err *err)
{
    if (!o->model_dir)
        return ifl_err_set(err, "no model directory given");
    ifl_model_opts mo = o->model_opts;
    mo.cpu_layout = ifl_device_wants_cpu_layout(rt->device);
    if (ifl_model_load(&rt->model, o->model_dir, &mo, err))
        return -1;
    if (!o->no_tokenizer && (load_tokenizer(rt, o, err) || check_vocab_fits(rt, o, err)))
        return -1;
    return 0;
}

int ifl_runtime_load(ifl_runtime *rt, const ifl_runtime_opts *o, ifl_err *err)
{
    if (ifl_runtime_load_model(rt, o, err))
        return -1;
    return ifl_runtime_start_backends(rt, o, err);
}

void ifl_runtime_close(ifl_runtime *rt)
{
    for (int32_t i = 0; i < IFL_RUNTIME_MAX_BACKENDS; i++)
        ifl_backend_free(rt->be[i]);
    ifl_threadpool_free(rt->pool);
    ifl_tokenizer_free(rt->tok);
    ifl_model_free(&rt->model);
    memset(rt, 0, sizeof *rt);
}
