// The control socket's codec and the JSON-RPC client, against a fake
// server on a Unix socket: framing of cut and merged messages, answers
// out of order, notifications, errors as Error subclasses naming the
// method, cancellation.

import assert from "node:assert/strict";
import { mkdtempSync, rmSync } from "node:fs";
import net from "node:net";
import os from "node:os";
import path from "node:path";
import { describe, test } from "./flat.js";
import { LineDecoder, MAX_BODY_BYTES, MessageDecoder, encodeBodyRequest, encodeRequest, parseMessage } from "../src/rpc/codec.js";
import type { Frame } from "../src/rpc/codec.js";
import { RequestDecoder } from "./request-decoder.js";
import type { Decoded } from "./request-decoder.js";
import { RpcConnection } from "../src/rpc/client.js";
import { INLINE_WRITE_BYTES, WRITE_CHUNK, vmFileSystem } from "../src/vmfs.js";
import { AgentUnreachableError, ConnectionClosedError, GuestError, KilnRpcError, LimitError } from "../src/errors.js";

describe("LineDecoder", () => {
	test("one message cut into single bytes", () => {
		const d = new LineDecoder();
		const msg = Buffer.from('{"a":"é"}\n');
		const lines: string[] = [];
		for (const b of msg)
			lines.push(...d.push(Buffer.from([b])));
		assert.deepEqual(lines, ['{"a":"é"}']);
		assert.equal(d.pending, 0);
	});
	test("several messages in one chunk, the last unfinished", () => {
		const d = new LineDecoder();
		assert.deepEqual(d.push(Buffer.from("one\ntwo\nthr")), ["one", "two"]);
		assert.equal(d.pending, 3);
		assert.deepEqual(d.push(Buffer.from("ee\n")), ["three"]);
	});
	test("the caller's buffer may be reused", () => {
		const d = new LineDecoder();
		const buf = Buffer.from("abc");
		d.push(buf);
		buf.fill(0x78);
		assert.deepEqual(d.push(Buffer.from("\n")), ["abc"]);
	});
	test("a line over the limit is refused", () => {
		const d = new LineDecoder(8);
		d.push(Buffer.from("12345"));
		assert.throws(() => d.push(Buffer.from("6789")), /a line over 8 bytes/);
		assert.throws(() => new LineDecoder(4).push(Buffer.from("123456\n")), /a line over 4 bytes/);
	});
});

describe("parseMessage", () => {
	test("results, errors and notifications", () => {
		assert.deepEqual(parseMessage('{"jsonrpc":"2.0","id":3,"result":{}}'), { kind: "result", id: 3, result: {} });
		assert.deepEqual(parseMessage('{"jsonrpc":"2.0","id":4,"error":{"code":-32000,"message":"x","data":{"errno":"ENOENT"}}}'),
			{ kind: "error", id: 4, error: { code: -32000, message: "x", data: { errno: "ENOENT" } } });
		assert.deepEqual(parseMessage('{"jsonrpc":"2.0","method":"stream.exit","params":{"stream":7}}'),
			{ kind: "notification", method: "stream.exit", params: { stream: 7 } });
	});
	test("nanosecond times keep every digit", () => {
		const m = parseMessage('{"jsonrpc":"2.0","id":1,"result":{"mtimeNs":1716800000123456789,"name":"\\"mtimeNs\\":5"}}');
		assert.equal(m.kind, "result");
		const r = (m as { result: { mtimeNs: bigint; name: string } }).result;
		assert.equal(r.mtimeNs, 1716800000123456789n);
		assert.equal(r.name, '"mtimeNs":5');
	});
	test("malformed lines are named", () => {
		assert.throws(() => parseMessage("{nope"), /control socket: not JSON/);
		assert.throws(() => parseMessage('{"id":1,"result":{}}'), /not a JSON-RPC 2.0 message/);
		assert.throws(() => parseMessage('{"jsonrpc":"2.0","id":"x","result":{}}'), /an answer with id "x"/);
		assert.throws(() => parseMessage('{"jsonrpc":"2.0","id":1,"error":{"code":"bad"}}'), /a malformed error/);
		assert.throws(() => parseMessage('{"jsonrpc":"2.0","id":1}'), /neither result nor error/);
	});
	test("requests are one line", () => {
		const line = encodeRequest(5, "exec", { argv: ["echo", "a\nb"] });
		assert.equal(line.indexOf("\n"), line.length - 1);
		assert.deepEqual(JSON.parse(line), { jsonrpc: "2.0", id: 5, method: "exec", params: { argv: ["echo", "a\nb"] } });
	});
});

describe("request bodies (fs.write {stream, size})", () => {
	// Bytes that a line reader would cut or take for a request.
	const tricky = Buffer.concat([Buffer.from('{"jsonrpc":"2.0","id":9,"method":"vm.shutdown"}\n\n'), Buffer.from([0, 0xff, 0x0a, 0x0d])]);
	test("the line says the size, the bytes follow it raw", () => {
		const out = encodeBodyRequest(3, "fs.write", { stream: 7 }, tricky);
		const nl = out.indexOf(0x0a);
		assert.deepEqual(JSON.parse(out.subarray(0, nl).toString()), { jsonrpc: "2.0", id: 3, method: "fs.write", params: { stream: 7, size: tricky.length } });
		assert.ok(out.subarray(nl + 1).equals(tricky));
		assert.equal(out.length, nl + 1 + tricky.length);
		assert.throws(() => encodeBodyRequest(1, "exec", {}, tricky), /exec: takes no body/);
	});
	test("decoded whatever way the stream is cut, the next line at once after a body", () => {
		const all = Buffer.concat([
			encodeBodyRequest(1, "fs.write", { stream: 1 }, tricky),
			encodeBodyRequest(2, "fs.write", { stream: 1 }, Buffer.alloc(0)),
			Buffer.from(encodeRequest(3, "vm.status", { size: 4 })),
			Buffer.from(encodeRequest(4, "fs.close", { stream: 1 })),
		]);
		for (const cut of [1, 5, all.length]) {
			const d = new RequestDecoder();
			const got: Decoded[] = [];
			for (let at = 0; at < all.length; at += cut)
				got.push(...d.push(all.subarray(at, at + cut)));
			assert.deepEqual(got.map((g) => g.req.id), [1, 2, 3, 4]);
			assert.ok(got[0]?.body?.equals(tricky));
			assert.equal(got[1]?.body?.length, 0);
			assert.equal(got[2]?.body, undefined, "size on a method without a body: no body");
		}
	});
	test("callWithBody: bodies in flight together reach the server exact", async () => {
		const srv = await fakeServer((req, send) => send({ jsonrpc: "2.0", id: req.id, result: {} }));
		const c = await RpcConnection.connect(srv.path);
		try {
			const big = Buffer.from(new Uint8Array(MAX_BODY_BYTES).map((_, i) => (i * 31 + (i >> 8)) & 0xff));
			await Promise.all([
				c.callWithBody("fs.write", { stream: 5 }, big),
				c.callWithBody("fs.write", { stream: 5 }, tricky),
				c.call("vm.status"),
			]);
			assert.deepEqual(srv.requests.map((r) => [r.method, r.params["size"]]), [["fs.write", big.length], ["fs.write", tricky.length], ["vm.status", undefined]]);
			assert.ok(srv.requests[0]?.body?.equals(big));
			assert.ok(srv.requests[1]?.body?.equals(tricky));
		} finally {
			c.close();
			srv.close();
		}
	});
	test("vm.fs.writeFile: small inline, large as raw bodies, in order", async () => {
		const srv = await fakeServer((req, send) => send({ jsonrpc: "2.0", id: req.id, result: req.method === "fs.writeFile" && req.params["stream"] === true ? { stream: 3 } : {} }));
		const c = await RpcConnection.connect(srv.path);
		try {
			const fs = vmFileSystem(() => c);
			await fs.writeFile("/small", "hi");
			const big = Buffer.from(new Uint8Array(2 * WRITE_CHUNK + 5).map((_, i) => (i * 7 + (i >> 9)) & 0xff));
			await fs.writeFile("/big", big, { mode: 0o600 });
			assert.deepEqual(srv.requests.map((r) => r.method), ["fs.writeFile", "fs.writeFile", "fs.write", "fs.write", "fs.write", "fs.close"]);
			assert.equal(srv.requests[0]?.params["data"], Buffer.from("hi").toString("base64"));
			const writes = srv.requests.filter((r) => r.method === "fs.write");
			assert.ok(writes.every((w) => w.params["data"] === undefined && w.params["stream"] === 3 && w.params["size"] === w.body?.length));
			assert.deepEqual(writes.map((w) => w.body?.length), [WRITE_CHUNK, WRITE_CHUNK, 5]);
			assert.ok(Buffer.concat(writes.map((w) => w.body ?? Buffer.alloc(0))).equals(big));
			assert.ok(big.length > INLINE_WRITE_BYTES);
		} finally {
			c.close();
			srv.close();
		}
	});
	test("a body over the limit is refused before sending", async () => {
		const srv = await fakeServer(() => undefined);
		const c = await RpcConnection.connect(srv.path);
		try {
			await assert.rejects(c.callWithBody("fs.write", { stream: 1 }, Buffer.alloc(MAX_BODY_BYTES + 1)),
				/fs.write: a body of 1048577 bytes is over the control socket's 1048576-byte limit/);
			await assert.rejects(c.callWithBody("exec", {}, Buffer.alloc(1)), /exec: takes no body/);
			assert.equal(srv.requests.length, 0);
		} finally {
			c.close();
			srv.close();
		}
	});
});

/** An fs.chunk notification with a raw body (fs.readFile raw): line, bytes. */
function rawChunk(id: number, offset: number, body: Buffer): Buffer {
	const line = JSON.stringify({ jsonrpc: "2.0", method: "fs.chunk", params: { id, offset, size: body.length } }) + "\n";
	return Buffer.concat([Buffer.from(line), body]);
}

describe("notification bodies (fs.chunk {id, offset, size})", () => {
	const lineLike = Buffer.from('{"jsonrpc":"2.0","id":9,"result":{"size":1}}\n');
	const answer = Buffer.from('{"jsonrpc":"2.0","id":9,"result":{"size":2}}\n');
	const decodeAll = (pieces: Buffer[]): Frame[] => {
		const d = new MessageDecoder();
		const out: Frame[] = [];
		for (const p of pieces)
			d.push(p, (f) => out.push(f));
		assert.equal(d.cutShort(), undefined);
		return out;
	};
	test("a chunk split across reads, at every byte", () => {
		const body = Buffer.from(Array.from({ length: 300 }, (_v, i) => (i * 31) & 0xff));
		const wire = Buffer.concat([rawChunk(9, 0, body), answer]);
		for (let cut = 1; cut < wire.length; cut++) {
			const f = decodeAll([wire.subarray(0, cut), wire.subarray(cut)]);
			assert.equal(f.length, 2, `cut at ${cut}`);
			assert.deepEqual(f[0]?.body, body);
			assert.deepEqual(f[1]?.msg, { kind: "result", id: 9, result: { size: 2 } });
		}
		const bytes = decodeAll([...wire].map((b) => Buffer.from([b])));
		assert.deepEqual(bytes.map((f) => f.body), [body, undefined]);
	});
	test("a chunk followed at once by the next line, and one that looks like a JSON line", () => {
		const wire = Buffer.concat([rawChunk(9, 0, lineLike), rawChunk(9, lineLike.length, Buffer.alloc(0)), rawChunk(9, lineLike.length, Buffer.from("\n\n")), answer]);
		const f = decodeAll([wire]);
		assert.equal(f.length, 4);
		assert.deepEqual(f[0]?.body, lineLike);
		assert.deepEqual(f[1]?.body, Buffer.alloc(0));
		assert.deepEqual(f[2]?.body, Buffer.from("\n\n"));
		assert.equal(f[3]?.msg.kind, "result");
		assert.equal(f[3]?.body, undefined);
	});
	test("the caller's buffer may be reused; base64 chunks and other size keys have no body", () => {
		const d = new MessageDecoder();
		const out: Frame[] = [];
		const buf = rawChunk(1, 0, Buffer.from("abc"));
		d.push(buf.subarray(0, buf.length - 1), (f) => out.push(f));
		buf.fill(0x78);
		d.push(Buffer.from("c"), (f) => out.push(f));
		assert.deepEqual(out[0]?.body, Buffer.from("abc"));
		d.push(Buffer.from('{"jsonrpc":"2.0","method":"fs.chunk","params":{"id":1,"offset":0,"data":"YQ=="}}\n{"jsonrpc":"2.0","id":1,"result":{"size":1}}\n'), (f) => out.push(f));
		assert.equal(out.length, 3);
		assert.equal(out[1]?.body, undefined);
		assert.throws(() => new MessageDecoder().push(Buffer.from('{"jsonrpc":"2.0","method":"fs.chunk","params":{"id":1,"size":-1}}\n'), () => undefined),
			/fs.chunk size -1: expected 0 to/);
	});
	test("a connection cut mid-chunk says so, naming the stream", () => {
		const d = new MessageDecoder();
		const wire = rawChunk(7, 65536, Buffer.alloc(100, 1));
		const out: Frame[] = [];
		d.push(wire.subarray(0, wire.length - 40), (f) => out.push(f));
		assert.equal(out.length, 0);
		assert.equal(d.cutShort(), "the connection ended 60 bytes into a fs.chunk of 100 (stream of request 7)");
	});
	test("vm.fs.readFile asks for raw and gets the bytes exactly; a cut fails it naming the stream", async () => {
		const file = Buffer.from(Array.from({ length: 200003 }, (_v, i) => (i * 7 + (i >> 8)) & 0xff));
		lineLike.copy(file, 65536);
		const srv = await fakeServer((req, _send, sock) => {
			const parts: Buffer[] = [];
			for (let at = 0; at < file.length; at += 65536)
				parts.push(rawChunk(req.id, at, file.subarray(at, at + 65536)));
			const wire = Buffer.concat(parts);
			if (req.params["path"] === "/cut") {
				sock.end(wire.subarray(0, 70000));
				return;
			}
			// Cut at odd places, the answer merged with the last chunk.
			const all = Buffer.concat([wire, Buffer.from(JSON.stringify({ jsonrpc: "2.0", id: req.id, result: { size: file.length } }) + "\n")]);
			for (let at = 0; at < all.length; at += 40009)
				sock.write(all.subarray(at, at + 40009));
		});
		const c = await RpcConnection.connect(srv.path);
		try {
			const fs = vmFileSystem(() => c);
			const got = await fs.readFile("/f");
			assert.deepEqual(Buffer.from(got), file);
			assert.deepEqual(srv.requests[0]?.params, { path: "/f", stream: true, raw: true });
			await assert.rejects(fs.readFile("/cut"), (e: Error) => {
				assert.ok(e instanceof ConnectionClosedError, e.message);
				assert.match(e.message, /the connection ended \d+ bytes into a fs.chunk of 65536 \(stream of request 2\)/);
				return true;
			});
		} finally {
			c.close();
			srv.close();
		}
	});
});

type Handler = (req: { id: number; method: string; params: Record<string, unknown> }, send: (o: unknown) => void, sock: net.Socket) => void;

async function fakeServer(handler: Handler): Promise<{ path: string; close: () => void; requests: { method: string; params: Record<string, unknown>; body?: Buffer }[] }> {
	const dir = mkdtempSync(path.join(os.tmpdir(), "kiln-sdk-rpc-"));
	const p = path.join(dir, "s.sock");
	const requests: { method: string; params: Record<string, unknown>; body?: Buffer }[] = [];
	const sockets: net.Socket[] = [];
	const server = net.createServer((sock) => {
		sockets.push(sock);
		const d = new RequestDecoder();
		sock.on("data", (c) => {
			for (const { req: r, body } of d.push(c)) {
				const req = { id: r.id, method: r.method, params: r.params ?? {} };
				requests.push({ method: req.method, params: req.params, ...(body ? { body } : {}) });
				handler(req, (o) => sock.write(JSON.stringify(o) + "\n"), sock);
			}
		});
		sock.on("error", () => undefined);
	});
	await new Promise<void>((r) => server.listen(p, r));
	return {
		path: p, requests,
		close: () => {
			for (const s of sockets)
				s.destroy();
			server.close();
			rmSync(dir, { recursive: true, force: true });
		},
	};
}

describe("RpcConnection", () => {
	test("answers matched by id whatever their order, in bytes cut anywhere", async () => {
		const held: { id: number; method: string }[] = [];
		const srv = await fakeServer((req, _send, sock) => {
			held.push(req);
			if (held.length < 3)
				return;
			// Reverse order, one message split over writes, two merged.
			const text = held.reverse().map((r) => JSON.stringify({ jsonrpc: "2.0", id: r.id, result: { m: r.method } }) + "\n").join("");
			sock.write(text.slice(0, 7));
			setTimeout(() => sock.write(text.slice(7)), 10);
		});
		const c = await RpcConnection.connect(srv.path);
		try {
			const r = await Promise.all([c.call("a"), c.call("b"), c.call("c")]);
			assert.deepEqual(r, [{ m: "a" }, { m: "b" }, { m: "c" }]);
		} finally {
			c.close();
			srv.close();
		}
	});
	test("notifications reach their handlers", async () => {
		const srv = await fakeServer((req, send) => {
			send({ jsonrpc: "2.0", method: "stream.stdout", params: { stream: 1, data: "aGk=" } });
			send({ jsonrpc: "2.0", id: req.id, result: {} });
		});
		const c = await RpcConnection.connect(srv.path);
		try {
			const got: unknown[] = [];
			const off = c.on("stream.stdout", (p) => got.push(p));
			await c.call("x");
			off();
			await c.call("y");
			assert.deepEqual(got, [{ stream: 1, data: "aGk=" }]);
		} finally {
			c.close();
			srv.close();
		}
	});
	test("errors become subclasses naming the method", async () => {
		const codes: Record<string, [number, unknown]> = {
			"fs.stat": [-32000, { errno: "ENOENT", errnoValue: 2 }],
			exec: [-32003, undefined],
			"fs.readDir": [-32004, { limit: 16777216 }],
			bogus: [-32601, undefined],
		};
		const srv = await fakeServer((req, send) => {
			const [code, data] = codes[req.method] ?? [-32603, undefined];
			send({ jsonrpc: "2.0", id: req.id, error: { code, message: "No such file or directory", ...(data ? { data } : {}) } });
		});
		const c = await RpcConnection.connect(srv.path);
		try {
			await assert.rejects(c.call("fs.stat", { path: "/nope" }), (e: Error) => {
				assert.ok(e instanceof GuestError);
				assert.equal(e.code, "ENOENT");
				assert.equal(e.errno, 2);
				assert.equal(e.method, "fs.stat");
				assert.equal(e.message, "fs.stat: No such file or directory");
				return true;
			});
			await assert.rejects(c.call("exec"), AgentUnreachableError);
			await assert.rejects(c.call("fs.readDir"), (e: Error) => e instanceof LimitError && (e.data as { limit: number }).limit === 16777216);
			await assert.rejects(c.call("bogus"), (e: Error) => e instanceof KilnRpcError && e.rpcCode === -32601 && e.message.startsWith("bogus: "));
		} finally {
			c.close();
			srv.close();
		}
	});
	test("an abort sends cancel {id} and rejects with an AbortError", async () => {
		let pendingId = -1;
		const srv = await fakeServer((req, send) => {
			if (req.method === "exec") {
				pendingId = req.id;
				return;
			}
			if (req.method === "cancel") {
				send({ jsonrpc: "2.0", id: pendingId, error: { code: -32002, message: "cancelled" } });
				send({ jsonrpc: "2.0", id: req.id, result: { cancelled: req.params["id"] === pendingId } });
			}
		});
		const c = await RpcConnection.connect(srv.path);
		try {
			const ac = new AbortController();
			const p = c.call("exec", { argv: ["sleep", "60"] }, { signal: ac.signal });
			await new Promise((r) => setTimeout(r, 20));
			ac.abort();
			await assert.rejects(p, { name: "AbortError" });
			await new Promise((r) => setTimeout(r, 20));
			assert.deepEqual(srv.requests.map((r) => r.method), ["exec", "cancel"]);
			assert.equal(srv.requests[1]?.params["id"], pendingId);
			// Aborted before the call: nothing is sent.
			await assert.rejects(c.call("exec", {}, { signal: AbortSignal.abort() }), { name: "AbortError" });
			assert.equal(srv.requests.length, 2);
		} finally {
			c.close();
			srv.close();
		}
	});
	test("a closed connection fails what is pending, naming the method", async () => {
		const srv = await fakeServer((_req, _send, sock) => sock.destroy());
		const c = await RpcConnection.connect(srv.path);
		try {
			await assert.rejects(c.call("vm.facts"), (e: Error) =>
				e instanceof ConnectionClosedError && e.method === "vm.facts" && /vm.facts: the control connection closed/.test(e.message));
			await c.closed;
			await assert.rejects(c.call("exec"), ConnectionClosedError);
		} finally {
			srv.close();
		}
	});
	test("a server that sends garbage ends the connection with why", async () => {
		const srv = await fakeServer((_req, _send, sock) => sock.write("not json\n"));
		const c = await RpcConnection.connect(srv.path);
		try {
			await assert.rejects(c.call("x"), /x: the control connection closed before the answer \(control socket: not JSON/);
		} finally {
			srv.close();
		}
	});
	test("a request over the 1 MiB line limit is refused before sending", async () => {
		const srv = await fakeServer(() => undefined);
		const c = await RpcConnection.connect(srv.path);
		try {
			await assert.rejects(c.call("fs.writeFile", { data: "x".repeat(1024 * 1024) }), /fs.writeFile: the request is over/);
			assert.equal(srv.requests.length, 0);
		} finally {
			c.close();
			srv.close();
		}
	});
});
