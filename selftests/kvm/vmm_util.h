/* SPDX-License-Identifier: GPL-2.0 */
/*
 * Running the vmm from KVM selftests: the guest build's paths, one boot
 * to completion (BOOT), and a boot in the background (vmm_start). KILN_VMM
 * names the vmm (build/vmm), KILN_GUEST_DIR the guest build (build/guest)
 * and KILN_IMAGES_DIR the image descriptors (build/images).
 */
#ifndef KILN_SELFTESTS_VMM_UTIL_H
#define KILN_SELFTESTS_VMM_UTIL_H

#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "selftests/kselftest.h"
#include "selftests/kvm/harness_watch.h"
#include "selftests/kvm/test_tmp.h"
#include "selftests/spawn.h"

#define BOOT_TIMEOUT	     300 /* seconds; nested virtualisation is slow */
#define VMM_EXIT_GUEST_CRASH 123
#define VMM_EXIT_VMM_ERROR   125

static inline const char *env_or(const char *name, const char *def)
{
	const char *v = getenv(name);

	return v ? v : def;
}

struct guest {
	char vmm[256], vmlinux[256], bzimage[256], initrd[256], images[256];
};

static inline void guest_paths(struct guest *g)
{
	const char *dir = env_or("KILN_GUEST_DIR", "build/guest");

	snprintf(g->vmm, sizeof(g->vmm), "%s", env_or("KILN_VMM", "build/vmm"));
	snprintf(g->vmlinux, sizeof(g->vmlinux), "%s/vmlinux", dir);
	snprintf(g->bzimage, sizeof(g->bzimage), "%s/bzImage", dir);
	snprintf(g->initrd, sizeof(g->initrd), "%s/initramfs.cpio", dir);
	snprintf(g->images, sizeof(g->images), "%s",
		 env_or("KILN_IMAGES_DIR", "build/images"));
}

/* How a test boots: all optional, NULL-terminated lists. */
struct boot_spec {
	const char *kernel; /* default: vmlinux */
	const char
		*initrd; /* default: the guest's initramfs; "": no --initrd */
	const char *const *opts;
	const char *const *cmd;
	const char *stdin_path;
};

/* argv for `vmm run --kernel K --initrd I opts... -- cmd...`. */
static inline void boot_argv(const struct guest *g, const struct boot_spec *s,
			     const char *argv[64])
{
	int i = 0, j;

	argv[i++] = g->vmm;
	argv[i++] = "run";
	argv[i++] = "--kernel";
	argv[i++] = s->kernel ? s->kernel : g->vmlinux;
	/* "" for none: the vmm's default (the kernel's initramfs.cpio). */
	if (!s->initrd || s->initrd[0]) {
		argv[i++] = "--initrd";
		argv[i++] = s->initrd ? s->initrd : g->initrd;
	}
	for (j = 0; s->opts && s->opts[j] && i < 40; j++)
		argv[i++] = s->opts[j];
	if (s->cmd) {
		argv[i++] = "--";
		for (j = 0; s->cmd[j] && i < 63; j++)
			argv[i++] = s->cmd[j];
	}
	argv[i] = NULL;
}

/*
 * Inside the nested harness (tools/vmtest: KVM on QEMU's emulated SVM) a
 * vCPU of ours now and then triple-faults while idle, on the delivery of
 * a timer interrupt that the same halted vCPU took 16 ms earlier (traced:
 * Documentation/harness.md), in about 3 of 100 four-vCPU boots; the
 * harness kernel and QEMU's own guests have crashed meanwhile too. A test
 * that saw it blames the environment: if it then fails, it runs again
 * from the start (ksft_blame_environment), at most KSFT_ENVIRONMENT_RUNS
 * times in all, never outside the harness.
 */
static inline void check_harness_flake_text(const char *err)
{
	if (getenv("KILN_IN_HARNESS") && strstr(err, "guest triple-faulted"))
		ksft_blame_environment(
			"a guest vCPU triple-faulted in the nested harness");
}

static inline void check_harness_flake(const struct spawn_result *r)
{
	if (r->status == VMM_EXIT_GUEST_CRASH && r->err_len)
		check_harness_flake_text(r->err);
}

/*
 * Boots to completion. The guest is a precondition, not a skip: without
 * it the test fails and says why. Returns -1 when the test is over.
 */
static inline int boot_spec(struct __test_metadata *_metadata,
			    const struct boot_spec *s, struct spawn_result *r)
{
	const char *argv[64];
	struct guest g;
	struct stat st;

	guest_paths(&g);
	if (access("/dev/kvm", R_OK | W_OK))
		SKIP(return -1,
			    "no usable /dev/kvm (run through tools/vmtest)");
	ASSERT_EQ(0, stat(g.initrd, &st)) TH_LOG("no guest: run make guest");
	boot_argv(&g, s, argv);
	ASSERT_EQ(0, spawn__run(argv, s->stdin_path, r));
	check_harness_flake(r);
	TH_LOG("exit %d, stdout: %.300s", r->status, r->out);
	if (r->err_len)
		TH_LOG("stderr: %.600s", r->err);
	return 0;
}

#define BOOT_SPEC(spec, r)                         \
	do {                                       \
		if (boot_spec(_metadata, spec, r)) \
			return;                    \
	} while (0)

#define BOOT(kernel_, opts_, cmd_, in_, r)                    \
	BOOT_SPEC((&(struct boot_spec){ .kernel = kernel_,    \
					.opts = opts_,        \
					.cmd = cmd_,          \
					.stdin_path = in_ }), \
		  r)

#define ARGS(...) ((const char *const[]){ __VA_ARGS__, NULL })

/* Boots in the background, stdout to out_fd, stdin and stderr nowhere. */
static inline pid_t vmm_start(const struct boot_spec *s, int out_fd)
{
	const char *argv[64];
	struct guest g;
	pid_t pid;

	guest_paths(&g);
	boot_argv(&g, s, argv);
	pid = fork();
	if (pid == 0) {
		int null = open("/dev/null", O_RDWR);

		dup2(null, 0);
		dup2(out_fd, 1);
		dup2(null, 2);
		execvp(argv[0], (char *const *)argv);
		_exit(127);
	}
	return pid;
}

static inline pid_t start_vmm_stdout(const char *const cmd[], int out_fd)
{
	return vmm_start(&(struct boot_spec){ .cmd = cmd }, out_fd);
}

/* argv in the background: stdin /dev/null, stdout and stderr to @log. */
static inline pid_t spawn_logged(const char *const argv[], const char *log)
{
	pid_t pid = fork();

	if (pid == 0) {
		int null = open("/dev/null", O_RDONLY);
		int out = open(log, O_WRONLY | O_CREAT | O_TRUNC, 0644);

		dup2(null, 0);
		dup2(out, 1);
		dup2(out, 2);
		execvp(argv[0], (char *const *)argv);
		_exit(127);
	}
	return pid;
}

/* A vmm's output file (its first MiB), malloc'd; NULL if unreadable. */
static inline char *log_text(const char *path)
{
	char *text = calloc(1, 1 << 20);
	size_t n = 0;
	FILE *f;

	f = fopen(path, "r");
	if (!f || !text) {
		if (f)
			fclose(f);
		free(text);
		return NULL;
	}
	n = fread(text, 1, (1 << 20) - 1, f);
	fclose(f);
	text[n] = '\0';
	return text;
}

/*
 * The end of a vmm's output file (spawn_logged) into the TAP log, for a
 * test that failed; a triple fault said there blames the harness
 * (check_harness_flake).
 */
static inline void vmm_log_show(struct __test_metadata *_metadata,
				const char *path)
{
	char buf[2048];
	FILE *f = fopen(path, "r");
	size_t n;

	if (!f)
		return;
	fseek(f, 0, SEEK_END);
	if (ftell(f) > (long)sizeof(buf) - 1)
		fseek(f, -(long)sizeof(buf) + 1, SEEK_END);
	else
		fseek(f, 0, SEEK_SET);
	n = fread(buf, 1, sizeof(buf) - 1, f);
	buf[n] = 0;
	fclose(f);
	TH_LOG("vmm output (end):\n%s", buf);
	check_harness_flake_text(buf);
}

/*
 * Waits at most secs for the vmm *pid (its output in log) to answer
 * vm.status on sock with a ready agent. Otherwise the TAP log says why:
 * the vmm's exit status or signal and its output, or, when it is still
 * running, its devices' and vCPUs' state (SIGUSR2 writes it to the log).
 * *pid is 0 once the vmm is reaped.
 */
static inline bool vmm_wait_ready(struct __test_metadata *_metadata, pid_t *pid,
				  const char *sock, const char *log, int secs)
{
	const char *vmmctl = env_or("KILN_VMMCTL", "build/vmmctl");
	const char *argv[] = { vmmctl, "status", sock, NULL };
	struct timespec t0, now;
	struct spawn_result r;
	int status;

	clock_gettime(CLOCK_MONOTONIC, &t0);
	do {
		if (!spawn__run(argv, NULL, &r) && !r.status &&
		    strstr(r.out, "\"agent\": \"ready\""))
			return true;
		if (waitpid(*pid, &status, WNOHANG) == *pid) {
			TH_LOG("vmm %d ended before its agent was ready: %s %d",
			       (int)*pid,
			       WIFSIGNALED(status) ? "signal" : "exit",
			       WIFSIGNALED(status) ? WTERMSIG(status) :
						     WEXITSTATUS(status));
			*pid = 0;
			vmm_log_show(_metadata, log);
			return false;
		}
		usleep(100000);
		clock_gettime(CLOCK_MONOTONIC, &now);
	} while (now.tv_sec - t0.tv_sec < secs);
	TH_LOG("vmm %d: agent not ready after %d s; its state follows",
	       (int)*pid, secs);
	/* A guest spinning in the nested harness (harness_watch.h). */
	if (getenv("KILN_IN_HARNESS")) {
		char why[256];

		if (harness_vmm_spinning(*pid, why, sizeof(why)))
			ksft_blame_environment(why);
	}
	kill(*pid, SIGUSR2);
	usleep(1000000);
	vmm_log_show(_metadata, log);
	return false;
}

/* The exit code (128+N for signal N), or -1 after killing it at secs. */
static inline int wait_exit(pid_t pid, int secs)
{
	int status, i;

	for (i = 0; i < secs * 10; i++) {
		if (waitpid(pid, &status, WNOHANG) == pid)
			return WIFEXITED(status) ? WEXITSTATUS(status) :
						   128 + WTERMSIG(status);
		usleep(100000);
	}
	kill(pid, SIGKILL);
	waitpid(pid, &status, 0);
	return -1;
}

#endif
