/* cpu_isa.c: cpuid feature detection and the process-wide kernel family (see cpu_isa.h). */
#include "cpu_isa.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#if defined(__x86_64__) || defined(__i386__)
#define IFL_X86 1
#include <cpuid.h>
#endif

static const char *const isa_names[IFL_ISA_COUNT] = {"scalar", "avx2", "avx512"};

const char *ifl_isa_name(ifl_isa isa)
{
    if (isa == IFL_ISA_AUTO)
        return "auto";
    return isa >= 0 && isa < IFL_ISA_COUNT ? isa_names[isa] : "?";
}

int ifl_isa_parse(const char *s, ifl_isa *out, ifl_err *err)
{
    if (s && !strcmp(s, "auto")) {
        *out = IFL_ISA_AUTO;
        return 0;
    }
    for (int i = 0; s && i < IFL_ISA_COUNT; i++)
        if (!strcmp(s, isa_names[i])) {
            *out = (ifl_isa)i;
            return 0;
        }
    return ifl_err_set(err, "unknown instruction set '%s' (want auto, avx512, avx2 or scalar)",
                       s ? s : "(null)");
}

typedef struct {
    int avx2, fma, f16c, avx512f, avx512bw, avx512vl, avx512_bf16, avx512vnni, avxvnni;
    char list[192];
} cpu_caps;

static cpu_caps g_caps;
static pthread_once_t g_caps_once = PTHREAD_ONCE_INIT;

#ifdef IFL_X86
/* XCR0: which register states the OS saves (cpuid says what the CPU has; both must agree). */
static unsigned long long read_xcr0(void)
{
    unsigned int lo, hi;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    return ((unsigned long long)hi << 32) | lo;
}
#endif

static void detect(void)
{
    cpu_caps *c = &g_caps;
#ifdef IFL_X86
    unsigned int a, b, cx, d;
    if (__get_cpuid_max(0, NULL) >= 7 && __get_cpuid(1, &a, &b, &cx, &d)) {
        int osxsave = (cx >> 27) & 1;
        unsigned long long xcr0 = osxsave ? read_xcr0() : 0;
        int ymm = (xcr0 & 0x6) == 0x6, zmm = ymm && (xcr0 & 0xe0) == 0xe0;
        c->fma = ymm && ((cx >> 12) & 1);
        c->f16c = ymm && ((cx >> 29) & 1);
        __cpuid_count(7, 0, a, b, cx, d);
        c->avx2 = ymm && ((b >> 5) & 1);
        c->avx512f = zmm && ((b >> 16) & 1);
        c->avx512bw = zmm && ((b >> 30) & 1);
        c->avx512vl = zmm && ((b >> 31) & 1);
        c->avx512vnni = zmm && ((cx >> 11) & 1);
        __cpuid_count(7, 1, a, b, cx, d);
        c->avx512_bf16 = c->avx512f && ((a >> 5) & 1);
        c->avxvnni = ymm && ((a >> 4) & 1);
    }
#endif
    struct {
        int have;
        const char *name;
    } f[] = {{c->avx2, "avx2"},         {c->fma, "fma"},           {c->f16c, "f16c"},
             {c->avx512f, "avx512f"},   {c->avx512bw, "avx512bw"}, {c->avx512vl, "avx512vl"},
             {c->avx512_bf16, "avx512_bf16"}, {c->avx512vnni, "avx512_vnni"},
             {c->avxvnni, "avx_vnni"}};
    size_t n = 0;
    for (size_t i = 0; i < sizeof f / sizeof f[0]; i++)
        if (f[i].have)
            n += (size_t)snprintf(c->list + n, sizeof c->list - n, "%s%s", n ? " " : "", f[i].name);
    if (!n)
        snprintf(c->list, sizeof c->list, "none of avx2/fma/f16c/avx512f/avx512bw/avx512vl");
}

static const cpu_caps *caps(void)
{
    pthread_once(&g_caps_once, detect);
    return &g_caps;
}

int ifl_isa_supported(ifl_isa isa)
{
    const cpu_caps *c = caps();
    switch (isa) {
    case IFL_ISA_SCALAR: return 1;
#ifdef IFL_X86
    case IFL_ISA_AVX2: return c->avx2 && c->fma && c->f16c;
    case IFL_ISA_AVX512:
        return c->avx2 && c->fma && c->f16c && c->avx512f && c->avx512bw && c->avx512vl;
#endif
    default: (void)c; return 0;
    }
}

ifl_isa ifl_isa_best(void)
{
    for (int i = IFL_ISA_COUNT - 1; i > 0; i--)
        if (ifl_isa_supported((ifl_isa)i))
            return (ifl_isa)i;
    return IFL_ISA_SCALAR;
}

/* $INFLIGHT_NO_VNNI set (and not "0"): the q8 kernels' other path, for tests. */
static int vnni_off(void)
{
    const char *e = getenv("INFLIGHT_NO_VNNI");
    return e && *e && strcmp(e, "0");
}

int ifl_cpu_has_avx512vnni(void)
{
    return caps()->avx512vnni && !vnni_off();
}

int ifl_cpu_has_avxvnni(void)
{
    return caps()->avxvnni && !vnni_off();
}

const char *ifl_cpu_features(void)
{
    return caps()->list;
}

int ifl_isa_resolve(ifl_isa want, ifl_isa *out, ifl_err *err)
{
    const char *from = "--isa";
    if (want == IFL_ISA_AUTO) {
        const char *env = getenv("INFLIGHT_ISA");
        if (!env || !*env) {
            *out = ifl_isa_best();
            return 0;
        }
        if (ifl_isa_parse(env, &want, err))
            return ifl_err_prefix(err, "$INFLIGHT_ISA");
        if (want == IFL_ISA_AUTO) {
            *out = ifl_isa_best();
            return 0;
        }
        from = "$INFLIGHT_ISA";
    }
    if (want < 0 || want >= IFL_ISA_COUNT)
        return ifl_err_set(err, "%s: no instruction set %d", from, (int)want);
    if (!ifl_isa_supported(want))
        return ifl_err_set(err, "%s %s: this CPU cannot run it (it has: %s)", from,
                           ifl_isa_name(want), ifl_cpu_features());
    *out = want;
    return 0;
}

static atomic_int g_current = -2; /* -2: not chosen yet */

int ifl_isa_select(ifl_isa want, ifl_err *err)
{
    ifl_isa isa;
    if (ifl_isa_resolve(want, &isa, err))
        return -1;
    atomic_store(&g_current, (int)isa);
    return 0;
}

ifl_isa ifl_isa_current(void)
{
    int cur = atomic_load(&g_current);
    if (cur >= 0)
        return (ifl_isa)cur;
    ifl_isa isa;
    if (ifl_isa_resolve(IFL_ISA_AUTO, &isa, NULL))
        isa = ifl_isa_best(); /* a bad $INFLIGHT_ISA: a start-up that checks reports it */
    int expected = -2;
    atomic_compare_exchange_strong(&g_current, &expected, (int)isa);
    return (ifl_isa)atomic_load(&g_current);
}
