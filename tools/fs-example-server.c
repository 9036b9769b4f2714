// SPDX-License-Identifier: GPL-2.0
/*
 * fs-example-server: a small FUSE server for a `virtual` mount, speaking
 * the protocol of Documentation/virtual-fs.md (one FUSE message per
 * SOCK_SEQPACKET packet, or with --stream messages back to back on a
 * SOCK_STREAM socket) on a listening socket the vmm connects to.
 *
 * It serves an in-memory tree, seeded read-mostly:
 *
 *	/hello.txt	"hello from the orchestrator\n"
 *	/dir/a.txt	"a\n"
 *	/dir/b.txt	"b\n"
 *	/link		-> hello.txt
 *
 * and the guest may create, write, truncate, rename and remove files,
 * directories and symlinks in it, within MAX_NODES nodes and MAX_TOTAL
 * bytes of data. Everything it reads from the socket is checked before
 * use: a malformed request is answered EINVAL (or, without even a
 * header, ignored), never trusted.
 *
 *	--delay-ms N	wait N ms before every answer (the vmm's timeout)
 *	--delay-after N	only after the first N requests (so that the
 *			guest can mount before answers turn slow)
 *	--die-after N	answer N requests, then exit as soon as the next
 *			one arrives, without answering it (server death)
 *	--once		serve one connection, then exit
 *	--stream	listen on SOCK_STREAM: each message framed by its len
 *
 * The socket appears under SOCKET_PATH only once it listens (bound under
 * a temporary name, then renamed), so a client can wait for the path.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <limits.h>
#include <linux/fs.h>
#include <linux/fuse.h>
#include <poll.h>
#include <signal.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#define MAX_NODES   1024U	/* node ids 1..MAX_NODES-1; 1 is the root */
#define MAX_TOTAL   (64U << 20) /* bytes of file data, all files */
#define MAX_FILE    (16U << 20) /* bytes in one file */
#define MAX_CLIENTS 16U		/* connections served at once */
#define MSG_MAX	    ((1U << 20) + 4096U) /* FS_FORWARD_MAX, the vmm's limit */
/*
 * Advertised in the INIT reply. 128 KiB writes (and, without
 * FUSE_MAX_PAGES, the kernel's default 32-page reads) fit the default
 * socket buffers (net.core.wmem_default).
 */
#define MAX_WRITE (128U * 1024U)
#define BLOCK	  4096U
#define TTL_SEC	  1U /* entry and attribute timeouts */

struct node {
	bool used;
	uint64_t generation; /* bumped when the slot is freed */
	uint64_t parent;     /* 0: unlinked (the root is its own parent) */
	char name[NAME_MAX + 1];
	uint32_t mode; /* with S_IFMT */
	uint32_t uid, gid;
	uint32_t rdev; /* of a device node, as fuse_attr.rdev */
	uint64_t nlookup;
	char *data; /* file content or symlink target */
	size_t size;
	struct timespec atime, mtime, ctime;
};

struct server {
	struct node nodes[MAX_NODES];
	size_t total; /* bytes of data held */
	unsigned int delay_ms;
	unsigned long delay_after; /* requests answered at once first */
	unsigned long received;
	long die_after; /* -1: never */
	unsigned long served;
	bool stream;	   /* SOCK_STREAM: messages framed by their len */
	uint8_t *in, *out; /* MSG_MAX each */
};

/* A request being handled: its header and arguments. */
struct request {
	struct fuse_in_header h;
	const uint8_t *arg;
	size_t alen;
};

static struct timespec now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return ts;
}

/* ---- the tree ------------------------------------------------------ */

static struct node *get_node(struct server *s, uint64_t id)
{
	if (id == 0 || id >= MAX_NODES || !s->nodes[id].used)
		return NULL;
	return &s->nodes[id];
}

static uint64_t node_id(const struct server *s, const struct node *n)
{
	return (uint64_t)(n - s->nodes);
}

static bool is_dir(const struct node *n)
{
	return S_ISDIR(n->mode);
}

static struct node *find_child(struct server *s, uint64_t dir, const char *name)
{
	for (unsigned int i = 2; i < MAX_NODES; i++) {
		struct node *n = &s->nodes[i];

		if (n->used && n->parent == dir && !strcmp(n->name, name))
			return n;
	}
	return NULL;
}

static unsigned int count_children(struct server *s, uint64_t dir,
				   bool dirs_only)
{
	unsigned int count = 0;

	for (unsigned int i = 2; i < MAX_NODES; i++) {
		struct node *n = &s->nodes[i];

		if (n->used && n->parent == dir && (!dirs_only || is_dir(n)))
			count++;
	}
	return count;
}

/* Frees a node nobody can reach: unlinked and forgotten by the guest. */
static void maybe_free(struct server *s, struct node *n)
{
	if (node_id(s, n) == FUSE_ROOT_ID || n->parent || n->nlookup)
		return;
	s->total -= n->size;
	free(n->data);
	n->data = NULL;
	n->size = 0;
	n->used = false;
	n->generation++;
}

static struct node *new_node(struct server *s, uint64_t parent,
			     const char *name, uint32_t mode, uint32_t uid,
			     uint32_t gid)
{
	for (unsigned int i = 2; i < MAX_NODES; i++) {
		struct node *n = &s->nodes[i];

		if (n->used)
			continue;
		n->used = true;
		n->parent = parent;
		snprintf(n->name, sizeof(n->name), "%s", name);
		n->mode = mode;
		n->uid = uid;
		n->gid = gid;
		/* BSD group semantics under a set-group-ID directory, as Linux */
		if (s->nodes[parent].mode & S_ISGID) {
			n->gid = s->nodes[parent].gid;
			if (S_ISDIR(mode))
				n->mode |= S_ISGID;
		}
		n->rdev = 0;
		n->nlookup = 0;
		n->data = NULL;
		n->size = 0;
		n->atime = n->mtime = n->ctime = now();
		s->nodes[parent].mtime = s->nodes[parent].ctime = n->ctime;
		return n;
	}
	return NULL;
}

/* Sets a file's (or symlink's) size, zero-filling growth. */
static int resize(struct server *s, struct node *n, uint64_t size)
{
	char *data;

	if (size > MAX_FILE)
		return -EFBIG;
	if (size > n->size && size - n->size > MAX_TOTAL - s->total)
		return -ENOSPC;
	if (size == n->size)
		return 0;
	data = size ? realloc(n->data, size) : NULL;
	if (size && !data)
		return -ENOSPC;
	if (!size)
		free(n->data);
	if (size > n->size)
		memset(data + n->size, 0, size - n->size);
	s->total = s->total - n->size + size;
	n->data = data;
	n->size = size;
	return 0;
}

static int seed_file(struct server *s, uint64_t parent, const char *name,
		     const char *content)
{
	struct node *n = new_node(s, parent, name, S_IFREG | 0644, 0, 0);

	if (!n || resize(s, n, strlen(content)))
		return -ENOMEM;
	memcpy(n->data, content, n->size);
	return 0;
}

static int seed(struct server *s)
{
	struct node *root = &s->nodes[FUSE_ROOT_ID];
	struct node *dir, *link;

	root->used = true;
	root->parent = FUSE_ROOT_ID;
	root->mode = S_IFDIR | 0755;
	root->atime = root->mtime = root->ctime = now();
	if (seed_file(s, FUSE_ROOT_ID, "hello.txt",
		      "hello from the orchestrator\n"))
		return -ENOMEM;
	dir = new_node(s, FUSE_ROOT_ID, "dir", S_IFDIR | 0755, 0, 0);
	if (!dir || seed_file(s, node_id(s, dir), "a.txt", "a\n") ||
	    seed_file(s, node_id(s, dir), "b.txt", "b\n"))
		return -ENOMEM;
	link = new_node(s, FUSE_ROOT_ID, "link", S_IFLNK | 0777, 0, 0);
	if (!link || resize(s, link, strlen("hello.txt")))
		return -ENOMEM;
	memcpy(link->data, "hello.txt", link->size);
	return 0;
}

static void fill_attr(struct server *s, struct node *n, struct fuse_attr *a)
{
	uint64_t id = node_id(s, n);

	memset(a, 0, sizeof(*a));
	a->ino = id;
	a->size = is_dir(n) ? BLOCK : n->size;
	a->blocks = (a->size + 511) / 512;
	a->atime = n->atime.tv_sec;
	a->atimensec = n->atime.tv_nsec;
	a->mtime = n->mtime.tv_sec;
	a->mtimensec = n->mtime.tv_nsec;
	a->ctime = n->ctime.tv_sec;
	a->ctimensec = n->ctime.tv_nsec;
	a->mode = n->mode;
	if (is_dir(n))
		a->nlink = 2 + count_children(s, id, true);
	else
		a->nlink = n->parent ? 1 : 0;
	a->uid = n->uid;
	a->gid = n->gid;
	a->rdev = n->rdev;
	a->blksize = BLOCK;
}

static void fill_entry(struct server *s, struct node *n,
		       struct fuse_entry_out *e)
{
	memset(e, 0, sizeof(*e));
	e->nodeid = node_id(s, n);
	e->generation = n->generation;
	e->entry_valid = TTL_SEC;
	e->attr_valid = TTL_SEC;
	fill_attr(s, n, &e->attr);
	n->nlookup++;
}

/* ---- reading requests ------------------------------------------------ */

/* The fixed-size argument at the start, or NULL if the request is short. */
static const void *arg_struct(const struct request *r, size_t size)
{
	return r->alen >= size ? r->arg : NULL;
}

/*
 * The NUL-terminated name at *off into the arguments, advancing *off
 * past it; NULL if it runs off the end or is not one path component.
 */
static const char *arg_name(const struct request *r, size_t *off,
			    bool component)
{
	const char *p = (const char *)r->arg + *off;
	size_t room = r->alen - *off, len;

	if (*off > r->alen)
		return NULL;
	len = strnlen(p, room);
	if (len == room)
		return NULL;
	*off += len + 1;
	if (component && (!len || len > NAME_MAX || memchr(p, '/', len) ||
			  !strcmp(p, ".") || !strcmp(p, "..")))
		return NULL;
	return p;
}

/* ---- answering ------------------------------------------------------- */

static void sleep_ms(unsigned int ms)
{
	struct timespec ts = { .tv_sec = ms / 1000,
			       .tv_nsec = (long)(ms % 1000) * 1000000L };

	while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
		;
}

/* Sends one reply; -1 if the connection is gone. */
static int reply(struct server *s, int fd, const struct request *r, int error,
		 const void *payload, size_t len)
{
	struct fuse_out_header oh = {
		.len = (uint32_t)(sizeof(oh) + (error ? 0 : len)),
		.error = error,
		.unique = r->h.unique,
	};

	memcpy(s->out, &oh, sizeof(oh));
	/* A payload may have been built in place (readdir). */
	if (!error && len && payload != s->out + sizeof(oh))
		memcpy(s->out + sizeof(oh), payload, len);
	if (s->delay_ms && s->received > s->delay_after)
		sleep_ms(s->delay_ms);
	/* A packet goes whole; a stream may take it in parts. */
	for (size_t off = 0; off < oh.len;) {
		ssize_t n = send(fd, s->out + off, oh.len - off, MSG_NOSIGNAL);

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0) {
			fprintf(stderr, "fs-example-server: send: %s\n",
				strerror(errno));
			return -1;
		}
		off += (size_t)n;
	}
	return 0;
}

static int reply_err(struct server *s, int fd, const struct request *r,
		     int error)
{
	return reply(s, fd, r, error, NULL, 0);
}

static int reply_entry(struct server *s, int fd, const struct request *r,
		       struct node *n)
{
	struct fuse_entry_out e;

	fill_entry(s, n, &e);
	return reply(s, fd, r, 0, &e, sizeof(e));
}

static int reply_attr(struct server *s, int fd, const struct request *r,
		      struct node *n)
{
	struct fuse_attr_out a = { .attr_valid = TTL_SEC };

	fill_attr(s, n, &a.attr);
	return reply(s, fd, r, 0, &a, sizeof(a));
}

/* ---- the operations ---------------------------------------------------- */

static int do_init(struct server *s, int fd, const struct request *r)
{
	const struct fuse_init_in *in =
		arg_struct(r, offsetof(struct fuse_init_in, flags2));
	struct fuse_init_out out = { .major = FUSE_KERNEL_VERSION };
	size_t len = sizeof(out);

	if (!in)
		return reply_err(s, fd, r, -EINVAL);
	if (in->major != FUSE_KERNEL_VERSION)
		return reply_err(s, fd, r, -EPROTO);
	out.minor = in->minor < FUSE_KERNEL_MINOR_VERSION ?
			    in->minor :
			    FUSE_KERNEL_MINOR_VERSION;
	out.max_readahead = in->max_readahead;
	out.flags = in->flags & FUSE_ASYNC_READ;
	out.max_background = 16;
	out.congestion_threshold = 12;
	out.max_write = MAX_WRITE;
	out.time_gran = 1;
	/* Older guests know a shorter reply. */
	if (out.minor < 5)
		len = FUSE_COMPAT_INIT_OUT_SIZE;
	else if (out.minor < 23)
		len = FUSE_COMPAT_22_INIT_OUT_SIZE;
	return reply(s, fd, r, 0, &out, len);
}

static void forget_one(struct server *s, uint64_t id, uint64_t nlookup)
{
	struct node *n = get_node(s, id);

	if (!n || id == FUSE_ROOT_ID)
		return;
	n->nlookup -= nlookup < n->nlookup ? nlookup : n->nlookup;
	maybe_free(s, n);
}

static void do_batch_forget(struct server *s, const struct request *r)
{
	const struct fuse_batch_forget_in *in = arg_struct(r, sizeof(*in));
	const uint8_t *p = r->arg + sizeof(*in);
	struct fuse_forget_one one;

	if (!in)
		return;
	for (uint32_t i = 0; i < in->count; i++) {
		if ((size_t)(p - r->arg) + sizeof(one) > r->alen)
			break;
		memcpy(&one, p, sizeof(one));
		forget_one(s, one.nodeid, one.nlookup);
		p += sizeof(one);
	}
}

static int do_lookup(struct server *s, int fd, const struct request *r)
{
	struct node *dir = get_node(s, r->h.nodeid), *n;
	size_t off = 0;
	const char *name = arg_name(r, &off, false);

	if (!dir)
		return reply_err(s, fd, r, -ENOENT);
	if (!is_dir(dir))
		return reply_err(s, fd, r, -ENOTDIR);
	if (name && strlen(name) > NAME_MAX)
		return reply_err(s, fd, r, -ENAMETOOLONG);
	if (!name || !*name || strchr(name, '/'))
		return reply_err(s, fd, r, -EINVAL);
	if (!strcmp(name, "."))
		n = dir;
	else if (!strcmp(name, ".."))
		n = &s->nodes[dir->parent ? dir->parent : FUSE_ROOT_ID];
	else
		n = find_child(s, r->h.nodeid, name);
	if (!n)
		return reply_err(s, fd, r, -ENOENT);
	return reply_entry(s, fd, r, n);
}

static int do_setattr(struct server *s, int fd, const struct request *r)
{
	const struct fuse_setattr_in *in = arg_struct(r, sizeof(*in));
	struct node *n = get_node(s, r->h.nodeid);
	struct timespec t = now();
	int ret;

	if (!n)
		return reply_err(s, fd, r, -ENOENT);
	if (!in)
		return reply_err(s, fd, r, -EINVAL);
	if (in->valid & FATTR_SIZE) {
		if (is_dir(n))
			return reply_err(s, fd, r, -EISDIR);
		if (!S_ISREG(n->mode))
			return reply_err(s, fd, r, -EINVAL);
		ret = resize(s, n, in->size);
		if (ret)
			return reply_err(s, fd, r, ret);
		n->mtime = t;
	}
	if (in->valid & FATTR_MODE)
		n->mode = (n->mode & S_IFMT) | (in->mode & 07777);
	if (in->valid & FATTR_UID)
		n->uid = in->uid;
	if (in->valid & FATTR_GID)
		n->gid = in->gid;
	if (in->valid & FATTR_ATIME_NOW)
		n->atime = t;
	else if (in->valid & FATTR_ATIME)
		n->atime = (struct timespec){ (time_t)in->atime,
					      in->atimensec % 1000000000U };
	if (in->valid & FATTR_MTIME_NOW)
		n->mtime = t;
	else if (in->valid & FATTR_MTIME)
		n->mtime = (struct timespec){ (time_t)in->mtime,
					      in->mtimensec % 1000000000U };
	n->ctime = t;
	return reply_attr(s, fd, r, n);
}

static int do_readlink(struct server *s, int fd, const struct request *r)
{
	struct node *n = get_node(s, r->h.nodeid);

	if (!n)
		return reply_err(s, fd, r, -ENOENT);
	if (!S_ISLNK(n->mode))
		return reply_err(s, fd, r, -EINVAL);
	return reply(s, fd, r, 0, n->data, n->size);
}

/* The parent directory of a creating request, or an error. */
static int creating_in(struct server *s, const struct request *r,
		       const char *name, struct node **dir)
{
	*dir = get_node(s, r->h.nodeid);
	if (!*dir)
		return -ENOENT;
	if (!is_dir(*dir))
		return -ENOTDIR;
	if (!name)
		return -EINVAL;
	if (find_child(s, r->h.nodeid, name))
		return -EEXIST;
	return 0;
}

static int do_make(struct server *s, int fd, const struct request *r,
		   const char *name, uint32_t mode)
{
	struct node *dir, *n;
	int ret = creating_in(s, r, name, &dir);

	if (ret)
		return reply_err(s, fd, r, ret);
	n = new_node(s, r->h.nodeid, name, mode, r->h.uid, r->h.gid);
	if (!n)
		return reply_err(s, fd, r, -ENOSPC);
	return reply_entry(s, fd, r, n);
}

static int do_mkdir(struct server *s, int fd, const struct request *r)
{
	const struct fuse_mkdir_in *in = arg_struct(r, sizeof(*in));
	size_t off = sizeof(*in);

	if (!in)
		return reply_err(s, fd, r, -EINVAL);
	return do_make(s, fd, r, arg_name(r, &off, true),
		       S_IFDIR | (in->mode & 07777));
}

static int do_mknod(struct server *s, int fd, const struct request *r)
{
	const struct fuse_mknod_in *in = arg_struct(r, sizeof(*in));
	size_t off = sizeof(*in);

	struct node *dir, *n;
	const char *name;
	uint32_t type;
	int ret;

	if (!in)
		return reply_err(s, fd, r, -EINVAL);
	/*
	 * FIFOs, sockets and device nodes are only names and attributes
	 * here: the guest kernel serves them itself and never opens them
	 * through FUSE.
	 */
	type = (in->mode & S_IFMT) ? in->mode & S_IFMT : S_IFREG;
	if (type != S_IFREG && type != S_IFIFO && type != S_IFSOCK &&
	    type != S_IFCHR && type != S_IFBLK)
		return reply_err(s, fd, r, -EINVAL);
	name = arg_name(r, &off, true);
	ret = creating_in(s, r, name, &dir);
	if (ret)
		return reply_err(s, fd, r, ret);
	n = new_node(s, r->h.nodeid, name, type | (in->mode & 07777), r->h.uid,
		     r->h.gid);
	if (!n)
		return reply_err(s, fd, r, -ENOSPC);
	if (type == S_IFCHR || type == S_IFBLK)
		n->rdev = in->rdev;
	return reply_entry(s, fd, r, n);
}

static int do_symlink(struct server *s, int fd, const struct request *r)
{
	size_t off = 0;
	const char *name = arg_name(r, &off, true);
	const char *target = name ? arg_name(r, &off, false) : NULL;
	struct node *dir, *n;
	int ret = creating_in(s, r, target ? name : NULL, &dir);

	if (ret)
		return reply_err(s, fd, r, ret);
	if (!*target || strlen(target) >= PATH_MAX)
		return reply_err(s, fd, r, -EINVAL);
	n = new_node(s, r->h.nodeid, name, S_IFLNK | 0777, r->h.uid, r->h.gid);
	if (!n)
		return reply_err(s, fd, r, -ENOSPC);
	ret = resize(s, n, strlen(target));
	if (ret) {
		n->parent = 0;
		maybe_free(s, n);
		return reply_err(s, fd, r, ret);
	}
	memcpy(n->data, target, n->size);
	return reply_entry(s, fd, r, n);
}

static void unlink_node(struct server *s, struct node *n)
{
	struct timespec t = now();

	s->nodes[n->parent].mtime = s->nodes[n->parent].ctime = t;
	n->parent = 0;
	n->ctime = t;
	maybe_free(s, n);
}

static int do_remove(struct server *s, int fd, const struct request *r,
		     bool dir)
{
	size_t off = 0;
	const char *name = arg_name(r, &off, true);
	struct node *parent = get_node(s, r->h.nodeid), *n;

	if (!parent)
		return reply_err(s, fd, r, -ENOENT);
	if (!name)
		return reply_err(s, fd, r, -EINVAL);
	n = is_dir(parent) ? find_child(s, r->h.nodeid, name) : NULL;
	if (!n)
		return reply_err(s, fd, r, -ENOENT);
	if (dir && !is_dir(n))
		return reply_err(s, fd, r, -ENOTDIR);
	if (!dir && is_dir(n))
		return reply_err(s, fd, r, -EISDIR);
	if (dir && count_children(s, node_id(s, n), false))
		return reply_err(s, fd, r, -ENOTEMPTY);
	unlink_node(s, n);
	return reply_err(s, fd, r, 0);
}

/* Whether directory id is dir or beneath it. */
static bool is_beneath(struct server *s, uint64_t id, uint64_t dir)
{
	for (unsigned int depth = 0; depth < MAX_NODES; depth++) {
		if (id == dir)
			return true;
		if (id == FUSE_ROOT_ID || !id)
			return false;
		id = s->nodes[id].parent;
	}
	return false;
}

static int do_rename(struct server *s, int fd, const struct request *r, bool v2)
{
	size_t off = v2 ? sizeof(struct fuse_rename2_in) :
			  sizeof(struct fuse_rename_in);
	const struct fuse_rename2_in *in2 = v2 ? arg_struct(r, off) : NULL;
	const struct fuse_rename_in *in = arg_struct(r, off);
	const char *name = in ? arg_name(r, &off, true) : NULL;
	const char *newname = name ? arg_name(r, &off, true) : NULL;
	uint32_t flags = in2 ? in2->flags : 0;
	struct node *from, *to, *n, *old;

	if (!newname)
		return reply_err(s, fd, r, -EINVAL);
	if (flags & ~RENAME_NOREPLACE)
		return reply_err(s, fd, r, -EINVAL);
	from = get_node(s, r->h.nodeid);
	to = get_node(s, in->newdir);
	if (!from || !to)
		return reply_err(s, fd, r, -ENOENT);
	if (!is_dir(from) || !is_dir(to))
		return reply_err(s, fd, r, -ENOTDIR);
	n = find_child(s, r->h.nodeid, name);
	if (!n)
		return reply_err(s, fd, r, -ENOENT);
	if (is_dir(n) && is_beneath(s, in->newdir, node_id(s, n)))
		return reply_err(s, fd, r, -EINVAL);
	old = find_child(s, in->newdir, newname);
	if (old == n)
		return reply_err(s, fd, r, 0);
	if (old) {
		if (flags & RENAME_NOREPLACE)
			return reply_err(s, fd, r, -EEXIST);
		if (is_dir(n) && !is_dir(old))
			return reply_err(s, fd, r, -ENOTDIR);
		if (!is_dir(n) && is_dir(old))
			return reply_err(s, fd, r, -EISDIR);
		if (is_dir(old) && count_children(s, node_id(s, old), false))
			return reply_err(s, fd, r, -ENOTEMPTY);
		unlink_node(s, old);
	}
	from->mtime = from->ctime = to->mtime = to->ctime = n->ctime = now();
	n->parent = in->newdir;
	snprintf(n->name, sizeof(n->name), "%s", newname);
	return reply_err(s, fd, r, 0);
}

static int do_open(struct server *s, int fd, const struct request *r, bool dir)
{
	const struct fuse_open_in *in = arg_struct(r, sizeof(*in));
	struct node *n = get_node(s, r->h.nodeid);
	struct fuse_open_out out = { 0 };
	int ret;

	if (!n)
		return reply_err(s, fd, r, -ENOENT);
	if (!in)
		return reply_err(s, fd, r, -EINVAL);
	if (dir && !is_dir(n))
		return reply_err(s, fd, r, -ENOTDIR);
	if (!dir && is_dir(n))
		return reply_err(s, fd, r, -EISDIR);
	if (!dir && (in->flags & O_TRUNC) && (in->flags & O_ACCMODE)) {
		ret = resize(s, n, 0);
		if (ret)
			return reply_err(s, fd, r, ret);
	}
	return reply(s, fd, r, 0, &out, sizeof(out));
}

static int do_create(struct server *s, int fd, const struct request *r)
{
	const struct fuse_create_in *in = arg_struct(r, sizeof(*in));
	size_t off = sizeof(*in);
	const char *name = in ? arg_name(r, &off, true) : NULL;
	struct {
		struct fuse_entry_out entry;
		struct fuse_open_out open;
	} out;
	struct node *dir = get_node(s, r->h.nodeid), *n;

	if (!dir)
		return reply_err(s, fd, r, -ENOENT);
	if (!name)
		return reply_err(s, fd, r, -EINVAL);
	if (!is_dir(dir))
		return reply_err(s, fd, r, -ENOTDIR);
	n = find_child(s, r->h.nodeid, name);
	if (n && (in->flags & O_EXCL))
		return reply_err(s, fd, r, -EEXIST);
	if (n && is_dir(n))
		return reply_err(s, fd, r, -EISDIR);
	if (n && (in->flags & O_TRUNC) && resize(s, n, 0))
		return reply_err(s, fd, r, -EIO);
	if (!n)
		n = new_node(s, r->h.nodeid, name, S_IFREG | (in->mode & 07777),
			     r->h.uid, r->h.gid);
	if (!n)
		return reply_err(s, fd, r, -ENOSPC);
	memset(&out, 0, sizeof(out));
	fill_entry(s, n, &out.entry);
	return reply(s, fd, r, 0, &out, sizeof(out));
}

static int do_read(struct server *s, int fd, const struct request *r)
{
	const struct fuse_read_in *in = arg_struct(r, sizeof(*in));
	struct node *n = get_node(s, r->h.nodeid);
	size_t len;

	if (!n)
		return reply_err(s, fd, r, -ENOENT);
	if (!in)
		return reply_err(s, fd, r, -EINVAL);
	if (is_dir(n))
		return reply_err(s, fd, r, -EISDIR);
	if (in->offset >= n->size)
		return reply(s, fd, r, 0, NULL, 0);
	len = n->size - in->offset;
	if (len > in->size)
		len = in->size;
	/* The reply must fit the guest's room: the header is in it. */
	if (len > MSG_MAX - sizeof(struct fuse_out_header))
		len = MSG_MAX - sizeof(struct fuse_out_header);
	n->atime = now();
	return reply(s, fd, r, 0, n->data + in->offset, len);
}

static int do_write(struct server *s, int fd, const struct request *r)
{
	const struct fuse_write_in *in = arg_struct(r, sizeof(*in));
	struct node *n = get_node(s, r->h.nodeid);
	struct fuse_write_out out = { 0 };
	int ret;

	if (!n)
		return reply_err(s, fd, r, -ENOENT);
	if (!in || in->size > r->alen - sizeof(*in))
		return reply_err(s, fd, r, -EINVAL);
	if (!S_ISREG(n->mode))
		return reply_err(s, fd, r, -EINVAL);
	if (in->offset > MAX_FILE || in->size > MAX_FILE - in->offset)
		return reply_err(s, fd, r, -EFBIG);
	if (in->offset + in->size > n->size) {
		ret = resize(s, n, in->offset + in->size);
		if (ret)
			return reply_err(s, fd, r, ret);
	}
	memcpy(n->data + in->offset, r->arg + sizeof(*in), in->size);
	n->mtime = n->ctime = now();
	out.size = in->size;
	return reply(s, fd, r, 0, &out, sizeof(out));
}

/* Appends one dirent to buf if it fits in room; false if not. */
static bool add_dirent(uint8_t *buf, size_t *used, size_t room,
		       const char *name, uint64_t ino, uint32_t type,
		       uint64_t off)
{
	struct fuse_dirent d = {
		.ino = ino,
		.off = off,
		.namelen = (uint32_t)strlen(name),
		.type = type,
	};
	size_t size = FUSE_DIRENT_SIZE(&d);

	if (size > room - *used)
		return false;
	memset(buf + *used, 0, size);
	memcpy(buf + *used, &d, FUSE_NAME_OFFSET);
	memcpy(buf + *used + FUSE_NAME_OFFSET, name, d.namelen);
	*used += size;
	return true;
}

/*
 * Offsets: 1 after ".", 2 after "..", slot + 2 after the child in that
 * slot, so a listing resumes where it was even if entries went away.
 */
static int do_readdir(struct server *s, int fd, const struct request *r)
{
	const struct fuse_read_in *in = arg_struct(r, sizeof(*in));
	struct node *dir = get_node(s, r->h.nodeid);
	uint8_t *buf = s->out + sizeof(struct fuse_out_header);
	size_t room, used = 0;

	if (!dir)
		return reply_err(s, fd, r, -ENOENT);
	if (!in)
		return reply_err(s, fd, r, -EINVAL);
	if (!is_dir(dir))
		return reply_err(s, fd, r, -ENOTDIR);
	room = in->size;
	if (room > MSG_MAX - sizeof(struct fuse_out_header))
		room = MSG_MAX - sizeof(struct fuse_out_header);
	if (in->offset < 1 &&
	    !add_dirent(buf, &used, room, ".", r->h.nodeid, DT_DIR, 1))
		goto out;
	if (in->offset < 2 &&
	    !add_dirent(buf, &used, room, "..",
			dir->parent ? dir->parent : FUSE_ROOT_ID, DT_DIR, 2))
		goto out;
	/* Slot 1 is the root, never a child: children start at slot 2. */
	for (uint64_t i = in->offset < 3 ? 2 : in->offset - 1; i < MAX_NODES;
	     i++) {
		struct node *n = &s->nodes[i];

		if (!n->used || n->parent != r->h.nodeid)
			continue;
		if (!add_dirent(buf, &used, room, n->name, i,
				(n->mode & S_IFMT) >> 12, i + 2))
			break;
	}
out:
	return reply(s, fd, r, 0, buf, used);
}

static int do_statfs(struct server *s, int fd, const struct request *r)
{
	struct fuse_statfs_out out = { 0 };
	unsigned int used_nodes = 0;

	for (unsigned int i = 1; i < MAX_NODES; i++)
		used_nodes += s->nodes[i].used;
	out.st.blocks = MAX_TOTAL / BLOCK;
	out.st.bfree = (MAX_TOTAL - s->total) / BLOCK;
	out.st.bavail = out.st.bfree;
	out.st.files = MAX_NODES - 1;
	out.st.ffree = MAX_NODES - 1 - used_nodes;
	out.st.bsize = BLOCK;
	out.st.namelen = NAME_MAX;
	out.st.frsize = BLOCK;
	return reply(s, fd, r, 0, &out, sizeof(out));
}

/* One request; -1 when the connection should go. */
static int handle(struct server *s, int fd, const struct request *r)
{
	struct node *n;

	switch (r->h.opcode) {
	case FUSE_INIT:
		return do_init(s, fd, r);
	case FUSE_DESTROY:
		return reply_err(s, fd, r, 0);
	case FUSE_FORGET: {
		const struct fuse_forget_in *in = arg_struct(r, sizeof(*in));

		if (in)
			forget_one(s, r->h.nodeid, in->nlookup);
		return 0; /* no reply */
	}
	case FUSE_BATCH_FORGET:
		do_batch_forget(s, r);
		return 0;
	case FUSE_INTERRUPT:
		return 0; /* no reply; every answer is immediate anyway */
	case FUSE_LOOKUP:
		return do_lookup(s, fd, r);
	case FUSE_GETATTR:
		n = get_node(s, r->h.nodeid);
		return n ? reply_attr(s, fd, r, n) :
			   reply_err(s, fd, r, -ENOENT);
	case FUSE_SETATTR:
		return do_setattr(s, fd, r);
	case FUSE_READLINK:
		return do_readlink(s, fd, r);
	case FUSE_SYMLINK:
		return do_symlink(s, fd, r);
	case FUSE_MKNOD:
		return do_mknod(s, fd, r);
	case FUSE_MKDIR:
		return do_mkdir(s, fd, r);
	case FUSE_UNLINK:
		return do_remove(s, fd, r, false);
	case FUSE_RMDIR:
		return do_remove(s, fd, r, true);
	case FUSE_RENAME:
		return do_rename(s, fd, r, false);
	case FUSE_RENAME2:
		return do_rename(s, fd, r, true);
	case FUSE_OPEN:
		return do_open(s, fd, r, false);
	case FUSE_OPENDIR:
		return do_open(s, fd, r, true);
	case FUSE_CREATE:
		return do_create(s, fd, r);
	case FUSE_READ:
		return do_read(s, fd, r);
	case FUSE_WRITE:
		return do_write(s, fd, r);
	case FUSE_READDIR:
		return do_readdir(s, fd, r);
	case FUSE_STATFS:
		return do_statfs(s, fd, r);
	case FUSE_RELEASE:
	case FUSE_RELEASEDIR:
	case FUSE_FLUSH:
	case FUSE_FSYNC:
	case FUSE_FSYNCDIR:
		/* No handles, nothing buffered: the node must exist. */
		n = get_node(s, r->h.nodeid);
		return reply_err(s, fd, r, n ? 0 : -ENOENT);
	default:
		return reply_err(s, fd, r, -ENOSYS);
	}
}

/* Exactly len bytes of a stream (blocking); false at EOF or an error. */
static bool read_all(int fd, uint8_t *buf, size_t len)
{
	while (len) {
		ssize_t n = recv(fd, buf, len, 0);

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return false;
		buf += n;
		len -= (size_t)n;
	}
	return true;
}

/*
 * One message of a stream: the header, then len - 40 more bytes. A len
 * shorter than the header or longer than MSG_MAX cannot be framed: the
 * connection ends. The message's length, or -1.
 */
static ssize_t recv_stream(int fd, uint8_t *buf)
{
	struct fuse_in_header h;

	if (!read_all(fd, buf, sizeof(h)))
		return -1;
	memcpy(&h, buf, sizeof(h));
	if (h.len < sizeof(h) || h.len > MSG_MAX) {
		fprintf(stderr, "fs-example-server: request len %u: closing\n",
			h.len);
		return -1;
	}
	if (!read_all(fd, buf + sizeof(h), h.len - sizeof(h)))
		return -1;
	return h.len;
}

/* Reads and answers one message; -1 when the connection is over. */
static int serve_one(struct server *s, int fd)
{
	struct request r;
	ssize_t n;

	if (s->stream)
		n = recv_stream(fd, s->in);
	else
		n = recv(fd, s->in, MSG_MAX, MSG_TRUNC);
	if (n < 0 && errno == EINTR)
		return 0;
	if (n <= 0)
		return -1; /* EOF, or the connection broke */
	if ((size_t)n > MSG_MAX || (size_t)n < sizeof(r.h))
		return 0; /* no header to answer to */
	memcpy(&r.h, s->in, sizeof(r.h));
	s->received++;
	if (s->die_after >= 0 && s->served++ == (unsigned long)s->die_after) {
		fprintf(stderr, "fs-example-server: --die-after %ld: exiting\n",
			s->die_after);
		exit(0);
	}
	if (r.h.len != (size_t)n)
		return r.h.opcode == FUSE_FORGET ||
				       r.h.opcode == FUSE_BATCH_FORGET ?
			       0 :
			       reply_err(s, fd, &r, -EINVAL);
	r.arg = s->in + sizeof(r.h);
	r.alen = (size_t)n - sizeof(r.h);
	return handle(s, fd, &r);
}

static int listen_on(const char *path, int type)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	char tmp[sizeof(sa.sun_path)];
	struct stat st;
	int fd;

	if (snprintf(tmp, sizeof(tmp), "%s~", path) >= (int)sizeof(tmp)) {
		fprintf(stderr, "fs-example-server: %s: path too long\n", path);
		return -1;
	}
	/* A socket left by an earlier run is replaced; anything else not. */
	if (lstat(path, &st) == 0 && !S_ISSOCK(st.st_mode)) {
		fprintf(stderr, "fs-example-server: %s exists\n", path);
		return -1;
	}
	fd = socket(AF_UNIX, type | SOCK_CLOEXEC, 0);
	if (fd < 0) {
		perror("fs-example-server: socket");
		return -1;
	}
	unlink(tmp);
	memcpy(sa.sun_path, tmp, strlen(tmp));
	if (bind(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0 ||
	    listen(fd, (int)MAX_CLIENTS) < 0 || rename(tmp, path) < 0) {
		fprintf(stderr, "fs-example-server: %s: %s\n", path,
			strerror(errno));
		unlink(tmp);
		close(fd);
		return -1;
	}
	return fd;
}

static int accept_client(int lfd)
{
	int sndbuf = MSG_MAX + BLOCK;
	int fd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);

	if (fd < 0)
		return -1;
	/* Room for the largest reply (the kernel clamps to wmem_max). */
	setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &sndbuf, sizeof(sndbuf));
	return fd;
}

static int serve(struct server *s, int lfd, bool once)
{
	struct pollfd pfd[1 + MAX_CLIENTS];
	unsigned int nr = 0, accepted = 0;

	for (;;) {
		bool listening = !once || !accepted;

		if (once && accepted && !nr)
			return 0;
		pfd[0] = (struct pollfd){ .fd = listening && nr < MAX_CLIENTS ?
							lfd :
							-1,
					  .events = POLLIN };
		if (poll(pfd, 1 + nr, -1) < 0) {
			if (errno == EINTR)
				continue;
			perror("fs-example-server: poll");
			return 1;
		}
		for (unsigned int i = 1; i <= nr; i++) {
			if (!pfd[i].revents)
				continue;
			if (serve_one(s, pfd[i].fd) == 0)
				continue;
			close(pfd[i].fd);
			pfd[i--] = pfd[nr--];
		}
		if (pfd[0].revents & POLLIN) {
			int fd = accept_client(lfd);

			if (fd >= 0) {
				pfd[++nr] = (struct pollfd){ .fd = fd,
							     .events = POLLIN };
				accepted++;
			}
		}
	}
}

static const char usage[] =
	"usage: fs-example-server [--delay-ms N [--delay-after N]] "
	"[--die-after N] [--once] [--stream] "
	"SOCKET_PATH\n";

static bool parse_uint(const char *arg, unsigned long max, unsigned long *out)
{
	char *end;

	errno = 0;
	*out = strtoul(arg, &end, 10);
	return !errno && *arg && !*end && *arg != '-' && *out <= max;
}

int main(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "delay-ms", required_argument, NULL, 'd' },
		{ "delay-after", required_argument, NULL, 'a' },
		{ "die-after", required_argument, NULL, 'k' },
		{ "once", no_argument, NULL, 'o' },
		{ "stream", no_argument, NULL, 's' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	static struct server s;
	unsigned long val;
	bool once = false;
	int c, lfd, ret;

	s.die_after = -1;
	while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
		switch (c) {
		case 'd':
			if (!parse_uint(optarg, INT_MAX, &val))
				goto bad_usage;
			s.delay_ms = (unsigned int)val;
			break;
		case 'a':
			if (!parse_uint(optarg, LONG_MAX, &s.delay_after))
				goto bad_usage;
			break;
		case 'k':
			if (!parse_uint(optarg, LONG_MAX, &val))
				goto bad_usage;
			s.die_after = (long)val;
			break;
		case 'o':
			once = true;
			break;
		case 's':
			s.stream = true;
			break;
		case 'h':
			fputs(usage, stdout);
			return 0;
		default:
			goto bad_usage;
		}
	}
	if (optind != argc - 1)
		goto bad_usage;
	s.in = malloc(MSG_MAX);
	s.out = malloc(MSG_MAX);
	if (!s.in || !s.out || seed(&s)) {
		fputs("fs-example-server: out of memory\n", stderr);
		return 1;
	}
	signal(SIGPIPE, SIG_IGN);
	lfd = listen_on(argv[optind], s.stream ? SOCK_STREAM : SOCK_SEQPACKET);
	if (lfd < 0)
		return 1;
	ret = serve(&s, lfd, once);
	close(lfd);
	unlink(argv[optind]);
	return ret;

bad_usage:
	fputs(usage, stderr);
	return 2;
}
