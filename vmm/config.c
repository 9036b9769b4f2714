// SPDX-License-Identifier: GPL-2.0
/*
 * The VM's configuration: one plain struct, filled from the command line or a
 * JSON document (parsed by jansson) through the option table (options.c),
 * validated completely before use.
 */
#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/sysinfo.h>
#include <unistd.h>

#include "bootloader/boot.h"
#include "lib/compiler.h"
#include "lib/errf.h"
#include "vmm/config.h"
#include "vmm/console-log.h"
#include "vmm/identity.h"
#include "vmm/jail.h"
#include "vmm/metrics.h"
#include "vmm/rootfs.h"

void config__init(struct vm_config *c)
{
	memset(c, 0, sizeof(*c));
	c->nr_cpus = CONFIG_DEFAULT_CPUS;
	c->mem_mib = CONFIG_DEFAULT_MEM_MIB;
	c->vsock.cid = CONFIG_DEFAULT_VSOCK_CID;
	c->console_log_max_bytes = CONSOLE_LOG_DEFAULT_MAX_BYTES;
	c->console_log_keep = CONSOLE_LOG_DEFAULT_KEEP;
	c->metrics_interval_ms = METRICS_DEFAULT_INTERVAL_MS;
	c->seccomp = true;
	c->baseline.max_artifacts = CONFIG_DEFAULT_BASELINE_MAX_ARTIFACTS;
	c->baseline.max_bytes = CONFIG_DEFAULT_BASELINE_MAX_BYTES;
}

static void free_argv(char **argv)
{
	char **a;

	for (a = argv; a && *a; a++)
		free(*a);
	free(argv);
}

void config__free(struct vm_config *c)
{
	free(c->kernel_path);
	free(c->initrd_path);
	free(c->cmdline);
	free_argv(c->argv);
	free(c->rootfs.descriptor);
	free(c->rootfs.state_path);
	free(c->rootfs.store_socket);
	mounts__free(&c->mounts);
	netcfg__free(&c->net);
	free(c->vsock.socket_path);
	free(c->hostname);
	free(c->cwd);
	free(c->control_socket);
	free(c->console_log);
	free(c->metrics_path);
	free(c->log_path);
	free(c->pid_file);
	free(c->trace_startup_path);
	jail__config_free(&c->jail);
	free(c->restore_dir);
	free(c->baseline.cache);
	memset(c, 0, sizeof(*c));
}

const char *const config__rootfs_modes[] = {
	[ROOTFS_EPHEMERAL] = "ephemeral",
	[ROOTFS_READONLY] = "readonly",
	[ROOTFS_PERSISTENT] = "persistent",
	[ROOTFS_COW] = "cow",
	NULL,
};

const char *const config__isolations[] = {
	[ISOLATION_VM] = "vm",
	[ISOLATION_NAMESPACE] = "namespace",
	NULL,
};

const char *config__rootfs_mode_name(enum rootfs_mode mode)
{
	if ((size_t)mode < ARRAY_SIZE(config__rootfs_modes) - 1)
		return config__rootfs_modes[mode];
	return "?";
}

int config__set_argv(struct vm_config *c, char *const argv[], int argc)
{
	char **v;
	int i;

	v = calloc(argc + 1, sizeof(*v));
	if (!v)
		return -ENOMEM;
	for (i = 0; i < argc; i++) {
		v[i] = strdup(argv[i]);
		if (!v[i]) {
			free_argv(v);
			return -ENOMEM;
		}
	}
	free_argv(c->argv);
	c->argv = v;
	return 0;
}

static uint64_t host_mem_mib(void)
{
	struct sysinfo si;

	if (sysinfo(&si))
		return CONFIG_MAX_MEM_MIB;
	return (uint64_t)si.totalram * si.mem_unit >> 20;
}

/*
 * The root disk's settings against each other, then its descriptor (parsed
 * here so a bad one is refused before anything is built; the image itself
 * is hashed when the disk is opened).
 */
static int validate_rootfs(struct rootfs_config *r, char *err, size_t len)
{
	const char *mode = config__rootfs_mode_name(r->mode);
	struct rootfs_image img;
	int ret;

	if (!r->descriptor) {
		if (r->mode != ROOTFS_EPHEMERAL || r->state_path ||
		    r->store_socket || r->max_dirty_set || r->direct ||
		    r->verify_full)
			return errf(err, len, -EINVAL,
				    "rootfs options given without a root image "
				    "(--rootfs DESCRIPTOR.json or "
				    "\"rootfs\": {\"image\": ...})");
		return 0;
	}
	if (!*r->descriptor)
		return errf(err, len, -EINVAL,
			    "rootfs image descriptor: empty path");
	if (r->mode == ROOTFS_PERSISTENT && !r->state_path)
		return errf(err, len, -EINVAL,
			    "rootfs mode persistent needs a state file "
			    "(--rootfs-mode persistent:/abs/path or "
			    "\"statePath\")");
	if (r->mode != ROOTFS_PERSISTENT && r->state_path)
		return errf(err, len, -EINVAL,
			    "rootfs state file \"%s\": only the persistent "
			    "mode keeps one (mode is %s)",
			    r->state_path, mode);
	if (r->mode == ROOTFS_COW && (!r->store_socket || !*r->store_socket))
		return errf(err, len, -EINVAL,
			    "rootfs mode cow needs a block store's socket "
			    "(--rootfs-mode cow:/path/store.sock or "
			    "\"storeSocket\")");
	if (r->mode != ROOTFS_COW && r->store_socket)
		return errf(err, len, -EINVAL,
			    "rootfs block store \"%s\": only the cow mode "
			    "uses one (mode is %s)",
			    r->store_socket, mode);
	if (r->store_socket &&
	    strlen(r->store_socket) >= CONFIG_ROOTFS_SOCKET_MAX)
		return errf(err, len, -EINVAL,
			    "rootfs block store \"%s\": longer than a Unix "
			    "socket path (%u bytes)",
			    r->store_socket, CONFIG_ROOTFS_SOCKET_MAX - 1);
	if (r->state_path && r->state_path[0] != '/')
		return errf(err, len, -EINVAL,
			    "rootfs state file \"%s\": must be an absolute "
			    "path",
			    r->state_path);
	if (r->mode == ROOTFS_READONLY && r->max_dirty_set)
		return errf(err, len, -EINVAL,
			    "--max-dirty-bytes/\"maxDirtyBytes\": only for a "
			    "writable root (mode is readonly)");
	if (!r->max_dirty_set)
		r->max_dirty_bytes =
			r->mode == ROOTFS_EPHEMERAL || r->mode == ROOTFS_COW ?
				CONFIG_DEFAULT_MAX_DIRTY_BYTES :
				0;

	ret = rootfs__load(&img, r->descriptor, err, len);
	if (!ret && r->state_path)
		ret = rootfs__check_state_path(&img, r->state_path, err, len);
	rootfs__free(&img);
	return ret;
}

/* A relative path is fine: it is bound in the monitor's directory. */
static int validate_vsock(const struct vsock_config *vs, char *err, size_t len)
{
	if (!vs->socket_path) {
		if (vs->cid_set)
			return errf(err, len, -EINVAL,
				    "vsock CID given without a socket "
				    "(--vsock-socket PATH or \"vsock\": "
				    "{\"socket\": ...})");
		return 0;
	}
	if (!*vs->socket_path)
		return errf(err, len, -EINVAL, "vsock socket: empty path");
	if (strlen(vs->socket_path) > CONFIG_VSOCK_PATH_MAX)
		return errf(err, len, -ENAMETOOLONG,
			    "vsock socket \"%s\": longer than %u bytes (a "
			    "Unix socket path, plus \"_PORT\" for guest "
			    "connections)",
			    vs->socket_path, CONFIG_VSOCK_PATH_MAX);
	if (vs->cid < CONFIG_DEFAULT_VSOCK_CID ||
	    vs->cid > CONFIG_MAX_VSOCK_CID)
		return errf(err, len, -EINVAL,
			    "vsock CID %llu: must be between %u and %llu "
			    "(0-2 are reserved, %llu is \"any\")",
			    (unsigned long long)vs->cid,
			    CONFIG_DEFAULT_VSOCK_CID,
			    (unsigned long long)CONFIG_MAX_VSOCK_CID,
			    (unsigned long long)CONFIG_MAX_VSOCK_CID + 1);
	return 0;
}

/* --baseline-cache and its bounds (Documentation/snapshots.md). */
static int validate_baseline(const struct vm_config *c, char *err, size_t len)
{
	const struct baseline_config *b = &c->baseline;

	if (!b->cache)
		return 0;
	if (!c->start)
		return errf(err, len, -EINVAL,
			    "--baseline-cache is for vmm start");
	if (b->cache[0] != '/')
		return errf(err, len, -EINVAL,
			    "baseline cache %s: must be an absolute path",
			    b->cache);
	if (c->restore_dir)
		return errf(err, len, -EINVAL,
			    "--baseline-cache and --restore: one or the other");
	if (c->jail.dir)
		return errf(err, len, -EINVAL,
			    "--baseline-cache: not with --jail yet (the jail's "
			    "root holds only the VM's files)");
	if (!b->max_artifacts || !b->max_bytes)
		return errf(err, len, -EINVAL,
			    "baseline: maxArtifacts and maxBytes must be at "
			    "least 1");
	return 0;
}

/* The control API and `vmm start`'s own options. */
static int validate_control(const struct vm_config *c, char *err, size_t len)
{
	if (c->control_socket && !c->control_socket[0])
		return errf(err, len, -EINVAL, "control socket: empty path");
	if (c->control_socket &&
	    strlen(c->control_socket) >= CONFIG_VSOCK_PATH_MAX)
		return errf(err, len, -ENAMETOOLONG,
			    "control socket %s: longer than %u bytes",
			    c->control_socket, CONFIG_VSOCK_PATH_MAX - 1);
	/* vmm facts describes either command's configuration. */
	if (c->facts)
		return 0;
	if (c->start && !c->control_socket)
		return errf(err, len, -EINVAL,
			    "vmm start needs --control-socket PATH (or "
			    "\"controlSocket\")");
	if (c->start && c->argv)
		return errf(err, len, -EINVAL,
			    "vmm start takes no command: run commands through "
			    "the control socket (or use vmm run)");
	if (c->detach && !c->start)
		return errf(err, len, -EINVAL, "--detach is for vmm start");
	if (c->pid_file && !c->detach)
		return errf(err, len, -EINVAL, "--pid-file needs --detach");
	if (c->ready_timeout_set && c->ready_timeout_ms && !c->control_socket)
		return errf(err, len, -EINVAL,
			    "--ready-timeout-ms needs --control-socket: the "
			    "guest agent runs only with one");
	if (c->restore_dir && !c->start)
		return errf(err, len, -EINVAL, "--restore is for vmm start");
	return validate_baseline(c, err, len);
}

/* --metrics FILE and its interval (vmm/metrics.h). */
static int validate_metrics(const struct vm_config *c, char *err, size_t len)
{
	if (c->metrics_path && !c->metrics_path[0])
		return errf(err, len, -EINVAL, "metrics: empty path");
	if (c->trace_startup_path && !c->trace_startup_path[0])
		return errf(err, len, -EINVAL, "trace-startup: empty path");
	if (c->metrics_interval_ms < METRICS_MIN_INTERVAL_MS ||
	    c->metrics_interval_ms > METRICS_MAX_INTERVAL_MS)
		return errf(err, len, -EINVAL,
			    "metrics interval %llu ms: must be %u to %u",
			    (unsigned long long)c->metrics_interval_ms,
			    METRICS_MIN_INTERVAL_MS, METRICS_MAX_INTERVAL_MS);
	return 0;
}

/*
 * --console-log and its cap; start --detach without one gets
 * CONSOLE_LOG_DETACH_SUFFIX next to the control socket, so a detached
 * guest's last words are kept.
 */
static int validate_console_log(struct vm_config *c, char *err, size_t len)
{
	if (c->console_log && !c->console_log[0])
		return errf(err, len, -EINVAL, "console log: empty path");
	if (c->log_path && !c->log_path[0])
		return errf(err, len, -EINVAL, "log: empty path");
	if (c->console_log_max_bytes < CONSOLE_LOG_MIN_MAX_BYTES)
		return errf(err, len, -EINVAL,
			    "console log max bytes %llu: must be at least %llu",
			    (unsigned long long)c->console_log_max_bytes,
			    CONSOLE_LOG_MIN_MAX_BYTES);
	if (c->console_log || !c->detach || c->facts)
		return 0;
	c->console_log = console_log__default_path(c->control_socket);
	return c->console_log ? 0 : -ENOMEM;
}

/* --hostname and --cwd; no hostname given: IDENTITY_DEFAULT_HOSTNAME. */
static int validate_identity(struct vm_config *c, char *err, size_t len)
{
	int ret;

	if (!c->hostname) {
		c->hostname = strdup(IDENTITY_DEFAULT_HOSTNAME);
		if (!c->hostname)
			return -ENOMEM;
	}
	ret = identity__check_hostname(c->hostname, err, len);
	if (!ret && c->cwd)
		ret = identity__check_cwd(c->cwd, err, len);
	return ret;
}

/*
 * No --initrd: the Kiln guest's initramfs next to the kernel, if there is
 * one (build/guest/ has both), so that `--kernel K --rootfs D` boots the
 * image through our init, which mounts it and runs the command.
 */
static int default_initrd(struct vm_config *c)
{
	const char *slash;
	char *path;
	int n;

	if (c->initrd_path || !c->kernel_path)
		return 0;
	slash = strrchr(c->kernel_path, '/');
	n = slash ? (int)(slash - c->kernel_path + 1) : 0;
	if (asprintf(&path, "%.*s%s", n, c->kernel_path,
		     CONFIG_DEFAULT_INITRD) < 0)
		return -ENOMEM;
	if (access(path, R_OK)) {
		free(path);
		return 0;
	}
	c->initrd_path = path;
	return 0;
}

int config__validate(struct vm_config *c, char *err, size_t len)
{
	uint64_t max_mib = host_mem_mib();
	int ret;

	if (max_mib > CONFIG_MAX_MEM_MIB)
		max_mib = CONFIG_MAX_MEM_MIB;
	/* A namespace sandbox boots no kernel (vmm/isolate-ns.h). */
	if (!c->kernel_path && c->isolation == ISOLATION_VM)
		return errf(err, len, -EINVAL,
			    "no kernel given (--kernel PATH or \"kernel\")");
	ret = default_initrd(c);
	if (ret)
		return ret;
	if (c->nr_cpus < 1 || c->nr_cpus > KILN_MAX_CPUS)
		return errf(err, len, -EINVAL,
			    "cpus %u: must be between 1 and %u", c->nr_cpus,
			    KILN_MAX_CPUS);
	if (c->mem_mib < CONFIG_MIN_MEM_MIB || c->mem_mib > max_mib)
		return errf(err, len, -EINVAL,
			    "memory %llu MiB: must be between %u and %llu MiB "
			    "(the host's RAM)",
			    (unsigned long long)c->mem_mib, CONFIG_MIN_MEM_MIB,
			    (unsigned long long)max_mib);
	ret = validate_vsock(&c->vsock, err, len);
	if (ret)
		return ret;
	ret = validate_control(c, err, len);
	if (ret)
		return ret;
	if (!c->ready_timeout_set && c->detach)
		c->ready_timeout_ms = CONFIG_DETACH_READY_TIMEOUT_MS;
	ret = validate_identity(c, err, len);
	if (ret)
		return ret;
	ret = validate_console_log(c, err, len);
	if (ret)
		return ret;
	ret = validate_metrics(c, err, len);
	if (ret)
		return ret;
	ret = mounts__validate(&c->mounts, err, len);
	if (ret)
		return ret;
	ret = netcfg__validate(&c->net, err, len);
	if (ret)
		return ret;
	ret = jail__validate(c, err, len);
	if (ret)
		return ret;
	return validate_rootfs(&c->rootfs, err, len);
}
