/* device.c: the backends' registry: --device auto|cpu|cuda to a backend (device.h). The one file
 * that knows whether this build has the CUDA backend (INFLIGHT_HAVE_CUDA, set by CMake on the
 * runtime library when nvcc was found). Not the engine start-up: runtime.c. */
#include "device.h"

#include <stdio.h>
#include <string.h>

#ifdef INFLIGHT_HAVE_CUDA
#include "cuda_backend.h"
#endif

int ifl_device_parse(const char *s, ifl_device *out)
{
    if (!strcmp(s, "auto"))
        *out = IFL_DEVICE_AUTO;
    else if (!strcmp(s, "cpu"))
        *out = IFL_DEVICE_CPU;
    else if (!strcmp(s, "cuda"))
        *out = IFL_DEVICE_CUDA;
    else
        return -1;
    return 0;
}

const char *ifl_device_name(ifl_device d)
{
    return d == IFL_DEVICE_CUDA ? "cuda" : d == IFL_DEVICE_CPU ? "cpu" : "auto";
}

int ifl_device_resolve(ifl_device want, ifl_device *got, char *why, int why_cap, ifl_err *err)
{
    if (want == IFL_DEVICE_CPU) {
        *got = IFL_DEVICE_CPU;
        snprintf(why, (size_t)why_cap, "cpu: asked for with --device cpu");
        return 0;
    }
#ifdef INFLIGHT_HAVE_CUDA
    char desc[200];
    ifl_err perr;
    if (ifl_cuda_probe(desc, sizeof desc, &perr) == 0) {
        *got = IFL_DEVICE_CUDA;
        snprintf(why, (size_t)why_cap, "%s: %s", want == IFL_DEVICE_AUTO ? "auto" : "cuda", desc);
        return 0;
    }
    if (want == IFL_DEVICE_CUDA)
        return ifl_err_set(err, "--device cuda: %s", perr.msg);
    *got = IFL_DEVICE_CPU;
    snprintf(why, (size_t)why_cap, "auto: %s; using the CPU", perr.msg);
    return 0;
#else
    if (want == IFL_DEVICE_CUDA)
        return ifl_err_set(err, "--device cuda: this build has no CUDA backend (nvcc was not found "
                                "at build time, or INFLIGHT_CUDA=OFF); use --device cpu or auto");
    *got = IFL_DEVICE_CPU;
    snprintf(why, (size_t)why_cap, "auto: this build has no CUDA backend; using the CPU");
    return 0;
#endif
}

int ifl_device_wants_cpu_layout(ifl_device d)
{
    return d != IFL_DEVICE_CUDA;
}

ifl_backend *ifl_backend_new(ifl_device d, const ifl_model *m, const ifl_backend_params *p,
                             ifl_err *err)
{
    if (d == IFL_DEVICE_CUDA) {
#ifdef INFLIGHT_HAVE_CUDA
        return ifl_cuda_backend_new(m, p, err);
#else
        ifl_err_set(err, "this build has no CUDA backend");
        return NULL;
#endif
    }
    return ifl_cpu_backend_new(m, p, err);
}
