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
