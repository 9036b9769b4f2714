/* SPDX-License-Identifier: GPL-2.0 */
#ifndef KILN_LIB_SHA256_H
#define KILN_LIB_SHA256_H

#include <stddef.h>
#include <stdint.h>

#include <wolfssl/options.h>
#include <wolfssl/wolfcrypt/sha256.h>

#include "lib/compiler.h"

/*
 * SHA-256 (FIPS 180-4) on wolfSSL's implementation, with its error codes
 * turned into -errno once, here: the root image's digest (vmm/rootfs.c)
 * and the snapshot format's (snapshot/) both hash through this.
 */
#define SHA256_DIGEST_LEN WC_SHA256_DIGEST_SIZE
#define SHA256_HEX_LEN	  (2 * SHA256_DIGEST_LEN)

struct sha256 {
	wc_Sha256 ctx;
};

int __must_check sha256__init(struct sha256 *s);
int __must_check sha256__update(struct sha256 *s, const void *p, size_t n);
/* The digest as lower-case hex; releases s whatever it returns. */
int __must_check sha256__final_hex(struct sha256 *s,
				   char hex[SHA256_HEX_LEN + 1]);
/* Release a hash that will not be finished. */
void sha256__free(struct sha256 *s);
/* One buffer's digest as lower-case hex. */
int __must_check sha256__hex(const void *p, size_t n,
			     char hex[SHA256_HEX_LEN + 1]);

#endif
