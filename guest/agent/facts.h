/* SPDX-License-Identifier: GPL-2.0 */
#ifndef KILN_AGENT_FACTS_H
#define KILN_AGENT_FACTS_H

#include "guest/agent/conn.h"

/*
 * FACTS: what the guest observes about itself, as {topic, relation,
 * value} triples (the vocabulary is in Documentation/agent-protocol.md).
 * @made_points: the mount points init made on a read-only root
 * (agent_config), NULL-terminated; NULL: none.
 */
void facts__handle(struct conn *c, const struct frame *req,
		   const char *const *made_points);

#endif
