// network.policy's callback as the VM's hook: each kind of question
// (flow, DNS, HTTP request) answered as Documentation/network.md says,
// default deny, throws and deadlines; then the socket, with a fake vmm
// speaking the hook protocol, malformed and hostile lines included.

import assert from "node:assert/strict";
import { mkdtempSync, rmSync } from "node:fs";
import net from "node:net";
import os from "node:os";
import path from "node:path";
import { describe, test } from "node:test";
import { HookServer, MAX_LINE, MAX_PENDING } from "../src/network/hook.js";
import { MAX_FLOWS, PolicyDecider } from "../src/network/policy.js";
import type { OnConnectionRequest, SandboxHttpRequest } from "../src/network/policy.js";
import { network } from "../src/index.js";

const flow = (id: number, dst: string, hostnames: string[] = [], proto = "tcp") =>
	({ id, proto, src: "10.0.2.15:40000", dst, class: "documentation", hostnames });
const dns = (id: number, name: string) =>
	({ id, type: "dns", proto: "udp", src: "10.0.2.15:5353", dst: "10.0.2.2:53", name, qtype: "A" });
const request = (id: number, flowId: number, extra: Record<string, unknown> = {}) => ({
	id, type: "http", proto: "tcp", src: "10.0.2.15:40000", dst: "192.0.2.10:443", flow: flowId,
	host: "api.example.com", method: "GET", url: "https://api.example.com/user?x=1", protocol: "HTTP/1.1",
	headers: [["Host", "api.example.com"], ["User-Agent", "curl/7.88.1"], ["X-Latin", "caf\u00e9 \u00ff"]],
	omitted: ["Authorization"], truncated: false,
	tls: { sni: "api.example.com", alpn: "http/1.1" },
	destination: { src: { ip: "10.0.2.15", port: 40000 }, dst: { ip: "192.0.2.10", port: 443 }, hostname: "api.example.com" },
	...extra,
});

const decider = (cb: OnConnectionRequest, ms = 200) => new PolicyDecider(cb, ms);

describe("policy callback -> hook answers", () => {
	test("default deny: a callback that grants nothing", async () => {
		const d = decider(() => undefined);
		assert.deepEqual(await d.answer(flow(1, "192.0.2.10:80")), { id: 1, verdict: "deny", reason: "no grant" });
		assert.deepEqual(await d.answer(dns(2, "example.com")), { id: 2, verdict: "deny", reason: "no grant" });
	});

	test("conn.accept() and the address predicates", async () => {
		const seen: string[] = [];
		const d = decider((conn) => {
			seen.push(`${conn.type} ${conn.src.ip}:${conn.src.port} -> ${conn.dst.ip}:${conn.dst.port} doc=${conn.dst.isDocumentation()} priv=${conn.src.isPrivate()}`);
			if (conn.dst.isDocumentation())
				conn.accept();
		});
		assert.deepEqual(await d.answer(flow(1, "192.0.2.10:80")), { id: 1, verdict: "grant" });
		assert.equal((await d.answer(flow(2, "8.8.8.8:53", [], "udp"))).verdict, "deny");
		assert.deepEqual(seen, [
			"tcp 10.0.2.15:40000 -> 192.0.2.10:80 doc=true priv=true",
			"udp 10.0.2.15:40000 -> 8.8.8.8:53 doc=false priv=true",
		]);
	});

	test("matchTcp and matchUdp: a string, an object, a predicate; the protocol kept apart", async () => {
		const d = decider((conn) => {
			if (conn.matchTcp("203.0.113.10:5432")?.accept())
				return;
			if (conn.matchUdp({ ip: "203.0.113.10", port: 8125 })?.accept())
				return;
			conn.matchTcp((dst) => dst.port === 8443 && dst.isDocumentation())?.accept();
		});
		assert.equal((await d.answer(flow(1, "203.0.113.10:5432"))).verdict, "grant");
		assert.equal((await d.answer(flow(2, "203.0.113.10:5432", [], "udp"))).verdict, "deny");
		assert.equal((await d.answer(flow(3, "203.0.113.10:8125", [], "udp"))).verdict, "grant");
		assert.equal((await d.answer(flow(4, "203.0.113.10:8125"))).verdict, "deny");
		assert.equal((await d.answer(flow(5, "198.51.100.1:8443"))).verdict, "grant");
		assert.equal((await d.answer(flow(6, "1.1.1.1:8443"))).verdict, "deny");
		assert.equal((await d.answer(flow(7, "203.0.113.11:5432"))).verdict, "deny");
	});

	test("a bad matcher is the callback's throw: deny", async () => {
		const d = decider((conn) => {
			conn.matchTcp("not an endpoint")?.accept();
		});
		assert.deepEqual(await d.answer(flow(1, "203.0.113.10:5432")), { id: 1, verdict: "deny", reason: "policy threw" });
	});

	test("matchDns: grant-dns with the resolvers; not on a flow; conn.accept() on a DNS question is a deny", async () => {
		const d = decider((conn) => {
			if (conn.matchDns()?.accept({ resolvers: ["1.1.1.1", "192.0.2.53:5353"] }))
				return;
		});
		assert.deepEqual(await d.answer(dns(1, "Example.COM")),
			{ id: 1, verdict: "grant-dns", resolvers: ["1.1.1.1", "192.0.2.53:5353"] });
		assert.equal((await d.answer(flow(2, "1.1.1.1:53", [], "udp"))).verdict, "deny");
		const names: string[] = [];
		const e = decider((conn) => {
			names.push(conn.matchDns()?.name ?? "");
			conn.accept();
		});
		assert.deepEqual(await e.answer(dns(3, "Api.Example.com")), { id: 3, verdict: "deny", reason: "policy threw" });
		assert.deepEqual(names, ["api.example.com"]);
		const bad = decider((conn) => {
			conn.matchDns()?.accept({ resolvers: ["resolver.example"] });
		});
		assert.equal((await bad.answer(dns(4, "x.example"))).verdict, "deny");
	});

	test("matchHttp: trusted hostnames only, by name or predicate; accept gives grant-http", async () => {
		const d = decider((conn) => {
			if (conn.matchDns()?.accept({ resolvers: ["192.0.2.53"] }))
				return;
			const api = conn.matchHttp("API.example.com.");
			if (api) {
				assert.equal(api.hostname, "api.example.com");
				api.accept(() => undefined);
				return;
			}
			conn.matchHttp((c) => c.hostname.endsWith(".example.org"))?.accept();
		});
		assert.deepEqual(await d.answer(flow(1, "192.0.2.10:443", ["api.example.com"])),
			{ id: 1, verdict: "grant-http", tls: "auto", ask: "request", host: "api.example.com" });
		assert.deepEqual(await d.answer(flow(2, "192.0.2.11:80", ["a.b.example.org"])),
			{ id: 2, verdict: "grant-http", tls: "auto", ask: "connection", host: "a.b.example.org" });
		// No trusted name: whatever Host the guest will send, no match.
		assert.equal((await d.answer(flow(3, "192.0.2.10:443", []))).verdict, "deny");
		assert.equal((await d.answer(flow(4, "192.0.2.10:443", ["evil.example.net"]))).verdict, "deny");
		// Not over UDP.
		assert.equal((await d.answer(flow(5, "192.0.2.10:443", ["api.example.com"], "udp"))).verdict, "deny");
	});

	test("a callback that throws, rejects or never settles is a deny; the first grant wins", async () => {
		assert.deepEqual(await decider(() => {
			throw new Error("boom");
		}).answer(flow(1, "192.0.2.10:80")), { id: 1, verdict: "deny", reason: "policy threw" });
		assert.deepEqual(await decider(async (conn) => {
			conn.accept();
			throw new Error("late");
		}).answer(flow(2, "192.0.2.10:80")), { id: 2, verdict: "deny", reason: "policy threw" });
		assert.deepEqual(await decider(async (conn) => {
			conn.accept();
			await new Promise(() => undefined);
		}, 50).answer(flow(3, "192.0.2.10:80")), { id: 3, verdict: "deny", reason: "policy timeout" });
		let second: boolean | undefined;
		assert.equal((await decider((conn) => {
			conn.matchTcp("192.0.2.10:80")?.accept();
			second = conn.matchHttp("x.example")?.accept();
		}).answer(flow(4, "192.0.2.10:80", ["x.example"]))).verdict, "grant");
		assert.equal(second, false);
	});

	test("requests go to their flow's middleware; header edits become set and remove", async () => {
		const got: SandboxHttpRequest[] = [];
		const d = decider(async (conn) => {
			conn.matchHttp("api.example.com")?.accept(async (req) => {
				got.push(req);
				req.headers.set("authorization", `Bearer t-${req.url.searchParams.get("x")}`);
				req.headers.delete("user-agent");
				req.headers.set("x-latin", req.headers.get("x-latin") ?? "");
			});
		});
		assert.equal((await d.answer(flow(7, "192.0.2.10:443", ["api.example.com"]))).verdict, "grant-http");
		assert.deepEqual(await d.answer(request(9, 7)),
			{ id: 9, verdict: "grant-http", set: { authorization: "Bearer t-1" }, remove: ["user-agent"] });
		const r = got[0];
		assert.ok(r);
		assert.equal(r.protocol, "http/1.1");
		assert.equal(r.method, "GET");
		assert.equal(r.url.href, "https://api.example.com/user?x=1");
		assert.deepEqual(r.destination, {
			sourceIp: "10.0.2.15", sourcePort: 40000, originalIp: "192.0.2.10", originalPort: 443, hostname: "api.example.com",
		});
		assert.deepEqual(r.tls, { sni: "api.example.com", alpn: "http/1.1" });
		// Non-ASCII bytes come as one ISO 8859-1 character each, intact.
		assert.equal(r.headers.get("X-Latin"), "caf\u00e9 \u00ff");
		// The guest's withheld credentials read as absent.
		assert.equal(r.headers.get("authorization"), "Bearer t-1");
		// An h2 request.
		assert.equal((await d.answer(request(10, 7, { protocol: "h2", tls: { sni: "api.example.com", alpn: "h2" } }))).verdict, "grant-http");
		assert.equal(got[1]?.protocol, "h2");
		assert.equal(got[1]?.tls?.alpn, "h2");
	});

	test("a request of an unknown flow, of no flow, or malformed is denied", async () => {
		const d = decider((conn) => {
			conn.matchHttp("api.example.com")?.accept(() => undefined);
		});
		assert.deepEqual(await d.answer(request(1, 99)), { id: 1, verdict: "deny", reason: "unknown flow" });
		const noFlow = request(2, 1) as Record<string, unknown>;
		delete noFlow["flow"];
		noFlow["grant"] = 0;
		assert.equal((await d.answer(noFlow as { id: number })).reason, "request of no hook flow");
		await d.answer(flow(5, "192.0.2.10:443", ["api.example.com"]));
		for (const bad of [{ headers: "x" }, { headers: [["a"]] }, { method: 7 }, { url: "not a url" }, { protocol: "SPDY" },
			{ destination: { src: "x" } }]) {
			const a = await d.answer(request(3, 5, bad));
			assert.equal(a.verdict, "deny", JSON.stringify(bad));
		}
	});

	test("middleware that throws, hangs, or edits what frames the request is a deny", async () => {
		let mode = "";
		const d = decider((conn) => {
			conn.matchHttp("api.example.com")?.accept(async (req) => {
				if (mode === "throw")
					throw new Error("no token");
				if (mode === "hang")
					await new Promise(() => undefined);
				if (mode === "host")
					req.headers.set("Host", "evil.example");
				if (mode === "ctl")
					req.headers.set("x-a", "a\r\nInjected: 1");
				if (mode === "many")
					for (let i = 0; i < 17; i++)
						req.headers.set(`x-${i}`, "v");
				if (mode === "wide")
					req.headers.set("x-a", "\u0100");
			});
		}, 50);
		await d.answer(flow(1, "192.0.2.10:443", ["api.example.com"]));
		for (const m of ["throw", "hang", "host", "ctl", "many", "wide"]) {
			mode = m;
			assert.equal((await d.answer(request(2, 1))).verdict, "deny", m);
		}
		mode = "";
		assert.deepEqual(await d.answer(request(3, 1)), { id: 3, verdict: "grant-http" });
	});

	test("the middleware of at most MAX_FLOWS flows is kept; a connection in use stays", async () => {
		const d = decider((conn) => {
			conn.matchHttp("api.example.com")?.accept(() => undefined);
		});
		for (let i = 1; i <= MAX_FLOWS + 10; i++) {
			await d.answer(flow(i, "192.0.2.10:443", ["api.example.com"]));
			if (i % 1000 === 0)
				await d.answer(request(1_000_000 + i, 1)); // flow 1 in use
		}
		assert.equal(d.flows, MAX_FLOWS);
		assert.equal((await d.answer(request(1, 1))).verdict, "grant-http");
		assert.equal((await d.answer(request(2, 2))).reason, "unknown flow");
	});

	test("network.policy validates its options", () => {
		assert.throws(() => network.policy("x" as never), /must be a function/);
		assert.throws(() => network.policy(() => undefined, { timeoutMs: 20000 }), /timeoutMs: must be from 1 to 9500/);
		assert.throws(() => network.policy(() => undefined, { nope: 1 } as never), /unknown option "nope"/);
		assert.equal(network.policy(() => undefined).timeoutMs, 5000);
	});
});

/** A fake vmm's hook connection: lines out, answers in. */
async function connect(sock: string): Promise<{ s: net.Socket; answers: Record<string, unknown>[]; closed: Promise<void> }> {
	const s = net.connect(sock);
	await new Promise<void>((resolve, reject) => s.once("connect", resolve).once("error", reject));
	const answers: Record<string, unknown>[] = [];
	let buf = "";
	s.setEncoding("utf8");
	s.on("data", (c: string) => {
		buf += c;
		let nl;
		while ((nl = buf.indexOf("\n")) >= 0) {
			answers.push(JSON.parse(buf.slice(0, nl)) as Record<string, unknown>);
			buf = buf.slice(nl + 1);
		}
	});
	s.on("error", () => undefined);
	const closed = new Promise<void>((resolve) => s.once("close", () => resolve()));
	return { s, answers, closed };
}

async function until(cond: () => boolean, what: string): Promise<void> {
	for (let i = 0; i < 500 && !cond(); i++)
		await new Promise((r) => setTimeout(r, 10));
	assert.ok(cond(), what);
}

describe("the hook socket", () => {
	test("answers questions in any order; malformed lines are skipped, not fatal", async () => {
		const dir = mkdtempSync(path.join(os.tmpdir(), "kiln-hook-"));
		const h = new HookServer(async (conn) => {
			if (conn.dst.port === 1)
				await new Promise((r) => setTimeout(r, 100));
			conn.accept();
		}, 1000);
		try {
			await h.listen(path.join(dir, "hook.sock"));
			const c = await connect(path.join(dir, "hook.sock"));
			c.s.write(JSON.stringify(flow(1, "192.0.2.10:1")) + "\n");
			c.s.write("not json\n\n[1,2]\n{\"id\": -4}\n{\"id\": \"7\"}\n\"str\"\n{\"id\": 3.5}\n");
			c.s.write(JSON.stringify(flow(2, "192.0.2.10:2")) + "\n");
			c.s.write(JSON.stringify({ id: 3, type: "smtp" }) + "\n");
			c.s.write(JSON.stringify({ id: 4, proto: "sctp", src: "1.2.3.4:1", dst: "1.2.3.4:2" }) + "\n");
			await until(() => c.answers.length === 4, "four answers");
			// The slow one last: answers go as they are decided.
			assert.deepEqual(c.answers.map((a) => a["id"]).slice(-1), [1]);
			assert.equal(c.answers.find((a) => a["id"] === 1)?.["verdict"], "grant");
			assert.equal(c.answers.find((a) => a["id"] === 2)?.["verdict"], "grant");
			assert.equal(c.answers.find((a) => a["id"] === 3)?.["reason"], "question type unknown");
			assert.equal(h.stats.malformed, 7);
			c.s.destroy();
		} finally {
			await h.close();
			rmSync(dir, { recursive: true, force: true });
		}
	});

	test("a line past MAX_LINE without a newline drops the connection; the next one is served", async () => {
		const dir = mkdtempSync(path.join(os.tmpdir(), "kiln-hook-"));
		const h = new HookServer((conn) => conn.accept(), 1000);
		try {
			await h.listen(path.join(dir, "hook.sock"));
			const c = await connect(path.join(dir, "hook.sock"));
			const chunk = "x".repeat(16 * 1024);
			for (let i = 0; i < (MAX_LINE / chunk.length) + 4 && !c.s.destroyed; i++)
				c.s.write(chunk);
			await c.closed;
			assert.equal(h.stats.dropped, 1);
			const d = await connect(path.join(dir, "hook.sock"));
			d.s.write(JSON.stringify(flow(5, "192.0.2.10:80")) + "\n");
			await until(() => d.answers.length === 1, "served again");
			assert.equal(d.answers[0]?.["verdict"], "grant");
			d.s.destroy();
		} finally {
			await h.close();
			rmSync(dir, { recursive: true, force: true });
		}
	});

	test("past MAX_PENDING questions at once, the rest are denied busy at once", async () => {
		const dir = mkdtempSync(path.join(os.tmpdir(), "kiln-hook-"));
		let release!: () => void;
		const gate = new Promise<void>((r) => {
			release = r;
		});
		const h = new HookServer(async (conn) => {
			await gate;
			conn.accept();
		}, 5000);
		try {
			await h.listen(path.join(dir, "hook.sock"));
			const c = await connect(path.join(dir, "hook.sock"));
			let lines = "";
			for (let i = 1; i <= MAX_PENDING + 20; i++)
				lines += JSON.stringify(flow(i, "192.0.2.10:80")) + "\n";
			c.s.write(lines);
			await until(() => c.answers.length === 20, "twenty busy answers");
			assert.ok(c.answers.every((a) => a["verdict"] === "deny" && a["reason"] === "hook busy"));
			release();
			await until(() => c.answers.length === MAX_PENDING + 20, "all answered");
			assert.equal(c.answers.filter((a) => a["verdict"] === "grant").length, MAX_PENDING);
			c.s.destroy();
		} finally {
			await h.close();
			rmSync(dir, { recursive: true, force: true });
		}
	});
});
