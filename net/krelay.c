// SPDX-License-Identifier: GPL-2.0
/*
 * A flow in the kernel relay (krelay.h): its FINs and resets, and its
 * byte counts from each socket's tcp_info. The counts are the kernel's
 * own per-socket figures (RFC 4898's bytes received and acked, and the
 * send queue): no map write per segment in the program, no call per
 * byte, two getsockopt() calls when someone asks.
 */
#include <errno.h>
#include <linux/sockios.h>
#include <netinet/in.h>
#include <linux/tcp.h>
#include <sys/epoll.h>
#include <sys/ioctl.h>
#include <sys/socket.h>

#include "ebpf/relay.h"
#include "net/krelay.h"

/*
 * A FIN takes one sequence number: a socket's bytes received count it
 * once it came.
 */
#define FIN_SEQ 1

static int tcp_info_of(int fd, struct tcp_info *ti)
{
	socklen_t len = sizeof(*ti);

	*ti = (struct tcp_info){ 0 };
	return getsockopt(fd, IPPROTO_TCP, TCP_INFO, ti, &len) ? -errno : 0;
}

static int received(int fd, uint64_t *n)
{
	struct tcp_info ti;
	int ret = tcp_info_of(fd, &ti);

	*n = ti.tcpi_bytes_received;
	return ret;
}

/* Bytes written to fd so far: acknowledged, and still in its queue. */
static int queued(int fd, uint64_t *n)
{
	struct tcp_info ti;
	int outq = 0, ret;

	ret = tcp_info_of(fd, &ti);
	if (!ret && ioctl(fd, SIOCOUTQ, &outq))
		ret = -errno;
	*n = ti.tcpi_bytes_acked + (uint64_t)outq;
	return ret;
}

/* Reads of a socket's counts that a segment's arrival may spoil. */
#define CONSUMED_TRIES 8

/*
 * Bytes fd received that are no longer in its queue: what was read (by
 * no one, before the pairing), so that bytes the guest sent while
 * upstream connected are counted once the kernel relays them. The count
 * and the queue are two calls: taken again when a segment came between.
 */
static int consumed(int fd, uint64_t *n)
{
	uint64_t before, after;
	int inq, ret;

	for (int i = 0; i < CONSUMED_TRIES; i++) {
		ret = received(fd, &before);
		if (!ret && ioctl(fd, SIOCINQ, &inq))
			ret = -errno;
		if (!ret)
			ret = received(fd, &after);
		if (ret)
			return ret;
		if (before == after && (uint64_t)inq <= before) {
			*n = before - (uint64_t)inq;
			return 0;
		}
	}
	return -EAGAIN;
}

int krelay__start(struct krelay_flow *k, int a, int b, enum relay_ways ways)
{
	int ret = 0;

	*k = (struct krelay_flow){ .fd = { a, b } };
	for (int s = 0; s < KRELAY_SIDES; s++)
		k->dir[s].kernel = ways & (s ? RELAY_B_TO_A : RELAY_A_TO_B);
	/*
	 * Before the pairing: nothing is read or written by then, but the
	 * guest may have sent bytes already; they are the flow's.
	 */
	for (int s = 0; !ret && s < KRELAY_SIDES; s++) {
		if (!k->dir[s].kernel)
			continue;
		ret = consumed(k->fd[s], &k->dir[s].recv_base);
		if (!ret)
			ret = queued(k->fd[!s], &k->dir[s].sent_base);
	}
	return ret;
}

void krelay__stop(struct krelay_flow *k, struct relay_prog *prog)
{
	relay_prog__unpair(prog, k->fd[KRELAY_A], k->fd[KRELAY_B]);
}

/*
 * After the FIN, edge-triggered and nothing asked for: a hang-up (its
 * writing shut too) would otherwise be reported on every wait while a
 * FIN the other way waits for its bytes; a reset still wakes the owner.
 */
uint32_t krelay__interest(const struct krelay_flow *k, int s)
{
	if (!k->dir[s].kernel)
		return 0;
	return k->dir[s].eof ? EPOLLET : EPOLLRDHUP;
}

/* dir[s]'s FIN sent on, once the other side has every byte before it. */
static int send_fin(struct krelay_flow *k, int s)
{
	struct krelay_dir *d = &k->dir[s];
	uint64_t in, out;
	int ret;

	if (!d->kernel || !d->eof || d->shut)
		return 0;
	ret = received(k->fd[s], &in);
	if (!ret)
		ret = queued(k->fd[!s], &out);
	if (ret)
		return ret;
	in -= d->recv_base;
	/* A socket closed without a FIN (never: it would have an error). */
	if (in >= FIN_SEQ)
		in -= FIN_SEQ;
	if (out - d->sent_base < in)
		return 0; /* pending */
	if (shutdown(k->fd[!s], SHUT_WR))
		return -errno;
	d->shut = true;
	return 0;
}

static int settle(struct krelay_flow *k)
{
	int ret = 0;

	for (int s = 0; !ret && s < KRELAY_SIDES; s++)
		ret = send_fin(k, s);
	if (ret)
		return ret;
	for (int s = 0; s < KRELAY_SIDES; s++)
		if (k->dir[s].kernel && !k->dir[s].shut)
			return 0;
	return KRELAY_DONE;
}

int krelay__event(struct krelay_flow *k, int s, uint32_t events)
{
	int soerr = 0;
	socklen_t len = sizeof(soerr);

	if (events & EPOLLERR) {
		if (getsockopt(k->fd[s], SOL_SOCKET, SO_ERROR, &soerr, &len))
			return -errno;
		return soerr ? -soerr : -ECONNRESET;
	}
	/* Hung up: its FIN came and its writing is shut, or it is closed. */
	if (k->dir[s].kernel && (events & (EPOLLRDHUP | EPOLLHUP)))
		k->dir[s].eof = true;
	return settle(k);
}

bool krelay__pending(const struct krelay_flow *k)
{
	for (int s = 0; s < KRELAY_SIDES; s++)
		if (k->dir[s].eof && !k->dir[s].shut)
			return true;
	return false;
}

int krelay__retry(struct krelay_flow *k)
{
	return settle(k);
}

int krelay__bytes(const struct krelay_flow *k, uint64_t bytes[KRELAY_SIDES])
{
	uint64_t in;
	int ret;

	for (int s = 0; s < KRELAY_SIDES; s++) {
		bytes[s] = 0;
		if (!k->dir[s].kernel)
			continue;
		ret = received(k->fd[s], &in);
		if (ret)
			return ret;
		bytes[s] = in - k->dir[s].recv_base -
			   (k->dir[s].eof ? FIN_SEQ : 0);
	}
	return 0;
}
