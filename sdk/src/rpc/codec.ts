// The control socket's framing and messages (Documentation/api.md,
// "Messages"): one JSON text per line, "\n"-terminated.

import { SandboxError, isRecord } from "../errors.js";

/** Longest line accepted from the vmm: an answer holds at most 16 MiB of
 * collected data (api.md, "What the guest can make the API hold"), which
 * base64 and JSON escapes grow by at most 4/3 and 6/1 for names. */
export const MAX_LINE_BYTES = 128 * 1024 * 1024;

/** Longest request line the vmm reads (api.md, "Limits": 1 MiB). */
export const MAX_REQUEST_BYTES = 1024 * 1024;

/** Largest raw body after a request line (api.md, fs.write: 1 MiB). */
export const MAX_BODY_BYTES = 1024 * 1024;

/** Methods the vmm reads a raw body for, when their params have `size`. */
export const BODY_METHODS: ReadonlySet<string> = new Set(["fs.write"]);

/** Splits a byte stream into lines, whatever way the stream cut it:
 * a message over several chunks, several messages in one chunk. */
export class LineDecoder {
	#parts: Buffer[] = [];
	#held = 0;
	readonly #max: number;

	constructor(maxLineBytes: number = MAX_LINE_BYTES) {
		this.#max = maxLineBytes;
	}

	/** The complete lines `chunk` ends, without their "\n". */
	push(chunk: Buffer): string[] {
		const lines: string[] = [];
		let start = 0;
		for (;;) {
			const nl = chunk.indexOf(0x0a, start);
			if (nl < 0)
				break;
			const piece = chunk.subarray(start, nl);
			if (this.#held + piece.length > this.#max)
				throw new SandboxError(`control socket: a line over ${this.#max} bytes`);
			this.#parts.push(piece);
			lines.push(Buffer.concat(this.#parts).toString("utf8"));
			this.#parts = [];
			this.#held = 0;
			start = nl + 1;
		}
		if (start < chunk.length) {
			const rest = chunk.subarray(start);
			this.#held += rest.length;
			if (this.#held > this.#max)
				throw new SandboxError(`control socket: a line over ${this.#max} bytes`);
			// Copy: the caller may reuse its buffer.
			this.#parts.push(Buffer.from(rest));
		}
		return lines;
	}

	/** Bytes of an unfinished line held. */
	get pending(): number {
		return this.#held;
	}
}

export type RpcId = number;

/** Largest raw body after a notification's line (fs.chunk with size;
 * the vmm's chunks are at most 64 KiB). */
export const MAX_CHUNK_BODY_BYTES = 1024 * 1024;

/** Notifications the vmm sends a raw body after, when their params have
 * `size` (api.md, fs.readFile with raw). */
export const BODY_NOTIFICATIONS: ReadonlySet<string> = new Set(["fs.chunk"]);

/** A message from the vmm, and the raw bytes that followed its line when
 * it has them (fs.chunk with size). */
export interface Frame {
	msg: RpcMessage;
	body?: Buffer;
}

interface BodyWait {
	msg: RpcMessage & { kind: "notification" };
	size: number;
	parts: Buffer[];
	held: number;
}

/** Messages, and their bodies, from a byte stream however it was cut: the
 * mirror of how the vmm reads fs.write's body (client.c, "Bodies"). After
 * a line that is a notification in BODY_NOTIFICATIONS with params.size = N,
 * exactly the next N bytes are its body, whatever they look like; the
 * next line starts after them. Nothing else has a body. */
export class MessageDecoder {
	readonly #lines: LineDecoder;
	#body: BodyWait | undefined;

	constructor(maxLineBytes: number = MAX_LINE_BYTES) {
		this.#lines = new LineDecoder(maxLineBytes);
	}

	/** Calls `each` for every message `chunk` completes, in order; throws
	 * naming what is wrong on a bad line or size (the messages before it
	 * have been handed over). */
	push(chunk: Buffer, each: (f: Frame) => void): void {
		let at = 0;
		while (at < chunk.length) {
			const b = this.#body;
			if (b) {
				const take = Math.min(b.size - b.held, chunk.length - at);
				// Copy: the caller may reuse its buffer.
				b.parts.push(Buffer.from(chunk.subarray(at, at + take)));
				b.held += take;
				at += take;
				if (b.held === b.size) {
					this.#body = undefined;
					each({ msg: b.msg, body: Buffer.concat(b.parts, b.size) });
				}
				continue;
			}
			const nl = chunk.indexOf(0x0a, at);
			const end = nl < 0 ? chunk.length : nl + 1;
			const lines = this.#lines.push(chunk.subarray(at, end));
			at = end;
			for (const line of lines)
				if (line.length !== 0)
					this.#line(line, each);
		}
	}

	#line(line: string, each: (f: Frame) => void): void {
		const msg = parseMessage(line);
		if (msg.kind !== "notification" || !BODY_NOTIFICATIONS.has(msg.method) || !("size" in msg.params)) {
			each({ msg });
			return;
		}
		const size = msg.params["size"];
		if (typeof size !== "number" || !Number.isInteger(size) || size < 0 || size > MAX_CHUNK_BODY_BYTES)
			throw new SandboxError(`control socket: ${msg.method} size ${JSON.stringify(size)}: expected 0 to ${MAX_CHUNK_BODY_BYTES} bytes`);
		if (size === 0) {
			each({ msg, body: Buffer.alloc(0) });
			return;
		}
		this.#body = { msg, size, parts: [], held: 0 };
	}

	/** When the stream ends here: what it cut short (a body: naming its
	 * stream, the request id), or undefined. */
	cutShort(): string | undefined {
		const b = this.#body;
		if (b)
			return `the connection ended ${b.held} bytes into a ${b.msg.method} of ${b.size} (stream of request ${JSON.stringify(b.msg.params["id"])})`;
		if (this.#lines.pending > 0)
			return `the connection ended inside a line (${this.#lines.pending} bytes)`;
		return undefined;
	}
}

export interface RpcErrorObject {
	code: number;
	message: string;
	data?: unknown;
}

export type RpcMessage =
	| { kind: "result"; id: RpcId; result: unknown }
	| { kind: "error"; id: RpcId | null; error: RpcErrorObject }
	| { kind: "notification"; method: string; params: Record<string, unknown> };

/** Keys whose integers may pass 2^53 (nanosecond times): parsed as bigint. */
const BIG_KEYS = /"(mtimeNs)":(-?\d+)/g;

/** One line from the vmm as a message; throws naming what is wrong. */
export function parseMessage(line: string): RpcMessage {
	let v: unknown;
	try {
		// A JSON string cannot hold an unescaped quote, so the pattern only
		// matches members; their digits become strings, read back below.
		v = JSON.parse(line.replace(BIG_KEYS, '"$1":"$2"'), (key, value: unknown) =>
			key === "mtimeNs" && typeof value === "string" && /^-?\d+$/.test(value) ? BigInt(value) : value);
	} catch (e) {
		throw new SandboxError(`control socket: not JSON: ${(e as Error).message}: ${preview(line)}`);
	}
	if (!isRecord(v) || v["jsonrpc"] !== "2.0")
		throw new SandboxError(`control socket: not a JSON-RPC 2.0 message: ${preview(line)}`);
	const id = v["id"];
	if (typeof v["method"] === "string" && id === undefined) {
		const params = v["params"];
		return { kind: "notification", method: v["method"], params: isRecord(params) ? params : {} };
	}
	if (id !== null && typeof id !== "number")
		throw new SandboxError(`control socket: an answer with id ${JSON.stringify(id)}, not one of ours`);
	if ("error" in v) {
		const err = v["error"];
		if (!isRecord(err) || typeof err["code"] !== "number" || typeof err["message"] !== "string")
			throw new SandboxError(`control socket: a malformed error: ${preview(line)}`);
		const error: RpcErrorObject = { code: err["code"], message: err["message"] };
		if ("data" in err)
			error.data = err["data"];
		return { kind: "error", id, error };
	}
	if (id === null || !("result" in v))
		throw new SandboxError(`control socket: an answer with neither result nor error: ${preview(line)}`);
	return { kind: "result", id, result: v["result"] };
}

/** A request line, "\n" included. */
export function encodeRequest(id: RpcId, method: string, params: Record<string, unknown> | undefined): string {
	const msg: Record<string, unknown> = { jsonrpc: "2.0", id, method };
	if (params !== undefined)
		msg["params"] = params;
	return JSON.stringify(msg, (_k, value: unknown) => (typeof value === "bigint" ? Number(value) : value)) + "\n";
}

/** A request with a raw body (api.md, fs.write): its line, with params.size
 * set to the body's length, then the body's bytes. */
export function encodeBodyRequest(id: RpcId, method: string, params: Record<string, unknown>, body: Uint8Array): Buffer {
	if (!BODY_METHODS.has(method))
		throw new SandboxError(`${method}: takes no body (only ${[...BODY_METHODS].join(", ")})`);
	const line = Buffer.from(encodeRequest(id, method, { ...params, size: body.byteLength }), "utf8");
	return Buffer.concat([line, body]);
}

function preview(line: string): string {
	return line.length > 120 ? JSON.stringify(line.slice(0, 120)) + "..." : JSON.stringify(line);
}
