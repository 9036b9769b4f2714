/* SPDX-License-Identifier: GPL-2.0 */
#ifndef KILN_AGENT_MOUNTS_H_
#define KILN_AGENT_MOUNTS_H_

#include <stdbool.h>

#include "guest/agent/conn.h"

/*
 * The host's virtio-fs mounts in the guest: mounting one (init at boot,
 * guest/init/mounts.c, and MOUNTS_ATTACH), and the MOUNTS_DETACH and
 * MOUNTS_ATTACH requests (proto/agent.h) the host sends around a
 * baseline's capture and after a restore.
 */

/*
 * Mount virtio-fs tag at path (nosuid, nodev, read-only if asked),
 * making path and its parents (0755) as needed: 0 or -errno.
 */
int mounts__attach_one(const char *tag, const char *path, bool read_only);

/*
 * MOUNTS_DETACH (children first; what is not mounted is skipped) or
 * MOUNTS_ATTACH (in order; a path that is a mount point already is left
 * as it is): RESULT, or ERROR with the first failure's errno and path.
 */
void mounts__handle(struct conn *c, const struct frame *req);

#endif
