/* SPDX-License-Identifier: GPL-2.0 */
#ifndef KILN_LIB_BASE64_H
#define KILN_LIB_BASE64_H

/*
 * Standard base64 (RFC 4648, "+/" alphabet, "=" padding), which is how
 * the control API carries bytes in JSON. Shared by the API server and
 * vmmctl.
 */

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/* Characters base64__encode writes for n bytes, without the NUL. */
static inline size_t base64__encoded_len(size_t n)
{
	return (n + 2) / 3 * 4;
}

/* At most this many bytes come out of decoding n characters. */
static inline size_t base64__decoded_max(size_t n)
{
	return n / 4 * 3 + 3;
}

/* Writes base64__encoded_len(n) characters and a NUL. */
void base64__encode(const void *in, size_t n, char *out);
/*
 * Decodes n characters (padding required, no whitespace) into out, room
 * for base64__decoded_max(n): the byte count, or -EINVAL.
 */
ssize_t base64__decode(const char *in, size_t n, uint8_t *out);

#endif
