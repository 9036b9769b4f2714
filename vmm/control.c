// SPDX-License-Identifier: GPL-2.0
/*
 * The VM's control socket: the JSON-RPC API (vmm/api.c) wired to this VM.
 * The API reaches the guest agent through the vsock device: each agent
 * connection is a socketpair whose far end the device treats as a host
 * client (vsock__attach_stream), the API writing "CONNECT 1024".
 *
 * vm.shutdown asks the guest to power off through the agent (POWEROFF:
 * init syncs and unmounts, then reports status 0), so a persistent root
 * disk is left clean; a guest that does not comply within
 * CONTROL_SHUTDOWN_GRACE_S is stopped.
 */
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "devices/virtio/vsock.h"
#include "proto/agent.h"
#include "proto/tlv.h"
#include "vmm/api.h"
#include "vmm/facts.h"
#include "vmm/net-status.h"
#include "vmm/proxy.h"
#include "vmm/vm.h"

#define CONTROL_SHUTDOWN_GRACE_S 30 /* seconds for the guest to power off */
#define CONTROL_AGENT_IO_MS	 5000
#define CONTROL_ERR_LEN		 256 /* one line: what failed and why */

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

/* Exactly len bytes, or -ETIMEDOUT / -EPIPE / -errno. */
static int xfer(int fd, void *buf, size_t len, bool out)
{
	struct pollfd p = { .fd = fd, .events = out ? POLLOUT : POLLIN };
	size_t done = 0;
	ssize_t n;

	while (done < len) {
		if (poll(&p, 1, CONTROL_AGENT_IO_MS) <= 0)
			return -ETIMEDOUT;
		n = out ? send(fd, (uint8_t *)buf + done, len - done,
			       MSG_NOSIGNAL | MSG_DONTWAIT) :
			  recv(fd, (uint8_t *)buf + done, len - done,
			       MSG_DONTWAIT);
		if (n < 0 && (errno == EINTR || errno == EAGAIN))
			continue;
		if (n <= 0)
			return n < 0 ? -errno : -EPIPE;
		done += n;
	}
	return 0;
}

/* One frame, its payload skipped: *type, or -errno. */
static int read_frame(int fd, uint16_t *type)
{
	struct kiln_frame f;
	uint16_t flags;
	uint32_t len;
	uint8_t skip[256];
	int ret;

	ret = xfer(fd, &f, sizeof(f), false);
	if (ret)
		return ret;
	if (kiln_frame__unpack(&f, type, &flags, &len))
		return -EPROTO;
	while (len) {
		uint32_t n = len < sizeof(skip) ? len : sizeof(skip);

		ret = xfer(fd, skip, n, false);
		if (ret)
			return ret;
		len -= n;
	}
	return 0;
}

/* The "OK <port>\n" the vsock device answers a CONNECT with. */
static int read_ok_line(int fd)
{
	char line[32];
	size_t i;

	for (i = 0; i < sizeof(line) - 1; i++) {
		if (xfer(fd, &line[i], 1, false))
			return -EPIPE;
		if (line[i] == '\n')
			break;
	}
	return strncmp(line, "OK ", 3) ? -ECONNREFUSED : 0;
}

/* POWEROFF through the agent, synchronously (API thread, a few ms). */
static int agent_poweroff(struct vm *vm)
{
	char connect[32];
	struct kiln_frame f;
	uint16_t type;
	int fd, ret;

	fd = open_agent(vm);
	if (fd < 0)
		return fd;
	snprintf(connect, sizeof(connect), "CONNECT %u\n", KILN_AGENT_PORT);
	ret = xfer(fd, connect, strlen(connect), true);
	if (!ret)
		ret = read_ok_line(fd);
	if (!ret)
		ret = read_frame(fd, &type);
	if (!ret && type != KILN_MSG_HELLO)
		ret = -EPROTO;
	if (!ret) {
		kiln_frame__pack(&f, KILN_MSG_POWEROFF, 0, 0);
		ret = xfer(fd, &f, sizeof(f), true);
	}
	if (!ret)
		ret = read_frame(fd, &type);
	if (!ret && type != KILN_MSG_RESULT)
		ret = -EPROTO;
	close(fd);
	return ret;
}

static void shutdown_cb(void *opaque)
{
	struct vm *vm = opaque;
	struct timespec now;
	int ret;

	clock_gettime(CLOCK_MONOTONIC, &now);
	atomic_store(&vm->shutdown_deadline,
		     now.tv_sec + CONTROL_SHUTDOWN_GRACE_S);
	ret = agent_poweroff(vm);
	if (ret) {
		pr_warn("vm.shutdown: the guest agent did not take the power "
			"off request (%s); stopping the VM",
			strerror(-ret));
		vm__stop(vm, VM_STOP_SHUTDOWN, 0, NULL);
	}
}

/* The proxy's counters and the egress program's (vmm/net-status.h). */
static json_t *net_status(struct vm *vm)
{
	uint64_t egress[EGRESS_NR_REASONS];
	char err[CONTROL_ERR_LEN] = "";
	struct proxy_stats s;
	int ret;

	if (!vm->proxy)
		return net_status__none();
	proxy__stats(vm->proxy, &s);
	ret = proxy__egress_counters(vm->proxy, egress, err, sizeof(err));
	return net_status__json(&s, ret ? NULL : egress, err);
}

static void status_cb(void *opaque, json_t *status)
{
	struct vm *vm = opaque;
	const struct vm_config *c = vm->cfg;
	static const char *const modes[] = {
		[ROOTFS_EPHEMERAL] = "ephemeral",
		[ROOTFS_READONLY] = "readonly",
		[ROOTFS_PERSISTENT] = "persistent",
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
	json_object_set_new(status, "net", net_status(vm));
}

static int set_policy_cb(void *opaque, json_t *policy, char *err, size_t len)
{
	struct vm *vm = opaque;
	int ret;

	ret = vm__set_net_policy(vm, policy, err, len);
	if (!ret)
		pr_info("net.setPolicy: the network policy was replaced");
	return ret;
}

/*
 * The agent answered: a detached start returns now. The VM then owns no
 * terminal: its console output goes nowhere.
 */
static void agent_ready_cb(void *opaque)
{
	struct vm *vm = opaque;
	char one = 1;

	pr_debug("guest agent is ready");
	if (vm->ready_fd < 0)
		return;
	if (write(vm->ready_fd, &one, 1) != 1)
		pr_debug("ready pipe: %s", strerror(errno));
	close(vm->ready_fd);
	vm->ready_fd = -1;
	if (vm->null_fd >= 0) {
		dup2(vm->null_fd, STDOUT_FILENO);
		dup2(vm->null_fd, STDERR_FILENO);
	}
}

int control__init(struct vm *vm)
{
	struct api_params p = {
		.socket_path = vm->cfg->control_socket,
		.open_agent = open_agent,
		.vsock_port = KILN_AGENT_PORT,
		.shutdown = shutdown_cb,
		.status = status_cb,
		.set_policy = set_policy_cb,
		.agent_ready = agent_ready_cb,
		.agent_timeout_ms = (unsigned int)vm->cfg->agent_timeout_ms,
		.opaque = vm,
	};
	const struct rootfs_image *img =
		vm->cfg->rootfs.descriptor ? &vm->rootfs : NULL;
	int ret;

	if (!vm->cfg->control_socket)
		return 0;
	vm->null_fd = open("/dev/null", O_RDWR | O_CLOEXEC);
	/* What `vmm facts` gives for the same config (vmm/facts.h). */
	p.config_facts = facts__config(vm->cfg, img);
	ret = api__create(&vm->api, &p);
	json_decref((json_t *)p.config_facts);
	if (ret)
		pr_err("control socket %s: %s", vm->cfg->control_socket,
		       strerror(-ret));
	return ret;
}

int control__start(struct vm *vm)
{
	int ret;

	if (!vm->api)
		return 0;
	ret = api__start(vm->api);
	if (ret)
		pr_err("control socket: starting its thread: %s",
		       strerror(-ret));
	return ret;
}

void control__exit(struct vm *vm)
{
	api__destroy(vm->api);
	vm->api = NULL;
	if (vm->null_fd >= 0)
		close(vm->null_fd);
	vm->null_fd = -1;
}
