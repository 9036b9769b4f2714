// SPDX-License-Identifier: GPL-2.0
/*
 * The namespace sandbox's cgroup v2 (vmm/isolate-ns-cgroup.h): found
 * from the mount table, made, sized, frozen, killed and removed.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "lib/errf.h"
#include "lib/log.h"
#include "vmm/isolate-ns-cgroup.h"

#define NS_CGROUP_RMDIR_TRIES 100 /* 10 ms apart: its last exits */
#define NS_CGROUP_FILE_MAX    256 /* cgroup.controllers, cgroup.events */

/* The controllers the limits need, in the order they are set. */
static const char *const controllers[] = { "memory", "cpu", "pids" };
static const char *const limit_files[] = { "memory.max", "cpu.max",
					   "pids.max" };
#define NS_LIMITS ARRAY_SIZE(controllers)

void ns_cgroup__limits(const struct vm_config *c, struct ns_cgroup_limits *l)
{
	l->memory_max = c->mem_mib << 20;
	l->cpu_period_us = NS_CPU_PERIOD_US;
	l->cpu_quota_us = c->nr_cpus * NS_CPU_PERIOD_US;
	l->pids_max = l->memory_max / NS_PIDS_BYTES_PER_TASK;
	if (l->pids_max < NS_PIDS_MIN)
		l->pids_max = NS_PIDS_MIN;
}

/* dir/name's first line (at most len - 1 bytes): 0 or -errno. */
static int read_file(const char *dir, const char *name, char *buf, size_t len)
{
	char path[PATH_MAX + 32];
	ssize_t n;
	int fd;

	snprintf(path, sizeof(path), "%s/%s", dir, name);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	n = read(fd, buf, len - 1);
	close(fd);
	if (n < 0)
		return -errno;
	buf[n] = '\0';
	return 0;
}

/*
 * text into the existing dir/name (never made here; truncated, as a
 * shell's > does): 0 or -errno.
 */
static int write_file(const char *dir, const char *name, const char *text)
{
	char path[PATH_MAX + 32];
	int fd, ret = 0;

	snprintf(path, sizeof(path), "%s/%s", dir, name);
	fd = open(path, O_WRONLY | O_TRUNC | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	if (write(fd, text, strlen(text)) != (ssize_t)strlen(text))
		ret = -errno;
	close(fd);
	return ret;
}

/* Is word one of list's space-separated words? */
static bool has_word(const char *list, const char *word)
{
	size_t n = strlen(word);

	for (const char *p = list; (p = strstr(p, word)); p += n)
		if ((p == list || p[-1] == ' ') &&
		    (p[n] == '\0' || p[n] == ' ' || p[n] == '\n'))
			return true;
	return false;
}

/* A clause appended to out at *pos (truncated at len). */
static void add(char *out, size_t len, size_t *pos, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));
static void add(char *out, size_t len, size_t *pos, const char *fmt, ...)
{
	va_list ap;
	int n;

	if (*pos >= len)
		return;
	va_start(ap, fmt);
	n = vsnprintf(out + *pos, len - *pos, fmt, ap);
	va_end(ap);
	if (n > 0)
		*pos += (size_t)n;
}

int ns_cgroup__apply(const char *parent, const char *dir,
		     const struct ns_cgroup_limits *l, char *warn, size_t len)
{
	char avail[NS_CGROUP_FILE_MAX] = "", on[NS_CGROUP_FILE_MAX] = "";
	char value[NS_LIMITS][48], why[NS_CGROUP_WARN_LEN] = "";
	char missing[64] = "", unset[64] = "", plus[16];
	size_t wpos = 0, mpos = 0, upos = 0;
	int ret, avail_err, failed = 0;
	bool ok[NS_LIMITS];

	snprintf(value[0], sizeof(value[0]), "%llu",
		 (unsigned long long)l->memory_max);
	snprintf(value[1], sizeof(value[1]), "%u %u", l->cpu_quota_us,
		 l->cpu_period_us);
	snprintf(value[2], sizeof(value[2]), "%llu",
		 (unsigned long long)l->pids_max);
	avail_err =
		read_file(parent, "cgroup.controllers", avail, sizeof(avail));
	if (read_file(parent, "cgroup.subtree_control", on, sizeof(on)))
		on[0] = '\0';
	for (size_t i = 0; i < NS_LIMITS; i++) {
		ok[i] = !avail_err && has_word(avail, controllers[i]);
		if (!ok[i]) {
			add(missing, sizeof(missing), &mpos, "%s%s",
			    mpos ? ", " : "", controllers[i]);
			continue;
		}
		if (has_word(on, controllers[i]))
			continue;
		snprintf(plus, sizeof(plus), "+%s", controllers[i]);
		ret = write_file(parent, "cgroup.subtree_control", plus);
		if (ret) {
			ok[i] = false;
			add(why, sizeof(why), &wpos,
			    "%s%s/cgroup.subtree_control: %s: %s",
			    wpos ? "; " : "", parent, plus, strerror(-ret));
		}
	}
	if (avail_err)
		add(why, sizeof(why), &wpos, "%s%s/cgroup.controllers: %s",
		    wpos ? "; " : "", parent, strerror(-avail_err));
	else if (mpos)
		add(why, sizeof(why), &wpos,
		    "%s%s/cgroup.controllers: no %s controller (held by a "
		    "cgroup v1 hierarchy?)",
		    wpos ? "; " : "", parent, missing);
	for (size_t i = 0; i < NS_LIMITS; i++) {
		if (ok[i]) {
			ret = write_file(dir, limit_files[i], value[i]);
			if (ret)
				add(why, sizeof(why), &wpos, "%s%s/%s: %s",
				    wpos ? "; " : "", dir, limit_files[i],
				    strerror(-ret));
			ok[i] = !ret;
		}
		if (!ok[i]) {
			failed++;
			add(unset, sizeof(unset), &upos, "%s%s",
			    upos ? ", " : "", limit_files[i]);
		}
	}
	/* A VM's memory is its RAM: no swap beyond it, where it is counted. */
	if (ok[0]) {
		ret = write_file(dir, "memory.swap.max", "0");
		if (ret && ret != -ENOENT)
			pr_debug("%s/memory.swap.max: %s", dir, strerror(-ret));
	}
	if (!failed) {
		warn[0] = '\0';
		return 0;
	}
	errf(warn, len, 0,
	     "namespace sandbox: cgroup %s: %s: it runs without %s", dir, why,
	     unset);
	return failed;
}

void ns_cgroup__init(struct ns_cgroup *cg)
{
	cg->parent[0] = cg->path[0] = '\0';
	cg->fd = -1;
	cg->frozen = false;
}

/* The cgroup v2 hierarchy's mount point, from /proc/self/mountinfo. */
static bool cgroup2_root(char *out, size_t len)
{
	char line[1024], mnt[PATH_MAX];
	bool found = false;
	FILE *f = fopen("/proc/self/mountinfo", "re");

	if (!f)
		return false;
	while (!found && fgets(line, sizeof(line), f)) {
		if (!strstr(line, " - cgroup2 ") ||
		    sscanf(line, "%*s %*s %*s %*s %4095s", mnt) != 1)
			continue;
		found = (size_t)snprintf(out, len, "%s", mnt) < len;
	}
	fclose(f);
	return found;
}

void ns_cgroup__make(struct ns_cgroup *cg, const struct vm_config *c)
{
	static unsigned int seq;
	char warn[NS_CGROUP_WARN_LEN];
	struct ns_cgroup_limits l;

	if (!cgroup2_root(cg->parent, sizeof(cg->parent))) {
		pr_warn("namespace sandbox: no cgroup v2 hierarchy mounted; "
			"it runs without a cgroup and its memory, cpu and "
			"pids limits");
		return;
	}
	snprintf(cg->path, sizeof(cg->path), "%s/kiln-ns-%d-%u", cg->parent,
		 (int)getpid(), seq++);
	if (mkdir(cg->path, 0755) ||
	    (cg->fd = open(cg->path, O_DIRECTORY | O_CLOEXEC)) < 0) {
		pr_warn("namespace sandbox: cgroup %s: %s; it runs without a "
			"cgroup and its memory, cpu and pids limits",
			cg->path, strerror(errno));
		rmdir(cg->path);
		cg->path[0] = '\0';
		return;
	}
	ns_cgroup__limits(c, &l);
	if (ns_cgroup__apply(cg->parent, cg->path, &l, warn, sizeof(warn)))
		pr_warn("%s", warn);
}

static long long now_ms(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec * 1000LL + t.tv_nsec / 1000000;
}

/*
 * Until cgroup.events says "frozen" is want (the kernel notifies the
 * file's change as POLLPRI), or NS_FREEZE_MS: 0, -ETIMEDOUT or -errno.
 */
static int wait_frozen(const char *dir, bool want)
{
	char path[PATH_MAX + 16], buf[NS_CGROUP_FILE_MAX], *p;
	long long end = now_ms() + NS_FREEZE_MS, left;
	struct pollfd pfd = { .events = POLLPRI };
	ssize_t n;
	int ret = -ETIMEDOUT;

	snprintf(path, sizeof(path), "%s/cgroup.events", dir);
	pfd.fd = open(path, O_RDONLY | O_CLOEXEC);
	if (pfd.fd < 0)
		return -errno;
	for (;;) {
		n = pread(pfd.fd, buf, sizeof(buf) - 1, 0);
		if (n < 0) {
			ret = -errno;
			break;
		}
		buf[n] = '\0';
		p = strstr(buf, "frozen ");
		if (p && (p[7] == '1') == want) {
			ret = 0;
			break;
		}
		left = end - now_ms();
		if (left <= 0)
			break;
		if (poll(&pfd, 1, (int)left) < 0 && errno != EINTR) {
			ret = -errno;
			break;
		}
	}
	close(pfd.fd);
	return ret;
}

int ns_cgroup__freeze(struct ns_cgroup *cg, bool frozen, char *err, size_t len)
{
	int ret;

	if (!cg->path[0])
		return errf(err, len, -EOPNOTSUPP,
			    "the namespace sandbox has no cgroup (no cgroup v2 "
			    "hierarchy writable: see the vmm's warning), so "
			    "it cannot be frozen");
	if (cg->frozen == frozen)
		return errf(err, len, -EALREADY, "%s",
			    frozen ? "the sandbox is paused already" :
				     "the sandbox is not paused");
	ret = write_file(cg->path, "cgroup.freeze", frozen ? "1" : "0");
	if (ret)
		return errf(err, len, ret == -ENOENT ? -EOPNOTSUPP : ret,
			    "%s/cgroup.freeze: %s (the cgroup v2 freezer needs "
			    "Linux 5.2 or later)",
			    cg->path, strerror(-ret));
	ret = wait_frozen(cg->path, frozen);
	if (ret && frozen) {
		if (write_file(cg->path, "cgroup.freeze", "0"))
			pr_debug("%s/cgroup.freeze: thaw failed", cg->path);
		if (ret == -ETIMEDOUT)
			return errf(err, len, ret,
				    "its tasks did not all stop within %u ms; "
				    "the sandbox runs on",
				    NS_FREEZE_MS);
		return errf(err, len, ret,
			    "%s/cgroup.events: %s; the sandbox runs on",
			    cg->path, strerror(-ret));
	}
	if (ret)
		pr_debug("%s: not yet thawed: %s", cg->path, strerror(-ret));
	cg->frozen = frozen;
	return 0;
}

void ns_cgroup__remove(struct ns_cgroup *cg)
{
	int ret;

	if (cg->fd >= 0)
		close(cg->fd);
	cg->fd = -1;
	if (!cg->path[0])
		return;
	ret = write_file(cg->path, "cgroup.kill", "1");
	if (ret)
		pr_debug("%s/cgroup.kill: %s", cg->path, strerror(-ret));
	for (int i = 0; i < NS_CGROUP_RMDIR_TRIES; i++) {
		if (!rmdir(cg->path) || errno != EBUSY)
			break;
		usleep(10000);
	}
	cg->path[0] = '\0';
	cg->frozen = false;
}
