// Seed 000's service registry: named host services the guest may reach.
// A service is a DNS name and a port; registering it gives the VM
//   - a policy grant naming it (`{"to": NAME, "ports": [PORT]}` in `tcp` or
//     `udp`, `{"host": NAME, "ports": [PORT]}` in `http`), applied with
//     net.setPolicy on top of the policy the VM booted with, so the vmm's
//     proxy and net.check both know it;
//   - its DNS name: the guest's questions for it are answered through the
//     service's resolvers (the VM's policy hook, served by this process,
//     grants them before the sandbox's own network.policy is asked), and
//     those answers are the trusted bindings the grant matches through.

import { SandboxConfigError } from "./errors.js";
import type { SandboxConnection } from "./network/policy.js";
import { integer, oneOf, record, shown, string } from "./validate.js";

export type ServiceProto = "tcp" | "udp" | "http";

export interface ServiceSpec {
	/** The DNS name the guest reaches it by. */
	hostname: string;
	port: number;
	/** "tcp" (default), "udp", or "http": intercepted, request by request
	 * (Documentation/network.md, "HTTP grants"). */
	proto?: ServiceProto;
	/** Who answers the guest's questions for `hostname`: "A.B.C.D" or
	 * "A.B.C.D:PORT", 1 to 16. */
	resolvers: readonly string[];
	description?: string;
}

export interface SandboxService {
	readonly name: string;
	readonly hostname: string;
	readonly port: number;
	readonly proto: ServiceProto;
	readonly resolvers: readonly string[];
	readonly description?: string;
}

export interface ServiceRegistry {
	/** Adds (or replaces) service `name`; resolves once the VM's policy
	 * has it. A policy the vmm refuses leaves the registry as it was. */
	register(name: string, spec: ServiceSpec): Promise<SandboxService>;
	/** Removes it (its grant goes from the policy): false if unknown. */
	unregister(name: string): Promise<boolean>;
	resolve(name: string): SandboxService | undefined;
	list(): readonly SandboxService[];
}

const SERVICE_NAME = /^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$/;
const HOSTNAME = /^(?=.{1,253}$)([A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?)(\.[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*$/;
const RESOLVER = /^(25[0-5]|2[0-4][0-9]|1?[0-9]?[0-9])(\.(25[0-5]|2[0-4][0-9]|1?[0-9]?[0-9])){3}(:[0-9]{1,5})?$/;
/** Kiln's NET_POLICY_MAX_RULES: a policy's grants per protocol. */
const MAX_SERVICES = 256;
const MAX_RESOLVERS = 16;

const canonical = (name: string): string => name.toLowerCase().replace(/\.$/, "");

/** The services of one VM, shared by its registry and its policy hook. */
export class ServiceTable {
	readonly #byName = new Map<string, SandboxService>();

	list(): SandboxService[] {
		return [...this.#byName.values()];
	}

	get(name: string): SandboxService | undefined {
		return this.#byName.get(name);
	}

	/** @internal */
	replace(next: Map<string, SandboxService>): void {
		this.#byName.clear();
		for (const [k, v] of next)
			this.#byName.set(k, v);
	}

	/** The hook's first say: a DNS question for a service's name is sent
	 * to its resolvers. True if it decided. */
	answerDns(conn: SandboxConnection): boolean {
		const dns = conn.matchDns();
		if (!dns)
			return false;
		const name = canonical(dns.name);
		for (const s of this.#byName.values())
			if (canonical(s.hostname) === name)
				return dns.accept({ resolvers: s.resolvers });
		return false;
	}
}

function checkSpec(what: string, name: unknown, spec: unknown): SandboxService {
	const n = string(`${what}: name`, name);
	if (!SERVICE_NAME.test(n))
		throw new SandboxConfigError(`${what}: name ${shown(n)} must be 1 to 64 letters, digits, ".", "_", "-"`);
	const o = record(what, spec, ["hostname", "port", "proto", "resolvers", "description"]);
	const hostname = canonical(string(`${what}: hostname`, o["hostname"]));
	if (!HOSTNAME.test(hostname) || /^[0-9]+$/.test(hostname.split(".").pop() ?? ""))
		throw new SandboxConfigError(`${what}: hostname ${shown(hostname)} is not a DNS name (the guest reaches a service by name)`);
	const port = integer(`${what}: port`, o["port"], 1, 65535);
	const proto = o["proto"] === undefined ? "tcp" : oneOf(`${what}: proto`, o["proto"], ["tcp", "udp", "http"] as const);
	const r = o["resolvers"];
	if (!Array.isArray(r) || r.length < 1 || r.length > MAX_RESOLVERS)
		throw new SandboxConfigError(`${what}: resolvers must be 1 to ${MAX_RESOLVERS} "A.B.C.D" or "A.B.C.D:PORT", got ${shown(r)}`);
	const resolvers = r.map((x: unknown, i) => {
		const s = string(`${what}: resolvers[${i}]`, x);
		if (!RESOLVER.test(s))
			throw new SandboxConfigError(`${what}: resolvers[${i}] ${shown(s)} is not "A.B.C.D" or "A.B.C.D:PORT"`);
		return s;
	});
	const out: SandboxService = o["description"] === undefined
		? { name: n, hostname, port, proto, resolvers }
		: { name: n, hostname, port, proto, resolvers, description: string(`${what}: description`, o["description"]) };
	return Object.freeze(out);
}

/** `base` (the VM's booted policy) with a grant per service appended. */
export function policyWithServices(base: Record<string, unknown>, services: Iterable<SandboxService>): Record<string, unknown> {
	const p: Record<string, unknown> = { ...base };
	const append = (key: string, grant: Record<string, unknown>): void => {
		const list = Array.isArray(p[key]) ? [...(p[key] as unknown[])] : [];
		list.push(grant);
		p[key] = list;
	};
	for (const s of services) {
		if (s.proto === "http")
			append("http", { host: s.hostname, ports: [s.port] });
		else
			append(s.proto, { to: s.hostname, ports: [s.port] });
	}
	return p;
}

/** The registry of one VM: `setPolicy` is net.setPolicy on its full socket. */
export function serviceRegistry(table: ServiceTable, base: Record<string, unknown> | undefined,
	setPolicy: (policy: Record<string, unknown>) => Promise<unknown>): ServiceRegistry {
	let queue: Promise<unknown> = Promise.resolve();
	// One change at a time, each from the table the last one left.
	const serial = <T>(f: () => Promise<T>): Promise<T> => {
		const run = queue.then(f, f);
		queue = run.catch(() => undefined);
		return run;
	};
	const apply = async (next: Map<string, SandboxService>): Promise<void> => {
		if (base === undefined)
			throw new SandboxConfigError("vm.services: this VM has no network (defineSandbox without network.policy): no service can be reached");
		await setPolicy(policyWithServices(base, next.values()));
		table.replace(next);
	};
	return {
		async register(name, spec) {
			const what = "vm.services.register";
			const s = checkSpec(what, name, spec);
			return serial(async () => {
				const next = new Map(table.list().map((x) => [x.name, x]));
				next.set(s.name, s);
				if (next.size > MAX_SERVICES)
					throw new SandboxConfigError(`${what}: ${next.size} services, at most ${MAX_SERVICES}`);
				await apply(next);
				return s;
			});
		},
		unregister(name) {
			return serial(async () => {
				if (!table.get(name))
					return false;
				const next = new Map(table.list().map((x) => [x.name, x]));
				next.delete(name);
				await apply(next);
				return true;
			});
		},
		resolve: (name) => table.get(name),
		list: () => table.list(),
	};
}
