// Seed 002's launchers: types, the host's activation transaction, the built-ins.

export { ActivationError, LauncherHost, memorySettingsStore } from "./host.js";
export type {
	ActivationResult, ActivationStep, Launched, LauncherHostOptions, SettingsSnapshot, SettingsStore,
} from "./host.js";
export { AutoLauncher, NamespaceLauncher, VmLauncher, builtinLaunchers } from "./builtin.js";
export type { BuiltinOptions, RunCommand } from "./builtin.js";
export { refKey } from "./types.js";
export type {
	LaunchReport, LaunchRequest, LaunchedSandbox, LauncherAvailability, LauncherDescriptor, LauncherSelection,
	ResolvedSettings, SandboxBackendRef, SandboxLauncher, SecretInput, SettingValue, SettingsField, SettingsFieldType,
	SettingsInput, SettingsSchema, SettingsView,
} from "./types.js";
