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

/* The backend bit (tensor.h: IFL_BACKEND_*) of a device; 0 for AUTO. */
unsigned ifl_device_backend(ifl_device d);

/* The devices of the backend bits `backends` in words, e.g. "the CPU", "the CPU or CUDA"; buf. */
const char *ifl_device_list(unsigned backends, char *buf, size_t cap);

/* What the weights' format decides of --device, from the format registry (tensor.h) alone, before
 * any device is probed (so the decision is the same with a GPU, without one and in a build without
 * the CUDA backend). weights: --weights (NULL or convert 0: as stored; every format a checkpoint
 * holds runs on every backend). 1 when the format decides: *got is the device (AUTO with q8,
 * which only the CPU runs: CPU) and why says so ("auto: q8 weights run on the CPU only"); 0 when it
 * leaves the choice as it was: *got = want, why untouched (AUTO and CUDA are then the probe's); -1
 * when the device asked for cannot run the format ("--device cuda: the CUDA backend runs f32, f16,
 * bf16 weights, not q8; q8 runs on the CPU only (--device cpu or auto)"). */
int ifl_device_for_weights(ifl_device want, const ifl_model_opts *weights, ifl_device *got,
                           char *why, int why_cap, ifl_err *err);

/* Resolves AUTO: writes the chosen device and, into why, one line saying why (e.g. "auto: NVIDIA
 * H200, sm_90, 139.8 GiB" or "auto: this build has no CUDA backend; using the CPU"). First the
 * weights' format (ifl_device_for_weights: weights may be NULL), then the probe: CUDA asked for
 * without a usable GPU (or in a build without the CUDA backend) is an error naming the reason. */
int ifl_device_resolve(ifl_device want, const ifl_model_opts *weights, ifl_device *got, char *why,
                       int why_cap, ifl_err *err);

/* How the model must be loaded for a device's backend: 1 for the CPU (its panel layouts at load,
 * ifl_model_opts.cpu_layout), 0 for CUDA (rows, uploaded as they are). */
int ifl_device_wants_cpu_layout(ifl_device d);

/* A backend on a resolved device (CPU or CUDA). The CUDA backend holds weights in bf16, or f16
 * when the model's matrices are f16 (--weights f16); a model held in a format the device's backend
 * does not run (q8 on CUDA) is refused. NULL with the reason in err. */
ifl_backend *ifl_backend_new(ifl_device d, const ifl_model *m, const ifl_backend_params *p,
                             ifl_err *err);

#endif
