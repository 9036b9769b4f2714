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
#include "vmm/options.h"

enum option_kind {
	OPTION_STRING, /* text as given; JSON: a string */
	OPTION_UINT,   /* decimal count up to max; JSON: an integer */
	OPTION_SIZE,   /* byte count (parse__size) up to max; JSON:
			* an integer, or a string with a suffix */
	OPTION_MIB,    /* MiB up to max: a plain count, or a byte count
			* with a suffix (parse__size) in whole MiB; JSON:
			* an integer, or a string as on the command line */
	OPTION_FLAG,   /* command line: no argument, true; JSON: a boolean */
	OPTION_CHOICE, /* one of choices[], as its index; JSON: a string */
	OPTION_JSON,   /* JSON only: the value as it is, for apply to walk */
	OPTION_IPV4,   /* "A.B.C.D"; JSON: a string */
	OPTION_CIDR,   /* "A.B.C.D/N"; JSON: a string */
	OPTION_MAC,    /* "xx:xx:xx:xx:xx:xx"; JSON: a string */
};

/* A value converted by its option's kind. */
union option_value {
	const char *s;	     /* OPTION_STRING */
	uint64_t u;	     /* OPTION_UINT, OPTION_SIZE, OPTION_MIB */
	bool b;		     /* OPTION_FLAG */
	unsigned int choice; /* OPTION_CHOICE: index into choices[] */
	json_t *json;	     /* OPTION_JSON */
	struct {
		uint32_t addr;	     /* network byte order */
		unsigned int prefix; /* OPTION_CIDR: bits */
	} ip;			     /* OPTION_IPV4, OPTION_CIDR */
	uint8_t mac[NET_MAC_LEN];    /* OPTION_MAC */
};

struct option_desc {
	const char *flag; /* --flag; NULL: JSON only */
	char short_flag;  /* -x as well; 0: none */
	/* --help's name for the argument, one line per form; NULL: none */
	const char *arg;
	/* JSON key; "section.key" inside an object; NULL: command line only */
	const char *key;
	const char *help; /* --help lines; NULL: not listed */
	enum option_kind kind;
	uint64_t max;		    /* OPTION_UINT, OPTION_SIZE, OPTION_MIB */
	const char *const *choices; /* OPTION_CHOICE, NULL-terminated */
	/*
	 * Stores the value; err receives "what: why". NULL: the value is
	 * assigned to the vm_config field at offset (FIELD()).
	 */
	int (*apply)(struct vm_config *c, const union option_value *v,
		     char *err, size_t len);
	size_t offset;
};

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
/* A command-line error buffer holds what a log line holds (lib/log.c). */
#define OPTIONS_ERR_LEN 1024
/* Where --help starts an option's description. */
#define HELP_COLUMN 20
/* getopt_long's value for table entry i (above any short option). */
#define OPTION_VAL_BASE 0x100

enum { VERIFY_CACHED, VERIFY_FULL };
static const char *const verify_names[] = {
	[VERIFY_CACHED] = "cached",
	[VERIFY_FULL] = "full",
	NULL,
};

static int choice_index(const char *const *choices, const char *s)
{
	int i;

	for (i = 0; choices[i]; i++)
		if (!strcmp(s, choices[i]))
			return i;
	return -1;
}

static int replace_string(char **field, const char *value)
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

/* --rootfs-mode ephemeral | readonly | persistent:/abs/state/file */
static int apply_rootfs_mode_arg(struct vm_config *c,
				 const union option_value *v, char *err,
				 size_t len)
{
	static const char persistent[] = "persistent:";
	const size_t plen = sizeof(persistent) - 1;
	struct rootfs_config *r = &c->rootfs;
	const char *arg = v->s;
	int mode = choice_index(config__rootfs_modes, arg);

	if (mode == ROOTFS_PERSISTENT || !strcmp(arg, persistent))
		return errf(err, len, -EINVAL,
			    "--rootfs-mode %s: give the state file: "
			    "persistent:/abs/path",
			    arg);
	if (!strncmp(arg, persistent, plen)) {
		r->mode = ROOTFS_PERSISTENT;
		return replace_string(&r->state_path, arg + plen);
	}
	if (mode < 0)
		return errf(err, len, -EINVAL,
			    "--rootfs-mode %s: must be ephemeral, readonly or "
			    "persistent:/abs/path",
			    arg);
	r->mode = mode;
	/* Overrides a persistent mode from --config, state file included. */
	free(r->state_path);
	r->state_path = NULL;
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
static const struct option_desc options[] = {
	{
		.flag = "kernel",
		.arg = "PATH",
		.key = "kernel",
		.help = "ELF vmlinux or bzImage (x86-64, 64-bit boot protocol)",
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
			"readonly, or persistent:/abs/state/file",
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
		.flag = "max-dirty-bytes",
		.arg = "N",
		.key = "rootfs.maxDirtyBytes",
		.help = "cap on changed bytes, K/M/G/KiB/MiB/GiB suffixes, 0: no\n"
			"cap (default 64MiB ephemeral, none persistent)",
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
		.flag = "pid-file",
		.arg = "PATH",
		.help = "start --detach: write the VM process's pid there",
		STRING_FIELD(pid_file),
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

/* ---- values: from text or JSON, by kind, then stored ------------------ */

/*
 * "a or b", "a, b or c", each word in quote marks: the words of the
 * '|'-separated text alt (--help's "full|cached"), or with alt NULL those
 * of the NULL-terminated list.
 */
static void or_list(char *buf, size_t len, const char *const *list,
		    const char *alt, const char *quote)
{
	const char *words[16];
	size_t n = 0, i, at = 0;
	char copy[128];
	char *p, *save;

	if (alt) {
		snprintf(copy, sizeof(copy), "%s", alt);
		for (p = strtok_r(copy, "|", &save); p && n < ARRAY_SIZE(words);
		     p = strtok_r(NULL, "|", &save))
			words[n++] = p;
	} else {
		for (; list[n] && n < ARRAY_SIZE(words); n++)
			words[n] = list[n];
	}
	buf[0] = 0;
	for (i = 0; i < n && at < len; i++) {
		const char *sep = i == 0 ? "" : i + 1 < n ? ", " : " or ";

		at += snprintf(buf + at, len - at, "%s%s%s%s", sep, quote,
			       words[i], quote);
	}
}

/* What a text kind's value looks like, for its error message. */
static const char *kind_form(enum option_kind kind)
{
	switch (kind) {
	case OPTION_IPV4:
		return "an IPv4 address (A.B.C.D)";
	case OPTION_CIDR:
		return "an IPv4 address with a prefix length (A.B.C.D/N)";
	case OPTION_MAC:
		return "a MAC address (xx:xx:xx:xx:xx:xx)";
	default:
		return "valid";
	}
}

/* The text kinds, the same from the command line and from JSON. */
static int from_string(const struct option_desc *o, const char *s,
		       union option_value *v)
{
	switch (o->kind) {
	case OPTION_IPV4:
		v->ip.prefix = 0;
		return netcfg__parse_ipv4(s, &v->ip.addr);
	case OPTION_CIDR:
		return netcfg__parse_cidr(s, &v->ip.addr, &v->ip.prefix);
	case OPTION_MAC:
		return netcfg__parse_mac(s, v->mac);
	default:
		return -EINVAL;
	}
}

/*
 * OPTION_MIB: "256" is 256 MiB, as --memory always read it; "512M",
 * "2G", "1048576K" are bytes (parse__size) in whole MiB. -EDOM: not
 * whole MiB.
 */
static int parse_mib(const char *s, uint64_t max, uint64_t *out)
{
	uint64_t bytes;
	int ret;

	ret = parse__uint(s, max, out);
	if (ret != -EINVAL)
		return ret;
	ret = parse__size(s, max << 20, &bytes);
	if (ret)
		return ret;
	if (bytes & ((1ULL << 20) - 1))
		return -EDOM;
	*out = bytes >> 20;
	return 0;
}

/* OPTION_MIB's message for parse_mib's ret; what is "--flag" or "\"key\"". */
static int mib_error(const char *what, const char *s, int ret, char *err,
		     size_t len)
{
	if (ret == -EDOM)
		return errf(err, len, -EINVAL,
			    "%s %s: not a whole number of MiB", what, s);
	if (ret == -ERANGE)
		return errf(err, len, ret, "%s %s: out of range", what, s);
	return errf(err, len, -EINVAL,
		    "%s %s: not a size (MiB, or bytes with a K, M, G or T "
		    "suffix: 256, 512M, 2G)",
		    what, s);
}

/* --flag TEXT (TEXT NULL for a flag that takes none). */
static int from_text(const struct option_desc *o, const char *arg,
		     union option_value *v, char *err, size_t len)
{
	char choices[256];
	int ret, i;

	switch (o->kind) {
	case OPTION_STRING:
		v->s = arg;
		return 0;
	case OPTION_FLAG:
		v->b = true;
		return 0;
	case OPTION_UINT:
		ret = parse__uint(arg, o->max, &v->u);
		if (ret == -EINVAL)
			return errf(err, len, ret,
				    "--%s %s: not a decimal number", o->flag,
				    arg);
		if (ret)
			return errf(err, len, ret, "--%s %s: out of range",
				    o->flag, arg);
		return 0;
	case OPTION_SIZE:
		ret = parse__size(arg, o->max, &v->u);
		if (ret == -EINVAL)
			return errf(err, len, ret,
				    "--%s %s: not a byte count (digits, "
				    "optionally K, M, G, KiB, MiB or GiB)",
				    o->flag, arg);
		if (ret)
			return errf(err, len, ret, "--%s %s: out of range",
				    o->flag, arg);
		return 0;
	case OPTION_MIB:
		ret = parse_mib(arg, o->max, &v->u);
		if (ret) {
			snprintf(choices, sizeof(choices), "--%s", o->flag);
			return mib_error(choices, arg, ret, err, len);
		}
		return 0;
	case OPTION_CHOICE:
		i = choice_index(o->choices, arg);
		if (i >= 0) {
			v->choice = i;
			return 0;
		}
		or_list(choices, sizeof(choices), o->choices, o->arg, "");
		return errf(err, len, -EINVAL, "--%s %s: must be %s", o->flag,
			    arg, choices);
	case OPTION_IPV4:
	case OPTION_CIDR:
	case OPTION_MAC:
		if (!from_string(o, arg, v))
			return 0;
		return errf(err, len, -EINVAL, "--%s %s: not %s", o->flag, arg,
			    kind_form(o->kind));
	case OPTION_JSON:
		break;
	}
	return errf(err, len, -EINVAL, "--%s: not a command-line option",
		    o->flag);
}

/* "key": JSON. */
static int from_json(const struct option_desc *o, json_t *j,
		     union option_value *v, char *err, size_t len)
{
	char choices[256];
	json_int_t n = json_is_integer(j) ? json_integer_value(j) : -1;
	int i;

	switch (o->kind) {
	case OPTION_STRING:
		if (!json_is_string(j))
			return errf(err, len, -EINVAL,
				    "\"%s\" must be a string", o->key);
		v->s = json_string_value(j);
		return 0;
	case OPTION_FLAG:
		if (!json_is_boolean(j))
			return errf(err, len, -EINVAL,
				    "\"%s\" must be true or false", o->key);
		v->b = json_is_true(j);
		return 0;
	case OPTION_UINT:
		if (n < 0 || (uint64_t)n > o->max)
			return errf(err, len, -EINVAL,
				    "\"%s\" must be an integer from 0 to %llu",
				    o->key, (unsigned long long)o->max);
		v->u = n;
		return 0;
	case OPTION_SIZE:
		if (n >= 0 && (uint64_t)n <= o->max) {
			v->u = n;
			return 0;
		}
		if (json_is_string(j) &&
		    !parse__size(json_string_value(j), o->max, &v->u))
			return 0;
		return errf(err, len, -EINVAL,
			    "\"%s\" must be a byte count (an integer, or a "
			    "string such as \"64MiB\")",
			    o->key);
	case OPTION_MIB:
		if (n >= 0 && (uint64_t)n <= o->max) {
			v->u = n;
			return 0;
		}
		if (!json_is_string(j))
			return errf(err, len, -EINVAL,
				    "\"%s\" must be an integer from 0 to %llu, "
				    "or a string such as \"2G\"",
				    o->key, (unsigned long long)o->max);
		i = parse_mib(json_string_value(j), o->max, &v->u);
		if (!i)
			return 0;
		snprintf(choices, sizeof(choices), "\"%s\"", o->key);
		return mib_error(choices, json_string_value(j), i, err, len);
	case OPTION_CHOICE:
		i = json_is_string(j) ?
			    choice_index(o->choices, json_string_value(j)) :
			    -1;
		if (i >= 0) {
			v->choice = i;
			return 0;
		}
		or_list(choices, sizeof(choices), o->choices, NULL, "\"");
		return errf(err, len, -EINVAL, "\"%s\" must be %s", o->key,
			    choices);
	case OPTION_JSON:
		v->json = j;
		return 0;
	case OPTION_IPV4:
	case OPTION_CIDR:
	case OPTION_MAC:
		if (json_is_string(j) &&
		    !from_string(o, json_string_value(j), v))
			return 0;
		return errf(err, len, -EINVAL, "\"%s\" must be %s as a string",
			    o->key, kind_form(o->kind));
	}
	return -EINVAL;
}

static int store(struct vm_config *c, const struct option_desc *o,
		 const union option_value *v, char *err, size_t len)
{
	void *field = (char *)c + o->offset;

	if (o->apply)
		return o->apply(c, v, err, len);
	switch (o->kind) {
	case OPTION_STRING:
		return replace_string(field, v->s);
	case OPTION_UINT:
	case OPTION_SIZE:
	case OPTION_MIB:
		*(uint64_t *)field = v->u;
		return 0;
	case OPTION_FLAG:
		*(bool *)field = v->b;
		return 0;
	case OPTION_CHOICE:
	case OPTION_JSON:
	case OPTION_IPV4:
	case OPTION_CIDR:
	case OPTION_MAC:
		break;
	}
	return -EINVAL; /* a table entry without its apply function */
}

/* ---- the command line ------------------------------------------------ */

static const char usage_head[] =
	"usage: vmm run --kernel PATH [--initrd PATH] [--cmdline STR] [--cpus N]\n"
	"               [--memory SIZE] [--rootfs DESC [--rootfs-mode M] ...]\n"
	"               [--vsock-socket PATH [--vsock-cid N]] [--mount SPEC]...\n"
	"               [--net auto|netns:PATH|tap-fd:N [--net-address A.B.C.D/N] ...]\n"
	"               [--no-seccomp] [--verbose] [-- COMMAND ARGS...]\n"
	"       vmm run --config FILE.json [options] [-- COMMAND ARGS...]\n"
	"       vmm start --control-socket PATH [--detach [--pid-file PATH]]\n"
	"                 [--restore DIR | --baseline-cache DIR] [options]\n"
	"       vmm start --jail DIR --uid U --gid G [--cgroup PATH ...] [options]\n"
	"       vmm facts [--config FILE.json] [options]\n"
	"       vmm snapshot pack [--level N] DIR FILE | unpack FILE DIR\n"
	"       vmm --help | --version\n"
	"\n"
	"Boots a Linux microVM on KVM, runs COMMAND in it and exits with its status.\n"
	"vmm facts prints the configuration facts vm.facts would give for the\n"
	"same options, without booting (Documentation/api.md, \"Facts\").\n"
	"vmm snapshot pack verifies the snapshot DIR and writes it as one zstd\n"
	"archive FILE; unpack makes the directory DIR from one, verified, for\n"
	"--restore (Documentation/snapshots.md, \"Archives\").\n"
	"\n";

static const char usage_tail[] =
	"\n"
	"Exit status: COMMAND's status (128+N if signal N killed it); 123 if the\n"
	"guest crashed or reset before reporting one; 125 if the vmm failed or its\n"
	"input was bad.\n";

/* The line *s starts with (length in *n); *s moves past it. NULL: no more. */
static const char *next_line(const char **s, int *n)
{
	const char *line = *s, *nl;

	if (!line)
		return NULL;
	nl = strchrnul(line, '\n');
	*n = nl - line;
	*s = *nl ? nl + 1 : NULL;
	return line;
}

/*
 * "  --flag ARG" (one line per form of the argument), then the help from
 * HELP_COLUMN: on the same line when the flag leaves room, else below.
 */
static void print_option(FILE *f, const struct option_desc *o)
{
	const char *arg = o->arg, *help = o->help, *line;
	int col = 0, n;

	do {
		if (col)
			fputc('\n', f);
		col = o->short_flag ? fprintf(f, "  -%c, --%s", o->short_flag,
					      o->flag) :
				      fprintf(f, "  --%s", o->flag);
		line = next_line(&arg, &n);
		if (line)
			col += fprintf(f, " %.*s", n, line);
	} while (arg);
	if (col + 2 <= HELP_COLUMN)
		fprintf(f, "%*s", HELP_COLUMN - col, "");
	else
		fprintf(f, "\n%*s", HELP_COLUMN, "");
	while ((line = next_line(&help, &n))) {
		fprintf(f, "%.*s\n", n, line);
		if (help)
			fprintf(f, "%*s", HELP_COLUMN, "");
	}
}

void options__usage(FILE *f)
{
	size_t i;

	fputs(usage_head, f);
	for (i = 0; i < ARRAY_SIZE(options); i++)
		if (options[i].flag && options[i].help)
			print_option(f, &options[i]);
	fputs(usage_tail, f);
}

/* getopt_long's table, from ours: val is OPTION_VAL_BASE + the index. */
static void long_options(struct option *lo)
{
	size_t i, n = 0;

	for (i = 0; i < ARRAY_SIZE(options); i++) {
		if (!options[i].flag)
			continue;
		lo[n++] = (struct option){
			.name = options[i].flag,
			.has_arg = options[i].kind == OPTION_FLAG ?
					   no_argument :
					   required_argument,
			.val = OPTION_VAL_BASE + i,
		};
	}
	lo[n++] = (struct option){ .name = "help", .val = 'h' };
	lo[n] = (struct option){ 0 };
}

/*
 * "+:h" and each short flag: stop at the first non-option (the command);
 * ':' for a missing value (lib/getopt-exact.h).
 */
static void short_options(char *s, size_t len)
{
	size_t i, n = 0;

	s[n++] = '+';
	s[n++] = ':';
	s[n++] = 'h';
	for (i = 0; i < ARRAY_SIZE(options) && n + 1 < len; i++)
		if (options[i].short_flag)
			s[n++] = options[i].short_flag;
	s[n] = 0;
}

static const struct option_desc *option_for_val(int val)
{
	size_t i;

	if (val >= OPTION_VAL_BASE &&
	    (size_t)(val - OPTION_VAL_BASE) < ARRAY_SIZE(options))
		return &options[val - OPTION_VAL_BASE];
	for (i = 0; i < ARRAY_SIZE(options); i++)
		if (options[i].short_flag && options[i].short_flag == val)
			return &options[i];
	return NULL;
}

static int apply_arg(struct vm_config *c, const struct option_desc *o,
		     const char *arg)
{
	char err[OPTIONS_ERR_LEN] = "";
	union option_value v;
	int ret;

	ret = from_text(o, arg, &v, err, sizeof(err));
	if (!ret)
		ret = store(c, o, &v, err, sizeof(err));
	if (ret && !err[0])
		errf(err, sizeof(err), ret, "--%s: %s", o->flag,
		     strerror(-ret));
	if (ret)
		pr_err("%s", err);
	return ret;
}

/*
 * What the top-level Makefile builds where (O=DIR, default build): the
 * guest in DIR/guest/, its test image's descriptor and the root images'
 * in DIR/images/; and the make target that builds each.
 */
static const struct {
	const char *path; /* under DIR */
	const char *target;
} built_files[] = {
	{ "guest/vmlinux", "guest" },
	{ "guest/bzImage", "guest" },
	{ "guest/initramfs.cpio", "guest" },
	{ "guest/e2fsck.cpio", "guest" },
	{ "images/kiln-test.json", "guest" },
	{ "images/debian-12-agent.json", "image" },
};

/*
 * A kernel, initrd or image descriptor that does not exist, at a path
 * ending in one of built_files[]: one line that says which make target
 * builds it, as the options are read: "build/guest/vmlinux: No such file
 * or directory (make guest builds it)"; when DIR is not named build,
 * "(make O=DIR guest builds it)". Any other path (guest/vmlinux with no
 * DIR before it too), and any other failure, is for the file's reader to
 * report (vm.c, rootfs.c), as it was.
 */
static int check_built_file(const char *path)
{
	size_t n, fn, dn, i;
	const char *base;

	if (!path || !access(path, F_OK) || errno != ENOENT)
		return 0;
	n = strlen(path);
	for (i = 0; i < ARRAY_SIZE(built_files); i++) {
		fn = strlen(built_files[i].path);
		if (n <= fn + 1 || path[n - fn - 1] != '/' ||
		    strcmp(path + n - fn, built_files[i].path))
			continue;
		/* DIR is path[0..dn), its last component at base. */
		dn = n - fn - 1;
		base = memrchr(path, '/', dn);
		base = base ? base + 1 : path;
		if (path + dn - base == 5 && !strncmp(base, "build", 5))
			pr_err("%s: %s (make %s builds it)", path,
			       strerror(ENOENT), built_files[i].target);
		else
			pr_err("%s: %s (make O=%.*s %s builds it)", path,
			       strerror(ENOENT), (int)dn, path,
			       built_files[i].target);
		return -ENOENT;
	}
	return 0;
}

static int check_built(const struct vm_config *c)
{
	int ret;

	ret = check_built_file(c->kernel_path);
	if (!ret)
		ret = check_built_file(c->initrd_path);
	if (!ret)
		ret = check_built_file(c->rootfs.descriptor);
	return ret;
}

int options__parse_argv(struct vm_config *c, int argc, char **argv)
{
	struct option lo[ARRAY_SIZE(options) + 2];
	char so[16], err[OPTIONS_ERR_LEN] = "";
	const struct option_desc *o;
	int opt, ret;

	long_options(lo);
	short_options(so, sizeof(so));
	optind = 1;
	while ((opt = getopt_exact__next(argc, argv, so, lo, err,
					 sizeof(err))) != -1) {
		if (opt == 'h') {
			options__usage(stdout);
			return OPTIONS_HELP;
		}
		o = option_for_val(opt);
		if (!o) {
			/* One line, not the usage: the contract for bad input. */
			pr_err("%s: %s", argv[0], err);
			return -EINVAL;
		}
		ret = apply_arg(c, o, optarg);
		if (ret)
			return ret;
	}
	if (optind < argc && strcmp(argv[optind - 1], "--")) {
		pr_err("unexpected argument '%s' (put the guest command after "
		       "--)",
		       argv[optind]);
		return -EINVAL;
	}
	if (optind < argc) {
		ret = config__set_argv(c, argv + optind, argc - optind);
		if (ret)
			return ret;
	}
	return c->facts ? 0 : check_built(c);
}

/* ---- JSON ------------------------------------------------------------ */

/* The entry for key, top level (section NULL) or inside section. */
static const struct option_desc *option_for_key(const char *section,
						const char *key)
{
	size_t i, n = section ? strlen(section) : 0;
	const char *k;

	for (i = 0; i < ARRAY_SIZE(options); i++) {
		k = options[i].key;
		if (!k)
			continue;
		if (section && (strncmp(k, section, n) || k[n] != '.'))
			continue;
		if (section)
			k += n + 1;
		else if (strchr(k, '.'))
			continue;
		if (!strcmp(k, key))
			return &options[i];
	}
	return NULL;
}

/*
 * Whether key is a section (the table has "key.x" entries); hint gets its
 * first two keys, "..." when there are more: ("image", "mode", ...).
 */
static bool is_section(const char *key, char *hint, size_t len)
{
	size_t i, n = strlen(key), at = 0;
	unsigned int found = 0;

	hint[0] = 0;
	for (i = 0; i < ARRAY_SIZE(options); i++) {
		const char *k = options[i].key;

		if (!k || strncmp(k, key, n) || k[n] != '.')
			continue;
		if (found < 2 && at < len)
			at += snprintf(hint + at, len - at, "%s\"%s\"",
				       found ? ", " : "", k + n + 1);
		else if (found == 2 && at < len)
			at += snprintf(hint + at, len - at, ", ...");
		found++;
	}
	return found;
}

static int apply_value(struct vm_config *c, const struct option_desc *o,
		       json_t *j, char *err, size_t len)
{
	union option_value v;
	int ret;

	ret = from_json(o, j, &v, err, len);
	if (!ret)
		ret = store(c, o, &v, err, len);
	return ret;
}

static int apply_section(struct vm_config *c, const char *section, json_t *obj,
			 const char *hint, char *err, size_t len)
{
	const struct option_desc *o;
	const char *key;
	json_t *v;
	int ret;

	if (!json_is_object(obj))
		return errf(err, len, -EINVAL, "\"%s\" must be an object (%s)",
			    section, hint);
	json_object_foreach(obj, key, v)
	{
		o = option_for_key(section, key);
		if (!o)
			return errf(err, len, -EINVAL, "unknown key \"%s.%s\"",
				    section, key);
		ret = apply_value(c, o, v, err, len);
		if (ret)
			return ret;
	}
	return 0;
}

int options__apply_json(struct vm_config *c, void *json_obj, char *err,
			size_t len)
{
	const struct option_desc *o;
	const char *key;
	char hint[128];
	json_t *v;
	int ret;

	json_object_foreach((json_t *)json_obj, key, v)
	{
		o = option_for_key(NULL, key);
		if (o)
			ret = apply_value(c, o, v, err, len);
		else if (is_section(key, hint, sizeof(hint)))
			ret = apply_section(c, key, v, hint, err, len);
		else
			ret = errf(err, len, -EINVAL, "unknown key \"%s\"",
				   key);
		if (ret)
			return ret;
	}
	return 0;
}
