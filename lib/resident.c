// SPDX-License-Identifier: GPL-2.0
/* Memory the vmm holds but does not use, given back (resident.h). */
#include <link.h>
#include <malloc.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/auxv.h>
#include <sys/mman.h>
#include <unistd.h>

#include "lib/compiler.h"
#include "lib/resident.h"

static bool page_is_zero(const unsigned long *w, size_t words)
{
	size_t i;

	for (i = 0; i < words; i++)
		if (w[i])
			return false;
	return true;
}

/*
 * One loaded object (the vmm; libc's and the libraries' when they are
 * shared): its TLS block in this thread is [dlpi_tls_data, + p_memsz); the
 * whole pages inside it that read as zeros are dropped. A failed
 * madvise leaves the page resident, which is only what it was.
 */
static int trim_object(struct dl_phdr_info *info, size_t size, void *arg)
{
	uintptr_t page = *(const long *)arg, start, end, p;
	unsigned int i;

	if (!info->dlpi_tls_data)
		return 0;
	for (i = 0; i < info->dlpi_phnum; i++) {
		const ElfW(Phdr) *ph = &info->dlpi_phdr[i];

		if (ph->p_type != PT_TLS)
			continue;
		start = ((uintptr_t)info->dlpi_tls_data + page - 1) &
			~(page - 1);
		end = ((uintptr_t)info->dlpi_tls_data + ph->p_memsz) &
		      ~(page - 1);
		for (p = start; p < end; p += page)
			if (page_is_zero((const unsigned long *)p,
					 page / sizeof(unsigned long)))
				madvise((void *)p, page, MADV_DONTNEED);
	}
	return 0;
}

void resident__trim_tls(void)
{
	long page = sysconf(_SC_PAGESIZE);
	sigset_t all, old;

	if (page <= 0)
		return;
	/*
	 * A signal handler on this thread could set errno (TLS) between a
	 * page's check and its madvise, and the write would be lost: none
	 * runs meanwhile.
	 */
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	dl_iterate_phdr(trim_object, &page);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
}

static int drop_object(struct dl_phdr_info *info, size_t size, void *arg)
{
	uintptr_t page = *(const long *)arg, start, end;
	unsigned int i;

	/* The vDSO is the kernel's, not a file's. */
	if (info->dlpi_addr == getauxval(AT_SYSINFO_EHDR))
		return 0;
	for (i = 0; i < info->dlpi_phnum; i++) {
		const ElfW(Phdr) *ph = &info->dlpi_phdr[i];

		if (ph->p_type != PT_LOAD || (ph->p_flags & PF_W))
			continue;
		start = (info->dlpi_addr + ph->p_vaddr) & ~(page - 1);
		end = (info->dlpi_addr + ph->p_vaddr + ph->p_memsz + page - 1) &
		      ~(page - 1);
		/* Failing leaves the pages resident: as they were. */
		madvise((void *)start, end - start, MADV_DONTNEED);
	}
	return 0;
}

void resident__drop_text(void)
{
	long page = sysconf(_SC_PAGESIZE);

	if (page > 0)
		dl_iterate_phdr(drop_object, &page);
}

void resident__trim_heap(void)
{
	malloc_trim(0);
}

/* The table's bytes, rounded up to whole pages; 0 on overflow. */
static size_t table_len(size_t n, size_t size)
{
	long page = sysconf(_SC_PAGESIZE);
	size_t len;

	if (page <= 0 || __builtin_mul_overflow(n, size, &len) ||
	    len > SIZE_MAX - (size_t)page)
		return 0;
	return (len + (size_t)page - 1) & ~((size_t)page - 1);
}

void *resident__table(size_t n, size_t size)
{
	size_t len = table_len(n, size);
	void *t;

	if (!len)
		return NULL;
	if (KILN_ASAN)
		return calloc(n, size);
	t = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
		 -1, 0);
	return t == MAP_FAILED ? NULL : t;
}

void resident__free_table(void *t, size_t n, size_t size)
{
	if (!t)
		return;
	if (KILN_ASAN)
		free(t);
	else
		munmap(t, table_len(n, size));
}
