// Seed 000's facets of a sandbox, on a booted VM or a persona's view of
// one: shell, filesystem, network, tools (services: src/services.ts).
// Each is a thin layer over one endpoint's control socket (the VM's full
// socket, or a persona's scoped one): what a persona may not do is
// refused by the vmm, never decided here (Documentation/personas.md).

import { EgressDeniedError, SandboxConfigError, SandboxError, isRecord } from "./errors.js";
import type { SandboxEnvironmentFact } from "./facts.js";
import { globFiles } from "./glob.js";
import type { GlobOptions } from "./glob.js";
import type { SandboxChildProcess, SandboxPty } from "./process.js";
import { nonEmpty, oneOf, record, shown, string } from "./validate.js";
import { execOn, ptyOn, spawnOn } from "./vm.js";
import type { Endpoint, ExecOptions, PtyOptions, SandboxExecResult, SpawnOptions } from "./vm.js";
import type { SandboxDirEntry, SandboxFileStat, SandboxVmFileSystem } from "./vmfs.js";
import type { ServiceRegistry } from "./services.js";

/** Commands and terminals (facet `shell`). */
export interface ShellFacet {
	exec(command: string, args?: readonly string[], options?: ExecOptions): Promise<SandboxExecResult>;
	spawn(command: string, args?: readonly string[], options?: SpawnOptions): SandboxChildProcess;
	pty(command: string, args?: readonly string[], options?: PtyOptions): SandboxPty;
}

/** Files of the running guest (facet `filesystem`): paths are absolute. */
export interface FilesystemFacet {
	read(path: string, options?: { range?: { offset: number; length: number } }): Promise<Uint8Array>;
	/** read, decoded as UTF-8. */
	readText(path: string): Promise<string>;
	write(path: string, contents: string | Uint8Array, options?: { createParents?: boolean; mode?: number }): Promise<void>;
	list(path: string): Promise<SandboxDirEntry[]>;
	stat(path: string): Promise<SandboxFileStat>;
	mkdir(path: string, options?: { recursive?: boolean; mode?: number }): Promise<void>;
	remove(path: string, options?: { recursive?: boolean; force?: boolean }): Promise<void>;
	rename(from: string, to: string): Promise<void>;
	/** Absolute paths matching `pattern` (`*`, `?`, `[...]`, `**`), sorted;
	 * walked in this process over `list`. */
	glob(pattern: string, options?: GlobOptions): Promise<string[]>;
}

export type NetCheckVerdict = "allow" | "deny" | "ask";

/** What net.check would let a new flow do (Documentation/api.md). */
export interface NetCheckResult {
	verdict: NetCheckVerdict;
	/** As the egress proxy logs it: "tcp grant 0", "no grant", ... */
	reason: string;
	/** The grant that decides, or null. */
	rule: { key: string; index: number } | null;
	/** An http grant covers it: each request is decided on its own. */
	intercepted: boolean;
}

export interface NetCheckRequest {
	proto: "tcp" | "udp";
	/** "ADDRESS:PORT" or "HOSTNAME:PORT". */
	dst: string;
	/** With an address: the flow taken as going to this name too. */
	hostname?: string;
}

/** The fetch guardedFetch calls once net.check allows (default: globalThis.fetch). */
export type FetchLike = (url: URL, init: RequestInit) => Promise<Response>;

export interface GuardedFetchOptions {
	fetch?: FetchLike;
	/** Redirects followed, each checked as the first URL (default 20). */
	maxRedirects?: number;
}

/** The VM's egress policy, asked (facet `network`). */
export interface NetworkFacet {
	check(request: NetCheckRequest): Promise<NetCheckResult>;
	/** vm.status's `net` object. */
	status(): Promise<Record<string, unknown>>;
	/** Fetches `url` from this process only if net.check allows a TCP flow
	 * to its host and port (and so for every redirect); a deny or an ask
	 * is an EgressDeniedError naming the URL and the rule. */
	guardedFetch(url: string | URL, init?: RequestInit, options?: GuardedFetchOptions): Promise<Response>;
}

/** An MCP server the image or the boot declares (facet `tools`). */
export interface McpServer {
	name: string;
	/** The guest command and its arguments. */
	command: string;
	args: readonly string[];
	env?: Readonly<Record<string, string>>;
	cwd?: string;
	description?: string;
	/** Its MCP transport: the command's standard input and output. */
	transport: "stdio";
	/** Where it was declared: an image fact, or sandbox.boot({tools}). */
	source: "image" | "boot";
}

/** The declaration sandbox.boot({tools: {NAME: ...}}) takes. */
export interface McpServerSpec {
	command: string;
	args?: readonly string[];
	env?: Readonly<Record<string, string>>;
	cwd?: string;
	description?: string;
}

export interface ToolsFacet {
	list(): Promise<readonly McpServer[]>;
	/** Starts server `name` (through the shell facet): speak MCP on its
	 * stdin and stdout. */
	start(name: string, options?: { env?: Readonly<Record<string, string>> }): SandboxChildProcess;
}

/** Seed 000's Sandbox: its five facets. */
export interface SandboxFacets {
	readonly shell: ShellFacet;
	readonly filesystem: FilesystemFacet;
	readonly network: NetworkFacet;
	readonly tools: ToolsFacet;
	readonly services: ServiceRegistry;
}

/** The image fact declaring an MCP server: topic "mcp-server", relation
 * its name, value its command line as a JSON array of strings. */
export const MCP_FACT_TOPIC = "mcp-server";
const MAX_TOOLS = 64;
const TOOL_NAME = /^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$/;

function mcpSpec(what: string, v: unknown): McpServerSpec {
	const o = record(what, v, ["command", "args", "env", "cwd", "description"]);
	const spec: McpServerSpec = { command: nonEmpty(`${what}.command`, o["command"]) };
	if (o["args"] !== undefined) {
		if (!Array.isArray(o["args"]))
			throw new SandboxConfigError(`${what}.args: must be an array of strings, got ${shown(o["args"])}`);
		spec.args = o["args"].map((a: unknown, i) => string(`${what}.args[${i}]`, a));
	}
	if (o["env"] !== undefined) {
		const env = record(`${what}.env`, o["env"], Object.keys(o["env"] ?? {}));
		const out: Record<string, string> = {};
		for (const [k, val] of Object.entries(env))
			out[k] = string(`${what}.env.${k}`, val);
		spec.env = out;
	}
	if (o["cwd"] !== undefined)
		spec.cwd = nonEmpty(`${what}.cwd`, o["cwd"]);
	if (o["description"] !== undefined)
		spec.description = string(`${what}.description`, o["description"]);
	return spec;
}

/** The MCP servers a boot declares: the image's `mcp-server` facts, then
 * the boot's `tools` (a name in both: the boot's). */
export function declaredTools(imageFacts: readonly SandboxEnvironmentFact[], bootTools: unknown): McpServer[] {
	const byName = new Map<string, McpServer>();
	for (const f of imageFacts) {
		if (f.topic !== MCP_FACT_TOPIC)
			continue;
		const what = `rootfs image: fact ${MCP_FACT_TOPIC} ${f.relation}`;
		if (!TOOL_NAME.test(f.relation))
			throw new SandboxConfigError(`${what}: the name must be 1 to 64 letters, digits, ".", "_", "-"`);
		let argv: unknown;
		try {
			argv = JSON.parse(f.value);
		} catch {
			argv = undefined;
		}
		if (!Array.isArray(argv) || argv.length === 0 || !argv.every((a) => typeof a === "string") || argv[0] === "")
			throw new SandboxConfigError(`${what}: the value must be its command line as a JSON array of strings, got ${shown(f.value)}`);
		const [command, ...args] = argv as string[];
		byName.set(f.relation, { name: f.relation, command: command as string, args, transport: "stdio", source: "image" });
	}
	if (bootTools !== undefined) {
		const what = "sandbox.boot: tools";
		const t = record(what, bootTools, Object.keys(bootTools ?? {}));
		for (const [name, v] of Object.entries(t)) {
			if (!TOOL_NAME.test(name))
				throw new SandboxConfigError(`${what}: ${shown(name)} is not a tool name (1 to 64 letters, digits, ".", "_", "-")`);
			const spec = mcpSpec(`${what}.${name}`, v);
			const server: McpServer = { name, command: spec.command, args: spec.args ?? [], transport: "stdio", source: "boot" };
			if (spec.env)
				server.env = spec.env;
			if (spec.cwd)
				server.cwd = spec.cwd;
			if (spec.description !== undefined)
				server.description = spec.description;
			byName.set(name, server);
		}
	}
	if (byName.size > MAX_TOOLS)
		throw new SandboxConfigError(`sandbox.boot: tools: ${byName.size} MCP servers, at most ${MAX_TOOLS}`);
	return [...byName.values()].sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0));
}

const REDIRECTS = new Set([301, 302, 303, 307, 308]);
const DEFAULT_PORTS: Record<string, number> = { "http:": 80, "https:": 443 };

function checkResult(v: unknown): NetCheckResult {
	if (!isRecord(v) || !["allow", "deny", "ask"].includes(String(v["verdict"])) || typeof v["reason"] !== "string")
		throw new SandboxError(`net.check: a malformed answer ${shown(v)}`);
	const rule = v["rule"];
	const r: NetCheckResult = {
		verdict: v["verdict"] as NetCheckVerdict,
		reason: v["reason"],
		rule: isRecord(rule) && typeof rule["key"] === "string" && typeof rule["index"] === "number"
			? { key: rule["key"], index: rule["index"] } : null,
		intercepted: v["intercepted"] === true,
	};
	return r;
}

/** The host and port net.check is asked about for `url`. */
function flowOf(url: URL): string {
	const port = url.port === "" ? DEFAULT_PORTS[url.protocol] : Number(url.port);
	if (port === undefined)
		throw new SandboxConfigError(`guardedFetch: ${url.href}: only http: and https: URLs are fetched`);
	if (url.hostname.startsWith("["))
		throw new SandboxConfigError(`guardedFetch: ${url.href}: an IPv6 address (Kiln's egress is IPv4 only)`);
	return `${url.hostname}:${port}`;
}

function networkFacet(ep: Endpoint, who: string): NetworkFacet {
	const check = async (request: NetCheckRequest): Promise<NetCheckResult> => {
		const what = `${who}.network.check`;
		const o = record(what, request, ["proto", "dst", "hostname"]);
		const params: Record<string, unknown> = {
			proto: oneOf(`${what}: proto`, o["proto"], ["tcp", "udp"] as const),
			dst: nonEmpty(`${what}: dst`, o["dst"]),
		};
		if (o["hostname"] !== undefined)
			params["hostname"] = nonEmpty(`${what}: hostname`, o["hostname"]);
		return checkResult(await ep.live(what).call("net.check", params));
	};
	return {
		check,
		async status() {
			const r = await ep.live(`${who}.network.status`).call("net.status");
			if (!isRecord(r))
				throw new SandboxError(`net.status: a malformed answer ${shown(r)}`);
			return r;
		},
		async guardedFetch(input, init = {}, options = {}) {
			const what = `${who}.network.guardedFetch`;
			const o = record(`${what}: options`, options, ["fetch", "maxRedirects"]);
			const doFetch: FetchLike = (o["fetch"] as FetchLike | undefined) ?? ((u, i) => fetch(u, i));
			const max = o["maxRedirects"] === undefined ? 20 : Number(o["maxRedirects"]);
			let url: URL;
			try {
				url = new URL(input instanceof URL ? input.href : string(`${what}: url`, input));
			} catch (e) {
				if (e instanceof SandboxError)
					throw e;
				throw new SandboxConfigError(`${what}: ${shown(input)} is not a URL`);
			}
			const mode = init.redirect ?? "follow";
			let req: RequestInit = { ...init, redirect: "manual" };
			for (let hop = 0; ; hop++) {
				const verdict = await check({ proto: "tcp", dst: flowOf(url) });
				if (verdict.verdict !== "allow")
					throw new EgressDeniedError(url.href, verdict.verdict, verdict.reason, verdict.rule);
				const res = await doFetch(url, req);
				const location = res.headers.get("location");
				if (mode === "manual" || !REDIRECTS.has(res.status) || location === null)
					return res;
				if (mode === "error")
					throw new SandboxError(`${what}: ${url.href} redirects to ${location} (redirect: "error")`);
				if (hop >= max)
					throw new SandboxError(`${what}: ${url.href}: more than ${max} redirects`);
				const method = (req.method ?? "GET").toUpperCase();
				// As fetch does: 303, and 301/302 after a POST, go on as a GET.
				if (res.status === 303 ? method !== "HEAD" : (res.status <= 302 && method === "POST")) {
					const { body: _body, ...rest } = req;
					req = { ...rest, method: "GET" };
				}
				url = new URL(location, url);
			}
		},
	};
}

function filesystemFacet(fs: SandboxVmFileSystem): FilesystemFacet {
	return {
		read: (p, options) => fs.readFile(p, options),
		readText: async (p) => new TextDecoder().decode(await fs.readFile(p)),
		write: (p, contents, options) => fs.writeFile(p, contents, options),
		list: (p) => fs.readDir(p),
		stat: (p) => fs.stat(p),
		mkdir: (p, options) => fs.mkdir(p, options),
		remove: (p, options) => fs.remove(p, options),
		rename: (from, to) => fs.rename(from, to),
		glob: (pattern, options) => globFiles((p) => fs.readDir(p), pattern, options),
	};
}

/** The shell, filesystem, network and tools facets over `ep`. */
export function makeFacets(ep: Endpoint, who: string, tools: readonly McpServer[], fs: SandboxVmFileSystem):
	{ shell: ShellFacet; filesystem: FilesystemFacet; network: NetworkFacet; tools: ToolsFacet } {
	const shell: ShellFacet = {
		exec: (command, args = [], options = {}) => execOn(ep, `${who}.shell.exec`, command, args, options),
		spawn: (command, args = [], options = {}) => spawnOn(ep, `${who}.shell.spawn`, command, args, options),
		pty: (command, args = [], options = {}) => ptyOn(ep, `${who}.shell.pty`, command, args, options),
	};
	const frozen = Object.freeze(tools.map((t) => Object.freeze({ ...t })));
	return {
		shell,
		filesystem: filesystemFacet(fs),
		network: networkFacet(ep, who),
		tools: {
			list: async () => frozen,
			start(name, options = {}) {
				const t = frozen.find((s) => s.name === name);
				if (!t)
					throw new SandboxConfigError(`${who}.tools.start: no MCP server ${shown(name)} (declared: ${frozen.map((s) => s.name).join(", ") || "none"})`);
				const env = { ...(t.env ?? {}), ...(options.env ?? {}) };
				const o: SpawnOptions = Object.keys(env).length > 0 ? { env } : {};
				if (t.cwd !== undefined)
					o.cwd = t.cwd;
				return spawnOn(ep, `${who}.tools.start`, t.command, t.args, o);
			},
		},
	};
}
