// SPDX-License-Identifier: GPL-2.0
/*
 * The jail (vmm/jail.h, Documentation/security.md "The jail"). Three
 * parts: the plan (which host paths go in, where, and the configuration
 * rewritten to them: no privilege, unit-tested), the set-up in the
 * jail's PID 1 (namespaces, mounts, pivot_root, limits: root, before the
 * VM is built), and the drop (uid, gid, capabilities, no_new_privs: once
 * the VM is built, before any seccomp filter and any vCPU).
 */
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <jansson.h>
#include <limits.h>
#include <linux/capability.h>
#include <linux/magic.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/syscall.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <unistd.h>

#include "lib/compiler.h"
#include "lib/errf.h"
#include "lib/leak-check.h"
#include "lib/log.h"
#include "net/tls.h"
#include "vmm/config.h"
#include "vmm/jail.h"
#include "vmm/rootfs.h"
#include "vmm/vm.h" /* VMM_EXIT_VMM_ERROR */

/* The jail's root: a tmpfs, read-only once set up. */
#define JAIL_TMPFS_OPTS "mode=0755,size=4m"
#define JAIL_HOSTNAME	"kiln"
/* The root image's place and its descriptor's copy. */
#define JAIL_ROOTFS_IMAGE  JAIL_KILN_DIR "/rootfs.img"
#define JAIL_ROOTFS_DESC   JAIL_KILN_DIR "/rootfs.json"
#define JAIL_CA_BUNDLE	   JAIL_KILN_DIR "/ca-bundle.crt"
#define JAIL_CPUS_POSSIBLE "/sys/devices/system/cpu/possible"
/* At most: kernel, initrd, image, 8 mounts, 5 directories, 2 for net. */
#define JAIL_MAX_ENTRIES 24U

/* Device numbers, Documentation/admin-guide/devices.txt. */
#define DEV_MEM_MAJOR	1
#define DEV_NULL_MINOR	3
#define DEV_URANDOM_MIN 9
#define DEV_MISC_MAJOR	10
#define DEV_TUN_MINOR	200
#define DEV_KVM_MINOR	232

enum jail_kind {
	JAIL_FILE,  /* a host file bound onto a file */
	JAIL_DIR,   /* a host directory bound onto a directory */
	JAIL_WRITE, /* a file made in the jail with data */
};

struct jail_entry {
	enum jail_kind kind;
	char *host;   /* JAIL_FILE, JAIL_DIR: resolved */
	char *inside; /* absolute, in the jail */
	bool ro;
	char *data; /* JAIL_WRITE */
	size_t len;
};

struct jail {
	const struct jail_config *cfg;
	struct jail_entry e[JAIL_MAX_ENTRIES];
	unsigned int nr;
	unsigned int nr_dirs; /* the directories' names: d0, d1, ... */
};

void jail__config_free(struct jail_config *j)
{
	free(j->dir);
	free(j->cgroup);
	free(j->cpu_max);
	memset(j, 0, sizeof(*j));
}

/* ---- validation -------------------------------------------------------- */

/* cpu.max: "max" or a quota, then optionally a period, in microseconds. */
static bool cpu_max_ok(const char *s)
{
	unsigned long long quota, period;
	char word[8], junk;
	int n;

	if (sscanf(s, "%7s %llu%c", word, &period, &junk) == 2 &&
	    !strcmp(word, "max"))
		return period > 0;
	if (!strcmp(s, "max"))
		return true;
	if (s[0] < '0' || s[0] > '9')
		return false;
	n = sscanf(s, "%llu %llu%c", &quota, &period, &junk);
	if (n == 1 && strspn(s, "0123456789") == strlen(s))
		return quota > 0;
	return n == 2 && quota > 0 && period > 0 &&
	       !strchr(strchr(s, ' ') + 1, ' ');
}

/* Options that only mean something in a jail, given without --jail. */
static const char *jail_only_option(const struct jail_config *j)
{
	if (j->uid_set)
		return "--uid";
	if (j->gid_set)
		return "--gid";
	if (j->cgroup)
		return "--cgroup";
	if (j->cpu_max)
		return "--cpu-max";
	if (j->memory_max)
		return "--memory-max";
	if (j->rlimit_as)
		return "--rlimit-as";
	if (j->rlimit_nofile)
		return "--rlimit-nofile";
	if (j->rlimit_nproc)
		return "--rlimit-nproc";
	return NULL;
}

int jail__validate(const struct vm_config *c, char *err, size_t len)
{
	const struct jail_config *j = &c->jail;
	const char *opt;

	if (!j->dir) {
		opt = jail_only_option(j);
		if (opt)
			return errf(err, len, -EINVAL,
				    "%s given without --jail DIR (or \"jail\": "
				    "{\"dir\": ...})",
				    opt);
		return 0;
	}
	if (j->dir[0] != '/')
		return errf(err, len, -EINVAL,
			    "jail %s: must be an absolute path", j->dir);
	if (!strcmp(j->dir, "/") || strlen(j->dir) >= PATH_MAX)
		return errf(err, len, -EINVAL,
			    "jail %s: must be a directory of its own", j->dir);
	if (!j->uid_set || !j->gid_set)
		return errf(err, len, -EINVAL,
			    "jail %s: give the uid and gid it runs as (--uid U "
			    "--gid G, or \"uid\" and \"gid\")",
			    j->dir);
	if (!j->uid || !j->gid || j->uid > JAIL_MAX_ID || j->gid > JAIL_MAX_ID)
		return errf(err, len, -EINVAL,
			    "jail uid %llu gid %llu: must be 1 to %llu (not "
			    "root)",
			    (unsigned long long)j->uid,
			    (unsigned long long)j->gid,
			    (unsigned long long)JAIL_MAX_ID);
	if (j->cgroup && j->cgroup[0] != '/')
		return errf(err, len, -EINVAL,
			    "cgroup %s: must be an absolute path (a directory "
			    "in the cgroup v2 hierarchy)",
			    j->cgroup);
	if ((j->cpu_max || j->memory_max) && !j->cgroup)
		return errf(err, len, -EINVAL,
			    "--cpu-max and --memory-max need --cgroup PATH");
	if (j->rlimit_as && KILN_ASAN)
		return errf(err, len, -EINVAL,
			    "--rlimit-as: this vmm is built with "
			    "AddressSanitizer (SAN=1), whose shadow memory "
			    "needs more address space than any limit allows; "
			    "use a build without SAN=1");
	if (j->cpu_max && !cpu_max_ok(j->cpu_max))
		return errf(err, len, -EINVAL,
			    "cpu max \"%s\": must be \"max\" or QUOTA, then "
			    "optionally PERIOD (microseconds, both above 0)",
			    j->cpu_max);
	/*
	 * --net auto works: its netns is made while the VM is built, and
	 * the proxy's netns thread keeps the two capabilities it needs
	 * (jail__keep_caps). A named netns is a host path the jail does
	 * not hold.
	 */
	if (c->net.mode == NET_NETNS)
		return errf(err, len, -EOPNOTSUPP,
			    "jail: --net %s names a host path the jail does "
			    "not hold; use --net auto, tap-fd:N or none in a "
			    "jail",
			    netcfg__mode_name(c->net.mode));
	return 0;
}

/* ---- the plan ------------------------------------------------------------ */

static struct jail_entry *add(struct jail *j, enum jail_kind kind,
			      const char *host, const char *inside, bool ro)
{
	struct jail_entry *e;

	if (j->nr == JAIL_MAX_ENTRIES)
		return NULL;
	e = &j->e[j->nr];
	e->kind = kind;
	e->ro = ro;
	e->host = host ? strdup(host) : NULL;
	e->inside = strdup(inside);
	if ((host && !e->host) || !e->inside) {
		free(e->host);
		free(e->inside);
		return NULL;
	}
	j->nr++;
	return e;
}

static int set_path(char **field, const char *dir, const char *name)
{
	char *p;

	if (asprintf(&p, "%s%s%s", dir, name ? "/" : "", name ? name : "") < 0)
		return -ENOMEM;
	free(*field);
	*field = p;
	return 0;
}

/* A file bound in at inside; *field becomes inside. */
static int plan_file(struct jail *j, char **field, const char *inside, bool ro,
		     const char *what, char *err, size_t len)
{
	char *host = realpath(*field, NULL);

	if (!host)
		return errf(err, len, -errno, "jail: %s %s: %s", what, *field,
			    strerror(errno));
	if (!add(j, JAIL_FILE, host, inside, ro)) {
		free(host);
		return errf(err, len, -ENOMEM, "jail: %s %s: too many paths",
			    what, *field);
	}
	free(host);
	return set_path(field, inside, NULL);
}

/*
 * A file the VM makes, renames or connects to beside others (sockets,
 * logs, a state file): its directory is bound in, read-write, once for
 * all the files in it; *field becomes the file's place in there.
 */
static int plan_in_dir(struct jail *j, char **field, const char *what,
		       char *err, size_t len)
{
	char *copy = strdup(*field), *slash, *host = NULL, inside[64];
	const char *name, *dir;
	unsigned int i;
	int ret;

	if (!copy)
		return -ENOMEM;
	slash = strrchr(copy, '/');
	name = slash ? slash + 1 : copy;
	dir = !slash ? "." : slash == copy ? "/" : copy;
	if (slash && slash != copy)
		*slash = 0;
	if (!*name) {
		ret = errf(err, len, -EINVAL, "jail: %s %s: not a file name",
			   what, *field);
		goto out;
	}
	host = realpath(dir, NULL);
	if (!host) {
		ret = errf(err, len, -errno, "jail: %s %s: %s", what, dir,
			   strerror(errno));
		goto out;
	}
	for (i = 0; i < j->nr; i++)
		if (j->e[i].kind == JAIL_DIR && !strcmp(j->e[i].host, host) &&
		    !j->e[i].ro)
			break;
	if (i == j->nr) {
		snprintf(inside, sizeof(inside), "%s/d%u", JAIL_KILN_DIR,
			 j->nr_dirs++);
		if (!add(j, JAIL_DIR, host, inside, false)) {
			ret = errf(err, len, -ENOMEM,
				   "jail: %s %s: too many paths", what, *field);
			goto out;
		}
	}
	/* name points into copy: copy it out before *field changes. */
	ret = set_path(field, j->e[i].inside, name);
out:
	free(host);
	free(copy);
	return ret;
}

/*
 * The root image: the image file bound in, and a copy of the descriptor
 * naming it there (the rest of the descriptor as it was).
 */
static int plan_rootfs(struct jail *j, struct rootfs_config *r, char *err,
		       size_t len)
{
	struct rootfs_image img = { 0 };
	struct jail_entry *e;
	json_error_t jerr;
	json_t *desc;
	char *img_path;
	int ret;

	if (r->store_socket)
		return errf(err, len, -EINVAL,
			    "jail: a cow root's block store (%s) is not bound "
			    "into the jail (not supported yet)",
			    r->store_socket);
	ret = rootfs__load(&img, r->descriptor, err, len);
	img_path = ret ? NULL : img.path;
	img.path = NULL;
	rootfs__free(&img);
	if (ret)
		return ret;
	ret = plan_file(j, &img_path, JAIL_ROOTFS_IMAGE, true, "root image",
			err, len);
	free(img_path);
	if (ret)
		return ret;
	desc = json_load_file(r->descriptor, JSON_REJECT_DUPLICATES, &jerr);
	if (!desc ||
	    json_object_set_new(desc, "path", json_string(JAIL_ROOTFS_IMAGE))) {
		json_decref(desc);
		return errf(err, len, -EINVAL, "jail: %s: %s", r->descriptor,
			    jerr.text);
	}
	e = add(j, JAIL_WRITE, NULL, JAIL_ROOTFS_DESC, true);
	if (e)
		e->data = json_dumps(desc, JSON_INDENT(2));
	json_decref(desc);
	if (!e || !e->data)
		return errf(err, len, -ENOMEM, "jail: %s: %s", r->descriptor,
			    strerror(ENOMEM));
	e->len = strlen(e->data);
	ret = set_path(&r->descriptor, JAIL_ROOTFS_DESC, NULL);
	if (!ret && r->state_path)
		ret = plan_in_dir(j, &r->state_path, "rootfs state file", err,
				  len);
	return ret;
}

static int plan_mounts(struct jail *j, struct mounts_config *mc, char *err,
		       size_t len)
{
	char inside[64], *host;
	struct mount_config *m;
	unsigned int i;
	int ret = 0;

	for (i = 0; i < mc->nr && !ret; i++) {
		m = &mc->m[i];
		snprintf(inside, sizeof(inside), "%s/mnt%u", JAIL_KILN_DIR, i);
		if (m->type == MOUNT_VIRTUAL)
			ret = plan_file(j, &m->socket, inside, false,
					"virtual mount socket", err, len);
		if (m->type != MOUNT_BIND)
			continue;
		host = realpath(m->source, NULL);
		if (!host)
			return errf(err, len, -errno, "jail: mount %s: %s",
				    m->source, strerror(errno));
		if (!add(j, JAIL_DIR, host, inside, m->read_only))
			ret = errf(err, len, -ENOMEM,
				   "jail: mount %s: too many paths", m->source);
		free(host);
		if (!ret)
			ret = set_path(&m->source, inside, NULL);
	}
	return ret;
}

/*
 * --net auto builds its egress program in the jail: libbpf sizes its
 * per-CPU maps from JAIL_CPUS_POSSIBLE (libbpf_num_possible_cpus), and
 * the http grants' TLS client reads the CA bundle (the default one only
 * if the host has it: without, those flows are denied, as outside).
 */
static int plan_net(struct jail *j, struct net_config *n, char *err, size_t len)
{
	if (!add(j, JAIL_FILE, JAIL_CPUS_POSSIBLE, JAIL_CPUS_POSSIBLE, true))
		return errf(err, len, -ENOMEM, "jail: %s: too many paths",
			    JAIL_CPUS_POSSIBLE);
	if (!n->ca_bundle && access(TLS_DEFAULT_CA_BUNDLE, R_OK))
		return 0;
	if (!n->ca_bundle) {
		n->ca_bundle = strdup(TLS_DEFAULT_CA_BUNDLE);
		if (!n->ca_bundle)
			return -ENOMEM;
	}
	return plan_file(j, &n->ca_bundle, JAIL_CA_BUNDLE, true, "CA bundle",
			 err, len);
}

int jail__plan(struct jail **out, struct vm_config *c, char *err, size_t len)
{
	struct jail *j = calloc(1, sizeof(*j));
	int ret;

	if (!j)
		return -ENOMEM;
	j->cfg = &c->jail;
	ret = plan_file(j, &c->kernel_path, JAIL_KILN_DIR "/kernel", true,
			"kernel", err, len);
	if (!ret && c->initrd_path)
		ret = plan_file(j, &c->initrd_path, JAIL_KILN_DIR "/initrd",
				true, "initrd", err, len);
	if (!ret && c->rootfs.descriptor)
		ret = plan_rootfs(j, &c->rootfs, err, len);
	if (!ret)
		ret = plan_mounts(j, &c->mounts, err, len);
	if (!ret && c->vsock.socket_path)
		ret = plan_in_dir(j, &c->vsock.socket_path, "vsock socket", err,
				  len);
	if (!ret && c->control_socket)
		ret = plan_in_dir(j, &c->control_socket, "control socket", err,
				  len);
	if (!ret && c->console_log)
		ret = plan_in_dir(j, &c->console_log, "console log", err, len);
	if (!ret && c->metrics_path)
		ret = plan_in_dir(j, &c->metrics_path, "metrics", err, len);
	if (!ret && c->net.mode == NET_AUTO)
		ret = plan_net(j, &c->net, err, len);
	if (ret) {
		jail__destroy(j);
		return ret;
	}
	*out = j;
	return 0;
}

void jail__destroy(struct jail *j)
{
	unsigned int i;

	if (!j)
		return;
	for (i = 0; i < j->nr; i++) {
		free(j->e[i].host);
		free(j->e[i].inside);
		free(j->e[i].data);
	}
	free(j);
}

unsigned int jail__nr_binds(const struct jail *j)
{
	unsigned int i, n = 0;

	for (i = 0; i < j->nr; i++)
		n += j->e[i].kind != JAIL_WRITE;
	return n;
}

static const struct jail_entry *bind_nth(const struct jail *j, unsigned int n)
{
	unsigned int i;

	for (i = 0; i < j->nr; i++)
		if (j->e[i].kind != JAIL_WRITE && !n--)
			return &j->e[i];
	return NULL;
}

const char *jail__bind_host(const struct jail *j, unsigned int n)
{
	const struct jail_entry *e = bind_nth(j, n);

	return e ? e->host : NULL;
}

const char *jail__bind_inside(const struct jail *j, unsigned int n)
{
	const struct jail_entry *e = bind_nth(j, n);

	return e ? e->inside : NULL;
}

/* ---- the PID namespace and its PID 1 -------------------------------------- */

int jail__check_root(const struct jail_config *c, char *err, size_t len)
{
	if (geteuid())
		return errf(err, len, -EPERM,
			    "jail %s: needs root (it makes namespaces, mounts "
			    "and device nodes, then becomes uid %llu): run vmm "
			    "as root",
			    c->dir, (unsigned long long)c->uid);
	return 0;
}

int jail__unshare_pid(struct jail *j)
{
	if (unshare(CLONE_NEWPID)) {
		pr_err("jail: a PID namespace: %s", strerror(errno));
		return -errno;
	}
	return 0;
}

/* The parent outside: the host's signals go on to the jail's PID 1. */
static void __attribute__((noreturn)) relay(pid_t child, const sigset_t *set)
{
	siginfo_t si;
	int status;

	for (;;) {
		if (sigwaitinfo(set, &si) < 0)
			continue;
		if (si.si_signo != SIGCHLD) {
			kill(child, si.si_signo);
			continue;
		}
		if (waitpid(child, &status, WNOHANG) != child)
			continue;
		if (WIFEXITED(status))
			exit(WEXITSTATUS(status));
		exit(128 + WTERMSIG(status));
	}
}

int jail__fork(struct jail *j)
{
	static const int relayed[] = { SIGINT,	SIGTERM, SIGHUP,
				       SIGQUIT, SIGUSR2, SIGCHLD };
	sigset_t set, old;
	unsigned int i;
	pid_t pid, parent = getpid();

	sigemptyset(&set);
	for (i = 0; i < ARRAY_SIZE(relayed); i++)
		sigaddset(&set, relayed[i]);
	/* Before the fork: none is lost between it and the relay. */
	sigprocmask(SIG_BLOCK, &set, &old);
	pid = fork();
	if (pid < 0) {
		pr_err("jail: fork: %s", strerror(errno));
		sigprocmask(SIG_SETMASK, &old, NULL);
		return -errno;
	}
	if (pid > 0)
		relay(pid, &set);
	sigprocmask(SIG_SETMASK, &old, NULL);
	/* The relay gone (SIGKILL), the VM goes too. */
	if (prctl(PR_SET_PDEATHSIG, SIGKILL) || getppid() != parent)
		_exit(VMM_EXIT_VMM_ERROR);
	return 0;
}

/* ---- set-up, in PID 1 ------------------------------------------------------ */

static int write_file(const char *path, const char *text)
{
	int fd = open(path, O_WRONLY | O_CLOEXEC);
	ssize_t n;

	if (fd < 0)
		return -errno;
	n = write(fd, text, strlen(text));
	n = n < 0 ? -errno : 0;
	close(fd);
	return n;
}

/*
 * The cgroup, made if missing, its limits, then this process in it. Not
 * a cgroup v2 directory we may write: said, and the VM runs without.
 */
static void cgroup_join(const struct jail_config *c)
{
	const char *what = c->cgroup;
	char path[PATH_MAX + 32], num[32];
	struct statfs sf;
	int ret = 0;

	if (!c->cgroup)
		return;
	if (mkdir(c->cgroup, 0755) && errno != EEXIST)
		ret = -errno;
	if (!ret && statfs(c->cgroup, &sf))
		ret = -errno;
	if (!ret && sf.f_type != CGROUP2_SUPER_MAGIC)
		ret = -EMEDIUMTYPE;
	if (!ret && c->memory_max) {
		snprintf(path, sizeof(path), "%s/memory.max", c->cgroup);
		snprintf(num, sizeof(num), "%llu",
			 (unsigned long long)c->memory_max);
		what = "memory.max";
		ret = write_file(path, num);
	}
	if (!ret && c->cpu_max) {
		snprintf(path, sizeof(path), "%s/cpu.max", c->cgroup);
		what = "cpu.max";
		ret = write_file(path, c->cpu_max);
	}
	if (!ret) {
		snprintf(path, sizeof(path), "%s/cgroup.procs", c->cgroup);
		what = "cgroup.procs";
		ret = write_file(path, "0");
	}
	if (ret == -EMEDIUMTYPE)
		pr_warn("jail: cgroup %s: not in a cgroup v2 hierarchy: the "
			"VM runs without its cgroup, cpu and memory limits",
			c->cgroup);
	else if (ret)
		pr_warn("jail: cgroup %s: %s: %s (cgroup v2 not mounted "
			"writable, or the controller not enabled): the VM runs "
			"without its cgroup, cpu and memory limits",
			c->cgroup, what, strerror(-ret));
	else
		pr_debug("jail: in cgroup %s", c->cgroup);
}

/* The directories above path (in the jail's root at root), made. */
static int make_parents(const char *root, const char *inside)
{
	char path[PATH_MAX];
	char *p;

	if (snprintf(path, sizeof(path), "%s%s", root, inside) >=
	    (int)sizeof(path))
		return -ENAMETOOLONG;
	for (p = path + strlen(root) + 1; (p = strchr(p, '/')); p++) {
		*p = 0;
		if (mkdir(path, 0755) && errno != EEXIST)
			return -errno;
		*p = '/';
	}
	return 0;
}

static int place_entry(const char *root, const struct jail_entry *e)
{
	unsigned long ro = MS_REMOUNT | MS_BIND | MS_NOSUID | MS_NODEV;
	char path[PATH_MAX];
	int fd, ret;

	ret = make_parents(root, e->inside);
	if (ret)
		return ret;
	snprintf(path, sizeof(path), "%s%s", root, e->inside);
	if (e->kind == JAIL_DIR) {
		if (mkdir(path, 0755) && errno != EEXIST)
			return -errno;
	} else {
		fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
		if (fd < 0)
			return -errno;
		ret = 0;
		if (e->kind == JAIL_WRITE &&
		    write(fd, e->data, e->len) != (ssize_t)e->len)
			ret = -EIO;
		close(fd);
		if (e->kind == JAIL_WRITE)
			return ret;
	}
	if (mount(e->host, path, NULL, MS_BIND | MS_REC, NULL))
		return -errno;
	/* The flags of a bind mount change in a remount only. */
	if (mount(NULL, path, NULL, ro | (e->ro ? MS_RDONLY : 0), NULL))
		return -errno;
	return 0;
}

static const struct {
	const char *path;
	unsigned int major, minor;
} jail_devices[] = {
	{ "/dev/kvm", DEV_MISC_MAJOR, DEV_KVM_MINOR },
	{ "/dev/net/tun", DEV_MISC_MAJOR, DEV_TUN_MINOR },
	{ "/dev/urandom", DEV_MEM_MAJOR, DEV_URANDOM_MIN },
	/* control.c: a detached vmm's stdin, stdout and stderr. */
	{ "/dev/null", DEV_MEM_MAJOR, DEV_NULL_MINOR },
};

/* Only the jail's uid and gid may open them. */
static int make_devices(const char *root, const struct jail_config *c)
{
	char path[PATH_MAX];
	unsigned int i;
	int ret;

	for (i = 0; i < ARRAY_SIZE(jail_devices); i++) {
		ret = make_parents(root, jail_devices[i].path);
		if (ret)
			return ret;
		snprintf(path, sizeof(path), "%s%s", root,
			 jail_devices[i].path);
		if (mknod(path, S_IFCHR | 0600,
			  makedev(jail_devices[i].major,
				  jail_devices[i].minor)) ||
		    chown(path, c->uid, c->gid))
			return -errno;
	}
	return 0;
}

/*
 * /proc of the jail's PID namespace; with subset=pid (Linux 5.8) only
 * the processes' directories, no /proc/sys, /proc/kcore and the like.
 */
static int mount_proc(const char *root)
{
	unsigned long flags = MS_NOSUID | MS_NODEV | MS_NOEXEC;
	char path[PATH_MAX];

	snprintf(path, sizeof(path), "%s/proc", root);
	if (mkdir(path, 0555) && errno != EEXIST)
		return -errno;
	if (!mount("proc", path, "proc", flags, "subset=pid")) {
		/* The vmm reads /proc/self (fdbudget, metrics): kept? */
		snprintf(path, sizeof(path), "%s/proc/self/fd", root);
		if (!access(path, F_OK))
			return 0;
		snprintf(path, sizeof(path), "%s/proc", root);
		if (umount2(path, MNT_DETACH))
			return -errno;
	}
	pr_debug("jail: proc with subset=pid: %s; all of it", strerror(errno));
	return mount("proc", path, "proc", flags, NULL) ? -errno : 0;
}

/*
 * root becomes /. pivot_root leaves the host's tree nowhere in reach;
 * where the host's root is itself an initramfs moved over (EINVAL), the
 * jail is moved onto / and chroot'ed into, as switch_root does.
 */
static int enter_root(const char *root)
{
	if (chdir(root))
		return -errno;
	if (!syscall(SYS_pivot_root, ".", ".")) {
		if (umount2(".", MNT_DETACH))
			return -errno;
		return chdir("/") ? -errno : 0;
	}
	if (errno != EINVAL)
		return -errno;
	pr_debug("jail: pivot_root: %s; moving the root instead",
		 strerror(errno));
	if (mount(".", "/", NULL, MS_MOVE, NULL) || chroot(".") || chdir("/"))
		return -errno;
	return 0;
}

static int set_limit(int resource, uint64_t value)
{
	struct rlimit rl = { .rlim_cur = value, .rlim_max = value };

	return setrlimit(resource, &rl) ? -errno : 0;
}

/* Core dumps never (guest memory); the others as configured. */
static int set_limits(const struct jail_config *c)
{
	int ret = set_limit(RLIMIT_CORE, 0);

	if (!ret && c->rlimit_as)
		ret = set_limit(RLIMIT_AS, c->rlimit_as);
	if (!ret && c->rlimit_nofile)
		ret = set_limit(RLIMIT_NOFILE, c->rlimit_nofile);
	if (!ret && c->rlimit_nproc)
		ret = set_limit(RLIMIT_NPROC, c->rlimit_nproc);
	return ret;
}

int jail__setup(struct jail *j)
{
	const struct jail_config *c = j->cfg;
	const char *root = c->dir, *step;
	unsigned int i;
	int ret = 0;

	step = "namespaces";
	if (unshare(CLONE_NEWNS | CLONE_NEWIPC | CLONE_NEWUTS))
		ret = -errno;
	/* Nothing mounted here reaches the host, nor the other way. */
	if (!ret && mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL))
		ret = -errno;
	if (!ret) {
		cgroup_join(c);
		step = "its root (tmpfs)";
		if (mount("kiln-jail", root, "tmpfs", MS_NOSUID,
			  JAIL_TMPFS_OPTS))
			ret = -errno;
	}
	for (i = 0; !ret && i < j->nr; i++) {
		step = j->e[i].inside;
		ret = place_entry(root, &j->e[i]);
	}
	if (!ret) {
		step = "/dev";
		ret = make_devices(root, c);
	}
	if (!ret) {
		step = "/proc";
		ret = mount_proc(root);
	}
	if (!ret) {
		step = "its hostname";
		if (sethostname(JAIL_HOSTNAME, strlen(JAIL_HOSTNAME)))
			ret = -errno;
	}
	if (!ret) {
		step = "pivot_root";
		ret = enter_root(root);
	}
	if (!ret) {
		step = "a read-only root";
		if (mount(NULL, "/", NULL, MS_REMOUNT | MS_RDONLY | MS_NOSUID,
			  NULL))
			ret = -errno;
	}
	if (!ret) {
		step = "rlimits";
		ret = set_limits(c);
	}
	if (ret)
		pr_err("jail %s: %s: %s", c->dir, step, strerror(-ret));
	return ret;
}

/* ---- the drop ------------------------------------------------------------ */

/* Every capability out of this thread's bounding set (CAP_SETPCAP first). */
static int drop_bounding(void)
{
	int cap;

	for (cap = 0; prctl(PR_CAPBSET_READ, cap, 0, 0, 0) >= 0; cap++)
		if (prctl(PR_CAPBSET_DROP, cap, 0, 0, 0))
			return -errno;
	return errno == EINVAL ? 0 : -errno; /* past the last one */
}

/* Permitted, effective and inheritable: empty (capset, no libcap). */
static int clear_caps(void)
{
	struct __user_cap_header_struct hdr = {
		.version = _LINUX_CAPABILITY_VERSION_3,
	};
	struct __user_cap_data_struct data[_LINUX_CAPABILITY_U32S_3] = { 0 };
	unsigned int i;

	if (syscall(SYS_capset, &hdr, data))
		return -errno;
	if (syscall(SYS_capget, &hdr, data))
		return -errno;
	for (i = 0; i < ARRAY_SIZE(data); i++)
		if (data[i].permitted || data[i].effective ||
		    data[i].inheritable)
			return -EPERM;
	return 0;
}

static void caps_mask(const int *caps, unsigned int n,
		      struct __user_cap_data_struct *data)
{
	for (unsigned int i = 0; i < n; i++)
		data[caps[i] / 32].permitted |= 1U << (caps[i] % 32);
	for (unsigned int i = 0; i < _LINUX_CAPABILITY_U32S_3; i++)
		data[i].effective = data[i].permitted;
}

static bool kept(const int *caps, unsigned int n, int cap)
{
	for (unsigned int i = 0; i < n; i++)
		if (caps[i] == cap)
			return true;
	return false;
}

int jail__keep_caps(const int *caps, unsigned int n)
{
	/*
	 * glibc's setresuid and setresgid run on every thread and abort
	 * the process if one fails: this one needs those two for the drop
	 * (jail__raise_kept_caps lets them go).
	 */
	static const int for_the_drop[] = { CAP_SETUID, CAP_SETGID };
	struct __user_cap_header_struct hdr = {
		.version = _LINUX_CAPABILITY_VERSION_3,
	};
	struct __user_cap_data_struct data[_LINUX_CAPABILITY_U32S_3] = { 0 };
	int cap;

	for (cap = 0; prctl(PR_CAPBSET_READ, cap, 0, 0, 0) >= 0; cap++)
		if (!kept(caps, n, cap) && prctl(PR_CAPBSET_DROP, cap, 0, 0, 0))
			return -errno;
	if (errno != EINVAL)
		return -errno;
	if (prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0))
		return -errno;
	caps_mask(caps, n, data);
	caps_mask(for_the_drop, ARRAY_SIZE(for_the_drop), data);
	if (syscall(SYS_capset, &hdr, data))
		return -errno;
	if (prctl(PR_SET_KEEPCAPS, 1, 0, 0, 0) ||
	    prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0))
		return -errno;
	return 0;
}

int jail__raise_kept_caps(const int *caps, unsigned int n)
{
	struct __user_cap_header_struct hdr = {
		.version = _LINUX_CAPABILITY_VERSION_3,
	};
	struct __user_cap_data_struct want[_LINUX_CAPABILITY_U32S_3] = { 0 };
	struct __user_cap_data_struct got[_LINUX_CAPABILITY_U32S_3] = { 0 };

	if (!getuid() || !geteuid())
		return -EPERM; /* the drop has not reached this thread */
	caps_mask(caps, n, want);
	if (syscall(SYS_capset, &hdr, want) ||
	    prctl(PR_SET_KEEPCAPS, 0, 0, 0, 0))
		return -errno;
	if (syscall(SYS_capget, &hdr, got))
		return -errno;
	for (unsigned int i = 0; i < ARRAY_SIZE(got); i++)
		if (got[i].permitted != want[i].permitted ||
		    got[i].effective != want[i].effective || got[i].inheritable)
			return -EPERM;
	return 0;
}

int jail__drop(struct jail *j)
{
	const struct jail_config *c = j->cfg;
	uid_t ru, eu, su;
	gid_t rg, eg, sg;
	const char *step;
	int ret = 0;

	/* From here on the sanitizers cannot stop this process's threads. */
	leak_check__skip_process();
	step = "the bounding set";
	ret = drop_bounding();
	if (!ret) {
		step = "the ambient set";
		if (prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0))
			ret = -errno;
	}
	/* glibc changes ids in every thread, so none keeps root. */
	if (!ret) {
		step = "setgroups";
		if (setgroups(0, NULL))
			ret = -errno;
	}
	if (!ret) {
		step = "setresgid";
		if (setresgid(c->gid, c->gid, c->gid))
			ret = -errno;
	}
	if (!ret) {
		step = "setresuid";
		if (setresuid(c->uid, c->uid, c->uid))
			ret = -errno;
	}
	if (!ret) {
		step = "the ids";
		if (getresuid(&ru, &eu, &su) || getresgid(&rg, &eg, &sg) ||
		    ru != c->uid || eu != c->uid || su != c->uid ||
		    rg != c->gid || eg != c->gid || sg != c->gid)
			ret = -EPERM;
	}
	if (!ret) {
		step = "capabilities";
		ret = clear_caps();
	}
	if (!ret) {
		step = "no_new_privs";
		if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0))
			ret = -errno;
	}
	if (ret)
		pr_err("jail: dropping privileges: %s: %s", step,
		       strerror(-ret));
	else
		pr_debug("jail: uid %llu gid %llu, no capabilities",
			 (unsigned long long)c->uid,
			 (unsigned long long)c->gid);
	return ret;
}
