/* utf8.c: UTF-8 decoding and validation, the pre-tokenizer's character classes over the tables
 * of unicode_tables.c, and streaming assembly (utf8.h). */
#include "utf8.h"

#include <string.h>

#include "unicode_tables.h"

int ifl_utf8_decode(const unsigned char *s, size_t n, uint32_t *cp)
{
    unsigned char c = s[0];
    if (c < 0x80) {
        *cp = c;
        return 1;
    }
    int need;
    uint32_t v, lo = 0x80, hi = 0xBF; /* allowed range of the second byte */
    if (c >= 0xC2 && c <= 0xDF) {
        need = 1;
        v = c & 0x1F;
    } else if (c >= 0xE0 && c <= 0xEF) {
        need = 2;
        v = c & 0x0F;
        if (c == 0xE0)
            lo = 0xA0; /* no overlongs */
        if (c == 0xED)
            hi = 0x9F; /* no surrogates */
    } else if (c >= 0xF0 && c <= 0xF4) {
        need = 3;
        v = c & 0x07;
        if (c == 0xF0)
            lo = 0x90;
        if (c == 0xF4)
            hi = 0x8F; /* <= U+10FFFF */
    } else {
        return -1;
    }
    for (int i = 1; i <= need; i++) {
        if ((size_t)i >= n)
            return -i; /* cut short: the first i bytes are a valid start */
        unsigned char b = s[i];
        if (i == 1 ? (b < lo || b > hi) : (b < 0x80 || b > 0xBF))
            return -i;
        v = (v << 6) | (b & 0x3F);
    }
    *cp = v;
    return need + 1;
}

int ifl_utf8_valid(const char *s, size_t n)
{
    size_t i = 0;
    while (i < n) {
        uint32_t cp;
        int k = ifl_utf8_decode((const unsigned char *)s + i, n - i, &cp);
        if (k <= 0)
            return 0;
        i += (size_t)k;
    }
    return 1;
}

static int in_ranges(const uint32_t (*r)[2], int n, uint32_t cp)
{
    int lo = 0, hi = n - 1;
    while (lo <= hi) {
        int mid = (lo + hi) / 2;
        if (cp < r[mid][0])
            hi = mid - 1;
        else if (cp > r[mid][1])
            lo = mid + 1;
        else
            return 1;
    }
    return 0;
}

int ifl_unicode_class(uint32_t cp)
{
    if (cp < 128) {
        if ((cp | 0x20) >= 'a' && (cp | 0x20) <= 'z')
            return IFL_UC_LETTER;
        if (cp >= '0' && cp <= '9')
            return IFL_UC_NUMBER;
        if (cp == ' ' || (cp >= 9 && cp <= 13))
            return IFL_UC_SPACE;
        return IFL_UC_OTHER;
    }
    if (in_ranges(ifl_unicode_letter_ranges, ifl_unicode_letter_n, cp))
        return IFL_UC_LETTER;
    if (in_ranges(ifl_unicode_number_ranges, ifl_unicode_number_n, cp))
        return IFL_UC_NUMBER;
    if (in_ranges(ifl_unicode_space_ranges, ifl_unicode_space_n, cp))
        return IFL_UC_SPACE;
    return IFL_UC_OTHER;
}

/* Class and byte length of the character at s[0..n); invalid bytes are one "other" byte each. */
void ifl_utf8_stream_init(ifl_utf8_stream *s, ifl_utf8_mode mode)
{
    memset(s, 0, sizeof *s);
    s->mode = mode;
}

static size_t emit_invalid(const ifl_utf8_stream *s, const unsigned char *p, size_t k, char *out)
{
    if (s->mode == IFL_UTF8_RAW) {
        memcpy(out, p, k);
        return k;
    }
    memcpy(out, "\xEF\xBF\xBD", 3);
    return 3;
}

size_t ifl_utf8_stream_push(ifl_utf8_stream *s, const char *bytes, size_t n, char *out)
{
    size_t o = 0;
    /* Work on pending + new bytes; only the pending part (< 4 bytes) is copied. */
    unsigned char head[8];
    size_t hn = (size_t)s->n;
    memcpy(head, s->pend, hn);
    size_t take = n < 4 ? n : 4;
    memcpy(head + hn, bytes, take);
    size_t total = hn + n;
#define AT(i) ((i) < hn + take ? head[(i)] : (unsigned char)bytes[(i)-hn])
    size_t i = 0;
    s->n = 0;
    while (i < total) {
        unsigned char tmp[4];
        size_t avail = total - i < 4 ? total - i : 4;
        for (size_t j = 0; j < avail; j++)
            tmp[j] = AT(i + j);
        uint32_t cp;
        int k = ifl_utf8_decode(tmp, avail, &cp);
        if (k > 0) {
            memcpy(out + o, tmp, (size_t)k);
            o += (size_t)k;
            i += (size_t)k;
        } else if ((size_t)(-k) == avail && avail < 4 && i + avail == total && k != -1) {
            /* A valid start cut by the end of input: hold it back. */
            memcpy(s->pend, tmp, avail);
            s->n = (int)avail;
            break;
        } else if (k == -1 && avail == 1 && tmp[0] >= 0xC2 && tmp[0] <= 0xF4 && i + 1 == total) {
            s->pend[0] = tmp[0]; /* a lone lead byte at the end */
            s->n = 1;
            break;
        } else {
            size_t bad = (size_t)(k < 0 ? -k : 1);
            o += emit_invalid(s, tmp, bad, out + o);
            i += bad;
        }
    }
#undef AT
    return o;
}

size_t ifl_utf8_stream_flush(ifl_utf8_stream *s, char *out)
{
    size_t o = 0;
    if (s->n)
        o = emit_invalid(s, s->pend, (size_t)s->n, out);
    s->n = 0;
    return o;
}
