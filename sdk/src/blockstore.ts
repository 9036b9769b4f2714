// A SandboxBlockStore served to the vmm (Documentation/rootfs.md, "Block
// stores"): the store side of the protocol on a Unix stream socket, one
// call of the caller's store per message (a read: one per range). What a
// store method throws or rejects with becomes that request's ERROR answer
// with its message; the host program never sees it.

import { randomBytes } from "node:crypto";
import { mkdtemp, rm } from "node:fs/promises";
import { rmSync } from "node:fs";
import net from "node:net";
import os from "node:os";
import path from "node:path";
import {
	Errno, Msg, STORE_BLOCK_SIZE, STORE_LIST_END, STORE_TOKEN_MAX, STORE_VERSION, StoreFramer, StoreRefusal,
	decodeRequest, errnoOf, errorFrame, frame, helloAnswer, listAnswer, readAnswer, stateAnswer,
} from "./blockstore-proto.js";
import type { StoreRequest } from "./blockstore-proto.js";
import { SandboxConfigError } from "./errors.js";
import type { SandboxBlockChunk, SandboxBlockStore, SandboxBlockStoreContext } from "./rootfs.js";
import { shown } from "./validate.js";

/** Connections one server takes at once (the vmm opens one per VM, a
 * flatten one more): more are closed at once. */
const MAX_CONNECTIONS = 16;
/** Unread answer bytes past which a connection stops reading requests. */
const MAX_UNREAD = 4 << 20;

/**
 * The single writer's claim, per store object: a store attached to one
 * running VM (or being written by a flatten) refuses a second claim with
 * EBUSY, across every server of this process. Keyed weakly: a store the
 * program drops takes its entry with it.
 */
const claims = new WeakMap<SandboxBlockStore, object>();

/** Takes the claim for `owner`; false when another holds it. */
export function claimStore(store: SandboxBlockStore, owner: object): boolean {
	const held = claims.get(store);
	if (held !== undefined && held !== owner)
		return false;
	claims.set(store, owner);
	return true;
}

export function releaseStore(store: SandboxBlockStore, owner: object): void {
	if (claims.get(store) === owner)
		claims.delete(store);
}

export function isClaimed(store: SandboxBlockStore): boolean {
	return claims.has(store);
}

/**
 * The state token of a store without its own `state` method: a random
 * identity per store object and a generation that a flush after a write
 * moves on, for every server of this process (rootfs.md, "State
 * tokens"). Keyed weakly, as the claims are.
 */
interface OwnState { readonly id: Buffer; generation: bigint; written: boolean }
const ownStates = new WeakMap<SandboxBlockStore, OwnState>();

function ownState(store: SandboxBlockStore): OwnState {
	let st = ownStates.get(store);
	if (st === undefined) {
		st = { id: randomBytes(16), generation: 0n, written: false };
		ownStates.set(store, st);
	}
	return st;
}

/** The store's state token now: its own `state`, or the server's. */
export async function storeToken(store: SandboxBlockStore, ctx: SandboxBlockStoreContext): Promise<Uint8Array> {
	if (store.state === undefined) {
		const st = ownState(store);
		const g = Buffer.alloc(8);
		g.writeBigUInt64LE(st.generation, 0);
		return Buffer.concat([st.id, g]);
	}
	const t: unknown = await store.state(ctx);
	if (!(t instanceof Uint8Array) || t.length === 0 || t.length > STORE_TOKEN_MAX)
		throw new StoreRefusal(Errno.EIO, `store.state returned ${shown(t)}, not a Uint8Array of 1 to ${STORE_TOKEN_MAX} bytes`);
	return t;
}

/** Is `v` a SandboxBlockStore this vmm can serve? (Throws naming it.) */
export function checkBlockStore(what: string, v: unknown): SandboxBlockStore {
	const o = v as Partial<Record<keyof SandboxBlockStore, unknown>> | null;
	if (typeof o !== "object" || o === null)
		throw new SandboxConfigError(`${what}: must be a SandboxBlockStore (blockSize, list, read, write, flush?), got ${shown(v)}`);
	const missing = (["list", "read", "write"] as const).filter((k) => typeof o[k] !== "function");
	if (missing.length > 0)
		throw new SandboxConfigError(`${what}: not a SandboxBlockStore: ${missing.join(", ")} must be methods`);
	if (o.flush !== undefined && typeof o.flush !== "function")
		throw new SandboxConfigError(`${what}: flush must be a method when given, got ${shown(o.flush)}`);
	if (o.state !== undefined && typeof o.state !== "function")
		throw new SandboxConfigError(`${what}: state must be a method when given, got ${shown(o.state)}`);
	if (o.blockSize !== STORE_BLOCK_SIZE)
		throw new SandboxConfigError(`${what}: blockSize ${shown(o.blockSize)}: Kiln's block stores keep ${STORE_BLOCK_SIZE}-byte blocks`);
	return v as SandboxBlockStore;
}

/** What one store serves: the image its blocks belong to. */
export interface StoreBase {
	readonly name: string;
	readonly digest: string;
	readonly sizeBytes: bigint;
}

/** Checks what store.list returned: block numbers of the base, sorted,
 * each once. */
export function checkList(v: unknown, blocks: bigint): bigint[] {
	if (!Array.isArray(v))
		throw new StoreRefusal(Errno.EIO, `store.list returned ${shown(v)}, not an array of bigint block numbers`);
	const seen = new Set<bigint>();
	for (const b of v as unknown[]) {
		if (typeof b !== "bigint" || b < 0n || b >= blocks)
			throw new StoreRefusal(Errno.EIO, `store.list returned block ${shown(b)}: block numbers are bigints from 0 to ${blocks - 1n}`);
		seen.add(b);
	}
	return [...seen].sort((a, b) => (a < b ? -1 : a > b ? 1 : 0));
}

/** Checks what store.read returned for blocks first..first+count-1:
 * their bytes in order; a block it did not return is ENOENT. */
export function checkRead(v: unknown, first: bigint, count: number): Uint8Array[] {
	if (!Array.isArray(v))
		throw new StoreRefusal(Errno.EIO, `store.read returned ${shown(v)}, not an array of {index, bytes} chunks`);
	const got = new Map<bigint, Uint8Array>();
	const end = first + BigInt(count);
	for (const c of v as unknown[]) {
		const ch = c as Partial<SandboxBlockChunk> | null;
		if (typeof ch !== "object" || ch === null || typeof ch.index !== "bigint" || !(ch.bytes instanceof Uint8Array))
			throw new StoreRefusal(Errno.EIO, `store.read returned ${shown(c)}, not a {index: bigint, bytes: Uint8Array} chunk`);
		if (ch.index < first || ch.index >= end)
			throw new StoreRefusal(Errno.EIO, `store.read of blocks ${first}+${count} returned block ${ch.index}`);
		if (ch.bytes.length !== STORE_BLOCK_SIZE)
			throw new StoreRefusal(Errno.EIO, `store.read returned block ${ch.index} of ${ch.bytes.length} bytes (${STORE_BLOCK_SIZE})`);
		got.set(ch.index, ch.bytes);
	}
	const out: Uint8Array[] = [];
	for (let b = first; b < end; b++) {
		const bytes = got.get(b);
		if (bytes === undefined)
			throw new StoreRefusal(Errno.ENOENT, `block ${b} is not stored`);
		out.push(bytes);
	}
	return out;
}

/** One connection: hello first, then one request answered at a time. */
class StoreConnection {
	readonly #s: net.Socket;
	readonly #store: SandboxBlockStore;
	readonly #base: StoreBase;
	readonly #framer = new StoreFramer();
	#ctx: SandboxBlockStoreContext | undefined;
	#blocks = 0n;
	#busy = false;
	#ended = false;
	#done = false;

	constructor(s: net.Socket, store: SandboxBlockStore, base: StoreBase) {
		this.#s = s;
		this.#store = store;
		this.#base = base;
		s.on("error", () => undefined);
		s.on("data", (c: Buffer) => {
			this.#framer.push(c);
			void this.#pump();
		});
		// The vmm half-closes a claimed connection and waits for ours:
		// the claim goes first (rootfs.md, "Rules a store keeps").
		s.on("end", () => {
			this.#ended = true;
			void this.#pump();
		});
		s.on("close", () => {
			this.#ended = true;
			if (!this.#busy)
				this.#finish();
		});
	}

	/** Answers the whole frames buffered, one at a time. */
	async #pump(): Promise<void> {
		if (this.#busy || this.#done)
			return;
		this.#busy = true;
		this.#s.pause();
		try {
			for (;;) {
				let f: { type: number; payload: Buffer } | undefined;
				try {
					f = this.#framer.next();
				} catch (e) {
					// The stream cannot be followed: say why, then go.
					this.#write(errorFrame(errnoOf(e), (e as Error).message));
					this.#ended = true;
					break;
				}
				if (f === undefined || this.#s.destroyed)
					break;
				this.#write(await this.#answer(f.type, f.payload));
				if (this.#s.writableLength > MAX_UNREAD)
					await new Promise((r) => this.#s.once("drain", r).once("close", r));
			}
		} finally {
			this.#busy = false;
		}
		if (this.#ended)
			this.#finish();
		else
			this.#s.resume();
	}

	#write(b: Buffer): void {
		if (!this.#s.destroyed)
			this.#s.write(b);
	}

	/** The claim is let go, then our end closed. */
	#finish(): void {
		if (this.#done)
			return;
		this.#done = true;
		releaseStore(this.#store, this);
		if (!this.#s.destroyed)
			this.#s.end();
	}

	/** Aborts the connection (the server closes: its VM has exited). The
	 * claim goes now even with a store call still pending: a store that
	 * never settles must not keep the next VM off it for good. */
	destroy(): void {
		this.#ended = true;
		this.#finish();
		this.#s.destroy();
	}

	async #answer(type: number, payload: Buffer): Promise<Buffer> {
		let what = `request 0x${type.toString(16)}`;
		try {
			const r = decodeRequest(type, payload);
			what = r.type;
			return await this.#call(r);
		} catch (e) {
			const m = e instanceof StoreRefusal ? e.message
				: `store.${what}: ${e instanceof Error ? e.message : shown(e)}`;
			return errorFrame(errnoOf(e), m);
		}
	}

	#context(): SandboxBlockStoreContext {
		if (this.#ctx === undefined)
			throw new StoreRefusal(Errno.EINVAL, "hello first");
		return this.#ctx;
	}

	#needClaim(what: string): void {
		if (claims.get(this.#store) !== this)
			throw new StoreRefusal(Errno.EPERM, `${what} without the writer's claim`);
	}

	async #call(r: StoreRequest): Promise<Buffer> {
		switch (r.type) {
		case "hello":
			return this.#hello(r);
		case "list": {
			const ctx = this.#context();
			const all = checkList(await this.#store.list(ctx), this.#blocks);
			const from = all.findIndex((b) => b >= r.cursor);
			const rest = from < 0 ? [] : all.slice(from);
			const page = rest.slice(0, r.max);
			const last = page[page.length - 1];
			return listAnswer(rest.length > r.max && last !== undefined ? last + 1n : STORE_LIST_END, page);
		}
		case "read": {
			const ctx = this.#context();
			const out: Uint8Array[] = [];
			for (const { first, count } of r.ranges) {
				if (first + BigInt(count) > this.#blocks)
					throw new StoreRefusal(Errno.EINVAL, `read of blocks ${first}+${count}: the base has ${this.#blocks}`);
				const got = await this.#store.read(Object.freeze({ start: first, count: BigInt(count) }), ctx);
				out.push(...checkRead(got, first, count));
			}
			return readAnswer(out);
		}
		case "write": {
			const ctx = this.#context();
			this.#needClaim("write");
			const chunks: SandboxBlockChunk[] = [];
			for (const c of r.chunks) {
				if (c.index >= this.#blocks)
					throw new StoreRefusal(Errno.EINVAL, `write of block ${c.index}: the base has ${this.#blocks}`);
				// A zero chunk is a block of zeros to the store (the base
				// under it may not be zeros).
				chunks.push(Object.freeze({ index: c.index, bytes: c.bytes ?? new Uint8Array(STORE_BLOCK_SIZE) }));
			}
			await this.#store.write(chunks, ctx);
			ownState(this.#store).written = true;
			return frame(Msg.write | Msg.reply);
		}
		case "flush": {
			const ctx = this.#context();
			this.#needClaim("flush");
			// What the writes before this flush are once it is done.
			const st = ownState(this.#store);
			const written = st.written;
			st.written = false;
			try {
				if (this.#store.flush)
					await this.#store.flush(ctx);
			} catch (e) {
				st.written ||= written;
				throw e;
			}
			if (written)
				st.generation++;
			return frame(Msg.flush | Msg.reply);
		}
		case "state":
			return stateAnswer(await storeToken(this.#store, this.#context()));
		}
	}

	async #hello(r: Extract<StoreRequest, { type: "hello" }>): Promise<Buffer> {
		if (this.#ctx !== undefined)
			throw new StoreRefusal(Errno.EINVAL, "a second hello");
		if (r.version !== STORE_VERSION)
			throw new StoreRefusal(Errno.EINVAL, `protocol version ${r.version} (this store speaks ${STORE_VERSION})`);
		if (r.blockSize !== this.#store.blockSize)
			throw new StoreRefusal(Errno.EINVAL, `block size ${r.blockSize} (this store keeps ${this.#store.blockSize})`);
		const blocks = this.#base.sizeBytes / BigInt(STORE_BLOCK_SIZE);
		if (r.base !== this.#base.digest || r.blocks !== blocks)
			throw new StoreRefusal(Errno.EINVAL, `this store serves changes to ${this.#base.digest} (${blocks} blocks), ` +
				`not ${r.base} (${r.blocks} blocks)`);
		const ctx: SandboxBlockStoreContext = Object.freeze({
			base: Object.freeze({ name: this.#base.name, digest: this.#base.digest }),
		});
		if (r.claim && !claimStore(this.#store, this))
			throw new StoreRefusal(Errno.EBUSY, "another VM holds this store's writer claim");
		try {
			// The count of blocks held is list's total (the vmm checks
			// that list gives no more).
			const stored = checkList(await this.#store.list(ctx), blocks).length;
			const token = await storeToken(this.#store, ctx);
			this.#ctx = ctx;
			this.#blocks = blocks;
			return helloAnswer(this.#store.blockSize, BigInt(stored), token);
		} catch (e) {
			releaseStore(this.#store, this);
			throw e;
		}
	}
}

/** A store served on a Unix socket for as long as its owner needs it. */
export class BlockStoreServer {
	readonly #server: net.Server;
	readonly #conns = new Set<StoreConnection>();
	#path: string | undefined;

	constructor(store: SandboxBlockStore, base: StoreBase) {
		this.#server = net.createServer((s) => {
			if (this.#conns.size >= MAX_CONNECTIONS) {
				s.destroy();
				return;
			}
			const c = new StoreConnection(s, store, base);
			this.#conns.add(c);
			s.on("close", () => this.#conns.delete(c));
		});
	}

	listen(socket: string): Promise<void> {
		rmSync(socket, { force: true });
		this.#path = socket;
		return new Promise((resolve, reject) => {
			this.#server.once("error", reject);
			this.#server.listen(socket, () => {
				this.#server.off("error", reject);
				resolve();
			});
		});
	}

	/** Stops listening and drops every connection (their claims go). */
	close(): Promise<void> {
		for (const c of this.#conns)
			c.destroy();
		return new Promise((resolve) => this.#server.close(() => {
			if (this.#path)
				rmSync(this.#path, { force: true });
			resolve();
		}));
	}
}

/** Serves `store` on a socket in a private temporary directory (0700). */
export async function serveBlockStore(store: SandboxBlockStore, base: StoreBase):
	Promise<{ socket: string; close(): Promise<void> }> {
	const dir = await mkdtemp(path.join(os.tmpdir(), "kiln-store-"));
	const socket = path.join(dir, "store.sock");
	const server = new BlockStoreServer(store, base);
	try {
		await server.listen(socket);
	} catch (e) {
		await rm(dir, { recursive: true, force: true });
		throw e;
	}
	return {
		socket,
		close: async () => {
			await server.close();
			await rm(dir, { recursive: true, force: true });
		},
	};
}
