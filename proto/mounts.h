/* SPDX-License-Identifier: GPL-2.0 */
#ifndef KILN_AGENT_MOUNTS_H
#define KILN_AGENT_MOUNTS_H

/*
 * The mounts list of MOUNTS_DETACH and MOUNTS_ATTACH (proto/agent.h),
 * written and read the same way on both sides: the vmm builds it from
 * its config, the guest agent reads it.
 */

#include <stdbool.h>
#include <stddef.h>

#include "proto/tlv.h"

#define KILN_MOUNTS_MAX	    16U	  /* T_MOUNT fields in one request */
#define KILN_MOUNT_TAG_MAX  36U	  /* virtio-fs config space's tag */
#define KILN_MOUNT_PATH_MAX 4096U /* bytes with the NUL (PATH_MAX) */

struct kiln_mount {
	char tag[KILN_MOUNT_TAG_MAX + 1];
	char path[KILN_MOUNT_PATH_MAX]; /* absolute */
	bool read_only;
};

struct kiln_mounts {
	unsigned int nr;
	struct kiln_mount m[KILN_MOUNTS_MAX];
};

/*
 * The payload into b: one T_MOUNT per mount, in order. -EINVAL for more
 * than KILN_MOUNTS_MAX or a mount that would not decode (below), else
 * kiln_tlv__put_*'s.
 */
int kiln_mounts__encode(struct kiln_buf *b, const struct kiln_mount *m,
			unsigned int nr);
/*
 * The mounts in a payload, into out: 0; -EPROTO when it does not parse;
 * -EINVAL for a T_MOUNT without exactly one T_TAG and one T_PATH, a tag
 * of 0 or more than KILN_MOUNT_TAG_MAX bytes, a path that is not
 * absolute or too long, a NUL in either, a T_READ_ONLY that is not 0 or
 * 1, or more than KILN_MOUNTS_MAX mounts. Other fields are ignored; no
 * mount at all is a valid, empty list.
 */
int kiln_mounts__decode(const void *payload, size_t len,
			struct kiln_mounts *out);

#endif
