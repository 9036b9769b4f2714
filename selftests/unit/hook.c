// SPDX-License-Identifier: GPL-2.0
/*
 * The policy hook (net/hook.c, net/hook-msg.c), without a proxy and
 * without root: the JSON lines on their own (the question's exact text,
 * the answers taken and refused), then the client against a fake hook
 * (selftests/fakehook.h) the test plays by hand on a Unix socket: grant
 * and deny out of order, a deadline passing, a missing or refusing
 * socket, a hook that hangs up, garbage, an overlong line, a verdict of
 * a later protocol, unknown and cancelled ids, too many questions, and
 * the socket changing under pending questions. Requests (issue 12): the
 * question's fields without the guest's credentials, grant-http's fields
 * read and checked, and a request answered, denied and timed out.
 * Interception by the hook (issue 31): a flow's grant-http read (tls,
 * ask, junk) and carried out, a request question's flow, tls and
 * destination, values that are not ASCII byte for byte both ways, any
 * editable field set, framing fields and limits refused by name, and an
 * answer naming another flow.
 *
 * Nothing asserts how fast anything is: a deadline that must pass is
 * short, one that must not is long, and waits are bounded polls.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <jansson.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "lib/compiler.h"
#include "net/hook-internal.h"
#include "net/hook.h"
#include "net/http1.h"
#include "selftests/fakehook.h"
#include "selftests/kselftest.h"

#define LONG_MS	   5000 /* a deadline the test never waits out */
#define SHORT_MS   50	/* one it does */
#define POLL_MS	   100
#define MAX_ANSWER 16

static uint64_t now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static struct net_flow flow(uint8_t proto, const char *src, int sport,
			    const char *dst, int dport)
{
	struct net_flow f = { .proto = proto };

	f.src.sin_family = f.dst.sin_family = AF_INET;
	f.src.sin_addr.s_addr = inet_addr(src);
	f.src.sin_port = htons(sport);
	f.dst.sin_addr.s_addr = inet_addr(dst);
	f.dst.sin_port = htons(dport);
	return f;
}

static struct net_ask ask_for(const char *socket, unsigned int timeout_ms)
{
	struct net_ask a = { .timeout_ms = timeout_ms };

	snprintf(a.socket, sizeof(a.socket), "%s", socket);
	snprintf(a.class_name, sizeof(a.class_name), "documentation");
	return a;
}

/* ---- the lines ------------------------------------------------------------ */

TEST(question_line_exact)
{
	struct net_flow f =
		flow(IPPROTO_TCP, "10.0.2.15", 40000, "192.0.2.10", 8080);
	struct net_ask a = ask_for("/run/p.sock", LONG_MS);
	char buf[HOOK_LINE_MAX];
	const char want[] =
		"{\"id\": 7, \"proto\": \"tcp\", \"src\": "
		"\"10.0.2.15:40000\", \"dst\": \"192.0.2.10:8080\", "
		"\"class\": \"documentation\", \"hostnames\": "
		"[\"api.example.com\", \"www.example.com\"]}\n";
	int n;

	a.nr_hostnames = 2;
	snprintf(a.hostnames[0], sizeof(a.hostnames[0]), "api.example.com");
	snprintf(a.hostnames[1], sizeof(a.hostnames[1]), "www.example.com");
	n = hook_msg__question(buf, sizeof(buf), 7, &f, &a);
	ASSERT_EQ((int)strlen(want), n);
	buf[n] = '\0';
	EXPECT_STREQ(want, buf);
}

TEST(question_udp_without_names)
{
	struct net_flow f =
		flow(IPPROTO_UDP, "10.0.2.15", 5353, "198.51.100.7", 53);
	struct net_ask a = ask_for("/run/p.sock", LONG_MS);
	char buf[HOOK_LINE_MAX];
	const char want[] =
		"{\"id\": 9007199254740991, \"proto\": \"udp\", "
		"\"src\": \"10.0.2.15:5353\", \"dst\": "
		"\"198.51.100.7:53\", \"class\": \"documentation\", "
		"\"hostnames\": []}\n";
	int n;

	n = hook_msg__question(buf, sizeof(buf), 9007199254740991ULL, &f, &a);
	ASSERT_EQ((int)strlen(want), n);
	buf[n] = '\0';
	EXPECT_STREQ(want, buf);
	/* One byte short: refused, not cut. */
	EXPECT_EQ(-ENOSPC, hook_msg__question(buf, strlen(want) - 1,
					      9007199254740991ULL, &f, &a));
}

/* The most a question carries still fits in a line. */
TEST(question_longest_fits)
{
	struct net_flow f = flow(IPPROTO_TCP, "255.255.255.254", 65535,
				 "255.255.255.254", 65535);
	struct net_ask a = ask_for("/run/p.sock", LONG_MS);
	char buf[HOOK_LINE_MAX];
	json_t *q;
	int n;

	snprintf(a.class_name, sizeof(a.class_name), "public-internet");
	a.nr_hostnames = NET_ASK_MAX_HOSTNAMES;
	for (unsigned int i = 0; i < NET_ASK_MAX_HOSTNAMES; i++) {
		memset(a.hostnames[i], 'a', NET_HOSTNAME_MAX);
		a.hostnames[i][NET_HOSTNAME_MAX] = '\0';
		a.hostnames[i][0] = 'a' + i;
	}
	n = hook_msg__question(buf, sizeof(buf), 1ULL << 52, &f, &a);
	ASSERT_LT(0, n);
	EXPECT_EQ('\n', buf[n - 1]);
	q = json_loadb(buf, n - 1, 0, NULL);
	ASSERT_NE(NULL, q);
	EXPECT_EQ(NET_ASK_MAX_HOSTNAMES,
		  json_array_size(json_object_get(q, "hostnames")));
	json_decref(q);
}

static const struct {
	const char *line;
	uint64_t id;
	enum hook_verdict verdict;
	const char *reason;
} good_answers[] = {
	{ "{\"id\": 7, \"verdict\": \"grant\"}", 7, HOOK_VERDICT_GRANT, "" },
	{ "{\"id\":1,\"verdict\":\"deny\",\"reason\":\"not on Sundays\"}", 1,
	  HOOK_VERDICT_DENY, "not on Sundays" },
	{ "{\"verdict\": \"grant-http\", \"id\": 3}", 3,
	  HOOK_VERDICT_GRANT_HTTP, "" },
	{ "{\"id\": 4, \"verdict\": \"Grant\"}", 4, HOOK_VERDICT_UNKNOWN, "" },
	/* Keys of a later protocol are left alone. */
	{ "{\"id\": 5, \"verdict\": \"deny\", \"http\": {\"hosts\": []}}", 5,
	  HOOK_VERDICT_DENY, "" },
	/* JSON's whitespace, a CRLF line's CR among it. */
	{ "  {\"id\": 6 , \"verdict\" : \"grant\"}\r", 6, HOOK_VERDICT_GRANT,
	  "" },
	{ "{\"id\": 9007199254740991, \"verdict\": \"grant\"}",
	  9007199254740991ULL, HOOK_VERDICT_GRANT, "" },
};

TEST(answers_taken)
{
	struct hook_answer a;

	for (unsigned int i = 0; i < ARRAY_SIZE(good_answers); i++) {
		const char *l = good_answers[i].line;

		ASSERT_EQ(0, hook_msg__answer(l, strlen(l), &a, NULL))
		TH_LOG("%s", l);
		EXPECT_EQ(good_answers[i].id, a.id);
		EXPECT_EQ(good_answers[i].verdict, a.verdict);
		EXPECT_STREQ(good_answers[i].reason, a.reason);
	}
}

static const char *const bad_answers[] = {
	"",
	"grant",
	"[7, \"grant\"]",
	"7",
	"{\"id\": 7}",
	"{\"verdict\": \"grant\"}",
	"{\"id\": 0, \"verdict\": \"grant\"}",
	"{\"id\": -7, \"verdict\": \"grant\"}",
	"{\"id\": \"7\", \"verdict\": \"grant\"}",
	"{\"id\": 7.0, \"verdict\": \"grant\"}",
	"{\"id\": 9007199254740992, \"verdict\": \"grant\"}",
	"{\"id\": 99999999999999999999999, \"verdict\": \"grant\"}",
	"{\"id\": 7, \"verdict\": true}",
	"{\"id\": 7, \"verdict\": \"grant\", \"reason\": 3}",
	"{\"id\": 7, \"verdict\": \"grant\", \"id\": 8}",
	"{\"id\": 7, \"verdict\": \"grant\"} {\"id\": 8}",
	"{\"id\": 7, \"verdict\": \"gr\\u0000ant\"}",
	"{\"id\": 7, \"verdict\": \"grant\"",
	"{\"id\": 7, \"verdict\": \"grant\", \"flow\": \"7\"}",
	"{\"id\": 7, \"verdict\": \"grant\", \"flow\": 0}",
	"{\"id\": 7, \"verdict\": \"grant-http\", \"tls\": true} junk",
	"{\"id\": 7, \"verdict\": \"grant-http\", \"tls\": true,}",
};

TEST(answers_refused)
{
	struct hook_answer a;

	for (unsigned int i = 0; i < ARRAY_SIZE(bad_answers); i++) {
		const char *l = bad_answers[i];

		EXPECT_EQ(-EBADMSG, hook_msg__answer(l, strlen(l), &a, NULL))
		TH_LOG("taken: %s", l);
	}
}

/* The hook's texts reach the log as printable ASCII, cut short. */
TEST(answer_texts_printable_and_cut)
{
	char line[512], reason[200];
	struct hook_answer a;

	memset(reason, 'r', sizeof(reason) - 1);
	reason[sizeof(reason) - 1] = '\0';
	snprintf(line, sizeof(line),
		 "{\"id\": 1, \"verdict\": \"gr\\nant\\u00e9\", \"reason\": "
		 "\"%s\"}",
		 reason);
	ASSERT_EQ(0, hook_msg__answer(line, strlen(line), &a, NULL));
	EXPECT_EQ(HOOK_VERDICT_UNKNOWN, a.verdict);
	/* \n, and the two bytes of U+00E9 in UTF-8. */
	EXPECT_STREQ("gr?ant??", a.verdict_text);
	EXPECT_EQ(HOOK_DETAIL_MAX - 1, strlen(a.reason));
}

/* ---- a request's lines ----------------------------------------------------- */

static const struct http_header req_fields[] = {
	{ "Host", 4, "api.example.test", 16 },
	{ "Authorization", 13, "Bearer guest-secret", 19 },
	{ "User-Agent", 10, "t\x01t\xc3\xa9", 5 },
	{ "cookie", 6, "session=guest-cookie", 20 },
	{ "X-Api-Key", 9, "guest-key", 9 },
};

/* A grant setting x-api-key itself and giving authorization to the hook. */
static void grant_fields(struct net_http_decision *d)
{
	*d = (struct net_http_decision){ .verdict = NET_VERDICT_ASK,
					 .nr_headers = 2 };
	memcpy(d->buf, "x-api-key\0host-key\0authorization\0", 33);
	d->headers[0].name = 0;
	d->headers[0].value = 10;
	d->headers[1].name = 19;
	d->headers[1].value = 32;
	d->headers[1].hook = true;
}

static struct hook_http_question
http_question(const char *socket, unsigned int timeout_ms,
	      const struct net_http_decision *g)
{
	return (struct hook_http_question){
		.socket = socket,
		.timeout_ms = timeout_ms,
		.grant = 2,
		.host = "api.example.test",
		.port = 443,
		.tls = true,
		.sni = "api.example.test",
		.alpn = "h2",
		.protocol = "h2",
		.method = "GET",
		.path = "/user?q=\"1\"",
		.path_len = 11,
		.fields = req_fields,
		.nr_fields = ARRAY_SIZE(req_fields),
		.grant_fields = g,
	};
}

/*
 * The request as the hook reads it: its method, URL, protocol, grant
 * and fields in order, printable; the guest's credentials and the
 * grant's own fields by name only.
 */
TEST(http_question_leaves_credentials_out)
{
	struct net_flow f =
		flow(IPPROTO_TCP, "10.0.2.15", 40000, "192.0.2.10", 443);
	struct net_http_decision g;
	struct hook_http_question q;
	char buf[HOOK_HTTP_LINE_MAX];
	json_t *o, *hs, *om;
	int n;

	grant_fields(&g);
	q = http_question("/run/h.sock", 100, &g);
	n = hook_msg__http_question(buf, sizeof(buf), 9, &f, &q);
	ASSERT_LT(0, n);
	EXPECT_EQ('\n', buf[n - 1]);
	EXPECT_EQ(NULL, memmem(buf, n, "guest-", 6)) TH_LOG("%.*s", n, buf);
	EXPECT_EQ(NULL, memmem(buf, n, "host-key", 8));
	o = json_loadb(buf, n - 1, 0, NULL);
	ASSERT_NE(NULL, o) TH_LOG("%.*s", n, buf);
	EXPECT_EQ(9, json_integer_value(json_object_get(o, "id")));
	EXPECT_STREQ("http", json_string_value(json_object_get(o, "type")));
	EXPECT_STREQ("10.0.2.15:40000",
		     json_string_value(json_object_get(o, "src")));
	EXPECT_STREQ("192.0.2.10:443",
		     json_string_value(json_object_get(o, "dst")));
	EXPECT_EQ(2, json_integer_value(json_object_get(o, "grant")));
	EXPECT_STREQ("api.example.test",
		     json_string_value(json_object_get(o, "host")));
	EXPECT_STREQ("GET", json_string_value(json_object_get(o, "method")));
	EXPECT_STREQ("https://api.example.test/user?q=\"1\"",
		     json_string_value(json_object_get(o, "url")));
	EXPECT_STREQ("h2", json_string_value(json_object_get(o, "protocol")));
	EXPECT_TRUE(json_is_false(json_object_get(o, "truncated")));
	hs = json_object_get(o, "headers");
	ASSERT_EQ(2, json_array_size(hs));
	EXPECT_STREQ("Host", json_string_value(
				     json_array_get(json_array_get(hs, 0), 0)));
	EXPECT_STREQ("api.example.test", json_string_value(json_array_get(
						 json_array_get(hs, 0), 1)));
	/* Byte for byte: 0x01, and 0xc3 0xa9 as U+00C3 U+00A9. */
	EXPECT_STREQ(
		"t\x01t\xc3\x83\xc2\xa9",
		json_string_value(json_array_get(json_array_get(hs, 1), 1)));
	/* No flow of the hook's: the grant's index; TLS; where. */
	EXPECT_EQ(NULL, json_object_get(o, "flow"));
	EXPECT_STREQ("api.example.test",
		     json_string_value(json_object_get(
			     json_object_get(o, "tls"), "sni")));
	EXPECT_STREQ("h2", json_string_value(json_object_get(
				   json_object_get(o, "tls"), "alpn")));
	EXPECT_STREQ("10.0.2.15",
		     json_string_value(json_object_get(
			     json_object_get(json_object_get(o, "destination"),
					     "src"),
			     "ip")));
	EXPECT_EQ(443,
		  json_integer_value(json_object_get(
			  json_object_get(json_object_get(o, "destination"),
					  "dst"),
			  "port")));
	om = json_object_get(o, "omitted");
	ASSERT_EQ(3, json_array_size(om));
	EXPECT_STREQ("Authorization", json_string_value(json_array_get(om, 0)));
	EXPECT_STREQ("cookie", json_string_value(json_array_get(om, 1)));
	EXPECT_STREQ("X-Api-Key", json_string_value(json_array_get(om, 2)));
	json_decref(o);
}

/* Fields past what a line holds are left out, and it says so. */
TEST(http_question_truncated_to_a_line)
{
	struct net_flow f =
		flow(IPPROTO_TCP, "10.0.2.15", 40000, "192.0.2.10", 80);
	static char big[HTTP1_HEAD_MAX / HTTP1_MAX_HEADERS];
	struct http_header many[HTTP1_MAX_HEADERS];
	struct hook_http_question q = http_question("/run/h.sock", 100, NULL);
	char buf[HOOK_HTTP_LINE_MAX];
	json_t *o;
	int n;

	memset(big, '"', sizeof(big));
	for (unsigned int i = 0; i < ARRAY_SIZE(many); i++)
		many[i] = (struct http_header){ "X-Big", 5, big, sizeof(big) };
	q.fields = many;
	q.nr_fields = ARRAY_SIZE(many);
	q.tls = false;
	q.port = 8080;
	n = hook_msg__http_question(buf, sizeof(buf), 1, &f, &q);
	ASSERT_LT(0, n);
	o = json_loadb(buf, n - 1, 0, NULL);
	ASSERT_NE(NULL, o);
	EXPECT_TRUE(json_is_true(json_object_get(o, "truncated")));
	EXPECT_LT(0, json_array_size(json_object_get(o, "headers")));
	EXPECT_GT(ARRAY_SIZE(many),
		  json_array_size(json_object_get(o, "headers")));
	EXPECT_STREQ("http://api.example.test:8080/user?q=\"1\"",
		     json_string_value(json_object_get(o, "url")));
	json_decref(o);
}

/*
 * What a hook reads of the request of a flow it granted: "flow", the
 * exact "tls" and "destination" objects, and the bytes of a value that
 * is not ASCII back as they were (Python: value.encode("latin-1")).
 */
TEST(http_question_of_a_hook_flow_exact)
{
	static const char utf8[] = "caf\xc3\xa9 \xe2\x82\xac\t\x7f";
	struct net_flow f =
		flow(IPPROTO_TCP, "10.0.2.15", 40000, "192.0.2.10", 80);
	struct http_header fields[] = {
		{ "Host", 4, "api.example.test", 16 },
		{ "X-Name", 6, utf8, sizeof(utf8) - 1 },
	};
	struct hook_http_question q = http_question("/run/h.sock", 100, NULL);
	char buf[HOOK_HTTP_LINE_MAX], back[64];
	const char *v;
	size_t k = 0;
	json_t *o;
	int n;

	q.fields = fields;
	q.nr_fields = ARRAY_SIZE(fields);
	q.flow = 12;
	q.tls = false;
	q.sni = q.alpn = NULL;
	q.port = 80;
	q.protocol = "HTTP/1.1";
	n = hook_msg__http_question(buf, sizeof(buf), 13, &f, &q);
	ASSERT_LT(0, n);
	EXPECT_NE(NULL,
		  memmem(buf, n,
			 "\"flow\": 12, \"tls\": null, \"destination\": "
			 "{\"src\": {\"ip\": \"10.0.2.15\", \"port\": "
			 "40000}, \"dst\": {\"ip\": \"192.0.2.10\", "
			 "\"port\": 80}, \"hostname\": "
			 "\"api.example.test\"}}\n",
			 strlen("\"flow\": 12, \"tls\": null, "
				"\"destination\": {\"src\": {\"ip\": "
				"\"10.0.2.15\", \"port\": 40000}, \"dst\": "
				"{\"ip\": \"192.0.2.10\", \"port\": 80}, "
				"\"hostname\": \"api.example.test\"}}\n")))
	TH_LOG("%.*s", n, buf);
	/* Tab as JSON escapes it, DEL as it is, the others as U+0080.. */
	EXPECT_NE(NULL, memmem(buf, n, "\\t\x7f\"", 4)) TH_LOG("%.*s", n, buf);
	o = json_loadb(buf, n - 1, 0, NULL);
	ASSERT_NE(NULL, o);
	EXPECT_EQ(NULL, json_object_get(o, "grant"));
	EXPECT_EQ(12, json_integer_value(json_object_get(o, "flow")));
	v = json_string_value(json_array_get(
		json_array_get(json_object_get(o, "headers"), 1), 1));
	ASSERT_NE(NULL, v);
	/* UTF-8 of U+0000..U+00FF back to one byte each. */
	for (size_t i = 0; v[i] && k < sizeof(back); i++) {
		unsigned char c = v[i];

		ASSERT_GE(0xc3, c);
		back[k++] = c < 0x80 ?
				    c :
				    (char)((c & 0x03) << 6 | (v[++i] & 0x3f));
	}
	ASSERT_EQ(sizeof(utf8) - 1, k);
	EXPECT_EQ(0, memcmp(utf8, back, k));
	json_decref(o);
}

static const char *edit_name(const struct net_http_decision *d, unsigned i)
{
	return d->buf + d->headers[i].name;
}

TEST(grant_http_fields_read)
{
	const char *l = "{\"id\": 4, \"verdict\": \"grant-http\", \"set\": "
			"{\"Authorization\": \"Bearer hook-token\"}, "
			"\"remove\": [\"Cookie\"]}";
	struct net_http_decision d;
	struct hook_answer a;

	ASSERT_EQ(0, hook_msg__answer(l, strlen(l), &a, &d));
	EXPECT_EQ(HOOK_VERDICT_GRANT_HTTP, a.verdict);
	EXPECT_EQ(NET_VERDICT_ALLOW, d.verdict);
	ASSERT_EQ(2, d.nr_headers);
	EXPECT_STREQ("authorization", edit_name(&d, 0));
	EXPECT_STREQ("Bearer hook-token", d.buf + d.headers[0].value);
	EXPECT_FALSE(d.headers[0].remove);
	EXPECT_STREQ("cookie", edit_name(&d, 1));
	EXPECT_TRUE(d.headers[1].remove);
	/* Without edits to read into, the verdict alone. */
	ASSERT_EQ(0, hook_msg__answer(l, strlen(l), &a, NULL));
	EXPECT_EQ(HOOK_VERDICT_GRANT_HTTP, a.verdict);
}

/*
 * Issue 34, finding 7: "clearText" opts a request's answer in to setting
 * fields on a clear-text flow; left out (or false) it does not; any
 * other value makes the answer invalid, its fields read into nothing.
 */
TEST(grant_http_clear_text_read)
{
	static const struct {
		const char *keys;
		bool valid, clear_text;
	} cases[] = {
		{ "", true, false },
		{ ", \"clearText\": true", true, true },
		{ ", \"clearText\": false", true, false },
		{ ", \"clearText\": \"true\"", false, false },
		{ ", \"clearText\": 1", false, false },
		{ ", \"clearText\": null", false, false },
	};
	struct net_http_decision d;
	struct hook_answer a;
	char l[256];

	for (size_t i = 0; i < ARRAY_SIZE(cases); i++) {
		snprintf(l, sizeof(l),
			 "{\"id\": 4, \"verdict\": \"grant-http\", \"set\": "
			 "{\"x-a\": \"v\"}%s}",
			 cases[i].keys);
		memset(&d, 0xff, sizeof(d));
		ASSERT_EQ(0, hook_msg__answer(l, strlen(l), &a, &d));
		if (!cases[i].valid) {
			EXPECT_EQ(HOOK_VERDICT_INVALID, a.verdict)
			TH_LOG("%s", l);
			EXPECT_STREQ("clearText not true or false", a.reason);
			EXPECT_FALSE(d.clear_text);
			EXPECT_EQ(0, d.nr_headers);
			continue;
		}
		EXPECT_EQ(HOOK_VERDICT_GRANT_HTTP, a.verdict)
		TH_LOG("%s: %s", l, a.reason);
		EXPECT_EQ(cases[i].clear_text, d.clear_text) TH_LOG("%s", l);
		EXPECT_EQ(1, d.nr_headers);
	}
}

/* A value's characters U+0000..U+00FF are its bytes, as questions send them. */
TEST(grant_http_values_are_latin1)
{
	const char *l = "{\"id\": 4, \"verdict\": \"grant-http\", \"set\": "
			"{\"X-Name\": \"caf\\u00e9 \\u00e2\\u0082\\u00ac\"}}";
	const char *bad = "{\"id\": 4, \"verdict\": \"grant-http\", \"set\": "
			  "{\"X-Name\": \"\\u20ac\"}}";
	struct net_http_decision d;
	struct hook_answer a;

	ASSERT_EQ(0, hook_msg__answer(l, strlen(l), &a, &d));
	ASSERT_EQ(HOOK_VERDICT_GRANT_HTTP, a.verdict) TH_LOG("%s", a.reason);
	ASSERT_EQ(1, d.nr_headers);
	EXPECT_STREQ("x-name", edit_name(&d, 0));
	EXPECT_STREQ("caf\xe9 \xe2\x82\xac", d.buf + d.headers[0].value);
	ASSERT_EQ(0, hook_msg__answer(bad, strlen(bad), &a, &d));
	EXPECT_EQ(HOOK_VERDICT_INVALID, a.verdict);
	EXPECT_STREQ("field value past U+00FF: X-Name", a.reason);
}

/* Any field a grant could set, declared by no grant: taken. */
TEST(grant_http_sets_any_editable_field)
{
	const char *l = "{\"id\": 4, \"verdict\": \"grant-http\", \"set\": "
			"{\"X-Agent-Policy\": \"allowed\", \"User-Agent\": "
			"\"kiln\"}}";
	struct net_http_decision d;
	struct hook_answer a;

	ASSERT_EQ(0, hook_msg__answer(l, strlen(l), &a, &d));
	ASSERT_EQ(HOOK_VERDICT_GRANT_HTTP, a.verdict) TH_LOG("%s", a.reason);
	ASSERT_EQ(2, d.nr_headers);
	EXPECT_STREQ("x-agent-policy", edit_name(&d, 0));
	EXPECT_FALSE(d.headers[0].hook);
	EXPECT_STREQ("user-agent", edit_name(&d, 1));
}

/* Past 16 fields or 16 KiB: refused, the reason naming the limit. */
TEST(grant_http_limits_named)
{
	static char l[HOOK_ANSWER_MAX];
	struct net_http_decision d;
	struct hook_answer a;
	int at;

	at = snprintf(l, sizeof(l),
		      "{\"id\": 4, \"verdict\": \"grant-http\", "
		      "\"set\": {");
	for (unsigned int i = 0; i <= NET_HTTP_MAX_HEADERS; i++)
		at += snprintf(l + at, sizeof(l) - at, "%s\"x-f%u\": \"v\"",
			       i ? ", " : "", i);
	snprintf(l + at, sizeof(l) - at, "}}");
	ASSERT_EQ(0, hook_msg__answer(l, strlen(l), &a, &d));
	EXPECT_EQ(HOOK_VERDICT_INVALID, a.verdict);
	EXPECT_STREQ("too many fields: at most 16 fields", a.reason);
	EXPECT_EQ(0, d.nr_headers);

	at = snprintf(l, sizeof(l),
		      "{\"id\": 4, \"verdict\": \"grant-http\", "
		      "\"set\": {\"x-big\": \"");
	memset(l + at, 'v', NET_HTTP_HEADERS_MAX);
	at += NET_HTTP_HEADERS_MAX;
	snprintf(l + at, sizeof(l) - at, "\"}}");
	ASSERT_EQ(0, hook_msg__answer(l, strlen(l), &a, &d));
	EXPECT_EQ(HOOK_VERDICT_INVALID, a.verdict);
	EXPECT_STREQ("fields too large: at most 16384 bytes", a.reason);
	EXPECT_EQ(0, d.nr_headers);
}

static const struct {
	const char *keys;
	enum hook_tls tls;
	bool each_request;
	bool valid;
} flow_grants[] = {
	{ "\"tls\": true, \"ask\": \"request\"", HOOK_TLS_YES, true, true },
	{ "\"tls\": false, \"ask\": \"connection\"", HOOK_TLS_NO, false, true },
	{ "\"ask\": \"connection\", \"tls\": \"auto\"", HOOK_TLS_AUTO, false,
	  true },
	{ "\"reason\": \"defaults\"", HOOK_TLS_AUTO, true, true },
	{ "\"tls\": \"yes\", \"ask\": \"request\"", HOOK_TLS_AUTO, true,
	  false },
	{ "\"tls\": 1", HOOK_TLS_AUTO, true, false },
	{ "\"tls\": null", HOOK_TLS_AUTO, true, false },
	{ "\"ask\": \"stream\"", HOOK_TLS_AUTO, true, false },
	{ "\"ask\": true", HOOK_TLS_AUTO, true, false },
	{ "\"tls\": true, \"set\": {\"x-a\": \"v\"}", HOOK_TLS_YES, true,
	  false },
	{ "\"tls\": true, \"remove\": []", HOOK_TLS_YES, true, false },
	{ "\"host\": \"Api.Example.Test.\"", HOOK_TLS_AUTO, true, true },
	{ "\"host\": \"*.example.test\"", HOOK_TLS_AUTO, true, false },
	{ "\"host\": \"192.0.2.1\"", HOOK_TLS_AUTO, true, false },
	{ "\"host\": [\"a.test\"]", HOOK_TLS_AUTO, true, false },
};

/* A flow's grant-http: "tls" and "ask" read, junk in them flagged. */
TEST(flow_grant_http_read)
{
	struct net_http_decision d;
	struct hook_answer a;
	char l[256];

	for (unsigned int i = 0; i < ARRAY_SIZE(flow_grants); i++) {
		snprintf(l, sizeof(l),
			 "{\"id\": 3, \"verdict\": \"grant-http\", %s}",
			 flow_grants[i].keys);
		ASSERT_EQ(0, hook_msg__answer(l, strlen(l), &a, &d))
		TH_LOG("%s", l);
		EXPECT_EQ(flow_grants[i].valid, !a.flow_invalid)
		TH_LOG("%s", l);
		if (!flow_grants[i].valid)
			continue;
		EXPECT_EQ(HOOK_VERDICT_GRANT_HTTP, a.verdict);
		EXPECT_EQ(flow_grants[i].tls, a.tls) TH_LOG("%s", l);
		EXPECT_EQ(flow_grants[i].each_request, a.each_request)
		TH_LOG("%s", l);
		EXPECT_STREQ(strstr(l, "host") ? "api.example.test" : "",
			     a.host);
	}
}

static const char *const bad_edits[] = {
	"\"set\": {\"Host\": \"evil.test\"}",
	"\"set\": {\"content-length\": \"0\"}",
	"\"set\": {\"x-a\": \"v\\r\\nx-b: w\"}",
	"\"set\": {\"x-a\": 7}",
	"\"set\": {\"x a\": \"v\"}",
	"\"set\": [\"x-a\"]",
	"\"set\": {\"x-a\": \"v\"}, \"remove\": [\"X-A\"]",
	"\"remove\": \"x-a\"",
	"\"remove\": [\"transfer-encoding\"]",
};

/* Fields a grant could not set: the answer is invalid, none kept. */
TEST(grant_http_bad_fields_invalid)
{
	struct net_http_decision d;
	struct hook_answer a;
	char l[256];

	for (unsigned int i = 0; i < ARRAY_SIZE(bad_edits); i++) {
		snprintf(l, sizeof(l),
			 "{\"id\": 4, \"verdict\": \"grant-http\", %s}",
			 bad_edits[i]);
		ASSERT_EQ(0, hook_msg__answer(l, strlen(l), &a, &d))
		TH_LOG("%s", l);
		EXPECT_EQ(HOOK_VERDICT_INVALID, a.verdict) TH_LOG("%s", l);
		EXPECT_EQ(0, d.nr_headers);
		EXPECT_EQ(NULL, strstr(a.reason, "evil"))
		TH_LOG("%s", a.reason);
	}
}

/* A framing or routing field: refused, the reason naming it. */
TEST(grant_http_framing_field_named)
{
	static const char *const names[] = { "Content-Length",	  "host",
					     "Transfer-Encoding", "connection",
					     "upgrade",		  "te" };
	struct net_http_decision d;
	struct hook_answer a;
	char l[256], want[HOOK_DETAIL_MAX];

	for (unsigned int i = 0; i < ARRAY_SIZE(names); i++) {
		snprintf(l, sizeof(l),
			 "{\"id\": 4, \"verdict\": \"grant-http\", \"set\": "
			 "{\"%s\": \"1\"}}",
			 names[i]);
		ASSERT_EQ(0, hook_msg__answer(l, strlen(l), &a, &d));
		EXPECT_EQ(HOOK_VERDICT_INVALID, a.verdict);
		snprintf(want, sizeof(want), "field not editable: %s",
			 names[i]);
		EXPECT_STREQ(want, a.reason);
	}
}

/* ---- the client ----------------------------------------------------------- */

struct answer {
	void *cookie;
	enum net_verdict verdict;
	struct net_decision d; /* a flow's, as given */
	char reason[64];
	char detail[HOOK_DETAIL_MAX];
};

struct answers {
	unsigned int n;
	struct answer a[MAX_ANSWER];
	/* Requests' answers: the last one's fields, as given. */
	struct net_http_decision http;
	uint64_t http_id;
};

static void on_answer(void *opaque, void *cookie, const struct net_decision *d,
		      const char *detail)
{
	struct answers *as = opaque;
	struct answer *a;

	if (as->n == MAX_ANSWER)
		return;
	a = &as->a[as->n++];
	a->cookie = cookie;
	a->verdict = d->verdict;
	a->d = *d;
	snprintf(a->reason, sizeof(a->reason), "%s", d->reason);
	snprintf(a->detail, sizeof(a->detail), "%s", detail);
}

static void on_http_answer(void *opaque, void *cookie, uint64_t id,
			   const struct net_http_decision *d,
			   const char *detail)
{
	struct answers *as = opaque;
	struct net_decision nd = { .verdict = d->verdict };

	snprintf(nd.reason, sizeof(nd.reason), "%s", d->reason);
	as->http = *d;
	as->http_id = id;
	on_answer(opaque, cookie, &nd, detail);
}

FIXTURE(hk)
{
	struct fakehook fh;
	struct hook *hook;
	struct answers answers;
	struct net_flow f;
};

FIXTURE_SETUP(hk)
{
	ASSERT_EQ(0, fakehook__init(&self->fh, true));
	self->f = flow(IPPROTO_TCP, "10.0.2.15", 40000, "192.0.2.10", 443);
}

FIXTURE_TEARDOWN(hk)
{
	hook__destroy(self->hook);
	fakehook__close(&self->fh);
}

static void open_hook(struct __test_metadata *_metadata,
		      FIXTURE_DATA(hk) * self, unsigned int max_pending)
{
	struct hook_params p = { .answer = on_answer,
				 .http_answer = on_http_answer,
				 .opaque = &self->answers,
				 .max_pending = max_pending };

	ASSERT_EQ(0, hook__create(&self->hook, &p));
}

/* Runs the client as its owner would until n answers came. */
static bool run_until(struct hook *h, struct answers *as, unsigned int n)
{
	uint64_t end = now_ms() + FAKEHOOK_WAIT_MS;
	int ms;

	while (as->n < n) {
		if (now_ms() >= end)
			return false;
		ms = hook__timeout(h, now_ms());
		if (ms < 0 || ms > POLL_MS)
			ms = POLL_MS;
		fakehook__wait(hook__fd(h), POLLIN, ms);
		hook__run(h, now_ms());
	}
	return true;
}

/* Asks about self->f with cookie; the question's id. */
static uint64_t ask(struct __test_metadata *_metadata, FIXTURE_DATA(hk) * self,
		    const char *socket, unsigned int timeout_ms, void *cookie)
{
	struct net_ask a = ask_for(socket, timeout_ms);
	uint64_t id = 0;

	EXPECT_EQ(0,
		  hook__ask(self->hook, &self->f, &a, cookie, now_ms(), &id));
	return id;
}

/* The next question's id, as the hook reads it. */
static long long question_id(struct __test_metadata *_metadata,
			     struct fakehook *fh)
{
	char line[FAKEHOOK_LINE_MAX];
	long long id;
	json_t *q;

	ASSERT_LT(0, fakehook__read_line(fh, line, sizeof(line)));
	q = json_loads(line, 0, NULL);
	ASSERT_NE(NULL, q) TH_LOG("not JSON: %s", line);
	id = json_integer_value(json_object_get(q, "id"));
	json_decref(q);
	return id;
}

static int cookie1, cookie2, cookie3;

TEST_F(hk, grant_and_deny_out_of_order)
{
	struct hook_stats s;
	long long id1, id2;

	open_hook(_metadata, self, 0);
	ask(_metadata, self, self->fh.path, LONG_MS, &cookie1);
	ask(_metadata, self, self->fh.path, LONG_MS, &cookie2);
	ASSERT_EQ(0, fakehook__accept(&self->fh));
	id1 = question_id(_metadata, &self->fh);
	id2 = question_id(_metadata, &self->fh);
	EXPECT_NE(id1, id2);
	/* Both deadlines passed, seen from far enough ahead. */
	EXPECT_EQ(0, hook__timeout(self->hook, now_ms() + 2 * LONG_MS));

	/* The second first. */
	ASSERT_EQ(0, fakehook__answer(&self->fh, id2, "deny", "not today"));
	ASSERT_EQ(0, fakehook__answer(&self->fh, id1, "grant", NULL));
	ASSERT_TRUE(run_until(self->hook, &self->answers, 2));
	EXPECT_EQ(&cookie2, self->answers.a[0].cookie);
	EXPECT_EQ(NET_VERDICT_DENY, self->answers.a[0].verdict);
	EXPECT_STREQ(HOOK_DENY, self->answers.a[0].reason);
	EXPECT_STREQ("not today", self->answers.a[0].detail);
	EXPECT_EQ(&cookie1, self->answers.a[1].cookie);
	EXPECT_EQ(NET_VERDICT_ALLOW, self->answers.a[1].verdict);
	EXPECT_STREQ(HOOK_GRANT, self->answers.a[1].reason);
	hook__stats(self->hook, &s);
	EXPECT_EQ(2, s.questions);
	EXPECT_EQ(2, s.answers);
	EXPECT_EQ(0, s.pending);
	EXPECT_EQ(1, s.connects);
	EXPECT_EQ(-1, hook__timeout(self->hook, now_ms()));
}

TEST_F(hk, deadline_passed_then_late_answer_ignored)
{
	struct hook_stats s;
	long long id;

	open_hook(_metadata, self, 0);
	ask(_metadata, self, self->fh.path, SHORT_MS, &cookie1);
	ASSERT_EQ(0, fakehook__accept(&self->fh));
	id = question_id(_metadata, &self->fh);
	ASSERT_TRUE(run_until(self->hook, &self->answers, 1));
	EXPECT_EQ(&cookie1, self->answers.a[0].cookie);
	EXPECT_EQ(NET_VERDICT_DENY, self->answers.a[0].verdict);
	EXPECT_STREQ(HOOK_TIMEOUT, self->answers.a[0].reason);

	/* Late: ignored, and the connection stays for the next question. */
	ASSERT_EQ(0, fakehook__answer(&self->fh, id, "grant", NULL));
	ask(_metadata, self, self->fh.path, LONG_MS, &cookie2);
	id = question_id(_metadata, &self->fh);
	ASSERT_EQ(0, fakehook__answer(&self->fh, id, "grant", NULL));
	ASSERT_TRUE(run_until(self->hook, &self->answers, 2));
	EXPECT_EQ(&cookie2, self->answers.a[1].cookie);
	EXPECT_STREQ(HOOK_GRANT, self->answers.a[1].reason);
	hook__stats(self->hook, &s);
	EXPECT_EQ(1, s.timeouts);
	EXPECT_EQ(1, s.ignored);
	EXPECT_EQ(1, s.answers);
	EXPECT_EQ(1, s.connects);
}

TEST_F(hk, socket_missing_or_refusing_is_unreachable)
{
	struct net_ask a = ask_for("/nonexistent/kiln/hook.sock", LONG_MS);
	uint64_t id;
	int ret;

	open_hook(_metadata, self, 0);
	ret = hook__ask(self->hook, &self->f, &a, &cookie1, now_ms(), &id);
	EXPECT_EQ(-ENOENT, ret);
	EXPECT_STREQ(HOOK_UNREACHABLE, hook__failure(ret));

	/* The socket's file left behind by a listener that is gone. */
	close(self->fh.lsn);
	self->fh.lsn = -1;
	a = ask_for(self->fh.path, LONG_MS);
	ret = hook__ask(self->hook, &self->f, &a, &cookie1, now_ms(), &id);
	EXPECT_EQ(-ECONNREFUSED, ret);
	EXPECT_STREQ(HOOK_UNREACHABLE, hook__failure(ret));
	/* Neither was asked: no answer call to come. */
	EXPECT_EQ(-1, hook__timeout(self->hook, now_ms()));
	EXPECT_EQ(0, self->answers.n);
}

TEST_F(hk, hangup_fails_pending_then_reconnects)
{
	struct hook_stats s;
	long long id;

	open_hook(_metadata, self, 0);
	ask(_metadata, self, self->fh.path, LONG_MS, &cookie1);
	ASSERT_EQ(0, fakehook__accept(&self->fh));
	question_id(_metadata, &self->fh);
	close(self->fh.conn);
	self->fh.conn = -1;
	ASSERT_TRUE(run_until(self->hook, &self->answers, 1));
	EXPECT_STREQ(HOOK_UNREACHABLE, self->answers.a[0].reason);
	EXPECT_EQ(NET_VERDICT_DENY, self->answers.a[0].verdict);

	/* The next question makes a new connection. */
	ask(_metadata, self, self->fh.path, LONG_MS, &cookie2);
	ASSERT_EQ(0, fakehook__accept(&self->fh));
	id = question_id(_metadata, &self->fh);
	ASSERT_EQ(0, fakehook__answer(&self->fh, id, "grant", NULL));
	ASSERT_TRUE(run_until(self->hook, &self->answers, 2));
	EXPECT_STREQ(HOOK_GRANT, self->answers.a[1].reason);
	hook__stats(self->hook, &s);
	EXPECT_EQ(2, s.connects);
	EXPECT_EQ(1, s.failures);
}

/* Garbage ends the connection: every pending question is denied. */
TEST_F(hk, garbage_fails_every_pending_question)
{
	open_hook(_metadata, self, 0);
	ask(_metadata, self, self->fh.path, LONG_MS, &cookie1);
	ask(_metadata, self, self->fh.path, LONG_MS, &cookie2);
	ASSERT_EQ(0, fakehook__accept(&self->fh));
	question_id(_metadata, &self->fh);
	question_id(_metadata, &self->fh);
	ASSERT_EQ(0, fakehook__send(&self->fh, "yes please\n"));
	ASSERT_TRUE(run_until(self->hook, &self->answers, 2));
	for (int i = 0; i < 2; i++) {
		EXPECT_EQ(NET_VERDICT_DENY, self->answers.a[i].verdict);
		EXPECT_STREQ(HOOK_ERROR, self->answers.a[i].reason);
	}
	/* Dropped: the hook reads its end closed. */
	EXPECT_EQ(-EPIPE, fakehook__read_line(&self->fh, (char[8]){ 0 }, 8));
}

TEST_F(hk, overlong_line_is_garbage)
{
	char big[HOOK_ANSWER_MAX + 2];

	open_hook(_metadata, self, 0);
	ask(_metadata, self, self->fh.path, LONG_MS, &cookie1);
	ASSERT_EQ(0, fakehook__accept(&self->fh));
	question_id(_metadata, &self->fh);
	/* No newline within HOOK_ANSWER_MAX bytes. */
	memset(big, ' ', sizeof(big) - 1);
	big[sizeof(big) - 1] = '\0';
	ASSERT_EQ(0, fakehook__send(&self->fh, big));
	ASSERT_TRUE(run_until(self->hook, &self->answers, 1));
	EXPECT_STREQ(HOOK_ERROR, self->answers.a[0].reason);
}

/* A verdict of a later protocol ("grant-http", issue 12): denied for now. */
TEST_F(hk, unknown_verdict_denied)
{
	long long id;

	open_hook(_metadata, self, 0);
	ask(_metadata, self, self->fh.path, LONG_MS, &cookie1);
	ASSERT_EQ(0, fakehook__accept(&self->fh));
	id = question_id(_metadata, &self->fh);
	ASSERT_EQ(0, fakehook__answer(&self->fh, id, "intercept", "api"));
	ASSERT_TRUE(run_until(self->hook, &self->answers, 1));
	EXPECT_EQ(NET_VERDICT_DENY, self->answers.a[0].verdict);
	EXPECT_STREQ(HOOK_UNKNOWN, self->answers.a[0].reason);
	EXPECT_STREQ("intercept", self->answers.a[0].detail);
}

/*
 * grant-http to a flow: intercepted as it says (its question's id with
 * it); one with a "tls" or "ask" we do not know, or fields, denied
 * "hook answer invalid", the connection kept.
 */
TEST_F(hk, flow_grant_http_intercepts)
{
	const struct net_decision *d = &self->answers.a[0].d;
	struct hook_stats s;
	char line[256];
	long long id;

	open_hook(_metadata, self, 0);
	ask(_metadata, self, self->fh.path, LONG_MS, &cookie1);
	ASSERT_EQ(0, fakehook__accept(&self->fh));
	id = question_id(_metadata, &self->fh);
	snprintf(line, sizeof(line),
		 "{\"id\": %lld, \"verdict\": \"grant-http\", \"tls\": "
		 "\"auto\", \"ask\": \"connection\", \"reason\": \"api\"}\n",
		 id);
	ASSERT_EQ(0, fakehook__send(&self->fh, line));
	ASSERT_TRUE(run_until(self->hook, &self->answers, 1));
	EXPECT_EQ(&cookie1, self->answers.a[0].cookie);
	EXPECT_EQ(NET_VERDICT_HTTP, d->verdict);
	EXPECT_STREQ(HOOK_GRANT_HTTP, d->reason);
	EXPECT_EQ(id, (long long)d->hook_flow);
	EXPECT_TRUE(d->http_tls_auto);
	EXPECT_FALSE(d->http_tls);
	EXPECT_FALSE(d->hook_each_request);
	EXPECT_STREQ("api", self->answers.a[0].detail);

	ask(_metadata, self, self->fh.path, LONG_MS, &cookie2);
	id = question_id(_metadata, &self->fh);
	snprintf(line, sizeof(line),
		 "{\"id\": %lld, \"verdict\": \"grant-http\", \"tls\": true, "
		 "\"ask\": \"request\", \"host\": \"api.example.test\"}\n",
		 id);
	ASSERT_EQ(0, fakehook__send(&self->fh, line));
	ASSERT_TRUE(run_until(self->hook, &self->answers, 2));
	d = &self->answers.a[1].d;
	EXPECT_EQ(NET_VERDICT_HTTP, d->verdict);
	EXPECT_TRUE(d->http_tls);
	EXPECT_FALSE(d->http_tls_auto);
	EXPECT_TRUE(d->hook_each_request);
	EXPECT_STREQ("api.example.test", d->http_host);

	ask(_metadata, self, self->fh.path, LONG_MS, &cookie3);
	id = question_id(_metadata, &self->fh);
	snprintf(line, sizeof(line),
		 "{\"id\": %lld, \"verdict\": \"grant-http\", \"tls\": "
		 "\"maybe\", \"ask\": \"request\"}\n",
		 id);
	ASSERT_EQ(0, fakehook__send(&self->fh, line));
	ASSERT_TRUE(run_until(self->hook, &self->answers, 3));
	EXPECT_EQ(NET_VERDICT_DENY, self->answers.a[2].verdict);
	EXPECT_STREQ(HOOK_INVALID, self->answers.a[2].reason);
	EXPECT_STREQ("tls not true, false or \"auto\"",
		     self->answers.a[2].detail);
	hook__stats(self->hook, &s);
	EXPECT_EQ(1, s.connects);
	EXPECT_EQ(3, s.answers);
}

/*
 * A request's answer that names a "flow" must name its request's (the
 * flow question's id it was asked with); a flow's answer names none.
 */
TEST_F(hk, answer_naming_another_flow_invalid)
{
	struct hook_http_question q =
		http_question(self->fh.path, LONG_MS, NULL);
	struct net_http_decision *d = &self->answers.http;
	char line[256];
	uint64_t id = 0;
	long long fid;

	open_hook(_metadata, self, 0);
	q.flow = 5;
	ASSERT_EQ(0, hook__ask_http(self->hook, &self->f, &q, &cookie1,
				    now_ms(), &id));
	ASSERT_EQ(0, fakehook__accept(&self->fh));
	question_id(_metadata, &self->fh);
	snprintf(line, sizeof(line),
		 "{\"id\": %llu, \"flow\": 6, \"verdict\": \"grant\"}\n",
		 (unsigned long long)id);
	ASSERT_EQ(0, fakehook__send(&self->fh, line));
	ASSERT_TRUE(run_until(self->hook, &self->answers, 1));
	EXPECT_EQ(NET_VERDICT_DENY, d->verdict);
	EXPECT_STREQ(HOOK_INVALID, d->reason);
	EXPECT_STREQ("flow not the question's", self->answers.a[0].detail);

	ASSERT_EQ(0, hook__ask_http(self->hook, &self->f, &q, &cookie2,
				    now_ms(), &id));
	question_id(_metadata, &self->fh);
	snprintf(line, sizeof(line),
		 "{\"id\": %llu, \"flow\": 5, \"verdict\": \"grant-http\", "
		 "\"set\": {\"x-agent-policy\": \"allowed\"}}\n",
		 (unsigned long long)id);
	ASSERT_EQ(0, fakehook__send(&self->fh, line));
	ASSERT_TRUE(run_until(self->hook, &self->answers, 2));
	EXPECT_EQ(NET_VERDICT_ALLOW, d->verdict);
	ASSERT_EQ(1, d->nr_headers);
	EXPECT_STREQ("x-agent-policy", d->buf + d->headers[0].name);

	ask(_metadata, self, self->fh.path, LONG_MS, &cookie3);
	fid = question_id(_metadata, &self->fh);
	snprintf(line, sizeof(line),
		 "{\"id\": %lld, \"flow\": %lld, \"verdict\": \"grant\"}\n",
		 fid, fid);
	ASSERT_EQ(0, fakehook__send(&self->fh, line));
	ASSERT_TRUE(run_until(self->hook, &self->answers, 3));
	EXPECT_EQ(NET_VERDICT_DENY, self->answers.a[2].verdict);
	EXPECT_STREQ(HOOK_INVALID, self->answers.a[2].reason);
}

TEST_F(hk, unknown_and_cancelled_ids_ignored)
{
	struct hook_stats s;
	long long id1, id2;
	uint64_t qid1;

	open_hook(_metadata, self, 0);
	qid1 = ask(_metadata, self, self->fh.path, LONG_MS, &cookie1);
	ask(_metadata, self, self->fh.path, LONG_MS, &cookie2);
	ASSERT_EQ(0, fakehook__accept(&self->fh));
	id1 = question_id(_metadata, &self->fh);
	id2 = question_id(_metadata, &self->fh);
	EXPECT_EQ((long long)qid1, id1);
	hook__cancel(self->hook, qid1);
	hook__cancel(self->hook, qid1); /* twice: nothing more */
	ASSERT_EQ(0, fakehook__answer(&self->fh, 999999, "grant", NULL));
	ASSERT_EQ(0, fakehook__answer(&self->fh, id1, "grant", NULL));
	ASSERT_EQ(0, fakehook__answer(&self->fh, id2, "deny", NULL));
	ASSERT_TRUE(run_until(self->hook, &self->answers, 1));
	EXPECT_EQ(&cookie2, self->answers.a[0].cookie);
	EXPECT_STREQ(HOOK_DENY, self->answers.a[0].reason);
	hook__stats(self->hook, &s);
	EXPECT_EQ(2, s.ignored);
	EXPECT_EQ(1, s.answers);
	EXPECT_EQ(0, s.pending);
	EXPECT_EQ(1, self->answers.n);
}

TEST_F(hk, too_many_questions_busy)
{
	struct net_ask a = ask_for(self->fh.path, LONG_MS);
	struct hook_stats s;
	uint64_t id;
	int ret;

	open_hook(_metadata, self, 2);
	ask(_metadata, self, self->fh.path, LONG_MS, &cookie1);
	ask(_metadata, self, self->fh.path, LONG_MS, &cookie2);
	ret = hook__ask(self->hook, &self->f, &a, &cookie3, now_ms(), &id);
	EXPECT_EQ(-EBUSY, ret);
	EXPECT_STREQ(HOOK_BUSY, hook__failure(ret));
	hook__stats(self->hook, &s);
	EXPECT_EQ(2, s.questions);
	EXPECT_EQ(2, s.pending);
	EXPECT_EQ(1, s.failures);
}

/*
 * Another socket (a replaced policy's hook): the old connection's
 * questions are denied "hook changed", the new socket gets the new
 * question, and the generation says it is another hook.
 */
TEST_F(hk, another_socket_changes_the_hook)
{
	struct fakehook other;
	uint64_t gen;
	long long id;

	ASSERT_EQ(0, fakehook__init(&other, true));
	open_hook(_metadata, self, 0);
	EXPECT_FALSE(hook__is_target(self->hook, self->fh.path));
	ask(_metadata, self, self->fh.path, LONG_MS, &cookie1);
	gen = hook__generation(self->hook);
	EXPECT_NE(0, gen);
	EXPECT_TRUE(hook__is_target(self->hook, self->fh.path));

	ask(_metadata, self, other.path, LONG_MS, &cookie2);
	EXPECT_TRUE(hook__is_target(self->hook, other.path));
	EXPECT_FALSE(hook__is_target(self->hook, self->fh.path));
	EXPECT_NE(gen, hook__generation(self->hook));
	EXPECT_EQ(0, hook__timeout(self->hook, now_ms()));
	ASSERT_TRUE(run_until(self->hook, &self->answers, 1));
	EXPECT_EQ(&cookie1, self->answers.a[0].cookie);
	EXPECT_STREQ(HOOK_CHANGED, self->answers.a[0].reason);

	ASSERT_EQ(0, fakehook__accept(&other));
	id = question_id(_metadata, &other);
	ASSERT_EQ(0, fakehook__answer(&other, id, "grant", NULL));
	ASSERT_TRUE(run_until(self->hook, &self->answers, 2));
	EXPECT_EQ(&cookie2, self->answers.a[1].cookie);
	EXPECT_STREQ(HOOK_GRANT, self->answers.a[1].reason);
	fakehook__close(&other);
}

/*
 * A request's question on the same connection as the flows': answered
 * grant-http with a field (given to the callback as it was sent), then
 * denied (403), then timed out (403, "hook timeout").
 */
TEST_F(hk, http_request_answered_denied_timed_out)
{
	struct hook_http_question q =
		http_question(self->fh.path, LONG_MS, NULL);
	char line[FAKEHOOK_LINE_MAX];
	struct net_http_decision *d = &self->answers.http;
	uint64_t id = 0;
	long long qid;
	json_t *o;

	open_hook(_metadata, self, 0);
	ASSERT_EQ(0, hook__ask_http(self->hook, &self->f, &q, &cookie1,
				    now_ms(), &id));
	ASSERT_EQ(0, fakehook__accept(&self->fh));
	ASSERT_LT(0, fakehook__read_line(&self->fh, line, sizeof(line)));
	o = json_loads(line, 0, NULL);
	ASSERT_NE(NULL, o) TH_LOG("%s", line);
	EXPECT_STREQ("http", json_string_value(json_object_get(o, "type")));
	qid = json_integer_value(json_object_get(o, "id"));
	json_decref(o);
	EXPECT_EQ((long long)id, qid);
	ASSERT_EQ(0, fakehook__send(&self->fh,
				    "{\"id\": 1, \"verdict\": \"grant-http\", "
				    "\"set\": {\"authorization\": \"Bearer "
				    "hook-token\"}}\n"));
	ASSERT_TRUE(run_until(self->hook, &self->answers, 1));
	EXPECT_EQ(&cookie1, self->answers.a[0].cookie);
	EXPECT_EQ(id, self->answers.http_id);
	EXPECT_EQ(NET_VERDICT_ALLOW, d->verdict);
	EXPECT_STREQ(HOOK_GRANT, d->reason);
	ASSERT_EQ(1, d->nr_headers);
	EXPECT_STREQ("authorization", d->buf + d->headers[0].name);
	EXPECT_STREQ("Bearer hook-token", d->buf + d->headers[0].value);

	ASSERT_EQ(0, hook__ask_http(self->hook, &self->f, &q, &cookie2,
				    now_ms(), &id));
	ASSERT_EQ(0,
		  fakehook__answer(&self->fh, question_id(_metadata, &self->fh),
				   "deny", "not this one"));
	ASSERT_TRUE(run_until(self->hook, &self->answers, 2));
	EXPECT_EQ(NET_VERDICT_DENY, d->verdict);
	EXPECT_EQ(403, d->status);
	EXPECT_STREQ(HOOK_DENY, d->reason);
	EXPECT_STREQ("not this one", self->answers.a[1].detail);
	EXPECT_EQ(0, d->nr_headers);

	q.timeout_ms = SHORT_MS;
	ASSERT_EQ(0, hook__ask_http(self->hook, &self->f, &q, &cookie3,
				    now_ms(), &id));
	question_id(_metadata, &self->fh);
	ASSERT_TRUE(run_until(self->hook, &self->answers, 3));
	EXPECT_EQ(&cookie3, self->answers.a[2].cookie);
	EXPECT_EQ(NET_VERDICT_DENY, d->verdict);
	EXPECT_EQ(403, d->status);
	EXPECT_STREQ(HOOK_TIMEOUT, d->reason);
}

TEST_HARNESS_MAIN
