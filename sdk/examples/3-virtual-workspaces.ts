// Scenario 3 of the seed, its fs.virtual part: a host-controlled
// workspace served through JavaScript callbacks, booted with a hostname
// and a working directory. taskFiles is fs.memory; a second mount shows
// fs.virtual over a SandboxFileSystem of the program's own (a read-only
// view that counts the guest's calls). Asserts: the guest sees the files
// and their bytes, cwd and hostname are set, writes reach the host's
// file system, and the host's own file system answers every call.

import assert from "node:assert/strict";
import { defineSandbox, fs, fsError } from "@kiln/sandbox";
import type { SandboxFileSystem, SandboxFileSystemStat } from "@kiln/sandbox";
import { image as debian12Agent } from "@kiln/sandbox-image-debian-12-agent";

const sandbox = defineSandbox({ rootfs: debian12Agent });

const taskFiles = fs.memory({
	files: {
		"/README.md": "# Task\n",
		"/src/input.json": JSON.stringify({ repo: "torkbot/sandbox" }),
	},
});

/** A read-only file system of the program's own: /calls.txt says how
 * many calls the guest made so far. */
class CallCounter implements SandboxFileSystem {
	calls = 0;
	#text(): Uint8Array {
		return new TextEncoder().encode(`${this.calls}\n`);
	}
	async stat(path: string): Promise<SandboxFileSystemStat> {
		this.calls++;
		if (path === "/")
			return { type: "directory", mode: 0o555, size: 0, mtimeNs: 0n };
		if (path === "/calls.txt")
			return { type: "file", mode: 0o444, size: this.#text().length, mtimeNs: 0n };
		throw fsError("ENOENT", path);
	}
	async readDir(): Promise<readonly string[]> {
		this.calls++;
		return ["calls.txt"];
	}
	async readFile(_path: string, range?: { offset: number; length: number }): Promise<Uint8Array> {
		this.calls++;
		const t = this.#text();
		return t.subarray(range?.offset ?? 0, (range?.offset ?? 0) + (range?.length ?? t.length));
	}
	async writeFile(): Promise<void> {
		throw fsError("EROFS", "read-only");
	}
	truncate = this.writeFile;
	mkdir = this.writeFile;
	remove = this.writeFile;
	rename = this.writeFile;
}
const counter = new CallCounter();

await using vm = await sandbox.boot({
	hostname: "agent-42",
	mounts: {
		"/workspace": fs.virtual(taskFiles),
		"/calls": fs.virtual(counter),
	},
	cwd: "/workspace",
});

const r = await vm.exec("sh", ["-c", "pwd; hostname; ls -A; cat README.md src/input.json; echo"]);
assert.equal(r.exitCode, 0, r.stderr);
assert.equal(r.stdout, '/workspace\nagent-42\nREADME.md\nsrc\n# Task\n{"repo":"torkbot/sandbox"}\n');
console.log("# the guest reads the host's files in /workspace, hostname agent-42");

const w = await vm.exec("sh", ["-c", "echo done > src/output.txt && mv src/output.txt result.txt && rm README.md && ls"]);
assert.equal(w.exitCode, 0, w.stderr);
assert.equal(w.stdout, "result.txt\nsrc\n");
assert.equal(new TextDecoder().decode(await taskFiles.readFile("/result.txt")), "done\n");
assert.deepEqual(await taskFiles.readDir("/"), ["result.txt", "src"]);
console.log("# the guest's writes, renames and removes are the host's file system's");

const before = counter.calls;
const c = await vm.exec("cat", ["/calls/calls.txt"]);
assert.equal(c.exitCode, 0, c.stderr);
assert.ok(Number(c.stdout) >= before, `${c.stdout} calls`);
assert.ok(counter.calls > before, "the program's own file system answered");
const refused = await vm.exec("sh", ["-c", "echo x > /calls/new.txt"]);
assert.notEqual(refused.exitCode, 0);
assert.match(refused.stderr, /Read-only file system/);
console.log(`# a SandboxFileSystem of the program's own answered ${counter.calls} calls; its EROFS reached the guest`);
