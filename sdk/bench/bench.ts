// bench.js - the SDK against raw JSON-RPC on the same VMs' image, side
// by side (tools/bench-sdk runs it; Documentation/benchmarks.md, "SDK
// benchmark").
//
// One Node process boots, round after round, one VM through the SDK
// (defineSandbox, sandbox.boot, vm.exec, vm.spawn, vm.close) and one
// through raw JSON-RPC (tools/bench-agent-client.py boot, Python, which
// spawns `vmm start` itself), the order swapping every round, after one
// unmeasured warm-up boot of each (the SDK's pays the pins' hashing, once
// per process). Every boot times boot to agent ready, the first exec of
// `true` and the shutdown; the last round's two VMs also run W unmeasured
// and N measured exec calls of `true`, one at a time, and one spawn of
// `head -c BYTES /dev/zero` read to its end (the SDK's after one
// unmeasured spawn of `true`). On the SDK's VM the exec calls alternate
// with those of a bare Node client (NodeRpc, below), which then runs N
// more on a connection subscribed to the VM's events: the breakdown of
// what the SDK adds. Prints the table: figures per side and SDK/raw, then
// the breakdown. Exits 1 when a boot or a workload fails, 2 on usage
// errors.

import { spawn } from "node:child_process";
import { readFileSync } from "node:fs";
import net from "node:net";
import os from "node:os";
import { defineSandbox, rootfs } from "@kiln/sandbox";
import type { SandboxEnvironmentFact } from "@kiln/sandbox";

interface Stream { bytes: number; seconds: number; first_byte: number; chunks: number; max_chunk: number }
interface Run {
	ready: number;
	first_exec: number;
	shutdown: number;
	exec?: number[];
	stream?: Stream;
	/** SDK side: the same exec from a bare Node client, its connection
	 * not subscribed, then subscribed (with the notifications it got). */
	node_exec?: number[];
	node_sub_exec?: number[];
	node_sub_notes?: number;
}

const USAGE = "usage: bench.js --descriptor FILE --python PATH --client FILE --vmm FILE --kernel FILE " +
	"--initrd FILE --dir DIR [--boots N] [--execs N] [--warmup N] [--stream-bytes N] [--timeout S]";
const opt: Record<string, string> = {
	boots: "3", execs: "50", warmup: "5", "stream-bytes": String(64 << 20), timeout: "120",
};
const argv = process.argv.slice(2);
for (let i = 0; i < argv.length; i += 2) {
	const k = argv[i] ?? "", v = argv[i + 1];
	if (!k.startsWith("--") || v === undefined) {
		console.error(USAGE);
		process.exit(2);
	}
	opt[k.slice(2)] = v;
}
const num = (k: string, min: number): number => {
	const n = Number(opt[k]);
	if (!Number.isSafeInteger(n) || n < min) {
		console.error(`bench.js: --${k} wants an integer >= ${min}, not "${opt[k]}"\n${USAGE}`);
		process.exit(2);
	}
	return n;
};
for (const k of ["descriptor", "python", "client", "vmm", "kernel", "initrd", "dir"])
	if (opt[k] === undefined) {
		console.error(`bench.js: --${k} is required\n${USAGE}`);
		process.exit(2);
	}
const boots = num("boots", 1), execs = num("execs", 1), warmup = num("warmup", 0);
const streamBytes = num("stream-bytes", 1), timeoutS = num("timeout", 1);
const note = (s: string): void => void process.stderr.write(`bench-sdk: ${s}\n`);
const now = (): number => performance.now() / 1000;

// The image as the SDK takes it: the descriptor bench-agent-client.py
// boots, its facts (none for kiln-test) beside it.
const d = JSON.parse(readFileSync(opt["descriptor"] ?? "", "utf8")) as Record<string, unknown>;
let facts: SandboxEnvironmentFact[] = [];
try {
	facts = JSON.parse(readFileSync(String(opt["descriptor"]).replace(/\.json$/, ".facts.json"), "utf8")) as
		SandboxEnvironmentFact[];
} catch {
	// no facts file
}
const base = rootfs.image({
	name: String(d["name"]), path: String(d["path"]), format: String(d["format"]),
	architecture: String(d["architecture"]), digest: String(d["digest"]),
	sizeBytes: BigInt(Number(d["sizeBytes"])),
	facts: facts.map((f) => ({ ...f, value: String(f.value) })),
});
// What the raw client boots: `vmm start --rootfs DESCRIPTOR` (ephemeral),
// 1 vCPU, 256 MiB.
const sandbox = defineSandbox({
	rootfs: rootfs.ephemeral({ base }),
	resources: { cpus: 1, memoryMiB: 256 },
	kiln: { vmm: String(opt["vmm"]), kernel: String(opt["kernel"]), initrd: String(opt["initrd"]) },
});

/** JSON-RPC on the control socket with nothing of the SDK: one call at
 * a time, notifications counted and dropped. Where the SDK's exec is
 * slower than the raw side's, this says how much is Node's own and how
 * much the SDK's (the raw side is Python). */
class NodeRpc {
	readonly #sock: net.Socket;
	#buf = "";
	#next = 1;
	#answer: ((msg: Record<string, unknown>) => void) | undefined;
	notifications = 0;

	private constructor(sock: net.Socket) {
		this.#sock = sock;
		sock.setEncoding("utf8");
		sock.on("data", (s: string) => {
			this.#buf += s;
			for (let nl = this.#buf.indexOf("\n"); nl >= 0; nl = this.#buf.indexOf("\n")) {
				const msg = JSON.parse(this.#buf.slice(0, nl)) as Record<string, unknown>;
				this.#buf = this.#buf.slice(nl + 1);
				if (msg["id"] === undefined)
					this.notifications++;
				else
					this.#answer?.(msg);
			}
		});
	}

	static open(path: string): Promise<NodeRpc> {
		return new Promise((resolve, reject) => {
			const sock = net.createConnection({ path });
			sock.once("error", reject);
			sock.once("connect", () => resolve(new NodeRpc(sock)));
		});
	}

	call(method: string, params?: Record<string, unknown>): Promise<Record<string, unknown>> {
		return new Promise((resolve, reject) => {
			const id = this.#next++;
			this.#answer = (msg) => {
				if (msg["id"] !== id)
					return;
				this.#answer = undefined;
				if (msg["error"] !== undefined)
					reject(new Error(`${method}: ${JSON.stringify(msg["error"])}`));
				else
					resolve(msg["result"] as Record<string, unknown>);
			};
			this.#sock.write(JSON.stringify({ jsonrpc: "2.0", id, method, params }) + "\n");
		});
	}

	close(): void {
		this.#sock.destroy();
	}
}

async function nodeExecTrue(c: NodeRpc): Promise<number> {
	const t0 = now();
	const r = await c.call("exec", { argv: ["true"] });
	const dt = now() - t0;
	if (r["exitCode"] !== 0)
		throw new Error(`exec true (Node client): ${JSON.stringify(r)}`);
	return dt;
}

async function sdkBoot(work: boolean): Promise<Run> {
	let t = now();
	const vm = await sandbox.boot();
	const ready = now() - t;
	try {
		const execTrue = async (): Promise<number> => {
			const t0 = now();
			const r = await vm.exec("true");
			const dt = now() - t0;
			if (r.exitCode !== 0)
				throw new Error(`exec true: exit ${r.exitCode}: ${r.stderr}`);
			return dt;
		};
		const run: Run = { ready, first_exec: await execTrue(), shutdown: 0 };
		if (work) {
			// vm.exec and the bare client alternating, then the bare
			// client subscribed to the VM's events on its connection.
			const plain = await NodeRpc.open(vm.controlSocket);
			for (let i = 0; i < warmup; i++) {
				await execTrue();
				await nodeExecTrue(plain);
			}
			run.exec = [];
			run.node_exec = [];
			for (let i = 0; i < execs; i++) {
				run.exec.push(await execTrue());
				run.node_exec.push(await nodeExecTrue(plain));
			}
			plain.close();
			const sub = await NodeRpc.open(vm.controlSocket);
			await sub.call("vm.subscribe");
			for (let i = 0; i < warmup; i++)
				await nodeExecTrue(sub);
			const before = sub.notifications;
			run.node_sub_exec = [];
			for (let i = 0; i < execs; i++)
				run.node_sub_exec.push(await nodeExecTrue(sub));
			run.node_sub_notes = sub.notifications - before;
			sub.close();
			// Unmeasured: a process's first spawn loads what streams need.
			const w = vm.spawn("true");
			for await (const chunk of w.stdout)
				void chunk;
			await w.exit;
			t = now();
			const p = vm.spawn("head", ["-c", String(streamBytes), "/dev/zero"]);
			const s: Stream = { bytes: 0, seconds: 0, first_byte: 0, chunks: 0, max_chunk: 0 };
			for await (const chunk of p.stdout) {
				if (s.chunks === 0)
					s.first_byte = now() - t;
				s.bytes += chunk.length;
				s.chunks++;
				s.max_chunk = Math.max(s.max_chunk, chunk.length);
			}
			const exit = await p.exit;
			s.seconds = now() - t;
			if (exit.exitCode !== 0 || s.bytes !== streamBytes)
				throw new Error(`spawn head -c ${streamBytes}: exit ${exit.exitCode}, ${s.bytes} bytes`);
			run.stream = s;
		}
		t = now();
		await vm.close();
		run.shutdown = now() - t;
		return run;
	} finally {
		await vm.close();
	}
}

function rawBoot(work: boolean): Promise<Run> {
	const args = [String(opt["client"]), "boot", "--vmm", String(opt["vmm"]), "--kernel", String(opt["kernel"]),
		"--initrd", String(opt["initrd"]), "--rootfs", String(opt["descriptor"]), "--dir", String(opt["dir"]),
		"--cpus", "1", "--memory", "256", "--timeout", String(timeoutS)];
	if (work)
		args.push("--execs", String(execs), "--warmup", String(warmup), "--stream-bytes", String(streamBytes));
	return new Promise((resolve, reject) => {
		const c = spawn(String(opt["python"]), args, { stdio: ["ignore", "pipe", "inherit"] });
		let out = "";
		c.stdout.setEncoding("utf8").on("data", (s: string) => {
			out += s;
		});
		c.on("error", reject);
		c.on("close", (code) => {
			if (code !== 0)
				return reject(new Error(`${opt["client"]} boot exited ${code}`));
			try {
				resolve(JSON.parse(out) as Run);
			} catch (e) {
				reject(new Error(`${opt["client"]} boot: not a JSON line: ${String(e)}`));
			}
		});
	});
}

const runs: { raw: Run[]; sdk: Run[] } = { raw: [], sdk: [] };
try {
	note("warm-up boots (raw, SDK)");
	await rawBoot(false);
	await sdkBoot(false);
	for (let i = 1; i <= boots; i++) {
		const work = i === boots;
		note(`round ${i}/${boots}${work ? `: then ${execs} x exec true, spawn head -c ${streamBytes}` : ""}`);
		for (const side of i % 2 === 1 ? ["raw", "sdk"] as const : ["sdk", "raw"] as const)
			runs[side].push(await (side === "raw" ? rawBoot(work) : sdkBoot(work)));
	}
} catch (e) {
	note(e instanceof Error ? e.stack ?? e.message : String(e));
	process.exit(1);
}

// ---- the table ----------------------------------------------------------

const median = (v: readonly number[]): number => {
	const s = [...v].sort((a, b) => a - b);
	const m = s.length >> 1;
	return s.length % 2 ? s[m] ?? NaN : ((s[m - 1] ?? NaN) + (s[m] ?? NaN)) / 2;
};
const mean = (v: readonly number[]): number => v.reduce((a, b) => a + b, 0) / v.length;
const ms = (x: number): string => (x >= 0.1 ? (x * 1000).toFixed(0) : (x * 1000).toFixed(2));
const rows: string[][] = [];
const row = (name: string, raw: number, sdk: number, fmt = ms): void => {
	rows.push([name, fmt(raw), fmt(sdk), (sdk / raw).toFixed(2)]);
};
const all = (side: Run[], k: "ready" | "first_exec" | "shutdown"): number[] => side.map((r) => r[k]);
row(`boot to agent ready (ms, median of ${boots})`, median(all(runs.raw, "ready")), median(all(runs.sdk, "ready")));
row(`first exec true after ready (ms, median of ${boots})`,
	median(all(runs.raw, "first_exec")), median(all(runs.sdk, "first_exec")));
const rawW = runs.raw[runs.raw.length - 1], sdkW = runs.sdk[runs.sdk.length - 1];
if (rawW?.exec && sdkW?.exec && rawW.stream && sdkW.stream) {
	row(`exec true round trip (ms, median of ${execs})`, median(rawW.exec), median(sdkW.exec));
	row(`exec true round trip (ms, mean of ${execs})`, mean(rawW.exec), mean(sdkW.exec));
	const mib = (streamBytes / (1 << 20)).toFixed(0);
	row(`spawn head -c ${mib}M: to exit (s)`, rawW.stream.seconds, sdkW.stream.seconds, (x) => x.toFixed(2));
	const mbs = (s: Stream): number => s.bytes / s.seconds / 1e6;
	rows.push([`  streaming (MB/s; the ratio is raw/SDK)`, mbs(rawW.stream).toFixed(1), mbs(sdkW.stream).toFixed(1),
		(mbs(rawW.stream) / mbs(sdkW.stream)).toFixed(2)]);
	row("  first byte (ms)", rawW.stream.first_byte, sdkW.stream.first_byte);
}
const breakdown: string[] = [];
if (rawW?.exec && sdkW?.exec && sdkW.node_exec && sdkW.node_sub_exec) {
	const r = median(rawW.exec), s = median(sdkW.exec), n = median(sdkW.node_exec), ns = median(sdkW.node_sub_exec);
	breakdown.push(`exec true round trip, medians of ${execs} on the SDK's VM (ms):`,
		`  vm.exec ${ms(s)}, alternating with a bare Node client: ${ms(n)} (SDK/Node ${(s / n).toFixed(2)}, Node/raw ${(n / r).toFixed(2)})`,
		`  the bare Node client subscribed to vm.event: ${ms(ns)} (${(ns / n).toFixed(2)} x unsubscribed), ` +
		`${((sdkW.node_sub_notes ?? 0) / execs).toFixed(1)} notifications per exec`);
	if (execs >= 20) {
		const ends = (v: number[]): string => `${ms(median(v.slice(0, 10)))} / ${ms(median(v.slice(-10)))}`;
		breakdown.push(`  medians of the first / last 10: raw ${ends(rawW.exec)}, vm.exec ${ends(sdkW.exec)}, ` +
			`Node ${ends(sdkW.node_exec)}, Node subscribed ${ends(sdkW.node_sub_exec)}`);
	}
}
row(`shutdown to exit (ms, median of ${boots})`, median(all(runs.raw, "shutdown")), median(all(runs.sdk, "shutdown")));

const head = ["metric", "raw JSON-RPC", "SDK", "SDK/raw"];
const widths = head.map((_, i) => Math.max(...[head, ...rows].map((r) => (r[i] ?? "").length)));
for (const r of [head, ...rows])
	console.log(r.map((x, i) => (i === 0 ? x.padEnd(widths[i] ?? 0) : x.padStart(widths[i] ?? 0))).join("  ").trimEnd());
if (breakdown.length > 0)
	console.log(`\n${breakdown.join("\n")}`);
if (rawW?.stream && sdkW?.stream)
	console.log(`\nstreaming: raw ${rawW.stream.chunks} stream.stdout notifications of up to ${rawW.stream.max_chunk} ` +
		`bytes; SDK ${sdkW.stream.chunks} chunks of up to ${sdkW.stream.max_chunk} bytes`);
console.log(`raw: ${opt["python"]} ${opt["client"]}; SDK: Node ${process.versions.node}, ${os.cpus().length} CPU`);
console.log(`\nraw runs: ${JSON.stringify(runs.raw.map(({ exec, ...r }) => ({ ...r, execs: exec?.length })))}`);
console.log(`SDK runs: ${JSON.stringify(runs.sdk.map(({ exec, node_exec, node_sub_exec, ...r }) =>
	({ ...r, execs: exec?.length, node_execs: node_exec?.length, node_sub_execs: node_sub_exec?.length })))}`);
