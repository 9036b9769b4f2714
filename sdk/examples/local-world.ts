// The outside world of scenarios 6 and 7, made of local services in this
// process's own network namespace (selftests/kvm/sdk.sh runs those
// examples under `unshare --net` with the addresses below on lo): a DNS
// resolver, HTTP and HTTPS upstreams, a token service. Nothing here talks
// to any other address; the VM's traffic leaves through the vmm's proxy,
// which lives in this namespace too.

import { execFileSync } from "node:child_process";
import dgram from "node:dgram";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import http from "node:http";
import https from "node:https";
import os from "node:os";
import path from "node:path";

/** The resolver the policy grants DNS to (TEST-NET-1). */
export const RESOLVER = "192.0.2.53";

/** Every address must be on this namespace's lo: sdk.sh's `unshare` set
 * them. Refuses to run anywhere else. */
export function checkLocalNetwork(addresses: readonly string[]): void {
	const have = Object.values(os.networkInterfaces()).flat().map((i) => i?.address);
	const missing = addresses.filter((a) => !have.includes(a));
	if (missing.length > 0)
		throw new Error(`not in the scenario's network namespace (no ${missing.join(", ")} here): run it through selftests/kvm/sdk.sh`);
	const other = Object.entries(os.networkInterfaces()).filter(([name]) => name !== "lo");
	if (other.length > 0)
		throw new Error(`this namespace has other interfaces (${other.map(([n]) => n).join(", ")}): refusing to run`);
}

/** A DNS server on RESOLVER:53 answering A queries from `names`; other
 * names NXDOMAIN, other types no records. Counts what it was asked. */
export async function startResolver(names: Readonly<Record<string, string>>): Promise<{ asked: string[]; close(): void }> {
	const s = dgram.createSocket("udp4");
	const asked: string[] = [];
	s.on("message", (q, from) => {
		if (q.length < 12)
			return;
		let at = 12;
		const labels: string[] = [];
		while (at < q.length && q[at] !== 0 && labels.length < 128) {
			const n = q[at] ?? 0;
			labels.push(q.subarray(at + 1, at + 1 + n).toString("latin1"));
			at += 1 + n;
		}
		if (at + 5 > q.length)
			return;
		const name = labels.join(".").toLowerCase();
		const qtype = q.readUInt16BE(at + 1);
		asked.push(`${name} ${qtype === 1 ? "A" : qtype}`);
		const question = q.subarray(12, at + 5);
		const ip = names[name];
		const head = Buffer.alloc(12);
		q.copy(head, 0, 0, 2); // id
		head.writeUInt16BE(0x8180 | (ip === undefined ? 3 : 0), 2); // QR RD RA, NXDOMAIN or NOERROR
		head.writeUInt16BE(1, 4);
		const answer = ip !== undefined && qtype === 1;
		head.writeUInt16BE(answer ? 1 : 0, 6);
		const parts = [head, question];
		if (answer) {
			const rr = Buffer.alloc(16);
			rr.writeUInt16BE(0xc00c, 0); // the question's name
			rr.writeUInt16BE(1, 2); // A
			rr.writeUInt16BE(1, 4); // IN
			rr.writeUInt32BE(300, 6); // TTL
			rr.writeUInt16BE(4, 10);
			ip.split(".").forEach((b, i) => rr.writeUInt8(Number(b), 12 + i));
			parts.push(rr);
		}
		s.send(Buffer.concat(parts), from.port, from.address);
	});
	await new Promise<void>((resolve, reject) => {
		s.once("error", reject);
		s.bind(53, RESOLVER, () => resolve());
	});
	return { asked, close: () => s.close() };
}

/** What an upstream saw: each request's line and its headers. */
export interface Seen {
	line: string;
	headers: Record<string, string | string[] | undefined>;
}

type Handler = (req: http.IncomingMessage, res: http.ServerResponse, seen: Seen) => void;

function listen(server: http.Server | https.Server, ip: string, port: number): Promise<void> {
	return new Promise((resolve, reject) => {
		server.once("error", reject);
		server.listen(port, ip, () => resolve());
	});
}

function recorder(handler: Handler): { seen: Seen[]; handle: http.RequestListener } {
	const seen: Seen[] = [];
	return {
		seen,
		handle: (req, res) => {
			const s = { line: `${req.method} ${req.url} HTTP/${req.httpVersion}`, headers: { ...req.headers } };
			seen.push(s);
			handler(req, res, s);
		},
	};
}

export async function startHttp(ip: string, port: number, handler: Handler): Promise<{ seen: Seen[]; close(): Promise<void> }> {
	const r = recorder(handler);
	const server = http.createServer(r.handle);
	await listen(server, ip, port);
	return { seen: r.seen, close: () => new Promise((res) => server.close(() => res())) };
}

/** A test CA and a server certificate for `hostname` (openssl), in a
 * scratch directory; ca is the CA's PEM path. */
export function makeCertificates(hostname: string): { dir: string; ca: string; cert: Buffer; key: Buffer; remove(): void } {
	const dir = mkdtempSync(path.join(os.tmpdir(), "kiln-sdk-ca-"));
	const run = (args: string[]) => execFileSync("openssl", args, { cwd: dir, stdio: ["ignore", "ignore", "pipe"] });
	run(["req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-keyout", "ca.key", "-out", "ca.crt",
		"-subj", "/CN=kiln-sdk-test-ca", "-days", "2", "-addext", "basicConstraints=critical,CA:TRUE",
		"-addext", "keyUsage=critical,keyCertSign"]);
	run(["req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-keyout", "srv.key", "-out", "srv.csr",
		"-subj", `/CN=${hostname}`]);
	execFileSync("sh", ["-c", `printf 'subjectAltName=DNS:${hostname}\\nextendedKeyUsage=serverAuth\\n' > srv.ext`], { cwd: dir });
	run(["x509", "-req", "-in", "srv.csr", "-CA", "ca.crt", "-CAkey", "ca.key", "-CAcreateserial", "-out", "srv.crt", "-days", "2",
		"-extfile", "srv.ext"]);
	return {
		dir, ca: path.join(dir, "ca.crt"),
		cert: readFileSync(path.join(dir, "srv.crt")), key: readFileSync(path.join(dir, "srv.key")),
		remove: () => rmSync(dir, { recursive: true, force: true }),
	};
}

export async function startHttps(ip: string, port: number, cert: Buffer, key: Buffer, handler: Handler):
	Promise<{ seen: Seen[]; close(): Promise<void> }> {
	const r = recorder(handler);
	const server = https.createServer({ cert, key }, r.handle);
	await listen(server, ip, port);
	return { seen: r.seen, close: () => new Promise((res) => server.close(() => res())) };
}

export function json(res: http.ServerResponse, status: number, body: unknown): void {
	const b = Buffer.from(JSON.stringify(body) + "\n");
	res.writeHead(status, { "content-type": "application/json", "content-length": String(b.length) });
	res.end(b);
}
