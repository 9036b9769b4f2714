/* SPDX-License-Identifier: GPL-2.0 */
#ifndef KILN_FACTS_H
#define KILN_FACTS_H

#include <jansson.h>
#include <stddef.h>

#include "lib/compiler.h"
#include "vmm/config.h"
#include "vmm/rootfs.h"

/*
 * A VM's configuration facts: what its settings say about the environment
 * the guest will have, as the seed's environmentFacts() triples
 * {"source": "config", "topic", "relation", "value"}, every value a
 * string. One implementation for both paths: vm.facts on a running VM
 * (vmm/control.c) and `vmm facts` without one (vmm/main.c), so the two
 * agree for the same configuration. The vocabulary: Documentation/api.md,
 * "Facts".
 */

/*
 * The facts of c, which config__validate has accepted (its defaults are
 * filled in); img is the root image's descriptor as loaded (NULL: no root
 * disk). The image builder's NAME.facts.json next to the descriptor
 * follows Kiln's own. A new array; NULL when out of memory.
 */
json_t *facts__config(const struct vm_config *c,
		      const struct rootfs_image *img);

/*
 * The same without a VM: loads the descriptor itself (rootfs__load: the
 * file is read, the image is not hashed) and never opens /dev/kvm. err
 * receives one line on failure.
 */
int __must_check facts__config_offline(const struct vm_config *c, json_t **out,
				       char *err, size_t len);

#endif
