/* SPDX-License-Identifier: GPL-2.0 */
#ifndef KILN_EBPF_RELAY_H
#define KILN_EBPF_RELAY_H

#include <stddef.h>

#include "lib/compiler.h"

/*
 * The kernel relay's program (relay.bpf.c) and its maps, loaded from its
 * skeleton: two connected TCP sockets paired in it have one's received
 * bytes sent on by the kernel on the other, one way or both, without
 * waking anyone (Documentation/network.md, "The kernel relay").
 *
 *	struct relay_prog *r;
 *	ret = relay_prog__create(&r, max_pairs, err, sizeof(err));
 *	ret = relay_prog__pair(r, a, b, RELAY_BOTH, err, sizeof(err));
 *	...  FINs, resets and counters are the caller's (net/krelay.h)
 *	relay_prog__unpair(r, a, b);   or close both: the maps let go
 *	relay_prog__destroy(r);        nothing is relayed from then on
 *
 * Loading needs CAP_BPF and CAP_NET_ADMIN (root on a Debian 12 host);
 * pairing and unpairing only the map, whose bpf() calls need no
 * capability.
 */

struct relay_prog;

/* Which ways of a pair the kernel relays; the others are the owner's. */
enum relay_ways {
	RELAY_A_TO_B = 1U << 0, /* a's received bytes out on b */
	RELAY_B_TO_A = 1U << 1,
	RELAY_BOTH = RELAY_A_TO_B | RELAY_B_TO_A,
};

/*
 * Opens the skeleton with room for max_pairs pairs, loads it and
 * attaches the verdict program to the map. 0, or -errno with "what:
 * why" in err (-EPERM without the capabilities, -EINVAL on a kernel
 * without sockmap stream verdicts).
 */
int __must_check relay_prog__create(struct relay_prog **out,
				    unsigned int max_pairs, char *err,
				    size_t errlen);

/*
 * a and b (established TCP sockets, any netns) relayed the ways asked
 * from now on, each way including what its reading socket has received
 * and nobody read yet. Their owner must not read a socket the kernel
 * reads, nor write one the kernel writes; a socket only written by the
 * kernel (b of RELAY_A_TO_B) is the owner's to read, and the kernel
 * never reads it. Every way's writing socket goes in before any reading
 * one, whose bytes are held back until then: with RELAY_BOTH, b should
 * be the one whose receive window is open (the new upstream
 * connection), as the kernel hands bytes on regardless when a window is
 * about to close. 0, or -errno with why (-E2BIG: a map is full; -EINVAL:
 * no way asked); on failure neither is in the maps.
 */
int __must_check relay_prog__pair(struct relay_prog *r, int a, int b,
				  enum relay_ways ways, char *err,
				  size_t errlen);

/*
 * a and b out of the maps (nothing more relayed between them); fine for
 * sockets they do not hold.
 */
void relay_prog__unpair(struct relay_prog *r, int a, int b);

/*
 * For the tests: the sockets the kernel reads now (one per way
 * relayed), and the ways it relays (the same, unless a socket closed).
 */
unsigned int relay_prog__nr_socks(const struct relay_prog *r);
unsigned int relay_prog__nr_ways(const struct relay_prog *r);

/* Frees the program and its map. NULL and a half-built object are fine. */
void relay_prog__destroy(struct relay_prog *r);

#endif
