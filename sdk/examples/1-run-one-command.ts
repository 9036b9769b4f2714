// Scenario 1 of the seed: run one command in a clean VM, with a
// memory-backed workspace. A pinned read-only image (the Debian image
// `make image` builds, imported as its image package), the workspace
// served from this process's memory over Kiln's virtual-fs socket.
// Asserts what the scenario claims: the command reads the workspace
// file; the workspace is host-owned memory (what the host changes the
// guest sees, what the guest writes the host holds, and nothing of it is
// in the image); no machine state is left.
//
// The seed runs `node --version`: the image's facts say whether it has
// Node.js (the lead's image change adds Debian's nodejs); until then
// `python3 --version` stands in, and the example says so.

import assert from "node:assert/strict";
import { defineSandbox, fs } from "@kiln/sandbox";
import { image as debian12Agent } from "@kiln/sandbox-image-debian-12-agent";

const hasNode = debian12Agent.facts.some((f) => f.topic === "command" && f.relation === "available" && f.value === "node");
const runtime = hasNode ? "node" : "python3";
if (!hasNode)
	console.log("# the image has no node (its facts): python3 --version stands in for node --version");

const workspace = fs.memory({
	files: {
		"/prompt.txt": "Print the Node.js version\n",
	},
});

const sandbox = defineSandbox({
	rootfs: debian12Agent,
});

{
	await using vm = await sandbox.boot({
		mounts: {
			"/workspace": fs.virtual(workspace),
		},
		cwd: "/workspace",
	});

	const result = await vm.exec("sh", [
		"-lc",
		`cat prompt.txt && ${runtime} --version`,
	]);

	if (result.exitCode !== 0) {
		throw new Error(result.stderr);
	}

	const [prompt, version] = [result.stdout.split("\n")[0], (result.stdout + result.stderr).split("\n").slice(1).join("\n")];
	assert.equal(prompt, "Print the Node.js version");
	assert.match(version, hasNode ? /^v\d+\.\d+\.\d+/ : /^Python 3\.\d+/);
	console.log(`# cat prompt.txt && ${runtime} --version: ${JSON.stringify(result.stdout)}`);

	// Host-owned memory: the host's change is what the guest reads next,
	await workspace.writeFile("/prompt.txt", new TextEncoder().encode("Changed by the host\n"));
	assert.equal((await vm.exec("cat", ["prompt.txt"])).stdout, "Changed by the host\n");
	// and what the guest writes lands in this process.
	const w = await vm.exec("sh", ["-c", "mkdir -p out && echo from-the-guest > out/answer.txt && ls -la /workspace/out"]);
	assert.equal(w.exitCode, 0, w.stderr);
	assert.equal(new TextDecoder().decode(await workspace.readFile("/out/answer.txt")), "from-the-guest\n");
	// The image is read-only: the mount point needed no write to it.
	const ro = await vm.exec("sh", ["-c", "touch /etc/kiln-scenario-1 2>&1; echo $?"]);
	assert.notEqual(ro.stdout.trim().split("\n").pop(), "0", "the image root is read-only");
	const facts = await vm.environmentFacts();
	assert.ok(facts.some((f) => f.topic === "rootfs-write-mode" && f.value === "readonly"), JSON.stringify(facts.slice(0, 20)));
	console.log("# the workspace is this process's memory both ways; the root stays read-only");
}
assert.deepEqual(await workspace.readDir("/"), ["out", "prompt.txt"], "the workspace outlives the VM, in this process");
