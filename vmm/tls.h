/* SPDX-License-Identifier: GPL-2.0 */
#ifndef KILN_VMM_TLS_H
#define KILN_VMM_TLS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "lib/compiler.h"

/*
 * TLS interception's building blocks (Documentation/network.md, "TLS
 * interception: the CA and the connections"), on wolfSSL:
 *
 *	tls_ca__create(&ca, &cap, err, len);   the VM's CA: fresh or loaded
 *	tls_ca__cert_pem(ca, &pem, &n);        what the guest trusts
 *	tls_ca__leaf(ca, host, &der, &n);      a certificate for host
 *	tls_ca__destroy(ca);
 *
 * Nothing here locks: a CA is used by one thread at a time (the proxy's).
 */

/* A generated CA is valid from now - TLS_BACKDATE_S for this many days. */
#define TLS_CA_DAYS	365U
#define TLS_CA_MAX_DAYS 3650U /* what tls_ca_params.days may ask for */
/* A leaf, from now - TLS_BACKDATE_S: shorter than the CA. */
#define TLS_LEAF_DAYS 30U
/* Certificates start an hour in the past: a guest clock a little behind. */
#define TLS_BACKDATE_S 3600U
/* A cached leaf with less than this left is minted again. */
#define TLS_LEAF_RENEW_S (24U * 3600U)
/* Leaves kept per CA; the least recently used goes first. */
#define TLS_LEAF_CACHE_MAX 256U
/* The CA certificate written out (cert_out): anyone may read it. */
#define TLS_CA_CERT_MODE 0644
/* A PEM file read in (key, certificate): larger is refused. */
#define TLS_PEM_MAX (64U << 10)

struct tls_ca;

struct tls_ca_params {
	/*
	 * Both NULL: a fresh CA for this VM (an ECDSA P-256 key that never
	 * leaves the vmm's memory). Both set: the orchestrator's CA, PEM
	 * files: an EC private key (SEC 1 or PKCS #8, unencrypted) that
	 * group and others may not read, and its CA certificate.
	 */
	const char *key_path;
	const char *cert_path;
	/* NULL, or where to write the CA certificate (PEM, TLS_CA_CERT_MODE). */
	const char *cert_out;
	/* A generated CA's validity; 0: TLS_CA_DAYS; else over TLS_LEAF_DAYS. */
	unsigned int days;
};

/*
 * The CA, and one leaf key (ECDSA P-256) for every leaf it mints. 0, or
 * -errno with "what: why" in err (-EPERM: a key file others may read;
 * -EINVAL: files that are not a CA and its EC key).
 */
int __must_check tls_ca__create(struct tls_ca **out,
				const struct tls_ca_params *p, char *err,
				size_t len);
/* NULL and half-built are fine. */
void tls_ca__destroy(struct tls_ca *ca);
/* The CA certificate, PEM, terminated; valid while ca lives. */
void tls_ca__cert_pem(const struct tls_ca *ca, const char **pem, size_t *len);
/* The CA certificate, DER; valid while ca lives. */
void tls_ca__cert_der(const struct tls_ca *ca, const uint8_t **der,
		      size_t *len);
/*
 * The leaf certificate (DER) for host, a DNS name (not an address; at
 * most 253 bytes): from the cache, or minted and cached. *der stays
 * valid until the next tls_ca__leaf() or tls_ca__destroy(). 0; -EINVAL
 * for a host that is not a DNS name; -ENOMEM or -EIO from wolfSSL.
 */
int __must_check tls_ca__leaf(struct tls_ca *ca, const char *host,
			      const uint8_t **der, size_t *len);
/* Leaves minted since create (cache misses), for the tests and stats. */
uint64_t tls_ca__minted(const struct tls_ca *ca);

#endif
