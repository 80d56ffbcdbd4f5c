/* utf8.h: the UTF-8 pieces the tokenizer is built on and its users need: decoding one code
 * point, validating, the pre-tokenizer's character classes (unicode_tables.c), and the streaming
 * assembly that holds back a character cut by a token boundary. Pure functions, any thread. */
#ifndef IFL_UTF8_H
#define IFL_UTF8_H

#include <stddef.h>
#include <stdint.h>

/* Streaming UTF-8 assembly for decoding token by token: bytes that end inside a UTF-8 character
 * are held back until the character is complete. Invalid sequences are passed through as raw bytes
 * (IFL_UTF8_RAW) or replaced by U+FFFD (IFL_UTF8_REPLACE, always valid UTF-8 out). */
typedef enum { IFL_UTF8_RAW = 0, IFL_UTF8_REPLACE = 1 } ifl_utf8_mode;

typedef struct {
    unsigned char pend[4];
    int n;
    ifl_utf8_mode mode;
} ifl_utf8_stream;

void ifl_utf8_stream_init(ifl_utf8_stream *s, ifl_utf8_mode mode);
/* Feeds n bytes; writes what is complete to out (capacity needed: n + 4 + 3 * (n + 4)) and returns
 * its length. */
size_t ifl_utf8_stream_push(ifl_utf8_stream *s, const char *bytes, size_t n, char *out);
/* End of stream: emits whatever is held back (raw, or U+FFFD). out needs 12 bytes. */
size_t ifl_utf8_stream_flush(ifl_utf8_stream *s, char *out);
/* Capacity push() may need for n input bytes. */
static inline size_t ifl_utf8_stream_cap(size_t n)
{
    return 4 * (n + 4);
}

/* Decodes one code point at s[0..n). Returns its length (1..4) and sets *cp, or returns the length
 * of the longest valid prefix (>= 1, negated) when the bytes do not form a valid character:
 * -k means "the first k bytes are a valid start but the sequence is cut or broken there". */
int ifl_utf8_decode(const unsigned char *s, size_t n, uint32_t *cp);

/* 1 if s[0..n) is valid UTF-8. */
int ifl_utf8_valid(const char *s, size_t n);

/* Character class of a code point in the pre-tokenizer's terms. */
enum { IFL_UC_OTHER = 0, IFL_UC_LETTER = 1, IFL_UC_NUMBER = 2, IFL_UC_SPACE = 3 };
int ifl_unicode_class(uint32_t cp);

#endif
