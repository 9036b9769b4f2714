// SPDX-License-Identifier: GPL-2.0
/*
 * posix-conform: POSIX file-system conformance cases with Linux's
 * semantics, the guest side of selftests/kvm/virtiofs.c (issue 13). A
 * static program, packed as an extra initramfs archive with
 * /bin/posix-conform. It runs as root and drops to other users itself
 * (setresuid/setresgid, keeping saved id 0 to come back for checks).
 *
 *	posix-conform rw DIR	every case, each in DIR/conform/NAME
 *	posix-conform setup DIR	make the read-only fixtures in DIR: f
 *				("ro\n", 0644), d/ with d/x, l -> f
 *	posix-conform ro DIR	the read-only cases on those fixtures:
 *				reads work, every change is EROFS
 *
 * One line per case, "ok NAME" or "not ok NAME: line L: CALL: expected
 * X got Y", then "conform: N passed, M failed"; the exit status is the
 * number of failures (at most 125). Each case runs in a process of its
 * own, watched by the runner (CASE_TIMEOUT_S), and writes at most a few
 * KiB.
 */
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/*
 * A hang guard, not a speed check: a case takes well under a second. The
 * runner looks at its case every CASE_TICK_MS; a look that comes more
 * than CASE_STILL_S late means the whole guest stood still meanwhile (its
 * monitor or the machine under it did not run it: the nested harness
 * does that for minutes at times), which says nothing of the file
 * system, so that time is reported and not counted against the case.
 */
#define CASE_TIMEOUT_S 120
#define CASE_TICK_MS   250
#define CASE_STILL_S   5
#define NSEC_PER_SEC   1000000000LL
#define NSEC_PER_MSEC  1000000LL
#define UID_U	       1000 /* the user most cases act as */
#define GID_U	       1000
#define GID_SUPP       3000 /* a supplementary group of UID_U */
#define UID_V	       2000 /* another user */
#define GID_V	       2000
#define GID_NONMEMBER  4000
#define DATA	       "data"
#define RO_DATA	       "ro\n"
#define MAX_STATUS     125

#ifndef RENAME_NOREPLACE
#define RENAME_NOREPLACE (1 << 0)
#define RENAME_EXCHANGE	 (1 << 1)
#endif

struct cx {
	const char *name;
	char why[512]; /* the first failure */
};

static const char *ename(int e)
{
	const char *s = e ? strerrorname_np(e) : "success";

	return s ? s : "?";
}

/* Records the first failure; true if this one failed. */
static int fail_errno(struct cx *c, int line, const char *call, int got,
		      int want)
{
	if (got == want)
		return 0;
	if (!c->why[0])
		snprintf(c->why, sizeof(c->why),
			 "line %d: %s: expected %s got %s", line, call,
			 ename(want), ename(got));
	return 1;
}

static void fmt_val(char *buf, size_t len, long long v, char base)
{
	if (base == 'o')
		snprintf(buf, len, "%04llo", v);
	else if (base == 'x')
		snprintf(buf, len, "0x%llx", v);
	else
		snprintf(buf, len, "%lld", v);
}

/* base: 'o' octal, 'x' hex, 'd' decimal. */
static int fail_val(struct cx *c, int line, const char *what, long long got,
		    long long want, char base)
{
	char g[32], w[32];

	if (got == want)
		return 0;
	fmt_val(g, sizeof(g), got, base);
	fmt_val(w, sizeof(w), want, base);
	if (!c->why[0])
		snprintf(c->why, sizeof(c->why),
			 "line %d: %s: expected %s got %s", line, what, w, g);
	return 1;
}

/* T(call, errno): the call fails with that errno, or succeeds for 0. */
#define T(call, want)                                                         \
	do {                                                                  \
		errno = 0;                                                    \
		long r_ = (long)(call);                                       \
		if (fail_errno(c, __LINE__, #call, r_ < 0 ? errno : 0, want)) \
			return;                                               \
	} while (0)

#define V(what, got, want, base)                                  \
	do {                                                      \
		if (fail_val(c, __LINE__, what, (long long)(got), \
			     (long long)(want), base))            \
			return;                                   \
	} while (0)

/* MODE(path, 04755): lstat's permission bits. */
#define MODE(path, want)                                            \
	do {                                                        \
		struct stat st_;                                    \
		T(lstat(path, &st_), 0);                            \
		V("mode of " path, st_.st_mode & 07777, want, 'o'); \
	} while (0)

#define TYPE(path, want)                                            \
	do {                                                        \
		struct stat st_;                                    \
		T(lstat(path, &st_), 0);                            \
		V("type of " path, st_.st_mode &S_IFMT, want, 'o'); \
	} while (0)

#define OWNER(path, uid, gid)                            \
	do {                                             \
		struct stat st_;                         \
		T(lstat(path, &st_), 0);                 \
		V("uid of " path, st_.st_uid, uid, 'd'); \
		V("gid of " path, st_.st_gid, gid, 'd'); \
	} while (0)

#define SIZE(path, want)                                    \
	do {                                                \
		struct stat st_;                            \
		T(lstat(path, &st_), 0);                    \
		V("size of " path, st_.st_size, want, 'd'); \
	} while (0)

#define ABSENT(path) T(access(path, F_OK), ENOENT)

/*
 * Who acts. The saved uid stays 0, so root() can come back: the
 * capabilities go when the effective uid leaves 0 and return with it.
 */
static int user_as(uid_t u, gid_t g)
{
	gid_t supp = GID_SUPP;

	if (setresuid(0, 0, 0) || setgroups(u == UID_U ? 1 : 0, &supp) ||
	    setresgid(g, g, 0) || setresuid(u, u, 0))
		return -1;
	return 0;
}

#define USER()	T(user_as(UID_U, GID_U), 0)
#define OTHER() T(user_as(UID_V, GID_V), 0)
#define ROOT()                            \
	do {                              \
		T(setresuid(0, 0, 0), 0); \
		T(setresgid(0, 0, 0), 0); \
		T(setgroups(0, NULL), 0); \
	} while (0)

/* Fixtures, made as root: owner first, then the mode (chown clears). */
static int mkfile(const char *path, mode_t mode, uid_t u, gid_t g)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_EXCL, 0600);

	if (fd < 0)
		return -1;
	if (write(fd, DATA, strlen(DATA)) != (ssize_t)strlen(DATA) ||
	    fchown(fd, u, g) || fchmod(fd, mode)) {
		close(fd);
		return -1;
	}
	return close(fd);
}

static int mkdirx(const char *path, mode_t mode, uid_t u, gid_t g)
{
	if (mkdir(path, 0700) || chown(path, u, g) || chmod(path, mode))
		return -1;
	return 0;
}

#define FILE_(p, m, u, g) T(mkfile(p, m, u, g), 0)
#define DIR_(p, m, u, g)  T(mkdirx(p, m, u, g), 0)

static int renameat2_(const char *a, const char *b, unsigned int flags)
{
	return syscall(SYS_renameat2, AT_FDCWD, a, AT_FDCWD, b, flags);
}

static int write_str(const char *path, const char *s, int flags)
{
	int fd = open(path, O_WRONLY | flags, 0644);
	ssize_t n;

	if (fd < 0)
		return -1;
	n = write(fd, s, strlen(s));
	close(fd);
	return n == (ssize_t)strlen(s) ? 0 : -1;
}

static int read_is(const char *path, const char *want)
{
	char buf[64];
	ssize_t n;
	int fd = open(path, O_RDONLY);

	if (fd < 0)
		return -1;
	n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	if (n < 0)
		return -1;
	buf[n] = '\0';
	if (strcmp(buf, want)) {
		errno = EBADMSG; /* "the content differs" */
		return -1;
	}
	return 0;
}

static int creat_(const char *path, mode_t mode)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_EXCL, mode);

	return fd < 0 ? -1 : close(fd);
}

static int open_close(const char *path, int flags)
{
	int fd = open(path, flags, 0644);

	return fd < 0 ? -1 : close(fd);
}

static int times_set(const char *path, long long sec, long nsec, int flags)
{
	struct timespec ts[2] = { { sec, nsec }, { sec + 1, nsec } };

	return utimensat(AT_FDCWD, path, ts, flags);
}

/* The times times_set() gave: atime sec.nsec, mtime one second later. */
#define TIMES(path, sec, nsec)                                           \
	do {                                                             \
		struct stat st_;                                         \
		T(lstat(path, &st_), 0);                                 \
		V("atime of " path, st_.st_atim.tv_sec, sec, 'd');       \
		V("atime ns of " path, st_.st_atim.tv_nsec, nsec, 'd');  \
		V("mtime of " path, st_.st_mtim.tv_sec, (sec) + 1, 'd'); \
		V("mtime ns of " path, st_.st_mtim.tv_nsec, nsec, 'd');  \
	} while (0)

/* ---- chmod ------------------------------------------------------------ */

static void chmod_owner(struct cx *c)
{
	FILE_("f", 0644, UID_U, GID_U);
	USER();
	T(chmod("f", 0600), 0);
	MODE("f", 0600);
	T(chmod("f", 04755), 0); /* the owner may set set-user-ID */
	MODE("f", 04755);
}

static void chmod_nonowner_eperm(struct cx *c)
{
	FILE_("f", 0666, 0, 0);
	USER();
	T(chmod("f", 0600), EPERM);
	MODE("f", 0666);
}

static void chmod_root_any(struct cx *c)
{
	FILE_("f", 0644, UID_V, GID_V);
	T(chmod("f", 06711), 0);
	MODE("f", 06711);
	OWNER("f", UID_V, GID_V);
}

static void chmod_sticky_root(struct cx *c)
{
	FILE_("f", 0644, 0, 0);
	DIR_("d", 0755, 0, 0);
	T(chmod("f", 01644), 0);
	MODE("f", 01644);
	T(chmod("d", 01777), 0);
	MODE("d", 01777);
}

static void chmod_sticky_user(struct cx *c)
{
	FILE_("f", 0644, UID_U, GID_U);
	DIR_("d", 0755, UID_U, GID_U);
	USER();
	T(chmod("f", 01644), 0);
	MODE("f", 01644);
	T(chmod("d", 01777), 0);
	MODE("d", 01777);
}

/* A non-member setting set-group-ID: done, without that bit. */
static void chmod_setgid_nonmember_dropped(struct cx *c)
{
	FILE_("f", 0644, UID_U, GID_NONMEMBER);
	USER();
	T(chmod("f", 02755), 0);
	MODE("f", 0755);
}

static void chmod_setgid_member(struct cx *c)
{
	FILE_("f", 0644, UID_U, GID_SUPP);
	USER();
	T(chmod("f", 02755), 0);
	MODE("f", 02755);
}

static void chmod_fifo(struct cx *c)
{
	T(mkfifo("p", 0644), 0);
	T(chmod("p", 0600), 0);
	MODE("p", 0600);
	T(chmod("p", 01666), 0);
	MODE("p", 01666);
	TYPE("p", S_IFIFO);
}

static void chmod_enoent(struct cx *c)
{
	T(chmod("nothing", 0644), ENOENT);
	USER();
	T(chmod("nothing", 0644), ENOENT);
}

/* ---- chown ------------------------------------------------------------ */

static void chown_root(struct cx *c)
{
	FILE_("f", 0644, 0, 0);
	DIR_("d", 0755, 0, 0);
	T(chown("f", UID_U, GID_U), 0);
	OWNER("f", UID_U, GID_U);
	T(chown("d", UID_V, GID_NONMEMBER), 0);
	OWNER("d", UID_V, GID_NONMEMBER);
	T(chown("f", -1, GID_V), 0);
	OWNER("f", UID_U, GID_V);
}

static void chown_user_other_eperm(struct cx *c)
{
	FILE_("f", 0644, UID_U, GID_U);
	USER();
	T(chown("f", UID_V, -1), EPERM);
	OWNER("f", UID_U, GID_U);
}

static void chown_user_group_member(struct cx *c)
{
	FILE_("f", 0644, UID_U, GID_U);
	USER();
	T(chown("f", -1, GID_SUPP), 0);
	OWNER("f", UID_U, GID_SUPP);
	T(chown("f", UID_U, GID_U), 0); /* to itself: allowed */
	OWNER("f", UID_U, GID_U);
}

static void chown_user_group_nonmember_eperm(struct cx *c)
{
	FILE_("f", 0644, UID_U, GID_U);
	USER();
	T(chown("f", -1, GID_NONMEMBER), EPERM);
	OWNER("f", UID_U, GID_U);
}

static void chown_nonowner_eperm(struct cx *c)
{
	FILE_("f", 0644, UID_V, GID_SUPP);
	USER();
	T(chown("f", -1, GID_SUPP), EPERM);
	T(chown("f", UID_U, -1), EPERM);
	OWNER("f", UID_V, GID_SUPP);
}

/* Linux clears set-user-ID (and set-group-ID with group execute) of a
 * non-directory on any chown, even root's. */
static void chown_root_clears_suid(struct cx *c)
{
	FILE_("f", 06755, 0, 0);
	FILE_("g", 02745, 0, 0); /* set-group-ID without group execute */
	T(chown("f", UID_U, GID_U), 0);
	MODE("f", 0755);
	T(chown("g", UID_U, GID_U), 0);
	MODE("g", 02745);
}

static void chown_user_clears_suid(struct cx *c)
{
	FILE_("f", 06755, UID_U, GID_U);
	USER();
	T(chown("f", -1, GID_SUPP), 0);
	MODE("f", 0755);
	OWNER("f", UID_U, GID_SUPP);
}

static void chown_dir_keeps_sgid(struct cx *c)
{
	DIR_("d", 02775, 0, 0);
	T(chown("d", UID_U, GID_U), 0);
	MODE("d", 02775);
}

static void chown_fifo_root(struct cx *c)
{
	T(mkfifo("p", 0644), 0);
	T(chown("p", UID_U, GID_U), 0);
	OWNER("p", UID_U, GID_U);
	TYPE("p", S_IFIFO);
}

static void lchown_symlink_root(struct cx *c)
{
	T(symlink("target", "l"), 0);
	T(lchown("l", UID_U, GID_U), 0);
	OWNER("l", UID_U, GID_U);
}

/* ---- write, truncate: privileges cleared ------------------------------ */

static void write_user_clears_suid(struct cx *c)
{
	FILE_("f", 06755, UID_U, GID_U);
	USER();
	T(write_str("f", "x", O_APPEND), 0);
	MODE("f", 0755);
}

static void write_other_clears_suid(struct cx *c)
{
	FILE_("f", 06777, UID_V, GID_V);
	USER();
	T(write_str("f", "x", O_APPEND), 0);
	MODE("f", 0777);
}

static void write_root_keeps_suid(struct cx *c)
{
	FILE_("f", 06755, UID_U, GID_U);
	T(write_str("f", "x", O_APPEND), 0);
	MODE("f", 06755);
}

static void truncate_user_clears_suid(struct cx *c)
{
	FILE_("f", 04755, UID_U, GID_U);
	USER();
	T(truncate("f", 1), 0);
	MODE("f", 0755);
	SIZE("f", 1);
}

/* ---- open, create ----------------------------------------------------- */

static void create_owner_mode(struct cx *c)
{
	DIR_("d", 0777, 0, 0);
	USER();
	umask(022);
	T(creat_("d/f", 0777), 0);
	OWNER("d/f", UID_U, GID_U);
	MODE("d/f", 0755);
	TYPE("d/f", S_IFREG);
	umask(0);
	T(creat_("d/g", 0606), 0);
	MODE("d/g", 0606);
}

static void create_root_mode(struct cx *c)
{
	umask(027);
	T(creat_("f", 0777), 0);
	OWNER("f", 0, 0);
	MODE("f", 0750);
}

static void create_setgid_dir_group(struct cx *c)
{
	DIR_("d", 02777, 0, GID_NONMEMBER);
	USER();
	umask(0);
	T(creat_("d/f", 0644), 0);
	OWNER("d/f", UID_U, GID_NONMEMBER);
	T(mkdir("d/sub", 0755), 0);
	OWNER("d/sub", UID_U, GID_NONMEMBER);
	MODE("d/sub", 02755);
}

static void create_no_write_eacces(struct cx *c)
{
	DIR_("d", 0755, 0, 0);
	USER();
	T(creat_("d/f", 0644), EACCES);
	ABSENT("d/f");
}

static void create_no_search_eacces(struct cx *c)
{
	DIR_("d", 0776, 0, 0); /* others rw-, no x */
	USER();
	T(creat_("d/f", 0644), EACCES);
	ROOT();
	ABSENT("d/f");
}

static void create_write_search_ok(struct cx *c)
{
	DIR_("d", 0773, 0, 0); /* others -wx */
	USER();
	T(creat_("d/f", 0644), 0);
	OWNER("d/f", UID_U, GID_U);
}

static void open_excl_eexist(struct cx *c)
{
	FILE_("f", 0644, 0, 0);
	T(creat_("f", 0644), EEXIST);
	USER();
	T(creat_("f", 0644), EEXIST);
}

static void open_unreadable_eacces(struct cx *c)
{
	FILE_("f", 0600, 0, 0);
	USER();
	T(open_close("f", O_RDONLY), EACCES);
	T(open_close("f", O_WRONLY), EACCES);
	T(open_close("f", O_WRONLY | O_TRUNC), EACCES);
	ROOT();
	SIZE("f", strlen(DATA));
}

static void open_root_ignores_mode(struct cx *c)
{
	FILE_("f", 0000, UID_U, GID_U);
	T(read_is("f", DATA), 0);
	T(write_str("f", "more", O_APPEND), 0);
	T(read_is("f", DATA "more"), 0);
}

static void open_owner_mode_wins(struct cx *c)
{
	FILE_("f", 0066, UID_U, GID_U); /* owner ---, others rw */
	USER();
	T(open_close("f", O_RDONLY), EACCES);
}

static void open_group_access(struct cx *c)
{
	FILE_("f", 0420, 0, GID_SUPP);
	USER();
	T(write_str("f", "x", O_APPEND), 0);
	T(open_close("f", O_RDONLY), EACCES);
}

static void open_trunc(struct cx *c)
{
	FILE_("f", 0666, 0, 0);
	USER();
	T(open_close("f", O_WRONLY | O_TRUNC), 0);
	SIZE("f", 0);
}

static void open_dir_write_eisdir(struct cx *c)
{
	DIR_("d", 0777, 0, 0);
	T(open_close("d", O_WRONLY), EISDIR);
	T(open_close("d", O_RDWR), EISDIR);
	T(open_close("d", O_RDONLY), 0);
	USER();
	T(open_close("d", O_WRONLY), EISDIR);
}

static void open_enotdir(struct cx *c)
{
	FILE_("f", 0644, 0, 0);
	T(open_close("f/x", O_RDONLY), ENOTDIR);
	T(open_close("f/x", O_WRONLY | O_CREAT), ENOTDIR);
	T(open_close("f", O_RDONLY | O_DIRECTORY), ENOTDIR);
}

static void open_enoent(struct cx *c)
{
	T(open_close("nothing", O_RDONLY), ENOENT);
	T(open_close("nothing/x", O_WRONLY | O_CREAT), ENOENT);
}

static void open_eloop(struct cx *c)
{
	FILE_("f", 0644, 0, 0);
	T(symlink("b", "a"), 0);
	T(symlink("a", "b"), 0);
	T(open_close("a", O_RDONLY), ELOOP);
	T(symlink("f", "l"), 0);
	T(open_close("l", O_RDONLY | O_NOFOLLOW), ELOOP);
	T(open_close("l", O_RDONLY), 0);
}

static void open_enametoolong(struct cx *c)
{
	char name[NAME_MAX + 2], path[PATH_MAX + 16];

	memset(name, 'n', NAME_MAX + 1);
	name[NAME_MAX + 1] = '\0';
	T(open_close(name, O_WRONLY | O_CREAT), ENAMETOOLONG);
	name[NAME_MAX] = '\0'; /* 255: fine */
	T(open_close(name, O_WRONLY | O_CREAT), 0);
	memset(path, 'p', sizeof(path) - 1);
	path[sizeof(path) - 1] = '\0';
	T(open_close(path, O_RDONLY), ENAMETOOLONG);
}

static void open_creat_through_symlink(struct cx *c)
{
	T(symlink("target", "l"), 0);
	T(open_close("l", O_WRONLY | O_CREAT), 0);
	TYPE("target", S_IFREG);
	T(open_close("l", O_WRONLY | O_CREAT | O_EXCL), EEXIST);
}

static void open_fifo_nonblock(struct cx *c)
{
	T(mkfifo("p", 0666), 0);
	T(open_close("p", O_RDONLY | O_NONBLOCK), 0);
	T(open_close("p", O_WRONLY | O_NONBLOCK), ENXIO);
}

/* ---- mkdir ------------------------------------------------------------ */

static void mkdir_user(struct cx *c)
{
	DIR_("d", 0777, 0, 0);
	USER();
	umask(022);
	T(mkdir("d/sub", 0777), 0);
	MODE("d/sub", 0755);
	OWNER("d/sub", UID_U, GID_U);
	TYPE("d/sub", S_IFDIR);
	umask(0);
	T(mkdir("d/sticky", 01777), 0);
	MODE("d/sticky", 01777);
}

static void mkdir_root(struct cx *c)
{
	umask(0);
	T(mkdir("d", 0700), 0);
	MODE("d", 0700);
	OWNER("d", 0, 0);
	T(mkdir("d/e", 0711), 0);
	{
		struct stat st;

		T(lstat("d", &st), 0);
		V("nlink of d", st.st_nlink, 3, 'd');
	}
}

static void mkdir_errors(struct cx *c)
{
	char name[NAME_MAX + 2];

	FILE_("f", 0644, 0, 0);
	DIR_("d", 0755, 0, 0);
	T(mkdir("d", 0755), EEXIST);
	T(mkdir("f", 0755), EEXIST);
	T(mkdir("nothing/d", 0755), ENOENT);
	T(mkdir("f/d", 0755), ENOTDIR);
	memset(name, 'm', NAME_MAX + 1);
	name[NAME_MAX + 1] = '\0';
	T(mkdir(name, 0755), ENAMETOOLONG);
	USER();
	T(mkdir("d/e", 0755), EACCES);
	T(mkdir("d", 0755), EEXIST);
}

/* ---- mkfifo, mknod ---------------------------------------------------- */

static void mkfifo_user(struct cx *c)
{
	DIR_("d", 0777, 0, 0);
	DIR_("ro", 0755, 0, 0);
	USER();
	umask(022);
	T(mkfifo("d/p", 0666), 0);
	TYPE("d/p", S_IFIFO);
	MODE("d/p", 0644);
	OWNER("d/p", UID_U, GID_U);
	SIZE("d/p", 0);
	T(mkfifo("d/p", 0666), EEXIST);
	T(mkfifo("ro/p", 0666), EACCES);
}

static void mknod_devices_root(struct cx *c)
{
	struct stat st;

	umask(0);
	T(mknod("c", S_IFCHR | 0620, makedev(1, 3)), 0);
	T(lstat("c", &st), 0);
	V("type of c", st.st_mode & S_IFMT, S_IFCHR, 'o');
	V("rdev of c", st.st_rdev, makedev(1, 3), 'x');
	MODE("c", 0620);
	T(mknod("b", S_IFBLK | 0600, makedev(259, 70000)), 0);
	T(lstat("b", &st), 0);
	V("type of b", st.st_mode & S_IFMT, S_IFBLK, 'o');
	V("rdev of b", st.st_rdev, makedev(259, 70000), 'x');
	T(mknod("c", S_IFCHR | 0600, makedev(1, 3)), EEXIST);
	T(chown("c", UID_U, GID_U), 0);
	OWNER("c", UID_U, GID_U);
	T(unlink("b"), 0);
	ABSENT("b");
}

static void mknod_devices_user_eperm(struct cx *c)
{
	DIR_("d", 0777, 0, 0);
	USER();
	T(mknod("d/c", S_IFCHR | 0600, makedev(1, 3)), EPERM);
	T(mknod("d/b", S_IFBLK | 0600, makedev(7, 0)), EPERM);
	ABSENT("d/c");
}

static void mknod_others_user(struct cx *c)
{
	DIR_("d", 0777, 0, 0);
	USER();
	umask(0);
	T(mknod("d/r", S_IFREG | 0640, 0), 0);
	TYPE("d/r", S_IFREG);
	MODE("d/r", 0640);
	T(mknod("d/s", S_IFSOCK | 0600, 0), 0);
	TYPE("d/s", S_IFSOCK);
	OWNER("d/s", UID_U, GID_U);
	T(mknod("d/p", S_IFIFO | 0600, 0), 0);
	TYPE("d/p", S_IFIFO);
}

/* ---- link ------------------------------------------------------------- */

static void link_user(struct cx *c)
{
	struct stat a, b;

	DIR_("d", 0777, 0, 0);
	USER();
	T(creat_("d/f", 0640), 0);
	T(link("d/f", "d/g"), 0);
	T(lstat("d/f", &a), 0);
	T(lstat("d/g", &b), 0);
	V("ino of d/g", b.st_ino, a.st_ino, 'd');
	V("nlink of d/f", a.st_nlink, 2, 'd');
	OWNER("d/g", UID_U, GID_U);
	T(chmod("d/g", 0604), 0);
	MODE("d/f", 0604);
	T(unlink("d/f"), 0);
	T(lstat("d/g", &b), 0);
	V("nlink of d/g", b.st_nlink, 1, 'd');
}

static void link_errors(struct cx *c)
{
	FILE_("f", 0644, 0, 0);
	FILE_("g", 0644, 0, 0);
	DIR_("d", 0755, 0, 0);
	T(link("f", "g"), EEXIST);
	T(link("d", "e"), EPERM);
	T(link("nothing", "e"), ENOENT);
	T(link("f", "nothing/e"), ENOENT);
	T(link("f/x", "e"), ENOTDIR);
	T(link("f", "g/e"), ENOTDIR);
	/* U's own file: fs.protected_hardlinks does not decide first */
	FILE_("u", 0644, UID_U, GID_U);
	USER();
	T(link("u", "d/e"), EACCES);
}

static void link_keeps_metadata(struct cx *c)
{
	FILE_("f", 04750, UID_U, GID_SUPP);
	T(link("f", "g"), 0);
	MODE("g", 04750);
	OWNER("g", UID_U, GID_SUPP);
}

static void link_symlink_and_fifo(struct cx *c)
{
	T(symlink("target", "l"), 0);
	T(linkat(AT_FDCWD, "l", AT_FDCWD, "l2", 0), 0);
	TYPE("l2", S_IFLNK);
	T(mkfifo("p", 0600), 0);
	T(link("p", "p2"), 0);
	TYPE("p2", S_IFIFO);
}

/* ---- rename ----------------------------------------------------------- */

static void rename_files(struct cx *c)
{
	FILE_("a", 0644, 0, 0);
	FILE_("b", 0600, UID_V, GID_V);
	T(rename("a", "c"), 0);
	ABSENT("a");
	T(read_is("c", DATA), 0);
	T(rename("c", "b"), 0);
	MODE("b", 0644);
	OWNER("b", 0, 0);
	ABSENT("c");
}

static void rename_keeps_metadata(struct cx *c)
{
	FILE_("f", 06755, UID_U, GID_SUPP);
	DIR_("d", 0755, 0, 0);
	T(rename("f", "d/g"), 0);
	MODE("d/g", 06755);
	OWNER("d/g", UID_U, GID_SUPP);
}

static void rename_dirs(struct cx *c)
{
	DIR_("a", 0755, 0, 0);
	DIR_("b", 0755, 0, 0);
	DIR_("full", 0755, 0, 0);
	FILE_("full/x", 0644, 0, 0);
	FILE_("f", 0644, 0, 0);
	T(rename("a", "full"), ENOTEMPTY);
	T(rename("a", "f"), ENOTDIR);
	T(rename("f", "a"), EISDIR);
	T(rename("a", "a/sub"), EINVAL);
	T(rename("a", "b"), 0);
	ABSENT("a");
	T(rename("b", "full/b"), 0);
	TYPE("full/b", S_IFDIR);
}

static void rename_same_inode(struct cx *c)
{
	FILE_("f", 0644, 0, 0);
	T(link("f", "g"), 0);
	T(rename("f", "g"), 0);
	TYPE("f", S_IFREG);
	TYPE("g", S_IFREG);
}

static void rename_flags(struct cx *c)
{
	FILE_("a", 0644, 0, 0);
	FILE_("b", 0600, UID_U, GID_U);
	DIR_("d", 0755, 0, 0);
	T(renameat2_("a", "b", RENAME_NOREPLACE), EEXIST);
	T(renameat2_("a", "c", RENAME_NOREPLACE), 0);
	T(renameat2_("c", "b", RENAME_EXCHANGE), 0);
	OWNER("c", UID_U, GID_U);
	OWNER("b", 0, 0);
	T(renameat2_("c", "d", RENAME_EXCHANGE), 0);
	TYPE("c", S_IFDIR);
	TYPE("d", S_IFREG);
	T(renameat2_("c", "nothing", RENAME_EXCHANGE), ENOENT);
}

static void rename_user_eacces(struct cx *c)
{
	DIR_("d", 0755, 0, 0);
	FILE_("d/f", 0666, UID_U, GID_U);
	DIR_("mine", 0755, UID_U, GID_U);
	USER();
	T(rename("d/f", "mine/f"), EACCES);
	T(rename("d/f", "d/g"), EACCES);
	T(rename("mine", "d/mine"), EACCES);
}

/* Moving a directory to another parent writes its "..": needs w on it. */
static void rename_dir_needs_write_on_it(struct cx *c)
{
	DIR_("a", 0755, UID_U, GID_U);
	DIR_("b", 0755, UID_U, GID_U);
	DIR_("a/sub", 0755, 0, 0);
	USER();
	T(rename("a/sub", "b/sub"), EACCES);
	T(rename("a/sub", "a/other"), 0);
}

static void rename_sticky(struct cx *c)
{
	DIR_("t", 01777, 0, 0);
	FILE_("t/v", 0666, UID_V, GID_V);
	FILE_("t/u", 0644, UID_U, GID_U);
	USER();
	T(rename("t/v", "t/v2"), EPERM);
	T(rename("t/u", "t/v"), EPERM); /* replacing another's */
	T(rename("t/u", "t/u2"), 0);
	OTHER();
	T(rename("t/v", "t/v2"), 0);
	ROOT();
	T(rename("t/v2", "t/v3"), 0);
}

/* ---- rmdir ------------------------------------------------------------ */

static void rmdir_cases(struct cx *c)
{
	DIR_("d", 0755, 0, 0);
	DIR_("full", 0755, 0, 0);
	FILE_("full/x", 0644, 0, 0);
	FILE_("f", 0644, 0, 0);
	T(rmdir("full"), ENOTEMPTY);
	T(rmdir("f"), ENOTDIR);
	T(rmdir("nothing"), ENOENT);
	T(rmdir("d/."), EINVAL);
	T(rmdir("d"), 0);
	ABSENT("d");
}

static void rmdir_user(struct cx *c)
{
	DIR_("p", 0755, 0, 0);
	DIR_("p/d", 0777, UID_U, GID_U);
	DIR_("mine", 0755, UID_U, GID_U);
	DIR_("mine/root", 0700, 0, 0);
	USER();
	T(rmdir("p/d"), EACCES);
	T(rmdir("mine/root"), 0); /* the parent's w is what counts */
}

static void rmdir_sticky(struct cx *c)
{
	DIR_("t", 01777, 0, 0);
	DIR_("t/v", 0777, UID_V, GID_V);
	DIR_("t/u", 0755, UID_U, GID_U);
	USER();
	T(rmdir("t/v"), EPERM);
	T(rmdir("t/u"), 0);
	ROOT();
	T(rmdir("t/v"), 0);
}

/* ---- symlink ---------------------------------------------------------- */

static void symlink_user(struct cx *c)
{
	char buf[64];
	ssize_t n;

	DIR_("d", 0777, 0, 0);
	USER();
	T(symlink("some/where", "d/l"), 0);
	TYPE("d/l", S_IFLNK);
	T(n = readlink("d/l", buf, sizeof(buf)), 0);
	V("readlink length", n, strlen("some/where"), 'd');
	V("readlink bytes", memcmp(buf, "some/where", n), 0, 'd');
	SIZE("d/l", strlen("some/where"));
}

static void symlink_owner(struct cx *c)
{
	DIR_("d", 0777, 0, 0);
	USER();
	T(symlink("x", "d/l"), 0);
	OWNER("d/l", UID_U, GID_U);
}

static void symlink_errors(struct cx *c)
{
	char target[PATH_MAX + 1];

	FILE_("f", 0644, 0, 0);
	DIR_("d", 0755, 0, 0);
	T(symlink("x", "f"), EEXIST);
	T(symlink("x", "d"), EEXIST);
	T(symlink("x", "nothing/l"), ENOENT);
	T(symlink("x", "f/l"), ENOTDIR);
	T(symlink("", "e"), ENOENT);
	memset(target, 't', sizeof(target) - 1);
	target[sizeof(target) - 1] = '\0';
	T(symlink(target, "long"), ENAMETOOLONG);
	target[1000] = '\0';
	T(symlink(target, "long"), 0);
	SIZE("long", 1000);
	USER();
	T(symlink("x", "d/l"), EACCES);
}

static void symlink_eloop(struct cx *c)
{
	DIR_("d", 0755, 0, 0);
	T(symlink("l", "l"), 0);
	T(access("l", F_OK), ELOOP);
	T(open_close("l/x", O_RDONLY), ELOOP);
	T(symlink("d", "ld"), 0);
	FILE_("ld/f", 0644, 0, 0);
	TYPE("d/f", S_IFREG);
}

/* ---- truncate --------------------------------------------------------- */

static void truncate_sizes(struct cx *c)
{
	char buf[16];
	ssize_t n;
	int fd;

	FILE_("f", 0666, 0, 0);
	USER();
	T(truncate("f", 2), 0);
	SIZE("f", 2);
	T(truncate("f", 6), 0);
	SIZE("f", 6);
	T(fd = open("f", O_RDONLY), 0);
	T(n = read(fd, buf, sizeof(buf)), 0);
	close(fd);
	V("bytes read", n, 6, 'd');
	V("grown bytes", memcmp(buf, "da\0\0\0\0", 6), 0, 'd');
	T(truncate("f", 1 << 20), 0); /* a hole, not 1 MiB of data */
	SIZE("f", 1 << 20);
	T(truncate("f", 0), 0);
	SIZE("f", 0);
}

static void truncate_errors(struct cx *c)
{
	int fd;

	FILE_("f", 0644, 0, 0);
	DIR_("d", 0755, 0, 0);
	T(mkfifo("p", 0666), 0);
	T(truncate("d", 0), EISDIR);
	T(truncate("f", -1), EINVAL);
	T(truncate("p", 0), EINVAL);
	T(truncate("nothing", 0), ENOENT);
	T(truncate("f/x", 0), ENOTDIR);
	T(fd = open("f", O_RDONLY), 0);
	T(ftruncate(fd, 0), EINVAL);
	close(fd);
	USER();
	T(truncate("f", 0), EACCES);
	SIZE("f", strlen(DATA));
}

static void ftruncate_user_open(struct cx *c)
{
	int fd;

	FILE_("f", 0600, UID_U, GID_U);
	USER();
	T(fd = open("f", O_RDWR), 0);
	T(fchmod(fd, 0400), 0); /* the handle keeps its access */
	T(ftruncate(fd, 1), 0);
	close(fd);
	SIZE("f", 1);
}

/* ---- unlink ----------------------------------------------------------- */

static void unlink_cases(struct cx *c)
{
	char buf[8];
	int fd;

	FILE_("f", 0644, 0, 0);
	DIR_("d", 0755, 0, 0);
	T(unlink("d"), EISDIR);
	T(unlink("nothing"), ENOENT);
	T(unlink("f/x"), ENOTDIR);
	T(fd = open("f", O_RDONLY), 0);
	T(unlink("f"), 0);
	ABSENT("f");
	T(read(fd, buf, 4), 0); /* the open file lives on */
	close(fd);
	V("bytes of the unlinked file", memcmp(buf, DATA, 4), 0, 'd');
	T(mkfifo("p", 0600), 0);
	T(unlink("p"), 0);
	T(symlink("nothing", "l"), 0);
	T(unlink("l"), 0);
	ABSENT("l");
}

static void unlink_user(struct cx *c)
{
	DIR_("d", 0755, 0, 0);
	FILE_("d/f", 0666, UID_U, GID_U);
	DIR_("mine", 0755, UID_U, GID_U);
	FILE_("mine/f", 0000, 0, 0);
	USER();
	T(unlink("d/f"), EACCES);
	T(unlink("mine/f"), 0); /* a file's own mode does not matter */
}

static void unlink_sticky(struct cx *c)
{
	DIR_("t", 01777, 0, 0);
	FILE_("t/v", 0666, UID_V, GID_V);
	FILE_("t/u", 0644, UID_U, GID_U);
	DIR_("mt", 01777, UID_U, GID_U);
	FILE_("mt/v", 0644, UID_V, GID_V);
	USER();
	T(unlink("t/v"), EPERM);
	T(unlink("t/u"), 0);
	T(unlink("mt/v"), 0); /* the directory's owner may */
	ROOT();
	T(unlink("t/v"), 0);
}

/* ---- utimensat -------------------------------------------------------- */

static void utimes_owner(struct cx *c)
{
	FILE_("f", 0644, UID_U, GID_U);
	USER();
	T(times_set("f", 1000000000, 123456789, 0), 0);
	TIMES("f", 1000000000, 123456789);
}

static void utimes_root(struct cx *c)
{
	FILE_("f", 0600, UID_V, GID_V);
	DIR_("d", 0700, UID_V, GID_V);
	T(times_set("f", 981173106, 5, 0), 0);
	TIMES("f", 981173106, 5);
	T(times_set("d", 981173106, 0, 0), 0);
	TIMES("d", 981173106, 0);
}

static void utimes_nonowner(struct cx *c)
{
	struct stat st;

	FILE_("w", 0666, UID_V, GID_V);
	FILE_("r", 0644, UID_V, GID_V);
	T(times_set("w", 1000, 0, 0), 0);
	USER();
	T(times_set("w", 2000, 0, 0), EPERM);
	T(times_set("r", 2000, 0, 0), EPERM);
	T(utimensat(AT_FDCWD, "w", NULL, 0), 0); /* "now" needs w only */
	T(utimensat(AT_FDCWD, "r", NULL, 0), EACCES);
	T(lstat("w", &st), 0);
	if (st.st_mtime < 1000000000)
		V("mtime of w after now", st.st_mtime, 1000000000, 'd');
}

static void utimes_omit_and_now(struct cx *c)
{
	struct timespec ts[2] = { { 0, UTIME_OMIT }, { 5000, 7 } };
	struct stat st;

	FILE_("f", 0644, UID_U, GID_U);
	T(times_set("f", 1000, 0, 0), 0);
	USER();
	T(utimensat(AT_FDCWD, "f", ts, 0), 0);
	T(lstat("f", &st), 0);
	V("atime of f", st.st_atime, 1000, 'd');
	V("mtime of f", st.st_mtime, 5000, 'd');
	V("mtime ns of f", st.st_mtim.tv_nsec, 7, 'd');
	ts[0].tv_nsec = UTIME_NOW;
	ts[1].tv_nsec = UTIME_OMIT;
	T(utimensat(AT_FDCWD, "f", ts, 0), 0);
	T(lstat("f", &st), 0);
	V("mtime of f", st.st_mtime, 5000, 'd');
	if (st.st_atime < 1000000000)
		V("atime of f after now", st.st_atime, 1000000000, 'd');
}

static void utimes_symlink_nofollow(struct cx *c)
{
	FILE_("f", 0644, 0, 0);
	T(times_set("f", 1000, 0, 0), 0);
	T(symlink("f", "l"), 0);
	T(times_set("l", 3000, 0, AT_SYMLINK_NOFOLLOW), 0);
	TIMES("l", 3000, 0);
	TIMES("f", 1000, 0);
}

static void utimes_errors(struct cx *c)
{
	struct timespec bad[2] = { { 0, 1000000000 }, { 0, 0 } };

	FILE_("f", 0644, 0, 0);
	T(utimensat(AT_FDCWD, "nothing", NULL, 0), ENOENT);
	T(utimensat(AT_FDCWD, "f", bad, 0), EINVAL);
}

/* ---- permissions on the way ------------------------------------------- */

static void search_permission(struct cx *c)
{
	struct stat st;

	DIR_("d", 0700, 0, 0);
	FILE_("d/f", 0644, 0, 0);
	DIR_("x", 0711, 0, 0);
	FILE_("x/f", 0644, 0, 0);
	USER();
	T(lstat("d/f", &st), EACCES);
	T(open_close("d", O_RDONLY), EACCES);
	T(lstat("x/f", &st), 0);
	T(open_close("x", O_RDONLY), EACCES); /* listing needs r */
	T(read_is("x/f", DATA), 0);
}

/* ---- the cases -------------------------------------------------------- */

struct kase {
	const char *name;
	void (*fn)(struct cx *c);
};

#define CASE(fn)        \
	{               \
#fn, fn \
	}

static const struct kase rw_cases[] = {
	CASE(chmod_owner),
	CASE(chmod_nonowner_eperm),
	CASE(chmod_root_any),
	CASE(chmod_sticky_root),
	CASE(chmod_sticky_user),
	CASE(chmod_setgid_nonmember_dropped),
	CASE(chmod_setgid_member),
	CASE(chmod_fifo),
	CASE(chmod_enoent),
	CASE(chown_root),
	CASE(chown_user_other_eperm),
	CASE(chown_user_group_member),
	CASE(chown_user_group_nonmember_eperm),
	CASE(chown_nonowner_eperm),
	CASE(chown_root_clears_suid),
	CASE(chown_user_clears_suid),
	CASE(chown_dir_keeps_sgid),
	CASE(chown_fifo_root),
	CASE(lchown_symlink_root),
	CASE(write_user_clears_suid),
	CASE(write_other_clears_suid),
	CASE(write_root_keeps_suid),
	CASE(truncate_user_clears_suid),
	CASE(create_owner_mode),
	CASE(create_root_mode),
	CASE(create_setgid_dir_group),
	CASE(create_no_write_eacces),
	CASE(create_no_search_eacces),
	CASE(create_write_search_ok),
	CASE(open_excl_eexist),
	CASE(open_unreadable_eacces),
	CASE(open_root_ignores_mode),
	CASE(open_owner_mode_wins),
	CASE(open_group_access),
	CASE(open_trunc),
	CASE(open_dir_write_eisdir),
	CASE(open_enotdir),
	CASE(open_enoent),
	CASE(open_eloop),
	CASE(open_enametoolong),
	CASE(open_creat_through_symlink),
	CASE(open_fifo_nonblock),
	CASE(mkdir_user),
	CASE(mkdir_root),
	CASE(mkdir_errors),
	CASE(mkfifo_user),
	CASE(mknod_devices_root),
	CASE(mknod_devices_user_eperm),
	CASE(mknod_others_user),
	CASE(link_user),
	CASE(link_errors),
	CASE(link_keeps_metadata),
	CASE(link_symlink_and_fifo),
	CASE(rename_files),
	CASE(rename_keeps_metadata),
	CASE(rename_dirs),
	CASE(rename_same_inode),
	CASE(rename_flags),
	CASE(rename_user_eacces),
	CASE(rename_dir_needs_write_on_it),
	CASE(rename_sticky),
	CASE(rmdir_cases),
	CASE(rmdir_user),
	CASE(rmdir_sticky),
	CASE(symlink_user),
	CASE(symlink_owner),
	CASE(symlink_errors),
	CASE(symlink_eloop),
	CASE(truncate_sizes),
	CASE(truncate_errors),
	CASE(ftruncate_user_open),
	CASE(unlink_cases),
	CASE(unlink_user),
	CASE(unlink_sticky),
	CASE(utimes_owner),
	CASE(utimes_root),
	CASE(utimes_nonowner),
	CASE(utimes_omit_and_now),
	CASE(utimes_symlink_nofollow),
	CASE(utimes_errors),
	CASE(search_permission),
};

/* ---- read-only: the fixtures of "setup", every change EROFS ----------- */

static void ro_reads(struct cx *c)
{
	char buf[8];
	ssize_t n;

	T(read_is("f", RO_DATA), 0);
	TYPE("d", S_IFDIR);
	TYPE("d/x", S_IFREG);
	T(n = readlink("l", buf, sizeof(buf)), 0);
	V("readlink length", n, 1, 'd');
	T(read_is("l", RO_DATA), 0);
	T(open_close("d", O_RDONLY), 0);
	USER();
	T(read_is("f", RO_DATA), 0);
	T(access("f", R_OK), 0);
	T(access("f", W_OK), EROFS);
}

/* Every change: EROFS, as root and as a user (the mount's read-only
 * check comes before ownership and permission checks). */
static void ro_changes(struct cx *c, int as_user)
{
	struct timespec ts[2] = { { 1, 0 }, { 1, 0 } };

	if (as_user)
		USER();
	T(open_close("f", O_WRONLY), EROFS);
	T(open_close("f", O_RDWR), EROFS);
	T(open_close("f", O_RDONLY | O_TRUNC), EROFS);
	T(creat_("new", 0644), EROFS);
	T(mkdir("newd", 0755), EROFS);
	T(mkfifo("p", 0644), EROFS);
	T(mknod("s", S_IFSOCK | 0644, 0), EROFS);
	T(symlink("f", "l2"), EROFS);
	T(link("f", "g"), EROFS);
	T(rename("f", "g"), EROFS);
	T(unlink("f"), EROFS);
	T(rmdir("d"), EROFS);
	T(unlink("d/x"), EROFS);
	T(truncate("f", 0), EROFS);
	T(utimensat(AT_FDCWD, "f", ts, 0), EROFS);
	T(chmod("f", 0600), EROFS);
	T(chown("f", UID_U, GID_U), EROFS);
	T(mknod("c", S_IFCHR | 0600, makedev(1, 3)), EROFS);
	T(read_is("f", RO_DATA), 0);
}

static void ro_changes_root(struct cx *c)
{
	ro_changes(c, 0);
}

static void ro_changes_user(struct cx *c)
{
	ro_changes(c, 1);
}

static const struct kase ro_cases[] = {
	CASE(ro_reads),
	CASE(ro_changes_root),
	CASE(ro_changes_user),
};

/* ---- the runner ------------------------------------------------------- */

static long long mono_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * NSEC_PER_SEC + ts.tv_nsec;
}

/* One line of /proc/PID/FILE, for the hang report. */
static void proc_line(pid_t pid, const char *file, char *buf, size_t len)
{
	char path[64];
	ssize_t n = -1;
	int fd;

	snprintf(path, sizeof(path), "/proc/%d/%s", (int)pid, file);
	fd = open(path, O_RDONLY);
	if (fd >= 0) {
		n = read(fd, buf, len - 1);
		close(fd);
	}
	if (n < 0)
		n = snprintf(buf, len, "(%s)", strerror(errno));
	buf[n] = '\0';
	buf[strcspn(buf, "\n")] = '\0';
}

/*
 * What a hung case waits in, as "# " lines: its wait channel and system
 * call, then the kernel's stacks of every blocked task (sysrq w).
 */
static void report_hang(const struct kase *k, pid_t pid)
{
	char wchan[128], sc[256], line[1024];
	int kmsg, trig;
	ssize_t n;

	proc_line(pid, "wchan", wchan, sizeof(wchan));
	proc_line(pid, "syscall", sc, sizeof(sc));
	printf("# %s: hung in wchan %s, syscall %s\n", k->name, wchan, sc);
	kmsg = open("/dev/kmsg", O_RDONLY | O_NONBLOCK);
	trig = open("/proc/sysrq-trigger", O_WRONLY);
	if (kmsg < 0 || trig < 0)
		goto out;
	lseek(kmsg, 0, SEEK_END);
	if (write(trig, "w", 1) != 1)
		goto out;
	while ((n = read(kmsg, line, sizeof(line) - 1)) > 0) {
		char *text = strchr(line, ';');

		line[n] = '\0';
		text = text ? text + 1 : line;
		printf("# %s: kernel: %.*s\n", k->name,
		       (int)strcspn(text, "\n"), text);
	}
out:
	if (kmsg >= 0)
		close(kmsg);
	if (trig >= 0)
		close(trig);
}

/*
 * Waits for the case, counting only the time the guest ran against
 * CASE_TIMEOUT_S; past that, reports the hang and kills the case.
 * Returns 1 for a case killed here, 0 when it ended by itself.
 */
static int watch_case(const struct kase *k, pid_t pid, int *status)
{
	const struct timespec tick = { 0, CASE_TICK_MS * NSEC_PER_MSEC };
	long long prev = mono_ns(), ran = 0;
	sigset_t chld;

	sigemptyset(&chld);
	sigaddset(&chld, SIGCHLD);

	for (;;) {
		long long now, gap;
		pid_t w = waitpid(pid, status, WNOHANG);

		if (w == pid)
			return 0;
		if (w < 0 && errno != EINTR) {
			*status = 0;
			return 0;
		}
		sigtimedwait(&chld, NULL, &tick); /* an end wakes it at once */
		now = mono_ns();
		gap = now - prev;
		prev = now;
		if (gap > CASE_STILL_S * NSEC_PER_SEC)
			printf("# %s: the guest stood still for %lld s"
			       " (not counted against the case)\n",
			       k->name, gap / NSEC_PER_SEC);
		else
			ran += gap;
		if (ran > CASE_TIMEOUT_S * NSEC_PER_SEC) {
			report_hang(k, pid);
			kill(pid, SIGKILL);
			waitpid(pid, status, 0);
			return 1;
		}
	}
}

/* One case in a process of its own, in dir (made here when mk). */
static int run_case(const struct kase *k, const char *dir, int mk)
{
	struct cx cx = { .name = k->name };
	sigset_t chld;
	int status;
	pid_t pid;

	/* Blocked in the runner, for watch_case()'s sigtimedwait(). */
	sigemptyset(&chld);
	sigaddset(&chld, SIGCHLD);
	sigprocmask(SIG_BLOCK, &chld, NULL);
	fflush(stdout);
	pid = fork();
	if (pid < 0) {
		printf("not ok %s: fork: %s\n", k->name, strerror(errno));
		return 1;
	}
	if (pid == 0) {
		sigprocmask(SIG_UNBLOCK, &chld, NULL);
		umask(0);
		if (mk && (mkdir(dir, 0755) || chmod(dir, 0755))) {
			printf("not ok %s: mkdir %s: %s\n", k->name, dir,
			       strerror(errno));
			_exit(1);
		}
		if (chdir(dir)) {
			printf("not ok %s: chdir %s: %s\n", k->name, dir,
			       strerror(errno));
			_exit(1);
		}
		k->fn(&cx);
		if (cx.why[0])
			printf("not ok %s: %s\n", k->name, cx.why);
		else
			printf("ok %s\n", k->name);
		fflush(stdout);
		_exit(cx.why[0] ? 1 : 0);
	}
	if (watch_case(k, pid, &status)) {
		printf("not ok %s: no end after %d s of guest time (killed)\n",
		       k->name, CASE_TIMEOUT_S);
		return 1;
	}
	if (WIFSIGNALED(status)) {
		printf("not ok %s: killed by signal %d\n", k->name,
		       WTERMSIG(status));
		return 1;
	}
	return WEXITSTATUS(status) != 0;
}

static int run(const struct kase *cases, size_t n, const char *top, int mk,
	       const char *only)
{
	char dir[PATH_MAX];
	size_t ran = 0;
	int failed = 0;

	for (size_t i = 0; i < n; i++) {
		if (only && strcmp(only, cases[i].name))
			continue;
		ran++;
		if (mk)
			snprintf(dir, sizeof(dir), "%s/%s", top, cases[i].name);
		else
			snprintf(dir, sizeof(dir), "%s", top);
		failed += run_case(&cases[i], dir, mk);
	}
	printf("conform: %zu passed, %d failed\n", ran - failed, failed);
	return failed > MAX_STATUS ? MAX_STATUS : failed;
}

static int setup(const char *dir)
{
	char path[PATH_MAX];

	umask(022);
	snprintf(path, sizeof(path), "%s/f", dir);
	if (write_str(path, RO_DATA, O_CREAT | O_EXCL) == 0) {
		snprintf(path, sizeof(path), "%s/d", dir);
		if (!mkdir(path, 0755)) {
			snprintf(path, sizeof(path), "%s/d/x", dir);
			if (!write_str(path, "", O_CREAT | O_EXCL)) {
				snprintf(path, sizeof(path), "%s/l", dir);
				if (!symlink("f", path))
					return 0;
			}
		}
	}
	perror(path);
	return 1;
}

int main(int argc, char **argv)
{
	char top[PATH_MAX];

	setvbuf(stdout, NULL, _IOLBF, 0);
	if (argc != 3 && argc != 4) {
		fprintf(stderr,
			"usage: posix-conform rw|ro|setup DIR [CASE]\n");
		return 2;
	}
	if (geteuid()) {
		fprintf(stderr, "posix-conform: must run as root\n");
		return 2;
	}
	if (!strcmp(argv[1], "setup"))
		return setup(argv[2]);
	if (!strcmp(argv[1], "ro"))
		return run(ro_cases, sizeof(ro_cases) / sizeof(ro_cases[0]),
			   argv[2], 0, argv[3]);
	if (strcmp(argv[1], "rw")) {
		fprintf(stderr, "posix-conform: unknown mode %s\n", argv[1]);
		return 2;
	}
	snprintf(top, sizeof(top), "%s/conform", argv[2]);
	umask(0);
	if (mkdir(top, 0755) || chmod(top, 0755) || chmod(argv[2], 0755)) {
		perror(top);
		return 2;
	}
	return run(rw_cases, sizeof(rw_cases) / sizeof(rw_cases[0]), top, 1,
		   argv[3]);
}
