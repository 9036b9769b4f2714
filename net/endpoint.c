// SPDX-License-Identifier: GPL-2.0
/* A net/ service thread's epoll set and its endpoints (endpoint.h). */
#include <errno.h>
#include <unistd.h>

#include "net/endpoint.h"

void net_endpoints__init(struct net_endpoints *s, const char *name)
{
	*s = (struct net_endpoints){ .name = name,
				     .epoll_fd = -1,
				     .stop.fd = -1 };
	worker__init(&s->worker);
}

int net_endpoints__open(struct net_endpoints *s, int stop_kind)
{
	s->epoll_fd = epoll_create1(EPOLL_CLOEXEC);
	if (s->epoll_fd < 0 || worker__open(&s->worker))
		return -errno;
	return net_endpoints__add(s, &s->stop, stop_kind, s->worker.stop_fd,
				  NULL, EPOLLIN);
}

int net_endpoints__start(struct net_endpoints *s,
			 const struct sock_fprog *filter, void *(*loop)(void *),
			 void *arg)
{
	return worker__start(&s->worker, filter, loop, arg);
}

void net_endpoints__exit(struct net_endpoints *s)
{
	/* The stop endpoint's fd is the worker's: closed there. */
	worker__exit(&s->worker, s->name);
	s->stop.fd = -1;
	if (s->epoll_fd >= 0)
		close(s->epoll_fd);
	s->epoll_fd = -1;
}

int net_endpoints__set(struct net_endpoints *s, struct net_endpoint *e,
		       uint32_t events)
{
	struct epoll_event ev = { .events = events, .data.ptr = e };
	int op = e->events == UINT32_MAX ? EPOLL_CTL_ADD : EPOLL_CTL_MOD;

	if (e->events == events)
		return 0;
	if (epoll_ctl(s->epoll_fd, op, e->fd, &ev))
		return -errno;
	e->events = events;
	return 0;
}

int net_endpoints__add(struct net_endpoints *s, struct net_endpoint *e,
		       int kind, int fd, void *owner, uint32_t events)
{
	*e = (struct net_endpoint){
		.kind = kind, .fd = fd, .events = UINT32_MAX, .owner = owner
	};
	return net_endpoints__set(s, e, events);
}

int net_endpoints__wait(struct net_endpoints *s, struct epoll_event *evs,
			int max, int timeout_ms)
{
	int n = epoll_wait(s->epoll_fd, evs, max, timeout_ms);

	if (n < 0)
		return errno == EINTR ? 0 : -errno;
	return n;
}

void net_endpoint__close(struct net_endpoint *e)
{
	if (e->fd >= 0)
		close(e->fd);
	e->fd = -1;
}
