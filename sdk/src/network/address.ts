// IP addresses and their classes (seed 003: conn.dst.isLoopback() ...).
//
// The classes come from IANA's special-purpose address registries
// (iana-ipv4-special-registry, iana-ipv6-special-registry; RFC 6890 and
// the RFCs each entry names) plus the multicast blocks. An address is in
// the first class whose block holds it, in the order of the tables below
// (most specific first), so 255.255.255.255 is broadcast although
// 240.0.0.0/4 holds it too. IPv4 follows Kiln's own table
// (Documentation/network.md, "Address classes"), so the SDK and the vmm
// agree on every IPv4 address.

export type AddressClass =
	| "loopback" | "private" | "link-local" | "multicast" | "broadcast"
	| "documentation" | "reserved" | "public-internet";

interface Block {
	readonly base: bigint;
	readonly bits: number;
	readonly cls: AddressClass;
}

/** "A.B.C.D" -> 32-bit value; undefined when it is not one. */
export function parseIPv4(s: string): number | undefined {
	const parts = s.split(".");
	if (parts.length !== 4)
		return undefined;
	let v = 0;
	for (const p of parts) {
		if (!/^(0|[1-9][0-9]{0,2})$/.test(p))
			return undefined;
		const n = Number(p);
		if (n > 255)
			return undefined;
		v = v * 256 + n;
	}
	return v;
}

/** An IPv6 text (RFC 4291 2.2, with an embedded IPv4 tail) -> 128-bit
 * value; undefined when it is not one. A zone ("%eth0") is refused. */
export function parseIPv6(s: string): bigint | undefined {
	if (s.length > 45 || !/^[0-9A-Fa-f:.]+$/.test(s))
		return undefined;
	let text = s;
	const tail: number[] = [];
	if (text.includes(".")) {
		const lastColon = text.lastIndexOf(":");
		const v4 = parseIPv4(text.slice(lastColon + 1));
		if (lastColon < 0 || v4 === undefined)
			return undefined;
		tail.push(v4 >>> 16, v4 & 0xffff);
		text = text.slice(0, lastColon);
		if (text.endsWith(":"))
			text += ":"; // "::1.2.3.4": keep the "::"
	}
	const groups = (h: string): number[] | undefined => {
		if (h === "")
			return [];
		const out: number[] = [];
		for (const g of h.split(":")) {
			if (!/^[0-9A-Fa-f]{1,4}$/.test(g))
				return undefined;
			out.push(parseInt(g, 16));
		}
		return out;
	};
	const halves = text.split("::");
	if (halves.length > 2)
		return undefined;
	const front = groups(halves[0] ?? "");
	const back = halves.length === 2 ? groups(halves[1] ?? "") : [];
	if (!front || !back)
		return undefined;
	back.push(...tail);
	const count = front.length + back.length;
	if (halves.length === 2 ? count > 7 : count !== 8)
		return undefined;
	let v = 0n;
	for (const w of [...front, ...new Array<number>(8 - count).fill(0), ...back])
		v = (v << 16n) | BigInt(w);
	return v;
}

function v4(cidr: string, cls: AddressClass): Block {
	const [a, b] = cidr.split("/");
	return { base: BigInt(parseIPv4(a ?? "") ?? 0), bits: Number(b), cls };
}

function v6(cidr: string, cls: AddressClass): Block {
	const [a, b] = cidr.split("/");
	return { base: parseIPv6(a ?? "") ?? 0n, bits: Number(b), cls };
}

/** IPv4, top to bottom (Kiln's table; IANA's registry agrees). */
const IPV4: readonly Block[] = [
	v4("127.0.0.0/8", "loopback"), // RFC 1122 3.2.1.3
	v4("10.0.0.0/8", "private"), // RFC 1918
	v4("172.16.0.0/12", "private"),
	v4("192.168.0.0/16", "private"),
	v4("100.64.0.0/10", "private"), // RFC 6598, shared address space
	v4("169.254.0.0/16", "link-local"), // RFC 3927
	v4("224.0.0.0/4", "multicast"), // RFC 5771
	v4("255.255.255.255/32", "broadcast"), // RFC 919, limited broadcast
	v4("192.0.2.0/24", "documentation"), // RFC 5737 TEST-NET-1
	v4("198.51.100.0/24", "documentation"), // TEST-NET-2
	v4("203.0.113.0/24", "documentation"), // TEST-NET-3
	v4("0.0.0.0/8", "reserved"), // RFC 1122 "this network"
	v4("192.0.0.0/24", "reserved"), // RFC 6890 IETF protocol assignments
	v4("192.88.99.0/24", "reserved"), // RFC 7526, 6to4 relay anycast (deprecated)
	v4("198.18.0.0/15", "reserved"), // RFC 2544 benchmarking
	v4("240.0.0.0/4", "reserved"), // RFC 1112 reserved
];

/** IPv6, most specific first. 2000::/3 (global unicast) not listed
 * otherwise is public; anything else unlisted is unassigned: reserved. */
const IPV6: readonly Block[] = [
	v6("::1/128", "loopback"), // RFC 4291
	v6("::/128", "reserved"), // unspecified
	// ::ffff:0:0/96 (IPv4-mapped) is classed by its IPv4 address.
	v6("64:ff9b:1::/48", "private"), // RFC 8215, local-use translation
	v6("64:ff9b::/96", "public-internet"), // RFC 6052, globally reachable
	v6("100::/64", "reserved"), // RFC 6666 discard-only
	v6("100:0:0:1::/64", "reserved"), // RFC 9780 dummy prefix
	v6("2001:1::1/128", "public-internet"), // RFC 7723 PCP anycast
	v6("2001:1::2/128", "public-internet"), // RFC 8155 TURN anycast
	v6("2001:1::3/128", "public-internet"), // RFC 9665 DNS-SD SRP anycast
	v6("2001:3::/32", "public-internet"), // RFC 7450 AMT
	v6("2001:4:112::/48", "public-internet"), // RFC 7535 AS112-v6
	v6("2001:20::/28", "public-internet"), // RFC 7343 ORCHIDv2
	v6("2001:30::/28", "public-internet"), // RFC 9374 DRIP DETs
	v6("2001:db8::/32", "documentation"), // RFC 3849
	v6("2001::/23", "reserved"), // RFC 2928 IETF protocol assignments (TEREDO, benchmarking...)
	v6("3fff::/20", "documentation"), // RFC 9637
	v6("2002::/16", "reserved"), // RFC 3056 6to4 (not a destination of its own)
	v6("2620:4f:8000::/48", "public-internet"), // RFC 7534 AS112
	v6("5f00::/16", "reserved"), // RFC 9602 SRv6 SIDs
	v6("fc00::/7", "private"), // RFC 4193 unique local
	v6("fe80::/10", "link-local"), // RFC 4291
	v6("fec0::/10", "reserved"), // RFC 3879 site-local (deprecated)
	v6("ff00::/8", "multicast"), // RFC 4291
	v6("2000::/3", "public-internet"), // global unicast
];

const IPV4_MAPPED = 0xffffn << 32n;

function inBlock(v: bigint, width: number, b: Block): boolean {
	const shift = BigInt(width - b.bits);
	return (v >> shift) === (b.base >> shift);
}

/** The class of an IPv4 or IPv6 address text; undefined when it is
 * neither. */
export function addressClass(ip: string): AddressClass | undefined {
	const a = parseIPv4(ip);
	if (a !== undefined)
		return classOf4(BigInt(a));
	const b = parseIPv6(ip);
	if (b === undefined)
		return undefined;
	if (b >> 32n === IPV4_MAPPED >> 32n)
		return classOf4(b & 0xffffffffn);
	return IPV6.find((blk) => inBlock(b, 128, blk))?.cls ?? "reserved";
}

function classOf4(v: bigint): AddressClass {
	return IPV4.find((b) => inBlock(v, 32, b))?.cls ?? "public-internet";
}

/** One end of a flow, as the policy callback sees it. */
export interface SandboxAddress {
	readonly ip: string;
	readonly port: number;
	isLoopback(): boolean;
	isPrivate(): boolean;
	isLinkLocal(): boolean;
	isMulticast(): boolean;
	isBroadcast(): boolean;
	isDocumentation(): boolean;
	isReserved(): boolean;
	isPublicInternet(): boolean;
}

/** An endpoint; an address that parses as neither family is in no class
 * (every predicate false). */
export function sandboxAddress(ip: string, port: number): SandboxAddress {
	const cls = addressClass(ip);
	const is = (c: AddressClass) => () => cls === c;
	return Object.freeze({
		ip, port,
		isLoopback: is("loopback"),
		isPrivate: is("private"),
		isLinkLocal: is("link-local"),
		isMulticast: is("multicast"),
		isBroadcast: is("broadcast"),
		isDocumentation: is("documentation"),
		isReserved: is("reserved"),
		isPublicInternet: is("public-internet"),
	});
}

/** "A.B.C.D:PORT" or "[v6]:PORT" -> {ip, port}; undefined if malformed. */
export function parseEndpoint(s: string): { ip: string; port: number } | undefined {
	const m = /^\[([0-9A-Fa-f:.]+)\]:([0-9]{1,5})$/.exec(s) ?? /^([0-9.]+):([0-9]{1,5})$/.exec(s);
	if (!m)
		return undefined;
	const ip = m[1] ?? "";
	const port = Number(m[2]);
	if (port > 65535 || addressClass(ip) === undefined)
		return undefined;
	return { ip, port };
}
