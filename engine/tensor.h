/* tensor.h: element types and a plain view of a 2-D weight matrix, plus scalar conversions
 * between f32 and the two 16-bit float formats GPT-2 checkpoints come in (IEEE f16, bfloat16).
 *
 * A view does not own its memory: it points into the mmap'd checkpoint or into the model's
 * converted-weights arena (model.h). Shapes are row-major (rows, cols). */
#ifndef IFL_TENSOR_H
#define IFL_TENSOR_H

#include <stdint.h>
#include <string.h>

typedef enum {
    IFL_DTYPE_F32 = 0,
    IFL_DTYPE_F16 = 1,
    IFL_DTYPE_BF16 = 2,
} ifl_dtype;

static inline size_t ifl_dtype_size(ifl_dtype t)
{
    return t == IFL_DTYPE_F32 ? 4 : 2;
}
const char *ifl_dtype_name(ifl_dtype t);            /* "f32", "f16", "bf16" */
int ifl_dtype_parse(const char *s, ifl_dtype *out); /* accepts f32/f16/bf16; -1 otherwise */

/* How a matrix's elements are stored. The panel layouts are the CPU backend's: the decode
 * kernels then read weights in one sequential stream (measured 13-25% more bandwidth than
 * interleaving rows of a row-major matrix, docs/perf.md). A panel row is 64 bytes: CW = 16 f32 or
 * 32 f16/bf16 elements.
 *   IFL_LAYOUT_ROWS: row-major (rows, cols).
 *   IFL_LAYOUT_KN8:  for y = x @ W with W (K = rows, N = cols): blocks of 8 rows x CW columns,
 *                    [ceil(K/8)][ceil(N/CW)][8][CW], zero padded.
 *   IFL_LAYOUT_NK4:  for y = x @ W^T with W (N = rows, K = cols): blocks of 4 rows x CW columns,
 *                    [ceil(N/4)][ceil(K/CW)][4][CW], zero padded. */
typedef enum {
    IFL_LAYOUT_ROWS = 0,
    IFL_LAYOUT_KN8 = 1,
    IFL_LAYOUT_NK4 = 2,
} ifl_layout;

/* A matrix of `rows` x `cols` elements of `dtype` (a vector is rows == 1), stored as `layout`. */
typedef struct {
    ifl_dtype dtype;
    ifl_layout layout;
    int32_t rows, cols;
    const void *data;
    const void *rows_data; /* optional: the same matrix row-major, same dtype (for sgemm; e.g. the
                              mmap'd checkpoint behind a panel-layout copy), else NULL */
} ifl_mat;

/* Elements per 64-byte panel row. */
static inline int32_t ifl_panel_width(ifl_dtype t)
{
    return t == IFL_DTYPE_F32 ? 16 : 32;
}

/* Element offset of logical (r, c) in a matrix of this layout. */
static inline size_t ifl_mat_offset(const ifl_mat *m, int32_t r, int32_t c)
{
    int32_t cw = ifl_panel_width(m->dtype);
    switch (m->layout) {
    case IFL_LAYOUT_KN8: {
        size_t nb = (size_t)(m->cols + cw - 1) / (size_t)cw;
        return (((size_t)(r / 8) * nb + (size_t)(c / cw)) * 8 + (size_t)(r % 8)) * (size_t)cw +
               (size_t)(c % cw);
    }
    case IFL_LAYOUT_NK4: {
        size_t kb = (size_t)(m->cols + cw - 1) / (size_t)cw;
        return (((size_t)(r / 4) * kb + (size_t)(c / cw)) * 4 + (size_t)(r % 4)) * (size_t)cw +
               (size_t)(c % cw);
    }
    default: return (size_t)r * (size_t)m->cols + (size_t)c;
    }
}

/* Elements the storage of a rows x cols matrix takes in `layout` (padding included). */
size_t ifl_layout_elems(ifl_layout layout, ifl_dtype t, int32_t rows, int32_t cols);

/* Writes src (any layout, any dtype) into dst as `layout` and dtype `t`; dst must hold
 * ifl_layout_elems(layout, t, rows, cols) elements; padding is zero. */
void ifl_mat_repack(void *dst, ifl_layout layout, ifl_dtype t, const ifl_mat *src);

/* Row r of m as f32 (cols values). */
void ifl_mat_row_f32(const ifl_mat *m, int32_t r, float *out);

static inline float ifl_bf16_to_f32(uint16_t h)
{
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* Round to nearest even; NaN stays NaN (quiet). */
static inline uint16_t ifl_f32_to_bf16(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u)
        return (uint16_t)((u >> 16) | 0x40);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

static inline float ifl_f16_to_f32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1fu;
    uint32_t man = h & 0x3ffu;
    uint32_t u;
    if (exp == 0) {
        if (man == 0) {
            u = sign;
        } else { /* subnormal: normalise */
            int e = -1;
            do {
                e++;
                man <<= 1;
            } while (!(man & 0x400u));
            u = sign | ((uint32_t)(127 - 15 - e) << 23) | ((man & 0x3ffu) << 13);
        }
    } else if (exp == 31) {
        u = sign | 0x7f800000u | (man << 13);
    } else {
        u = sign | ((exp + 127 - 15) << 23) | (man << 13);
    }
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* Round to nearest even, overflow to infinity, NaN stays NaN. */
static inline uint16_t ifl_f32_to_f16(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    uint32_t sign = (u >> 16) & 0x8000u;
    uint32_t a = u & 0x7fffffffu;
    if (a > 0x7f800000u)
        return (uint16_t)(sign | 0x7e00u);
    if (a >= 0x477ff000u) /* rounds to >= 65520: infinity */
        return (uint16_t)(sign | 0x7c00u);
    if (a < 0x38800000u) { /* below the smallest normal f16: subnormal or zero */
        if (a < 0x33000000u)
            return (uint16_t)sign;
        uint32_t e = a >> 23;
        uint32_t m = (a & 0x7fffffu) | 0x800000u;
        uint32_t shift = 126 - e; /* 14..24 */
        uint32_t r = m >> shift;
        uint32_t rem = m & ((1u << shift) - 1u);
        uint32_t half = 1u << (shift - 1);
        if (rem > half || (rem == half && (r & 1u)))
            r++;
        return (uint16_t)(sign | r);
    }
    uint32_t r = a - 0x38000000u; /* rebias exponent 127 -> 15, keep 23-bit mantissa */
    r += 0xfffu + ((r >> 13) & 1u);
    return (uint16_t)(sign | (r >> 13));
}

/* Reads element i of a vector/matrix of any dtype as f32. */
static inline float ifl_load_f32(ifl_dtype t, const void *p, size_t i)
{
    switch (t) {
    case IFL_DTYPE_F16: return ifl_f16_to_f32(((const uint16_t *)p)[i]);
    case IFL_DTYPE_BF16: return ifl_bf16_to_f32(((const uint16_t *)p)[i]);
    default: return ((const float *)p)[i];
    }
}

/* Converts n elements of dtype `t` at `src` into f32 at `dst`. */
void ifl_convert_to_f32(float *dst, ifl_dtype t, const void *src, size_t n);
/* Converts n f32 into dtype `t` at `dst` (which may alias src when t is f32). */
void ifl_convert_from_f32(void *dst, ifl_dtype t, const float *src, size_t n);

#endif
