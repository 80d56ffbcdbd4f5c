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

unsigned ifl_device_backend(ifl_device d)
{
    return d == IFL_DEVICE_CUDA ? IFL_BACKEND_CUDA : d == IFL_DEVICE_CPU ? IFL_BACKEND_CPU : 0;
}

const char *ifl_device_list(unsigned backends, char *buf, size_t cap)
{
    int cpu = (backends & IFL_BACKEND_CPU) != 0, cuda = (backends & IFL_BACKEND_CUDA) != 0;
    if (!cpu && !cuda)
        snprintf(buf, cap, "no device");
    else
        snprintf(buf, cap, "%s%s%s", cpu ? "the CPU" : "", cpu && cuda ? " or " : "",
                 cuda ? "CUDA" : "");
    return buf;
}

/* The format --weights asks for; NULL for "as stored" (every stored format runs everywhere). */
static const ifl_format *asked_format(const ifl_model_opts *weights)
{
    return weights && weights->convert ? ifl_format_get(weights->dtype) : NULL;
}

int ifl_device_for_weights(ifl_device want, const ifl_model_opts *weights, ifl_device *got,
                           char *why, int why_cap, ifl_err *err)
{
    const ifl_format *f = asked_format(weights);
    *got = want;
    if (!f)
        return 0;
    char runs[64], where[64];
    ifl_device_list(f->backends, where, sizeof where);
    if (want == IFL_DEVICE_AUTO) {
        /* decided here, not by the probe: a GPU that works must not be chosen for weights its
         * backend cannot run, and the choice is the same on every machine */
        if (!(f->backends & IFL_BACKEND_CUDA) && (f->backends & IFL_BACKEND_CPU)) {
            *got = IFL_DEVICE_CPU;
            snprintf(why, (size_t)why_cap, "auto: %s weights run on %s only", f->name, where);
            return 1;
        }
        return 0;
    }
    unsigned bit = ifl_device_backend(want);
    if (f->backends & bit)
        return 0;
    return ifl_err_set(err,
                       "--device %s: the %s backend runs %s weights, not %s; %s runs on %s only "
                       "(--device %s or auto)",
                       ifl_device_name(want), want == IFL_DEVICE_CUDA ? "CUDA" : "CPU",
                       ifl_format_list(bit, runs, sizeof runs), f->name, f->name, where,
                       want == IFL_DEVICE_CUDA ? "cpu" : "cuda");
}

int ifl_device_resolve(ifl_device want, const ifl_model_opts *weights, ifl_device *got, char *why,
                       int why_cap, ifl_err *err)
{
    int decided = ifl_device_for_weights(want, weights, got, why, why_cap, err);
    if (decided)
        return decided < 0 ? -1 : 0;
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
    /* the matrices share wte's format (q8 keeps only wpe in f32, which every backend reads) */
    const ifl_format *f = ifl_format_get(m->wte.dtype);
    if (f && !(f->backends & ifl_device_backend(d))) {
        char runs[64], where[64];
        ifl_err_set(err, "the %s backend runs %s weights, not %s (%s runs on %s only)",
                    d == IFL_DEVICE_CUDA ? "CUDA" : "CPU",
                    ifl_format_list(ifl_device_backend(d), runs, sizeof runs), f->name, f->name,
                    ifl_device_list(f->backends, where, sizeof where));
        return NULL;
    }
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
