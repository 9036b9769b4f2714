// SPDX-License-Identifier: GPL-2.0
/*
 * --isolation namespace: the --mount sources the kernel cannot mount
 * itself (virtual, memory with seeded files, binds with masked paths)
 * served by the same FUSE
 * server and backends as a VM's virtio-fs (devices/fs/), over /dev/fuse
 * instead of a virtqueue. The sandbox's child opens /dev/fuse in its own
 * user namespace (the kernel wants the opener's namespace to be the
 * mounter's), mounts it, and passes the descriptor to the host over its
 * report socket; a thread per mount here reads each request, hands it to
 * the server and writes the reply. A forwarded request (the virtual
 * backend) is answered from the backend's thread, which writes its reply
 * itself (a write to /dev/fuse is one whole reply, from any thread).
 */
#include <errno.h>
#include <poll.h>
#include <stddef.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "devices/fs/fuse.h"
#include "lib/log.h"
#include "lib/resident.h"
#include "vmm/isolate-ns-internal.h"

/* A request: the largest WRITE and its headers; a reply: the largest READ. */
#define NS_FUSE_BUF	(FUSE_MAX_WRITE + 64 * 1024)
#define NS_FUSE_ATTR_MS 1000 /* entry and attr validity, as virtio-fs's */

struct ns_fuse {
	struct fs_backend *backend;
	struct fuse_server *server;
	int fd;	     /* the sandbox's /dev/fuse; -1: not yet */
	int stop_fd; /* eventfd: the thread ends */
	pthread_t thread;
	bool started;
	bool parked; /* the last request handed over was forwarded */
	char name[64];
};

struct ns_fuse_slot {
	struct fuse_req req;
	struct ns_fuse *f;
	struct iovec out, in;
	uint8_t *buf, *reply;
	bool parked; /* forwarded: done() frees it, on whatever thread */
};

/* req is a slot's first member (asserted): the slot is where req is. */
static struct ns_fuse_slot *slot_of(struct fuse_req *req)
{
	_Static_assert(offsetof(struct ns_fuse_slot, req) == 0,
		       "req first in struct ns_fuse_slot");
	return (void *)req;
}

static void slot_free(struct ns_fuse_slot *s)
{
	if (!s)
		return;
	free(s->buf);
	free(s->reply);
	free(s);
}

static struct ns_fuse_slot *slot_alloc(struct ns_fuse *f)
{
	struct ns_fuse_slot *s = calloc(1, sizeof(*s));

	if (!s)
		return NULL;
	s->f = f;
	s->buf = malloc(NS_FUSE_BUF);
	s->reply = malloc(NS_FUSE_BUF);
	if (!s->buf || !s->reply) {
		slot_free(s);
		return NULL;
	}
	return s;
}

static void req_park(struct fuse_req *req)
{
	/* On the loop's thread, within fuse_server__handle. */
	slot_of(req)->parked = true;
	slot_of(req)->f->parked = true;
}

/*
 * The reply, whole, in one write. ENOENT: the kernel dropped the
 * request meanwhile (interrupted); ENODEV: the sandbox is gone.
 */
static void req_done(struct fuse_req *req, const void *reply, uint32_t len)
{
	struct ns_fuse_slot *s = slot_of(req);
	const void *p = reply ? reply : s->reply;

	if (len && write(s->f->fd, p, len) < 0 && errno != ENOENT &&
	    errno != ENODEV)
		pr_warn("%s: a reply to the sandbox: %s", s->f->name,
			strerror(errno));
	/* A forwarded one's slot was given up by the loop: freed here. */
	if (s->parked)
		slot_free(s);
}

static const struct fuse_req_ops req_ops = {
	.park = req_park,
	.done = req_done,
};

static void *serve(void *arg)
{
	struct ns_fuse *f = arg;
	struct pollfd p[2] = { { .fd = f->fd, .events = POLLIN },
			       { .fd = f->stop_fd, .events = POLLIN } };
	struct ns_fuse_slot *s = NULL;
	ssize_t n;

	resident__trim_tls();
	for (;;) {
		if (!s && !(s = slot_alloc(f))) {
			pr_err("%s: out of memory for a request", f->name);
			break;
		}
		if (poll(p, 2, -1) < 0 && errno != EINTR)
			break;
		if (p[1].revents)
			break;
		if (!p[0].revents)
			continue;
		n = read(f->fd, s->buf, NS_FUSE_BUF);
		if (n < 0 &&
		    (errno == EINTR || errno == EAGAIN || errno == ENOENT))
			continue;
		if (n <= 0) /* ENODEV: unmounted, the sandbox gone */
			break;
		s->out = (struct iovec){ s->buf, (size_t)n };
		s->in = (struct iovec){ s->reply, NS_FUSE_BUF };
		s->req = (struct fuse_req){ .ops = &req_ops,
					    .out = &s->out,
					    .nr_out = 1,
					    .out_len = (uint64_t)n,
					    .in = &s->in,
					    .nr_in = 1,
					    .in_len = NS_FUSE_BUF };
		f->parked = false;
		fuse_server__handle(f->server, &s->req);
		if (f->parked)
			s = NULL; /* done() frees it */
	}
	slot_free(s);
	return NULL;
}

bool ns_fuse__wanted(const struct mount_config *m)
{
	return m->type == MOUNT_VIRTUAL ||
	       (m->type == MOUNT_MEMORY && m->nr_files) ||
	       (m->type == MOUNT_BIND && m->nr_mask_paths);
}

int ns_fuse__create(struct ns_fuse **out, const struct mount_config *m,
		    unsigned int index, char *err, size_t len)
{
	struct fuse_server_params p = { .attr_timeout_ms = NS_FUSE_ATTR_MS };
	struct ns_fuse *f = calloc(1, sizeof(*f));
	int ret;

	*out = NULL;
	if (!f)
		return -ENOMEM;
	f->fd = -1;
	snprintf(f->name, sizeof(f->name), "--mount %.40s", m->guest_path);
	f->stop_fd = eventfd(0, EFD_CLOEXEC);
	if (f->stop_fd < 0) {
		ret = -errno;
		free(f);
		return ret;
	}
	/* It says what failed itself: err stays empty. */
	ret = mounts__create_backend(m, index, NULL, &f->backend);
	if (ret) {
		ns_fuse__destroy(f);
		return ret;
	}
	p.name = f->name;
	p.backend = f->backend;
	ret = fuse_server__create(&f->server, &p);
	if (ret) {
		snprintf(err, len, "--mount %s: its FUSE server: %s",
			 m->guest_path, strerror(-ret));
		ns_fuse__destroy(f);
		return ret;
	}
	*out = f;
	return 0;
}

int ns_fuse__start(struct ns_fuse *f, int fuse_fd)
{
	int ret;

	f->fd = fuse_fd;
	ret = pthread_create(&f->thread, NULL, serve, f);
	if (ret)
		return -ret;
	f->started = true;
	return 0;
}

void ns_fuse__destroy(struct ns_fuse *f)
{
	uint64_t one = 1;

	if (!f)
		return;
	if (f->started) {
		if (write(f->stop_fd, &one, sizeof(one)) != sizeof(one))
			pr_warn("%s: stopping its thread: %s", f->name,
				strerror(errno));
		pthread_join(f->thread, NULL);
	}
	/*
	 * The backend first: it completes what it still holds (with -EIO)
	 * on this thread, through req_done, before the server goes.
	 */
	fs_backend__destroy(f->backend);
	fuse_server__destroy(f->server);
	if (f->fd >= 0)
		close(f->fd);
	close(f->stop_fd);
	free(f);
}
