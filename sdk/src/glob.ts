// filesystem.glob: matching guest paths in this process over fs.readDir,
// one listing per directory walked, so it needs nothing of the guest
// but the filesystem facet (a persona's listings are confined by the vmm
// as any of its calls).

import { GuestError, SandboxConfigError, SandboxError } from "./errors.js";
import { integer, nonEmpty, optionalBoolean, record } from "./validate.js";

export interface GlobOptions {
	/** Where a relative pattern starts (an absolute guest path; default "/"). */
	cwd?: string;
	/** Let `*`, `?`, `[...]` and `**` match names starting with "." (default false). */
	dot?: boolean;
	/** At most this many matches (default 10000): more is an error. */
	limit?: number;
	/** At most this many directories listed (default 10000): more is an error. */
	maxDirectories?: number;
}

interface Listed {
	name: string;
	type: string;
}

const MAGIC = /[*?[]/;

/** One path segment's pattern as a RegExp: `*`, `?`, `[abc]`, `[!a-z]`. */
function segmentRegExp(what: string, seg: string): RegExp {
	let re = "";
	for (let i = 0; i < seg.length; i++) {
		const c = seg[i] as string;
		if (c === "*")
			re += "[^/]*";
		else if (c === "?")
			re += "[^/]";
		else if (c === "[") {
			const end = seg.indexOf("]", i + 2);
			if (end < 0)
				throw new SandboxConfigError(`${what}: ${JSON.stringify(seg)} has a "[" without its "]"`);
			let body = seg.slice(i + 1, end);
			const negate = body.startsWith("!") || body.startsWith("^");
			if (negate)
				body = body.slice(1);
			re += `[${negate ? "^" : ""}${body.replace(/[\\\]^]/g, "\\$&")}]`;
			i = end;
		} else
			re += c.replace(/[.+^${}()|\\]/g, "\\$&");
	}
	return new RegExp(`^${re}$`, "u");
}

function join(dir: string, name: string): string {
	return dir === "/" ? `/${name}` : `${dir}/${name}`;
}

/** The paths under `pattern`, listing directories with `list`. */
export async function globFiles(list: (path: string) => Promise<readonly Listed[]>, pattern: string,
	options: GlobOptions = {}): Promise<string[]> {
	const what = "filesystem.glob";
	const o = record(`${what}: options`, options, ["cwd", "dot", "limit", "maxDirectories"]);
	const p = nonEmpty(`${what}: pattern`, pattern);
	const cwd = o["cwd"] === undefined ? "/" : nonEmpty(`${what}: cwd`, o["cwd"]);
	if (!cwd.startsWith("/"))
		throw new SandboxConfigError(`${what}: cwd must be an absolute guest path, got ${JSON.stringify(cwd)}`);
	const dot = optionalBoolean(`${what}: dot`, o["dot"]);
	const limit = o["limit"] === undefined ? 10000 : integer(`${what}: limit`, o["limit"], 1, 1_000_000);
	const maxDirs = o["maxDirectories"] === undefined ? 10000 : integer(`${what}: maxDirectories`, o["maxDirectories"], 1, 1_000_000);
	const full = p.startsWith("/") ? p : `${cwd}/${p}`;
	const dirsOnly = full.endsWith("/");
	const segs = full.split("/").filter((s) => s !== "");
	for (const s of segs)
		if (s === "." || s === ".." || (s.includes("**") && s !== "**"))
			throw new SandboxConfigError(`${what}: ${JSON.stringify(p)}: "${s}" (no . or .., and ** only as a whole segment)`);

	// The literal prefix is not listed: it is where the walk starts.
	let start = "/";
	let i = 0;
	while (i < segs.length - 1 && !MAGIC.test(segs[i] as string))
		start = join(start, segs[i++] as string);
	const rest = segs.slice(i).map((s) => (s === "**" ? "**" : MAGIC.test(s) ? segmentRegExp(what, s) : s));

	const found = new Set<string>();
	let listed = 0;
	const listDir = async (dir: string): Promise<readonly Listed[]> => {
		if (++listed > maxDirs)
			throw new SandboxError(`${what}: ${JSON.stringify(p)} lists more than ${maxDirs} directories (maxDirectories)`);
		try {
			return await list(dir);
		} catch (e) {
			// A directory gone or not one since its parent was listed
			// matches nothing; a persona's refusal, or any other error,
			// is the caller's.
			if (e instanceof GuestError && (e.code === "ENOENT" || e.code === "ENOTDIR"))
				return [];
			throw e;
		}
	};
	const add = (path: string): void => {
		found.add(path);
		if (found.size > limit)
			throw new SandboxError(`${what}: ${JSON.stringify(p)} matches more than ${limit} paths (limit)`);
	};
	const visible = (name: string): boolean => dot || !name.startsWith(".");

	const walk = async (dir: string, k: number, isDir: boolean): Promise<void> => {
		if (k === rest.length) {
			if (!dirsOnly || isDir)
				add(dir);
			return;
		}
		const seg = rest[k] as string | RegExp;
		if (seg === "**") {
			await walk(dir, k + 1, isDir); // zero segments
			for (const e of await listDir(dir)) {
				if (!visible(e.name))
					continue;
				if (e.type === "directory")
					await walk(join(dir, e.name), k, true);
				else if (k === rest.length - 1 && !dirsOnly)
					add(join(dir, e.name)); // a last ** takes files too
			}
			return;
		}
		const last = k === rest.length - 1;
		for (const e of await listDir(dir)) {
			const ok = typeof seg === "string" ? e.name === seg : visible(e.name) && seg.test(e.name);
			if (!ok || (!last && e.type !== "directory"))
				continue;
			await walk(join(dir, e.name), k + 1, e.type === "directory");
		}
	};
	await walk(start, 0, true);
	return [...found].sort();
}
