// SPDX-License-Identifier: GPL-2.0
/*
 * The VM's virtio-fs mounts on the readiness probe (api.h, mounts_plan):
 * a baseline's capture has the agent detach them (MOUNTS_DETACH), the
 * monitor snapshots a VM with no FUSE session open, and the agent
 * attaches them again (MOUNTS_ATTACH); a restore has them attached after
 * the reseed. Only then is the agent ready (Documentation/snapshots.md,
 * "Baselines").
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "lib/log.h"
#include "vmm/api/api-internal.h"

#define MOUNTS_WHY_LEN	 256
#define MOUNTS_GUEST_MSG 160 /* bytes of the agent's message we repeat */

static const char *step_name(const struct api *api)
{
	return api->mounts_step == MOUNTS_DETACH ? "MOUNTS_DETACH" :
						   "MOUNTS_ATTACH";
}

/* The request's time starts now; it holds across reconnections. */
static void arm_deadline(struct call *k)
{
	struct api *api = k->api;

	api->mounts_deadline = api_now_ms() + api->agent_timeout_ms;
	k->deadline = api->mounts_deadline;
}

/*
 * The request failed. A detach that failed may have unmounted some of
 * them: nothing is captured, and the attach puts them all back. An
 * attach that failed leaves the VM without its mounts: never ready.
 */
static void step_failed(struct call *k, int err, const char *why)
{
	struct api *api = k->api;

	k->deadline = 0;
	if (api->mounts_step == MOUNTS_DETACH) {
		if (api->p.capture)
			api->p.capture(api->p.opaque, err, why);
		api->mounts_step = MOUNTS_ATTACH;
		arm_deadline(k);
		agent_reopen(k);
		return;
	}
	api->mounts_step = MOUNTS_FAILED;
	if (api->p.mounts_failed)
		api->p.mounts_failed(api->p.opaque, why);
	call_done(k);
}

void mounts_start(struct call *k, uint64_t features)
{
	struct api *api = k->api;
	char why[MOUNTS_WHY_LEN];

	if (!(features & KILN_FEATURE_MOUNTS)) {
		snprintf(why, sizeof(why),
			 "the guest agent cannot detach or attach mounts (no "
			 "MOUNTS in its features, 0x%llx)",
			 (unsigned long long)features);
		if (api->mounts_step != MOUNTS_DETACH) {
			step_failed(k, -EOPNOTSUPP, why);
			return;
		}
		/* Nothing was detached: no capture, nothing to attach. */
		if (api->p.capture)
			api->p.capture(api->p.opaque, -EOPNOTSUPP, why);
		api->mounts_step = MOUNTS_READY;
		agent_gate_next(k);
		return;
	}
	if (!k->deadline)
		arm_deadline(k);
	k->st = AG_ACTIVE;
	agent_send(k,
		   api->mounts_step == MOUNTS_DETACH ? KILN_MSG_MOUNTS_DETACH :
						       KILN_MSG_MOUNTS_ATTACH,
		   0, api->mounts, api->p.mounts_len);
}

/* ERROR's errno and message, the message's bytes made printable. */
static int guest_error(const uint8_t *p, size_t len, char *msg, size_t room)
{
	struct kiln_tlv_iter it;
	const uint8_t *val;
	uint64_t value = EIO;
	uint32_t vlen;
	uint16_t tag;
	size_t n = 0;

	msg[0] = '\0';
	kiln_tlv__iter(&it, p, len);
	while (kiln_tlv__next(&it, &tag, &val, &vlen) == 1) {
		if (tag == KILN_T_ERRNO)
			kiln_tlv__u64(val, vlen, &value);
		if (tag != KILN_T_MESSAGE)
			continue;
		for (n = 0; n < vlen && n < MOUNTS_GUEST_MSG && n + 1 < room;
		     n++)
			msg[n] = val[n] >= ' ' && val[n] <= '~' ? (char)val[n] :
								  '?';
		msg[n] = '\0';
	}
	return value && value < INT32_MAX ? (int)value : EIO;
}

void mounts_frame(struct call *k, uint16_t type, uint16_t flags,
		  const uint8_t *p, size_t len)
{
	struct api *api = k->api;
	char why[MOUNTS_WHY_LEN], msg[MOUNTS_GUEST_MSG + 1];
	int err;

	if (type == KILN_MSG_ERROR) {
		err = guest_error(p, len, msg, sizeof(msg));
		snprintf(why, sizeof(why), "%s refused: %s (%s)",
			 step_name(api), kiln_errno__name(err), msg);
		step_failed(k, -err, why);
		return;
	}
	if (type != KILN_MSG_RESULT) {
		snprintf(why, sizeof(why), "message %u in answer to %s", type,
			 step_name(api));
		step_failed(k, -EPROTO, why);
		return;
	}
	k->deadline = 0;
	if (api->mounts_step == MOUNTS_DETACH) {
		/* No FUSE session is open: the snapshot holds no mount. */
		if (api->p.capture)
			api->p.capture(api->p.opaque, 0, NULL);
		api->mounts_step = MOUNTS_ATTACH;
		arm_deadline(k);
		agent_reopen(k);
		return;
	}
	pr_info("guest agent: the mounts are attached");
	api->mounts_step = MOUNTS_READY;
	agent_gate_next(k);
}

void mounts_timeout(struct call *k)
{
	struct api *api = k->api;
	char why[MOUNTS_WHY_LEN];

	snprintf(why, sizeof(why), "no answer to %s within %u ms",
		 step_name(api), api->agent_timeout_ms);
	step_failed(k, -ETIMEDOUT, why);
}
