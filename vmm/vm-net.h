/* SPDX-License-Identifier: GPL-2.0 */
#ifndef KILN_VM_NET_H
#define KILN_VM_NET_H

#include <jansson.h>
#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <sys/resource.h>

#include "lib/compiler.h"
#include "net/intercept.h"
#include "net/tap.h"

struct vm;
struct proxy;
struct dns;
struct net_bindings;
struct net_policy;
struct sock_fprog;
struct api_flow_check;
struct net_decision;

/*
 * The VM's network (--net), struct vm's net: vmm/vm-net.c is the only
 * file that reaches into it, and the only place struct vm meets net/.
 */
struct vm_net {
	/*
	 * The tap, in the VM's network namespace (auto, netns:PATH) or the
	 * orchestrator's (tap-fd:N); both fds are the VM's, closed after
	 * its virtio-net device (slot 10's) is gone.
	 */
	struct tap tap;
	int netns_fd; /* -1: tap-fd mode, or no network */
	/* The config's --net settings (vm_net__init, vm_net__sandbox_init). */
	const struct net_config *cfg;
	/*
	 * The egress proxy and its program on the tap (net/proxy.h), in
	 * auto and netns modes; with tap-fd the host side is the
	 * orchestrator's.
	 */
	struct proxy *proxy;
	/*
	 * The policy the proxy decides by: the config's until
	 * vm_net__set_policy replaces it. policy_lock is held around each
	 * decision (proxy thread) and each swap (API thread), so no
	 * decision ever runs on a policy being freed.
	 */
	pthread_mutex_t policy_lock;
	const struct net_policy *policy; /* the config's, or policy_owned */
	struct net_policy *policy_owned; /* the last replacement: the VM's */
	/*
	 * The trusted DNS bindings (net/policy.h): made in the proxy step,
	 * freed after the proxy is gone. The resolver's thread inserts and
	 * expires, the proxy's looks up (decide_by_policy); the table does
	 * not lock, so both take bindings_lock around it.
	 */
	struct net_bindings *bindings;
	pthread_mutex_t bindings_lock;
	/* The resolver on the gateway's port 53 (net/dns.h), with the proxy. */
	struct dns *dns;
	/*
	 * The http grants' TLS interception (net/tls.h), with the proxy:
	 * the VM's CA (made at start, its key in memory only), a server on
	 * it and a client trusting --net-ca-bundle; freed after the proxy.
	 * client NULL: the default bundle could not be read.
	 */
	struct intercept_tls http_tls;
	/*
	 * The SYN filter went off (a binding it could not hold): said
	 * once per VM. The resolver's thread's only.
	 */
	bool syn_warned;
};

/* Before the first step and after the last undo (vm__create). */
void vm_net__prepare(struct vm_net *n);
void vm_net__release(struct vm_net *n);

/*
 * Build steps (vm.c's vm_steps), each reporting its own failure: "net"
 * the tap, "proxy" the proxy with its policy, bindings and TLS, "dns"
 * the resolver; vm_net__device_init is the devices step's virtio-net
 * device, in its slot. Each undo accepts a step half done.
 */
int __must_check vm_net__init(struct vm *vm);
void vm_net__exit(struct vm *vm);
int __must_check vm_net__proxy_init(struct vm *vm);
void vm_net__proxy_exit(struct vm *vm);
int __must_check vm_net__dns_init(struct vm *vm);
void vm_net__dns_exit(struct vm *vm);
int __must_check vm_net__device_init(struct vm *vm);

/*
 * The interception CA's certificate, PEM and NUL-terminated, for the
 * guest to trust (Documentation/network.md, "The CA in the guest"),
 * valid while the VM lives, and its OpenSSL subject hash in hash ("" if
 * it has none: warned): 0 when the VM has an egress proxy (the CA) and
 * netcfg__guest_ca says so for the boot's policy, -ENOENT otherwise.
 */
int __must_check vm_net__guest_ca(const struct vm *vm, const char **pem,
				  size_t *len, char *hash, size_t hash_len);
/* Whether a root without a trust store refuses it (netcfg__guest_ca_required). */
bool vm_net__guest_ca_required(const struct vm *vm);

/* A tap, hence a virtio-net device: what the seccomp filters need. */
bool vm_net__has_tap(const struct vm *vm);
/*
 * vm__run: the proxy's netns thread under its own filter (vm->seccomp's
 * SECCOMP_THREAD_NETNS), the proxy's and the resolver's threads under
 * filter; a failure is reported here. SIGUSR2: their state into the log.
 */
int __must_check vm_net__start(struct vm *vm, const struct sock_fprog *filter);
void vm_net__report(struct vm *vm);

/*
 * net.setPolicy: parses obj (the "policy" param) completely, swaps it in
 * and has the proxy recheck its open flows (those no longer granted are
 * cut). On any error the old policy stays and err has one line naming
 * the key: -EINVAL for a bad policy, -EOPNOTSUPP without a proxy.
 */
int __must_check vm_net__set_policy(struct vm *vm, json_t *obj, char *err,
				    size_t len);

/* The same on the network alone (the namespace launcher has no VM). */
int __must_check vm_net__policy_replace(struct vm_net *n, json_t *obj,
					char *err, size_t len);

/*
 * net.check: what the policy would decide now for the flow f
 * (vmm/api.h), into d. -EOPNOTSUPP without a proxy, -EINVAL for a
 * hostname that is not a DNS name, one line in err.
 */
int __must_check vm_net__flow_check(struct vm_net *n,
				    const struct api_flow_check *f,
				    struct net_decision *d, char *err,
				    size_t len);

/* vm.status's "net": the proxy's and its program's counters (net/status.h). */
json_t *vm_net__status(struct vm_net *n);

/*
 * The namespace launcher's network (vmm/isolate-ns.c; Documentation/
 * network.md, "The namespace launcher"): the same proxy, policy,
 * resolver and egress program as a VM's, on the near end of a veth
 * pair (net/netns.h, netns__create_veth) instead of a tap, its far end
 * peer_name in the sandbox's network namespace (sandbox_ns_fd,
 * borrowed). n was prepared (vm_net__prepare); c outlives it. Before the
 * clone, sandbox_prepare makes the interception CA (so that the child
 * has its certificate); after it, sandbox_init the veth, the proxy and
 * the resolver. Each reports its failure; exit undoes whatever they
 * reached, after the sandbox ended; start runs the proxy's and the
 * resolver's threads.
 */
int __must_check vm_net__sandbox_prepare(struct vm_net *n,
					 const struct net_config *c);
/*
 * The interception CA for the sandbox's trust store (Documentation/
 * network.md, "The CA in the guest"), once prepared: 0 with its PEM
 * (valid while n is) and whether a root without a trust store must be
 * refused, when the config and its policy call for it; -ENOENT if not.
 */
int __must_check vm_net__sandbox_ca(const struct vm_net *n, const char **pem,
				    size_t *len, bool *required);
int __must_check vm_net__sandbox_init(struct vm_net *n,
				      const struct net_config *c,
				      int sandbox_ns_fd, const char *peer_name);
int __must_check vm_net__sandbox_start(struct vm_net *n);
void vm_net__sandbox_exit(struct vm_net *n);

/*
 * Around jail__drop (vmm/jail.h): the egress proxy's netns thread keeps
 * its two capabilities, then has them effective again. 0 without a
 * proxy; errors logged.
 */
int __must_check vm_net__jail_keep_caps(struct vm *vm);
int __must_check vm_net__jail_raise_caps(struct vm *vm);

#endif
