/* strbuf.c: the growable buffer of strbuf.h. */
#include "strbuf.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void sb_init(strbuf *sb, size_t pre)
{
    memset(sb, 0, sizeof *sb);
    sb->pre = pre;
}

void sb_free(strbuf *sb)
{
    free(sb->buf);
    sb->buf = NULL;
    sb->len = sb->cap = 0;
}

void sb_reset(strbuf *sb)
{
    sb->len = 0;
    sb->oom = 0;
}

int sb_reserve(strbuf *sb, size_t extra)
{
    if (sb->oom)
        return -1;
    if (sb->buf && sb->len + extra + 1 <= sb->cap)
        return 0;
    size_t cap = sb->cap ? sb->cap : 256;
    while (cap < sb->len + extra + 1)
        cap *= 2;
    char *p = realloc(sb->buf, sb->pre + cap);
    if (!p) {
        sb->oom = 1;
        return -1;
    }
    sb->buf = p;
    sb->cap = cap;
    return 0;
}

void sb_append(strbuf *sb, const char *s, size_t n)
{
    if (sb_reserve(sb, n))
        return;
    if (n) /* s may be NULL with n 0 (an empty strbuf's text) */
        memcpy(sb->buf + sb->pre + sb->len, s, n);
    sb->len += n;
    sb->buf[sb->pre + sb->len] = 0;
}

void sb_puts(strbuf *sb, const char *s)
{
    sb_append(sb, s, strlen(s));
}

void sb_printf(strbuf *sb, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    char tmp[256];
    int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    if (n < 0)
        return;
    if ((size_t)n < sizeof tmp) {
        sb_append(sb, tmp, (size_t)n);
        return;
    }
    if (sb_reserve(sb, (size_t)n))
        return;
    va_start(ap, fmt);
    vsnprintf(sb->buf + sb->pre + sb->len, (size_t)n + 1, fmt, ap);
    va_end(ap);
    sb->len += (size_t)n;
}

void sb_json_str(strbuf *sb, const char *s, size_t n)
{
    static const char hex[] = "0123456789abcdef";
    if (sb_reserve(sb, n + 2))
        return;
    sb_append(sb, "\"", 1);
    size_t run = 0; /* bytes copied as they are, flushed in one append */
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        const char *esc = NULL;
        char u[6];
        switch (c) {
        case '"': esc = "\\\""; break;
        case '\\': esc = "\\\\"; break;
        case '\n': esc = "\\n"; break;
        case '\r': esc = "\\r"; break;
        case '\t': esc = "\\t"; break;
        case '\b': esc = "\\b"; break;
        case '\f': esc = "\\f"; break;
        default:
            if (c < 0x20 || c == 0x7f) {
                u[0] = '\\';
                u[1] = 'u';
                u[2] = '0';
                u[3] = '0';
                u[4] = hex[c >> 4];
                u[5] = hex[c & 15];
            } else {
                continue;
            }
        }
        sb_append(sb, s + run, i - run);
        if (esc)
            sb_append(sb, esc, 2);
        else
            sb_append(sb, u, 6);
        run = i + 1;
    }
    sb_append(sb, s + run, n - run);
    sb_append(sb, "\"", 1);
}

void sb_json_num(strbuf *sb, double v, int decimals)
{
    if (!isfinite(v))
        v = 0;
    sb_printf(sb, "%.*f", decimals, v);
}

char *sb_steal(strbuf *sb)
{
    char *p = sb->buf;
    memset(sb, 0, sizeof *sb);
    return p;
}
