// conformance-hooks.js - the module hook conformance.js registers: an
// example's `import ... from "@kiln/sandbox"` gets launched-sandbox.js
// instead (the SDK with a launcher behind defineSandbox); the shim's own
// import of the SDK, and everything else, resolve as usual.

interface ResolveContext { parentURL?: string }
type NextResolve = (specifier: string, context: ResolveContext) => Promise<{ url: string }>;

let shim = "";

export function initialize(data: { shim: string }): void {
	shim = data.shim;
}

export async function resolve(specifier: string, context: ResolveContext, next: NextResolve):
	Promise<{ url: string; shortCircuit?: boolean }> {
	if (specifier === "@kiln/sandbox" && context.parentURL !== shim && context.parentURL?.includes("/examples/"))
		return { url: shim, shortCircuit: true };
	return next(specifier, context);
}
