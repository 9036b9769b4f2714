// SPDX-License-Identifier: GPL-2.0
/*
 * vm.status's "net" object from the proxy's and the egress program's
 * counters (status.h). Every field is in Documentation/api.md.
 */
#include "ebpf/loader.h"
#include "net/status.h"

static json_t *flows_json(uint64_t allowed, uint64_t denied, uint64_t open,
			  uint64_t cut)
{
	return json_pack("{s:I, s:I, s:I, s:I}", "allowed", (json_int_t)allowed,
			 "denied", (json_int_t)denied, "open", (json_int_t)open,
			 "cut", (json_int_t)cut);
}

static json_t *reasons_json(const struct proxy_stats *s)
{
	json_t *a = json_array(), *r;

	for (unsigned int i = 0; a && i < s->nr_reasons; i++) {
		const struct proxy_reason_count *c = &s->reasons[i];

		r = json_pack("{s:s, s:s, s:s, s:I}", "proto",
			      c->proto == IPPROTO_TCP ? "tcp" : "udp",
			      "verdict", proxy__verdict_name(c->verdict),
			      "reason", c->reason, "flows",
			      (json_int_t)c->flows);
		if (r)
			json_array_append_new(a, r);
	}
	return a;
}

/* The intercepted flows' requests: counts, and by verdict and reason. */
static json_t *http_json(const struct proxy_stats *s)
{
	json_t *a = json_array(), *r;

	for (unsigned int i = 0; a && i < s->nr_http_reasons; i++) {
		const struct proxy_reason_count *c = &s->http_reasons[i];

		r = json_pack("{s:s, s:s, s:I}", "verdict",
			      proxy__verdict_name(c->verdict), "reason",
			      c->reason, "requests", (json_int_t)c->flows);
		if (r)
			json_array_append_new(a, r);
	}
	return json_pack("{s:I, s:I, s:I, s:o}", "flows",
			 (json_int_t)s->tcp_intercepted, "allowed",
			 (json_int_t)s->http_allowed, "refused",
			 (json_int_t)s->http_refused, "reasons", a);
}

static json_t *hook_json(const struct hook_stats *h)
{
	return json_pack(
		"{s:I, s:I, s:I, s:I, s:I, s:I, s:I}", "questions",
		(json_int_t)h->questions, "answers", (json_int_t)h->answers,
		"timeouts", (json_int_t)h->timeouts, "ignored",
		(json_int_t)h->ignored, "failures", (json_int_t)h->failures,
		"connects", (json_int_t)h->connects, "pending",
		(json_int_t)h->pending);
}

static json_t *egress_json(const uint64_t egress[EGRESS_NR_REASONS])
{
	json_t *o = json_object();

	for (int i = 0; o && i < EGRESS_NR_REASONS; i++)
		json_object_set_new(o, egress__reason_name(i),
				    json_integer((json_int_t)egress[i]));
	return o;
}

/*
 * How granted TCP flows are relayed: "kernel", "split" or "splice" (new flows),
 * the open ones by each, the spliced directions reading in batches now,
 * and why not the kernel when it could not load.
 */
static json_t *relay_json(const struct proxy_stats *s)
{
	json_t *o;

	o = json_pack("{s:s, s:I, s:I, s:I}", "mode",
		      proxy__relay_name(s->relay_mode), "kernel",
		      (json_int_t)s->tcp_kernel, "splice",
		      (json_int_t)s->tcp_splice, "batched",
		      (json_int_t)s->relay_batched);
	if (o && s->relay_error[0])
		json_object_set_new(o, "error", json_string(s->relay_error));
	return o;
}

json_t *net_status__none(void)
{
	return json_pack("{s:s}", "proxy", "none");
}

json_t *net_status__json(const struct proxy_stats *s,
			 const uint64_t egress[EGRESS_NR_REASONS],
			 const char *egress_err)
{
	json_t *o;

	o = json_pack("{s:s, s:o, s:o, s:I, s:I, s:I, s:I, s:o, s:o}", "proxy",
		      s->running ? "running" : "stopped", "tcp",
		      flows_json(s->tcp_allowed, s->tcp_denied, s->tcp_open,
				 s->tcp_cut),
		      "udp",
		      flows_json(s->udp_allowed, s->udp_denied, s->udp_open,
				 s->udp_cut),
		      "bytesOut", (json_int_t)s->bytes_out, "bytesIn",
		      (json_int_t)s->bytes_in, "upstreamFailed",
		      (json_int_t)s->upstream_failed, "udpDropped",
		      (json_int_t)s->udp_dropped, "reasons", reasons_json(s),
		      "hook", hook_json(&s->hook));
	if (!o)
		return NULL;
	json_object_set_new(o, "http", http_json(s));
	json_object_set_new(o, "relay", relay_json(s));
	if (egress)
		json_object_set_new(o, "egress", egress_json(egress));
	else
		json_object_set_new(o, "egressError",
				    json_string(egress_err ? egress_err : "?"));
	return o;
}
