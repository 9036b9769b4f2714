/* SPDX-License-Identifier: GPL-2.0 */
#ifndef KILN_LIB_SIPHASH_H
#define KILN_LIB_SIPHASH_H

/*
 * SipHash-2-4 (Aumasson and Bernstein), the keyed hash for tables whose
 * keys a guest chooses: without the key it cannot aim many keys at one
 * bucket. The rounds are wolfSSL's (wc_SipHash, built into Debian 12's
 * libwolfssl), which we link for SHA-256 already; this header keeps the
 * wolfSSL headers and their error codes out of the callers.
 */

#include <stddef.h>
#include <stdint.h>

#define SIPHASH__KEY_LEN 16U /* bytes */

/* The 64-bit SipHash-2-4 of msg[0, len) under key, as a number. */
uint64_t siphash__24(const uint8_t key[SIPHASH__KEY_LEN], const void *msg,
		     size_t len);

#endif
