// SPDX-License-Identifier: GPL-2.0
/*
 * HTTP/1.1 interception (net/http1.c): what goes upstream, byte for
 * byte, for requests the decision allows and edits; what is refused, with
 * which status, and that nothing of a refused request goes upstream; that
 * the guest's splits change nothing; that an injected value never reaches
 * an error response; the response tracker's boundaries; random bytes.
 * No sockets: the tests play guest, caller and upstream.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lib/compiler.h"
#include "net/http1.h"
#include "selftests/kselftest.h"
#include "selftests/testutil.h"

#define HOST	    "api.example.com"
#define PORT	    443
#define TOKEN	    "kiln-secret-7f3a9c0d2b"
#define AUTH	    "Bearer " TOKEN
#define SINK_MAX    (4U << 20)
#define MAX_SEEN    8
#define FUZZ_ROUNDS 20000
#define FUZZ_SEED   0x6b696c6e68747470ULL
#define FUZZ_MAX    2048 /* bytes of one random stream */
#define BIG_BODY    (200U << 10)

#define GET_USER                      \
	"GET /user HTTP/1.1\r\n"      \
	"Host: api.example.com\r\n"   \
	"User-Agent: curl/7.88.1\r\n" \
	"Accept: */*\r\n"             \
	"\r\n"
#define GET_USER_OUT                  \
	"GET /user HTTP/1.1\r\n"      \
	"Host: api.example.com\r\n"   \
	"User-Agent: curl/7.88.1\r\n" \
	"Accept: */*\r\n"             \
	"authorization: " AUTH "\r\n" \
	"\r\n"

/* What the decision saw of one request. */
struct seen {
	uint64_t index;
	char method[16];
	char target[256];
	char path[256];
	char hostname[HTTP_HOSTNAME_MAX + 1];
	unsigned int nr_headers, version_minor;
	bool upgrade;
};

/* How the test's on_request decides, and what it saw. */
struct decider {
	int verdict;		   /* returned when not refusing */
	bool inject;		   /* set authorization: AUTH */
	const char *remove;	   /* a field to remove */
	unsigned int refuse;	   /* refuse with this status (0: no) */
	const char *refuse_reason; /* ... and this reason */
	bool by_path;		   /* /a, /b, /c each their own (pipelined) */
	bool edit_errors;	   /* try edits that must fail */
	int edit_rets[8];
	int calls;
	struct seen seen[MAX_SEEN];
};

static void copy_text(char *dst, size_t size, const char *src, size_t len)
{
	if (len >= size)
		len = size - 1;
	memcpy(dst, src, len);
	dst[len] = '\0';
}

static int decide_edit_errors(struct decider *d, struct http_edits *e)
{
	char big[HTTP_EDITS_MAX + 1];
	char name[16];
	int *r = d->edit_rets;

	memset(big, 'v', sizeof(big) - 1);
	big[sizeof(big) - 1] = '\0';
	r[0] = http_edits__set(e, "Host", "evil.example.com");
	r[1] = http_edits__set(e, "content-length", "0");
	r[2] = http_edits__set(e, "bad name", "x");
	r[3] = http_edits__set(e, "x-ok", "a\r\nInjected: yes");
	r[4] = http_edits__remove(e, "Transfer-Encoding");
	r[5] = http_edits__set(e, "x-big", big);
	r[6] = 0;
	for (unsigned int i = 0; i <= HTTP_MAX_EDITS && !r[6]; i++) {
		snprintf(name, sizeof(name), "x-e%u", i);
		r[6] = http_edits__set(e, name, "1");
	}
	r[7] = http_edits__set(e, "x-e0", "2"); /* an edit again: fine */
	return HTTP_ALLOW;
}

static int decide(void *opaque, const struct http_request *req,
		  struct http_edits *e)
{
	struct decider *d = opaque;
	struct seen *s = &d->seen[d->calls % MAX_SEEN];
	int ret;

	d->calls++;
	s->index = req->index;
	copy_text(s->method, sizeof(s->method), req->method,
		  strlen(req->method));
	copy_text(s->target, sizeof(s->target), req->target, req->target_len);
	copy_text(s->path, sizeof(s->path), req->path, req->path_len);
	s->nr_headers = req->nr_headers;
	s->version_minor = req->version_minor;
	s->upgrade = req->upgrade;
	copy_text(s->hostname, sizeof(s->hostname), req->hostname,
		  strlen(req->hostname));
	if (d->edit_errors)
		return decide_edit_errors(d, e);
	if (d->by_path) {
		if (!strcmp(s->path, "/a"))
			ret = http_edits__set(e, "X-A", "1");
		else if (!strcmp(s->path, "/b"))
			ret = http_edits__remove(e, "user-agent");
		else if (!strcmp(s->path, "/c"))
			ret = http_edits__set(e, "authorization", AUTH);
		else
			return http_edits__refuse(e, 403, "not granted");
		return ret ? http_edits__refuse(e, 500, "edit failed") :
			     HTTP_ALLOW;
	}
	if (d->inject && http_edits__set(e, "authorization", AUTH))
		return http_edits__refuse(e, 500, "edit failed");
	if (d->remove && http_edits__remove(e, d->remove))
		return http_edits__refuse(e, 500, "edit failed");
	if (d->refuse)
		return http_edits__refuse(e, d->refuse, d->refuse_reason);
	return d->verdict;
}

/* ---- playing the caller ------------------------------------------- */

struct sink {
	char *buf;
	size_t len;
};

static void drain(struct http1_req *h, struct sink *s)
{
	size_t n;
	const uint8_t *p = http1_req__output(h, &n);

	if (n && s->len + n <= SINK_MAX)
		memcpy(s->buf + s->len, p, n);
	s->len += n;
	http1_req__drain(h, n);
}

/* Feeds in pieces of at most step bytes, draining: 0, feed's error, or
 * -EBUSY if it stopped taking bytes. */
static ssize_t feed(struct http1_req *h, const void *in, size_t len,
		    size_t step, struct sink *s)
{
	const char *p = in;
	size_t off = 0;

	while (off < len) {
		ssize_t got = http1_req__feed(
			h, p + off, len - off < step ? len - off : step);

		drain(h, s);
		if (got < 0)
			return got;
		if (!got)
			return -EBUSY;
		off += got;
	}
	return 0;
}

static struct http1_req *req_new(struct __test_metadata *_metadata,
				 struct decider *d, bool tls, uint16_t port)
{
	const struct http1_params p = {
		.hostname = HOST,
		.port = port,
		.tls = tls,
		.on_request = decide,
		.opaque = d,
	};
	struct http1_req *h;

	ASSERT_EQ(0, http1_req__create(&h, &p));
	return h;
}

static void sink_init(struct __test_metadata *_metadata, struct sink *s)
{
	s->buf = malloc(SINK_MAX);
	s->len = 0;
	ASSERT_NE(NULL, s->buf);
}

/* The whole of in through a fresh transformer; feed's result. */
static ssize_t run(struct __test_metadata *_metadata, struct decider *d,
		   const char *in, size_t len, size_t step, struct sink *s,
		   struct http1_refusal *refusal)
{
	struct http1_req *h = req_new(_metadata, d, true, PORT);
	ssize_t ret;

	s->len = 0;
	ret = feed(h, in, len, step, s);
	if (refusal) {
		const struct http1_refusal *f = http1_req__refusal(h);

		memset(refusal, 0, sizeof(*refusal));
		if (f)
			*refusal = *f;
	}
	http1_req__destroy(h);
	return ret;
}

#define RUN(d, str, s, f) run(_metadata, d, str, strlen(str), SIZE_MAX, s, f)

static bool has(const char *hay, size_t len, const char *needle)
{
	return memmem(hay, len, needle, strlen(needle)) != NULL;
}

#define EXPECT_OUT(s, str)                                                 \
	do {                                                               \
		EXPECT_EQ(strlen(str), (s)->len);                          \
		EXPECT_EQ(0, memcmp((s)->buf, str,                         \
				    (s)->len < strlen(str) ? (s)->len :    \
							     strlen(str))) \
		TH_LOG("upstream got:\n%.*s", (int)(s)->len, (s)->buf);    \
	} while (0)

/* A request refused before anything of it was sent. */
#define EXPECT_REFUSED(d, str, want_status, want_reason)            \
	do {                                                        \
		struct http1_refusal f_;                            \
		struct sink s_;                                     \
		sink_init(_metadata, &s_);                          \
		EXPECT_EQ(-EPROTO, RUN(d, str, &s_, &f_));          \
		EXPECT_EQ(want_status, f_.status);                  \
		EXPECT_STREQ(want_reason, f_.reason);               \
		EXPECT_FALSE(f_.head_sent);                         \
		EXPECT_EQ(0U, s_.len)                               \
		TH_LOG("upstream got:\n%.*s", (int)s_.len, s_.buf); \
		free(s_.buf);                                       \
	} while (0)

/* ---- forwarded requests ------------------------------------------- */

/* The seed scenario: curl's GET, the host's token attached. */
TEST(get_injects_authorization)
{
	struct decider d = { .inject = true };
	struct sink s;

	sink_init(_metadata, &s);
	ASSERT_EQ(0, RUN(&d, GET_USER, &s, NULL));
	EXPECT_OUT(&s, GET_USER_OUT);
	ASSERT_EQ(1, d.calls);
	EXPECT_EQ(0U, d.seen[0].index);
	EXPECT_STREQ("GET", d.seen[0].method);
	EXPECT_STREQ("/user", d.seen[0].target);
	EXPECT_STREQ("/user", d.seen[0].path);
	EXPECT_EQ(3U, d.seen[0].nr_headers);
	EXPECT_EQ(1U, d.seen[0].version_minor);
	EXPECT_FALSE(d.seen[0].upgrade);
	free(s.buf);
}

/* A set field replaces every one of its name, at the first one's place;
 * Proxy-* fields go; blanks around values are trimmed. */
TEST(set_replaces_every_field_of_its_name)
{
	struct decider d = { .inject = true };
	struct sink s;

	sink_init(_metadata, &s);
	ASSERT_EQ(0, RUN(&d,
			 "GET /x HTTP/1.1\r\n"
			 "Host: api.example.com\r\n"
			 "AUTHORIZATION: Basic Z3Vlc3Q=\r\n"
			 "X-Keep:   spaced value  \r\n"
			 "Proxy-Authorization: Basic cHJveHk=\r\n"
			 "authorization: Bearer guest-made\r\n"
			 "Proxy-Connection: keep-alive\r\n"
			 "\r\n",
			 &s, NULL));
	EXPECT_OUT(&s, "GET /x HTTP/1.1\r\n"
		       "Host: api.example.com\r\n"
		       "authorization: " AUTH "\r\n"
		       "X-Keep: spaced value\r\n"
		       "\r\n");
	free(s.buf);
}

TEST(remove_drops_every_field_of_its_name)
{
	struct decider d = { .remove = "cookie" };
	struct sink s;

	sink_init(_metadata, &s);
	ASSERT_EQ(0, RUN(&d,
			 "GET /x HTTP/1.1\r\n"
			 "Cookie: a=1\r\n"
			 "Host: api.example.com\r\n"
			 "COOKIE: b=2\r\n"
			 "Accept: */*\r\n"
			 "\r\n",
			 &s, NULL));
	EXPECT_OUT(&s, "GET /x HTTP/1.1\r\n"
		       "Host: api.example.com\r\n"
		       "Accept: */*\r\n"
		       "\r\n");
	free(s.buf);
}

TEST(edits_that_would_reframe_or_inject_are_refused)
{
	struct decider d = { .edit_errors = true };
	struct sink s;

	sink_init(_metadata, &s);
	ASSERT_EQ(0, RUN(&d, "GET / HTTP/1.1\r\nHost: api.example.com\r\n\r\n",
			 &s, NULL));
	EXPECT_EQ(-EINVAL, d.edit_rets[0]);
	EXPECT_EQ(-EINVAL, d.edit_rets[1]);
	EXPECT_EQ(-EINVAL, d.edit_rets[2]);
	EXPECT_EQ(-EINVAL, d.edit_rets[3]);
	EXPECT_EQ(-EINVAL, d.edit_rets[4]);
	EXPECT_EQ(-ENOSPC, d.edit_rets[5]);
	EXPECT_EQ(-ENOSPC, d.edit_rets[6]);
	EXPECT_EQ(0, d.edit_rets[7]);
	EXPECT_FALSE(has(s.buf, s.len, "Injected"));
	EXPECT_FALSE(has(s.buf, s.len, "evil"));
	EXPECT_TRUE(has(s.buf, s.len, "x-e0: 2\r\n"));
	EXPECT_FALSE(has(s.buf, s.len, "x-e0: 1\r\n"));
	free(s.buf);
}

#define PIPELINE                        \
	"GET /a HTTP/1.1\r\n"           \
	"Host: api.example.com\r\n"     \
	"User-Agent: t\r\n"             \
	"\r\n"                          \
	"GET /b HTTP/1.1\r\n"           \
	"Host: api.example.com\r\n"     \
	"User-Agent: t\r\n"             \
	"\r\n"                          \
	"POST /c HTTP/1.1\r\n"          \
	"Host: api.example.com:443\r\n" \
	"Content-Length: 5\r\n"         \
	"\r\n"                          \
	"hello"
#define PIPELINE_OUT                    \
	"GET /a HTTP/1.1\r\n"           \
	"Host: api.example.com\r\n"     \
	"User-Agent: t\r\n"             \
	"X-A: 1\r\n"                    \
	"\r\n"                          \
	"GET /b HTTP/1.1\r\n"           \
	"Host: api.example.com\r\n"     \
	"\r\n"                          \
	"POST /c HTTP/1.1\r\n"          \
	"Host: api.example.com:443\r\n" \
	"Content-Length: 5\r\n"         \
	"authorization: " AUTH "\r\n"   \
	"\r\n"                          \
	"hello"

TEST(pipelined_requests_each_decided)
{
	struct decider d = { .by_path = true };
	struct sink s;

	sink_init(_metadata, &s);
	ASSERT_EQ(0, RUN(&d, PIPELINE, &s, NULL));
	EXPECT_OUT(&s, PIPELINE_OUT);
	ASSERT_EQ(3, d.calls);
	for (int i = 0; i < 3; i++)
		EXPECT_EQ((uint64_t)i, d.seen[i].index);
	EXPECT_STREQ("POST", d.seen[2].method);
	free(s.buf);
}

#define CHUNKED                               \
	"POST /up HTTP/1.1\r\n"               \
	"Host: api.example.com\r\n"           \
	"Transfer-Encoding: chunked\r\n"      \
	"\r\n"                                \
	"5\r\nhello\r\n"                      \
	"19\r\n, world, in two chunks ok\r\n" \
	"0\r\n"                               \
	"X-Checksum: abc\r\n"                 \
	"X-More: 1\r\n"                       \
	"\r\n"
#define CHUNKED_BODY                          \
	"5\r\nhello\r\n"                      \
	"19\r\n, world, in two chunks ok\r\n" \
	"0\r\n"                               \
	"X-Checksum: abc\r\n"                 \
	"X-More: 1\r\n"                       \
	"\r\n"

TEST(chunked_body_and_trailers_pass)
{
	struct decider d = { .inject = true };
	struct sink s;

	sink_init(_metadata, &s);
	ASSERT_EQ(0, RUN(&d, CHUNKED GET_USER, &s, NULL));
	EXPECT_OUT(&s, "POST /up HTTP/1.1\r\n"
		       "Host: api.example.com\r\n"
		       "Transfer-Encoding: chunked\r\n"
		       "authorization: " AUTH "\r\n"
		       "\r\n" CHUNKED_BODY GET_USER_OUT);
	EXPECT_EQ(2, d.calls);
	free(s.buf);
}

/*
 * The parser (built non-strict) takes any two bytes for a chunk's CRLF
 * and "0005;x" for a size: upstream gets the framing as we read it, the
 * data bytes as they were, the guest's odd bytes nowhere. Trailers named
 * like an edit, or Proxy-*, are dropped.
 */
TEST(chunked_framing_is_written_anew)
{
	struct decider d = { .inject = true };
	struct sink s;

	sink_init(_metadata, &s);
	ASSERT_EQ(0, RUN(&d,
			 "POST / HTTP/1.1\r\n"
			 "Host: api.example.com\r\n"
			 "Transfer-Encoding: chunked\r\n"
			 "\r\n"
			 "0005;ext=1\r\nhelloXY"
			 "3 \r\nabc\r\n"
			 "0\r\n"
			 "Authorization: Bearer guest\r\n"
			 "Proxy-X: 1\r\n"
			 "X-T:  t  \r\n"
			 "\r\n",
			 &s, NULL));
	EXPECT_OUT(&s, "POST / HTTP/1.1\r\n"
		       "Host: api.example.com\r\n"
		       "Transfer-Encoding: chunked\r\n"
		       "authorization: " AUTH "\r\n"
		       "\r\n"
		       "5\r\nhello\r\n"
		       "3\r\nabc\r\n"
		       "0\r\n"
		       "X-T: t\r\n"
		       "\r\n");
	free(s.buf);
}

TEST(content_length_body_passes)
{
	struct decider d = { .verdict = HTTP_ALLOW };
	struct sink s;
	const char *req = "PUT /f HTTP/1.1\r\n"
			  "Host: api.example.com\r\n"
			  "Content-Length: 24\r\n"
			  "\r\n"
			  "GET /smuggled HTTP/1.1\r\n"
			  "GET / HTTP/1.1\r\n"
			  "Host: api.example.com\r\n"
			  "\r\n";

	sink_init(_metadata, &s);
	ASSERT_EQ(0, RUN(&d, req, &s, NULL));
	/* The body looks like a request; it is data, and one decision. */
	EXPECT_OUT(&s, req);
	EXPECT_EQ(2, d.calls);
	EXPECT_STREQ("/", d.seen[1].target);
	free(s.buf);
}

/* Every request kind there is, through every split into two and
 * byte by byte: the same bytes upstream, the same decisions. */
TEST(any_split_gives_the_same_output)
{
	static const char stream[] =
		"\r\nGET /a?q=1 HTTP/1.1\r\nHost: API.example.com\r\n"
		"X-Long-Name-Of-A-Field: a value, with, commas\r\n\r\n"
		"POST /b HTTP/1.1\r\nHost: api.example.com\r\n"
		"Transfer-Encoding: chunked\r\n\r\n"
		"4\r\nwiki\r\n5;e=1\r\npedia\r\n0\r\nT: x\r\n\r\n"
		"PUT /c HTTP/1.1\r\nHost: api.example.com\r\n"
		"Content-Length: 3\r\nX-E:\r\n\r\nabc"
		"GET https://api.example.com:443/d HTTP/1.1\r\n"
		"Host: api.example.com\r\nAuthorization: x\r\n\r\n";
	size_t len = sizeof(stream) - 1;
	struct decider d = { .inject = true };
	struct sink ref, s;

	sink_init(_metadata, &ref);
	sink_init(_metadata, &s);
	ASSERT_EQ(0, run(_metadata, &d, stream, len, len, &ref, NULL));
	ASSERT_EQ(4, d.calls);
	for (size_t cut = 1; cut < len; cut++) {
		struct http1_req *h = req_new(_metadata, &d, true, PORT);

		s.len = 0;
		ASSERT_EQ(0, feed(h, stream, cut, SIZE_MAX, &s))
		TH_LOG("cut at %zu", cut);
		ASSERT_EQ(0, feed(h, stream + cut, len - cut, SIZE_MAX, &s))
		TH_LOG("cut at %zu", cut);
		http1_req__destroy(h);
		ASSERT_EQ(ref.len, s.len) TH_LOG("cut at %zu", cut);
		ASSERT_EQ(0, memcmp(ref.buf, s.buf, s.len))
		TH_LOG("cut at %zu", cut);
	}
	ASSERT_EQ(0, run(_metadata, &d, stream, len, 1, &s, NULL));
	EXPECT_EQ(ref.len, s.len);
	EXPECT_EQ(0, memcmp(ref.buf, s.buf, ref.len));
	free(ref.buf);
	free(s.buf);
}

TEST(http_1_0_and_keep_alive)
{
	struct decider d = { .verdict = HTTP_ALLOW };
	struct http1_refusal f;
	struct sink s;
	const char *two = "GET /1 HTTP/1.0\r\nHost: api.example.com\r\n"
			  "Connection: keep-alive\r\n\r\n"
			  "GET /2 HTTP/1.0\r\nHost: api.example.com\r\n\r\n";

	sink_init(_metadata, &s);
	ASSERT_EQ(0, RUN(&d, two, &s, NULL));
	EXPECT_OUT(&s, two);
	EXPECT_EQ(0U, d.seen[1].version_minor);
	/* The second ended the connection: nothing more is read. */
	EXPECT_EQ(-EPROTO,
		  RUN(&d,
		      "GET / HTTP/1.0\r\nHost: api.example.com\r\n\r\n"
		      "\r\n"
		      "GET / HTTP/1.0\r\nHost: api.example.com\r\n\r\n",
		      &s, &f));
	EXPECT_EQ(400U, f.status);
	EXPECT_STREQ("request after connection close", f.reason);
	EXPECT_EQ(1U, f.request);
	free(s.buf);
}

TEST(expect_100_continue_passes)
{
	struct decider d = { .verdict = HTTP_ALLOW };
	const char *req = "POST /u HTTP/1.1\r\nHost: api.example.com\r\n"
			  "Content-Length: 5\r\nExpect: 100-continue\r\n\r\n";
	struct http1_req *h = req_new(_metadata, &d, true, PORT);
	struct http1_resp *r;
	struct sink s;

	sink_init(_metadata, &s);
	ASSERT_EQ(0, http1_resp__create(&r, h));
	ASSERT_EQ(0, feed(h, req, strlen(req), SIZE_MAX, &s));
	EXPECT_OUT(&s, req);
	EXPECT_FALSE(http1_resp__idle(r));
	ASSERT_EQ(0, http1_resp__feed(r, "HTTP/1.1 100 Continue\r\n\r\n", 25));
	EXPECT_EQ(0U, http1_resp__answered(r));
	ASSERT_EQ(0, feed(h, "hello", 5, SIZE_MAX, &s));
	EXPECT_EQ(strlen(req) + 5, s.len);
	ASSERT_EQ(0, http1_resp__feed(r,
				      "HTTP/1.1 200 OK\r\nContent-Length: 2"
				      "\r\n\r\nok",
				      40));
	EXPECT_EQ(1U, http1_resp__answered(r));
	EXPECT_TRUE(http1_resp__idle(r));
	http1_resp__destroy(r);
	http1_req__destroy(h);
	free(s.buf);
}

/* ---- the Host rule ------------------------------------------------ */

TEST(host_must_match_the_flow)
{
	struct decider d = { .verdict = HTTP_ALLOW };
	struct sink s;

	sink_init(_metadata, &s);
	/* Case, the flow's port, and the default port left out: fine. */
	ASSERT_EQ(0, RUN(&d, "GET / HTTP/1.1\r\nHost: API.Example.COM\r\n\r\n",
			 &s, NULL));
	ASSERT_EQ(0,
		  RUN(&d, "GET / HTTP/1.1\r\nHost: api.example.com:443\r\n\r\n",
		      &s, NULL));
	EXPECT_REFUSED(&d, "GET / HTTP/1.1\r\nHost: evil.example.com\r\n\r\n",
		       421U, "host header does not match");
	EXPECT_REFUSED(
		&d, "GET / HTTP/1.1\r\nHost: api.example.com.evil.net\r\n\r\n",
		421U, "host header does not match");
	EXPECT_REFUSED(&d, "GET / HTTP/1.1\r\nHost: api.example.co\r\n\r\n",
		       421U, "host header does not match");
	EXPECT_REFUSED(&d,
		       "GET / HTTP/1.1\r\nHost: api.example.com:8443\r\n\r\n",
		       421U, "host header does not match");
	EXPECT_REFUSED(&d, "GET / HTTP/1.1\r\nHost: api.example.com:\r\n\r\n",
		       421U, "host header does not match");
	EXPECT_REFUSED(&d,
		       "GET / HTTP/1.1\r\nHost: api.example.com:443x\r\n\r\n",
		       421U, "host header does not match");
	EXPECT_REFUSED(&d, "GET / HTTP/1.1\r\nHost:\r\n\r\n", 421U,
		       "host header does not match");
	EXPECT_REFUSED(&d, "GET / HTTP/1.1\r\nAccept: */*\r\n\r\n", 400U,
		       "host header missing");
	EXPECT_REFUSED(&d, "GET / HTTP/1.0\r\n\r\n", 400U,
		       "host header missing");
	EXPECT_EQ(2, d.calls);
	free(s.buf);
}

/*
 * Created without a hostname (plain HTTP, where only the request names
 * one): the first request's Host names the connection, for the decision
 * to check; every later request must name the same.
 */
TEST(hostname_taken_from_the_first_request)
{
	static const char *const bad[] = {
		"GET / HTTP/1.1\r\nHost: [::1]\r\n\r\n",
		"GET / HTTP/1.1\r\nHost: :80\r\n\r\n",
		"GET / HTTP/1.1\r\nHost:\r\n\r\n",
		"GET / HTTP/1.1\r\nHost: a b\r\n\r\n",
		"GET / HTTP/1.1\r\nHost: www.example.test:8080\r\n\r\n",
		"GET http://other.test/ HTTP/1.1\r\nHost: www.example.test\r\n"
		"\r\n",
	};
	const char *first = "GET /a HTTP/1.1\r\nHost: WWW.Example.test\r\n\r\n";
	const char *again = "GET /b HTTP/1.1\r\nHost: www.example.TEST:80\r\n"
			    "\r\n";
	const char *other = "GET /c HTTP/1.1\r\nHost: other.test\r\n\r\n";
	const struct http1_params p = { .port = 80, .on_request = decide };
	struct http1_params pd = p;
	struct decider d = { .verdict = HTTP_ALLOW };
	struct http1_req *h;
	struct sink s;

	pd.opaque = &d;
	sink_init(_metadata, &s);
	ASSERT_EQ(0, http1_req__create(&h, &pd));
	ASSERT_EQ(0, feed(h, first, strlen(first), SIZE_MAX, &s));
	ASSERT_EQ(0, feed(h, again, strlen(again), SIZE_MAX, &s));
	ASSERT_EQ(2, d.calls);
	EXPECT_STREQ("WWW.Example.test", d.seen[0].hostname);
	EXPECT_STREQ("WWW.Example.test", d.seen[1].hostname);
	EXPECT_EQ(-EPROTO, feed(h, other, strlen(other), SIZE_MAX, &s));
	EXPECT_EQ(421U, http1_req__refusal(h)->status);
	EXPECT_STREQ("host header does not match",
		     http1_req__refusal(h)->reason);
	EXPECT_EQ(2, d.calls);
	http1_req__destroy(h);

	/* Names a connection cannot take: refused before any decision. */
	for (size_t i = 0; i < ARRAY_SIZE(bad); i++) {
		d.calls = 0;
		s.len = 0;
		ASSERT_EQ(0, http1_req__create(&h, &pd));
		EXPECT_EQ(-EPROTO,
			  feed(h, bad[i], strlen(bad[i]), SIZE_MAX, &s))
		TH_LOG("%s", bad[i]);
		EXPECT_EQ(421U, http1_req__refusal(h)->status)
		TH_LOG("%s", bad[i]);
		EXPECT_EQ(0, d.calls);
		EXPECT_EQ(0U, s.len);
		http1_req__destroy(h);
	}
	free(s.buf);
}

/* On a non-default port the port must be named, and be the flow's. */
TEST(host_port_on_a_non_default_port)
{
	struct decider d = { .verdict = HTTP_ALLOW };
	struct http1_req *h = req_new(_metadata, &d, false, 8080);
	const char *ok = "GET / HTTP/1.1\r\nHost: api.example.com:8080\r\n\r\n";
	const char *no = "GET / HTTP/1.1\r\nHost: api.example.com\r\n\r\n";
	struct sink s;

	sink_init(_metadata, &s);
	ASSERT_EQ(0, feed(h, ok, strlen(ok), SIZE_MAX, &s));
	EXPECT_EQ(-EPROTO, feed(h, no, strlen(no), SIZE_MAX, &s));
	EXPECT_EQ(421U, http1_req__refusal(h)->status);
	EXPECT_EQ(1U, http1_req__refusal(h)->request);
	EXPECT_OUT(&s, ok);
	http1_req__destroy(h);
	free(s.buf);
}

/* A spoofed Host after an allowed request: the first one went, the
 * second nowhere, and the refusal answers the second. */
TEST(spoofed_host_refused_after_a_good_request)
{
	struct decider d = { .inject = true };
	struct http1_refusal f;
	struct sink s;

	sink_init(_metadata, &s);
	ASSERT_EQ(-EPROTO,
		  RUN(&d,
		      GET_USER
		      "GET /user HTTP/1.1\r\nHost: evil.example.com\r\n"
		      "\r\n" GET_USER,
		      &s, &f));
	EXPECT_OUT(&s, GET_USER_OUT);
	EXPECT_EQ(421U, f.status);
	EXPECT_STREQ("host header does not match", f.reason);
	EXPECT_EQ(1U, f.request);
	EXPECT_FALSE(f.head_sent);
	EXPECT_EQ(1, d.calls);
	free(s.buf);
}

TEST(absolute_form_must_match_too)
{
	struct decider d = { .verdict = HTTP_ALLOW };
	struct sink s;
	const char *ok =
		"GET https://API.example.com:443/v1/user?x=1 HTTP/1.1\r\n"
		"Host: api.example.com\r\n\r\n";

	sink_init(_metadata, &s);
	ASSERT_EQ(0, RUN(&d, ok, &s, NULL));
	EXPECT_OUT(&s, ok);
	EXPECT_STREQ("/v1/user?x=1", d.seen[0].path);
	EXPECT_REFUSED(&d,
		       "GET https://evil.example.com/ HTTP/1.1\r\n"
		       "Host: api.example.com\r\n\r\n",
		       421U, "request target does not match");
	EXPECT_REFUSED(&d,
		       "GET https://api.example.com:8443/ HTTP/1.1\r\n"
		       "Host: api.example.com\r\n\r\n",
		       421U, "request target does not match");
	EXPECT_REFUSED(&d,
		       "GET http://api.example.com/ HTTP/1.1\r\n"
		       "Host: api.example.com\r\n\r\n",
		       421U, "request target does not match");
	EXPECT_REFUSED(&d,
		       "GET https://api.example.com/ HTTP/1.1\r\n"
		       "Host: evil.example.com\r\n\r\n",
		       421U, "host header does not match");
	EXPECT_REFUSED(&d,
		       "GET https://u:p@api.example.com/ HTTP/1.1\r\n"
		       "Host: api.example.com\r\n\r\n",
		       400U, "userinfo in request target");
	EXPECT_EQ(1, d.calls);
	free(s.buf);
}

TEST(double_host_refused)
{
	struct decider d = { .verdict = HTTP_ALLOW };

	EXPECT_REFUSED(&d,
		       "GET / HTTP/1.1\r\nHost: api.example.com\r\n"
		       "Host: evil.example.com\r\n\r\n",
		       400U, "multiple host headers");
	EXPECT_REFUSED(&d,
		       "GET / HTTP/1.1\r\nHost: api.example.com\r\n"
		       "host: api.example.com\r\n\r\n",
		       400U, "multiple host headers");
	EXPECT_EQ(0, d.calls);
}

/* ---- smuggling and other refusals --------------------------------- */

TEST(te_and_cl_smuggling_refused)
{
	struct decider d = { .verdict = HTTP_ALLOW };

	EXPECT_REFUSED(&d,
		       "POST / HTTP/1.1\r\nHost: api.example.com\r\n"
		       "Content-Length: 6\r\nTransfer-Encoding: chunked\r\n"
		       "\r\n0\r\n\r\nX",
		       400U, "conflicting content-length");
	EXPECT_REFUSED(&d,
		       "POST / HTTP/1.1\r\nHost: api.example.com\r\n"
		       "Transfer-Encoding: chunked\r\nContent-Length: 6\r\n"
		       "\r\n0\r\n\r\nX",
		       400U, "conflicting content-length");
	EXPECT_REFUSED(&d,
		       "POST / HTTP/1.1\r\nHost: api.example.com\r\n"
		       "Content-Length: 6\r\nContent-Length: 7\r\n\r\n",
		       400U, "conflicting content-length");
	EXPECT_REFUSED(&d,
		       "POST / HTTP/1.1\r\nHost: api.example.com\r\n"
		       "Transfer-Encoding: gzip\r\n\r\n",
		       501U, "transfer-encoding not supported");
	EXPECT_REFUSED(&d,
		       "POST / HTTP/1.1\r\nHost: api.example.com\r\n"
		       "Transfer-Encoding: gzip, chunked\r\n\r\n0\r\n\r\n",
		       501U, "transfer-encoding not supported");
	EXPECT_REFUSED(&d,
		       "POST / HTTP/1.1\r\nHost: api.example.com\r\n"
		       "Transfer-Encoding: chunked\r\n"
		       "Transfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
		       501U, "transfer-encoding not supported");
	/* A space before the colon: a name upstream may read otherwise. */
	EXPECT_REFUSED(&d,
		       "POST / HTTP/1.1\r\nHost: api.example.com\r\n"
		       "Transfer-Encoding : chunked\r\n\r\n0\r\n\r\n",
		       400U, "malformed header name");
	EXPECT_EQ(0, d.calls);
}

TEST(folded_line_refused_however_split)
{
	static const char req[] = "GET / HTTP/1.1\r\nHost: api.example.com\r\n"
				  "X-A: one\r\n two\r\n\r\n";
	size_t len = sizeof(req) - 1;
	struct decider d = { .verdict = HTTP_ALLOW };
	struct http1_refusal f;
	struct sink s;

	sink_init(_metadata, &s);
	for (size_t step = 1; step <= len; step++) {
		ASSERT_EQ(-EPROTO, run(_metadata, &d, req, len, step, &s, &f))
		TH_LOG("step %zu", step);
		EXPECT_EQ(400U, f.status);
		EXPECT_STREQ("folded header line", f.reason);
		EXPECT_EQ(0U, s.len);
	}
	EXPECT_EQ(0, d.calls);
	free(s.buf);
}

TEST(connect_refused)
{
	struct decider d = { .verdict = HTTP_ALLOW_UPGRADE };

	EXPECT_REFUSED(&d,
		       "CONNECT api.example.com:443 HTTP/1.1\r\n"
		       "Host: api.example.com:443\r\n\r\n",
		       405U, "CONNECT not allowed");
	EXPECT_EQ(0, d.calls);
}

/*
 * Issue 34, finding 2: a TRACE (or TRACK) whose decision sets a field is
 * refused 405 before a byte goes upstream, the token in nothing the
 * guest gets; one whose decision sets none (a grant's "trace": its
 * fields removed) passes, removals applied.
 */
TEST(trace_never_carries_a_set_field)
{
	static const char *const reqs[] = {
		"TRACE /user HTTP/1.1\r\nHost: api.example.com\r\n\r\n",
		"TRACK /user HTTP/1.1\r\nHost: api.example.com\r\n\r\n",
	};
	struct decider d = { .inject = true, .verdict = HTTP_ALLOW };
	struct decider up = { .inject = true, .verdict = HTTP_ALLOW_UPGRADE };
	struct decider strip = { .remove = "authorization",
				 .verdict = HTTP_ALLOW };
	struct http1_refusal f;
	char answer[512];
	struct sink s;
	ssize_t n;

	EXPECT_REFUSED(&d, reqs[0], 405U, "TRACE not allowed");
	EXPECT_EQ(1, d.calls);
	EXPECT_REFUSED(&up, reqs[0], 405U, "TRACE not allowed");
	sink_init(_metadata, &s);
	/* TRACK: http_parser knows no such method, so no request at all. */
	EXPECT_EQ(-EPROTO, RUN(&d, reqs[1], &s, &f));
	EXPECT_EQ(0U, s.len);
	EXPECT_FALSE(has(s.buf, s.len, TOKEN));
	EXPECT_EQ(-EPROTO, RUN(&d, reqs[0], &s, &f));
	n = http1__error_response(f.status, f.reason, answer, sizeof(answer));
	ASSERT_LT(0, n);
	EXPECT_FALSE(has(answer, n, TOKEN));
	EXPECT_TRUE(has(answer, n, "405")) TH_LOG("%.*s", (int)n, answer);

	ASSERT_EQ(0, RUN(&strip,
			 "TRACE /user HTTP/1.1\r\nHost: api.example.com\r\n"
			 "Authorization: Bearer guest-own\r\n\r\n",
			 &s, NULL));
	EXPECT_OUT(&s, "TRACE /user HTTP/1.1\r\nHost: api.example.com\r\n\r\n");
	free(s.buf);
}

TEST(upgrade_refused_unless_allowed)
{
	struct decider d = { .verdict = HTTP_ALLOW };
	const char *ws = "GET /ws HTTP/1.1\r\nHost: api.example.com\r\n"
			 "Upgrade: websocket\r\nConnection: Upgrade\r\n\r\n";
	struct sink s;

	EXPECT_REFUSED(&d, ws, 403U, "upgrade not allowed");
	EXPECT_TRUE(d.seen[0].upgrade);
	EXPECT_REFUSED(&d,
		       "GET / HTTP/1.1\r\nHost: api.example.com\r\n"
		       "Connection: keep-alive, upgrade\r\n\r\n",
		       403U, "upgrade not allowed");
	EXPECT_REFUSED(&d,
		       "GET / HTTP/1.1\r\nHost: api.example.com\r\n"
		       "Upgrade: h2c\r\n\r\n",
		       403U, "upgrade not allowed");

	/* Allowed: after the request, bytes pass as they are. */
	d.verdict = HTTP_ALLOW_UPGRADE;
	d.inject = true;
	sink_init(_metadata, &s);
	ASSERT_EQ(0, RUN(&d,
			 "GET /ws HTTP/1.1\r\nHost: api.example.com\r\n"
			 "Upgrade: websocket\r\nConnection: Upgrade\r\n\r\n"
			 "\x81\x05hello GARBAGE\r\n\r\n",
			 &s, NULL));
	EXPECT_OUT(&s, "GET /ws HTTP/1.1\r\nHost: api.example.com\r\n"
		       "Upgrade: websocket\r\nConnection: Upgrade\r\n"
		       "authorization: " AUTH "\r\n\r\n"
		       "\x81\x05hello GARBAGE\r\n\r\n");
	free(s.buf);
}

TEST(non_http_bytes_refused_400)
{
	struct decider d = { .verdict = HTTP_ALLOW };
	static const char hello[] = "\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03";
	struct http1_refusal f;
	struct sink s;

	sink_init(_metadata, &s);
	EXPECT_EQ(-EPROTO, run(_metadata, &d, hello, sizeof(hello) - 1,
			       SIZE_MAX, &s, &f));
	EXPECT_EQ(400U, f.status);
	EXPECT_EQ(0U, s.len);
	EXPECT_REFUSED(&d, "hello there\r\n\r\n", 400U, "malformed request");
	EXPECT_REFUSED(&d, "GET / HTTP/2.0\r\nHost: api.example.com\r\n\r\n",
		       505U, "HTTP version not supported");
	EXPECT_REFUSED(&d, "GET /\r\n\r\n", 505U, "HTTP version not supported");
	EXPECT_REFUSED(&d, "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", 400U,
		       "malformed request");
	EXPECT_REFUSED(&d, "GET * HTTP/1.1\r\nHost: api.example.com\r\n\r\n",
		       400U, "malformed request target");
	EXPECT_EQ(0, d.calls);
	free(s.buf);
}

/* A decision that is not a verdict, or a bare HTTP_REFUSE: refused. */
TEST(odd_verdicts_refuse)
{
	const char *req = "GET / HTTP/1.1\r\nHost: api.example.com\r\n\r\n";
	const char *opt = "OPTIONS * HTTP/1.1\r\nHost: api.example.com\r\n\r\n";
	struct decider d = { .verdict = -ENOMEM };
	struct sink s;

	EXPECT_REFUSED(&d, req, 500U, "decision failed");
	d.verdict = HTTP_REFUSE;
	EXPECT_REFUSED(&d, req, 403U, "refused");
	d.verdict = HTTP_ALLOW;
	sink_init(_metadata, &s);
	ASSERT_EQ(0, RUN(&d, opt, &s, NULL));
	EXPECT_OUT(&s, opt);
	EXPECT_STREQ("*", d.seen[2].path);
	free(s.buf);
}

/* A chunked body that breaks after its head went: close both sides. */
TEST(broken_body_refused_with_head_sent)
{
	struct decider d = { .verdict = HTTP_ALLOW };
	struct http1_refusal f;
	struct sink s;

	sink_init(_metadata, &s);
	EXPECT_EQ(-EPROTO, RUN(&d,
			       "POST / HTTP/1.1\r\nHost: api.example.com\r\n"
			       "Transfer-Encoding: chunked\r\n\r\n"
			       "3\r\nabc\r\nzz\r\n",
			       &s, &f));
	EXPECT_EQ(400U, f.status);
	EXPECT_TRUE(f.head_sent);
	EXPECT_EQ(0U, f.request);
	EXPECT_TRUE(has(s.buf, s.len, "3\r\nabc\r\n"));
	free(s.buf);
}

/* ---- bounds ------------------------------------------------------- */

static char *repeat(struct __test_metadata *_metadata, const char *pre, char c,
		    size_t n, const char *post)
{
	size_t plen = strlen(pre), qlen = strlen(post);
	char *s = malloc(plen + n + qlen + 1);

	ASSERT_NE(NULL, s);
	memcpy(s, pre, plen);
	memset(s + plen, c, n);
	memcpy(s + plen + n, post, qlen + 1);
	return s;
}

TEST(oversize_heads_refused)
{
	/* "GET " + target + " HTTP/1.1\r\n" is the request line. */
	size_t target_max = HTTP1_REQUEST_LINE_MAX - 4 - 11;
	struct decider d = { .verdict = HTTP_ALLOW };
	struct sink s;
	char *big, *line;

	sink_init(_metadata, &s);
	line = repeat(_metadata, "GET /", 'a', target_max - 1,
		      " HTTP/1.1\r\nHost: api.example.com\r\n\r\n");
	ASSERT_EQ(0, RUN(&d, line, &s, NULL));
	free(line);
	line = repeat(_metadata, "GET /", 'a', target_max,
		      " HTTP/1.1\r\nHost: api.example.com\r\n\r\n");
	EXPECT_REFUSED(&d, line, 414U, "request line too long");
	free(line);

	big = repeat(_metadata,
		     "GET / HTTP/1.1\r\nHost: api.example.com\r\nX-Big: ", 'b',
		     HTTP1_HEAD_MAX, "\r\n\r\n");
	EXPECT_REFUSED(&d, big, 431U, "request head too large");
	free(big);

	/* 100 fields are fine, 101 are not. */
	big = malloc(HTTP1_MAX_HEADERS * 16 + 128);
	ASSERT_NE(NULL, big);
	for (unsigned int n = HTTP1_MAX_HEADERS; n <= HTTP1_MAX_HEADERS + 1;
	     n++) {
		size_t off =
			sprintf(big, "GET / HTTP/1.1\r\nHost: %s\r\n", HOST);

		for (unsigned int i = 1; i < n; i++)
			off += sprintf(big + off, "X-%u: %u\r\n", i, i);
		strcpy(big + off, "\r\n");
		if (n == HTTP1_MAX_HEADERS) {
			ASSERT_EQ(0, RUN(&d, big, &s, NULL));
			EXPECT_EQ(HTTP1_MAX_HEADERS,
				  d.seen[(d.calls - 1) % MAX_SEEN].nr_headers);
		} else {
			EXPECT_REFUSED(&d, big, 431U, "too many header fields");
		}
	}
	free(big);
	free(s.buf);
}

/* The output stops growing at HTTP1_OUTPUT_MAX; feed resumes on drain. */
TEST(output_back_pressure)
{
	struct decider d = { .verdict = HTTP_ALLOW };
	struct http1_req *h = req_new(_metadata, &d, true, PORT);
	char head[128];
	size_t hlen = snprintf(head, sizeof(head),
			       "PUT /big HTTP/1.1\r\nHost: %s\r\n"
			       "Content-Length: %u\r\n\r\n",
			       HOST, BIG_BODY);
	char *in = repeat(_metadata, head, 'z', BIG_BODY, "");
	size_t len = hlen + BIG_BODY, off = 0, queued;
	struct sink s;
	ssize_t got;

	sink_init(_metadata, &s);
	got = http1_req__feed(h, in, len);
	ASSERT_LT(0, got);
	ASSERT_GT(len, (size_t)got);
	http1_req__output(h, &queued);
	EXPECT_GE(HTTP1_OUTPUT_MAX, queued);
	EXPECT_EQ(0, http1_req__feed(h, in + got, len - got));
	off = got;
	while (off < len) {
		drain(h, &s);
		got = http1_req__feed(h, in + off, len - off);
		ASSERT_LT(0, got);
		off += got;
	}
	drain(h, &s);
	EXPECT_EQ(len, s.len);
	EXPECT_EQ(0, memcmp(in, s.buf, len));
	http1_req__destroy(h);
	free(in);
	free(s.buf);
}

/* ---- the token never reaches the guest ----------------------------- */

static void expect_no_token(struct __test_metadata *_metadata,
			    const struct http1_refusal *f)
{
	char resp[HTTP1_ERROR_RESPONSE_MAX];
	ssize_t n =
		http1__error_response(f->status, f->reason, resp, sizeof(resp));

	ASSERT_LT(0, n);
	EXPECT_FALSE(has(resp, n, TOKEN)) TH_LOG("%.*s", (int)n, resp);
	EXPECT_FALSE(has(resp, n, "Bearer"));
	EXPECT_FALSE(has(f->reason, strlen(f->reason), TOKEN));
}

TEST(token_never_in_an_error_response)
{
	struct decider d = { .inject = true,
			     .refuse = 403,
			     .refuse_reason = "not granted" };
	const char *ws = "GET /ws HTTP/1.1\r\nHost: api.example.com\r\n"
			 "Upgrade: websocket\r\nConnection: upgrade\r\n\r\n";
	struct http1_refusal f;
	struct sink s;

	sink_init(_metadata, &s);
	/* Edits decided, then the decision refuses. */
	ASSERT_EQ(-EPROTO, RUN(&d, GET_USER, &s, &f));
	EXPECT_EQ(403U, f.status);
	EXPECT_STREQ("not granted", f.reason);
	EXPECT_EQ(0U, s.len);
	expect_no_token(_metadata, &f);

	/* A reason naming the token is not passed on. */
	d.refuse_reason = "token " TOKEN " expired";
	ASSERT_EQ(-EPROTO, RUN(&d, GET_USER, &s, &f));
	EXPECT_STREQ("refused", f.reason);
	EXPECT_EQ(0U, s.len);
	expect_no_token(_metadata, &f);

	/* Edits decided and allowed, then refused by the upgrade rule. */
	d.refuse = 0;
	d.verdict = HTTP_ALLOW;
	ASSERT_EQ(-EPROTO, RUN(&d, ws, &s, &f));
	EXPECT_EQ(403U, f.status);
	EXPECT_EQ(0U, s.len);
	expect_no_token(_metadata, &f);

	/* The token went upstream with the first; the second is refused. */
	ASSERT_EQ(-EPROTO,
		  RUN(&d,
		      GET_USER "GET / HTTP/1.1\r\nHost: x.example.com\r\n\r\n",
		      &s, &f));
	EXPECT_TRUE(has(s.buf, s.len, TOKEN));
	expect_no_token(_metadata, &f);
	free(s.buf);
}

TEST(error_response_format)
{
	char buf[HTTP1_ERROR_RESPONSE_MAX];
	const char *want = "HTTP/1.1 421 Misdirected Request\r\n"
			   "Content-Type: text/plain\r\n"
			   "Content-Length: 27\r\n"
			   "Connection: close\r\n"
			   "\r\n"
			   "host header does not match\n";
	ssize_t n;

	n = http1__error_response(421, "host header does not match", buf,
				  sizeof(buf));
	ASSERT_EQ((ssize_t)strlen(want), n);
	EXPECT_EQ(0, memcmp(want, buf, n));
	n = http1__error_response(499, "a\r\nSet-Cookie: x", buf, sizeof(buf));
	ASSERT_LT(0, n);
	EXPECT_TRUE(has(buf, n, "HTTP/1.1 499 Error\r\n"));
	EXPECT_TRUE(has(buf, n, "\r\n\r\na??Set-Cookie: x\n"));
	EXPECT_EQ(-EINVAL, http1__error_response(200, "ok", buf, sizeof(buf)));
	EXPECT_EQ(-ENOSPC, http1__error_response(403, "no", buf, 32));
}

TEST(create_checks_params)
{
	struct decider d = { 0 };
	struct http1_params p = {
		.hostname = HOST,
		.port = PORT,
		.on_request = decide,
		.opaque = &d,
	};
	struct http1_req *h;

	p.hostname = "bad host";
	EXPECT_EQ(-EINVAL, http1_req__create(&h, &p));
	p.hostname = "";
	EXPECT_EQ(-EINVAL, http1_req__create(&h, &p));
	p.hostname = HOST;
	p.port = 0;
	EXPECT_EQ(-EINVAL, http1_req__create(&h, &p));
	p.port = PORT;
	p.on_request = NULL;
	EXPECT_EQ(-EINVAL, http1_req__create(&h, &p));
	EXPECT_EQ(NULL, h);
	http1_req__destroy(NULL);
	http1_resp__destroy(NULL);
}

/* ---- the response tracker ----------------------------------------- */

/* HEAD, 304 and 204 with a Content-Length have no body; chunked ends
 * after its trailers; the connection is idle between exchanges only. */
TEST(response_boundaries)
{
	struct decider d = { .verdict = HTTP_ALLOW };
	struct http1_req *h = req_new(_metadata, &d, true, PORT);
	const char *reqs = "HEAD /1 HTTP/1.1\r\nHost: api.example.com\r\n\r\n"
			   "GET /2 HTTP/1.1\r\nHost: api.example.com\r\n\r\n"
			   "GET /3 HTTP/1.1\r\nHost: api.example.com\r\n\r\n"
			   "GET /4 HTTP/1.1\r\nHost: api.example.com\r\n\r\n";
	const char *resps[] = {
		"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n",
		"HTTP/1.1 304 Not Modified\r\nContent-Length: 50\r\n\r\n",
		"HTTP/1.1 204 No Content\r\nContent-Length: 7\r\n\r\n",
		"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
		"2\r\nok\r\n0\r\nT: 1\r\n\r\n",
	};
	struct http1_resp *r;
	struct sink s;

	sink_init(_metadata, &s);
	ASSERT_EQ(0, http1_resp__create(&r, h));
	EXPECT_TRUE(http1_resp__idle(r));
	ASSERT_EQ(0, feed(h, reqs, 10, SIZE_MAX, &s));
	EXPECT_FALSE(http1_resp__idle(r)); /* a head under way */
	ASSERT_EQ(0, feed(h, reqs + 10, strlen(reqs) - 10, SIZE_MAX, &s));
	for (unsigned int i = 0; i < ARRAY_SIZE(resps); i++) {
		const char *p = resps[i];
		size_t len = strlen(p);

		EXPECT_FALSE(http1_resp__idle(r));
		/* Byte by byte: a boundary is a boundary however it comes. */
		for (size_t j = 0; j < len; j++)
			ASSERT_EQ(0, http1_resp__feed(r, p + j, 1));
		EXPECT_EQ(i + 1, http1_resp__answered(r));
	}
	EXPECT_TRUE(http1_resp__idle(r));
	/* More than was asked for is not HTTP. */
	EXPECT_EQ(-EPROTO, http1_resp__feed(r, resps[0], strlen(resps[0])));
	EXPECT_FALSE(http1_resp__idle(r));
	http1_resp__destroy(r);
	http1_req__destroy(h);
	free(s.buf);
}

TEST(response_close_delimited)
{
	struct decider d = { .verdict = HTTP_ALLOW };
	struct http1_req *h = req_new(_metadata, &d, true, PORT);
	const char *resp = "HTTP/1.1 200 OK\r\n\r\nuntil the end";
	struct http1_resp *r;
	struct sink s;

	sink_init(_metadata, &s);
	ASSERT_EQ(0, http1_resp__create(&r, h));
	ASSERT_EQ(0, feed(h, GET_USER, strlen(GET_USER), SIZE_MAX, &s));
	ASSERT_EQ(0, http1_resp__feed(r, resp, strlen(resp)));
	EXPECT_EQ(0U, http1_resp__answered(r));
	EXPECT_EQ(0, http1_resp__eof(r));
	EXPECT_EQ(1U, http1_resp__answered(r));
	http1_resp__destroy(r);
	http1_req__destroy(h);

	/* Cut short: upstream closed mid-body. */
	h = req_new(_metadata, &d, true, PORT);
	ASSERT_EQ(0, http1_resp__create(&r, h));
	ASSERT_EQ(0, feed(h, GET_USER, strlen(GET_USER), SIZE_MAX, &s));
	ASSERT_EQ(0, http1_resp__feed(r,
				      "HTTP/1.1 200 OK\r\n"
				      "Content-Length: 9\r\n\r\nabc",
				      41));
	EXPECT_EQ(-EPROTO, http1_resp__eof(r));
	http1_resp__destroy(r);
	http1_req__destroy(h);
	free(s.buf);
}

TEST(response_unsolicited_and_101)
{
	struct decider d = { .verdict = HTTP_ALLOW_UPGRADE };
	struct http1_req *h = req_new(_metadata, &d, true, PORT);
	const char *ws = "GET /ws HTTP/1.1\r\nHost: api.example.com\r\n"
			 "Upgrade: websocket\r\nConnection: Upgrade\r\n\r\n";
	const char *sw = "HTTP/1.1 101 Switching Protocols\r\n"
			 "Upgrade: websocket\r\nConnection: Upgrade\r\n\r\n"
			 "\x81\x02hi";
	struct http1_resp *r;
	struct sink s;

	sink_init(_metadata, &s);
	ASSERT_EQ(0, http1_resp__create(&r, h));
	EXPECT_EQ(-EPROTO, http1_resp__feed(r, "HTTP/1.1 200 OK\r\n\r\n", 19));
	http1_resp__destroy(r);
	ASSERT_EQ(0, http1_resp__create(&r, h));
	ASSERT_EQ(0, feed(h, ws, strlen(ws), SIZE_MAX, &s));
	ASSERT_EQ(0, http1_resp__feed(r, sw, strlen(sw)));
	ASSERT_EQ(0, http1_resp__feed(r, "anything", 8));
	EXPECT_FALSE(http1_resp__idle(r));
	http1_resp__destroy(r);
	http1_req__destroy(h);
	free(s.buf);
}

/* Tracked, at most HTTP1_MAX_PIPELINE requests wait for an answer. */
TEST(pipeline_bounded_when_tracked)
{
	struct decider d = { .verdict = HTTP_ALLOW };
	struct http1_req *h = req_new(_metadata, &d, true, PORT);
	const char *one = "GET / HTTP/1.1\r\nHost: api.example.com\r\n\r\n";
	const char *ok = "HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n";
	size_t olen = strlen(one);
	size_t len = olen * (HTTP1_MAX_PIPELINE + 1);
	char *in = malloc(len);
	struct http1_resp *r;
	struct sink s;
	ssize_t got;

	ASSERT_NE(NULL, in);
	for (unsigned int i = 0; i <= HTTP1_MAX_PIPELINE; i++)
		memcpy(in + i * olen, one, olen);
	sink_init(_metadata, &s);
	ASSERT_EQ(0, http1_resp__create(&r, h));
	got = http1_req__feed(h, in, len);
	EXPECT_EQ((ssize_t)(olen * HTTP1_MAX_PIPELINE), got);
	EXPECT_EQ(0, http1_req__feed(h, in + got, len - got));
	ASSERT_EQ(0, http1_resp__feed(r, ok, strlen(ok)));
	EXPECT_EQ((ssize_t)olen, http1_req__feed(h, in + got, len - got));
	EXPECT_EQ(HTTP1_MAX_PIPELINE + 1, d.calls);
	http1_resp__destroy(r);
	http1_req__destroy(h);
	free(in);
	free(s.buf);
}

/* ---- random input ------------------------------------------------- */

/*
 * Random bytes, and good streams with random damage, fed in random
 * pieces: no crash, every result one the API allows, every refusal a
 * 4xx/5xx whose error response builds and never holds the token.
 */
TEST(random_bytes_never_crash)
{
	static const char good[] = PIPELINE CHUNKED GET_USER;
	static const char alphabet[] = "\r\n :;,/0123456789abcdefHostTE-";
	struct decider d = { .inject = true };
	uint64_t seed = FUZZ_SEED;
	char in[FUZZ_MAX];
	struct sink s;

	sink_init(_metadata, &s);
	for (int i = 0; i < FUZZ_ROUNDS; i++) {
		uint64_t r = prng__next(&seed);
		struct http1_req *h = req_new(_metadata, &d, true, PORT);
		const struct http1_refusal *f;
		size_t len, off = 0;
		ssize_t got = 0;

		if (i % 3 == 0) {
			len = r % sizeof(in);
			for (size_t j = 0; j < len; j++)
				in[j] = (char)prng__next(&seed);
		} else {
			len = sizeof(good) - 1;
			memcpy(in, good, len);
			for (int k = 0; k < 1 + (int)(r % 6); k++) {
				uint64_t x = prng__next(&seed);
				char c =
					i % 3 == 1 ?
						alphabet[x % (sizeof(alphabet) -
							      1)] :
						(char)(x >> 8);

				in[x % len] = c;
			}
		}
		s.len = 0;
		while (off < len) {
			size_t step = 1 + prng__next(&seed) % 64;

			got = http1_req__feed(h, in + off,
					      step < len - off ? step :
								 len - off);
			drain(h, &s);
			if (got <= 0)
				break;
			off += got;
		}
		ASSERT_TRUE(got >= 0 || got == -EPROTO) TH_LOG("round %d", i);
		f = http1_req__refusal(h);
		if (got < 0) {
			ASSERT_NE(NULL, f);
			ASSERT_LE(400U, f->status);
			ASSERT_GE(599U, f->status);
			expect_no_token(_metadata, f);
		} else {
			ASSERT_EQ(NULL, f);
		}
		http1_req__destroy(h);
	}
	free(s.buf);
}

TEST_HARNESS_MAIN
