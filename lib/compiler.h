/* SPDX-License-Identifier: GPL-2.0 */
#ifndef KILN_LIB_COMPILER_H
#define KILN_LIB_COMPILER_H

/* Attributes and macros every part of the tree uses (kernel names). */
#define __must_check  __attribute__((warn_unused_result))
#define ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))
/* A case that goes on into the next: gcc reads the comment, clang not. */
#define fallthrough __attribute__((__fallthrough__))

#endif
