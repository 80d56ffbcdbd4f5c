/* tensor.h: element types and a plain view of a 2-D weight matrix, plus scalar conversions
 * between f32 and the two 16-bit float formats GPT-2 checkpoints come in (IEEE f16, bfloat16).
 *
 * A view does not own its memory: it points into the mmap'd checkpoint or into the model's
 * converted-weights arena (model.h). Shapes are row-major (rows, cols). */
#ifndef IFL_TENSOR_H
#define IFL_TENSOR_H

#include <stdint.h>
#include <string.h>

/* The weight formats. Three are floats a checkpoint stores (one value per element); q8 holds 8-bit
 * integers with a scale per block of 32 along K, made at load from any of them, and lives only in
 * the CPU backend's tile layout (below). What each is and who runs it: the registry, ifl_format. */
typedef enum {
    IFL_DTYPE_F32 = 0,
    IFL_DTYPE_F16 = 1,
    IFL_DTYPE_BF16 = 2,
    IFL_DTYPE_Q8 = 3,
    IFL_DTYPE_COUNT = 4 /* arrays indexed by format have this many entries */
} ifl_dtype;

/* Which backends run a format's matrices (ifl_format.backends). */
enum { IFL_BACKEND_CPU = 1u, IFL_BACKEND_CUDA = 2u };

/* One weight format: the registry's entry (tensor.c). Everything that depends on the set of formats
 * asks here, so a new one is one entry, and an unknown one is an error, never another format. */
typedef struct {
    ifl_dtype dtype;
    const char *name;    /* "f32", "f16", "bf16", "q8": what --weights and the logs say */
    const char *about;   /* e.g. "8-bit integers, an f16 scale per 32 along K" */
    int32_t block_elems; /* elements that share a block (1: plain floats) */
    int32_t block_bytes; /* bytes of one block, its scale included */
    int stored;          /* 1: a safetensors checkpoint holds it (make-model can write it) */
    unsigned backends;   /* IFL_BACKEND_* bits */
} ifl_format;

/* The entry of format t; NULL when t is not one. */
const ifl_format *ifl_format_get(ifl_dtype t);
/* The names of the formats whose backends include every bit of `backends` (0: all), e.g. "f32,
 * f16, bf16, q8", written into buf (cap bytes); returns buf. */
const char *ifl_format_list(unsigned backends, char *buf, size_t cap);

/* Bytes of one element of a float format (q8's elements have no size of their own: see
 * ifl_layout_bytes). */
static inline size_t ifl_dtype_size(ifl_dtype t)
{
    return t == IFL_DTYPE_F32 ? 4 : 2;
}
const char *ifl_dtype_name(ifl_dtype t);            /* the registry's name, "?" for none */
int ifl_dtype_parse(const char *s, ifl_dtype *out); /* any format's name (F32, float32 ... too); -1
                                                       otherwise */

/* q8's tiles. A product y = x @ W (K inputs, N outputs) reads q8 weights as tiles of IFL_Q8_BLOCK
 * inputs by IFL_Q8_TILE_N outputs, output-tile major: tile (j, kb) (outputs 32j..32j+31, inputs
 * k = 32kb..32kb+31) at byte (j * KB + kb) * IFL_Q8_TILE_BYTES, KB = ceil(K / 32):
 *   bytes [0, 1024):    int8 values q in [-127, 127], 16 pairs of inputs: pair p (k = 32kb + 2p and
 *                       2p + 1) at 64p, output c's two values side by side at 64p + 2c + (k & 1)
 *                       (what a multiply-add of 16-bit pairs takes);
 *   bytes [1024, 1088): output c's scale d as f16 at 1024 + 2c.
 * w(k, n) = q * d; past K and N both are zero. The scale is the block's largest |w| / 127 rounded
 * to f16 (one f16 step up where that left the largest |w| beyond 127.5 d: among f16's subnormals),
 * q = round(w / d) (tensor.c, ifl_mat_repack), so every value is within d / 2 of q * d. A Conv1D weight (K = rows) is q8 in
 * IFL_LAYOUT_KN8, the lm_head (K = cols) in IFL_LAYOUT_NK4: the layout says which of the matrix's
 * dimensions is K, the tiles are the same. */
#define IFL_Q8_BLOCK 32
#define IFL_Q8_TILE_N 32
#define IFL_Q8_TILE_BYTES 1088
#define IFL_Q8_SCALES_AT 1024

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

/* Elements per 64-byte panel row (float formats; q8: a tile's outputs). */
static inline int32_t ifl_panel_width(ifl_dtype t)
{
    return t == IFL_DTYPE_F32 ? 16 : 32;
}

/* Element offset of logical (r, c) in a matrix of this layout (float formats only). */
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

/* Elements the storage of a rows x cols matrix of a float format takes in `layout` (padding
 * included). */
size_t ifl_layout_elems(ifl_layout layout, ifl_dtype t, int32_t rows, int32_t cols);
/* Bytes the same takes, for every format (q8: in KN8 or NK4 only; 0 for q8 in IFL_LAYOUT_ROWS). */
size_t ifl_layout_bytes(ifl_layout layout, ifl_dtype t, int32_t rows, int32_t cols);

/* Writes src (any layout, a float format) into dst as `layout` and format `t`; dst must hold
 * ifl_layout_bytes(layout, t, rows, cols) bytes; padding is zero. q8 (KN8 or NK4 only) is
 * quantized: -1, with the first value it cannot hold in *bad_r, *bad_c (a NaN or an infinity, or a
 * block whose scale overflows f16: |w| above 65504 * 127), else 0; the float formats always 0.
 * -2: out of memory. bad_r and bad_c may be NULL. */
int ifl_mat_repack(void *dst, ifl_layout layout, ifl_dtype t, const ifl_mat *src, int32_t *bad_r,
                   int32_t *bad_c);

/* Row r of m as f32 (cols values), any format and layout. */
void ifl_mat_row_f32(const ifl_mat *m, int32_t r, float *out);
/* Element (r, c) of m as f32, any format and layout. */
float ifl_mat_get(const ifl_mat *m, int32_t r, int32_t c);

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
