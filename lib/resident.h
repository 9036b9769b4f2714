/* SPDX-License-Identifier: GPL-2.0 */
#ifndef KILN_LIB_RESIDENT_H
#define KILN_LIB_RESIDENT_H

#include <stddef.h>

/*
 * Memory the vmm holds but does not use, given back to the kernel
 * without changing what any thread reads (benchmarks.md, "RSS by
 * mapping").
 */

/*
 * Give back the pages of the calling thread's static TLS that hold only
 * zeros. glibc writes every new thread's TLS block in full (the .tdata
 * image, then zeros over .tbss), which makes each of its pages resident;
 * the vmm's block is ~48 KiB, almost all of it wolfSSL's per-thread ECC
 * cache (fp_cache), which no thread but the proxy's ever uses. A page of
 * anonymous memory that reads as zeros reads the same after
 * MADV_DONTNEED, so dropping one changes nothing the thread can see; it
 * comes back on the first write. Call it first thing in a new thread:
 * only the thread itself writes its TLS, so nothing races the check.
 */
void resident__trim_tls(void);

/*
 * Unmap the program's and its libraries' read-only file pages (code,
 * read-only data; never a writable segment, where RELRO's relocated
 * pages are) from this process. They stay in the page cache; a page
 * still in use is mapped again at its next touch (a minor fault), so
 * what stays resident is what the running VM uses, not what start-up
 * did (option parsing, loading, filter compilation). For the main
 * thread once the VM runs.
 */
void resident__drop_text(void);

/*
 * Give back the free pages inside malloc's heaps (malloc_trim): what
 * start-up allocated and freed (the filters' compilation, the BPF
 * objects' loading, configuration parsing) stays resident in the middle
 * of the heap otherwise, as glibc returns only a free top on its own.
 * For the main thread once the VM runs.
 */
void resident__trim_heap(void);

/*
 * A zeroed table of n entries of size bytes whose pages become resident
 * only as entries are first written: an anonymous mapping of its own,
 * never written here. calloc gives that only while malloc happens to
 * serve the size by mmap (its threshold moves as large blocks are
 * freed); below it, or from memory freed before, calloc writes the
 * zeros through every page. For tables a VM fills from the front, as
 * deep as it ever needs (the proxy's flows, the resolver's queries).
 * NULL when n * size overflows or there is no memory. Under the
 * sanitizers it is calloc, so that LeakSanitizer sees what the table
 * points to.
 */
void *resident__table(size_t n, size_t size);
/* The table back; NULL is fine. n and size as it was made with. */
void resident__free_table(void *t, size_t n, size_t size);

#endif
