// SPDX-License-Identifier: GPL-2.0
/*
 * The virtio-mmio transport and the device core, driven through the
 * registers the way Linux's virtio_mmio driver probes and runs a device:
 * a fake device with two queues and a 12-byte config space, guest memory
 * from malloc framed by guard bytes and the registers through the shared
 * fake driver (selftests/virtio_driver.h), and an interrupt line that
 * records its level. A fixed-seed fuzz loop then throws random register accesses
 * and random rings at it.
 */
#include <endian.h>
#include <errno.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <linux/virtio_config.h>
#include <linux/virtio_ids.h>
#include <linux/virtio_mmio.h>
#define VIRTIO_RING_NO_LEGACY
#include <linux/virtio_ring.h>

#include "lib/compiler.h"
#include "devices/virtio/device.h"
#include "devices/virtio/guest-mem.h"
#include "devices/virtio/mmio.h"
#include "selftests/kselftest.h"
#include "selftests/testutil.h"
#include "selftests/virtio_driver.h"

#define RAM_SIZE    (1024 * 1024)
#define CONFIG_SIZE 12
#define QUEUE_MAX   64
#define NR_QUEUES   2

/* Where the fake driver puts each queue's rings (guest-physical). */
#define DESC_GPA(q)  (0x10000 + (q)*0x10000)
#define AVAIL_GPA(q) (DESC_GPA(q) + 0x4000)
#define USED_GPA(q)  (DESC_GPA(q) + 0x8000)
#define DATA_GPA     0x80000

#define FEAT(bit) (1ULL << (bit))
#define DEV_FEATURES                                                \
	(FEAT(VIRTIO_F_VERSION_1) | FEAT(VIRTIO_RING_F_EVENT_IDX) | \
	 FEAT(VIRTIO_RING_F_INDIRECT_DESC) | FEAT(3) | FEAT(50))

#define ST_ACK	     VIRTIO_CONFIG_S_ACKNOWLEDGE
#define ST_DRIVER    VIRTIO_CONFIG_S_DRIVER
#define ST_FEATURES  VIRTIO_CONFIG_S_FEATURES_OK
#define ST_DRIVER_OK VIRTIO_CONFIG_S_DRIVER_OK
#define ST_NEEDS_RST VIRTIO_CONFIG_S_NEEDS_RESET
#define ST_FAILED    VIRTIO_CONFIG_S_FAILED

struct irq_log {
	int level;
	unsigned int raises;
	unsigned int redundant; /* set to the level it already had */
};

struct fake_dev {
	struct virtio_device vdev; /* first: the ops cast back */
	struct virtio_queue vqs[NR_QUEUES];
	uint8_t config[CONFIG_SIZE];
	unsigned int notifies[NR_QUEUES];
	unsigned int resets;
	unsigned int activates;
	int activate_ret;
	bool process; /* queue_notify pops, pushes and interrupts */
	unsigned long chains;
	unsigned int bad_config_access;
	unsigned int bad_iov;

	struct vdrv d; /* RAM, guards, registers; its irq unused */
	struct vq_chain chain;
	struct irq_log irq;
	uint16_t avail_idx[NR_QUEUES]; /* the fake driver's shadows */
};

static struct fake_dev *to_fake(struct virtio_device *vdev)
{
	return (struct fake_dev *)((char *)vdev -
				   offsetof(struct fake_dev, vdev));
}

static void record_irq(void *opaque, unsigned int gsi, int level)
{
	struct irq_log *l = opaque;

	if (level == l->level)
		l->redundant++;
	l->raises += level && !l->level;
	l->level = level;
}

/* ---- the fake device ---------------------------------------------- */

static void fake_config_read(struct virtio_device *vdev, unsigned int offset,
			     void *data, unsigned int len)
{
	struct fake_dev *f = to_fake(vdev);

	if (!len || len > 8 || offset >= CONFIG_SIZE ||
	    len > CONFIG_SIZE - offset) {
		f->bad_config_access++;
		return;
	}
	memcpy(data, f->config + offset, len);
}

static void fake_config_write(struct virtio_device *vdev, unsigned int offset,
			      const void *data, unsigned int len)
{
	struct fake_dev *f = to_fake(vdev);

	if (!len || len > 8 || offset >= CONFIG_SIZE ||
	    len > CONFIG_SIZE - offset) {
		f->bad_config_access++;
		return;
	}
	memcpy(f->config + offset, data, len);
}

static bool iov_in_ram(const struct fake_dev *f, const struct iovec *iov)
{
	const uint8_t *p = iov->iov_base;

	return iov->iov_len && p >= f->d.ram && p < f->d.ram + RAM_SIZE &&
	       iov->iov_len <= (size_t)(f->d.ram + RAM_SIZE - p);
}

/* Serve every available chain, as a device would: pop, push, interrupt. */
static void fake_queue_notify(struct virtio_device *vdev, unsigned int index)
{
	struct fake_dev *f = to_fake(vdev);
	struct virtqueue *q = virtio_device__queue(vdev, index);
	unsigned int i, n, pushed = 0;

	f->notifies[index]++;
	if (!f->process || !q)
		return;
	for (n = 0; n <= QUEUE_MAX; n++) {
		if (virtqueue__pop(q, &f->chain) <= 0)
			break;
		f->chains++;
		for (i = 0; i < f->chain.nr_out + f->chain.nr_in; i++)
			if (!iov_in_ram(f, &f->chain.iov[i]))
				f->bad_iov++;
		if (virtqueue__push(q, f->chain.head,
				    (uint32_t)f->chain.in_len))
			break;
		pushed++;
	}
	if (pushed)
		virtio_device__notify_queue(vdev, index);
}

static void fake_reset(struct virtio_device *vdev)
{
	to_fake(vdev)->resets++;
}

static int fake_activate(struct virtio_device *vdev)
{
	struct fake_dev *f = to_fake(vdev);

	f->activates++;
	return f->activate_ret;
}

static const struct virtio_device_ops fake_ops = {
	.config_read = fake_config_read,
	.config_write = fake_config_write,
	.queue_notify = fake_queue_notify,
	.reset = fake_reset,
	.activate = fake_activate,
};

static void fake_params(struct fake_dev *f, struct virtio_device_params *p)
{
	*p = (struct virtio_device_params){
		.name = "virtio-test0",
		.device_id = VIRTIO_ID_RNG,
		.features = DEV_FEATURES,
		.config_size = CONFIG_SIZE,
		.ops = &fake_ops,
		.queues = f->vqs,
		.nr_queues = NR_QUEUES,
		.queue_max_size = QUEUE_MAX,
		.mem = &f->d.mem,
		.irq = { .set = record_irq, .opaque = &f->irq, .gsi = 5 },
	};
}

static int fake_create(struct fake_dev *f)
{
	struct virtio_device_params p;
	unsigned int i;

	memset(f, 0, sizeof(*f));
	if (vdrv_init(&f->d, RAM_SIZE))
		return -ENOMEM;
	f->d.vdev = &f->vdev;
	for (i = 0; i < CONFIG_SIZE; i++)
		f->config[i] = 0x10 + i;
	fake_params(f, &p);
	return virtio_device__init(&f->vdev, &p);
}

static void fake_destroy(struct fake_dev *f)
{
	virtio_device__exit(&f->vdev);
	vdrv_exit(&f->d);
}

static bool guards_intact(const struct fake_dev *f)
{
	return vdrv_guards_intact(&f->d);
}

/* ---- the fake driver: register accesses ---------------------------- */

static uint32_t rd32(struct fake_dev *f, uint64_t off)
{
	return vdrv_rd32(&f->d, off);
}

static void wr32(struct fake_dev *f, uint64_t off, uint32_t v)
{
	vdrv_wr32(&f->d, off, v);
}

/* A read of len bytes, as a little-endian number (len <= 8). */
static uint64_t rd(struct fake_dev *f, uint64_t off, unsigned int len)
{
	uint8_t buf[8];
	uint64_t v = 0;

	memset(buf, 0xcc, sizeof(buf));
	virtio_mmio__read(&f->vdev, off, buf, len);
	memcpy(&v, buf, len);
	return le64toh(v);
}

static void wr(struct fake_dev *f, uint64_t off, uint64_t v, unsigned int len)
{
	v = htole64(v);
	virtio_mmio__write(&f->vdev, off, &v, len);
}

static uint32_t status(struct fake_dev *f)
{
	return vdrv_status(&f->d);
}

static void add_status(struct fake_dev *f, uint32_t bits)
{
	vdrv_add_status(&f->d, bits);
}

static uint64_t device_features(struct fake_dev *f)
{
	return vdrv_device_features(&f->d);
}

static void write_features(struct fake_dev *f, uint64_t features)
{
	wr32(f, VIRTIO_MMIO_DRIVER_FEATURES_SEL, 1);
	wr32(f, VIRTIO_MMIO_DRIVER_FEATURES, features >> 32);
	wr32(f, VIRTIO_MMIO_DRIVER_FEATURES_SEL, 0);
	wr32(f, VIRTIO_MMIO_DRIVER_FEATURES, (uint32_t)features);
}

/*
 * virtio_dev_probe(): reset, ACKNOWLEDGE, DRIVER, features, FEATURES_OK
 * and the read-back. Returns the status read back.
 */
static uint32_t negotiate(struct fake_dev *f, uint64_t features)
{
	wr32(f, VIRTIO_MMIO_STATUS, 0);
	add_status(f, ST_ACK);
	add_status(f, ST_DRIVER);
	write_features(f, features);
	add_status(f, ST_FEATURES);
	return status(f);
}

/* vm_setup_vq(): select, check, size, addresses, ready. */
static void setup_queue_at(struct fake_dev *f, unsigned int q, uint32_t num,
			   uint64_t desc, uint64_t avail, uint64_t used)
{
	vdrv_setup_queue(&f->d, q, num, desc, avail, used);
}

static void setup_queue(struct fake_dev *f, unsigned int q, uint32_t num)
{
	setup_queue_at(f, q, num, DESC_GPA(q), AVAIL_GPA(q), USED_GPA(q));
}

/* The whole probe: features, both queues of 16, DRIVER_OK. */
static void bring_up(struct fake_dev *f, uint64_t features)
{
	negotiate(f, features);
	setup_queue(f, 0, 16);
	setup_queue(f, 1, 16);
	add_status(f, ST_DRIVER_OK);
}

/* ---- the fake driver: rings --------------------------------------- */

static void put16(struct fake_dev *f, uint64_t gpa, uint16_t v)
{
	vdrv_store16(&f->d, gpa, v);
}

static uint16_t get16(struct fake_dev *f, uint64_t gpa)
{
	return vdrv_load16(&f->d, gpa);
}

/* One writable buffer in descriptor head of queue q, made available. */
static void publish(struct fake_dev *f, unsigned int q, uint16_t head,
		    uint16_t size)
{
	vdrv_put_desc(&f->d, DESC_GPA(q), head, DATA_GPA + head * 0x100, 0x100,
		      VRING_DESC_F_WRITE, 0);
	vdrv_publish(&f->d, AVAIL_GPA(q), size, &f->avail_idx[q], head);
}

static uint16_t used_idx(struct fake_dev *f, unsigned int q)
{
	return get16(f, USED_GPA(q) + 2);
}

FIXTURE(mmio)
{
	struct fake_dev f;
};

FIXTURE_SETUP(mmio)
{
	ASSERT_EQ(0, fake_create(&self->f));
}

FIXTURE_TEARDOWN(mmio)
{
	fake_destroy(&self->f);
}

/* ---- identification ----------------------------------------------- */

TEST_F(mmio, probe_ids)
{
	struct fake_dev *f = &self->f;
	uint8_t b[4];

	/* vm_probe(): "virt", version 2, a device id, the vendor. */
	virtio_mmio__read(&f->vdev, VIRTIO_MMIO_MAGIC_VALUE, b, 4);
	EXPECT_EQ(0, memcmp("virt", b, 4));
	EXPECT_EQ(0x74726976, rd32(f, VIRTIO_MMIO_MAGIC_VALUE));
	EXPECT_EQ(2, rd32(f, VIRTIO_MMIO_VERSION));
	EXPECT_EQ(VIRTIO_ID_RNG, rd32(f, VIRTIO_MMIO_DEVICE_ID));
	EXPECT_EQ(VIRTIO_MMIO_KILN_VENDOR_ID, rd32(f, VIRTIO_MMIO_VENDOR_ID));
	virtio_mmio__read(&f->vdev, VIRTIO_MMIO_VENDOR_ID, b, 4);
	EXPECT_EQ(0, memcmp("KILN", b, 4));
	EXPECT_EQ(0, status(f));
	EXPECT_EQ(0, rd32(f, VIRTIO_MMIO_INTERRUPT_STATUS));
	EXPECT_EQ(0, rd32(f, VIRTIO_MMIO_CONFIG_GENERATION));
	EXPECT_EQ(DEV_FEATURES, device_features(f));
	/* No shared memory regions: length -1. */
	wr32(f, VIRTIO_MMIO_SHM_SEL, 0);
	EXPECT_EQ(0xffffffff, rd32(f, VIRTIO_MMIO_SHM_LEN_LOW));
	EXPECT_EQ(0xffffffff, rd32(f, VIRTIO_MMIO_SHM_LEN_HIGH));
	/* Legacy and write-only registers read 0. */
	EXPECT_EQ(0, rd32(f, VIRTIO_MMIO_QUEUE_PFN));
	EXPECT_EQ(0, rd32(f, VIRTIO_MMIO_GUEST_PAGE_SIZE));
	EXPECT_EQ(0, rd32(f, VIRTIO_MMIO_QUEUE_NUM));
	EXPECT_EQ(0, rd32(f, VIRTIO_MMIO_DEVICE_FEATURES_SEL));
	/* Writes to read-only registers change nothing. */
	wr32(f, VIRTIO_MMIO_MAGIC_VALUE, 0);
	wr32(f, VIRTIO_MMIO_DEVICE_ID, 7);
	EXPECT_EQ(0x74726976, rd32(f, VIRTIO_MMIO_MAGIC_VALUE));
	EXPECT_EQ(VIRTIO_ID_RNG, rd32(f, VIRTIO_MMIO_DEVICE_ID));
	/* Through the MMIO bus handler too. */
	memset(b, 0xcc, sizeof(b));
	virtio_mmio__io(&f->vdev, VIRTIO_MMIO_VERSION, b, 4, false);
	EXPECT_EQ(2, b[0]);
	EXPECT_EQ(0, b[3]);
	b[0] = ST_ACK;
	virtio_mmio__io(&f->vdev, VIRTIO_MMIO_STATUS, b, 4, true);
	EXPECT_EQ(ST_ACK, status(f));
}

TEST(cmdline)
{
	char buf[80];

	EXPECT_EQ(34, virtio_mmio__cmdline(0xd0000000, 0x1000, 5, buf,
					   sizeof(buf)));
	EXPECT_STREQ("virtio_mmio.device=4K@0xd0000000:5", buf);
	EXPECT_LT(0, virtio_mmio__cmdline(0xd0001000, 0x200, 12, buf,
					  sizeof(buf)));
	EXPECT_STREQ("virtio_mmio.device=512@0xd0001000:12", buf);
	EXPECT_LT(0, virtio_mmio__cmdline(0, 0x1800, 0, buf, sizeof(buf)));
	EXPECT_STREQ("virtio_mmio.device=6K@0x0:0", buf);
	EXPECT_LT(0, virtio_mmio__cmdline(1ULL << 32, 2 << 20, 23, buf,
					  sizeof(buf)));
	EXPECT_STREQ("virtio_mmio.device=2M@0x100000000:23", buf);
	EXPECT_LT(0, virtio_mmio__cmdline(0, 1ULL << 40, 1, buf, sizeof(buf)));
	EXPECT_STREQ("virtio_mmio.device=1024G@0x0:1", buf);

	/* Exactly the room it needs, then one byte less. */
	EXPECT_EQ(34, virtio_mmio__cmdline(0xd0000000, 0x1000, 5, buf, 35));
	EXPECT_EQ(-ENOSPC,
		  virtio_mmio__cmdline(0xd0000000, 0x1000, 5, buf, 34));
	EXPECT_STREQ("", buf);
	EXPECT_EQ(-ENOSPC, virtio_mmio__cmdline(0xd0000000, 0x1000, 5, buf, 0));
	EXPECT_EQ(-EINVAL, virtio_mmio__cmdline(0xd0000000, 0, 5, buf, 80));
	EXPECT_EQ(-EINVAL,
		  virtio_mmio__cmdline(UINT64_MAX - 0xfff, 0x2000, 5, buf, 80));
	EXPECT_LT(0,
		  virtio_mmio__cmdline(UINT64_MAX - 0xfff, 0x1000, 5, buf, 80));
}

TEST(init_rejects)
{
	static struct fake_dev f;
	struct virtio_device_params p;
	struct virtio_device_ops no_notify = fake_ops;

	ASSERT_EQ(0, fake_create(&f));
	virtio_device__exit(&f.vdev);

#define EXPECT_INIT_FAILS(field, value)                              \
	do {                                                         \
		fake_params(&f, &p);                                 \
		p.field = value;                                     \
		EXPECT_EQ(-EINVAL, virtio_device__init(&f.vdev, &p)) \
		TH_LOG("%s", #field " = " #value);                   \
		virtio_device__exit(&f.vdev);                        \
	} while (0)

	EXPECT_INIT_FAILS(features, DEV_FEATURES & ~FEAT(VIRTIO_F_VERSION_1));
	EXPECT_INIT_FAILS(features,
			  DEV_FEATURES | FEAT(VIRTIO_F_ACCESS_PLATFORM));
	EXPECT_INIT_FAILS(features, DEV_FEATURES | FEAT(VIRTIO_F_RING_PACKED));
	EXPECT_INIT_FAILS(features, DEV_FEATURES | FEAT(38));
	EXPECT_INIT_FAILS(features, DEV_FEATURES | FEAT(VIRTIO_F_ANY_LAYOUT));
	EXPECT_INIT_FAILS(config_size, VIRTIO_CONFIG_MAX_SIZE + 1);
	EXPECT_INIT_FAILS(queue_max_size, 48);
	EXPECT_INIT_FAILS(queue_max_size, 0);
	EXPECT_INIT_FAILS(nr_queues, 0);
	EXPECT_INIT_FAILS(queues, NULL);
	EXPECT_INIT_FAILS(mem, NULL);
	EXPECT_INIT_FAILS(ops, NULL);
	no_notify.queue_notify = NULL;
	EXPECT_INIT_FAILS(ops, &no_notify);
#undef EXPECT_INIT_FAILS

	/* Device-specific bits above 41 and below 24 are the device's. */
	fake_params(&f, &p);
	p.features = FEAT(VIRTIO_F_VERSION_1) | FEAT(0) | FEAT(23) | FEAT(63);
	EXPECT_EQ(0, virtio_device__init(&f.vdev, &p));
	EXPECT_EQ(-EINVAL, virtio_device__set_queue_max(&f.vdev, 0, 128));
	EXPECT_EQ(-EINVAL, virtio_device__set_queue_max(&f.vdev, 0, 12));
	EXPECT_EQ(-EINVAL, virtio_device__set_queue_max(&f.vdev, 2, 8));
	EXPECT_EQ(0, virtio_device__set_queue_max(&f.vdev, 1, 8));
	wr32(&f, VIRTIO_MMIO_QUEUE_SEL, 1);
	EXPECT_EQ(8, rd32(&f, VIRTIO_MMIO_QUEUE_NUM_MAX));
	wr32(&f, VIRTIO_MMIO_QUEUE_SEL, 0);
	EXPECT_EQ(QUEUE_MAX, rd32(&f, VIRTIO_MMIO_QUEUE_NUM_MAX));
	fake_destroy(&f);
}

/* ---- features ----------------------------------------------------- */

TEST_F(mmio, features_negotiated)
{
	struct fake_dev *f = &self->f;
	uint64_t want = FEAT(VIRTIO_F_VERSION_1) |
			FEAT(VIRTIO_RING_F_EVENT_IDX) | FEAT(3);

	/* Selectors other than 0 and 1 read 0. */
	wr32(f, VIRTIO_MMIO_DEVICE_FEATURES_SEL, 2);
	EXPECT_EQ(0, rd32(f, VIRTIO_MMIO_DEVICE_FEATURES));
	wr32(f, VIRTIO_MMIO_DEVICE_FEATURES_SEL, 0xffffffff);
	EXPECT_EQ(0, rd32(f, VIRTIO_MMIO_DEVICE_FEATURES));

	EXPECT_EQ(ST_ACK | ST_DRIVER | ST_FEATURES, negotiate(f, want));
	EXPECT_TRUE(virtio_device__has_feature(&f->vdev, VIRTIO_F_VERSION_1));
	EXPECT_TRUE(virtio_device__has_feature(&f->vdev, 3));
	EXPECT_FALSE(virtio_device__has_feature(&f->vdev, 50));
	EXPECT_FALSE(virtio_device__has_feature(&f->vdev,
						VIRTIO_RING_F_INDIRECT_DESC));
	EXPECT_FALSE(virtio_device__has_feature(&f->vdev, 64));
	EXPECT_FALSE(virtio_device__has_feature(&f->vdev, UINT32_MAX));

	/* Frozen after FEATURES_OK. */
	write_features(f, DEV_FEATURES);
	EXPECT_FALSE(virtio_device__has_feature(&f->vdev, 50));
	EXPECT_EQ(want, f->vdev.features);
}

TEST_F(mmio, features_unknown_refused)
{
	struct fake_dev *f = &self->f;

	/* Bit 4 was never offered: "virtio: device refuses features". */
	EXPECT_EQ(ST_ACK | ST_DRIVER,
		  negotiate(f, FEAT(VIRTIO_F_VERSION_1) | FEAT(4)));
	EXPECT_EQ(0, f->vdev.features);
	EXPECT_FALSE(virtio_device__has_feature(&f->vdev, VIRTIO_F_VERSION_1));
	/* Nor DRIVER_OK after the refusal. */
	add_status(f, ST_DRIVER_OK);
	EXPECT_EQ(ST_ACK | ST_DRIVER, status(f));
	EXPECT_EQ(0, f->activates);

	/* A selector past 1 writes nothing. */
	wr32(f, VIRTIO_MMIO_STATUS, 0);
	add_status(f, ST_ACK | ST_DRIVER);
	write_features(f, FEAT(VIRTIO_F_VERSION_1));
	wr32(f, VIRTIO_MMIO_DRIVER_FEATURES_SEL, 2);
	wr32(f, VIRTIO_MMIO_DRIVER_FEATURES, 0xffffffff);
	add_status(f, ST_FEATURES);
	EXPECT_EQ(ST_ACK | ST_DRIVER | ST_FEATURES, status(f));
	EXPECT_EQ(FEAT(VIRTIO_F_VERSION_1), f->vdev.features);

	/* High-word unknown bits too. */
	EXPECT_EQ(ST_ACK | ST_DRIVER,
		  negotiate(f, FEAT(VIRTIO_F_VERSION_1) | FEAT(40)));
}

TEST_F(mmio, features_legacy_refused)
{
	struct fake_dev *f = &self->f;

	EXPECT_EQ(ST_ACK | ST_DRIVER, negotiate(f, FEAT(3)));
	EXPECT_EQ(ST_ACK | ST_DRIVER, negotiate(f, 0));
	/* After a reset the same device accepts a good set. */
	EXPECT_EQ(ST_ACK | ST_DRIVER | ST_FEATURES,
		  negotiate(f, FEAT(VIRTIO_F_VERSION_1) | FEAT(3)));
}

/* ---- status ------------------------------------------------------- */

TEST_F(mmio, status_order)
{
	struct fake_dev *f = &self->f;

	/* Out of order: ignored. */
	wr32(f, VIRTIO_MMIO_STATUS, ST_DRIVER);
	EXPECT_EQ(0, status(f));
	wr32(f, VIRTIO_MMIO_STATUS, ST_DRIVER_OK);
	EXPECT_EQ(0, status(f));
	/* Several at once, in order, are fine; stops at the first gap. */
	wr32(f, VIRTIO_MMIO_STATUS, ST_ACK | ST_DRIVER | ST_DRIVER_OK);
	EXPECT_EQ(ST_ACK | ST_DRIVER, status(f));
	EXPECT_EQ(0, f->activates);
	/* Clearing bits is not a thing (only a reset is). */
	wr32(f, VIRTIO_MMIO_STATUS, ST_ACK);
	EXPECT_EQ(ST_ACK | ST_DRIVER, status(f));
	/* Unknown bits, or a device bit, or anything above a byte. */
	wr32(f, VIRTIO_MMIO_STATUS, ST_ACK | ST_DRIVER | 0x10);
	EXPECT_EQ(ST_ACK | ST_DRIVER, status(f));
	wr32(f, VIRTIO_MMIO_STATUS, 0x100 | ST_ACK | ST_DRIVER);
	EXPECT_EQ(ST_ACK | ST_DRIVER, status(f));
	wr32(f, VIRTIO_MMIO_STATUS, ST_NEEDS_RST | ST_ACK | ST_DRIVER);
	EXPECT_EQ(ST_ACK | ST_DRIVER, status(f));

	write_features(f, FEAT(VIRTIO_F_VERSION_1));
	add_status(f, ST_FEATURES | ST_DRIVER_OK);
	EXPECT_EQ(ST_ACK | ST_DRIVER | ST_FEATURES | ST_DRIVER_OK, status(f));
	EXPECT_EQ(1, f->activates);
	/* Rewriting the same status changes nothing, activates once. */
	add_status(f, 0);
	EXPECT_EQ(1, f->activates);
}

TEST_F(mmio, status_failed)
{
	struct fake_dev *f = &self->f;

	add_status(f, ST_ACK);
	add_status(f, ST_FAILED);
	EXPECT_EQ(ST_ACK | ST_FAILED, status(f));
	/* The driver gave up: nothing but a reset is heard. */
	add_status(f, ST_DRIVER);
	EXPECT_EQ(ST_ACK | ST_FAILED, status(f));
	write_features(f, FEAT(VIRTIO_F_VERSION_1));
	wr32(f, VIRTIO_MMIO_STATUS, ST_ACK | ST_DRIVER | ST_FEATURES);
	EXPECT_EQ(ST_ACK | ST_FAILED, status(f));
	wr32(f, VIRTIO_MMIO_STATUS, 0);
	EXPECT_EQ(0, status(f));
	EXPECT_EQ(1, f->resets);
	EXPECT_EQ(ST_ACK | ST_DRIVER | ST_FEATURES,
		  negotiate(f, FEAT(VIRTIO_F_VERSION_1)));
}

TEST_F(mmio, activate_failure_needs_reset)
{
	struct fake_dev *f = &self->f;

	f->activate_ret = -ENOMEM;
	bring_up(f, FEAT(VIRTIO_F_VERSION_1));
	EXPECT_EQ(1, f->activates);
	EXPECT_EQ(ST_ACK | ST_DRIVER | ST_FEATURES | ST_DRIVER_OK |
			  ST_NEEDS_RST,
		  status(f));
	EXPECT_EQ(VIRTIO_MMIO_INT_CONFIG,
		  rd32(f, VIRTIO_MMIO_INTERRUPT_STATUS));
	EXPECT_EQ(1, f->irq.level);
	/* A device that needs a reset takes no kicks. */
	wr32(f, VIRTIO_MMIO_QUEUE_NOTIFY, 0);
	EXPECT_EQ(0, f->notifies[0]);
	/* NEEDS_RESET is the device's: the driver's writes keep it. */
	wr32(f, VIRTIO_MMIO_STATUS, status(f) & ~ST_NEEDS_RST);
	EXPECT_TRUE(status(f) & ST_NEEDS_RST);
	wr32(f, VIRTIO_MMIO_STATUS, 0);
	EXPECT_EQ(0, status(f));
	EXPECT_EQ(0, f->irq.level);
}

/* ---- queues ------------------------------------------------------- */

TEST_F(mmio, queue_setup)
{
	struct fake_dev *f = &self->f;
	struct virtqueue *q0 = virtio_device__queue(&f->vdev, 0);
	struct virtqueue *q1 = virtio_device__queue(&f->vdev, 1);

	ASSERT_TRUE(q0 && q1);
	EXPECT_TRUE(virtio_device__queue(&f->vdev, 2) == NULL);
	negotiate(f, FEAT(VIRTIO_F_VERSION_1) | FEAT(VIRTIO_RING_F_EVENT_IDX));

	wr32(f, VIRTIO_MMIO_QUEUE_SEL, 0);
	EXPECT_EQ(0, rd32(f, VIRTIO_MMIO_QUEUE_READY));
	EXPECT_EQ(QUEUE_MAX, rd32(f, VIRTIO_MMIO_QUEUE_NUM_MAX));
	setup_queue(f, 0, 16);
	EXPECT_EQ(1, rd32(f, VIRTIO_MMIO_QUEUE_READY));
	EXPECT_TRUE(virtqueue__is_ready(q0));
	EXPECT_EQ(16, q0->size);
	EXPECT_EQ(DESC_GPA(0), q0->desc_gpa);
	EXPECT_EQ(AVAIL_GPA(0), q0->avail_gpa);
	EXPECT_EQ(USED_GPA(0), q0->used_gpa);
	EXPECT_TRUE(q0->event_idx);
	EXPECT_FALSE(virtqueue__is_ready(q1));

	/* 64-bit addresses, the full queue size. */
	setup_queue_at(f, 1, QUEUE_MAX, DESC_GPA(1), AVAIL_GPA(1), USED_GPA(1));
	EXPECT_TRUE(virtqueue__is_ready(q1));
	EXPECT_EQ(QUEUE_MAX, q1->size);

	/* While ready, size and addresses do not move. */
	wr32(f, VIRTIO_MMIO_QUEUE_SEL, 0);
	wr32(f, VIRTIO_MMIO_QUEUE_NUM, 8);
	wr32(f, VIRTIO_MMIO_QUEUE_DESC_LOW, 0x100);
	wr32(f, VIRTIO_MMIO_QUEUE_DESC_HIGH, 1);
	wr32(f, VIRTIO_MMIO_QUEUE_AVAIL_LOW, 0x200);
	wr32(f, VIRTIO_MMIO_QUEUE_USED_LOW, 0x300);
	wr32(f, VIRTIO_MMIO_QUEUE_READY, 1);
	EXPECT_EQ(16, q0->size);
	EXPECT_EQ(DESC_GPA(0), q0->desc_gpa);
	EXPECT_EQ(16, f->vqs[0].size);
	EXPECT_EQ(DESC_GPA(0), f->vqs[0].desc_gpa);
	EXPECT_EQ(AVAIL_GPA(0), f->vqs[0].driver_gpa);
	EXPECT_EQ(USED_GPA(0), f->vqs[0].device_gpa);

	/* Ready 0 takes the queue back (vm_del_vq checks it reads 0). */
	wr32(f, VIRTIO_MMIO_QUEUE_READY, 0);
	EXPECT_EQ(0, rd32(f, VIRTIO_MMIO_QUEUE_READY));
	EXPECT_FALSE(virtqueue__is_ready(q0));
	EXPECT_TRUE(virtqueue__is_ready(q1));
	/* And it can be set up again, with another size. */
	setup_queue(f, 0, 32);
	EXPECT_EQ(32, q0->size);
	EXPECT_EQ(0, status(f) & ST_NEEDS_RST);
	EXPECT_TRUE(guards_intact(f));
}

TEST_F(mmio, queue_ready_needs_features_ok)
{
	struct fake_dev *f = &self->f;

	add_status(f, ST_ACK);
	add_status(f, ST_DRIVER);
	setup_queue(f, 0, 16);
	EXPECT_EQ(0, rd32(f, VIRTIO_MMIO_QUEUE_READY));
	EXPECT_EQ(0, status(f) & ST_NEEDS_RST);
	/* A Ready value other than 0 and 1 does nothing either. */
	write_features(f, FEAT(VIRTIO_F_VERSION_1));
	add_status(f, ST_FEATURES);
	wr32(f, VIRTIO_MMIO_QUEUE_READY, 2);
	EXPECT_EQ(0, rd32(f, VIRTIO_MMIO_QUEUE_READY));
	wr32(f, VIRTIO_MMIO_QUEUE_READY, 1);
	EXPECT_EQ(1, rd32(f, VIRTIO_MMIO_QUEUE_READY));
	/* Without EVENT_IDX negotiated, the ring has none. */
	EXPECT_FALSE(f->vqs[0].vq.event_idx);
}

static void expect_needs_reset(struct __test_metadata *_metadata,
			       struct fake_dev *f, unsigned int q)
{
	wr32(f, VIRTIO_MMIO_QUEUE_SEL, q);
	EXPECT_EQ(0, rd32(f, VIRTIO_MMIO_QUEUE_READY));
	EXPECT_TRUE(status(f) & ST_NEEDS_RST);
	EXPECT_TRUE(rd32(f, VIRTIO_MMIO_INTERRUPT_STATUS) &
		    VIRTIO_MMIO_INT_CONFIG);
	EXPECT_EQ(1, f->irq.level);
	EXPECT_TRUE(guards_intact(f));
}

TEST_F(mmio, queue_outside_memory_needs_reset)
{
	struct fake_dev *f = &self->f;

	negotiate(f, FEAT(VIRTIO_F_VERSION_1));
	setup_queue_at(f, 1, 16, RAM_SIZE - 64, AVAIL_GPA(1), USED_GPA(1));
	expect_needs_reset(_metadata, f, 1);
	/* The other queue is still usable... but the device is not live. */
	setup_queue(f, 0, 16);
	EXPECT_EQ(1, rd32(f, VIRTIO_MMIO_QUEUE_READY));
	add_status(f, ST_DRIVER_OK);
	wr32(f, VIRTIO_MMIO_QUEUE_NOTIFY, 0);
	EXPECT_EQ(0, f->notifies[0]);

	/* The reset repairs it. */
	negotiate(f, FEAT(VIRTIO_F_VERSION_1));
	EXPECT_EQ(0, status(f) & ST_NEEDS_RST);
	EXPECT_EQ(0, f->irq.level);
	setup_queue(f, 1, 16);
	EXPECT_EQ(1, rd32(f, VIRTIO_MMIO_QUEUE_READY));
}

TEST_F(mmio, queue_bad_setups_need_reset)
{
	struct fake_dev *f = &self->f;
	static const uint32_t sizes[] = { 0,	   3,	      48, QUEUE_MAX * 2,
					  0x10000, 0x80000000 };
	unsigned int i;

	for (i = 0; i < ARRAY_SIZE(sizes); i++) {
		negotiate(f, FEAT(VIRTIO_F_VERSION_1));
		setup_queue(f, 0, sizes[i]);
		expect_needs_reset(_metadata, f, 0);
	}
	/* Misaligned, wrapping, above 4 GiB. */
	negotiate(f, FEAT(VIRTIO_F_VERSION_1));
	setup_queue_at(f, 0, 16, DESC_GPA(0) + 8, AVAIL_GPA(0), USED_GPA(0));
	expect_needs_reset(_metadata, f, 0);
	negotiate(f, FEAT(VIRTIO_F_VERSION_1));
	setup_queue_at(f, 0, 16, UINT64_MAX - 15, AVAIL_GPA(0), USED_GPA(0));
	expect_needs_reset(_metadata, f, 0);
	negotiate(f, FEAT(VIRTIO_F_VERSION_1));
	setup_queue_at(f, 0, 16, DESC_GPA(0) | (1ULL << 32), AVAIL_GPA(0),
		       USED_GPA(0));
	expect_needs_reset(_metadata, f, 0);
}

TEST_F(mmio, queue_sel_out_of_range)
{
	struct fake_dev *f = &self->f;
	static const uint32_t sels[] = { NR_QUEUES, 255, 0x10000, 0xffffffff };
	unsigned int i;

	negotiate(f, FEAT(VIRTIO_F_VERSION_1));
	for (i = 0; i < ARRAY_SIZE(sels); i++) {
		wr32(f, VIRTIO_MMIO_QUEUE_SEL, sels[i]);
		EXPECT_EQ(0, rd32(f, VIRTIO_MMIO_QUEUE_NUM_MAX));
		EXPECT_EQ(0, rd32(f, VIRTIO_MMIO_QUEUE_READY));
		setup_queue_at(f, sels[i], 16, DESC_GPA(0), AVAIL_GPA(0),
			       USED_GPA(0));
		EXPECT_EQ(0, rd32(f, VIRTIO_MMIO_QUEUE_READY));
	}
	/* Nothing leaked into the real queues, nothing needs a reset. */
	EXPECT_EQ(0, status(f) & ST_NEEDS_RST);
	EXPECT_FALSE(virtqueue__is_ready(&f->vqs[0].vq));
	EXPECT_FALSE(virtqueue__is_ready(&f->vqs[1].vq));
	EXPECT_EQ(QUEUE_MAX, f->vqs[0].size);
	EXPECT_EQ(0, f->vqs[0].desc_gpa);
	EXPECT_EQ(0, f->vqs[1].desc_gpa);
}

/* ---- notifications and interrupts ---------------------------------- */

TEST_F(mmio, notify_reaches_device)
{
	struct fake_dev *f = &self->f;

	negotiate(f, FEAT(VIRTIO_F_VERSION_1));
	setup_queue(f, 1, 16);
	/* Before DRIVER_OK a kick is dropped... */
	wr32(f, VIRTIO_MMIO_QUEUE_NOTIFY, 1);
	EXPECT_EQ(0, f->notifies[1]);
	/* ...and made up for at activation, for ready queues only. */
	add_status(f, ST_DRIVER_OK);
	EXPECT_EQ(1, f->activates);
	EXPECT_EQ(1, f->notifies[1]);
	EXPECT_EQ(0, f->notifies[0]);

	wr32(f, VIRTIO_MMIO_QUEUE_NOTIFY, 1);
	EXPECT_EQ(2, f->notifies[1]);
	/* Queue 0 is not ready; garbage indexes go nowhere. */
	wr32(f, VIRTIO_MMIO_QUEUE_NOTIFY, 0);
	wr32(f, VIRTIO_MMIO_QUEUE_NOTIFY, 2);
	wr32(f, VIRTIO_MMIO_QUEUE_NOTIFY, 0x10001);
	wr32(f, VIRTIO_MMIO_QUEUE_NOTIFY, 0xffffffff);
	EXPECT_EQ(0, f->notifies[0]);
	EXPECT_EQ(2, f->notifies[1]);
	/* The ioeventfd path. */
	virtio_device__queue_notify(&f->vdev, 1);
	virtio_device__queue_notify(&f->vdev, 7);
	virtio_device__queue_notify(&f->vdev, UINT32_MAX);
	EXPECT_EQ(3, f->notifies[1]);
}

TEST_F(mmio, used_buffer_interrupt)
{
	struct fake_dev *f = &self->f;

	f->process = true;
	bring_up(f, FEAT(VIRTIO_F_VERSION_1));
	EXPECT_EQ(0, f->irq.level);

	publish(f, 0, 3, 16);
	publish(f, 0, 5, 16);
	wr32(f, VIRTIO_MMIO_QUEUE_NOTIFY, 0);
	EXPECT_EQ(2, f->chains);
	EXPECT_EQ(2, used_idx(f, 0));
	EXPECT_EQ(3, get16(f, USED_GPA(0) + 4));
	EXPECT_EQ(VIRTIO_MMIO_INT_VRING, rd32(f, VIRTIO_MMIO_INTERRUPT_STATUS));
	EXPECT_EQ(1, f->irq.level);
	EXPECT_EQ(1, f->irq.raises);

	/* vm_interrupt(): read the status, acknowledge it. */
	wr32(f, VIRTIO_MMIO_INTERRUPT_ACK,
	     rd32(f, VIRTIO_MMIO_INTERRUPT_STATUS));
	EXPECT_EQ(0, rd32(f, VIRTIO_MMIO_INTERRUPT_STATUS));
	EXPECT_EQ(0, f->irq.level);

	/* The driver asks for no interrupts: the buffer comes back quietly. */
	put16(f, AVAIL_GPA(1), VRING_AVAIL_F_NO_INTERRUPT);
	publish(f, 1, 0, 16);
	wr32(f, VIRTIO_MMIO_QUEUE_NOTIFY, 1);
	EXPECT_EQ(1, used_idx(f, 1));
	EXPECT_EQ(0, rd32(f, VIRTIO_MMIO_INTERRUPT_STATUS));
	EXPECT_EQ(0, f->irq.level);
	EXPECT_EQ(0, f->irq.redundant);
	EXPECT_EQ(0, f->bad_iov);
	EXPECT_TRUE(guards_intact(f));
}

TEST_F(mmio, broken_ring_needs_reset)
{
	struct fake_dev *f = &self->f;

	f->process = true;
	bring_up(f, FEAT(VIRTIO_F_VERSION_1));
	/* avail->idx 40 ahead on a 16-entry ring: a hostile driver. */
	put16(f, AVAIL_GPA(0) + 2, 40);
	wr32(f, VIRTIO_MMIO_QUEUE_NOTIFY, 0);
	EXPECT_TRUE(virtqueue__is_broken(&f->vqs[0].vq));
	EXPECT_TRUE(status(f) & ST_NEEDS_RST);
	EXPECT_EQ(VIRTIO_MMIO_INT_CONFIG,
		  rd32(f, VIRTIO_MMIO_INTERRUPT_STATUS));
	EXPECT_EQ(1, f->irq.level);
	EXPECT_EQ(0, used_idx(f, 0));
	/* No more kicks reach the device until the reset. */
	wr32(f, VIRTIO_MMIO_QUEUE_NOTIFY, 1);
	EXPECT_EQ(1, f->notifies[1]); /* activation's */
	EXPECT_TRUE(guards_intact(f));

	/* A device may say so itself; never after a reset. */
	wr32(f, VIRTIO_MMIO_STATUS, 0);
	virtio_device__lock(&f->vdev);
	virtio_device__set_needs_reset(&f->vdev);
	virtio_device__unlock(&f->vdev);
	EXPECT_EQ(0, status(f));
	EXPECT_EQ(0, f->irq.level);
	put16(f, AVAIL_GPA(0) + 2, 0); /* the driver zeroes its rings */
	bring_up(f, FEAT(VIRTIO_F_VERSION_1));
	EXPECT_FALSE(virtqueue__is_broken(&f->vqs[0].vq));
	EXPECT_EQ(0, status(f) & ST_NEEDS_RST);
	virtio_device__lock(&f->vdev);
	virtio_device__set_needs_reset(&f->vdev);
	virtio_device__unlock(&f->vdev);
	EXPECT_TRUE(status(f) & ST_NEEDS_RST);
	EXPECT_EQ(1, f->irq.level);
}

TEST_F(mmio, interrupt_ack_partial)
{
	struct fake_dev *f = &self->f;

	f->process = true;
	bring_up(f, FEAT(VIRTIO_F_VERSION_1));
	publish(f, 0, 1, 16);
	wr32(f, VIRTIO_MMIO_QUEUE_NOTIFY, 0);
	virtio_device__notify_config(&f->vdev);
	EXPECT_EQ(VIRTIO_MMIO_INT_VRING | VIRTIO_MMIO_INT_CONFIG,
		  rd32(f, VIRTIO_MMIO_INTERRUPT_STATUS));
	EXPECT_EQ(1, f->irq.raises);

	wr32(f, VIRTIO_MMIO_INTERRUPT_ACK, VIRTIO_MMIO_INT_VRING);
	EXPECT_EQ(VIRTIO_MMIO_INT_CONFIG,
		  rd32(f, VIRTIO_MMIO_INTERRUPT_STATUS));
	EXPECT_EQ(1, f->irq.level);
	/* Acking what is not pending changes nothing. */
	wr32(f, VIRTIO_MMIO_INTERRUPT_ACK, 0xfffffffc);
	EXPECT_EQ(1, f->irq.level);
	wr32(f, VIRTIO_MMIO_INTERRUPT_ACK, VIRTIO_MMIO_INT_CONFIG);
	EXPECT_EQ(0, rd32(f, VIRTIO_MMIO_INTERRUPT_STATUS));
	EXPECT_EQ(0, f->irq.level);
	wr32(f, VIRTIO_MMIO_INTERRUPT_ACK, 0xffffffff);
	EXPECT_EQ(0, f->irq.redundant);
}

TEST_F(mmio, no_queue_interrupt_before_driver_ok)
{
	struct fake_dev *f = &self->f;

	negotiate(f, FEAT(VIRTIO_F_VERSION_1));
	setup_queue(f, 0, 16);
	EXPECT_FALSE(virtio_device__notify_queue(&f->vdev, 0));
	EXPECT_FALSE(virtio_device__notify_queue(&f->vdev, 2));
	EXPECT_EQ(0, f->irq.level);
	add_status(f, ST_DRIVER_OK);
	EXPECT_TRUE(virtio_device__notify_queue(&f->vdev, 0));
	EXPECT_EQ(1, f->irq.level);
	EXPECT_FALSE(virtio_device__notify_queue(&f->vdev, 1));
}

TEST_F(mmio, reset_clears_everything)
{
	struct fake_dev *f = &self->f;
	unsigned int i;

	f->process = true;
	bring_up(f, FEAT(VIRTIO_F_VERSION_1) | FEAT(VIRTIO_RING_F_EVENT_IDX));
	publish(f, 0, 2, 16);
	wr32(f, VIRTIO_MMIO_QUEUE_NOTIFY, 0);
	virtio_device__notify_config(&f->vdev);
	wr32(f, VIRTIO_MMIO_DEVICE_FEATURES_SEL, 1);
	wr32(f, VIRTIO_MMIO_QUEUE_SEL, 1);
	ASSERT_EQ(1, f->irq.level);

	wr32(f, VIRTIO_MMIO_STATUS, 0);
	EXPECT_EQ(2, f->resets); /* bring_up's own, then ours */
	EXPECT_EQ(0, status(f));
	EXPECT_EQ(0, rd32(f, VIRTIO_MMIO_INTERRUPT_STATUS));
	EXPECT_EQ(0, f->irq.level);
	EXPECT_EQ(0, f->vdev.features);
	EXPECT_EQ(0, f->vdev.driver_features);
	EXPECT_FALSE(
		virtio_device__has_feature(&f->vdev, VIRTIO_RING_F_EVENT_IDX));
	/* Selectors back to 0: queue 0, feature word 0. */
	EXPECT_EQ(QUEUE_MAX, rd32(f, VIRTIO_MMIO_QUEUE_NUM_MAX));
	EXPECT_EQ((uint32_t)DEV_FEATURES, rd32(f, VIRTIO_MMIO_DEVICE_FEATURES));
	for (i = 0; i < NR_QUEUES; i++) {
		wr32(f, VIRTIO_MMIO_QUEUE_SEL, i);
		EXPECT_EQ(0, rd32(f, VIRTIO_MMIO_QUEUE_READY));
		EXPECT_FALSE(virtqueue__is_ready(&f->vqs[i].vq));
		EXPECT_EQ(QUEUE_MAX, f->vqs[i].size);
		EXPECT_EQ(0, f->vqs[i].desc_gpa);
		EXPECT_EQ(0, f->vqs[i].driver_gpa);
		EXPECT_EQ(0, f->vqs[i].device_gpa);
	}
	/* The generation never goes back. */
	EXPECT_EQ(1, rd32(f, VIRTIO_MMIO_CONFIG_GENERATION));
	/* Kicks and interrupts are off until the driver is back. */
	wr32(f, VIRTIO_MMIO_QUEUE_NOTIFY, 0);
	EXPECT_EQ(2, f->notifies[0]); /* activation's kick, then ours */
	EXPECT_FALSE(virtio_device__notify_queue(&f->vdev, 0));

	/* And the device comes up again from scratch. */
	memset(f->d.ram + DESC_GPA(0), 0, 0x10000);
	f->avail_idx[0] = 0;
	bring_up(f, FEAT(VIRTIO_F_VERSION_1));
	publish(f, 0, 4, 16);
	wr32(f, VIRTIO_MMIO_QUEUE_NOTIFY, 0);
	EXPECT_EQ(1, used_idx(f, 0));
	EXPECT_EQ(1, f->irq.level);
	EXPECT_EQ(3, f->resets);
}

/* ---- access widths and the config space ---------------------------- */

TEST_F(mmio, wrong_width_ignored)
{
	struct fake_dev *f = &self->f;
	static const unsigned int widths[] = { 0, 1, 2, 3, 8 };
	unsigned int i;
	uint8_t big[16];

	for (i = 0; i < ARRAY_SIZE(widths); i++) {
		unsigned int w = widths[i];

		if (w <= 8) {
			EXPECT_EQ(0, rd(f, VIRTIO_MMIO_MAGIC_VALUE, w))
			TH_LOG("width %u", w);
			EXPECT_EQ(0, rd(f, VIRTIO_MMIO_VERSION, w));
		}
		wr(f, VIRTIO_MMIO_STATUS, ST_ACK, w);
		EXPECT_EQ(0, status(f));
	}
	/* Misaligned 32-bit accesses. */
	EXPECT_EQ(0, rd(f, VIRTIO_MMIO_MAGIC_VALUE + 1, 4));
	EXPECT_EQ(0, rd(f, VIRTIO_MMIO_VERSION + 2, 4));
	wr(f, VIRTIO_MMIO_STATUS + 1, ST_ACK, 4);
	wr(f, VIRTIO_MMIO_STATUS - 2, (uint64_t)ST_ACK << 16, 4);
	EXPECT_EQ(0, status(f));
	/* A 16-byte read (no such thing from KVM) is zeros too. */
	memset(big, 0xcc, sizeof(big));
	virtio_mmio__read(&f->vdev, 0, big, sizeof(big));
	for (i = 0; i < sizeof(big); i++)
		EXPECT_EQ(0, big[i]);
	/* The device still works. */
	EXPECT_EQ(ST_ACK | ST_DRIVER | ST_FEATURES,
		  negotiate(f, FEAT(VIRTIO_F_VERSION_1)));
}

TEST_F(mmio, config_widths)
{
	struct fake_dev *f = &self->f;
	uint64_t cfg = VIRTIO_MMIO_CONFIG;

	/* config[i] = 0x10 + i, little-endian. */
	EXPECT_EQ(0x10, rd(f, cfg, 1));
	EXPECT_EQ(0x1b, rd(f, cfg + 11, 1));
	EXPECT_EQ(0x1312, rd(f, cfg + 2, 2));
	EXPECT_EQ(0x17161514, rd(f, cfg + 4, 4));
	EXPECT_EQ(0x1716151413121110ULL, rd(f, cfg, 8));
	/* Running past the end: the rest reads 0. */
	EXPECT_EQ(0x1b1a1918, rd(f, cfg + 8, 8));
	EXPECT_EQ(0, rd(f, cfg + 12, 4));
	EXPECT_EQ(0, rd(f, cfg + 16, 8));
	EXPECT_EQ(0, rd(f, cfg + 0xefc, 4));
	EXPECT_EQ(0, rd(f, VIRTIO_MMIO_WINDOW_SIZE, 4));
	EXPECT_EQ(0, rd(f, UINT64_MAX - 3, 4));
	EXPECT_EQ(0, rd(f, UINT64_MAX, 1));
	/* Misaligned or odd widths. */
	EXPECT_EQ(0, rd(f, cfg + 1, 2));
	EXPECT_EQ(0, rd(f, cfg + 2, 4));
	EXPECT_EQ(0, rd(f, cfg + 4, 8));
	EXPECT_EQ(0, rd(f, cfg, 3));
	EXPECT_EQ(0, rd(f, cfg, 0));

	/* Writes: whole fields inside the config space only. */
	wr(f, cfg + 4, 0xa1a2a3a4, 4);
	EXPECT_EQ(0xa1a2a3a4, rd(f, cfg + 4, 4));
	wr(f, cfg + 1, 0xee, 1);
	EXPECT_EQ(0xee, f->config[1]);
	wr(f, cfg + 8, 0xffffffffffffffffULL, 8); /* runs past the end */
	wr(f, cfg + 2, 0xffff, 4);		  /* misaligned */
	wr(f, cfg + 12, 0xff, 1);
	EXPECT_EQ(0x1b1a1918, rd(f, cfg + 8, 4));
	EXPECT_EQ(0x13, f->config[3]);
	EXPECT_EQ(0, f->bad_config_access);
}

TEST_F(mmio, config_generation)
{
	struct fake_dev *f = &self->f;
	uint32_t gen;

	bring_up(f, FEAT(VIRTIO_F_VERSION_1));
	gen = rd32(f, VIRTIO_MMIO_CONFIG_GENERATION);
	f->config[0] = 0x42;
	virtio_device__notify_config(&f->vdev);
	EXPECT_EQ(gen + 1, rd32(f, VIRTIO_MMIO_CONFIG_GENERATION));
	EXPECT_EQ(VIRTIO_MMIO_INT_CONFIG,
		  rd32(f, VIRTIO_MMIO_INTERRUPT_STATUS));
	EXPECT_EQ(1, f->irq.level);
	EXPECT_EQ(0x42, rd(f, VIRTIO_MMIO_CONFIG, 1));
	/* A second change while the first is pending: one raise. */
	virtio_device__notify_config(&f->vdev);
	EXPECT_EQ(gen + 2, rd32(f, VIRTIO_MMIO_CONFIG_GENERATION));
	EXPECT_EQ(1, f->irq.raises);
	wr32(f, VIRTIO_MMIO_INTERRUPT_ACK, VIRTIO_MMIO_INT_CONFIG);
	EXPECT_EQ(0, f->irq.level);
	/* Read-only. */
	wr32(f, VIRTIO_MMIO_CONFIG_GENERATION, 0);
	EXPECT_EQ(gen + 2, rd32(f, VIRTIO_MMIO_CONFIG_GENERATION));
}

/* Only the first driver error of a device is logged. */
TEST_F(mmio, warns_once)
{
	struct fake_dev *f = &self->f;
	struct stderr_capture cap = { .saved = -1 };
	char buf[4096];

	ASSERT_EQ(0, stderr_capture__begin(&cap));
	rd(f, VIRTIO_MMIO_MAGIC_VALUE, 2);
	wr32(f, VIRTIO_MMIO_QUEUE_NOTIFY, 9);
	wr32(f, VIRTIO_MMIO_STATUS, 0x30);
	negotiate(f, FEAT(9));
	EXPECT_EQ(1, stderr_capture__end(&cap, buf, sizeof(buf)))
	TH_LOG("log: %s", buf);
	EXPECT_TRUE(strstr(buf, "virtio-test0") != NULL) TH_LOG("log: %s", buf);
	EXPECT_TRUE(strstr(buf, "2-byte read") != NULL) TH_LOG("log: %s", buf);
}

/* ---- pause and snapshot (device-state.c) ------------------------- */

static int fake_save(struct virtio_device *vdev, json_t *obj, char *err,
		     size_t len)
{
	return json_object_set_new(
		obj, "chains", json_integer((json_int_t)to_fake(vdev)->chains));
}

static const struct virtio_device_ops fake_save_ops = {
	.config_read = fake_config_read,
	.config_write = fake_config_write,
	.queue_notify = fake_queue_notify,
	.reset = fake_reset,
	.activate = fake_activate,
	.save = fake_save,
};

/* A fake device whose ops can save it. */
static int fake_create_saving(struct fake_dev *f)
{
	struct virtio_device_params p;

	if (fake_create(f))
		return -EINVAL;
	virtio_device__exit(&f->vdev);
	fake_params(f, &p);
	p.ops = &fake_save_ops;
	return virtio_device__init(&f->vdev, &p);
}

static uint64_t kicks(struct fake_dev *f, unsigned int q)
{
	uint64_t n = 0;

	if (read(f->vqs[q].kick_fd, &n, sizeof(n)) != sizeof(n))
		return 0;
	return n;
}

TEST_F(mmio, pause_stops_the_device_and_resume_kicks)
{
	struct fake_dev *f = &self->f;

	bring_up(f, FEAT(VIRTIO_F_VERSION_1));
	EXPECT_TRUE(virtio_device__is_live(&f->vdev));
	EXPECT_EQ(-EALREADY, virtio_device__resume(&f->vdev));
	ASSERT_EQ(0, virtio_device__pause(&f->vdev, 1000));
	EXPECT_TRUE(virtio_device__is_paused(&f->vdev));
	/* Not live: a device loop pops nothing; the status is untouched. */
	EXPECT_FALSE(virtio_device__is_live(&f->vdev));
	EXPECT_EQ(ST_ACK | ST_DRIVER | ST_FEATURES | ST_DRIVER_OK, status(f));
	EXPECT_EQ(-EALREADY, virtio_device__pause(&f->vdev, 1000));
	EXPECT_EQ(0, kicks(f, 0));
	ASSERT_EQ(0, virtio_device__resume(&f->vdev));
	EXPECT_TRUE(virtio_device__is_live(&f->vdev));
	/* Every queue is kicked: what came while paused is looked at. */
	EXPECT_EQ(1, kicks(f, 0));
	EXPECT_EQ(1, kicks(f, 1));
	EXPECT_EQ(-EALREADY, virtio_device__resume(&f->vdev));
}

TEST_F(mmio, save_refused_without_a_hook_or_a_pause)
{
	struct fake_dev *f = &self->f;
	json_t *st = NULL;

	bring_up(f, FEAT(VIRTIO_F_VERSION_1));
	ASSERT_EQ(0, virtio_device__pause(&f->vdev, 1000));
	EXPECT_EQ(-EOPNOTSUPP, virtio_device__save(&f->vdev, &st, NULL, 0));
	EXPECT_EQ(NULL, st);
	ASSERT_EQ(0, virtio_device__resume(&f->vdev));

	fake_destroy(f);
	ASSERT_EQ(0, fake_create_saving(f));
	bring_up(f, FEAT(VIRTIO_F_VERSION_1));
	/* A running device is not saved: its rings move. */
	EXPECT_EQ(-EINVAL, virtio_device__save(&f->vdev, &st, NULL, 0));
	EXPECT_EQ(NULL, st);
}

/*
 * Save a device that served chains, load it into a new one over a copy
 * of guest memory (what a restore does), and the new one goes on from
 * the same ring indices.
 */
TEST(save_load_round_trip)
{
	struct fake_dev a, b;
	char err[256] = "";
	json_t *st = NULL, *q0;
	uint64_t feat =
		FEAT(VIRTIO_F_VERSION_1) | FEAT(VIRTIO_RING_F_EVENT_IDX);

	ASSERT_EQ(0, fake_create_saving(&a));
	ASSERT_EQ(0, fake_create_saving(&b));
	a.process = b.process = true;
	bring_up(&a, feat);
	publish(&a, 0, 3, 16);
	publish(&a, 0, 4, 16);
	publish(&a, 1, 1, 16);
	wr32(&a, VIRTIO_MMIO_QUEUE_NOTIFY, 0);
	wr32(&a, VIRTIO_MMIO_QUEUE_NOTIFY, 1);
	ASSERT_EQ(2, used_idx(&a, 0));
	ASSERT_EQ(0, virtio_device__pause(&a.vdev, 1000));
	ASSERT_EQ(0, virtio_device__save(&a.vdev, &st, NULL, 0));
	EXPECT_EQ(3, json_integer_value(json_object_get(
			     json_object_get(st, "device"), "chains")));
	q0 = json_array_get(json_object_get(st, "queues"), 0);
	EXPECT_EQ(2, json_integer_value(json_object_get(q0, "lastAvailIdx")));
	EXPECT_EQ(2, json_integer_value(json_object_get(q0, "usedIdx")));
	EXPECT_EQ(DESC_GPA(0), json_integer_value(json_object_get(q0, "desc")));
	EXPECT_STREQ("EBESExQVFhcYGRob",
		     json_string_value(json_object_get(st, "config")));

	/* A text round trip, as the snapshot's devices.json. */
	{
		char *text = json_dumps(st, JSON_COMPACT);
		json_t *back = json_loads(text, 0, NULL);

		free(text);
		json_decref(st);
		st = back;
		ASSERT_NE(NULL, st);
	}
	memcpy(b.d.ram, a.d.ram, RAM_SIZE);
	ASSERT_EQ(0, virtio_device__load(&b.vdev, st, err, sizeof(err)))
	TH_LOG("%s", err);
	EXPECT_EQ(status(&a), status(&b));
	EXPECT_EQ(a.vdev.features, b.vdev.features);
	EXPECT_TRUE(
		virtio_device__has_feature(&b.vdev, VIRTIO_RING_F_EVENT_IDX));
	EXPECT_EQ(a.vqs[0].vq.last_avail_idx, b.vqs[0].vq.last_avail_idx);
	EXPECT_EQ(a.vqs[1].vq.used_idx, b.vqs[1].vq.used_idx);
	EXPECT_TRUE(virtqueue__is_ready(&b.vqs[0].vq));

	/* The new one takes the next chain, not one already served. */
	b.avail_idx[0] = a.avail_idx[0];
	publish(&b, 0, 5, 16);
	wr32(&b, VIRTIO_MMIO_QUEUE_NOTIFY, 0);
	EXPECT_EQ(1, b.chains);
	EXPECT_EQ(3, used_idx(&b, 0));
	EXPECT_EQ(5, get16(&b, USED_GPA(0) + 4 + 8 * 2));
	EXPECT_TRUE(guards_intact(&b));
	json_decref(st);
	fake_destroy(&a);
	fake_destroy(&b);
}

TEST(load_checks_every_field)
{
	struct fake_dev a, b;
	char err[256];
	json_t *st = NULL, *bad;

	ASSERT_EQ(0, fake_create_saving(&a));
	bring_up(&a, FEAT(VIRTIO_F_VERSION_1));
	ASSERT_EQ(0, virtio_device__pause(&a.vdev, 1000));
	ASSERT_EQ(0, virtio_device__save(&a.vdev, &st, NULL, 0));

	/* Another device. */
	ASSERT_EQ(0, fake_create_saving(&b));
	bad = json_deep_copy(st);
	json_object_set_new(bad, "deviceId", json_integer(VIRTIO_ID_NET));
	EXPECT_EQ(-EINVAL, virtio_device__load(&b.vdev, bad, err, sizeof(err)));
	TH_LOG("%s", err);
	json_decref(bad);
	fake_destroy(&b);

	/* Features the device never offered. */
	ASSERT_EQ(0, fake_create_saving(&b));
	bad = json_deep_copy(st);
	json_object_set_new(bad, "features", json_integer(FEAT(40)));
	EXPECT_EQ(-EINVAL, virtio_device__load(&b.vdev, bad, err, sizeof(err)));
	json_decref(bad);
	fake_destroy(&b);

	/* A ring outside guest memory. */
	ASSERT_EQ(0, fake_create_saving(&b));
	bad = json_deep_copy(st);
	json_object_set_new(json_array_get(json_object_get(bad, "queues"), 1),
			    "device", json_integer(RAM_SIZE - 2));
	EXPECT_EQ(-EINVAL, virtio_device__load(&b.vdev, bad, err, sizeof(err)));
	EXPECT_NE(NULL, strstr(err, "q1")) TH_LOG("%s", err);
	json_decref(bad);
	fake_destroy(&b);

	/* A queue missing, a size over the device's, a wrong type. */
	ASSERT_EQ(0, fake_create_saving(&b));
	bad = json_deep_copy(st);
	json_array_remove(json_object_get(bad, "queues"), 1);
	EXPECT_EQ(-EINVAL, virtio_device__load(&b.vdev, bad, err, sizeof(err)));
	json_decref(bad);
	bad = json_deep_copy(st);
	json_object_set_new(json_array_get(json_object_get(bad, "queues"), 0),
			    "size", json_integer(2 * QUEUE_MAX));
	EXPECT_EQ(-EINVAL, virtio_device__load(&b.vdev, bad, err, sizeof(err)));
	json_decref(bad);
	bad = json_deep_copy(st);
	json_object_set_new(bad, "status", json_string("ok"));
	EXPECT_EQ(-EINVAL, virtio_device__load(&b.vdev, bad, err, sizeof(err)));
	json_decref(bad);
	fake_destroy(&b);

	json_decref(st);
	fake_destroy(&a);
}

/* ---- fuzz --------------------------------------------------------- */

static uint64_t rng_state;

static uint64_t rnd(void)
{
	return prng__next(&rng_state);
}

static const uint32_t fuzz_regs[] = {
	VIRTIO_MMIO_MAGIC_VALUE,     VIRTIO_MMIO_VERSION,
	VIRTIO_MMIO_DEVICE_ID,	     VIRTIO_MMIO_VENDOR_ID,
	VIRTIO_MMIO_DEVICE_FEATURES, VIRTIO_MMIO_DEVICE_FEATURES_SEL,
	VIRTIO_MMIO_DRIVER_FEATURES, VIRTIO_MMIO_DRIVER_FEATURES_SEL,
	VIRTIO_MMIO_QUEUE_SEL,	     VIRTIO_MMIO_QUEUE_NUM_MAX,
	VIRTIO_MMIO_QUEUE_NUM,	     VIRTIO_MMIO_QUEUE_READY,
	VIRTIO_MMIO_QUEUE_NOTIFY,    VIRTIO_MMIO_INTERRUPT_STATUS,
	VIRTIO_MMIO_INTERRUPT_ACK,   VIRTIO_MMIO_STATUS,
	VIRTIO_MMIO_QUEUE_DESC_LOW,  VIRTIO_MMIO_QUEUE_DESC_HIGH,
	VIRTIO_MMIO_QUEUE_AVAIL_LOW, VIRTIO_MMIO_QUEUE_AVAIL_HIGH,
	VIRTIO_MMIO_QUEUE_USED_LOW,  VIRTIO_MMIO_QUEUE_USED_HIGH,
	VIRTIO_MMIO_SHM_SEL,	     VIRTIO_MMIO_CONFIG_GENERATION,
	VIRTIO_MMIO_CONFIG,	     VIRTIO_MMIO_CONFIG + 4,
	VIRTIO_MMIO_CONFIG + 8,	     VIRTIO_MMIO_CONFIG + 12,
};

static uint64_t fuzz_offset(void)
{
	switch (rnd() % 10) {
	case 0:
		return rnd();
	case 1:
		return rnd() % (VIRTIO_MMIO_WINDOW_SIZE + 16);
	default:
		return fuzz_regs[rnd() % ARRAY_SIZE(fuzz_regs)] +
		       (rnd() % 8 ? 0 : rnd() % 8);
	}
}

static unsigned int fuzz_width(void)
{
	static const unsigned int w[] = { 4, 4, 4, 4, 4, 4, 1, 2, 8, 0, 3 };

	return w[rnd() % ARRAY_SIZE(w)];
}

static uint64_t fuzz_value(void)
{
	switch (rnd() % 10) {
	case 0:
		return rnd();
	case 1:
		return rnd() % 4;
	case 2:
		return rnd() & 0xff; /* status-like */
	case 3:
		return 1u << (rnd() % 32);
	case 4:
		return (uint32_t)DEV_FEATURES;
	case 5:
		return RAM_SIZE - rnd() % 0x400; /* near the end */
	default:
		/* Ring-ish addresses and sizes. */
		return DESC_GPA(rnd() % 3) + (rnd() % 3) * 0x4000 +
		       (rnd() % 4 ? 0 : rnd() % 64);
	}
}

/* A one- or two-descriptor chain at head, as a sane driver lays it. */
static void sane_chain(struct fake_dev *f, unsigned int q, uint16_t head,
		       uint16_t size)
{
	uint16_t second = (head + 1) % size;
	bool two = size > 1 && rnd() % 2;
	struct vring_desc d[2] = {
		{
			.addr = htole64(DATA_GPA + rnd() % 0x10000),
			.len = htole32(1 + rnd() % 0x800),
			.flags = htole16(two ? VRING_DESC_F_NEXT : 0),
			.next = htole16(second),
		},
		{
			.addr = htole64(DATA_GPA + rnd() % 0x10000),
			.len = htole32(1 + rnd() % 0x800),
			.flags = htole16(VRING_DESC_F_WRITE),
		},
	};

	memcpy(f->d.ram + DESC_GPA(q) + head * sizeof(d[0]), &d[0],
	       sizeof(d[0]));
	if (two)
		memcpy(f->d.ram + DESC_GPA(q) + second * sizeof(d[0]), &d[1],
		       sizeof(d[1]));
}

/*
 * The fake driver's side of the rings: mostly a few good chains made
 * available, sometimes random descriptors, entries and indexes.
 */
static void fuzz_ring(struct fake_dev *f)
{
	unsigned int q = rnd() % NR_QUEUES, i, n = 1 + rnd() % 4;
	uint16_t size = f->vqs[q].vq.size, idx;

	if (size && rnd() % 8) {
		idx = get16(f, AVAIL_GPA(q) + 2);
		for (i = 0; i < n; i++, idx++) {
			uint16_t head = rnd() % size;

			sane_chain(f, q, head, size);
			put16(f, AVAIL_GPA(q) + 4 + 2 * (idx % size), head);
		}
		put16(f, AVAIL_GPA(q) + 2, idx);
		put16(f, AVAIL_GPA(q), rnd() % 4 == 0);
		/* And mostly kick, as the driver would. */
		if (rnd() % 4)
			wr32(f, VIRTIO_MMIO_QUEUE_NOTIFY, q);
		return;
	}
	for (i = 0; i < n; i++) {
		struct vring_desc d = {
			.addr = htole64(rnd() % 4 ? DATA_GPA + rnd() % 0x1000 :
						    rnd()),
			.len = htole32(rnd() % 4 ? 1 + rnd() % 0x800 :
						   (uint32_t)rnd()),
			.flags = htole16(rnd() % 8),
			.next = htole16(rnd() % 4 ? rnd() % QUEUE_MAX : rnd()),
		};

		memcpy(f->d.ram + DESC_GPA(q) + (rnd() % QUEUE_MAX) * sizeof(d),
		       &d, sizeof(d));
		put16(f, AVAIL_GPA(q) + 4 + 2 * (rnd() % QUEUE_MAX),
		      rnd() % 4 ? rnd() % QUEUE_MAX : rnd());
	}
	put16(f, AVAIL_GPA(q) + 2,
	      get16(f, AVAIL_GPA(q) + 2) + (rnd() % 2 ? rnd() % 4 : rnd()));
}

/*
 * A Linux-like bring-up now and then (zeroed rings, as a driver hands
 * them over), so the fuzz reaches live queues with good chains; one queue
 * in four gets random sizes and addresses instead.
 */
static void fuzz_bring_up(struct fake_dev *f)
{
	uint64_t feat = FEAT(VIRTIO_F_VERSION_1);
	unsigned int q;

	if (rnd() % 2)
		feat |= FEAT(VIRTIO_RING_F_EVENT_IDX);
	if (rnd() % 2)
		feat |= FEAT(VIRTIO_RING_F_INDIRECT_DESC);
	negotiate(f, feat);
	for (q = 0; q < NR_QUEUES; q++) {
		memset(f->d.ram + DESC_GPA(q), 0, 0x10000);
		if (rnd() % 4)
			setup_queue(f, q, 1u << (rnd() % 7));
		else /* sizes and addresses good, bad or wild */
			setup_queue_at(f, q, fuzz_value(), fuzz_value(),
				       fuzz_value(), fuzz_value());
	}
	add_status(f, ST_DRIVER_OK);
}

TEST_TIMEOUT(fuzz, 300)
{
	static struct fake_dev fd;
	struct fake_dev *f = &fd;
	unsigned long iter, live = 0, ready_seen = 0, irqs = 0, needs_reset = 0;
	uint32_t st, isr;
	unsigned int q;

	rng_state = 0x6b696c6e2d6d6d69ULL; /* "kiln-mmi" */
	ASSERT_EQ(0, fake_create(f));
	f->process = true;

	for (iter = 0; iter < 50000; iter++) {
		uint64_t off = fuzz_offset(), val = fuzz_value();
		unsigned int w = fuzz_width();
		unsigned int op = rnd() % 100;
		uint8_t buf[8];

		if (op < 45) {
			val = htole64(val);
			virtio_mmio__write(&f->vdev, off, &val, w);
		} else if (op < 85) {
			virtio_mmio__read(&f->vdev, off, buf, w);
		} else if (op < 93) {
			fuzz_ring(f);
		} else if (op < 97) {
			virtio_device__queue_notify(&f->vdev, rnd() % 4);
		} else if (op < 98) {
			if (rnd() % 2)
				virtio_device__notify_config(&f->vdev);
			else
				virtio_device__notify_queue(&f->vdev,
							    rnd() % 4);
		} else {
			fuzz_bring_up(f);
		}

		/* What must hold whatever the driver did. */
		st = status(f);
		isr = rd32(f, VIRTIO_MMIO_INTERRUPT_STATUS);
		ASSERT_EQ(isr != 0, f->irq.level) TH_LOG("iter %lu", iter);
		ASSERT_EQ(0, isr & ~3u);
		ASSERT_EQ(0, st & ~0xcfu);
		if (st & ST_DRIVER)
			ASSERT_TRUE(st & ST_ACK);
		if (st & ST_FEATURES) {
			ASSERT_TRUE(st & ST_DRIVER);
			ASSERT_EQ(0, f->vdev.features & ~DEV_FEATURES);
			ASSERT_TRUE(virtio_device__has_feature(
				&f->vdev, VIRTIO_F_VERSION_1));
		}
		if (st & ST_DRIVER_OK)
			ASSERT_TRUE(st & ST_FEATURES);
		for (q = 0; q < NR_QUEUES; q++) {
			struct virtqueue *vq = &f->vqs[q].vq;

			if (!virtqueue__is_ready(vq))
				continue;
			ready_seen++;
			ASSERT_TRUE(st & ST_FEATURES);
			ASSERT_LE(vq->size, QUEUE_MAX);
		}
		if ((st & ST_DRIVER_OK) && !(st & (ST_NEEDS_RST | ST_FAILED)))
			live++;
		needs_reset += !!(st & ST_NEEDS_RST);
		ASSERT_EQ(0, f->bad_iov) TH_LOG("iter %lu", iter);
		ASSERT_EQ(0, f->bad_config_access) TH_LOG("iter %lu", iter);
		if (iter % 1000 == 0)
			ASSERT_TRUE(guards_intact(f)) TH_LOG("iter %lu", iter);
	}
	irqs = f->irq.raises;
	EXPECT_TRUE(guards_intact(f));
	EXPECT_EQ(0, f->irq.redundant);
	printf("# fuzz: %lu chains, %lu steps live, %lu with NEEDS_RESET, "
	       "%lu queue-steps ready, %lu interrupts, %u resets\n",
	       f->chains, live, needs_reset, ready_seen, irqs, f->resets);
	/* The fuzz must reach deep enough, or it tests nothing. */
	EXPECT_LT(1000, f->chains);
	EXPECT_LT(10000, live);
	EXPECT_LT(100, needs_reset);
	EXPECT_LT(300, irqs);
	EXPECT_LT(300, f->resets);
	fake_destroy(f);
}

TEST_HARNESS_MAIN
