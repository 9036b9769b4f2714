/* SPDX-License-Identifier: GPL-2.0 */
#ifndef KILN_FS_VIRTUAL_H
#define KILN_FS_VIRTUAL_H

#include "lib/compiler.h"
#include "devices/fs/backend.h"

/*
 * The `virtual` mount source: every FUSE request of the mount goes, as the
 * guest sent it, over a Unix socket to a server the orchestrator runs,
 * and the server's replies come back the same way. The server's socket
 * type is the transport: SOCK_SEQPACKET (one message per packet) or
 * SOCK_STREAM (messages back to back, each framed by its header's len).
 * The wire protocol is in Documentation/virtual-fs.md.
 *
 * Only .forward and .destroy are set. forward() never blocks: it sends
 * with MSG_DONTWAIT (or queues the request, in order, while the socket is
 * full) and returns 0; every outcome comes through req->complete, exactly
 * once, from the backend's relay thread or, for a request that fails at
 * once (no server, a malformed request), from the caller before
 * forward() returns. A reply passed to complete is valid only during the
 * call (it is the relay thread's buffer). A request with a header whose
 * len or unique is not req->len or req->unique, or whose unique is 0,
 * completes with -EINVAL. A request without an answer after timeout_ms
 * completes with -EIO.
 *
 * Once the server has gone away (EOF, ECONNRESET, EPIPE, another socket
 * error, a stream reply whose len cannot be one) every request it was
 * sent completes with -EIO; the ones not sent yet, and the next ones,
 * make the relay thread connect again. The new connection first gets the
 * guest's FUSE_INIT again, with unique 0. If nothing accepts, the waiting
 * requests and every one that comes in the next VIRTUAL_FS_RETRY_MS
 * complete with -EIO at once.
 *
 * Threads and seccomp: create() makes the first socket (socket +
 * setsockopt + connect) and the relay thread's wake eventfd before the
 * filter is installed; the relay thread itself is started by the first
 * forward(), on the already filtered device thread, so it inherits the
 * filter. After create, forward() makes sendto, write (the eventfd) and
 * futex, plus, the first time, the thread's creation (clone3 or clone,
 * mmap, mprotect, rt_sigprocmask, ...); the relay thread makes poll,
 * recvfrom, sendto, read, write, futex, rt_sigprocmask, clock_gettime,
 * and, to reconnect, close, socket (AF_UNIX), setsockopt (SO_SNDBUF) and
 * connect; at its end madvise/munmap/exit; destroy() adds futex (the
 * join) and close. malloc/free may add brk, mmap, munmap.
 */

#define VIRTUAL_FS_DEFAULT_TIMEOUT_MS 5000U
/* After a failed reconnection, requests fail at once for this long. */
#define VIRTUAL_FS_RETRY_MS 100U

struct virtual_fs_params {
	const char *name; /* for the log; copied */
	/* absolute path of the orchestrator's listening socket */
	const char *socket;
	unsigned int timeout_ms; /* per request; 0 = the default */
};

/*
 * Connects to p->socket (SOCK_SEQPACKET, or SOCK_STREAM if the listener
 * is one). A missing socket, a refused connection or a path
 * that is not absolute or too long for sun_path answers -errno (logged,
 * naming the path). destroy() stops the relay thread and completes every
 * request still pending with -EIO (forgets with 0) on the calling thread
 * before it returns.
 */
int __must_check virtual_fs__create(struct fs_backend **out,
				    const struct virtual_fs_params *p);

#endif
