// Option validation: every refusal names what the caller passed.

import assert from "node:assert/strict";
import { describe, test } from "./flat.js";
import { SandboxConfigError, defineSandbox, fs, network, rootfs } from "../src/index.js";
import type { RootfsImageInput } from "../src/index.js";
import { checkBoot } from "../src/config.js";

const good: RootfsImageInput = {
	name: "alpine:3.23-agent",
	path: "/absolute/path/to/alpine-3.23-agent.img",
	format: "raw",
	architecture: "x64",
	digest: "sha256:" + "0123456789abcdef".repeat(4),
	sizeBytes: 167772160n,
	facts: [{ source: "config", topic: "rootfs-image", relation: "is", value: "alpine:3.23-agent" }],
};

function refuses(fn: () => unknown, message: string | RegExp, kind: new (...a: never[]) => Error = SandboxConfigError): void {
	assert.throws(fn, (e: Error) => {
		assert.ok(e instanceof kind, `${e.name}: ${e.message}`);
		if (typeof message === "string")
			assert.equal(e.message, message);
		else
			assert.match(e.message, message);
		return true;
	});
}

describe("rootfs.image", () => {
	test("a complete descriptor; x64 is x86_64", () => {
		const img = rootfs.image(good);
		assert.equal(img.architecture, "x86_64");
		assert.equal(img.sizeBytes, 167772160n);
		assert.ok(Object.isFrozen(img));
		assert.equal(rootfs.image({ ...good, architecture: "x86_64" }).architecture, "x86_64");
	});
	test("the digest must be sha256 and 64 lowercase hex", () => {
		refuses(() => rootfs.image({ ...good, digest: "sha256:ABC" }),
			'rootfs.image: digest must be "sha256:" + 64 lowercase hex, got "sha256:ABC"');
		refuses(() => rootfs.image({ ...good, digest: "sha256:" + "A".repeat(64) }), /64 lowercase hex/);
		refuses(() => rootfs.image({ ...good, digest: "md5:" + "a".repeat(64) }), /"sha256:"/);
	});
	for (const alias of ["latest", "stable", "current", "lts", "LTS", "edge", "sid"])
		test(`the moving alias ${alias} is refused`, () => {
			refuses(() => rootfs.image({ ...good, name: `alpine:${alias}` }),
				`rootfs.image: name "alpine:${alias}" names a moving alias ("${alias}"): pin a version`);
		});
	test("a word merely containing an alias is not one", () => {
		assert.equal(rootfs.image({ ...good, name: "latestness-3" }).name, "latestness-3");
	});
	test("every field is required", () => {
		const { facts: _f, ...rest } = good;
		refuses(() => rootfs.image(rest as RootfsImageInput), "rootfs.image: facts is required (every field of an image descriptor is)");
	});
	test("architecture, sizeBytes, path, format, facts", () => {
		refuses(() => rootfs.image({ ...good, architecture: "arm64" }),
			'rootfs.image: architecture must be "x64" or "x86_64" (Kiln runs x86-64 guests), got "arm64"');
		refuses(() => rootfs.image({ ...good, sizeBytes: 4096 as unknown as bigint }),
			"rootfs.image: sizeBytes must be a bigint (e.g. 167772160n), got 4096");
		refuses(() => rootfs.image({ ...good, sizeBytes: 4097n }), /multiple of 4096, got 4097n/);
		refuses(() => rootfs.image({ ...good, path: "relative.img" }),
			'rootfs.image: path: must be an absolute path, got "relative.img"');
		refuses(() => rootfs.image({ ...good, format: "vmdk" }),
			'rootfs.image: format must be "raw" (an ext4 file system) or "qcow2" (a qcow2 file of one), got "vmdk"');
		assert.equal(rootfs.image({ ...good, format: "qcow2" }).format, "qcow2");
		refuses(() => rootfs.image({ ...good, facts: [{ source: "guest", topic: "a", relation: "is", value: "b" }] as never }),
			/facts\[0\].source: an image's facts are "config" facts, got "guest"/);
		refuses(() => rootfs.image({ ...good, facts: [{ source: "config", topic: "", relation: "is", value: "b" }] }),
			/facts\[0\].topic: must be a non-empty string of printable ASCII/);
		refuses(() => rootfs.image({ ...good, facts: [{ source: "config", topic: "os", relation: "is", value: "caf\u00e9" }] }),
			/facts\[0\].value: must be a non-empty string of printable ASCII, got "caf\u00e9"/);
		refuses(() => rootfs.image({ ...good, facts: Array(257).fill(good.facts[0]) }), /257 facts, over 256/);
		refuses(() => rootfs.image({ ...good, extra: 1 } as RootfsImageInput), /unknown option "extra"/);
	});
});

describe("rootfs modes", () => {
	const base = rootfs.image(good);
	test("ephemeral defaults to 64 MiB", () => {
		assert.equal(rootfs.ephemeral({ base }).maxDirtyBytes, 64 * 1024 * 1024);
		assert.equal(rootfs.ephemeral({ base, maxDirtyBytes: 1 << 20 }).maxDirtyBytes, 1 << 20);
	});
	test("a base must come from rootfs.image", () => {
		refuses(() => rootfs.ephemeral({ base: { ...base } }), /rootfs.ephemeral: base: must be an image from rootfs.image/);
	});
	test("persistent needs an absolute path", () => {
		refuses(() => rootfs.persistent({ base, path: ".sandbox/state" }),
			'rootfs.persistent: path: must be an absolute path, got ".sandbox/state"');
		assert.equal(rootfs.persistent({ base, path: "/x/state" }).path, "/x/state");
	});
	test("cow takes {base, writable} or a composed source; the store keeps 4096-byte blocks", () => {
		const store = { blockSize: 4096, list: async () => [], read: async () => [], write: async () => undefined };
		const c = rootfs.cow({ base, writable: store });
		assert.equal(c.kind, "cow");
		assert.equal(c.maxDirtyBytes, 64 * 1024 * 1024);
		assert.equal(c.writable, store);
		const s = rootfs.compose({ base, overlay: store });
		const c2 = rootfs.cow({ source: s, maxDirtyBytes: 1 << 20 });
		assert.equal(c2.base, base);
		assert.equal(c2.maxDirtyBytes, 1 << 20);
		refuses(() => rootfs.cow({ base, writable: { ...store, blockSize: 512 } }),
			"rootfs.cow: writable: blockSize 512: Kiln's block stores keep 4096-byte blocks");
		refuses(() => rootfs.cow({ base, writable: { blockSize: 4096 } as never }),
			"rootfs.cow: writable: not a SandboxBlockStore: list, read, write must be methods");
		refuses(() => rootfs.cow({ base } as never), /rootfs.cow: base and writable are required/);
		refuses(() => rootfs.cow({ source: { base, overlay: store } as never }),
			/rootfs.cow: source: must be rootfs.compose\(...\), got/);
		refuses(() => rootfs.cow({ source: s, base } as never), "rootfs.cow: takes {base, writable} or {source}, not both");
		refuses(() => rootfs.cow({ base, writable: store, maxDirtyBytes: 10 }),
			"rootfs.cow: maxDirtyBytes: must be from 4096 to 9007199254740991, got 10");
		refuses(() => rootfs.compose({ base, overlay: { ...store, flush: 1 } as never }),
			"rootfs.compose: overlay: flush must be a method when given, got 1");
		refuses(() => defineSandbox({ rootfs: s as never }), /defineSandbox: rootfs: must be .* or rootfs.cow\(...\)/);
	});
});

describe("fs", () => {
	test("bind: source and access required", () => {
		refuses(() => fs.bind({ source: "/p" } as never), 'fs.bind: access is required ("ro" or "rw")');
		refuses(() => fs.bind({ source: "/p", access: "rx" as never }), 'fs.bind: access: must be "ro" or "rw", got "rx"');
		refuses(() => fs.bind({ source: "p", access: "ro" }), 'fs.bind: source: must be an absolute path, got "p"');
	});
	test("bind: masks", () => {
		const ro = fs.bind({ source: "/p", access: "ro", mask: { paths: ["/.git", "/node_modules"] } });
		assert.deepEqual(ro.mask?.paths, ["/.git", "/node_modules"]);
		refuses(() => fs.bind({ source: "/p", access: "ro", mask: { paths: ["node_modules"] } }),
			'fs.bind: mask.paths[0]: must be an absolute path, got "node_modules"');
		refuses(() => fs.bind({ source: "/p", access: "ro", mask: { paths: ["/a/../.."] } }), /inside the bound directory/);
		refuses(() => fs.bind({ source: "/p", access: "rw", mask: { paths: ["/node_modules"] } }),
			/a writable \("rw"\) bind with mask.paths needs mask.storage/);
		const storage = fs.bind({ source: "/s", access: "rw" });
		refuses(() => fs.bind({ source: "/p", access: "ro", mask: { paths: ["/x"], storage } }), /mask.storage is for writable binds/);
		refuses(() => fs.bind({ source: "/p", access: "rw", mask: { paths: ["/x"], storage: fs.bind({ source: "/s", access: "ro" }) } }),
			/must be writable/);
		refuses(() => fs.bind({ source: "/p", access: "rw", mask: { paths: ["/x"], storage: fs.bind({ source: "/p/s", access: "rw" }) } }),
			/must not contain one another/);
		const rw = fs.bind({ source: "/p", access: "rw", mask: { paths: ["/node_modules"], storage } });
		assert.equal(rw.mask?.storage?.source, "/s");
	});
	test("memory and virtual", () => {
		refuses(() => fs.memory({ files: { "a": "b" } }), /^fs.memory: files\["a"\] must be an absolute path/);
		refuses(() => fs.virtual({} as never), /^fs.virtual: fileSystem must implement SandboxFileSystem/);
		refuses(() => fs.virtual(fs.memory(), { timeoutMs: 0 }), /timeoutMs must be an integer from 1 to 3600000, got 0/);
		const v = fs.virtual(fs.memory({ files: { "/a": "b" } }));
		assert.equal(v.kind, "virtual");
		assert.equal(v.timeoutMs, 5000);
	});
	test("network.policy", () => {
		refuses(() => network.policy(() => undefined, { timeoutMs: 0 }), /network.policy: timeoutMs: must be from 1 to 9500, got 0/);
		refuses(() => network.policy(() => undefined, { upstreamCaBundle: "ca.pem" }), /upstreamCaBundle: must be an absolute path/);
		refuses(() => defineSandbox({ rootfs: rootfs.image(good), network: { kind: "policy" } as never }),
			/defineSandbox: network: must be network.policy/);
	});
});

describe("defineSandbox and boot options", () => {
	const base = rootfs.image(good);
	test("rootfs is required and checked", () => {
		refuses(() => defineSandbox({} as never), /^defineSandbox: rootfs is required/);
		refuses(() => defineSandbox({ rootfs: "alpine" as never }), /defineSandbox: rootfs: must be rootfs.image/);
		refuses(() => defineSandbox({ rootfs: base, resources: { cpus: 0 } }),
			"defineSandbox: resources.cpus: must be from 1 to 64, got 0");
		refuses(() => defineSandbox({ rootfs: base, resources: { memoryMiB: 1.5 } }), /memoryMiB: must be an integer, got 1.5/);
		refuses(() => defineSandbox({ rootfs: base, cpus: 2 } as never), /unknown option "cpus"/);
	});
	test("defineSandbox starts nothing", () => {
		// No vmm anywhere: defining still works.
		const s = defineSandbox({ rootfs: base, kiln: { vmm: "/nonexistent/vmm" } });
		assert.equal(typeof s.boot, "function");
	});
	test("hostname, mounts and cwd", () => {
		assert.deepEqual(checkBoot(undefined), { hostname: undefined, mounts: [], cwd: undefined });
		refuses(() => checkBoot({ hostname: "-bad" }), /sandbox.boot: hostname: must be labels.*got "-bad"/);
		refuses(() => checkBoot({ hostname: "a".repeat(65) }), /hostname/);
		refuses(() => checkBoot({ cwd: "workspace" }), 'sandbox.boot: cwd: must be an absolute path, got "workspace"');
		refuses(() => checkBoot({ cwd: "/a/../b" }), /must not have "." or ".." components/);
		const bind = fs.bind({ source: "/p", access: "ro" });
		refuses(() => checkBoot({ mounts: { workspace: bind } }), /mounts\["workspace"\]: must be an absolute path/);
		refuses(() => checkBoot({ mounts: { "/": bind } }), /cannot mount over the root/);
		refuses(() => checkBoot({ mounts: { "/w": { kind: "bind", source: "/p" } as never } }), /must be fs.bind\(...\) or fs.virtual/);
		refuses(() => checkBoot({ mounts: { "/w": { kind: "virtual" } as never } }), /must be fs.bind\(...\) or fs.virtual/);
		const v = fs.virtual(fs.memory());
		assert.deepEqual(checkBoot({ mounts: { "/w": v } }).mounts, [["/w", v]]);
		const many: Record<string, typeof bind> = {};
		for (let i = 0; i < 9; i++)
			many[`/m${i}`] = bind;
		refuses(() => checkBoot({ mounts: many }), "sandbox.boot: mounts: 9 mounts, Kiln takes at most 8");
		assert.deepEqual(checkBoot({ hostname: "agent-42", mounts: { "/workspace/": bind }, cwd: "/workspace" }),
			{ hostname: "agent-42", mounts: [["/workspace", bind]], cwd: "/workspace" });
	});
});
