// SPDX-License-Identifier: GPL-2.0
/*
 * fuzz agent_tlv - the agent protocol's framing (proto/tlv.c,
 * Documentation/agent-protocol.md), which the vmm and the guest's init
 * both link: a frame header, then its payload walked field by field,
 * into the nested lists (T_ENTRY, T_FACT), and built again from what
 * the walk read.
 *
 * Checked for every input: a header that unpacks says at most
 * KILN_FRAME_MAX; every field the walk gives lies inside the payload and
 * the fields tile it up to where the walk stopped (the end, or -EPROTO
 * for a partial field); a u64 reads only from 8 bytes; the payload built
 * again from the fields walks to the same fields; an errno name maps
 * back to its value.
 */
#include <errno.h>

#include "proto/tlv.h"
#include "selftests/fuzz/fuzz.h"

#define MAX_FIELDS 512
#define NEST_MAX   2 /* T_ENTRY in a RESULT, nothing deeper */

struct field {
	uint16_t tag;
	const uint8_t *val;
	uint32_t len;
};

static bool nested(uint16_t tag)
{
	return tag == KILN_T_ENTRY || tag == KILN_T_FACT;
}

/* The payload's fields into f (at most max); how many, -EPROTO kept. */
static int walk(const uint8_t *p, size_t len, struct field *f, unsigned int max,
		unsigned int depth, unsigned int *nr)
{
	struct kiln_tlv_iter it;
	const uint8_t *val;
	uint64_t v;
	uint32_t vlen;
	uint16_t tag;
	int ret;

	kiln_tlv__iter(&it, p, len);
	while ((ret = kiln_tlv__next(&it, &tag, &val, &vlen)) == 1) {
		fuzz_check(val >= p && vlen <= len &&
			   (size_t)(val - p) <= len - vlen);
		fuzz_check(it.p == val + vlen);
		if (kiln_tlv__u64(val, vlen, &v) == 0)
			fuzz_check(vlen == sizeof(v));
		if (*nr < max)
			f[(*nr)++] = (struct field){ tag, val, vlen };
		if (nested(tag) && depth < NEST_MAX)
			(void)walk(val, vlen, f, max, depth + 1, nr);
	}
	fuzz_check(ret == 0 || ret == -EPROTO);
	fuzz_check(ret != 0 || it.left == 0);
	return ret;
}

/* The top-level fields built again; their walk must give them back. */
static void rebuild(const uint8_t *p, size_t len)
{
	struct kiln_tlv_iter it, again;
	const uint8_t *val, *val2;
	uint32_t vlen, vlen2;
	uint16_t tag, tag2;
	struct kiln_buf b;

	kiln_buf__init(&b);
	kiln_tlv__iter(&it, p, len);
	while (kiln_tlv__next(&it, &tag, &val, &vlen) == 1)
		if (kiln_tlv__put_bytes(&b, tag, val, vlen))
			goto out;
	kiln_tlv__iter(&it, p, len);
	kiln_tlv__iter(&again, b.data, b.len);
	while (kiln_tlv__next(&again, &tag2, &val2, &vlen2) == 1) {
		fuzz_check(kiln_tlv__next(&it, &tag, &val, &vlen) == 1);
		fuzz_check(tag == tag2 && vlen == vlen2);
		fuzz_check(!vlen || !memcmp(val, val2, vlen));
	}
out:
	kiln_buf__free(&b);
}

static void errno_name(const uint8_t *p, size_t len)
{
	const char *name;
	int v = kiln_errno__value((const char *)p, len);

	name = kiln_errno__name(v);
	fuzz_check(name && *name);
	fuzz_check(kiln_errno__value(name, strlen(name)) == v);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static struct field fields[MAX_FIELDS];
	struct kiln_frame fr;
	uint16_t type, flags;
	unsigned int nr = 0;
	uint32_t len;

	if (size >= sizeof(fr)) {
		memcpy(&fr, data, sizeof(fr));
		if (!kiln_frame__unpack(&fr, &type, &flags, &len))
			fuzz_check(len <= KILN_FRAME_MAX);
		data += sizeof(fr);
		size -= sizeof(fr);
	}
	(void)walk(data, size, fields, MAX_FIELDS, 0, &nr);
	rebuild(data, size);
	for (unsigned int i = 0; i < nr; i++)
		if (fields[i].tag == KILN_T_ERRNAME)
			errno_name(fields[i].val, fields[i].len);
	return 0;
}
