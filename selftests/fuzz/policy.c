// SPDX-License-Identifier: GPL-2.0
/*
 * fuzz policy - the network policy's JSON (net/policy-parse.c,
 * Documentation/network.md), then decisions (net/policy.c) under a
 * policy that parsed: new flows to a bound name, a public, a private and
 * the gateway's address, TCP and UDP, and HTTP requests naming the bound
 * name, another name and an address.
 *
 * Checked for every input: a policy that does not parse says why, under
 * its path; a decision is one of the verdicts with its reason; the
 * gateway and loopback are never allowed; an HTTP decision's fields lie
 * inside its buffer.
 */
#include <arpa/inet.h>
#include <jansson.h>
#include <netinet/in.h>

#include "lib/compiler.h"
#include "net/flow.h"
#include "net/policy.h"
#include "selftests/fuzz/fuzz.h"

#define PATH	"net.policy"
#define BOUND	"api.example.com"
#define BOUND_A "192.0.2.10"
#define GATEWAY "10.0.2.1"
#define TTL_S	300

static uint64_t fixed_clock(void *opaque)
{
	return 1000;
}

static void check_decision(const struct net_decision *d)
{
	fuzz_check(d->verdict <= NET_VERDICT_HTTP);
	fuzz_check(memchr(d->reason, '\0', sizeof(d->reason)) && d->reason[0]);
	if (d->verdict == NET_VERDICT_ASK)
		fuzz_check(d->ask.nr_hostnames <= NET_ASK_MAX_HOSTNAMES);
}

static void check_http(const struct net_http_decision *d)
{
	fuzz_check(d->verdict == NET_VERDICT_ALLOW ||
		   d->verdict == NET_VERDICT_DENY ||
		   d->verdict == NET_VERDICT_ASK);
	fuzz_check(memchr(d->reason, '\0', sizeof(d->reason)));
	if (d->verdict == NET_VERDICT_DENY) {
		fuzz_check(d->status == 403 || d->status == 421);
		return;
	}
	fuzz_check(d->nr_headers <= NET_HTTP_MAX_HEADERS);
	for (unsigned int i = 0; i < d->nr_headers; i++) {
		fuzz_check(d->headers[i].name < sizeof(d->buf));
		fuzz_check(d->headers[i].value < sizeof(d->buf));
		fuzz_check(memchr(d->buf + d->headers[i].name, '\0',
				  sizeof(d->buf) - d->headers[i].name));
		fuzz_check(memchr(d->buf + d->headers[i].value, '\0',
				  sizeof(d->buf) - d->headers[i].value));
	}
}

static void decide_all(const struct net_policy *p, const struct net_bindings *b)
{
	static const char *const dsts[] = { BOUND_A, "203.0.113.7", "10.1.2.3",
					    GATEWAY, "127.0.0.1" };
	static const uint16_t ports[] = { 443, 80, 53, 0 };
	static const char *const hosts[] = { BOUND, "other.example.org",
					     "192.0.2.10", "" };
	static const uint8_t protos[] = { IPPROTO_TCP, IPPROTO_UDP };
	struct net_http_decision *hd = malloc(sizeof(*hd));
	struct net_flow f = { 0 };
	struct net_decision d;

	if (!hd)
		return;
	f.src.sin_family = AF_INET;
	f.src.sin_addr.s_addr = inet_addr("10.0.2.15");
	f.src.sin_port = htons(40000);
	f.dst.sin_family = AF_INET;
	for (size_t i = 0; i < ARRAY_SIZE(dsts); i++) {
		f.dst.sin_addr.s_addr = inet_addr(dsts[i]);
		for (size_t j = 0; j < ARRAY_SIZE(ports); j++) {
			f.dst.sin_port = htons(ports[j]);
			for (size_t k = 0; k < ARRAY_SIZE(protos); k++) {
				f.proto = protos[k];
				net_policy__decide(p, &f, b, &d);
				check_decision(&d);
				if (i >= 3 || !ports[j])
					fuzz_check(d.verdict !=
						   NET_VERDICT_ALLOW);
				if (f.proto != IPPROTO_TCP)
					continue;
				for (size_t h = 0; h < ARRAY_SIZE(hosts); h++) {
					/* The inputs: a static grant's flow. */
					hd->hook_flow = 0;
					hd->hook_flow_each = false;
					hd->hook_host[0] = '\0';
					net_policy__decide_http(p, &f, hosts[h],
								h == 1, b, hd);
					check_http(hd);
				}
			}
		}
	}
	free(hd);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct net_bindings *b;
	struct net_policy *p = NULL;
	json_error_t jerr;
	char err[256] = "";
	json_t *obj;

	fuzz__quiet();
	obj = json_loadb((const char *)data, size, JSON_DECODE_ANY, &jerr);
	if (!obj)
		return 0;
	if (net_policy__parse(obj, PATH, &p, err, sizeof(err))) {
		fuzz_check(!p);
		fuzz_check(!strncmp(err, PATH, strlen(PATH)));
		json_decref(obj);
		return 0;
	}
	fuzz_check(p);
	net_policy__set_gateway(p, inet_addr(GATEWAY));
	b = net_bindings__create(fixed_clock, NULL);
	if (b && !net_bindings__insert(b, BOUND, inet_addr(BOUND_A), TTL_S))
		decide_all(p, b);
	net_bindings__destroy(b);
	net_policy__free(p);
	json_decref(obj);
	return 0;
}
