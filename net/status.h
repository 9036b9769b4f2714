/* SPDX-License-Identifier: GPL-2.0 */
#ifndef KILN_NET_STATUS_H
#define KILN_NET_STATUS_H

#include <jansson.h>
#include <stdint.h>

#include "ebpf/egress.h"
#include "net/proxy.h"

/*
 * vm.status's "net" object (Documentation/api.md, "vm.status"): the
 * egress proxy's counters and the egress program's, as JSON. Kept apart
 * from the monitor so that the API tests build the same object.
 */

/* No proxy (no network, or the orchestrator's tap): {"proxy": "none"}. */
json_t *net_status__none(void);
/*
 * s: the proxy's counters; egress: the program's frame counters, or NULL
 * with egress_err saying why they could not be read. NULL on -ENOMEM.
 */
json_t *net_status__json(const struct proxy_stats *s,
			 const uint64_t egress[EGRESS_NR_REASONS],
			 const char *egress_err);

#endif
