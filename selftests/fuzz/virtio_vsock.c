// SPDX-License-Identifier: GPL-2.0
/*
 * fuzz virtio_vsock - virtio-vsock's packet decoding and connection
 * state machine (devices/virtio/vsock.c, vsock-conn.c), fed packets from
 * the guest, with its own event loop thread and io_uring, driven through
 * the MMIO registers (selftests/virtio_driver.h), the host side on real
 * Unix sockets in a directory under /tmp (made once, removed at exit):
 * a listener the guest can connect to (host port LISTEN_PORT), none at
 * NO_PORT, and host clients that ask for a guest port.
 *
 * Input: a byte of set-up (EVENT_IDX or not; whether the target gives
 * receive buffers back once it has read them, or lets the guest run
 * out), then steps: a packet from the guest (every header field, the
 * usual value or the input's: op, ports, CIDs, type, flags, credit, the
 * length said and the payload given, the chain's split into
 * descriptors, a writable descriptor now and then); waiting until the
 * device has taken every packet; the host side (accept, write, shut
 * down, close one of its sockets; connect and ask for a port, or send
 * any line); a reset and a fresh bring-up.
 *
 * Checked for every input: every packet given comes back (within
 * TX_TIMEOUT_MS) unless the device said NEEDS_RESET; a used receive
 * buffer is one the target posted, and what the device put in it is a
 * packet to the guest's CID (from the host's, but for an RST answering a
 * packet that had no connection: from where that packet went), of a
 * stream type and a known op, whose length is what was written after the
 * header (payload only in RW); no byte outside guest RAM was touched; once the device is
 * destroyed it holds no descriptor (the process has the ones it had
 * before).
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/virtio_config.h>
#include <linux/virtio_mmio.h>
#include <linux/virtio_ring.h>
#include <linux/virtio_vsock.h>
#include <stdio.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "devices/virtio/vsock.h"
#include "selftests/fuzz/fuzz.h"
#include "selftests/virtio_driver.h"

#define RAM_SIZE      0x40000U
#define QSIZE	      64U
#define NQ	      3U
#define RXQ	      0U
#define TXQ	      1U
#define EVQ	      2U
#define DESC_GPA(q)   ((uint64_t)(q)*0x1000)
#define AVAIL_GPA(q)  (DESC_GPA(q) + 0x400) /* 4 + 2 * 64 + 2 bytes */
#define USED_GPA(q)   (DESC_GPA(q) + 0x800) /* 4 + 8 * 64 + 2 bytes */
#define EV_GPA	      0x3000ULL
#define NR_RX	      16U
#define RX_DATA	      4096U
#define RX_SLOT	      0x1100ULL
#define RX_GPA(b)     (0x4000ULL + (b)*RX_SLOT)
#define TX_SLOT	      0x800ULL
#define TX_GPA(h)     (0x20000ULL + (h)*TX_SLOT)
#define HDR	      ((uint32_t)sizeof(struct virtio_vsock_hdr))
#define PAYLOAD_MAX   (TX_SLOT - HDR)
#define GUEST_CID     3U
#define LISTEN_PORT   1024U
#define NO_PORT	      1025U
#define GUEST_PORT    5000U
#define MAX_STEPS     96
#define MAX_HOST_FDS  8
#define TX_TIMEOUT_MS 10000 /* far beyond a packet's handling */
#define IO_MAX	      256U
#define NR_OPS	      8U /* VIRTIO_VSOCK_OP_INVALID to CREDIT_REQUEST, + 1 */

#define ST_LIVE                                                 \
	(VIRTIO_CONFIG_S_ACKNOWLEDGE | VIRTIO_CONFIG_S_DRIVER | \
	 VIRTIO_CONFIG_S_FEATURES_OK | VIRTIO_CONFIG_S_DRIVER_OK)
#define FEAT(bit) (1ULL << (bit))

enum step {
	STEP_PACKET,
	STEP_WAIT,
	STEP_HOST,
	STEP_CONNECT,
	STEP_RESET,
	NR_STEPS
};

enum host_op { HOST_WRITE, HOST_SHUT_WR, HOST_CLOSE, NR_HOST_OPS };

struct drvq {
	uint16_t avail_idx, last_used;
	uint16_t nr_free;
	uint16_t free[QSIZE];
	uint16_t ndesc[QSIZE]; /* by head */
	uint16_t descs[QSIZE][2];
};

struct fuzz_vsock {
	char dir[64];
	char uds[96];
	int listen_fd; /* the host service at LISTEN_PORT */
	struct vdrv d;
	struct vsock *vs;
	bool live, refill;
	uint64_t features;
	struct drvq q[NQ];
	bool rx_posted[NR_RX];
	int host[MAX_HOST_FDS]; /* accepted and connected, -1: none */
	uint8_t pkt[TX_SLOT];
};

static struct fuzz_vsock *fv;

static void sleep_us(long us)
{
	struct timespec ts = { 0, us * 1000 };

	nanosleep(&ts, NULL);
}

static unsigned int count_fds(void)
{
	DIR *d = opendir("/proc/self/fd");
	unsigned int n = 0;

	fuzz_check(d);
	while (readdir(d))
		n++;
	closedir(d);
	return n;
}

static void remove_dir(void)
{
	DIR *d = opendir(fv->dir);
	struct dirent *e;

	if (fv->listen_fd >= 0)
		close(fv->listen_fd);
	while (d && (e = readdir(d)))
		if (e->d_name[0] != '.')
			unlinkat(dirfd(d), e->d_name, 0);
	if (d)
		closedir(d);
	rmdir(fv->dir);
}

static int unix_socket(const char *path, bool listen_on)
{
	struct sockaddr_un a = { .sun_family = AF_UNIX };
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);

	fuzz_check(fd >= 0);
	snprintf(a.sun_path, sizeof(a.sun_path), "%s", path);
	if (listen_on) {
		fuzz_check(!bind(fd, (struct sockaddr *)&a, sizeof(a)));
		fuzz_check(!listen(fd, 64));
		return fd;
	}
	if (connect(fd, (struct sockaddr *)&a, sizeof(a)) && errno != EAGAIN) {
		close(fd);
		return -1;
	}
	return fd;
}

static void setup(struct fuzz_vsock *f)
{
	char path[128];

	strcpy(f->dir, "/tmp/kiln-fuzz-vsock-XXXXXX");
	fuzz_check(mkdtemp(f->dir));
	snprintf(f->uds, sizeof(f->uds), "%s/v.sock", f->dir);
	snprintf(path, sizeof(path), "%s_%u", f->uds, LISTEN_PORT);
	f->listen_fd = unix_socket(path, true);
	atexit(remove_dir);
	fuzz_check(!vdrv_init(&f->d, RAM_SIZE));
	for (int i = 0; i < MAX_HOST_FDS; i++)
		f->host[i] = -1;
}

/* ---- the guest ---------------------------------------------------------- */

static void rx_post(struct fuzz_vsock *f, unsigned int b)
{
	uint16_t d = (uint16_t)(2 * b);

	memset(f->d.ram + RX_GPA(b), 0xee, HDR + RX_DATA);
	vdrv_put_desc(&f->d, DESC_GPA(RXQ), d, RX_GPA(b), HDR,
		      VRING_DESC_F_WRITE | VRING_DESC_F_NEXT, d + 1);
	vdrv_put_desc(&f->d, DESC_GPA(RXQ), d + 1, RX_GPA(b) + HDR, RX_DATA,
		      VRING_DESC_F_WRITE, 0);
	f->rx_posted[b] = true;
	vdrv_publish(&f->d, AVAIL_GPA(RXQ), QSIZE, &f->q[RXQ].avail_idx, d);
}

/* A packet the device gave the guest, as the guest must be able to read it. */
static void check_rx(const struct fuzz_vsock *f, unsigned int b, uint32_t len)
{
	struct virtio_vsock_hdr h;

	if (!len) /* given back unused, as after a reset */
		return;
	fuzz_check(len >= HDR && len <= HDR + RX_DATA);
	memcpy(&h, f->d.ram + RX_GPA(b), sizeof(h));
	/* An RST for a packet without a connection is from where it went. */
	fuzz_check(le64toh(h.src_cid) == VSOCK_HOST_CID ||
		   le16toh(h.op) == VIRTIO_VSOCK_OP_RST);
	fuzz_check(le64toh(h.dst_cid) == GUEST_CID);
	fuzz_check(le16toh(h.type) == VIRTIO_VSOCK_TYPE_STREAM);
	fuzz_check(le16toh(h.op) >= VIRTIO_VSOCK_OP_REQUEST &&
		   le16toh(h.op) <= VIRTIO_VSOCK_OP_CREDIT_REQUEST);
	fuzz_check(le32toh(h.len) == len - HDR);
	fuzz_check(le16toh(h.op) == VIRTIO_VSOCK_OP_RW || !h.len);
	fuzz_check(le32toh(h.buf_alloc) == VSOCK_BUF_ALLOC ||
		   le16toh(h.op) == VIRTIO_VSOCK_OP_RST);
}

static void rx_poll(struct fuzz_vsock *f)
{
	struct drvq *q = &f->q[RXQ];
	bool refilled = false;

	while (q->last_used != vdrv_load16(&f->d, USED_GPA(RXQ) + 2)) {
		uint64_t e = USED_GPA(RXQ) + 4 + 8ULL * (q->last_used % QSIZE);
		uint32_t id = vdrv_get32(&f->d, e),
			 len = vdrv_get32(&f->d, e + 4);
		unsigned int b = id / 2;

		q->last_used++;
		fuzz_check(!(id % 2) && b < NR_RX && f->rx_posted[b]);
		f->rx_posted[b] = false;
		check_rx(f, b, len);
		if (f->refill) {
			rx_post(f, b);
			refilled = true;
		}
	}
	if (refilled)
		vdrv_wr32(&f->d, VIRTIO_MMIO_QUEUE_NOTIFY, RXQ);
}

static bool tx_reap(struct fuzz_vsock *f)
{
	struct drvq *q = &f->q[TXQ];

	while (q->last_used != vdrv_load16(&f->d, USED_GPA(TXQ) + 2)) {
		uint64_t e = USED_GPA(TXQ) + 4 + 8ULL * (q->last_used % QSIZE);
		uint32_t id = vdrv_get32(&f->d, e);

		q->last_used++;
		fuzz_check(id < QSIZE && q->ndesc[id]);
		for (unsigned int i = 0; i < q->ndesc[id]; i++)
			q->free[q->nr_free++] = q->descs[id][i];
		q->ndesc[id] = 0;
	}
	return q->nr_free == QSIZE;
}

/* Until every packet given is back, or the device wants a reset. */
static void tx_wait(struct fuzz_vsock *f)
{
	long deadline = vdrv_now_ms() + TX_TIMEOUT_MS;

	while (f->live && !tx_reap(f)) {
		rx_poll(f);
		if (vdrv_status(&f->d) & VIRTIO_CONFIG_S_NEEDS_RESET) {
			f->live = false;
			break;
		}
		fuzz_check(vdrv_now_ms() < deadline);
		sleep_us(20);
	}
	rx_poll(f);
}

static bool bring_up(struct fuzz_vsock *f)
{
	vdrv_wr32(&f->d, VIRTIO_MMIO_STATUS, 0);
	memset(f->q, 0, sizeof(f->q));
	memset(f->rx_posted, 0, sizeof(f->rx_posted));
	memset(f->d.ram, 0, RX_GPA(0));
	f->live = false;
	if (!vdrv_negotiate(&f->d, f->features & vdrv_device_features(&f->d)))
		return false;
	for (unsigned int q = 0; q < NQ; q++) {
		vdrv_setup_queue(&f->d, q, QSIZE, DESC_GPA(q), AVAIL_GPA(q),
				 USED_GPA(q));
		for (unsigned int i = 0; i < QSIZE; i++)
			f->q[q].free[i] = (uint16_t)(QSIZE - 1 - i);
		f->q[q].nr_free = QSIZE;
	}
	vdrv_add_status(&f->d, VIRTIO_CONFIG_S_DRIVER_OK);
	for (unsigned int b = 0; b < NR_RX; b++)
		rx_post(f, b);
	vdrv_wr32(&f->d, VIRTIO_MMIO_QUEUE_NOTIFY, RXQ);
	for (uint16_t i = 0; i < 4; i++) {
		vdrv_put_desc(&f->d, DESC_GPA(EVQ), i, EV_GPA + 8 * i, 4,
			      VRING_DESC_F_WRITE, 0);
		vdrv_publish(&f->d, AVAIL_GPA(EVQ), QSIZE, &f->q[EVQ].avail_idx,
			     i);
	}
	f->live = vdrv_status(&f->d) == ST_LIVE;
	return f->live;
}

static uint32_t pick_port(struct fuzz_in *in)
{
	uint8_t v = fuzz_in__u8(in);

	switch (v % 8) {
	case 0:
		return LISTEN_PORT;
	case 1:
		return NO_PORT;
	case 2:
	case 3:
		return VSOCK_HOST_PORT_BASE + v / 8 % 4;
	case 4:
		return GUEST_PORT + v / 8 % 4;
	default:
		return fuzz_in__u32(in);
	}
}

/* One packet from the guest: each field the usual, or the input's. */
static void packet(struct fuzz_vsock *f, struct fuzz_in *in)
{
	struct drvq *q = &f->q[TXQ];
	uint8_t odd = fuzz_in__u8(in); /* which fields are the input's */
	uint8_t op = fuzz_in__u8(in);
	struct virtio_vsock_hdr h = {
		.src_cid = htole64(GUEST_CID),
		.dst_cid = htole64(VSOCK_HOST_CID),
		.type = htole16(VIRTIO_VSOCK_TYPE_STREAM),
		.op = htole16(op % NR_OPS),
		.buf_alloc = htole32(VSOCK_BUF_ALLOC),
	};
	uint32_t split, len, given;
	const uint8_t *p;
	size_t n;
	uint16_t head, second;

	h.src_port = htole32(GUEST_PORT + op / NR_OPS % 4);
	h.dst_port = htole32(pick_port(in));
	if (odd & 0x01)
		h.src_port = htole32(pick_port(in));
	if (odd & 0x02) {
		h.src_cid = htole64((uint64_t)fuzz_in__u32(in) << 8 |
				    fuzz_in__u8(in));
		h.dst_cid = htole64(fuzz_in__u8(in));
	}
	if (odd & 0x04)
		h.type = htole16(fuzz_in__u8(in));
	if (odd & 0x08) {
		h.flags = htole32(fuzz_in__u8(in));
		h.buf_alloc = htole32(fuzz_in__u32(in));
		h.fwd_cnt = htole32(fuzz_in__u32(in));
	}
	p = fuzz_in__bytes(in, fuzz_in__u8(in), &n);
	given = (uint32_t)n;
	len = odd & 0x10 ? fuzz_in__u32(in) : given;
	h.len = htole32(len);
	split = odd & 0x20 ? fuzz_in__u8(in) % (HDR + given + 1) : HDR;

	if (!f->live)
		return;
	if (q->nr_free < 2)
		tx_wait(f);
	if (!f->live || q->nr_free < 2)
		return;
	head = q->free[--q->nr_free];
	memcpy(f->pkt, &h, HDR);
	memcpy(f->pkt + HDR, p, given);
	memcpy(f->d.ram + TX_GPA(head), f->pkt, HDR + given);
	q->descs[head][0] = head;
	q->ndesc[head] = 1;
	if (split && split < HDR + given) {
		second = q->free[--q->nr_free];
		q->descs[head][1] = second;
		q->ndesc[head] = 2;
		vdrv_put_desc(&f->d, DESC_GPA(TXQ), head, TX_GPA(head), split,
			      VRING_DESC_F_NEXT, second);
		/* A writable payload descriptor: the driver broke a rule. */
		vdrv_put_desc(&f->d, DESC_GPA(TXQ), second,
			      TX_GPA(head) + split, HDR + given - split,
			      odd & 0x40 ? VRING_DESC_F_WRITE : 0, 0);
	} else {
		vdrv_put_desc(&f->d, DESC_GPA(TXQ), head, TX_GPA(head),
			      HDR + given, 0, 0);
	}
	vdrv_publish(&f->d, AVAIL_GPA(TXQ), QSIZE, &q->avail_idx, head);
	vdrv_wr32(&f->d, VIRTIO_MMIO_QUEUE_NOTIFY, TXQ);
	if (odd & 0x80)
		tx_wait(f);
}

/* ---- the host ------------------------------------------------------------ */

static int *free_host(struct fuzz_vsock *f)
{
	for (int i = 0; i < MAX_HOST_FDS; i++)
		if (f->host[i] < 0)
			return &f->host[i];
	return NULL;
}

static void host_accept(struct fuzz_vsock *f)
{
	int *slot, fd;

	while ((slot = free_host(f))) {
		fd = accept4(f->listen_fd, NULL, NULL,
			     SOCK_NONBLOCK | SOCK_CLOEXEC);
		if (fd < 0)
			return;
		*slot = fd;
	}
}

static void host(struct fuzz_vsock *f, struct fuzz_in *in)
{
	uint8_t v = fuzz_in__u8(in);
	int *fd = &f->host[v / NR_HOST_OPS % MAX_HOST_FDS];
	uint8_t buf[IO_MAX];
	const uint8_t *p;
	size_t n;

	host_accept(f);
	if (*fd < 0)
		return;
	while (read(*fd, buf, sizeof(buf)) > 0)
		;
	switch ((enum host_op)(v % NR_HOST_OPS)) {
	case HOST_WRITE:
		p = fuzz_in__bytes(in, fuzz_in__u8(in), &n);
		if (send(*fd, p, n, MSG_NOSIGNAL) < 0 && errno != EAGAIN) {
			close(*fd);
			*fd = -1;
		}
		break;
	case HOST_SHUT_WR:
		shutdown(*fd, SHUT_WR);
		break;
	default:
		close(*fd);
		*fd = -1;
		break;
	}
}

/* A host client at the device's socket: "CONNECT <port>\n", or any line. */
static void host_connect(struct fuzz_vsock *f, struct fuzz_in *in)
{
	uint8_t v = fuzz_in__u8(in);
	int *slot = free_host(f);
	char line[64];
	const uint8_t *p;
	size_t n;
	int fd;

	if (!slot)
		return;
	fd = unix_socket(f->uds, false);
	if (fd < 0)
		return;
	if (v & 1) {
		p = fuzz_in__bytes(in, fuzz_in__u8(in) % sizeof(line), &n);
		memcpy(line, p, n);
	} else {
		n = (size_t)snprintf(line, sizeof(line), "CONNECT %u\n",
				     GUEST_PORT + v / 2 % 4);
	}
	if (send(fd, line, n, MSG_NOSIGNAL) < 0) {
		close(fd);
		return;
	}
	*slot = fd;
}

static void host_close_all(struct fuzz_vsock *f)
{
	host_accept(f);
	for (int i = 0; i < MAX_HOST_FDS; i++) {
		if (f->host[i] >= 0)
			close(f->host[i]);
		f->host[i] = -1;
	}
	/* Connections the device made after the last accept, too. */
	for (int fd;
	     (fd = accept4(f->listen_fd, NULL, NULL, SOCK_CLOEXEC)) >= 0;)
		close(fd);
}

static void run(struct fuzz_vsock *f, struct fuzz_in *in)
{
	uint8_t opt = fuzz_in__u8(in);
	struct vsock_params vp = {
		.name = "fuzz-vsock",
		.guest_cid = GUEST_CID,
		.uds_path = f->uds,
		.mem = &f->d.mem,
		.irq = { .set = vdrv_irq_set, .opaque = &f->d.irq },
	};
	unsigned int fds = count_fds();

	f->features = FEAT(VIRTIO_F_VERSION_1) | ~0ULL >> 32;
	if (!(opt & 1))
		f->features &= ~FEAT(VIRTIO_RING_F_EVENT_IDX);
	f->refill = !(opt & 2);
	memset(f->d.ram, 0, RAM_SIZE);
	fuzz_check(!vsock__create(&f->vs, &vp));
	f->d.vdev = vsock__device(f->vs);
	fuzz_check(!vsock__start(f->vs, NULL));
	fuzz_check(bring_up(f));

	for (int i = 0; i < MAX_STEPS && in->left; i++) {
		switch ((enum step)(fuzz_in__u8(in) % NR_STEPS)) {
		case STEP_PACKET:
			packet(f, in);
			break;
		case STEP_WAIT:
			tx_wait(f);
			break;
		case STEP_HOST:
			host(f, in);
			break;
		case STEP_CONNECT:
			host_connect(f, in);
			break;
		default:
			tx_wait(f);
			fuzz_check(bring_up(f));
			break;
		}
	}
	tx_wait(f);
	vsock__destroy(f->vs);
	f->vs = NULL;
	host_close_all(f);
	fuzz_check(vdrv_guards_intact(&f->d));
	fuzz_check(count_fds() == fds);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct fuzz_in in;

	fuzz__quiet();
	if (!fv) {
		fv = calloc(1, sizeof(*fv));
		fuzz_check(fv);
		fv->listen_fd = -1;
		setup(fv);
	}
	fuzz_in__init(&in, data, size);
	run(fv, &in);
	return 0;
}
