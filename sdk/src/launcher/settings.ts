// A launcher's descriptor and settings, checked: the descriptor is data
// (it survives a JSON round trip, only known keys), the settings follow
// its schema (string, number, boolean, select, secret). Secrets are kept
// in plaintext in the backend's stored settings and read back only as
// {configured: true}.

import { SandboxConfigError, isRecord } from "../errors.js";
import { shown } from "../validate.js";
import type {
	LauncherDescriptor, ResolvedSettings, SettingValue, SettingsField, SettingsInput, SettingsView,
} from "./types.js";

const FIELD_ID = /^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$/;
const TYPES = ["string", "number", "boolean", "select", "secret"];
const MAX_FIELDS = 64;

function keysOnly(what: string, v: unknown, allowed: readonly string[]): Record<string, unknown> {
	if (!isRecord(v))
		throw new SandboxConfigError(`${what}: must be an object, got ${shown(v)}`);
	for (const k of Object.keys(v))
		if (!allowed.includes(k))
			throw new SandboxConfigError(`${what}: unknown key ${JSON.stringify(k)} (a descriptor is data: ${allowed.join(", ")})`);
	return v;
}

/** Refuses a descriptor that is not plain data of the known shape. */
export function checkDescriptor(what: string, d: unknown): LauncherDescriptor {
	let copy: unknown;
	try {
		copy = JSON.parse(JSON.stringify(d));
	} catch (e) {
		throw new SandboxConfigError(`${what}: not serialisable (${(e as Error).message})`);
	}
	if (!isDeepEqual(copy, d))
		throw new SandboxConfigError(`${what}: not serialisable data (a function, undefined, a class or a non-finite number in it)`);
	const o = keysOnly(what, d, ["name", "description", "settings", "isolation", "platforms"]);
	if (typeof o["name"] !== "string" || o["name"] === "" || typeof o["description"] !== "string")
		throw new SandboxConfigError(`${what}: name (not empty) and description are strings`);
	if (o["settings"] !== undefined) {
		const s = keysOnly(`${what}.settings`, o["settings"], ["fields"]);
		if (!Array.isArray(s["fields"]) || s["fields"].length > MAX_FIELDS)
			throw new SandboxConfigError(`${what}.settings.fields: an array of at most ${MAX_FIELDS} fields`);
		const ids = new Set<string>();
		s["fields"].forEach((f: unknown, i) => {
			const at = `${what}.settings.fields[${i}]`;
			const fo = keysOnly(at, f, ["id", "type", "label", "description", "required", "defaultValue", "options", "min", "max"]);
			if (typeof fo["id"] !== "string" || !FIELD_ID.test(fo["id"]))
				throw new SandboxConfigError(`${at}.id: 1 to 64 letters, digits, "_", "-", ".", got ${shown(fo["id"])}`);
			if (ids.has(fo["id"]))
				throw new SandboxConfigError(`${at}.id: ${fo["id"]} twice`);
			ids.add(fo["id"]);
			if (!TYPES.includes(String(fo["type"])))
				throw new SandboxConfigError(`${at}.type: one of ${TYPES.join(", ")}, got ${shown(fo["type"])}`);
			if (typeof fo["label"] !== "string")
				throw new SandboxConfigError(`${at}.label: a string`);
			const field = fo as unknown as SettingsField;
			if (field.type === "select" && (!Array.isArray(fo["options"]) || fo["options"].length === 0 ||
				!fo["options"].every((x: unknown) => isRecord(x) && typeof x["value"] === "string" && typeof x["label"] === "string")))
				throw new SandboxConfigError(`${at}.options: a select needs options [{value, label}, ...]`);
			if (field.type !== "select" && fo["options"] !== undefined)
				throw new SandboxConfigError(`${at}.options: only a select has options`);
			if (field.type === "secret" && fo["defaultValue"] !== undefined)
				throw new SandboxConfigError(`${at}.defaultValue: a secret has no default`);
			if (fo["defaultValue"] !== undefined)
				checkValue(`${at}.defaultValue`, field, fo["defaultValue"]);
		});
	}
	if (o["isolation"] !== undefined && typeof o["isolation"] !== "string")
		throw new SandboxConfigError(`${what}.isolation: a string`);
	if (o["platforms"] !== undefined && (!Array.isArray(o["platforms"]) || !o["platforms"].every((p) => typeof p === "string")))
		throw new SandboxConfigError(`${what}.platforms: an array of strings`);
	return d as LauncherDescriptor;
}

function isDeepEqual(a: unknown, b: unknown): boolean {
	if (a === b)
		return true;
	if (Array.isArray(a) && Array.isArray(b))
		return a.length === b.length && a.every((x, i) => isDeepEqual(x, b[i]));
	if (isRecord(a) && isRecord(b)) {
		if (Object.getPrototypeOf(b) !== Object.prototype)
			return false;
		const ka = Object.keys(a);
		const kb = Object.keys(b);
		return ka.length === kb.length && ka.every((k) => isDeepEqual(a[k], b[k]));
	}
	return false;
}

function checkValue(what: string, f: SettingsField, v: unknown): SettingValue {
	switch (f.type) {
	case "string":
	case "secret":
		if (typeof v !== "string")
			throw new SandboxConfigError(`${what}: a string, got ${shown(v)}`);
		return v;
	case "number":
		if (typeof v !== "number" || !Number.isFinite(v))
			throw new SandboxConfigError(`${what}: a finite number, got ${shown(v)}`);
		if ((f.min !== undefined && v < f.min) || (f.max !== undefined && v > f.max))
			throw new SandboxConfigError(`${what}: ${v} is outside ${f.min ?? "-inf"}..${f.max ?? "inf"}`);
		return v;
	case "boolean":
		if (typeof v !== "boolean")
			throw new SandboxConfigError(`${what}: true or false, got ${shown(v)}`);
		return v;
	case "select":
		if (typeof v !== "string" || !f.options.some((o) => o.value === v))
			throw new SandboxConfigError(`${what}: one of ${f.options.map((o) => JSON.stringify(o.value)).join(", ")}, got ${shown(v)}`);
		return v;
	}
}

/** The stored settings after `input` (validation, step 1) and what
 * configure() gets (secrets resolved, step 2). `stored` is not changed. */
export function applySettings(what: string, d: LauncherDescriptor, stored: Readonly<Record<string, SettingValue>>,
	input: SettingsInput): { stored: Record<string, SettingValue>; resolved: ResolvedSettings } {
	const fields = d.settings?.fields ?? [];
	if (!isRecord(input))
		throw new SandboxConfigError(`${what}: settings must be an object, got ${shown(input)}`);
	for (const k of Object.keys(input))
		if (!fields.some((f) => f.id === k))
			throw new SandboxConfigError(`${what}: unknown setting ${JSON.stringify(k)} (${fields.map((f) => f.id).join(", ") || "it has none"})`);
	const next: Record<string, SettingValue> = {};
	const resolved: Record<string, SettingValue> = {};
	for (const f of fields) {
		const at = `${what}: ${f.id}`;
		const v: unknown = input[f.id];
		const old = stored[f.id];
		let value: SettingValue | undefined;
		if (f.type === "secret") {
			if (v === undefined || v === "")
				value = old; // an empty secret input means no change
			else if (isRecord(v) && Object.keys(v).length === 1 && typeof v["replace"] === "string" && v["replace"] !== "")
				value = v["replace"];
			else if (isRecord(v) && Object.keys(v).length === 1 && v["remove"] === true)
				value = undefined;
			else
				throw new SandboxConfigError(`${at}: a secret is changed by {replace: "value"} or {remove: true} ("" leaves it), got ${isRecord(v) || typeof v !== "string" ? shown(v) : "a bare string"}`);
		} else if (v === undefined)
			value = old ?? f.defaultValue;
		else
			value = checkValue(at, f, v);
		if (value === undefined) {
			if (f.required)
				throw new SandboxConfigError(`${at}: required (${f.label})`);
			continue;
		}
		next[f.id] = value;
		resolved[f.id] = value;
	}
	return { stored: next, resolved: Object.freeze(resolved) };
}

/** Settings as read back: secrets as {configured}. */
export function viewSettings(d: LauncherDescriptor, stored: Readonly<Record<string, SettingValue>>): SettingsView {
	const out: SettingsView = {};
	for (const f of d.settings?.fields ?? []) {
		const v = stored[f.id];
		if (f.type === "secret")
			out[f.id] = { configured: v !== undefined };
		else if (v !== undefined)
			out[f.id] = v;
		else if (f.defaultValue !== undefined)
			out[f.id] = f.defaultValue;
	}
	return out;
}
