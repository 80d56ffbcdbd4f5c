/* sha256.h: SHA-256 (FIPS 180-4), used to fingerprint generated models against test fixtures. */
#ifndef IFL_SHA256_H
#define IFL_SHA256_H

#include <stddef.h>
#include <stdint.h>

#include "error.h"

typedef struct {
    uint32_t h[8];
    uint64_t len;
    unsigned char buf[64];
    size_t n;
} ifl_sha256;

void ifl_sha256_init(ifl_sha256 *s);
void ifl_sha256_update(ifl_sha256 *s, const void *data, size_t len);
void ifl_sha256_final(ifl_sha256 *s, unsigned char out[32]);
/* Lower-case hex digest of a file into hex[65]. */
int ifl_sha256_file(const char *path, char hex[65], ifl_err *err);

#endif
