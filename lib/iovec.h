/* SPDX-License-Identifier: GPL-2.0 */
#ifndef KILN_LIB_IOVEC_H
#define KILN_LIB_IOVEC_H

#include <stddef.h>
#include <stdint.h>
#include <sys/uio.h>

/*
 * Segment lists (a popped virtqueue chain, a request's data): copies
 * between them and flat buffers, and views of a byte range. Offsets and
 * lengths are bytes of the list as if it were one buffer; nothing here
 * allocates, and every loop is bounded by the segment count.
 */

/* Copies up to len bytes from offset skip of the segments into buf. */
size_t iov__to_buf(const struct iovec *iov, unsigned int n, uint64_t skip,
		   void *buf, size_t len);

/* Copies up to len bytes of buf into the segments from offset skip. */
size_t iov__from_buf(const struct iovec *iov, unsigned int n, uint64_t skip,
		     const void *buf, size_t len);

/*
 * dst receives the segments that cover [skip, skip + len) of src (they
 * point into the same memory). Returns how many, -E2BIG when that takes
 * more than max, -EINVAL when src is shorter than skip + len.
 */
int iov__sub(const struct iovec *src, unsigned int n, uint64_t skip,
	     uint64_t len, struct iovec *dst, unsigned int max);

/*
 * Narrows iov[0 .. n) to its bytes [skip, skip + len), in place (the
 * caller made sure they are there): returns the first segment, *cnt the
 * count (0 for len 0).
 */
struct iovec *iov__narrow(struct iovec *iov, unsigned int n, uint64_t skip,
			  uint64_t len, unsigned int *cnt);

/* Drops the first bytes of a segment list, in place (short I/O). */
void iov__advance(struct iovec **iov, unsigned int *n, uint64_t bytes);

#endif
