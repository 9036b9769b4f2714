/* SPDX-License-Identifier: GPL-2.0 */
#ifndef KILN_AGENT_CONN_H
#define KILN_AGENT_CONN_H

/*
 * One host connection of the agent, seen as frames (protocol.h): receive
 * one frame at a time into a buffer of KILN_FRAME_MAX bytes, send frames,
 * answer ERROR. The socket may be blocking or not; the helpers that are
 * meant to block wait with poll() either way.
 */
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "proto/tlv.h"

struct conn {
	int fd;
	/* The frame being received: header, then payload into in. */
	struct kiln_frame hdr;
	size_t have; /* bytes of header + payload received so far */
	uint8_t *in; /* KILN_FRAME_MAX bytes */
};

/* A received frame; data points into the connection's buffer. */
struct frame {
	uint16_t type;
	uint16_t flags;
	uint32_t len;
	const uint8_t *data;
};

int conn__init(struct conn *c, int fd) __attribute__((warn_unused_result));
/* Frees the buffer; the socket stays open (its owner closes it). */
void conn__destroy(struct conn *c);

/*
 * Receive without waiting: 1 when a whole frame is in (*f is valid until
 * the next call), 0 when more bytes are needed, -ECONNRESET when the host
 * closed (or reset) the connection, -EMSGSIZE when a header announces
 * more than KILN_FRAME_MAX, other -errno from recv().
 */
int conn__recv_some(struct conn *c, struct frame *f);
/* The same, waiting for the whole frame. */
int conn__recv(struct conn *c, struct frame *f);

/* Send a frame, waiting as long as the host's flow control says. */
int conn__send(struct conn *c, uint16_t type, uint16_t flags, const void *p,
	       size_t len);
int conn__send_buf(struct conn *c, uint16_t type, const struct kiln_buf *b);
/* An empty RESULT. */
int conn__ok(struct conn *c);
/*
 * ERROR: T_ERRNO @err (positive), T_ERRNAME, and T_MESSAGE when @fmt is
 * not NULL. Returns the result of the send.
 */
int conn__error(struct conn *c, int err, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

/* Build an ERROR payload into @b, for callers that queue their frames. */
int conn__error_payload(struct kiln_buf *b, int err, const char *msg);

#endif
