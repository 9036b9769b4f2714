// Locating Kiln (option, then environment, then the build tree) and the
// pins of the kernel and initramfs.

import assert from "node:assert/strict";
import { mkdirSync, utimesSync, writeFileSync } from "node:fs";
import path from "node:path";
import { describe, test } from "./flat.js";
import { PinMismatchError, SandboxConfigError } from "../src/errors.js";
import { cachedSha256, locateKiln, locateVmm, readPin, treeRoot, verifyPins } from "../src/locate.js";
import { fakeKiln, sha } from "./kiln-fixture.js";

describe("locateKiln", () => {
	test("options first, then KILN_VMM and KILN_GUEST_DIR, then the tree", () => {
		const k = fakeKiln();
		const tree = fakeKiln();
		try {
			mkdirSync(path.join(tree.dir, "build", "guest"), { recursive: true });
			for (const f of ["vmm", "guest/vmlinux", "guest/initramfs.cpio"])
				writeFileSync(path.join(tree.dir, "build", f), "x");
			const fromTree = locateKiln({}, { PATH: "" }, tree.dir);
			assert.equal(fromTree.vmm, path.join(tree.dir, "build", "vmm"));
			assert.equal(fromTree.kernel, path.join(tree.dir, "build", "guest", "vmlinux"));
			assert.equal(fromTree.kernelPins, path.join(tree.dir, "build", "guest", "pins.json"));

			const fromEnv = locateKiln({}, { KILN_VMM: k.vmm, KILN_GUEST_DIR: k.dir }, tree.dir);
			assert.deepEqual([fromEnv.vmm, fromEnv.kernel, fromEnv.initrd, fromEnv.initrdPins], [k.vmm, k.kernel, k.initrd, k.pins]);

			const fromOptions = locateKiln({ vmm: tree.vmm, kernel: tree.kernel, initrd: tree.initrd, pins: k.pins },
				{ KILN_VMM: k.vmm, KILN_GUEST_DIR: k.dir }, tree.dir);
			assert.deepEqual([fromOptions.vmm, fromOptions.kernel, fromOptions.kernelPins], [tree.vmm, tree.kernel, k.pins]);
		} finally {
			k.remove();
			tree.remove();
		}
	});
	test("what is missing is said with where it was looked for", () => {
		assert.throws(() => locateKiln({}, { PATH: "" }, null),
			/cannot find Kiln's vmm: pass defineSandbox\(\{kiln: \{vmm\}\}\), set KILN_VMM, or run the SDK from a built Kiln tree/);
		assert.throws(() => locateKiln({}, { PATH: "", KILN_VMM: "/nonexistent/vmm" }, null),
			/KILN_VMM: "\/nonexistent\/vmm" is not a file/);
		assert.throws(() => locateKiln({ vmm: "/bin/sh", kernel: "/nonexistent/vmlinux" }, { PATH: "" }, null),
			(e: Error) => e instanceof SandboxConfigError && /kiln.kernel: "\/nonexistent\/vmlinux" is not a file/.test(e.message));
		assert.throws(() => locateKiln({ vmm: "/bin/sh" }, { PATH: "" }, "/nonexistent-tree"),
			/cannot find Kiln's kernel: .*\/nonexistent-tree\/build\/guest\/vmlinux is missing: make guest/);
		assert.throws(() => locateKiln({ vmmm: "x" } as never), /kiln: unknown option "vmmm"/);
	});
	test("locateVmm: the vmm alone, a guest neither looked for nor needed", () => {
		const k = fakeKiln();
		try {
			// A KILN_GUEST_DIR without a guest, a tree without one: no matter.
			assert.equal(locateVmm({}, { PATH: "", KILN_VMM: k.vmm, KILN_GUEST_DIR: "/nonexistent" }, "/nonexistent-tree"), k.vmm);
			assert.equal(locateVmm({ vmm: k.vmm, kernel: "/nonexistent/vmlinux" }, { PATH: "" }, null), k.vmm);
			assert.equal(locateVmm({}, { PATH: k.dir }, null), k.vmm);
			assert.throws(() => locateVmm({}, { PATH: "" }, null), /cannot find Kiln's vmm/);
			assert.throws(() => locateVmm({ vmm: "/nonexistent/vmm" }, { PATH: "" }, null), /kiln.vmm: "\/nonexistent\/vmm" is not a file/);
		} finally {
			k.remove();
		}
	});
	test("the SDK knows its own tree", () => {
		// dist/test/locate.test.js sits where dist/src/locate.js does.
		assert.equal(treeRoot(new URL("../src/locate.js", import.meta.url).href),
			path.resolve(path.dirname(new URL(import.meta.url).pathname), "../../.."));
	});
});

describe("pins", () => {
	test("matching digests pass", async () => {
		const k = fakeKiln();
		try {
			await verifyPins(locateKiln({ vmm: k.vmm, kernel: k.kernel, initrd: k.initrd }, {}, null));
		} finally {
			k.remove();
		}
	});
	test("a mismatch is refused naming the path and both digests", async () => {
		const k = fakeKiln();
		try {
			writeFileSync(k.initrd, "tampered\n");
			await assert.rejects(verifyPins(locateKiln({ vmm: k.vmm, kernel: k.kernel, initrd: k.initrd }, {}, null)),
				(e: Error) => {
					assert.ok(e instanceof PinMismatchError);
					assert.equal(e.message, `${k.initrd} has ${sha("tampered\n")}, but its pin in ${k.pins} is ` +
						`${sha("not really an initramfs\n")}: refusing to boot it`);
					return true;
				});
		} finally {
			k.remove();
		}
	});
	test("a digest is remembered per file identity; a changed file is hashed again", async () => {
		const k = fakeKiln();
		try {
			const kiln = locateKiln({ vmm: k.vmm, kernel: k.kernel, initrd: k.initrd }, {}, null);
			// Old enough not to be racy.
			const old = new Date(Date.now() - 10_000);
			utimesSync(k.initrd, old, old);
			await new Promise((r) => setTimeout(r, 150));
			assert.equal(await cachedSha256(k.initrd), sha("not really an initramfs\n"));
			await verifyPins(kiln);
			// The same size, another content: mtime and ctime move, so it is
			// hashed again and refused.
			writeFileSync(k.initrd, "not really an initramfZ\n");
			await assert.rejects(verifyPins(kiln), PinMismatchError);
			assert.equal(await cachedSha256(k.initrd), sha("not really an initramfZ\n"));
		} finally {
			k.remove();
		}
	});
	test("a missing or malformed pin is refused", () => {
		const k = fakeKiln();
		try {
			assert.throws(() => readPin(path.join(k.dir, "nope.json"), k.kernel),
				/no pin for .*vmlinux: .*nope.json: ENOENT.*make guest writes it/);
			writeFileSync(k.pins, "{");
			assert.throws(() => readPin(k.pins, k.kernel), /pins.json: not JSON/);
			writeFileSync(k.pins, JSON.stringify({ vmlinux: "sha256:abc" }));
			assert.throws(() => readPin(k.pins, k.kernel), /has no "vmlinux": "sha256:<64 hex>" entry/);
		} finally {
			k.remove();
		}
	});
});
