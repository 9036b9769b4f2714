/* SPDX-License-Identifier: GPL-2.0 */
#ifndef KILN_AGENT_FACTS_H
#define KILN_AGENT_FACTS_H

#include "guest/agent/conn.h"

/*
 * FACTS: what the guest observes about itself, as {topic, relation,
 * value} triples (the vocabulary is in Documentation/agent-protocol.md).
 */
void facts__handle(struct conn *c, const struct frame *req);

#endif
