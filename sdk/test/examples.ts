// examples.ts - the runner of run-examples.js and conformance.js: the
// seed's scenarios in one Node process, one TAP test each. Each example
// is an ES module whose top level asserts what its scenario claims:
// importing it runs it, a rejection fails it. One process for all saves
// a Node start per scenario (seconds under the harness's emulation) and
// lets the pins be hashed once.
//
// An example past KILN_SDK_EXAMPLE_TIMEOUT seconds has hung: it fails,
// the rest are reported not run, and the process exits (its VMs die with
// it: dieWithParent).

import path from "node:path";
import { pathToFileURL } from "node:url";

const timeoutS = Number(process.env["KILN_SDK_EXAMPLE_TIMEOUT"] ?? 600);
const comment = (s: string): string => s.split("\n").map((l) => (l.startsWith("#") ? l : `# ${l}`)).join("\n");

/** Runs each example in turn, TAP on stdout; the exit code: 0, or 1 when
 * one failed. A hung one ends the process (its VMs die with it). */
export async function runExamples(files: readonly string[]): Promise<number> {
	console.log("TAP version 13");
	console.log(`1..${files.length}`);
	let failed = 0;
	for (const [i, file] of files.entries()) {
		const name = path.basename(file, ".js");
		const t0 = performance.now();
		let timer: NodeJS.Timeout | undefined;
		const hung = new Promise<"hung">((r) => {
			timer = setTimeout(() => r("hung"), timeoutS * 1000);
		});
		let outcome: string | undefined;
		try {
			const r = await Promise.race([import(pathToFileURL(path.resolve(file)).href).then(() => "ok"), hung]);
			if (r === "hung")
				outcome = `timed out after ${timeoutS} s`;
		} catch (e) {
			outcome = e instanceof Error ? `${e.name}: ${e.message}` : String(e);
			console.log(comment(e instanceof Error && e.stack ? e.stack : String(e)));
		} finally {
			clearTimeout(timer);
		}
		console.log(`# kiln-test-time: ${name} ${Math.round((performance.now() - t0) / 1000)}`);
		if (outcome === undefined) {
			console.log(`ok ${i + 1} - ${name}`);
			continue;
		}
		failed++;
		console.log(`not ok ${i + 1} - ${name} (${outcome.split("\n")[0]})`);
		if (outcome.startsWith("timed out")) {
			for (let j = i + 1; j < files.length; j++)
				console.log(`not ok ${j + 1} - ${path.basename(files[j] ?? "", ".js")} (not run: an earlier example hung)`);
			process.exit(1);
		}
	}
	return failed > 0 ? 1 : 0;
}
