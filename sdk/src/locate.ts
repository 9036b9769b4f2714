// Finding Kiln: the vmm binary, the guest kernel and its initramfs, and
// the sha256 pins `make guest` wrote for the latter two
// (<guest dir>/pins.json). Each comes from, in order: an option, an
// environment variable, the build tree this SDK sits in (../build). The
// namespace launcher needs the vmm only (locateVmm).

import { createHash } from "node:crypto";
import { createReadStream, existsSync, readFileSync, statSync } from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { PinMismatchError, SandboxConfigError, isRecord } from "./errors.js";
import { record, shown } from "./validate.js";

/** Where Kiln is, when not found by the defaults. */
export interface KilnOptions {
	/** The `vmm` binary. */
	vmm?: string;
	/** The guest kernel (an ELF vmlinux or a bzImage). */
	kernel?: string;
	/** The guest initramfs (Kiln's init and agent). */
	initrd?: string;
	/** The pins file; default: pins.json beside the kernel, and beside the initrd. */
	pins?: string;
}

export interface KilnPaths {
	readonly vmm: string;
	readonly kernel: string;
	readonly initrd: string;
	readonly kernelPins: string;
	readonly initrdPins: string;
}

export type Environment = Readonly<Record<string, string | undefined>>;

/** The repository this SDK was built in, when it runs from the tree:
 * sdk/dist/src/locate.js -> the directory holding sdk/ and Makefile. */
export function treeRoot(moduleUrl: string = import.meta.url): string | undefined {
	const root = path.resolve(path.dirname(fileURLToPath(moduleUrl)), "..", "..", "..");
	return existsSync(path.join(root, "Makefile")) && existsSync(path.join(root, "sdk", "package.json"))
		? root : undefined;
}

function isFile(p: string): boolean {
	try {
		return statSync(p).isFile();
	} catch {
		return false;
	}
}

function onPath(name: string, env: Environment): string | undefined {
	for (const dir of (env["PATH"] ?? "").split(":"))
		if (dir && isFile(path.join(dir, name)))
			return path.join(dir, name);
	return undefined;
}

/** What the vmm is started with: a microVM's kernel and initramfs, or
 * neither (the namespace launcher boots no kernel: its vmm finds the
 * sandbox's agent beside the default guest itself). */
export interface VmmPaths {
	readonly vmm: string;
	readonly kernel?: string | undefined;
	readonly initrd?: string | undefined;
}

/** One path from, in order: the option, the environment, the build tree,
 * the fallback; or a throw saying where it looked. */
function pick(what: string, option: unknown, fromEnv: string | undefined, envName: string,
	fromTree: string | undefined, fallback?: string): string {
	if (option !== undefined) {
		const p = path.resolve(absoluteOrRelative(`kiln.${what}`, option));
		if (!isFile(p))
			throw new SandboxConfigError(`kiln.${what}: ${shown(p)} is not a file`);
		return p;
	}
	if (fromEnv) {
		const p = path.resolve(fromEnv);
		if (!isFile(p))
			throw new SandboxConfigError(`${envName}: ${shown(p)} is not a file`);
		return p;
	}
	if (fromTree && isFile(fromTree))
		return fromTree;
	if (fallback)
		return fallback;
	throw new SandboxConfigError(`cannot find Kiln's ${what}: pass defineSandbox({kiln: {${what}}}), set ${envName}, ` +
		(fromTree ? `or build it (${fromTree} is missing: make${what === "vmm" ? "" : " guest"})` : "or run the SDK from a built Kiln tree"));
}

/** The vmm alone (the namespace launcher's): no kernel, initramfs or pins
 * looked for. */
export function locateVmm(options: KilnOptions = {}, env: Environment = process.env,
	root: string | null = treeRoot() ?? null): string {
	const o = record("kiln", options, ["vmm", "kernel", "initrd", "pins"]);
	const build = root ? path.join(root, "build") : undefined;
	return pick("vmm", o["vmm"], env["KILN_VMM"], "KILN_VMM", build && path.join(build, "vmm"), onPath("vmm", env));
}

/** Resolves every path, or throws saying where it looked. */
export function locateKiln(options: KilnOptions = {}, env: Environment = process.env,
	root: string | null = treeRoot() ?? null): KilnPaths {
	const o = record("kiln", options, ["vmm", "kernel", "initrd", "pins"]);
	const build = root ? path.join(root, "build") : undefined;
	const guestDir = env["KILN_GUEST_DIR"];

	const vmm = locateVmm(options, env, root);
	const kernel = pick("kernel", o["kernel"], guestDir && path.join(guestDir, "vmlinux"), "KILN_GUEST_DIR",
		build && path.join(build, "guest", "vmlinux"));
	const initrd = pick("initrd", o["initrd"], guestDir && path.join(guestDir, "initramfs.cpio"), "KILN_GUEST_DIR",
		build && path.join(build, "guest", "initramfs.cpio"));
	const pins = o["pins"] === undefined ? undefined : path.resolve(absoluteOrRelative("kiln.pins", o["pins"]));
	return Object.freeze({
		vmm, kernel, initrd,
		kernelPins: pins ?? path.join(path.dirname(kernel), "pins.json"),
		initrdPins: pins ?? path.join(path.dirname(initrd), "pins.json"),
	});
}

function absoluteOrRelative(what: string, v: unknown): string {
	if (typeof v !== "string" || v.length === 0)
		throw new SandboxConfigError(`${what}: must be a path, got ${shown(v)}`);
	return v;
}

/** The sha256 of a file, "sha256:<hex>". */
export function sha256File(p: string): Promise<string> {
	return new Promise((resolve, reject) => {
		const h = createHash("sha256");
		createReadStream(p)
			.on("data", (c) => h.update(c))
			.on("error", reject)
			.on("end", () => resolve(`sha256:${h.digest("hex")}`));
	});
}

/** The pin of `file` in `pinsPath`: its entry by base name. */
export function readPin(pinsPath: string, file: string): string {
	let text: string;
	try {
		text = readFileSync(pinsPath, "utf8");
	} catch (e) {
		throw new SandboxConfigError(`no pin for ${file}: ${pinsPath}: ${(e as Error).message} ` +
			"(make guest writes it beside the kernel and initramfs)");
	}
	let pins: unknown;
	try {
		pins = JSON.parse(text);
	} catch (e) {
		throw new SandboxConfigError(`${pinsPath}: not JSON: ${(e as Error).message}`);
	}
	const name = path.basename(file);
	const pin = isRecord(pins) ? pins[name] : undefined;
	if (typeof pin !== "string" || !/^sha256:[0-9a-f]{64}$/.test(pin))
		throw new SandboxConfigError(`no pin for ${file}: ${pinsPath} has no "${name}": "sha256:<64 hex>" entry`);
	return pin;
}

/**
 * Digests this process computed, by path, with the file's identity and
 * times when it did: a later boot whose file has the same device, inode,
 * size, mtime and ctime (nanoseconds) reuses the digest instead of
 * hashing 20 MB again (as the vmm's verification cache does for images:
 * Documentation/rootfs.md). Any write through the file system changes
 * mtime and ctime; a file changed less than 100 ms before it was hashed
 * is not remembered (it may still be changing within the timestamp).
 */
const digests = new Map<string, { key: string; digest: string }>();
const RACY_NS = 100_000_000n;

function identity(p: string): { key: string; settled: boolean } {
	const st = statSync(p, { bigint: true });
	const now = BigInt(Date.now()) * 1_000_000n;
	return {
		key: `${st.dev}:${st.ino}:${st.size}:${st.mtimeNs}:${st.ctimeNs}`,
		settled: now - st.mtimeNs > RACY_NS && now - st.ctimeNs > RACY_NS,
	};
}

/** sha256File, remembered per process (above). */
export async function cachedSha256(p: string): Promise<string> {
	const before = identity(p);
	const hit = digests.get(p);
	if (hit && hit.key === before.key)
		return hit.digest;
	const digest = await sha256File(p);
	const after = identity(p);
	if (before.settled && after.key === before.key)
		digests.set(p, { key: after.key, digest });
	return digest;
}

/** Refuses a kernel or initramfs whose digest is not its pin. */
export async function verifyPins(kiln: KilnPaths): Promise<void> {
	for (const [file, pins] of [[kiln.kernel, kiln.kernelPins], [kiln.initrd, kiln.initrdPins]] as const) {
		const expected = readPin(pins, file);
		const actual = await cachedSha256(file);
		if (actual !== expected)
			throw new PinMismatchError(file, pins, expected, actual);
	}
}

