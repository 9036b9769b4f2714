// SPDX-License-Identifier: GPL-2.0
/*
 * memfs.c - the `memory` mount source: an in-RAM POSIX file system.
 *
 * Objects:
 *  - inodes, found by node id in a hash table (ids are handed out from a
 *    64-bit counter and never reused, so a stale or forged id misses);
 *  - directory entries, found by (directory, name) in one hash table
 *    keyed with SipHash (the guest picks the names: a keyed hash keeps it
 *    from flooding one bucket), and listed per directory in an array
 *    kept in cookie order for readdir;
 *  - file data in MEMFS_CHUNK_SIZE chunks in a radix tree per file, so a
 *    sparse file costs only the chunks written;
 *  - open handles, found by fh in a hash table, at most MEMFS_MAX_HANDLES.
 *
 * Everything the guest can make us allocate is charged to `used`, which
 * never exceeds max_bytes: inodes, entries and their names, symlink
 * targets, data chunks, radix tree nodes, directories' slot arrays and the
 * inode and entry tables' buckets, each at its size. Open handles are
 * bounded by count instead. The charge is the memory held up to malloc's
 * own overhead.
 *
 * All ops run on the device's one event loop thread: no locking.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/falloc.h>
#include <linux/fs.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

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

static uint64_t min_u64(uint64_t a, uint64_t b)
{
	return a < b ? a : b;
}

/* ---- accounting, time ----------------------------------------------- */

static int charge(struct memfs *fs, uint64_t bytes)
{
	if (bytes > fs->max_bytes - fs->used)
		return -ENOSPC;
	fs->used += bytes;
	return 0;
}

static void uncharge(struct memfs *fs, uint64_t bytes)
{
	fs->used -= bytes;
}

static struct timespec now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return ts;
}

static int ts_cmp(const struct timespec *a, const struct timespec *b)
{
	if (a->tv_sec != b->tv_sec)
		return a->tv_sec < b->tv_sec ? -1 : 1;
	if (a->tv_nsec != b->tv_nsec)
		return a->tv_nsec < b->tv_nsec ? -1 : 1;
	return 0;
}

/* relatime, as Linux mounts by default. */
static void touch_atime(struct memfs_inode *ino)
{
	struct timespec t = now();

	if (ts_cmp(&ino->atime, &ino->mtime) <= 0 ||
	    ts_cmp(&ino->atime, &ino->ctime) <= 0 ||
	    t.tv_sec - ino->atime.tv_sec >= RELATIME_SECS)
		ino->atime = t;
}

static void touch_dir(struct memfs_inode *dir, struct timespec t)
{
	dir->mtime = t;
	dir->ctime = t;
}

static uint64_t name_hash(const struct memfs *fs, uint64_t dir_id,
			  const char *name, size_t len)
{
	uint8_t buf[sizeof(uint64_t) + FS_NAME_MAX];

	memcpy(buf, &dir_id, sizeof(dir_id));
	memcpy(buf + sizeof(dir_id), name, len);
	return siphash__24(fs->key, buf, sizeof(dir_id) + len);
}

/* ---- tables --------------------------------------------------------- */

/*
 * The bucket arrays of the inode and entry tables are charged (fs set);
 * the handle table's is not (fs NULL): handles are bounded by count.
 * A table doubles when it holds as many entries as buckets and halves
 * below one entry in eight buckets, so it follows what is held now.
 * Growing is best effort: without the room or the memory, chains just get
 * longer.
 */
static void table_resize(struct memfs *fs, struct hashtable *t,
			 unsigned int bits)
{
	size_t old = hashtable__buckets(t), n = (size_t)1 << bits;

	if (fs && n > old && charge(fs, (n - old) * sizeof(void *)))
		return;
	if (hashtable__resize(t, bits)) {
		if (fs && n > old)
			uncharge(fs, (n - old) * sizeof(void *));
		return;
	}
	if (fs && n < old)
		uncharge(fs, (old - n) * sizeof(void *));
}

static void table_insert(struct memfs *fs, struct hashtable *t, struct hlink *l,
			 uint64_t key)
{
	if (t->count >= hashtable__buckets(t))
		table_resize(fs, t, t->bits + 1);
	hashtable__add(t, l, key);
}

static void table_remove(struct memfs *fs, struct hashtable *t, struct hlink *l)
{
	hashtable__del(t, l);
	if (t->bits > TABLE_MIN_BITS && t->count < hashtable__buckets(t) / 8)
		table_resize(fs, t, t->bits - 1);
}

static struct memfs_dirent *dent_find(const struct memfs *fs,
				      const struct memfs_inode *dir,
				      const char *name, size_t len)
{
	uint64_t h = name_hash(fs, dir->link.key, name, len);
	struct memfs_dirent *d;
	struct hlink *l;

	for (l = hashtable__first(&fs->dents, h); l; l = hashtable__next(l)) {
		d = hashtable__entry(l, struct memfs_dirent, hlink);
		if (d->dir == dir && d->namelen == len &&
		    !memcmp(d->name, name, len))
			return d;
	}
	return NULL;
}

/* ---- directory slots ------------------------------------------------ */

/*
 * Each directory's slot array is charged as it is: room for one more
 * entry is made (and charged) before anything changes, so attaching one
 * cannot fail.
 */
static int dir_reserve(struct memfs *fs, struct memfs_inode *dir)
{
	struct memfs_dir *md = &dir->u.dir;
	struct memfs_slot *s;
	size_t cap;

	if (md->nr < md->cap)
		return 0;
	/* Double, or near a full max_bytes grow by the one slot needed. */
	cap = md->cap ? md->cap * 2 : DIR_SLOTS_MIN;
	if (charge(fs, (cap - md->cap) * sizeof(*s))) {
		cap = md->cap + 1;
		if (charge(fs, sizeof(*s)))
			return -ENOSPC;
	}
	s = reallocarray(md->slots, cap, sizeof(*s));
	if (!s) {
		uncharge(fs, (cap - md->cap) * sizeof(*s));
		return -ENOMEM;
	}
	md->slots = s;
	md->cap = cap;
	return 0;
}

/* The first slot whose cookie is above `cookie`. */
static size_t dir_search(const struct memfs_dir *md, uint64_t cookie)
{
	size_t lo = 0, hi = md->nr, mid;

	while (lo < hi) {
		mid = lo + (hi - lo) / 2;
		if (md->slots[mid].cookie <= cookie)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo;
}

/*
 * After a removal: tombstones go once they outnumber the entries, and the
 * array shrinks to at most twice what it holds (an empty directory holds
 * no array at all). Cookies stay, so offsets the guest holds stay valid.
 */
static void dir_trim(struct memfs *fs, struct memfs_dir *md)
{
	struct memfs_slot *s;
	size_t i, n = 0, cap;

	while (md->nr && !md->slots[md->nr - 1].d)
		md->nr--;
	if (md->nr - md->live >= DIR_COMPACT_MIN &&
	    md->nr - md->live > md->live) {
		for (i = 0; i < md->nr; i++)
			if (md->slots[i].d)
				md->slots[n++] = md->slots[i];
		md->nr = n;
	}
	if (!md->nr) {
		free(md->slots);
		uncharge(fs, md->cap * sizeof(*s));
		md->slots = NULL;
		md->cap = 0;
		return;
	}
	cap = 2 * (md->nr > DIR_SLOTS_MIN ? md->nr : DIR_SLOTS_MIN);
	if (md->cap <= 2 * cap)
		return;
	s = reallocarray(md->slots, cap, sizeof(*s));
	if (!s)
		return;
	uncharge(fs, (md->cap - cap) * sizeof(*s));
	md->slots = s;
	md->cap = cap;
}

static void dent_attach(struct memfs *fs, struct memfs_dirent *d)
{
	struct memfs_dir *md = &d->dir->u.dir;

	table_insert(fs, &fs->dents, &d->hlink,
		     name_hash(fs, d->dir->link.key, d->name, d->namelen));

	d->cookie = fs->next_cookie++;
	md->slots[md->nr].cookie = d->cookie;
	md->slots[md->nr].d = d;
	md->nr++;
	md->live++;
}

static void dent_detach(struct memfs *fs, struct memfs_dirent *d)
{
	struct memfs_dir *md = &d->dir->u.dir;
	size_t i;

	table_remove(fs, &fs->dents, &d->hlink);
	i = dir_search(md, d->cookie - 1);
	if (i < md->nr && md->slots[i].d == d) {
		md->slots[i].d = NULL;
		md->live--;
	}
	dir_trim(fs, md);
}

static struct memfs_dirent *dent_alloc(struct memfs_inode *dir,
				       const char *name, size_t len,
				       struct memfs_inode *inode)
{
	struct memfs_dirent *d = malloc(sizeof(*d) + len + 1);

	if (!d)
		return NULL;
	d->dir = dir;
	d->inode = inode;
	d->namelen = len;
	memcpy(d->name, name, len);
	d->name[len] = '\0';
	return d;
}

/* ---- file data: a radix tree of chunks ------------------------------ */

/* The tree's nodes are charged like everything else the guest makes. */
static int chunk_node_alloc(void *ctx, size_t size, void **node)
{
	struct memfs *fs = ctx;

	if (charge(fs, size))
		return -ENOSPC;
	*node = calloc(1, size);
	if (!*node) {
		uncharge(fs, size);
		return -ENOMEM;
	}
	return 0;
}

static void chunk_node_free(void *ctx, void *node, size_t size)
{
	free(node);
	uncharge(ctx, size);
}

static void chunk_free(void *ctx, void *chunk)
{
	free(chunk);
	uncharge(ctx, CHUNK_COST);
}

static void data_free(struct memfs *fs, struct memfs_data *fd)
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
	if (charge(fs, CHUNK_COST))
		return -ENOSPC;
	c = calloc(1, MEMFS_CHUNK_SIZE);
	if (!c) {
		uncharge(fs, CHUNK_COST);
		return -ENOMEM;
	}
	err = radix__insert(&fd->chunks, idx, c, &fs->chunk_nodes);
	if (err) {
		free(c);
		uncharge(fs, CHUNK_COST);
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
static void data_truncate(struct memfs *fs, struct memfs_inode *ino,
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

static uint64_t data_read(struct memfs_inode *ino, uint8_t *p, size_t len,
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
static int64_t data_write(struct memfs *fs, struct memfs_inode *ino,
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

/* ---- inodes --------------------------------------------------------- */

static struct memfs_inode *inode_get(const struct memfs *fs, uint64_t id)
{
	struct hlink *l = hashtable__first(&fs->inodes, id);

	return l ? hashtable__entry(l, struct memfs_inode, link) : NULL;
}

static int dir_get(const struct memfs *fs, uint64_t id,
		   struct memfs_inode **out)
{
	struct memfs_inode *dir = inode_get(fs, id);

	if (!dir)
		return -ESTALE;
	if (!S_ISDIR(dir->mode))
		return -ENOTDIR;
	*out = dir;
	return 0;
}

static void inode_free(struct memfs *fs, struct memfs_inode *ino)
{
	table_remove(fs, &fs->inodes, &ino->link);
	if (S_ISREG(ino->mode)) {
		data_free(fs, &ino->u.data);
	} else if (S_ISLNK(ino->mode)) {
		uncharge(fs, ino->size + 1);
		free(ino->u.target);
	} else if (S_ISDIR(ino->mode)) {
		free(ino->u.dir.slots);
		uncharge(fs, ino->u.dir.cap * sizeof(struct memfs_slot));
	}
	uncharge(fs, INODE_COST);
	fs->nr_inodes--;
	free(ino);
}

/* The inode goes when nothing names it: no link, lookup or handle. */
static void inode_put(struct memfs *fs, struct memfs_inode *ino)
{
	if (ino != fs->root && !ino->nlink && !ino->nlookup && !ino->nopen)
		inode_free(fs, ino);
}

static void fill_attr(const struct memfs_inode *ino, struct fuse_attr *a)
{
	memset(a, 0, sizeof(*a));
	a->ino = ino->link.key;
	a->mode = ino->mode;
	a->nlink = ino->nlink;
	a->uid = ino->uid;
	a->gid = ino->gid;
	a->rdev = ino->rdev;
	a->blksize = MEMFS_BLOCK_SIZE;
	if (S_ISDIR(ino->mode)) {
		a->size = (ino->u.dir.live + 2) * MEMFS_DIRENT_BOGO;
	} else {
		a->size = ino->size;
		if (S_ISREG(ino->mode))
			a->blocks = ino->u.data.nr_chunks *
				    (MEMFS_CHUNK_SIZE / MEMFS_SECTOR);
	}
	a->atime = (uint64_t)ino->atime.tv_sec;
	a->atimensec = (uint32_t)ino->atime.tv_nsec;
	a->mtime = (uint64_t)ino->mtime.tv_sec;
	a->mtimensec = (uint32_t)ino->mtime.tv_nsec;
	a->ctime = (uint64_t)ino->ctime.tv_sec;
	a->ctimensec = (uint32_t)ino->ctime.tv_nsec;
}

/* An entry for the guest: it now holds one more lookup. */
static void fill_entry(struct memfs_inode *ino, struct fs_entry *out)
{
	ino->nlookup++;
	memset(out, 0, sizeof(*out));
	out->nodeid = ino->link.key;
	out->generation = 0; /* ids are never reused */
	fill_attr(ino, &out->attr);
}

/* The server checks names; checked again since ids and names are cheap. */
static int name_check(const char *name, size_t *len)
{
	size_t n = strnlen(name, FS_NAME_MAX + 1);

	if (n > FS_NAME_MAX)
		return -ENAMETOOLONG;
	if (!n || memchr(name, '/', n) || !strcmp(name, ".") ||
	    !strcmp(name, ".."))
		return -EINVAL;
	*len = n;
	return 0;
}

/*
 * Creates `name` in dir with the given type and permission bits (umask
 * already applied), owned by ctx; a symlink gets target. The new inode
 * holds no lookup yet: fill_entry() counts the one the guest gets.
 */
static int make_node(struct memfs *fs, const struct fs_ctx *ctx,
		     struct memfs_inode *dir, const char *name, uint32_t mode,
		     uint32_t rdev, const char *target,
		     struct memfs_inode **out)
{
	size_t len, tlen = 0;
	struct memfs_dirent *d;
	struct memfs_inode *ino;
	struct timespec t;
	uint64_t cost;
	int err;

	err = name_check(name, &len);
	if (err)
		return err;
	if (!dir->nlink)
		return -ENOENT; /* removed: no new entries */
	if (dent_find(fs, dir, name, len))
		return -EEXIST;
	if (S_ISDIR(mode) && dir->nlink >= MEMFS_LINK_MAX)
		return -EMLINK;
	if (target) {
		tlen = strnlen(target, FS_PATH_MAX + 1);
		if (!tlen)
			return -ENOENT;
		if (tlen > FS_PATH_MAX)
			return -ENAMETOOLONG;
	}
	cost = INODE_COST + DIRENT_COST(len) + (target ? tlen + 1 : 0);
	if (charge(fs, cost))
		return -ENOSPC;
	err = dir_reserve(fs, dir);
	if (err)
		goto out_uncharge;
	err = -ENOMEM;
	ino = calloc(1, sizeof(*ino));
	if (!ino)
		goto out_uncharge;
	d = dent_alloc(dir, name, len, ino);
	if (!d)
		goto out_free_inode;
	if (target) {
		ino->u.target = strndup(target, tlen);
		if (!ino->u.target)
			goto out_free_dirent;
		ino->size = tlen;
	}

	t = now();
	ino->link.key = fs->next_id++;
	ino->mode = mode;
	ino->uid = ctx->uid;
	ino->gid = ctx->gid;
	/* BSD group semantics under a set-group-ID directory, as Linux. */
	if (dir->mode & S_ISGID) {
		ino->gid = dir->gid;
		if (S_ISDIR(mode))
			ino->mode |= S_ISGID;
	}
	ino->rdev = rdev;
	ino->nlink = S_ISDIR(mode) ? 2 : 1;
	ino->atime = ino->mtime = ino->ctime = t;
	if (S_ISDIR(mode)) {
		ino->u.dir.parent = dir;
		dir->nlink++;
	}
	table_insert(fs, &fs->inodes, &ino->link, ino->link.key);
	fs->nr_inodes++;
	dent_attach(fs, d);
	touch_dir(dir, t);
	*out = ino;
	return 0;

out_free_dirent:
	free(d);
out_free_inode:
	free(ino);
out_uncharge:
	uncharge(fs, cost);
	return err;
}

/* Removes an entry; the caller puts the inode once done with it. */
static void drop_entry(struct memfs *fs, struct memfs_dirent *d,
		       struct timespec t)
{
	struct memfs_inode *dir = d->dir, *ino = d->inode;

	dent_detach(fs, d);
	uncharge(fs, DIRENT_COST(d->namelen));
	free(d);
	if (S_ISDIR(ino->mode)) {
		ino->nlink = 0;
		ino->u.dir.parent = NULL;
		dir->nlink--;
	} else {
		ino->nlink--;
	}
	ino->ctime = t;
	touch_dir(dir, t);
}

/* Is node ancestor itself or beneath it? */
static bool in_subtree(const struct memfs *fs, const struct memfs_inode *node,
		       const struct memfs_inode *ancestor)
{
	while (node) {
		if (node == ancestor)
			return true;
		if (node == fs->root)
			return false;
		node = node->u.dir.parent;
	}
	return false;
}

/* ---- handles -------------------------------------------------------- */

static int handle_new(struct memfs *fs, struct memfs_handle **out)
{
	if (fs->handles.count >= MEMFS_MAX_HANDLES)
		return -ENFILE;
	*out = calloc(1, sizeof(**out));
	return *out ? 0 : -ENOMEM;
}

static void handle_attach(struct memfs *fs, struct memfs_handle *h,
			  struct memfs_inode *ino, uint32_t flags, bool dir,
			  uint64_t *fh)
{
	h->link.key = fs->next_fh++;
	h->inode = ino;
	h->flags = flags;
	h->dir = dir;
	ino->nopen++;
	table_insert(NULL, &fs->handles, &h->link, h->link.key);
	*fh = h->link.key;
}

static int handle_get(const struct memfs *fs, uint64_t nodeid, uint64_t fh,
		      bool dir, struct memfs_handle **out)
{
	struct memfs_handle *h;
	struct hlink *l;

	if (!inode_get(fs, nodeid))
		return -ESTALE;
	l = hashtable__first(&fs->handles, fh);
	if (!l)
		return -EBADF;
	h = hashtable__entry(l, struct memfs_handle, link);
	if (h->inode->link.key != nodeid || h->dir != dir)
		return -EBADF;
	*out = h;
	return 0;
}

static int handle_release(struct memfs *fs, uint64_t nodeid, uint64_t fh,
			  bool dir)
{
	struct memfs_handle *h;
	struct memfs_inode *ino;
	int err;

	err = handle_get(fs, nodeid, fh, dir, &h);
	if (err)
		return err;
	ino = h->inode;
	table_remove(NULL, &fs->handles, &h->link);
	free(h);
	ino->nopen--;
	inode_put(fs, ino);
	return 0;
}

static bool can_read(uint32_t flags)
{
	return (flags & O_ACCMODE) == O_RDONLY || (flags & O_ACCMODE) == O_RDWR;
}

static bool can_write(uint32_t flags)
{
	return (flags & O_ACCMODE) == O_WRONLY || (flags & O_ACCMODE) == O_RDWR;
}

/* ---- ops ------------------------------------------------------------ */

static int memfs_lookup(struct fs_backend *b, uint64_t parent, const char *name,
			struct fs_entry *out)
{
	struct memfs *fs = to_memfs(b);
	struct memfs_inode *dir, *ino;
	struct memfs_dirent *d;
	size_t len;
	int err;

	err = dir_get(fs, parent, &dir);
	if (err)
		return err;
	/* "." and ".." only come from the guest's NFS export paths. */
	if (!strcmp(name, ".")) {
		fill_entry(dir, out);
		return 0;
	}
	if (!strcmp(name, "..")) {
		if (!dir->u.dir.parent)
			return -ENOENT;
		fill_entry(dir->u.dir.parent, out);
		return 0;
	}
	err = name_check(name, &len);
	if (err)
		return err;
	d = dent_find(fs, dir, name, len);
	if (!d)
		return -ENOENT;
	ino = d->inode;
	fill_entry(ino, out);
	return 0;
}

static void memfs_forget(struct fs_backend *b, uint64_t nodeid,
			 uint64_t nlookup)
{
	struct memfs *fs = to_memfs(b);
	struct memfs_inode *ino = inode_get(fs, nodeid);

	if (!ino)
		return;
	ino->nlookup -= min_u64(nlookup, ino->nlookup);
	inode_put(fs, ino);
}

static int memfs_getattr(struct fs_backend *b, uint64_t nodeid,
			 struct fuse_attr *out)
{
	struct memfs_inode *ino = inode_get(to_memfs(b), nodeid);

	if (!ino)
		return -ESTALE;
	fill_attr(ino, out);
	return 0;
}

static int set_time(struct timespec *ts, uint64_t sec, uint32_t nsec)
{
	if (nsec >= NSEC_PER_SEC)
		return -EINVAL;
	ts->tv_sec = (time_t)sec;
	ts->tv_nsec = nsec;
	return 0;
}

static int memfs_setattr(struct fs_backend *b, const struct fs_ctx *ctx,
			 uint64_t nodeid, const struct fuse_setattr_in *in,
			 struct fuse_attr *out)
{
	struct memfs *fs = to_memfs(b);
	struct memfs_inode *ino = inode_get(fs, nodeid);
	struct timespec t = now(), atime, mtime, ctime = t;
	uint32_t valid = in->valid;
	bool mtime_set = false;

	if (!ino)
		return -ESTALE;
	/* Check everything first: a refused setattr changes nothing. */
	atime = ino->atime;
	mtime = ino->mtime;
	if (valid & FATTR_SIZE) {
		if (S_ISDIR(ino->mode))
			return -EISDIR;
		if (!S_ISREG(ino->mode))
			return -EINVAL;
		if (in->size > MEMFS_MAX_FILE_SIZE)
			return -EFBIG;
	}
	if (valid & FATTR_ATIME) {
		if (valid & FATTR_ATIME_NOW)
			atime = t;
		else if (set_time(&atime, in->atime, in->atimensec))
			return -EINVAL;
	}
	if (valid & FATTR_MTIME) {
		mtime_set = true;
		if (valid & FATTR_MTIME_NOW)
			mtime = t;
		else if (set_time(&mtime, in->mtime, in->mtimensec))
			return -EINVAL;
	}
	if ((valid & FATTR_CTIME) && set_time(&ctime, in->ctime, in->ctimensec))
		return -EINVAL;

	if (valid & FATTR_MODE)
		ino->mode = (ino->mode & S_IFMT) | (in->mode & 07777);
	if (valid & FATTR_UID)
		ino->uid = in->uid;
	if (valid & FATTR_GID)
		ino->gid = in->gid;
	if ((valid & FATTR_KILL_SUIDGID) && S_ISREG(ino->mode)) {
		ino->mode &= ~S_ISUID;
		if (ino->mode & S_IXGRP)
			ino->mode &= ~S_ISGID;
	}
	if ((valid & FATTR_SIZE) && in->size != ino->size) {
		data_truncate(fs, ino, in->size);
		if (!mtime_set)
			mtime = t;
	}
	ino->atime = atime;
	ino->mtime = mtime;
	if (valid &
	    (FATTR_MODE | FATTR_UID | FATTR_GID | FATTR_SIZE | FATTR_ATIME |
	     FATTR_MTIME | FATTR_CTIME | FATTR_KILL_SUIDGID))
		ino->ctime = ctime;
	fill_attr(ino, out);
	return 0;
}

static ssize_t memfs_readlink(struct fs_backend *b, uint64_t nodeid, char *buf,
			      size_t size)
{
	struct memfs_inode *ino = inode_get(to_memfs(b), nodeid);
	size_t n;

	if (!ino)
		return -ESTALE;
	if (!S_ISLNK(ino->mode))
		return -EINVAL;
	n = min_u64(size, ino->size);
	memcpy(buf, ino->u.target, n);
	return (ssize_t)n;
}

static int create_node(struct fs_backend *b, const struct fs_ctx *ctx,
		       uint64_t parent, const char *name, uint32_t mode,
		       uint32_t rdev, const char *target,
		       struct memfs_inode **ino)
{
	struct memfs *fs = to_memfs(b);
	struct memfs_inode *dir;
	int err;

	err = dir_get(fs, parent, &dir);
	if (err)
		return err;
	return make_node(fs, ctx, dir, name, mode, rdev, target, ino);
}

static int memfs_mknod(struct fs_backend *b, const struct fs_ctx *ctx,
		       uint64_t parent, const char *name, uint32_t mode,
		       uint32_t rdev, uint32_t umask, struct fs_entry *out)
{
	struct memfs_inode *ino;
	uint32_t type = mode & S_IFMT;
	int err;

	switch (type) {
	case 0:
		type = S_IFREG;
		/* fall through */
	case S_IFREG:
	case S_IFIFO:
	case S_IFSOCK:
		break;
	case S_IFCHR:
	case S_IFBLK:
		return -EPERM; /* no device nodes in a memory mount */
	default:
		return -EINVAL;
	}
	err = create_node(b, ctx, parent, name, type | (mode & ~umask & 07777),
			  0, NULL, &ino);
	if (err)
		return err;
	fill_entry(ino, out);
	return 0;
}

static int memfs_mkdir(struct fs_backend *b, const struct fs_ctx *ctx,
		       uint64_t parent, const char *name, uint32_t mode,
		       uint32_t umask, struct fs_entry *out)
{
	struct memfs_inode *ino;
	int err;

	err = create_node(b, ctx, parent, name,
			  S_IFDIR | (mode & ~umask & 07777), 0, NULL, &ino);
	if (err)
		return err;
	fill_entry(ino, out);
	return 0;
}

static int memfs_symlink(struct fs_backend *b, const struct fs_ctx *ctx,
			 uint64_t parent, const char *name, const char *target,
			 struct fs_entry *out)
{
	struct memfs_inode *ino;
	int err;

	err = create_node(b, ctx, parent, name, S_IFLNK | 0777, 0, target,
			  &ino);
	if (err)
		return err;
	fill_entry(ino, out);
	return 0;
}

static int find_entry(struct memfs *fs, uint64_t parent, const char *name,
		      struct memfs_dirent **out)
{
	struct memfs_inode *dir;
	size_t len;
	int err;

	err = dir_get(fs, parent, &dir);
	if (err)
		return err;
	err = name_check(name, &len);
	if (err)
		return err;
	*out = dent_find(fs, dir, name, len);
	return *out ? 0 : -ENOENT;
}

static int memfs_unlink(struct fs_backend *b, uint64_t parent, const char *name)
{
	struct memfs *fs = to_memfs(b);
	struct memfs_dirent *d;
	struct memfs_inode *ino;
	int err;

	err = find_entry(fs, parent, name, &d);
	if (err)
		return err;
	ino = d->inode;
	if (S_ISDIR(ino->mode))
		return -EISDIR;
	drop_entry(fs, d, now());
	inode_put(fs, ino);
	return 0;
}

static int memfs_rmdir(struct fs_backend *b, uint64_t parent, const char *name)
{
	struct memfs *fs = to_memfs(b);
	struct memfs_dirent *d;
	struct memfs_inode *ino;
	int err;

	err = find_entry(fs, parent, name, &d);
	if (err)
		return err;
	ino = d->inode;
	if (!S_ISDIR(ino->mode))
		return -ENOTDIR;
	if (ino->u.dir.live)
		return -ENOTEMPTY;
	drop_entry(fs, d, now());
	inode_put(fs, ino);
	return 0;
}

static int rename_exchange(struct memfs *fs, struct memfs_dirent *od,
			   struct memfs_dirent *nd)
{
	struct memfs_inode *a = od->inode, *b = nd->inode;
	struct memfs_inode *odir = od->dir, *ndir = nd->dir;
	struct timespec t;

	if (a == b)
		return 0;
	if (S_ISDIR(a->mode) && in_subtree(fs, ndir, a))
		return -EINVAL;
	if (S_ISDIR(b->mode) && in_subtree(fs, odir, b))
		return -EINVAL;
	od->inode = b;
	nd->inode = a;
	if (odir != ndir) {
		if (S_ISDIR(a->mode)) {
			a->u.dir.parent = ndir;
			odir->nlink--;
			ndir->nlink++;
		}
		if (S_ISDIR(b->mode)) {
			b->u.dir.parent = odir;
			ndir->nlink--;
			odir->nlink++;
		}
	}
	t = now();
	a->ctime = t;
	b->ctime = t;
	touch_dir(odir, t);
	touch_dir(ndir, t);
	return 0;
}

static int memfs_rename(struct fs_backend *b, uint64_t parent, const char *name,
			uint64_t newparent, const char *newname, uint32_t flags)
{
	struct memfs *fs = to_memfs(b);
	struct memfs_inode *odir, *ndir, *src, *dst = NULL;
	struct memfs_dirent *od, *nd, *moved;
	uint64_t cost, release;
	struct timespec t;
	size_t newlen;
	int err;

	if (flags & ~(RENAME_NOREPLACE | RENAME_EXCHANGE))
		return -EINVAL;
	if ((flags & RENAME_NOREPLACE) && (flags & RENAME_EXCHANGE))
		return -EINVAL;
	err = find_entry(fs, parent, name, &od);
	if (err)
		return err;
	err = dir_get(fs, newparent, &ndir);
	if (err)
		return err;
	err = name_check(newname, &newlen);
	if (err)
		return err;
	if (!ndir->nlink)
		return -ENOENT;
	odir = od->dir;
	src = od->inode;
	nd = dent_find(fs, ndir, newname, newlen);
	if (flags & RENAME_EXCHANGE) {
		if (!nd)
			return -ENOENT;
		return rename_exchange(fs, od, nd);
	}
	if (nd && (flags & RENAME_NOREPLACE))
		return -EEXIST;
	if (nd) {
		dst = nd->inode;
		/* Two links to one file: POSIX says do nothing. */
		if (dst == src)
			return 0;
		if (S_ISDIR(src->mode) && !S_ISDIR(dst->mode))
			return -ENOTDIR;
		if (!S_ISDIR(src->mode) && S_ISDIR(dst->mode))
			return -EISDIR;
		if (S_ISDIR(dst->mode) && dst->u.dir.live)
			return -ENOTEMPTY;
	}
	if (S_ISDIR(src->mode) && in_subtree(fs, ndir, src))
		return -EINVAL;
	if (S_ISDIR(src->mode) && odir != ndir && !dst &&
	    ndir->nlink >= MEMFS_LINK_MAX)
		return -EMLINK;

	/* The net change in charge must fit; then nothing below fails. */
	cost = DIRENT_COST(newlen);
	release =
		DIRENT_COST(od->namelen) + (nd ? DIRENT_COST(nd->namelen) : 0);
	if (cost > release && cost - release > fs->max_bytes - fs->used)
		return -ENOSPC;
	err = dir_reserve(fs, ndir);
	if (err)
		return err;
	moved = dent_alloc(ndir, newname, newlen, src);
	if (!moved)
		return -ENOMEM;

	/*
	 * The new entry goes in first, into the slot reserved for it: taking
	 * the old ones out may shrink or free ndir's slot array.
	 */
	t = now();
	fs->used += cost;
	dent_attach(fs, moved);
	if (nd)
		drop_entry(fs, nd, t);
	dent_detach(fs, od);
	uncharge(fs, DIRENT_COST(od->namelen));
	free(od);
	if (S_ISDIR(src->mode) && odir != ndir) {
		src->u.dir.parent = ndir;
		odir->nlink--;
		ndir->nlink++;
	}
	src->ctime = t;
	touch_dir(odir, t);
	touch_dir(ndir, t);
	if (dst)
		inode_put(fs, dst);
	return 0;
}

static int memfs_link(struct fs_backend *b, uint64_t nodeid, uint64_t newparent,
		      const char *newname, struct fs_entry *out)
{
	struct memfs *fs = to_memfs(b);
	struct memfs_inode *ino = inode_get(fs, nodeid), *dir;
	struct memfs_dirent *d;
	struct timespec t;
	size_t len;
	int err;

	if (!ino)
		return -ESTALE;
	if (S_ISDIR(ino->mode))
		return -EPERM;
	err = dir_get(fs, newparent, &dir);
	if (err)
		return err;
	err = name_check(newname, &len);
	if (err)
		return err;
	if (!dir->nlink)
		return -ENOENT;
	if (dent_find(fs, dir, newname, len))
		return -EEXIST;
	if (!ino->nlink)
		return -ENOENT; /* unlinked: cannot come back */
	if (ino->nlink >= MEMFS_LINK_MAX)
		return -EMLINK;
	if (charge(fs, DIRENT_COST(len)))
		return -ENOSPC;
	err = dir_reserve(fs, dir);
	if (err)
		goto out_uncharge;
	d = dent_alloc(dir, newname, len, ino);
	if (!d) {
		err = -ENOMEM;
		goto out_uncharge;
	}
	dent_attach(fs, d);
	ino->nlink++;
	t = now();
	ino->ctime = t;
	touch_dir(dir, t);
	fill_entry(ino, out);
	return 0;

out_uncharge:
	uncharge(fs, DIRENT_COST(len));
	return err;
}

static int open_check(const struct memfs_inode *ino)
{
	if (S_ISDIR(ino->mode))
		return -EISDIR;
	if (S_ISLNK(ino->mode))
		return -ELOOP;
	if (!S_ISREG(ino->mode))
		return -ENXIO; /* FIFOs and sockets: the guest kernel's */
	return 0;
}

static int memfs_open(struct fs_backend *b, uint64_t nodeid, uint32_t flags,
		      uint64_t *fh, uint32_t *open_flags)
{
	struct memfs *fs = to_memfs(b);
	struct memfs_inode *ino = inode_get(fs, nodeid);
	struct memfs_handle *h;
	struct timespec t;
	int err;

	if (!ino)
		return -ESTALE;
	err = open_check(ino);
	if (err)
		return err;
	err = handle_new(fs, &h);
	if (err)
		return err;
	/* FUSE_ATOMIC_O_TRUNC: the truncation comes with the open. */
	if ((flags & O_TRUNC) && can_write(flags)) {
		data_truncate(fs, ino, 0);
		t = now();
		ino->mtime = t;
		ino->ctime = t;
	}
	handle_attach(fs, h, ino, flags, false, fh);
	*open_flags = 0;
	return 0;
}

static int memfs_create(struct fs_backend *b, const struct fs_ctx *ctx,
			uint64_t parent, const char *name, uint32_t mode,
			uint32_t flags, uint32_t umask, struct fs_entry *out,
			uint64_t *fh, uint32_t *open_flags)
{
	struct memfs *fs = to_memfs(b);
	struct memfs_handle *h;
	struct memfs_inode *ino;
	int err;

	err = handle_new(fs, &h);
	if (err)
		return err;
	err = create_node(b, ctx, parent, name,
			  S_IFREG | (mode & ~umask & 07777), 0, NULL, &ino);
	if (err) {
		free(h);
		return err;
	}
	handle_attach(fs, h, ino, flags, false, fh);
	fill_entry(ino, out);
	*open_flags = 0;
	return 0;
}

static int file_handle(struct memfs *fs, uint64_t nodeid, uint64_t fh,
		       struct memfs_handle **h)
{
	int err = handle_get(fs, nodeid, fh, false, h);

	if (err)
		return err;
	return S_ISREG((*h)->inode->mode) ? 0 : -EBADF;
}

static ssize_t memfs_read(struct fs_backend *b, uint64_t nodeid, uint64_t fh,
			  const struct iovec *iov, int iovcnt, uint64_t offset)
{
	struct memfs *fs = to_memfs(b);
	struct memfs_handle *h;
	uint64_t done = 0, n;
	int err, i;

	err = file_handle(fs, nodeid, fh, &h);
	if (err)
		return err;
	if (!can_read(h->flags))
		return -EBADF;
	if (iovcnt < 0)
		return -EINVAL;
	if (offset >= h->inode->size)
		return 0;
	for (i = 0; i < iovcnt && done < SSIZE_MAX; i++) {
		n = data_read(h->inode, iov[i].iov_base,
			      min_u64(iov[i].iov_len, SSIZE_MAX - done),
			      offset + done);
		done += n;
		if (n < iov[i].iov_len)
			break;
	}
	touch_atime(h->inode);
	return (ssize_t)done;
}

static ssize_t memfs_write(struct fs_backend *b, uint64_t nodeid, uint64_t fh,
			   const struct iovec *iov, int iovcnt, uint64_t offset)
{
	struct memfs *fs = to_memfs(b);
	struct memfs_inode *ino;
	struct memfs_handle *h;
	uint64_t done = 0;
	struct timespec t;
	int64_t n = 0;
	int err, i;

	err = file_handle(fs, nodeid, fh, &h);
	if (err)
		return err;
	if (!can_write(h->flags))
		return -EBADF;
	if (iovcnt < 0)
		return -EINVAL;
	ino = h->inode;
	if (h->flags & O_APPEND)
		offset = ino->size;
	for (i = 0; i < iovcnt && done < SSIZE_MAX; i++) {
		if (offset > MEMFS_MAX_FILE_SIZE - done) {
			n = -EFBIG;
			break;
		}
		n = data_write(fs, ino, iov[i].iov_base,
			       min_u64(iov[i].iov_len, SSIZE_MAX - done),
			       offset + done);
		if (n < 0)
			break;
		done += (uint64_t)n;
		if ((uint64_t)n < iov[i].iov_len)
			break;
	}
	if (!done)
		return n < 0 ? n : 0;
	t = now();
	ino->mtime = t;
	ino->ctime = t;
	return (ssize_t)done;
}

static int memfs_flush(struct fs_backend *b, uint64_t nodeid, uint64_t fh)
{
	struct memfs_handle *h;

	return file_handle(to_memfs(b), nodeid, fh, &h);
}

static int memfs_release(struct fs_backend *b, uint64_t nodeid, uint64_t fh)
{
	return handle_release(to_memfs(b), nodeid, fh, false);
}

static int memfs_fsync(struct fs_backend *b, uint64_t nodeid, uint64_t fh,
		       bool datasync)
{
	struct memfs_handle *h;

	return file_handle(to_memfs(b), nodeid, fh, &h);
}

static int memfs_opendir(struct fs_backend *b, uint64_t nodeid, uint64_t *fh)
{
	struct memfs *fs = to_memfs(b);
	struct memfs_handle *h;
	struct memfs_inode *dir;
	int err;

	err = dir_get(fs, nodeid, &dir);
	if (err)
		return err;
	err = handle_new(fs, &h);
	if (err)
		return err;
	handle_attach(fs, h, dir, O_RDONLY, true, fh);
	return 0;
}

static uint32_t dt_type(uint32_t mode)
{
	return (mode & S_IFMT) >> 12; /* DT_* = S_IF* >> 12 */
}

static int memfs_readdir(struct fs_backend *b, uint64_t nodeid, uint64_t fh,
			 uint64_t offset, struct fs_dirbuf *out)
{
	struct memfs *fs = to_memfs(b);
	struct memfs_inode *dir;
	struct memfs_handle *h;
	struct memfs_dir *md;
	struct memfs_dirent *d;
	size_t i;
	int err;

	err = handle_get(fs, nodeid, fh, true, &h);
	if (err)
		return err;
	dir = h->inode;
	md = &dir->u.dir;
	if (!md->parent)
		return -ENOENT; /* removed, as getdents(2) on Linux */
	if (offset < COOKIE_DOT &&
	    !fs_dirbuf__add(out, ".", 1, dir->link.key, DT_DIR, COOKIE_DOT))
		return 0;
	if (offset < COOKIE_DOTDOT &&
	    !fs_dirbuf__add(out, "..", 2, md->parent->link.key, DT_DIR,
			    COOKIE_DOTDOT))
		return 0;
	for (i = dir_search(md,
			    offset > COOKIE_DOTDOT ? offset : COOKIE_DOTDOT);
	     i < md->nr; i++) {
		d = md->slots[i].d;
		if (!d)
			continue;
		if (!fs_dirbuf__add(out, d->name, d->namelen,
				    d->inode->link.key, dt_type(d->inode->mode),
				    d->cookie))
			break;
	}
	touch_atime(dir);
	return 0;
}

static int memfs_releasedir(struct fs_backend *b, uint64_t nodeid, uint64_t fh)
{
	return handle_release(to_memfs(b), nodeid, fh, true);
}

static int memfs_fsyncdir(struct fs_backend *b, uint64_t nodeid, uint64_t fh,
			  bool datasync)
{
	struct memfs_handle *h;

	return handle_get(to_memfs(b), nodeid, fh, true, &h);
}

/* What creating one more (short-named) file charges. */
#define FILE_COST (INODE_COST + DIRENT_COST(1))

static int memfs_statfs(struct fs_backend *b, uint64_t nodeid,
			struct fuse_kstatfs *out)
{
	struct memfs *fs = to_memfs(b);
	uint64_t avail = fs->max_bytes - fs->used;

	if (!inode_get(fs, nodeid))
		return -ESTALE;
	memset(out, 0, sizeof(*out));
	out->bsize = MEMFS_BLOCK_SIZE;
	out->frsize = MEMFS_BLOCK_SIZE;
	out->blocks = fs->max_bytes / MEMFS_BLOCK_SIZE;
	out->bfree = avail / MEMFS_BLOCK_SIZE;
	out->bavail = out->bfree;
	out->ffree = avail / FILE_COST;
	out->files = fs->nr_inodes + out->ffree;
	out->namelen = FS_NAME_MAX;
	return 0;
}

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

static int memfs_fallocate(struct fs_backend *b, uint64_t nodeid, uint64_t fh,
			   uint64_t offset, uint64_t length, uint32_t mode)
{
	struct memfs *fs = to_memfs(b);
	struct memfs_inode *ino;
	struct memfs_handle *h;
	struct timespec t;
	uint64_t end;
	int err;

	err = file_handle(fs, nodeid, fh, &h);
	if (err)
		return err;
	if (!can_write(h->flags))
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
	t = now();
	ino->mtime = t;
	ino->ctime = t;
	return 0;
}

static int64_t memfs_lseek(struct fs_backend *b, uint64_t nodeid, uint64_t fh,
			   uint64_t offset, uint32_t whence)
{
	struct memfs *fs = to_memfs(b);
	struct memfs_handle *h;
	struct memfs_data *fd;
	uint64_t idx, size;
	int err;

	err = file_handle(fs, nodeid, fh, &h);
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

static void memfs_destroy(struct fs_backend *b)
{
	struct memfs *fs = to_memfs(b);
	struct memfs_inode *ino;
	struct hlink *l, *next;
	size_t i;

	hashtable__for_each_safe(&fs->dents, i, l, next)
		free(hashtable__entry(l, struct memfs_dirent, hlink));
	hashtable__for_each_safe(&fs->handles, i, l, next)
		free(hashtable__entry(l, struct memfs_handle, link));
	hashtable__for_each_safe(&fs->inodes, i, l, next)
	{
		ino = hashtable__entry(l, struct memfs_inode, link);
		if (S_ISREG(ino->mode))
			data_free(fs, &ino->u.data);
		else if (S_ISLNK(ino->mode))
			free(ino->u.target);
		else if (S_ISDIR(ino->mode))
			free(ino->u.dir.slots);
		free(ino);
	}
	hashtable__exit(&fs->dents);
	hashtable__exit(&fs->handles);
	hashtable__exit(&fs->inodes);
	free(fs->name);
	free(fs);
}

static const struct fs_backend_ops memfs_ops = {
	.lookup = memfs_lookup,
	.forget = memfs_forget,
	.getattr = memfs_getattr,
	.setattr = memfs_setattr,
	.readlink = memfs_readlink,
	.mknod = memfs_mknod,
	.mkdir = memfs_mkdir,
	.symlink = memfs_symlink,
	.unlink = memfs_unlink,
	.rmdir = memfs_rmdir,
	.rename = memfs_rename,
	.link = memfs_link,
	.open = memfs_open,
	.create = memfs_create,
	.read = memfs_read,
	.write = memfs_write,
	.flush = memfs_flush,
	.release = memfs_release,
	.fsync = memfs_fsync,
	.opendir = memfs_opendir,
	.readdir = memfs_readdir,
	.releasedir = memfs_releasedir,
	.fsyncdir = memfs_fsyncdir,
	.statfs = memfs_statfs,
	.fallocate = memfs_fallocate,
	.lseek = memfs_lseek,
	.destroy = memfs_destroy,
};

/* ---- create and seed ------------------------------------------------ */

static const struct fs_ctx seed_owner = { .uid = 0, .gid = 0 };

static int seed_fail(const struct memfs *fs, const char *path, const char *why)
{
	pr_err("%s: seed file \"%s\": %s", fs->b.name, path ? path : "(null)",
	       why);
	return -EINVAL;
}

static int seed_nospc(const struct memfs *fs, const char *path)
{
	pr_err("%s: seed file \"%s\": does not fit in maxBytes (%llu bytes)",
	       fs->b.name, path, (unsigned long long)fs->max_bytes);
	return -ENOSPC;
}

static int seed_file(struct memfs *fs, const struct memfs_file *f)
{
	const char *path = f->path, *p, *end;
	char name[FS_NAME_MAX + 1];
	struct memfs_inode *cur = fs->root, *ino = NULL;
	struct memfs_dirent *d;
	int64_t n;
	size_t len;
	bool last;
	int err;

	if (!path || path[0] != '/')
		return seed_fail(fs, path, "not an absolute path");
	if (f->len && !f->data)
		return seed_fail(fs, path, "no data");
	for (p = path + 1;; p = end + 1) {
		end = strchrnul(p, '/');
		len = end - p;
		last = !*end;
		if (!len)
			return seed_fail(fs, path, "empty path component");
		if (len > FS_NAME_MAX)
			return seed_fail(
				fs, path,
				"path component longer than 255 bytes");
		if ((len == 1 && p[0] == '.') ||
		    (len == 2 && p[0] == '.' && p[1] == '.'))
			return seed_fail(fs, path,
					 "\".\" or \"..\" path component");
		memcpy(name, p, len);
		name[len] = '\0';
		d = dent_find(fs, cur, name, len);
		if (d && !last) {
			if (!S_ISDIR(d->inode->mode))
				return seed_fail(
					fs, path,
					"a parent is also a seed file");
			cur = d->inode;
			continue;
		}
		if (d)
			return seed_fail(
				fs, path,
				S_ISDIR(d->inode->mode) ?
					"also a parent of another seed file" :
					"duplicate path");
		err = make_node(fs, &seed_owner, cur, name,
				last ? S_IFREG | 0644 : S_IFDIR | 0755, 0, NULL,
				&ino);
		if (err == -ENOSPC)
			return seed_nospc(fs, path);
		if (err)
			return err;
		if (last)
			break;
		cur = ino;
	}
	if (!f->len)
		return 0;
	n = data_write(fs, ino, f->data, f->len, 0);
	if (n == -ENOSPC || (n >= 0 && (size_t)n < f->len))
		return seed_nospc(fs, path);
	return n < 0 ? (int)n : 0;
}

static void seed_key(struct memfs *fs)
{
	uint64_t k[2];
	struct timespec t;

	if (getrandom(fs->key, sizeof(fs->key), GRND_NONBLOCK) ==
	    sizeof(fs->key))
		return;
	/* No entropy yet: still a per-instance key, if a guessable one. */
	clock_gettime(CLOCK_MONOTONIC, &t);
	k[0] = (uint64_t)t.tv_nsec ^ (uint64_t)(uintptr_t)fs;
	k[1] = (uint64_t)t.tv_sec ^ ((uint64_t)getpid() << 32);
	memcpy(fs->key, k, sizeof(fs->key));
}

int memfs__create(struct fs_backend **out, const struct memfs_params *p)
{
	struct memfs *fs;
	struct memfs_inode *root;
	struct timespec t;
	unsigned int i;
	int err;

	fs = calloc(1, sizeof(*fs));
	if (!fs)
		return -ENOMEM;
	fs->b.ops = &memfs_ops;
	if (asprintf(&fs->name, "memory:%s", p->name ? p->name : "") < 0) {
		fs->name = NULL;
		err = -ENOMEM;
		goto out_destroy;
	}
	fs->b.name = fs->name;
	fs->max_bytes = p->max_bytes ? p->max_bytes : MEMFS_DEFAULT_MAX_BYTES;
	fs->next_id = FUSE_ROOT_ID + 1;
	fs->next_fh = 1;
	fs->next_cookie = COOKIE_FIRST;
	seed_key(fs);
	fs->chunk_nodes.node_alloc = chunk_node_alloc;
	fs->chunk_nodes.node_free = chunk_node_free;
	fs->chunk_nodes.ctx = fs;
	err = hashtable__init(&fs->inodes, TABLE_MIN_BITS);
	if (!err)
		err = hashtable__init(&fs->handles, TABLE_MIN_BITS);
	if (!err)
		err = hashtable__init(&fs->dents, TABLE_MIN_BITS);
	if (err)
		goto out_destroy;

	/* The root and the two charged tables' first buckets. */
	if (charge(fs, INODE_COST + 2 * TABLE_MIN_BUCKETS * sizeof(void *))) {
		pr_err("%s: maxBytes %llu is too small for the root",
		       fs->b.name, (unsigned long long)fs->max_bytes);
		err = -ENOSPC;
		goto out_destroy;
	}
	root = calloc(1, sizeof(*root));
	if (!root) {
		err = -ENOMEM;
		goto out_destroy;
	}
	t = now();
	root->link.key = FUSE_ROOT_ID;
	root->mode = S_IFDIR | 0755;
	root->nlink = 2;
	root->atime = root->mtime = root->ctime = t;
	root->u.dir.parent = root;
	table_insert(fs, &fs->inodes, &root->link, root->link.key);
	fs->nr_inodes = 1;
	fs->root = root;

	for (i = 0; i < p->nr_files; i++) {
		err = seed_file(fs, &p->files[i]);
		if (err)
			goto out_destroy;
	}
	*out = &fs->b;
	return 0;

out_destroy:
	memfs_destroy(&fs->b);
	return err;
}
