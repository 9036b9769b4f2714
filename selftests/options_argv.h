/* SPDX-License-Identifier: GPL-2.0 */
#ifndef KILN_SELFTESTS_OPTIONS_ARGV_H
#define KILN_SELFTESTS_OPTIONS_ARGV_H

/*
 * A vmm command line parsed in-process, as main() would parse it: the
 * words of a test's ARGS() behind a fixed head ("run", "--kernel", "/k")
 * through options__parse_argv(), then config__validate().
 */
#include <errno.h>
#include <stddef.h>

#include "selftests/spawn.h"
#include "vmm/config.h"
#include "vmm/options.h"

#define OPTIONS_ARGV_MAX 64 /* words, head and NULL included */

/*
 * `vmm HEAD... ARGS...` (both NULL-terminated, args may be NULL) parsed
 * into c, which the caller initialized. -E2BIG when it does not fit.
 */
static inline int options_argv__parse(struct vm_config *c,
				      const char *const head[],
				      const char *const args[])
{
	char *argv[OPTIONS_ARGV_MAX];
	int argc = 0;

	for (; *head; head++)
		argv[argc++] = (char *)*head;
	for (; args && *args; args++) {
		if (argc == OPTIONS_ARGV_MAX - 1)
			return -E2BIG;
		argv[argc++] = (char *)*args;
	}
	argv[argc] = NULL;
	return options__parse_argv(c, argc, argv);
}

/*
 * config__init(), `vmm HEAD... ARGS...`, then config__validate() with its
 * message in err (emptied first). The caller frees c.
 */
static inline int options_argv__check(struct vm_config *c,
				      const char *const head[],
				      const char *const args[], char *err,
				      size_t len)
{
	int ret;

	err[0] = '\0';
	ret = options_argv__parse(c, head, args);
	if (!ret)
		ret = config__validate(c, err, len);
	return ret;
}

/* `vmm run --kernel /k ARGS...` into a fresh c, parsed and validated. */
static inline int options_argv__run(struct vm_config *c,
				    const char *const args[], char *err,
				    size_t len)
{
	config__init(c);
	return options_argv__check(c, ARGS("run", "--kernel", "/k"), args, err,
				   len);
}

#endif
