/* SPDX-License-Identifier: GPL-2.0 */
#ifndef KILN_NETCFG_H
#define KILN_NETCFG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "lib/compiler.h"
#include "net/addr.h"

/*
 * The VM's network (--net, "net": Documentation/network.md): who makes
 * the tap and the guest's IPv4 settings. This module owns the settings:
 * their text forms, their checks and defaults, the kernel command line
 * the guest init reads them from (kiln.net=) and their names in reports.
 * Building the tap and its namespace is net/netns.c's.
 */

enum net_mode {
	NET_NONE,   /* no network device */
	NET_AUTO,   /* a namespace of the vmm's own with the tap kiln0 */
	NET_NETNS,  /* the tap kiln0 in the namespace at netns_path */
	NET_TAP_FD, /* the orchestrator's tap, already open as tap_fd */
};

#define NET_DEFAULT_MTU 1500U
#define NET_MIN_MTU	68U    /* the least IPv4 needs (RFC 791) */
#define NET_MAX_MTU	65535U /* a tap's limit, and virtio-net's */
#define NET_MIN_PREFIX	1U
#define NET_MAX_PREFIX	30U /* room for the guest and the gateway */
#define NET_MIN_TAP_FD	3U  /* 0-2: stdin, stdout, stderr */
#define NET_MAX_TAP_FD	0x7fffffffU
#define NET_TAP_NAME	"kiln0" /* the tap in auto and netns modes */
/* kiln.net=ADDRESS/PREFIX,GATEWAY,MTU,DNS */
#define NET_CMDLINE_MAX 64U

struct net_policy; /* net/policy.h */

/* All addresses in network byte order, as in struct in_addr. */
struct net_config {
	enum net_mode mode;
	char *netns_path; /* NET_NETNS: a network namespace file */
	uint64_t tap_fd;  /* NET_TAP_FD: NET_MIN_TAP_FD..NET_MAX_TAP_FD */
	bool tap_fd_set;
	uint32_t address;    /* the guest's (eth0) */
	unsigned int prefix; /* bits, NET_MIN_PREFIX..NET_MAX_PREFIX */
	uint32_t gateway;    /* the tap's host side in auto and netns modes */
	uint32_t dns;	     /* the guest's resolver (/etc/resolv.conf) */
	uint64_t mtu;	     /* bytes, both sides of the link */
	uint8_t mac[NET_MAC_LEN]; /* the guest's: unicast, nonzero */
	bool address_set, gateway_set, dns_set, mtu_set, mac_set;
	/* --net-policy, "net.policy"; NULL: deny every flow */
	struct net_policy *policy;
	/*
	 * --net-ca-bundle, "net.caBundle": the PEM certificates upstream
	 * servers of the http grants' TLS flows must chain to; NULL:
	 * TLS_DEFAULT_CA_BUNDLE (net/tls.h). Auto and netns modes only.
	 */
	char *ca_bundle;
	/*
	 * --net-intercept-ca, "net.interceptCa": the guest trusts the
	 * interception CA whatever the boot's policy (netcfg__guest_ca).
	 */
	bool intercept_ca;
	/*
	 * --net-relay, "net.relay": how granted TCP flows are relayed, an
	 * enum proxy_relay (net/proxy.h; netcfg__relays[] its names).
	 */
	unsigned int relay;
};

/* The modes' JSON names ("none", "auto", ...), NULL-terminated. */
extern const char *const netcfg__modes[];
const char *netcfg__mode_name(enum net_mode mode);
/* "splice", "auto", "kernel": enum proxy_relay's order; NULL-terminated. */
extern const char *const netcfg__relays[];

void netcfg__free(struct net_config *n);

/*
 * Whether the guest trusts the interception CA from boot
 * (Documentation/network.md, "The CA in the guest"): when asked
 * (intercept_ca), or when the boot's policy p can intercept, by its http
 * grants or by its hook's "grant-http" answers.
 */
bool netcfg__guest_ca(const struct net_config *n, const struct net_policy *p);
/*
 * Whether a root without a trust store must refuse to boot: the CA was
 * asked for (intercept_ca) or p's http grants intercept from the start.
 * A hook alone may never intercept: its CA is installed where there is a
 * trust store, and its absence is said, not fatal.
 */
bool netcfg__guest_ca_required(const struct net_config *n,
			       const struct net_policy *p);

/*
 * --net's argument: "auto", "netns:PATH", "tap-fd:N" or "none". Replaces
 * the mode and what went with the previous one (a path, an fd); err
 * receives "--net ARG: why".
 */
int __must_check netcfg__parse_arg(struct net_config *n, const char *arg,
				   char *err, size_t len);

/*
 * The settings against each other, and the defaults for what was not
 * given: 10.0.2.15/24, gateway 10.0.2.2, DNS the gateway, MTU 1500, a
 * random locally administered MAC (02:4b:4c:xx:xx:xx). err receives
 * "net ...: why" naming the option and key.
 */
int __must_check netcfg__validate(struct net_config *n, char *err, size_t len);

/*
 * kiln.net's value, "10.0.2.15/24,10.0.2.2,1500,10.0.2.2": what the
 * guest's init configures eth0 from, and its agent after a restore
 * (proto/agent.h, RESEED). -ENOSPC if buf is too short.
 */
int __must_check netcfg__guest_value(const struct net_config *n, char *buf,
				     size_t len);
/* " kiln.net=VALUE", "" without a network; -ENOSPC if too short. */
int __must_check netcfg__cmdline(const struct net_config *n, char *buf,
				 size_t len);

#endif
