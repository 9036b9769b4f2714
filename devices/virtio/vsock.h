/* SPDX-License-Identifier: GPL-2.0 */
#ifndef KILN_VIRTIO_VSOCK_H
#define KILN_VIRTIO_VSOCK_H

#include <stdint.h>

#include "lib/compiler.h"
#include "lib/fdbudget.h"
#include "devices/irq.h"
#include "devices/virtio/device.h"
#include "devices/virtio/guest-mem.h"
#include "lib/log.h"

struct sock_fprog; /* lib/thread-filter.h */

/*
 * virtio-vsock (virtio 1.1, section 5.10), stream sockets only, with the
 * host side on Unix stream sockets (the Firecracker convention):
 *
 *  - host to guest: a host process connects to the listening socket at
 *    uds_path (or hands the device an already connected stream with
 *    vsock__attach_stream) and writes "CONNECT <port>\n"; once the guest
 *    accepts on that vsock port the device answers "OK <host port>\n"
 *    and relays bytes both ways. A refused connection is closed.
 *  - guest to host: a guest connection to CID 2 (the host), port P, is
 *    connected to the Unix socket "<uds_path>_P"; no listener there and
 *    the guest's connect fails (RST).
 *
 * Flow control is virtio-vsock's credit, both ways: the device reads from
 * a host socket only while the guest has credit and receive buffers, and
 * buffers at most VSOCK_BUF_ALLOC bytes per connection that the host is
 * not reading; a guest sending past its credit is reset. One event loop
 * thread per device (io_uring, the sockets in an edge-triggered epoll set
 * the ring polls) does all the work.
 */

#define VSOCK_HOST_CID		2U /* VMADDR_CID_HOST */
#define VSOCK_DEFAULT_GUEST_CID 3U /* the first CID a guest may have */
#define VSOCK_MAX_GUEST_CID	0xfffffffeULL /* U32_MAX is VMADDR_CID_ANY */
#define VSOCK_BUF_ALLOC		(256U * 1024) /* bytes, per connection */
#define VSOCK_MAX_CONNS		1024U	      /* per device, any state */
#define VSOCK_CONNECT_LINE_MAX	32U	      /* bytes of "CONNECT <port>\n" */
#define VSOCK_HANDSHAKE_MS	5000U	      /* to send that line */
#define VSOCK_HOST_PORT_BASE	(1U << 30)    /* host-initiated source ports */

struct vsock_params {
	const char *name;   /* "virtio-vsock0"; outlives the device */
	uint64_t guest_cid; /* 3..VSOCK_MAX_GUEST_CID */
	/*
	 * The listening socket, created here (a stale socket file nobody
	 * listens on is replaced; anything else there is -EADDRINUSE or
	 * -EEXIST), and the prefix of the guest-initiated targets. NULL: no
	 * listener, and every guest connection is refused.
	 */
	const char *uds_path;
	const struct guest_mem *mem;
	struct irq_line irq;
	/*
	 * The monitor's descriptor budget, or NULL: each connection takes
	 * one. Empty, a guest connection is reset and a host one closed.
	 */
	struct fd_budget *fds;
};

struct vsock;

/*
 * Sets the device up and starts listening; its rx and tx queues' kick_fd
 * are eventfds, ready to bind (the event queue has none: the device never
 * uses it). -EINVAL for a bad CID, -ENAMETOOLONG for a path that does not
 * fit a sockaddr_un.
 */
int __must_check vsock__create(struct vsock **out,
			       const struct vsock_params *p);
struct virtio_device *vsock__device(struct vsock *v);
/*
 * Starts the event loop thread. Call it once the thread may run: it
 * inherits the caller's seccomp filter.
 */
int __must_check vsock__start(struct vsock *v, const struct sock_fprog *filter);
/*
 * Treat fd, a connected stream socket, like a client accepted on the
 * listening socket: it is expected to write "CONNECT <port>\n". Any
 * thread, before or after vsock__start. Takes fd in every case (closed on
 * failure): -EAGAIN when too many streams wait to be picked up.
 */
int __must_check vsock__attach_stream(struct vsock *v, int fd);
/* Stops and joins the thread, closes every connection; NULL ok. */
void vsock__destroy(struct vsock *v);

#endif
