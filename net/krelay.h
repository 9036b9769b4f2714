/* SPDX-License-Identifier: GPL-2.0 */
#ifndef KILN_NET_KRELAY_H
#define KILN_NET_KRELAY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ebpf/relay.h"
#include "lib/compiler.h"

/*
 * One TCP flow relayed by the kernel (ebpf/relay.h; Documentation/
 * network.md, "The kernel relay"): the bytes go from one socket to the
 * other without the owner reading them; what the owner still does is
 * below. The kernel sends no FIN on: the owner watches each socket for
 * its peer's FIN (krelay__interest()), and once every byte before it has
 * gone out on the other side, shuts that side's writing. A reset on
 * either side is the owner's to pass on (close both with SO_LINGER 0).
 *
 *	ret = krelay__start(&k, a, b, ways);    nothing read from either yet
 *	ret = relay_prog__pair(prog, a, b, ways, err, sizeof(err));
 *	epoll a with krelay__interest(&k, KRELAY_A), b likewise;
 *	ret = krelay__event(&k, s, events);     on each event of side s
 *	if (krelay__pending(&k)) ret = krelay__retry(&k);  soon after
 *	krelay__bytes(&k, bytes);               any time
 *	krelay__stop(&k, prog);                 then close a and b
 *
 * ret: 0, KRELAY_DONE (every way the kernel relays shut: with both,
 * close both), or -errno (a reset, or a socket call failed: reset both).
 * A way the kernel does not relay (ways short of RELAY_BOTH) is the
 * owner's alone: krelay neither watches its reading side nor counts it.
 */

enum { KRELAY_A, KRELAY_B, KRELAY_SIDES };

#define KRELAY_DONE 1

/* One direction: read from one side by the kernel, written to the other. */
struct krelay_dir {
	uint64_t recv_base; /* the reading side's bytes received at start */
	uint64_t sent_base; /* the writing side's bytes queued at start */
	bool eof;	    /* the reading side's peer sent its FIN */
	bool shut;	    /* and the writing side sent it on (SHUT_WR) */
	bool kernel;	    /* relayed by the kernel, else the owner's */
};

struct krelay_flow {
	int fd[KRELAY_SIDES];		     /* borrowed */
	struct krelay_dir dir[KRELAY_SIDES]; /* dir[s]: read from fd[s] */
};

/*
 * a and b (connected TCP sockets, nothing read from either yet) as they
 * are before the pairing, which is the caller's next step (on whichever
 * thread may use bpf()). 0 or -errno.
 */
int __must_check krelay__start(struct krelay_flow *k, int a, int b,
			       enum relay_ways ways);
/* Both out of the map; the sockets stay open (the caller's). */
void krelay__stop(struct krelay_flow *k, struct relay_prog *prog);

/*
 * What to wait for on side s (epoll's events): its peer's FIN until it
 * came, then only a reset (edge-triggered); nothing for a side the
 * kernel does not read.
 */
uint32_t krelay__interest(const struct krelay_flow *k, int s);

/* Side s had events (epoll's): a FIN noted and, when it can, sent on. */
int __must_check krelay__event(struct krelay_flow *k, int s, uint32_t events);

/*
 * A FIN came and bytes before it are still on their way out of the
 * other side: krelay__retry() in a moment (the kernel says nothing when
 * they are out).
 */
bool krelay__pending(const struct krelay_flow *k);
int __must_check krelay__retry(struct krelay_flow *k);

/*
 * The bytes each side has received since start (its peer's FIN not
 * counted): bytes[KRELAY_A] went out on b, and back; 0 for a side the
 * kernel does not read. 0 or -errno.
 */
int __must_check krelay__bytes(const struct krelay_flow *k,
			       uint64_t bytes[KRELAY_SIDES]);

#endif
