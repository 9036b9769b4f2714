// SPDX-License-Identifier: GPL-2.0
/*
 * Control API processes: exec (output collected into one answer),
 * spawn and pty.open (output as stream notifications) and the requests
 * on their streams: write, closeStdin, kill, resize.
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lib/counter.h"
#include "proto/env.h"
#include "vmm/api/api-internal.h"

#define API_KILL_GRACE_MS  2000 /* killed group: wait for its exit */
#define API_EXEC_GRACE_MS  5000 /* past timeoutMs: the agent is stuck */
#define API_ENV_NAME_SHOWN 65	/* bytes of a bad env name an error repeats */
#define API_UID_INVALID	   0xffffffffLL /* (uid_t)-1: no uid */

/* Signals the process; past API_KILL_GRACE_MS call_tick() gives up. */
void proc_kill(struct call *k, int sig, uint64_t now)
{
	agent_send_u64(k, KILN_MSG_PROC_SIGNAL, KILN_T_SIGNAL, sig);
	k->killing = true;
	k->deadline = now + API_KILL_GRACE_MS;
}

static json_t *exit_params(struct call *k, const uint8_t *p, size_t len)
{
	uint64_t code = 0, sig = 0, timed_out = 0;
	struct kiln_tlv_iter it;
	const uint8_t *val;
	uint32_t vlen;
	uint16_t tag;
	json_t *o;

	kiln_tlv__iter(&it, p, len);
	while (kiln_tlv__next(&it, &tag, &val, &vlen) == 1) {
		if (tag == KILN_T_EXIT_CODE)
			kiln_tlv__u64(val, vlen, &code);
		else if (tag == KILN_T_SIGNAL)
			kiln_tlv__u64(val, vlen, &sig);
		else if (tag == KILN_T_TIMED_OUT)
			kiln_tlv__u64(val, vlen, &timed_out);
	}
	o = json_pack("{s:I, s:b}", "exitCode", (json_int_t)(code & 0xffff),
		      "timedOut", (int)!!timed_out);
	if (o && sig)
		json_object_set_new(o, "signal", json_integer(sig & 0xff));
	return o;
}

/*
 * exec-started and exec-exited: which command (kind, the request's id,
 * the stream), plus its pid; fields (stolen, NULL: none) added.
 */
static void proc_event(struct call *k, const char *type, json_t *fields)
{
	static const char *const kinds[] = {
		[CALL_EXEC] = "exec",
		[CALL_SPAWN] = "spawn",
		[CALL_PTY] = "pty",
	};
	json_t *o = fields ? fields : json_object();

	if (!o)
		return;
	json_object_set_new(
		o, "kind",
		json_string(k->kind < ARRAY_SIZE(kinds) && kinds[k->kind] ?
				    kinds[k->kind] :
				    "exec"));
	if (k->id)
		json_object_set(o, "id", k->id);
	if (k->stream)
		json_object_set_new(o, "stream", json_integer(k->stream));
	json_object_set_new(o, "pid", json_integer(k->pid));
	api__event(k->api, type, o);
}

/* exec's answer: res plus the pid and the output collected. */
json_t *proc_exec_result(struct call *k, json_t *res)
{
	json_object_set_new(res, "pid", json_integer(k->pid));
	json_object_set_new(
		res, "stdout",
		api_json_base64(bytequeue__peek(&k->out_acc), k->out_acc.len));
	json_object_set_new(
		res, "stderr",
		api_json_base64(bytequeue__peek(&k->err_acc), k->err_acc.len));
	if (k->out_trunc)
		json_object_set_new(res, "stdoutTruncated", json_true());
	if (k->err_trunc)
		json_object_set_new(res, "stderrTruncated", json_true());
	return res;
}

/* Output kept for exec's answer, within its budgets; the rest dropped. */
static void accumulate(struct call *k, struct bytequeue *q, bool *trunc,
		       const uint8_t *p, size_t len)
{
	size_t room = API_EXEC_OUTPUT_MAX - q->len;

	if (len > room) {
		*trunc = true;
		len = room;
	}
	if (len && (call_hold(k, len) || bytequeue__append(q, p, len)))
		*trunc = true;
}

static void proc_started(struct call *k, const uint8_t *p, size_t len)
{
	struct kiln_tlv_iter it;
	const uint8_t *val;
	uint32_t vlen;
	uint16_t tag;
	uint64_t pid = 0;

	/* Each one would queue stdin frames again: the agent is hostile. */
	if (k->started) {
		call_lost(k, "agent protocol error: process started twice");
		return;
	}
	kiln_tlv__iter(&it, p, len);
	while (kiln_tlv__next(&it, &tag, &val, &vlen) == 1)
		if (tag == KILN_T_PID)
			kiln_tlv__u64(val, vlen, &pid);
	k->pid = pid;
	k->started = true;
	counter__add(k->kind == CALL_EXEC  ? &k->api->counters.execs :
		     k->kind == CALL_SPAWN ? &k->api->counters.spawns :
					     &k->api->counters.ptys,
		     1);
	proc_event(k, "exec-started", NULL);
	if (k->killing) /* cancelled before it started: already signalled */
		return;
	if (k->kind == CALL_EXEC) {
		agent_send_data(k, KILN_MSG_PROC_STDIN, k->stdin_data,
				k->stdin_len, true);
		free(k->stdin_data);
		k->stdin_data = NULL;
		k->stdin_closed = true;
		return;
	}
	if (k->stdin_closed) /* spawn with "stdin": false */
		agent_send(k, KILN_MSG_PROC_STDIN, KILN_F_EOF, NULL, 0);
	call_reply(k, json_pack("{s:I, s:I}", "stream", (json_int_t)k->stream,
				"pid", (json_int_t)pid));
}

static void proc_output(struct call *k, bool err, const uint8_t *p, size_t len)
{
	if (k->kind == CALL_EXEC) {
		if (err)
			accumulate(k, &k->err_acc, &k->err_trunc, p, len);
		else
			accumulate(k, &k->out_acc, &k->out_trunc, p, len);
		return;
	}
	if (!len)
		return;
	client_notify_data(k->client, err ? "stream.stderr" : "stream.stdout",
			   k->stream, p, len);
}

static void proc_exit(struct call *k, const uint8_t *p, size_t len)
{
	json_t *res = exit_params(k, p, len);

	k->done_frame = true;
	counter__add(&k->api->counters.exits, 1);
	if (res)
		proc_event(k, "exec-exited", json_deep_copy(res));
	if (k->kind == CALL_EXEC) {
		if (k->cancelled) {
			json_decref(res);
			call_fail(k, API_E_ABORTED, NULL, "cancelled");
		} else {
			if (k->timed_out) {
				json_object_set_new(res, "exitCode",
						    json_integer(124));
				json_object_set_new(res, "timedOut",
						    json_true());
			}
			call_reply(k, proc_exec_result(k, res));
		}
	} else if (k->replied) {
		json_object_set_new(res, "stream", json_integer(k->stream));
		client_notify(k->client, "stream.exit", res);
	} else {
		json_decref(res);
		call_fail(k, API_E_ABORTED, NULL, "cancelled");
	}
	call_done(k);
}

/*
 * The command did not start: the guest's errno (call_errno), and when it
 * was the working directory that failed (the agent's ERROR carries T_CWD
 * then), "cwd" in the data too, so that a client can tell a bad directory
 * from a missing command, both ENOENT; likewise "user" for no such user
 * (T_USER), and "container" for no such container (T_CONTAINER).
 */
static void proc_error(struct call *k, const uint8_t *p, size_t len)
{
	struct kiln_tlv_iter it;
	const uint8_t *val;
	uint32_t vlen;
	uint16_t tag;
	char msg[256];
	json_t *data = call_errno_data(p, len, msg, sizeof(msg));

	kiln_tlv__iter(&it, p, len);
	while (data && kiln_tlv__next(&it, &tag, &val, &vlen) == 1)
		if (tag == KILN_T_CWD)
			api_json_guest_bytes(data, "cwd", val, vlen);
		else if (tag == KILN_T_USER)
			api_json_guest_bytes(data, "user", val, vlen);
		else if (tag == KILN_T_CONTAINER)
			api_json_guest_bytes(data, "container", val, vlen);
	call_fail(k, API_E_ERRNO, data, msg);
	call_done(k);
}

void proc_frame(struct call *k, uint16_t type, uint16_t flags, const uint8_t *p,
		size_t len)
{
	switch (type) {
	case KILN_MSG_PROC_STARTED:
		proc_started(k, p, len);
		break;
	case KILN_MSG_PROC_STDOUT:
	case KILN_MSG_PROC_STDERR:
		proc_output(k, type == KILN_MSG_PROC_STDERR, p, len);
		break;
	case KILN_MSG_PROC_EXIT:
		proc_exit(k, p, len);
		break;
	case KILN_MSG_ERROR:
		proc_error(k, p, len);
		break;
	default:
		call_lost(k, "agent protocol error: unexpected message");
	}
}

static const struct {
	const char *name;
	int sig;
} signal_names[] = {
	{ "HUP", SIGHUP },     { "INT", SIGINT },   { "QUIT", SIGQUIT },
	{ "KILL", SIGKILL },   { "USR1", SIGUSR1 }, { "USR2", SIGUSR2 },
	{ "PIPE", SIGPIPE },   { "ALRM", SIGALRM }, { "TERM", SIGTERM },
	{ "CONT", SIGCONT },   { "STOP", SIGSTOP }, { "TSTP", SIGTSTP },
	{ "WINCH", SIGWINCH },
};

static bool param_signal(struct rpc *r, int *sig)
{
	json_t *v = json_object_get(r->params, "signal");
	const char *s;
	size_t i;

	if (!v)
		return true;
	if (json_is_integer(v) && json_integer_value(v) >= 1 &&
	    json_integer_value(v) <= 64) {
		*sig = json_integer_value(v);
		return true;
	}
	if (json_is_string(v)) {
		s = json_string_value(v);
		if (!strncmp(s, "SIG", 3))
			s += 3;
		for (i = 0; i < ARRAY_SIZE(signal_names); i++) {
			if (!strcmp(s, signal_names[i].name)) {
				*sig = signal_names[i].sig;
				return true;
			}
		}
	}
	return param_error(r, "signal: expected 1 to 64 or a name such as "
			      "\"TERM\"");
}

/* One T_ENV field "key=value". */
static int put_kv(struct kiln_buf *b, const char *key, const char *value)
{
	char *kv;
	int ret;

	if (asprintf(&kv, "%s=%s", key, value) < 0)
		return -ENOMEM;
	ret = kiln_tlv__put_str(b, KILN_T_ENV, kv);
	free(kv);
	return ret;
}

/* A bad variable of env, named as the client wrote it (proto/env.h). */
static bool env_error(struct rpc *r, const char *name, size_t len,
		      const char *why)
{
	char shown[API_ENV_NAME_SHOWN];

	kiln_env__show(name, len, shown, sizeof(shown));
	return param_error(r, "env: variable \"%s\": %s", shown, why);
}

/*
 * env: an array of "NAME=value" or an object {NAME: value}, into T_ENV
 * fields; envMode: "replace" (the default: env is the whole environment)
 * or "merge" (env adds to the guest's default environment: T_ENV_MERGE,
 * which needs an agent with KILN_FEATURE_ENV_MERGE, *need).
 */
static bool param_env(struct rpc *r, struct kiln_buf *b, uint64_t *need)
{
	json_t *env = json_object_get(r->params, "env");
	const char *key, *s, *mode, *why;
	size_t i, n;
	json_t *v;
	int ret = 0;

	if (!param_str(r, "envMode", false, &mode, &n))
		return false;
	if (mode && strcmp(mode, "replace") && strcmp(mode, "merge"))
		return param_error(r, "envMode: expected \"replace\" or "
				      "\"merge\"");
	if (json_is_array(env)) {
		json_array_foreach(env, i, v)
		{
			s = json_string_value(v);
			if (!s)
				return param_error(r,
						   "env[%zu]: expected "
						   "\"NAME=value\"",
						   i);
			n = json_string_length(v);
			why = kiln_env__entry_error(s, n);
			if (why)
				return env_error(r, s, kiln_env__name_len(s, n),
						 why);
			ret = ret ?: kiln_tlv__put_bytes(b, KILN_T_ENV, s, n);
		}
	} else if (json_is_object(env)) {
		json_object_foreach(env, key, v)
		{
			n = strlen(key);
			if (!kiln_env__name_ok(key, n))
				return env_error(r, key, n,
						 !n ? "an empty name" :
						      "'=' in the name");
			s = json_string_value(v);
			if (!s || strlen(s) != json_string_length(v))
				return env_error(r, key, n,
						 "expected a string value "
						 "without NUL");
			ret = ret ?: put_kv(b, key, s);
		}
	} else if (env) {
		return param_error(r,
				   "env: expected an array of \"NAME=value\" "
				   "or an object");
	}
	if (mode && !strcmp(mode, "merge")) {
		ret = ret ?: kiln_tlv__put_u64(b, KILN_T_ENV_MERGE, 1);
		*need |= KILN_FEATURE_ENV_MERGE;
	}
	if (ret)
		return param_error(r, "argv and env: too long (limit %u bytes)",
				   KILN_FRAME_MAX);
	return true;
}

/*
 * user: a name or a uid of the guest's /etc/passwd, a string or an
 * integer, sent as T_USER (a uid in decimal); needs an agent with
 * KILN_FEATURE_USER (*need). The guest resolves it: an unknown user is
 * its ENOENT, with "user" in the error's data.
 */
static bool param_user(struct rpc *r, struct kiln_buf *b, uint64_t *need)
{
	json_t *v = json_object_get(r->params, "user");
	char uid[16];
	const char *s;
	size_t n;

	if (!v)
		return true;
	if (json_is_integer(v)) {
		if (json_integer_value(v) < 0 ||
		    json_integer_value(v) >= API_UID_INVALID)
			return param_error(r, "user: a uid is from 0 to %llu",
					   API_UID_INVALID - 1);
		snprintf(uid, sizeof(uid), "%lld",
			 (long long)json_integer_value(v));
		s = uid;
		n = strlen(uid);
	} else if (!json_is_string(v)) {
		return param_error(r, "user: expected a user name or a uid");
	} else if (!param_str(r, "user", false, &s, &n)) {
		return false;
	}
	if (!n || n > KILN_USER_MAX || strpbrk(s, ":\n"))
		return param_error(r,
				   "user: expected a user name or a uid (1 to "
				   "%u bytes, no ':' or newline)",
				   KILN_USER_MAX);
	*need |= KILN_FEATURE_USER;
	if (kiln_tlv__put_bytes(b, KILN_T_USER, s, n))
		return param_error(r, "argv and env: too long (limit %u bytes)",
				   KILN_FRAME_MAX);
	return true;
}

/*
 * argv, env, envMode, cwd, user and timeoutMs of exec, spawn and
 * pty.open.
 */
static bool param_process(struct rpc *r, struct kiln_buf *b, bool argv_required,
			  uint64_t *timeout_ms, uint64_t *need)
{
	json_t *argv = json_object_get(r->params, "argv");
	const char *cwd;
	json_t *v;
	size_t i, n;
	int ret = 0;

	if (!argv && !argv_required) {
		ret = kiln_tlv__put_str(b, KILN_T_ARG, "/bin/sh");
		ret = ret ?: kiln_tlv__put_str(b, KILN_T_ARG, "-l");
	} else if (!json_is_array(argv) || !json_array_size(argv)) {
		return param_error(r, "argv: expected a non-empty array of "
				      "strings");
	}
	json_array_foreach(argv, i, v)
	{
		if (!json_is_string(v) ||
		    strlen(json_string_value(v)) != json_string_length(v))
			return param_error(r, "argv[%zu]: expected a string",
					   i);
		ret = ret   ?:
			      kiln_tlv__put_str(b, KILN_T_ARG,
						json_string_value(v));
	}
	if (ret)
		return param_error(r, "argv and env: too long (limit %u bytes)",
				   KILN_FRAME_MAX);
	if (!param_env(r, b, need))
		return false;
	if (!param_user(r, b, need) || !container_proc_params(r, b, need) ||
	    !param_str(r, "cwd", false, &cwd, &n))
		return false;
	if (cwd)
		ret = ret ?: kiln_tlv__put_bytes(b, KILN_T_CWD, cwd, n);
	if (!param_uint(r, "timeoutMs", UINT32_MAX, timeout_ms))
		return false;
	if (*timeout_ms)
		ret = ret   ?:
			      kiln_tlv__put_u64(b, KILN_T_TIMEOUT_MS,
						*timeout_ms);
	if (ret)
		return param_error(r, "argv and env: too long (limit %u bytes)",
				   KILN_FRAME_MAX);
	return true;
}

static void m_exec(struct rpc *r)
{
	uint64_t timeout = 0, need = 0;
	struct kiln_buf b;
	uint8_t *in;
	size_t in_len;
	struct call *k;

	kiln_buf__init(&b);
	if (!param_process(r, &b, true, &timeout, &need) ||
	    !param_b64(r, "stdin", &in, &in_len))
		goto out;
	k = call_new(r, CALL_EXEC, false);
	if (!k) {
		free(in);
		goto out;
	}
	k->need_features = need;
	k->stdin_data = in;
	k->stdin_len = in_len;
	if (timeout)
		k->deadline = api_now_ms() + timeout + API_EXEC_GRACE_MS;
	call_start(k, KILN_MSG_PROC_START, &b);
out:
	kiln_buf__free(&b);
}

static void m_spawn(struct rpc *r)
{
	uint64_t timeout = 0, need = 0;
	struct kiln_buf b;
	bool in = true;
	struct call *k;

	kiln_buf__init(&b);
	if (!r->id) {
		param_error(r, "spawn needs a request id");
		goto out;
	}
	if (!param_process(r, &b, true, &timeout, &need) ||
	    !param_bool(r, "stdin", &in))
		goto out;
	k = call_new(r, CALL_SPAWN, true);
	if (!k)
		goto out;
	k->need_features = need;
	k->stdin_closed = !in;
	call_start(k, KILN_MSG_PROC_START, &b);
out:
	kiln_buf__free(&b);
}

static void m_pty_open(struct rpc *r)
{
	uint64_t timeout = 0, rows = 24, cols = 80, need = 0;
	struct kiln_buf b;
	struct call *k;

	kiln_buf__init(&b);
	if (!r->id) {
		param_error(r, "pty.open needs a request id");
		goto out;
	}
	if (!param_process(r, &b, false, &timeout, &need) ||
	    !param_uint(r, "rows", 65535, &rows) ||
	    !param_uint(r, "cols", 65535, &cols))
		goto out;
	if (kiln_tlv__put_u64(&b, KILN_T_PTY, 1) ||
	    kiln_tlv__put_u64(&b, KILN_T_ROWS, rows ? rows : 24) ||
	    kiln_tlv__put_u64(&b, KILN_T_COLS, cols ? cols : 80)) {
		param_error(r, "argv and env: too long");
		goto out;
	}
	k = call_new(r, CALL_PTY, true);
	if (!k)
		goto out;
	k->need_features = need;
	call_start(k, KILN_MSG_PROC_START, &b);
out:
	kiln_buf__free(&b);
}

#define KINDS_PROC (1U << CALL_SPAWN | 1U << CALL_PTY)

static void m_stream_write(struct rpc *r)
{
	struct call *k = call_find_stream(r, KINDS_PROC);
	bool eof = false;
	uint8_t *data;
	size_t len;

	if (!k || !param_b64(r, "data", &data, &len))
		return;
	if (!param_bool(r, "eof", &eof))
		goto out;
	if (k->stdin_closed) {
		param_error(r, "stream %llu: stdin is closed",
			    (unsigned long long)k->stream);
		goto out;
	}
	if (k->out_broken) {
		client_reply_error(r->c, r->id, API_E_AGENT, NULL,
				   "the guest stopped reading this stream");
		goto out;
	}
	if (len || eof)
		agent_send_data(k, KILN_MSG_PROC_STDIN, data, len, eof);
	k->stdin_closed = eof;
	call_write_done(k, r->id);
out:
	free(data);
}

static void m_stream_close_stdin(struct rpc *r)
{
	struct call *k = call_find_stream(r, KINDS_PROC);

	if (!k)
		return;
	if (!k->stdin_closed)
		agent_send(k, KILN_MSG_PROC_STDIN, KILN_F_EOF, NULL, 0);
	k->stdin_closed = true;
	client_reply(r->c, r->id, NULL);
}

static void m_stream_kill(struct rpc *r)
{
	struct call *k = call_find_stream(r, KINDS_PROC);
	int sig = SIGTERM;

	if (!k || !param_signal(r, &sig))
		return;
	agent_send_u64(k, KILN_MSG_PROC_SIGNAL, KILN_T_SIGNAL, sig);
	client_reply(r->c, r->id, NULL);
}

static void m_pty_resize(struct rpc *r)
{
	struct call *k = call_find_stream(r, 1U << CALL_PTY);
	uint64_t rows = 0, cols = 0;
	struct kiln_buf b;

	if (!k || !param_uint(r, "rows", 65535, &rows) ||
	    !param_uint(r, "cols", 65535, &cols))
		return;
	if (!rows || !cols) {
		param_error(r, "rows, cols: expected 1 to 65535");
		return;
	}
	kiln_buf__init(&b);
	if (!kiln_tlv__put_u64(&b, KILN_T_ROWS, rows) &&
	    !kiln_tlv__put_u64(&b, KILN_T_COLS, cols))
		agent_send(k, KILN_MSG_PROC_RESIZE, 0, b.data, b.len);
	kiln_buf__free(&b);
	client_reply(r->c, r->id, NULL);
}

const struct api_method proc_methods[] = {
	{ "exec", m_exec },
	{ "spawn", m_spawn },
	{ "spawn.write", m_stream_write },
	{ "spawn.closeStdin", m_stream_close_stdin },
	{ "spawn.kill", m_stream_kill },
	{ "pty.open", m_pty_open },
	{ "pty.write", m_stream_write },
	{ "pty.resize", m_pty_resize },
	{ "pty.kill", m_stream_kill },
	{ NULL, NULL },
};
