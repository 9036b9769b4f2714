/* SPDX-License-Identifier: GPL-2.0 */
/*
 * A host for the KVM tests' network flows (selftests/kvm/net.c, jail.c):
 * a network namespace of the test's own, which the vmm it starts after
 * joins too.
 */
#ifndef KILN_SELFTESTS_KVM_TEST_HOST_H
#define KILN_SELFTESTS_KVM_TEST_HOST_H

#include <arpa/inet.h>
#include <net/if.h>
#include <pthread.h>
#include <sched.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include "selftests/kselftest.h"

/*
 * The test host: TEST_HOST on an alias of lo in a network namespace of
 * this test's own (the vmm, started after, lives there too and opens its
 * upstream connections there), serving one line over HTTP/1.0 on
 * TEST_PORT until the test ends. Nothing leaves that namespace.
 */
#define TEST_HOST  "192.0.2.10" /* TEST-NET-1 */
#define TEST_PORT  8080
#define TEST_REPLY "hello-from-the-test-host"

struct test_host {
	int listen_fd;
	pthread_t thread;
};

static inline void *test_host_serve(void *arg)
{
	static const char reply[] = "HTTP/1.0 200 OK\r\nContent-Length: "
				    "25"
				    "\r\n\r\n" TEST_REPLY "\n";
	struct test_host *h = arg;
	char req[1024];
	int fd;

	while ((fd = accept(h->listen_fd, NULL, NULL)) >= 0) {
		if (read(fd, req, sizeof(req)) > 0 &&
		    write(fd, reply, sizeof(reply) - 1) < 0) {
			/* The client went: nothing to do. */
		}
		close(fd);
	}
	return NULL;
}

/* addr on lo's alias label (lo:1, lo:2) of the test's namespace. */
static inline bool test_host_alias(struct __test_metadata *_metadata,
				   const char *label, const char *addr)
{
	struct sockaddr_in sin = { .sin_family = AF_INET };
	struct ifreq ifr = { 0 };
	int sock = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);

	ASSERT_LE(0, sock);
	snprintf(ifr.ifr_name, sizeof(ifr.ifr_name), "%s", label);
	inet_pton(AF_INET, addr, &sin.sin_addr);
	memcpy(&ifr.ifr_addr, &sin, sizeof(sin));
	ASSERT_EQ(0, ioctl(sock, SIOCSIFADDR, &ifr))
	TH_LOG("%s on %s: %s", addr, label, strerror(errno));
	close(sock);
	return true;
}

static inline bool test_host_start(struct __test_metadata *_metadata,
				   struct test_host *h)
{
	struct sockaddr_in sin = { .sin_family = AF_INET,
				   .sin_port = htons(TEST_PORT) };
	struct ifreq ifr = { 0 };
	int sock, one = 1;

	ASSERT_EQ(0, unshare(CLONE_NEWNET)) TH_LOG("%s", strerror(errno));
	sock = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	ASSERT_LE(0, sock);
	snprintf(ifr.ifr_name, sizeof(ifr.ifr_name), "lo");
	ASSERT_EQ(0, ioctl(sock, SIOCGIFFLAGS, &ifr));
	ifr.ifr_flags |= IFF_UP;
	ASSERT_EQ(0, ioctl(sock, SIOCSIFFLAGS, &ifr));
	close(sock);
	ASSERT_TRUE(test_host_alias(_metadata, "lo:1", TEST_HOST));
	inet_pton(AF_INET, TEST_HOST, &sin.sin_addr);
	h->listen_fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	ASSERT_LE(0, h->listen_fd);
	setsockopt(h->listen_fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	ASSERT_EQ(0, bind(h->listen_fd, (struct sockaddr *)&sin, sizeof(sin)));
	ASSERT_EQ(0, listen(h->listen_fd, 8));
	ASSERT_EQ(0, pthread_create(&h->thread, NULL, test_host_serve, h));
	return true;
}

static inline void test_host_stop(struct test_host *h)
{
	shutdown(h->listen_fd, SHUT_RDWR); /* accept() fails: the thread ends */
	pthread_join(h->thread, NULL);
	close(h->listen_fd);
}

#endif
