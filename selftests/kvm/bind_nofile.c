// SPDX-License-Identifier: GPL-2.0
/*
 * A bind mount eight times its descriptor budget (issue 40, item 5): 2,000
 * files under a hard RLIMIT_NOFILE of 512 (a budget of 256), by file
 * handle and by name (selftests/kvm/bind_nofile.h). make test-long runs
 * the issue's own 20,000 under 4096 (kvm_bind_nofile_long).
 */
#include "selftests/kvm/bind_nofile.h"

/* A root vmm: nodes opened again by file handle. */
TEST_TIMEOUT(repo_2000_files_under_512_by_handle, BOOT_TIMEOUT * 2)
{
	run(_metadata, 20, 512, false);
}

/* Without CAP_DAC_READ_SEARCH: by name, beneath the bind's root. */
TEST_TIMEOUT(repo_2000_files_under_512_by_name, BOOT_TIMEOUT * 2)
{
	run(_metadata, 20, 512, true);
}

TEST_HARNESS_MAIN
