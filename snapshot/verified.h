/* SPDX-License-Identifier: GPL-2.0 */
/*
 * The verification cache (Documentation/rootfs.md, "The verification
 * cache"): a good hash of a file remembered under the file's identity
 * and times, so that a file nobody changed is not hashed again. Used for
 * root images and for the parts of a snapshot.
 */
#ifndef KILN_VMM_VERIFIED_H
#define KILN_VMM_VERIFIED_H

#include <stdbool.h>
#include <sys/stat.h>

#define VERIFIED_KEY_MAX 512U

/*
 * The cache's bound: a store that finds more entries than this removes
 * the least recently written down to VERIFIED_ENTRIES_KEEP, and temporary
 * files older than VERIFIED_TMP_AGE_S.
 */
#define VERIFIED_ENTRIES_MAX  4096U
#define VERIFIED_ENTRIES_KEEP (VERIFIED_ENTRIES_MAX * 3 / 4)
#define VERIFIED_TMP_AGE_S    3600

struct verified {
	char *dir;   /* ${KILN_CACHE:-$HOME/.cache/kiln}/verified; NULL */
	char *entry; /* dir/<sha256 of key>; NULL: no cache */
	char key[VERIFIED_KEY_MAX];
	int keylen;
};

/*
 * Whether the cache vouches that the file in state *st has digest (any
 * fixed spelling: "sha256:<hex>" or "<hex>"). Fills *v for a later
 * verified__remember(); release it with verified__release() either way.
 */
bool verified__lookup(struct verified *v, const struct stat *st,
		      const char *digest);

/*
 * After fd's bytes were hashed to the digest of the lookup: -EBUSY if
 * the file changed while being hashed (the hash proves nothing), else 0,
 * and the good hash is remembered unless the file changed too recently
 * to tell a later change by its times. what names the file in a warning
 * when the cache cannot be written (that only costs a hash next time).
 */
int verified__remember(struct verified *v, int fd, const struct stat *st,
		       const char *what);

void verified__release(struct verified *v);

/*
 * A memo of a digest computed before, for a file in state *st (KIND
 * names what kind of digest): true with it in digest. verified__note()
 * records one after fd was hashed, if the file is still in state *st and
 * did not change too recently; before any seccomp filter only (it
 * writes the cache).
 */
bool verified__recall(const struct stat *st, const char *kind, char *digest,
		      size_t len);
void verified__note(int fd, const struct stat *st, const char *kind,
		    const char *digest, const char *what);

#endif
