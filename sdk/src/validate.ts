// Checks shared by the option parsers. Each error starts with the option's
// name as the caller wrote it and shows the value the caller passed.

import path from "node:path";
import { SandboxConfigError, isRecord } from "./errors.js";

/** The value as the error message shows it: JSON, cut at 80 characters. */
export function shown(v: unknown): string {
	let s: string;
	if (typeof v === "bigint")
		s = `${v}n`;
	else if (typeof v === "function")
		s = "a function";
	else if (v === undefined)
		s = "undefined";
	else {
		try {
			s = JSON.stringify(v, (_k, x: unknown) => (typeof x === "bigint" ? `${x}n` : x)) ?? String(v);
		} catch {
			s = String(v);
		}
	}
	return s.length > 80 ? s.slice(0, 77) + "..." : s;
}

export function fail(what: string, why: string): never {
	throw new SandboxConfigError(`${what}: ${why}`);
}

/** `v` is a plain object with only `allowed` keys. */
export function record(what: string, v: unknown, allowed: readonly string[]): Record<string, unknown> {
	if (!isRecord(v))
		fail(what, `must be an object, got ${shown(v)}`);
	for (const k of Object.keys(v))
		if (!allowed.includes(k))
			fail(what, `unknown option "${k}" (known: ${allowed.join(", ")})`);
	return v;
}

export function string(what: string, v: unknown): string {
	if (typeof v !== "string")
		fail(what, `must be a string, got ${shown(v)}`);
	return v;
}

export function nonEmpty(what: string, v: unknown): string {
	const s = string(what, v);
	if (s.length === 0)
		fail(what, "must not be empty");
	return s;
}

/** An absolute path without NUL bytes, normalised (no "." or ".."). */
export function absolutePath(what: string, v: unknown): string {
	const s = nonEmpty(what, v);
	if (!s.startsWith("/"))
		fail(what, `must be an absolute path, got ${shown(v)}`);
	if (s.includes("\0"))
		fail(what, `must not contain a NUL byte, got ${shown(v)}`);
	return s;
}

/** An absolute path with no "." or ".." component and no empty one but a
 * trailing slash: what the guest-side options want. */
export function cleanAbsolutePath(what: string, v: unknown): string {
	const s = absolutePath(what, v);
	const parts = s.split("/").slice(1);
	if (parts.some((p) => p === "." || p === ".."))
		fail(what, `must not have "." or ".." components, got ${shown(v)}`);
	if (s.length > 4095)
		fail(what, `is ${s.length} bytes, over 4095`);
	return s === "/" ? s : path.posix.normalize(s).replace(/\/$/, "");
}

export function integer(what: string, v: unknown, min: number, max: number): number {
	if (typeof v !== "number" || !Number.isInteger(v))
		fail(what, `must be an integer, got ${shown(v)}`);
	if (v < min || v > max)
		fail(what, `must be from ${min} to ${max}, got ${v}`);
	return v;
}

export function oneOf<T extends string>(what: string, v: unknown, values: readonly T[]): T {
	if (typeof v !== "string" || !(values as readonly string[]).includes(v))
		fail(what, `must be ${values.map((x) => `"${x}"`).join(" or ")}, got ${shown(v)}`);
	return v as T;
}

export function optionalBoolean(what: string, v: unknown): boolean {
	if (v === undefined)
		return false;
	if (typeof v !== "boolean")
		fail(what, `must be a boolean, got ${shown(v)}`);
	return v;
}

/** Printable ASCII, no control characters. */
export function printable(what: string, v: string): string {
	// eslint-disable-next-line no-control-regex
	if (/[\x00-\x1f\x7f]/.test(v))
		fail(what, `must be printable, got ${shown(v)}`);
	return v;
}
