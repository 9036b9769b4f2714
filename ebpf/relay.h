/* SPDX-License-Identifier: GPL-2.0 */
#ifndef KILN_EBPF_RELAY_H
#define KILN_EBPF_RELAY_H

#include <stddef.h>

#include "lib/compiler.h"

/*
 * The kernel relay's program (relay.bpf.c) and its map, loaded from its
 * skeleton: two connected TCP sockets paired in it have each one's
 * received bytes sent on by the kernel on the other, without waking
 * anyone (Documentation/network.md, "The kernel relay").
 *
 *	struct relay_prog *r;
 *	ret = relay_prog__create(&r, max_pairs, err, sizeof(err));
 *	ret = relay_prog__pair(r, a, b, err, sizeof(err));
 *	...  FINs, resets and counters are the caller's (net/krelay.h)
 *	relay_prog__unpair(r, a, b);   or close both: the map lets go
 *	relay_prog__destroy(r);        nothing is relayed from then on
 *
 * Loading needs CAP_BPF and CAP_NET_ADMIN (root on a Debian 12 host);
 * pairing and unpairing only the map, whose bpf() calls need no
 * capability.
 */

struct relay_prog;

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
 * a and b (established TCP sockets, any netns) relayed to each other
 * from now on, including what each has received and nobody read yet.
 * Their owner must read neither from then on. b goes in first, its
 * bytes held back until a is in too: it should be the one whose
 * receive window is open (the new upstream connection), as the kernel
 * hands bytes on regardless when a window is about to close. 0, or -errno with why
 * (-E2BIG: the map is full); on failure neither is in the map.
 */
int __must_check relay_prog__pair(struct relay_prog *r, int a, int b, char *err,
				  size_t errlen);

/*
 * a and b out of the map (nothing more relayed between them); fine for
 * sockets it does not hold.
 */
void relay_prog__unpair(struct relay_prog *r, int a, int b);

/* The sockets the map holds now, two per pair (for the tests). */
unsigned int relay_prog__nr_socks(const struct relay_prog *r);

/* Frees the program and its map. NULL and a half-built object are fine. */
void relay_prog__destroy(struct relay_prog *r);

#endif
