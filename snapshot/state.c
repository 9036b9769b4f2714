// SPDX-License-Identifier: GPL-2.0
/* A snapshot's binary state files: snapshot/state.h. */
#include <endian.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "snapshot/state.h"

#define HEADER_LEN	   16U /* magic, version, kind */
#define SECTION_HEADER_LEN 8U  /* tag, length */

static void put32(uint8_t *p, uint32_t v)
{
	v = htole32(v);
	memcpy(p, &v, sizeof(v));
}

static uint32_t get32(const uint8_t *p)
{
	uint32_t v;

	memcpy(&v, p, sizeof(v));
	return le32toh(v);
}

static size_t pad(size_t n)
{
	return (n + SNAP_STATE_ALIGN - 1) & ~(size_t)(SNAP_STATE_ALIGN - 1);
}

/* Room for n more bytes, zeroed. */
static uint8_t *reserve(struct snap_writer *w, size_t n)
{
	size_t cap = w->cap ? w->cap : 4096;
	uint8_t *p;

	if (w->err)
		return NULL;
	while (cap - w->len < n)
		cap *= 2;
	if (cap != w->cap) {
		p = realloc(w->buf, cap);
		if (!p) {
			w->err = -ENOMEM;
			return NULL;
		}
		w->buf = p;
		w->cap = cap;
	}
	p = w->buf + w->len;
	memset(p, 0, n);
	w->len += n;
	return p;
}

void snap_writer__init(struct snap_writer *w, enum snap_kind kind)
{
	uint8_t *p;

	memset(w, 0, sizeof(*w));
	p = reserve(w, HEADER_LEN);
	if (!p)
		return;
	memcpy(p, SNAP_STATE_MAGIC, 8);
	put32(p + 8, SNAP_STATE_VERSION);
	put32(p + 12, kind);
}

void snap_writer__add(struct snap_writer *w, uint32_t tag, const void *data,
		      size_t len)
{
	uint8_t *p;

	if (!w->err && len > SNAP_STATE_MAX_SECTION)
		w->err = -E2BIG;
	p = reserve(w, SECTION_HEADER_LEN + pad(len));
	if (!p)
		return;
	put32(p, tag);
	put32(p + 4, (uint32_t)len);
	if (len) /* an empty section may come with no buffer */
		memcpy(p + SECTION_HEADER_LEN, data, len);
}

void snap_writer__release(struct snap_writer *w)
{
	free(w->buf);
	memset(w, 0, sizeof(*w));
}

int snap_reader__init(struct snap_reader *r, const void *p, size_t len,
		      enum snap_kind kind)
{
	const uint8_t *b = p;

	if (len < HEADER_LEN || memcmp(b, SNAP_STATE_MAGIC, 8) ||
	    get32(b + 8) != SNAP_STATE_VERSION || get32(b + 12) != kind)
		return -EINVAL;
	r->p = b;
	r->len = len;
	r->at = HEADER_LEN;
	return 0;
}

int snap_reader__next(struct snap_reader *r, uint32_t *tag, const void **data,
		      uint32_t *len)
{
	uint32_t n;

	if (r->at == r->len)
		return 0;
	if (r->len - r->at < SECTION_HEADER_LEN)
		return -EINVAL;
	n = get32(r->p + r->at + 4);
	if (n > SNAP_STATE_MAX_SECTION ||
	    r->len - r->at - SECTION_HEADER_LEN < pad(n))
		return -EINVAL;
	*tag = get32(r->p + r->at);
	*data = r->p + r->at + SECTION_HEADER_LEN;
	*len = n;
	r->at += SECTION_HEADER_LEN + pad(n);
	return 1;
}

int snap_state__find(const void *p, size_t plen, enum snap_kind kind,
		     uint32_t tag, size_t len, const void **data)
{
	const void *d;
	size_t n;
	int ret;

	ret = snap_state__find_var(p, plen, kind, tag, &d, &n);
	if (ret)
		return ret;
	if (n != len)
		return -EINVAL;
	*data = d;
	return 0;
}

int snap_state__find_var(const void *p, size_t plen, enum snap_kind kind,
			 uint32_t tag, const void **data, size_t *len)
{
	struct snap_reader r;
	const void *d;
	uint32_t t, n;
	int ret;

	ret = snap_reader__init(&r, p, plen, kind);
	if (ret)
		return ret;
	while ((ret = snap_reader__next(&r, &t, &d, &n)) == 1) {
		if (t != tag)
			continue;
		*data = d;
		*len = n;
		return 0;
	}
	return ret ? ret : -ENOENT;
}
