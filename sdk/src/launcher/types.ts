// Seed 002's sandbox backends: a launcher declares a serialisable
// descriptor with a settings schema; the host validates and stores its
// settings (secrets never read back) and activates one launcher at a time
// (src/launcher/host.ts). Built-ins: src/launcher/builtin.ts.

import type { BootOptions } from "../config.js";
import type { SandboxOptions } from "../sandbox.js";
import type { SandboxVm } from "../vm.js";

/** A backend's source-qualified identity: two packs may use one kind. */
export type SandboxBackendRef =
	| { source: "builtin"; kind: string }
	| { source: "atom-pack"; packId: string; kind: string };

interface FieldBase {
	/** The setting's key, 1 to 64 letters, digits, "_", "-", ".". */
	id: string;
	label: string;
	description?: string;
	required?: boolean;
}

/** One setting. A secret has no default and is never read back. */
export type SettingsField =
	| (FieldBase & { type: "string"; defaultValue?: string })
	| (FieldBase & { type: "number"; defaultValue?: number; min?: number; max?: number })
	| (FieldBase & { type: "boolean"; defaultValue?: boolean })
	| (FieldBase & { type: "select"; options: readonly { value: string; label: string }[]; defaultValue?: string })
	| (FieldBase & { type: "secret" });

export type SettingsFieldType = SettingsField["type"];

export interface SettingsSchema {
	fields: readonly SettingsField[];
}

/** What a presenter shows: data only, no code (checked by JSON round trip). */
export interface LauncherDescriptor {
	name: string;
	description: string;
	settings?: SettingsSchema;
	/** The boundary it enforces, as data: "microvm", "namespace", ... */
	isolation?: string;
	/** Where it runs, as data: "linux-x64", ... */
	platforms?: readonly string[];
}

export type SettingValue = string | number | boolean;

/** Settings as configure() gets them: defaults applied, secrets resolved. */
export type ResolvedSettings = Readonly<Record<string, SettingValue>>;

/** A secret field's input: "" (or absent) leaves it as it is; replacing
 * and removing are explicit. */
export type SecretInput = "" | { replace: string } | { remove: true };

/** Candidate settings for activate(): what changes. */
export type SettingsInput = Readonly<Record<string, SettingValue | SecretInput | undefined>>;

/** Settings as read back: a secret is only whether it is set. */
export type SettingsView = Record<string, SettingValue | { configured: boolean }>;

export interface LauncherAvailability {
	available: boolean;
	/** Why (always said: the chosen launcher and its reason are reported). */
	reason: string;
}

/** What a launcher picked and why (auto: which of vm and namespace). */
export interface LauncherSelection {
	kind: string;
	isolation: string;
	reason: string;
}

/** What the launcher that started a VM reports on it (vm.launcher). */
export interface LaunchReport extends LauncherSelection {
	ref: SandboxBackendRef;
}

/** What spawn() starts: a sandbox definition (without `kiln`: the
 * launcher's) and its boot options. */
export interface LaunchRequest {
	sandbox: Omit<SandboxOptions, "kiln">;
	boot?: BootOptions;
}

/** Anything a launcher spawns: closed by its owner. */
export interface LaunchedSandbox {
	close(): Promise<void>;
}

export interface SandboxLauncher<S extends LaunchedSandbox = SandboxVm> {
	kind: string;
	descriptor: LauncherDescriptor;
	/** Takes the validated settings, secrets resolved (inside this process only). */
	configure(settings: ResolvedSettings): void | Promise<void>;
	prepare(): void | Promise<void>;
	isAvailable(): boolean | LauncherAvailability | Promise<boolean | LauncherAvailability>;
	spawn(request: LaunchRequest): Promise<S>;
	/** Frees idle resources once another launcher is active; what it
	 * spawned keeps running. */
	dispose?(): void | Promise<void>;
	/** What it will run on, once prepared. */
	selection?(): LauncherSelection;
}

export function refKey(ref: SandboxBackendRef): string {
	return ref.source === "builtin" ? `builtin:${ref.kind}` : `atom-pack:${ref.packId}:${ref.kind}`;
}
