/* SPDX-License-Identifier: GPL-2.0 */
#ifndef KILN_SELFTESTS_PROXYFIX_H
#define KILN_SELFTESTS_PROXYFIX_H

/*
 * What the egress proxy's tests share (selftests/unit/proxy.c,
 * intercept.c), over the namespaces of selftests/vmnet.h: a real policy
 * decided with the VM's bindings under a lock (as vmm/vm.c does), the
 * wait on the proxy's counters, the guest's and upstream's ends of a
 * TCP flow.
 */
#include <errno.h>
#include <jansson.h>
#include <poll.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/socket.h>
#include <unistd.h>

#include "net/policy.h"
#include "net/proxy.h"
#include "selftests/kselftest.h"
#include "selftests/vmnet.h"
#include "vmm/seccomp.h"

#define PROXYFIX_TIMEOUT_MS 10000 /* what should happen does, well within */
#define PROXYFIX_POLL_US    10000
#define PROXYFIX_NOT_ROOT                                                 \
	"not root: BPF, network namespaces and transparent sockets need " \
	"CAP_BPF, CAP_NET_ADMIN and CAP_SYS_ADMIN"

struct proxyfix_policy {
	pthread_mutex_t lock;
	struct net_policy *policy; /* NULL: none set */
	struct net_bindings *bindings;
};

static inline void proxyfix__policy_init(struct proxyfix_policy *tp)
{
	pthread_mutex_init(&tp->lock, NULL);
}

static inline void proxyfix__policy_free(struct proxyfix_policy *tp)
{
	net_policy__free(tp->policy);
	net_bindings__destroy(tp->bindings);
	pthread_mutex_destroy(&tp->lock);
}

/* The policy from doc (JSON), swapped in under the lock. */
static inline void proxyfix__policy_set(struct __test_metadata *_metadata,
					struct proxyfix_policy *tp,
					const char *doc)
{
	struct net_policy *np, *old;
	char err[256] = "";
	json_t *o;

	o = json_loads(doc, 0, NULL);
	ASSERT_NE(NULL, o) TH_LOG("%s", doc);
	ASSERT_EQ(0, net_policy__parse(o, "policy", &np, err, sizeof(err)))
	TH_LOG("%s", err);
	json_decref(o);
	pthread_mutex_lock(&tp->lock);
	old = tp->policy;
	tp->policy = np;
	pthread_mutex_unlock(&tp->lock);
	net_policy__free(old);
}

/* The flow decided by the policy, under the lock; false: none is set. */
static inline bool proxyfix__decide(struct proxyfix_policy *tp,
				    const struct net_flow *f,
				    struct net_decision *d)
{
	bool set;

	pthread_mutex_lock(&tp->lock);
	set = tp->policy;
	if (set)
		net_policy__decide(tp->policy, f, tp->bindings, d);
	pthread_mutex_unlock(&tp->lock);
	return set;
}

typedef bool (*proxyfix_pred)(const struct proxy_stats *s, uint64_t n);

static inline bool proxyfix__tcp_denied_at_least(const struct proxy_stats *s,
						 uint64_t n)
{
	return s->tcp_denied >= n;
}

static inline bool proxyfix__tcp_open_is(const struct proxy_stats *s,
					 uint64_t n)
{
	return s->tcp_open == n;
}

/* Waits for the proxy's counters to say so; false on the timeout. */
static inline bool proxyfix__wait_stats(struct proxy *p, proxyfix_pred pred,
					uint64_t n, struct proxy_stats *s)
{
	for (int waited = 0; waited < PROXYFIX_TIMEOUT_MS * 1000;
	     waited += PROXYFIX_POLL_US) {
		proxy__stats(p, s);
		if (pred(s, n))
			return true;
		usleep(PROXYFIX_POLL_US);
	}
	return false;
}

/* A guest connection to addr:port, begun (the SYN sent). */
static inline int proxyfix__guest_connect(struct __test_metadata *_metadata,
					  struct vmnet *n, const char *addr,
					  int port)
{
	struct sockaddr_in a = vmnet__sin(addr, port);
	int fd = vmnet__guest_socket(_metadata, n, SOCK_STREAM);

	ASSERT_EQ(-1, connect(fd, (struct sockaddr *)&a, sizeof(a)));
	ASSERT_EQ(EINPROGRESS, errno);
	return fd;
}

/*
 * The proxy's thread started under the vmm's own egress filter, its
 * netns thread under the netns one, as vm_net__start does (the test
 * links vmm/seccomp.o).
 */
static inline int proxyfix__start_filtered(struct proxy *p)
{
	const struct seccomp_needs needs = { .net = true };
	struct seccomp_filters *f = NULL;
	int ret = seccomp__build(&f, &needs);

	if (!ret)
		ret = proxy__filter_ns_thread(
			p, seccomp__filter(f, SECCOMP_THREAD_NETNS));
	if (!ret)
		ret = proxy__start(p,
				   seccomp__filter(f, SECCOMP_THREAD_EGRESS));
	seccomp__destroy(f);
	return ret;
}

/* Upstream's connection from the proxy on the listener lsn, accepted. */
static inline int proxyfix__up_accept(struct __test_metadata *_metadata,
				      int lsn)
{
	int fd;

	ASSERT_TRUE(vmnet__wait_for(lsn, POLLIN, PROXYFIX_TIMEOUT_MS))
	TH_LOG("upstream got no connection");
	fd = accept4(lsn, NULL, NULL, SOCK_CLOEXEC);
	ASSERT_LE(0, fd);
	return fd;
}

#endif
