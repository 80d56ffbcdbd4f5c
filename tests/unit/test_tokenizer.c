/* test_tokenizer.c: the tokenizer beyond the parity corpus: invalid UTF-8 is tokenized as bytes and
 * decodes back to the same bytes; streaming decode holds back bytes that end inside a character;
 * <|endoftext|> only with allow_special; pathological inputs (one 200 KB piece) stay fast enough to
 * finish; character classes at the edges (JavaScript's \s).
 * usage: test_tokenizer VOCAB_DIR */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rng.h"
#include "testutil.h"
#include "tokenizer.h"
#include "util.h"

static ifl_tokenizer *tok;

static int roundtrip(const char *s, size_t n)
{
    ifl_tokens ids = {0};
    ifl_err err;
    char *dec = NULL;
    size_t dlen = 0;
    int ok = ifl_tokenizer_encode(tok, s, n, 0, &ids, &err) == 0 &&
             ifl_tokenizer_decode(tok, ids.ids, ids.n, &dec, &dlen, &err) == 0 && dlen == n &&
             !memcmp(dec, s, n);
    for (size_t i = 0; i < ids.n; i++)
        ok = ok && ids.ids[i] >= 0 && ids.ids[i] < ifl_tokenizer_n_vocab(tok);
    free(dec);
    ifl_tokens_free(&ids);
    return ok;
}

/* Streams the tokens of `text` one at a time; checks every chunk is whole characters (REPLACE mode)
 * and that the chunks add up to the text. Returns the number of pushes that emitted nothing. */
static int stream_check(const char *text, ifl_utf8_mode mode, int expect_exact)
{
    ifl_tokens ids = {0};
    ifl_err err;
    ifl_tokenizer_encode(tok, text, strlen(text), 0, &ids, &err);
    ifl_utf8_stream st;
    ifl_utf8_stream_init(&st, mode);
    char out[4096], buf[512];
    size_t o = 0;
    int held = 0;
    for (size_t i = 0; i < ids.n; i++) {
        size_t len;
        const char *b = ifl_tokenizer_token_bytes(tok, ids.ids[i], &len);
        size_t k = ifl_utf8_stream_push(&st, b, len, buf);
        if (mode == IFL_UTF8_REPLACE)
            CHECKF(ifl_utf8_valid(buf, k), "chunk %zu of \"%s\" is not valid UTF-8", i, text);
        held += k == 0;
        memcpy(out + o, buf, k);
        o += k;
    }
    o += ifl_utf8_stream_flush(&st, out + o);
    if (expect_exact)
        CHECKF(o == strlen(text) && !memcmp(out, text, o), "streamed \"%s\" came back different",
               text);
    ifl_tokens_free(&ids);
    return held;
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: test_tokenizer VOCAB_DIR\n");
        return 2;
    }
    ifl_err err;
    if (ifl_tokenizer_load(&tok, argv[1], &err)) {
        fprintf(stderr, "%s\n", err.msg);
        return 1;
    }
    CHECK(ifl_tokenizer_n_vocab(tok) == 50257);
    CHECK(ifl_tokenizer_eot(tok) == 50256);

    /* Invalid UTF-8: lone continuation, truncated sequences, overlongs, surrogates, > U+10FFFF. */
    static const char *const bad[] = {
        "\x80",
        "abc\xff",
        "\xc3",
        "caf\xc3",
        "\xe2\x82",
        "\xf0\x9f\x98",
        "\xc0\xaf",
        "\xe0\x80\xaf",
        "\xed\xa0\x80",
        "\xf4\x90\x80\x80",
        "\xfe\xfe\xff\xff",
        " \x80\x80 x \xc3\x28 y",
        "hello \xe2\x28\xa1 world",
        "\xf0\x28\x8c\x28",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        CHECKF(roundtrip(bad[i], strlen(bad[i])), "invalid UTF-8 case %zu does not round-trip", i);
    ifl_rng rng;
    ifl_rng_seed(&rng, 3);
    int random_ok = 0;
    char buf[300];
    for (int t = 0; t < 3000; t++) {
        size_t n = (size_t)(ifl_rng_next(&rng) % 300);
        for (size_t i = 0; i < n; i++) /* bias towards UTF-8-ish bytes and spaces */
            buf[i] = (char)(ifl_rng_next(&rng) % 4 == 0 ? ' ' : ifl_rng_next(&rng) % 256);
        random_ok += roundtrip(buf, n);
    }
    CHECKF(random_ok == 3000, "%d of 3000 random byte strings round-trip", random_ok);
    printf("invalid UTF-8: %zu fixed cases and %d random byte strings round-trip\n",
           sizeof bad / sizeof bad[0], random_ok);

    /* Streaming decode: emoji and CJK are split across byte-level tokens. */
    static const char *const texts[] = {"😀 smile",    "日本語のテキスト",
                                        "naïve café", "👨‍👩‍👧 family",
                                        "a🇫🇷b",       "Ωmega ∑ ≤ →"};
    int held = 0;
    for (size_t i = 0; i < sizeof texts / sizeof texts[0]; i++)
        held += stream_check(texts[i], IFL_UTF8_REPLACE, 1);
    CHECKF(held > 0, "no token ever ended inside a character: the test proves nothing");
    printf("streaming decode: %d pushes held back partial characters, all chunks valid UTF-8\n",
           held);
    {
        /* a lone 4-byte lead byte, fed alone, is held; at the end it becomes U+FFFD or the raw byte
         */
        ifl_utf8_stream st;
        char out[64];
        ifl_utf8_stream_init(&st, IFL_UTF8_REPLACE);
        CHECK(ifl_utf8_stream_push(&st, "\xf0\x9f", 2, out) == 0);
        CHECK(ifl_utf8_stream_push(&st, "\x98", 1, out) == 0);
        size_t k = ifl_utf8_stream_push(&st, "\x80!", 2, out);
        CHECK(k == 5 && !memcmp(out, "\xf0\x9f\x98\x80!", 5));
        CHECK(ifl_utf8_stream_push(&st, "\xe2\x82", 2, out) == 0);
        k = ifl_utf8_stream_push(&st, "A", 1, out); /* broken: replacement, then A */
        CHECK(k == 4 && !memcmp(out,
                                "\xef\xbf\xbd"
                                "A",
                                4));
        CHECK(ifl_utf8_stream_push(&st, "\xc3", 1, out) == 0);
        k = ifl_utf8_stream_flush(&st, out);
        CHECK(k == 3 && !memcmp(out, "\xef\xbf\xbd", 3));
        ifl_utf8_stream_init(&st, IFL_UTF8_RAW);
        CHECK(ifl_utf8_stream_push(&st, "\xc3", 1, out) == 0);
        k = ifl_utf8_stream_flush(&st, out);
        CHECK(k == 1 && (unsigned char)out[0] == 0xc3);
        k = ifl_utf8_stream_push(&st, "\xff\x80x", 3, out);
        CHECK(k == 3 && !memcmp(out, "\xff\x80x", 3));
    }

    /* Special tokens */
    {
        const char *s = "a<|endoftext|>b";
        ifl_tokens plain = {0}, special = {0};
        ifl_tokenizer_encode(tok, s, strlen(s), 0, &plain, &err);
        ifl_tokenizer_encode(tok, s, strlen(s), 1, &special, &err);
        int plain_has = 0;
        for (size_t i = 0; i < plain.n; i++)
            plain_has |= plain.ids[i] == 50256;
        CHECK(!plain_has);
        CHECK(special.n == 3 && special.ids[1] == 50256);
        ifl_tokens_free(&plain);
        ifl_tokens_free(&special);
    }

    /* Pathological pieces: one piece of 200,000 letters, digits or spaces (O(n log n) merges). */
    {
        size_t n = 200000;
        char *big = malloc(n + 1);
        const char fill[3] = {'a', '7', ' '};
        for (int f = 0; f < 3; f++) {
            memset(big, fill[f], n);
            double t0 = ifl_now_s();
            CHECK(roundtrip(big, n));
            printf("200,000 x '%c' as one piece: %.3f s\n", fill[f], ifl_now_s() - t0);
        }
        free(big);
    }

    /* Character classes at the edges of ECMAScript's \s and of \p{L} / \p{N}. */
    CHECK(ifl_unicode_class(0x00E9) == IFL_UC_LETTER);  /* é */
    CHECK(ifl_unicode_class(0x0663) == IFL_UC_NUMBER);  /* ARABIC-INDIC DIGIT THREE */
    CHECK(ifl_unicode_class(0x2167) == IFL_UC_NUMBER);  /* ROMAN NUMERAL EIGHT (Nl) */
    CHECK(ifl_unicode_class(0x00BD) == IFL_UC_NUMBER);  /* ½ (No) */
    CHECK(ifl_unicode_class(0x3000) == IFL_UC_SPACE);   /* IDEOGRAPHIC SPACE */
    CHECK(ifl_unicode_class(0xFEFF) == IFL_UC_SPACE);   /* BOM: \s in JavaScript */
    CHECK(ifl_unicode_class(0x0085) == IFL_UC_OTHER);   /* NEL: not \s in JavaScript */
    CHECK(ifl_unicode_class(0x180E) == IFL_UC_OTHER);   /* MONGOLIAN VOWEL SEPARATOR: Cf */
    CHECK(ifl_unicode_class(0x0301) == IFL_UC_OTHER);   /* combining acute: Mn */
    CHECK(ifl_unicode_class(0x1F600) == IFL_UC_OTHER);  /* emoji: So */
    CHECK(ifl_unicode_class(0x20000) == IFL_UC_LETTER); /* CJK Ext. B */
    ifl_tokenizer_free(tok);
    return test_finish("test_tokenizer");
}
