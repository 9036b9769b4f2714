// SPDX-License-Identifier: GPL-2.0
/*
 * fuzz http1 - the HTTP/1.1 rewriter (net/http1.c): a guest's request
 * bytes, then upstream's response bytes on the same connection.
 *
 * Input: a byte of options (the decision: allow with an injected
 * secret, remove a field, refuse, or wait and then allow; TLS or not;
 * the flow's hostname given or taken from Host), a byte of the feed's
 * step (the guest's splits), two bytes (little-endian) of the request
 * stream's length, the request stream, then the response stream.
 * Checked for every input: feed takes what it is given or refuses with
 * -EPROTO and a 4xx/5xx whose error response builds; the injected
 * secret never reaches a refusal; what goes upstream never holds more
 * than the output limit plus one feed's worth.
 */
#include <errno.h>

#include "lib/compiler.h"
#include "net/http1.h"
#include "selftests/fuzz/fuzz.h"

#define HOST  "api.example.com"
#define PORT  443
#define TOKEN "kiln-fuzz-secret-51d0"

enum decision { ALLOW_INJECT, REMOVE, REFUSE, WAIT, NR_DECISIONS };

#define OPT_DECISION_MASK 0x3U
#define OPT_PLAIN	  0x4U /* no TLS: port 80, http */
#define OPT_NO_HOSTNAME	  0x8U /* the first Host names the flow */
#define STEP_MAX	  64U

struct decider {
	enum decision d;
	bool resumed;
};

static int decide(void *opaque, const struct http_request *req,
		  struct http_edits *e)
{
	struct decider *dc = opaque;

	fuzz_check(req->method && req->hostname);
	fuzz_check(req->version_minor <= 1);
	fuzz_check(req->path_len <= req->target_len);
	switch (dc->d) {
	case WAIT:
		if (!dc->resumed)
			return HTTP_PENDING;
		fallthrough;
	case ALLOW_INJECT:
		if (http_edits__set(e, "authorization", "Bearer " TOKEN))
			return http_edits__refuse(e, 500, "edit failed");
		return req->upgrade ? HTTP_ALLOW_UPGRADE : HTTP_ALLOW;
	case REMOVE:
		if (http_edits__remove(e, "user-agent"))
			return http_edits__refuse(e, 500, "edit failed");
		return HTTP_ALLOW;
	default:
		return http_edits__refuse(e, 403, "not granted");
	}
}

static void check_refusal(const struct http1_req *h)
{
	const struct http1_refusal *f = http1_req__refusal(h);
	char buf[HTTP1_ERROR_RESPONSE_MAX];
	ssize_t n;

	fuzz_check(f);
	fuzz_check(f->status >= 400 && f->status <= 599);
	fuzz_check(memchr(f->reason, '\0', sizeof(f->reason)));
	fuzz_check(!strstr(f->reason, TOKEN));
	n = http1__error_response(f->status, f->reason, buf, sizeof(buf));
	fuzz_check(n > 0 && (size_t)n <= sizeof(buf));
	fuzz_check(!memmem(buf, n, TOKEN, strlen(TOKEN)));
}

static void drain(struct http1_req *h)
{
	size_t len;

	http1_req__output(h, &len);
	fuzz_check(len <= HTTP1_OUTPUT_MAX + HTTP1_HEAD_MAX + HTTP_EDITS_MAX);
	http1_req__drain(h, len);
}

/* The request stream; false once the request side failed. */
static bool feed_requests(struct http1_req *h, struct decider *dc,
			  const uint8_t *p, size_t len, size_t step)
{
	size_t off = 0, n;
	ssize_t got;
	int stuck = 0;

	while (off < len) {
		n = step < len - off ? step : len - off;
		got = http1_req__feed(h, p + off, n);
		drain(h);
		if (got < 0) {
			fuzz_check(got == -EPROTO);
			check_refusal(h);
			return false;
		}
		fuzz_check((size_t)got <= n);
		off += got;
		if (got)
			continue;
		if (http1_req__pending(h)) {
			dc->resumed = true;
			got = http1_req__resume(h);
			drain(h);
			if (got < 0) {
				check_refusal(h);
				return false;
			}
		}
		/* Nothing taken twice in a row: it waits for the upstream. */
		if (++stuck > 2)
			break;
	}
	fuzz_check(!http1_req__refusal(h));
	return true;
}

static void feed_responses(struct http1_req *h, const uint8_t *p, size_t len,
			   size_t step)
{
	struct http1_resp *r;
	size_t off = 0, n;
	int ret = 0;

	if (http1_resp__create(&r, h))
		return;
	while (off < len && !ret) {
		n = step < len - off ? step : len - off;
		ret = http1_resp__feed(r, p + off, n);
		off += n;
	}
	fuzz_check(ret == 0 || ret == -EPROTO);
	if (!ret)
		fuzz_check(http1_resp__eof(r) <= 0);
	fuzz_check(http1_resp__answered(r) <= http1_resp__owed(r) ||
		   http1_resp__owed(r) == 0);
	http1_resp__destroy(r);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct decider dc = { 0 };
	struct http1_params p = { .on_request = decide, .opaque = &dc };
	const uint8_t *req, *resp;
	size_t step, req_len, resp_len;
	struct http1_req *h;
	struct fuzz_in in;
	uint8_t opt;

	fuzz__quiet();
	fuzz_in__init(&in, data, size);
	opt = fuzz_in__u8(&in);
	step = 1 + fuzz_in__u8(&in) % STEP_MAX;
	req = fuzz_in__bytes(&in, fuzz_in__u16(&in), &req_len);
	resp = fuzz_in__bytes(&in, in.left, &resp_len);
	dc.d = (enum decision)(opt & OPT_DECISION_MASK);
	p.tls = !(opt & OPT_PLAIN);
	p.port = p.tls ? PORT : 80;
	p.hostname = opt & OPT_NO_HOSTNAME ? NULL : HOST;
	if (http1_req__create(&h, &p))
		return 0;
	if (feed_requests(h, &dc, req, req_len, step))
		feed_responses(h, resp, resp_len, step);
	http1_req__destroy(h);
	return 0;
}
