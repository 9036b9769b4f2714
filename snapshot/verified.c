// SPDX-License-Identifier: GPL-2.0
/*
 * The verification cache (see verified.h): one small file per good hash,
 * named by the SHA-256 of its key and holding the key.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "lib/log.h"
#include "lib/sha256.h"
#include "snapshot/verified.h"

/*
 * An entry vouches that the file with this identity (device, inode), size
 * and modification and change times, to the nanosecond, had this digest.
 * Any write to a file moves its ctime, which no unprivileged call can set
 * back, so an entry can never vouch for content it did not hash.
 */
static int cache_key(const struct stat *st, const char *digest, char *key,
		     size_t len)
{
	int n = snprintf(key, len,
			 "kiln verified v1\n"
			 "dev %llu\nino %llu\nsize %lld\n"
			 "mtime %lld.%09ld\nctime %lld.%09ld\n"
			 "digest %s\n",
			 (unsigned long long)st->st_dev,
			 (unsigned long long)st->st_ino, (long long)st->st_size,
			 (long long)st->st_mtim.tv_sec, st->st_mtim.tv_nsec,
			 (long long)st->st_ctim.tv_sec, st->st_ctim.tv_nsec,
			 digest);

	return n < 0 || (size_t)n >= len ? -ENAMETOOLONG : n;
}

/* ${KILN_CACHE:-$HOME/.cache/kiln}/verified; NULL when there is none. */
static char *cache_dir(void)
{
	const char *base = getenv("KILN_CACHE");
	const char *home = getenv("HOME");
	char *dir;
	int n;

	if (base && *base)
		n = asprintf(&dir, "%s/verified", base);
	else if (home && *home)
		n = asprintf(&dir, "%s/.cache/kiln/verified", home);
	else
		return NULL;
	return n < 0 ? NULL : dir;
}

/* The entry's file name: the key's own SHA-256. */
static char *cache_entry(const char *dir, const char *key, size_t keylen)
{
	char hex[SHA256_HEX_LEN + 1], *path;

	if (sha256__hex(key, keylen, hex))
		return NULL;
	if (asprintf(&path, "%s/%s", dir, hex) < 0)
		return NULL;
	return path;
}

/*
 * A hit needs the entry to hold exactly the key, and to be ours and not
 * writable by anyone else: an entry someone else could plant is ignored.
 */
static ssize_t cache_read(const char *entry, char *buf, size_t len)
{
	struct stat st;
	ssize_t n = -1;
	int fd;

	fd = open(entry, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
	if (fd < 0)
		return -1;
	if (!fstat(fd, &st) && S_ISREG(st.st_mode) && st.st_uid == geteuid() &&
	    !(st.st_mode & 022))
		n = read(fd, buf, len);
	close(fd);
	return n;
}

static bool cache_lookup(const char *entry, const char *key, size_t keylen)
{
	char buf[VERIFIED_KEY_MAX];
	ssize_t n = cache_read(entry, buf, sizeof(buf));

	return n == (ssize_t)keylen && !memcmp(buf, key, keylen);
}

/* mkdir -p, new directories private to the user. */
static int mkdir_p(const char *dir)
{
	char *p, *tmp = strdup(dir);
	int ret = 0;

	if (!tmp)
		return -ENOMEM;
	for (p = strchr(tmp + 1, '/'); p && !ret; p = strchr(p + 1, '/')) {
		*p = '\0';
		if (mkdir(tmp, 0700) && errno != EEXIST)
			ret = -errno;
		*p = '/';
	}
	if (!ret && mkdir(tmp, 0700) && errno != EEXIST)
		ret = -errno;
	free(tmp);
	return ret;
}

/*
 * The cache is bounded (verified.h): an entry names a file state that may
 * be long gone (every snapshot taken and every image rebuilt leaves one),
 * and nothing else removes them. A store that finds more than
 * VERIFIED_ENTRIES_MAX entries removes the least recently written down to
 * VERIFIED_ENTRIES_KEEP; a removed entry that was still good only costs a
 * hash. Temporary files older than VERIFIED_TMP_AGE_S (a writer that died
 * between mkostemp and rename) go too.
 */
#define VERIFIED_NAME_LEN 64 /* hex SHA-256 */

struct cache_old {
	struct timespec mtime;
	char name[VERIFIED_NAME_LEN + 1];
};

static int cache_old_cmp(const void *a, const void *b)
{
	const struct timespec *x = &((const struct cache_old *)a)->mtime;
	const struct timespec *y = &((const struct cache_old *)b)->mtime;

	if (x->tv_sec != y->tv_sec)
		return x->tv_sec < y->tv_sec ? -1 : 1;
	if (x->tv_nsec != y->tv_nsec)
		return x->tv_nsec < y->tv_nsec ? -1 : 1;
	return 0;
}

static bool cache_entry_name(const char *name)
{
	return strlen(name) == VERIFIED_NAME_LEN &&
	       strspn(name, "0123456789abcdef") == VERIFIED_NAME_LEN;
}

/* Best effort: a sweep that fails leaves the cache as it was. */
static void cache_sweep(const char *dir)
{
	struct cache_old *old = NULL, *grown;
	size_t n = 0, cap = 0, i;
	struct dirent *e;
	struct stat st;
	time_t now = time(NULL);
	DIR *d = opendir(dir);

	if (!d)
		return;
	while ((e = readdir(d))) {
		if (fstatat(dirfd(d), e->d_name, &st, AT_SYMLINK_NOFOLLOW) ||
		    !S_ISREG(st.st_mode))
			continue;
		if (!strncmp(e->d_name, ".tmp-", 5)) {
			if (now - st.st_mtim.tv_sec > VERIFIED_TMP_AGE_S)
				unlinkat(dirfd(d), e->d_name, 0);
			continue;
		}
		if (!cache_entry_name(e->d_name))
			continue;
		if (n == cap) {
			cap = cap ? cap * 2 : VERIFIED_ENTRIES_MAX + 1;
			grown = realloc(old, cap * sizeof(*old));
			if (!grown)
				goto out;
			old = grown;
		}
		old[n].mtime = st.st_mtim;
		memcpy(old[n].name, e->d_name, VERIFIED_NAME_LEN + 1);
		n++;
	}
	if (n <= VERIFIED_ENTRIES_MAX)
		goto out;
	qsort(old, n, sizeof(*old), cache_old_cmp);
	for (i = 0; i < n - VERIFIED_ENTRIES_KEEP; i++)
		unlinkat(dirfd(d), old[i].name, 0);
	pr_debug("verification cache %s: %zu old entries removed", dir, i);
out:
	free(old);
	closedir(d);
}

/* Write the entry whole (a temporary file renamed over it), or not at all. */
static int cache_store(const char *dir, const char *entry, const char *key,
		       size_t keylen)
{
	char *tmp;
	int fd, ret;

	ret = mkdir_p(dir);
	if (ret)
		return ret;
	if (asprintf(&tmp, "%s/.tmp-XXXXXX", dir) < 0)
		return -ENOMEM;
	fd = mkostemp(tmp, O_CLOEXEC);
	if (fd < 0) {
		ret = -errno;
		goto out_free;
	}
	errno = 0;
	if (write(fd, key, keylen) != (ssize_t)keylen)
		ret = errno ? -errno : -EIO;
	if (close(fd) && !ret)
		ret = -errno;
	if (!ret && rename(tmp, entry))
		ret = -errno;
	if (ret)
		unlink(tmp);
	else
		cache_sweep(dir);
out_free:
	free(tmp);
	return ret;
}

static bool same_file_state(const struct stat *a, const struct stat *b)
{
	return a->st_dev == b->st_dev && a->st_ino == b->st_ino &&
	       a->st_size == b->st_size &&
	       a->st_mtim.tv_sec == b->st_mtim.tv_sec &&
	       a->st_mtim.tv_nsec == b->st_mtim.tv_nsec &&
	       a->st_ctim.tv_sec == b->st_ctim.tv_sec &&
	       a->st_ctim.tv_nsec == b->st_ctim.tv_nsec;
}

/*
 * File times come from a clock that ticks coarsely (a jiffy; a second or
 * two on some file systems), so a file changed twice within one tick keeps
 * the same ctime. Like git's "racily clean" index entries, a file whose
 * ctime is that close to now is hashed but not cached: any change after
 * this moment then gets a later ctime. A ctime with nanoseconds is from a
 * fine-grained file system, where a tick is at most 10 ms (HZ=100).
 */
#define RACY_FINE_NS   (100LL * 1000 * 1000)	  /* 100 ms */
#define RACY_COARSE_NS (2LL * 1000 * 1000 * 1000) /* 2 s (FAT: 2 s) */

static bool changed_too_recently(const struct stat *st)
{
	struct timespec now;
	long long age;

	if (clock_gettime(CLOCK_REALTIME, &now))
		return true;
	age = (now.tv_sec - (long long)st->st_ctim.tv_sec) * 1000000000LL +
	      (now.tv_nsec - st->st_ctim.tv_nsec);
	return age < (st->st_ctim.tv_nsec ? RACY_FINE_NS : RACY_COARSE_NS);
}

bool verified__lookup(struct verified *v, const struct stat *st,
		      const char *digest)
{
	*v = (struct verified){ .keylen = 0 };
	v->keylen = cache_key(st, digest, v->key, sizeof(v->key));
	v->dir = v->keylen > 0 ? cache_dir() : NULL;
	v->entry = v->dir ? cache_entry(v->dir, v->key, v->keylen) : NULL;
	if (!v->entry) {
		pr_debug("no verification cache (set KILN_CACHE or HOME)");
		return false;
	}
	return cache_lookup(v->entry, v->key, v->keylen);
}

int verified__remember(struct verified *v, int fd, const struct stat *st,
		       const char *what)
{
	struct stat after;
	int ret;

	/* What was hashed must still be what is there. */
	if (fstat(fd, &after) || !same_file_state(st, &after))
		return -EBUSY;
	if (!v->entry)
		return 0;
	if (changed_too_recently(&after)) {
		pr_debug("%s: changed too recently to be cached", what);
		return 0;
	}
	ret = cache_store(v->dir, v->entry, v->key, v->keylen);
	/* Only costs a hash next time: warn, and go on. */
	if (ret)
		pr_warn("verification cache %s: %s (%s will be hashed again "
			"next time)",
			v->dir, strerror(-ret), what);
	return 0;
}

void verified__release(struct verified *v)
{
	free(v->entry);
	free(v->dir);
	*v = (struct verified){ .keylen = 0 };
}

/*
 * A memo: the digest of a file not known beforehand (what a snapshot's
 * identity names). Its key's digest line is "memo KIND"; the entry holds
 * the key, then "is DIGEST\n".
 */
#define MEMO_IS "is "

static int memo_open(struct verified *v, const struct stat *st,
		     const char *kind)
{
	char what[64];

	snprintf(what, sizeof(what), "memo %s", kind);
	*v = (struct verified){ .keylen = 0 };
	v->keylen = cache_key(st, what, v->key, sizeof(v->key));
	v->dir = v->keylen > 0 ? cache_dir() : NULL;
	v->entry = v->dir ? cache_entry(v->dir, v->key, v->keylen) : NULL;
	return v->entry ? 0 : -ENOENT;
}

bool verified__recall(const struct stat *st, const char *kind, char *digest,
		      size_t len)
{
	char buf[VERIFIED_KEY_MAX + 128];
	struct verified v;
	size_t rest;
	ssize_t n;
	bool hit = false;

	if (memo_open(&v, st, kind))
		goto out;
	n = cache_read(v.entry, buf, sizeof(buf) - 1);
	if (n <= v.keylen + (ssize_t)strlen(MEMO_IS) ||
	    memcmp(buf, v.key, v.keylen) ||
	    memcmp(buf + v.keylen, MEMO_IS, strlen(MEMO_IS)) ||
	    buf[n - 1] != '\n')
		goto out;
	rest = n - v.keylen - strlen(MEMO_IS) - 1;
	if (rest + 1 > len || memchr(buf + v.keylen, '\0', n - v.keylen))
		goto out;
	memcpy(digest, buf + v.keylen + strlen(MEMO_IS), rest);
	digest[rest] = '\0';
	hit = true;
out:
	verified__release(&v);
	return hit;
}

void verified__note(int fd, const struct stat *st, const char *kind,
		    const char *digest, const char *what)
{
	char buf[VERIFIED_KEY_MAX + 128];
	struct verified v;
	struct stat after;
	int n, ret;

	if (memo_open(&v, st, kind))
		goto out;
	if (fstat(fd, &after) || !same_file_state(st, &after) ||
	    changed_too_recently(&after))
		goto out;
	n = snprintf(buf, sizeof(buf), "%.*s" MEMO_IS "%s\n", v.keylen, v.key,
		     digest);
	if (n < 0 || (size_t)n >= sizeof(buf))
		goto out;
	ret = cache_store(v.dir, v.entry, buf, n);
	if (ret)
		pr_warn("verification cache %s: %s (%s will be hashed again "
			"next time)",
			v.dir, strerror(-ret), what);
out:
	verified__release(&v);
}
