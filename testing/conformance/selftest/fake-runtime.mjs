#!/usr/bin/env node
// A deliberately tiny stand-in runtime for checking the suite's own driver and decoder (and the
// C++ plumbing) before the real runtime exists. NOT a runtime: it runs workloads on the host,
// keeps state in $FAKE_RUNTIME_STATE (default /tmp/fake-runtime), and supports only pipes.
// Usage: bazel test //testing:conformance_test --test_env=PASEO_CONFORMANCE_RUNTIME=<this file>
import { spawn } from "node:child_process";
import { existsSync, mkdirSync, readFileSync, rmSync, writeFileSync, writeSync } from "node:fs";
import path from "node:path";

const stateDir = process.env.FAKE_RUNTIME_STATE ?? "/tmp/fake-runtime";
mkdirSync(stateDir, { recursive: true });
const [op, , workspaceId] = process.argv.slice(2);
const out = (v) => process.stdout.write(`${JSON.stringify(v)}\n`);
const fail = (why) => {
  process.stderr.write(`fake-runtime: ${why}\n`);
  process.exit(2);
};
const file = () => path.join(stateDir, `${workspaceId}.json`);

if (op === "describe") {
  out({ protocolVersion: 1, modes: ["pipes", "pty"], reconcile: true });
} else if (op === "exec") {
  const envelope = JSON.parse(readFileSync(3, "utf8"));
  if (!existsSync(file())) fail("no such workspace");
  const root = JSON.parse(readFileSync(file(), "utf8")).dir;
  const child = spawn(envelope.argv[0], envelope.argv.slice(1), {
    cwd: path.join(root, envelope.cwd ?? "."),
    env: envelope.env,
    stdio: "inherit",
  });
  child.on("spawn", () => writeSync(4, '{"type":"started","protocolVersion":1}\n'));
  for (const s of ["SIGINT", "SIGTERM", "SIGHUP"]) process.on(s, () => child.kill(s));
  child.on("close", (code, signal) => {
    writeSync(4, '{"type":"eof","protocolVersion":1}\n');
    writeSync(4, `${JSON.stringify({ type: "exit", protocolVersion: 1, code, signal })}\n`);
    process.exit(code ?? 1);
  });
} else {
  let text = "";
  process.stdin.on("data", (d) => (text += d));
  process.stdin.on("end", () => {
    const request = JSON.parse(text);
    if (request.protocolVersion !== 1) fail("protocol version");
    if (op === "create") {
      const fresh = !existsSync(file());
      if (fresh) writeFileSync(file(), JSON.stringify({ dir: request.input.project.source.path }));
      out({ type: "state", protocolVersion: 1, state: { workspaceId, lifecycle: "ready" }, placement: { cwd: "/workspace" }, materializedFreshContent: fresh });
    } else if (op === "inspect") {
      out({ type: "inspection", protocolVersion: 1, inspection: existsSync(file()) ? { status: "ready", state: { workspaceId, lifecycle: "ready" }, placement: { cwd: "/workspace" } } : { status: "missing" } });
    } else if (op === "destroy") {
      rmSync(file(), { force: true });
      out({ type: "ok", protocolVersion: 1 });
    } else {
      fail(`unsupported ${op}`);
    }
  });
}
