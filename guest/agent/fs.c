// SPDX-License-Identifier: GPL-2.0
/*
 * FS_* requests: file operations on absolute guest paths, each answered
 * by RESULT or by ERROR with the errno the system call gave. Reads and
 * writes stream in frames of at most KILN_DATA_CHUNK bytes, so a file of
 * any size costs one chunk of memory.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/openat2.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "guest/agent/fs.h"

#define DEFAULT_FILE_MODE 0644
#define DEFAULT_DIR_MODE  0755
/* Room a RESULT frame keeps for its T_MORE field. */
#define MORE_ROOM (sizeof(struct kiln_tlv) + sizeof(uint64_t))
/* Passes over a directory being emptied that keeps getting new entries. */
#define REMOVE_PASSES 3

struct fs_req {
	char path[PATH_MAX];
	char path2[PATH_MAX];
	bool has_path, has_path2;
	/* T_BENEATH, T_BENEATH2: "" when not confined */
	char beneath[PATH_MAX];
	char beneath2[PATH_MAX];
	uint64_t offset, length, mode;
	bool has_length, has_mode;
	bool recursive, force, create_parents;
};

bool fs__is_request(uint16_t type)
{
	return type >= KILN_MSG_FS_STAT && type <= KILN_MSG_FS_RENAME;
}

/* ---- parsing ------------------------------------------------------- */

static int parse_path(const uint8_t *v, uint32_t len, char *out,
		      const char **why)
{
	if (len >= PATH_MAX) {
		*why = "path too long";
		return -ENAMETOOLONG;
	}
	if (memchr(v, '\0', len)) {
		*why = "path holds a NUL byte";
		return -EINVAL;
	}
	if (!len || v[0] != '/') {
		*why = "path is not absolute";
		return -EINVAL;
	}
	memcpy(out, v, len);
	out[len] = '\0';
	return 0;
}

static int parse_bool(const uint8_t *val, uint32_t len, bool *out)
{
	uint64_t v;

	if (kiln_tlv__u64(val, len, &v))
		return -EPROTO;
	*out = v != 0;
	return 0;
}

static int parse_req(const struct frame *f, struct fs_req *r, const char **why)
{
	struct kiln_tlv_iter it;
	const uint8_t *val;
	uint16_t tag;
	uint32_t len;
	int ret;

	memset(r, 0, sizeof(*r));
	kiln_tlv__iter(&it, f->data, f->len);
	while ((ret = kiln_tlv__next(&it, &tag, &val, &len)) > 0) {
		*why = "malformed request";
		switch (tag) {
		case KILN_T_PATH:
			ret = parse_path(val, len, r->path, why);
			r->has_path = true;
			break;
		case KILN_T_PATH2:
			ret = parse_path(val, len, r->path2, why);
			r->has_path2 = true;
			break;
		case KILN_T_BENEATH:
			ret = parse_path(val, len, r->beneath, why);
			break;
		case KILN_T_BENEATH2:
			ret = parse_path(val, len, r->beneath2, why);
			break;
		case KILN_T_OFFSET:
			ret = kiln_tlv__u64(val, len, &r->offset);
			break;
		case KILN_T_LENGTH:
			ret = kiln_tlv__u64(val, len, &r->length);
			r->has_length = true;
			break;
		case KILN_T_MODE:
			ret = kiln_tlv__u64(val, len, &r->mode);
			r->has_mode = true;
			break;
		case KILN_T_RECURSIVE:
			ret = parse_bool(val, len, &r->recursive);
			break;
		case KILN_T_FORCE:
			ret = parse_bool(val, len, &r->force);
			break;
		case KILN_T_CREATE_PARENTS:
			ret = parse_bool(val, len, &r->create_parents);
			break;
		default:
			ret = 0; /* unknown fields are ignored */
		}
		if (ret)
			return ret;
	}
	if (ret < 0) {
		*why = "malformed request";
		return ret;
	}
	if (!r->has_path) {
		*why = "no T_PATH";
		return -EPROTO;
	}
	if (f->type == KILN_MSG_FS_RENAME && !r->has_path2) {
		*why = "no T_PATH2";
		return -EPROTO;
	}
	/* Confined, both paths are, or neither. */
	if ((r->beneath2[0] && !r->has_path2) ||
	    (r->has_path2 && !r->beneath[0] != !r->beneath2[0])) {
		*why = "T_BENEATH2 without T_PATH2 or T_BENEATH";
		return -EPROTO;
	}
	if (r->offset > INT64_MAX) {
		*why = "T_OFFSET out of range";
		return -EINVAL;
	}
	*why = NULL;
	return 0;
}

/* ---- where a path leads (T_BENEATH) -------------------------------- */

/*
 * A path as the operations see it: the file @name in the directory
 * @dfd (the last component, never followed), and for the operations
 * that follow it (read, readdir, write) @rel beneath @root. Unconfined:
 * @dfd and @root are AT_FDCWD, @name and @rel the path itself.
 * Confined (T_BENEATH): @root is the granted directory, @rel the path's
 * part below it ("." for the directory itself), and @dfd its parent,
 * resolved beneath @root: openat2(2) with RESOLVE_BENEATH refuses a
 * "..", an absolute symlink or a magic link that leads out (EXDEV), at
 * the time of the call, so no rename race can take it out either.
 */
struct where {
	int root, dfd;
	int dir_err; /* confined: why dfd could not be opened (-errno) */
	const char *name, *rel;
	char buf[PATH_MAX];
};

#define WHERE_INIT                    \
	{                             \
		.root = -1, .dfd = -1 \
	}

static void where_release(struct where *w)
{
	if (w->dfd >= 0 && w->dfd != w->root)
		close(w->dfd);
	if (w->root >= 0)
		close(w->root);
	w->root = w->dfd = -1;
}

static int at_root(const struct where *w)
{
	return w->root >= 0 ? w->root : AT_FDCWD;
}

static int at_dir(const struct where *w)
{
	return w->dfd >= 0 ? w->dfd : AT_FDCWD;
}

/* openat(2) of @rel beneath @dfd (AT_FDCWD: a plain open); fd or -errno. */
static int open_beneath(int dfd, const char *rel, int flags, mode_t mode)
{
	struct open_how how = {
		.flags = (uint64_t)flags | O_CLOEXEC,
		.mode = flags & O_CREAT ? mode : 0,
		.resolve = RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS,
	};
	long fd;

	if (dfd == AT_FDCWD)
		fd = open(rel, flags | O_CLOEXEC, mode);
	else
		fd = syscall(SYS_openat2, dfd, rel, &how, sizeof(how));
	return fd < 0 ? -errno : (int)fd;
}

static bool is_dots(const char *s)
{
	return !strcmp(s, ".") || !strcmp(s, "..");
}

static int locate(const char *path, const char *beneath, struct where *w)
{
	size_t n = strlen(beneath);
	char *slash;
	int fd;

	if (!beneath[0]) {
		w->name = w->rel = path;
		return 0;
	}
	/* The vmm checked this too: the path is the directory or below. */
	if (n > 1 && (strncmp(path, beneath, n) || (path[n] && path[n] != '/')))
		return -EXDEV;
	path += n;
	while (*path == '/')
		path++;
	snprintf(w->buf, sizeof(w->buf), "%s", *path ? path : ".");
	n = strlen(w->buf);
	while (n > 1 && w->buf[n - 1] == '/')
		w->buf[--n] = '\0';
	w->rel = path[0] ? path : ".";
	w->root = open(beneath, O_PATH | O_DIRECTORY | O_CLOEXEC);
	if (w->root < 0)
		return -errno;
	slash = strrchr(w->buf, '/');
	w->name = slash ? slash + 1 : w->buf;
	if (!strcmp(w->name, "..")) {
		/* Its own directory, beneath: then "." in it. */
		fd = open_beneath(w->root, w->buf, O_PATH | O_DIRECTORY, 0);
		w->name = ".";
	} else if (slash) {
		*slash = '\0';
		fd = open_beneath(w->root, w->buf, O_PATH | O_DIRECTORY, 0);
	} else {
		fd = w->root;
	}
	/* A missing parent is for the operation to report, or to make. */
	if (fd < 0)
		w->dir_err = fd;
	else
		w->dfd = fd;
	return 0;
}

/* The operations on @w's last component: its directory is open. */
static bool dir_ready(struct conn *c, const struct where *w)
{
	if (!w->dir_err)
		return true;
	conn__error(c, -w->dir_err, NULL);
	return false;
}

/*
 * mkdir -p beneath @w's root: each prefix of its path made in its
 * parent (resolved beneath), then checked to be a directory there.
 */
static int mkdir_beneath(const struct where *w, const char *rel, mode_t mode)
{
	char buf[PATH_MAX], *s, *name;
	int pfd, fd, ret;
	bool last;

	snprintf(buf, sizeof(buf), "%s", rel);
	for (s = buf;; s++) {
		last = *s == '\0';
		if (*s != '/' && !last)
			continue;
		if (s == buf || s[-1] == '/') {
			if (last)
				return 0;
			continue;
		}
		*s = '\0';
		name = strrchr(buf, '/');
		if (name) {
			*name = '\0';
			pfd = open_beneath(w->root, buf, O_PATH | O_DIRECTORY,
					   0);
			*name++ = '/';
		} else {
			name = buf;
			pfd = open_beneath(w->root, ".", O_PATH | O_DIRECTORY,
					   0);
		}
		if (pfd < 0)
			return pfd;
		ret = is_dots(name) ||
				      !mkdirat(pfd, name,
					       last ? mode : DEFAULT_DIR_MODE) ?
			      0 :
			      -errno;
		close(pfd);
		if (ret && ret != -EEXIST)
			return ret;
		fd = open_beneath(w->root, buf, O_PATH | O_DIRECTORY, 0);
		if (fd < 0)
			return fd == -ENOTDIR && last ? -EEXIST : fd;
		close(fd);
		if (last)
			return 0;
		*s = '/';
	}
}

/* ---- stat ---------------------------------------------------------- */

static uint64_t file_type(mode_t mode)
{
	if (S_ISREG(mode))
		return KILN_FILE_REGULAR;
	if (S_ISDIR(mode))
		return KILN_FILE_DIRECTORY;
	if (S_ISLNK(mode))
		return KILN_FILE_SYMLINK;
	return KILN_FILE_OTHER;
}

static uint64_t dirent_type(unsigned char d_type)
{
	switch (d_type) {
	case DT_REG:
		return KILN_FILE_REGULAR;
	case DT_DIR:
		return KILN_FILE_DIRECTORY;
	case DT_LNK:
		return KILN_FILE_SYMLINK;
	default:
		return KILN_FILE_OTHER;
	}
}

/*
 * The stat fields of @st; for a symlink also its target, read from @name
 * in @dirfd (AT_FDCWD and a path for FS_STAT).
 */
static int put_stat(struct kiln_buf *b, const struct stat *st, int dirfd,
		    const char *name)
{
	uint64_t mtime = (uint64_t)st->st_mtim.tv_sec * 1000000000ULL +
			 st->st_mtim.tv_nsec;
	char target[PATH_MAX];
	ssize_t n;
	int ret;

	ret = kiln_tlv__put_u64(b, KILN_T_TYPE, file_type(st->st_mode));
	if (!ret)
		ret = kiln_tlv__put_u64(b, KILN_T_MODE, st->st_mode);
	if (!ret)
		ret = kiln_tlv__put_u64(b, KILN_T_SIZE, st->st_size);
	if (!ret)
		ret = kiln_tlv__put_u64(b, KILN_T_MTIME_NS, mtime);
	if (!ret)
		ret = kiln_tlv__put_u64(b, KILN_T_UID, st->st_uid);
	if (!ret)
		ret = kiln_tlv__put_u64(b, KILN_T_GID, st->st_gid);
	if (ret || !S_ISLNK(st->st_mode))
		return ret;
	n = readlinkat(dirfd, name, target, sizeof(target));
	if (n >= 0)
		ret = kiln_tlv__put_bytes(b, KILN_T_LINK_TARGET, target, n);
	return ret;
}

static void fs_stat(struct conn *c, const struct fs_req *r,
		    const struct where *w)
{
	struct kiln_buf b;
	struct stat st;

	if (!dir_ready(c, w))
		return;
	if (fstatat(at_dir(w), w->name, &st, AT_SYMLINK_NOFOLLOW)) {
		conn__error(c, errno, NULL);
		return;
	}
	kiln_buf__init(&b);
	if (put_stat(&b, &st, at_dir(w), w->name))
		conn__error(c, ENOMEM, NULL);
	else
		conn__send_buf(c, KILN_MSG_RESULT, &b);
	kiln_buf__free(&b);
}

/* ---- readdir ------------------------------------------------------- */

/* One T_ENTRY's content: the name, then the stat fields if it has any. */
static int build_entry(struct kiln_buf *e, int dirfd, const struct dirent *d)
{
	struct stat st;
	int ret;

	kiln_buf__reset(e);
	ret = kiln_tlv__put_str(e, KILN_T_NAME, d->d_name);
	if (ret)
		return ret;
	if (!fstatat(dirfd, d->d_name, &st, AT_SYMLINK_NOFOLLOW))
		return put_stat(e, &st, dirfd, d->d_name);
	if (errno == ENOENT)
		return -ENOENT; /* removed since readdir: leave it out */
	/* Cannot stat it: the name and what readdir said it is. */
	return kiln_tlv__put_u64(e, KILN_T_TYPE, dirent_type(d->d_type));
}

static void fs_readdir(struct conn *c, const struct fs_req *r,
		       const struct where *w)
{
	struct kiln_buf res, e;
	struct dirent *d;
	DIR *dir;
	int fd, ret = 0;

	fd = open_beneath(at_root(w), w->rel, O_RDONLY | O_DIRECTORY, 0);
	if (fd < 0) {
		conn__error(c, -fd, NULL);
		return;
	}
	dir = fdopendir(fd);
	if (!dir) {
		conn__error(c, errno, NULL);
		close(fd);
		return;
	}
	kiln_buf__init(&res);
	kiln_buf__init(&e);
	for (;;) {
		errno = 0;
		d = readdir(dir);
		if (!d) {
			ret = -errno;
			break;
		}
		if (!strcmp(d->d_name, ".") || !strcmp(d->d_name, ".."))
			continue;
		ret = build_entry(&e, fd, d);
		if (ret == -ENOENT)
			continue;
		if (ret)
			break;
		/* Full: this frame says "more", the entry opens the next. */
		if (res.len + sizeof(struct kiln_tlv) + e.len >
		    KILN_FRAME_MAX - MORE_ROOM) {
			ret = kiln_tlv__put_u64(&res, KILN_T_MORE, 1);
			if (!ret)
				ret = conn__send_buf(c, KILN_MSG_RESULT, &res);
			if (ret)
				goto out;
			kiln_buf__reset(&res);
		}
		ret = kiln_tlv__put_bytes(&res, KILN_T_ENTRY, e.data, e.len);
		if (ret)
			break;
	}
	if (ret)
		conn__error(c, -ret, NULL);
	else
		conn__send_buf(c, KILN_MSG_RESULT, &res);
out:
	kiln_buf__free(&e);
	kiln_buf__free(&res);
	closedir(dir);
}

/* ---- read ---------------------------------------------------------- */

static void fs_read(struct conn *c, const struct fs_req *r,
		    const struct where *w)
{
	uint64_t left = r->has_length ? r->length : UINT64_MAX, sent = 0;
	struct kiln_buf b;
	struct stat st;
	uint8_t *buf;
	ssize_t n;
	int fd;

	/* O_NONBLOCK: a FIFO without a writer must not hang the open. */
	fd = open_beneath(at_root(w), w->rel, O_RDONLY | O_NOCTTY | O_NONBLOCK,
			  0);
	if (fd < 0) {
		conn__error(c, -fd, NULL);
		return;
	}
	if (fstat(fd, &st) ||
	    fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK)) {
		conn__error(c, errno, NULL);
		goto out_close;
	}
	if (S_ISDIR(st.st_mode)) {
		conn__error(c, EISDIR, NULL);
		goto out_close;
	}
	if (r->offset && lseek(fd, r->offset, SEEK_SET) < 0) {
		conn__error(c, errno, NULL);
		goto out_close;
	}
	buf = malloc(KILN_DATA_CHUNK);
	if (!buf) {
		conn__error(c, ENOMEM, NULL);
		goto out_close;
	}
	while (left) {
		n = read(fd, buf,
			 left < KILN_DATA_CHUNK ? left : KILN_DATA_CHUNK);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0) {
			conn__error(c, errno, "read failed after %llu bytes",
				    (unsigned long long)sent);
			goto out_free;
		}
		if (!n)
			break;
		if (conn__send(c, KILN_MSG_FS_DATA, 0, buf, n))
			goto out_free; /* the host left */
		sent += n;
		left -= n;
	}
	kiln_buf__init(&b);
	if (!kiln_tlv__put_u64(&b, KILN_T_SIZE, sent))
		conn__send_buf(c, KILN_MSG_RESULT, &b);
	kiln_buf__free(&b);
out_free:
	free(buf);
out_close:
	close(fd);
}

/* ---- directories --------------------------------------------------- */

/*
 * mkdir -p: every missing directory of @path, the last with @mode, the
 * others DEFAULT_DIR_MODE. An existing directory (or a symlink to one)
 * is fine; anything else in the way is ENOTDIR (EEXIST for the last).
 */
static int mkdir_p(const char *path, mode_t mode)
{
	char buf[PATH_MAX];
	struct stat st;
	size_t len;
	char *s;

	len = strlen(path);
	memcpy(buf, path, len + 1);
	while (len > 1 && buf[len - 1] == '/')
		buf[--len] = '\0';
	for (s = buf + 1;; s++) {
		bool last = *s == '\0';

		if (*s != '/' && !last)
			continue;
		if (s[-1] == '/' && !last)
			continue; /* "//" */
		*s = '\0';
		if (mkdir(buf, last ? mode : DEFAULT_DIR_MODE)) {
			if (errno != EEXIST)
				return -errno;
			if (stat(buf, &st) || !S_ISDIR(st.st_mode))
				return last ? -EEXIST : -ENOTDIR;
		}
		if (last)
			return 0;
		*s = '/';
	}
}

/* The directory part of @path ("/a/b" for "/a/b/c"), in @out. */
static void parent_of(const char *path, char *out)
{
	size_t len = strlen(path);

	while (len > 1 && path[len - 1] == '/')
		len--;
	while (len > 1 && path[len - 1] != '/')
		len--;
	memcpy(out, path, len);
	out[len] = '\0';
}

static void fs_mkdir(struct conn *c, const struct fs_req *r,
		     const struct where *w)
{
	mode_t mode = r->has_mode ? r->mode & 07777 : DEFAULT_DIR_MODE;
	int ret = 0;

	if (!r->recursive && !dir_ready(c, w))
		return;
	if (r->recursive && w->root >= 0)
		ret = mkdir_beneath(w, w->rel, mode);
	else if (r->recursive)
		ret = mkdir_p(r->path, mode);
	else if (mkdirat(at_dir(w), w->name, mode))
		ret = -errno;
	if (ret)
		conn__error(c, -ret, NULL);
	else
		conn__ok(c);
}

/*
 * Empties and removes the directory @name in @dirfd without following
 * symlinks (they are removed, not their targets) and without leaving file
 * system @dev: a mount inside the tree is EBUSY, as rmdir(2) of a mount
 * point is, and its files are left alone. ENOENT (raced with someone
 * else) is not an error.
 */
static int remove_tree(int dirfd, const char *name, dev_t dev)
{
	int fd, ret = 0, pass;
	struct dirent *d;
	struct stat st;
	bool is_dir;
	DIR *dir;

	for (pass = 0; pass < REMOVE_PASSES; pass++) {
		fd = openat(dirfd, name,
			    O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
		if (fd < 0)
			return errno == ENOENT ? 0 : -errno;
		ret = fstat(fd, &st) ? -errno : st.st_dev != dev ? -EBUSY : 0;
		if (ret) {
			close(fd);
			return ret;
		}
		dir = fdopendir(fd);
		if (!dir) {
			ret = -errno;
			close(fd);
			return ret;
		}
		while (!ret && (d = readdir(dir))) {
			if (!strcmp(d->d_name, ".") || !strcmp(d->d_name, ".."))
				continue;
			is_dir = d->d_type == DT_DIR;
			if (d->d_type == DT_UNKNOWN) {
				if (fstatat(fd, d->d_name, &st,
					    AT_SYMLINK_NOFOLLOW))
					continue;
				is_dir = S_ISDIR(st.st_mode);
			}
			if (is_dir)
				ret = remove_tree(fd, d->d_name, dev);
			else if (unlinkat(fd, d->d_name, 0) && errno != ENOENT)
				ret = -errno;
		}
		closedir(dir);
		if (ret)
			return ret;
		if (!unlinkat(dirfd, name, AT_REMOVEDIR) || errno == ENOENT)
			return 0;
		if (errno != ENOTEMPTY)
			return -errno;
		/* Something was created meanwhile: once more. */
	}
	return -ENOTEMPTY;
}

static bool is_root(const struct stat *st)
{
	struct stat root;

	return !stat("/", &root) && root.st_dev == st->st_dev &&
	       root.st_ino == st->st_ino;
}

static void fs_remove(struct conn *c, const struct fs_req *r,
		      const struct where *w)
{
	struct stat st;
	int ret = 0;

	if (w->root >= 0 && !strcmp(w->rel, ".")) {
		conn__error(c, EBUSY, "will not remove the granted directory");
		return;
	}
	if (!dir_ready(c, w))
		return;
	if (fstatat(at_dir(w), w->name, &st, AT_SYMLINK_NOFOLLOW)) {
		ret = -errno;
	} else if (S_ISDIR(st.st_mode) && is_root(&st)) {
		conn__error(c, EBUSY, "will not remove the root directory");
		return;
	} else if (!S_ISDIR(st.st_mode)) {
		if (unlinkat(at_dir(w), w->name, 0))
			ret = -errno;
	} else if (!r->recursive) {
		if (unlinkat(at_dir(w), w->name, AT_REMOVEDIR))
			ret = -errno;
	} else {
		ret = remove_tree(at_dir(w), w->name, st.st_dev);
	}
	if (ret == -ENOENT && r->force)
		ret = 0;
	if (ret)
		conn__error(c, -ret, NULL);
	else
		conn__ok(c);
}

static void fs_rename(struct conn *c, const struct fs_req *r,
		      const struct where *w)
{
	struct where w2 = WHERE_INIT;
	int ret;

	if (!dir_ready(c, w))
		return;
	ret = locate(r->path2, r->beneath2, &w2);
	if (!ret && w2.dir_err)
		ret = w2.dir_err;
	if (!ret && renameat(at_dir(w), w->name, at_dir(&w2), w2.name))
		ret = -errno;
	where_release(&w2);
	if (ret)
		conn__error(c, -ret, NULL);
	else
		conn__ok(c);
}

/* ---- write --------------------------------------------------------- */

/* The directory part of a relative @rel ("." for a name alone). */
static void rel_parent_of(const char *rel, char *out)
{
	char *slash;

	snprintf(out, PATH_MAX, "%s", rel);
	slash = strrchr(out, '/');
	if (slash)
		*slash = '\0';
	else
		strcpy(out, ".");
}

static int write_all(int fd, const uint8_t *p, size_t len)
{
	ssize_t n;

	while (len) {
		n = write(fd, p, len);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return -errno;
		p += n;
		len -= n;
	}
	return 0;
}

/*
 * After an ERROR, the host may still be sending the file: take its
 * FS_DATA frames up to the last one (or until it closes), so that it is
 * never stuck in a write. The ERROR is already on its way.
 */
static void drop_data(struct conn *c)
{
	struct frame f;

	while (!conn__recv(c, &f) && f.type == KILN_MSG_FS_DATA &&
	       !(f.flags & KILN_F_EOF))
		;
}

static void fs_write(struct conn *c, const struct fs_req *r,
		     const struct where *w)
{
	mode_t mode = r->has_mode ? r->mode & 07777 : DEFAULT_FILE_MODE;
	char parent[PATH_MAX];
	uint64_t total = 0;
	struct kiln_buf b;
	struct frame f;
	int fd, ret;

	if (r->create_parents) {
		if (w->root >= 0)
			rel_parent_of(w->rel, parent);
		else
			parent_of(r->path, parent);
		ret = w->root >= 0 ?
			      mkdir_beneath(w, parent, DEFAULT_DIR_MODE) :
			      mkdir_p(parent, DEFAULT_DIR_MODE);
		if (ret) {
			conn__error(c, -ret, "cannot create the parent %s",
				    parent);
			goto out_drop;
		}
	}
	/* O_NONBLOCK: a FIFO without a reader is ENXIO, not a hang. */
	fd = open_beneath(at_root(w), w->rel,
			  O_WRONLY | O_CREAT | O_TRUNC | O_NOCTTY | O_NONBLOCK,
			  mode);
	if (fd < 0) {
		conn__error(c, -fd, NULL);
		goto out_drop;
	}
	if (fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK)) {
		conn__error(c, errno, NULL);
		goto out_close_drop;
	}
	/* An existing file keeps its mode unless one is asked for. */
	if (r->has_mode && fchmod(fd, mode)) {
		conn__error(c, errno, "cannot set the mode");
		goto out_close_drop;
	}
	for (;;) {
		if (conn__recv(c, &f))
			goto out_close; /* the host left: the file stays short */
		if (f.type != KILN_MSG_FS_DATA) {
			conn__error(c, EPROTO, "expected FS_DATA, got type %u",
				    f.type);
			goto out_close;
		}
		ret = write_all(fd, f.data, f.len);
		if (ret) {
			conn__error(c, -ret, "write failed after %llu bytes",
				    (unsigned long long)total);
			if (f.flags & KILN_F_EOF)
				goto out_close;
			goto out_close_drop;
		}
		total += f.len;
		if (f.flags & KILN_F_EOF)
			break;
	}
	if (close(fd)) {
		conn__error(c, errno, "close failed");
		return;
	}
	kiln_buf__init(&b);
	if (!kiln_tlv__put_u64(&b, KILN_T_SIZE, total))
		conn__send_buf(c, KILN_MSG_RESULT, &b);
	kiln_buf__free(&b);
	return;

out_close_drop:
	close(fd);
out_drop:
	drop_data(c);
	return;
out_close:
	close(fd);
}

void fs__handle(struct conn *c, const struct frame *req)
{
	struct where w = WHERE_INIT;
	struct fs_req *r;
	const char *why;
	int ret;

	r = malloc(sizeof(*r));
	if (!r) {
		conn__error(c, ENOMEM, NULL);
		return;
	}
	ret = parse_req(req, r, &why);
	if (ret) {
		conn__error(c, -ret, "%s", why);
		/* The host may be streaming the file already. */
		if (req->type == KILN_MSG_FS_WRITE && ret != -EPROTO)
			drop_data(c);
		goto out;
	}
	ret = locate(r->path, r->beneath, &w);
	if (ret) {
		conn__error(c, -ret, NULL);
		if (req->type == KILN_MSG_FS_WRITE)
			drop_data(c);
		goto out;
	}
	/* Modes are taken as given: this connection's process only. */
	umask(0);
	switch (req->type) {
	case KILN_MSG_FS_STAT:
		fs_stat(c, r, &w);
		break;
	case KILN_MSG_FS_READDIR:
		fs_readdir(c, r, &w);
		break;
	case KILN_MSG_FS_READ:
		fs_read(c, r, &w);
		break;
	case KILN_MSG_FS_WRITE:
		fs_write(c, r, &w);
		break;
	case KILN_MSG_FS_MKDIR:
		fs_mkdir(c, r, &w);
		break;
	case KILN_MSG_FS_REMOVE:
		fs_remove(c, r, &w);
		break;
	case KILN_MSG_FS_RENAME:
		fs_rename(c, r, &w);
		break;
	}
out:
	where_release(&w);
	free(r);
}
