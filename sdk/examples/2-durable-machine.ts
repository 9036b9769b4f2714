// Scenario 2 of the seed: give each agent a durable machine. The machine
// changes of a VM on the Debian image (its image package, as scenario 1)
// go to a block store this program owns (AgentMachineStore: here "object
// storage" in this process's memory, examples/block-stores.ts), through
// rootfs.cow(...); the read-only image is never written.
// Asserts what the scenario claims: a change the first VM made is there
// when a second VM boots on the same store; the store holds only the
// changed blocks (the deltas), not the image; the guest's sync reached
// the store's flush; a second VM on the store while the first runs is
// refused (one writer).

import assert from "node:assert/strict";
import { defineSandbox, rootfs } from "@kiln/sandbox";
import { image as debian12Agent } from "@kiln/sandbox-image-debian-12-agent";
import { AgentMachineStore } from "./block-stores.js";

const machineState = new AgentMachineStore({
	bucket: "agent-machines",
	keyPrefix: "lanes/github-worker",
});

const sandbox = defineSandbox({
	rootfs: rootfs.cow({
		base: debian12Agent,
		writable: machineState,
	}),
});

const install = "mkdir -p /opt/toolchain && echo 'toolchain 1.2.3' > /opt/toolchain/VERSION && sync";
{
	await using vm = await sandbox.boot();
	const r = await vm.exec("sh", ["-c", install]);
	assert.equal(r.exitCode, 0, r.stderr);
	const facts = await vm.environmentFacts();
	assert.ok(facts.some((f) => f.topic === "rootfs-write-mode" && f.value === "cow"), "rootfs-write-mode is cow");
	// The guest's sync is a FLUSH: it completed once the store's flush did.
	assert.ok(machineState.flushes >= 1, "the guest's sync reached store.flush");

	// One writer: the same store on a second VM meanwhile is refused.
	await assert.rejects(sandbox.boot(), (e: Error) => {
		assert.match(e.message, /writer claim/, e.message);
		return true;
	});
	console.log("# a second VM on the store while the first runs: refused (the writer's claim)");
}

const blocks = await machineState.count(debian12Agent.digest);
const imageBlocks = Number(debian12Agent.sizeBytes / 4096n);
assert.ok(blocks > 0, "the store holds the machine's changes");
assert.ok(blocks < imageBlocks / 10, `only deltas: ${blocks} blocks of the image's ${imageBlocks}`);
console.log(`# first boot: installed /opt/toolchain; the store holds ${blocks} changed blocks ` +
	`(${(blocks * 4096 / 1048576).toFixed(1)} MiB of the image's ${imageBlocks * 4096 / 1048576} MiB)`);

{
	await using vm = await sandbox.boot();
	const r = await vm.exec("cat", ["/opt/toolchain/VERSION"]);
	assert.equal(r.exitCode, 0, r.stderr);
	assert.equal(r.stdout, "toolchain 1.2.3\n");
	console.log(`# second boot on the same store: /opt/toolchain/VERSION is ${JSON.stringify(r.stdout)}`);
}
