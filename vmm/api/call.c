// SPDX-License-Identifier: GPL-2.0
/*
 * Control API calls: one request's life on its own agent connection,
 * from call_new() to reap(): how it is answered once, how it fails, is
 * cancelled or times out, and the stream numbers later requests use.
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "vmm/api/api-internal.h"

#define API_CLIENT_CALLS 64U /* requests in flight per client */

/*
 * A call for request r, counted against the limits (NULL, answered with
 * API_E_LIMIT or out of memory, when over); stream: it gets a number.
 */
struct call *call_new(struct rpc *r, enum call_kind kind, bool stream)
{
	struct api *api = r->api;
	struct call *k;

	if (api->nr_calls >= API_MAX_CALLS ||
	    (r->c && r->c->nr_calls >= API_CLIENT_CALLS)) {
		client_reply_error(
			r->c, r->id, API_E_LIMIT, NULL,
			"too many requests in flight (%u per client, %u "
			"in all)",
			API_CLIENT_CALLS, API_MAX_CALLS);
		return NULL;
	}
	if (stream && api->nr_streams >= API_MAX_STREAMS) {
		client_reply_error(r->c, r->id, API_E_LIMIT, NULL,
				   "too many streams open (limit %u)",
				   API_MAX_STREAMS);
		return NULL;
	}
	k = calloc(1, sizeof(*k));
	if (!k) {
		client_reply_error(r->c, r->id, API_E_INTERNAL, NULL,
				   "out of memory");
		return NULL;
	}
	k->api = api;
	k->client = r->c;
	k->id = json_incref(r->id);
	k->kind = kind;
	k->fd = -1;
	k->st = AG_WAIT;
	kiln_buf__init(&k->req);
	if (stream) {
		k->stream = ++api->next_stream;
		k->pending = json_array();
		api->nr_streams++;
	}
	if (kind == CALL_READDIR || kind == CALL_FACTS)
		k->entries = json_array();
	else if (kind == CALL_VM_FACTS)
		k->entries = json_deep_copy(api->config_facts);
	k->next = api->calls;
	api->calls = k;
	api->nr_calls++;
	if (r->c)
		r->c->nr_calls++;
	return k;
}

/* Takes the request payload b; the call runs from here. */
void call_start(struct call *k, uint16_t type, struct kiln_buf *b)
{
	uint64_t now = api_now_ms();

	/*
	 * A scoped socket's request runs as its persona's uid in the guest,
	 * whatever it is; an agent that could not do that never gets it.
	 */
	if (k->client && k->client->grant) {
		if (kiln_tlv__put_u64(b, KILN_T_AS_UID,
				      k->client->grant->uid)) {
			kiln_buf__free(b);
			call_fail(k, API_E_INTERNAL, NULL, "out of memory");
			call_done(k);
			return;
		}
		k->need_features |= KILN_FEATURE_CONFINE;
	}
	k->req = *b;
	kiln_buf__init(b);
	k->req_type = type;
	k->connect_deadline = now + k->api->agent_timeout_ms;
	agent_try_open(k, now);
}

/* exec, spawn, pty.open: the agent runs a process for it. */
bool call_is_proc(const struct call *k)
{
	return k->kind == CALL_EXEC || k->kind == CALL_SPAWN ||
	       k->kind == CALL_PTY;
}

/* The writes waiting for room: all answered ok (code 0) or failed. */
void call_flush_pending(struct call *k, int code, const char *why, json_t *data)
{
	size_t i;
	json_t *id;

	json_array_foreach(k->pending, i, id)
	{
		if (code)
			client_reply_error(k->client,
					   json_is_null(id) ? NULL : id, code,
					   json_deep_copy(data), "%s", why);
		else
			client_reply(k->client, json_is_null(id) ? NULL : id,
				     NULL);
	}
	json_array_clear(k->pending);
}

/* The request's own answer, once. */
void call_reply(struct call *k, json_t *result)
{
	if (k->replied) {
		json_decref(result);
		return;
	}
	k->replied = true;
	client_reply(k->client, k->id, result);
}

/*
 * The request failed. vm.facts still answers, with the config facts and
 * what went wrong with the guest's; a running stream ends instead.
 */
void call_fail(struct call *k, int code, json_t *data, const char *why)
{
	if (k->kind == CALL_POWEROFF) {
		json_decref(data);
		vm_poweroff_failed(k, why);
		return;
	}
	if (k->kind == CALL_VM_FACTS && !k->replied) {
		json_t *res = json_pack("{s:O, s:{s:i, s:o}}", "facts",
					k->entries, "guestError", "code", code,
					"message", api_json_str(why));

		if (res && data)
			json_object_set_new(json_object_get(res, "guestError"),
					    "data", data);
		else
			json_decref(data);
		call_reply(k, res);
		return;
	}
	if (k->pending)
		call_flush_pending(k, code, why, data);
	if (k->kind == CALL_WRITE && k->replied) {
		/* An upload stream: fs.close or the next fs.write hears it. */
		if (k->has_close_id) {
			client_reply_error(k->client, k->close_id, code, data,
					   "%s", why);
			k->has_close_id = false;
			return;
		}
		if (!k->error)
			k->error = json_pack("{s:i, s:o, s:o*}", "code", code,
					     "message", api_json_str(why),
					     "data", data);
		else
			json_decref(data);
		k->parked = true;
		return;
	}
	if ((k->kind == CALL_SPAWN || k->kind == CALL_PTY) && k->replied) {
		json_t *p =
			json_pack("{s:I, s:o}", "stream", (json_int_t)k->stream,
				  "error", api_json_str(why));

		if (p && data)
			json_object_set_new(p, "errorData", data);
		else
			json_decref(data);
		client_notify(k->client, "stream.exit", p);
		return;
	}
	if (k->replied) {
		json_decref(data);
		return;
	}
	k->replied = true;
	client_reply_error(k->client, k->id, code, data, "%s", why);
}

/* Drops the agent connection and what was queued on it. */
void call_close_fd(struct call *k)
{
	if (k->fd >= 0) {
		close(k->fd);
		if (k->api->p.fds)
			fd_budget__put(k->api->p.fds, 1);
	}
	k->fd = -1;
	bytequeue__free(&k->ain);
	bytequeue__free(&k->aout);
}

/* Finished: no more agent traffic; freed by reap(). */
void call_done(struct call *k)
{
	if (k->dead)
		return;
	if (k->parked && k->client) {
		/* Its client hears why at the next fs.write or fs.close. */
		call_close_fd(k);
		k->st = AG_CLOSED;
		return;
	}
	if (!k->replied && k->client)
		call_fail(k, API_E_INTERNAL, NULL, "request ended unanswered");
	if (k->has_close_id) {
		client_reply_error(k->client, k->close_id, API_E_AGENT, NULL,
				   "upload ended");
		k->has_close_id = false;
	}
	if (k->pending)
		call_flush_pending(k, API_E_AGENT, "stream ended", NULL);
	call_close_fd(k);
	k->st = AG_CLOSED;
	k->dead = true;
}

void call_lost(struct call *k, const char *why)
{
	call_fail(k, API_E_AGENT, NULL, why);
	call_done(k);
}

/* An ERROR frame: the guest's errno, its name and maybe a message. */
json_t *call_errno_data(const uint8_t *p, size_t len, char *msg, size_t msglen)
{
	const char *name = NULL;
	const uint8_t *val;
	struct kiln_tlv_iter it;
	uint64_t value = EIO;
	uint32_t vlen, name_len = 0;
	uint16_t tag;

	msg[0] = 0;
	kiln_tlv__iter(&it, p, len);
	while (kiln_tlv__next(&it, &tag, &val, &vlen) == 1) {
		if (tag == KILN_T_ERRNO)
			kiln_tlv__u64(val, vlen, &value);
		else if (tag == KILN_T_ERRNAME)
			name = (const char *)val, name_len = vlen;
		else if (tag == KILN_T_MESSAGE)
			snprintf(msg, msglen, "%.*s",
				 (int)(vlen < 200 ? vlen : 200), val);
	}
	if (!name) {
		name = kiln_errno__name(value);
		name_len = strlen(name);
	}
	if (!msg[0])
		snprintf(msg, msglen, "%s", strerror(value));
	return json_pack("{s:o, s:I}", "errno",
			 api_json_lossy((const uint8_t *)name, name_len),
			 "errnoValue", (json_int_t)value);
}

void call_errno(struct call *k, const uint8_t *p, size_t len)
{
	char msg[256];
	json_t *data = call_errno_data(p, len, msg, sizeof(msg));

	call_fail(k, API_E_ERRNO, data, msg);
	call_done(k);
}

/* Stop a call whose answer nobody wants or that was cancelled. */
void call_abort(struct call *k, bool cancelled)
{
	k->cancelled = cancelled;
	if (call_is_proc(k) && k->st == AG_ACTIVE && !k->done_frame) {
		/* The agent starts it before it reads the signal. */
		proc_kill(k, SIGKILL, api_now_ms());
		return;
	}
	if (cancelled)
		call_fail(k, API_E_ABORTED, NULL, "cancelled");
	k->parked = false; /* an upload's error is nobody's business now */
	call_done(k);
}

static bool result_more(const uint8_t *p, size_t len)
{
	struct kiln_tlv_iter it;
	const uint8_t *val;
	uint32_t vlen;
	uint16_t tag;
	uint64_t v = 0;

	kiln_tlv__iter(&it, p, len);
	while (kiln_tlv__next(&it, &tag, &val, &vlen) == 1)
		if (tag == KILN_T_MORE)
			kiln_tlv__u64(val, vlen, &v);
	return v == 1;
}

/*
 * Charges n more bytes held for k's answer against the API's budgets
 * (api.h): 0, -E2BIG past the answer's own, -ENOBUFS past its client's
 * or the API's.
 */
int call_hold(struct call *k, size_t n)
{
	struct api *api = k->api;
	struct client *c = k->client;

	if (k->held + n > API_RESULT_MAX)
		return -E2BIG;
	if (api->held + n > API_HELD_MAX ||
	    (c && c->held + n > API_CLIENT_HELD_MAX))
		return -ENOBUFS;
	k->held += n;
	api->held += n;
	if (c)
		c->held += n;
	return 0;
}

/* The answer outgrew a budget (call_hold's err): fail, naming it. */
void call_fail_held(struct call *k, int err)
{
	if (err == -E2BIG)
		call_fail(
			k, API_E_LIMIT,
			json_pack("{s:I}", "limit", (json_int_t)API_RESULT_MAX),
			"answer larger than the API's limit");
	else
		call_fail(k, API_E_LIMIT,
			  json_pack("{s:I}", "limit",
				    (json_int_t)API_CLIENT_HELD_MAX),
			  "too many answers being collected at once");
	call_done(k);
}

/*
 * fs.readDir with stream: a frame's entries go out as one notification
 * and are held no longer; the client's output bound (API_OUT_HIGH) then
 * stops reading the agent, so a huge directory is never held whole.
 */
static void list_stream_out(struct call *k)
{
	size_t n = json_array_size(k->entries);

	if (n)
		client_notify(k->client, "fs.entries",
			      json_pack("{s:O, s:O}", "id", k->id, "entries",
					k->entries));
	k->bytes += n;
	json_array_clear(k->entries);
	k->api->held -= k->held;
	if (k->client)
		k->client->held -= k->held;
	k->held = 0;
}

/*
 * RESULT frames with lists (fs.readDir's T_ENTRY, the facts' T_FACT):
 * each field tagged tag becomes an element of k->entries through entry();
 * the last frame (no T_MORE) answers { key: entries }.
 */
void call_list_result(struct call *k, const uint8_t *p, size_t len,
		      uint16_t tag, json_t *(*entry)(const uint8_t *, size_t),
		      const char *key)
{
	struct kiln_tlv_iter it;
	const uint8_t *val;
	uint32_t vlen;
	uint16_t t;
	json_t *e;
	int ret;

	kiln_tlv__iter(&it, p, len);
	while (kiln_tlv__next(&it, &t, &val, &vlen) == 1) {
		if (t != tag)
			continue;
		if (!k->streamed &&
		    json_array_size(k->entries) >= API_READDIR_MAX) {
			call_fail(k, API_E_LIMIT, NULL,
				  "more directory entries than the API's "
				  "limit");
			call_done(k);
			return;
		}
		e = entry(val, vlen);
		ret = e ? call_hold(k, api_json_weight(e)) : -ENOMEM;
		if (ret) {
			json_decref(e);
			if (ret == -ENOMEM)
				call_lost(k, "out of memory");
			else
				call_fail_held(k, ret);
			return;
		}
		json_array_append_new(k->entries, e);
	}
	if (k->streamed)
		list_stream_out(k);
	if (result_more(p, len))
		return;
	k->done_frame = true;
	if (k->streamed)
		call_reply(k,
			   json_pack("{s:I}", "count", (json_int_t)k->bytes));
	else
		call_reply(k, json_pack("{s:O}", key, k->entries));
	call_done(k);
}

/* The live stream params.stream of this client, of one of the kinds. */
struct call *call_find_stream(struct rpc *r, unsigned int kinds)
{
	json_t *v = json_object_get(r->params, "stream");
	struct call *k;
	json_int_t s;

	if (!json_is_integer(v) || json_integer_value(v) <= 0) {
		param_error(r, "stream: expected a stream id");
		return NULL;
	}
	s = json_integer_value(v);
	for (k = r->api->calls; k; k = k->next)
		if (!k->dead && k->client == r->c && k->replied &&
		    k->stream == (uint64_t)s && (kinds & 1U << k->kind))
			return k;
	client_reply_error(r->c, r->id, API_E_INVALID_PARAMS, NULL,
			   "stream %lld: no such stream", (long long)s);
	return NULL;
}

/* Answer a write now, or once the agent has taken most of the bytes. */
void call_write_done(struct call *k, json_t *id)
{
	if (k->aout.len <= API_AGENT_OUT_HIGH)
		client_reply(k->client, id, NULL);
	else
		json_array_append(k->pending, id ? id : json_null());
}

/* Retries, the agent's time to answer, kills that take too long. */
void call_tick(struct call *k, uint64_t now)
{
	if (k->st == AG_WAIT && now >= k->retry_at) {
		agent_try_open(k, now);
		return;
	}
	if ((k->st == AG_CONNECT || k->st == AG_HELLO) &&
	    k->kind != CALL_PROBE && now >= k->connect_deadline) {
		call_fail(k, API_E_AGENT, NULL,
			  "guest agent did not answer in time");
		call_done(k);
		return;
	}
	if (!k->deadline || now < k->deadline)
		return;
	k->deadline = 0;
	if (k->kind == CALL_PROBE) {
		mounts_timeout(k);
		return;
	}
	if (k->st != AG_ACTIVE || !call_is_proc(k)) {
		call_fail(k, API_E_TIMEOUT, NULL,
			  "timed out before the guest agent answered");
		call_done(k);
		return;
	}
	if (!k->killing) {
		/* exec: the agent should have ended it at timeoutMs */
		proc_kill(k, SIGKILL, now);
		k->stdin_closed = true;
		k->timed_out = true;
		return;
	}
	if (k->timed_out && !k->cancelled)
		call_reply(k, proc_exec_result(k, json_pack("{s:i, s:b}",
							    "exitCode", 124,
							    "timedOut", 1)));
	else if (k->cancelled)
		call_fail(k, API_E_ABORTED, NULL, "cancelled");
	else
		call_fail(k, API_E_TIMEOUT, NULL,
			  "the process did not end after SIGKILL");
	call_done(k);
}

/* When call_tick() has something to do for k, in ms; 0: never. */
uint64_t call_next_timer(const struct call *k)
{
	uint64_t t = 0;

	if (k->st == AG_WAIT)
		t = k->retry_at;
	else if ((k->st == AG_CONNECT || k->st == AG_HELLO) &&
		 k->kind != CALL_PROBE)
		t = k->connect_deadline;
	if (k->deadline && (!t || k->deadline < t))
		t = k->deadline;
	return t;
}

/* Frees a dead call (reap()), uncounting it. */
void call_free(struct api *api, struct call *k)
{
	api->held -= k->held;
	if (k->client)
		k->client->held -= k->held;
	api->nr_calls--;
	if (k->stream)
		api->nr_streams--;
	if (k->client)
		k->client->nr_calls--;
	call_close_fd(k);
	kiln_buf__free(&k->req);
	bytequeue__free(&k->out_acc);
	bytequeue__free(&k->err_acc);
	json_decref(k->id);
	json_decref(k->pending);
	json_decref(k->close_id);
	json_decref(k->error);
	json_decref(k->entries);
	free(k->stdin_data);
	free(k->upload);
	free(k->denied);
	free(k);
}

/* Stops a request by its id, or a stream by its number. */
static void m_cancel(struct rpc *r)
{
	json_t *target = json_object_get(r->params, "id");
	json_t *sv = json_object_get(r->params, "stream");
	struct call *k;

	if (!target && !sv)
		return (void)param_error(r, "expected id or stream");
	if (sv && (!json_is_integer(sv) || json_integer_value(sv) <= 0))
		return (void)param_error(r, "stream: expected a stream id");
	for (k = r->api->calls; k; k = k->next) {
		if (k->dead || k->client != r->c)
			continue;
		if (sv && k->stream == (uint64_t)json_integer_value(sv))
			break;
		if (target && k->id && json_equal(k->id, target) &&
		    (!k->replied || k->stream))
			break;
	}
	if (k)
		call_abort(k, true);
	client_reply(r->c, r->id, json_pack("{s:b}", "cancelled", k != NULL));
}

const struct api_method call_methods[] = {
	{ "cancel", m_cancel },
	{ NULL, NULL },
};
