// SPDX-License-Identifier: GPL-2.0
/*
 * The control API (vmm/api.c) on a temporary socket, in this process,
 * against the real guest agent built for the host (kiln-agent-host on a
 * Unix socket: KILN_AGENT_HOST names it, default
 * build/guest/kiln-agent-host), and against fake agents for the error
 * paths. A missing kiln-agent-host is a failure, not a skip: these tests
 * are the API's only end-to-end check. The vmmctl smoke test runs
 * KILN_VMMCTL (default build/vmmctl).
 */
#include <dirent.h>
#include <fcntl.h>
#include <ftw.h>
#include <jansson.h>
#include <poll.h>
#include <pthread.h>
#include <pwd.h>
#include <stdatomic.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>

#include "lib/base64.h"
#include "lib/compiler.h"
#include "net/policy.h"
#include "net/status.h"
#include "proto/reseed.h"
#include "proto/tlv.h"
#include "selftests/jsonrpc_client.h"
#include "selftests/kselftest.h"
#include "selftests/spawn.h"
#include "selftests/testutil.h"
#include "vmm/api.h"

#define WAIT_MS TC_WAIT_MS /* for any one answer */

static const char *agent_host_path(void)
{
	const char *p = getenv("KILN_AGENT_HOST");

	return p ? p : "build/guest/kiln-agent-host";
}

static const char *vmmctl_path(void)
{
	const char *p = getenv("KILN_VMMCTL");

	return p ? p : "build/vmmctl";
}

static int rm_one(const char *p, const struct stat *st, int flag,
		  struct FTW *ftw)
{
	remove(p);
	return 0;
}

static void rm_tree(const char *dir)
{
	nftw(dir, rm_one, 16, FTW_DEPTH | FTW_PHYS);
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

/* ---- the server under test ----------------------------------------------- */

struct server {
	char dir[64];
	char api_sock[96];
	char agent_sock[96];
	pid_t agent;
	struct api *api;
	atomic_int shutdowns;
	atomic_int shutdown_failures; /* the agent did not take POWEROFF */
	struct net_policy *policy;    /* net.setPolicy's, on the API thread */
	/* vm.pause, vm.resume, vm.snapshot: as the monitor answers them. */
	bool paused;
	char snap_dir[128];
	bool snap_resume;
	/* A restored VM's seed (api_params.reseed); NULL: a boot. */
	const uint8_t *reseed;
	/* With it: api_params.net_mac and net; NULL: no network. */
	const uint8_t *net_mac;
	const char *net;
	atomic_int agent_ready;
	/* api_params.mounts_plan; its calls noted in agent.log too. */
	enum api_mounts mounts_plan;
	atomic_int captures, mounts_failures;
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

/* The host agent is not in a VM: it answers POWEROFF with an error. */
static void on_shutdown_failed(void *opaque, const char *why)
{
	struct server *s = opaque;

	atomic_fetch_add(&s->shutdown_failures, 1);
}

/* What a VM's proxy might have counted: vm.status's net object from it. */
static const struct proxy_stats test_stats = {
	.tcp_allowed = 3,
	.tcp_denied = 2,
	.tcp_open = 1,
	.tcp_cut = 1,
	.udp_allowed = 4,
	.udp_denied = 5,
	.udp_open = 2,
	.udp_cut = 0,
	.bytes_out = 1000,
	.bytes_in = 20000,
	.upstream_failed = 1,
	.udp_dropped = 6,
	.hook = { .questions = 8,
		  .answers = 5,
		  .timeouts = 1,
		  .ignored = 2,
		  .failures = 1,
		  .connects = 3,
		  .pending = 1 },
	.running = true,
	.nr_reasons = 3,
	.reasons = { { "tcp grant 0", IPPROTO_TCP, NET_VERDICT_ALLOW, 2 },
		     { "no grant", IPPROTO_TCP, NET_VERDICT_DENY, 2 },
		     { "http grant 0", IPPROTO_TCP, NET_VERDICT_HTTP, 1 } },
	.tcp_intercepted = 1,
	.http_allowed = 4,
	.http_refused = 1,
	.nr_http_reasons = 2,
	.http_reasons = { { "http grant 0", IPPROTO_TCP, NET_VERDICT_ALLOW, 4 },
			  { "http no grant", IPPROTO_TCP, NET_VERDICT_DENY,
			    1 } },
};

static void on_status(void *opaque, json_t *st)
{
	uint64_t egress[EGRESS_NR_REASONS] = {
		[EGRESS_TCP_PROXY] = 7, [EGRESS_NOT_TCP_UDP] = 9
	};

	json_object_set_new(st, "test", json_true());
	json_object_set_new(st, "net",
			    net_status__json(&test_stats, egress, NULL));
}

/* The monitor's members of vm.metrics: here one marker. */
static void on_metrics(void *opaque, json_t *m)
{
	json_object_set_new(m, "test", json_true());
}

/* As the monitor does: the whole policy parsed, or the old one kept. */
static int on_set_policy(void *opaque, json_t *policy, char *err, size_t len)
{
	struct server *s = opaque;

	return net_policy__replace(&s->policy, policy, "policy", err, len);
}

static int on_pause(void *opaque, char *err, size_t len)
{
	struct server *s = opaque;

	if (s->paused) {
		snprintf(err, len, "the VM is paused already");
		return -EALREADY;
	}
	s->paused = true;
	return 0;
}

static int on_resume(void *opaque, char *err, size_t len)
{
	struct server *s = opaque;

	if (!s->paused) {
		snprintf(err, len, "the VM is not paused");
		return -EALREADY;
	}
	s->paused = false;
	return 0;
}

/* A dir with "nohook" in it fails as a device without a save hook does. */
static int on_snapshot(void *opaque, const char *dir, bool resume, char *err,
		       size_t len)
{
	struct server *s = opaque;

	if (strstr(dir, "nohook")) {
		snprintf(err, len,
			 "virtio-fs0: this device cannot be saved "
			 "yet (it has no save hook)");
		return -EOPNOTSUPP;
	}
	snprintf(s->snap_dir, sizeof(s->snap_dir), "%s", dir);
	s->snap_resume = resume;
	s->paused = !resume;
	return 0;
}

static bool on_is_paused(void *opaque)
{
	return ((struct server *)opaque)->paused;
}

static void on_agent_ready(void *opaque)
{
	struct server *s = opaque;

	atomic_fetch_add(&s->agent_ready, 1);
}

/* A line in agent.log, after the fake's own (the API thread calls us). */
static void note_line(struct server *s, const char *line)
{
	char path[160];
	int fd;

	snprintf(path, sizeof(path), "%s/agent.log", s->dir);
	fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
	if (fd < 0)
		return;
	if (write(fd, line, strlen(line)) < 0)
		(void)0;
	close(fd);
}

static void on_capture(void *opaque, int err, const char *why)
{
	struct server *s = opaque;

	atomic_fetch_add(&s->captures, 1);
	note_line(s, err ? "capture refused\n" : "capture\n");
}

static void on_mounts_failed(void *opaque, const char *why)
{
	struct server *s = opaque;

	atomic_fetch_add(&s->mounts_failures, 1);
	note_line(s, "mounts failed\n");
}

static int server_dir(struct server *s)
{
	snprintf(s->dir, sizeof(s->dir), "/tmp/kiln-api.XXXXXX");
	if (!mkdtemp(s->dir))
		return -errno;
	snprintf(s->api_sock, sizeof(s->api_sock), "%s/api.sock", s->dir);
	snprintf(s->agent_sock, sizeof(s->agent_sock), "%s/agent.sock", s->dir);
	return 0;
}

static int server_start_api(struct server *s, unsigned int agent_timeout_ms)
{
	json_t *facts =
		json_pack("[{s:s, s:s, s:s, s:s}]", "source", "config", "topic",
			  "os", "relation", "distribution", "value", "test");
	struct api_params p = {
		.socket_path = s->api_sock,
		.open_agent = open_agent,
		.config_facts = facts,
		.shutdown = on_shutdown,
		.shutdown_failed = on_shutdown_failed,
		.status = on_status,
		.metrics = on_metrics,
		.set_policy = on_set_policy,
		.pause = on_pause,
		.resume = on_resume,
		.snapshot = on_snapshot,
		.is_paused = on_is_paused,
		.agent_ready =
			s->reseed || s->mounts_plan ? on_agent_ready : NULL,
		.reseed = s->reseed,
		.net_mac = s->net_mac,
		.net = s->net,
		.mounts = s->mounts_plan ? (const uint8_t *)"mounts" : NULL,
		.mounts_len = s->mounts_plan ? 6 : 0,
		.mounts_plan = s->mounts_plan,
		.capture = on_capture,
		.mounts_failed = on_mounts_failed,
		.opaque = s,
		.agent_timeout_ms = agent_timeout_ms,
	};
	int ret = api__create(&s->api, &p);

	json_decref(facts);
	if (!ret)
		ret = api__start(s->api, NULL);
	return ret;
}

/* kiln-agent-host on agent_sock; waits until it listens. */
static int start_agent(struct server *s)
{
	const char *bin = agent_host_path();
	uint64_t end;
	int fd;

	s->agent = fork();
	if (s->agent < 0)
		return -errno;
	if (s->agent == 0) {
		/* The agent's own environment, which env merges into. */
		setenv("KILN_AGENT_TEST_MARK", "inherited", 1);
		execl(bin, bin, "--unix", s->agent_sock, "--die-with-parent",
		      (char *)NULL);
		_exit(127);
	}
	for (end = ms_now() + 5000; ms_now() < end; sleep_ms(10)) {
		fd = unix_connect(s->agent_sock, false);
		if (fd >= 0) {
			close(fd);
			return 0;
		}
		if (waitpid(s->agent, NULL, WNOHANG) == s->agent) {
			s->agent = 0;
			return -ENOEXEC;
		}
	}
	return -ETIMEDOUT;
}

static void stop_agent(struct server *s)
{
	if (s->agent <= 0)
		return;
	kill(s->agent, SIGKILL);
	waitpid(s->agent, NULL, 0);
	s->agent = 0;
}

static void server_stop(struct server *s)
{
	api__destroy(s->api);
	s->api = NULL;
	net_policy__free(s->policy);
	s->policy = NULL;
	stop_agent(s);
	if (s->dir[0])
		rm_tree(s->dir);
}

FIXTURE(srv)
{
	struct server s;
	struct tc t;
};

FIXTURE_SETUP(srv)
{
	const char *bin = agent_host_path();

	self->t.fd = -1;
	ASSERT_EQ(0, access(bin, X_OK))
	TH_LOG("%s is not built: the API tests need the guest agent built "
	       "for the host (make selftests builds it; KILN_AGENT_HOST "
	       "names another)",
	       bin);
	ASSERT_EQ(0, server_dir(&self->s));
	ASSERT_EQ(0, start_agent(&self->s))
	TH_LOG("%s --unix %s did not start listening", bin, self->s.agent_sock);
	ASSERT_EQ(0, server_start_api(&self->s, 3000));
	ASSERT_EQ(0, tc_open(&self->t, self->s.api_sock));
}

FIXTURE_TEARDOWN(srv)
{
	tc_close(&self->t);
	server_stop(&self->s);
}

TEST_F(srv, status_and_unknown_method)
{
	json_t *m = tc_call(&self->t, 1, "vm.status", NULL);

	ASSERT_TRUE(m != NULL);
	EXPECT_STREQ("running",
		     json_string_value(json_object_get(result(m), "state")));
	EXPECT_TRUE(json_is_true(json_object_get(result(m), "test")));
	json_decref(m);
	m = tc_call(&self->t, 2, "no.such.method", NULL);
	ASSERT_TRUE(m != NULL);
	EXPECT_EQ(API_E_NO_METHOD, err_code(m));
	json_decref(m);
}

static json_t *set_policy(struct tc *t, json_int_t id, const char *policy)
{
	json_error_t jerr;
	json_t *p = json_loads(policy, 0, &jerr);

	return tc_call(t, id, "net.setPolicy", json_pack("{s:o}", "policy", p));
}

static const char *err_message(json_t *m)
{
	return json_string_value(
		json_object_get(json_object_get(m, "error"), "message"));
}

TEST_F(srv, net_set_policy_replaces_or_keeps_the_old)
{
	json_t *m;

	m = set_policy(
		&self->t, 1,
		"{\"tcp\": [{\"to\": \"192.0.2.10\", \"ports\": [80]}]}");
	ASSERT_TRUE(m != NULL);
	EXPECT_EQ(0, err_code(m)) TH_LOG("%s", err_message(m));
	EXPECT_TRUE(json_is_object(result(m)));
	json_decref(m);
	EXPECT_EQ(1, net_policy__nr_rules(self->s.policy, IPPROTO_TCP));

	/* A bad one: refused, naming the key; the old one stays. */
	m = set_policy(
		&self->t, 2,
		"{\"tcp\": [{\"to\": \"192.0.2.10\"}, "
		"{\"to\": \"::1\"}], \"udp\": [{\"to\": \"10.0.0.1\"}]}");
	ASSERT_TRUE(m != NULL);
	EXPECT_EQ(API_E_INVALID_PARAMS, err_code(m));
	EXPECT_TRUE(err_message(m) &&
		    !strncmp(err_message(m), "policy.tcp[1].to: ", 18))
	TH_LOG("%s", err_message(m));
	json_decref(m);
	EXPECT_EQ(1, net_policy__nr_rules(self->s.policy, IPPROTO_TCP));
	EXPECT_EQ(0, net_policy__nr_rules(self->s.policy, IPPROTO_UDP));

	m = set_policy(&self->t, 3, "{\"tcp\": 5}");
	ASSERT_TRUE(m != NULL);
	EXPECT_EQ(API_E_INVALID_PARAMS, err_code(m));
	EXPECT_TRUE(err_message(m) && strstr(err_message(m), "policy.tcp"))
	TH_LOG("%s", err_message(m));
	json_decref(m);
	m = set_policy(&self->t, 4, "[]");
	ASSERT_TRUE(m != NULL);
	EXPECT_EQ(API_E_INVALID_PARAMS, err_code(m));
	EXPECT_TRUE(err_message(m) && !strncmp(err_message(m), "policy", 6))
	TH_LOG("%s", err_message(m));
	json_decref(m);
	m = tc_call(&self->t, 5, "net.setPolicy", NULL);
	ASSERT_TRUE(m != NULL);
	EXPECT_EQ(API_E_INVALID_PARAMS, err_code(m));
	EXPECT_STREQ("policy: missing", err_message(m));
	json_decref(m);
	EXPECT_EQ(1, net_policy__nr_rules(self->s.policy, IPPROTO_TCP));

	/* Another good one replaces it whole. */
	m = set_policy(
		&self->t, 6,
		"{\"udp\": [{\"to\": \"10.0.0.1\"}, {\"to\": \"10.0.0.2\"}]}");
	ASSERT_TRUE(m != NULL);
	EXPECT_EQ(0, err_code(m)) TH_LOG("%s", err_message(m));
	json_decref(m);
	EXPECT_EQ(0, net_policy__nr_rules(self->s.policy, IPPROTO_TCP));
	EXPECT_EQ(2, net_policy__nr_rules(self->s.policy, IPPROTO_UDP));
}

static json_int_t jint(json_t *o, const char *path1, const char *key)
{
	if (path1)
		o = json_object_get(o, path1);
	return json_integer_value(json_object_get(o, key));
}

TEST_F(srv, status_has_the_net_object)
{
	json_t *m = tc_call(&self->t, 1, "vm.status", NULL), *net, *r;

	ASSERT_TRUE(m != NULL);
	net = json_object_get(result(m), "net");
	ASSERT_TRUE(json_is_object(net));
	EXPECT_STREQ("running",
		     json_string_value(json_object_get(net, "proxy")));
	EXPECT_EQ(3, jint(net, "tcp", "allowed"));
	EXPECT_EQ(2, jint(net, "tcp", "denied"));
	EXPECT_EQ(1, jint(net, "tcp", "open"));
	EXPECT_EQ(1, jint(net, "tcp", "cut"));
	EXPECT_EQ(4, jint(net, "udp", "allowed"));
	EXPECT_EQ(5, jint(net, "udp", "denied"));
	EXPECT_EQ(2, jint(net, "udp", "open"));
	EXPECT_EQ(0, jint(net, "udp", "cut"));
	EXPECT_EQ(1000, jint(net, NULL, "bytesOut"));
	EXPECT_EQ(20000, jint(net, NULL, "bytesIn"));
	EXPECT_EQ(1, jint(net, NULL, "upstreamFailed"));
	EXPECT_EQ(6, jint(net, NULL, "udpDropped"));
	EXPECT_EQ(8, jint(net, "hook", "questions"));
	EXPECT_EQ(5, jint(net, "hook", "answers"));
	EXPECT_EQ(1, jint(net, "hook", "timeouts"));
	EXPECT_EQ(2, jint(net, "hook", "ignored"));
	EXPECT_EQ(1, jint(net, "hook", "failures"));
	EXPECT_EQ(3, jint(net, "hook", "connects"));
	EXPECT_EQ(1, jint(net, "hook", "pending"));
	r = json_object_get(net, "reasons");
	ASSERT_EQ(3, json_array_size(r));
	EXPECT_STREQ("intercepted", json_string_value(json_object_get(
					    json_array_get(r, 2), "verdict")));
	EXPECT_EQ(1, jint(net, "http", "flows"));
	EXPECT_EQ(4, jint(net, "http", "allowed"));
	EXPECT_EQ(1, jint(net, "http", "refused"));
	r = json_object_get(json_object_get(net, "http"), "reasons");
	ASSERT_EQ(2, json_array_size(r));
	EXPECT_STREQ("denied", json_string_value(json_object_get(
				       json_array_get(r, 1), "verdict")));
	EXPECT_STREQ("http no grant", json_string_value(json_object_get(
					      json_array_get(r, 1), "reason")));
	EXPECT_EQ(1, jint(json_array_get(r, 1), NULL, "requests"));
	r = json_object_get(net, "reasons");
	EXPECT_STREQ("tcp", json_string_value(json_object_get(
				    json_array_get(r, 1), "proto")));
	EXPECT_STREQ("denied", json_string_value(json_object_get(
				       json_array_get(r, 1), "verdict")));
	EXPECT_STREQ("no grant", json_string_value(json_object_get(
					 json_array_get(r, 1), "reason")));
	EXPECT_EQ(2, jint(json_array_get(r, 1), NULL, "flows"));
	EXPECT_EQ(7, jint(net, "egress", "tcp_proxy"));
	EXPECT_EQ(9, jint(net, "egress", "not_tcp_udp"));
	EXPECT_EQ(0, jint(net, "egress", "arp_pass"));
	EXPECT_EQ(EGRESS_NR_REASONS,
		  json_object_size(json_object_get(net, "egress")));
	json_decref(m);
}

TEST(net_status_without_a_proxy_or_its_counters)
{
	json_t *o = net_status__none();

	EXPECT_STREQ("none", json_string_value(json_object_get(o, "proxy")));
	EXPECT_EQ(1, json_object_size(o));
	json_decref(o);
	o = net_status__json(&test_stats, NULL, "egress: counter x: EPERM");
	EXPECT_STREQ("egress: counter x: EPERM",
		     json_string_value(json_object_get(o, "egressError")));
	EXPECT_EQ(NULL, json_object_get(o, "egress"));
	json_decref(o);
}

/*
 * net.relay: which relay new flows get, the open flows of each, the
 * directions batched now, why not the kernel.
 */
TEST(net_status_relay)
{
	struct proxy_stats s = test_stats;
	json_t *o, *r;

	s.relay_mode = PROXY_RELAY_KERNEL;
	s.tcp_kernel = 2;
	s.tcp_splice = 1;
	s.relay_batched = 3;
	s.relay_batches = 7; /* the SIGUSR2 report's, not the API's */
	o = net_status__json(&s, NULL, "x");
	r = json_object_get(o, "relay");
	ASSERT_TRUE(json_is_object(r));
	EXPECT_STREQ("kernel", json_string_value(json_object_get(r, "mode")));
	EXPECT_EQ(2, json_integer_value(json_object_get(r, "kernel")));
	EXPECT_EQ(1, json_integer_value(json_object_get(r, "splice")));
	EXPECT_EQ(3, json_integer_value(json_object_get(r, "batched")));
	EXPECT_EQ(4U, json_object_size(r));
	EXPECT_EQ(NULL, json_object_get(r, "error"));
	json_decref(o);

	s.relay_mode = PROXY_RELAY_SPLICE;
	snprintf(s.relay_error, sizeof(s.relay_error),
		 "relay: load: Operation not permitted");
	o = net_status__json(&s, NULL, "x");
	r = json_object_get(o, "relay");
	EXPECT_STREQ("splice", json_string_value(json_object_get(r, "mode")));
	EXPECT_STREQ("relay: load: Operation not permitted",
		     json_string_value(json_object_get(r, "error")));
	json_decref(o);
}

TEST_F(srv, malformed_json)
{
	static const char *const bad[] = {
		"{not json\n",
		"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"vm.status\"\n",
		"\"\\u0000\"\n",
	};
	json_t *m;
	size_t i;

	for (i = 0; i < ARRAY_SIZE(bad); i++) {
		ASSERT_EQ(0, tc_send_raw(&self->t, bad[i], strlen(bad[i])));
		m = tc_recv(&self->t, WAIT_MS, NULL);
		ASSERT_TRUE(m != NULL);
		EXPECT_EQ(API_E_PARSE, err_code(m));
		EXPECT_TRUE(json_is_null(json_object_get(m, "id")));
		json_decref(m);
	}
	/* The same connection goes on. */
	m = tc_call(&self->t, 3, "vm.status", NULL);
	ASSERT_TRUE(m != NULL);
	EXPECT_TRUE(result(m) != NULL);
	json_decref(m);
}

TEST_F(srv, invalid_requests)
{
	static const struct {
		const char *line;
		int code;
	} cases[] = {
		{ "[1,2]", API_E_INVALID_REQUEST },
		{ "42", API_E_INVALID_REQUEST },
		{ "{\"id\":1,\"method\":\"vm.status\"}",
		  API_E_INVALID_REQUEST },
		{ "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":7}",
		  API_E_INVALID_REQUEST },
		{ "{\"jsonrpc\":\"2.0\",\"id\":{},\"method\":\"vm.status\"}",
		  API_E_INVALID_REQUEST },
		{ "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"exec\","
		  "\"params\":[\"ls\"]}",
		  API_E_INVALID_PARAMS },
		{ "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"exec\","
		  "\"params\":{\"argv\":\"ls\"}}",
		  API_E_INVALID_PARAMS },
		{ "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"exec\","
		  "\"params\":{\"argv\":[]}}",
		  API_E_INVALID_PARAMS },
		{ "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"exec\","
		  "\"params\":{\"argv\":[\"ls\", 3]}}",
		  API_E_INVALID_PARAMS },
		{ "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"exec\","
		  "\"params\":{\"argv\":[\"ls\"],\"timeoutMs\":-1}}",
		  API_E_INVALID_PARAMS },
		{ "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"exec\","
		  "\"params\":{\"argv\":[\"cat\"],\"stdin\":\"not base64!\"}}",
		  API_E_INVALID_PARAMS },
		{ "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"exec\","
		  "\"params\":{\"argv\":[\"ls\"],\"env\":[\"NOEQUALS\"]}}",
		  API_E_INVALID_PARAMS },
		{ "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"fs.stat\","
		  "\"params\":{\"path\":5}}",
		  API_E_INVALID_PARAMS },
		{ "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"fs.stat\","
		  "\"params\":{\"path\":\"relative\"}}",
		  API_E_INVALID_PARAMS },
		{ "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"fs.mkdir\","
		  "\"params\":{\"path\":\"/x\",\"recursive\":\"yes\"}}",
		  API_E_INVALID_PARAMS },
		{ "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"spawn.write\","
		  "\"params\":{\"stream\":12345,\"data\":\"\"}}",
		  API_E_INVALID_PARAMS },
		{ "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"spawn.kill\","
		  "\"params\":{\"stream\":\"x\"}}",
		  API_E_INVALID_PARAMS },
		{ "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"cancel\"}",
		  API_E_INVALID_PARAMS },
	};
	json_t *m;
	size_t i;

	for (i = 0; i < ARRAY_SIZE(cases); i++) {
		ASSERT_EQ(0, tc_send_raw(&self->t, cases[i].line,
					 strlen(cases[i].line)));
		ASSERT_EQ(0, tc_send_raw(&self->t, "\n", 1));
		m = tc_recv(&self->t, WAIT_MS, NULL);
		ASSERT_TRUE(m != NULL) TH_LOG("no answer to %s", cases[i].line);
		EXPECT_EQ(cases[i].code, err_code(m))
		TH_LOG("%s", cases[i].line);
		json_decref(m);
	}
	EXPECT_SERVING(self->s.api_sock);
}

TEST_F(srv, oversized_message)
{
	size_t n = API_MAX_MESSAGE + 4096;
	char *big = malloc(n);
	bool eof = false;
	json_t *m;

	ASSERT_TRUE(big != NULL);
	memset(big, ' ', n);
	big[0] = '{';
	/* The server may close before it read it all: ignore EPIPE. */
	tc_send_raw(&self->t, big, n);
	free(big);
	m = tc_recv(&self->t, WAIT_MS, NULL);
	ASSERT_TRUE(m != NULL);
	EXPECT_EQ(API_E_INVALID_REQUEST, err_code(m));
	json_decref(m);
	m = tc_recv(&self->t, WAIT_MS, &eof);
	EXPECT_TRUE(m == NULL);
	EXPECT_TRUE(eof) TH_LOG("the connection should be closed");
	json_decref(m);
	EXPECT_SERVING(self->s.api_sock);
}

/* An error answer's data object, or NULL. */
static json_t *err_data(json_t *m)
{
	return json_object_get(json_object_get(m, "error"), "data");
}

TEST_F(srv, exec_round_trip)
{
	json_t *m;
	char *out, *err;

	m = tc_call(&self->t, 1, "exec",
		    json_pack("{s:[s, s, s], s:o, s:[s], s:s}", "argv", "sh",
			      "-c",
			      "cat; echo \"$KILN_X\" >&2; pwd >&2; exit 3",
			      "stdin", b64_json("hello\n", 6), "env",
			      "KILN_X=from-env", "cwd", "/tmp"));
	ASSERT_TRUE(m != NULL);
	ASSERT_TRUE(result(m) != NULL) TH_LOG("error %lld", err_code(m));
	EXPECT_EQ(3, res_int(m, "exitCode"));
	EXPECT_FALSE(json_is_true(json_object_get(result(m), "timedOut")));
	out = b64_str(result(m), "stdout", NULL);
	err = b64_str(result(m), "stderr", NULL);
	EXPECT_STREQ("hello\n", out);
	EXPECT_STREQ("from-env\n/tmp\n", err);
	free(out);
	free(err);
	json_decref(m);

	/* No such command: the guest's errno. */
	m = tc_call(&self->t, 2, "exec",
		    json_pack("{s:[s]}", "argv", "/no/such/command"));
	ASSERT_TRUE(m != NULL);
	EXPECT_EQ(API_E_ERRNO, err_code(m));
	EXPECT_STREQ("ENOENT", err_errno(m));
	EXPECT_TRUE(json_object_get(err_data(m), "cwd") == NULL);
	json_decref(m);

	/* No such directory: ENOENT too, told apart by "cwd" in the data. */
	m = tc_call(&self->t, 3, "exec",
		    json_pack("{s:[s], s:s}", "argv", "true", "cwd",
			      "/no/such/dir"));
	ASSERT_TRUE(m != NULL);
	EXPECT_EQ(API_E_ERRNO, err_code(m));
	EXPECT_STREQ("ENOENT", err_errno(m));
	EXPECT_STREQ("/no/such/dir",
		     json_string_value(json_object_get(err_data(m), "cwd")));
	json_decref(m);
}

/*
 * envMode "merge": env adds to the agent's own environment (its PATH and
 * the test's mark stay), an added name replaces the agent's value;
 * "replace" (and no envMode) keeps the old meaning. The same for spawn
 * and pty.open, which share the parameters.
 */
TEST_F(srv, exec_env_merge_adds)
{
	static const char script[] =
		"echo \"$KILN_X|${KILN_AGENT_TEST_MARK-unset}|"
		"$(env | grep -c '^PATH=')\"";
	const char *const modes[] = { "merge", "replace", NULL };
	const char *const want[] = { "from-env|inherited|1\n",
				     "from-env|unset|0\n",
				     "from-env|unset|0\n" };
	json_t *m, *p;
	char *out;

	for (int i = 0; i < 3; i++) {
		p = json_pack("{s:[s, s, s], s:{s:s}}", "argv", "sh", "-c",
			      script, "env", "KILN_X", "from-env");
		if (modes[i])
			json_object_set_new(p, "envMode",
					    json_string(modes[i]));
		m = tc_call(&self->t, 1 + i, "exec", p);
		ASSERT_TRUE(m != NULL);
		ASSERT_TRUE(result(m) != NULL)
		TH_LOG("%s: %s", modes[i] ?: "(none)", err_message(m));
		out = b64_str(result(m), "stdout", NULL);
		EXPECT_STREQ(want[i], out) TH_LOG("%s", modes[i] ?: "(none)");
		free(out);
		json_decref(m);
	}
	/* An added PATH is the one the command has: once. */
	m = tc_call(&self->t, 4, "exec",
		    json_pack("{s:[s, s, s], s:[s], s:s}", "argv", "sh", "-c",
			      "env | grep -c '^PATH='; echo $PATH", "env",
			      "PATH=/usr/bin:/bin:/kiln-added", "envMode",
			      "merge"));
	ASSERT_TRUE(m != NULL);
	ASSERT_TRUE(result(m) != NULL) TH_LOG("%s", err_message(m));
	out = b64_str(result(m), "stdout", NULL);
	EXPECT_STREQ("1\n/usr/bin:/bin:/kiln-added\n", out);
	free(out);
	json_decref(m);
}

/* Each bad variable is refused by name before anything runs. */
TEST_F(srv, exec_env_bad_names_refused)
{
	static const struct {
		const char *params, *message;
	} cases[] = {
		{ "{\"argv\":[\"true\"],\"env\":{\"\":\"x\"}}",
		  "env: variable \"\": an empty name" },
		{ "{\"argv\":[\"true\"],\"env\":{\"A=B\":\"x\"}}",
		  "env: variable \"A=B\": '=' in the name" },
		{ "{\"argv\":[\"true\"],\"env\":{\"CI\":1}}",
		  "env: variable \"CI\": expected a string value without NUL" },
		{ "{\"argv\":[\"true\"],\"env\":[\"=x\"]}",
		  "env: variable \"\": an empty name" },
		{ "{\"argv\":[\"true\"],\"env\":[\"NOEQUALS\"]}",
		  "env: variable \"NOEQUALS\": no '=' (expected NAME=value)" },
		{ "{\"argv\":[\"true\"],\"env\":[7]}",
		  "env[0]: expected \"NAME=value\"" },
		{ "{\"argv\":[\"true\"],\"envMode\":\"add\"}",
		  "envMode: expected \"replace\" or \"merge\"" },
		{ "{\"argv\":[\"true\"],\"envMode\":true}",
		  "envMode: expected a string" },
	};
	static const char *const methods[] = { "exec", "spawn", "pty.open" };
	json_error_t jerr;
	json_t *m;

	for (size_t i = 0; i < ARRAY_SIZE(cases); i++) {
		for (size_t j = 0; j < ARRAY_SIZE(methods); j++) {
			m = tc_call(&self->t, 1, methods[j],
				    json_loads(cases[i].params, 0, &jerr));
			ASSERT_TRUE(m != NULL);
			EXPECT_EQ(API_E_INVALID_PARAMS, err_code(m));
			EXPECT_STREQ(cases[i].message, err_message(m))
			TH_LOG("%s %s", methods[j], cases[i].params);
			json_decref(m);
		}
	}
}

/*
 * user: by name (a string) and by uid (an integer) the command runs as
 * that user; no such user is the guest's ENOENT with "user" in the
 * data. The agent is this test's: it changes user only as root.
 */
TEST_F(srv, exec_as_user)
{
	struct passwd *pw = getpwnam("nobody");
	char want[64];
	json_t *m, *user;
	char *out;

	if (geteuid())
		SKIP(return, "the agent changes user only as root");
	ASSERT_TRUE(pw != NULL) TH_LOG("no user nobody in /etc/passwd");
	snprintf(want, sizeof(want), "%u nobody\n", (unsigned)pw->pw_uid);
	for (int i = 0; i < 2; i++) {
		user = i ? json_integer(pw->pw_uid) : json_string("nobody");
		m = tc_call(&self->t, 1 + i, "exec",
			    json_pack("{s:[s, s, s], s:o}", "argv", "sh", "-c",
				      "echo $(id -u) $USER", "user", user));
		ASSERT_TRUE(m != NULL);
		ASSERT_TRUE(result(m) != NULL) TH_LOG("%s", err_message(m));
		out = b64_str(result(m), "stdout", NULL);
		EXPECT_STREQ(want, out);
		free(out);
		json_decref(m);
	}
	m = tc_call(&self->t, 3, "exec",
		    json_pack("{s:[s], s:s}", "argv", "true", "user",
			      "kiln-no-such-user"));
	ASSERT_TRUE(m != NULL);
	EXPECT_EQ(API_E_ERRNO, err_code(m));
	EXPECT_STREQ("ENOENT", err_errno(m));
	EXPECT_STREQ("kiln-no-such-user",
		     json_string_value(json_object_get(err_data(m), "user")));
	EXPECT_STREQ("no user \"kiln-no-such-user\" in the guest's "
		     "/etc/passwd",
		     err_message(m));
	json_decref(m);
}

/* A user that is no name or uid is refused before the guest sees it. */
TEST_F(srv, exec_bad_user_refused)
{
	static const struct {
		const char *params, *message;
	} cases[] = {
		{ "{\"argv\":[\"true\"],\"user\":true}",
		  "user: expected a user name or a uid" },
		{ "{\"argv\":[\"true\"],\"user\":-1}",
		  "user: a uid is from 0 to 4294967294" },
		{ "{\"argv\":[\"true\"],\"user\":4294967295}",
		  "user: a uid is from 0 to 4294967294" },
		{ "{\"argv\":[\"true\"],\"user\":\"\"}",
		  "user: expected a user name or a uid (1 to 256 bytes, no "
		  "':' or newline)" },
		{ "{\"argv\":[\"true\"],\"user\":\"a:b\"}",
		  "user: expected a user name or a uid (1 to 256 bytes, no "
		  "':' or newline)" },
	};
	static const char *const methods[] = { "exec", "spawn", "pty.open" };
	json_error_t jerr;
	json_t *m;

	for (size_t i = 0; i < ARRAY_SIZE(cases); i++) {
		for (size_t j = 0; j < ARRAY_SIZE(methods); j++) {
			m = tc_call(&self->t, 1, methods[j],
				    json_loads(cases[i].params, 0, &jerr));
			ASSERT_TRUE(m != NULL);
			EXPECT_EQ(API_E_INVALID_PARAMS, err_code(m));
			EXPECT_STREQ(cases[i].message, err_message(m))
			TH_LOG("%s %s", methods[j], cases[i].params);
			json_decref(m);
		}
	}
}

/*
 * container.create, container.delete and the container fields of exec,
 * spawn and pty.open: every bad one refused before the guest with a
 * message naming it.
 */
TEST_F(srv, container_bad_params_refused)
{
	static const struct {
		const char *method, *params, *message;
	} cases[] = {
		{ "container.create", "{\"root\":\"/r\"}", "id: missing" },
		{ "container.create", "{\"id\":\"a/b\",\"root\":\"/r\"}",
		  "id: expected 1 to 64 characters of A-Z a-z 0-9 _ . - (not "
		  "\".\" or \"..\")" },
		{ "container.create", "{\"id\":\"..\",\"root\":\"/r\"}",
		  "id: expected 1 to 64 characters of A-Z a-z 0-9 _ . - (not "
		  "\".\" or \"..\")" },
		{ "container.create",
		  "{\"id\":\"x0123456789012345678901234567890123456789012345678"
		  "901234567890123\",\"root\":\"/r\"}",
		  "id: expected 1 to 64 characters of A-Z a-z 0-9 _ . - (not "
		  "\".\" or \"..\")" },
		{ "container.create", "{\"id\":\"c1\"}",
		  "root: expected an absolute path" },
		{ "container.create", "{\"id\":\"c1\",\"root\":\"rel\"}",
		  "root: expected an absolute path" },
		{ "container.create",
		  "{\"id\":\"c1\",\"root\":\"/r\",\"rootReadonly\":1}",
		  "rootReadonly: expected true or false" },
		{ "container.create",
		  "{\"id\":\"c1\",\"root\":\"/r\",\"hostname\":\"\"}",
		  "hostname: expected 1 to 64 bytes" },
		{ "container.create",
		  "{\"id\":\"c1\",\"root\":\"/r\",\"mounts\":{}}",
		  "mounts: expected an array of at most 64" },
		{ "container.create",
		  "{\"id\":\"c1\",\"root\":\"/r\",\"mounts\":[{\"destination\":"
		  "\"rel\",\"type\":\"tmpfs\"}]}",
		  "mounts[0].destination: expected an absolute path" },
		{ "container.create",
		  "{\"id\":\"c1\",\"root\":\"/r\",\"mounts\":[{\"destination\":"
		  "\"/x\",\"type\":\"overlay\"}]}",
		  "mounts[0].type: expected \"bind\", \"tmpfs\", \"proc\", "
		  "\"sysfs\", \"devpts\", \"mqueue\" or \"cgroup2\"" },
		{ "container.create",
		  "{\"id\":\"c1\",\"root\":\"/r\",\"mounts\":[{\"destination\":"
		  "\"/x\",\"type\":\"bind\",\"source\":\"rel\"}]}",
		  "mounts[0].source: a bind mount needs an absolute guest "
		  "path" },
		{ "container.create",
		  "{\"id\":\"c1\",\"root\":\"/r\",\"mounts\":[{\"destination\":"
		  "\"/x\",\"type\":\"tmpfs\",\"options\":[\"\"]}]}",
		  "mounts[0].options[0]: expected a non-empty string" },
		{ "container.delete", "{}", "id: missing" },
		{ "container.delete", "{\"id\":\"a b\"}",
		  "id: expected 1 to 64 characters of A-Z a-z 0-9 _ . - (not "
		  "\".\" or \"..\")" },
		{ "exec", "{\"argv\":[\"true\"],\"container\":\"\"}",
		  "container: expected 1 to 64 characters of A-Z a-z 0-9 _ . - "
		  "(not \".\" or \"..\")" },
		{ "exec",
		  "{\"argv\":[\"true\"],\"container\":\"c1\",\"user\":\"root\"}",
		  "user: not with container (give uid and gid: the "
		  "container's /etc/passwd is not read)" },
		{ "exec", "{\"argv\":[\"true\"],\"uid\":0,\"user\":\"root\"}",
		  "user: not with uid, gid or additionalGids" },
		{ "exec", "{\"argv\":[\"true\"],\"gid\":0}",
		  "uid: missing (gid and additionalGids need it)" },
		{ "exec", "{\"argv\":[\"true\"],\"uid\":-1}",
		  "uid: expected an integer from 0 to 4294967294" },
		{ "exec",
		  "{\"argv\":[\"true\"],\"uid\":0,\"additionalGids\":"
		  "[4294967295]}",
		  "additionalGids[0]: a gid is from 0 to 4294967294" },
		{ "exec",
		  "{\"argv\":[\"true\"],\"rlimits\":[{\"type\":"
		  "\"RLIMIT_BOGUS\",\"soft\":1,\"hard\":1}]}",
		  "rlimits[0].type: expected a name such as "
		  "\"RLIMIT_NOFILE\"" },
		{ "exec",
		  "{\"argv\":[\"true\"],\"rlimits\":[{\"type\":"
		  "\"nofile\",\"soft\":1,\"hard\":1}]}",
		  "rlimits[0].type: expected a name such as "
		  "\"RLIMIT_NOFILE\"" },
		{ "exec",
		  "{\"argv\":[\"true\"],\"rlimits\":[{\"type\":"
		  "\"RLIMIT_NOFILE\",\"soft\":2,\"hard\":1}]}",
		  "rlimits[0]: soft and hard are integers (-1: unlimited), "
		  "soft at most hard" },
		{ "exec",
		  "{\"argv\":[\"true\"],\"rlimits\":[{\"type\":"
		  "\"RLIMIT_NOFILE\",\"soft\":-1,\"hard\":1}]}",
		  "rlimits[0]: soft and hard are integers (-1: unlimited), "
		  "soft at most hard" },
		{ "exec", "{\"argv\":[\"true\"],\"noNewPrivileges\":\"yes\"}",
		  "noNewPrivileges: expected true or false" },
	};
	json_error_t jerr;
	json_t *m;

	for (size_t i = 0; i < ARRAY_SIZE(cases); i++) {
		bool proc = !strcmp(cases[i].method, "exec");

		/* The process fields: the same for spawn and pty.open. */
		for (int j = 0; j < (proc ? 3 : 1); j++) {
			const char *method = !j	    ? cases[i].method :
					     j == 1 ? "spawn" :
						      "pty.open";

			m = tc_call(&self->t, 1, method,
				    json_loads(cases[i].params, 0, &jerr));
			ASSERT_TRUE(m != NULL);
			EXPECT_EQ(API_E_INVALID_PARAMS, err_code(m))
			TH_LOG("%s %s", method, cases[i].params);
			EXPECT_STREQ(cases[i].message, err_message(m))
			TH_LOG("%s %s", method, cases[i].params);
			json_decref(m);
		}
	}
}

/*
 * Good ones reach the agent: here the host build, which checks them too
 * and answers ENOTSUP (containers only in a VM) or, for a process in a
 * container that does not exist, ENOENT with "container" in the data;
 * rlimits and noNewPrivileges reach the command.
 */
TEST_F(srv, container_requests_reach_the_agent)
{
	json_error_t jerr;
	char *out;
	json_t *m;

	m = tc_call(&self->t, 1, "container.create",
		    json_loads("{\"id\":\"c1\",\"root\":\"/r\",\"hostname\":"
			       "\"box\",\"mounts\":[{\"destination\":\"/d\","
			       "\"type\":\"bind\",\"source\":\"/srv\","
			       "\"options\":[\"rbind\",\"ro\"]}]}",
			       0, &jerr));
	ASSERT_TRUE(m != NULL);
	EXPECT_EQ(API_E_ERRNO, err_code(m));
	EXPECT_STREQ("ENOTSUP", err_errno(m));
	json_decref(m);
	m = tc_call(&self->t, 2, "container.list", NULL);
	ASSERT_TRUE(m != NULL);
	EXPECT_STREQ("ENOTSUP", err_errno(m));
	json_decref(m);
	m = tc_call(&self->t, 3, "exec",
		    json_pack("{s:[s], s:s}", "argv", "true", "container",
			      "kiln-no-such"));
	ASSERT_TRUE(m != NULL);
	EXPECT_STREQ("ENOENT", err_errno(m));
	EXPECT_STREQ("kiln-no-such", json_string_value(json_object_get(
					     err_data(m), "container")));
	json_decref(m);
	m = tc_call(&self->t, 4, "exec",
		    json_loads("{\"argv\":[\"sh\",\"-c\",\"ulimit -n; grep "
			       "NoNewPrivs /proc/self/status\"],\"rlimits\":"
			       "[{\"type\":\"RLIMIT_NOFILE\",\"soft\":32,"
			       "\"hard\":32}],\"noNewPrivileges\":true}",
			       0, &jerr));
	ASSERT_TRUE(m != NULL);
	ASSERT_TRUE(result(m) != NULL);
	out = b64_str(result(m), "stdout", NULL);
	EXPECT_STREQ("32\nNoNewPrivs:\t1\n", out);
	free(out);
	json_decref(m);
}

static json_t *agent_metrics(struct tc *t, json_int_t id)
{
	json_t *m = tc_call(t, id, "vm.metrics", NULL);
	json_t *agent;

	if (!m)
		return NULL;
	agent = json_incref(json_object_get(result(m), "agent"));
	json_decref(m);
	return agent;
}

/*
 * vm.metrics: the API's agent counters move with a known workload (N
 * execs, one that cannot start, one spawn), and the monitor's members
 * are added.
 */
TEST_F(srv, metrics_count_execs)
{
	const unsigned int n = 5;
	json_t *m, *a0, *a1;

	m = tc_call(&self->t, 1, "vm.metrics", NULL);
	ASSERT_TRUE(m != NULL);
	EXPECT_TRUE(json_is_true(json_object_get(result(m), "test")));
	json_decref(m);
	a0 = agent_metrics(&self->t, 2);
	ASSERT_TRUE(json_is_object(a0));
	for (unsigned int i = 0; i < n; i++) {
		m = tc_call(&self->t, 10 + i, "exec",
			    json_pack("{s:[s]}", "argv", "true"));
		ASSERT_TRUE(m != NULL);
		EXPECT_EQ(0, res_int(m, "exitCode"));
		json_decref(m);
	}
	/* Refused by the guest: a connection, but no process. */
	m = tc_call(&self->t, 20, "exec",
		    json_pack("{s:[s]}", "argv", "/no/such/command"));
	ASSERT_TRUE(m != NULL);
	EXPECT_EQ(API_E_ERRNO, err_code(m));
	json_decref(m);
	a1 = agent_metrics(&self->t, 21);
	ASSERT_TRUE(json_is_object(a1));
	EXPECT_EQ(jint(a0, NULL, "execs") + n, jint(a1, NULL, "execs"));
	EXPECT_EQ(jint(a0, NULL, "exits") + n, jint(a1, NULL, "exits"));
	EXPECT_EQ(jint(a0, NULL, "spawns"), jint(a1, NULL, "spawns"));
	EXPECT_LE(jint(a0, NULL, "connections") + n + 1,
		  jint(a1, NULL, "connections"));
	json_decref(a0);
	json_decref(a1);
}

/*
 * The command (cat of selftests/testutil.h's FIFO) runs until this test
 * ends otherwise: only the timeout can end it.
 */
TEST_F(srv, exec_timeout)
{
	char path[sizeof(self->s.dir) + 16];
	json_t *m;

	ASSERT_EQ(0, forever_fifo(self->s.dir, path, sizeof(path)));
	m = tc_call(&self->t, 1, "exec",
		    json_pack("{s:[s, s], s:i}", "argv", "cat", path,
			      "timeoutMs", 300));
	ASSERT_TRUE(m != NULL);
	EXPECT_EQ(124, res_int(m, "exitCode"));
	EXPECT_TRUE(json_is_true(json_object_get(result(m), "timedOut")));
	json_decref(m);
}

static pid_t read_pid(const char *path)
{
	uint64_t end = ms_now() + WAIT_MS;
	FILE *f;
	int pid;

	while (ms_now() < end) {
		f = fopen(path, "r");
		if (f) {
			int n = fscanf(f, "%d", &pid);

			fclose(f);
			if (n == 1)
				return pid;
		}
		sleep_ms(20);
	}
	return -1;
}

/*
 * Waits until pid is dead, however long the machine takes: one that is
 * never killed hangs the test until its timeout, which fails it.
 */
static bool wait_dead(pid_t pid)
{
	char path[64], st[256];
	FILE *f;

	snprintf(path, sizeof(path), "/proc/%d/stat", pid);
	for (;;) {
		f = fopen(path, "r");
		if (!f)
			return true;
		/* A zombie is dead too. */
		if (fgets(st, sizeof(st), f) && strstr(st, ") Z ")) {
			fclose(f);
			return true;
		}
		fclose(f);
		sleep_ms(20);
	}
}

static char *pid_script(struct server *s, const char *name, char *pidfile,
			size_t len, const char *then)
{
	char *script;

	snprintf(pidfile, len, "%s/%s", s->dir, name);
	if (asprintf(&script, "echo $$ > %s; exec %s", pidfile, then) < 0)
		return NULL;
	return script;
}

TEST_F(srv, cancel)
{
	char pidfile[128], *script;
	json_t *m, *a;
	pid_t pid;
	int i;

	script = pid_script(&self->s, "sleeper", pidfile, sizeof(pidfile),
			    "sleep 30");
	ASSERT_EQ(0, tc_request(&self->t, 7, "exec",
				json_pack("{s:[s, s, s]}", "argv", "sh", "-c",
					  script)));
	free(script);
	pid = read_pid(pidfile);
	ASSERT_LT(0, pid);
	ASSERT_EQ(0, tc_request(&self->t, 8, "cancel",
				json_pack("{s:i}", "id", 7)));
	/* Both answers, in either order. */
	for (i = 0, m = a = NULL; i < 2; i++) {
		json_t *x = tc_recv(&self->t, WAIT_MS, NULL);

		ASSERT_TRUE(x != NULL);
		if (msg_has_id(x, 7))
			a = x;
		else if (msg_has_id(x, 8))
			m = x;
		else
			json_decref(x);
	}
	ASSERT_TRUE(m != NULL);
	ASSERT_TRUE(a != NULL);
	EXPECT_TRUE(json_is_true(json_object_get(result(m), "cancelled")));
	EXPECT_EQ(API_E_ABORTED, err_code(a));
	json_decref(m);
	json_decref(a);
	EXPECT_TRUE(wait_dead(pid));
	/* Nothing to cancel any more. */
	m = tc_call(&self->t, 9, "cancel", json_pack("{s:i}", "id", 7));
	ASSERT_TRUE(m != NULL);
	EXPECT_FALSE(json_is_true(json_object_get(result(m), "cancelled")));
	json_decref(m);
	EXPECT_SERVING(self->s.api_sock);
}

TEST_F_TIMEOUT(srv, concurrent_execs, 60)
{
	enum { N = 50 };
	bool seen[N] = { false };
	char cmd[64], *out;
	json_t *m;
	int i, got = 0;

	for (i = 0; i < N; i++) {
		snprintf(cmd, sizeof(cmd), "sleep 0.2; echo %d", i);
		ASSERT_EQ(0, tc_request(&self->t, 100 + i, "exec",
					json_pack("{s:[s, s, s]}", "argv", "sh",
						  "-c", cmd)));
	}
	while (got < N) {
		json_int_t id;

		m = tc_recv(&self->t, 30000, NULL);
		ASSERT_TRUE(m != NULL) TH_LOG("%d of %d answers", got, N);
		id = json_integer_value(json_object_get(m, "id")) - 100;
		ASSERT_TRUE(id >= 0 && id < N);
		ASSERT_FALSE(seen[id]);
		ASSERT_TRUE(result(m) != NULL)
		TH_LOG("exec %lld: error %lld", (long long)id, err_code(m));
		out = b64_str(result(m), "stdout", NULL);
		snprintf(cmd, sizeof(cmd), "%lld\n", (long long)id);
		EXPECT_STREQ(cmd, out);
		free(out);
		seen[id] = true;
		got++;
		json_decref(m);
	}
}

TEST_F(srv, spawn_streams)
{
	char out[4096];
	json_int_t stream;
	json_t *m, *ex;

	m = tc_call(&self->t, 1, "spawn",
		    json_pack("{s:[s, s, s]}", "argv", "sh", "-c",
			      "tr a-z A-Z; echo done"));
	ASSERT_TRUE(m != NULL);
	stream = res_int(m, "stream");
	ASSERT_LT(0, stream);
	EXPECT_LT(0, res_int(m, "pid"));
	json_decref(m);
	m = tc_call(&self->t, 2, "spawn.write",
		    json_pack("{s:I, s:o}", "stream", stream, "data",
			      b64_json("abc\n", 4)));
	ASSERT_TRUE(m != NULL);
	EXPECT_TRUE(result(m) != NULL);
	json_decref(m);
	ASSERT_EQ(0, tc_request(&self->t, 3, "spawn.closeStdin",
				json_pack("{s:I}", "stream", stream)));
	ex = collect_stream(&self->t, stream, out, sizeof(out), NULL);
	ASSERT_TRUE(ex != NULL);
	EXPECT_STREQ("ABC\ndone\n", out);
	EXPECT_EQ(0, json_integer_value(json_object_get(ex, "exitCode")));
	json_decref(ex);

	/* kill(signal) */
	m = tc_call(&self->t, 4, "spawn",
		    json_pack("{s:[s, s]}", "argv", "sleep", "30"));
	ASSERT_TRUE(m != NULL);
	stream = res_int(m, "stream");
	json_decref(m);
	ASSERT_EQ(0, tc_request(&self->t, 5, "spawn.kill",
				json_pack("{s:I, s:s}", "stream", stream,
					  "signal", "TERM")));
	ex = collect_stream(&self->t, stream, out, sizeof(out), NULL);
	ASSERT_TRUE(ex != NULL);
	EXPECT_EQ(SIGTERM, json_integer_value(json_object_get(ex, "signal")));
	EXPECT_EQ(128 + SIGTERM,
		  json_integer_value(json_object_get(ex, "exitCode")));
	json_decref(ex);
	/* The stream is gone. */
	m = tc_call(&self->t, 6, "spawn.kill",
		    json_pack("{s:I}", "stream", stream));
	ASSERT_TRUE(m != NULL);
	EXPECT_EQ(API_E_INVALID_PARAMS, err_code(m));
	json_decref(m);
}

/*
 * A stream's stdout and stderr bytes, counted and kept (up to cap each)
 * until its stream.exit, whose params are returned (NULL: timed out).
 */
static json_t *collect_both(struct tc *t, json_int_t stream, uint8_t *out,
			    size_t *out_len, uint8_t *err, size_t *err_len,
			    size_t cap)
{
	uint64_t end = ms_now() + t->wait_ms;
	const char *method;
	json_t *m, *p;
	size_t n, *len;
	uint8_t *to;
	char *d;

	*out_len = *err_len = 0;
	while (ms_now() < end) {
		m = tc_recv(t, end - ms_now(), NULL);
		if (!m)
			return NULL;
		method = json_string_value(json_object_get(m, "method"));
		p = json_object_get(m, "params");
		if (!method || json_integer_value(json_object_get(
				       p, "stream")) != stream) {
			json_decref(m);
			continue;
		}
		if (!strcmp(method, "stream.exit")) {
			json_incref(p);
			json_decref(m);
			return p;
		}
		to = strcmp(method, "stream.stderr") ? out : err;
		len = to == out ? out_len : err_len;
		d = b64_str(p, "data", &n);
		if (d && *len + n <= cap)
			memcpy(to + *len, d, n);
		*len += d ? n : 0;
		free(d);
		json_decref(m);
	}
	return NULL;
}

/* Every byte value, and more than one notification's worth, exactly. */
TEST_F(srv, spawn_streams_bytes_exactly)
{
	static const uint8_t want[] = { 'a', 0xff, 0x01, 0x00, '"', '\\', 'b' };
	size_t cap = 1 << 20, out_len, err_len;
	uint8_t *out = malloc(cap), *err = malloc(cap);
	json_int_t stream;
	json_t *m, *ex;
	size_t i;

	ASSERT_TRUE(out && err);
	m = tc_call(&self->t, 1, "spawn",
		    json_pack("{s:[s, s, s]}", "argv", "sh", "-c",
			      "printf 'a\\377\\001\\000\\042\\134b'; "
			      "printf 'to stderr' >&2; "
			      "head -c 300000 /dev/zero"));
	ASSERT_TRUE(m != NULL);
	stream = res_int(m, "stream");
	json_decref(m);
	ex = collect_both(&self->t, stream, out, &out_len, err, &err_len, cap);
	ASSERT_TRUE(ex != NULL);
	EXPECT_EQ(0, json_integer_value(json_object_get(ex, "exitCode")));
	json_decref(ex);
	ASSERT_EQ(sizeof(want) + 300000, out_len);
	EXPECT_EQ(0, memcmp(want, out, sizeof(want)));
	for (i = sizeof(want); i < out_len && !out[i]; i++)
		;
	EXPECT_EQ(out_len, i);
	ASSERT_EQ(9, err_len);
	EXPECT_EQ(0, memcmp("to stderr", err, 9));
	free(out);
	free(err);
}

TEST_F(srv, pty_resize)
{
	char out[4096];
	json_int_t stream;
	json_t *m, *ex;

	m = tc_call(&self->t, 1, "pty.open",
		    json_pack("{s:[s, s, s], s:i, s:i}", "argv", "sh", "-c",
			      "stty size; read x; stty size; echo got-$x",
			      "rows", 30, "cols", 100));
	ASSERT_TRUE(m != NULL);
	ASSERT_TRUE(result(m) != NULL) TH_LOG("error %lld", err_code(m));
	stream = res_int(m, "stream");
	json_decref(m);
	/* Resize once the first size is out. */
	ex = collect_stream(&self->t, stream, out, sizeof(out), "30 100");
	ASSERT_TRUE(ex == NULL);
	EXPECT_TRUE(strstr(out, "30 100") != NULL) TH_LOG("output: %s", out);
	m = tc_call(&self->t, 2, "pty.resize",
		    json_pack("{s:I, s:i, s:i}", "stream", stream, "rows", 40,
			      "cols", 120));
	ASSERT_TRUE(m != NULL);
	EXPECT_TRUE(result(m) != NULL);
	json_decref(m);
	m = tc_call(&self->t, 3, "pty.write",
		    json_pack("{s:I, s:o}", "stream", stream, "data",
			      b64_json("hi\n", 3)));
	ASSERT_TRUE(m != NULL);
	json_decref(m);
	ex = collect_stream(&self->t, stream, out, sizeof(out), NULL);
	ASSERT_TRUE(ex != NULL);
	EXPECT_TRUE(strstr(out, "40 120") != NULL) TH_LOG("output: %s", out);
	EXPECT_TRUE(strstr(out, "got-hi") != NULL) TH_LOG("output: %s", out);
	EXPECT_EQ(0, json_integer_value(json_object_get(ex, "exitCode")));
	json_decref(ex);
}

TEST_F(srv, fs_ops)
{
	char a[160], f[192], g[192], *data;
	json_t *m, *e;
	size_t n;

	snprintf(a, sizeof(a), "%s/a", self->s.dir);
	snprintf(f, sizeof(f), "%s/a/b/c/f", self->s.dir);
	snprintf(g, sizeof(g), "%s/a/b/c/g", self->s.dir);

	m = tc_call(&self->t, 1, "fs.writeFile",
		    json_pack("{s:s, s:o, s:b, s:s}", "path", f, "data",
			      b64_json("hello", 5), "createParents", 1, "mode",
			      "0640"));
	ASSERT_TRUE(m != NULL);
	ASSERT_TRUE(result(m) != NULL) TH_LOG("error %lld", err_code(m));
	EXPECT_EQ(5, res_int(m, "size"));
	json_decref(m);

	m = fs_call(&self->t, 2, "fs.stat", f);
	ASSERT_TRUE(m != NULL);
	EXPECT_STREQ("file",
		     json_string_value(json_object_get(result(m), "type")));
	EXPECT_EQ(5, res_int(m, "size"));
	EXPECT_EQ(0640, res_int(m, "mode") & 07777);
	json_decref(m);

	m = tc_call(&self->t, 3, "fs.readFile",
		    json_pack("{s:s, s:i, s:i}", "path", f, "offset", 1,
			      "length", 3));
	ASSERT_TRUE(m != NULL);
	data = b64_str(result(m), "data", &n);
	EXPECT_STREQ("ell", data);
	free(data);
	json_decref(m);

	m = tc_call(&self->t, 4, "fs.rename",
		    json_pack("{s:s, s:s}", "from", f, "to", g));
	ASSERT_TRUE(m != NULL);
	EXPECT_TRUE(result(m) != NULL);
	json_decref(m);
	m = fs_call(&self->t, 5, "fs.stat", f);
	ASSERT_TRUE(m != NULL);
	EXPECT_EQ(API_E_ERRNO, err_code(m));
	EXPECT_STREQ("ENOENT", err_errno(m));
	json_decref(m);

	/* A name that is not UTF-8, and a symlink. */
	snprintf(f, sizeof(f), "%s/a/b/c/bad\xff", self->s.dir);
	m = tc_call(&self->t, 6, "fs.writeFile",
		    json_pack("{s:o, s:s}", "pathBytes", b64_json(f, strlen(f)),
			      "data", ""));
	ASSERT_TRUE(m != NULL);
	ASSERT_TRUE(result(m) != NULL) TH_LOG("error %lld", err_code(m));
	json_decref(m);
	snprintf(f, sizeof(f), "%s/a/b/c/link", self->s.dir);
	ASSERT_EQ(0, symlink("g", f));

	snprintf(f, sizeof(f), "%s/a/b/c", self->s.dir);
	m = fs_call(&self->t, 7, "fs.readDir", f);
	ASSERT_TRUE(m != NULL);
	ASSERT_EQ(3, json_array_size(json_object_get(result(m), "entries")));
	json_array_foreach(json_object_get(result(m), "entries"), n, e)
	{
		const char *name =
			json_string_value(json_object_get(e, "name"));

		if (!strcmp(name, "g")) {
			EXPECT_EQ(5, json_integer_value(
					     json_object_get(e, "size")));
		} else if (!strcmp(name, "link")) {
			EXPECT_STREQ(
				"symlink",
				json_string_value(json_object_get(e, "type")));
			EXPECT_STREQ("g", json_string_value(json_object_get(
						  e, "linkTarget")));
		} else {
			data = b64_str(e, "nameBytes", NULL);
			EXPECT_STREQ("bad\xff", data);
			EXPECT_STREQ("bad\xef\xbf\xbd", name);
			free(data);
		}
	}
	json_decref(m);

	/* mkdir -p, remove -r, remove -f of nothing. */
	snprintf(f, sizeof(f), "%s/x/y/z", self->s.dir);
	m = tc_call(&self->t, 8, "fs.mkdir",
		    json_pack("{s:s, s:b}", "path", f, "recursive", 1));
	ASSERT_TRUE(m != NULL);
	EXPECT_TRUE(result(m) != NULL);
	json_decref(m);
	m = fs_call(&self->t, 9, "fs.mkdir", f);
	ASSERT_TRUE(m != NULL);
	EXPECT_STREQ("EEXIST", err_errno(m));
	json_decref(m);
	m = fs_call(&self->t, 10, "fs.remove", a);
	ASSERT_TRUE(m != NULL);
	EXPECT_EQ(API_E_ERRNO, err_code(m)); /* not empty */
	json_decref(m);
	m = tc_call(&self->t, 11, "fs.remove",
		    json_pack("{s:s, s:b}", "path", a, "recursive", 1));
	ASSERT_TRUE(m != NULL);
	EXPECT_TRUE(result(m) != NULL);
	json_decref(m);
	EXPECT_NE(0, access(a, F_OK));
	m = tc_call(&self->t, 12, "fs.remove",
		    json_pack("{s:s, s:b}", "path", a, "force", 1));
	ASSERT_TRUE(m != NULL);
	EXPECT_TRUE(result(m) != NULL);
	json_decref(m);
}

TEST_F(srv, upload_errors_and_cancel)
{
	char path[160];
	json_int_t stream;
	json_t *m;

	/* No parent, no createParents: the guest's ENOENT reaches fs.close. */
	snprintf(path, sizeof(path), "%s/no/such/dir/f", self->s.dir);
	m = tc_call(&self->t, 1, "fs.writeFile",
		    json_pack("{s:s, s:b}", "path", path, "stream", 1));
	ASSERT_TRUE(m != NULL);
	stream = res_int(m, "stream");
	ASSERT_LT(0, stream);
	json_decref(m);
	m = tc_call(&self->t, 2, "fs.write",
		    json_pack("{s:I, s:o}", "stream", stream, "data",
			      b64_json("abc", 3)));
	ASSERT_TRUE(m != NULL);
	if (!result(m))
		EXPECT_STREQ("ENOENT", err_errno(m));
	json_decref(m);
	m = tc_call(&self->t, 3, "fs.close",
		    json_pack("{s:I}", "stream", stream));
	ASSERT_TRUE(m != NULL);
	EXPECT_EQ(API_E_ERRNO, err_code(m));
	EXPECT_STREQ("ENOENT", err_errno(m));
	json_decref(m);
	m = tc_call(&self->t, 4, "fs.close",
		    json_pack("{s:I}", "stream", stream));
	ASSERT_TRUE(m != NULL);
	EXPECT_EQ(API_E_INVALID_PARAMS, err_code(m)); /* gone */
	json_decref(m);

	/* An upload cancelled half way. */
	snprintf(path, sizeof(path), "%s/half", self->s.dir);
	m = tc_call(&self->t, 5, "fs.writeFile",
		    json_pack("{s:s, s:b}", "path", path, "stream", 1));
	ASSERT_TRUE(m != NULL);
	stream = res_int(m, "stream");
	json_decref(m);
	m = tc_call(&self->t, 6, "fs.write",
		    json_pack("{s:I, s:o}", "stream", stream, "data",
			      b64_json("abc", 3)));
	ASSERT_TRUE(m != NULL);
	EXPECT_TRUE(result(m) != NULL);
	json_decref(m);
	m = tc_call(&self->t, 7, "cancel",
		    json_pack("{s:I}", "stream", stream));
	ASSERT_TRUE(m != NULL);
	EXPECT_TRUE(json_is_true(json_object_get(result(m), "cancelled")));
	json_decref(m);
	m = tc_call(&self->t, 8, "fs.write",
		    json_pack("{s:I, s:s}", "stream", stream, "data", ""));
	ASSERT_TRUE(m != NULL);
	EXPECT_EQ(API_E_INVALID_PARAMS, err_code(m));
	json_decref(m);
	m = tc_call(&self->t, 9, "vm.status", NULL);
	ASSERT_TRUE(m != NULL);
	EXPECT_EQ(0, res_int(m, "streams"));
	json_decref(m);
}

/* ---- fs.write with a raw body (client.c, "Bodies") ----------------------- */

/* fs.writeFile {path, stream}: the upload's stream id. */
static json_int_t upload_open(struct __test_metadata *_metadata, struct tc *t,
			      json_int_t id, const char *path)
{
	json_t *m = tc_call(t, id, "fs.writeFile",
			    json_pack("{s:s, s:b}", "path", path, "stream", 1));
	json_int_t stream;

	ASSERT_TRUE(m != NULL);
	stream = res_int(m, "stream");
	json_decref(m);
	ASSERT_LT(0, stream);
	return stream;
}

/* fs.write {stream, size: n} and its n bytes, appended to *buf. */
static void body_write(struct __test_metadata *_metadata, char **buf,
		       size_t *len, json_int_t id, json_int_t stream,
		       const void *p, size_t n)
{
	ASSERT_EQ(0, tc_frame_body(buf, len, id, "fs.write",
				   json_pack("{s:I, s:I}", "stream", stream,
					     "size", (json_int_t)n),
				   p, n));
}

/* The file at path holds exactly want (n bytes). */
static void expect_file(struct __test_metadata *_metadata, const char *path,
			const void *want, size_t n)
{
	uint8_t *got = malloc(n + 1);
	FILE *f = fopen(path, "rb");
	size_t r = 0;

	ASSERT_TRUE(got != NULL);
	ASSERT_TRUE(f != NULL) TH_LOG("%s: %s", path, strerror(errno));
	r = fread(got, 1, n + 1, f);
	fclose(f);
	EXPECT_EQ(n, r);
	EXPECT_EQ(0, memcmp(got, want, r < n ? r : n));
	free(got);
}

/*
 * Bodies that hold newlines and a whole request line of their own, one
 * split across two reads, two followed at once by the next request in
 * the same send: every byte lands in order, none is read as a request.
 */
TEST_F(srv, write_body_framing)
{
	static const char req_like[] =
		"{\"jsonrpc\":\"2.0\",\"id\":77,\"method\":\"vm.shutdown\"}\n";
	size_t half = 100000, big = 200003, len = 0, total, i;
	uint8_t *want = malloc(big + 2 * sizeof(req_like));
	char path[160], *buf = NULL;
	json_int_t stream;
	json_t *m;

	ASSERT_TRUE(want != NULL);
	for (i = 0; i < big; i++)
		want[i] = (uint8_t)(i * 31 + (i >> 8)); /* '\n's too */
	memcpy(want + big, req_like, sizeof(req_like) - 1);
	total = big + sizeof(req_like) - 1;
	snprintf(path, sizeof(path), "%s/body", self->s.dir);
	stream = upload_open(_metadata, &self->t, 1, path);

	/* One body in two sends, the second after the server read the first. */
	body_write(_metadata, &buf, &len, 2, stream, want, big);
	ASSERT_EQ(0, tc_send_raw(&self->t, buf, len - (big - half)));
	sleep_ms(100);
	ASSERT_EQ(0,
		  tc_send_raw(&self->t, buf + len - (big - half), big - half));
	m = tc_wait(&self->t, 2);
	ASSERT_TRUE(m != NULL);
	EXPECT_TRUE(result(m) != NULL) TH_LOG("error %lld", err_code(m));
	json_decref(m);

	/* A body that is a request line, an empty one, then fs.close: one send. */
	len = 0;
	body_write(_metadata, &buf, &len, 3, stream, req_like,
		   sizeof(req_like) - 1);
	body_write(_metadata, &buf, &len, 4, stream, NULL, 0);
	ASSERT_EQ(0,
		  tc_frame_body(&buf, &len, 5, "fs.close",
				json_pack("{s:I}", "stream", stream), NULL, 0));
	ASSERT_EQ(0, tc_send_raw(&self->t, buf, len));
	for (i = 3; i <= 5; i++) {
		m = tc_recv(&self->t, WAIT_MS, NULL);
		ASSERT_TRUE(m != NULL);
		EXPECT_TRUE(msg_has_id(m, i)) TH_LOG("answers out of order");
		EXPECT_TRUE(result(m) != NULL)
		TH_LOG("error %lld", err_code(m));
		if (i == 5)
			EXPECT_EQ(total, res_int(m, "size"));
		json_decref(m);
	}
	expect_file(_metadata, path, want, total);
	EXPECT_EQ(0, atomic_load(&self->s.shutdowns));

	/*
	 * A body whose request is refused (no such stream; data and size
	 * together) is still taken: the request line after it is read.
	 */
	len = 0;
	body_write(_metadata, &buf, &len, 6, 99999, req_like,
		   sizeof(req_like) - 1);
	ASSERT_EQ(0, tc_frame_body(&buf, &len, 7, "vm.status", NULL, NULL, 0));
	ASSERT_EQ(0, tc_send_raw(&self->t, buf, len));
	m = tc_recv(&self->t, WAIT_MS, NULL);
	ASSERT_TRUE(m != NULL);
	EXPECT_TRUE(msg_has_id(m, 6));
	EXPECT_EQ(API_E_INVALID_PARAMS, err_code(m));
	json_decref(m);
	m = tc_recv(&self->t, WAIT_MS, NULL);
	ASSERT_TRUE(m != NULL);
	EXPECT_TRUE(msg_has_id(m, 7));
	EXPECT_TRUE(result(m) != NULL);
	json_decref(m);
	stream = upload_open(_metadata, &self->t, 8, path);
	len = 0;
	ASSERT_EQ(0, tc_frame_body(&buf, &len, 9, "fs.write",
				   json_pack("{s:I, s:I, s:s}", "stream",
					     stream, "size", 3, "data", "eHl6"),
				   "abc", 3));
	ASSERT_EQ(0,
		  tc_frame_body(&buf, &len, 10, "fs.close",
				json_pack("{s:I}", "stream", stream), NULL, 0));
	ASSERT_EQ(0, tc_send_raw(&self->t, buf, len));
	m = tc_wait(&self->t, 9);
	ASSERT_TRUE(m != NULL);
	EXPECT_EQ(API_E_INVALID_PARAMS, err_code(m));
	json_decref(m);
	m = tc_wait(&self->t, 10);
	ASSERT_TRUE(m != NULL);
	EXPECT_EQ(0, res_int(m, "size")) TH_LOG("error %lld", err_code(m));
	json_decref(m);

	/* size on a method without a body: nothing after the line is taken. */
	len = 0;
	ASSERT_EQ(0, tc_frame_body(&buf, &len, 11, "vm.status",
				   json_pack("{s:i}", "size", 5), NULL, 0));
	ASSERT_EQ(0, tc_frame_body(&buf, &len, 12, "vm.status", NULL, NULL, 0));
	ASSERT_EQ(0, tc_send_raw(&self->t, buf, len));
	for (i = 11; i <= 12; i++) {
		m = tc_recv(&self->t, WAIT_MS, NULL);
		ASSERT_TRUE(m != NULL);
		EXPECT_TRUE(msg_has_id(m, i));
		EXPECT_TRUE(result(m) != NULL);
		json_decref(m);
	}
	free(buf);
	free(want);
}

/* A size past API_MAX_BODY, or no size at all: refused, naming it, closed. */
TEST_F(srv, write_body_bad_size_closes)
{
	static const char *const sizes[] = { "1048577", "-1", "\"12\"" };
	char line[256], path[160];
	json_int_t stream;
	bool eof = false;
	json_t *m;
	size_t i;

	snprintf(path, sizeof(path), "%s/big", self->s.dir);
	for (i = 0; i < ARRAY_SIZE(sizes); i++) {
		if (i) {
			tc_close(&self->t);
			ASSERT_EQ(0, tc_open(&self->t, self->s.api_sock));
		}
		stream = upload_open(_metadata, &self->t, 1, path);
		snprintf(
			line, sizeof(line),
			"{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"fs.write\","
			"\"params\":{\"stream\":%lld,\"size\":%s}}\nxyz",
			(long long)stream, sizes[i]);
		ASSERT_EQ(0, tc_send_raw(&self->t, line, strlen(line)));
		m = tc_recv(&self->t, WAIT_MS, NULL);
		ASSERT_TRUE(m != NULL);
		EXPECT_TRUE(msg_has_id(m, 2));
		if (!i) {
			const char *msg = json_string_value(json_object_get(
				json_object_get(m, "error"), "message"));

			EXPECT_EQ(API_E_LIMIT, err_code(m));
			EXPECT_EQ(API_MAX_BODY,
				  json_integer_value(json_object_get(
					  err_data(m), "limit")));
			ASSERT_TRUE(msg != NULL);
			EXPECT_TRUE(strstr(msg, "1048577") &&
				    strstr(msg, "1048576"))
			TH_LOG("%s", msg);
		} else {
			EXPECT_EQ(API_E_INVALID_PARAMS, err_code(m));
		}
		json_decref(m);
		m = tc_recv(&self->t, WAIT_MS, &eof);
		EXPECT_TRUE(m == NULL);
		EXPECT_TRUE(eof) TH_LOG("size %s: still open", sizes[i]);
		json_decref(m);
	}
	EXPECT_SERVING(self->s.api_sock);
}

/* vm.status's streams from a connection of its own, once it is want. */
static bool streams_become(const char *sock, json_int_t want)
{
	uint64_t end = ms_now() + WAIT_MS;
	json_int_t n = -1;
	struct tc t;
	json_t *m;

	while (n != want && ms_now() < end) {
		if (tc_open(&t, sock))
			return false;
		m = tc_call(&t, 1, "vm.status", NULL);
		n = m ? res_int(m, "streams") : -1;
		json_decref(m);
		tc_close(&t);
		if (n != want)
			sleep_ms(20);
	}
	return n == want;
}

/*
 * The connection ends inside a body: half-closed, the write is answered
 * with the error (what came, what was announced) and the upload is gone;
 * closed, the upload is gone too. The vmm waits for neither.
 */
TEST_F(srv, write_body_cut_by_the_connection)
{
	static const uint8_t part[] = "only these";
	char path[160], *buf = NULL;
	struct stat st;
	json_int_t stream;
	size_t len = 0;
	bool eof = false;
	json_t *m;

	snprintf(path, sizeof(path), "%s/cut", self->s.dir);
	stream = upload_open(_metadata, &self->t, 1, path);
	body_write(_metadata, &buf, &len, 2, stream, "whole", 5);
	ASSERT_EQ(0, tc_frame_body(&buf, &len, 3, "fs.write",
				   json_pack("{s:I, s:i}", "stream", stream,
					     "size", 1000),
				   part, sizeof(part) - 1));
	ASSERT_EQ(0, tc_send_raw(&self->t, buf, len));
	m = tc_wait(&self->t, 2);
	ASSERT_TRUE(m != NULL);
	EXPECT_TRUE(result(m) != NULL);
	json_decref(m);
	EXPECT_TRUE(streams_become(self->s.api_sock, 1));
	ASSERT_EQ(0, shutdown(self->t.fd, SHUT_WR));
	m = tc_wait(&self->t, 3);
	ASSERT_TRUE(m != NULL) TH_LOG("no answer to the cut write");
	EXPECT_EQ(API_E_INVALID_REQUEST, err_code(m));
	EXPECT_EQ(sizeof(part) - 1,
		  json_integer_value(json_object_get(err_data(m), "received")));
	EXPECT_EQ(1000,
		  json_integer_value(json_object_get(err_data(m), "size")));
	json_decref(m);
	m = tc_recv(&self->t, WAIT_MS, &eof);
	EXPECT_TRUE(m == NULL);
	EXPECT_TRUE(eof) TH_LOG("the connection should close");
	json_decref(m);
	EXPECT_TRUE(streams_become(self->s.api_sock, 0));
	/* What was cut off never reached the file. */
	ASSERT_EQ(0, stat(path, &st));
	EXPECT_GE(5, st.st_size);

	/* Closed outright, right after the line. */
	tc_close(&self->t);
	ASSERT_EQ(0, tc_open(&self->t, self->s.api_sock));
	stream = upload_open(_metadata, &self->t, 4, path);
	len = 0;
	ASSERT_EQ(0, tc_frame_body(&buf, &len, 5, "fs.write",
				   json_pack("{s:I, s:i}", "stream", stream,
					     "size", 64),
				   NULL, 0));
	ASSERT_EQ(0, tc_send_raw(&self->t, buf, len));
	tc_close(&self->t);
	EXPECT_TRUE(streams_become(self->s.api_sock, 0));
	free(buf);
	EXPECT_SERVING(self->s.api_sock);
}

/* The content of the big file: byte at pos, random-access. */
static uint8_t big_byte(uint64_t pos)
{
	uint64_t z = (pos >> 3) + 0x9e3779b97f4a7c15ULL;

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
	z ^= z >> 31;
	return z >> ((pos & 7) * 8);
}

TEST_F_TIMEOUT(srv, big_file_bounded_memory, 120)
{
	const uint64_t size = 96ULL << 20, chunk = 48 * 1024;
	long hwm0 = vm_hwm_kib(), hwm1;
	uint64_t sent = 0, got = 0, off;
	uint8_t *buf = malloc(chunk);
	char path[128], *data;
	int in_flight = 0;
	json_int_t stream;
	json_t *m, *p;
	size_t n, i;

	ASSERT_TRUE(buf != NULL);
	snprintf(path, sizeof(path), "%s/big", self->s.dir);
	m = tc_call(&self->t, 1, "fs.writeFile",
		    json_pack("{s:s, s:b}", "path", path, "stream", 1));
	ASSERT_TRUE(m != NULL);
	stream = res_int(m, "stream");
	ASSERT_LT(0, stream);
	json_decref(m);
	/* Four writes ahead of their answers, as vmmctl cp does. */
	while (sent < size || in_flight) {
		while (sent < size && in_flight < 4) {
			for (i = 0; i < chunk; i++)
				buf[i] = big_byte(sent + i);
			ASSERT_EQ(0,
				  tc_request(&self->t, 2, "fs.write",
					     json_pack("{s:I, s:o}", "stream",
						       stream, "data",
						       b64_json(buf, chunk))));
			sent += chunk;
			in_flight++;
		}
		m = tc_recv(&self->t, WAIT_MS, NULL);
		ASSERT_TRUE(m != NULL);
		ASSERT_TRUE(result(m) != NULL)
		TH_LOG("error %lld", err_code(m));
		in_flight--;
		json_decref(m);
	}
	m = tc_call(&self->t, 3, "fs.close",
		    json_pack("{s:I}", "stream", stream));
	ASSERT_TRUE(m != NULL);
	ASSERT_EQ(size, res_int(m, "size")) TH_LOG("error %lld", err_code(m));
	json_decref(m);

	ASSERT_EQ(0, tc_request(&self->t, 4, "fs.readFile",
				json_pack("{s:s, s:b}", "path", path, "stream",
					  1)));
	for (;;) {
		m = tc_recv(&self->t, WAIT_MS, NULL);
		ASSERT_TRUE(m != NULL);
		if (msg_has_id(m, 4))
			break;
		p = json_object_get(m, "params");
		ASSERT_STREQ("fs.chunk",
			     json_string_value(json_object_get(m, "method")));
		ASSERT_EQ(4, json_integer_value(json_object_get(p, "id")));
		off = json_integer_value(json_object_get(p, "offset"));
		ASSERT_EQ(got, off);
		data = b64_str(p, "data", &n);
		ASSERT_TRUE(data != NULL);
		for (i = 0; i < n; i++)
			if ((uint8_t)data[i] != big_byte(off + i))
				break;
		ASSERT_EQ(n, i)
		TH_LOG("content differs at %llu",
		       (unsigned long long)(off + i));
		free(data);
		got += n;
		json_decref(m);
	}
	ASSERT_EQ(size, res_int(m, "size")) TH_LOG("error %lld", err_code(m));
	ASSERT_EQ(size, got);
	json_decref(m);
	/* Without stream, a file this big is refused, not buffered. */
	m = fs_call(&self->t, 5, "fs.readFile", path);
	ASSERT_TRUE(m != NULL);
	EXPECT_EQ(API_E_LIMIT, err_code(m));
	json_decref(m);
	hwm1 = vm_hwm_kib();
	if (!testutil__asan()) {
		EXPECT_GT(32 * 1024, hwm1 - hwm0)
		TH_LOG("peak memory grew by %ld KiB moving a %llu MiB file",
		       hwm1 - hwm0, (unsigned long long)(size >> 20));
	}
	free(buf);
}

/*
 * fs.readFile {stream, raw}: each fs.chunk line says its size, no data,
 * and exactly that many raw bytes follow it (some of them a JSON line,
 * '\n's among them); the answer comes after the last. raw that is no
 * boolean, or without stream, is refused naming it.
 */
TEST_F(srv, readfile_raw_chunks)
{
	static const char req_like[] =
		"{\"jsonrpc\":\"2.0\",\"id\":77,\"method\":\"vm.shutdown\"}\n";
	size_t size = 200003, got = 0, n, i, chunks = 0;
	uint8_t *want = malloc(size), *back = malloc(size);
	char path[160];
	json_t *m, *p;
	FILE *f;

	ASSERT_TRUE(want != NULL && back != NULL);
	for (i = 0; i < size; i++)
		want[i] = (uint8_t)(i * 31 + (i >> 8));
	memcpy(want, req_like, sizeof(req_like) - 1);
	memcpy(want + 65536, req_like, sizeof(req_like) - 1);
	snprintf(path, sizeof(path), "%s/rawread", self->s.dir);
	f = fopen(path, "w");
	ASSERT_TRUE(f != NULL);
	ASSERT_EQ(size, fwrite(want, 1, size, f));
	ASSERT_EQ(0, fclose(f));

	ASSERT_EQ(0, tc_request(&self->t, 1, "fs.readFile",
				json_pack("{s:s, s:b, s:b}", "path", path,
					  "stream", 1, "raw", 1)));
	for (;;) {
		m = tc_recv(&self->t, WAIT_MS, NULL);
		ASSERT_TRUE(m != NULL) TH_LOG("no line at byte %zu", got);
		if (msg_has_id(m, 1))
			break;
		p = json_object_get(m, "params");
		ASSERT_STREQ("fs.chunk",
			     json_string_value(json_object_get(m, "method")));
		ASSERT_EQ(1, json_integer_value(json_object_get(p, "id")));
		ASSERT_EQ(got,
			  json_integer_value(json_object_get(p, "offset")));
		ASSERT_TRUE(json_object_get(p, "data") == NULL);
		ASSERT_TRUE(json_is_integer(json_object_get(p, "size")));
		n = json_integer_value(json_object_get(p, "size"));
		ASSERT_GE(size - got, n);
		ASSERT_EQ(0, tc_recv_body(&self->t, WAIT_MS, back + got, n));
		got += n;
		chunks++;
		json_decref(m);
	}
	ASSERT_TRUE(result(m) != NULL) TH_LOG("error %lld", err_code(m));
	EXPECT_EQ(size, res_int(m, "size"));
	json_decref(m);
	ASSERT_EQ(size, got);
	EXPECT_LT(1, chunks);
	EXPECT_EQ(0, memcmp(want, back, size));
	EXPECT_EQ(0, atomic_load(&self->s.shutdowns));

	/* The next answer is a line again. */
	m = tc_call(&self->t, 2, "vm.status", NULL);
	ASSERT_TRUE(m != NULL);
	EXPECT_TRUE(result(m) != NULL);
	json_decref(m);

	m = tc_call(&self->t, 3, "fs.readFile",
		    json_pack("{s:s, s:b, s:s}", "path", path, "stream", 1,
			      "raw", "yes"));
	ASSERT_TRUE(m != NULL);
	EXPECT_EQ(API_E_INVALID_PARAMS, err_code(m));
	EXPECT_TRUE(strstr(json_string_value(json_object_get(
				   json_object_get(m, "error"), "message")),
			   "raw") != NULL);
	json_decref(m);
	m = tc_call(&self->t, 4, "fs.readFile",
		    json_pack("{s:s, s:b}", "path", path, "raw", 1));
	ASSERT_TRUE(m != NULL);
	EXPECT_EQ(API_E_INVALID_PARAMS, err_code(m));
	json_decref(m);
	free(want);
	free(back);
}

TEST_F(srv, client_disconnect_mid_stream)
{
	char pidfile[128], pidfile2[128], *script;
	json_t *m;
	pid_t pid, pid2;
	struct tc b;

	/* A chatty process whose client never reads, then goes. */
	script = pid_script(&self->s, "yes", pidfile, sizeof(pidfile),
			    "yes kiln");
	m = tc_call(&self->t, 1, "spawn",
		    json_pack("{s:[s, s, s]}", "argv", "sh", "-c", script));
	free(script);
	ASSERT_TRUE(m != NULL);
	json_decref(m);
	script = pid_script(&self->s, "sleep", pidfile2, sizeof(pidfile2),
			    "sleep 30");
	ASSERT_EQ(0, tc_request(&self->t, 2, "exec",
				json_pack("{s:[s, s, s]}", "argv", "sh", "-c",
					  script)));
	free(script);
	pid = read_pid(pidfile);
	pid2 = read_pid(pidfile2);
	ASSERT_LT(0, pid);
	ASSERT_LT(0, pid2);
	sleep_ms(500); /* let the unread output pile up to the bound */
	/* Another client is served meanwhile. */
	ASSERT_EQ(0, tc_open(&b, self->s.api_sock));
	m = tc_call(&b, 1, "vm.status", NULL);
	ASSERT_TRUE(m != NULL);
	EXPECT_EQ(1, res_int(m, "streams"));
	json_decref(m);
	tc_close(&b);
	tc_close(&self->t);
	EXPECT_TRUE(wait_dead(pid));
	EXPECT_TRUE(wait_dead(pid2));
	EXPECT_SERVING(self->s.api_sock);
}

TEST_F(srv, facts_and_shutdown)
{
	json_t *m, *facts;

	m = tc_call(&self->t, 1, "vm.facts", NULL);
	ASSERT_TRUE(m != NULL);
	facts = json_object_get(result(m), "facts");
	ASSERT_LT(1, json_array_size(facts));
	EXPECT_STREQ("config", json_string_value(json_object_get(
				       json_array_get(facts, 0), "source")));
	EXPECT_STREQ("guest", json_string_value(json_object_get(
				      json_array_get(facts, 1), "source")));
	json_decref(m);
	m = tc_call(&self->t, 2, "facts", NULL);
	ASSERT_TRUE(m != NULL);
	EXPECT_LT(0, json_array_size(json_object_get(result(m), "facts")));
	json_decref(m);

	m = tc_call(&self->t, 3, "vm.shutdown", NULL);
	ASSERT_TRUE(m != NULL);
	EXPECT_TRUE(result(m) != NULL);
	json_decref(m);
	/* It comes once the answer is out: waited for, however long. */
	while (!atomic_load(&self->s.shutdowns))
		sleep_ms(10);
	EXPECT_EQ(1, atomic_load(&self->s.shutdowns));
}

/* n reached within 10 s. */
static bool wait_count(atomic_int *v, int n)
{
	uint64_t end = ms_now() + 10000;

	while (atomic_load(v) < n && ms_now() < end)
		sleep_ms(10);
	return atomic_load(v) >= n;
}

/*
 * api__shutdown (--die-with-parent): what vm.shutdown does, asked by the
 * monitor from another thread: p.shutdown, then POWEROFF to the agent
 * (the host agent refuses it: p.shutdown_failed); once, also with a
 * vm.shutdown after it.
 */
TEST_F(srv, monitor_asks_shutdown)
{
	json_t *m;

	api__shutdown(self->s.api);
	EXPECT_TRUE(wait_count(&self->s.shutdowns, 1));
	EXPECT_TRUE(wait_count(&self->s.shutdown_failures, 1));
	api__shutdown(self->s.api);
	m = tc_call(&self->t, 1, "vm.shutdown", NULL);
	ASSERT_TRUE(m != NULL);
	EXPECT_TRUE(result(m) != NULL);
	json_decref(m);
	/* The API still serves; nothing more was asked of the monitor. */
	m = tc_call(&self->t, 2, "vm.status", NULL);
	ASSERT_TRUE(m != NULL);
	json_decref(m);
	sleep_ms(200);
	EXPECT_EQ(1, atomic_load(&self->s.shutdowns));
	EXPECT_EQ(1, atomic_load(&self->s.shutdown_failures));
	api__shutdown(NULL); /* nothing */
}

static pid_t parent_of(pid_t pid)
{
	char path[64];
	int ppid = -1;
	FILE *f;

	snprintf(path, sizeof(path), "/proc/%d/stat", pid);
	f = fopen(path, "r");
	if (!f)
		return -1;
	if (fscanf(f, "%*d (%*[^)]) %*c %d", &ppid) != 1)
		ppid = -1;
	fclose(f);
	return ppid;
}

TEST_F(srv, agent_dies_mid_request)
{
	char pidfile[128], *script;
	pid_t pid, ppid;
	json_t *m;

	script = pid_script(&self->s, "victim", pidfile, sizeof(pidfile),
			    "sleep 30");
	ASSERT_EQ(0, tc_request(&self->t, 1, "exec",
				json_pack("{s:[s, s, s]}", "argv", "sh", "-c",
					  script)));
	free(script);
	pid = read_pid(pidfile);
	ASSERT_LT(0, pid);
	/* The agent's connection process is the command's parent. */
	ppid = parent_of(pid);
	ASSERT_LT(1, ppid);
	kill(ppid, SIGKILL);
	m = tc_wait(&self->t, 1);
	ASSERT_TRUE(m != NULL);
	EXPECT_EQ(API_E_AGENT, err_code(m));
	json_decref(m);
	kill(pid, SIGKILL);
	/* The whole agent gone: requests fail cleanly, the API serves on. */
	stop_agent(&self->s);
	m = tc_call(&self->t, 2, "fs.stat", json_pack("{s:s}", "path", "/"));
	ASSERT_TRUE(m != NULL);
	EXPECT_EQ(API_E_AGENT, err_code(m));
	json_decref(m);
	m = tc_call(&self->t, 3, "vm.facts", NULL);
	ASSERT_TRUE(m != NULL);
	EXPECT_EQ(1, json_array_size(json_object_get(result(m), "facts")));
	EXPECT_TRUE(json_object_get(result(m), "guestError") != NULL);
	json_decref(m);
	/* And the agent back: served again. */
	ASSERT_EQ(0, start_agent(&self->s));
	EXPECT_SERVING(self->s.api_sock);
}

static void write_text(const char *path, const char *text)
{
	FILE *f = fopen(path, "w");

	if (f) {
		fputs(text, f);
		fclose(f);
	}
}

/* vmmctl policy SOCK FILE: net.setPolicy with the file's object. */
static const char *state(json_t *m)
{
	return json_string_value(json_object_get(result(m), "state"));
}

TEST_F(srv, pause_resume_snapshot)
{
	json_t *m;

	m = tc_call(&self->t, 1, "vm.pause", NULL);
	ASSERT_NE(NULL, result(m));
	json_decref(m);
	m = tc_call(&self->t, 2, "vm.status", NULL);
	EXPECT_STREQ("paused", state(m));
	json_decref(m);
	/* Twice: a clear error, with its errno. */
	m = tc_call(&self->t, 3, "vm.pause", NULL);
	EXPECT_EQ(API_E_VM, err_code(m));
	EXPECT_STREQ("EALREADY", err_errno(m));
	EXPECT_STREQ("vm.pause: the VM is paused already", err_message(m));
	json_decref(m);
	m = tc_call(&self->t, 4, "vm.resume", NULL);
	ASSERT_NE(NULL, result(m));
	json_decref(m);
	m = tc_call(&self->t, 5, "vm.status", NULL);
	EXPECT_STREQ("running", state(m));
	json_decref(m);
	m = tc_call(&self->t, 6, "vm.resume", NULL);
	EXPECT_EQ(API_E_VM, err_code(m));
	EXPECT_STREQ("vm.resume: the VM is not paused", err_message(m));
	json_decref(m);

	/* vm.snapshot's params. */
	m = tc_call(&self->t, 7, "vm.snapshot", NULL);
	EXPECT_EQ(API_E_INVALID_PARAMS, err_code(m));
	json_decref(m);
	m = tc_call(&self->t, 8, "vm.snapshot",
		    json_pack("{s:s}", "dir", "relative/snap"));
	EXPECT_EQ(API_E_INVALID_PARAMS, err_code(m));
	json_decref(m);
	m = tc_call(&self->t, 9, "vm.snapshot",
		    json_pack("{s:s, s:s}", "dir", "/s", "resume", "yes"));
	EXPECT_EQ(API_E_INVALID_PARAMS, err_code(m));
	json_decref(m);
	EXPECT_STREQ("", self->s.snap_dir);

	m = tc_call(&self->t, 10, "vm.snapshot",
		    json_pack("{s:s, s:b}", "dir", "/tmp/s1", "resume", true));
	EXPECT_STREQ("/tmp/s1",
		     json_string_value(json_object_get(result(m), "dir")));
	EXPECT_TRUE(json_is_true(json_object_get(result(m), "resumed")));
	json_decref(m);
	EXPECT_STREQ("/tmp/s1", self->s.snap_dir);
	EXPECT_TRUE(self->s.snap_resume);
	/* Without resume it stays paused. */
	m = tc_call(&self->t, 11, "vm.snapshot",
		    json_pack("{s:s}", "dir", "/tmp/s2"));
	EXPECT_TRUE(json_is_false(json_object_get(result(m), "resumed")));
	json_decref(m);
	EXPECT_FALSE(self->s.snap_resume);
	m = tc_call(&self->t, 12, "vm.status", NULL);
	EXPECT_STREQ("paused", state(m));
	json_decref(m);
	/* A device without a save hook: named, with EOPNOTSUPP. */
	m = tc_call(&self->t, 13, "vm.snapshot",
		    json_pack("{s:s}", "dir", "/tmp/nohook"));
	EXPECT_EQ(API_E_VM, err_code(m));
	EXPECT_STREQ("EOPNOTSUPP", err_errno(m));
	EXPECT_NE(NULL, strstr(err_message(m), "virtio-fs0"));
	json_decref(m);
}

TEST_F(srv, vmmctl_pause_resume_snapshot)
{
	const char *ctl = vmmctl_path();
	struct spawn_result *r = malloc(sizeof(*r));
	char want[PATH_MAX + 16];

	ASSERT_TRUE(r != NULL);
	ASSERT_EQ(0, access(ctl, X_OK)) TH_LOG("%s is not built", ctl);
	{
		const char *argv[] = { ctl, "pause", self->s.api_sock, NULL };

		ASSERT_EQ(0, spawn__run(argv, NULL, r));
		EXPECT_EQ(0, r->status) TH_LOG("%s", r->err);
		EXPECT_TRUE(self->s.paused);
		ASSERT_EQ(0, spawn__run(argv, NULL, r));
		EXPECT_EQ(125, r->status);
		EXPECT_NE(NULL, strstr(r->err, "paused already"))
		TH_LOG("%s", r->err);
	}
	{
		const char *argv[] = { ctl, "resume", self->s.api_sock, NULL };

		ASSERT_EQ(0, spawn__run(argv, NULL, r));
		EXPECT_EQ(0, r->status) TH_LOG("%s", r->err);
		EXPECT_FALSE(self->s.paused);
	}
	{
		/* A relative DIR is made absolute against vmmctl's cwd. */
		const char *argv[] = { ctl,	   "snapshot",
				       "--resume", self->s.api_sock,
				       "snapdir",  NULL };

		ASSERT_EQ(0, spawn__run(argv, NULL, r));
		EXPECT_EQ(0, r->status) TH_LOG("%s", r->err);
		ASSERT_NE(NULL, getcwd(want, PATH_MAX));
		strcat(want, "/snapdir");
		EXPECT_STREQ(want, self->s.snap_dir);
		EXPECT_TRUE(self->s.snap_resume);
	}
	{
		const char *argv[] = { ctl, "snapshot", self->s.api_sock,
				       NULL };

		ASSERT_EQ(0, spawn__run(argv, NULL, r));
		EXPECT_EQ(2, r->status);
	}
	free(r);
}

TEST_F(srv, vmmctl_policy)
{
	const char *ctl = vmmctl_path();
	struct spawn_result *r = malloc(sizeof(*r));
	char file[128];

	ASSERT_TRUE(r != NULL);
	ASSERT_EQ(0, access(ctl, X_OK)) TH_LOG("%s is not built", ctl);
	snprintf(file, sizeof(file), "%s/policy.json", self->s.dir);
	write_text(file, "{\"tcp\": [{\"to\": \"private\"}]}\n");
	{
		const char *argv[] = { ctl, "policy", self->s.api_sock, file,
				       NULL };

		ASSERT_EQ(0, spawn__run(argv, NULL, r));
		EXPECT_EQ(0, r->status) TH_LOG("%s", r->err);
	}
	EXPECT_EQ(1, net_policy__nr_rules(self->s.policy, IPPROTO_TCP));
	write_text(file, "{\"tcp\": [{\"to\": \"private\", \"ports\": [0]}]}");
	{
		const char *argv[] = { ctl, "policy", self->s.api_sock, file,
				       NULL };

		ASSERT_EQ(0, spawn__run(argv, NULL, r));
		EXPECT_EQ(125, r->status);
		EXPECT_TRUE(strstr(r->err, "policy.tcp[0].ports") != NULL)
		TH_LOG("%s", r->err);
	}
	EXPECT_EQ(1, net_policy__nr_rules(self->s.policy, IPPROTO_TCP));
	write_text(file, "{\"tcp\": [");
	{
		const char *argv[] = { ctl, "policy", self->s.api_sock, file,
				       NULL };

		ASSERT_EQ(0, spawn__run(argv, NULL, r));
		EXPECT_EQ(2, r->status);
	}
	free(r);
}

TEST_F(srv, vmmctl_smoke)
{
	const char *ctl = vmmctl_path();
	char dir[160], file[192], back[192];
	struct spawn_result *r = malloc(sizeof(*r));

	ASSERT_TRUE(r != NULL);
	ASSERT_EQ(0, access(ctl, X_OK)) TH_LOG("%s is not built", ctl);
	{
		const char *argv[] = { ctl,  "exec", self->s.api_sock,	 "--",
				       "sh", "-c",   "echo out; exit 3", NULL };

		ASSERT_EQ(0, spawn__run(argv, NULL, r));
		EXPECT_EQ(3, r->status);
		EXPECT_STREQ("out\n", r->out);
	}
	{
		const char *argv[] = {
			ctl,  "exec",  "--timeout-ms", "200", self->s.api_sock,
			"--", "sleep", "20",	       NULL
		};

		ASSERT_EQ(0, spawn__run(argv, NULL, r));
		EXPECT_EQ(124, r->status);
	}
	/* --env adds (envMode "merge"): the agent's own variables stay. */
	{
		const char *argv[] = {
			ctl,
			"exec",
			"--env",
			"KILN_X=1",
			"--env",
			"KILN_Y=a b",
			self->s.api_sock,
			"--",
			"sh",
			"-c",
			"echo \"$KILN_X|$KILN_Y|$KILN_AGENT_TEST_MARK\"",
			NULL
		};

		ASSERT_EQ(0, spawn__run(argv, NULL, r));
		EXPECT_EQ(0, r->status) TH_LOG("%s", r->err);
		EXPECT_STREQ("1|a b|inherited\n", r->out);
	}
	/* A missing command is 127; a missing --cwd has its own 200. */
	{
		const char *argv[] = {
			ctl, "exec", self->s.api_sock, "--", "/no/such/command",
			NULL
		};

		ASSERT_EQ(0, spawn__run(argv, NULL, r));
		EXPECT_EQ(127, r->status);
	}
	{
		const char *argv[] = {
			ctl,  "exec", "--cwd", "/no/such/dir", self->s.api_sock,
			"--", "true", NULL
		};

		ASSERT_EQ(0, spawn__run(argv, NULL, r));
		EXPECT_EQ(200, r->status);
		EXPECT_EQ(1, spawn__count_lines(r->err)) TH_LOG("%s", r->err);
		EXPECT_TRUE(strstr(r->err, "/no/such/dir") != NULL);
	}
	/* No such --user: 217, one line naming the user. */
	{
		const char *argv[] = { ctl,
				       "exec",
				       "--user",
				       "kiln-no-such-user",
				       self->s.api_sock,
				       "--",
				       "true",
				       NULL };

		ASSERT_EQ(0, spawn__run(argv, NULL, r));
		EXPECT_EQ(217, r->status);
		EXPECT_EQ(1, spawn__count_lines(r->err)) TH_LOG("%s", r->err);
		EXPECT_TRUE(strstr(r->err, "\"kiln-no-such-user\"") != NULL);
	}
	{
		const char *argv[] = { ctl,
				       "shell",
				       "--user",
				       "kiln-no-such-user",
				       self->s.api_sock,
				       "--",
				       "true",
				       NULL };

		ASSERT_EQ(0, spawn__run(argv, NULL, r));
		EXPECT_EQ(217, r->status) TH_LOG("%s", r->err);
	}
	/* --user 0 (root's uid, what this test may run as): HOME is root's. */
	if (!geteuid()) {
		const char *argv[] = { ctl,
				       "exec",
				       "--user",
				       "0",
				       self->s.api_sock,
				       "--",
				       "sh",
				       "-c",
				       "echo $(id -u) $USER",
				       NULL };

		ASSERT_EQ(0, spawn__run(argv, NULL, r));
		EXPECT_EQ(0, r->status) TH_LOG("%s", r->err);
		EXPECT_STREQ("0 root\n", r->out);
	}
	snprintf(dir, sizeof(dir), "%s/d", self->s.dir);
	ASSERT_EQ(0, mkdir(dir, 0755));
	snprintf(file, sizeof(file), "%s/one", dir);
	ASSERT_EQ(0, mkdir(file, 0755));
	snprintf(file, sizeof(file), "%s/two", dir);
	{
		const char *argv[] = {
			ctl, "fs", "mkdir", "-p", self->s.api_sock, file, NULL
		};

		ASSERT_EQ(0, spawn__run(argv, NULL, r));
		EXPECT_EQ(0, r->status) TH_LOG("%s", r->err);
	}
	{
		const char *argv[] = { ctl, "fs", "ls", self->s.api_sock,
				       dir, NULL };

		ASSERT_EQ(0, spawn__run(argv, NULL, r));
		EXPECT_EQ(0, r->status);
		EXPECT_STREQ("one\ntwo\n", r->out);
	}
	{
		const char *argv[] = {
			ctl, "fs", "ls", self->s.api_sock, "/no/such/dir", NULL
		};

		ASSERT_EQ(0, spawn__run(argv, NULL, r));
		EXPECT_EQ(1, r->status);
		EXPECT_TRUE(strstr(r->err, "ENOENT") != NULL);
	}
	/* cp both ways: this test binary is a file of a fair size. */
	snprintf(file, sizeof(file), ":%s/copy", dir);
	snprintf(back, sizeof(back), "%s/back", self->s.dir);
	{
		const char *argv[] = { ctl,  "cp", self->s.api_sock,
				       NULL, file, NULL };
		char exe[PATH_MAX];
		ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);

		ASSERT_LT(0, n);
		exe[n] = '\0';
		argv[3] = exe;
		ASSERT_EQ(0, spawn__run(argv, NULL, r));
		EXPECT_EQ(0, r->status) TH_LOG("%s", r->err);
		argv[3] = file;
		argv[4] = back;
		ASSERT_EQ(0, spawn__run(argv, NULL, r));
		EXPECT_EQ(0, r->status) TH_LOG("%s", r->err);
		{
			const char *cmp[] = { "cmp", exe, back, NULL };

			ASSERT_EQ(0, spawn__run(cmp, NULL, r));
			EXPECT_EQ(0, r->status) TH_LOG("%s", r->out);
		}
	}
	free(r);
}

/*
 * A stand-in for the vsock device's host socket (Firecracker's
 * convention): "CONNECT <port>\n" answered by "OK <hostport>\n", then
 * the bytes go to and from the agent; another port is refused by closing.
 */
static void pump_bytes(int a, int b)
{
	struct pollfd p[2] = { { .fd = a, .events = POLLIN },
			       { .fd = b, .events = POLLIN } };
	char buf[65536];
	ssize_t n;
	int i;

	for (;;) {
		if (poll(p, 2, -1) < 0)
			return;
		for (i = 0; i < 2; i++) {
			if (!p[i].revents)
				continue;
			n = read(p[i].fd, buf, sizeof(buf));
			if (n <= 0)
				return;
			if (write(p[!i].fd, buf, n) != n)
				return;
		}
	}
}

static void __attribute__((noreturn))
vsock_proxy(const char *path, const char *agent)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	int lfd = socket(AF_UNIX, SOCK_STREAM, 0), fd, up;
	char line[64];
	size_t n;

	snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", path);
	if (bind(lfd, (struct sockaddr *)&sa, sizeof(sa)) || listen(lfd, 64))
		_exit(1);
	signal(SIGCHLD, SIG_IGN);
	signal(SIGPIPE, SIG_IGN);
	for (;;) {
		fd = accept(lfd, NULL, NULL);
		if (fd < 0)
			continue;
		if (fork()) {
			close(fd);
			continue;
		}
		for (n = 0; n < sizeof(line) - 1; n++)
			if (read(fd, line + n, 1) != 1 || line[n] == '\n')
				break;
		line[n] = '\0';
		if (strcmp(line, "CONNECT 1024"))
			_exit(0);
		up = unix_connect(agent, false);
		if (up < 0)
			_exit(0);
		if (write(fd, "OK 1073741824\n", 14) != 14)
			_exit(0);
		pump_bytes(fd, up);
		_exit(0);
	}
}

FIXTURE(vsock)
{
	struct server s;
	struct tc t;
	char proxy_sock[96];
	pid_t proxy;
};

static int open_proxy(void *opaque)
{
	return unix_connect(opaque, true);
}

static int vsock_api(FIXTURE_DATA(vsock) * self, unsigned int port,
		     unsigned int agent_timeout_ms)
{
	struct api_params p = {
		.socket_path = self->s.api_sock,
		.open_agent = open_proxy,
		.opaque = self->proxy_sock,
		.vsock_port = port,
		/*
		 * 0, the default (10 s): the forked proxy and agent may be slow
		 * to answer on a loaded machine (500 ms failed ci23 once with
		 * -32003).
		 */
		.agent_timeout_ms = agent_timeout_ms,
	};
	int ret = api__create(&self->s.api, &p);

	if (!ret)
		ret = api__start(self->s.api, NULL);
	return ret ?: tc_open(&self->t, self->s.api_sock);
}

FIXTURE_SETUP(vsock)
{
	const char *bin = agent_host_path();
	uint64_t end = ms_now() + 5000;
	int fd;

	self->t.fd = -1;
	ASSERT_EQ(0, access(bin, X_OK))
	TH_LOG("%s is not built (make selftests builds it)", bin);
	ASSERT_EQ(0, server_dir(&self->s));
	ASSERT_EQ(0, start_agent(&self->s));
	snprintf(self->proxy_sock, sizeof(self->proxy_sock), "%s/vsock.sock",
		 self->s.dir);
	self->proxy = fork();
	ASSERT_LE(0, self->proxy);
	if (!self->proxy)
		vsock_proxy(self->proxy_sock, self->s.agent_sock);
	while ((fd = unix_connect(self->proxy_sock, false)) < 0 &&
	       ms_now() < end)
		sleep_ms(10);
	ASSERT_LE(0, fd);
	close(fd);
}

FIXTURE_TEARDOWN(vsock)
{
	tc_close(&self->t);
	if (self->proxy > 0) {
		kill(self->proxy, SIGKILL);
		waitpid(self->proxy, NULL, 0);
	}
	server_stop(&self->s);
}

TEST_F(vsock, connect_handshake)
{
	json_t *m;
	char *out;

	ASSERT_EQ(0, vsock_api(self, KILN_AGENT_PORT, 0));
	m = tc_call(&self->t, 1, "exec",
		    json_pack("{s:[s, s, s]}", "argv", "sh", "-c",
			      "echo through-vsock"));
	ASSERT_TRUE(m != NULL);
	ASSERT_TRUE(result(m) != NULL)
	TH_LOG("error %lld: %s", err_code(m), err_message(m));
	out = b64_str(result(m), "stdout", NULL);
	EXPECT_STREQ("through-vsock\n", out);
	free(out);
	json_decref(m);
}

TEST_F(vsock, connect_refused)
{
	json_t *m;

	/*
	 * Nobody listens there: the API retries the CONNECT (the agent may
	 * still be starting) until its deadline, then answers. A deadline
	 * well inside the client's wait (TC_WAIT_MS): equal ones raced and
	 * failed CI under load.
	 */
	ASSERT_EQ(0, vsock_api(self, 1025, TC_WAIT_MS / 4));
	m = tc_call(&self->t, 1, "exec", json_pack("{s:[s]}", "argv", "true"));
	ASSERT_TRUE(m != NULL);
	EXPECT_EQ(API_E_AGENT, err_code(m));
	json_decref(m);
}

/* Without the monitor's callback (no set_policy): no such method. */
TEST_F(vsock, net_set_policy_not_offered)
{
	json_t *m;

	ASSERT_EQ(0, vsock_api(self, KILN_AGENT_PORT, 0));
	m = set_policy(&self->t, 1, "{}");
	ASSERT_TRUE(m != NULL);
	EXPECT_EQ(API_E_NO_METHOD, err_code(m));
	json_decref(m);
}

/* ---- fake agents, for what the real one does not do ---------------------- */

enum fake_mode {
	FAKE_DIE_AFTER_REQUEST, /* HELLO, read the request, close */
	FAKE_GARBAGE,		/* a frame header announcing 4 GiB */
	FAKE_SILENT,		/* accept, say nothing */
	FAKE_OLD_VERSION,	/* HELLO with version 99 */
	/* Logging each request into agent.log (fake_reseed_conn): */
	FAKE_RESEED,		 /* takes RESEED */
	FAKE_RESEED_REFUSE_ONCE, /* refuses the first RESEED (EPERM) */
	FAKE_NO_RESEED,		 /* an agent from before RESEED */
	FAKE_NET_RENEW,		 /* takes RESEED with a network */
	/* ...and taking MOUNTS_DETACH and MOUNTS_ATTACH too: */
	FAKE_MOUNTS,		   /* takes both */
	FAKE_MOUNTS_REFUSE_ATTACH, /* ERROR EIO to MOUNTS_ATTACH */
};

static void fake_hello_features(int fd, uint64_t version, uint64_t features)
{
	struct kiln_frame f;
	struct kiln_buf b;

	kiln_buf__init(&b);
	if (kiln_tlv__put_u64(&b, KILN_T_VERSION, version) ||
	    kiln_tlv__put_u64(&b, KILN_T_FEATURES, features))
		_exit(1);
	kiln_frame__pack(&f, KILN_MSG_HELLO, 0, b.len);
	/* A peer gone already (run_fake's check): the next one comes. */
	if (write(fd, &f, sizeof(f)) != sizeof(f) ||
	    write(fd, b.data, b.len) != (ssize_t)b.len)
		(void)0;
	kiln_buf__free(&b);
}

static void fake_hello(int fd, uint64_t version)
{
	fake_hello_features(fd, version, 0);
}

static bool fake_read_all(int fd, void *p, size_t len)
{
	ssize_t n;

	while (len) {
		n = read(fd, p, len);
		if (n <= 0)
			return false;
		p = (uint8_t *)p + n;
		len -= n;
	}
	return true;
}

static void fake_send(int fd, uint16_t type, struct kiln_buf *b)
{
	struct kiln_frame f;

	kiln_frame__pack(&f, type, 0, b->len);
	if (write(fd, &f, sizeof(f)) != sizeof(f) ||
	    (b->len && write(fd, b->data, b->len) != (ssize_t)b->len))
		return; /* the API went away: its test says so */
	kiln_buf__reset(b);
}

/*
 * One connection of the logging fakes: HELLO, the request, one line in
 * log ("50 <the seed in hex>" for RESEED, the type otherwise), and then
 * the answer: RESULT or ERROR EPERM to RESEED, RESULT or ERROR EIO to
 * MOUNTS_*, a process that exits 0 to PROC_START. Then it reads until the
 * API closes.
 */
static void fake_reseed_conn(int fd, enum fake_mode mode, int log,
			     unsigned int *reseeds)
{
	static uint8_t payload[KILN_FRAME_MAX];
	char line[16 + 2 * KILN_RESEED_MAX + 32 + KILN_NET_MAX];
	const uint8_t *seed, *mac;
	const char *net;
	size_t net_len;
	struct kiln_frame f;
	uint16_t type, flags;
	struct kiln_buf b;
	size_t seed_len;
	uint32_t len;
	int n;

	fake_hello_features(
		fd, KILN_AGENT_VERSION,
		(mode == FAKE_NO_RESEED ? 0 : KILN_FEATURE_RESEED) |
			(mode == FAKE_NET_RENEW ? KILN_FEATURE_NET_RENEW : 0) |
			(mode >= FAKE_MOUNTS ? KILN_FEATURE_MOUNTS : 0));
	if (!fake_read_all(fd, &f, sizeof(f)) ||
	    kiln_frame__unpack(&f, &type, &flags, &len) ||
	    !fake_read_all(fd, payload, len))
		return; /* an API call put off until the reseed: no request */
	kiln_buf__init(&b);
	n = snprintf(line, sizeof(line), "%u", type);
	if (type == KILN_MSG_RESEED) {
		if (kiln_reseed__decode(payload, len, &seed, &seed_len))
			seed_len = 0;
		n += snprintf(line + n, sizeof(line) - n, " ");
		for (size_t i = 0; i < seed_len; i++)
			n += snprintf(line + n, sizeof(line) - n, "%02x",
				      seed[i]);
		if (!kiln_reseed__decode_net(payload, len, &mac, &net,
					     &net_len))
			n += snprintf(line + n, sizeof(line) - n,
				      " net %02x:%02x:%02x:%02x:%02x:%02x %.*s",
				      mac[0], mac[1], mac[2], mac[3], mac[4],
				      mac[5], (int)net_len, net);
	}
	/* Logged before the answer: whoever reads after it finds the line. */
	line[n++] = '\n';
	if (write(log, line, n) != n)
		_exit(1);
	if (type == KILN_MSG_RESEED) {
		if (mode == FAKE_RESEED_REFUSE_ONCE && !(*reseeds)++) {
			kiln_tlv__put_u64(&b, KILN_T_ERRNO, EPERM);
			kiln_tlv__put_str(&b, KILN_T_ERRNAME, "EPERM");
			fake_send(fd, KILN_MSG_ERROR, &b);
		} else {
			fake_send(fd, KILN_MSG_RESULT, &b);
		}
	} else if (type == KILN_MSG_MOUNTS_ATTACH &&
		   mode == FAKE_MOUNTS_REFUSE_ATTACH) {
		kiln_tlv__put_u64(&b, KILN_T_ERRNO, EIO);
		kiln_tlv__put_str(&b, KILN_T_ERRNAME, "EIO");
		fake_send(fd, KILN_MSG_ERROR, &b);
	} else if (type == KILN_MSG_MOUNTS_DETACH ||
		   type == KILN_MSG_MOUNTS_ATTACH) {
		fake_send(fd, KILN_MSG_RESULT, &b);
	} else if (type == KILN_MSG_PROC_START) {
		kiln_tlv__put_u64(&b, KILN_T_PID, 4242);
		fake_send(fd, KILN_MSG_PROC_STARTED, &b);
		kiln_tlv__put_u64(&b, KILN_T_EXIT_CODE, 0);
		fake_send(fd, KILN_MSG_PROC_EXIT, &b);
	}
	kiln_buf__free(&b);
	shutdown(fd, SHUT_WR);
	while (read(fd, payload, sizeof(payload)) > 0)
		;
}

static void __attribute__((noreturn))
fake_agent(const char *path, enum fake_mode mode)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	int lfd = socket(AF_UNIX, SOCK_STREAM, 0), fd;
	static const uint8_t junk[8] = { 0xff, 0xff, 0xff, 0xff, 1, 0, 0, 0 };
	char buf[4096], log_path[128];
	unsigned int reseeds = 0;
	int log = -1;

	snprintf(log_path, sizeof(log_path), "%.*s/agent.log",
		 (int)(strrchr(path, '/') - path), path);
	if (mode >= FAKE_RESEED) {
		log = open(log_path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC,
			   0600);
		if (log < 0)
			_exit(1);
	}
	snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", path);
	if (bind(lfd, (struct sockaddr *)&sa, sizeof(sa)) || listen(lfd, 64))
		_exit(1);
	signal(SIGPIPE, SIG_IGN);
	for (;;) {
		fd = accept(lfd, NULL, NULL);
		if (fd < 0)
			continue;
		switch (mode) {
		case FAKE_DIE_AFTER_REQUEST:
			fake_hello(fd, KILN_AGENT_VERSION);
			if (read(fd, buf, sizeof(buf)) < 0)
				(void)0;
			close(fd);
			break;
		case FAKE_GARBAGE:
			if (write(fd, junk, sizeof(junk)) < 0)
				(void)0;
			close(fd);
			break;
		case FAKE_SILENT:
			/* Kept open: the API gives up on its own. */
			break;
		case FAKE_OLD_VERSION:
			fake_hello(fd, 99);
			close(fd);
			break;
		case FAKE_RESEED:
		case FAKE_RESEED_REFUSE_ONCE:
		case FAKE_NO_RESEED:
		case FAKE_NET_RENEW:
		case FAKE_MOUNTS:
		case FAKE_MOUNTS_REFUSE_ATTACH:
			fake_reseed_conn(fd, mode, log, &reseeds);
			close(fd);
			break;
		}
	}
}

FIXTURE(fake)
{
	struct server s;
	struct tc t;
};

FIXTURE_SETUP(fake)
{
	self->t.fd = -1;
	ASSERT_EQ(0, server_dir(&self->s));
	ASSERT_EQ(0, server_start_api(&self->s, 500));
	ASSERT_EQ(0, tc_open(&self->t, self->s.api_sock));
}

FIXTURE_TEARDOWN(fake)
{
	tc_close(&self->t);
	server_stop(&self->s);
}

static void run_fake(struct server *s, enum fake_mode mode)
{
	uint64_t end = ms_now() + 5000;
	int fd;

	s->agent = fork();
	if (s->agent == 0)
		fake_agent(s->agent_sock, mode);
	while (ms_now() < end) {
		fd = unix_connect(s->agent_sock, false);
		if (fd >= 0) {
			close(fd);
			return;
		}
		sleep_ms(10);
	}
}

/*
 * Each request fails with API_E_AGENT; the API answers the next one.
 * The fixture's agent timeout is 500 ms: with an agent absent or silent,
 * six requests that waited the default 10 s each instead would take a
 * minute, twice the test's timeout, so an API that ignores
 * agent_timeout_ms fails on it whatever the machine's speed, with no
 * bound on time here.
 */
static void expect_agent_errors(struct __test_metadata *_metadata, struct tc *t)
{
	json_t *m;

	for (int round = 0; round < 2; round++) {
		m = tc_call(t, 1, "exec", json_pack("{s:[s]}", "argv", "true"));
		ASSERT_TRUE(m != NULL);
		EXPECT_EQ(API_E_AGENT, err_code(m));
		json_decref(m);
		m = tc_call(t, 2, "fs.readDir",
			    json_pack("{s:s}", "path", "/"));
		ASSERT_TRUE(m != NULL);
		EXPECT_EQ(API_E_AGENT, err_code(m));
		json_decref(m);
		m = tc_call(t, 3, "spawn",
			    json_pack("{s:[s]}", "argv", "true"));
		ASSERT_TRUE(m != NULL);
		EXPECT_EQ(API_E_AGENT, err_code(m));
		json_decref(m);
	}
	m = tc_call(t, 4, "vm.status", NULL);
	ASSERT_TRUE(m != NULL);
	EXPECT_STREQ("running",
		     json_string_value(json_object_get(result(m), "state")));
	EXPECT_EQ(0, res_int(m, "requests"));
	EXPECT_EQ(0, res_int(m, "streams"));
	json_decref(m);
}

TEST_F(fake, agent_absent)
{
	expect_agent_errors(_metadata, &self->t);
}

TEST_F(fake, agent_dies_after_request)
{
	run_fake(&self->s, FAKE_DIE_AFTER_REQUEST);
	expect_agent_errors(_metadata, &self->t);
}

TEST_F(fake, agent_sends_garbage)
{
	run_fake(&self->s, FAKE_GARBAGE);
	expect_agent_errors(_metadata, &self->t);
}

TEST_F(fake, agent_silent)
{
	run_fake(&self->s, FAKE_SILENT);
	expect_agent_errors(_metadata, &self->t);
}

TEST_F(fake, agent_wrong_version)
{
	run_fake(&self->s, FAKE_OLD_VERSION);
	expect_agent_errors(_metadata, &self->t);
}

/*
 * An agent without KILN_FEATURE_ENV_MERGE (one from an older initramfs)
 * never gets a merge request, which it would take as a replace: the
 * call fails naming the feature; without envMode it runs.
 */
TEST_F(fake, env_merge_needs_the_feature)
{
	char path[160], got[64] = "";
	json_t *m;
	ssize_t n;
	int fd;

	run_fake(&self->s, FAKE_NO_RESEED);
	m = tc_call(&self->t, 1, "exec",
		    json_pack("{s:[s], s:{s:s}, s:s}", "argv", "true", "env",
			      "CI", "1", "envMode", "merge"));
	ASSERT_TRUE(m != NULL);
	EXPECT_EQ(API_E_AGENT, err_code(m));
	EXPECT_NE(NULL, strstr(err_message(m) ?: "", "lacks ENV_MERGE"))
	TH_LOG("%s", err_message(m));
	json_decref(m);
	m = tc_call(&self->t, 2, "exec",
		    json_pack("{s:[s], s:{s:s}}", "argv", "true", "env", "CI",
			      "1"));
	ASSERT_TRUE(m != NULL);
	EXPECT_EQ(0, res_int(m, "exitCode")) TH_LOG("%s", err_message(m));
	json_decref(m);
	/* One PROC_START reached the agent: the second. */
	snprintf(path, sizeof(path), "%s/agent.log", self->s.dir);
	fd = open(path, O_RDONLY);
	ASSERT_LE(0, fd);
	n = read(fd, got, sizeof(got) - 1);
	close(fd);
	got[n > 0 ? n : 0] = '\0';
	EXPECT_STREQ("16\n", got);
}

/*
 * An agent without KILN_FEATURE_USER would ignore T_USER and run the
 * command as root: the call fails naming the feature, for exec, spawn
 * and pty.open, and nothing reaches the agent.
 */
TEST_F(fake, user_needs_the_feature)
{
	static const char *const methods[] = { "exec", "spawn", "pty.open" };
	char path[160], got[64] = "";
	json_t *m;
	ssize_t n;
	int fd;

	run_fake(&self->s, FAKE_NO_RESEED);
	for (size_t i = 0; i < ARRAY_SIZE(methods); i++) {
		m = tc_call(&self->t, 1 + i, methods[i],
			    json_pack("{s:[s], s:s}", "argv", "true", "user",
				      "agent"));
		ASSERT_TRUE(m != NULL);
		EXPECT_EQ(API_E_AGENT, err_code(m));
		EXPECT_NE(NULL,
			  strstr(err_message(m) ?: "",
				 "lacks USER (features 0x0): user needs a "
				 "newer guest agent"))
		TH_LOG("%s: %s", methods[i], err_message(m));
		json_decref(m);
	}
	snprintf(path, sizeof(path), "%s/agent.log", self->s.dir);
	fd = open(path, O_RDONLY);
	if (fd >= 0) {
		n = read(fd, got, sizeof(got) - 1);
		close(fd);
		got[n > 0 ? n : 0] = '\0';
	}
	EXPECT_STREQ("", got);
}

static const uint8_t test_mac[KILN_NET_MAC_LEN] = { 0x02, 0x4b, 0x4c,
						    0x00, 0x00, 0x07 };
#define TEST_NET "10.0.2.15/24,10.0.2.2,1500,10.0.2.2"

/*
 * A restored VM (api_params.reseed): an exec sent at once runs, but only
 * after the probe's RESEED carried the seed and the agent took it; the
 * agent is ready once, after that. want: agent.log's lines, in order.
 */
static void reseed_net_case(struct __test_metadata *_metadata,
			    enum fake_mode mode, unsigned int nr_reseeds,
			    const char *net_line)
{
	struct server s = { 0 };
	char want[1024], got[1024] = "", path[160];
	uint8_t seed[KILN_RESEED_BYTES];
	struct tc t = { .fd = -1 };
	size_t n = 0;
	json_t *m;
	int fd;

	for (size_t i = 0; i < sizeof(seed); i++)
		seed[i] = (uint8_t)(0x80 + i);
	for (unsigned int r = 0; r < nr_reseeds; r++) {
		n += snprintf(want + n, sizeof(want) - n, "%u ",
			      KILN_MSG_RESEED);
		for (size_t i = 0; i < sizeof(seed); i++)
			n += snprintf(want + n, sizeof(want) - n, "%02x",
				      seed[i]);
		n += snprintf(want + n, sizeof(want) - n, "%s\n",
			      net_line ? net_line : "");
	}
	snprintf(want + n, sizeof(want) - n, "%u\n", KILN_MSG_PROC_START);

	ASSERT_EQ(0, server_dir(&s));
	s.reseed = seed;
	if (net_line) {
		s.net_mac = test_mac;
		s.net = TEST_NET;
	}
	run_fake(&s, mode);
	ASSERT_EQ(0, server_start_api(&s, 5000));
	/* The API took its copy: this one may go. */
	memset(seed, 0, sizeof(seed));
	ASSERT_EQ(0, tc_open(&t, s.api_sock));
	m = tc_call(&t, 1, "exec", json_pack("{s:[s]}", "argv", "true"));
	ASSERT_TRUE(m != NULL);
	EXPECT_EQ(0, res_int(m, "exitCode")) TH_LOG("exec failed");
	json_decref(m);
	EXPECT_EQ(1, atomic_load(&s.agent_ready));
	m = tc_call(&t, 2, "vm.status", NULL);
	ASSERT_TRUE(m != NULL);
	EXPECT_STREQ("ready",
		     json_string_value(json_object_get(result(m), "agent")));
	json_decref(m);

	/* The fake logs before it answers: every line is in. */
	snprintf(path, sizeof(path), "%s/agent.log", s.dir);
	fd = open(path, O_RDONLY);
	ASSERT_LE(0, fd);
	n = 0;
	for (ssize_t r; (r = read(fd, got + n, sizeof(got) - 1 - n)) > 0;)
		n += r;
	close(fd);
	got[n] = '\0';
	EXPECT_STREQ(want, got);
	tc_close(&t);
	server_stop(&s);
}

static void reseed_case(struct __test_metadata *_metadata, enum fake_mode mode,
			unsigned int nr_reseeds)
{
	reseed_net_case(_metadata, mode, nr_reseeds, NULL);
}

TEST(restored_vm_reseeds_before_any_request)
{
	reseed_case(_metadata, FAKE_RESEED, 1);
}

/*
 * With a network, the RESEED also carries this VM's MAC and kiln.net
 * value to an agent that takes them; one that does not gets the seed
 * alone (and the monitor warns), and is ready all the same.
 */
TEST(restored_vm_with_a_network_sends_its_mac_with_the_seed)
{
	reseed_net_case(_metadata, FAKE_NET_RENEW, 1,
			" net 02:4b:4c:00:00:07 " TEST_NET);
}

TEST(agent_without_net_renew_gets_the_seed_alone)
{
	reseed_net_case(_metadata, FAKE_RESEED, 1, "");
}

TEST(refused_reseed_is_sent_again_and_holds_requests_back)
{
	reseed_case(_metadata, FAKE_RESEED_REFUSE_ONCE, 2);
}

TEST(agent_without_reseed_feature_gets_none)
{
	reseed_case(_metadata, FAKE_NO_RESEED, 0);
}

/* agent.log of server s, whole, in got (len bytes at most). */
static void read_agent_log(struct server *s, char *got, size_t len)
{
	char path[160];
	size_t n = 0;
	int fd;

	got[0] = '\0';
	snprintf(path, sizeof(path), "%s/agent.log", s->dir);
	fd = open(path, O_RDONLY);
	if (fd < 0)
		return;
	for (ssize_t r; (r = read(fd, got + n, len - 1 - n)) > 0;)
		n += r;
	close(fd);
	got[n] = '\0';
}

/*
 * A server for the mounts cases: plan, the fake agent in mode, agent
 * timeout ms, a restore's seed; a client connected in t. 0 or -errno.
 */
static int mounts_server(struct server *s, struct tc *t, enum api_mounts plan,
			 enum fake_mode mode, unsigned int ms,
			 const uint8_t *seed)
{
	int ret = server_dir(s);

	if (ret)
		return ret;
	s->mounts_plan = plan;
	if (plan == API_MOUNTS_ATTACH)
		s->reseed = seed;
	run_fake(s, mode);
	ret = server_start_api(s, ms);
	return ret ? ret : tc_open(t, s->api_sock);
}

/*
 * A VM with mounts (api_params.mounts_plan, Documentation/snapshots.md,
 * "Baselines"): an exec sent at once reaches the agent only after the
 * probe's sequence. For a baseline's capture: MOUNTS_DETACH, the capture
 * (nothing attached), MOUNTS_ATTACH. For a restore: RESEED, then
 * MOUNTS_ATTACH. The agent is ready once, after that.
 */
static void mounts_case(struct __test_metadata *_metadata, enum api_mounts plan,
			const char *want)
{
	uint8_t seed[KILN_RESEED_BYTES] = { 1 };
	struct tc t = { .fd = -1 };
	struct server s = { 0 };
	char got[1024];
	json_t *m;

	ASSERT_EQ(0, mounts_server(&s, &t, plan, FAKE_MOUNTS, 5000, seed));
	m = tc_call(&t, 1, "exec", json_pack("{s:[s]}", "argv", "true"));
	ASSERT_TRUE(m != NULL);
	EXPECT_EQ(0, res_int(m, "exitCode")) TH_LOG("exec failed");
	json_decref(m);
	EXPECT_EQ(1, atomic_load(&s.agent_ready));
	EXPECT_EQ(plan == API_MOUNTS_CAPTURE, atomic_load(&s.captures));
	EXPECT_EQ(0, atomic_load(&s.mounts_failures));
	read_agent_log(&s, got, sizeof(got));
	EXPECT_STREQ(want, got);
	tc_close(&t);
	server_stop(&s);
}

TEST(capture_detaches_the_mounts_around_it)
{
	char want[128];

	snprintf(want, sizeof(want), "%u\ncapture\n%u\n%u\n",
		 KILN_MSG_MOUNTS_DETACH, KILN_MSG_MOUNTS_ATTACH,
		 KILN_MSG_PROC_START);
	mounts_case(_metadata, API_MOUNTS_CAPTURE, want);
}

TEST(restore_attaches_the_mounts_after_the_reseed)
{
	char want[256];
	int n;

	n = snprintf(want, sizeof(want), "%u 01", KILN_MSG_RESEED);
	for (size_t i = 1; i < KILN_RESEED_BYTES; i++)
		n += snprintf(want + n, sizeof(want) - n, "00");
	snprintf(want + n, sizeof(want) - n, "\n%u\n%u\n",
		 KILN_MSG_MOUNTS_ATTACH, KILN_MSG_PROC_START);
	mounts_case(_metadata, API_MOUNTS_ATTACH, want);
}

/*
 * A restore whose attach the agent refuses: mounts_failed once, the agent
 * never reported ready, and the exec waiting for it fails (at the agent
 * timeout, 500 ms here) without ever reaching the agent.
 */
TEST(refused_attach_never_makes_the_agent_ready)
{
	uint8_t seed[KILN_RESEED_BYTES] = { 1 };
	struct tc t = { .fd = -1 };
	struct server s = { 0 };
	char got[1024];
	json_t *m;

	ASSERT_EQ(0, mounts_server(&s, &t, API_MOUNTS_ATTACH,
				   FAKE_MOUNTS_REFUSE_ATTACH, 500, seed));
	m = tc_call(&t, 1, "exec", json_pack("{s:[s]}", "argv", "true"));
	ASSERT_TRUE(m != NULL);
	EXPECT_NE(0, err_code(m)) TH_LOG("the exec ran");
	json_decref(m);
	EXPECT_EQ(0, atomic_load(&s.agent_ready));
	EXPECT_EQ(1, atomic_load(&s.mounts_failures));
	read_agent_log(&s, got, sizeof(got));
	EXPECT_NE(NULL, strstr(got, "mounts failed\n")) TH_LOG("%s", got);
	EXPECT_EQ(NULL, strstr(got, "capture")) TH_LOG("%s", got);
	tc_close(&t);
	server_stop(&s);
}

TEST_F(fake, too_many_clients)
{
	struct tc extra[API_MAX_CLIENTS];
	json_int_t clients = 0;
	bool eof;
	json_t *m;
	int i;

	/* The fixture's client is one. */
	for (i = 0; i < (int)API_MAX_CLIENTS - 1; i++)
		ASSERT_EQ(0, tc_open(&extra[i], self->s.api_sock));
	/*
	 * The server accepts them in batches: until it has them all, however
	 * long that takes (the test's timeout is the bound).
	 */
	for (;;) {
		m = tc_call(&extra[0], 1, "vm.status", NULL);
		ASSERT_TRUE(m != NULL);
		clients = res_int(m, "clients");
		json_decref(m);
		if (clients >= API_MAX_CLIENTS)
			break;
		sleep_ms(20);
	}
	ASSERT_EQ(API_MAX_CLIENTS, clients);
	ASSERT_EQ(0, tc_open(&extra[i], self->s.api_sock));
	m = tc_recv(&extra[i], WAIT_MS, &eof);
	ASSERT_TRUE(m != NULL);
	EXPECT_EQ(API_E_LIMIT, err_code(m));
	json_decref(m);
	tc_close(&extra[i]);
	for (i = 0; i < (int)API_MAX_CLIENTS - 1; i++)
		tc_close(&extra[i]);
	m = tc_call(&self->t, 2, "vm.status", NULL);
	ASSERT_TRUE(m != NULL);
	EXPECT_TRUE(result(m) != NULL);
	json_decref(m);
}

/* ---- vm.subscribe -------------------------------------------------------- */

/* The next vm.event's params (answers skipped); NULL on timeout or EOF. */
static json_t *next_event(struct tc *t, bool *eof)
{
	json_t *m, *p;

	for (;;) {
		m = tc_recv(t, 10000, eof);
		if (!m)
			return NULL;
		if (!strcmp(json_string_value(json_object_get(m, "method")) ?:
									      "",
			    "vm.event")) {
			p = json_incref(json_object_get(m, "params"));
			json_decref(m);
			return p;
		}
		json_decref(m);
	}
}

static const char *ev_type(json_t *ev)
{
	return json_string_value(json_object_get(ev, "type")) ?: "";
}

static json_int_t ev_int(json_t *ev, const char *key)
{
	return json_integer_value(json_object_get(ev, key));
}

/* Subscribed (since: -1 leaves it out): the seq of the last event. */
static json_int_t subscribe(struct tc *t, json_int_t id, json_int_t since)
{
	json_t *m =
		tc_call(t, id, "vm.subscribe",
			since < 0 ? NULL : json_pack("{s:I}", "since", since));
	json_int_t seq = -1;

	if (m && result(m))
		seq = res_int(m, "seq");
	json_decref(m);
	return seq;
}

/*
 * As a VM sees them: the agent's first answer, an exec's start and exit,
 * then the monitor's shutdown, posted just before the API is destroyed;
 * the subscriber still gets it, then the end of the connection.
 */
TEST_F(srv, events_in_order)
{
	static const char *const want[] = { "agent-ready", "exec-started",
					    "exec-exited", "shutdown" };
	json_int_t pid = 0, seq = 0;
	struct tc sub = { .fd = -1 };
	json_t *m, *ev;
	bool eof = false;
	unsigned int i;

	ASSERT_EQ(0, tc_open(&sub, self->s.api_sock));
	ASSERT_EQ(0, subscribe(&sub, 1, 0));
	m = tc_call(&self->t, 7, "exec",
		    json_pack("{s:[s, s, s]}", "argv", "sh", "-c", "exit 3"));
	ASSERT_TRUE(m && result(m));
	EXPECT_EQ(3, res_int(m, "exitCode"));
	pid = res_int(m, "pid");
	json_decref(m);
	api__event(
		self->s.api, "shutdown",
		json_pack("{s:s, s:i}", "reason", "guest-exit", "exitCode", 0));
	api__destroy(self->s.api);
	self->s.api = NULL;

	for (i = 0; i < ARRAY_SIZE(want); i++) {
		ev = next_event(&sub, &eof);
		ASSERT_TRUE(ev != NULL)
		TH_LOG("event %u (%s) missing", i, want[i]);
		EXPECT_STREQ(want[i], ev_type(ev));
		EXPECT_EQ(seq + 1, ev_int(ev, "seq"));
		EXPECT_LT(0, ev_int(ev, "time"));
		EXPECT_TRUE(json_object_get(ev, "dropped") == NULL);
		seq = ev_int(ev, "seq");
		if (i == 1 || i == 2) {
			EXPECT_STREQ("exec", json_string_value(json_object_get(
						     ev, "kind")));
			EXPECT_EQ(7, ev_int(ev, "id"));
			EXPECT_EQ(pid, ev_int(ev, "pid"));
		}
		if (i == 2)
			EXPECT_EQ(3, ev_int(ev, "exitCode"));
		if (i == 3)
			EXPECT_STREQ("guest-exit",
				     json_string_value(
					     json_object_get(ev, "reason")));
		json_decref(ev);
	}
	ev = next_event(&sub, &eof);
	EXPECT_TRUE(ev == NULL && eof);
	json_decref(ev);
	tc_close(&sub);
}

#define EV_PAD	 8192U /* bytes of padding in each event */
#define EV_BURST 600U  /* events posted to a subscriber that reads none */

/*
 * A subscriber that reads nothing: the API keeps at most
 * API_OUT_HIGH bytes for it and API_EVENTS_MAX events in the ring, so of
 * EV_BURST big events it loses the oldest, and is told how many; the
 * API goes on answering meanwhile.
 */
TEST_F(srv, events_bound_and_dropped_count)
{
	json_int_t base, seq, got = 0, dropped = 0, d;
	struct tc sub = { .fd = -1 };
	char *pad = malloc(EV_PAD + 1);
	json_t *m, *ev;
	unsigned int i;

	ASSERT_TRUE(pad != NULL);
	memset(pad, 'x', EV_PAD);
	pad[EV_PAD] = 0;
	ASSERT_EQ(0, tc_open(&sub, self->s.api_sock));
	base = subscribe(&sub, 1, -1);
	ASSERT_LE(0, base);
	for (i = 0; i < EV_BURST; i++)
		api__event(self->s.api, "test",
			   json_pack("{s:i, s:s}", "n", i, "pad", pad));
	free(pad);
	/* The API thread is not held up by the stalled subscriber. */
	m = tc_call(&self->t, 2, "vm.status", NULL);
	ASSERT_TRUE(m && result(m));
	json_decref(m);

	seq = base;
	while (seq < base + (json_int_t)EV_BURST) {
		ev = next_event(&sub, NULL);
		ASSERT_TRUE(ev != NULL)
		TH_LOG("after seq %lld", (long long)seq);
		d = ev_int(ev, "dropped");
		/* Every gap is announced by the event after it. */
		EXPECT_EQ(seq + 1 + d, ev_int(ev, "seq"));
		EXPECT_EQ(ev_int(ev, "seq") - base - 1, ev_int(ev, "n"));
		seq = ev_int(ev, "seq");
		dropped += d;
		got++;
		json_decref(ev);
	}
	EXPECT_EQ((json_int_t)EV_BURST, got + dropped);
	EXPECT_LT(0, dropped);
	tc_close(&sub);
}

/*
 * since 0 replays what the ring holds: API_EVENTS_MAX events, the first
 * saying how many older ones are gone.
 */
TEST_F(srv, events_replay_is_bounded)
{
	struct tc sub = { .fd = -1 };
	json_int_t seq;
	json_t *ev;
	unsigned int i;

	for (i = 0; i < API_EVENTS_MAX + 10; i++)
		api__event(self->s.api, "test", json_pack("{s:i}", "n", i));
	ASSERT_EQ(0, tc_open(&sub, self->s.api_sock));
	EXPECT_EQ(API_EVENTS_MAX + 10, subscribe(&sub, 1, 0));
	ev = next_event(&sub, NULL);
	ASSERT_TRUE(ev != NULL);
	EXPECT_EQ(11, ev_int(ev, "seq"));
	EXPECT_EQ(10, ev_int(ev, "dropped"));
	json_decref(ev);
	for (seq = 12; seq <= API_EVENTS_MAX + 10; seq++) {
		ev = next_event(&sub, NULL);
		ASSERT_TRUE(ev != NULL);
		EXPECT_EQ(seq, ev_int(ev, "seq"));
		EXPECT_TRUE(json_object_get(ev, "dropped") == NULL);
		json_decref(ev);
	}
	/* A second subscription on the same client is refused. */
	EXPECT_EQ(-1, subscribe(&sub, 2, -1));
	tc_close(&sub);
}

/*
 * Two subscribers get the same events; one that disconnects is removed
 * and the other goes on.
 */
TEST_F(srv, events_two_subscribers)
{
	struct tc a = { .fd = -1 }, b = { .fd = -1 };
	json_int_t sa, sb;
	json_t *m, *ea, *eb;

	ASSERT_EQ(0, tc_open(&a, self->s.api_sock));
	ASSERT_EQ(0, tc_open(&b, self->s.api_sock));
	sa = subscribe(&a, 1, -1);
	sb = subscribe(&b, 1, -1);
	ASSERT_LE(0, sa);
	ASSERT_LE(0, sb);
	api__event(self->s.api, "first", NULL);
	ea = next_event(&a, NULL);
	eb = next_event(&b, NULL);
	ASSERT_TRUE(ea && eb);
	EXPECT_STREQ("first", ev_type(ea));
	EXPECT_STREQ("first", ev_type(eb));
	EXPECT_EQ(ev_int(ea, "seq"), ev_int(eb, "seq"));
	json_decref(ea);
	json_decref(eb);

	tc_close(&a);
	/* Gone from the clients once the API saw it go. */
	for (;;) {
		m = tc_call(&self->t, 3, "vm.status", NULL);
		ASSERT_TRUE(m && result(m));
		if (res_int(m, "clients") == 2)
			break;
		json_decref(m);
		sleep_ms(10);
	}
	json_decref(m);
	api__event(self->s.api, "second", NULL);
	eb = next_event(&b, NULL);
	ASSERT_TRUE(eb != NULL);
	EXPECT_STREQ("second", ev_type(eb));
	json_decref(eb);
	tc_close(&b);
}

TEST(base64_round_trip)
{
	static const char *const cases[] = { "",     "f",     "fo",    "foo",
					     "foob", "fooba", "foobar" };
	static const char *const enc[] = {
		"", "Zg==", "Zm8=", "Zm9v", "Zm9vYg==", "Zm9vYmE=", "Zm9vYmFy"
	};
	uint8_t out[16];
	char e[16];
	size_t i;

	for (i = 0; i < ARRAY_SIZE(cases); i++) {
		base64__encode(cases[i], strlen(cases[i]), e);
		EXPECT_STREQ(enc[i], e);
		EXPECT_EQ((ssize_t)strlen(cases[i]),
			  base64__decode(enc[i], strlen(enc[i]), out));
		EXPECT_EQ(0, memcmp(out, cases[i], strlen(cases[i])));
	}
	EXPECT_EQ(-EINVAL, base64__decode("Zg=", 3, out));
	EXPECT_EQ(-EINVAL, base64__decode("Zh==", 4, out)); /* not canonical */
	EXPECT_EQ(-EINVAL, base64__decode("Z===", 4, out));
	EXPECT_EQ(-EINVAL, base64__decode("Zg==Zg==", 8, out));
	EXPECT_EQ(-EINVAL, base64__decode("Zm9v\n", 5, out));
}

TEST_HARNESS_MAIN
