// A booted VM: `vmm start` as a child process of this one, driven over
// its control socket (Documentation/cli.md, "vmm start"; api.md).

import { spawn as spawnChild } from "node:child_process";
import type { ChildProcess } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { setTimeout as sleep } from "node:timers/promises";
import { SandboxConfigError, VmmError, abortError, isRecord } from "./errors.js";
import { parseFacts } from "./facts.js";
import type { SandboxEnvironmentFact } from "./facts.js";
import { GuestProcess, childProcess, ptyHandle } from "./process.js";
import type { SandboxChildProcess, SandboxPty } from "./process.js";
import { RpcConnection } from "./rpc/client.js";
import type { Params } from "./rpc/client.js";
import { integer, nonEmpty, record, shown, string } from "./validate.js";
import { vmFileSystem } from "./vmfs.js";
import type { SandboxVmFileSystem } from "./vmfs.js";
import type { ServedSockets } from "./config.js";
import { makeFacets } from "./facets.js";
import type { FilesystemFacet, McpServer, NetworkFacet, SandboxFacets, ShellFacet, ToolsFacet } from "./facets.js";
import { ServiceTable, serviceRegistry } from "./services.js";
import type { ServiceRegistry } from "./services.js";
import { PersonaView, checkGrant } from "./persona.js";
import type { PersonaGrant } from "./persona.js";
import type { LaunchReport } from "./launcher/types.js";

export interface ProcessOptions {
	/** Working directory; default: the boot's cwd. */
	cwd?: string;
	/** Variables added to the guest's default environment. */
	env?: Readonly<Record<string, string>>;
}

export interface ExecOptions extends ProcessOptions {
	/** Kill the process group after this long: exit code 124. */
	timeoutMs?: number;
	/** Aborting kills the process group and rejects with an AbortError. */
	signal?: AbortSignal;
	/** All of standard input. */
	stdin?: string | Uint8Array;
}

export interface SpawnOptions extends ProcessOptions {
	timeoutMs?: number;
	signal?: AbortSignal;
}

export interface PtyOptions extends SpawnOptions {
	size?: { rows: number; cols: number };
}

export interface SandboxExecResult {
	exitCode: number;
	stdout: string;
	stderr: string;
	timedOut: boolean;
	signal?: number;
}

/** Longest the SDK waits, after vm.shutdown, for the vmm to exit before
 * it kills it: the vmm's own deadlines (api.md, "vm.shutdown": 5 s for
 * the agent's answer, 30 s for the guest to power off) and some. */
const SHUTDOWN_WAIT_MS = 40_000;
/** The guest agent's first answer may take this long (cli.md,
 * --ready-timeout-ms, its default with --detach). */
const READY_TIMEOUT_MS = 300_000;
/** Bytes of the vmm's stderr kept for error messages. */
const STDERR_KEPT = 16 * 1024;
/** Longest control socket path the vmm takes (cli.md, --control-socket). */
const MAX_SOCKET_PATH = 95;

// Every vmm this process started, stopped if this process exits first
// (a normal exit or an uncaught error; on a SIGKILL the vmm sees it
// itself: "dieWithParent", Documentation/cli.md).
const running = new Set<ChildProcess>();
let exitHookInstalled = false;

function track(child: ChildProcess): void {
	running.add(child);
	child.once("exit", () => running.delete(child));
	if (!exitHookInstalled) {
		exitHookInstalled = true;
		process.on("exit", () => {
			for (const c of running)
				c.kill("SIGTERM");
		});
	}
}

function checkEnvName(what: string, name: string): void {
	if (name.length === 0 || name.includes("=") || name.includes("\0"))
		throw new SandboxConfigError(`${what}: ${shown(name)} is not a variable name`);
}

/** argv and params shared by exec, spawn and pty.open. The API's `env`
 * adds to the guest's default environment (PATH, HOME, LANG...): the
 * vmm's envMode "merge" (Documentation/api.md, "exec"). */
function processParams(what: string, command: unknown, args: unknown, options: ProcessOptions & { timeoutMs?: number }): Params {
	const cmd = nonEmpty(`${what}: command`, command);
	if (!Array.isArray(args))
		throw new SandboxConfigError(`${what}: args must be an array of strings, got ${shown(args)}`);
	const argv = [cmd, ...args.map((a: unknown, i) => string(`${what}: args[${i}]`, a))];
	const params: Params = { argv };
	if (options.env !== undefined) {
		const env = record(`${what}: env`, options.env, Object.keys(options.env ?? {}));
		const merged: Record<string, string> = {};
		for (const [k, v] of Object.entries(env)) {
			checkEnvName(`${what}: env`, k);
			merged[k] = string(`${what}: env.${k}`, v);
		}
		params["env"] = merged;
		params["envMode"] = "merge";
	}
	if (options.cwd !== undefined)
		params["cwd"] = nonEmpty(`${what}: cwd`, options.cwd);
	if (options.timeoutMs !== undefined)
		params["timeoutMs"] = integer(`${what}: timeoutMs`, options.timeoutMs, 1, 2 ** 31 - 1);
	return params;
}

/** Where a view's calls go: the VM's full control socket, or a persona's
 * scoped one (src/persona.ts). `live` is the connection plain calls share,
 * `connect` a new one for a streaming process. */
export interface Endpoint {
	live(what: string): RpcConnection;
	connect(what: string): Promise<RpcConnection>;
}

/** vm.exec on an endpoint. */
export async function execOn(ep: Endpoint, what: string, command: string, args: readonly string[],
	options: ExecOptions): Promise<SandboxExecResult> {
	record(`${what}: options`, options, ["cwd", "env", "timeoutMs", "signal", "stdin"]);
	const params = processParams(what, command, args, options);
	if (options.stdin !== undefined)
		params["stdin"] = Buffer.from(typeof options.stdin === "string" ? Buffer.from(options.stdin) : options.stdin).toString("base64");
	const signal = options.signal;
	if (signal !== undefined && !(signal instanceof AbortSignal))
		throw new SandboxConfigError(`${what}: signal must be an AbortSignal, got ${shown(signal)}`);
	if (signal?.aborted)
		throw abortError(signal);
	const r = await ep.live(what).call("exec", params, { signal });
	if (!isRecord(r) || typeof r["exitCode"] !== "number")
		throw new SandboxConfigError(`exec: a malformed answer ${shown(r)}`);
	const out: SandboxExecResult = {
		exitCode: r["exitCode"],
		stdout: Buffer.from(typeof r["stdout"] === "string" ? r["stdout"] : "", "base64").toString("utf8"),
		stderr: Buffer.from(typeof r["stderr"] === "string" ? r["stderr"] : "", "base64").toString("utf8"),
		timedOut: r["timedOut"] === true,
	};
	if (typeof r["signal"] === "number")
		out.signal = r["signal"];
	return out;
}

/** vm.spawn on an endpoint. */
export function spawnOn(ep: Endpoint, what: string, command: string, args: readonly string[],
	options: SpawnOptions): SandboxChildProcess {
	record(`${what}: options`, options, ["cwd", "env", "timeoutMs", "signal"]);
	const params = processParams(what, command, args, options);
	return childProcess(new GuestProcess(() => ep.connect(what), { method: "spawn", params }, options.signal));
}

/** vm.pty on an endpoint. */
export function ptyOn(ep: Endpoint, what: string, command: string, args: readonly string[],
	options: PtyOptions): SandboxPty {
	record(`${what}: options`, options, ["cwd", "env", "timeoutMs", "signal", "size"]);
	const params = processParams(what, command, args, options);
	if (options.size !== undefined) {
		const s = record(`${what}: size`, options.size, ["rows", "cols"]);
		params["rows"] = integer(`${what}: size.rows`, s["rows"], 1, 65535);
		params["cols"] = integer(`${what}: size.cols`, s["cols"], 1, 65535);
	}
	return ptyHandle(new GuestProcess(() => ep.connect(what), { method: "pty.open", params }, options.signal));
}

/** What a boot adds to the VM beyond the vmm: the facets' data
 * (src/facets.ts) and the launcher that started it. */
export interface VmExtras {
	tools: readonly McpServer[];
	services: ServiceTable;
	/** The vmm's policy as booted (its config's net.policy), or undefined
	 * without a network. */
	policy: Record<string, unknown> | undefined;
	launcher?: LaunchReport;
}

/** A running VM. `await using vm = ...` (or `vm.close()`) shuts it down.
 * Seed 000's Sandbox: its five facets, and forPersona. */
export class SandboxVm implements AsyncDisposable, SandboxFacets {
	readonly fs: SandboxVmFileSystem;
	readonly shell: ShellFacet;
	readonly filesystem: FilesystemFacet;
	readonly network: NetworkFacet;
	readonly tools: ToolsFacet;
	readonly services: ServiceRegistry;
	/** The launcher that started this VM (src/launcher/), if one did. */
	readonly launcher: LaunchReport | undefined;
	readonly #child: ChildProcess;
	readonly #conn: RpcConnection;
	readonly #socket: string;
	readonly #dir: string;
	readonly #exited: Promise<number | null>;
	readonly #stderr: () => string;
	readonly #served: Services;
	readonly #endpoint: Endpoint;
	readonly #personas = new Set<PersonaView>();
	readonly #tools: readonly McpServer[];
	readonly #registryOn: (setPolicy: (policy: Record<string, unknown>) => Promise<unknown>) => ServiceRegistry;
	#personaSeq = 0;
	#closing: Promise<void> | undefined;

	/** @internal */
	constructor(child: ChildProcess, conn: RpcConnection, socket: string, dir: string,
		exited: Promise<number | null>, stderr: () => string, services: Services, extras: VmExtras) {
		this.#served = services;
		this.#child = child;
		this.#conn = conn;
		this.#socket = socket;
		this.#dir = dir;
		this.#exited = exited;
		this.#stderr = stderr;
		this.#endpoint = { live: (what) => this.#live(what), connect: (what) => this.#connect(what) };
		this.fs = vmFileSystem(() => this.#live("vm.fs"));
		this.#tools = extras.tools;
		const facets = makeFacets(this.#endpoint, "vm", extras.tools, this.fs);
		this.shell = facets.shell;
		this.filesystem = facets.filesystem;
		this.network = facets.network;
		this.tools = facets.tools;
		this.#registryOn = (setPolicy) => serviceRegistry(extras.services, extras.policy, setPolicy);
		this.services = this.#registryOn((policy) => this.#live("vm.services").call("net.setPolicy", { policy }));
		this.launcher = extras.launcher;
	}

	/** The control socket's path (for vmmctl while debugging). */
	get controlSocket(): string {
		return this.#socket;
	}

	/** The vmm's process id. */
	get pid(): number | undefined {
		return this.#child.pid;
	}

	#live(what: string): RpcConnection {
		if (this.#closing)
			throw new SandboxConfigError(`${what}: the VM is closed`);
		return this.#conn;
	}

	/** Runs a command to completion and collects its output. */
	exec(command: string, args: readonly string[] = [], options: ExecOptions = {}): Promise<SandboxExecResult> {
		return execOn(this.#endpoint, "vm.exec", command, args, options);
	}

	/** Starts a command with streaming input and output. */
	spawn(command: string, args: readonly string[] = [], options: SpawnOptions = {}): SandboxChildProcess {
		return spawnOn(this.#endpoint, "vm.spawn", command, args, options);
	}

	/** Starts a command on a guest terminal. */
	pty(command: string, args: readonly string[] = [], options: PtyOptions = {}): SandboxPty {
		return ptyOn(this.#endpoint, "vm.pty", command, args, options);
	}

	/** A view of this VM with only what `grant` allows, backed by a
	 * scoped control socket (vm.grant, Documentation/personas.md): the
	 * vmm refuses what the grant does not allow. Disposing it revokes. */
	async forPersona(grant: PersonaGrant): Promise<PersonaView> {
		const what = "vm.forPersona";
		const params = checkGrant(what, grant);
		const socket = path.join(this.#dir, `persona-${this.#personaSeq++}.sock`);
		const r = await this.#live(what).call("vm.grant", { socket, ...params });
		const view = await PersonaView.open(what, r, socket, params, this.#tools, this.#registryOn, {
			revoke: (s) => this.#live(`${what}: revoke`).call("vm.revoke", { socket: s }),
			closed: () => this.#closing !== undefined,
			forget: (v) => this.#personas.delete(v),
		});
		this.#personas.add(view);
		return view;
	}

	/** The VM's config facts followed by what the guest observes. */
	async environmentFacts(): Promise<SandboxEnvironmentFact[]> {
		const r = await this.#live("vm.environmentFacts").call("vm.facts");
		if (!isRecord(r))
			throw new SandboxConfigError(`vm.facts: a malformed answer ${shown(r)}`);
		return parseFacts("vm.facts", r["facts"]);
	}

	async #connect(what: string): Promise<RpcConnection> {
		this.#live(what);
		return RpcConnection.connect(this.#socket);
	}

	/** Shuts the guest down (it powers off cleanly) and waits for the vmm. */
	close(): Promise<void> {
		this.#closing ??= this.#shutdown();
		return this.#closing;
	}

	[Symbol.asyncDispose](): Promise<void> {
		return this.close();
	}

	async #shutdown(): Promise<void> {
		if (this.#child.exitCode === null && this.#child.signalCode === null) {
			await Promise.race([
				this.#conn.call("vm.shutdown").catch(() => undefined),
				this.#exited,
			]);
			// The wait is cancelled once the vmm exits: a timer left pending
			// would keep this process alive 40 s after its last close.
			const wait = new AbortController();
			const done = await Promise.race([
				this.#exited.then(() => true),
				sleep(SHUTDOWN_WAIT_MS, false, { signal: wait.signal }).catch(() => false),
			]);
			wait.abort();
			if (!done) {
				this.#child.kill("SIGKILL");
				await this.#exited;
			}
		}
		for (const p of this.#personas)
			p.dropped();
		this.#conn.close();
		await this.#served.close();
		rmSync(this.#dir, { recursive: true, force: true });
	}

	/** The vmm's stderr so far (its last 16 KiB). */
	get vmmLog(): string {
		return this.#stderr();
	}
}

/** What this process serves for a VM (its hook, its virtual mounts). */
export interface Services {
	sockets: ServedSockets;
	close(): Promise<void>;
}

export interface BootPlan {
	vmm: string;
	/** Starts what this process serves for the VM, listening in DIR
	 * before the vmm starts (it connects while the VM is built). */
	serve?(dir: string, log: (line: string) => void): Promise<Services>;
	/** Writes the config file into DIR, naming DIR/control.sock. */
	writeConfig(dir: string, socket: string, consoleLog: string, readyTimeoutMs: number, sockets: ServedSockets): string;
	/** More arguments for `vmm start` after `--config FILE` (a launcher's
	 * `--isolation namespace`). */
	args?: readonly string[];
	tools?: readonly McpServer[];
	services?: ServiceTable;
	launcher?: LaunchReport;
}

function runtimeDir(): string {
	const probe = path.join(os.tmpdir(), "kiln-sdk-XXXXXX", "control.sock");
	const base = probe.length <= MAX_SOCKET_PATH ? os.tmpdir() : "/tmp";
	return mkdtempSync(path.join(base, "kiln-sdk-"));
}

function tail(file: string, lines: number): string {
	try {
		return readFileSync(file, "utf8").split("\n").slice(-lines).join("\n");
	} catch {
		return "";
	}
}

/** Starts the vmm and waits for the guest agent's first answer. */
export async function bootVm(plan: BootPlan): Promise<SandboxVm> {
	const dir = runtimeDir();
	const socket = path.join(dir, "control.sock");
	const consoleLog = path.join(dir, "console.log");
	let child: ChildProcess | undefined;
	let conn: RpcConnection | undefined;
	let events: RpcConnection | undefined;
	let services: Services = { sockets: { virtual: new Map() }, close: async () => undefined };
	try {
		if (plan.serve)
			services = await plan.serve(dir, (line) => process.emitWarning(line, "KilnSandboxWarning"));
		const config = plan.writeConfig(dir, socket, consoleLog, READY_TIMEOUT_MS, services.sockets);
		const booted = JSON.parse(readFileSync(config, "utf8")) as { net?: { policy?: Record<string, unknown> } };
		child = spawnChild(plan.vmm, ["start", "--config", config, ...(plan.args ?? [])], { stdio: ["ignore", "ignore", "pipe"] });
		track(child);
		let stderr = "";
		child.stderr?.setEncoding("utf8");
		child.stderr?.on("data", (s: string) => {
			stderr = (stderr + s).slice(-STDERR_KEPT);
		});
		const c = child;
		const exited = new Promise<number | null>((resolve) => {
			c.once("exit", (code, sig) => resolve(code ?? (sig ? 128 + (os.constants.signals[sig] ?? 0) : null)));
			c.once("error", () => resolve(null));
		});
		let spawnError: Error | undefined;
		c.once("error", (e) => {
			spawnError = e;
		});
		const failed = (why: string, code: number | null): VmmError => {
			const console = tail(consoleLog, 20);
			return new VmmError(`${plan.vmm} start: ${why}`, code,
				stderr + (console ? `\nthe guest console's last lines:\n${console}` : ""));
		};
		let gone = false;
		void exited.then(() => {
			gone = true;
		});

		// The control socket appears once the VM is built.
		for (;;) {
			if (spawnError)
				throw failed(spawnError.message, null);
			if (gone)
				throw failed(`exited with status ${await exited} before its control socket answered`, await exited);
			try {
				conn = await RpcConnection.connect(socket);
				break;
			} catch {
				await sleep(20);
			}
		}
		// Ready when the guest agent first answered (api.md, vm.subscribe),
		// told on a connection of its own, closed then. A subscription
		// lasts as long as its connection: on the one calls go through,
		// every exec would also bring its exec-started and exec-exited
		// events, two more messages to read per round trip.
		events = await RpcConnection.connect(socket);
		const ev = events;
		const ready = new Promise<void>((resolve, reject) => {
			ev.on("vm.event", (p) => {
				if (p["type"] === "agent-ready")
					resolve();
				else if (p["type"] === "shutdown")
					reject(failed(`the VM stopped before its agent answered (${shown(p["reason"])})`,
						typeof p["exitCode"] === "number" ? p["exitCode"] : null));
			});
		});
		await ev.call("vm.subscribe", { since: 0 });
		const r = await Promise.race([ready.then(() => "ready" as const), exited.then(() => "exited" as const)]);
		if (r === "exited")
			throw failed(`exited with status ${await exited} before the guest agent answered`, await exited);
		ev.close();
		events = undefined;
		const extras: VmExtras = {
			tools: plan.tools ?? [], services: plan.services ?? new ServiceTable(), policy: booted.net?.policy,
		};
		if (plan.launcher)
			extras.launcher = plan.launcher;
		return new SandboxVm(c, conn, socket, dir, exited, () => stderr, services, extras);
	} catch (e) {
		events?.close();
		conn?.close();
		if (child && child.exitCode === null && child.signalCode === null)
			child.kill("SIGKILL");
		await services.close();
		rmSync(dir, { recursive: true, force: true });
		throw e;
	}
}

/** Runs `vmm facts` on a configuration written to a scratch directory. */
export function configFacts(vmm: string, write: (dir: string) => string,
	run: (file: string, args: string[]) => string): SandboxEnvironmentFact[] {
	const dir = mkdtempSync(path.join(os.tmpdir(), "kiln-sdk-facts-"));
	try {
		const config = write(dir);
		const out = run(vmm, ["facts", "--config", config]);
		let v: unknown;
		try {
			v = JSON.parse(out);
		} catch (e) {
			throw new VmmError(`${vmm} facts: not JSON (${(e as Error).message})`, null, "");
		}
		return parseFacts(`${vmm} facts`, v);
	} finally {
		rmSync(dir, { recursive: true, force: true });
	}
}

