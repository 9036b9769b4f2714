// The mutable headers HTTP middleware gets (seed 003,
// "SandboxHttpRequest": request.headers), a Headers-like object whose
// edits become the hook answer's "set" and "remove"
// (Documentation/network.md, "The hook and HTTP requests").
//
// Not WHATWG Headers: that one trims and folds values and knows nothing
// of which fields Kiln lets a hook edit. Values here are the request's
// bytes as ISO 8859-1 characters (U+0000..U+00FF, one per byte), as the
// vmm sends them, so nothing is lost either way.

/** Fields that frame or route a message: never editable (as the vmm's
 * http grants: Documentation/network.md, `http[i].headers`). */
const NOT_EDITABLE = new Set([
	"host", "content-length", "transfer-encoding", "connection", "upgrade", "te", "trailer", "keep-alive",
]);
/** RFC 9110 5.6.2 token characters. */
const TOKEN = /^[!#$%&'*+\-.^_`|~0-9A-Za-z]+$/;
/** The vmm's limits on one answer's fields (NET_HTTP_MAX_HEADERS,
 * NET_HTTP_HEADERS_MAX). */
export const MAX_EDITED_FIELDS = 16;
export const MAX_EDITED_BYTES = 16 * 1024;

function checkName(name: string): string {
	if (typeof name !== "string" || !TOKEN.test(name))
		throw new TypeError(`request.headers: ${JSON.stringify(name)} is not a header name (an RFC 9110 token)`);
	return name.toLowerCase();
}

function checkValue(name: string, value: string): string {
	const v = String(value);
	// eslint-disable-next-line no-control-regex
	if (/[^\t\x20-\x7e\x80-\xff]/.test(v))
		throw new TypeError(`request.headers: the value of ${name} has a control character or one past U+00FF ` +
			"(values are bytes, one ISO 8859-1 character each; tab allowed)");
	return v;
}

/** The edits made: what the answer's "set" and "remove" carry. */
export interface HeaderEdits {
	set: Record<string, string>;
	remove: string[];
}

export class SandboxHeaders implements Iterable<[string, string]> {
	readonly #fields = new Map<string, string[]>();
	readonly #initial = new Map<string, string>();
	/** Names the vmm withheld the values of (the guest's credentials). */
	readonly #withheld: ReadonlySet<string>;

	/** @internal */
	constructor(fields: readonly (readonly [string, string])[], withheld: readonly string[] = []) {
		for (const [n, v] of fields) {
			const k = n.toLowerCase();
			const list = this.#fields.get(k) ?? [];
			list.push(v);
			this.#fields.set(k, list);
		}
		for (const [k, list] of this.#fields)
			this.#initial.set(k, list.join(", "));
		this.#withheld = new Set(withheld.map((n) => n.toLowerCase()));
	}

	/** The value (several joined by ", "), or null. A withheld field
	 * (the guest's Authorization, Cookie) reads as null. */
	get(name: string): string | null {
		const l = this.#fields.get(checkName(name));
		return l ? l.join(", ") : null;
	}

	has(name: string): boolean {
		return this.#fields.has(checkName(name));
	}

	/** Whether the guest sent this field with a value the vmm withheld. */
	withheld(name: string): boolean {
		return this.#withheld.has(checkName(name)) && !this.#fields.has(name.toLowerCase());
	}

	set(name: string, value: string): void {
		const k = checkName(name);
		if (NOT_EDITABLE.has(k))
			throw new TypeError(`request.headers: ${k} frames or routes the request and cannot be edited`);
		this.#fields.set(k, [checkValue(k, value)]);
	}

	append(name: string, value: string): void {
		const k = checkName(name);
		if (NOT_EDITABLE.has(k))
			throw new TypeError(`request.headers: ${k} frames or routes the request and cannot be edited`);
		const l = this.#fields.get(k) ?? [];
		l.push(checkValue(k, value));
		this.#fields.set(k, l);
	}

	delete(name: string): void {
		const k = checkName(name);
		if (NOT_EDITABLE.has(k))
			throw new TypeError(`request.headers: ${k} frames or routes the request and cannot be removed`);
		this.#fields.delete(k);
		if (this.#withheld.has(k))
			this.#removedWithheld.add(k);
	}

	readonly #removedWithheld = new Set<string>();

	forEach(fn: (value: string, name: string, headers: SandboxHeaders) => void): void {
		for (const [k, v] of this)
			fn(v, k, this);
	}

	*entries(): IterableIterator<[string, string]> {
		for (const k of [...this.#fields.keys()].sort())
			yield [k, (this.#fields.get(k) ?? []).join(", ")];
	}

	*keys(): IterableIterator<string> {
		for (const [k] of this.entries())
			yield k;
	}

	*values(): IterableIterator<string> {
		for (const [, v] of this.entries())
			yield v;
	}

	[Symbol.iterator](): IterableIterator<[string, string]> {
		return this.entries();
	}

	/** @internal What changed since the request came: set and remove,
	 * within the vmm's limits (a TypeError past them). */
	edits(): HeaderEdits {
		const set: Record<string, string> = {};
		const remove: string[] = [];
		let bytes = 0;
		for (const [k, l] of this.#fields) {
			const v = l.join(", ");
			if (this.#initial.get(k) !== v) {
				set[k] = v;
				bytes += k.length + v.length + 2;
			}
		}
		for (const k of this.#initial.keys())
			if (!this.#fields.has(k))
				remove.push(k);
		for (const k of this.#removedWithheld)
			if (!this.#fields.has(k) && !remove.includes(k))
				remove.push(k);
		for (const k of remove)
			bytes += k.length + 2;
		const n = Object.keys(set).length + remove.length;
		if (n > MAX_EDITED_FIELDS)
			throw new TypeError(`request.headers: ${n} fields edited, Kiln takes at most ${MAX_EDITED_FIELDS} per request`);
		if (bytes > MAX_EDITED_BYTES)
			throw new TypeError(`request.headers: ${bytes} bytes of edited fields, Kiln takes at most ${MAX_EDITED_BYTES}`);
		return { set, remove };
	}
}
