// SPDX-License-Identifier: GPL-2.0
/*
 * fuzz h2 - the HTTP/2 interception (net/h2.c): frames from the guest
 * and from upstream, interleaved, with the clock's sweeps and the
 * decisions' resumptions in between.
 *
 * Input: a byte of options (the decision: allow with an injected secret,
 * refuse, or wait), then steps, each a byte (what: guest bytes, upstream
 * bytes, a sweep, a resumption, a side's end, upstream failing), and for
 * bytes two more of their length (little-endian) and the bytes. The
 * guest's stream starts with the client preface, which the target sends
 * itself, so inputs are frames from their first byte. After each step
 * both sides' output is taken. Checked for every input: feed takes at
 * most what it is given or fails -EPROTO/-ENOMEM/-ENOBUFS; what a side
 * is given to send is bounded; the connection holds at most
 * H2_CONN_BUDGET; a refusal is a 4xx or 5xx.
 */
#include <errno.h>
#include <nghttp2/nghttp2.h>

#include "lib/compiler.h"
#include "net/h2.h"
#include "selftests/fuzz/fuzz.h"

#define HOST  "api.example.com"
#define PORT  443
#define TOKEN "kiln-fuzz-secret-h2c7"

enum decision { ALLOW_INJECT, REFUSE, WAIT, NR_DECISIONS };

enum step {
	STEP_GUEST,
	STEP_UP,
	STEP_EXPIRE,
	STEP_RESUME,
	STEP_EOF_GUEST,
	STEP_EOF_UP,
	STEP_UP_FAILED,
	NR_STEPS,
};

#define MAX_STEPS    64
#define SWEEP_MS     1000U
#define EXPIRE_LIMIT 2000U
#define OUTPUT_BOUND (H2_OUTPUT_MAX + H2_FEED_CHUNK + H2_HEADER_LIST_MAX)

struct fuzz_h2 {
	enum decision d;
	bool resuming;
	uint64_t now;
};

static int decide(void *opaque, const struct http_request *req,
		  struct http_edits *e)
{
	struct fuzz_h2 *f = opaque;

	fuzz_check(req->method && req->hostname);
	switch (f->d) {
	case WAIT:
		if (!f->resuming)
			return HTTP_PENDING;
		fallthrough;
	case ALLOW_INJECT:
		if (http_edits__set(e, "authorization", "Bearer " TOKEN))
			return http_edits__refuse(e, 500, "edit failed");
		return HTTP_ALLOW;
	default:
		return http_edits__refuse(e, 403, "not granted");
	}
}

static void on_refused(void *opaque, unsigned int status, const char *reason)
{
	fuzz_check(status >= 400 && status <= 599 && reason);
}

static void take_output(struct h2 *h)
{
	size_t len;

	h2__output(h, H2_GUEST, &len);
	fuzz_check(len <= OUTPUT_BOUND);
	h2__drain(h, H2_GUEST, len);
	h2__output(h, H2_UP, &len);
	fuzz_check(len <= OUTPUT_BOUND);
	h2__drain(h, H2_UP, len);
}

/* Bytes to a side, as the proxy gives them: again while some are taken. */
static bool feed(struct h2 *h, enum h2_side side, const uint8_t *p, size_t len)
{
	ssize_t n;

	while (len) {
		n = h2__feed(h, side, p, len);
		take_output(h);
		if (n < 0) {
			fuzz_check(n == -EPROTO || n == -ENOMEM ||
				   n == -ENOBUFS);
			return false;
		}
		fuzz_check((size_t)n <= len);
		/* Whatever the guest does: within the connection's budget. */
		fuzz_check(h2__held(h) <= H2_CONN_BUDGET);
		if (!n)
			break;
		p += n;
		len -= n;
	}
	return true;
}

static bool step(struct h2 *h, struct fuzz_h2 *f, struct fuzz_in *in)
{
	enum step s = (enum step)(fuzz_in__u8(in) % NR_STEPS);
	const uint8_t *p;
	size_t len;
	int ret;

	switch (s) {
	case STEP_GUEST:
	case STEP_UP:
		p = fuzz_in__bytes(in, fuzz_in__u16(in), &len);
		return feed(h, s == STEP_GUEST ? H2_GUEST : H2_UP, p, len);
	case STEP_EXPIRE:
		f->now += SWEEP_MS;
		ret = h2__expire(h, f->now, EXPIRE_LIMIT, 504,
				 "upstream quiet");
		take_output(h);
		return ret >= 0;
	case STEP_RESUME:
		f->resuming = true;
		ret = h2__resume(h);
		take_output(h);
		return ret == 0;
	case STEP_EOF_GUEST:
	case STEP_EOF_UP:
		h2__eof(h, s == STEP_EOF_GUEST ? H2_GUEST : H2_UP);
		take_output(h);
		return true;
	default:
		h2__upstream_failed(h, 502, "no upstream");
		take_output(h);
		return true;
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static const char preface[] = NGHTTP2_CLIENT_MAGIC;
	struct fuzz_h2 f = { 0 };
	const struct h2_params hp = { .hostname = HOST,
				      .port = PORT,
				      .on_request = decide,
				      .on_refused = on_refused,
				      .opaque = &f };
	struct fuzz_in in;
	struct h2 *h;

	fuzz__quiet();
	fuzz_in__init(&in, data, size);
	f.d = (enum decision)(fuzz_in__u8(&in) % NR_DECISIONS);
	if (h2__create(&h, &hp))
		return 0;
	if (feed(h, H2_GUEST, (const uint8_t *)preface, sizeof(preface) - 1))
		for (int i = 0; i < MAX_STEPS && in.left; i++)
			if (!step(h, &f, &in))
				break;
	h2__destroy(h);
	return 0;
}
