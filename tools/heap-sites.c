// SPDX-License-Identifier: GPL-2.0
/*
 * heap-sites: the live heap of a process by allocation site, for
 * finding what holds a vmm's memory (Documentation/benchmarks.md, "The
 * heap by allocation site"). Not part of any build: a debugging tool,
 * LD_PRELOADed into a dynamically linked vmm (STATIC_LIBS=0):
 *
 *	cc -O2 -shared -fPIC -o /tmp/heap-sites.so tools/heap-sites.c
 *	HEAP_SITES_OUT=FILE HEAP_SITES_TRIGGER=PATH \
 *		LD_PRELOAD=/tmp/heap-sites.so build-dyn/vmm run ...
 *
 * Every malloc, calloc, realloc and aligned allocation is recorded with
 * its call stack (backtrace(), frames as object+offset, for addr2line),
 * and every anonymous mmap of 16 KiB or more. Once PATH exists (polled
 * every 50 ms) the live ones go to FILE, the sites by resident bytes:
 *
 *	TOTAL live B bytes, U with overhead, main thread M, resident R, N sites
 *	SITE usable resident bytes count main|thread FRAME...
 *	MMAP address length resident FRAME...
 *
 * and PATH is removed. "resident" counts the bytes on pages mincore()
 * says are resident; "main" allocations are the main thread's, which
 * glibc serves from [heap]. One lock around a fixed table: slow, for
 * measuring what is held, not how fast.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <execinfo.h>
#include <malloc.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

extern void *__libc_malloc(size_t);
extern void *__libc_calloc(size_t, size_t);
extern void *__libc_realloc(void *, size_t);
extern void __libc_free(void *);
extern void *__libc_memalign(size_t, size_t);

#define DEPTH 10
#define SLOTS (1u << 21)

struct rec {
	void *p;
	size_t n;
	int main_thread;
	void *bt[DEPTH];
};

static struct rec *tab;
static pthread_mutex_t lk = PTHREAD_MUTEX_INITIALIZER;
static __thread int inside;
static int ready;
static pid_t pid0;

static unsigned hash(void *p)
{
	uintptr_t x = (uintptr_t)p;
	x ^= x >> 33;
	x *= 0xff51afd7ed558ccdULL;
	x ^= x >> 33;
	return (unsigned)x & (SLOTS - 1);
}

static void add(void *p, size_t n)
{
	struct rec r = { p, n, syscall(SYS_gettid) == pid0, { 0 } };
	unsigned h;

	if (!p || !ready || inside)
		return;
	inside = 1;
	backtrace(r.bt, DEPTH);
	inside = 0;
	pthread_mutex_lock(&lk);
	for (h = hash(p); tab[h].p && tab[h].p != (void *)1;
	     h = (h + 1) & (SLOTS - 1))
		;
	tab[h] = r;
	pthread_mutex_unlock(&lk);
}

static void del(void *p)
{
	unsigned h;

	if (!p || !ready)
		return;
	pthread_mutex_lock(&lk);
	for (h = hash(p); tab[h].p; h = (h + 1) & (SLOTS - 1))
		if (tab[h].p == p) {
			tab[h].p = (void *)1; /* tombstone */
			break;
		}
	pthread_mutex_unlock(&lk);
}

void *malloc(size_t n)
{
	void *p = __libc_malloc(n);
	add(p, n);
	return p;
}

void *calloc(size_t a, size_t b)
{
	void *p = __libc_calloc(a, b);
	add(p, a * b);
	return p;
}

void *realloc(void *o, size_t n)
{
	void *p;

	del(o);
	p = __libc_realloc(o, n);
	if (p || !n)
		add(p, n);
	else
		add(o, n); /* failed: still there (size unknown) */
	return p;
}

void free(void *p)
{
	del(p);
	__libc_free(p);
}

void *memalign(size_t a, size_t n)
{
	void *p = __libc_memalign(a, n);
	add(p, n);
	return p;
}

void *aligned_alloc(size_t a, size_t n)
{
	return memalign(a, n);
}

int posix_memalign(void **out, size_t a, size_t n)
{
	void *p = __libc_memalign(a, n);
	if (!p)
		return 12;
	add(p, n);
	*out = p;
	return 0;
}

struct mrec {
	void *p;
	size_t n;
	void *bt[DEPTH];
};
static struct mrec mtab[4096];
static int nm;

void *mmap(void *a, size_t n, int prot, int fl, int fd, off_t off)
{
	void *p = (void *)syscall(SYS_mmap, a, n, prot, fl, fd, off);

	if ((long)p < 0 && (long)p > -4096) {
		errno = -(long)p;
		return MAP_FAILED;
	}
	if (ready && !inside && fd < 0 && n >= 16384) {
		pthread_mutex_lock(&lk);
		if (nm < 4096) {
			mtab[nm].p = p;
			mtab[nm].n = n;
			inside = 1;
			backtrace(mtab[nm].bt, DEPTH);
			inside = 0;
			nm++;
		}
		pthread_mutex_unlock(&lk);
	}
	return p;
}

struct agg {
	void *bt[DEPTH];
	int main_thread;
	size_t bytes, usable, count, resident;
};

/* Bytes of [p, p + n) on resident pages. */
static size_t resident_bytes(void *p, size_t n)
{
	uintptr_t s = (uintptr_t)p, e = s + n, pg, lo, hi;
	unsigned char v;
	size_t r = 0;

	for (pg = s & ~4095UL; pg < e; pg += 4096) {
		if (mincore((void *)pg, 4096, &v) || !(v & 1))
			continue;
		lo = pg > s ? pg : s;
		hi = pg + 4096 < e ? pg + 4096 : e;
		r += hi - lo;
	}
	return r;
}

static int cmp(const void *a, const void *b)
{
	const struct agg *x = a, *y = b;
	return x->resident < y->resident ? 1 :
	       x->resident > y->resident ? -1 :
					   0;
}

static void frame(FILE *f, void *a)
{
	Dl_info i;

	if (dladdr(a, &i) && i.dli_fname)
		fprintf(f, " %s+0x%lx", i.dli_fname,
			(unsigned long)((uintptr_t)a - (uintptr_t)i.dli_fbase));
	else
		fprintf(f, " %p", a);
}

static void dump(const char *path)
{
	static struct agg ag[65536];
	size_t na = 0, tot = 0, totu = 0, totmain = 0, totres = 0;
	FILE *f = fopen(path, "w");

	if (!f)
		return;
	inside = 1;
	pthread_mutex_lock(&lk);
	for (unsigned h = 0; h < SLOTS; h++) {
		struct rec *r = &tab[h];
		size_t k, u;

		if (!r->p || r->p == (void *)1)
			continue;
		u = malloc_usable_size(r->p) + 16;
		for (k = 0; k < na; k++)
			if (ag[k].main_thread == r->main_thread &&
			    !memcmp(ag[k].bt, r->bt, sizeof(r->bt)))
				break;
		if (k == na) {
			if (na == 65536)
				continue;
			memcpy(ag[na].bt, r->bt, sizeof(r->bt));
			ag[na].main_thread = r->main_thread;
			na++;
		}
		ag[k].bytes += r->n;
		ag[k].usable += u;
		ag[k].count++;
		ag[k].resident += resident_bytes(r->p, r->n);
		tot += r->n;
		totres += resident_bytes(r->p, r->n);
		totu += u;
		if (r->main_thread)
			totmain += u;
	}
	pthread_mutex_unlock(&lk);
	qsort(ag, na, sizeof(ag[0]), cmp);
	fprintf(f,
		"TOTAL live %zu bytes, %zu with overhead, main thread %zu, resident %zu, %zu sites\n",
		tot, totu, totmain, totres, na);
	for (size_t k = 0; k < na; k++) {
		fprintf(f, "SITE %zu %zu %zu %zu %s", ag[k].usable,
			ag[k].resident, ag[k].bytes, ag[k].count,
			ag[k].main_thread ? "main" : "thread");
		for (int d = 1; d < DEPTH && ag[k].bt[d]; d++)
			frame(f, ag[k].bt[d]);
		fputc('\n', f);
	}
	for (int i = 0; i < nm; i++) {
		fprintf(f, "MMAP %p %zu %zu", mtab[i].p, mtab[i].n,
			resident_bytes(mtab[i].p, mtab[i].n));
		for (int d = 1; d < DEPTH && mtab[i].bt[d]; d++)
			frame(f, mtab[i].bt[d]);
		fputc('\n', f);
	}
	fclose(f);
	inside = 0;
}

static void *dumper(void *arg)
{
	const char *trig = getenv("HEAP_SITES_TRIGGER");
	const char *out = getenv("HEAP_SITES_OUT");
	struct timespec ts = { 0, 50 * 1000000L };

	(void)arg;
	while (access(trig, F_OK))
		nanosleep(&ts, NULL);
	dump(out);
	unlink(trig);
	return NULL;
}

__attribute__((constructor)) static void init(void)
{
	void *bt[4];
	pthread_t t;

	pid0 = getpid();
	tab = __libc_calloc(SLOTS, sizeof(*tab));
	inside = 1;
	backtrace(bt, 4); /* loads libgcc_s now */
	inside = 0;
	ready = 1;
	if (getenv("HEAP_SITES_OUT") && getenv("HEAP_SITES_TRIGGER")) {
		pthread_create(&t, NULL, dumper, NULL);
		pthread_detach(t);
	}
}
