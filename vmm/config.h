/* SPDX-License-Identifier: GPL-2.0 */
#ifndef KILN_CONFIG_H
#define KILN_CONFIG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "lib/compiler.h"
#include "lib/log.h"
#include "net/netcfg.h"
#include "vmm/jail.h"
#include "vmm/mounts.h"

#define CONFIG_DEFAULT_CPUS    1U
#define CONFIG_DEFAULT_MEM_MIB 256U
#define CONFIG_MIN_MEM_MIB     16U	  /* a kernel and an initramfs */
#define CONFIG_MAX_MEM_MIB     (1U << 20) /* 1 TiB */
/* Taken from the kernel's directory when no initrd is given. */
#define CONFIG_DEFAULT_INITRD "initramfs.cpio"

/* The guest's root disk (Documentation/rootfs.md). */
enum rootfs_mode {
	ROOTFS_EPHEMERAL, /* default: changes in memory for one boot */
	ROOTFS_READONLY,
	ROOTFS_PERSISTENT, /* changes kept in state_path */
	ROOTFS_COW,	   /* changes kept by the block store at store_socket */
};

#define CONFIG_DEFAULT_MAX_DIRTY_BYTES (64ULL << 20) /* ephemeral, cow */
#define CONFIG_ROOTFS_SOCKET_MAX       108U /* sun_path, NUL included */

struct rootfs_config {
	char *descriptor; /* image descriptor JSON; NULL: no root disk */
	enum rootfs_mode mode;
	char *state_path;	  /* ROOTFS_PERSISTENT: absolute path */
	char *store_socket;	  /* ROOTFS_COW: the store's Unix socket */
	uint64_t max_dirty_bytes; /* bytes; 0: no limit */
	bool max_dirty_set;	  /* given explicitly (else mode's default) */
	bool direct;		  /* O_DIRECT on the image and state file */
	bool verify_full;	  /* hash the image even if the cache vouches */
};

/*
 * virtio-vsock (Documentation/cli.md): the guest's CID and the host side,
 * Unix sockets. The path leaves room in a sockaddr_un (108 bytes) for the
 * "_PORT" of guest-initiated connections.
 */
#define CONFIG_DEFAULT_VSOCK_CID 3U
#define CONFIG_MAX_VSOCK_CID	 0xfffffffeULL /* U32_MAX: VMADDR_CID_ANY */
#define CONFIG_VSOCK_PATH_MAX	 96U	       /* bytes */

struct vsock_config {
	char *socket_path; /* listening socket; NULL: no vsock device */
	uint64_t cid;	   /* CONFIG_DEFAULT_VSOCK_CID..CONFIG_MAX_VSOCK_CID */
	bool cid_set;	   /* given explicitly */
};

/*
 * start --baseline-cache DIR (Documentation/snapshots.md, "Baselines"):
 * the cache of pre-workload snapshots and its bounds.
 */
#define CONFIG_DEFAULT_BASELINE_MAX_ARTIFACTS 8ULL
/* start --detach: the guest agent's first answer is due in 5 minutes. */
#define CONFIG_DETACH_READY_TIMEOUT_MS	  300000ULL
#define CONFIG_DEFAULT_BASELINE_MAX_BYTES (8ULL << 30) /* data bytes */
#define CONFIG_MAX_BASELINE_MAX_ARTIFACTS 4096ULL

struct baseline_config {
	char *cache;		/* the cache directory; NULL: no baselines */
	uint64_t max_artifacts; /* entries kept, 1.. */
	uint64_t max_bytes;	/* bytes of the entries' data, 1.. */
	/*
	 * Set by main() alone, for its one cold retry after a restore
	 * from the cache failed: look nothing up, capture anew.
	 */
	bool no_lookup;
};

/*
 * What isolates the guest (Documentation/design.md, "Namespace
 * isolation"): a KVM microVM, or the same agent in Linux namespaces on
 * the host's kernel (vmm/isolate-ns.h), for hosts without usable KVM.
 */
enum isolation {
	ISOLATION_VM, /* default */
	ISOLATION_NAMESPACE,
};

/* Everything `vmm run` needs, validated before anything is built. */
struct vm_config {
	char *kernel_path;
	char *initrd_path;    /* NULL: none */
	char *cmdline;	      /* appended to the defaults; may be NULL */
	unsigned int nr_cpus; /* 1..KILN_MAX_CPUS */
	uint64_t mem_mib;     /* MiB */
	char **argv;	      /* command for the guest; NULL: none */
	struct rootfs_config rootfs;
	struct vsock_config vsock;
	struct mounts_config
		mounts; /* virtio-fs (Documentation/virtio-fs.md) */
	/* virtio-net (Documentation/network.md) */
	struct net_config net;
	/* The boot's identity (vmm/identity.h), checked by config__validate. */
	char *hostname; /* the guest's; set to the default by validation */
	char *cwd;	/* default working directory; NULL: "/" */
	char *control_socket; /* JSON-RPC control API (api.md); NULL: none */
	/*
	 * The console's log (vmm/console-log.h); NULL: none, except that
	 * start --detach gets one next to the control socket.
	 */
	char *console_log;
	uint64_t console_log_max_bytes; /* bytes: the live file's cap */
	uint64_t console_log_keep;	/* rotated files kept */
	uint64_t agent_timeout_ms; /* a call's wait for the agent; 0: default */
	/*
	 * start: the guest agent's first answer is due this long after the
	 * start, or the VM is stopped (0: no limit); with ready_timeout_set
	 * clear, CONFIG_DETACH_READY_TIMEOUT_MS for --detach, else 0.
	 */
	uint64_t ready_timeout_ms;
	bool ready_timeout_set;
	/* --metrics FILE (vmm/metrics.h): a line per interval; NULL: none */
	char *metrics_path;
	uint64_t metrics_interval_ms; /* ms, METRICS_MIN/MAX_INTERVAL_MS */
	bool start;	/* `vmm start`: serve until shutdown, no command */
	bool facts;	/* `vmm facts`: no VM; run's and start's options */
	bool detach;	/* start: return once the guest agent is ready */
	char *pid_file; /* start --detach: the VM's pid goes here */
	/* --trace-startup FILE (vmm/trace-startup.h); NULL: none */
	char *trace_startup_path;
	/*
	 * --die-with-parent: the process that ran the vmm exits, the VM is
	 * shut down (vmm/vm-run.c, Documentation/cli.md).
	 */
	bool die_with_parent;
	/*
	 * start --restore DIR: the snapshot to resume instead of a boot
	 * (Documentation/snapshots.md, "Restore"); NULL: boot.
	 */
	char *restore_dir;
	struct baseline_config baseline;
	bool verbose;
	/* --log, --log-level, --log-format: the vmm's own lines (lib/log.h) */
	char *log_path;		  /* NULL: stderr */
	enum log_level log_level; /* with log_level_set */
	bool log_level_set;
	enum log_format log_format;
	bool seccomp;		  /* filter the running monitor */
	struct jail_config jail;  /* --jail (vmm/jail.h); dir NULL: none */
	enum isolation isolation; /* --isolation */
};

/* Room for a path, a field and two digests (rootfs verification). */
#define CONFIG_ERR_LEN 512

void config__init(struct vm_config *c);
void config__free(struct vm_config *c);
int __must_check config__set_argv(struct vm_config *c, char *const argv[],
				  int argc);
/*
 * Checks ranges against each other and the host, and the root image's
 * descriptor (parsed, not hashed: see rootfs__verify). Fills in the
 * defaults that depend on other settings (rootfs.max_dirty_bytes).
 * err as above.
 */
int __must_check config__validate(struct vm_config *c, char *err,
				  size_t errlen);
/* The modes' names ("ephemeral", ...) by enum rootfs_mode, NULL-terminated. */
extern const char *const config__rootfs_modes[];
/* --isolation's names ("vm", "namespace") by enum isolation. */
extern const char *const config__isolations[];
const char *config__rootfs_mode_name(enum rootfs_mode mode);

#endif
