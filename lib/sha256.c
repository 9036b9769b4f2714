// SPDX-License-Identifier: GPL-2.0
/*
 * SHA-256 over wolfSSL (sha256.h).
 */
#include <errno.h>
#include <limits.h>

#include "lib/sha256.h" /* wolfSSL's options.h before its other headers */

#include <wolfssl/wolfcrypt/error-crypt.h>

/* wolfSSL returns its own negative codes: turn them into -errno. */
static int wolf_errno(int ret)
{
	switch (ret) {
	case 0:
		return 0;
	case MEMORY_E:
		return -ENOMEM;
	case BAD_FUNC_ARG:
		return -EINVAL;
	default:
		return -EIO;
	}
}

int sha256__init(struct sha256 *s)
{
	return wolf_errno(wc_InitSha256(&s->ctx));
}

/* wolfSSL takes a word32 length: longer buffers go in pieces. */
int sha256__update(struct sha256 *s, const void *p, size_t n)
{
	const uint8_t *b = p;

	while (n) {
		word32 part = n > UINT32_MAX ? UINT32_MAX : (word32)n;
		int ret = wolf_errno(wc_Sha256Update(&s->ctx, b, part));

		if (ret)
			return ret;
		b += part;
		n -= part;
	}
	return 0;
}

int sha256__final_hex(struct sha256 *s, char hex[SHA256_HEX_LEN + 1])
{
	static const char digits[] = "0123456789abcdef";
	uint8_t md[SHA256_DIGEST_LEN];
	int ret = wolf_errno(wc_Sha256Final(&s->ctx, md));

	wc_Sha256Free(&s->ctx);
	if (ret)
		return ret;
	for (unsigned int i = 0; i < SHA256_DIGEST_LEN; i++) {
		hex[2 * i] = digits[md[i] >> 4];
		hex[2 * i + 1] = digits[md[i] & 0xf];
	}
	hex[SHA256_HEX_LEN] = '\0';
	return 0;
}

void sha256__free(struct sha256 *s)
{
	wc_Sha256Free(&s->ctx);
}

int sha256__hex(const void *p, size_t n, char hex[SHA256_HEX_LEN + 1])
{
	struct sha256 s;
	int ret = sha256__init(&s);

	if (ret)
		return ret;
	ret = sha256__update(&s, p, n);
	if (ret) {
		sha256__free(&s);
		return ret;
	}
	return sha256__final_hex(&s, hex);
}
