/* kernels_avx2_q8.c: the avx2 family's q8 product (cpu_kernels_isa.h: q8_tiles). Compiled with the
 * family's target flags (CMakeLists.txt). */
#include "cpu_kernels_isa.h"

void ifl_q8_tiles_avx2(float *y, int32_t ldy, const int16_t *xq, const float *xs, int32_t KB,
                       const void *W, int32_t j0, int32_t j1, int M)
{
    ifl_q8_tiles_c(y, ldy, xq, xs, KB, W, j0, j1, M);
}
