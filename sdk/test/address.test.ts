// The eight address-class predicates (seed 003, conn.dst.isLoopback() ...)
// from IANA's special-purpose registries, each class at the edges of its
// blocks, for IPv4 and IPv6.

import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { addressClass, parseIPv4, parseIPv6, sandboxAddress } from "../src/network/address.js";

const cases: [string, string][] = [
	// loopback
	["127.0.0.0", "loopback"], ["127.0.0.1", "loopback"], ["127.255.255.255", "loopback"], ["::1", "loopback"],
	["::ffff:127.0.0.1", "loopback"],
	// private
	["10.0.0.0", "private"], ["10.255.255.255", "private"], ["172.16.0.0", "private"], ["172.31.255.255", "private"],
	["192.168.0.1", "private"], ["100.64.0.0", "private"], ["100.127.255.255", "private"],
	["fc00::", "private"], ["fdff:ffff::1", "private"], ["64:ff9b:1::1", "private"],
	// link-local
	["169.254.0.0", "link-local"], ["169.254.255.255", "link-local"], ["fe80::1", "link-local"], ["febf::1", "link-local"],
	// multicast
	["224.0.0.0", "multicast"], ["239.255.255.255", "multicast"], ["ff02::1", "multicast"], ["ff00::", "multicast"],
	// broadcast: the limited broadcast only, ahead of 240/4
	["255.255.255.255", "broadcast"],
	// documentation
	["192.0.2.0", "documentation"], ["192.0.2.255", "documentation"], ["198.51.100.7", "documentation"],
	["203.0.113.10", "documentation"], ["2001:db8::1", "documentation"], ["2001:db8:ffff::", "documentation"],
	["3fff::1", "documentation"], ["3fff:0fff::1", "documentation"],
	// reserved
	["0.0.0.0", "reserved"], ["0.255.255.255", "reserved"], ["192.0.0.8", "reserved"], ["192.88.99.1", "reserved"],
	["198.18.0.0", "reserved"], ["198.19.255.255", "reserved"], ["240.0.0.0", "reserved"], ["255.255.255.254", "reserved"],
	["::", "reserved"], ["100::1", "reserved"], ["2001::1", "reserved"], ["2001:2::1", "reserved"], ["2002::1", "reserved"],
	["fec0::1", "reserved"], ["5f00::1", "reserved"], ["4000::1", "reserved"], ["::2", "reserved"],
	// public internet: everything else, IANA's globally reachable exceptions included
	["1.1.1.1", "public-internet"], ["8.8.8.8", "public-internet"], ["9.255.255.255", "public-internet"],
	["11.0.0.0", "public-internet"], ["172.15.255.255", "public-internet"], ["172.32.0.0", "public-internet"],
	["100.63.255.255", "public-internet"], ["100.128.0.0", "public-internet"], ["192.0.1.255", "public-internet"],
	["192.0.3.0", "public-internet"], ["198.17.255.255", "public-internet"], ["198.20.0.0", "public-internet"],
	["223.255.255.255", "public-internet"], ["192.31.196.1", "public-internet"],
	["2606:4700::1111", "public-internet"], ["2001:4860:4860::8888", "public-internet"], ["2001:1::1", "public-internet"],
	["2001:20::1", "public-internet"], ["2620:4f:8000::1", "public-internet"], ["64:ff9b::8.8.8.8", "public-internet"],
	["::ffff:8.8.8.8", "public-internet"], ["3fff:1000::1", "public-internet"],
];

describe("address classes", () => {
	for (const [ip, cls] of cases)
		test(`${ip} is ${cls}`, () => {
			assert.equal(addressClass(ip), cls);
			const a = sandboxAddress(ip, 443);
			const got = {
				loopback: a.isLoopback(), private: a.isPrivate(), "link-local": a.isLinkLocal(), multicast: a.isMulticast(),
				broadcast: a.isBroadcast(), documentation: a.isDocumentation(), reserved: a.isReserved(),
				"public-internet": a.isPublicInternet(),
			};
			// Exactly one predicate holds: its class's.
			assert.deepEqual(Object.entries(got).filter(([, v]) => v).map(([k]) => k), [cls]);
		});

	test("texts that are no address are in no class", () => {
		for (const bad of ["", "1.2.3", "1.2.3.4.5", "256.0.0.1", "01.2.3.4", "1.2.3.-4", ":::", "1::2::3", "12345::",
			"1:2:3:4:5:6:7:8:9", "::ffff:1.2.3", "fe80::1%eth0", "example.com", "1.2.3.4 "]) {
			assert.equal(addressClass(bad), undefined, bad);
			assert.equal(sandboxAddress(bad, 1).isPublicInternet(), false);
		}
	});

	test("the parsers", () => {
		assert.equal(parseIPv4("192.0.2.1"), 0xc0000201);
		assert.equal(parseIPv6("::"), 0n);
		assert.equal(parseIPv6("1:2:3:4:5:6:7:8"), 0x00010002000300040005000600070008n);
		assert.equal(parseIPv6("::ffff:1.2.3.4"), 0xffff01020304n);
		assert.equal(parseIPv6("1::1.2.3.4"), (1n << 112n) | 0x01020304n);
		assert.equal(parseIPv6("1:2:3:4:5:6:1.2.3.4"), 0x0001000200030004000500060102_0304n);
	});
});
