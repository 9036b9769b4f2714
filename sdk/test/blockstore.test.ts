// The block-store server (rootfs.cow's store side) against a scripted
// client speaking the protocol byte for byte as the vmm does
// (Documentation/rootfs.md, "The protocol"); rootfs.bytes' chunks; the
// argument errors of rootfs.flatten; the cow root's vmm configuration.

import assert from "node:assert/strict";
import { createHash } from "node:crypto";
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import net from "node:net";
import os from "node:os";
import path from "node:path";
import { describe, test } from "./flat.js";
import { SandboxConfigError, defineSandbox, rootfs } from "../src/index.js";
import type { RootfsImageInput, SandboxBlockChunk, SandboxBlockRange, SandboxBlockStore, SandboxBlockStoreContext, SandboxImage } from "../src/index.js";
import { BlockStoreServer, checkBlockStore } from "../src/blockstore.js";
import { Errno, STORE_MSG_MAX, StoreFramer, cutUtf8, decodeRequest, errorFrame } from "../src/blockstore-proto.js";
import { vmmConfig } from "../src/config.js";
import { materialise } from "../src/image-export.js";
import { fakeKiln } from "./kiln-fixture.js";
import { treeRoot } from "../src/locate.js";

const BS = 4096;
const DIGEST = "sha256:" + "ab".repeat(32);
const BASE = Object.freeze({ name: "base-1", digest: DIGEST, sizeBytes: 64n * 4096n });
const ENOSPC = os.constants.errno.ENOSPC;

/** A store in memory that records its calls. */
class MemStore implements SandboxBlockStore {
	readonly blockSize = BS;
	readonly blocks = new Map<bigint, Uint8Array>();
	readonly calls: string[] = [];
	contexts: SandboxBlockStoreContext[] = [];
	fail: { method: string; error: unknown } | undefined;
	flushed = 0;

	#check(method: string, ctx: SandboxBlockStoreContext): void {
		this.calls.push(method);
		this.contexts.push(ctx);
		if (this.fail?.method === method)
			throw this.fail.error;
	}

	async list(ctx: SandboxBlockStoreContext): Promise<readonly bigint[]> {
		this.#check("list", ctx);
		return [...this.blocks.keys()];
	}

	async read(r: SandboxBlockRange, ctx: SandboxBlockStoreContext): Promise<readonly SandboxBlockChunk[]> {
		this.#check("read", ctx);
		const out: SandboxBlockChunk[] = [];
		for (let i = r.start; i < r.start + r.count; i++) {
			const b = this.blocks.get(i);
			if (b)
				out.push({ index: i, bytes: b });
		}
		return out;
	}

	async write(chunks: readonly SandboxBlockChunk[], ctx: SandboxBlockStoreContext): Promise<void> {
		this.#check("write", ctx);
		for (const c of chunks)
			this.blocks.set(c.index, c.bytes);
	}

	async flush(ctx: SandboxBlockStoreContext): Promise<void> {
		this.#check("flush", ctx);
		this.flushed++;
	}
}

function frameOf(type: number, payload: Buffer = Buffer.alloc(0)): Buffer {
	const h = Buffer.alloc(5);
	h.writeUInt32LE(payload.length + 1, 0);
	h.writeUInt8(type, 4);
	return Buffer.concat([h, payload]);
}

function hello(opts: { claim?: boolean; base?: string; blocks?: bigint; blockSize?: number; version?: number } = {}): Buffer {
	const base = Buffer.from(opts.base ?? DIGEST);
	const p = Buffer.alloc(22);
	p.writeUInt32LE(opts.version ?? 1, 0);
	p.writeUInt32LE(opts.blockSize ?? BS, 4);
	p.writeBigUInt64LE(opts.blocks ?? 64n, 8);
	p.writeUInt32LE(opts.claim ? 1 : 0, 16);
	p.writeUInt16LE(base.length, 20);
	return frameOf(1, Buffer.concat([p, base]));
}

const list = (cursor: bigint, max: number): Buffer => {
	const p = Buffer.alloc(12);
	p.writeBigUInt64LE(cursor, 0);
	p.writeUInt32LE(max, 8);
	return frameOf(2, p);
};

const read = (ranges: [bigint, number][]): Buffer => {
	const p = Buffer.alloc(4 + 12 * ranges.length);
	p.writeUInt32LE(ranges.length, 0);
	ranges.forEach(([f, n], i) => {
		p.writeBigUInt64LE(f, 4 + 12 * i);
		p.writeUInt32LE(n, 12 + 12 * i);
	});
	return frameOf(3, p);
};

const write = (chunks: [bigint, number | null][]): Buffer => {
	const parts: Buffer[] = [Buffer.alloc(4)];
	parts[0]?.writeUInt32LE(chunks.length, 0);
	for (const [b, fill] of chunks) {
		const h = Buffer.alloc(9);
		h.writeBigUInt64LE(b, 0);
		h.writeUInt8(fill === null ? 1 : 0, 8);
		parts.push(h);
		if (fill !== null)
			parts.push(Buffer.alloc(BS, fill));
	}
	return frameOf(4, Buffer.concat(parts));
};

interface Answer { type: number; payload: Buffer }

/** The vmm's side: one request, then its whole answer. */
class Client {
	readonly s: net.Socket;
	readonly #framer = new StoreFramer();
	readonly #waiting: ((a: Answer | null) => void)[] = [];
	readonly #answers: (Answer | null)[] = [];
	ended = false;

	constructor(socket: string) {
		this.s = net.connect(socket);
		this.s.on("data", (c: Buffer) => {
			this.#framer.push(c);
			for (let f = this.#framer.next(); f; f = this.#framer.next())
				this.#deliver(f);
		});
		this.s.on("end", () => {
			this.ended = true;
			this.#deliver(null);
		});
		this.s.on("error", () => undefined);
	}

	#deliver(a: Answer | null): void {
		const w = this.#waiting.shift();
		if (w)
			w(a);
		else
			this.#answers.push(a);
	}

	next(): Promise<Answer | null> {
		if (this.#answers.length > 0)
			return Promise.resolve(this.#answers.shift() ?? null);
		return new Promise((r) => this.#waiting.push(r));
	}

	async ask(req: Buffer): Promise<Answer> {
		this.s.write(req);
		const a = await this.next();
		assert.ok(a, "an answer before the store closed");
		return a;
	}

	async ok(req: Buffer): Promise<Buffer> {
		const a = await this.ask(req);
		assert.equal(a.type, (req[4] ?? 0) | 0x80, a.type === 0xff ? `ERROR: ${error(a).text}` : `type 0x${a.type.toString(16)}`);
		return a.payload;
	}

	async refused(req: Buffer): Promise<{ errno: number; text: string }> {
		const a = await this.ask(req);
		assert.equal(a.type, 0xff, "an ERROR answer");
		return error(a);
	}
}

function error(a: Answer): { errno: number; text: string } {
	const n = a.payload.readUInt16LE(4);
	assert.equal(a.payload.length, 6 + n, "the error's length is its text's");
	return { errno: a.payload.readUInt32LE(0), text: a.payload.subarray(6).toString("utf8") };
}

async function withServer(store: SandboxBlockStore, body: (socket: string) => Promise<void>,
	base: { name: string; digest: string; sizeBytes: bigint } = BASE): Promise<void> {
	const dir = mkdtempSync(path.join(os.tmpdir(), "kiln-store-test-"));
	const server = new BlockStoreServer(store, base);
	const socket = path.join(dir, "s.sock");
	await server.listen(socket);
	try {
		await body(socket);
	} finally {
		await server.close();
		rmSync(dir, { recursive: true, force: true });
	}
}

describe("block store server", () => {
	test("hello answers the version, the block size and the blocks held; context.base is the base", async () => {
		const store = new MemStore();
		store.blocks.set(3n, new Uint8Array(BS).fill(3));
		store.blocks.set(9n, new Uint8Array(BS).fill(9));
		await withServer(store, async (socket) => {
			const c = new Client(socket);
			const p = await c.ok(hello({ claim: true }));
			assert.equal(p.length, 16 + 2 + 24, "the fixed part, then a 24-byte state token");
			assert.equal(p.readUInt32LE(0), 1);
			assert.equal(p.readUInt32LE(4), 4096);
			assert.equal(p.readBigUInt64LE(8), 2n);
			assert.deepEqual(store.contexts[0], { base: { name: "base-1", digest: DIGEST } });
			assert.match((await c.refused(hello())).text, /a second hello/);
			c.s.destroy();
		});
	});

	test("requests before hello, another base, block size or version are refused EINVAL", async () => {
		await withServer(new MemStore(), async (socket) => {
			const c = new Client(socket);
			assert.deepEqual(await c.refused(list(0n, 10)), { errno: Errno.EINVAL, text: "hello first" });
			const other = await c.refused(hello({ base: "sha256:" + "cd".repeat(32) }));
			assert.equal(other.errno, Errno.EINVAL);
			assert.match(other.text, /this store serves changes to sha256:abab.* \(64 blocks\), not sha256:cdcd/);
			assert.match((await c.refused(hello({ blocks: 65n }))).text, /not sha256:abab.* \(65 blocks\)/);
			assert.equal((await c.refused(hello({ blockSize: 512 }))).text, "block size 512 (this store keeps 4096)");
			assert.equal((await c.refused(hello({ version: 2 }))).text, "protocol version 2 (this store speaks 1)");
			await c.ok(hello());
			c.s.destroy();
		});
	});

	test("a second claim is EBUSY until the first connection half-closes; the claim goes before the store's end", async () => {
		const store = new MemStore();
		await withServer(store, async (socket) => {
			const a = new Client(socket);
			await a.ok(hello({ claim: true }));
			const b = new Client(socket);
			const busy = await b.refused(hello({ claim: true }));
			assert.deepEqual(busy, { errno: Errno.EBUSY, text: "another VM holds this store's writer claim" });
			// A reader without the claim is welcome, and may not write.
			await b.ok(hello());
			assert.equal((await b.refused(write([[1n, 1]]))).errno, Errno.EPERM);
			assert.equal((await b.refused(frameOf(5))).text, "flush without the writer's claim");
			// The vmm's close: half-close, wait for the store's end.
			a.s.end();
			assert.equal(await a.next(), null);
			const c = new Client(socket);
			await c.ok(hello({ claim: true }));
			b.s.destroy();
			c.s.destroy();
		});
	});

	test("list pages by cursor to the end (2^64-1), sorted, each block once", async () => {
		const store = new MemStore();
		for (const b of [40n, 2n, 7n, 5n, 63n])
			store.blocks.set(b, new Uint8Array(BS));
		await withServer(store, async (socket) => {
			const c = new Client(socket);
			await c.ok(hello());
			const page = async (cursor: bigint, max: number): Promise<[bigint, bigint[]]> => {
				const p = await c.ok(list(cursor, max));
				const n = p.readUInt32LE(8);
				assert.equal(p.length, 12 + 8 * n);
				return [p.readBigUInt64LE(0), Array.from({ length: n }, (_, i) => p.readBigUInt64LE(12 + 8 * i))];
			};
			assert.deepEqual(await page(0n, 2), [6n, [2n, 5n]]);
			assert.deepEqual(await page(6n, 2), [41n, [7n, 40n]]);
			assert.deepEqual(await page(41n, 2), [0xffff_ffff_ffff_ffffn, [63n]]);
			assert.deepEqual(await page(0n, 65536), [0xffff_ffff_ffff_ffffn, [2n, 5n, 7n, 40n, 63n]]);
			assert.match((await c.refused(list(0n, 0))).text, /list of at most 0 blocks \(1 to 65536\)/);
			assert.match((await c.refused(list(0n, 65537))).text, /1 to 65536/);
			c.s.destroy();
		});
	});

	test("a list naming a block past the base, or not bigints, is an EIO answer", async () => {
		const store = new MemStore();
		store.blocks.set(64n, new Uint8Array(BS));
		await withServer(store, async (socket) => {
			const c = new Client(socket);
			const e = await c.refused(hello());
			assert.deepEqual(e, { errno: Errno.EIO, text: "store.list returned block 64n: block numbers are bigints from 0 to 63" });
			store.blocks.clear();
			store.list = async () => [1] as never;
			assert.match((await c.refused(hello())).text, /store.list returned block 1: block numbers are bigints/);
			c.s.destroy();
		});
	});

	test("read answers the blocks asked for in order; a block not held is ENOENT", async () => {
		const store = new MemStore();
		for (const b of [1n, 2n, 3n, 10n])
			store.blocks.set(b, new Uint8Array(BS).fill(Number(b)));
		await withServer(store, async (socket) => {
			const c = new Client(socket);
			await c.ok(hello());
			const p = await c.ok(read([[10n, 1], [1n, 3]]));
			assert.equal(p.readUInt32LE(0), 4);
			assert.equal(p.length, 4 + 4 * BS);
			assert.deepEqual([0, 1, 2, 3].map((i) => p[4 + i * BS]), [10, 1, 2, 3]);
			assert.equal(store.calls.filter((x) => x === "read").length, 2, "one store.read per range");
			assert.deepEqual(await c.refused(read([[4n, 1]])), { errno: Errno.ENOENT, text: "block 4 is not stored" });
			assert.match((await c.refused(read([[63n, 2]]))).text, /read of blocks 63\+2: the base has 64/);
			assert.match((await c.refused(read([[0n, 200], [300n, 57]]))).text, /256 blocks at most in one read/);
			store.read = async () => [{ index: 1n, bytes: new Uint8Array(10) }];
			assert.match((await c.refused(read([[1n, 1]]))).text, /returned block 1 of 10 bytes \(4096\)/);
			c.s.destroy();
		});
	});

	test("write hands the store copies it may keep (zeros as a zero block); flush calls flush", async () => {
		const store = new MemStore();
		await withServer(store, async (socket) => {
			const c = new Client(socket);
			await c.ok(hello({ claim: true }));
			assert.equal((await c.ok(write([[5n, 0x55], [6n, null]]))).length, 0);
			const five = store.blocks.get(5n);
			const six = store.blocks.get(6n);
			assert.ok(five && six);
			assert.equal(five.length, BS);
			assert.equal(five.byteOffset, 0, "its own buffer, not a view of the frame");
			assert.equal(five.buffer.byteLength, BS);
			assert.ok(five.every((x) => x === 0x55));
			assert.ok(six.every((x) => x === 0));
			assert.equal((await c.ok(frameOf(5))).length, 0);
			assert.equal(store.flushed, 1);
			assert.match((await c.refused(write([[64n, 1]]))).text, /write of block 64: the base has 64/);
			const cut = write([[1n, 1]]).subarray(0, 100);
			cut.writeUInt32LE(cut.length - 4, 0);
			assert.match((await c.refused(cut)).text, /write cut short at byte 13/);
			c.s.destroy();
		});
	});

	test("state tokens: in hello and state; a flush after a write moves the server's own on", async () => {
		const store = new MemStore();
		let first: Buffer = Buffer.alloc(0);
		const tokenOf = (p: Buffer, at: number): Buffer => {
			const n = p.readUInt16LE(at);
			assert.equal(p.length, at + 2 + n, "the token is the answer's last bytes");
			return p.subarray(at + 2);
		};
		await withServer(store, async (socket) => {
			const c = new Client(socket);
			const t0 = tokenOf(await c.ok(hello({ claim: true })), 16);
			assert.equal(t0.length, 24);
			first = t0;
			assert.deepEqual(tokenOf(await c.ok(frameOf(6)), 0), t0);
			await c.ok(write([[5n, 0x55]]));
			assert.deepEqual(tokenOf(await c.ok(frameOf(6)), 0), t0, "a write alone: not yet");
			await c.ok(frameOf(5));
			const t1 = tokenOf(await c.ok(frameOf(6)), 0);
			assert.notDeepEqual(t1, t0);
			assert.deepEqual(t1.subarray(0, 16), t0.subarray(0, 16), "the same store's identity");
			await c.ok(frameOf(5));
			assert.deepEqual(tokenOf(await c.ok(frameOf(6)), 0), t1, "a flush of nothing");
			// A reader sees it too; a state with a payload is refused.
			const r = new Client(socket);
			assert.deepEqual(tokenOf(await r.ok(hello()), 16), t1);
			assert.equal((await r.refused(frameOf(6, Buffer.alloc(1)))).text, "state with a 1-byte payload (none)");
			r.s.destroy();
			c.s.destroy();
		});
		// Another store object: another identity.
		await withServer(new MemStore(), async (socket) => {
			const c = new Client(socket);
			const other = tokenOf(await c.ok(hello()), 16);
			assert.notDeepEqual(other.subarray(0, 16), first.subarray(0, 16));
			c.s.destroy();
		});
	});

	test("a store's own state method gives the token; one that is not 1 to 64 bytes is an EIO answer", async () => {
		const store = new MemStore();
		let token: unknown = new Uint8Array([1, 2, 3]);
		const own: SandboxBlockStore = {
			blockSize: BS, list: (x) => store.list(x), read: (r, x) => store.read(r, x),
			write: (w, x) => store.write(w, x), state: async () => token as Uint8Array,
		};
		await withServer(own, async (socket) => {
			const c = new Client(socket);
			const p = await c.ok(hello({ claim: true }));
			assert.deepEqual([...p.subarray(16)], [3, 0, 1, 2, 3]);
			token = new Uint8Array(64).fill(7);
			const s = await c.ok(frameOf(6));
			assert.equal(s.readUInt16LE(0), 64);
			assert.ok(s.subarray(2).every((x) => x === 7));
			token = new Uint8Array(65);
			const big = await c.refused(frameOf(6));
			assert.equal(big.errno, Errno.EIO);
			assert.match(big.text, /store\.state returned .*not a Uint8Array of 1 to 64 bytes/);
			token = new Uint8Array(0);
			assert.equal((await c.refused(frameOf(6))).errno, Errno.EIO);
			token = "abc";
			assert.equal((await c.refused(frameOf(6))).errno, Errno.EIO);
			c.s.destroy();
		});
		assert.throws(() => checkBlockStore("rootfs.cow: writable", { ...own, state: 5 }), /state must be a method when given, got 5/);
	});

	test("a store without flush still answers flush", async () => {
		const store = new MemStore();
		const bare: SandboxBlockStore = { blockSize: BS, list: (x) => store.list(x), read: (r, x) => store.read(r, x), write: (w, x) => store.write(w, x) };
		await withServer(bare, async (socket) => {
			const c = new Client(socket);
			await c.ok(hello({ claim: true }));
			await c.ok(frameOf(5));
			c.s.destroy();
		});
	});

	test("what a store method throws or rejects with is its ERROR answer; the connection goes on", async () => {
		const store = new MemStore();
		await withServer(store, async (socket) => {
			const c = new Client(socket);
			await c.ok(hello({ claim: true }));
			store.fail = { method: "write", error: Object.assign(new Error("bucket is full"), { code: "ENOSPC" }) };
			assert.deepEqual(await c.refused(write([[1n, 1]])), { errno: ENOSPC, text: "store.write: bucket is full" });
			store.fail = { method: "flush", error: "a string" };
			assert.deepEqual(await c.refused(frameOf(5)), { errno: Errno.EIO, text: 'store.flush: "a string"' });
			store.fail = { method: "list", error: new Error("x".repeat(5000)) };
			const long = await c.refused(list(0n, 1));
			assert.equal(long.text.length, 1024, "cut to the protocol's 1024 bytes");
			store.read = () => { throw new TypeError("not even async"); };
			store.fail = undefined;
			store.blocks.set(1n, new Uint8Array(BS));
			assert.equal((await c.refused(read([[1n, 1]]))).text, "store.read: not even async");
			await c.ok(write([[2n, 2]]));
			c.s.destroy();
		});
	});

	test("malformed frames: an unknown type is refused, a length of 0 or over 2 MiB ends the connection", async () => {
		await withServer(new MemStore(), async (socket) => {
			const c = new Client(socket);
			await c.ok(hello());
			assert.equal((await c.refused(frameOf(0x42))).text, "unknown request type 0x42");
			assert.match((await c.refused(frameOf(1, Buffer.alloc(3)))).text, /hello of 3 bytes/);
			assert.match((await c.refused(frameOf(5, Buffer.alloc(1)))).text, /flush with a 1-byte payload/);
			const big = Buffer.alloc(4);
			big.writeUInt32LE(STORE_MSG_MAX + 1, 0);
			assert.deepEqual(await c.refused(big), { errno: Errno.EINVAL, text: `frame of ${STORE_MSG_MAX + 1} bytes (1 to ${STORE_MSG_MAX})` });
			assert.equal(await c.next(), null, "then the store closes");
			const d = new Client(socket);
			assert.equal((await d.refused(Buffer.alloc(4))).text, `frame of 0 bytes (1 to ${STORE_MSG_MAX})`);
			assert.equal(await d.next(), null);
		});
	});

	test("a frame in pieces and several frames in one write are both answered in order", async () => {
		await withServer(new MemStore(), async (socket) => {
			const c = new Client(socket);
			const h = hello({ claim: true });
			for (const b of h)
				c.s.write(Buffer.from([b]));
			assert.equal((await c.next())?.type, 0x81);
			c.s.write(Buffer.concat([write([[1n, 7]]), frameOf(5), list(0n, 5)]));
			assert.deepEqual([(await c.next())?.type, (await c.next())?.type, (await c.next())?.type], [0x84, 0x85, 0x82]);
			c.s.destroy();
		});
	});

	test("a store call that never settles: closing the server (the VM exited) lets the claim go", async () => {
		const store = new MemStore();
		store.write = () => new Promise<void>(() => undefined);
		await withServer(store, async (socket) => {
			const c = new Client(socket);
			await c.ok(hello({ claim: true }));
			c.s.write(write([[1n, 1]]));
			await new Promise((r) => setTimeout(r, 50));
		});
		await withServer(store, async (socket) => {
			const c = new Client(socket);
			await c.ok(hello({ claim: true }));
			c.s.destroy();
		});
	});

	test("codec: recorded bytes decode; error text is cut at a character boundary", () => {
		const h = hello({ claim: true });
		assert.deepEqual(decodeRequest(1, h.subarray(5)), { type: "hello", version: 1, blockSize: 4096, blocks: 64n, claim: true, base: DIGEST });
		assert.deepEqual(decodeRequest(3, read([[5n, 2]]).subarray(5)), { type: "read", ranges: [{ first: 5n, count: 2 }] });
		assert.throws(() => decodeRequest(3, Buffer.alloc(4)), /read of 0 ranges/);
		assert.throws(() => decodeRequest(4, Buffer.from([1, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 7])), /kind 7/);
		assert.equal(cutUtf8("é".repeat(600), 1024).length, 1024);
		assert.equal(cutUtf8("aé".repeat(400), 1024).toString("utf8").endsWith("\ufffd"), false);
		const e = errorFrame(16, "busy");
		assert.deepEqual([...e], [11, 0, 0, 0, 0xff, 16, 0, 0, 0, 4, 0, 98, 117, 115, 121]);
	});
});

describe("rootfs.cow", () => {
	test("the vmm's config: mode cow, the store's socket, maxDirtyBytes", () => {
		const base = rootfs.image({ name: "b-1", path: "/b.img", format: "raw", architecture: "x64", digest: DIGEST, sizeBytes: 4096n, facts: [] });
		const cow = rootfs.cow({ base, writable: new MemStore(), maxDirtyBytes: 1 << 20 });
		const kiln = { vmm: "/v", kernel: "/k", initrd: "/i", kernelPins: "/p", initrdPins: "/p" };
		const c = vmmConfig({ kiln, rootfs: cow, resources: undefined, boot: { hostname: undefined, mounts: [], cwd: undefined },
			descriptor: "/d/image.json", sockets: { virtual: new Map(), store: "/d/store.sock" } });
		assert.deepEqual(c["rootfs"], { image: "/d/image.json", mode: "cow", storeSocket: "/d/store.sock", maxDirtyBytes: 1 << 20 });
	});
});

function fileImage(dir: string, content: Buffer): RootfsImageInput {
	const p = path.join(dir, "img");
	writeFileSync(p, content);
	return { name: "img-1", path: p, format: "raw", architecture: "x64",
		digest: `sha256:${createHash("sha256").update(content).digest("hex")}`, sizeBytes: BigInt(content.length), facts: [] };
}

async function collect(it: AsyncIterable<Uint8Array>): Promise<Uint8Array[]> {
	const out: Uint8Array[] = [];
	for await (const c of it)
		out.push(c);
	return out;
}

describe("rootfs.bytes", () => {
	test("a file in chunks of chunkSize, the last one short; the digest checked at the end", async () => {
		const dir = mkdtempSync(path.join(os.tmpdir(), "kiln-bytes-"));
		try {
			const content = Buffer.alloc(5 * 4096 + 4096, 0);
			for (let i = 0; i < content.length; i++)
				content[i] = (i * 7) & 0xff;
			const img = fileImage(dir, content);
			assert.equal(rootfs.image(img).format, "raw");
			const chunks = await collect(rootfs.bytes(img, { chunkSize: 8192 }));
			assert.deepEqual(chunks.map((c) => c.length), [8192, 8192, 8192]);
			assert.deepEqual(Buffer.concat(chunks), content);
			// A qcow2 file is streamed as it is, whatever its virtual size.
			const q = rootfs.image({ ...img, format: "qcow2", sizeBytes: 1n << 30n });
			assert.equal((await collect(rootfs.bytes(q))).length, 1);
			const wrong = rootfs.image({ ...img, digest: "sha256:" + "00".repeat(32) });
			await assert.rejects(collect(rootfs.bytes(wrong, { chunkSize: 4096 })),
				/rootfs.bytes: .*img has sha256:[0-9a-f]{64}, its descriptor says sha256:0000.* \(the bytes yielded are not the image's\)/);
			const short = rootfs.image({ ...img, sizeBytes: 8n * 4096n });
			await assert.rejects(collect(rootfs.bytes(short)), /has 24576 bytes, its descriptor says 32768/);
		} finally {
			rmSync(dir, { recursive: true, force: true });
		}
	});

	test("chunkSize must be a multiple of 4096 up to 64 MiB", () => {
		const img = rootfs.image({ name: "b-1", path: "/b.img", format: "raw", architecture: "x64", digest: DIGEST, sizeBytes: 4096n, facts: [] });
		assert.throws(() => rootfs.bytes(img, { chunkSize: 5000 }), { name: "SandboxConfigError", message: "rootfs.bytes: chunkSize: must be a multiple of 4096, got 5000" });
		assert.throws(() => rootfs.bytes(img, { chunkSize: 1024 }), /rootfs.bytes: chunkSize: must be from 4096 to 67108864, got 1024/);
		assert.throws(() => rootfs.bytes({ kind: "image" } as never), /rootfs.bytes: image: must be an image/);
		assert.throws(() => rootfs.bytes(img, { chunk: 1 } as never), /unknown option "chunk"/);
	});

	test("an image in a store is read back through store.read, cut to its file's length; booting it copies it to its path", async () => {
		const dir = mkdtempSync(path.join(os.tmpdir(), "kiln-bytes-"));
		try {
			const file = Buffer.alloc(3 * 4096 + 100, 0x61);
			const store = new MemStore();
			for (let i = 0; i < 4; i++) {
				const b = new Uint8Array(BS);
				b.set(file.subarray(i * BS, (i + 1) * BS));
				store.blocks.set(BigInt(i), b);
			}
			const digest = `sha256:${createHash("sha256").update(file).digest("hex")}`;
			const img: SandboxImage = Object.freeze({
				kind: "image", name: "flat-1", path: path.join(dir, "cache", "x.qcow2"), format: "qcow2", architecture: "x86_64",
				digest, sizeBytes: 1n << 20n, facts: [], stored: Object.freeze({ store, fileBytes: BigInt(file.length) }),
			});
			const chunks = await collect(rootfs.bytes(img, { chunkSize: 8192 }));
			assert.deepEqual(chunks.map((c) => c.length), [8192, 4096 + 100]);
			assert.deepEqual(Buffer.concat(chunks), file);
			assert.deepEqual(store.contexts.at(-1), { base: { name: "flat-1", digest } });
			await materialise(img);
			assert.deepEqual(readFileSync(img.path), file);
			store.blocks.delete(2n);
			await assert.rejects(collect(rootfs.bytes(img)), /rootfs.bytes: flat-1: block 2 is not stored/);
			store.blocks.set(2n, new Uint8Array(BS));
			await assert.rejects(collect(rootfs.bytes(img)), /the store's blocks hash to sha256:[0-9a-f]{64}, not sha256:/);
		} finally {
			rmSync(dir, { recursive: true, force: true });
		}
	});
});

describe("rootfs.flatten", () => {
	const base = rootfs.image({ name: "b-1", path: "/b.img", format: "raw", architecture: "x64", digest: DIGEST, sizeBytes: 4096n, facts: [] });
	const dest = new MemStore();
	const refuses = (o: unknown, message: string | RegExp): Promise<void> =>
		assert.rejects(rootfs.flatten(o as never), (e: Error) => {
			assert.ok(e instanceof SandboxConfigError, `${e.name}: ${e.message}`);
			if (typeof message === "string")
				assert.equal(e.message, message);
			else
				assert.match(e.message, message);
			return true;
		});

	test("argument errors name the option", async () => {
		await refuses({ source: base, dest }, "rootfs.flatten: format is required");
		await refuses({ format: "raw", source: base, dest }, 'rootfs.flatten: format: must be "qcow2", got "raw"');
		await refuses({ format: "qcow2", source: base }, "rootfs.flatten: dest is required");
		await refuses({ format: "qcow2", source: base, dest: { blockSize: 512, list() {}, read() {}, write() {} } },
			"rootfs.flatten: dest: blockSize 512: Kiln's block stores keep 4096-byte blocks");
		await refuses({ format: "qcow2", source: { path: "/x" }, dest }, /rootfs.flatten: source: must be an image .* or rootfs.compose/);
		await refuses({ format: "qcow2", source: base, dest, clusterSize: 3000 }, "rootfs.flatten: clusterSize: must be from 4096 to 2097152, got 3000");
		await refuses({ format: "qcow2", source: base, dest, clusterSize: 12288 },
			"rootfs.flatten: clusterSize: must be a power of two from 4096 to 2097152, got 12288");
		await refuses({ format: "qcow2", source: base, dest, level: 1 }, /unknown option "level"/);
		const overlay = new MemStore();
		await refuses({ format: "qcow2", source: rootfs.compose({ base, overlay }), dest: overlay },
			"rootfs.flatten: dest is the source's overlay: write the image to another store");
	});

	test("an overlay a running VM holds is refused", async () => {
		const overlay = new MemStore();
		await withServer(overlay, async (socket) => {
			const c = new Client(socket);
			await c.ok(hello({ claim: true }));
			await refuses({ format: "qcow2", source: rootfs.compose({ base, overlay }), dest },
				/rootfs.flatten: source: its overlay is the writable store of a running VM: shut the VM down first/);
			c.s.destroy();
		});
	});
});

describe("rootfs.cow boot", () => {
	test("the store is served on DIR/store.sock while the VM runs, named in its config, gone after close", async () => {
		const k = fakeKiln();
		try {
			const store = new MemStore();
			const { kind: _kind, stored: _stored, ...input } = k.image;
			const image = rootfs.image({ ...input, digest: DIGEST, sizeBytes: 64n * 4096n, facts: [] });
			const sandbox = defineSandbox({ rootfs: rootfs.cow({ base: image, writable: store, maxDirtyBytes: 8192 }),
				kiln: { vmm: k.vmm, kernel: k.kernel, initrd: k.initrd } });
			assert.ok(sandbox.environmentFacts().some((f) => f.topic === "rootfs-write-mode" && f.value === "cow"));
			let socket = "";
			{
				await using vm = await sandbox.boot();
				const dir = path.dirname(vm.controlSocket);
				const config = JSON.parse(readFileSync(path.join(dir, "vm.json"), "utf8")) as Record<string, unknown>;
				socket = path.join(dir, "store.sock");
				assert.deepEqual(config["rootfs"], { image: path.join(dir, "image.json"), mode: "cow", storeSocket: socket, maxDirtyBytes: 8192 });
				// The vmm's side, as it would speak it.
				const c = new Client(socket);
				await c.ok(hello({ claim: true }));
				await c.ok(write([[3n, 3]]));
				await c.ok(frameOf(5));
				c.s.end();
				assert.equal(await c.next(), null);
				assert.deepEqual(store.calls, ["list", "write", "flush"]);
				assert.deepEqual(store.contexts[0], { base: { name: image.name, digest: DIGEST } });
			}
			assert.equal(existsSync(socket), false, "the store's socket goes with the VM");
		} finally {
			k.remove();
		}
	});
});

describe("rootfs.flatten with Kiln's vmm", () => {
	const vmm = process.env["KILN_VMM"] ?? path.join(treeRoot() ?? "/nonexistent", "build", "vmm");
	test("a raw image to qcow2 in a store: bytes read it back, its digest; a boot's local copy is the file", async (t) => {
		if (!existsSync(vmm)) {
			t.skip(`no vmm at ${vmm} (make)`);
			return;
		}
		const dir = mkdtempSync(path.join(os.tmpdir(), "kiln-flatten-test-"));
		const cache = process.env["KILN_CACHE"];
		process.env["KILN_CACHE"] = path.join(dir, "cache");
		try {
			// 1 MiB: a block of data every 64 KiB cluster but one, and zeros.
			const raw = Buffer.alloc(1 << 20);
			for (let c = 0; c < 16; c++)
				if (c !== 5)
					raw.fill(c + 1, c * 65536 + 8192, c * 65536 + 12288);
			const input = fileImage(dir, raw);
			const dest = new MemStore();
			const image = await rootfs.flatten({ format: "qcow2", source: input, dest, clusterSize: 65536, kiln: { vmm } });
			assert.equal(image.format, "qcow2");
			assert.equal(image.sizeBytes, 1n << 20n);
			assert.match(image.name, /^img-1\.flat-[0-9a-f]{12}$/);
			assert.equal(image.path, path.join(dir, "cache", "sdk-images", `${image.digest.slice(7)}.qcow2`));
			const fileBytes = image.stored?.fileBytes ?? 0n;
			assert.equal(fileBytes % 4096n, 0n);
			assert.equal(BigInt(dest.blocks.size) * 4096n, fileBytes, "every block of the file, 0 to n-1");
			assert.ok(dest.contexts.every((c) => c.base.digest === image.digest && c.base.name === image.name));
			assert.equal(dest.calls.at(-1), "flush");
			const streamed = Buffer.concat(await collect(rootfs.bytes(image, { chunkSize: 65536 })));
			assert.equal(`sha256:${createHash("sha256").update(streamed).digest("hex")}`, image.digest);
			assert.deepEqual([...streamed.subarray(0, 4)], [0x51, 0x46, 0x49, 0xfb], "a qcow2 file");
			await materialise(image);
			assert.deepEqual(readFileSync(image.path), streamed);
			// base + overlay (served to the vmm's flatten) is the image of
			// the changed disk: the same qcow2, byte for byte.
			const overlay = new MemStore();
			const inputImage = rootfs.image(input);
			const ctx = { base: { name: inputImage.name, digest: inputImage.digest } };
			await overlay.write([{ index: 20n, bytes: new Uint8Array(BS).fill(0x77) }], ctx);
			const composedDest = new MemStore();
			const composed = await rootfs.flatten({ format: "qcow2", source: rootfs.compose({ base: inputImage, overlay }),
				dest: composedDest, kiln: { vmm } });
			assert.deepEqual(overlay.calls, ["write", "list", "list", "read"], "hello's list, list, read: no claim needed");
			raw.fill(0x77, 20 * BS, 21 * BS);
			const d2 = mkdtempSync(path.join(dir, "changed-"));
			const direct = await rootfs.flatten({ format: "qcow2", source: fileImage(d2, raw), dest: new MemStore(), kiln: { vmm } });
			assert.equal(composed.digest, direct.digest);
			// A dest a VM holds is refused before anything runs.
			await withServer(dest, async (socket) => {
				const c = new Client(socket);
				await c.ok(hello({ claim: true, base: image.digest, blocks: fileBytes / 4096n }));
				await assert.rejects(rootfs.flatten({ format: "qcow2", source: input, dest, kiln: { vmm } }),
					/rootfs.flatten: dest is the writable store of a running VM/);
				c.s.destroy();
			}, { name: image.name, digest: image.digest, sizeBytes: fileBytes });
		} finally {
			if (cache === undefined)
				delete process.env["KILN_CACHE"];
			else
				process.env["KILN_CACHE"] = cache;
			rmSync(dir, { recursive: true, force: true });
		}
	});
});
