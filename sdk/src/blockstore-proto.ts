// The block-store protocol's bytes (Documentation/rootfs.md, "The
// protocol"): pure functions, no I/O. A frame is u32 length (the bytes
// after it, type included), u8 type, payload; every integer little-endian.
// The vmm asks, the store (this SDK, serving a SandboxBlockStore) answers.

import { constants } from "node:os";

export const STORE_VERSION = 1;
/** The only block size the vmm takes (store-proto.h STORE_BLOCK_SIZE). */
export const STORE_BLOCK_SIZE = 4096;
export const STORE_FRAME_HDR = 4;
/** Bytes after a frame's length field, at most (STORE_MSG_MAX). */
export const STORE_MSG_MAX = 2 << 20;
/** Blocks in one read or write (STORE_IO_BLOCKS). */
export const STORE_IO_BLOCKS = 256;
/** Block numbers in one list answer (STORE_LIST_MAX). */
export const STORE_LIST_MAX = 65536;
/** Bytes of the base's identity in a hello (STORE_BASE_MAX). */
export const STORE_BASE_MAX = 128;
/** Bytes of an error answer's text (STORE_ERRMSG_MAX). */
export const STORE_ERRMSG_MAX = 1024;
/** Bytes of a state token (STORE_TOKEN_MAX): 1 to 64. */
export const STORE_TOKEN_MAX = 64;
/** list's "next cursor" at the end. */
export const STORE_LIST_END = 0xffff_ffff_ffff_ffffn;

export const Msg = {
	hello: 0x01,
	list: 0x02,
	read: 0x03,
	write: 0x04,
	flush: 0x05,
	state: 0x06,
	reply: 0x80,
	error: 0xff,
} as const;

/** hello's flags: this connection is the store's one writer. */
export const STORE_CLAIM = 0x1;
const CHUNK_DATA = 0;
const CHUNK_ZERO = 1;
const HELLO_FIXED = 22; /* version, block size, blocks, flags, n */

export const Errno = {
	EPERM: constants.errno.EPERM,
	ENOENT: constants.errno.ENOENT,
	EIO: constants.errno.EIO,
	EBUSY: constants.errno.EBUSY,
	EINVAL: constants.errno.EINVAL,
} as const;

/** A request refused in the protocol: becomes an ERROR answer. */
export class StoreRefusal extends Error {
	override name = "StoreRefusal";
	readonly errno: number;

	constructor(errno: number, message: string) {
		super(message);
		this.errno = errno;
	}
}

export type StoreRequest =
	| { type: "hello"; version: number; blockSize: number; blocks: bigint; claim: boolean; base: string }
	| { type: "list"; cursor: bigint; max: number }
	| { type: "read"; ranges: { first: bigint; count: number }[] }
	| { type: "write"; chunks: { index: bigint; bytes: Uint8Array | null }[] }
	| { type: "flush" }
	| { type: "state" };

function refuse(why: string): never {
	throw new StoreRefusal(Errno.EINVAL, why);
}

/** Decodes one request's payload (the frame's type byte given apart). */
export function decodeRequest(type: number, p: Buffer): StoreRequest {
	switch (type) {
	case Msg.hello: {
		if (p.length < HELLO_FIXED)
			refuse(`hello of ${p.length} bytes (at least ${HELLO_FIXED})`);
		const n = p.readUInt16LE(20);
		if (n === 0 || n > STORE_BASE_MAX || p.length !== HELLO_FIXED + n)
			refuse(`hello with a ${n}-byte base identity in ${p.length - HELLO_FIXED} bytes (1 to ${STORE_BASE_MAX})`);
		return {
			type: "hello",
			version: p.readUInt32LE(0),
			blockSize: p.readUInt32LE(4),
			blocks: p.readBigUInt64LE(8),
			claim: (p.readUInt32LE(16) & STORE_CLAIM) !== 0,
			base: p.subarray(HELLO_FIXED).toString("latin1"),
		};
	}
	case Msg.list: {
		if (p.length !== 12)
			refuse(`list of ${p.length} bytes (12)`);
		const max = p.readUInt32LE(8);
		if (max === 0 || max > STORE_LIST_MAX)
			refuse(`list of at most ${max} blocks (1 to ${STORE_LIST_MAX})`);
		return { type: "list", cursor: p.readBigUInt64LE(0), max };
	}
	case Msg.read: {
		if (p.length < 4)
			refuse(`read of ${p.length} bytes`);
		const n = p.readUInt32LE(0);
		if (n === 0 || n > STORE_IO_BLOCKS || p.length !== 4 + 12 * n)
			refuse(`read of ${n} ranges in ${p.length} bytes (1 to ${STORE_IO_BLOCKS} ranges of 12 bytes)`);
		const ranges: { first: bigint; count: number }[] = [];
		let total = 0;
		for (let i = 0; i < n; i++) {
			const first = p.readBigUInt64LE(4 + 12 * i);
			const count = p.readUInt32LE(12 + 12 * i);
			total += count;
			if (count === 0 || total > STORE_IO_BLOCKS)
				refuse(`read of blocks ${first}+${count}: ${STORE_IO_BLOCKS} blocks at most in one read, none empty`);
			ranges.push({ first, count });
		}
		return { type: "read", ranges };
	}
	case Msg.write: {
		if (p.length < 4)
			refuse(`write of ${p.length} bytes`);
		const n = p.readUInt32LE(0);
		if (n === 0 || n > STORE_IO_BLOCKS)
			refuse(`write of ${n} blocks (1 to ${STORE_IO_BLOCKS})`);
		const chunks: { index: bigint; bytes: Uint8Array | null }[] = [];
		let off = 4;
		for (let i = 0; i < n; i++) {
			if (off + 9 > p.length)
				refuse(`write cut short at byte ${off} (block ${i} of ${n})`);
			const index = p.readBigUInt64LE(off);
			const kind = p.readUInt8(off + 8);
			off += 9;
			if (kind === CHUNK_ZERO) {
				chunks.push({ index, bytes: null });
				continue;
			}
			if (kind !== CHUNK_DATA)
				refuse(`write of block ${index}: kind ${kind} (0 data, 1 zeros)`);
			if (off + STORE_BLOCK_SIZE > p.length)
				refuse(`write cut short at byte ${off} (block ${index}'s data)`);
			// A copy the store owns (seed: "Sandbox will not mutate those
			// Uint8Array values"), not a view of the receive buffer.
			chunks.push({ index, bytes: new Uint8Array(p.subarray(off, off + STORE_BLOCK_SIZE)) });
			off += STORE_BLOCK_SIZE;
		}
		if (off !== p.length)
			refuse(`write with ${p.length - off} bytes past its ${n} blocks`);
		return { type: "write", chunks };
	}
	case Msg.flush:
		if (p.length !== 0)
			refuse(`flush with a ${p.length}-byte payload (none)`);
		return { type: "flush" };
	case Msg.state:
		if (p.length !== 0)
			refuse(`state with a ${p.length}-byte payload (none)`);
		return { type: "state" };
	default:
		return refuse(`unknown request type 0x${type.toString(16).padStart(2, "0")}`);
	}
}

/** A whole frame: length, type, payload parts. */
export function frame(type: number, ...parts: Uint8Array[]): Buffer {
	const len = parts.reduce((a, p) => a + p.length, 0);
	const hdr = Buffer.alloc(STORE_FRAME_HDR + 1);
	hdr.writeUInt32LE(len + 1, 0);
	hdr.writeUInt8(type, 4);
	return Buffer.concat([hdr, ...parts], STORE_FRAME_HDR + 1 + len);
}

/** UTF-8 of `s`, cut at a character boundary to at most `max` bytes. */
export function cutUtf8(s: string, max: number): Buffer {
	const b = Buffer.from(s, "utf8");
	if (b.length <= max)
		return b;
	let end = max;
	while (end > 0 && ((b[end] ?? 0) & 0xc0) === 0x80)
		end--;
	return b.subarray(0, end);
}

export function errorFrame(errno: number, text: string): Buffer {
	const t = cutUtf8(text, STORE_ERRMSG_MAX);
	const p = Buffer.alloc(6);
	p.writeUInt32LE(errno >>> 0, 0);
	p.writeUInt16LE(t.length, 4);
	return frame(Msg.error, p, t);
}

/** A state token on the wire: u16 n, then its n bytes (1 to 64). */
export function tokenBytes(token: Uint8Array): Buffer {
	if (token.length === 0 || token.length > STORE_TOKEN_MAX)
		throw new RangeError(`a state token of ${token.length} bytes (1 to ${STORE_TOKEN_MAX})`);
	const n = Buffer.alloc(2);
	n.writeUInt16LE(token.length, 0);
	return Buffer.concat([n, token]);
}

/** hello's answer: its 16 fixed bytes, then the store's state token. */
export function helloAnswer(blockSize: number, stored: bigint, token: Uint8Array): Buffer {
	const p = Buffer.alloc(16);
	p.writeUInt32LE(STORE_VERSION, 0);
	p.writeUInt32LE(blockSize, 4);
	p.writeBigUInt64LE(stored, 8);
	return frame(Msg.hello | Msg.reply, p, tokenBytes(token));
}

export function stateAnswer(token: Uint8Array): Buffer {
	return frame(Msg.state | Msg.reply, tokenBytes(token));
}

export function listAnswer(next: bigint, blocks: readonly bigint[]): Buffer {
	const p = Buffer.alloc(12 + 8 * blocks.length);
	p.writeBigUInt64LE(next, 0);
	p.writeUInt32LE(blocks.length, 8);
	blocks.forEach((b, i) => p.writeBigUInt64LE(b, 12 + 8 * i));
	return frame(Msg.list | Msg.reply, p);
}

export function readAnswer(blocks: readonly Uint8Array[]): Buffer {
	const n = Buffer.alloc(4);
	n.writeUInt32LE(blocks.length, 0);
	return frame(Msg.read | Msg.reply, n, ...blocks);
}

/** The store's errno for what a SandboxBlockStore method threw: its
 * `code` when that names an errno ("ENOSPC"), else EIO. */
export function errnoOf(e: unknown): number {
	if (e instanceof StoreRefusal)
		return e.errno;
	const code = (e as { code?: unknown } | null)?.code;
	const table = constants.errno as Readonly<Record<string, number>>;
	if (typeof code === "string" && /^E[A-Z0-9]+$/.test(code) && table[code] !== undefined)
		return table[code];
	return Errno.EIO;
}

/** Splits a byte stream into frames, holding at most one frame (plus the
 * socket's last chunk) at a time. */
export class StoreFramer {
	#chunks: Buffer[] = [];
	#have = 0;

	push(chunk: Buffer): void {
		this.#chunks.push(chunk);
		this.#have += chunk.length;
	}

	get buffered(): number {
		return this.#have;
	}

	/** The next whole frame, undefined while incomplete; throws a
	 * StoreRefusal for a length the stream cannot be followed past. */
	next(): { type: number; payload: Buffer } | undefined {
		if (this.#have < STORE_FRAME_HDR)
			return undefined;
		// Joined only when the length field spans chunks: a 2 MiB frame
		// arriving in 64 KiB chunks is copied once, when it is whole.
		let head = this.#chunks[0] as Buffer;
		if (head.length < STORE_FRAME_HDR)
			head = this.#join();
		const len = head.readUInt32LE(0);
		if (len === 0 || len > STORE_MSG_MAX)
			throw new StoreRefusal(Errno.EINVAL, `frame of ${len} bytes (1 to ${STORE_MSG_MAX})`);
		if (this.#have < STORE_FRAME_HDR + len)
			return undefined;
		const all = this.#join();
		const body = all.subarray(STORE_FRAME_HDR, STORE_FRAME_HDR + len);
		const rest = all.subarray(STORE_FRAME_HDR + len);
		this.#chunks = rest.length ? [rest] : [];
		this.#have = rest.length;
		return { type: body.readUInt8(0), payload: body.subarray(1) };
	}

	#join(): Buffer {
		if (this.#chunks.length > 1)
			this.#chunks = [Buffer.concat(this.#chunks, this.#have)];
		return this.#chunks[0] as Buffer;
	}
}
