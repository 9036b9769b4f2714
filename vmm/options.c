// SPDX-License-Identifier: GPL-2.0
/*
 * The option table: every setting of `vmm run` / `vmm start` written once,
 * with its command-line flag, its JSON key, its --help text, the kind of
 * value it takes and, where storing it is more than a plain assignment, the
 * one function that applies it. Text from the command line and values from
 * a JSON document are converted by the kind (with the kind's error
 * message), so each value is parsed in one place whichever way it came.
 */
#include <errno.h>
#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "lib/compiler.h"
#include "lib/errf.h"
#include "lib/getopt-exact.h"
#include "lib/log.h"
#include "lib/parse.h"
#include "net/netcfg.h"
#include "net/policy.h"
#include "vmm/config.h"
#include "vmm/console-log.h"
#include "vmm/metrics.h"
#include "vmm/mounts.h"
#include "vmm/options-internal.h"
#include "vmm/options.h"

/* Zero, or a build error when e is true (the kernel's BUILD_BUG_ON_ZERO). */
#define BUILD_BUG_ON_ZERO(e) ((int)sizeof(struct { int : (-!!(e)); }))
/* The vm_config member a plain option is stored in, its type checked. */
#define FIELD(member, type)                                      \
	offsetof(struct vm_config, member) +                     \
		BUILD_BUG_ON_ZERO(!__builtin_types_compatible_p( \
			typeof(((struct vm_config *)0)->member), type))

#define STRING_FIELD(member) \
	.kind = OPTION_STRING, .offset = FIELD(member, char *)
#define FLAG_FIELD(member) .kind = OPTION_FLAG, .offset = FIELD(member, bool)
#define UINT_FIELD(member, limit) \
	.kind = OPTION_UINT, .max = (limit), .offset = FIELD(member, uint64_t)

/* --agent-timeout-ms: an hour (the API keeps it in an unsigned int). */
#define AGENT_TIMEOUT_MAX_MS (3600U * 1000U)

enum { VERIFY_CACHED, VERIFY_FULL };
static const char *const verify_names[] = {
	[VERIFY_CACHED] = "cached",
	[VERIFY_FULL] = "full",
	NULL,
};

int options__choice_index(const char *const *choices, const char *s)
{
	int i;

	for (i = 0; choices[i]; i++)
		if (!strcmp(s, choices[i]))
			return i;
	return -1;
}

int options__replace_string(char **field, const char *value)
{
	free(*field);
	*field = strdup(value);
	return *field ? 0 : -ENOMEM;
}

/* ---- the options' own apply functions -------------------------------- */

static int apply_cpus(struct vm_config *c, const union option_value *v,
		      char *err, size_t len)
{
	c->nr_cpus = v->u; /* at most UINT32_MAX: the entry's max */
	return 0;
}

/*
 * --rootfs-mode ephemeral | readonly | persistent:/abs/state/file |
 * cow:/path/store.sock
 */
static int apply_rootfs_mode_arg(struct vm_config *c,
				 const union option_value *v, char *err,
				 size_t len)
{
	static const char persistent[] = "persistent:";
	static const char cow[] = "cow:";
	const size_t plen = sizeof(persistent) - 1, clen = sizeof(cow) - 1;
	struct rootfs_config *r = &c->rootfs;
	const char *arg = v->s;
	int mode = options__choice_index(config__rootfs_modes, arg);

	if (mode == ROOTFS_PERSISTENT || !strcmp(arg, persistent))
		return errf(err, len, -EINVAL,
			    "--rootfs-mode %s: give the state file: "
			    "persistent:/abs/path",
			    arg);
	if (mode == ROOTFS_COW || !strcmp(arg, cow))
		return errf(err, len, -EINVAL,
			    "--rootfs-mode %s: give the block store's socket: "
			    "cow:/path/store.sock",
			    arg);
	/* Each overrides a mode from --config, its file included. */
	if (!strncmp(arg, persistent, plen)) {
		r->mode = ROOTFS_PERSISTENT;
		free(r->store_socket);
		r->store_socket = NULL;
		return options__replace_string(&r->state_path, arg + plen);
	}
	if (!strncmp(arg, cow, clen)) {
		r->mode = ROOTFS_COW;
		free(r->state_path);
		r->state_path = NULL;
		return options__replace_string(&r->store_socket, arg + clen);
	}
	if (mode < 0)
		return errf(err, len, -EINVAL,
			    "--rootfs-mode %s: must be ephemeral, readonly, "
			    "persistent:/abs/path or cow:/path/store.sock",
			    arg);
	r->mode = mode;
	free(r->state_path);
	r->state_path = NULL;
	free(r->store_socket);
	r->store_socket = NULL;
	return 0;
}

static int apply_rootfs_mode(struct vm_config *c, const union option_value *v,
			     char *err, size_t len)
{
	c->rootfs.mode = v->choice;
	return 0;
}

static int apply_max_dirty(struct vm_config *c, const union option_value *v,
			   char *err, size_t len)
{
	c->rootfs.max_dirty_bytes = v->u;
	c->rootfs.max_dirty_set = true;
	return 0;
}

static int apply_rootfs_verify(struct vm_config *c, const union option_value *v,
			       char *err, size_t len)
{
	c->rootfs.verify_full = v->choice == VERIFY_FULL;
	return 0;
}

static int apply_vsock_cid(struct vm_config *c, const union option_value *v,
			   char *err, size_t len)
{
	c->vsock.cid = v->u;
	c->vsock.cid_set = true;
	return 0;
}

static int apply_ready_timeout(struct vm_config *c, const union option_value *v,
			       char *err, size_t len)
{
	c->ready_timeout_ms = v->u;
	c->ready_timeout_set = true;
	return 0;
}

static int apply_mount(struct vm_config *c, const union option_value *v,
		       char *err, size_t len)
{
	return mounts__parse_cli(&c->mounts, v->s, err, len);
}

static int apply_mounts(struct vm_config *c, const union option_value *v,
			char *err, size_t len)
{
	return mounts__parse_json(&c->mounts, v->json, err, len);
}

/* --net auto | netns:PATH | tap-fd:N | none */
static int apply_net_arg(struct vm_config *c, const union option_value *v,
			 char *err, size_t len)
{
	return netcfg__parse_arg(&c->net, v->s, err, len);
}

/* "net": {"mode": ...}: the path or fd come as keys of their own. */
static int apply_net_mode(struct vm_config *c, const union option_value *v,
			  char *err, size_t len)
{
	c->net.mode = v->choice;
	return 0;
}

static int apply_net_tap_fd(struct vm_config *c, const union option_value *v,
			    char *err, size_t len)
{
	c->net.tap_fd = v->u;
	c->net.tap_fd_set = true;
	return 0;
}

static int apply_net_address(struct vm_config *c, const union option_value *v,
			     char *err, size_t len)
{
	c->net.address = v->ip.addr;
	c->net.prefix = v->ip.prefix;
	c->net.address_set = true;
	return 0;
}

static int apply_net_gateway(struct vm_config *c, const union option_value *v,
			     char *err, size_t len)
{
	c->net.gateway = v->ip.addr;
	c->net.gateway_set = true;
	return 0;
}

static int apply_net_dns(struct vm_config *c, const union option_value *v,
			 char *err, size_t len)
{
	c->net.dns = v->ip.addr;
	c->net.dns_set = true;
	return 0;
}

static int apply_net_mtu(struct vm_config *c, const union option_value *v,
			 char *err, size_t len)
{
	c->net.mtu = v->u;
	c->net.mtu_set = true;
	return 0;
}

static int apply_net_relay(struct vm_config *c, const union option_value *v,
			   char *err, size_t len)
{
	c->net.relay = v->choice;
	return 0;
}

static int apply_net_mac(struct vm_config *c, const union option_value *v,
			 char *err, size_t len)
{
	memcpy(c->net.mac, v->mac, sizeof(c->net.mac));
	c->net.mac_set = true;
	return 0;
}

/* "net": {"policy": {...}}: replaces a policy given before it. */
static int apply_net_policy(struct vm_config *c, const union option_value *v,
			    char *err, size_t len)
{
	return net_policy__replace(&c->net.policy, v->json, "net.policy", err,
				   len);
}

/* --net-policy FILE: a JSON file holding just the policy object. */
static int apply_net_policy_file(struct vm_config *c,
				 const union option_value *v, char *err,
				 size_t len)
{
	char why[CONFIG_ERR_LEN] = "";
	json_error_t jerr;
	json_t *obj;
	int ret;

	obj = json_load_file(v->s, JSON_REJECT_DUPLICATES, &jerr);
	if (!obj && jerr.line < 0)
		return errf(err, len, -ENOENT, "--net-policy %s: %s", v->s,
			    jerr.text);
	if (!obj)
		return errf(err, len, -EINVAL,
			    "--net-policy %s: line %d column %d: %s", v->s,
			    jerr.line, jerr.column, jerr.text);
	ret = net_policy__replace(&c->net.policy, obj, "net.policy", why,
				  sizeof(why));
	json_decref(obj);
	if (ret && !why[0])
		snprintf(why, sizeof(why), "%s", strerror(-ret));
	if (ret)
		return errf(err, len, ret, "--net-policy %s: %s", v->s, why);
	return 0;
}

static int apply_command(struct vm_config *c, const union option_value *v,
			 char *err, size_t len)
{
	json_t *a, *arr = v->json;
	size_t i, n;
	char **argv;
	int ret;

	if (!json_is_array(arr) || !json_array_size(arr))
		return errf(err, len, -EINVAL,
			    "\"command\" must be a non-empty array of strings");
	n = json_array_size(arr);
	argv = calloc(n + 1, sizeof(*argv));
	if (!argv)
		return -ENOMEM;
	json_array_foreach(arr, i, a)
	{
		if (!json_is_string(a)) {
			free(argv);
			return errf(err, len, -EINVAL,
				    "\"command\"[%zu] must be a string", i);
		}
		argv[i] = (char *)json_string_value(a);
	}
	ret = config__set_argv(c, argv, n);
	free(argv);
	return ret;
}

int options__load_json(struct vm_config *c, const char *path, char *err,
		       size_t len)
{
	json_error_t jerr;
	json_t *root;
	int ret;

	root = json_load_file(path, JSON_REJECT_DUPLICATES, &jerr);
	if (!root) {
		if (jerr.line < 0)
			return errf(err, len, -ENOENT, "%s", jerr.text);
		return errf(err, len, -EINVAL, "line %d column %d: %s",
			    jerr.line, jerr.column, jerr.text);
	}
	if (!json_is_object(root)) {
		json_decref(root);
		return errf(err, len, -EINVAL, "top level must be an object");
	}
	ret = options__apply_json(c, root, err, len);
	json_decref(root);
	return ret;
}

static int apply_config_file(struct vm_config *c, const union option_value *v,
			     char *err, size_t len)
{
	char why[CONFIG_ERR_LEN] = "";
	int ret;

	ret = options__load_json(c, v->s, why, sizeof(why));
	if (ret && !why[0])
		snprintf(why, sizeof(why), "%s", strerror(-ret));
	if (ret)
		return errf(err, len, ret, "%s: %s", v->s, why);
	return 0;
}

static int apply_no_seccomp(struct vm_config *c, const union option_value *v,
			    char *err, size_t len)
{
	c->seccomp = false;
	return 0;
}

static int apply_isolation(struct vm_config *c, const union option_value *v,
			   char *err, size_t len)
{
	c->isolation = v->choice; /* config__isolations is by enum isolation */
	return 0;
}

static int apply_jail_uid(struct vm_config *c, const union option_value *v,
			  char *err, size_t len)
{
	c->jail.uid = v->u;
	c->jail.uid_set = true;
	return 0;
}

static int apply_jail_gid(struct vm_config *c, const union option_value *v,
			  char *err, size_t len)
{
	c->jail.gid = v->u;
	c->jail.gid_set = true;
	return 0;
}

static int apply_log_level(struct vm_config *c, const union option_value *v,
			   char *err, size_t len)
{
	c->log_level = v->choice; /* log__level_names is by enum log_level */
	c->log_level_set = true;
	return 0;
}

static int apply_log_format(struct vm_config *c, const union option_value *v,
			    char *err, size_t len)
{
	c->log_format = v->choice;
	return 0;
}

static int apply_verbose(struct vm_config *c, const union option_value *v,
			 char *err, size_t len)
{
	c->verbose = true;
	log__set_verbose(true);
	return 0;
}

/*
 * In --help order. A JSON section's keys are listed in the order its
 * "must be an object" message names them.
 */
const struct option_desc options__table[] = {
	{
		.flag = "kernel",
		.arg = "PATH",
		.key = "kernel",
		.help = "ELF vmlinux or bzImage (x86-64, 64-bit boot protocol);\n"
			"default: the default guest's vmlinux and initramfs,\n"
			"checked against their pins (KILN_GUEST_DIR, else the\n"
			"build tree's, else the installed one: vmm --version)",
		STRING_FIELD(kernel_path),
	},
	{
		.flag = "initrd",
		.arg = "PATH",
		.key = "initrd",
		.help = "initramfs (cpio) to load with the kernel",
		STRING_FIELD(initrd_path),
	},
	{
		.flag = "cmdline",
		.arg = "STR",
		.key = "cmdline",
		.help = "appended to the default kernel command line",
		STRING_FIELD(cmdline),
	},
	{
		.flag = "cpus",
		.arg = "N",
		.key = "cpus",
		.help = "vCPUs, 1 to 64 (default 1)",
		.kind = OPTION_UINT,
		.max = UINT32_MAX,
		.apply = apply_cpus,
	},
	{
		.flag = "memory",
		.arg = "SIZE",
		.key = "memoryMiB",
		.help = "guest memory: MiB, or bytes with a K, M, G or T suffix\n"
			"(256, 512M, 2G; default 256)",
		.kind = OPTION_MIB,
		.max = UINT32_MAX,
		.offset = FIELD(mem_mib, uint64_t),
	},
	{
		.flag = "rootfs",
		.arg = "DESC",
		.key = "rootfs.image",
		.help = "root disk from an image descriptor (JSON): a raw image,\n"
			"checked against its size and sha256 digest before boot",
		STRING_FIELD(rootfs.descriptor),
	},
	{
		.flag = "rootfs-mode",
		.arg = "M",
		.help = "ephemeral (default: changes in memory for one boot),\n"
			"readonly, persistent:/abs/state/file, or\n"
			"cow:/path/store.sock (changes kept by a block store)",
		.kind = OPTION_STRING,
		.apply = apply_rootfs_mode_arg,
	},
	{
		.key = "rootfs.mode",
		.kind = OPTION_CHOICE,
		.choices = config__rootfs_modes,
		.apply = apply_rootfs_mode,
	},
	{
		.key = "rootfs.statePath",
		STRING_FIELD(rootfs.state_path),
	},
	{
		.key = "rootfs.storeSocket",
		STRING_FIELD(rootfs.store_socket),
	},
	{
		.flag = "max-dirty-bytes",
		.arg = "N",
		.key = "rootfs.maxDirtyBytes",
		.help = "cap on changed bytes, K/M/G/KiB/MiB/GiB suffixes, 0: no\n"
			"cap (default 64MiB ephemeral and cow, none persistent)",
		.kind = OPTION_SIZE,
		.max = INT64_MAX,
		.apply = apply_max_dirty,
	},
	{
		.flag = "rootfs-direct",
		.key = "rootfs.direct",
		.help = "O_DIRECT on the image and the state file",
		FLAG_FIELD(rootfs.direct),
	},
	{
		/* The command line's error names the choices as --help does. */
		.flag = "rootfs-verify",
		.arg = "full|cached",
		.key = "rootfs.verify",
		.help = "full: hash the image even when the verification cache\n"
			"vouches for it (default cached)",
		.kind = OPTION_CHOICE,
		.choices = verify_names,
		.apply = apply_rootfs_verify,
	},
	{
		.flag = "vsock-socket",
		.arg = "PATH",
		.key = "vsock.socket",
		.help = "virtio-vsock, host side on Unix sockets: host processes\n"
			"connect to PATH and write \"CONNECT <port>\\n\"; guest\n"
			"connections to CID 2 port P go to PATH_P",
		STRING_FIELD(vsock.socket_path),
	},
	{
		.flag = "vsock-cid",
		.arg = "N",
		.key = "vsock.cid",
		.help = "the guest's vsock CID, 3 to 4294967294 (default 3)",
		.kind = OPTION_UINT,
		.max = UINT32_MAX,
		.apply = apply_vsock_cid,
	},
	{
		.flag = "mount",
		.arg = "GUEST_PATH=bind:DIR[:ro|:rw]\n"
		       "GUEST_PATH=memory[:MAXBYTES]\n"
		       "GUEST_PATH=virtual:SOCKET",
		.help = "virtio-fs: a host directory (confined beneath DIR),\n"
			"an in-memory file system, or one served by a process\n"
			"on SOCKET; mounted at GUEST_PATH before the command runs\n"
			"(masks and seeded files: --config, Documentation/virtio-fs.md)",
		.kind = OPTION_STRING,
		.apply = apply_mount,
	},
	{
		.key = "mounts",
		.kind = OPTION_JSON,
		.apply = apply_mounts,
	},
	{
		.flag = "net",
		.arg = "auto|netns:PATH|tap-fd:N",
		.help = "virtio-net on a tap: auto (a network namespace of the\n"
			"VM's own with the tap kiln0, the gateway's address on its\n"
			"host side), netns:PATH (the same in that namespace) or\n"
			"tap-fd:N (an open IFF_TAP|IFF_VNET_HDR tap); none: no\n"
			"network (the default)",
		.kind = OPTION_STRING,
		.apply = apply_net_arg,
	},
	{
		.key = "net.mode",
		.kind = OPTION_CHOICE,
		.choices = netcfg__modes,
		.apply = apply_net_mode,
	},
	{
		.key = "net.netns",
		STRING_FIELD(net.netns_path),
	},
	{
		.key = "net.tapFd",
		.kind = OPTION_UINT,
		.max = NET_MAX_TAP_FD,
		.apply = apply_net_tap_fd,
	},
	{
		.flag = "net-address",
		.arg = "A.B.C.D/N",
		.key = "net.address",
		.help = "the guest's address and prefix (default 10.0.2.15/24)",
		.kind = OPTION_CIDR,
		.apply = apply_net_address,
	},
	{
		.flag = "net-gateway",
		.arg = "A.B.C.D",
		.key = "net.gateway",
		.help = "the guest's default route (default 10.0.2.2)",
		.kind = OPTION_IPV4,
		.apply = apply_net_gateway,
	},
	{
		.flag = "net-dns",
		.arg = "A.B.C.D",
		.key = "net.dns",
		.help = "the guest's DNS server (default the gateway)",
		.kind = OPTION_IPV4,
		.apply = apply_net_dns,
	},
	{
		.flag = "net-mtu",
		.arg = "BYTES",
		.key = "net.mtu",
		.help = "the link's MTU, 68 to 65535 (default 1500)",
		.kind = OPTION_UINT,
		.max = UINT32_MAX,
		.apply = apply_net_mtu,
	},
	{
		.flag = "net-mac",
		.arg = "XX:XX:XX:XX:XX:XX",
		.key = "net.mac",
		.help = "the guest's MAC (default 02:4b:4c and 3 random bytes)",
		.kind = OPTION_MAC,
		.apply = apply_net_mac,
	},
	{
		.flag = "net-policy",
		.arg = "FILE",
		.help = "which flows may leave the VM (default none): a JSON file\n"
			"holding the \"net.policy\" object (grants by address,\n"
			"CIDR, hostname or address class; Documentation/network.md)",
		.kind = OPTION_STRING,
		.apply = apply_net_policy_file,
	},
	{
		.key = "net.policy",
		.kind = OPTION_JSON,
		.apply = apply_net_policy,
	},
	{
		.flag = "net-ca-bundle",
		.arg = "PATH",
		.key = "net.caBundle",
		.help = "the CA certificates (PEM) that upstream servers of the\n"
			"http grants' TLS flows must chain to (default\n"
			"/etc/ssl/certs/ca-certificates.crt)",
		STRING_FIELD(net.ca_bundle),
	},
	{
		.flag = "net-relay",
		.arg = "splice|auto|kernel|split",
		.key = "net.relay",
		.help = "how granted TCP flows the proxy does not intercept are\n"
			"relayed: splice (the proxy's thread; the default),\n"
			"kernel (a BPF sockmap program), split (the guest's\n"
			"bytes by the kernel, upstream's by splice) or auto\n"
			"(split when the program loads, else splice)",
		.kind = OPTION_CHOICE,
		.choices = netcfg__relays,
		.apply = apply_net_relay,
	},
	{
		.flag = "net-intercept-ca",
		.key = "net.interceptCa",
		.help = "the guest trusts the interception CA from boot even\n"
			"when the policy has no http grant and no hook",
		FLAG_FIELD(net.intercept_ca),
	},
	{
		.key = "command",
		.kind = OPTION_JSON,
		.apply = apply_command,
	},
	{
		.flag = "hostname",
		.arg = "NAME",
		.key = "hostname",
		.help = "the guest's hostname, set by init before anything runs\n"
			"(default sandbox; letters, digits and '-' in labels\n"
			"joined by dots, 64 bytes at most)",
		STRING_FIELD(hostname),
	},
	{
		.flag = "cwd",
		.arg = "PATH",
		.key = "cwd",
		.help = "the guest command's working directory, and exec's,\n"
			"spawn's and pty's when a request gives none (default /;\n"
			"absolute; init ends the boot if it is not a directory)",
		STRING_FIELD(cwd),
	},
	{
		.flag = "control-socket",
		.arg = "PATH",
		.key = "controlSocket",
		.help = "serve the JSON-RPC control API there (exec, spawn, pty,\n"
			"files, facts: Documentation/api.md); the guest agent runs",
		STRING_FIELD(control_socket),
	},
	{
		.flag = "agent-timeout-ms",
		.arg = "MS",
		.key = "agentTimeoutMs",
		.help = "how long a control call waits for the guest agent to\n"
			"accept its connection (default 10000; a busy host's guest\n"
			"may need more)",
		UINT_FIELD(agent_timeout_ms, AGENT_TIMEOUT_MAX_MS),
	},
	{
		.flag = "ready-timeout-ms",
		.arg = "MS",
		.key = "readyTimeoutMs",
		.help = "stop the VM (status 125, its vCPUs and devices\n"
			"logged) when the guest agent has not answered MS after\n"
			"the start; 0: no limit (default 300000 with --detach,\n"
			"else 0)",
		.kind = OPTION_UINT,
		.max = AGENT_TIMEOUT_MAX_MS,
		.apply = apply_ready_timeout,
	},
	{
		.flag = "console-log",
		.arg = "FILE",
		.key = "consoleLog.path",
		.help = "the guest console's output goes there too, size-capped\n"
			"and rotated (default with --detach: the control socket's\n"
			"path less .sock, plus .console.log)",
		STRING_FIELD(console_log),
	},
	{
		.flag = "console-log-max-bytes",
		.arg = "BYTES",
		.key = "consoleLog.maxBytes",
		.help = "the console log's cap: past it FILE becomes FILE.1\n"
			"(default 1MiB, at least 4KiB)",
		.kind = OPTION_SIZE,
		.max = CONSOLE_LOG_MAX_MAX_BYTES,
		.offset = FIELD(console_log_max_bytes, uint64_t),
	},
	{
		.flag = "console-log-keep",
		.arg = "N",
		.key = "consoleLog.keep",
		.help = "rotated console logs kept, FILE.1 to FILE.N, 0 to 9\n"
			"(default 1)",
		UINT_FIELD(console_log_keep, CONSOLE_LOG_MAX_KEEP),
	},
	{
		.flag = "metrics",
		.arg = "FILE",
		.key = "metrics.path",
		.help = "append the vm.metrics object there as one JSON line per\n"
			"interval (a file or a FIFO; Documentation/api.md)",
		STRING_FIELD(metrics_path),
	},
	{
		.flag = "metrics-interval-ms",
		.arg = "MS",
		.key = "metrics.intervalMs",
		.help = "--metrics: a line every MS, 100 to 3600000 (default\n"
			"1000)",
		UINT_FIELD(metrics_interval_ms, METRICS_MAX_INTERVAL_MS),
	},
	{
		.flag = "detach",
		.help = "start: return once the guest agent answers, the VM runs on",
		FLAG_FIELD(detach),
	},
	{
		.flag = "die-with-parent",
		.key = "dieWithParent",
		.help = "shut the VM down (the guest powers off, 5 s at most)\n"
			"and remove its sockets when the process that ran the\n"
			"vmm exits",
		FLAG_FIELD(die_with_parent),
	},
	{
		.flag = "pid-file",
		.arg = "PATH",
		.help = "start --detach: write the VM process's pid there",
		STRING_FIELD(pid_file),
	},
	{
		.flag = "trace-startup",
		.arg = "FILE",
		.help = "write the monitor's start-up and tear-down phases\n"
			"there as it exits, one JSON line each",
		STRING_FIELD(trace_startup_path),
	},
	{
		.flag = "restore",
		.arg = "DIR",
		.key = "restore",
		.help = "start: resume the snapshot in DIR (vm.snapshot's) instead\n"
			"of booting; the other options must be the snapshot's\n"
			"(Documentation/snapshots.md)",
		STRING_FIELD(restore_dir),
	},
	{
		.flag = "baseline-cache",
		.arg = "DIR",
		.key = "baseline.cache",
		.help = "start: restore from a pre-workload baseline of this\n"
			"configuration in DIR (owner-only), or boot cold and save\n"
			"one there when the agent is ready\n"
			"(Documentation/snapshots.md)",
		STRING_FIELD(baseline.cache),
	},
	{
		.flag = "baseline-max-artifacts",
		.arg = "N",
		.key = "baseline.maxArtifacts",
		.help = "--baseline-cache: entries kept, least recently used\n"
			"evicted first (default 8)",
		UINT_FIELD(baseline.max_artifacts,
			   CONFIG_MAX_BASELINE_MAX_ARTIFACTS),
	},
	{
		.flag = "baseline-max-bytes",
		.arg = "BYTES",
		.key = "baseline.maxBytes",
		.help = "--baseline-cache: the entries' data bytes kept (default\n"
			"8GiB)",
		.kind = OPTION_SIZE,
		.max = UINT64_MAX,
		.offset = FIELD(baseline.max_bytes, uint64_t),
	},
	{
		.flag = "config",
		.arg = "FILE",
		.help = "JSON settings: kernel, initrd, cmdline, cpus, memoryMiB,\n"
			"command, hostname, cwd, rootfs, vsock, mounts, net,\n"
			"consoleLog, log, metrics, jail; options after it override\n"
			"it",
		.kind = OPTION_STRING,
		.apply = apply_config_file,
	},
	{
		.flag = "no-seccomp",
		.help = "do not filter the monitor's syscalls (debugging)",
		.kind = OPTION_FLAG,
		.apply = apply_no_seccomp,
	},
	{
		.flag = "isolation",
		.arg = "vm|namespace",
		.key = "isolation",
		.help = "vm (a KVM microVM, the default) or namespace: the same\n"
			"agent and control API in Linux namespaces on the host's\n"
			"kernel, for hosts without usable KVM; a weaker boundary\n"
			"(Documentation/security.md)",
		.kind = OPTION_CHOICE,
		.choices = config__isolations,
		.apply = apply_isolation,
	},
	{
		.flag = "jail",
		.arg = "DIR",
		.key = "jail.dir",
		.help = "run the VM jailed (root only): new mount, PID, IPC and\n"
			"UTS namespaces, a tmpfs on DIR as its root holding only\n"
			"the VM's files, then --uid/--gid, no capabilities\n"
			"(Documentation/security.md)",
		STRING_FIELD(jail.dir),
	},
	{
		.flag = "uid",
		.arg = "U",
		.key = "jail.uid",
		.help = "--jail: the uid the vmm runs as once the VM is built",
		.kind = OPTION_UINT,
		.max = JAIL_MAX_ID,
		.apply = apply_jail_uid,
	},
	{
		.flag = "gid",
		.arg = "G",
		.key = "jail.gid",
		.help = "--jail: the gid (and no supplementary groups)",
		.kind = OPTION_UINT,
		.max = JAIL_MAX_ID,
		.apply = apply_jail_gid,
	},
	{
		.flag = "cgroup",
		.arg = "PATH",
		.key = "jail.cgroup",
		.help = "--jail: place the vmm in this cgroup v2 directory\n"
			"(made if missing; skipped, with a warning, where cgroup\n"
			"v2 is not mounted writable)",
		STRING_FIELD(jail.cgroup),
	},
	{
		.flag = "cpu-max",
		.arg = "QUOTA [PERIOD]",
		.key = "jail.cpuMax",
		.help = "--cgroup: its cpu.max, microseconds (\"max\": no limit)",
		STRING_FIELD(jail.cpu_max),
	},
	{
		.flag = "memory-max",
		.arg = "BYTES",
		.key = "jail.memoryMax",
		.help = "--cgroup: its memory.max (K/M/G suffixes)",
		.kind = OPTION_SIZE,
		.max = INT64_MAX,
		.offset = FIELD(jail.memory_max, uint64_t),
	},
	{
		.flag = "rlimit-as",
		.arg = "BYTES",
		.key = "jail.rlimitAs",
		.help = "--jail: RLIMIT_AS, the address space (guest memory\n"
			"included; default unchanged)",
		.kind = OPTION_SIZE,
		.max = INT64_MAX,
		.offset = FIELD(jail.rlimit_as, uint64_t),
	},
	{
		.flag = "rlimit-nofile",
		.arg = "N",
		.key = "jail.rlimitNofile",
		.help = "--jail: RLIMIT_NOFILE, open files (default unchanged)",
		UINT_FIELD(jail.rlimit_nofile, INT32_MAX),
	},
	{
		.flag = "rlimit-nproc",
		.arg = "N",
		.key = "jail.rlimitNproc",
		.help = "--jail: RLIMIT_NPROC, processes and threads of the uid\n"
			"(default unchanged)",
		UINT_FIELD(jail.rlimit_nproc, INT32_MAX),
	},
	{
		.flag = "log",
		.arg = "FILE",
		.key = "log.path",
		.help = "the vmm's own messages go there (appended) instead of\n"
			"stderr, also after --detach",
		STRING_FIELD(log_path),
	},
	{
		.flag = "log-level",
		.arg = "error|warn|info|debug",
		.key = "log.level",
		.help = "the least important messages written (default info;\n"
			"--verbose is debug)",
		.kind = OPTION_CHOICE,
		.choices = log__level_names,
		.apply = apply_log_level,
	},
	{
		.flag = "log-format",
		.arg = "text|json",
		.key = "log.format",
		.help = "text (\"vmm: warning: ...\") or one JSON object per line:\n"
			"{\"time\", \"level\", \"pid\", \"msg\"} (default text)",
		.kind = OPTION_CHOICE,
		.choices = log__format_names,
		.apply = apply_log_format,
	},
	{
		.flag = "verbose",
		.short_flag = 'v',
		.help = "debug messages too (--log-level debug)",
		.kind = OPTION_FLAG,
		.apply = apply_verbose,
	},
};

const size_t options__nr = ARRAY_SIZE(options__table);
_Static_assert(ARRAY_SIZE(options__table) <= OPTIONS_MAX,
	       "options-parse.c sizes getopt's table by OPTIONS_MAX");
