/*
 * guest/init/init.c - PID 1 of the Kiln guest.
 *
 * Mounts the basic file systems, switches to a root disk if the command
 * line names one (kiln.root), runs one command on the serial console,
 * reaps everything until that command ends, and hands its exit status to
 * the monitor through the exit device (Documentation/guest.md). Silent on
 * success: the command's output is the only thing the host should see.
 *
 * With kiln.agent=on it also serves the guest agent (guest/agent/,
 * Documentation/agent-protocol.md) on vsock, from a child process it
 * restarts should it die; with the agent on and no command, the VM runs
 * until it is asked to power off.
 *
 * Built static (gcc -static) so the initramfs needs no libc.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/magic.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/io.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/reboot.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <sys/wait.h>
#include <termios.h>
#include <time.h>
#include <unistd.h>
#include <linux/vm_sockets.h>

#include "guest/agent/agent.h"
#include "guest/agent/proc.h"
#include "proto/agent.h"
#include "guest/init/env.h"
#include "guest/init/mounts.h"
#include "guest/init/net.h"
#include "guest/init/trust.h"

/*
 * Kiln's system device (devices/exit-dev.h): a byte to READY says the
 * console is set up and host input may flow; a 32-bit write of the status
 * to EXIT ends the VM.
 */
#define KILN_READY_PORT	   0x500
#define KILN_EXIT_PORT	   0x501
#define KILN_EXIT_PORT_LEN 4

#define KILN_ARGV_FILE "/kiln/argv"
/* /kiln/argv is written by the host; a bound keeps a bad one from OOMing. */
#define KILN_ARGV_MAX (1 << 20)
/*
 * The boot's identity (vmm/identity.h): the hostname, checked by the host
 * (sethostname(2) has the last word), and the default working directory
 * of the command and of the agent's processes.
 */
#define KILN_HOSTNAME_FILE "/kiln/hostname"
#define KILN_CWD_FILE	   "/kiln/cwd"
#define DEFAULT_HOSTNAME   "sandbox" /* without the file: as the host's */
#define HOSTNAME_MAX	   64	     /* HOST_NAME_MAX */

/* The guest asked to power off, halt or reboot: a clean end. */
#define STATUS_SHUTDOWN 0

#define ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))

#define DEFAULT_PATH \
	"/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

/* Where the root disk is mounted before it becomes /. */
#define NEWROOT "/newroot"
/* How long the root disk may take to appear in /dev, and how often to look. */
#define ROOT_WAIT_MS 5000
#define ROOT_POLL_MS 10

/* ext4's superblock starts 1024 bytes in; its magic is at offset 0x38. */
#define EXT4_MAGIC_OFFSET (1024 + 0x38)
#define EXT4_MAGIC	  0xef53

/* Connections the host may open before the agent accepts them. */
#define AGENT_BACKLOG 64
/* A dying agent is restarted at most once per this long (5 a second). */
#define AGENT_RESTART_MS 200

/* kiln.* parameters from the kernel command line; the last one wins. */
struct kiln_params {
	char term[64];
	char root[32]; /* kiln.root: device in /dev; "" or "none": initramfs */
	char rootflags[8]; /* kiln.rootflags: "ro" or "rw" */
	bool raw_console;
	bool bootmark; /* kiln.bootmark: say when init starts */
	bool agent;    /* kiln.agent=on: serve the guest agent on vsock */
	bool net;      /* kiln.net= was given */
	bool net_bad;  /* ...and could not be parsed */
	struct init_net net_cfg;
};

/* Who the guest is this boot: read from the initramfs before a switch. */
struct identity {
	char hostname[HOSTNAME_MAX + 1];
	char *cwd; /* NULL: "/" */
};

/* The guest agent: its listening socket and the process serving it. */
struct agent_server {
	int listen_fd; /* -1: no agent */
	pid_t pid;     /* 0 while none runs */
	struct timespec started;
	const char *cwd; /* its processes' default directory; NULL: "/" */
	const char *const *made_points; /* init_mounts__made() */
};

/*
 * busybox's poweroff, halt and reboot (without -f) signal PID 1 rather than
 * calling reboot(2): SIGUSR2, SIGUSR1 and SIGTERM. Any of them ends the VM.
 */
static volatile sig_atomic_t shutdown_requested;

static void on_shutdown_signal(int sig)
{
	shutdown_requested = sig;
}

/* Only there so that SIGCHLD ends sigsuspend() (wait_command). */
static void on_sigchld(int sig)
{
}

static void catch_shutdown_signals(void)
{
	static const int sigs[] = { SIGUSR1, SIGUSR2, SIGTERM };
	struct sigaction sa = { .sa_handler = on_shutdown_signal };
	struct sigaction chld = { .sa_handler = on_sigchld,
				  .sa_flags = SA_NOCLDSTOP };
	size_t i;

	/* No SA_RESTART: a blocking call must return so the request is seen. */
	sigemptyset(&sa.sa_mask);
	for (i = 0; i < ARRAY_SIZE(sigs); i++)
		sigaction(sigs[i], &sa, NULL);
	sigemptyset(&chld.sa_mask);
	sigaction(SIGCHLD, &chld, NULL);
}

struct mount_point {
	const char *source;
	const char *target;
	const char *type;
	unsigned long flags;
	const char *data;
};

/* Each is mounted only where nothing is yet; /dev/pts rides with /dev. */
static const struct mount_point mounts[] = {
	{ "proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL },
	{ "sysfs", "/sys", "sysfs", MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL },
	{ "devtmpfs", "/dev", "devtmpfs", MS_NOSUID, "mode=0755" },
	{ "devpts", "/dev/pts", "devpts", MS_NOSUID | MS_NOEXEC,
	  "gid=5,mode=0620,ptmxmode=0666" },
	{ "tmpfs", "/tmp", "tmpfs", MS_NOSUID | MS_NODEV, "mode=1777" },
	{ "tmpfs", "/run", "tmpfs", MS_NOSUID | MS_NODEV, "mode=0755" },
};

static void warn_errno(const char *what, const char *name, int err)
{
	fprintf(stderr, "kiln-init: %s %s: %s\n", what, name, strerror(err));
}

/* True if @path is the root of a mount (statx knows since Linux 5.8). */
static bool is_mount_point(const char *path)
{
	struct statx stx;

	if (statx(AT_FDCWD, path, AT_SYMLINK_NOFOLLOW, 0, &stx))
		return false;
	return stx.stx_attributes_mask & stx.stx_attributes &
	       STATX_ATTR_MOUNT_ROOT;
}

static int mount_one(const struct mount_point *m)
{
	/* After a switch to a root disk most are there already. */
	if (is_mount_point(m->target))
		return 0;
	if (mkdir(m->target, 0755) && errno != EEXIST)
		return -errno;
	if (mount(m->source, m->target, m->type, m->flags, m->data)) {
		/* CONFIG_DEVTMPFS_MOUNT may have mounted /dev already. */
		if (errno == EBUSY)
			return 0;
		return -errno;
	}
	return 0;
}

/*
 * Without /dev/console in the initramfs the kernel starts us with no fds
 * 0-2; give init its own (non-controlling) console so errors are seen.
 */
static void open_init_stdio(void)
{
	int fd;

	if (fcntl(STDERR_FILENO, F_GETFD) != -1)
		return;
	fd = open("/dev/console", O_RDWR | O_NOCTTY | O_CLOEXEC);
	if (fd < 0)
		return;
	for (int i = 0; i < 3; i++)
		if (i != fd)
			dup3(fd, i, O_CLOEXEC);
	if (fd > 2)
		close(fd);
}

static void mount_all(void)
{
	int errs[ARRAY_SIZE(mounts)];
	size_t i;

	/* Errors wait until devtmpfs is up and gives them a console. */
	for (i = 0; i < ARRAY_SIZE(mounts); i++)
		errs[i] = mount_one(&mounts[i]);
	open_init_stdio();
	for (i = 0; i < ARRAY_SIZE(mounts); i++)
		if (errs[i])
			warn_errno("cannot mount", mounts[i].target, -errs[i]);
}

/* Reads a whole small file into a NUL-terminated heap buffer. */
static char *read_file(const char *path, size_t max, size_t *len)
{
	char *buf;
	size_t n = 0;
	ssize_t r;
	int fd;

	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return NULL;
	buf = malloc(max + 1);
	if (!buf)
		goto out_close;
	while (n < max) {
		r = read(fd, buf + n, max - n);
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			break;
		n += r;
	}
	buf[n] = '\0';
	*len = n;
out_close:
	close(fd);
	return buf;
}

/* Copies a parameter's value; one too long for @size is cut short. */
static void set_value(char *dst, size_t size, const char *val, size_t len)
{
	if (len >= size)
		len = size - 1;
	memcpy(dst, val, len);
	dst[len] = '\0';
}

static bool word_is(const char *tok, size_t len, const char *word)
{
	return len == strlen(word) && !strncmp(tok, word, len);
}

/* Is @tok "@key=VALUE"? Then @val and @vlen get VALUE. */
static bool param_value(const char *tok, size_t len, const char *key,
			const char **val, size_t *vlen)
{
	size_t klen = strlen(key);

	if (len <= klen || strncmp(tok, key, klen) || tok[klen] != '=')
		return false;
	*val = tok + klen + 1;
	*vlen = len - klen - 1;
	return true;
}

static void parse_param(struct kiln_params *p, const char *tok, size_t len)
{
	const char *val;
	size_t n;

	if (param_value(tok, len, "kiln.term", &val, &n)) {
		if (n)
			set_value(p->term, sizeof(p->term), val, n);
	} else if (param_value(tok, len, "kiln.console", &val, &n)) {
		p->raw_console = word_is(val, n, "raw");
	} else if (word_is(tok, len, "kiln.bootmark")) {
		p->bootmark = true;
	} else if (param_value(tok, len, "kiln.root", &val, &n)) {
		set_value(p->root, sizeof(p->root), val, n);
	} else if (param_value(tok, len, "kiln.rootflags", &val, &n)) {
		set_value(p->rootflags, sizeof(p->rootflags), val, n);
	} else if (param_value(tok, len, "kiln.agent", &val, &n)) {
		p->agent = word_is(val, n, "on");
	} else if (param_value(tok, len, "kiln.net", &val, &n)) {
		p->net = true;
		p->net_bad = init_net__parse(val, n, &p->net_cfg) != 0;
	}
}

/*
 * The kernel drops dotted parameters (it takes them for module options)
 * instead of passing them to init, so kiln.* is read from /proc/cmdline.
 * Everything after "--" belongs to the command, not to us.
 */
static void parse_cmdline(struct kiln_params *p)
{
	size_t len, n;
	char *buf, *s;

	*p = (struct kiln_params){ .term = "linux", .rootflags = "rw" };
	buf = read_file("/proc/cmdline", 4096, &len);
	if (!buf)
		return;
	for (s = buf; *s; s += n) {
		s += strspn(s, " \t\n");
		n = strcspn(s, " \t\n");
		if (n == 2 && !strncmp(s, "--", 2))
			break;
		parse_param(p, s, n);
	}
	free(buf);
}

/*
 * /kiln/hostname and /kiln/cwd, as the host wrote them (no newline). The
 * host checked both; a hostname too long for the kernel still keeps the
 * default rather than a cut-short name.
 */
static void load_identity(struct identity *id)
{
	size_t len;
	char *buf;

	snprintf(id->hostname, sizeof(id->hostname), "%s", DEFAULT_HOSTNAME);
	buf = read_file(KILN_HOSTNAME_FILE, HOSTNAME_MAX + 1, &len);
	if (buf && len && len <= HOSTNAME_MAX)
		snprintf(id->hostname, sizeof(id->hostname), "%s", buf);
	else if (buf && len)
		warn_errno("ignoring", KILN_HOSTNAME_FILE, ENAMETOOLONG);
	free(buf);
	id->cwd = read_file(KILN_CWD_FILE, PATH_MAX - 1, &len);
	if (id->cwd && !len) {
		free(id->cwd);
		id->cwd = NULL;
	}
}

static void setup_env(const struct kiln_params *p, const struct identity *id)
{
	setenv("PATH", DEFAULT_PATH, 1);
	setenv("HOME", "/root", 1);
	setenv("TERM", p->term, 1);
	if (sethostname(id->hostname, strlen(id->hostname)))
		warn_errno("cannot set hostname", id->hostname, errno);
}

/*
 * /kiln/argv holds NUL-terminated strings; a missing final NUL is
 * tolerated. Returns a NULL-terminated vector, or NULL if there is none.
 */
static char **load_argv_file(void)
{
	size_t len, argc = 0, i, j;
	char **argv;
	char *buf;

	buf = read_file(KILN_ARGV_FILE, KILN_ARGV_MAX, &len);
	if (!buf)
		return NULL;
	for (i = 0; i < len; i++)
		if (buf[i] == '\0' || i == len - 1)
			argc++;
	if (!argc)
		goto out_free;
	argv = calloc(argc + 1, sizeof(*argv));
	if (!argv)
		goto out_free;
	for (i = 0, j = 0; j < argc; i += strlen(buf + i) + 1)
		argv[j++] = buf + i;
	return argv; /* buf stays allocated: argv points into it */
out_free:
	free(buf);
	return NULL;
}

/* The command to run, or NULL when neither the host nor argv gives one. */
static char **command_argv(int argc, char **argv)
{
	char **file_argv;

	file_argv = load_argv_file();
	if (file_argv)
		return file_argv;
	if (argc > 1)
		return argv + 1;
	return NULL;
}

/* Without a command (and without the agent), a shell on the console. */
static char **default_shell(void)
{
	static char sh[] = "/bin/sh";
	static char *shell[] = { sh, NULL };

	return shell;
}

/*
 * The host feeds the guest a byte stream and wants one back unchanged:
 * no echo of its input, no \n -> \r\n. Canonical mode and signals stay so
 * that the ^D the host sends at the end of its stdin still means EOF.
 */
static void make_tty_raw(int fd)
{
	struct termios t;

	if (tcgetattr(fd, &t)) {
		warn_errno("cannot get termios of", "console", errno);
		return;
	}
	t.c_lflag &= ~(ECHO | ECHOE | ECHOK | ECHONL | ECHOCTL);
	t.c_lflag |= ICANON | ISIG;
	t.c_oflag &= ~OPOST;
	t.c_iflag &= ~ICRNL;
	if (tcsetattr(fd, TCSANOW, &t))
		warn_errno("cannot set termios of", "console", errno);
}

static int open_tty(void)
{
	static const char *const ttys[] = { "/dev/ttyS0", "/dev/console" };
	int fd = -1;

	for (size_t i = 0; i < ARRAY_SIZE(ttys) && fd < 0; i++)
		fd = open(ttys[i], O_RDWR | O_NOCTTY);
	return fd < 0 ? -errno : fd;
}

/*
 * The command may exit with output still in the serial driver's transmit
 * buffer; init holds the same tty open (as /dev/console), so the last
 * close does not wait for it. Wait here, or the end of the output is lost
 * when the status write stops the VM.
 */
static void drain_console(void)
{
	int fd = open_tty();

	if (fd < 0)
		return;
	if (tcdrain(fd) < 0)
		warn_errno("cannot drain", "the console", errno);
	close(fd);
}

/*
 * init leads the console's session so that the command is never a session
 * leader: when a session leader exits, the kernel hangs its controlling
 * tty up (disassociate_ctty) and that flushes the serial driver's transmit
 * buffer, losing the end of the command's output. SIGTTOU stays ignored in
 * init so that tcsetpgrp() and tcdrain() from the background work.
 */
static void take_console(void)
{
	int fd;

	signal(SIGTTOU, SIG_IGN);
	if (setsid() < 0)
		warn_errno("cannot start a session for", "console", errno);
	fd = open_tty();
	if (fd < 0) {
		warn_errno("cannot open", "/dev/ttyS0", -fd);
		return;
	}
	if (ioctl(fd, TIOCSCTTY, 0))
		warn_errno("cannot set controlling tty", "console", errno);
	close(fd);
}

/* In the child: its own process group, in the console's foreground. */
static void setup_child_tty(bool raw)
{
	int fd;

	if (setpgid(0, 0))
		warn_errno("cannot create process group for", "command", errno);
	fd = open_tty();
	if (fd < 0) {
		warn_errno("cannot open", "/dev/ttyS0", -fd);
		return;
	}
	if (tcsetpgrp(fd, getpid()))
		warn_errno("cannot set foreground group of", "console", errno);
	signal(SIGTTOU, SIG_DFL);
	for (int i = 0; i < 3; i++)
		if (dup2(fd, i) < 0)
			warn_errno("cannot dup", "console", errno);
	if (fd > 2)
		close(fd);
	if (raw)
		make_tty_raw(STDIN_FILENO);
}

/*
 * Input the host sends before the termios change would be echoed or
 * mangled, so the monitor holds it back until this write. Access to the
 * port is dropped again: the command has no business with it.
 */
static void signal_ready(void)
{
	if (ioperm(KILN_READY_PORT, 1, 1)) {
		warn_errno("cannot access", "ready port", errno);
		return;
	}
	outb(1, KILN_READY_PORT);
	ioperm(KILN_READY_PORT, 1, 0);
}

static void __attribute__((noreturn))
exec_command(char **argv, const struct kiln_params *p, const char *cwd)
{
	sigset_t none;

	sigemptyset(&none);
	sigprocmask(SIG_SETMASK, &none, NULL);
	setup_child_tty(p->raw_console);
	signal_ready();
	if (cwd && chdir(cwd)) {
		fprintf(stderr, "kiln-init: cannot change to %s: %s\n", cwd,
			strerror(errno));
		_exit(PROC_STATUS_INIT_FAILED);
	}
	execvp(argv[0], argv);
	fprintf(stderr, "kiln-init: cannot execute %s: %s\n", argv[0],
		strerror(errno));
	_exit(errno == ENOENT ? 127 : 126);
}

/* PID 1 inherits every orphan: reap them all while waiting for @child. */
static int64_t ms_since(const struct timespec *t)
{
	struct timespec now;

	clock_gettime(CLOCK_MONOTONIC, &now);
	return (int64_t)(now.tv_sec - t->tv_sec) * 1000 +
	       (now.tv_nsec - t->tv_nsec) / 1000000;
}

/*
 * The agent's socket: vsock, any CID (the host connects to ours), port
 * KILN_AGENT_PORT. Made once and kept by init across agent restarts, so
 * connections made meanwhile wait in the backlog.
 */
static int agent_listen(void)
{
	struct sockaddr_vm addr = {
		.svm_family = AF_VSOCK,
		.svm_cid = VMADDR_CID_ANY,
		.svm_port = KILN_AGENT_PORT,
	};
	int fd, err;

	fd = socket(AF_VSOCK, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	if (bind(fd, (struct sockaddr *)&addr, sizeof(addr)) ||
	    listen(fd, AGENT_BACKLOG)) {
		err = errno;
		close(fd);
		return -err;
	}
	return fd;
}

/* The agent process: init's signal settings undone, a session of its own. */
static void __attribute__((noreturn))
agent_child(int listen_fd, const struct agent_server *a)
{
	const struct agent_config cfg = { .poweroff_pid = 1,
					  .default_cwd = a->cwd,
					  .made_points = a->made_points };
	static const int sigs[] = { SIGUSR1, SIGUSR2, SIGTERM, SIGTTOU };
	sigset_t none;
	size_t i;

	for (i = 0; i < ARRAY_SIZE(sigs); i++)
		signal(sigs[i], SIG_DFL);
	sigemptyset(&none);
	sigprocmask(SIG_SETMASK, &none, NULL);
	/* Out of the console's session: its signals are the command's. */
	setsid();
	/* agent__serve() returns only on a fatal error, which it printed. */
	_exit(agent__serve(listen_fd, &cfg) ? 1 : 0);
}

/*
 * Starts the agent if it should run and does not. A restart comes at the
 * earliest AGENT_RESTART_MS after the previous start, so an agent that
 * dies at once costs a few forks a second, not a busy PID 1.
 */
static void agent_start(struct agent_server *a)
{
	struct timespec wait = { 0 };
	int64_t since;
	pid_t pid;

	if (a->listen_fd < 0 || a->pid > 0)
		return;
	if (a->started.tv_sec || a->started.tv_nsec) {
		since = ms_since(&a->started);
		if (since >= 0 && since < AGENT_RESTART_MS) {
			wait.tv_nsec = (AGENT_RESTART_MS - since) * 1000000L;
			nanosleep(&wait, NULL);
		}
	}
	clock_gettime(CLOCK_MONOTONIC, &a->started);
	pid = fork();
	if (pid == 0)
		agent_child(a->listen_fd, a);
	if (pid < 0)
		warn_errno("cannot fork for", "the agent", errno);
	else
		a->pid = pid;
}

/* kiln.agent=on: listen, then start the agent; false without a socket. */
static bool agent_setup(struct agent_server *a)
{
	int fd = agent_listen();

	if (fd < 0) {
		fprintf(stderr,
			"kiln-init: cannot listen on vsock port %u: %s\n",
			KILN_AGENT_PORT, strerror(-fd));
		return false;
	}
	a->listen_fd = fd;
	agent_start(a);
	return true;
}

/*
 * PID 1 inherits every orphan: reap them all while waiting for @child
 * (0: no command; then only a power-off request ends the wait), and
 * restart the agent whenever it dies. The signals that matter are
 * blocked except inside sigsuspend(), so none slips in between the check
 * of shutdown_requested and the sleep.
 */
static int wait_command(pid_t child, struct agent_server *agent)
{
	sigset_t block, old;
	int st, status;
	pid_t pid;

	sigemptyset(&block);
	sigaddset(&block, SIGCHLD);
	sigaddset(&block, SIGUSR1);
	sigaddset(&block, SIGUSR2);
	sigaddset(&block, SIGTERM);
	sigprocmask(SIG_BLOCK, &block, &old);
	for (;;) {
		if (shutdown_requested) {
			status = STATUS_SHUTDOWN;
			break;
		}
		agent_start(agent);
		while ((pid = waitpid(-1, &st, WNOHANG)) > 0) {
			if (pid == child) {
				status = proc__exit_code(st);
				goto out;
			}
			if (pid == agent->pid)
				agent->pid = 0;
		}
		/* ECHILD: no command, and the agent is between two lives. */
		if (pid < 0 && (errno != ECHILD || child > 0)) {
			warn_errno("cannot wait for", "command", errno);
			status = PROC_STATUS_INIT_FAILED;
			break;
		}
		if (!agent->pid && agent->listen_fd >= 0)
			continue;
		sigsuspend(&old);
	}
out:
	sigprocmask(SIG_SETMASK, &old, NULL);
	return status;
}

static void kill_leftovers(void)
{
	kill(-1, SIGKILL);
	while (wait(NULL) > 0 || errno == EINTR)
		;
}

/*
 * Ends the VM with @status. Kiln's exit device stops the VM on the write;
 * under a monitor without it the port is a no-op and we reboot instead
 * (the command line carries reboot=k, which the monitor turns into exit).
 */
static void __attribute__((noreturn)) power_off(int status)
{
	if (!ioperm(KILN_EXIT_PORT, KILN_EXIT_PORT_LEN, 1))
		outl((unsigned int)status, KILN_EXIT_PORT);
	else
		warn_errno("cannot access", "exit port", errno);
	reboot(RB_AUTOBOOT);
	/* Returning from PID 1 panics; with panic=-1 that still ends the VM. */
	warn_errno("cannot", "reboot", errno);
	_exit(status);
}

/* The initramfs is ramfs or tmpfs (tmpfs unless root= is given). */
static bool is_ram_fs(const struct statfs *sfs)
{
	return sfs->f_type == RAMFS_MAGIC || sfs->f_type == TMPFS_MAGIC;
}

/*
 * A root disk is remounted read-only before the end, with every process
 * gone: that flushes the journal and marks the file system clean, so the
 * next mount has nothing to recover and e2fsck -n finds nothing.
 */
static void remount_root_ro(void)
{
	struct statfs sfs;

	if (statfs("/", &sfs) || is_ram_fs(&sfs))
		return;
	if (mount(NULL, "/", NULL, MS_REMOUNT | MS_RDONLY, NULL))
		warn_errno("cannot remount read-only", "/", errno);
}

static void __attribute__((noreturn)) end_vm(int status)
{
	kill_leftovers();
	sync();
	remount_root_ro();
	drain_console();
	power_off(status);
}

static bool root_wanted(const struct kiln_params *p)
{
	return p->root[0] && strcmp(p->root, "none");
}

/* A plain name in /dev ("vda"): no path, nothing hidden. */
static bool valid_dev_name(const char *name)
{
	return name[0] && name[0] != '.' && !strchr(name, '/');
}

/*
 * virtio-blk probes during the kernel's initcalls, so the node is usually
 * there when init starts; poll a while in case a probe runs late. Each
 * function below returns NULL on success, else why it failed.
 */
static const char *wait_for_device(const char *dev)
{
	struct timespec tick = { .tv_nsec = ROOT_POLL_MS * 1000000L };
	struct stat st;
	int i;

	for (i = 0; i < ROOT_WAIT_MS / ROOT_POLL_MS; i++) {
		if (!stat(dev, &st)) {
			if (!S_ISBLK(st.st_mode))
				return "not a block device";
			return NULL;
		}
		if (errno != ENOENT)
			return strerror(errno);
		nanosleep(&tick, NULL);
	}
	return "no such device (waited 5 s)"; /* ROOT_WAIT_MS */
}

/* The magic first: mount(2) says only EINVAL for "not ext4". */
static const char *check_ext4(const char *dev)
{
	unsigned char magic[2];
	ssize_t n;
	int fd, err;

	fd = open(dev, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return strerror(errno);
	n = pread(fd, magic, sizeof(magic), EXT4_MAGIC_OFFSET);
	err = errno;
	close(fd);
	if (n < 0)
		return strerror(err);
	if (n != sizeof(magic) || (magic[0] | magic[1] << 8) != EXT4_MAGIC)
		return "no ext4 file system on it";
	return NULL;
}

static const char *mount_root(const char *dev, bool ro)
{
	if (mkdir(NEWROOT, 0755) && errno != EEXIST)
		return strerror(errno);
	if (!mount(dev, NEWROOT, "ext4", ro ? MS_RDONLY : 0, NULL))
		return NULL;
	/* Linux refuses a read-write mount of a read-only disk... */
	if (!ro && (errno == EACCES || errno == EROFS))
		return "the disk is read-only (and kiln.rootflags=rw)";
	/* ...and a read-only one that needs its journal replayed. */
	if (ro && errno == EROFS)
		return "its journal needs recovery and the disk is read-only";
	return strerror(errno);
}

static const char *prepare_root(const char *dev, const struct kiln_params *p)
{
	bool ro = !strcmp(p->rootflags, "ro");
	const char *why;

	if (!ro && strcmp(p->rootflags, "rw"))
		return "kiln.rootflags is neither ro nor rw";
	if (!valid_dev_name(p->root))
		return "not a device name";
	why = wait_for_device(dev);
	if (why)
		return why;
	why = check_ext4(dev);
	if (why)
		return why;
	return mount_root(dev, ro);
}

/*
 * The early mounts move into the new root (as util-linux switch_root
 * does); /dev/pts goes along with /dev. One the new root has no directory
 * for is dropped, and mount_all() makes a fresh one later if it can.
 */
static void move_mounts(void)
{
	char target[64];
	const char *path;
	size_t i;

	for (i = 0; i < ARRAY_SIZE(mounts); i++) {
		path = mounts[i].target;
		if (strchr(path + 1, '/'))
			continue;
		snprintf(target, sizeof(target), NEWROOT "%s", path);
		if (!mount(path, target, NULL, MS_MOVE, NULL))
			continue;
		if (errno != ENOENT)
			warn_errno("cannot move", path, errno);
		umount2(path, MNT_DETACH);
	}
}

/* Empties the directory @dfd, and closes it, without leaving device @dev. */
static void remove_tree(int dfd, dev_t dev)
{
	const int dir_flags = O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC;
	struct dirent *d;
	struct stat st;
	DIR *dir;
	int fd;

	dir = fdopendir(dfd);
	if (!dir) {
		close(dfd);
		return;
	}
	while ((d = readdir(dir))) {
		if (!strcmp(d->d_name, ".") || !strcmp(d->d_name, ".."))
			continue;
		if (fstatat(dfd, d->d_name, &st, AT_SYMLINK_NOFOLLOW) ||
		    st.st_dev != dev)
			continue; /* a mount point: not ours to empty */
		if (S_ISDIR(st.st_mode)) {
			fd = openat(dfd, d->d_name, dir_flags);
			if (fd >= 0)
				remove_tree(fd, dev);
		}
		unlinkat(dfd, d->d_name,
			 S_ISDIR(st.st_mode) ? AT_REMOVEDIR : 0);
	}
	closedir(dir);
}

/*
 * Gives the initramfs's memory back by deleting its files, as busybox's
 * switch_root does; only on ramfs or tmpfs, never on a disk (should init
 * ever run from one). Closes @dfd.
 */
static void free_initramfs(int dfd)
{
	struct statfs sfs;
	struct stat st;

	if (fstatfs(dfd, &sfs) || fstat(dfd, &st) || !is_ram_fs(&sfs)) {
		close(dfd);
		return;
	}
	remove_tree(dfd, st.st_dev);
}

/*
 * Makes NEWROOT the root: move it over /, chroot into it, then empty the
 * initramfs, which only the descriptor kept here still reaches. PID 1
 * stays this program; the image's own init is never run.
 */
static const char *switch_root(void)
{
	int old, err;

	move_mounts();
	if (chdir(NEWROOT))
		return strerror(errno);
	old = open("/", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (old < 0)
		return strerror(errno);
	if (mount(".", "/", NULL, MS_MOVE, NULL) || chroot(".") || chdir("/")) {
		err = errno;
		close(old);
		return strerror(err);
	}
	free_initramfs(old);
	return NULL;
}

/*
 * kiln.root=NAME: mount /dev/NAME (ext4) and make it the root. A root that
 * cannot be had ends the VM with PROC_STATUS_INIT_FAILED: running the command
 * in the initramfs instead would only fail later, less clearly. A
 * read-only one gets the directories its mounts lack from an overlay
 * (init_mounts__make_points); one that cannot have them ends the VM too.
 */
static void enter_root(const struct kiln_params *p, struct init_mounts *fs)
{
	const char *why;
	char dev[64];

	snprintf(dev, sizeof(dev), "/dev/%s", p->root);
	why = prepare_root(dev, p);
	if (why) {
		fprintf(stderr, "kiln-init: cannot mount root %s: %s\n", dev,
			why);
		end_vm(PROC_STATUS_INIT_FAILED);
	}
	if (!strcmp(p->rootflags, "ro") &&
	    init_mounts__make_points(fs, NEWROOT))
		end_vm(PROC_STATUS_INIT_FAILED);
	why = switch_root();
	if (why) {
		fprintf(stderr, "kiln-init: cannot switch to root %s: %s\n",
			dev, why);
		end_vm(PROC_STATUS_INIT_FAILED);
	}
	/* Whatever did not move: e.g. /run, if the image has no such dir. */
	mount_all();
}

/*
 * The default working directory must be there once the mounts are: a
 * boot whose every command would fail to start ends here, saying why.
 */
static void check_cwd(const struct identity *id)
{
	struct stat st;

	if (!id->cwd)
		return;
	if (stat(id->cwd, &st)) {
		fprintf(stderr, "kiln-init: cwd %s: %s\n", id->cwd,
			strerror(errno));
		end_vm(PROC_STATUS_INIT_FAILED);
	}
	if (!S_ISDIR(st.st_mode)) {
		fprintf(stderr, "kiln-init: cwd %s: not a directory\n",
			id->cwd);
		end_vm(PROC_STATUS_INIT_FAILED);
	}
}

/*
 * The image's /etc/environment over init's defaults, for the command and
 * the agent's processes; one that cannot be read only warns.
 */
static void load_image_env(void)
{
	int ret = init_env__load(INIT_ENV_FILE);

	if (ret < 0)
		warn_errno("cannot read", INIT_ENV_FILE, -ret);
}

/*
 * lo always; with kiln.net, eth0 and the resolver, in the final root and
 * before anything runs that may use them. A network the host asked for
 * and the guest cannot have ends the VM, as a missing root does.
 */
static void setup_network(const struct kiln_params *p)
{
	init_net__lo_up();
	if (!p->net)
		return;
	if (p->net_bad) {
		fprintf(stderr, "kiln-init: kiln.net: expected "
				"ADDRESS/PREFIX,GATEWAY,MTU,DNS\n");
		end_vm(PROC_STATUS_INIT_FAILED);
	}
	if (init_net__configure(&p->net_cfg))
		end_vm(PROC_STATUS_INIT_FAILED);
	/* Without a resolver only names fail: the command still runs. */
	init_net__resolv_conf(&p->net_cfg);
}

int main(int argc, char **argv)
{
	struct agent_server agent = { .listen_fd = -1 };
	struct init_mounts *fs_mounts;
	struct init_trust trust;
	struct kiln_params params;
	struct identity id;
	char **cmd;
	int status;
	pid_t pid;

	mount_all();
	parse_cmdline(&params);
	if (params.bootmark)
		dprintf(STDERR_FILENO, "kiln-init: boot mark\n");
	catch_shutdown_signals();
	/* Before a switch: /kiln/ is in the initramfs. */
	load_identity(&id);
	setup_env(&params, &id);
	cmd = command_argv(argc, argv);
	fs_mounts = init_mounts__load();
	if (init_trust__load(&trust, INIT_TRUST_CA_FILE, INIT_TRUST_HASH_FILE))
		end_vm(PROC_STATUS_INIT_FAILED);
	trust.optional = !access(INIT_TRUST_OPTIONAL_FILE, F_OK);
	if (root_wanted(&params))
		enter_root(&params, fs_mounts);
	/* In the final root, before anything runs that may use them. */
	if (init_mounts__mount(fs_mounts))
		end_vm(PROC_STATUS_INIT_FAILED);
	check_cwd(&id);
	agent.cwd = id.cwd;
	agent.made_points = init_mounts__made(fs_mounts);
	load_image_env();
	setup_network(&params);
	/* The hostname where Debian's tools look for it; a failure warns. */
	init_net__hostname_files(id.hostname);
	/* The host's CA, if it intercepts HTTPS, before anything runs. */
	if (init_trust__install(&trust, INIT_TRUST_BUNDLE, INIT_TRUST_RUN))
		end_vm(PROC_STATUS_INIT_FAILED);
	init_trust__free(&trust);
	take_console();
	/*
	 * After the switch, so the agent's commands run in the real root.
	 * Without its socket (no vsock device) a command still runs; with
	 * none to run either, there is nothing to do.
	 */
	if (params.agent && !agent_setup(&agent) && !cmd)
		end_vm(PROC_STATUS_INIT_FAILED);
	if (!cmd && !params.agent)
		cmd = default_shell();

	/* vmm start: no command, the VM serves the agent until power-off. */
	if (!cmd) {
		signal_ready();
		end_vm(wait_command(0, &agent));
	}

	pid = fork();
	if (pid == 0)
		exec_command(cmd, &params, id.cwd);
	if (pid > 0)
		setpgid(pid, pid); /* either side may win the race */
	if (pid < 0) {
		warn_errno("cannot fork for", cmd[0], errno);
		status = PROC_STATUS_INIT_FAILED;
	} else {
		status = wait_command(pid, &agent);
	}

	end_vm(status);
}
