// SPDX-License-Identifier: GPL-2.0
/*
 * The vmm linked with libc's archive (Kbuild.mk, STATIC_LIBS=1): a
 * static libc resolves names through NSS modules it would dlopen at run
 * time, which is why the linker warns about every getaddrinfo() in the
 * link. The vmm resolves no host names itself (the VM's resolver,
 * net/dns*.c, forwards DNS messages), and the one caller, wolfSSL's wolfIO_TcpConnect (OCSP and CRL
 * fetches, which the vmm does not turn on), is bound here instead
 * (-Wl,--wrap=getaddrinfo,--wrap=freeaddrinfo: libc's freeaddrinfo
 * lives in the object of its getaddrinfo): it fails, and libc's resolver
 * and NSS stay out of the binary.
 */
#include <netdb.h>
#include <stddef.h>

int __wrap_getaddrinfo(const char *node, const char *service,
		       const struct addrinfo *hints, struct addrinfo **res);

int __wrap_getaddrinfo(const char *node, const char *service,
		       const struct addrinfo *hints, struct addrinfo **res)
{
	*res = NULL;
	return EAI_FAIL;
}

void __wrap_freeaddrinfo(struct addrinfo *res);

/* Nothing to free: the getaddrinfo above hands out nothing. */
void __wrap_freeaddrinfo(struct addrinfo *res)
{
}
