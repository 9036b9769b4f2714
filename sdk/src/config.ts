// The vmm's JSON configuration for a sandbox definition and one boot
// (Documentation/cli.md, "JSON configuration"), and the files it names.

import type { McpServerSpec } from "./facets.js";
import { writeFileSync } from "node:fs";
import path from "node:path";
import type { BindMount, SandboxMount } from "./fs.js";
import type { VmmPaths } from "./locate.js";
import type { SandboxImage, SandboxRootfs } from "./rootfs.js";
import type { NetworkPolicy } from "./network/index.js";
import { HOOK_SLACK_MS } from "./network/index.js";
import { cleanAbsolutePath, fail, integer, nonEmpty, record, shown } from "./validate.js";

export interface SandboxResources {
	/** vCPUs, 1 to 64 (default 1). */
	cpus?: number;
	/** Guest RAM in MiB (default 256). */
	memoryMiB?: number;
}

export interface BootOptions {
	/** The guest's hostname (default "sandbox"). */
	hostname?: string;
	/** Absolute guest path to what is mounted there. */
	mounts?: Readonly<Record<string, SandboxMount>>;
	/** The default working directory of later process calls. */
	cwd?: string;
	/** MCP servers the guest offers, by name (vm.tools; the image's
	 * `mcp-server` facts too). */
	tools?: Readonly<Record<string, McpServerSpec>>;
}

/** The most mounts one VM takes (cli.md, "mounts"). */
export const MAX_MOUNTS = 8;

const LABEL = /^[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?$/;

export interface CheckedBoot {
	hostname: string | undefined;
	mounts: [string, SandboxMount][];
	cwd: string | undefined;
}

export function checkBoot(options: BootOptions | undefined): CheckedBoot {
	const what = "sandbox.boot";
	// tools: checked by declaredTools (src/facets.ts); the vmm never sees them.
	const o = record(what, options ?? {}, ["hostname", "mounts", "cwd", "tools"]);
	let hostname: string | undefined;
	if (o["hostname"] !== undefined) {
		hostname = nonEmpty(`${what}: hostname`, o["hostname"]);
		if (hostname.length > 64 || !hostname.split(".").every((l) => LABEL.test(l)))
			fail(`${what}: hostname`, `must be labels of ASCII letters, digits and "-" joined by dots (none empty, none starting or ending with "-", 63 bytes each, 64 in all), got ${shown(hostname)}`);
	}
	const mounts: [string, SandboxMount][] = [];
	if (o["mounts"] !== undefined) {
		const m = o["mounts"];
		if (typeof m !== "object" || m === null || Array.isArray(m))
			fail(`${what}: mounts`, `must be a record keyed by absolute guest paths, got ${shown(m)}`);
		for (const [guest, mount] of Object.entries(m as Record<string, unknown>)) {
			const at = `${what}: mounts[${JSON.stringify(guest)}]`;
			const gp = cleanAbsolutePath(at, guest);
			if (gp === "/")
				fail(at, "cannot mount over the root");
			if (mounts.some(([g]) => g === gp))
				fail(at, `mounts ${gp} twice`);
			const k = (mount as { kind?: unknown } | null)?.kind;
			if ((k !== "bind" && k !== "virtual") || !Object.isFrozen(mount))
				fail(at, `must be fs.bind(...) or fs.virtual(...), got ${shown(mount)}`);
			mounts.push([gp, mount as SandboxMount]);
		}
		if (mounts.length > MAX_MOUNTS)
			fail(`${what}: mounts`, `${mounts.length} mounts, Kiln takes at most ${MAX_MOUNTS}`);
	}
	const cwd = o["cwd"] === undefined ? undefined : cleanAbsolutePath(`${what}: cwd`, o["cwd"]);
	return { hostname, mounts, cwd };
}

export function checkResources(v: unknown): Required<SandboxResources> | undefined {
	if (v === undefined)
		return undefined;
	const o = record("defineSandbox: resources", v, ["cpus", "memoryMiB"]);
	return {
		cpus: o["cpus"] === undefined ? 1 : integer("defineSandbox: resources.cpus", o["cpus"], 1, 64),
		memoryMiB: o["memoryMiB"] === undefined ? 256
			: integer("defineSandbox: resources.memoryMiB", o["memoryMiB"], 16, 16 * 1024 * 1024),
	};
}

export function baseOf(r: SandboxRootfs): SandboxImage {
	return r.kind === "image" ? r : r.base;
}

/** Writes DIR/image.json, the descriptor as the vmm reads it, its facts
 * in it (Documentation/rootfs.md, "Image facts": the vmm gives them after
 * its own config facts); returns the descriptor's path. */
export function writeImage(dir: string, image: SandboxImage): string {
	const descriptor = path.join(dir, "image.json");
	writeFileSync(descriptor, JSON.stringify({
		name: image.name,
		path: image.path,
		format: image.format,
		architecture: image.architecture,
		digest: image.digest,
		sizeBytes: Number(image.sizeBytes),
		facts: image.facts,
	}, null, 2) + "\n", { mode: 0o600 });
	return descriptor;
}

function bindConfig(b: BindMount): Record<string, unknown> {
	const bind: Record<string, unknown> = { source: b.source, access: b.access };
	if (b.mask) {
		const mask: Record<string, unknown> = { paths: [...b.mask.paths] };
		if (b.mask.storage)
			mask["storage"] = { source: b.mask.storage.source };
		bind["mask"] = mask;
	}
	return { bind };
}

/** The sockets this process serves for one VM (in its runtime dir). */
export interface ServedSockets {
	/** The policy hook's, when the sandbox has network.policy. */
	hook?: string;
	/** Each virtual mount's, by guest path. */
	virtual: ReadonlyMap<string, string>;
	/** The block store's, for a rootfs.cow root. */
	store?: string;
}

export interface VmmConfigInput {
	kiln: VmmPaths;
	network?: NetworkPolicy | undefined;
	sockets?: ServedSockets;
	rootfs: SandboxRootfs;
	resources: Required<SandboxResources> | undefined;
	boot: CheckedBoot;
	descriptor: string;
	controlSocket?: string;
	consoleLog?: string;
	readyTimeoutMs?: number;
}

export function vmmConfig(i: VmmConfigInput): Record<string, unknown> {
	const rootfs: Record<string, unknown> = { image: i.descriptor };
	switch (i.rootfs.kind) {
	case "image":
		rootfs["mode"] = "readonly";
		break;
	case "ephemeral":
		rootfs["mode"] = "ephemeral";
		rootfs["maxDirtyBytes"] = i.rootfs.maxDirtyBytes;
		break;
	case "persistent":
		rootfs["mode"] = "persistent";
		rootfs["statePath"] = i.rootfs.path;
		break;
	case "cow":
		if (i.sockets?.store === undefined)
			throw new Error("internal: no block store served for rootfs.cow");
		rootfs["mode"] = "cow";
		rootfs["storeSocket"] = i.sockets.store;
		rootfs["maxDirtyBytes"] = i.rootfs.maxDirtyBytes;
		break;
	}
	// No kernel for the namespace launcher: its vmm boots none.
	const c: Record<string, unknown> = {};
	if (i.kiln.kernel !== undefined)
		c["kernel"] = i.kiln.kernel;
	if (i.kiln.initrd !== undefined)
		c["initrd"] = i.kiln.initrd;
	c["rootfs"] = rootfs;
	if (i.resources) {
		c["cpus"] = i.resources.cpus;
		c["memoryMiB"] = i.resources.memoryMiB;
	}
	if (i.boot.hostname !== undefined)
		c["hostname"] = i.boot.hostname;
	if (i.boot.cwd !== undefined)
		c["cwd"] = i.boot.cwd;
	if (i.boot.mounts.length > 0) {
		const mounts: Record<string, unknown> = {};
		for (const [g, m] of i.boot.mounts) {
			if (m.kind === "bind") {
				mounts[g] = bindConfig(m);
				continue;
			}
			const socket = i.sockets?.virtual.get(g);
			if (socket === undefined)
				throw new Error(`internal: no socket served for the virtual mount ${g}`);
			mounts[g] = { virtual: { socket, timeoutMs: m.timeoutMs } };
		}
		c["mounts"] = mounts;
	}
	if (i.network) {
		if (i.sockets?.hook === undefined)
			throw new Error("internal: no hook socket served for network.policy");
		// A hook alone: every flow, DNS question and HTTP request the
		// guest makes is the callback's (Documentation/network.md).
		const net: Record<string, unknown> = {
			mode: "auto",
			policy: { hook: { socket: i.sockets.hook, timeoutMs: i.network.timeoutMs + HOOK_SLACK_MS } },
		};
		if (i.network.upstreamCaBundle !== undefined)
			net["caBundle"] = i.network.upstreamCaBundle;
		c["net"] = net;
	}
	// The VM goes when this process does, even by SIGKILL
	// (Documentation/cli.md, "Dying with the orchestrator").
	c["dieWithParent"] = true;
	if (i.controlSocket !== undefined)
		c["controlSocket"] = i.controlSocket;
	if (i.consoleLog !== undefined)
		c["consoleLog"] = { path: i.consoleLog };
	if (i.readyTimeoutMs !== undefined)
		c["readyTimeoutMs"] = i.readyTimeoutMs;
	return c;
}
