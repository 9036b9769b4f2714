// SPDX-License-Identifier: GPL-2.0
/*
 * lib/resident.c: a new thread's TLS pages that hold only zeros are
 * given back, pages with data stay (and keep it), and a dropped page
 * works as before; thread_filter__spawn's threads start trimmed; the
 * program's code pages, dropped, leave the process's RSS and the
 * program runs on; a table's pages are resident only once written.
 */
#include <pthread.h>
#include <stdint.h>
#include <sys/mman.h>
#include <unistd.h>

#include "lib/compiler.h"
#include "lib/resident.h"
#include "lib/thread-filter.h"
#include "selftests/kselftest.h"

#define ZERO_PAGES 16

/* Zero-initialised (.tbss): glibc writes them at every thread start. */
static __thread unsigned char zeros[ZERO_PAGES * 4096 + 4096];
static __thread unsigned char marked[3 * 4096];

struct seen {
	unsigned int resident_before, resident_after, pages;
	bool marked_resident;
	unsigned char marked_value, written_back;
};

/* How many whole pages of [p, p + len) are resident. */
static unsigned int resident(const void *p, size_t len, unsigned int *pages)
{
	uintptr_t page = sysconf(_SC_PAGESIZE);
	uintptr_t s = ((uintptr_t)p + page - 1) & ~(page - 1);
	uintptr_t e = ((uintptr_t)p + len) & ~(page - 1);
	unsigned char vec[ZERO_PAGES + 2];
	unsigned int i, n = 0;

	if (e <= s || (e - s) / page > sizeof(vec) ||
	    mincore((void *)s, e - s, vec))
		return ~0u;
	for (i = 0; i < (e - s) / page; i++)
		n += vec[i] & 1;
	if (pages)
		*pages = (e - s) / page;
	return n;
}

static void *trim_thread(void *arg)
{
	struct seen *s = arg;
	unsigned char *m = marked + sizeof(marked) / 2;

	*m = 0x5a;
	s->resident_before = resident(zeros, sizeof(zeros), &s->pages);
	resident__trim_tls();
	s->resident_after = resident(zeros, sizeof(zeros), NULL);
	s->marked_resident = resident((void *)((uintptr_t)m & ~(uintptr_t)4095),
				      4096, NULL) == 1;
	s->marked_value = *m;
	zeros[sizeof(zeros) / 2] = 7;
	s->written_back = zeros[sizeof(zeros) / 2];
	return NULL;
}

TEST(zero_pages_go_data_stays)
{
	struct seen s = { 0 };
	pthread_t t;

	ASSERT_EQ(0, pthread_create(&t, NULL, trim_thread, &s));
	ASSERT_EQ(0, pthread_join(t, NULL));
	ASSERT_GE(ZERO_PAGES, s.pages);
	/* glibc wrote the thread's whole TLS block: the premise. */
	ASSERT_EQ(s.pages, s.resident_before);
	ASSERT_EQ(0, s.resident_after);
	ASSERT_TRUE(s.marked_resident);
	ASSERT_EQ(0x5a, s.marked_value);
	ASSERT_EQ(7, s.written_back);
}

static void *spawned(void *arg)
{
	unsigned int *n = arg;

	*n = resident(zeros, sizeof(zeros), NULL);
	return NULL;
}

TEST(spawned_threads_start_trimmed)
{
	unsigned int n = ~0u;
	pthread_t t;

	ASSERT_EQ(0, thread_filter__spawn(&t, NULL, spawned, &n));
	ASSERT_EQ(0, pthread_join(t, NULL));
	ASSERT_EQ(0, n);
}

/*
 * Rss of the mappings overlapping [lo, hi], in KiB, from
 * /proc/self/smaps (a heap may be more than one mapping).
 */
static long rss_kib_range(const void *lo, const void *hi)
{
	unsigned long s, e, a = (unsigned long)lo, b = (unsigned long)hi, t;
	char line[512];
	bool in = false;
	long kib, sum = 0;
	FILE *f = fopen("/proc/self/smaps", "r");

	if (!f)
		return -1;
	if (a > b) {
		t = a;
		a = b;
		b = t;
	}
	while (fgets(line, sizeof(line), f)) {
		if (sscanf(line, "%lx-%lx ", &s, &e) == 2 &&
		    strchr(line, '-') < strchr(line, ' ')) {
			in = b >= s && a < e;
			continue;
		}
		if (in && sscanf(line, "Rss: %ld kB", &kib) == 1)
			sum += kib;
	}
	fclose(f);
	return sum;
}

/* Rss of the mapping holding addr, in KiB. */
static long rss_kib_of(const void *addr)
{
	return rss_kib_range(addr, addr);
}

/* Read-only data of the program (a file page each), none of it zero. */
#define TABLE_BYTES (256 << 10)
static const unsigned char table[TABLE_BYTES] = { [0 ... TABLE_BYTES - 1] =
							  0xa5 };

static unsigned long table_sum(void)
{
	unsigned long sum = 0;
	size_t i;

	for (i = 0; i < TABLE_BYTES; i += 512)
		sum += *(volatile const unsigned char *)&table[i];
	return sum;
}

TEST(dropped_text_leaves_rss_and_reads_the_same)
{
	unsigned long want = 0xa5ul * (TABLE_BYTES / 512);
	long before, after;

	ASSERT_EQ(want, table_sum());
	before = rss_kib_of(table);
	ASSERT_LE(TABLE_BYTES / 1024, before);
	resident__drop_text();
	after = rss_kib_of(table);
	/* Not all: reading smaps faults some back (and their neighbours). */
	ASSERT_GT(before - 64, after)
	TH_LOG("Rss %ld -> %ld KiB", before, after);
	/* The pages come back as they were, and the code runs on. */
	ASSERT_EQ(want, table_sum());
	ASSERT_LE(TABLE_BYTES / 1024, rss_kib_of(table));
}

#define CHUNKS	    128
#define CHUNK_BYTES (16 << 10)

TEST(trimmed_heap_gives_back_freed_pages)
{
	char *chunk[CHUNKS], *last;
	const void *heap;
	long before, after;
	unsigned int i;

	/* Below the mmap threshold: from the heap, each page written. */
	for (i = 0; i < CHUNKS; i++) {
		chunk[i] = malloc(CHUNK_BYTES);
		ASSERT_TRUE(chunk[i] != NULL);
		memset(chunk[i], 0x5a, CHUNK_BYTES);
		/* Seen: not a dead store the compiler may drop before free. */
		__asm__ volatile("" : : "r"(chunk[i]) : "memory");
	}
	/*
	 * Kept above the freed ones (as large: no earlier free chunk fits),
	 * so that the heap's top cannot shrink past them.
	 */
	last = malloc(CHUNK_BYTES);
	ASSERT_TRUE(last != NULL);
	strcpy(last, "kept");
	/* The heap they are in: [heap], or this thread's arena. */
	heap = chunk[0];
	for (i = 0; i < CHUNKS; i++)
		free(chunk[i]);
	before = rss_kib_range(heap, last);
	resident__trim_heap();
	after = rss_kib_range(heap, last);
	ASSERT_LT(0, before);
	ASSERT_GT(before - CHUNKS * CHUNK_BYTES / 1024 / 2, after)
	TH_LOG("heap Rss %ld -> %ld KiB", before, after);
	EXPECT_STREQ("kept", last);
	free(last);
}

/* Like the proxy's flow table: 1024 entries of 312 bytes. */
struct entry {
	int fd[2];
	unsigned char rest[304];
};

#define ENTRIES 1024U

TEST(table_resident_only_where_written)
{
	struct entry *t = resident__table(ENTRIES, sizeof(*t));
	unsigned long sum = 0;
	long kib;

	ASSERT_TRUE(t != NULL);
	/* Under the sanitizers it is calloc, which writes it. */
	if (!KILN_ASAN) {
		EXPECT_EQ(0, rss_kib_of(t));
	}
	for (unsigned int i = 0; i < ENTRIES; i++)
		sum += (unsigned long)t[i].fd[0] + t[i].rest[303];
	EXPECT_EQ(0, sum); /* zeros, read without being backed */
	t[700].fd[0] = -1;
	t[700].rest[303] = 9;
	kib = rss_kib_of(t);
	/* The one or two pages entry 700 spans. */
	if (!KILN_ASAN) {
		EXPECT_TRUE(kib >= 4 && kib <= 8)
		TH_LOG("Rss %ld KiB", kib);
	}
	EXPECT_EQ(-1, t[700].fd[0]);
	EXPECT_EQ(0, t[699].fd[0]);
	EXPECT_EQ(0, t[701].fd[1]);
	resident__free_table(t, ENTRIES, sizeof(*t));
	resident__free_table(NULL, ENTRIES, sizeof(*t));
}

TEST(table_size_overflow_refused)
{
	EXPECT_TRUE(resident__table(SIZE_MAX / 2, 3) == NULL);
	EXPECT_TRUE(resident__table(1, SIZE_MAX) == NULL);
}

TEST_HARNESS_MAIN
