// SPDX-License-Identifier: GPL-2.0
/*
 * The VM's lifecycle (vmm/vm-state.c): every from/to pair of states
 * against one table written out here, the setter refusing each pair the
 * table leaves out, and the exit event a vCPU reports through.
 */
#include <errno.h>
#include <stdint.h>
#include <unistd.h>

#include "selftests/kselftest.h"
#include "vmm/vm-state.h"

#define S_C  VM_STATE_CREATED
#define S_B  VM_STATE_BOOTING
#define S_R  VM_STATE_RUNNING
#define S_PG VM_STATE_PAUSING
#define S_PD VM_STATE_PAUSED
#define S_SG VM_STATE_STOPPING
#define S_SD VM_STATE_STOPPED

/* The transitions the lifecycle allows: every other pair is refused. */
static const struct {
	enum vm_state from, to;
} allowed[] = {
	{ S_C, S_B },	/* released, a guest agent to wait for */
	{ S_C, S_R },	/* released, no agent */
	{ S_C, S_SG },	/* a thread failed to start */
	{ S_B, S_R },	/* the agent answered */
	{ S_B, S_PG },	/* vm.pause, a halt look */
	{ S_B, S_SG },	/* --ready-timeout-ms, or any stop */
	{ S_R, S_PG },	/* vm.pause, a halt look */
	{ S_R, S_SG },	/* any stop */
	{ S_PG, S_PD }, /* vm.pause: every vCPU parked */
	{ S_PG, S_B },	/* the look done, or the pause failed */
	{ S_PG, S_R },	/* the same, or the agent answered meanwhile */
	{ S_PG, S_SG }, /* stopped while parking */
	{ S_PD, S_B },	/* vm.resume */
	{ S_PD, S_R },	/* vm.resume */
	{ S_PD, S_SG }, /* a paused VM still stops */
	{ S_SG, S_SD }, /* every vCPU joined */
};

static bool in_table(enum vm_state from, enum vm_state to)
{
	for (unsigned int i = 0; i < sizeof(allowed) / sizeof(allowed[0]); i++)
		if (allowed[i].from == from && allowed[i].to == to)
			return true;
	return false;
}

TEST(every_pair_against_the_table)
{
	for (int from = 0; from < VM_STATE_NR; from++)
		for (int to = 0; to < VM_STATE_NR; to++)
			EXPECT_EQ(in_table(from, to),
				  vm_state__valid_transition(from, to));
	EXPECT_FALSE(vm_state__valid_transition(VM_STATE_NR, S_C));
	EXPECT_FALSE(vm_state__valid_transition(S_C, VM_STATE_NR));
}

TEST(setter_takes_the_allowed_refuses_the_rest)
{
	struct vm_lifecycle lc;

	ASSERT_EQ(0, vm_state__init(&lc));
	for (int from = 0; from < VM_STATE_NR; from++) {
		for (int to = 0; to < VM_STATE_NR; to++) {
			atomic_store(&lc.state, from);
			if (in_table(from, to)) {
				EXPECT_EQ(0, vm_state__set(&lc, to));
				EXPECT_EQ(to, vm_state__get(&lc));
			} else {
				EXPECT_EQ(-EINVAL, vm_state__set(&lc, to));
				EXPECT_EQ(from, vm_state__get(&lc));
			}
		}
	}
	EXPECT_TRUE(lc.refused);
	vm_state__exit(&lc);
}

TEST(a_boot_a_pause_and_a_stop)
{
	struct vm_lifecycle lc;

	ASSERT_EQ(0, vm_state__init(&lc));
	EXPECT_EQ(S_C, vm_state__get(&lc));
	EXPECT_STREQ("created", vm_state__name(vm_state__get(&lc)));
	EXPECT_EQ(0, vm_state__set(&lc, S_B));
	EXPECT_TRUE(vm_state__booting(&lc));
	/* Paused while booting: the agent's answer is where it resumes. */
	lc.resume_to = S_B;
	EXPECT_EQ(0, vm_state__set(&lc, S_PG));
	EXPECT_EQ(0, vm_state__set(&lc, S_PD));
	EXPECT_TRUE(vm_state__booting(&lc));
	EXPECT_EQ(0, vm_state__booted(&lc));
	EXPECT_EQ(S_PD, vm_state__get(&lc));
	EXPECT_EQ(S_R, lc.resume_to);
	EXPECT_FALSE(vm_state__booting(&lc));
	EXPECT_EQ(0, vm_state__set(&lc, lc.resume_to));
	EXPECT_FALSE(vm_state__report_boot_timeout(&lc, "late"));
	EXPECT_FALSE(vm_state__ending(&lc));
	EXPECT_EQ(0, vm_state__stop(&lc));
	EXPECT_EQ(0, vm_state__stop(&lc)); /* once */
	EXPECT_TRUE(vm_state__stopping(&lc));
	EXPECT_EQ(-ESHUTDOWN, vm_state__booted(&lc));
	EXPECT_EQ(0, vm_state__set(&lc, S_SD));
	EXPECT_EQ(-EINVAL, vm_state__set(&lc, S_SG));
	vm_state__exit(&lc);
}

TEST(exit_event_first_reason_wins)
{
	struct vm_lifecycle lc;
	uint64_t n = 0;

	ASSERT_EQ(0, vm_state__init(&lc));
	ASSERT_EQ(0, vm_state__set(&lc, S_B));
	vm_state__report_exit(&lc, VM_STOP_GUEST_EXIT, 7, NULL);
	vm_state__report_exit(&lc, VM_STOP_ERROR, 0, "later");
	EXPECT_TRUE(vm_state__ending(&lc));
	/* Reported, not stopped: the run loop owns that transition. */
	EXPECT_EQ(S_B, vm_state__get(&lc));
	EXPECT_EQ(VM_STOP_GUEST_EXIT, atomic_load(&lc.stop_reason));
	EXPECT_EQ(7, lc.stop_status);
	EXPECT_EQ(NULL, lc.stop_detail);
	ASSERT_EQ((ssize_t)sizeof(n), read(lc.exit_fd, &n, sizeof(n)));
	EXPECT_EQ(2, n);
	/* The agent's answer comes too late, and so does the timeout. */
	EXPECT_EQ(-ESHUTDOWN, vm_state__booted(&lc));
	EXPECT_FALSE(vm_state__report_boot_timeout(&lc, "late"));
	vm_state__exit(&lc);
}

TEST(boot_timeout_only_while_booting)
{
	struct vm_lifecycle lc;

	ASSERT_EQ(0, vm_state__init(&lc));
	ASSERT_EQ(0, vm_state__set(&lc, S_B));
	EXPECT_TRUE(vm_state__report_boot_timeout(&lc, "never answered"));
	EXPECT_EQ(VM_STOP_ERROR, atomic_load(&lc.stop_reason));
	EXPECT_STREQ("never answered", lc.stop_detail);
	EXPECT_EQ(-ESHUTDOWN, vm_state__booted(&lc));
	vm_state__exit(&lc);
}

TEST_HARNESS_MAIN
