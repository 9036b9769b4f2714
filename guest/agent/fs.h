/* SPDX-License-Identifier: GPL-2.0 */
#ifndef KILN_AGENT_FS_H
#define KILN_AGENT_FS_H

#include <stdbool.h>
#include <stdint.h>

#include "guest/agent/conn.h"

/* Is @type one of the FS_* requests (not FS_DATA)? */
bool fs__is_request(uint16_t type);
/* Serves one FS_* request (stat, readdir, read, write, ...) on @c. */
void fs__handle(struct conn *c, const struct frame *req);

#endif
