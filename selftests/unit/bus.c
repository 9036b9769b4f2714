// SPDX-License-Identifier: GPL-2.0
/* The address buses: claims, overlaps, dispatch and the floating bus. */
#include <errno.h>

#include "selftests/kselftest.h"
#include "vmm/bus.h"

struct probe {
	uint64_t offset;
	unsigned int size, calls;
	bool is_write;
};

static void record(void *opaque, uint64_t offset, uint8_t *data,
		   unsigned int size, bool is_write)
{
	struct probe *p = opaque;

	p->offset = offset;
	p->size = size;
	p->is_write = is_write;
	p->calls++;
	if (!is_write)
		memset(data, 0x5a, size);
}

TEST(claims_and_overlaps)
{
	struct probe p = { 0 };
	struct bus b;

	bus__init(&b, "pio", 0x10000);
	EXPECT_EQ(0, bus__register(&b, 0x3f8, 8, record, &p));
	EXPECT_EQ(-EBUSY, bus__register(&b, 0x3ff, 1, record, &p));
	EXPECT_EQ(-EBUSY, bus__register(&b, 0x3f0, 9, record, &p));
	EXPECT_EQ(0, bus__register(&b, 0x3f0, 8, record, &p));
	EXPECT_EQ(-EINVAL, bus__register(&b, 0x100, 0, record, &p));
	EXPECT_EQ(-EINVAL, bus__register(&b, 0xffff, 2, record, &p));
	EXPECT_EQ(-EINVAL, bus__register(&b, UINT64_MAX, 2, record, &p));
	EXPECT_EQ(-EINVAL, bus__register(&b, 0x10, 1, NULL, &p));
}

TEST(bounded_table)
{
	struct probe p = { 0 };
	struct bus b;
	unsigned int i;

	bus__init(&b, "mmio", 1ULL << 32);
	for (i = 0; i < BUS_MAX_RANGES; i++)
		ASSERT_EQ(0, bus__register(&b, i * 0x1000, 0x1000, record, &p));
	EXPECT_EQ(-ENOSPC, bus__register(&b, 0x100000, 1, record, &p));
}

TEST(dispatch_and_floating_bus)
{
	struct probe p = { 0 };
	uint8_t data[8] = { 0 };
	struct bus b;

	bus__init(&b, "mmio", 1ULL << 32);
	ASSERT_EQ(0, bus__register(&b, 0xd0000000, 0x1000, record, &p));
	EXPECT_TRUE(bus__access(&b, 0xd0000070, data, 4, false));
	EXPECT_EQ(0x70U, p.offset);
	EXPECT_EQ(4U, p.size);
	EXPECT_EQ(0x5a, data[3]);
	EXPECT_TRUE(bus__access(&b, 0xd0000fff, data, 1, true));
	EXPECT_EQ(0xfffU, p.offset);
	EXPECT_TRUE(p.is_write);
	/* Nobody there: reads float high, writes vanish. */
	EXPECT_FALSE(bus__access(&b, 0xd0001000, data, 8, false));
	EXPECT_EQ(0xff, data[0]);
	EXPECT_EQ(0xff, data[7]);
	EXPECT_FALSE(bus__access(&b, 0xcfffffff, data, 1, true));
	EXPECT_EQ(2U, p.calls);
}

TEST(unregister)
{
	struct probe p = { 0 }, q = { 0 };
	uint8_t data[4] = { 0 };
	struct bus b;

	bus__init(&b, "mmio", 1ULL << 32);
	ASSERT_EQ(0, bus__register(&b, 0xd0000000, 0x1000, record, &p));
	ASSERT_EQ(0, bus__register(&b, 0xd0001000, 0x1000, record, &q));
	EXPECT_EQ(-ENOENT, bus__unregister(&b, 0xd0000800));
	EXPECT_EQ(0, bus__unregister(&b, 0xd0000000));
	EXPECT_EQ(-ENOENT, bus__unregister(&b, 0xd0000000));
	/* The range is free again; the other one still answers. */
	EXPECT_FALSE(bus__access(&b, 0xd0000010, data, 4, false));
	EXPECT_TRUE(bus__access(&b, 0xd0001010, data, 4, false));
	EXPECT_EQ(0U, p.calls);
	EXPECT_EQ(1U, q.calls);
	EXPECT_EQ(0, bus__register(&b, 0xd0000000, 0x1000, record, &p));
}

TEST_HARNESS_MAIN
