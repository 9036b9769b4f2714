/* SPDX-License-Identifier: GPL-2.0 */
#ifndef KILN_VMM_GUEST_DEFAULT_H
#define KILN_VMM_GUEST_DEFAULT_H

/*
 * The default guest (Documentation/install.md, "The default guest"): the
 * kernel and initramfs `vmm run` boots when it is given no --kernel,
 * found in KILN_GUEST_DIR, else in the build tree the vmm runs from,
 * else where `make install` put it; each file checked against its sha256
 * pin in the same directory's pins.json before anything is built.
 */
#include <limits.h>
#include <stdbool.h>
#include <stddef.h>

#include "lib/compiler.h"
#include "lib/sha256.h"
#include "vmm/config.h"

#define GUEST_DEFAULT_KERNEL "vmlinux"
#define GUEST_DEFAULT_INITRD CONFIG_DEFAULT_INITRD
#define GUEST_DEFAULT_PINS   "pins.json"
/* In a directory, the file that makes it a build tree (Kbuild.mk's). */
#define GUEST_DEFAULT_TREE_MARK ".cflags"
/* "sha256:" and 64 hex digits, and the NUL. */
#define GUEST_DIGEST_LEN (7 + SHA256_HEX_LEN + 1)

enum guest_source {
	GUEST_FROM_ENV,	    /* $KILN_GUEST_DIR */
	GUEST_FROM_TREE,    /* <the vmm's directory>/guest */
	GUEST_FROM_INSTALL, /* $PREFIX/lib/kiln/guest, compiled in */
};

struct guest_default {
	char dir[PATH_MAX];
	enum guest_source source;
};

/* "KILN_GUEST_DIR", "build tree", "installed". */
const char *guest_default__source_name(enum guest_source s);

/*
 * The lookup, from its inputs: env_dir (KILN_GUEST_DIR's value; NULL or
 * empty: unset), exe_dir (the directory of the running vmm; NULL:
 * unknown), install_dir (the compiled-in one). The first that applies is
 * taken, and then it must hold pins.json: a KILN_GUEST_DIR or build tree
 * without one is an error naming it, never a fall-through to the next.
 * err receives one line on failure.
 */
int __must_check guest_default__find(struct guest_default *g,
				     const char *env_dir, const char *exe_dir,
				     const char *install_dir, char *err,
				     size_t len);

/*
 * dir/name against its pin in dir/pins.json. 0: it matches (pin and
 * actual, when not NULL, receive both digests); -EKEYREJECTED: it does
 * not, err naming the path and both digests; another -errno: the pin or
 * the file could not be read. A file the verification cache vouches for
 * is not hashed again (snapshot/verified.h).
 */
int __must_check guest_default__verify(const char *dir, const char *name,
				       char pin[GUEST_DIGEST_LEN],
				       char actual[GUEST_DIGEST_LEN], char *err,
				       size_t len);

/*
 * No kernel in c: the default guest's kernel (and its initramfs, unless
 * c has one), each verified, from KILN_GUEST_DIR, /proc/self/exe's
 * directory and the compiled-in install directory. A c with a kernel is
 * left as it is. err receives one line on failure.
 */
int __must_check guest_default__apply(struct vm_config *c, char *err,
				      size_t len);

/*
 * The directory of the running vmm into buf; false when
 * /proc/self/exe cannot be read.
 */
bool guest_default__exe_dir(char *buf, size_t len);

/* The compiled-in install directory ($PREFIX/lib/kiln/guest). */
const char *guest_default__install_dir(void);

/*
 * The "Linux version X.Y.Z" release of a vmlinux (its banner) into buf:
 * 0, or -ENOENT when the file has none.
 */
int __must_check guest_default__kernel_release(const char *path, char *buf,
					       size_t len);

#endif
