// SPDX-License-Identifier: GPL-2.0
/*
 * vsock-peer: the guest side of the vsock KVM test (selftests/kvm/vsock.c),
 * a static program appended to the initramfs as /bin/vsock-peer (busybox
 * has no vsock support).
 *
 *	vsock-peer echo PORT [COUNT]	accept COUNT (1) connections on PORT,
 *					one after the other, echo each
 *					until its EOF, then close it,
 *					lingering until the vmm has
 *					handed every byte to the host
 *	vsock-peer send PORT BYTES	connect to the host (CID 2) on PORT,
 *					send BYTES of the test pattern while
 *					reading them back, check the echo
 *	vsock-peer refused PORT		a connection to PORT must fail
 *	vsock-peer cid			print the guest's own CID
 *
 * Prints one line saying what it did; exits 0 on success, 1 otherwise.
 * The pattern is pattern() below, shared with the test by convention.
 */
#include <errno.h>
#include <fcntl.h>
#include <linux/vm_sockets.h>
#include <poll.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#define CHUNK 65536

static uint8_t pattern(uint64_t i)
{
	return (uint8_t)(i * 131 + (i >> 9) + (i >> 17));
}

static int fail(const char *what)
{
	fprintf(stderr, "vsock-peer: %s: %s\n", what, strerror(errno));
	return 1;
}

/*
 * The echo's last bytes may still be on their way when its write()s
 * return (in the vmm's buffer toward a host socket that is full), and a
 * guest that closed and powered off then would lose them
 * (Documentation/cli.md, "At exit"). Waiting for the host's EOF cannot
 * tell: it came before ours. So the close lingers: Linux's virtio
 * transport sends its SHUTDOWN behind the data and waits for the
 * device's RST, which the vmm sends once its buffer is in the host's
 * socket; ECHO_CLOSE_S at most.
 */
#define ECHO_CLOSE_S 30

static void close_lingering(int fd)
{
	struct linger l = { .l_onoff = 1, .l_linger = ECHO_CLOSE_S };

	if (setsockopt(fd, SOL_SOCKET, SO_LINGER, &l, sizeof(l)))
		fail("SO_LINGER");
	close(fd);
}

static int echo(unsigned int port, unsigned int count)
{
	struct sockaddr_vm a = { .svm_family = AF_VSOCK,
				 .svm_cid = VMADDR_CID_ANY,
				 .svm_port = port };
	static uint8_t buf[CHUNK];
	unsigned long long total = 0;
	int lfd, fd;

	lfd = socket(AF_VSOCK, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (lfd < 0)
		return fail("socket");
	if (bind(lfd, (struct sockaddr *)&a, sizeof(a)) < 0 ||
	    listen(lfd, 4) < 0)
		return fail("bind/listen");
	for (unsigned int i = 0; i < count; i++) {
		fd = accept(lfd, NULL, NULL);
		if (fd < 0)
			return fail("accept");
		for (;;) {
			ssize_t n = read(fd, buf, sizeof(buf)), done = 0;

			if (n < 0 && errno == EINTR)
				continue;
			if (n < 0)
				return fail("read");
			if (!n)
				break;
			while (done < n) {
				ssize_t w = write(fd, buf + done, n - done);

				if (w < 0 && errno == EINTR)
					continue;
				if (w <= 0)
					return fail("write");
				done += w;
			}
			total += n;
		}
		close_lingering(fd);
	}
	close(lfd);
	printf("echoed %llu bytes\n", total);
	return 0;
}

static int connect_host(unsigned int port)
{
	struct sockaddr_vm a = { .svm_family = AF_VSOCK,
				 .svm_cid = VMADDR_CID_HOST,
				 .svm_port = port };
	int fd = socket(AF_VSOCK, SOCK_STREAM | SOCK_CLOEXEC, 0);

	if (fd < 0)
		return -1;
	if (connect(fd, (struct sockaddr *)&a, sizeof(a)) < 0) {
		int err = errno;

		close(fd);
		errno = err;
		return -1;
	}
	return fd;
}

/* Writes and reads at once: the echo cannot deadlock on full buffers. */
static int send_check(unsigned int port, unsigned long long bytes)
{
	static uint8_t out[CHUNK], in[CHUNK];
	unsigned long long sent = 0, got = 0;
	bool shut = false;
	int fd;

	fd = connect_host(port);
	if (fd < 0)
		return fail("connect");
	while (got < bytes) {
		struct pollfd p = { .fd = fd, .events = POLLIN };
		ssize_t n;

		if (sent < bytes)
			p.events |= POLLOUT;
		if (poll(&p, 1, 60000) <= 0)
			return fail("poll (timeout)");
		if (p.revents & POLLOUT) {
			size_t len =
				bytes - sent < CHUNK ? bytes - sent : CHUNK;

			for (size_t i = 0; i < len; i++)
				out[i] = pattern(sent + i);
			n = send(fd, out, len, MSG_DONTWAIT);
			if (n < 0 && errno != EAGAIN && errno != EINTR)
				return fail("send");
			if (n > 0)
				sent += n;
		}
		if (sent == bytes && !shut) {
			shutdown(fd, SHUT_WR);
			shut = true;
		}
		if (p.revents & (POLLIN | POLLHUP | POLLERR)) {
			n = recv(fd, in, sizeof(in), MSG_DONTWAIT);
			if (n < 0 && errno != EAGAIN && errno != EINTR)
				return fail("recv");
			if (n == 0) {
				fprintf(stderr,
					"vsock-peer: EOF after %llu of %llu "
					"bytes\n",
					got, bytes);
				return 1;
			}
			for (ssize_t i = 0; i < n; i++) {
				if (in[i] != pattern(got + i)) {
					fprintf(stderr,
						"vsock-peer: byte %llu "
						"differs\n",
						got + i);
					return 1;
				}
			}
			if (n > 0)
				got += n;
		}
	}
	/* The host closes after our EOF: nothing more may come. */
	if (recv(fd, in, 1, 0) != 0) {
		fprintf(stderr, "vsock-peer: no EOF after the echo\n");
		return 1;
	}
	close(fd);
	printf("sent and checked %llu bytes\n", bytes);
	return 0;
}

static int refused(unsigned int port)
{
	int fd = connect_host(port);

	if (fd >= 0) {
		fprintf(stderr, "vsock-peer: port %u accepted\n", port);
		return 1;
	}
	printf("port %u refused: %s\n", port, strerror(errno));
	return 0;
}

static int local_cid(void)
{
	unsigned int cid;
	int fd = open("/dev/vsock", O_RDONLY | O_CLOEXEC);

	if (fd < 0 || ioctl(fd, IOCTL_VM_SOCKETS_GET_LOCAL_CID, &cid) < 0)
		return fail("/dev/vsock");
	close(fd);
	printf("cid %u\n", cid);
	return 0;
}

int main(int argc, char **argv)
{
	unsigned int port;

	if (argc == 2 && !strcmp(argv[1], "cid"))
		return local_cid();
	if (argc < 3)
		goto usage;
	port = strtoul(argv[2], NULL, 10);
	setvbuf(stdout, NULL, _IOLBF, 0);
	if (!strcmp(argv[1], "echo"))
		return echo(port, argc > 3 ? strtoul(argv[3], NULL, 10) : 1);
	if (!strcmp(argv[1], "send") && argc > 3)
		return send_check(port, strtoull(argv[3], NULL, 10));
	if (!strcmp(argv[1], "refused"))
		return refused(port);
usage:
	fprintf(stderr, "usage: vsock-peer echo PORT [COUNT] | "
			"send PORT BYTES | refused PORT | cid\n");
	return 2;
}
