// SPDX-License-Identifier: GPL-2.0
/*
 * fuzz api - the control API (vmm/api/, Documentation/api.md) between a
 * hostile client and a hostile guest agent: the JSON-RPC lines a client
 * sends, and the frames the agent answers every request with.
 *
 * Input: two bytes (little-endian) of the client's length, the client's
 * bytes (JSON-RPC requests, a line each), then the agent's bytes: the
 * frames (proto/agent.h) every agent connection gets after its HELLO,
 * which the target sends first, then the agent's end. The API runs as
 * the monitor runs it, on its own thread over real sockets; the agent's
 * side of each connection reads nothing (the API's requests to it fail
 * as to an agent that stopped reading). The client sends everything,
 * ends its side and reads until the API closes the connection, which it
 * does once every call is over.
 *
 * Checked for every input: the API closes the client within a deadline
 * (no call waits for ever on an agent that is gone), every line it
 * answers with is a JSON-RPC 2.0 object, and nothing crashes.
 */
#include <errno.h>
#include <jansson.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "proto/tlv.h"
#include "vmm/api.h"
#include "selftests/fuzz/fuzz.h"

#define AGENT_MAX	  (64U << 10) /* an agent script; what a pipe takes */
#define AGENT_TIMEOUT_MS  500U
#define CLIENT_DEADLINE_S 20 /* the API is done by then, or hangs */
#define POLL_MS		  100
#define READ_CHUNK	  65536

struct fuzz_api {
	const uint8_t *agent; /* HELLO, then the input's frames */
	size_t agent_len;
	uint8_t *out; /* what the client got */
	size_t out_len, out_cap;
};

/* An agent connection: the whole script is there already, then its end. */
static int open_agent(void *opaque)
{
	struct fuzz_api *f = opaque;
	int sv[2];
	ssize_t n;

	if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv))
		return -errno;
	n = write(sv[1], f->agent, f->agent_len);
	close(sv[1]);
	if (n != (ssize_t)f->agent_len) {
		close(sv[0]);
		return -EIO;
	}
	return sv[0];
}

static int agent_script(struct fuzz_api *f, const uint8_t *p, size_t len)
{
	struct kiln_buf hello;
	struct kiln_frame fr;
	uint8_t *s;

	kiln_buf__init(&hello);
	if (kiln_tlv__put_u64(&hello, KILN_T_VERSION, KILN_AGENT_VERSION)) {
		kiln_buf__free(&hello);
		return -ENOMEM;
	}
	if (len > AGENT_MAX - sizeof(fr) - hello.len)
		len = AGENT_MAX - sizeof(fr) - hello.len;
	s = malloc(sizeof(fr) + hello.len + len + 1);
	if (!s) {
		kiln_buf__free(&hello);
		return -ENOMEM;
	}
	kiln_frame__pack(&fr, KILN_MSG_HELLO, 0, hello.len);
	memcpy(s, &fr, sizeof(fr));
	memcpy(s + sizeof(fr), hello.data, hello.len);
	memcpy(s + sizeof(fr) + hello.len, p, len);
	f->agent = s;
	f->agent_len = sizeof(fr) + hello.len + len;
	kiln_buf__free(&hello);
	return 0;
}

static int connect_to(const char *path)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);

	if (fd < 0)
		return -1;
	snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", path);
	if (connect(fd, (struct sockaddr *)&sa, sizeof(sa))) {
		close(fd);
		return -1;
	}
	return fd;
}

static void keep(struct fuzz_api *f, const uint8_t *p, size_t n)
{
	uint8_t *grown;

	if (f->out_len + n > f->out_cap) {
		f->out_cap = (f->out_len + n) * 2;
		grown = realloc(f->out, f->out_cap);
		fuzz_check(grown);
		f->out = grown;
	}
	memcpy(f->out + f->out_len, p, n);
	f->out_len += n;
}

/* Sends p, ends its side, reads until the API closes; false: it hung. */
static bool converse(struct fuzz_api *f, int fd, const uint8_t *p, size_t len)
{
	time_t end = time(NULL) + CLIENT_DEADLINE_S;
	static uint8_t buf[READ_CHUNK];
	struct pollfd pfd = { .fd = fd };
	bool sent = false;
	ssize_t n;

	while (time(NULL) < end) {
		if (!sent && !len) {
			shutdown(fd, SHUT_WR);
			sent = true;
		}
		pfd.events = POLLIN | (sent ? 0 : POLLOUT);
		if (poll(&pfd, 1, POLL_MS) <= 0)
			continue;
		if (pfd.revents & POLLOUT) {
			n = send(fd, p, len, MSG_NOSIGNAL);
			if (n < 0 && errno != EAGAIN) {
				len = 0; /* it closed on us: read the rest */
			} else if (n > 0) {
				p += n;
				len -= n;
			}
		}
		if (pfd.revents & (POLLIN | POLLHUP | POLLERR)) {
			n = recv(fd, buf, sizeof(buf), 0);
			if (n == 0 || (n < 0 && errno != EAGAIN))
				return true;
			if (n > 0)
				keep(f, buf, n);
		}
	}
	return false;
}

/* Each line the API wrote: a JSON-RPC 2.0 answer or notification. */
static void check_answers(const struct fuzz_api *f)
{
	const uint8_t *p = f->out, *end, *nl;
	json_t *msg, *v;

	if (!f->out_len)
		return;
	for (end = p + f->out_len; p < end;) {
		nl = memchr(p, '\n', end - p);
		fuzz_check(nl); /* every answer ends its line */
		msg = json_loadb((const char *)p, nl - p, 0, NULL);
		fuzz_check(json_is_object(msg));
		v = json_object_get(msg, "jsonrpc");
		fuzz_check(json_is_string(v) &&
			   !strcmp(json_string_value(v), "2.0"));
		json_decref(msg);
		p = nl + 1;
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct fuzz_api f = { 0 };
	struct api_params p = { .open_agent = open_agent,
				.opaque = &f,
				.agent_timeout_ms = AGENT_TIMEOUT_MS };
	const uint8_t *client, *agent;
	size_t client_len, agent_len;
	char path[64];
	struct fuzz_in in;
	struct api *api;
	int fd;

	fuzz__quiet();
	fuzz_in__init(&in, data, size);
	client = fuzz_in__bytes(&in, fuzz_in__u16(&in), &client_len);
	agent = fuzz_in__bytes(&in, in.left, &agent_len);
	if (agent_script(&f, agent, agent_len))
		return 0;
	snprintf(path, sizeof(path), "/tmp/kiln-fuzz-api-%d.sock", getpid());
	p.socket_path = path;
	fuzz_check(!api__create(&api, &p));
	fuzz_check(!api__start(api, NULL));
	fd = connect_to(path);
	fuzz_check(fd >= 0);
	fuzz_check(converse(&f, fd, client, client_len));
	close(fd);
	api__destroy(api);
	check_answers(&f);
	free(f.out);
	free((void *)f.agent);
	return 0;
}
