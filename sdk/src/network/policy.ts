// network.policy(...)'s callback turned into hook answers
// (Documentation/network.md, "The hook"; the flow, DNS and request
// questions of issue 31). Pure: a question in, an answer out; the socket
// is hook.ts's.
//
// Every event the vmm puts to the hook becomes one SandboxConnection:
//
//   flow question {"id", "proto", "src", "dst", "class", "hostnames"}
//     conn.accept() / matchTcp / matchUdp ...accept()   -> "grant"
//     matchHttp(...).accept(middleware?)                  -> "grant-http"
//       ("tls": "auto"; "host": the matched name; "ask": "request" with
//       middleware, else "connection": no request is asked)
//   DNS question {"id", "type": "dns", "proto", "src", "dst", "name", "qtype"}
//     matchDns().accept({resolvers})                      -> "grant-dns"
//   anything else, a throw, or no settle by the deadline  -> "deny"
//
// A request question {"type": "http", "flow": F, ...} goes to the
// middleware the callback gave flow F's grant-http; its header edits are
// the answer's "set" and "remove".

import { parseEndpoint, sandboxAddress } from "./address.js";
import type { SandboxAddress } from "./address.js";
import { SandboxHeaders } from "./headers.js";

export type EndpointMatcher =
	| string
	| { ip?: string; port?: number }
	| ((endpoint: SandboxAddress) => boolean);

export interface TransportMatch {
	/** Grants the raw flow; true when this became the decision. */
	accept(): boolean;
}

export interface DnsConnectionMatch {
	readonly name: string;
	readonly qtype: string;
	/** Forwards the query to these resolvers ("A.B.C.D" or
	 * "A.B.C.D:PORT"); true when this became the decision. */
	accept(options: { resolvers: readonly string[] }): boolean;
}

export interface SandboxHttpDestination {
	readonly sourceIp: string;
	readonly sourcePort: number;
	readonly originalIp: string;
	readonly originalPort: number;
	/** The trusted hostname (from this VM's DNS or the TLS server name
	 * bound to the destination), never the guest's Host header. */
	readonly hostname: string | undefined;
}

/** The request HTTP middleware sees (seed 003, "SandboxHttpRequest"). */
export interface SandboxHttpRequest {
	readonly protocol: "http/1.1" | "h2";
	readonly url: URL;
	readonly method: string;
	/** Mutable: edits apply to the upstream request only. */
	readonly headers: SandboxHeaders;
	readonly destination: SandboxHttpDestination;
	readonly tls?: { readonly sni: string | undefined; readonly alpn: string | undefined };
}

export type HttpMiddleware = (request: SandboxHttpRequest) => void | Promise<void>;

export interface HttpConnectionMatch {
	/** The trusted hostname that matched. */
	readonly hostname: string;
	readonly src: SandboxAddress;
	readonly dst: SandboxAddress;
	/** Intercepts the flow as HTTP(S) (not HTTP: it fails closed); the
	 * middleware, when given, is called for each request. */
	accept(middleware?: HttpMiddleware): boolean;
}

export interface SandboxConnection {
	/** "dns" for a DNS question, else the flow's transport. */
	readonly type: "tcp" | "udp" | "dns";
	readonly protocol: "tcp" | "udp";
	readonly src: SandboxAddress;
	readonly dst: SandboxAddress;
	/** The names this VM's trusted DNS bound dst to (flows only). */
	readonly hostnames: readonly string[];
	/** Grants the raw TCP or UDP flow (not a DNS question: use matchDns). */
	accept(): void;
	matchDns(): DnsConnectionMatch | undefined;
	matchTcp(matcher: EndpointMatcher): TransportMatch | undefined;
	matchUdp(matcher: EndpointMatcher): TransportMatch | undefined;
	matchHttp(matcher: string | ((candidate: { hostname: string }) => boolean)): HttpConnectionMatch | undefined;
}

export type OnConnectionRequest = (conn: SandboxConnection) => void | Promise<void>;

/** An answer line's object. */
export type HookAnswer = Record<string, unknown> & { id: number; verdict: string };

type Grant =
	| { kind: "grant" }
	| { kind: "dns"; resolvers: string[] }
	| { kind: "http"; hostname: string; middleware: HttpMiddleware | undefined };

const MAX_RESOLVERS = 16;
const HOSTNAME = /^(?=.{1,253}$)([A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?)(\.[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*$/;

function resolverText(r: unknown, i: number): string {
	if (typeof r !== "string")
		throw new TypeError(`matchDns().accept: resolvers[${i}] must be a string, got ${typeof r}`);
	const ep = /:[0-9]+$/.test(r) ? parseEndpoint(r) : parseEndpoint(`${r}:53`);
	if (!ep || ep.ip.includes(":"))
		throw new TypeError(`matchDns().accept: resolvers[${i}] ${JSON.stringify(r)} is not "A.B.C.D" or "A.B.C.D:PORT"`);
	return r;
}

function endpointMatches(m: EndpointMatcher, dst: SandboxAddress): boolean {
	if (typeof m === "function")
		return m(dst) === true;
	if (typeof m === "string") {
		const ep = parseEndpoint(m);
		if (ep)
			return ep.ip === dst.ip && ep.port === dst.port;
		if (parseEndpoint(`${m}:1`))
			return m === dst.ip;
		throw new TypeError(`matchTcp/matchUdp: ${JSON.stringify(m)} is not "IP", "IP:PORT" or "[IPv6]:PORT"`);
	}
	if (typeof m === "object" && m !== null) {
		if (m.ip === undefined && m.port === undefined)
			throw new TypeError("matchTcp/matchUdp: an endpoint object needs ip, port or both");
		return (m.ip === undefined || m.ip === dst.ip) && (m.port === undefined || m.port === dst.port);
	}
	throw new TypeError(`matchTcp/matchUdp: a matcher is a string, {ip, port} or a function, got ${typeof m}`);
}

interface FlowQuestion {
	id: number;
	kind: "flow";
	proto: "tcp" | "udp";
	src: { ip: string; port: number };
	dst: { ip: string; port: number };
	hostnames: string[];
}

interface DnsQuestion {
	id: number;
	kind: "dns";
	proto: "tcp" | "udp";
	src: { ip: string; port: number };
	dst: { ip: string; port: number };
	name: string;
	qtype: string;
}

/** The connection a callback sees, and the grant it made. */
function connection(q: FlowQuestion | DnsQuestion): { conn: SandboxConnection; grant(): Grant | undefined } {
	let grant: Grant | undefined;
	const decide = (g: Grant): boolean => {
		if (grant !== undefined)
			return false;
		grant = g;
		return true;
	};
	const src = sandboxAddress(q.src.ip, q.src.port);
	const dst = sandboxAddress(q.dst.ip, q.dst.port);
	const hostnames = Object.freeze(q.kind === "flow" ? [...q.hostnames] : []);
	const transport = (proto: "tcp" | "udp") => (m: EndpointMatcher): TransportMatch | undefined =>
		q.kind === "flow" && q.proto === proto && endpointMatches(m, dst)
			? Object.freeze({ accept: () => decide({ kind: "grant" }) }) : undefined;
	const conn: SandboxConnection = Object.freeze({
		type: q.kind === "dns" ? "dns" as const : q.proto,
		protocol: q.proto,
		src, dst, hostnames,
		accept(): void {
			if (q.kind === "dns")
				throw new TypeError("conn.accept(): this is a DNS question: conn.matchDns()?.accept({resolvers})");
			decide({ kind: "grant" });
		},
		matchDns(): DnsConnectionMatch | undefined {
			if (q.kind !== "dns")
				return undefined;
			return Object.freeze({
				name: q.name,
				qtype: q.qtype,
				accept(options: { resolvers: readonly string[] }): boolean {
					const r = (options as { resolvers?: unknown } | undefined)?.resolvers;
					if (!Array.isArray(r) || r.length === 0 || r.length > MAX_RESOLVERS)
						throw new TypeError(`matchDns().accept: resolvers must be 1 to ${MAX_RESOLVERS} addresses`);
					return decide({ kind: "dns", resolvers: r.map(resolverText) });
				},
			});
		},
		matchTcp: transport("tcp"),
		matchUdp: transport("udp"),
		matchHttp(m: string | ((candidate: { hostname: string }) => boolean)): HttpConnectionMatch | undefined {
			if (q.kind !== "flow" || q.proto !== "tcp")
				return undefined;
			let hit: string | undefined;
			if (typeof m === "string") {
				const want = m.toLowerCase().replace(/\.$/, "");
				if (!HOSTNAME.test(want))
					throw new TypeError(`matchHttp: ${JSON.stringify(m)} is not a hostname`);
				hit = q.hostnames.find((h) => h === want);
			} else if (typeof m === "function") {
				hit = q.hostnames.find((h) => m({ hostname: h }) === true);
			} else {
				throw new TypeError(`matchHttp: a matcher is a hostname or a function, got ${typeof m}`);
			}
			if (hit === undefined)
				return undefined;
			const hostname = hit;
			return Object.freeze({
				hostname, src, dst,
				accept(middleware?: HttpMiddleware): boolean {
					if (middleware !== undefined && typeof middleware !== "function")
						throw new TypeError("HttpConnectionMatch.accept: middleware must be a function");
					return decide({ kind: "http", hostname, middleware });
				},
			});
		},
	});
	return { conn, grant: () => grant };
}

/** A deny answer. */
export function deny(id: number, reason: string): HookAnswer {
	return { id, verdict: "deny", reason: reason.slice(0, 63) };
}

/** Resolves to the callback's outcome, or "timeout" after ms. */
async function settle<T>(run: () => T | Promise<T>, ms: number): Promise<{ ok: true; value: T } | { ok: false; why: string }> {
	let timer: NodeJS.Timeout | undefined;
	const late = new Promise<{ ok: false; why: string }>((resolve) => {
		timer = setTimeout(() => resolve({ ok: false, why: "timeout" }), ms);
	});
	try {
		const p = (async () => ({ ok: true as const, value: await run() }))();
		return await Promise.race([p, late]);
	} catch (e) {
		return { ok: false, why: `threw: ${e instanceof Error ? e.message : String(e)}` };
	} finally {
		clearTimeout(timer);
	}
}

/** Most flows whose middleware is remembered; the oldest goes first (its
 * later requests are then denied "unknown flow"). */
export const MAX_FLOWS = 4096;

const isObj = (v: unknown): v is Record<string, unknown> => typeof v === "object" && v !== null && !Array.isArray(v);
const isId = (v: unknown): v is number => typeof v === "number" && Number.isSafeInteger(v) && v >= 1;

function endpointOf(v: unknown): { ip: string; port: number } | undefined {
	return typeof v === "string" ? parseEndpoint(v) : undefined;
}

function endpointObj(v: unknown): { ip: string; port: number } | undefined {
	if (!isObj(v) || typeof v["ip"] !== "string" || typeof v["port"] !== "number")
		return undefined;
	return parseEndpoint(`${v["ip"].includes(":") ? `[${v["ip"]}]` : v["ip"]}:${v["port"]}`);
}

/** Decides hook questions with one policy callback. */
export class PolicyDecider {
	readonly #callback: OnConnectionRequest;
	readonly #timeoutMs: number;
	/** flow id -> its middleware (undefined: grant-http without one). */
	readonly #flows = new Map<number, HttpMiddleware | undefined>();
	readonly #log: (line: string) => void;

	constructor(callback: OnConnectionRequest, timeoutMs: number, log: (line: string) => void = () => undefined) {
		this.#callback = callback;
		this.#timeoutMs = timeoutMs;
		this.#log = log;
	}

	/** How many flows' middleware are remembered now. */
	get flows(): number {
		return this.#flows.size;
	}

	/** The answer to one parsed question line (an object with an id). */
	async answer(q: Record<string, unknown> & { id: number }): Promise<HookAnswer> {
		const type = q["type"];
		if (type === "http")
			return this.#request(q);
		if (type !== undefined && type !== "dns")
			return deny(q.id, "question type unknown");
		const proto = q["proto"];
		const src = endpointOf(q["src"]);
		const dst = endpointOf(q["dst"]);
		if ((proto !== "tcp" && proto !== "udp") || !src || !dst)
			return deny(q.id, "malformed question");
		if (type === "dns") {
			const name = q["name"];
			const qtype = q["qtype"];
			if (typeof name !== "string" || name.length > 253 || typeof qtype !== "string" || qtype.length > 16)
				return deny(q.id, "malformed question");
			return this.#flow({ id: q.id, kind: "dns", proto, src, dst, name: name.toLowerCase(), qtype });
		}
		const names = q["hostnames"] ?? [];
		if (!Array.isArray(names) || names.length > 64 || !names.every((n) => typeof n === "string" && n.length <= 253))
			return deny(q.id, "malformed question");
		return this.#flow({ id: q.id, kind: "flow", proto, src, dst, hostnames: (names as string[]).map((n) => n.toLowerCase()) });
	}

	async #flow(q: FlowQuestion | DnsQuestion): Promise<HookAnswer> {
		const { conn, grant } = connection(q);
		const r = await settle(() => this.#callback(conn), this.#timeoutMs);
		if (!r.ok) {
			this.#log(`network.policy: ${q.kind === "dns" ? `dns ${q.name}` : `${q.proto} ${q.dst.ip}:${q.dst.port}`} denied: the callback ${r.why}`);
			return deny(q.id, r.why === "timeout" ? "policy timeout" : "policy threw");
		}
		const g = grant();
		if (g === undefined)
			return deny(q.id, "no grant");
		if (g.kind === "grant")
			return { id: q.id, verdict: "grant" };
		if (g.kind === "dns")
			return { id: q.id, verdict: "grant-dns", resolvers: g.resolvers };
		this.#remember(q.id, g.middleware);
		// "host": the flow may give the matched name alone (its SNI, its
		// requests' Host), not another name DNS bound to the address.
		return { id: q.id, verdict: "grant-http", tls: "auto", ask: g.middleware ? "request" : "connection", host: g.hostname };
	}

	#remember(flow: number, mw: HttpMiddleware | undefined): void {
		this.#flows.delete(flow);
		this.#flows.set(flow, mw);
		while (this.#flows.size > MAX_FLOWS) {
			const oldest = this.#flows.keys().next();
			if (oldest.done)
				break;
			this.#flows.delete(oldest.value);
		}
	}

	async #request(q: Record<string, unknown> & { id: number }): Promise<HookAnswer> {
		const flow = q["flow"];
		if (!isId(flow))
			return deny(q.id, "request of no hook flow");
		if (!this.#flows.has(flow))
			return deny(q.id, "unknown flow");
		const mw = this.#flows.get(flow);
		// Refreshed: a connection in use stays remembered.
		this.#remember(flow, mw);
		if (mw === undefined)
			return { id: q.id, verdict: "grant-http" };
		const req = requestOf(q);
		if (typeof req === "string")
			return deny(q.id, req);
		const r = await settle(() => mw(req), this.#timeoutMs);
		if (!r.ok) {
			this.#log(`network.policy: ${req.method} ${req.url.href} denied: the middleware ${r.why}`);
			return deny(q.id, r.why === "timeout" ? "middleware timeout" : "middleware threw");
		}
		let edits;
		try {
			edits = req.headers.edits();
		} catch (e) {
			this.#log(`network.policy: ${req.method} ${req.url.href} denied: ${(e as Error).message}`);
			return deny(q.id, "header edits past the limits");
		}
		const a: HookAnswer = { id: q.id, verdict: "grant-http" };
		if (Object.keys(edits.set).length > 0)
			a["set"] = edits.set;
		if (edits.remove.length > 0)
			a["remove"] = edits.remove;
		return a;
	}
}

/** The SandboxHttpRequest of a request question, or why it is malformed. */
export function requestOf(q: Record<string, unknown>): SandboxHttpRequest | string {
	const method = q["method"];
	const urlText = q["url"];
	const protocol = q["protocol"];
	const fields = q["headers"];
	const omitted = q["omitted"] ?? [];
	if (typeof method !== "string" || method.length === 0 || method.length > 64 || typeof urlText !== "string")
		return "malformed request";
	if (protocol !== "HTTP/1.1" && protocol !== "HTTP/1.0" && protocol !== "h2")
		return "malformed request";
	if (!Array.isArray(fields) || !fields.every((f) => Array.isArray(f) && f.length === 2 &&
		typeof f[0] === "string" && typeof f[1] === "string"))
		return "malformed request";
	if (!Array.isArray(omitted) || !omitted.every((n) => typeof n === "string"))
		return "malformed request";
	let url: URL;
	try {
		url = new URL(urlText);
	} catch {
		return "malformed request url";
	}
	const d = q["destination"];
	const src = isObj(d) ? endpointObj(d["src"]) : endpointOf(q["src"]);
	const dst = isObj(d) ? endpointObj(d["dst"]) : endpointOf(q["dst"]);
	if (!src || !dst)
		return "malformed request";
	const host = isObj(d) && typeof d["hostname"] === "string" ? d["hostname"]
		: typeof q["host"] === "string" ? q["host"] : undefined;
	const req: {
		protocol: "http/1.1" | "h2"; url: URL; method: string; headers: SandboxHeaders;
		destination: SandboxHttpDestination; tls?: { sni: string | undefined; alpn: string | undefined };
	} = {
		protocol: protocol === "h2" ? "h2" : "http/1.1",
		url, method,
		headers: new SandboxHeaders(fields as [string, string][], omitted as string[]),
		destination: Object.freeze({
			sourceIp: src.ip, sourcePort: src.port, originalIp: dst.ip, originalPort: dst.port,
			hostname: host === "" ? undefined : host,
		}),
	};
	const tls = q["tls"];
	if (isObj(tls))
		req.tls = Object.freeze({
			sni: typeof tls["sni"] === "string" && tls["sni"] !== "" ? tls["sni"] : undefined,
			alpn: typeof tls["alpn"] === "string" ? tls["alpn"] : undefined,
		});
	else if (tls === undefined && url.protocol === "https:")
		req.tls = Object.freeze({ sni: host, alpn: undefined });
	return Object.freeze(req);
}
