// SPDX-License-Identifier: GPL-2.0
/*
 * Containers in the guest (see container.h).
 *
 * CONTAINER_CREATE forks the holder. It joins CONTAINER_CGROUP/<id>/
 * holder, unshares its mount namespace (and the UTS, IPC and PID ones
 * where the kernel has them), binds the root onto itself and makes it
 * its root (pivot_root; on the initramfs, whose rootfs pivot_root
 * cannot move, the root is moved over / and chrooted into, as
 * switch_root does).
 *
 * With a PID namespace the holder then forks the container's init, the
 * namespace's pid 1 (a pause container's process): it mounts the
 * defaults and the request's mounts (a proc shows the pid namespace of
 * whoever mounts it, so only a process inside may), sets the hostname,
 * reports over a pipe and then only reaps the orphans the kernel hands
 * it. The namespace lives as long as its pid 1, so every process run in
 * the container is an ordinary one (pid > 1), however many come and go.
 * The holder is the init's parent: it reaps it and ends with it, so a
 * container whose init died has no holder, which is what a process
 * started in it is told. Without a PID namespace the holder does the
 * mounts itself, reports and waits. A mount namespace keeps the root it
 * was set up with: a process that joins it with setns() lands in the
 * container's root (the kernel follows the mounts on top of the
 * namespace's root).
 *
 * CONTAINER_DELETE writes cgroup.kill, which SIGKILLs the holder, the
 * init and every process of the container, new ones included, and waits
 * for the cgroup to empty; the namespaces and their mounts go with their
 * last process. The processes are reaped by their parents: the
 * connections that ran them, the holder (the init), or init.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/magic.h>
#include <linux/openat2.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/syscall.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <grp.h>
#include <time.h>
#include <unistd.h>

#include "guest/agent/container.h"
#include "lib/compiler.h"

#define CGROUP_MOUNT	 "/sys/fs/cgroup"
#define CONTAINER_CGROUP CGROUP_MOUNT "/kiln-containers"
#define DIR_MODE	 0755
/* How long CONTAINER_DELETE waits for the killed processes to go. */
#define DELETE_WAIT_MS 10000
/* Bytes of a holder's error message. */
#define HOLDER_MSG_MAX 240
/* RLIM_INFINITY as the wire carries it. */
#define WIRE_RLIM_INF (~0ULL)
/* The container init's name: /proc/1/cmdline and comm inside. */
#define CINIT_NAME "kiln-container-init"
#define CINIT_COMM "kiln-cinit"

struct cmount {
	char *dst, *type, *src;
	char **opts; /* NULL-terminated */
	size_t nopts;
};

struct create_req {
	char *id, *root, *hostname;
	bool read_only;
	struct cmount *mounts;
	size_t nmounts;
};

/* What the holder reports: 0, or the errno and the step that failed. */
struct holder_status {
	int err;
	char msg[HOLDER_MSG_MAX];
};

/* ---- checking a request ------------------------------------------- */

static bool id_ok(const uint8_t *s, uint32_t n)
{
	if (!n || n > KILN_CONTAINER_ID_MAX || (n == 1 && s[0] == '.') ||
	    (n == 2 && s[0] == '.' && s[1] == '.'))
		return false;
	for (uint32_t i = 0; i < n; i++)
		if (!((s[i] >= 'a' && s[i] <= 'z') ||
		      (s[i] >= 'A' && s[i] <= 'Z') ||
		      (s[i] >= '0' && s[i] <= '9') || s[i] == '_' ||
		      s[i] == '.' || s[i] == '-'))
			return false;
	return true;
}

static int dup_str(const uint8_t *v, uint32_t len, char **out)
{
	if (memchr(v, '\0', len))
		return -EINVAL;
	free(*out);
	*out = strndup((const char *)v, len);
	return *out ? 0 : -ENOMEM;
}

static int dup_path(const uint8_t *v, uint32_t len, char **out)
{
	if (!len || v[0] != '/' || len >= PATH_MAX)
		return -EINVAL;
	return dup_str(v, len, out);
}

static int dup_id(const uint8_t *v, uint32_t len, char **out)
{
	return id_ok(v, len) ? dup_str(v, len, out) : -EINVAL;
}

static const char *const mount_types[] = {
	"bind", "tmpfs", "proc", "sysfs", "devpts", "mqueue", "cgroup2", NULL,
};

static void cmount_free(struct cmount *m)
{
	free(m->dst);
	free(m->type);
	free(m->src);
	for (size_t i = 0; i < m->nopts; i++)
		free(m->opts[i]);
	free(m->opts);
}

static void create_free(struct create_req *q)
{
	free(q->id);
	free(q->root);
	free(q->hostname);
	for (size_t i = 0; i < q->nmounts; i++)
		cmount_free(&q->mounts[i]);
	free(q->mounts);
}

static int parse_cmount(const uint8_t *p, uint32_t len, struct cmount *m,
			const char **why)
{
	struct kiln_tlv_iter it;
	const uint8_t *val;
	uint32_t vlen;
	uint16_t tag;
	char **more;
	int ret = 0, i;

	kiln_tlv__iter(&it, p, len);
	while (!ret && (ret = kiln_tlv__next(&it, &tag, &val, &vlen)) > 0) {
		ret = 0;
		if (tag == KILN_T_PATH) {
			*why = "a mount's destination is not an absolute path";
			ret = dup_path(val, vlen, &m->dst);
		} else if (tag == KILN_T_FSTYPE) {
			*why = "a mount's type is unknown";
			ret = vlen > KILN_FSTYPE_MAX ?
				      -EINVAL :
				      dup_str(val, vlen, &m->type);
		} else if (tag == KILN_T_SOURCE) {
			*why = "a mount's source holds a NUL byte";
			ret = vlen >= PATH_MAX ? -EINVAL :
						 dup_str(val, vlen, &m->src);
		} else if (tag == KILN_T_OPTION) {
			*why = "a mount's option holds a NUL byte";
			more = reallocarray(m->opts, m->nopts + 2,
					    sizeof(*more));
			if (!more)
				return -ENOMEM;
			m->opts = more;
			m->opts[m->nopts] = NULL;
			ret = dup_str(val, vlen, &m->opts[m->nopts]);
			m->opts[++m->nopts] = NULL;
		}
	}
	if (ret < 0)
		return ret;
	*why = "a mount needs a destination and a known type";
	if (!m->dst || !m->type)
		return -EINVAL;
	for (i = 0; mount_types[i]; i++)
		if (!strcmp(m->type, mount_types[i]))
			break;
	if (!mount_types[i])
		return -EINVAL;
	*why = "a bind mount needs an absolute source";
	if (!strcmp(m->type, "bind") && (!m->src || m->src[0] != '/'))
		return -EINVAL;
	return 0;
}

static int parse_create(const struct frame *f, struct create_req *q,
			const char **why)
{
	struct kiln_tlv_iter it;
	const uint8_t *val;
	uint32_t len;
	uint16_t tag;
	uint64_t v;
	int ret = 0;

	kiln_tlv__iter(&it, f->data, f->len);
	while (!ret && (ret = kiln_tlv__next(&it, &tag, &val, &len)) > 0) {
		ret = 0;
		switch (tag) {
		case KILN_T_CONTAINER:
			*why = "the container id is not 1 to 64 of "
			       "[A-Za-z0-9_.-]";
			ret = dup_id(val, len, &q->id);
			break;
		case KILN_T_PATH:
			*why = "the container's root is not an absolute path";
			ret = dup_path(val, len, &q->root);
			break;
		case KILN_T_READ_ONLY:
			*why = "malformed T_READ_ONLY";
			ret = kiln_tlv__u64(val, len, &v);
			q->read_only = v != 0;
			break;
		case KILN_T_HOSTNAME:
			*why = "the hostname is not 1 to 64 bytes";
			ret = !len || len > KILN_HOSTNAME_MAX ?
				      -EINVAL :
				      dup_str(val, len, &q->hostname);
			break;
		case KILN_T_CMOUNT: {
			struct cmount *more;

			*why = "more mounts than KILN_CMOUNTS_MAX";
			if (q->nmounts >= KILN_CMOUNTS_MAX)
				return -EINVAL;
			more = reallocarray(q->mounts, q->nmounts + 1,
					    sizeof(*more));
			if (!more)
				return -ENOMEM;
			q->mounts = more;
			q->mounts[q->nmounts] = (struct cmount){ 0 };
			ret = parse_cmount(val, len, &q->mounts[q->nmounts++],
					   why);
			break;
		}
		}
	}
	if (ret < 0)
		return ret;
	*why = "CONTAINER_CREATE needs T_CONTAINER and T_PATH";
	return q->id && q->root ? 0 : -EINVAL;
}

/* ---- the cgroups ---------------------------------------------------- */

/* cgroup2 at CGROUP_MOUNT, mounted there if it is not yet. */
static int cgroup_ready(void)
{
	struct statfs sf;

	if (!statfs(CGROUP_MOUNT, &sf) && sf.f_type == CGROUP2_SUPER_MAGIC)
		goto base;
	if (mount("cgroup2", CGROUP_MOUNT, "cgroup2",
		  MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL))
		return -errno;
base:
	if (mkdir(CONTAINER_CGROUP, DIR_MODE) && errno != EEXIST)
		return -errno;
	return 0;
}

static int write_file(const char *path, const char *text)
{
	size_t n = strlen(text);
	int fd, ret = 0;

	fd = open(path, O_WRONLY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	if (write(fd, text, n) != (ssize_t)n)
		ret = -errno;
	close(fd);
	return ret;
}

/* The pids of a cgroup.procs file, appended as T_PID (n: how many). */
static int read_pids(const char *path, struct kiln_buf *b, size_t *n,
		     pid_t *first)
{
	char line[32];
	FILE *f;
	int ret = 0;

	*n = 0;
	f = fopen(path, "re");
	if (!f)
		return -errno;
	while (!ret && fgets(line, sizeof(line), f)) {
		if (!*n && first)
			*first = atoi(line);
		if (b)
			ret = kiln_tlv__put_u64(b, KILN_T_PID, atoll(line));
		(*n)++;
	}
	fclose(f);
	return ret;
}

static void remove_cgroups(const char *id)
{
	char path[PATH_MAX];

	snprintf(path, sizeof(path), CONTAINER_CGROUP "/%s/holder", id);
	rmdir(path);
	snprintf(path, sizeof(path), CONTAINER_CGROUP "/%s/procs", id);
	rmdir(path);
	snprintf(path, sizeof(path), CONTAINER_CGROUP "/%s", id);
	rmdir(path);
}

/* The holder's pid: -ENOENT (no such container), -ESRCH (it is gone). */
static int holder_pid(const char *id, pid_t *pid)
{
	char path[PATH_MAX];
	size_t n;
	int ret;

	snprintf(path, sizeof(path), CONTAINER_CGROUP "/%s/holder/cgroup.procs",
		 id);
	ret = read_pids(path, NULL, &n, pid);
	if (ret)
		return ret;
	return n ? 0 : -ESRCH;
}

/* ---- the holder ----------------------------------------------------- */

struct mount_flag {
	const char *name;
	unsigned long set, clear;
};

static const struct mount_flag mount_flags[] = {
	{ "ro", MS_RDONLY, 0 },
	{ "rw", 0, MS_RDONLY },
	{ "nosuid", MS_NOSUID, 0 },
	{ "suid", 0, MS_NOSUID },
	{ "nodev", MS_NODEV, 0 },
	{ "dev", 0, MS_NODEV },
	{ "noexec", MS_NOEXEC, 0 },
	{ "exec", 0, MS_NOEXEC },
	{ "sync", MS_SYNCHRONOUS, 0 },
	{ "async", 0, MS_SYNCHRONOUS },
	{ "noatime", MS_NOATIME, 0 },
	{ "atime", 0, MS_NOATIME },
	{ "nodiratime", MS_NODIRATIME, 0 },
	{ "diratime", 0, MS_NODIRATIME },
	{ "relatime", MS_RELATIME, 0 },
	{ "norelatime", 0, MS_RELATIME },
	{ "strictatime", MS_STRICTATIME, 0 },
	{ "bind", MS_BIND, 0 },
	{ "rbind", MS_BIND | MS_REC, 0 },
	/* propagation: every container mount is private already */
	{ "private", 0, 0 },
	{ "rprivate", 0, 0 },
	{ "slave", 0, 0 },
	{ "rslave", 0, 0 },
	{ "shared", 0, 0 },
	{ "rshared", 0, 0 },
	{ "unbindable", 0, 0 },
	{ "runbindable", 0, 0 },
};

/* Options into mount(2) flags and the filesystem's data ("mode=755"). */
static void split_options(const char *const *opts, unsigned long *flags,
			  char *data, size_t size)
{
	size_t used = 0, i;

	data[0] = '\0';
	for (; opts && *opts; opts++) {
		for (i = 0; i < ARRAY_SIZE(mount_flags); i++)
			if (!strcmp(*opts, mount_flags[i].name))
				break;
		if (i < ARRAY_SIZE(mount_flags)) {
			*flags = (*flags | mount_flags[i].set) &
				 ~mount_flags[i].clear;
			continue;
		}
		used += snprintf(data + used, used < size ? size - used : 0,
				 "%s%s", used ? "," : "", *opts);
	}
}

/* The step that failed, "what: strerror(err)", into @st. */
static void __attribute__((format(printf, 3, 4)))
status_set(struct holder_status *st, int err, const char *fmt, ...)
{
	va_list ap;
	int n;

	va_start(ap, fmt);
	n = vsnprintf(st->msg, sizeof(st->msg), fmt, ap);
	va_end(ap);
	if (n >= 0 && (size_t)n < sizeof(st->msg))
		snprintf(st->msg + n, sizeof(st->msg) - n, ": %s",
			 strerror(err));
	st->err = err;
}

/* mkdir -p of @path, or an empty file at its end when @file. */
static int make_point(const char *path, bool file)
{
	char buf[PATH_MAX];
	size_t i, n = strlen(path);
	int fd;

	if (n >= sizeof(buf))
		return -ENAMETOOLONG;
	memcpy(buf, path, n + 1);
	for (i = 1; i < n; i++) {
		if (buf[i] != '/')
			continue;
		buf[i] = '\0';
		if (mkdir(buf, DIR_MODE) && errno != EEXIST)
			return -errno;
		buf[i] = '/';
	}
	if (!file)
		return mkdir(path, DIR_MODE) && errno != EEXIST ? -errno : 0;
	fd = open(path, O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
	if (fd < 0)
		return -errno;
	close(fd);
	return 0;
}

/* One mount, as the request or the defaults give it. */
struct mount_spec {
	const char *dst, *type;
	const char *const *opts; /* NULL-terminated */
};

/* One mount inside the root (already /); @tree: a bind's open_tree fd. */
static int do_mount(const struct mount_spec *m, int tree,
		    struct holder_status *st)
{
	unsigned long flags = 0;
	char data[512];
	struct stat sb;
	int ret;

	split_options(m->opts, &flags, data, sizeof(data));
	ret = make_point(m->dst, tree >= 0 && !fstat(tree, &sb) &&
					 !S_ISDIR(sb.st_mode));
	if (ret)
		goto out;
	if (tree >= 0) {
		ret = move_mount(tree, "", AT_FDCWD, m->dst,
				 MOVE_MOUNT_F_EMPTY_PATH) ?
			      -errno :
			      0;
		flags &= ~(MS_BIND | MS_REC);
		if (!ret && flags &&
		    mount(NULL, m->dst, NULL, MS_REMOUNT | MS_BIND | flags,
			  NULL))
			ret = -errno;
		goto out;
	}
	if (mount(m->type, m->dst, m->type, flags, data[0] ? data : NULL))
		ret = -errno;
	/* A kernel without POSIX message queues: the mount is left out. */
	if (ret == -ENODEV && !strcmp(m->type, "mqueue"))
		ret = 0;
out:
	if (ret)
		status_set(st, -ret, "mount %s (%s)", m->dst, m->type);
	return ret;
}

static const char *const default_opts_proc[] = { "nosuid", "noexec", "nodev",
						 NULL };
static const char *const default_opts_dev[] = { "nosuid", "strictatime",
						"mode=755", "size=65536k",
						NULL };
static const char *const default_opts_pts[] = { "nosuid",      "noexec",
						"newinstance", "ptmxmode=0666",
						"mode=0620",   NULL };
static const char *const default_opts_shm[] = { "nosuid",      "noexec",
						"nodev",       "mode=1777",
						"size=65536k", NULL };
static const char *const default_opts_sys[] = { "nosuid", "noexec", "nodev",
						"ro", NULL };

/* The OCI runtime's default set, each left out when the request has it. */
static const struct mount_spec default_mounts[] = {
	{ "/proc", "proc", default_opts_proc },
	{ "/dev", "tmpfs", default_opts_dev },
	{ "/dev/pts", "devpts", default_opts_pts },
	{ "/dev/shm", "tmpfs", default_opts_shm },
	{ "/sys", "sysfs", default_opts_sys },
};

static const struct {
	const char *name;
	unsigned int major, minor;
} dev_nodes[] = {
	{ "/dev/null", 1, 3 },	  { "/dev/zero", 1, 5 },
	{ "/dev/full", 1, 7 },	  { "/dev/random", 1, 8 },
	{ "/dev/urandom", 1, 9 }, { "/dev/tty", 5, 0 },
};

static const struct {
	const char *target, *name;
} dev_links[] = {
	{ "pts/ptmx", "/dev/ptmx" },
	{ "/proc/self/fd", "/dev/fd" },
	{ "/proc/self/fd/0", "/dev/stdin" },
	{ "/proc/self/fd/1", "/dev/stdout" },
	{ "/proc/self/fd/2", "/dev/stderr" },
};

/* The standard nodes and links of /dev, where they are missing. */
static int dev_entries(struct holder_status *st)
{
	size_t i;

	for (i = 0; i < ARRAY_SIZE(dev_nodes); i++) {
		if (mknod(dev_nodes[i].name, S_IFCHR | 0666,
			  makedev(dev_nodes[i].major, dev_nodes[i].minor)) &&
		    errno != EEXIST) {
			status_set(st, errno, "create %s", dev_nodes[i].name);
			return -1;
		}
		/* mknod's mode passes through the umask. */
		chmod(dev_nodes[i].name, 0666);
	}
	for (i = 0; i < ARRAY_SIZE(dev_links); i++)
		if (symlink(dev_links[i].target, dev_links[i].name) &&
		    errno != EEXIST) {
			status_set(st, errno, "create %s", dev_links[i].name);
			return -1;
		}
	return 0;
}

static bool requested(const struct create_req *q, const char *dst)
{
	for (size_t i = 0; i < q->nmounts; i++)
		if (!strcmp(q->mounts[i].dst, dst))
			return true;
	return false;
}

/* The namespaces this kernel has besides the mount one. */
static int other_namespaces(void)
{
	int flags = 0;

	if (!access("/proc/self/ns/uts", F_OK))
		flags |= CLONE_NEWUTS;
	if (!access("/proc/self/ns/ipc", F_OK))
		flags |= CLONE_NEWIPC;
	if (!access("/proc/self/ns/pid", F_OK))
		flags |= CLONE_NEWPID;
	return flags;
}

/* @root becomes / (the holder's mount namespace is private already). */
static int enter_root(const char *root, struct holder_status *st)
{
	if (mount(root, root, NULL, MS_BIND | MS_REC, NULL) || chdir(root)) {
		status_set(st, errno, "bind the root %s", root);
		return -1;
	}
	if (!syscall(SYS_pivot_root, ".", ".")) {
		/* The old root is on top of the new one now. */
		if (umount2(".", MNT_DETACH)) {
			status_set(st, errno, "detach the old root");
			return -1;
		}
	} else if (errno != EINVAL || mount(".", "/", NULL, MS_MOVE, NULL) ||
		   chroot(".")) {
		status_set(st, errno, "make %s the root", root);
		return -1;
	}
	if (chdir("/")) {
		status_set(st, errno, "enter the root %s", root);
		return -1;
	}
	return 0;
}

/* The bind sources' open_tree() fds, -1 where a mount is no bind. */
static void close_trees(int *trees, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (trees[i] >= 0)
			close(trees[i]);
	free(trees);
}

/*
 * The holder's part, the failure in *st: the namespaces (@ns besides the
 * mount one), the bind sources opened into @trees (guest paths, so
 * before the root changes), the root.
 */
static int holder_setup(const struct create_req *q, int ns, int *trees,
			struct holder_status *st)
{
	char procs[PATH_MAX];
	size_t i;

	snprintf(procs, sizeof(procs),
		 CONTAINER_CGROUP "/%s/holder/cgroup.procs", q->id);
	if (write_file(procs, "0") || unshare(CLONE_NEWNS | ns) ||
	    mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL)) {
		status_set(st, errno, "make the namespaces");
		return -1;
	}
	for (i = 0; i < q->nmounts; i++) {
		const struct cmount *m = &q->mounts[i];
		bool rec = false;

		if (strcmp(m->type, "bind"))
			continue;
		for (size_t j = 0; j < m->nopts; j++)
			rec |= !strcmp(m->opts[j], "rbind");
		trees[i] = open_tree(AT_FDCWD, m->src,
				     OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC |
					     (rec ? AT_RECURSIVE : 0));
		if (trees[i] < 0) {
			status_set(st, errno, "bind %s from %s", m->dst,
				   m->src);
			return -1;
		}
	}
	return enter_root(q->root, st);
}

/*
 * Inside the root, by the pid namespace's pid 1 where there is one: the
 * mounts, /dev's entries, the read-only root, the hostname.
 */
static int container_setup(const struct create_req *q, const int *trees,
			   struct holder_status *st)
{
	size_t i;

	for (i = 0; i < ARRAY_SIZE(default_mounts); i++)
		if (!requested(q, default_mounts[i].dst) &&
		    do_mount(&default_mounts[i], -1, st))
			return -1;
	for (i = 0; i < q->nmounts; i++) {
		const struct mount_spec m = {
			q->mounts[i].dst, q->mounts[i].type,
			(const char *const *)q->mounts[i].opts
		};

		if (do_mount(&m, trees[i], st))
			return -1;
	}
	if (dev_entries(st))
		return -1;
	if (q->read_only &&
	    mount(NULL, "/", NULL, MS_REMOUNT | MS_BIND | MS_RDONLY, NULL)) {
		status_set(st, errno, "make the root read-only");
		return -1;
	}
	/* Without a UTS namespace this is the guest's own name. */
	if (q->hostname && sethostname(q->hostname, strlen(q->hostname))) {
		status_set(st, errno, "set the hostname %s", q->hostname);
		return -1;
	}
	return 0;
}

/* A failed setup: the step on @status_fd, for create() to report. */
static void __attribute__((noreturn))
setup_failed(const struct holder_status *st, int status_fd)
{
	if (write(status_fd, st, sizeof(*st)) < 0)
		_exit(126);
	_exit(127);
}

/* Ready: nothing of the agent's stays open, success on @status_fd. */
static void report_ready(int status_fd)
{
	struct holder_status st = { 0 };
	int fd;

	fd = open("/dev/null", O_RDWR | O_CLOEXEC);
	for (int i = 0; i < 3; i++)
		if (fd < 0 || dup2(fd, i) < 0)
			close(i);
	if (status_fd > 3)
		syscall(SYS_close_range, 3U, (unsigned int)status_fd - 1, 0);
	if (write(status_fd, &st, sizeof(st)) < 0)
		_exit(126);
	syscall(SYS_close_range, 3U, ~0U, 0);
}

/*
 * /proc/1/cmdline and comm inside the container: its init, not a copy
 * of the agent (the guest's own init, whose memory it shares). The
 * kernel reads a cmdline from anonymous memory only (not the binary's
 * .data), hence a page of its own. The cmdline takes CAP_SYS_RESOURCE,
 * which the agent has in a VM; it is only a name for whoever reads it,
 * so where it is refused (the agent in a user namespace) the agent's
 * own stays.
 */
static void name_init(void)
{
	static const char name[] = CINIT_NAME;
	char *page;

	prctl(PR_SET_NAME, CINIT_COMM, 0, 0, 0);
	page = mmap(NULL, sizeof(name), PROT_READ | PROT_WRITE,
		    MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (page == MAP_FAILED)
		return;
	memcpy(page, name, sizeof(name));
	/* The new start is below the old end (the stack): start first. */
	if (prctl(PR_SET_MM, PR_SET_MM_ARG_START, (unsigned long)page, 0, 0)) {
		munmap(page, sizeof(name));
		return;
	}
	prctl(PR_SET_MM, PR_SET_MM_ARG_END, (unsigned long)page + sizeof(name),
	      0, 0);
}

/*
 * The container's init, pid 1 of its pid namespace: sets the container
 * up, reports on @status_fd, then reaps whatever is orphaned inside (the
 * kernel reparents it here) until a SIGKILL from outside ends it, and
 * the namespace with it. All signals stay blocked (the holder's mask):
 * SIGCHLD is taken with sigwaitinfo(), and a pid 1 gets no other signal
 * from inside its namespace that it has no handler for.
 */
static void __attribute__((noreturn))
cinit_main(const struct create_req *q, int *trees, int status_fd)
{
	struct holder_status st = { 0 };
	sigset_t chld;

	if (container_setup(q, trees, &st))
		setup_failed(&st, status_fd);
	name_init();
	report_ready(status_fd);
	sigemptyset(&chld);
	sigaddset(&chld, SIGCHLD);
	for (;;)
		if (waitpid(-1, NULL, 0) < 0 && errno == ECHILD)
			sigwaitinfo(&chld, NULL);
}

/*
 * The holder: set up, then either fork the init and live as long as it
 * does, or (no PID namespace) report on @status_fd and wait to be
 * killed.
 */
static void __attribute__((noreturn))
holder_main(const struct create_req *q, int status_fd)
{
	struct holder_status st = { 0 };
	int ns = other_namespaces(), *trees;
	sigset_t all;
	pid_t init;
	size_t i;

	/* Only cgroup.kill's SIGKILL ends it. */
	sigfillset(&all);
	sigprocmask(SIG_SETMASK, &all, NULL);
	setsid();
	trees = malloc((q->nmounts + 1) * sizeof(*trees));
	if (!trees) {
		status_set(&st, ENOMEM, "the holder");
		setup_failed(&st, status_fd);
	}
	for (i = 0; i < q->nmounts; i++)
		trees[i] = -1;
	if (holder_setup(q, ns, trees, &st))
		setup_failed(&st, status_fd);
	if (!(ns & CLONE_NEWPID)) {
		if (container_setup(q, trees, &st))
			setup_failed(&st, status_fd);
		close_trees(trees, q->nmounts);
		report_ready(status_fd);
		for (;;)
			sigsuspend(&all);
	}
	init = fork();
	if (init == 0)
		cinit_main(q, trees, status_fd);
	if (init < 0) {
		status_set(&st, errno, "fork the init");
		setup_failed(&st, status_fd);
	}
	/* The init reports; the status pipe ends with it. */
	syscall(SYS_close_range, 0U, ~0U, 0);
	free(trees);
	while (waitpid(init, NULL, 0) < 0 && errno == EINTR)
		;
	_exit(0);
}

/* ---- the requests --------------------------------------------------- */

static void create(struct conn *c, const struct create_req *q)
{
	struct holder_status st = { 0 };
	int status[2] = { -1, -1 }, ret;
	char path[PATH_MAX];
	ssize_t n;
	pid_t pid;

	ret = cgroup_ready();
	if (ret) {
		conn__error(c, -ret,
			    "container %s: cgroup2 at " CGROUP_MOUNT ": %s",
			    q->id, strerror(-ret));
		return;
	}
	snprintf(path, sizeof(path), CONTAINER_CGROUP "/%s", q->id);
	if (mkdir(path, DIR_MODE)) {
		ret = errno;
		conn__error(c, ret, "container %s: %s", q->id,
			    ret == EEXIST ? "the id is taken" : strerror(ret));
		return;
	}
	snprintf(path, sizeof(path), CONTAINER_CGROUP "/%s/holder", q->id);
	ret = mkdir(path, DIR_MODE);
	snprintf(path, sizeof(path), CONTAINER_CGROUP "/%s/procs", q->id);
	if (ret || mkdir(path, DIR_MODE) || pipe2(status, O_CLOEXEC)) {
		ret = errno;
		conn__error(c, ret, "container %s: %s", q->id, strerror(ret));
		goto out_remove;
	}
	pid = fork();
	if (pid == 0)
		holder_main(q, status[1]);
	if (pid < 0) {
		ret = errno;
		conn__error(c, ret, "container %s: cannot fork: %s", q->id,
			    strerror(ret));
		goto out_remove;
	}
	close(status[1]);
	status[1] = -1;
	do
		n = read(status[0], &st, sizeof(st));
	while (n < 0 && errno == EINTR);
	if (n == sizeof(st) && !st.err) {
		/* The holder lives on; init reaps it once it is killed. */
		close(status[0]);
		conn__ok(c);
		return;
	}
	waitpid(pid, NULL, 0);
	st.msg[sizeof(st.msg) - 1] = '\0';
	if (n != sizeof(st) || !st.err)
		conn__error(c, EIO, "container %s: the holder died", q->id);
	else
		conn__error(c, st.err, "container %s: %s", q->id, st.msg);
out_remove:
	if (status[0] >= 0)
		close(status[0]);
	if (status[1] >= 0)
		close(status[1]);
	remove_cgroups(q->id);
}

static int64_t now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Is the cgroup (and every cgroup below) without a live process? */
static bool cgroup_empty(int events_fd)
{
	char buf[256];
	ssize_t n = pread(events_fd, buf, sizeof(buf) - 1, 0);

	if (n <= 0)
		return false;
	buf[n] = '\0';
	return strstr(buf, "populated 0") != NULL;
}

static void delete (struct conn *c, const char *id)
{
	struct pollfd pfd = { .events = POLLPRI };
	char path[PATH_MAX];
	int64_t end;
	int ret;

	snprintf(path, sizeof(path), CONTAINER_CGROUP "/%s/cgroup.events", id);
	pfd.fd = open(path, O_RDONLY | O_CLOEXEC);
	if (pfd.fd < 0) {
		ret = errno;
		conn__error(c, ret, "container %s: %s", id,
			    ret == ENOENT ? "no such container" :
					    strerror(ret));
		return;
	}
	snprintf(path, sizeof(path), CONTAINER_CGROUP "/%s/cgroup.kill", id);
	ret = write_file(path, "1");
	if (ret) {
		conn__error(c, -ret, "container %s: cannot kill: %s", id,
			    strerror(-ret));
		goto out;
	}
	/* cgroup.events is POLLPRI once "populated" changes. */
	end = now_ms() + DELETE_WAIT_MS;
	while (!cgroup_empty(pfd.fd) && now_ms() < end)
		poll(&pfd, 1, (int)(end - now_ms()));
	if (!cgroup_empty(pfd.fd)) {
		conn__error(c, EBUSY,
			    "container %s: processes left after SIGKILL", id);
		goto out;
	}
	remove_cgroups(id);
	snprintf(path, sizeof(path), CONTAINER_CGROUP "/%s", id);
	if (!access(path, F_OK)) {
		conn__error(c, EBUSY, "container %s: cannot remove %s", id,
			    path);
		goto out;
	}
	conn__ok(c);
out:
	close(pfd.fd);
}

static void list(struct conn *c)
{
	char path[PATH_MAX];
	struct kiln_buf b;
	struct dirent *d;
	size_t mark, n;
	DIR *dir;
	int ret = 0;

	kiln_buf__init(&b);
	dir = opendir(CONTAINER_CGROUP);
	while (dir && !ret && (d = readdir(dir))) {
		if (d->d_type != DT_DIR || d->d_name[0] == '.')
			continue;
		snprintf(path, sizeof(path),
			 CONTAINER_CGROUP "/%s/procs/cgroup.procs", d->d_name);
		ret = kiln_tlv__begin(&b, KILN_T_CONTAINER_ENTRY, &mark);
		ret = ret ?: kiln_tlv__put_str(&b, KILN_T_CONTAINER, d->d_name);
		if (!ret && read_pids(path, &b, &n, NULL) == -E2BIG)
			ret = -E2BIG;
		if (!ret)
			kiln_tlv__end(&b, mark);
	}
	if (dir)
		closedir(dir);
	if (ret)
		conn__error(c, -ret, "the container list: %s", strerror(-ret));
	else
		conn__send_buf(c, KILN_MSG_RESULT, &b);
	kiln_buf__free(&b);
}

void container__handle(struct conn *c, const struct frame *req, bool in_vm)
{
	struct create_req q = { 0 };
	const char *why = "malformed request";
	int ret = 0;

	if (req->type == KILN_MSG_CONTAINER_CREATE) {
		ret = parse_create(req, &q, &why);
	} else if (req->type == KILN_MSG_CONTAINER_DELETE) {
		struct kiln_tlv_iter it;
		const uint8_t *val;
		uint32_t len;
		uint16_t tag;

		why = "CONTAINER_DELETE needs a valid T_CONTAINER";
		kiln_tlv__iter(&it, req->data, req->len);
		while ((ret = kiln_tlv__next(&it, &tag, &val, &len)) > 0)
			if (tag == KILN_T_CONTAINER &&
			    (ret = dup_id(val, len, &q.id)))
				break;
		if (!ret && !q.id)
			ret = -EINVAL;
	}
	if (ret < 0) {
		conn__error(c, -ret, "%s", why);
		goto out;
	}
	if (!in_vm) {
		conn__error(c, ENOTSUP, "containers only in a VM");
		goto out;
	}
	if (req->type == KILN_MSG_CONTAINER_CREATE)
		create(c, &q);
	else if (req->type == KILN_MSG_CONTAINER_DELETE)
		delete (c, q.id);
	else
		list(c);
out:
	create_free(&q);
}

/* ---- PROC_START in a container ------------------------------------- */

void container__exec_init(struct container_exec *x)
{
	*x = (struct container_exec){
		.mnt_fd = -1,
		.uts_fd = -1,
		.ipc_fd = -1,
		.root_fd = -1,
		.procs_fd = -1,
	};
}

void container__exec_free(struct container_exec *x)
{
	free(x->id);
	free(x->groups);
	free(x->rlimits);
	for (int *fd = &x->mnt_fd; fd <= &x->procs_fd; fd++)
		if (*fd >= 0)
			close(*fd);
	container__exec_init(x);
}

static int parse_rlimit(const uint8_t *p, uint32_t len,
			struct container_rlimit *r)
{
	uint64_t res = RLIM_NLIMITS, soft = 0, hard = 0, *out;
	struct kiln_tlv_iter it;
	const uint8_t *val;
	uint32_t vlen;
	uint16_t tag;
	int ret;

	kiln_tlv__iter(&it, p, len);
	while ((ret = kiln_tlv__next(&it, &tag, &val, &vlen)) > 0) {
		out = tag == KILN_T_RESOURCE ? &res :
		      tag == KILN_T_SOFT     ? &soft :
		      tag == KILN_T_HARD     ? &hard :
					       NULL;
		if (out && kiln_tlv__u64(val, vlen, out))
			return -EPROTO;
	}
	if (ret < 0 || res >= RLIM_NLIMITS || soft > hard)
		return -EINVAL;
	r->resource = res;
	r->lim.rlim_cur = soft == WIRE_RLIM_INF ? RLIM_INFINITY : soft;
	r->lim.rlim_max = hard == WIRE_RLIM_INF ? RLIM_INFINITY : hard;
	return 0;
}

int container__exec_field(struct container_exec *x, uint16_t tag,
			  const uint8_t *val, uint32_t len, const char **why)
{
	uint64_t v;
	void *more;

	switch (tag) {
	case KILN_T_CONTAINER:
		*why = "the container id is not 1 to 64 of [A-Za-z0-9_.-]";
		return dup_id(val, len, &x->id) ?: 1;
	case KILN_T_UID:
	case KILN_T_GID:
		*why = "T_UID or T_GID is not an id";
		if (kiln_tlv__u64(val, len, &v) || v >= (uid_t)-1)
			return -EINVAL;
		if (tag == KILN_T_UID) {
			x->uid = v;
			x->has_ids = true;
		} else {
			x->gid = v;
		}
		return 1;
	case KILN_T_GROUP:
		*why = "T_GROUP is not a gid, or more than KILN_GROUPS_MAX";
		if (kiln_tlv__u64(val, len, &v) || v >= (gid_t)-1 ||
		    x->ngroups >= KILN_GROUPS_MAX)
			return -EINVAL;
		more = reallocarray(x->groups, x->ngroups + 1,
				    sizeof(*x->groups));
		if (!more)
			return -ENOMEM;
		x->groups = more;
		x->groups[x->ngroups++] = v;
		return 1;
	case KILN_T_RLIMIT:
		*why = "T_RLIMIT is not a limit (RLIMIT_*, soft <= hard)";
		if (x->nrlimits >= RLIM_NLIMITS)
			return -EINVAL;
		more = reallocarray(x->rlimits, x->nrlimits + 1,
				    sizeof(*x->rlimits));
		if (!more)
			return -ENOMEM;
		x->rlimits = more;
		return parse_rlimit(val, len, &x->rlimits[x->nrlimits++]) ?: 1;
	case KILN_T_NO_NEW_PRIVS:
		*why = "malformed T_NO_NEW_PRIVS";
		if (kiln_tlv__u64(val, len, &v) || v > 1)
			return -EINVAL;
		x->no_new_privs = v;
		return 1;
	}
	return 0;
}

/* The holder's namespace @name, when it is not the caller's own: -1. */
static int open_ns(pid_t holder, const char *name, const char *own)
{
	char path[64], mine[64];
	struct stat a, b;

	snprintf(path, sizeof(path), "/proc/%d/ns/%s", holder, name);
	snprintf(mine, sizeof(mine), "/proc/self/ns/%s", own);
	if (stat(path, &a) || stat(mine, &b) ||
	    (a.st_dev == b.st_dev && a.st_ino == b.st_ino))
		return -1;
	return open(path, O_RDONLY | O_CLOEXEC);
}

int container__exec_prepare(struct conn *c, struct container_exec *x)
{
	char path[PATH_MAX];
	struct kiln_buf b;
	pid_t holder;
	int ret, pid_fd;

	if (!x->id)
		return 0;
	ret = holder_pid(x->id, &holder);
	if (ret == -ENOENT) {
		kiln_buf__init(&b);
		snprintf(path, sizeof(path), "no container \"%s\"", x->id);
		if (!conn__error_payload(&b, ENOENT, path) &&
		    !kiln_tlv__put_str(&b, KILN_T_CONTAINER, x->id))
			conn__send_buf(c, KILN_MSG_ERROR, &b);
		kiln_buf__free(&b);
		return ret;
	}
	if (ret) {
		conn__error(c, -ret, "container %s: its holder is gone: %s",
			    x->id, strerror(-ret));
		return ret;
	}
	snprintf(path, sizeof(path), CONTAINER_CGROUP "/%s/procs/cgroup.procs",
		 x->id);
	x->procs_fd = open(path, O_WRONLY | O_CLOEXEC);
	x->mnt_fd = open_ns(holder, "mnt", "mnt");
	x->uts_fd = open_ns(holder, "uts", "uts");
	x->ipc_fd = open_ns(holder, "ipc", "ipc");
	snprintf(path, sizeof(path), "/proc/%d/root", holder);
	x->root_fd = open(path, O_PATH | O_DIRECTORY | O_CLOEXEC);
	pid_fd = open_ns(holder, "pid_for_children", "pid");
	ret = x->procs_fd < 0 || x->mnt_fd < 0 || x->root_fd < 0 ? -errno : 0;
	/*
	 * The connection forks nothing else: its children are the
	 * container's from here on, each an ordinary process under the
	 * container's init.
	 */
	if (!ret && pid_fd >= 0 && setns(pid_fd, CLONE_NEWPID))
		ret = -errno;
	if (pid_fd >= 0)
		close(pid_fd);
	if (ret)
		conn__error(c, -ret, "container %s: cannot join it: %s", x->id,
			    strerror(-ret));
	return ret;
}

int container__open_ptmx(const struct container_exec *x)
{
	struct open_how how = {
		.flags = O_RDWR | O_NOCTTY | O_CLOEXEC,
		/* The container's /dev/ptmx (a link into its /dev/pts) and
		 * its links resolve in its root, not the guest's. */
		.resolve = RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS,
	};
	int fd;

	if (!x->id)
		fd = posix_openpt(how.flags);
	else
		fd = syscall(SYS_openat2, x->root_fd, "/dev/ptmx", &how,
			     sizeof(how));
	return fd < 0 ? -errno : fd;
}

int container__exec_enter(const struct container_exec *x)
{
	size_t i;

	if (x->id) {
		/* The cgroup first: its path is the guest's, not the
		 * container's. */
		if (write(x->procs_fd, "0", 1) != 1 ||
		    (x->uts_fd >= 0 && setns(x->uts_fd, CLONE_NEWUTS)) ||
		    (x->ipc_fd >= 0 && setns(x->ipc_fd, CLONE_NEWIPC)) ||
		    setns(x->mnt_fd, CLONE_NEWNS) || chdir("/"))
			return -1;
	}
	for (i = 0; i < x->nrlimits; i++)
		if (setrlimit(x->rlimits[i].resource, &x->rlimits[i].lim))
			return -1;
	return 0;
}

int container__exec_identity(const struct container_exec *x)
{
	if (x->has_ids && (setgroups(x->ngroups, x->groups) || setgid(x->gid) ||
			   setuid(x->uid)))
		return -1;
	if (x->no_new_privs && prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0))
		return -1;
	return 0;
}
