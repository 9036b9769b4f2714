// SPDX-License-Identifier: GPL-2.0
/* TLV payloads and frame headers of the agent protocol (see tlv.h). */
#include <endian.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "proto/tlv.h"

void kiln_buf__init(struct kiln_buf *b)
{
	b->data = NULL;
	b->len = b->cap = 0;
}

void kiln_buf__free(struct kiln_buf *b)
{
	free(b->data);
	kiln_buf__init(b);
}

void kiln_buf__reset(struct kiln_buf *b)
{
	b->len = 0;
}

static int reserve(struct kiln_buf *b, size_t more)
{
	size_t cap;
	uint8_t *p;

	if (more > KILN_FRAME_MAX || b->len > KILN_FRAME_MAX - more)
		return -E2BIG;
	if (b->len + more <= b->cap)
		return 0;
	cap = b->cap ? b->cap : 256;
	while (cap < b->len + more)
		cap *= 2;
	p = realloc(b->data, cap);
	if (!p)
		return -ENOMEM;
	b->data = p;
	b->cap = cap;
	return 0;
}

static int put_header(struct kiln_buf *b, uint16_t tag, size_t len)
{
	struct kiln_tlv t = { .tag = htole16(tag), .len = htole32(len) };
	int ret = reserve(b, sizeof(t) + len);

	if (ret)
		return ret;
	memcpy(b->data + b->len, &t, sizeof(t));
	b->len += sizeof(t);
	return 0;
}

int kiln_tlv__put_bytes(struct kiln_buf *b, uint16_t tag, const void *p,
			size_t len)
{
	int ret = put_header(b, tag, len);

	if (ret)
		return ret;
	if (len)
		memcpy(b->data + b->len, p, len);
	b->len += len;
	return 0;
}

int kiln_tlv__put_u64(struct kiln_buf *b, uint16_t tag, uint64_t v)
{
	uint64_t le = htole64(v);

	return kiln_tlv__put_bytes(b, tag, &le, sizeof(le));
}

int kiln_tlv__put_str(struct kiln_buf *b, uint16_t tag, const char *s)
{
	return kiln_tlv__put_bytes(b, tag, s, strlen(s));
}

int kiln_tlv__begin(struct kiln_buf *b, uint16_t tag, size_t *mark)
{
	int ret = put_header(b, tag, 0);

	*mark = b->len;
	return ret;
}

void kiln_tlv__end(struct kiln_buf *b, size_t mark)
{
	struct kiln_tlv t;

	memcpy(&t, b->data + mark - sizeof(t), sizeof(t));
	t.len = htole32(b->len - mark);
	memcpy(b->data + mark - sizeof(t), &t, sizeof(t));
}

void kiln_tlv__iter(struct kiln_tlv_iter *it, const void *payload, size_t len)
{
	it->p = payload;
	it->left = len;
}

int kiln_tlv__next(struct kiln_tlv_iter *it, uint16_t *tag, const uint8_t **val,
		   uint32_t *len)
{
	struct kiln_tlv t;
	uint32_t n;

	if (!it->left)
		return 0;
	if (it->left < sizeof(t))
		return -EPROTO;
	memcpy(&t, it->p, sizeof(t));
	n = le32toh(t.len);
	if (n > it->left - sizeof(t))
		return -EPROTO;
	*tag = le16toh(t.tag);
	*val = it->p + sizeof(t);
	*len = n;
	it->p += sizeof(t) + n;
	it->left -= sizeof(t) + n;
	return 1;
}

int kiln_tlv__u64(const uint8_t *val, uint32_t len, uint64_t *out)
{
	uint64_t le;

	if (len != sizeof(le))
		return -EPROTO;
	memcpy(&le, val, sizeof(le));
	*out = le64toh(le);
	return 0;
}

void kiln_frame__pack(struct kiln_frame *f, uint16_t type, uint16_t flags,
		      uint32_t len)
{
	f->len = htole32(len);
	f->type = htole16(type);
	f->flags = htole16(flags);
}

int kiln_frame__unpack(const struct kiln_frame *wire, uint16_t *type,
		       uint16_t *flags, uint32_t *len)
{
	*len = le32toh(wire->len);
	*type = le16toh(wire->type);
	*flags = le16toh(wire->flags);
	return *len > KILN_FRAME_MAX ? -EPROTO : 0;
}

#define E(x)          \
	{             \
		x, #x \
	}
static const struct {
	int value;
	const char *name;
} errnos[] = {
	E(EPERM),     E(ENOENT),    E(ESRCH),	     E(EINTR),	 E(EIO),
	E(ENXIO),     E(E2BIG),	    E(ENOEXEC),	     E(EBADF),	 E(ECHILD),
	E(EAGAIN),    E(ENOMEM),    E(EACCES),	     E(EFAULT),	 E(EBUSY),
	E(EEXIST),    E(EXDEV),	    E(ENODEV),	     E(ENOTDIR), E(EISDIR),
	E(EINVAL),    E(ENFILE),    E(EMFILE),	     E(ENOTTY),	 E(ETXTBSY),
	E(EFBIG),     E(ENOSPC),    E(ESPIPE),	     E(EROFS),	 E(EMLINK),
	E(EPIPE),     E(ERANGE),    E(ENAMETOOLONG), E(ENOSYS),	 E(ENOTEMPTY),
	E(ELOOP),     E(EPROTO),    E(EOVERFLOW),    E(EILSEQ),	 E(ENOTSUP),
	E(ETIMEDOUT), E(ECANCELED), E(EDQUOT),	     E(ESTALE),	 E(ECONNRESET),
};
#undef E

const char *kiln_errno__name(int err)
{
	for (size_t i = 0; i < sizeof(errnos) / sizeof(errnos[0]); i++)
		if (errnos[i].value == err)
			return errnos[i].name;
	return "EIO";
}

int kiln_errno__value(const char *name, size_t len)
{
	for (size_t i = 0; i < sizeof(errnos) / sizeof(errnos[0]); i++)
		if (strlen(errnos[i].name) == len &&
		    !memcmp(errnos[i].name, name, len))
			return errnos[i].value;
	return EIO;
}
