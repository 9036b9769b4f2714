// SPDX-License-Identifier: GPL-2.0
/*
 * The VM's network (--net, Documentation/network.md), the one place
 * struct vm meets net/: the tap and its namespace, the egress proxy
 * with its TLS interception, the resolver, the virtio-net device, and
 * the decisions the proxy asks of the VM's policy. vm.c's step table
 * calls the steps; vm-run.c starts the threads.
 */
#include <errno.h>
#include <linux/capability.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "devices/virtio/net.h"
#include "lib/compiler.h"
#include "lib/nofile.h"
#include "lib/errf.h"
#include "net/dns.h"
#include "net/netns.h"
#include "net/policy.h"
#include "net/proxy.h"
#include "net/synmap.h"
#include "net/tls.h"
#include "vmm/api.h"
#include "vmm/jail.h"
#include "vmm/seccomp.h"
#include "vmm/vm-net.h"
#include "vmm/vm.h"

void vm_net__prepare(struct vm_net *n)
{
	n->tap.fd = n->netns_fd = -1;
	pthread_mutex_init(&n->bindings_lock, NULL);
}

void vm_net__release(struct vm_net *n)
{
	pthread_mutex_destroy(&n->bindings_lock);
}

/* ---- step: net (the tap) ------------------------------------------------- */

/*
 * The tap, before KVM is touched: a namespace that cannot be made or
 * entered, or an fd that is not a tap, fails here, once.
 */
int vm_net__init(struct vm *vm)
{
	const struct net_config *n = &vm->cfg->net;
	struct netns_params p = {
		.path = n->netns_path, /* NULL for auto: a new one */
		.tap_name = NET_TAP_NAME,
		.mtu = (unsigned int)n->mtu,
		.host_addr = n->gateway,
		.prefix = n->prefix,
	};
	char err[CONFIG_ERR_LEN];
	int ret;

	switch (n->mode) {
	case NET_NONE:
		return 0;
	case NET_TAP_FD:
		/* The fd is the VM's from here on. */
		ret = tap__adopt(&vm->net.tap, (int)n->tap_fd, err,
				 sizeof(err));
		if (ret)
			pr_err("net %s", err);
		return ret;
	case NET_AUTO:
	case NET_NETNS:
		break;
	}
	ret = netns__create_tap(&p, &vm->net.netns_fd, &vm->net.tap, err,
				sizeof(err));
	if (ret)
		pr_err("%s", err);
	return ret;
}

/* After the device is gone (the devices step is undone first). */
void vm_net__exit(struct vm *vm)
{
	tap__close(&vm->net.tap);
	if (vm->net.netns_fd >= 0)
		close(vm->net.netns_fd);
	vm->net.netns_fd = -1;
}

/* ---- step: proxy --------------------------------------------------------- */

/*
 * Each new flow (and, after a replacement, each open one) against the
 * VM's policy (--net-policy, "net.policy", or net.setPolicy's), on the
 * proxy's thread, its only caller: default deny, "no grant" when no rule
 * (or no policy) allows it. Hostname rules match through the resolver's
 * bindings. Under policy_lock (the API thread may be swapping the
 * policy), then bindings_lock (the resolver's thread writes them). A
 * policy with a hook answers NET_VERDICT_ASK instead of "no grant", the
 * hook's socket and the destination's bound names copied out: the proxy
 * asks the hook after both locks are released.
 */
static void decide_by_policy(void *opaque, const struct net_flow *f,
			     struct net_decision *d)
{
	struct vm *vm = opaque;

	pthread_mutex_lock(&vm->net.policy_lock);
	pthread_mutex_lock(&vm->net.bindings_lock);
	net_policy__decide(vm->net.policy, f, vm->net.bindings, d);
	pthread_mutex_unlock(&vm->net.bindings_lock);
	pthread_mutex_unlock(&vm->net.policy_lock);
}

/*
 * Each request of a flow an http grant covers (NET_VERDICT_HTTP), on the
 * proxy's thread, under the same locks in the same order: the policy as
 * it is now, and what the resolver binds now. The grant's fields (their
 * values are secrets) are copied into d, which the interception wipes.
 */
static void decide_http_by_policy(void *opaque, const struct net_flow *f,
				  const char *host, bool verified,
				  struct net_http_decision *d)
{
	struct vm *vm = opaque;

	pthread_mutex_lock(&vm->net.policy_lock);
	pthread_mutex_lock(&vm->net.bindings_lock);
	net_policy__decide_http(vm->net.policy, f, host, verified,
				vm->net.bindings, d);
	pthread_mutex_unlock(&vm->net.bindings_lock);
	pthread_mutex_unlock(&vm->net.policy_lock);
}

/*
 * The egress program's SYN filter (net/synmap.h): a superset of what the
 * policy and the resolver's bindings can grant, so that a SYN nothing can
 * grant is refused with an RST. Built and written on the proxy's netns
 * thread, which serves one call at a time: a refill and a new binding
 * never interleave, and a binding made before a refill's build is in it.
 * Under policy_lock, then bindings_lock, as the decisions take them.
 */
struct syn_call {
	struct vm *vm;
	const char *host; /* a binding: the name, normalized */
	const uint32_t *addrs;
	unsigned int n;
	char err[CONFIG_ERR_LEN];
};

static int syn_refill_ns(void *arg)
{
	struct syn_call *c = arg;
	struct vm *vm = c->vm;
	struct net_synmap m;
	int ret;

	pthread_mutex_lock(&vm->net.policy_lock);
	pthread_mutex_lock(&vm->net.bindings_lock);
	ret = net_synmap__build(&m, vm->net.policy, vm->net.bindings);
	pthread_mutex_unlock(&vm->net.bindings_lock);
	pthread_mutex_unlock(&vm->net.policy_lock);
	if (ret)
		return errf(c->err, sizeof(c->err), ret, "%s", strerror(-ret));
	ret = net_synmap__apply(&m, proxy__egress(vm->net.proxy), c->err,
				sizeof(c->err));
	net_synmap__release(&m);
	return ret;
}

/*
 * A filter that could not be written stays off: every SYN goes to the
 * proxy, which still denies what the policy denies (reset after the
 * handshake, as before the filter).
 */
static void syn_refill(struct vm *vm)
{
	struct syn_call c = { .vm = vm };
	int ret;

	ret = proxy__on_ns_thread(vm->net.proxy, syn_refill_ns, &c);
	if (ret)
		pr_warn("net %s: the SYN filter is off, denied TCP flows "
			"are reset after the handshake: %s",
			vm->net.tap.name, c.err);
}

static int syn_bind_ns(void *arg)
{
	struct syn_call *c = arg;
	struct vm *vm = c->vm;
	struct egress_syn_ports ports = { 0 };
	int ret = 0;

	pthread_mutex_lock(&vm->net.policy_lock);
	net_synmap__host_ports(vm->net.policy, c->host, &ports);
	pthread_mutex_unlock(&vm->net.policy_lock);
	for (unsigned int i = 0; !ret && i < c->n; i++)
		ret = net_synmap__bind(proxy__egress(vm->net.proxy),
				       c->addrs[i], &ports, c->err,
				       sizeof(c->err));
	return ret;
}

/* The resolver's bindings, before its answer reaches the guest. */
static void syn_bound(void *opaque, const char *host, const uint32_t *addrs,
		      unsigned int n)
{
	char name[NET_HOSTNAME_MAX + 1];
	struct vm *vm = opaque;
	struct syn_call c = { .vm = vm, .host = name, .addrs = addrs, .n = n };
	bool wildcard;
	int ret;

	if (net_hostname__normalize(host, name, false, &wildcard))
		return; /* not bound either */
	ret = proxy__on_ns_thread(vm->net.proxy, syn_bind_ns, &c);
	if (ret && !vm->net.syn_warned) {
		vm->net.syn_warned = true;
		pr_warn("net %s: the SYN filter is off until the next "
			"net.setPolicy, denied TCP flows are reset after the "
			"handshake (said once): %s",
			vm->net.tap.name, c.err);
	}
}

/*
 * net.check: the decision the proxy would take now (the same function,
 * under the same locks in the same order), nothing opened.
 */
int vm_net__check(struct vm *vm, const struct api_flow_check *f,
		  struct net_decision *d, char *err, size_t len)
{
	int ret;

	if (!vm->net.proxy)
		return errf(err, len, -EOPNOTSUPP,
			    "this VM has no egress proxy (--net auto or "
			    "netns:PATH)");
	pthread_mutex_lock(&vm->net.policy_lock);
	pthread_mutex_lock(&vm->net.bindings_lock);
	ret = net_policy__check(vm->net.policy,
				f->udp ? IPPROTO_UDP : IPPROTO_TCP, f->addr,
				f->port, f->hostname[0] ? f->hostname : NULL,
				vm->net.bindings, d);
	pthread_mutex_unlock(&vm->net.bindings_lock);
	pthread_mutex_unlock(&vm->net.policy_lock);
	if (ret)
		return errf(err, len, ret, "hostname: %s is not a DNS name",
			    f->hostname);
	return 0;
}

/*
 * Parsed outside the lock (the proxy keeps deciding by the old one
 * meanwhile), swapped under it, the old one freed after it: no decision
 * can be using it then. The config's policy is the config's to free.
 */
int vm_net__set_policy(struct vm *vm, json_t *obj, char *err, size_t len)
{
	struct net_policy *np, *old;
	int ret;

	if (!vm->net.proxy)
		return errf(err, len, -EOPNOTSUPP,
			    "this VM has no egress proxy (--net auto or "
			    "netns:PATH)");
	ret = net_policy__parse(obj, "policy", &np, err, len);
	if (ret)
		return ret;
	/* The tap's host side stays denied, whatever the new one grants. */
	net_policy__set_gateway(np, vm->cfg->net.gateway);
	pthread_mutex_lock(&vm->net.policy_lock);
	old = vm->net.policy_owned;
	vm->net.policy = vm->net.policy_owned = np;
	if (vm->net.dns)
		dns__set_resolvers(vm->net.dns, np);
	pthread_mutex_unlock(&vm->net.policy_lock);
	net_policy__free(old);
	/* What the new policy grants connects once this returns. */
	syn_refill(vm);
	proxy__recheck(vm->net.proxy);
	return 0;
}

/*
 * The http grants' TLS interception: the VM's CA (fresh, its key in
 * memory only), a server minting on it, a client trusting the CA bundle
 * (opened now, before the seccomp filter; parsed at the first upstream
 * TLS connection, net/tls.h). Made whenever the proxy is,
 * whatever the policy: net.setPolicy may add http grants later, and the
 * guest trusts the CA from boot. A --net-ca-bundle that cannot be read
 * stops the VM; the default one missing costs the grants' TLS flows only
 * (denied, "http tls unavailable"), with a warning.
 */
static int http_tls_init(struct vm *vm)
{
	const char *bundle = vm->cfg->net.ca_bundle;
	struct intercept_tls *t = &vm->net.http_tls;
	struct tls_client_params cp = { .ca_bundle = bundle };
	struct tls_ca_params cap = { 0 };
	char err[CONFIG_ERR_LEN];
	int ret;

	ret = tls_ca__create(&t->ca, &cap, err, sizeof(err));
	if (!ret)
		ret = tls_server__create(&t->server, t->ca, err, sizeof(err));
	if (ret) {
		pr_err("net %s: the interception CA: %s", vm->net.tap.name,
		       err);
		return ret;
	}
	ret = tls_client__create(&t->client, &cp, err, sizeof(err));
	if (ret && bundle) {
		pr_err("net %s: --net-ca-bundle: %s", vm->net.tap.name, err);
		return ret;
	}
	if (ret)
		pr_warn("net %s: %s: the http grants' TLS flows will be "
			"denied",
			vm->net.tap.name, err);
	return 0;
}

static void http_tls_exit(struct vm *vm)
{
	struct intercept_tls *t = &vm->net.http_tls;

	tls_client__destroy(t->client);
	tls_server__destroy(t->server);
	tls_ca__destroy(t->ca);
	*t = (struct intercept_tls){ 0 };
}

static int http_ca_pem(const struct vm *vm, const char **pem, size_t *len)
{
	if (!vm->net.http_tls.ca)
		return -ENOENT;
	tls_ca__cert_pem(vm->net.http_tls.ca, pem, len);
	return 0;
}

/*
 * The proxy's sockets in the VM netns and the egress program on the tap,
 * before KVM is touched and before the seccomp filter (bpf(), setns()).
 * Its thread starts with the devices'. Undone after the device is gone.
 */
int vm_net__proxy_init(struct vm *vm)
{
	const struct net_config *n = &vm->cfg->net;
	struct proxy_params p = {
		.netns_fd = vm->net.netns_fd,
		.ifname = vm->net.tap.name,
		.egress = { .gateway.s_addr = n->gateway,
			    .guest.s_addr = n->address,
			    .prefix_len = n->prefix },
		.decide = decide_by_policy,
		.decide_http = decide_http_by_policy,
		.decide_opaque = vm,
		.relay = (enum proxy_relay)n->relay,
	};
	char err[CONFIG_ERR_LEN];
	int ret;

	pthread_mutex_init(&vm->net.policy_lock, NULL);
	vm->net.policy = n->policy;
	if (vm->net.netns_fd < 0)
		return 0; /* no network, or the orchestrator's tap */
	vm->net.bindings = net_bindings__create(NULL, NULL);
	if (!vm->net.bindings) {
		pr_err("net %s: the DNS bindings: %s", vm->net.tap.name,
		       strerror(ENOMEM));
		return -ENOMEM;
	}
	ret = http_tls_init(vm);
	if (ret)
		return ret;
	p.tls = vm->net.http_tls;
	/*
	 * What the proxy may hold at most (PROXY_MAX_FDS: sockets, relay
	 * pipes, the hook's connection).
	 */
	nofile__room(PROXY_MAX_FDS);
	ret = proxy__create(&vm->net.proxy, &p, err, sizeof(err));
	if (ret) {
		pr_err("net %s: %s", vm->net.tap.name, err);
		return ret;
	}
	syn_refill(vm);
	return 0;
}

/* The bindings and the TLS objects outlive the proxy's thread. */
void vm_net__proxy_exit(struct vm *vm)
{
	proxy__destroy(vm->net.proxy);
	vm->net.proxy = NULL;
	http_tls_exit(vm);
	net_policy__free(vm->net.policy_owned);
	vm->net.policy_owned = NULL;
	vm->net.policy = NULL;
	pthread_mutex_destroy(&vm->net.policy_lock);
	net_bindings__destroy(vm->net.bindings);
	vm->net.bindings = NULL;
}

/*
 * In a jail, the proxy's netns thread keeps CAP_NET_RAW (IP_TRANSPARENT
 * on a reply socket per UDP flow, which CAP_NET_RAW allows as well as
 * CAP_NET_ADMIN) and CAP_BPF (its maps, every bpf() call on Linux 6.1)
 * through the drop; every other thread keeps none. Not CAP_NET_ADMIN:
 * with it, rtnetlink (IFLA_NET_NS_FD, IFLA_LINK_NETNSID) reaches the
 * host's namespace; its netlink work (the tap's address, routes, the
 * program's attachment) is all done before the drop.
 */
static const int proxy_caps[] = { CAP_NET_RAW, CAP_BPF };

static int keep_proxy_caps(void *arg)
{
	(void)arg;
	return jail__keep_caps(proxy_caps, ARRAY_SIZE(proxy_caps));
}

static int raise_proxy_caps(void *arg)
{
	(void)arg;
	return jail__raise_kept_caps(proxy_caps, ARRAY_SIZE(proxy_caps));
}

int vm_net__jail_keep_caps(struct vm *vm)
{
	int ret = vm->net.proxy ? proxy__on_ns_thread(vm->net.proxy,
						      keep_proxy_caps, NULL) :
				  0;

	if (ret)
		pr_err("jail: the egress proxy's capabilities: %s",
		       strerror(-ret));
	return ret;
}

int vm_net__jail_raise_caps(struct vm *vm)
{
	int ret = vm->net.proxy ? proxy__on_ns_thread(vm->net.proxy,
						      raise_proxy_caps, NULL) :
				  0;

	if (ret)
		pr_err("jail: the egress proxy's capabilities after the drop: "
		       "%s",
		       strerror(-ret));
	return ret;
}

/* ---- step: dns ----------------------------------------------------------- */

/*
 * The resolver's sockets on the gateway's port 53 in the VM netns, with
 * the proxy (the egress program passes DNS to the gateway to them), its
 * upstream resolvers from the policy; before the seccomp filter (setns).
 * Its thread starts with the proxy's; undone before the proxy step.
 */
int vm_net__dns_init(struct vm *vm)
{
	const struct net_config *n = &vm->cfg->net;
	struct dns_params p = {
		.netns_fd = vm->net.netns_fd,
		.gateway.s_addr = n->gateway,
		.policy = n->policy,
		.bindings = vm->net.bindings,
		.bindings_lock = &vm->net.bindings_lock,
		.bound = syn_bound,
		.bound_opaque = vm,
	};
	char err[CONFIG_ERR_LEN];
	int ret;

	if (!vm->net.proxy)
		return 0;
	/* A socket per query upstream, and per guest connection. */
	nofile__room(DNS_MAX_PENDING + DNS_MAX_TCP_CONNS);
	ret = dns__create(&vm->net.dns, &p, err, sizeof(err));
	if (ret)
		pr_err("net %s: %s", vm->net.tap.name, err);
	return ret;
}

void vm_net__dns_exit(struct vm *vm)
{
	dns__destroy(vm->net.dns);
	vm->net.dns = NULL;
}

/* ---- the virtio-net device (step devices) -------------------------------- */

static int net_device_start(void *dev, const struct sock_fprog *filter)
{
	return virtio_net__start(dev, filter);
}

/*
 * virtio-net keeps its own frame counters (devices/virtio/net.h): its
 * errors and queue-full events are read from them, not counted twice.
 */
static void net_device_metrics(void *dev, json_t *o)
{
	struct net_stats s;

	virtio_net__stats(dev, &s);
	json_object_set_new(
		o, "errors",
		json_integer((json_int_t)(s.tx_errors + s.tx_dropped +
					  s.rx_dropped)));
	json_object_set_new(o, "queueFull",
			    json_integer((json_int_t)s.rx_held));
	json_object_set_new(o, "rxFrames",
			    json_integer((json_int_t)s.rx_frames));
	json_object_set_new(o, "rxBytes", json_integer((json_int_t)s.rx_bytes));
	json_object_set_new(o, "rxDropped",
			    json_integer((json_int_t)s.rx_dropped));
	json_object_set_new(o, "txFrames",
			    json_integer((json_int_t)s.tx_frames));
	json_object_set_new(o, "txBytes", json_integer((json_int_t)s.tx_bytes));
	json_object_set_new(o, "txDropped",
			    json_integer((json_int_t)s.tx_dropped));
	json_object_set_new(o, "txErrors",
			    json_integer((json_int_t)s.tx_errors));
}

static void net_device_destroy(void *dev)
{
	virtio_net__destroy(dev);
}

static const struct virtio_slot_ops net_device_slot_ops = {
	.type = "virtio-net",
	.thread = SECCOMP_THREAD_DEVICE,
	.start = net_device_start,
	.metrics = net_device_metrics,
	.destroy = net_device_destroy,
};

int vm_net__device_init(struct vm *vm)
{
	struct virtio_net_params p = {
		.name = vm__virtio_name(vm, VIRTIO_SLOT_NET),
		.tap_fd = vm->net.tap.fd,
		.tap_offloads = vm->net.tap.offloads,
		.mem = &vm->mem,
		.irq = vm__virtio_irq(vm, VIRTIO_SLOT_NET),
	};
	struct virtio_net *n;
	int ret;

	if (vm->net.tap.fd < 0)
		return 0;
	_Static_assert(sizeof(p.mac) == sizeof(vm->cfg->net.mac), "MAC");
	memcpy(p.mac, vm->cfg->net.mac, sizeof(p.mac));
	ret = virtio_net__create(&n, &p);
	if (ret) {
		pr_err("%s (tap %s): %s", p.name, vm->net.tap.name,
		       ret == -EOPNOTSUPP ?
			       "the tap cannot do nonblocking reads "
			       "(RWF_NOWAIT)" :
			       strerror(-ret));
		return ret;
	}
	return vm__attach_virtio(vm, VIRTIO_SLOT_NET, virtio_net__device(n),
				 &net_device_slot_ops, n);
}

/*
 * The guest trusts the interception CA when the policy it boots with can
 * intercept (http grants, a hook) or the config asks for it
 * (Documentation/network.md, "The CA in the guest"). A policy set later
 * does not reach the guest's trust store: it is written at boot only.
 */
bool vm_net__guest_ca_required(const struct vm *vm)
{
	return netcfg__guest_ca_required(&vm->cfg->net, vm->net.policy);
}

int vm_net__guest_ca(const struct vm *vm, const char **pem, size_t *len,
		     char *hash, size_t hash_len)
{
	const uint8_t *der;
	size_t der_len;
	uint32_t h;
	int ret;

	if (!netcfg__guest_ca(&vm->cfg->net, vm->net.policy))
		return -ENOENT;
	ret = http_ca_pem(vm, pem, len);
	if (ret)
		return ret;
	hash[0] = '\0';
	tls_ca__cert_der(vm->net.http_tls.ca, &der, &der_len);
	ret = tls__subject_hash(der, der_len, &h);
	if (ret)
		pr_warn("net %s: the interception CA's subject has no OpenSSL "
			"hash here (%s): the guest's bundle trusts it, its "
			"hashed directory does not",
			vm->net.tap.name, strerror(-ret));
	else
		snprintf(hash, hash_len, "%08x", h);
	return 0;
}

bool vm_net__has_tap(const struct vm *vm)
{
	return vm->net.tap.fd >= 0;
}

/*
 * The proxy's netns thread under its own filter, then the proxy's and
 * the resolver's threads under filter; any started run.
 */
int vm_net__start(struct vm *vm, const struct sock_fprog *filter)
{
	int ret;

	if (vm->net.proxy) {
		ret = proxy__filter_ns_thread(
			vm->net.proxy,
			seccomp__filter(vm->seccomp, SECCOMP_THREAD_NETNS));
		if (ret) {
			pr_err("egress proxy: its netns thread's filter: %s",
			       strerror(-ret));
			return ret;
		}
		ret = proxy__start(vm->net.proxy, filter);
		if (ret) {
			pr_err("egress proxy: starting its thread: %s",
			       strerror(-ret));
			return ret;
		}
	}
	if (vm->net.dns) {
		ret = dns__start(vm->net.dns, filter);
		if (ret) {
			pr_err("dns: starting its thread: %s", strerror(-ret));
			return ret;
		}
	}
	return 0;
}

void vm_net__report(struct vm *vm)
{
	if (vm->net.proxy)
		proxy__report(vm->net.proxy);
	if (vm->net.dns)
		dns__report(vm->net.dns);
}
