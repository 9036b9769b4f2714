// Facets and personas (issue 38; Documentation/personas.md): one VM, the
// operator's full view of it, and a reviewer that may only read
// /workspace. Run it in a Kiln tree where the VM can boot (the harness,
// or a host with KVM): `tools/sdk-build && node sdk/dist/examples/personas.js`.
// Not one of the seed's numbered scenarios, so selftests/kvm/sdk.sh does
// not run it.

import { PersonaRefusedError, defineSandbox, fs } from "@kiln/sandbox";
import { image as debian12Agent } from "@kiln/sandbox-image-debian-12-agent";

const workspace = fs.memory({ files: { "/README.md": "# Task\n", "/src/a.ts": "export {};\n" } });
const sandbox = defineSandbox({ rootfs: debian12Agent });

await using vm = await sandbox.boot({
	mounts: { "/workspace": fs.virtual(workspace) },
	cwd: "/workspace",
	tools: { files: { command: "/usr/local/bin/files-mcp", args: ["--root", "/workspace"] } },
});

// The operator's view: every facet, on the VM's full control socket.
console.log(await vm.filesystem.glob("/workspace/**/*.ts")); // [ '/workspace/src/a.ts' ]
console.log((await vm.tools.list()).map((t) => `${t.name}: ${t.command}`)); // [ 'files: /usr/local/bin/files-mcp' ]

// A reviewer: /workspace read-only, nothing else, on a socket of its own.
await using reviewer = await vm.forPersona({
	persona: "reviewer",
	facets: { filesystem: { paths: ["/workspace"], write: false } },
	expiresMs: 10 * 60 * 1000,
});
console.log(await reviewer.filesystem.readText("/workspace/README.md")); // # Task
for (const attempt of [
	() => reviewer.filesystem.read("/workspace/../etc/shadow"),
	() => reviewer.filesystem.write("/workspace/README.md", "changed"),
	() => reviewer.shell.exec("id"),
]) {
	try {
		await attempt();
		throw new Error("the grant should not allow this");
	} catch (e) {
		if (!(e instanceof PersonaRefusedError))
			throw e;
		console.log(e.message); // persona 'reviewer': facet ... (the vmm's refusal)
	}
}
