/* testutil.h: the few helpers the C tests share: CHECK macros that record the failing expression
 * with file and line and keep going, a relative-L2 comparison, temporary directories, and the exit
 * status convention (0 pass, 1 fail, 77 skip). */
#ifndef IFL_TESTUTIL_H
#define IFL_TESTUTIL_H

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cpu_isa.h"

static int test_failures;

/* IFL_TEST_QUICK=1 (set for the valgrind runs): the same code paths with smaller loops. */
static inline int test_quick(void)
{
    const char *q = getenv("IFL_TEST_QUICK");
    return q && *q && strcmp(q, "0");
}

#define CHECK(cond)                                                                                \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "FAIL %s:%d: %s\n", __FILE__, __LINE__, #cond);                        \
            test_failures++;                                                                       \
        }                                                                                          \
    } while (0)

#define CHECKF(cond, ...)                                                                          \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "FAIL %s:%d: %s: ", __FILE__, __LINE__, #cond);                        \
            fprintf(stderr, __VA_ARGS__);                                                          \
            fprintf(stderr, "\n");                                                                 \
            test_failures++;                                                                       \
        }                                                                                          \
    } while (0)

/* malloc that ends the test (exit 1) when memory runs out; 0 bytes gives a valid pointer. */
static inline void *test_xmalloc(size_t bytes)
{
    void *p = malloc(bytes ? bytes : 1);
    if (!p) {
        fprintf(stderr, "out of memory (%zu bytes)\n", bytes);
        exit(1);
    }
    return p;
}

/* ||a - b|| / ||b|| */
static inline double rel_l2(const float *a, const float *b, size_t n)
{
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) {
        double d = (double)a[i] - (double)b[i];
        num += d * d;
        den += (double)b[i] * (double)b[i];
    }
    return den > 0 ? sqrt(num / den) : sqrt(num);
}

/* A fresh directory under $TMPDIR (or /tmp); the caller removes it with test_rmdir. */
static inline void test_tmpdir(char *buf, size_t cap, const char *tag)
{
    const char *t = getenv("TMPDIR");
    snprintf(buf, cap, "%s/inflight-%s-XXXXXX", t && *t ? t : "/tmp", tag);
    if (!mkdtemp(buf)) {
        perror("mkdtemp");
        exit(1);
    }
}

static inline void test_rmdir(const char *dir)
{
    char cmd[4200];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0)
        fprintf(stderr, "warning: could not remove %s\n", dir);
}

/* The kernel family named by $INFLIGHT_ISA (CTest's per-family variants set it), made the
 * process's, and printed; a family this CPU lacks exits 77 (skipped, like a GPU test without a
 * GPU), so a variant never passes on another family's kernels. */
static inline void test_select_isa(const char *name)
{
    ifl_err e;
    if (ifl_isa_select(IFL_ISA_AUTO, &e)) {
        printf("%s: skipped: %s\n", name, e.msg);
        exit(77);
    }
    printf("%s: kernel family %s (CPU: %s)\n", name, ifl_isa_name(ifl_isa_current()),
           ifl_cpu_features());
}

static inline int test_finish(const char *name)
{
    if (test_failures) {
        fprintf(stderr, "%s: %d check(s) failed\n", name, test_failures);
        return 1;
    }
    printf("%s: all checks passed\n", name);
    return 0;
}

#endif
