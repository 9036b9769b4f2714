// A fake Kiln installation for the unit tests: a kernel, an initramfs,
// their pins, and `vmm` (test/fake-vmm.ts behind a shell wrapper).

import { createHash } from "node:crypto";
import { chmodSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { rootfs } from "../src/index.js";
import type { SandboxImage } from "../src/index.js";

export interface FakeKiln {
	dir: string;
	vmm: string;
	kernel: string;
	initrd: string;
	pins: string;
	image: SandboxImage;
	remove(): void;
}

export const sha = (b: string | Buffer): string => `sha256:${createHash("sha256").update(b).digest("hex")}`;

export function fakeKiln(): FakeKiln {
	const dir = mkdtempSync(path.join(os.tmpdir(), "kiln-sdk-fake-"));
	const kernel = path.join(dir, "vmlinux");
	const initrd = path.join(dir, "initramfs.cpio");
	writeFileSync(kernel, "not really a kernel\n");
	writeFileSync(initrd, "not really an initramfs\n");
	const pins = path.join(dir, "pins.json");
	writeFileSync(pins, JSON.stringify({ "vmlinux": sha("not really a kernel\n"), "initramfs.cpio": sha("not really an initramfs\n") }));
	const script = fileURLToPath(new URL("./fake-vmm.js", import.meta.url));
	const vmm = path.join(dir, "vmm");
	writeFileSync(vmm, `#!/bin/sh\nexec "${process.execPath}" "${script}" "$@"\n`);
	chmodSync(vmm, 0o755);
	const image = rootfs.image({
		name: "test-image-1",
		path: path.join(dir, "image.ext4"),
		format: "raw",
		architecture: "x64",
		digest: sha("image"),
		sizeBytes: 4096n,
		facts: [{ source: "config", topic: "os", relation: "distribution", value: "testix" }],
	});
	return { dir, vmm, kernel, initrd, pins, image, remove: () => rmSync(dir, { recursive: true, force: true }) };
}
