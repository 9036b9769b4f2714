// defineSandbox(...) (seed 003): a validated, reusable VM definition.
// Nothing starts until boot().

import { execFileSync } from "node:child_process";
import { writeFileSync } from "node:fs";
import path from "node:path";
import { VmmError } from "./errors.js";
import type { SandboxEnvironmentFact } from "./facts.js";
import { baseOf, checkBoot, checkResources, vmmConfig, writeImage } from "./config.js";
import type { BootOptions, SandboxResources } from "./config.js";
import type { SandboxMount } from "./fs.js";
import { locateKiln, locateVmm, verifyPins } from "./locate.js";
import type { KilnOptions, VmmPaths } from "./locate.js";
import type { NetworkPolicy } from "./network/index.js";
import { HookServer } from "./network/hook.js";
import { VirtualFsServer } from "./vfs/server.js";
import { BlockStoreServer } from "./blockstore.js";
import { materialise } from "./image-export.js";
import type { ServedSockets } from "./config.js";
import { checkRootfs } from "./rootfs.js";
import type { RootfsImageInput, SandboxRootfs } from "./rootfs.js";
import { fail, record } from "./validate.js";
import { SandboxVm, bootVm, configFacts } from "./vm.js";
import type { BootPlan } from "./vm.js";
import { declaredTools } from "./facets.js";
import { ServiceTable } from "./services.js";
import type { LaunchReport } from "./launcher/types.js";

export interface SandboxOptions {
	/** The machine the VM starts from (required): an image package's
	 * `image` is validated by rootfs.image here. */
	rootfs: SandboxRootfs | RootfsImageInput;
	resources?: SandboxResources;
	network?: NetworkPolicy;
	/** Where Kiln's vmm, kernel and initramfs are, when not the defaults. */
	kiln?: KilnOptions;
}

export interface Sandbox {
	/** Facts known from the configuration, without starting a VM. */
	environmentFacts(): SandboxEnvironmentFact[];
	/** Boots one VM of this definition. */
	boot(options?: BootOptions): Promise<SandboxVm>;
}

/** How a launcher boots a definition (src/launcher/builtin.ts): more
 * `vmm start` arguments, and the report the VM carries. */
export const launchWith = Symbol("kiln.launchWith");
export const factsWith = Symbol("kiln.factsWith");
export interface LaunchableSandbox extends Sandbox {
	[launchWith](boot: BootOptions | undefined, args: readonly string[], report: LaunchReport): Promise<SandboxVm>;
	/** environmentFacts as a launcher starts it: its `vmm` arguments;
	 * bootsGuest false (the namespace launcher): no kernel looked for. */
	[factsWith](args: readonly string[], bootsGuest: boolean): SandboxEnvironmentFact[];
}

export function defineSandbox(options: SandboxOptions): Sandbox {
	const what = "defineSandbox";
	const o = record(what, options, ["rootfs", "resources", "network", "kiln"]);
	if (o["rootfs"] === undefined)
		fail(what, "rootfs is required: rootfs.image(...), rootfs.ephemeral(...), rootfs.persistent(...) or rootfs.cow(...)");
	const rootfs = checkRootfs(`${what}: rootfs`, o["rootfs"]);
	const resources = checkResources(o["resources"]);
	const network = checkNetwork(o["network"]);
	const kilnOptions = (o["kiln"] ?? {}) as KilnOptions;
	// Checked now, so a bad option is said at definition time.
	record(`${what}: kiln`, kilnOptions, ["vmm", "kernel", "initrd", "pins"]);

	const writeConfig = (kiln: VmmPaths, dir: string, boot: BootOptions | undefined, extra: {
		controlSocket?: string; consoleLog?: string; readyTimeoutMs?: number; sockets?: ServedSockets;
	}): string => {
		const descriptor = writeImage(dir, baseOf(rootfs));
		const file = path.join(dir, "vm.json");
		const config = vmmConfig({ kiln, rootfs, resources, network, boot: checkBoot(boot), descriptor, ...extra });
		writeFileSync(file, JSON.stringify(config, null, 2) + "\n", { mode: 0o600 });
		return file;
	};

	return Object.freeze({
		environmentFacts(): SandboxEnvironmentFact[] {
			return facts([], true);
		},

		[factsWith](args: readonly string[], bootsGuest: boolean): SandboxEnvironmentFact[] {
			return facts(args, bootsGuest);
		},

		boot(bootOptions?: BootOptions): Promise<SandboxVm> {
			return launch(bootOptions, [], undefined);
		},

		[launchWith](bootOptions: BootOptions | undefined, args: readonly string[], report: LaunchReport): Promise<SandboxVm> {
			return launch(bootOptions, args, report);
		},
	});

	function facts(extraArgs: readonly string[], bootsGuest: boolean): SandboxEnvironmentFact[] {
		const kiln: VmmPaths = bootsGuest ? locateKiln(kilnOptions) : { vmm: locateVmm(kilnOptions) };
		// vmm facts connects to nothing: the sockets are only named.
		const named = (dir: string): ServedSockets => ({
			hook: path.join(dir, "hook.sock"), virtual: new Map(), store: path.join(dir, "store.sock"),
		});
		return configFacts(kiln.vmm, (dir) => writeConfig(kiln, dir, undefined, { sockets: named(dir) }), (file, args) => {
			try {
				return execFileSync(file, [...args, ...extraArgs], { encoding: "utf8", stdio: ["ignore", "pipe", "pipe"] });
			} catch (e) {
				const err = e as { status?: number | null; stderr?: unknown };
				throw new VmmError(`${file} facts`, err.status ?? null,
					typeof err.stderr === "string" ? err.stderr : "");
			}
		});
	}

	async function launch(bootOptions: BootOptions | undefined, args: readonly string[], report: LaunchReport | undefined): Promise<SandboxVm> {
			const boot = checkBoot(bootOptions);
			const tools = declaredTools(baseOf(rootfs).facts, bootOptions?.tools);
			const services = new ServiceTable();
			// The namespace launcher boots no kernel: the vmm alone, no
			// pins (its vmm finds the sandbox's agent itself).
			let kiln: VmmPaths;
			if (report?.isolation === "namespace") {
				kiln = { vmm: locateVmm(kilnOptions) };
			} else {
				const paths = locateKiln(kilnOptions);
				await verifyPins(paths);
				kiln = paths;
			}
			// An image rootfs.flatten wrote into a store boots from a
			// local copy (Documentation/sdk.md, "Images out of a machine").
			await materialise(baseOf(rootfs));
			const plan: BootPlan = {
				vmm: kiln.vmm,
				serve: (dir, log) => serve(dir, rootfs, boot.mounts, network, services, log),
				writeConfig: (dir, controlSocket, consoleLog, readyTimeoutMs, sockets) =>
					writeConfig(kiln, dir, bootOptions, { controlSocket, consoleLog, readyTimeoutMs, sockets }),
				args, tools, services,
			};
			if (report)
				plan.launcher = report;
			return bootVm(plan);
	}
}


function checkNetwork(v: unknown): NetworkPolicy | undefined {
	if (v === undefined)
		return undefined;
	const p = v as Partial<NetworkPolicy> | null;
	if (typeof p !== "object" || p === null || p.kind !== "policy" || !Object.isFrozen(p))
		fail("defineSandbox: network", `must be network.policy(...), got ${typeof v}`);
	return p as NetworkPolicy;
}

/** What this process serves for one VM: the policy hook and each virtual
 * mount, listening in its runtime directory before the vmm starts. */
async function serve(dir: string, rootfs: SandboxRootfs, mounts: [string, SandboxMount][],
	network: NetworkPolicy | undefined, services: ServiceTable, log: (line: string) => void):
	Promise<{ sockets: ServedSockets; close(): Promise<void> }> {
	const closers: (() => Promise<void>)[] = [];
	const close = async (): Promise<void> => {
		await Promise.all(closers.map((c) => c()));
	};
	try {
		const virtual = new Map<string, string>();
		let hook: string | undefined;
		if (network) {
			// The registered services' DNS names first (src/services.ts).
			const user = network.onConnectionRequest;
			const h = new HookServer((conn) => (services.answerDns(conn) ? undefined : user(conn)), network.timeoutMs, log);
			hook = path.join(dir, "hook.sock");
			await h.listen(hook);
			closers.push(() => h.close());
		}
		let n = 0;
		for (const [guest, m] of mounts) {
			if (m.kind !== "virtual")
				continue;
			const v = new VirtualFsServer(m.fileSystem, log);
			const socket = path.join(dir, `vfs-${n++}.sock`);
			await v.listen(socket);
			closers.push(() => v.close());
			virtual.set(guest, socket);
		}
		const sockets: ServedSockets = hook === undefined ? { virtual } : { hook, virtual };
		if (rootfs.kind === "cow") {
			// The store is served until the vmm has exited (the VM's
			// close closes these after it), so its last flush lands.
			const st = new BlockStoreServer(rootfs.writable, rootfs.base);
			sockets.store = path.join(dir, "store.sock");
			await st.listen(sockets.store);
			closers.push(() => st.close());
		}
		return { sockets, close };
	} catch (e) {
		await close();
		throw e;
	}
}
