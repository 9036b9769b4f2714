// SPDX-License-Identifier: GPL-2.0
/*
 * virtio-fs end to end on KVM: the guest mounts what --mount (or the JSON
 * config's "mounts") gives it and works on it with busybox and fs-probe
 * (selftests/helpers/fs-probe.c, an extra initramfs archive); the test
 * checks the host side afterwards. bind: a POSIX subset, escapes (with a
 * host process racing symlinks in), ro, masks; memory: seed and limit;
 * virtual: tools/fs-example-server, its timeout and its death; eight
 * concurrent writers; a Debian guest's non-root user owning its files in
 * a mapped bind whose host files all stay the vmm's user's.
 */
#include <ftw.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "selftests/kselftest.h"
#include "selftests/kvm/vmm_util.h"

#define SECRET "TOPSECRET-host-only"

struct fsx {
	char dir[64];
	char src[128];	   /* the bind's source */
	char outside[128]; /* next to it: must never be reached */
	char storage[128]; /* mask storage */
	char initrd[160];  /* initramfs + fs-probe */
	char config[160];
	char sock[160];
	char opt[400]; /* a --mount value */
};

static void put_file(struct __test_metadata *_metadata, const char *dir,
		     const char *name, const char *content)
{
	char path[300];
	FILE *f;

	snprintf(path, sizeof(path), "%s/%s", dir, name);
	f = fopen(path, "w");
	ASSERT_NE(NULL, f);
	fputs(content, f);
	ASSERT_EQ(0, fclose(f));
}

/* The whole file, NUL-terminated (at most len - 1 bytes); "" if absent. */
static void get_file(const char *dir, const char *name, char *buf, size_t len)
{
	char path[300];
	size_t n = 0;
	FILE *f;

	snprintf(path, sizeof(path), "%s/%s", dir, name);
	buf[0] = '\0';
	f = fopen(path, "r");
	if (!f)
		return;
	n = fread(buf, 1, len - 1, f);
	buf[n] = '\0';
	fclose(f);
}

static bool exists(const char *dir, const char *name)
{
	char path[300];
	struct stat st;

	snprintf(path, sizeof(path), "%s/%s", dir, name);
	return !lstat(path, &st);
}

static void probe_cpio(const struct guest *g, char *out, size_t len)
{
	const char *vmm = g->vmm;
	const char *slash = strrchr(vmm, '/');

	/* Next to the vmm: build/vmm -> build/selftests/helpers/. */
	snprintf(out, len, "%.*s/selftests/helpers/fs-probe.cpio",
		 slash ? (int)(slash - vmm) : 1, slash ? vmm : ".");
}

/*
 * The test's directory: under test_tmp(), or, for a test whose bind
 * mount keeps ownership in user.* extended attributes (xattrs), under
 * /tmp: the harness's tmpfs (Linux 6.1) cannot hold those.
 */
static void fsx_init_xattrs(struct __test_metadata *_metadata, struct fsx *s,
			    bool xattrs)
{
	char probe[300], cmd[800];
	struct guest g;

	guest_paths(&g);
	if (access("/dev/kvm", R_OK | W_OK))
		SKIP(return, "no usable /dev/kvm (run through tools/vmtest)");
	if (xattrs)
		snprintf(s->dir, sizeof(s->dir), "/tmp/kiln-fs-XXXXXX");
	else
		test_tmp_name(s->dir, sizeof(s->dir), "kiln-fs-XXXXXX");
	ASSERT_NE(NULL, mkdtemp(s->dir));
	snprintf(s->src, sizeof(s->src), "%s/src", s->dir);
	snprintf(s->outside, sizeof(s->outside), "%s/outside", s->dir);
	snprintf(s->storage, sizeof(s->storage), "%s/storage", s->dir);
	snprintf(s->initrd, sizeof(s->initrd), "%s/initrd.cpio", s->dir);
	snprintf(s->config, sizeof(s->config), "%s/vm.json", s->dir);
	snprintf(s->sock, sizeof(s->sock), "%s/fs.sock", s->dir);
	ASSERT_EQ(0, mkdir(s->src, 0755));
	ASSERT_EQ(0, mkdir(s->outside, 0755));
	ASSERT_EQ(0, mkdir(s->storage, 0755));
	put_file(_metadata, s->outside, "secret", SECRET "\n");
	probe_cpio(&g, probe, sizeof(probe));
	ASSERT_EQ(0, access(probe, R_OK))
	TH_LOG("%s missing: make selftests", probe);
	snprintf(cmd, sizeof(cmd), "cat '%s' '%s' > '%s'", g.initrd, probe,
		 s->initrd);
	ASSERT_EQ(0, system(cmd));
}

static void fsx_init(struct __test_metadata *_metadata, struct fsx *s)
{
	fsx_init_xattrs(_metadata, s, false);
}

static void fsx_fini(struct fsx *s)
{
	char cmd[128];

	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", s->dir);
	if (system(cmd))
		fprintf(stderr, "# cannot remove %s\n", s->dir);
}

#define FS_BOOT(s, opts_, script, r)                                        \
	BOOT_SPEC((&(struct boot_spec){ .initrd = (s)->initrd,              \
					.opts = opts_,                      \
					.cmd = ARGS("sh", "-c", script) }), \
		  r)

TEST_TIMEOUT(bind_posix_subset, BOOT_TIMEOUT)
{
	struct spawn_result r;
	char buf[256];
	struct stat a, b;
	struct fsx s;

	fsx_init(_metadata, &s);
	put_file(_metadata, s.src, "host.txt", "from the host\n");
	snprintf(s.opt, sizeof(s.opt), "/w=bind:%s:rw", s.src);
	FS_BOOT(&s, ARGS("--cpus", "2", "--mount", s.opt),
		"set -e; cd /w; cat host.txt;"
		"echo hello > a; echo more >> a; cat a;"
		"truncate -s 3 a; echo \"[$(cat a)]\";"
		"mkdir d; rmdir d; mkdir -p d2/sub; echo x > d2/f; mv d2/f b;"
		"echo old > c; echo new > e; mv e c; cat c;"
		"ln c hard; echo links $(stat -c %h c);"
		"ln -s c sym; echo target $(readlink sym) $(cat sym);"
		"chmod 640 c; echo mode $(stat -c %a c);"
		"touch -d '2001-02-03 04:05:06' c; echo mtime $(stat -c %Y c);"
		"echo mmap $(fs-probe mmap a);"
		"fs-probe sparse big 8589934591;"
		"rm b; rmdir d2/sub; ls; echo done",
		&r);
	EXPECT_EQ(0, r.status);
	EXPECT_NE(NULL, strstr(r.out, "from the host\n"));
	EXPECT_NE(NULL, strstr(r.out, "hello\nmore\n"));
	EXPECT_NE(NULL, strstr(r.out, "[hel]"));
	EXPECT_NE(NULL, strstr(r.out, "\nnew\n"));
	EXPECT_NE(NULL, strstr(r.out, "links 2"));
	EXPECT_NE(NULL, strstr(r.out, "target c new"));
	EXPECT_NE(NULL, strstr(r.out, "mode 640"));
	EXPECT_NE(NULL, strstr(r.out, "mtime 981173106"));
	EXPECT_NE(NULL, strstr(r.out, "mmap hel"));
	EXPECT_NE(NULL, strstr(r.out, "size 8589934592 blocks"));
	EXPECT_NE(NULL, strstr(r.out, "done"));

	/* What the guest did is what the host directory holds. */
	get_file(s.src, "a", buf, sizeof(buf));
	EXPECT_STREQ("hel", buf);
	get_file(s.src, "c", buf, sizeof(buf));
	EXPECT_STREQ("new\n", buf);
	EXPECT_FALSE(exists(s.src, "b"));
	EXPECT_FALSE(exists(s.src, "e"));
	EXPECT_FALSE(exists(s.src, "d"));
	EXPECT_TRUE(exists(s.src, "d2"));
	snprintf(buf, sizeof(buf), "%s/c", s.src);
	ASSERT_EQ(0, stat(buf, &a));
	EXPECT_EQ(0640, a.st_mode & 07777);
	EXPECT_EQ(981173106, a.st_mtime);
	snprintf(buf, sizeof(buf), "%s/hard", s.src);
	ASSERT_EQ(0, stat(buf, &b));
	EXPECT_EQ(a.st_ino, b.st_ino);
	snprintf(buf, sizeof(buf), "%s/big", s.src);
	ASSERT_EQ(0, stat(buf, &b));
	EXPECT_EQ(8589934592LL, (long long)b.st_size);
	EXPECT_LT((long long)b.st_blocks, 1024); /* sparse on the host too */
	fsx_fini(&s);
}

/* A host process swapping a directory for a symlink out of the tree. */
struct racer {
	const struct fsx *s;
	atomic_bool stop;
	unsigned long swaps;
};

#define RACE_GO	     "go" /* the guest made it: the racing starts */
#define RACE_POLL_US 10000

static void *race_symlinks(void *arg)
{
	struct racer *rc = arg;
	char dir[200], real[200], go[200];

	snprintf(dir, sizeof(dir), "%s/dir", rc->s->src);
	snprintf(real, sizeof(real), "%s/dir.real", rc->s->src);
	snprintf(go, sizeof(go), "%s/" RACE_GO, rc->s->src);
	/*
	 * Not while the guest boots: the racing is for its lookups, and
	 * the harness's load meanwhile only slows the boot (and, in the
	 * nested harness, hung boots in the timer interrupt,
	 * Documentation/harness.md).
	 */
	while (access(go, F_OK) && !atomic_load(&rc->stop))
		usleep(RACE_POLL_US);
	/*
	 * A few hundred swaps a second: enough to land between the guest's
	 * lookups and its next ops many times, without starving the guest
	 * of the harness's two CPUs (each rename here is a FUSE round trip
	 * of the harness's own virtiofs root when run through tools/vmtest).
	 */
	while (!atomic_load(&rc->stop)) {
		if (rename(dir, real))
			break;
		if (!symlink(rc->s->outside, dir)) {
			usleep(1000);
			unlink(dir);
		}
		if (rename(real, dir))
			break;
		rc->swaps++;
		usleep(2000);
	}
	return NULL;
}

TEST_TIMEOUT(bind_escapes_fail, BOOT_TIMEOUT)
{
	char link[300], dir[200], listing[512];
	struct racer rc = { 0 };
	struct spawn_result r;
	pthread_t t;
	struct fsx s;

	fsx_init(_metadata, &s);
	/* Host-side symlinks pointing out, absolute and relative. */
	snprintf(link, sizeof(link), "%s/secret", s.outside);
	snprintf(dir, sizeof(dir), "%s/abs", s.src);
	ASSERT_EQ(0, symlink(link, dir));
	snprintf(dir, sizeof(dir), "%s/rel", s.src);
	ASSERT_EQ(0, symlink("../outside/secret", dir));
	snprintf(dir, sizeof(dir), "%s/dir", s.src);
	ASSERT_EQ(0, mkdir(dir, 0755));
	put_file(_metadata, dir, "inside", "inside\n");
	snprintf(s.opt, sizeof(s.opt), "/w=bind:%s:rw", s.src);

	rc.s = &s;
	ASSERT_EQ(0, pthread_create(&t, NULL, race_symlinks, &rc));
	FS_BOOT(&s, ARGS("--mount", s.opt),
		"touch /w/" RACE_GO "; "
		"cat /w/abs /w/rel /w/../outside/secret "
		"/w/dir/../../outside/secret;"
		"ls -la /w/..; ln -s / /w/up; ls /w/up/; cat /w/up/secret;"
		"ln -s ../../../.. /w/dots; ls /w/dots/; cat "
		"/w/dots/outside/secret;"
		"ln /w/dir/inside /tmp/hl; mv /w/dir/inside /escaped;"
		"for i in $(seq 150); do cat /w/dir/secret /w/dir/inside; ls "
		"/w/dir;"
		" echo x > /w/dir/new-$i; done 2>/dev/null | sort | uniq -c;"
		"echo done",
		&r);
	atomic_store(&rc.stop, true);
	pthread_join(t, NULL);
	TH_LOG("host swapped the directory %lu times", rc.swaps);
	EXPECT_EQ(0, r.status);
	EXPECT_NE(NULL, strstr(r.out, "done"));
	EXPECT_EQ(NULL, strstr(r.out, SECRET));
	EXPECT_GT(rc.swaps, 10UL);

	/* Nothing appeared next to the secret, nothing changed in it. */
	snprintf(link, sizeof(link), "ls -A '%s'", s.outside);
	{
		FILE *p = popen(link, "r");
		size_t n;

		ASSERT_NE(NULL, p);
		n = fread(listing, 1, sizeof(listing) - 1, p);
		listing[n] = '\0';
		pclose(p);
	}
	EXPECT_STREQ("secret\n", listing);
	get_file(s.outside, "secret", listing, sizeof(listing));
	EXPECT_STREQ(SECRET "\n", listing);
	fsx_fini(&s);
}

TEST_TIMEOUT(bind_readonly_refuses_every_change, BOOT_TIMEOUT)
{
	struct spawn_result r;
	char buf[200];
	struct fsx s;

	fsx_init(_metadata, &s);
	put_file(_metadata, s.src, "a", "keep\n");
	snprintf(buf, sizeof(buf), "%s/d", s.src);
	ASSERT_EQ(0, mkdir(buf, 0755));
	snprintf(s.opt, sizeof(s.opt), "/w=bind:%s:ro", s.src);
	FS_BOOT(&s, ARGS("--mount", s.opt),
		"cat /w/a;"
		"for op in 'creat /w/n' 'open-w /w/a' 'truncate /w/a' "
		"'unlink /w/a' 'mkdir /w/m' 'rmdir /w/d' 'rename /w/a /w/b' "
		"'link /w/a /w/l' 'symlink a /w/s'; do"
		" echo \"$op: $(fs-probe errno $op)\"; done;"
		"chmod 600 /w/a 2>/dev/null || echo chmod refused",
		&r);
	EXPECT_EQ(0, r.status);
	EXPECT_NE(NULL, strstr(r.out, "keep\n"));
	EXPECT_NE(NULL, strstr(r.out, "creat /w/n: EROFS"));
	EXPECT_NE(NULL, strstr(r.out, "open-w /w/a: EROFS"));
	EXPECT_NE(NULL, strstr(r.out, "truncate /w/a: EROFS"));
	EXPECT_NE(NULL, strstr(r.out, "unlink /w/a: EROFS"));
	EXPECT_NE(NULL, strstr(r.out, "mkdir /w/m: EROFS"));
	EXPECT_NE(NULL, strstr(r.out, "rmdir /w/d: EROFS"));
	EXPECT_NE(NULL, strstr(r.out, "rename /w/a /w/b: EROFS"));
	EXPECT_NE(NULL, strstr(r.out, "link /w/a /w/l: EROFS"));
	EXPECT_NE(NULL, strstr(r.out, "symlink a /w/s: EROFS"));
	EXPECT_NE(NULL, strstr(r.out, "chmod refused"));
	get_file(s.src, "a", buf, sizeof(buf));
	EXPECT_STREQ("keep\n", buf);
	EXPECT_TRUE(exists(s.src, "d"));
	EXPECT_FALSE(exists(s.src, "n"));
	EXPECT_FALSE(exists(s.src, "b"));
	fsx_fini(&s);
}

static void write_config(struct __test_metadata *_metadata, const struct fsx *s,
			 const char *mounts)
{
	FILE *f = fopen(s->config, "w");

	ASSERT_NE(NULL, f);
	fprintf(f, "{\"mounts\": %s}\n", mounts);
	ASSERT_EQ(0, fclose(f));
}

TEST_TIMEOUT(bind_masks, BOOT_TIMEOUT * 2)
{
	char json[1024], buf[200];
	struct spawn_result r;
	struct fsx s;

	fsx_init(_metadata, &s);
	put_file(_metadata, s.src, ".env", "SECRET=1\n");
	put_file(_metadata, s.src, "app.js", "code\n");
	snprintf(buf, sizeof(buf), "%s/node_modules", s.src);
	ASSERT_EQ(0, mkdir(buf, 0755));
	put_file(_metadata, buf, "host-dep.js", "host dep\n");

	/* ro: masked paths are absent. */
	snprintf(json, sizeof(json),
		 "{\"/w\": {\"bind\": {\"source\": \"%s\", \"access\": \"ro\", "
		 "\"mask\": {\"paths\": [\"/.env\", \"/node_modules\"]}}}}",
		 s.src);
	write_config(_metadata, &s, json);
	FS_BOOT(&s, ARGS("--config", s.config),
		"ls -a /w; cat /w/.env || echo no-env;"
		"ls /w/node_modules || echo no-modules; cat /w/app.js",
		&r);
	EXPECT_EQ(0, r.status);
	EXPECT_EQ(NULL, strstr(r.out, "SECRET"));
	EXPECT_EQ(NULL, strstr(r.out, ".env\n"));
	EXPECT_EQ(NULL, strstr(r.out, "host-dep"));
	EXPECT_NE(NULL, strstr(r.out, "no-env"));
	EXPECT_NE(NULL, strstr(r.out, "no-modules"));
	EXPECT_NE(NULL, strstr(r.out, "code\n"));

	/* rw: the guest's own versions land in the storage. */
	snprintf(json, sizeof(json),
		 "{\"/w\": {\"bind\": {\"source\": \"%s\", \"access\": \"rw\", "
		 "\"mask\": {\"paths\": [\"/.env\", \"/node_modules\"], "
		 "\"storage\": {\"source\": \"%s\"}}}}}",
		 s.src, s.storage);
	write_config(_metadata, &s, json);
	FS_BOOT(&s, ARGS("--config", s.config),
		"set -e; cat /w/.env 2>/dev/null || echo no-env;"
		"echo LOCAL=1 > /w/.env; cat /w/.env;"
		"mkdir -p /w/node_modules/pkg; echo dep > "
		"/w/node_modules/pkg/i.js;"
		"ls /w/node_modules; echo edited > /w/app.js; echo done",
		&r);
	EXPECT_EQ(0, r.status);
	EXPECT_NE(NULL, strstr(r.out, "no-env"));
	EXPECT_NE(NULL, strstr(r.out, "LOCAL=1\n"));
	EXPECT_EQ(NULL, strstr(r.out, "host-dep"));
	EXPECT_NE(NULL, strstr(r.out, "done"));
	/* source: untouched under the masks, edited elsewhere. */
	get_file(s.src, ".env", buf, sizeof(buf));
	EXPECT_STREQ("SECRET=1\n", buf);
	EXPECT_FALSE(exists(s.src, "node_modules/pkg"));
	EXPECT_TRUE(exists(s.src, "node_modules/host-dep.js"));
	get_file(s.src, "app.js", buf, sizeof(buf));
	EXPECT_STREQ("edited\n", buf);
	/* storage: what the guest made under the masks. */
	get_file(s.storage, ".env", buf, sizeof(buf));
	EXPECT_STREQ("LOCAL=1\n", buf);
	get_file(s.storage, "node_modules/pkg/i.js", buf, sizeof(buf));
	EXPECT_STREQ("dep\n", buf);
	fsx_fini(&s);
}

TEST_TIMEOUT(memory_seed_and_limit, BOOT_TIMEOUT)
{
	struct spawn_result r;
	struct fsx s;

	fsx_init(_metadata, &s);
	write_config(_metadata, &s,
		     "{\"/m\": {\"memory\": {\"files\": {\"/seed.txt\": "
		     "\"seeded\\n\", \"/etc/conf/a.ini\": \"k=v\\n\"}, "
		     "\"maxBytes\": \"1M\"}}}");
	FS_BOOT(&s, ARGS("--config", s.config),
		"cat /m/seed.txt /m/etc/conf/a.ini;"
		"dd if=/dev/zero of=/m/big bs=64k count=32 2>&1 | grep -o 'No "
		"space.*';"
		"rm /m/big; echo again > /m/after; cat /m/after;"
		"ln /m/after /m/hl; mv /m/hl /m/seed.txt; cat /m/seed.txt;"
		"echo links $(stat -c %h /m/after)",
		&r);
	EXPECT_EQ(0, r.status);
	EXPECT_NE(NULL, strstr(r.out, "seeded\nk=v\n"));
	EXPECT_NE(NULL, strstr(r.out, "No space left on device"));
	EXPECT_NE(NULL, strstr(r.out, "again\nagain\n"));
	EXPECT_NE(NULL, strstr(r.out, "links 2"));
	fsx_fini(&s);
}

static pid_t start_server(const struct fsx *s, const char *const extra[])
{
	const char *argv[16];
	char server[300];
	struct guest g;
	const char *slash;
	int i = 0;
	pid_t pid;

	guest_paths(&g);
	slash = strrchr(g.vmm, '/');
	snprintf(server, sizeof(server), "%.*s/tools/fs-example-server",
		 slash ? (int)(slash - g.vmm) : 1, slash ? g.vmm : ".");
	argv[i++] = env_or("KILN_FS_EXAMPLE_SERVER", server);
	for (int j = 0; extra && extra[j] && i < 14; j++)
		argv[i++] = extra[j];
	argv[i++] = s->sock;
	argv[i] = NULL;
	pid = fork();
	if (pid == 0) {
		execv(argv[0], (char *const *)argv);
		_exit(127);
	}
	for (i = 0; i < 100 && access(s->sock, F_OK); i++)
		usleep(50000);
	return pid;
}

static void stop_server(pid_t pid)
{
	kill(pid, SIGKILL);
	waitpid(pid, NULL, 0);
}

TEST_TIMEOUT(virtual_server_serves_times_out_and_dies, BOOT_TIMEOUT * 3)
{
	struct spawn_result r;
	char json[512];
	struct fsx s;
	pid_t srv;

	fsx_init(_metadata, &s);
	srv = start_server(&s, NULL);
	ASSERT_EQ(0, access(s.sock, F_OK));
	snprintf(s.opt, sizeof(s.opt), "/v=virtual:%s", s.sock);
	FS_BOOT(&s, ARGS("--mount", s.opt),
		"cat /v/hello.txt; ls /v /v/dir; echo hi > /v/new; cat /v/new;"
		"echo done",
		&r);
	stop_server(srv);
	unlink(s.sock);
	EXPECT_EQ(0, r.status);
	EXPECT_NE(NULL, strstr(r.out, "hello from the orchestrator"));
	EXPECT_NE(NULL, strstr(r.out, "a.txt"));
	EXPECT_NE(NULL, strstr(r.out, "hi\n"));
	EXPECT_NE(NULL, strstr(r.out, "done"));

	/* Answers slower than the timeout: EIO, and the VM goes on. */
	srv = start_server(&s,
			   ARGS("--delay-after", "20", "--delay-ms", "3000"));
	snprintf(json, sizeof(json),
		 "{\"/v\": {\"virtual\": {\"socket\": \"%s\", "
		 "\"timeoutMs\": 500}}}",
		 s.sock);
	write_config(_metadata, &s, json);
	FS_BOOT(&s, ARGS("--config", s.config),
		"for i in 1 2 3 4 5 6 7 8; do cat /v/dir/a.txt /v/hello.txt"
		" >/dev/null || true; done; cat /v/dir/b.txt; echo status $?",
		&r);
	stop_server(srv);
	unlink(s.sock);
	EXPECT_EQ(0, r.status);
	EXPECT_NE(NULL, strstr(r.out, "status 1"));
	EXPECT_NE(NULL, strstr(r.out, "Input/output error"));

	/* The server dies: EIO, promptly, and the VM goes on. */
	srv = start_server(&s, ARGS("--die-after", "25"));
	snprintf(s.opt, sizeof(s.opt), "/v=virtual:%s", s.sock);
	FS_BOOT(&s, ARGS("--mount", s.opt),
		"for i in $(seq 30); do cat /v/hello.txt >/dev/null 2>&1;"
		" echo x > /v/f$i 2>/dev/null; done; cat /v/hello.txt;"
		"echo status $?",
		&r);
	stop_server(srv);
	EXPECT_EQ(0, r.status);
	EXPECT_NE(NULL, strstr(r.out, "status 1"));
	fsx_fini(&s);
}

/*
 * 512 KiB each (128 writes of 4 KiB, an fsync, 128 reads): the writers
 * still overlap. Each nested-guest request is a chance for the harness
 * to lose a wakeup: with 4 MiB each this test's guest stopped in 4 of 10
 * runs under QEMU with virtiofsd and 1 of 10 under vmm (tools/fs-census,
 * Documentation/harness.md), so the volume lives in fs-census.
 */
#define WRITER_KIB     512
#define WRITER_KIB_STR "512"

TEST_TIMEOUT(eight_concurrent_writers, BOOT_TIMEOUT)
{
	struct spawn_result r;
	char name[16], path[300];
	struct stat st;
	struct fsx s;

	fsx_init(_metadata, &s);
	snprintf(s.opt, sizeof(s.opt), "/w=bind:%s:rw", s.src);
	FS_BOOT(&s, ARGS("--cpus", "2", "--mount", s.opt),
		"fs-probe writers /w 8 " WRITER_KIB_STR, &r);
	EXPECT_EQ(0, r.status);
	EXPECT_NE(NULL, strstr(r.out, "writers ok"));
	for (int i = 0; i < 8; i++) {
		snprintf(name, sizeof(name), "w%d", i);
		snprintf(path, sizeof(path), "%s/%s", s.src, name);
		ASSERT_EQ(0, stat(path, &st));
		EXPECT_EQ(WRITER_KIB * 1024, st.st_size);
	}
	fsx_fini(&s);
}

/* The "done when": a real image builds a project in a bind. */
TEST_TIMEOUT(debian_builds_a_project_in_a_bind, BOOT_TIMEOUT)
{
	char desc[300], cmd[600], buf[256];
	struct spawn_result r;
	struct guest g;
	struct fsx s;
	FILE *p;

	fsx_init(_metadata, &s);
	guest_paths(&g);
	snprintf(desc, sizeof(desc), "%s/debian-12-agent.json", g.images);
	ASSERT_EQ(0, access(desc, R_OK)) TH_LOG("%s missing: make image", desc);
	put_file(_metadata, s.src, "calc.py",
		 "def add(a, b):\n    return a + b\n");
	put_file(
		_metadata, s.src, "test_calc.py",
		"import calc\nassert calc.add(2, 3) == 5\nprint('tests ok')\n");
	snprintf(s.opt, sizeof(s.opt), "/workspace=bind:%s:rw", s.src);
	BOOT_SPEC((&(struct boot_spec){
			  .initrd = "",
			  .opts = ARGS("--cpus", "2", "--rootfs", desc,
				       "--mount", s.opt),
			  .cmd = ARGS("bash", "-c",
				      "set -e; cd /workspace; git init -q;"
				      "git config user.email ci@kiln;"
				      "git config user.name ci;"
				      "python3 -m compileall -q .;"
				      "python3 test_calc.py; git add -A;"
				      "git commit -q -m 'built in the guest';"
				      "git --no-pager log --format=%s;"
				      "tar czf dist.tgz calc.py; echo done") }),
		  &r);
	EXPECT_EQ(0, r.status);
	EXPECT_NE(NULL, strstr(r.out, "tests ok"));
	EXPECT_NE(NULL, strstr(r.out, "built in the guest"));
	EXPECT_NE(NULL, strstr(r.out, "done"));
	/* The host has the repository, the bytecode and the archive. */
	snprintf(cmd, sizeof(cmd),
		 "git -C '%s' --no-pager log --format=%%s && "
		 "ls '%s/__pycache__' && tar tzf '%s/dist.tgz'",
		 s.src, s.src, s.src);
	p = popen(cmd, "r");
	ASSERT_NE(NULL, p);
	buf[fread(buf, 1, sizeof(buf) - 1, p)] = '\0';
	EXPECT_EQ(0, pclose(p));
	EXPECT_NE(NULL, strstr(buf, "built in the guest"));
	EXPECT_NE(NULL, strstr(buf, "calc.cpython-311.pyc"));
	EXPECT_NE(NULL, strstr(buf, "calc.py\n"));
	fsx_fini(&s);
}

/* ---- ownership "mapped" (issue 13): a non-root agent in a bind ------- */

static uid_t host_uid;
static int bad_entries;
static char bad_first[300];

/* Every host file the guest made: the vmm's, no privilege, no device. */
static int check_host_entry(const char *path, const struct stat *st, int flag,
			    struct FTW *ftw)
{
	mode_t t = st->st_mode & S_IFMT;

	if (st->st_uid == host_uid && !(st->st_mode & (S_ISUID | S_ISGID)) &&
	    (t == S_IFREG || t == S_IFDIR || t == S_IFLNK))
		return 0;
	if (!bad_entries++)
		snprintf(bad_first, sizeof(bad_first), "%s: uid %u mode %o",
			 path, (unsigned int)st->st_uid,
			 (unsigned int)st->st_mode);
	return 0;
}

TEST_TIMEOUT(debian_agent_user_owns_its_files_in_a_bind, BOOT_TIMEOUT)
{
	char desc[300];
	struct spawn_result r;
	struct guest g;
	struct fsx s;

	fsx_init_xattrs(_metadata, &s, true);
	guest_paths(&g);
	snprintf(desc, sizeof(desc), "%s/debian-12-agent.json", g.images);
	ASSERT_EQ(0, access(desc, R_OK)) TH_LOG("%s missing: make image", desc);
	put_file(_metadata, s.src, "README", "from the host\n");
	/* rw binds are "mapped" by default: no ownership option given. */
	snprintf(s.opt, sizeof(s.opt), "/workspace=bind:%s:rw", s.src);
	BOOT_SPEC(
		(&(struct boot_spec){
			.initrd = "",
			.opts = ARGS("--cpus", "2", "--rootfs", desc, "--mount",
				     s.opt),
			.cmd = ARGS(
				"bash", "-c",
				/* The image's own agent user (images.md). */
				"set -e; id agent >/dev/null;"
				"chown -R agent /workspace;"
				"su agent -c 'set -e; cd /workspace;"
				" git init -q; git config user.email a@kiln;"
				" git config user.name agent;"
				" mkdir -p src/pkg;"
				" python3 -c \"open(\\\"src/pkg/m.py\\\", \\\"w\\\")"
				".write(\\\"X = 1\\\\n\\\")\";"
				" python3 -m compileall -q src;"
				" echo hi > notes.txt; cp -a notes.txt copy.txt;"
				" chmod 4755 copy.txt; mkdir shared;"
				" chmod 2775 shared; touch shared/in;"
				" mkfifo pipe; ln -s notes.txt link;"
				" echo pipe > .gitignore;"
				" git add -A; git commit -q -m by-agent;"
				" echo hi >> copy.txt; echo agent-ok';"
				"mknod /workspace/null c 1 3;"
				"cd /workspace;"
				"stat -c 'st %U %G %a %F %n' README notes.txt "
				"copy.txt shared shared/in pipe null "
				".git/HEAD src/pkg/m.py;"
				"su agent -c 'rm -f /workspace/notes.txt "
				"&& echo rm-ok'; echo done") }),
		&r);
	EXPECT_EQ(0, r.status) TH_LOG("%s", r.out);
	EXPECT_NE(NULL, strstr(r.out, "agent-ok"));
	EXPECT_NE(NULL, strstr(r.out, "rm-ok"));
	EXPECT_NE(NULL, strstr(r.out, "done"));
	/* The guest sees agent's files as agent's, with their full modes. */
	EXPECT_NE(NULL, strstr(r.out, "st agent agent 644 regular file "
				      "notes.txt"))
	TH_LOG("%s", r.out);
	/* cp -a kept it; chmod 4755 set it; agent's own write cleared it */
	EXPECT_NE(NULL, strstr(r.out, "st agent agent 755 regular file "
				      "copy.txt"));
	EXPECT_NE(NULL, strstr(r.out, "st agent agent 2775 directory shared"));
	EXPECT_NE(NULL, strstr(r.out, "st agent agent 644 regular empty file "
				      "shared/in"));
	EXPECT_NE(NULL, strstr(r.out, "st agent agent 644 fifo pipe"));
	EXPECT_NE(NULL, strstr(r.out, "character special file null"));
	EXPECT_NE(NULL, strstr(r.out, "st agent agent 644 regular file "
				      ".git/HEAD"));
	EXPECT_NE(NULL, strstr(r.out, "st agent agent 644 regular file "
				      "src/pkg/m.py"));
	/* chown -R agent made the host's file agent's in the guest too. */
	EXPECT_NE(NULL, strstr(r.out, "st agent root 644 regular file README"));
	/* On the host: everything the vmm's user's, nothing privileged. */
	host_uid = geteuid();
	bad_entries = 0;
	ASSERT_EQ(0, nftw(s.src, check_host_entry, 32, FTW_PHYS));
	EXPECT_EQ(0, bad_entries) TH_LOG("first: %s", bad_first);
	EXPECT_FALSE(exists(s.src, "notes.txt"));
	EXPECT_TRUE(exists(s.src, ".git/HEAD"));
	fsx_fini(&s);
}

/* ---- POSIX conformance (issue 13): each Kiln mount against ext4 ------ */

/*
 * The cases of selftests/helpers/posix-conform.c that a Kiln mount fails
 * by design while ext4 passes them; each is explained in
 * Documentation/virtio-fs.md ("Conformance").
 */
static const struct conform_difference {
	const char *fs, *name;
} conform_differences[] = {
	/* mapped binds: a symlink holds no user.* xattr (Linux refuses it) */
	{ "bind", "symlink_owner" },
	{ "bind", "lchown_symlink_root" },
	/* the example server: one name per node, no RENAME_EXCHANGE */
	{ "virtual", "link_user" },
	{ "virtual", "link_keeps_metadata" },
	{ "virtual", "link_symlink_and_fifo" },
	{ "virtual", "rename_same_inode" },
	{ "virtual", "rename_flags" },
};

#define CONFORM_FS_MAX	  8
#define CONFORM_CASES_MAX 128
#define CONFORM_NAME_MAX  48

struct conform_fs {
	char fs[16];
	char ok[CONFORM_CASES_MAX][CONFORM_NAME_MAX];
	char bad[CONFORM_CASES_MAX][CONFORM_NAME_MAX];
	int nr_ok, nr_bad;
	bool summary; /* its "conform: N passed, M failed" line came */
};

struct conform_run {
	struct conform_fs fs[CONFORM_FS_MAX];
	int nr;
};

static struct conform_fs *conform_fs(struct conform_run *run, const char *fs,
				     size_t len)
{
	for (int i = 0; i < run->nr; i++)
		if (strlen(run->fs[i].fs) == len &&
		    !strncmp(run->fs[i].fs, fs, len))
			return &run->fs[i];
	if (run->nr == CONFORM_FS_MAX || len >= sizeof(run->fs[0].fs))
		return NULL;
	memcpy(run->fs[run->nr].fs, fs, len);
	run->fs[run->nr].fs[len] = '\0';
	return &run->fs[run->nr++];
}

/* The case's name, up to ':' or the end of the line. */
static void conform_name(char *dst, const char *src)
{
	size_t n = strcspn(src, ":\r\n");

	if (n >= CONFORM_NAME_MAX)
		n = CONFORM_NAME_MAX - 1;
	memcpy(dst, src, n);
	dst[n] = '\0';
}

/*
 * Lines "FS: ok NAME", "FS: not ok NAME: why", "FS: conform: ..."; the
 * runner's remarks, "FS: # ...", are printed.
 */
static void conform_parse(struct conform_run *run, const char *out)
{
	for (const char *l = out; l && *l;
	     l = strchr(l, '\n'), l = l ? l + 1 : l) {
		const char *colon = strstr(l, ": ");
		const char *eol = strchr(l, '\n');
		struct conform_fs *f;

		if (!colon || (eol && colon > eol) || colon - l > 12)
			continue;
		/* The runner's remarks: a guest that stood still, a hang. */
		if (!strncmp(colon + 2, "# ", 2)) {
			printf("# %.*s\n",
			       eol ? (int)(eol - l) : (int)strlen(l), l);
			continue;
		}
		if (strncmp(colon + 2, "ok ", 3) &&
		    strncmp(colon + 2, "not ok ", 7) &&
		    strncmp(colon + 2, "conform: ", 9))
			continue;
		f = conform_fs(run, l, colon - l);
		if (!f)
			continue;
		if (!strncmp(colon + 2, "conform: ", 9)) {
			f->summary = true;
			printf("# %.*s\n",
			       eol ? (int)(eol - l) : (int)strlen(l), l);
		} else if (!strncmp(colon + 2, "ok ", 3)) {
			if (f->nr_ok < CONFORM_CASES_MAX)
				conform_name(f->ok[f->nr_ok++], colon + 5);
		} else if (f->nr_bad < CONFORM_CASES_MAX) {
			conform_name(f->bad[f->nr_bad++], colon + 9);
			printf("# %.*s\n",
			       eol ? (int)(eol - l) : (int)strlen(l), l);
		}
	}
}

static bool conform_passed(const struct conform_fs *f, const char *name)
{
	for (int i = 0; i < f->nr_ok; i++)
		if (!strcmp(f->ok[i], name))
			return true;
	return false;
}

static bool conform_documented(const char *fs, const char *name)
{
	for (size_t i = 0;
	     i < sizeof(conform_differences) / sizeof(conform_differences[0]);
	     i++)
		if (!strcmp(conform_differences[i].fs, fs) &&
		    !strcmp(conform_differences[i].name, name))
			return true;
	return false;
}

/* Every case the reference passes, fs passes too, or is documented. */
static int conform_compare(struct __test_metadata *_metadata,
			   struct conform_run *run, const char *ref,
			   const char *fs)
{
	struct conform_fs *r = conform_fs(run, ref, strlen(ref));
	struct conform_fs *f = conform_fs(run, fs, strlen(fs));
	int bad = 0;

	if (!r || !f)
		return 1;
	EXPECT_TRUE(f->summary) TH_LOG("%s: the run did not finish", fs);
	for (int i = 0; i < r->nr_ok; i++) {
		if (conform_passed(f, r->ok[i]))
			continue;
		if (conform_documented(fs, r->ok[i])) {
			printf("# %s: %s: a documented difference\n", fs,
			       r->ok[i]);
			continue;
		}
		bad++;
		TH_LOG("%s fails %s, which %s passes", fs, r->ok[i], ref);
	}
	return bad;
}

static void put_conform_fixtures(struct __test_metadata *_metadata,
				 const char *dir)
{
	char path[300];

	/* What `posix-conform setup` makes, made by the host. */
	ASSERT_EQ(0, chmod(dir, 0755));
	put_file(_metadata, dir, "f", "ro\n");
	snprintf(path, sizeof(path), "%s/f", dir);
	ASSERT_EQ(0, chmod(path, 0644));
	snprintf(path, sizeof(path), "%s/d", dir);
	ASSERT_EQ(0, mkdir(path, 0755));
	ASSERT_EQ(0, chmod(path, 0755));
	put_file(_metadata, dir, "d/x", "");
	snprintf(path, sizeof(path), "%s/l", dir);
	ASSERT_EQ(0, symlink("f", path));
}

/*
 * One boot: the conformance cases on the kiln-test image's ext4 (the
 * reference, then remounted read-only for the read-only cases), a mapped
 * rw bind, a ro bind, a memory mount and a virtual mount served by
 * tools/fs-example-server. Each Kiln mount must pass whatever ext4
 * passes, but for conform_differences[].
 */
TEST_TIMEOUT(posix_conformance_against_ext4, 3 * BOOT_TIMEOUT)
{
	static struct conform_run run; /* ~100 KiB: not on the stack */
	char helper[300], cmd[700], desc[300], rw[400], ro[400], mem[64],
		virt[300], rodir[160];
	struct spawn_result r;
	struct guest g;
	struct fsx s;
	int bad = 0;
	pid_t srv;

	memset(&run, 0, sizeof(run));
	fsx_init_xattrs(_metadata, &s, true);
	guest_paths(&g);
	snprintf(desc, sizeof(desc), "%s/kiln-test.json", g.images);
	ASSERT_EQ(0, access(desc, R_OK)) TH_LOG("%s missing: make guest", desc);
	snprintf(helper, sizeof(helper),
		 "%.*s/selftests/helpers/posix-conform.cpio",
		 (int)(strrchr(g.vmm, '/') ? strrchr(g.vmm, '/') - g.vmm : 1),
		 strrchr(g.vmm, '/') ? g.vmm : ".");
	ASSERT_EQ(0, access(helper, R_OK))
	TH_LOG("%s missing: make selftests", helper);
	snprintf(cmd, sizeof(cmd), "cat '%s' >> '%s'", helper, s.initrd);
	ASSERT_EQ(0, system(cmd));
	snprintf(rodir, sizeof(rodir), "%s/ro", s.dir);
	ASSERT_EQ(0, mkdir(rodir, 0755));
	put_conform_fixtures(_metadata, rodir);
	ASSERT_EQ(0, chmod(s.src, 0755));
	srv = start_server(&s, NULL);
	ASSERT_EQ(0, access(s.sock, F_OK));
	snprintf(rw, sizeof(rw), "/rw=bind:%s:rw:mapped", s.src);
	snprintf(ro, sizeof(ro), "/ro=bind:%s:ro", rodir);
	snprintf(mem, sizeof(mem), "/m=memory:16M");
	snprintf(virt, sizeof(virt), "/v=virtual:%s", s.sock);
	/* Stay in the initramfs (kiln.root=none): the image is just a disk. */
	FS_BOOT(&s,
		ARGS("--cpus", "2", "--rootfs", desc, "--cmdline",
		     "kiln.root=none", "--mount", rw, "--mount", ro, "--mount",
		     mem, "--mount", virt),
		"c() { fs=$1; shift; posix-conform \"$@\" 2>&1 |"
		" sed \"s/^/$fs: /\"; };"
		"mkdir -p /e && mount -t ext4 -o nosuid,nodev /dev/vda /e &&"
		" mkdir /e/rw /e/ro && c ext4 rw /e/rw &&"
		" posix-conform setup /e/ro && mount -o remount,ro /e &&"
		" c ext4-ro ro /e/ro;"
		"c bind rw /rw; c bind-ro ro /ro; c memory rw /m;"
		"c virtual rw /v; echo conform-done",
		&r);
	stop_server(srv);
	EXPECT_EQ(0, r.status);
	EXPECT_NE(NULL, strstr(r.out, "conform-done"));
	conform_parse(&run, r.out);
	/* The reference ran, all of it. */
	{
		struct conform_fs *e = conform_fs(&run, "ext4", 4);

		ASSERT_NE(NULL, e);
		ASSERT_TRUE(e->summary) TH_LOG("%.2000s", r.out);
		EXPECT_GE(e->nr_ok, 70);
	}
	bad += conform_compare(_metadata, &run, "ext4", "bind");
	bad += conform_compare(_metadata, &run, "ext4", "memory");
	bad += conform_compare(_metadata, &run, "ext4", "virtual");
	bad += conform_compare(_metadata, &run, "ext4-ro", "bind-ro");
	EXPECT_EQ(0, bad);
	fsx_fini(&s);
}

TEST_HARNESS_MAIN
