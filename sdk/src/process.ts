// vm.spawn(...) and vm.pty(...): a guest process with WHATWG streams
// (Documentation/api.md, "spawn", "pty.open", "Streams and backpressure").
//
// Each handle has a control connection of its own, so a consumer that
// does not read its output pauses that connection only: the vmm then
// stops reading the process's output from the guest (vsock credit), and
// the process blocks on its writes. Nothing is buffered without bound
// here: each output stream holds at most its high-water mark before the
// connection is paused.

import { abortError, isRecord } from "./errors.js";
import { RpcConnection } from "./rpc/client.js";
import type { Params } from "./rpc/client.js";

/** How a guest process ended. */
export interface SandboxExit {
	/** 0-255; 128+N when signal N killed it; 124 when its timeout did. */
	exitCode: number;
	signal?: number;
	timedOut: boolean;
}

export type SandboxSignal = number | "HUP" | "INT" | "QUIT" | "KILL" | "USR1" | "USR2" | "PIPE" | "ALRM" |
	"TERM" | "CONT" | "STOP" | "TSTP" | "WINCH" | `SIG${string}`;

/** Bytes of output held per stream before the connection is paused. */
export const OUTPUT_HIGH_WATER = 256 * 1024;
/** Largest input chunk sent in one write request (the request line limit
 * is 1 MiB, and base64 grows bytes by 4/3). */
export const INPUT_CHUNK = 256 * 1024;

type OpenRequest = { method: "spawn" | "pty.open"; params: Params };

/** The machinery shared by spawn and pty handles. */
export class GuestProcess {
	readonly ready: Promise<void>;
	readonly exit: Promise<SandboxExit>;
	readonly input: WritableStream<Uint8Array>;
	readonly stdout: ReadableStream<Uint8Array>;
	readonly stderr: ReadableStream<Uint8Array>;
	#conn: RpcConnection | undefined;
	#stream: number | undefined;
	#pid: number | undefined;
	#outs: (ReadableStreamDefaultController<Uint8Array> | undefined)[] = [undefined, undefined];
	#ended = false;

	constructor(connect: () => Promise<RpcConnection>, open: OpenRequest, signal: AbortSignal | undefined) {
		let readyResolve!: () => void;
		let readyReject!: (e: Error) => void;
		this.ready = new Promise((res, rej) => {
			readyResolve = res;
			readyReject = rej;
		});
		let exitResolve!: (e: SandboxExit) => void;
		let exitReject!: (e: Error) => void;
		this.exit = new Promise((res, rej) => {
			exitResolve = res;
			exitReject = rej;
		});
		// Awaiting only one of them must not leave the other unhandled.
		this.ready.catch(() => undefined);
		this.exit.catch(() => undefined);

		const strategy = { highWaterMark: OUTPUT_HIGH_WATER, size: (c: Uint8Array) => c.byteLength };
		const out = (i: 0 | 1): ReadableStream<Uint8Array> => new ReadableStream<Uint8Array>({
			start: (c) => {
				this.#outs[i] = c;
			},
			pull: () => this.#maybeResume(),
			cancel: () => {
				// The reader is gone: drop what comes for it.
				this.#outs[i] = undefined;
				this.#maybeResume();
			},
		}, strategy);
		this.stdout = out(0);
		this.stderr = out(1);
		this.input = new WritableStream<Uint8Array>({
			write: async (chunk) => {
				await this.ready;
				const bytes = toBytes(chunk);
				for (let off = 0; off < bytes.length || off === 0; off += INPUT_CHUNK) {
					await this.#call("spawn.write", {
						stream: this.#stream,
						data: Buffer.from(bytes.subarray(off, off + INPUT_CHUNK)).toString("base64"),
					});
					if (bytes.length === 0)
						break;
				}
			},
			close: async () => {
				await this.ready;
				if (!this.#ended)
					await this.#call("spawn.closeStdin", { stream: this.#stream });
			},
			abort: async () => {
				await this.ready.catch(() => undefined);
				if (this.#stream !== undefined && !this.#ended)
					await this.#call("spawn.closeStdin", { stream: this.#stream }).catch(() => undefined);
			},
		});

		const fail = (e: Error): void => {
			readyReject(e);
			exitReject(e);
			this.#endOutputs(e);
			this.#conn?.close();
		};
		if (signal?.aborted) {
			fail(abortError(signal));
			return;
		}
		const onAbort = (): void => {
			if (this.#stream !== undefined)
				void this.kill("KILL").catch(() => undefined);
		};
		signal?.addEventListener("abort", onAbort, { once: true });

		void (async () => {
			let conn: RpcConnection;
			try {
				conn = await connect();
			} catch (e) {
				fail(e as Error);
				return;
			}
			this.#conn = conn;
			const pendingOut: Params[] = [];
			let exitParams: Params | undefined;
			const onData = (i: 0 | 1) => (p: Params): void => {
				if (this.#stream === undefined)
					pendingOut.push({ ...p, i });
				else if (p["stream"] === this.#stream)
					this.#deliver(i, p);
			};
			conn.on("stream.stdout", onData(0));
			conn.on("stream.stderr", onData(1));
			const finish = (p: Params): void => {
				this.#ended = true;
				signal?.removeEventListener("abort", onAbort);
				if (typeof p["exitCode"] !== "number") {
					const why = typeof p["error"] === "string" ? p["error"] : "no exit status";
					const e = new Error(`${open.method}: the process's stream ended: ${why}`);
					exitReject(e);
					this.#endOutputs(e);
				} else {
					const ex: SandboxExit = { exitCode: p["exitCode"], timedOut: p["timedOut"] === true };
					if (typeof p["signal"] === "number")
						ex.signal = p["signal"];
					this.#endOutputs(undefined);
					if (signal?.aborted)
						exitReject(abortError(signal));
					else
						exitResolve(ex);
				}
				conn.close();
			};
			conn.on("stream.exit", (p) => {
				if (this.#stream === undefined)
					exitParams = p;
				else if (p["stream"] === this.#stream)
					finish(p);
			});
			void conn.closed.then((why) => {
				if (!this.#ended)
					fail(new Error(`${open.method}: the control connection closed: ${why.message}`));
			});
			let result: unknown;
			try {
				result = await conn.call(open.method, open.params);
			} catch (e) {
				signal?.removeEventListener("abort", onAbort);
				fail(e as Error);
				return;
			}
			if (!isRecord(result) || typeof result["stream"] !== "number") {
				fail(new Error(`${open.method}: an answer without a stream id`));
				return;
			}
			this.#stream = result["stream"];
			this.#pid = typeof result["pid"] === "number" ? result["pid"] : undefined;
			readyResolve();
			for (const p of pendingOut)
				if (p["stream"] === this.#stream)
					this.#deliver(p["i"] as 0 | 1, p);
			if (exitParams && exitParams["stream"] === this.#stream)
				finish(exitParams);
			if (signal?.aborted)
				onAbort();
		})();
	}

	/** The guest pid, once ready. */
	get pid(): number | undefined {
		return this.#pid;
	}

	/** Sends a signal to the process group (default TERM). */
	async kill(signal: SandboxSignal = "TERM"): Promise<void> {
		await this.ready;
		if (this.#ended)
			return;
		await this.#call("spawn.kill", { stream: this.#stream, signal });
	}

	/** pty only: a new terminal size (the process gets SIGWINCH). */
	async resize(size: { rows: number; cols: number }): Promise<void> {
		await this.ready;
		if (this.#ended)
			return;
		await this.#call("pty.resize", { stream: this.#stream, rows: size.rows, cols: size.cols });
	}

	async #call(method: string, params: Params): Promise<unknown> {
		const conn = this.#conn;
		if (!conn)
			throw new Error(`${method}: the process is not running`);
		return conn.call(method, params);
	}

	#deliver(i: 0 | 1, p: Params): void {
		const c = this.#outs[i];
		if (!c || typeof p["data"] !== "string")
			return;
		c.enqueue(new Uint8Array(Buffer.from(p["data"], "base64")));
		if ((c.desiredSize ?? 1) <= 0)
			this.#conn?.pause();
	}

	#maybeResume(): void {
		if (this.#outs.every((c) => c === undefined || (c.desiredSize ?? 1) > 0))
			this.#conn?.resume();
	}

	#endOutputs(e: Error | undefined): void {
		for (let i = 0; i < 2; i++) {
			const c = this.#outs[i];
			this.#outs[i] = undefined;
			if (!c)
				continue;
			try {
				if (e)
					c.error(e);
				else
					c.close();
			} catch {
				// already closed or cancelled by its reader
			}
		}
	}
}

function toBytes(chunk: unknown): Uint8Array {
	if (chunk instanceof Uint8Array)
		return chunk;
	if (typeof chunk === "string")
		return new TextEncoder().encode(chunk);
	if (chunk instanceof ArrayBuffer)
		return new Uint8Array(chunk);
	throw new TypeError(`a process's input takes Uint8Array chunks, got ${typeof chunk}`);
}

/** What vm.spawn(...) returns. */
export interface SandboxChildProcess {
	readonly stdin: WritableStream<Uint8Array>;
	readonly stdout: ReadableStream<Uint8Array>;
	readonly stderr: ReadableStream<Uint8Array>;
	/** Resolves once the process runs (rejects when it could not start). */
	readonly ready: Promise<void>;
	readonly exit: Promise<SandboxExit>;
	readonly pid: number | undefined;
	kill(signal?: SandboxSignal): Promise<void>;
}

/** What vm.pty(...) returns. */
export interface SandboxPty {
	readonly input: WritableStream<Uint8Array>;
	readonly output: ReadableStream<Uint8Array>;
	readonly ready: Promise<void>;
	readonly exit: Promise<SandboxExit>;
	readonly pid: number | undefined;
	resize(size: { rows: number; cols: number }): Promise<void>;
	kill(signal?: SandboxSignal): Promise<void>;
}

export function childProcess(p: GuestProcess): SandboxChildProcess {
	return {
		stdin: p.input, stdout: p.stdout, stderr: p.stderr, ready: p.ready, exit: p.exit,
		get pid() {
			return p.pid;
		},
		kill: (s) => p.kill(s),
	};
}

export function ptyHandle(p: GuestProcess): SandboxPty {
	// A terminal has one output: stderr stays empty; cancel it so it
	// never holds the connection paused.
	void p.stderr.cancel();
	return {
		input: p.input, output: p.stdout, ready: p.ready, exit: p.exit,
		get pid() {
			return p.pid;
		},
		resize: (s) => p.resize(s),
		kill: (s) => p.kill(s),
	};
}
