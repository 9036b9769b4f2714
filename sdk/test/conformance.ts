// conformance.js vm|namespace LIST EXAMPLES_DIR - issue 38's conformance
// subset under one isolation (Documentation/personas.md, "The conformance
// subset"): each scenario named in LIST (selftests/conformance.list, one
// example name a line, # comments) runs as run-examples.js runs it, but
// every sandbox it boots goes through the built-in launcher of that kind
// (VmLauncher: a microVM; NamespaceLauncher: `--isolation namespace`),
// the scenarios themselves unchanged: a module hook gives their
// `@kiln/sandbox` import a defineSandbox whose boot() is the launcher's
// spawn() (launched-sandbox.ts). The same list, the same scenarios, under
// both isolations: selftests/unit/sdk_ns.sh runs it with namespace on
// the host, selftests/kvm/conformance.sh with vm in the harness. A
// launcher that says it is not available here is a skip naming why.

import { readFileSync } from "node:fs";
import { register } from "node:module";
import path from "node:path";
import { NamespaceLauncher, VmLauncher } from "../src/index.js";
import { runExamples } from "./examples.js";
import { LAUNCHER_KEY } from "./launched-sandbox.js";

const [kind, list, dir] = process.argv.slice(2);
if ((kind !== "vm" && kind !== "namespace") || !list || !dir) {
	console.error("usage: conformance.js vm|namespace LIST EXAMPLES_DIR");
	process.exit(2);
}
const names = readFileSync(list, "utf8").split("\n").map((l) => l.replace(/#.*/, "").trim()).filter((l) => l !== "");
const launcher = kind === "vm" ? new VmLauncher() : new NamespaceLauncher();
launcher.configure({});
await launcher.prepare();
const availability = await launcher.isAvailable();
if (!availability.available) {
	console.log("TAP version 13");
	console.log(`1..0 # SKIP launcher ${kind}: ${availability.reason}`);
	process.exit(4);
}
console.log(`# conformance: ${names.length} scenarios through launcher ${kind} (${availability.reason})`);
(globalThis as Record<symbol, unknown>)[LAUNCHER_KEY] = launcher;
register(new URL("./conformance-hooks.js", import.meta.url), {
	data: { shim: new URL("./launched-sandbox.js", import.meta.url).href },
});
process.exit(await runExamples(names.map((n) => path.join(dir, `${n}.js`))));
