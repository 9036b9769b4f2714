// SPDX-License-Identifier: GPL-2.0
/*
 * Fresh entropy for a VM restored from a snapshot: its readiness probe,
 * once greeted, sends the monitor's seed (RESEED, proto/agent.h), and
 * the agent counts as ready only when it answered. Every VM restored
 * from one snapshot starts with the same kernel CRNG state; this is what
 * parts them (Documentation/snapshots.md, "Fresh entropy").
 */
#include <errno.h>
#include <string.h>

#include "lib/log.h"
#include "proto/reseed.h"
#include "vmm/api/api-internal.h"

#define API_RESEED_RETRY_ERR (-EAGAIN) /* the probe's retry after ERROR */

static void reseed_done(struct api *api)
{
	api->reseed_pending = false;
	/* The seed is the guest's secret now: no copy stays here. */
	explicit_bzero(api->reseed, sizeof(api->reseed));
}

void reseed_start(struct call *k, uint64_t features)
{
	struct api *api = k->api;
	struct kiln_buf b;
	int ret;

	if (!(features & KILN_FEATURE_RESEED)) {
		/*
		 * An agent from before RESEED (it answers an unknown
		 * message with ERROR): nothing to wait for. Said once.
		 */
		pr_warn("guest agent: no RESEED in its features (0x%llx): "
			"this restored VM keeps the snapshot's CRNG state "
			"until its kernel reseeds",
			(unsigned long long)features);
		reseed_done(api);
		agent_gate_next(k);
		return;
	}
	kiln_buf__init(&b);
	ret = kiln_reseed__encode(&b, api->reseed, sizeof(api->reseed));
	if (!ret && api->has_net && (features & KILN_FEATURE_NET_RENEW))
		ret = kiln_reseed__encode_net(&b, api->net_mac, api->net);
	else if (!ret && api->has_net && !api->net_warned) {
		pr_warn("guest agent: no NET_RENEW in its features (0x%llx): "
			"this restored VM's eth0 keeps the snapshot's MAC",
			(unsigned long long)features);
		api->net_warned = true;
	}
	if (ret) {
		/* Only -ENOMEM: the values are within the bounds. */
		kiln_buf__free(&b);
		agent_retry(k, ret, api_now_ms());
		return;
	}
	k->st = AG_ACTIVE;
	agent_send(k, KILN_MSG_RESEED, 0, b.data, b.len);
	explicit_bzero(b.data, b.len);
	kiln_buf__free(&b);
}

/* ERROR: say it once, try again on the next probe (the gate stays). */
static void reseed_refused(struct call *k, const uint8_t *p, size_t len)
{
	struct api *api = k->api;
	struct kiln_tlv_iter it;
	const uint8_t *val;
	uint64_t value = EIO;
	uint32_t vlen;
	uint16_t tag;

	kiln_tlv__iter(&it, p, len);
	while (kiln_tlv__next(&it, &tag, &val, &vlen) == 1)
		if (tag == KILN_T_ERRNO)
			kiln_tlv__u64(val, vlen, &value);
	if (!api->reseed_warned)
		pr_warn("guest agent: RESEED refused: %s (%s); the agent is "
			"not ready until it takes it, trying again",
			kiln_errno__name((int)value), strerror((int)value));
	api->reseed_warned = true;
	agent_retry(k, API_RESEED_RETRY_ERR, api_now_ms());
}

void reseed_frame(struct call *k, uint16_t type, uint16_t flags,
		  const uint8_t *p, size_t len)
{
	struct api *api = k->api;

	if (type == KILN_MSG_ERROR) {
		reseed_refused(k, p, len);
		return;
	}
	if (type != KILN_MSG_RESULT) {
		/* The probe must not end: the VM would never be ready. */
		pr_warn("guest agent: message %u in answer to RESEED", type);
		agent_retry(k, -EPROTO, api_now_ms());
		return;
	}
	pr_info("guest agent: reseeded the restored VM's CRNG with %u bytes "
		"from the host%s",
		(unsigned int)sizeof(api->reseed),
		api->has_net && !api->net_warned ?
			"; eth0 has this VM's MAC and network" :
			"");
	reseed_done(api);
	agent_gate_next(k);
}
