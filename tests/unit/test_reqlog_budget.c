/* test_reqlog_budget.c: the request log's budget of refused requests' rows (server/reqlog.c):
 * per client address a burst then a refill a second, across all clients the same larger; a refusal
 * past either takes nothing from the other; the table of addresses stays bounded and a flood of
 * fresh addresses does not make it forget one that spent its budget; the address key of a socket
 * (IPv4 as ::ffff:a.b.c.d, IPv6 by its /64, anything else zero). */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "reqlog.h"
#include "testutil.h"

#define SEC 1000000ull

static void v4(uint8_t key[REQ_PEER_BYTES], uint32_t a)
{
    memset(key, 0, REQ_PEER_BYTES);
    key[10] = key[11] = 0xff;
    key[12] = (uint8_t)(a >> 24), key[13] = (uint8_t)(a >> 16);
    key[14] = (uint8_t)(a >> 8), key[15] = (uint8_t)a;
}

/* How many of n refusals from `key` at now are admitted. */
static int admit_n(reqlog *lg, const uint8_t key[REQ_PEER_BYTES], int n, uint64_t now)
{
    int ok = 0;
    for (int i = 0; i < n; i++)
        ok += reqlog_refusal_admit(lg, key, now);
    return ok;
}

static void one_address(void)
{
    reqlog *lg = calloc(1, sizeof *lg);
    uint8_t a[REQ_PEER_BYTES], b[REQ_PEER_BYTES];
    v4(a, 0x7f000001), v4(b, 0x7f000002);
    uint64_t t = 1000 * SEC;
    CHECK(admit_n(lg, a, 1000, t) == REQLOG_REFUSALS_ADDR_BURST);
    CHECK(admit_n(lg, a, 1000, t + 5 * SEC) == 5 * REQLOG_REFUSALS_ADDR_PER_S);
    CHECK(admit_n(lg, b, 1000, t + 5 * SEC) == REQLOG_REFUSALS_ADDR_BURST); /* its own budget */
    /* refilled to the burst, no more, after a long pause */
    CHECK(admit_n(lg, a, 1000, t + 3600 * SEC) == REQLOG_REFUSALS_ADDR_BURST);
    CHECK(lg->refusals.unlogged > 0);
    free(lg);
}

static void all_clients(void)
{
    reqlog *lg = calloc(1, sizeof *lg);
    uint8_t k[REQ_PEER_BYTES];
    uint64_t t = 1000 * SEC;
    int ok = 0;
    for (uint32_t i = 0; i < 1000; i++) { /* 1000 addresses, 5 refusals each */
        v4(k, 0x0a000000 + i);
        ok += admit_n(lg, k, 5, t);
    }
    CHECKF(ok == REQLOG_REFUSALS_ALL_BURST, "%d admitted", ok);
    ok = 0;
    for (uint32_t i = 0; i < 1000; i++) {
        v4(k, 0x0b000000 + i);
        ok += admit_n(lg, k, 1, t + 2 * SEC);
    }
    CHECKF(ok == 2 * REQLOG_REFUSALS_ALL_PER_S, "%d admitted after 2 s", ok);
    /* refusals the global budget turned down took nothing from their address: a fresh address
     * once the global budget refilled still has its whole burst */
    v4(k, 0x0a000000 + 999);
    CHECK(admit_n(lg, k, 100, t + 3600 * SEC) == REQLOG_REFUSALS_ADDR_BURST);
    free(lg);
}

/* An address that spent its budget is remembered through a flood of fresh ones. */
static void table_bounded(void)
{
    reqlog *lg = calloc(1, sizeof *lg);
    uint8_t a[REQ_PEER_BYTES], k[REQ_PEER_BYTES];
    v4(a, 0xc0000201);
    uint64_t t = 1000 * SEC;
    CHECK(admit_n(lg, a, 100, t) == REQLOG_REFUSALS_ADDR_BURST);
    int n = test_quick() ? 20000 : 200000;
    for (int i = 0; i < n; i++) {
        v4(k, 0x20000000u + (uint32_t)i);
        reqlog_refusal_admit(lg, k, t + (uint64_t)i); /* within the same second */
    }
    CHECK(admit_n(lg, a, 100, t + SEC / 2) == 0);
    CHECK(sizeof lg->refusals.by_addr == REQLOG_REFUSAL_ADDRS * sizeof(reqlog_addr_budget));
    free(lg);
}

static void peer_keys(void)
{
    uint8_t key[REQ_PEER_BYTES], want[REQ_PEER_BYTES];
    int sv[2];
    memset(key, 0xaa, sizeof key);
    if (!socketpair(AF_UNIX, SOCK_STREAM, 0, sv)) { /* not an IP socket: zero */
        reqlog_peer_key(sv[0], key);
        memset(want, 0, sizeof want);
        CHECK(!memcmp(key, want, sizeof key));
        close(sv[0]), close(sv[1]);
    }
    reqlog_peer_key(-1, key);
    CHECK(!memcmp(key, want, sizeof key));
    int l = socket(AF_INET, SOCK_STREAM, 0), c = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t n = sizeof sa;
    if (l >= 0 && c >= 0 && !bind(l, (struct sockaddr *)&sa, sizeof sa) && !listen(l, 1) &&
        !getsockname(l, (struct sockaddr *)&sa, &n) &&
        !connect(c, (struct sockaddr *)&sa, sizeof sa)) {
        int s = accept(l, NULL, NULL);
        reqlog_peer_key(s, key);
        v4(want, 0x7f000001);
        CHECK(!memcmp(key, want, sizeof key));
        close(s);
    } else {
        fprintf(stderr, "test_reqlog_budget: no loopback TCP: the IPv4 key is not checked\n");
    }
    close(l), close(c);
}

int main(void)
{
    one_address();
    all_clients();
    table_bounded();
    peer_keys();
    if (test_failures)
        fprintf(stderr, "test_reqlog_budget: %d failure(s)\n", test_failures);
    else
        printf("test_reqlog_budget: ok\n");
    return test_failures ? 1 : 0;
}
