/* SPDX-License-Identifier: GPL-2.0 */
#ifndef KILN_AGENT_RESEED_H
#define KILN_AGENT_RESEED_H

/*
 * The RESEED message (proto/agent.h) and the HELLO feature bits that
 * announce it, written and read the same way on both sides: the vmm
 * builds it and checks HELLO, the guest agent reads it.
 */

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "proto/tlv.h"

/*
 * RESEED's payload into b: one T_SEED of len bytes. -EINVAL when len is
 * outside KILN_RESEED_MIN..KILN_RESEED_MAX, else kiln_tlv__put_bytes's.
 */
int kiln_reseed__encode(struct kiln_buf *b, const void *seed, size_t len);
/*
 * The seed in a RESEED payload (pointing into it): 0, -EPROTO when the
 * payload does not parse, -EINVAL when there is no T_SEED, more than
 * one, or one of a length outside KILN_RESEED_MIN..KILN_RESEED_MAX.
 * Other fields are ignored (proto/agent.h).
 */
int kiln_reseed__decode(const void *payload, size_t len, const uint8_t **seed,
			size_t *seed_len);

/*
 * A restored VM's network into RESEED's payload b (after the seed):
 * T_NET_MAC, then T_NET (net is kiln.net's value, 1..KILN_NET_MAX
 * bytes). -EINVAL for a bad length, else kiln_tlv__put_bytes's.
 */
int kiln_reseed__encode_net(struct kiln_buf *b,
			    const uint8_t mac[KILN_NET_MAC_LEN],
			    const char *net);
/*
 * The network in a RESEED payload, pointing into it (net is not
 * terminated): 0; -ENOENT when it has neither field; -EPROTO when the
 * payload does not parse; -EINVAL for one without the other, either
 * twice, a MAC not of KILN_NET_MAC_LEN bytes or a T_NET outside
 * 1..KILN_NET_MAX bytes.
 */
int kiln_reseed__decode_net(const void *payload, size_t len,
			    const uint8_t **mac, const char **net,
			    size_t *net_len);

/*
 * HELLO's T_VERSION and T_FEATURES (0 when absent): 0, or -EPROTO when
 * the payload does not parse or either field is not a u64.
 */
int kiln_hello__decode(const void *payload, size_t len, uint64_t *version,
		       uint64_t *features);

#endif
