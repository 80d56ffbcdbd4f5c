/* cli_util.c: number parsing for the options (options.c) and shared helpers of the subcommands (see
 * cli.h). */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "make_model.h"
#include "util.h"

int cli_i32(const char *cmd, const char *opt, const char *s, int32_t lo, int32_t hi, int32_t *out)
{
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno || end == s || *end || v < lo || v > hi) {
        fprintf(stderr, "inflight %s: %s: '%s' is not an integer in [%d, %d]\n", cmd, opt, s, lo,
                hi);
        return -1;
    }
    *out = (int32_t)v;
    return 0;
}

int cli_u64(const char *cmd, const char *opt, const char *s, uint64_t *out)
{
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || end == s || *end || s[0] == '-') {
        fprintf(stderr, "inflight %s: %s: '%s' is not a non-negative integer\n", cmd, opt, s);
        return -1;
    }
    *out = (uint64_t)v;
    return 0;
}

int cli_f64(const char *cmd, const char *opt, const char *s, double lo, double hi, double *out)
{
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || *end || !isfinite(v) || v < lo || v > hi) {
        fprintf(stderr, "inflight %s: %s: '%s' is not a number in [%g, %g]\n", cmd, opt, s, lo, hi);
        return -1;
    }
    *out = v;
    return 0;
}

int cli_usage_error(const char *cmd, const char *msg)
{
    fprintf(stderr, "inflight %s: %s (see 'inflight %s --help')\n", cmd, msg, cmd);
    return 2;
}

const char *cli_format_words(char *buf, size_t cap, int stored_only, const char *sep,
                             const char *last_sep, const char *extra)
{
    const char *names[IFL_DTYPE_COUNT + 1];
    int n = 0;
    for (int i = 0; i < IFL_DTYPE_COUNT; i++) {
        const ifl_format *f = ifl_format_get((ifl_dtype)i);
        if (f && (!stored_only || f->stored))
            names[n++] = f->name;
    }
    if (extra)
        names[n++] = extra;
    size_t len = 0;
    if (cap)
        buf[0] = 0;
    for (int i = 0; i < n && len < cap; i++) {
        const char *s = i == 0 ? "" : i == n - 1 ? last_sep : sep;
        int w = snprintf(buf + len, cap - len, "%s%s", s, names[i]);
        if (w < 0)
            break;
        len += (size_t)w;
    }
    return buf;
}

int cli_parse_weights(const char *cmd, const char *s, void *field)
{
    ifl_model_opts *o = field;
    if (!strcmp(s, "auto")) {
        o->convert = 0;
        return 0;
    }
    if (ifl_dtype_parse(s, &o->dtype)) {
        char choices[128];
        fprintf(stderr, "inflight %s: --weights: '%s' is not a weight format: %s\n", cmd, s,
                cli_format_words(choices, sizeof choices, 0, ", ", " or ", "auto"));
        return -1;
    }
    o->convert = 1;
    return 0;
}

void cli_describe_weights(char *arg, size_t arg_cap, char *help, size_t help_cap)
{
    cli_format_words(arg, arg_cap, 0, "|", "|", "auto");
    size_t n = (size_t)snprintf(help, help_cap, "hold the weights in this format:");
    for (int i = 0; i < IFL_DTYPE_COUNT && n < help_cap; i++) {
        const ifl_format *f = ifl_format_get((ifl_dtype)i);
        char where[64] = "";
        if (f->backends != (IFL_BACKEND_CPU | IFL_BACKEND_CUDA))
            ifl_device_list(f->backends, where, sizeof where);
        n += (size_t)snprintf(help + n, help_cap - n, "%s %s (%s%s%s%s%s)", i ? "," : "", f->name,
                              f->about, f->stored ? "" : "; made at load", where[0] ? "; on " : "",
                              where, where[0] ? " only, which --device auto then picks" : "");
    }
}

const char *cli_default_vocab_dir(void)
{
    return ifl_runtime_default_vocab_dir();
}

int cli_read_stdin(char **out, size_t *len, size_t max_bytes)
{
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap + 1);
    if (!buf)
        return -1;
    for (;;) {
        if (n == cap) {
            if (cap >= max_bytes) {
                free(buf);
                errno = EFBIG;
                return -1;
            }
            cap = cap * 2 < max_bytes ? cap * 2 : max_bytes;
            char *b = realloc(buf, cap + 1);
            if (!b) {
                free(buf);
                return -1;
            }
            buf = b;
        }
        size_t r = fread(buf + n, 1, cap - n, stdin);
        n += r;
        if (r == 0) {
            if (ferror(stdin)) {
                free(buf);
                return -1;
            }
            break;
        }
    }
    buf[n] = 0;
    *out = buf;
    *len = n;
    return 0;
}

int cli_ensure_bench_model(const char *dir, ifl_err *err)
{
    char path[4096];
    if (ifl_path_join(path, sizeof path, dir, "model.safetensors"))
        return ifl_err_set(err, "%s: path too long", dir);
    if (ifl_file_exists(path))
        return 0;
    ifl_make_model_opts o;
    ifl_make_model_defaults(&o);
    o.cfg.n_layer = 12;
    o.cfg.n_head = 12;
    o.cfg.n_embd = 768;
    o.cfg.n_ctx = 1024;
    o.seed = 124;
    o.scale = 0.02;
    o.vocab_dir = NULL;
    fprintf(stderr, "inflight bench: creating %s (random GPT-2-124M shape, f32)...\n", dir);
    return ifl_make_model(dir, &o, err);
}

int cli_parse_isa(const char *cmd, const char *s, void *field)
{
    ifl_isa *out = field;
    ifl_err err;
    if (ifl_isa_parse(s, out, &err)) {
        fprintf(stderr, "inflight %s: --isa: %s\n", cmd, err.msg);
        return -1;
    }
    return 0;
}

int cli_runtime_open_model(const char *cmd, ifl_device want, ifl_isa isa, const ifl_runtime_opts *o,
                           ifl_runtime *rt)
{
    ifl_err err;
    if (ifl_runtime_resolve(rt, want, isa, &o->model_opts, &err))
        goto fail;
    fprintf(stderr, "inflight %s: device %s (%s)\n", cmd, ifl_device_name(rt->device), rt->why);
    fprintf(stderr, "inflight %s: isa %s (%s)\n", cmd, ifl_isa_name(rt->isa), rt->isa_why);
    if (ifl_runtime_load_model(rt, o, &err))
        goto fail;
    return 0;
fail:
    fprintf(stderr, "inflight %s: %s\n", cmd, err.msg);
    ifl_runtime_close(rt);
    return -1;
}

int cli_runtime_start_backends(const char *cmd, const ifl_runtime_opts *o, ifl_runtime *rt)
{
    ifl_err err;
    if (ifl_runtime_start_backends(rt, o, &err) == 0)
        return 0;
    fprintf(stderr, "inflight %s: %s\n", cmd, err.msg);
    ifl_runtime_close(rt);
    return -1;
}

int cli_runtime_open(const char *cmd, ifl_device want, ifl_isa isa, const ifl_runtime_opts *o,
                     ifl_runtime *rt)
{
    if (cli_runtime_open_model(cmd, want, isa, o, rt))
        return -1;
    return cli_runtime_start_backends(cmd, o, rt);
}

int cli_bench_model(const char **dir)
{
    ifl_err err;
    if (*dir)
        return 0;
    *dir = CLI_BENCH_MODEL;
    if (cli_ensure_bench_model(*dir, &err) == 0)
        return 0;
    fprintf(stderr, "inflight bench: %s\n", err.msg);
    return -1;
}
