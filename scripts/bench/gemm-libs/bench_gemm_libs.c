/* bench_gemm_libs.c: the driver of the GEMM comparison. Times single-precision
 * C (M, N) = A (M, K) x B (K, N) for GPT-2-124M's matrix products (qkv, attn_proj, fc, mlp_proj,
 * and the tied lm_head with B given as (N, K)) in the one library it is linked with (a lib_*.c
 * file: see bench_gemm_libs.h). Not part of the inflight build: scripts/bench/bench-gemm-libs.sh builds
 * one binary per library, runs them and prints the comparison table.
 *
 * Each case: warm-up calls, then the best (and the mean) of --reps timed calls; GFLOP/s = 2MNK /
 * best time. The weights rotate through enough copies to exceed --rotate-mb (default 1024 MiB,
 * more than a big L3), so every call reads B from memory as decode does; --rotate-mb 0 keeps one
 * hot copy. Before timing, each case is checked against a float64 reference at 64 sampled outputs
 * (exit 1 on a mismatch).
 * Output: "# " lines describing the setup, then one tab-separated line per case,
 *   RESULT lib dtype shape M threads gflops best_ms weight_GB/s mean_ms
 * (gflops "n/a", and a reason, when the library cannot run the case). */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench_gemm_libs.h"

static const bench_shape SHAPES[BENCH_N_SHAPES] = {
    {"qkv", 768, 2304, 0},      {"attn_proj", 768, 768, 0}, {"fc", 768, 3072, 0},
    {"mlp_proj", 3072, 768, 0}, {"lm_head", 768, 50257, 1},
};
enum { N_CHECK = 64 };

/* ---- helpers the library files use ----------------------------------------------------------- */

void bench_die(const char *what)
{
    fprintf(stderr, "bench_gemm_libs: %s\n", what);
    exit(1);
}

void *bench_alloc(size_t bytes)
{
    void *p = aligned_alloc(64, (bytes + 63) & ~(size_t)63);
    if (!p)
        bench_die("out of memory");
    return p;
}

int bench_copies(size_t bytes, double rotate_mb)
{
    double n = ceil(rotate_mb * 1048576.0 / (double)bytes);
    return n < 1 ? 1 : n > 256 ? 256 : (int)n;
}

void bench_f32_weights(bench_weights *w, const bench_shape *s, const float *src, double rotate_mb)
{
    size_t bytes = (size_t)s->K * (size_t)s->N * sizeof(float);
    float **cp;
    w->bytes = bytes;
    w->n = bench_copies(bytes, rotate_mb);
    w->priv = cp = calloc((size_t)w->n, sizeof *cp);
    if (!cp)
        bench_die("out of memory");
    for (int i = 0; i < w->n; i++) {
        cp[i] = bench_alloc(bytes);
        memcpy(cp[i], src, bytes);
    }
    w->wref = cp[0];
}

void bench_f32_weights_free(bench_weights *w)
{
    float **cp = w->priv;
    for (int i = 0; i < w->n; i++)
        free(cp[i]);
    free(cp);
    w->priv = w->wref = NULL;
}

/* ---- timing and checking ---------------------------------------------------------------------- */

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;
static float urand(void) /* uniform in [-1, 1) */
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (float)((double)(rng_state >> 11) * (2.0 / 9007199254740992.0) - 1.0);
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Best wall time of `reps` calls after `warmup` ones, rotating through the weight copies. */
static double best_seconds(bench_call *c, int warmup, int reps, double *mean)
{
    int n = c->w->n, k = 1 % n; /* copy 0 was just used by the check */
    for (int i = 0; i < warmup; i++, k = (k + 1) % n)
        lib_gemm(c, k);
    double best = INFINITY, sum = 0;
    for (int i = 0; i < reps; i++, k = (k + 1) % n) {
        double t0 = now_s();
        lib_gemm(c, k);
        double t = now_s() - t0;
        best = t < best ? t : best;
        sum += t;
    }
    *mean = sum / reps;
    return best;
}

/* Exits on a mismatch at any of N_CHECK sampled outputs (tolerance relative to sum |x w|, so
 * summation order does not matter; a wrong operand or transpose is far outside it). */
static void check_result(const bench_call *c)
{
    const bench_shape *s = c->s;
    const float *wref = c->w->wref;
    for (int i = 0; i < N_CHECK; i++) {
        int32_t m = i == 0 ? c->M - 1 : (int32_t)(((uint32_t)i * 2654435761u) % (uint32_t)c->M);
        int32_t n = i == 0 ? s->N - 1 : (int32_t)(((uint32_t)i * 40503u + 7u) % (uint32_t)s->N);
        double ref = 0, mag = 0;
        for (int32_t k = 0; k < s->K; k++) {
            double w = s->nk ? wref[(size_t)n * s->K + k] : wref[(size_t)k * s->N + n];
            double p = (double)c->x[(size_t)m * s->K + k] * w;
            ref += p;
            mag += fabs(p);
        }
        double got = c->y[(size_t)m * s->N + n];
        if (!(fabs(got - ref) <= 1e-4 * mag + 1e-6)) {
            fprintf(stderr,
                    "bench_gemm_libs: %s %s %s M=%d threads=%d: y[%d][%d] = %.7g, reference %.7g "
                    "(sum |x w| %.4g)\n",
                    LIB_NAME, ifl_dtype_name(c->dt), s->name, c->M, c->nth, m, n, got, ref, mag);
            exit(1);
        }
    }
}

static void one_case(const bench_opts *o, bench_call *c)
{
    const char *dt = ifl_dtype_name(c->dt), *why = lib_prepare(c);
    if (why) {
        printf("RESULT\t%s\t%s\t%s\t%d\t%d\tn/a\t-\t-\t%s\n", LIB_NAME, dt, c->s->name, c->M,
               c->nth, why);
    } else {
        for (size_t i = 0; i < (size_t)c->M * (size_t)c->s->N; i++)
            c->y[i] = NAN;
        lib_gemm(c, 0);
        check_result(c);
        double mean;
        double t = best_seconds(c, o->warmup, o->reps, &mean);
        double flops = 2.0 * c->M * (double)c->s->N * c->s->K;
        printf("RESULT\t%s\t%s\t%s\t%d\t%d\t%.2f\t%.4f\t%.2f\t%.4f\n", LIB_NAME, dt, c->s->name,
               c->M, c->nth, flops / t * 1e-9, t * 1e3, (double)c->w->bytes / t * 1e-9, mean * 1e3);
    }
    fflush(stdout);
    lib_release(c);
}

/* Every thread count and M of one shape, for one set of weights. */
static void run_cases(const bench_opts *o, const bench_shape *s, const float *x, float *y,
                      const bench_weights *w, ifl_dtype dt)
{
    for (int ti = 0; ti < o->n_threads; ti++) {
        int nth = o->threads[ti];
        ifl_threadpool *tp = NULL;
        if (lib_uses_pool() && !(tp = ifl_threadpool_new(nth)))
            bench_die("ifl_threadpool_new failed");
        lib_threads(nth);
        for (int mi = 0; mi < o->n_ms; mi++) {
            bench_call c = {.s = s, .dt = dt, .M = o->ms[mi], .nth = nth, .tp = tp, .x = x,
                            .y = y, .w = w};
            one_case(o, &c);
        }
        if (tp)
            ifl_threadpool_free(tp);
    }
}

static void bench_one_shape(const bench_opts *o, const bench_shape *s)
{
    int32_t max_m = 1;
    for (int i = 0; i < o->n_ms; i++)
        max_m = o->ms[i] > max_m ? o->ms[i] : max_m;
    size_t nw = (size_t)s->K * (size_t)s->N, nx = (size_t)max_m * (size_t)s->K;
    float *w = bench_alloc(nw * sizeof *w), *x = bench_alloc(nx * sizeof *x);
    float *y = bench_alloc((size_t)max_m * (size_t)s->N * sizeof *y);
    for (size_t i = 0; i < nw; i++)
        w[i] = 0.05f * urand();
    for (size_t i = 0; i < nx; i++)
        x[i] = urand();
    static const ifl_dtype dts[] = {IFL_DTYPE_F32, IFL_DTYPE_BF16, IFL_DTYPE_F16};
    for (int d = 0; d < 3; d++) {
        if (!o->dtype_on[dts[d]] || !(lib_dtypes() & (1u << dts[d])))
            continue;
        bench_weights bw = {0};
        lib_weights(&bw, s, w, dts[d], o->rotate_mb);
        run_cases(o, s, x, y, &bw, dts[d]);
        lib_weights_free(&bw);
    }
    free(w);
    free(x);
    free(y);
}

/* ---- options ---------------------------------------------------------------------------------- */

static void usage(void)
{
    fprintf(stderr,
            "usage: bench-gemm-%s [--isa avx2|avx512|scalar] [--threads 1,2] [--m 1,8,64,512]\n"
            "  [--shapes qkv,attn_proj,fc,mlp_proj,lm_head] [--dtypes f32,bf16,f16]\n"
            "  [--reps 10] [--warmup 2] [--rotate-mb 1024 (0: one hot copy of the weights)]\n"
            "  [--gemv-rows N (ours: streaming kernels up to N rows; default: the engine's)]\n",
            LIB_NAME);
    exit(2);
}

/* Comma-separated positive integers into out (at most BENCH_MAX_LIST); exits on anything else. */
static int parse_ints(const char *opt, const char *s, int *out)
{
    int n = 0;
    for (const char *p = s; *p;) {
        char *end;
        long v = strtol(p, &end, 10);
        if (end == p || v < 1 || v > 1 << 20 || n == BENCH_MAX_LIST || (*end && *end != ',')) {
            fprintf(stderr, "bench_gemm_libs: %s %s: want up to %d positive integers, e.g. 1,2\n",
                    opt, s, BENCH_MAX_LIST);
            exit(2);
        }
        out[n++] = (int)v;
        p = *end ? end + 1 : end;
    }
    return n;
}

/* Comma-separated names, each one of names[0..n-1]: sets on[i]. */
static void parse_names(const char *opt, const char *s, const char *const *names, int n, int *on)
{
    memset(on, 0, sizeof(int) * (size_t)n);
    char buf[256];
    snprintf(buf, sizeof buf, "%s", s);
    for (char *save = NULL, *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
        int i = 0;
        while (i < n && strcmp(t, names[i]) != 0)
            i++;
        if (i == n) {
            fprintf(stderr, "bench_gemm_libs: %s: unknown name '%s'\n", opt, t);
            exit(2);
        }
        on[i] = 1;
    }
}

static void parse_opts(bench_opts *o, int argc, char **argv)
{
    static const char *const shape_names[BENCH_N_SHAPES] = {"qkv", "attn_proj", "fc", "mlp_proj",
                                                            "lm_head"};
    static const char *const dt_names[3] = {"f32", "f16", "bf16"}; /* ifl_dtype order */
    *o = (bench_opts){.isa_name = "avx2", .threads = {1, 2}, .n_threads = 2,
                      .ms = {1, 8, 64, 512}, .n_ms = 4, .shape_on = {1, 1, 1, 1, 1},
                      .dtype_on = {1, 1, 1}, .reps = 10, .warmup = 2, .rotate_mb = 1024};
    for (int i = 1; i < argc; i += 2) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!v || !strcmp(a, "--help") || !strcmp(a, "-h"))
            usage();
        if (!strcmp(a, "--isa"))
            o->isa_name = v;
        else if (!strcmp(a, "--threads"))
            o->n_threads = parse_ints(a, v, o->threads);
        else if (!strcmp(a, "--m"))
            o->n_ms = parse_ints(a, v, o->ms);
        else if (!strcmp(a, "--shapes"))
            parse_names(a, v, shape_names, BENCH_N_SHAPES, o->shape_on);
        else if (!strcmp(a, "--dtypes"))
            parse_names(a, v, dt_names, 3, o->dtype_on);
        else if (!strcmp(a, "--reps"))
            o->reps = atoi(v) > 0 ? atoi(v) : 1;
        else if (!strcmp(a, "--warmup"))
            o->warmup = atoi(v) > 0 ? atoi(v) : 0;
        else if (!strcmp(a, "--rotate-mb"))
            o->rotate_mb = atof(v) > 0 ? atof(v) : 0;
        else if (!strcmp(a, "--gemv-rows"))
            o->gemv_rows = atoi(v) > 0 ? atoi(v) : 0;
        else
            usage();
    }
    ifl_err err;
    if (ifl_isa_parse(o->isa_name, &o->isa, &err) || ifl_isa_resolve(o->isa, &o->isa, &err)) {
        fprintf(stderr, "bench_gemm_libs: --isa: %s\n", err.msg);
        exit(2);
    }
}

int main(int argc, char **argv)
{
    bench_opts o;
    parse_opts(&o, argc, argv);
    printf("# cpu: %s; --isa %s; best of %d after %d warm-up; weights rotated over %.0f MiB\n",
           ifl_cpu_features(), ifl_isa_name(o.isa), o.reps, o.warmup, o.rotate_mb);
    lib_setup(&o);
    for (int i = 0; i < BENCH_N_SHAPES; i++)
        if (o.shape_on[i])
            bench_one_shape(&o, &SHAPES[i]);
    return 0;
}
