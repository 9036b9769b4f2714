// SPDX-License-Identifier: GPL-2.0
/*
 * Files for the guest travel as a tiny cpio archive appended to the initrd:
 * the kernel unpacks concatenated newc archives
 * (Documentation/driver-api/early-userspace/buffer-format.rst), so any
 * bytes survive, with no command-line quoting or limit. The vmm names them
 * (proto/initramfs.h: the command, each argument NUL-terminated; the
 * virtio-fs mounts; the HTTPS interception CA).
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

	/* Sizes are bounded by INITRD_FILE_MAX: 8 hex digits suffice. */
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

int initrd__join_argv(char *const argv[], char **out, size_t *out_len)
{
	size_t len = 0, off = 0;
	char *body;
	int i;

	for (i = 0; argv && argv[i]; i++) {
		len += strlen(argv[i]) + 1;
		if (len > INITRD_FILE_MAX)
			return -E2BIG;
	}
	body = malloc(len ? len : 1);
	if (!body)
		return -ENOMEM;
	for (i = 0; argv && argv[i]; i++) {
		size_t n = strlen(argv[i]) + 1;

		memcpy(body + off, argv[i], n);
		off += n;
	}
	*out = body;
	*out_len = len;
	return 0;
}

int initrd__archive(const char *dir, const struct initrd_file *files,
		    unsigned int nr, uint8_t **out, size_t *out_len)
{
	struct cpio_buf b = { 0 };
	unsigned int i;

	/* The directory, each file and the trailer: header, name, padding. */
	b.cap = (nr + 2) * (CPIO_HDR_LEN + CPIO_ALIGN * 2) + strlen(dir) + 1 +
		sizeof(CPIO_TRAILER);
	for (i = 0; i < nr; i++) {
		if (files[i].len > INITRD_FILE_MAX ||
		    strlen(files[i].name) > INITRD_NAME_MAX)
			return -E2BIG;
		b.cap += strlen(files[i].name) + 1 + files[i].len;
	}
	b.data = malloc(b.cap);
	if (!b.data)
		return -ENOMEM;
	cpio_entry(&b, dir, S_IFDIR | 0755, NULL, 0, 1);
	for (i = 0; i < nr; i++)
		cpio_entry(&b, files[i].name, S_IFREG | 0444, files[i].data,
			   files[i].len, i + 2);
	cpio_entry(&b, CPIO_TRAILER, 0, NULL, 0, 0);

	*out = b.data;
	*out_len = b.len;
	return 0;
}
