/* device.h: where the backends are registered: which devices this build can run (--device
 * auto|cpu|cuda), which backend serves each, and how each wants the model loaded.
 *
 * The one module that knows whether this build has the CUDA backend (INFLIGHT_HAVE_CUDA, set by
 * CMake on this library alone when nvcc was found), so the engine, the CLI, the server and the
 * tests build the same either way. What it is not: a backend (engine/cpu_backend.c, cuda/) or the
 * engine start-up (runtime.h, which uses it). All functions may be called from any thread. */
#ifndef IFL_DEVICE_H
#define IFL_DEVICE_H

#include "backend.h"
#include "error.h"
#include "model.h"

/* The devices a backend can run on, as asked for by --device. */
typedef enum {
    IFL_DEVICE_AUTO = 0, /* the GPU when this build has the CUDA backend and one works, else CPU */
    IFL_DEVICE_CPU = 1,
    IFL_DEVICE_CUDA = 2,
} ifl_device;

/* "auto" | "cpu" | "cuda" into *out; -1 for anything else. */
int ifl_device_parse(const char *s, ifl_device *out);

/* "auto", "cpu", "cuda". */
const char *ifl_device_name(ifl_device d);

/* Resolves AUTO: writes the chosen device and, into why, one line saying why (e.g. "auto: NVIDIA
 * H200, sm_90, 139.8 GiB" or "auto: this build has no CUDA backend; using the CPU"). CUDA asked for
 * without a usable GPU (or in a build without the CUDA backend) is an error naming the reason. */
int ifl_device_resolve(ifl_device want, ifl_device *got, char *why, int why_cap, ifl_err *err);

/* How the model must be loaded for a device's backend: 1 for the CPU (its panel layouts at load,
 * ifl_model_opts.cpu_layout), 0 for CUDA (rows, uploaded as they are). */
int ifl_device_wants_cpu_layout(ifl_device d);

/* A backend on a resolved device (CPU or CUDA). The CUDA backend holds weights in bf16, or f16
 * when the model's matrices are f16 (--weights f16). NULL with the reason in err. */
ifl_backend *ifl_backend_new(ifl_device d, const ifl_model *m, const ifl_backend_params *p,
                             ifl_err *err);

#endif
