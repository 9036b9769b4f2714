// SPDX-License-Identifier: GPL-2.0
/*
 * The virtio-mmio slot table (vmm/virtio-slots.c), without KVM: a device
 * is one create and one attach, and from then on the VM's generic walks
 * start it under its filter, report it in vm.metrics and destroy it,
 * without naming its type.
 */
#include <errno.h>
#include <linux/virtio_config.h>
#include <stdlib.h>

#include "devices/virtio/device.h"
#include "selftests/kselftest.h"
#include "vmm/seccomp.h"
#include "vmm/virtio-attach.h"

#define TEST_SLOT 3U
#define RAM_SIZE  4096U

/* A device of a type the VM has never heard of. */
struct test_dev {
	struct virtio_device vdev;
	struct virtio_queue queue;
	struct guest_mem mem;
	uint8_t ram[RAM_SIZE];
	int start_ret; /* what its start returns */
	unsigned int starts;
	const struct sock_fprog *filter; /* its thread's, once started */
	unsigned int *destroyed;
};

static void test_notify(struct virtio_device *dev, unsigned int index)
{
	(void)dev;
	(void)index;
}

static const struct virtio_device_ops test_dev_ops = {
	.queue_notify = test_notify,
};

static int test_dev_create(struct test_dev **out, const char *name,
			   unsigned int *destroyed)
{
	struct test_dev *d = calloc(1, sizeof(*d));
	struct virtio_device_params p;
	int ret;

	if (!d)
		return -ENOMEM;
	guest_mem__init(&d->mem);
	ret = guest_mem__add(&d->mem, 0, RAM_SIZE, d->ram);
	p = (struct virtio_device_params){
		.name = name,
		.device_id = 42,
		.features = 1ULL << VIRTIO_F_VERSION_1,
		.ops = &test_dev_ops,
		.queues = &d->queue,
		.nr_queues = 1,
		.queue_max_size = 16,
		.mem = &d->mem,
	};
	if (!ret)
		ret = virtio_device__init(&d->vdev, &p);
	if (ret) {
		virtio_device__exit(&d->vdev);
		free(d);
		return ret;
	}
	d->destroyed = destroyed;
	*out = d;
	return 0;
}

static int test_start(void *dev, const struct sock_fprog *filter)
{
	struct test_dev *d = dev;

	d->starts++;
	d->filter = filter;
	return d->start_ret;
}

static void test_metrics(void *dev, json_t *o)
{
	struct test_dev *d = dev;

	json_object_set_new(o, "starts", json_integer(d->starts));
}

static void test_destroy(void *dev)
{
	struct test_dev *d = dev;

	if (!d)
		return;
	(*d->destroyed)++;
	virtio_device__exit(&d->vdev);
	free(d);
}

static const struct virtio_slot_ops test_slot_ops = {
	.type = "virtio-test",
	.thread = SECCOMP_THREAD_FS,
	.start = test_start,
	.metrics = test_metrics,
	.destroy = test_destroy,
};

TEST(one_create_one_attach)
{
	struct virtio_slot slots[VIRTIO_MMIO_SLOTS] = { 0 };
	const struct sock_fprog *filters[SECCOMP_NR_THREADS] = { 0 };
	struct sock_fprog fs_filter = { 0 };
	unsigned int destroyed = 0;
	struct test_dev *d;
	json_t *a, *o;

	ASSERT_EQ(0, virtio_slots__reserve(slots, TEST_SLOT, "virtio-test0"));
	ASSERT_EQ(0, test_dev_create(&d, slots[TEST_SLOT].name, &destroyed));
	ASSERT_EQ(0, virtio_slots__attach(slots, TEST_SLOT, &d->vdev,
					  &test_slot_ops, d));

	/* Started once, under the filter of its ops' thread type. */
	filters[SECCOMP_THREAD_FS] = &fs_filter;
	ASSERT_EQ(0, virtio_slots__start(slots, filters));
	EXPECT_EQ(1U, d->starts);
	EXPECT_TRUE(d->filter == &fs_filter);

	/* Reported under its slot's name and its ops' type. */
	a = virtio_slots__metrics(slots);
	ASSERT_TRUE(a != NULL);
	ASSERT_EQ(1U, json_array_size(a));
	o = json_array_get(a, 0);
	EXPECT_STREQ("virtio-test0",
		     json_string_value(json_object_get(o, "name")));
	EXPECT_STREQ("virtio-test",
		     json_string_value(json_object_get(o, "type")));
	EXPECT_EQ(0, json_integer_value(json_object_get(o, "requests")));
	EXPECT_EQ(1, json_integer_value(json_object_get(o, "starts")));
	json_decref(a);

	/* Stopped and freed by the slots, once. */
	virtio_slots__destroy(slots);
	EXPECT_EQ(1U, destroyed);
	EXPECT_TRUE(slots[TEST_SLOT].ops == NULL);
	EXPECT_TRUE(slots[TEST_SLOT].dev == NULL);
	virtio_slots__destroy(slots);
	EXPECT_EQ(1U, destroyed);
	a = virtio_slots__metrics(slots);
	ASSERT_TRUE(a != NULL);
	EXPECT_EQ(0U, json_array_size(a));
	json_decref(a);
	virtio_slots__release(slots);
	EXPECT_STREQ("", slots[TEST_SLOT].name);
}

/* The walk goes in slot order and stops at the first failure. */
TEST(start_in_slot_order_until_a_failure)
{
	struct virtio_slot slots[VIRTIO_MMIO_SLOTS] = { 0 };
	const struct sock_fprog *filters[SECCOMP_NR_THREADS] = { 0 };
	unsigned int destroyed = 0;
	struct test_dev *first, *failing, *last;

	ASSERT_EQ(0, virtio_slots__reserve(slots, 9, "virtio-test9"));
	ASSERT_EQ(0, virtio_slots__reserve(slots, 1, "virtio-test1"));
	ASSERT_EQ(0, virtio_slots__reserve(slots, 5, "virtio-test5"));
	ASSERT_EQ(0, test_dev_create(&last, slots[9].name, &destroyed));
	ASSERT_EQ(0, virtio_slots__attach(slots, 9, &last->vdev, &test_slot_ops,
					  last));
	ASSERT_EQ(0, test_dev_create(&first, slots[1].name, &destroyed));
	ASSERT_EQ(0, virtio_slots__attach(slots, 1, &first->vdev,
					  &test_slot_ops, first));
	ASSERT_EQ(0, test_dev_create(&failing, slots[5].name, &destroyed));
	ASSERT_EQ(0, virtio_slots__attach(slots, 5, &failing->vdev,
					  &test_slot_ops, failing));
	failing->start_ret = -EAGAIN;

	EXPECT_EQ(-EAGAIN, virtio_slots__start(slots, filters));
	EXPECT_EQ(1U, first->starts);
	EXPECT_TRUE(first->filter == NULL);
	EXPECT_EQ(1U, failing->starts);
	EXPECT_EQ(0U, last->starts);

	/* Every device is the slots', started or not. */
	virtio_slots__destroy(slots);
	EXPECT_EQ(3U, destroyed);
	virtio_slots__release(slots);
}

/* The attach takes the device whatever it returns. */
TEST(attach_to_a_slot_not_reserved)
{
	struct virtio_slot slots[VIRTIO_MMIO_SLOTS] = { 0 };
	unsigned int destroyed = 0;
	struct test_dev *d, *again;

	ASSERT_EQ(0, test_dev_create(&d, "virtio-test2", &destroyed));
	EXPECT_EQ(-EINVAL,
		  virtio_slots__attach(slots, 2, &d->vdev, &test_slot_ops, d));
	EXPECT_EQ(1U, destroyed);
	EXPECT_TRUE(slots[2].ops == NULL);

	ASSERT_EQ(0, virtio_slots__reserve(slots, 2, "virtio-test2"));
	EXPECT_EQ(-EBUSY, virtio_slots__reserve(slots, 2, "virtio-other"));
	EXPECT_EQ(-EINVAL, virtio_slots__reserve(slots, VIRTIO_MMIO_SLOTS,
						 "virtio-test16"));
	EXPECT_EQ(-ENAMETOOLONG,
		  virtio_slots__reserve(slots, 4, "virtio-a-long-name"));
	ASSERT_EQ(0, test_dev_create(&d, slots[2].name, &destroyed));
	ASSERT_EQ(0,
		  virtio_slots__attach(slots, 2, &d->vdev, &test_slot_ops, d));
	ASSERT_EQ(0, test_dev_create(&again, slots[2].name, &destroyed));
	EXPECT_EQ(-EINVAL, virtio_slots__attach(slots, 2, &again->vdev,
						&test_slot_ops, again));
	EXPECT_EQ(2U, destroyed);
	EXPECT_TRUE(slots[2].priv == d);
	virtio_slots__destroy(slots);
	EXPECT_EQ(3U, destroyed);
	virtio_slots__release(slots);
}

TEST_HARNESS_MAIN
