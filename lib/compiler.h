/* SPDX-License-Identifier: GPL-2.0 */
#ifndef KILN_LIB_COMPILER_H
#define KILN_LIB_COMPILER_H

/* Attributes and macros every part of the tree uses (kernel names). */
#define __must_check  __attribute__((warn_unused_result))
#define ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))
/* A case that goes on into the next: gcc reads the comment, clang not. */
#define fallthrough __attribute__((__fallthrough__))

/*
 * 1 when built with AddressSanitizer (SAN=1, Documentation/fuzzing.md):
 * gcc says so with __SANITIZE_ADDRESS__, clang with a feature.
 */
#if defined(__SANITIZE_ADDRESS__)
#define KILN_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define KILN_ASAN 1
#endif
#endif
#ifndef KILN_ASAN
#define KILN_ASAN 0
#endif

#endif
