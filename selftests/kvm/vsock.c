// SPDX-License-Identifier: GPL-2.0
/*
 * virtio-vsock end to end on KVM: the guest's Linux driver against the
 * device, the host side on Unix sockets. The guest side is vsock-peer
 * (selftests/helpers/vsock-peer.c), appended to the initramfs: busybox
 * has no vsock support. Each test moves a few MiB through an echo, so
 * data and credit flow both ways on every connection:
 *  - host to guest: a host client writes "CONNECT 5000\n" to the
 *    monitor's socket (retrying until the guest listens), reads "OK",
 *    and checks what the guest's echo server sends back;
 *  - guest to host: the guest connects to CID 2 port 6000, which the
 *    monitor connects to "<socket>_6000", where the test echoes; a port
 *    with nothing behind it is refused;
 *  - both at once, the CID set from a JSON config.
 */
#include <errno.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>

#include "selftests/kselftest.h"
#include "selftests/kvm/vmm_util.h"

#define ECHO_PORT 5000
#define HOST_PORT 6000
#define BYTES	  (4U << 20)
#define CHUNK	  65536
#define IO_MS	  60000 /* no progress for this long: stuck */

/* The pattern vsock-peer sends and checks. */
static uint8_t pattern(uint64_t i)
{
	return (uint8_t)(i * 131 + (i >> 9) + (i >> 17));
}

struct scratch {
	char dir[64];
	char sock[128];
	char initrd[160];
	char log[160];
};

/* The peer's archive: next to the vmm's selftests, or KILN_VSOCK_PEER. */
static void peer_cpio(const struct guest *g, char *out, size_t len)
{
	const char *env = getenv("KILN_VSOCK_PEER_CPIO");
	const char *slash = strrchr(g->vmm, '/');

	if (env)
		snprintf(out, len, "%s", env);
	else if (slash)
		snprintf(out, len, "%.*s/selftests/helpers/vsock-peer.cpio",
			 (int)(slash - g->vmm), g->vmm);
	else
		snprintf(out, len, "selftests/helpers/vsock-peer.cpio");
}

static void scratch_init(struct __test_metadata *_metadata, struct scratch *s)
{
	char peer[300], cmd[800];
	struct guest g;

	if (access("/dev/kvm", R_OK | W_OK))
		SKIP(return, "no usable /dev/kvm (run through tools/vmtest)");
	guest_paths(&g);
	peer_cpio(&g, peer, sizeof(peer));
	ASSERT_EQ(0, access(g.initrd, R_OK)) TH_LOG("no guest: make guest");
	ASSERT_EQ(0, access(peer, R_OK))
	TH_LOG("%s missing: make selftests", peer);
	test_tmp_name(s->dir, sizeof(s->dir), "kiln-vsock-XXXXXX");
	ASSERT_NE(NULL, mkdtemp(s->dir));
	snprintf(s->sock, sizeof(s->sock), "%s/v.sock", s->dir);
	snprintf(s->initrd, sizeof(s->initrd), "%s/initrd.cpio", s->dir);
	snprintf(s->log, sizeof(s->log), "%s/vmm.log", s->dir);
	snprintf(cmd, sizeof(cmd), "cat '%s' '%s' > '%s'", g.initrd, peer,
		 s->initrd);
	ASSERT_EQ(0, system(cmd));
}

static void scratch_fini(struct scratch *s)
{
	char cmd[128];

	if (!s->dir[0])
		return;
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", s->dir);
	if (system(cmd))
		fprintf(stderr, "# cannot remove %s\n", s->dir);
}

/* `vmm run` in the background, stdout and stderr to log. */
static pid_t start_vmm(const struct boot_spec *spec, const char *log)
{
	const char *argv[64];
	struct guest g;

	guest_paths(&g);
	boot_argv(&g, spec, argv);
	return spawn_logged(argv, log);
}

static int unix_connect(const char *path)
{
	struct sockaddr_un a = { .sun_family = AF_UNIX };
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);

	if (fd < 0)
		return -1;
	snprintf(a.sun_path, sizeof(a.sun_path), "%s", path);
	if (connect(fd, (struct sockaddr *)&a, sizeof(a)) < 0) {
		close(fd);
		return -1;
	}
	return fd;
}

static int unix_listen(const char *path)
{
	struct sockaddr_un a = { .sun_family = AF_UNIX };
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);

	if (fd < 0)
		return -1;
	snprintf(a.sun_path, sizeof(a.sun_path), "%s", path);
	if (bind(fd, (struct sockaddr *)&a, sizeof(a)) < 0 ||
	    listen(fd, 4) < 0) {
		close(fd);
		return -1;
	}
	return fd;
}

/* One line, byte by byte (nothing after it is taken); "" on EOF. */
static void read_line(int fd, char *buf, size_t len, int ms)
{
	size_t n = 0;

	while (n + 1 < len) {
		struct pollfd p = { .fd = fd, .events = POLLIN };

		if (poll(&p, 1, ms) <= 0 || read(fd, buf + n, 1) != 1)
			break;
		if (buf[n++] == '\n')
			break;
	}
	buf[n] = 0;
}

/*
 * "CONNECT port" until the guest accepts: before its driver and its
 * listener are up the monitor closes the client (a RST). The vmm must
 * stay alive meanwhile.
 */
static int connect_guest(const char *sock, unsigned int port, pid_t vmm,
			 int secs)
{
	char line[64];
	int fd, status;

	for (int i = 0; i < secs * 5; i++) {
		if (waitpid(vmm, &status, WNOHANG) == vmm)
			return -1;
		fd = unix_connect(sock);
		if (fd >= 0) {
			snprintf(line, sizeof(line), "CONNECT %u\n", port);
			if (write(fd, line, strlen(line)) ==
			    (ssize_t)strlen(line)) {
				read_line(fd, line, sizeof(line), 30000);
				if (!strncmp(line, "OK ", 3))
					return fd;
			}
			close(fd);
		}
		usleep(200000);
	}
	return -1;
}

/*
 * Sends bytes of the pattern and checks the echo, reading as it writes;
 * half-closes when done and wants the peer's EOF after the last byte.
 * Returns how many bytes came back right (bytes on success).
 */
static uint64_t exchange(int fd, uint64_t bytes)
{
	static uint8_t out[CHUNK], in[CHUNK];
	uint64_t sent = 0, got = 0;
	bool shut = false;

	while (got < bytes) {
		struct pollfd p = { .fd = fd, .events = POLLIN };
		ssize_t n;

		if (sent < bytes)
			p.events |= POLLOUT;
		if (poll(&p, 1, IO_MS) <= 0)
			return got;
		if (p.revents & POLLOUT) {
			size_t len =
				bytes - sent < CHUNK ? bytes - sent : CHUNK;

			for (size_t i = 0; i < len; i++)
				out[i] = pattern(sent + i);
			n = send(fd, out, len, MSG_DONTWAIT | MSG_NOSIGNAL);
			if (n < 0 && errno != EAGAIN && errno != EINTR)
				return got;
			if (n > 0)
				sent += n;
		}
		if (sent == bytes && !shut) {
			shutdown(fd, SHUT_WR);
			shut = true;
		}
		if (p.revents & (POLLIN | POLLHUP | POLLERR)) {
			n = recv(fd, in, sizeof(in), MSG_DONTWAIT);
			if (n == 0)
				return got;
			if (n < 0 && errno != EAGAIN && errno != EINTR)
				return got;
			for (ssize_t i = 0; i < n; i++)
				if (in[i] != pattern(got + i))
					return got + i;
			if (n > 0)
				got += n;
		}
	}
	/* After the echo of everything: the guest's EOF, nothing else. */
	{
		struct pollfd p = { .fd = fd, .events = POLLIN };

		if (poll(&p, 1, IO_MS) <= 0 || recv(fd, in, 1, 0) != 0)
			return got - 1;
	}
	return got;
}

/* The host end of guest connections: echoes one, counts what it saw. */
struct host_echo {
	int lfd;
	uint64_t bytes;
	bool done;
};

static void *host_echo_thread(void *arg)
{
	struct host_echo *e = arg;
	static uint8_t buf[CHUNK];
	struct pollfd p = { .fd = e->lfd, .events = POLLIN };
	int fd;

	if (poll(&p, 1, BOOT_TIMEOUT * 1000) <= 0)
		return NULL;
	fd = accept4(e->lfd, NULL, NULL, SOCK_CLOEXEC);
	if (fd < 0)
		return NULL;
	for (;;) {
		ssize_t n = read(fd, buf, sizeof(buf)), done = 0;

		if (n <= 0)
			break;
		while (done < n) {
			ssize_t w =
				send(fd, buf + done, n - done, MSG_NOSIGNAL);

			if (w <= 0)
				goto out;
			done += w;
		}
		e->bytes += n;
	}
	e->done = true;
out:
	close(fd);
	return NULL;
}

TEST_TIMEOUT(host_to_guest_echo, BOOT_TIMEOUT)
{
	struct scratch s = { 0 };
	uint64_t got;
	pid_t pid;
	int fd;

	scratch_init(_metadata, &s);
	pid = start_vmm(
		&(struct boot_spec){
			.initrd = s.initrd,
			.opts = ARGS("--vsock-socket", s.sock),
			.cmd = ARGS("vsock-peer", "echo", "5000"),
		},
		s.log);
	ASSERT_LT(0, pid);
	fd = connect_guest(s.sock, ECHO_PORT, pid, BOOT_TIMEOUT / 2);
	EXPECT_LE(0, fd);
	if (fd >= 0) {
		got = exchange(fd, BYTES);
		EXPECT_EQ(BYTES, got);
		close(fd);
	}
	EXPECT_EQ(0, wait_exit(pid, 120));
	if (_metadata->result->failed)
		vmm_log_show(_metadata, s.log);
	scratch_fini(&s);
}

TEST_TIMEOUT(guest_to_host_echo, BOOT_TIMEOUT)
{
	struct host_echo e = { 0 };
	struct scratch s = { 0 };
	struct spawn_result r;
	char path[200];
	pthread_t th;

	scratch_init(_metadata, &s);
	snprintf(path, sizeof(path), "%s_%u", s.sock, HOST_PORT);
	e.lfd = unix_listen(path);
	ASSERT_LE(0, e.lfd);
	ASSERT_EQ(0, pthread_create(&th, NULL, host_echo_thread, &e));
	BOOT_SPEC((&(struct boot_spec){
			  .initrd = s.initrd,
			  .opts = ARGS("--vsock-socket", s.sock),
			  .cmd = ARGS("sh", "-c",
				      "vsock-peer refused 6001 && "
				      "vsock-peer send 6000 4194304"),
		  }),
		  &r);
	EXPECT_EQ(0, r.status);
	EXPECT_NE(NULL, strstr(r.out, "port 6001 refused"));
	EXPECT_NE(NULL, strstr(r.out, "sent and checked 4194304 bytes"));
	shutdown(e.lfd, SHUT_RDWR);
	pthread_join(th, NULL);
	EXPECT_TRUE(e.done);
	EXPECT_EQ(BYTES, e.bytes);
	close(e.lfd);
	scratch_fini(&s);
}

TEST_TIMEOUT(both_ways_at_once_with_a_configured_cid, BOOT_TIMEOUT)
{
	struct host_echo e = { 0 };
	struct scratch s = { 0 };
	char path[200], json[200], doc[400];
	uint64_t got = 0;
	pthread_t th;
	FILE *f;
	pid_t pid;
	int fd;

	scratch_init(_metadata, &s);
	snprintf(path, sizeof(path), "%s_%u", s.sock, HOST_PORT);
	e.lfd = unix_listen(path);
	ASSERT_LE(0, e.lfd);
	snprintf(json, sizeof(json), "%s/vm.json", s.dir);
	snprintf(doc, sizeof(doc),
		 "{\"vsock\": {\"socket\": \"%s\", \"cid\": 42}}\n", s.sock);
	f = fopen(json, "w");
	ASSERT_NE(NULL, f);
	fputs(doc, f);
	fclose(f);
	ASSERT_EQ(0, pthread_create(&th, NULL, host_echo_thread, &e));
	pid = start_vmm(
		&(struct boot_spec){
			.initrd = s.initrd,
			.opts = ARGS("--config", json),
			.cmd = ARGS("sh", "-c",
				    "vsock-peer cid; "
				    "vsock-peer echo 5000 & "
				    "vsock-peer send 6000 4194304 && "
				    "wait $!"),
		},
		s.log);
	ASSERT_LT(0, pid);
	fd = connect_guest(s.sock, ECHO_PORT, pid, BOOT_TIMEOUT / 2);
	EXPECT_LE(0, fd);
	if (fd >= 0) {
		got = exchange(fd, BYTES);
		close(fd);
	}
	EXPECT_EQ(BYTES, got);
	EXPECT_EQ(0, wait_exit(pid, 120));
	shutdown(e.lfd, SHUT_RDWR);
	pthread_join(th, NULL);
	EXPECT_EQ(BYTES, e.bytes);
	close(e.lfd);
	{
		char out[4096] = "";
		FILE *l = fopen(s.log, "r");

		if (l) {
			out[fread(out, 1, sizeof(out) - 1, l)] = 0;
			fclose(l);
		}
		EXPECT_NE(NULL, strstr(out, "cid 42"));
		EXPECT_NE(NULL, strstr(out, "sent and checked 4194304"));
		EXPECT_NE(NULL, strstr(out, "echoed 4194304 bytes"));
	}
	if (_metadata->result->failed)
		vmm_log_show(_metadata, s.log);
	scratch_fini(&s);
}

/*
 * With the root disk too: both devices probe, each in its own window,
 * declared on the command line (the initramfs stays the root, so the
 * peer is at hand: kiln.root=none).
 */
TEST_TIMEOUT(next_to_the_root_disk, BOOT_TIMEOUT)
{
	struct scratch s = { 0 };
	struct spawn_result r;
	char desc[300];
	struct guest g;

	scratch_init(_metadata, &s);
	guest_paths(&g);
	snprintf(desc, sizeof(desc), "%s/kiln-test.json", g.images);
	if (access(desc, R_OK)) {
		scratch_fini(&s);
		SKIP(return, "%s missing: make guest", desc);
	}
	BOOT_SPEC((&(struct boot_spec){
			  .initrd = s.initrd,
			  .opts = ARGS("--rootfs", desc, "--rootfs-mode",
				       "readonly", "--vsock-socket", s.sock,
				       "--cmdline", "kiln.root=none"),
			  .cmd = ARGS("sh", "-c",
				      "test -b /dev/vda && echo disk ok; "
				      "vsock-peer cid; cat /proc/cmdline"),
		  }),
		  &r);
	EXPECT_EQ(0, r.status);
	EXPECT_NE(NULL, strstr(r.out, "disk ok"));
	EXPECT_NE(NULL, strstr(r.out, "cid 3"));
	EXPECT_NE(NULL, strstr(r.out, "virtio_mmio.device=4K@0xd0000000:5 "
				      "virtio_mmio.device=4K@0xd0001000:6 "
				      "kiln.root=vda"));
	scratch_fini(&s);
}

TEST_HARNESS_MAIN
