// fs.memory and fs.virtual's FUSE server: a guest session (built byte for
// byte as the guest kernel sends it) against the memory file system; the
// stream framing; the socket with the vmm's reconnection; and a fuzz run
// of recorded and mutated requests (no crash, no growth without bound,
// every malformed request answered with an error or the connection
// dropped).

import assert from "node:assert/strict";
import { mkdtempSync, rmSync } from "node:fs";
import net from "node:net";
import os from "node:os";
import path from "node:path";
import { describe, test } from "node:test";
import { fs, fsError } from "../src/index.js";
import type { SandboxFileSystem } from "../src/index.js";
import { Errno, FuseError, FuseFramer, MAX_MESSAGE, Op } from "../src/vfs/fuse.js";
import { FuseSession, MAX_NODES, VirtualFsServer } from "../src/vfs/server.js";
import * as m from "./fuse-msg.js";

const ROOT = 1n;

async function ok(s: FuseSession, msg: Buffer): Promise<Buffer> {
	const out = await s.handle(msg);
	assert.ok(out, "a reply");
	const r = m.reply(out);
	assert.equal(r.len, out.length);
	assert.equal(r.error, 0, `errno ${-r.error}`);
	assert.equal(r.unique, msg.readBigUInt64LE(8));
	return r.body;
}

async function err(s: FuseSession, msg: Buffer): Promise<number> {
	const out = await s.handle(msg);
	assert.ok(out, "a reply");
	const r = m.reply(out);
	assert.equal(r.len, 16, "an error reply is the header alone");
	return -r.error;
}

describe("fs.memory", () => {
	test("seeded files, parents made; validation", async () => {
		const w = fs.memory({ files: { "/task.txt": "hello\n", "/src/input.json": new Uint8Array([123, 125]) } });
		assert.deepEqual(await w.readDir("/"), ["src", "task.txt"]);
		assert.equal(new TextDecoder().decode(await w.readFile("/task.txt")), "hello\n");
		assert.equal((await w.stat("/src")).type, "directory");
		assert.deepEqual([...await w.readFile("/src/input.json", { offset: 1, length: 5 })], [125]);
		assert.throws(() => fs.memory({ files: { "relative": "x" } }), /absolute path/);
		assert.throws(() => fs.memory({ files: { "/x": 7 as never } }), /string or Uint8Array/);
		assert.throws(() => fs.memory({ nope: 1 } as never), /unknown option "nope"/);
		assert.throws(() => fs.virtual({} as never), /missing: stat, readDir/);
	});

	test("writes at offsets, truncation, rename of a tree, limits", async () => {
		const w = fs.memory({ maxBytes: 100, maxNodes: 6 });
		await w.writeFile("/a", new TextEncoder().encode("abc"));
		await w.writeFile("/a", new TextEncoder().encode("Z"), { offset: 5 });
		assert.deepEqual([...await w.readFile("/a")], [97, 98, 99, 0, 0, 90]);
		await w.truncate("/a", 2);
		assert.equal((await w.stat("/a")).size, 2);
		await w.mkdir("/d");
		await w.mkdir("/d/e");
		await w.writeFile("/d/e/f", new Uint8Array(3));
		await w.rename("/d", "/g");
		assert.deepEqual(await w.readDir("/g/e"), ["f"]);
		await assert.rejects(w.stat("/d/e/f"), { code: "ENOENT" });
		await assert.rejects(w.writeFile("/big", new Uint8Array(200)), { code: "ENOSPC" });
		await assert.rejects(w.remove("/g"), { code: "ENOTEMPTY" });
		await assert.rejects(w.rename("/g", "/g/e/x"), { code: "EINVAL" });
		await w.writeFile("/n1", new Uint8Array(0));
		await assert.rejects(w.writeFile("/n2", new Uint8Array(0)), { code: "ENOSPC" });
		assert.equal(w.bytes, 5);
	});
});

describe("the FUSE session", () => {
	test("a guest session: init, lookup, read, create, write, readdir, rename, unlink", async () => {
		const w = fs.memory({ files: { "/prompt.txt": "Print the Node.js version\n" } });
		const s = new FuseSession(w);
		const init = await ok(s, m.init());
		assert.equal(init.length, 64);
		assert.equal(init.readUInt32LE(0), 7);
		assert.equal(init.readUInt32LE(4), 31);
		assert.equal(init.readUInt32LE(20), 128 * 1024, "max_write");
		const e = m.entry(await ok(s, m.lookup(ROOT, "prompt.txt")));
		assert.equal(e.size, 26n);
		assert.equal(e.mode, 0o100644);
		await ok(s, m.open(e.node));
		assert.equal((await ok(s, m.read(e.node, 6, 3))).toString(), "the");
		assert.equal(await err(s, m.lookup(ROOT, "missing")), Errno.ENOENT);

		const c = m.entry(await ok(s, m.create(ROOT, "out.txt")));
		assert.equal((await ok(s, m.write(c.node, 0, Buffer.from("written by the guest")))).readUInt32LE(0), 20);
		assert.equal(new TextDecoder().decode(await w.readFile("/out.txt")), "written by the guest", "the host sees it at once");
		await ok(s, m.setattrSize(c.node, 7));
		assert.equal((await w.stat("/out.txt")).size, 7);

		const d = m.entry(await ok(s, m.mkdir(ROOT, "dir")));
		assert.equal(d.mode, 0o40755);
		await ok(s, m.opendir(ROOT));
		assert.deepEqual(m.dirents(await ok(s, m.readdir(ROOT, 0, 4096))), [".", "..", "dir", "out.txt", "prompt.txt"]);
		// A small buffer takes what fits; the offset goes on from there.
		assert.deepEqual(m.dirents(await ok(s, m.readdir(ROOT, 0, 64))), [".", ".."]);
		assert.deepEqual(m.dirents(await ok(s, m.readdir(ROOT, 3, 4096))), ["out.txt", "prompt.txt"]);

		await ok(s, m.rename(ROOT, "out.txt", d.node, "moved.txt"));
		assert.equal((await ok(s, m.read(c.node, 0, 100))).toString(), "written", "the node follows its file");
		assert.equal(await err(s, m.rmdir(ROOT, "dir")), Errno.ENOTEMPTY);
		assert.equal(await err(s, m.unlink(ROOT, "dir")), Errno.EISDIR);
		assert.equal(await err(s, m.rmdir(d.node, "moved.txt")), Errno.ENOTDIR);
		await ok(s, m.unlink(d.node, "moved.txt"));
		await ok(s, m.rmdir(ROOT, "dir"));
		assert.deepEqual(await w.readDir("/"), ["prompt.txt"]);
		assert.equal((await ok(s, m.statfs())).readUInt32LE(40), 4096);
		assert.equal(await s.handle(m.forget(e.node, 1n)), undefined, "no reply to a forget");
		// A file removed and made again gets a node of its own.
		const gone = m.entry(await ok(s, m.create(ROOT, "again.txt"))).node;
		await ok(s, m.unlink(ROOT, "again.txt"));
		const fresh = m.entry(await ok(s, m.create(ROOT, "again.txt"))).node;
		assert.notEqual(fresh, gone);
	});

	test("lookup counts: a node goes when the guest forgets it; at most MAX_NODES", async () => {
		const s = new FuseSession(fs.memory({ files: { "/a": "x" } }));
		const a = m.entry(await ok(s, m.lookup(ROOT, "a"))).node;
		assert.equal(m.entry(await ok(s, m.lookup(ROOT, "a"))).node, a);
		assert.equal(s.nodes, 2);
		await s.handle(m.forget(a, 1n));
		assert.equal(s.nodes, 2);
		await s.handle(m.forget(a, 1n));
		assert.equal(s.nodes, 1);
		assert.equal(await err(s, m.getattr(a)), Errno.ESTALE);
		assert.ok(MAX_NODES >= 1024);
	});

	test("a file system's errors become the guest's errno; others are EIO", async () => {
		const w = fs.memory({ files: { "/a": "x" } });
		const s = new FuseSession({
			...bind(w),
			readFile: async () => {
				throw fsError("EACCES", "no");
			},
			truncate: async () => {
				throw new Error("a bug");
			},
		});
		const a = m.entry(await ok(s, m.lookup(ROOT, "a"))).node;
		assert.equal(await err(s, m.read(a, 0, 10)), Errno.EACCES);
		assert.equal(await err(s, m.setattrSize(a, 0)), Errno.EIO);
		assert.equal(await err(s, m.request(Op.LINK, a, Buffer.alloc(8))), Errno.ENOSYS);
	});

	test("malformed requests get EINVAL and friends, never a crash", async () => {
		const s = new FuseSession(fs.memory({ files: { "/a": "x" } }));
		await ok(s, m.init());
		assert.equal(await err(s, m.request(Op.LOOKUP, ROOT, Buffer.from("no-nul"))), Errno.EINVAL);
		assert.equal(await err(s, m.request(Op.LOOKUP, ROOT, Buffer.from("..\0"))), Errno.EINVAL);
		assert.equal(await err(s, m.request(Op.LOOKUP, ROOT, Buffer.from("a/b\0"))), Errno.EINVAL);
		assert.equal(await err(s, m.request(Op.LOOKUP, ROOT, Buffer.concat([Buffer.alloc(256, 97), Buffer.alloc(1)]))), Errno.ENAMETOOLONG);
		assert.equal(await err(s, m.request(Op.LOOKUP, ROOT, Buffer.from([0xff, 0xfe, 0]))), Errno.EILSEQ);
		assert.equal(await err(s, m.request(Op.READ, ROOT, Buffer.alloc(8))), Errno.EINVAL);
		assert.equal(await err(s, m.request(Op.GETATTR, 999n, Buffer.alloc(16))), Errno.ESTALE);
		const w = m.write(ROOT, 0, Buffer.from("abc"));
		w.writeUInt32LE(1 << 20, 40 + 16); // size past the data sent
		assert.equal(await err(s, w), Errno.EINVAL);
		await assert.rejects(s.handle(Buffer.alloc(10)), FuseError);
		const short = m.init();
		short.writeUInt32LE(999, 0);
		await assert.rejects(s.handle(short), /len 999/);
	});
});

/** A SandboxFileSystem's methods bound to it (to override some). */
function bind(o: SandboxFileSystem): SandboxFileSystem {
	const out: Record<string, unknown> = {};
	for (const k of ["stat", "readDir", "readFile", "writeFile", "truncate", "mkdir", "remove", "rename", "chmod"])
		out[k] = (o as unknown as Record<string, (...a: unknown[]) => unknown>)[k]?.bind(o);
	return out as unknown as SandboxFileSystem;
}

describe("framing", () => {
	test("messages split anywhere and joined come out whole", () => {
		const msgs = [m.init(), m.lookup(ROOT, "a"), m.write(ROOT, 0, Buffer.alloc(70000, 1))];
		const all = Buffer.concat(msgs);
		for (const step of [1, 3, 39, 40, 41, 4096, all.length]) {
			const f = new FuseFramer();
			const out: Buffer[] = [];
			for (let i = 0; i < all.length; i += step)
				out.push(...f.push(all.subarray(i, i + step)));
			assert.deepEqual(out, msgs);
			assert.equal(f.buffered, 0);
		}
	});

	test("a len that cannot frame a message throws", () => {
		for (const len of [0, 39, MAX_MESSAGE + 1, 0xffffffff]) {
			const b = Buffer.alloc(40);
			b.writeUInt32LE(len, 0);
			assert.throws(() => new FuseFramer().push(b), /cannot be framed/);
		}
	});
});

/** Splits a stream of replies. */
function replies(buf: { b: Buffer }): m.Reply[] {
	const out: m.Reply[] = [];
	while (buf.b.length >= 16 && buf.b.readUInt32LE(0) <= buf.b.length) {
		const n = buf.b.readUInt32LE(0);
		out.push(m.reply(buf.b.subarray(0, n)));
		buf.b = buf.b.subarray(n);
	}
	return out;
}

describe("the virtual-fs socket", () => {
	test("a stream of requests answered; the vmm reconnects and replays FUSE_INIT with unique 0; a bad len drops", async () => {
		const dir = mkdtempSync(path.join(os.tmpdir(), "kiln-vfs-"));
		const w = fs.memory({ files: { "/task.txt": "Summarize\n" } });
		const v = new VirtualFsServer(w);
		const sock = path.join(dir, "vfs.sock");
		try {
			await v.listen(sock);
			const talk = async (msgs: Buffer[], want: number) => {
				const s = net.connect(sock);
				const buf = { b: Buffer.alloc(0) };
				const got: m.Reply[] = [];
				s.on("data", (c: Buffer) => {
					buf.b = Buffer.concat([buf.b, c]);
					got.push(...replies(buf));
				});
				s.on("error", () => undefined);
				await new Promise((r) => s.once("connect", r));
				// Written in odd pieces, as a stream may cut them.
				const all = Buffer.concat(msgs);
				for (let i = 0; i < all.length; i += 7)
					s.write(all.subarray(i, i + 7));
				for (let i = 0; i < 500 && got.length < want; i++)
					await new Promise((r) => setTimeout(r, 10));
				return { s, got };
			};
			const a = await talk([m.init(0n), m.lookup(ROOT, "task.txt")], 2);
			assert.deepEqual(a.got.map((r) => r.error), [0, 0]);
			assert.equal(a.got[0]?.unique, 0n);
			const node = m.entry(a.got[1]?.body ?? Buffer.alloc(128)).node;
			a.s.destroy();
			// The vmm's new connection: FUSE_INIT again, then the node the
			// guest still holds.
			const b = await talk([m.init(0n), m.read(node, 0, 100)], 2);
			assert.equal(b.got[1]?.body.toString(), "Summarize\n");
			const bad = m.lookup(ROOT, "x");
			bad.writeUInt32LE(8, 0);
			b.s.write(bad);
			await new Promise((r) => b.s.once("close", r));
			assert.equal(v.stats.dropped, 1);
			assert.equal(v.stats.connections, 2);
		} finally {
			await v.close();
			rmSync(dir, { recursive: true, force: true });
		}
	});
});

describe("fuzz", () => {
	/** A recorded session: what a guest sends for ls, cat, echo >, mkdir, mv, rm. */
	const recorded = (): Buffer[] => [
		m.init(), m.lookup(ROOT, "prompt.txt"), m.getattr(ROOT), m.opendir(ROOT), m.readdir(ROOT, 0, 4096),
		m.open(2n), m.read(2n, 0, 4096), m.release(2n), m.create(ROOT, "new.txt"), m.write(3n, 0, Buffer.from("data")),
		m.setattrSize(3n, 2), m.mkdir(ROOT, "d"), m.rename(ROOT, "new.txt", 4n, "n.txt"), m.unlink(4n, "n.txt"),
		m.rmdir(ROOT, "d"), m.statfs(), m.forget(2n, 1n),
		m.request(Op.BATCH_FORGET, 0n, Buffer.from([2, 0, 0, 0, 0, 0, 0, 0, 2, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0])),
	];

	/** A deterministic generator (xorshift32), so a failure reproduces. */
	function rng(seed: number): () => number {
		let x = seed >>> 0 || 1;
		return () => {
			x ^= x << 13;
			x >>>= 0;
			x ^= x >>> 17;
			x ^= x << 5;
			x >>>= 0;
			return x;
		};
	}

	function mutate(msg: Buffer, r: () => number): Buffer {
		const b = Buffer.from(msg);
		switch (r() % 6) {
		case 0: // flip bytes anywhere, the header included
			for (let i = r() % 8; i >= 0; i--)
				b[r() % b.length] = r() & 0xff;
			break;
		case 1: { // cut it, len kept honest
			const n = 40 + (r() % Math.max(1, b.length - 40));
			const c = Buffer.from(b.subarray(0, n));
			c.writeUInt32LE(n, 0);
			return c;
		}
		case 2: { // grow it with garbage
			const c = Buffer.concat([b, Buffer.from(Array.from({ length: r() % 300 }, () => r() & 0xff))]);
			c.writeUInt32LE(c.length, 0);
			return c;
		}
		case 3: // another opcode
			b.writeUInt32LE(r() % 60, 4);
			break;
		case 4: // another node
			b.writeBigUInt64LE(BigInt(r() % 8), 16);
			break;
		default: // huge sizes and counts in the arguments
			if (b.length >= 44)
				b.writeUInt32LE(0xffffffff - (r() % 16), 40 + (r() % Math.max(1, Math.min(b.length - 44, 40)) & ~3));
		}
		return b;
	}

	test("20,000 mutated requests: each answered with a reply of its unique or refused; nothing grows", async () => {
		const w = fs.memory({ files: { "/prompt.txt": "x".repeat(5000) }, maxBytes: 1 << 20, maxNodes: 512 });
		const s = new FuseSession(w);
		const r = rng(0x5eed);
		const base = recorded();
		let answered = 0;
		let refused = 0;
		let silent = 0;
		for (let i = 0; i < 20000; i++) {
			const msg = mutate(base[r() % base.length] ?? m.init(), r);
			let out: Buffer | undefined;
			try {
				out = await s.handle(msg);
			} catch (e) {
				// Only a header that does not describe the message.
				assert.ok(e instanceof FuseError, String(e));
				assert.notEqual(msg.readUInt32LE(0), msg.length === 0 ? -1 : msg.length);
				refused++;
				continue;
			}
			if (out === undefined) {
				assert.ok([Op.FORGET, Op.BATCH_FORGET, Op.INTERRUPT].includes(msg.readUInt32LE(4) as never));
				silent++;
				continue;
			}
			const rep = m.reply(out);
			assert.equal(rep.len, out.length);
			assert.equal(rep.unique, msg.readBigUInt64LE(8));
			assert.ok(rep.error <= 0 && rep.error >= -511);
			if (rep.error !== 0)
				assert.equal(out.length, 16);
			// Never more than the guest's room for a read.
			if (rep.error === 0 && (msg.readUInt32LE(4) === Op.READ || msg.readUInt32LE(4) === Op.READDIR))
				assert.ok(rep.body.length <= msg.readUInt32LE(40 + 16));
			answered++;
		}
		assert.ok(answered > 10000 && refused > 100 && silent > 0, `${answered} answered, ${refused} refused, ${silent} silent`);
		assert.ok(s.nodes <= 512 + 1);
		assert.ok(w.bytes <= 1 << 20);
	});

	test("a mutated byte stream: the framer either frames or drops, holding one message at most", () => {
		const r = rng(0xf00d);
		const all = Buffer.concat(recorded());
		for (let run = 0; run < 300; run++) {
			const b = Buffer.from(all);
			for (let i = r() % 6; i >= 0; i--)
				b[r() % b.length] = r() & 0xff;
			const f = new FuseFramer();
			try {
				for (let i = 0, step = 1; i < b.length; i += step) {
					step = 1 + (r() % 97);
					for (const msg of f.push(b.subarray(i, i + step)))
						assert.equal(msg.readUInt32LE(0), msg.length);
					assert.ok(f.buffered <= MAX_MESSAGE + 97);
				}
			} catch (e) {
				assert.match((e as Error).message, /cannot be framed/);
			}
		}
	});
});
