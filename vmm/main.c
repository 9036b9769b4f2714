// SPDX-License-Identifier: GPL-2.0
/*
 * vmm: the command line. `vmm run` boots a VM, runs one command in it and
 * exits with that command's status.
 */
#include <errno.h>
#include <limits.h>
#include <poll.h>
#include <time.h>
#include <unistd.h>
#include <sys/wait.h>
#include <signal.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/syscall.h>

#include "lib/errf.h"
#include "lib/nofile.h"
#include "snapshot/archive.h"
#include "vmm/config.h"
#include "vmm/facts.h"
#include "vmm/guest-default.h"
#include "vmm/isolate-ns.h"
#include "vmm/jail.h"
#include "vmm/kvm.h"
#include "vmm/options.h"
#include "vmm/rootfs-cmd.h"
#include "vmm/baseline-vm.h"
#include "vmm/control.h"
#include "vmm/snapshot.h"
#include "vmm/trace-startup.h"
#include "vmm/version.h"
#include "vmm/vm-pause.h"
#include "vmm/vm-run.h"
#include "vmm/vm.h"

/*
 * start --detach: the VM runs in a child in its own session; the parent
 * waits for the child's VM_READY_BYTE, written once the guest agent
 * answers (and a baseline is captured), or for the pipe to close (the
 * start failed, and the child said why), and exits. The child stops a VM
 * whose agent is late (--ready-timeout-ms, vm-run.c); should the child
 * itself be stuck, the parent kills it DETACH_GRACE_MS later, unless the
 * child said VM_AGENT_BYTE (the agent answered, a capture is under way).
 * Returns in the child with *ready_fd set; exits in the parent.
 */
#define DETACH_GRACE_MS 60000

static void detach_wait(const struct vm_config *cfg, int fd, pid_t pid)
{
	long long left =
		cfg->ready_timeout_ms ?
			(long long)cfg->ready_timeout_ms + DETACH_GRACE_MS :
			-1;
	struct pollfd p = { .fd = fd, .events = POLLIN };
	struct timespec t0, t1;
	int n, status;
	char byte;

	for (;;) {
		clock_gettime(CLOCK_MONOTONIC, &t0);
		n = poll(&p, 1,
			 left < 0	? -1 :
			 left > INT_MAX ? INT_MAX :
					  (int)left);
		if (n < 0 && errno == EINTR)
			goto count;
		if (n == 0) {
			pr_err("vmm start: the VM process %d neither reported "
			       "a ready guest agent nor exited within %lld ms; "
			       "killed it",
			       (int)pid,
			       (long long)cfg->ready_timeout_ms +
				       DETACH_GRACE_MS);
			kill(pid, SIGKILL);
			waitpid(pid, NULL, 0);
			if (cfg->pid_file)
				unlink(cfg->pid_file);
			exit(VMM_EXIT_VMM_ERROR);
		}
		if (n < 0 || read(fd, &byte, 1) != 1)
			break;
		if (byte == VM_READY_BYTE)
			exit(0);
		if (byte == VM_AGENT_BYTE)
			left = -1;
	count:
		if (left < 0)
			continue;
		clock_gettime(CLOCK_MONOTONIC, &t1);
		left -= (t1.tv_sec - t0.tv_sec) * 1000LL +
			(t1.tv_nsec - t0.tv_nsec) / 1000000;
		if (left < 0)
			left = 0;
	}
	if (cfg->pid_file)
		unlink(cfg->pid_file);
	if (waitpid(pid, &status, 0) != pid) {
		pr_err("vmm start: waiting for the VM process %d: %s", (int)pid,
		       strerror(errno));
		exit(VMM_EXIT_VMM_ERROR);
	}
	/* A failure the VM process reported itself: its status. */
	if (WIFEXITED(status) && WEXITSTATUS(status))
		exit(WEXITSTATUS(status));
	/* Nobody said why yet: the guest powered off, or a signal. */
	if (WIFEXITED(status))
		pr_err("vmm start: the guest powered off before its agent "
		       "answered");
	else if (WIFSIGNALED(status))
		pr_err("vmm start: the VM process was killed by signal %d "
		       "(%s) before the guest agent answered",
		       WTERMSIG(status), strsignal(WTERMSIG(status)));
	exit(VMM_EXIT_VMM_ERROR);
}

static int detach(const struct vm_config *cfg, int *ready_fd)
{
	int pipefd[2];
	pid_t pid;
	FILE *f;

	if (pipe2(pipefd, O_CLOEXEC) < 0) {
		pr_err("pipe: %s", strerror(errno));
		return -errno;
	}
	pid = fork();
	if (pid < 0) {
		pr_err("fork: %s", strerror(errno));
		return -errno;
	}
	if (pid == 0) {
		close(pipefd[0]);
		setsid();
		*ready_fd = pipefd[1];
		return 0;
	}
	close(pipefd[1]);
	if (cfg->pid_file) {
		f = fopen(cfg->pid_file, "w");
		if (!f || fprintf(f, "%d\n", (int)pid) < 0 || fclose(f)) {
			pr_err("%s: %s", cfg->pid_file, strerror(errno));
			kill(pid, SIGTERM);
			exit(VMM_EXIT_VMM_ERROR);
		}
	}
	detach_wait(cfg, pipefd[0], pid);
	return 0; /* not reached */
}

/*
 * --log, --log-level, --log-format: once the options are read, so that
 * what is wrong with the rest goes where the log does; before a detach (a
 * bad path is said on the terminal) and before any thread starts.
 */
static int setup_log(const struct vm_config *cfg)
{
	int ret;

	if (cfg->log_level_set)
		log__set_level(cfg->log_level);
	log__set_format(cfg->log_format);
	if (!cfg->log_path)
		return 0;
	ret = log__open(cfg->log_path);
	if (ret)
		pr_err("log %s: %s", cfg->log_path, strerror(-ret));
	return ret;
}

/*
 * --die-with-parent: a pidfd (pidfd_open, Linux 5.3) for the process that
 * ran the vmm, opened before any fork (start --detach, --jail), so that
 * the VM process watches that one and not the vmm it forked from; the run
 * loop polls it (vm-run.c). Not PR_SET_PDEATHSIG: it fires on the exit of
 * the forking thread, so the detached start's own parent, which exits
 * once the agent answers, would kill the VM. A parent that exited before
 * the pidfd was open has left the vmm reparented: refused, the VM would
 * start orphaned. *fd: the pidfd, or -1 without the option.
 */
static int watch_parent(const struct vm_config *cfg, int *fd)
{
	pid_t ppid = getppid();

	*fd = -1;
	if (!cfg->die_with_parent)
		return 0;
	*fd = (int)syscall(SYS_pidfd_open, ppid, 0);
	if (*fd < 0) {
		pr_err("--die-with-parent: pidfd_open(%d): %s (Linux 5.3 or "
		       "later is needed)",
		       (int)ppid, strerror(errno));
		return -errno;
	}
	if (getppid() != ppid) {
		pr_err("--die-with-parent: the parent process %d exited before "
		       "the vmm started",
		       (int)ppid);
		close(*fd);
		*fd = -1;
		return -ESRCH;
	}
	return 0;
}

/*
 * What the control API may ask of the VM (vmm/control.h), wired here, at
 * the top: the control server calls none of these modules itself.
 */
static const struct control_ops control_ops = {
	.pause = vm__pause,
	.resume = vm__resume,
	.snapshot = vm__snapshot,
	.set_net_policy = vm_net__set_policy,
	.capture = vm__baseline_capture_detached,
};

/*
 * --trace-startup FILE: opened once the options are read (a bad path is
 * said before anything is built, and before the jail or the filter
 * could forbid it), written as the process leaves.
 */
static int trace_open(struct startup_trace *t, const struct vm_config *cfg)
{
	int ret;

	if (!cfg->trace_startup_path)
		return 0;
	ret = startup_trace__open(t, cfg->trace_startup_path);
	if (ret)
		pr_err("--trace-startup %s: %s", cfg->trace_startup_path,
		       strerror(-ret));
	return ret;
}

static void trace_close(struct startup_trace *t, const struct vm_config *cfg)
{
	int ret;

	startup_trace__mark(t, TRACE_EXIT);
	if (t->fd >= 0) {
		ret = startup_trace__write(t, t->fd);
		if (ret)
			pr_warn("--trace-startup %s: %s",
				cfg->trace_startup_path, strerror(-ret));
	}
	startup_trace__exit(t);
}

static int cmd_run(int argc, char **argv, bool start,
		   struct startup_trace *trace)
{
	char err[CONFIG_ERR_LEN];
	struct vm_config cfg;
	int ret, ready_fd = -1, parent_fd = -1;
	struct jail *jail = NULL;
	struct vm *vm;

	config__init(&cfg);
	cfg.start = start;
	ret = options__parse_argv(&cfg, argc, argv);
	if (ret == OPTIONS_HELP) {
		config__free(&cfg);
		return 0;
	}
	if (ret || setup_log(&cfg))
		goto out;
	/*
	 * No --kernel: the default guest, verified (guest-default.h); a
	 * namespace sandbox boots none (vmm/isolate-ns.h).
	 */
	ret = cfg.isolation == ISOLATION_VM ?
		      guest_default__apply(&cfg, err, sizeof(err)) :
		      0;
	if (!ret)
		ret = config__validate(&cfg, err, sizeof(err));
	if (!ret && cfg.isolation == ISOLATION_NAMESPACE)
		ret = isolate_ns__check(&cfg, err, sizeof(err));
	if (!ret && cfg.jail.dir)
		ret = jail__check_root(&cfg.jail, err, sizeof(err));
	if (!ret && cfg.jail.dir)
		ret = jail__plan(&jail, &cfg, err, sizeof(err));
	if (ret) {
		pr_err("%s", err);
		goto out;
	}
	if (trace_open(trace, &cfg))
		goto out;
	startup_trace__mark(trace, TRACE_OPTIONS);
	if (watch_parent(&cfg, &parent_fd))
		goto out;
	if (jail && jail__unshare_pid(jail))
		goto out;
	/* In a jail, the fork makes its PID 1, which runs the VM. */
	if (cfg.detach && detach(&cfg, &ready_fd))
		goto out;
	if (cfg.isolation == ISOLATION_NAMESPACE) {
		ret = isolate_ns__run(&cfg, ready_fd, parent_fd);
		if (parent_fd >= 0)
			close(parent_fd);
		trace_close(trace, &cfg);
		log__close();
		config__free(&cfg);
		return ret;
	}
	if (jail && !cfg.detach && jail__fork(jail))
		goto out;
	if (jail && jail__setup(jail))
		goto out;
	ret = vm__create(&vm, &cfg, trace);
	/*
	 * A restore from the baseline cache failed once KVM had it (its
	 * line is logged): cold, once (Documentation/snapshots.md).
	 */
	if (ret == VM_BASELINE_COLD && !cfg.baseline.no_lookup) {
		cfg.baseline.no_lookup = true;
		ret = vm__create(&vm, &cfg, trace);
	}
	if (ret)
		goto out;
	/* Built: nothing privileged is left to do; no thread is filtered yet. */
	if (jail && (vm_net__jail_keep_caps(vm) || jail__drop(jail) ||
		     vm_net__jail_raise_caps(vm))) {
		vm__destroy(vm);
		goto out;
	}
	vm->ready_fd = ready_fd;
	ret = vm__run(vm, &control_ops, parent_fd);
	vm__destroy(vm);
	startup_trace__mark(trace, TRACE_DRAINED);
	if (parent_fd >= 0)
		close(parent_fd);
	jail__destroy(jail);
	trace_close(trace, &cfg);
	log__close();
	config__free(&cfg);
	return ret;
out:
	if (ready_fd >= 0)
		close(ready_fd);
	if (parent_fd >= 0)
		close(parent_fd);
	jail__destroy(jail);
	trace_close(trace, &cfg);
	log__close();
	config__free(&cfg);
	return VMM_EXIT_VMM_ERROR;
}

/*
 * vmm facts [options]: the configuration facts vm.facts would give for a
 * VM started with the same options (vmm/facts.h), printed as `vmmctl
 * facts` prints them, without a VM: /dev/kvm is never opened.
 */
static int cmd_facts(int argc, char **argv)
{
	char err[CONFIG_ERR_LEN] = "";
	struct vm_config cfg;
	json_t *facts = NULL;
	char *text = NULL;
	int ret;

	config__init(&cfg);
	cfg.facts = true;
	ret = options__parse_argv(&cfg, argc, argv);
	if (ret == OPTIONS_HELP) {
		config__free(&cfg);
		return 0;
	}
	if (!ret)
		ret = setup_log(&cfg);
	if (ret) /* said already */
		goto out;
	/* A namespace sandbox boots no kernel: none looked for. */
	ret = cfg.isolation == ISOLATION_VM ?
		      guest_default__apply(&cfg, err, sizeof(err)) :
		      0;
	if (!ret)
		ret = config__validate(&cfg, err, sizeof(err));
	if (!ret)
		ret = facts__config_offline(&cfg, &facts, err, sizeof(err));
	if (!ret) {
		text = json_dumps(facts, JSON_INDENT(2));
		if (!text)
			ret = errf(err, sizeof(err), -ENOMEM, "facts: %s",
				   strerror(ENOMEM));
	}
	if (!ret && (puts(text) < 0 || fflush(stdout)))
		ret = errf(err, sizeof(err), -EIO, "facts: stdout: %s",
			   strerror(errno));
	if (ret)
		pr_err("%s", err[0] ? err : strerror(-ret));
out:
	free(text);
	json_decref(facts);
	log__close();
	config__free(&cfg);
	return ret ? VMM_EXIT_VMM_ERROR : 0;
}

/*
 * vmm snapshot pack [--level N] DIR FILE | unpack FILE DIR: a snapshot
 * directory to one archive and back (snapshot/archive.h), offline.
 */
static int cmd_snapshot(int argc, char **argv)
{
	char err[1024] = "", *end;
	long level = SNAP_ARCHIVE_LEVEL;
	int i = 2, ret;

	if (argc > 1 && !strcmp(argv[1], "pack") && argc > 3 &&
	    !strcmp(argv[2], "--level")) {
		errno = 0;
		level = strtol(argv[3], &end, 10);
		if (errno || *end || end == argv[3] || level < 1 ||
		    level > 22) {
			pr_err("snapshot pack: --level %s: not a zstd level "
			       "(1 to 22)",
			       argv[3]);
			return VMM_EXIT_VMM_ERROR;
		}
		i = 4;
	}
	if (argc - i != 2 ||
	    (strcmp(argv[1], "pack") && strcmp(argv[1], "unpack"))) {
		pr_err("snapshot: expected pack [--level N] DIR FILE or "
		       "unpack FILE DIR");
		return VMM_EXIT_VMM_ERROR;
	}
	if (!strcmp(argv[1], "pack"))
		ret = snap_archive__pack(argv[i], argv[i + 1], (int)level, err,
					 sizeof(err));
	else
		ret = snap_archive__unpack(argv[i], argv[i + 1], err,
					   sizeof(err));
	if (ret) {
		pr_err("snapshot %s: %s", argv[1], err);
		return VMM_EXIT_VMM_ERROR;
	}
	return 0;
}

/*
 * vmm rootfs describe | bytes | flatten (vmm/rootfs-cmd.h), offline. A
 * reader of bytes that went away ends it as SIGPIPE would have, quietly.
 */
static int cmd_rootfs(int argc, char **argv)
{
	int ret = rootfs_cmd__main(argc, argv);

	if (ret == ROOTFS_CMD_EPIPE)
		return 128 + SIGPIPE;
	return ret ? VMM_EXIT_VMM_ERROR : 0;
}

/*
 * vmm probe-kvm: whether this host's KVM can run a Kiln guest, as the
 * SDK's "vm" launcher asks before it is chosen (Documentation/cli.md,
 * "Probing KVM"): /dev/kvm opens, KVM_GET_API_VERSION is 12, the
 * capabilities `vmm run` needs are there, and it is not the software
 * kvm_pvm. One JSON line on stdout; exit 0 if usable, 1 if not.
 */
static int cmd_probe_kvm(int argc, char **argv)
{
	const char *why = NULL;
	int fd;

	(void)argv;
	if (argc != 1) {
		pr_err("probe-kvm: takes no arguments");
		return VMM_EXIT_VMM_ERROR;
	}
	if (kvm__open(&fd, &why))
		goto unusable;
	close(fd);
	if (kvm__is_software()) {
		why = "/dev/kvm is the software PVM backend (kvm_pvm, no "
		      "vmx/svm): guests will not run usefully";
		goto unusable;
	}
	printf("{\"usable\": true}\n");
	return fflush(stdout) ? VMM_EXIT_VMM_ERROR : 0;
unusable:
	/* why is ours or strerror's: no quote or backslash to escape */
	printf("{\"usable\": false, \"reason\": \"%s\"}\n", why);
	return fflush(stdout) ? VMM_EXIT_VMM_ERROR : 1;
}

int main(int argc, char **argv)
{
	struct startup_trace trace;

	startup_trace__init(&trace, NULL); /* first: the trace's origin */
	nofile__raise(); /* before anything is sized from it */
	if (argc < 2) {
		options__usage(stderr);
		return VMM_EXIT_VMM_ERROR;
	}
	if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
		options__usage(stdout);
		return 0;
	}
	if (!strcmp(argv[1], "--version")) {
		version__print(stdout);
		return 0;
	}
	if (!strcmp(argv[1], "run"))
		return cmd_run(argc - 1, argv + 1, false, &trace);
	if (!strcmp(argv[1], "start"))
		return cmd_run(argc - 1, argv + 1, true, &trace);
	if (!strcmp(argv[1], "facts"))
		return cmd_facts(argc - 1, argv + 1);
	if (!strcmp(argv[1], "snapshot"))
		return cmd_snapshot(argc - 1, argv + 1);
	if (!strcmp(argv[1], "rootfs"))
		return cmd_rootfs(argc - 1, argv + 1);
	if (!strcmp(argv[1], "probe-kvm"))
		return cmd_probe_kvm(argc - 1, argv + 1);
	pr_err("unknown command '%s' (try vmm --help)", argv[1]);
	return VMM_EXIT_VMM_ERROR;
}
