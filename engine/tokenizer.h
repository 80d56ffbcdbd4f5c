/* tokenizer.h: GPT-2's byte-level BPE tokenizer, exact.
 *
 * Loads vocab.json + merges.txt (Hugging Face names) or encoder.json + vocab.bpe (OpenAI's names
 * for the same files). Encoding: the GPT-2 pre-tokenizer pattern
 *     's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
 * implemented by hand over UTF-8 with Unicode tables (unicode_tables.c: Unicode 15.0, \s as in
 * ECMAScript), then byte-level BPE by merge rank on each piece. Bytes that are not valid UTF-8 are
 * pieces of their own class ("other") and still encode to byte tokens, so decode(encode(x)) == x
 * for any bytes. `<|endoftext|>` in the text is plain text unless the caller allows special tokens.
 * Read-only after load: encode/decode may run on many threads at once. */
#ifndef IFL_TOKENIZER_H
#define IFL_TOKENIZER_H

#include <stddef.h>
#include <stdint.h>

#include "error.h"

typedef struct ifl_tokenizer ifl_tokenizer;

/* A growable list of token ids. */
typedef struct {
    int32_t *ids;
    size_t n, cap;
} ifl_tokens;

int ifl_tokens_push(ifl_tokens *t, int32_t id);
void ifl_tokens_free(ifl_tokens *t);

/* Loads the vocabulary from DIR (vocab.json + merges.txt, else encoder.json + vocab.bpe). */
int ifl_tokenizer_load(ifl_tokenizer **out, const char *dir, ifl_err *err);
/* 1 when DIR holds one of those pairs of files (ifl_tokenizer_load would try to read them). */
int ifl_tokenizer_dir_has_vocab(const char *dir);
void ifl_tokenizer_free(ifl_tokenizer *t);

int32_t ifl_tokenizer_n_vocab(const ifl_tokenizer *t);
/* Id of "<|endoftext|>", or -1 if the vocabulary has none. */
int32_t ifl_tokenizer_eot(const ifl_tokenizer *t);

/* Appends the ids of `len` bytes of text to `out`. With allow_special, each "<|endoftext|>" in the
 * text becomes the single end-of-text id. Fails only on out-of-memory. */
int ifl_tokenizer_encode(const ifl_tokenizer *t, const char *text, size_t len, int allow_special,
                         ifl_tokens *out, ifl_err *err);

/* The raw bytes of one token (not NUL-terminated); NULL for an id outside the vocabulary. */
const char *ifl_tokenizer_token_bytes(const ifl_tokenizer *t, int32_t id, size_t *len);

/* Concatenated bytes of `n` tokens into a new heap string (NUL-terminated, *len excludes it).
 * Fails on an id outside the vocabulary. */
int ifl_tokenizer_decode(const ifl_tokenizer *t, const int32_t *ids, size_t n, char **out,
                         size_t *len, ifl_err *err);

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
