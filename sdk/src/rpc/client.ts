// A JSON-RPC 2.0 client on the vmm's control socket (Documentation/api.md):
// request ids, answers matched by id in whatever order they come,
// notifications dispatched by method, cancellation through `cancel`.

import net from "node:net";
import { ConnectionClosedError, SandboxError, abortError, rpcError } from "../errors.js";
import { MAX_BODY_BYTES, MAX_REQUEST_BYTES, MessageDecoder, encodeBodyRequest, encodeRequest } from "./codec.js";
import type { Frame, RpcId } from "./codec.js";

export type Params = Record<string, unknown>;
/** `body`: the raw bytes after the notification's line (fs.chunk with size). */
export type NotificationHandler = (params: Params, body?: Uint8Array) => void;

interface Pending {
	method: string;
	resolve: (v: unknown) => void;
	reject: (e: Error) => void;
}

export interface CallOptions {
	/** Aborting sends `cancel {id}`; the call then rejects with an AbortError. */
	signal?: AbortSignal | undefined;
}

/** One connection to a control socket. */
export class RpcConnection {
	readonly #sock: net.Socket;
	readonly #decoder = new MessageDecoder();
	readonly #pending = new Map<RpcId, Pending>();
	readonly #handlers = new Map<string, Set<NotificationHandler>>();
	#nextId = 1;
	#closedWith: Error | undefined;
	readonly #closed: Promise<Error>;
	#onClosed!: (e: Error) => void;

	private constructor(sock: net.Socket) {
		this.#sock = sock;
		this.#closed = new Promise((resolve) => {
			this.#onClosed = resolve;
		});
		sock.on("data", (chunk: Buffer) => this.#receive(chunk));
		sock.on("error", (e) => this.#fail(this.#ended(e.message)));
		sock.on("close", () => this.#fail(this.#ended("closed by the vmm")));
	}

	/** Connects to the Unix socket at `path`. */
	static connect(path: string): Promise<RpcConnection> {
		return new Promise((resolve, reject) => {
			const sock = net.createConnection({ path });
			const onError = (e: Error): void => {
				sock.destroy();
				reject(e);
			};
			sock.once("error", onError);
			sock.once("connect", () => {
				sock.off("error", onError);
				resolve(new RpcConnection(sock));
			});
		});
	}

	/** Wraps a connected socket (tests). */
	static fromSocket(sock: net.Socket): RpcConnection {
		return new RpcConnection(sock);
	}

	/** Resolves with the reason once the connection is gone. */
	get closed(): Promise<Error> {
		return this.#closed;
	}

	get isClosed(): boolean {
		return this.#closedWith !== undefined;
	}

	/** Calls `handler` for each notification `method` (returns an unsubscribe). */
	on(method: string, handler: NotificationHandler): () => void {
		let set = this.#handlers.get(method);
		if (!set) {
			set = new Set();
			this.#handlers.set(method, set);
		}
		set.add(handler);
		return () => {
			set.delete(handler);
		};
	}

	/** Sends a request; `id` is known at once, the answer comes in `result`.
	 * With `body` (fs.write only), its bytes follow the line raw and
	 * params.size says how many (api.md, fs.write). */
	request(method: string, params?: Params, body?: Uint8Array): { id: RpcId; result: Promise<unknown> } {
		const id = this.#nextId++;
		const result = new Promise<unknown>((resolve, reject) => {
			if (this.#closedWith) {
				reject(new ConnectionClosedError(method, this.#closedWith.message));
				return;
			}
			if (body !== undefined && body.byteLength > MAX_BODY_BYTES) {
				reject(new SandboxError(`${method}: a body of ${body.byteLength} bytes is over the control socket's ${MAX_BODY_BYTES}-byte limit`));
				return;
			}
			let out: string | Buffer;
			try {
				out = body === undefined ? encodeRequest(id, method, params) : encodeBodyRequest(id, method, params ?? {}, body);
			} catch (e) {
				reject(e as Error);
				return;
			}
			const lineBytes = typeof out === "string" ? Buffer.byteLength(out) : out.length - (body?.byteLength ?? 0);
			if (lineBytes > MAX_REQUEST_BYTES) {
				reject(new SandboxError(`${method}: the request is over the control socket's ${MAX_REQUEST_BYTES}-byte line limit`));
				return;
			}
			this.#pending.set(id, { method, resolve, reject });
			this.#sock.write(out);
		});
		return { id, result };
	}

	/** A request whose answer is awaited; an aborted signal cancels it. */
	async call(method: string, params?: Params, options: CallOptions = {}): Promise<unknown> {
		return this.#await(method, params, undefined, options);
	}

	/** The same with a raw body after the line (fs.write {stream, size}). */
	async callWithBody(method: string, params: Params, body: Uint8Array, options: CallOptions = {}): Promise<unknown> {
		return this.#await(method, params, body, options);
	}

	async #await(method: string, params: Params | undefined, body: Uint8Array | undefined, options: CallOptions): Promise<unknown> {
		const { signal } = options;
		if (signal?.aborted)
			throw abortError(signal);
		const { id, result } = this.request(method, params, body);
		if (!signal)
			return result;
		const onAbort = (): void => {
			// The answer (-32002) settles the request; the guest's
			// process group has been killed by then.
			this.request("cancel", { id }).result.catch(() => undefined);
		};
		signal.addEventListener("abort", onAbort, { once: true });
		try {
			return await result;
		} catch (e) {
			if (signal.aborted)
				throw abortError(signal);
			throw e;
		} finally {
			signal.removeEventListener("abort", onAbort);
		}
	}

	/** Stops reading answers (the vmm then stops reading the guest for us). */
	pause(): void {
		this.#sock.pause();
	}

	resume(): void {
		this.#sock.resume();
	}

	close(): void {
		this.#sock.destroy();
		this.#fail("closed by the client");
	}

	/** Why the connection ended, with what it cut short. */
	#ended(why: string): string {
		const cut = this.#decoder.cutShort();
		return cut === undefined ? why : `${why}: ${cut}`;
	}

	#receive(chunk: Buffer): void {
		if (this.#closedWith)
			return;
		try {
			this.#decoder.push(chunk, (f) => this.#dispatch(f));
		} catch (e) {
			this.#sock.destroy();
			this.#fail((e as Error).message);
		}
	}

	#dispatch(f: Frame): void {
		const { msg } = f;
		if (msg.kind === "notification") {
			const set = this.#handlers.get(msg.method);
			if (set)
				for (const h of [...set])
					h(msg.params, f.body);
			return;
		}
		if (msg.id === null) {
			// The server could not tell which request: it closes next.
			const err = msg.kind === "error" ? msg.error.message : "an answer without id";
			this.#fail(`the vmm refused a request: ${err}`);
			return;
		}
		const p = this.#pending.get(msg.id);
		if (!p)
			return; // an answer to nothing pending: a cancelled call's
		this.#pending.delete(msg.id);
		if (msg.kind === "result")
			p.resolve(msg.result);
		else
			p.reject(rpcError(p.method, msg.error.code, msg.error.message, msg.error.data));
	}

	#fail(why: string): void {
		if (this.#closedWith)
			return;
		this.#closedWith = new SandboxError(why);
		for (const [, p] of this.#pending)
			p.reject(new ConnectionClosedError(p.method, why));
		this.#pending.clear();
		this.#onClosed(this.#closedWith);
	}
}
