/* tensor.c: dtype names and bulk conversions between f32, f16 and bf16 (see tensor.h). */
#include "tensor.h"

#if defined(__AVX512F__)
#include <immintrin.h>
#endif

const char *ifl_dtype_name(ifl_dtype t)
{
    switch (t) {
    case IFL_DTYPE_F32: return "f32";
    case IFL_DTYPE_F16: return "f16";
    case IFL_DTYPE_BF16: return "bf16";
    }
    return "?";
}

int ifl_dtype_parse(const char *s, ifl_dtype *out)
{
    if (!strcmp(s, "f32") || !strcmp(s, "F32") || !strcmp(s, "float32")) {
        *out = IFL_DTYPE_F32;
    } else if (!strcmp(s, "f16") || !strcmp(s, "F16") || !strcmp(s, "float16")) {
        *out = IFL_DTYPE_F16;
    } else if (!strcmp(s, "bf16") || !strcmp(s, "BF16") || !strcmp(s, "bfloat16")) {
        *out = IFL_DTYPE_BF16;
    } else {
        return -1;
    }
    return 0;
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

void ifl_mat_row_f32(const ifl_mat *m, int32_t r, float *out)
{
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

void ifl_mat_repack(void *dst, ifl_layout layout, ifl_dtype t, const ifl_mat *src)
{
    ifl_mat d = {.dtype = t, .layout = layout, .rows = src->rows, .cols = src->cols, .data = dst};
    size_t es = ifl_dtype_size(t);
    memset(dst, 0, ifl_layout_elems(layout, t, src->rows, src->cols) * es);
    float row[4096];
    for (int32_t r = 0; r < src->rows; r++) {
        for (int32_t c0 = 0; c0 < src->cols; c0 += 4096) {
            int32_t n = src->cols - c0 < 4096 ? src->cols - c0 : 4096;
            if (src->layout == IFL_LAYOUT_ROWS) {
                ifl_convert_to_f32(row, src->dtype,
                                   (const char *)src->data + ((size_t)r * src->cols + (size_t)c0) *
                                                                 ifl_dtype_size(src->dtype),
                                   (size_t)n);
            } else {
                for (int32_t i = 0; i < n; i++)
                    row[i] = ifl_load_f32(src->dtype, src->data, ifl_mat_offset(src, r, c0 + i));
            }
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
}
