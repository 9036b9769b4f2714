// Scenario 7 of the seed: credentials brokered from the host. A local
// token service (192.0.2.20:8080) plays GitHub's installation tokens,
// and a local HTTPS upstream plays api.github.com as api.github.test
// (192.0.2.10:443, a certificate from a test CA of this run's own), with
// a resolver on 192.0.2.53 in place of 1.1.1.1: local-world.ts, in the
// network namespace selftests/kvm/sdk.sh gives this example. The seed's
// rootfs.cow waits for Kiln's block-store issue: rootfs.ephemeral is the
// writable machine here.
//
// Asserts what the scenario claims: the guest's ordinary curl gets the
// upstream's answer; the upstream got a token from the token service in
// place of the guest's own Authorization; the token appears nowhere in
// the guest: not in its environment, not in its files, not in the
// request bytes it sent or saw (curl -v), not in the workspace; a second
// host is denied.

import assert from "node:assert/strict";
import { randomBytes } from "node:crypto";
import { defineSandbox, fs, network, rootfs } from "@kiln/sandbox";
import type { HttpConnectionMatch, SandboxHttpRequest } from "@kiln/sandbox";
import { image as debian12Agent } from "@kiln/sandbox-image-debian-12-agent";
import { RESOLVER, checkLocalNetwork, json, makeCertificates, startHttp, startHttps, startResolver } from "./local-world.js";

const API_HOST = "api.github.test";
const TOKEN_SERVICE = "http://192.0.2.20:8080";
checkLocalNetwork([RESOLVER, "192.0.2.10", "192.0.2.11", "192.0.2.20"]);

// The token service: a fresh installation token per call.
const issued: string[] = [];
const tokens = await startHttp("192.0.2.20", 8080, (req, res) => {
	const m = /^\/app\/installations\/(\d+)\/access_tokens$/.exec(req.url ?? "");
	if (req.method !== "POST" || !m)
		return json(res, 404, { message: "Not Found" });
	const token = `ghs_kilnsdk${randomBytes(12).toString("hex")}`;
	issued.push(token);
	json(res, 201, { token, installation: Number(m[1]) });
});

/** Stands in for the seed's GitHubInstallationTokenService. */
class GitHubInstallationTokenService {
	readonly #installationId: number;
	constructor(options: { installationId: number }) {
		this.#installationId = options.installationId;
	}
	async canServe(match: HttpConnectionMatch): Promise<boolean> {
		return match.hostname === API_HOST && match.dst.port === 443;
	}
	async tokenForRequest(request: SandboxHttpRequest): Promise<string> {
		assert.equal(request.destination.hostname, API_HOST);
		const r = await fetch(`${TOKEN_SERVICE}/app/installations/${this.#installationId}/access_tokens`, { method: "POST" });
		return ((await r.json()) as { token: string }).token;
	}
}

const certs = makeCertificates(API_HOST);
const dns = await startResolver({ [API_HOST]: "192.0.2.10", "other.github.test": "192.0.2.11" });
const upstream = await startHttps("192.0.2.10", 443, certs.cert, certs.key, (req, res) => {
	const ok = typeof req.headers.authorization === "string" && issued.includes(req.headers.authorization.replace(/^Bearer /, ""));
	json(res, ok ? 200 : 401, ok ? { login: "kiln-test-user" } : { message: "Bad credentials" });
});
const other = await startHttps("192.0.2.11", 443, certs.cert, certs.key, (_req, res) => json(res, 200, {}));
const requests: SandboxHttpRequest[] = [];

try {
	const githubTokens = new GitHubInstallationTokenService({
		installationId: 123456,
	});

	const workspace = fs.memory({
		files: {
			"/task.txt": "Summarize the current GitHub user\n",
		},
	});

	const sandbox = defineSandbox({
		rootfs: rootfs.ephemeral({
			base: debian12Agent,
		}),
		network: network.policy(async (conn) => {
			if (conn.matchDns()?.accept({ resolvers: [RESOLVER] })) return;

			const github = conn.matchHttp(API_HOST);
			if (!github) return;

			if (!(await githubTokens.canServe(github))) return;

			github.accept(async (request) => {
				requests.push(request);
				request.headers.set(
					"authorization",
					`Bearer ${await githubTokens.tokenForRequest(request)}`,
				);
			});
		}, { upstreamCaBundle: certs.ca }),
	});

	await using vm = await sandbox.boot({
		mounts: {
			"/workspace": fs.virtual(workspace),
		},
		cwd: "/workspace",
	});

	const result = await vm.exec("sh", [
		"-lc",
		`cat task.txt && curl -fsSL https://${API_HOST}/user`,
	]);
	assert.equal(result.exitCode, 0, result.stderr);
	assert.equal(result.stdout, 'Summarize the current GitHub user\n{"login":"kiln-test-user"}\n');
	assert.equal(upstream.seen.length, 1);
	assert.equal(upstream.seen[0]?.headers["authorization"], `Bearer ${issued[0]}`);
	console.log("# curl in the guest got the upstream's answer; the upstream got the token service's token");

	// The guest's own Authorization is replaced, upstream only; what the
	// guest sent and saw (curl -v) has no token.
	const verbose = await vm.exec("sh", ["-c",
		`curl -v -sS -H 'Authorization: Bearer guest-own' https://${API_HOST}/user -o /workspace/body.json 2>&1; ` +
		"echo; cat /workspace/body.json"]);
	assert.equal(verbose.exitCode, 0, verbose.stderr);
	assert.match(verbose.stdout, /> Authorization: Bearer guest-own/);
	assert.match(verbose.stdout, /"login":"kiln-test-user"/);
	assert.equal(upstream.seen[1]?.headers["authorization"], `Bearer ${issued[1]}`);
	assert.ok(!JSON.stringify(upstream.seen).includes("guest-own"), "the guest's own credential never reached upstream");

	// Nowhere in the guest: environment, files, what it sent and saw.
	const leak = await vm.exec("sh", ["-c",
		"env; cat /proc/*/environ 2>/dev/null | tr '\\0' '\\n'; " +
		"grep -rl ghs_kilnsdk /etc /tmp /run /root /var/tmp /home /workspace 2>/dev/null; echo done"]);
	assert.equal(leak.exitCode, 0, leak.stderr);
	assert.match(leak.stdout, /\ndone\n$/);
	for (const t of issued) {
		for (const [what, text] of [["curl -v", verbose.stdout], ["environment and files", leak.stdout], ["stderr", verbose.stderr + leak.stderr]])
			assert.ok(!text?.includes(t), `the token is in the guest's ${what}`);
		assert.ok(!JSON.stringify(await workspace.readDir("/")).includes(t));
		assert.ok(!new TextDecoder().decode(await workspace.readFile("/body.json")).includes(t), "in the response the guest got");
	}
	assert.equal(issued.length, 2);
	console.log(`# ${issued.length} tokens issued, none in the guest's environment, files, request bytes or responses`);

	// What the middleware saw: trusted metadata.
	const [first] = requests;
	assert.ok(first);
	assert.equal(first.method, "GET");
	assert.equal(first.url.href, `https://${API_HOST}/user`);
	assert.equal(first.tls?.sni, API_HOST);
	assert.ok(first.protocol === "http/1.1" || first.protocol === "h2", first.protocol);
	assert.equal(first.destination.originalIp, "192.0.2.10");
	assert.equal(first.destination.originalPort, 443);
	console.log(`# the middleware saw ${first.protocol} ${first.method} ${first.url.href}, sni ${first.tls?.sni}, alpn ${first.tls?.alpn}`);

	const denied = await vm.exec("sh", ["-c", "curl -fsS --max-time 20 https://other.github.test/ >/dev/null 2>&1 || echo denied"]);
	assert.equal(denied.stdout, "denied\n");
	assert.equal(other.seen.length, 0, "nothing reached the second host");
	console.log("# a second host is denied");
} finally {
	dns.close();
	await Promise.all([upstream.close(), other.close(), tokens.close()]);
	certs.remove();
}
