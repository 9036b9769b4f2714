// SPDX-License-Identifier: GPL-2.0
/*
 * virtio-fs and its FUSE server, driven through the MMIO registers the
 * way Linux's virtio_mmio and virtiofs drivers do, over fake backends
 * written here: "tfs", a few files in memory plus one on a temp file that
 * offers io_fd (so READ and WRITE take both data paths), and "tfwd", a
 * .forward backend whose requests the test thread answers (another thread
 * than the device's). Guest memory comes from malloc framed by guard
 * bytes, and every reply buffer is followed by canaries: hostile requests
 * and rings must fail cleanly, never touch memory outside what the guest
 * gave, and never reach the backend when they are malformed.
 */
#include <dirent.h>
#include <endian.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sys/stat.h>

#define VIRTIO_RING_NO_LEGACY
#include <linux/fuse.h>
#include <linux/virtio_config.h>
#include <linux/virtio_fs.h>
#include <linux/virtio_ids.h>
#include <linux/virtio_mmio.h>
#include <linux/virtio_ring.h>

#include "lib/compiler.h"
#include "devices/fs/backend.h"
#include "devices/fs/fuse.h"
#include "devices/virtio/device.h"
#include "devices/virtio/fs.h"
#include "devices/virtio/guest-mem.h"
#include "devices/virtio/mmio.h"
#include "selftests/kselftest.h"
#include "selftests/rings.h"
#include "selftests/testutil.h"
#include "selftests/virtio_driver.h"

#define QSIZE	   128 /* what fs.c offers */
#define SLOTS	   64  /* request slots per queue */
#define MAX_QUEUES 3   /* hiprio + 2 request queues */
#define TAG	   "kiln-test-tag"
#define TIMEOUT_MS 5000
#define ATTR_MS	   2500

#define RAM_SIZE (8 << 20)
#define CANARY	 0x5a
#define GAP	 64

/*
 * Guest memory: the rings of each queue, per-head request and reply
 * areas for many requests at once, one big request and one big reply
 * area, indirect tables, then junk that hostile chains point into.
 */
#define DESC_GPA(q)  (0x10000 + (q)*0x8000)
#define AVAIL_GPA(q) (DESC_GPA(q) + 0x1000)
#define USED_GPA(q)  (DESC_GPA(q) + 0x2000)
#define HREQ_GPA(h)  (0x100000 + (uint64_t)(h)*0x400)
#define HREP_GPA(h)  (0x140000 + (uint64_t)(h)*0x400)
#define REQ_GPA	     0x200000
#define REP_GPA	     0x400000
#define TABLE_GPA    0x5c0000
#define JUNK_GPA     0x600000
#define BIG	     (0x180000) /* room of each big area */

#define MAX_SEGS 300

#define FEAT(bit) (1ULL << (bit))

#define ST_ACK	     VIRTIO_CONFIG_S_ACKNOWLEDGE
#define ST_DRIVER    VIRTIO_CONFIG_S_DRIVER
#define ST_FEATURES  VIRTIO_CONFIG_S_FEATURES_OK
#define ST_DRIVER_OK VIRTIO_CONFIG_S_DRIVER_OK
#define ST_NEEDS_RST VIRTIO_CONFIG_S_NEEDS_RESET
#define ST_LIVE	     (ST_ACK | ST_DRIVER | ST_FEATURES | ST_DRIVER_OK)

#define IN_HDR	sizeof(struct fuse_in_header)
#define OUT_HDR sizeof(struct fuse_out_header)

/* ---- the fake backend ------------------------------------------------ */

enum {
	N_ROOT = FUSE_ROOT_ID,
	N_HELLO, /* "hello": read through ->read */
	N_DATA,	 /* "data": a temp file, io_fd */
	N_MANY,	 /* "many": a directory of N_ENTRIES */
	N_LINK,	 /* "link" -> "hello" */
	N_MEM,	 /* "mem": writable through ->write */
	N_NODES,
	N_NEW = 1000, /* created nodes */
};

#define N_ENTRIES 300
#define HELLO	  "hello, world\n"
#define DATA_SIZE (2 << 20)
#define MEM_SIZE  (64 << 10)

struct tfs {
	struct fs_backend base;
	int data_fd;
	bool *destroyed;
	unsigned int calls; /* every op */
	unsigned int reads, writes, io_fds;
	unsigned int sessions_ended; /* end_session calls */
	uint64_t forgotten[N_NODES];
	uint32_t open_flags;
	uint32_t mode, umask, rename_flags;
	char name[FS_NAME_MAX + 1], name2[FS_PATH_MAX + 1];
	size_t mem_size;
	uint8_t mem[MEM_SIZE];
};

static struct tfs *to_tfs(struct fs_backend *b)
{
	return (struct tfs *)b;
}

static const struct {
	const char *name;
	uint64_t node;
	uint32_t mode;
} tfs_root[] = {
	{ "hello", N_HELLO, S_IFREG | 0644 },
	{ "data", N_DATA, S_IFREG | 0644 },
	{ "many", N_MANY, S_IFDIR | 0755 },
	{ "link", N_LINK, S_IFLNK | 0777 },
	{ "mem", N_MEM, S_IFREG | 0644 },
};

static void entry_name(unsigned int i, char *buf, size_t len)
{
	snprintf(buf, len, "entry-%04u-with-a-longish-name", i);
}

static void tfs_attr(struct tfs *t, uint64_t node, struct fuse_attr *a)
{
	memset(a, 0, sizeof(*a));
	a->ino = node;
	a->nlink = 1;
	a->mode = node == N_ROOT ? S_IFDIR | 0755 : S_IFREG | 0644;
	for (unsigned int i = 0; i < ARRAY_SIZE(tfs_root); i++)
		if (tfs_root[i].node == node)
			a->mode = tfs_root[i].mode;
	if (node == N_HELLO)
		a->size = strlen(HELLO);
	if (node == N_DATA)
		a->size = DATA_SIZE;
	if (node == N_MEM)
		a->size = t->mem_size;
}

static bool known(uint64_t node)
{
	return (node >= N_ROOT && node < N_NODES) ||
	       (node >= N_NEW && node < N_NEW + N_ENTRIES);
}

static int tfs_lookup(struct fs_backend *b, uint64_t parent, const char *name,
		      struct fs_entry *out)
{
	struct tfs *t = to_tfs(b);
	char buf[64];

	t->calls++;
	snprintf(t->name, sizeof(t->name), "%s", name);
	if (parent == N_ROOT) {
		for (unsigned int i = 0; i < ARRAY_SIZE(tfs_root); i++) {
			if (strcmp(name, tfs_root[i].name))
				continue;
			out->nodeid = tfs_root[i].node;
			out->generation = 7;
			tfs_attr(t, out->nodeid, &out->attr);
			return 0;
		}
		return -ENOENT;
	}
	if (parent == N_MANY) {
		for (unsigned int i = 0; i < N_ENTRIES; i++) {
			entry_name(i, buf, sizeof(buf));
			if (!strcmp(buf, name)) {
				out->nodeid = N_NEW + i;
				tfs_attr(t, out->nodeid, &out->attr);
				return 0;
			}
		}
		return -ENOENT;
	}
	return known(parent) ? -ENOTDIR : -ESTALE;
}

static void tfs_forget(struct fs_backend *b, uint64_t node, uint64_t nlookup)
{
	struct tfs *t = to_tfs(b);

	t->calls++;
	if (node < N_NODES)
		t->forgotten[node] += nlookup;
}

static int tfs_getattr(struct fs_backend *b, uint64_t node,
		       struct fuse_attr *out)
{
	struct tfs *t = to_tfs(b);

	t->calls++;
	if (!known(node))
		return -ESTALE;
	tfs_attr(t, node, out);
	return 0;
}

static int tfs_setattr(struct fs_backend *b, const struct fs_ctx *ctx,
		       uint64_t node, const struct fuse_setattr_in *in,
		       struct fuse_attr *out)
{
	struct tfs *t = to_tfs(b);

	t->calls++;
	if (node == N_MEM && (in->valid & FATTR_SIZE) && in->size <= MEM_SIZE)
		t->mem_size = in->size;
	tfs_attr(t, node, out);
	return 0;
}

static ssize_t tfs_readlink(struct fs_backend *b, uint64_t node, char *buf,
			    size_t size)
{
	to_tfs(b)->calls++;
	if (node != N_LINK)
		return -EINVAL;
	memcpy(buf, "hello", 5);
	return 5;
}

static int tfs_made(struct tfs *t, const char *name, struct fs_entry *out)
{
	snprintf(t->name, sizeof(t->name), "%s", name);
	out->nodeid = N_NEW;
	tfs_attr(t, N_NEW, &out->attr);
	return 0;
}

static int tfs_mknod(struct fs_backend *b, const struct fs_ctx *ctx,
		     uint64_t parent, const char *name, uint32_t mode,
		     uint32_t rdev, uint32_t umask, struct fs_entry *out)
{
	struct tfs *t = to_tfs(b);

	t->calls++;
	t->mode = mode;
	t->umask = umask;
	return tfs_made(t, name, out);
}

static int tfs_mkdir(struct fs_backend *b, const struct fs_ctx *ctx,
		     uint64_t parent, const char *name, uint32_t mode,
		     uint32_t umask, struct fs_entry *out)
{
	return tfs_mknod(b, ctx, parent, name, mode | S_IFDIR, 0, umask, out);
}

static int tfs_symlink(struct fs_backend *b, const struct fs_ctx *ctx,
		       uint64_t parent, const char *name, const char *target,
		       struct fs_entry *out)
{
	struct tfs *t = to_tfs(b);

	t->calls++;
	snprintf(t->name2, sizeof(t->name2), "%s", target);
	return tfs_made(t, name, out);
}

static int tfs_unlink(struct fs_backend *b, uint64_t parent, const char *name)
{
	struct tfs *t = to_tfs(b);

	t->calls++;
	snprintf(t->name, sizeof(t->name), "%s", name);
	return 0;
}

static int tfs_rename(struct fs_backend *b, uint64_t parent, const char *name,
		      uint64_t newparent, const char *newname, uint32_t flags)
{
	struct tfs *t = to_tfs(b);

	t->calls++;
	snprintf(t->name, sizeof(t->name), "%s", name);
	snprintf(t->name2, sizeof(t->name2), "%s", newname);
	t->rename_flags = flags;
	return 0;
}

static int tfs_link(struct fs_backend *b, uint64_t node, uint64_t newparent,
		    const char *newname, struct fs_entry *out)
{
	struct tfs *t = to_tfs(b);

	t->calls++;
	return tfs_made(t, newname, out);
}

static int tfs_open(struct fs_backend *b, uint64_t node, uint32_t flags,
		    uint64_t *fh, uint32_t *open_flags)
{
	struct tfs *t = to_tfs(b);

	t->calls++;
	t->open_flags = flags;
	*fh = node + 100;
	*open_flags = FOPEN_KEEP_CACHE;
	return known(node) ? 0 : -ESTALE;
}

static int tfs_create(struct fs_backend *b, const struct fs_ctx *ctx,
		      uint64_t parent, const char *name, uint32_t mode,
		      uint32_t flags, uint32_t umask, struct fs_entry *out,
		      uint64_t *fh, uint32_t *open_flags)
{
	struct tfs *t = to_tfs(b);

	t->calls++;
	t->mode = mode;
	t->umask = umask;
	t->open_flags = flags;
	*fh = 4242;
	return tfs_made(t, name, out);
}

static int tfs_io_fd(struct fs_backend *b, uint64_t node, uint64_t fh,
		     bool write)
{
	struct tfs *t = to_tfs(b);

	t->calls++;
	t->io_fds++;
	return node == N_DATA ? t->data_fd : -ENOTSUP;
}

static ssize_t tfs_read(struct fs_backend *b, uint64_t node, uint64_t fh,
			const struct iovec *iov, int iovcnt, uint64_t offset)
{
	struct tfs *t = to_tfs(b);
	const uint8_t *src;
	size_t size, done = 0;

	t->calls++;
	t->reads++;
	if (node == N_HELLO) {
		src = (const uint8_t *)HELLO;
		size = strlen(HELLO);
	} else if (node == N_MEM) {
		src = t->mem;
		size = t->mem_size;
	} else {
		return -EBADF;
	}
	for (int i = 0; i < iovcnt && offset < size; i++) {
		size_t n = iov[i].iov_len;

		if (n > size - offset)
			n = size - offset;
		memcpy(iov[i].iov_base, src + offset, n);
		offset += n;
		done += n;
	}
	return (ssize_t)done;
}

static ssize_t tfs_write(struct fs_backend *b, uint64_t node, uint64_t fh,
			 const struct iovec *iov, int iovcnt, uint64_t offset)
{
	struct tfs *t = to_tfs(b);
	size_t done = 0;

	t->calls++;
	t->writes++;
	if (node != N_MEM)
		return -EBADF;
	for (int i = 0; i < iovcnt; i++) {
		if (offset + iov[i].iov_len > MEM_SIZE)
			return done ? (ssize_t)done : -EFBIG;
		memcpy(t->mem + offset, iov[i].iov_base, iov[i].iov_len);
		offset += iov[i].iov_len;
		done += iov[i].iov_len;
	}
	if (offset > t->mem_size)
		t->mem_size = offset;
	return (ssize_t)done;
}

static int tfs_fh_op(struct fs_backend *b, uint64_t node, uint64_t fh)
{
	to_tfs(b)->calls++;
	return 0;
}

static int tfs_fsync(struct fs_backend *b, uint64_t node, uint64_t fh,
		     bool datasync)
{
	to_tfs(b)->calls++;
	return 0;
}

static int tfs_opendir(struct fs_backend *b, uint64_t node, uint64_t *fh)
{
	to_tfs(b)->calls++;
	*fh = 77;
	return node == N_MANY || node == N_ROOT ? 0 : -ENOTDIR;
}

/* Offsets: i + 1 after entry i. */
static int tfs_readdir(struct fs_backend *b, uint64_t node, uint64_t fh,
		       uint64_t offset, struct fs_dirbuf *out)
{
	char name[64];

	to_tfs(b)->calls++;
	if (node != N_MANY)
		return -ENOTDIR;
	for (uint64_t i = offset; i < N_ENTRIES; i++) {
		entry_name((unsigned int)i, name, sizeof(name));
		if (!fs_dirbuf__add(out, name, strlen(name), N_NEW + i, DT_REG,
				    i + 1))
			break;
	}
	return 0;
}

static int tfs_statfs(struct fs_backend *b, uint64_t node,
		      struct fuse_kstatfs *out)
{
	to_tfs(b)->calls++;
	out->blocks = 1000;
	out->bsize = 4096;
	out->namelen = FS_NAME_MAX;
	return 0;
}

static int tfs_fallocate(struct fs_backend *b, uint64_t node, uint64_t fh,
			 uint64_t offset, uint64_t length, uint32_t mode)
{
	to_tfs(b)->calls++;
	return 0;
}

static int64_t tfs_lseek(struct fs_backend *b, uint64_t node, uint64_t fh,
			 uint64_t offset, uint32_t whence)
{
	to_tfs(b)->calls++;
	return whence == SEEK_HOLE ? (int64_t)DATA_SIZE : (int64_t)offset;
}

static void tfs_end_session(struct fs_backend *b)
{
	to_tfs(b)->sessions_ended++;
}

static void tfs_destroy(struct fs_backend *b)
{
	struct tfs *t = to_tfs(b);

	if (t->destroyed)
		*t->destroyed = true;
	close(t->data_fd);
	free(t);
}

static const struct fs_backend_ops tfs_ops = {
	.lookup = tfs_lookup,
	.forget = tfs_forget,
	.getattr = tfs_getattr,
	.setattr = tfs_setattr,
	.readlink = tfs_readlink,
	.mknod = tfs_mknod,
	.mkdir = tfs_mkdir,
	.symlink = tfs_symlink,
	.unlink = tfs_unlink,
	.rmdir = tfs_unlink,
	.rename = tfs_rename,
	.link = tfs_link,
	.open = tfs_open,
	.create = tfs_create,
	.io_fd = tfs_io_fd,
	.read = tfs_read,
	.write = tfs_write,
	.flush = tfs_fh_op,
	.release = tfs_fh_op,
	.fsync = tfs_fsync,
	.opendir = tfs_opendir,
	.readdir = tfs_readdir,
	.releasedir = tfs_fh_op,
	.fsyncdir = tfs_fsync,
	.statfs = tfs_statfs,
	.fallocate = tfs_fallocate,
	.lseek = tfs_lseek,
	.end_session = tfs_end_session,
	.destroy = tfs_destroy,
};

/* Byte off of the data file as the test wrote it. */
static uint8_t pat(uint64_t off, uint64_t seed)
{
	uint64_t w = ((off >> 3) + 1) * 0x9e3779b97f4a7c15ULL;

	w ^= seed * 0xbf58476d1ce4e5b9ULL;
	return (uint8_t)(w >> ((off & 7) * 8));
}

static struct tfs *tfs_new(bool read_only, bool *destroyed)
{
	char path[] = "/tmp/kiln-vfs-XXXXXX";
	static uint8_t buf[DATA_SIZE];
	struct tfs *t = calloc(1, sizeof(*t));

	if (!t)
		return NULL;
	t->base.ops = &tfs_ops;
	t->base.name = "tfs";
	t->base.read_only = read_only;
	t->destroyed = destroyed;
	t->data_fd = mkstemp(path);
	if (t->data_fd < 0) {
		free(t);
		return NULL;
	}
	unlink(path);
	for (size_t i = 0; i < DATA_SIZE; i++)
		buf[i] = pat(i, 0);
	if (pwrite(t->data_fd, buf, DATA_SIZE, 0) != DATA_SIZE) {
		close(t->data_fd);
		free(t);
		return NULL;
	}
	return t;
}

/* ---- the forwarding fake backend ------------------------------------- */

#define FWD_MAX 8

struct tfwd {
	struct fs_backend base;
	pthread_mutex_t lock;
	pthread_cond_t cond;
	struct fs_forward_req *pending[FWD_MAX];
	unsigned int nr_pending;
	unsigned int forwarded;
	int forward_ret;   /* what forward() answers */
	bool sync_eio;	   /* complete(-EIO) inside forward() */
	uint8_t msg[8192]; /* the last message's start */
	size_t msg_len;
};

static int tfwd_forward(struct fs_backend *b, struct fs_forward_req *req)
{
	struct tfwd *w = (struct tfwd *)b;
	int ret = 0;

	pthread_mutex_lock(&w->lock);
	w->forwarded++;
	w->msg_len = req->len;
	memcpy(w->msg, req->msg,
	       req->len < sizeof(w->msg) ? req->len : sizeof(w->msg));
	if (w->forward_ret)
		ret = w->forward_ret;
	else if (!w->sync_eio && w->nr_pending < FWD_MAX)
		w->pending[w->nr_pending++] = req;
	pthread_cond_broadcast(&w->cond);
	pthread_mutex_unlock(&w->lock);
	if (!ret && w->sync_eio)
		req->complete(req, NULL, -EIO);
	return ret;
}

static void tfwd_destroy(struct fs_backend *b)
{
	struct tfwd *w = (struct tfwd *)b;

	/* As the virtual backend does: what is still pending fails. */
	for (unsigned int i = 0; i < w->nr_pending; i++)
		w->pending[i]->complete(w->pending[i], NULL, -EIO);
	pthread_mutex_destroy(&w->lock);
	pthread_cond_destroy(&w->cond);
	free(w);
}

static const struct fs_backend_ops tfwd_ops = {
	.forward = tfwd_forward,
	.destroy = tfwd_destroy,
};

/* The next forwarded request, waited for; NULL on timeout. */
static struct fs_forward_req *tfwd_take(struct tfwd *w)
{
	struct fs_forward_req *req = NULL;
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	ts.tv_sec += TIMEOUT_MS / 1000;
	pthread_mutex_lock(&w->lock);
	while (!w->nr_pending)
		if (pthread_cond_timedwait(&w->cond, &w->lock, &ts))
			break;
	if (w->nr_pending) {
		req = w->pending[0];
		memmove(w->pending, w->pending + 1,
			--w->nr_pending * sizeof(w->pending[0]));
	}
	pthread_mutex_unlock(&w->lock);
	return req;
}

/* ---- guest memory, interrupts and registers -------------------------- */

struct tseg {
	uint64_t gpa;
	uint32_t len;
	bool w;
};

/* A chain as the fake driver sends it, and what came back. */
struct treq {
	unsigned int n;
	struct tseg seg[MAX_SEGS];
	bool indirect;
	uint64_t table; /* of an indirect chain; 0: TABLE_GPA */
	uint16_t head;
	bool done;
	uint32_t used_len;
};

struct tdev {
	struct virtio_fs *fs;
	struct vdrv d;
	struct tfs *tfs; /* owned by the device */
	struct tfwd *tfwd;
	bool destroyed;
	unsigned int nr_vqs;
	uint64_t unique;
	struct vdrv_queue q[MAX_QUEUES];
	unsigned int bad_used;
};

static void setup_queue(struct tdev *t, unsigned int q)
{
	vdrv_queue_setup(&t->d, &t->q[q], q, QSIZE, DESC_GPA(q), AVAIL_GPA(q),
			 USED_GPA(q));
}

/* virtio_dev_probe(): reset, every feature offered, all queues, DRIVER_OK. */
static uint32_t bring_up(struct tdev *t)
{
	vdrv_wr32(&t->d, VIRTIO_MMIO_STATUS, 0);
	memset(t->q, 0, sizeof(t->q));
	for (unsigned int q = 0; q < MAX_QUEUES; q++)
		memset(t->d.ram + DESC_GPA(q), 0, 0x8000);
	if (!vdrv_negotiate(&t->d, vdrv_device_features(&t->d)))
		return vdrv_status(&t->d);
	for (unsigned int q = 0; q < t->nr_vqs; q++)
		setup_queue(t, q);
	vdrv_add_status(&t->d, ST_DRIVER_OK);
	return vdrv_status(&t->d);
}

static void notify(struct tdev *t, unsigned int q)
{
	vdrv_queue_notify(&t->d, &t->q[q]);
}

/* virtqueue_kick(): only when the device asks for it. */
static void kick(struct tdev *t, unsigned int q)
{
	vdrv_queue_kick(&t->d, &t->q[q]);
}

static void put_desc(struct tdev *t, uint64_t gpa, uint64_t addr, uint32_t len,
		     uint16_t flags, uint16_t next)
{
	vdrv_put_desc(&t->d, gpa, 0, addr, len, flags, next);
}

static void raw_desc(struct tdev *t, unsigned int q, uint16_t i, uint64_t addr,
		     uint32_t len, uint16_t flags, uint16_t next)
{
	vdrv_put_desc(&t->d, DESC_GPA(q), i, addr, len, flags, next);
}

static void publish(struct tdev *t, unsigned int q, uint16_t head)
{
	vdrv_queue_publish(&t->d, &t->q[q], head);
}

/* Lays r out on queue q and makes it available (no kick). */
static bool submit(struct tdev *t, unsigned int q, struct treq *r)
{
	struct vdrv_queue *vq = &t->q[q];
	struct vring_desc d[MAX_SEGS];
	int head;

	for (unsigned int i = 0; i < r->n; i++)
		d[i] = (struct vring_desc){
			.addr = r->seg[i].gpa,
			.len = r->seg[i].len,
			.flags = r->seg[i].w ? VRING_DESC_F_WRITE : 0,
		};
	if (r->indirect)
		head = vdrv_queue_add_indirect(
			&t->d, vq, r->table ? r->table : TABLE_GPA, d, r->n, r);
	else
		head = vdrv_queue_add(&t->d, vq, d, r->n, r);
	if (head < 0)
		return false;
	r->head = head;
	r->done = false;
	r->used_len = UINT32_MAX;
	publish(t, q, head);
	return true;
}

static void req_done(void *arg, void *data, uint32_t len)
{
	struct treq *r = data;

	(void)arg;
	r->used_len = len;
	r->done = true;
}

static unsigned int reap(struct tdev *t, unsigned int q)
{
	return vdrv_queue_reap_cb(&t->d, &t->q[q], req_done, NULL,
				  &t->bad_used);
}

static bool wait_done(struct tdev *t, unsigned int q, struct treq *r,
		      unsigned int n)
{
	long deadline = vdrv_now_ms() + TIMEOUT_MS;

	for (;;) {
		unsigned int i;

		reap(t, q);
		for (i = 0; i < n && r[i].done; i++)
			;
		if (i == n)
			return true;
		if (vdrv_now_ms() >= deadline)
			return false;
		vdrv_irq_wait(&t->d, deadline - vdrv_now_ms());
	}
}

/* ---- FUSE requests ----------------------------------------------------- */

/* Adds len bytes at gpa as n segments (scattered: GAP bytes between). */
static void add_segs(struct treq *r, uint64_t gpa, uint32_t len, unsigned int n,
		     bool w)
{
	uint64_t at = gpa;

	for (unsigned int i = 0; i < n; i++) {
		uint32_t l = (uint32_t)((uint64_t)len * (i + 1) / n -
					(uint64_t)len * i / n);

		if (l)
			r->seg[r->n++] =
				(struct tseg){ .gpa = at, .len = l, .w = w };
		at += l + GAP;
	}
}

/* A request's bytes: header, then args. Returns its length. */
static size_t msg(struct tdev *t, uint8_t *buf, uint32_t opcode,
		  uint64_t nodeid, const void *args, size_t alen)
{
	struct fuse_in_header h = {
		.len = (uint32_t)(IN_HDR + alen),
		.opcode = opcode,
		.unique = ++t->unique,
		.nodeid = nodeid,
		.uid = 1000,
		.gid = 1000,
		.pid = 42,
	};

	memcpy(buf, &h, IN_HDR);
	if (alen)
		memcpy(buf + IN_HDR, args, alen);
	return IN_HDR + alen;
}

/* How a call is laid out. */
struct lay {
	unsigned int out_segs; /* request pieces, 0: 1 */
	unsigned int in_segs;  /* reply pieces, 0: 1; no reply: room 0 */
	bool indirect;
	uint32_t room;	    /* reply bytes, 0: none given */
	int32_t len_delta;  /* added to the header's len */
	unsigned int queue; /* 0: the first request queue */
};

struct reply {
	struct fuse_out_header h;
	uint32_t used;
	uint8_t body[BIG] __attribute__((aligned(8)));
};

static struct reply rep; /* larger than the stack likes */
static struct treq reqs[2 * QSIZE];
static uint8_t big[BIG];

/*
 * Sends a request of mlen bytes at buf and waits for it: the reply's
 * error (<= 0) with rep filled, 1 when no reply came back (used len 0),
 * -ETIMEDOUT when nothing came back at all. Checks nothing was written
 * past the reply room or in the request.
 */
/*
 * Lays out a request of mlen bytes at buf as l says, makes it available
 * and kicks; r is the chain. Returns 0, or -ENOSPC.
 */
static int start_raw(struct tdev *t, const uint8_t *buf, size_t mlen,
		     const struct lay *l, struct treq *r)
{
	unsigned int q = l->queue ? l->queue : 1;
	unsigned int outs = l->out_segs ? l->out_segs : 1;
	unsigned int ins = l->in_segs ? l->in_segs : 1;
	size_t span = l->room + (size_t)ins * GAP + GAP;
	struct fuse_in_header h;
	uint64_t at = REQ_GPA;

	memcpy(big, buf, mlen);
	if (mlen >= IN_HDR) {
		memcpy(&h, big, IN_HDR);
		h.len += l->len_delta;
		memcpy(big, &h, IN_HDR);
	}
	/* The pieces as add_segs() cuts them, GAP bytes apart. */
	for (unsigned int i = 0; i < outs; i++) {
		uint64_t s = mlen * i / outs, e = mlen * (i + 1) / outs;

		memcpy(t->d.ram + at, big + s, e - s);
		at += e - s + GAP;
	}
	memset(t->d.ram + REP_GPA, CANARY, span < BIG ? span : BIG);
	memset(r, 0, sizeof(*r));
	r->indirect = l->indirect;
	add_segs(r, REQ_GPA, (uint32_t)mlen, outs, false);
	if (l->room)
		add_segs(r, REP_GPA, l->room, ins, true);
	if (!submit(t, q, r))
		return -ENOSPC;
	kick(t, q);
	return 0;
}

/*
 * Waits for r and checks it: the reply's error (<= 0) with rep filled, 1
 * when no reply came back (used len 0), -ETIMEDOUT when nothing came back
 * at all. Nothing may be written past the used length, in the gaps
 * between the pieces or outside RAM; the reply must echo unique.
 */
static int finish_raw(struct __test_metadata *_metadata, struct tdev *t,
		      const struct lay *l, struct treq *r, uint64_t unique)
{
	unsigned int q = l->queue ? l->queue : 1;
	uint32_t got = 0;

	if (!wait_done(t, q, r, 1))
		return -ETIMEDOUT;
	rep.used = r->used_len;
	EXPECT_LE(r->used_len, l->room);
	memset(&rep.h, 0, sizeof(rep.h));
	for (unsigned int i = 0; i < r->n; i++) {
		if (!r->seg[i].w)
			continue;
		for (uint32_t k = 0; k < r->seg[i].len; k++, got++) {
			uint8_t b = t->d.ram[r->seg[i].gpa + k];

			if (got < OUT_HDR)
				((uint8_t *)&rep.h)[got] = b;
			else if (got - OUT_HDR < sizeof(rep.body))
				rep.body[got - OUT_HDR] = b;
			if (got >= r->used_len && b != CANARY) {
				EXPECT_EQ(CANARY, b) TH_LOG("byte %u", got);
				break;
			}
		}
		for (uint32_t k = 0; k < GAP; k++)
			EXPECT_EQ(CANARY,
				  t->d.ram[r->seg[i].gpa + r->seg[i].len + k]);
	}
	EXPECT_TRUE(vdrv_guards_intact(&t->d));
	if (!r->used_len)
		return 1;
	EXPECT_LE(OUT_HDR, r->used_len);
	EXPECT_EQ(r->used_len, rep.h.len);
	EXPECT_EQ(unique, rep.h.unique);
	EXPECT_GE(0, rep.h.error);
	EXPECT_LE(-4095, rep.h.error);
	if (rep.h.error)
		EXPECT_EQ(OUT_HDR, rep.h.len);
	return rep.h.error;
}

static uint64_t unique_of(const uint8_t *buf, size_t mlen)
{
	struct fuse_in_header h;

	if (mlen < IN_HDR)
		return 0; /* no header: nothing to echo */
	memcpy(&h, buf, IN_HDR);
	return h.unique;
}

static int send_raw(struct __test_metadata *_metadata, struct tdev *t,
		    const uint8_t *buf, size_t mlen, const struct lay *l)
{
	struct treq *r = &reqs[0];
	int ret = start_raw(t, buf, mlen, l, r);

	return ret ? ret : finish_raw(_metadata, t, l, r, unique_of(buf, mlen));
}

static int call_l(struct __test_metadata *_metadata, struct tdev *t,
		  uint32_t opcode, uint64_t nodeid, const void *args,
		  size_t alen, const struct lay *l)
{
	static uint8_t buf[BIG];

	return send_raw(_metadata, t, buf,
			msg(t, buf, opcode, nodeid, args, alen), l);
}

/* The usual layout: room for the reply, one piece each. */
#define CALL(op, node, args, alen)                 \
	call_l(_metadata, t, op, node, args, alen, \
	       &(struct lay){ .room = 8192 })
#define CALL_L(op, node, args, alen, ...) \
	call_l(_metadata, t, op, node, args, alen, &(struct lay){ __VA_ARGS__ })

/* Two strings, NUL-terminated, one after the other, after an arg. */
static size_t args_names(uint8_t *buf, const void *arg, size_t alen,
			 const char *a, const char *b)
{
	size_t n = alen;

	if (alen)
		memcpy(buf, arg, alen);
	memcpy(buf + n, a, strlen(a) + 1);
	n += strlen(a) + 1;
	if (b) {
		memcpy(buf + n, b, strlen(b) + 1);
		n += strlen(b) + 1;
	}
	return n;
}

static int do_init(struct __test_metadata *_metadata, struct tdev *t,
		   uint32_t major, uint32_t minor, uint32_t flags,
		   struct fuse_init_out *out)
{
	struct fuse_init_in in = {
		.major = major,
		.minor = minor,
		.max_readahead = 128 << 10,
		.flags = flags,
	};
	int ret = CALL(FUSE_INIT, 0, &in, sizeof(in));

	if (!ret && out)
		memcpy(out, rep.body, sizeof(*out));
	return ret;
}

/* Every flag Linux 6.1 offers, and those it must not get back. */
#define LINUX_FLAGS 0xffffffffU
#define NOT_OURS                                                              \
	(FUSE_DO_READDIRPLUS | FUSE_READDIRPLUS_AUTO | FUSE_WRITEBACK_CACHE | \
	 FUSE_MAP_ALIGNMENT | FUSE_POSIX_LOCKS | FUSE_FLOCK_LOCKS |           \
	 FUSE_SPLICE_READ | FUSE_SPLICE_WRITE | FUSE_SPLICE_MOVE |            \
	 FUSE_SECURITY_CTX | FUSE_INIT_EXT | FUSE_EXPORT_SUPPORT)

/* ---- the fixture ------------------------------------------------------- */

enum tkind { T_TFS, T_TFS_RO, T_FWD };

static int tdev_create(struct tdev *t, enum tkind kind, unsigned int nr_queues)
{
	struct virtio_fs_params p = {
		.name = "virtio-fs-test",
		.tag = TAG,
		.nr_queues = nr_queues,
		.attr_timeout_ms = ATTR_MS,
		.mem = &t->d.mem,
		.irq = { .set = vdrv_irq_set, .opaque = &t->d.irq, .gsi = 5 },
	};
	int ret;

	if (kind == T_FWD) {
		t->tfwd = calloc(1, sizeof(*t->tfwd));
		if (!t->tfwd)
			return -ENOMEM;
		t->tfwd->base.ops = &tfwd_ops;
		t->tfwd->base.name = "tfwd";
		pthread_mutex_init(&t->tfwd->lock, NULL);
		pthread_cond_init(&t->tfwd->cond, NULL);
		p.backend = &t->tfwd->base;
	} else {
		t->tfs = tfs_new(kind == T_TFS_RO, &t->destroyed);
		if (!t->tfs)
			return -ENOMEM;
		p.backend = &t->tfs->base;
	}
	ret = virtio_fs__create(&t->fs, &p);
	if (ret) {
		fs_backend__destroy(p.backend);
		t->tfs = NULL;
		t->tfwd = NULL;
		return ret;
	}
	t->d.vdev = virtio_fs__device(t->fs);
	t->nr_vqs = nr_queues + 1;
	return 0;
}

static int tdev_open(struct tdev *t, enum tkind kind, unsigned int nr_queues)
{
	int ret = tdev_create(t, kind, nr_queues);

	return ret ? ret : virtio_fs__start(t->fs, NULL);
}

FIXTURE(vfs)
{
	struct tdev t;
};

FIXTURE_SETUP(vfs)
{
	struct tdev *t = &self->t;

	ASSERT_EQ(0, vdrv_init(&t->d, RAM_SIZE));
}

FIXTURE_TEARDOWN(vfs)
{
	struct tdev *t = &self->t;

	/* The device's thread goes first: it may still use guest memory. */
	virtio_fs__destroy(t->fs);
	vdrv_exit(&t->d);
}

#define OPEN(kind)                                                             \
	do {                                                                   \
		ASSERT_EQ(0, tdev_open(t, kind, 2));                           \
		ASSERT_EQ(ST_LIVE, bring_up(t));                               \
		ASSERT_EQ(0, do_init(_metadata, t, 7, 38, LINUX_FLAGS, NULL)); \
	} while (0)

/* ---- creation, config, INIT ------------------------------------------ */

TEST_F(vfs, create_rejects)
{
	struct tdev *t = &self->t;
	struct tfs *b = tfs_new(false, &t->destroyed);
	struct virtio_fs_params p = { .tag = TAG,
				      .backend = &b->base,
				      .nr_queues = 1,
				      .mem = &t->d.mem };
	struct virtio_fs *f = NULL;

	ASSERT_NE(NULL, b);
	p.backend = NULL;
	EXPECT_EQ(-EINVAL, virtio_fs__create(&f, &p));
	p.backend = &b->base;
	p.tag = NULL;
	EXPECT_EQ(-EINVAL, virtio_fs__create(&f, &p));
	p.tag = "";
	EXPECT_EQ(-EINVAL, virtio_fs__create(&f, &p));
	p.tag = "0123456789012345678901234567890123456"; /* 37 */
	EXPECT_EQ(-EINVAL, virtio_fs__create(&f, &p));
	p.tag = TAG;
	p.nr_queues = 0;
	EXPECT_EQ(-EINVAL, virtio_fs__create(&f, &p));
	p.nr_queues = VIRTIO_FS_MAX_QUEUES + 1;
	EXPECT_EQ(-EINVAL, virtio_fs__create(&f, &p));
	p.nr_queues = 1;
	p.mem = NULL;
	EXPECT_EQ(-EINVAL, virtio_fs__create(&f, &p));
	/* Failures left the backend to us. */
	EXPECT_FALSE(t->destroyed);
	p.mem = &t->d.mem;
	p.nr_queues = VIRTIO_FS_MAX_QUEUES;
	ASSERT_EQ(0, virtio_fs__create(&f, &p));
	ASSERT_EQ(0, virtio_fs__start(f, NULL));
	virtio_fs__destroy(f);
	EXPECT_TRUE(t->destroyed);
	virtio_fs__destroy(NULL);
}

/* Its ring, by the real constructor, is restricted (issue 15). */
TEST_F(vfs, its_ring_is_restricted)
{
	struct tdev *t = &self->t;
	struct ring_census c;

	ASSERT_EQ(0, tdev_open(t, T_TFS, 2));
	ASSERT_EQ(0, ring_census__take(&c));
	EXPECT_LE(1U, c.restricted);
	EXPECT_EQ(0U, c.unrestricted);
}

TEST_F(vfs, config_and_features)
{
	struct tdev *t = &self->t;
	uint8_t tag[36];
	uint64_t f;

	ASSERT_EQ(0, tdev_open(t, T_TFS, 2));
	EXPECT_EQ(VIRTIO_ID_FS, vdrv_rd32(&t->d, VIRTIO_MMIO_DEVICE_ID));
	for (unsigned int i = 0; i < sizeof(tag); i += 4) {
		uint32_t v = vdrv_rd32(&t->d, VIRTIO_MMIO_CONFIG + i);

		memcpy(tag + i, &v, 4);
	}
	EXPECT_EQ(0, memcmp(tag, TAG, strlen(TAG)));
	for (size_t i = strlen(TAG); i < sizeof(tag); i++)
		EXPECT_EQ(0, tag[i]);
	EXPECT_EQ(2, vdrv_rd32(&t->d, VIRTIO_MMIO_CONFIG +
					      offsetof(struct virtio_fs_config,
						       num_request_queues)));
	f = vdrv_device_features(&t->d);
	EXPECT_TRUE(f & FEAT(VIRTIO_F_VERSION_1));
	EXPECT_FALSE(f & FEAT(0)); /* VIRTIO_FS_F_NOTIFICATION */
	/* Three queues: hiprio and two request queues; no fourth. */
	vdrv_wr32(&t->d, VIRTIO_MMIO_QUEUE_SEL, 2);
	EXPECT_EQ(QSIZE, vdrv_rd32(&t->d, VIRTIO_MMIO_QUEUE_NUM_MAX));
	vdrv_wr32(&t->d, VIRTIO_MMIO_QUEUE_SEL, 3);
	EXPECT_EQ(0, vdrv_rd32(&t->d, VIRTIO_MMIO_QUEUE_NUM_MAX));
}

TEST_F(vfs, init_negotiation)
{
	struct tdev *t = &self->t;
	struct fuse_init_out out;
	struct fuse_getattr_in ga = { 0 };
	unsigned int calls;

	ASSERT_EQ(0, tdev_open(t, T_TFS, 1));
	ASSERT_EQ(ST_LIVE, bring_up(t));
	calls = t->tfs->calls;
	/* Before INIT: EIO, and nothing reaches the backend. */
	EXPECT_EQ(-EIO, CALL(FUSE_GETATTR, N_ROOT, &ga, sizeof(ga)));
	EXPECT_EQ(calls, t->tfs->calls);
	EXPECT_EQ(-EPROTO, do_init(_metadata, t, 6, 38, 0, NULL));
	EXPECT_EQ(-EPROTO, do_init(_metadata, t, 8, 0, 0, NULL));
	EXPECT_EQ(-EPROTO, do_init(_metadata, t, 7, 8, 0, NULL));
	EXPECT_EQ(-EIO, CALL(FUSE_GETATTR, N_ROOT, &ga, sizeof(ga)));

	/* Linux 6.1 speaks 7.37 and offers everything it knows. */
	ASSERT_EQ(0, do_init(_metadata, t, 7, 37, LINUX_FLAGS, &out));
	EXPECT_EQ(OUT_HDR + sizeof(out), rep.used);
	EXPECT_EQ(7, out.major);
	EXPECT_EQ(37, out.minor);
	EXPECT_EQ(FUSE_MAX_WRITE, out.max_write);
	EXPECT_EQ(FUSE_MAX_WRITE / 4096, out.max_pages);
	EXPECT_EQ(128 << 10, out.max_readahead);
	EXPECT_TRUE(out.flags & FUSE_ASYNC_READ);
	EXPECT_TRUE(out.flags & FUSE_BIG_WRITES);
	EXPECT_TRUE(out.flags & FUSE_MAX_PAGES);
	EXPECT_TRUE(out.flags & FUSE_PARALLEL_DIROPS);
	EXPECT_EQ(0, out.flags & NOT_OURS);
	EXPECT_EQ(0, out.flags2);
	/* A newer guest gets our minor; flags it did not offer, none. */
	ASSERT_EQ(0, do_init(_metadata, t, 7, 99, FUSE_BIG_WRITES, &out));
	EXPECT_EQ(FUSE_KERNEL_MINOR_VERSION, out.minor);
	EXPECT_EQ(FUSE_BIG_WRITES, out.flags);
	/* An older one gets the 7.22 reply size. */
	ASSERT_EQ(0, do_init(_metadata, t, 7, 22, 0, &out));
	EXPECT_EQ(OUT_HDR + FUSE_COMPAT_22_INIT_OUT_SIZE, rep.used);
	/* No room for the answer: EINVAL, header only. */
	EXPECT_EQ(-EINVAL,
		  CALL_L(FUSE_INIT, 0,
			 (&(struct fuse_init_in){ .major = 7, .minor = 38 }),
			 sizeof(struct fuse_init_in), .room = 40));
	/* INIT arguments cut short. */
	EXPECT_EQ(-EINVAL, CALL(FUSE_INIT, 0, &out, 12));

	EXPECT_EQ(0, CALL(FUSE_GETATTR, N_ROOT, &ga, sizeof(ga)));
	/* DESTROY ends the session. */
	EXPECT_EQ(0, CALL(FUSE_DESTROY, 0, NULL, 0));
	EXPECT_EQ(-EIO, CALL(FUSE_GETATTR, N_ROOT, &ga, sizeof(ga)));
	/* So does a driver reset. */
	ASSERT_EQ(0, do_init(_metadata, t, 7, 38, 0, NULL));
	ASSERT_EQ(ST_LIVE, bring_up(t));
	EXPECT_EQ(-EIO, CALL(FUSE_GETATTR, N_ROOT, &ga, sizeof(ga)));
}

/* ---- the ops ------------------------------------------------------------ */

/* SIGUSR2's report: the device line with its slots, a line per queue. */
TEST_F(vfs, report_names_slots_and_rings)
{
	struct tdev *t = &self->t;
	struct stderr_capture cap = { .saved = -1 };
	char log[4096];

	OPEN(T_TFS);
	ASSERT_EQ(0, CALL(FUSE_LOOKUP, N_ROOT, "hello", 6));
	ASSERT_EQ(0, stderr_capture__begin(&cap));
	virtio_device__report(t->d.vdev);
	EXPECT_EQ(1 + 3, stderr_capture__end(&cap, log, sizeof(log)));
	EXPECT_NE(NULL, strstr(log, "virtio-fs-test: status 0xf "))
	TH_LOG("%s", log);
	EXPECT_NE(NULL, strstr(log, "busy 0; q0 free slots 64; q1 free "
				    "slots 64; q2 free slots 64"))
	TH_LOG("%s", log);
	/* INIT and the LOOKUP went through q1, and came back. */
	EXPECT_NE(NULL, strstr(log, "virtio-fs-test q1: size "))
	TH_LOG("%s", log);
	EXPECT_NE(NULL, strstr(log, "avail idx 2 flags 0 taken 2 | used idx 2"))
	TH_LOG("%s", log);
}

TEST_F(vfs, lookup_getattr)
{
	struct tdev *t = &self->t;
	struct fuse_getattr_in ga = { 0 };
	struct fuse_entry_out e;
	struct fuse_attr_out a;

	OPEN(T_TFS);
	ASSERT_EQ(0, CALL(FUSE_LOOKUP, N_ROOT, "hello", 6));
	memcpy(&e, rep.body, sizeof(e));
	EXPECT_EQ(OUT_HDR + sizeof(e), rep.used);
	EXPECT_EQ(N_HELLO, e.nodeid);
	EXPECT_EQ(7, e.generation);
	EXPECT_EQ(ATTR_MS / 1000, e.entry_valid);
	EXPECT_EQ(ATTR_MS % 1000 * 1000000U, e.entry_valid_nsec);
	EXPECT_EQ(ATTR_MS / 1000, e.attr_valid);
	EXPECT_EQ(strlen(HELLO), e.attr.size);
	EXPECT_STREQ("hello", t->tfs->name);
	EXPECT_EQ(-ENOENT, CALL(FUSE_LOOKUP, N_ROOT, "nope", 5));
	EXPECT_EQ(-ESTALE, CALL(FUSE_LOOKUP, 999999, "x", 2));

	ASSERT_EQ(0, CALL(FUSE_GETATTR, N_DATA, &ga, sizeof(ga)));
	memcpy(&a, rep.body, sizeof(a));
	EXPECT_EQ(OUT_HDR + sizeof(a), rep.used);
	EXPECT_EQ(DATA_SIZE, a.attr.size);
	EXPECT_EQ(ATTR_MS / 1000, a.attr_valid);
	EXPECT_EQ(-ESTALE, CALL(FUSE_GETATTR, 12345, &ga, sizeof(ga)));

	/* Header and args over three pieces, reply over five, indirect. */
	ASSERT_EQ(0, CALL_L(FUSE_LOOKUP, N_ROOT, "data", 5, .out_segs = 3,
			    .in_segs = 5, .room = 200, .indirect = true));
	memcpy(&e, rep.body, sizeof(e));
	EXPECT_EQ(N_DATA, e.nodeid);
	/* The header split as small as it gets: byte by byte. */
	ASSERT_EQ(0, CALL_L(FUSE_LOOKUP, N_ROOT, "mem", 4, .out_segs = 44,
			    .in_segs = 100, .room = 200, .indirect = true));
	memcpy(&e, rep.body, sizeof(e));
	EXPECT_EQ(N_MEM, e.nodeid);
}

TEST_F(vfs, metadata_ops)
{
	struct tdev *t = &self->t;
	uint8_t buf[8192];
	struct fuse_mknod_in mk = { .mode = S_IFREG | 0640, .umask = 022 };
	struct fuse_mkdir_in md = { .mode = 0755, .umask = 077 };
	struct fuse_create_in cr = { .flags = O_RDWR | O_CREAT | O_EXCL,
				     .mode = 0600,
				     .umask = 002 };
	struct fuse_rename2_in rn = { .newdir = N_ROOT,
				      .flags = RENAME_NOREPLACE };
	struct fuse_link_in ln = { .oldnodeid = N_HELLO };
	struct fuse_open_in op = { .flags = O_RDONLY | O_CREAT | O_NOCTTY };
	struct fuse_open_out oo;
	struct fuse_entry_out e;
	struct fuse_statfs_out st;
	struct fuse_lseek_in ls = { .fh = 1, .offset = 5, .whence = SEEK_HOLE };
	struct fuse_fallocate_in fa = { .offset = 0, .length = 4096 };
	struct fuse_setattr_in sa = { .valid = FATTR_SIZE, .size = 3 };
	unsigned int calls;
	size_t n;

	OPEN(T_TFS);
	n = args_names(buf, &mk, sizeof(mk), "node", NULL);
	ASSERT_EQ(0, CALL(FUSE_MKNOD, N_ROOT, buf, n));
	EXPECT_EQ(S_IFREG | 0640, t->tfs->mode);
	EXPECT_EQ(022, t->tfs->umask);
	EXPECT_STREQ("node", t->tfs->name);
	n = args_names(buf, &md, sizeof(md), "dir", NULL);
	ASSERT_EQ(0, CALL(FUSE_MKDIR, N_ROOT, buf, n));
	EXPECT_EQ(077, t->tfs->umask);
	n = args_names(buf, NULL, 0, "sl", "../some/where");
	ASSERT_EQ(0, CALL(FUSE_SYMLINK, N_ROOT, buf, n));
	EXPECT_STREQ("sl", t->tfs->name);
	EXPECT_STREQ("../some/where", t->tfs->name2);
	ASSERT_EQ(0, CALL(FUSE_READLINK, N_LINK, NULL, 0));
	EXPECT_EQ(OUT_HDR + 5, rep.used);
	EXPECT_EQ(0, memcmp(rep.body, "hello", 5));
	EXPECT_EQ(0, CALL(FUSE_UNLINK, N_ROOT, "gone", 5));
	EXPECT_STREQ("gone", t->tfs->name);
	EXPECT_EQ(0, CALL(FUSE_RMDIR, N_ROOT, "dir", 4));
	n = args_names(buf, &rn, sizeof(rn), "a", "b");
	EXPECT_EQ(0, CALL(FUSE_RENAME2, N_ROOT, buf, n));
	EXPECT_STREQ("a", t->tfs->name);
	EXPECT_STREQ("b", t->tfs->name2);
	EXPECT_EQ(RENAME_NOREPLACE, t->tfs->rename_flags);
	rn.flags = RENAME_NOREPLACE | RENAME_EXCHANGE;
	n = args_names(buf, &rn, sizeof(rn), "a", "b");
	EXPECT_EQ(-EINVAL, CALL(FUSE_RENAME2, N_ROOT, buf, n));
	rn.flags = 1U << 2; /* RENAME_WHITEOUT */
	n = args_names(buf, &rn, sizeof(rn), "a", "b");
	EXPECT_EQ(-EINVAL, CALL(FUSE_RENAME2, N_ROOT, buf, n));
	n = args_names(buf, &rn, sizeof(struct fuse_rename_in), "c", "d");
	EXPECT_EQ(0, CALL(FUSE_RENAME, N_ROOT, buf, n));
	EXPECT_EQ(0, t->tfs->rename_flags);
	n = args_names(buf, &ln, sizeof(ln), "hard", NULL);
	ASSERT_EQ(0, CALL(FUSE_LINK, N_ROOT, buf, n));
	memcpy(&e, rep.body, sizeof(e));
	EXPECT_EQ(N_NEW, e.nodeid);

	/* OPEN: O_CREAT never reaches the backend's open. */
	ASSERT_EQ(0, CALL(FUSE_OPEN, N_HELLO, &op, sizeof(op)));
	memcpy(&oo, rep.body, sizeof(oo));
	EXPECT_EQ(N_HELLO + 100, oo.fh);
	EXPECT_EQ(FOPEN_KEEP_CACHE, oo.open_flags);
	EXPECT_EQ(O_RDONLY, t->tfs->open_flags);
	n = args_names(buf, &cr, sizeof(cr), "new", NULL);
	ASSERT_EQ(0, CALL(FUSE_CREATE, N_ROOT, buf, n));
	EXPECT_EQ(OUT_HDR + sizeof(e) + sizeof(oo), rep.used);
	memcpy(&oo, rep.body + sizeof(e), sizeof(oo));
	EXPECT_EQ(4242, oo.fh);
	EXPECT_EQ(0600, t->tfs->mode);
	EXPECT_EQ(002, t->tfs->umask);
	/* No room for CREATE's answer: the backend creates nothing. */
	calls = t->tfs->calls;
	EXPECT_EQ(-EINVAL, CALL_L(FUSE_CREATE, N_ROOT, buf, n,
				  .room = OUT_HDR + sizeof(e)));
	EXPECT_EQ(calls, t->tfs->calls);
	ASSERT_EQ(0, CALL(FUSE_STATFS, N_ROOT, NULL, 0));
	memcpy(&st, rep.body, sizeof(st));
	EXPECT_EQ(1000, st.st.blocks);
	ASSERT_EQ(0, CALL(FUSE_LSEEK, N_DATA, &ls, sizeof(ls)));
	EXPECT_EQ(DATA_SIZE, *(uint64_t *)rep.body);
	ls.whence = SEEK_END;
	EXPECT_EQ(-EINVAL, CALL(FUSE_LSEEK, N_DATA, &ls, sizeof(ls)));
	EXPECT_EQ(0, CALL(FUSE_FALLOCATE, N_DATA, &fa, sizeof(fa)));
	fa.mode = 0x40; /* FALLOC_FL_ZERO_RANGE... not ours */
	EXPECT_EQ(-EOPNOTSUPP, CALL(FUSE_FALLOCATE, N_DATA, &fa, sizeof(fa)));
	fa.mode = 0;
	fa.length = UINT64_MAX;
	EXPECT_EQ(-EFBIG, CALL(FUSE_FALLOCATE, N_DATA, &fa, sizeof(fa)));
	EXPECT_EQ(0, CALL(FUSE_SETATTR, N_MEM, &sa, sizeof(sa)));
	EXPECT_EQ(3, ((struct fuse_attr_out *)rep.body)->attr.size);
	EXPECT_EQ(0, CALL(FUSE_FLUSH, N_HELLO,
			  (&(struct fuse_flush_in){ .fh = 1 }),
			  sizeof(struct fuse_flush_in)));
	EXPECT_EQ(0, CALL(FUSE_FSYNC, N_HELLO,
			  (&(struct fuse_fsync_in){ .fh = 1 }),
			  sizeof(struct fuse_fsync_in)));
	EXPECT_EQ(0, CALL(FUSE_RELEASE, N_HELLO,
			  (&(struct fuse_release_in){ .fh = 1 }),
			  sizeof(struct fuse_release_in)));
	EXPECT_EQ(OUT_HDR, rep.used);
	/* xattrs, ACCESS and the rest: ENOSYS. */
	EXPECT_EQ(-ENOSYS, CALL(FUSE_GETXATTR, N_HELLO, buf, 16));
	EXPECT_EQ(-ENOSYS, CALL(FUSE_LISTXATTR, N_HELLO, buf, 8));
	EXPECT_EQ(-ENOSYS, CALL(FUSE_SETXATTR, N_HELLO, buf, 32));
	EXPECT_EQ(-ENOSYS, CALL(FUSE_REMOVEXATTR, N_HELLO, "a", 2));
	EXPECT_EQ(-ENOSYS, CALL(FUSE_ACCESS, N_HELLO, buf, 8));
	EXPECT_EQ(-ENOSYS, CALL(FUSE_READDIRPLUS, N_ROOT, buf, 40));
	EXPECT_EQ(-ENOSYS, CALL(FUSE_SETUPMAPPING, N_ROOT, buf, 40));
	EXPECT_EQ(-ENOSYS, CALL(12345, N_ROOT, NULL, 0));
	EXPECT_EQ(-ENOSYS, CALL(CUSE_INIT, N_ROOT, NULL, 0));
}

/* ---- data --------------------------------------------------------------- */

static struct fuse_read_in rd_in(uint64_t fh, uint64_t off, uint32_t size)
{
	return (struct fuse_read_in){ .fh = fh, .offset = off, .size = size };
}

TEST_F(vfs, read_iovec_path)
{
	struct tdev *t = &self->t;
	struct fuse_read_in in = rd_in(1, 0, 4096);
	unsigned int reads;

	OPEN(T_TFS);
	reads = t->tfs->reads;
	/* The whole file, the reply header split 3 ways. */
	ASSERT_EQ(0, CALL_L(FUSE_READ, N_HELLO, &in, sizeof(in),
			    .room = OUT_HDR + 4096, .in_segs = 7));
	EXPECT_EQ(OUT_HDR + strlen(HELLO), rep.used);
	EXPECT_EQ(0, memcmp(rep.body, HELLO, strlen(HELLO)));
	EXPECT_EQ(reads + 1, t->tfs->reads);
	/* From an offset; at EOF a valid empty answer. */
	in = rd_in(1, 7, 3);
	ASSERT_EQ(0, CALL(FUSE_READ, N_HELLO, &in, sizeof(in)));
	EXPECT_EQ(OUT_HDR + 3, rep.used);
	EXPECT_EQ(0, memcmp(rep.body, "wor", 3));
	in = rd_in(1, 100, 50);
	ASSERT_EQ(0, CALL(FUSE_READ, N_HELLO, &in, sizeof(in)));
	EXPECT_EQ(OUT_HDR, rep.used);
	/* Size 0: just the header, no backend. */
	reads = t->tfs->reads;
	in = rd_in(1, 0, 0);
	ASSERT_EQ(0, CALL(FUSE_READ, N_HELLO, &in, sizeof(in)));
	EXPECT_EQ(OUT_HDR, rep.used);
	EXPECT_EQ(reads, t->tfs->reads);
	/* The backend's error. */
	in = rd_in(1, 0, 10);
	EXPECT_EQ(-EBADF, CALL(FUSE_READ, N_LINK, &in, sizeof(in)));
	EXPECT_EQ(0, t->tfs->writes);
}

TEST_F(vfs, read_io_fd_path)
{
	struct tdev *t = &self->t;
	struct fuse_read_in in = rd_in(1, 12345, FUSE_MAX_WRITE);
	uint64_t bad = 0;

	OPEN(T_TFS);
	/* 1 MiB over 257 pieces (an indirect table), straight from the fd. */
	ASSERT_EQ(0, CALL_L(FUSE_READ, N_DATA, &in, sizeof(in),
			    .room = OUT_HDR + FUSE_MAX_WRITE, .in_segs = 257,
			    .indirect = true));
	EXPECT_EQ(OUT_HDR + FUSE_MAX_WRITE, rep.used);
	for (uint32_t i = 0; i < FUSE_MAX_WRITE; i++)
		bad += rep.body[i] != pat(12345 + i, 0);
	EXPECT_EQ(0, bad);
	EXPECT_EQ(0, t->tfs->reads); /* not through ->read */
	EXPECT_LE(1, t->tfs->io_fds);
	/* Past the end: short, then empty. */
	in = rd_in(1, DATA_SIZE - 100, 4096);
	ASSERT_EQ(0, CALL(FUSE_READ, N_DATA, &in, sizeof(in)));
	EXPECT_EQ(OUT_HDR + 100, rep.used);
	bad = 0;
	for (uint32_t i = 0; i < 100; i++)
		bad += rep.body[i] != pat(DATA_SIZE - 100 + i, 0);
	EXPECT_EQ(0, bad);
	in = rd_in(1, DATA_SIZE + 5, 4096);
	ASSERT_EQ(0, CALL(FUSE_READ, N_DATA, &in, sizeof(in)));
	EXPECT_EQ(OUT_HDR, rep.used);
	/* The header and the data sharing one piece. */
	in = rd_in(1, 3, 50);
	ASSERT_EQ(0, CALL_L(FUSE_READ, N_DATA, &in, sizeof(in),
			    .room = OUT_HDR + 50, .in_segs = 1));
	EXPECT_EQ(OUT_HDR + 50, rep.used);
	EXPECT_EQ(pat(3, 0), rep.body[0]);
	EXPECT_EQ(pat(52, 0), rep.body[49]);
	EXPECT_EQ(0, t->tfs->reads);
}

static size_t write_msg(struct tdev *t, uint8_t *buf, uint64_t node,
			uint64_t off, uint32_t size, uint32_t data_len,
			uint64_t seed)
{
	struct fuse_write_in in = { .fh = 1, .offset = off, .size = size };
	size_t n = msg(t, buf, FUSE_WRITE, node, &in, sizeof(in));
	struct fuse_in_header h;

	for (uint32_t i = 0; i < data_len; i++)
		buf[n + i] = pat(off + i, seed);
	memcpy(&h, buf, IN_HDR);
	h.len += data_len;
	memcpy(buf, &h, IN_HDR);
	return n + data_len;
}

TEST_F(vfs, write_both_paths)
{
	static uint8_t buf[FUSE_MAX_WRITE + 4096], back[FUSE_MAX_WRITE];
	struct tdev *t = &self->t;
	struct fuse_write_out wo;
	struct fuse_read_in in;
	uint64_t bad = 0;
	size_t n;

	OPEN(T_TFS);
	/* io_fd: 1 MiB over 200 pieces, header and write_in split too. */
	n = write_msg(t, buf, N_DATA, 4096 * 3 + 7, FUSE_MAX_WRITE,
		      FUSE_MAX_WRITE, 9);
	ASSERT_EQ(0, send_raw(_metadata, t, buf, n,
			      &(struct lay){ .out_segs = 200,
					     .indirect = true,
					     .room = 64 }));
	memcpy(&wo, rep.body, sizeof(wo));
	EXPECT_EQ(OUT_HDR + sizeof(wo), rep.used);
	EXPECT_EQ(FUSE_MAX_WRITE, wo.size);
	EXPECT_EQ(0, t->tfs->writes);
	ASSERT_EQ(FUSE_MAX_WRITE,
		  pread(t->tfs->data_fd, back, FUSE_MAX_WRITE, 4096 * 3 + 7));
	for (uint32_t i = 0; i < FUSE_MAX_WRITE; i++)
		bad += back[i] != pat(4096 * 3 + 7 + i, 9);
	EXPECT_EQ(0, bad);
	/* Around it, the file is as it was. */
	ASSERT_EQ(7, pread(t->tfs->data_fd, back, 7, 4096 * 3));
	EXPECT_EQ(pat(4096 * 3, 0), back[0]);

	/* The iovec path: into "mem", then read back through READ. */
	n = write_msg(t, buf, N_MEM, 100, 5000, 5000, 3);
	ASSERT_EQ(0, send_raw(_metadata, t, buf, n,
			      &(struct lay){ .out_segs = 9, .room = 64 }));
	memcpy(&wo, rep.body, sizeof(wo));
	EXPECT_EQ(5000, wo.size);
	EXPECT_EQ(1, t->tfs->writes);
	bad = 0;
	for (uint32_t i = 0; i < 5000; i++)
		bad += t->tfs->mem[100 + i] != pat(100 + i, 3);
	EXPECT_EQ(0, bad);
	in = rd_in(1, 0, 8192 - OUT_HDR);
	ASSERT_EQ(0, CALL(FUSE_READ, N_MEM, &in, sizeof(in)));
	EXPECT_EQ(OUT_HDR + 5100, rep.used);
	EXPECT_EQ(pat(100, 3), rep.body[100]);
	/* The backend's short count is what the guest hears. */
	n = write_msg(t, buf, N_MEM, MEM_SIZE - 10, 4000, 4000, 3);
	EXPECT_EQ(-EFBIG,
		  send_raw(_metadata, t, buf, n, &(struct lay){ .room = 64 }));
	/* Empty write: nothing to do. */
	n = write_msg(t, buf, N_MEM, 0, 0, 0, 3);
	ASSERT_EQ(0,
		  send_raw(_metadata, t, buf, n, &(struct lay){ .room = 64 }));
	EXPECT_EQ(0, ((struct fuse_write_out *)rep.body)->size);
}

TEST_F(vfs, readdir_many)
{
	struct tdev *t = &self->t;
	struct fuse_open_in oi = { 0 };
	struct fuse_read_in in;
	uint64_t off = 0;
	unsigned int seen = 0, calls = 0;
	char want[64];

	OPEN(T_TFS);
	ASSERT_EQ(0, CALL(FUSE_OPENDIR, N_MANY, &oi, sizeof(oi)));
	EXPECT_EQ(77, ((struct fuse_open_out *)rep.body)->fh);
	for (;;) {
		size_t pos = 0;
		uint32_t len;

		in = rd_in(77, off, 4096);
		ASSERT_EQ(0, CALL_L(FUSE_READDIR, N_MANY, &in, sizeof(in),
				    .room = OUT_HDR + 4096, .in_segs = 3));
		len = rep.used - OUT_HDR;
		ASSERT_LE(len, 4096);
		calls++;
		if (!len)
			break;
		while (pos < len) {
			struct fuse_dirent d;

			ASSERT_LE(pos + FUSE_NAME_OFFSET, len);
			memcpy(&d, rep.body + pos, sizeof(d));
			ASSERT_LE(pos + FUSE_DIRENT_SIZE(&d), len);
			EXPECT_EQ(0, pos % 8);
			entry_name(seen, want, sizeof(want));
			ASSERT_EQ(strlen(want), d.namelen);
			EXPECT_EQ(0, memcmp(rep.body + pos + FUSE_NAME_OFFSET,
					    want, d.namelen));
			EXPECT_EQ(N_NEW + seen, d.ino);
			EXPECT_EQ(DT_REG, d.type);
			/* Padding is zeros. */
			for (size_t k = FUSE_NAME_OFFSET + d.namelen;
			     k < FUSE_DIRENT_SIZE(&d); k++)
				EXPECT_EQ(0, rep.body[pos + k]);
			off = d.off;
			seen++;
			pos += FUSE_DIRENT_SIZE(&d);
		}
		ASSERT_GT(40, calls);
	}
	EXPECT_EQ(N_ENTRIES, seen);
	EXPECT_LT(3, calls); /* it took several calls */
	/* A guest asking for far more than one page gets what fits ours. */
	in = rd_in(77, 0, FUSE_MAX_WRITE);
	ASSERT_EQ(0, CALL_L(FUSE_READDIR, N_MANY, &in, sizeof(in),
			    .room = OUT_HDR + FUSE_MAX_WRITE));
	EXPECT_LT(OUT_HDR + 4096, rep.used);
	EXPECT_GE(OUT_HDR + FUSE_DIRBUF_MAX, rep.used);
	/* Room smaller than it asks: refused. */
	in = rd_in(77, 0, 4096);
	EXPECT_EQ(-EINVAL,
		  CALL_L(FUSE_READDIR, N_MANY, &in, sizeof(in), .room = 1000));
	EXPECT_EQ(0, CALL(FUSE_RELEASEDIR, N_MANY,
			  (&(struct fuse_release_in){ .fh = 77 }),
			  sizeof(struct fuse_release_in)));
	EXPECT_EQ(-ENOTDIR, CALL(FUSE_READDIR, N_HELLO, &in, sizeof(in)));
}

TEST_F(vfs, dirbuf_add)
{
	uint8_t buf[64];
	struct fs_dirbuf d = { .buf = buf, .size = sizeof(buf) };
	struct fuse_dirent de;

	memset(buf, 0xee, sizeof(buf));
	ASSERT_TRUE(fs_dirbuf__add(&d, "abc", 3, 5, DT_DIR, 1));
	EXPECT_EQ(32, d.used); /* 24 + 3, aligned to 8 */
	memcpy(&de, buf, sizeof(de));
	EXPECT_EQ(5, de.ino);
	EXPECT_EQ(1, de.off);
	EXPECT_EQ(3, de.namelen);
	EXPECT_EQ(DT_DIR, de.type);
	EXPECT_EQ(0, memcmp(buf + 24, "abc\0\0\0\0\0", 8));
	EXPECT_FALSE(fs_dirbuf__add(&d, "0123456789", 10, 6, DT_REG, 2));
	EXPECT_EQ(32, d.used);
	ASSERT_TRUE(fs_dirbuf__add(&d, "01234567", 8, 6, DT_REG, 2));
	EXPECT_EQ(64, d.used);
	EXPECT_FALSE(fs_dirbuf__add(&d, "x", 1, 7, DT_REG, 3));
	/* Names no guest may see are dropped, not written. */
	d.used = 0;
	EXPECT_TRUE(fs_dirbuf__add(&d, "a/b", 3, 7, DT_REG, 3));
	EXPECT_TRUE(fs_dirbuf__add(&d, "", 0, 7, DT_REG, 3));
	EXPECT_EQ(0, d.used);
}

TEST_F(vfs, forget_on_hiprio)
{
	struct tdev *t = &self->t;
	struct fuse_forget_in fi = { .nlookup = 3 };
	struct {
		struct fuse_batch_forget_in in;
		struct fuse_forget_one one[3];
	} bf = { { .count = 3 },
		 { { N_HELLO, 1 }, { N_DATA, 2 }, { N_MANY, 5 } } };

	OPEN(T_TFS);
	/* As Linux sends it: no writable descriptor at all. */
	EXPECT_EQ(1, CALL_L(FUSE_FORGET, N_LINK, &fi, sizeof(fi), .queue = 0));
	EXPECT_EQ(3, t->tfs->forgotten[N_LINK]);
	/* With room given, still nothing written. */
	EXPECT_EQ(1, CALL_L(FUSE_FORGET, N_LINK, &fi, sizeof(fi), .queue = 0,
			    .room = 64));
	EXPECT_EQ(6, t->tfs->forgotten[N_LINK]);
	EXPECT_EQ(1, CALL_L(FUSE_BATCH_FORGET, 0, &bf, sizeof(bf), .queue = 0,
			    .room = 64));
	EXPECT_EQ(1, t->tfs->forgotten[N_HELLO]);
	EXPECT_EQ(2, t->tfs->forgotten[N_DATA]);
	EXPECT_EQ(5, t->tfs->forgotten[N_MANY]);
	/* A count the message does not hold: nothing is forgotten. */
	bf.in.count = 4;
	EXPECT_EQ(1, CALL_L(FUSE_BATCH_FORGET, 0, &bf, sizeof(bf), .queue = 0));
	bf.in.count = UINT32_MAX;
	EXPECT_EQ(1, CALL_L(FUSE_BATCH_FORGET, 0, &bf, sizeof(bf), .queue = 0));
	EXPECT_EQ(1, t->tfs->forgotten[N_HELLO]);
	/* Truncated FORGET: no reply, no forget. */
	EXPECT_EQ(1, CALL_L(FUSE_FORGET, N_LINK, &fi, 4, .queue = 0));
	EXPECT_EQ(6, t->tfs->forgotten[N_LINK]);
	/* INTERRUPT: nothing to answer. */
	EXPECT_EQ(1, CALL_L(FUSE_INTERRUPT, 0, &fi, sizeof(fi), .queue = 0,
			    .room = 64));
	/* Requests work on the hiprio queue too, and on the second one. */
	EXPECT_EQ(0, CALL_L(FUSE_LOOKUP, N_ROOT, "hello", 6, .queue = 0,
			    .room = 200));
	EXPECT_EQ(0, CALL_L(FUSE_LOOKUP, N_ROOT, "hello", 6, .queue = 2,
			    .room = 200));
}

TEST_F(vfs, read_only)
{
	struct tdev *t = &self->t;
	uint8_t buf[512], wbuf[256];
	struct fuse_setattr_in sa = { .valid = FATTR_MODE, .mode = 0600 };
	struct fuse_mknod_in mk = { .mode = S_IFREG | 0644 };
	struct fuse_mkdir_in md = { .mode = 0755 };
	struct fuse_create_in cr = { .flags = O_RDONLY | O_CREAT };
	struct fuse_rename2_in rn = { .newdir = N_ROOT };
	struct fuse_link_in ln = { .oldnodeid = N_HELLO };
	struct fuse_fallocate_in fa = { .length = 1 };
	static const uint32_t wflags[] = { O_WRONLY, O_RDWR, O_RDONLY | O_TRUNC,
					   O_ACCMODE };
	struct fuse_read_in in = rd_in(1, 0, 100);
	unsigned int calls;
	size_t n;

	OPEN(T_TFS_RO);
	calls = t->tfs->calls;
	n = write_msg(t, wbuf, N_MEM, 0, 10, 10, 1);
	EXPECT_EQ(-EROFS,
		  send_raw(_metadata, t, wbuf, n, &(struct lay){ .room = 64 }));
	EXPECT_EQ(-EROFS, CALL(FUSE_SETATTR, N_MEM, &sa, sizeof(sa)));
	n = args_names(buf, &mk, sizeof(mk), "x", NULL);
	EXPECT_EQ(-EROFS, CALL(FUSE_MKNOD, N_ROOT, buf, n));
	n = args_names(buf, &md, sizeof(md), "x", NULL);
	EXPECT_EQ(-EROFS, CALL(FUSE_MKDIR, N_ROOT, buf, n));
	n = args_names(buf, &cr, sizeof(cr), "x", NULL);
	EXPECT_EQ(-EROFS, CALL(FUSE_CREATE, N_ROOT, buf, n));
	n = args_names(buf, NULL, 0, "x", "y");
	EXPECT_EQ(-EROFS, CALL(FUSE_SYMLINK, N_ROOT, buf, n));
	EXPECT_EQ(-EROFS, CALL(FUSE_UNLINK, N_ROOT, "hello", 6));
	EXPECT_EQ(-EROFS, CALL(FUSE_RMDIR, N_ROOT, "many", 5));
	n = args_names(buf, &rn, sizeof(struct fuse_rename_in), "a", "b");
	EXPECT_EQ(-EROFS, CALL(FUSE_RENAME, N_ROOT, buf, n));
	n = args_names(buf, &rn, sizeof(rn), "a", "b");
	EXPECT_EQ(-EROFS, CALL(FUSE_RENAME2, N_ROOT, buf, n));
	n = args_names(buf, &ln, sizeof(ln), "x", NULL);
	EXPECT_EQ(-EROFS, CALL(FUSE_LINK, N_ROOT, buf, n));
	EXPECT_EQ(-EROFS, CALL(FUSE_FALLOCATE, N_DATA, &fa, sizeof(fa)));
	EXPECT_EQ(-EROFS, CALL(FUSE_SETXATTR, N_DATA, buf, 32));
	EXPECT_EQ(-EROFS, CALL(FUSE_REMOVEXATTR, N_DATA, "a", 2));
	for (unsigned int i = 0; i < ARRAY_SIZE(wflags); i++) {
		struct fuse_open_in oi = { .flags = wflags[i] };

		EXPECT_EQ(-EROFS, CALL(FUSE_OPEN, N_HELLO, &oi, sizeof(oi)))
		TH_LOG("flags %#x", wflags[i]);
	}
	EXPECT_EQ(calls, t->tfs->calls); /* the backend saw none */
	EXPECT_EQ(0, t->tfs->writes);
	/* Reading is fine. */
	EXPECT_EQ(0, CALL(FUSE_OPEN, N_HELLO,
			  (&(struct fuse_open_in){ .flags = O_RDONLY }),
			  sizeof(struct fuse_open_in)));
	EXPECT_EQ(0, CALL(FUSE_READ, N_HELLO, &in, sizeof(in)));
	EXPECT_EQ(0, CALL(FUSE_LOOKUP, N_ROOT, "hello", 6));
	EXPECT_EQ(0, CALL(FUSE_FSYNC, N_HELLO,
			  (&(struct fuse_fsync_in){ .fh = 1 }),
			  sizeof(struct fuse_fsync_in)));
}

/* ---- forwarding --------------------------------------------------------- */

/* Starts a request whose answer the test gives; its chain is reqs[0]. */
static uint64_t fwd_start(struct __test_metadata *_metadata, struct tdev *t,
			  uint32_t opcode, uint64_t node, const void *args,
			  size_t alen, struct lay *l)
{
	static uint8_t buf[8192];
	size_t n = msg(t, buf, opcode, node, args, alen);

	EXPECT_EQ(0, start_raw(t, buf, n, l, &reqs[0]));
	return t->unique;
}

static void fwd_reply(struct fs_forward_req *req, int32_t error,
		      const void *body, size_t len)
{
	uint8_t buf[512];
	struct fuse_out_header oh = { .len = (uint32_t)(OUT_HDR + len),
				      .error = error,
				      .unique = req->unique };

	memcpy(buf, &oh, OUT_HDR);
	if (len)
		memcpy(buf + OUT_HDR, body, len);
	req->complete(req, buf, (ssize_t)(OUT_HDR + len));
}

static void fwd_init(struct __test_metadata *_metadata, struct tdev *t)
{
	struct fuse_init_in in = { .major = 7, .minor = 38 };
	struct fuse_init_out out = { .major = 7,
				     .minor = 38,
				     .max_write = 8 << 20,
				     .max_pages = 2048,
				     .flags = FUSE_MAX_PAGES };
	struct lay l = { .room = 200 };
	struct fs_forward_req *req;
	uint64_t u = fwd_start(_metadata, t, FUSE_INIT, 0, &in, sizeof(in), &l);

	req = tfwd_take(t->tfwd);
	ASSERT_NE(NULL, req);
	EXPECT_EQ(FUSE_INIT, req->opcode);
	EXPECT_EQ(u, req->unique);
	EXPECT_EQ(IN_HDR + sizeof(in), req->len);
	EXPECT_EQ(200, req->reply_room);
	EXPECT_EQ(0,
		  memcmp((const uint8_t *)req->msg + IN_HDR, &in, sizeof(in)));
	fwd_reply(req, 0, &out, sizeof(out));
	ASSERT_EQ(0, finish_raw(_metadata, t, &l, &reqs[0], u));
	memcpy(&out, rep.body, sizeof(out));
	/* Cut to what one forwarded message can carry. */
	EXPECT_EQ(FUSE_MAX_WRITE, out.max_write);
	EXPECT_EQ(FUSE_MAX_WRITE / 4096, out.max_pages);
	EXPECT_EQ(38, out.minor);
}

TEST_F(vfs, forward_replies)
{
	struct tdev *t = &self->t;
	struct fuse_getattr_in ga = { 0 };
	struct fuse_attr_out ao = { .attr_valid = 9, .attr = { .ino = 77 } };
	struct lay l = { .room = 200 };
	struct fs_forward_req *req;
	struct fuse_out_header oh;
	uint8_t buf[512];
	uint64_t u;

	ASSERT_EQ(0, tdev_open(t, T_FWD, 1));
	ASSERT_EQ(ST_LIVE, bring_up(t));
	/* Before INIT: EIO here, the relay never sees it. */
	EXPECT_EQ(-EIO, CALL(FUSE_GETATTR, N_ROOT, &ga, sizeof(ga)));
	EXPECT_EQ(0, t->tfwd->forwarded);
	fwd_init(_metadata, t);

	/* A good reply, from this thread, as it is. */
	u = fwd_start(_metadata, t, FUSE_GETATTR, N_ROOT, &ga, sizeof(ga), &l);
	req = tfwd_take(t->tfwd);
	ASSERT_NE(NULL, req);
	EXPECT_EQ(IN_HDR + sizeof(ga), req->len);
	fwd_reply(req, 0, &ao, sizeof(ao));
	ASSERT_EQ(0, finish_raw(_metadata, t, &l, &reqs[0], u));
	EXPECT_EQ(OUT_HDR + sizeof(ao), rep.used);
	EXPECT_EQ(0, memcmp(rep.body, &ao, sizeof(ao)));

	/* A wrong unique. */
	u = fwd_start(_metadata, t, FUSE_GETATTR, N_ROOT, &ga, sizeof(ga), &l);
	req = tfwd_take(t->tfwd);
	ASSERT_NE(NULL, req);
	req->unique++;
	fwd_reply(req, 0, &ao, sizeof(ao));
	EXPECT_EQ(-EIO, finish_raw(_metadata, t, &l, &reqs[0], u));

	/* Larger than the guest's room. */
	l.room = OUT_HDR + 50;
	u = fwd_start(_metadata, t, FUSE_GETATTR, N_ROOT, &ga, sizeof(ga), &l);
	req = tfwd_take(t->tfwd);
	ASSERT_NE(NULL, req);
	EXPECT_EQ(OUT_HDR + 50, req->reply_room);
	fwd_reply(req, 0, &ao, sizeof(ao));
	EXPECT_EQ(-EIO, finish_raw(_metadata, t, &l, &reqs[0], u));
	l.room = 200;

	/* Its header's len not what it is. */
	u = fwd_start(_metadata, t, FUSE_GETATTR, N_ROOT, &ga, sizeof(ga), &l);
	req = tfwd_take(t->tfwd);
	ASSERT_NE(NULL, req);
	oh = (struct fuse_out_header){ .len = 100, .unique = u };
	memcpy(buf, &oh, OUT_HDR);
	memcpy(buf + OUT_HDR, &ao, sizeof(ao));
	req->complete(req, buf, OUT_HDR + sizeof(ao));
	EXPECT_EQ(-EIO, finish_raw(_metadata, t, &l, &reqs[0], u));

	/* An error out of range, and one with a body. */
	u = fwd_start(_metadata, t, FUSE_GETATTR, N_ROOT, &ga, sizeof(ga), &l);
	req = tfwd_take(t->tfwd);
	ASSERT_NE(NULL, req);
	fwd_reply(req, -5000, NULL, 0);
	EXPECT_EQ(-EIO, finish_raw(_metadata, t, &l, &reqs[0], u));
	u = fwd_start(_metadata, t, FUSE_GETATTR, N_ROOT, &ga, sizeof(ga), &l);
	req = tfwd_take(t->tfwd);
	ASSERT_NE(NULL, req);
	fwd_reply(req, -ENOENT, &ao, 8);
	EXPECT_EQ(-EIO, finish_raw(_metadata, t, &l, &reqs[0], u));
	/* A plain error reply. */
	u = fwd_start(_metadata, t, FUSE_GETATTR, N_ROOT, &ga, sizeof(ga), &l);
	req = tfwd_take(t->tfwd);
	ASSERT_NE(NULL, req);
	fwd_reply(req, -ENOENT, NULL, 0);
	EXPECT_EQ(-ENOENT, finish_raw(_metadata, t, &l, &reqs[0], u));
	/* Shorter than a header. */
	u = fwd_start(_metadata, t, FUSE_GETATTR, N_ROOT, &ga, sizeof(ga), &l);
	req = tfwd_take(t->tfwd);
	ASSERT_NE(NULL, req);
	req->complete(req, buf, 8);
	EXPECT_EQ(-EIO, finish_raw(_metadata, t, &l, &reqs[0], u));

	/* The relay failed: its errno; one that is none: EIO. */
	u = fwd_start(_metadata, t, FUSE_GETATTR, N_ROOT, &ga, sizeof(ga), &l);
	req = tfwd_take(t->tfwd);
	ASSERT_NE(NULL, req);
	req->complete(req, NULL, -EIO);
	EXPECT_EQ(-EIO, finish_raw(_metadata, t, &l, &reqs[0], u));
	u = fwd_start(_metadata, t, FUSE_GETATTR, N_ROOT, &ga, sizeof(ga), &l);
	req = tfwd_take(t->tfwd);
	ASSERT_NE(NULL, req);
	req->complete(req, NULL, -ETIMEDOUT);
	EXPECT_EQ(-ETIMEDOUT, finish_raw(_metadata, t, &l, &reqs[0], u));
	u = fwd_start(_metadata, t, FUSE_GETATTR, N_ROOT, &ga, sizeof(ga), &l);
	req = tfwd_take(t->tfwd);
	ASSERT_NE(NULL, req);
	req->complete(req, NULL, 17);
	EXPECT_EQ(-EIO, finish_raw(_metadata, t, &l, &reqs[0], u));

	/* Completed inside forward(), on the device's thread. */
	t->tfwd->sync_eio = true;
	EXPECT_EQ(-EIO, CALL(FUSE_GETATTR, N_ROOT, &ga, sizeof(ga)));
	t->tfwd->sync_eio = false;
	/* forward() refusing it. */
	t->tfwd->forward_ret = -ENOMEM;
	EXPECT_EQ(-ENOMEM, CALL(FUSE_GETATTR, N_ROOT, &ga, sizeof(ga)));
	t->tfwd->forward_ret = 0;

	/* FORGET: forwarded, completed with nothing, no reply. */
	l = (struct lay){ .queue = 0 };
	u = fwd_start(_metadata, t, FUSE_FORGET, N_HELLO,
		      (&(struct fuse_forget_in){ .nlookup = 1 }), 8, &l);
	req = tfwd_take(t->tfwd);
	ASSERT_NE(NULL, req);
	EXPECT_EQ(FUSE_FORGET, req->opcode);
	req->complete(req, NULL, 0);
	EXPECT_EQ(1, finish_raw(_metadata, t, &l, &reqs[0], u));
	EXPECT_EQ(0, t->tfwd->nr_pending);
}

TEST_F(vfs, forward_limits_and_reset)
{
	static uint8_t buf[FS_FORWARD_MAX + 8192];
	struct tdev *t = &self->t;
	struct fuse_getattr_in ga = { 0 };
	struct fuse_attr_out ao = { .attr = { .ino = 1 } };
	struct lay l = { .room = 200 };
	struct fs_forward_req *req;
	unsigned int fwd;
	size_t n;

	ASSERT_EQ(0, tdev_open(t, T_FWD, 1));
	ASSERT_EQ(ST_LIVE, bring_up(t));
	fwd_init(_metadata, t);
	fwd = t->tfwd->forwarded;
	/* A write of 1 MiB goes through whole. */
	n = write_msg(t, buf, N_DATA, 0, FUSE_MAX_WRITE, FUSE_MAX_WRITE, 1);
	ASSERT_EQ(0, start_raw(t, buf, n,
			       &(struct lay){ .out_segs = 100,
					      .indirect = true,
					      .room = 64 },
			       &reqs[0]));
	req = tfwd_take(t->tfwd);
	ASSERT_NE(NULL, req);
	EXPECT_EQ(n, req->len);
	EXPECT_EQ(0, memcmp(req->msg, buf, IN_HDR));
	EXPECT_EQ(0, memcmp((const uint8_t *)req->msg + n - 100, buf + n - 100,
			    100));
	fwd_reply(req, 0, (&(struct fuse_write_out){ .size = FUSE_MAX_WRITE }),
		  sizeof(struct fuse_write_out));
	EXPECT_EQ(0, finish_raw(_metadata, t, &(struct lay){ .room = 64 },
				&reqs[0], t->unique));
	/* More than a forwarded message may hold: E2BIG, not forwarded. */
	fwd = t->tfwd->forwarded;
	n = write_msg(t, buf, N_DATA, 0, FUSE_MAX_WRITE + 8000,
		      FUSE_MAX_WRITE + 8000, 1);
	EXPECT_EQ(-E2BIG, send_raw(_metadata, t, buf, n,
				   &(struct lay){ .out_segs = 100,
						  .indirect = true,
						  .room = 64 }));
	EXPECT_EQ(fwd, t->tfwd->forwarded);

	/* A reset while the relay holds a request: its answer goes nowhere. */
	fwd_start(_metadata, t, FUSE_GETATTR, N_ROOT, &ga, sizeof(ga), &l);
	req = tfwd_take(t->tfwd);
	ASSERT_NE(NULL, req);
	ASSERT_EQ(ST_LIVE, bring_up(t)); /* does not wait for the relay */
	memset(t->d.ram + REP_GPA, CANARY, 256);
	fwd_reply(req, 0, &ao, sizeof(ao));
	usleep(20 * 1000);
	EXPECT_EQ(0, vdrv_load16(&t->d, USED_GPA(1) + 2));
	for (unsigned int i = 0; i < 256; i++)
		ASSERT_EQ(CANARY, t->d.ram[REP_GPA + i]);
	EXPECT_TRUE(vdrv_guards_intact(&t->d));
	/* The new session works; a request left pending fails at destroy. */
	fwd_init(_metadata, t);
	fwd_start(_metadata, t, FUSE_GETATTR, N_ROOT, &ga, sizeof(ga), &l);
	req = tfwd_take(t->tfwd);
	ASSERT_NE(NULL, req);
	t->tfwd->pending[t->tfwd->nr_pending++] = req;
}

TEST_F(vfs, forward_read_only)
{
	struct tdev *t = &self->t;
	struct fuse_open_in oi = { .flags = O_RDWR };
	uint8_t buf[256];
	size_t n;

	ASSERT_EQ(0, tdev_open(t, T_FWD, 1));
	t->tfwd->base.read_only = true;
	ASSERT_EQ(ST_LIVE, bring_up(t));
	fwd_init(_metadata, t);
	n = write_msg(t, buf, N_DATA, 0, 10, 10, 1);
	EXPECT_EQ(-EROFS,
		  send_raw(_metadata, t, buf, n, &(struct lay){ .room = 64 }));
	EXPECT_EQ(-EROFS, CALL(FUSE_OPEN, N_HELLO, &oi, sizeof(oi)));
	EXPECT_EQ(-EROFS, CALL(FUSE_UNLINK, N_ROOT, "x", 2));
	EXPECT_EQ(-EROFS, CALL(5000, N_ROOT, NULL, 0)); /* unknown: may write */
	EXPECT_EQ(1, t->tfwd->forwarded);		/* only the INIT */
}

/* ---- hostile requests ----------------------------------------------------- */

TEST_F(vfs, hostile_requests)
{
	static uint8_t buf[16384];
	struct tdev *t = &self->t;
	struct fuse_getattr_in ga = { 0 };
	struct fuse_read_in in;
	char name[FS_PATH_MAX + 8];
	unsigned int calls;
	size_t n;

	OPEN(T_TFS);
	calls = t->tfs->calls;

	/* Header cut short: 20 bytes, and 39. */
	n = msg(t, buf, FUSE_GETATTR, N_ROOT, &ga, sizeof(ga));
	EXPECT_EQ(-EINVAL,
		  send_raw(_metadata, t, buf, 20, &(struct lay){ .room = 64 }));
	EXPECT_EQ(-EINVAL,
		  send_raw(_metadata, t, buf, 39,
			   &(struct lay){ .room = 64, .out_segs = 5 }));
	/* len lying: more than given, less than a header, 4 GiB. */
	EXPECT_EQ(-EINVAL, CALL_L(FUSE_GETATTR, N_ROOT, &ga, sizeof(ga),
				  .room = 200, .len_delta = 1));
	EXPECT_EQ(-EINVAL, CALL_L(FUSE_GETATTR, N_ROOT, &ga, sizeof(ga),
				  .room = 200, .len_delta = -20));
	EXPECT_EQ(-EINVAL, CALL_L(FUSE_GETATTR, N_ROOT, &ga, sizeof(ga),
				  .room = 200, .len_delta = INT32_MIN));
	/* Arguments shorter than the op's struct (len honest). */
	EXPECT_EQ(-EINVAL, CALL(FUSE_GETATTR, N_ROOT, &ga, 8));
	EXPECT_EQ(-EINVAL, CALL(FUSE_READ, N_HELLO, &ga, 16));
	EXPECT_EQ(-EINVAL, CALL(FUSE_OPEN, N_HELLO, &ga, 4));
	EXPECT_EQ(-EINVAL, CALL(FUSE_SETATTR, N_HELLO, &ga, 16));
	/* Names: unterminated, cut off by len, '/', ".", "..", empty, long. */
	EXPECT_EQ(-EINVAL, CALL(FUSE_LOOKUP, N_ROOT, "hello", 5));
	EXPECT_EQ(-EINVAL, CALL_L(FUSE_LOOKUP, N_ROOT, "hello", 6, .room = 200,
				  .len_delta = -1));
	EXPECT_EQ(-EINVAL, CALL(FUSE_LOOKUP, N_ROOT, "a/b", 4));
	EXPECT_EQ(-EINVAL, CALL(FUSE_LOOKUP, N_ROOT, "/", 2));
	EXPECT_EQ(-EINVAL, CALL(FUSE_LOOKUP, N_ROOT, ".", 2));
	EXPECT_EQ(-EINVAL, CALL(FUSE_LOOKUP, N_ROOT, "..", 3));
	EXPECT_EQ(-EINVAL, CALL(FUSE_LOOKUP, N_ROOT, "", 1));
	EXPECT_EQ(-EINVAL, CALL(FUSE_LOOKUP, N_ROOT, NULL, 0));
	memset(name, 'a', FS_NAME_MAX + 1);
	name[FS_NAME_MAX + 1] = 0;
	EXPECT_EQ(-ENAMETOOLONG,
		  CALL(FUSE_LOOKUP, N_ROOT, name, FS_NAME_MAX + 2));
	EXPECT_EQ(-EINVAL, CALL(FUSE_UNLINK, N_ROOT, "..", 3));
	n = args_names(buf, NULL, 0, "ok", "..");
	EXPECT_EQ(-EINVAL, CALL(FUSE_RENAME, N_ROOT, buf, n)); /* no arg */
	n = args_names(buf, &ga, 8, "ok", "a/b");
	EXPECT_EQ(-EINVAL, CALL(FUSE_RENAME, N_ROOT, buf, n));
	n = args_names(buf, &ga, 8, "ok", NULL);
	EXPECT_EQ(-EINVAL, CALL(FUSE_RENAME, N_ROOT, buf, n)); /* one name */
	/* Symlink targets: too long, empty, unterminated. */
	memset(name, 'x', FS_PATH_MAX + 1);
	name[FS_PATH_MAX + 1] = 0;
	n = args_names(buf, NULL, 0, "s", name);
	EXPECT_EQ(-ENAMETOOLONG, CALL(FUSE_SYMLINK, N_ROOT, buf, n));
	n = args_names(buf, NULL, 0, "s", "");
	EXPECT_EQ(-ENOENT, CALL(FUSE_SYMLINK, N_ROOT, buf, n));
	n = args_names(buf, NULL, 0, "s", "target");
	EXPECT_EQ(-EINVAL, CALL(FUSE_SYMLINK, N_ROOT, buf, n - 1));
	/* Arguments longer than any op's. */
	memset(buf, 'a', sizeof(buf));
	buf[100] = 0;
	EXPECT_EQ(-EINVAL, CALL(FUSE_LOOKUP, N_ROOT, buf, 9000));
	/* READ: over max_write, over the room, at a negative offset. */
	in = rd_in(1, 0, FUSE_MAX_WRITE + 1);
	EXPECT_EQ(-EINVAL, CALL_L(FUSE_READ, N_DATA, &in, sizeof(in),
				  .room = OUT_HDR + FUSE_MAX_WRITE + 1));
	in = rd_in(1, 0, 4096);
	EXPECT_EQ(-EINVAL, CALL_L(FUSE_READ, N_DATA, &in, sizeof(in),
				  .room = OUT_HDR + 4095));
	in = rd_in(1, 1ULL << 63, 10);
	EXPECT_EQ(-EINVAL, CALL(FUSE_READ, N_DATA, &in, sizeof(in)));
	in = rd_in(1, UINT64_MAX, 10);
	EXPECT_EQ(-EINVAL, CALL(FUSE_READ, N_DATA, &in, sizeof(in)));
	/* WRITE: size and data disagree, either way; too large. */
	n = write_msg(t, buf, N_DATA, 0, 10, 5, 1);
	EXPECT_EQ(-EINVAL,
		  send_raw(_metadata, t, buf, n, &(struct lay){ .room = 64 }));
	n = write_msg(t, buf, N_DATA, 0, 5, 10, 1);
	EXPECT_EQ(-EINVAL,
		  send_raw(_metadata, t, buf, n, &(struct lay){ .room = 64 }));
	n = write_msg(t, buf, N_DATA, 0, UINT32_MAX, 10, 1);
	EXPECT_EQ(-EINVAL,
		  send_raw(_metadata, t, buf, n, &(struct lay){ .room = 64 }));
	n = write_msg(t, buf, N_DATA, 1ULL << 63, 10, 10, 1);
	EXPECT_EQ(-EINVAL,
		  send_raw(_metadata, t, buf, n, &(struct lay){ .room = 64 }));
	/* Extensions the message does not hold. */
	n = msg(t, buf, FUSE_GETATTR, N_ROOT, &ga, sizeof(ga));
	((struct fuse_in_header *)buf)->total_extlen = 3;
	EXPECT_EQ(-EINVAL,
		  send_raw(_metadata, t, buf, n, &(struct lay){ .room = 200 }));
	/* No room for a reply header: nothing done, nothing written. */
	EXPECT_EQ(1, CALL_L(FUSE_GETATTR, N_ROOT, &ga, sizeof(ga), .room = 8));
	EXPECT_EQ(1, CALL_L(FUSE_UNLINK, N_ROOT, "hello", 6, .room = 15));
	EXPECT_EQ(1, CALL_L(FUSE_UNLINK, N_ROOT, "hello", 6));
	/* Room for a header, not the answer: EINVAL before the backend. */
	EXPECT_EQ(-EINVAL,
		  CALL_L(FUSE_GETATTR, N_ROOT, &ga, sizeof(ga), .room = 40));
	EXPECT_EQ(-EINVAL, CALL_L(FUSE_LOOKUP, N_ROOT, "hello", 6, .room = 40));
	EXPECT_EQ(calls, t->tfs->calls); /* none reached the backend */

	/* A 255-byte name is fine (the backend does not have it). */
	memset(name, 'a', FS_NAME_MAX);
	name[FS_NAME_MAX] = 0;
	EXPECT_EQ(-ENOENT, CALL(FUSE_LOOKUP, N_ROOT, name, FS_NAME_MAX + 1));
	EXPECT_EQ(FS_NAME_MAX, strlen(t->tfs->name));
	/* The device is still live and well. */
	EXPECT_EQ(ST_LIVE, vdrv_status(&t->d));
	EXPECT_EQ(0, CALL(FUSE_GETATTR, N_ROOT, &ga, sizeof(ga)));
	EXPECT_EQ(0, t->bad_used);
}

/* ---- hostile rings ------------------------------------------------------ */

/* After a reset and a new INIT, the device is as good as new. */
static void expect_recovers(struct __test_metadata *_metadata, struct tdev *t)
{
	struct fuse_getattr_in ga = { 0 };

	ASSERT_EQ(ST_LIVE, bring_up(t));
	ASSERT_EQ(0, do_init(_metadata, t, 7, 38, 0, NULL));
	ASSERT_EQ(0, CALL(FUSE_GETATTR, N_DATA, &ga, sizeof(ga)));
	EXPECT_EQ(DATA_SIZE, ((struct fuse_attr_out *)rep.body)->attr.size);
	EXPECT_EQ(0, t->bad_used);
	EXPECT_TRUE(vdrv_guards_intact(&t->d));
}

TEST_F(vfs, hostile_rings)
{
	static const struct {
		uint64_t gpa;
		uint32_t len;
	} bad[] = {
		{ RAM_SIZE, 64 },	 { RAM_SIZE - 8, 64 },
		{ 1ULL << 40, 64 },	 { UINT64_MAX - 10, 64 },
		{ REP_GPA, 0xffffffff },
	};
	struct tdev *t = &self->t;
	struct fuse_getattr_in ga = { 0 };
	uint8_t hdr[64];
	size_t n;

	OPEN(T_TFS);
	n = msg(t, hdr, FUSE_GETATTR, N_ROOT, &ga, sizeof(ga));
	for (unsigned int i = 0; i < ARRAY_SIZE(bad); i++) {
		for (unsigned int w = 0; w < 2; w++) {
			ASSERT_EQ(ST_LIVE, bring_up(t));
			memcpy(t->d.ram + REQ_GPA, hdr, n);
			/* As the request, or as the reply buffer. */
			if (w) {
				raw_desc(t, 1, 0, REQ_GPA, (uint32_t)n,
					 VRING_DESC_F_NEXT, 1);
				raw_desc(t, 1, 1, bad[i].gpa, bad[i].len,
					 VRING_DESC_F_WRITE, 0);
			} else {
				raw_desc(t, 1, 0, bad[i].gpa, bad[i].len,
					 VRING_DESC_F_NEXT, 1);
				raw_desc(t, 1, 1, REP_GPA, 200,
					 VRING_DESC_F_WRITE, 0);
			}
			publish(t, 1, 0);
			notify(t, 1);
			vdrv_expect_broken(_metadata, &t->d, USED_GPA(1),
					   TIMEOUT_MS, "outside RAM");
		}
	}
	/* Loops: direct, self, indirect; a next out of the ring. */
	ASSERT_EQ(ST_LIVE, bring_up(t));
	raw_desc(t, 1, 0, REQ_GPA, 16, VRING_DESC_F_NEXT, 1);
	raw_desc(t, 1, 1, REQ_GPA + 16, 16, VRING_DESC_F_NEXT, 0);
	publish(t, 1, 0);
	notify(t, 1);
	vdrv_expect_broken(_metadata, &t->d, USED_GPA(1), TIMEOUT_MS,
			   "direct loop");
	ASSERT_EQ(ST_LIVE, bring_up(t));
	raw_desc(t, 1, 3, REQ_GPA, 64, VRING_DESC_F_NEXT, 3);
	publish(t, 1, 3);
	notify(t, 1);
	vdrv_expect_broken(_metadata, &t->d, USED_GPA(1), TIMEOUT_MS,
			   "self loop");
	ASSERT_EQ(ST_LIVE, bring_up(t));
	for (uint16_t i = 0; i < 4; i++)
		put_desc(t, TABLE_GPA + i * 16, REQ_GPA, 16, VRING_DESC_F_NEXT,
			 (i + 1) % 4);
	raw_desc(t, 1, 7, TABLE_GPA, 64, VRING_DESC_F_INDIRECT, 0);
	publish(t, 1, 7);
	notify(t, 1);
	vdrv_expect_broken(_metadata, &t->d, USED_GPA(1), TIMEOUT_MS,
			   "indirect loop");
	ASSERT_EQ(ST_LIVE, bring_up(t));
	raw_desc(t, 1, 0, REQ_GPA, 16, VRING_DESC_F_NEXT, QSIZE);
	publish(t, 1, 0);
	notify(t, 1);
	vdrv_expect_broken(_metadata, &t->d, USED_GPA(1), TIMEOUT_MS,
			   "next out of range");
	/* A head out of range; avail idx running away. */
	ASSERT_EQ(ST_LIVE, bring_up(t));
	publish(t, 1, QSIZE + 3);
	notify(t, 1);
	vdrv_expect_broken(_metadata, &t->d, USED_GPA(1), TIMEOUT_MS,
			   "head out of range");
	ASSERT_EQ(ST_LIVE, bring_up(t));
	vdrv_store16(&t->d, AVAIL_GPA(1) + 2, QSIZE + 1);
	notify(t, 1);
	vdrv_expect_broken(_metadata, &t->d, USED_GPA(1), TIMEOUT_MS,
			   "avail idx");
	/* The hiprio queue breaks the same way. */
	ASSERT_EQ(ST_LIVE, bring_up(t));
	raw_desc(t, 0, 0, RAM_SIZE - 4, 64, 0, 0);
	publish(t, 0, 0);
	notify(t, 0);
	ASSERT_TRUE(vdrv_wait_status(&t->d, ST_NEEDS_RST, TIMEOUT_MS));
	expect_recovers(_metadata, t);
}

/* ---- load ------------------------------------------------------------------ */

/* n GETATTRs at once on queue q, each in its own areas, then all back. */
static void burst(struct __test_metadata *_metadata, struct tdev *t,
		  unsigned int q, unsigned int first, unsigned int n)
{
	struct fuse_getattr_in ga = { 0 };

	for (unsigned int i = first; i < first + n; i++) {
		struct treq *r = &reqs[i];
		uint8_t buf[64];
		size_t len = msg(t, buf, FUSE_GETATTR, i % 2 ? N_DATA : N_HELLO,
				 &ga, sizeof(ga));

		memcpy(t->d.ram + HREQ_GPA(i), buf, len);
		memset(t->d.ram + HREP_GPA(i), CANARY, 0x400);
		memset(r, 0, sizeof(*r));
		r->seg[0] = (struct tseg){ HREQ_GPA(i), (uint32_t)len, false };
		r->seg[1] = (struct tseg){ HREP_GPA(i), 256, true };
		r->n = 2;
		/* One descriptor each: QSIZE requests fit the ring. */
		r->indirect = true;
		r->table = TABLE_GPA + i * 32;
		ASSERT_TRUE(submit(t, q, r)) TH_LOG("request %u", i);
	}
	kick(t, q);
}

static void burst_check(struct __test_metadata *_metadata, struct tdev *t,
			unsigned int first, unsigned int n)
{
	for (unsigned int i = first; i < first + n; i++) {
		struct fuse_out_header oh;
		struct fuse_attr_out a;

		memcpy(&oh, t->d.ram + HREP_GPA(i), sizeof(oh));
		memcpy(&a, t->d.ram + HREP_GPA(i) + OUT_HDR, sizeof(a));
		EXPECT_EQ(OUT_HDR + sizeof(a), reqs[i].used_len);
		EXPECT_EQ(0, oh.error);
		EXPECT_EQ(i % 2 ? DATA_SIZE : strlen(HELLO), a.attr.size);
		EXPECT_EQ(CANARY, t->d.ram[HREP_GPA(i) + OUT_HDR + sizeof(a)]);
	}
}

TEST_F(vfs, many_in_flight)
{
	struct tdev *t = &self->t;

	OPEN(T_TFS);
	/* Twice the slots of a queue, on two queues at once. */
	burst(_metadata, t, 1, 0, 2 * SLOTS - 8);
	burst(_metadata, t, 2, 2 * SLOTS - 8, 60);
	ASSERT_TRUE(wait_done(t, 1, reqs, 2 * SLOTS - 8));
	ASSERT_TRUE(wait_done(t, 2, reqs + 2 * SLOTS - 8, 60));
	burst_check(_metadata, t, 0, 2 * SLOTS - 8 + 60);
	EXPECT_EQ(0, t->bad_used);
	EXPECT_TRUE(vdrv_guards_intact(&t->d));
}

/* ---- fuzz ------------------------------------------------------------------ */

static const uint32_t fuzz_ops[] = {
	FUSE_LOOKUP,
	FUSE_FORGET,
	FUSE_GETATTR,
	FUSE_SETATTR,
	FUSE_READLINK,
	FUSE_SYMLINK,
	FUSE_MKNOD,
	FUSE_MKDIR,
	FUSE_UNLINK,
	FUSE_RMDIR,
	FUSE_RENAME,
	FUSE_LINK,
	FUSE_OPEN,
	FUSE_READ,
	FUSE_WRITE,
	FUSE_STATFS,
	FUSE_RELEASE,
	FUSE_FSYNC,
	FUSE_SETXATTR,
	FUSE_FLUSH,
	FUSE_INIT,
	FUSE_OPENDIR,
	FUSE_READDIR,
	FUSE_RELEASEDIR,
	FUSE_FSYNCDIR,
	FUSE_ACCESS,
	FUSE_CREATE,
	FUSE_INTERRUPT,
	FUSE_DESTROY,
	FUSE_BATCH_FORGET,
	FUSE_FALLOCATE,
	FUSE_RENAME2,
	FUSE_LSEEK,
	FUSE_READDIRPLUS,
	0,
	99999,
};

TEST_F_TIMEOUT(vfs, fuzz, 120)
{
	static uint8_t buf[3 * FUSE_MAX_WRITE / 2],
		args[3 * FUSE_MAX_WRITE / 2];
	static const uint64_t nodes[] = { 0,	  N_ROOT,    N_HELLO,
					  N_DATA, N_MANY,    N_LINK,
					  N_MEM,  N_NEW + 3, UINT64_MAX };
	struct tdev *t = &self->t;
	uint64_t seed = 0x5eed1234abcdULL;
	unsigned int iters =
		getenv("KILN_FUZZ_ITERS") ?
			(unsigned int)atoi(getenv("KILN_FUZZ_ITERS")) :
			3000;

	OPEN(T_TFS);
	for (unsigned int it = 0; it < iters; it++) {
		uint64_t r = prng__next(&seed);
		uint32_t op = fuzz_ops[r % ARRAY_SIZE(fuzz_ops)];
		uint64_t node = nodes[(r >> 8) % ARRAY_SIZE(nodes)];
		size_t alen = (r >> 16) % 4 ?
				      (r >> 20) % 300 :
				      (r >> 20) % (FUSE_MAX_WRITE + 100);
		struct lay l = {
			.out_segs = 1 + (r >> 40) % 6,
			.in_segs = 1 + (r >> 44) % 6,
			.indirect = (r >> 48) & 1,
			.queue = (r >> 50) % 3,
			.len_delta = (r >> 52) % 8 ?
					     0 :
					     (int32_t)((r >> 55) % 64) - 32,
		};
		uint64_t r2 = prng__next(&seed);
		size_t n;
		int ret;

		l.room = r2 % 4 ? (uint32_t)(r2 >> 8) % 9000 :
				  (uint32_t)(r2 >> 8) % (FUSE_MAX_WRITE + 100);
		for (size_t i = 0; i < alen; i += 8) {
			uint64_t v = prng__next(&seed);

			memcpy(args + i, &v, 8);
		}
		/* Plausible sizes and offsets half the time. */
		if ((r2 >> 40) & 1 && alen >= 24) {
			uint32_t size = (uint32_t)(r2 >> 44) % (l.room + 64);
			uint64_t off = (r2 >> 20) % (4 << 20);

			memcpy(args + 8, &off, 8);
			memcpy(args + 16, &size, 4);
			if (op == FUSE_WRITE && (r2 >> 41) & 1 &&
			    alen >= sizeof(struct fuse_write_in)) {
				size = (uint32_t)(alen -
						  sizeof(struct fuse_write_in));
				memcpy(args + 16, &size, 4);
			}
		}
		/* NUL-terminated names some of the time. */
		if ((r2 >> 42) & 1 && alen > 2)
			args[alen - 1] = 0;
		n = msg(t, buf, op, node, args, alen);
		ret = send_raw(_metadata, t, buf, n, &l);
		ASSERT_NE(-ETIMEDOUT, ret) TH_LOG("iteration %u op %u", it, op);
		ASSERT_NE(-ENOSPC, ret) TH_LOG("iteration %u", it);
		ASSERT_EQ(ST_LIVE, vdrv_status(&t->d))
		TH_LOG("iteration %u", it);
		if (_metadata->result->failed)
			break;
		/* Keep the session up: INIT again when it was lost. */
		if (op == FUSE_DESTROY || op == FUSE_INIT)
			ASSERT_EQ(0, do_init(_metadata, t, 7, 38, LINUX_FLAGS,
					     NULL));
	}
	EXPECT_EQ(0, t->bad_used);
	EXPECT_TRUE(vdrv_guards_intact(&t->d));
}

/* ---- sessions, snapshot and restore ------------------------------------ */

/*
 * An unmount ends the FUSE session (DESTROY); the guest's next mount
 * sends INIT on the same server, which first drops what the old session
 * held (the backend's end_session: Linux sent no FORGET for it). A
 * first INIT, or INIT again while a session is open, has nothing to drop
 * only the first time.
 */
TEST_F(vfs, destroy_then_init_starts_a_new_session)
{
	struct tdev *t = &self->t;

	OPEN(T_TFS);
	EXPECT_EQ(0U, t->tfs->sessions_ended);
	ASSERT_EQ(0, CALL(FUSE_LOOKUP, N_ROOT, "hello", 6));
	ASSERT_EQ(0, CALL(FUSE_DESTROY, 0, NULL, 0));
	/* No session: everything but INIT fails, and nothing is dropped. */
	EXPECT_EQ(-EIO, CALL(FUSE_LOOKUP, N_ROOT, "hello", 6));
	EXPECT_EQ(0U, t->tfs->sessions_ended);
	ASSERT_EQ(0, do_init(_metadata, t, 7, 38, LINUX_FLAGS, NULL));
	EXPECT_EQ(1U, t->tfs->sessions_ended);
	EXPECT_EQ(0, CALL(FUSE_LOOKUP, N_ROOT, "hello", 6));
	/* A device reset ends it too: the driver's next INIT drops it. */
	ASSERT_EQ(ST_LIVE, bring_up(t));
	ASSERT_EQ(0, do_init(_metadata, t, 7, 38, LINUX_FLAGS, NULL));
	EXPECT_EQ(2U, t->tfs->sessions_ended);
}

/*
 * A snapshot of the device holds its shape, never a mount: refused
 * (EBUSY, saying why) while the guest has it mounted; once DESTROY ended
 * the session, saved, and restored into a new device on a new backend
 * over the same guest memory, which serves the guest's new mount from
 * where the rings were. Another tag is refused by name.
 */
TEST_F(vfs, save_refuses_a_live_session_and_restores_onto_a_new_backend)
{
	struct tdev *t = &self->t;
	char err[VIRTIO_SAVE_WHY_LEN] = "";
	json_t *st = NULL, *dev;
	struct fuse_entry_out e;

	OPEN(T_TFS);
	ASSERT_EQ(0, CALL(FUSE_LOOKUP, N_ROOT, "hello", 6));
	ASSERT_EQ(0, virtio_device__pause(t->d.vdev, TIMEOUT_MS));
	EXPECT_EQ(-EBUSY,
		  virtio_device__save(t->d.vdev, &st, err, sizeof(err)));
	EXPECT_EQ(NULL, st);
	EXPECT_NE(NULL, strstr(err, "FUSE session is live"));
	EXPECT_NE(NULL, strstr(err, TAG));
	ASSERT_EQ(0, virtio_device__resume(t->d.vdev));

	ASSERT_EQ(0, CALL(FUSE_DESTROY, 0, NULL, 0));
	ASSERT_EQ(0, virtio_device__pause(t->d.vdev, TIMEOUT_MS));
	ASSERT_EQ(0, virtio_device__save(t->d.vdev, &st, err, sizeof(err)))
	TH_LOG("%s", err);
	dev = json_object_get(st, "device");
	EXPECT_STREQ(TAG, json_string_value(json_object_get(dev, "tag")));
	EXPECT_EQ(2, json_integer_value(json_object_get(dev, "requestQueues")));
	virtio_fs__destroy(t->fs);
	t->fs = NULL;

	/* This boot's source: a new backend, a fresh server. */
	ASSERT_EQ(0, tdev_create(t, T_TFS, 2));
	ASSERT_EQ(0, virtio_device__restore(t->d.vdev, st, err, sizeof(err)))
	TH_LOG("%s", err);
	ASSERT_EQ(0, virtio_fs__start(t->fs, NULL));
	EXPECT_EQ(-EIO, CALL(FUSE_LOOKUP, N_ROOT, "hello", 6));
	ASSERT_EQ(0, do_init(_metadata, t, 7, 38, LINUX_FLAGS, NULL));
	EXPECT_EQ(0U, t->tfs->sessions_ended);
	ASSERT_EQ(0, CALL(FUSE_LOOKUP, N_ROOT, "hello", 6));
	memcpy(&e, rep.body, sizeof(e));
	EXPECT_EQ(N_HELLO, e.nodeid);

	/* Another tag: this device is not the snapshot's. */
	virtio_fs__destroy(t->fs);
	t->fs = NULL;
	ASSERT_EQ(0, tdev_create(t, T_TFS, 2));
	json_object_set_new(dev, "tag", json_string("other"));
	EXPECT_EQ(-EINVAL,
		  virtio_device__restore(t->d.vdev, st, err, sizeof(err)));
	EXPECT_NE(NULL, strstr(err, "tag other"));
	json_decref(st);
}

TEST_HARNESS_MAIN
