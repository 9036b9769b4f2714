// SPDX-License-Identifier: GPL-2.0
/*
 * Control API facts and the VM: facts, vm.facts, vm.status,
 * vm.shutdown, vm.pause, vm.resume, vm.snapshot, net.setPolicy.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lib/counter.h"
#include "vmm/api/api-internal.h"

#define API_POLICY_ERR_LEN 256 /* one line naming the key */

/* A T_FACT field: topic, relation, value. */
static json_t *fact_json(const uint8_t *p, size_t len)
{
	json_t *o = json_pack("{s:s}", "source", "guest");
	struct kiln_tlv_iter it;
	const uint8_t *val;
	uint32_t vlen;
	uint16_t tag;

	kiln_tlv__iter(&it, p, len);
	while (o && kiln_tlv__next(&it, &tag, &val, &vlen) == 1) {
		if (tag == KILN_T_TOPIC)
			json_object_set_new(o, "topic",
					    api_json_lossy(val, vlen));
		else if (tag == KILN_T_RELATION)
			json_object_set_new(o, "relation",
					    api_json_lossy(val, vlen));
		else if (tag == KILN_T_VALUE)
			json_object_set_new(o, "value",
					    api_json_lossy(val, vlen));
	}
	return o;
}

/* facts and vm.facts: the guest's facts come in RESULT frames. */
void facts_frame(struct call *k, uint16_t type, uint16_t flags,
		 const uint8_t *p, size_t len)
{
	if (type == KILN_MSG_ERROR) {
		call_errno(k, p, len);
		return;
	}
	if (type != KILN_MSG_RESULT) {
		call_lost(k, "agent protocol error: unexpected message");
		return;
	}
	call_list_result(k, p, len, KILN_T_FACT, fact_json, "facts");
}

static void m_facts(struct rpc *r)
{
	struct kiln_buf b;
	struct call *k = call_new(r, CALL_FACTS, false);

	kiln_buf__init(&b);
	if (k)
		call_start(k, KILN_MSG_FACTS, &b);
}

static void m_vm_facts(struct rpc *r)
{
	struct kiln_buf b;
	struct call *k = call_new(r, CALL_VM_FACTS, false);

	kiln_buf__init(&b);
	if (k)
		call_start(k, KILN_MSG_FACTS, &b);
}

static void m_vm_status(struct rpc *r)
{
	struct api *api = r->api;
	json_t *res;

	bool paused = api->p.is_paused && api->p.is_paused(api->p.opaque);

	res = json_pack("{s:s, s:s, s:I, s:I, s:I}", "state",
			paused ? "paused" : "running", "agent",
			api->agent_ready ? "ready" : "unknown", "clients",
			(json_int_t)api->nr_clients, "requests",
			(json_int_t)api->nr_calls, "streams",
			(json_int_t)api->nr_streams);
	if (res && api->p.status)
		api->p.status(api->p.opaque, res);
	client_reply(r->c, r->id, res);
}

void api__counters(const struct api *api, struct api_counters *c)
{
	const struct api_counters *s;

	memset(c, 0, sizeof(*c));
	if (!api)
		return;
	s = &api->counters;
	c->agent_connections = counter__get(&s->agent_connections);
	c->agent_open_failures = counter__get(&s->agent_open_failures);
	c->execs = counter__get(&s->execs);
	c->spawns = counter__get(&s->spawns);
	c->ptys = counter__get(&s->ptys);
	c->exits = counter__get(&s->exits);
}

json_t *api__metrics_agent(const struct api *api)
{
	struct api_counters c;

	api__counters(api, &c);
	return json_pack("{s:I, s:I, s:I, s:I, s:I, s:I}", "connections",
			 (json_int_t)c.agent_connections, "openFailures",
			 (json_int_t)c.agent_open_failures, "execs",
			 (json_int_t)c.execs, "spawns", (json_int_t)c.spawns,
			 "ptys", (json_int_t)c.ptys, "exits",
			 (json_int_t)c.exits);
}

/* The API's own member; the monitor adds the rest (api_params.metrics). */
static void m_vm_metrics(struct rpc *r)
{
	struct api *api = r->api;
	json_t *res = json_object();

	if (res) {
		json_object_set_new(res, "agent", api__metrics_agent(api));
		if (api->p.metrics)
			api->p.metrics(api->p.opaque, res);
	}
	client_reply(r->c, r->id, res);
}

/*
 * vm.shutdown, once its answer went out: POWEROFF on a connection of its
 * own, through the same nonblocking machinery as every request. Its
 * deadlines are fixed when it starts (reaching the agent:
 * agent_timeout_ms; the RESULT: API_POWEROFF_ANSWER_MS more), so an
 * agent that trickles its bytes cannot stretch them, and nothing on the
 * API thread waits for the guest.
 */
void vm_poweroff_start(struct api *api)
{
	struct rpc r = { .api = api };
	struct kiln_buf b;
	struct call *k;

	k = call_new(&r, CALL_POWEROFF, false);
	if (!k) {
		if (api->p.shutdown_failed)
			api->p.shutdown_failed(api->p.opaque,
					       "no room for the power-off "
					       "request (too many in flight)");
		return;
	}
	k->deadline =
		api_now_ms() + api->agent_timeout_ms + API_POWEROFF_ANSWER_MS;
	kiln_buf__init(&b);
	call_start(k, KILN_MSG_POWEROFF, &b);
}

/* The agent could not be told: the monitor hears why, once. */
void vm_poweroff_failed(struct call *k, const char *why)
{
	struct api *api = k->api;

	if (k->replied)
		return;
	k->replied = true;
	if (api->p.shutdown_failed)
		api->p.shutdown_failed(api->p.opaque, why);
}

/* RESULT: the guest powers off now; ERROR: it will not. */
void vm_poweroff_frame(struct call *k, uint16_t type, uint16_t flags,
		       const uint8_t *p, size_t len)
{
	if (type == KILN_MSG_ERROR) {
		call_errno(k, p, len);
		return;
	}
	if (type != KILN_MSG_RESULT) {
		call_lost(k, "agent protocol error: unexpected message");
		return;
	}
	k->replied = true;
	k->done_frame = true;
	call_done(k);
}

static void m_vm_shutdown(struct rpc *r)
{
	if (!r->api->p.shutdown) {
		client_reply_error(r->c, r->id, API_E_NO_METHOD, NULL,
				   "vm.shutdown is not offered here");
		return;
	}
	client_reply(r->c, r->id, NULL);
	r->c->shutdown_after = true;
	api__event(r->api, "shutdown-requested", NULL);
}

/* {policy}: parsed completely by the monitor, or refused: the old stays. */
static void m_net_set_policy(struct rpc *r)
{
	json_t *policy = json_object_get(r->params, "policy");
	char err[API_POLICY_ERR_LEN] = "";
	int ret;

	if (!r->api->p.set_policy) {
		client_reply_error(r->c, r->id, API_E_NO_METHOD, NULL,
				   "net.setPolicy is not offered here");
		return;
	}
	if (!policy) {
		param_error(r, "policy: missing");
		return;
	}
	ret = r->api->p.set_policy(r->api->p.opaque, policy, err, sizeof(err));
	if (!ret) {
		client_reply(r->c, r->id, NULL);
		api__event(r->api, "policy-changed", NULL);
	} else if (ret == -EINVAL)
		param_error(r, "%s", err);
	else if (ret == -EOPNOTSUPP)
		client_reply_error(r->c, r->id, API_E_NO_METHOD, NULL,
				   "net.setPolicy: %s", err);
	else
		client_reply_error(r->c, r->id, API_E_INTERNAL, NULL,
				   "net.setPolicy: %s",
				   err[0] ? err : strerror(-ret));
}

/* vm.status's "net" object alone (the network facet's view). */
static void m_net_status(struct rpc *r)
{
	json_t *st = json_object(), *net;

	if (st && r->api->p.status)
		r->api->p.status(r->api->p.opaque, st);
	net = json_object_get(st, "net");
	if (!net) {
		json_decref(st);
		client_reply_error(r->c, r->id, API_E_NO_METHOD, NULL,
				   "net.status is not offered here");
		return;
	}
	client_reply(r->c, r->id, json_incref(net));
	json_decref(st);
}

/*
 * net.check's "dst": "A.B.C.D:PORT" or "NAME:PORT" into f (a name into
 * f->hostname); false once answered with the error.
 */
static bool param_dst(struct rpc *r, struct api_flow_check *f)
{
	const char *s, *colon;
	char host[sizeof(f->hostname)];
	struct in_addr a;
	unsigned long port;
	size_t n;
	char *end;

	if (!param_str(r, "dst", true, &s, &n))
		return false;
	colon = strrchr(s, ':');
	if (!colon || colon == s || (size_t)(colon - s) >= sizeof(host))
		return param_error(r, "dst: expected \"ADDRESS:PORT\" or "
				      "\"HOSTNAME:PORT\"");
	errno = 0;
	port = strtoul(colon + 1, &end, 10);
	if (!colon[1] || *end || errno || port < 1 || port > 65535)
		return param_error(r, "dst: the port must be 1 to 65535");
	memcpy(host, s, colon - s);
	host[colon - s] = '\0';
	f->port = port;
	if (inet_pton(AF_INET, host, &a) == 1)
		f->addr = a.s_addr;
	else
		snprintf(f->hostname, sizeof(f->hostname), "%s", host);
	return true;
}

json_t *api__flow_verdict(const struct net_decision *d)
{
	static const char *const verdicts[] = {
		[NET_VERDICT_DENY] = "deny",
		[NET_VERDICT_ALLOW] = "allow",
		[NET_VERDICT_ASK] = "ask",
		[NET_VERDICT_HTTP] = "allow",
	};
	unsigned int index;
	char key[8];
	json_t *o, *rule = json_null();

	/* The reasons a grant gives: "tcp grant N", "http grant N". */
	if (d->verdict != NET_VERDICT_DENY && d->verdict != NET_VERDICT_ASK &&
	    sscanf(d->reason, "%7[a-z] grant %u", key, &index) == 2)
		rule = json_pack("{s:s, s:I}", "key", key, "index",
				 (json_int_t)index);
	o = json_pack("{s:s, s:s, s:o}", "verdict", verdicts[d->verdict],
		      "reason", d->reason, "rule", rule);
	if (o && d->verdict == NET_VERDICT_HTTP)
		json_object_set_new(o, "intercepted", json_true());
	return o;
}

/* {proto, dst, hostname}: what the policy would decide, nothing opened. */
static void m_net_check(struct rpc *r)
{
	struct api_flow_check f = { 0 };
	char err[API_POLICY_ERR_LEN] = "";
	const char *proto, *name;
	json_t *res = NULL;
	size_t n;
	int ret;

	if (!r->api->p.check_flow) {
		client_reply_error(r->c, r->id, API_E_NO_METHOD, NULL,
				   "net.check is not offered here");
		return;
	}
	if (!param_str(r, "proto", true, &proto, &n) ||
	    !param_str(r, "hostname", false, &name, &n) || !param_dst(r, &f))
		return;
	if (strcmp(proto, "tcp") && strcmp(proto, "udp")) {
		param_error(r, "proto: expected \"tcp\" or \"udp\"");
		return;
	}
	f.udp = !strcmp(proto, "udp");
	if (name && f.hostname[0] && strcasecmp(name, f.hostname)) {
		param_error(r, "hostname: dst names another host");
		return;
	}
	if (name && n >= sizeof(f.hostname)) {
		param_error(r, "hostname: not a DNS name");
		return;
	}
	if (name)
		snprintf(f.hostname, sizeof(f.hostname), "%s", name);
	ret = r->api->p.check_flow(r->api->p.opaque, &f, &res, err,
				   sizeof(err));
	if (!ret)
		client_reply(r->c, r->id, res);
	else if (ret == -EINVAL)
		param_error(r, "%s", err);
	else if (ret == -EOPNOTSUPP)
		client_reply_error(r->c, r->id, API_E_NO_METHOD, NULL,
				   "net.check: %s", err);
	else
		client_reply_error(r->c, r->id, API_E_INTERNAL, NULL,
				   "net.check: %s",
				   err[0] ? err : strerror(-ret));
}

/* The monitor said no: API_E_VM with its errno, and its line. */
static void vm_error(struct rpc *r, const char *method, int ret,
		     const char *err)
{
	const char *name = strerrorname_np(-ret);
	json_t *data = json_pack("{s:s, s:I}", "errno", name ? name : "?",
				 "errnoValue", (json_int_t)-ret);

	client_reply_error(r->c, r->id, API_E_VM, data, "%s: %s", method,
			   err[0] ? err : strerror(-ret));
}

static bool offered(struct rpc *r, const char *method, const void *fn)
{
	if (fn)
		return true;
	client_reply_error(r->c, r->id, API_E_NO_METHOD, NULL,
			   "%s is not offered here", method);
	return false;
}

static void m_vm_pause(struct rpc *r)
{
	char err[API_VM_ERR_LEN] = "";
	int ret;

	if (!offered(r, "vm.pause", r->api->p.pause))
		return;
	ret = r->api->p.pause(r->api->p.opaque, err, sizeof(err));
	if (ret)
		vm_error(r, "vm.pause", ret, err);
	else
		client_reply(r->c, r->id, NULL);
}

static void m_vm_resume(struct rpc *r)
{
	char err[API_VM_ERR_LEN] = "";
	int ret;

	if (!offered(r, "vm.resume", r->api->p.resume))
		return;
	ret = r->api->p.resume(r->api->p.opaque, err, sizeof(err));
	if (ret)
		vm_error(r, "vm.resume", ret, err);
	else
		client_reply(r->c, r->id, NULL);
}

/* {dir, resume}: dir absolute; resume false unless given. */
static void m_vm_snapshot(struct rpc *r)
{
	char err[API_VM_ERR_LEN] = "";
	bool resume = false;
	const char *dir;
	size_t len;
	int ret;

	if (!offered(r, "vm.snapshot", r->api->p.snapshot) ||
	    !param_str(r, "dir", true, &dir, &len) ||
	    !param_bool(r, "resume", &resume))
		return;
	if (dir[0] != '/' || len >= PATH_MAX) {
		param_error(r, "dir: must be an absolute path");
		return;
	}
	ret = r->api->p.snapshot(r->api->p.opaque, dir, resume, err,
				 sizeof(err));
	if (ret)
		vm_error(r, "vm.snapshot", ret, err);
	else
		client_reply(
			r->c, r->id,
			json_pack("{s:s, s:b}", "dir", dir, "resumed", resume));
}

const struct api_method vm_methods[] = {
	{ "facts", m_facts },
	{ "vm.facts", m_vm_facts },
	{ "vm.status", m_vm_status },
	{ "vm.metrics", m_vm_metrics },
	{ "vm.shutdown", m_vm_shutdown },
	{ "vm.pause", m_vm_pause },
	{ "vm.resume", m_vm_resume },
	{ "vm.snapshot", m_vm_snapshot },
	{ "net.setPolicy", m_net_set_policy },
	{ "net.status", m_net_status },
	{ "net.check", m_net_check },
	{ NULL, NULL },
};
