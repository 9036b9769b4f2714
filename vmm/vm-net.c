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
#include "net/status.h"
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

	vm->net.cfg = n;
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
	struct vm_net *n = opaque;

	pthread_mutex_lock(&n->policy_lock);
	pthread_mutex_lock(&n->bindings_lock);
	net_policy__decide(n->policy, f, n->bindings, d);
	pthread_mutex_unlock(&n->bindings_lock);
	pthread_mutex_unlock(&n->policy_lock);
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
	struct vm_net *n = opaque;

	pthread_mutex_lock(&n->policy_lock);
	pthread_mutex_lock(&n->bindings_lock);
	net_policy__decide_http(n->policy, f, host, verified, n->bindings, d);
	pthread_mutex_unlock(&n->bindings_lock);
	pthread_mutex_unlock(&n->policy_lock);
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
	struct vm_net *n;
	const char *host; /* a binding: the name, normalized */
	const uint32_t *addrs;
	unsigned int nr;
	char err[CONFIG_ERR_LEN];
};

static int syn_refill_ns(void *arg)
{
	struct syn_call *c = arg;
	struct vm_net *n = c->n;
	struct net_synmap m;
	int ret;

	pthread_mutex_lock(&n->policy_lock);
	pthread_mutex_lock(&n->bindings_lock);
	ret = net_synmap__build(&m, n->policy, n->bindings);
	pthread_mutex_unlock(&n->bindings_lock);
	pthread_mutex_unlock(&n->policy_lock);
	if (ret)
		return errf(c->err, sizeof(c->err), ret, "%s", strerror(-ret));
	ret = net_synmap__apply(&m, proxy__egress(n->proxy), c->err,
				sizeof(c->err));
	net_synmap__release(&m);
	return ret;
}

/*
 * A filter that could not be written stays off: every SYN goes to the
 * proxy, which still denies what the policy denies (reset after the
 * handshake, as before the filter).
 */
static void syn_refill(struct vm_net *n)
{
	struct syn_call c = { .n = n };
	int ret;

	ret = proxy__on_ns_thread(n->proxy, syn_refill_ns, &c);
	if (ret)
		pr_warn("net %s: the SYN filter is off, denied TCP flows "
			"are reset after the handshake: %s",
			n->tap.name, c.err);
}

static int syn_bind_ns(void *arg)
{
	struct syn_call *c = arg;
	struct vm_net *n = c->n;
	struct egress_syn_ports ports = { 0 };
	int ret = 0;

	pthread_mutex_lock(&n->policy_lock);
	net_synmap__host_ports(n->policy, c->host, &ports);
	pthread_mutex_unlock(&n->policy_lock);
	for (unsigned int i = 0; !ret && i < c->nr; i++)
		ret = net_synmap__bind(proxy__egress(n->proxy), c->addrs[i],
				       &ports, c->err, sizeof(c->err));
	return ret;
}

/* The resolver's bindings, before its answer reaches the guest. */
static void syn_bound(void *opaque, const char *host, const uint32_t *addrs,
		      unsigned int nr)
{
	char name[NET_HOSTNAME_MAX + 1];
	struct vm_net *n = opaque;
	struct syn_call c = { .n = n, .host = name, .addrs = addrs, .nr = nr };
	bool wildcard;
	int ret;

	if (net_hostname__normalize(host, name, false, &wildcard))
		return; /* not bound either */
	ret = proxy__on_ns_thread(n->proxy, syn_bind_ns, &c);
	if (ret && !n->syn_warned) {
		n->syn_warned = true;
		pr_warn("net %s: the SYN filter is off until the next "
			"net.setPolicy, denied TCP flows are reset after the "
			"handshake (said once): %s",
			n->tap.name, c.err);
	}
}

/*
 * net.check: the decision the proxy would take now (the same function,
 * under the same locks in the same order), nothing opened.
 */
int vm_net__flow_check(struct vm_net *n, const struct api_flow_check *f,
		       struct net_decision *d, char *err, size_t len)
{
	int ret;

	if (!n->proxy)
		return errf(err, len, -EOPNOTSUPP,
			    "this VM has no egress proxy (--net auto or "
			    "netns:PATH)");
	pthread_mutex_lock(&n->policy_lock);
	pthread_mutex_lock(&n->bindings_lock);
	ret = net_policy__check(
		n->policy, f->udp ? IPPROTO_UDP : IPPROTO_TCP, f->addr, f->port,
		f->hostname[0] ? f->hostname : NULL, n->bindings, d);
	pthread_mutex_unlock(&n->bindings_lock);
	pthread_mutex_unlock(&n->policy_lock);
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
int vm_net__policy_replace(struct vm_net *n, json_t *obj, char *err, size_t len)
{
	struct net_policy *np, *old;
	int ret;

	if (!n->proxy)
		return errf(err, len, -EOPNOTSUPP,
			    "this VM has no egress proxy (--net auto or "
			    "netns:PATH)");
	ret = net_policy__parse(obj, "policy", &np, err, len);
	if (ret)
		return ret;
	/* The tap's host side stays denied, whatever the new one grants. */
	net_policy__set_gateway(np, n->cfg->gateway);
	pthread_mutex_lock(&n->policy_lock);
	old = n->policy_owned;
	n->policy = n->policy_owned = np;
	if (n->dns)
		dns__set_resolvers(n->dns, np);
	pthread_mutex_unlock(&n->policy_lock);
	net_policy__free(old);
	/* What the new policy grants connects once this returns. */
	syn_refill(n);
	proxy__recheck(n->proxy);
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
static int http_tls_init(struct vm_net *n)
{
	const char *bundle = n->cfg->ca_bundle;
	struct intercept_tls *t = &n->http_tls;
	struct tls_client_params cp = { .ca_bundle = bundle };
	struct tls_ca_params cap = { 0 };
	char err[CONFIG_ERR_LEN];
	int ret;

	ret = tls_ca__create(&t->ca, &cap, err, sizeof(err));
	if (!ret)
		ret = tls_server__create(&t->server, t->ca, err, sizeof(err));
	if (ret) {
		pr_err("net %s: the interception CA: %s", n->tap.name, err);
		return ret;
	}
	ret = tls_client__create(&t->client, &cp, err, sizeof(err));
	if (ret && bundle) {
		pr_err("net %s: --net-ca-bundle: %s", n->tap.name, err);
		return ret;
	}
	if (ret)
		pr_warn("net %s: %s: the http grants' TLS flows will be "
			"denied",
			n->tap.name, err);
	return 0;
}

static void http_tls_exit(struct vm_net *n)
{
	struct intercept_tls *t = &n->http_tls;

	tls_client__destroy(t->client);
	tls_server__destroy(t->server);
	tls_ca__destroy(t->ca);
	*t = (struct intercept_tls){ 0 };
}

static int http_ca_pem(const struct vm_net *n, const char **pem, size_t *len)
{
	if (!n->http_tls.ca)
		return -ENOENT;
	tls_ca__cert_pem(n->http_tls.ca, pem, len);
	return 0;
}

/*
 * The proxy's sockets in the VM netns and the egress program on the tap,
 * before KVM is touched and before the seccomp filter (bpf(), setns()).
 * Its thread starts with the devices'. Undone after the device is gone.
 */
static int proxy_init(struct vm_net *n)
{
	const struct net_config *c = n->cfg;
	struct proxy_params p = {
		.netns_fd = n->netns_fd,
		.ifname = n->tap.name,
		.egress = { .gateway.s_addr = c->gateway,
			    .guest.s_addr = c->address,
			    .prefix_len = c->prefix },
		.decide = decide_by_policy,
		.decide_http = decide_http_by_policy,
		.decide_opaque = n,
		.relay = (enum proxy_relay)c->relay,
	};
	char err[CONFIG_ERR_LEN];
	int ret;

	pthread_mutex_init(&n->policy_lock, NULL);
	n->policy = c->policy;
	if (n->netns_fd < 0)
		return 0; /* no network, or the orchestrator's tap */
	n->bindings = net_bindings__create(NULL, NULL);
	if (!n->bindings) {
		pr_err("net %s: the DNS bindings: %s", n->tap.name,
		       strerror(ENOMEM));
		return -ENOMEM;
	}
	/* The namespace launcher made it before its clone. */
	ret = n->http_tls.ca ? 0 : http_tls_init(n);
	if (ret)
		return ret;
	p.tls = n->http_tls;
	/*
	 * What the proxy may hold at most (PROXY_MAX_FDS: sockets, relay
	 * pipes, the hook's connection).
	 */
	nofile__room(PROXY_MAX_FDS);
	ret = proxy__create(&n->proxy, &p, err, sizeof(err));
	if (ret) {
		pr_err("net %s: %s", n->tap.name, err);
		return ret;
	}
	syn_refill(n);
	return 0;
}

/* The bindings and the TLS objects outlive the proxy's thread. */
static void proxy_exit(struct vm_net *n)
{
	proxy__destroy(n->proxy);
	n->proxy = NULL;
	http_tls_exit(n);
	net_policy__free(n->policy_owned);
	n->policy_owned = NULL;
	n->policy = NULL;
	pthread_mutex_destroy(&n->policy_lock);
	net_bindings__destroy(n->bindings);
	n->bindings = NULL;
}

int vm_net__proxy_init(struct vm *vm)
{
	return proxy_init(&vm->net);
}

void vm_net__proxy_exit(struct vm *vm)
{
	proxy_exit(&vm->net);
}

int vm_net__set_policy(struct vm *vm, json_t *obj, char *err, size_t len)
{
	return vm_net__policy_replace(&vm->net, obj, err, len);
}

/* The proxy's counters and the egress program's (net/status.h). */
json_t *vm_net__status(struct vm_net *n)
{
	uint64_t egress[EGRESS_NR_REASONS];
	char err[CONFIG_ERR_LEN] = "";
	struct proxy_stats s;
	int ret;

	if (!n->proxy)
		return net_status__none();
	proxy__stats(n->proxy, &s);
	ret = proxy__egress_counters(n->proxy, egress, err, sizeof(err));
	return net_status__json(&s, ret ? NULL : egress, err);
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
static int dns_init(struct vm_net *n)
{
	const struct net_config *c = n->cfg;
	struct dns_params p = {
		.netns_fd = n->netns_fd,
		.gateway.s_addr = c->gateway,
		.policy = c->policy,
		.bindings = n->bindings,
		.bindings_lock = &n->bindings_lock,
		.bound = syn_bound,
		.bound_opaque = n,
	};
	char err[CONFIG_ERR_LEN];
	int ret;

	if (!n->proxy)
		return 0;
	/* A socket per query upstream, and per guest connection. */
	nofile__room(DNS_MAX_PENDING + DNS_MAX_TCP_CONNS);
	ret = dns__create(&n->dns, &p, err, sizeof(err));
	if (ret)
		pr_err("net %s: %s", n->tap.name, err);
	return ret;
}

static void dns_exit(struct vm_net *n)
{
	dns__destroy(n->dns);
	n->dns = NULL;
}

int vm_net__dns_init(struct vm *vm)
{
	return dns_init(&vm->net);
}

void vm_net__dns_exit(struct vm *vm)
{
	dns_exit(&vm->net);
}

/* ---- the namespace launcher's link -------------------------------------- */

int vm_net__sandbox_prepare(struct vm_net *n, const struct net_config *c)
{
	n->cfg = c;
	return http_tls_init(n);
}

int vm_net__sandbox_ca(const struct vm_net *n, const char **pem, size_t *len,
		       bool *required)
{
	if (!n->cfg || !netcfg__guest_ca(n->cfg, n->cfg->policy))
		return -ENOENT;
	*required = netcfg__guest_ca_required(n->cfg, n->cfg->policy);
	return http_ca_pem(n, pem, len);
}

int vm_net__sandbox_init(struct vm_net *n, const struct net_config *c,
			 int sandbox_ns_fd, const char *peer_name)
{
	struct netns_params p = {
		.path = c->netns_path, /* NULL for auto: a new one */
		.tap_name = NET_TAP_NAME,
		.mtu = (unsigned int)c->mtu,
		.host_addr = c->gateway,
		.prefix = c->prefix,
	};
	struct netns_veth v = {
		.peer_ns_fd = sandbox_ns_fd,
		.peer_name = peer_name,
		.peer_mac = c->mac,
	};
	char err[CONFIG_ERR_LEN];
	int ret;

	_Static_assert(sizeof(c->mac) == NETNS_MAC_LEN, "MAC");
	n->cfg = c;
	ret = netns__create_veth(&p, &v, &n->netns_fd, err, sizeof(err));
	if (ret) {
		pr_err("%s", err);
		return ret;
	}
	snprintf(n->tap.name, sizeof(n->tap.name), "%s", NET_TAP_NAME);
	ret = proxy_init(n);
	if (!ret)
		ret = dns_init(n);
	return ret;
}

/*
 * No seccomp filter: the namespace launcher's vmm runs without one
 * (Documentation/security.md, "Namespace isolation").
 */
int vm_net__sandbox_start(struct vm_net *n)
{
	int ret = proxy__start(n->proxy, NULL);

	if (ret) {
		pr_err("egress proxy: starting its thread: %s", strerror(-ret));
		return ret;
	}
	ret = dns__start(n->dns, NULL);
	if (ret)
		pr_err("dns: starting its thread: %s", strerror(-ret));
	return ret;
}

void vm_net__sandbox_exit(struct vm_net *n)
{
	if (n->netns_fd < 0) {
		http_tls_exit(n); /* prepared, or nothing */
		return;
	}
	dns_exit(n);
	proxy_exit(n);
	close(n->netns_fd);
	n->netns_fd = -1;
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
	ret = http_ca_pem(&vm->net, pem, len);
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
