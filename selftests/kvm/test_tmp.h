/* SPDX-License-Identifier: GPL-2.0 */
/*
 * test_tmp.h - where the KVM tests make their scratch directories.
 */
#ifndef KILN_SELFTESTS_TEST_TMP_H
#define KILN_SELFTESTS_TEST_TMP_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/*
 * Where the tests make their scratch directories: $KILN_TEST_TMP (at
 * most TEST_TMP_MAX bytes, so that every socket path under it fits),
 * else /tmp. In the harness, run_kvm.sh points it at the harness's own
 * tmpfs: its /tmp is the host's, served over virtiofs, and the tests'
 * snapshots, images and file storms there were most of that root's load
 * (Documentation/harness.md, "Scratch on the harness's tmpfs").
 */
#define TEST_TMP_MAX 16

static inline const char *test_tmp(void)
{
	const char *t = getenv("KILN_TEST_TMP");

	return t && t[0] == '/' && strlen(t) <= TEST_TMP_MAX ? t : "/tmp";
}

/* buf = the scratch directory's path NAME (a mkdtemp template, say). */
static inline void test_tmp_name(char *buf, size_t len, const char *name)
{
	snprintf(buf, len, "%s/%s", test_tmp(), name);
}

#endif
