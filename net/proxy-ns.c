// SPDX-License-Identifier: GPL-2.0
/*
 * The egress proxy's netns thread (proxy-internal.h): it lives in the VM
 * netns from create to destroy (net/nsthread.h). Every socket that must
 * be there (the listener, the UDP socket, each UDP flow's reply socket)
 * is made by it, and it loads, attaches and detaches the egress program
 * (the loader's netlink and netns checks are the calling thread's). It
 * serves one request at a time, under a seccomp filter of its own once
 * the VM runs (proxy__filter_ns_thread; vmm/seccomp.c, "netns").
 */
#include <errno.h>
#include <net/if.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "lib/errf.h"
#include "lib/thread-filter.h"
#include "lib/worker.h"
#include "net/proxy-internal.h"

static int sockopt_on(int fd, int level, int name)
{
	int one = 1;

	return setsockopt(fd, level, name, &one, sizeof(one)) ? -errno : 0;
}

static struct sockaddr_in any_port(uint16_t port)
{
	return (struct sockaddr_in){ .sin_family = AF_INET,
				     .sin_port = htons(port),
				     .sin_addr.s_addr = htonl(INADDR_ANY) };
}

/* A transparent socket on 0.0.0.0:port of the VM netns. */
static int proxy_socket(struct proxy *p, int type, uint16_t port,
			const char *what)
{
	struct sockaddr_in a = any_port(port);
	int fd, ret;

	fd = socket(AF_INET, type | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return errf(p->ns_err, p->ns_errlen, -errno, "%s: %s: %s",
			    PROXY_NAME, what, strerror(errno));
	ret = sockopt_on(fd, SOL_IP, IP_TRANSPARENT);
	if (!ret && type == SOCK_DGRAM)
		ret = sockopt_on(fd, SOL_IP, IP_RECVORIGDSTADDR);
	if (!ret && bind(fd, (struct sockaddr *)&a, sizeof(a)))
		ret = -errno;
	if (!ret && type == SOCK_STREAM && listen(fd, PROXY_BACKLOG))
		ret = -errno;
	if (ret) {
		close(fd);
		return errf(p->ns_err, p->ns_errlen, ret,
			    "%s: %s on port %u: %s", PROXY_NAME, what, port,
			    strerror(-ret));
	}
	return fd;
}

/* In the VM netns: the sockets, the program, its slots, attached. */
static int ns_setup(struct proxy *p)
{
	char *err = p->ns_err;
	size_t len = p->ns_errlen;
	unsigned int ifindex;
	int ret;

	p->lsn_fd = proxy_socket(p, SOCK_STREAM, p->p.tcp_port, "TCP listener");
	if (p->lsn_fd < 0)
		return p->lsn_fd;
	p->udp_fd = proxy_socket(p, SOCK_DGRAM, p->p.udp_port, "UDP socket");
	if (p->udp_fd < 0)
		return p->udp_fd;
	ifindex = if_nametoindex(p->ifname);
	if (!ifindex)
		return errf(err, len, -errno, "%s: %s: %s", PROXY_NAME,
			    p->ifname, strerror(errno));
	ret = egress__create(&p->egress, &p->p.egress, err, len);
	if (!ret)
		ret = egress__set_proxy(p->egress, EGRESS_SLOT_TCP, p->lsn_fd,
					err, len);
	if (!ret)
		ret = egress__set_proxy(p->egress, EGRESS_SLOT_UDP, p->udp_fd,
					err, len);
	if (!ret)
		ret = egress__attach(p->egress, (int)ifindex, err, len);
	return ret;
}

/* A UDP flow's reply socket: from its original destination, to the guest. */
static int reply_socket(const struct sockaddr_in *from,
			const struct sockaddr_in *to)
{
	int fd, ret;

	fd = socket(AF_INET, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	/* Other flows to the same destination have one bound there too. */
	ret = sockopt_on(fd, SOL_IP, IP_TRANSPARENT);
	if (!ret)
		ret = sockopt_on(fd, SOL_SOCKET, SO_REUSEADDR);
	if (!ret && bind(fd, (const struct sockaddr *)from, sizeof(*from)))
		ret = -errno;
	if (!ret && connect(fd, (const struct sockaddr *)to, sizeof(*to)))
		ret = -errno;
	if (ret) {
		close(fd);
		return ret;
	}
	return fd;
}

static void ns_finish(struct proxy *p)
{
	p->ns_req = NS_NONE;
	p->ns_done = true;
	pthread_cond_broadcast(&p->ns_cv);
}

/*
 * The thread's set-up, in the VM netns (nsthread.h): a program it made
 * and could not attach is gone with it, the thread ending.
 */
static int ns_start(void *arg)
{
	struct proxy *p = arg;
	int ret;

	worker__block_signals();
	ret = ns_setup(p);
	if (ret) {
		egress__destroy(p->egress);
		p->egress = NULL;
	}
	return ret;
}

/* Then the requests, one at a time, until NS_EXIT. */
static void ns_serve(void *arg)
{
	struct proxy *p = arg;
	enum ns_request req;

	pthread_mutex_lock(&p->ns_lock);
	for (req = NS_NONE; req != NS_EXIT;) {
		while (p->ns_req == NS_NONE)
			pthread_cond_wait(&p->ns_cv, &p->ns_lock);
		req = p->ns_req;
		if (req == NS_REPLY_SOCKET)
			p->ns_fd = reply_socket(&p->ns_bind, &p->ns_peer);
		if (req == NS_COUNTERS)
			p->ns_counts_ret =
				egress__read_counters(p->egress, p->ns_counts,
						      p->ns_err, p->ns_errlen);
		if (req == NS_CALL)
			p->ns_call_ret = p->ns_fn(p->ns_arg);
		if (req != NS_EXIT)
			ns_finish(p);
	}
	pthread_mutex_unlock(&p->ns_lock);
	/* Detached in the netns it was attached in; then the answer. */
	egress__destroy(p->egress);
	p->egress = NULL;
	pthread_mutex_lock(&p->ns_lock);
	ns_finish(p);
	pthread_mutex_unlock(&p->ns_lock);
}

/*
 * Asks the netns thread and waits for its answer; the caller holds
 * ns_ask_lock, set the request's inputs up and takes its answer.
 */
static void ns_ask(struct proxy *p, enum ns_request req)
{
	pthread_mutex_lock(&p->ns_lock);
	p->ns_req = req;
	p->ns_done = false;
	pthread_cond_broadcast(&p->ns_cv);
	while (!p->ns_done)
		pthread_cond_wait(&p->ns_cv, &p->ns_lock);
	pthread_mutex_unlock(&p->ns_lock);
}

int proxy_ns__start(struct proxy *p, char *err, size_t errlen)
{
	int ret;

	p->ns_err = err;
	p->ns_errlen = errlen;
	ret = nsthread__start(&p->ns,
			      &(struct nsthread_params){ .ns_fd = p->p.netns_fd,
							 .name = PROXY_NAME,
							 .setup = ns_start,
							 .serve = ns_serve,
							 .arg = p },
			      err, errlen);
	p->ns_ret = ret;
	p->ns_err = NULL;
	return ret;
}

void proxy_ns__stop(struct proxy *p)
{
	/* A thread whose set-up failed has ended already. */
	if (p->ns.started && !p->ns_ret) {
		pthread_mutex_lock(&p->ns_ask_lock);
		ns_ask(p, NS_EXIT);
		pthread_mutex_unlock(&p->ns_ask_lock);
	}
	nsthread__join(&p->ns);
}

int proxy_ns__reply_socket(struct proxy *p, const struct sockaddr_in *from,
			   const struct sockaddr_in *to)
{
	int fd;

	pthread_mutex_lock(&p->ns_ask_lock);
	pthread_mutex_lock(&p->ns_lock);
	p->ns_bind = *from;
	p->ns_peer = *to;
	pthread_mutex_unlock(&p->ns_lock);
	ns_ask(p, NS_REPLY_SOCKET);
	fd = p->ns_fd;
	pthread_mutex_unlock(&p->ns_ask_lock);
	return fd;
}

int proxy__on_ns_thread(struct proxy *p, int (*fn)(void *arg), void *arg)
{
	int ret;

	pthread_mutex_lock(&p->ns_ask_lock);
	pthread_mutex_lock(&p->ns_lock);
	p->ns_fn = fn;
	p->ns_arg = arg;
	pthread_mutex_unlock(&p->ns_lock);
	ns_ask(p, NS_CALL);
	ret = p->ns_call_ret;
	pthread_mutex_unlock(&p->ns_ask_lock);
	return ret;
}

struct egress *proxy__egress(struct proxy *p)
{
	return p->egress;
}

int proxy__egress_counters(struct proxy *p, uint64_t counts[EGRESS_NR_REASONS],
			   char *err, size_t errlen)
{
	int ret;

	pthread_mutex_lock(&p->ns_ask_lock);
	pthread_mutex_lock(&p->ns_lock);
	p->ns_counts = counts;
	p->ns_err = err;
	p->ns_errlen = errlen;
	pthread_mutex_unlock(&p->ns_lock);
	ns_ask(p, NS_COUNTERS);
	ret = p->ns_counts_ret;
	p->ns_err = NULL;
	pthread_mutex_unlock(&p->ns_ask_lock);
	return ret;
}

static int install_filter(void *arg)
{
	return thread_filter__install(arg);
}

int proxy__filter_ns_thread(struct proxy *p, const struct sock_fprog *prog)
{
	if (!prog)
		return 0;
	return proxy__on_ns_thread(p, install_filter, (void *)prog);
}
