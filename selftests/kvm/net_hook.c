// SPDX-License-Identifier: GPL-2.0
/*
 * The policy hook decides interception (issue 31, Documentation/
 * network.md "The hook intercepts"), booted: a policy of a hook alone
 * (and a static "dns" rule for name resolution: DNS through the hook is
 * another change's) put to selftests/helpers/hook-intercept.py, which
 * intercepts the flows DNS bound to api.kiln.test and puts each request
 * a header computed from its URL, and denies everything else. The
 * Debian image's curl, over HTTP/1.1 (toward https-upstream.py) and h2
 * (toward h2-upstream), gets upstream's answer; upstream saw the hook's
 * header; another name and an address are refused; a header value of
 * UTF-8 bytes reaches the hook byte for byte.
 *
 * The harness as selftests/kvm/net.c sets it up: a network namespace of
 * the test's own (test_host.h) with the test host, its DNS server and
 * the HTTPS upstream on TEST-NET-1 addresses; nothing leaves it. The
 * guest does not trust the VM's CA here (a policy without static http
 * grants installs none yet, issue 31 item 4): curl -k; upstream's own
 * certificate is verified by the vmm (--net-ca-bundle).
 */
#include <arpa/inet.h>
#include <errno.h>
#include <net/if.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/stat.h>

#include "selftests/kselftest.h"
#include "selftests/kvm/test_host.h"
#include "selftests/kvm/test_tmp.h"
#include "selftests/kvm/vmm_util.h"

#define READY_SECS   240
#define TEST_DNS     "192.0.2.53"
#define TEST_DNS_TTL 300
#define DNS_HDR_LEN  12
#define DNS_PORT     53
#define DNS_TYPE_A   1 /* RFC 1035 3.2.2 */
#define DNS_CLASS_IN 1 /* RFC 1035 3.2.4 */
#define API_HOST     "api.kiln.test"
#define UNBOUND_HOST "192.0.2.11" /* TEST-NET-1: DNS never gives it */
/* What the hook sets on each request of API_HOST: from its URL. */
#define HOOK_HEADER "x-kiln-request: GET /user\n"
/* "café" in UTF-8, as the guest's printf makes it and the hook logs it. */
#define NAME_PRINTF "caf\\303\\251"
#define NAME_HEX    "636166c3a9"

static bool can_boot(struct __test_metadata *_metadata)
{
	if (geteuid())
		SKIP(return false, "needs root (network namespaces, taps)");
	if (access("/dev/kvm", R_OK | W_OK))
		SKIP(return false,
			    "no usable /dev/kvm (run through tools/vmtest)");
	return true;
}

/* ---- the test's DNS server: every A question gets TEST_HOST ---------- */

struct dns_server {
	int fd;
	pthread_t thread;
};

static bool dns_asks_for_a(const uint8_t *q, size_t n)
{
	size_t at = DNS_HDR_LEN;

	while (at < n && q[at])
		at += 1 + q[at]; /* a label: its length, then its bytes */
	return at + 5 <= n && q[at + 1] == 0 && q[at + 2] == DNS_TYPE_A &&
	       q[at + 3] == 0 && q[at + 4] == DNS_CLASS_IN;
}

/* The answer to query msg (n bytes, room for 16 more), in place. */
static size_t dns_answer(uint8_t *msg, size_t n)
{
	/* A pointer to the question's name (offset 12), A, IN, TTL, 4. */
	static const uint8_t answer[] = { 0xc0,
					  DNS_HDR_LEN,
					  0,
					  DNS_TYPE_A,
					  0,
					  DNS_CLASS_IN,
					  0,
					  0,
					  TEST_DNS_TTL >> 8,
					  TEST_DNS_TTL & 0xff,
					  0,
					  4 };

	msg[2] = 0x81; /* QR, RD */
	msg[3] = 0x80; /* RA, NOERROR */
	msg[8] = msg[9] = msg[10] = msg[11] = 0;
	if (!dns_asks_for_a(msg, n)) {
		msg[6] = msg[7] = 0;
		return n;
	}
	msg[6] = 0, msg[7] = 1; /* ANCOUNT 1 */
	memcpy(msg + n, answer, sizeof(answer));
	inet_pton(AF_INET, TEST_HOST, msg + n + sizeof(answer));
	return n + sizeof(answer) + 4;
}

static void *dns_serve(void *arg)
{
	struct dns_server *d = arg;
	struct sockaddr_in from;
	uint8_t msg[512 + 16];
	socklen_t fl;
	ssize_t n;

	for (;;) {
		fl = sizeof(from);
		n = recvfrom(d->fd, msg, 512, 0, (struct sockaddr *)&from, &fl);
		if (n < DNS_HDR_LEN)
			break; /* shut down: the test is over */
		sendto(d->fd, msg, dns_answer(msg, (size_t)n), 0,
		       (struct sockaddr *)&from, fl);
	}
	return NULL;
}

/* In the test host's namespace (test_host_start first), on lo:2. */
static bool dns_start(struct __test_metadata *_metadata, struct dns_server *d)
{
	struct sockaddr_in sin = { .sin_family = AF_INET,
				   .sin_port = htons(DNS_PORT) };

	ASSERT_TRUE(test_host_alias(_metadata, "lo:2", TEST_DNS));
	inet_pton(AF_INET, TEST_DNS, &sin.sin_addr);
	d->fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	ASSERT_LE(0, d->fd);
	ASSERT_EQ(0, bind(d->fd, (struct sockaddr *)&sin, sizeof(sin)));
	ASSERT_EQ(0, pthread_create(&d->thread, NULL, dns_serve, d));
	return true;
}

static void dns_stop(struct dns_server *d)
{
	shutdown(d->fd, SHUT_RDWR); /* recvfrom() returns 0: the thread ends */
	pthread_join(d->thread, NULL);
	close(d->fd);
}

/* ---- the world: upstream, its CA, the hook ---------------------------- */

struct world {
	char dir[64], image[300], ca[128], up_log[128], hook_log[128];
	char hook_sock[128], policy[128];
	struct test_host h;
	struct dns_server d;
	pid_t up, hook;
};

/* A helper built next to the vmm (selftests/helpers/NAME), into path. */
static void built_helper(struct __test_metadata *_metadata, const char *name,
			 char *path, size_t len)
{
	const char *slash;
	struct guest g;

	guest_paths(&g);
	slash = strrchr(g.vmm, '/');
	snprintf(path, len, "%.*s/selftests/helpers/%s",
		 slash ? (int)(slash - g.vmm) : 1, slash ? g.vmm : ".", name);
	ASSERT_EQ(0, access(path, X_OK))
	TH_LOG("%s missing: make selftests", path);
}

/* Polls until a TCP connection to TEST_HOST:port is taken. */
static bool tcp_ready(struct __test_metadata *_metadata, int port, pid_t pid)
{
	struct sockaddr_in sin = { .sin_family = AF_INET,
				   .sin_port = htons(port) };
	int fd;

	inet_pton(AF_INET, TEST_HOST, &sin.sin_addr);
	for (int i = 0; i < READY_SECS * 10; i++) {
		fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
		ASSERT_LE(0, fd);
		if (!connect(fd, (struct sockaddr *)&sin, sizeof(sin))) {
			close(fd);
			return true;
		}
		close(fd);
		ASSERT_NE(pid, waitpid(pid, NULL, WNOHANG))
		TH_LOG("the HTTPS upstream died");
		usleep(100000);
	}
	ASSERT_TRUE(false) TH_LOG("the HTTPS upstream never listened");
	return false;
}

/*
 * A test CA and upstream's certificate for API_HOST in w->dir, then
 * upstream on TEST_HOST:443: https-upstream.py (HTTP/1.1 alone), or with
 * h2, h2-upstream (HTTP/2 alone).
 */
static bool upstream_start(struct __test_metadata *_metadata, struct world *w,
			   bool h2)
{
	char cmd[2048], crt[128], key[128], out[128], h2up[300];

	snprintf(
		cmd, sizeof(cmd),
		"set -e; cd '%s'; "
		"openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 "
		"-nodes -keyout ca.key -out ca.crt -subj /CN=kiln-test-ca "
		"-days 2 -addext basicConstraints=critical,CA:TRUE "
		"-addext keyUsage=critical,keyCertSign 2>/dev/null; "
		"openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 "
		"-nodes -keyout srv.key -out srv.csr -subj /CN=" API_HOST
		" 2>/dev/null; "
		"printf 'subjectAltName=DNS:" API_HOST
		"\\nextendedKeyUsage=serverAuth\\n' > srv.ext; "
		"openssl x509 -req -in srv.csr -CA ca.crt -CAkey ca.key "
		"-CAcreateserial -out srv.crt -days 2 -extfile srv.ext "
		"2>/dev/null",
		w->dir);
	ASSERT_EQ(0, system(cmd)) TH_LOG("openssl: the test CA");
	snprintf(w->ca, sizeof(w->ca), "%s/ca.crt", w->dir);
	snprintf(crt, sizeof(crt), "%s/srv.crt", w->dir);
	snprintf(key, sizeof(key), "%s/srv.key", w->dir);
	snprintf(w->up_log, sizeof(w->up_log), "%s/upstream.log", w->dir);
	snprintf(out, sizeof(out), "%s/upstream.out", w->dir);
	if (h2) {
		built_helper(_metadata, "h2-upstream", h2up, sizeof(h2up));
		w->up = spawn_logged(
			ARGS(h2up, TEST_HOST, "443", crt, key, w->up_log), out);
	} else {
		w->up = spawn_logged(ARGS("/usr/bin/python3",
					  "selftests/helpers/https-upstream.py",
					  TEST_HOST, "443", crt, key,
					  w->up_log),
				     out);
	}
	ASSERT_LT(0, w->up);
	return tcp_ready(_metadata, 443, w->up);
}

/* The hook (hook-intercept.py) listening at w->hook_sock. */
static bool hook_start(struct __test_metadata *_metadata, struct world *w)
{
	struct stat st;
	char out[128];

	snprintf(w->hook_sock, sizeof(w->hook_sock), "%s/hook.sock", w->dir);
	snprintf(w->hook_log, sizeof(w->hook_log), "%s/hook.log", w->dir);
	snprintf(out, sizeof(out), "%s/hook.out", w->dir);
	w->hook = spawn_logged(ARGS("/usr/bin/python3",
				    "selftests/helpers/hook-intercept.py",
				    w->hook_sock, w->hook_log, API_HOST),
			       out);
	ASSERT_LT(0, w->hook);
	for (int i = 0; i < READY_SECS * 10; i++) {
		if (!stat(w->hook_sock, &st) && S_ISSOCK(st.st_mode))
			return true;
		ASSERT_NE(w->hook, waitpid(w->hook, NULL, WNOHANG))
		TH_LOG("the hook died (%s)", out);
		usleep(100000);
	}
	ASSERT_TRUE(false) TH_LOG("the hook never listened");
	return false;
}

/* A file holding text. */
static bool write_file(const char *path, const char *text)
{
	FILE *f = fopen(path, "w");
	bool ok = f && fputs(text, f) >= 0;

	if (f && fclose(f))
		ok = false;
	return ok;
}

/*
 * The Debian image, the test host and its DNS server, upstream, the hook
 * and the policy: a hook alone, but for a static "dns" rule.
 */
static bool world_start(struct __test_metadata *_metadata, struct world *w,
			bool h2)
{
	char doc[512];
	struct guest g;

	guest_paths(&g);
	snprintf(w->image, sizeof(w->image), "%s/debian-12-agent.json",
		 g.images);
	ASSERT_EQ(0, access(w->image, R_OK))
	TH_LOG("%s missing: make image", w->image);
	ASSERT_TRUE(mkdtemp(w->dir) != NULL);
	ASSERT_TRUE(test_host_start(_metadata, &w->h));
	ASSERT_TRUE(dns_start(_metadata, &w->d));
	ASSERT_TRUE(upstream_start(_metadata, w, h2));
	ASSERT_TRUE(hook_start(_metadata, w));
	snprintf(doc, sizeof(doc),
		 "{\"dns\": {\"resolvers\": [\"" TEST_DNS "\"], "
		 "\"names\": [\"*.kiln.test\"]}, "
		 "\"hook\": {\"socket\": \"%s\", \"timeoutMs\": 5000}}",
		 w->hook_sock);
	snprintf(w->policy, sizeof(w->policy), "%s/policy.json", w->dir);
	ASSERT_TRUE(write_file(w->policy, doc));
	return true;
}

static int world_boot(struct __test_metadata *_metadata, struct world *w,
		      const char *script, struct spawn_result *r)
{
	return boot_spec(_metadata,
			 &(struct boot_spec){
				 .initrd = "",
				 .opts = ARGS("--rootfs", w->image, "--net",
					      "auto", "--net-policy", w->policy,
					      "--net-ca-bundle", w->ca),
				 .cmd = ARGS("bash", "-c", script) },
			 r);
}

static void world_stop(struct world *w)
{
	char cmd[160];

	kill(w->hook, SIGTERM);
	wait_exit(w->hook, 30);
	kill(w->up, SIGTERM);
	wait_exit(w->up, 30);
	dns_stop(&w->d);
	test_host_stop(&w->h);
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", w->dir);
	if (system(cmd))
		fprintf(stderr, "cannot remove %s\n", w->dir);
}

/* path's text, at most len - 1 bytes. */
static void read_text(const char *path, char *buf, size_t len)
{
	FILE *f = fopen(path, "r");
	size_t n = f ? fread(buf, 1, len - 1, f) : 0;

	buf[n] = '\0';
	if (f)
		fclose(f);
}

static int count(const char *s, const char *what)
{
	int n = 0;

	for (; (s = strstr(s, what)); s++)
		n++;
	return n;
}

/*
 * What the guest runs: curl over proto ("--http1.1", "--http2") to
 * API_HOST with a UTF-8 header value; then to another name DNS binds to
 * the same address (the hook granted the flow for API_HOST alone: its
 * TLS server name is refused), to the address itself (no name), and to
 * an address DNS never gave (the hook denies the flow).
 */
#define GUEST_SCRIPT(proto)                                                \
	"c() { curl -sS -k --max-time 60 \"$@\"; }; "                      \
	"c " proto " -H \"X-Name: $(printf '" NAME_PRINTF "')\" "          \
	"-w ' %{http_version}\\n' https://" API_HOST "/user; "             \
	"c " proto " https://other.kiln.test/user 2>/dev/null "            \
	"|| echo other refused; "                                          \
	"c " proto " https://" TEST_HOST "/user 2>/dev/null "              \
	"|| echo address refused; "                                        \
	"c http://" UNBOUND_HOST "/ 2>/dev/null || echo unbound refused; " \
	"echo done"

#define GUEST_OUT "other refused\naddress refused\nunbound refused\ndone\n"

/* The hook's side of it: asked and answered as the script says. */
static void expect_hook(struct __test_metadata *_metadata,
			const struct world *w, const char *protocol,
			const char *tls)
{
	char seen[32768];

	read_text(w->hook_log, seen, sizeof(seen));
	/* The value's bytes, as the guest sent them. */
	EXPECT_TRUE(strstr(seen, "field x-name " NAME_HEX "\n") != NULL)
	TH_LOG("the hook saw: %.6000s", seen);
	EXPECT_TRUE(strstr(seen, protocol) != NULL)
	TH_LOG("the hook saw: %.6000s", seen);
	/* TLS, the SNI, and where: the request's question. */
	EXPECT_TRUE(strstr(seen, tls) != NULL)
	TH_LOG("the hook saw: %.6000s", seen);
	EXPECT_TRUE(strstr(seen, "\"hostname\": \"" API_HOST "\"}") != NULL);
	/* One request asked: the other name never got to one. */
	EXPECT_EQ(1, count(seen, "\"type\": \"http\""))
	TH_LOG("the hook saw: %.6000s", seen);
	EXPECT_EQ(NULL, strstr(seen, "\"hostname\": \"other.kiln.test\""));
	/* The flow the address DNS never gave: asked with no name. */
	EXPECT_TRUE(strstr(seen, "\"dst\": \"" UNBOUND_HOST
				 ":80\", \"class\": \"documentation\", "
				 "\"hostnames\": []") != NULL)
	TH_LOG("the hook saw: %.6000s", seen);
}

/*
 * HTTP/1.1: the request to API_HOST reaches upstream with the hook's
 * header; the other name's request is the hook's 403; the address is
 * refused; the hook saw the UTF-8 value's bytes intact.
 */
TEST_TIMEOUT(hook_alone_intercepts_http11, BOOT_TIMEOUT)
{
	struct world w = { 0 };
	struct spawn_result r;
	char seen[8192];
	int ret;

	test_tmp_name(w.dir, sizeof(w.dir), "kiln-hook-h1-XXXXXX");
	if (!can_boot(_metadata))
		return;
	ASSERT_TRUE(world_start(_metadata, &w, false));
	ret = world_boot(_metadata, &w, GUEST_SCRIPT("--http1.1"), &r);
	read_text(w.up_log, seen, sizeof(seen));
	if (!ret) {
		EXPECT_EQ(0, r.status);
		EXPECT_TRUE(strstr(r.out, "{\"login\": \"kiln-test-user\"}\n"
					  " 1.1\n" GUEST_OUT) != NULL)
		TH_LOG("stdout: %.3000s\nstderr: %.3000s", r.out, r.err);
		/* Upstream: one request, the hook's header in it. */
		EXPECT_EQ(1, count(seen, "GET /user HTTP/1.1\n"))
		TH_LOG("upstream saw: %s", seen);
		EXPECT_TRUE(strstr(seen, HOOK_HEADER) != NULL)
		TH_LOG("upstream saw: %s", seen);
		EXPECT_TRUE(strstr(r.err, "hook deny (default deny)") != NULL)
		TH_LOG("stderr: %.3000s", r.err);
		expect_hook(_metadata, &w, "\"protocol\": \"HTTP/1.1\"",
			    "\"tls\": {\"sni\": \"" API_HOST
			    "\", \"alpn\": \"http/1.1\"}");
	}
	world_stop(&w);
}

/* The same over h2 (toward an upstream that speaks h2 alone). */
TEST_TIMEOUT(hook_alone_intercepts_h2, BOOT_TIMEOUT)
{
	struct world w = { 0 };
	struct spawn_result r;
	char seen[8192];
	int ret;

	test_tmp_name(w.dir, sizeof(w.dir), "kiln-hook-h2-XXXXXX");
	if (!can_boot(_metadata))
		return;
	ASSERT_TRUE(world_start(_metadata, &w, true));
	ret = world_boot(_metadata, &w, GUEST_SCRIPT("--http2"), &r);
	read_text(w.up_log, seen, sizeof(seen));
	if (!ret) {
		EXPECT_EQ(0, r.status);
		EXPECT_TRUE(strstr(r.out, "{\"login\": \"kiln-test-user\"}\n"
					  " 2\n" GUEST_OUT) != NULL)
		TH_LOG("stdout: %.3000s\nstderr: %.3000s", r.out, r.err);
		EXPECT_EQ(1, count(seen, "h2 GET /user\n"))
		TH_LOG("upstream saw: %s", seen);
		EXPECT_TRUE(strstr(seen, HOOK_HEADER) != NULL)
		TH_LOG("upstream saw: %s", seen);
		expect_hook(_metadata, &w, "\"protocol\": \"h2\"",
			    "\"tls\": {\"sni\": \"" API_HOST
			    "\", \"alpn\": \"h2\"}");
	}
	world_stop(&w);
}

TEST_HARNESS_MAIN
