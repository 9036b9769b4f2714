// Seed 000's facets and personas against the fake vmm (test/fake-vmm.ts,
// which enforces scoped sockets as the vmm does in outline): what the SDK
// sends, and to which socket; every refusal reaching the caller.

import assert from "node:assert/strict";
import { existsSync } from "node:fs";
import net from "node:net";
import { describe, test } from "./flat.js";
import {
	EgressDeniedError, GuestError, KilnRpcError, PersonaRefusedError, SandboxConfigError, SandboxError,
	defineSandbox, network, rootfs,
} from "../src/index.js";
import type { SandboxConnection, SandboxVm } from "../src/index.js";
import { globFiles } from "../src/glob.js";
import { ServiceTable, serviceRegistry } from "../src/services.js";
import { PersonaView } from "../src/persona.js";
import { fakeKiln } from "./kiln-fixture.js";
import type { FakeKiln } from "./kiln-fixture.js";

function callRaw(socket: string, method: string, params: object = {}): Promise<unknown> {
	return new Promise((resolve, reject) => {
		const s = net.connect(socket);
		let buf = "";
		s.on("data", (c) => {
			buf += c.toString();
			const nl = buf.indexOf("\n");
			if (nl >= 0) {
				s.destroy();
				const m = JSON.parse(buf.slice(0, nl)) as { result?: unknown; error?: unknown };
				if (m.error)
					reject(new Error(JSON.stringify(m.error)));
				else
					resolve(m.result);
			}
		});
		s.on("error", reject);
		s.write(JSON.stringify({ jsonrpc: "2.0", id: 1, method, params }) + "\n");
	});
}

const imageInput = (k: FakeKiln) => ({
	name: k.image.name, path: k.image.path, format: k.image.format, architecture: k.image.architecture,
	digest: k.image.digest, sizeBytes: k.image.sizeBytes,
});

type Boot = Parameters<ReturnType<typeof defineSandbox>["boot"]>[0];

async function withVm(body: (vm: SandboxVm, k: FakeKiln) => Promise<void>,
	opts: { boot?: Boot; net?: boolean; facts?: { source: "config"; topic: string; relation: string; value: string }[] } = {}): Promise<void> {
	const k = fakeKiln();
	try {
		const image = opts.facts ? rootfs.image({ ...imageInput(k), facts: opts.facts }) : k.image;
		const sandbox = defineSandbox({
			rootfs: image,
			kiln: { vmm: k.vmm, kernel: k.kernel, initrd: k.initrd },
			...(opts.net ? { network: network.policy(() => undefined) } : {}),
		});
		await using vm = await sandbox.boot(opts.boot ?? {});
		await body(vm, k);
	} finally {
		k.remove();
	}
}

interface ConnInfo { requests: string[]; persona?: string }

const connections = async (vm: SandboxVm): Promise<ConnInfo[]> =>
	(await callRaw(vm.controlSocket, "test.connections")) as ConnInfo[];

describe("facets", () => {
	test("shell, filesystem and network go to the VM's control socket", async () => {
		await withVm(async (vm) => {
			const r = await vm.shell.exec("echo", ["hi"], { cwd: "/w" });
			assert.deepEqual(JSON.parse(r.stdout).argv, ["echo", "hi"]);
			await vm.filesystem.write("/w/a.txt", "hello");
			assert.equal(await vm.filesystem.readText("/w/a.txt"), "hello");
			const list = await vm.filesystem.list("/w");
			assert.equal(list[0]?.name, "a.txt");
			assert.deepEqual(await vm.network.check({ proto: "tcp", dst: "192.0.2.1:443" }),
				{ verdict: "ask", reason: "no grant", rule: null, intercepted: false });
			assert.deepEqual(await vm.network.status(), { tcp: { allowed: 0, denied: 0, open: 0, cut: 0 } });
			await assert.rejects(vm.network.check({ proto: "icmp" as "tcp", dst: "x:1" }), SandboxConfigError);
		}, { net: true });
	});

	test("network facet without a network: the vmm's -32601 reaches the caller", async () => {
		await withVm(async (vm) => {
			await assert.rejects(vm.network.check({ proto: "tcp", dst: "192.0.2.1:443" }),
				(e: unknown) => e instanceof KilnRpcError && e.rpcCode === -32601);
			await assert.rejects(vm.services.register("db", { hostname: "db.example.com", port: 5432, resolvers: ["192.0.2.53"] }),
				/this VM has no network/);
		});
	});

	test("guardedFetch asks net.check first: ask and deny refused naming the URL and rule; redirects checked too", async () => {
		await withVm(async (vm) => {
			const fetched: string[] = [];
			const fetch = async (url: URL, init: RequestInit): Promise<Response> => {
				fetched.push(`${init.method ?? "GET"} ${url.href} ${init.redirect ?? ""}`);
				if (url.pathname === "/to-evil")
					return new Response(null, { status: 302, headers: { location: "http://evil.example.com/x" } });
				if (url.pathname === "/to-y")
					return new Response(null, { status: 303, headers: { location: "/y" } });
				return new Response("ok");
			};
			await assert.rejects(vm.network.guardedFetch("https://api.example.com/a", {}, { fetch }), (e: unknown) =>
				e instanceof EgressDeniedError && e.verdict === "ask" && e.url === "https://api.example.com/a" &&
				e.message.includes("https://api.example.com/a") && e.message.includes("rule none"));
			await assert.rejects(vm.network.guardedFetch("http://denied.example.com/", {}, { fetch }), (e: unknown) =>
				e instanceof EgressDeniedError && e.verdict === "deny" && e.message.includes("host address"));
			assert.deepEqual(fetched, [], "nothing fetched before an allow");
			await vm.services.register("api", { hostname: "api.example.com", port: 443, resolvers: ["192.0.2.53"] });
			const ok = await vm.network.guardedFetch("https://api.example.com/to-y", { method: "POST", body: "x" }, { fetch });
			assert.equal(await ok.text(), "ok");
			assert.deepEqual(fetched, ["POST https://api.example.com/to-y manual", "GET https://api.example.com/y manual"]);
			await assert.rejects(vm.network.guardedFetch("https://api.example.com/to-evil", {}, { fetch }), (e: unknown) =>
				e instanceof EgressDeniedError && e.url === "http://evil.example.com/x");
			const manual = await vm.network.guardedFetch("https://api.example.com/to-evil", { redirect: "manual" }, { fetch });
			assert.equal(manual.status, 302);
			await assert.rejects(vm.network.guardedFetch("https://api.example.com/to-evil", { redirect: "error" }, { fetch }), /redirect: "error"/);
			await assert.rejects(vm.network.guardedFetch("ftp://api.example.com/", {}, { fetch }), /only http: and https:/);
			await assert.rejects(vm.network.guardedFetch("http://[::1]/", {}, { fetch }), /IPv6/);
			await assert.rejects(vm.network.guardedFetch("not a url", {}, { fetch }), /is not a URL/);
		}, { net: true });
	});

	test("services: each a grant applied with net.setPolicy on the booted policy; refused ones change nothing", async () => {
		await withVm(async (vm) => {
			const booted = await callRaw(vm.controlSocket, "test.policy") as Record<string, unknown>;
			assert.ok(booted["hook"], "the sandbox's policy is its hook");
			const db = await vm.services.register("db", { hostname: "DB.example.com.", port: 5432, resolvers: ["192.0.2.53"] });
			assert.equal(db.hostname, "db.example.com");
			await vm.services.register("stats", { hostname: "stats.example.com", port: 8125, proto: "udp", resolvers: ["192.0.2.53:5353"] });
			await vm.services.register("web", { hostname: "web.example.com", port: 443, proto: "http", resolvers: ["192.0.2.53"] });
			assert.deepEqual(await callRaw(vm.controlSocket, "test.policy"), {
				...booted,
				tcp: [{ to: "db.example.com", ports: [5432] }],
				udp: [{ to: "stats.example.com", ports: [8125] }],
				http: [{ host: "web.example.com", ports: [443] }],
			});
			assert.equal(vm.services.resolve("db")?.port, 5432);
			assert.deepEqual((await vm.network.check({ proto: "tcp", dst: "db.example.com:5432" })).rule, { key: "tcp", index: 0 });
			assert.equal(await vm.services.unregister("db"), true);
			assert.equal(await vm.services.unregister("db"), false);
			assert.ok(!("tcp" in (await callRaw(vm.controlSocket, "test.policy") as object)), "db's grant gone");
			assert.deepEqual(vm.services.list().map((s) => s.name), ["stats", "web"]);
			for (const [spec, why] of [
				[{ hostname: "10.0.0.1", port: 1, resolvers: ["192.0.2.53"] }, /not a DNS name/],
				[{ hostname: "a.example.com", port: 0, resolvers: ["192.0.2.53"] }, /port/],
				[{ hostname: "a.example.com", port: 1, resolvers: [] }, /resolvers must be 1 to 16/],
				[{ hostname: "a.example.com", port: 1, resolvers: ["::1"] }, /is not "A.B.C.D"/],
				[{ hostname: "a.example.com", port: 1, proto: "sctp", resolvers: ["192.0.2.53"] }, /proto/],
				[{ hostname: "a.example.com", port: 1, resolvers: ["192.0.2.53"], extra: 1 }, /extra/],
			] as const)
				await assert.rejects(vm.services.register("x", spec as never), (e: unknown) => e instanceof SandboxConfigError && why.test(e.message));
			await assert.rejects(vm.services.register("bad name", { hostname: "a.example.com", port: 1, resolvers: ["192.0.2.53"] }), /name/);
		}, { net: true });
	});

	test("services: the hook answers a service's DNS name with its resolvers before the sandbox's policy", () => {
		const table = new ServiceTable();
		const s = Object.freeze({ name: "db", hostname: "db.example.com", port: 5432, proto: "tcp" as const, resolvers: ["192.0.2.53"] });
		table.replace(new Map([["db", s]]));
		const asked: unknown[] = [];
		const conn = (name: string | undefined): SandboxConnection => ({
			matchDns: () => (name === undefined ? undefined : {
				name, qtype: "A", accept: (o: { resolvers: readonly string[] }) => {
					asked.push(o.resolvers);
					return true;
				},
			}),
		}) as unknown as SandboxConnection;
		assert.equal(table.answerDns(conn("DB.Example.com.")), true);
		assert.deepEqual(asked, [["192.0.2.53"]]);
		assert.equal(table.answerDns(conn("other.example.com")), false);
		assert.equal(table.answerDns(conn(undefined)), false);
	});

	test("services: a policy the vmm refuses leaves the registry as it was", async () => {
		await withVm(async (vm) => {
			await vm.services.register("a", { hostname: "a.example.com", port: 1, resolvers: ["192.0.2.53"] });
			const before = await callRaw(vm.controlSocket, "test.policy");
			// The fake vmm refuses a grant to refuse.*, as the vmm a bad policy.
			await assert.rejects(vm.services.register("b", { hostname: "refuse.example.com", port: 2, resolvers: ["192.0.2.53"] }),
				(e: unknown) => e instanceof KilnRpcError && e.rpcCode === -32602 && /policy.tcp\[1\].to/.test(e.message));
			assert.deepEqual(vm.services.list().map((s) => s.name), ["a"]);
			assert.equal(vm.services.resolve("b"), undefined);
			assert.deepEqual(await callRaw(vm.controlSocket, "test.policy"), before);
			// and the next change starts from the registry as it is
			await vm.services.register("c", { hostname: "c.example.com", port: 3, resolvers: ["192.0.2.53"] });
			assert.deepEqual((await callRaw(vm.controlSocket, "test.policy") as { tcp: unknown[] }).tcp,
				[{ to: "a.example.com", ports: [1] }, { to: "c.example.com", ports: [3] }]);
		}, { net: true });
	});

	test("tools: the image's mcp-server facts and the boot's tools, listed; start spawns one", async () => {
		await withVm(async (vm) => {
			const list = await vm.tools.list();
			assert.deepEqual(list.map((t) => [t.name, t.command, t.args, t.source]), [
				["fs", "/usr/bin/fs-mcp", ["--stdio"], "boot"],
				["git", "/usr/local/bin/git-mcp", [], "image"],
			]);
			const child = vm.tools.start("git");
			await child.ready;
			const conns = await connections(vm);
			assert.ok(conns.some((c) => c.requests.includes("spawn")));
			assert.throws(() => vm.tools.start("nope"), /no MCP server "nope" \(declared: fs, git\)/);
			child.kill("KILL");
			await child.exit;
		}, {
			facts: [
				{ source: "config", topic: "mcp-server", relation: "git", value: "[\"/usr/local/bin/git-mcp\"]" },
				{ source: "config", topic: "mcp-server", relation: "fs", value: "[\"/usr/bin/old\"]" },
			],
			boot: { tools: { fs: { command: "/usr/bin/fs-mcp", args: ["--stdio"] } } },
		});
	});

	test("tools: malformed declarations are refused at boot, naming them", async () => {
		const k = fakeKiln();
		try {
			const kiln = { vmm: k.vmm, kernel: k.kernel, initrd: k.initrd };
			const bad = defineSandbox({ rootfs: rootfs.image({ ...imageInput(k), facts: [{ source: "config", topic: "mcp-server", relation: "x", value: "/bin/x" }] }), kiln });
			await assert.rejects(bad.boot(), /mcp-server x: the value must be its command line as a JSON array/);
			const s = defineSandbox({ rootfs: k.image, kiln });
			await assert.rejects(s.boot({ tools: { "bad name": { command: "x" } } }), /is not a tool name/);
			await assert.rejects(s.boot({ tools: { x: { command: "" } } }), /tools.x.command/);
			await assert.rejects(s.boot({ tools: { x: { command: "x", args: "y" as unknown as string[] } } }), /args: must be an array/);
		} finally {
			k.remove();
		}
	});
});

describe("glob", () => {
	const tree: Record<string, { name: string; type: string }[]> = {
		"/": [{ name: "w", type: "directory" }],
		"/w": [{ name: "a.txt", type: "file" }, { name: "b.txt", type: "file" }, { name: ".hidden.txt", type: "file" },
			{ name: "src", type: "directory" }, { name: "link", type: "symlink" }, { name: "c.md", type: "file" }],
		"/w/src": [{ name: "x.ts", type: "file" }, { name: "deep", type: "directory" }],
		"/w/src/deep": [{ name: "y.ts", type: "file" }],
	};
	const listed: string[] = [];
	const list = async (p: string): Promise<{ name: string; type: string }[]> => {
		listed.push(p);
		const e = tree[p];
		if (!e)
			throw new GuestError("fs.readDir", "No such file or directory", { errno: "ENOENT" });
		return e;
	};

	test("*, ?, [...], ** and dot files, sorted; the literal prefix not listed", async () => {
		listed.length = 0;
		assert.deepEqual(await globFiles(list, "/w/*.txt"), ["/w/a.txt", "/w/b.txt"]);
		assert.deepEqual(listed, ["/w"]);
		assert.deepEqual(await globFiles(list, "/w/*.txt", { dot: true }), ["/w/.hidden.txt", "/w/a.txt", "/w/b.txt"]);
		assert.deepEqual(await globFiles(list, "/w/?.md"), ["/w/c.md"]);
		assert.deepEqual(await globFiles(list, "/w/[ab].txt"), ["/w/a.txt", "/w/b.txt"]);
		assert.deepEqual(await globFiles(list, "/w/[!a].txt"), ["/w/b.txt"]);
		assert.deepEqual(await globFiles(list, "/w/**/*.ts"), ["/w/src/deep/y.ts", "/w/src/x.ts"]);
		assert.deepEqual(await globFiles(list, "src/**", { cwd: "/w" }), ["/w/src", "/w/src/deep", "/w/src/deep/y.ts", "/w/src/x.ts"]);
		assert.deepEqual(await globFiles(list, "/w/*/"), ["/w/src"], "a trailing / matches directories only (a symlink is not followed)");
		assert.deepEqual(await globFiles(list, "/w/a.txt"), ["/w/a.txt"]);
		assert.deepEqual(await globFiles(list, "/nope/*"), [], "a missing directory matches nothing");
	});

	test("bounds and bad patterns are errors naming them", async () => {
		await assert.rejects(globFiles(list, "/w/*", { limit: 2 }), /matches more than 2 paths \(limit\)/);
		await assert.rejects(globFiles(list, "/**", { maxDirectories: 2 }), /lists more than 2 directories/);
		await assert.rejects(globFiles(list, "/w/../etc/*"), (e: unknown) => e instanceof SandboxConfigError && /no \. or \.\./.test(e.message));
		await assert.rejects(globFiles(list, "/w/a**"), /\*\* only as a whole segment/);
		await assert.rejects(globFiles(list, "/w/[ab"), /without its "\]"/);
		await assert.rejects(globFiles(list, "*", { cwd: "w" }), /cwd must be an absolute/);
		await assert.rejects(globFiles(list, "/w/*", { limit: 0 }), /limit/);
		const refused = async (): Promise<never> => {
			throw new PersonaRefusedError("fs.readDir", "persona 'r': facet filesystem does not allow /: outside its paths", { persona: "r" });
		};
		await assert.rejects(globFiles(refused, "/*"), PersonaRefusedError, "a refusal is the caller's, not an empty match");
	});
});

describe("personas", () => {
	test("forPersona: a view on a scoped socket; the vmm refuses what the grant does not allow", async () => {
		await withVm(async (vm) => {
			await vm.filesystem.write("/workspace/README", "hello\n");
			const reviewer = await vm.forPersona({ persona: "reviewer", facets: { filesystem: { paths: ["/workspace"], write: false } } });
			assert.equal(reviewer.persona, "reviewer");
			assert.equal(reviewer.uid, 2000);
			assert.equal(reviewer.expiresAt, null);
			assert.ok(existsSync(reviewer.socket));
			assert.deepEqual(await callRaw(vm.controlSocket, "test.grants"), [{
				socket: reviewer.socket, persona: "reviewer", facets: { filesystem: { paths: ["/workspace"], write: false } },
			}]);
			assert.equal(await reviewer.filesystem.readText("/workspace/README"), "hello\n");
			const refused = (facetMsg: RegExp) => (e: unknown): boolean =>
				e instanceof PersonaRefusedError && e.persona === "reviewer" && e.rpcCode === -32006 && facetMsg.test(e.message);
			await assert.rejects(reviewer.shell.exec("id"), refused(/facet shell is not granted \(exec\)/));
			await assert.rejects(reviewer.filesystem.read("/etc/shadow"), refused(/does not allow \/etc\/shadow: outside its paths/));
			await assert.rejects(reviewer.filesystem.write("/workspace/x", "y"), refused(/does not allow write to \/workspace\/x/));
			await assert.rejects(reviewer.network.check({ proto: "tcp", dst: "192.0.2.1:80" }), refused(/facet network is not granted/));
			await assert.rejects(reviewer.services.register("db", { hostname: "db.example.com", port: 1, resolvers: ["192.0.2.53"] }),
				refused(/net.setPolicy is in no facet/));
			const child = reviewer.shell.spawn("sh");
			await assert.rejects(child.ready, refused(/facet shell is not granted \(spawn\)/));
			// Each refusal came from the scoped socket: the SDK sent them.
			const scoped = (await connections(vm)).filter((c) => c.persona === "reviewer").flatMap((c) => c.requests);
			for (const m of ["fs.readFile", "exec", "fs.writeFile", "net.check", "net.setPolicy", "spawn"])
				assert.ok(scoped.includes(m), `${m} went to the scoped socket`);
			const full = (await connections(vm)).filter((c) => c.persona === undefined).flatMap((c) => c.requests);
			assert.ok(!full.includes("net.setPolicy"));

			const r = await reviewer.revoke();
			assert.equal(r.revoked, true);
			assert.ok(!existsSync(reviewer.socket), "the scoped socket is gone");
			assert.deepEqual(await callRaw(vm.controlSocket, "test.grants"), []);
			await assert.rejects(reviewer.filesystem.read("/workspace/README"), /persona 'reviewer' was revoked/);
			assert.deepEqual(await reviewer.revoke(), r, "revoke is once");
		}, { net: true });
	});

	test("a granted facet works through the view; dispose revokes; the VM's close drops the rest", async () => {
		await withVm(async (vm) => {
			{
				await using builder = await vm.forPersona({ persona: "builder", facets: { shell: true, network: { check: true } }, uid: 3000, expiresMs: 60_000 });
				assert.equal(builder.uid, 3000);
				assert.ok(builder.expiresAt !== null && builder.expiresAt > Date.now());
				const r = await builder.shell.exec("make");
				assert.deepEqual(JSON.parse(r.stdout).argv, ["make"]);
				assert.equal((await builder.network.check({ proto: "tcp", dst: "192.0.2.1:80" })).verdict, "ask");
				await assert.rejects(builder.filesystem.list("/"), /facet filesystem is not granted/);
			}
			assert.deepEqual(await callRaw(vm.controlSocket, "test.grants"), [], "disposed: revoked");
			const late = await vm.forPersona({ persona: "late", facets: {} });
			// A grant gone meanwhile (its expiry) is no error on dispose.
			await callRaw(vm.controlSocket, "vm.revoke", { socket: late.socket });
			await late[Symbol.asyncDispose]();
			const kept = await vm.forPersona({ persona: "kept", facets: { shell: true } });
			await vm.close();
			await assert.rejects(kept.shell.exec("id"), /was revoked/);
		}, { net: true });
	});

	test("a malformed vm.grant answer, or a socket that cannot be reached, revokes and fails naming it", async () => {
		const revoked: string[] = [];
		const owner = { revoke: async (s: string) => revoked.push(s), closed: () => false, forget: () => undefined };
		const registryOn = () => serviceRegistry(new ServiceTable(), undefined, async () => undefined);
		await assert.rejects(PersonaView.open("vm.forPersona", { socket: "/elsewhere.sock", uid: 2000 }, "/tmp/p.sock", { persona: "r" }, [], registryOn, owner),
			/vm.grant: a malformed answer/);
		await assert.rejects(PersonaView.open("vm.forPersona", { socket: "/tmp/p.sock" }, "/tmp/p.sock", { persona: "r" }, [], registryOn, owner),
			/vm.grant: a malformed answer/);
		await assert.rejects(PersonaView.open("vm.forPersona", { socket: "/nonexistent/p.sock", uid: 2000 }, "/nonexistent/p.sock", { persona: "r" }, [], registryOn, owner),
			/vm.forPersona: \/nonexistent\/p.sock: .*ENOENT/);
		assert.deepEqual(revoked, ["/tmp/p.sock", "/tmp/p.sock", "/nonexistent/p.sock"]);
	});

	test("grants: shape errors before any call, the vmm's refusals as they come", async () => {
		await withVm(async (vm) => {
			const bad: [unknown, RegExp][] = [
				[{ persona: "r" }, /facets is required/],
				[{ persona: "", facets: {} }, /persona/],
				[{ persona: "r", facets: { shel: true } }, /shel/],
				[{ persona: "r", facets: { filesystem: { paths: "/w" } } }, /paths must be an array/],
				[{ persona: "r", facets: { filesystem: { paths: [1] } } }, /paths\[0\]/],
				[{ persona: "r", facets: { shell: "yes" } }, /facets.shell/],
				[{ persona: "r", facets: {}, uid: 0 }, /uid/],
				[{ persona: "r", facets: {}, expiresMs: 0 }, /expiresMs/],
				[{ persona: "r", facets: {}, socket: "/tmp/x" }, /socket/],
			];
			for (const [g, why] of bad)
				await assert.rejects(vm.forPersona(g as never), (e: unknown) => e instanceof SandboxConfigError && why.test(e.message), String(why));
			assert.deepEqual(await callRaw(vm.controlSocket, "test.grants"), []);
			await assert.rejects(vm.forPersona({ persona: "not a name!", facets: {} }),
				(e: unknown) => e instanceof KilnRpcError && e.rpcCode === -32602 && /persona/.test(e.message));
			assert.ok(!(new SandboxError("x") instanceof KilnRpcError));
		});
	});
});
