// SPDX-License-Identifier: GPL-2.0
/*
 * Configuration facts (vmm/facts.h): the VM's settings as affirmative
 * triples in the seed's vocabulary, "TOPIC is VALUE" for a setting,
 * "TOPIC exists VALUE" for each member of a set; topics are lower-case
 * words joined by '-' (the guest agent's facts use the same shape:
 * Documentation/agent-protocol.md, "Facts").
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "lib/errf.h"
#include "net/netcfg.h"
#include "vmm/facts.h"
#include "vmm/mounts.h"

/* Room for the longest "mount:PATH" topic. */
#define FACTS_TOPIC_MAX (sizeof("mount:") + MOUNTS_PATH_MAX)

static int add(json_t *facts, const char *topic, const char *relation,
	       const char *value)
{
	json_t *f =
		json_pack("{s:s, s:s, s:s, s:s}", "source", "config", "topic",
			  topic, "relation", relation, "value", value);

	if (!f || json_array_append_new(facts, f))
		return -ENOMEM;
	return 0;
}

static int add_u64(json_t *facts, const char *topic, uint64_t v)
{
	char s[24];

	snprintf(s, sizeof(s), "%" PRIu64, v);
	return add(facts, topic, "is", s);
}

static const char *mount_type_name(enum mount_type t)
{
	switch (t) {
	case MOUNT_BIND:
		return "bind";
	case MOUNT_MEMORY:
		return "memory";
	case MOUNT_VIRTUAL:
		return "virtual";
	}
	return "?";
}

/*
 * "mount exists PATH" per mount, then "mount:PATH is TYPE" and
 * "mount:PATH access ro|rw" (the guest's view, as in /kiln/mounts).
 */
static int mount_facts(const struct mounts_config *mc, json_t *facts)
{
	char topic[FACTS_TOPIC_MAX];
	const struct mount_config *m;
	unsigned int i;
	int ret = 0;

	for (i = 0; !ret && i < mc->nr; i++) {
		m = &mc->m[i];
		snprintf(topic, sizeof(topic), "mount:%s", m->guest_path);
		ret = add(facts, "mount", "exists", m->guest_path);
		if (!ret)
			ret = add(facts, topic, "is", mount_type_name(m->type));
		if (!ret)
			ret = add(facts, topic, "access",
				  m->type == MOUNT_BIND && m->read_only ? "ro" :
									  "rw");
	}
	return ret;
}

/*
 * Who decides what leaves the VM: "none" (no network device), "deny"
 * (no policy: every flow is refused), "policy" (--net-policy decides,
 * net.setPolicy may replace it), "external" (--net tap-fd:N: the
 * orchestrator owns the tap's host side).
 */
static const char *egress(const struct net_config *n)
{
	if (n->mode == NET_NONE)
		return "none";
	if (n->mode == NET_TAP_FD)
		return "external";
	return n->policy ? "policy" : "deny";
}

/*
 * The network as configured: egress, mode and what the guest is told.
 * A MAC is a fact only when given: a random one differs each boot.
 */
static int net_facts(const struct net_config *n, json_t *facts)
{
	char a[NET_ADDR_STRLEN], cidr[NET_CIDR_STRLEN], m[NET_MAC_STRLEN];
	int ret;

	ret = add(facts, "network-egress", "is", egress(n));
	if (ret || n->mode == NET_NONE)
		return ret;
	ret = add(facts, "network-mode", "is", netcfg__mode_name(n->mode));
	net_addr__format_ipv4(n->address, a);
	snprintf(cidr, sizeof(cidr), "%s/%u", a, n->prefix);
	if (!ret)
		ret = add(facts, "network-address", "is", cidr);
	net_addr__format_ipv4(n->gateway, a);
	if (!ret)
		ret = add(facts, "network-gateway", "is", a);
	net_addr__format_ipv4(n->dns, a);
	if (!ret)
		ret = add(facts, "network-dns", "is", a);
	if (!ret)
		ret = add_u64(facts, "network-mtu", n->mtu);
	net_addr__format_mac(n->mac, m);
	if (!ret && n->mac_set)
		ret = add(facts, "network-mac", "is", m);
	return ret;
}

static int rootfs_facts(const struct rootfs_config *r,
			const struct rootfs_image *img, json_t *facts)
{
	int ret;

	ret = add(facts, "rootfs-image", "is", img->name);
	if (!ret)
		ret = add(facts, "rootfs-digest", "is", img->digest);
	if (!ret)
		ret = add(facts, "rootfs-write-mode", "is",
			  config__rootfs_mode_name(r->mode));
	if (!ret && r->mode != ROOTFS_READONLY && r->max_dirty_bytes)
		ret = add_u64(facts, "rootfs-max-dirty-bytes",
			      r->max_dirty_bytes);
	return ret;
}

/*
 * The descriptor's own "facts" (checked by rootfs__load), after Kiln's:
 * one that says what Kiln said already ("rootfs-image is NAME") once.
 */
static int descriptor_facts(const json_t *image, json_t *facts)
{
	size_t i, j, n = json_array_size(facts);
	json_t *f;

	json_array_foreach(image, i, f)
	{
		for (j = 0; j < n; j++)
			if (json_equal(f, json_array_get(facts, j)))
				break;
		if (j == n && json_array_append(facts, f))
			return -ENOMEM;
	}
	return 0;
}

/* NAME.facts.json next to NAME.json, if the builder left one. */
static void image_facts(const char *descriptor, json_t *facts)
{
	size_t n = strlen(descriptor);
	char path[4096];
	json_t *image;

	if (n <= 5 || strcmp(descriptor + n - 5, ".json") ||
	    n + 7 >= sizeof(path))
		return;
	snprintf(path, sizeof(path), "%.*s.facts.json", (int)(n - 5),
		 descriptor);
	image = json_load_file(path, 0, NULL);
	if (json_is_array(image))
		json_array_extend(facts, image);
	json_decref(image);
}

json_t *facts__config(const struct vm_config *c, const struct rootfs_image *img)
{
	json_t *facts = json_array();
	int ret;

	if (!facts)
		return NULL;
	/* A namespace sandbox (vmm/isolate-ns.h) may have no kernel. */
	ret = c->kernel_path ? add(facts, "kernel-path", "is", c->kernel_path) :
			       0;
	if (!ret && c->isolation == ISOLATION_NAMESPACE)
		ret = add(facts, "isolation", "is", "namespace");
	if (!ret)
		ret = add_u64(facts, "cpu-count", c->nr_cpus);
	if (!ret)
		ret = add_u64(facts, "memory-mib", c->mem_mib);
	if (!ret && c->hostname)
		ret = add(facts, "hostname", "is", c->hostname);
	if (!ret && c->cwd)
		ret = add(facts, "cwd", "is", c->cwd);
	if (!ret && img)
		ret = rootfs_facts(&c->rootfs, img, facts);
	if (!ret)
		ret = mount_facts(&c->mounts, facts);
	if (!ret)
		ret = net_facts(&c->net, facts);
	if (!ret && img && img->facts)
		ret = descriptor_facts(img->facts, facts);
	if (ret) {
		json_decref(facts);
		return NULL;
	}
	if (img)
		image_facts(c->rootfs.descriptor, facts);
	return facts;
}

int facts__config_offline(const struct vm_config *c, json_t **out, char *err,
			  size_t len)
{
	struct rootfs_image img = { 0 };
	int ret = 0;

	if (c->rootfs.descriptor)
		ret = rootfs__load(&img, c->rootfs.descriptor, err, len);
	if (!ret) {
		*out = facts__config(c, c->rootfs.descriptor ? &img : NULL);
		if (!*out)
			ret = errf(err, len, -ENOMEM, "facts: %s",
				   strerror(ENOMEM));
	}
	rootfs__free(&img);
	return ret;
}
