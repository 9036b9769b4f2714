// SPDX-License-Identifier: GPL-2.0
/*
 * fuzz fuse_virtual - the FUSE request decoder (devices/fs/fuse.c) over
 * the virtual backend (devices/fs/virtual.c), which relays every request
 * to a server over a Unix SOCK_SEQPACKET connection and matches its
 * replies to them (Documentation/virtual-fs.md). The fuse target's
 * session (fuse-session.h) drives the decoder; the server is a thread of
 * this process speaking the protocol on the other end of the connection,
 * serving a small fixed tree:
 *
 *	/hello.txt  "hello, world\n"
 *	/dir/       empty
 *	/link       -> hello.txt
 *
 * It answers every request with a well-formed reply (the tree does not
 * change: what would change it answers EROFS, what it does not know
 * ENOSYS), unless the input says otherwise.
 *
 * Input: two bytes (little-endian) of the server's script's length, the
 * script, then the fuse target's input. Each request the server reads
 * takes the script's next byte (0 past its end: the well-formed reply),
 * which says how it answers (enum act); some take more bytes of the
 * script. The session's own FUSE_INIT takes the first.
 *
 * Checked for every input, besides the session's checks: every request
 * ends within FUZZ_FUSE_WAIT_S, whatever the server does (a request the
 * server leaves unanswered fails after VIRT_TIMEOUT_MS). The listening
 * socket lives in a directory under /tmp made at the first input and
 * removed at exit; the backend and its connection are made per input.
 */
#include <pthread.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "devices/fs/virtual.h"
#include "selftests/fuzz/fuse-session.h"

#define VIRT_TIMEOUT_MS 10U
#define VIRT_MAX_WRITE	(128U << 10)
#define VIRT_PAD_MAX	0xffffU /* bytes a padded reply may add */

enum node {
	NODE_ROOT = FUSE_ROOT_ID,
	NODE_HELLO,
	NODE_DIR,
	NODE_LINK,
	NODE_END,
};

static const struct {
	const char *name;
	uint64_t parent;
	uint32_t mode;
	const char *data; /* a file's contents, a symlink's target */
} tree[NODE_END] = {
	[NODE_ROOT] = { "", NODE_ROOT, S_IFDIR | 0755, NULL },
	[NODE_HELLO] = { "hello.txt", NODE_ROOT, S_IFREG | 0644,
			 "hello, world\n" },
	[NODE_DIR] = { "dir", NODE_ROOT, S_IFDIR | 0755, NULL },
	[NODE_LINK] = { "link", NODE_ROOT, S_IFLNK | 0777, "hello.txt" },
};

/* How the server answers a request: the script's byte, modulo ACT_NR. */
enum act {
	ACT_GOOD,     /* the well-formed reply */
	ACT_NONE,     /* none: the request times out */
	ACT_BAD_LEN,  /* a header whose len lies, then the good reply */
	ACT_SHORT,    /* 1..15 bytes, then the good reply */
	ACT_OTHER,    /* another unique's reply, then the good one */
	ACT_ERRNO,    /* an error out of -511..0 */
	ACT_ERR_DATA, /* an error with a payload */
	ACT_PAD,      /* the good reply and up to VIRT_PAD_MAX bytes more */
	ACT_RAW,      /* the header, then the script's next bytes */
	ACT_TWICE,    /* the good reply, twice */
	ACT_EMPTY,    /* an empty packet: EOF to the relay */
	ACT_CLOSE,    /* the server ends */
	ACT_NR,
};

struct server {
	int fd;
	struct fuzz_in script;
	uint8_t *req, *out;
};

static char dir[] = "/tmp/kiln-fuzz-virtual.XXXXXX";
static char path[sizeof(dir) + 8];
static int listener = -1;

static void remove_dir(void)
{
	unlink(path);
	rmdir(dir);
}

static void listen_once(void)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };

	if (listener >= 0)
		return;
	fuzz_check(mkdtemp(dir));
	snprintf(path, sizeof(path), "%s/sock", dir);
	atexit(remove_dir);
	memcpy(sa.sun_path, path, strlen(path));
	/* Nonblocking: the backend's connect() is queued before accept. */
	listener = socket(AF_UNIX,
			  SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	fuzz_check(listener >= 0);
	fuzz_check(!bind(listener, (struct sockaddr *)&sa, sizeof(sa)));
	fuzz_check(!listen(listener, 4));
}

static void node_attr(uint64_t node, struct fuse_attr *a)
{
	const char *data = tree[node].data;

	*a = (struct fuse_attr){ .ino = node,
				 .size = data ? strlen(data) : 4096,
				 .blocks = 8,
				 .mode = tree[node].mode,
				 .nlink = S_ISDIR(tree[node].mode) ? 2 : 1,
				 .blksize = 4096 };
}

static bool node_ok(uint64_t node)
{
	return node >= NODE_ROOT && node < NODE_END;
}

/* The child of parent called name (arguments of alen bytes), or 0. */
static uint64_t lookup(uint64_t parent, const uint8_t *a, size_t alen)
{
	uint64_t n;

	if (!alen || a[alen - 1])
		return 0;
	for (n = NODE_HELLO; n < NODE_END; n++)
		if (tree[n].parent == parent &&
		    !strcmp(tree[n].name, (const char *)a))
			return n;
	return 0;
}

/* READDIR from entry off: the entries that fit size bytes. */
static size_t list_dir(uint64_t node, uint64_t off, size_t size, uint8_t *out)
{
	size_t used = 0;
	uint64_t n;

	for (n = NODE_HELLO; n < NODE_END && node == NODE_ROOT; n++) {
		size_t nl = strlen(tree[n].name);
		struct fuse_dirent d = { .ino = n,
					 .off = n,
					 .namelen = (uint32_t)nl,
					 .type = tree[n].mode >> 12 };

		if (n <= off)
			continue;
		if (used + FUSE_DIRENT_SIZE(&d) > size)
			break;
		memset(out + used, 0, FUSE_DIRENT_SIZE(&d));
		memcpy(out + used, &d, sizeof(d));
		memcpy(out + used + FUSE_NAME_OFFSET, tree[n].name, nl);
		used += FUSE_DIRENT_SIZE(&d);
	}
	return used;
}

/*
 * The well-formed answer to the request ih, arguments a[0, alen): its
 * payload in out, the length returned, or -errno.
 */
static ssize_t answer(const struct fuse_in_header *ih, const uint8_t *a,
		      size_t alen, uint8_t *out)
{
	uint64_t node = ih->nodeid;
	union {
		struct fuse_init_in init;
		struct fuse_read_in read;
		struct fuse_getxattr_in xattr;
	} in = { 0 };
	size_t len;

	memcpy(&in, a, alen < sizeof(in) ? alen : sizeof(in));
	if (ih->opcode == FUSE_INIT) {
		struct fuse_init_out o = {
			.major = FUSE_KERNEL_VERSION,
			.minor = in.init.minor < FUSE_KERNEL_MINOR_VERSION ?
					 in.init.minor :
					 FUSE_KERNEL_MINOR_VERSION,
			.max_readahead = in.init.max_readahead,
			.flags = in.init.flags &
				 (FUSE_ASYNC_READ | FUSE_BIG_WRITES),
			.max_write = VIRT_MAX_WRITE,
		};

		if (alen < sizeof(in.init) || in.init.major != o.major)
			return -EPROTO;
		memcpy(out, &o, sizeof(o));
		return sizeof(o);
	}
	if (!node_ok(node))
		return -ESTALE;
	switch (ih->opcode) {
	case FUSE_LOOKUP: {
		struct fuse_entry_out e = { .nodeid = lookup(node, a, alen),
					    .entry_valid = 1,
					    .attr_valid = 1 };

		if (!e.nodeid)
			return -ENOENT;
		node_attr(e.nodeid, &e.attr);
		memcpy(out, &e, sizeof(e));
		return sizeof(e);
	}
	case FUSE_GETATTR: {
		struct fuse_attr_out o = { .attr_valid = 1 };

		node_attr(node, &o.attr);
		memcpy(out, &o, sizeof(o));
		return sizeof(o);
	}
	case FUSE_READLINK:
		if (!S_ISLNK(tree[node].mode))
			return -EINVAL;
		len = strlen(tree[node].data);
		memcpy(out, tree[node].data, len);
		return (ssize_t)len;
	case FUSE_OPEN:
	case FUSE_OPENDIR: {
		struct fuse_open_out o = { .fh = node };

		if (S_ISDIR(tree[node].mode) != (ih->opcode == FUSE_OPENDIR))
			return S_ISDIR(tree[node].mode) ? -EISDIR : -ENOTDIR;
		memcpy(out, &o, sizeof(o));
		return sizeof(o);
	}
	case FUSE_READ:
		if (!S_ISREG(tree[node].mode))
			return -EISDIR;
		len = strlen(tree[node].data);
		if (in.read.offset >= len)
			return 0;
		len -= in.read.offset;
		if (len > in.read.size)
			len = in.read.size;
		memcpy(out, tree[node].data + in.read.offset, len);
		return (ssize_t)len;
	case FUSE_READDIR:
		if (!S_ISDIR(tree[node].mode))
			return -ENOTDIR;
		return (ssize_t)list_dir(node, in.read.offset,
					 in.read.size < FUSE_DIRBUF_MAX ?
						 in.read.size :
						 FUSE_DIRBUF_MAX,
					 out);
	case FUSE_STATFS: {
		struct fuse_statfs_out o = { .st = { .blocks = 1,
						     .files = NODE_END - 1,
						     .bsize = 4096,
						     .namelen = 255,
						     .frsize = 4096 } };

		memcpy(out, &o, sizeof(o));
		return sizeof(o);
	}
	case FUSE_LISTXATTR:
		if (!in.xattr.size) {
			struct fuse_getxattr_out o = { 0 };

			memcpy(out, &o, sizeof(o));
			return sizeof(o);
		}
		return 0;
	case FUSE_GETXATTR:
		return -ENODATA;
	case FUSE_RELEASE:
	case FUSE_RELEASEDIR:
	case FUSE_FLUSH:
	case FUSE_FSYNC:
	case FUSE_FSYNCDIR:
	case FUSE_ACCESS:
		return 0;
	case FUSE_SETATTR:
	case FUSE_MKNOD:
	case FUSE_MKDIR:
	case FUSE_SYMLINK:
	case FUSE_UNLINK:
	case FUSE_RMDIR:
	case FUSE_RENAME:
	case FUSE_RENAME2:
	case FUSE_LINK:
	case FUSE_CREATE:
	case FUSE_WRITE:
	case FUSE_SETXATTR:
	case FUSE_REMOVEXATTR:
	case FUSE_FALLOCATE:
		return -EROFS;
	default:
		return -ENOSYS;
	}
}

/* One packet; a failed send means the relay is gone, as is the session. */
static void put(struct server *sv, const void *buf, size_t len)
{
	if (send(sv->fd, buf, len, MSG_NOSIGNAL) < 0)
		shutdown(sv->fd, SHUT_RDWR);
}

/* A packet: the header (len as given), then n bytes of payload. */
static void put_reply(struct server *sv, uint32_t len, int32_t error,
		      uint64_t unique, const uint8_t *payload, size_t n)
{
	struct fuse_out_header oh = { .len = len,
				      .error = error,
				      .unique = unique };

	memcpy(sv->out, &oh, sizeof(oh));
	if (n)
		memmove(sv->out + sizeof(oh), payload, n);
	put(sv, sv->out, sizeof(oh) + n);
}

/* Answers one request of n bytes as the script says; false: stop. */
static bool serve_one(struct server *sv, size_t n)
{
	struct fuse_in_header ih;
	uint8_t *body = sv->out + sizeof(struct fuse_out_header);
	enum act act = fuzz_in__u8(&sv->script) % ACT_NR;
	size_t good, extra;
	ssize_t ret;
	uint32_t u;

	memcpy(&ih, sv->req, sizeof(ih));
	if (ih.opcode == FUSE_FORGET || ih.opcode == FUSE_BATCH_FORGET ||
	    ih.opcode == FUSE_INTERRUPT)
		return true;
	ret = answer(&ih, sv->req + sizeof(ih), n - sizeof(ih), body);
	good = ret < 0 ? 0 : (size_t)ret;
	if (ret > 0)
		memmove(sv->req, body, good); /* put_reply() writes out */
	u = sizeof(struct fuse_out_header) + (uint32_t)good;
	switch (act) {
	case ACT_NONE:
		return true;
	case ACT_BAD_LEN:
		put_reply(sv, u + 1 + fuzz_in__u8(&sv->script), 0, ih.unique,
			  sv->req, good);
		break;
	case ACT_SHORT:
		put(sv, &ih, 1 + fuzz_in__u8(&sv->script) % 15);
		break;
	case ACT_OTHER:
		put_reply(sv, u, 0, ih.unique + 1 + fuzz_in__u8(&sv->script),
			  sv->req, good);
		break;
	case ACT_ERRNO:
		u = fuzz_in__u32(&sv->script);
		put_reply(sv, sizeof(struct fuse_out_header),
			  u & 1 ? (int32_t)(u >> 1) : -512 - (int32_t)(u >> 2),
			  ih.unique, NULL, 0);
		return true;
	case ACT_ERR_DATA:
		put_reply(sv, u, -EIO, ih.unique, sv->req, good);
		return true;
	case ACT_PAD:
		extra = fuzz_in__u16(&sv->script) % (VIRT_PAD_MAX + 1);
		memset(sv->req + good, 0, extra);
		put_reply(sv, u + (uint32_t)extra, 0, ih.unique, sv->req,
			  good + extra);
		return true;
	case ACT_RAW: {
		const uint8_t *p = fuzz_in__bytes(
			&sv->script, fuzz_in__u8(&sv->script), &extra);

		put_reply(sv, sizeof(struct fuse_out_header) + (uint32_t)extra,
			  0, ih.unique, p, extra);
		return true;
	}
	case ACT_EMPTY:
		put(sv, &ih, 0);
		return true;
	case ACT_CLOSE:
		return false;
	case ACT_GOOD:
	case ACT_TWICE:
	case ACT_NR:
		break;
	}
	if (ret < 0)
		put_reply(sv, sizeof(struct fuse_out_header), (int32_t)ret,
			  ih.unique, NULL, 0);
	else
		put_reply(sv, u, 0, ih.unique, sv->req, good);
	if (act == ACT_TWICE)
		put(sv, sv->out, u);
	return true;
}

/* The server: requests until the relay hangs up (or the script ends it). */
static void *server_thread(void *arg)
{
	struct server *sv = arg;
	ssize_t n;

	for (;;) {
		n = recv(sv->fd, sv->req, FS_FORWARD_MAX, MSG_TRUNC);
		if (n <= 0)
			break;
		/* The relay checked the header: it is the packet's. */
		fuzz_check((size_t)n >= sizeof(struct fuse_in_header) &&
			   (size_t)n <= FS_FORWARD_MAX);
		fuzz_check(((struct fuse_in_header *)sv->req)->len == n);
		if (!serve_one(sv, (size_t)n))
			break;
	}
	close(sv->fd);
	return NULL;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	const struct virtual_fs_params vp = { .name = "fuzz",
					      .socket = path,
					      .timeout_ms = VIRT_TIMEOUT_MS };
	struct fuse_server_params sp = { .name = "fuzz" };
	static struct fuzz_fuse f = { .forwards = true };
	static struct server sv;
	struct fuzz_in in;
	struct fuse_server *s;
	struct fs_backend *b;
	size_t script_len;
	const uint8_t *script;
	pthread_t t;

	fuzz__quiet();
	listen_once();
	if (!sv.req) {
		/* A reply, padded, fits either: at most FS_FORWARD_MAX. */
		sv.req = malloc(FS_FORWARD_MAX + VIRT_PAD_MAX);
		sv.out = malloc(FS_FORWARD_MAX + VIRT_PAD_MAX);
		fuzz_check(sv.req && sv.out);
	}
	fuzz_in__init(&in, data, size);
	script = fuzz_in__bytes(&in, fuzz_in__u16(&in), &script_len);
	fuzz_in__init(&sv.script, script, script_len);

	fuzz_check(!virtual_fs__create(&b, &vp));
	sv.fd = accept4(listener, NULL, NULL, SOCK_CLOEXEC);
	fuzz_check(sv.fd >= 0);
	fuzz_check(!pthread_create(&t, NULL, server_thread, &sv));
	sp.backend = b;
	if (!fuse_server__create(&s, &sp)) {
		fuzz_fuse__run(s, &f, in.p, in.left);
		fuse_server__reset(s);
		fuse_server__destroy(s);
	}
	/* The relay closes its end: the server reads EOF and ends. */
	fs_backend__destroy(b);
	fuzz_check(!pthread_join(t, NULL));
	/*
	 * After the server ended, a request made the relay connect again,
	 * into the backlog, never served: not the next input's connection.
	 */
	for (int fd; (fd = accept4(listener, NULL, NULL, SOCK_CLOEXEC)) >= 0;)
		close(fd);
	return 0;
}
