// SPDX-License-Identifier: GPL-2.0
/*
 * Control API agent connections: reaching the guest agent (open,
 * vsock CONNECT, HELLO, retried until the deadline) and frames both ways,
 * each incoming frame handed to the group of its call.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "lib/counter.h"
#include "lib/log.h"
#include "proto/reseed.h"
#include "vmm/api/api-internal.h"

#define API_RETRY_MS	     100 /* between attempts to reach the agent */
#define API_PROBE_MS	     200 /* between readiness probes */
#define API_CONNECT_LINE_MAX 64	 /* "OK <port>\n" from a vsock device */

static int set_nonblock(int fd)
{
	int fl = fcntl(fd, F_GETFL);

	if (fl < 0 || fcntl(fd, F_SETFL, fl | O_NONBLOCK) < 0)
		return -errno;
	return 0;
}

void agent_send(struct call *k, uint16_t type, uint16_t flags,
		const void *payload, size_t len)
{
	struct kiln_frame f;

	if (k->out_broken || k->fd < 0)
		return;
	if (k->aout.len + sizeof(f) + len > API_AGENT_OUT_MAX) {
		/* It stopped reading: as if its socket had failed. */
		k->out_broken = true;
		bytequeue__free(&k->aout);
		if (k->pending)
			call_flush_pending(
				k, API_E_AGENT,
				"the guest stopped reading this stream", NULL);
		return;
	}
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
void agent_send_data(struct call *k, uint16_t type, const uint8_t *p,
		     size_t len, bool eof)
{
	do {
		size_t n = len < KILN_DATA_CHUNK ? len : KILN_DATA_CHUNK;

		agent_send(k, type, eof && n == len ? KILN_F_EOF : 0, p, n);
		len -= n;
		if (len) /* an empty upload has no buffer: p may be NULL */
			p += n;
	} while (len);
}

void agent_send_u64(struct call *k, uint16_t type, uint16_t tag, uint64_t v)
{
	struct kiln_buf b;

	kiln_buf__init(&b);
	if (!kiln_tlv__put_u64(&b, tag, v))
		agent_send(k, type, 0, b.data, b.len);
	kiln_buf__free(&b);
}

void agent_retry(struct call *k, int err, uint64_t now)
{
	char why[160];

	call_close_fd(k);
	k->st = AG_WAIT;
	k->last_err = err;
	if (k->kind == CALL_PROBE) {
		k->retry_at = now + API_PROBE_MS;
		pr_debug("guest agent: readiness probe: %s; again in %d ms",
			 err ? strerror(-err) : "no greeting", API_PROBE_MS);
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

void agent_reopen(struct call *k)
{
	call_close_fd(k);
	k->st = AG_WAIT;
	k->retry_at = api_now_ms();
}

bool agent_gated(const struct api *api)
{
	return api->reseed_pending || api->mounts_step != MOUNTS_READY;
}

void agent_gate_next(struct call *k)
{
	if (agent_gated(k->api)) {
		agent_reopen(k);
		return;
	}
	agent_mark_ready(k->api);
	call_done(k);
}

/* One attempt to reach the agent; a failure schedules the next. */
void agent_try_open(struct call *k, uint64_t now)
{
	struct api *api = k->api;
	char line[32];
	int fd, n;

	if (api->p.fds && fd_budget__take(api->p.fds, 1)) {
		agent_retry(k, -EMFILE, now);
		return;
	}
	fd = api->p.open_agent(api->p.opaque);
	if (fd < 0) {
		if (api->p.fds)
			fd_budget__put(api->p.fds, 1);
		counter__add(&api->counters.agent_open_failures, 1);
		agent_retry(k, fd, now);
		return;
	}
	counter__add(&api->counters.agent_connections, 1);
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

void agent_mark_ready(struct api *api)
{
	if (api->agent_ready)
		return;
	api->agent_ready = true;
	api__event(api, "agent-ready", NULL);
	if (api->p.agent_ready)
		api->p.agent_ready(api->p.opaque);
}

/*
 * The request needs what this agent lacks (one from an older initramfs,
 * in a restored snapshot): refused, rather than sent and misread (an
 * agent ignores fields it does not know: T_ENV_MERGE would replace,
 * T_USER would run the command as root).
 */
static void feature_missing(struct call *k, uint64_t features)
{
	static const struct {
		uint64_t bit;
		const char *name, *what;
	} needs[] = {
		{ KILN_FEATURE_ENV_MERGE, "ENV_MERGE", "envMode \"merge\"" },
		{ KILN_FEATURE_USER, "USER", "user" },
		{ KILN_FEATURE_CONTAINER, "CONTAINER",
		  "containers (and uid, gid, rlimits, noNewPrivileges)" },
		{ KILN_FEATURE_CONFINE, "CONFINE", "a scoped socket" },
	};
	uint64_t missing = k->need_features & ~features;
	const char *name = "a feature", *what = "the request";
	char why[160];

	for (size_t i = 0; i < ARRAY_SIZE(needs); i++) {
		if (missing & needs[i].bit) {
			name = needs[i].name;
			what = needs[i].what;
			break;
		}
	}
	snprintf(why, sizeof(why),
		 "guest agent lacks %s (features 0x%llx): %s needs a newer "
		 "guest agent",
		 name, (unsigned long long)features, what);
	call_lost(k, why);
}

static void agent_hello(struct call *k, const uint8_t *p, size_t len)
{
	struct api *api = k->api;
	uint64_t version, features;
	char why[96];

	if (kiln_hello__decode(p, len, &version, &features))
		version = 0;
	if (version != KILN_AGENT_VERSION) {
		snprintf(why, sizeof(why),
			 "guest agent speaks protocol version %llu, not %u",
			 (unsigned long long)version, KILN_AGENT_VERSION);
		call_lost(k, why);
		return;
	}
	if (agent_gated(api)) {
		if (k->kind == CALL_PROBE && api->reseed_pending)
			reseed_start(k, features);
		else if (k->kind == CALL_PROBE)
			mounts_start(k, features);
		else /* nothing runs before the reseed and the mounts */
			agent_retry(k, -EAGAIN, api_now_ms());
		return;
	}
	k->st = AG_ACTIVE;
	agent_mark_ready(api);
	if (k->kind == CALL_PROBE) {
		call_done(k);
		return;
	}
	if (k->need_features & ~features) {
		feature_missing(k, features);
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
		} else if (k->kind == CALL_PROBE && k->api->reseed_pending) {
			reseed_frame(k, type, flags, payload, len);
		} else if (k->kind == CALL_PROBE) {
			mounts_frame(k, type, flags, payload, len);
		} else if (call_is_proc(k)) {
			proc_frame(k, type, flags, payload, len);
		} else if (k->kind == CALL_FACTS || k->kind == CALL_VM_FACTS) {
			facts_frame(k, type, flags, payload, len);
		} else if (k->kind == CALL_POWEROFF) {
			vm_poweroff_frame(k, type, flags, payload, len);
		} else if (k->kind == CALL_CONTAINER ||
			   k->kind == CALL_CONTAINER_LIST) {
			container_frame(k, type, flags, payload, len);
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
	/* A probe keeps trying, its RESEED included (a vsock reset). */
	if (k->st == AG_CONNECT || k->st == AG_HELLO || k->kind == CALL_PROBE) {
		agent_retry(k, err ? err : -ECONNRESET, now);
		return;
	}
	if (k->cancelled)
		call_fail(k, API_E_ABORTED, NULL, "cancelled");
	else
		call_fail(k, API_E_AGENT, NULL, "guest agent connection lost");
	call_done(k);
}

void agent_readable(struct call *k, uint64_t now)
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

void agent_writable(struct call *k, uint64_t now)
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
			call_flush_pending(
				k, API_E_AGENT,
				"the guest stopped reading this stream", NULL);
		return;
	}
	bytequeue__consume(&k->aout, n);
	if (k->pending && k->aout.len <= API_AGENT_OUT_HIGH)
		call_flush_pending(k, 0, NULL, NULL);
}
