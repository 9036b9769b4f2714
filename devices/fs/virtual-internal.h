/* SPDX-License-Identifier: GPL-2.0 */
#ifndef KILN_FS_VIRTUAL_INTERNAL_H
#define KILN_FS_VIRTUAL_INTERNAL_H

/*
 * The virtual backend's two files: virtual.c (the requests: the pending
 * list, deadlines, the relay thread, the ops) and virtual-wire.c (the
 * connection: connecting and reconnecting, sending, receiving and the
 * stream's framing). Nothing else includes this.
 */
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>

#include "devices/fs/virtual.h"
#include "lib/list.h"

/*
 * At most this many requests are at the server, unanswered, at once; the
 * others wait in order. The guest's rings bound how many there are in all.
 */
#define VIRTUAL_FS_MAX_SENT 256U
/* Buckets of the unique -> request table (a power of two). */
#define VIRTUAL_FS_HASH_SIZE 256U
/* Reads per wakeup before deadlines are looked at again. */
#define VIRTUAL_FS_RECV_BATCH 64U
/* fuse_dev_do_write() takes errors in -511..-1 only (-ERESTARTSYS..). */
#define FUSE_ERRNO_MAX 511
/* The kernel doubles SO_SNDBUF; a packet fits in sndbuf - 32 bytes. */
#define VIRTUAL_FS_SNDBUF (FS_FORWARD_MAX + 4096U)
/* The guest's FUSE_INIT is kept for a new connection if it fits. */
#define VIRTUAL_FS_INIT_MAX 256U
/* The unique of the FUSE_INIT a new connection gets again. */
#define VIRTUAL_FS_REPLAY_UNIQUE 0ULL

#define NSEC_PER_MSEC 1000000ULL
#define NSEC_PER_SEC  1000000000ULL

struct vreq {
	struct fs_forward_req *req;
	uint64_t deadline;     /* CLOCK_MONOTONIC, ns */
	struct list_head node; /* the pending list, then a done list */
	struct vreq *hnext;    /* the hash chain, while sent */
	bool no_reply;	       /* FORGET, BATCH_FORGET, INTERRUPT */
	bool sent;	       /* at the server (and in the hash) */
	int err;	       /* on the done list: what it completes with */
};

struct virtual_fs {
	struct fs_backend base;
	char *path;
	uint64_t timeout_ns;
	unsigned int timeout_ms;
	int wake; /* eventfd: the relay thread has something new to look at */
	pthread_t thread;
	bool started;
	bool lock_ok;
	pthread_mutex_t lock;

	/* Under lock. */
	int sock;
	int type; /* SOCK_SEQPACKET or SOCK_STREAM: the connection's */
	struct list_head pending;
	struct vreq *unsent; /* the first on pending not sent, or NULL */
	struct vreq *hash[VIRTUAL_FS_HASH_SIZE];
	unsigned int nr_sent;
	bool dead;	   /* no connection: the next request makes one */
	uint64_t retry_at; /* no new connection before (CLOCK_MONOTONIC) */
	bool replay_wait;  /* the replayed FUSE_INIT is unanswered */
	uint8_t *out;	   /* FS_FORWARD_MAX: bytes to send first */
	size_t out_len, out_off;
	uint8_t init[VIRTUAL_FS_INIT_MAX]; /* the guest's last FUSE_INIT */
	size_t init_len;		   /* 0: none kept */
	bool stopping;
	bool warned_msgsize;
	bool warned_retry; /* the failed reconnection, once per outage */

	/* The relay thread's. */
	uint8_t *rbuf; /* FS_FORWARD_MAX: one reply, or a stream's bytes */
	size_t rlen;   /* on a stream: bytes in rbuf, no whole message */
	bool warned_invalid;
	bool warned_timeout;
	bool warned_start; /* the device thread's */
};

/* Requests without a reply complete with NULL, 0 whatever became of them. */
static inline void finish(struct fs_forward_req *req, bool no_reply, int err)
{
	req->complete(req, NULL, no_reply ? 0 : err);
}

/* Completes and frees what is on done, the last pushed first. */
static inline void finish_list(struct list_head *done)
{
	while (!list_empty(done)) {
		struct vreq *e = list_first_entry(done, struct vreq, node);

		list_del(&e->node);
		finish(e->req, e->no_reply, e->err);
		free(e);
	}
}

/* e is on no list. */
static inline void push_done(struct list_head *done, struct vreq *e, int err)
{
	e->err = err;
	list_add(&e->node, done);
}

/* Bytes of ->out still to go (a stream's tail, a replayed FUSE_INIT). */
static inline bool out_pending(const struct virtual_fs *v)
{
	return v->out_off < v->out_len;
}

/* Whether the first unsent request may go now, room in the socket given. */
static inline bool can_send(const struct virtual_fs *v)
{
	return !v->dead && !out_pending(v) && v->unsent &&
	       (v->unsent->no_reply || v->nr_sent < VIRTUAL_FS_MAX_SENT);
}

/* virtual.c: the pending list and the hash, under lock. */
void virtual_fs__hash_add(struct virtual_fs *v, struct vreq *e);
struct vreq *virtual_fs__hash_find(struct virtual_fs *v, uint64_t unique);
struct vreq *virtual_fs__pending_next(struct virtual_fs *v, struct vreq *e);
void virtual_fs__pending_del(struct virtual_fs *v, struct vreq *e);
void virtual_fs__fail_pending(struct virtual_fs *v, int err,
			      struct list_head *done);
/* virtual.c: the connection ended; why is logged, once. Under lock. */
void virtual_fs__server_gone(struct virtual_fs *v, const char *why,
			     struct list_head *done);
void virtual_fs__server_error(struct virtual_fs *v, int err,
			      struct list_head *done);

/* virtual-wire.c */
const char *virtual_fs__type_name(int type);
/* Under lock: whether the relay thread should wait for room. */
bool virtual_fs__wants_out(const struct virtual_fs *v);
/* Under lock: sends what may go now, in order. */
void virtual_fs__flush_sends(struct virtual_fs *v, struct list_head *done);
/* Under lock: keeps req if it is the guest's FUSE_INIT. */
void virtual_fs__keep_init(struct virtual_fs *v,
			   const struct fs_forward_req *req);
/* Sets ->sock and ->type; -errno, not logged. */
int virtual_fs__connect(struct virtual_fs *v);
/* The relay thread, under lock, with no connection: one attempt. */
void virtual_fs__reconnect(struct virtual_fs *v, uint64_t now,
			   struct list_head *done);
/* The relay thread, without the lock: reads what the socket holds. */
void virtual_fs__receive(struct virtual_fs *v);

#endif
