// Scenario 5 of the seed: buffered, streaming and interactive processes
// (vm.exec, vm.spawn, vm.pty). The image has no npm: `sh -c` scripts stand
// in for `npm test`. Asserts: env adds to the guest's environment, cwd,
// timeoutMs gives 124, an aborted signal rejects with an AbortError and
// the VM stays usable, spawn streams both ways, pty has a real terminal
// of the given size and resizes.

import assert from "node:assert/strict";
import { Writable } from "node:stream";
import { defineSandbox } from "@kiln/sandbox";
import { image as debian12Agent } from "@kiln/sandbox-image-debian-12-agent";

const sandbox = defineSandbox({ rootfs: debian12Agent });
await using vm = await sandbox.boot({ cwd: "/tmp" });

const abortController = new AbortController();
const result = await vm.exec("sh", ["-c", 'echo "CI=$CI"; pwd; command -v sh'], {
	cwd: "/usr",
	env: { CI: "1" },
	timeoutMs: 120_000,
	signal: abortController.signal,
});
assert.equal(result.exitCode, 0, result.stderr);
assert.equal(result.stdout, "CI=1\n/usr\n/usr/bin/sh\n"); // PATH kept: env adds
assert.equal((await vm.exec("pwd")).stdout, "/tmp\n"); // the boot's cwd
console.log("# exec: env added, cwd, the boot's cwd by default");

const slow = await vm.exec("sleep", ["60"], { timeoutMs: 300 });
assert.equal(slow.exitCode, 124);
assert.equal(slow.timedOut, true);

const aborting = new AbortController();
const pending = vm.exec("sleep", ["60"], { signal: aborting.signal });
setTimeout(() => aborting.abort(), 300);
await assert.rejects(pending, { name: "AbortError" });
assert.equal((await vm.exec("echo", ["still here"])).stdout, "still here\n");
console.log("# exec: timeoutMs gives 124; an abort rejects with AbortError, the VM goes on");

// spawn: streams both ways.
const child = vm.spawn("sh", ["-c", "tr a-z A-Z; echo done >&2"], {
	cwd: "/tmp",
});
const out: Buffer[] = [];
const err: Buffer[] = [];
const collect = (into: Buffer[]) => Writable.toWeb(new Writable({
	write(c: Buffer, _e, cb) {
		into.push(c);
		cb();
	},
}));
const piped = Promise.all([
	child.stdout.pipeTo(collect(out)),
	child.stderr.pipeTo(collect(err)),
]);
await child.ready;
const w = child.stdin.getWriter();
await w.write(new TextEncoder().encode("hello from the host\n"));
await w.close();
const { exitCode } = await child.exit;
await piped;
assert.equal(exitCode, 0);
assert.equal(Buffer.concat(out).toString(), "HELLO FROM THE HOST\n");
assert.equal(Buffer.concat(err).toString(), "done\n");

// A big output, read through: 16 MiB arrive whole however fast we read.
const big = vm.spawn("head", ["-c", String(16 * 1024 * 1024), "/dev/zero"]);
let n = 0;
for await (const c of big.stdout)
	n += c.byteLength;
assert.equal(n, 16 * 1024 * 1024);
assert.equal((await big.exit).exitCode, 0);

const sleeper = vm.spawn("sleep", ["60"]);
await sleeper.ready;
await sleeper.kill("KILL");
assert.equal((await sleeper.exit).exitCode, 128 + 9);
console.log("# spawn: stdin, stdout, stderr, exit, 16 MiB streamed, kill");

// pty: a real terminal.
const shell = vm.pty("/bin/sh", ["-i"], {
	cwd: "/tmp",
	env: { TERM: "xterm-256color" },
	size: { rows: 40, cols: 120 },
});
let screen = "";
const reading = (async () => {
	for await (const c of shell.output)
		screen += new TextDecoder().decode(c);
})();
const waitFor = async (text: string): Promise<void> => {
	for (let i = 0; i < 600 && !screen.includes(text); i++)
		await new Promise((r) => setTimeout(r, 50));
	assert.ok(screen.includes(text), `the terminal never showed ${JSON.stringify(text)}: ${JSON.stringify(screen)}`);
};
const input = shell.input.getWriter();
await input.write(new TextEncoder().encode('stty size; echo "term=$TERM"; tty\n'));
await waitFor("40 120");
await waitFor("term=xterm-256color");
await waitFor("/dev/pts/");
await shell.resize({ rows: 50, cols: 160 });
await input.write(new TextEncoder().encode("stty size; exit 7\n"));
const ptyExit = await shell.exit;
await reading;
assert.ok(screen.includes("50 160"), screen);
assert.equal(ptyExit.exitCode, 7);
console.log("# pty: size, TERM, a pts, resize, exit status");
