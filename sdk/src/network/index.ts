// network.policy(...) (seed 003, "network.policy(onConnectionRequest)").
//
// Served next round as the VM's policy hook (Documentation/network.md,
// "The hook", with issue 31's grant-http and grant-dns verdicts): each
// hook question becomes a SandboxConnection given to the callback, its
// grants the answer. The types below are that round's public surface;
// network.policy(...) throws a NotSupportedError until then. Without a
// network option a VM has no network device at all (every flow denied).

import { NotSupportedError } from "../errors.js";

export interface SandboxAddress {
	readonly ip: string;
	readonly port: number;
	isLoopback(): boolean;
	isPrivate(): boolean;
	isLinkLocal(): boolean;
	isMulticast(): boolean;
	isBroadcast(): boolean;
	isDocumentation(): boolean;
	isReserved(): boolean;
	isPublicInternet(): boolean;
}

export type EndpointMatcher =
	| string
	| { ip?: string; port?: number }
	| ((endpoint: SandboxAddress) => boolean);

export interface TransportMatch {
	accept(): boolean;
}

export interface DnsConnectionMatch {
	accept(options: { resolvers: readonly string[] }): boolean;
}

export interface SandboxHttpDestination {
	readonly sourceIp: string;
	readonly sourcePort: number;
	readonly originalIp: string;
	readonly originalPort: number;
	readonly hostname: string | undefined;
}

/** The request HTTP middleware sees (seed 003, "SandboxHttpRequest"). */
export interface SandboxHttpRequest {
	readonly protocol: "http/1.1" | "h2";
	readonly url: URL;
	readonly method: string;
	/** Mutable: edits apply to the upstream request only. */
	readonly headers: Headers;
	readonly destination: SandboxHttpDestination;
	readonly tls?: { readonly sni: string | undefined; readonly alpn: string | undefined };
}

export type HttpMiddleware = (request: SandboxHttpRequest) => void | Promise<void>;

export interface HttpConnectionMatch {
	readonly hostname: string;
	accept(middleware?: HttpMiddleware): boolean;
}

export interface SandboxConnection {
	readonly protocol: "tcp" | "udp";
	readonly src: SandboxAddress;
	readonly dst: SandboxAddress;
	accept(): void;
	matchDns(): DnsConnectionMatch | undefined;
	matchTcp(matcher: EndpointMatcher): TransportMatch | undefined;
	matchUdp(matcher: EndpointMatcher): TransportMatch | undefined;
	matchHttp(matcher: string | ((candidate: { hostname: string }) => boolean)): HttpConnectionMatch | undefined;
}

export type OnConnectionRequest = (conn: SandboxConnection) => void | Promise<void>;

export interface NetworkPolicy {
	readonly kind: "policy";
	readonly onConnectionRequest: OnConnectionRequest;
}

function policy(_onConnectionRequest: OnConnectionRequest): NetworkPolicy {
	throw new NotSupportedError("network.policy",
		"policy callbacks come with Kiln's hook verdicts for HTTP and DNS (issue 31); " +
		"a sandbox without network has no network device (every flow denied)");
}

export const network = Object.freeze({ policy });
