/* tensor.c: the weight-format registry, bulk conversions between f32, f16 and bf16, and the
 * repacking of matrices into the CPU's panel layouts and q8 tiles (see tensor.h). */
#include "tensor.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#if defined(__AVX512F__)
#include <immintrin.h>
#endif

/* The registry: one entry per ifl_dtype, in its order. */
static const ifl_format formats[IFL_DTYPE_COUNT] = {
    {IFL_DTYPE_F32, "f32", "32-bit floats", 1, 4, 1, IFL_BACKEND_CPU | IFL_BACKEND_CUDA},
    {IFL_DTYPE_F16, "f16", "16-bit IEEE floats", 1, 2, 1, IFL_BACKEND_CPU | IFL_BACKEND_CUDA},
    {IFL_DTYPE_BF16, "bf16", "bfloat16", 1, 2, 1, IFL_BACKEND_CPU | IFL_BACKEND_CUDA},
    {IFL_DTYPE_Q8, "q8", "8-bit integers, an f16 scale per 32 along K", IFL_Q8_BLOCK,
     IFL_Q8_BLOCK + 2, 0, IFL_BACKEND_CPU},
};
_Static_assert(sizeof formats / sizeof formats[0] == IFL_DTYPE_COUNT,
               "one registry entry per weight format");
_Static_assert(IFL_Q8_TILE_BYTES == IFL_Q8_BLOCK * IFL_Q8_TILE_N + 2 * IFL_Q8_TILE_N &&
                   IFL_Q8_SCALES_AT == IFL_Q8_BLOCK * IFL_Q8_TILE_N,
               "a q8 tile is its values, then one f16 scale per output");

const ifl_format *ifl_format_get(ifl_dtype t)
{
    return (unsigned)t < IFL_DTYPE_COUNT ? &formats[t] : NULL;
}

const char *ifl_format_list(unsigned backends, char *buf, size_t cap)
{
    size_t n = 0;
    if (cap)
        buf[0] = 0;
    for (int i = 0; i < IFL_DTYPE_COUNT; i++) {
        if ((formats[i].backends & backends) != backends)
            continue;
        int w = snprintf(buf + n, cap - n, "%s%s", n ? ", " : "", formats[i].name);
        if (w < 0 || (size_t)w >= cap - n)
            break;
        n += (size_t)w;
    }
    return buf;
}

const char *ifl_dtype_name(ifl_dtype t)
{
    const ifl_format *f = ifl_format_get(t);
    return f ? f->name : "?";
}

int ifl_dtype_parse(const char *s, ifl_dtype *out)
{
    static const struct {
        const char *alias;
        ifl_dtype t;
    } aliases[] = {{"F32", IFL_DTYPE_F32},   {"float32", IFL_DTYPE_F32}, {"F16", IFL_DTYPE_F16},
                   {"float16", IFL_DTYPE_F16}, {"BF16", IFL_DTYPE_BF16}, {"bfloat16", IFL_DTYPE_BF16},
                   {"Q8", IFL_DTYPE_Q8}};
    for (int i = 0; i < IFL_DTYPE_COUNT; i++)
        if (!strcmp(s, formats[i].name)) {
            *out = formats[i].dtype;
            return 0;
        }
    for (size_t i = 0; i < sizeof aliases / sizeof aliases[0]; i++)
        if (!strcmp(s, aliases[i].alias)) {
            *out = aliases[i].t;
            return 0;
        }
    return -1;
}

void ifl_convert_to_f32(float *dst, ifl_dtype t, const void *src, size_t n)
{
    size_t i = 0;
    if (t == IFL_DTYPE_F32) {
        memmove(dst, src, n * 4);
        return;
    }
    const uint16_t *s = src;
#if defined(__AVX512F__)
    if (t == IFL_DTYPE_BF16) {
        for (; i + 16 <= n; i += 16) {
            __m512i v = _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)(s + i)));
            _mm512_storeu_ps(dst + i, _mm512_castsi512_ps(_mm512_slli_epi32(v, 16)));
        }
    } else {
        for (; i + 16 <= n; i += 16)
            _mm512_storeu_ps(dst + i,
                             _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(s + i))));
    }
#endif
    if (t == IFL_DTYPE_BF16) {
        for (; i < n; i++)
            dst[i] = ifl_bf16_to_f32(s[i]);
    } else {
        for (; i < n; i++)
            dst[i] = ifl_f16_to_f32(s[i]);
    }
}

void ifl_convert_from_f32(void *dst, ifl_dtype t, const float *src, size_t n)
{
    if (t == IFL_DTYPE_F32) {
        memmove(dst, src, n * 4);
        return;
    }
    uint16_t *d = dst;
    if (t == IFL_DTYPE_BF16) {
        for (size_t i = 0; i < n; i++)
            d[i] = ifl_f32_to_bf16(src[i]);
    } else {
        for (size_t i = 0; i < n; i++)
            d[i] = ifl_f32_to_f16(src[i]);
    }
}

size_t ifl_layout_elems(ifl_layout layout, ifl_dtype t, int32_t rows, int32_t cols)
{
    size_t cw = (size_t)ifl_panel_width(t);
    switch (layout) {
    case IFL_LAYOUT_KN8: return ((size_t)rows + 7) / 8 * 8 * (((size_t)cols + cw - 1) / cw * cw);
    case IFL_LAYOUT_NK4: return ((size_t)rows + 3) / 4 * 4 * (((size_t)cols + cw - 1) / cw * cw);
    default: return (size_t)rows * (size_t)cols;
    }
}

size_t ifl_layout_bytes(ifl_layout layout, ifl_dtype t, int32_t rows, int32_t cols)
{
    if (t != IFL_DTYPE_Q8)
        return ifl_layout_elems(layout, t, rows, cols) * ifl_dtype_size(t);
    if (layout == IFL_LAYOUT_ROWS)
        return 0;
    int32_t K = layout == IFL_LAYOUT_KN8 ? rows : cols, N = layout == IFL_LAYOUT_KN8 ? cols : rows;
    size_t KB = ((size_t)K + IFL_Q8_BLOCK - 1) / IFL_Q8_BLOCK;
    size_t NJ = ((size_t)N + IFL_Q8_TILE_N - 1) / IFL_Q8_TILE_N;
    return NJ * KB * IFL_Q8_TILE_BYTES;
}

/* q8: the tile holding input k of output n, and the byte offsets of its value and scale there. */
static inline const uint8_t *q8_tile(const ifl_mat *m, int32_t k, int32_t n)
{
    int32_t K = m->layout == IFL_LAYOUT_KN8 ? m->rows : m->cols;
    size_t KB = ((size_t)K + IFL_Q8_BLOCK - 1) / IFL_Q8_BLOCK;
    return (const uint8_t *)m->data +
           ((size_t)(n / IFL_Q8_TILE_N) * KB + (size_t)(k / IFL_Q8_BLOCK)) * IFL_Q8_TILE_BYTES;
}
static inline size_t q8_value_at(int32_t k, int32_t n)
{
    return (size_t)(k % IFL_Q8_BLOCK / 2) * 64 + (size_t)(n % IFL_Q8_TILE_N) * 2 + (size_t)(k & 1);
}
static inline size_t q8_scale_at(int32_t n)
{
    return IFL_Q8_SCALES_AT + (size_t)(n % IFL_Q8_TILE_N) * 2;
}

static float q8_get(const ifl_mat *m, int32_t r, int32_t c)
{
    int32_t k = m->layout == IFL_LAYOUT_KN8 ? r : c, n = m->layout == IFL_LAYOUT_KN8 ? c : r;
    const uint8_t *t = q8_tile(m, k, n);
    uint16_t d;
    memcpy(&d, t + q8_scale_at(n), 2);
    return (float)(int8_t)t[q8_value_at(k, n)] * ifl_f16_to_f32(d);
}

float ifl_mat_get(const ifl_mat *m, int32_t r, int32_t c)
{
    if (m->dtype == IFL_DTYPE_Q8)
        return q8_get(m, r, c);
    return ifl_load_f32(m->dtype, m->data, ifl_mat_offset(m, r, c));
}

void ifl_mat_row_f32(const ifl_mat *m, int32_t r, float *out)
{
    if (m->dtype == IFL_DTYPE_Q8) {
        for (int32_t c = 0; c < m->cols; c++)
            out[c] = q8_get(m, r, c);
        return;
    }
    size_t es = ifl_dtype_size(m->dtype);
    if (m->layout == IFL_LAYOUT_ROWS) {
        ifl_convert_to_f32(out, m->dtype, (const char *)m->data + (size_t)r * m->cols * es,
                           (size_t)m->cols);
        return;
    }
    /* a row is contiguous within each panel: convert it CW elements at a time */
    int32_t cw = ifl_panel_width(m->dtype);
    for (int32_t c = 0; c < m->cols; c += cw) {
        int32_t n = m->cols - c < cw ? m->cols - c : cw;
        ifl_convert_to_f32(out + c, m->dtype, (const char *)m->data + ifl_mat_offset(m, r, c) * es,
                           (size_t)n);
    }
}

/* Values [c0, c0 + n) of row r of a float-format src as f32. */
static void src_row(float *row, const ifl_mat *src, int32_t r, int32_t c0, int32_t n)
{
    if (src->layout == IFL_LAYOUT_ROWS) {
        ifl_convert_to_f32(row, src->dtype,
                           (const char *)src->data +
                               ((size_t)r * src->cols + (size_t)c0) * ifl_dtype_size(src->dtype),
                           (size_t)n);
        return;
    }
    for (int32_t i = 0; i < n; i++)
        row[i] = ifl_load_f32(src->dtype, src->data, ifl_mat_offset(src, r, c0 + i));
}

/* One block of q8: n values (up to 32; the rest of the block is zero) of one output into the
 * tile t at the value offsets for k = 0..n-1 of that output; -1 (and *bad the index) for a value
 * q8 cannot hold. */
static int q8_block(uint8_t *t, int32_t c, const float *w, int32_t n, int32_t *bad)
{
    float amax = 0;
    for (int32_t i = 0; i < n; i++) {
        if (!isfinite(w[i])) {
            *bad = i;
            return -1;
        }
        amax = fabsf(w[i]) > amax ? fabsf(w[i]) : amax;
    }
    uint16_t h = ifl_f32_to_f16(amax / 127.0f);
    /* Where rounding to f16 took the scale down far enough that the largest value would need
     * more than 127 steps (only among f16's subnormals, scales below 6.1e-5), one f16 step up:
     * every value then lies within half a step of its q * d. */
    if (amax > 127.5f * ifl_f16_to_f32(h))
        h++;
    float d = ifl_f16_to_f32(h);
    if (!isfinite(d)) {
        *bad = 0;
        for (int32_t i = 1; i < n; i++)
            *bad = fabsf(w[i]) > fabsf(w[*bad]) ? i : *bad;
        return -1;
    }
    for (int32_t i = 0; i < n; i++) {
        long q = d > 0 ? lrintf(w[i] / d) : 0;
        q = q > 127 ? 127 : q < -127 ? -127 : q;
        t[(size_t)(i / 2) * 64 + (size_t)c * 2 + (size_t)(i & 1)] = (uint8_t)(int8_t)q;
    }
    memcpy(t + IFL_Q8_SCALES_AT + (size_t)c * 2, &h, 2);
    return 0;
}

/* q8 tiles of src (K along rows for KN8, along cols for NK4). */
static int repack_q8(uint8_t *dst, ifl_layout layout, const ifl_mat *src, int32_t *bad_r,
                     int32_t *bad_c)
{
    int kn = layout == IFL_LAYOUT_KN8;
    int32_t K = kn ? src->rows : src->cols, N = kn ? src->cols : src->rows;
    int32_t KB = (K + IFL_Q8_BLOCK - 1) / IFL_Q8_BLOCK;
    memset(dst, 0, ifl_layout_bytes(layout, IFL_DTYPE_Q8, src->rows, src->cols));
    /* a band of 32 outputs at a time (NK4: 32 rows of src; KN8: each row's 32 columns) */
    float *band = malloc((size_t)IFL_Q8_TILE_N * (size_t)K * sizeof *band);
    if (!band)
        return -2;
    int rc = 0;
    for (int32_t j = 0; j * IFL_Q8_TILE_N < N && !rc; j++) {
        int32_t n0 = j * IFL_Q8_TILE_N, nn = N - n0 < IFL_Q8_TILE_N ? N - n0 : IFL_Q8_TILE_N;
        /* band[c * K + k] = w(k, n0 + c) */
        if (kn) {
            float row[IFL_Q8_TILE_N];
            for (int32_t k = 0; k < K; k++) {
                src_row(row, src, k, n0, nn);
                for (int32_t c = 0; c < nn; c++)
                    band[(size_t)c * K + k] = row[c];
            }
        } else {
            for (int32_t c = 0; c < nn; c++)
                src_row(band + (size_t)c * K, src, n0 + c, 0, K);
        }
        for (int32_t kb = 0; kb < KB && !rc; kb++) {
            uint8_t *t = dst + ((size_t)j * KB + kb) * IFL_Q8_TILE_BYTES;
            int32_t k0 = kb * IFL_Q8_BLOCK, nk = K - k0 < IFL_Q8_BLOCK ? K - k0 : IFL_Q8_BLOCK;
            for (int32_t c = 0; c < nn; c++) {
                int32_t bad;
                if (q8_block(t, c, band + (size_t)c * K + k0, nk, &bad)) {
                    if (bad_r)
                        *bad_r = kn ? k0 + bad : n0 + c;
                    if (bad_c)
                        *bad_c = kn ? n0 + c : k0 + bad;
                    rc = -1;
                    break;
                }
            }
        }
    }
    free(band);
    return rc;
}

int ifl_mat_repack(void *dst, ifl_layout layout, ifl_dtype t, const ifl_mat *src, int32_t *bad_r,
                   int32_t *bad_c)
{
    if (t == IFL_DTYPE_Q8)
        return repack_q8(dst, layout, src, bad_r, bad_c);
    ifl_mat d = {.dtype = t, .layout = layout, .rows = src->rows, .cols = src->cols, .data = dst};
    size_t es = ifl_dtype_size(t);
    memset(dst, 0, ifl_layout_elems(layout, t, src->rows, src->cols) * es);
    float row[4096];
    for (int32_t r = 0; r < src->rows; r++) {
        for (int32_t c0 = 0; c0 < src->cols; c0 += 4096) {
            int32_t n = src->cols - c0 < 4096 ? src->cols - c0 : 4096;
            src_row(row, src, r, c0, n);
            if (layout == IFL_LAYOUT_ROWS) {
                ifl_convert_from_f32((char *)dst + ((size_t)r * src->cols + (size_t)c0) * es, t,
                                     row, (size_t)n);
            } else {
                /* runs of CW columns are contiguous in both panel layouts */
                int32_t cw = ifl_panel_width(t);
                for (int32_t i = 0; i < n;) {
                    int32_t c = c0 + i;
                    int32_t run = cw - c % cw;
                    if (run > n - i)
                        run = n - i;
                    ifl_convert_from_f32((char *)dst + ifl_mat_offset(&d, r, c) * es, t, row + i,
                                         (size_t)run);
                    i += run;
                }
            }
        }
    }
    return 0;
}
