// SPDX-License-Identifier: GPL-2.0
/*
 * fuzz fuse_bind - the FUSE request decoder (devices/fs/fuse.c) over the
 * bind backend (devices/fs/passthrough*.c), as a guest drives them
 * through virtio-fs: the fuse target's session (fuse-session.h) on a
 * host directory this time, in each of the bind's setups.
 *
 * Input: one byte that chooses the bind, then the fuse target's input
 * (requests after the target's own FUSE_INIT, split across segments).
 * The byte's bits:
 *
 *	0-1  ownership: default (mapped on a tmpfs with user.* xattrs),
 *	     mapped, squash, passthrough
 *	2    read-only
 *	3    masks: /.env and /dir/sub, in /storage when read-write
 *	4    READ and WRITE on an io_uring through the backend's io_fd, as
 *	     the device does them (else the backend's read and write)
 *
 * The host side, made again for every input on a fresh tmpfs:
 *
 *	src/      the bind's source: data, .env, dir/{a,sub/b,link},
 *	          hard (a link of dir/a), symlinks out of the tree
 *	          (escape, abs) and to nothing (dangling), a FIFO, files
 *	          with a user.kiln.stat record (owned, dev) and with a
 *	          broken one (bogus)
 *	storage/  mask storage: .env
 *	outside/  what must stay out of reach: secret
 *
 * Checked for every input, besides the session's checks: nothing beside
 * those three is made; outside/ comes out unchanged (names, types,
 * modes, owners, sizes, link counts, contents, link targets, the
 * user.kiln.stat xattr), and so do storage/ unless it is the bind's, the
 * whole source in a read-only bind, and the masked originals (src/.env,
 * src/dir/sub) in a bind with masks.
 *
 * The sandbox (sandbox.h): the process is root in a user, mount and
 * network namespace of its own (so the passthrough ownership runs; chown
 * to any other id fails, as no other is mapped), and the thread that
 * runs the session is chrooted into the input's tmpfs (nodev, nosuid,
 * noexec, 16 MiB, 1024 inodes), so the backend's confinement beneath
 * src/ is not all that stands between the fuzzer and the host's files:
 * an escape reaches outside/, which the checks see. Where the namespaces
 * cannot be made (no user namespaces), the target runs nothing and says
 * so once.
 */
#include <dirent.h>
#include <fcntl.h>
#include <pthread.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <unistd.h>

#include "devices/fs/passthrough.h"
#include "selftests/fuzz/fuse-session.h"
#include "selftests/fuzz/sandbox.h"

#define BIND_OWNERSHIP 3U /* the setup byte's bits */
#define BIND_READ_ONLY (1U << 2)
#define BIND_MASKS     (1U << 3)
#define BIND_RING      (1U << 4)
#define RING_ENTRIES   8U     /* one request in flight at a time */
#define DATA_SIZE      12345U /* more than a page, not a whole one */
#define TREE_DEPTH_MAX 128U   /* 64 requests make at most 64 levels */
#define META_XATTR     "user.kiln.stat"
#define META_SIZE      20U /* Documentation/virtio-fs.md, "mapped" */
#define FNV_BASIS      14695981039346656037ULL
#define FNV_PRIME      1099511628211ULL

int LLVMFuzzerInitialize(int *argc, char ***argv);

static char sandbox[] = "/tmp/kiln-fuzz-bind-XXXXXX";
static int sandbox_err = 1; /* 1: not made yet; 0: ready; -errno */

static const char *const mask_paths[] = { "/.env", "/dir/sub" };

/* ---- the sandbox --------------------------------------------------- */

static void setup(void)
{
	if (sandbox_err <= 0)
		return;
	sandbox_err = fuzz_sandbox__enter(sandbox, true);
	if (sandbox_err)
		fprintf(stderr, "fuse_bind: no sandbox (%s): inputs not run\n",
			strerror(-sandbox_err));
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	setup();
	return 0;
}

static void put_le32(uint8_t *p, uint32_t v)
{
	for (int i = 0; i < 4; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}

/*
 * A file with the first len bytes of the user.kiln.stat record a mapped
 * bind keeps for its guest: owned by id, of that mode and device.
 */
static void put_meta(int dir, const char *name, size_t len, uint32_t id,
		     uint32_t mode, uint32_t rdev)
{
	uint8_t meta[META_SIZE] = { 1 }; /* version 1, flags 0 */
	int fd;

	put_le32(meta + 4, id);
	put_le32(meta + 8, id);
	put_le32(meta + 12, mode);
	put_le32(meta + 16, rdev);
	fuzz_sandbox__put(dir, name, "meta\n", 5);
	fd = openat(dir, name, O_RDONLY | O_CLOEXEC);
	fuzz_check(fd >= 0);
	fuzz_check(!fsetxattr(fd, META_XATTR, meta, len, 0));
	close(fd);
}

/* The input's fresh tmpfs, holding the tree the top comment draws. */
static void fill_sandbox(void)
{
	static uint8_t data[DATA_SIZE];
	int dir;

	if (!data[1])
		for (size_t i = 0; i < sizeof(data); i++)
			data[i] = (uint8_t)(i * 31 + 7);
	fuzz_sandbox__mount(sandbox, "kiln-fuzz-bind");
	dir = open(sandbox, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	fuzz_check(dir >= 0);
	fuzz_check(!mkdirat(dir, "src", 0755) &&
		   !mkdirat(dir, "storage", 0755) &&
		   !mkdirat(dir, "outside", 0755) &&
		   !mkdirat(dir, "src/dir", 0755) &&
		   !mkdirat(dir, "src/dir/sub", 0700));
	fuzz_sandbox__put(dir, "outside/secret", "secret\n", 7);
	fuzz_sandbox__put(dir, "storage/.env", "KEY=storage\n", 12);
	fuzz_sandbox__put(dir, "src/.env", "KEY=source\n", 11);
	fuzz_sandbox__put(dir, "src/data", data, sizeof(data));
	fuzz_sandbox__put(dir, "src/dir/a", "a\n", 2);
	fuzz_sandbox__put(dir, "src/dir/sub/b", "", 0);
	fuzz_check(!linkat(dir, "src/dir/a", dir, "src/hard", 0));
	fuzz_check(!symlinkat("../data", dir, "src/dir/link") &&
		   !symlinkat("../outside/secret", dir, "src/escape") &&
		   !symlinkat("/outside/secret", dir, "src/abs") &&
		   !symlinkat("/nowhere", dir, "src/dangling"));
	fuzz_check(!mkfifoat(dir, "src/fifo", 0644));
	put_meta(dir, "src/owned", META_SIZE, 1000, S_IFREG | 04755, 0);
	put_meta(dir, "src/dev", META_SIZE, 0, S_IFCHR | 0600, 1U << 8 | 3);
	put_meta(dir, "src/bogus", 3, 0, 0, 0); /* cut short */
	close(dir);
}

/* ---- what must not change ------------------------------------------ */

static uint64_t fnv(uint64_t h, const void *p, size_t len)
{
	const uint8_t *b = p;

	while (len--)
		h = (h ^ *b++) * FNV_PRIME;
	return h;
}

/*
 * The entry name of dirfd as a number: its name, type, mode, owner,
 * size, link count, device, content or link target, user.kiln.stat,
 * and for a directory its entries', in no order. Times are left out: a
 * read moves them.
 */
static uint64_t entry_sum(int dirfd, const char *name, unsigned int depth)
{
	static uint8_t buf[FS_PATH_MAX];
	uint64_t h = FNV_BASIS, sub = 0, meta[6];
	struct dirent *d;
	struct stat st;
	ssize_t n;
	DIR *dir;
	int fd;

	fuzz_check(depth < TREE_DEPTH_MAX);
	fuzz_check(!fstatat(dirfd, name, &st, AT_SYMLINK_NOFOLLOW));
	h = fnv(h, name, strlen(name));
	meta[0] = st.st_mode;
	meta[1] = st.st_uid;
	meta[2] = st.st_gid;
	meta[3] = (uint64_t)st.st_size;
	meta[4] = st.st_nlink;
	meta[5] = st.st_rdev;
	h = fnv(h, meta, sizeof(meta));
	if (S_ISLNK(st.st_mode)) {
		n = readlinkat(dirfd, name, (char *)buf, sizeof(buf));
		fuzz_check(n >= 0);
		return fnv(h, buf, n);
	}
	if (!S_ISREG(st.st_mode) && !S_ISDIR(st.st_mode))
		return h;
	fd = openat(dirfd, name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
	fuzz_check(fd >= 0);
	n = fgetxattr(fd, META_XATTR, buf, sizeof(buf));
	h = fnv(h, buf, n > 0 ? n : 0);
	if (S_ISREG(st.st_mode)) {
		while ((n = read(fd, buf, sizeof(buf))) > 0)
			h = fnv(h, buf, n);
		fuzz_check(n == 0);
		close(fd);
		return h;
	}
	dir = fdopendir(fd);
	fuzz_check(dir);
	while ((d = readdir(dir)))
		if (strcmp(d->d_name, ".") && strcmp(d->d_name, ".."))
			sub += entry_sum(fd, d->d_name, depth + 1);
	closedir(dir);
	return fnv(h, &sub, sizeof(sub));
}

/* The parts of the tree that must come out as they went in. */
struct kept {
	uint64_t outside, storage, src, env, sub;
};

static void take_sums(int root, uint8_t bind, struct kept *k)
{
	bool ro = bind & BIND_READ_ONLY, masks = bind & BIND_MASKS;

	memset(k, 0, sizeof(*k));
	k->outside = entry_sum(root, "outside", 0);
	if (ro || !masks)
		k->storage = entry_sum(root, "storage", 0);
	if (ro)
		k->src = entry_sum(root, "src", 0);
	if (masks) {
		k->env = entry_sum(root, "src/.env", 0);
		k->sub = entry_sum(root, "src/dir/sub", 0);
	}
}

/* The tmpfs holds src, storage and outside, and nothing else. */
static void check_root(int root)
{
	static const char *const names[] = { ".", "..", "src", "storage",
					     "outside" };
	struct dirent *d;
	unsigned int i;
	DIR *dir;

	dir = fdopendir(dup(root));
	fuzz_check(dir);
	while ((d = readdir(dir))) {
		for (i = 0; i < ARRAY_SIZE(names); i++)
			if (!strcmp(d->d_name, names[i]))
				break;
		fuzz_check(i < ARRAY_SIZE(names));
	}
	closedir(dir);
}

/* ---- the session --------------------------------------------------- */

struct session {
	uint8_t bind;
	const uint8_t *data;
	size_t size;
};

static void *session_thread(void *arg)
{
	const struct session *ses = arg;
	bool ro = ses->bind & BIND_READ_ONLY, masks = ses->bind & BIND_MASKS;
	const struct fs_bind_params bp = {
		.name = "fuzz",
		.source = "/src",
		.read_only = ro,
		.mask_paths = masks ? mask_paths : NULL,
		.nr_mask_paths = masks ? ARRAY_SIZE(mask_paths) : 0,
		.mask_storage = masks && !ro ? "/storage" : NULL,
		.ownership = (enum fs_ownership)(ses->bind & BIND_OWNERSHIP),
	};
	struct fuse_server_params sp = { .name = "fuzz",
					 .io_tag = FUZZ_FUSE_IO_TAG };
	static struct fuzz_fuse f;
	struct fuse_server *s;
	struct io_uring ring;
	struct fs_backend *b;

	/* Never run outside the sandbox. */
	fuzz_sandbox__chroot(sandbox);
	f.ring = NULL;
	if (ses->bind & BIND_RING) {
		fuzz_check(!io_uring_queue_init(RING_ENTRIES, &ring, 0));
		f.ring = sp.ring = &ring;
	}
	fuzz_check(!passthrough__create(&b, &bp));
	sp.backend = b;
	fuzz_check(!fuse_server__create(&s, &sp));
	fuzz_fuse__run(s, &f, ses->data, ses->size);
	fuse_server__reset(s);
	fuse_server__destroy(s);
	fs_backend__destroy(b);
	if (f.ring)
		io_uring_queue_exit(&ring);
	return NULL;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct kept before, after;
	struct session ses;
	pthread_t t;
	int root;

	setup();
	if (sandbox_err || !size)
		return 0;
	fuzz__quiet();
	ses = (struct session){ .bind = data[0],
				.data = data + 1,
				.size = size - 1 };
	fill_sandbox();
	root = open(sandbox, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	fuzz_check(root >= 0);
	take_sums(root, ses.bind, &before);
	fuzz_check(!pthread_create(&t, NULL, session_thread, &ses));
	fuzz_check(!pthread_join(t, NULL));
	check_root(root);
	take_sums(root, ses.bind, &after);
	fuzz_check(!memcmp(&before, &after, sizeof(before)));
	close(root);
	fuzz_sandbox__umount(sandbox);
	return 0;
}
