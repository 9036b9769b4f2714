/* SPDX-License-Identifier: GPL-2.0 */
#ifndef KILN_AGENT_PROTOCOL_H
#define KILN_AGENT_PROTOCOL_H

/*
 * The guest agent's wire protocol, version 1: shared by the guest init
 * (the agent side) and the vmm (the host side). The full description,
 * with examples, is Documentation/agent-protocol.md; this header is the
 * normative list of numbers.
 *
 * Transport: vsock stream connections from the host to KILN_AGENT_PORT in
 * the guest. One connection carries one request: the agent greets with
 * HELLO, the host sends one request message, the two exchange that
 * request's stream messages, the agent ends with RESULT, PROC_EXIT or
 * ERROR and both sides close. Concurrency is concurrent connections; flow
 * control is vsock's own credit (a side that stops reading stops the
 * other's writes), so the protocol needs no window of its own.
 *
 * Every message is a frame: struct kiln_frame (little-endian) then len
 * bytes of payload. Process data messages (PROC_STDIN/STDOUT/STDERR,
 * FS_DATA) carry raw bytes; all others carry a sequence of TLV fields
 * (struct kiln_tlv then len bytes of value, no padding). Integers are 8
 * bytes little-endian (signed where noted); strings and paths are raw
 * bytes without a terminating NUL (paths may be any bytes but NUL). A
 * field may repeat where noted (lists keep their order). Unknown fields
 * are ignored; an unknown message type is answered with ERROR EPROTO.
 */

#include <stdint.h>

#define KILN_AGENT_PORT	   1024U
#define KILN_AGENT_VERSION 1U
#define KILN_FRAME_MAX	   (256U * 1024) /* payload bytes, either way */
#define KILN_DATA_CHUNK	   (64U * 1024)	 /* data frames are at most this */

struct kiln_frame {
	uint32_t len;	/* payload bytes, <= KILN_FRAME_MAX */
	uint16_t type;	/* enum kiln_msg */
	uint16_t flags; /* KILN_F_* */
} __attribute__((packed));

#define KILN_F_EOF 0x1 /* PROC_STDIN: stdin ends (after this payload) */

struct kiln_tlv {
	uint16_t tag; /* enum kiln_tag */
	uint16_t reserved;
	uint32_t len; /* value bytes that follow */
} __attribute__((packed));

enum kiln_msg {
	/* agent -> host, first on every connection */
	KILN_MSG_HELLO = 1, /* T_VERSION, T_FEATURES */
	/* agent -> host: the request failed; the connection ends */
	KILN_MSG_ERROR = 2, /* T_ERRNO, T_ERRNAME, T_MESSAGE */
	/* agent -> host: the request succeeded; the connection ends */
	KILN_MSG_RESULT = 3, /* fields per request */

	/*
	 * Processes. PROC_START: T_ARG (repeated, at least one), T_ENV
	 * (repeated "K=V"; the agent's own environment otherwise; with
	 * T_ENV_MERGE 1, added to the agent's own instead: proto/env.h),
	 * T_CWD, T_USER (run as that user of the guest's /etc/passwd, with
	 * its groups; HOME, USER and LOGNAME from it unless T_ENV replaces
	 * the environment; no T_CWD and no boot cwd: its home directory),
	 * T_TIMEOUT_MS (0: none), T_PTY (1: a terminal of T_ROWS x T_COLS
	 * on stdin/out/err; stderr then comes as STDOUT). The process runs
	 * in a new session and process group. Answered by PROC_STARTED
	 * (T_PID) or ERROR (ENOENT: no such command, EACCES, ...); an
	 * ERROR for the working directory also carries T_CWD, the path; one
	 * for T_USER (no such user: ENOENT) carries T_USER, the name asked.
	 */
	KILN_MSG_PROC_START = 16,
	KILN_MSG_PROC_STARTED = 17,
	KILN_MSG_PROC_STDIN = 18,  /* host -> agent: bytes; KILN_F_EOF */
	KILN_MSG_PROC_STDOUT = 19, /* agent -> host: bytes */
	KILN_MSG_PROC_STDERR = 20, /* agent -> host: bytes */
	KILN_MSG_PROC_SIGNAL = 21, /* host -> agent: T_SIGNAL, to the group */
	KILN_MSG_PROC_RESIZE = 22, /* host -> agent: T_ROWS, T_COLS (pty) */
	/*
	 * agent -> host, last: T_EXIT_CODE (the status; 128 + N when signal
	 * N killed it; 124 when T_TIMED_OUT), T_SIGNAL (when one killed
	 * it), T_TIMED_OUT (1 when the timeout killed the group). Sent once
	 * the process has exited and its output has ended, or 100 ms after
	 * it exited while something else still holds the output open.
	 */
	KILN_MSG_PROC_EXIT = 23,

	/*
	 * Files. Paths are absolute guest paths. Each answers RESULT or
	 * ERROR (T_ERRNO + T_ERRNAME such as "ENOENT").
	 *  FS_STAT    T_PATH: lstat; RESULT = the stat fields below.
	 *  FS_READDIR T_PATH: RESULT = T_ENTRY (repeated; each a nested TLV
	 *             list: T_NAME + the stat fields), "." and ".." left out.
	 *             A directory too big for one frame sends RESULT frames
	 *             with T_MORE = 1 before the last.
	 *  FS_READ    T_PATH [T_OFFSET, T_LENGTH]: FS_DATA frames, then
	 *             RESULT (T_SIZE: bytes sent).
	 *  FS_WRITE   T_PATH [T_MODE, T_CREATE_PARENTS]: create or truncate;
	 *             then host -> agent FS_DATA frames, the last with
	 *             KILN_F_EOF; RESULT (T_SIZE: bytes written).
	 *  FS_MKDIR   T_PATH [T_MODE, T_RECURSIVE]: RESULT.
	 *  FS_REMOVE  T_PATH [T_RECURSIVE, T_FORCE]: RESULT.
	 *  FS_RENAME  T_PATH, T_PATH2: rename(2), no parent creation.
	 */
	KILN_MSG_FS_STAT = 32,
	KILN_MSG_FS_READDIR = 33,
	KILN_MSG_FS_READ = 34,
	KILN_MSG_FS_WRITE = 35,
	KILN_MSG_FS_MKDIR = 36,
	KILN_MSG_FS_REMOVE = 37,
	KILN_MSG_FS_RENAME = 38,
	KILN_MSG_FS_DATA = 39, /* raw bytes, either way */

	/* FACTS: RESULT = T_FACT (repeated; nested T_TOPIC, T_RELATION,
	 * T_VALUE: the guest's {source: "guest", topic, relation, value}). */
	KILN_MSG_FACTS = 48,
	/*
	 * POWEROFF: the guest's init syncs, unmounts what it can and ends
	 * the VM with status 0 (as busybox poweroff). RESULT first; then
	 * the VM goes away. ERROR ENOTSUP where the agent is not in a VM.
	 */
	KILN_MSG_POWEROFF = 49,
	/*
	 * RESEED (host -> agent; only to an agent whose HELLO has
	 * KILN_FEATURE_RESEED): T_SEED, KILN_RESEED_MIN to KILN_RESEED_MAX
	 * bytes from the host's getrandom(). The agent mixes them into the
	 * kernel's input pool (RNDADDENTROPY, credited in full) and then
	 * reseeds the CRNG from it (RNDRESEEDCRNG). RESULT, or ERROR
	 * (EINVAL: no T_SEED or a bad length; the ioctls' errno). The host
	 * sends it to a VM restored from a snapshot before it reports the
	 * agent ready (Documentation/snapshots.md, "What a clone changes").
	 * With a network, and only to an agent whose HELLO has
	 * KILN_FEATURE_NET_RENEW, it also carries the clone's own network:
	 * T_NET_MAC and T_NET, both or neither. The agent then takes eth0
	 * down (the kernel forgets its neighbours and routes: the host side
	 * is a new tap), gives it the MAC, and configures it from T_NET as
	 * init does at boot (MTU, address, up, the default route). ERROR
	 * EINVAL for one without the other or a bad value; the ioctls'
	 * errno, the step in T_MESSAGE.
	 */
	KILN_MSG_RESEED = 50,
	/*
	 * MOUNTS_DETACH, MOUNTS_ATTACH (host -> agent; only to an agent
	 * whose HELLO has KILN_FEATURE_MOUNTS): T_MOUNT (repeated, at most
	 * KILN_MOUNTS_MAX, parents before children; each a nested T_TAG,
	 * T_PATH, T_READ_ONLY), the VM's virtio-fs mounts. DETACH unmounts
	 * them, children first (one that is not mounted is skipped), so the
	 * guest kernel ends each FUSE session (DESTROY); ATTACH mounts each
	 * that is not a mount point yet, making its directory. RESULT, or
	 * ERROR (EINVAL: a bad list; the first failing umount's or mount's
	 * errno, the path in T_MESSAGE: EBUSY when something in the guest
	 * still uses a mount). The host detaches them around a baseline's
	 * capture and attaches them after a restore, before it reports the
	 * agent ready (Documentation/snapshots.md, "Baselines").
	 */
	KILN_MSG_MOUNTS_DETACH = 51,
	KILN_MSG_MOUNTS_ATTACH = 52,

	/*
	 * Containers (host -> agent; only to an agent whose HELLO has
	 * KILN_FEATURE_CONTAINER): a process tree with its own root inside
	 * the guest (Documentation/api.md, "container.create").
	 *  CONTAINER_CREATE T_CONTAINER (the id, 1..KILN_CONTAINER_ID_MAX
	 *             of [A-Za-z0-9_.-]), T_PATH (its root, absolute),
	 *             T_READ_ONLY, T_HOSTNAME, T_CMOUNT (repeated, in
	 *             order; each a nested T_PATH (the destination),
	 *             T_FSTYPE, T_SOURCE, T_OPTION repeated). The agent
	 *             starts a holder process in new mount (and, where the
	 *             kernel has them, UTS, IPC and PID) namespaces that
	 *             mounts the defaults and T_CMOUNTs into the root and
	 *             makes it its root. RESULT, or ERROR (EEXIST: the id is
	 *             taken; the failing step's errno, the container and
	 *             the path in T_MESSAGE).
	 *  CONTAINER_DELETE T_CONTAINER: SIGKILLs the holder and every
	 *             process of the container, waits for them to be gone,
	 *             frees it. RESULT, or ERROR (ENOENT: no such id).
	 *  CONTAINER_LIST: RESULT = T_CONTAINER_ENTRY (repeated; each a
	 *             nested T_CONTAINER and T_PID repeated: the guest pids
	 *             of its processes, the holder left out).
	 * PROC_START with T_CONTAINER runs the command inside that
	 * container: its namespaces, its root, its pid namespace's pid 1
	 * when it is the first (ERROR ENOENT with T_CONTAINER: no such id).
	 */
	KILN_MSG_CONTAINER_CREATE = 53,
	KILN_MSG_CONTAINER_DELETE = 54,
	KILN_MSG_CONTAINER_LIST = 55,
};

/* HELLO's T_FEATURES bits; an agent without a bit lacks what it names. */
#define KILN_FEATURE_RESEED    0x1ULL  /* takes KILN_MSG_RESEED */
#define KILN_FEATURE_MOUNTS    0x2ULL  /* takes KILN_MSG_MOUNTS_* */
#define KILN_FEATURE_NET_RENEW 0x4ULL  /* RESEED with T_NET_MAC, T_NET */
#define KILN_FEATURE_ENV_MERGE 0x8ULL  /* PROC_START takes T_ENV_MERGE */
#define KILN_FEATURE_USER      0x10ULL /* PROC_START takes T_USER */
/* CONTAINER_*, and PROC_START's T_CONTAINER, T_UID, T_GID, T_GROUP,
 * T_RLIMIT, T_NO_NEW_PRIVS */
#define KILN_FEATURE_CONTAINER 0x20ULL
/*
 * A request may carry T_AS_UID (any request: the connection's process
 * becomes that uid, gid the same, no supplementary groups and no new
 * privileges, before it serves it) and an FS_* request T_BENEATH and
 * T_BENEATH2 (T_PATH, T_PATH2 resolved beneath that directory, no
 * symlink or ".." leading out of it: EXDEV). The vmm's scoped sockets
 * (Documentation/personas.md) need it: an agent without it would ignore
 * the fields.
 */
#define KILN_FEATURE_CONFINE 0x40ULL

#define KILN_RESEED_BYTES     64U /* what the vmm sends */
#define KILN_RESEED_MIN	      32U /* T_SEED bytes the agent takes */
#define KILN_RESEED_MAX	      512U
#define KILN_NET_MAC_LEN      6U   /* ETH_ALEN */
#define KILN_NET_MAX	      63U  /* T_NET bytes at most */
#define KILN_USER_MAX	      256U /* T_USER bytes at most (a name or a uid) */
#define KILN_CONTAINER_ID_MAX 64U  /* T_CONTAINER bytes at most */
#define KILN_HOSTNAME_MAX     64U /* T_HOSTNAME bytes at most (HOST_NAME_MAX) */
#define KILN_CMOUNTS_MAX      64U /* T_CMOUNT fields at most */
#define KILN_GROUPS_MAX	      256U /* T_GROUP fields at most */
#define KILN_FSTYPE_MAX	      16U  /* T_FSTYPE bytes at most */

enum kiln_tag {
	KILN_T_VERSION = 1,  /* u64 */
	KILN_T_FEATURES = 2, /* u64, bits: KILN_FEATURE_* */
	KILN_T_ERRNO = 3,    /* u64: the guest's errno value */
	KILN_T_ERRNAME = 4,  /* string: "ENOENT" */
	KILN_T_MESSAGE = 5,  /* string: human-readable detail */

	KILN_T_ARG = 16,	/* bytes, repeated */
	KILN_T_ENV = 17,	/* bytes "K=V", repeated */
	KILN_T_CWD = 18,	/* path */
	KILN_T_TIMEOUT_MS = 19, /* u64 */
	KILN_T_PTY = 20,	/* u64: 0 or 1 */
	KILN_T_ROWS = 21,	/* u64 */
	KILN_T_COLS = 22,	/* u64 */
	KILN_T_PID = 23,	/* u64 */
	KILN_T_EXIT_CODE = 24,	/* u64 */
	KILN_T_SIGNAL = 25,	/* u64 */
	KILN_T_TIMED_OUT = 26,	/* u64: 0 or 1 */
	KILN_T_ENV_MERGE = 27,	/* u64: 0 (T_ENV replaces) or 1 (adds) */
	KILN_T_USER = 28,	/* string: a user name or a decimal uid */
	/*
	 * PROC_START, with KILN_FEATURE_CONTAINER: T_CONTAINER (the id),
	 * T_UID and T_GID (numeric, instead of T_USER; T_GID alone is not
	 * taken), T_GROUP (repeated: the supplementary gids; none: an
	 * empty list), T_RLIMIT (repeated, nested T_RESOURCE (RLIMIT_*
	 * number), T_SOFT, T_HARD; RLIM_INFINITY as all ones),
	 * T_NO_NEW_PRIVS (1: PR_SET_NO_NEW_PRIVS before exec).
	 */
	KILN_T_CONTAINER = 29,	      /* string: a container id */
	KILN_T_GROUP = 30,	      /* u64, repeated */
	KILN_T_RLIMIT = 31,	      /* nested TLV list */
	KILN_T_RESOURCE = 112,	      /* u64: RLIMIT_* */
	KILN_T_SOFT = 113,	      /* u64 */
	KILN_T_HARD = 114,	      /* u64 */
	KILN_T_NO_NEW_PRIVS = 115,    /* u64: 0 or 1 */
	KILN_T_HOSTNAME = 116,	      /* string */
	KILN_T_CMOUNT = 117,	      /* nested TLV list: one container mount */
	KILN_T_FSTYPE = 118,	      /* string: "bind", "tmpfs", "proc", ... */
	KILN_T_SOURCE = 119,	      /* bytes */
	KILN_T_OPTION = 120,	      /* string, repeated */
	KILN_T_CONTAINER_ENTRY = 121, /* nested TLV list */
	KILN_T_AS_UID = 122,	      /* u64: KILN_FEATURE_CONFINE's uid */

	KILN_T_PATH = 32,	    /* path */
	KILN_T_PATH2 = 33,	    /* path */
	KILN_T_OFFSET = 34,	    /* u64 */
	KILN_T_LENGTH = 35,	    /* u64 */
	KILN_T_RECURSIVE = 36,	    /* u64: 0 or 1 */
	KILN_T_FORCE = 37,	    /* u64: 0 or 1 */
	KILN_T_CREATE_PARENTS = 38, /* u64: 0 or 1 */
	KILN_T_MODE = 39,	    /* u64: st_mode (type and permissions) */
	KILN_T_TYPE = 40,	    /* u64: enum kiln_file_type */
	KILN_T_SIZE = 41,	    /* u64 */
	KILN_T_MTIME_NS = 42,	    /* u64: ns since the epoch */
	KILN_T_LINK_TARGET = 43,    /* bytes: a symlink's target */
	KILN_T_NAME = 44,	    /* bytes: a directory entry's name */
	KILN_T_ENTRY = 45,	    /* nested TLV list */
	KILN_T_UID = 46,	    /* u64 */
	KILN_T_GID = 47,	    /* u64 */
	KILN_T_MORE = 48,	    /* u64: 1 = more RESULT frames follow */
	KILN_T_BENEATH = 49,	    /* path: T_PATH stays beneath it */
	KILN_T_BENEATH2 = 50,	    /* path: T_PATH2 stays beneath it */

	KILN_T_FACT = 64,     /* nested TLV list */
	KILN_T_TOPIC = 65,    /* string */
	KILN_T_RELATION = 66, /* string */
	KILN_T_VALUE = 67,    /* string */

	KILN_T_SEED = 80,    /* bytes: RESEED's random bytes */
	KILN_T_NET_MAC = 81, /* bytes, KILN_NET_MAC_LEN: eth0's new MAC */
	/* string: kiln.net's value, "ADDRESS/PREFIX,GATEWAY,MTU,DNS" */
	KILN_T_NET = 82,

	KILN_T_MOUNT = 96,     /* nested TLV list: one virtio-fs mount */
	KILN_T_TAG = 97,       /* bytes: its virtio-fs tag, 1..36 */
	KILN_T_READ_ONLY = 98, /* u64: 0 or 1 */
};

enum kiln_file_type {
	KILN_FILE_REGULAR = 1,
	KILN_FILE_DIRECTORY = 2,
	KILN_FILE_SYMLINK = 3,
	KILN_FILE_OTHER = 4,
};

#endif
