// SPDX-License-Identifier: GPL-2.0
/*
 * The policy hook's client (hook.h, Documentation/network.md "The
 * hook"). One nonblocking Unix stream connection, made on the first
 * question and again on the first one after it ended; the questions that
 * wait for an answer in a fixed table, each with its deadline; the
 * answers read as lines of at most HOOK_LINE_MAX bytes. The connection
 * sits in an epoll set of its own, whose fd the owner adds to its set, so
 * the owner never sees the connection come and go.
 */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "lib/bytequeue.h"
#include "lib/compiler.h"
#include "lib/resident.h"
#include "net/hook-internal.h"
#include "net/hook.h"

#define HOOK_READ_BUDGET 16 /* reads per run: the owner has other work */
/* A question's fixed part (id, proto, addresses, class), generously. */
#define HOOK_QUESTION_FIXED 256U

/* The largest question fits in a line: hostnames quoted, comma, space. */
_Static_assert(HOOK_QUESTION_FIXED +
			       NET_ASK_MAX_HOSTNAMES * (NET_HOSTNAME_MAX + 4) <=
		       HOOK_LINE_MAX,
	       "a question always fits in a line");
_Static_assert(sizeof(((struct sockaddr_un *)0)->sun_path) > NET_HOOK_PATH_MAX,
	       "a hook path fits in sun_path");

struct question {
	bool used;
	bool http; /* a request's (hook__ask_http): params.http_answer */
	bool line; /* another type's (hook__ask_line): params.line_answer */
	uint64_t id;
	uint64_t flow; /* a request's: its flow's "grant-http" question */
	uint64_t deadline_ms; /* CLOCK_MONOTONIC */
	void *cookie;
	const char *fail; /* set: answered with this reason at the next run */
};

struct hook {
	struct hook_params p;
	int epoll_fd;
	int fd;				  /* the connection; -1: none */
	bool connecting;		  /* connect() said EINPROGRESS */
	uint32_t events;		  /* fd's in epoll_fd; 0: not added */
	char path[NET_HOOK_PATH_MAX + 1]; /* the last question's socket */
	uint64_t generation;		  /* bumped when path changes */
	uint64_t next_id;
	struct question *q;	  /* max_pending */
	struct bytequeue out;	  /* question lines not sent yet */
	char in[HOOK_ANSWER_MAX]; /* the answer line being read */
	size_t in_len;
	struct hook_stats stats;
};

int hook__create(struct hook **out, const struct hook_params *p)
{
	struct hook *h;
	int ret;

	*out = NULL;
	/* Its scratch buffers are backed only when used (resident.h). */
	h = resident__table(1, sizeof(*h));
	if (!h)
		return -ENOMEM;
	h->p = *p;
	if (!h->p.max_pending)
		h->p.max_pending = HOOK_MAX_PENDING;
	h->fd = -1;
	h->next_id = 1;
	h->q = calloc(h->p.max_pending, sizeof(*h->q));
	h->epoll_fd = epoll_create1(EPOLL_CLOEXEC);
	if (!h->q || h->epoll_fd < 0) {
		ret = h->q ? -errno : -ENOMEM;
		hook__destroy(h);
		return ret;
	}
	*out = h;
	return 0;
}

/* The connection goes; each pending question is answered `why` next. */
static void conn_close(struct hook *h, const char *why)
{
	if (h->fd >= 0)
		close(h->fd); /* and out of epoll_fd with it */
	h->fd = -1;
	h->connecting = false;
	h->events = 0;
	explicit_bzero(h->in, h->in_len);
	h->in_len = 0;
	bytequeue__free(&h->out);
	for (unsigned int i = 0; i < h->p.max_pending; i++)
		if (h->q[i].used && !h->q[i].fail)
			h->q[i].fail = why;
}

void hook__destroy(struct hook *h)
{
	if (!h)
		return;
	if (h->fd >= 0)
		close(h->fd);
	if (h->epoll_fd >= 0)
		close(h->epoll_fd);
	bytequeue__free(&h->out);
	explicit_bzero(h->in, sizeof(h->in));
	free(h->q);
	resident__free_table(h, 1, sizeof(*h));
}

int hook__fd(const struct hook *h)
{
	return h->epoll_fd;
}

/* Readable always (answers, the end); writable while lines wait. */
static int update_events(struct hook *h)
{
	uint32_t want = EPOLLIN;
	struct epoll_event ev;
	int op;

	if (h->connecting || h->out.len)
		want |= EPOLLOUT;
	if (want == h->events)
		return 0;
	op = h->events ? EPOLL_CTL_MOD : EPOLL_CTL_ADD;
	ev = (struct epoll_event){ .events = want };
	if (epoll_ctl(h->epoll_fd, op, h->fd, &ev))
		return -errno;
	h->events = want;
	return 0;
}

static int conn_open(struct hook *h)
{
	struct sockaddr_un a = { .sun_family = AF_UNIX };
	int ret;

	snprintf(a.sun_path, sizeof(a.sun_path), "%s", h->path);
	h->fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (h->fd < 0)
		return -errno;
	/* A Unix socket connects at once or fails; EINPROGRESS is kept. */
	if (connect(h->fd, (struct sockaddr *)&a, sizeof(a))) {
		if (errno != EINPROGRESS) {
			ret = -errno;
			goto out_close;
		}
		h->connecting = true;
	}
	ret = update_events(h);
	if (ret)
		goto out_close;
	h->stats.connects++;
	return 0;

out_close:
	close(h->fd);
	h->fd = -1;
	h->connecting = false;
	h->events = 0;
	return ret;
}

static struct question *find(struct hook *h, uint64_t id)
{
	for (unsigned int i = 0; i < h->p.max_pending; i++)
		if (h->q[i].used && h->q[i].id == id)
			return &h->q[i];
	return NULL;
}

static struct question *free_slot(struct hook *h)
{
	for (unsigned int i = 0; i < h->p.max_pending; i++)
		if (!h->q[i].used)
			return &h->q[i];
	return NULL;
}

/* The status a refused request gets (RFC 9110 15.5.4). */
#define HTTP_STATUS_FORBIDDEN 403U

/*
 * The question is done: its slot freed first, then its answer call. A
 * request's: edits, the hook's fields when allowed (NULL: none), wiped
 * after the call.
 */
static void resolve(struct hook *h, struct question *q, enum net_verdict v,
		    const char *reason, const char *detail,
		    struct net_http_decision *edits)
{
	struct net_decision d = { .verdict = v };
	struct net_http_decision none;
	void *cookie = q->cookie;

	q->used = false;
	h->stats.pending--;
	if (q->line) {
		h->p.line_answer(h->p.opaque, cookie, NULL, 0, reason);
		return;
	}
	if (!q->http) {
		snprintf(d.reason, sizeof(d.reason), "%s", reason);
		h->p.answer(h->p.opaque, cookie, &d, detail);
		return;
	}
	if (!edits || v != NET_VERDICT_ALLOW) {
		none = (struct net_http_decision){ .verdict = v };
		edits = &none;
	}
	edits->verdict = v;
	edits->status = v == NET_VERDICT_ALLOW ? 0 : HTTP_STATUS_FORBIDDEN;
	snprintf(edits->reason, sizeof(edits->reason), "%s", reason);
	h->p.http_answer(h->p.opaque, cookie, q->id, edits, detail);
	explicit_bzero(edits, sizeof(*edits));
}

/* Writes what it can; -errno when the connection failed. */
static int flush(struct hook *h)
{
	ssize_t n;

	while (!h->connecting && h->out.len) {
		n = send(h->fd, bytequeue__peek(&h->out), h->out.len,
			 MSG_DONTWAIT | MSG_NOSIGNAL);
		if (n < 0) {
			if (errno == EINTR)
				continue;
			return errno == EAGAIN ? 0 : -errno;
		}
		bytequeue__consume(&h->out, n);
	}
	return 0;
}

/* The socket changed: a new target, and the old connection's questions. */
static void retarget(struct hook *h, const char *path)
{
	if (!strcmp(h->path, path))
		return;
	conn_close(h, HOOK_CHANGED);
	snprintf(h->path, sizeof(h->path), "%s", path);
	h->generation++;
}

/* What a question is, for ask(). */
struct asking {
	const char *socket;
	unsigned int timeout_ms;
	const struct net_flow *f;
	const struct net_ask *flow;	       /* a flow's, or */
	const struct hook_http_question *http; /* a request's, or */
	const struct hook_line_question *line; /* another type's */
};

static int ask(struct hook *h, const struct asking *a, void *cookie,
	       uint64_t now, uint64_t *id)
{
	size_t line_max = a->http ? HOOK_HTTP_LINE_MAX : HOOK_LINE_MAX;
	/* Room for a request's line however many flows' lines wait. */
	size_t out_max =
		(size_t)h->p.max_pending * HOOK_LINE_MAX + HOOK_HTTP_LINE_MAX;
	struct question *q;
	char *line;
	int n, ret;

	if (strlen(a->socket) > NET_HOOK_PATH_MAX || !a->socket[0])
		return -ENAMETOOLONG;
	retarget(h, a->socket);
	q = free_slot(h);
	/* A hook that reads none of our lines holds at most this many. */
	if (!q || h->out.len + line_max > out_max) {
		h->stats.failures++;
		return -EBUSY;
	}
	if (h->fd < 0) {
		ret = conn_open(h);
		if (ret) {
			h->stats.failures++;
			return ret;
		}
	}
	ret = bytequeue__reserve(&h->out, line_max);
	line = ret ? NULL : (char *)bytequeue__space(&h->out);
	if (ret)
		n = ret;
	else if (a->line)
		n = a->line->build(line, line_max, h->next_id, a->line->arg);
	else if (a->http)
		n = hook_msg__http_question(line, line_max, h->next_id, a->f,
					    a->http);
	else
		n = hook_msg__question(line, line_max, h->next_id, a->f,
				       a->flow);
	if (n < 0) {
		h->stats.failures++;
		return n;
	}
	bytequeue__commit(&h->out, n);
	*q = (struct question){ .used = true,
				.http = a->http,
				.line = a->line,
				.flow = a->http ? a->http->flow : 0,
				.id = h->next_id++,
				.deadline_ms = now + a->timeout_ms,
				.cookie = cookie };
	*id = q->id;
	h->stats.questions++;
	h->stats.pending++;
	/* A failed send fails the connection, this question with it. */
	ret = flush(h);
	if (!ret)
		ret = update_events(h);
	if (ret)
		conn_close(h, HOOK_UNREACHABLE);
	return 0;
}

int hook__ask(struct hook *h, const struct net_flow *f, const struct net_ask *a,
	      void *cookie, uint64_t now, uint64_t *id)
{
	struct asking as = { .socket = a->socket,
			     .timeout_ms = a->timeout_ms,
			     .f = f,
			     .flow = a };

	return ask(h, &as, cookie, now, id);
}

int hook__ask_http(struct hook *h, const struct net_flow *f,
		   const struct hook_http_question *q, void *cookie,
		   uint64_t now, uint64_t *id)
{
	struct asking as = { .socket = q->socket,
			     .timeout_ms = q->timeout_ms,
			     .f = f,
			     .http = q };

	if (!h->p.http_answer)
		return -EINVAL;
	return ask(h, &as, cookie, now, id);
}

int hook__ask_line(struct hook *h, const struct hook_line_question *q,
		   void *cookie, uint64_t now, uint64_t *id)
{
	struct asking as = { .socket = q->socket,
			     .timeout_ms = q->timeout_ms,
			     .line = q };

	if (!h->p.line_answer || !q->build)
		return -EINVAL;
	return ask(h, &as, cookie, now, id);
}

const char *hook__failure(int err)
{
	if (err == -EBUSY)
		return HOOK_BUSY;
	/* Ours, not the hook's: out of memory, a question past a line. */
	if (err == -ENOMEM || err == -ENOSPC || err == -EINVAL)
		return HOOK_ERROR;
	return HOOK_UNREACHABLE;
}

void hook__cancel(struct hook *h, uint64_t id)
{
	struct question *q = find(h, id);

	if (q) {
		q->used = false;
		h->stats.pending--;
	}
}

int hook__timeout(const struct hook *h, uint64_t now)
{
	uint64_t next = UINT64_MAX;

	for (unsigned int i = 0; i < h->p.max_pending; i++) {
		const struct question *q = &h->q[i];

		if (!q->used)
			continue;
		if (q->fail || q->deadline_ms <= now)
			return 0;
		if (q->deadline_ms < next)
			next = q->deadline_ms;
	}
	if (next == UINT64_MAX)
		return -1;
	return next - now > INT_MAX ? INT_MAX : (int)(next - now);
}

/* A request's answer, by its verdict. */
static void answer_http(struct hook *h, struct question *q,
			const struct hook_answer *a,
			struct net_http_decision *edits)
{
	switch (a->verdict) {
	case HOOK_VERDICT_GRANT: /* no fields of its own */
		edits->nr_headers = 0;
		fallthrough;
	case HOOK_VERDICT_GRANT_HTTP:
		resolve(h, q, NET_VERDICT_ALLOW, HOOK_GRANT, a->reason, edits);
		break;
	case HOOK_VERDICT_DENY:
		resolve(h, q, NET_VERDICT_DENY, HOOK_DENY, a->reason, NULL);
		break;
	case HOOK_VERDICT_INVALID:
		resolve(h, q, NET_VERDICT_DENY, HOOK_INVALID, a->reason, NULL);
		break;
	case HOOK_VERDICT_UNKNOWN:
		resolve(h, q, NET_VERDICT_DENY, HOOK_UNKNOWN, a->verdict_text,
			NULL);
		break;
	}
}

/*
 * A flow's "grant-http": intercepted (NET_VERDICT_HTTP), as the answer
 * says; its question's id goes with it, for its requests' questions.
 */
static void grant_flow_http(struct hook *h, struct question *q,
			    const struct hook_answer *a)
{
	struct net_decision d = {
		.verdict = NET_VERDICT_HTTP,
		.http_tls = a->tls == HOOK_TLS_YES,
		.http_tls_auto = a->tls == HOOK_TLS_AUTO,
		.hook_flow = q->id,
		.hook_each_request = a->each_request,
	};
	void *cookie = q->cookie;

	q->used = false;
	h->stats.pending--;
	snprintf(d.reason, sizeof(d.reason), "%s", HOOK_GRANT_HTTP);
	snprintf(d.http_host, sizeof(d.http_host), "%s", a->host);
	h->p.answer(h->p.opaque, cookie, &d, a->reason);
}

/* A flow's answer, by its verdict. */
static void answer_flow(struct hook *h, struct question *q,
			const struct hook_answer *a)
{
	switch (a->verdict) {
	case HOOK_VERDICT_GRANT:
		resolve(h, q, NET_VERDICT_ALLOW, HOOK_GRANT, a->reason, NULL);
		break;
	case HOOK_VERDICT_DENY:
		resolve(h, q, NET_VERDICT_DENY, HOOK_DENY, a->reason, NULL);
		break;
	case HOOK_VERDICT_GRANT_HTTP:
		if (!a->flow_invalid) {
			grant_flow_http(h, q, a);
			break;
		}
		resolve(h, q, NET_VERDICT_DENY, HOOK_INVALID, a->flow_invalid,
			NULL);
		break;
	case HOOK_VERDICT_INVALID:
		resolve(h, q, NET_VERDICT_DENY, HOOK_INVALID, a->reason, NULL);
		break;
	case HOOK_VERDICT_UNKNOWN:
		resolve(h, q, NET_VERDICT_DENY, HOOK_UNKNOWN, a->verdict_text,
			NULL);
		break;
	}
}

/*
 * One answer line; -EBADMSG when it is not one. The line and the fields
 * read from it may hold the hook's secrets: wiped here. An answer that
 * names a "flow" must name its request's.
 */
static int answer_line(struct hook *h, const char *line, size_t n)
{
	struct net_http_decision edits = { .verdict = NET_VERDICT_ALLOW };
	struct hook_answer a;
	struct question *q;
	int ret;

	ret = hook_msg__answer(line, n, &a, &edits);
	if (ret)
		goto out_wipe;
	q = find(h, a.id);
	if (!q || q->fail) {
		h->stats.ignored++;
		goto out_wipe;
	}
	h->stats.answers++;
	if (q->line) {
		q->used = false;
		h->stats.pending--;
		h->p.line_answer(h->p.opaque, q->cookie, line, n, NULL);
		goto out_wipe;
	}
	if (a.flow && a.flow != q->flow)
		resolve(h, q, NET_VERDICT_DENY, HOOK_INVALID,
			"flow not the question's", NULL);
	else if (q->http)
		answer_http(h, q, &a, &edits);
	else
		answer_flow(h, q, &a);
out_wipe:
	explicit_bzero(&edits, sizeof(edits));
	return ret;
}

/*
 * Reads what the hook sent and answers each whole line: 0, -EBADMSG
 * (not an answer), -EMSGSIZE (a line past HOOK_LINE_MAX), -EPIPE (the
 * hook closed), -errno.
 */
static int read_answers(struct hook *h)
{
	char *nl;
	size_t at;
	ssize_t n;
	int ret;

	for (int i = 0; i < HOOK_READ_BUDGET; i++) {
		n = recv(h->fd, h->in + h->in_len, sizeof(h->in) - h->in_len,
			 MSG_DONTWAIT);
		if (n < 0) {
			if (errno == EINTR)
				continue;
			return errno == EAGAIN ? 0 : -errno;
		}
		if (!n)
			return -EPIPE;
		h->in_len += n;
		at = 0;
		while ((nl = memchr(h->in + at, '\n', h->in_len - at))) {
			ret = answer_line(h, h->in + at, nl - (h->in + at));
			if (ret)
				return ret;
			at = nl + 1 - h->in;
		}
		memmove(h->in, h->in + at, h->in_len - at);
		h->in_len -= at;
		/* Lines answered may have held secrets: none stays behind. */
		explicit_bzero(h->in + h->in_len, at);
		if (h->in_len == sizeof(h->in))
			return -EMSGSIZE;
	}
	return 0;
}

static int finish_connect(struct hook *h)
{
	int soerr = 0;
	socklen_t len = sizeof(soerr);

	if (getsockopt(h->fd, SOL_SOCKET, SO_ERROR, &soerr, &len))
		return -errno;
	if (soerr)
		return -soerr;
	h->connecting = false;
	return 0;
}

/* The connection's I/O, as its readiness says. */
static void conn_run(struct hook *h)
{
	struct epoll_event ev;
	int n, ret = 0;

	n = epoll_wait(h->epoll_fd, &ev, 1, 0);
	if (n <= 0)
		return;
	if (h->connecting && (ev.events & (EPOLLOUT | EPOLLERR | EPOLLHUP)))
		ret = finish_connect(h);
	if (!ret && (ev.events & (EPOLLOUT | EPOLLERR | EPOLLHUP)))
		ret = flush(h);
	if (!ret && !h->connecting &&
	    (ev.events & (EPOLLIN | EPOLLERR | EPOLLHUP)))
		ret = read_answers(h);
	if (!ret)
		ret = update_events(h);
	if (ret)
		conn_close(h, ret == -EBADMSG || ret == -EMSGSIZE ?
				      HOOK_ERROR :
				      HOOK_UNREACHABLE);
}

void hook__run(struct hook *h, uint64_t now)
{
	if (h->fd >= 0)
		conn_run(h);
	for (unsigned int i = 0; i < h->p.max_pending; i++) {
		struct question *q = &h->q[i];

		if (!q->used)
			continue;
		if (q->fail) {
			h->stats.failures++;
			resolve(h, q, NET_VERDICT_DENY, q->fail, "", NULL);
		} else if (q->deadline_ms <= now) {
			h->stats.timeouts++;
			resolve(h, q, NET_VERDICT_DENY, HOOK_TIMEOUT, "", NULL);
		}
	}
}

bool hook__is_target(const struct hook *h, const char *socket)
{
	return h->generation && !strcmp(h->path, socket);
}

uint64_t hook__generation(const struct hook *h)
{
	return h->generation;
}

void hook__stats(const struct hook *h, struct hook_stats *s)
{
	*s = h->stats;
}
