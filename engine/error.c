/* error.c: formatting of ifl_err messages (see error.h). */
#include "error.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

int ifl_err_set(ifl_err *e, const char *fmt, ...)
{
    if (!e)
        return -1;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->msg, sizeof e->msg, fmt, ap);
    va_end(ap);
    return -1;
}

int ifl_err_prefix(ifl_err *e, const char *fmt, ...)
{
    if (!e)
        return -1;
    char prefix[IFL_ERR_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(prefix, sizeof prefix, fmt, ap);
    va_end(ap);
    size_t pl = strlen(prefix), ml = strnlen(e->msg, sizeof e->msg - 1);
    if (pl + 2 >= sizeof e->msg)
        pl = sizeof e->msg - 3;
    if (pl + 2 + ml >= sizeof e->msg)
        ml = sizeof e->msg - 1 - pl - 2;
    memmove(e->msg + pl + 2, e->msg, ml);
    memcpy(e->msg, prefix, pl);
    e->msg[pl] = ':';
    e->msg[pl + 1] = ' ';
    e->msg[pl + 2 + ml] = 0;
    return -1;
}
