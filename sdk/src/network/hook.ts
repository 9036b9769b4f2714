// The VM's policy hook, served from this process: a Unix SOCK_STREAM
// socket in the VM's runtime directory that the vmm connects to
// ("hook": {"socket", "timeoutMs"} in its policy), one JSON object per
// line each way (Documentation/network.md, "The protocol").
//
// The vmm is ours, but nothing it sends may crash this process or grow
// it without bound: a line past MAX_LINE bytes without a newline drops
// the connection; a line that is not a question with an id is counted
// and skipped (there is no id to answer); at most MAX_PENDING questions
// are decided at once per connection (more are denied "hook busy" at
// once); a peer that does not read its answers (MAX_UNREAD bytes) is
// dropped. The vmm reconnects on its next question.

import net from "node:net";
import { rmSync } from "node:fs";
import { PolicyDecider, deny } from "./policy.js";
import type { HookAnswer, OnConnectionRequest } from "./policy.js";

/** Longest line taken: a request question is at most 32 KiB
 * (HOOK_HTTP_LINE_MAX); twice that for slack. */
export const MAX_LINE = 64 * 1024;
/** Questions decided at once per connection (the vmm keeps at most 256
 * pending: HOOK_MAX_PENDING). */
export const MAX_PENDING = 512;
/** Answer bytes the peer may leave unread before it is dropped. */
export const MAX_UNREAD = 1024 * 1024;

export interface HookStats {
	questions: number;
	answered: number;
	malformed: number;
	dropped: number;
}

/** Answers one line, or undefined when it has no id to answer. */
export async function answerLine(decider: PolicyDecider, line: string, stats: HookStats): Promise<HookAnswer | undefined> {
	let q: unknown;
	try {
		q = JSON.parse(line);
	} catch {
		stats.malformed++;
		return undefined;
	}
	if (typeof q !== "object" || q === null || Array.isArray(q)) {
		stats.malformed++;
		return undefined;
	}
	const id = (q as Record<string, unknown>)["id"];
	if (typeof id !== "number" || !Number.isSafeInteger(id) || id < 1) {
		stats.malformed++;
		return undefined;
	}
	stats.questions++;
	try {
		return await decider.answer(q as Record<string, unknown> & { id: number });
	} catch {
		return deny(id, "policy error");
	}
}

export class HookServer {
	readonly stats: HookStats = { questions: 0, answered: 0, malformed: 0, dropped: 0 };
	readonly #decider: PolicyDecider;
	readonly #server: net.Server;
	readonly #conns = new Set<net.Socket>();
	#path: string | undefined;

	constructor(callback: OnConnectionRequest, timeoutMs: number, log: (line: string) => void = () => undefined) {
		this.#decider = new PolicyDecider(callback, timeoutMs, log);
		this.#server = net.createServer((s) => this.#serve(s));
	}

	get decider(): PolicyDecider {
		return this.#decider;
	}

	/** Listens on path (removed first if it is there). */
	listen(path: string): Promise<void> {
		rmSync(path, { force: true });
		this.#path = path;
		return new Promise((resolve, reject) => {
			this.#server.once("error", reject);
			this.#server.listen(path, () => {
				this.#server.off("error", reject);
				resolve();
			});
		});
	}

	close(): Promise<void> {
		for (const s of this.#conns)
			s.destroy();
		return new Promise((resolve) => this.#server.close(() => {
			if (this.#path)
				rmSync(this.#path, { force: true });
			resolve();
		}));
	}

	#serve(s: net.Socket): void {
		this.#conns.add(s);
		let buf = "";
		let pending = 0;
		const drop = (): void => {
			this.stats.dropped++;
			s.destroy();
		};
		s.setEncoding("utf8");
		s.on("error", () => undefined);
		s.on("close", () => this.#conns.delete(s));
		const send = (a: HookAnswer): void => {
			if (s.destroyed)
				return;
			this.stats.answered++;
			s.write(JSON.stringify(a) + "\n");
			if (s.writableLength > MAX_UNREAD)
				drop();
		};
		s.on("data", (chunk: string) => {
			buf += chunk;
			for (;;) {
				const nl = buf.indexOf("\n");
				if (nl < 0)
					break;
				const line = buf.slice(0, nl);
				buf = buf.slice(nl + 1);
				if (line.trim() === "") {
					this.stats.malformed++;
					continue;
				}
				if (pending >= MAX_PENDING) {
					const id = idOf(line);
					if (id !== undefined)
						send(deny(id, "hook busy"));
					else
						this.stats.malformed++;
					continue;
				}
				pending++;
				void answerLine(this.#decider, line, this.stats).then((a) => {
					pending--;
					if (a)
						send(a);
				});
			}
			if (Buffer.byteLength(buf) > MAX_LINE)
				drop();
		});
	}
}

function idOf(line: string): number | undefined {
	try {
		const id = (JSON.parse(line) as Record<string, unknown>)["id"];
		return typeof id === "number" && Number.isSafeInteger(id) && id >= 1 ? id : undefined;
	} catch {
		return undefined;
	}
}
