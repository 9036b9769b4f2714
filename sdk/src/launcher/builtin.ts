// The built-in launchers:
//   vm         a Kiln microVM: `vmm start` (needs a usable KVM)
//   namespace  the same guest agent and control API in Linux namespaces:
//              `vmm start ... --isolation namespace` (a weaker boundary,
//              Documentation/security.md)
//   auto       vm where KVM is usable, else namespace; never weaker
//              silently: its selection says which and why, and choosing
//              namespace is a warning.

import { execFile } from "node:child_process";
import { readFileSync } from "node:fs";
import { PinMismatchError, SandboxConfigError, isRecord } from "../errors.js";
import { locateKiln, locateVmm, verifyPins } from "../locate.js";
import type { KilnOptions, VmmPaths } from "../locate.js";
import { defineSandbox, factsWith, launchWith } from "../sandbox.js";
import type { LaunchableSandbox, SandboxOptions } from "../sandbox.js";
import type { SandboxEnvironmentFact } from "../facts.js";
import type { SandboxVm } from "../vm.js";
import type {
	LaunchRequest, LauncherAvailability, LauncherDescriptor, LauncherSelection, ResolvedSettings, SandboxLauncher,
	SettingsSchema,
} from "./types.js";

/** What the built-ins run: `execFile`-like, for tests. */
export type RunCommand = (file: string, args: readonly string[]) => Promise<{ code: number; stdout: string; stderr: string }>;

export interface BuiltinOptions {
	/** Where Kiln is, as defineSandbox's `kiln` (the `vmm` setting overrides its vmm). */
	kiln?: KilnOptions;
	run?: RunCommand;
	/** Reads /proc/sys files (tests). */
	readProc?: (path: string) => string | undefined;
}

/** How long a probe (`vmm probe-kvm`, `vmm --help`) may take: generous,
 * for hosts that emulate. */
const PROBE_TIMEOUT_MS = 30_000;

const runFile: RunCommand = (file, args) => new Promise((resolve) => {
	const child = execFile(file, [...args], { timeout: PROBE_TIMEOUT_MS, maxBuffer: 1 << 20 }, (err, stdout, stderr) => {
		// A child the timeout killed may still exit 0: it is no answer.
		if (child.killed) {
			resolve({ code: -1, stdout: "", stderr: `no answer within ${PROBE_TIMEOUT_MS} ms` });
			return;
		}
		const code = err === null ? 0 : typeof (err as { code?: unknown }).code === "number" ? (err as { code: number }).code : -1;
		resolve({ code, stdout: String(stdout), stderr: err && code === -1 ? err.message : String(stderr) });
	});
});

const readProcFile = (p: string): string | undefined => {
	try {
		return readFileSync(p, "utf8").trim();
	} catch {
		return undefined;
	}
};

const resourceFields: SettingsSchema = {
	fields: [
		{ id: "vmm", type: "string", label: "vmm binary", description: "Path of Kiln's vmm (default: found as defineSandbox finds it)" },
		{ id: "cpus", type: "number", label: "vCPUs", description: "For a sandbox that sets no resources", min: 1, max: 64, defaultValue: 1 },
		{ id: "memoryMiB", type: "number", label: "Memory (MiB)", description: "For a sandbox that sets no resources", min: 16, max: 16 * 1024 * 1024, defaultValue: 256 },
	],
};

/** The common part of vm and namespace: settings, locating Kiln, spawning. */
abstract class KilnLauncher implements SandboxLauncher {
	abstract readonly kind: string;
	abstract readonly descriptor: LauncherDescriptor;
	protected abstract readonly isolationArgs: readonly string[];
	/** Does it boot Kiln's guest kernel (and so need it, and its pins)? */
	protected abstract readonly bootsGuest: boolean;
	protected readonly options: BuiltinOptions;
	protected readonly run: RunCommand;
	#settings: ResolvedSettings = {};
	#kiln: VmmPaths | undefined;
	/** When auto spawns through this one. */
	chosenBy: { kind: string; reason: string } | undefined;

	constructor(options: BuiltinOptions = {}) {
		this.options = options;
		this.run = options.run ?? runFile;
	}

	/** Takes effect for later spawns; the paths found by the last
	 * prepare() serve until the next one succeeds. */
	configure(settings: ResolvedSettings): void {
		this.#settings = settings;
	}

	/** Finds the vmm and, for a launcher that boots the guest, the
	 * kernel and the initramfs, and checks their pins. */
	async prepare(): Promise<void> {
		const vmm = this.#settings["vmm"];
		const options = { ...(this.options.kiln ?? {}), ...(typeof vmm === "string" && vmm !== "" ? { vmm } : {}) };
		if (!this.bootsGuest) {
			this.#kiln = { vmm: locateVmm(options) };
			return;
		}
		const kiln = locateKiln(options);
		await verifyPins(kiln);
		this.#kiln = kiln;
	}

	protected get kiln(): VmmPaths {
		if (!this.#kiln)
			throw new SandboxConfigError(`launcher ${this.kind}: not prepared`);
		return this.#kiln;
	}

	abstract isAvailable(): Promise<LauncherAvailability>;

	abstract selection(): LauncherSelection;

	/** The definition with this launcher's Kiln and sizing. */
	#define(r: LaunchRequest["sandbox"]): LaunchableSandbox {
		const kiln = this.kiln;
		const options: SandboxOptions = {
			...r,
			resources: r.resources ?? { cpus: Number(this.#settings["cpus"] ?? 1), memoryMiB: Number(this.#settings["memoryMiB"] ?? 256) },
			kiln: kiln.kernel === undefined || kiln.initrd === undefined ? { vmm: kiln.vmm } :
				{ vmm: kiln.vmm, kernel: kiln.kernel, initrd: kiln.initrd },
		};
		return defineSandbox(options) as LaunchableSandbox;
	}

	/** A definition's facts as this launcher would start it (`vmm facts`
	 * with its arguments), without starting anything. */
	environmentFacts(sandbox: LaunchRequest["sandbox"]): SandboxEnvironmentFact[] {
		return this.#define(sandbox)[factsWith](this.isolationArgs, this.bootsGuest);
	}

	async spawn(request: LaunchRequest): Promise<SandboxVm> {
		const sandbox = this.#define(request.sandbox);
		const sel = this.selection();
		const by = this.chosenBy;
		return sandbox[launchWith](request.boot, this.isolationArgs, {
			ref: { source: "builtin", kind: by?.kind ?? this.kind }, kind: this.kind, isolation: sel.isolation,
			reason: by?.reason ?? sel.reason,
		});
	}
}

/** Built-in `vm`: a Kiln microVM; available where `vmm probe-kvm` says
 * KVM is usable (Node cannot ask /dev/kvm for KVM_GET_API_VERSION itself). */
export class VmLauncher extends KilnLauncher {
	readonly kind = "vm";
	readonly descriptor: LauncherDescriptor = {
		name: "Kiln microVM",
		description: "Each sandbox is a Linux microVM on KVM: its own kernel, the guest behind virtio devices only.",
		isolation: "microvm",
		platforms: ["linux-x64"],
		settings: resourceFields,
	};
	protected readonly isolationArgs: readonly string[] = [];
	protected readonly bootsGuest = true;
	#probe: LauncherAvailability | undefined;

	override configure(settings: ResolvedSettings): void {
		super.configure(settings);
		this.#probe = undefined;
	}

	async isAvailable(): Promise<LauncherAvailability> {
		const vmm = this.kiln.vmm;
		const r = await this.run(vmm, ["probe-kvm"]);
		let v: unknown;
		try {
			v = JSON.parse(r.stdout);
		} catch {
			v = undefined;
		}
		if (!isRecord(v) || typeof v["usable"] !== "boolean" || (r.code !== 0 && r.code !== 1))
			this.#probe = { available: false, reason: `${vmm} probe-kvm: exit ${r.code}, ${(r.stderr || r.stdout).trim().split("\n")[0] || "nothing on stdout"}: not a probe-kvm answer (a vmm older than probe-kvm says "unknown command")` };
		else if (v["usable"] && r.code === 0)
			this.#probe = { available: true, reason: "KVM is usable (vmm probe-kvm)" };
		else
			this.#probe = { available: false, reason: `KVM is not usable: ${typeof v["reason"] === "string" ? v["reason"] : "no reason given"}` };
		return this.#probe;
	}

	selection(): LauncherSelection {
		return { kind: "vm", isolation: "microvm", reason: this.#probe?.reason ?? "not probed" };
	}
}

/** Built-in `namespace`: `vmm start --isolation namespace`. Available when
 * the vmm offers that option and the kernel lets this user make user
 * namespaces. */
export class NamespaceLauncher extends KilnLauncher {
	readonly kind = "namespace";
	readonly descriptor: LauncherDescriptor = {
		name: "Kiln namespace sandbox",
		description: "The same guest agent and control API in Linux namespaces with a cgroup and seccomp, " +
			"sharing the host's kernel: a weaker boundary than a microVM (Documentation/security.md).",
		isolation: "namespace",
		platforms: ["linux-x64"],
		settings: resourceFields,
	};
	protected readonly isolationArgs: readonly string[] = ["--isolation", "namespace"];
	/** No kernel, no pins: its vmm finds kiln-agent-ns beside the default
	 * guest itself (KILN_GUEST_DIR, the build tree, the install). */
	protected readonly bootsGuest = false;
	#probe: LauncherAvailability | undefined;

	async isAvailable(): Promise<LauncherAvailability> {
		const read = this.options.readProc ?? readProcFile;
		const max = read("/proc/sys/user/max_user_namespaces");
		const clone = read("/proc/sys/kernel/unprivileged_userns_clone");
		const vmm = this.kiln.vmm;
		const help = await this.run(vmm, ["--help"]);
		if (!help.stdout.includes("--isolation"))
			this.#probe = { available: false, reason: `${vmm} has no --isolation option (built without the namespace launcher)` };
		else if (max !== undefined && Number(max) === 0)
			this.#probe = { available: false, reason: "user namespaces are off (/proc/sys/user/max_user_namespaces is 0)" };
		else if (clone !== undefined && clone === "0")
			this.#probe = { available: false, reason: "unprivileged user namespaces are off (/proc/sys/kernel/unprivileged_userns_clone is 0)" };
		else
			this.#probe = { available: true, reason: "the vmm offers --isolation namespace and user namespaces are on" };
		return this.#probe;
	}

	selection(): LauncherSelection {
		return { kind: "namespace", isolation: "namespace", reason: this.#probe?.reason ?? "not probed" };
	}
}

/** Built-in `auto`: vm where KVM is usable, else namespace (unless its
 * `allowNamespace` setting is false), said in its selection and, for
 * namespace, in a warning. */
export class AutoLauncher implements SandboxLauncher {
	readonly kind = "auto";
	readonly descriptor: LauncherDescriptor = {
		name: "Automatic",
		description: "A Kiln microVM where KVM is usable, else the namespace sandbox (a weaker boundary, reported).",
		isolation: "microvm-or-namespace",
		platforms: ["linux-x64"],
		settings: {
			fields: [
				...resourceFields.fields,
				{ id: "allowNamespace", type: "boolean", label: "Fall back to the namespace sandbox", defaultValue: true },
			],
		},
	};
	readonly #vm: VmLauncher;
	readonly #ns: NamespaceLauncher;
	readonly #warn: (m: string) => void;
	#settings: ResolvedSettings = {};
	#chosen: { launcher: KilnLauncher; selection: LauncherSelection } | undefined;
	#why = "not prepared";

	constructor(options: BuiltinOptions & { warn?: (m: string) => void } = {}) {
		this.#vm = new VmLauncher(options);
		this.#ns = new NamespaceLauncher(options);
		this.#warn = options.warn ?? ((m) => process.emitWarning(m, "KilnSandboxWarning"));
	}

	configure(settings: ResolvedSettings): void {
		this.#settings = settings;
		const { allowNamespace: _a, ...rest } = settings;
		this.#vm.configure(rest);
		this.#ns.configure(rest);
	}

	/** Chooses: what it finds is kept until the next activation. */
	async prepare(): Promise<void> {
		const next = await this.#choose();
		this.#chosen = next;
		if (next) {
			next.launcher.chosenBy = { kind: "auto", reason: next.selection.reason };
			if (next.launcher === this.#ns)
				this.#warn(`sandbox backend builtin:auto: ${next.selection.reason}`);
		}
	}

	async #choose(): Promise<{ launcher: KilnLauncher; selection: LauncherSelection } | undefined> {
		// A microVM that cannot be prepared for want of a guest (no
		// kernel built or installed: a host for the namespace sandbox
		// only) is unavailable for that reason, said below; a kernel that
		// does not match its pin is no reason to fall back: refused.
		let vm: LauncherAvailability;
		try {
			await this.#vm.prepare();
			vm = await this.#vm.isAvailable();
		} catch (e) {
			if (e instanceof PinMismatchError)
				throw e;
			vm = { available: false, reason: `the microVM cannot be prepared: ${e instanceof Error ? e.message : String(e)}` };
		}
		if (vm.available)
			return { launcher: this.#vm, selection: { ...this.#vm.selection(), reason: `${vm.reason}: the microVM` } };
		if (this.#settings["allowNamespace"] === false) {
			this.#why = `${vm.reason}; the namespace fallback is off (allowNamespace)`;
			return undefined;
		}
		await this.#ns.prepare();
		const ns = await this.#ns.isAvailable();
		if (!ns.available) {
			this.#why = `${vm.reason}; namespace: ${ns.reason}`;
			return undefined;
		}
		return {
			launcher: this.#ns,
			selection: { ...this.#ns.selection(), reason: `${vm.reason}: the namespace sandbox, a weaker boundary than a microVM (Documentation/security.md)` },
		};
	}

	isAvailable(): LauncherAvailability {
		return this.#chosen ? { available: true, reason: this.#chosen.selection.reason } : { available: false, reason: this.#why };
	}

	selection(): LauncherSelection {
		return this.#chosen?.selection ?? { kind: "none", isolation: "none", reason: this.#why };
	}

	/** The chosen launcher's (KilnLauncher.environmentFacts). */
	environmentFacts(sandbox: LaunchRequest["sandbox"]): SandboxEnvironmentFact[] {
		if (!this.#chosen)
			throw new SandboxConfigError(`launcher auto: nothing to run on (${this.#why})`);
		return this.#chosen.launcher.environmentFacts(sandbox);
	}

	spawn(request: LaunchRequest): Promise<SandboxVm> {
		if (!this.#chosen)
			return Promise.reject(new SandboxConfigError(`launcher auto: nothing to run on (${this.#why})`));
		return this.#chosen.launcher.spawn(request);
	}
}

/** The three built-ins, ready for LauncherHost.register. */
export function builtinLaunchers(options: BuiltinOptions & { warn?: (m: string) => void } = {}):
	[VmLauncher, NamespaceLauncher, AutoLauncher] {
	return [new VmLauncher(options), new NamespaceLauncher(options), new AutoLauncher(options)];
}
