// SPDX-License-Identifier: GPL-2.0
/*
 * The VM's control socket: the JSON-RPC API (vmm/api.h, vmm/api/) wired to this VM.
 * The API reaches the guest agent through the vsock device: each agent
 * connection is a socketpair whose far end the device treats as a host
 * client (vsock__attach_stream), the API writing "CONNECT 1024".
 *
 * vm.shutdown asks the guest to power off through the agent (POWEROFF:
 * init syncs and unmounts, then reports status 0), so a persistent root
 * disk is left clean; the API sends it without blocking its thread. A
 * guest that does not comply within CONTROL_SHUTDOWN_GRACE_S is
 * stopped, and one whose agent refuses or cannot be reached at once.
 *
 * This file calls nothing of the run loop (vm-run.c) or the builder
 * (vm.c), which call it: the VM's actions come in the control_ops given
 * at control__start, and a stop is an exit reported through the
 * lifecycle (vm-state.h), which the run loop acts on.
 */
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "devices/virtio/vsock.h"
#include "net/dns.h"
#include "net/proxy.h"
#include "net/status.h"
#include "proto/agent.h"
#include "proto/tlv.h"
#include "vmm/api.h"
#include "vmm/baseline-vm.h"
#include "vmm/control.h"
#include "vmm/trace-startup.h"
#include "vmm/facts.h"
#include "vmm/mounts.h"
#include "vmm/seccomp.h"
#include "vmm/vm-metrics.h"
#include "vmm/vm-net.h"
#include "vmm/vm-state.h"
#include "vmm/vm.h"

#define CONTROL_SHUTDOWN_GRACE_S 30  /* seconds for the guest to power off */
#define CONTROL_ERR_LEN		 256 /* one line: what failed and why */
#define CONTROL_FD_SPARE	 32  /* the monitor's own passing needs */

static int open_agent(void *opaque)
{
	struct vm *vm = opaque;
	int sv[2], ret;

	if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) < 0)
		return -errno;
	ret = vsock__attach_stream(vm->vsock, sv[1]); /* takes sv[1] */
	if (ret) {
		close(sv[0]);
		return ret;
	}
	return sv[0];
}

/*
 * vm.shutdown: the guest has CONTROL_SHUTDOWN_GRACE_S from now. The API
 * asks its agent to power off without waiting on the guest (a slow or
 * hostile agent must not hold up the control socket: api.h).
 */
static void shutdown_cb(void *opaque)
{
	struct vm *vm = opaque;
	struct timespec now;

	clock_gettime(CLOCK_MONOTONIC, &now);
	atomic_store(&vm->lc.shutdown_deadline,
		     now.tv_sec + CONTROL_SHUTDOWN_GRACE_S);
}

static void shutdown_failed_cb(void *opaque, const char *why)
{
	struct vm *vm = opaque;

	pr_warn("vm.shutdown: the guest agent did not take the power off "
		"request (%s); stopping the VM",
		why);
	vm_state__report_exit(&vm->lc, VM_STOP_SHUTDOWN, 0, NULL);
}

/*
 * A baseline's capture of a VM with mounts: the agent detached them (or
 * could not: nothing is saved), and attaches them again after this.
 */
static void capture_cb(void *opaque, int err, const char *why)
{
	struct vm *vm = opaque;

	vm->control_ops->capture(vm, err, why);
}

/*
 * The mounts could not be attached: the VM would run without them, so it
 * does not run. A restore says so as a restore error.
 */
static void mounts_failed_cb(void *opaque, const char *why)
{
	struct vm *vm = opaque;

	vm__baseline_attach_failed(vm, why);
	pr_err("the guest's mounts: %s; stopping the VM", why);
	vm_state__report_exit(&vm->lc, VM_STOP_ERROR, 0,
			      "the mounts could not be attached");
}

/*
 * What the readiness probe does with the mounts (vmm/api.h): a restore
 * attaches them (the snapshot holds none), a baseline's capture detaches
 * them around the snapshot. Their list into p, from b.
 */
static int mounts_plan(struct vm *vm, struct kiln_buf *b, struct api_params *p)
{
	int ret;

	if (!vm->cfg->mounts.nr)
		return 0;
	if (vm->restore)
		p->mounts_plan = API_MOUNTS_ATTACH;
	else if (vm__baseline_needs_publish(vm))
		p->mounts_plan = API_MOUNTS_CAPTURE;
	else
		return 0;
	ret = mounts__agent_list(&vm->cfg->mounts, b);
	if (ret) {
		pr_err("the guest's mounts for its agent: %s", strerror(-ret));
		return ret;
	}
	p->mounts = b->data;
	p->mounts_len = b->len;
	return 0;
}

static void status_cb(void *opaque, json_t *status)
{
	struct vm *vm = opaque;
	const struct vm_config *c = vm->cfg;
	static const char *const modes[] = {
		[ROOTFS_EPHEMERAL] = "ephemeral",
		[ROOTFS_READONLY] = "readonly",
		[ROOTFS_PERSISTENT] = "persistent",
		[ROOTFS_COW] = "cow",
	};

	json_object_set_new(status, "cpus", json_integer(c->nr_cpus));
	json_object_set_new(status, "memoryMiB", json_integer(c->mem_mib));
	json_object_set_new(status, "pid", json_integer(getpid()));
	if (c->rootfs.descriptor) {
		json_object_set_new(status, "rootfsMode",
				    json_string(modes[c->rootfs.mode]));
		json_object_set_new(status, "rootfsImage",
				    json_string(vm->rootfs.name));
	}
	/* The block store's failures (each a guest I/O error too). */
	if (vm->store_cow)
		json_object_set_new(
			status, "rootfsStore",
			json_pack("{sI sI}", "errors",
				  (json_int_t)store_cow__errors(vm->store_cow),
				  "dirtyBytes",
				  (json_int_t)store_cow__dirty_bytes(
					  vm->store_cow)));
	json_object_set_new(status, "net", vm_net__status(&vm->net));
	if (vm->baseline)
		json_object_set_new(status, "baseline",
				    vm__baseline_status(vm));
}

static void metrics_cb(void *opaque, json_t *metrics)
{
	vm__metrics_fill(opaque, metrics);
}

static int set_policy_cb(void *opaque, json_t *policy, char *err, size_t len)
{
	struct vm *vm = opaque;
	int ret;

	ret = vm->control_ops->set_net_policy(vm, policy, err, len);
	if (!ret)
		pr_info("net.setPolicy: the network policy was replaced");
	return ret;
}

static int check_flow_cb(void *opaque, const struct api_flow_check *f,
			 json_t **out, char *err, size_t len)
{
	struct net_decision d;
	struct vm *vm = opaque;
	int ret = vm_net__flow_check(&vm->net, f, &d, err, len);

	if (ret)
		return ret;
	*out = api__flow_verdict(&d);
	return *out ? 0 : -ENOMEM;
}

/* vm.pause, vm.resume, vm.snapshot: through control_ops, logged here. */
static int pause_cb(void *opaque, char *err, size_t len)
{
	struct vm *vm = opaque;
	int ret = vm->control_ops->pause(vm, err, len);

	if (!ret)
		pr_info("vm.pause: the VM is paused");
	return ret;
}

static int resume_cb(void *opaque, char *err, size_t len)
{
	struct vm *vm = opaque;
	int ret = vm->control_ops->resume(vm, err, len);

	if (!ret)
		pr_info("vm.resume: the VM runs again");
	return ret;
}

static int snapshot_cb(void *opaque, const char *dir, bool resume, char *err,
		       size_t len)
{
	struct vm *vm = opaque;
	int ret = vm->control_ops->snapshot(vm, dir, resume, err, len);

	if (ret)
		pr_warn("vm.snapshot %s: %s", dir, err);
	return ret;
}

static bool is_paused_cb(void *opaque)
{
	struct vm *vm = opaque;

	return vm_state__get(&vm->lc) == VM_STATE_PAUSED;
}

/*
 * The agent answered: a detached start returns now. The VM then owns no
 * terminal: its console output goes nowhere.
 */
static void agent_ready_cb(void *opaque)
{
	struct vm *vm = opaque;
	char agent = VM_AGENT_BYTE, ready = VM_READY_BYTE;

	pr_debug("guest agent is ready");
	startup_trace__mark(vm->trace, TRACE_AGENT_READY);
	/* BOOTING -> RUNNING; too late when the VM stops (vm-run.c). */
	if (vm_state__booted(&vm->lc))
		return;
	if (vm->ready_fd >= 0 && write(vm->ready_fd, &agent, 1) != 1)
		pr_debug("ready pipe: %s", strerror(errno));
	/*
	 * --baseline-cache with no entry: saved now, before the request
	 * that reached the agent first is sent to it (api/agent.c), and
	 * before a detached start returns, so its caller finds the entry.
	 */
	vm->control_ops->capture(vm, 0, NULL);
	if (vm->ready_fd < 0)
		return;
	if (write(vm->ready_fd, &ready, 1) != 1)
		pr_debug("ready pipe: %s", strerror(errno));
	close(vm->ready_fd);
	vm->ready_fd = -1;
	if (vm->null_fd >= 0) {
		dup2(vm->null_fd, STDOUT_FILENO);
		dup2(vm->null_fd, STDERR_FILENO);
	}
}

/*
 * The descriptor budget (Documentation/design.md), from the limit as the
 * earlier steps raised it, less what is open now and what the proxy and
 * DNS may open under limits of their own.
 */
static void fd_budget_init(struct vm *vm)
{
	size_t reserve = CONTROL_FD_SPARE;

	if (vm->net.proxy)
		reserve += PROXY_MAX_FDS;
	if (vm->net.dns)
		reserve += DNS_MAX_PENDING + DNS_MAX_TCP_CONNS;
	fd_budget__set(&vm->fds, reserve);
	pr_debug("descriptor budget: %zu", atomic_load(&vm->fds.max));
}

/*
 * A restored VM's new seed (Documentation/snapshots.md, "Fresh
 * entropy"): blocking until the host's pool is ready, which it is on a
 * host that has been up a moment.
 */
static int reseed_draw(uint8_t *buf, size_t len)
{
	ssize_t n;

	do
		n = getrandom(buf, len, 0);
	while (n < 0 && errno == EINTR);
	if (n < 0)
		return -errno;
	/* Up to 256 bytes never come short (getrandom(2)). */
	return (size_t)n == len ? 0 : -EIO;
}

int control__init(struct vm *vm)
{
	struct api_params p = {
		.socket_path = vm->cfg->control_socket,
		.open_agent = open_agent,
		.vsock_port = KILN_AGENT_PORT,
		.shutdown = shutdown_cb,
		.shutdown_failed = shutdown_failed_cb,
		.status = status_cb,
		.metrics = metrics_cb,
		.set_policy = set_policy_cb,
		.check_flow = check_flow_cb,
		.pause = pause_cb,
		.resume = resume_cb,
		.snapshot = snapshot_cb,
		.is_paused = is_paused_cb,
		.agent_ready = agent_ready_cb,
		.capture = capture_cb,
		.mounts_failed = mounts_failed_cb,
		.agent_timeout_ms = (unsigned int)vm->cfg->agent_timeout_ms,
		.fds = &vm->fds,
		.opaque = vm,
	};
	const struct rootfs_image *img =
		vm->cfg->rootfs.descriptor ? &vm->rootfs : NULL;
	uint8_t seed[KILN_RESEED_BYTES];
	char net[KILN_NET_MAX + 1];
	struct kiln_buf mounts;
	int ret;

	/* The last step before the vCPUs: every fixed descriptor is open. */
	fd_budget_init(vm);
	if (!vm->cfg->control_socket)
		return 0;
	vm->null_fd = open("/dev/null", O_RDWR | O_CLOEXEC);
	/* What `vmm facts` gives for the same config (vmm/facts.h). */
	p.config_facts = facts__config(vm->cfg, img);
	kiln_buf__init(&mounts);
	ret = mounts_plan(vm, &mounts, &p);
	if (ret) {
		json_decref((json_t *)p.config_facts);
		kiln_buf__free(&mounts);
		return ret;
	}
	if (vm->restore) {
		/* Now, before any seccomp filter: the API thread has none. */
		ret = reseed_draw(seed, sizeof(seed));
		if (ret) {
			json_decref((json_t *)p.config_facts);
			kiln_buf__free(&mounts);
			pr_err("--restore: the guest's new seed: getrandom: %s",
			       strerror(-ret));
			return ret;
		}
		p.reseed = seed;
		if (vm->cfg->net.mode != NET_NONE) {
			/* Fits: NET_CMDLINE_MAX holds the key and the value. */
			if (netcfg__guest_value(&vm->cfg->net, net,
						sizeof(net))) {
				pr_warn("--restore: kiln.net's value is over %zu "
					"bytes; eth0 keeps the snapshot's MAC",
					sizeof(net) - 1);
			} else {
				p.net_mac = vm->cfg->net.mac;
				p.net = net;
			}
		}
	}
	ret = api__create(&vm->api, &p);
	explicit_bzero(seed, sizeof(seed));
	json_decref((json_t *)p.config_facts);
	kiln_buf__free(&mounts);
	if (ret)
		pr_err("control socket %s: %s", vm->cfg->control_socket,
		       strerror(-ret));
	return ret;
}

int control__start(struct vm *vm, const struct control_ops *ops)
{
	int ret;

	if (!vm->api)
		return 0;
	vm->control_ops = ops;
	ret = api__start(vm->api,
			 seccomp__filter(vm->seccomp, SECCOMP_THREAD_API));
	if (ret)
		pr_err("control socket: starting its thread: %s",
		       strerror(-ret));
	return ret;
}

void control__stopped(struct vm *vm, int exit_code)
{
	static const char *const reasons[] = {
		[VM_STOP_NONE] = "unknown",
		[VM_STOP_GUEST_EXIT] = "guest-exit",
		[VM_STOP_GUEST_RESET] = "guest-reset",
		[VM_STOP_GUEST_HALT] = "guest-halt",
		[VM_STOP_ERROR] = "error",
		[VM_STOP_SIGNAL] = "signal",
		[VM_STOP_SHUTDOWN] = "shutdown-forced",
	};
	const struct vm_lifecycle *lc = &vm->lc;
	int reason = atomic_load(&lc->stop_reason);
	unsigned int vcpu = atomic_load(&vm->crash_vcpu);
	int crash = atomic_load(&vm->crash);
	json_t *o;

	if (!vm->api)
		return;
	if (crash != VM_CRASH_NONE)
		api__event(vm->api,
			   crash == VM_CRASH_PANIC ? "guest-panic" :
						     "triple-fault",
			   json_pack("{s:I}", "vcpu", (json_int_t)vcpu - 1));
	o = json_pack("{s:s, s:i}", "reason", reasons[reason], "exitCode",
		      exit_code);
	if (o && lc->stop_detail)
		json_object_set_new(o, "detail", json_string(lc->stop_detail));
	if (o && reason == VM_STOP_SIGNAL)
		json_object_set_new(o, "signal", json_integer(lc->stop_status));
	api__event(vm->api, "shutdown", o);
}

void control__exit(struct vm *vm)
{
	api__destroy(vm->api);
	vm->api = NULL;
	if (vm->null_fd >= 0)
		close(vm->null_fd);
	vm->null_fd = -1;
}
