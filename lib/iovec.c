// SPDX-License-Identifier: GPL-2.0
/* Segment list helpers (see iovec.h). */
#include <errno.h>
#include <stdbool.h>
#include <string.h>

#include "lib/iovec.h"

/* The one walk behind both copies: to_buf says which way. */
static size_t copy(const struct iovec *iov, unsigned int n, uint64_t skip,
		   uint8_t *buf, size_t len, bool to_buf)
{
	size_t done = 0;

	for (unsigned int i = 0; i < n && done < len; i++) {
		uint8_t *seg = iov[i].iov_base;
		size_t take;

		if (skip >= iov[i].iov_len) {
			skip -= iov[i].iov_len;
			continue;
		}
		take = iov[i].iov_len - skip;
		if (take > len - done)
			take = len - done;
		if (to_buf)
			memcpy(buf + done, seg + skip, take);
		else
			memcpy(seg + skip, buf + done, take);
		done += take;
		skip = 0;
	}
	return done;
}

size_t iov__to_buf(const struct iovec *iov, unsigned int n, uint64_t skip,
		   void *buf, size_t len)
{
	return copy(iov, n, skip, buf, len, true);
}

size_t iov__from_buf(const struct iovec *iov, unsigned int n, uint64_t skip,
		     const void *buf, size_t len)
{
	/* Only read through buf: the cast drops nothing copy() keeps. */
	return copy(iov, n, skip, (uint8_t *)buf, len, false);
}

int iov__sub(const struct iovec *src, unsigned int n, uint64_t skip,
	     uint64_t len, struct iovec *dst, unsigned int max)
{
	unsigned int out = 0;

	for (unsigned int i = 0; i < n && len; i++) {
		uint64_t take;

		if (skip >= src[i].iov_len) {
			skip -= src[i].iov_len;
			continue;
		}
		if (out == max)
			return -E2BIG;
		take = src[i].iov_len - skip;
		if (take > len)
			take = len;
		dst[out].iov_base = (uint8_t *)src[i].iov_base + skip;
		dst[out].iov_len = take;
		out++;
		len -= take;
		skip = 0;
	}
	return len ? -EINVAL : (int)out;
}

struct iovec *iov__narrow(struct iovec *iov, unsigned int n, uint64_t skip,
			  uint64_t len, unsigned int *cnt)
{
	unsigned int i = 0, j;

	*cnt = 0;
	while (i < n && skip >= iov[i].iov_len) {
		skip -= iov[i].iov_len;
		i++;
	}
	if (!len || i == n)
		return iov + i;
	iov[i].iov_base = (uint8_t *)iov[i].iov_base + skip;
	iov[i].iov_len -= skip;
	for (j = i; j + 1 < n && len > iov[j].iov_len; j++)
		len -= iov[j].iov_len;
	if (len < iov[j].iov_len)
		iov[j].iov_len = len;
	*cnt = j - i + 1;
	return iov + i;
}

void iov__advance(struct iovec **iov, unsigned int *n, uint64_t bytes)
{
	while (*n && bytes >= (*iov)->iov_len) {
		bytes -= (*iov)->iov_len;
		(*iov)++;
		(*n)--;
	}
	if (*n && bytes) {
		(*iov)->iov_base = (uint8_t *)(*iov)->iov_base + bytes;
		(*iov)->iov_len -= bytes;
	}
}
