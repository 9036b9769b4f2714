/* SPDX-License-Identifier: GPL-2.0 */
#ifndef KILN_IDENTITY_H
#define KILN_IDENTITY_H

#include <stddef.h>

#include "lib/compiler.h"

/*
 * A boot's identity (Documentation/guest.md, "Hostname and working
 * directory"): the guest's hostname, which init sets before anything
 * runs, and the default working directory of the command and of the
 * agent's exec, spawn and pty when a request names none. Both reach init
 * in the archive appended to the initramfs (proto/initramfs.h).
 */

#define IDENTITY_DEFAULT_HOSTNAME "sandbox" /* as the seed's boot() */
#define IDENTITY_HOSTNAME_MAX	  64U	    /* bytes: Linux's HOST_NAME_MAX */
#define IDENTITY_LABEL_MAX	  63U	    /* bytes: RFC 1035, 2.3.4 */
#define IDENTITY_CWD_MAX	  4095U	    /* bytes: PATH_MAX less the NUL */

/*
 * An RFC 1123 host name: dot-separated labels of ASCII letters, digits
 * and '-', none empty, none starting or ending with '-', each at most
 * IDENTITY_LABEL_MAX bytes and all at most IDENTITY_HOSTNAME_MAX. err
 * receives "hostname \"NAME\": why"; -EINVAL (-ENAMETOOLONG for length).
 */
int __must_check identity__check_hostname(const char *name, char *err,
					  size_t len);
/*
 * A default working directory: absolute, at most IDENTITY_CWD_MAX
 * bytes, no "." or ".." component. err as above ("cwd \"PATH\": why").
 */
int __must_check identity__check_cwd(const char *path, char *err, size_t len);

#endif
