// Two small SandboxBlockStore implementations for the examples (the seed's
// AgentMachineStore is an application's own class: these stand in for
// it). Blocks are namespaced by `context.base.digest`, so deltas never
// meet another image, and a write is durable only once flush() returned.
//
// - AgentMachineStore: "object storage" in this process's memory, one
//   object per block under bucket/keyPrefix/<base digest>/<block>.
// - DirectoryBlockStore: one file per block under DIR/<base hex>/,
//   written to a temporary name and renamed into place on flush.

import { randomUUID } from "node:crypto";
import { mkdirSync, readFileSync, readdirSync, renameSync, writeFileSync } from "node:fs";
import path from "node:path";
import type {
	SandboxBlockChunk, SandboxBlockRange, SandboxBlockStore, SandboxBlockStoreContext,
} from "@kiln/sandbox";

const BLOCK = 4096;

export class AgentMachineStore implements SandboxBlockStore {
	readonly blockSize = BLOCK;
	readonly #prefix: string;
	/** The "bucket": object key -> bytes. */
	readonly objects = new Map<string, Uint8Array>();
	/** Written, not yet flushed (a store may lose these). */
	readonly #staged = new Map<string, Uint8Array>();
	writes = 0;
	flushes = 0;

	constructor(options: { bucket: string; keyPrefix: string }) {
		this.#prefix = `${options.bucket}/${options.keyPrefix}`;
	}

	#key(ctx: SandboxBlockStoreContext, block: bigint): string {
		return `${this.#prefix}/${ctx.base.digest}/${block.toString(16).padStart(16, "0")}`;
	}

	async list(ctx: SandboxBlockStoreContext): Promise<readonly bigint[]> {
		const dir = `${this.#prefix}/${ctx.base.digest}/`;
		const found = new Set<bigint>();
		for (const k of [...this.objects.keys(), ...this.#staged.keys()])
			if (k.startsWith(dir))
				found.add(BigInt(`0x${k.slice(dir.length)}`));
		return [...found];
	}

	async read(range: SandboxBlockRange, ctx: SandboxBlockStoreContext): Promise<readonly SandboxBlockChunk[]> {
		const out: SandboxBlockChunk[] = [];
		for (let b = range.start; b < range.start + range.count; b++) {
			const bytes = this.#staged.get(this.#key(ctx, b)) ?? this.objects.get(this.#key(ctx, b));
			if (bytes)
				out.push({ index: b, bytes });
		}
		return out;
	}

	async write(chunks: readonly SandboxBlockChunk[], ctx: SandboxBlockStoreContext): Promise<void> {
		this.writes++;
		// The SDK hands over bytes it will not touch again: kept as they are.
		for (const c of chunks)
			this.#staged.set(this.#key(ctx, c.index), c.bytes);
	}

	async flush(): Promise<void> {
		this.flushes++;
		for (const [k, v] of this.#staged)
			this.objects.set(k, v);
		this.#staged.clear();
	}

	/** Blocks held for one image, flushed or not. */
	async count(digest: string): Promise<number> {
		return (await this.list({ base: { name: "", digest } })).length;
	}
}

export class DirectoryBlockStore implements SandboxBlockStore {
	readonly blockSize = BLOCK;
	readonly #dir: string;
	#pending: [string, string][] = [];

	constructor(dir: string) {
		this.#dir = dir;
	}

	#base(ctx: SandboxBlockStoreContext): string {
		const d = path.join(this.#dir, ctx.base.digest.replace(/^sha256:/, ""));
		mkdirSync(d, { recursive: true, mode: 0o700 });
		return d;
	}

	#file(ctx: SandboxBlockStoreContext, b: bigint): string {
		return path.join(this.#base(ctx), b.toString(16).padStart(16, "0"));
	}

	async list(ctx: SandboxBlockStoreContext): Promise<readonly bigint[]> {
		return readdirSync(this.#base(ctx)).filter((n) => /^[0-9a-f]{16}$/.test(n)).map((n) => BigInt(`0x${n}`));
	}

	async read(range: SandboxBlockRange, ctx: SandboxBlockStoreContext): Promise<readonly SandboxBlockChunk[]> {
		const out: SandboxBlockChunk[] = [];
		for (let b = range.start; b < range.start + range.count; b++) {
			try {
				out.push({ index: b, bytes: readFileSync(this.#file(ctx, b)) });
			} catch {
				// not stored: the SDK answers ENOENT
			}
		}
		return out;
	}

	async write(chunks: readonly SandboxBlockChunk[], ctx: SandboxBlockStoreContext): Promise<void> {
		for (const c of chunks) {
			const file = this.#file(ctx, c.index);
			const tmp = `${file}.tmp-${randomUUID()}`;
			writeFileSync(tmp, c.bytes, { mode: 0o600 });
			this.#pending.push([tmp, file]);
		}
	}

	async flush(): Promise<void> {
		for (const [tmp, file] of this.#pending)
			renameSync(tmp, file);
		this.#pending = [];
	}
}
