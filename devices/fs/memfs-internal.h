/* SPDX-License-Identifier: GPL-2.0 */
#ifndef KILN_FS_MEMFS_INTERNAL_H
#define KILN_FS_MEMFS_INTERNAL_H

/*
 * Inside the `memory` backend: its objects, what each is charged, and the
 * helpers its files share. Nothing outside devices/fs/memfs*.c includes
 * this; the backend's interface is memfs.h.
 *
 *   memfs.c        the FUSE ops on names, attributes, handles and
 *                  directories; create, seed and destroy
 *   memfs-store.c  accounting, the inode, entry and handle tables,
 *                  directories' entry lists, inodes and handles
 *   memfs-data.c   file data: chunks in a radix tree, and the ops on it
 *                  (fallocate, lseek)
 *
 * All ops run on the device's one event loop thread: no locking.
 */
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

#include "devices/fs/memfs.h"
#include "lib/hashtable.h"
#include "lib/radix.h"
#include "lib/siphash.h"

#define container_of(ptr, type, member) \
	((type *)((char *)(ptr)-offsetof(type, member)))

#define MEMFS_CHUNK_SHIFT 12U
#define MEMFS_CHUNK_SIZE  (1ULL << MEMFS_CHUNK_SHIFT) /* bytes */
#define MEMFS_CHUNK_MASK  (MEMFS_CHUNK_SIZE - 1)
#define MEMFS_BLOCK_SIZE  4096U /* statfs f_bsize, st_blksize */
#define MEMFS_SECTOR	  512U	/* st_blocks unit */
/* The guest kernel's limit for FUSE files (MAX_LFS_FILESIZE). */
#define MEMFS_MAX_FILE_SIZE ((uint64_t)INT64_MAX)
#define MEMFS_MAX_HANDLES   65536U
#define MEMFS_LINK_MAX	    (UINT32_MAX - 1)
/* tmpfs's BOGO_DIRENT_SIZE: a directory's st_size per entry. */
#define MEMFS_DIRENT_BOGO 20U
#define NSEC_PER_SEC	  1000000000L
#define RELATIME_SECS	  (24 * 60 * 60) /* relatime: atime at least daily */

/* readdir offsets: "." is 1, ".." is 2, entries' cookies start above. */
#define COOKIE_DOT	1U
#define COOKIE_DOTDOT	2U
#define COOKIE_FIRST	3U
#define DIR_SLOTS_MIN	8U
#define DIR_COMPACT_MIN 32U /* tombstones before a directory is compacted */

#define TABLE_MIN_BITS	  6U /* buckets: 64 */
#define TABLE_MIN_BUCKETS (1U << TABLE_MIN_BITS)

/* ---- objects -------------------------------------------------------- */

/* An entry's place in its directory's readdir order. */
struct memfs_slot {
	uint64_t cookie;
	struct memfs_dirent *d; /* NULL: a removed entry's tombstone */
};

struct memfs_inode;

struct memfs_dirent {
	struct hlink hlink; /* in memfs.dents, key: name_hash() */
	struct memfs_inode *dir;
	struct memfs_inode *inode;
	uint64_t cookie;
	size_t namelen;
	char name[]; /* NUL-terminated */
};

struct memfs_data {
	struct radix_tree chunks; /* chunk index -> MEMFS_CHUNK_SIZE bytes */
	uint64_t nr_chunks;
};

struct memfs_dir {
	struct memfs_inode *parent; /* NULL once removed; root: itself */
	struct memfs_slot *slots;   /* ascending cookies */
	size_t nr;		    /* slots used, tombstones included */
	size_t cap;
	size_t live; /* entries */
};

struct memfs_inode {
	struct hlink link; /* key: the node id */
	uint32_t mode;
	uint32_t uid;
	uint32_t gid;
	uint32_t rdev;
	uint32_t nlink;
	uint32_t nopen; /* open handles */
	uint64_t nlookup;
	uint64_t size;
	struct timespec atime, mtime, ctime;
	union {
		struct memfs_data data; /* S_IFREG */
		struct memfs_dir dir;	/* S_IFDIR */
		char *target;		/* S_IFLNK */
	} u;
};

struct memfs_handle {
	struct hlink link; /* key: the fh */
	struct memfs_inode *inode;
	uint32_t flags; /* the guest's open flags */
	bool dir;
};

struct memfs {
	struct fs_backend b;
	char *name;
	uint64_t max_bytes;
	uint64_t used; /* bytes charged, <= max_bytes */
	uint64_t next_id;
	uint64_t next_fh;
	uint64_t next_cookie;
	uint64_t nr_inodes;
	uint8_t key[SIPHASH__KEY_LEN]; /* for entry names */
	struct hashtable inodes;
	struct hashtable handles;
	struct hashtable dents;
	struct radix_alloc chunk_nodes; /* files' radix nodes, charged */
	struct memfs_inode *root;
};

/* What the accounting charges for each object. */
#define INODE_COST	     sizeof(struct memfs_inode)
#define DIRENT_COST(namelen) (sizeof(struct memfs_dirent) + (namelen) + 1)
#define CHUNK_COST	     MEMFS_CHUNK_SIZE

static inline struct memfs *to_memfs(struct fs_backend *b)
{
	return container_of(b, struct memfs, b);
}

static inline uint64_t min_u64(uint64_t a, uint64_t b)
{
	return a < b ? a : b;
}

/* memfs-data.c: file data */
void memfs_data_setup(struct memfs *fs);
void memfs_data_free(struct memfs *fs, struct memfs_data *fd);
void memfs_data_truncate(struct memfs *fs, struct memfs_inode *ino,
			 uint64_t size);
uint64_t memfs_data_read(struct memfs_inode *ino, uint8_t *p, size_t len,
			 uint64_t off);
int64_t memfs_data_write(struct memfs *fs, struct memfs_inode *ino,
			 const uint8_t *p, size_t len, uint64_t off);
int memfs_fallocate(struct fs_backend *b, uint64_t nodeid, uint64_t fh,
		    uint64_t offset, uint64_t length, uint32_t mode);
int64_t memfs_lseek(struct fs_backend *b, uint64_t nodeid, uint64_t fh,
		    uint64_t offset, uint32_t whence);

/* memfs-store.c: accounting, tables, entries, inodes, handles */
int memfs_charge(struct memfs *fs, uint64_t bytes);
void memfs_uncharge(struct memfs *fs, uint64_t bytes);
struct timespec memfs_now(void);
void memfs_touch_atime(struct memfs_inode *ino);
void memfs_touch_dir(struct memfs_inode *dir, struct timespec t);
void memfs_table_insert(struct memfs *fs, struct hashtable *t, struct hlink *l,
			uint64_t key);
struct memfs_dirent *memfs_dent_find(const struct memfs *fs,
				     const struct memfs_inode *dir,
				     const char *name, size_t len);
int memfs_dir_reserve(struct memfs *fs, struct memfs_inode *dir);
size_t memfs_dir_search(const struct memfs_dir *md, uint64_t cookie);
void memfs_dent_attach(struct memfs *fs, struct memfs_dirent *d);
void memfs_dent_detach(struct memfs *fs, struct memfs_dirent *d);
struct memfs_dirent *memfs_dent_alloc(struct memfs_inode *dir, const char *name,
				      size_t len, struct memfs_inode *inode);
struct memfs_inode *memfs_inode_get(const struct memfs *fs, uint64_t id);
int memfs_dir_get(const struct memfs *fs, uint64_t id,
		  struct memfs_inode **out);
void memfs_inode_put(struct memfs *fs, struct memfs_inode *ino);
void memfs_fill_attr(const struct memfs_inode *ino, struct fuse_attr *a);
void memfs_fill_entry(struct memfs_inode *ino, struct fs_entry *out);
int memfs_name_check(const char *name, size_t *len);
int memfs_make_node(struct memfs *fs, const struct fs_ctx *ctx,
		    struct memfs_inode *dir, const char *name, uint32_t mode,
		    uint32_t rdev, const char *target,
		    struct memfs_inode **out);
void memfs_drop_entry(struct memfs *fs, struct memfs_dirent *d,
		      struct timespec t);
bool memfs_in_subtree(const struct memfs *fs, const struct memfs_inode *node,
		      const struct memfs_inode *ancestor);
int memfs_handle_new(struct memfs *fs, struct memfs_handle **out);
void memfs_handle_attach(struct memfs *fs, struct memfs_handle *h,
			 struct memfs_inode *ino, uint32_t flags, bool dir,
			 uint64_t *fh);
int memfs_handle_get(const struct memfs *fs, uint64_t nodeid, uint64_t fh,
		     bool dir, struct memfs_handle **out);
int memfs_handle_release(struct memfs *fs, uint64_t nodeid, uint64_t fh,
			 bool dir);
int memfs_file_handle(struct memfs *fs, uint64_t nodeid, uint64_t fh,
		      struct memfs_handle **h);
bool memfs_can_read(uint32_t flags);
bool memfs_can_write(uint32_t flags);

#endif
