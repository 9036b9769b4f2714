/* SPDX-License-Identifier: GPL-2.0 */
#ifndef KILN_NET_ADDR_H
#define KILN_NET_ADDR_H

#include <stdint.h>

#include "lib/compiler.h"

/* All addresses in network byte order, as in struct in_addr. */
#define NET_MAC_LEN	6U
#define NET_ADDR_STRLEN 16U /* "255.255.255.255" */
#define NET_CIDR_STRLEN 19U /* "255.255.255.255/32" */
#define NET_MAC_STRLEN	18U /* "02:4b:4c:00:00:00" */

/* "A.B.C.D", four decimal parts; -EINVAL otherwise. */
int __must_check net_addr__parse_ipv4(const char *s, uint32_t *addr);
/* "A.B.C.D/N" (N 0..32); -EINVAL otherwise. */
int __must_check net_addr__parse_cidr(const char *s, uint32_t *addr,
				      unsigned int *prefix);
/* "xx:xx:xx:xx:xx:xx", hex; -EINVAL otherwise. */
int __must_check net_addr__parse_mac(const char *s, uint8_t mac[NET_MAC_LEN]);
void net_addr__format_ipv4(uint32_t addr, char buf[NET_ADDR_STRLEN]);
void net_addr__format_mac(const uint8_t mac[NET_MAC_LEN],
			  char buf[NET_MAC_STRLEN]);

#endif
