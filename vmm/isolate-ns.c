// SPDX-License-Identifier: GPL-2.0
/*
 * --isolation namespace, the host's side (vmm/isolate-ns.h): what the
 * sandbox needs made by the host's root before the clone (the image
 * verified and mounted read-only through a loop device, detached; the
 * --mount binds cloned, detached; the agent's binary opened; its
 * listening socket; a cgroup), the clone into new namespaces, the id
 * maps and id-mapped mounts the child waits for, then the control API
 * in front of the agent's socket and the wait for the sandbox's end.
 * Everything made is undone by ns_destroy, whatever the step reached.
 */
#include <errno.h>
#include <fcntl.h>
#include <linux/loop.h>
#include <linux/sched.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "kiln-paths.h"
#include "lib/errf.h"
#include "lib/log.h"
#include "vmm/api.h"
#include "vmm/control.h"
#include "vmm/facts.h"
#include "vmm/guest-default.h"
#include "vmm/isolate-ns-internal.h"
#include "vmm/vm.h"

#define NS_LOOP_TRIES	    8	 /* a free loop device taken meanwhile */
#define NS_SHUTDOWN_GRACE_S 30	 /* vm.shutdown: as a VM's guest has */
#define NS_PARENT_GRACE_S   5	 /* --die-with-parent: as vm-run.c's */
#define NS_ERR_LEN	    1024 /* one line: what failed and why */

/* ---- checks ------------------------------------------------------------- */

int isolate_ns__check(const struct vm_config *c, char *err, size_t len)
{
	const char *what = NULL;

	if (!c->rootfs.descriptor)
		return errf(err, len, -EINVAL,
			    "--isolation namespace needs --rootfs DESCRIPTOR: "
			    "the sandbox's root is an image (there is no "
			    "initramfs to run in)");
	if (c->rootfs.mode == ROOTFS_COW)
		what = "--rootfs-mode cow";
	else if (c->net.mode == NET_TAP_FD)
		what = "--net tap-fd:N (its link is a veth the vmm makes; "
		       "--net auto or netns:PATH)";
	else if (c->restore_dir)
		what = "--restore (the namespace launcher has no VM state to "
		       "snapshot or restore: --isolation vm)";
	else if (c->baseline.cache)
		what = "--baseline-cache (the namespace launcher has no VM "
		       "state to capture a baseline of: --isolation vm)";
	else if (c->jail.dir)
		what = "--jail (the sandbox is its own jail)";
	else if (c->vsock.socket_path)
		what = "--vsock";
	if (what)
		return errf(err, len, -EINVAL,
			    "--isolation namespace: %s is not supported", what);
	return 0;
}

/* ---- what the host makes ------------------------------------------------ */

static int image_open(struct ns_sandbox *sb, char *err, size_t len)
{
	const struct vm_config *c = sb->cfg;
	int ret;

	ret = rootfs__load(&sb->img, c->rootfs.descriptor, err, len);
	if (ret)
		return ret;
	if (sb->img.qcow2)
		return errf(err, len, -EINVAL,
			    "%s: --isolation namespace mounts raw ext4 images "
			    "only, and this one is qcow2",
			    c->rootfs.descriptor);
	if (c->rootfs.verify_full)
		return rootfs__verify_full(&sb->img, err, len);
	return rootfs__verify(&sb->img, err, len);
}

/* kiln-agent-ns beside the default guest (vmm/guest-default.h). */
static int agent_open(struct ns_sandbox *sb, char *err, size_t len)
{
	char exe[PATH_MAX], path[PATH_MAX + sizeof(NS_AGENT_BIN) + 1];
	struct guest_default g;
	int ret;

	ret = guest_default__find(
		&g, getenv("KILN_GUEST_DIR"),
		guest_default__exe_dir(exe, sizeof(exe)) ? exe : NULL,
		guest_default__install_dir(), err, len);
	/*
	 * No pins.json: still the same directory to look in; its line is
	 * no error here (a later failure reported elsewhere would print it).
	 */
	if (ret && ret != -ENOENT)
		return ret;
	err[0] = '\0';
	snprintf(path, sizeof(path), "%s/%s", g.dir, NS_AGENT_BIN);
	sb->agent_fd = open(path, O_RDONLY | O_CLOEXEC);
	if (sb->agent_fd < 0)
		return errf(err, len, -errno,
			    "the sandbox's agent %s: %s (make builds it)", path,
			    strerror(errno));
	return 0;
}

/* A loop device reading the image, detached when its mount goes. */
static int loop_attach(int file_fd, char *dev, size_t devlen)
{
	struct loop_config lc = {
		.fd = (unsigned int)file_fd,
		.info.lo_flags = LO_FLAGS_READ_ONLY | LO_FLAGS_AUTOCLEAR,
	};
	int ctl, fd = -1, n, err = EBUSY;

	ctl = open("/dev/loop-control", O_RDWR | O_CLOEXEC);
	if (ctl < 0)
		return -errno;
	for (int i = 0; i < NS_LOOP_TRIES && err == EBUSY; i++) {
		n = ioctl(ctl, LOOP_CTL_GET_FREE);
		if (n < 0) {
			err = errno;
			break;
		}
		snprintf(dev, devlen, "/dev/loop%d", n);
		fd = open(dev, O_RDONLY | O_CLOEXEC);
		if (fd < 0) {
			err = errno;
			break;
		}
		if (!ioctl(fd, LOOP_CONFIGURE, &lc)) {
			close(ctl);
			return fd;
		}
		err = errno;
		close(fd);
		fd = -1;
	}
	close(ctl);
	return -err;
}

/*
 * The image's ext4, read-only (its journal left alone: the loop device
 * is read-only too), as a detached mount: nothing appears in the host's
 * mount table, and the child attaches it in its own namespace.
 */
static int image_mount(struct ns_sandbox *sb, char *err, size_t len)
{
	char dev[32];
	int file, loop, fs, ret = 0;

	file = open(sb->img.path, O_RDONLY | O_CLOEXEC);
	if (file < 0)
		return errf(err, len, -errno, "%s: %s", sb->img.path,
			    strerror(errno));
	loop = loop_attach(file, dev, sizeof(dev));
	close(file);
	if (loop < 0)
		return errf(err, len, loop,
			    "%s: no loop device for it: %s (the namespace "
			    "isolation mounts the image through one: root "
			    "and the loop module are needed)",
			    sb->img.path, strerror(-loop));
	fs = fsopen("ext4", FSOPEN_CLOEXEC);
	if (fs < 0)
		ret = errf(err, len, -errno, "ext4: %s", strerror(errno));
	else if (fsconfig(fs, FSCONFIG_SET_STRING, "source", dev, 0) ||
		 fsconfig(fs, FSCONFIG_SET_FLAG, "ro", NULL, 0) ||
		 fsconfig(fs, FSCONFIG_SET_FLAG, "norecovery", NULL, 0) ||
		 fsconfig(fs, FSCONFIG_CMD_CREATE, NULL, NULL, 0))
		ret = errf(err, len, -errno,
			   "%s: cannot mount it as ext4: %s (is it a raw ext4 "
			   "image?)",
			   sb->img.path, strerror(errno));
	else if ((sb->root_fd = fsmount(fs, FSMOUNT_CLOEXEC,
					MOUNT_ATTR_RDONLY | MOUNT_ATTR_NODEV)) <
		 0)
		ret = errf(err, len, -errno, "%s: fsmount: %s", sb->img.path,
			   strerror(errno));
	if (fs >= 0)
		close(fs);
	/* The mount holds the device now; autoclear frees it after. */
	close(loop);
	return ret;
}

/*
 * Each bind's source, cloned and detached; the child attaches them. Each
 * FUSE-served mount's backend and server, waiting for its /dev/fuse.
 */
static int binds_open(struct ns_sandbox *sb, char *err, size_t len)
{
	const struct mount_config *m;

	for (unsigned int i = 0; i < sb->cfg->mounts.nr; i++) {
		m = &sb->cfg->mounts.m[i];
		if (ns_fuse__wanted(m)) {
			int ret = ns_fuse__create(&sb->fuse[i], m, i, err, len);

			if (ret)
				return ret;
			continue;
		}
		if (m->type != MOUNT_BIND)
			continue;
		sb->bind_fd[i] = open_tree(AT_FDCWD, m->source,
					   OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC);
		if (sb->bind_fd[i] < 0)
			return errf(err, len, -errno, "--mount %s: %s: %s",
				    m->guest_path, m->source, strerror(errno));
	}
	return 0;
}

/*
 * persistent:DIR: DIR/upper holds the changes across runs, DIR/work is
 * overlayfs's; DIR is cloned as a bind is, and id-mapped with them, so
 * that the files the sandbox's root makes there are the host root's.
 */
static int persistent_dir(struct ns_sandbox *sb, char *err, size_t len)
{
	const char *dir = sb->cfg->rootfs.state_path;

	if (sb->cfg->rootfs.mode != ROOTFS_PERSISTENT)
		return 0;
	if (mkdir(dir, 0700) && errno != EEXIST)
		return errf(err, len, -errno, "--rootfs-mode persistent:%s: %s",
			    dir, strerror(errno));
	sb->state_fd =
		open_tree(AT_FDCWD, dir, OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC);
	if (sb->state_fd < 0)
		return errf(err, len, -errno, "--rootfs-mode persistent:%s: %s",
			    dir, strerror(errno));
	return 0;
}

/*
 * The run directory: the agent's socket (the host's side of the
 * transport: the control API connects to it) and the stage, where the
 * child assembles the root in a tmpfs of its own mount namespace.
 */
static int run_dir(struct ns_sandbox *sb, char *err, size_t len)
{
	struct sockaddr_un a = { .sun_family = AF_UNIX };
	const char *tmp = getenv("TMPDIR");
	int ret;

	snprintf(sb->dir, sizeof(sb->dir), "%s/kiln-ns-XXXXXX",
		 tmp && *tmp ? tmp : "/tmp");
	if (!mkdtemp(sb->dir)) {
		ret = -errno;
		errf(err, len, ret, "%s: %s", sb->dir, strerror(errno));
		sb->dir[0] = '\0';
		return ret;
	}
	snprintf(sb->stage, sizeof(sb->stage), "%s/stage", sb->dir);
	if (mkdir(sb->stage, 0700) || chown(sb->stage, NS_ID_BASE, NS_ID_BASE))
		return errf(err, len, -errno, "%s: %s", sb->stage,
			    strerror(errno));
	if ((size_t)snprintf(sb->sock, sizeof(sb->sock), "%s/agent.sock",
			     sb->dir) >= sizeof(a.sun_path))
		return errf(err, len, -ENAMETOOLONG,
			    "%s/agent.sock: longer than a socket's path may be "
			    "(set TMPDIR shorter)",
			    sb->dir);
	strcpy(a.sun_path, sb->sock);
	sb->listen_fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (sb->listen_fd < 0 ||
	    bind(sb->listen_fd, (struct sockaddr *)&a, sizeof(a)) ||
	    listen(sb->listen_fd, SOMAXCONN))
		return errf(err, len, -errno, "%s: %s", sb->sock,
			    strerror(errno));
	return 0;
}

/* ---- the clone ---------------------------------------------------------- */

static int write_file(pid_t pid, const char *name, const char *text)
{
	char path[64];
	int fd, ret = 0;

	snprintf(path, sizeof(path), "/proc/%d/%s", (int)pid, name);
	fd = open(path, O_WRONLY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	if (write(fd, text, strlen(text)) != (ssize_t)strlen(text))
		ret = -errno;
	close(fd);
	return ret;
}

/*
 * The child's ids (its root is NS_ID_BASE here), then the image and the
 * binds id-mapped through its user namespace, so that their root's files
 * are its root's, then the go byte.
 */
static int child_ids(struct ns_sandbox *sb, char *err, size_t len)
{
	struct mount_attr attr = { .attr_set = MOUNT_ATTR_IDMAP };
	char map[64], path[64];
	int user, ret = 0;

	snprintf(map, sizeof(map), "0 %u %u\n", NS_ID_BASE, NS_ID_COUNT);
	ret = write_file(sb->pid, "uid_map", map);
	if (!ret)
		ret = write_file(sb->pid, "gid_map", map);
	if (ret)
		return errf(err, len, ret,
			    "namespace sandbox: its id maps: %s (user "
			    "namespaces not available?)",
			    strerror(-ret));
	snprintf(path, sizeof(path), "/proc/%d/ns/user", (int)sb->pid);
	user = open(path, O_RDONLY | O_CLOEXEC);
	if (user < 0)
		return errf(err, len, -errno, "%s: %s", path, strerror(errno));
	attr.userns_fd = (unsigned int)user;
	if (mount_setattr(sb->root_fd, "", AT_EMPTY_PATH, &attr, sizeof(attr)))
		ret = errf(err, len, -errno,
			   "%s: cannot id-map its mount for the sandbox: %s",
			   sb->img.path, strerror(errno));
	attr.attr_set = MOUNT_ATTR_IDMAP | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV;
	if (!ret && sb->state_fd >= 0 &&
	    mount_setattr(sb->state_fd, "", AT_EMPTY_PATH, &attr, sizeof(attr)))
		ret = errf(err, len, -errno,
			   "--rootfs-mode persistent:%s: cannot id-map it for "
			   "the sandbox: %s (its file system must support "
			   "id-mapped mounts)",
			   sb->cfg->rootfs.state_path, strerror(errno));
	for (unsigned int i = 0; !ret && i < sb->cfg->mounts.nr; i++) {
		const struct mount_config *m = &sb->cfg->mounts.m[i];

		if (sb->bind_fd[i] < 0)
			continue;
		attr.attr_set = MOUNT_ATTR_IDMAP | MOUNT_ATTR_NOSUID |
				MOUNT_ATTR_NODEV |
				(m->read_only ? MOUNT_ATTR_RDONLY : 0);
		if (mount_setattr(sb->bind_fd[i], "", AT_EMPTY_PATH, &attr,
				  sizeof(attr)))
			ret = errf(err, len, -errno,
				   "--mount %s: %s: cannot id-map it for the "
				   "sandbox: %s (its file system must support "
				   "id-mapped mounts)",
				   m->guest_path, m->source, strerror(errno));
	}
	close(user);
	return ret;
}

/*
 * What the child says until its exec closes the socket: a /dev/fuse
 * descriptor for a FUSE-served mount, whose server starts at once (the
 * child's next steps may need its answers), or why it failed.
 */
static int child_reports(struct ns_sandbox *sb, char *err, size_t len)
{
	char msg[NS_REPORT_MAX], cbuf[CMSG_SPACE(sizeof(int))];
	struct iovec iov = { msg, sizeof(msg) - 1 };
	struct msghdr mh;
	struct cmsghdr *cm;
	unsigned int i;
	ssize_t n;
	int fd, ret;

	for (;;) {
		mh = (struct msghdr){ .msg_iov = &iov,
				      .msg_iovlen = 1,
				      .msg_control = cbuf,
				      .msg_controllen = sizeof(cbuf) };
		n = recvmsg(sb->report[0], &mh, MSG_CMSG_CLOEXEC);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return 0; /* closed on the exec */
		cm = CMSG_FIRSTHDR(&mh);
		fd = -1;
		if (cm && cm->cmsg_level == SOL_SOCKET &&
		    cm->cmsg_type == SCM_RIGHTS &&
		    cm->cmsg_len == CMSG_LEN(sizeof(int)))
			memcpy(&fd, CMSG_DATA(cm), sizeof(int));
		if (fd < 0) {
			msg[n] = '\0';
			return errf(err, len, -EIO, "namespace sandbox: %s",
				    msg);
		}
		i = n == 2 && msg[0] == 'F' ? (unsigned char)msg[1] :
					      MOUNTS_MAX;
		if (i >= MOUNTS_MAX || !sb->fuse[i]) {
			close(fd);
			return errf(err, len, -EPROTO,
				    "namespace sandbox: a /dev/fuse for no "
				    "mount of its own");
		}
		ret = ns_fuse__start(sb->fuse[i], fd);
		if (ret) {
			close(fd);
			return errf(err, len, ret,
				    "--mount %s: its FUSE thread: %s",
				    sb->cfg->mounts.m[i].guest_path,
				    strerror(-ret));
		}
	}
}

/*
 * --net: the veth, its far end made in the child's network namespace
 * before the go byte (the child configures it as eth0), the proxy and
 * the resolver on its near end, their threads running before the agent
 * does. Reported by vm_net__sandbox_init itself (err stays empty).
 */
static int net_make(struct ns_sandbox *sb, char *err, size_t len)
{
	char path[64];
	int fd, ret;

	if (sb->cfg->net.mode == NET_NONE)
		return 0;
	snprintf(path, sizeof(path), "/proc/%d/ns/net", (int)sb->pid);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return errf(err, len, -errno, "%s: %s", path, strerror(errno));
	ret = vm_net__sandbox_init(&sb->net, &sb->cfg->net, fd, NS_NET_IFNAME);
	close(fd);
	if (!ret)
		ret = vm_net__sandbox_start(&sb->net);
	return ret;
}

/*
 * The clone, into every new namespace at once and straight into the
 * cgroup; the child waits for child_ids, then reports (child_reports).
 */
static int spawn(struct ns_sandbox *sb, char *err, size_t len)
{
	struct clone_args args = {
		.flags = CLONE_NEWUSER | CLONE_NEWNS | CLONE_NEWPID |
			 CLONE_NEWNET | CLONE_NEWIPC | CLONE_NEWUTS |
			 CLONE_NEWCGROUP | CLONE_PIDFD,
		.pidfd = (uint64_t)(uintptr_t)&sb->pidfd,
		.exit_signal = SIGCHLD,
	};
	long pid;
	int ret;

	if (pipe2(sb->go, O_CLOEXEC) ||
	    socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sb->report))
		return errf(err, len, -errno, "pipe: %s", strerror(errno));
	if (sb->cg.fd >= 0) {
		args.flags |= CLONE_INTO_CGROUP;
		args.cgroup = (uint64_t)sb->cg.fd;
	}
	pid = syscall(SYS_clone3, &args, sizeof(args));
	if (pid < 0)
		return errf(err, len, -errno,
			    "namespace sandbox: cannot create its user, mount, "
			    "pid, net, ipc and uts namespaces: %s (user "
			    "namespaces disabled? see "
			    "/proc/sys/user/max_user_namespaces)",
			    strerror(errno));
	if (pid == 0)
		ns_child(sb);
	sb->pid = (pid_t)pid;
	close(sb->go[0]);
	close(sb->report[1]);
	sb->go[0] = sb->report[1] = -1;
	ret = child_ids(sb, err, len);
	if (!ret)
		ret = net_make(sb, err, len);
	if (ret)
		return ret;
	if (write(sb->go[1], "g", 1) != 1)
		return errf(err, len, -errno, "namespace sandbox: go: %s",
			    strerror(errno));
	return child_reports(sb, err, len);
}

/* ---- the control API ---------------------------------------------------- */

static int open_agent(void *opaque)
{
	struct ns_sandbox *sb = opaque;
	struct sockaddr_un a = { .sun_family = AF_UNIX };
	int fd;

	strcpy(a.sun_path, sb->sock);
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	if (connect(fd, (struct sockaddr *)&a, sizeof(a))) {
		int ret = -errno;

		close(fd);
		return ret;
	}
	return fd;
}

static long long now_s(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec;
}

static void shutdown_cb(void *opaque)
{
	struct ns_sandbox *sb = opaque;
	char err[API_VM_ERR_LEN];

	/* A paused sandbox is thawed first: its agent powers it off. */
	if (sb->cg.frozen &&
	    ns_cgroup__freeze(&sb->cg, false, err, sizeof(err)))
		pr_debug("vm.shutdown: %s", err);
	atomic_store(&sb->shutdown_deadline, now_s() + NS_SHUTDOWN_GRACE_S);
}

static void shutdown_failed_cb(void *opaque, const char *why)
{
	struct ns_sandbox *sb = opaque;

	pr_warn("vm.shutdown: the agent did not take the power off request "
		"(%s); killing the sandbox",
		why);
	atomic_store(&sb->shutdown_deadline, 1);
	/* The wait loop's poll sees the pidfd once it is dead. */
	syscall(SYS_pidfd_send_signal, sb->pidfd, SIGKILL, NULL, 0);
}

static void status_cb(void *opaque, json_t *status)
{
	struct ns_sandbox *sb = opaque;

	json_object_set_new(status, "isolation", json_string("namespace"));
	json_object_set_new(status, "pid", json_integer(getpid()));
	json_object_set_new(status, "sandboxPid", json_integer(sb->pid));
	json_object_set_new(status, "cpus", json_integer(sb->cfg->nr_cpus));
	json_object_set_new(status, "memoryMiB",
			    json_integer((json_int_t)sb->cfg->mem_mib));
	json_object_set_new(
		status, "rootfsMode",
		json_string(config__rootfs_mode_name(sb->cfg->rootfs.mode)));
	json_object_set_new(status, "rootfsImage", json_string(sb->img.name));
	json_object_set_new(status, "net", vm_net__status(&sb->net));
	json_object_set_new(status, "cgroup",
			    sb->cg.path[0] ? json_string(sb->cg.path) :
					     json_null());
}

/*
 * vm.pause and vm.resume: the sandbox's cgroup frozen and thawed (its
 * agent with it: requests wait, as for a paused VM).
 */
static int pause_cb(void *opaque, char *err, size_t len)
{
	struct ns_sandbox *sb = opaque;
	int ret = ns_cgroup__freeze(&sb->cg, true, err, len);

	if (!ret)
		api__event(sb->api, "paused", NULL);
	return ret;
}

static int resume_cb(void *opaque, char *err, size_t len)
{
	struct ns_sandbox *sb = opaque;
	int ret = ns_cgroup__freeze(&sb->cg, false, err, len);

	if (!ret)
		api__event(sb->api, "resumed", NULL);
	return ret;
}

static bool is_paused_cb(void *opaque)
{
	struct ns_sandbox *sb = opaque;

	return sb->cg.frozen;
}

/* vm.snapshot: refused, saying why (no VM state to write). */
static int snapshot_cb(void *opaque, const char *dir, bool resume, char *err,
		       size_t len)
{
	(void)opaque;
	(void)dir;
	(void)resume;
	return errf(err, len, -EOPNOTSUPP,
		    "the namespace launcher (--isolation namespace) cannot "
		    "snapshot: its sandbox is processes on the host's kernel, "
		    "not a VM's memory and devices (snapshots need "
		    "--isolation vm)");
}

static int set_policy_cb(void *opaque, json_t *policy, char *err, size_t len)
{
	struct ns_sandbox *sb = opaque;
	int ret = vm_net__policy_replace(&sb->net, policy, err, len);

	if (!ret)
		pr_info("net.setPolicy: the network policy was replaced");
	return ret;
}

static int check_flow_cb(void *opaque, const struct api_flow_check *f,
			 json_t **out, char *err, size_t len)
{
	struct ns_sandbox *sb = opaque;
	struct net_decision d;
	int ret = vm_net__flow_check(&sb->net, f, &d, err, len);

	if (ret)
		return ret;
	*out = api__flow_verdict(&d);
	return *out ? 0 : -ENOMEM;
}

static void agent_ready_cb(void *opaque)
{
	struct ns_sandbox *sb = opaque;
	char bytes[2] = { VM_AGENT_BYTE, VM_READY_BYTE };
	int null;

	pr_debug("the sandbox's agent is ready");
	if (sb->ready_fd < 0)
		return;
	if (write(sb->ready_fd, bytes, sizeof(bytes)) != sizeof(bytes))
		pr_debug("ready pipe: %s", strerror(errno));
	close(sb->ready_fd);
	sb->ready_fd = -1;
	/* Detached: the terminal is no longer the vmm's (as a VM's). */
	null = open("/dev/null", O_WRONLY | O_CLOEXEC);
	if (null >= 0) {
		dup2(null, STDOUT_FILENO);
		dup2(null, STDERR_FILENO);
		close(null);
	}
}

static int api_open(struct ns_sandbox *sb)
{
	struct api_params p = {
		.socket_path = sb->cfg->control_socket,
		.open_agent = open_agent,
		.shutdown = shutdown_cb,
		.shutdown_failed = shutdown_failed_cb,
		.status = status_cb,
		.set_policy = set_policy_cb,
		.check_flow = check_flow_cb,
		.pause = pause_cb,
		.resume = resume_cb,
		.snapshot = snapshot_cb,
		.is_paused = is_paused_cb,
		.agent_ready = agent_ready_cb,
		.agent_timeout_ms = (unsigned int)sb->cfg->agent_timeout_ms,
		.opaque = sb,
	};
	int ret;

	if (!sb->cfg->control_socket)
		return 0;
	/* vm.facts: what `vmm facts` gives for the same options. */
	p.config_facts = facts__config(sb->cfg, &sb->img);
	ret = api__create(&sb->api, &p);
	json_decref((json_t *)p.config_facts);
	if (!ret)
		ret = api__start(sb->api, NULL);
	if (ret)
		pr_err("control socket %s: %s", sb->cfg->control_socket,
		       strerror(-ret));
	return ret;
}

/* ---- the wait ----------------------------------------------------------- */

static int child_status(struct ns_sandbox *sb)
{
	siginfo_t info = { 0 };

	if (waitid((idtype_t)P_PIDFD, (id_t)sb->pidfd, &info, WEXITED)) {
		pr_err("namespace sandbox: waiting for it: %s",
		       strerror(errno));
		return VMM_EXIT_VMM_ERROR;
	}
	sb->pid = 0;
	if (info.si_code == CLD_EXITED)
		return info.si_status;
	return 128 + info.si_status;
}

static void kill_sandbox(struct ns_sandbox *sb)
{
	if (syscall(SYS_pidfd_send_signal, sb->pidfd, SIGKILL, NULL, 0))
		pr_debug("namespace sandbox: kill: %s", strerror(errno));
}

/*
 * Until PID 1 of the sandbox ends: a signal to the vmm kills it (status
 * 128 + N, as a VM's), a vm.shutdown not done within its grace kills it,
 * and so does --die-with-parent's parent's end after its own.
 */
static int wait_sandbox(struct ns_sandbox *sb, int sig_fd, int parent_fd)
{
	struct pollfd p[3] = {
		{ .fd = sb->pidfd, .events = POLLIN },
		{ .fd = sig_fd, .events = POLLIN },
		{ .fd = parent_fd, .events = POLLIN },
	};
	struct signalfd_siginfo si;
	int signo = 0, status;
	long long deadline;

	for (;;) {
		if (poll(p, 3, 1000) < 0 && errno != EINTR) {
			pr_err("namespace sandbox: poll: %s", strerror(errno));
			kill_sandbox(sb);
			child_status(sb);
			return VMM_EXIT_VMM_ERROR;
		}
		if (p[0].revents)
			break;
		if (p[1].revents && read(sig_fd, &si, sizeof(si)) > 0 &&
		    !signo) {
			signo = (int)si.ssi_signo;
			pr_info("namespace sandbox: signal %d (%s): killing it",
				signo, strsignal(signo));
			kill_sandbox(sb);
		}
		if (p[2].fd >= 0 && p[2].revents) {
			p[2].fd = -1;
			pr_info("the parent process exited (--die-with-parent): "
				"shutting the sandbox down");
			atomic_store(&sb->shutdown_deadline,
				     now_s() + NS_PARENT_GRACE_S);
			if (sb->api)
				api__shutdown(sb->api);
			else
				kill_sandbox(sb);
		}
		deadline = atomic_load(&sb->shutdown_deadline);
		if (deadline && now_s() >= deadline)
			kill_sandbox(sb);
	}
	status = child_status(sb);
	return signo ? 128 + signo : status;
}

/* ---- the whole ---------------------------------------------------------- */

static void ns_init(struct ns_sandbox *sb, const struct vm_config *c,
		    int ready_fd)
{
	memset(sb, 0, sizeof(*sb));
	sb->cfg = c;
	sb->listen_fd = sb->agent_fd = sb->root_fd = sb->stage_fd = -1;
	sb->pidfd = sb->state_fd = -1;
	ns_cgroup__init(&sb->cg);
	sb->go[0] = sb->go[1] = sb->report[0] = sb->report[1] = -1;
	sb->ready_fd = ready_fd;
	for (unsigned int i = 0; i < MOUNTS_MAX; i++)
		sb->bind_fd[i] = sb->fuse_dev[i] = -1;
	vm_net__prepare(&sb->net);
}

static void close_fd(int *fd)
{
	if (*fd >= 0)
		close(*fd);
	*fd = -1;
}

static void ns_destroy(struct ns_sandbox *sb)
{
	api__destroy(sb->api);
	sb->api = NULL;
	if (sb->pid > 0) {
		kill_sandbox(sb);
		child_status(sb);
	}
	ns_cgroup__remove(&sb->cg);
	/* The sandbox is gone: its end of the veth with it. */
	vm_net__sandbox_exit(&sb->net);
	vm_net__release(&sb->net);
	for (unsigned int i = 0; i < MOUNTS_MAX; i++) {
		ns_fuse__destroy(sb->fuse[i]);
		sb->fuse[i] = NULL;
	}
	close_fd(&sb->pidfd);
	close_fd(&sb->listen_fd);
	close_fd(&sb->stage_fd);
	close_fd(&sb->agent_fd);
	close_fd(&sb->root_fd);
	close_fd(&sb->state_fd);
	for (unsigned int i = 0; i < MOUNTS_MAX; i++)
		close_fd(&sb->bind_fd[i]);
	for (int i = 0; i < 2; i++) {
		close_fd(&sb->go[i]);
		close_fd(&sb->report[i]);
	}
	close_fd(&sb->ready_fd);
	if (sb->dir[0]) {
		unlink(sb->sock);
		rmdir(sb->stage);
		rmdir(sb->dir);
	}
	rootfs__free(&sb->img);
}

int isolate_ns__run(const struct vm_config *c, int ready_fd, int parent_fd)
{
	char err[NS_ERR_LEN] = "";
	struct ns_sandbox sb;
	int ret, sig_fd = -1, status = VMM_EXIT_VMM_ERROR;
	sigset_t sigs;

	ns_init(&sb, c, ready_fd);
	ret = isolate_ns__check(c, err, sizeof(err));
	if (!ret)
		ret = image_open(&sb, err, sizeof(err));
	if (!ret)
		ret = agent_open(&sb, err, sizeof(err));
	if (!ret)
		ret = image_mount(&sb, err, sizeof(err));
	if (!ret)
		ret = binds_open(&sb, err, sizeof(err));
	if (!ret)
		ret = persistent_dir(&sb, err, sizeof(err));
	if (!ret)
		ret = run_dir(&sb, err, sizeof(err));
	if (ret) {
		if (err[0]) /* else said where it failed */
			pr_err("%s", err);
		goto out;
	}
	if (c->net.mode != NET_NONE &&
	    vm_net__sandbox_prepare(&sb.net, &c->net))
		goto out;
	ns_cgroup__make(&sb.cg, c);
	/* Blocked before any thread: the API's inherits the mask. */
	sigemptyset(&sigs);
	sigaddset(&sigs, SIGINT);
	sigaddset(&sigs, SIGTERM);
	sigaddset(&sigs, SIGHUP);
	sigprocmask(SIG_BLOCK, &sigs, NULL);
	sig_fd = signalfd(-1, &sigs, SFD_CLOEXEC);
	if (sig_fd < 0) {
		pr_err("signalfd: %s", strerror(errno));
		goto out;
	}
	ret = spawn(&sb, err, sizeof(err));
	if (ret) {
		if (err[0]) /* else said where it failed */
			pr_err("%s", err);
		goto out;
	}
	/* The child holds its own: the host's copies go. */
	close_fd(&sb.root_fd);
	close_fd(&sb.agent_fd);
	close_fd(&sb.state_fd);
	for (unsigned int i = 0; i < MOUNTS_MAX; i++)
		close_fd(&sb.bind_fd[i]);
	if (api_open(&sb))
		goto out;
	status = wait_sandbox(&sb, sig_fd, parent_fd);
	if (sb.api)
		api__event(sb.api, "shutdown",
			   json_pack("{s:s, s:i}", "reason", "guest-exit",
				     "exitCode", status));
out:
	if (sig_fd >= 0)
		close(sig_fd);
	ns_destroy(&sb);
	return status;
}
