// fs.memory({files}): an in-memory POSIX-ish file system (seed 003,
// "fs.memory(options)"): directories, regular files, modes and
// modification times; bounded by maxBytes of file data and maxNodes
// entries. Its bytes live in this process ("host-owned memory"): the
// host can read and change them while a VM has them mounted.

import type { SandboxFileSystem, SandboxFileSystemStat, WriteOptions } from "./types.js";
import { fsError } from "./types.js";

export interface MemoryFileSystemOptions {
	/** Seeded files: absolute path to content (parents are made). */
	files?: Readonly<Record<string, string | Uint8Array>>;
	/** Most bytes of file data in all (default 256 MiB). */
	maxBytes?: number;
	/** Most files and directories (default 65536). */
	maxNodes?: number;
}

interface Node {
	type: "file" | "directory";
	mode: number;
	mtimeNs: bigint;
	/** file: data[0, size) is the content. */
	data: Uint8Array;
	size: number;
	/** directory: child names. */
	children: Set<string>;
}

const nowNs = (): bigint => BigInt(Date.now()) * 1_000_000n;

/** "/a/b" -> ["a", "b"]; refuses relative paths and ".", "..". */
function parts(path: string): string[] {
	if (typeof path !== "string" || !path.startsWith("/") || path.includes("\0"))
		throw fsError("EINVAL", `${JSON.stringify(path)} is not an absolute path`);
	const p = path.split("/").filter((c) => c !== "");
	if (p.some((c) => c === "." || c === ".."))
		throw fsError("EINVAL", `${JSON.stringify(path)} has "." or ".." in it`);
	return p;
}

const join = (p: string[]): string => "/" + p.join("/");

export class MemoryFileSystem implements SandboxFileSystem {
	readonly #nodes = new Map<string, Node>();
	readonly #maxBytes: number;
	readonly #maxNodes: number;
	#bytes = 0;

	constructor(options: MemoryFileSystemOptions = {}) {
		this.#maxBytes = options.maxBytes ?? 256 * 1024 * 1024;
		this.#maxNodes = options.maxNodes ?? 65536;
		this.#nodes.set("/", this.#node("directory", 0o755));
		for (const [path, content] of Object.entries(options.files ?? {})) {
			const p = parts(path);
			if (p.length === 0)
				throw fsError("EISDIR", "files: \"/\" is the root directory");
			for (let i = 1; i < p.length; i++)
				if (!this.#nodes.has(join(p.slice(0, i))))
					this.#mkdirSync(p.slice(0, i), 0o755);
			const bytes = typeof content === "string" ? new TextEncoder().encode(content) : new Uint8Array(content);
			this.#writeSync(join(p), bytes, { offset: 0, truncate: true });
		}
	}

	#node(type: "file" | "directory", mode: number): Node {
		return { type, mode: mode & 0o7777, mtimeNs: nowNs(), data: new Uint8Array(0), size: 0, children: new Set() };
	}

	#get(path: string): Node {
		const n = this.#nodes.get(join(parts(path)));
		if (!n)
			throw fsError("ENOENT", `${path}: no such file or directory`);
		return n;
	}

	#parent(p: string[]): Node {
		if (p.length === 0)
			throw fsError("EBUSY", "the root");
		const dir = this.#nodes.get(join(p.slice(0, -1)));
		if (!dir)
			throw fsError("ENOENT", `${join(p.slice(0, -1))}: no such directory`);
		if (dir.type !== "directory")
			throw fsError("ENOTDIR", `${join(p.slice(0, -1))}: not a directory`);
		return dir;
	}

	#add(p: string[], n: Node): void {
		const dir = this.#parent(p);
		if (this.#nodes.size >= this.#maxNodes)
			throw fsError("ENOSPC", `more than ${this.#maxNodes} entries`);
		dir.children.add(p[p.length - 1] ?? "");
		dir.mtimeNs = nowNs();
		this.#nodes.set(join(p), n);
	}

	#mkdirSync(p: string[], mode: number): void {
		if (this.#nodes.has(join(p)))
			throw fsError("EEXIST", `${join(p)}: exists`);
		this.#add(p, this.#node("directory", mode));
	}

	#writeSync(path: string, data: Uint8Array, o: WriteOptions): void {
		const p = parts(path);
		let n = this.#nodes.get(join(p));
		if (n && o.create === "exclusive")
			throw fsError("EEXIST", `${path}: exists`);
		if (!n) {
			if (o.create === "never")
				throw fsError("ENOENT", `${path}: no such file`);
			// Refused before the entry is made, so a failed write leaves none.
			if (this.#bytes + (o.offset ?? 0) + data.length > this.#maxBytes)
				throw fsError("ENOSPC", `past the file system's ${this.#maxBytes} bytes`);
			n = this.#node("file", o.mode ?? 0o644);
			this.#add(p, n);
		}
		if (n.type !== "file")
			throw fsError("EISDIR", `${path}: a directory`);
		const offset = o.offset ?? 0;
		const truncate = o.truncate ?? o.offset === undefined;
		const end = offset + data.length;
		const size = truncate ? end : Math.max(n.size, end);
		this.#resize(n, size, offset);
		n.data.set(data, offset);
		n.mtimeNs = nowNs();
	}

	/** Sets n's size, zeroing what grows, bytes past keep untouched:
	 * [keep, size) will be written by the caller. */
	#resize(n: Node, size: number, keep = size): void {
		if (!Number.isSafeInteger(size) || size < 0)
			throw fsError("EINVAL", `size ${size}`);
		const grow = size - n.size;
		if (this.#bytes + grow > this.#maxBytes)
			throw fsError("ENOSPC", `past the file system's ${this.#maxBytes} bytes`);
		if (size > n.data.length) {
			const data = new Uint8Array(Math.max(size, Math.min(n.data.length * 2, this.#maxBytes)));
			data.set(n.data.subarray(0, Math.min(n.size, keep)));
			n.data = data;
		} else if (size > n.size) {
			n.data.fill(0, n.size, size);
		}
		if (size < n.size && size < n.data.length / 4) {
			n.data = n.data.slice(0, size); // give memory back
		}
		this.#bytes += grow;
		n.size = size;
	}

	async stat(path: string): Promise<SandboxFileSystemStat> {
		const n = this.#get(path);
		return { type: n.type, mode: n.mode, size: n.type === "file" ? n.size : 0, mtimeNs: n.mtimeNs };
	}

	async readDir(path: string): Promise<readonly string[]> {
		const n = this.#get(path);
		if (n.type !== "directory")
			throw fsError("ENOTDIR", `${path}: not a directory`);
		return [...n.children].sort();
	}

	async readFile(path: string, range?: { offset: number; length: number }): Promise<Uint8Array> {
		const n = this.#get(path);
		if (n.type !== "file")
			throw fsError("EISDIR", `${path}: a directory`);
		const start = Math.min(range?.offset ?? 0, n.size);
		const end = range ? Math.min(start + range.length, n.size) : n.size;
		return n.data.slice(start, end);
	}

	async writeFile(path: string, data: Uint8Array | string, options: WriteOptions = {}): Promise<void> {
		this.#writeSync(path, typeof data === "string" ? new TextEncoder().encode(data) : data, options);
	}

	async truncate(path: string, size: number): Promise<void> {
		const n = this.#get(path);
		if (n.type !== "file")
			throw fsError("EISDIR", `${path}: a directory`);
		this.#resize(n, size);
		n.mtimeNs = nowNs();
	}

	async mkdir(path: string, options: { mode?: number } = {}): Promise<void> {
		this.#mkdirSync(parts(path), options.mode ?? 0o755);
	}

	async remove(path: string): Promise<void> {
		const p = parts(path);
		const n = this.#get(path);
		if (p.length === 0)
			throw fsError("EBUSY", "the root cannot be removed");
		if (n.type === "directory" && n.children.size > 0)
			throw fsError("ENOTEMPTY", `${path}: not empty`);
		const dir = this.#parent(p);
		dir.children.delete(p[p.length - 1] ?? "");
		dir.mtimeNs = nowNs();
		this.#nodes.delete(join(p));
		if (n.type === "file")
			this.#bytes -= n.size;
	}

	async rename(from: string, to: string): Promise<void> {
		const a = parts(from);
		const b = parts(to);
		const n = this.#get(from);
		if (a.length === 0 || b.length === 0)
			throw fsError("EBUSY", "the root cannot be renamed");
		const src = join(a);
		const dst = join(b);
		if (src === dst)
			return;
		if (dst.startsWith(src + "/"))
			throw fsError("EINVAL", `${to} is inside ${from}`);
		const target = this.#nodes.get(dst);
		const toDir = this.#parent(b);
		if (target) {
			if (target.type === "directory" && n.type !== "directory")
				throw fsError("EISDIR", `${to}: a directory`);
			if (target.type !== "directory" && n.type === "directory")
				throw fsError("ENOTDIR", `${to}: not a directory`);
			await this.remove(dst);
		}
		const fromDir = this.#parent(a);
		fromDir.children.delete(a[a.length - 1] ?? "");
		toDir.children.add(b[b.length - 1] ?? "");
		fromDir.mtimeNs = toDir.mtimeNs = nowNs();
		const moved = [...this.#nodes.entries()].filter(([k]) => k === src || k.startsWith(src + "/"));
		for (const [k] of moved)
			this.#nodes.delete(k);
		for (const [k, v] of moved)
			this.#nodes.set(dst + k.slice(src.length), v);
	}

	async chmod(path: string, mode: number): Promise<void> {
		const n = this.#get(path);
		n.mode = mode & 0o7777;
	}

	/** Bytes of file data held now. */
	get bytes(): number {
		return this.#bytes;
	}
}
