// Scenario 6 of the seed: default-deny egress, decided by the policy
// callback. The outside world is local (local-world.ts, in the network
// namespace selftests/kvm/sdk.sh gives this example): a DNS resolver on
// 192.0.2.53 standing in for 1.1.1.1, api.example.com's HTTP upstream on
// 192.0.2.10, a second host other.example.com on 192.0.2.11, and a TCP
// service on 203.0.113.10:5432. Asserts: DNS goes only where the
// callback sent it, the matched host is reached, the second host and an
// IP literal (a Host no trusted name vouches for) are not, and raw
// transport grants open exactly their endpoint.

import assert from "node:assert/strict";
import net from "node:net";
import { defineSandbox, network } from "@kiln/sandbox";
import { image as debian12Agent } from "@kiln/sandbox-image-debian-12-agent";
import { RESOLVER, checkLocalNetwork, json, startHttp, startResolver } from "./local-world.js";

checkLocalNetwork([RESOLVER, "192.0.2.10", "192.0.2.11", "203.0.113.10"]);
const dns = await startResolver({ "api.example.com": "192.0.2.10", "other.example.com": "192.0.2.11" });
const api = await startHttp("192.0.2.10", 80, (_req, res) => json(res, 200, { hello: "from api.example.com" }));
const other = await startHttp("192.0.2.11", 80, (_req, res) => json(res, 200, { hello: "from other.example.com" }));
const dbSeen: number[] = [];
const db = net.createServer((s) => {
	dbSeen.push(s.localPort ?? 0);
	s.end("pg-stand-in\n");
});
await new Promise<void>((r) => db.listen(5432, "203.0.113.10", () => r()));
const db2 = net.createServer((s) => {
	dbSeen.push(s.localPort ?? 0);
	s.end("not granted\n");
});
await new Promise<void>((r) => db2.listen(5433, "203.0.113.10", () => r()));
const decided: string[] = [];

try {
	{
		const sandbox = defineSandbox({
			rootfs: debian12Agent,
			network: network.policy((conn) => {
				decided.push(`${conn.type} ${conn.matchDns()?.name ?? `${conn.dst.ip}:${conn.dst.port} ${conn.hostnames.join(",")}`}`);
				if (conn.matchDns()?.accept({ resolvers: [RESOLVER] })) return;

				conn.matchHttp("api.example.com")?.accept();
			}),
		});
		await using vm = await sandbox.boot();
		const r = await vm.exec("sh", ["-c", [
			"curl -fsS --max-time 60 http://api.example.com/hello",
			"curl -fsS --max-time 20 http://other.example.com/ >/dev/null 2>&1 || echo other host denied",
			"curl -fsS --max-time 20 http://192.0.2.10/hello >/dev/null 2>&1 || echo ip literal denied",
		].join("; ")]);
		assert.equal(r.exitCode, 0, r.stderr);
		assert.equal(r.stdout, '{"hello":"from api.example.com"}\nother host denied\nip literal denied\n');
		assert.equal(api.seen.length, 1, "one request reached api.example.com");
		assert.equal(api.seen[0]?.headers["host"], "api.example.com");
		assert.equal(other.seen.length, 0, "nothing reached the second host");
		assert.ok(dns.asked.includes("api.example.com A"), dns.asked.join(", "));
		assert.ok(decided.includes("dns api.example.com"), decided.join("; "));
		assert.ok(decided.some((d) => d.startsWith("tcp 192.0.2.11:80 other.example.com")), decided.join("; "));
		console.log(`# DNS granted to ${RESOLVER}; api.example.com reached; the second host and an IP literal denied`);
		console.log(`# the callback saw: ${decided.join("; ")}`);
	}

	{
		// Raw transport grants for protocol-independent reachability.
		const sandbox = defineSandbox({
			rootfs: debian12Agent,
			network: network.policy((conn) => {
				if (conn.dst.isLoopback()) {
					conn.accept();
					return;
				}

				if (conn.matchTcp("203.0.113.10:5432")?.accept()) return;
			}),
		});
		await using vm = await sandbox.boot();
		const r = await vm.exec("bash", ["-c", [
			"exec 3<>/dev/tcp/203.0.113.10/5432 && head -n 1 <&3",
			"(exec 4<>/dev/tcp/203.0.113.10/5433 && head -n 1 <&4) 2>/dev/null | grep -q . || echo 5433 denied",
			"getent hosts api.example.com || echo no dns",
		].join("; ")]);
		assert.equal(r.exitCode, 0, r.stderr);
		assert.equal(r.stdout, "pg-stand-in\n5433 denied\nno dns\n");
		assert.deepEqual(dbSeen, [5432], "only the granted endpoint was reached");
		console.log("# matchTcp(\"203.0.113.10:5432\") opens that endpoint alone; no DNS without a grant");
	}
} finally {
	dns.close();
	await Promise.all([api.close(), other.close()]);
	db.close();
	db2.close();
}
