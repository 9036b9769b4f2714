/* SPDX-License-Identifier: GPL-2.0 */
#ifndef KILN_SELFTESTS_VMNET_H
#define KILN_SELFTESTS_VMNET_H

/*
 * A VM's network without a VM, for the tests of what the vmm runs on it
 * (selftests/unit/proxy.c, dns.c). Root only. Three network namespaces
 * of the test's own, each with lo up:
 * - the "host" one, the test process's: where the vmm's threads run and
 *   open upstream sockets; test servers listen on addresses added to
 *   its lo (VMNET_IP("addr", "add", ...) once set up);
 * - the "VM netns", as net/netns.c makes it: a veth end standing in for
 *   the tap (same ingress), the gateway's address, the table 100 local
 *   route and its rule;
 * - the "guest netns", the veth's other end with the guest's address and
 *   a default route via the gateway: the test's guest sockets.
 * The calling thread is back in the host one after each helper.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sched.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "selftests/kselftest.h"
#include "selftests/spawn.h"

#define VMNET_GATEWAY	 "10.0.2.2"
#define VMNET_GUEST	 "10.0.2.15"
#define VMNET_PREFIX_LEN 24
#define VMNET_VETH_VM	 "kiln-vm0"
#define VMNET_VETH_GUEST "kiln-guest0"
#define VMNET_CMD_MAX	 256

struct vmnet {
	int host_ns, vm_ns, guest_ns; /* -1: not made */
};

static inline struct sockaddr_in vmnet__sin(const char *addr, int port)
{
	return (struct sockaddr_in){ .sin_family = AF_INET,
				     .sin_port = htons(port),
				     .sin_addr.s_addr = inet_addr(addr) };
}

/* Keeps router solicitations and the like off the veth. */
static inline void vmnet__quiet_ipv6(void)
{
	int fd = open("/proc/sys/net/ipv6/conf/default/disable_ipv6",
		      O_WRONLY | O_CLOEXEC);

	if (fd < 0)
		return;
	if (write(fd, "1", 1) != 1) {
		/* Only noise avoided: nothing to do. */
	}
	close(fd);
}

static inline void vmnet__ip(struct __test_metadata *_metadata,
			     const char *const argv[])
{
	static struct spawn_result r;
	char cmd[VMNET_CMD_MAX] = "";

	for (int i = 0; argv[i]; i++) {
		strncat(cmd, argv[i], sizeof(cmd) - strlen(cmd) - 2);
		strcat(cmd, " ");
	}
	ASSERT_EQ(0, spawn__run(argv, NULL, &r)) TH_LOG("%s", cmd);
	ASSERT_EQ(0, r.status) TH_LOG("%s: %s", cmd, r.err);
}

/* `ip ARGS...` in the calling thread's netns; the test fails if it does. */
#define VMNET_IP(...) \
	vmnet__ip(_metadata, (const char *const[]){ "ip", __VA_ARGS__, NULL })

static inline void vmnet__enter(struct __test_metadata *_metadata, int ns)
{
	ASSERT_EQ(0, setns(ns, CLONE_NEWNET))
	TH_LOG("setns: %s", strerror(errno));
}

/* A new netns for this thread, lo up; fd kept (inheritable: for `ip`). */
static inline int vmnet__new_netns(struct __test_metadata *_metadata)
{
	int fd;

	ASSERT_EQ(0, unshare(CLONE_NEWNET))
	TH_LOG("unshare: %s", strerror(errno));
	vmnet__quiet_ipv6();
	fd = open("/proc/thread-self/ns/net", O_RDONLY);
	ASSERT_LE(0, fd);
	VMNET_IP("link", "set", "lo", "up");
	return fd;
}

static inline void vmnet__init(struct vmnet *n)
{
	n->host_ns = n->vm_ns = n->guest_ns = -1;
}

/* The three namespaces, the veth between two of them, their routing. */
static inline void vmnet__setup(struct __test_metadata *_metadata,
				struct vmnet *n)
{
	char guest_path[64];

	n->host_ns = vmnet__new_netns(_metadata);
	n->vm_ns = vmnet__new_netns(_metadata);
	n->guest_ns = vmnet__new_netns(_metadata);
	snprintf(guest_path, sizeof(guest_path), "/proc/self/fd/%d",
		 n->guest_ns);

	vmnet__enter(_metadata, n->vm_ns);
	VMNET_IP("link", "add", VMNET_VETH_VM, "type", "veth", "peer", "name",
		 VMNET_VETH_GUEST, "netns", guest_path);
	VMNET_IP("addr", "add", VMNET_GATEWAY "/24", "dev", VMNET_VETH_VM);
	VMNET_IP("link", "set", VMNET_VETH_VM, "up");
	VMNET_IP("route", "add", "local", "0.0.0.0/0", "dev", "lo", "table",
		 "100");
	VMNET_IP("rule", "add", "pref", "100", "iif", VMNET_VETH_VM, "lookup",
		 "100");
	vmnet__enter(_metadata, n->guest_ns);
	VMNET_IP("addr", "add", VMNET_GUEST "/24", "dev", VMNET_VETH_GUEST);
	VMNET_IP("link", "set", VMNET_VETH_GUEST, "up");
	VMNET_IP("route", "add", "default", "via", VMNET_GATEWAY);
	vmnet__enter(_metadata, n->host_ns);
}

static inline void vmnet__close(struct vmnet *n)
{
	int fds[] = { n->host_ns, n->vm_ns, n->guest_ns };

	for (unsigned int i = 0; i < sizeof(fds) / sizeof(fds[0]); i++)
		if (fds[i] >= 0)
			close(fds[i]);
	vmnet__init(n);
}

/* A nonblocking socket of the guest netns. */
static inline int vmnet__guest_socket(struct __test_metadata *_metadata,
				      struct vmnet *n, int type)
{
	int fd;

	vmnet__enter(_metadata, n->guest_ns);
	fd = socket(AF_INET, type | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	vmnet__enter(_metadata, n->host_ns);
	ASSERT_LE(0, fd) TH_LOG("socket: %s", strerror(errno));
	return fd;
}

/* A nonblocking server socket of the calling thread's netns. */
static inline int vmnet__server(struct __test_metadata *_metadata, int type,
				const char *addr, int port)
{
	struct sockaddr_in a = vmnet__sin(addr, port);
	int fd = socket(AF_INET, type | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);

	ASSERT_LE(0, fd);
	ASSERT_EQ(0, bind(fd, (struct sockaddr *)&a, sizeof(a)))
	TH_LOG("bind %s:%d: %s", addr, port, strerror(errno));
	if (type == SOCK_STREAM)
		ASSERT_EQ(0, listen(fd, SOMAXCONN));
	return fd;
}

static inline bool vmnet__wait_for(int fd, short events, int ms)
{
	struct pollfd p = { .fd = fd, .events = events };

	return poll(&p, 1, ms) == 1 && (p.revents & events);
}

#endif
