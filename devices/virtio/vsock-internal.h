/* SPDX-License-Identifier: GPL-2.0 */
#ifndef KILN_VIRTIO_VSOCK_INTERNAL_H
#define KILN_VIRTIO_VSOCK_INTERNAL_H

/*
 * What the two halves of virtio-vsock share (vsock.c: the device, its
 * loop and setup; vsock-conn.c: connections, packets both ways and the
 * host's sockets). Everything here runs on the device's loop, under the
 * device lock, unless it says otherwise.
 */
#include <linux/virtio_vsock.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/socket.h>
#include <sys/un.h>

#include "devices/virtio/vsock.h"
#include "lib/evloop.h"
#include "lib/list.h"
#include "lib/warn.h"

#define VSOCK_QUEUE_SIZE 256U
#define RXQ		 0U /* device to driver */
#define TXQ		 1U /* driver to device */
#define EVQ		 2U /* events: never used by this device */
#define NR_QUEUES	 3U

#define MAX_PKT	       (64U * 1024)	      /* payload in one rx packet */
#define CREDIT_LOW     (VSOCK_BUF_ALLOC / 2U) /* tell the guest below this */
#define CONNECT_MS     5000U /* REQUEST delivered, RESPONSE or RST due */
#define REPLY_MAX      64U   /* RSTs for packets without a connection */
#define ATTACH_MAX     64U   /* attached streams not yet picked up */
#define HASH_BUCKETS   256U
#define EP_BATCH       64
#define ACCEPT_BUDGET  64U  /* per loop iteration */
#define RX_BUDGET      256U /* packets to the guest per iteration */
#define TX_BUDGET      256U /* packets from the guest per iteration */
#define TICK_MS	       1000U
#define DRAIN_MS       3000U /* at destroy: all conns' buffered bytes */
#define SQ_ENTRIES     16U
#define LISTEN_BACKLOG 128

#define HDR_LEN	  sizeof(struct virtio_vsock_hdr) /* 44 bytes */
#define SHUT_BOTH (VIRTIO_VSOCK_SHUTDOWN_RCV | VIRTIO_VSOCK_SHUTDOWN_SEND)
#define FEAT(bit) (1ULL << (bit))

/* epoll data: a struct vsock_conn pointer, or this for the listener. */
#define EP_LISTEN 1ULL

/* ---- connections --------------------------------------------------------- */

enum conn_state {
	CONN_HANDSHAKE,	  /* host client: waiting for "CONNECT <port>\n" */
	CONN_CONNECTING,  /* host-initiated: REQUEST owed or sent */
	CONN_ESTABLISHED, /* relaying */
	CONN_CLOSED,	  /* socket gone; maybe an RST still owed */
};

/* Control packets owed to the guest, in the order they go out. */
#define PEND_RST      0x01U
#define PEND_REQUEST  0x02U
#define PEND_RESPONSE 0x04U
#define PEND_SHUTDOWN 0x08U /* both ways: the host closed after its EOF */
#define PEND_CREDIT   0x10U

struct vsock_conn {
	struct list_head node;	/* v->conns, then v->dead */
	struct list_head hnode; /* a hash bucket, while the guest may name it */
	struct list_head rxnode; /* v->rxq, while it owes the guest a packet */
	int fd;
	enum conn_state state;
	bool guest_knows;	/* REQUEST delivered, or the guest sent one */
	bool readable;		/* an edge said so, no EAGAIN since */
	bool writable;		/* no EAGAIN since the last EPOLLOUT */
	bool out_watched;	/* EPOLLOUT in the epoll set: while blocked */
	bool hup;		/* the host process closed both directions */
	bool host_eof;		/* read 0: the host sends no more */
	bool shut_wr_done;	/* passed the guest's SHUTDOWN(SEND) on */
	uint32_t local_port;	/* the host's side */
	uint32_t peer_port;	/* the guest's side */
	unsigned int pend;	/* PEND_* */
	uint32_t peer_shutdown; /* VIRTIO_VSOCK_SHUTDOWN_* from the guest */
	uint32_t shut_sent;	/* VIRTIO_VSOCK_SHUTDOWN_* sent to it */
	uint64_t deadline;	/* CLOCK_MONOTONIC ms, 0: none */

	/* Credit (virtio 1.1, 5.10.6.3); every counter wraps at 2^32. */
	uint32_t peer_buf_alloc;
	uint32_t peer_fwd_cnt;
	uint32_t tx_cnt;   /* payload bytes sent to the guest */
	uint32_t rx_cnt;   /* payload bytes received from the guest */
	uint32_t fwd_cnt;  /* of those, taken by the host socket */
	uint32_t fwd_sent; /* the fwd_cnt the guest last heard of */

	/* Guest bytes the host socket has not taken: a ring, or NULL. */
	uint8_t *buf;
	uint32_t buf_head, buf_len;

	uint8_t line_len;
	char line[VSOCK_CONNECT_LINE_MAX];
};

/* An RST for a packet that has no connection. */
struct reply {
	uint64_t src_cid; /* the address the guest wrote to */
	uint32_t src_port;
	uint32_t dst_port;
};

struct vsock {
	struct virtio_device vdev;
	struct virtio_queue vqs[NR_QUEUES];
	struct virtio_vsock_config config;
	uint64_t guest_cid;
	bool vdev_ok;
	char uds_path[sizeof(((struct sockaddr_un *)0)->sun_path)];
	int listen_fd;
	int ep_fd;
	int wake_fd;

	struct evloop loop;
	struct ev_source rx_kick_src, tx_kick_src, ev_kick_src, wake_src,
		ep_src, tick_src;

	/* Streams handed over by other threads: their own lock. */
	pthread_mutex_t attach_lock;
	bool attach_lock_ok;
	int attach[ATTACH_MAX];
	unsigned int nr_attach;

	/* The rest: the loop's, under the device lock. */
	bool warned;	  /* one message about the guest, for its life */
	bool host_warned; /* one about the host side */
	bool reset_pending;
	/*
	 * A transport reset sent (a restore) that the driver has not yet
	 * handled: Linux refills the event buffer (avail idx moves past
	 * reset_avail) only after it reset its connections, and a host
	 * connect delivered before that would be reset with them, silently.
	 */
	bool reset_unseen;
	uint16_t reset_avail;
	bool more; /* work left: poll the ring, do not wait */
	bool wake, tick, tx_kick, tx_more, tx_stalled;
	bool ep_armed, ep_ready, tick_armed, listen_ready, listen_retry;
	bool pushed_rx, pushed_tx;
	uint64_t kick_buf[3], wake_buf;
	struct __kernel_timespec tick_ts;

	struct list_head conns; /* every live connection, any state */
	struct list_head dead;	/* closed, freed at the end of the iteration */
	struct list_head rxq;	/* connections with something for the guest */
	struct list_head buckets[HASH_BUCKETS];
	unsigned int nr_conns; /* on conns and dead */
	struct fd_budget *fds; /* one per connection; NULL: none */
	uint32_t next_port;

	struct reply replies[REPLY_MAX];
	unsigned int reply_head, nr_replies;

	bool rx_held; /* rx_chain was popped and not used yet */
	struct vq_chain rx_chain;
	struct vq_chain tx_chain;
	struct iovec iov[VQ_CHAIN_MAX_IOV]; /* payload part of a chain */
};

/* The guest broke a rule: said once for the device's whole life. */
#define vsock_warn(v, ...)                       \
	warn__once(&(v)->warned, (v)->vdev.name, \
		   " (further errors not logged)", __VA_ARGS__)

/* vsock-conn.c */
void vsock__arm_epoll(struct vsock *v);
/* One round, under the device lock, after the completions. */
void vsock__run_round(struct vsock *v);
/* Frees every connection, live or dead: the loop is gone. */
void vsock__free_conns(struct vsock *v);

#endif
