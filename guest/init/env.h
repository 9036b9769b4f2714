/* SPDX-License-Identifier: GPL-2.0 */
#ifndef KILN_INIT_ENV_H
#define KILN_INIT_ENV_H

/*
 * The image's default environment: /etc/environment of the final root,
 * read as pam_env(8) reads it for a login (one NAME=value per line,
 * blank lines and '#' comments skipped, an optional "export " prefix, a
 * value in matching single or double quotes unquoted, no other
 * expansion), set over init's own defaults (PATH, HOME, TERM). The
 * command and the agent's processes inherit it (a PROC_START with
 * T_ENV_MERGE adds to it: Documentation/agent-protocol.md).
 */
#define INIT_ENV_FILE	  "/etc/environment"
#define INIT_ENV_FILE_MAX (64 << 10) /* bytes read at most */
#define INIT_ENV_MAX	  256	     /* variables taken at most */

/*
 * Sets each variable of the file at @path (a name of [A-Za-z_] then
 * [A-Za-z0-9_]: others are skipped with a warning on stderr): how many
 * were set, 0 without the file, or -errno when it cannot be read.
 */
int init_env__load(const char *path);

#endif
