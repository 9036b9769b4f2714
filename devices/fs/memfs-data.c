// SPDX-License-Identifier: GPL-2.0
/*
 * The `memory` backend's file data: MEMFS_CHUNK_SIZE chunks in a radix
 * tree per file, allocated on first write and charged with the tree's
 * nodes; reads of a hole see zeroes. Also the ops that work on the
 * chunks themselves: fallocate and lseek's SEEK_DATA / SEEK_HOLE.
 */
#include <errno.h>
#include <linux/falloc.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "devices/fs/memfs-internal.h"

/* ---- file data: a radix tree of chunks ------------------------------ */

/* The tree's nodes are charged like everything else the guest makes. */
static int chunk_node_alloc(void *ctx, size_t size, void **node)
{
	struct memfs *fs = ctx;

	if (memfs_charge(fs, size))
		return -ENOSPC;
	*node = calloc(1, size);
	if (!*node) {
		memfs_uncharge(fs, size);
		return -ENOMEM;
	}
	return 0;
}

static void chunk_node_free(void *ctx, void *node, size_t size)
{
	free(node);
	memfs_uncharge(ctx, size);
}

/* The allocator every file's tree takes its nodes from. */
void memfs_data_setup(struct memfs *fs)
{
	fs->chunk_nodes.node_alloc = chunk_node_alloc;
	fs->chunk_nodes.node_free = chunk_node_free;
	fs->chunk_nodes.ctx = fs;
}

static void chunk_free(void *ctx, void *chunk)
{
	free(chunk);
	memfs_uncharge(ctx, CHUNK_COST);
}

void memfs_data_free(struct memfs *fs, struct memfs_data *fd)
{
	radix__destroy(&fd->chunks, &fs->chunk_nodes, chunk_free);
	fd->nr_chunks = 0;
}

static void chunk_drop(struct memfs *fs, struct memfs_data *fd, uint64_t idx)
{
	uint8_t *c = radix__delete(&fd->chunks, idx, &fs->chunk_nodes);

	if (c) {
		chunk_free(fs, c);
		fd->nr_chunks--;
	}
}

/* Frees the chunks in [first, end) (chunk indices). */
static void chunks_drop_range(struct memfs *fs, struct memfs_data *fd,
			      uint64_t first, uint64_t end)
{
	uint64_t idx;

	for (idx = radix__next(&fd->chunks, first);
	     idx != RADIX_NONE && idx < end;
	     idx = radix__next(&fd->chunks, idx + 1))
		chunk_drop(fs, fd, idx);
}

static int chunk_get(struct memfs *fs, struct memfs_data *fd, uint64_t idx,
		     uint8_t **out)
{
	uint8_t *c = radix__lookup(&fd->chunks, idx);
	int err;

	if (c) {
		*out = c;
		return 0;
	}
	if (memfs_charge(fs, CHUNK_COST))
		return -ENOSPC;
	c = calloc(1, MEMFS_CHUNK_SIZE);
	if (!c) {
		memfs_uncharge(fs, CHUNK_COST);
		return -ENOMEM;
	}
	err = radix__insert(&fd->chunks, idx, c, &fs->chunk_nodes);
	if (err) {
		free(c);
		memfs_uncharge(fs, CHUNK_COST);
		return err;
	}
	fd->nr_chunks++;
	*out = c;
	return 0;
}

/* Zeroes [from, to) inside one chunk, if it is allocated. */
static void chunk_zero(struct memfs_data *fd, uint64_t idx, uint64_t from,
		       uint64_t to)
{
	uint8_t *c = radix__lookup(&fd->chunks, idx);

	if (c && to > from)
		memset(c + from, 0, to - from);
}

/*
 * Bytes past st_size are always zero in allocated chunks, so growing a
 * file (truncate up, a write past the end) shows zeroes there.
 */
void memfs_data_truncate(struct memfs *fs, struct memfs_inode *ino,
			 uint64_t size)
{
	struct memfs_data *fd = &ino->u.data;

	if (size < ino->size) {
		chunks_drop_range(
			fs, fd, (size + MEMFS_CHUNK_MASK) >> MEMFS_CHUNK_SHIFT,
			RADIX_NONE);
		if (size & MEMFS_CHUNK_MASK)
			chunk_zero(fd, size >> MEMFS_CHUNK_SHIFT,
				   size & MEMFS_CHUNK_MASK, MEMFS_CHUNK_SIZE);
	}
	ino->size = size;
}

uint64_t memfs_data_read(struct memfs_inode *ino, uint8_t *p, size_t len,
			 uint64_t off)
{
	uint64_t done = 0, in, n;
	uint8_t *c;

	while (done < len && off < ino->size) {
		in = off & MEMFS_CHUNK_MASK;
		n = min_u64(min_u64(MEMFS_CHUNK_SIZE - in, len - done),
			    ino->size - off);
		c = radix__lookup(&ino->u.data.chunks,
				  off >> MEMFS_CHUNK_SHIFT);
		if (c)
			memcpy(p + done, c + in, n);
		else
			memset(p + done, 0, n);
		done += n;
		off += n;
	}
	return done;
}

/*
 * Writes what fits: answers the bytes written (possibly short, at a chunk
 * boundary, when max_bytes runs out) or -errno when nothing was.
 */
int64_t memfs_data_write(struct memfs *fs, struct memfs_inode *ino,
			 const uint8_t *p, size_t len, uint64_t off)
{
	uint64_t done = 0, in, n;
	uint8_t *c;
	int err;

	while (done < len) {
		if (off >= MEMFS_MAX_FILE_SIZE) {
			err = -EFBIG;
			goto out;
		}
		in = off & MEMFS_CHUNK_MASK;
		n = min_u64(min_u64(MEMFS_CHUNK_SIZE - in, len - done),
			    MEMFS_MAX_FILE_SIZE - off);
		err = chunk_get(fs, &ino->u.data, off >> MEMFS_CHUNK_SHIFT, &c);
		if (err)
			goto out;
		memcpy(c + in, p + done, n);
		done += n;
		off += n;
	}
	err = 0;
out:
	if (done && off > ino->size)
		ino->size = off;
	return done ? (int64_t)done : err;
}

/* ---- ops on file data ---------------------------------------------- */

/* Allocates every chunk of [first, last] (chunk indices). */
static int alloc_range(struct memfs *fs, struct memfs_data *fd, uint64_t first,
		       uint64_t last)
{
	uint64_t idx, missing = last - first + 1;
	uint8_t *c;
	int err;

	/*
	 * Refuse up front what cannot fit, so the common ENOSPC leaves
	 * nothing behind; a shortfall in tree nodes on the way leaves the
	 * chunks made so far, allocated and charged.
	 */
	for (idx = radix__next(&fd->chunks, first);
	     idx != RADIX_NONE && idx <= last;
	     idx = radix__next(&fd->chunks, idx + 1))
		missing--;
	if (missing > (fs->max_bytes - fs->used) / CHUNK_COST)
		return -ENOSPC;
	for (idx = first; idx <= last; idx++) {
		err = chunk_get(fs, fd, idx, &c);
		if (err)
			return err;
	}
	return 0;
}

static void punch_range(struct memfs *fs, struct memfs_inode *ino, uint64_t off,
			uint64_t end)
{
	struct memfs_data *fd = &ino->u.data;
	uint64_t head = off >> MEMFS_CHUNK_SHIFT,
		 tail = end >> MEMFS_CHUNK_SHIFT;

	if (head == tail) {
		chunk_zero(fd, head, off & MEMFS_CHUNK_MASK,
			   end & MEMFS_CHUNK_MASK);
		return;
	}
	if (off & MEMFS_CHUNK_MASK) {
		chunk_zero(fd, head, off & MEMFS_CHUNK_MASK, MEMFS_CHUNK_SIZE);
		head++;
	}
	if (end & MEMFS_CHUNK_MASK)
		chunk_zero(fd, tail, 0, end & MEMFS_CHUNK_MASK);
	chunks_drop_range(fs, fd, head, tail);
}

int memfs_fallocate(struct fs_backend *b, uint64_t nodeid, uint64_t fh,
		    uint64_t offset, uint64_t length, uint32_t mode)
{
	struct memfs *fs = to_memfs(b);
	struct memfs_inode *ino;
	struct memfs_handle *h;
	struct timespec t;
	uint64_t end;
	int err;

	err = memfs_file_handle(fs, nodeid, fh, &h);
	if (err)
		return err;
	if (!memfs_can_write(h->flags))
		return -EBADF;
	if (mode & ~(FALLOC_FL_KEEP_SIZE | FALLOC_FL_PUNCH_HOLE))
		return -EOPNOTSUPP;
	if ((mode & FALLOC_FL_PUNCH_HOLE) && !(mode & FALLOC_FL_KEEP_SIZE))
		return -EOPNOTSUPP;
	if (!length)
		return -EINVAL;
	if (offset > MEMFS_MAX_FILE_SIZE ||
	    length > MEMFS_MAX_FILE_SIZE - offset)
		return -EFBIG;
	ino = h->inode;
	end = offset + length;
	if (mode & FALLOC_FL_PUNCH_HOLE) {
		punch_range(fs, ino, offset, end);
	} else {
		err = alloc_range(fs, &ino->u.data, offset >> MEMFS_CHUNK_SHIFT,
				  (end - 1) >> MEMFS_CHUNK_SHIFT);
		if (err)
			return err;
		if (!(mode & FALLOC_FL_KEEP_SIZE) && end > ino->size)
			ino->size = end;
	}
	t = memfs_now();
	ino->mtime = t;
	ino->ctime = t;
	return 0;
}

int64_t memfs_lseek(struct fs_backend *b, uint64_t nodeid, uint64_t fh,
		    uint64_t offset, uint32_t whence)
{
	struct memfs *fs = to_memfs(b);
	struct memfs_handle *h;
	struct memfs_data *fd;
	uint64_t idx, size;
	int err;

	err = memfs_file_handle(fs, nodeid, fh, &h);
	if (err)
		return err;
	if (whence != SEEK_DATA && whence != SEEK_HOLE)
		return -EINVAL;
	fd = &h->inode->u.data;
	size = h->inode->size;
	if (offset >= size)
		return -ENXIO;
	idx = offset >> MEMFS_CHUNK_SHIFT;
	if (whence == SEEK_DATA) {
		idx = radix__next(&fd->chunks, idx);
		if (idx == RADIX_NONE || idx << MEMFS_CHUNK_SHIFT >= size)
			return -ENXIO;
		return (int64_t)(idx << MEMFS_CHUNK_SHIFT > offset ?
					 idx << MEMFS_CHUNK_SHIFT :
					 offset);
	}
	/* SEEK_HOLE: the end of the run of chunks from offset on. */
	while (idx << MEMFS_CHUNK_SHIFT < size &&
	       radix__lookup(&fd->chunks, idx))
		idx++;
	if (idx << MEMFS_CHUNK_SHIFT <= offset)
		return (int64_t)offset;
	return (int64_t)min_u64(idx << MEMFS_CHUNK_SHIFT, size);
}
