// SPDX-License-Identifier: GPL-2.0
/*
 * fuzz virtio_blk - virtio-blk's request decoding and servicing
 * (devices/virtio/blk.c) over a real disk (devices/block/disk.c: a base
 * image and an ephemeral or no writable layer, both memfds), its own
 * event loop thread and io_uring, driven through the MMIO registers
 * (selftests/virtio_driver.h) the way the virtqueue target drives the
 * walker: the descriptor chains are the fuzzer's.
 *
 * Input: a byte of set-up (the queue's size, a power of 2 up to 128;
 * which features the driver takes: EVENT_IDX, INDIRECT_DESC; a
 * read-only disk), then steps: a request (its segments' addresses,
 * lengths and directions, direct or in an indirect table, the header's
 * type and sector, a discard/write-zeroes segment), published; a kick,
 * then waiting until every request published came back or the device
 * asked for a reset; bytes written into the data area between kicks; a
 * reset and a fresh bring-up. The target always kicks (a spurious
 * notification is allowed), so every request must come back.
 *
 * Checked for every input: every published request comes back (within
 * REQ_TIMEOUT_MS) unless the device said NEEDS_RESET; a used entry names
 * a head in flight and a length at most the chain's writable bytes; a
 * read that succeeded on a disk nothing was written to in this input
 * gave the base image's bytes and used length data + 1; no byte outside
 * guest RAM was touched.
 */
#include <errno.h>
#include <linux/virtio_blk.h>
#include <linux/virtio_config.h>
#include <linux/virtio_mmio.h>
#include <linux/virtio_ring.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "devices/block/disk.h"
#include "devices/virtio/blk.h"
#include "selftests/fuzz/fuzz.h"
#include "selftests/virtio_driver.h"

#define RAM_SIZE	(256U << 10)
#define DISK_BLOCKS	64U
#define DISK_SIZE	((uint64_t)DISK_BLOCKS * DISK_BLOCK_SIZE)
#define SECTOR_SHIFT	9
#define DISK_SECTORS	(DISK_SIZE >> SECTOR_SHIFT)
#define QSIZE_SHIFT_MAX 7 /* queue sizes 1 to 128, the device's most */
#define QSIZE_MAX	(1U << QSIZE_SHIFT_MAX)
#define DESC_GPA	0x0000ULL
#define AVAIL_GPA	0x0800ULL /* 4 + 2 * 128 + 2 bytes */
#define USED_GPA	0x1000ULL /* 4 + 8 * 128 + 2 bytes */
#define TABLE_GPA	0x2000ULL /* indirect tables, one per head */
#define TABLE_SLOT	(MAX_SEGS * sizeof(struct vring_desc))
#define DATA_GPA	0x4000ULL /* headers, data, status: the rest */
#define DATA_SIZE	(RAM_SIZE - DATA_GPA)
#define MAX_SEGS	8U /* descriptors in one request */
#define MAX_STEPS	64
#define SCRIBBLE_MAX	64U
#define REQ_TIMEOUT_MS	10000 /* far beyond any request on a memfd */
#define HDR_LEN		sizeof(struct virtio_blk_outhdr)
#define ZERO_SEG_LEN	sizeof(struct virtio_blk_discard_write_zeroes)
#define SERIAL		"fuzz-serial"
#define DIGEST \
	"sha256:0000000000000000000000000000000000000000000000000000000000000000"

#define ST_LIVE                                                 \
	(VIRTIO_CONFIG_S_ACKNOWLEDGE | VIRTIO_CONFIG_S_DRIVER | \
	 VIRTIO_CONFIG_S_FEATURES_OK | VIRTIO_CONFIG_S_DRIVER_OK)
#define FEAT(bit) (1ULL << (bit))

enum step { STEP_REQUEST, STEP_KICK, STEP_SCRIBBLE, STEP_RESET, NR_STEPS };

/* The request types a guest may name, and one that no device knows. */
static const uint32_t types[] = {
	VIRTIO_BLK_T_IN,	   VIRTIO_BLK_T_OUT,
	VIRTIO_BLK_T_FLUSH,	   VIRTIO_BLK_T_GET_ID,
	VIRTIO_BLK_T_DISCARD,	   VIRTIO_BLK_T_WRITE_ZEROES,
	VIRTIO_BLK_T_SECURE_ERASE, 0xdead,
};

struct seg {
	uint64_t gpa;
	uint32_t len;
	bool write;
};

/* A request in flight, by head. */
struct inflight {
	bool busy;
	uint16_t ndesc;
	uint32_t type;
	uint64_t sector;
	uint64_t in_len; /* writable bytes of the chain */
	bool checkable;	 /* a read whose data the target can check */
	unsigned int nr;
	struct seg segs[MAX_SEGS];
};

struct fuzz_blk {
	struct vdrv d;
	int base_fd;
	char base_path[64];
	uint8_t *base; /* the base image's bytes */
	struct disk *disk;
	struct virtio_blk *blk;
	uint16_t size;
	uint64_t features;
	bool live;
	bool dirty; /* a write-type request was sent in this input */
	uint16_t avail_idx, last_used, next_desc, nr_free;
	unsigned int batch; /* requests published since the last wait */
	struct inflight fl[QSIZE_MAX];
};

static uint8_t pat(uint64_t off)
{
	return (uint8_t)(off * 131 + (off >> 12) * 7 + 1);
}

static void sleep_us(long us)
{
	struct timespec ts = { 0, us * 1000 };

	nanosleep(&ts, NULL);
}

static bool bring_up(struct fuzz_blk *f)
{
	vdrv_wr32(&f->d, VIRTIO_MMIO_STATUS, 0);
	memset(f->d.ram, 0, DATA_GPA);
	memset(f->fl, 0, sizeof(f->fl));
	f->avail_idx = f->last_used = f->next_desc = 0;
	f->nr_free = f->size;
	f->batch = 0;
	f->live = false;
	if (!vdrv_negotiate(&f->d, f->features & vdrv_device_features(&f->d)))
		return false;
	vdrv_setup_queue(&f->d, 0, f->size, DESC_GPA, AVAIL_GPA, USED_GPA);
	vdrv_add_status(&f->d, VIRTIO_CONFIG_S_DRIVER_OK);
	f->live = vdrv_status(&f->d) == ST_LIVE;
	return f->live;
}

/* Does [a, a + n) lie in RAM and miss [b, b + m)? */
static bool disjoint(uint64_t a, uint64_t n, uint64_t b, uint64_t m)
{
	return a + n <= b || b + m <= a;
}

/* A read this target can check: its data cannot have been overwritten. */
static bool checkable(const struct inflight *r, uint64_t status_gpa)
{
	if (r->type != VIRTIO_BLK_T_IN || r->nr < 2 || r->segs[0].write ||
	    r->segs[0].len != HDR_LEN || r->segs[0].gpa + HDR_LEN > RAM_SIZE)
		return false;
	for (unsigned int i = 1; i < r->nr; i++) {
		const struct seg *s = &r->segs[i];

		if (!s->write || !s->len || s->gpa + s->len > RAM_SIZE)
			return false;
		if (i < r->nr - 1 && !disjoint(s->gpa, s->len, status_gpa, 1))
			return false;
		for (unsigned int j = 1; j < i; j++)
			if (!disjoint(s->gpa, s->len, r->segs[j].gpa,
				      r->segs[j].len))
				return false;
	}
	return true;
}

static void check_read(const struct fuzz_blk *f, const struct inflight *r,
		       uint32_t used_len)
{
	uint64_t off = r->sector << SECTOR_SHIFT, data = 0;
	uint8_t status =
		f->d.ram[r->segs[r->nr - 1].gpa + r->segs[r->nr - 1].len - 1];

	if (status != VIRTIO_BLK_S_OK)
		return;
	for (unsigned int i = 1; i < r->nr; i++) {
		const struct seg *s = &r->segs[i];
		uint32_t len = i == r->nr - 1 ? s->len - 1 : s->len;

		for (uint32_t k = 0; k < len; k++, data++)
			fuzz_check(f->d.ram[s->gpa + k] == f->base[off + data]);
	}
	fuzz_check(used_len == data + 1);
}

/* Takes what came back: every entry names a request in flight. */
static void reap(struct fuzz_blk *f)
{
	uint16_t used = vdrv_load16(&f->d, USED_GPA + 2);

	while (f->last_used != used) {
		uint64_t e = USED_GPA + 4 + 8ULL * (f->last_used % f->size);
		uint32_t id = vdrv_get32(&f->d, e),
			 len = vdrv_get32(&f->d, e + 4);
		struct inflight *r;

		fuzz_check(id < f->size);
		r = &f->fl[id];
		fuzz_check(r->busy);
		fuzz_check(len <= r->in_len);
		if (r->checkable && !f->dirty && f->batch == 1)
			check_read(f, r, len);
		r->busy = false;
		f->nr_free += r->ndesc;
		f->last_used++;
	}
	vdrv_store16(&f->d, AVAIL_GPA + 4 + 2ULL * f->size, f->last_used);
}

/* Kicks, then waits for every request published, or NEEDS_RESET. */
static void kick_wait(struct fuzz_blk *f)
{
	long deadline = vdrv_now_ms() + REQ_TIMEOUT_MS;

	if (!f->live)
		return;
	vdrv_wr32(&f->d, VIRTIO_MMIO_QUEUE_NOTIFY, 0);
	for (;;) {
		reap(f);
		if (f->last_used == f->avail_idx)
			break;
		if (vdrv_status(&f->d) & VIRTIO_CONFIG_S_NEEDS_RESET) {
			f->live = false;
			break;
		}
		fuzz_check(vdrv_now_ms() < deadline);
		sleep_us(20);
	}
	f->batch = 0;
}

static uint64_t pick_gpa(struct fuzz_in *in)
{
	uint16_t v = fuzz_in__u16(in);

	/* Mostly in the data area; now and then anywhere, or past RAM. */
	switch (v >> 14) {
	case 0:
		return DATA_GPA + (uint64_t)v * 16 % DATA_SIZE;
	case 1:
		return v & 0x8000 ? RAM_SIZE - (v & 0xfff) : v;
	default:
		return DATA_GPA + (uint64_t)(v & 0x3fff) * 16 % DATA_SIZE;
	}
}

static uint32_t pick_len(struct fuzz_in *in)
{
	uint8_t v = fuzz_in__u8(in);

	if (v & 0x80)
		return (v & 0x7f) * 64U; /* anything, small */
	return (v % 5) * DISK_BLOCK_SIZE;
}

static uint64_t pick_sector(struct fuzz_in *in)
{
	uint32_t v = fuzz_in__u32(in);

	if (v & 0x80000000U)
		return (uint64_t)v << 32 | v;
	return (v & 0x40000000U) ? v % (DISK_SECTORS + 64) :
				   v % (DISK_SECTORS / 8) * 8;
}

static void put_bytes(struct fuzz_blk *f, uint64_t gpa, const void *p,
		      size_t len)
{
	if (gpa >= RAM_SIZE)
		return;
	if (len > RAM_SIZE - gpa)
		len = RAM_SIZE - gpa;
	memcpy(f->d.ram + gpa, p, len);
}

/*
 * One request: a header segment, data segments, a status segment, as
 * the input shapes them; its header (and discard segment) written where
 * its first segment points.
 */
static void request(struct fuzz_blk *f, struct fuzz_in *in)
{
	uint8_t shape = fuzz_in__u8(in);
	unsigned int nr = 1 + shape % MAX_SEGS;
	bool indirect =
		shape & 0x80 && f->features & FEAT(VIRTIO_RING_F_INDIRECT_DESC);
	uint32_t type = types[fuzz_in__u8(in) % ARRAY_SIZE(types)];
	struct virtio_blk_outhdr hdr = { .type = htole32(type) };
	struct virtio_blk_discard_write_zeroes zs;
	unsigned int need = indirect ? 1 : nr;
	struct inflight *r;
	uint16_t head, idx[MAX_SEGS];

	if (!f->live)
		return;
	if (need > f->nr_free)
		kick_wait(f);
	if (!f->live || need > f->nr_free)
		return;
	head = f->next_desc;
	r = &f->fl[head];
	*r = (struct inflight){
		.busy = true, .ndesc = need, .type = type, .nr = nr
	};
	r->sector = pick_sector(in);
	hdr.sector = htole64(r->sector);
	for (unsigned int i = 0; i < nr; i++) {
		struct seg *s = &r->segs[i];
		uint8_t how = fuzz_in__u8(in);

		/* The usual shape unless the input says otherwise. */
		if (how & 0x40)
			s->len = pick_len(in);
		else
			s->len = !i	     ? HDR_LEN :
				 i == nr - 1 ? 1 :
					       DISK_BLOCK_SIZE;
		if (!i && type >= VIRTIO_BLK_T_DISCARD &&
		    type <= VIRTIO_BLK_T_WRITE_ZEROES && !(how & 0x40))
			s->len = HDR_LEN + ZERO_SEG_LEN;
		s->write = how & 0x20  ? how & 1 :
			   i == 0      ? false :
			   i == nr - 1 ? true :
					 type != VIRTIO_BLK_T_OUT;
		s->gpa = pick_gpa(in);
		if (s->write)
			r->in_len += s->len;
	}
	put_bytes(f, r->segs[0].gpa, &hdr, sizeof(hdr));
	zs = (struct virtio_blk_discard_write_zeroes){
		.sector = htole64(pick_sector(in)),
		.num_sectors = htole32(fuzz_in__u8(in) % 64 * 8),
		.flags = htole32(fuzz_in__u8(in) % 4),
	};
	put_bytes(f, r->segs[0].gpa + HDR_LEN, &zs, sizeof(zs));
	r->checkable =
		checkable(r, r->segs[nr - 1].gpa + r->segs[nr - 1].len - 1);
	if (type == VIRTIO_BLK_T_OUT || type == VIRTIO_BLK_T_DISCARD ||
	    type == VIRTIO_BLK_T_WRITE_ZEROES ||
	    type == VIRTIO_BLK_T_SECURE_ERASE)
		f->dirty = true;

	for (unsigned int i = 0; i < need; i++) {
		idx[i] = f->next_desc;
		f->next_desc = (uint16_t)((f->next_desc + 1) % f->size);
	}
	f->nr_free -= need;
	for (unsigned int i = 0; i < nr; i++) {
		const struct seg *s = &r->segs[i];
		uint16_t flags = (s->write ? VRING_DESC_F_WRITE : 0) |
				 (i + 1 < nr ? VRING_DESC_F_NEXT : 0);

		if (indirect)
			vdrv_put_desc(&f->d, TABLE_GPA + head * TABLE_SLOT, i,
				      s->gpa, s->len, flags, i + 1);
		else
			vdrv_put_desc(&f->d, DESC_GPA, idx[i], s->gpa, s->len,
				      flags, i + 1 < nr ? idx[i + 1] : 0);
	}
	if (indirect)
		vdrv_put_desc(&f->d, DESC_GPA, head,
			      TABLE_GPA + head * TABLE_SLOT,
			      nr * sizeof(struct vring_desc),
			      VRING_DESC_F_INDIRECT, 0);
	vdrv_publish(&f->d, AVAIL_GPA, f->size, &f->avail_idx, head);
	f->batch++;
}

static void run(struct fuzz_blk *f, struct fuzz_in *in)
{
	uint8_t opt = fuzz_in__u8(in);
	enum disk_mode mode = opt & 0x40 ? DISK_READONLY : DISK_EPHEMERAL;
	struct disk_params dp = { .base_path = f->base_path,
				  .base_size = DISK_SIZE,
				  .base_digest = DIGEST,
				  .mode = mode };
	struct virtio_blk_params bp = {
		.name = "fuzz-blk",
		.serial = SERIAL,
		.nr_queues = 1,
		.mem = &f->d.mem,
		.irq = { .set = vdrv_irq_set, .opaque = &f->d.irq },
	};

	f->size = (uint16_t)(1U << (opt % (QSIZE_SHIFT_MAX + 1)));
	f->features = FEAT(VIRTIO_F_VERSION_1) | ~0ULL >> 32;
	if (!(opt & 0x10))
		f->features &= ~FEAT(VIRTIO_RING_F_EVENT_IDX);
	if (!(opt & 0x20))
		f->features &= ~FEAT(VIRTIO_RING_F_INDIRECT_DESC);
	f->dirty = false;
	fuzz_check(!disk__open(&f->disk, &dp));
	bp.disk = f->disk;
	fuzz_check(!virtio_blk__create(&f->blk, &bp));
	f->d.vdev = virtio_blk__device(f->blk);
	fuzz_check(!virtio_blk__start(f->blk, NULL));
	fuzz_check(bring_up(f));

	for (int i = 0; i < MAX_STEPS && in->left; i++) {
		switch ((enum step)(fuzz_in__u8(in) % NR_STEPS)) {
		case STEP_REQUEST:
			request(f, in);
			break;
		case STEP_KICK:
			kick_wait(f);
			break;
		case STEP_SCRIBBLE: {
			uint64_t at = DATA_GPA + fuzz_in__u16(in) % DATA_SIZE;
			size_t len;
			const uint8_t *p = fuzz_in__bytes(
				in, fuzz_in__u8(in) % SCRIBBLE_MAX, &len);

			kick_wait(f); /* never under the device's feet */
			put_bytes(f, at, p, len);
			break;
		}
		default:
			kick_wait(f);
			fuzz_check(bring_up(f));
			break;
		}
	}
	kick_wait(f);
	virtio_blk__destroy(f->blk);
	disk__close(f->disk);
	fuzz_check(vdrv_guards_intact(&f->d));
}

/* The base image: a memfd named through /proc, a known byte pattern. */
static void base_create(struct fuzz_blk *f)
{
	f->base_fd = memfd_create("fuzz-blk-base", MFD_CLOEXEC);
	fuzz_check(f->base_fd >= 0);
	f->base = malloc(DISK_SIZE);
	fuzz_check(f->base);
	for (uint64_t i = 0; i < DISK_SIZE; i++)
		f->base[i] = pat(i);
	fuzz_check(pwrite(f->base_fd, f->base, DISK_SIZE, 0) ==
		   (ssize_t)DISK_SIZE);
	snprintf(f->base_path, sizeof(f->base_path), "/proc/self/fd/%d",
		 f->base_fd);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static struct fuzz_blk *f;
	struct fuzz_in in;

	fuzz__quiet();
	if (!f) {
		f = calloc(1, sizeof(*f));
		fuzz_check(f);
		base_create(f);
		fuzz_check(!vdrv_init(&f->d, RAM_SIZE));
	}
	memset(f->d.ram, 0, RAM_SIZE);
	fuzz_in__init(&in, data, size);
	run(f, &in);
	return 0;
}
