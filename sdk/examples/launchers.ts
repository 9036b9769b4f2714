// Launchers and activation (seed 002; Documentation/personas.md,
// "Launchers"): the built-ins registered on a host whose settings live
// in memory, `auto` activated, what it chose and why, one sandbox
// spawned through it. `tools/sdk-build && node sdk/dist/examples/launchers.js`:
// on a host with neither a usable KVM nor the namespace launcher it
// prints why and exits 1.

import { ActivationError, LauncherHost, builtinLaunchers, memorySettingsStore } from "@kiln/sandbox";
import type { SandboxVm } from "@kiln/sandbox";
import { image as debian12Agent } from "@kiln/sandbox-image-debian-12-agent";

const host = await LauncherHost.open<SandboxVm>({ store: memorySettingsStore() });
for (const launcher of builtinLaunchers())
	host.register(launcher);

try {
	const { selection } = await host.activate({ source: "builtin", kind: "auto" }, { cpus: 2 });
	console.log(`auto runs sandboxes as ${selection.kind} (${selection.isolation}): ${selection.reason}`);
} catch (e) {
	if (!(e instanceof ActivationError))
		throw e;
	console.log(`no sandbox backend here: ${e.message}`);
	process.exit(1);
}
console.log(host.settings({ source: "builtin", kind: "auto" })); // { cpus: 2, memoryMiB: 256, allowNamespace: true }

const { launcher, sandbox: vm } = await host.spawn({ sandbox: { rootfs: debian12Agent } });
try {
	console.log(launcher, vm.launcher); // the launcher that spawned it, for good
	console.log((await vm.exec("uname", ["-r"])).stdout);
} finally {
	await vm.close();
}
