// Facets and personas (issue 38; Documentation/personas.md): one VM, the
// operator's full view of it, a reviewer that may only read /workspace
// and a builder that may only run commands, each on a scoped control
// socket the vmm enforces. Asserts what it shows, against the real vmm:
// run it where the VM can boot (the harness, or a host with KVM):
// `tools/sdk-build && node sdk/dist/examples/personas.js` (in the harness,
// 2026-12-07: every refusal from the vmm, exit 0). Not one of the seed's
// numbered scenarios, so selftests/kvm/sdk.sh does not run it; the
// conformance subset (selftests/conformance.list) runs it unchanged
// through both built-in launchers: the VM's in the harness, the
// namespace sandbox's on the host.

import assert from "node:assert/strict";
import { existsSync } from "node:fs";
import { PersonaRefusedError, SandboxConfigError, defineSandbox, fs } from "@kiln/sandbox";
import { image as debian12Agent } from "@kiln/sandbox-image-debian-12-agent";

const workspace = fs.memory({ files: { "/README.md": "# Task\n", "/src/a.ts": "export {};\n" } });
const sandbox = defineSandbox({ rootfs: debian12Agent });

await using vm = await sandbox.boot({
	mounts: { "/workspace": fs.virtual(workspace) },
	cwd: "/workspace",
	tools: { files: { command: "/usr/local/bin/files-mcp", args: ["--root", "/workspace"] } },
});

// The operator's view: every facet, on the VM's full control socket.
assert.deepEqual(await vm.filesystem.glob("/workspace/**/*.ts"), ["/workspace/src/a.ts"]);
assert.deepEqual((await vm.tools.list()).map((t) => `${t.name}: ${t.command}`), ["files: /usr/local/bin/files-mcp"]);

const refused = (facet: RegExp) => (e: unknown): boolean => {
	assert.ok(e instanceof PersonaRefusedError, String(e));
	console.log(`refused: ${e.message}`);
	return facet.test(e.message);
};

// A reviewer: /workspace read-only, nothing else.
{
	await using reviewer = await vm.forPersona({
		persona: "reviewer",
		facets: { filesystem: { paths: ["/workspace"], write: false } },
		expiresMs: 10 * 60 * 1000,
	});
	assert.equal(await reviewer.filesystem.readText("/workspace/README.md"), "# Task\n");
	assert.deepEqual(await reviewer.filesystem.glob("/workspace/**/*.ts"), ["/workspace/src/a.ts"]);
	await assert.rejects(reviewer.filesystem.read("/workspace/../etc/shadow"), refused(/persona 'reviewer': facet filesystem/));
	await assert.rejects(reviewer.filesystem.read("/etc/shadow"), refused(/outside its paths/));
	await assert.rejects(reviewer.filesystem.write("/workspace/README.md", "changed"), refused(/write/));
	await assert.rejects(reviewer.shell.exec("id"), refused(/facet shell is not granted/));
	assert.equal(await workspace.readFile("/README.md").then((b) => new TextDecoder().decode(b)), "# Task\n");
}

// A builder: commands only, as a guest user of its own.
const builder = await vm.forPersona({ persona: "builder", facets: { shell: true } });
const id = await builder.shell.exec("id", ["-u"]);
assert.equal(id.stdout.trim(), String(builder.uid), "its commands run as the grant's uid");
await assert.rejects(builder.filesystem.list("/workspace"), refused(/facet filesystem is not granted/));
const socket = builder.socket;
await builder.revoke();
assert.ok(!existsSync(socket), "revoked: its socket is gone");
await assert.rejects(builder.shell.exec("id"), SandboxConfigError);
console.log("personas: every refusal came from the vmm");
