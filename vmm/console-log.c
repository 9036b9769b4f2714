// SPDX-License-Identifier: GPL-2.0
/*
 * The console log (vmm/console-log.h): a line buffer, the cap with its
 * rotation, and the file backend. The rotation logic sees only the
 * backend's ops, so a unit test drives it with a fake.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/openat2.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "lib/errf.h"
#include "vmm/console-log.h"

struct console_log {
	const struct console_log_ops *ops;
	void *opaque;
	char *name;	    /* for messages */
	uint64_t max_bytes; /* the live file's cap */
	uint64_t size;	    /* bytes in the live file */
	bool warned_write, warned_rotate;
	size_t held;
	uint8_t line[CONSOLE_LOG_LINE_MAX];
};

int console_log__create(struct console_log **out,
			const struct console_log_ops *ops, void *opaque,
			const char *name, uint64_t max_bytes, uint64_t size)
{
	struct console_log *l;

	*out = NULL;
	if (max_bytes < CONSOLE_LOG_MIN_MAX_BYTES) {
		if (ops->release)
			ops->release(opaque);
		return -EINVAL;
	}
	l = calloc(1, sizeof(*l));
	if (l)
		l->name = strdup(name);
	if (!l || !l->name) {
		free(l);
		if (ops->release)
			ops->release(opaque);
		return -ENOMEM;
	}
	l->ops = ops;
	l->opaque = opaque;
	l->max_bytes = max_bytes;
	l->size = size;
	*out = l;
	return 0;
}

/*
 * n bytes to the backend, never past the cap: what does not fit goes to
 * the next file. A failed rotation drops the rest (the cap holds); a
 * failed write drops its part. Each warns once.
 */
static void put_bytes(struct console_log *l, const uint8_t *buf, size_t n)
{
	uint64_t room;
	ssize_t put;
	size_t take;
	int ret;

	while (n) {
		if (l->size >= l->max_bytes) {
			ret = l->ops->rotate(l->opaque);
			if (ret) {
				if (!l->warned_rotate)
					pr_warn("console log %s: cannot rotate "
						"(%s): output dropped past its "
						"%llu bytes",
						l->name, strerror(-ret),
						(unsigned long long)
							l->max_bytes);
				l->warned_rotate = true;
				return;
			}
			l->size = 0;
		}
		room = l->max_bytes - l->size;
		take = n < room ? n : room;
		put = l->ops->write(l->opaque, buf, take);
		if (put > 0)
			l->size += put;
		if (put < (ssize_t)take) {
			if (!l->warned_write)
				pr_warn("console log %s: %s: output dropped",
					l->name,
					strerror(put < 0 ? (int)-put : EIO));
			l->warned_write = true;
			return;
		}
		buf += take;
		n -= take;
	}
}

void console_log__flush(struct console_log *l)
{
	if (!l || !l->held)
		return;
	put_bytes(l, l->line, l->held);
	l->held = 0;
}

void console_log__write(struct console_log *l, const void *buf, size_t n)
{
	const uint8_t *p = buf;
	size_t i;

	for (i = 0; i < n; i++) {
		l->line[l->held++] = p[i];
		if (p[i] == '\n' || l->held == sizeof(l->line))
			console_log__flush(l);
	}
}

void console_log__destroy(struct console_log *l)
{
	if (!l)
		return;
	console_log__flush(l);
	if (l->ops->release)
		l->ops->release(l->opaque);
	free(l->name);
	free(l);
}

/* ---- the file backend ------------------------------------------------ */

/* "NAME.N": the name and the suffixes of up to CONSOLE_LOG_MAX_KEEP. */
#define ROTATED_SUFFIX_MAX 2

struct log_file {
	int dirfd; /* O_PATH: the directory, for the *at() calls */
	int fd;	   /* the live file, O_APPEND */
	unsigned int keep;
	char name[NAME_MAX + 1];
};

static ssize_t file_write(void *opaque, const void *buf, size_t n)
{
	struct log_file *f = opaque;
	const uint8_t *p = buf;
	size_t done = 0;
	ssize_t w;

	while (done < n) {
		w = write(f->fd, p + done, n - done);
		if (w < 0 && errno == EINTR)
			continue;
		if (w < 0)
			return done ? (ssize_t)done : -errno;
		if (!w)
			break;
		done += w;
	}
	return done;
}

/*
 * The live file's name beneath the directory, never through a symlink
 * (the seccomp filter lets only this directory's descriptor through).
 */
static int open_live(const struct log_file *f, int flags)
{
	struct open_how how = {
		.flags = (uint64_t)(O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC |
				    O_NOFOLLOW | flags),
		.mode = 0640,
		.resolve = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS,
	};
	long fd = syscall(SYS_openat2, f->dirfd, f->name, &how, sizeof(how));

	return fd < 0 ? -errno : (int)fd;
}

static int file_rotate(void *opaque)
{
	/* Room for any unsigned suffix; open checked the real ones fit. */
	char from[NAME_MAX + 12], to[NAME_MAX + 12];
	struct log_file *f = opaque;
	unsigned int i;
	int fd;

	for (i = f->keep; i >= 1; i--) {
		if (i == 1)
			snprintf(from, sizeof(from), "%s", f->name);
		else
			snprintf(from, sizeof(from), "%s.%u", f->name, i - 1);
		snprintf(to, sizeof(to), "%s.%u", f->name, i);
		/* The oldest is replaced: renameat drops what "to" was. */
		if (renameat(f->dirfd, from, f->dirfd, to) && errno != ENOENT)
			return -errno;
	}
	/* keep 0: the same name, emptied; else a new file. */
	fd = open_live(f, O_TRUNC);
	if (fd < 0)
		return fd;
	close(f->fd);
	f->fd = fd;
	return 0;
}

static void file_release(void *opaque)
{
	struct log_file *f = opaque;

	if (!f)
		return;
	if (f->fd >= 0)
		close(f->fd);
	if (f->dirfd >= 0)
		close(f->dirfd);
	free(f);
}

static const struct console_log_ops file_ops = {
	.write = file_write,
	.rotate = file_rotate,
	.release = file_release,
};

static bool is_log_file_ops(const struct console_log_ops *ops)
{
	return ops == &file_ops;
}

int console_log__dirfd(const struct console_log *l)
{
	if (!l || !is_log_file_ops(l->ops))
		return -1;
	return ((const struct log_file *)l->opaque)->dirfd;
}

int console_log__open(struct console_log **out, const char *path,
		      uint64_t max_bytes, unsigned int keep, char *err,
		      size_t len)
{
	const char *slash = strrchr(path, '/');
	const char *base = slash ? slash + 1 : path;
	char dir[PATH_MAX];
	struct log_file *f;
	struct stat st;
	int ret;

	*out = NULL;
	if (!*base || !strcmp(base, ".") || !strcmp(base, ".."))
		return errf(err, len, -EINVAL,
			    "console log %s: not a file name", path);
	if (strlen(base) + 1 + ROTATED_SUFFIX_MAX > NAME_MAX)
		return errf(err, len, -ENAMETOOLONG,
			    "console log %s: name too long for its rotated "
			    "files",
			    path);
	if (slash && (size_t)(slash - path) >= sizeof(dir))
		return errf(err, len, -ENAMETOOLONG,
			    "console log %s: path too long", path);
	f = calloc(1, sizeof(*f));
	if (!f)
		return -ENOMEM;
	f->fd = -1;
	f->keep = keep;
	snprintf(f->name, sizeof(f->name), "%s", base);
	if (slash == path)
		snprintf(dir, sizeof(dir), "/");
	else if (slash)
		snprintf(dir, sizeof(dir), "%.*s", (int)(slash - path), path);
	else
		snprintf(dir, sizeof(dir), ".");
	f->dirfd = open(dir, O_PATH | O_DIRECTORY | O_CLOEXEC);
	if (f->dirfd < 0) {
		ret = errf(err, len, -errno, "console log %s: %s: %s", path,
			   dir, strerror(errno));
		file_release(f);
		return ret;
	}
	f->fd = open_live(f, 0);
	if (f->fd < 0 || fstat(f->fd, &st)) {
		ret = f->fd < 0 ? f->fd : -errno;
		errf(err, len, ret, "console log %s: %s", path, strerror(-ret));
		file_release(f);
		return ret;
	}
	if (!S_ISREG(st.st_mode)) {
		file_release(f);
		return errf(err, len, -EINVAL,
			    "console log %s: not a regular file", path);
	}
	ret = console_log__create(out, &file_ops, f, path, max_bytes,
				  st.st_size);
	if (ret)
		errf(err, len, ret, "console log %s: %s", path, strerror(-ret));
	return ret;
}

char *console_log__default_path(const char *socket_path)
{
	static const char sock[] = ".sock";
	size_t n = strlen(socket_path), s = sizeof(sock) - 1;
	char *path;

	if (n > s && !strcmp(socket_path + n - s, sock))
		n -= s;
	if (asprintf(&path, "%.*s%s", (int)n, socket_path,
		     CONSOLE_LOG_DETACH_SUFFIX) < 0)
		return NULL;
	return path;
}
