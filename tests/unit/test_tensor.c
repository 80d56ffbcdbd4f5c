/* test_tensor.c: f16 and bf16 conversions: exhaustive round trips, rounding against the CPU's own
 * F16C instructions where present, and known bit patterns. */
#include <stdint.h>
#include <string.h>

#if defined(__F16C__)
#include <immintrin.h>
#endif

#include "rng.h"
#include "tensor.h"
#include "testutil.h"

static uint32_t bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

int main(void)
{
    /* Known values. */
    CHECK(ifl_f16_to_f32(0x3C00) == 1.0f);
    CHECK(ifl_f16_to_f32(0xC000) == -2.0f);
    CHECK(ifl_f16_to_f32(0x0001) == ldexpf(1.0f, -24));
    CHECK(ifl_f16_to_f32(0x7BFF) == 65504.0f);
    CHECK(isinf(ifl_f16_to_f32(0x7C00)));
    CHECK(isnan(ifl_f16_to_f32(0x7E00)));
    CHECK(ifl_bf16_to_f32(0x3F80) == 1.0f);
    CHECK(ifl_bf16_to_f32(0xC040) == -3.0f);
    CHECK(ifl_f32_to_f16(65520.0f) == 0x7C00); /* rounds to infinity */
    CHECK(ifl_f32_to_f16(65519.0f) == 0x7BFF);
    CHECK(ifl_f32_to_f16(ldexpf(1.0f, -25)) == 0); /* halfway to the smallest subnormal: even */
    CHECK(ifl_f32_to_f16(ldexpf(1.5f, -25)) == 1);
    CHECK(ifl_f32_to_bf16(1.0f + ldexpf(1.0f, -8)) == 0x3F80); /* tie, to even */
    CHECK(ifl_f32_to_bf16(1.0f + ldexpf(3.0f, -8)) == 0x3F82); /* tie, to even (up) */

    /* Every f16 value survives f16 -> f32 -> f16; every bf16 likewise. */
    int bad16 = 0, badbf = 0;
    for (uint32_t h = 0; h < 65536; h++) {
        float f = ifl_f16_to_f32((uint16_t)h);
        if (!isnan(f) && ifl_f32_to_f16(f) != h)
            bad16++;
        if (isnan(f) && !isnan(ifl_f16_to_f32(ifl_f32_to_f16(f))))
            bad16++;
        float g = ifl_bf16_to_f32((uint16_t)h);
        if (!isnan(g) && ifl_f32_to_bf16(g) != h)
            badbf++;
    }
    CHECKF(bad16 == 0, "%d f16 values do not round-trip", bad16);
    CHECKF(badbf == 0, "%d bf16 values do not round-trip", badbf);

    /* f32 -> f16 rounding of random values against the hardware, and bf16 against exact rounding.
     */
    ifl_rng rng;
    ifl_rng_seed(&rng, 99);
    int mism16 = 0, mismbf = 0;
    for (int i = 0; i < 2000000; i++) {
        uint32_t u = (uint32_t)ifl_rng_next(&rng);
        float f;
        memcpy(&f, &u, 4);
        if (isnan(f))
            continue;
#if defined(__F16C__)
        uint16_t hw = (uint16_t)_cvtss_sh(f, _MM_FROUND_TO_NEAREST_INT);
        if (hw != ifl_f32_to_f16(f))
            mism16++;
#endif
        /* bf16: the nearest of the two candidates, ties to even */
        uint16_t lo = (uint16_t)(u >> 16), hi = (uint16_t)(lo + 1);
        uint16_t got = ifl_f32_to_bf16(f);
        double dlo = fabs((double)ifl_bf16_to_f32(lo) - f);
        double dhi = isinf(ifl_bf16_to_f32(hi)) && !isinf(f)
                         ? INFINITY
                         : fabs((double)ifl_bf16_to_f32(hi) - f);
        uint16_t want = dlo < dhi ? lo : dhi < dlo ? hi : ((lo & 1) ? hi : lo);
        if ((u & 0x7fffffffu) > 0x7f7f0000u && (u & 0x7fffffffu) < 0x7f800000u)
            continue; /* near FLT_MAX the "hi" candidate is infinity; covered by round-trip */
        if (got != want)
            mismbf++;
    }
    CHECKF(mism16 == 0, "%d f32->f16 roundings differ from F16C", mism16);
    CHECKF(mismbf == 0, "%d f32->bf16 roundings are not nearest-even", mismbf);

    /* Bulk conversions agree with the scalar ones (vector paths and tails). */
    float src[37], back[37];
    uint16_t h[37];
    for (int i = 0; i < 37; i++)
        src[i] = (float)ifl_rng_normal(&rng) * 10;
    for (int t = IFL_DTYPE_F16; t <= IFL_DTYPE_BF16; t++) {
        ifl_convert_from_f32(h, (ifl_dtype)t, src, 37);
        ifl_convert_to_f32(back, (ifl_dtype)t, h, 37);
        for (int i = 0; i < 37; i++)
            CHECK(bits(back[i]) == bits(ifl_load_f32((ifl_dtype)t, h, (size_t)i)));
    }
    printf("f16/bf16: 65536 round trips each, 2,000,000 random roundings (f16 vs %s)\n",
#if defined(__F16C__)
           "F16C hardware"
#else
           "nothing: no F16C"
#endif
    );
    return test_finish("test_tensor");
}
