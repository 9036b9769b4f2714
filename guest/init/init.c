/*
 * guest/init/init.c - PID 1 of the Kiln guest.
 *
 * Mounts the basic file systems, runs one command on the serial console,
 * reaps everything until that command ends, and hands its exit status to
 * the monitor through the exit device (Documentation/guest.md). Silent on
 * success: the command's output is the only thing the host should see.
 *
 * Built static (gcc -static) so the initramfs needs no libc.
 */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/io.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/reboot.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <termios.h>
#include <unistd.h>

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

/* Status when init itself, not the command, failed (as env(1) does). */
#define STATUS_INIT_FAILED 125
/* The guest asked to power off, halt or reboot: a clean end. */
#define STATUS_SHUTDOWN 0

#define ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))

#define DEFAULT_PATH \
	"/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

/* kiln.* parameters from the kernel command line. */
struct kiln_params {
	char term[64];
	bool raw_console;
	bool bootmark; /* kiln.bootmark: say when init starts */
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

static void catch_shutdown_signals(void)
{
	static const int sigs[] = { SIGUSR1, SIGUSR2, SIGTERM };
	struct sigaction sa = { .sa_handler = on_shutdown_signal };
	size_t i;

	/* No SA_RESTART: wait() must return so the request is seen. */
	sigemptyset(&sa.sa_mask);
	for (i = 0; i < ARRAY_SIZE(sigs); i++)
		sigaction(sigs[i], &sa, NULL);
}

struct mount_point {
	const char *source;
	const char *target;
	const char *type;
	unsigned long flags;
	const char *data;
};

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

static int mount_one(const struct mount_point *m)
{
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

static void parse_param(struct kiln_params *p, const char *tok, size_t len)
{
	static const char term[] = "kiln.term=";
	static const char raw[] = "kiln.console=raw";
	static const char mark[] = "kiln.bootmark";

	if (len > sizeof(term) - 1 && !strncmp(tok, term, sizeof(term) - 1)) {
		tok += sizeof(term) - 1;
		len -= sizeof(term) - 1;
		if (len >= sizeof(p->term))
			len = sizeof(p->term) - 1;
		memcpy(p->term, tok, len);
		p->term[len] = '\0';
	} else if (len == sizeof(raw) - 1 && !strncmp(tok, raw, len)) {
		p->raw_console = true;
	} else if (len == sizeof(mark) - 1 && !strncmp(tok, mark, len)) {
		p->bootmark = true;
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

	strcpy(p->term, "linux");
	p->raw_console = false;
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

static void setup_env(const struct kiln_params *p)
{
	setenv("PATH", DEFAULT_PATH, 1);
	setenv("HOME", "/root", 1);
	setenv("TERM", p->term, 1);
	if (sethostname("kiln", 4))
		warn_errno("cannot set", "hostname", errno);
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

static char **command_argv(int argc, char **argv)
{
	static char sh[] = "/bin/sh";
	static char *shell[] = { sh, NULL };
	char **file_argv;

	file_argv = load_argv_file();
	if (file_argv)
		return file_argv;
	if (argc > 1)
		return argv + 1;
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
exec_command(char **argv, const struct kiln_params *p)
{
	sigset_t none;

	sigemptyset(&none);
	sigprocmask(SIG_SETMASK, &none, NULL);
	setup_child_tty(p->raw_console);
	signal_ready();
	execvp(argv[0], argv);
	fprintf(stderr, "kiln-init: cannot execute %s: %s\n", argv[0],
		strerror(errno));
	_exit(errno == ENOENT ? 127 : 126);
}

static int wait_status(int st)
{
	if (WIFEXITED(st))
		return WEXITSTATUS(st);
	if (WIFSIGNALED(st))
		return 128 + WTERMSIG(st);
	return STATUS_INIT_FAILED;
}

/* PID 1 inherits every orphan: reap them all while waiting for @child. */
static int wait_command(pid_t child)
{
	pid_t pid;
	int st;

	for (;;) {
		if (shutdown_requested)
			return STATUS_SHUTDOWN;
		pid = wait(&st);
		if (pid == child)
			return wait_status(st);
		if (pid < 0 && errno != EINTR) {
			warn_errno("cannot wait for", "command", errno);
			return STATUS_INIT_FAILED;
		}
	}
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

int main(int argc, char **argv)
{
	struct kiln_params params;
	char **cmd;
	int status;
	pid_t pid;

	mount_all();
	parse_cmdline(&params);
	if (params.bootmark)
		dprintf(STDERR_FILENO, "kiln-init: boot mark\n");
	catch_shutdown_signals();
	setup_env(&params);
	cmd = command_argv(argc, argv);
	take_console();

	pid = fork();
	if (pid == 0)
		exec_command(cmd, &params);
	if (pid > 0)
		setpgid(pid, pid); /* either side may win the race */
	if (pid < 0) {
		warn_errno("cannot fork for", cmd[0], errno);
		status = STATUS_INIT_FAILED;
	} else {
		status = wait_command(pid);
	}

	kill_leftovers();
	sync();
	drain_console();
	power_off(status);
}
