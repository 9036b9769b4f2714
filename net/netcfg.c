// SPDX-License-Identifier: GPL-2.0
/*
 * The VM's network settings (netcfg.h): parsed from --net and "net",
 * checked against each other, defaults filled in, and written into the
 * kernel command line for the guest init.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>

#include "lib/compiler.h"
#include "lib/errf.h"
#include "lib/parse.h"
#include "net/netcfg.h"
#include "net/policy.h"

/* QEMU's user network, which guests and people already know. */
#define NET_DEFAULT_ADDRESS "10.0.2.15"
#define NET_DEFAULT_PREFIX  24U
#define NET_DEFAULT_GATEWAY "10.0.2.2"
/*
 * The default MAC: locally administered (bit 1 of the first byte),
 * unicast (bit 0 clear), then "KL", then three random bytes per VM.
 */
static const uint8_t mac_prefix[] = { 0x02, 0x4b, 0x4c };

const char *const netcfg__modes[] = {
	[NET_NONE] = "none",
	[NET_AUTO] = "auto",
	[NET_NETNS] = "netns",
	[NET_TAP_FD] = "tap-fd",
	NULL,
};

const char *const netcfg__relays[] = { "splice", "auto", "kernel", "split",
				       NULL };

const char *netcfg__mode_name(enum net_mode mode)
{
	if ((size_t)mode < ARRAY_SIZE(netcfg__modes) - 1)
		return netcfg__modes[mode];
	return "?";
}

void netcfg__free(struct net_config *n)
{
	free(n->netns_path);
	n->netns_path = NULL;
	free(n->ca_bundle);
	n->ca_bundle = NULL;
	net_policy__free(n->policy);
	n->policy = NULL;
}

int netcfg__parse_arg(struct net_config *n, const char *arg, char *err,
		      size_t len)
{
	static const char netns[] = "netns:", tap_fd[] = "tap-fd:";
	uint64_t fd;

	if (!strncmp(arg, netns, sizeof(netns) - 1)) {
		if (!arg[sizeof(netns) - 1])
			return errf(err, len, -EINVAL,
				    "--net %s: give the namespace's path: "
				    "netns:/path",
				    arg);
		free(n->netns_path);
		n->netns_path = strdup(arg + sizeof(netns) - 1);
		if (!n->netns_path)
			return -ENOMEM;
		n->mode = NET_NETNS;
		n->tap_fd_set = false;
		return 0;
	}
	if (!strncmp(arg, tap_fd, sizeof(tap_fd) - 1)) {
		if (parse__uint(arg + sizeof(tap_fd) - 1, NET_MAX_TAP_FD, &fd))
			return errf(err, len, -EINVAL,
				    "--net %s: give the tap's fd: tap-fd:N "
				    "(a decimal number)",
				    arg);
		n->mode = NET_TAP_FD;
		n->tap_fd = fd;
		n->tap_fd_set = true;
		free(n->netns_path);
		n->netns_path = NULL;
		return 0;
	}
	if (strcmp(arg, "auto") && strcmp(arg, "none"))
		return errf(err, len, -EINVAL,
			    "--net %s: must be auto, netns:/path, tap-fd:N or "
			    "none",
			    arg);
	n->mode = strcmp(arg, "auto") ? NET_NONE : NET_AUTO;
	n->tap_fd_set = false;
	free(n->netns_path);
	n->netns_path = NULL;
	return 0;
}

/* The mask of a prefix, host byte order. */
static uint32_t prefix_mask(unsigned int prefix)
{
	return prefix ? ~0U << (32 - prefix) : 0;
}

/* 0.0.0.0/8, 127.0.0.0/8, 224.0.0.0/4 and up: never a host's address. */
static bool is_host_address(uint32_t addr)
{
	uint32_t a = ntohl(addr);

	return (a >> 24) != 0 && (a >> 24) != 127 && a < 0xe0000000U;
}

/* A host of the guest's subnet: inside it, not its network or broadcast. */
static bool in_subnet(const struct net_config *n, uint32_t addr)
{
	uint32_t mask = prefix_mask(n->prefix), a = ntohl(addr);

	return (a & mask) == (ntohl(n->address) & mask) && (a & ~mask) &&
	       (a & ~mask) != ~mask;
}

static void random_mac(uint8_t mac[NET_MAC_LEN])
{
	uint8_t r[NET_MAC_LEN - sizeof(mac_prefix)];
	pid_t pid;

	/* No entropy yet (early boot): the pid still differs per VM. */
	if (getrandom(r, sizeof(r), GRND_NONBLOCK) != (ssize_t)sizeof(r)) {
		pid = getpid();
		memcpy(r, &pid, sizeof(r));
	}
	memcpy(mac, mac_prefix, sizeof(mac_prefix));
	memcpy(mac + sizeof(mac_prefix), r, sizeof(r));
}

static int validate_mode(const struct net_config *n, char *err, size_t len)
{
	const char *mode = netcfg__mode_name(n->mode);

	if (n->mode == NET_NETNS && !n->netns_path)
		return errf(err, len, -EINVAL,
			    "net mode netns needs the namespace's path "
			    "(--net netns:/path or \"net\": {\"netns\": ...})");
	if (n->mode != NET_NETNS && n->netns_path)
		return errf(err, len, -EINVAL,
			    "net namespace \"%s\": only for mode netns (mode "
			    "is %s)",
			    n->netns_path, mode);
	if (n->netns_path && !n->netns_path[0])
		return errf(err, len, -EINVAL, "net namespace: empty path");
	if (n->mode == NET_TAP_FD && !n->tap_fd_set)
		return errf(err, len, -EINVAL,
			    "net mode tap-fd needs the tap's fd (--net "
			    "tap-fd:N or \"net\": {\"tapFd\": N})");
	if (n->mode != NET_TAP_FD && n->tap_fd_set)
		return errf(err, len, -EINVAL,
			    "net tap fd %llu: only for mode tap-fd (mode is "
			    "%s)",
			    (unsigned long long)n->tap_fd, mode);
	if (n->ca_bundle && n->mode != NET_AUTO && n->mode != NET_NETNS)
		return errf(err, len, -EINVAL,
			    "net CA bundle \"%s\": only with an egress proxy "
			    "(mode auto or netns; mode is %s)",
			    n->ca_bundle, mode);
	if (n->intercept_ca && n->mode != NET_AUTO && n->mode != NET_NETNS)
		return errf(err, len, -EINVAL,
			    "net interceptCa: only with an egress proxy (mode "
			    "auto or netns; mode is %s)",
			    mode);
	if (n->ca_bundle && !n->ca_bundle[0])
		return errf(err, len, -EINVAL, "net CA bundle: empty path");
	if (n->tap_fd_set && n->tap_fd < NET_MIN_TAP_FD)
		return errf(err, len, -EINVAL,
			    "net tap fd %llu: must be %u or more (0-2 are "
			    "stdin, stdout and stderr)",
			    (unsigned long long)n->tap_fd, NET_MIN_TAP_FD);
	return 0;
}

static int validate_addresses(struct net_config *n, char *err, size_t len)
{
	char a[NET_ADDR_STRLEN], g[NET_ADDR_STRLEN];

	net_addr__format_ipv4(n->address, a);
	net_addr__format_ipv4(n->gateway, g);
	if (n->prefix < NET_MIN_PREFIX || n->prefix > NET_MAX_PREFIX)
		return errf(err, len, -EINVAL,
			    "net address %s/%u (--net-address, "
			    "\"net.address\"): the prefix must be %u to %u",
			    a, n->prefix, NET_MIN_PREFIX, NET_MAX_PREFIX);
	if (!is_host_address(n->address) || !in_subnet(n, n->address))
		return errf(err, len, -EINVAL,
			    "net address %s/%u (--net-address, "
			    "\"net.address\"): not a host address of its "
			    "subnet",
			    a, n->prefix);
	if (!in_subnet(n, n->gateway) || n->gateway == n->address)
		return errf(err, len, -EINVAL,
			    "net gateway %s%s (--net-gateway, "
			    "\"net.gateway\"): must be another host of the "
			    "guest's subnet %s/%u",
			    g, n->gateway_set ? "" : " (the default)", a,
			    n->prefix);
	if (!is_host_address(n->dns) && n->dns_set) {
		net_addr__format_ipv4(n->dns, a);
		return errf(err, len, -EINVAL,
			    "net DNS server %s (--net-dns, \"net.dns\"): not "
			    "a unicast address",
			    a);
	}
	return 0;
}

int netcfg__validate(struct net_config *n, char *err, size_t len)
{
	int ret;

	ret = validate_mode(n, err, len);
	if (ret)
		return ret;
	if (n->mode == NET_NONE) {
		if (n->address_set || n->gateway_set || n->dns_set ||
		    n->mtu_set || n->mac_set || n->policy)
			return errf(err, len, -EINVAL,
				    "net options given without a network "
				    "(--net MODE or \"net\": {\"mode\": ...})");
		return 0;
	}
	if (!n->address_set) {
		ret = net_addr__parse_ipv4(NET_DEFAULT_ADDRESS, &n->address);
		n->prefix = NET_DEFAULT_PREFIX;
	}
	if (!ret && !n->gateway_set)
		ret = net_addr__parse_ipv4(NET_DEFAULT_GATEWAY, &n->gateway);
	if (ret)
		return ret;
	if (!n->dns_set)
		n->dns = n->gateway;
	if (!n->mtu_set)
		n->mtu = NET_DEFAULT_MTU;
	if (n->mtu < NET_MIN_MTU || n->mtu > NET_MAX_MTU)
		return errf(err, len, -EINVAL,
			    "net MTU %llu (--net-mtu, \"net.mtu\"): must be "
			    "%u to %u",
			    (unsigned long long)n->mtu, NET_MIN_MTU,
			    NET_MAX_MTU);
	if (!n->mac_set)
		random_mac(n->mac);
	if ((n->mac[0] & 1) ||
	    !memcmp(n->mac, (uint8_t[NET_MAC_LEN]){ 0 }, NET_MAC_LEN)) {
		char m[NET_MAC_STRLEN];

		net_addr__format_mac(n->mac, m);
		return errf(err, len, -EINVAL,
			    "net MAC %s (--net-mac, \"net.mac\"): must be a "
			    "nonzero unicast address",
			    m);
	}
	ret = validate_addresses(n, err, len);
	if (ret)
		return ret;
	/* The tap's host side is never a destination, whatever it grants. */
	net_policy__set_gateway(n->policy, n->gateway);
	return 0;
}

int netcfg__guest_value(const struct net_config *n, char *buf, size_t len)
{
	char a[NET_ADDR_STRLEN], g[NET_ADDR_STRLEN], d[NET_ADDR_STRLEN];
	int m;

	if (len)
		buf[0] = '\0';
	net_addr__format_ipv4(n->address, a);
	net_addr__format_ipv4(n->gateway, g);
	net_addr__format_ipv4(n->dns, d);
	m = snprintf(buf, len, "%s/%u,%s,%llu,%s", a, n->prefix, g,
		     (unsigned long long)n->mtu, d);
	return m < 0 || (size_t)m >= len ? -ENOSPC : 0;
}

int netcfg__cmdline(const struct net_config *n, char *buf, size_t len)
{
	static const char key[] = " kiln.net=";

	if (len)
		buf[0] = '\0';
	if (n->mode == NET_NONE)
		return 0;
	if (len <= sizeof(key) - 1)
		return -ENOSPC;
	memcpy(buf, key, sizeof(key) - 1);
	return netcfg__guest_value(n, buf + sizeof(key) - 1,
				   len - (sizeof(key) - 1));
}

bool netcfg__guest_ca_required(const struct net_config *n,
			       const struct net_policy *p)
{
	return n->intercept_ca || net_policy__nr_http(p);
}

bool netcfg__guest_ca(const struct net_config *n, const struct net_policy *p)
{
	unsigned int timeout_ms;

	return n->intercept_ca || net_policy__nr_http(p) ||
	       net_policy__hook(p, &timeout_ms);
}
