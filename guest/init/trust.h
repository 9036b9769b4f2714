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
 * (a read-only root works the same). A root with no bundle cannot trust
 * the CA: the VM ends rather than run a workload whose HTTPS would fail
 * in confusing ways.
 */
#define INIT_TRUST_CA_FILE    "/" KILN_INITRAMFS_CA
#define INIT_TRUST_BUNDLE     "/etc/ssl/certs/ca-certificates.crt"
#define INIT_TRUST_RUN	      "/run/kiln/ca-certificates.crt"
#define INIT_TRUST_CA_MAX     (16U << 10) /* one certificate, generously */
#define INIT_TRUST_BUNDLE_MAX (8U << 20)  /* Debian's is about 200 KiB */

struct init_trust {
	char *pem; /* NULL: no interception, nothing to install */
	size_t len;
};

/*
 * Reads INIT_TRUST_CA_FILE (from path, for tests) while the initramfs is
 * the root. 0 with t->pem NULL when there is none; -errno, said once on
 * stderr, for one that cannot be read or is not a PEM certificate.
 */
int init_trust__load(struct init_trust *t, const char *path);
/*
 * Binds bundle + the CA over bundle (INIT_TRUST_BUNDLE), through run
 * (INIT_TRUST_RUN; its directory is made). 0 with nothing to do; -ENOENT
 * when the root has no bundle; -errno otherwise; each said once.
 */
int init_trust__install(const struct init_trust *t, const char *bundle,
			const char *run);
void init_trust__free(struct init_trust *t);

#endif
