// vm.forPersona(grant): seed 000's persona-scoped view of a sandbox, on a
// scoped control socket the vmm opens for the grant (vm.grant,
// Documentation/personas.md). Every call of the view goes to that socket,
// so what the grant does not allow is refused by the vmm (-32006, a
// PersonaRefusedError naming the persona and the facet); the SDK checks
// only the grant's shape. Disposing the view revokes the grant.

import { KilnRpcError, RpcCode, SandboxConfigError, SandboxError, isRecord } from "./errors.js";
import { makeFacets } from "./facets.js";
import type { FilesystemFacet, McpServer, NetworkFacet, SandboxFacets, ShellFacet, ToolsFacet } from "./facets.js";
import { RpcConnection } from "./rpc/client.js";
import type { ServiceRegistry } from "./services.js";
import { integer, nonEmpty, optionalBoolean, record, shown, string } from "./validate.js";
import type { Endpoint } from "./vm.js";
import { vmFileSystem } from "./vmfs.js";

/** What a persona may do: the params of vm.grant but its socket. */
export interface PersonaGrant {
	/** 1 to 64 letters, digits, ".", "_", "-"; every refusal names it. */
	persona: string;
	facets: {
		/** exec, spawn, pty. */
		shell?: boolean;
		/** fs.* under these guest paths; reads only unless `write`. */
		filesystem?: { paths: readonly string[]; write?: boolean };
		/** net.check and net.status. */
		network?: { check: boolean };
	};
	/** The grant ends by itself after this long (1 ms to a day). */
	expiresMs?: number;
	/** The guest uid its requests run as (default 2000 + n). */
	uid?: number;
}

/** vm.grant's params for `grant` (the socket is the VM's to choose). */
export function checkGrant(what: string, grant: unknown): Record<string, unknown> {
	const g = record(what, grant, ["persona", "facets", "expiresMs", "uid"]);
	const params: Record<string, unknown> = { persona: nonEmpty(`${what}: persona`, g["persona"]) };
	if (g["facets"] === undefined)
		throw new SandboxConfigError(`${what}: facets is required ({shell, filesystem, network}; {} grants nothing)`);
	const f = record(`${what}: facets`, g["facets"], ["shell", "filesystem", "network"]);
	const facets: Record<string, unknown> = {};
	if (f["shell"] !== undefined)
		facets["shell"] = optionalBoolean(`${what}: facets.shell`, f["shell"]);
	if (f["filesystem"] !== undefined) {
		const fs = record(`${what}: facets.filesystem`, f["filesystem"], ["paths", "write"]);
		if (!Array.isArray(fs["paths"]))
			throw new SandboxConfigError(`${what}: facets.filesystem.paths must be an array of absolute guest paths, got ${shown(fs["paths"])}`);
		facets["filesystem"] = {
			paths: fs["paths"].map((p: unknown, i) => string(`${what}: facets.filesystem.paths[${i}]`, p)),
			write: optionalBoolean(`${what}: facets.filesystem.write`, fs["write"]),
		};
	}
	if (f["network"] !== undefined) {
		const n = record(`${what}: facets.network`, f["network"], ["check"]);
		facets["network"] = { check: optionalBoolean(`${what}: facets.network.check`, n["check"]) };
	}
	params["facets"] = facets;
	if (g["expiresMs"] !== undefined)
		params["expiresMs"] = integer(`${what}: expiresMs`, g["expiresMs"], 1, 86_400_000);
	if (g["uid"] !== undefined)
		params["uid"] = integer(`${what}: uid`, g["uid"], 1, 65534);
	return params;
}

/** What a view needs of the VM it came from. */
export interface PersonaOwner {
	revoke(socket: string): Promise<unknown>;
	/** The VM is closing or closed: nothing to revoke. */
	closed(): boolean;
	forget(view: PersonaView): void;
}

/** A persona's view: the facets of the VM, through its scoped socket. */
export class PersonaView implements SandboxFacets, AsyncDisposable {
	readonly persona: string;
	/** The guest uid its requests run as. */
	readonly uid: number;
	/** When the grant ends by itself (ms since the epoch), or null. */
	readonly expiresAt: number | null;
	/** The scoped socket (for vmmctl while debugging). */
	readonly socket: string;
	readonly shell: ShellFacet;
	readonly filesystem: FilesystemFacet;
	readonly network: NetworkFacet;
	readonly tools: ToolsFacet;
	readonly services: ServiceRegistry;
	readonly #conn: RpcConnection;
	readonly #owner: PersonaOwner;
	#revoked: Promise<{ revoked: boolean; closed: number }> | undefined;

	private constructor(answer: Record<string, unknown>, socket: string, persona: string, conn: RpcConnection,
		tools: readonly McpServer[], registryOn: (setPolicy: (p: Record<string, unknown>) => Promise<unknown>) => ServiceRegistry,
		owner: PersonaOwner) {
		this.persona = persona;
		this.uid = typeof answer["uid"] === "number" ? answer["uid"] : 0;
		this.expiresAt = typeof answer["expiresAt"] === "number" ? answer["expiresAt"] : null;
		this.socket = socket;
		this.#conn = conn;
		this.#owner = owner;
		const ep: Endpoint = {
			live: (what) => this.#live(what),
			connect: async (what) => {
				this.#live(what);
				return RpcConnection.connect(socket);
			},
		};
		const who = `persona '${persona}'`;
		const f = makeFacets(ep, who, tools, vmFileSystem(() => this.#live(`${who}.filesystem`)));
		this.shell = f.shell;
		this.filesystem = f.filesystem;
		this.network = f.network;
		this.tools = f.tools;
		// Asked on the scoped socket too: the vmm refuses net.setPolicy there.
		this.services = registryOn((policy) => this.#live(`${who}.services`).call("net.setPolicy", { policy }));
	}

	/** @internal Connects to the socket vm.grant answered with. */
	static async open(what: string, answer: unknown, socket: string, params: Record<string, unknown>,
		tools: readonly McpServer[], registryOn: (setPolicy: (p: Record<string, unknown>) => Promise<unknown>) => ServiceRegistry,
		owner: PersonaOwner): Promise<PersonaView> {
		if (!isRecord(answer) || answer["socket"] !== socket || typeof answer["uid"] !== "number") {
			await owner.revoke(socket).catch(() => undefined);
			throw new SandboxError(`vm.grant: a malformed answer ${shown(answer)}`);
		}
		let conn: RpcConnection;
		try {
			conn = await RpcConnection.connect(socket);
		} catch (e) {
			await owner.revoke(socket).catch(() => undefined);
			throw new SandboxError(`${what}: ${socket}: ${(e as Error).message}`);
		}
		return new PersonaView(answer, socket, String(params["persona"]), conn, tools, registryOn, owner);
	}

	#live(what: string): RpcConnection {
		if (this.#revoked)
			throw new SandboxConfigError(`${what}: persona '${this.persona}' was revoked`);
		return this.#conn;
	}

	/** Ends the grant: the scoped socket and its connections close
	 * (vm.revoke). Once; later calls get the first answer. */
	revoke(): Promise<{ revoked: boolean; closed: number }> {
		this.#revoked ??= (async () => {
			this.#conn.close();
			this.#owner.forget(this);
			if (this.#owner.closed())
				return { revoked: true, closed: 0 };
			const r = await this.#owner.revoke(this.socket);
			const closed = isRecord(r) && typeof r["closed"] === "number" ? r["closed"] : 0;
			return { revoked: true, closed };
		})();
		return this.#revoked;
	}

	/** revoke(), but a grant that expired meanwhile is no error. */
	async [Symbol.asyncDispose](): Promise<void> {
		try {
			await this.revoke();
		} catch (e) {
			if (!(e instanceof KilnRpcError && e.rpcCode === RpcCode.invalidParams))
				throw e;
		}
	}

	/** @internal The VM went: its grants with it. */
	dropped(): void {
		this.#revoked ??= Promise.resolve({ revoked: true, closed: 0 });
		this.#conn.close();
	}
}
