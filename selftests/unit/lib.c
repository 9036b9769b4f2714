// SPDX-License-Identifier: GPL-2.0
/* lib/: the event loop, segment lists and the intrusive list. */
#include <errno.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "lib/evloop.h"
#include "lib/iovec.h"
#include "lib/list.h"
#include "selftests/kselftest.h"
#include "selftests/rings.h"

struct seen {
	struct evloop *l;
	int res[4];
	void *ptr;
	unsigned int calls, rounds;
};

static void on_source(void *arg, int res)
{
	struct seen *s = arg;

	s->res[s->calls++ % 4] = res;
}

static void on_tag(void *arg, void *ptr, int res)
{
	struct seen *s = arg;

	s->ptr = ptr;
	s->res[s->calls++ % 4] = res;
}

/* Stops the loop once two completions came. */
static bool two_then_stop(void *arg)
{
	struct seen *s = arg;

	s->rounds++;
	if (s->calls >= 2)
		evloop__stop(s->l);
	return false;
}

static const struct evloop_ops stop_ops = { .end = two_then_stop };

TEST(sources_and_tags_dispatch)
{
	static uint64_t token __attribute__((aligned(8)));
	const struct evloop_params p = { .sq_entries = 4 };
	struct seen s = { 0 };
	struct ev_source src = { .fn = on_source, .arg = &s };
	struct io_uring_sqe *sqe;
	struct evloop l;
	uint64_t one = 1, buf;
	int fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);

	ASSERT_LE(0, fd);
	evloop__init(&l, "test");
	ASSERT_EQ(0, evloop__open(&l, &p));
	s.l = &l;
	evloop__set_tag_handler(&l, 2, on_tag, &s);
	evloop__read_eventfd(&l, &src, fd, &buf);
	sqe = evloop__get_sqe(&l);
	io_uring_prep_nop(sqe);
	io_uring_sqe_set_data64(sqe, (uintptr_t)&token | 2);
	ASSERT_EQ(sizeof(one), (size_t)write(fd, &one, sizeof(one)));
	EXPECT_EQ(0, evloop__run(&l, &stop_ops, &s));
	EXPECT_EQ(2U, s.calls);
	EXPECT_EQ(&token, s.ptr);
	EXPECT_EQ(1U, buf);
	evloop__exit(&l);
	close(fd);
}

TEST(stop_fd_ends_the_thread)
{
	const struct evloop_params p = { .sq_entries = 4 };
	struct seen s = { 0 };
	struct evloop l;

	evloop__init(&l, "test");
	ASSERT_EQ(0, evloop__open(&l, &p));
	s.l = &l;
	ASSERT_EQ(0, evloop__start(&l, &stop_ops, &s, NULL));
	/* Joins: returns only once the stop read ended the loop. */
	evloop__exit(&l);
	EXPECT_LE(1U, s.rounds);
	EXPECT_EQ(0U, s.calls);
}

/* Stops the loop once one completion came. */
static bool one_then_stop(void *arg)
{
	struct seen *s = arg;

	s->rounds++;
	if (s->calls >= 1)
		evloop__stop(s->l);
	return false;
}

static const struct evloop_ops one_ops = { .end = one_then_stop };

/*
 * A read that io_uring parks (a blocking pipe with nothing in it), on a
 * restricted ring, is cancelled from another thread: the loop sees
 * -ECANCELED. Until the loop has submitted it, there is nothing to
 * cancel yet (-ENOENT).
 */
TEST(cancel_from_another_thread_ends_a_parked_read)
{
	static const uint8_t ops[] = { IORING_OP_TIMEOUT };
	const struct evloop_params p = {
		.sq_entries = 4,
		.opcodes = ops,
		.nr_opcodes = ARRAY_SIZE(ops),
	};
	struct seen s = { 0 };
	struct ev_source src = { .fn = on_source, .arg = &s };
	struct evloop l;
	char buf[8];
	int fds[2], ret;

	ASSERT_EQ(0, pipe(fds));
	evloop__init(&l, "test");
	ASSERT_EQ(0, evloop__open(&l, &p));
	s.l = &l;
	evloop__read(&l, &src, fds[0], buf, sizeof(buf), 0);
	ASSERT_EQ(0, evloop__start(&l, &one_ops, &s, NULL));
	while ((ret = evloop__cancel(&l, &src)) == -ENOENT)
		usleep(1000);
	EXPECT_EQ(0, ret);
	/* Joins once the cancelled read's completion ended the loop. */
	evloop__exit(&l);
	EXPECT_EQ(1U, s.calls);
	EXPECT_EQ(-ECANCELED, s.res[0]);
	close(fds[0]);
	close(fds[1]);
}

TEST(restricted_ring_refuses_other_opcodes)
{
	static uint64_t token __attribute__((aligned(8)));
	static const uint8_t ops[] = { IORING_OP_TIMEOUT };
	const struct evloop_params p = {
		.sq_entries = 4,
		.opcodes = ops,
		.nr_opcodes = ARRAY_SIZE(ops),
	};
	struct seen s = { 0 };
	struct io_uring_sqe *sqe;
	struct evloop l;

	evloop__init(&l, "test");
	ASSERT_EQ(0, evloop__open(&l, &p));
	s.l = &l;
	evloop__set_tag_handler(&l, 1, on_tag, &s);
	sqe = evloop__get_sqe(&l);
	io_uring_prep_nop(sqe);
	io_uring_sqe_set_data64(sqe, (uintptr_t)&token | 1);
	sqe = evloop__get_sqe(&l);
	io_uring_prep_nop(sqe);
	io_uring_sqe_set_data64(sqe, (uintptr_t)&token | 1);
	EXPECT_EQ(0, evloop__run(&l, &stop_ops, &s));
	EXPECT_EQ(-EACCES, s.res[0]);
	EXPECT_EQ(-EACCES, s.res[1]);
	evloop__exit(&l);
}

/*
 * What the devices' ring tests look with (selftests/rings.h) tells an
 * evloop's ring, always restricted, from a bare one, which is not.
 */
TEST(ring_census_tells_a_restricted_ring_from_a_bare_one)
{
	const struct evloop_params p = { .sq_entries = 4 };
	struct ring_census before, after;
	struct io_uring bare;
	struct evloop l;

	ASSERT_EQ(0, ring_census__take(&before));
	ASSERT_EQ(0, io_uring_queue_init(4, &bare, 0));
	evloop__init(&l, "test");
	ASSERT_EQ(0, evloop__open(&l, &p));
	ASSERT_EQ(0, ring_census__take(&after));
	EXPECT_EQ(before.restricted + 1, after.restricted);
	EXPECT_EQ(before.unrestricted + 1, after.unrestricted);
	evloop__exit(&l);
	io_uring_queue_exit(&bare);
}

TEST(iovec_copies_and_views)
{
	char a[3] = "abc", b[2] = "de", out[8] = { 0 };
	struct iovec iov[2] = { { a, 3 }, { b, 2 } }, sub[2], *v = iov;
	unsigned int n = 2;

	EXPECT_EQ(3U, iov__to_buf(iov, 2, 1, out, 3));
	EXPECT_EQ(0, memcmp(out, "bcd", 3));
	EXPECT_EQ(2U, iov__from_buf(iov, 2, 2, "XY", 2));
	EXPECT_EQ(0, memcmp(a, "abX", 3));
	EXPECT_EQ('Y', b[0]);
	EXPECT_EQ(2, iov__sub(iov, 2, 2, 2, sub, 2));
	EXPECT_EQ(a + 2, sub[0].iov_base);
	EXPECT_EQ(1U, sub[1].iov_len);
	EXPECT_EQ(-E2BIG, iov__sub(iov, 2, 2, 2, sub, 1));
	EXPECT_EQ(-EINVAL, iov__sub(iov, 2, 2, 4, sub, 2));
	iov__advance(&v, &n, 4);
	EXPECT_EQ(1U, n);
	EXPECT_EQ(b + 1, v->iov_base);
	EXPECT_EQ(1U, v->iov_len);
}

struct item {
	int value;
	struct list_head node;
};

TEST(list_keeps_order_and_unlinks)
{
	struct item it[3] = { { .value = 1 }, { .value = 2 }, { .value = 3 } };
	struct item *pos, *tmp;
	struct list_head head;
	int sum = 0;

	list_init(&head);
	EXPECT_TRUE(list_empty(&head));
	list_add_tail(&it[1].node, &head);
	list_add_tail(&it[2].node, &head);
	list_add(&it[0].node, &head);
	EXPECT_EQ(1, list_first_entry(&head, struct item, node)->value);
	list_for_each_entry_safe(pos, tmp, &head, struct item, node)
	{
		sum = sum * 10 + pos->value;
		if (pos->value == 2)
			list_del(&pos->node);
	}
	EXPECT_EQ(123, sum);
	EXPECT_TRUE(list_empty(&it[1].node));
	sum = 0;
	list_for_each_entry(pos, &head, struct item, node) sum =
		sum * 10 + pos->value;
	EXPECT_EQ(13, sum);
}

TEST_HARNESS_MAIN
