/* SPDX-License-Identifier: GPL-2.0 */
/*
 * A hostile guest agent's side of the agent protocol (proto/agent.h),
 * shared by the API's unit test (selftests/unit/api_hostile.c, a fake
 * agent on a Unix socket) and the guest program of the booted test
 * (selftests/helpers/hostile-agent.c, on vsock). Frames are made with
 * the agent's own encoder (proto/tlv.c). Every function ends the process
 * (_exit(0)) when the host hangs up, and _exit(1) when out of memory.
 */
#ifndef KILN_SELFTESTS_HOSTILE_AGENT_H
#define KILN_SELFTESTS_HOSTILE_AGENT_H

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "proto/agent.h"
#include "proto/tlv.h"

/* Issue 15's item 1: 400 frames of 250 KiB, 100 MB from the guest. */
#define HOSTILE_FRAMES 400
#define HOSTILE_NAME   (250U << 10)

static inline void hostile_agent__send_frame(int fd, uint16_t type,
					     const struct kiln_buf *b)
{
	struct kiln_frame f;

	kiln_frame__pack(&f, type, 0, b ? b->len : 0);
	if (send(fd, &f, sizeof(f), MSG_NOSIGNAL) != sizeof(f) ||
	    (b && b->len &&
	     send(fd, b->data, b->len, MSG_NOSIGNAL) != (ssize_t)b->len))
		_exit(0); /* the host hung up: its business */
}

static inline void hostile_agent__send_hello(int fd)
{
	struct kiln_buf b;

	kiln_buf__init(&b);
	if (kiln_tlv__put_u64(&b, KILN_T_VERSION, KILN_AGENT_VERSION))
		_exit(1);
	hostile_agent__send_frame(fd, KILN_MSG_HELLO, &b);
	kiln_buf__free(&b);
}

/* The request's type, its payload read and dropped. */
static inline uint16_t hostile_agent__recv_request(int fd)
{
	struct kiln_frame f;
	uint16_t type, flags;
	uint32_t len;
	char buf[4096];
	ssize_t n;

	if (recv(fd, &f, sizeof(f), MSG_WAITALL) != sizeof(f) ||
	    kiln_frame__unpack(&f, &type, &flags, &len))
		_exit(0);
	while (len) {
		n = recv(fd, buf, len < sizeof(buf) ? len : sizeof(buf), 0);
		if (n <= 0)
			_exit(0);
		len -= (uint32_t)n;
	}
	return type;
}

/*
 * A RESULT with one T_ENTRY (or, answering FACTS, one T_FACT) holding
 * HOSTILE_NAME bytes 0xff (not UTF-8: stored lossy and as base64), with
 * T_MORE when more follows.
 */
static inline void hostile_agent__send_huge(int fd, uint16_t request, bool more)
{
	bool facts = request == KILN_MSG_FACTS;
	uint8_t *name = malloc(HOSTILE_NAME);
	struct kiln_buf b;
	size_t mark;

	if (!name)
		_exit(1);
	memset(name, 0xff, HOSTILE_NAME);
	kiln_buf__init(&b);
	if (kiln_tlv__begin(&b, facts ? KILN_T_FACT : KILN_T_ENTRY, &mark) ||
	    kiln_tlv__put_bytes(&b, facts ? KILN_T_VALUE : KILN_T_NAME, name,
				HOSTILE_NAME))
		_exit(1);
	kiln_tlv__end(&b, mark);
	if (more && kiln_tlv__put_u64(&b, KILN_T_MORE, 1))
		_exit(1);
	hostile_agent__send_frame(fd, KILN_MSG_RESULT, &b);
	kiln_buf__free(&b);
	free(name);
}

#endif
