// SPDX-License-Identifier: GPL-2.0
/*
 * Control API clients: request lines in (bounded, throttled while the
 * client does not keep up), answers and notifications out, and the
 * dispatch of each request to its method.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "lib/base64.h"
#include "vmm/api/api-internal.h"

#define API_STUFFED (4 * API_AGENT_OUT_HIGH)

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

void client_reply(struct client *c, json_t *id, json_t *result)
{
	if (!id) { /* a notification gets no answer */
		json_decref(result);
		return;
	}
	client_send(c, json_pack("{s:s, s:O, s:o}", "jsonrpc", "2.0", "id", id,
				 "result", result ? result : json_object()));
}

void client_reply_error(struct client *c, json_t *id, int code, json_t *data,
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
	err = json_pack("{s:i, s:o}", "code", code, "message",
			api_json_str(msg));
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

void client_notify(struct client *c, const char *method, json_t *params)
{
	if (!c) {
		json_decref(params);
		return;
	}
	client_send(c, json_pack("{s:s, s:s, s:o}", "jsonrpc", "2.0", "method",
				 method, "params", params));
}

/*
 * The line client_notify(c, method, {"stream": stream, "data": base64 of
 * p}) would queue, written straight into the client's queue: base64
 * needs no JSON escaping, and json_dumps scans a string byte by byte
 * into a growing buffer, which made a stream's bytes cost about eight
 * times their base64 encoding (benchmarks.md, "Guest agent benchmark").
 * method is one of ours: no character of it needs escaping either.
 */
void client_notify_data(struct client *c, const char *method, uint64_t stream,
			const void *p, size_t len)
{
	char fields[API_NOTIFY_FIELDS_MAX];

	snprintf(fields, sizeof(fields), "\"stream\":%" PRIu64, stream);
	client_notify_bytes(c, method, fields, p, len);
}

bool client_notify_bytes(struct client *c, const char *method,
			 const char *fields, const void *p, size_t len)
{
	static const char tail[] = "\"}}\n";
	char head[API_NOTIFY_FIELDS_MAX + 64];
	size_t need;
	uint8_t *at;
	int n;

	if (!c || c->dead)
		return true;
	n = snprintf(head, sizeof(head),
		     "{\"jsonrpc\":\"2.0\",\"method\":\"%s\","
		     "\"params\":{%s,\"data\":\"",
		     method, fields);
	if (n < 0 || (size_t)n >= sizeof(head))
		return false;
	need = n + base64__encoded_len(len) + sizeof(tail) - 1;
	if (bytequeue__reserve(&c->out, need)) {
		pr_err("api: client %d: out of memory, dropping it", c->fd);
		client_kill(c);
		return true;
	}
	at = bytequeue__space(&c->out);
	memcpy(at, head, n);
	base64__encode(p, len, (char *)at + n);
	memcpy(at + n + base64__encoded_len(len), tail, sizeof(tail) - 1);
	bytequeue__commit(&c->out, need);
	return true;
}

/*
 * A notification with a body (the mirror of a request's, "Bodies"
 * below): the line client_notify(c, method, params + {"size": len})
 * would queue, then exactly len raw bytes. params (stolen) is small
 * (no data in it), so jansson's dump of it costs little.
 */
void client_notify_body(struct client *c, const char *method, json_t *params,
			const void *p, size_t len)
{
	if (!c || c->dead || !params) {
		json_decref(params);
		return;
	}
	json_object_set_new(params, "size", json_integer((json_int_t)len));
	client_notify(c, method, params);
	if (!c->dead && len && bytequeue__append(&c->out, p, len)) {
		pr_err("api: client %d: out of memory, dropping it", c->fd);
		client_kill(c);
	}
}

/* Every method the API offers, group by group. */
static const struct api_method *const method_groups[] = {
	proc_methods,  fs_methods,	  vm_methods,	 call_methods,
	event_methods, container_methods, grant_methods,
};

static const struct api_method *method_find(const char *name)
{
	const struct api_method *m;
	size_t i;

	for (i = 0; i < ARRAY_SIZE(method_groups); i++)
		for (m = method_groups[i]; m->name; m++)
			if (!strcmp(name, m->name))
				return m;
	return NULL;
}

/*
 * A request line as a JSON-RPC request (a new reference), its method in
 * *method (NULL: no such method, for request_run to say); NULL when it
 * was no request, answered here.
 */
static json_t *request_parse(struct client *c, const char *line, size_t len,
			     const struct api_method **method)
{
	json_t *msg, *id, *v, *params;
	json_error_t jerr;

	msg = json_loadb(line, len, JSON_REJECT_DUPLICATES | JSON_DECODE_ANY,
			 &jerr);
	if (!msg) {
		client_reply_error(c, NULL, API_E_PARSE, NULL,
				   "parse error: %s", jerr.text);
		return NULL;
	}
	if (!json_is_object(msg)) {
		client_reply_error(c, NULL, API_E_INVALID_REQUEST, NULL,
				   json_is_array(msg) ?
					   "batches are not supported" :
					   "a request is a JSON object");
		goto bad;
	}
	id = json_object_get(msg, "id");
	if (id && !json_is_string(id) && !json_is_integer(id) &&
	    !json_is_null(id)) {
		client_reply_error(c, NULL, API_E_INVALID_REQUEST, NULL,
				   "id: expected a string, an integer or null");
		goto bad;
	}
	v = json_object_get(msg, "jsonrpc");
	if (!json_is_string(v) || strcmp(json_string_value(v), "2.0")) {
		client_reply_error(c, id ? id : NULL, API_E_INVALID_REQUEST,
				   NULL, "jsonrpc: expected \"2.0\"");
		goto bad;
	}
	v = json_object_get(msg, "method");
	if (!json_is_string(v)) {
		client_reply_error(c, id, API_E_INVALID_REQUEST, NULL,
				   "method: expected a string");
		goto bad;
	}
	params = json_object_get(msg, "params");
	if (params && !json_is_object(params)) {
		client_reply_error(
			c, id, API_E_INVALID_PARAMS, NULL,
			"params: expected an object (named parameters)");
		goto bad;
	}
	*method = method_find(json_string_value(v));
	return msg;
bad:
	json_decref(msg);
	return NULL;
}

/* A parsed request (msg, borrowed) to its method; body as in struct rpc. */
static void request_run(struct api *api, struct client *c, json_t *msg,
			const struct api_method *m, const struct rpc *body)
{
	struct rpc r = { .api = api, .c = c };
	const char *method = json_string_value(json_object_get(msg, "method"));
	json_t *empty = NULL;

	if (body) {
		r = *body;
		r.api = api;
		r.c = c;
	}
	r.id = json_object_get(msg, "id");
	r.params = json_object_get(msg, "params");
	if (!r.params)
		r.params = empty = json_object();
	/* A scoped socket: only what its grant allows gets further. */
	if (c->grant && grant_refuses(&r, method))
		goto out;
	if (m)
		m->fn(&r);
	else
		client_reply_error(c, r.id, API_E_NO_METHOD, NULL,
				   "%s: no such method", method);
out:
	json_decref(empty);
}

/*
 * Bodies. A method that takes one (struct api_method's body: fs.write),
 * called with params.size = N, is followed on the connection by exactly
 * N raw bytes, read as its body before the next line; then the method
 * runs, once, with all of them. Nothing else is ever read as a body, and
 * the body is taken whatever the method then makes of the request (a
 * grant's refusal, no such stream), so the line after it is a line.
 * A size that is no byte count, or over API_MAX_BODY, leaves the
 * connection without a way to find the next line: refused, naming it,
 * and closed. A connection that ends inside a body runs the method with
 * what came (body_cut), for it to fail the call.
 *
 * True when the request (msg, stolen) waits for its body.
 */
static bool body_expect(struct client *c, json_t *msg,
			const struct api_method *m)
{
	json_t *id = json_object_get(msg, "id");
	json_t *v = json_object_get(json_object_get(msg, "params"), "size");
	json_int_t n;

	if (!m || !m->body || !v)
		return false;
	n = json_is_integer(v) ? json_integer_value(v) : -1;
	if (n < 0) {
		client_reply_error(
			c, id, API_E_INVALID_PARAMS, NULL,
			"size: expected the byte count of the body "
			"after the request (0 to %u); the connection "
			"closes",
			API_MAX_BODY);
	} else if ((uint64_t)n > API_MAX_BODY) {
		client_reply_error(
			c, id, API_E_LIMIT,
			json_pack("{s:I, s:I}", "size", n, "limit",
				  (json_int_t)API_MAX_BODY),
			"size %lld: larger than a body's limit of %u "
			"bytes; the connection closes",
			(long long)n, API_MAX_BODY);
	} else {
		c->body_msg = msg;
		c->body_method = m;
		c->body_len = n;
		return true;
	}
	c->closing = true;
	json_decref(msg);
	return true;
}

/* The waiting request's body is in (or the connection ended): run it. */
static void body_run(struct api *api, struct client *c)
{
	struct rpc r = { .has_body = true };
	json_t *msg = c->body_msg;

	r.body_len = c->in.len < c->body_len ? c->in.len : c->body_len;
	r.body_cut = r.body_len < c->body_len;
	r.body = r.body_len ? bytequeue__peek(&c->in) : NULL;
	c->body_msg = NULL;
	request_run(api, c, msg, c->body_method, &r);
	json_decref(msg);
	if (!c->dead)
		bytequeue__consume(&c->in, r.body_len);
}

static void handle_message(struct api *api, struct client *c, const char *line,
			   size_t len)
{
	const struct api_method *m = NULL;
	json_t *msg = request_parse(c, line, len, &m);

	if (!msg || body_expect(c, msg, m))
		return;
	request_run(api, c, msg, m, NULL);
	json_decref(msg);
}

static void do_shutdown(struct api *api)
{
	if (api->shutdown_called)
		return;
	api->shutdown_called = true;
	api->p.shutdown(api->p.opaque);
	vm_poweroff_start(api);
}

void api__shutdown(struct api *api)
{
	uint64_t one = 1;

	if (!api || !api->p.shutdown)
		return;
	atomic_store(&api->shutdown_asked, true);
	/* An eventfd write never blocks; saturated, it is awake anyway. */
	if (write(api->wake_fd, &one, sizeof(one)) < 0)
		(void)0;
}

void client_shutdown_asked(struct api *api)
{
	if (atomic_exchange(&api->shutdown_asked, false))
		do_shutdown(api);
}

/* Gone: its calls run on without it (processes are killed). */
void client_kill(struct client *c)
{
	struct call *k;

	if (c->dead)
		return;
	c->dead = true;
	close(c->fd);
	c->fd = -1;
	if (c->api->p.fds)
		fd_budget__put(c->api->p.fds, 1);
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

/* Handle the whole lines (and bodies) received, while the client keeps up. */
void client_pump(struct api *api, struct client *c)
{
	uint8_t *p, *nl;
	size_t len;

	while (!c->dead && !c->closing && (c->in.len || c->body_msg) &&
	       !client_throttled(c)) {
		if (c->body_msg) {
			if (c->in.len < c->body_len && !c->read_eof)
				return;
			body_run(api, c);
			continue;
		}
		p = bytequeue__peek(&c->in);
		nl = memchr(p + c->scanned, '\n', c->in.len - c->scanned);
		len = nl ? (size_t)(nl - p) : c->in.len;
		if (len > API_MAX_MESSAGE) {
			client_reply_error(c, NULL, API_E_INVALID_REQUEST, NULL,
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

/*
 * Read while it is open, every line so far is handled (a body: not all
 * of it is in), not throttled.
 */
bool client_wants_input(const struct client *c)
{
	if (c->read_eof || c->closing || client_throttled(c))
		return false;
	if (c->body_msg)
		return c->in.len < c->body_len;
	return c->in.len <= API_MAX_MESSAGE && c->scanned == c->in.len;
}

void client_readable(struct client *c)
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

void client_writable(struct client *c)
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
void client_maybe_close(struct client *c)
{
	if (c->dead || c->out.len)
		return;
	if (c->closing ||
	    (c->read_eof && !c->in.len && !c->body_msg && !c->nr_calls))
		client_kill(c);
}

/*
 * Out of descriptors (or memory): the connection waits in the backlog
 * and the listener stays readable; polling it again at once would spin.
 */
static void accept_failed(struct api *api, int err)
{
	if (err != EMFILE && err != ENFILE && err != ENOBUFS && err != ENOMEM)
		return; /* EAGAIN: none left; ECONNABORTED...: the next one */
	api->accept_at = api_now_ms() + API_ACCEPT_BACKOFF_MS;
	if (!api->accept_warned)
		pr_warn("api: accepting a client: %s; new clients wait "
			"(further failures not logged)",
			strerror(err));
	api->accept_warned = true;
}

/* One line saying why, then closed. */
static void turn_away(int fd, const char *line)
{
	if (send(fd, line, strlen(line), MSG_NOSIGNAL | MSG_DONTWAIT) < 0)
		(void)0; /* it is being turned away anyway */
	close(fd);
}

/*
 * Up to 16 new clients a round; past API_MAX_CLIENTS or the descriptor
 * budget, turned away.
 */
void client_accept(struct api *api, struct api_grant *g)
{
	static const char busy[] =
		"{\"jsonrpc\":\"2.0\",\"id\":null,\"error\":{\"code\":-32004,"
		"\"message\":\"too many clients\"}}\n";
	static const char no_fds[] =
		"{\"jsonrpc\":\"2.0\",\"id\":null,\"error\":{\"code\":-32004,"
		"\"message\":\"the monitor's descriptor budget is spent\"}}\n";
	struct client *c;
	int fd, i;

	for (i = 0; i < 16; i++) {
		fd = accept4(g ? g->listen_fd : api->listen_fd, NULL, NULL,
			     SOCK_NONBLOCK | SOCK_CLOEXEC);
		if (fd < 0) {
			accept_failed(api, errno);
			return;
		}
		if (api->p.fds && fd_budget__take(api->p.fds, 1)) {
			turn_away(fd, no_fds);
			continue;
		}
		c = api->nr_clients < API_MAX_CLIENTS ? calloc(1, sizeof(*c)) :
							NULL;
		if (!c) {
			if (api->p.fds)
				fd_budget__put(api->p.fds, 1);
			turn_away(fd, busy);
			continue;
		}
		c->api = api;
		c->grant = g;
		c->fd = fd;
		c->next = api->clients;
		api->clients = c;
		api->nr_clients++;
	}
}
