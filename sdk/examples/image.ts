// What an image package exports (the seed's
// `import { image } from "@torkbot/sandbox-image-alpine-3.23-agent"`):
// here, the Debian image `make image` built, its descriptor and facts
// read from build/images/ (or $KILN_IMAGES).

import { readFileSync } from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { rootfs } from "@kiln/sandbox";
import type { SandboxEnvironmentFact } from "@kiln/sandbox";

const dir = process.env["KILN_IMAGES"] ??
	path.resolve(path.dirname(fileURLToPath(import.meta.url)), "../../../build/images");

function load(name: string) {
	const d = JSON.parse(readFileSync(path.join(dir, `${name}.json`), "utf8")) as Record<string, unknown>;
	let facts: SandboxEnvironmentFact[] = [];
	try {
		const raw = JSON.parse(readFileSync(path.join(dir, `${name}.facts.json`), "utf8")) as
			{ topic: string; relation: string; value: unknown }[];
		facts = raw.slice(0, 256).map((f) => ({
			source: "config", topic: f.topic, relation: f.relation, value: String(f.value),
		}));
	} catch {
		// an image without facts
	}
	return rootfs.image({
		name: String(d["name"]),
		path: String(d["path"]),
		format: String(d["format"]),
		architecture: process.arch,
		digest: String(d["digest"]),
		sizeBytes: BigInt(Number(d["sizeBytes"])),
		facts,
	});
}

export const image = load("debian-12-agent");
