/* test_origin.c: the Host check (server/origin.c host_allowed): bound to loopback only the
 * loopback names, the bound address and --allowed-hosts are answered; bound to another address
 * any Host is, until --allowed-hosts is given, and then the loopback names still are (a
 * DNS-rebinding page sends its own name, never localhost), with the bound address and the list. */
#include <stdio.h>

#include "origin.h"
#include "testutil.h"

int main(void)
{
    static const struct {
        const char *bind, *allowed, *host;
        int want;
    } cases[] = {
        {"127.0.0.1", NULL, "localhost:8080", 1},
        {"127.0.0.1", NULL, "127.0.0.1:8080", 1},
        {"127.0.0.1", NULL, "[::1]:8080", 1},
        {"127.0.0.1", NULL, "attacker.example", 0},
        {"127.0.0.1", NULL, "127.0.0.1.evil.example", 0},
        {"127.0.0.1", "chat.example.com", "chat.example.com:8080", 1},
        {"0.0.0.0", NULL, "attacker.example", 1},
        {"0.0.0.0", "chat.example.com", "localhost:8080", 1},
        {"0.0.0.0", "chat.example.com", "127.0.0.1", 1},
        {"0.0.0.0", "chat.example.com", "[::1]:8080", 1},
        {"0.0.0.0", "chat.example.com", "CHAT.example.com", 1},
        {"0.0.0.0", "chat.example.com", "attacker.example", 0},
        {"0.0.0.0", "*", "attacker.example", 1},
        {"10.0.0.5", "chat.example.com", "10.0.0.5:8080", 1},
        {"10.0.0.5", "chat.example.com", "10.0.0.6:8080", 0},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        int got = host_allowed(cases[i].bind, cases[i].allowed, cases[i].host);
        CHECKF(got == cases[i].want, "bind %s, --allowed-hosts %s, Host %s: %s, want %s",
               cases[i].bind, cases[i].allowed ? cases[i].allowed : "(none)", cases[i].host,
               got ? "answered" : "refused", cases[i].want ? "answered" : "refused");
    }
    if (test_failures)
        fprintf(stderr, "test_origin: %d failure(s)\n", test_failures);
    else
        printf("test_origin: ok (%zu cases)\n", sizeof cases / sizeof *cases);
    return test_failures ? 1 : 0;
}
