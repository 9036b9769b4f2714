// SPDX-License-Identifier: GPL-2.0
/*
 * fuzz virtqueue - the split virtqueue walker (devices/virtio/queue.c)
 * against a driver that writes anything anywhere: the rings, the
 * descriptor table (loops, indirect tables, lengths, addresses past the
 * memory), and again while the device works.
 *
 * Guest memory is two regions, RAM at 0 and a small one high up, as
 * the monitor's RAM and its MMIO gap leave them. Input: a byte of the
 * queue's size (a power of 2, up to 256) and EVENT_IDX, the three
 * areas' offsets in RAM, then RAM's first bytes, then steps: pop (and
 * push what was popped), scribble on RAM, flush, notification
 * suppression, reset and configure again.
 *
 * Checked for every input: a chain the walker hands out lies inside
 * guest memory segment by segment, its readable segments first, its
 * sizes summed right, within VQ_CHAIN_MAX_IOV and the queue's byte
 * limit; a queue that broke stays broken until reset; the walk of one
 * pop is bounded (the fuzzer's timeout would see a loop).
 */
#include <errno.h>

#include "devices/virtio/queue.h"
#include "selftests/fuzz/fuzz.h"

#define RAM_SIZE	(64U << 10)
#define HIGH_GPA	(1ULL << 32)
#define HIGH_SIZE	4096U
#define RAM_FILL_MAX	4096U /* RAM bytes an input sets up front */
#define MAX_STEPS	256
#define SIZE_SHIFT_MAX	8 /* queue sizes 1 to 256 */
#define GPA_ALIGN	16
#define MAX_CHAIN_BYTES (1ULL << 20)
#define SCRIBBLE_MAX	16U

enum step {
	STEP_POP,
	STEP_SCRIBBLE,
	STEP_FILL_FLUSH,
	STEP_SUPPRESS,
	STEP_RESET,
	NR_STEPS
};

struct fuzz_vq {
	uint8_t *ram, *high;
	struct guest_mem mem;
	struct virtqueue q;
	struct vq_chain chain;
	uint16_t size;
	uint64_t desc, avail, used;
	bool event_idx;
	uint16_t popped[VIRTQUEUE_MAX_SIZE]; /* heads not pushed yet */
	unsigned int nr_popped;
};

static bool in_region(const void *p, size_t len, const uint8_t *base,
		      size_t size)
{
	const uint8_t *b = p;

	return b >= base && len <= size && b - base <= (ptrdiff_t)(size - len);
}

static void check_chain(const struct fuzz_vq *f)
{
	const struct vq_chain *c = &f->chain;
	uint64_t out = 0, in = 0;

	fuzz_check(c->nr_out + c->nr_in <= VQ_CHAIN_MAX_IOV);
	fuzz_check(c->head < f->size);
	for (unsigned int i = 0; i < c->nr_out + c->nr_in; i++) {
		const struct iovec *v = &c->iov[i];

		fuzz_check(
			in_region(v->iov_base, v->iov_len, f->ram, RAM_SIZE) ||
			in_region(v->iov_base, v->iov_len, f->high, HIGH_SIZE));
		if (i < c->nr_out)
			out += v->iov_len;
		else
			in += v->iov_len;
	}
	fuzz_check(out == c->out_len && in == c->in_len);
	fuzz_check(out + in <= MAX_CHAIN_BYTES);
}

static void configure(struct fuzz_vq *f)
{
	virtqueue__init(&f->q, "fuzz");
	f->nr_popped = 0;
	if (virtqueue__configure(&f->q, &f->mem, f->size, f->desc, f->avail,
				 f->used, f->event_idx))
		return;
	virtqueue__set_max_chain_bytes(&f->q, MAX_CHAIN_BYTES);
}

static void pop(struct fuzz_vq *f, uint32_t written)
{
	bool broken = virtqueue__is_broken(&f->q);
	int ret = virtqueue__pop(&f->q, &f->chain);

	if (ret < 0) {
		fuzz_check(ret == -EIO || ret == -ENODEV);
		fuzz_check(ret != -EIO || virtqueue__is_broken(&f->q));
		return;
	}
	fuzz_check(!broken);
	if (!ret)
		return;
	check_chain(f);
	if (written > f->chain.in_len)
		written = (uint32_t)f->chain.in_len;
	/* Every other chain held back, to be pushed by fill and flush. */
	if (written & 1 && f->nr_popped < VIRTQUEUE_MAX_SIZE) {
		f->popped[f->nr_popped++] = f->chain.head;
		return;
	}
	fuzz_check(!virtqueue__push(&f->q, f->chain.head, written));
	(void)virtqueue__should_notify(&f->q);
}

static void fill_flush(struct fuzz_vq *f)
{
	while (f->nr_popped) {
		int ret = virtqueue__fill(&f->q, f->popped[--f->nr_popped], 0);

		fuzz_check(!ret || virtqueue__is_broken(&f->q));
	}
	virtqueue__flush(&f->q);
	(void)virtqueue__should_notify(&f->q);
}

static void run(struct fuzz_vq *f, struct fuzz_in *in)
{
	const uint8_t *p;
	uint8_t opt = fuzz_in__u8(in);
	size_t len;
	char text[256];

	f->size = (uint16_t)(1U << (opt % (SIZE_SHIFT_MAX + 1)));
	f->event_idx = opt & 0x80;
	f->desc = (uint64_t)fuzz_in__u16(in) * GPA_ALIGN % RAM_SIZE;
	f->avail = (uint64_t)fuzz_in__u16(in) * 2 % RAM_SIZE;
	f->used = (uint64_t)fuzz_in__u16(in) * 4 % RAM_SIZE;
	p = fuzz_in__bytes(in, fuzz_in__u16(in) % (RAM_FILL_MAX + 1), &len);
	memcpy(f->ram, p, len);
	configure(f);
	for (int i = 0; i < MAX_STEPS && in->left; i++) {
		switch ((enum step)(fuzz_in__u8(in) % NR_STEPS)) {
		case STEP_POP:
			pop(f, fuzz_in__u32(in));
			break;
		case STEP_SCRIBBLE: {
			uint16_t at = fuzz_in__u16(in) % RAM_SIZE;

			p = fuzz_in__bytes(in, fuzz_in__u8(in) % SCRIBBLE_MAX,
					   &len);
			if (len > RAM_SIZE - at)
				len = RAM_SIZE - at;
			memcpy(f->ram + at, p, len);
			break;
		}
		case STEP_FILL_FLUSH:
			fill_flush(f);
			break;
		case STEP_SUPPRESS:
			virtqueue__set_notify_suppression(&f->q,
							  fuzz_in__u8(in) & 1);
			break;
		default:
			virtqueue__reset(&f->q);
			fuzz_check(!virtqueue__is_broken(&f->q));
			configure(f);
			break;
		}
	}
	fuzz_check(virtqueue__describe(&f->q, text, sizeof(text)) >= 0);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static struct fuzz_vq *f;
	struct fuzz_in in;

	fuzz__quiet();
	if (!f) {
		f = calloc(1, sizeof(*f));
		fuzz_check(f);
		f->ram = malloc(RAM_SIZE);
		f->high = malloc(HIGH_SIZE);
		fuzz_check(f->ram && f->high);
	}
	memset(f->ram, 0, RAM_SIZE);
	memset(f->high, 0, HIGH_SIZE);
	guest_mem__init(&f->mem);
	fuzz_check(!guest_mem__add(&f->mem, 0, RAM_SIZE, f->ram));
	fuzz_check(!guest_mem__add(&f->mem, HIGH_GPA, HIGH_SIZE, f->high));
	fuzz_in__init(&in, data, size);
	run(f, &in);
	return 0;
}
