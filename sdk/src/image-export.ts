// Images out of a machine (seed 003, "rootfs.flatten" and "rootfs.bytes";
// Kiln: Documentation/rootfs.md, "Images out of a machine"):
// rootfs.flatten runs `vmm rootfs flatten` and `vmm rootfs describe` and
// writes the new qcow2 file into the caller's block store; rootfs.bytes
// streams an image file, or such a stored image, with one chunk in hand;
// materialise() copies a stored image to a local file a VM boots.

import { execFile } from "node:child_process";
import { createHash } from "node:crypto";
import { mkdirSync } from "node:fs";
import { mkdtemp, open, rename, rm, stat } from "node:fs/promises";
import os from "node:os";
import path from "node:path";
import { STORE_BLOCK_SIZE, STORE_IO_BLOCKS } from "./blockstore-proto.js";
import { checkBlockStore, checkRead, claimStore, isClaimed, releaseStore, serveBlockStore } from "./blockstore.js";
import { SandboxConfigError, SandboxError, VmmError, isRecord } from "./errors.js";
import { cachedSha256, locateVmm } from "./locate.js";
import type { KilnOptions } from "./locate.js";
import { baseImage, composedSource } from "./rootfs.js";
import type {
	RootfsImageInput, SandboxBlockStore, SandboxBlockStoreContext, SandboxComposedSource, SandboxImage,
} from "./rootfs.js";
import { fail, integer, oneOf, record, shown } from "./validate.js";

export interface RootfsFlattenOptions {
	/** The output format: "qcow2" (version 3, no backing file). */
	format: "qcow2";
	/** An image, or a base and its saved changes (rootfs.compose). */
	source: SandboxImage | RootfsImageInput | SandboxComposedSource;
	/** Where the new image's file goes, as 4096-byte blocks 0, 1, ... */
	dest: SandboxBlockStore;
	/** qcow2 cluster size: a power of two from 4096 to 2 MiB (default 65536). */
	clusterSize?: number;
	/** Where Kiln's vmm is, when not the default (as defineSandbox's). */
	kiln?: KilnOptions;
}

export interface RootfsBytesOptions {
	/** Bytes per chunk: a multiple of 4096 up to 64 MiB (default 1 MiB). */
	chunkSize?: number;
}

const CLUSTER_MIN = 4096;
const CLUSTER_MAX = 2 << 20;
const CHUNK_DEFAULT = 1 << 20;
const CHUNK_MAX = 64 << 20;
const NAME_MAX = 128;
/** `vmm rootfs` prints a descriptor: a few hundred bytes. */
const DESCRIBE_MAX_BUFFER = 64 << 10;

function run(file: string, args: string[]): Promise<string> {
	return new Promise((resolve, reject) => {
		execFile(file, args, { encoding: "utf8", maxBuffer: DESCRIBE_MAX_BUFFER }, (err, stdout, stderr) => {
			if (err) {
				const code = typeof err.code === "number" ? err.code : null;
				reject(new VmmError(`${path.basename(file)} ${args.slice(0, 2).join(" ")}`, code, stderr));
				return;
			}
			resolve(stdout);
		});
	});
}

/** The directory booting a stored image copies it to:
 * ${KILN_CACHE:-~/.cache/kiln}/sdk-images. */
export function imageCacheDir(env: NodeJS.ProcessEnv = process.env): string {
	return path.join(env["KILN_CACHE"] ?? path.join(os.homedir(), ".cache", "kiln"), "sdk-images");
}

function flattenedName(base: SandboxImage, digest: string): string {
	// "<base>.flat-<12 hex>": still pinned (no moving alias is added).
	// A flattened image flattened again is named for its own digest alone.
	const tail = `.flat-${digest.slice(7, 19)}`;
	const stem = base.name.replace(/\.flat-[0-9a-f]{12}$/, "");
	return stem.slice(0, NAME_MAX - tail.length) + tail;
}

function checkFlatten(options: RootfsFlattenOptions): {
	base: SandboxImage; overlay: SandboxBlockStore | undefined; dest: SandboxBlockStore; cluster: number; kiln: KilnOptions;
} {
	const what = "rootfs.flatten";
	const o = record(what, options, ["format", "source", "dest", "clusterSize", "kiln"]);
	for (const k of ["format", "source", "dest"])
		if (o[k] === undefined)
			fail(what, `${k} is required`);
	oneOf(`${what}: format`, o["format"], ["qcow2"] as const);
	const src = o["source"];
	let base: SandboxImage;
	let overlay: SandboxBlockStore | undefined;
	if (isRecord(src) && src["kind"] === "composed") {
		const c = composedSource(`${what}: source`, src);
		base = c.base;
		overlay = c.overlay;
	} else {
		try {
			base = baseImage(`${what}: source`, src);
		} catch (e) {
			fail(`${what}: source`, `must be an image (rootfs.image, an image package's) or rootfs.compose(...), got ${shown(src)}` +
				(e instanceof SandboxConfigError && isRecord(src) && "digest" in src ? ` (${e.message})` : ""));
		}
	}
	const dest = checkBlockStore(`${what}: dest`, o["dest"]);
	if (overlay === dest)
		fail(what, "dest is the source's overlay: write the image to another store");
	let cluster = 65536;
	if (o["clusterSize"] !== undefined) {
		cluster = integer(`${what}: clusterSize`, o["clusterSize"], CLUSTER_MIN, CLUSTER_MAX);
		if ((cluster & (cluster - 1)) !== 0)
			fail(`${what}: clusterSize`, `must be a power of two from ${CLUSTER_MIN} to ${CLUSTER_MAX}, got ${cluster}`);
	}
	if (overlay && isClaimed(overlay))
		fail(`${what}: source`, "its overlay is the writable store of a running VM: shut the VM down first " +
			"(its last changes reach the store then)");
	return { base, overlay, dest, cluster, kiln: (o["kiln"] ?? {}) as KilnOptions };
}

/** The descriptor `vmm rootfs describe` printed. */
function described(out: string): { name: string; digest: string; sizeBytes: bigint } {
	let d: unknown;
	try {
		d = JSON.parse(out);
	} catch {
		throw new SandboxError(`vmm rootfs describe: not JSON: ${shown(out)}`);
	}
	const r = isRecord(d) ? d : {};
	const { name, digest, sizeBytes, format } = r;
	if (typeof name !== "string" || typeof digest !== "string" || !/^sha256:[0-9a-f]{64}$/.test(digest) ||
	    typeof sizeBytes !== "number" || !Number.isSafeInteger(sizeBytes) || format !== "qcow2")
		throw new SandboxError(`vmm rootfs describe: an unexpected descriptor ${shown(d)}`);
	return { name, digest, sizeBytes: BigInt(sizeBytes) };
}

/** Writes the file's blocks into the store, 256 (1 MiB) at a time. */
async function copyToStore(file: string, dest: SandboxBlockStore, ctx: SandboxBlockStoreContext): Promise<bigint> {
	const fh = await open(file, "r");
	try {
		const size = BigInt((await fh.stat()).size);
		let block = 0n;
		for (;;) {
			const buf = Buffer.alloc(STORE_IO_BLOCKS * STORE_BLOCK_SIZE);
			const { bytesRead } = await fh.read(buf, 0, buf.length, Number(block) * STORE_BLOCK_SIZE);
			if (bytesRead === 0)
				break;
			const n = Math.ceil(bytesRead / STORE_BLOCK_SIZE);
			const chunks = [];
			for (let i = 0; i < n; i++) {
				// Each block its own buffer: the store may keep it.
				const bytes = new Uint8Array(STORE_BLOCK_SIZE);
				bytes.set(buf.subarray(i * STORE_BLOCK_SIZE, Math.min(bytesRead, (i + 1) * STORE_BLOCK_SIZE)));
				chunks.push(Object.freeze({ index: block + BigInt(i), bytes }));
			}
			await dest.write(chunks, ctx);
			block += BigInt(n);
			if (bytesRead < buf.length)
				break;
		}
		return size;
	} finally {
		await fh.close();
	}
}

/**
 * rootfs.flatten: base + overlay as one standalone qcow2 image, written
 * into `dest` (context.base: the new image's name and digest), flushed.
 * Returns its descriptor (format qcow2, digest over the file, sizeBytes
 * its virtual size), which rootfs.bytes streams and a VM boots.
 */
export async function flatten(options: RootfsFlattenOptions): Promise<SandboxImage> {
	const { base, overlay, dest, cluster, kiln } = checkFlatten(options);
	// The vmm alone: flattening boots nothing.
	const vmm = locateVmm(kiln);
	const owner = {};
	if (!claimStore(dest, owner))
		throw new SandboxConfigError("rootfs.flatten: dest is the writable store of a running VM (or of another flatten)");
	let dir: string;
	try {
		// An image a flatten wrote into a store is read from its local
		// copy, as a boot reads it.
		await materialise(base);
		dir = await mkdtemp(path.join(os.tmpdir(), "kiln-flatten-"));
	} catch (e) {
		releaseStore(dest, owner);
		throw e;
	}
	let served: { socket: string; close(): Promise<void> } | undefined;
	try {
		const desc = path.join(dir, "base.json");
		const fh = await open(desc, "wx", 0o600);
		await fh.writeFile(JSON.stringify({
			name: base.name, path: base.path, format: base.format, architecture: base.architecture,
			digest: base.digest, sizeBytes: Number(base.sizeBytes),
		}) + "\n");
		await fh.close();
		const out = path.join(dir, "image.qcow2");
		const args = ["rootfs", "flatten", "--base", desc];
		if (overlay) {
			served = await serveBlockStore(overlay, base);
			args.push("--overlay", `store:${served.socket}`);
		}
		args.push("--format", "qcow2", "--cluster-size", String(cluster), "--out", out);
		await run(vmm, args);
		await served?.close();
		served = undefined;
		const d0 = described(await run(vmm, ["rootfs", "describe", out, "--format", "qcow2", "--name", base.name]));
		const name = flattenedName(base, d0.digest);
		const ctx: SandboxBlockStoreContext = Object.freeze({ base: Object.freeze({ name, digest: d0.digest }) });
		const fileBytes = await copyToStore(out, dest, ctx);
		if (dest.flush)
			await dest.flush(ctx);
		return Object.freeze({
			kind: "image", name,
			path: path.join(imageCacheDir(), `${d0.digest.slice(7)}.qcow2`),
			format: "qcow2", architecture: "x86_64", digest: d0.digest, sizeBytes: d0.sizeBytes,
			// What the base's package says of its contents still holds,
			// but for which image this is.
			facts: Object.freeze(base.facts.filter((f) => f.topic !== "rootfs-image")),
			stored: Object.freeze({ store: dest, fileBytes }),
		});
	} finally {
		releaseStore(dest, owner);
		await served?.close();
		await rm(dir, { recursive: true, force: true });
	}
}

function checkBytes(image: unknown, options: unknown): { image: SandboxImage; chunk: number } {
	const what = "rootfs.bytes";
	const img = baseImage(`${what}: image`, image);
	const o = record(`${what}: options`, options ?? {}, ["chunkSize"]);
	const chunk = o["chunkSize"] === undefined ? CHUNK_DEFAULT
		: integer(`${what}: chunkSize`, o["chunkSize"], STORE_BLOCK_SIZE, CHUNK_MAX);
	if (chunk % STORE_BLOCK_SIZE !== 0)
		fail(`${what}: chunkSize`, `must be a multiple of ${STORE_BLOCK_SIZE}, got ${chunk}`);
	return { image: img, chunk };
}

async function* fileBytes(image: SandboxImage, chunk: number): AsyncGenerator<Uint8Array> {
	const fh = await open(image.path, "r");
	try {
		const size = BigInt((await fh.stat()).size);
		if (image.format === "raw" && size !== image.sizeBytes)
			throw new SandboxError(`rootfs.bytes: ${image.path} has ${size} bytes, its descriptor says ${image.sizeBytes}`);
		const h = createHash("sha256");
		let off = 0n;
		for (;;) {
			const buf = new Uint8Array(chunk);
			const { bytesRead } = await fh.read(buf, 0, chunk, Number(off));
			if (bytesRead === 0)
				break;
			off += BigInt(bytesRead);
			const c = bytesRead === chunk ? buf : buf.subarray(0, bytesRead);
			h.update(c);
			yield c;
		}
		const got = `sha256:${h.digest("hex")}`;
		if (got !== image.digest)
			throw new SandboxError(`rootfs.bytes: ${image.path} has ${got}, its descriptor says ${image.digest} ` +
				"(the bytes yielded are not the image's)");
	} finally {
		await fh.close();
	}
}

async function* storedBytes(image: SandboxImage, chunk: number): AsyncGenerator<Uint8Array> {
	const stored = image.stored as NonNullable<SandboxImage["stored"]>;
	const ctx: SandboxBlockStoreContext = Object.freeze({ base: Object.freeze({ name: image.name, digest: image.digest }) });
	const per = BigInt(chunk / STORE_BLOCK_SIZE);
	const blocks = (stored.fileBytes + BigInt(STORE_BLOCK_SIZE) - 1n) / BigInt(STORE_BLOCK_SIZE);
	const h = createHash("sha256");
	for (let b = 0n; b < blocks; b += per) {
		const count = b + per > blocks ? blocks - b : per;
		let got: unknown;
		try {
			got = await stored.store.read(Object.freeze({ start: b, count }), ctx);
		} catch (e) {
			throw new SandboxError(`rootfs.bytes: ${image.name}: store.read of blocks ${b}+${count}: ${(e as Error).message}`);
		}
		let parts: Uint8Array[];
		try {
			parts = checkRead(got, b, Number(count));
		} catch (e) {
			throw new SandboxError(`rootfs.bytes: ${image.name}: ${(e as Error).message}`);
		}
		const end = b + count === blocks ? Number(stored.fileBytes - b * BigInt(STORE_BLOCK_SIZE)) : Number(count) * STORE_BLOCK_SIZE;
		const out = new Uint8Array(end);
		let at = 0;
		for (const p of parts) {
			const take = Math.min(p.length, end - at);
			out.set(p.subarray(0, take), at);
			at += take;
		}
		h.update(out);
		yield out;
	}
	const got = `sha256:${h.digest("hex")}`;
	if (got !== image.digest)
		throw new SandboxError(`rootfs.bytes: ${image.name}: the store's blocks hash to ${got}, not ${image.digest} ` +
			"(the bytes yielded are not the image's)");
}

/**
 * rootfs.bytes: the image file's bytes (not the files inside it), one
 * chunk read per chunk yielded. A file-backed image is read from its file
 * here (no vmm needed); an image rootfs.flatten wrote into a store is read
 * back through store.read. The SHA-256 of what was yielded is checked
 * against the digest at the end: a mismatch fails the iteration after the
 * last chunk, so keep the bytes only when the loop ends normally.
 */
export function bytes(image: SandboxImage | RootfsImageInput, options?: RootfsBytesOptions): AsyncIterable<Uint8Array> {
	const { image: img, chunk } = checkBytes(image, options);
	return img.stored ? storedBytes(img, chunk) : fileBytes(img, chunk);
}

/**
 * A stored image as a file a VM boots: its `path` under imageCacheDir(),
 * kept when its SHA-256 is the digest, else written again from the store
 * (to a temporary file, hashed as it goes, renamed when it matches).
 */
export async function materialise(image: SandboxImage): Promise<void> {
	if (!image.stored)
		return;
	try {
		const st = await stat(image.path);
		if (st.isFile() && await cachedSha256(image.path) === image.digest)
			return;
	} catch {
		// not there yet
	}
	mkdirSync(path.dirname(image.path), { recursive: true, mode: 0o700 });
	const tmp = `${image.path}.tmp-${process.pid}-${Date.now()}`;
	const fh = await open(tmp, "wx", 0o600);
	try {
		// storedBytes checks the digest before its iteration ends.
		for await (const c of storedBytes(image, CHUNK_DEFAULT))
			await fh.write(c);
		await fh.sync();
		await fh.close();
		await rename(tmp, image.path);
	} catch (e) {
		await fh.close().catch(() => undefined);
		await rm(tmp, { force: true });
		throw e;
	}
}
