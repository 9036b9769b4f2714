/* SPDX-License-Identifier: GPL-2.0 */
#ifndef KILN_PROTO_ENV_H
#define KILN_PROTO_ENV_H

/*
 * The environment entries of PROC_START (proto/agent.h): T_ENV
 * "NAME=value", added to the agent's own environment with T_ENV_MERGE.
 * Checked the same way on both sides: the vmm refuses a bad entry before
 * it reaches the agent, the agent refuses one that does.
 */

#include <stdbool.h>
#include <stddef.h>

/*
 * A variable name exec's env accepts: not empty, no '=' (it would end
 * the name) and no NUL (it would end the entry).
 */
bool kiln_env__name_ok(const char *name, size_t len);

/*
 * NULL for a good T_ENV entry, "NAME=value" with a kiln_env__name_ok()
 * NAME and a value without NUL (it may be empty); else why not, as a
 * phrase: "no '=' (expected NAME=value)", "an empty name", "a NUL byte".
 */
const char *kiln_env__entry_error(const char *entry, size_t len);

/* The bytes of an entry's name: those before its first '=' (or all). */
size_t kiln_env__name_len(const char *entry, size_t len);

/*
 * @len bytes of a name for an error message, into @out (@max bytes,
 * NUL-terminated, cut short to fit): control bytes (NUL included) as '?'.
 */
void kiln_env__show(const char *s, size_t len, char *out, size_t max);

#endif
