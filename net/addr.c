// SPDX-License-Identifier: GPL-2.0
/*
 * IPv4 addresses, prefixes and MAC addresses as text (addr.h): what the
 * network settings (netcfg.c) and the policy (policy-parse.c) both read.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "lib/parse.h"
#include "net/addr.h"

int net_addr__parse_ipv4(const char *s, uint32_t *addr)
{
	struct in_addr a;

	/* inet_pton takes exactly four decimal parts, no octal, no hex. */
	if (!s || inet_pton(AF_INET, s, &a) != 1)
		return -EINVAL;
	*addr = a.s_addr;
	return 0;
}

int net_addr__parse_cidr(const char *s, uint32_t *addr, unsigned int *prefix)
{
	char ip[NET_ADDR_STRLEN];
	const char *slash;
	uint64_t bits;

	slash = s ? strchr(s, '/') : NULL;
	if (!slash || (size_t)(slash - s) >= sizeof(ip))
		return -EINVAL;
	memcpy(ip, s, slash - s);
	ip[slash - s] = '\0';
	if (net_addr__parse_ipv4(ip, addr) ||
	    parse__uint(slash + 1, 32, &bits) || strlen(slash + 1) > 2)
		return -EINVAL;
	*prefix = bits;
	return 0;
}

static int hex_digit(char c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	if (c >= 'A' && c <= 'F')
		return c - 'A' + 10;
	return -1;
}

int net_addr__parse_mac(const char *s, uint8_t mac[NET_MAC_LEN])
{
	uint8_t out[NET_MAC_LEN];
	int hi, lo;

	if (!s || strlen(s) != NET_MAC_STRLEN - 1)
		return -EINVAL;
	for (unsigned int i = 0; i < NET_MAC_LEN; i++, s += 3) {
		hi = hex_digit(s[0]);
		lo = hex_digit(s[1]);
		if (hi < 0 || lo < 0 || (i + 1 < NET_MAC_LEN && s[2] != ':'))
			return -EINVAL;
		out[i] = hi << 4 | lo;
	}
	memcpy(mac, out, sizeof(out));
	return 0;
}

void net_addr__format_ipv4(uint32_t addr, char buf[NET_ADDR_STRLEN])
{
	struct in_addr a = { .s_addr = addr };

	if (!inet_ntop(AF_INET, &a, buf, NET_ADDR_STRLEN))
		snprintf(buf, NET_ADDR_STRLEN, "?");
}

void net_addr__format_mac(const uint8_t mac[NET_MAC_LEN],
			  char buf[NET_MAC_STRLEN])
{
	snprintf(buf, NET_MAC_STRLEN, "%02x:%02x:%02x:%02x:%02x:%02x", mac[0],
		 mac[1], mac[2], mac[3], mac[4], mac[5]);
}
