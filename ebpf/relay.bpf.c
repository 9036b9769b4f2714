// SPDX-License-Identifier: GPL-2.0
/*
 * The kernel relay of a proxy's granted TCP flows (relay.h, loader in
 * relay.c; Documentation/network.md, "The kernel relay"): two sockhashes
 * keyed by a socket's cookie, and a stream verdict program attached to
 * the first. relay_in holds the sockets whose received bytes the kernel
 * relays (each under its own cookie); relay_out holds, under the same
 * cookie, the socket they go out on. Each segment's bytes that a socket
 * of relay_in receives are sent on by the kernel on its relay_out peer,
 * never reaching the vmm's thread. relay_out has no program: a socket
 * only there (the upstream end of a flow relayed one way) is read and
 * written as any other, but for what the kernel sends on it. A socket
 * the maps no longer hold (removed, or closed) gets nothing more relayed.
 */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

/* The loader sets both sizes: two per pair. */
struct {
	__uint(type, BPF_MAP_TYPE_SOCKHASH);
	__uint(max_entries, 2);
	__type(key, __u64);   /* a socket's cookie (SO_COOKIE) */
	__type(value, __u64); /* that socket */
} relay_in SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_SOCKHASH);
	__uint(max_entries, 2);
	__type(key, __u64);   /* the cookie of a socket in relay_in */
	__type(value, __u64); /* the socket its bytes go out on */
} relay_out SEC(".maps");

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
	return bpf_sk_redirect_hash(skb, &relay_out, &cookie, 0);
}

char LICENSE[] SEC("license") = "GPL";
