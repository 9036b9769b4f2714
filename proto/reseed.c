// SPDX-License-Identifier: GPL-2.0
/* RESEED and HELLO's feature bits (see reseed.h). */
#include <errno.h>
#include <string.h>

#include "proto/reseed.h"

static bool seed_len_ok(size_t len)
{
	return len >= KILN_RESEED_MIN && len <= KILN_RESEED_MAX;
}

int kiln_reseed__encode(struct kiln_buf *b, const void *seed, size_t len)
{
	if (!seed_len_ok(len))
		return -EINVAL;
	return kiln_tlv__put_bytes(b, KILN_T_SEED, seed, len);
}

int kiln_reseed__decode(const void *payload, size_t len, const uint8_t **seed,
			size_t *seed_len)
{
	struct kiln_tlv_iter it;
	const uint8_t *val, *found = NULL;
	unsigned int seen = 0;
	uint32_t vlen, flen = 0;
	uint16_t tag;
	int ret;

	kiln_tlv__iter(&it, payload, len);
	while ((ret = kiln_tlv__next(&it, &tag, &val, &vlen)) == 1) {
		if (tag != KILN_T_SEED)
			continue;
		seen++;
		found = val;
		flen = vlen;
	}
	if (ret < 0)
		return ret;
	if (seen != 1 || !seed_len_ok(flen))
		return -EINVAL;
	*seed = found;
	*seed_len = flen;
	return 0;
}

int kiln_reseed__encode_net(struct kiln_buf *b,
			    const uint8_t mac[KILN_NET_MAC_LEN],
			    const char *net)
{
	size_t n = strlen(net);
	int ret;

	if (!n || n > KILN_NET_MAX)
		return -EINVAL;
	ret = kiln_tlv__put_bytes(b, KILN_T_NET_MAC, mac, KILN_NET_MAC_LEN);
	return ret ? ret : kiln_tlv__put_bytes(b, KILN_T_NET, net, n);
}

int kiln_reseed__decode_net(const void *payload, size_t len,
			    const uint8_t **mac, const char **net,
			    size_t *net_len)
{
	const uint8_t *val, *m = NULL, *t = NULL;
	unsigned int nm = 0, nt = 0;
	struct kiln_tlv_iter it;
	uint32_t vlen, mlen = 0, tlen = 0;
	uint16_t tag;
	int ret;

	kiln_tlv__iter(&it, payload, len);
	while ((ret = kiln_tlv__next(&it, &tag, &val, &vlen)) == 1) {
		if (tag == KILN_T_NET_MAC) {
			nm++;
			m = val;
			mlen = vlen;
		} else if (tag == KILN_T_NET) {
			nt++;
			t = val;
			tlen = vlen;
		}
	}
	if (ret < 0)
		return ret;
	if (!nm && !nt)
		return -ENOENT;
	if (nm != 1 || nt != 1 || mlen != KILN_NET_MAC_LEN || !tlen ||
	    tlen > KILN_NET_MAX)
		return -EINVAL;
	*mac = m;
	*net = (const char *)t;
	*net_len = tlen;
	return 0;
}

int kiln_hello__decode(const void *payload, size_t len, uint64_t *version,
		       uint64_t *features)
{
	struct kiln_tlv_iter it;
	const uint8_t *val;
	uint32_t vlen;
	uint16_t tag;
	int ret;

	*version = 0;
	*features = 0;
	kiln_tlv__iter(&it, payload, len);
	while ((ret = kiln_tlv__next(&it, &tag, &val, &vlen)) == 1) {
		if (tag == KILN_T_VERSION)
			ret = kiln_tlv__u64(val, vlen, version);
		else if (tag == KILN_T_FEATURES)
			ret = kiln_tlv__u64(val, vlen, features);
		if (ret < 0)
			return ret;
	}
	return ret;
}
