/* SPDX-License-Identifier: GPL-2.0 */
#ifndef KILN_STORE_H
#define KILN_STORE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "devices/block/store-proto.h"
#include "lib/compiler.h"

/*
 * A connection to a block store (store-proto.h; Documentation/rootfs.md,
 * "Block stores"): one request at a time, each answered within the
 * deadline or the connection is given up. Blocking calls on a socket
 * with poll() deadlines: the caller is the cow layer's worker thread
 * (store-cow.c), or the VM's build and tear-down, never an event loop.
 *
 * A connection that timed out, was cut, or answered something malformed
 * is broken for good (where the answer stream stands is unknown): every
 * later call fails at once with -EIO. An error the store answered in
 * the protocol (STORE_ERROR) leaves it usable. Errors come back as
 * -errno with a one-line reason in err; callers report them.
 */

#define STORE_TIMEOUT_MS 10000U /* default: one request and its answer */

struct store_params {
	const char *socket_path; /* the store's Unix stream socket */
	const char *base;	 /* the base's digest, "sha256:<hex>" */
	uint64_t nr_blocks;	 /* the base's size in STORE_BLOCK_SIZE */
	unsigned int timeout_ms; /* 0: STORE_TIMEOUT_MS */
	bool claim;		 /* single writer (a cow root) */
};

struct store;

/* Connects and says hello: -EBUSY when another writer holds the claim. */
int __must_check store__connect(struct store **out,
				const struct store_params *p, char *err,
				size_t elen);
void store__close(struct store *s); /* NULL is fine */

/* The blocks the store's hello said it holds. */
uint64_t store__stored(const struct store *s);
/* The state token the hello gave (len 0: the store gives none). */
const struct store_token *store__hello_token(const struct store *s);
bool store__broken(const struct store *s);

/* Every block the store holds, ascending, through fn, a page at a time. */
int __must_check store__list(struct store *s,
			     void (*fn)(void *arg, uint64_t block), void *arg,
			     char *err, size_t elen);
/* At most STORE_IO_BLOCKS blocks in all, into out (count * block size). */
int __must_check store__read(struct store *s, const struct store_range *r,
			     unsigned int nr, uint8_t *out, char *err,
			     size_t elen);
/*
 * The write being built lives in the connection's buffer: begin, add
 * blocks (data NULL: zeros) until store__write_add says -E2BIG (full:
 * send and begin again), then send.
 */
void store__write_begin(struct store *s);
int __must_check store__write_add(struct store *s, uint64_t block,
				  const uint8_t *data);
unsigned int store__write_count(const struct store *s);
int __must_check store__write_send(struct store *s, char *err, size_t elen);
/* Everything written so far is durable when this returns 0. */
int __must_check store__flush(struct store *s, char *err, size_t elen);
/*
 * The store's state token now (after a flush: what it made durable);
 * -EOPNOTSUPP, asking nothing, when the hello gave none.
 */
int __must_check store__state(struct store *s, struct store_token *t, char *err,
			      size_t elen);

#endif
