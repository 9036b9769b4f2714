// Host-served file systems: fs.memory(...) and fs.virtual(...) (seed 003).
// A virtual mount is served from this process over Kiln's stream
// virtual-fs socket (Documentation/virtual-fs.md): server.ts is the FUSE
// side, answering from a SandboxFileSystem (types.ts); memory.ts is the
// in-memory one fs.memory makes.

import { SandboxConfigError } from "../errors.js";
import { MemoryFileSystem } from "./memory.js";
import type { MemoryFileSystemOptions } from "./memory.js";
import type { SandboxFileSystem } from "./types.js";
import { record, shown } from "../validate.js";

export type { SandboxFileSystem, SandboxFileSystemStat, WriteOptions } from "./types.js";
export { fsError } from "./types.js";
export { MemoryFileSystem } from "./memory.js";
export type { MemoryFileSystemOptions } from "./memory.js";

/** A mount whose files a host program serves. */
export interface VirtualMount {
	readonly kind: "virtual";
	readonly fileSystem: SandboxFileSystem;
	/** How long the guest waits for one answer before EIO (ms). */
	readonly timeoutMs: number;
}

const METHODS = ["stat", "readDir", "readFile", "writeFile", "truncate", "mkdir", "remove", "rename"] as const;

export function memory(options: MemoryFileSystemOptions = {}): MemoryFileSystem {
	const o = record("fs.memory", options, ["files", "maxBytes", "maxNodes"]);
	const files = o["files"];
	if (files !== undefined && (typeof files !== "object" || files === null || Array.isArray(files)))
		throw new SandboxConfigError(`fs.memory: files must be a record of absolute paths to contents, got ${shown(files)}`);
	for (const [p, c] of Object.entries((files ?? {}) as Record<string, unknown>))
		if (!p.startsWith("/") || (typeof c !== "string" && !(c instanceof Uint8Array)))
			throw new SandboxConfigError(`fs.memory: files[${JSON.stringify(p)}] must be an absolute path to a string or Uint8Array, got ${shown(c)}`);
	try {
		return new MemoryFileSystem(options);
	} catch (e) {
		throw new SandboxConfigError(`fs.memory: ${(e as Error).message}`);
	}
}

export function virtual(fileSystem: SandboxFileSystem, options: { timeoutMs?: number } = {}): VirtualMount {
	const f = fileSystem as unknown as Record<string, unknown> | null;
	const missing = METHODS.filter((m) => typeof f?.[m] !== "function");
	if (typeof f !== "object" || f === null || missing.length > 0)
		throw new SandboxConfigError(`fs.virtual: fileSystem must implement SandboxFileSystem (missing: ${missing.join(", ")})`);
	const o = record("fs.virtual: options", options, ["timeoutMs"]);
	const t = o["timeoutMs"] ?? 5000;
	if (typeof t !== "number" || !Number.isInteger(t) || t < 1 || t > 3_600_000)
		throw new SandboxConfigError(`fs.virtual: timeoutMs must be an integer from 1 to 3600000, got ${shown(t)}`);
	return Object.freeze({ kind: "virtual", fileSystem, timeoutMs: t });
}
