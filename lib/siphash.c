// SPDX-License-Identifier: GPL-2.0
/*
 * SipHash-2-4 through wolfSSL. The reference's output is a little-endian
 * 64-bit word; it is read back as a number, so a hash is the same value
 * on every host.
 */
#include <stdint.h>

#include <wolfssl/options.h>
#include <wolfssl/wolfcrypt/siphash.h>

#include "lib/siphash.h"

static uint64_t load_le64(const uint8_t p[8])
{
	uint64_t v = 0;
	unsigned int i;

	for (i = 0; i < 8; i++)
		v |= (uint64_t)p[i] << (8 * i);
	return v;
}

uint64_t siphash__24(const uint8_t key[SIPHASH__KEY_LEN], const void *msg,
		     size_t len)
{
	uint8_t out[SIPHASH_MAC_SIZE_8] = { 0 };
	SipHash sh;

	/*
	 * wolfSSL fails only on NULL pointers or a MAC size other than 8 or
	 * 16, none of which can reach it from here; the one-shot form takes
	 * a 32-bit length, longer messages go through the streaming form.
	 */
	if (len <= UINT32_MAX) {
		(void)wc_SipHash(key, msg, (word32)len, out, sizeof(out));
		return load_le64(out);
	}
	(void)wc_InitSipHash(&sh, key, sizeof(out));
	while (len) {
		word32 n = len > UINT32_MAX ? UINT32_MAX : (word32)len;

		(void)wc_SipHashUpdate(&sh, msg, n);
		msg = (const uint8_t *)msg + n;
		len -= n;
	}
	(void)wc_SipHashFinal(&sh, out, sizeof(out));
	return load_le64(out);
}
