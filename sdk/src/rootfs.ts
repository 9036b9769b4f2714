// rootfs: the machine a VM starts from (seed 003, "rootfs.image(input)" and
// the sections after it; Kiln: Documentation/rootfs.md).

import { checkBlockStore } from "./blockstore.js";
import { imageFacts } from "./facts.js";
import { bytes, flatten } from "./image-export.js";
import type { SandboxEnvironmentFact } from "./facts.js";
import { absolutePath, fail, integer, nonEmpty, record, shown, string } from "./validate.js";

/** A read-only Linux machine image, as `rootfs.image(...)` returns it. */
export interface SandboxImage {
	readonly kind: "image";
	readonly name: string;
	/** The file the vmm boots. For an image rootfs.flatten wrote into a
	 * store: where booting it materialises the file (`stored` below). */
	readonly path: string;
	/** "qcow2": digest over the qcow2 file, sizeBytes its virtual size. */
	readonly format: "raw" | "qcow2";
	/** Normalised: Node's `process.arch` "x64" is Kiln's "x86_64". */
	readonly architecture: "x86_64";
	readonly digest: string;
	readonly sizeBytes: bigint;
	readonly facts: readonly SandboxEnvironmentFact[];
	/** Set on what rootfs.flatten returns: the image file is the first
	 * `fileBytes` bytes of the store's blocks 0, 1, ... (under
	 * `context.base` = this image), read back by rootfs.bytes and copied to
	 * `path` (verified) when a VM boots it. */
	readonly stored?: { readonly store: SandboxBlockStore; readonly fileBytes: bigint };
}

export interface RootfsImageInput {
	name: string;
	path: string;
	format: string;
	architecture: string;
	digest: string;
	sizeBytes: bigint;
	facts: readonly SandboxEnvironmentFact[];
}

/** Writable machine state for one boot, in memory. */
export interface SandboxEphemeralRootfs {
	readonly kind: "ephemeral";
	readonly base: SandboxImage;
	readonly maxDirtyBytes: number;
}

/** Durable machine state in one local file. */
export interface SandboxPersistentRootfs {
	readonly kind: "persistent";
	readonly base: SandboxImage;
	readonly path: string;
}

/** Machine state in a caller-owned block store (rootfs.cow). */
export interface SandboxCowRootfs {
	readonly kind: "cow";
	readonly base: SandboxImage;
	readonly writable: SandboxBlockStore;
	/** Changed bytes not yet flushed to the store, at most (the vmm's
	 * `--max-dirty-bytes`). */
	readonly maxDirtyBytes: number;
}

/** A base and the machine changes saved over it (rootfs.compose): what
 * rootfs.cow({source}) boots and rootfs.flatten turns into one image. */
export interface SandboxComposedSource {
	readonly kind: "composed";
	readonly base: SandboxImage;
	readonly overlay: SandboxBlockStore;
}

/** What `defineSandbox({rootfs})` takes. */
export type SandboxRootfs = SandboxImage | SandboxEphemeralRootfs | SandboxPersistentRootfs | SandboxCowRootfs;

/** Words of an image name that move: refused (as Kiln's rootfs.md lists them). */
const MOVING_ALIASES = [
	"latest", "stable", "current", "lts", "edge", "nightly", "head", "newest",
	"rolling", "testing", "unstable", "sid",
];

const DIGEST = /^sha256:[0-9a-f]{64}$/;
const BLOCK = 4096n;
const DEFAULT_MAX_DIRTY_BYTES = 64 * 1024 * 1024;

function image(input: RootfsImageInput): SandboxImage {
	const what = "rootfs.image";
	const o = record(what, input, ["name", "path", "format", "architecture", "digest", "sizeBytes", "facts"]);
	for (const k of ["name", "path", "format", "architecture", "digest", "sizeBytes", "facts"])
		if (o[k] === undefined)
			fail(what, `${k} is required (every field of an image descriptor is)`);

	const name = nonEmpty(`${what}: name`, o["name"]);
	if (name.length > 128 || !/^[A-Za-z0-9][A-Za-z0-9._+:/@-]*$/.test(name))
		fail(what, `name must be 1-128 characters of [A-Za-z0-9._+:/@-] starting with a letter or digit, got ${shown(name)}`);
	for (const word of name.split(/[^A-Za-z0-9]+/))
		if (MOVING_ALIASES.includes(word.toLowerCase()))
			fail(what, `name ${shown(name)} names a moving alias ("${word}"): pin a version`);

	const p = absolutePath(`${what}: path`, o["path"]);
	const format = string(`${what}: format`, o["format"]);
	if (format !== "raw" && format !== "qcow2")
		fail(what, `format must be "raw" (an ext4 file system) or "qcow2" (a qcow2 file of one), got ${shown(format)}`);

	const arch = string(`${what}: architecture`, o["architecture"]);
	if (arch !== "x64" && arch !== "x86_64")
		fail(what, `architecture must be "x64" or "x86_64" (Kiln runs x86-64 guests), got ${shown(arch)}`);

	const digest = string(`${what}: digest`, o["digest"]);
	if (!DIGEST.test(digest))
		fail(what, `digest must be "sha256:" + 64 lowercase hex, got ${shown(digest)}`);

	const size = o["sizeBytes"];
	if (typeof size !== "bigint")
		fail(what, `sizeBytes must be a bigint (e.g. 167772160n), got ${shown(size)}`);
	if (size <= 0n || size % BLOCK !== 0n)
		fail(what, `sizeBytes must be positive and a multiple of 4096, got ${size}n`);

	const facts = imageFacts(`${what}: facts`, o["facts"]);
	return Object.freeze({
		kind: "image", name, path: p, format, architecture: "x86_64", digest, sizeBytes: size, facts,
	});
}

/** What an image package exports (guest/images/image-package.sh): the
 * input of rootfs.image, taken wherever an image goes and validated by it
 * then, as the seed's packages export an image ready to use. */
function isImageInput(v: unknown): v is RootfsImageInput {
	return typeof v === "object" && v !== null && !("kind" in v) && "digest" in v;
}

function baseImage(what: string, v: unknown): SandboxImage {
	if (isImageInput(v))
		return image(v);
	const o = v as Partial<SandboxImage> | null;
	if (typeof o !== "object" || o === null || o.kind !== "image" || !Object.isFrozen(o))
		fail(what, `must be an image from rootfs.image(...) or an image package, got ${shown(v)}`);
	return o as SandboxImage;
}

function ephemeral(options: { base: SandboxImage | RootfsImageInput; maxDirtyBytes?: number }): SandboxEphemeralRootfs {
	const what = "rootfs.ephemeral";
	const o = record(what, options, ["base", "maxDirtyBytes"]);
	const base = baseImage(`${what}: base`, o["base"]);
	const max = o["maxDirtyBytes"] === undefined ? DEFAULT_MAX_DIRTY_BYTES
		: integer(`${what}: maxDirtyBytes`, o["maxDirtyBytes"], 4096, Number.MAX_SAFE_INTEGER);
	return Object.freeze({ kind: "ephemeral", base, maxDirtyBytes: max });
}

function persistent(options: { base: SandboxImage | RootfsImageInput; path: string }): SandboxPersistentRootfs {
	const what = "rootfs.persistent";
	const o = record(what, options, ["base", "path"]);
	const base = baseImage(`${what}: base`, o["base"]);
	if (o["path"] === undefined)
		fail(what, "path is required");
	const p = absolutePath(`${what}: path`, o["path"]);
	return Object.freeze({ kind: "persistent", base, path: p });
}

function cow(options: RootfsCowOptions): SandboxCowRootfs {
	const what = "rootfs.cow";
	const o = record(what, options, ["base", "writable", "source", "maxDirtyBytes"]);
	const max = o["maxDirtyBytes"] === undefined ? DEFAULT_MAX_DIRTY_BYTES
		: integer(`${what}: maxDirtyBytes`, o["maxDirtyBytes"], 4096, Number.MAX_SAFE_INTEGER);
	if (o["source"] !== undefined) {
		if (o["base"] !== undefined || o["writable"] !== undefined)
			fail(what, "takes {base, writable} or {source}, not both");
		const src = composedSource(`${what}: source`, o["source"]);
		return Object.freeze({ kind: "cow", base: src.base, writable: src.overlay, maxDirtyBytes: max });
	}
	if (o["base"] === undefined || o["writable"] === undefined)
		fail(what, "base and writable are required (or a composed source: rootfs.cow({source}))");
	const base = baseImage(`${what}: base`, o["base"]);
	const writable = checkBlockStore(`${what}: writable`, o["writable"]);
	return Object.freeze({ kind: "cow", base, writable, maxDirtyBytes: max });
}

function compose(options: { base: SandboxImage | RootfsImageInput; overlay: SandboxBlockStore }): SandboxComposedSource {
	const what = "rootfs.compose";
	const o = record(what, options, ["base", "overlay"]);
	if (o["base"] === undefined || o["overlay"] === undefined)
		fail(what, "base and overlay are required");
	const base = baseImage(`${what}: base`, o["base"]);
	const overlay = checkBlockStore(`${what}: overlay`, o["overlay"]);
	return Object.freeze({ kind: "composed", base, overlay });
}

export function composedSource(what: string, v: unknown): SandboxComposedSource {
	const o = v as { kind?: unknown } | null;
	if (typeof o !== "object" || o === null || o.kind !== "composed" || !Object.isFrozen(o))
		fail(what, `must be rootfs.compose(...), got ${shown(v)}`);
	return o as SandboxComposedSource;
}

export type RootfsCowOptions =
	| { base: SandboxImage | RootfsImageInput; writable: SandboxBlockStore; maxDirtyBytes?: number }
	| { source: SandboxComposedSource; maxDirtyBytes?: number };

export type { RootfsBytesOptions, RootfsFlattenOptions } from "./image-export.js";

export const rootfs = Object.freeze({ image, ephemeral, persistent, cow, compose, flatten, bytes });

export { baseImage };

/** Is `v` a root `defineSandbox` takes? (Throws naming it otherwise.) */
export function checkRootfs(what: string, v: unknown): SandboxRootfs {
	if (isImageInput(v))
		return image(v);
	const o = v as { kind?: unknown } | null;
	if (typeof o === "object" && o !== null && Object.isFrozen(o) &&
	    (o.kind === "image" || o.kind === "ephemeral" || o.kind === "persistent" || o.kind === "cow"))
		return o as SandboxRootfs;
	return fail(what, "must be rootfs.image(...), an image package's image, rootfs.ephemeral(...), " +
		`rootfs.persistent(...) or rootfs.cow(...), got ${shown(v)}`);
}

// The block store interface (seed 003, "SandboxBlockStore"), served to
// the vmm by blockstore.ts (Documentation/rootfs.md, "Block stores").

export interface SandboxBlockStoreContext {
	/** The starting (or generated) image the blocks belong to: its name
	 * and its digest, "sha256:<hex>" (the identity the vmm's hello
	 * carries). */
	readonly base: { readonly name: string; readonly digest: string };
}

export interface SandboxBlockRange {
	/** First block index. */
	readonly start: bigint;
	/** Number of blocks. */
	readonly count: bigint;
}

export interface SandboxBlockChunk {
	readonly index: bigint;
	readonly bytes: Uint8Array;
}

export interface SandboxBlockStore {
	readonly blockSize: number;
	list(context: SandboxBlockStoreContext): Promise<readonly bigint[]>;
	read(range: SandboxBlockRange, context: SandboxBlockStoreContext): Promise<readonly SandboxBlockChunk[]>;
	write(chunks: readonly SandboxBlockChunk[], context: SandboxBlockStoreContext): Promise<void>;
	flush?(context: SandboxBlockStoreContext): Promise<void>;
	/**
	 * Optional: 1 to 64 bytes naming what the store holds, which change
	 * whenever a flushed write changes it (a generation counter with the
	 * store's own identity, or a digest). A snapshot of a VM on the store
	 * records it, and a restore refuses a store whose state differs.
	 * Without it, the server gives a token of its own for this store
	 * object, valid while this process serves it (Kiln's rootfs.md,
	 * "State tokens").
	 */
	state?(context: SandboxBlockStoreContext): Promise<Uint8Array>;
}
