// SPDX-License-Identifier: GPL-2.0
/*
 * The command to run travels as a tiny cpio archive appended to the initrd:
 * /kiln/argv, each argument NUL-terminated. The kernel unpacks concatenated
 * newc archives (Documentation/driver-api/early-userspace/buffer-format.rst),
 * so any argument bytes survive, with no command-line quoting or limit.
 * The virtio-fs mounts ride along the same way as /kiln/mounts (tag, guest
 * path and "ro"/"rw", each NUL-terminated, per mount).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "bootloader/boot.h"

#define CPIO_NEWC_MAGIC "070701"
#define CPIO_HDR_LEN	110
#define CPIO_ALIGN	4
#define CPIO_TRAILER	"TRAILER!!!"
#define KILN_ARGV_MAX	(1U << 20) /* 1 MiB of arguments */

struct cpio_buf {
	uint8_t *data;
	size_t len, cap;
};

static size_t cpio_pad(size_t n)
{
	return (CPIO_ALIGN - (n % CPIO_ALIGN)) % CPIO_ALIGN;
}

static void cpio_entry(struct cpio_buf *b, const char *name, unsigned int mode,
		       const void *body, size_t body_len, unsigned int ino)
{
	size_t name_len = strlen(name) + 1;
	char hdr[CPIO_HDR_LEN + 32];

	/* Sizes are bounded by KILN_ARGV_MAX: 8 hex digits suffice. */
	snprintf(hdr, sizeof(hdr),
		 "%s%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X",
		 CPIO_NEWC_MAGIC, ino, mode, 0, 0, 1, 0, (unsigned int)body_len,
		 0, 0, 0, 0, (unsigned int)name_len, 0);
	memcpy(b->data + b->len, hdr, CPIO_HDR_LEN);
	b->len += CPIO_HDR_LEN;
	memcpy(b->data + b->len, name, name_len);
	b->len += name_len;
	memset(b->data + b->len, 0, cpio_pad(b->len));
	b->len += cpio_pad(b->len);
	if (body_len)
		memcpy(b->data + b->len, body, body_len);
	b->len += body_len;
	memset(b->data + b->len, 0, cpio_pad(b->len));
	b->len += cpio_pad(b->len);
}

int initrd__kiln_archive(char *const argv[], const void *mounts,
			 size_t mounts_len, uint8_t **out, size_t *out_len)
{
	struct cpio_buf b = { 0 };
	size_t body_len = 0, off = 0;
	char *body;
	int i;

	for (i = 0; argv && argv[i]; i++) {
		body_len += strlen(argv[i]) + 1;
		if (body_len > KILN_ARGV_MAX)
			return -E2BIG;
	}
	if (mounts_len > KILN_ARGV_MAX)
		return -E2BIG;
	body = malloc(body_len ? body_len : 1);
	if (!body)
		return -ENOMEM;
	for (i = 0; argv && argv[i]; i++) {
		size_t n = strlen(argv[i]) + 1;

		memcpy(body + off, argv[i], n);
		off += n;
	}

	/* Four headers, four short names, the bodies, and padding. */
	b.cap = 4 * (CPIO_HDR_LEN + 16 + CPIO_ALIGN * 2) + body_len +
		mounts_len;
	b.data = malloc(b.cap);
	if (!b.data) {
		free(body);
		return -ENOMEM;
	}
	cpio_entry(&b, "kiln", S_IFDIR | 0755, NULL, 0, 1);
	if (argv)
		cpio_entry(&b, "kiln/argv", S_IFREG | 0444, body, body_len, 2);
	if (mounts_len)
		cpio_entry(&b, "kiln/mounts", S_IFREG | 0444, mounts,
			   mounts_len, 3);
	cpio_entry(&b, CPIO_TRAILER, 0, NULL, 0, 0);
	free(body);

	*out = b.data;
	*out_len = b.len;
	return 0;
}
