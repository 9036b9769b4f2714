/* SPDX-License-Identifier: GPL-2.0 */
#ifndef KILN_INIT_NET_H
#define KILN_INIT_NET_H

#include <netinet/in.h>
#include <stddef.h>
#include <stdint.h>

/*
 * The guest's network (Documentation/network.md): lo always, and with
 * kiln.net=ADDRESS/PREFIX,GATEWAY,MTU,DNS from the host (net/netcfg.c)
 * the virtio-net interface eth0 and the resolver.
 */
#define INIT_NET_IFNAME	     "eth0"
#define INIT_NET_RESOLV_CONF "/etc/resolv.conf"
/* The file a read-only or persistent root's resolv.conf is bound to. */
#define INIT_NET_RESOLV_RUN   "/run/kiln/resolv.conf"
#define INIT_NET_HOSTNAME     "/etc/hostname"
#define INIT_NET_HOSTNAME_RUN "/run/kiln/hostname"
#define INIT_NET_HOSTS	      "/etc/hosts"
#define INIT_NET_HOSTS_RUN    "/run/kiln/hosts"
/* A hostname at most, bytes (HOST_NAME_MAX). */
#define INIT_NET_HOSTNAME_MAX 64

struct init_net {
	struct in_addr address, gateway, dns;
	unsigned int prefix; /* bits, 1..30 */
	unsigned int mtu;    /* bytes, 68..65535 */
};

/* kiln.net's value (len bytes, not terminated): 0, or -EINVAL. */
int init_net__parse(const char *val, size_t len, struct init_net *n);
/* lo up (the kernel gives it 127.0.0.1/8); a failure is only reported. */
void init_net__lo_up(void);
/*
 * eth0: waits for it to appear, then MTU, address, link up and the
 * default route via the gateway. 0, or -errno, reported on stderr.
 */
int init_net__configure(const struct init_net *n);
#define INIT_NET_MAC_LEN 6 /* ETH_ALEN */
/*
 * A VM restored from a snapshot takes its own network (the agent's
 * RESEED, proto/agent.h): eth0 down, so the kernel forgets the
 * neighbours and routes of the snapshot's host side; the new MAC; then
 * as init_net__configure (without its wait: eth0 is there). 0, or
 * -errno with the step that failed in *what; nothing is printed.
 */
int init_net__renew(const uint8_t mac[INIT_NET_MAC_LEN],
		    const struct init_net *n, const char **what);
/*
 * "nameserver DNS" as /etc/resolv.conf of the root in use: a file bound
 * over the root's own when it has one (so a read-only root works and a
 * persistent one is not changed), else a new file. 0, or -errno,
 * reported on stderr.
 */
int init_net__resolv_conf(const struct init_net *n);
/*
 * The VM's hostname in the root's files as Debian keeps it:
 * /etc/hostname holds it, and /etc/hosts maps 127.0.1.1 to it (the
 * root's own file with its 127.0.1.1 lines replaced), so that
 * `hostname -f` and sudo find it. Each as resolv.conf is: bound over
 * the root's own from /run/kiln (read-only and persistent roots keep
 * theirs), else a new file; a read-only root without them is left
 * without them, quietly (nothing there names the host). 0, or the first
 * -errno, reported.
 */
int init_net__hostname_files(const char *hostname);

#endif
