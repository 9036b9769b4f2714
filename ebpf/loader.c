// SPDX-License-Identifier: GPL-2.0
/* The egress program's loader (see loader.h). */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/sockios.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <bpf/bpf.h>
#include <bpf/libbpf.h>

#include "lib/errf.h"
#include "lib/log.h"
#include "ebpf/egress.skel.h"
#include "ebpf/loader.h"

#define PREFIX_MIN 1
#define PREFIX_MAX 30 /* a /31 or /32 leaves no network and broadcast */
#define IPV4_BITS  32

/* Where the filter sits in the clsact ingress list; one of ours a tap. */
#define TC_HANDLE   1
#define TC_PRIORITY 1

#define NETNS_SELF "/proc/thread-self/ns/net"

struct egress {
	struct egress_bpf *skel;
	struct stat netns;  /* the VM netns: create's caller's */
	int ifindex;	    /* 0 until attached */
	bool created_qdisc; /* attach made the clsact qdisc: destroy drops it */
	unsigned int nr_cpus; /* per-CPU counters come in this many values */
};

static const char *const reason_names[EGRESS_NR_REASONS] = {
	[EGRESS_ARP_PASS] = "arp_pass",
	[EGRESS_DNS] = "dns",
	[EGRESS_TCP_ESTABLISHED] = "tcp_established",
	[EGRESS_TCP_PROXY] = "tcp_proxy",
	[EGRESS_UDP_PROXY] = "udp_proxy",
	[EGRESS_ARP_DROP] = "arp_drop",
	[EGRESS_NOT_IPV4] = "not_ipv4",
	[EGRESS_MALFORMED] = "malformed",
	[EGRESS_IP_OPTIONS] = "ip_options",
	[EGRESS_FRAGMENT] = "fragment",
	[EGRESS_SPOOFED] = "spoofed",
	[EGRESS_BROADCAST] = "broadcast",
	[EGRESS_OTHER_HOST] = "other_host",
	[EGRESS_BAD_DEST] = "bad_dest",
	[EGRESS_TO_GATEWAY_OTHER] = "to_gateway_other",
	[EGRESS_NOT_TCP_UDP] = "not_tcp_udp",
	[EGRESS_TCP_STRAY] = "tcp_stray",
	[EGRESS_TCP_REFUSED] = "tcp_refused",
	[EGRESS_NO_PROXY] = "no_proxy",
	[EGRESS_ASSIGN_FAILED] = "assign_failed",
};

static const char *const slot_names[EGRESS_NR_SLOTS] = {
	[EGRESS_SLOT_TCP] = "TCP listener",
	[EGRESS_SLOT_UDP] = "UDP socket",
};

const char *egress__reason_name(enum egress_reason reason)
{
	if ((unsigned int)reason >= EGRESS_NR_REASONS)
		return NULL;
	return reason_names[reason];
}

bool egress__reason_passes(enum egress_reason reason)
{
	return reason <= EGRESS_LAST_PASS;
}

int egress__prog_fd(const struct egress *e)
{
	return bpf_program__fd(e->skel->progs.egress);
}

/* libbpf's own lines (the verifier's log among them) are debug lines. */
__attribute__((format(printf, 2, 0))) static int
libbpf_print(enum libbpf_print_level level, const char *fmt, va_list ap)
{
	char line[1024];
	size_t len;

	if (!log__debug_enabled())
		return 0;
	vsnprintf(line, sizeof(line), fmt, ap);
	len = strlen(line);
	if (len && line[len - 1] == '\n')
		line[len - 1] = 0;
	pr_debug("%s", line);
	return 0;
}

static uint32_t prefix_mask(unsigned int prefix_len)
{
	return htonl(~0u << (IPV4_BITS - prefix_len));
}

/* A host of the subnet: neither its network nor its broadcast address. */
static bool is_host(struct in_addr a, uint32_t mask)
{
	uint32_t host = a.s_addr & ~mask;

	return host && host != ~mask;
}

static int check_config(const struct egress_config *cfg, char *err,
			size_t errlen)
{
	char gw[INET_ADDRSTRLEN], guest[INET_ADDRSTRLEN];
	uint32_t mask;

	inet_ntop(AF_INET, &cfg->gateway, gw, sizeof(gw));
	inet_ntop(AF_INET, &cfg->guest, guest, sizeof(guest));
	if (cfg->prefix_len < PREFIX_MIN || cfg->prefix_len > PREFIX_MAX)
		return errf(err, errlen, -EINVAL,
			    "egress: prefix length %u not in %d..%d",
			    cfg->prefix_len, PREFIX_MIN, PREFIX_MAX);
	mask = prefix_mask(cfg->prefix_len);
	if ((cfg->gateway.s_addr & mask) != (cfg->guest.s_addr & mask) ||
	    !is_host(cfg->gateway, mask) || !is_host(cfg->guest, mask) ||
	    cfg->gateway.s_addr == cfg->guest.s_addr)
		return errf(
			err, errlen, -EINVAL,
			"egress: gateway %s, guest %s: not two hosts of a /%u",
			gw, guest, cfg->prefix_len);
	return 0;
}

static int netns_of_fd(int fd, struct stat *st)
{
	int ns = ioctl(fd, SIOCGSKNS);
	int ret = 0;

	if (ns < 0)
		return -errno;
	if (fstat(ns, st))
		ret = -errno;
	close(ns);
	return ret;
}

static bool same_file(const struct stat *a, const struct stat *b)
{
	return a->st_dev == b->st_dev && a->st_ino == b->st_ino;
}

int egress__create(struct egress **out, const struct egress_config *cfg,
		   char *err, size_t errlen)
{
	struct egress *e;
	int ret, ncpus;

	*out = NULL;
	ret = check_config(cfg, err, errlen);
	if (ret)
		return ret;
	e = calloc(1, sizeof(*e));
	if (!e)
		return errf(err, errlen, -ENOMEM, "egress: out of memory");
	if (stat(NETNS_SELF, &e->netns)) {
		ret = errf(err, errlen, -errno, "egress: %s: %s", NETNS_SELF,
			   strerror(errno));
		goto out_destroy;
	}
	ncpus = libbpf_num_possible_cpus();
	if (ncpus < 0) {
		ret = errf(err, errlen, ncpus, "egress: possible CPUs: %s",
			   strerror(-ncpus));
		goto out_destroy;
	}
	e->nr_cpus = ncpus;

	libbpf_set_print(libbpf_print);
	e->skel = egress_bpf__open();
	if (!e->skel) {
		ret = errf(err, errlen, -errno, "egress: open: %s",
			   strerror(errno));
		goto out_destroy;
	}
	e->skel->rodata->gateway_ip = cfg->gateway.s_addr;
	e->skel->rodata->guest_ip = cfg->guest.s_addr;
	e->skel->rodata->netmask = prefix_mask(cfg->prefix_len);
	ret = egress_bpf__load(e->skel);
	if (ret) {
		ret = errf(err, errlen, ret,
			   "egress: load: %s (libbpf's log with --verbose)",
			   strerror(-ret));
		goto out_destroy;
	}
	*out = e;
	return 0;

out_destroy:
	egress__destroy(e);
	return ret;
}

int egress__attach(struct egress *e, int ifindex, char *err, size_t errlen)
{
	LIBBPF_OPTS(bpf_tc_hook, hook, .ifindex = ifindex,
		    .attach_point = BPF_TC_INGRESS);
	LIBBPF_OPTS(bpf_tc_opts, opts, .handle = TC_HANDLE,
		    .priority = TC_PRIORITY, .prog_fd = egress__prog_fd(e));
	struct stat here;
	bool created = true;
	int ret;

	if (e->ifindex)
		return errf(err, errlen, -EEXIST,
			    "egress: attached already (ifindex %d)",
			    e->ifindex);
	if (stat(NETNS_SELF, &here) || !same_file(&here, &e->netns))
		return errf(err, errlen, -EINVAL,
			    "egress: attach from another netns than create's");
	ret = bpf_tc_hook_create(&hook);
	if (ret == -EEXIST) {
		created = false;
	} else if (ret) {
		return errf(err, errlen, ret,
			    "egress: ifindex %d: clsact qdisc: %s", ifindex,
			    strerror(-ret));
	}
	ret = bpf_tc_attach(&hook, &opts);
	if (ret) {
		errf(err, errlen, ret, "egress: ifindex %d: tc ingress: %s",
		     ifindex, strerror(-ret));
		if (created) {
			hook.attach_point = BPF_TC_INGRESS | BPF_TC_EGRESS;
			bpf_tc_hook_destroy(&hook);
		}
		return ret;
	}
	e->ifindex = ifindex;
	e->created_qdisc = created;
	return 0;
}

static void detach(struct egress *e)
{
	LIBBPF_OPTS(bpf_tc_hook, hook, .ifindex = e->ifindex,
		    .attach_point = BPF_TC_INGRESS);
	LIBBPF_OPTS(bpf_tc_opts, opts, .handle = TC_HANDLE,
		    .priority = TC_PRIORITY);
	int ret;

	/* -ENODEV, -ENOENT, -EINVAL: the interface (and filter) went first. */
	ret = bpf_tc_detach(&hook, &opts);
	if (ret)
		pr_debug("egress: ifindex %d: detach: %s", e->ifindex,
			 strerror(-ret));
	if (e->created_qdisc) {
		hook.attach_point = BPF_TC_INGRESS | BPF_TC_EGRESS;
		ret = bpf_tc_hook_destroy(&hook);
		if (ret)
			pr_debug("egress: ifindex %d: clsact qdisc: %s",
				 e->ifindex, strerror(-ret));
	}
	e->ifindex = 0;
}

static int sockopt_int(int fd, int level, int name, int *val)
{
	socklen_t len = sizeof(*val);

	return getsockopt(fd, level, name, val, &len) ? -errno : 0;
}

/* What a proxy socket of slot must be; 0 or -EINVAL with why. */
static int check_proxy(const struct egress *e, enum egress_slot slot, int fd,
		       char *err, size_t errlen)
{
	const char *what = slot_names[slot];
	int domain, type, listening, transparent, origdst, ret;
	struct stat ns;

	ret = sockopt_int(fd, SOL_SOCKET, SO_DOMAIN, &domain);
	if (!ret)
		ret = sockopt_int(fd, SOL_SOCKET, SO_TYPE, &type);
	if (!ret)
		ret = sockopt_int(fd, SOL_SOCKET, SO_ACCEPTCONN, &listening);
	if (!ret)
		ret = sockopt_int(fd, SOL_IP, IP_TRANSPARENT, &transparent);
	if (!ret)
		ret = sockopt_int(fd, SOL_IP, IP_RECVORIGDSTADDR, &origdst);
	if (ret)
		return errf(err, errlen, ret, "egress: %s (fd %d): %s", what,
			    fd, strerror(-ret));
	if (domain != AF_INET)
		return errf(err, errlen, -EINVAL,
			    "egress: %s (fd %d): not an IPv4 socket", what, fd);
	if (slot == EGRESS_SLOT_TCP && (type != SOCK_STREAM || !listening))
		return errf(err, errlen, -EINVAL,
			    "egress: %s (fd %d): not a listening TCP socket",
			    what, fd);
	if (slot == EGRESS_SLOT_UDP && type != SOCK_DGRAM)
		return errf(err, errlen, -EINVAL,
			    "egress: %s (fd %d): not a UDP socket", what, fd);
	if (!transparent)
		return errf(err, errlen, -EINVAL,
			    "egress: %s (fd %d): no IP_TRANSPARENT", what, fd);
	/* Without it the vmm could not tell where a datagram was going. */
	if (slot == EGRESS_SLOT_UDP && !origdst)
		return errf(err, errlen, -EINVAL,
			    "egress: %s (fd %d): no IP_RECVORIGDSTADDR", what,
			    fd);
	ret = netns_of_fd(fd, &ns);
	if (ret)
		return errf(err, errlen, ret, "egress: %s (fd %d): netns: %s",
			    what, fd, strerror(-ret));
	if (!same_file(&ns, &e->netns))
		return errf(err, errlen, -EINVAL,
			    "egress: %s (fd %d): not in the VM netns", what,
			    fd);
	return 0;
}

int egress__set_proxy(struct egress *e, enum egress_slot slot, int fd,
		      char *err, size_t errlen)
{
	uint32_t key = slot;
	uint64_t value = (uint64_t)fd;
	int ret;

	if ((unsigned int)slot >= EGRESS_NR_SLOTS)
		return errf(err, errlen, -EINVAL, "egress: no proxy slot %d",
			    slot);
	ret = check_proxy(e, slot, fd, err, errlen);
	if (ret)
		return ret;
	ret = bpf_map__update_elem(e->skel->maps.proxy_socks, &key, sizeof(key),
				   &value, sizeof(value), BPF_ANY);
	if (ret)
		return errf(err, errlen, ret, "egress: %s (fd %d): map: %s",
			    slot_names[slot], fd, strerror(-ret));
	return 0;
}

int egress__clear_proxy(struct egress *e, enum egress_slot slot, char *err,
			size_t errlen)
{
	uint32_t key = slot;
	int ret;

	if ((unsigned int)slot >= EGRESS_NR_SLOTS)
		return errf(err, errlen, -EINVAL, "egress: no proxy slot %d",
			    slot);
	/* A sockmap says -EINVAL for an empty slot (the key is good). */
	ret = bpf_map__delete_elem(e->skel->maps.proxy_socks, &key, sizeof(key),
				   0);
	if (ret && ret != -EINVAL && ret != -ENOENT)
		return errf(err, errlen, ret, "egress: %s: map: %s",
			    slot_names[slot], strerror(-ret));
	return 0;
}

void egress__syn_check(struct egress *e, bool on)
{
	/*
	 * .bss is mapped into this process: a store, no syscall. Release:
	 * the trie's updates (syscalls) are done before the program can
	 * see the check on.
	 */
	__atomic_store_n(&e->skel->bss->syn_check, on ? 1 : 0,
			 __ATOMIC_RELEASE);
}

int egress__syn_clear(struct egress *e, char *err, size_t errlen)
{
	const struct bpf_map *map = e->skel->maps.syn_grants;
	struct egress_syn_key key;
	int ret;

	egress__syn_check(e, false);
	/* The first key each time: the one before it is gone. */
	while (!(ret = bpf_map__get_next_key(map, NULL, &key, sizeof(key)))) {
		ret = bpf_map__delete_elem(map, &key, sizeof(key), 0);
		if (ret)
			break;
	}
	if (ret != -ENOENT)
		return errf(err, errlen, ret, "egress: SYN grants: clear: %s",
			    strerror(-ret));
	return 0;
}

int egress__syn_put(struct egress *e, const struct egress_syn_key *key,
		    const struct egress_syn_ports *v, char *err, size_t errlen)
{
	int ret;

	if (v->nr > EGRESS_SYN_MAX_RANGES ||
	    key->prefixlen > EGRESS_SYN_ADDR_BITS)
		return errf(err, errlen, -EINVAL,
			    "egress: SYN grants: %u ranges at a /%u", v->nr,
			    key->prefixlen);
	ret = bpf_map__update_elem(e->skel->maps.syn_grants, key, sizeof(*key),
				   v, sizeof(*v), BPF_ANY);
	/* A full trie says -ENOSPC. */
	if (ret)
		return errf(err, errlen, ret, "egress: SYN grants: %s",
			    strerror(-ret));
	return 0;
}

int egress__syn_get(struct egress *e, uint32_t addr, struct egress_syn_ports *v)
{
	struct egress_syn_key key = { .prefixlen = EGRESS_SYN_ADDR_BITS,
				      .addr = addr };

	return bpf_map__lookup_elem(e->skel->maps.syn_grants, &key, sizeof(key),
				    v, sizeof(*v), 0);
}

int egress__read_counters(struct egress *e, uint64_t counts[EGRESS_NR_REASONS],
			  char *err, size_t errlen)
{
	size_t size = e->nr_cpus * sizeof(uint64_t);
	uint64_t *percpu = malloc(size);
	int ret = 0;

	if (!percpu)
		return errf(err, errlen, -ENOMEM, "egress: out of memory");
	for (uint32_t key = 0; key < EGRESS_NR_REASONS; key++) {
		ret = bpf_map__lookup_elem(e->skel->maps.verdicts, &key,
					   sizeof(key), percpu, size, 0);
		if (ret) {
			errf(err, errlen, ret, "egress: counter %s: %s",
			     reason_names[key], strerror(-ret));
			break;
		}
		counts[key] = 0;
		for (unsigned int cpu = 0; cpu < e->nr_cpus; cpu++)
			counts[key] += percpu[cpu];
	}
	free(percpu);
	return ret;
}

void egress__destroy(struct egress *e)
{
	if (!e)
		return;
	if (e->ifindex)
		detach(e);
	egress_bpf__destroy(e->skel);
	free(e);
}
