/* strbuf.h: a growable byte buffer for building JSON frames and HTTP bodies (the server's service
 * thread, the client). Not thread-safe: one owner at a time.
 *
 * The buffer keeps `pre` spare bytes in front of the text (libwebsockets' LWS_PRE) so a frame can
 * be handed to lws_write without a copy. Appends never fail loudly: on out-of-memory the buffer
 * records `oom` and ignores further appends; the caller checks sb_ok() once at the end. */
#ifndef IFL_STRBUF_H
#define IFL_STRBUF_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

typedef struct {
    char *buf;  /* (pre + cap) */
    size_t pre; /* reserved bytes before the text */
    size_t len; /* text bytes */
    size_t cap; /* text capacity */
    int oom;
} strbuf;

void sb_init(strbuf *sb, size_t pre);
void sb_free(strbuf *sb);
static inline char *sb_text(const strbuf *sb)
{
    return sb->buf ? sb->buf + sb->pre : NULL;
}
static inline int sb_ok(const strbuf *sb)
{
    return !sb->oom && sb->buf;
}
void sb_reset(strbuf *sb);
int sb_reserve(strbuf *sb, size_t extra);
void sb_append(strbuf *sb, const char *s, size_t n);
void sb_puts(strbuf *sb, const char *s);
void sb_printf(strbuf *sb, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Appends s as a JSON string literal (quotes included). Bytes are copied as they are (the caller
 * guarantees UTF-8); quotes, backslashes and control characters are escaped. */
void sb_json_str(strbuf *sb, const char *s, size_t n);
/* A JSON number for a double: finite values with up to `decimals` decimals, else 0. */
void sb_json_num(strbuf *sb, double v, int decimals);
/* Hands the heap block over to the caller (sb is left empty). */
char *sb_steal(strbuf *sb);

#endif
