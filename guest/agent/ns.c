// SPDX-License-Identifier: GPL-2.0
/*
 * kiln-agent-ns --listen-fd N [--cwd DIR] [-- COMMAND [ARG...]]: PID 1 of
 * a namespace sandbox (vmm --isolation namespace, vmm/isolate-ns.c,
 * Documentation/design.md "Namespace isolation"). What init is to a VM:
 * it serves the guest agent (agent__serve, the same protocol) on the
 * listening Unix socket the vmm made and passed as fd N, instead of
 * vsock; restarts the agent should it die; runs COMMAND, if given, on
 * the vmm's stdio and ends with its status; reaps every orphan; and ends
 * (status 0) when the agent is asked to power off (SIGUSR2, as init) or
 * on SIGTERM. Its end ends the sandbox: the kernel kills every process
 * of a PID namespace whose PID 1 exits.
 *
 * Built static (the image's libc is not the host's): the vmm runs it
 * from a descriptor opened before the switch to the image's root.
 */
#include <errno.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "guest/agent/agent.h"
#include "guest/agent/proc.h"

#define ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))

/* A dying agent is restarted at most once per this long (as init). */
#define AGENT_RESTART_MS 200

static volatile sig_atomic_t shutdown_requested;

static void on_shutdown(int sig)
{
	shutdown_requested = 1;
}

static void on_sigchld(int sig)
{
	/* Only there to end sigsuspend(); the loop reaps. */
}

struct ns_agent {
	int listen_fd;
	const char *cwd;
	pid_t pid; /* 0 while none runs */
	struct timespec started;
};

static void __attribute__((noreturn)) usage(void)
{
	fprintf(stderr, "usage: kiln-agent-ns --listen-fd N [--cwd DIR] "
			"[-- COMMAND [ARG...]]\n");
	exit(PROC_STATUS_INIT_FAILED);
}

static void reset_signals(void)
{
	static const int sigs[] = { SIGUSR2, SIGTERM, SIGCHLD };
	sigset_t none;

	for (size_t i = 0; i < ARRAY_SIZE(sigs); i++)
		signal(sigs[i], SIG_DFL);
	sigemptyset(&none);
	sigprocmask(SIG_SETMASK, &none, NULL);
}

static void __attribute__((noreturn)) agent_child(const struct ns_agent *a)
{
	const struct agent_config cfg = { .poweroff_pid = 1,
					  .default_cwd = a->cwd };

	reset_signals();
	setsid();
	/* agent__serve() returns only on a fatal error, which it printed. */
	_exit(agent__serve(a->listen_fd, &cfg) ? 1 : 0);
}

static int64_t ms_since(const struct timespec *t)
{
	struct timespec now;

	clock_gettime(CLOCK_MONOTONIC, &now);
	return (int64_t)(now.tv_sec - t->tv_sec) * 1000 +
	       (now.tv_nsec - t->tv_nsec) / 1000000;
}

static void agent_start(struct ns_agent *a)
{
	struct timespec wait = { 0 };
	int64_t since;
	pid_t pid;

	if (a->pid > 0)
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
		agent_child(a);
	if (pid < 0)
		fprintf(stderr, "kiln-agent-ns: fork for the agent: %s\n",
			strerror(errno));
	else
		a->pid = pid;
}

static void __attribute__((noreturn))
command_child(char **argv, const char *cwd)
{
	reset_signals();
	setpgid(0, 0);
	if (cwd && chdir(cwd)) {
		fprintf(stderr, "kiln-agent-ns: cannot change to %s: %s\n", cwd,
			strerror(errno));
		_exit(PROC_STATUS_INIT_FAILED);
	}
	execvp(argv[0], argv);
	fprintf(stderr, "kiln-agent-ns: cannot execute %s: %s\n", argv[0],
		strerror(errno));
	_exit(errno == ENOENT ? 127 : 126);
}

/*
 * Reaps everything until the command (0: none) ends or a power off is
 * asked for, restarting the agent whenever it dies. The signals are
 * blocked but inside sigsuspend(), so none slips in between the check
 * and the sleep.
 */
static int serve(struct ns_agent *a, pid_t child)
{
	sigset_t none;
	int st;
	pid_t pid;

	sigemptyset(&none);
	for (;;) {
		if (shutdown_requested)
			return 0;
		agent_start(a);
		while ((pid = waitpid(-1, &st, WNOHANG)) > 0) {
			if (pid == child)
				return proc__exit_code(st);
			if (pid == a->pid)
				a->pid = 0;
		}
		if (pid < 0 && errno != ECHILD) {
			fprintf(stderr, "kiln-agent-ns: wait: %s\n",
				strerror(errno));
			return PROC_STATUS_INIT_FAILED;
		}
		if (!a->pid)
			continue;
		sigsuspend(&none);
	}
}

int main(int argc, char **argv)
{
	struct ns_agent a = { .listen_fd = -1 };
	struct sigaction sa = { .sa_handler = on_shutdown };
	char **cmd = NULL, *end;
	sigset_t block;
	pid_t child = 0;
	int i, status;
	long fd;

	for (i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--listen-fd") && i + 1 < argc) {
			errno = 0;
			fd = strtol(argv[++i], &end, 10);
			if (errno || *end || fd < 0 || fd > 1024)
				usage();
			a.listen_fd = (int)fd;
		} else if (!strcmp(argv[i], "--cwd") && i + 1 < argc) {
			a.cwd = argv[++i];
		} else if (!strcmp(argv[i], "--") && i + 1 < argc) {
			cmd = argv + i + 1;
			break;
		} else {
			usage();
		}
	}
	if (a.listen_fd < 0)
		usage();
	sigemptyset(&block);
	sigaddset(&block, SIGCHLD);
	sigaddset(&block, SIGUSR2);
	sigaddset(&block, SIGTERM);
	sigprocmask(SIG_BLOCK, &block, NULL);
	sigaction(SIGUSR2, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
	sa.sa_handler = on_sigchld;
	sigaction(SIGCHLD, &sa, NULL);
	if (cmd) {
		child = fork();
		if (child == 0)
			command_child(cmd, a.cwd);
		if (child < 0) {
			fprintf(stderr, "kiln-agent-ns: fork for %s: %s\n",
				cmd[0], strerror(errno));
			return PROC_STATUS_INIT_FAILED;
		}
	}
	status = serve(&a, child);
	/* The sandbox ends with PID 1; its processes first, so none lingers. */
	kill(-1, SIGKILL);
	while (wait(NULL) > 0 || errno == EINTR)
		;
	return status;
}
