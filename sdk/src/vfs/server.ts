// A virtual mount served from this process: the FUSE side of Kiln's
// virtual-fs relay over a SOCK_STREAM Unix socket (Documentation/
// virtual-fs.md), answering the guest's requests from a
// SandboxFileSystem.
//
// FuseSession holds what outlives one connection (the vmm reconnects
// after a lost connection and replays FUSE_INIT with unique 0; the guest
// keeps its node ids): node id <-> path, with the guest's lookup counts,
// bounded by MAX_NODES. VirtualFsServer is the socket: every connection
// is framed by FuseFramer, at most MAX_INFLIGHT requests are being
// answered at once (reading pauses past it), and a peer that leaves
// MAX_UNREAD bytes of replies unread pauses reading too: nothing grows
// without bound.

import net from "node:net";
import { rmSync } from "node:fs";
import {
	Errno, FuseError, FuseFramer, IN_HEADER, MAX_WRITE, NO_REPLY, Op, cstring, decodeHeader, encodeReply, errnoOf, need,
} from "./fuse.js";
import type { FuseRequest } from "./fuse.js";
import type { SandboxFileSystem, SandboxFileSystemStat } from "./types.js";

/** Node ids the guest may hold at once (each costs a map entry). */
export const MAX_NODES = 65536;
/** Requests answered at once per connection (the vmm sends at most 256). */
export const MAX_INFLIGHT = 256;
/** Reply bytes the peer may leave unread before reading pauses. */
export const MAX_UNREAD = 4 * 1024 * 1024;

const ROOT = 1n;
const FUSE_KERNEL_VERSION = 7;
/** The newest minor whose structures this server writes. */
const FUSE_MINOR = 31;
const FUSE_ASYNC_READ = 1 << 0;
const FUSE_BIG_WRITES = 1 << 5;
const FATTR_MODE = 1 << 0;
const FATTR_SIZE = 1 << 3;
const RENAME_NOREPLACE = 1 << 0;
const O_ACCMODE = 3;
const O_TRUNC = 0o1000;
const O_EXCL = 0o200;
const S_IFDIR = 0o040000;
const S_IFREG = 0o100000;
const S_IFLNK = 0o120000;
const BLOCK = 4096;
/** fuse_attr, fuse_entry_out, fuse_attr_out, fuse_open_out sizes. */
const ATTR = 88;
const ENTRY_OUT = 40 + ATTR;
const ATTR_OUT = 16 + ATTR;
const OPEN_OUT = 16;
/** fuse_dirent's fixed part. */
const DIRENT = 24;

interface NodeEntry {
	path: string;
	lookups: bigint;
	/** Removed or replaced: no path names it any more. */
	orphan?: boolean;
}

/** One mount's FUSE state and its answers, apart from any socket. */
export class FuseSession {
	readonly #fs: SandboxFileSystem;
	readonly #byId = new Map<bigint, NodeEntry>([[ROOT, { path: "/", lookups: 1n }]]);
	readonly #byPath = new Map<string, bigint>([["/", ROOT]]);
	#next = 2n;

	constructor(fs: SandboxFileSystem) {
		this.#fs = fs;
	}

	/** Node ids held now (the root included). */
	get nodes(): number {
		return this.#byId.size;
	}

	/**
	 * The reply to one message (a whole FUSE request), or undefined when
	 * it gets none (forgets, interrupts). Throws FuseError only when the
	 * header itself is unusable (the message cannot be answered).
	 */
	async handle(msg: Buffer): Promise<Buffer | undefined> {
		const req = decodeHeader(msg);
		if (NO_REPLY.has(req.opcode)) {
			this.#forget(req);
			return undefined;
		}
		try {
			return encodeReply(req.unique, 0, await this.#dispatch(req));
		} catch (e) {
			return encodeReply(req.unique, -errnoFrom(e));
		}
	}

	#path(node: bigint): string {
		const n = this.#byId.get(node);
		if (!n)
			throw new FuseError(Errno.ESTALE, `node ${node} unknown`);
		return n.path;
	}

	#child(node: bigint, name: string): string {
		const p = this.#path(node);
		return p === "/" ? `/${name}` : `${p}/${name}`;
	}

	/** The node of path, its lookup count up by one. */
	#lookup(path: string): bigint {
		let id = this.#byPath.get(path);
		if (id === undefined) {
			if (this.#byId.size >= MAX_NODES)
				throw new FuseError(Errno.ENFILE, `more than ${MAX_NODES} nodes`);
			id = this.#next++;
			this.#byPath.set(path, id);
			this.#byId.set(id, { path, lookups: 0n });
		}
		const e = this.#byId.get(id);
		if (e)
			e.lookups++;
		return id;
	}

	#drop(id: bigint, n: bigint): void {
		const e = this.#byId.get(id);
		if (!e || id === ROOT)
			return;
		e.lookups -= n;
		if (e.lookups <= 0n) {
			this.#byId.delete(id);
			if (this.#byPath.get(e.path) === id)
				this.#byPath.delete(e.path);
		}
	}

	#forget(req: FuseRequest): void {
		const b = req.body;
		if (req.opcode === Op.FORGET && b.length >= 8) {
			this.#drop(req.nodeid, b.readBigUInt64LE(0));
		} else if (req.opcode === Op.BATCH_FORGET && b.length >= 8) {
			const count = b.readUInt32LE(0);
			// Only the entries the message holds, whatever count says.
			for (let i = 0; i < count && 8 + 16 * (i + 1) <= b.length; i++)
				this.#drop(b.readBigUInt64LE(8 + 16 * i), b.readBigUInt64LE(16 + 16 * i));
		}
	}

	/** A removed path no longer names its node (which lives on, unnamed,
	 * until the guest forgets it). */
	#unlinked(path: string): void {
		const id = this.#byPath.get(path);
		const e = id === undefined ? undefined : this.#byId.get(id);
		if (e)
			e.orphan = true;
		this.#byPath.delete(path);
	}

	/** Moves every node at or under from to under to (after a rename). */
	#moved(from: string, to: string): void {
		for (const [id, e] of this.#byId) {
			if (e.orphan || (e.path !== from && !e.path.startsWith(from + "/")))
				continue;
			if (this.#byPath.get(e.path) === id)
				this.#byPath.delete(e.path);
			e.path = to + e.path.slice(from.length);
			this.#byPath.set(e.path, id);
		}
	}

	#attr(id: bigint, st: SandboxFileSystemStat): Buffer {
		const a = Buffer.alloc(ATTR);
		const sec = st.mtimeNs / 1_000_000_000n;
		const nsec = Number(st.mtimeNs % 1_000_000_000n);
		const type = st.type === "directory" ? S_IFDIR : st.type === "symlink" ? S_IFLNK : S_IFREG;
		const size = BigInt(Math.max(0, Math.floor(st.size)));
		a.writeBigUInt64LE(id, 0);
		a.writeBigUInt64LE(size, 8);
		a.writeBigUInt64LE((size + 511n) / 512n, 16);
		for (const off of [24, 32, 40])
			a.writeBigUInt64LE(sec < 0n ? 0n : sec, off);
		for (const off of [48, 52, 56])
			a.writeUInt32LE(nsec < 0 ? 0 : nsec, off);
		a.writeUInt32LE(type | (st.mode & 0o7777), 60);
		a.writeUInt32LE(st.type === "directory" ? 2 : 1, 64); // nlink
		// uid, gid, rdev 0; blksize; flags 0.
		a.writeUInt32LE(BLOCK, 80);
		return a;
	}

	async #entry(path: string): Promise<Buffer> {
		const st = await this.#fs.stat(path);
		const id = this.#lookup(path);
		const out = Buffer.alloc(ENTRY_OUT);
		out.writeBigUInt64LE(id, 0);
		// generation 0; entry and attribute validity 0: the host may
		// change the files under the guest, so it asks every time.
		this.#attr(id, st).copy(out, 40);
		return out;
	}

	async #attrOut(id: bigint): Promise<Buffer> {
		const st = await this.#fs.stat(this.#path(id));
		const out = Buffer.alloc(ATTR_OUT);
		this.#attr(id, st).copy(out, 16);
		return out;
	}

	async #dispatch(req: FuseRequest): Promise<Buffer | undefined> {
		const b = req.body;
		const fs = this.#fs;
		switch (req.opcode) {
		case Op.INIT: {
			need(b, 16, "FUSE_INIT");
			const major = b.readUInt32LE(0);
			const minor = b.readUInt32LE(4);
			const flags = b.readUInt32LE(12);
			const out = Buffer.alloc(64);
			out.writeUInt32LE(FUSE_KERNEL_VERSION, 0);
			if (major < FUSE_KERNEL_VERSION)
				throw new FuseError(Errno.EPROTO, `FUSE major ${major}`);
			// A newer major: answer ours alone, the kernel retries (fuse(4)).
			if (major > FUSE_KERNEL_VERSION)
				return out.subarray(0, 8);
			out.writeUInt32LE(Math.min(minor, FUSE_MINOR), 4);
			out.writeUInt32LE(b.readUInt32LE(8), 8); // max_readahead
			out.writeUInt32LE(flags & (FUSE_ASYNC_READ | FUSE_BIG_WRITES), 12);
			out.writeUInt16LE(16, 16); // max_background
			out.writeUInt16LE(12, 18); // congestion_threshold
			out.writeUInt32LE(MAX_WRITE, 20);
			out.writeUInt32LE(1, 24); // time_gran: 1 ns
			return out;
		}
		case Op.DESTROY:
			return undefined;
		case Op.LOOKUP:
			return this.#entry(this.#child(req.nodeid, cstring(b, 0)[0]));
		case Op.GETATTR:
			return this.#attrOut(req.nodeid);
		case Op.SETATTR: {
			need(b, 88, "FUSE_SETATTR");
			const valid = b.readUInt32LE(0);
			const path = this.#path(req.nodeid);
			if (valid & FATTR_SIZE) {
				const size = b.readBigUInt64LE(16);
				if (size > BigInt(Number.MAX_SAFE_INTEGER))
					throw new FuseError(Errno.EFBIG, "size past 2^53");
				await fs.truncate(path, Number(size));
			}
			if (valid & FATTR_MODE) {
				if (!fs.chmod)
					throw new FuseError(Errno.EPERM, "chmod not supported");
				await fs.chmod(path, b.readUInt32LE(68) & 0o7777);
			}
			// Owners and times are the file system's own: ignored.
			return this.#attrOut(req.nodeid);
		}
		case Op.READLINK: {
			const path = this.#path(req.nodeid);
			if (!fs.readlink)
				throw new FuseError(Errno.EINVAL, "no symlinks");
			return Buffer.from(await fs.readlink(path));
		}
		case Op.OPEN:
		case Op.OPENDIR: {
			need(b, 8, "FUSE_OPEN");
			const st = await fs.stat(this.#path(req.nodeid));
			const dir = req.opcode === Op.OPENDIR;
			if (dir && st.type !== "directory")
				throw new FuseError(Errno.ENOTDIR, "not a directory");
			if (!dir && st.type === "directory")
				throw new FuseError(Errno.EISDIR, "a directory");
			const flags = b.readUInt32LE(0);
			if (!dir && (flags & O_TRUNC) && (flags & O_ACCMODE) !== 0)
				await fs.truncate(this.#path(req.nodeid), 0);
			return Buffer.alloc(OPEN_OUT); // fh 0: paths, not handles
		}
		case Op.READ: {
			need(b, 40, "FUSE_READ");
			const offset = b.readBigUInt64LE(8);
			const size = Math.min(b.readUInt32LE(16), MAX_WRITE);
			if (offset > BigInt(Number.MAX_SAFE_INTEGER))
				return Buffer.alloc(0);
			const data = await fs.readFile(this.#path(req.nodeid), { offset: Number(offset), length: size });
			return Buffer.from(data.buffer, data.byteOffset, Math.min(data.byteLength, size));
		}
		case Op.WRITE: {
			need(b, 40, "FUSE_WRITE");
			const offset = b.readBigUInt64LE(8);
			const size = b.readUInt32LE(16);
			if (size > b.length - 40 || size > MAX_WRITE)
				throw new FuseError(Errno.EINVAL, `a write of ${size} bytes with ${b.length - 40} sent`);
			if (offset + BigInt(size) > BigInt(Number.MAX_SAFE_INTEGER))
				throw new FuseError(Errno.EFBIG, "past 2^53");
			await fs.writeFile(this.#path(req.nodeid), new Uint8Array(b.subarray(40, 40 + size)),
				{ offset: Number(offset), truncate: false, create: "never" });
			const out = Buffer.alloc(8);
			out.writeUInt32LE(size, 0);
			return out;
		}
		case Op.CREATE: {
			need(b, 16, "FUSE_CREATE");
			const flags = b.readUInt32LE(0);
			const mode = b.readUInt32LE(4) & ~b.readUInt32LE(8) & 0o7777;
			const path = this.#child(req.nodeid, cstring(b, 16)[0]);
			await fs.writeFile(path, new Uint8Array(0), {
				offset: 0, truncate: (flags & O_TRUNC) !== 0, create: flags & O_EXCL ? "exclusive" : "always", mode,
			});
			return Buffer.concat([await this.#entry(path), Buffer.alloc(OPEN_OUT)]);
		}
		case Op.MKDIR: {
			need(b, 8, "FUSE_MKDIR");
			const mode = b.readUInt32LE(0) & ~b.readUInt32LE(4) & 0o7777;
			const path = this.#child(req.nodeid, cstring(b, 8)[0]);
			await fs.mkdir(path, { mode });
			return this.#entry(path);
		}
		case Op.UNLINK:
		case Op.RMDIR: {
			const path = this.#child(req.nodeid, cstring(b, 0)[0]);
			const st = await fs.stat(path);
			if (req.opcode === Op.UNLINK && st.type === "directory")
				throw new FuseError(Errno.EISDIR, "unlink of a directory");
			if (req.opcode === Op.RMDIR && st.type !== "directory")
				throw new FuseError(Errno.ENOTDIR, "rmdir of a file");
			await fs.remove(path);
			// The guest may still hold the node (an open file); a new
			// file of the same name must get a node of its own.
			this.#unlinked(path);
			return undefined;
		}
		case Op.RENAME:
		case Op.RENAME2: {
			const head = req.opcode === Op.RENAME ? 8 : 16;
			need(b, head, "FUSE_RENAME");
			const newdir = b.readBigUInt64LE(0);
			const flags = req.opcode === Op.RENAME2 ? b.readUInt32LE(8) : 0;
			const [from, at] = cstring(b, head);
			const [to] = cstring(b, at);
			if (flags & ~RENAME_NOREPLACE)
				throw new FuseError(Errno.EINVAL, `rename flags ${flags}`);
			const src = this.#child(req.nodeid, from);
			const dst = this.#child(newdir, to);
			if (flags & RENAME_NOREPLACE) {
				const there = await fs.stat(dst).then(() => true, () => false);
				if (there)
					throw new FuseError(Errno.EEXIST, "exists");
			}
			await fs.rename(src, dst);
			if (src !== dst) {
				this.#unlinked(dst); // what it replaced
				this.#moved(src, dst);
			}
			return undefined;
		}
		case Op.READDIR: {
			need(b, 40, "FUSE_READDIR");
			const offset = b.readBigUInt64LE(8);
			const size = b.readUInt32LE(16);
			const path = this.#path(req.nodeid);
			const names = [".", "..", ...await fs.readDir(path)];
			const parts: Buffer[] = [];
			let used = 0;
			for (let i = Number(offset > BigInt(names.length) ? BigInt(names.length) : offset); i < names.length; i++) {
				const name = Buffer.from(names[i] ?? "");
				const len = DIRENT + name.length;
				const padded = (len + 7) & ~7;
				if (used + padded > size)
					break;
				const d = Buffer.alloc(padded);
				const child = i === 0 ? path : i === 1 ? "/" : (path === "/" ? "/" : path + "/") + names[i];
				d.writeBigUInt64LE(this.#byPath.get(child) ?? inoOf(child), 0);
				d.writeBigUInt64LE(BigInt(i + 1), 8);
				d.writeUInt32LE(name.length, 16);
				d.writeUInt32LE(0, 20); // DT_UNKNOWN: the guest asks
				name.copy(d, DIRENT);
				parts.push(d);
				used += padded;
			}
			return Buffer.concat(parts);
		}
		case Op.STATFS: {
			const out = Buffer.alloc(80);
			out.writeBigUInt64LE(1n << 20n, 0); // blocks
			out.writeBigUInt64LE(1n << 19n, 8); // bfree
			out.writeBigUInt64LE(1n << 19n, 16); // bavail
			out.writeBigUInt64LE(BigInt(MAX_NODES), 24);
			out.writeBigUInt64LE(BigInt(MAX_NODES - this.#byId.size), 32);
			out.writeUInt32LE(BLOCK, 40); // bsize
			out.writeUInt32LE(255, 44); // namelen
			out.writeUInt32LE(BLOCK, 48); // frsize
			return out;
		}
		case Op.RELEASE:
		case Op.RELEASEDIR:
		case Op.FLUSH:
		case Op.FSYNC:
		case Op.FSYNCDIR:
			this.#path(req.nodeid);
			return undefined;
		default:
			// ACCESS, xattrs, links, locks...: the kernel takes ENOSYS
			// as "not implemented" and stops asking for most.
			throw new FuseError(Errno.ENOSYS, `opcode ${req.opcode}`);
		}
	}
}

/** A stable inode number for a readdir entry the guest holds no node
 * of (FNV-1a of its path, kept clear of the node ids). */
function inoOf(path: string): bigint {
	let h = 0xcbf29ce484222325n;
	for (const c of Buffer.from(path)) {
		h ^= BigInt(c);
		h = (h * 0x100000001b3n) & 0xffffffffffffffffn;
	}
	return h | (1n << 63n);
}

function errnoFrom(e: unknown): number {
	if (e instanceof FuseError)
		return e.errno;
	const n = errnoOf((e as { code?: unknown } | null)?.code);
	return n ?? Errno.EIO;
}

export interface VirtualFsStats {
	connections: number;
	requests: number;
	dropped: number;
}

/** One mount's socket: the vmm connects (again after a lost connection). */
export class VirtualFsServer {
	readonly session: FuseSession;
	readonly stats: VirtualFsStats = { connections: 0, requests: 0, dropped: 0 };
	readonly #server: net.Server;
	readonly #conns = new Set<net.Socket>();
	readonly #log: (line: string) => void;
	#path: string | undefined;

	constructor(fs: SandboxFileSystem, log: (line: string) => void = () => undefined) {
		this.session = new FuseSession(fs);
		this.#log = log;
		this.#server = net.createServer((s) => this.#serve(s));
	}

	listen(path: string): Promise<void> {
		rmSync(path, { force: true });
		this.#path = path;
		return new Promise((resolve, reject) => {
			this.#server.once("error", reject);
			this.#server.listen(path, () => {
				this.#server.off("error", reject);
				resolve();
			});
		});
	}

	close(): Promise<void> {
		for (const s of this.#conns)
			s.destroy();
		return new Promise((resolve) => this.#server.close(() => {
			if (this.#path)
				rmSync(this.#path, { force: true });
			resolve();
		}));
	}

	#serve(s: net.Socket): void {
		this.stats.connections++;
		this.#conns.add(s);
		const framer = new FuseFramer();
		let inflight = 0;
		let paused = false;
		const pauseOrResume = (): void => {
			const busy = inflight >= MAX_INFLIGHT || s.writableLength > MAX_UNREAD;
			if (busy && !paused) {
				paused = true;
				s.pause();
			} else if (!busy && paused) {
				paused = false;
				s.resume();
			}
		};
		s.on("error", () => undefined);
		s.on("close", () => this.#conns.delete(s));
		s.on("drain", pauseOrResume);
		s.on("data", (chunk: Buffer) => {
			let msgs: Buffer[];
			try {
				msgs = framer.push(chunk);
			} catch (e) {
				this.stats.dropped++;
				this.#log(`fs.virtual: ${(e as Error).message}: connection dropped`);
				s.destroy();
				return;
			}
			for (const m of msgs) {
				this.stats.requests++;
				inflight++;
				void this.session.handle(m).then((reply) => {
					if (reply && !s.destroyed)
						s.write(reply);
				}, () => {
					// Only a header that cannot be answered throws; the
					// framer already checked len, so this cannot happen.
				}).finally(() => {
					inflight--;
					pauseOrResume();
				});
			}
			pauseOrResume();
		});
	}
}

export { IN_HEADER };
