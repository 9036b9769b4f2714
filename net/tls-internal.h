/* SPDX-License-Identifier: GPL-2.0 */
#ifndef KILN_VMM_TLS_INTERNAL_H
#define KILN_VMM_TLS_INTERNAL_H

/* Between net/tls-*.c (and their unit test) only. */

#include <stddef.h>
#include <stdint.h>

#include "lib/compiler.h"
#include "net/tls.h"

/* The key of every leaf ca mints: DER (SEC 1), valid while ca lives. */
void tls_ca__leaf_key(const struct tls_ca *ca, const uint8_t **der,
		      size_t *len);

/*
 * wolfSSL_Init() / wolfSSL_Cleanup() around each object that uses the
 * library (wolfSSL counts them). 0 or -EIO.
 */
int __must_check tls__lib_get(void);
void tls__lib_put(void);

/* A wolfCrypt or wolfSSL error code as -errno. */
int tls__errno(int wolf_ret);

#endif
