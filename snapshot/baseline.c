// SPDX-License-Identifier: GPL-2.0
/*
 * The baseline cache on disk (snapshot/baseline.h; Documentation/snapshots.md,
 * "Baselines"): owner-only, one snapshot directory per identity, leased
 * with flock(2), bounded by least-recently-used eviction. No KVM: what a
 * VM does with an entry is vmm/baseline-vm.c's.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "lib/errf.h"
#include "lib/log.h"
#include "snapshot/baseline.h"

#define OPEN_DIR      (O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)
#define DIGEST_PREFIX "sha256:"
#define BLOCK_BYTES   512ULL /* st_blocks' unit (stat(2)) */
#define NAME_LEN      (BASELINE_TMP_NAME_LEN + 16)
#define LOAD_ERR_LEN  512 /* snap_load__open's line */

static bool is_hex(const char *s, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (!((s[i] >= '0' && s[i] <= '9') ||
		      (s[i] >= 'a' && s[i] <= 'f')))
			return false;
	return s[n] == '\0';
}

int baseline__key(const char *identity_digest, char key[BASELINE_KEY_LEN + 1])
{
	size_t n = sizeof(DIGEST_PREFIX) - 1;

	if (!identity_digest || strncmp(identity_digest, DIGEST_PREFIX, n) ||
	    !is_hex(identity_digest + n, BASELINE_KEY_LEN))
		return -EINVAL;
	memcpy(key, identity_digest + n, BASELINE_KEY_LEN + 1);
	return 0;
}

int baseline__open_cache(const char *path, int *fd, char *err, size_t len)
{
	bool made = false;
	struct stat st;
	int ret;

	*fd = -1;
	if (mkdir(path, 0700) == 0)
		made = true;
	else if (errno != EEXIST)
		return errf(err, len, -errno, "%s: %s", path, strerror(errno));
	*fd = open(path, OPEN_DIR);
	if (*fd < 0)
		return errf(err, len, -errno, "%s: %s%s", path, strerror(errno),
			    errno == ELOOP || errno == ENOTDIR ?
				    " (a baseline cache is a directory, never "
				    "a symbolic link)" :
				    "");
	if (made && fchmod(*fd, 0700) < 0) { /* whatever the umask took */
		ret = -errno;
		goto out_fail;
	}
	if (fstat(*fd, &st) < 0) {
		ret = -errno;
		goto out_fail;
	}
	if (st.st_uid != geteuid()) {
		errf(err, len, -EPERM,
		     "%s: owned by uid %u, not this monitor's (%u): a baseline "
		     "cache must be owner-only",
		     path, (unsigned int)st.st_uid, (unsigned int)geteuid());
		ret = -EPERM;
		goto out_close;
	}
	if ((st.st_mode & 07777) != 0700) {
		errf(err, len, -EPERM,
		     "%s: mode %04o: a baseline cache must be owner-only "
		     "(0700)",
		     path, (unsigned int)(st.st_mode & 07777));
		ret = -EPERM;
		goto out_close;
	}
	return 0;

out_fail:
	errf(err, len, ret, "%s: %s", path, strerror(-ret));
out_close:
	close(*fd);
	*fd = -1;
	return ret;
}

/* ---- removing a directory of files --------------------------------- */

/*
 * Remove the flat directory name (a snapshot: regular files only) whose
 * descriptor dfd the caller holds under LOCK_EX. 0 or -errno.
 */
static int remove_flat(int cache_fd, const char *name, int dfd)
{
	struct dirent *de;
	int ret = 0, fd;
	DIR *d;

	fd = fcntl(dfd, F_DUPFD_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	d = fdopendir(fd);
	if (!d) {
		ret = -errno;
		close(fd);
		return ret;
	}
	rewinddir(d); /* the offset is shared with dfd */
	while ((de = readdir(d))) {
		if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
			continue;
		if (unlinkat(dfd, de->d_name, 0) < 0 && !ret)
			ret = -errno;
	}
	closedir(d);
	if (!ret && unlinkat(cache_fd, name, AT_REMOVEDIR) < 0)
		ret = -errno;
	return ret;
}

/*
 * The entry key, under LOCK_EX on dfd: renamed out of the way first (a
 * lookup no longer finds it, half removed or not), then removed.
 */
static int remove_entry(int cache_fd, const char *key, int dfd)
{
	char name[NAME_LEN];

	snprintf(name, sizeof(name), "%s%s-%d", BASELINE_EVICT_PREFIX, key,
		 (int)getpid());
	if (renameat(cache_fd, key, cache_fd, name) < 0)
		return -errno;
	return remove_flat(cache_fd, name, dfd);
}

int baseline__discard(int cache_fd, const char *key, int lease_fd)
{
	int ret;

	if (flock(lease_fd, LOCK_EX | LOCK_NB) < 0)
		return -errno; /* another VM leases it: it stays */
	ret = remove_entry(cache_fd, key, lease_fd);
	if (ret)
		pr_warn("baseline: removing %s: %s", key, strerror(-ret));
	return ret;
}

/* ---- lookup -------------------------------------------------------- */

/* Is dfd still what key names in the cache (not evicted meanwhile)? */
static bool still_there(int cache_fd, const char *key, int dfd)
{
	struct stat a, b;

	return !fstat(dfd, &a) &&
	       !fstatat(cache_fd, key, &b, AT_SYMLINK_NOFOLLOW) &&
	       a.st_dev == b.st_dev && a.st_ino == b.st_ino;
}

int baseline__lookup(int cache_fd, const char *cache, const char *key,
		     const struct snap_expect *want, struct snap_load *l,
		     int *lease_fd, char *why, size_t len)
{
	char path[PATH_MAX], err[LOAD_ERR_LEN];
	int fd, ret;

	*lease_fd = -1;
	why[0] = '\0';
	fd = openat(cache_fd, key, OPEN_DIR);
	if (fd < 0 && errno == ENOENT)
		return -ENOENT;
	if (fd < 0)
		return errf(why, len, -errno, "%s: %s", key, strerror(errno));
	if (flock(fd, LOCK_SH | LOCK_NB) < 0) {
		ret = -errno;
		close(fd);
		if (ret == -EWOULDBLOCK)
			return errf(why, len, ret,
				    "an exclusive lease is held on it (a "
				    "capture or an eviction)");
		return errf(why, len, ret, "its lease: %s", strerror(-ret));
	}
	if (!still_there(cache_fd, key, fd)) {
		close(fd); /* evicted between the open and the lease */
		return -ENOENT;
	}
	if ((size_t)snprintf(path, sizeof(path), "%s/%s", cache, key) >=
	    sizeof(path)) {
		close(fd);
		return errf(why, len, -ENAMETOOLONG, "%s: path too long",
			    cache);
	}
	ret = snap_load__open(l, path, want, err, sizeof(err));
	if (ret) {
		errf(why, len, ret, "%s", err);
		baseline__discard(cache_fd, key, fd);
		close(fd);
		return ret;
	}
	/* Least recently used: this use is the latest. */
	if (futimens(fd, NULL) < 0)
		pr_warn("baseline %s: marking %s used: %s", cache, key,
			strerror(errno));
	*lease_fd = fd;
	return 0;
}

/* ---- capture ------------------------------------------------------- */

int baseline__make_tmp(int cache_fd, const char *key, int *fd,
		       char name[BASELINE_TMP_NAME_LEN], char *err, size_t len)
{
	int ret;

	*fd = -1;
	snprintf(name, BASELINE_TMP_NAME_LEN, "%s%s-%d", BASELINE_TMP_PREFIX,
		 key, (int)getpid());
	if (mkdirat(cache_fd, name, 0700) < 0)
		return errf(err, len, -errno, "%s: %s", name, strerror(errno));
	*fd = openat(cache_fd, name, OPEN_DIR);
	if (*fd < 0) {
		ret = -errno;
		goto out_rmdir;
	}
	if (fchmod(*fd, 0700) < 0 || flock(*fd, LOCK_EX | LOCK_NB) < 0) {
		ret = -errno;
		close(*fd);
		*fd = -1;
		goto out_rmdir;
	}
	return 0;

out_rmdir:
	unlinkat(cache_fd, name, AT_REMOVEDIR);
	return errf(err, len, ret, "%s: %s", name, strerror(-ret));
}

int baseline__publish(int cache_fd, const char *tmp, const char *key, char *err,
		      size_t len)
{
	if (renameat2(cache_fd, tmp, cache_fd, key, RENAME_NOREPLACE) < 0)
		return errf(err, len, -errno, "renaming %s to %s: %s", tmp, key,
			    strerror(errno));
	/* The rename made durable; the entry's own files were synced. */
	if (fsync(cache_fd) < 0)
		pr_warn("baseline: syncing the cache after %s: %s", key,
			strerror(errno));
	return 0;
}

/* ---- eviction ------------------------------------------------------ */

struct entry {
	char key[BASELINE_KEY_LEN + 1];
	struct timespec used; /* the directory's mtime */
	uint64_t bytes;	      /* data bytes of its files */
};

static int by_use(const void *a, const void *b)
{
	const struct entry *x = a, *y = b;

	if (x->used.tv_sec != y->used.tv_sec)
		return x->used.tv_sec < y->used.tv_sec ? -1 : 1;
	if (x->used.tv_nsec != y->used.tv_nsec)
		return x->used.tv_nsec < y->used.tv_nsec ? -1 : 1;
	return strcmp(x->key, y->key);
}

/* A stream over the directory dfd (dfd stays ours); NULL with errno. */
static DIR *dir_stream(int dfd)
{
	int fd = fcntl(dfd, F_DUPFD_CLOEXEC, 0);
	DIR *d;

	if (fd < 0)
		return NULL;
	d = fdopendir(fd);
	if (!d) {
		close(fd);
		errno = ENOMEM;
		return NULL;
	}
	rewinddir(d);
	return d;
}

/* The data bytes of the files in the directory dfd. */
static int dir_bytes(int dfd, uint64_t *bytes)
{
	struct dirent *de;
	struct stat st;
	DIR *d;

	*bytes = 0;
	d = dir_stream(dfd);
	if (!d)
		return -errno;
	while ((de = readdir(d)))
		if (!fstatat(dfd, de->d_name, &st, AT_SYMLINK_NOFOLLOW) &&
		    S_ISREG(st.st_mode))
			*bytes += (uint64_t)st.st_blocks * BLOCK_BYTES;
	closedir(d);
	return 0;
}

/* A capture's or an eviction's leftover: removed if no one holds it. */
static void sweep(int cache_fd, const char *name)
{
	int fd = openat(cache_fd, name, OPEN_DIR), ret;

	if (fd < 0)
		return;
	if (!flock(fd, LOCK_EX | LOCK_NB)) {
		ret = remove_flat(cache_fd, name, fd);
		if (ret)
			pr_warn("baseline: removing the leftover %s: %s", name,
				strerror(-ret));
	}
	close(fd);
}

/* Every entry's use and size into *out (the caller frees it). */
static int list_entries(int cache_fd, struct entry **out, size_t *nr)
{
	struct entry *v = NULL, *nv;
	size_t n = 0, cap = 0;
	struct dirent *de;
	struct stat st;
	int efd;
	DIR *d;

	d = dir_stream(cache_fd);
	if (!d)
		return -errno;
	while ((de = readdir(d))) {
		const char *name = de->d_name;

		if (!strncmp(name, BASELINE_TMP_PREFIX,
			     sizeof(BASELINE_TMP_PREFIX) - 1) ||
		    !strncmp(name, BASELINE_EVICT_PREFIX,
			     sizeof(BASELINE_EVICT_PREFIX) - 1)) {
			sweep(cache_fd, name);
			continue;
		}
		if (!is_hex(name, BASELINE_KEY_LEN))
			continue; /* not ours: left alone */
		efd = openat(cache_fd, name, OPEN_DIR);
		if (efd < 0)
			continue;
		if (n == cap) {
			cap = cap ? 2 * cap : 16;
			nv = realloc(v, cap * sizeof(*v));
			if (!nv) {
				close(efd);
				closedir(d);
				free(v);
				return -ENOMEM;
			}
			v = nv;
		}
		memcpy(v[n].key, name, BASELINE_KEY_LEN + 1);
		if (fstat(efd, &st) < 0 || dir_bytes(efd, &v[n].bytes)) {
			close(efd);
			continue;
		}
		v[n].used = st.st_mtim;
		close(efd);
		n++;
	}
	closedir(d);
	if (n) /* v is NULL when the cache has no entry */
		qsort(v, n, sizeof(*v), by_use);
	*out = v;
	*nr = n;
	return 0;
}

int baseline__evict(int cache_fd, uint64_t max_artifacts, uint64_t max_bytes)
{
	uint64_t bytes = 0, count;
	struct entry *v = NULL;
	size_t n = 0, i;
	int removed = 0, ret, fd;

	ret = list_entries(cache_fd, &v, &n);
	if (ret)
		return ret;
	for (i = 0; i < n; i++)
		bytes += v[i].bytes;
	count = n;
	/* Oldest first; an entry under a lease is in use: skipped. */
	for (i = 0; i < n && (count > max_artifacts || bytes > max_bytes);
	     i++) {
		fd = openat(cache_fd, v[i].key, OPEN_DIR);
		if (fd < 0)
			continue;
		if (flock(fd, LOCK_EX | LOCK_NB) < 0) {
			close(fd);
			continue;
		}
		ret = remove_entry(cache_fd, v[i].key, fd);
		close(fd);
		if (ret) {
			pr_warn("baseline: evicting %s: %s", v[i].key,
				strerror(-ret));
			continue;
		}
		pr_info("baseline: evicted %s (least recently used; %" PRIu64
			" bytes)",
			v[i].key, v[i].bytes);
		count--;
		bytes -= v[i].bytes;
		removed++;
	}
	free(v);
	return removed;
}
