// SPDX-License-Identifier: GPL-2.0
/*
 * The control API's server: a JSON-RPC 2.0 server on a Unix socket, one
 * thread with a poll loop over the listening socket, the clients and one
 * agent connection per request in flight (see api.h,
 * Documentation/api.md); the parts are listed in api-internal.h.
 *
 * Everything is nonblocking and bounded: a client's request line is at
 * most API_MAX_MESSAGE bytes; an agent connection holds at most one frame
 * being read plus what it has to send. Backpressure both ways: an agent
 * connection whose client has more than API_OUT_HIGH bytes unsent is not
 * read (the guest's writes then stop on vsock credit), and a client is not
 * read while it has API_OUT_HIGH bytes unsent or while one of its agent
 * connections has 4 * API_AGENT_OUT_HIGH bytes to send (spawn.write and
 * fs.write answer only once their bytes are below API_AGENT_OUT_HIGH, so a
 * client that waits for answers never gets there).
 *
 * Objects die in two steps: a client or call is marked dead where the
 * event happens and freed by reap() between poll rounds, so no handler
 * frees something a caller still holds.
 */
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "lib/thread-filter.h"
#include "vmm/api/api-internal.h"

#define API_AGENT_TIMEOUT_MS 10000 /* default agent_timeout_ms */

/* Monotonic milliseconds: the clock of every timer in the API. */
uint64_t api_now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* A call is read unless its client has too much unsent already. */
static bool call_wants_input(const struct call *k)
{
	if (k->st == AG_CONNECT || k->st == AG_HELLO)
		return true;
	return !k->client || k->client->out.len <= API_OUT_HIGH;
}

/* Frees what was marked dead: calls first, they point at clients. */
static void reap(struct api *api)
{
	struct client **cp, *c;
	struct call **kp, *k;

	for (kp = &api->calls; (k = *kp);) {
		if (k->dead) {
			*kp = k->next;
			call_free(api, k);
		} else {
			kp = &k->next;
		}
	}
	for (cp = &api->clients; (c = *cp);) {
		if (c->dead) {
			*cp = c->next;
			bytequeue__free(&c->in);
			bytequeue__free(&c->out);
			json_decref(c->body_msg);
			api->nr_clients--;
			free(c);
		} else {
			cp = &c->next;
		}
	}
	grants_reap(api); /* after the clients that pointed at them */
}

static int poll_add(struct api *api, size_t *n, int fd, short events,
		    enum ref_kind kind, void *ptr)
{
	if (*n == api->pfd_cap) {
		size_t cap = api->pfd_cap ? api->pfd_cap * 2 : 64;
		struct pollfd *pf = realloc(api->pfds, cap * sizeof(*pf));
		struct pref *rf;

		if (!pf)
			return -ENOMEM;
		api->pfds = pf;
		rf = realloc(api->refs, cap * sizeof(*rf));
		if (!rf)
			return -ENOMEM;
		api->refs = rf;
		api->pfd_cap = cap;
	}
	api->pfds[*n] = (struct pollfd){ .fd = fd, .events = events };
	api->refs[*n] = (struct pref){ .kind = kind,
				       .ptr = ptr,
				       .reading = events & POLLIN };
	(*n)++;
	return 0;
}

static int poll_build(struct api *api, size_t *n, uint64_t now, int *timeout)
{
	struct api_grant *g;
	uint64_t next = 0, t;
	struct client *c;
	struct call *k;
	short ev;
	int ret;

	*n = 0;
	ret = poll_add(api, n, api->wake_fd, POLLIN, REF_WAKE, NULL);
	/* Backing off after EMFILE: the slot stays, asking for nothing. */
	ev = now >= api->accept_at ? POLLIN : 0;
	if (!ev)
		next = api->accept_at;
	ret = ret ?: poll_add(api, n, api->listen_fd, ev, REF_LISTEN, NULL);
	for (g = api->grants; !ret && g; g = g->next)
		if (!g->dead)
			ret = poll_add(api, n, g->listen_fd, ev, REF_GRANT, g);
	t = grants_next_timer(api);
	if (t && (!next || t < next))
		next = t;
	for (c = api->clients; !ret && c; c = c->next) {
		if (c->dead)
			continue;
		ev = (client_wants_input(c) ? POLLIN : 0) |
		     (c->out.len ? POLLOUT : 0);
		/* Even with no events: POLLHUP says it went away. */
		ret = poll_add(api, n, c->fd, ev, REF_CLIENT, c);
	}
	for (k = api->calls; !ret && k; k = k->next) {
		if (k->dead)
			continue;
		t = call_next_timer(k);
		if (t && (!next || t < next))
			next = t;
		if (k->fd < 0)
			continue;
		ev = (call_wants_input(k) ? POLLIN : 0) |
		     (k->aout.len && !k->out_broken ? POLLOUT : 0);
		if (ev)
			ret = poll_add(api, n, k->fd, ev, REF_CALL, k);
	}
	*timeout = !next ? -1 : next <= now ? 0 : (int)(next - now);
	return ret;
}

static void poll_dispatch(struct api *api, size_t n, uint64_t now)
{
	uint64_t val;
	size_t i;

	for (i = 0; i < n; i++) {
		short re = api->pfds[i].revents;
		struct pref *ref = &api->refs[i];
		struct client *c = ref->ptr;
		struct call *k = ref->ptr;

		if (!re)
			continue;
		switch (ref->kind) {
		case REF_WAKE:
			if (read(api->wake_fd, &val, sizeof(val)) < 0)
				(void)0; /* nonblocking: nothing to read */
			break;
		case REF_LISTEN:
			if (re & POLLIN)
				client_accept(api, NULL);
			break;
		case REF_GRANT:
			if ((re & POLLIN) &&
			    !((struct api_grant *)ref->ptr)->dead)
				client_accept(api, ref->ptr);
			break;
		case REF_CLIENT:
			if (c->dead)
				break;
			if (re & POLLOUT)
				client_writable(c);
			if (c->dead)
				break;
			if (re & POLLIN)
				client_readable(c);
			else if (re & (POLLHUP | POLLERR | POLLNVAL))
				client_kill(c);
			break;
		case REF_CALL:
			if (k->dead)
				break;
			if (re & POLLOUT)
				agent_writable(k, now);
			if (!k->dead && k->fd >= 0 && ref->reading &&
			    (re & (POLLIN | POLLHUP | POLLERR)))
				agent_readable(k, now);
			break;
		}
	}
}

static void *api_thread(void *arg)
{
	struct api *api = arg;
	struct client *c;
	struct call *k;
	uint64_t now;
	size_t n;
	int timeout;

	while (!atomic_load(&api->stop)) {
		now = api_now_ms();
		for (k = api->calls; k; k = k->next)
			if (!k->dead)
				call_tick(k, now);
		for (c = api->clients; c; c = c->next) {
			client_pump(api, c);
			client_maybe_close(c);
		}
		client_shutdown_asked(api);
		grants_tick(api, now);
		events_pump(api);
		reap(api);
		if (poll_build(api, &n, now, &timeout)) {
			pr_err("api: out of memory, waiting");
			timeout = 100;
			n = 2;
		}
		if (poll(api->pfds, n, timeout) < 0 && errno != EINTR) {
			pr_err("api: poll: %s", strerror(errno));
			usleep(100000); /* ENOMEM: let memory come back */
			continue;
		}
		poll_dispatch(api, n, api_now_ms());
		reap(api);
	}
	return NULL;
}

/* Refuse a path another live server listens on; replace a stale one. */
static int take_path(const char *path)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	struct stat st;
	int fd, ret;

	if (lstat(path, &st) < 0)
		return errno == ENOENT ? 0 : -errno;
	if (!S_ISSOCK(st.st_mode))
		return -EEXIST;
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	strcpy(sa.sun_path, path);
	ret = connect(fd, (struct sockaddr *)&sa, sizeof(sa));
	close(fd);
	if (!ret)
		return -EADDRINUSE;
	return unlink(path) < 0 ? -errno : 0;
}

int api_listen_at(const char *path, int *fd)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	int ret;

	if (strlen(path) >= sizeof(sa.sun_path))
		return -ENAMETOOLONG;
	strcpy(sa.sun_path, path);
	ret = take_path(path);
	if (ret)
		return ret;
	*fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (*fd < 0)
		return -errno;
	if (bind(*fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
		ret = -errno;
		goto out_close;
	}
	/*
	 * Whoever holds the main socket commands the guest as root, a
	 * grant's what its persona may: only the vmm's owner connects.
	 */
	if (chmod(path, 0600) < 0 || listen(*fd, 64) < 0) {
		ret = -errno;
		unlink(path);
		goto out_close;
	}
	return 0;
out_close:
	close(*fd);
	*fd = -1;
	return ret;
}

static int api_listen(struct api *api)
{
	return api_listen_at(api->path, &api->listen_fd);
}

int api__create(struct api **out, const struct api_params *p)
{
	struct api *api;
	int ret;

	if (!p->socket_path || !p->open_agent ||
	    (p->config_facts && !json_is_array(p->config_facts)))
		return -EINVAL;
	api = calloc(1, sizeof(*api));
	if (!api)
		return -ENOMEM;
	api->p = *p;
	api->listen_fd = api->wake_fd = -1;
	api->agent_timeout_ms = p->agent_timeout_ms ? p->agent_timeout_ms :
						      API_AGENT_TIMEOUT_MS;
	api->path = strdup(p->socket_path);
	api->config_facts = p->config_facts ? json_deep_copy(p->config_facts) :
					      json_array();
	api->p.socket_path = api->path;
	api->p.config_facts = NULL;
	if (p->reseed) {
		memcpy(api->reseed, p->reseed, sizeof(api->reseed));
		api->reseed_pending = true;
	}
	api->p.reseed = NULL;
	if (p->reseed && p->net_mac && p->net &&
	    strlen(p->net) < sizeof(api->net)) {
		memcpy(api->net_mac, p->net_mac, sizeof(api->net_mac));
		snprintf(api->net, sizeof(api->net), "%s", p->net);
		api->has_net = true;
	}
	api->p.net_mac = NULL;
	api->p.net = NULL;
	if (p->mounts_plan != API_MOUNTS_NONE) {
		api->mounts = malloc(p->mounts_len ? p->mounts_len : 1);
		if (api->mounts)
			memcpy(api->mounts, p->mounts, p->mounts_len);
		api->mounts_step = p->mounts_plan == API_MOUNTS_CAPTURE ?
					   MOUNTS_DETACH :
					   MOUNTS_ATTACH;
	}
	api->p.mounts = NULL;
	if (!api->path || !api->config_facts ||
	    (p->mounts_plan != API_MOUNTS_NONE && !api->mounts)) {
		ret = -ENOMEM;
		goto out_free;
	}
	/*
	 * jansson seeds its hash function on first use, from /dev/urandom:
	 * now, while the monitor may still open files.
	 */
	json_object_seed(0);
	ret = events_init(&api->events);
	if (ret)
		goto out_free;
	api->events_ready = true;
	api->wake_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (api->wake_fd < 0) {
		ret = -errno;
		goto out_free;
	}
	ret = api_listen(api);
	if (ret)
		goto out_free;
	*out = api;
	return 0;
out_free:
	if (api->listen_fd >= 0)
		close(api->listen_fd);
	if (api->wake_fd >= 0)
		close(api->wake_fd);
	if (api->events_ready)
		events_exit(&api->events);
	json_decref(api->config_facts);
	free(api->mounts);
	free(api->path);
	free(api);
	return ret;
}

int api__start(struct api *api, const struct sock_fprog *filter)
{
	struct rpc r = { .api = api };
	sigset_t all, old;
	struct call *k;
	int ret;

	if (api->p.agent_ready || agent_gated(api)) {
		k = call_new(&r, CALL_PROBE, false);
		if (!k)
			return -ENOMEM;
		k->retry_at = api_now_ms();
	}
	/* Signals are for the main thread: this one starts with all blocked. */
	sigfillset(&all);
	/* Not SIGSYS: the seccomp trap must reach its handler and say why. */
	sigdelset(&all, SIGSYS);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	ret = thread_filter__spawn(&api->thread, filter, api_thread, api);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	if (!ret)
		api->started = true;
	return ret;
}

void api__destroy(struct api *api)
{
	uint64_t one = 1;
	struct client *c;
	struct call *k;

	if (!api)
		return;
	if (api->started) {
		atomic_store(&api->stop, true);
		if (write(api->wake_fd, &one, sizeof(one)) < 0)
			pr_err("api: waking the thread: %s", strerror(errno));
		pthread_join(api->thread, NULL);
	}
	for (c = api->clients; c; c = c->next)
		c->shutdown_after = false;
	events_flush(api);
	for (c = api->clients; c; c = c->next)
		if (!c->dead)
			client_kill(c);
	for (k = api->calls; k; k = k->next)
		call_done(k);
	grants_exit(api);
	reap(api);
	close(api->listen_fd);
	close(api->wake_fd);
	unlink(api->path);
	events_exit(&api->events);
	json_decref(api->config_facts);
	free(api->pfds);
	free(api->refs);
	free(api->mounts);
	free(api->path);
	explicit_bzero(api->reseed, sizeof(api->reseed));
	free(api);
}
