// launched-sandbox.js - `@kiln/sandbox` as conformance.js's scenarios
// see it: everything the SDK exports, but defineSandbox's boot() is the
// launcher's spawn() (the one conformance.js put under LAUNCHER_KEY), so
// that each VM a scenario boots carries that launcher's isolation and
// report. The definition is still checked by the SDK's own
// defineSandbox, at definition time, as the scenario expects.

import * as sdk from "../src/index.js";
import type {
	BootOptions, Sandbox, SandboxEnvironmentFact, SandboxLauncher, SandboxOptions, SandboxVm,
} from "../src/index.js";

export * from "../src/index.js";

export const LAUNCHER_KEY = Symbol.for("kiln.conformance.launcher");

export function defineSandbox(options: SandboxOptions): Sandbox {
	const checked = sdk.defineSandbox(options);
	const { kiln: _kiln, ...sandbox } = options;
	const launcher = (globalThis as Record<symbol, unknown>)[LAUNCHER_KEY] as SandboxLauncher | undefined;
	if (!launcher)
		throw new Error("launched-sandbox: no launcher (conformance.js sets it)");
	return Object.freeze({
		// As the launcher would start it (a built-in's: `vmm facts` with
		// its arguments; the namespace launcher's needs no kernel).
		environmentFacts: () => {
			const own = (launcher as { environmentFacts?: (s: typeof sandbox) => SandboxEnvironmentFact[] }).environmentFacts;
			return own ? own.call(launcher, sandbox) : checked.environmentFacts();
		},
		async boot(boot?: BootOptions): Promise<SandboxVm> {
			const vm = await launcher.spawn(boot === undefined ? { sandbox } : { sandbox, boot });
			if (vm.launcher?.kind !== launcher.kind)
				throw new Error(`launched-sandbox: the VM reports launcher ${vm.launcher?.kind ?? "none"}, not ${launcher.kind}`);
			return vm;
		},
	});
}
