/* model.c: loading a Hugging Face GPT-2 directory into an ifl_model (see model.h). */
#include "model.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "util.h"

/* One tensor the model needs: where its name points and where the result goes. */
typedef struct {
    char name[96];  /* without prefix, e.g. "h.3.mlp.c_fc.weight" */
    int n_dims;     /* 1 (vector, held as f32) or 2 (matrix) */
    int64_t d0, d1; /* expected shape (d1 unused for vectors) */
    const ifl_st_tensor *src;
    ifl_mat *mat;      /* matrices */
    const float **vec; /* vectors */
    ifl_dtype held;    /* dtype the matrix is held in */
    ifl_layout layout; /* layout it is held in */
    int in_arena;      /* 1: copied/converted into the arena */
    size_t arena_off;
} tensor_spec;

static void spec_set(tensor_spec *s, const char *name, int n_dims, int64_t d0, int64_t d1,
                     ifl_mat *mat, const float **vec)
{
    memset(s, 0, sizeof *s);
    snprintf(s->name, sizeof s->name, "%s", name);
    s->n_dims = n_dims;
    s->d0 = d0;
    s->d1 = d1;
    s->mat = mat;
    s->vec = vec;
}

/* Builds the list of tensors a GPT-2 of this config needs. Returns the count. */
static int build_specs(ifl_model *m, tensor_spec *s)
{
    const ifl_config *c = &m->cfg;
    int64_t C = c->n_embd, F = c->n_inner ? c->n_inner : 4 * C, V = c->n_vocab, P = c->n_ctx;
    int n = 0;
    spec_set(&s[n++], "wte.weight", 2, V, C, &m->wte, NULL);
    spec_set(&s[n++], "wpe.weight", 2, P, C, &m->wpe, NULL);
    for (int l = 0; l < c->n_layer; l++) {
        ifl_layer *ly = &m->layers[l];
        char nm[96];
#define LAYER_SPEC(suffix, nd, a, b, mat, vec)                                                     \
    do {                                                                                           \
        snprintf(nm, sizeof nm, "h.%d.%s", l, suffix);                                             \
        spec_set(&s[n++], nm, nd, a, b, mat, vec);                                                 \
    } while (0)
        LAYER_SPEC("ln_1.weight", 1, C, 0, NULL, &ly->ln1_w);
        LAYER_SPEC("ln_1.bias", 1, C, 0, NULL, &ly->ln1_b);
        LAYER_SPEC("attn.c_attn.weight", 2, C, 3 * C, &ly->qkv_w, NULL);
        LAYER_SPEC("attn.c_attn.bias", 1, 3 * C, 0, NULL, &ly->qkv_b);
        LAYER_SPEC("attn.c_proj.weight", 2, C, C, &ly->attn_proj_w, NULL);
        LAYER_SPEC("attn.c_proj.bias", 1, C, 0, NULL, &ly->attn_proj_b);
        LAYER_SPEC("ln_2.weight", 1, C, 0, NULL, &ly->ln2_w);
        LAYER_SPEC("ln_2.bias", 1, C, 0, NULL, &ly->ln2_b);
        LAYER_SPEC("mlp.c_fc.weight", 2, C, F, &ly->fc_w, NULL);
        LAYER_SPEC("mlp.c_fc.bias", 1, F, 0, NULL, &ly->fc_b);
        LAYER_SPEC("mlp.c_proj.weight", 2, F, C, &ly->mlp_proj_w, NULL);
        LAYER_SPEC("mlp.c_proj.bias", 1, C, 0, NULL, &ly->mlp_proj_b);
#undef LAYER_SPEC
    }
    spec_set(&s[n++], "ln_f.weight", 1, C, 0, NULL, &m->lnf_w);
    spec_set(&s[n++], "ln_f.bias", 1, C, 0, NULL, &m->lnf_b);
    if (!c->tie_word_embeddings)
        spec_set(&s[n++], "lm_head.weight", 2, V, C, &m->lm_head, NULL);
    return n;
}

static const ifl_st_tensor *find_prefixed(const ifl_safetensors *st, const char *prefix,
                                          const char *name)
{
    char full[128];
    if (!strcmp(name, "lm_head.weight"))
        return ifl_st_find(st, name);
    snprintf(full, sizeof full, "%s%s", prefix, name);
    return ifl_st_find(st, full);
}

/* Rejects checkpoints with more layers than config.json says: the wrong config for the weights. */
static int check_layer_count(const ifl_model *m, const char *prefix, ifl_err *err)
{
    size_t plen = strlen(prefix);
    for (int i = 0; i < m->st.n_tensors; i++) {
        const char *nm = m->st.tensors[i].name;
        if (strncmp(nm, prefix, plen) || strncmp(nm + plen, "h.", 2))
            continue;
        char *end;
        long l = strtol(nm + plen + 2, &end, 10);
        if (end != nm + plen + 2 && *end == '.' && l >= m->cfg.n_layer)
            return ifl_err_set(err,
                               "%s: tensor '%s' belongs to layer %ld but config.json says n_layer "
                               "%d: the config does not match the weights",
                               m->st.path, nm, l, m->cfg.n_layer);
    }
    return 0;
}

static void convert_tensor(void *dst, ifl_dtype to, const ifl_st_tensor *t)
{
    size_t n = (size_t)t->numel;
    if (t->dtype == to) {
        memcpy(dst, t->data, n * ifl_dtype_size(to));
        return;
    }
    if (to == IFL_DTYPE_F32) {
        ifl_convert_to_f32(dst, t->dtype, t->data, n);
        return;
    }
    float buf[4096];
    size_t es = ifl_dtype_size(to), ss = ifl_dtype_size(t->dtype);
    for (size_t i = 0; i < n; i += 4096) {
        size_t k = n - i < 4096 ? n - i : 4096;
        ifl_convert_to_f32(buf, t->dtype, (const char *)t->data + i * ss, k);
        ifl_convert_from_f32((char *)dst + i * es, to, buf, k);
    }
}

/* config.json and model.safetensors of dir; *prefix is "" or "transformer." (how the
 * checkpoint names its tensors). path gets the safetensors file's path, for errors. */
static int open_files(ifl_model *m, const char *dir, char *path, size_t cap, const char **prefix,
                      ifl_err *err)
{
    if (ifl_path_join(path, cap, dir, "config.json"))
        return ifl_err_set(err, "%s: path too long", dir);
    if (ifl_config_load(&m->cfg, path, err))
        return -1;
    if (ifl_path_join(path, cap, dir, "model.safetensors"))
        return ifl_err_set(err, "%s: path too long", dir);
    if (ifl_st_open(&m->st, path, err))
        return -1;
    *prefix = "";
    if (!ifl_st_find(&m->st, "wte.weight")) {
        if (!ifl_st_find(&m->st, "transformer.wte.weight"))
            return ifl_err_set(err,
                               "%s: missing tensor 'wte.weight' (also looked for "
                               "'transformer.wte.weight'): not a GPT-2 checkpoint",
                               path);
        *prefix = "transformer.";
    }
    return check_layer_count(m, *prefix, err);
}

/* Finds s's tensor and checks its dtype and shape against the config. */
static int find_tensor(const ifl_model *m, const char *path, const char *prefix, tensor_spec *s,
                       ifl_err *err)
{
    const ifl_config *c = &m->cfg;
    const ifl_st_tensor *t = find_prefixed(&m->st, prefix, s->name);
    if (!t)
        return ifl_err_set(err, "%s: missing tensor '%s%s' (config.json: n_layer %d)", path,
                           strcmp(s->name, "lm_head.weight") ? prefix : "", s->name, c->n_layer);
    if (!t->known_dtype)
        return ifl_err_set(err,
                           "%s: tensor '%s' has dtype %s; only F32, F16 and BF16 are supported",
                           path, t->name, t->dtype_name);
    int64_t want[2] = {s->d0, s->d1};
    int shape_ok =
        t->n_dims == s->n_dims && t->shape[0] == s->d0 && (s->n_dims == 1 || t->shape[1] == s->d1);
    /* GPT-2 biases are sometimes stored as (1, N). */
    if (!shape_ok && s->n_dims == 1 && t->n_dims == 2 && t->shape[0] == 1 && t->shape[1] == s->d0)
        shape_ok = 1;
    if (!shape_ok) {
        char got[160], exp[160];
        ifl_st_format_shape(got, sizeof got, t->n_dims, t->shape);
        ifl_st_format_shape(exp, sizeof exp, s->n_dims, want);
        return ifl_err_set(err,
                           "%s: tensor '%s' has shape %s but config.json (n_embd %d, n_inner %d, "
                           "vocab_size %d, n_positions %d) needs %s",
                           path, t->name, got, c->n_embd, c->n_inner ? c->n_inner : 4 * c->n_embd,
                           c->n_vocab, c->n_ctx, exp);
    }
    s->src = t;
    return 0;
}

/* Decides where s lives: in the mapping as it is, or converted / repacked into the arena (whose
 * size *arena grows by it). Counts its bytes in m->weight_bytes. */
static void place_tensor(ifl_model *m, const ifl_model_opts *opts, tensor_spec *s, size_t *arena)
{
    const ifl_st_tensor *t = s->src;
    if (s->n_dims == 1) {
        s->in_arena = 1;
        s->arena_off = *arena;
        *arena += ((size_t)t->numel * 4 + 63) & ~(size_t)63;
        m->weight_bytes += (size_t)t->numel * 4;
        return;
    }
    s->held = opts && opts->convert ? opts->dtype : t->dtype;
    s->layout = IFL_LAYOUT_ROWS;
    size_t nl = strlen(s->name);
    int is_conv1d = !strncmp(s->name, "h.", 2) && nl > 7 && !strcmp(s->name + nl - 7, ".weight");
    int is_head = !strcmp(s->name, "lm_head.weight") ||
                  (!strcmp(s->name, "wte.weight") && m->cfg.tie_word_embeddings);
    if (s->held == IFL_DTYPE_Q8 && !is_conv1d && !is_head && strcmp(s->name, "wte.weight"))
        s->held = IFL_DTYPE_F32; /* the position embeddings stay in float */
    if (opts && opts->cpu_layout)
        s->layout = is_head ? IFL_LAYOUT_NK4 : is_conv1d ? IFL_LAYOUT_KN8 : IFL_LAYOUT_ROWS;
    if (s->held == IFL_DTYPE_Q8 && s->layout == IFL_LAYOUT_ROWS)
        s->layout = IFL_LAYOUT_NK4; /* an untied wte: its rows read from the tiles as the head's */
    size_t bytes = ifl_layout_bytes(s->layout, s->held, (int32_t)s->d0, (int32_t)s->d1);
    size_t align = s->held == IFL_DTYPE_Q8 ? 1 : ifl_dtype_size(s->held);
    if (s->held != t->dtype || s->layout != IFL_LAYOUT_ROWS || ((uintptr_t)t->data % align) != 0) {
        s->in_arena = 1;
        s->arena_off = *arena;
        *arena += (bytes + 63) & ~(size_t)63;
    }
    m->weight_bytes += bytes;
}

/* One arena of `bytes` for everything converted (none when 0). */
static int map_arena(ifl_model *m, size_t bytes, ifl_err *err)
{
    if (!bytes)
        return 0;
    void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED)
        return ifl_err_set(err, "cannot allocate %zu bytes for the weights: %s", bytes,
                           strerror(errno));
#ifdef MADV_HUGEPAGE
    madvise(p, bytes, MADV_HUGEPAGE);
#endif
    m->arena = p;
    m->arena_size = bytes;
    return 0;
}

/* Fills s's field: converts or repacks into the arena where place_tensor said so. */
static int fill_tensor(ifl_model *m, const tensor_spec *s, ifl_err *err)
{
    const ifl_st_tensor *t = s->src;
    void *dst = s->in_arena ? (char *)m->arena + s->arena_off : NULL;
    if (s->n_dims == 1) {
        convert_tensor(dst, IFL_DTYPE_F32, t);
        *s->vec = dst;
        return 0;
    }
    if (dst && s->layout == IFL_LAYOUT_ROWS) {
        convert_tensor(dst, s->held, t);
    } else if (dst) {
        ifl_mat src = {.dtype = t->dtype,
                       .layout = IFL_LAYOUT_ROWS,
                       .rows = (int32_t)s->d0,
                       .cols = (int32_t)s->d1,
                       .data = t->data};
        int32_t br = 0, bc = 0;
        int rc = ifl_mat_repack(dst, s->layout, s->held, &src, &br, &bc);
        if (rc == -2)
            return ifl_err_set(err, "%s: out of memory quantizing tensor '%s'", m->st.path,
                               t->name);
        if (rc)
            return ifl_err_set(err,
                               "%s: tensor '%s' value [%d, %d] = %g cannot be held as %s (weights "
                               "must be finite, and |w| at most 65504 * 127 for q8's f16 scales)",
                               m->st.path, t->name, br, bc, (double)ifl_mat_get(&src, br, bc),
                               ifl_dtype_name(s->held));
    }
    s->mat->dtype = s->held;
    s->mat->layout = s->layout;
    /* sgemm reads row-major f32 directly: keep the checkpoint's copy in view when it is one */
    s->mat->rows = (int32_t)s->d0;
    s->mat->cols = (int32_t)s->d1;
    s->mat->data = dst ? dst : t->data;
    return 0;
}

/* The pages of tensor t's bytes in the mapping go back to the kernel (its copy is in the arena):
 * a served model is not resident twice, and loading keeps at most one tensor's source resident
 * beyond the arena. Pages shared with a neighbour still in use stay (only whole pages inside t). */
static void release_source(const ifl_st_tensor *t, size_t page)
{
    uintptr_t a = ((uintptr_t)t->data + page - 1) & ~(uintptr_t)(page - 1);
    uintptr_t e = ((uintptr_t)t->data + (size_t)t->numel * ifl_dtype_size(t->dtype)) &
                  ~(uintptr_t)(page - 1);
    if (e > a)
        madvise((void *)a, e - a, MADV_DONTNEED);
}

int ifl_model_load(ifl_model *m, const char *dir, const ifl_model_opts *opts, ifl_err *err)
{
    memset(m, 0, sizeof *m);
    int rc = -1;
    tensor_spec *specs = NULL;
    char path[4096];
    const char *prefix = "";
    m->dir = strdup(dir);
    if (!m->dir) {
        ifl_err_set(err, "out of memory");
        goto out;
    }
    if (open_files(m, dir, path, sizeof path, &prefix, err))
        goto out;
    const ifl_config *c = &m->cfg;
    if (opts && opts->convert && opts->dtype == IFL_DTYPE_Q8 && !opts->cpu_layout) {
        char fl[64];
        ifl_err_set(err,
                    "%s: q8 weights are held only in the CPU backend's tiles; a backend that reads "
                    "the checkpoint's layout runs %s",
                    dir, ifl_format_list(IFL_BACKEND_CUDA, fl, sizeof fl));
        goto out;
    }
    if (opts && opts->convert && !ifl_format_get(opts->dtype)) {
        ifl_err_set(err, "%s: weight format %d is not one of the registry's", dir,
                    (int)opts->dtype);
        goto out;
    }
    m->layers = calloc((size_t)c->n_layer, sizeof *m->layers);
    specs = calloc((size_t)c->n_layer * 12 + 8, sizeof *specs);
    if (!m->layers || !specs) {
        ifl_err_set(err, "out of memory");
        goto out;
    }
    int n = build_specs(m, specs);
    /* Pass 1: find and check every tensor, decide where each one lives. */
    size_t arena = 0;
    for (int i = 0; i < n; i++) {
        if (find_tensor(m, path, prefix, &specs[i], err))
            goto out;
        place_tensor(m, opts, &specs[i], &arena);
        /* q8 keeps the position embeddings in float by design: not a mix */
        if (specs[i].n_dims == 2 && specs[i].held != specs[0].held &&
            !(specs[0].held == IFL_DTYPE_Q8 && !strcmp(specs[i].name, "wpe.weight")))
            m->mixed_dtypes = 1;
    }
    /* Pass 2: one arena for everything converted, then point every field. */
    if (map_arena(m, arena, err))
        goto out;
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    int all_in_arena = 1;
    for (int i = 0; i < n; i++) {
        if (fill_tensor(m, &specs[i], err))
            goto out;
        if (specs[i].in_arena)
            release_source(specs[i].src, page);
        all_in_arena &= specs[i].in_arena;
    }
    /* nothing points into the file any more: unmap it (the header's tensor list is not needed) */
    if (all_in_arena)
        ifl_st_close(&m->st);
    if (c->tie_word_embeddings)
        m->lm_head = m->wte;
    rc = 0;
out:
    free(specs);
    if (rc)
        ifl_model_free(m);
    return rc;
}

void ifl_model_free(ifl_model *m)
{
    if (m->arena)
        munmap(m->arena, m->arena_size);
    ifl_st_close(&m->st);
    free(m->layers);
    free(m->dir);
    memset(m, 0, sizeof *m);
}

const char *ifl_model_dtype_name(const ifl_model *m)
{
    return m->mixed_dtypes ? "mixed" : ifl_dtype_name(m->wte.dtype);
}
