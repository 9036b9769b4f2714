// SPDX-License-Identifier: GPL-2.0
/* MOUNTS_DETACH and MOUNTS_ATTACH's list (see mounts.h). */
#include <errno.h>
#include <string.h>

#include "proto/agent.h"
#include "proto/mounts.h"

static bool field_ok(const void *p, size_t len, size_t max)
{
	return len && len <= max && !memchr(p, '\0', len);
}

static bool mount_ok(const struct kiln_mount *m)
{
	size_t path_len = strnlen(m->path, KILN_MOUNT_PATH_MAX);

	return field_ok(m->tag, strnlen(m->tag, KILN_MOUNT_TAG_MAX + 1),
			KILN_MOUNT_TAG_MAX) &&
	       path_len < KILN_MOUNT_PATH_MAX && m->path[0] == '/';
}

int kiln_mounts__encode(struct kiln_buf *b, const struct kiln_mount *m,
			unsigned int nr)
{
	size_t mark;
	int ret;

	if (nr > KILN_MOUNTS_MAX)
		return -EINVAL;
	for (unsigned int i = 0; i < nr; i++) {
		if (!mount_ok(&m[i]))
			return -EINVAL;
		ret = kiln_tlv__begin(b, KILN_T_MOUNT, &mark);
		if (!ret)
			ret = kiln_tlv__put_str(b, KILN_T_TAG, m[i].tag);
		if (!ret)
			ret = kiln_tlv__put_str(b, KILN_T_PATH, m[i].path);
		if (!ret)
			ret = kiln_tlv__put_u64(b, KILN_T_READ_ONLY,
						m[i].read_only);
		if (ret)
			return ret;
		kiln_tlv__end(b, mark);
	}
	return 0;
}

/* A string field into dst (room bytes with its NUL): false if bad. */
static bool take_str(char *dst, size_t room, const uint8_t *val, uint32_t len,
		     bool *seen)
{
	if (*seen || !field_ok(val, len, room - 1))
		return false;
	memcpy(dst, val, len);
	dst[len] = '\0';
	*seen = true;
	return true;
}

/* One T_MOUNT's nested list. */
static int decode_one(const uint8_t *p, uint32_t len, struct kiln_mount *m)
{
	bool has_tag = false, has_path = false, ok = true;
	struct kiln_tlv_iter it;
	const uint8_t *val;
	uint64_t ro = 0;
	uint32_t vlen;
	uint16_t tag;
	int ret;

	memset(m, 0, sizeof(*m));
	kiln_tlv__iter(&it, p, len);
	while (ok && (ret = kiln_tlv__next(&it, &tag, &val, &vlen)) == 1) {
		if (tag == KILN_T_TAG)
			ok = take_str(m->tag, sizeof(m->tag), val, vlen,
				      &has_tag);
		else if (tag == KILN_T_PATH)
			ok = take_str(m->path, sizeof(m->path), val, vlen,
				      &has_path);
		else if (tag == KILN_T_READ_ONLY)
			ok = !kiln_tlv__u64(val, vlen, &ro) && ro <= 1;
	}
	if (!ok)
		return -EINVAL;
	if (ret < 0)
		return ret;
	if (!has_tag || !has_path || m->path[0] != '/')
		return -EINVAL;
	m->read_only = ro;
	return 0;
}

int kiln_mounts__decode(const void *payload, size_t len,
			struct kiln_mounts *out)
{
	struct kiln_tlv_iter it;
	const uint8_t *val;
	uint32_t vlen;
	uint16_t tag;
	int ret;

	out->nr = 0;
	kiln_tlv__iter(&it, payload, len);
	while ((ret = kiln_tlv__next(&it, &tag, &val, &vlen)) == 1) {
		if (tag != KILN_T_MOUNT)
			continue;
		if (out->nr == KILN_MOUNTS_MAX)
			return -EINVAL;
		ret = decode_one(val, vlen, &out->m[out->nr]);
		if (ret)
			return ret;
		out->nr++;
	}
	return ret;
}
