/* SPDX-License-Identifier: GPL-2.0 */
#ifndef KILN_AGENT_TLV_H
#define KILN_AGENT_TLV_H

/*
 * Building and walking the TLV payloads of proto/agent.h. Plain
 * C with no dependencies: linked into the static guest init and into the
 * vmm. Every value read from the wire is bounds-checked here; a payload
 * that does not parse is -EPROTO, never a read past its end.
 */

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "proto/agent.h"

/* A payload being built: at most KILN_FRAME_MAX bytes. */
struct kiln_buf {
	uint8_t *data;
	size_t len;
	size_t cap;
};

void kiln_buf__init(struct kiln_buf *b);
void kiln_buf__free(struct kiln_buf *b);
void kiln_buf__reset(struct kiln_buf *b); /* len = 0, keeps the memory */

/* Append a field; -E2BIG past KILN_FRAME_MAX, -ENOMEM. */
int kiln_tlv__put_u64(struct kiln_buf *b, uint16_t tag, uint64_t v);
int kiln_tlv__put_bytes(struct kiln_buf *b, uint16_t tag, const void *p,
			size_t len);
int kiln_tlv__put_str(struct kiln_buf *b, uint16_t tag, const char *s);
/* Nested lists (T_ENTRY, T_FACT): begin, put fields, end. */
int kiln_tlv__begin(struct kiln_buf *b, uint16_t tag, size_t *mark);
void kiln_tlv__end(struct kiln_buf *b, size_t mark);

struct kiln_tlv_iter {
	const uint8_t *p;
	size_t left;
};

void kiln_tlv__iter(struct kiln_tlv_iter *it, const void *payload, size_t len);
/*
 * The next field: 1 with *tag, *val and *len set, 0 at the end, -EPROTO
 * when the rest is not a whole field.
 */
int kiln_tlv__next(struct kiln_tlv_iter *it, uint16_t *tag, const uint8_t **val,
		   uint32_t *len);
/* A u64 value (exactly 8 bytes): 0, or -EPROTO. */
int kiln_tlv__u64(const uint8_t *val, uint32_t len, uint64_t *out);

/* Frame header, little-endian on the wire. */
void kiln_frame__pack(struct kiln_frame *f, uint16_t type, uint16_t flags,
		      uint32_t len);
/* -EPROTO when len is over KILN_FRAME_MAX. */
int kiln_frame__unpack(const struct kiln_frame *wire, uint16_t *type,
		       uint16_t *flags, uint32_t *len);

/* Errno values <-> their names ("ENOENT"), for ERROR messages. */
const char *kiln_errno__name(int err); /* "EIO" for unknown values */
int kiln_errno__value(const char *name, size_t len); /* EIO if unknown */

#endif
