// Host-served file systems: fs.memory(...) and fs.virtual(...) (seed 003).
//
// Served next round over Kiln's stream virtual-fs socket (issue 31's
// seam: Documentation/virtual-fs.md, the FUSE messages framed on a
// SOCK_STREAM): the SDK will implement the FUSE side here against
// SandboxFileSystem, with a memory implementation of it. Until then both
// throw a NotSupportedError naming the feature; their types are final
// enough to write code against.

import { NotSupportedError } from "../errors.js";

export interface SandboxFileSystemStat {
	readonly type: "file" | "directory" | "symlink";
	readonly mode: number;
	readonly size: number;
	readonly mtimeNs: bigint;
}

/** The file system a virtual mount serves (the shape may grow next round). */
export interface SandboxFileSystem {
	stat(path: string): Promise<SandboxFileSystemStat>;
	readDir(path: string): Promise<readonly string[]>;
	readFile(path: string, range?: { offset: number; length: number }): Promise<Uint8Array>;
	writeFile(path: string, data: Uint8Array, options?: { offset?: number; truncate?: boolean }): Promise<void>;
	mkdir(path: string): Promise<void>;
	remove(path: string): Promise<void>;
	rename(from: string, to: string): Promise<void>;
}

export interface MemoryFileSystemOptions {
	/** Seeded files: absolute path to content. */
	files?: Readonly<Record<string, string | Uint8Array>>;
	maxBytes?: number;
}

/** A mount whose files a host program serves. */
export interface VirtualMount {
	readonly kind: "virtual";
	readonly fileSystem: SandboxFileSystem;
}

const WHY = "host-served file systems come with Kiln's stream virtual-fs seam (issue 31); use fs.bind(...) for now";

export function memory(_options?: MemoryFileSystemOptions): SandboxFileSystem {
	throw new NotSupportedError("fs.memory", WHY);
}

export function virtual(_fileSystem: SandboxFileSystem): VirtualMount {
	throw new NotSupportedError("fs.virtual", WHY);
}
