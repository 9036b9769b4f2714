// network.policy(...) (seed 003, "network.policy(onConnectionRequest)"),
// served as the VM's policy hook (Documentation/network.md, "The hook"):
// policy.ts turns each hook question into a SandboxConnection for the
// callback and its grant into the answer; hook.ts is the socket. Without
// a network option a VM has no network device at all (every flow denied).

import { absolutePath, integer, record } from "../validate.js";

export type { AddressClass, SandboxAddress } from "./address.js";
export { addressClass } from "./address.js";
export { SandboxHeaders } from "./headers.js";
export type {
	DnsConnectionMatch, EndpointMatcher, HttpConnectionMatch, HttpMiddleware, OnConnectionRequest,
	SandboxConnection, SandboxHttpDestination, SandboxHttpRequest, TransportMatch,
} from "./policy.js";
import type { OnConnectionRequest } from "./policy.js";

export interface NetworkPolicyOptions {
	/** How long the callback (and each middleware call) may take before
	 * its flow or request is denied, 1 to 9500 ms (default 5000: a callback
	 * often asks another service, as the seed's token broker does). */
	timeoutMs?: number;
	/** PEM file of the CAs the intercepted flows' upstream servers must
	 * chain to (default: the host's trust store). */
	upstreamCaBundle?: string;
}

export interface NetworkPolicy {
	readonly kind: "policy";
	readonly onConnectionRequest: OnConnectionRequest;
	readonly timeoutMs: number;
	readonly upstreamCaBundle: string | undefined;
}

/** The most the vmm waits for a hook answer (hook.timeoutMs). */
const VMM_HOOK_MAX_MS = 10_000;
/** The vmm waits this much longer than the callback may take, so the
 * SDK's own deny (and its warning), not the vmm's timeout, answers a slow
 * callback, even when this process is slow to be scheduled. */
export const HOOK_SLACK_MS = 500;
/** How long a callback may take by default. */
const DEFAULT_TIMEOUT_MS = 5000;

function policy(onConnectionRequest: OnConnectionRequest, options: NetworkPolicyOptions = {}): NetworkPolicy {
	const what = "network.policy";
	if (typeof onConnectionRequest !== "function")
		throw new TypeError(`${what}: onConnectionRequest must be a function`);
	const o = record(`${what}: options`, options, ["timeoutMs", "upstreamCaBundle"]);
	const timeoutMs = o["timeoutMs"] === undefined ? DEFAULT_TIMEOUT_MS
		: integer(`${what}: timeoutMs`, o["timeoutMs"], 1, VMM_HOOK_MAX_MS - HOOK_SLACK_MS);
	const ca = o["upstreamCaBundle"] === undefined ? undefined : absolutePath(`${what}: upstreamCaBundle`, o["upstreamCaBundle"]);
	return Object.freeze({ kind: "policy", onConnectionRequest, timeoutMs, upstreamCaBundle: ca });
}

export const network = Object.freeze({ policy });
