// SPDX-License-Identifier: GPL-2.0
/*
 * The egress proxy's UDP flows (proxy-internal.h): each guest datagram
 * from the transparent UDP socket to its flow's upstream socket (host
 * netns), each answer back through the flow's reply socket (VM netns,
 * bound to where the guest sent, made by the netns thread). A flow is
 * decided once, remembered when denied, and forgotten when idle.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "lib/log.h"
#include "net/proxy-internal.h"

/* A held flow's datagrams, dropped (not counted: the flow never sent). */
static void udp_free_held(struct udp_flow *u)
{
	for (unsigned int i = 0; i < u->nr_held; i++)
		free(u->held[i]);
	u->nr_held = 0;
	u->held_bytes = 0;
}

/* A held flow's question is cancelled. */
void proxy_udp__close(struct proxy *p, struct udp_flow *u)
{
	if (u->allowed)
		count_sub(p, &p->stats.udp_open);
	if (u->asking)
		hook__cancel(p->hook, u->hook_id);
	udp_free_held(u);
	net_endpoint__close(&u->up);
	if (u->reply_fd >= 0)
		close(u->reply_fd);
	*u = (struct udp_flow){ .reply_fd = -1, .up.fd = -1 };
}

static bool same_addr(const struct sockaddr_in *a, const struct sockaddr_in *b)
{
	return a->sin_addr.s_addr == b->sin_addr.s_addr &&
	       a->sin_port == b->sin_port;
}

static struct udp_flow *udp_find(struct proxy *p, const struct sockaddr_in *src,
				 const struct sockaddr_in *dst)
{
	for (unsigned int i = 0; i < p->udp_fresh; i++) {
		struct udp_flow *u = &p->udp[i];

		if (u->used && same_addr(&u->src, src) &&
		    same_addr(&u->dst, dst))
			return u;
	}
	return NULL;
}

/* A free entry, or the least recently used one, evicted. */
static struct udp_flow *udp_slot(struct proxy *p)
{
	struct udp_flow *lru = NULL;

	for (unsigned int i = 0; i < p->udp_fresh; i++) {
		struct udp_flow *u = &p->udp[i];

		if (!u->used)
			return u;
		if (!lru || u->last_ms < lru->last_ms)
			lru = u;
	}
	if (p->udp_fresh < p->p.max_udp_flows)
		return proxy__udp_fresh(p);
	proxy_udp__close(p, lru);
	return lru;
}

/* An allowed flow's two sockets: upstream here, the reply one there. */
static int udp_open(struct proxy *p, struct udp_flow *u)
{
	int fd;

	fd = socket(AF_INET, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	u->up.fd = fd;
	if (connect(fd, (const struct sockaddr *)&u->dst, sizeof(u->dst)))
		return -errno;
	fd = proxy_ns__reply_socket(p, &u->dst, &u->src);
	if (fd < 0)
		return fd;
	u->reply_fd = fd;
	return net_endpoints__add(&p->eps, &u->up, EP_UDP_UP, u->up.fd, u,
				  EPOLLIN);
}

/*
 * An allowed flow's sockets (hook_gen: the hook's generation if it
 * granted it, else 0). False when they failed: the entry is gone.
 */
static bool udp_start(struct proxy *p, struct udp_flow *u, uint64_t hook_gen)
{
	int ret;

	u->allowed = true;
	u->hook_gen = hook_gen;
	count_add(p, &p->stats.udp_open, 1);
	ret = udp_open(p, u);
	if (!ret)
		return true;
	pr_debug("%s: udp upstream: %s", PROXY_NAME, strerror(-ret));
	count_add(p, &p->stats.upstream_failed, 1);
	proxy_udp__close(p, u);
	return false;
}

static void udp_send(struct proxy *p, struct udp_flow *u, const void *buf,
		     size_t n)
{
	if (send(u->up.fd, buf, n, MSG_DONTWAIT) == (ssize_t)n)
		count_add(p, &p->stats.bytes_out, n);
	else
		count_add(p, &p->stats.udp_dropped, 1);
}

/* A datagram of a held flow, kept for its grant if there is room. */
static void udp_hold(struct proxy *p, struct udp_flow *u, const void *buf,
		     size_t n)
{
	uint8_t *copy;

	if (u->nr_held == PROXY_UDP_HELD ||
	    u->held_bytes + n > PROXY_UDP_HELD_BYTES ||
	    !(copy = malloc(n ? n : 1))) {
		count_add(p, &p->stats.udp_dropped, 1);
		return;
	}
	memcpy(copy, buf, n);
	u->held[u->nr_held] = copy;
	u->held_len[u->nr_held++] = n;
	u->held_bytes += n;
}

/*
 * A held flow decided, its question answered or cancelled: by the hook
 * (hook_gen, its generation) or by a recheck's rules (0). Granted: its
 * held datagrams go upstream in order. Denied: it stays as a denied
 * entry, like a flow the rules denied.
 */
void proxy_udp__settled(struct proxy *p, struct udp_flow *u,
			const struct net_decision *d, const char *detail,
			uint64_t hook_gen)
{
	struct net_flow f = { .proto = IPPROTO_UDP,
			      .src = u->src,
			      .dst = u->dst };

	u->asking = false;
	proxy__settle(p, &f, d, detail);
	if (d->verdict != NET_VERDICT_ALLOW) {
		udp_free_held(u);
		return;
	}
	if (!udp_start(p, u, hook_gen))
		return;
	for (unsigned int i = 0; i < u->nr_held; i++)
		udp_send(p, u, u->held[i], u->held_len[i]);
	udp_free_held(u);
}

static struct udp_flow *udp_new(struct proxy *p, const struct sockaddr_in *src,
				const struct sockaddr_in *dst)
{
	struct net_flow f = { .proto = IPPROTO_UDP,
			      .src = *src,
			      .dst = *dst,
			      .dst_local = proxy__host_addr(
				      p, dst->sin_addr.s_addr) };
	struct udp_flow *u = udp_slot(p);
	struct net_decision d;

	proxy__decide(p, &f, &d);
	/* A denied flow is remembered too: decided and logged once. */
	*u = (struct udp_flow){ .used = true,
				.src = *src,
				.dst = *dst,
				.up.fd = -1,
				.reply_fd = -1 };
	if (d.verdict == NET_VERDICT_ASK) {
		/* Held (its datagrams kept) or, not asked, denied. */
		u->asking = proxy__hook_ask(p, &f, &d, u, &u->hook_id);
		return u;
	}
	if (d.verdict != NET_VERDICT_ALLOW)
		return u;
	return udp_start(p, u, 0) ? u : NULL;
}

static const struct sockaddr_in *orig_dst(struct msghdr *m)
{
	for (struct cmsghdr *c = CMSG_FIRSTHDR(m); c; c = CMSG_NXTHDR(m, c))
		if (c->cmsg_level == SOL_IP && c->cmsg_type == IP_ORIGDSTADDR &&
		    c->cmsg_len >= CMSG_LEN(sizeof(struct sockaddr_in)))
			return (const struct sockaddr_in *)CMSG_DATA(c);
	return NULL;
}

/* Datagrams from the guest, each to its flow's upstream socket. */
void proxy_udp__from_guest(struct proxy *p, uint64_t now)
{
	char cbuf[CMSG_SPACE(sizeof(struct sockaddr_in))];
	struct sockaddr_in src, dst;
	const struct sockaddr_in *orig;
	struct iovec iov = { .iov_base = p->dgram, .iov_len = PROXY_DGRAM_MAX };
	struct msghdr m;
	struct udp_flow *u;
	ssize_t n;

	for (int i = 0; i < PROXY_DGRAM_BUDGET; i++) {
		m = (struct msghdr){ .msg_name = &src,
				     .msg_namelen = sizeof(src),
				     .msg_iov = &iov,
				     .msg_iovlen = 1,
				     .msg_control = cbuf,
				     .msg_controllen = sizeof(cbuf) };
		n = recvmsg(p->udp_fd, &m, MSG_DONTWAIT);
		if (n < 0) {
			if (errno == EINTR)
				continue;
			return;
		}
		orig = orig_dst(&m);
		if (!orig || m.msg_namelen != sizeof(src))
			continue;
		dst = *orig;
		u = udp_find(p, &src, &dst);
		if (!u)
			u = udp_new(p, &src, &dst);
		if (!u)
			continue;
		u->last_ms = now;
		if (u->asking)
			udp_hold(p, u, p->dgram, n);
		else if (u->allowed)
			udp_send(p, u, p->dgram, n);
	}
}

/* Upstream's answers, back to the guest from where it sent to. */
void proxy_udp__from_upstream(struct proxy *p, struct udp_flow *u, uint64_t now)
{
	ssize_t n;

	for (int i = 0; i < PROXY_DGRAM_BUDGET; i++) {
		n = recv(u->up.fd, p->dgram, PROXY_DGRAM_MAX, MSG_DONTWAIT);
		if (n < 0) {
			/* ECONNREFUSED and the like: an ICMP error, no data. */
			if (errno == EAGAIN)
				return;
			continue;
		}
		u->last_ms = now;
		if (send(u->reply_fd, p->dgram, n, MSG_DONTWAIT) == n)
			count_add(p, &p->stats.bytes_in, n);
		else
			count_add(p, &p->stats.udp_dropped, 1);
	}
}

void proxy_udp__sweep(struct proxy *p, uint64_t now)
{
	for (unsigned int i = 0; i < p->udp_fresh; i++) {
		struct udp_flow *u = &p->udp[i];

		if (u->used && now - u->last_ms >= p->p.udp_idle_ms)
			proxy_udp__close(p, u);
	}
}

/*
 * An allowed UDP flow now denied loses its sockets and stays as a denied
 * entry (its datagrams dropped until it is idle); a denied one is
 * forgotten, to be decided anew on its next datagram.
 */
void proxy_udp__recheck(struct proxy *p, struct udp_flow *u)
{
	struct net_flow f = { .proto = IPPROTO_UDP,
			      .src = u->src,
			      .dst = u->dst };
	struct net_decision d;
	uint64_t last_ms = u->last_ms;
	const char *why;

	if (u->asking) {
		proxy__ask_policy(p, &f, &d);
		if (!proxy__recheck_held(p, u->hook_id, &d))
			proxy_udp__settled(p, u, &d, "", 0);
		return;
	}
	if (!u->allowed) {
		proxy_udp__close(p, u);
		return;
	}
	proxy__ask_policy(p, &f, &d);
	if (d.verdict == NET_VERDICT_ALLOW ||
	    proxy__hook_still_grants(p, u->hook_gen, &d, &why))
		return;
	proxy__log_flow(p, "cut", &f, why, "");
	proxy_udp__close(p, u);
	*u = (struct udp_flow){ .used = true,
				.src = f.src,
				.dst = f.dst,
				.up.fd = -1,
				.reply_fd = -1,
				.last_ms = last_ms };
	count_add(p, &p->stats.udp_cut, 1);
}
