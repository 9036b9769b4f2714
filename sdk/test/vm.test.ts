// Boot, processes, vm.fs, facts and close against a fake vmm (no KVM):
// what the SDK sends and how it reads the answers.

import assert from "node:assert/strict";
import { existsSync, readFileSync } from "node:fs";
import { describe, test } from "./flat.js";
import path from "node:path";
import { GuestError, PinMismatchError, VmmError, defineSandbox, fs, network, rootfs } from "../src/index.js";
import type { SandboxVm } from "../src/index.js";
import { fakeKiln } from "./kiln-fixture.js";
import type { FakeKiln } from "./kiln-fixture.js";

async function withVm(body: (vm: SandboxVm, k: FakeKiln) => Promise<void>, boot: Parameters<ReturnType<typeof defineSandbox>["boot"]>[0] = {}): Promise<void> {
	const k = fakeKiln();
	try {
		const sandbox = defineSandbox({ rootfs: k.image, kiln: { vmm: k.vmm, kernel: k.kernel, initrd: k.initrd } });
		await using vm = await sandbox.boot(boot);
		await body(vm, k);
	} finally {
		k.remove();
	}
}

const text = (b: Uint8Array): string => new TextDecoder().decode(b);

describe("sandbox", () => {
	test("environmentFacts() runs vmm facts with the image's facts beside its descriptor", () => {
		const k = fakeKiln();
		try {
			const s = defineSandbox({ rootfs: rootfs.ephemeral({ base: k.image }), kiln: { vmm: k.vmm, kernel: k.kernel, initrd: k.initrd } });
			const facts = s.environmentFacts();
			assert.deepEqual(facts.map((f) => `${f.source} ${f.topic} ${f.relation} ${f.value}`), [
				`config kernel-path is ${k.kernel}`,
				"config hostname is sandbox",
				"config rootfs-write-mode is ephemeral",
				"config os distribution testix",
			]);
		} finally {
			k.remove();
		}
	});
	test("boot writes the vmm's configuration; close shuts down and cleans up", async () => {
		let socket = "";
		await withVm(async (vm) => {
			socket = vm.controlSocket;
			const config = JSON.parse(readFileSync(socket.replace(/control\.sock$/, "vm.json"), "utf8")) as Record<string, unknown>;
			assert.deepEqual(config["mounts"], {
				"/workspace": { bind: { source: "/srv/p", access: "rw", mask: { paths: ["/node_modules"], storage: { source: "/srv/s" } } } },
			});
			assert.equal(config["hostname"], "agent-42");
			assert.equal(config["cwd"], "/workspace");
			assert.equal(config["dieWithParent"], true, "the VM goes with this process");
			assert.equal(config["net"], undefined, "no network.policy: no network device");
			assert.deepEqual(config["rootfs"], { image: socket.replace(/control\.sock$/, "image.json"), mode: "readonly" });
			const descriptor = JSON.parse(readFileSync(socket.replace(/control\.sock$/, "image.json"), "utf8")) as Record<string, unknown>;
			assert.equal(descriptor["architecture"], "x86_64");
			assert.equal(descriptor["sizeBytes"], 4096);
			assert.deepEqual(descriptor["facts"], [{ source: "config", topic: "os", relation: "distribution", value: "testix" }], "the image's facts ride in its descriptor");
			const facts = await vm.environmentFacts();
			assert.ok(facts.some((f) => f.source === "guest"));
		}, {
			hostname: "agent-42",
			cwd: "/workspace",
			mounts: {
				"/workspace": fs.bind({
					source: "/srv/p", access: "rw",
					mask: { paths: ["/node_modules"], storage: fs.bind({ source: "/srv/s", access: "rw" }) },
				}),
			},
		});
		assert.ok(socket && !existsSync(socket.replace(/control\.sock$/, "")), "the runtime directory is removed");
		// Nothing of the VM keeps this process alive once it is closed
		// (a pending shutdown timer once held it 40 s).
		assert.deepEqual(process.getActiveResourcesInfo().filter((r) => r === "Timeout"), []);
	});
	test("network.policy and fs.virtual are served from this process while the VM runs", async () => {
		const k = fakeKiln();
		const workspace = fs.memory({ files: { "/task.txt": "Summarize the current user\n" } });
		process.env["FAKE_VMM_HOOK"] = JSON.stringify([
			{ id: 1, type: "dns", proto: "udp", src: "10.0.2.15:5353", dst: "10.0.2.2:53", name: "api.example.com", qtype: "A" },
			{ id: 2, proto: "tcp", src: "10.0.2.15:40000", dst: "192.0.2.10:443", class: "documentation", hostnames: ["api.example.com"] },
			{ id: 3, type: "http", proto: "tcp", src: "10.0.2.15:40000", dst: "192.0.2.10:443", flow: 2, host: "api.example.com",
				method: "GET", url: "https://api.example.com/user", protocol: "HTTP/1.1", headers: [["Host", "api.example.com"]],
				omitted: [], truncated: false, tls: { sni: "api.example.com", alpn: "http/1.1" } },
			{ id: 4, proto: "tcp", src: "10.0.2.15:40001", dst: "192.0.2.11:443", class: "documentation", hostnames: ["other.example.com"] },
		]);
		try {
			const sandbox = defineSandbox({
				rootfs: k.image,
				kiln: { vmm: k.vmm, kernel: k.kernel, initrd: k.initrd },
				network: network.policy(async (conn) => {
					if (conn.matchDns()?.accept({ resolvers: ["192.0.2.53"] }))
						return;
					const api = conn.matchHttp("api.example.com");
					if (!api)
						return;
					api.accept(async (request) => {
						request.headers.set("authorization", `Bearer for ${request.url.pathname}`);
					});
				}),
			});
			let dir = "";
			{
				await using vm = await sandbox.boot({ mounts: { "/workspace": fs.virtual(workspace) }, cwd: "/workspace" });
				dir = vm.controlSocket.replace(/control\.sock$/, "");
				const config = JSON.parse(readFileSync(path.join(dir, "vm.json"), "utf8")) as Record<string, unknown>;
				assert.deepEqual(config["net"], { mode: "auto", policy: { hook: { socket: path.join(dir, "hook.sock"), timeoutMs: 5500 } } });
				assert.deepEqual(config["mounts"], { "/workspace": { virtual: { socket: path.join(dir, "vfs-0.sock"), timeoutMs: 5000 } } });
				const seams = await callRaw(vm.controlSocket, "test.seams");
				assert.deepEqual(seams, {
					hook: [
						{ id: 1, verdict: "grant-dns", resolvers: ["192.0.2.53"] },
						{ id: 2, verdict: "grant-http", tls: "auto", ask: "request", host: "api.example.com" },
						{ id: 3, verdict: "grant-http", set: { authorization: "Bearer for /user" } },
						{ id: 4, verdict: "deny", reason: "no grant" },
					],
					vfs: { "/workspace": "Summarize the current user\n" },
				});
				assert.ok(existsSync(path.join(dir, "hook.sock")));
			}
			assert.ok(!existsSync(dir), "the sockets and the runtime directory are gone");
		} finally {
			delete process.env["FAKE_VMM_HOOK"];
			k.remove();
		}
	});

	test("a vmm that fails to start is reported with its message", async () => {
		const k = fakeKiln();
		process.env["FAKE_VMM_FAIL"] = "1";
		try {
			const s = defineSandbox({ rootfs: k.image, kiln: { vmm: k.vmm, kernel: k.kernel, initrd: k.initrd } });
			await assert.rejects(s.boot(), (e: Error) =>
				e instanceof VmmError && e.exitCode === 125 && /exited with status 125 before its control socket answered: vmm: \/dev\/kvm: No such file/.test(e.message));
		} finally {
			delete process.env["FAKE_VMM_FAIL"];
			k.remove();
		}
	});
	test("a kernel that is not its pin never boots", async () => {
		const k = fakeKiln();
		try {
			const { writeFileSync } = await import("node:fs");
			writeFileSync(k.kernel, "evil");
			const s = defineSandbox({ rootfs: k.image, kiln: { vmm: k.vmm, kernel: k.kernel, initrd: k.initrd } });
			await assert.rejects(s.boot(), PinMismatchError);
		} finally {
			k.remove();
		}
	});
});

describe("vm.exec", () => {
	test("argv, env merged into the guest's (envMode merge), cwd, stdin; the result decoded", () => withVm(async (vm) => {
		const r = await vm.exec("sh", ["-c", "x"], { cwd: "/w", env: { CI: "1" }, stdin: "in" });
		assert.equal(r.exitCode, 3);
		assert.equal(r.stderr, "warn\n");
		assert.deepEqual(JSON.parse(r.stdout), {
			argv: ["sh", "-c", "x"], cwd: "/w", stdin: "aW4=", env: { CI: "1" }, envMode: "merge",
		});
		const plain = JSON.parse((await vm.exec("true")).stdout) as Record<string, unknown>;
		assert.deepEqual(plain["argv"], ["true"]);
		assert.equal(plain["envMode"], null, "no env: the guest's own environment, no envMode");
	}));
	test("timeoutMs gives 124", () => withVm(async (vm) => {
		const r = await vm.exec("sleep", ["60"], { timeoutMs: 20 });
		assert.equal(r.exitCode, 124);
		assert.equal(r.timedOut, true);
	}));
	test("an exec is one request on a connection that gets no events", () => withVm(async (vm) => {
		await vm.exec("echo", ["one"]);
		await vm.exec("echo", ["two"]);
		type Seen = { requests: string[]; subscribed: boolean; events: number; open: boolean };
		let seen: Seen[] = [];
		// The fake learns of the boot's close when its loop gets to it.
		for (let i = 0; i < 100; i++) {
			seen = await callRaw(vm.controlSocket, "test.connections") as Seen[];
			if (!seen.some((c) => c.subscribed && c.open))
				break;
			await new Promise((r) => setTimeout(r, 20));
		}
		assert.deepEqual(seen.filter((c) => c.requests.includes("exec")),
			[{ requests: ["exec", "exec"], subscribed: false, events: 0, open: true }],
			"the calls' connection is not subscribed: no exec-started, exec-exited");
		// (Its close may reach the fake after the first exec: what it was
		// sent then went nowhere.)
		assert.deepEqual(seen.filter((c) => c.subscribed).map(({ requests, open }) => ({ requests, open })),
			[{ requests: ["vm.subscribe"], open: false }],
			"the boot's subscription had its own connection, closed at agent-ready");
	}));
	test("an abort rejects with AbortError and the VM stays usable", () => withVm(async (vm) => {
		const ac = new AbortController();
		const p = vm.exec("sleep", ["60"], { signal: ac.signal });
		setTimeout(() => ac.abort(), 20);
		await assert.rejects(p, { name: "AbortError" });
		assert.equal((await vm.exec("true")).exitCode, 3);
	}));
	test("a guest refusal carries its errno; bad options are named", () => withVm(async (vm) => {
		await assert.rejects(vm.exec("missing"), (e: Error) => e instanceof GuestError && e.code === "ENOENT" && e.method === "exec");
		await assert.rejects(vm.exec("sh", "x" as never), /vm.exec: args must be an array of strings, got "x"/);
		await assert.rejects(vm.exec("sh", [], { env: { "A=B": "1" } }), /vm.exec: env: "A=B" is not a variable name/);
		await assert.rejects(vm.exec("sh", [], { timeoutMs: -1 }), /vm.exec: timeoutMs: must be from 1/);
		await assert.rejects(vm.exec("sh", [], { timeout: 1 } as never), /vm.exec: options: unknown option "timeout"/);
	}));
});

describe("vm.spawn and vm.pty", () => {
	test("spawn streams stdin, stdout, stderr and the exit", () => withVm(async (vm) => {
		const child = vm.spawn("tr", ["a-z", "A-Z"]);
		await child.ready;
		assert.equal(child.pid, 42);
		const w = child.stdin.getWriter();
		await w.write(new TextEncoder().encode("hello "));
		await w.write(new TextEncoder().encode("world"));
		await w.close();
		const [out, err] = await Promise.all([new Response(child.stdout).text(), new Response(child.stderr).text()]);
		assert.equal(out, "HELLO WORLD");
		assert.equal(err, "done\n");
		assert.deepEqual(await child.exit, { exitCode: 0, timedOut: false });
	}));
	test("an output nobody reads stops the vmm's sending (backpressure)", () => withVm(async (vm) => {
		const total = 64 * 1024 * 1024;
		const child = vm.spawn("flood", [String(total)]);
		await child.ready;
		// Nothing reads: the SDK holds its high-water mark, pauses the
		// connection, and the fake vmm's writes block until it stops
		// sending. Without the pause it would send all 64 MiB.
		const c = await import("../src/rpc/client.js");
		const conn = await c.RpcConnection.connect(vm.controlSocket);
		let flooded = -1;
		try {
			for (let last = -2; flooded !== last && flooded < total;) {
				last = flooded;
				await new Promise((r) => setTimeout(r, 100));
				flooded = ((await conn.call("test.flooded")) as { bytes: number }).bytes;
			}
		} finally {
			conn.close();
		}
		assert.ok(flooded < 4 * 1024 * 1024, `the vmm sent ${flooded} of ${total} bytes to a reader that read none`);
		let n = 0;
		for await (const c of child.stdout)
			n += c.byteLength;
		assert.equal(n, total);
		assert.equal((await child.exit).exitCode, 0);
	}));
	test("a process that cannot start rejects ready and exit", () => withVm(async (vm) => {
		const child = vm.spawn("missing");
		await assert.rejects(child.ready, (e: Error) => e instanceof GuestError && e.code === "ENOENT" && e.method === "spawn");
		await assert.rejects(child.exit, GuestError);
	}));
	test("kill ends the process; an aborted signal kills it and exit rejects", () => withVm(async (vm) => {
		const child = vm.spawn("sleep", ["60"]);
		await child.ready;
		await child.kill();
		assert.deepEqual(await child.exit, { exitCode: 143, timedOut: false, signal: 15 });
		const ac = new AbortController();
		const c2 = vm.spawn("sleep", ["60"], { signal: ac.signal });
		await c2.ready;
		ac.abort();
		await assert.rejects(c2.exit, { name: "AbortError" });
	}));
	test("pty: size, output, resize", () => withVm(async (vm) => {
		const shell = vm.pty("/bin/sh", ["-i"], { env: { TERM: "xterm-256color" }, size: { rows: 40, cols: 120 } });
		await shell.ready;
		const reader = shell.output.getReader();
		assert.equal(text((await reader.read()).value ?? new Uint8Array()), "40x120\n");
		await shell.resize({ rows: 50, cols: 160 });
		assert.equal(text((await reader.read()).value ?? new Uint8Array()), "50x160\n");
		await shell.kill("KILL");
		assert.equal((await shell.exit).exitCode, 137);
	}));
});

describe("vm.fs", () => {
	test("small and large files both ways, with ranges", () => withVm(async (vm) => {
		await vm.fs.writeFile("/tmp/a.txt", "hello world", { createParents: true });
		assert.equal(text(await vm.fs.readFile("/tmp/a.txt", { range: { offset: 6, length: 5 } })), "world");
		const big = new Uint8Array(3 * 1024 * 1024 + 7).map((_, i) => (i * 7) & 0xff);
		await vm.fs.writeFile("/tmp/big", big);
		const back = await vm.fs.readFile("/tmp/big");
		assert.equal(back.length, big.length);
		assert.ok(Buffer.from(back).equals(Buffer.from(big)));
		await assert.rejects(vm.fs.readFile("/tmp/a.txt", { range: { offset: 1 } } as never), /range needs both offset and length/);
	}));
	test("readDir: names, raw bytes, metadata, exact times", () => withVm(async (vm) => {
		const entries = await vm.fs.readDir("/srv");
		assert.deepEqual(entries.map((e) => e.name), ["a.txt", "caf\ufffd"]);
		assert.deepEqual([...(entries[1]?.nameBytes ?? [])], [0x63, 0x61, 0x66, 0xe9]);
		assert.equal(entries[0]?.mtimeNs, 1716800000123456789n);
		assert.equal(entries[0]?.type, "file");
	}));
	test("errors carry the errno; relative paths are refused", () => withVm(async (vm) => {
		await assert.rejects(vm.fs.stat("/nope"), { code: "ENOENT", method: "fs.stat" });
		await assert.rejects(vm.fs.stat("nope"), /vm.fs.stat: path: must be an absolute path, got "nope"/);
		await assert.rejects(vm.fs.rename("/a", "b"), /vm.fs.rename: to: must be an absolute path/);
	}));
	test("a closed VM refuses calls", async () => {
		const k = fakeKiln();
		try {
			const vm = await defineSandbox({ rootfs: k.image, kiln: { vmm: k.vmm, kernel: k.kernel, initrd: k.initrd } }).boot();
			await vm.close();
			await vm.close();
			await assert.rejects(vm.exec("true"), /vm.exec: the VM is closed/);
		} finally {
			k.remove();
		}
	});
});

/** One JSON-RPC call on a control socket, its result. */
async function callRaw(socket: string, method: string): Promise<unknown> {
	const { RpcConnection } = await import("../src/rpc/client.js");
	const c = await RpcConnection.connect(socket);
	try {
		return await c.call(method);
	} finally {
		c.close();
	}
}
