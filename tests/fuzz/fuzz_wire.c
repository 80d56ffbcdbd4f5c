/* fuzz_wire.c: libFuzzer target for the wire guard's scanner (server/wire_guard.c), which reads
 * every byte a client sends before libwebsockets does. One input is a connection's bytes; its
 * first two bytes pick a split point. Checks: no crash; the verdict and its message are the same
 * fed whole, in two parts, and one byte at a time; a message is printable ASCII (it goes into an
 * HTTP body or a close frame's reason, at most 123 bytes); a spent state keeps its verdict. */
#include "fuzz_common.h"
#include "wire_guard.h"

static wire_verdict feed(wire_state *w, const uint8_t *p, size_t n, size_t step)
{
    wire_init(w);
    wire_verdict v = WIRE_OK;
    for (size_t i = 0; i < n && !v; i += step)
        v = wire_scan(w, p + i, i + step <= n ? step : n - i);
    return v;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 2)
        return 0;
    size_t at = ((size_t)data[0] << 8 | data[1]) % size;
    data += 2;
    size -= 2;
    wire_state whole, parts, bytes;
    wire_verdict v = feed(&whole, data, size, size ? size : 1);
    wire_init(&parts);
    wire_verdict v2 = wire_scan(&parts, data, at < size ? at : size);
    if (!v2 && at < size)
        v2 = wire_scan(&parts, data + at, size - at);
    wire_verdict v3 = feed(&bytes, data, size, 1);
    FUZZ_CHECK(v == v2 && v == v3);
    if (!v)
        return 0;
    FUZZ_CHECK(!strcmp(whole.why, parts.why) && !strcmp(whole.why, bytes.why));
    size_t n = strlen(whole.why);
    FUZZ_CHECK(n > 0 && n <= 123);
    for (size_t i = 0; i < n; i++)
        FUZZ_CHECK(whole.why[i] >= 0x20 && whole.why[i] < 0x7f);
    FUZZ_CHECK(wire_scan(&whole, (const uint8_t *)"\r\n\r\n", 4) == v);
    FUZZ_CHECK(wire_http_status(v) || v == WIRE_UNMASKED_FRAME);
    return 0;
}
