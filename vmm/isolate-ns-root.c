// SPDX-License-Identifier: GPL-2.0
/*
 * --isolation namespace, the sandbox's side (vmm/isolate-ns.h): the
 * child of the clone, PID 1 of its new namespaces, root in its user
 * namespace once the host wrote its id maps. It assembles the root in a
 * tmpfs of its own mount namespace (the image read-only as the lower
 * layer of an overlay, whose upper is in that tmpfs, or the persistent
 * directory), mounts the binds, /proc, /sys, a small /dev and devpts,
 * switches to it (pivot_root, the old root detached), brings loopback
 * up, installs its seccomp filter and executes the agent from the
 * descriptor opened on the host. Each failure is one line to the host.
 */
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <net/if.h>
#include <net/route.h>
#include <netinet/in.h>
#include <arpa/inet.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <termios.h>
#include <unistd.h>

#include "lib/compiler.h"
#include "vmm/isolate-ns-internal.h"

/* A path below the root, itself below the stage: room for both. */
#define NS_PATH_MAX (2 * PATH_MAX + 128)
#define NS_ARGV_MAX 4096 /* the agent's own arguments and the command's */
#define NS_RUN_KILN "/run/kiln" /* as the VM's init keeps its files */
/* The root's trust store, and its size at most (as guest/init/trust.h). */
#define NS_TRUST_BUNDLE	    "/etc/ssl/certs/ca-certificates.crt"
#define NS_TRUST_BUNDLE_MAX (8U << 20)

static void __attribute__((noreturn, format(printf, 2, 3)))
fail(struct ns_sandbox *sb, const char *fmt, ...)
{
	char line[NS_REPORT_MAX];
	va_list ap;
	int n;

	va_start(ap, fmt);
	n = vsnprintf(line, sizeof(line), fmt, ap);
	va_end(ap);
	if (n > (int)sizeof(line) - 1)
		n = sizeof(line) - 1;
	if (write(sb->report[1], line, (size_t)n) < 0)
		_exit(NS_CHILD_FAILED);
	_exit(NS_CHILD_FAILED);
}

static void path(char *out, const char *a, const char *b)
{
	if (snprintf(out, NS_PATH_MAX, "%s%s", a, b) >= NS_PATH_MAX)
		out[0] = '\0'; /* fails at its use, named */
}

/* mkdir -p of an absolute path below root (the overlay: ours to write). */
static int mkdirs(const char *root, const char *sub)
{
	char p[NS_PATH_MAX];
	size_t base = strlen(root);

	path(p, root, sub);
	for (char *s = p + base + 1; *s; s++) {
		if (*s != '/')
			continue;
		*s = '\0';
		if (mkdir(p, 0755) && errno != EEXIST)
			return -errno;
		*s = '/';
	}
	if (mkdir(p, 0755) && errno != EEXIST)
		return -errno;
	return 0;
}

/*
 * The stage's tmpfs (size: bytes, "" for tmpfs's default), attached to
 * the stage through the host's descriptor of it and entered: every path
 * from here on is relative, so the run directory's ancestors, which may
 * be the host root's alone (a TMPDIR of mode 0700), need not be crossed.
 */
static void stage_tmpfs(struct ns_sandbox *sb, const char *size)
{
	int fs = fsopen("tmpfs", FSOPEN_CLOEXEC), mnt = -1;

	if (fs < 0 || fsconfig(fs, FSCONFIG_SET_STRING, "mode", "0700", 0) ||
	    (size[0] && fsconfig(fs, FSCONFIG_SET_STRING, "size", size, 0)) ||
	    fsconfig(fs, FSCONFIG_CMD_CREATE, NULL, NULL, 0) ||
	    (mnt = fsmount(fs, FSMOUNT_CLOEXEC,
			   MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV)) < 0 ||
	    move_mount(mnt, "", sb->stage_fd, "",
		       MOVE_MOUNT_F_EMPTY_PATH | MOVE_MOUNT_T_EMPTY_PATH) ||
	    fchdir(mnt))
		fail(sb, "a tmpfs for its root: %s", strerror(errno));
	close(mnt);
	close(fs);
}

/* The overlay, its lower the image, its upper the tmpfs or the state. */
static void mount_root(struct ns_sandbox *sb, char *root)
{
	const struct rootfs_config *rc = &sb->cfg->rootfs;
	char lower[NS_PATH_MAX], upper[NS_PATH_MAX], work[NS_PATH_MAX];
	char p[NS_PATH_MAX];
	char opts[3 * NS_PATH_MAX + 64], size[32] = "";

	/* ephemeral: the changes' room is the mode's max dirty bytes. */
	if (rc->mode == ROOTFS_EPHEMERAL && rc->max_dirty_bytes)
		snprintf(size, sizeof(size), "%llu",
			 (unsigned long long)rc->max_dirty_bytes);
	stage_tmpfs(sb, size);
	path(lower, ".", "/lower");
	path(root, ".", "/root");
	if (sb->state_fd >= 0) {
		path(p, ".", "/state");
		if (mkdir(p, 0700) || move_mount(sb->state_fd, "", AT_FDCWD, p,
						 MOVE_MOUNT_F_EMPTY_PATH))
			fail(sb, "its persistent state: %s", strerror(errno));
		path(upper, p, "/upper");
		path(work, p, "/work");
		if ((mkdir(upper, 0755) && errno != EEXIST) ||
		    (mkdir(work, 0700) && errno != EEXIST))
			fail(sb, "its persistent state: %s", strerror(errno));
	} else {
		path(upper, ".", "/upper");
		path(work, ".", "/work");
		if (mkdir(upper, 0755) || mkdir(work, 0700))
			fail(sb, "its stage: %s", strerror(errno));
	}
	if (mkdir(lower, 0755) || mkdir(root, 0755))
		fail(sb, "its stage: %s", strerror(errno));
	if (move_mount(sb->root_fd, "", AT_FDCWD, lower,
		       MOVE_MOUNT_F_EMPTY_PATH))
		fail(sb, "the image's mount: %s", strerror(errno));
	/*
	 * userxattr: overlayfs keeps its own attributes in user.* in a
	 * user namespace (trusted.* is the host root's).
	 */
	snprintf(opts, sizeof(opts),
		 "lowerdir=%s,upperdir=%s,workdir=%s,userxattr", lower, upper,
		 work);
	if (mount("overlay", root, "overlay", MS_NOSUID | MS_NODEV, opts))
		fail(sb,
		     "no overlayfs over the image: %s (the kernel needs "
		     "overlayfs with user namespace mounts, Linux 5.11 or "
		     "later)",
		     strerror(errno));
}

/* A host device node, bound onto an empty file of the sandbox's /dev. */
static void bind_dev(struct ns_sandbox *sb, const char *root, const char *name)
{
	char src[64], dst[NS_PATH_MAX];
	int fd;

	snprintf(src, sizeof(src), "/dev/%s", name);
	if (snprintf(dst, sizeof(dst), "%s/dev/%s", root, name) >=
	    (int)sizeof(dst))
		fail(sb, "its /dev/%s: %s", name, strerror(ENAMETOOLONG));
	fd = open(dst, O_WRONLY | O_CREAT | O_CLOEXEC, 0666);
	if (fd < 0 || close(fd) || mount(src, dst, NULL, MS_BIND, NULL))
		fail(sb, "its /dev/%s: %s", name, strerror(errno));
}

/* /proc of its PID namespace, /sys read-only, a /dev of its own. */
static void mount_system(struct ns_sandbox *sb, const char *root)
{
	static const char *const devs[] = { "null",   "zero",	 "full",
					    "random", "urandom", "tty" };
	static const char *const links[][2] = {
		{ "pts/ptmx", "ptmx" },
		{ "/proc/self/fd", "fd" },
		{ "/proc/self/fd/0", "stdin" },
		{ "/proc/self/fd/1", "stdout" },
		{ "/proc/self/fd/2", "stderr" },
	};
	char p[NS_PATH_MAX], l[NS_PATH_MAX];
	const unsigned long nsd = MS_NOSUID | MS_NODEV | MS_NOEXEC;

	if (mkdirs(root, "/proc") || mkdirs(root, "/sys") ||
	    mkdirs(root, "/dev"))
		fail(sb, "its /proc, /sys or /dev: %s", strerror(errno));
	path(p, root, "/proc");
	if (mount("proc", p, "proc", nsd, NULL))
		fail(sb, "its /proc: %s", strerror(errno));
	path(p, root, "/sys");
	if (mount("sysfs", p, "sysfs", nsd | MS_RDONLY, NULL))
		fail(sb, "its /sys: %s", strerror(errno));
	path(p, root, "/dev");
	if (mount("tmpfs", p, "tmpfs", MS_NOSUID | MS_NOEXEC, "mode=0755"))
		fail(sb, "its /dev: %s", strerror(errno));
	for (size_t i = 0; i < ARRAY_SIZE(devs); i++)
		bind_dev(sb, root, devs[i]);
	path(p, root, "/dev/pts");
	if (mkdir(p, 0755) ||
	    mount("devpts", p, "devpts", MS_NOSUID | MS_NOEXEC,
		  "newinstance,ptmxmode=0666,mode=0620"))
		fail(sb, "its /dev/pts: %s", strerror(errno));
	/* As the VM's init makes them (guest/init/init.c). */
	path(p, root, "/tmp");
	if (mkdirs(root, "/tmp") ||
	    mount("tmpfs", p, "tmpfs", MS_NOSUID | MS_NODEV, "mode=1777"))
		fail(sb, "its /tmp: %s", strerror(errno));
	path(p, root, "/run");
	if (mkdirs(root, "/run") ||
	    mount("tmpfs", p, "tmpfs", MS_NOSUID | MS_NODEV, "mode=0755"))
		fail(sb, "its /run: %s", strerror(errno));
	path(p, root, "/dev/shm");
	if (mkdir(p, 01777) || mount("tmpfs", p, "tmpfs", nsd, "mode=1777"))
		fail(sb, "its /dev/shm: %s", strerror(errno));
	for (size_t i = 0; i < ARRAY_SIZE(links); i++) {
		if (snprintf(l, sizeof(l), "%s/dev/%s", root, links[i][1]) >=
			    (int)sizeof(l) ||
		    symlink(links[i][0], l))
			fail(sb, "its /dev/%s: %s", links[i][1],
			     strerror(errno));
	}
}

/*
 * A FUSE-served mount: its /dev/fuse (open_fuse) mounted and passed to
 * the host, whose server answers from then on.
 */
static void mount_fuse(struct ns_sandbox *sb, unsigned int i, const char *at)
{
	char opts[128], cbuf[CMSG_SPACE(sizeof(int))] = { 0 };
	char msg[2] = { 'F', (char)i };
	struct iovec iov = { msg, sizeof(msg) };
	struct msghdr mh = { .msg_iov = &iov,
			     .msg_iovlen = 1,
			     .msg_control = cbuf,
			     .msg_controllen = sizeof(cbuf) };
	struct cmsghdr *cm = CMSG_FIRSTHDR(&mh);
	int fd = sb->fuse_dev[i];

	snprintf(opts, sizeof(opts),
		 "fd=%d,rootmode=40000,user_id=0,group_id=0,allow_other", fd);
	if (mount("kiln", at, "fuse", MS_NOSUID | MS_NODEV, opts))
		fail(sb, "--mount %s: a FUSE mount: %s",
		     sb->cfg->mounts.m[i].guest_path, strerror(errno));
	cm->cmsg_level = SOL_SOCKET;
	cm->cmsg_type = SCM_RIGHTS;
	cm->cmsg_len = CMSG_LEN(sizeof(int));
	memcpy(CMSG_DATA(cm), &fd, sizeof(int));
	if (sendmsg(sb->report[1], &mh, 0) != sizeof(msg))
		fail(sb, "--mount %s: passing its FUSE descriptor: %s",
		     sb->cfg->mounts.m[i].guest_path, strerror(errno));
	close(fd);
	sb->fuse_dev[i] = -1;
}

/*
 * What the child opens in its namespaces but before the switch to its
 * root's ids, while it still acts as the host's root on files: the
 * stage, and /dev/fuse for each FUSE-served mount (the kernel mounts a
 * FUSE descriptor only in its opener's user namespace; the device may be
 * the host root's alone, 0600).
 */
static void open_host_files(struct ns_sandbox *sb)
{
	/*
	 * The stage, in this mount namespace (the host's descriptor would
	 * name the host's mount); its ancestors may be the host root's
	 * alone (a TMPDIR of mode 0700).
	 */
	sb->stage_fd = open(sb->stage, O_PATH | O_DIRECTORY | O_CLOEXEC);
	if (sb->stage_fd < 0)
		fail(sb, "%s: %s", sb->stage, strerror(errno));
	for (unsigned int i = 0; i < sb->cfg->mounts.nr; i++) {
		if (!ns_fuse__wanted(&sb->cfg->mounts.m[i]))
			continue;
		sb->fuse_dev[i] = open("/dev/fuse", O_RDWR | O_CLOEXEC);
		if (sb->fuse_dev[i] < 0)
			fail(sb, "--mount %s: /dev/fuse: %s",
			     sb->cfg->mounts.m[i].guest_path, strerror(errno));
	}
}

/* --mount: binds (cloned and id-mapped by the host), memory, FUSE. */
static void mount_user(struct ns_sandbox *sb, const char *root)
{
	const struct mounts_config *mc = &sb->cfg->mounts;
	char p[NS_PATH_MAX], opts[64] = "mode=0755";

	for (unsigned int i = 0; i < mc->nr; i++) {
		const struct mount_config *m = &mc->m[i];

		if (mkdirs(root, m->guest_path))
			fail(sb, "--mount %s: its mount point: %s",
			     m->guest_path, strerror(errno));
		path(p, root, m->guest_path);
		if (ns_fuse__wanted(m)) {
			mount_fuse(sb, i, p);
			continue;
		}
		if (m->type == MOUNT_BIND) {
			if (move_mount(sb->bind_fd[i], "", AT_FDCWD, p,
				       MOVE_MOUNT_F_EMPTY_PATH))
				fail(sb, "--mount %s: %s", m->guest_path,
				     strerror(errno));
			continue;
		}
		if (m->max_bytes)
			snprintf(opts, sizeof(opts), "mode=0755,size=%llu",
				 (unsigned long long)m->max_bytes);
		if (mount("tmpfs", p, "tmpfs", MS_NOSUID | MS_NODEV, opts))
			fail(sb, "--mount %s: %s", m->guest_path,
			     strerror(errno));
	}
}

/* pivot_root onto itself, the old root then detached from under it. */
static void switch_root(struct ns_sandbox *sb, const char *root)
{
	if (chdir(root) || syscall(SYS_pivot_root, ".", ".") ||
	    umount2(".", MNT_DETACH) || chdir("/"))
		fail(sb, "switching to its root: %s", strerror(errno));
	/* readonly: the whole root, its mount points made already. */
	if (sb->cfg->rootfs.mode == ROOTFS_READONLY &&
	    mount(NULL, "/", NULL, MS_REMOUNT | MS_BIND | MS_RDONLY, NULL))
		fail(sb, "making its root read-only: %s", strerror(errno));
}

static void loopback_up(struct ns_sandbox *sb)
{
	struct ifreq ifr = { .ifr_name = "lo" };
	int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);

	if (fd < 0 || ioctl(fd, SIOCGIFFLAGS, &ifr))
		fail(sb, "its loopback: %s", strerror(errno));
	ifr.ifr_flags |= IFF_UP;
	if (ioctl(fd, SIOCSIFFLAGS, &ifr))
		fail(sb, "its loopback: %s", strerror(errno));
	close(fd);
}

/*
 * --net: eth0 (the veth's far end, made here by the host before the go
 * byte, with the guest's MAC and MTU) as a VM's init configures its NIC
 * (guest/init/net.c): the guest's address and prefix, up, the default
 * route via the gateway. Its packets go to the host's egress program.
 */
static void eth_up(struct ns_sandbox *sb)
{
	const struct net_config *n = &sb->cfg->net;
	struct ifreq ifr = { .ifr_name = NS_NET_IFNAME };
	struct sockaddr_in *sin = (struct sockaddr_in *)&ifr.ifr_addr;
	struct rtentry rt = { .rt_flags = RTF_UP | RTF_GATEWAY,
			      .rt_dev = (char *)NS_NET_IFNAME };
	const char *what = "its address";
	int fd;

	if (n->mode == NET_NONE)
		return;
	fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		fail(sb, "its %s: %s", NS_NET_IFNAME, strerror(errno));
	sin->sin_family = AF_INET;
	sin->sin_addr.s_addr = n->address;
	if (ioctl(fd, SIOCSIFADDR, &ifr))
		goto fail;
	what = "its netmask";
	sin->sin_addr.s_addr = htonl(~0U << (32 - n->prefix));
	if (ioctl(fd, SIOCSIFNETMASK, &ifr))
		goto fail;
	what = "its link";
	if (ioctl(fd, SIOCGIFFLAGS, &ifr))
		goto fail;
	ifr.ifr_flags |= IFF_UP;
	if (ioctl(fd, SIOCSIFFLAGS, &ifr))
		goto fail;
	what = "the default route";
	sin = (struct sockaddr_in *)&rt.rt_gateway;
	sin->sin_family = AF_INET;
	sin->sin_addr.s_addr = n->gateway;
	((struct sockaddr_in *)&rt.rt_dst)->sin_family = AF_INET;
	((struct sockaddr_in *)&rt.rt_genmask)->sin_family = AF_INET;
	if (ioctl(fd, SIOCADDRT, &rt))
		goto fail;
	close(fd);
	return;
fail:
	fail(sb, "%s %s: %s", NS_NET_IFNAME, what, strerror(errno));
}

/*
 * --net: "nameserver DNS" as the root's /etc/resolv.conf, as a VM's
 * init writes it: a file in /run/kiln bound over the root's own (a
 * read-only or persistent root is not changed), or over a new empty one
 * when the root has none (or a symlink, systemd-resolved's, in its
 * place: replaced in the overlay's upper).
 */
static void resolv_conf(struct ns_sandbox *sb, const char *root)
{
	const struct net_config *n = &sb->cfg->net;
	char src[NS_PATH_MAX], dst[NS_PATH_MAX], line[64];
	struct in_addr dns = { .s_addr = n->dns };
	struct stat st;
	int fd, len;

	if (n->mode == NET_NONE)
		return;
	if (mkdirs(root, NS_RUN_KILN))
		fail(sb, "its %s: %s", NS_RUN_KILN, strerror(errno));
	path(src, root, NS_RUN_KILN "/resolv.conf");
	path(dst, root, "/etc/resolv.conf");
	len = snprintf(line, sizeof(line), "nameserver %s\n", inet_ntoa(dns));
	fd = open(src, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (fd < 0 || write(fd, line, (size_t)len) != len || close(fd))
		fail(sb, "its resolv.conf: %s", strerror(errno));
	if (lstat(dst, &st) || !S_ISREG(st.st_mode)) {
		unlink(dst);
		fd = open(dst, O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
		if (fd < 0 || close(fd))
			fail(sb, "its /etc/resolv.conf: %s", strerror(errno));
	}
	if (mount(src, dst, NULL, MS_BIND, NULL))
		fail(sb, "its /etc/resolv.conf: %s", strerror(errno));
}

/* All of a file of the root's, at most max bytes: malloc'ed, or NULL. */
static char *read_all(const char *file, size_t max, size_t *len)
{
	char *buf = NULL;
	struct stat st;
	ssize_t n;
	int fd = open(file, O_RDONLY | O_CLOEXEC);

	if (fd < 0)
		return NULL;
	if (!fstat(fd, &st) && S_ISREG(st.st_mode) && (size_t)st.st_size <= max)
		buf = malloc((size_t)st.st_size + 1);
	*len = 0;
	while (buf && *len < (size_t)st.st_size) {
		n = read(fd, buf + *len, (size_t)st.st_size - *len);
		if (n <= 0) {
			free(buf);
			buf = NULL;
			break;
		}
		*len += (size_t)n;
	}
	close(fd);
	return buf;
}

/*
 * --net with interception: the host's CA in the root's trust store as a
 * VM's init puts it there (guest/init/trust.c): a copy of the root's
 * bundle with the CA appended, in /run/kiln, bound over the bundle; the
 * image is not written. Not OpenSSL's hashed directory (-CApath): the
 * bundle is what curl, Python and Debian's tools read by default. A
 * root without a bundle fails the sandbox when the policy intercepts
 * from the start, and is said once otherwise.
 */
static void trust_ca(struct ns_sandbox *sb, const char *root)
{
	char src[NS_PATH_MAX], dst[NS_PATH_MAX], *bundle;
	const char *pem;
	size_t len, pem_len;
	bool required;
	int fd;

	if (vm_net__sandbox_ca(&sb->net, &pem, &pem_len, &required))
		return;
	path(dst, root, NS_TRUST_BUNDLE);
	bundle = read_all(dst, NS_TRUST_BUNDLE_MAX, &len);
	if (!bundle && required)
		fail(sb,
		     "%s: %s: the root has no trust store for the interception "
		     "CA its policy needs",
		     NS_TRUST_BUNDLE, strerror(errno ? errno : EINVAL));
	if (!bundle) {
		dprintf(STDERR_FILENO,
			"vmm: warning: namespace sandbox: no %s in its root: "
			"it does not trust the interception CA\n",
			NS_TRUST_BUNDLE);
		return;
	}
	path(src, root, NS_RUN_KILN "/ca-certificates.crt");
	if (mkdirs(root, NS_RUN_KILN))
		fail(sb, "its %s: %s", NS_RUN_KILN, strerror(errno));
	fd = open(src, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (fd < 0 || write(fd, bundle, len) != (ssize_t)len ||
	    (len && bundle[len - 1] != '\n' && write(fd, "\n", 1) != 1) ||
	    write(fd, pem, pem_len) != (ssize_t)pem_len || close(fd))
		fail(sb, "its trust store: %s", strerror(errno));
	free(bundle);
	if (mount(src, dst, NULL, MS_BIND, NULL))
		fail(sb, "its trust store %s: %s", NS_TRUST_BUNDLE,
		     strerror(errno));
}

/*
 * The filter: what a sandbox on the host's kernel has no business
 * calling, each failing with EPERM (a program probing for them goes on);
 * everything else allowed, so the image's programs run as they would in
 * a VM. The kernel-wide state (modules, kexec, the clock, swap, keys,
 * accounting), the kernel's larger attack surface reachable from a user
 * namespace (BPF, perf, userfaultfd, io_uring, open_by_handle_at),
 * and the terminal injection ioctls on the vmm's terminal (TIOCSTI,
 * TIOCLINUX). Another architecture's calls (x32, i386) are refused.
 */
static const unsigned int denied[] = {
	SYS_init_module,
	SYS_finit_module,
	SYS_delete_module,
	SYS_kexec_load,
	SYS_kexec_file_load,
	SYS_reboot,
	SYS_swapon,
	SYS_swapoff,
	SYS_settimeofday,
	SYS_clock_settime,
	SYS_clock_adjtime,
	SYS_adjtimex,
	SYS_acct,
	SYS_add_key,
	SYS_request_key,
	SYS_keyctl,
	SYS_bpf,
	SYS_perf_event_open,
	SYS_userfaultfd,
	SYS_io_uring_setup,
	SYS_io_uring_enter,
	SYS_io_uring_register,
	SYS_open_by_handle_at,
	SYS_lookup_dcookie,
	SYS_iopl,
	SYS_ioperm,
	SYS_syslog,
	SYS_quotactl,
	SYS_nfsservctl,
	SYS_fanotify_init,
};

#define NS_FILTER_MAX 64
#define NS_X32_BIT    0x40000000U

static void install_filter(struct ns_sandbox *sb)
{
	struct sock_filter f[NS_FILTER_MAX];
	struct sock_fprog prog = { .filter = f };
	const unsigned int n = ARRAY_SIZE(denied);
	unsigned int k = 0, i;

	_Static_assert(ARRAY_SIZE(denied) + 16 <= NS_FILTER_MAX,
		       "the filter's program fits");
	/* Another architecture: refused outright. */
	f[k++] = (struct sock_filter)BPF_STMT(
		BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, arch));
	f[k++] = (struct sock_filter)BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K,
					      AUDIT_ARCH_X86_64, 1, 0);
	f[k++] = (struct sock_filter)BPF_STMT(BPF_RET | BPF_K,
					      SECCOMP_RET_KILL_PROCESS);
	f[k++] = (struct sock_filter)BPF_STMT(
		BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr));
	f[k++] = (struct sock_filter)BPF_JUMP(BPF_JMP | BPF_JGE | BPF_K,
					      NS_X32_BIT, n + 6, 0);
	/* Each denied call jumps to the EPERM at the end. */
	for (i = 0; i < n; i++)
		f[k++] = (struct sock_filter)BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K,
						      denied[i], n - i + 5, 0);
	/* ioctl(fd, TIOCSTI or TIOCLINUX, ...) */
	f[k++] = (struct sock_filter)BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K,
					      SYS_ioctl, 1, 0);
	f[k++] = (struct sock_filter)BPF_STMT(BPF_RET | BPF_K,
					      SECCOMP_RET_ALLOW);
	f[k++] = (struct sock_filter)BPF_STMT(
		BPF_LD | BPF_W | BPF_ABS,
		offsetof(struct seccomp_data, args[1]));
	f[k++] = (struct sock_filter)BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K,
					      TIOCSTI, 2, 0);
	f[k++] = (struct sock_filter)BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K,
					      TIOCLINUX, 1, 0);
	f[k++] = (struct sock_filter)BPF_STMT(BPF_RET | BPF_K,
					      SECCOMP_RET_ALLOW);
	f[k++] = (struct sock_filter)BPF_STMT(BPF_RET | BPF_K,
					      SECCOMP_RET_ERRNO | EPERM);
	prog.len = (unsigned short)k;
	/*
	 * No no_new_privs: root in the sandbox's user namespace may install
	 * it without, and a setuid program of the image (sudo) still works
	 * inside, within the namespace's ids.
	 */
	if (syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, 0, &prog))
		fail(sb, "its seccomp filter: %s", strerror(errno));
}

/* kiln-agent-ns --listen-fd 3 [--cwd DIR] [-- COMMAND...], from its fd. */
static void exec_agent(struct ns_sandbox *sb)
{
	static const char *const envp[] = {
		"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:"
		"/sbin:/bin",
		"HOME=/root",
		"TERM=xterm-256color",
		NULL,
	};
	const struct vm_config *c = sb->cfg;
	const char *argv[NS_ARGV_MAX];
	char fd[16];
	size_t n = 0;

	snprintf(fd, sizeof(fd), "%d", NS_AGENT_FD);
	argv[n++] = NS_AGENT_BIN;
	argv[n++] = "--listen-fd";
	argv[n++] = fd;
	if (c->cwd) {
		argv[n++] = "--cwd";
		argv[n++] = c->cwd;
	}
	if (c->argv) {
		argv[n++] = "--";
		for (size_t i = 0; c->argv[i] && n < NS_ARGV_MAX - 1; i++)
			argv[n++] = c->argv[i];
	}
	argv[n] = NULL;
	/* Every other descriptor of the host's closes on the exec. */
	if (dup2(sb->listen_fd, NS_AGENT_FD) != NS_AGENT_FD ||
	    syscall(SYS_close_range, NS_AGENT_FD + 1, ~0U, CLOSE_RANGE_CLOEXEC))
		fail(sb, "its descriptors: %s", strerror(errno));
	install_filter(sb);
	syscall(SYS_execveat, sb->agent_fd, "", argv, envp, AT_EMPTY_PATH);
	fail(sb, "executing its agent: %s", strerror(errno));
}

/* The descriptors the child needs, moved above NS_AGENT_FD. */
static void lift_fds(struct ns_sandbox *sb)
{
	int *fds[] = { &sb->listen_fd, &sb->agent_fd, &sb->root_fd,
		       &sb->report[1], &sb->go[0],    &sb->state_fd };
	int fd;

	for (size_t i = 0; i < ARRAY_SIZE(fds); i++) {
		if (*fds[i] < 0 || *fds[i] > NS_AGENT_FD)
			continue;
		fd = fcntl(*fds[i], F_DUPFD_CLOEXEC, NS_AGENT_FD + 1);
		if (fd < 0)
			_exit(NS_CHILD_FAILED);
		*fds[i] = fd;
	}
	for (unsigned int i = 0; i < MOUNTS_MAX; i++) {
		if (sb->bind_fd[i] < 0 || sb->bind_fd[i] > NS_AGENT_FD)
			continue;
		fd = fcntl(sb->bind_fd[i], F_DUPFD_CLOEXEC, NS_AGENT_FD + 1);
		if (fd < 0)
			_exit(NS_CHILD_FAILED);
		sb->bind_fd[i] = fd;
	}
}

void ns_child(struct ns_sandbox *sb)
{
	char root[NS_PATH_MAX], go;

	close(sb->go[1]);
	close(sb->report[0]);
	lift_fds(sb);
	/* The host's end gone (it failed): nothing to wait for. */
	if (read(sb->go[0], &go, 1) != 1)
		_exit(NS_CHILD_FAILED);
	close(sb->go[0]);
	open_host_files(sb);
	if (setgroups(0, NULL) || setresgid(0, 0, 0) || setresuid(0, 0, 0))
		fail(sb, "becoming root of its user namespace: %s",
		     strerror(errno));
	if (sethostname(sb->cfg->hostname, strlen(sb->cfg->hostname)))
		fail(sb, "its hostname: %s", strerror(errno));
	if (mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL))
		fail(sb, "its mount namespace: %s", strerror(errno));
	mount_root(sb, root);
	mount_system(sb, root);
	mount_user(sb, root);
	resolv_conf(sb, root);
	trust_ca(sb, root);
	switch_root(sb, root);
	loopback_up(sb);
	eth_up(sb);
	/*
	 * start: no command, no terminal input for anyone inside; detached,
	 * no terminal at all (the vmm gives its own up once ready).
	 */
	if (!sb->cfg->argv) {
		int fd = open("/dev/null", O_RDWR | O_CLOEXEC);

		if (fd >= 0) {
			dup2(fd, STDIN_FILENO);
			if (sb->cfg->detach) {
				dup2(fd, STDOUT_FILENO);
				dup2(fd, STDERR_FILENO);
			}
			close(fd);
		}
	}
	exec_agent(sb);
	_exit(NS_CHILD_FAILED); /* not reached: exec_agent fails or execs */
}
