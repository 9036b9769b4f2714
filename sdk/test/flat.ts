// node:test with every test at the top level: selftests/run_all.sh counts
// the top-level TAP lines, so a describe() block would count as one test.
// describe(name, body) here only prefixes the names of the tests body
// declares.

import { test as nodeTest } from "node:test";
import type { TestContext } from "node:test";

let prefix = "";

export function describe(name: string, body: () => void): void {
	const outer = prefix;
	prefix = outer ? `${outer}: ${name}` : name;
	try {
		body();
	} finally {
		prefix = outer;
	}
}

export function test(name: string, fn: (t: TestContext) => void | Promise<void>): void {
	void nodeTest(prefix ? `${prefix}: ${name}` : name, fn);
}
