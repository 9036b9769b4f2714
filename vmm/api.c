// SPDX-License-Identifier: GPL-2.0
/*
 * The control API: a JSON-RPC 2.0 server on a Unix socket, one thread with
 * a poll loop over the listening socket, the clients and one agent
 * connection per request in flight (see api.h, Documentation/api.md).
 *
 * Everything is nonblocking and bounded: a client's request line is at
 * most API_MAX_MESSAGE bytes; an agent connection holds at most one frame
 * being read plus what it has to send. Backpressure both ways: an agent
 * connection whose client has more than API_OUT_HIGH bytes unsent is not
 * read (the guest's writes then stop on vsock credit), and a client is not
 * read while it has API_OUT_HIGH bytes unsent or while one of its agent
 * connections has 4 * API_AGENT_OUT_HIGH bytes to send (spawn.write and
 * fs.write answer only once their bytes are below API_AGENT_OUT_HIGH, so a
 * client that waits for answers never gets there).
 *
 * Objects die in two steps: a client or call is marked dead where the
 * event happens and freed by reap() between poll rounds, so no handler
 * frees something a caller still holds.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "lib/bytequeue.h"
#include "lib/compiler.h"
#include "proto/tlv.h"
#include "lib/base64.h"
#include "vmm/api.h"

#define API_CLIENT_CALLS     64U   /* requests in flight per client */
#define API_READ_CHUNK	     65536 /* one read() from a socket */
#define API_RETRY_MS	     100   /* between attempts to reach the agent */
#define API_PROBE_MS	     200   /* between readiness probes */
#define API_AGENT_TIMEOUT_MS 10000 /* default agent_timeout_ms */
#define API_KILL_GRACE_MS    2000  /* killed group: wait for its exit */
#define API_EXEC_GRACE_MS    5000  /* past timeoutMs: the agent is stuck */
#define API_CONNECT_LINE_MAX 64	   /* "OK <port>\n" from a vsock device */
#define API_STUFFED	     (4 * API_AGENT_OUT_HIGH)

/* ---- objects ------------------------------------------------------------- */

enum call_kind {
	CALL_PROBE,
	CALL_EXEC,
	CALL_SPAWN,
	CALL_PTY,
	CALL_STAT,
	CALL_READDIR,
	CALL_READ,
	CALL_WRITE,
	CALL_MKDIR,
	CALL_REMOVE,
	CALL_RENAME,
	CALL_FACTS,
	CALL_VM_FACTS,
};

enum agent_state {
	AG_WAIT,    /* not connected: (re)try at retry_at */
	AG_CONNECT, /* vsock: CONNECT sent, waiting for "OK" */
	AG_HELLO,   /* waiting for the agent's HELLO */
	AG_ACTIVE,  /* request sent */
	AG_CLOSED,
};

struct api;

struct client {
	struct api *api;
	int fd;
	struct bytequeue in, out;
	size_t scanned; /* bytes of in already searched for '\n' */
	unsigned int nr_calls;
	bool read_eof;	     /* half-closed: answer, then close */
	bool closing;	     /* flush out, then close (protocol error) */
	bool shutdown_after; /* vm.shutdown once out is flushed */
	bool dead;
	struct client *next;
};

struct call {
	struct api *api;
	struct client *client; /* NULL once the client is gone */
	json_t *id;	       /* request id; NULL: a notification */
	enum call_kind kind;
	enum agent_state st;
	int fd;
	int last_err; /* why the agent could not be reached */
	bool dead;
	bool replied;	       /* the request's answer went out */
	bool out_broken;       /* the agent stopped reading: drop writes */
	bool done_frame;       /* the last message arrived */
	struct bytequeue ain;  /* from the agent: a partial frame */
	struct bytequeue aout; /* to the agent */
	struct kiln_buf req;
	uint16_t req_type;
	uint64_t connect_deadline, retry_at, deadline; /* ms, 0: none */

	/* streams: spawn, pty, fs.writeFile with stream */
	uint64_t stream;
	json_t *pending;  /* ids of write calls waiting for room */
	json_t *close_id; /* fs.close waiting for the RESULT */
	bool has_close_id;
	json_t *error; /* an upload's failure, for later writes */
	bool parked;   /* failed upload kept for its fs.write/fs.close */

	/* processes */
	int64_t pid;
	bool started, stdin_closed, killing;
	bool cancelled;	     /* answer with API_E_ABORTED */
	bool timed_out;	     /* exec: the host's backstop killed it */
	uint8_t *stdin_data; /* exec: written once started */
	size_t stdin_len;
	struct bytequeue out_acc, err_acc; /* exec output */
	bool out_trunc, err_trunc;

	/* files */
	bool streamed;	 /* fs.readFile: chunks as notifications */
	uint64_t offset; /* fs.readFile: where the data starts */
	uint64_t bytes;	 /* data bytes seen */
	json_t *entries; /* fs.readDir, facts */
	uint8_t *upload; /* fs.writeFile in one call */
	size_t upload_len;

	struct call *next;
};

enum ref_kind { REF_WAKE, REF_LISTEN, REF_CLIENT, REF_CALL };

struct pref {
	enum ref_kind kind;
	void *ptr;
	bool reading; /* POLLIN was asked for */
};

struct api {
	struct api_params p;
	char *path;
	json_t *config_facts;
	int listen_fd, wake_fd;
	pthread_t thread;
	bool started;
	atomic_bool stop;
	bool agent_ready, shutdown_called;
	unsigned int agent_timeout_ms;

	struct client *clients;
	unsigned int nr_clients;
	struct call *calls;
	unsigned int nr_calls, nr_streams;
	uint64_t next_stream;

	struct pollfd *pfds;
	struct pref *refs;
	size_t pfd_cap;
	uint8_t rbuf[API_READ_CHUNK];
};

static uint64_t now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static int set_nonblock(int fd)
{
	int fl = fcntl(fd, F_GETFL);

	if (fl < 0 || fcntl(fd, F_SETFL, fl | O_NONBLOCK) < 0)
		return -errno;
	return 0;
}

/* ---- strings from the guest ---------------------------------------------- */

/* Length of the valid UTF-8 sequence at p (RFC 3629), 0 if invalid. */
static size_t utf8_seq(const uint8_t *p, size_t n)
{
	uint32_t cp;
	size_t len, i;

	if (p[0] < 0x80)
		return 1;
	if (p[0] >= 0xc2 && p[0] <= 0xdf)
		len = 2, cp = p[0] & 0x1f;
	else if (p[0] >= 0xe0 && p[0] <= 0xef)
		len = 3, cp = p[0] & 0x0f;
	else if (p[0] >= 0xf0 && p[0] <= 0xf4)
		len = 4, cp = p[0] & 0x07;
	else
		return 0;
	if (n < len)
		return 0;
	for (i = 1; i < len; i++) {
		if ((p[i] & 0xc0) != 0x80)
			return 0;
		cp = cp << 6 | (p[i] & 0x3f);
	}
	if ((len == 3 && cp < 0x800) || (len == 4 && cp < 0x10000) ||
	    cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
		return 0;
	return len;
}

static bool utf8_valid(const uint8_t *p, size_t n)
{
	size_t i, l;

	for (i = 0; i < n; i += l) {
		l = utf8_seq(p + i, n - i);
		if (!l || !p[i])
			return false;
	}
	return true;
}

/* Bytes as a JSON string, each invalid byte (and NUL) as U+FFFD. */
static json_t *json_lossy(const uint8_t *p, size_t n)
{
	char *s = malloc(n * 3 + 1);
	size_t i, l, o = 0;
	json_t *j;

	if (!s)
		return NULL;
	for (i = 0; i < n; i += l) {
		l = utf8_seq(p + i, n - i);
		if (l && p[i]) {
			memcpy(s + o, p + i, l);
			o += l;
		} else {
			memcpy(s + o, "\xef\xbf\xbd", 3);
			o += 3;
			l = 1;
		}
	}
	j = json_stringn_nocheck(s, o);
	free(s);
	return j;
}

static json_t *jstr(const char *s)
{
	return json_lossy((const uint8_t *)s, strlen(s));
}

static json_t *json_base64(const void *p, size_t n)
{
	char *s = malloc(base64__encoded_len(n) + 1);
	json_t *j;

	if (!s)
		return NULL;
	base64__encode(p, n, s);
	j = json_stringn_nocheck(s, base64__encoded_len(n));
	free(s);
	return j;
}

/*
 * A name or target from the guest: obj.key as UTF-8, and when the bytes
 * are not valid UTF-8 also obj.keyBytes, the exact bytes in base64.
 */
static void set_guest_bytes(json_t *obj, const char *key, const uint8_t *p,
			    size_t n)
{
	char bkey[64];

	json_object_set_new(obj, key, json_lossy(p, n));
	if (utf8_valid(p, n))
		return;
	snprintf(bkey, sizeof(bkey), "%sBytes", key);
	json_object_set_new(obj, bkey, json_base64(p, n));
}

/* ---- answering clients --------------------------------------------------- */

static void client_kill(struct client *c);

/* Queue one message (stolen) on the client's socket. */
static void client_send(struct client *c, json_t *msg)
{
	char *s;

	if (!c || c->dead || !msg) {
		json_decref(msg);
		return;
	}
	s = json_dumps(msg, JSON_COMPACT);
	json_decref(msg);
	if (!s || bytequeue__append(&c->out, s, strlen(s)) ||
	    bytequeue__append(&c->out, "\n", 1)) {
		pr_err("api: client %d: out of memory, dropping it", c->fd);
		client_kill(c);
	}
	free(s);
}

static void reply(struct client *c, json_t *id, json_t *result)
{
	if (!id) { /* a notification gets no answer */
		json_decref(result);
		return;
	}
	client_send(c, json_pack("{s:s, s:O, s:o}", "jsonrpc", "2.0", "id", id,
				 "result", result ? result : json_object()));
}

/* data is stolen (NULL: none). */
static void reply_error(struct client *c, json_t *id, int code, json_t *data,
			const char *fmt, ...)
	__attribute__((format(printf, 5, 6)));

static void reply_error(struct client *c, json_t *id, int code, json_t *data,
			const char *fmt, ...)
{
	json_t *err, *null = NULL;
	char msg[512];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	if (!id && code != API_E_PARSE && code != API_E_INVALID_REQUEST) {
		json_decref(data);
		return;
	}
	err = json_pack("{s:i, s:o}", "code", code, "message", jstr(msg));
	if (err && data)
		json_object_set_new(err, "data", data);
	else
		json_decref(data);
	if (!id)
		id = null = json_null();
	client_send(c, json_pack("{s:s, s:O, s:o}", "jsonrpc", "2.0", "id", id,
				 "error", err));
	json_decref(null);
}

static void notify(struct client *c, const char *method, json_t *params)
{
	if (!c) {
		json_decref(params);
		return;
	}
	client_send(c, json_pack("{s:s, s:s, s:o}", "jsonrpc", "2.0", "method",
				 method, "params", params));
}

/* ---- agent connections: sending ------------------------------------------ */

static void call_done(struct call *k);

static void agent_send(struct call *k, uint16_t type, uint16_t flags,
		       const void *payload, size_t len)
{
	struct kiln_frame f;

	if (k->out_broken || k->fd < 0)
		return;
	kiln_frame__pack(&f, type, flags, len);
	if (bytequeue__append(&k->aout, &f, sizeof(f)) ||
	    (len && bytequeue__append(&k->aout, payload, len))) {
		/* Half a frame would desynchronise the stream: drop it all. */
		pr_err("api: out of memory for an agent message");
		k->out_broken = true;
		bytequeue__free(&k->aout);
	}
}

/* Data in frames of at most KILN_DATA_CHUNK; eof on the last one. */
static void agent_send_data(struct call *k, uint16_t type, const uint8_t *p,
			    size_t len, bool eof)
{
	do {
		size_t n = len < KILN_DATA_CHUNK ? len : KILN_DATA_CHUNK;

		agent_send(k, type, eof && n == len ? KILN_F_EOF : 0, p, n);
		p += n;
		len -= n;
	} while (len);
}

static void agent_send_u64(struct call *k, uint16_t type, uint16_t tag,
			   uint64_t v)
{
	struct kiln_buf b;

	kiln_buf__init(&b);
	if (!kiln_tlv__put_u64(&b, tag, v))
		agent_send(k, type, 0, b.data, b.len);
	kiln_buf__free(&b);
}

/* ---- calls: ending ------------------------------------------------------- */

static bool is_proc(const struct call *k)
{
	return k->kind == CALL_EXEC || k->kind == CALL_SPAWN ||
	       k->kind == CALL_PTY;
}

static void flush_pending(struct call *k, int code, const char *why,
			  json_t *data)
{
	size_t i;
	json_t *id;

	json_array_foreach(k->pending, i, id)
	{
		if (code)
			reply_error(k->client, json_is_null(id) ? NULL : id,
				    code, json_deep_copy(data), "%s", why);
		else
			reply(k->client, json_is_null(id) ? NULL : id, NULL);
	}
	json_array_clear(k->pending);
}

/* The request's own answer, once. */
static void call_reply(struct call *k, json_t *result)
{
	if (k->replied) {
		json_decref(result);
		return;
	}
	k->replied = true;
	reply(k->client, k->id, result);
}

/*
 * The request failed. vm.facts still answers, with the config facts and
 * what went wrong with the guest's; a running stream ends instead.
 */
static void call_fail(struct call *k, int code, json_t *data, const char *why)
{
	if (k->kind == CALL_VM_FACTS && !k->replied) {
		json_t *res = json_pack("{s:O, s:{s:i, s:o}}", "facts",
					k->entries, "guestError", "code", code,
					"message", jstr(why));

		if (res && data)
			json_object_set_new(json_object_get(res, "guestError"),
					    "data", data);
		else
			json_decref(data);
		call_reply(k, res);
		return;
	}
	if (k->pending)
		flush_pending(k, code, why, data);
	if (k->kind == CALL_WRITE && k->replied) {
		/* An upload stream: fs.close or the next fs.write hears it. */
		if (k->has_close_id) {
			reply_error(k->client, k->close_id, code, data, "%s",
				    why);
			k->has_close_id = false;
			return;
		}
		if (!k->error)
			k->error =
				json_pack("{s:i, s:o, s:o*}", "code", code,
					  "message", jstr(why), "data", data);
		else
			json_decref(data);
		k->parked = true;
		return;
	}
	if ((k->kind == CALL_SPAWN || k->kind == CALL_PTY) && k->replied) {
		json_t *p =
			json_pack("{s:I, s:o}", "stream", (json_int_t)k->stream,
				  "error", jstr(why));

		if (p && data)
			json_object_set_new(p, "errorData", data);
		else
			json_decref(data);
		notify(k->client, "stream.exit", p);
		return;
	}
	if (k->replied) {
		json_decref(data);
		return;
	}
	k->replied = true;
	reply_error(k->client, k->id, code, data, "%s", why);
}

static void call_close_fd(struct call *k)
{
	if (k->fd >= 0)
		close(k->fd);
	k->fd = -1;
	bytequeue__free(&k->ain);
	bytequeue__free(&k->aout);
}

/* Finished: no more agent traffic; freed by reap(). */
static void call_done(struct call *k)
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
		reply_error(k->client, k->close_id, API_E_AGENT, NULL,
			    "upload ended");
		k->has_close_id = false;
	}
	if (k->pending)
		flush_pending(k, API_E_AGENT, "stream ended", NULL);
	call_close_fd(k);
	k->st = AG_CLOSED;
	k->dead = true;
}

static void call_lost(struct call *k, const char *why)
{
	call_fail(k, API_E_AGENT, NULL, why);
	call_done(k);
}

/* An ERROR frame: the guest's errno, its name and maybe a message. */
static void call_errno(struct call *k, const uint8_t *p, size_t len)
{
	const char *name = NULL;
	const uint8_t *val;
	struct kiln_tlv_iter it;
	uint64_t value = EIO;
	uint32_t vlen, name_len = 0;
	uint16_t tag;
	char msg[256] = "";
	json_t *data;

	kiln_tlv__iter(&it, p, len);
	while (kiln_tlv__next(&it, &tag, &val, &vlen) == 1) {
		if (tag == KILN_T_ERRNO)
			kiln_tlv__u64(val, vlen, &value);
		else if (tag == KILN_T_ERRNAME)
			name = (const char *)val, name_len = vlen;
		else if (tag == KILN_T_MESSAGE)
			snprintf(msg, sizeof(msg), "%.*s",
				 (int)(vlen < 200 ? vlen : 200), val);
	}
	if (!name) {
		name = kiln_errno__name(value);
		name_len = strlen(name);
	}
	if (!msg[0])
		snprintf(msg, sizeof(msg), "%s", strerror(value));
	data = json_pack("{s:o, s:I}", "errno",
			 json_lossy((const uint8_t *)name, name_len),
			 "errnoValue", (json_int_t)value);
	call_fail(k, API_E_ERRNO, data, msg);
	call_done(k);
}

/* ---- processes ----------------------------------------------------------- */

static void proc_kill(struct call *k, int sig, uint64_t now)
{
	agent_send_u64(k, KILN_MSG_PROC_SIGNAL, KILN_T_SIGNAL, sig);
	k->killing = true;
	k->deadline = now + API_KILL_GRACE_MS;
}

/* Stop a call whose answer nobody wants or that was cancelled. */
static void call_abort(struct call *k, bool cancelled)
{
	k->cancelled = cancelled;
	if (is_proc(k) && k->st == AG_ACTIVE && !k->done_frame) {
		/* The agent starts it before it reads the signal. */
		proc_kill(k, SIGKILL, now_ms());
		return;
	}
	if (cancelled)
		call_fail(k, API_E_ABORTED, NULL, "cancelled");
	k->parked = false; /* an upload's error is nobody's business now */
	call_done(k);
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

static json_t *exec_result(struct call *k, json_t *res)
{
	json_object_set_new(res, "pid", json_integer(k->pid));
	json_object_set_new(
		res, "stdout",
		json_base64(bytequeue__peek(&k->out_acc), k->out_acc.len));
	json_object_set_new(
		res, "stderr",
		json_base64(bytequeue__peek(&k->err_acc), k->err_acc.len));
	if (k->out_trunc)
		json_object_set_new(res, "stdoutTruncated", json_true());
	if (k->err_trunc)
		json_object_set_new(res, "stderrTruncated", json_true());
	return res;
}

static void accumulate(struct bytequeue *q, bool *trunc, const uint8_t *p,
		       size_t len)
{
	size_t room = API_EXEC_OUTPUT_MAX - q->len;

	if (len > room) {
		*trunc = true;
		len = room;
	}
	if (len && bytequeue__append(q, p, len))
		*trunc = true;
}

static void proc_started(struct call *k, const uint8_t *p, size_t len)
{
	struct kiln_tlv_iter it;
	const uint8_t *val;
	uint32_t vlen;
	uint16_t tag;
	uint64_t pid = 0;

	kiln_tlv__iter(&it, p, len);
	while (kiln_tlv__next(&it, &tag, &val, &vlen) == 1)
		if (tag == KILN_T_PID)
			kiln_tlv__u64(val, vlen, &pid);
	k->pid = pid;
	k->started = true;
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
			accumulate(&k->err_acc, &k->err_trunc, p, len);
		else
			accumulate(&k->out_acc, &k->out_trunc, p, len);
		return;
	}
	if (!len)
		return;
	notify(k->client, err ? "stream.stderr" : "stream.stdout",
	       json_pack("{s:I, s:o}", "stream", (json_int_t)k->stream, "data",
			 json_base64(p, len)));
}

static void proc_exit(struct call *k, const uint8_t *p, size_t len)
{
	json_t *res = exit_params(k, p, len);

	k->done_frame = true;
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
			call_reply(k, exec_result(k, res));
		}
	} else if (k->replied) {
		json_object_set_new(res, "stream", json_integer(k->stream));
		notify(k->client, "stream.exit", res);
	} else {
		json_decref(res);
		call_fail(k, API_E_ABORTED, NULL, "cancelled");
	}
	call_done(k);
}

static void proc_frame(struct call *k, uint16_t type, uint16_t flags,
		       const uint8_t *p, size_t len)
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
		call_errno(k, p, len);
		break;
	default:
		call_lost(k, "agent protocol error: unexpected message");
	}
}

/* ---- files and facts ----------------------------------------------------- */

static const char *const file_types[] = {
	[KILN_FILE_REGULAR] = "file",
	[KILN_FILE_DIRECTORY] = "directory",
	[KILN_FILE_SYMLINK] = "symlink",
	[KILN_FILE_OTHER] = "other",
};

/* The stat fields of a RESULT or a T_ENTRY (with its T_NAME). */
static json_t *stat_json(const uint8_t *p, size_t len)
{
	struct kiln_tlv_iter it;
	const uint8_t *val;
	json_t *o = json_object();
	const char *key;
	uint32_t vlen;
	uint16_t tag;
	uint64_t v;

	kiln_tlv__iter(&it, p, len);
	while (o && kiln_tlv__next(&it, &tag, &val, &vlen) == 1) {
		switch (tag) {
		case KILN_T_NAME:
			set_guest_bytes(o, "name", val, vlen);
			continue;
		case KILN_T_LINK_TARGET:
			set_guest_bytes(o, "linkTarget", val, vlen);
			continue;
		case KILN_T_TYPE:
			if (kiln_tlv__u64(val, vlen, &v))
				continue;
			json_object_set_new(
				o, "type",
				json_string(v < ARRAY_SIZE(file_types) &&
							    file_types[v] ?
						    file_types[v] :
						    "other"));
			continue;
		case KILN_T_MODE:
			key = "mode";
			break;
		case KILN_T_SIZE:
			key = "size";
			break;
		case KILN_T_MTIME_NS:
			key = "mtimeNs";
			break;
		case KILN_T_UID:
			key = "uid";
			break;
		case KILN_T_GID:
			key = "gid";
			break;
		default:
			continue;
		}
		if (!kiln_tlv__u64(val, vlen, &v))
			json_object_set_new(o, key,
					    json_integer((json_int_t)v));
	}
	return o;
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

static uint64_t result_size(const uint8_t *p, size_t len, uint64_t dflt)
{
	struct kiln_tlv_iter it;
	const uint8_t *val;
	uint32_t vlen;
	uint16_t tag;
	uint64_t v = dflt;

	kiln_tlv__iter(&it, p, len);
	while (kiln_tlv__next(&it, &tag, &val, &vlen) == 1)
		if (tag == KILN_T_SIZE)
			kiln_tlv__u64(val, vlen, &v);
	return v;
}

/* RESULT frames with T_ENTRY (readDir) or T_FACT (facts) lists. */
static void list_result(struct call *k, const uint8_t *p, size_t len)
{
	uint16_t want = k->kind == CALL_READDIR ? KILN_T_ENTRY : KILN_T_FACT;
	struct kiln_tlv_iter it, in;
	const uint8_t *val, *v2;
	uint32_t vlen, l2;
	uint16_t tag, t2;
	json_t *o;

	kiln_tlv__iter(&it, p, len);
	while (kiln_tlv__next(&it, &tag, &val, &vlen) == 1) {
		if (tag != want)
			continue;
		if (json_array_size(k->entries) >= API_READDIR_MAX) {
			call_fail(k, API_E_LIMIT, NULL,
				  "more directory entries than the API's "
				  "limit");
			call_done(k);
			return;
		}
		if (want == KILN_T_ENTRY) {
			json_array_append_new(k->entries, stat_json(val, vlen));
			continue;
		}
		o = json_pack("{s:s}", "source", "guest");
		kiln_tlv__iter(&in, val, vlen);
		while (o && kiln_tlv__next(&in, &t2, &v2, &l2) == 1) {
			if (t2 == KILN_T_TOPIC)
				json_object_set_new(o, "topic",
						    json_lossy(v2, l2));
			else if (t2 == KILN_T_RELATION)
				json_object_set_new(o, "relation",
						    json_lossy(v2, l2));
			else if (t2 == KILN_T_VALUE)
				json_object_set_new(o, "value",
						    json_lossy(v2, l2));
		}
		json_array_append_new(k->entries, o);
	}
	if (result_more(p, len))
		return;
	k->done_frame = true;
	if (k->kind == CALL_READDIR)
		call_reply(k, json_pack("{s:O}", "entries", k->entries));
	else
		call_reply(k, json_pack("{s:O}", "facts", k->entries));
	call_done(k);
}

static void read_data(struct call *k, const uint8_t *p, size_t len)
{
	if (k->streamed) {
		notify(k->client, "fs.chunk",
		       json_pack("{s:O, s:I, s:o}", "id", k->id, "offset",
				 (json_int_t)(k->offset + k->bytes), "data",
				 json_base64(p, len)));
	} else if (k->out_acc.len + len > API_READ_INLINE_MAX ||
		   bytequeue__append(&k->out_acc, p, len)) {
		call_fail(k, API_E_LIMIT,
			  json_pack("{s:I}", "limit",
				    (json_int_t)API_READ_INLINE_MAX),
			  "file too large for one answer: use stream or "
			  "offset/length");
		call_done(k);
		return;
	}
	k->bytes += len;
}

static void fs_frame(struct call *k, uint16_t type, uint16_t flags,
		     const uint8_t *p, size_t len)
{
	json_t *res;

	if (type == KILN_MSG_ERROR) {
		call_errno(k, p, len);
		return;
	}
	if (type == KILN_MSG_FS_DATA && k->kind == CALL_READ) {
		read_data(k, p, len);
		return;
	}
	if (type != KILN_MSG_RESULT) {
		call_lost(k, "agent protocol error: unexpected message");
		return;
	}
	switch (k->kind) {
	case CALL_READDIR:
	case CALL_FACTS:
	case CALL_VM_FACTS:
		list_result(k, p, len);
		return;
	case CALL_STAT:
		res = stat_json(p, len);
		break;
	case CALL_READ:
		res = json_pack("{s:I}", "size",
				(json_int_t)result_size(p, len, k->bytes));
		if (res && !k->streamed)
			json_object_set_new(
				res, "data",
				json_base64(bytequeue__peek(&k->out_acc),
					    k->out_acc.len));
		break;
	case CALL_WRITE:
		res = json_pack("{s:I}", "size",
				(json_int_t)result_size(p, len, k->bytes));
		if (k->has_close_id) {
			reply(k->client, k->close_id, res);
			k->has_close_id = false;
			res = NULL;
		}
		break;
	default:
		res = json_object();
		break;
	}
	k->done_frame = true;
	call_reply(k, res);
	call_done(k);
}

/* ---- agent connections: reaching the agent ------------------------------- */

static void agent_retry(struct call *k, int err, uint64_t now)
{
	char why[160];

	call_close_fd(k);
	k->st = AG_WAIT;
	k->last_err = err;
	if (k->kind == CALL_PROBE) {
		k->retry_at = now + API_PROBE_MS;
		return;
	}
	if (now + API_RETRY_MS < k->connect_deadline) {
		k->retry_at = now + API_RETRY_MS;
		return;
	}
	snprintf(why, sizeof(why), "guest agent not reachable: %s",
		 err ? strerror(-err) : "no greeting");
	call_fail(k, API_E_AGENT, NULL, why);
	call_done(k);
}

static void agent_try_open(struct call *k, uint64_t now)
{
	struct api *api = k->api;
	char line[32];
	int fd, n;

	fd = api->p.open_agent(api->p.opaque);
	if (fd < 0) {
		agent_retry(k, fd, now);
		return;
	}
	k->fd = fd;
	if (set_nonblock(fd)) {
		agent_retry(k, -errno, now);
		return;
	}
	k->st = AG_HELLO;
	if (!api->p.vsock_port)
		return;
	n = snprintf(line, sizeof(line), "CONNECT %u\n", api->p.vsock_port);
	if (bytequeue__append(&k->aout, line, n)) {
		agent_retry(k, -ENOMEM, now);
		return;
	}
	k->st = AG_CONNECT;
}

static void agent_hello(struct call *k, const uint8_t *p, size_t len)
{
	struct api *api = k->api;
	struct kiln_tlv_iter it;
	const uint8_t *val;
	uint64_t version = 0;
	uint32_t vlen;
	uint16_t tag;
	char why[96];

	kiln_tlv__iter(&it, p, len);
	while (kiln_tlv__next(&it, &tag, &val, &vlen) == 1)
		if (tag == KILN_T_VERSION)
			kiln_tlv__u64(val, vlen, &version);
	if (version != KILN_AGENT_VERSION) {
		snprintf(why, sizeof(why),
			 "guest agent speaks protocol version %llu, not %u",
			 (unsigned long long)version, KILN_AGENT_VERSION);
		call_lost(k, why);
		return;
	}
	k->st = AG_ACTIVE;
	if (!api->agent_ready) {
		api->agent_ready = true;
		if (api->p.agent_ready)
			api->p.agent_ready(api->p.opaque);
	}
	if (k->kind == CALL_PROBE) {
		call_done(k);
		return;
	}
	agent_send(k, k->req_type, 0, k->req.data, k->req.len);
	kiln_buf__free(&k->req);
	if (k->kind != CALL_WRITE)
		return;
	if (k->stream) { /* the client sends the data with fs.write */
		call_reply(k,
			   json_pack("{s:I}", "stream", (json_int_t)k->stream));
		return;
	}
	agent_send_data(k, KILN_MSG_FS_DATA, k->upload, k->upload_len, true);
	k->bytes = k->upload_len;
	free(k->upload);
	k->upload = NULL;
}

/* "OK <port>\n" from a vsock device's host socket. */
static bool agent_connect_line(struct call *k, uint64_t now)
{
	uint8_t *p = bytequeue__peek(&k->ain);
	uint8_t *nl = memchr(p, '\n', k->ain.len);

	if (!nl) {
		if (k->ain.len >= API_CONNECT_LINE_MAX)
			agent_retry(k, -EPROTO, now);
		return false;
	}
	if (nl - p < 3 || memcmp(p, "OK ", 3)) {
		agent_retry(k, -ECONNREFUSED, now);
		return false;
	}
	bytequeue__consume(&k->ain, nl - p + 1);
	k->st = AG_HELLO;
	return true;
}

/* Every whole frame in ain, as long as the call lives. */
static void agent_input(struct call *k, uint64_t now)
{
	struct kiln_frame f;
	uint16_t type, flags;
	uint32_t len;
	const uint8_t *payload;

	while (!k->dead && k->fd >= 0) {
		if (k->st == AG_CONNECT) {
			if (!agent_connect_line(k, now))
				return;
			continue;
		}
		if (k->ain.len < sizeof(f))
			return;
		memcpy(&f, bytequeue__peek(&k->ain), sizeof(f));
		if (kiln_frame__unpack(&f, &type, &flags, &len)) {
			call_lost(k, "agent protocol error: frame too large");
			return;
		}
		if (k->ain.len < sizeof(f) + len)
			return;
		payload = bytequeue__peek(&k->ain) + sizeof(f);
		if (k->st == AG_HELLO) {
			if (type == KILN_MSG_HELLO)
				agent_hello(k, payload, len);
			else
				call_lost(k, "agent protocol error: no HELLO");
		} else if (is_proc(k)) {
			proc_frame(k, type, flags, payload, len);
		} else {
			fs_frame(k, type, flags, payload, len);
		}
		if (k->dead || k->fd < 0)
			return;
		bytequeue__consume(&k->ain, sizeof(f) + len);
	}
}

static void agent_eof(struct call *k, int err, uint64_t now)
{
	if (k->st == AG_CONNECT || k->st == AG_HELLO) {
		agent_retry(k, err ? err : -ECONNRESET, now);
		return;
	}
	if (k->cancelled)
		call_fail(k, API_E_ABORTED, NULL, "cancelled");
	else
		call_fail(k, API_E_AGENT, NULL, "guest agent connection lost");
	call_done(k);
}

static void agent_readable(struct call *k, uint64_t now)
{
	ssize_t n;

	if (bytequeue__reserve(&k->ain, API_READ_CHUNK)) {
		call_lost(k, "out of memory");
		return;
	}
	n = recv(k->fd, bytequeue__space(&k->ain), API_READ_CHUNK,
		 MSG_DONTWAIT);
	if (n < 0 && (errno == EAGAIN || errno == EINTR))
		return;
	if (n <= 0) {
		agent_eof(k, n < 0 ? -errno : 0, now);
		return;
	}
	bytequeue__commit(&k->ain, n);
	agent_input(k, now);
}

static void agent_writable(struct call *k, uint64_t now)
{
	ssize_t n = send(k->fd, bytequeue__peek(&k->aout), k->aout.len,
			 MSG_NOSIGNAL | MSG_DONTWAIT);

	if (n < 0 && (errno == EAGAIN || errno == EINTR))
		return;
	if (n < 0) {
		if (k->st == AG_CONNECT || k->st == AG_HELLO) {
			agent_retry(k, -errno, now);
			return;
		}
		/* What the agent said before it went comes in still. */
		k->out_broken = true;
		bytequeue__free(&k->aout);
		if (k->pending)
			flush_pending(k, API_E_AGENT,
				      "the guest stopped reading this stream",
				      NULL);
		return;
	}
	bytequeue__consume(&k->aout, n);
	if (k->pending && k->aout.len <= API_AGENT_OUT_HIGH)
		flush_pending(k, 0, NULL, NULL);
}

/* Retries, the agent's time to answer, kills that take too long. */
static void call_tick(struct call *k, uint64_t now)
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
	if (k->st != AG_ACTIVE) {
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
		call_reply(k, exec_result(k, json_pack("{s:i, s:b}", "exitCode",
						       124, "timedOut", 1)));
	else if (k->cancelled)
		call_fail(k, API_E_ABORTED, NULL, "cancelled");
	else
		call_fail(k, API_E_TIMEOUT, NULL,
			  "the process did not end after SIGKILL");
	call_done(k);
}

static uint64_t call_next_timer(const struct call *k)
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

/* ---- requests: parameters ------------------------------------------------ */

struct rpc {
	struct api *api;
	struct client *c;
	json_t *id; /* NULL: a notification */
	json_t *params;
};

static bool bad_param(struct rpc *r, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

static bool bad_param(struct rpc *r, const char *fmt, ...)
{
	char msg[256];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	reply_error(r->c, r->id, API_E_INVALID_PARAMS, NULL, "%s", msg);
	return false;
}

static bool p_str(struct rpc *r, const char *key, bool required, const char **s,
		  size_t *len)
{
	json_t *v = json_object_get(r->params, key);

	*s = NULL;
	*len = 0;
	if (!v)
		return required ? bad_param(r, "%s: missing", key) : true;
	if (!json_is_string(v))
		return bad_param(r, "%s: expected a string", key);
	*s = json_string_value(v);
	*len = json_string_length(v);
	if (strlen(*s) != *len)
		return bad_param(r, "%s: contains NUL", key);
	return true;
}

/* *out keeps its default when the key is absent. */
static bool p_uint(struct rpc *r, const char *key, uint64_t max, uint64_t *out)
{
	json_t *v = json_object_get(r->params, key);

	if (!v)
		return true;
	if (!json_is_integer(v) || json_integer_value(v) < 0 ||
	    (uint64_t)json_integer_value(v) > max)
		return bad_param(r, "%s: expected an integer from 0 to %llu",
				 key, (unsigned long long)max);
	*out = json_integer_value(v);
	return true;
}

static bool p_bool(struct rpc *r, const char *key, bool *out)
{
	json_t *v = json_object_get(r->params, key);

	if (!v)
		return true;
	if (!json_is_boolean(v))
		return bad_param(r, "%s: expected true or false", key);
	*out = json_is_true(v);
	return true;
}

/* Base64 bytes (malloc'ed, *out NULL when absent). */
static bool p_b64(struct rpc *r, const char *key, uint8_t **out, size_t *len)
{
	const char *s;
	size_t n;
	ssize_t got;

	*out = NULL;
	*len = 0;
	if (!p_str(r, key, false, &s, &n))
		return false;
	if (!s)
		return true;
	*out = malloc(base64__decoded_max(n));
	if (!*out)
		return bad_param(r, "%s: out of memory", key);
	got = base64__decode(s, n, *out);
	if (got < 0) {
		free(*out);
		*out = NULL;
		return bad_param(r, "%s: not base64", key);
	}
	*len = got;
	return true;
}

/* A guest path: key as a string or keyBytes in base64; absolute. */
static bool p_path(struct rpc *r, const char *key, struct kiln_buf *b,
		   uint16_t tag)
{
	char bkey[64];
	const char *s;
	uint8_t *raw;
	size_t n;
	bool ok;

	snprintf(bkey, sizeof(bkey), "%sBytes", key);
	if (json_object_get(r->params, bkey)) {
		if (!p_b64(r, bkey, &raw, &n))
			return false;
		ok = n && raw[0] == '/' && !memchr(raw, 0, n);
		if (ok && kiln_tlv__put_bytes(b, tag, raw, n))
			ok = !bad_param(r, "%s: too long", bkey);
		else if (!ok)
			bad_param(r, "%s: expected an absolute path", bkey);
		free(raw);
		return ok;
	}
	if (!p_str(r, key, true, &s, &n))
		return false;
	if (s[0] != '/')
		return bad_param(r, "%s: expected an absolute path", key);
	if (kiln_tlv__put_bytes(b, tag, s, n))
		return bad_param(r, "%s: too long", key);
	return true;
}

/* A mode: an integer or an octal string such as "0755". */
static bool p_mode(struct rpc *r, struct kiln_buf *b)
{
	json_t *v = json_object_get(r->params, "mode");
	unsigned long m;
	char *end;

	if (!v)
		return true;
	if (json_is_integer(v) && json_integer_value(v) >= 0 &&
	    json_integer_value(v) <= 07777) {
		m = json_integer_value(v);
	} else if (json_is_string(v) && json_string_length(v)) {
		errno = 0;
		m = strtoul(json_string_value(v), &end, 8);
		if (*end || errno || m > 07777)
			return bad_param(r, "mode: expected an octal string "
					    "such as \"0644\"");
	} else {
		return bad_param(r, "mode: expected 0 to 4095 or an octal "
				    "string");
	}
	return kiln_tlv__put_u64(b, KILN_T_MODE, m) == 0;
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

static bool p_signal(struct rpc *r, int *sig)
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
	return bad_param(r, "signal: expected 1 to 64 or a name such as "
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

/* argv, env, cwd and timeoutMs of exec, spawn and pty.open. */
static bool p_process(struct rpc *r, struct kiln_buf *b, bool argv_required,
		      uint64_t *timeout_ms)
{
	json_t *argv = json_object_get(r->params, "argv");
	json_t *env = json_object_get(r->params, "env");
	const char *key, *cwd;
	json_t *v;
	size_t i, n;
	int ret = 0;

	if (!argv && !argv_required) {
		ret = kiln_tlv__put_str(b, KILN_T_ARG, "/bin/sh");
		ret = ret ?: kiln_tlv__put_str(b, KILN_T_ARG, "-l");
	} else if (!json_is_array(argv) || !json_array_size(argv)) {
		return bad_param(r, "argv: expected a non-empty array of "
				    "strings");
	}
	json_array_foreach(argv, i, v)
	{
		if (!json_is_string(v) ||
		    strlen(json_string_value(v)) != json_string_length(v))
			return bad_param(r, "argv[%zu]: expected a string", i);
		ret = ret   ?:
			      kiln_tlv__put_str(b, KILN_T_ARG,
						json_string_value(v));
	}
	if (json_is_array(env)) {
		json_array_foreach(env, i, v)
		{
			const char *s = json_string_value(v);

			if (!s || !strchr(s, '=') || s[0] == '=')
				return bad_param(r,
						 "env[%zu]: expected "
						 "\"NAME=value\"",
						 i);
			ret = ret ?: kiln_tlv__put_str(b, KILN_T_ENV, s);
		}
	} else if (json_is_object(env)) {
		json_object_foreach(env, key, v)
		{
			if (!json_is_string(v) || !key[0] || strchr(key, '='))
				return bad_param(r,
						 "env.%s: expected a "
						 "string value",
						 key);
			ret = ret ?: put_kv(b, key, json_string_value(v));
		}
	} else if (env) {
		return bad_param(r, "env: expected an array of \"NAME=value\" "
				    "or an object");
	}
	if (!p_str(r, "cwd", false, &cwd, &n))
		return false;
	if (cwd)
		ret = ret ?: kiln_tlv__put_bytes(b, KILN_T_CWD, cwd, n);
	if (!p_uint(r, "timeoutMs", UINT32_MAX, timeout_ms))
		return false;
	if (*timeout_ms)
		ret = ret   ?:
			      kiln_tlv__put_u64(b, KILN_T_TIMEOUT_MS,
						*timeout_ms);
	if (ret)
		return bad_param(r, "argv and env: too long (limit %u bytes)",
				 KILN_FRAME_MAX);
	return true;
}

/* ---- requests: methods --------------------------------------------------- */

static struct call *call_new(struct rpc *r, enum call_kind kind, bool stream)
{
	struct api *api = r->api;
	struct call *k;

	if (api->nr_calls >= API_MAX_CALLS ||
	    (r->c && r->c->nr_calls >= API_CLIENT_CALLS)) {
		reply_error(r->c, r->id, API_E_LIMIT, NULL,
			    "too many requests in flight (%u per client, %u "
			    "in all)",
			    API_CLIENT_CALLS, API_MAX_CALLS);
		return NULL;
	}
	if (stream && api->nr_streams >= API_MAX_STREAMS) {
		reply_error(r->c, r->id, API_E_LIMIT, NULL,
			    "too many streams open (limit %u)",
			    API_MAX_STREAMS);
		return NULL;
	}
	k = calloc(1, sizeof(*k));
	if (!k) {
		reply_error(r->c, r->id, API_E_INTERNAL, NULL, "out of memory");
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
static void call_start(struct call *k, uint16_t type, struct kiln_buf *b)
{
	uint64_t now = now_ms();

	k->req = *b;
	kiln_buf__init(b);
	k->req_type = type;
	k->connect_deadline = now + k->api->agent_timeout_ms;
	agent_try_open(k, now);
}

static void m_exec(struct rpc *r)
{
	uint64_t timeout = 0;
	struct kiln_buf b;
	uint8_t *in;
	size_t in_len;
	struct call *k;

	kiln_buf__init(&b);
	if (!p_process(r, &b, true, &timeout) ||
	    !p_b64(r, "stdin", &in, &in_len))
		goto out;
	k = call_new(r, CALL_EXEC, false);
	if (!k) {
		free(in);
		goto out;
	}
	k->stdin_data = in;
	k->stdin_len = in_len;
	if (timeout)
		k->deadline = now_ms() + timeout + API_EXEC_GRACE_MS;
	call_start(k, KILN_MSG_PROC_START, &b);
out:
	kiln_buf__free(&b);
}

static void m_spawn(struct rpc *r)
{
	uint64_t timeout = 0;
	struct kiln_buf b;
	bool in = true;
	struct call *k;

	kiln_buf__init(&b);
	if (!r->id) {
		bad_param(r, "spawn needs a request id");
		goto out;
	}
	if (!p_process(r, &b, true, &timeout) || !p_bool(r, "stdin", &in))
		goto out;
	k = call_new(r, CALL_SPAWN, true);
	if (!k)
		goto out;
	k->stdin_closed = !in;
	call_start(k, KILN_MSG_PROC_START, &b);
out:
	kiln_buf__free(&b);
}

static void m_pty_open(struct rpc *r)
{
	uint64_t timeout = 0, rows = 24, cols = 80;
	struct kiln_buf b;
	struct call *k;

	kiln_buf__init(&b);
	if (!r->id) {
		bad_param(r, "pty.open needs a request id");
		goto out;
	}
	if (!p_process(r, &b, false, &timeout) ||
	    !p_uint(r, "rows", 65535, &rows) ||
	    !p_uint(r, "cols", 65535, &cols))
		goto out;
	if (kiln_tlv__put_u64(&b, KILN_T_PTY, 1) ||
	    kiln_tlv__put_u64(&b, KILN_T_ROWS, rows ? rows : 24) ||
	    kiln_tlv__put_u64(&b, KILN_T_COLS, cols ? cols : 80)) {
		bad_param(r, "argv and env: too long");
		goto out;
	}
	k = call_new(r, CALL_PTY, true);
	if (k)
		call_start(k, KILN_MSG_PROC_START, &b);
out:
	kiln_buf__free(&b);
}

#define KINDS_PROC   (1U << CALL_SPAWN | 1U << CALL_PTY)
#define KINDS_UPLOAD (1U << CALL_WRITE)

/* The live stream params.stream of this client, of one of the kinds. */
static struct call *find_stream(struct rpc *r, unsigned int kinds)
{
	json_t *v = json_object_get(r->params, "stream");
	struct call *k;
	json_int_t s;

	if (!json_is_integer(v) || json_integer_value(v) <= 0) {
		bad_param(r, "stream: expected a stream id");
		return NULL;
	}
	s = json_integer_value(v);
	for (k = r->api->calls; k; k = k->next)
		if (!k->dead && k->client == r->c && k->replied &&
		    k->stream == (uint64_t)s && (kinds & 1U << k->kind))
			return k;
	reply_error(r->c, r->id, API_E_INVALID_PARAMS, NULL,
		    "stream %lld: no such stream", (long long)s);
	return NULL;
}

/* Answer a write now, or once the agent has taken most of the bytes. */
static void write_done(struct call *k, json_t *id)
{
	if (k->aout.len <= API_AGENT_OUT_HIGH)
		reply(k->client, id, NULL);
	else
		json_array_append(k->pending, id ? id : json_null());
}

static void m_stream_write(struct rpc *r)
{
	struct call *k = find_stream(r, KINDS_PROC);
	bool eof = false;
	uint8_t *data;
	size_t len;

	if (!k || !p_b64(r, "data", &data, &len))
		return;
	if (!p_bool(r, "eof", &eof))
		goto out;
	if (k->stdin_closed) {
		bad_param(r, "stream %llu: stdin is closed",
			  (unsigned long long)k->stream);
		goto out;
	}
	if (k->out_broken) {
		reply_error(r->c, r->id, API_E_AGENT, NULL,
			    "the guest stopped reading this stream");
		goto out;
	}
	if (len || eof)
		agent_send_data(k, KILN_MSG_PROC_STDIN, data, len, eof);
	k->stdin_closed = eof;
	write_done(k, r->id);
out:
	free(data);
}

static void m_stream_close_stdin(struct rpc *r)
{
	struct call *k = find_stream(r, KINDS_PROC);

	if (!k)
		return;
	if (!k->stdin_closed)
		agent_send(k, KILN_MSG_PROC_STDIN, KILN_F_EOF, NULL, 0);
	k->stdin_closed = true;
	reply(r->c, r->id, NULL);
}

static void m_stream_kill(struct rpc *r)
{
	struct call *k = find_stream(r, KINDS_PROC);
	int sig = SIGTERM;

	if (!k || !p_signal(r, &sig))
		return;
	agent_send_u64(k, KILN_MSG_PROC_SIGNAL, KILN_T_SIGNAL, sig);
	reply(r->c, r->id, NULL);
}

static void m_pty_resize(struct rpc *r)
{
	struct call *k = find_stream(r, 1U << CALL_PTY);
	uint64_t rows = 0, cols = 0;
	struct kiln_buf b;

	if (!k || !p_uint(r, "rows", 65535, &rows) ||
	    !p_uint(r, "cols", 65535, &cols))
		return;
	if (!rows || !cols) {
		bad_param(r, "rows, cols: expected 1 to 65535");
		return;
	}
	kiln_buf__init(&b);
	if (!kiln_tlv__put_u64(&b, KILN_T_ROWS, rows) &&
	    !kiln_tlv__put_u64(&b, KILN_T_COLS, cols))
		agent_send(k, KILN_MSG_PROC_RESIZE, 0, b.data, b.len);
	kiln_buf__free(&b);
	reply(r->c, r->id, NULL);
}

/* fs.stat, fs.readDir, fs.mkdir, fs.remove: a path and some flags. */
static void fs_simple(struct rpc *r, enum call_kind kind, uint16_t type)
{
	bool recursive = false, force = false;
	struct kiln_buf b;
	struct call *k;
	int ret = 0;

	kiln_buf__init(&b);
	if (!p_path(r, "path", &b, KILN_T_PATH) ||
	    !p_bool(r, "recursive", &recursive) || !p_bool(r, "force", &force))
		goto out;
	if (kind == CALL_MKDIR && !p_mode(r, &b))
		goto out;
	if (recursive)
		ret = kiln_tlv__put_u64(&b, KILN_T_RECURSIVE, 1);
	if (force)
		ret = ret ?: kiln_tlv__put_u64(&b, KILN_T_FORCE, 1);
	if (ret) {
		bad_param(r, "path: too long");
		goto out;
	}
	k = call_new(r, kind, false);
	if (k)
		call_start(k, type, &b);
out:
	kiln_buf__free(&b);
}

static void m_fs_stat(struct rpc *r)
{
	fs_simple(r, CALL_STAT, KILN_MSG_FS_STAT);
}

static void m_fs_readdir(struct rpc *r)
{
	fs_simple(r, CALL_READDIR, KILN_MSG_FS_READDIR);
}

static void m_fs_mkdir(struct rpc *r)
{
	fs_simple(r, CALL_MKDIR, KILN_MSG_FS_MKDIR);
}

static void m_fs_remove(struct rpc *r)
{
	fs_simple(r, CALL_REMOVE, KILN_MSG_FS_REMOVE);
}

static void m_fs_rename(struct rpc *r)
{
	struct kiln_buf b;
	struct call *k;

	kiln_buf__init(&b);
	if (!p_path(r, "from", &b, KILN_T_PATH) ||
	    !p_path(r, "to", &b, KILN_T_PATH2))
		goto out;
	k = call_new(r, CALL_RENAME, false);
	if (k)
		call_start(k, KILN_MSG_FS_RENAME, &b);
out:
	kiln_buf__free(&b);
}

static void m_fs_readfile(struct rpc *r)
{
	uint64_t offset = 0, length = UINT64_MAX;
	bool streamed = false;
	struct kiln_buf b;
	struct call *k;
	int ret = 0;

	kiln_buf__init(&b);
	if (!p_path(r, "path", &b, KILN_T_PATH) ||
	    !p_uint(r, "offset", INT64_MAX, &offset) ||
	    !p_uint(r, "length", INT64_MAX, &length) ||
	    !p_bool(r, "stream", &streamed))
		goto out;
	if (streamed && !r->id) {
		bad_param(r, "stream: needs a request id");
		goto out;
	}
	if (!streamed && length != UINT64_MAX && length > API_READ_INLINE_MAX) {
		bad_param(r, "length: at most %u without stream",
			  API_READ_INLINE_MAX);
		goto out;
	}
	if (offset)
		ret = kiln_tlv__put_u64(&b, KILN_T_OFFSET, offset);
	if (length != UINT64_MAX)
		ret = ret ?: kiln_tlv__put_u64(&b, KILN_T_LENGTH, length);
	if (ret) {
		bad_param(r, "path: too long");
		goto out;
	}
	k = call_new(r, CALL_READ, false);
	if (!k)
		goto out;
	k->streamed = streamed;
	k->offset = offset;
	call_start(k, KILN_MSG_FS_READ, &b);
out:
	kiln_buf__free(&b);
}

static void m_fs_writefile(struct rpc *r)
{
	bool parents = false, streamed = false;
	struct kiln_buf b;
	uint8_t *data = NULL;
	size_t len = 0;
	struct call *k;

	kiln_buf__init(&b);
	if (!p_path(r, "path", &b, KILN_T_PATH) || !p_mode(r, &b) ||
	    !p_bool(r, "createParents", &parents) ||
	    !p_bool(r, "stream", &streamed) || !p_b64(r, "data", &data, &len))
		goto out;
	if (streamed && (data || !r->id)) {
		bad_param(r, "stream: needs a request id and no data");
		goto out;
	}
	if (parents && kiln_tlv__put_u64(&b, KILN_T_CREATE_PARENTS, 1)) {
		bad_param(r, "path: too long");
		goto out;
	}
	k = call_new(r, CALL_WRITE, streamed);
	if (!k)
		goto out;
	k->upload = data;
	k->upload_len = len;
	data = NULL;
	call_start(k, KILN_MSG_FS_WRITE, &b);
out:
	free(data);
	kiln_buf__free(&b);
}

/* An upload that failed tells every later fs.write and fs.close. */
static bool upload_failed(struct rpc *r, struct call *k)
{
	json_t *e = k->error;

	if (!e)
		return false;
	reply_error(r->c, r->id, json_integer_value(json_object_get(e, "code")),
		    json_incref(json_object_get(e, "data")), "%s",
		    json_string_value(json_object_get(e, "message")));
	return true;
}

static void m_fs_write(struct rpc *r)
{
	struct call *k = find_stream(r, KINDS_UPLOAD);
	uint8_t *data;
	size_t len;

	if (!k || upload_failed(r, k) || !p_b64(r, "data", &data, &len))
		return;
	if (k->stdin_closed) {
		bad_param(r, "stream %llu: already closed",
			  (unsigned long long)k->stream);
	} else {
		if (len)
			agent_send_data(k, KILN_MSG_FS_DATA, data, len, false);
		k->bytes += len;
		write_done(k, r->id);
	}
	free(data);
}

static void m_fs_close(struct rpc *r)
{
	struct call *k = find_stream(r, KINDS_UPLOAD);

	if (!k)
		return;
	if (upload_failed(r, k)) {
		k->parked = false;
		call_done(k);
		return;
	}
	if (k->stdin_closed) {
		bad_param(r, "stream %llu: already closed",
			  (unsigned long long)k->stream);
		return;
	}
	agent_send(k, KILN_MSG_FS_DATA, KILN_F_EOF, NULL, 0);
	k->stdin_closed = true;
	k->close_id = json_incref(r->id);
	k->has_close_id = true;
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

	res = json_pack("{s:s, s:s, s:I, s:I, s:I}", "state", "running",
			"agent", api->agent_ready ? "ready" : "unknown",
			"clients", (json_int_t)api->nr_clients, "requests",
			(json_int_t)api->nr_calls, "streams",
			(json_int_t)api->nr_streams);
	if (res && api->p.status)
		api->p.status(api->p.opaque, res);
	reply(r->c, r->id, res);
}

static void m_vm_shutdown(struct rpc *r)
{
	if (!r->api->p.shutdown) {
		reply_error(r->c, r->id, API_E_NO_METHOD, NULL,
			    "vm.shutdown is not offered here");
		return;
	}
	reply(r->c, r->id, NULL);
	r->c->shutdown_after = true;
}

static void m_cancel(struct rpc *r)
{
	json_t *target = json_object_get(r->params, "id");
	json_t *sv = json_object_get(r->params, "stream");
	struct call *k;

	if (!target && !sv)
		return (void)bad_param(r, "expected id or stream");
	if (sv && (!json_is_integer(sv) || json_integer_value(sv) <= 0))
		return (void)bad_param(r, "stream: expected a stream id");
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
	reply(r->c, r->id, json_pack("{s:b}", "cancelled", k != NULL));
}

static const struct method {
	const char *name;
	void (*fn)(struct rpc *r);
} methods[] = {
	{ "exec", m_exec },
	{ "spawn", m_spawn },
	{ "spawn.write", m_stream_write },
	{ "spawn.closeStdin", m_stream_close_stdin },
	{ "spawn.kill", m_stream_kill },
	{ "pty.open", m_pty_open },
	{ "pty.write", m_stream_write },
	{ "pty.resize", m_pty_resize },
	{ "pty.kill", m_stream_kill },
	{ "fs.stat", m_fs_stat },
	{ "fs.readDir", m_fs_readdir },
	{ "fs.readFile", m_fs_readfile },
	{ "fs.writeFile", m_fs_writefile },
	{ "fs.write", m_fs_write },
	{ "fs.close", m_fs_close },
	{ "fs.mkdir", m_fs_mkdir },
	{ "fs.remove", m_fs_remove },
	{ "fs.rename", m_fs_rename },
	{ "facts", m_facts },
	{ "vm.facts", m_vm_facts },
	{ "vm.status", m_vm_status },
	{ "vm.shutdown", m_vm_shutdown },
	{ "cancel", m_cancel },
};

/* ---- clients ------------------------------------------------------------- */

static void handle_message(struct api *api, struct client *c, const char *line,
			   size_t len)
{
	json_t *msg, *id, *v, *params, *empty = NULL;
	struct rpc r = { .api = api, .c = c };
	json_error_t jerr;
	const char *method;
	size_t i;

	msg = json_loadb(line, len, JSON_REJECT_DUPLICATES | JSON_DECODE_ANY,
			 &jerr);
	if (!msg) {
		reply_error(c, NULL, API_E_PARSE, NULL, "parse error: %s",
			    jerr.text);
		return;
	}
	if (!json_is_object(msg)) {
		reply_error(c, NULL, API_E_INVALID_REQUEST, NULL,
			    json_is_array(msg) ? "batches are not supported" :
						 "a request is a JSON object");
		goto out;
	}
	id = json_object_get(msg, "id");
	if (id && !json_is_string(id) && !json_is_integer(id) &&
	    !json_is_null(id)) {
		reply_error(c, NULL, API_E_INVALID_REQUEST, NULL,
			    "id: expected a string, an integer or null");
		goto out;
	}
	r.id = id;
	v = json_object_get(msg, "jsonrpc");
	if (!json_is_string(v) || strcmp(json_string_value(v), "2.0")) {
		reply_error(c, id ? id : NULL, API_E_INVALID_REQUEST, NULL,
			    "jsonrpc: expected \"2.0\"");
		goto out;
	}
	v = json_object_get(msg, "method");
	if (!json_is_string(v)) {
		reply_error(c, id, API_E_INVALID_REQUEST, NULL,
			    "method: expected a string");
		goto out;
	}
	method = json_string_value(v);
	params = json_object_get(msg, "params");
	if (params && !json_is_object(params)) {
		reply_error(c, id, API_E_INVALID_PARAMS, NULL,
			    "params: expected an object (named parameters)");
		goto out;
	}
	r.params = params ? params : (empty = json_object());
	for (i = 0; i < ARRAY_SIZE(methods); i++) {
		if (!strcmp(method, methods[i].name)) {
			methods[i].fn(&r);
			goto out;
		}
	}
	reply_error(c, id, API_E_NO_METHOD, NULL, "%s: no such method", method);
out:
	json_decref(empty);
	json_decref(msg);
}

static void do_shutdown(struct api *api)
{
	if (api->shutdown_called)
		return;
	api->shutdown_called = true;
	api->p.shutdown(api->p.opaque);
}

/* Gone: its calls run on without it (processes are killed). */
static void client_kill(struct client *c)
{
	struct call *k;

	if (c->dead)
		return;
	c->dead = true;
	close(c->fd);
	c->fd = -1;
	for (k = c->api->calls; k; k = k->next) {
		if (k->client != c)
			continue;
		k->client = NULL;
		c->nr_calls--;
		if (!k->dead && !k->killing)
			call_abort(k, false);
	}
	if (c->shutdown_after)
		do_shutdown(c->api);
}

static bool client_throttled(const struct client *c)
{
	const struct call *k;

	if (c->out.len > API_OUT_HIGH)
		return true;
	for (k = c->api->calls; k; k = k->next)
		if (k->client == c && k->aout.len > API_STUFFED)
			return true;
	return false;
}

/* Handle the whole lines received, as long as the client keeps up. */
static void client_pump(struct api *api, struct client *c)
{
	uint8_t *p, *nl;
	size_t len;

	while (!c->dead && !c->closing && c->in.len && !client_throttled(c)) {
		p = bytequeue__peek(&c->in);
		nl = memchr(p + c->scanned, '\n', c->in.len - c->scanned);
		len = nl ? (size_t)(nl - p) : c->in.len;
		if (len > API_MAX_MESSAGE) {
			reply_error(c, NULL, API_E_INVALID_REQUEST, NULL,
				    "message larger than %u bytes",
				    API_MAX_MESSAGE);
			c->closing = true;
			bytequeue__free(&c->in);
			return;
		}
		if (!nl && !c->read_eof) {
			c->scanned = c->in.len;
			return;
		}
		/* A last message may come without its newline. */
		handle_message(api, c, (const char *)p, len);
		if (c->dead)
			return;
		bytequeue__consume(&c->in, nl ? len + 1 : len);
		c->scanned = 0;
	}
}

static bool client_wants_input(const struct client *c)
{
	return !c->read_eof && !c->closing && c->in.len <= API_MAX_MESSAGE &&
	       c->scanned == c->in.len && !client_throttled(c);
}

static void client_readable(struct client *c)
{
	ssize_t n;

	if (bytequeue__reserve(&c->in, API_READ_CHUNK)) {
		client_kill(c);
		return;
	}
	n = recv(c->fd, bytequeue__space(&c->in), API_READ_CHUNK, MSG_DONTWAIT);
	if (n < 0 && (errno == EAGAIN || errno == EINTR))
		return;
	if (n < 0) {
		client_kill(c);
		return;
	}
	if (!n)
		c->read_eof = true;
	bytequeue__commit(&c->in, n);
}

static void client_writable(struct client *c)
{
	ssize_t n = send(c->fd, bytequeue__peek(&c->out), c->out.len,
			 MSG_NOSIGNAL | MSG_DONTWAIT);

	if (n < 0 && (errno == EAGAIN || errno == EINTR))
		return;
	if (n < 0) {
		client_kill(c);
		return;
	}
	bytequeue__consume(&c->out, n);
	if (!c->out.len && c->shutdown_after)
		do_shutdown(c->api);
}

/* Done with a client that closed its side or broke the protocol. */
static void client_maybe_close(struct client *c)
{
	if (c->dead || c->out.len)
		return;
	if (c->closing || (c->read_eof && !c->in.len && !c->nr_calls))
		client_kill(c);
}

static void accept_clients(struct api *api)
{
	static const char busy[] =
		"{\"jsonrpc\":\"2.0\",\"id\":null,\"error\":{\"code\":-32004,"
		"\"message\":\"too many clients\"}}\n";
	struct client *c;
	int fd, i;

	for (i = 0; i < 16; i++) {
		fd = accept4(api->listen_fd, NULL, NULL,
			     SOCK_NONBLOCK | SOCK_CLOEXEC);
		if (fd < 0)
			return;
		c = api->nr_clients < API_MAX_CLIENTS ? calloc(1, sizeof(*c)) :
							NULL;
		if (!c) {
			if (send(fd, busy, sizeof(busy) - 1,
				 MSG_NOSIGNAL | MSG_DONTWAIT) < 0)
				(void)0; /* it is being turned away anyway */
			close(fd);
			continue;
		}
		c->api = api;
		c->fd = fd;
		c->next = api->clients;
		api->clients = c;
		api->nr_clients++;
	}
}

/* ---- the loop ------------------------------------------------------------ */

static void call_free(struct api *api, struct call *k)
{
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
	free(k);
}

static void reap(struct api *api)
{
	struct client **cp, *c;
	struct call **kp, *k;

	for (kp = &api->calls; (k = *kp);) {
		if (k->dead) {
			*kp = k->next;
			call_free(api, k);
		} else {
			kp = &k->next;
		}
	}
	for (cp = &api->clients; (c = *cp);) {
		if (c->dead) {
			*cp = c->next;
			bytequeue__free(&c->in);
			bytequeue__free(&c->out);
			api->nr_clients--;
			free(c);
		} else {
			cp = &c->next;
		}
	}
}

static int poll_add(struct api *api, size_t *n, int fd, short events,
		    enum ref_kind kind, void *ptr)
{
	if (*n == api->pfd_cap) {
		size_t cap = api->pfd_cap ? api->pfd_cap * 2 : 64;
		struct pollfd *pf = realloc(api->pfds, cap * sizeof(*pf));
		struct pref *rf;

		if (!pf)
			return -ENOMEM;
		api->pfds = pf;
		rf = realloc(api->refs, cap * sizeof(*rf));
		if (!rf)
			return -ENOMEM;
		api->refs = rf;
		api->pfd_cap = cap;
	}
	api->pfds[*n] = (struct pollfd){ .fd = fd, .events = events };
	api->refs[*n] = (struct pref){ .kind = kind,
				       .ptr = ptr,
				       .reading = events & POLLIN };
	(*n)++;
	return 0;
}

/* A call is read unless its client has too much unsent already. */
static bool call_wants_input(const struct call *k)
{
	if (k->st == AG_CONNECT || k->st == AG_HELLO)
		return true;
	return !k->client || k->client->out.len <= API_OUT_HIGH;
}

static int poll_build(struct api *api, size_t *n, uint64_t now, int *timeout)
{
	uint64_t next = 0, t;
	struct client *c;
	struct call *k;
	short ev;
	int ret;

	*n = 0;
	ret = poll_add(api, n, api->wake_fd, POLLIN, REF_WAKE, NULL);
	ret = ret ?: poll_add(api, n, api->listen_fd, POLLIN, REF_LISTEN, NULL);
	for (c = api->clients; !ret && c; c = c->next) {
		if (c->dead)
			continue;
		ev = (client_wants_input(c) ? POLLIN : 0) |
		     (c->out.len ? POLLOUT : 0);
		/* Even with no events: POLLHUP says it went away. */
		ret = poll_add(api, n, c->fd, ev, REF_CLIENT, c);
	}
	for (k = api->calls; !ret && k; k = k->next) {
		if (k->dead)
			continue;
		t = call_next_timer(k);
		if (t && (!next || t < next))
			next = t;
		if (k->fd < 0)
			continue;
		ev = (call_wants_input(k) ? POLLIN : 0) |
		     (k->aout.len && !k->out_broken ? POLLOUT : 0);
		if (ev)
			ret = poll_add(api, n, k->fd, ev, REF_CALL, k);
	}
	*timeout = !next ? -1 : next <= now ? 0 : (int)(next - now);
	return ret;
}

static void poll_dispatch(struct api *api, size_t n, uint64_t now)
{
	uint64_t val;
	size_t i;

	for (i = 0; i < n; i++) {
		short re = api->pfds[i].revents;
		struct pref *ref = &api->refs[i];
		struct client *c = ref->ptr;
		struct call *k = ref->ptr;

		if (!re)
			continue;
		switch (ref->kind) {
		case REF_WAKE:
			if (read(api->wake_fd, &val, sizeof(val)) < 0)
				(void)0; /* nonblocking: nothing to read */
			break;
		case REF_LISTEN:
			accept_clients(api);
			break;
		case REF_CLIENT:
			if (c->dead)
				break;
			if (re & POLLOUT)
				client_writable(c);
			if (c->dead)
				break;
			if (re & POLLIN)
				client_readable(c);
			else if (re & (POLLHUP | POLLERR | POLLNVAL))
				client_kill(c);
			break;
		case REF_CALL:
			if (k->dead)
				break;
			if (re & POLLOUT)
				agent_writable(k, now);
			if (!k->dead && k->fd >= 0 && ref->reading &&
			    (re & (POLLIN | POLLHUP | POLLERR)))
				agent_readable(k, now);
			break;
		}
	}
}

static void *api_thread(void *arg)
{
	struct api *api = arg;
	struct client *c;
	struct call *k;
	uint64_t now;
	size_t n;
	int timeout;

	while (!atomic_load(&api->stop)) {
		now = now_ms();
		for (k = api->calls; k; k = k->next)
			if (!k->dead)
				call_tick(k, now);
		for (c = api->clients; c; c = c->next) {
			client_pump(api, c);
			client_maybe_close(c);
		}
		reap(api);
		if (poll_build(api, &n, now, &timeout)) {
			pr_err("api: out of memory, waiting");
			timeout = 100;
			n = 2;
		}
		if (poll(api->pfds, n, timeout) < 0 && errno != EINTR) {
			pr_err("api: poll: %s", strerror(errno));
			usleep(100000); /* ENOMEM: let memory come back */
			continue;
		}
		poll_dispatch(api, n, now_ms());
		reap(api);
	}
	return NULL;
}

/* ---- create, start, destroy ---------------------------------------------- */

/* Refuse a path another live server listens on; replace a stale one. */
static int take_path(const char *path)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	struct stat st;
	int fd, ret;

	if (lstat(path, &st) < 0)
		return errno == ENOENT ? 0 : -errno;
	if (!S_ISSOCK(st.st_mode))
		return -EEXIST;
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	strcpy(sa.sun_path, path);
	ret = connect(fd, (struct sockaddr *)&sa, sizeof(sa));
	close(fd);
	if (!ret)
		return -EADDRINUSE;
	return unlink(path) < 0 ? -errno : 0;
}

static int api_listen(struct api *api)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	int ret;

	if (strlen(api->path) >= sizeof(sa.sun_path))
		return -ENAMETOOLONG;
	strcpy(sa.sun_path, api->path);
	ret = take_path(api->path);
	if (ret)
		return ret;
	api->listen_fd =
		socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (api->listen_fd < 0)
		return -errno;
	if (bind(api->listen_fd, (struct sockaddr *)&sa, sizeof(sa)) < 0)
		return -errno;
	/* Whoever holds this socket commands the guest as root. */
	if (chmod(api->path, 0600) < 0 || listen(api->listen_fd, 64) < 0) {
		ret = -errno;
		unlink(api->path);
		return ret;
	}
	return 0;
}

int api__create(struct api **out, const struct api_params *p)
{
	struct api *api;
	int ret;

	if (!p->socket_path || !p->open_agent ||
	    (p->config_facts && !json_is_array(p->config_facts)))
		return -EINVAL;
	api = calloc(1, sizeof(*api));
	if (!api)
		return -ENOMEM;
	api->p = *p;
	api->listen_fd = api->wake_fd = -1;
	api->agent_timeout_ms = p->agent_timeout_ms ? p->agent_timeout_ms :
						      API_AGENT_TIMEOUT_MS;
	api->path = strdup(p->socket_path);
	api->config_facts = p->config_facts ? json_deep_copy(p->config_facts) :
					      json_array();
	api->p.socket_path = api->path;
	api->p.config_facts = NULL;
	if (!api->path || !api->config_facts) {
		ret = -ENOMEM;
		goto out_free;
	}
	/*
	 * jansson seeds its hash function on first use, from /dev/urandom:
	 * now, while the monitor may still open files.
	 */
	json_object_seed(0);
	api->wake_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (api->wake_fd < 0) {
		ret = -errno;
		goto out_free;
	}
	ret = api_listen(api);
	if (ret)
		goto out_free;
	*out = api;
	return 0;
out_free:
	if (api->listen_fd >= 0)
		close(api->listen_fd);
	if (api->wake_fd >= 0)
		close(api->wake_fd);
	json_decref(api->config_facts);
	free(api->path);
	free(api);
	return ret;
}

int api__start(struct api *api)
{
	struct rpc r = { .api = api };
	sigset_t all, old;
	struct call *k;
	int ret;

	if (api->p.agent_ready) {
		k = call_new(&r, CALL_PROBE, false);
		if (!k)
			return -ENOMEM;
		k->retry_at = now_ms();
	}
	/* Signals are for the main thread: this one starts with all blocked. */
	sigfillset(&all);
	/* Not SIGSYS: the seccomp trap must reach its handler and say why. */
	sigdelset(&all, SIGSYS);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	ret = -pthread_create(&api->thread, NULL, api_thread, api);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	if (!ret)
		api->started = true;
	return ret;
}

void api__destroy(struct api *api)
{
	uint64_t one = 1;
	struct client *c;
	struct call *k;

	if (!api)
		return;
	if (api->started) {
		atomic_store(&api->stop, true);
		if (write(api->wake_fd, &one, sizeof(one)) < 0)
			pr_err("api: waking the thread: %s", strerror(errno));
		pthread_join(api->thread, NULL);
	}
	for (c = api->clients; c; c = c->next)
		if (!c->dead) {
			c->shutdown_after = false;
			client_kill(c);
		}
	for (k = api->calls; k; k = k->next)
		call_done(k);
	reap(api);
	close(api->listen_fd);
	close(api->wake_fd);
	unlink(api->path);
	json_decref(api->config_facts);
	free(api->pfds);
	free(api->refs);
	free(api->path);
	free(api);
}
