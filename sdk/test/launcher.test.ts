// Seed 002's launchers: descriptors, settings and secrets, the seven-step
// activation transaction and each of its failure paths, and the built-in
// vm, namespace and auto launchers against the fake vmm.

import assert from "node:assert/strict";
import { rmSync, writeFileSync } from "node:fs";
import net from "node:net";
import { describe, test } from "./flat.js";
import {
	ActivationError, AutoLauncher, LauncherHost, NamespaceLauncher, PinMismatchError, SandboxConfigError, VmLauncher,
	builtinLaunchers, memorySettingsStore,
} from "../src/index.js";
import type {
	LaunchRequest, LauncherDescriptor, ResolvedSettings, SandboxBackendRef, SandboxLauncher, SandboxVm, SettingsSnapshot,
	SettingsStore,
} from "../src/index.js";
import { fakeKiln } from "./kiln-fixture.js";

interface FakeSandbox {
	by: string;
	n: number;
	closed: boolean;
	close(): Promise<void>;
}

/** A launcher that logs what the host asks of it; `fail` makes a step throw. */
class Fake implements SandboxLauncher<FakeSandbox> {
	readonly kind: string;
	readonly descriptor: LauncherDescriptor;
	readonly log: string[];
	fail: { configure?: boolean; prepare?: boolean; available?: boolean | "throw"; dispose?: number } = {};
	settings: ResolvedSettings = {};
	spawned = 0;
	hold: Promise<void> | undefined;

	constructor(kind: string, log: string[], descriptor?: LauncherDescriptor) {
		this.kind = kind;
		this.log = log;
		this.descriptor = descriptor ?? {
			name: `Fake ${kind}`,
			description: "test",
			isolation: "fake",
			settings: {
				fields: [
					{ id: "region", type: "string", label: "Region", defaultValue: "us-east" },
					{ id: "size", type: "number", label: "Size", min: 1, max: 8 },
					{ id: "fast", type: "boolean", label: "Fast" },
					{ id: "tier", type: "select", label: "Tier", options: [{ value: "a", label: "A" }, { value: "b", label: "B" }] },
					{ id: "apiKey", type: "secret", label: "API key", required: true },
				],
			},
		};
	}

	configure(s: ResolvedSettings): void {
		this.log.push(`${this.kind}.configure ${JSON.stringify(s)}`);
		if (this.fail.configure)
			throw new Error("bad settings");
		this.settings = s;
	}

	async prepare(): Promise<void> {
		this.log.push(`${this.kind}.prepare`);
		if (this.hold)
			await this.hold;
		if (this.fail.prepare)
			throw new Error("cannot prepare");
	}

	isAvailable(): boolean | { available: boolean; reason: string } {
		this.log.push(`${this.kind}.isAvailable`);
		if (this.fail.available === "throw")
			throw new Error("probe crashed");
		return this.fail.available === false ? { available: false, reason: "runtime missing" } : true;
	}

	async spawn(_r: LaunchRequest): Promise<FakeSandbox> {
		const s: FakeSandbox = {
			by: this.kind, n: this.spawned++, closed: false,
			close: async () => {
				s.closed = true;
			},
		};
		return s;
	}

	dispose(): void {
		this.log.push(`${this.kind}.dispose`);
		if (this.fail.dispose !== undefined && this.fail.dispose > 0) {
			this.fail.dispose--;
			throw new Error("busy");
		}
	}
}

const secret = { apiKey: { replace: "s3cret" } };
const A: SandboxBackendRef = { source: "builtin", kind: "a" };
const B: SandboxBackendRef = { source: "atom-pack", packId: "pack1", kind: "b" };
const AUTO: SandboxBackendRef = { source: "builtin", kind: "auto" };

async function host(store: SettingsStore = memorySettingsStore()) {
	const log: string[] = [];
	const warnings: string[] = [];
	const h = await LauncherHost.open<FakeSandbox>({ store, cleanupRetryMs: [1, 1], warn: (m) => warnings.push(m) });
	const a = new Fake("a", log);
	const b = new Fake("b", log);
	h.register(a);
	h.register(b, "pack1");
	return { h, a, b, log, warnings };
}

/** A store that fails its next `failures` saves. */
function flakyStore(): SettingsStore & { snapshot: SettingsSnapshot; failures: number; saves: number } {
	const inner = memorySettingsStore();
	const s = {
		failures: 0,
		saves: 0,
		get snapshot() {
			return inner.snapshot;
		},
		load: () => inner.load(),
		save: async (snap: SettingsSnapshot) => {
			s.saves++;
			if (s.failures > 0) {
				s.failures--;
				throw new Error("disk full");
			}
			await inner.save(snap);
		},
	};
	return s;
}

describe("launchers", () => {
	test("descriptors are data: functions, unknown keys and bad fields refused", async () => {
		const { h, log } = await host();
		const bad: [unknown, RegExp][] = [
			[{ name: "x", description: "d", render: () => "<b>" }, /not serialisable/],
			[{ name: "x", description: "d", html: "<b>" }, /unknown key "html"/],
			[{ name: "x", description: "d", settings: { fields: [{ id: "s", type: "select", label: "S" }] } }, /a select needs options/],
			[{ name: "x", description: "d", settings: { fields: [{ id: "k", type: "secret", label: "K", defaultValue: "x" }] } }, /a secret has no default/],
			[{ name: "x", description: "d", settings: { fields: [{ id: "n", type: "number", label: "N", defaultValue: "1" }] } }, /a finite number/],
			[{ name: "x", description: "d", settings: { fields: [{ id: "n", type: "color", label: "N" }] } }, /type: one of string, number, boolean, select, secret/],
			[{ name: "x", description: "d", settings: { fields: [{ id: "n", type: "string", label: "N" }, { id: "n", type: "string", label: "N" }] } }, /n twice/],
		];
		for (const [d, why] of bad)
			assert.throws(() => h.register(new Fake("c", log, d as LauncherDescriptor)), (e: unknown) => e instanceof SandboxConfigError && why.test(e.message), String(why));
		assert.throws(() => h.register(new Fake("a", log)), /registered already/);
		assert.throws(() => h.register(new Fake("Bad Kind", log)), /launcher kind/);
		assert.deepEqual(h.list().map((l) => [l.ref, l.active]), [[A, false], [B, false]]);
	});

	test("nothing spawns before the first activation", async () => {
		const { h } = await host();
		await assert.rejects(h.spawn({ sandbox: {} as LaunchRequest["sandbox"] }), /no sandbox backend is active/);
	});

	test("the seven steps in order; settings stored under the source-qualified key; secrets read back as {configured}", async () => {
		const store = memorySettingsStore();
		const { h, a, b, log } = await host(store);
		const r = await h.activate(A, { ...secret, size: 2, tier: "b", fast: true });
		assert.deepEqual(r, { ref: A, selection: { kind: "a", isolation: "fake", reason: "available" }, warnings: [] });
		assert.deepEqual(log, [
			`a.configure {"region":"us-east","size":2,"fast":true,"tier":"b","apiKey":"s3cret"}`, "a.prepare", "a.isAvailable",
		]);
		assert.equal(a.settings["apiKey"], "s3cret", "configure gets the resolved secret");
		assert.deepEqual(h.settings(A), { region: "us-east", size: 2, fast: true, tier: "b", apiKey: { configured: true } });
		assert.ok(!JSON.stringify(h.settings(A)).includes("s3cret"));
		assert.deepEqual(h.settings(B), { region: "us-east", apiKey: { configured: false } });
		assert.deepEqual(store.snapshot.active, A);
		assert.equal(store.snapshot.settings["builtin:a"]?.["apiKey"], "s3cret", "plaintext in the owning backend's setting");
		log.length = 0;
		// 7: the previous launcher's idle resources, after the swap and the save.
		await h.activate(B, { apiKey: { replace: "other" } });
		assert.deepEqual(log.slice(-1), ["a.dispose"]);
		assert.deepEqual(store.snapshot.active, B);
		assert.ok(store.snapshot.settings["atom-pack:pack1:b"], "keyed by pack and kind");
		assert.equal(b.settings["apiKey"], "other");
		// An empty secret input keeps it; removal is explicit.
		await h.activate(A, { apiKey: "", region: "eu" });
		assert.equal(a.settings["apiKey"], "s3cret");
		assert.deepEqual(h.settings(A)["region"], "eu");
		await assert.rejects(h.activate(A, { apiKey: { remove: true } }),
			(e: unknown) => e instanceof ActivationError && e.step === "validate" && /apiKey: required/.test(e.message));
		assert.equal(a.settings["apiKey"], "s3cret");
	});

	test("validation failure: runtime and persisted selection unchanged, nothing configured", async () => {
		const store = flakyStore();
		const { h, a, log } = await host(store);
		await h.activate(A, secret);
		const saves = store.saves;
		log.length = 0;
		const bad: [Record<string, unknown>, RegExp][] = [
			[{ nope: 1 }, /unknown setting "nope"/],
			[{ size: "2" }, /size: a finite number/],
			[{ size: 9 }, /size: 9 is outside 1..8/],
			[{ fast: "yes" }, /fast: true or false/],
			[{ tier: "c" }, /tier: one of "a", "b"/],
			[{ region: 5 }, /region: a string/],
			[{ apiKey: "bare" }, /a secret is changed by \{replace: "value"\} or \{remove: true\}.*a bare string/],
			[{ apiKey: { configured: true } }, /a secret is changed by/],
			[{ apiKey: { replace: "" } }, /a secret is changed by/],
		];
		for (const [input, why] of bad)
			await assert.rejects(h.activate({ source: "atom-pack", packId: "pack1", kind: "b" }, input as never),
				(e: unknown) => e instanceof ActivationError && e.step === "validate" && why.test(e.message), String(why));
		await assert.rejects(h.activate(B, {}), (e: unknown) => e instanceof ActivationError && /apiKey: required/.test(e.message));
		await assert.rejects(h.activate({ source: "builtin", kind: "zz" }), /no launcher builtin:zz/);
		assert.deepEqual(log, [], "no launcher was touched");
		assert.equal(store.saves, saves);
		assert.deepEqual(h.active?.ref, A);
		assert.equal((await h.spawn({ sandbox: {} as LaunchRequest["sandbox"] })).sandbox.by, "a");
		assert.equal(a.settings["apiKey"], "s3cret");
	});

	test("preparation failure: unchanged, and the old launcher serves while the candidate prepares", async () => {
		const store = flakyStore();
		const { h, b, log } = await host(store);
		await h.activate(A, secret);
		let release!: () => void;
		b.hold = new Promise((r) => {
			release = r;
		});
		b.fail.prepare = true;
		const pending = h.activate(B, secret);
		await new Promise((r) => setTimeout(r, 10));
		const meanwhile = await h.spawn({ sandbox: {} as LaunchRequest["sandbox"] });
		assert.equal(meanwhile.sandbox.by, "a", "spawned by the old launcher during preparation");
		release();
		await assert.rejects(pending, (e: unknown) => e instanceof ActivationError && e.step === "prepare" && /cannot prepare/.test(e.message));
		assert.deepEqual(h.active?.ref, A);
		assert.deepEqual(store.snapshot.active, A);
		assert.ok(log.includes("b.dispose"), "the candidate's resources are let go");
		assert.ok(!log.includes("a.dispose"));
		b.fail = { configure: true };
		await assert.rejects(h.activate(B, secret), (e: unknown) => e instanceof ActivationError && e.step === "prepare" && /bad settings/.test(e.message));
		assert.deepEqual(h.active?.ref, A);
	});

	test("availability failure (false or a throw): unchanged", async () => {
		const store = flakyStore();
		const { h, b } = await host(store);
		await h.activate(A, secret);
		b.fail.available = false;
		await assert.rejects(h.activate(B, secret), (e: unknown) => e instanceof ActivationError && e.step === "availability" && /runtime missing/.test(e.message));
		b.fail.available = "throw";
		await assert.rejects(h.activate(B, secret), (e: unknown) => e instanceof ActivationError && e.step === "availability" && /probe crashed/.test(e.message));
		assert.deepEqual(h.active?.ref, A);
		assert.deepEqual(store.snapshot.active, A);
		assert.deepEqual(h.settings(B)["apiKey"], { configured: false }, "the candidate's settings were not kept");
	});

	test("persistence failure swaps the runtime back (another launcher, or the same one's old settings)", async () => {
		const store = flakyStore();
		const { h, a, log } = await host(store);
		await h.activate(A, secret);
		store.failures = 1;
		await assert.rejects(h.activate(B, secret), (e: unknown) => e instanceof ActivationError && e.step === "persist" && /disk full/.test(e.message));
		assert.deepEqual(h.active?.ref, A);
		assert.equal((await h.spawn({ sandbox: {} as LaunchRequest["sandbox"] })).sandbox.by, "a");
		assert.deepEqual(store.snapshot.active, A);
		assert.ok(!log.includes("a.dispose"), "the old launcher was never disposed");
		// The active launcher re-activated with new settings: put back.
		store.failures = 1;
		await assert.rejects(h.activate(A, { region: "eu" }), (e: unknown) => e instanceof ActivationError && e.step === "persist");
		assert.equal(a.settings["region"], "us-east", "configured back to what it ran with");
		assert.deepEqual(h.settings(A)["region"], "us-east");
	});

	test("cleanup failure keeps the activation, warns, and retries until it succeeds", async () => {
		const { h, a, log, warnings } = await host();
		await h.activate(A, secret);
		a.fail.dispose = 2;
		const r = await h.activate(B, secret);
		assert.deepEqual(h.active?.ref, B);
		assert.equal(r.warnings.length, 1);
		assert.match(r.warnings[0] ?? "", /builtin:a: disposing its idle resources failed \(busy\); atom-pack:pack1:b is active; retrying/);
		await h.idle();
		assert.equal(log.filter((l) => l === "a.dispose").length, 3, "the first try and two retries");
		assert.equal(a.fail.dispose, 0);
		assert.match(warnings.join("\n"), /failed again \(busy\); retrying/);
		assert.deepEqual(h.active?.ref, B, "still active");
	});

	test("processes keep the launcher that spawned them; activations are serialised", async () => {
		const { h, log } = await host();
		await h.activate(A, secret);
		const first = await h.spawn({ sandbox: {} as LaunchRequest["sandbox"] });
		log.length = 0;
		await Promise.all([h.activate(B, secret), h.activate(A, {})]);
		assert.deepEqual(log.filter((l) => !l.includes("configure")), [
			"b.prepare", "b.isAvailable", "a.dispose", "a.prepare", "a.isAvailable", "b.dispose",
		], "one transaction at a time, in call order");
		assert.deepEqual(first.launcher, A);
		assert.equal(first.sandbox.closed, false, "a swap never stops what the old launcher spawned");
	});

	test("removing the active pack activates auto first; a failing auto refuses the removal", async () => {
		const { h, log } = await host();
		const auto = new Fake("auto", log, { name: "Auto", description: "d" });
		h.register(auto);
		await h.activate(B, secret);
		auto.fail.available = false;
		await assert.rejects(h.removePack("pack1"), /safe fallback builtin:auto cannot be established.*refused/);
		assert.deepEqual(h.active?.ref, B);
		assert.equal(h.list().length, 3, "the pack stays");
		auto.fail.available = true;
		await h.removePack("pack1");
		assert.deepEqual(h.active?.ref, AUTO);
		assert.deepEqual(h.list().map((l) => l.ref), [A, AUTO]);
		assert.ok(log.includes("b.dispose"));
	});

	test("resume() activates the persisted selection with its stored settings, else auto", async () => {
		const store = memorySettingsStore();
		{
			const { h } = await host(store);
			await h.activate(B, secret);
		}
		const { h, b } = await host(store);
		const r = await h.resume();
		assert.deepEqual(r.ref, B);
		assert.equal(b.settings["apiKey"], "s3cret", "its stored secret, resolved");
		// The persisted launcher unavailable now: auto, said.
		const log: string[] = [];
		const { h: h2, b: b2, warnings } = await host(store);
		b2.fail.available = false;
		h2.register(new Fake("auto", log, { name: "Auto", description: "d" }));
		assert.deepEqual((await h2.resume()).ref, AUTO);
		assert.match(warnings.join("\n"), /atom-pack:pack1:b: availability: runtime missing; activating builtin:auto instead/);
	});
});

describe("built-in launchers", () => {
	const request = (k: ReturnType<typeof fakeKiln>): LaunchRequest => ({ sandbox: { rootfs: k.image } });

	async function callRaw(socket: string, method: string): Promise<unknown> {
		return new Promise((resolve, reject) => {
			const s = net.connect(socket);
			let buf = "";
			s.on("data", (c) => {
				buf += c.toString();
				const nl = buf.indexOf("\n");
				if (nl >= 0) {
					s.destroy();
					resolve((JSON.parse(buf.slice(0, nl)) as { result?: unknown }).result);
				}
			});
			s.on("error", reject);
			s.write(JSON.stringify({ jsonrpc: "2.0", id: 1, method }) + "\n");
		});
	}

	async function withEnv(env: Record<string, string | undefined>, body: () => Promise<void>): Promise<void> {
		const old: Record<string, string | undefined> = {};
		for (const [k, v] of Object.entries(env)) {
			old[k] = process.env[k];
			if (v === undefined)
				delete process.env[k];
			else
				process.env[k] = v;
		}
		try {
			await body();
		} finally {
			for (const [k, v] of Object.entries(old))
				if (v === undefined)
					delete process.env[k];
				else
					process.env[k] = v;
		}
	}

	test("vm: available as vmm probe-kvm says; a vmm without it is unavailable, said", async () => {
		const k = fakeKiln();
		try {
			const vm = new VmLauncher({ kiln: { vmm: k.vmm, kernel: k.kernel, initrd: k.initrd } });
			vm.configure({});
			await vm.prepare();
			await withEnv({ FAKE_VMM_KVM: "usable" }, async () => {
				assert.deepEqual(await vm.isAvailable(), { available: true, reason: "KVM is usable (vmm probe-kvm)" });
			});
			await withEnv({ FAKE_VMM_KVM: "unsupported KVM API version (need 12)" }, async () => {
				assert.deepEqual(await vm.isAvailable(), { available: false, reason: "KVM is not usable: unsupported KVM API version (need 12)" });
			});
			await withEnv({ FAKE_VMM_KVM: "garbage" }, async () => {
				const r = await vm.isAvailable();
				assert.equal(r.available, false);
				assert.match(r.reason, /probe-kvm: exit 1, not json: not a probe-kvm answer/);
			});
			// Exit 0 with nothing said (seen once in the harness) is no answer.
			const silent = new VmLauncher({ kiln: { vmm: k.vmm, kernel: k.kernel, initrd: k.initrd }, run: async () => ({ code: 0, stdout: "", stderr: "" }) });
			silent.configure({});
			await silent.prepare();
			assert.match((await silent.isAvailable()).reason, /probe-kvm: exit 0, nothing on stdout: not a probe-kvm answer/);
			assert.equal((await silent.isAvailable()).available, false);
			const unprepared = new VmLauncher({ kiln: { vmm: k.vmm, kernel: k.kernel, initrd: k.initrd } });
			await assert.rejects(unprepared.isAvailable(), /not prepared/);
			const missing = new VmLauncher({ kiln: { vmm: k.vmm, kernel: k.kernel + ".none", initrd: k.initrd } });
			await assert.rejects(Promise.resolve().then(() => missing.prepare()), /kiln.kernel/);
		} finally {
			k.remove();
		}
	});

	test("auto: the microVM where KVM is usable, reported; spawned VMs carry the report", async () => {
		const k = fakeKiln();
		const warnings: string[] = [];
		try {
			const h = await LauncherHost.open<SandboxVm>({ store: memorySettingsStore(), warn: (m) => warnings.push(m) });
			for (const l of builtinLaunchers({ kiln: { vmm: k.vmm, kernel: k.kernel, initrd: k.initrd }, warn: (m) => warnings.push(m) }))
				h.register(l);
			await withEnv({ FAKE_VMM_KVM: "usable" }, async () => {
				const r = await h.activate(AUTO);
				assert.deepEqual(r.selection, { kind: "vm", isolation: "microvm", reason: "KVM is usable (vmm probe-kvm): the microVM" });
				const { launcher, sandbox: vm } = await h.spawn(request(k));
				try {
					assert.deepEqual(launcher, AUTO);
					assert.deepEqual(vm.launcher, { ref: AUTO, kind: "vm", isolation: "microvm", reason: "KVM is usable (vmm probe-kvm): the microVM" });
					const argv = await callRaw(vm.controlSocket, "test.argv") as string[];
					assert.ok(!argv.includes("--isolation"), argv.join(" "));
				} finally {
					await vm.close();
				}
			});
			assert.deepEqual(warnings, []);
		} finally {
			k.remove();
		}
	});

	test("auto: without KVM the namespace launcher, never silently: a warning and the reason; it passes --isolation namespace", async () => {
		const k = fakeKiln();
		const warnings: string[] = [];
		try {
			const auto = new AutoLauncher({ kiln: { vmm: k.vmm, kernel: k.kernel, initrd: k.initrd }, warn: (m) => warnings.push(m), readProc: () => "1" });
			const h = await LauncherHost.open<SandboxVm>({ store: memorySettingsStore(), warn: (m) => warnings.push(m) });
			h.register(auto);
			await withEnv({ FAKE_VMM_KVM: "No such file or directory", FAKE_VMM_ISOLATION: "1" }, async () => {
				const r = await h.activate(AUTO);
				assert.equal(r.selection.kind, "namespace");
				assert.equal(r.selection.isolation, "namespace");
				assert.match(r.selection.reason, /KVM is not usable: No such file or directory: the namespace sandbox, a weaker boundary/);
				assert.equal(warnings.length, 1);
				assert.match(warnings[0] ?? "", /builtin:auto: KVM is not usable.*weaker boundary/);
				const { sandbox: vm } = await h.spawn(request(k));
				try {
					assert.equal(vm.launcher?.kind, "namespace");
					assert.deepEqual(vm.launcher?.ref, AUTO);
					const argv = await callRaw(vm.controlSocket, "test.argv") as string[];
					assert.deepEqual(argv.slice(-2), ["--isolation", "namespace"]);
				} finally {
					await vm.close();
				}
				// allowNamespace false: no weaker fallback, activation refused.
				await assert.rejects(h.activate(AUTO, { allowNamespace: false }),
					(e: unknown) => e instanceof ActivationError && e.step === "availability" && /the namespace fallback is off/.test(e.message));
				assert.equal(h.active?.selection.kind, "namespace", "the previous activation stands");
			});
		} finally {
			k.remove();
		}
	});

	test("namespace: needs no kernel, initramfs or pins; its vmm is given none", async () => {
		const k = fakeKiln();
		try {
			// No guest at all: KILN_GUEST_DIR names a directory without one.
			for (const f of [k.kernel, k.initrd, k.pins])
				rmSync(f);
			await withEnv({ FAKE_VMM_ISOLATION: "1", KILN_GUEST_DIR: k.dir }, async () => {
				const vm = new VmLauncher({ kiln: { vmm: k.vmm } });
				vm.configure({});
				await assert.rejects(vm.prepare(), /KILN_GUEST_DIR: .*vmlinux.* is not a file/);
				const ns = new NamespaceLauncher({ kiln: { vmm: k.vmm }, readProc: () => "1" });
				ns.configure({});
				await ns.prepare();
				assert.equal((await ns.isAvailable()).available, true);
				const sandbox = await ns.spawn(request(k));
				try {
					assert.equal(sandbox.launcher?.isolation, "namespace");
					const argv = await callRaw(sandbox.controlSocket, "test.argv") as string[];
					assert.deepEqual(argv.slice(-2), ["--isolation", "namespace"]);
					const config = await callRaw(sandbox.controlSocket, "test.config") as Record<string, unknown>;
					assert.equal(config["kernel"], undefined);
					assert.equal(config["initrd"], undefined);
					assert.ok(config["rootfs"]);
					// Its facts as it starts it: `vmm facts ... --isolation namespace`, no kernel.
					const facts = ns.environmentFacts({ rootfs: k.image });
					assert.ok(facts.some((f) => f.topic === "kernel-path" && f.value === "undefined"), JSON.stringify(facts));
					assert.ok(facts.some((f) => f.topic === "isolation" && f.value === "namespace"), JSON.stringify(facts));
					assert.ok(facts.some((f) => f.topic === "os" && f.value === "testix"));
					await assert.rejects(Promise.resolve().then(() => vm.environmentFacts({ rootfs: k.image })), /not prepared/);
				} finally {
					await sandbox.close();
				}
			});
		} finally {
			k.remove();
		}
	});

	test("auto: a microVM without its guest is unavailable, said, and the namespace sandbox is chosen; a pin mismatch is refused", async () => {
		const k = fakeKiln();
		const warnings: string[] = [];
		try {
			rmSync(k.kernel);
			const auto = new AutoLauncher({ kiln: { vmm: k.vmm, initrd: k.initrd }, warn: (m) => warnings.push(m), readProc: () => "1" });
			const h = await LauncherHost.open<SandboxVm>({ store: memorySettingsStore(), warn: (m) => warnings.push(m) });
			h.register(auto);
			await withEnv({ FAKE_VMM_KVM: "usable", FAKE_VMM_ISOLATION: "1", KILN_GUEST_DIR: k.dir }, async () => {
				const r = await h.activate(AUTO);
				assert.equal(r.selection.kind, "namespace");
				assert.match(r.selection.reason, /^the microVM cannot be prepared: KILN_GUEST_DIR: .*vmlinux.* is not a file: the namespace sandbox, a weaker boundary/);
				assert.equal(warnings.length, 1);
				const { sandbox: vm } = await h.spawn(request(k));
				await vm.close();
			});
			// A kernel whose pin does not match: refused, no fallback.
			writeFileSync(k.kernel, "another kernel\n");
			const pinned = new AutoLauncher({ kiln: { vmm: k.vmm, kernel: k.kernel, initrd: k.initrd }, warn: () => undefined, readProc: () => "1" });
			pinned.configure({});
			await withEnv({ FAKE_VMM_KVM: "usable", FAKE_VMM_ISOLATION: "1" }, async () => {
				await assert.rejects(pinned.prepare(), (e: unknown) => e instanceof PinMismatchError);
			});
		} finally {
			k.remove();
		}
	});

	test("auto and namespace: unavailable with every reason when neither can run", async () => {
		const k = fakeKiln();
		try {
			const kiln = { vmm: k.vmm, kernel: k.kernel, initrd: k.initrd };
			const h = await LauncherHost.open<SandboxVm>({ store: memorySettingsStore(), warn: () => undefined });
			h.register(new AutoLauncher({ kiln, readProc: () => "1", warn: () => undefined }));
			await withEnv({ FAKE_VMM_KVM: "No such file or directory", FAKE_VMM_ISOLATION: undefined }, async () => {
				await assert.rejects(h.activate(AUTO), (e: unknown) => e instanceof ActivationError && e.step === "availability" &&
					/KVM is not usable: No such file or directory; namespace: .* has no --isolation option/.test(e.message));
			});
			assert.equal(h.active, undefined, "nothing active, nothing unconfined");
			await withEnv({ FAKE_VMM_ISOLATION: "1" }, async () => {
				for (const [file, value, why] of [
					["/proc/sys/user/max_user_namespaces", "0", /user namespaces are off/],
					["/proc/sys/kernel/unprivileged_userns_clone", "0", /unprivileged user namespaces are off/],
				] as const) {
					const ns = new NamespaceLauncher({ kiln, readProc: (p) => (p === file ? value : "1") });
					ns.configure({});
					await ns.prepare();
					const r = await ns.isAvailable();
					assert.equal(r.available, false);
					assert.match(r.reason, why);
				}
			});
		} finally {
			k.remove();
		}
	});
});
