// SPDX-License-Identifier: GPL-2.0
/*
 * The kernel relay of a proxy's granted TCP flows (relay.h, loader in
 * relay.c; Documentation/network.md, "The kernel relay"): a sockhash
 * whose key is a socket's cookie and whose value is its peer, and a
 * stream verdict program on the map. Each segment's bytes that one side
 * of a flow receives are sent on by the kernel on the other side, never
 * reaching the vmm's thread. A socket the map no longer holds (removed,
 * or closed) gets nothing more relayed.
 */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

struct {
	__uint(type, BPF_MAP_TYPE_SOCKHASH);
	__uint(max_entries, 2); /* the loader sets two per pair */
	__type(key, __u64);	/* a socket's cookie (SO_COOKIE) */
	__type(value, __u64);	/* its peer's socket */
} relay_peers SEC(".maps");

SEC("sk_skb/stream_verdict")
int relay_verdict(struct __sk_buff *skb)
{
	__u64 cookie = bpf_get_socket_cookie(skb);

	/*
	 * A segment without bytes (a FIN's) stays here: the vmm sends the
	 * FIN on once the bytes before it are out. Sent on empty, some
	 * kernels take the peer's nothing-written for a broken pipe.
	 */
	if (!skb->len)
		return SK_DROP;
	/* Out on the peer's side (flags 0: its egress); SK_DROP if none. */
	return bpf_sk_redirect_hash(skb, &relay_peers, &cookie, 0);
}

char LICENSE[] SEC("license") = "GPL";
