// SPDX-License-Identifier: GPL-2.0
/*
 * vmm: the command line. `vmm run` boots a VM, runs one command in it and
 * exits with that command's status.
 */
#include <errno.h>
#include <getopt.h>
#include <unistd.h>
#include <sys/wait.h>
#include <signal.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "vmm/config.h"
#include "vmm/vm.h"

#define KILN_VERSION "0.1.0"

static const char usage[] =
	"usage: vmm run --kernel PATH [--initrd PATH] [--cmdline STR] [--cpus "
	"N]\n"
	"               [--memory MiB] [--rootfs DESC [--rootfs-mode M] "
	"...]\n"
	"               [--vsock-socket PATH [--vsock-cid N]] [--mount "
	"SPEC]...\n"
	"               [--no-seccomp] [--verbose] [-- COMMAND ARGS...]\n"
	"       vmm run --config FILE.json [options] [-- COMMAND ARGS...]\n"
	"       vmm start --control-socket PATH [--detach [--pid-file PATH]] "
	"[options]\n"
	"       vmm --help | --version\n"
	"\n"
	"Boots a Linux microVM on KVM, runs COMMAND in it and exits with its "
	"status.\n"
	"\n"
	"  --kernel PATH     ELF vmlinux or bzImage (x86-64, 64-bit boot "
	"protocol)\n"
	"  --initrd PATH     initramfs (cpio) to load with the kernel\n"
	"  --cmdline STR     appended to the default kernel command line\n"
	"  --cpus N          vCPUs, 1 to 64 (default 1)\n"
	"  --memory MiB      guest memory in MiB (default 256)\n"
	"  --rootfs DESC     root disk from an image descriptor (JSON): a raw "
	"image,\n"
	"                    checked against its size and sha256 digest before "
	"boot\n"
	"  --rootfs-mode M   ephemeral (default: changes in memory for one "
	"boot),\n"
	"                    readonly, or persistent:/abs/state/file\n"
	"  --max-dirty-bytes N\n"
	"                    cap on changed bytes, K/M/G/KiB/MiB/GiB suffixes, "
	"0: no\n"
	"                    cap (default 64MiB ephemeral, none persistent)\n"
	"  --rootfs-direct   O_DIRECT on the image and the state file\n"
	"  --rootfs-verify full|cached\n"
	"                    full: hash the image even when the verification "
	"cache\n"
	"                    vouches for it (default cached)\n"
	"  --vsock-socket PATH\n"
	"                    virtio-vsock, host side on Unix sockets: host "
	"processes\n"
	"                    connect to PATH and write \"CONNECT <port>\\n\"; "
	"guest\n"
	"                    connections to CID 2 port P go to PATH_P\n"
	"  --vsock-cid N     the guest's vsock CID, 3 to 4294967294 (default "
	"3)\n"
	"  --mount GUEST_PATH=bind:DIR[:ro|:rw]\n"
	"  --mount GUEST_PATH=memory[:MAXBYTES]\n"
	"  --mount GUEST_PATH=virtual:SOCKET\n"
	"                    virtio-fs: a host directory (confined beneath "
	"DIR),\n"
	"                    an in-memory file system, or one served by a "
	"process\n"
	"                    on SOCKET; mounted at GUEST_PATH before the "
	"command runs\n"
	"                    (masks and seeded files: --config, "
	"Documentation/virtio-fs.md)\n"
	"  --control-socket PATH\n"
	"                    serve the JSON-RPC control API there (exec, "
	"spawn, "
	"pty,\n"
	"                    files, facts: Documentation/api.md); the guest "
	"agent "
	"runs\n"
	"  --detach          start: return once the guest agent answers, the "
	"VM "
	"runs on\n"
	"  --pid-file PATH   start --detach: write the VM process's pid there\n"
	"  --config FILE     JSON settings: kernel, initrd, cmdline, cpus, "
	"memoryMiB,\n"
	"                    command, rootfs, vsock, mounts; options after it override "
	"it\n"
	"  --no-seccomp      do not filter the monitor's syscalls (debugging)\n"
	"  -v, --verbose     debug messages on stderr\n"
	"\n"
	"Exit status: COMMAND's status (128+N if signal N killed it); 123 if "
	"the\n"
	"guest crashed or reset before reporting one; 125 if the vmm failed or "
	"its\n"
	"input was bad.\n";

enum {
	OPT_KERNEL = 'k',
	OPT_INITRD = 'i',
	OPT_CMDLINE = 'c',
	OPT_CPUS = 'n',
	OPT_MEMORY = 'm',
	OPT_CONFIG = 'f',
	OPT_VERBOSE = 'v',
	OPT_HELP = 'h',
	OPT_NO_SECCOMP = 0x100,
	OPT_ROOTFS,
	OPT_ROOTFS_MODE,
	OPT_MAX_DIRTY,
	OPT_ROOTFS_DIRECT,
	OPT_ROOTFS_VERIFY,
	OPT_VSOCK_SOCKET,
	OPT_VSOCK_CID,
	OPT_CONTROL_SOCKET,
	OPT_DETACH,
	OPT_PID_FILE,
	OPT_MOUNT,
};

static const struct option run_options[] = {
	{ "kernel", required_argument, NULL, OPT_KERNEL },
	{ "initrd", required_argument, NULL, OPT_INITRD },
	{ "cmdline", required_argument, NULL, OPT_CMDLINE },
	{ "cpus", required_argument, NULL, OPT_CPUS },
	{ "memory", required_argument, NULL, OPT_MEMORY },
	{ "config", required_argument, NULL, OPT_CONFIG },
	{ "verbose", no_argument, NULL, OPT_VERBOSE },
	{ "no-seccomp", no_argument, NULL, OPT_NO_SECCOMP },
	{ "rootfs", required_argument, NULL, OPT_ROOTFS },
	{ "rootfs-mode", required_argument, NULL, OPT_ROOTFS_MODE },
	{ "max-dirty-bytes", required_argument, NULL, OPT_MAX_DIRTY },
	{ "rootfs-direct", no_argument, NULL, OPT_ROOTFS_DIRECT },
	{ "rootfs-verify", required_argument, NULL, OPT_ROOTFS_VERIFY },
	{ "vsock-socket", required_argument, NULL, OPT_VSOCK_SOCKET },
	{ "vsock-cid", required_argument, NULL, OPT_VSOCK_CID },
	{ "control-socket", required_argument, NULL, OPT_CONTROL_SOCKET },
	{ "detach", no_argument, NULL, OPT_DETACH },
	{ "pid-file", required_argument, NULL, OPT_PID_FILE },
	{ "mount", required_argument, NULL, OPT_MOUNT },
	{ "help", no_argument, NULL, OPT_HELP },
	{ NULL, 0, NULL, 0 },
};

static int set_string(char **field, const char *value)
{
	free(*field);
	*field = strdup(value);
	return *field ? 0 : -ENOMEM;
}

static int set_number(const char *opt, const char *value, uint64_t *out)
{
	int ret = config__parse_uint(value, UINT32_MAX, out);

	if (ret == -EINVAL)
		pr_err("--%s %s: not a decimal number", opt, value);
	else if (ret)
		pr_err("--%s %s: out of range", opt, value);
	return ret;
}

/* ephemeral | readonly | persistent:/abs/state/file */
static int set_rootfs_mode(struct rootfs_config *r, const char *arg)
{
	static const char persistent[] = "persistent:";
	const size_t plen = sizeof(persistent) - 1;

	if (!strncmp(arg, persistent, plen)) {
		if (!arg[plen]) {
			pr_err("--rootfs-mode %s: give the state file: "
			       "persistent:/abs/path",
			       arg);
			return -EINVAL;
		}
		r->mode = ROOTFS_PERSISTENT;
		return set_string(&r->state_path, arg + plen);
	}
	if (!strcmp(arg, "persistent")) {
		pr_err("--rootfs-mode persistent: give the state file: "
		       "persistent:/abs/path");
		return -EINVAL;
	}
	if (config__parse_rootfs_mode(arg, &r->mode)) {
		pr_err("--rootfs-mode %s: must be ephemeral, readonly or "
		       "persistent:/abs/path",
		       arg);
		return -EINVAL;
	}
	/* Overrides a persistent mode from --config, state file included. */
	free(r->state_path);
	r->state_path = NULL;
	return 0;
}

static int set_max_dirty(struct rootfs_config *r, const char *arg)
{
	int ret = config__parse_size(arg, INT64_MAX, &r->max_dirty_bytes);

	if (ret == -EINVAL)
		pr_err("--max-dirty-bytes %s: not a byte count (digits, "
		       "optionally K, M, G, KiB, MiB or GiB)",
		       arg);
	else if (ret)
		pr_err("--max-dirty-bytes %s: out of range", arg);
	else
		r->max_dirty_set = true;
	return ret;
}

static int apply_option(struct vm_config *cfg, int opt, const char *arg)
{
	char err[CONFIG_ERR_LEN];
	uint64_t n;
	int ret;

	switch (opt) {
	case OPT_KERNEL:
		return set_string(&cfg->kernel_path, arg);
	case OPT_INITRD:
		return set_string(&cfg->initrd_path, arg);
	case OPT_CMDLINE:
		return set_string(&cfg->cmdline, arg);
	case OPT_CPUS:
		ret = set_number("cpus", arg, &n);
		if (!ret)
			cfg->nr_cpus = n;
		return ret;
	case OPT_MEMORY:
		return set_number("memory", arg, &cfg->mem_mib);
	case OPT_CONFIG:
		ret = config__load_json(cfg, arg, err, sizeof(err));
		if (ret)
			pr_err("%s: %s", arg, err);
		return ret;
	case OPT_ROOTFS:
		return set_string(&cfg->rootfs.descriptor, arg);
	case OPT_ROOTFS_MODE:
		return set_rootfs_mode(&cfg->rootfs, arg);
	case OPT_MAX_DIRTY:
		return set_max_dirty(&cfg->rootfs, arg);
	case OPT_ROOTFS_DIRECT:
		cfg->rootfs.direct = true;
		return 0;
	case OPT_ROOTFS_VERIFY:
		if (!strcmp(arg, "full") || !strcmp(arg, "cached")) {
			cfg->rootfs.verify_full = !strcmp(arg, "full");
			return 0;
		}
		pr_err("--rootfs-verify %s: must be full or cached", arg);
		return -EINVAL;
	case OPT_VSOCK_SOCKET:
		return set_string(&cfg->vsock.socket_path, arg);
	case OPT_VSOCK_CID:
		ret = set_number("vsock-cid", arg, &cfg->vsock.cid);
		if (!ret)
			cfg->vsock.cid_set = true;
		return ret;
	case OPT_CONTROL_SOCKET:
		return set_string(&cfg->control_socket, arg);
	case OPT_DETACH:
		cfg->detach = true;
		return 0;
	case OPT_PID_FILE:
		return set_string(&cfg->pid_file, arg);
	case OPT_MOUNT:
		ret = mounts__parse_cli(&cfg->mounts, arg, err, sizeof(err));
		if (ret && ret != -ENOMEM)
			pr_err("%s", err);
		return ret;
	case OPT_NO_SECCOMP:
		cfg->seccomp = false;
		return 0;
	case OPT_VERBOSE:
		cfg->verbose = true;
		log__set_verbose(true);
		return 0;
	default:
		fputs(usage, stderr);
		return -EINVAL;
	}
}

static int parse_run(struct vm_config *cfg, int argc, char **argv)
{
	int opt, ret;

	optind = 1;
	while ((opt = getopt_long(argc, argv, "+hv", run_options, NULL)) !=
	       -1) {
		if (opt == OPT_HELP) {
			fputs(usage, stdout);
			exit(0);
		}
		ret = apply_option(cfg, opt, optarg);
		if (ret)
			return ret;
	}
	if (optind < argc && strcmp(argv[optind - 1], "--")) {
		pr_err("unexpected argument '%s' (put the guest command after "
		       "--)",
		       argv[optind]);
		return -EINVAL;
	}
	if (optind < argc)
		return config__set_argv(cfg, argv + optind, argc - optind);
	return 0;
}

/*
 * start --detach: the VM runs in a child in its own session; the parent
 * waits for one byte the child writes once the guest agent answers (or
 * for the pipe to close: the start failed, and the child said why) and
 * exits. Returns in the child with *ready_fd set; exits in the parent.
 */
static int detach(const struct vm_config *cfg, int *ready_fd)
{
	int pipefd[2], status;
	char byte;
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
	if (read(pipefd[0], &byte, 1) == 1)
		exit(0);
	if (cfg->pid_file)
		unlink(cfg->pid_file);
	if (waitpid(pid, &status, 0) == pid && WIFEXITED(status) &&
	    WEXITSTATUS(status))
		exit(WEXITSTATUS(status));
	exit(VMM_EXIT_VMM_ERROR);
}

static int cmd_run(int argc, char **argv, bool start)
{
	char err[CONFIG_ERR_LEN];
	struct vm_config cfg;
	int ret, ready_fd = -1;
	struct vm *vm;

	config__init(&cfg);
	cfg.start = start;
	ret = parse_run(&cfg, argc, argv);
	if (ret)
		goto out;
	ret = config__validate(&cfg, err, sizeof(err));
	if (ret) {
		pr_err("%s", err);
		goto out;
	}
	if (cfg.detach && detach(&cfg, &ready_fd))
		goto out;
	ret = vm__create(&vm, &cfg);
	if (ret)
		goto out;
	vm->ready_fd = ready_fd;
	ret = vm__run(vm);
	vm__destroy(vm);
	config__free(&cfg);
	return ret;
out:
	if (ready_fd >= 0)
		close(ready_fd);
	config__free(&cfg);
	return VMM_EXIT_VMM_ERROR;
}

int main(int argc, char **argv)
{
	if (argc < 2) {
		fputs(usage, stderr);
		return VMM_EXIT_VMM_ERROR;
	}
	if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
		fputs(usage, stdout);
		return 0;
	}
	if (!strcmp(argv[1], "--version")) {
		printf("vmm (Kiln) %s\n", KILN_VERSION);
		return 0;
	}
	if (!strcmp(argv[1], "run"))
		return cmd_run(argc - 1, argv + 1, false);
	if (!strcmp(argv[1], "start"))
		return cmd_run(argc - 1, argv + 1, true);
	pr_err("unknown command '%s' (try vmm --help)", argv[1]);
	return VMM_EXIT_VMM_ERROR;
}
