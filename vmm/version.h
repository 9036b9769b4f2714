/* SPDX-License-Identifier: GPL-2.0 */
#ifndef KILN_VMM_VERSION_H
#define KILN_VMM_VERSION_H

#include <stdio.h>

/*
 * `vmm --version`: the build's version (git describe, or the VERSION
 * file), the default guest's kernel release and digests, and the
 * versions of the libraries linked (Documentation/install.md).
 */
void version__print(FILE *f);

#endif
