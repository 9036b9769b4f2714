/* SPDX-License-Identifier: GPL-2.0 */
#ifndef KILN_GUEST_INIT_TRUST_H
#define KILN_GUEST_INIT_TRUST_H

#include <stddef.h>

#include "proto/initramfs.h"

/*
 * The host's interception CA in the guest's trust store
 * (Documentation/network.md, "The CA in the guest"). When the host
 * intercepts HTTPS for this VM it puts its CA certificate (PEM, never its
 * key) in the initramfs as INIT_TRUST_CA_FILE. Before anything runs, the
 * init binds a copy of the root's bundle with the CA appended over the
 * bundle: curl, Python's ssl and anything else reading the system bundle
 * then trust the host's leaves, while the image itself is not written
 * (a read-only root works the same). The bundle's directory is also
 * OpenSSL's hashed directory (-CApath /etc/ssl/certs): with the CA comes
 * its subject hash (INIT_TRUST_HASH_FILE, computed by the host), and the
 * init lays an overlay whose upper layer is in /run over that directory
 * and writes the CA there as HASH.N, N the first suffix free. A root
 * with no bundle cannot trust the CA: the VM ends rather than run a
 * workload whose HTTPS would fail in confusing ways.
 */
#define INIT_TRUST_CA_FILE    "/" KILN_INITRAMFS_CA
#define INIT_TRUST_HASH_FILE  "/" KILN_INITRAMFS_CA_HASH
#define INIT_TRUST_BUNDLE     "/etc/ssl/certs/ca-certificates.crt"
#define INIT_TRUST_RUN	      "/run/kiln/ca-certificates.crt"
#define INIT_TRUST_CA_MAX     (16U << 10) /* one certificate, generously */
#define INIT_TRUST_BUNDLE_MAX (8U << 20)  /* Debian's is about 200 KiB */
/* HASH.0 to HASH.9: OpenSSL stops at the first suffix missing. */
#define INIT_TRUST_HASH_SUFFIXES 10U

struct init_trust {
	char *pem; /* NULL: no interception, nothing to install */
	size_t len;
	/* KILN_CA_HASH_LEN lowercase hex digits; "": no hashed entry */
	char hash[KILN_CA_HASH_LEN + 1];
};

/*
 * Reads INIT_TRUST_CA_FILE and INIT_TRUST_HASH_FILE (from path and
 * hash_path, for tests) while the initramfs is the root. 0 with t->pem
 * NULL when there is no CA, with t->hash "" when there is no hash; -errno,
 * said once on stderr, for one that cannot be read, a CA that is not a
 * PEM certificate, a hash that is not KILN_CA_HASH_LEN hex digits.
 */
int init_trust__load(struct init_trust *t, const char *path,
		     const char *hash_path);
/*
 * Binds bundle + the CA over bundle (INIT_TRUST_BUNDLE), through run
 * (INIT_TRUST_RUN; its directory is made); with a hash, overlays the
 * bundle's directory (upper layer and work directory beside run) and
 * writes the CA there as HASH.N. 0 with nothing to do; -ENOENT when the
 * root has no bundle; -ENOSPC when HASH.0 to HASH.9 are all taken;
 * -errno otherwise; each said once.
 */
int init_trust__install(const struct init_trust *t, const char *bundle,
			const char *run);
void init_trust__free(struct init_trust *t);

#endif
