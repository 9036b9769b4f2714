// SPDX-License-Identifier: GPL-2.0
/*
 * fuzz tls_sni - the peek at a guest's TLS ClientHello for its server
 * name (tls__hello_sni, net/tls-conn.c), on any first record of a
 * connection. Checked for every input: one of the documented results,
 * and a name it returns is normalized (net_hostname__normalize gives it
 * back unchanged) and fits NET_HOSTNAME_MAX.
 */
#include <errno.h>

#include "net/policy.h"
#include "net/tls.h"
#include "selftests/fuzz/fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char sni[NET_HOSTNAME_MAX + 1], again[NET_HOSTNAME_MAX + 1];
	bool wildcard;
	int ret;

	fuzz__quiet();
	if (size > TLS_RECORD_MAX)
		size = TLS_RECORD_MAX;
	ret = tls__hello_sni(data, size, sni);
	fuzz_check(ret == 0 || ret == -EAGAIN || ret == -ENOENT ||
		   ret == -EACCES || ret == -EPROTO);
	if (ret)
		return 0;
	fuzz_check(memchr(sni, '\0', sizeof(sni)));
	fuzz_check(!net_hostname__normalize(sni, again, false, &wildcard));
	fuzz_check(!strcmp(sni, again) && !wildcard);
	return 0;
}
