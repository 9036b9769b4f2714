// SPDX-License-Identifier: GPL-2.0
/*
 * The agent's accept loop: one child process per connection. The child
 * greets with HELLO, reads the one request of the connection, serves it
 * and exits; nothing is shared between connections, so a request that
 * crashes or hangs costs only its own connection.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <grp.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "guest/agent/agent.h"
#include "guest/agent/conn.h"
#include "guest/agent/container.h"
#include "guest/agent/facts.h"
#include "guest/agent/fs.h"
#include "guest/agent/proc.h"
#include "guest/agent/mounts.h"
#include "guest/agent/reseed.h"

/* After a failed accept that may repeat at once (EMFILE...), pause. */
#define ACCEPT_BACKOFF_NS (10 * 1000 * 1000)

static void on_sigchld(int sig)
{
	/* Only there to interrupt ppoll(); the loop reaps. */
}

static void reap_connections(void)
{
	while (waitpid(-1, NULL, WNOHANG) > 0)
		;
}

/*
 * Commands get pipes or a terminal as fds 0-2, put there with dup2(); if
 * one of those were closed here, a pipe could land on it and be clobbered.
 */
static void ensure_stdio(void)
{
	int fd;

	for (int i = 0; i < 3; i++) {
		if (fcntl(i, F_GETFD) != -1)
			continue;
		fd = open("/dev/null", O_RDWR);
		if (fd >= 0 && fd != i) {
			dup2(fd, i);
			close(fd);
		}
	}
}

static int send_hello(struct conn *c)
{
	struct kiln_buf b;
	int ret;

	kiln_buf__init(&b);
	ret = kiln_tlv__put_u64(&b, KILN_T_VERSION, KILN_AGENT_VERSION);
	if (!ret)
		ret = kiln_tlv__put_u64(
			&b, KILN_T_FEATURES,
			KILN_FEATURE_RESEED | KILN_FEATURE_MOUNTS |
				KILN_FEATURE_NET_RENEW |
				KILN_FEATURE_ENV_MERGE | KILN_FEATURE_USER |
				KILN_FEATURE_CONTAINER | KILN_FEATURE_CONFINE);
	if (!ret)
		ret = conn__send_buf(c, KILN_MSG_HELLO, &b);
	kiln_buf__free(&b);
	return ret;
}

/* POWEROFF: answer first, the VM goes away right after. */
static void poweroff(struct conn *c, pid_t pid)
{
	if (!pid) {
		conn__error(c, ENOTSUP, "not in a VM");
		return;
	}
	if (conn__ok(c))
		return;
	kill(pid, SIGUSR2); /* init's (and busybox's) power off signal */
}

/*
 * T_AS_UID (KILN_FEATURE_CONFINE): this connection's process becomes the
 * uid, the gid the same, with no supplementary group and no way to gain
 * privileges back (no_new_privs: a setuid binary runs as the caller), so
 * the guest kernel enforces file access on everything it serves. 1: no
 * T_AS_UID; 0: done; -errno: could not (answered by the caller). An
 * agent that is not root (kiln-agent-host in the tests) can only be
 * itself.
 */
static int confine(const struct frame *req, uid_t *uid)
{
	struct kiln_tlv_iter it;
	const uint8_t *val;
	uint64_t v = 0;
	uint32_t vlen;
	uint16_t tag;
	bool found = false;

	kiln_tlv__iter(&it, req->data, req->len);
	while (kiln_tlv__next(&it, &tag, &val, &vlen) == 1) {
		if (tag != KILN_T_AS_UID)
			continue;
		if (kiln_tlv__u64(val, vlen, &v) || !v || v >= (uid_t)-1)
			return -EINVAL;
		found = true;
	}
	if (!found)
		return 1;
	*uid = v;
	if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0))
		return -errno;
	if (geteuid() && geteuid() == *uid)
		return 0;
	if (setgroups(0, NULL) || setresgid(*uid, *uid, *uid) ||
	    setresuid(*uid, *uid, *uid))
		return -errno;
	return 0;
}

void agent__serve_connection(int fd, const struct agent_config *cfg)
{
	uid_t uid = 0;
	struct frame req;
	struct conn c;
	int ret;

	if (conn__init(&c, fd))
		return;
	if (send_hello(&c))
		goto out;
	ret = conn__recv(&c, &req);
	/* Over KILN_FRAME_MAX, or the host left: nothing to answer. */
	if (ret)
		goto out;
	/* Only data frames follow the request: no TLV escapes the check. */
	ret = confine(&req, &uid);
	if (ret < 0) {
		conn__error(&c, -ret, "cannot become uid %u",
			    (unsigned int)uid);
		goto out;
	}
	if (req.type == KILN_MSG_PROC_START)
		proc__start(&c, &req, cfg->default_cwd);
	else if (fs__is_request(req.type))
		fs__handle(&c, &req);
	else if (req.type == KILN_MSG_FACTS)
		facts__handle(&c, &req, cfg->made_points);
	else if (req.type == KILN_MSG_POWEROFF)
		poweroff(&c, cfg->poweroff_pid);
	else if (req.type == KILN_MSG_RESEED)
		/* init's pid only in a VM: eth0 is never the host's. */
		reseed__handle(&c, &req, cfg->poweroff_pid != 0);
	else if (req.type == KILN_MSG_MOUNTS_DETACH ||
		 req.type == KILN_MSG_MOUNTS_ATTACH)
		mounts__handle(&c, &req);
	else if (req.type == KILN_MSG_CONTAINER_CREATE ||
		 req.type == KILN_MSG_CONTAINER_DELETE ||
		 req.type == KILN_MSG_CONTAINER_LIST)
		/* init's pid only in a VM: the host's cgroups are not ours. */
		container__handle(&c, &req, cfg->poweroff_pid != 0);
	else
		conn__error(&c, EPROTO, "message type %u is not a request",
			    req.type);
out:
	conn__destroy(&c);
}

/* In the new child: back to the defaults, then serve @fd and exit. */
static void __attribute__((noreturn))
connection_child(int listen_fd, int fd, const sigset_t *mask,
		 const struct agent_config *cfg)
{
	close(listen_fd);
	signal(SIGCHLD, SIG_DFL);
	sigprocmask(SIG_SETMASK, mask, NULL);
	agent__serve_connection(fd, cfg);
	_exit(0);
}

static bool accept_error_is_transient(int err)
{
	switch (err) {
	case EINTR:
	case EAGAIN:
	case ECONNABORTED:
	case EPROTO:
	case EPERM:
	case EMFILE:
	case ENFILE:
	case ENOBUFS:
	case ENOMEM:
		return true;
	default:
		return false;
	}
}

int agent__serve(int listen_fd, const struct agent_config *cfg)
{
	struct sigaction sa = { .sa_handler = on_sigchld,
				.sa_flags = SA_NOCLDSTOP };
	struct timespec backoff = { .tv_nsec = ACCEPT_BACKOFF_NS };
	struct pollfd p = { .fd = listen_fd, .events = POLLIN };
	sigset_t chld, old, during;
	int fd, err;
	pid_t pid;

	ensure_stdio();
	/* Writes to a closed pipe or socket are errors, not deaths. */
	signal(SIGPIPE, SIG_IGN);
	sigemptyset(&sa.sa_mask);
	sigaction(SIGCHLD, &sa, NULL);
	/*
	 * SIGCHLD is blocked except inside ppoll(): a connection that ends
	 * between the reaping and the wait still interrupts the wait.
	 */
	sigemptyset(&chld);
	sigaddset(&chld, SIGCHLD);
	sigprocmask(SIG_BLOCK, &chld, &old);
	during = old;
	sigdelset(&during, SIGCHLD);
	/* accept() must not block when a connection went away after poll. */
	fcntl(listen_fd, F_SETFL, fcntl(listen_fd, F_GETFL) | O_NONBLOCK);

	for (;;) {
		reap_connections();
		if (ppoll(&p, 1, NULL, &during) < 0) {
			if (errno == EINTR)
				continue;
			err = errno;
			goto out_fatal;
		}
		fd = accept4(listen_fd, NULL, NULL, SOCK_CLOEXEC);
		if (fd < 0) {
			err = errno;
			if (!accept_error_is_transient(err))
				goto out_fatal;
			if (err != EAGAIN && err != EINTR)
				nanosleep(&backoff, NULL);
			continue;
		}
		pid = fork();
		if (pid == 0)
			connection_child(listen_fd, fd, &old, cfg);
		if (pid < 0)
			fprintf(stderr, "kiln-agent: cannot fork: %s\n",
				strerror(errno));
		close(fd);
	}
out_fatal:
	fprintf(stderr, "kiln-agent: cannot serve: %s\n", strerror(err));
	sigprocmask(SIG_SETMASK, &old, NULL);
	return -err;
}
