// SPDX-License-Identifier: GPL-2.0
/* Where LeakSanitizer's exit-time check cannot run (leak-check.h). */
#include <stdatomic.h>
#include <stdbool.h>

#include "lib/compiler.h"
#include "lib/leak-check.h"
#if KILN_ASAN
#include <sanitizer/lsan_interface.h> /* __lsan_is_turned_off's prototype */
#endif

/*
 * Facts of the calling thread and of the process, read by the sanitizer
 * runtime at exit alone: not state any part of Kiln acts on.
 */
static __thread bool thread_skips;
static atomic_bool process_skips;

void leak_check__skip_thread(void)
{
	thread_skips = true;
}

void leak_check__skip_process(void)
{
	atomic_store(&process_skips, true);
}

#if KILN_ASAN
/* The runtime's hook: asked once, on the thread that calls exit(). */
__attribute__((used)) int __lsan_is_turned_off(void)
{
	return thread_skips || atomic_load(&process_skips);
}
#endif
