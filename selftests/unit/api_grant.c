// SPDX-License-Identifier: GPL-2.0
/*
 * Scoped control sockets (vm.grant, Documentation/personas.md): the
 * grant's parser and method gate alone, then end to end against the
 * guest agent built for the host (kiln-agent-host, as selftests/unit/
 * api.c runs it): paths resolved beneath the granted one by the agent,
 * requests run as the persona's uid, vm.revoke and expiry closing the
 * socket, and net.check against a real parsed policy.
 */
#include <fcntl.h>
#include <ftw.h>
#include <jansson.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include "net/policy.h"
#include "net/status.h"
#include "selftests/jsonrpc_client.h"
#include "selftests/kselftest.h"
#include "vmm/api.h"

/* ---- the spec and the gate, without a VM or an agent --------------------- */

static json_t *jload(const char *s)
{
	json_error_t e;

	return json_loads(s, 0, &e);
}

static int parse(const char *s, struct api_grant_spec *g, char *err, size_t len)
{
	json_t *o = jload(s);
	int ret;

	err[0] = '\0';
	ret = o ? api__grant_parse(o, g, err, len) : -EBADMSG;
	json_decref(o);
	return ret;
}

TEST(grant_parse_refuses_malformed_grants)
{
	static const struct {
		const char *json, *want;
	} bad[] = {
		{ "{\"facets\": {}}", "persona:" },
		{ "{\"persona\": \"a b\", \"facets\": {}}", "persona:" },
		{ "{\"persona\": \"\", \"facets\": {}}", "persona:" },
		{ "{\"persona\": \"r\"}", "facets:" },
		{ "{\"persona\": \"r\", \"facets\": []}", "facets:" },
		{ "{\"persona\": \"r\", \"facets\": {\"tools\": true}}",
		  "facets.tools:" },
		{ "{\"persona\": \"r\", \"facets\": {\"shell\": 1}}",
		  "facets.shell:" },
		{ "{\"persona\": \"r\", \"facets\": {\"filesystem\": "
		  "{\"paths\": []}}}",
		  "facets.filesystem.paths:" },
		{ "{\"persona\": \"r\", \"facets\": {\"filesystem\": "
		  "{\"paths\": [\"workspace\"]}}}",
		  "facets.filesystem.paths[0]:" },
		{ "{\"persona\": \"r\", \"facets\": {\"filesystem\": "
		  "{\"paths\": [\"/w/../etc\"]}}}",
		  "facets.filesystem.paths[0]:" },
		{ "{\"persona\": \"r\", \"facets\": {\"filesystem\": "
		  "{\"paths\": [\"/w\"], \"write\": \"yes\"}}}",
		  "facets.filesystem.write:" },
		{ "{\"persona\": \"r\", \"facets\": {\"network\": "
		  "{\"open\": true}}}",
		  "facets.network.open:" },
		{ "{\"persona\": \"r\", \"facets\": {}, \"uid\": 0}", "uid:" },
		{ "{\"persona\": \"r\", \"facets\": {}, \"uid\": 70000}",
		  "uid:" },
		{ "{\"persona\": \"r\", \"facets\": {}, \"expiresMs\": 0}",
		  "expiresMs:" },
		{ "{\"persona\": \"r\", \"facets\": {}, \"other\": 1}",
		  "other:" },
	};
	struct api_grant_spec g;
	char err[256];
	size_t i;

	for (i = 0; i < ARRAY_SIZE(bad); i++) {
		EXPECT_EQ(-EINVAL, parse(bad[i].json, &g, err, sizeof(err)))
		TH_LOG("%s", bad[i].json);
		EXPECT_TRUE(!strncmp(err, bad[i].want, strlen(bad[i].want)))
		TH_LOG("%s: %s", bad[i].json, err);
	}
	ASSERT_EQ(0, parse("{\"persona\": \"reviewer\", \"socket\": \"/s\", "
			   "\"facets\": {\"filesystem\": {\"paths\": "
			   "[\"//workspace//a/\", \"/\"]}}}",
			   &g, err, sizeof(err)))
	TH_LOG("%s", err);
	EXPECT_STREQ("/workspace/a", g.paths[0]);
	EXPECT_STREQ("/", g.paths[1]);
	EXPECT_FALSE(g.fs_write);
	EXPECT_FALSE(g.shell);
	EXPECT_EQ(-1, g.uid);
	api__grant_release(&g);
}

static struct api_grant_spec reviewer(bool write, bool shell, bool net)
{
	struct api_grant_spec g = { .persona = "reviewer", .uid = -1 };

	g.fs = true;
	g.fs_write = write;
	g.shell = shell;
	g.net_check = net;
	g.paths[g.nr_paths++] = (char *)"/workspace";
	return g;
}

/* The gate's answer for method with params (JSON text). */
static int gate(const struct api_grant_spec *g, const char *method,
		const char *params, char *why, size_t len)
{
	json_t *p = jload(params);
	int ret;

	why[0] = '\0';
	ret = api__grant_gate(g, 2000, method, p, why, len);
	json_decref(p);
	return ret;
}

TEST(gate_refuses_methods_outside_the_facets)
{
	static const char *const never[] = {
		"vm.snapshot",	"vm.pause",  "vm.shutdown",   "vm.grant",
		"vm.revoke",	"vm.status", "net.setPolicy", "facts",
		"vm.subscribe", "no.such",
	};
	struct api_grant_spec g = reviewer(false, false, false);
	char why[384];
	size_t i;

	for (i = 0; i < ARRAY_SIZE(never); i++) {
		EXPECT_EQ(-EPERM, gate(&g, never[i], "{}", why, sizeof(why)));
		EXPECT_TRUE(strstr(why, "persona 'reviewer': ") == why)
		TH_LOG("%s", why);
		EXPECT_TRUE(strstr(why, never[i]) != NULL) TH_LOG("%s", why);
	}
	g.shell = g.net_check = true;
	g.fs_write = true;
	for (i = 0; i < ARRAY_SIZE(never); i++)
		EXPECT_EQ(-EPERM, gate(&g, never[i], "{}", why, sizeof(why)));

	g = reviewer(false, false, false);
	EXPECT_EQ(-EPERM,
		  gate(&g, "exec", "{\"argv\": [\"id\"]}", why, sizeof(why)));
	EXPECT_STREQ("persona 'reviewer': facet shell is not granted (exec)",
		     why);
	EXPECT_EQ(-EPERM, gate(&g, "pty.open", "{}", why, sizeof(why)));
	EXPECT_EQ(-EPERM, gate(&g, "spawn", "{}", why, sizeof(why)));
	EXPECT_EQ(-EPERM, gate(&g, "net.check", "{}", why, sizeof(why)));
	EXPECT_STREQ("persona 'reviewer': facet network is not granted "
		     "(net.check)",
		     why);
	EXPECT_EQ(-EPERM, gate(&g, "net.status", "{}", why, sizeof(why)));
	g.fs = false;
	EXPECT_EQ(-EPERM, gate(&g, "fs.stat", "{\"path\": \"/workspace\"}", why,
			       sizeof(why)));
	EXPECT_STREQ("persona 'reviewer': facet filesystem is not granted "
		     "(fs.stat)",
		     why);

	g = reviewer(false, true, true);
	EXPECT_EQ(0,
		  gate(&g, "exec", "{\"argv\": [\"id\"]}", why, sizeof(why)));
	EXPECT_EQ(0, gate(&g, "spawn.kill", "{}", why, sizeof(why)));
	EXPECT_EQ(0, gate(&g, "net.check", "{}", why, sizeof(why)));
	EXPECT_EQ(0, gate(&g, "cancel", "{\"id\": 1}", why, sizeof(why)));
	/* Its uid is the grant's: no other user. */
	EXPECT_EQ(-EPERM,
		  gate(&g, "exec", "{\"argv\": [\"id\"], \"user\": \"root\"}",
		       why, sizeof(why)));
	EXPECT_STREQ("persona 'reviewer': facet shell runs as uid 2000; "
		     "\"user\" is not allowed",
		     why);
}

TEST(gate_keeps_paths_under_the_grant_and_read_only)
{
	static const char *const outside[] = {
		"{\"path\": \"/etc/shadow\"}",
		"{\"path\": \"/workspacex/a\"}",
		"{\"path\": \"/work\"}",
		"{\"path\": \"/\"}",
		/* pathBytes wins, as fs.c reads it: "/etc/shadow" */
		"{\"path\": \"/workspace/a\", \"pathBytes\": "
		"\"L2V0Yy9zaGFkb3c=\"}",
	};
	struct api_grant_spec g = reviewer(false, false, false);
	char why[384];
	size_t i;

	for (i = 0; i < ARRAY_SIZE(outside); i++) {
		EXPECT_EQ(-EPERM,
			  gate(&g, "fs.readFile", outside[i], why, sizeof(why)))
		TH_LOG("%s", outside[i]);
		EXPECT_TRUE(strstr(why, "persona 'reviewer': facet filesystem "
					"does not allow /") == why)
		TH_LOG("%s", why);
	}
	EXPECT_EQ(-EPERM, gate(&g, "fs.stat", "{\"path\": \"/etc/shadow\"}",
			       why, sizeof(why)));
	EXPECT_STREQ("persona 'reviewer': facet filesystem does not allow "
		     "/etc/shadow: outside its paths",
		     why);
	EXPECT_EQ(0, gate(&g, "fs.readFile", "{\"path\": \"/workspace\"}", why,
			  sizeof(why)));
	EXPECT_EQ(0, gate(&g, "fs.readDir", "{\"path\": \"/workspace/a/b\"}",
			  why, sizeof(why)));
	/* Lexically beneath: the agent resolves it (EXDEV), not the gate. */
	EXPECT_EQ(0, gate(&g, "fs.readFile",
			  "{\"path\": \"/workspace/../etc/shadow\"}", why,
			  sizeof(why)));

	/* Read-only: every write, even beneath. */
	EXPECT_EQ(-EPERM, gate(&g, "fs.writeFile",
			       "{\"path\": \"/workspace/x\", \"data\": \"\"}",
			       why, sizeof(why)));
	EXPECT_STREQ("persona 'reviewer': facet filesystem does not allow "
		     "write to /workspace/x",
		     why);
	EXPECT_EQ(-EPERM, gate(&g, "fs.mkdir", "{\"path\": \"/workspace/d\"}",
			       why, sizeof(why)));
	EXPECT_EQ(-EPERM, gate(&g, "fs.remove", "{\"path\": \"/workspace/d\"}",
			       why, sizeof(why)));
	EXPECT_EQ(-EPERM, gate(&g, "fs.rename",
			       "{\"from\": \"/workspace/a\", \"to\": "
			       "\"/workspace/b\"}",
			       why, sizeof(why)));
	EXPECT_EQ(-EPERM,
		  gate(&g, "fs.write", "{\"stream\": 1}", why, sizeof(why)));
	EXPECT_STREQ("persona 'reviewer': facet filesystem does not allow "
		     "write (fs.write)",
		     why);
	EXPECT_EQ(-EPERM,
		  gate(&g, "fs.close", "{\"stream\": 1}", why, sizeof(why)));

	g = reviewer(true, false, false);
	EXPECT_EQ(0, gate(&g, "fs.writeFile", "{\"path\": \"/workspace/x\"}",
			  why, sizeof(why)));
	EXPECT_EQ(0, gate(&g, "fs.write", "{\"stream\": 1}", why, sizeof(why)));
	/* A rename needs both ends granted. */
	EXPECT_EQ(-EPERM, gate(&g, "fs.rename",
			       "{\"from\": \"/workspace/a\", \"to\": "
			       "\"/etc/passwd\"}",
			       why, sizeof(why)));
	EXPECT_STREQ("persona 'reviewer': facet filesystem does not allow "
		     "/etc/passwd: outside its paths",
		     why);
	EXPECT_EQ(-EPERM, gate(&g, "fs.rename",
			       "{\"from\": \"/etc/passwd\", \"to\": "
			       "\"/workspace/a\"}",
			       why, sizeof(why)));
	EXPECT_EQ(0, gate(&g, "fs.rename",
			  "{\"from\": \"/workspace/a\", \"to\": "
			  "\"/workspace/b\"}",
			  why, sizeof(why)));
	EXPECT_STREQ("/workspace", api__grant_beneath(&g, "/workspace/a", 12));
	EXPECT_TRUE(api__grant_beneath(&g, "/workspaces", 11) == NULL);
	EXPECT_TRUE(api__grant_beneath(&g, "/etc", 4) == NULL);
}

/* ---- end to end: the API and kiln-agent-host ----------------------------- */

struct gsrv {
	char dir[64];
	char api_sock[96], agent_sock[96], scoped[96];
	char ws[128], secret[128];
	pid_t agent;
	struct api *api;
	struct net_policy *policy;
};

static int open_agent(void *opaque)
{
	struct gsrv *s = opaque;

	return unix_connect(s->agent_sock, true);
}

/* net.check as the monitor answers it, against this test's policy. */
static int check_flow(void *opaque, const struct api_flow_check *f,
		      json_t **out, char *err, size_t len)
{
	struct gsrv *s = opaque;
	struct net_decision d;
	int ret;

	ret = net_policy__check(s->policy, f->udp ? IPPROTO_UDP : IPPROTO_TCP,
				f->addr, f->port,
				f->hostname[0] ? f->hostname : NULL, NULL, &d);
	if (ret) {
		snprintf(err, len, "hostname: not a DNS name");
		return ret;
	}
	*out = api__flow_verdict(&d);
	return 0;
}

static int rm_one(const char *p, const struct stat *st, int flag,
		  struct FTW *ftw)
{
	remove(p);
	return 0;
}

static void put_file(const char *path, const char *text)
{
	FILE *f = fopen(path, "w");

	if (f) {
		fputs(text, f);
		fclose(f);
	}
}

/* The uid the grants here run as: a persona's, or ours when not root. */
static uint32_t test_uid(void)
{
	return geteuid() ? geteuid() : 2345;
}

static int gsrv_start(struct gsrv *s)
{
	const char *bin = getenv("KILN_AGENT_HOST");
	struct api_params p = {
		.open_agent = open_agent,
		.check_flow = check_flow,
		.opaque = s,
		.agent_timeout_ms = 3000,
	};
	char path[192];
	json_error_t je;
	json_t *pol;
	uint64_t end;
	int fd;

	bin = bin ? bin : "build/guest/kiln-agent-host";
	snprintf(s->dir, sizeof(s->dir), "/tmp/kiln-grant.XXXXXX");
	if (!mkdtemp(s->dir) || chmod(s->dir, 0755))
		return -errno;
	snprintf(s->api_sock, sizeof(s->api_sock), "%s/api.sock", s->dir);
	snprintf(s->agent_sock, sizeof(s->agent_sock), "%s/agent.sock", s->dir);
	snprintf(s->scoped, sizeof(s->scoped), "%s/reviewer.sock", s->dir);
	snprintf(s->ws, sizeof(s->ws), "%s/workspace", s->dir);
	snprintf(s->secret, sizeof(s->secret), "%s/secret", s->dir);
	/* World-readable: only the confinement keeps the persona out. */
	mkdir(s->ws, 0755);
	put_file(s->secret, "the secret\n");
	snprintf(path, sizeof(path), "%s/file.txt", s->ws);
	put_file(path, "in the workspace\n");
	snprintf(path, sizeof(path), "%s/out", s->ws);
	if (symlink(s->dir, path)) /* absolute: leads out */
		return -errno;
	snprintf(path, sizeof(path), "%s/in", s->ws);
	if (symlink("file.txt", path)) /* stays beneath */
		return -errno;
	pol = json_loads("{\"tcp\": [{\"to\": \"203.0.113.0/24\", \"ports\": "
			 "[443]}, {\"to\": \"api.example.com\", \"ports\": "
			 "[443]}], \"udp\": [{\"to\": \"198.51.100.7\", "
			 "\"ports\": [53]}]}",
			 0, &je);
	if (!pol ||
	    net_policy__parse(pol, "policy", &s->policy, path, sizeof(path))) {
		json_decref(pol);
		return -EINVAL;
	}
	json_decref(pol);
	s->agent = fork();
	if (s->agent < 0)
		return -errno;
	if (s->agent == 0) {
		execl(bin, bin, "--unix", s->agent_sock, "--die-with-parent",
		      (char *)NULL);
		_exit(127);
	}
	for (end = ms_now() + 5000;; sleep_ms(10)) {
		fd = unix_connect(s->agent_sock, false);
		if (fd >= 0) {
			close(fd);
			break;
		}
		if (ms_now() > end)
			return -ETIMEDOUT;
	}
	p.socket_path = s->api_sock;
	return api__create(&s->api, &p) ?: api__start(s->api, NULL);
}

static void gsrv_stop(struct gsrv *s)
{
	api__destroy(s->api);
	net_policy__free(s->policy);
	if (s->agent > 0) {
		kill(s->agent, SIGKILL);
		waitpid(s->agent, NULL, 0);
	}
	if (s->dir[0])
		nftw(s->dir, rm_one, 16, FTW_DEPTH | FTW_PHYS);
}

FIXTURE(grant)
{
	struct gsrv s;
	struct tc t, p; /* the full socket, the persona's */
};

FIXTURE_SETUP(grant)
{
	self->t.fd = self->p.fd = -1;
	ASSERT_EQ(0, gsrv_start(&self->s));
	ASSERT_EQ(0, tc_open(&self->t, self->s.api_sock));
}

FIXTURE_TEARDOWN(grant)
{
	tc_close(&self->p);
	tc_close(&self->t);
	gsrv_stop(&self->s);
}

/* vm.grant on the full socket; the answer. */
static json_t *grant(struct tc *t, const char *sock, const char *facets,
		     const char *extra)
{
	char text[1024];
	json_error_t je;

	snprintf(text, sizeof(text),
		 "{\"socket\": \"%s\", \"persona\": \"reviewer\", "
		 "\"facets\": %s, \"uid\": %u%s}",
		 sock, facets, test_uid(), extra ? extra : "");
	return tc_call(t, 1, "vm.grant", json_loads(text, 0, &je));
}

static const char *err_msg(json_t *m)
{
	return json_string_value(
		json_object_get(json_object_get(m, "error"), "message"));
}

static json_t *read_file(struct tc *t, json_int_t id, const char *path)
{
	return tc_call(t, id, "fs.readFile", json_pack("{s:s}", "path", path));
}

/*
 * A refused fs.write with a raw body: the body is taken all the same (it
 * is a request line itself), the line after it answered.
 */
static void refused_body_is_taken(struct __test_metadata *_metadata,
				  struct tc *p, const char *ws)
{
	static const char body[] =
		"{\"jsonrpc\":\"2.0\",\"id\":99,\"method\":"
		"\"fs.readFile\",\"params\":{\"path\":\"/\"}}\n";
	size_t len = 0;
	char *buf = NULL;
	json_t *m;

	ASSERT_EQ(0, tc_frame_body(&buf, &len, 15, "fs.write",
				   json_pack("{s:i, s:i}", "stream", 1, "size",
					     (int)sizeof(body) - 1),
				   body, sizeof(body) - 1));
	ASSERT_EQ(0, tc_frame_body(&buf, &len, 16, "fs.stat",
				   json_pack("{s:s}", "path", ws), NULL, 0));
	ASSERT_EQ(0, tc_send_raw(p, buf, len));
	free(buf);
	m = tc_recv(p, TC_WAIT_MS, NULL);
	ASSERT_TRUE(m != NULL);
	EXPECT_TRUE(msg_has_id(m, 15));
	EXPECT_EQ(API_E_DENIED, err_code(m));
	json_decref(m);
	m = tc_recv(p, TC_WAIT_MS, NULL);
	ASSERT_TRUE(m != NULL);
	EXPECT_TRUE(msg_has_id(m, 16)) TH_LOG("the body was read as a request");
	EXPECT_TRUE(result(m) != NULL);
	json_decref(m);
}

TEST_F(grant, read_only_workspace_cannot_leave_or_exec)
{
	char facets[256], path[256], *data;
	json_t *m;
	size_t n;

	snprintf(facets, sizeof(facets),
		 "{\"filesystem\": {\"paths\": [\"%s\"]}}", self->s.ws);
	m = grant(&self->t, self->s.scoped, facets, NULL);
	ASSERT_TRUE(result(m) != NULL) TH_LOG("%s", err_msg(m));
	EXPECT_STREQ(self->s.scoped,
		     json_string_value(json_object_get(result(m), "socket")));
	EXPECT_TRUE(json_is_null(json_object_get(result(m), "expiresAt")));
	EXPECT_EQ(test_uid(), res_int(m, "uid"));
	json_decref(m);
	ASSERT_EQ(0, tc_open(&self->p, self->s.scoped));

	/* Its workspace reads, through a symlink that stays beneath too. */
	snprintf(path, sizeof(path), "%s/file.txt", self->s.ws);
	m = read_file(&self->p, 2, path);
	ASSERT_TRUE(result(m) != NULL) TH_LOG("%s", err_msg(m));
	data = b64_str(result(m), "data", &n);
	EXPECT_STREQ("in the workspace\n", data);
	free(data);
	json_decref(m);
	snprintf(path, sizeof(path), "%s/in", self->s.ws);
	m = read_file(&self->p, 3, path);
	EXPECT_TRUE(result(m) != NULL) TH_LOG("%s", err_msg(m));
	json_decref(m);

	/* The file next to it: by name, through "..", through a symlink. */
	m = read_file(&self->p, 4, self->s.secret);
	EXPECT_EQ(API_E_DENIED, err_code(m));
	EXPECT_TRUE(strstr(err_msg(m), "outside its paths") != NULL);
	json_decref(m);
	snprintf(path, sizeof(path), "%s/../secret", self->s.ws);
	m = read_file(&self->p, 5, path);
	EXPECT_EQ(API_E_DENIED, err_code(m)) TH_LOG("%s", err_msg(m));
	EXPECT_STREQ("EXDEV", err_errno(m));
	EXPECT_TRUE(strstr(err_msg(m),
			   "persona 'reviewer': facet "
			   "filesystem does not allow") == err_msg(m))
	TH_LOG("%s", err_msg(m));
	json_decref(m);
	snprintf(path, sizeof(path), "%s/out/secret", self->s.ws);
	m = read_file(&self->p, 6, path);
	EXPECT_EQ(API_E_DENIED, err_code(m)) TH_LOG("%s", err_msg(m));
	EXPECT_STREQ("EXDEV", err_errno(m));
	json_decref(m);
	m = tc_call(&self->p, 7, "fs.readDir",
		    json_pack("{s:s+}", "path", self->s.ws, "/out"));
	EXPECT_EQ(API_E_DENIED, err_code(m)) TH_LOG("%s", err_msg(m));
	json_decref(m);
	/* Its last component, a symlink out: stat sees the link itself. */
	m = tc_call(&self->p, 8, "fs.stat",
		    json_pack("{s:s+}", "path", self->s.ws, "/out"));
	EXPECT_STREQ("symlink",
		     json_string_value(json_object_get(result(m), "type")));
	json_decref(m);
	m = tc_call(&self->p, 9, "fs.stat",
		    json_pack("{s:s+}", "path", self->s.ws, "/.."));
	EXPECT_EQ(API_E_DENIED, err_code(m)) TH_LOG("%s", err_msg(m));
	json_decref(m);

	/* No shell, no write, nothing of the VM's. */
	m = tc_call(&self->p, 10, "exec",
		    json_pack("{s:[s]}", "argv", "/bin/true"));
	EXPECT_EQ(API_E_DENIED, err_code(m));
	EXPECT_STREQ("persona 'reviewer': facet shell is not granted (exec)",
		     err_msg(m));
	json_decref(m);
	snprintf(path, sizeof(path), "%s/new", self->s.ws);
	m = tc_call(&self->p, 11, "fs.writeFile",
		    json_pack("{s:s, s:s}", "path", path, "data", "eA=="));
	EXPECT_EQ(API_E_DENIED, err_code(m));
	json_decref(m);
	EXPECT_EQ(-1, access(path, F_OK));
	refused_body_is_taken(_metadata, &self->p, self->s.ws);
	m = tc_call(&self->p, 12, "vm.grant",
		    json_pack("{s:s+, s:s, s:{}}", "socket", self->s.dir,
			      "/more.sock", "persona", "x", "facets"));
	EXPECT_EQ(API_E_DENIED, err_code(m));
	json_decref(m);
	m = tc_call(&self->p, 13, "net.check",
		    json_pack("{s:s, s:s}", "proto", "tcp", "dst",
			      "203.0.113.5:443"));
	EXPECT_EQ(API_E_DENIED, err_code(m));
	json_decref(m);
	/* The full socket stays the operator's. */
	m = read_file(&self->t, 14, self->s.secret);
	EXPECT_TRUE(result(m) != NULL);
	json_decref(m);
}

TEST_F(grant, requests_run_as_the_persona)
{
	char facets[256], path[256], *out;
	struct stat st;
	json_t *m;
	size_t n;

	ASSERT_EQ(0, chown(self->s.ws, test_uid(), test_uid()));
	snprintf(facets, sizeof(facets),
		 "{\"shell\": true, \"filesystem\": {\"paths\": [\"%s\"], "
		 "\"write\": true}}",
		 self->s.ws);
	m = grant(&self->t, self->s.scoped, facets, NULL);
	ASSERT_TRUE(result(m) != NULL) TH_LOG("%s", err_msg(m));
	json_decref(m);
	ASSERT_EQ(0, tc_open(&self->p, self->s.scoped));

	snprintf(path, sizeof(path), "%s/sub/made", self->s.ws);
	m = tc_call(&self->p, 2, "fs.writeFile",
		    json_pack("{s:s, s:s, s:b}", "path", path, "data",
			      "eA==", "createParents", 1));
	ASSERT_TRUE(result(m) != NULL) TH_LOG("%s", err_msg(m));
	json_decref(m);
	ASSERT_EQ(0, stat(path, &st));
	EXPECT_EQ(test_uid(), st.st_uid);
	EXPECT_EQ(test_uid(), st.st_gid);
	/* The guest kernel says no too: a root-owned file in it. */
	if (!geteuid()) {
		snprintf(path, sizeof(path), "%s/root-only", self->s.ws);
		put_file(path, "x");
		chmod(path, 0600);
		m = read_file(&self->p, 3, path);
		EXPECT_EQ(API_E_ERRNO, err_code(m));
		EXPECT_STREQ("EACCES", err_errno(m));
		json_decref(m);
	}
	/* A write out through ".." is refused in the agent. */
	snprintf(path, sizeof(path), "%s/../planted", self->s.ws);
	m = tc_call(&self->p, 4, "fs.writeFile",
		    json_pack("{s:s, s:s}", "path", path, "data", "eA=="));
	EXPECT_EQ(API_E_DENIED, err_code(m)) TH_LOG("%s", err_msg(m));
	json_decref(m);
	snprintf(path, sizeof(path), "%s/planted", self->s.dir);
	EXPECT_EQ(-1, access(path, F_OK));
	snprintf(path, sizeof(path), "%s/out/planted", self->s.ws);
	m = tc_call(&self->p, 5, "fs.mkdir",
		    json_pack("{s:s, s:b}", "path", path, "recursive", 1));
	EXPECT_EQ(API_E_DENIED, err_code(m)) TH_LOG("%s", err_msg(m));
	json_decref(m);
	snprintf(path, sizeof(path), "%s/planted", self->s.dir);
	EXPECT_EQ(-1, access(path, F_OK));

	/* Its shell: that uid, that gid, no other group. */
	m = tc_call(&self->p, 6, "exec",
		    json_pack("{s:[s, s, s]}", "argv", "/bin/sh", "-c",
			      "id -u; id -g; id -G"));
	ASSERT_TRUE(result(m) != NULL)
	TH_LOG("%s", json_dumps(json_object_get(m, "error"), 0));
	out = b64_str(result(m), "stdout", &n);
	snprintf(path, sizeof(path), "%u\n%u\n%u\n", test_uid(), test_uid(),
		 test_uid());
	if (!geteuid())
		EXPECT_STREQ(path, out);
	free(out);
	json_decref(m);
	m = tc_call(
		&self->p, 7, "exec",
		json_pack("{s:[s], s:s}", "argv", "/bin/true", "user", "root"));
	EXPECT_EQ(API_E_DENIED, err_code(m));
	json_decref(m);
}

/* Whether the persona's connection was closed (EOF) within a while. */
static bool closed_soon(struct tc *t)
{
	uint64_t end = ms_now() + 5000;
	bool eof = false;
	json_t *m;

	while (!eof && ms_now() < end) {
		m = tc_recv(t, 200, &eof);
		json_decref(m);
	}
	return eof;
}

TEST_F(grant, revoke_and_expiry_close_the_socket)
{
	char facets[256], other[128];
	json_t *m;

	snprintf(facets, sizeof(facets),
		 "{\"filesystem\": {\"paths\": [\"%s\"]}}", self->s.ws);
	m = grant(&self->t, self->s.scoped, facets, NULL);
	ASSERT_TRUE(result(m) != NULL) TH_LOG("%s", err_msg(m));
	json_decref(m);
	/* The same socket twice, or the main one: refused. */
	m = grant(&self->t, self->s.scoped, facets, NULL);
	EXPECT_EQ(API_E_INVALID_PARAMS, err_code(m));
	json_decref(m);
	m = grant(&self->t, self->s.api_sock, facets, NULL);
	EXPECT_EQ(API_E_INVALID_PARAMS, err_code(m));
	json_decref(m);
	m = grant(&self->t, "relative.sock", facets, NULL);
	EXPECT_EQ(API_E_INVALID_PARAMS, err_code(m));
	json_decref(m);
	m = grant(&self->t, "/tmp/x.sock", "{\"shell\": \"yes\"}", NULL);
	EXPECT_EQ(API_E_INVALID_PARAMS, err_code(m));
	EXPECT_STREQ("facets.shell: expected true or false", err_msg(m));
	json_decref(m);

	ASSERT_EQ(0, tc_open(&self->p, self->s.scoped));
	m = tc_call(&self->p, 2, "fs.stat",
		    json_pack("{s:s}", "path", self->s.ws));
	EXPECT_TRUE(result(m) != NULL);
	json_decref(m);
	m = tc_call(&self->t, 3, "vm.revoke",
		    json_pack("{s:s}", "socket", self->s.scoped));
	ASSERT_TRUE(result(m) != NULL) TH_LOG("%s", err_msg(m));
	EXPECT_EQ(1, res_int(m, "closed"));
	json_decref(m);
	EXPECT_TRUE(closed_soon(&self->p));
	EXPECT_EQ(-1, access(self->s.scoped, F_OK));
	EXPECT_GT(0, unix_connect(self->s.scoped, false));
	m = tc_call(&self->t, 4, "vm.revoke",
		    json_pack("{s:s}", "socket", self->s.scoped));
	EXPECT_EQ(API_E_INVALID_PARAMS, err_code(m));
	json_decref(m);

	/* Expiry does the same, on its own. */
	snprintf(other, sizeof(other), "%s/short.sock", self->s.dir);
	m = grant(&self->t, other, facets, ", \"expiresMs\": 300");
	ASSERT_TRUE(result(m) != NULL) TH_LOG("%s", err_msg(m));
	EXPECT_TRUE(json_is_integer(json_object_get(result(m), "expiresAt")));
	json_decref(m);
	tc_close(&self->p);
	ASSERT_EQ(0, tc_open(&self->p, other));
	EXPECT_TRUE(closed_soon(&self->p));
	EXPECT_EQ(-1, access(other, F_OK));
}

static json_t *check(struct tc *t, json_int_t id, const char *proto,
		     const char *dst, const char *hostname)
{
	json_t *p = json_pack("{s:s, s:s}", "proto", proto, "dst", dst);

	if (hostname)
		json_object_set_new(p, "hostname", json_string(hostname));
	return tc_call(t, id, "net.check", p);
}

static const char *verdict(json_t *m)
{
	return json_string_value(json_object_get(result(m), "verdict"));
}

TEST_F(grant, net_check_answers_as_the_policy)
{
	static const struct {
		const char *proto, *dst, *hostname, *verdict, *reason;
	} flows[] = {
		{ "tcp", "203.0.113.9:443", NULL, "allow", "tcp grant 0" },
		{ "tcp", "203.0.113.9:80", NULL, "deny", "no grant" },
		{ "udp", "203.0.113.9:443", NULL, "deny", "no grant" },
		{ "udp", "198.51.100.7:53", NULL, "allow", "udp grant 0" },
		{ "tcp", "127.0.0.1:443", NULL, "deny", "host loopback" },
		{ "tcp", "192.0.2.1:443", "api.example.com", "allow",
		  "tcp grant 1" },
		{ "tcp", "192.0.2.1:443", "other.example.com", "deny",
		  "no grant" },
		{ "tcp", "api.example.com:443", NULL, "allow", "tcp grant 1" },
		{ "tcp", "api.example.com:80", NULL, "deny",
		  "no grant names it" },
	};
	struct net_decision d;
	char facets[64];
	json_t *m;
	size_t i;

	for (i = 0; i < ARRAY_SIZE(flows); i++) {
		m = check(&self->t, i + 1, flows[i].proto, flows[i].dst,
			  flows[i].hostname);
		ASSERT_TRUE(result(m) != NULL)
		TH_LOG("%s %s: %s", flows[i].proto, flows[i].dst, err_msg(m));
		ASSERT_TRUE(verdict(m) != NULL);
		EXPECT_STREQ(flows[i].verdict, verdict(m))
		TH_LOG("%s %s", flows[i].proto, flows[i].dst);
		EXPECT_STREQ(flows[i].reason, json_string_value(json_object_get(
						      result(m), "reason")))
		TH_LOG("%s %s", flows[i].proto, flows[i].dst);
		json_decref(m);
	}
	/* What the proxy's own call decides for the first. */
	net_policy__decide(
		self->s.policy,
		&(struct net_flow){
			.proto = IPPROTO_TCP,
			.dst = { .sin_family = AF_INET,
				 .sin_port = htons(443),
				 .sin_addr.s_addr = htonl(0xcb007109) },
		},
		NULL, &d);
	EXPECT_EQ(NET_VERDICT_ALLOW, d.verdict);
	m = check(&self->t, 20, "tcp", "203.0.113.9:443", NULL);
	EXPECT_STREQ("tcp",
		     json_string_value(json_object_get(
			     json_object_get(result(m), "rule"), "key")));
	json_decref(m);

	/* Malformed. */
	m = check(&self->t, 21, "icmp", "203.0.113.9:443", NULL);
	EXPECT_EQ(API_E_INVALID_PARAMS, err_code(m));
	json_decref(m);
	m = check(&self->t, 22, "tcp", "203.0.113.9", NULL);
	EXPECT_EQ(API_E_INVALID_PARAMS, err_code(m));
	json_decref(m);
	m = check(&self->t, 23, "tcp", "203.0.113.9:0", NULL);
	EXPECT_EQ(API_E_INVALID_PARAMS, err_code(m));
	json_decref(m);
	m = check(&self->t, 24, "tcp", "bad_name:443", NULL);
	EXPECT_EQ(API_E_INVALID_PARAMS, err_code(m));
	json_decref(m);

	/* A persona with the network facet asks the same. */
	snprintf(facets, sizeof(facets), "{\"network\": {\"check\": true}}");
	m = grant(&self->t, self->s.scoped, facets, NULL);
	ASSERT_TRUE(result(m) != NULL) TH_LOG("%s", err_msg(m));
	json_decref(m);
	ASSERT_EQ(0, tc_open(&self->p, self->s.scoped));
	m = check(&self->p, 30, "tcp", "203.0.113.9:443", NULL);
	EXPECT_STREQ("allow", verdict(m));
	json_decref(m);
	m = tc_call(&self->p, 31, "fs.stat",
		    json_pack("{s:s}", "path", self->s.ws));
	EXPECT_EQ(API_E_DENIED, err_code(m));
	EXPECT_STREQ("persona 'reviewer': facet filesystem is not granted "
		     "(fs.stat)",
		     err_msg(m));
	json_decref(m);
	m = tc_call(&self->p, 32, "net.setPolicy",
		    json_pack("{s:{}}", "policy"));
	EXPECT_EQ(API_E_DENIED, err_code(m));
	json_decref(m);
}

TEST_HARNESS_MAIN
