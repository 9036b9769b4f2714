// SPDX-License-Identifier: GPL-2.0
/*
 * Kernel image front end: map the file, tell ELF from bzImage, decide where
 * everything goes in guest memory, and copy the kernel in.
 */
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "bootloader/boot.h"

int kernel__open(struct kernel_image *k, const char *path, const char **why)
{
	struct stat st;
	void *data;
	int fd, ret;

	memset(k, 0, sizeof(*k));
	k->path = path;

	fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
	if (fd < 0) {
		ret = -errno;
		*why = strerror(errno);
		return ret;
	}
	if (fstat(fd, &st) < 0) {
		ret = -errno;
		*why = strerror(errno);
		goto out_close;
	}
	if (!S_ISREG(st.st_mode)) {
		ret = S_ISDIR(st.st_mode) ? -EISDIR : -EINVAL;
		*why = S_ISDIR(st.st_mode) ? "is a directory" :
					     "not a regular file";
		goto out_close;
	}
	if (st.st_size == 0) {
		ret = -ENOEXEC;
		*why = "empty file, not an ELF64 x86-64 vmlinux or bzImage";
		goto out_close;
	}
	data = mmap(NULL, st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
	if (data == MAP_FAILED) {
		ret = -errno;
		*why = strerror(errno);
		goto out_close;
	}
	k->data = data;
	k->size = st.st_size;
	ret = kernel__parse(k, why);
	if (ret)
		kernel__close(k);
out_close:
	close(fd);
	return ret;
}

void kernel__close(struct kernel_image *k)
{
	if (k->data)
		munmap((void *)k->data, k->size);
	k->data = NULL;
	k->size = 0;
}

/* Works on k->data/k->size alone, so tests can feed it buffers. */
int kernel__parse(struct kernel_image *k, const char **why)
{
	if (elf__is_elf(k->data, k->size))
		return elf__parse(k, why);
	if (bzimage__is_bzimage(k->data, k->size))
		return bzimage__parse(k, why);
	*why = "not an ELF64 x86-64 vmlinux or bzImage";
	return -ENOEXEC;
}

static uint64_t align_down(uint64_t v, uint64_t a)
{
	return v & ~(a - 1);
}

void boot__prefault(void *p, size_t len, bool write)
{
	uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
	uintptr_t lo = align_down((uintptr_t)p, page);
	uintptr_t hi = align_down((uintptr_t)p + len + page - 1, page);

	/*
	 * Only pages the copy touches anyway (the first and last partly):
	 * no more resident memory, just one fault-in for all of them.
	 * Linux 5.14; failure (older kernels, a test's buffer) is harmless.
	 */
	if (len)
		(void)madvise((void *)lo, hi - lo,
			      write ? MADV_POPULATE_WRITE : MADV_POPULATE_READ);
}

void boot__copy(const struct boot_mem *m, uint64_t off, const uint8_t *src,
		size_t len, size_t zero)
{
	boot__prefault(m->ram + off, len + zero, true);
	boot__prefault((void *)src, len, false);
	memcpy(m->ram + off, src, len);
	memset(m->ram + off + len, 0, zero);
}

int boot__plan(struct boot_plan *p, const struct kernel_image *k,
	       uint64_t mem_bytes, uint64_t initrd_bytes, size_t cmdline_len,
	       const char **why)
{
	uint64_t top;

	memset(p, 0, sizeof(*p));
	p->low_ram = mem_bytes < MMIO_GAP_START ? mem_bytes : MMIO_GAP_START;
	p->high_ram = mem_bytes - p->low_ram;

	if (cmdline_len > k->cmdline_size) {
		*why = "kernel command line longer than the boot protocol "
		       "allows";
		return -E2BIG;
	}
	if (k->load_end > p->low_ram) {
		*why = "kernel does not fit in guest memory";
		return -EFBIG;
	}
	if (!initrd_bytes)
		return 0;

	/* Highest page-aligned spot below both RAM's end and the limit. */
	top = p->low_ram;
	if (k->initrd_addr_max + 1 < top)
		top = k->initrd_addr_max + 1;
	if (initrd_bytes > top || top - initrd_bytes < k->load_end) {
		*why = "initrd does not fit in guest memory above the kernel";
		return -EFBIG;
	}
	p->initrd_addr = align_down(top - initrd_bytes, 4096);
	if (p->initrd_addr < k->load_end) {
		*why = "initrd does not fit in guest memory above the kernel";
		return -EFBIG;
	}
	p->initrd_size = initrd_bytes;
	return 0;
}

int kernel__load(const struct kernel_image *k, const struct boot_mem *m)
{
	if (k->load_end > m->low_ram)
		return -EFBIG;
	if (k->format == KERNEL_FORMAT_ELF)
		elf__load(k, m);
	else
		bzimage__load(k, m);
	return 0;
}
