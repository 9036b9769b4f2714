/* SPDX-License-Identifier: GPL-2.0 */
#ifndef KILN_FS_PASSTHROUGH_INTERNAL_H
#define KILN_FS_PASSTHROUGH_INTERNAL_H

/*
 * Inside the `bind` backend: its objects and the helpers its files share.
 * Nothing outside devices/fs/passthrough*.c includes this; the backend's
 * interface is passthrough.h.
 *
 *   passthrough.c       the FUSE ops on names and attributes, create, destroy
 *   passthrough-io.c    the FUSE ops on open files and directories
 *   passthrough-node.c  nodes and handles, and the system calls beneath them
 *   passthrough-fds.c   node descriptors: the budget, LRU, reopening
 *   passthrough-mask.c  the mask trie, and where a name lives on the host
 *   passthrough-meta.c  ownership: the guest's metadata in user.kiln.stat
 *
 * Every op runs on the device's event loop thread: no locking.
 */
#include <stdbool.h>
#include <stdint.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <fcntl.h>
#include <linux/openat2.h>
#include <pthread.h>

#include "devices/fs/passthrough.h"
#include "lib/hashtable.h"
#include "lib/list.h"

/* How every guest name is resolved: one component, never a symlink. */
#define PT_RESOLVE \
	(RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS)
/* The guest's open(2) flags we keep; the rest are ours or dropped. */
#define PT_OPEN_KEEP (O_ACCMODE | O_APPEND | O_DSYNC | O_SYNC)
/* Node and lookup flags every descriptor we open carries. */
#define PT_OPATH (O_PATH | O_NOFOLLOW | O_CLOEXEC)

/*
 * fchmodat2(2), Linux 6.6: the one chmod that works on an O_PATH
 * descriptor (AT_EMPTY_PATH). Syscalls from 424 on have the same number
 * on every architecture, and the C library headers may predate it.
 */
#define PT_NR_FCHMODAT2 452

/*
 * readdir cookies: getdents64 d_off values are non-negative loff_t, so
 * bit 63 is free to mark our own entries ("." is 1, ".." 2, the i-th mask
 * entry 3 + i).
 */
#define PT_SYN_OFF   (1ULL << 63)
#define PT_SYN_DOT   1ULL
#define PT_SYN_DDOT  2ULL
#define PT_SYN_MASK0 3ULL

#define PT_DIRENT_BUF	  (32U << 10) /* getdents64 buffer per open directory */
#define PT_MAX_WALK	  4096U /* parent hops: deeper counts as cut off */
#define PT_EAGAIN_RETRIES 8U	/* openat2 -EAGAIN: a racing rename */
#define PT_MIN_FDS	  64U	/* descriptors a mount may always hold */
#define PT_MIN_FDS_PARAM  8U	/* the least fs_bind_params.max_fds */
/*
 * Descriptors a mount may hold at most, whatever the limit: each pins a
 * host inode and dentry (about a KiB of host kernel memory), so a guest
 * that keeps a huge tree open costs the host 64 MiB at most.
 */
#define PT_MAX_FDS (64U << 10)
/*
 * Nodes a mount keeps at most (the inodes the guest holds looked up):
 * each is about 200 bytes with its name and file handle, so 256 Ki of
 * them cost at most some 64 MiB; past it a lookup answers -ENFILE until
 * the guest forgets some (its kernel does under memory pressure).
 */
#define PT_MAX_NODES	 (256U << 10)
#define PT_HANDLE_MAX	 128U /* MAX_HANDLE_SZ: the largest file handle */
#define PT_STORAGE_MODE	 0700 /* directories made inside mask_storage */
#define PT_HASH_MIN_BITS 6U
#define PT_HASH_MAX_BITS 26U

/*
 * The guest's metadata of a file in a mapped bind: the user.kiln.stat
 * xattr of the host file, PT_META_SIZE bytes, little-endian:
 *
 *	0  u8    version, PT_META_VERSION
 *	1  u8    flags, 0
 *	2  le16  reserved, 0
 *	4  le32  uid
 *	8  le32  gid
 *	12 le32  mode: S_IFMT type and the 07777 permission bits
 *	16 le32  rdev: the device of S_IFCHR and S_IFBLK as fuse_attr.rdev
 *		 (Linux new_encode_dev), else 0
 *
 * Anything else (another version or size, a type the host file cannot
 * be) is not ours: the file shows its host metadata.
 */
#define PT_META_XATTR	"user.kiln.stat"
#define PT_META_VERSION 1
#define PT_META_SIZE	20U
/* What a mapped host file's mode always has: the vmm's user reads it. */
#define PT_HOST_FILE_OWNER 0600
#define PT_HOST_DIR_OWNER  0700
#define PT_HOST_SPECIAL	   0600 /* the regular file a device node is */

struct pt_meta {
	bool valid; /* from the xattr; else the host's stat is the truth */
	uint32_t uid;
	uint32_t gid;
	uint32_t mode; /* type and permission bits, as the guest sees them */
	uint32_t rdev;
};

/* ---- objects ------------------------------------------------------- */

enum pt_tree {
	PT_SOURCE,  /* beneath source */
	PT_STORAGE, /* beneath mask_storage: a masked path or below one */
};

/* One component of the mask paths. The root is "/" (depth 0). */
struct pt_mask {
	char *name;
	struct pt_mask *parent;
	struct pt_mask *child; /* first child; siblings through next */
	struct pt_mask *next;
	unsigned int depth;
	bool masked; /* the path down to here is a mask path */
};

struct pt_node {
	struct hlink by_id;  /* key: id */
	struct hlink by_ino; /* key: ino_key(dev, ino) */
	uint64_t id;
	dev_t dev;
	ino_t ino;
	mode_t type; /* S_IFMT bits */
	/*
	 * O_PATH | O_NOFOLLOW, or -1 while closed (passthrough-fds.c): then
	 * reopened by fh, or by name and checked against fh.
	 */
	int fd;
	struct list_head lru;	/* on pt_backend.lru iff open, closable */
	uint64_t used;		/* the epoch of the last op that used fd */
	unsigned int nopen;	/* handles open on it: fd stays open */
	struct file_handle *fh; /* NULL: the file system has none */
	int mnt_id;		/* of fh */
	bool stale;		/* its inode number now names another file */
	uint64_t nlookup;
	uint64_t nref; /* nodes whose parent this is, and pins */
	/*
	 * Where the guest last found it: the directory node and the name in
	 * it (NULL for the root). For a mask root the directory is the
	 * guest's parent in source; the host directory holding it is the
	 * one beneath storage for mask->parent.
	 */
	struct pt_node *parent;
	char *name;
	enum pt_tree tree;
	/*
	 * Source nodes: the trie node of their path, NULL when no mask path
	 * runs through it. Mask roots: their (masked) trie node.
	 */
	const struct pt_mask *mask;
	bool mask_root;
	struct pt_meta meta; /* mapped binds: read at every lookup */
};

struct pt_handle {
	struct hlink link; /* key: fh */
	uint64_t nodeid;
	int fd;
	int flags; /* the open flags, O_ACCMODE among them */
	bool dir;
	char *dents; /* directories: PT_DIRENT_BUF bytes, on first readdir */
	/*
	 * The host file was set-user-ID (or set-group-ID and group
	 * executable) when opened for writing: the first write or fallocate
	 * clears those bits on the host, whoever the guest says writes.
	 */
	bool kill_host_suid;
};

struct pt_backend {
	struct fs_backend fs;
	char *name;
	struct pt_node *root;
	int storage_fd; /* -1 without storage */
	dev_t storage_dev;
	ino_t storage_ino;
	struct pt_mask *masks; /* NULL without mask paths */
	struct hashtable by_id, by_ino, handles;
	uint64_t next_id, next_fh;
	size_t nr_fds, max_fds; /* descriptors held in nodes and handles */
	bool fds_warned;
	/*
	 * The monitor's budget (fs_bind_params.fds; NULL: none): charged
	 * counts what nr_fds took from it, reserved what pt_fd_budget()
	 * took for the op at hand and nothing holds yet (given back at the
	 * next op).
	 */
	struct fd_budget *shared;
	size_t charged, reserved;
	bool shared_warned;
	size_t nr_nodes;
	bool nodes_warned;
	/* Node descriptors that may be closed, most recently used first. */
	struct list_head lru;
	uint64_t epoch; /* of the op at hand (pt_op_begin) */
	bool by_handle; /* open_by_handle_at works (CAP_DAC_READ_SEARCH) */
	/*
	 * open_by_handle_at's mount descriptors (not O_PATH: it refuses
	 * those), source's and storage's, or -1; storage's mount id.
	 */
	int mount_fd, storage_mount_fd;
	int storage_mnt;
	uid_t euid;
	gid_t egid;
	enum fs_ownership own; /* DEFAULT resolved at create */
	bool meta_warned;      /* one line for a bad user.kiln.stat */
	/*
	 * Xattrs of non-directories are read and written by name, after
	 * fchdir() to their directory: each thread that does it first gets
	 * a working directory of its own (unshare(CLONE_FS)).
	 */
	pthread_t cwd_thread;
	bool cwd_private;
};

/* Where (directory, name) lives on the host. */
struct pt_where {
	int dirfd;
	bool owned; /* dirfd is ours to close (a directory beneath storage) */
	enum pt_tree tree;
	const struct pt_mask *mask; /* the name's trie node, if any */
	bool mask_root;		    /* the name is a mask path: in storage */
};

static inline struct pt_backend *to_pt(struct fs_backend *fs)
{
	return (struct pt_backend *)((char *)fs -
				     offsetof(struct pt_backend, fs));
}

/* passthrough-io.c: ops on open files and directories */
int pt_open(struct fs_backend *fs, uint64_t nodeid, uint32_t flags,
	    uint64_t *fh, uint32_t *open_flags);
int pt_create(struct fs_backend *fs, const struct fs_ctx *ctx, uint64_t parent,
	      const char *name, uint32_t mode, uint32_t flags, uint32_t umask,
	      struct fs_entry *out, uint64_t *fh, uint32_t *open_flags);
int pt_io_fd(struct fs_backend *fs, uint64_t nodeid, uint64_t fh, bool write);
ssize_t pt_read(struct fs_backend *fs, uint64_t nodeid, uint64_t fh,
		const struct iovec *iov, int iovcnt, uint64_t offset);
ssize_t pt_write(struct fs_backend *fs, uint64_t nodeid, uint64_t fh,
		 const struct iovec *iov, int iovcnt, uint64_t offset);
int pt_flush(struct fs_backend *fs, uint64_t nodeid, uint64_t fh);
int pt_release(struct fs_backend *fs, uint64_t nodeid, uint64_t fh);
int pt_fsync(struct fs_backend *fs, uint64_t nodeid, uint64_t fh,
	     bool datasync);
int pt_fallocate(struct fs_backend *fs, uint64_t nodeid, uint64_t fh,
		 uint64_t offset, uint64_t length, uint32_t mode);
int64_t pt_lseek(struct fs_backend *fs, uint64_t nodeid, uint64_t fh,
		 uint64_t offset, uint32_t whence);
int pt_opendir(struct fs_backend *fs, uint64_t nodeid, uint64_t *fh);
int pt_readdir(struct fs_backend *fs, uint64_t nodeid, uint64_t fh,
	       uint64_t offset, struct fs_dirbuf *out);
int pt_releasedir(struct fs_backend *fs, uint64_t nodeid, uint64_t fh);
int pt_fsyncdir(struct fs_backend *fs, uint64_t nodeid, uint64_t fh,
		bool datasync);

/* passthrough-node.c: system calls, nodes, handles */
int pt_openat2(int dirfd, const char *path, int flags, mode_t mode,
	       uint64_t resolve);
int pt_open_path(int dirfd, const char *name);
int pt_open_dir(int dirfd, const char *name);
int pt_stat_fd(int fd, struct stat *st);
int pt_stat_at(int dirfd, const char *name, struct stat *st);
bool pt_same_inode(const struct stat *st, dev_t dev, ino_t ino);
int pt_beneath(int fd, dev_t dev, ino_t ino);
int pt_open_host_dir(const char *name, const char *what, const char *path,
		     struct stat *st);
mode_t pt_guest_perm(uint32_t mode, uint32_t umask, bool dir);
uint32_t pt_guest_uid(const struct pt_backend *b, uid_t uid);
uint32_t pt_guest_gid(const struct pt_backend *b, gid_t gid);
void pt_to_attr(const struct pt_backend *b, const struct stat *st,
		struct fuse_attr *a);
void pt_node_attr(const struct pt_backend *b, const struct pt_node *n,
		  const struct stat *st, struct fuse_attr *a);
int pt_check_self(struct pt_backend *b, struct pt_node *n);
uint64_t pt_ino_key(dev_t dev, ino_t ino);
void pt_hash_add(struct hashtable *h, struct hlink *l, uint64_t key);
struct pt_node *pt_node_get(struct pt_backend *b, uint64_t id);
int pt_dir_get(struct pt_backend *b, uint64_t id, struct pt_node **np);
struct pt_node *pt_node_find(struct pt_backend *b, dev_t dev, ino_t ino);
void pt_node_free(struct pt_backend *b, struct pt_node *n);
void pt_node_pin(struct pt_node *n);
void pt_node_unpin(struct pt_backend *b, struct pt_node *n);
void pt_node_place(struct pt_backend *b, struct pt_node *n,
		   struct pt_node *parent, char *name,
		   const struct pt_where *w);
void pt_fill_entry(const struct pt_backend *b, const struct pt_node *n,
		   const struct stat *st, struct fs_entry *out);
int pt_node_add(struct pt_backend *b, struct pt_node *dir, const char *name,
		const struct pt_where *w, int fd, struct fs_entry *out);
void pt_node_forget(struct pt_backend *b, struct pt_node *n, uint64_t nlookup);
int pt_node_dirfd(struct pt_backend *b, const struct pt_node *n, int *fdp,
		  bool *owned);
int pt_check_connected(struct pt_backend *b, struct pt_node *dir);
int pt_dir_begin(struct pt_backend *b, uint64_t parent, const char *name,
		 struct pt_node **dirp);
int pt_reopen_file(struct pt_backend *b, struct pt_node *n, int flags);
int pt_chmod_node(struct pt_backend *b, struct pt_node *n, mode_t mode,
		  int hfd);
int pt_handle_new(struct pt_backend *b, uint64_t nodeid, int fd, int flags,
		  bool dir, uint64_t *fh);
struct pt_handle *pt_handle_get(struct pt_backend *b, uint64_t nodeid,
				uint64_t fh, bool dir);
void pt_handle_free(struct pt_backend *b, struct pt_handle *h);

/* passthrough-meta.c: ownership */
bool pt_mapped(const struct pt_backend *b);
mode_t pt_guest_type(const struct pt_node *n);
mode_t pt_host_perm(uint32_t mode, bool dir);
void pt_meta_load(struct pt_backend *b, struct pt_node *n, int dirfd,
		  const char *name);
int pt_meta_write(struct pt_backend *b, struct pt_node *n,
		  const struct pt_meta *m, int hfd);
int pt_meta_write_fd(int fd, const struct pt_meta *m);
int pt_meta_for_new(struct pt_backend *b, const struct fs_ctx *ctx,
		    struct pt_node *dir, uint32_t mode, uint32_t rdev,
		    struct pt_meta *m);
void pt_meta_attr(const struct pt_node *n, struct fuse_attr *a);
int pt_meta_setattr(struct pt_backend *b, struct pt_node *n,
		    const struct fuse_setattr_in *in, const struct stat *st,
		    int hfd);
int pt_kill_suidgid(struct fs_backend *fs, uint64_t nodeid);
int pt_kill_host_suid(int fd, const struct stat *st);
bool pt_host_suid(const struct stat *st);
uint32_t pt_killed_mode(uint32_t mode);
int pt_own_create(struct pt_backend *b, const struct fs_bind_params *p);

/* passthrough-fds.c: node descriptors */
void pt_op_begin(struct pt_backend *b);
/* A descriptor the mount holds now, or holds no more (nr_fds). */
void pt_fd_held(struct pt_backend *b);
void pt_fd_released(struct pt_backend *b);
/* At destroy: all it took from the monitor's budget, given back. */
void pt_fd_unshare(struct pt_backend *b);
int pt_fd(struct pt_backend *b, struct pt_node *n);
int pt_node_stat(struct pt_backend *b, struct pt_node *n, struct stat *st);
int pt_fd_budget(struct pt_backend *b, size_t want);
void pt_fd_install(struct pt_backend *b, struct pt_node *n, int fd);
void pt_fd_close(struct pt_backend *b, struct pt_node *n);
void pt_node_opened(struct pt_backend *b, struct pt_node *n);
void pt_node_closed(struct pt_backend *b, struct pt_node *n);
void pt_node_set_handle(struct pt_node *n, int fd);
bool pt_node_same_file(const struct pt_node *n, int fd);
void pt_fds_create(struct pt_backend *b);
void pt_fds_destroy(struct pt_backend *b);

/* passthrough-mask.c: masks and storage */
const struct pt_mask *pt_mask_child(const struct pt_mask *m, const char *name);
void pt_mask_free(struct pt_mask *m);
int pt_storage_dir(struct pt_backend *b, const struct pt_mask *m, bool create,
		   int *fdp);
int pt_locate(struct pt_backend *b, struct pt_node *dir, const char *name,
	      bool create, struct pt_where *w);
void pt_locate_done(struct pt_where *w);
bool pt_mask_ancestor(const struct pt_where *w);
int pt_create_masks(struct pt_backend *b, const struct fs_bind_params *p);
int pt_create_storage(struct pt_backend *b, const struct fs_bind_params *p,
		      const struct stat *src);

#endif
