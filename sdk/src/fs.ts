// fs: what a boot mounts into the guest (seed 003, "fs.bind(options)",
// "fs.memory", "fs.virtual"; Kiln: Documentation/cli.md, "mounts").

import { fail, absolutePath, oneOf, record, shown } from "./validate.js";
import { memory, virtual } from "./vfs/index.js";
import type { VirtualMount } from "./vfs/index.js";

/** A host directory passed through virtio-fs. */
export interface BindMount {
	readonly kind: "bind";
	readonly source: string;
	readonly access: "ro" | "rw";
	readonly mask?: {
		readonly paths: readonly string[];
		readonly storage?: BindMount;
	};
}

export interface BindOptions {
	source: string;
	access: "ro" | "rw";
	mask?: {
		paths: readonly string[];
		storage?: BindMount;
	};
}

/** What `sandbox.boot({mounts})` takes per guest path. */
export type SandboxMount = BindMount | VirtualMount;

function isInside(dir: string, p: string): boolean {
	return p === dir || p.startsWith(dir.endsWith("/") ? dir : dir + "/");
}

function bind(options: BindOptions): BindMount {
	const what = "fs.bind";
	const o = record(what, options, ["source", "access", "mask"]);
	if (o["source"] === undefined)
		fail(what, "source is required");
	if (o["access"] === undefined)
		fail(what, 'access is required ("ro" or "rw")');
	const source = absolutePath(`${what}: source`, o["source"]);
	const access = oneOf(`${what}: access`, o["access"], ["ro", "rw"] as const);
	if (o["mask"] === undefined)
		return Object.freeze({ kind: "bind", source, access });

	const m = record(`${what}: mask`, o["mask"], ["paths", "storage"]);
	const rawPaths = m["paths"];
	if (!Array.isArray(rawPaths) || rawPaths.length === 0)
		fail(`${what}: mask.paths`, `must be a non-empty array of absolute paths inside the bound directory, got ${shown(rawPaths)}`);
	const paths = Object.freeze(rawPaths.map((p: unknown, i) => {
		const s = absolutePath(`${what}: mask.paths[${i}]`, p);
		if (s === "/" || s.split("/").some((c, j) => j > 0 && (c === "." || c === "..")))
			fail(`${what}: mask.paths[${i}]`, `must name a path inside the bound directory, got ${shown(p)}`);
		return s;
	}));
	const storage = m["storage"];
	if (storage === undefined) {
		if (access === "rw")
			fail(what, `a writable ("rw") bind with mask.paths needs mask.storage: fs.bind({source, access: "rw"}) where the guest's entries under ${shown(paths)} go`);
		return Object.freeze({ kind: "bind", source, access, mask: Object.freeze({ paths }) });
	}
	if (access === "ro")
		fail(what, "mask.storage is for writable binds: in a read-only bind masked paths are simply absent");
	const st = storage as Partial<BindMount> | null;
	if (typeof st !== "object" || st === null || st.kind !== "bind" || !Object.isFrozen(st))
		fail(`${what}: mask.storage`, `must be fs.bind({source, access: "rw"}), got ${shown(storage)}`);
	if (st.access !== "rw")
		fail(`${what}: mask.storage`, `must be writable (access "rw"), got ${shown(st.access)}`);
	if (st.mask !== undefined)
		fail(`${what}: mask.storage`, "must not have a mask of its own");
	const sdir = st.source as string;
	if (isInside(source, sdir) || isInside(sdir, source))
		fail(what, `mask.storage ${shown(sdir)} and source ${shown(source)} must not contain one another`);
	return Object.freeze({
		kind: "bind", source, access,
		mask: Object.freeze({ paths, storage: st as BindMount }),
	});
}

export const fs = Object.freeze({ bind, memory, virtual });
