// SPDX-License-Identifier: GPL-2.0
/*
 * The control API (vmm/api/) against a hostile guest agent and a host out
 * of descriptors (issue 15): an agent that answers with endless huge
 * entries must not make the API grow, one that says PROC_STARTED twice is
 * a protocol error, vm.shutdown's POWEROFF never holds up the API thread
 * however the agent stalls or trickles, and accept4 failing with EMFILE
 * backs off instead of spinning. The fake agents run in child processes,
 * so this process's peak memory is the API's.
 */
#include <fcntl.h>
#include <jansson.h>
#include <stdatomic.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <sys/wait.h>

#include "lib/compiler.h"
#include "selftests/jsonrpc_client.h"
#include "selftests/kselftest.h"
#include "selftests/hostile_agent.h"
#include "selftests/testutil.h"
#include "proto/tlv.h"
#include "vmm/api.h"

/* ---- accept4, counted ---------------------------------------------------- */

static atomic_int accepts;

/* The API's accept4 (this definition comes before libc's). */
int accept4(int fd, struct sockaddr *sa, socklen_t *len, int flags)
{
	atomic_fetch_add(&accepts, 1);
	return syscall(SYS_accept4, fd, sa, len, flags);
}

/* ---- the server ------------------------------------------------------------ */

struct server {
	char dir[64];
	char api_sock[96];
	char agent_sock[96];
	char marker[96]; /* the fake agent creates it on a POWEROFF */
	pid_t agent;
	struct api *api;
	struct fd_budget *fds; /* NULL: none */
	atomic_int shutdowns, failures;
	char why[256]; /* the last shutdown_failed reason */
};

static int open_agent(void *opaque)
{
	struct server *s = opaque;

	return unix_connect(s->agent_sock, true);
}

static void on_shutdown(void *opaque)
{
	struct server *s = opaque;

	atomic_fetch_add(&s->shutdowns, 1);
}

static void on_shutdown_failed(void *opaque, const char *why)
{
	struct server *s = opaque;

	snprintf(s->why, sizeof(s->why), "%s", why);
	atomic_fetch_add(&s->failures, 1); /* after why: read after it */
}

static int server_start(struct server *s)
{
	struct api_params p = {
		.socket_path = s->api_sock,
		.open_agent = open_agent,
		.shutdown = on_shutdown,
		.shutdown_failed = on_shutdown_failed,
		.opaque = s,
		.agent_timeout_ms = 500,
		.fds = s->fds,
	};
	int ret;

	snprintf(s->dir, sizeof(s->dir), "/tmp/kiln-api-hostile.XXXXXX");
	if (!mkdtemp(s->dir))
		return -errno;
	snprintf(s->api_sock, sizeof(s->api_sock), "%s/api.sock", s->dir);
	snprintf(s->agent_sock, sizeof(s->agent_sock), "%s/agent.sock", s->dir);
	snprintf(s->marker, sizeof(s->marker), "%s/poweroff", s->dir);
	ret = api__create(&s->api, &p);
	return ret ?: api__start(s->api, NULL);
}

static void server_stop(struct server *s)
{
	api__destroy(s->api);
	s->api = NULL;
	if (s->agent > 0) {
		kill(s->agent, SIGKILL);
		waitpid(s->agent, NULL, 0);
	}
	s->agent = 0;
	unlink(s->marker);
	unlink(s->agent_sock);
	rmdir(s->dir);
}

/* Peak resident memory of this process, KiB. */
static long vm_hwm_kib(void)
{
	char line[128];
	long kib = -1;
	FILE *f = fopen("/proc/self/status", "r");

	while (f && fgets(line, sizeof(line), f))
		if (sscanf(line, "VmHWM: %ld kB", &kib) == 1)
			break;
	if (f)
		fclose(f);
	return kib;
}

/* ---- fake agents ------------------------------------------------------------ */

enum hostile {
	HUGE_ENTRIES,	/* RESULT frames of one ~250 KiB entry, "more" */
	STARTED_TWICE,	/* PROC_STARTED, PROC_STARTED, PROC_EXIT */
	POWEROFF_STUCK, /* takes POWEROFF, never answers */
	POWEROFF_OK,	/* takes POWEROFF, answers RESULT */
	TRICKLED_HELLO, /* its HELLO one byte every 50 ms */
};

static void serve(int fd, enum hostile mode, const char *marker)
{
	static const uint8_t hello_bytes[16] = { 0 };
	struct kiln_buf b;
	uint16_t type;
	int i;

	if (mode == TRICKLED_HELLO) {
		struct kiln_frame f;

		/* A HELLO announcing 4 KiB, sent a byte at a time: forever. */
		kiln_frame__pack(&f, KILN_MSG_HELLO, 0, 4096);
		for (i = 0; i < (int)sizeof(f); i++, usleep(50000))
			if (write(fd, (uint8_t *)&f + i, 1) != 1)
				_exit(0);
		for (i = 0;; i = (i + 1) % 16, usleep(50000))
			if (write(fd, &hello_bytes[i], 1) != 1)
				_exit(0);
	}
	hostile_agent__send_hello(fd);
	type = hostile_agent__recv_request(fd);
	kiln_buf__init(&b);
	switch (mode) {
	case HUGE_ENTRIES:
		for (i = 0; i < HOSTILE_FRAMES; i++)
			hostile_agent__send_huge(fd, type, true);
		hostile_agent__send_frame(fd, KILN_MSG_RESULT, NULL);
		break;
	case STARTED_TWICE:
		if (kiln_tlv__put_u64(&b, KILN_T_PID, 42))
			_exit(1);
		hostile_agent__send_frame(fd, KILN_MSG_PROC_STARTED, &b);
		hostile_agent__send_frame(fd, KILN_MSG_PROC_STARTED, &b);
		hostile_agent__send_frame(fd, KILN_MSG_PROC_EXIT, NULL);
		break;
	case POWEROFF_STUCK:
	case POWEROFF_OK:
		if (type != KILN_MSG_POWEROFF)
			_exit(1);
		close(open(marker, O_WRONLY | O_CREAT | O_CLOEXEC, 0600));
		if (mode == POWEROFF_OK)
			hostile_agent__send_frame(fd, KILN_MSG_RESULT, NULL);
		break;
	default:
		break;
	}
	kiln_buf__free(&b);
	/* Held open until the API closes its side (or for ever). */
	while (recv(fd, &i, sizeof(i), 0) > 0)
		;
}

static void __attribute__((noreturn))
fake_agent(const char *path, const char *marker, enum hostile mode)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	int lfd = socket(AF_UNIX, SOCK_STREAM, 0), fd;

	snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", path);
	if (bind(lfd, (struct sockaddr *)&sa, sizeof(sa)) || listen(lfd, 64))
		_exit(1);
	signal(SIGPIPE, SIG_IGN);
	signal(SIGCHLD, SIG_IGN);
	for (;;) {
		fd = accept(lfd, NULL, NULL);
		if (fd < 0)
			continue;
		if (fork() == 0) {
			prctl(PR_SET_PDEATHSIG, SIGKILL);
			close(lfd);
			serve(fd, mode, marker);
			_exit(0);
		}
		close(fd);
	}
}

static int run_fake(struct server *s, enum hostile mode)
{
	uint64_t end = ms_now() + 5000;
	int fd;

	s->agent = fork();
	if (s->agent < 0)
		return -errno;
	if (s->agent == 0) {
		/* Gone with the test, even one killed at its timeout. */
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		setpgid(0, 0);
		fake_agent(s->agent_sock, s->marker, mode);
	}
	while (ms_now() < end) {
		fd = unix_connect(s->agent_sock, false);
		if (fd >= 0) {
			close(fd);
			return 0;
		}
		sleep_ms(10);
	}
	return -ETIMEDOUT;
}

FIXTURE(hostile)
{
	struct server s;
	struct tc t;
};

FIXTURE_SETUP(hostile)
{
	self->t.fd = -1;
	ASSERT_EQ(0, server_start(&self->s));
	ASSERT_EQ(0, tc_open(&self->t, self->s.api_sock));
}

FIXTURE_TEARDOWN(hostile)
{
	tc_close(&self->t);
	/* The fake's connection children are its process group. */
	if (self->s.agent > 0)
		kill(-self->s.agent, SIGKILL);
	server_stop(&self->s);
}

static json_t *status(struct __test_metadata *_metadata, struct tc *t)
{
	json_t *m = tc_call(t, 99, "vm.status", NULL);

	EXPECT_TRUE(m && result(m)) TH_LOG("vm.status went unanswered");
	return m;
}

/* ---- a guest that makes the API allocate (item 1) ----------------------------- */

static json_int_t err_limit(json_t *m)
{
	return json_integer_value(json_object_get(
		json_object_get(json_object_get(m, "error"), "data"), "limit"));
}

/*
 * 400 RESULT frames, each "more follows" with one 250 KiB entry that is
 * not UTF-8: 100 MB from the guest, which grew the API by 441 MiB before
 * it had byte budgets. Now each answer stops at API_RESULT_MAX.
 */
TEST_F_TIMEOUT(hostile, huge_entries_are_bounded, 120)
{
	long before = vm_hwm_kib();
	json_t *m, *ge;

	ASSERT_EQ(0, run_fake(&self->s, HUGE_ENTRIES));
	m = tc_call(&self->t, 1, "fs.readDir", json_pack("{s:s}", "path", "/"));
	ASSERT_TRUE(m != NULL);
	EXPECT_EQ(API_E_LIMIT, err_code(m));
	EXPECT_EQ(API_RESULT_MAX, err_limit(m));
	json_decref(m);

	m = tc_call(&self->t, 2, "facts", NULL);
	ASSERT_TRUE(m != NULL);
	EXPECT_EQ(API_E_LIMIT, err_code(m));
	json_decref(m);

	/* vm.facts still answers: the config facts and why not the guest's. */
	m = tc_call(&self->t, 3, "vm.facts", NULL);
	ASSERT_TRUE(m != NULL);
	ge = json_object_get(result(m), "guestError");
	EXPECT_EQ(API_E_LIMIT, json_integer_value(json_object_get(ge, "code")));
	json_decref(m);

	/* The budget, twice over for copies on the way out, and slack. */
	if (!testutil__asan()) {
		EXPECT_GT(4 * (long)(API_RESULT_MAX >> 10) + 32768,
			  vm_hwm_kib() - before)
		TH_LOG("peak memory grew by %ld KiB", vm_hwm_kib() - before);
	}
	m = status(_metadata, &self->t);
	EXPECT_EQ(0, res_int(m, "requests"));
	json_decref(m);
}

/*
 * The same directory with stream: every entry reaches the client, one
 * notification per frame, and the API holds one frame's worth at a time
 * (the client's output bound stops it reading the agent meanwhile).
 */
TEST_F_TIMEOUT(hostile, huge_directory_streams, 120)
{
	long before = vm_hwm_kib();
	json_int_t entries = 0, notes = 0;
	const char *method;
	json_t *m, *e;
	bool eof;

	ASSERT_EQ(0, run_fake(&self->s, HUGE_ENTRIES));
	ASSERT_EQ(0, tc_request(&self->t, 1, "fs.readDir",
				json_pack("{s:s, s:b}", "path", "/", "stream",
					  1)));
	for (;;) {
		m = tc_recv(&self->t, TC_WAIT_MS, &eof);
		ASSERT_TRUE(m != NULL);
		if (msg_has_id(m, 1))
			break;
		method = json_string_value(json_object_get(m, "method"));
		EXPECT_STREQ("fs.entries", method ? method : "");
		e = json_object_get(json_object_get(m, "params"), "entries");
		entries += json_array_size(e);
		notes++;
		json_decref(m);
	}
	EXPECT_EQ(HOSTILE_FRAMES, res_int(m, "count"));
	json_decref(m);
	EXPECT_EQ(HOSTILE_FRAMES, entries);
	EXPECT_EQ(HOSTILE_FRAMES, notes);
	if (!testutil__asan()) {
		EXPECT_GT(4 * (long)(API_RESULT_MAX >> 10) + 32768,
			  vm_hwm_kib() - before)
		TH_LOG("peak memory grew by %ld KiB", vm_hwm_kib() - before);
	}
}

/* A second PROC_STARTED would queue stdin frames again, each time. */
TEST_F(hostile, started_twice_is_a_protocol_error)
{
	const char *msg;
	json_t *m;

	ASSERT_EQ(0, run_fake(&self->s, STARTED_TWICE));
	m = tc_call(&self->t, 1, "exec",
		    json_pack("{s:[s], s:s}", "argv", "true", "stdin", "aGkK"));
	ASSERT_TRUE(m != NULL);
	EXPECT_EQ(API_E_AGENT, err_code(m));
	msg = json_string_value(
		json_object_get(json_object_get(m, "error"), "message"));
	EXPECT_NE(NULL, strstr(msg ? msg : "", "started twice"));
	json_decref(m);
}

/* ---- vm.shutdown never waits on the guest (item 3) ----------------------------- */

static void shutdown_requested(struct __test_metadata *_metadata,
			       struct server *s, struct tc *t)
{
	json_t *m = tc_call(t, 1, "vm.shutdown", NULL);

	ASSERT_TRUE(m != NULL);
	EXPECT_TRUE(result(m) != NULL);
	json_decref(m);
	/* After the answer went out: waited for, however long. */
	while (!atomic_load(&s->shutdowns))
		sleep_ms(10);
}

/*
 * The agent takes POWEROFF and never answers: another client's
 * vm.status is answered while the POWEROFF is still in flight (the
 * monitor's old synchronous POWEROFF held the API thread meanwhile).
 * Once the agent goes away, the monitor hears that it was not told.
 */
TEST_F(hostile, shutdown_does_not_stall_the_api)
{
	struct tc other;
	json_t *m;

	ASSERT_EQ(0, run_fake(&self->s, POWEROFF_STUCK));
	ASSERT_EQ(0, tc_open(&other, self->s.api_sock));
	shutdown_requested(_metadata, &self->s, &self->t);
	while (access(self->s.marker, F_OK))
		sleep_ms(10);
	m = status(_metadata, &other);
	EXPECT_EQ(1, res_int(m, "requests")); /* the POWEROFF, waiting */
	json_decref(m);
	EXPECT_EQ(0, atomic_load(&self->s.failures));

	kill(-self->s.agent, SIGKILL);
	while (!atomic_load(&self->s.failures))
		sleep_ms(10);
	EXPECT_NE(NULL, strstr(self->s.why, "connection lost"))
	TH_LOG("why: %s", self->s.why);
	tc_close(&other);
}

/*
 * An agent trickling its HELLO cannot stretch the wait: the POWEROFF
 * fails once agent_timeout_ms (500 ms here) has passed, whatever the
 * trickle (it would take minutes), and the API answers meanwhile.
 */
TEST_F(hostile, shutdown_trickled_hello_fails_in_time)
{
	json_t *m;

	ASSERT_EQ(0, run_fake(&self->s, TRICKLED_HELLO));
	shutdown_requested(_metadata, &self->s, &self->t);
	m = status(_metadata, &self->t);
	json_decref(m);
	while (!atomic_load(&self->s.failures))
		sleep_ms(10);
	EXPECT_NE(NULL, strstr(self->s.why, "in time"))
	TH_LOG("why: %s", self->s.why);
	m = status(_metadata, &self->t);
	EXPECT_EQ(0, res_int(m, "requests"));
	json_decref(m);
}

/* An agent that takes it: no failure, nothing left in flight. */
TEST_F(hostile, shutdown_taken)
{
	json_int_t requests;
	json_t *m;

	ASSERT_EQ(0, run_fake(&self->s, POWEROFF_OK));
	shutdown_requested(_metadata, &self->s, &self->t);
	do {
		m = status(_metadata, &self->t);
		requests = res_int(m, "requests");
		json_decref(m);
		if (requests)
			sleep_ms(10);
	} while (requests);
	EXPECT_EQ(0, access(self->s.marker, F_OK));
	EXPECT_EQ(0, atomic_load(&self->s.failures));
}

/* ---- out of descriptors (item 6) ----------------------------------------------- */

/*
 * At EMFILE a new client stays in the listener's backlog and the
 * listener stays readable: the API must back off (one accept4 per
 * API_ACCEPT_BACKOFF_MS at most) rather than spin, serve its clients
 * meanwhile, and take the waiting client once descriptors are back.
 * The bound holds however slow the machine: slowness only loosens it.
 */
TEST_F(hostile, accept_backs_off_at_emfile)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	int fill[1024], nr_fill = 0, i, base;
	struct rlimit rl, old;
	uint64_t t0, elapsed;
	struct tc late;
	json_t *m;

	m = status(_metadata, &self->t); /* the fixture's client is in */
	json_decref(m);
	/* Its socket made now: connect() then needs no descriptor. */
	late = (struct tc){ .wait_ms = TC_WAIT_MS };
	late.fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	ASSERT_LE(0, late.fd);

	ASSERT_EQ(0, getrlimit(RLIMIT_NOFILE, &old));
	rl = old;
	rl.rlim_cur = 256;
	if (rl.rlim_max < rl.rlim_cur)
		SKIP(return, "RLIMIT_NOFILE hard limit below 256");
	ASSERT_EQ(0, setrlimit(RLIMIT_NOFILE, &rl));
	while (nr_fill < (int)ARRAY_SIZE(fill)) {
		fill[nr_fill] = open("/dev/null", O_RDONLY | O_CLOEXEC);
		if (fill[nr_fill] < 0)
			break;
		nr_fill++;
	}
	ASSERT_EQ(EMFILE, errno);

	base = atomic_load(&accepts);
	snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", self->s.api_sock);
	ASSERT_EQ(0, connect(late.fd, (struct sockaddr *)&sa, sizeof(sa)));
	while (atomic_load(&accepts) == base) /* the first EMFILE */
		sleep_ms(1);

	base = atomic_load(&accepts);
	t0 = ms_now();
	for (i = 0; i < 20; i++) {
		m = status(_metadata, &self->t);
		json_decref(m);
	}
	elapsed = ms_now() - t0;
	EXPECT_GE((int)(elapsed / API_ACCEPT_BACKOFF_MS) + 2,
		  atomic_load(&accepts) - base)
	TH_LOG("%d accept4 calls in %llu ms", atomic_load(&accepts) - base,
	       (unsigned long long)elapsed);

	for (i = 0; i < nr_fill; i++)
		close(fill[i]);
	ASSERT_EQ(0, setrlimit(RLIMIT_NOFILE, &old));
	m = tc_call(&late, 1, "vm.status", NULL);
	ASSERT_TRUE(m != NULL);
	EXPECT_EQ(2, res_int(m, "clients"));
	json_decref(m);
	tc_close(&late);
}

/*
 * The descriptor budget the monitor shares with vsock: the API's clients
 * and agent connections take from it. Spent, a new client is told so and
 * closed, and a request cannot reach the agent (its retries back off),
 * while the clients already in are served.
 */
TEST(descriptor_budget_is_shared)
{
	struct fd_budget b = { 0 };
	struct server s = { .fds = &b };
	struct tc t, extra;
	const char *msg;
	json_t *m;
	bool eof;

	ASSERT_EQ(0, server_start(&s));
	ASSERT_EQ(0, tc_open(&t, s.api_sock));
	m = tc_call(&t, 1, "vm.status", NULL); /* t is in: one taken */
	ASSERT_TRUE(m && result(m));
	json_decref(m);
	EXPECT_EQ(1U, atomic_load(&b.held));
	atomic_store(&b.max, 1); /* as if vsock held the rest */

	ASSERT_EQ(0, tc_open(&extra, s.api_sock));
	m = tc_recv(&extra, TC_WAIT_MS, &eof);
	ASSERT_TRUE(m != NULL);
	EXPECT_EQ(API_E_LIMIT, err_code(m));
	msg = json_string_value(
		json_object_get(json_object_get(m, "error"), "message"));
	EXPECT_NE(NULL, strstr(msg ? msg : "", "descriptor budget"));
	json_decref(m);
	tc_close(&extra);

	m = tc_call(&t, 2, "exec", json_pack("{s:[s]}", "argv", "true"));
	ASSERT_TRUE(m != NULL);
	EXPECT_EQ(API_E_AGENT, err_code(m));
	msg = json_string_value(
		json_object_get(json_object_get(m, "error"), "message"));
	EXPECT_NE(NULL, strstr(msg ? msg : "", strerror(EMFILE)))
	TH_LOG("message: %s", msg);
	json_decref(m);
	EXPECT_EQ(1U, atomic_load(&b.held));

	tc_close(&t);
	server_stop(&s);
	EXPECT_EQ(0U, atomic_load(&b.held)); /* all given back */
}

TEST_HARNESS_MAIN
