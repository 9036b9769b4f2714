/* SPDX-License-Identifier: GPL-2.0 */
#ifndef KILN_OPTIONS_H
#define KILN_OPTIONS_H

#include <stddef.h>
#include <stdio.h>

#include "lib/compiler.h"
#include "vmm/config.h"

/*
 * The settings `vmm run` and `vmm start` take, declared once in one table
 * (vmm/options.c): command-line flag, JSON key, help text, value kind and
 * the one function that applies the value. The getopt table, the JSON key
 * lookup and --help all come from it.
 */

/* options__parse_argv found --help: usage is on stdout, exit 0. */
#define OPTIONS_HELP 1

/*
 * The options and the guest command (after --) in argv (argv[0] is the
 * subcommand) into c. Reports a bad one on stderr, one line naming it, and
 * returns -errno; OPTIONS_HELP after printing usage for --help.
 */
int __must_check options__parse_argv(struct vm_config *c, int argc,
				     char **argv);
/*
 * A JSON document's top-level object (a json_t) into c: each key through
 * the table, sections ("rootfs", "vsock") key by key. err receives
 * "what: why" on failure.
 */
int __must_check options__apply_json(struct vm_config *c, void *json_obj,
				     char *err, size_t errlen);
/* Fill c from a JSON document; err receives "what: why" on failure. */
int __must_check options__load_json(struct vm_config *c, const char *path,
				    char *err, size_t errlen);
/* The --help text. */
void options__usage(FILE *f);

#endif
