// SPDX-License-Identifier: GPL-2.0
/*
 * The `memory` backend's storage of names: what it charges against
 * max_bytes, its tables (inodes and handles by id, entries by a keyed
 * hash of directory and name), each directory's entries in readdir
 * order, and inodes and handles from birth to release.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "devices/fs/memfs-internal.h"

/* ---- accounting, time ----------------------------------------------- */

int memfs_charge(struct memfs *fs, uint64_t bytes)
{
	if (bytes > fs->max_bytes - fs->used)
		return -ENOSPC;
	/* Written here only, read bare by memfs_usage (vm.metrics). */
	__atomic_store_n(&fs->used, fs->used + bytes, __ATOMIC_RELAXED);
	return 0;
}

void memfs_uncharge(struct memfs *fs, uint64_t bytes)
{
	__atomic_store_n(&fs->used, fs->used - bytes, __ATOMIC_RELAXED);
}

struct timespec memfs_now(void)
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
void memfs_touch_atime(struct memfs_inode *ino)
{
	struct timespec t = memfs_now();

	if (ts_cmp(&ino->atime, &ino->mtime) <= 0 ||
	    ts_cmp(&ino->atime, &ino->ctime) <= 0 ||
	    t.tv_sec - ino->atime.tv_sec >= RELATIME_SECS)
		ino->atime = t;
}

void memfs_touch_dir(struct memfs_inode *dir, struct timespec t)
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

	if (fs && n > old && memfs_charge(fs, (n - old) * sizeof(void *)))
		return;
	if (hashtable__resize(t, bits)) {
		if (fs && n > old)
			memfs_uncharge(fs, (n - old) * sizeof(void *));
		return;
	}
	if (fs && n < old)
		memfs_uncharge(fs, (old - n) * sizeof(void *));
}

void memfs_table_insert(struct memfs *fs, struct hashtable *t, struct hlink *l,
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

struct memfs_dirent *memfs_dent_find(const struct memfs *fs,
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
int memfs_dir_reserve(struct memfs *fs, struct memfs_inode *dir)
{
	struct memfs_dir *md = &dir->u.dir;
	struct memfs_slot *s;
	size_t cap;

	if (md->nr < md->cap)
		return 0;
	/* Double, or near a full max_bytes grow by the one slot needed. */
	cap = md->cap ? md->cap * 2 : DIR_SLOTS_MIN;
	if (memfs_charge(fs, (cap - md->cap) * sizeof(*s))) {
		cap = md->cap + 1;
		if (memfs_charge(fs, sizeof(*s)))
			return -ENOSPC;
	}
	s = reallocarray(md->slots, cap, sizeof(*s));
	if (!s) {
		memfs_uncharge(fs, (cap - md->cap) * sizeof(*s));
		return -ENOMEM;
	}
	md->slots = s;
	md->cap = cap;
	return 0;
}

/* The first slot whose cookie is above `cookie`. */
size_t memfs_dir_search(const struct memfs_dir *md, uint64_t cookie)
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
		memfs_uncharge(fs, md->cap * sizeof(*s));
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
	memfs_uncharge(fs, (md->cap - cap) * sizeof(*s));
	md->slots = s;
	md->cap = cap;
}

void memfs_dent_attach(struct memfs *fs, struct memfs_dirent *d)
{
	struct memfs_dir *md = &d->dir->u.dir;

	memfs_table_insert(
		fs, &fs->dents, &d->hlink,
		name_hash(fs, d->dir->link.key, d->name, d->namelen));

	d->cookie = fs->next_cookie++;
	md->slots[md->nr].cookie = d->cookie;
	md->slots[md->nr].d = d;
	md->nr++;
	md->live++;
}

void memfs_dent_detach(struct memfs *fs, struct memfs_dirent *d)
{
	struct memfs_dir *md = &d->dir->u.dir;
	size_t i;

	table_remove(fs, &fs->dents, &d->hlink);
	i = memfs_dir_search(md, d->cookie - 1);
	if (i < md->nr && md->slots[i].d == d) {
		md->slots[i].d = NULL;
		md->live--;
	}
	dir_trim(fs, md);
}

struct memfs_dirent *memfs_dent_alloc(struct memfs_inode *dir, const char *name,
				      size_t len, struct memfs_inode *inode)
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

/* ---- inodes --------------------------------------------------------- */

struct memfs_inode *memfs_inode_get(const struct memfs *fs, uint64_t id)
{
	struct hlink *l = hashtable__first(&fs->inodes, id);

	return l ? hashtable__entry(l, struct memfs_inode, link) : NULL;
}

int memfs_dir_get(const struct memfs *fs, uint64_t id, struct memfs_inode **out)
{
	struct memfs_inode *dir = memfs_inode_get(fs, id);

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
		memfs_data_free(fs, &ino->u.data);
	} else if (S_ISLNK(ino->mode)) {
		memfs_uncharge(fs, ino->size + 1);
		free(ino->u.target);
	} else if (S_ISDIR(ino->mode)) {
		free(ino->u.dir.slots);
		memfs_uncharge(fs, ino->u.dir.cap * sizeof(struct memfs_slot));
	}
	memfs_uncharge(fs, INODE_COST);
	fs->nr_inodes--;
	free(ino);
}

/* The inode goes when nothing names it: no link, lookup or handle. */
void memfs_inode_put(struct memfs *fs, struct memfs_inode *ino)
{
	if (ino != fs->root && !ino->nlink && !ino->nlookup && !ino->nopen)
		inode_free(fs, ino);
}

void memfs_fill_attr(const struct memfs_inode *ino, struct fuse_attr *a)
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
void memfs_fill_entry(struct memfs_inode *ino, struct fs_entry *out)
{
	ino->nlookup++;
	memset(out, 0, sizeof(*out));
	out->nodeid = ino->link.key;
	out->generation = 0; /* ids are never reused */
	memfs_fill_attr(ino, &out->attr);
}

/* The server checks names; checked again since ids and names are cheap. */
int memfs_name_check(const char *name, size_t *len)
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
 * holds no lookup yet: memfs_fill_entry() counts the one the guest gets.
 */
int memfs_make_node(struct memfs *fs, const struct fs_ctx *ctx,
		    struct memfs_inode *dir, const char *name, uint32_t mode,
		    uint32_t rdev, const char *target, struct memfs_inode **out)
{
	size_t len, tlen = 0;
	struct memfs_dirent *d;
	struct memfs_inode *ino;
	struct timespec t;
	uint64_t cost;
	int err;

	err = memfs_name_check(name, &len);
	if (err)
		return err;
	if (!dir->nlink)
		return -ENOENT; /* removed: no new entries */
	if (memfs_dent_find(fs, dir, name, len))
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
	if (memfs_charge(fs, cost))
		return -ENOSPC;
	err = memfs_dir_reserve(fs, dir);
	if (err)
		goto out_uncharge;
	err = -ENOMEM;
	ino = calloc(1, sizeof(*ino));
	if (!ino)
		goto out_uncharge;
	d = memfs_dent_alloc(dir, name, len, ino);
	if (!d)
		goto out_free_inode;
	if (target) {
		ino->u.target = strndup(target, tlen);
		if (!ino->u.target)
			goto out_free_dirent;
		ino->size = tlen;
	}

	t = memfs_now();
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
	memfs_table_insert(fs, &fs->inodes, &ino->link, ino->link.key);
	fs->nr_inodes++;
	memfs_dent_attach(fs, d);
	memfs_touch_dir(dir, t);
	*out = ino;
	return 0;

out_free_dirent:
	free(d);
out_free_inode:
	free(ino);
out_uncharge:
	memfs_uncharge(fs, cost);
	return err;
}

/* Removes an entry; the caller puts the inode once done with it. */
void memfs_drop_entry(struct memfs *fs, struct memfs_dirent *d,
		      struct timespec t)
{
	struct memfs_inode *dir = d->dir, *ino = d->inode;

	memfs_dent_detach(fs, d);
	memfs_uncharge(fs, DIRENT_COST(d->namelen));
	free(d);
	if (S_ISDIR(ino->mode)) {
		ino->nlink = 0;
		ino->u.dir.parent = NULL;
		dir->nlink--;
	} else {
		ino->nlink--;
	}
	ino->ctime = t;
	memfs_touch_dir(dir, t);
}

/* Is node ancestor itself or beneath it? */
bool memfs_in_subtree(const struct memfs *fs, const struct memfs_inode *node,
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

int memfs_handle_new(struct memfs *fs, struct memfs_handle **out)
{
	if (fs->handles.count >= MEMFS_MAX_HANDLES)
		return -ENFILE;
	*out = calloc(1, sizeof(**out));
	return *out ? 0 : -ENOMEM;
}

void memfs_handle_attach(struct memfs *fs, struct memfs_handle *h,
			 struct memfs_inode *ino, uint32_t flags, bool dir,
			 uint64_t *fh)
{
	h->link.key = fs->next_fh++;
	h->inode = ino;
	h->flags = flags;
	h->dir = dir;
	ino->nopen++;
	memfs_table_insert(NULL, &fs->handles, &h->link, h->link.key);
	*fh = h->link.key;
}

int memfs_handle_get(const struct memfs *fs, uint64_t nodeid, uint64_t fh,
		     bool dir, struct memfs_handle **out)
{
	struct memfs_handle *h;
	struct hlink *l;

	if (!memfs_inode_get(fs, nodeid))
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

int memfs_handle_release(struct memfs *fs, uint64_t nodeid, uint64_t fh,
			 bool dir)
{
	struct memfs_handle *h;
	struct memfs_inode *ino;
	int err;

	err = memfs_handle_get(fs, nodeid, fh, dir, &h);
	if (err)
		return err;
	ino = h->inode;
	table_remove(NULL, &fs->handles, &h->link);
	free(h);
	ino->nopen--;
	memfs_inode_put(fs, ino);
	return 0;
}

/* An open regular file's handle. */
int memfs_file_handle(struct memfs *fs, uint64_t nodeid, uint64_t fh,
		      struct memfs_handle **h)
{
	int err = memfs_handle_get(fs, nodeid, fh, false, h);

	if (err)
		return err;
	return S_ISREG((*h)->inode->mode) ? 0 : -EBADF;
}

bool memfs_can_read(uint32_t flags)
{
	return (flags & O_ACCMODE) == O_RDONLY || (flags & O_ACCMODE) == O_RDWR;
}

bool memfs_can_write(uint32_t flags)
{
	return (flags & O_ACCMODE) == O_WRONLY || (flags & O_ACCMODE) == O_RDWR;
}
