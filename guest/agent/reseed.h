/* SPDX-License-Identifier: GPL-2.0 */
#ifndef KILN_AGENT_RESEED_H_
#define KILN_AGENT_RESEED_H_

#include <stdbool.h>

#include "guest/agent/conn.h"

/*
 * RESEED: the host's random bytes into the kernel's input pool
 * (RNDADDENTROPY, credited in full), then a CRNG reseed from it
 * (RNDRESEEDCRNG), so a VM restored from a snapshot stops drawing the
 * random numbers of every other VM restored from it. RESULT, or ERROR
 * with the errno (EINVAL for a bad payload; EPERM without
 * CAP_SYS_ADMIN). With T_NET_MAC and T_NET, eth0 then takes the
 * restored VM's own network (guest/init/net.h, init_net__renew); not
 * in a VM (!in_vm: the host build), ERROR ENOTSUP instead.
 */
void reseed__handle(struct conn *c, const struct frame *req, bool in_vm);

#endif
