// Image packages (guest/images/image-package.sh): a package made from a
// descriptor, imported by its name, passed to rootfs.image and used as a
// root the way the seed uses `@torkbot/sandbox-image-*`'s `image`.

import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { existsSync, mkdirSync, mkdtempSync, readFileSync, readlinkSync, rmSync, symlinkSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";
import { describe, test } from "./flat.js";
import { SandboxConfigError, defineSandbox, rootfs } from "../src/index.js";
import type { RootfsImageInput } from "../src/index.js";

const script = fileURLToPath(new URL("../../../guest/images/image-package.sh", import.meta.url));
const top = mkdtempSync(path.join(tmpdir(), "kiln-image-package-"));
process.on("exit", () => rmSync(top, { recursive: true, force: true }));

const digest = "sha256:" + "0123456789abcdef".repeat(4);
const descriptor = {
	name: "debian-12-fake",
	path: "/srv/images/debian-12-fake-0123.ext4",
	format: "raw",
	architecture: "x86_64",
	digest,
	sizeBytes: 33554432,
};
const facts = [
	{ source: "config", topic: "os", relation: "distribution", value: "debian" },
	{ source: "config", topic: "os", relation: "packages_installed", value: 206 },
];

let made = 0;

/** Writes DIR/NAME.json (and NAME.facts.json) and runs the script on it:
 * its status and stderr, and the package directory. */
function generate(d: Record<string, unknown>, f: unknown[] | null = facts): { dir: string; status: number; stderr: string } {
	const dir = path.join(top, `case-${++made}`);
	mkdirSync(dir);
	const desc = path.join(dir, `${String(d["name"] ?? "x")}.json`);
	writeFileSync(desc, JSON.stringify(d, null, 2) + "\n");
	if (f !== null)
		writeFileSync(desc.replace(/\.json$/, ".facts.json"), JSON.stringify(f, null, 2) + "\n");
	try {
		execFileSync("bash", [script, desc], { stdio: ["ignore", "pipe", "pipe"], encoding: "utf8" });
		return { dir: desc.replace(/\.json$/, ""), status: 0, stderr: "" };
	} catch (e) {
		const err = e as { status: number; stderr: string };
		return { dir: desc.replace(/\.json$/, ""), status: err.status, stderr: err.stderr };
	}
}

async function load(dir: string): Promise<RootfsImageInput> {
	const m = await import(pathToFileURL(path.join(dir, "index.js")).href) as { image: RootfsImageInput };
	return m.image;
}

describe("image packages", () => {
	test("a descriptor becomes a package rootfs.image takes as it is", async () => {
		const { dir, status, stderr } = generate(descriptor);
		assert.equal(status, 0, stderr);
		const pkg = JSON.parse(readFileSync(path.join(dir, "package.json"), "utf8")) as Record<string, unknown>;
		assert.equal(pkg["name"], "@kiln/sandbox-image-debian-12-fake");
		assert.equal(pkg["version"], "0.1.0-image.sha0123456789ab");
		assert.equal(pkg["type"], "module");
		assert.equal(readlinkSync(path.join(dir, "image.raw")), descriptor.path);
		assert.match(readFileSync(path.join(dir, "index.d.ts"), "utf8"), /export declare const image: \{\n\treadonly name: "debian-12-fake";/);

		const image = await load(dir);
		assert.ok(Object.isFrozen(image));
		const img = rootfs.image(image);
		assert.equal(img.name, "debian-12-fake");
		assert.equal(img.path, path.join(dir, "image.raw"), "the path is the module's own");
		assert.equal(img.digest, digest);
		assert.equal(img.sizeBytes, 33554432n);
		assert.equal(img.architecture, "x86_64");
		assert.deepEqual(img.facts.map((f) => f.value), ["debian", "206"], "a number value is a string");
	});

	test("imported by its name through a node_modules link (a file: dependency)", async () => {
		const { dir } = generate({ ...descriptor, name: "debian-12-linked" });
		const app = path.join(top, "app");
		mkdirSync(path.join(app, "node_modules", "@kiln"), { recursive: true });
		symlinkSync(dir, path.join(app, "node_modules", "@kiln", "sandbox-image-debian-12-linked"));
		writeFileSync(path.join(app, "main.mjs"),
			'export { image } from "@kiln/sandbox-image-debian-12-linked";\n');
		const { image } = await import(pathToFileURL(path.join(app, "main.mjs")).href) as { image: RootfsImageInput };
		// The path resolves through the link to the package's own directory.
		assert.equal(image.path, path.join(dir, "image.raw"));
		// Used where the seed uses it: as the root, or a base.
		const sandbox = defineSandbox({ rootfs: image });
		assert.equal(typeof sandbox.boot, "function");
		assert.equal(rootfs.ephemeral({ base: image }).base.name, "debian-12-linked");
		assert.equal(rootfs.persistent({ base: image, path: "/x/state" }).base.digest, digest);
	});

	test("without a facts file the image has no facts", async () => {
		const { dir, status } = generate({ ...descriptor, name: "no-facts" }, null);
		assert.equal(status, 0);
		assert.deepEqual(rootfs.image(await load(dir)).facts, []);
	});

	test("rootfs.image refuses what the package passes but Kiln cannot take", async () => {
		const cases: [Record<string, unknown>, unknown[], RegExp, (new (...a: never[]) => Error)?][] = [
			[{ format: "vmdk" }, facts, /^rootfs.image: format must be "raw" \(an ext4 file system\) or "qcow2" .*got "vmdk"/],
			[{ architecture: "arm64" }, facts, /architecture must be "x64" or "x86_64".*got "arm64"/],
			[{ sizeBytes: 4097 }, facts, /sizeBytes must be positive and a multiple of 4096, got 4097n/],
			[{ name: "debian-latest" }, facts, /names a moving alias \("latest"\): pin a version/],
			[{}, [{ source: "guest", topic: "os", relation: "is", value: "x" }], /facts\[0\].source: an image's facts are "config" facts/],
			[{}, [{ source: "config", topic: "os", relation: "is", value: "caf\u00e9" }], /facts\[0\].value: must be a non-empty string of printable ASCII/],
			[{}, [{ source: "config", topic: "os", relation: "is", value: "x", extra: 1 }], /facts\[0\]: unknown key "extra"/],
			[{}, Array(257).fill(facts[0]), /257 facts, over 256/],
		];
		for (const [change, f, message, kind] of cases) {
			const { dir, status, stderr } = generate({ ...descriptor, ...change }, f);
			assert.equal(status, 0, stderr);
			const image = await load(dir);
			for (const use of [() => rootfs.image(image), () => defineSandbox({ rootfs: image })]) {
				assert.throws(use, (e: Error) => {
					assert.ok(e instanceof (kind ?? SandboxConfigError), `${e.name}: ${e.message}`);
					assert.match(e.message, message);
					return true;
				}, JSON.stringify(change));
			}
		}
	});

	test("a size that is not an integer fails the import, naming the file", async () => {
		const { dir, status } = generate({ ...descriptor, name: "bad-size", sizeBytes: "big" });
		assert.equal(status, 0);
		await assert.rejects(load(dir), /image.json: sizeBytes must be an integer, got "big"/);
	});

	test("the script refuses a descriptor it cannot name or pin, and writes nothing", () => {
		const cases: [Record<string, unknown>, RegExp][] = [
			[{ ...descriptor, digest: "sha256:ABC" }, /"digest" is "sha256:ABC", not sha256: and 64 lowercase hex/],
			[{ ...descriptor, digest: undefined }, /no single string "digest"/],
			[{ ...descriptor, name: "a b" }, /"name" is "a b", not a name of/],
			[{ ...descriptor, path: "images/x.ext4" }, /"path" is "images\/x.ext4", not an absolute path/],
			[{ ...descriptor, path: "/a\"b" }, /no single string "path"/],
		];
		for (const [d, message] of cases) {
			const { dir, status, stderr } = generate(d);
			assert.equal(status, 1, JSON.stringify(d));
			assert.match(stderr, /^image-package: /);
			assert.match(stderr, message);
			assert.equal(existsSync(dir), false);
		}
	});
});
