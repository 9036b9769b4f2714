// SPDX-License-Identifier: GPL-2.0
/*
 * The issue's own case (issue 40, item 5), in make test-long: a 20,000-file
 * repository under a hard RLIMIT_NOFILE of 4096 (a budget of 2048), by
 * file handle and by name (selftests/kvm/bind_nofile.h). In the one-CPU
 * harness each case takes 5 to 15 minutes.
 */
#include "selftests/kvm/bind_nofile.h"

TEST_TIMEOUT(repo_20000_files_under_4096_by_handle, BOOT_TIMEOUT * 6)
{
	run(_metadata, 200, 4096, false);
}

TEST_TIMEOUT(repo_20000_files_under_4096_by_name, BOOT_TIMEOUT * 6)
{
	run(_metadata, 200, 4096, true);
}

TEST_HARNESS_MAIN
