// SPDX-License-Identifier: GPL-2.0
/*
 * The SYN filter's content (synmap.h) into the egress program's map,
 * through its loader. Links libbpf, so apart from the builder.
 */
#include <errno.h>
#include <string.h>

#include "ebpf/loader.h"
#include "lib/errf.h"
#include "net/synmap.h"

int net_synmap__apply(const struct net_synmap *m, struct egress *e, char *err,
		      size_t errlen)
{
	int ret;

	/* Off while it is refilled: every SYN to the proxy meanwhile. */
	ret = egress__syn_clear(e, err, errlen);
	if (ret || m->open)
		return ret;
	for (unsigned int i = 0; i < m->nr; i++) {
		ret = egress__syn_put(e, &m->e[i].key, &m->e[i].ports, err,
				      errlen);
		if (ret)
			return ret;
	}
	egress__syn_check(e, true);
	return 0;
}

int net_synmap__bind(struct egress *e, uint32_t addr,
		     const struct egress_syn_ports *ports, char *err,
		     size_t errlen)
{
	struct egress_syn_key key = { .prefixlen = EGRESS_SYN_ADDR_BITS,
				      .addr = addr };
	struct egress_syn_ports v = { 0 };
	int ret;

	if (!ports->nr)
		return 0;
	/* What a shorter prefix holding addr lets through stays so. */
	ret = egress__syn_get(e, addr, &v);
	if (ret == -ENOENT) {
		ret = 0;
	} else if (ret) {
		egress__syn_check(e, false);
		return errf(err, errlen, ret, "egress: SYN grants: %s",
			    strerror(-ret));
	}
	net_synmap__union(&v, ports);
	ret = egress__syn_put(e, &key, &v, err, errlen);
	if (ret)
		egress__syn_check(e, false);
	return ret;
}
