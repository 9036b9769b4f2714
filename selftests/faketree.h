/* SPDX-License-Identifier: GPL-2.0 */
#ifndef KILN_SELFTESTS_FAKETREE_H
#define KILN_SELFTESTS_FAKETREE_H

/*
 * Small fake trees for the tests of the tree's own checks (layers,
 * design, format): files written under a temporary root, folders made
 * as needed. Header-only, like the other test helpers.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>

/* Writes root/rel, making its folders: paths here are short and ours. */
static inline int faketree__put(const char *root, const char *rel,
				const char *text)
{
	char cmd[320], path[256];
	FILE *f;

	snprintf(path, sizeof(path), "%s/%s", root, rel);
	snprintf(cmd, sizeof(cmd), "mkdir -p \"$(dirname '%s')\"", path);
	if (system(cmd))
		return -1;
	f = fopen(path, "w");
	if (!f)
		return -errno;
	fputs(text, f);
	return fclose(f) ? -errno : 0;
}

#endif
