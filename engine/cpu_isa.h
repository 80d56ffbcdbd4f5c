/* cpu_isa.h: which x86-64 instruction sets this CPU has, and which kernel family the CPU engine
 * uses: scalar (portable C, any CPU, the reference path), avx2 (AVX2 + FMA + F16C: Haswell, Zen 1
 * and later) or avx512 (AVX-512 F/BW/VL: Skylake-X, Zen 4 and later).
 *
 * All families are compiled into one binary (per-file target flags, see CMakeLists.txt); the one
 * in use is chosen at start-up from cpuid: --isa when given, else $INFLIGHT_ISA when set, else the
 * best the CPU has (ifl_isa_select). Asking for a family the CPU lacks is an error that says what
 * the CPU has. On other architectures (aarch64) only scalar exists.
 *
 * The choice is process-wide: backends made after ifl_isa_select use it (each keeps the family it
 * was made with), and so do the sampler's vector helpers. Select before starting threads. */
#ifndef IFL_CPU_ISA_H
#define IFL_CPU_ISA_H

#include "error.h"

typedef enum {
    IFL_ISA_AUTO = -1,
    IFL_ISA_SCALAR = 0,
    IFL_ISA_AVX2 = 1,
    IFL_ISA_AVX512 = 2,
    IFL_ISA_COUNT = 3,
} ifl_isa;

/* "auto", "scalar", "avx2", "avx512". */
const char *ifl_isa_name(ifl_isa isa);
/* Parses one of the names above; -1 (err names the value and the choices) otherwise. */
int ifl_isa_parse(const char *s, ifl_isa *out, ifl_err *err);

/* 1 if this CPU (and OS: the registers' state is saved) can run family isa, and this binary has
 * it. */
int ifl_isa_supported(ifl_isa isa);
/* The best family the CPU has. */
ifl_isa ifl_isa_best(void);
/* The CPU's relevant features as a space-separated list, e.g. "avx2 fma f16c avx512f avx512bw
 * avx512vl avx512_bf16", or "none of avx2/fma/f16c/avx512f/avx512bw/avx512vl". */
const char *ifl_cpu_features(void);

/* 1 if the CPU (and OS) has the 16-bit dot-product instructions a family's q8 kernel can use in
 * place of multiply-add + add: AVX-512 VNNI (vpdpwssd on zmm, for avx512) and AVX-VNNI (its VEX
 * form on ymm, for avx2). $INFLIGHT_NO_VNNI=1 reports neither (to test the other path). */
int ifl_cpu_has_avx512vnni(void);
int ifl_cpu_has_avxvnni(void);

/* Resolves want (IFL_ISA_AUTO: $INFLIGHT_ISA if set, else the best) into *out; -1 with err when
 * the CPU lacks it ("--isa avx512: this CPU has avx2 fma f16c") or $INFLIGHT_ISA is not a name. */
int ifl_isa_resolve(ifl_isa want, ifl_isa *out, ifl_err *err);
/* ifl_isa_resolve, then makes the result the process's family. */
int ifl_isa_select(ifl_isa want, ifl_err *err);
/* The process's family: the last ifl_isa_select, or on first use ifl_isa_resolve(AUTO) (the best
 * when $INFLIGHT_ISA is unset or unusable). */
ifl_isa ifl_isa_current(void);

#endif
