// The vmm's side of the control socket's framing, for the fake servers:
// request lines, and after a line whose method takes a body (fs.write)
// and whose params have `size`, exactly that many raw bytes, its body,
// before the next line (Documentation/api.md, fs.write). Bytes may come
// cut anywhere.

import { BODY_METHODS } from "../src/rpc/codec.js";

export interface DecodedRequest {
	id: number;
	method: string;
	params?: Record<string, unknown>;
}

export interface Decoded {
	req: DecodedRequest;
	/** The raw body, for a request that has one. */
	body?: Buffer;
}

export class RequestDecoder {
	#buf: Buffer = Buffer.alloc(0);
	#waiting: { req: DecodedRequest; size: number } | undefined;

	/** The requests `chunk` completes, in order. */
	push(chunk: Buffer): Decoded[] {
		const out: Decoded[] = [];
		this.#buf = this.#buf.length ? Buffer.concat([this.#buf, chunk]) : Buffer.from(chunk);
		for (;;) {
			const w = this.#waiting;
			if (w) {
				if (this.#buf.length < w.size)
					break;
				out.push({ req: w.req, body: Buffer.from(this.#buf.subarray(0, w.size)) });
				this.#buf = this.#buf.subarray(w.size);
				this.#waiting = undefined;
				continue;
			}
			const nl = this.#buf.indexOf(0x0a);
			if (nl < 0)
				break;
			const req = JSON.parse(this.#buf.subarray(0, nl).toString("utf8")) as DecodedRequest;
			this.#buf = this.#buf.subarray(nl + 1);
			const size = req.params?.["size"];
			if (BODY_METHODS.has(req.method) && typeof size === "number")
				this.#waiting = { req, size };
			else
				out.push({ req });
		}
		return out;
	}
}
