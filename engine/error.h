/* error.h: the error record every engine function fills on failure.
 *
 * Functions return 0 on success and -1 on failure; on failure they write one human sentence into an
 * ifl_err naming what went wrong and where (file, field, value). Callers add context with
 * ifl_err_prefix() as the error travels up. Not a logging facility: nothing here prints. */
#ifndef IFL_ERROR_H
#define IFL_ERROR_H

#include <stddef.h>

#define IFL_ERR_MAX 1024

typedef struct {
    char msg[IFL_ERR_MAX];
} ifl_err;

/* Replaces the message. `e` may be NULL (the error is then dropped). Always returns -1 so that
 * `return ifl_err_set(err, ...);` reads naturally. */
int ifl_err_set(ifl_err *e, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Puts "<prefix>: " in front of the current message. Returns -1. */
int ifl_err_prefix(ifl_err *e, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#endif
