// SPDX-License-Identifier: GPL-2.0
/*
 * Running the VM that vm__create built: the device threads and the vCPUs
 * start under the seccomp filter, the main thread runs its event loop
 * (host signals, stdin for the console, halt probes, vCPU wakeups, the
 * exit event) until something stops the VM, then everything is joined
 * and the stop reason becomes the exit code. The loop owns the VM's
 * lifecycle (vmm/vm-state.h): vCPUs, devices and the control API only
 * report an exit; the move to STOPPING is made here. vm.pause and
 * vm.resume, the other transitions the control API asks for, are here
 * too.
 */
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/signalfd.h>
#include <time.h>
#include <unistd.h>

#include "devices/console.h"
#include "devices/virtio/device.h"
#include "lib/compiler.h"
#include "lib/evloop.h"
#include "lib/resident.h"
#include "lib/thread-filter.h"
#include "vmm/api.h"
#include "vmm/baseline-vm.h"
#include "vmm/console-log.h"
#include "vmm/control.h"
#include "vmm/seccomp.h"
#include "vmm/trace-startup.h"
#include "vmm/vcpu.h"
#include "vmm/vm-metrics.h"
#include "vmm/vm-run.h"
#include "vmm/vm-state.h"
#include "vmm/vm.h"

#define RING_ENTRIES 16 /* struct loop's sources, all in flight at once */
#define STDIN_CHUNK  4096

/* ---- running ------------------------------------------------------------ */

/*
 * The loop's own reasons to stop (a signal, a power off, a deadline): the
 * reason recorded as any reported one is (the first wins), and STOPPING
 * now; VM_STOP_NONE: the one reported already. Main thread only.
 */
static void stop(struct vm *vm, enum vm_stop_reason reason, int status,
		 const char *detail)
{
	if (reason != VM_STOP_NONE)
		vm_state__report_exit(&vm->lc, reason, status, detail);
	if (vm_state__stop(&vm->lc))
		pr_debug("VM state: cannot stop from %s",
			 vm_state__name(vm_state__get(&vm->lc)));
}

#define HALT_PROBE_NS 1000000000LL /* once a second */
/* A vCPU thread that ran more than this since the last round is working. */
#define HALT_PROBE_BUSY_NS (HALT_PROBE_NS / 10)
#define HALT_SNAPSHOT_MS   200 /* for every vCPU to park */

/*
 * --die-with-parent: once the parent exited, the guest has this long to
 * power off through its agent (vm.shutdown's path) before the VM is
 * stopped; the bound Documentation/cli.md gives is built on it.
 */
#define PARENT_GONE_GRACE_MS 5000LL
#define PARENT_GONE	     "the parent process exited (--die-with-parent)"

/* The main thread's event loop: its sources and their buffers. */
struct loop {
	struct evloop ev;
	struct vm *vm;
	int sig_fd;
	int parent_fd; /* --die-with-parent: the parent's pidfd; -1: none */
	struct ev_source wake, exit, signal, input, space, probe, metrics;
	struct ev_source parent, parent_grace;
	uint64_t wake_buf, exit_buf, space_buf;
	struct signalfd_siginfo si;
	struct __kernel_timespec probe_ts, metrics_ts, grace_ts;
	uint8_t in_buf[STDIN_CHUNK];
	bool stdin_armed, space_armed;
	/*
	 * --ready-timeout-ms: CLOCK_MONOTONIC ms by which the guest agent
	 * must have answered (0: no limit), and whether the state was
	 * logged as overdue (the next probe stops a VM still booting).
	 */
	long long ready_deadline_ms;
	bool ready_reported;
};

/*
 * The ring is sized for every read we keep in flight at once. Offset -1:
 * read at the file position, so a regular file on stdin advances.
 */
static void arm_read(struct loop *l, struct ev_source *src, int fd, void *buf,
		     size_t len)
{
	evloop__read(&l->ev, src, fd, buf, len, (uint64_t)-1);
}

static void maybe_arm_stdin(struct vm *vm, struct loop *l)
{
	size_t room;

	if (l->stdin_armed || !console__wants_input(vm->console))
		return;
	room = console__input_room(vm->console);
	if (room) {
		arm_read(l, &l->input, STDIN_FILENO, l->in_buf,
			 room < sizeof(l->in_buf) ? room : sizeof(l->in_buf));
		l->stdin_armed = true;
	} else if (!l->space_armed) {
		arm_read(l, &l->space, vm->space_fd, &l->space_buf,
			 sizeof(l->space_buf));
		l->space_armed = true;
	}
}

static void arm_probe(struct loop *l)
{
	evloop__timeout(&l->ev, &l->probe, &l->probe_ts, HALT_PROBE_NS);
}

/* --metrics: the next line in metrics_interval_ms (config-checked). */
static void arm_metrics(struct loop *l)
{
	if (!l->vm->metrics_file)
		return;
	evloop__timeout(&l->ev, &l->metrics, &l->metrics_ts,
			(long long)l->vm->cfg->metrics_interval_ms * 1000000LL);
}

/*
 * See struct vm: start a round, let every vCPU look at itself. Only when
 * every vCPU thread was quiet since the last round: halted for good, a
 * vCPU costs no CPU time, while a kick of a working one is an exit from
 * the guest at an arbitrary point, for nothing.
 */
static void probe_vcpus(struct vm *vm)
{
	unsigned int i;

	enum vm_state st = vm_state__get(&vm->lc);

	if ((st != VM_STATE_BOOTING && st != VM_STATE_RUNNING) ||
	    !vcpu__all_quiet(vm, HALT_PROBE_BUSY_NS))
		return;

	if (atomic_fetch_add(&vm->probe_round, 1) + 1 == 0)
		atomic_store(&vm->probe_round, 1); /* 0 means "none" */
	for (i = 0; i < vm->nr_vcpus; i++)
		vcpu__kick(vm->vcpus[i]);
}

/* A probe round saw every vCPU dead: believe it only on a snapshot. */
static void confirm_halt(struct vm *vm)
{
	if (!atomic_exchange(&vm->halt_suspect, 0) || vm_state__ending(&vm->lc))
		return;
	if (vcpu__snapshot_all_dead(vm, HALT_SNAPSHOT_MS))
		stop(vm, VM_STOP_GUEST_HALT, 0, NULL);
}

/* vm.shutdown asked the guest to power off: give it so long. */
static void shutdown_overdue(struct vm *vm)
{
	long long deadline = atomic_load(&vm->lc.shutdown_deadline);
	struct timespec now;

	if (!deadline)
		return;
	clock_gettime(CLOCK_MONOTONIC, &now);
	if (now.tv_sec >= deadline)
		stop(vm, VM_STOP_SHUTDOWN, 0, NULL);
}

/*
 * --ready-timeout-ms: the guest agent has not answered in time. Once
 * overdue, every vCPU and device says where it is (the vCPUs on their
 * next kick, as for SIGUSR2); a probe later the VM stops, unless the
 * agent answered meanwhile (the VM left BOOTING).
 */
static void ready_overdue(struct loop *l)
{
	struct vm *vm = l->vm;
	struct timespec now;

	if (!l->ready_deadline_ms)
		return;
	if (l->ready_reported) {
		l->ready_deadline_ms = 0;
		if (!vm_state__report_boot_timeout(
			    &vm->lc, "the guest agent never answered"))
			return;
		pr_err("the guest agent did not answer within %llu ms of the "
		       "start (--ready-timeout-ms); stopping the VM",
		       (unsigned long long)vm->cfg->ready_timeout_ms);
		stop(vm, VM_STOP_NONE, 0, NULL); /* reported just above */
		return;
	}
	clock_gettime(CLOCK_MONOTONIC, &now);
	if (now.tv_sec * 1000LL + now.tv_nsec / 1000000 < l->ready_deadline_ms)
		return;
	if (!vm_state__booting(&vm->lc)) {
		l->ready_deadline_ms = 0; /* it answered */
		return;
	}
	l->ready_reported = true;
	pr_warn("the guest agent has not answered %llu ms after the start; "
		"the state of the virtio devices and vCPUs:",
		(unsigned long long)vm->cfg->ready_timeout_ms);
	vm__report_virtio(vm);
	vcpu__report_all(vm);
}

/* --ready-timeout-ms runs from the start of the control API. */
static void arm_ready(struct loop *l)
{
	struct timespec now;

	if (!l->vm->api || !l->vm->cfg->ready_timeout_ms)
		return;
	clock_gettime(CLOCK_MONOTONIC, &now);
	l->ready_deadline_ms = now.tv_sec * 1000LL + now.tv_nsec / 1000000 +
			       (long long)l->vm->cfg->ready_timeout_ms;
}

static void wake_done(void *arg, int res)
{
	struct loop *l = arg;

	pr_debug("event wake: %d", res);
	arm_read(l, &l->wake, l->vm->event_fd, &l->wake_buf,
		 sizeof(l->wake_buf));
	confirm_halt(l->vm);
}

/*
 * The exit event (vmm/vm-state.h): a vCPU, a device or the control API
 * reported why the VM should stop; the loop makes it STOPPING and ends.
 */
static void exit_done(void *arg, int res)
{
	struct loop *l = arg;

	pr_debug("event exit: %d", res);
	if (res == -EINTR || res == -EAGAIN) {
		arm_read(l, &l->exit, l->vm->lc.exit_fd, &l->exit_buf,
			 sizeof(l->exit_buf));
		return;
	}
	if (res == sizeof(l->exit_buf)) {
		/* The reason is the one reported. */
		stop(l->vm, VM_STOP_NONE, 0, NULL);
		return;
	}
	/* Unreadable, the exit event is lost: stop rather than spin. */
	pr_err("the exit event: %s", strerror(res < 0 ? -res : EIO));
	stop(l->vm, VM_STOP_ERROR, 0, "the exit event failed");
}

static void signal_done(void *arg, int res)
{
	struct loop *l = arg;

	pr_debug("event signal: %d", res);
	if (res == sizeof(l->si) && l->si.ssi_signo != SIGUSR2) {
		stop(l->vm, VM_STOP_SIGNAL, l->si.ssi_signo, NULL);
		return;
	}
	/* SIGUSR2: what each device and its rings look like right now. */
	if (res == sizeof(l->si)) {
		pr_info("SIGUSR2: the state of the virtio devices and vCPUs");
		vm__report_virtio(l->vm);
		vm_net__report(l->vm);
		vcpu__report_all(l->vm);
	}
	arm_read(l, &l->signal, l->sig_fd, &l->si, sizeof(l->si));
}

static void input_done(void *arg, int res)
{
	struct loop *l = arg;

	pr_debug("event stdin: %d", res);
	l->stdin_armed = false;
	if (res == -EAGAIN || res == -EINTR)
		return;
	/* An error on stdin is its end, for the guest. */
	console__input(l->vm->console, l->in_buf, res > 0 ? res : 0);
}

static void space_done(void *arg, int res)
{
	struct loop *l = arg;

	pr_debug("event space: %d", res);
	l->space_armed = false;
}

static void probe_done(void *arg, int res)
{
	struct loop *l = arg;

	pr_debug("event probe: %d", res);
	probe_vcpus(l->vm);
	arm_probe(l);
	shutdown_overdue(l->vm);
	ready_overdue(l);
}

/*
 * --die-with-parent: the pidfd is readable once the parent exited (a
 * zombie counts), whoever reaps it. The guest is asked to power off as
 * vm.shutdown asks it, and stopped PARENT_GONE_GRACE_MS later if it has
 * not; without a control socket there is no agent to ask: stopped now.
 * A pidfd that cannot be polled is taken for a parent gone: the VM must
 * not outlive it unwatched.
 */
static void parent_done(void *arg, int res)
{
	struct loop *l = arg;
	struct vm *vm = l->vm;

	pr_debug("event parent: %d", res);
	if (res < 0)
		pr_err("--die-with-parent: polling the parent's pidfd: %s; "
		       "shutting the VM down",
		       strerror(-res));
	else
		pr_warn("%s: shutting the VM down", PARENT_GONE);
	if (!vm->api) {
		stop(vm, VM_STOP_SHUTDOWN, 0, PARENT_GONE);
		return;
	}
	api__shutdown(vm->api);
	evloop__timeout(&l->ev, &l->parent_grace, &l->grace_ts,
			PARENT_GONE_GRACE_MS * 1000000LL);
}

static void parent_grace_done(void *arg, int res)
{
	struct loop *l = arg;

	pr_debug("event parent grace: %d", res);
	stop(l->vm, VM_STOP_SHUTDOWN, 0, PARENT_GONE);
}

static void metrics_done(void *arg, int res)
{
	struct loop *l = arg;

	pr_debug("event metrics: %d", res);
	vm__metrics_write(l->vm);
	arm_metrics(l);
}

/* After each round: stop once asked to, or see to host input. */
static bool loop_end(void *arg)
{
	struct loop *l = arg;

	if (vm_state__stopping(&l->vm->lc))
		evloop__stop(&l->ev);
	else
		maybe_arm_stdin(l->vm, l);
	return false;
}

static const struct evloop_ops main_loop_ops = {
	.end = loop_end,
};

static int loop_init(struct loop **out, struct vm *vm, int sig_fd,
		     int parent_fd)
{
	static const uint8_t opcodes[] = { IORING_OP_TIMEOUT,
					   IORING_OP_POLL_ADD };
	static const struct evloop_params lp = {
		.sq_entries = RING_ENTRIES,
		.opcodes = opcodes,
		.nr_opcodes = ARRAY_SIZE(opcodes),
	};
	struct loop *l = calloc(1, sizeof(*l));
	int ret;

	if (!l)
		return -ENOMEM;
	evloop__init(&l->ev, "main loop");
	ret = evloop__open(&l->ev, &lp);
	if (ret) {
		pr_err("io_uring_queue_init: %s", strerror(-ret));
		evloop__exit(&l->ev);
		free(l);
		return ret;
	}
	l->vm = vm;
	l->sig_fd = sig_fd;
	l->parent_fd = parent_fd;
	l->wake = (struct ev_source){ .fn = wake_done, .arg = l };
	l->exit = (struct ev_source){ .fn = exit_done, .arg = l };
	l->signal = (struct ev_source){ .fn = signal_done, .arg = l };
	l->input = (struct ev_source){ .fn = input_done, .arg = l };
	l->space = (struct ev_source){ .fn = space_done, .arg = l };
	l->probe = (struct ev_source){ .fn = probe_done, .arg = l };
	l->metrics = (struct ev_source){ .fn = metrics_done, .arg = l };
	l->parent = (struct ev_source){ .fn = parent_done, .arg = l };
	l->parent_grace =
		(struct ev_source){ .fn = parent_grace_done, .arg = l };
	*out = l;
	return 0;
}

static void loop_exit(struct loop *l)
{
	if (!l)
		return;
	evloop__exit(&l->ev);
	free(l);
}

static void main_loop(struct vm *vm, struct loop *l)
{
	arm_read(l, &l->wake, vm->event_fd, &l->wake_buf, sizeof(l->wake_buf));
	arm_read(l, &l->exit, vm->lc.exit_fd, &l->exit_buf,
		 sizeof(l->exit_buf));
	arm_read(l, &l->signal, l->sig_fd, &l->si, sizeof(l->si));
	arm_probe(l);
	arm_metrics(l);
	if (l->parent_fd >= 0)
		evloop__poll(&l->ev, &l->parent, l->parent_fd, POLLIN);
	maybe_arm_stdin(vm, l);
	if (evloop__run(&l->ev, &main_loop_ops, l))
		stop(vm, VM_STOP_ERROR, 0, "event loop failed");
}

static int exit_code(const struct vm *vm)
{
	const struct vm_lifecycle *lc = &vm->lc;

	switch (atomic_load(&lc->stop_reason)) {
	case VM_STOP_GUEST_EXIT:
		return lc->stop_status;
	case VM_STOP_GUEST_HALT:
		/* The guest powered off or halted without ACPI: clean. */
		pr_info("guest halted every vCPU with interrupts off: powered "
			"off");
		return 0;
	case VM_STOP_GUEST_RESET:
		pr_err("%s before reporting a status (panic, triple fault "
		       "or reboot)",
		       lc->stop_detail);
		return VMM_EXIT_GUEST_CRASH;
	case VM_STOP_SIGNAL:
		pr_err("stopped by signal %d (%s)", lc->stop_status,
		       strsignal(lc->stop_status));
		return 128 + lc->stop_status;
	case VM_STOP_SHUTDOWN:
		if (lc->stop_detail)
			pr_warn("%s: stopped the VM", lc->stop_detail);
		else
			pr_warn("vm.shutdown: the guest did not power off; "
				"stopped it");
		return 0;
	default:
		return VMM_EXIT_VMM_ERROR;
	}
}

/*
 * The thread types this VM starts, so that only their filters are
 * compiled: the main loop and the vCPUs; each attached virtio device's
 * loop (its slot's type, virtio-fs backends' threads included); the
 * control API's; the egress proxy's and the resolver's, and the proxy's
 * netns thread. One missed fails closed (vmm/seccomp.h).
 */
static unsigned int thread_types(const struct vm *vm)
{
	unsigned int t = 1U << SECCOMP_THREAD_MAIN | 1U << SECCOMP_THREAD_VCPU;

	for (unsigned int i = 0; i < VIRTIO_MMIO_SLOTS; i++)
		if (vm->virtio[i].ops)
			t |= 1U << vm->virtio[i].ops->thread;
	if (vm->api)
		t |= 1U << SECCOMP_THREAD_API;
	if (vm->net.proxy || vm->net.dns)
		t |= 1U << SECCOMP_THREAD_EGRESS | 1U << SECCOMP_THREAD_NETNS;
	return t;
}

/*
 * Everything that needs syscalls the running monitor may not make, and
 * the seccomp filters each thread installs when it starts.
 */
static int prepare_run(struct vm *vm, int sig_fd, int parent_fd,
		       struct loop **l)
{
	struct seccomp_needs needs = { 0 };
	unsigned int i;
	int ret;

	ret = vcpu__setup_kick();
	if (ret) {
		pr_err("installing the vCPU kick handler: %s", strerror(-ret));
		return ret;
	}
	ret = loop_init(l, vm, sig_fd, parent_fd);
	if (ret)
		return ret;
	if (!vm->cfg->seccomp)
		return 0;
	for (i = 0; i < vm->cfg->mounts.nr; i++)
		needs.fs_bind |= vm->cfg->mounts.m[i].type == MOUNT_BIND;
	needs.net = vm_net__has_tap(vm);
	needs.console_log = vm->console_log != NULL;
	needs.console_log_dirfd = console_log__dirfd(vm->console_log);
	needs.snapshot = vm->api != NULL;
	needs.baseline = vm__baseline_needs_publish(vm);
	needs.block_store = vm->store_cow != NULL;
	needs.threads = thread_types(vm);
	ret = seccomp__build(&vm->seccomp, &needs);
	if (ret)
		pr_err("building the seccomp filters: %s", strerror(-ret));
	return ret;
}

/*
 * Device threads start, each under its type's filter from its first
 * instruction, before any vCPU: every attached virtio device's, in slot
 * order (vmm/virtio-attach.h), then the network's.
 */
static int start_devices(struct vm *vm, const struct control_ops *ops)
{
	const struct sock_fprog *filters[SECCOMP_NR_THREADS];
	const struct sock_fprog *egress =
		seccomp__filter(vm->seccomp, SECCOMP_THREAD_EGRESS);
	int ret;

	for (unsigned int t = 0; t < SECCOMP_NR_THREADS; t++)
		filters[t] = seccomp__filter(vm->seccomp, t);
	ret = virtio_slots__start(vm->virtio, filters);
	if (ret)
		return ret;
	ret = vm_net__start(vm, egress);
	if (ret)
		return ret;
	return control__start(vm, ops);
}

/*
 * The socket files the VM listens on go with it: the vsock device's
 * here, while its listener still holds the path (so the file is this
 * VM's, not a later vmm's); the control socket's in api__destroy.
 */
static void unlink_sockets(const struct vm *vm)
{
	const char *path = vm->cfg->vsock.socket_path;

	if (path && unlink(path) && errno != ENOENT)
		pr_warn("--vsock-socket %s: removing it: %s", path,
			strerror(errno));
}

int vm__run(struct vm *vm, const struct control_ops *ops, int parent_fd)
{
	struct loop *l = NULL;
	sigset_t mask, old;
	unsigned int i;
	int sig_fd, ret;

	/* Host signals arrive through the ring; vCPUs take only kicks. */
	sigemptyset(&mask);
	sigaddset(&mask, SIGINT);
	sigaddset(&mask, SIGTERM);
	sigaddset(&mask, SIGHUP);
	sigaddset(&mask, SIGQUIT);
	sigaddset(&mask, SIGUSR1);
	sigaddset(&mask, SIGUSR2);
	pthread_sigmask(SIG_BLOCK, &mask, &old);
	signal(SIGPIPE, SIG_IGN);
	sigdelset(&mask, SIGUSR1);
	sig_fd = signalfd(-1, &mask, SFD_CLOEXEC);
	if (sig_fd < 0) {
		ret = -errno;
		pr_err("signalfd: %s", strerror(errno));
		goto out_mask;
	}
	ret = prepare_run(vm, sig_fd, parent_fd, &l);
	if (!ret)
		ret = start_devices(vm, ops);
	if (ret)
		goto out_loop;
	arm_ready(l);

	for (i = 0; i < vm->nr_vcpus; i++) {
		ret = vcpu__start(vm->vcpus[i]);
		if (ret) {
			pr_err("vcpu%u: starting its thread: %s", i,
			       strerror(-ret));
			stop(vm, VM_STOP_ERROR, 0, "vCPU start failed");
			break;
		}
	}
	/* Last, so that no thread inherits it; the guest waits for it. */
	ret = thread_filter__install(
		seccomp__filter(vm->seccomp, SECCOMP_THREAD_MAIN));
	if (ret) {
		pr_err("installing the main thread's seccomp filter: %s",
		       strerror(-ret));
		stop(vm, VM_STOP_ERROR, 0, "seccomp failed");
	}
	/*
	 * The vCPUs enter the guest: BOOTING until the guest agent answers,
	 * if there is one. Stopping already: they leave without entering.
	 */
	startup_trace__mark(vm->trace, TRACE_RELEASED);
	/* What start-up alone touched or freed leaves the RSS (resident.h). */
	resident__drop_text();
	resident__trim_heap();
	if (!vm_state__stopping(&vm->lc) &&
	    vm_state__set(&vm->lc,
			  vm->api ? VM_STATE_BOOTING : VM_STATE_RUNNING))
		stop(vm, VM_STOP_ERROR, 0, "VM state");
	if (!vm_state__stopping(&vm->lc))
		main_loop(vm, l);
	startup_trace__mark(vm->trace, TRACE_POWER_OFF);

	/*
	 * STOPPING woke every vCPU parked by vm.pause (they wait on the
	 * lifecycle's condition, not for a kick); the others are kicked.
	 */
	for (i = 0; i < vm->nr_vcpus; i++)
		vcpu__kick(vm->vcpus[i]);
	for (i = 0; i < vm->nr_vcpus; i++)
		vcpu__join(vm->vcpus[i]);
	if (vm_state__set(&vm->lc, VM_STATE_STOPPED))
		pr_debug("VM state: not stopping when joined");
	ret = exit_code(vm);
	/* The last line: the counters as the vCPUs left them. */
	vm__metrics_write(vm);
	control__stopped(vm, ret);
out_loop:
	/* Started threads keep their filters; the programs are copies. */
	seccomp__destroy(vm->seccomp);
	vm->seccomp = NULL;
	loop_exit(l);
	close(sig_fd);
	unlink_sockets(vm);
out_mask:
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	return ret < 0 ? VMM_EXIT_VMM_ERROR : ret;
}
