// The launcher host: seed 002's activation transaction. One launcher is
// active; activate() is serialised and goes, in this order:
//   1. validate the candidate settings        (failure: nothing changes)
//   2. resolve secrets, in this process         (failure: nothing changes)
//   3. configure and prepare the candidate      (failure: nothing changes;
//      the old launcher keeps serving meanwhile)
//   4. probe its availability                   (failure: nothing changes)
//   5. swap the active launcher, atomically
//   6. persist the settings and the selection   (failure: swapped back)
//   7. dispose the previous launcher's idle resources (failure: the
//      activation stands, a warning, retried later)
// No step ever selects no launcher or an unconfined one: until the first
// activation nothing spawns; afterwards one configured, prepared,
// available launcher is active at every instant.

import { SandboxConfigError, SandboxError, isRecord } from "../errors.js";
import { shown } from "../validate.js";
import { applySettings, checkDescriptor, viewSettings } from "./settings.js";
import { refKey } from "./types.js";
import type {
	LaunchRequest, LaunchedSandbox, LauncherAvailability, LauncherDescriptor, LauncherSelection, ResolvedSettings,
	SandboxBackendRef, SandboxLauncher, SettingValue, SettingsInput, SettingsView,
} from "./types.js";

/** What the host persists: each backend's settings under its
 * source-qualified key (refKey), and the active selection. */
export interface SettingsSnapshot {
	active: SandboxBackendRef | null;
	settings: Record<string, Record<string, SettingValue>>;
}

export interface SettingsStore {
	load(): Promise<SettingsSnapshot>;
	save(snapshot: SettingsSnapshot): Promise<void>;
}

/** A store in this process's memory (tests, or a host that persists elsewhere). */
export function memorySettingsStore(initial?: SettingsSnapshot): SettingsStore & { snapshot: SettingsSnapshot } {
	const s = {
		snapshot: structuredClone(initial ?? { active: null, settings: {} }),
		load: async () => structuredClone(s.snapshot),
		save: async (next: SettingsSnapshot) => {
			s.snapshot = structuredClone(next);
		},
	};
	return s;
}

export type ActivationStep = "validate" | "resolve" | "prepare" | "availability" | "persist";

/** An activation that failed at `step`; the runtime and the persisted
 * selection are as they were before it. */
export class ActivationError extends SandboxError {
	override name = "ActivationError";
	readonly step: ActivationStep;
	readonly ref: SandboxBackendRef;

	constructor(ref: SandboxBackendRef, step: ActivationStep, why: string, cause?: unknown) {
		super(`activate ${refKey(ref)}: ${step}: ${why}`);
		this.step = step;
		this.ref = ref;
		if (cause !== undefined)
			Object.defineProperty(this, "cause", { value: cause });
	}
}

export interface ActivationResult {
	ref: SandboxBackendRef;
	/** What it runs on and why (auto: vm or namespace). */
	selection: LauncherSelection;
	/** Step 7's failure, if any (the activation stands). */
	warnings: string[];
}

/** A spawned sandbox and the launcher that spawned it, for good. */
export interface Launched<S> {
	launcher: SandboxBackendRef;
	sandbox: S;
}

interface Entry<S extends LaunchedSandbox> {
	ref: SandboxBackendRef;
	launcher: SandboxLauncher<S>;
	descriptor: LauncherDescriptor;
}

interface Active<S extends LaunchedSandbox> {
	entry: Entry<S>;
	resolved: ResolvedSettings;
	selection: LauncherSelection;
}

export interface LauncherHostOptions {
	store: SettingsStore;
	/** Delays of step 7's retries (default 1 s, 10 s, 60 s). */
	cleanupRetryMs?: readonly number[];
	/** Where warnings go (default: process.emitWarning, KilnSandboxWarning). */
	warn?: (message: string) => void;
}

const errorText = (e: unknown): string => (e instanceof Error ? e.message : String(e));

function availability(v: unknown): LauncherAvailability {
	if (typeof v === "boolean")
		return { available: v, reason: v ? "available" : "not available" };
	if (isRecord(v) && typeof v["available"] === "boolean")
		return { available: v["available"], reason: typeof v["reason"] === "string" ? v["reason"] : "" };
	return { available: false, reason: `isAvailable() answered ${shown(v)}` };
}

export class LauncherHost<S extends LaunchedSandbox> {
	readonly #entries = new Map<string, Entry<S>>();
	readonly #store: SettingsStore;
	readonly #retry: readonly number[];
	readonly #warn: (message: string) => void;
	#settings: Record<string, Record<string, SettingValue>> = {};
	#persistedActive: SandboxBackendRef | null = null;
	#active: Active<S> | undefined;
	#queue: Promise<unknown> = Promise.resolve();
	readonly #cleanups = new Set<Promise<void>>();

	private constructor(options: LauncherHostOptions) {
		this.#store = options.store;
		this.#retry = options.cleanupRetryMs ?? [1000, 10_000, 60_000];
		this.#warn = options.warn ?? ((m) => process.emitWarning(m, "KilnSandboxWarning"));
	}

	/** A host with `store`'s settings. Nothing is active until activate()
	 * (or resume()). */
	static async open<S extends LaunchedSandbox>(options: LauncherHostOptions): Promise<LauncherHost<S>> {
		const h = new LauncherHost<S>(options);
		const snap = await options.store.load();
		h.#settings = structuredClone(snap.settings ?? {});
		h.#persistedActive = snap.active ?? null;
		return h;
	}

	/** Adds a built-in launcher, or one an atom pack contributes. */
	register(launcher: SandboxLauncher<S>, packId?: string): SandboxBackendRef {
		const kind = launcher.kind;
		if (typeof kind !== "string" || !/^[a-z0-9][a-z0-9._-]{0,63}$/.test(kind))
			throw new SandboxConfigError(`launcher kind ${shown(kind)}: 1 to 64 lower-case letters, digits, ".", "_", "-"`);
		const ref: SandboxBackendRef = packId === undefined ? { source: "builtin", kind } : { source: "atom-pack", packId, kind };
		const key = refKey(ref);
		if (this.#entries.has(key))
			throw new SandboxConfigError(`launcher ${key}: registered already`);
		const descriptor = checkDescriptor(`launcher ${key}: descriptor`, launcher.descriptor);
		this.#entries.set(key, { ref, launcher, descriptor: structuredClone(descriptor) });
		return ref;
	}

	/** Every launcher: its descriptor (data) and whether it is active. */
	list(): { ref: SandboxBackendRef; descriptor: LauncherDescriptor; active: boolean }[] {
		return [...this.#entries.values()].map((e) => ({
			ref: e.ref, descriptor: structuredClone(e.descriptor), active: this.#active?.entry === e,
		}));
	}

	/** The active launcher and what it runs on. */
	get active(): { ref: SandboxBackendRef; selection: LauncherSelection } | undefined {
		return this.#active && { ref: this.#active.entry.ref, selection: this.#active.selection };
	}

	/** A backend's stored settings: secrets only as {configured}. */
	settings(ref: SandboxBackendRef): SettingsView {
		const e = this.#entry(ref);
		return viewSettings(e.descriptor, this.#settings[refKey(ref)] ?? {});
	}

	#entry(ref: SandboxBackendRef): Entry<S> {
		const e = isRecord(ref) ? this.#entries.get(refKey(ref)) : undefined;
		if (!e)
			throw new SandboxConfigError(`no launcher ${isRecord(ref) ? refKey(ref) : shown(ref)}`);
		return e;
	}

	#serial<T>(f: () => Promise<T>): Promise<T> {
		const run = this.#queue.then(f, f);
		this.#queue = run.catch(() => undefined);
		return run;
	}

	/** The transaction (top of this file). */
	activate(ref: SandboxBackendRef, input: SettingsInput = {}): Promise<ActivationResult> {
		return this.#serial(() => this.#activate(ref, input));
	}

	/** Activates the persisted selection, else built-in auto. */
	resume(): Promise<ActivationResult> {
		const persisted = this.#persistedActive;
		if (persisted && this.#entries.has(refKey(persisted)))
			return this.activate(persisted).catch((e: unknown) => {
				this.#warn(`${errorText(e)}; activating builtin:auto instead`);
				return this.activate({ source: "builtin", kind: "auto" });
			});
		return this.activate({ source: "builtin", kind: "auto" });
	}

	async #activate(ref: SandboxBackendRef, input: SettingsInput): Promise<ActivationResult> {
		const cand = this.#entry(ref);
		const key = refKey(ref);
		const prev = this.#active;
		// 1, 2: validate, then resolve the secrets (kept in the stored
		// settings; they leave this process only to configure()).
		let next: { stored: Record<string, SettingValue>; resolved: ResolvedSettings };
		try {
			next = applySettings(`activate ${key}`, cand.descriptor, this.#settings[key] ?? {}, input);
		} catch (e) {
			throw new ActivationError(ref, "validate", errorText(e), e);
		}
		// 3, 4: the old launcher keeps serving while the candidate gets ready.
		const undo = async (): Promise<void> => {
			if (prev?.entry === cand)
				await Promise.resolve(cand.launcher.configure(prev.resolved)).catch(() => undefined);
			else
				await Promise.resolve(cand.launcher.dispose?.()).catch(() => undefined);
		};
		let selection: LauncherSelection;
		try {
			await cand.launcher.configure(next.resolved);
			await cand.launcher.prepare();
		} catch (e) {
			await undo();
			throw new ActivationError(ref, "prepare", errorText(e), e);
		}
		let avail: LauncherAvailability;
		try {
			avail = availability(await cand.launcher.isAvailable());
		} catch (e) {
			avail = { available: false, reason: errorText(e) };
		}
		if (!avail.available) {
			await undo();
			throw new ActivationError(ref, "availability", avail.reason || "not available");
		}
		selection = cand.launcher.selection?.() ?? {
			kind: cand.launcher.kind, isolation: cand.descriptor.isolation ?? "unknown", reason: avail.reason,
		};
		// 5: swap.
		this.#active = { entry: cand, resolved: next.resolved, selection };
		// 6: persist; on failure the runtime goes back.
		const settings = { ...this.#settings, [key]: next.stored };
		try {
			await this.#store.save({ active: ref, settings: structuredClone(settings) });
		} catch (e) {
			this.#active = prev;
			await undo();
			throw new ActivationError(ref, "persist", errorText(e), e);
		}
		this.#settings = settings;
		this.#persistedActive = ref;
		// 7: the previous launcher's idle resources.
		const warnings: string[] = [];
		if (prev && prev.entry !== cand) {
			try {
				await prev.entry.launcher.dispose?.();
			} catch (e) {
				const w = `sandbox backend ${refKey(prev.entry.ref)}: disposing its idle resources failed (${errorText(e)}); ` +
					`${key} is active; retrying`;
				warnings.push(w);
				this.#warn(w);
				this.#retryCleanup(prev.entry);
			}
		}
		return { ref, selection, warnings };
	}

	#retryCleanup(entry: Entry<S>): void {
		const key = refKey(entry.ref);
		const run = (async () => {
			for (let i = 0; i < this.#retry.length; i++) {
				await new Promise<void>((r) => setTimeout(r, this.#retry[i]).unref());
				if (this.#active?.entry === entry)
					return; // active again: its resources are not idle
				try {
					await entry.launcher.dispose?.();
					return;
				} catch (e) {
					const last = i === this.#retry.length - 1;
					this.#warn(`sandbox backend ${key}: disposing its idle resources failed again (${errorText(e)})${last ? "; giving up" : "; retrying"}`);
				}
			}
		})();
		this.#cleanups.add(run);
		void run.finally(() => this.#cleanups.delete(run));
	}

	/** Resolves once no cleanup retry is pending (tests, shutdown). */
	async idle(): Promise<void> {
		// The retries' timers do not keep the process alive; this wait does.
		const keep = setInterval(() => undefined, 1000);
		try {
			while (this.#cleanups.size > 0)
				await Promise.all([...this.#cleanups]);
		} finally {
			clearInterval(keep);
		}
	}

	/** Spawns with the launcher active now; the sandbox keeps it for good. */
	async spawn(request: LaunchRequest): Promise<Launched<S>> {
		const a = this.#active;
		if (!a)
			throw new SandboxConfigError("spawn: no sandbox backend is active (activate one, or resume())");
		return { launcher: a.entry.ref, sandbox: await a.entry.launcher.spawn(request) };
	}

	/** Disables an atom pack: its launchers go, their settings stay. When
	 * one is active, built-in auto is activated first; if that fails the
	 * pack stays and this throws. */
	removePack(packId: string): Promise<void> {
		return this.#serial(async () => {
			const a = this.#active;
			if (a && a.entry.ref.source === "atom-pack" && a.entry.ref.packId === packId) {
				try {
					await this.#activate({ source: "builtin", kind: "auto" }, {});
				} catch (e) {
					throw new SandboxConfigError(`remove pack ${packId}: its launcher ${refKey(a.entry.ref)} is active and the safe fallback builtin:auto cannot be established (${errorText(e)}): refused`);
				}
			}
			for (const [k, e] of this.#entries)
				if (e.ref.source === "atom-pack" && e.ref.packId === packId)
					this.#entries.delete(k);
		});
	}
}
