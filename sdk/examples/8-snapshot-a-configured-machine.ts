// Scenario 8 of the seed: snapshot a configured machine. A VM on a cow
// root configures its machine (the changes land in machineState, an
// AgentMachineStore of examples/block-stores.ts); rootfs.compose pairs
// the image with them, rootfs.flatten writes one standalone qcow2 image
// into imageStore (a DirectoryBlockStore), and rootfs.bytes streams that
// image's bytes to an "upload".
// Asserts what the scenario claims: the streamed bytes are the image the
// descriptor names (their SHA-256 is its digest, their length its file's);
// QEMU's own checker accepts them (qemu-img check, when Debian's
// qemu-utils is installed); the image holds the configured machine (a VM
// booted on it, read-only, finds the change).
//
// The base is Kiln's small test image (kiln-test, 32 MiB, `make guest`)
// rather than the Debian agent image of the other scenarios: flatten
// reads, and bytes hashes, every byte of the image, and the 905 MiB
// agent image takes minutes of that in the emulated test harness. The
// code is the same for any image package's image.

import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { createHash } from "node:crypto";
import { closeSync, mkdtempSync, openSync, readFileSync, rmSync, writeSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { defineSandbox, rootfs } from "@kiln/sandbox";
import { AgentMachineStore, DirectoryBlockStore } from "./block-stores.js";

const images = process.env["KILN_IMAGES"] ??
	path.resolve(path.dirname(fileURLToPath(import.meta.url)), "../../../build/images");
const d = JSON.parse(readFileSync(path.join(images, "kiln-test.json"), "utf8")) as Record<string, unknown>;
const kilnTest = rootfs.image({
	name: String(d["name"]),
	path: String(d["path"]),
	format: String(d["format"]),
	architecture: process.arch,
	digest: String(d["digest"]),
	sizeBytes: BigInt(Number(d["sizeBytes"])),
	facts: [],
});

const scratch = mkdtempSync(path.join(os.tmpdir(), "kiln-scenario-8-"));
try {
	// A machine configured on a cow root (scenario 2).
	const machineState = new AgentMachineStore({ bucket: "agent-machines", keyPrefix: "lanes/exporter" });
	{
		await using vm = await defineSandbox({
			rootfs: rootfs.cow({ base: kilnTest, writable: machineState }),
		}).boot();
		const r = await vm.exec("sh", ["-c", "echo configured > /root/state && sync"]);
		assert.equal(r.exitCode, 0, r.stderr);
	}

	const imageStore = new DirectoryBlockStore(path.join(scratch, "images"));

	const source = rootfs.compose({
		base: kilnTest,
		overlay: machineState,
	});

	const image = await rootfs.flatten({
		format: "qcow2",
		source,
		dest: imageStore,
		clusterSize: 65536,
	});
	assert.equal(image.format, "qcow2");
	assert.equal(image.sizeBytes, kilnTest.sizeBytes, "the disk inside is the base's size");
	console.log(`# flattened: ${image.name} ${image.digest} (${image.stored?.fileBytes} bytes in imageStore)`);

	// The upload: here a file, hashed as it goes.
	const uploaded = path.join(scratch, "upload.qcow2");
	const fd = openSync(uploaded, "wx", 0o600);
	const hash = createHash("sha256");
	let length = 0n;
	const upload = async (chunk: Uint8Array): Promise<void> => {
		hash.update(chunk);
		length += BigInt(chunk.length);
		writeSync(fd, chunk);
	};
	try {
		for await (const chunk of rootfs.bytes(image)) {
			await upload(chunk);
		}
	} finally {
		closeSync(fd);
	}
	assert.equal(`sha256:${hash.digest("hex")}`, image.digest, "the streamed bytes are the image");
	assert.equal(length, image.stored?.fileBytes);
	console.log(`# rootfs.bytes: ${length} bytes, sha256 is the descriptor's digest`);

	let qemuImg = true;
	try {
		execFileSync("qemu-img", ["--version"], { stdio: "ignore" });
	} catch {
		qemuImg = false;
	}
	if (qemuImg) {
		const out = execFileSync("qemu-img", ["check", "-f", "qcow2", uploaded], { encoding: "utf8" });
		assert.match(out, /No errors were found on the image/);
		console.log("# qemu-img check: No errors were found on the image.");
	} else {
		console.log("# qemu-img not installed: its check not run");
	}

	// The image boots as a base (copied from imageStore to a local file
	// first, verified), read-only: the configured machine is in it.
	{
		await using vm = await defineSandbox({ rootfs: image }).boot();
		const r = await vm.exec("cat", ["/root/state"]);
		assert.equal(r.exitCode, 0, r.stderr);
		assert.equal(r.stdout, "configured\n");
		console.log("# booted on the flattened image: /root/state is \"configured\"");
	}
	// The local copy a boot made (Documentation/sdk.md): this run's alone.
	rmSync(image.path, { force: true });
} finally {
	rmSync(scratch, { recursive: true, force: true });
}
