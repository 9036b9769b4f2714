// run-examples.js EXAMPLE.js... - the seed's scenarios in one Node
// process, one TAP test each (selftests/kvm/sdk.sh runs it in the
// harness; the runner is examples.ts). Each boots its VMs as written
// (sandbox.boot()); conformance.js runs a subset through a launcher.

import { runExamples } from "./examples.js";

process.exit(await runExamples(process.argv.slice(2)));
