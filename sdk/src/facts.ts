// Environment facts (seed 003, "Environment Facts"; Documentation/api.md,
// "Facts"): affirmative typed triples with their provenance.

import { isRecord } from "./errors.js";
import { fail, shown } from "./validate.js";

export type SandboxEnvironmentFact = {
	source: "config" | "guest";
	topic: string;
	relation: string;
	value: string;
};

/** Facts a descriptor may carry (Kiln's limit for image facts). */
export const MAX_IMAGE_FACTS = 256;

/** The facts array an image descriptor carries: source "config", each
 * member a non-empty string of printable ASCII. */
export function imageFacts(what: string, v: unknown): readonly SandboxEnvironmentFact[] {
	if (!Array.isArray(v))
		fail(what, `must be an array of facts, got ${shown(v)}`);
	if (v.length > MAX_IMAGE_FACTS)
		fail(what, `has ${v.length} facts, over ${MAX_IMAGE_FACTS}`);
	return Object.freeze(v.map((f: unknown, i) => {
		const at = `${what}[${i}]`;
		if (!isRecord(f))
			fail(at, `must be an object, got ${shown(f)}`);
		for (const k of Object.keys(f))
			if (!["source", "topic", "relation", "value"].includes(k))
				fail(at, `unknown key "${k}"`);
		if (f["source"] !== "config")
			fail(`${at}.source`, `an image's facts are "config" facts, got ${shown(f["source"])}`);
		const out: SandboxEnvironmentFact = { source: "config", topic: "", relation: "", value: "" };
		for (const k of ["topic", "relation", "value"] as const) {
			const s = f[k];
			// Printable ASCII, as the vmm takes a descriptor's facts
			// (Documentation/rootfs.md, "Image facts").
			if (typeof s !== "string" || s.length === 0 || s.length > 4096 || !/^[\x20-\x7e]+$/.test(s))
				fail(`${at}.${k}`, `must be a non-empty string of printable ASCII, got ${shown(s)}`);
			out[k] = s;
		}
		return Object.freeze(out);
	}));
}

/** The facts array the vmm prints or `vm.facts` answers. */
export function parseFacts(what: string, v: unknown): SandboxEnvironmentFact[] {
	if (!Array.isArray(v))
		throw new TypeError(`${what}: expected an array of facts, got ${shown(v)}`);
	const out: SandboxEnvironmentFact[] = [];
	for (const f of v) {
		if (!isRecord(f) || (f["source"] !== "config" && f["source"] !== "guest") ||
		    typeof f["topic"] !== "string" || typeof f["relation"] !== "string" ||
		    typeof f["value"] !== "string")
			throw new TypeError(`${what}: a malformed fact ${shown(f)}`);
		out.push({ source: f["source"], topic: f["topic"], relation: f["relation"], value: f["value"] });
	}
	return out;
}
