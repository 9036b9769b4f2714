// SPDX-License-Identifier: GPL-2.0
/*
 * virtio split virtqueue, device side: a fake driver lays rings out in a
 * malloc'd guest memory framed by guard bytes, and checks good chains,
 * notification decisions and hostile rings. Every hostile ring must break
 * the queue, make pop and push fail, and leave the guard bytes alone. A
 * fixed-seed fuzz loop throws random rings at the queue.
 */
#include <endian.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#define VIRTIO_RING_NO_LEGACY
#include <linux/virtio_ring.h>

#include "devices/virtio/guest-mem.h"
#include "devices/virtio/queue.h"
#include "selftests/kselftest.h"
#include "selftests/testutil.h"

#define RAM_SIZE   (1024 * 1024)
#define GUARD_SIZE 4096
#define GUARD_BYTE 0xa5

/* Where the fake driver puts things (guest-physical). */
#define DESC_GPA      0x1000
#define AVAIL_GPA     0x2000
#define USED_GPA      0x3000
#define INDIRECT_GPA  0x4000 /* up to 0x8000: 1024 entries */
#define INDIRECT2_GPA 0x8000
#define BIG_TABLE_GPA 0x20000
#define DATA_GPA      0x40000

struct fake_guest {
	uint8_t *block; /* guard, RAM, guard */
	uint8_t *ram;
	struct guest_mem mem;
	struct virtqueue q;
	struct vq_chain chain;
	uint16_t size;
	uint16_t avail_idx; /* the driver's shadow */
};

/* ---- the fake driver ---------------------------------------------- */

static void guest_alloc(struct fake_guest *g)
{
	g->block = aligned_alloc(4096, GUARD_SIZE + RAM_SIZE + GUARD_SIZE);
	if (!g->block)
		abort();
	memset(g->block, GUARD_BYTE, GUARD_SIZE + RAM_SIZE + GUARD_SIZE);
	g->ram = g->block + GUARD_SIZE;
	memset(g->ram, 0, RAM_SIZE);
	guest_mem__init(&g->mem);
	if (guest_mem__add(&g->mem, 0, RAM_SIZE, g->ram))
		abort();
	virtqueue__init(&g->q, "test-vq");
}

static bool guards_intact(const struct fake_guest *g)
{
	size_t i;

	for (i = 0; i < GUARD_SIZE; i++)
		if (g->block[i] != GUARD_BYTE ||
		    g->block[GUARD_SIZE + RAM_SIZE + i] != GUARD_BYTE)
			return false;
	return true;
}

static bool iov_in_ram(const struct fake_guest *g, const struct iovec *iov)
{
	const uint8_t *p = iov->iov_base;

	return iov->iov_len && p >= g->ram && p < g->ram + RAM_SIZE &&
	       iov->iov_len <= (size_t)(g->ram + RAM_SIZE - p);
}

/* Reset the rings to zero and (re)configure the queue over them. */
static int ring_setup(struct fake_guest *g, uint16_t size, bool event_idx)
{
	memset(g->ram + DESC_GPA, 0, DATA_GPA - DESC_GPA);
	g->size = size;
	g->avail_idx = 0;
	virtqueue__reset(&g->q);
	return virtqueue__configure(&g->q, &g->mem, size, DESC_GPA, AVAIL_GPA,
				    USED_GPA, event_idx);
}

static void put_desc(struct fake_guest *g, uint64_t table, uint32_t i,
		     uint64_t addr, uint32_t len, uint16_t flags, uint16_t next)
{
	struct vring_desc d = {
		.addr = htole64(addr),
		.len = htole32(len),
		.flags = htole16(flags),
		.next = htole16(next),
	};

	memcpy(g->ram + table + (uint64_t)i * sizeof(d), &d, sizeof(d));
}

static void desc(struct fake_guest *g, uint32_t i, uint64_t addr, uint32_t len,
		 uint16_t flags, uint16_t next)
{
	put_desc(g, DESC_GPA, i, addr, len, flags, next);
}

static void put16(struct fake_guest *g, uint64_t gpa, uint16_t v)
{
	v = htole16(v);
	memcpy(g->ram + gpa, &v, sizeof(v));
}

static uint16_t get16(const struct fake_guest *g, uint64_t gpa)
{
	uint16_t v;

	memcpy(&v, g->ram + gpa, sizeof(v));
	return le16toh(v);
}

static uint32_t get32(const struct fake_guest *g, uint64_t gpa)
{
	uint32_t v;

	memcpy(&v, g->ram + gpa, sizeof(v));
	return le32toh(v);
}

static void set_avail_idx(struct fake_guest *g, uint16_t idx)
{
	g->avail_idx = idx;
	put16(g, AVAIL_GPA + 2, idx);
}

/* Make chain head available, as a driver would. */
static void publish(struct fake_guest *g, uint16_t head)
{
	put16(g, AVAIL_GPA + 4 + 2 * (g->avail_idx & (g->size - 1)), head);
	set_avail_idx(g, g->avail_idx + 1);
}

static void set_avail_flags(struct fake_guest *g, uint16_t flags)
{
	put16(g, AVAIL_GPA, flags);
}

static void set_used_event(struct fake_guest *g, uint16_t v)
{
	put16(g, AVAIL_GPA + 4 + 2 * g->size, v);
}

static uint16_t used_idx(const struct fake_guest *g)
{
	return get16(g, USED_GPA + 2);
}

static uint16_t used_flags(const struct fake_guest *g)
{
	return get16(g, USED_GPA);
}

static uint16_t avail_event(const struct fake_guest *g)
{
	return get16(g, USED_GPA + 4 + 8 * g->size);
}

static uint32_t used_id(const struct fake_guest *g, uint16_t i)
{
	return get32(g, USED_GPA + 4 + 8 * (i & (g->size - 1)));
}

static uint32_t used_len(const struct fake_guest *g, uint16_t i)
{
	return get32(g, USED_GPA + 8 + 8 * (i & (g->size - 1)));
}

static void *gpa(const struct fake_guest *g, uint64_t addr)
{
	return g->ram + addr;
}

FIXTURE(vq)
{
	struct fake_guest g;
};

FIXTURE_SETUP(vq)
{
	guest_alloc(&self->g);
	ASSERT_EQ(0, ring_setup(&self->g, 16, false));
}

FIXTURE_TEARDOWN(vq)
{
	free(self->g.block);
}

/* The checks every hostile ring ends with. */
#define ASSERT_BROKEN(g)                                               \
	do {                                                           \
		ASSERT_TRUE(virtqueue__is_broken(&(g)->q));            \
		EXPECT_EQ(-EIO, virtqueue__pop(&(g)->q, &(g)->chain)); \
		EXPECT_EQ(-EIO, virtqueue__pop(&(g)->q, &(g)->chain)); \
		EXPECT_EQ(-EIO, virtqueue__push(&(g)->q, 0, 0));       \
		EXPECT_FALSE(virtqueue__should_notify(&(g)->q));       \
		EXPECT_EQ(0, used_idx(g));                             \
		EXPECT_TRUE(guards_intact(g));                         \
	} while (0)

/* Publish head, expect the pop to break the queue. */
#define ASSERT_POP_BREAKS(g, head)                                     \
	do {                                                           \
		publish(g, head);                                      \
		EXPECT_EQ(-EIO, virtqueue__pop(&(g)->q, &(g)->chain)); \
		ASSERT_BROKEN(g);                                      \
	} while (0)

/* ---- guest memory ------------------------------------------------- */

TEST(guest_mem_ranges)
{
	static uint8_t low[4096], high[4096];
	struct guest_mem mem;

	guest_mem__init(&mem);
	EXPECT_TRUE(guest_mem__ptr(&mem, 0, 1) == NULL);
	ASSERT_EQ(0, guest_mem__add(&mem, 0, sizeof(low), low));
	ASSERT_EQ(0, guest_mem__add(&mem, 1ULL << 32, sizeof(high), high));
	EXPECT_EQ(-ENOSPC, guest_mem__add(&mem, 1ULL << 40, 1, low));

	EXPECT_TRUE(guest_mem__ptr(&mem, 0, 4096) == low);
	EXPECT_TRUE(guest_mem__ptr(&mem, 4095, 1) == low + 4095);
	EXPECT_TRUE(guest_mem__ptr(&mem, 4095, 2) == NULL);
	EXPECT_TRUE(guest_mem__ptr(&mem, 4096, 1) == NULL);
	EXPECT_TRUE(guest_mem__ptr(&mem, (1ULL << 32) + 10, 100) == high + 10);
	EXPECT_TRUE(guest_mem__ptr(&mem, (1ULL << 32) - 1, 2) == NULL);
	EXPECT_TRUE(guest_mem__ptr(&mem, (1ULL << 32) + 4000, 97) == NULL);
	/* Overflow: gpa + len wraps to something small. */
	EXPECT_TRUE(guest_mem__ptr(&mem, UINT64_MAX, 2) == NULL);
	EXPECT_TRUE(guest_mem__ptr(&mem, 16, UINT64_MAX) == NULL);
	EXPECT_TRUE(guest_mem__ptr(&mem, UINT64_MAX - 15, 32) == NULL);
}

TEST(guest_mem_add_rejects)
{
	static uint8_t buf[4096];
	struct guest_mem mem;

	guest_mem__init(&mem);
	EXPECT_EQ(-EINVAL, guest_mem__add(&mem, 0, 0, buf));
	EXPECT_EQ(-EINVAL, guest_mem__add(&mem, 0, 16, NULL));
	EXPECT_EQ(-EINVAL, guest_mem__add(&mem, UINT64_MAX - 10, 100, buf));
	ASSERT_EQ(0, guest_mem__add(&mem, 0x1000, 0x1000, buf));
	EXPECT_EQ(-EINVAL, guest_mem__add(&mem, 0x1800, 0x1000, buf));
	EXPECT_EQ(-EINVAL, guest_mem__add(&mem, 0, 0x1001, buf));
}

/* ---- configuration ------------------------------------------------ */

static void check_bad_config(struct __test_metadata *_metadata,
			     struct fake_guest *g, uint16_t size, uint64_t d,
			     uint64_t a, uint64_t u)
{
	virtqueue__reset(&g->q);
	EXPECT_FALSE(virtqueue__is_broken(&g->q));
	EXPECT_EQ(-EINVAL,
		  virtqueue__configure(&g->q, &g->mem, size, d, a, u, false))
	TH_LOG("size %u desc %#llx avail %#llx used %#llx", size,
	       (unsigned long long)d, (unsigned long long)a,
	       (unsigned long long)u);
	EXPECT_TRUE(virtqueue__is_broken(&g->q));
	EXPECT_FALSE(virtqueue__is_ready(&g->q));
	EXPECT_EQ(-EIO, virtqueue__pop(&g->q, &g->chain));
	EXPECT_EQ(-EIO, virtqueue__push(&g->q, 0, 0));
}

TEST_F(vq, configure_rejects)
{
	struct fake_guest *g = &self->g;

	check_bad_config(_metadata, g, 0, DESC_GPA, AVAIL_GPA, USED_GPA);
	check_bad_config(_metadata, g, 3, DESC_GPA, AVAIL_GPA, USED_GPA);
	check_bad_config(_metadata, g, 48, DESC_GPA, AVAIL_GPA, USED_GPA);
	/* Misaligned: desc 16, avail 2, used 4. */
	check_bad_config(_metadata, g, 16, DESC_GPA + 8, AVAIL_GPA, USED_GPA);
	check_bad_config(_metadata, g, 16, DESC_GPA, AVAIL_GPA + 1, USED_GPA);
	check_bad_config(_metadata, g, 16, DESC_GPA, AVAIL_GPA, USED_GPA + 2);
	/* Outside guest memory, straddling its end, wrapping around. */
	check_bad_config(_metadata, g, 16, RAM_SIZE, AVAIL_GPA, USED_GPA);
	check_bad_config(_metadata, g, 16, RAM_SIZE - 16 * 8, AVAIL_GPA,
			 USED_GPA);
	check_bad_config(_metadata, g, 16, DESC_GPA, RAM_SIZE - 36, USED_GPA);
	check_bad_config(_metadata, g, 16, DESC_GPA, AVAIL_GPA, RAM_SIZE - 132);
	check_bad_config(_metadata, g, 16, UINT64_MAX - 15, AVAIL_GPA,
			 USED_GPA);
	/* A 32768-entry descriptor table is 512 KiB: not from 768 KiB. */
	check_bad_config(_metadata, g, 32768, 0xc0000, AVAIL_GPA, USED_GPA);
	EXPECT_TRUE(guards_intact(g));

	/* Ending exactly at the end of memory is fine; so is 32768. */
	virtqueue__reset(&g->q);
	EXPECT_EQ(0, virtqueue__configure(&g->q, &g->mem, 16, RAM_SIZE - 256,
					  RAM_SIZE - 38, RAM_SIZE - 136, true));
	virtqueue__reset(&g->q);
	EXPECT_EQ(0, virtqueue__configure(&g->q, &g->mem, 32768, 0, 0x80000,
					  0x90000, false));
	EXPECT_FALSE(virtqueue__is_broken(&g->q));
}

TEST_F(vq, unconfigured_queue)
{
	struct fake_guest *g = &self->g;

	virtqueue__reset(&g->q);
	EXPECT_EQ(-ENODEV, virtqueue__pop(&g->q, &g->chain));
	EXPECT_EQ(-ENODEV, virtqueue__push(&g->q, 0, 0));
	EXPECT_FALSE(virtqueue__should_notify(&g->q));
	EXPECT_FALSE(virtqueue__is_broken(&g->q));
}

/* ---- good chains -------------------------------------------------- */

TEST_F(vq, simple_chain)
{
	struct fake_guest *g = &self->g;

	EXPECT_EQ(0, virtqueue__pop(&g->q, &g->chain));
	desc(g, 5, DATA_GPA, 512, 0, 0);
	publish(g, 5);
	ASSERT_EQ(1, virtqueue__pop(&g->q, &g->chain));
	EXPECT_EQ(5, g->chain.head);
	EXPECT_EQ(1, g->chain.nr_out);
	EXPECT_EQ(0, g->chain.nr_in);
	EXPECT_EQ(512, g->chain.out_len);
	EXPECT_EQ(0, g->chain.in_len);
	EXPECT_TRUE(g->chain.iov[0].iov_base == gpa(g, DATA_GPA));
	EXPECT_EQ(512, g->chain.iov[0].iov_len);
	EXPECT_EQ(0, virtqueue__pop(&g->q, &g->chain));

	ASSERT_EQ(0, virtqueue__push(&g->q, 5, 0));
	EXPECT_EQ(1, used_idx(g));
	EXPECT_EQ(5, used_id(g, 0));
	EXPECT_EQ(0, used_len(g, 0));
	/* More pushes than pops is a device bug. */
	EXPECT_EQ(-EINVAL, virtqueue__push(&g->q, 5, 0));
	EXPECT_EQ(1, used_idx(g));
	EXPECT_FALSE(virtqueue__is_broken(&g->q));
	EXPECT_TRUE(guards_intact(g));
}

TEST_F(vq, read_write_chain)
{
	struct fake_guest *g = &self->g;
	struct vq_chain *c = &g->chain;

	/* A virtio-blk request: header, data out, data in, status. */
	desc(g, 2, DATA_GPA, 16, VRING_DESC_F_NEXT, 7);
	desc(g, 7, DATA_GPA + 0x1000, 4096, VRING_DESC_F_NEXT, 0);
	desc(g, 0, DATA_GPA + 0x3000, 4096,
	     VRING_DESC_F_WRITE | VRING_DESC_F_NEXT, 15);
	desc(g, 15, DATA_GPA + 0x5000, 1, VRING_DESC_F_WRITE, 3);
	publish(g, 2);
	ASSERT_EQ(1, virtqueue__pop(&g->q, c));
	EXPECT_EQ(2, c->head);
	EXPECT_EQ(2, c->nr_out);
	EXPECT_EQ(2, c->nr_in);
	EXPECT_EQ(16 + 4096, c->out_len);
	EXPECT_EQ(4096 + 1, c->in_len);
	EXPECT_TRUE(c->iov[0].iov_base == gpa(g, DATA_GPA));
	EXPECT_TRUE(c->iov[1].iov_base == gpa(g, DATA_GPA + 0x1000));
	EXPECT_TRUE(c->iov[2].iov_base == gpa(g, DATA_GPA + 0x3000));
	EXPECT_TRUE(c->iov[3].iov_base == gpa(g, DATA_GPA + 0x5000));
	EXPECT_EQ(1, c->iov[3].iov_len);

	ASSERT_EQ(0, virtqueue__push(&g->q, c->head, 4097));
	EXPECT_EQ(1, used_idx(g));
	EXPECT_EQ(2, used_id(g, 0));
	EXPECT_EQ(4097, used_len(g, 0));
	EXPECT_TRUE(guards_intact(g));
}

TEST_F(vq, out_of_order_completion)
{
	struct fake_guest *g = &self->g;
	uint16_t heads[3];
	int i;

	for (i = 0; i < 3; i++) {
		desc(g, i, DATA_GPA + i * 0x100, 64, VRING_DESC_F_WRITE, 0);
		publish(g, i);
	}
	for (i = 0; i < 3; i++) {
		ASSERT_EQ(1, virtqueue__pop(&g->q, &g->chain));
		heads[i] = g->chain.head;
	}
	ASSERT_EQ(0, virtqueue__push(&g->q, heads[2], 3));
	ASSERT_EQ(0, virtqueue__push(&g->q, heads[0], 1));
	ASSERT_EQ(0, virtqueue__push(&g->q, heads[1], 2));
	EXPECT_EQ(3, used_idx(g));
	EXPECT_EQ(2, used_id(g, 0));
	EXPECT_EQ(0, used_id(g, 1));
	EXPECT_EQ(1, used_id(g, 2));
	EXPECT_EQ(-EINVAL, virtqueue__push(&g->q, 16, 0));
}

/*
 * vm.metrics' queue counters: chains and bytes each way, in flight as
 * taken less given back; a reset forgets what was in flight but no
 * counter goes back.
 */
TEST_F(vq, stats_count_and_survive_a_reset)
{
	struct fake_guest *g = &self->g;
	const struct vq_stats *st = &g->q.stats;
	uint16_t heads[2];

	/* Two blk-like requests: 16 + 512 bytes out, 1 byte in. */
	for (int i = 0; i < 2; i++) {
		desc(g, 2 * i, DATA_GPA + i * 0x1000, 16 + 512,
		     VRING_DESC_F_NEXT, 2 * i + 1);
		desc(g, 2 * i + 1, DATA_GPA + i * 0x1000 + 0x800, 1,
		     VRING_DESC_F_WRITE, 0);
		publish(g, 2 * i);
	}
	for (int i = 0; i < 2; i++) {
		ASSERT_EQ(1, virtqueue__pop(&g->q, &g->chain));
		heads[i] = g->chain.head;
	}
	EXPECT_EQ(2, st->popped);
	EXPECT_EQ(2 * (16 + 512), st->bytes_out);
	EXPECT_EQ(0, st->used);
	ASSERT_EQ(0, virtqueue__push(&g->q, heads[0], 1));
	EXPECT_EQ(1, st->used);
	EXPECT_EQ(1, st->bytes_in);
	/* Nothing popped, nothing counted. */
	EXPECT_EQ(0, virtqueue__pop(&g->q, &g->chain));
	EXPECT_EQ(2, st->popped);

	/* The driver resets with heads[1] in flight. */
	ASSERT_EQ(0, ring_setup(g, 16, false));
	EXPECT_EQ(2, st->popped);
	EXPECT_EQ(1, st->used);
	EXPECT_EQ(1, st->forgotten);
	EXPECT_EQ(2 * (16 + 512), st->bytes_out);
	/* A reset with nothing in flight forgets nothing more. */
	ASSERT_EQ(0, ring_setup(g, 16, false));
	EXPECT_EQ(1, st->forgotten);
	/* Counting goes on from there. */
	desc(g, 0, DATA_GPA, 100, 0, 0);
	publish(g, 0);
	ASSERT_EQ(1, virtqueue__pop(&g->q, &g->chain));
	EXPECT_EQ(3, st->popped);
	EXPECT_EQ(2 * (16 + 512) + 100, st->bytes_out);
}

/*
 * Fill and flush: the elements are written at once, the index only at the
 * flush, so the driver sees a batch (a merged receive frame) whole.
 */
TEST_F(vq, fill_publishes_at_flush)
{
	struct fake_guest *g = &self->g;
	int i;

	for (i = 0; i < 3; i++) {
		desc(g, i, DATA_GPA + i * 0x100, 64, VRING_DESC_F_WRITE, 0);
		publish(g, i);
	}
	for (i = 0; i < 3; i++)
		ASSERT_EQ(1, virtqueue__pop(&g->q, &g->chain));
	ASSERT_EQ(0, virtqueue__fill(&g->q, 0, 10));
	ASSERT_EQ(0, virtqueue__fill(&g->q, 1, 20));
	EXPECT_EQ(0, used_idx(g));
	EXPECT_EQ(0, used_id(g, 0));
	EXPECT_EQ(20, used_len(g, 1));
	virtqueue__flush(&g->q);
	EXPECT_EQ(2, used_idx(g));
	ASSERT_EQ(0, virtqueue__fill(&g->q, 2, 30));
	/* More fills than pops is a device bug, as for push. */
	EXPECT_EQ(-EINVAL, virtqueue__fill(&g->q, 2, 30));
	EXPECT_EQ(2, used_idx(g));
	virtqueue__flush(&g->q);
	EXPECT_EQ(3, used_idx(g));
	/* One decision for the batch. */
	EXPECT_TRUE(virtqueue__should_notify(&g->q));
}

TEST_F(vq, indirect_chain)
{
	struct fake_guest *g = &self->g;
	struct vq_chain *c = &g->chain;

	put_desc(g, INDIRECT_GPA, 0, DATA_GPA, 16, VRING_DESC_F_NEXT, 2);
	put_desc(g, INDIRECT_GPA, 2, DATA_GPA + 0x100, 100,
		 VRING_DESC_F_WRITE | VRING_DESC_F_NEXT, 1);
	put_desc(g, INDIRECT_GPA, 1, DATA_GPA + 0x200, 1, VRING_DESC_F_WRITE,
		 0);
	/* WRITE on the indirect descriptor itself is ignored (2.6.5.3). */
	desc(g, 9, INDIRECT_GPA, 3 * 16,
	     VRING_DESC_F_INDIRECT | VRING_DESC_F_WRITE, 0);
	publish(g, 9);
	ASSERT_EQ(1, virtqueue__pop(&g->q, c));
	EXPECT_EQ(9, c->head);
	EXPECT_EQ(1, c->nr_out);
	EXPECT_EQ(2, c->nr_in);
	EXPECT_EQ(16, c->out_len);
	EXPECT_EQ(101, c->in_len);
	EXPECT_TRUE(c->iov[1].iov_base == gpa(g, DATA_GPA + 0x100));
	EXPECT_TRUE(c->iov[2].iov_base == gpa(g, DATA_GPA + 0x200));

	/* Direct descriptors may lead into an indirect table. */
	put_desc(g, INDIRECT2_GPA, 0, DATA_GPA + 0x300, 8, VRING_DESC_F_WRITE,
		 0);
	desc(g, 3, DATA_GPA + 0x400, 32, VRING_DESC_F_NEXT, 4);
	desc(g, 4, INDIRECT2_GPA, 16, VRING_DESC_F_INDIRECT, 0);
	publish(g, 3);
	ASSERT_EQ(1, virtqueue__pop(&g->q, c));
	EXPECT_EQ(3, c->head);
	EXPECT_EQ(1, c->nr_out);
	EXPECT_EQ(1, c->nr_in);
	EXPECT_EQ(8, c->in_len);
	EXPECT_FALSE(virtqueue__is_broken(&g->q));
}

TEST_F(vq, max_segments)
{
	struct fake_guest *g = &self->g;
	uint32_t i;

	/* VQ_CHAIN_MAX_IOV entries in one indirect table: just fits. */
	for (i = 0; i < VQ_CHAIN_MAX_IOV; i++)
		put_desc(g, BIG_TABLE_GPA, i, DATA_GPA + i, 1,
			 i + 1 < VQ_CHAIN_MAX_IOV ? VRING_DESC_F_NEXT : 0,
			 i + 1);
	desc(g, 0, BIG_TABLE_GPA, VQ_CHAIN_MAX_IOV * 16, VRING_DESC_F_INDIRECT,
	     0);
	publish(g, 0);
	ASSERT_EQ(1, virtqueue__pop(&g->q, &g->chain));
	EXPECT_EQ(VQ_CHAIN_MAX_IOV, g->chain.nr_out);
	EXPECT_EQ(VQ_CHAIN_MAX_IOV, g->chain.out_len);

	/* One direct descriptor in front: one segment too many. */
	desc(g, 1, DATA_GPA, 1, VRING_DESC_F_NEXT, 0);
	ASSERT_POP_BREAKS(g, 1);
}

TEST_TIMEOUT(index_wraparound, 60)
{
	static struct fake_guest fg;
	struct fake_guest *g = &fg;
	uint32_t n;

	guest_alloc(g);
	ASSERT_EQ(0, ring_setup(g, 4, false));
	/* 70000 round trips: both 16-bit indices wrap past 65535. */
	for (n = 0; n < 70000; n++) {
		uint16_t head = n % 4;

		desc(g, head, DATA_GPA + head * 64, 64 + head, 0, 0);
		publish(g, head);
		/* Keep two buffers in flight so the wrap is not trivial. */
		if (n == 0)
			continue;
		ASSERT_EQ(1, virtqueue__pop(&g->q, &g->chain));
		ASSERT_EQ((n - 1) % 4, g->chain.head);
		ASSERT_EQ(64 + (n - 1) % 4, g->chain.out_len);
		ASSERT_EQ(0, virtqueue__push(&g->q, g->chain.head, n));
		ASSERT_EQ((uint16_t)n, used_idx(g));
		ASSERT_EQ((n - 1) % 4, used_id(g, n - 1));
		ASSERT_EQ(n, used_len(g, n - 1));
	}
	ASSERT_EQ(1, virtqueue__pop(&g->q, &g->chain));
	EXPECT_EQ(0, virtqueue__pop(&g->q, &g->chain));
	EXPECT_EQ((uint16_t)70000, g->q.last_avail_idx);
	EXPECT_FALSE(virtqueue__is_broken(&g->q));
	EXPECT_TRUE(guards_intact(g));
	free(g->block);
}

/* ---- notifications ------------------------------------------------ */

static void round_trip(struct __test_metadata *_metadata, struct fake_guest *g,
		       unsigned int n)
{
	while (n--) {
		desc(g, 0, DATA_GPA, 8, 0, 0);
		publish(g, 0);
		ASSERT_EQ(1, virtqueue__pop(&g->q, &g->chain));
		ASSERT_EQ(0, virtqueue__push(&g->q, 0, 0));
	}
}

TEST_F(vq, no_interrupt_flag)
{
	struct fake_guest *g = &self->g;

	round_trip(_metadata, g, 1);
	EXPECT_TRUE(virtqueue__should_notify(&g->q));
	set_avail_flags(g, VRING_AVAIL_F_NO_INTERRUPT);
	round_trip(_metadata, g, 1);
	EXPECT_FALSE(virtqueue__should_notify(&g->q));
	set_avail_flags(g, 0);
	EXPECT_TRUE(virtqueue__should_notify(&g->q));

	/* And our side: VRING_USED_F_NO_NOTIFY. */
	virtqueue__set_notify_suppression(&g->q, true);
	EXPECT_EQ(VRING_USED_F_NO_NOTIFY, used_flags(g));
	virtqueue__set_notify_suppression(&g->q, false);
	EXPECT_EQ(0, used_flags(g));
}

TEST_F(vq, event_idx_notify)
{
	struct fake_guest *g = &self->g;

	ASSERT_EQ(0, ring_setup(g, 16, true));
	/* NO_INTERRUPT means nothing with event indexes: used_event rules. */
	set_avail_flags(g, VRING_AVAIL_F_NO_INTERRUPT);
	set_used_event(g, 0);
	round_trip(_metadata, g, 1); /* used idx 1 */
	EXPECT_TRUE(virtqueue__should_notify(&g->q));
	/* Nothing new since the last decision. */
	EXPECT_FALSE(virtqueue__should_notify(&g->q));

	/* The driver wants an interrupt once entry 5 is used (idx 6). */
	set_used_event(g, 5);
	round_trip(_metadata, g, 1); /* 2 */
	EXPECT_FALSE(virtqueue__should_notify(&g->q));
	round_trip(_metadata, g, 3); /* 5 */
	EXPECT_FALSE(virtqueue__should_notify(&g->q));
	round_trip(_metadata, g, 1); /* 6 */
	EXPECT_TRUE(virtqueue__should_notify(&g->q));
	round_trip(_metadata, g, 1); /* 7: event already passed */
	EXPECT_FALSE(virtqueue__should_notify(&g->q));

	/* A batch that jumps over the event still notifies. */
	set_used_event(g, 8);
	round_trip(_metadata, g, 3); /* 10 */
	EXPECT_TRUE(virtqueue__should_notify(&g->q));

	/* Across the 16-bit wrap. */
	set_used_event(g, 65529);
	round_trip(_metadata, g, 65530 - 10); /* 65530 */
	EXPECT_TRUE(virtqueue__should_notify(&g->q));
	set_used_event(g, 2);
	round_trip(_metadata, g, 6); /* 0 */
	EXPECT_FALSE(virtqueue__should_notify(&g->q));
	round_trip(_metadata, g, 3); /* 3 */
	EXPECT_TRUE(virtqueue__should_notify(&g->q));

	/* avail_event: ask for a kick at the next buffer. */
	virtqueue__set_notify_suppression(&g->q, false);
	EXPECT_EQ(g->q.last_avail_idx, avail_event(g));
	EXPECT_EQ(3, avail_event(g));
	/* Suppression with event idx leaves used->flags alone. */
	virtqueue__set_notify_suppression(&g->q, true);
	EXPECT_EQ(0, used_flags(g));
	EXPECT_FALSE(virtqueue__is_broken(&g->q));
}

/*
 * The stuck-device report: one line with both sides of the ring, so a
 * reader can tell a lost kick (avail ahead of taken) from an interrupt
 * the driver did not take (used past used_event, notified).
 */
TEST_F(vq, describe_both_sides)
{
	struct fake_guest *g = &self->g;
	char line[256];

	ASSERT_EQ(0, ring_setup(g, 16, true));
	round_trip(_metadata, g, 1); /* the first decision reads nothing */
	EXPECT_TRUE(virtqueue__should_notify(&g->q));
	set_used_event(g, 1);
	round_trip(_metadata, g, 2); /* used idx 3 */
	EXPECT_TRUE(virtqueue__should_notify(&g->q));
	virtqueue__set_notify_suppression(&g->q, false);
	/* Two more made available, not taken: a kick we have not had. */
	desc(g, 0, DATA_GPA, 8, 0, 0);
	publish(g, 0);
	publish(g, 0);
	ASSERT_LT(0, virtqueue__describe(&g->q, line, sizeof(line)));
	EXPECT_NE(NULL, strstr(line, "size 16 avail idx 5 flags 0 taken 3"))
	TH_LOG("%s", line);
	EXPECT_NE(NULL, strstr(line, "used idx 3 flags 0 signalled 3 "
				     "notified 3"))
	TH_LOG("%s", line);
	EXPECT_NE(NULL, strstr(line, "used_event 1 (last read 1) "
				     "avail_event 3"))
	TH_LOG("%s", line);

	/* A queue the driver never set up says so, and reads no ring. */
	virtqueue__reset(&g->q);
	ASSERT_LT(0, virtqueue__describe(&g->q, line, sizeof(line)));
	EXPECT_NE(NULL, strstr(line, "not ready")) TH_LOG("%s", line);
}

/* ---- hostile rings ------------------------------------------------ */

TEST_F(vq, hostile_loop)
{
	struct fake_guest *g = &self->g;

	desc(g, 0, DATA_GPA, 8, VRING_DESC_F_NEXT, 1);
	desc(g, 1, DATA_GPA, 8, VRING_DESC_F_NEXT, 0);
	ASSERT_POP_BREAKS(g, 0);
}

TEST_F(vq, hostile_self_loop_writable)
{
	struct fake_guest *g = &self->g;

	desc(g, 3, DATA_GPA, 8, VRING_DESC_F_NEXT | VRING_DESC_F_WRITE, 3);
	ASSERT_POP_BREAKS(g, 3);
}

TEST_F(vq, hostile_indirect_loop)
{
	struct fake_guest *g = &self->g;

	put_desc(g, INDIRECT_GPA, 0, DATA_GPA, 8, VRING_DESC_F_NEXT, 1);
	put_desc(g, INDIRECT_GPA, 1, DATA_GPA, 8, VRING_DESC_F_NEXT, 0);
	desc(g, 0, INDIRECT_GPA, 32, VRING_DESC_F_INDIRECT, 0);
	ASSERT_POP_BREAKS(g, 0);
}

TEST_F(vq, hostile_head_out_of_range)
{
	struct fake_guest *g = &self->g;

	ASSERT_POP_BREAKS(g, 16);
}

TEST_F(vq, hostile_next_out_of_range)
{
	struct fake_guest *g = &self->g;

	desc(g, 0, DATA_GPA, 8, VRING_DESC_F_NEXT, 0xffff);
	ASSERT_POP_BREAKS(g, 0);
}

TEST_F(vq, hostile_indirect_next_out_of_range)
{
	struct fake_guest *g = &self->g;

	put_desc(g, INDIRECT_GPA, 0, DATA_GPA, 8, VRING_DESC_F_NEXT, 2);
	desc(g, 0, INDIRECT_GPA, 32, VRING_DESC_F_INDIRECT, 0);
	ASSERT_POP_BREAKS(g, 0);
}

TEST_F(vq, hostile_addr_past_memory)
{
	struct fake_guest *g = &self->g;

	desc(g, 0, RAM_SIZE - 10, 20, VRING_DESC_F_WRITE, 0);
	ASSERT_POP_BREAKS(g, 0);
}

TEST_F(vq, hostile_addr_far_away)
{
	struct fake_guest *g = &self->g;

	desc(g, 0, 1ULL << 40, 20, 0, 0);
	ASSERT_POP_BREAKS(g, 0);
}

TEST_F(vq, hostile_addr_len_overflow)
{
	struct fake_guest *g = &self->g;

	desc(g, 0, UINT64_MAX - 5, 100, VRING_DESC_F_WRITE, 0);
	ASSERT_POP_BREAKS(g, 0);
}

TEST_F(vq, hostile_huge_length)
{
	struct fake_guest *g = &self->g;

	desc(g, 0, DATA_GPA, UINT32_MAX, 0, 0);
	ASSERT_POP_BREAKS(g, 0);
}

TEST_F(vq, hostile_total_over_cap)
{
	struct fake_guest *g = &self->g;

	/* Each segment is fine, together they pass the device's cap. */
	virtqueue__set_max_chain_bytes(&g->q, 8192);
	desc(g, 0, DATA_GPA, 4096, VRING_DESC_F_NEXT, 1);
	desc(g, 1, DATA_GPA + 4096, 4096, VRING_DESC_F_NEXT, 2);
	desc(g, 2, DATA_GPA + 8192, 1, VRING_DESC_F_WRITE, 0);
	ASSERT_POP_BREAKS(g, 0);
}

TEST_F(vq, hostile_zero_length)
{
	struct fake_guest *g = &self->g;

	desc(g, 0, DATA_GPA, 8, VRING_DESC_F_NEXT, 1);
	desc(g, 1, DATA_GPA, 0, VRING_DESC_F_WRITE, 0);
	ASSERT_POP_BREAKS(g, 0);
}

TEST_F(vq, hostile_indirect_in_indirect)
{
	struct fake_guest *g = &self->g;

	put_desc(g, INDIRECT2_GPA, 0, DATA_GPA, 8, 0, 0);
	put_desc(g, INDIRECT_GPA, 0, DATA_GPA, 8, VRING_DESC_F_NEXT, 1);
	put_desc(g, INDIRECT_GPA, 1, INDIRECT2_GPA, 16, VRING_DESC_F_INDIRECT,
		 0);
	desc(g, 0, INDIRECT_GPA, 32, VRING_DESC_F_INDIRECT, 0);
	ASSERT_POP_BREAKS(g, 0);
}

TEST_F(vq, hostile_indirect_len_not_multiple)
{
	struct fake_guest *g = &self->g;

	put_desc(g, INDIRECT_GPA, 0, DATA_GPA, 8, 0, 0);
	desc(g, 0, INDIRECT_GPA, 24, VRING_DESC_F_INDIRECT, 0);
	ASSERT_POP_BREAKS(g, 0);
}

TEST_F(vq, hostile_indirect_len_zero)
{
	struct fake_guest *g = &self->g;

	desc(g, 0, INDIRECT_GPA, 0, VRING_DESC_F_INDIRECT, 0);
	ASSERT_POP_BREAKS(g, 0);
}

TEST_F(vq, hostile_indirect_too_big)
{
	struct fake_guest *g = &self->g;

	put_desc(g, BIG_TABLE_GPA, 0, DATA_GPA, 8, 0, 0);
	desc(g, 0, BIG_TABLE_GPA, (VQ_CHAIN_MAX_IOV + 1) * 16,
	     VRING_DESC_F_INDIRECT, 0);
	ASSERT_POP_BREAKS(g, 0);
}

TEST_F(vq, hostile_indirect_outside_memory)
{
	struct fake_guest *g = &self->g;

	desc(g, 0, RAM_SIZE - 16, 32, VRING_DESC_F_INDIRECT, 0);
	ASSERT_POP_BREAKS(g, 0);
}

TEST_F(vq, hostile_indirect_and_next)
{
	struct fake_guest *g = &self->g;

	put_desc(g, INDIRECT_GPA, 0, DATA_GPA, 8, 0, 0);
	desc(g, 0, INDIRECT_GPA, 16, VRING_DESC_F_INDIRECT | VRING_DESC_F_NEXT,
	     1);
	desc(g, 1, DATA_GPA, 8, 0, 0);
	ASSERT_POP_BREAKS(g, 0);
}

TEST_F(vq, hostile_avail_idx_jump)
{
	struct fake_guest *g = &self->g;

	desc(g, 0, DATA_GPA, 8, 0, 0);
	/* 16 ahead is the limit and fine; 17 is not. */
	set_avail_idx(g, 17);
	EXPECT_EQ(-EIO, virtqueue__pop(&g->q, &g->chain));
	ASSERT_BROKEN(g);
}

TEST_F(vq, hostile_avail_idx_backwards)
{
	struct fake_guest *g = &self->g;

	round_trip(_metadata, g, 2);
	/* Going back looks like a jump of 65535 ahead. */
	set_avail_idx(g, 1);
	EXPECT_EQ(-EIO, virtqueue__pop(&g->q, &g->chain));
	ASSERT_TRUE(virtqueue__is_broken(&g->q));
	EXPECT_EQ(-EIO, virtqueue__push(&g->q, 0, 0));
	EXPECT_TRUE(guards_intact(g));
}

TEST_F(vq, full_ring_is_not_a_jump)
{
	struct fake_guest *g = &self->g;
	int i;

	for (i = 0; i < 16; i++) {
		desc(g, i, DATA_GPA, 8, 0, 0);
		publish(g, i);
	}
	for (i = 0; i < 16; i++)
		ASSERT_EQ(1, virtqueue__pop(&g->q, &g->chain));
	EXPECT_EQ(0, virtqueue__pop(&g->q, &g->chain));
}

TEST_F(vq, hostile_writable_then_readable)
{
	struct fake_guest *g = &self->g;

	desc(g, 0, DATA_GPA, 8, VRING_DESC_F_WRITE | VRING_DESC_F_NEXT, 1);
	desc(g, 1, DATA_GPA + 8, 8, 0, 0);
	ASSERT_POP_BREAKS(g, 0);
}

TEST_F(vq, hostile_writable_then_readable_indirect)
{
	struct fake_guest *g = &self->g;

	put_desc(g, INDIRECT_GPA, 0, DATA_GPA, 8,
		 VRING_DESC_F_WRITE | VRING_DESC_F_NEXT, 1);
	put_desc(g, INDIRECT_GPA, 1, DATA_GPA + 8, 8, 0, 0);
	desc(g, 0, INDIRECT_GPA, 32, VRING_DESC_F_INDIRECT, 0);
	ASSERT_POP_BREAKS(g, 0);
}

/* A broken queue stays broken for good chains, until the reset. */
TEST_F(vq, broken_until_reset)
{
	struct fake_guest *g = &self->g;

	ASSERT_POP_BREAKS(g, 16);
	desc(g, 0, DATA_GPA, 8, 0, 0);
	publish(g, 0);
	EXPECT_EQ(-EIO, virtqueue__pop(&g->q, &g->chain));

	ASSERT_EQ(0, ring_setup(g, 16, false));
	EXPECT_FALSE(virtqueue__is_broken(&g->q));
	desc(g, 0, DATA_GPA, 8, 0, 0);
	publish(g, 0);
	EXPECT_EQ(1, virtqueue__pop(&g->q, &g->chain));
}

/* One warning per queue, even across resets: no log flooding. */
TEST_F(vq, warns_once)
{
	struct fake_guest *g = &self->g;
	struct stderr_capture cap = { .saved = -1 };
	char buf[4096];
	int i;

	ASSERT_EQ(0, stderr_capture__begin(&cap));
	for (i = 0; i < 5; i++) {
		ASSERT_EQ(0, ring_setup(g, 16, false));
		publish(g, 16);
		EXPECT_EQ(-EIO, virtqueue__pop(&g->q, &g->chain));
		EXPECT_EQ(-EIO, virtqueue__pop(&g->q, &g->chain));
	}
	EXPECT_EQ(1, stderr_capture__end(&cap, buf, sizeof(buf)))
	TH_LOG("log: %s", buf);
	EXPECT_TRUE(strstr(buf, "test-vq") != NULL) TH_LOG("log: %s", buf);
	EXPECT_TRUE(strstr(buf, "index 16 out of 16") != NULL)
	TH_LOG("log: %s", buf);
}

/* ---- fuzz --------------------------------------------------------- */

static uint64_t rng_state;

static uint64_t rnd(void)
{
	return prng__next(&rng_state);
}

static uint64_t fuzz_addr(void)
{
	switch (rnd() % 10) {
	case 0:
		return rnd();
	case 1:
		return RAM_SIZE - rnd() % 64;
	case 2:
	case 3:
		return INDIRECT_GPA + (rnd() % 4) * 16 * 16;
	default:
		return DATA_GPA + rnd() % (RAM_SIZE - DATA_GPA);
	}
}

static uint32_t fuzz_len(void)
{
	switch (rnd() % 10) {
	case 0:
		return 0;
	case 1:
		return (uint32_t)rnd();
	case 2:
	case 3:
		return (rnd() % 20) * 16;
	default:
		return 1 + rnd() % 8192;
	}
}

/*
 * A driver that follows the rules: chains run upwards through the table,
 * readable in the low half, writable in the high half.
 */
static void sane_desc(struct fake_guest *g, uint64_t table, uint32_t i,
		      uint16_t size)
{
	uint16_t flags = i >= size / 2 ? VRING_DESC_F_WRITE : 0;

	if (i + 1 < size && rnd() % 2)
		flags |= VRING_DESC_F_NEXT;
	put_desc(g, table, i, DATA_GPA + rnd() % 0x10000, 1 + rnd() % 4096,
		 flags, i + 1);
}

/* Flip a few random bits of one random descriptor. */
static void mutate_desc(struct fake_guest *g, uint64_t table, uint32_t n)
{
	uint8_t *d = g->ram + table + (rnd() % n) * sizeof(struct vring_desc);
	unsigned int flips = 1 + rnd() % 3;

	while (flips--)
		d[rnd() % sizeof(struct vring_desc)] ^= 1u << (rnd() % 8);
}

static void fuzz_desc(struct fake_guest *g, uint64_t table, uint32_t i,
		      uint16_t size)
{
	uint16_t flags = rnd() % 8;

	/* Mostly chains that end, sometimes anything. */
	if (rnd() % 4 == 0)
		flags &= ~VRING_DESC_F_NEXT;
	put_desc(g, table, i, fuzz_addr(), fuzz_len(), flags,
		 rnd() % 3 ? rnd() % size : (uint16_t)rnd());
}

TEST_TIMEOUT(fuzz, 300)
{
	static struct fake_guest fg;
	struct fake_guest *g = &fg;
	unsigned long chains = 0, broken = 0, rejected = 0;
	uint32_t iter, i, j, k;

	rng_state = 0x4b696c6e2d767121ULL; /* fixed seed */
	guest_alloc(g);
	for (iter = 0; iter < 20000; iter++) {
		uint16_t size = 1u << (rnd() % 6);
		bool event_idx = rnd() % 2;
		bool sane = rnd() % 2;
		int ret;

		memset(g->ram + DESC_GPA, 0, INDIRECT2_GPA - DESC_GPA);
		for (i = 0; i < size; i++) {
			if (sane)
				sane_desc(g, DESC_GPA, i, size);
			else
				fuzz_desc(g, DESC_GPA, i, size);
		}
		for (i = 0; i < 64; i++)
			fuzz_desc(g, INDIRECT_GPA, i, 20);
		/* Half the sane rings get a bit flipped somewhere. */
		if (sane && rnd() % 2)
			mutate_desc(g, DESC_GPA, size);
		g->size = size;
		for (i = 0; i < size; i++)
			put16(g, AVAIL_GPA + 4 + 2 * i,
			      rnd() % 8 ? rnd() % size : (uint16_t)rnd());
		set_used_event(g, rnd());
		set_avail_flags(g, rnd() % 2);

		virtqueue__reset(&g->q);
		if (rnd() % 50 == 0) {
			/* Random ring addresses: accepted or refused. */
			ret = virtqueue__configure(&g->q, &g->mem, size,
						   fuzz_addr(), fuzz_addr(),
						   fuzz_addr(), event_idx);
			if (ret) {
				ASSERT_EQ(-EINVAL, ret);
				ASSERT_EQ(-EIO,
					  virtqueue__pop(&g->q, &g->chain));
				rejected++;
				continue;
			}
		} else {
			ASSERT_EQ(0, virtqueue__configure(&g->q, &g->mem, size,
							  DESC_GPA, AVAIL_GPA,
							  USED_GPA, event_idx));
			set_avail_idx(g, rnd() % (size + 3));
		}

		/* At most size pops can succeed before the ring is empty. */
		for (j = 0; j <= size; j++) {
			struct vq_chain *c = &g->chain;
			uint64_t out = 0, in = 0;

			ret = virtqueue__pop(&g->q, c);
			if (ret <= 0) {
				ASSERT_TRUE(ret == 0 || ret == -EIO);
				if (ret)
					broken++;
				break;
			}
			ASSERT_NE(size, j);
			chains++;
			ASSERT_LT(c->head, size);
			ASSERT_LE(c->nr_out + c->nr_in, VQ_CHAIN_MAX_IOV);
			for (k = 0; k < c->nr_out + c->nr_in; k++) {
				ASSERT_TRUE(iov_in_ram(g, &c->iov[k]))
				TH_LOG("iter %u iov %u", iter, k);
				if (k < c->nr_out)
					out += c->iov[k].iov_len;
				else
					in += c->iov[k].iov_len;
			}
			ASSERT_EQ(out, c->out_len);
			ASSERT_EQ(in, c->in_len);
			ASSERT_LE(out + in, VQ_CHAIN_MAX_BYTES);
			ASSERT_EQ(0, virtqueue__push(&g->q, c->head,
						     (uint32_t)c->in_len));
			virtqueue__should_notify(&g->q);
			virtqueue__set_notify_suppression(&g->q, rnd() % 2);
		}
	}
	EXPECT_TRUE(guards_intact(g));
	printf("# fuzz: %lu chains, %lu broken, %lu refused configs\n", chains,
	       broken, rejected);
	/* The fuzz must reach both sides, or it tests nothing. */
	EXPECT_LT(1000, chains);
	EXPECT_LT(1000, broken);
	EXPECT_LT(10, rejected);
	free(g->block);
}

TEST_HARNESS_MAIN
