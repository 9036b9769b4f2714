// SandboxFileSystem: what a host program implements to serve a virtual
// mount (seed 003, "fs.virtual(fileSystem)"). Paths are absolute,
// "/"-separated, relative to the mount's root, without "." or "..".
// Failures are errors whose `code` is a Linux errno name ("ENOENT",
// "EEXIST", "ENOTEMPTY", ...), as Node's own fs errors: the guest's call
// fails with that errno; any other error is EIO.

export interface SandboxFileSystemStat {
	readonly type: "file" | "directory" | "symlink";
	/** Permission bits (0o7777). */
	readonly mode: number;
	/** Bytes (files); 0 for directories. */
	readonly size: number;
	readonly mtimeNs: bigint;
}

export interface WriteOptions {
	/** Write at this byte offset (default 0). */
	offset?: number;
	/** Cut the file at the end of what is written (default: true
	 * without offset, false with one). */
	truncate?: boolean;
	/** "always" (default): create a missing file; "exclusive": fail with
	 * EEXIST if it exists; "never": fail with ENOENT if it does not. */
	create?: "always" | "exclusive" | "never";
	/** A created file's permission bits (default 0o644). */
	mode?: number;
}

export interface SandboxFileSystem {
	stat(path: string): Promise<SandboxFileSystemStat>;
	/** The entry names of a directory (not "." and ".."). */
	readDir(path: string): Promise<readonly string[]>;
	readFile(path: string, range?: { offset: number; length: number }): Promise<Uint8Array>;
	writeFile(path: string, data: Uint8Array, options?: WriteOptions): Promise<void>;
	truncate(path: string, size: number): Promise<void>;
	mkdir(path: string, options?: { mode?: number }): Promise<void>;
	/** A file, or an empty directory (ENOTEMPTY otherwise). */
	remove(path: string): Promise<void>;
	/** Replaces a file at `to`, or an empty directory by a directory. */
	rename(from: string, to: string): Promise<void>;
	chmod?(path: string, mode: number): Promise<void>;
	readlink?(path: string): Promise<string>;
}

/** An error with an errno name, as SandboxFileSystem methods throw. */
export function fsError(code: string, message: string): Error & { code: string } {
	return Object.assign(new Error(`${code}: ${message}`), { code });
}
