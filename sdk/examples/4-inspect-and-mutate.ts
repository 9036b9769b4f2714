// Scenario 4 of the seed: inspect and mutate the running guest (vm.fs).
// Asserts what the scenario claims: the written file reads back, a range
// reads its bytes, readDir gives names, raw name bytes and metadata
// together, rename moves the file; and a file larger than one control
// message goes both ways whole.

import assert from "node:assert/strict";
import { randomBytes } from "node:crypto";
import { defineSandbox } from "@kiln/sandbox";
import { image as debian12Agent } from "@kiln/sandbox-image-debian-12-agent";

const sandbox = defineSandbox({
	rootfs: debian12Agent,
});

await using vm = await sandbox.boot();

await vm.fs.writeFile("/tmp/task/input.txt", "hello world", {
	createParents: true,
});

const chunk = await vm.fs.readFile("/tmp/task/input.txt", {
	range: { offset: 6, length: 5 },
});

const entries = await vm.fs.readDir("/tmp/task");
const published = new TextDecoder().decode(chunk);

await vm.fs.rename("/tmp/task/input.txt", "/tmp/task/published.txt");

assert.equal(published, "world");
assert.equal(entries.length, 1);
const [entry] = entries;
assert.ok(entry);
assert.equal(entry.name, "input.txt");
assert.deepEqual([...entry.nameBytes], [...new TextEncoder().encode("input.txt")]);
assert.equal(entry.type, "file");
assert.equal(entry.size, 11);
assert.equal(typeof entry.mtimeNs, "bigint");
const after = (await vm.fs.readDir("/tmp/task")).map((e) => e.name);
assert.deepEqual(after, ["published.txt"]);
assert.equal(new TextDecoder().decode(await vm.fs.readFile("/tmp/task/published.txt")), "hello world");
console.log("# write, range read, readDir, rename: as the scenario says");

// stat reports the entry itself, symlinks included.
const st = await vm.fs.stat("/bin");
assert.equal(st.type, "symlink"); // Debian's merged /usr
assert.equal(st.linkTarget, "usr/bin");

// Larger than one control message (1 MiB) each way: streamed.
const big = randomBytes(3 * 1024 * 1024 + 123);
await vm.fs.writeFile("/tmp/task/deep/big.bin", big, { createParents: true });
const back = await vm.fs.readFile("/tmp/task/deep/big.bin");
assert.equal(back.length, big.length);
assert.ok(Buffer.from(back).equals(big), "the 3 MiB file read back differs");
const sum = await vm.exec("sha256sum", ["/tmp/task/deep/big.bin"]);
const { createHash } = await import("node:crypto");
assert.equal(sum.stdout.split(" ")[0], createHash("sha256").update(big).digest("hex"));
console.log("# a 3 MiB file written and read back whole");

await vm.fs.mkdir("/tmp/cache/deep", { recursive: true });
assert.equal((await vm.fs.stat("/tmp/cache/deep")).type, "directory");
await vm.fs.remove("/tmp/cache", { recursive: true });
await vm.fs.remove("/tmp/maybe-gone", { force: true });
await assert.rejects(vm.fs.stat("/tmp/cache"), (e: Error & { code?: string; method?: string }) =>
	e.code === "ENOENT" && e.method === "fs.stat");
await assert.rejects(vm.fs.rename("/tmp/task/published.txt", "/tmp/nowhere/x"), { code: "ENOENT" });
console.log("# mkdir recursive, remove recursive and force, errors carry the errno");
