/* SPDX-License-Identifier: GPL-2.0 */
#ifndef KILN_CONFIG_H
#define KILN_CONFIG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "vmm/log.h"

#define CONFIG_DEFAULT_CPUS    1U
#define CONFIG_DEFAULT_MEM_MIB 256U
#define CONFIG_MIN_MEM_MIB     16U	  /* a kernel and an initramfs */
#define CONFIG_MAX_MEM_MIB     (1U << 20) /* 1 TiB */

/* Everything `vmm run` needs, validated before anything is built. */
struct vm_config {
	char *kernel_path;
	char *initrd_path;    /* NULL: none */
	char *cmdline;	      /* appended to the defaults; may be NULL */
	unsigned int nr_cpus; /* 1..KILN_MAX_CPUS */
	uint64_t mem_mib;     /* MiB */
	char **argv;	      /* command for the guest; NULL: none */
	bool verbose;
	bool seccomp; /* filter the running monitor */
};

#define CONFIG_ERR_LEN 256

void config__init(struct vm_config *c);
void config__free(struct vm_config *c);
/* Fill c from a JSON document; err receives "what: why" on failure. */
int __must_check config__load_json(struct vm_config *c, const char *path,
				   char *err, size_t errlen);
int __must_check config__set_argv(struct vm_config *c, char *const argv[],
				  int argc);
/* Checks ranges against each other and the host; err as above. */
int __must_check config__validate(const struct vm_config *c, char *err,
				  size_t errlen);
/* Parse a decimal count with no sign, junk or overflow. */
int __must_check config__parse_uint(const char *s, uint64_t max, uint64_t *out);

#endif
