/* lws_guard.c: a test double that db_shutdown.test.js preloads (LD_PRELOAD) into `inflight serve`.
 * It wraps two libwebsockets calls, lws_context_destroy and lws_cancel_service, and ends the
 * process (abort, with a message and a backtrace on stderr) when lws_cancel_service is called on a
 * context that lws_context_destroy has freed, or that it is freeing on another thread at that
 * moment. That use after free happens inside libwebsockets, which is not built with
 * AddressSanitizer: ASan cannot see it, this can. Everything else passes through to the real
 * functions (dlsym RTLD_NEXT). Not part of the server, and not linked into anything: built as a
 * module for the test only. */
#include <dlfcn.h>
#include <execinfo.h>
#include <libwebsockets.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef void (*ctx_fn)(struct lws_context *);

/* Written by the thread in lws_context_destroy, read by any thread in lws_cancel_service. */
static _Atomic(struct lws_context *) g_destroying; /* the context lws_context_destroy is freeing */
static _Atomic(struct lws_context *) g_destroyed;  /* the context it has freed */
static pthread_t g_destroyer;                      /* set before g_destroying */

static ctx_fn real_fn(const char *name)
{
    ctx_fn f;
    void *p = dlsym(RTLD_NEXT, name);
    if (!p) {
        fprintf(stderr, "lws_guard: dlsym(RTLD_NEXT, %s): %s\n", name, dlerror());
        abort();
    }
    memcpy(&f, &p, sizeof f);
    return f;
}

/* Any thread: says what happened, with the caller's stack, and ends the process. */
static void report(struct lws_context *ctx, const char *what)
{
    void *frames[32];
    int n = backtrace(frames, 32);
    fprintf(stderr,
            "lws_guard: use after free: lws_cancel_service(%p) called %s (thread %lu); "
            "stack:\n",
            (void *)ctx, what, (unsigned long)pthread_self());
    fflush(stderr);
    backtrace_symbols_fd(frames, n, 2);
    abort();
}

/* The service thread, at the end of `inflight serve`. */
void lws_context_destroy(struct lws_context *ctx)
{
    static ctx_fn real;
    if (!real)
        real = real_fn("lws_context_destroy");
    g_destroyer = pthread_self();
    atomic_store(&g_destroying, ctx);
    real(ctx);
    atomic_store(&g_destroyed, ctx);
    atomic_store(&g_destroying, NULL);
}

/* Any thread (the batcher and history threads wake the service thread with it). */
void lws_cancel_service(struct lws_context *ctx)
{
    static _Atomic(ctx_fn) real;
    ctx_fn f = atomic_load(&real);
    if (!f) {
        f = real_fn("lws_cancel_service");
        atomic_store(&real, f);
    }
    if (ctx && ctx == atomic_load(&g_destroyed))
        report(ctx, "after lws_context_destroy freed that context");
    if (ctx && ctx == atomic_load(&g_destroying) && !pthread_equal(pthread_self(), g_destroyer))
        report(ctx, "from another thread while lws_context_destroy frees that context");
    f(ctx);
}
