/* SPDX-License-Identifier: GPL-2.0 */
#ifndef KILN_NET_ENDPOINT_H
#define KILN_NET_ENDPOINT_H

#include <stdint.h>
#include <sys/epoll.h>

#include "lib/compiler.h"
#include "lib/worker.h"

/*
 * The epoll set of a net/ service thread (the proxy's, the resolver's)
 * and the endpoints in it: each socket the thread waits on is a struct
 * net_endpoint, which epoll_event.data points at, of a kind the service
 * names (its own enum) and with the object it belongs to. The set comes
 * with the thread's worker (lib/worker.h), whose stop eventfd is an
 * endpoint too:
 *
 *	net_endpoints__init(&s->eps, name);        in create, first
 *	ret = net_endpoints__open(&s->eps, EP_STOP);
 *	ret = net_endpoints__add(&s->eps, &e, EP_X, fd, owner, EPOLLIN);
 *	ret = net_endpoints__start(&s->eps, filter, loop, s);
 *	n = net_endpoints__wait(&s->eps, evs, max, timeout_ms);  the loop
 *	net_endpoints__exit(&s->eps);              in destroy: stop, join
 *
 * The endpoints are the service's, closed by it (net_endpoint__close:
 * closing the fd takes it out of the set).
 */

struct net_endpoint {
	int kind;	 /* the service's */
	int fd;		 /* -1: closed */
	uint32_t events; /* registered; UINT32_MAX: not yet */
	void *owner;
};

struct net_endpoints {
	const char *name; /* for the messages */
	int epoll_fd;
	struct worker worker;
	struct net_endpoint stop; /* the worker's stop eventfd */
};

/* Before anything can fail: exit is fine from here on. */
void net_endpoints__init(struct net_endpoints *s, const char *name);
/* The epoll set and the stop eventfd in it, of kind stop_kind. */
int __must_check net_endpoints__open(struct net_endpoints *s, int stop_kind);
/* The service's thread: loop(arg) under filter (lib/worker.h). */
int __must_check net_endpoints__start(struct net_endpoints *s,
				      const struct sock_fprog *filter,
				      void *(*loop)(void *), void *arg);
/* Stops and joins the thread if it was started; closes the set. */
void net_endpoints__exit(struct net_endpoints *s);

/* fd into the set as e, waited on for events: 0 or -errno. */
int __must_check net_endpoints__add(struct net_endpoints *s,
				    struct net_endpoint *e, int kind, int fd,
				    void *owner, uint32_t events);
/* What e is waited on for from now on (nothing done if the same). */
int __must_check net_endpoints__set(struct net_endpoints *s,
				    struct net_endpoint *e, uint32_t events);
/* Ready endpoints into evs: how many (0 when interrupted), or -errno. */
int net_endpoints__wait(struct net_endpoints *s, struct epoll_event *evs,
			int max, int timeout_ms);

/* Closes e's fd, which takes it out of the set too; closed: nothing. */
void net_endpoint__close(struct net_endpoint *e);

#endif
