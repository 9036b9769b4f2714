// SPDX-License-Identifier: GPL-2.0
/*
 * The egress proxy's TCP flows (proxy-internal.h): the guest's connection
 * accepted from the transparent listener, decided, and either relayed to
 * its upstream connection (host netns) by the kernel (net/krelay.h) or
 * through a pipe each way (splice()), held while the hook is asked, or,
 * for an http grant, intercepted (net/intercept.h) with the glue below.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "ebpf/relay.h"
#include "lib/log.h"
#include "net/proxy-internal.h"

/*
 * Split (--net-relay split): the guest's bytes relayed by the kernel,
 * upstream's through the pipe of dir[SIDE_UP].
 */
static bool split(const struct tcp_flow *t)
{
	return t->kernel_on && !t->k.dir[SIDE_UP].kernel;
}

/* Closes with an RST rather than a FIN: the peer learns it failed. */
static void close_reset(int fd)
{
	struct linger lg = { .l_onoff = 1, .l_linger = 0 };

	if (setsockopt(fd, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg)))
		pr_debug("%s: SO_LINGER: %s", PROXY_NAME, strerror(errno));
	close(fd);
}

/*
 * A kernel-relayed flow's bytes since the last look, into the stats.
 * A socket the kernel failed to say anything about keeps its count.
 */
static void kernel_count(struct proxy *p, struct tcp_flow *t)
{
	uint64_t now[NR_SIDES];

	if (!t->kernel_on || krelay__bytes(&t->k, now))
		return;
	pthread_mutex_lock(&p->stats_lock);
	p->stats.bytes_out += now[SIDE_GUEST] - t->k_counted[SIDE_GUEST];
	p->stats.bytes_in += now[SIDE_UP] - t->k_counted[SIDE_UP];
	pthread_mutex_unlock(&p->stats_lock);
	memcpy(t->k_counted, now, sizeof(now));
}

/* One flow less relayed the way t was. */
static void relay_count_sub(struct proxy *p, const struct tcp_flow *t)
{
	if (t->kernel_on)
		count_sub(p, &p->stats.tcp_kernel);
	else if (t->splice_on)
		count_sub(p, &p->stats.tcp_splice);
}

/*
 * A held flow's question is cancelled: it was never open. A kernel-
 * relayed flow's sockets leave the map as they close.
 */
void proxy_tcp__close(struct proxy *p, struct tcp_flow *t, bool reset)
{
	bool was_open = !t->asking;

	kernel_count(p, t);
	relay_count_sub(p, t);
	t->kernel = t->kernel_on = t->splice_on = false;

	if (t->asking)
		hook__cancel(p->hook, t->hook_id);
	t->asking = false;
	/* It borrows the sockets: gone before they are. */
	intercept__destroy(t->ic);
	t->ic = NULL;
	for (int s = 0; s < NR_SIDES; s++) {
		if (t->ep[s].fd >= 0 && reset) {
			close_reset(t->ep[s].fd);
			t->ep[s].fd = -1;
		}
		net_endpoint__close(&t->ep[s]);
		if (t->dir[s].batched) {
			p->nr_batched--;
			pthread_mutex_lock(&p->stats_lock);
			p->stats.relay_batched = p->nr_batched;
			pthread_mutex_unlock(&p->stats_lock);
		}
		if (t->dir[s].piped) {
			close(t->dir[s].pipe[0]);
			close(t->dir[s].pipe[1]);
		}
		free(t->dir[s].buf);
		t->dir[s] = (struct relay_dir){ 0 };
	}
	t->used = false;
	if (was_open)
		count_sub(p, &p->stats.tcp_open);
}

static uint32_t tcp_interest(const struct tcp_flow *t, int s)
{
	const struct relay_dir *in = &t->dir[s], *out = &t->dir[!s];
	uint32_t ev = 0;

	if (s == SIDE_UP && t->connecting)
		return EPOLLOUT;
	if (t->ic)
		return intercept__interest(t->ic, s);
	/* Nothing read before the kernel has it: the guest's bytes wait. */
	if (t->kernel && !t->kernel_on)
		return 0;
	if (t->kernel) {
		ev = krelay__interest(&t->k, s);
		if (!split(t))
			return ev;
		/* The guest's side: the kernel reads it, the pipe writes it. */
		if (s == SIDE_GUEST)
			return ev | (out->off < out->len ? EPOLLOUT : 0);
	}
	if (!in->eof && in->len < in->cap && !in->full)
		ev |= EPOLLIN;
	if (out->off < out->len)
		ev |= EPOLLOUT;
	/*
	 * Its FIN read: a hang-up (both ways shut) would wake the proxy on
	 * every wait while the other way's bytes wait for room.
	 */
	if (in->eof)
		ev |= EPOLLET;
	return ev;
}

/*
 * A pipe a bulk flow uses grows, once, to PROXY_RELAY_PIPE_MAX; where it
 * cannot (over the user's pipe-user-pages-soft without CAP_SYS_RESOURCE)
 * it stays as it is. Bulk: one read filled half of it or more, or found
 * it full (its bytes, or its slots: a page each, whatever a segment's
 * fragment holds, so that a 64 KiB segment can take all 16).
 */
static void relay_pipe_grow(struct relay_dir *d)
{
	int size;

	d->grown = true;
	size = fcntl(d->pipe[1], F_SETPIPE_SZ, PROXY_RELAY_PIPE_MAX);
	if (size < 0) {
		pr_debug("%s: a relay pipe's size: %s", PROXY_NAME,
			 strerror(errno));
		return;
	}
	d->cap = (size_t)size;
}

/*
 * Into the pipe, as far as it has room. EAGAIN with bytes in it: taken
 * as no room (the socket may have been empty instead; either way the
 * next write to the other side clears it and reading goes on).
 */
static ssize_t relay_splice_in(struct tcp_flow *t, int s)
{
	struct relay_dir *d = &t->dir[s];
	ssize_t n;

	n = splice(t->ep[s].fd, NULL, d->pipe[1], NULL, d->cap - d->len,
		   SPLICE_F_MOVE | SPLICE_F_NONBLOCK);
	if (n < 0 && errno == EAGAIN && d->len)
		d->full = true;
	if (!d->grown && (d->full || (n > 0 && (size_t)n >= d->cap / 2))) {
		relay_pipe_grow(d);
		d->full = false; /* room now, if it grew */
	}
	return n;
}

/*
 * Direction s to waking for PROXY_RELAY_LOWAT bytes (batched), or back
 * to every byte. A socket that refuses stays as it is.
 */
static void relay_batch(struct proxy *p, struct tcp_flow *t, int s, bool on)
{
	struct relay_dir *d = &t->dir[s];
	int lowat = on ? (int)PROXY_RELAY_LOWAT : 1;

	if (setsockopt(t->ep[s].fd, SOL_SOCKET, SO_RCVLOWAT, &lowat,
		       sizeof(lowat))) {
		pr_debug("%s: SO_RCVLOWAT: %s", PROXY_NAME, strerror(errno));
		return;
	}
	d->batched = on;
	if (on)
		p->nr_batched++;
	else
		p->nr_batched--;
	pthread_mutex_lock(&p->stats_lock);
	p->stats.relay_batched = p->nr_batched;
	p->stats.relay_batches += on;
	pthread_mutex_unlock(&p->stats_lock);
}

/* n bytes read through a pipe: fast enough to read in batches? */
static void relay_rate(struct proxy *p, struct tcp_flow *t, int s, size_t n)
{
	struct relay_dir *d = &t->dir[s];
	uint64_t now = now_ms();

	if (d->batched) {
		d->read_ms = now;
		return;
	}
	if (now - d->window_ms > PROXY_RELAY_BATCH_MS) {
		d->window_ms = now;
		d->win_bytes = 0;
	}
	d->win_bytes += n;
	if (d->win_bytes < PROXY_RELAY_LOWAT)
		return;
	relay_batch(p, t, s, true);
	if (!d->batched)
		return;
	d->read_ms = now;
	if (p->nr_batched == 1 || now + PROXY_RELAY_BATCH_MS < p->batch_due_ms)
		p->batch_due_ms = now + PROXY_RELAY_BATCH_MS;
}

void proxy_tcp__batch_due(struct proxy *p, uint64_t now)
{
	uint64_t due = UINT64_MAX;

	if (!p->nr_batched || now < p->batch_due_ms)
		return;
	for (unsigned int i = 0; i < p->tcp_fresh && p->nr_batched; i++) {
		struct tcp_flow *t = &p->tcp[i];

		for (int s = 0; t->used && s < NR_SIDES; s++) {
			struct relay_dir *d = &t->dir[s];

			if (!d->batched)
				continue;
			/* read_ms may be after now: read in this round */
			if (d->read_ms + PROXY_RELAY_BATCH_MS <= now) {
				relay_batch(p, t, s, false);
				d->read_ms = now; /* refused: again later */
			}
			if (d->batched &&
			    d->read_ms + PROXY_RELAY_BATCH_MS < due)
				due = d->read_ms + PROXY_RELAY_BATCH_MS;
		}
	}
	p->batch_due_ms = due;
}

/* Reads what side s has, as far as its buffer has room. */
static int relay_read(struct proxy *p, struct tcp_flow *t, int s)
{
	struct relay_dir *d = &t->dir[s];
	ssize_t n;

	if (d->eof)
		return 0;
	if (d->piped) {
		if (d->len == d->cap || d->full)
			return 0;
		n = relay_splice_in(t, s);
		if (n > 0 && s == SIDE_GUEST)
			relay_rate(p, t, s, (size_t)n);
		goto count;
	}
	if (d->off) {
		memmove(d->buf, d->buf + d->off, d->len - d->off);
		d->len -= d->off;
		d->off = 0;
	}
	if (d->len == d->cap)
		return 0; /* back-pressure: the other side drains first */
	n = recv(t->ep[s].fd, d->buf + d->len, d->cap - d->len, MSG_DONTWAIT);
count:
	if (n < 0)
		return errno == EAGAIN || errno == EINTR ? 0 : -errno;
	if (!n)
		d->eof = true;
	d->len += n;
	count_add(p, s == SIDE_GUEST ? &p->stats.bytes_out : &p->stats.bytes_in,
		  n);
	return 0;
}

/* Writes to side s what the other side sent; its FIN once all is out. */
static int relay_write(struct tcp_flow *t, int s)
{
	struct relay_dir *d = &t->dir[!s];
	ssize_t n;

	if (s == SIDE_UP && t->connecting)
		return 0;
	while (d->piped && d->len) {
		n = splice(d->pipe[0], NULL, t->ep[s].fd, NULL, d->len,
			   SPLICE_F_MOVE | SPLICE_F_NONBLOCK);
		if (n < 0)
			return errno == EAGAIN || errno == EINTR ? 0 : -errno;
		d->len -= n;
		d->full = false;
	}
	while (d->off < d->len) {
		n = send(t->ep[s].fd, d->buf + d->off, d->len - d->off,
			 MSG_DONTWAIT | MSG_NOSIGNAL);
		if (n < 0)
			return errno == EAGAIN || errno == EINTR ? 0 : -errno;
		d->off += n;
	}
	d->off = d->len = 0;
	if (d->eof && !d->shut) {
		if (shutdown(t->ep[s].fd, SHUT_WR))
			return -errno;
		d->shut = true;
	}
	return 0;
}

static int upstream_connected(struct tcp_flow *t)
{
	int soerr = 0;
	socklen_t len = sizeof(soerr);

	if (getsockopt(t->ep[SIDE_UP].fd, SOL_SOCKET, SO_ERROR, &soerr, &len))
		return -errno;
	if (soerr)
		return -soerr;
	t->connecting = false;
	return 0;
}

static void icpt_event(struct proxy *p, struct tcp_flow *t, int s,
		       uint32_t events);
static void kernel_event(struct proxy *p, struct tcp_flow *t, int s,
			 uint32_t events);

void proxy_tcp__event(struct proxy *p, struct tcp_flow *t, int s,
		      uint32_t events)
{
	int ret = 0;

	if (t->ic) {
		icpt_event(p, t, s, events);
		return;
	}
	if (t->kernel) {
		kernel_event(p, t, s, events);
		return;
	}
	if (s == SIDE_UP && t->connecting) {
		ret = upstream_connected(t);
		if (ret) {
			count_add(p, &p->stats.upstream_failed, 1);
			goto fail;
		}
		ret = relay_write(t, SIDE_UP);
	}
	if (!ret && (events & (EPOLLIN | EPOLLHUP | EPOLLERR))) {
		ret = relay_read(p, t, s);
		/* Straight on to the other side, and its FIN with it. */
		if (!ret)
			ret = relay_write(t, !s);
	}
	if (!ret && (events & EPOLLOUT))
		ret = relay_write(t, s);
	if (ret)
		goto fail;
	if (t->dir[SIDE_GUEST].shut && t->dir[SIDE_UP].shut) {
		proxy_tcp__close(p, t, false);
		return;
	}
	for (int i = 0; !ret && i < NR_SIDES; i++)
		ret = net_endpoints__set(&p->eps, &t->ep[i],
					 tcp_interest(t, i));
	if (!ret)
		return;
fail:
	pr_debug("%s: tcp flow: %s", PROXY_NAME, strerror(-ret));
	proxy_tcp__close(p, t, true);
}

static struct tcp_flow *tcp_slot(struct proxy *p)
{
	for (unsigned int i = 0; i < p->tcp_fresh; i++)
		if (!p->tcp[i].used)
			return &p->tcp[i];
	return proxy__tcp_fresh(p);
}

/* A connection to dst from the host netns, under way: its fd, or -errno. */
static int upstream_socket(const struct sockaddr_in *dst)
{
	int fd, ret;

	fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	if (connect(fd, (const struct sockaddr *)dst, sizeof(*dst)) &&
	    errno != EINPROGRESS) {
		ret = -errno;
		close(fd);
		return ret;
	}
	return fd;
}

/*
 * A pipe for the direction (PROXY_RELAY_BUF of room: the default size
 * on Linux, set in case it is not; less when the user is over its pipe
 * pages, as the kernel then makes it); out of descriptors or pipe
 * memory, a buffer instead. 0 or -ENOMEM.
 */
static int relay_dir_init(struct relay_dir *d)
{
	int size;

	if (!pipe2(d->pipe, O_NONBLOCK | O_CLOEXEC)) {
		d->piped = true;
		size = fcntl(d->pipe[1], F_SETPIPE_SZ, PROXY_RELAY_BUF);
		if (size < 0) {
			pr_debug("%s: a relay pipe's size: %s", PROXY_NAME,
				 strerror(errno));
			size = fcntl(d->pipe[1], F_GETPIPE_SZ);
		}
		d->cap = size > 0 ? (size_t)size : PROXY_RELAY_BUF;
		return 0;
	}
	pr_debug("%s: a relay pipe: %s: relayed through a buffer", PROXY_NAME,
		 strerror(errno));
	d->buf = malloc(PROXY_RELAY_BUF);
	d->cap = PROXY_RELAY_BUF;
	return d->buf ? 0 : -ENOMEM;
}

/* The flow relayed through splice (or buffers) from now on. */
static int splice_init(struct proxy *p, struct tcp_flow *t)
{
	int ret;

	for (int s = 0; s < NR_SIDES; s++) {
		if (t->dir[s].piped || t->dir[s].buf)
			continue; /* split's, before its pairing failed */
		ret = relay_dir_init(&t->dir[s]);
		if (ret)
			return ret;
	}
	t->splice_on = true;
	count_add(p, &p->stats.tcp_splice, 1);
	return 0;
}

/*
 * An allowed flow: its upstream connection, from the host netns. With
 * the kernel relay, nothing is read from the guest meanwhile: the
 * kernel takes the flow from its first byte once upstream answers.
 */
static int tcp_open(struct proxy *p, struct tcp_flow *t, int guest_fd,
		    const struct net_flow *f)
{
	int up, ret;

	*t = (struct tcp_flow){ .used = true,
				.connecting = true,
				.flow = *f,
				.kernel = p->relay != NULL };
	t->ep[SIDE_GUEST].fd = guest_fd;
	t->ep[SIDE_UP].fd = -1;
	count_add(p, &p->stats.tcp_open, 1);
	if (!t->kernel) {
		ret = splice_init(p, t);
		if (ret)
			return ret;
	}
	up = upstream_socket(&f->dst);
	if (up < 0)
		return up;
	t->ep[SIDE_UP].fd = up;
	ret = net_endpoints__add(&p->eps, &t->ep[SIDE_GUEST], EP_TCP_GUEST,
				 guest_fd, t, tcp_interest(t, SIDE_GUEST));
	if (!ret)
		ret = net_endpoints__add(&p->eps, &t->ep[SIDE_UP], EP_TCP_UP,
					 up, t, tcp_interest(t, SIDE_UP));
	return ret;
}

/* ---- the kernel relay ------------------------------------------------------ */

struct kernel_pair_call {
	struct proxy *p;
	struct tcp_flow *t;
	char err[PROXY_RELAY_ERR_LEN];
};

/*
 * On the netns thread: the one that may use bpf() in a jail (CAP_BPF;
 * Debian's kernel refuses bpf() without it, on a map's fd too).
 */
static int kernel_pair_ns(void *arg)
{
	struct kernel_pair_call *c = arg;
	struct tcp_flow *t = c->t;

	return relay_prog__pair(c->p->relay, t->ep[SIDE_GUEST].fd,
				t->ep[SIDE_UP].fd, c->p->relay_ways, c->err,
				sizeof(c->err));
}

/*
 * Upstream connected: the flow to the kernel (split: upstream's way
 * through a pipe), or, when the pairing fails, to splice (nothing was
 * read yet either way). 0 or -errno.
 */
static int kernel_start(struct proxy *p, struct tcp_flow *t)
{
	struct kernel_pair_call c = { .p = p, .t = t };
	int ret;

	ret = krelay__start(&t->k, t->ep[SIDE_GUEST].fd, t->ep[SIDE_UP].fd,
			    p->relay_ways);
	if (!ret && !(p->relay_ways & RELAY_B_TO_A))
		ret = relay_dir_init(&t->dir[SIDE_UP]);
	if (!ret)
		ret = proxy__on_ns_thread(p, kernel_pair_ns, &c);
	if (!ret) {
		t->kernel_on = true;
		count_add(p, &p->stats.tcp_kernel, 1);
		return 0;
	}
	pr_debug("%s: tcp flow: the kernel relay: %s%s%s; splice instead",
		 PROXY_NAME, strerror(-ret), c.err[0] ? ": " : "", c.err);
	t->kernel = false;
	return splice_init(p, t);
}

/*
 * A kernel-relayed flow's outcome: open still, done (split: upstream's
 * way shut too), or reset.
 */
static void kernel_settle(struct proxy *p, struct tcp_flow *t, int ret)
{
	if (ret == KRELAY_DONE && split(t) && !t->dir[SIDE_UP].shut)
		ret = 0;
	if (!ret && split(t) && t->dir[SIDE_UP].shut &&
	    t->k.dir[SIDE_GUEST].shut)
		ret = KRELAY_DONE;
	if (ret == KRELAY_DONE) {
		proxy_tcp__close(p, t, false);
		return;
	}
	p->fin_pending |= !ret && krelay__pending(&t->k);
	for (int i = 0; !ret && i < NR_SIDES; i++)
		ret = net_endpoints__set(&p->eps, &t->ep[i],
					 tcp_interest(t, i));
	if (!ret)
		return;
	pr_debug("%s: kernel-relayed tcp flow: %s", PROXY_NAME, strerror(-ret));
	proxy_tcp__close(p, t, true);
}

/*
 * A split flow's event. The guest's side: its FIN or reset (krelay's),
 * or room for upstream's bytes in the pipe. Upstream's side: its bytes
 * into the pipe and on to the guest, its FIN after them, or its reset.
 */
static void split_event(struct proxy *p, struct tcp_flow *t, int s,
			uint32_t events)
{
	int ret = 0, w;

	if (s == SIDE_GUEST) {
		if (events & (EPOLLERR | EPOLLRDHUP | EPOLLHUP))
			ret = krelay__event(&t->k, s, events);
		if (ret >= 0 && (events & EPOLLOUT)) {
			w = relay_write(t, SIDE_GUEST);
			ret = w ? w : ret;
		}
	} else if (events & EPOLLERR) {
		ret = krelay__event(&t->k, s, EPOLLERR);
	} else {
		ret = relay_read(p, t, SIDE_UP);
		if (!ret)
			ret = relay_write(t, SIDE_GUEST);
	}
	kernel_settle(p, t, ret);
}

/*
 * Before upstream answers, the guest's side is watched for nothing: an
 * event there is its reset (or an error). Once it has, the flow is
 * paired; from then on an event is a FIN or a reset.
 */
static void kernel_event(struct proxy *p, struct tcp_flow *t, int s,
			 uint32_t events)
{
	int ret;

	if (split(t)) {
		split_event(p, t, s, events);
		return;
	}
	if (t->kernel_on) {
		kernel_settle(p, t, krelay__event(&t->k, s, events));
		return;
	}
	if (s == SIDE_GUEST) {
		kernel_settle(p, t, -ECONNRESET);
		return;
	}
	ret = upstream_connected(t);
	if (ret) {
		count_add(p, &p->stats.upstream_failed, 1);
		kernel_settle(p, t, ret);
		return;
	}
	ret = kernel_start(p, t);
	if (!ret && !t->kernel) {
		/* splice from here on, as if it had been so from the start */
		proxy_tcp__event(p, t, s, 0);
		return;
	}
	kernel_settle(p, t, ret);
}

void proxy_tcp__fin_retry(struct proxy *p)
{
	if (!p->fin_pending)
		return;
	p->fin_pending = false;
	for (unsigned int i = 0; i < p->tcp_fresh; i++) {
		struct tcp_flow *t = &p->tcp[i];

		if (t->used && t->kernel_on && krelay__pending(&t->k))
			kernel_settle(p, t, krelay__retry(&t->k));
	}
}

/* ---- HTTP interception ------------------------------------------------------ */

static void icpt_request(void *opaque, const struct net_flow *f,
			 const char *detail, bool ok, const char *reason)
{
	struct proxy *p = opaque;

	pthread_mutex_lock(&p->stats_lock);
	ok ? p->stats.http_allowed++ : p->stats.http_refused++;
	proxy__count_reason(p->stats.http_reasons, &p->stats.nr_http_reasons,
			    IPPROTO_TCP,
			    ok ? NET_VERDICT_ALLOW : NET_VERDICT_DENY, reason);
	pthread_mutex_unlock(&p->stats_lock);
	if (!ok)
		proxy__log_flow(p, "refused an http request of", f, reason,
				detail ? detail : "");
}

static void icpt_upstream_failed(void *opaque, const struct net_flow *f,
				 const char *why)
{
	struct proxy *p = opaque;

	count_add(p, &p->stats.upstream_failed, 1);
	proxy__log_flow(p, "upstream failed for", f, why, "");
}

/*
 * fn(arg) on the netns thread, whose own seccomp filter allows read-only
 * opens (the proxy thread's refuses them): wolfSSL opens /dev/urandom
 * for each new TLS connection. The proxy thread waits, so only one
 * thread at a time uses what fn touches.
 */
static int icpt_unfiltered(void *opaque, int (*fn)(void *arg), void *arg)
{
	return proxy__on_ns_thread(opaque, fn, arg);
}

/* A request put to the hook; its cookie is the flow (owner). */
static int icpt_ask(void *opaque, void *owner, const struct net_flow *f,
		    const struct hook_http_question *q, uint64_t *id)
{
	struct proxy *p = opaque;
	int ret;

	ret = hook__ask_http(p->hook, f, q, owner, now_ms(), id);
	proxy__hook_copy_stats(p);
	if (ret && ret != -EBUSY)
		pr_debug("%s: the hook: %s", PROXY_NAME, strerror(-ret));
	return ret;
}

static void icpt_cancel(void *opaque, uint64_t id)
{
	struct proxy *p = opaque;

	hook__cancel(p->hook, id);
}

static void icpt_bytes(void *opaque, size_t out, size_t in)
{
	struct proxy *p = opaque;

	pthread_mutex_lock(&p->stats_lock);
	p->stats.bytes_out += out;
	p->stats.bytes_in += in;
	pthread_mutex_unlock(&p->stats_lock);
}

void proxy_tcp__init_intercept(struct proxy *p)
{
	p->icpt_ops =
		(struct intercept_ops){ .decide = p->p.decide_http,
					.decide_opaque = p->p.decide_opaque,
					.request = icpt_request,
					.upstream_failed = icpt_upstream_failed,
					.ask = icpt_ask,
					.cancel = icpt_cancel,
					.bytes = icpt_bytes,
					.unfiltered = icpt_unfiltered,
					.opaque = p };
	p->icpt_budget = (struct bytebudget){ .limit = INTERCEPT_VM_BUDGET };
}

/* The VM's TLS interception is whole (http_tls_init in the vmm). */
static bool tls_usable(const struct proxy *p)
{
	return p->p.tls.ca && p->p.tls.server && p->p.tls.client;
}

/*
 * A flow an http grant covers (the policy's, or the hook's: hook_gen,
 * its generation): the guest's side only, until a request is allowed
 * and the interception asks for upstream (icpt_connect).
 */
static void tcp_intercept(struct proxy *p, struct tcp_flow *t, int fd,
			  const struct net_flow *f,
			  const struct net_decision *d, uint64_t hook_gen)
{
	struct intercept_params ip = {
		.flow = *f,
		.guest_fd = fd,
		.ops = &p->icpt_ops,
		.owner = t,
		.response_ms = p->p.http_response_ms,
		.tls_auto = d->http_tls_auto,
		.hook_flow = d->hook_flow,
		.hook_each_request = d->hook_each_request,
		.hook_host = d->http_host,
		.budget = &p->icpt_budget,
	};
	int ret;

	if (d->http_tls || (d->http_tls_auto && tls_usable(p)))
		ip.tls = &p->p.tls;
	*t = (struct tcp_flow){ .used = true,
				.flow = *f,
				.tls = d->http_tls,
				.hook_gen = hook_gen };
	if (ip.tls)
		t->setup_deadline_ms = now_ms() + p->p.tls_setup_ms;
	t->ep[SIDE_GUEST].fd = fd;
	t->ep[SIDE_UP].fd = -1;
	count_add(p, &p->stats.tcp_open, 1);
	ret = intercept__create(&t->ic, &ip);
	if (!ret)
		ret = net_endpoints__add(
			&p->eps, &t->ep[SIDE_GUEST], EP_TCP_GUEST, fd, t,
			intercept__interest(t->ic, INTERCEPT_GUEST));
	if (ret) {
		pr_debug("%s: tcp interception: %s", PROXY_NAME,
			 strerror(-ret));
		proxy_tcp__close(p, t, true);
	}
}

/* Upstream's connection failed: the guest gets the interception's 502. */
static int icpt_connect_failed(struct proxy *p, struct tcp_flow *t)
{
	count_add(p, &p->stats.upstream_failed, 1);
	t->connecting = false;
	net_endpoint__close(&t->ep[SIDE_UP]);
	return intercept__upstream_failed(t->ic);
}

/* Upstream, asked for by the interception once a request was allowed. */
static int icpt_connect(struct proxy *p, struct tcp_flow *t)
{
	int fd = upstream_socket(&t->flow.dst);

	if (fd < 0)
		return icpt_connect_failed(p, t);
	t->connecting = true;
	return net_endpoints__add(&p->eps, &t->ep[SIDE_UP], EP_TCP_UP, fd, t,
				  EPOLLOUT);
}

/*
 * What the interception said (intercept__run() and the like) carried
 * out: upstream asked for or closed, the flow closed or reset, or its
 * sides watched for what it waits for now.
 */
static void icpt_settle(struct proxy *p, struct tcp_flow *t, int ret)
{
	if (!ret && t->ep[SIDE_UP].fd < 0 && intercept__wants_upstream(t->ic))
		ret = icpt_connect(p, t);
	if (ret == INTERCEPT_DONE) {
		proxy_tcp__close(p, t, false);
		return;
	}
	if (!ret && t->ep[SIDE_UP].fd >= 0 && intercept__upstream_done(t->ic))
		net_endpoint__close(&t->ep[SIDE_UP]);
	for (int i = 0; !ret && i < NR_SIDES; i++)
		if (t->ep[i].fd >= 0)
			ret = net_endpoints__set(&p->eps, &t->ep[i],
						 tcp_interest(t, i));
	if (ret) {
		pr_debug("%s: intercepted tcp flow: %s", PROXY_NAME,
			 strerror(-ret));
		proxy_tcp__close(p, t, true);
	}
}

static void icpt_event(struct proxy *p, struct tcp_flow *t, int s,
		       uint32_t events)
{
	int ret;

	if (s == SIDE_UP && t->connecting)
		ret = upstream_connected(t) ?
			      icpt_connect_failed(p, t) :
			      intercept__upstream(t->ic, t->ep[SIDE_UP].fd);
	else
		ret = intercept__run(t->ic, s, events);
	icpt_settle(p, t, ret);
}

/* An allowed flow, opened; one whose upstream fails is reset. */
static void tcp_start(struct proxy *p, struct tcp_flow *t, int guest_fd,
		      const struct net_flow *f, uint64_t hook_gen)
{
	int ret;

	ret = tcp_open(p, t, guest_fd, f);
	t->hook_gen = hook_gen;
	if (ret) {
		pr_debug("%s: tcp upstream: %s", PROXY_NAME, strerror(-ret));
		count_add(p, &p->stats.upstream_failed, 1);
		proxy_tcp__close(p, t, true);
	}
}

/*
 * The guest's connection held while the hook is asked: accepted, not
 * read (what the guest sends waits in its socket), nothing upstream.
 */
static void tcp_hold(struct proxy *p, struct tcp_flow *t, int fd,
		     const struct net_flow *f, struct net_decision *d)
{
	*t = (struct tcp_flow){ .used = true, .asking = true, .flow = *f };
	t->ep[SIDE_GUEST].fd = fd;
	t->ep[SIDE_UP].fd = -1;
	if (proxy__hook_ask(p, f, d, t, &t->hook_id))
		return;
	t->asking = false; /* no question to cancel, not open */
	t->ep[SIDE_GUEST].fd = -1;
	t->used = false;
	close_reset(fd);
}

/*
 * A held flow decided, its question answered or cancelled: by the hook
 * (hook_gen, its generation) or by a recheck's rules (0).
 */
void proxy_tcp__settled(struct proxy *p, struct tcp_flow *t,
			const struct net_decision *d, const char *detail,
			uint64_t hook_gen)
{
	struct net_flow f = t->flow;
	int fd = t->ep[SIDE_GUEST].fd;

	/* Still asking, so a denied one is closed as never open. */
	proxy__settle(p, &f, d, detail);
	if (d->verdict == NET_VERDICT_ALLOW) {
		tcp_start(p, t, fd, &f, hook_gen);
	} else if (d->verdict == NET_VERDICT_HTTP) {
		t->asking = false; /* its question is answered or cancelled */
		tcp_intercept(p, t, fd, &f, d, hook_gen);
	} else {
		proxy_tcp__close(p, t, true);
	}
}

static void tcp_accept_one(struct proxy *p, int fd,
			   const struct sockaddr_in *peer)
{
	struct net_flow f = { .proto = IPPROTO_TCP, .src = *peer };
	socklen_t len = sizeof(f.dst);
	struct net_decision d;
	struct tcp_flow *t;

	/* A transparent socket's own address is where the guest went. */
	if (getsockname(fd, (struct sockaddr *)&f.dst, &len)) {
		close_reset(fd);
		return;
	}
	f.dst_local = proxy__host_addr(p, f.dst.sin_addr.s_addr);
	t = tcp_slot(p);
	if (!t) {
		d = (struct net_decision){ .verdict = NET_VERDICT_DENY,
					   .reason = "flow limit" };
		proxy__count_flow(p, &f, &d);
		proxy__log_flow(p, "denied", &f, d.reason, "");
		close_reset(fd);
		return;
	}
	proxy__decide(p, &f, &d);
	if (d.verdict == NET_VERDICT_ASK)
		tcp_hold(p, t, fd, &f, &d);
	else if (d.verdict == NET_VERDICT_ALLOW)
		tcp_start(p, t, fd, &f, 0);
	else if (d.verdict == NET_VERDICT_HTTP)
		tcp_intercept(p, t, fd, &f, &d, 0);
	else
		close_reset(fd);
}

void proxy_tcp__accept(struct proxy *p)
{
	struct sockaddr_in peer;
	socklen_t len;
	int fd;

	for (int i = 0; i < PROXY_ACCEPT_BUDGET; i++) {
		len = sizeof(peer);
		fd = accept4(p->lsn_fd, (struct sockaddr *)&peer, &len,
			     SOCK_NONBLOCK | SOCK_CLOEXEC);
		if (fd < 0) {
			if (errno == ECONNABORTED || errno == EINTR)
				continue;
			if (errno != EAGAIN)
				pr_debug("%s: accept: %s", PROXY_NAME,
					 strerror(errno));
			return;
		}
		tcp_accept_one(p, fd, &peer);
	}
}

/*
 * Intercepted TLS flows whose setup (the ClientHello, upstream, the
 * guest's handshake) passed its deadline: reset, counted by the
 * interception. The others: their responses' deadlines. Kernel-relayed
 * flows: their bytes since the last sweep, counted.
 */
void proxy_tcp__sweep(struct proxy *p, uint64_t now)
{
	for (unsigned int i = 0; i < p->tcp_fresh; i++) {
		struct tcp_flow *t = &p->tcp[i];

		if (t->used && t->kernel_on)
			kernel_count(p, t);
		if (!t->used || !t->ic)
			continue;
		if (t->setup_deadline_ms && !intercept__setting_up(t->ic))
			t->setup_deadline_ms = 0;
		if (!t->setup_deadline_ms) {
			icpt_settle(p, t, intercept__sweep(t->ic, now));
			continue;
		}
		if (now < t->setup_deadline_ms)
			continue;
		pr_debug("%s: intercepted tcp flow: %s", PROXY_NAME,
			 strerror(-intercept__expire(t->ic)));
		proxy_tcp__close(p, t, true);
	}
}

/*
 * A request's answer; its cookie is the intercepted flow (its question
 * is cancelled when the flow closes). Kept by the interception, applied
 * by proxy_tcp__answers_apply() once hook__run() returned: the hook takes no
 * question from within its callback, and a request decided may ask.
 */
void proxy_tcp__http_answered(void *opaque, void *cookie, uint64_t id,
			      const struct net_http_decision *d,
			      const char *detail)
{
	struct proxy *p = opaque;
	struct tcp_flow *t = cookie;

	proxy__hook_copy_stats(p);
	if (!t->used || !t->ic)
		return;
	/*
	 * The request's refusal is logged with its reason; an invalid
	 * answer's rule (which field, which limit) is for the hook's author.
	 */
	if (d->verdict != NET_VERDICT_ALLOW && !strcmp(d->reason, HOOK_INVALID))
		proxy__log_flow(p, "invalid hook answer for a request of",
				&t->flow, HOOK_INVALID, detail);
	intercept__hook_answer(t->ic, id, d);
	p->icpt_answers = true;
}

/* The intercepted flows whose requests the hook answered, run. */
void proxy_tcp__answers_apply(struct proxy *p)
{
	if (!p->icpt_answers)
		return;
	p->icpt_answers = false;
	for (unsigned int i = 0; i < p->tcp_fresh; i++) {
		struct tcp_flow *t = &p->tcp[i];

		if (t->used && t->ic && intercept__has_answers(t->ic))
			icpt_event(p, t, SIDE_GUEST, 0);
	}
}

/* An open TCP flow the decide function no longer allows: reset both ways. */
void proxy_tcp__recheck(struct proxy *p, struct tcp_flow *t)
{
	struct net_decision d;
	const char *why;

	proxy__ask_policy(p, &t->flow, &d);
	if (t->asking) {
		if (!proxy__recheck_held(p, t->hook_id, &d))
			proxy_tcp__settled(p, t, &d, "", 0);
		return;
	}
	if (t->ic && t->hook_gen) {
		/* The hook's grant-http: while the same hook would be asked. */
		if (proxy__hook_still_grants(p, t->hook_gen, &d, &why))
			return;
	} else if (t->ic) {
		/* Intercepted while an http grant covers it, the same way. */
		if (d.verdict == NET_VERDICT_HTTP && d.http_tls == t->tls)
			return;
		why = d.verdict == NET_VERDICT_HTTP ? "http tls changed" :
		      allowed(&d)		    ? "no http grant" :
						      d.reason;
	} else if (d.verdict == NET_VERDICT_ALLOW ||
		   proxy__hook_still_grants(p, t->hook_gen, &d, &why)) {
		return;
	} else if (d.verdict == NET_VERDICT_HTTP) {
		/* Relayed as it is no more: an http grant's is intercepted. */
		why = "intercepted from now on";
	}
	proxy__log_flow(p, "cut", &t->flow, why, "");
	proxy_tcp__close(p, t, true);
	/* After the close: whoever sees the cut sees one flow less open. */
	count_add(p, &p->stats.tcp_cut, 1);
}
