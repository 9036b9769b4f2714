// SPDX-License-Identifier: GPL-2.0
/* The kernel relay's loader (see relay.h). */
#include <errno.h>
#include <limits.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include <bpf/bpf.h>
#include <bpf/libbpf.h>

#include "ebpf/relay.h"
#include "ebpf/relay.skel.h"
#include "lib/errf.h"

/* Two sockets per pair, each its own key. */
#define SOCKS_PER_PAIR 2

struct relay_prog {
	struct relay_bpf *skel;
	int in_fd, out_fd; /* relay_in's and relay_out's (relay.bpf.c) */
};

int relay_prog__create(struct relay_prog **out, unsigned int max_pairs,
		       char *err, size_t errlen)
{
	struct relay_prog *r;
	int ret;

	*out = NULL;
	if (!max_pairs || max_pairs > UINT_MAX / SOCKS_PER_PAIR)
		return errf(err, errlen, -EINVAL, "relay: %u pairs", max_pairs);
	r = calloc(1, sizeof(*r));
	if (!r)
		return errf(err, errlen, -ENOMEM, "relay: out of memory");
	r->in_fd = r->out_fd = -1;
	r->skel = relay_bpf__open();
	if (!r->skel) {
		ret = errf(err, errlen, -errno, "relay: open: %s",
			   strerror(errno));
		goto out_destroy;
	}
	ret = bpf_map__set_max_entries(r->skel->maps.relay_in,
				       max_pairs * SOCKS_PER_PAIR);
	if (!ret)
		ret = bpf_map__set_max_entries(r->skel->maps.relay_out,
					       max_pairs * SOCKS_PER_PAIR);
	if (!ret)
		ret = relay_bpf__load(r->skel);
	if (ret) {
		ret = errf(err, errlen, ret,
			   "relay: load: %s (libbpf's log with --verbose)",
			   strerror(-ret));
		goto out_destroy;
	}
	r->in_fd = bpf_map__fd(r->skel->maps.relay_in);
	r->out_fd = bpf_map__fd(r->skel->maps.relay_out);
	ret = bpf_prog_attach(bpf_program__fd(r->skel->progs.relay_verdict),
			      r->in_fd, BPF_SK_SKB_STREAM_VERDICT, 0);
	if (ret) {
		ret = errf(err, errlen, -errno, "relay: attach: %s",
			   strerror(errno));
		goto out_destroy;
	}
	*out = r;
	return 0;

out_destroy:
	relay_prog__destroy(r);
	return ret;
}

static int cookie_of(int fd, uint64_t *cookie)
{
	socklen_t len = sizeof(*cookie);

	return getsockopt(fd, SOL_SOCKET, SO_COOKIE, cookie, &len) ? -errno : 0;
}

static int rcvlowat(int fd, int bytes)
{
	return setsockopt(fd, SOL_SOCKET, SO_RCVLOWAT, &bytes, sizeof(bytes)) ?
		       -errno :
		       0;
}

static bool way_of(enum relay_ways ways, int s)
{
	return ways & (s ? RELAY_B_TO_A : RELAY_A_TO_B);
}

static int map_add(int map_fd, uint64_t key, int fd)
{
	uint64_t value = (uint64_t)fd;

	return bpf_map_update_elem(map_fd, &key, &value, BPF_NOEXIST) ? -errno :
									0;
}

/*
 * A socket in relay_in has its received bytes handed to the program
 * when its data-ready callback runs; until its way's writing socket is
 * in relay_out the program would drop them. So, while they go in,
 * the reading sockets do not call it: TCP calls it only once a receive
 * low-water mark is reached, and set at its highest that takes a full
 * window. Set back to 1, the kernel calls it for what is there, now
 * with every socket in.
 */
int relay_prog__pair(struct relay_prog *r, int a, int b, enum relay_ways ways,
		     char *err, size_t errlen)
{
	int fd[SOCKS_PER_PAIR] = { a, b };
	uint64_t cookie[SOCKS_PER_PAIR];
	int ret = 0, i;

	if (!(ways & RELAY_BOTH) || (ways & ~RELAY_BOTH))
		return errf(err, errlen, -EINVAL, "relay: ways %#x",
			    (unsigned int)ways);
	for (i = 0; !ret && i < SOCKS_PER_PAIR; i++)
		ret = cookie_of(fd[i], &cookie[i]);
	for (i = 0; !ret && i < SOCKS_PER_PAIR; i++)
		if (way_of(ways, i))
			ret = rcvlowat(fd[i], INT_MAX);
	if (ret)
		return errf(err, errlen, ret, "relay: socket: %s",
			    strerror(-ret));
	for (i = 0; !ret && i < SOCKS_PER_PAIR; i++)
		if (way_of(ways, i))
			ret = map_add(r->out_fd, cookie[i], fd[!i]);
	for (i = 0; !ret && i < SOCKS_PER_PAIR; i++)
		if (way_of(ways, i))
			ret = map_add(r->in_fd, cookie[i], fd[i]);
	if (ret) {
		relay_prog__unpair(r, a, b);
		errf(err, errlen, ret, "relay: map: %s", strerror(-ret));
	}
	for (i = 0; i < SOCKS_PER_PAIR; i++) {
		int r2 = way_of(ways, i) ? rcvlowat(fd[i], 1) : 0;

		if (r2 && !ret)
			ret = errf(err, errlen, r2, "relay: socket: %s",
				   strerror(-r2));
	}
	return ret;
}

/* relay_in first: nothing read is then handed to a missing peer. */
void relay_prog__unpair(struct relay_prog *r, int a, int b)
{
	int fd[SOCKS_PER_PAIR] = { a, b };
	uint64_t cookie;

	for (int i = 0; i < SOCKS_PER_PAIR; i++)
		if (fd[i] >= 0 && !cookie_of(fd[i], &cookie))
			bpf_map_delete_elem(r->in_fd, &cookie);
	for (int i = 0; i < SOCKS_PER_PAIR; i++)
		if (fd[i] >= 0 && !cookie_of(fd[i], &cookie))
			bpf_map_delete_elem(r->out_fd, &cookie);
}

static unsigned int nr_keys(int map_fd)
{
	uint64_t key, next;
	unsigned int n = 0;
	void *prev = NULL;

	while (!bpf_map_get_next_key(map_fd, prev, &next)) {
		n++;
		key = next;
		prev = &key;
	}
	return n;
}

unsigned int relay_prog__nr_socks(const struct relay_prog *r)
{
	return nr_keys(r->in_fd);
}

unsigned int relay_prog__nr_ways(const struct relay_prog *r)
{
	return nr_keys(r->out_fd);
}

/*
 * No detach: the map holds the program, and both go with their last
 * descriptor. Called on the vmm's main thread at exit, whose seccomp
 * filter has no bpf().
 */
void relay_prog__destroy(struct relay_prog *r)
{
	if (!r)
		return;
	relay_bpf__destroy(r->skel);
	free(r);
}
