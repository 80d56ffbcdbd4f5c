/* test_cuda_kernels.c: the CUDA kernels of cuda/kernels.h, one launcher at a time, against host
 * references written here in double precision (sampling is tested in test_cuda_sample.c).
 *
 *   embed             bf16 and f16 tables, random tokens and positions with repeats and the edges
 *   add_layernorm     LN only, add + bias + LN, add without bias, residual only (out NULL), the
 *                     gather through rows[]; out f32, bf16, f16; C = 768, 45 (odd) and 1600
 *   bias_gelu         tanh and erf, out bf16 and f16, F = 3072 and 37 (odd)
 *   qkv_bias_kv_append  qkv biased in place; exactly the slots named by kv_slot written, every
 * other element of the pool (other layers, other slots, slot -1 tokens) untouched attention one
 * ragged launch: prefill chunks (causal), decodes at long positions, a token at the last position
 * (n_keys == max_keys), padding rows (zeros), shuffled block tables; bf16 and f16 pools; scale
 * 1/sqrt(D) and / (layer + 1); D = 64 and D = 32; block size 16 and 8
 *
 * Every output buffer is poisoned before the call (all bytes 0xFF: NaN in f32, bf16 and f16) and
 * has a guard row after it that must stay poisoned, so an element the kernel forgot to write, or
 * one it wrote out of bounds, is caught. Comparisons are written `!(err <= tol)` so that NaN fails.
 *
 * Tolerances: an output stored as a 16-bit type is compared with
 *   |got - ref| <= u * (|ref| + ct) + ct  (+ 2^-25 for f16: half its subnormal spacing)
 * where u is the unit roundoff of the output type (2^-24 f32, 2^-11 f16, 2^-8 bf16: the rounding
 * of the final store) and ct bounds the f32 arithmetic before the store, derived per kernel below.
 *
 * Exit status: 0 pass, 1 failure, 77 skipped (no CUDA device, or this build's kernels cannot run on
 * it). */
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime.h>

#include "kernels.h"
#include "rng.h"
#include "tensor.h"
#include "testutil.h"

static ifl_rng rng;
static cudaStream_t stream;

/* ---- CUDA call checking ---------------------------------------------------------------------- */

/* Every CUDA call and every launcher (which returns a cudaError_t as an int) goes through CK: a
 * failure prints the call, the place and the CUDA error, and counts as a test failure. */
#define CK(call) ck_((int)(call), #call, __FILE__, __LINE__)

static int ck_(int rc, const char *call, const char *file, int line)
{
    if (rc == 0)
        return 0;
    fprintf(stderr, "FAIL %s:%d: %s: %s (%s, %d)\n", file, line, call,
            cudaGetErrorString((cudaError_t)rc), cudaGetErrorName((cudaError_t)rc), rc);
    test_failures++;
    return -1;
}

/* Runs the launcher's status through CK, then waits for the kernel (errors it raised while running
 * surface here). */
#define LAUNCH(call)                                                                               \
    do {                                                                                           \
        CK(call);                                                                                  \
        CK(cudaStreamSynchronize(stream));                                                         \
    } while (0)

static void *dev_alloc(size_t bytes)
{
    void *p = NULL;
    if (CK(cudaMalloc(&p, bytes))) {
        fprintf(stderr, "cannot allocate %zu bytes of device memory\n", bytes);
        exit(1);
    }
    return p;
}

/* Device memory holding a copy of host memory. */
static void *dev_copy(const void *h, size_t bytes)
{
    void *d = dev_alloc(bytes);
    CK(cudaMemcpy(d, h, bytes, cudaMemcpyHostToDevice));
    return d;
}

static void dev_poison(void *d, size_t bytes)
{
    CK(cudaMemset(d, 0xFF, bytes));
}

static void download(void *h, const void *d, size_t bytes)
{
    memset(h, 0, bytes); /* defined contents even if the copy fails (counted as a failure) */
    CK(cudaMemcpy(h, d, bytes, cudaMemcpyDeviceToHost));
}

/* ---- host helpers ---------------------------------------------------------------------------- */

static const char *dt_name(ifl_dtype t)
{
    return t == IFL_DTYPE_F32 ? "f32" : t == IFL_DTYPE_F16 ? "f16" : "bf16";
}

/* Unit roundoff of round-to-nearest into t: 2^-p for p bits of precision. */
static double unit_ro(ifl_dtype t)
{
    return t == IFL_DTYPE_F32 ? 0x1p-24 : t == IFL_DTYPE_F16 ? 0x1p-11 : 0x1p-8;
}

static double normal(double sd)
{
    return sd * ifl_rng_normal(&rng);
}

static int32_t rand_below(int32_t n)
{
    return (int32_t)(ifl_rng_next(&rng) % (uint64_t)n);
}

static void shuffle(int32_t *a, int32_t n)
{
    for (int32_t i = n - 1; i > 0; i--) {
        int32_t j = rand_below(i + 1), t = a[i];
        a[i] = a[j];
        a[j] = t;
    }
}

/* Stores v into element i of a buffer of dtype t (rounded to nearest even). */
static void store(void *buf, ifl_dtype t, size_t i, float v)
{
    if (t == IFL_DTYPE_BF16)
        ((uint16_t *)buf)[i] = ifl_f32_to_bf16(v);
    else if (t == IFL_DTYPE_F16)
        ((uint16_t *)buf)[i] = ifl_f32_to_f16(v);
    else
        ((float *)buf)[i] = v;
}

/* 1 when element i of a buffer of dtype t still holds the poison (all bytes 0xFF). */
static int poisoned(const void *buf, ifl_dtype t, size_t i)
{
    size_t es = ifl_dtype_size(t);
    const unsigned char *p = (const unsigned char *)buf + i * es;
    for (size_t k = 0; k < es; k++)
        if (p[k] != 0xFF)
            return 0;
    return 1;
}

/* Counts the elements [from, to) of a downloaded buffer that lost their poison. */
static size_t count_unpoisoned(const void *buf, ifl_dtype t, size_t from, size_t to)
{
    size_t n = 0;
    for (size_t i = from; i < to; i++)
        n += !poisoned(buf, t, i);
    return n;
}

/* A running comparison: counts elements out of tolerance (printing the first few), and the
 * largest absolute error and error / tolerance. */
typedef struct {
    char name[160];
    size_t n, bad;
    double max_abs, max_ratio;
} cmp_t;

static void cmp_init(cmp_t *c, const char *fmt_name, ...) __attribute__((format(printf, 2, 3)));

static void cmp_init(cmp_t *c, const char *fmt_name, ...)
{
    memset(c, 0, sizeof *c);
    va_list ap;
    va_start(ap, fmt_name);
    vsnprintf(c->name, sizeof c->name, fmt_name, ap);
    va_end(ap);
}

static void cmp_add(cmp_t *c, double got, double ref, double tol, size_t row, size_t col)
{
    double err = fabs(got - ref);
    c->n++;
    if (!(err <= tol)) { /* NaN fails here */
        if (c->bad < 5)
            fprintf(stderr, "  %s: [%zu][%zu] got %.9g, expected %.9g (|err| %.3g > tol %.3g)\n",
                    c->name, row, col, got, ref, err, tol);
        c->bad++;
        c->max_ratio = isnan(err) ? INFINITY : fmax(c->max_ratio, err / tol);
        if (!isnan(err))
            c->max_abs = fmax(c->max_abs, err);
        return;
    }
    c->max_abs = fmax(c->max_abs, err);
    if (tol > 0)
        c->max_ratio = fmax(c->max_ratio, err / tol);
}

/* An output element of dtype t: the rounding of the store on top of ct, the f32 arithmetic. */
static void cmp_out(cmp_t *c, ifl_dtype t, double got, double ref, double ct, size_t row,
                    size_t col)
{
    double tol = unit_ro(t) * (fabs(ref) + ct) + ct + (t == IFL_DTYPE_F16 ? 0x1p-25 : 0.0);
    cmp_add(c, got, ref, tol, row, col);
}

static void cmp_end(cmp_t *c)
{
    printf("  %-58s %8zu values  max |err| %.3g  max err/tol %.3f\n", c->name, c->n, c->max_abs,
           c->max_ratio);
    CHECKF(c->bad == 0, "%s: %zu of %zu values out of tolerance", c->name, c->bad, c->n);
}

/* ---- embed ----------------------------------------------------------------------------------- */

/* x[t] = wte[tok] + wpe[pos]: the two table values are exact in f32, so the f32 sum is their exact
 * sum rounded once: |err| <= 2^-24 |ref|. */
static void test_embed(ifl_dtype wdt, int32_t C)
{
    const int32_t V = 517, P = 300, T = 41;
    size_t es = ifl_dtype_size(wdt);
    void *wte = test_xmalloc((size_t)V * C * es), *wpe = test_xmalloc((size_t)P * C * es);
    for (size_t i = 0; i < (size_t)V * C; i++)
        store(wte, wdt, i, (float)normal(0.5));
    for (size_t i = 0; i < (size_t)P * C; i++)
        store(wpe, wdt, i, (float)normal(0.5));
    int32_t tok[41], pos[41];
    for (int32_t t = 0; t < T; t++) {
        tok[t] = rand_below(V);
        pos[t] = rand_below(P);
    }
    tok[1] = tok[0]; /* repeats */
    tok[9] = tok[0];
    pos[4] = pos[3];
    pos[10] = pos[3];
    tok[2] = 0; /* the edges of both tables */
    tok[T - 1] = V - 1;
    pos[5] = 0;
    pos[T - 2] = P - 1;

    void *d_wte = dev_copy(wte, (size_t)V * C * es), *d_wpe = dev_copy(wpe, (size_t)P * C * es);
    int32_t *d_tok = dev_copy(tok, sizeof tok), *d_pos = dev_copy(pos, sizeof pos);
    size_t xn = (size_t)(T + 1) * C; /* one guard row */
    float *d_x = dev_alloc(xn * sizeof(float));
    dev_poison(d_x, xn * sizeof(float));
    LAUNCH(ifl_cuda_embed(d_x, d_wte, d_wpe, wdt, d_tok, d_pos, T, C, stream));
    float *x = test_xmalloc(xn * sizeof(float));
    download(x, d_x, xn * sizeof(float));

    cmp_t c;
    cmp_init(&c, "embed %s C=%d", dt_name(wdt), C);
    for (int32_t t = 0; t < T; t++)
        for (int32_t i = 0; i < C; i++) {
            double ref = (double)ifl_load_f32(wdt, wte, (size_t)tok[t] * C + i) +
                         (double)ifl_load_f32(wdt, wpe, (size_t)pos[t] * C + i);
            cmp_out(&c, IFL_DTYPE_F32, x[(size_t)t * C + i], ref, 0.0, (size_t)t, (size_t)i);
        }
    cmp_end(&c);
    size_t g = count_unpoisoned(x, IFL_DTYPE_F32, (size_t)T * C, xn);
    CHECKF(g == 0, "embed %s C=%d: %zu values written past the last row", dt_name(wdt), C, g);

    cudaFree(d_wte);
    cudaFree(d_wpe);
    cudaFree(d_tok);
    cudaFree(d_pos);
    cudaFree(d_x);
    free(wte);
    free(wpe);
    free(x);
}

/* ---- add + LayerNorm ------------------------------------------------------------------------- */

typedef enum { LN_ONLY, LN_ADD_BIAS, LN_ADD, RESID_ONLY, LN_GATHER } ln_mode;
static const char *const ln_mode_names[] = {"LN only", "add+bias+LN", "add (no bias)+LN",
                                            "residual only (out NULL)", "gather rows[]"};

/* Tolerances.
 * x after the add: the kernel's f32 x + add + bias is two roundings of partial sums, each at most
 * 2^-24 of a partial sum, so |err| <= 2^-23 (|x| + |add| + |bias|).
 * LayerNorm: the statistics are f32 sums over C values (C <= 1600): their rounding error is at
 * most a few 1e-7 of sum |x| for a blocked or tree reduction (~1e-6 even for one long sequential
 * sum in the typical case); with the rows' means kept within about one standard deviation that is
 * < 3e-6 of the standard deviation, so xhat = (x - mean) * rstd is off by < 3e-6 (1 + |xhat|) and
 * out = xhat w + b by < 3e-6 |w| (1 + |xhat|) plus the rounding of the last multiply-add. ct below
 * allows 2e-5 (|w| (1 + |xhat|) + |b|): about 6x that, yet it still sees an (n - 1) variance
 * divisor at C = 768 (a 6.5e-4 relative change of xhat) and eps misplaced (row 4 has a variance
 * close to eps). */
static void test_layernorm(ln_mode mode, ifl_dtype out_dt, int32_t C)
{
    const int32_t R = 19; /* rows of x */
    const float eps = 1e-5f;
    int gather = mode == LN_GATHER,
        has_add = mode == LN_ADD_BIAS || mode == LN_ADD || mode == RESID_ONLY;
    int has_bias = mode == LN_ADD_BIAS || mode == RESID_ONLY, has_out = mode != RESID_ONLY;
    int32_t rows[11] = {5, 0, 18, 5, 3, 11, 18, 7, 1, 16, 9}; /* unordered, repeats, both ends */
    int32_t n_rows = gather ? 11 : R;
    size_t xs = (size_t)(R + 1) * C; /* one guard row */
    float *x = test_xmalloc(xs * sizeof(float)), *add = test_xmalloc((size_t)R * C * sizeof(float));
    float *bias = test_xmalloc((size_t)C * sizeof(float)),
          *w = test_xmalloc((size_t)C * sizeof(float)),
          *b = test_xmalloc((size_t)C * sizeof(float));
    for (int32_t r = 0; r < R; r++) {
        double sd = r == 4 ? 0.003 : 0.5 + 0.1 * (r % 7); /* row 4: variance ~ eps */
        double mean = r == 4 ? 0.0 : normal(1.0) * sd;    /* |mean| ~ one standard deviation */
        for (int32_t i = 0; i < C; i++) {
            x[(size_t)r * C + i] = (float)(mean + normal(sd));
            add[(size_t)r * C + i] = (float)normal(1.0);
        }
    }
    for (int32_t i = 0; i < C; i++) {
        bias[i] = (float)normal(0.5);
        w[i] = (float)(1.0 + normal(0.2));
        b[i] = (float)normal(0.2);
    }
    float *d_x = dev_alloc(xs * sizeof(float));
    dev_poison(d_x, xs * sizeof(float));
    CK(cudaMemcpy(d_x, x, (size_t)R * C * sizeof(float), cudaMemcpyHostToDevice));
    float *d_add = has_add ? dev_copy(add, (size_t)R * C * sizeof(float)) : NULL;
    float *d_bias = has_bias ? dev_copy(bias, (size_t)C * sizeof(float)) : NULL;
    float *d_w = dev_copy(w, (size_t)C * sizeof(float)),
          *d_b = dev_copy(b, (size_t)C * sizeof(float));
    int32_t *d_rows = gather ? dev_copy(rows, sizeof rows) : NULL;
    size_t es = ifl_dtype_size(out_dt), on = (size_t)(n_rows + 1) * C; /* one guard row */
    void *d_out = NULL;
    if (has_out) {
        d_out = dev_alloc(on * es);
        dev_poison(d_out, on * es);
    }
    LAUNCH(ifl_cuda_add_layernorm(d_out, out_dt, d_x, d_add, d_bias, d_w, d_b, d_rows, n_rows, C,
                                  eps, stream));
    float *gx = test_xmalloc(xs * sizeof(float));
    download(gx, d_x, xs * sizeof(float));
    void *out = test_xmalloc(on * es);
    if (has_out)
        download(out, d_out, on * es);

    /* the residual after the add, in double */
    double *xr = test_xmalloc((size_t)R * C * sizeof(double));
    for (size_t i = 0; i < (size_t)R * C; i++)
        xr[i] = (double)x[i] + (has_add ? (double)add[i] : 0.0) +
                (has_bias ? (double)bias[i % (size_t)C] : 0.0);
    char tag[120];
    snprintf(tag, sizeof tag, "layernorm %s C=%d", ln_mode_names[mode], C);
    if (has_add) {
        cmp_t c;
        cmp_init(&c, "%s: x", tag);
        for (size_t i = 0; i < (size_t)R * C; i++) {
            double mag = fabs((double)x[i]) + fabs((double)add[i]) +
                         (has_bias ? fabs((double)bias[i % (size_t)C]) : 0.0);
            cmp_add(&c, gx[i], xr[i], 0x1p-23 * mag, i / (size_t)C, i % (size_t)C);
        }
        cmp_end(&c);
    } else {
        CHECKF(!memcmp(gx, x, (size_t)R * C * sizeof(float)), "%s: x changed without add", tag);
    }
    size_t g = count_unpoisoned(gx, IFL_DTYPE_F32, (size_t)R * C, xs);
    CHECKF(g == 0, "%s: %zu values written into x past its last row", tag, g);

    if (has_out) {
        cmp_t c;
        cmp_init(&c, "%s: out %s", tag, dt_name(out_dt));
        for (int32_t r = 0; r < n_rows; r++) {
            const double *row = xr + (size_t)(gather ? rows[r] : r) * C;
            double mean = 0, var = 0;
            for (int32_t i = 0; i < C; i++)
                mean += row[i];
            mean /= C;
            for (int32_t i = 0; i < C; i++)
                var += (row[i] - mean) * (row[i] - mean);
            var /= C;
            double rstd = 1.0 / sqrt(var + (double)eps);
            for (int32_t i = 0; i < C; i++) {
                double xh = (row[i] - mean) * rstd;
                double ref = xh * w[i] + b[i];
                double ct = 2e-5 * (fabs((double)w[i]) * (1.0 + fabs(xh)) + fabs((double)b[i]));
                cmp_out(&c, out_dt, ifl_load_f32(out_dt, out, (size_t)r * C + i), ref, ct,
                        (size_t)r, (size_t)i);
            }
        }
        cmp_end(&c);
        g = count_unpoisoned(out, out_dt, (size_t)n_rows * C, on);
        CHECKF(g == 0, "%s: %zu values written past out's last row", tag, g);
    }

    cudaFree(d_x);
    cudaFree(d_add);
    cudaFree(d_bias);
    cudaFree(d_w);
    cudaFree(d_b);
    cudaFree(d_rows);
    cudaFree(d_out);
    free(x);
    free(add);
    free(bias);
    free(w);
    free(b);
    free(gx);
    free(out);
    free(xr);
}

/* ---- bias + GELU ----------------------------------------------------------------------------- */

static double gelu_ref(double v, int erf_gelu)
{
    if (erf_gelu)
        return 0.5 * v * (1.0 + erf(v / sqrt(2.0)));
    return 0.5 * v * (1.0 + tanh(sqrt(2.0 / 3.14159265358979323846) * (v + 0.044715 * v * v * v)));
}

/* Tolerance: v = in + bias rounded to f32 (2^-24 |v|, times gelu' <= 1.13), then 0.5 v (1 + t)
 * with t = tanh or erf accurate to a few f32 ulps (|t| <= 1: ~2.4e-7 absolute, times 0.5 |v|), and
 * the few roundings of the polynomial inside tanh (damped by sech^2): about 3e-7 max(1, |v|) in
 * all. ct = 2^-20 max(1, |v|) (9.5e-7) allows 3x that; still far below the tanh/erf difference
 * (e.g. 4e-4 at v = -3, where gelu itself is only -0.004). */
static void test_gelu(int erf_gelu, ifl_dtype out_dt, int32_t F)
{
    const int32_t T = 13;
    size_t n = (size_t)T * F, es = ifl_dtype_size(out_dt);
    float *in = test_xmalloc(n * sizeof(float)), *bias = test_xmalloc((size_t)F * sizeof(float));
    for (size_t i = 0; i < n; i++)
        in[i] = (float)normal(2.0);
    for (int32_t i = 0; i < F; i++)
        bias[i] = (float)normal(1.0);
    float *d_in = dev_copy(in, n * sizeof(float)), *d_bias = dev_copy(bias, (size_t)F * 4);
    size_t on = n + (size_t)F; /* one guard row */
    void *d_out = dev_alloc(on * es);
    dev_poison(d_out, on * es);
    LAUNCH(ifl_cuda_bias_gelu(d_out, out_dt, d_in, d_bias, T, F, erf_gelu, stream));
    void *out = test_xmalloc(on * es);
    download(out, d_out, on * es);
    cmp_t c;
    cmp_init(&c, "bias_gelu %s out %s F=%d", erf_gelu ? "erf" : "tanh", dt_name(out_dt), F);
    for (size_t i = 0; i < n; i++) {
        double v = (double)in[i] + (double)bias[i % (size_t)F];
        cmp_out(&c, out_dt, ifl_load_f32(out_dt, out, i), gelu_ref(v, erf_gelu),
                0x1p-20 * fmax(1.0, fabs(v)), i / (size_t)F, i % (size_t)F);
    }
    cmp_end(&c);
    size_t g = count_unpoisoned(out, out_dt, n, on);
    CHECKF(g == 0, "bias_gelu: %zu values written past the last row", g);
    cudaFree(d_in);
    cudaFree(d_bias);
    cudaFree(d_out);
    free(in);
    free(bias);
    free(out);
}

/* ---- qkv bias + KV append -------------------------------------------------------------------- */

/* The biased qkv must be the f32 sum (one rounding: 2^-24 |ref|); each stored key/value is that
 * f32 value rounded once to the pool's dtype (u |v|). Every element of the pool not named by a
 * kv_slot >= 0 (other layers, other slots, other blocks, the tokens with slot -1) must keep its
 * poison. */
static void test_kv_append(ifl_dtype kv_dt, int32_t C, int32_t H)
{
    const int32_t T = 23, L = 3, layer = 1, BS = 16, NB = 12, D = C / H;
    const int32_t n_slots = NB * BS;
    /* distinct slots: the pool's first and last among them, in random order; some tokens -1 */
    int32_t *cand = test_xmalloc((size_t)n_slots * sizeof(int32_t)), kv_slot[23];
    for (int32_t i = 0; i < n_slots; i++)
        cand[i] = i;
    shuffle(cand + 1, n_slots - 2); /* keeps 0 first and n_slots - 1 last */
    kv_slot[0] = 0;
    kv_slot[1] = n_slots - 1;
    for (int32_t t = 2; t < T; t++)
        kv_slot[t] = cand[t - 1];
    shuffle(kv_slot, T);
    for (int32_t t = 0; t < T; t++)
        if (t % 5 == 2 && kv_slot[t] != 0 && kv_slot[t] != n_slots - 1)
            kv_slot[t] = -1;
    free(cand);

    size_t qn = (size_t)(T + 1) * 3 * C; /* one guard row */
    float *qkv = test_xmalloc(qn * sizeof(float)),
          *bias = test_xmalloc((size_t)3 * C * sizeof(float));
    for (size_t i = 0; i < (size_t)T * 3 * C; i++)
        qkv[i] = (float)normal(1.0);
    for (int32_t i = 0; i < 3 * C; i++)
        bias[i] = (float)normal(0.5);
    float *d_qkv = dev_alloc(qn * sizeof(float));
    dev_poison(d_qkv, qn * sizeof(float));
    CK(cudaMemcpy(d_qkv, qkv, (size_t)T * 3 * C * sizeof(float), cudaMemcpyHostToDevice));
    float *d_bias = dev_copy(bias, (size_t)3 * C * sizeof(float));
    int32_t *d_slot = dev_copy(kv_slot, sizeof kv_slot);
    size_t es = ifl_dtype_size(kv_dt);
    size_t pool_n = (size_t)NB * L * 2 * H * BS * D;
    void *d_pool = dev_alloc(pool_n * es);
    dev_poison(d_pool, pool_n * es);
    LAUNCH(ifl_cuda_qkv_bias_kv_append(d_qkv, d_bias, d_pool, kv_dt, d_slot, T, C, H, layer, L, BS,
                                       stream));
    float *gq = test_xmalloc(qn * sizeof(float));
    download(gq, d_qkv, qn * sizeof(float));
    void *pool = test_xmalloc(pool_n * es);
    download(pool, d_pool, pool_n * es);

    char tag[96];
    snprintf(tag, sizeof tag, "qkv_bias_kv_append %s C=%d H=%d", dt_name(kv_dt), C, H);
    cmp_t c;
    cmp_init(&c, "%s: qkv", tag);
    for (size_t i = 0; i < (size_t)T * 3 * C; i++) {
        double ref = (double)qkv[i] + (double)bias[i % (size_t)(3 * C)];
        cmp_out(&c, IFL_DTYPE_F32, gq[i], ref, 0.0, i / (size_t)(3 * C), i % (size_t)(3 * C));
    }
    cmp_end(&c);
    size_t g = count_unpoisoned(gq, IFL_DTYPE_F32, (size_t)T * 3 * C, qn);
    CHECKF(g == 0, "%s: %zu values written past qkv's last row", tag, g);

    unsigned char *mark = calloc(pool_n, 1);
    if (!mark)
        exit(1);
    cmp_t ck;
    cmp_init(&ck, "%s: pool slots", tag);
    for (int32_t t = 0; t < T; t++) {
        if (kv_slot[t] < 0)
            continue;
        size_t block = (size_t)(kv_slot[t] / BS), s = (size_t)(kv_slot[t] % BS);
        for (int32_t kv = 0; kv < 2; kv++)
            for (int32_t h = 0; h < H; h++)
                for (int32_t d = 0; d < D; d++) {
                    size_t src = (size_t)t * 3 * C + (size_t)(1 + kv) * C + (size_t)h * D + d;
                    float v = qkv[src] + bias[src % (size_t)(3 * C)]; /* the f32 value stored */
                    size_t idx = ((((block * L + layer) * 2 + kv) * H + h) * BS + s) * D + d;
                    mark[idx] = 1;
                    cmp_out(&ck, kv_dt, ifl_load_f32(kv_dt, pool, idx), v, 0.0, (size_t)t,
                            (size_t)(kv * C + h * D + d));
                }
    }
    cmp_end(&ck);
    size_t stray = 0;
    for (size_t i = 0; i < pool_n; i++)
        if (!mark[i] && !poisoned(pool, kv_dt, i)) {
            if (stray < 3)
                fprintf(stderr, "  %s: pool element %zu written but named by no slot\n", tag, i);
            stray++;
        }
    CHECKF(stray == 0, "%s: %zu pool elements written outside the named slots", tag, stray);
    free(mark);
    cudaFree(d_qkv);
    cudaFree(d_bias);
    cudaFree(d_slot);
    cudaFree(d_pool);
    free(qkv);
    free(bias);
    free(gq);
    free(pool);
}

/* ---- attention ------------------------------------------------------------------------------- */

typedef struct {
    int32_t pos0, len; /* pos0 < 0: one padding row (n_keys 0) */
} att_run;

/* One launch over a ragged mix. Sequences (one per real run): a prefill chunk from position 0, a
 * decode at 700, a chunk continuing at 37, a decode at 0 (one key), a decode at the last position
 * max_keys - 1, a chunk across a block boundary, a decode at the first slot of a block; padding
 * rows in the middle and at the end.
 *
 * The pool is poisoned (NaN) everywhere except layer `layer` of the positions 0..last of each
 * sequence, which hold random values already rounded to the pool's dtype; the reference computes
 * from those same values. So a kernel that reads a key past n_keys, a slot past the sequence's
 * last position, another layer, or a block-table entry past the ones needed (they name a spare
 * block full of NaN) produces NaN. The K and V columns of qkv are NaN too: attention must read
 * keys and values from the pool.
 *
 * Tolerance: out is rounded to the pool's dtype (u |ref|) after f32 arithmetic whose error, for
 * each (token, head), is bounded by
 *   scores: a D-term f32 dot product: |ds| <= D 2^-24 S1, S1 = max_j scale sum_d |q_d k_jd|;
 *           each probability then moves by a relative <= 2 |ds| (numerator and normaliser), plus
 *           ~1e-6 for exp and the normalisation;
 *   values: the sum over n keys in f32: <= n 2^-24 sum_j p_j |v_jd| (sequential worst case);
 * so ct = A_d (2 D 2^-24 S1 + n 2^-24 + 1e-6), with A_d = sum_j p_j |v_jd|. These are worst-case
 * bounds of f32 arithmetic; a kernel that rounds q or the probabilities to 16 bits (tensor-core
 * style) would need a looser bound. A missing or extra key changes an output by about
 * p_j |v_j - out| (1/700 at position 700), several times the tolerance. */
static void test_attention(ifl_dtype kv_dt, int32_t C, int32_t H, int32_t BS, int by_layer)
{
    const int32_t L = 3, layer = 2, max_keys = 1024, D = C / H;
    const att_run runs[] = {{0, 25},   {700, 1}, {37, 20}, {-1, 1}, {0, 1},
                            {1023, 1}, {505, 9}, {16, 1},  {-1, 1}};
    const int32_t n_runs = (int32_t)(sizeof runs / sizeof runs[0]);
    int32_t S = 0, T = 0;
    for (int32_t r = 0; r < n_runs; r++) {
        S += runs[r].pos0 >= 0;
        T += runs[r].len;
    }
    /* block tables: every sequence's blocks drawn from one shuffled permutation of the pool, two
     * spare blocks (never written: NaN) fill the unused table entries */
    const int32_t bt_stride = max_keys / BS + 3;
    int32_t *nblk = test_xmalloc((size_t)S * sizeof(int32_t)), *last = test_xmalloc((size_t)S * 4);
    int32_t NB = 2;
    for (int32_t r = 0, s = 0; r < n_runs; r++)
        if (runs[r].pos0 >= 0) {
            last[s] = runs[r].pos0 + runs[r].len - 1;
            nblk[s] = last[s] / BS + 1;
            NB += nblk[s++];
        }
    int32_t *perm = test_xmalloc((size_t)NB * sizeof(int32_t));
    for (int32_t i = 0; i < NB; i++)
        perm[i] = i;
    shuffle(perm, NB);
    int32_t spare = perm[NB - 1];
    int32_t *tables = test_xmalloc((size_t)S * bt_stride * sizeof(int32_t));
    for (int32_t s = 0, next = 0; s < S; s++)
        for (int32_t j = 0; j < bt_stride; j++)
            tables[(size_t)s * bt_stride + j] = j < nblk[s] ? perm[next++] : spare;

    size_t es = ifl_dtype_size(kv_dt);
    size_t per_block = (size_t)L * 2 * H * BS * D, pool_n = (size_t)NB * per_block;
    void *pool = test_xmalloc(pool_n * es);
    memset(pool, 0xFF, pool_n * es);
#define KV_IDX(s, p, kv, h, d)                                                                     \
    (((((size_t)tables[(size_t)(s)*bt_stride + (p) / BS] * L + layer) * 2 + (kv)) * H + (h)) *     \
         BS +                                                                                      \
     (size_t)((p) % BS)) *                                                                         \
            D +                                                                                    \
        (size_t)(d)
    for (int32_t s = 0; s < S; s++)
        for (int32_t p = 0; p <= last[s]; p++)
            for (int32_t kv = 0; kv < 2; kv++)
                for (int32_t h = 0; h < H; h++)
                    for (int32_t d = 0; d < D; d++)
                        store(pool, kv_dt, KV_IDX(s, p, kv, h, d), (float)normal(1.0));

    /* per token: query, key count, table row */
    float *qkv = test_xmalloc((size_t)T * 3 * C * sizeof(float));
    memset(qkv, 0xFF, (size_t)T * 3 * C * sizeof(float)); /* K and V columns: NaN */
    int32_t *n_keys = test_xmalloc((size_t)T * 4), *trow = test_xmalloc((size_t)T * 4);
    for (int32_t r = 0, s = 0, t = 0; r < n_runs; r++) {
        for (int32_t i = 0; i < runs[r].len; i++, t++) {
            n_keys[t] = runs[r].pos0 >= 0 ? runs[r].pos0 + i + 1 : 0;
            trow[t] = runs[r].pos0 >= 0 ? s : 0;
            double qs = t % 4 == 1 ? 3.0 : 1.0; /* some sharper rows */
            for (int32_t j = 0; j < C; j++)
                qkv[(size_t)t * 3 * C + j] = (float)normal(qs);
        }
        s += runs[r].pos0 >= 0;
    }
    float scale = 1.0f / sqrtf((float)D);
    if (by_layer)
        scale /= (float)(layer + 1);

    float *d_qkv = dev_copy(qkv, (size_t)T * 3 * C * sizeof(float));
    void *d_pool = dev_copy(pool, pool_n * es);
    int32_t *d_nk = dev_copy(n_keys, (size_t)T * 4), *d_trow = dev_copy(trow, (size_t)T * 4);
    int32_t *d_tables = dev_copy(tables, (size_t)S * bt_stride * sizeof(int32_t));
    size_t on = (size_t)(T + 1) * C; /* one guard row */
    void *d_out = dev_alloc(on * es);
    dev_poison(d_out, on * es);
    LAUNCH(ifl_cuda_attention(d_out, kv_dt, d_qkv, d_pool, kv_dt, d_nk, d_trow, d_tables, bt_stride,
                              T, C, H, layer, L, BS, max_keys, scale, stream));
    void *out = test_xmalloc(on * es);
    download(out, d_out, on * es);

    char tag[120];
    snprintf(tag, sizeof tag, "attention %s C=%d H=%d (D=%d) BS=%d scale=1/%g", dt_name(kv_dt), C,
             H, D, BS, 1.0 / (double)scale);
    cmp_t c;
    cmp_init(&c, "%s", tag);
    double *p = test_xmalloc((size_t)max_keys * sizeof(double));
    size_t pad_bad = 0;
    for (int32_t t = 0; t < T; t++) {
        int32_t n = n_keys[t], s = trow[t];
        for (int32_t h = 0; h < H; h++) {
            size_t o = (size_t)t * C + (size_t)h * D;
            if (n == 0) {
                for (int32_t d = 0; d < D; d++)
                    pad_bad += !(ifl_load_f32(kv_dt, out, o + d) == 0.0f);
                continue;
            }
            const float *q = qkv + (size_t)t * 3 * C + (size_t)h * D;
            double mx = -INFINITY, s1 = 0, sum = 0;
            for (int32_t j = 0; j < n; j++) {
                double dot = 0, absdot = 0;
                for (int32_t d = 0; d < D; d++) {
                    double k = ifl_load_f32(kv_dt, pool, KV_IDX(s, j, 0, h, d));
                    dot += (double)q[d] * k;
                    absdot += fabs((double)q[d] * k);
                }
                p[j] = (double)scale * dot;
                mx = fmax(mx, p[j]);
                s1 = fmax(s1, (double)scale * absdot);
            }
            for (int32_t j = 0; j < n; j++) {
                p[j] = exp(p[j] - mx);
                sum += p[j];
            }
            double rel = 2.0 * D * 0x1p-24 * s1 + n * 0x1p-24 + 1e-6;
            for (int32_t d = 0; d < D; d++) {
                double ref = 0, a = 0;
                for (int32_t j = 0; j < n; j++) {
                    double v = ifl_load_f32(kv_dt, pool, KV_IDX(s, j, 1, h, d));
                    ref += p[j] * v;
                    a += p[j] * fabs(v);
                }
                cmp_out(&c, kv_dt, ifl_load_f32(kv_dt, out, o + d), ref / sum, rel * a / sum,
                        (size_t)t, (size_t)(h * D + d));
            }
        }
    }
#undef KV_IDX
    cmp_end(&c);
    CHECKF(pad_bad == 0, "%s: %zu outputs of padding rows are not zero", tag, pad_bad);
    size_t g = count_unpoisoned(out, kv_dt, (size_t)T * C, on);
    CHECKF(g == 0, "%s: %zu values written past the last row", tag, g);

    cudaFree(d_qkv);
    cudaFree(d_pool);
    cudaFree(d_nk);
    cudaFree(d_trow);
    cudaFree(d_tables);
    cudaFree(d_out);
    free(nblk);
    free(last);
    free(perm);
    free(tables);
    free(pool);
    free(qkv);
    free(n_keys);
    free(trow);
    free(out);
    free(p);
}

int main(void)
{
    int n_dev = 0;
    cudaError_t e = cudaGetDeviceCount(&n_dev);
    if (e != cudaSuccess || n_dev == 0) {
        printf("test_cuda_kernels: skipped: %s\n",
               e != cudaSuccess ? cudaGetErrorString(e) : "no CUDA device");
        return 77;
    }
    int rc = ifl_cuda_kernels_loadable();
    if (rc != 0) {
        printf("test_cuda_kernels: skipped: this build's kernels cannot run on device 0: %s\n",
               cudaGetErrorString((cudaError_t)rc));
        return 77;
    }
    struct cudaDeviceProp prop;
    if (CK(cudaGetDeviceProperties(&prop, 0)) || CK(cudaStreamCreate(&stream)))
        return 1;
    printf("test_cuda_kernels on %s (sm_%d%d)\n", prop.name, prop.major, prop.minor);
    ifl_rng_seed(&rng, 20240611);

    const ifl_dtype w16[2] = {IFL_DTYPE_BF16, IFL_DTYPE_F16};
    const ifl_dtype outs[3] = {IFL_DTYPE_F32, IFL_DTYPE_BF16, IFL_DTYPE_F16};
    const int32_t widths[3] = {768, 45, 1600};

    for (int i = 0; i < 2; i++) {
        test_embed(w16[i], 768);
        test_embed(w16[i], 45);
    }
    for (int ci = 0; ci < 3; ci++) {
        for (int m = LN_ONLY; m <= LN_GATHER; m++) {
            if (m == RESID_ONLY) {
                test_layernorm(RESID_ONLY, IFL_DTYPE_BF16, widths[ci]);
                continue;
            }
            for (int o = 0; o < 3; o++)
                test_layernorm((ln_mode)m, outs[o], widths[ci]);
        }
    }
    for (int erf_gelu = 0; erf_gelu < 2; erf_gelu++)
        for (int i = 0; i < 2; i++) {
            test_gelu(erf_gelu, w16[i], 3072);
            test_gelu(erf_gelu, w16[i], 37);
        }
    for (int i = 0; i < 2; i++) {
        test_kv_append(w16[i], 768, 12);
        test_kv_append(w16[i], 128, 4);
    }
    for (int i = 0; i < 2; i++)
        for (int by_layer = 0; by_layer < 2; by_layer++) {
            test_attention(w16[i], 768, 12, 16, by_layer); /* D = 64: GPT-2's */
            test_attention(w16[i], 128, 4, 16, by_layer);  /* D = 32 */
        }
    test_attention(IFL_DTYPE_BF16, 768, 12, 8, 0); /* another block size */
    test_attention(IFL_DTYPE_F16, 128, 4, 8, 1);
    test_attention(IFL_DTYPE_F32, 768, 12, 16, 0); /* f32 pool: 8-byte value pairs */
    test_attention(IFL_DTYPE_BF16, 320, 2, 16, 0); /* D = 160: past the paired value loop */
    test_attention(IFL_DTYPE_F16, 36, 4, 8, 1);    /* D = 9: odd, the plain loops */

    CK(cudaStreamDestroy(stream));
    return test_finish("test_cuda_kernels");
}
