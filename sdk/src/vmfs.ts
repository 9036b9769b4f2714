// vm.fs: the running guest's file system through the control API
// (Documentation/api.md, "fs.*"). Reads and listings always stream, so a
// file or directory of any size comes in chunks (64 KiB each) instead of
// one capped answer; writes over a small request's worth stream as raw
// bodies (fs.write {stream, size}, the bytes after the line: no base64,
// no JSON string for the vmm to parse) with a few in flight.

import { SandboxConfigError, SandboxError, isRecord } from "./errors.js";
import type { RpcConnection } from "./rpc/client.js";
import { MAX_BODY_BYTES } from "./rpc/codec.js";
import { absolutePath, integer, optionalBoolean, record, shown } from "./validate.js";

export type SandboxFileType = "file" | "directory" | "symlink" | "other";

export interface SandboxFileStat {
	type: SandboxFileType;
	/** st_mode: type and permission bits. */
	mode: number;
	size: number;
	mtimeNs: bigint;
	uid: number;
	gid: number;
	linkTarget?: string;
}

export interface SandboxDirEntry extends SandboxFileStat {
	/** The name as a string (U+FFFD for bytes that are not UTF-8). */
	name: string;
	/** The name's exact bytes. */
	nameBytes: Uint8Array;
}

export interface SandboxVmFileSystem {
	stat(path: string): Promise<SandboxFileStat>;
	readDir(path: string): Promise<SandboxDirEntry[]>;
	readFile(path: string, options?: { range?: { offset: number; length: number } }): Promise<Uint8Array>;
	writeFile(path: string, contents: string | Uint8Array, options?: { createParents?: boolean; mode?: number }): Promise<void>;
	mkdir(path: string, options?: { recursive?: boolean; mode?: number }): Promise<void>;
	remove(path: string, options?: { recursive?: boolean; force?: boolean }): Promise<void>;
	rename(from: string, to: string): Promise<void>;
}

/** Contents up to this size go in the fs.writeFile request itself (base64:
 * one round trip instead of three; past it the vmm's JSON parse of the
 * string costs more than the round trips). */
export const INLINE_WRITE_BYTES = 64 * 1024;
/** Body of one fs.write of a streamed upload (the most the vmm takes), and
 * how many are in flight at once (Documentation/benchmarks.md, "The API's
 * file write in raw bodies"). */
export const WRITE_CHUNK = MAX_BODY_BYTES;
export const WRITES_IN_FLIGHT = 4;

function toStat(method: string, v: unknown): SandboxFileStat {
	if (!isRecord(v) || typeof v["type"] !== "string" || typeof v["mode"] !== "number")
		throw new SandboxConfigError(`${method}: a malformed answer ${shown(v)}`);
	const st: SandboxFileStat = {
		type: (["file", "directory", "symlink"].includes(v["type"]) ? v["type"] : "other") as SandboxFileType,
		mode: v["mode"],
		size: typeof v["size"] === "number" ? v["size"] : 0,
		mtimeNs: typeof v["mtimeNs"] === "bigint" ? v["mtimeNs"] : BigInt(typeof v["mtimeNs"] === "number" ? v["mtimeNs"] : 0),
		uid: typeof v["uid"] === "number" ? v["uid"] : 0,
		gid: typeof v["gid"] === "number" ? v["gid"] : 0,
	};
	if (typeof v["linkTarget"] === "string")
		st.linkTarget = v["linkTarget"];
	return st;
}

/** Collects a streamed request's notifications `method` (matched by the
 * request id) until its answer. */
async function collect(conn: RpcConnection, method: string, params: Record<string, unknown>,
	notification: string, each: (p: Record<string, unknown>, body?: Uint8Array) => void): Promise<unknown> {
	let id = -1;
	const early: { p: Record<string, unknown>; body: Uint8Array | undefined }[] = [];
	const off = conn.on(notification, (p, body) => {
		if (id < 0)
			early.push({ p, body });
		else if (p["id"] === id)
			each(p, body);
	});
	try {
		const req = conn.request(method, params);
		id = req.id;
		for (const e of early)
			if (e.p["id"] === id)
				each(e.p, e.body);
		return await req.result;
	} finally {
		off();
	}
}

export function vmFileSystem(conn: () => RpcConnection): SandboxVmFileSystem {
	return {
		async stat(p) {
			const path = absolutePath("vm.fs.stat: path", p);
			return toStat("fs.stat", await conn().call("fs.stat", { path }));
		},

		async readDir(p) {
			const path = absolutePath("vm.fs.readDir: path", p);
			const entries: SandboxDirEntry[] = [];
			await collect(conn(), "fs.readDir", { path, stream: true }, "fs.entries", (n) => {
				const list = n["entries"];
				if (!Array.isArray(list))
					return;
				for (const e of list) {
					if (!isRecord(e) || typeof e["name"] !== "string")
						continue;
					const nameBytes = typeof e["nameBytes"] === "string"
						? new Uint8Array(Buffer.from(e["nameBytes"], "base64"))
						: new TextEncoder().encode(e["name"]);
					entries.push({ ...toStat("fs.readDir", e), name: e["name"], nameBytes });
				}
			});
			return entries;
		},

		async readFile(p, options = {}) {
			const what = "vm.fs.readFile";
			const path = absolutePath(`${what}: path`, p);
			const o = record(`${what}: options`, options, ["range"]);
			// raw: each chunk's bytes follow its line, not base64 in it.
			const params: Record<string, unknown> = { path, stream: true, raw: true };
			if (o["range"] !== undefined) {
				const r = record(`${what}: range`, o["range"], ["offset", "length"]);
				if (r["offset"] === undefined || r["length"] === undefined)
					throw new SandboxConfigError(`${what}: range needs both offset and length, got ${shown(o["range"])}`);
				params["offset"] = integer(`${what}: range.offset`, r["offset"], 0, Number.MAX_SAFE_INTEGER);
				params["length"] = integer(`${what}: range.length`, r["length"], 0, Number.MAX_SAFE_INTEGER);
			}
			const chunks: Buffer[] = [];
			let total = 0;
			let unframed = false;
			await collect(conn(), "fs.readFile", params, "fs.chunk", (_n, body) => {
				if (body === undefined) {
					unframed = true;
					return;
				}
				chunks.push(Buffer.from(body.buffer, body.byteOffset, body.byteLength));
				total += body.byteLength;
			});
			if (unframed)
				throw new SandboxError(`${what}: ${path}: fs.chunk came without raw bytes (a vmm that ignores fs.readFile's raw)`);
			const out = new Uint8Array(total);
			let at = 0;
			for (const c of chunks) {
				out.set(c, at);
				at += c.length;
			}
			return out;
		},

		async writeFile(p, contents, options = {}) {
			const what = "vm.fs.writeFile";
			const path = absolutePath(`${what}: path`, p);
			const o = record(`${what}: options`, options, ["createParents", "mode"]);
			const data = typeof contents === "string" ? Buffer.from(contents, "utf8")
				: contents instanceof Uint8Array ? Buffer.from(contents.buffer, contents.byteOffset, contents.byteLength)
				: (() => {
					throw new SandboxConfigError(`${what}: contents must be a string or Uint8Array, got ${shown(contents)}`);
				})();
			const params: Record<string, unknown> = { path, createParents: optionalBoolean(`${what}: createParents`, o["createParents"]) };
			if (o["mode"] !== undefined)
				params["mode"] = integer(`${what}: mode`, o["mode"], 0, 0o7777);
			const c = conn();
			if (data.length <= INLINE_WRITE_BYTES) {
				await c.call("fs.writeFile", { ...params, data: data.toString("base64") });
				return;
			}
			const opened = await c.call("fs.writeFile", { ...params, stream: true });
			if (!isRecord(opened) || typeof opened["stream"] !== "number")
				throw new SandboxConfigError(`fs.writeFile: an answer without a stream id: ${shown(opened)}`);
			const stream = opened["stream"];
			const inFlight = new Set<Promise<unknown>>();
			try {
				for (let off = 0; off < data.length; off += WRITE_CHUNK) {
					const w = c.callWithBody("fs.write", { stream }, data.subarray(off, off + WRITE_CHUNK));
					inFlight.add(w);
					void w.finally(() => inFlight.delete(w)).catch(() => undefined);
					if (inFlight.size >= WRITES_IN_FLIGHT)
						await Promise.race(inFlight);
				}
				await Promise.all(inFlight);
			} catch (e) {
				await c.call("cancel", { stream }).catch(() => undefined);
				throw e;
			}
			await c.call("fs.close", { stream });
		},

		async mkdir(p, options = {}) {
			const what = "vm.fs.mkdir";
			const path = absolutePath(`${what}: path`, p);
			const o = record(`${what}: options`, options, ["recursive", "mode"]);
			const params: Record<string, unknown> = { path, recursive: optionalBoolean(`${what}: recursive`, o["recursive"]) };
			if (o["mode"] !== undefined)
				params["mode"] = integer(`${what}: mode`, o["mode"], 0, 0o7777);
			await conn().call("fs.mkdir", params);
		},

		async remove(p, options = {}) {
			const what = "vm.fs.remove";
			const path = absolutePath(`${what}: path`, p);
			const o = record(`${what}: options`, options, ["recursive", "force"]);
			await conn().call("fs.remove", {
				path,
				recursive: optionalBoolean(`${what}: recursive`, o["recursive"]),
				force: optionalBoolean(`${what}: force`, o["force"]),
			});
		},

		async rename(from, to) {
			await conn().call("fs.rename", {
				from: absolutePath("vm.fs.rename: from", from),
				to: absolutePath("vm.fs.rename: to", to),
			});
		},
	};
}
