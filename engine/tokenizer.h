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
#include "utf8.h" /* the UTF-8 pieces the tokenizer is built on, for its users too */

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

#endif
