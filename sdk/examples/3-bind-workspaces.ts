// Scenario 3 of the seed, its fs.bind part (3-virtual-workspaces.ts is
// its fs.virtual part): a host directory bound read-only with masked
// paths, then read-write with mask storage. A temporary directory stands
// in for /Users/alice/project. The root is the bare read-only image, as
// the seed writes it: /workspace, which the image lacks, is made without
// writing the image.

import assert from "node:assert/strict";
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { defineSandbox, fs } from "@kiln/sandbox";
import { image as debian12Agent } from "@kiln/sandbox-image-debian-12-agent";

const scratch = mkdtempSync(path.join(os.tmpdir(), "kiln-sdk-scenario3-"));
const project = path.join(scratch, "project");
mkdirSync(path.join(project, ".git"), { recursive: true });
mkdirSync(path.join(project, "node_modules", "left-pad"), { recursive: true });
mkdirSync(path.join(project, "src"), { recursive: true });
writeFileSync(path.join(project, ".git", "config"), "[core]\n");
writeFileSync(path.join(project, "src", "input.json"), JSON.stringify({ repo: "torkbot/sandbox" }));

const sandbox = defineSandbox({
	rootfs: debian12Agent,
});

const configFacts = sandbox.environmentFacts();
const has = (facts: { topic: string; relation: string; value: string }[], t: string, r: string, v: string) =>
	facts.some((f) => f.topic === t && f.relation === r && f.value === v);
assert.ok(has(configFacts, "rootfs-image", "is", "debian-12-agent"), JSON.stringify(configFacts));
assert.ok(has(configFacts, "rootfs-write-mode", "is", "readonly"));
assert.ok(has(configFacts, "network-egress", "is", "none"));
assert.ok(has(configFacts, "os", "distribution", "debian"), "the image's facts are the definition's");
assert.ok(configFacts.every((f) => f.source === "config"));
console.log("# sandbox.environmentFacts() without a VM");

try {
	{
		await using vm = await sandbox.boot({
			hostname: "agent-42",
			mounts: {
				"/workspace": fs.bind({
					source: project,
					access: "ro",
					mask: {
						paths: ["/.git", "/node_modules"],
					},
				}),
			},
			cwd: "/workspace",
		});

		const ls = await vm.exec("ls", ["-A"]);
		assert.equal(ls.stdout, "src\n", "masked paths are absent, cwd is /workspace");
		assert.equal((await vm.exec("cat", ["src/input.json"])).stdout, '{"repo":"torkbot/sandbox"}');
		const write = await vm.exec("sh", ["-c", "echo x > /workspace/new.txt"]);
		assert.notEqual(write.exitCode, 0);
		assert.match(write.stderr, /Read-only file system/);
		assert.equal((await vm.exec("hostname")).stdout, "agent-42\n");
		const facts = await vm.environmentFacts();
		assert.ok(has(facts, "hostname", "is", "agent-42"));
		assert.ok(has(facts, "mount:/workspace", "access", "ro"));
		assert.ok(facts.some((f) => f.source === "guest"), "the guest's own facts follow");
		console.log("# read-only bind: masked paths absent, writes refused, hostname and cwd set");
	}

	const storageDir = path.join(scratch, "mask-storage");
	mkdirSync(storageDir);
	const maskStorage = fs.bind({
		source: storageDir,
		access: "rw",
	});

	const workspace = fs.bind({
		source: project,
		access: "rw",
		mask: {
			paths: ["/node_modules"],
			storage: maskStorage,
		},
	});

	{
		await using vm = await sandbox.boot({ mounts: { "/workspace": workspace }, cwd: "/workspace" });
		const r = await vm.exec("sh", ["-c",
			"mkdir -p node_modules/pkg && echo masked > node_modules/pkg/index.js && echo out > out.txt && ls node_modules"]);
		assert.equal(r.exitCode, 0, r.stderr);
		assert.equal(r.stdout, "pkg\n", "the guest sees the storage under the masked path");
	}
	assert.equal(readFileSync(path.join(project, "out.txt"), "utf8"), "out\n");
	assert.ok(!existsSync(path.join(project, "node_modules", "pkg")), "masked entries stay out of the project");
	assert.ok(existsSync(path.join(project, "node_modules", "left-pad")), "the project's own stay");
	assert.equal(readFileSync(path.join(storageDir, "node_modules", "pkg", "index.js"), "utf8"), "masked\n");
	console.log("# writable bind: masked entries go to the mask storage, the rest to the project");
} finally {
	rmSync(scratch, { recursive: true, force: true });
}
