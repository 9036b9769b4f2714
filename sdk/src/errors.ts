// Errors the SDK raises. Every message names what the caller passed or the
// control-API method that failed, so one line says what and why.

/** Base class of every error the SDK raises itself. */
export class SandboxError extends Error {
	override name = "SandboxError";
}

/** A definition, option or descriptor the SDK refused before doing anything. */
export class SandboxConfigError extends SandboxError {
	override name = "SandboxConfigError";
}

/** A feature of the seed API that Kiln does not offer yet. */
export class NotSupportedError extends SandboxError {
	override name = "NotSupportedError";
	readonly feature: string;

	constructor(feature: string, why: string) {
		super(`${feature} is not supported yet: ${why}`);
		this.feature = feature;
	}
}

/** A guest kernel or initramfs whose digest is not the one pinned at build time. */
export class PinMismatchError extends SandboxError {
	override name = "PinMismatchError";
	readonly path: string;
	readonly expected: string;
	readonly actual: string;

	constructor(path: string, pins: string, expected: string, actual: string) {
		super(`${path} has ${actual}, but its pin in ${pins} is ${expected}: refusing to boot it`);
		this.path = path;
		this.expected = expected;
		this.actual = actual;
	}
}

/** The vmm exited or could not be started. */
export class VmmError extends SandboxError {
	override name = "VmmError";
	readonly exitCode: number | null;
	readonly stderr: string;

	constructor(message: string, exitCode: number | null, stderr: string) {
		super(stderr ? `${message}: ${stderr.trim()}` : message);
		this.exitCode = exitCode;
		this.stderr = stderr;
	}
}

/** JSON-RPC error codes of the control API (Documentation/api.md, "Errors"). */
export const RpcCode = {
	parseError: -32700,
	invalidRequest: -32600,
	methodNotFound: -32601,
	invalidParams: -32602,
	internalError: -32603,
	guestRefused: -32000,
	timeout: -32001,
	cancelled: -32002,
	agentUnreachable: -32003,
	limit: -32004,
	monitorRefused: -32005,
	personaRefused: -32006,
} as const;

/** An error answer of the control API; `method` is the request's. */
export class KilnRpcError extends SandboxError {
	override name = "KilnRpcError";
	readonly method: string;
	readonly rpcCode: number;
	readonly data: unknown;

	constructor(method: string, rpcCode: number, message: string, data: unknown) {
		super(`${method}: ${message}`);
		this.method = method;
		this.rpcCode = rpcCode;
		this.data = data;
	}
}

/** The guest refused a request with an errno (-32000): `code` is its name. */
export class GuestError extends KilnRpcError {
	override name = "GuestError";
	/** The errno's name, as Node's own fs errors carry it ("ENOENT"). */
	readonly code: string;
	readonly errno: number;

	constructor(method: string, message: string, data: unknown) {
		super(method, RpcCode.guestRefused, message, data);
		const d = isRecord(data) ? data : {};
		this.code = typeof d["errno"] === "string" ? d["errno"] : "EIO";
		this.errno = typeof d["errnoValue"] === "number" ? d["errnoValue"] : 0;
	}
}

/** The guest agent could not be reached, or its connection broke (-32003). */
export class AgentUnreachableError extends KilnRpcError {
	override name = "AgentUnreachableError";
}

/** A limit of the control API was reached (-32004). */
export class LimitError extends KilnRpcError {
	override name = "LimitError";
}

/** The request was cancelled (-32002). */
export class CancelledError extends KilnRpcError {
	override name = "CancelledError";
}

/** A persona's scoped socket refused the call: its grant does not allow
 * it (-32006, Documentation/personas.md, "Refusals"). */
export class PersonaRefusedError extends KilnRpcError {
	override name = "PersonaRefusedError";
	/** The persona the vmm named. */
	readonly persona: string;

	constructor(method: string, message: string, data: unknown) {
		super(method, RpcCode.personaRefused, message, data);
		const d = isRecord(data) ? data : {};
		this.persona = typeof d["persona"] === "string" ? d["persona"] : "";
	}
}

/** network.guardedFetch: net.check did not allow the URL's flow. */
export class EgressDeniedError extends SandboxError {
	override name = "EgressDeniedError";
	readonly url: string;
	readonly verdict: "deny" | "ask";
	readonly reason: string;
	readonly rule: { key: string; index: number } | null;

	constructor(url: string, verdict: "deny" | "ask" | "allow", reason: string, rule: { key: string; index: number } | null) {
		const v = verdict === "ask" ? "ask" : "deny";
		super(`guardedFetch: ${url} is not allowed by the VM's policy: ${v === "ask" ? "no rule grants it (the hook would be asked)" : "denied"}, ${reason}, rule ${rule ? `${rule.key}[${rule.index}]` : "none"}`);
		this.url = url;
		this.verdict = v;
		this.reason = reason;
		this.rule = rule;
	}
}

/** The control connection closed before the answer came. */
export class ConnectionClosedError extends SandboxError {
	override name = "ConnectionClosedError";
	readonly method: string;

	constructor(method: string, why: string) {
		super(`${method}: the control connection closed before the answer (${why})`);
		this.method = method;
	}
}

/** Turns an error answer into the matching Error subclass. */
export function rpcError(method: string, code: number, message: string, data: unknown): KilnRpcError {
	switch (code) {
	case RpcCode.guestRefused:
		return new GuestError(method, message, data);
	case RpcCode.agentUnreachable:
		return new AgentUnreachableError(method, code, message, data);
	case RpcCode.limit:
		return new LimitError(method, code, message, data);
	case RpcCode.cancelled:
		return new CancelledError(method, code, message, data);
	case RpcCode.personaRefused:
		return new PersonaRefusedError(method, message, data);
	default:
		return new KilnRpcError(method, code, message, data);
	}
}

/** The error an aborted `signal` rejects with: a DOMException named AbortError. */
export function abortError(signal: AbortSignal): Error {
	const reason: unknown = signal.reason;
	if (reason instanceof Error && reason.name === "AbortError")
		return reason;
	const e = new DOMException("The operation was aborted", "AbortError");
	if (reason !== undefined)
		Object.defineProperty(e, "cause", { value: reason });
	return e;
}

export function isRecord(v: unknown): v is Record<string, unknown> {
	return typeof v === "object" && v !== null && !Array.isArray(v);
}
