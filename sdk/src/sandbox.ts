// defineSandbox(...) (seed 003): a validated, reusable VM definition.
// Nothing starts until boot().

import { execFileSync } from "node:child_process";
import { writeFileSync } from "node:fs";
import path from "node:path";
import { VmmError } from "./errors.js";
import type { SandboxEnvironmentFact } from "./facts.js";
import { baseOf, checkBoot, checkResources, vmmConfig, writeImage } from "./config.js";
import type { BootOptions, SandboxResources } from "./config.js";
import { locateKiln, verifyPins } from "./locate.js";
import type { KilnOptions, KilnPaths } from "./locate.js";
import type { NetworkPolicy } from "./network/index.js";
import { NotSupportedError } from "./errors.js";
import { checkRootfs } from "./rootfs.js";
import type { SandboxRootfs } from "./rootfs.js";
import { fail, record } from "./validate.js";
import { SandboxVm, bootVm, configFacts } from "./vm.js";

export interface SandboxOptions {
	/** The machine the VM starts from (required). */
	rootfs: SandboxRootfs;
	resources?: SandboxResources;
	network?: NetworkPolicy;
	/** Where Kiln's vmm, kernel and initramfs are, when not the defaults. */
	kiln?: KilnOptions;
}

export interface Sandbox {
	/** Facts known from the configuration, without starting a VM. */
	environmentFacts(): SandboxEnvironmentFact[];
	/** Boots one VM of this definition. */
	boot(options?: BootOptions): Promise<SandboxVm>;
}

export function defineSandbox(options: SandboxOptions): Sandbox {
	const what = "defineSandbox";
	const o = record(what, options, ["rootfs", "resources", "network", "kiln"]);
	if (o["rootfs"] === undefined)
		fail(what, "rootfs is required: rootfs.image(...), rootfs.ephemeral(...) or rootfs.persistent(...)");
	const rootfs = checkRootfs(`${what}: rootfs`, o["rootfs"]);
	const resources = checkResources(o["resources"]);
	if (o["network"] !== undefined)
		throw new NotSupportedError("defineSandbox: network", "network.policy comes with Kiln's hook verdicts (issue 31)");
	const kilnOptions = (o["kiln"] ?? {}) as KilnOptions;
	// Checked now, so a bad option is said at definition time.
	record(`${what}: kiln`, kilnOptions, ["vmm", "kernel", "initrd", "pins"]);

	const writeConfig = (kiln: KilnPaths, dir: string, boot: BootOptions | undefined, extra: {
		controlSocket?: string; consoleLog?: string; readyTimeoutMs?: number;
	}): string => {
		const descriptor = writeImage(dir, baseOf(rootfs));
		const file = path.join(dir, "vm.json");
		const config = vmmConfig({ kiln, rootfs, resources, boot: checkBoot(boot), descriptor, ...extra });
		writeFileSync(file, JSON.stringify(config, null, 2) + "\n", { mode: 0o600 });
		return file;
	};

	return Object.freeze({
		environmentFacts(): SandboxEnvironmentFact[] {
			const kiln = locateKiln(kilnOptions);
			return configFacts(kiln.vmm, (dir) => writeConfig(kiln, dir, undefined, {}), (file, args) => {
				try {
					return execFileSync(file, args, { encoding: "utf8", stdio: ["ignore", "pipe", "pipe"] });
				} catch (e) {
					const err = e as { status?: number | null; stderr?: unknown };
					throw new VmmError(`${file} facts`, err.status ?? null,
						typeof err.stderr === "string" ? err.stderr : "");
				}
			});
		},

		async boot(bootOptions?: BootOptions): Promise<SandboxVm> {
			checkBoot(bootOptions);
			const kiln = locateKiln(kilnOptions);
			await verifyPins(kiln);
			return bootVm({
				vmm: kiln.vmm,
				writeConfig: (dir, controlSocket, consoleLog, readyTimeoutMs) =>
					writeConfig(kiln, dir, bootOptions, { controlSocket, consoleLog, readyTimeoutMs }),
			});
		},
	});
}

