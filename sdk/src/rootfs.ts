// rootfs: the machine a VM starts from (seed 003, "rootfs.image(input)" and
// the sections after it; Kiln: Documentation/rootfs.md).

import { NotSupportedError } from "./errors.js";
import { imageFacts } from "./facts.js";
import type { SandboxEnvironmentFact } from "./facts.js";
import { absolutePath, fail, integer, nonEmpty, record, shown, string } from "./validate.js";

/** A read-only Linux machine image, as `rootfs.image(...)` returns it. */
export interface SandboxImage {
	readonly kind: "image";
	readonly name: string;
	readonly path: string;
	readonly format: "raw";
	/** Normalised: Node's `process.arch` "x64" is Kiln's "x86_64". */
	readonly architecture: "x86_64";
	readonly digest: string;
	readonly sizeBytes: bigint;
	readonly facts: readonly SandboxEnvironmentFact[];
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

/** What `defineSandbox({rootfs})` takes. */
export type SandboxRootfs = SandboxImage | SandboxEphemeralRootfs | SandboxPersistentRootfs;

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
	if (format !== "raw")
		throw new NotSupportedError(`rootfs.image format ${shown(format)}`, 'Kiln serves "raw" images (an ext4 file system, no partition table)');

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
		kind: "image", name, path: p, format: "raw", architecture: "x86_64", digest, sizeBytes: size, facts,
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

const BLOCK_STORE_ISSUE = "caller-owned block stores come with Kiln's block-store issue (33)";

function cow(_options: RootfsCowOptions): never {
	throw new NotSupportedError("rootfs.cow", BLOCK_STORE_ISSUE);
}

function compose(_options: { base: SandboxImage; overlay: SandboxBlockStore }): never {
	throw new NotSupportedError("rootfs.compose", BLOCK_STORE_ISSUE);
}

function flatten(_options: { format: "qcow2"; source: SandboxImage; dest: SandboxBlockStore; clusterSize?: number }): Promise<never> {
	return Promise.reject(new NotSupportedError("rootfs.flatten", BLOCK_STORE_ISSUE));
}

function bytes(_image: SandboxImage, _options?: { chunkSize?: number }): AsyncIterable<Uint8Array> {
	throw new NotSupportedError("rootfs.bytes", BLOCK_STORE_ISSUE);
}

export type RootfsCowOptions =
	| { base: SandboxImage; writable: SandboxBlockStore; maxDirtyBytes?: number }
	| { source: unknown; maxDirtyBytes?: number };

export const rootfs = Object.freeze({ image, ephemeral, persistent, cow, compose, flatten, bytes });

/** Is `v` a root `defineSandbox` takes? (Throws naming it otherwise.) */
export function checkRootfs(what: string, v: unknown): SandboxRootfs {
	if (isImageInput(v))
		return image(v);
	const o = v as { kind?: unknown } | null;
	if (typeof o === "object" && o !== null && Object.isFrozen(o) &&
	    (o.kind === "image" || o.kind === "ephemeral" || o.kind === "persistent"))
		return o as SandboxRootfs;
	return fail(what, `must be rootfs.image(...), an image package's image, rootfs.ephemeral(...) or rootfs.persistent(...), got ${shown(v)}`);
}

// The block store interface (seed 003, "SandboxBlockStore"): typed now,
// served with the block-store issue.

export interface SandboxBlockStoreContext {
	/** The starting (or generated) image the deltas belong to. */
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
}
