// Runs the runtime under test the way Paseo's daemon does (command-runtime.ts at getpaseo/paseo
// 5f2747b): one process per operation, no shell, the caller's whole environment; lifecycle
// requests as one JSON line on stdin and one JSON value back on stdout; exec spawned detached
// with stdio [0, 1, 2, fd 3 control, fd 4 events]; cleanup through `signal ... --signal SIGKILL`
// bounded at 750 ms, then SIGKILL to the wrapper's process group.
//
// Configuration comes from the environment (set by testing/conformance_test.cc):
//   PASEO_CONFORMANCE_RUNTIME         the runtime binary
//   PASEO_CONFORMANCE_SOCKET          the service's client socket   (option "socket")
//   PASEO_CONFORMANCE_DEPLOYMENT      the deployment id             (option "deployment")
//   PASEO_CONFORMANCE_PROFILE         the profile name              (option "profile")
//   PASEO_CONFORMANCE_WORKSPACE_ROOT  a registered workspace root (workspaces are made under it)
//   PASEO_CONFORMANCE_OUTSIDE         a directory outside every workspace root
//   PASEO_CONFORMANCE_TOOL_DIR        the profile's tool directory, with a stand-in
//                                     paseo-workspace-helper (prints "helper ARGS" and its cwd)
//   PASEO_CONFORMANCE_CONTROL         a Unix socket: "restart-broker" / "restart-service" lines
//   PASEO_CONFORMANCE_PROTOCOL        the contract version to check: 1 (default) or 2, for which
//                                     the runtime runs as `runtime --protocol-version 2 OP ...`
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { randomBytes } from "node:crypto";
import { chownSync, mkdirSync, chmodSync } from "node:fs";
import net from "node:net";
import path from "node:path";

import {
  EventDecoder,
  LifecycleRequest,
  LifecycleResponse,
  PROTOCOL_VERSION,
  SpawnEnvelope,
  Control,
  frame,
  parseSingle,
} from "./contract.mjs";

export const CLEANUP_BOUND_MS = 750; // the daemon's bound on the SIGKILL `signal` helper
export const RESIZE_ACK_BOUND_MS = 1000; // the daemon fails a pty whose resize is not acked

function required(name) {
  const value = process.env[name];
  if (!value) throw new Error(`${name} is not set: run the suite through //testing:conformance_test`);
  return value;
}

export const config = {
  get runtime() {
    return required("PASEO_CONFORMANCE_RUNTIME");
  },
  // What the daemon's configured command puts before the operation.
  get runtimeArgs() {
    return PROTOCOL_VERSION === 1 ? [] : ["--protocol-version", String(PROTOCOL_VERSION)];
  },
  get workspaceRoot() {
    return required("PASEO_CONFORMANCE_WORKSPACE_ROOT");
  },
  get outside() {
    return required("PASEO_CONFORMANCE_OUTSIDE");
  },
  // Where the profile places the tool root holding a stand-in paseo-workspace-helper.
  get toolDir() {
    return required("PASEO_CONFORMANCE_TOOL_DIR");
  },
  get options() {
    return {
      socket: required("PASEO_CONFORMANCE_SOCKET"),
      deployment: required("PASEO_CONFORMANCE_DEPLOYMENT"),
      profile: required("PASEO_CONFORMANCE_PROFILE"),
    };
  },
};

// Paseo's runtimeInstanceId is stable per daemon: one per test file is "our daemon"; a second
// one stands for another daemon (foreign ownership).
export function newInstanceId() {
  return randomBytes(32).toString("hex");
}
export function newExecId() {
  return randomBytes(16).toString("hex"); // 32 hex characters, as the daemon makes them
}
export function newWorkspaceId(label = "ws") {
  return `${label}-${randomBytes(6).toString("hex")}`;
}

// A workspace directory beneath the registered root, writable by the sandbox user (4242) and by
// the client (uid 0, through group 0: the root is judged by mode bits like any uid).
export function makeWorkspaceDir(name) {
  const dir = path.join(config.workspaceRoot, name);
  mkdirSync(dir, { recursive: true });
  chownSync(dir, 4242, 0);
  chmodSync(dir, 0o775);
  return dir;
}

export function createInput(workspaceId, dir, extra = {}) {
  return {
    workspaceId,
    project: { projectId: `project-${workspaceId}`, source: { kind: "directory", path: dir } },
    placement: { kind: "existing" },
    ...extra,
  };
}

// A valid lifecycle request line (validated by our schema, as Paseo validates before sending).
export function lifecycleRequest(runtimeInstanceId, { input, workspaceIds, options } = {}) {
  return frame(LifecycleRequest, {
    protocolVersion: PROTOCOL_VERSION,
    runtimeInstanceId,
    input,
    options: options ?? config.options,
    workspaceIds,
  });
}

function collect(stream) {
  const chunks = [];
  stream.on("data", (c) => chunks.push(c));
  return new Promise((resolve) => stream.once("close", () => resolve(Buffer.concat(chunks))));
}

// Runs `runtime ...args` with `stdin` (a string, or undefined for an immediately closed stdin).
// Resolves { code, signal, stdout, stderr, ms }; kills it after `timeoutMs`.
export async function run(args, stdin, { timeoutMs = 120_000, env = process.env } = {}) {
  const started = Date.now();
  const child = spawn(config.runtime, [...config.runtimeArgs, ...args], {
    env,
    shell: false,
    stdio: ["pipe", "pipe", "pipe"],
  });
  child.stdin.on("error", () => {}); // a runtime that refuses before reading stdin
  child.stdin.end(stdin ?? "");
  const timer = setTimeout(() => child.kill("SIGKILL"), timeoutMs);
  const [stdout, stderr, exit] = await Promise.all([
    collect(child.stdout),
    collect(child.stderr),
    new Promise((resolve, reject) => {
      child.once("error", reject);
      child.once("close", (code, signal) => resolve({ code, signal }));
    }),
  ]);
  clearTimeout(timer);
  return { ...exit, stdout: stdout.toString(), stderr: stderr.toString(), ms: Date.now() - started };
}

function describeRun(r) {
  return `exit ${r.code ?? r.signal}; stdout ${JSON.stringify(r.stdout)}; stderr ${JSON.stringify(r.stderr)}`;
}

// A lifecycle operation that must succeed: exit 0, empty-or-diagnostic stderr, one valid
// response. Returns the parsed response.
export async function lifecycle(op, workspaceId, runtimeInstanceId, body = {}) {
  const args = workspaceId === undefined ? [op] : [op, "--workspace-id", workspaceId];
  const r = await run(args, lifecycleRequest(runtimeInstanceId, body));
  if (r.code !== 0) throw new Error(`${op} failed: ${describeRun(r)}`);
  return parseSingle(LifecycleResponse, r.stdout);
}

// A lifecycle operation that must be refused: non-zero exit, a diagnostic on stderr. Returns
// the run for further checks.
export async function refused(args, stdin) {
  const r = await run(args, stdin);
  if (r.code === 0) throw new Error(`${args.join(" ")} was accepted: ${describeRun(r)}`);
  if (r.stderr.trim() === "") throw new Error(`${args.join(" ")} failed without a diagnostic: ${describeRun(r)}`);
  return r;
}

export const create = (ws, id, input, options) => lifecycle("create", ws, id, { input, options });
export const inspect = (ws, id) => lifecycle("inspect", ws, id);
export const destroy = (ws, id) => lifecycle("destroy", ws, id);

// A valid spawn envelope for `argv`, with defaults the tests override.
export function spawnEnvelope(runtimeInstanceId, argv, extra = {}) {
  return {
    type: "spawn",
    protocolVersion: PROTOCOL_VERSION,
    runtimeInstanceId,
    argv,
    env: { PATH: "/usr/bin:/bin" },
    purpose: { kind: "workspace-script" },
    options: config.options,
    execId: newExecId(),
    stdio: { kind: "pipes" },
    ...extra,
  };
}

// One exec, driven like the daemon: the wrapper detached with five stdio pipes; the spawn
// envelope on fd 3 (closed after it for pipes, kept open for a pty); fd 4 through the strict
// decoder. `envelope` is an object (validated and framed) or raw bytes (sent as they are).
export class Exec {
  constructor(workspaceId, envelope, { stdin, collectStdout = true, env = process.env, deadlineMs = 60_000 } = {}) {
    this.mode = typeof envelope === "object" ? envelope.stdio.kind : "pipes";
    this.execId = typeof envelope === "object" ? envelope.execId : undefined;
    this.workspaceId = workspaceId;
    this.spawnedAt = Date.now();
    this.child = spawn(config.runtime, [...config.runtimeArgs, "exec", "--workspace-id", workspaceId], {
      env,
      detached: true,
      shell: false,
      stdio: ["pipe", "pipe", "pipe", "pipe", "pipe"],
    });
    this.control = this.child.stdio[3];
    this.control.on("error", () => {});
    this.child.stdin.on("error", () => {});
    this.decoder = new EventDecoder(this.mode);
    this.violation = null;
    this.eventTimes = [];
    this.waiters = [];
    this.resizeId = 0;
    this.stdout = collectStdout ? collect(this.child.stdout) : null;
    this.outSoFar = "";
    if (collectStdout) {
      this.child.stdout.on("data", (c) => {
        this.outSoFar += c.toString("latin1");
        this.#wake();
      });
    }
    this.stderr = collect(this.child.stderr);
    const events = this.child.stdio[4];
    events.on("data", (chunk) => this.#onEvents(chunk));
    const eventsClosed = new Promise((resolve) => events.once("close", resolve));
    const wrapperExit = new Promise((resolve) =>
      this.child.once("exit", (code, signal) => resolve({ code, signal })),
    );
    this.wrapperExit = wrapperExit;
    // Every exec is bounded: one still running at its deadline gets the daemon's forced cleanup
    // and its result says timedOut, so a hung runtime fails one case instead of the suite.
    this.timedOut = false;
    const owner = typeof envelope === "object" ? envelope.runtimeInstanceId : undefined;
    const deadline = setTimeout(() => {
      this.timedOut = true;
      this.forceKill(owner).catch(() => {});
    }, deadlineMs);
    wrapperExit.then(() => clearTimeout(deadline));
    this.done = (async () => {
      const wrapper = await wrapperExit;
      await eventsClosed;
      if (!this.violation) {
        try {
          this.decoder.finish();
        } catch (error) {
          this.violation = error;
        }
      }
      this.#wake();
      return {
        timedOut: this.timedOut,
        wrapper,
        events: this.decoder.events,
        types: this.decoder.events.map((e) => e.type),
        exit: this.decoder.events.find((e) => e.type === "exit") ?? null,
        error: this.decoder.events.find((e) => e.type === "error") ?? null,
        violation: this.violation,
        stdout: this.stdout ? await this.stdout : null,
        stderr: await this.stderr,
      };
    })();
    if (stdin !== undefined) this.child.stdin.end(stdin);
    const bytes = typeof envelope === "object" ? frame(SpawnEnvelope, envelope) : envelope;
    if (this.mode === "pty") this.control.write(bytes);
    else this.control.end(bytes);
  }

  #onEvents(chunk) {
    if (this.violation) return;
    try {
      for (const event of this.decoder.push(chunk)) {
        this.eventTimes.push([event, Date.now()]);
        // As the daemon does: the authoritative exit ends the pty's input and control.
        if (event.type === "exit" && this.mode === "pty") {
          this.child.stdin.end();
          this.control.end();
        }
      }
    } catch (error) {
      this.violation = error;
    }
    this.#wake();
  }

  #wake() {
    for (const w of [...this.waiters]) w();
  }

  // Resolves with the first event matching `pred` (a type name or a predicate); rejects if the
  // conversation ends or breaks first, or after `timeoutMs`.
  waitFor(pred, timeoutMs = 60_000) {
    const match = typeof pred === "string" ? (e) => e.type === pred : pred;
    return new Promise((resolve, reject) => {
      const check = () => {
        const hit = pred.length === 0 ? (pred() ? true : undefined) : this.decoder.events.find(match);
        if (hit) return finish(() => resolve(hit));
        if (this.violation) return finish(() => reject(this.violation));
        if (this.ended) return finish(() => reject(new Error(`exec ended without the awaited event; events ${JSON.stringify(this.decoder.events)}`)));
      };
      const timer = setTimeout(
        () => finish(() => reject(new Error(`no such event within ${timeoutMs} ms; events ${JSON.stringify(this.decoder.events)}`))),
        timeoutMs,
      );
      const finish = (f) => {
        clearTimeout(timer);
        this.waiters = this.waiters.filter((w) => w !== check);
        f();
      };
      this.waiters.push(check);
      check();
    });
  }

  // Resolves once the workload's stdout so far contains `text`.
  waitForStdout(text, timeoutMs = 60_000) {
    return this.waitFor(() => this.outSoFar.includes(text), timeoutMs).catch((error) => {
      throw new Error(`stdout never contained ${JSON.stringify(text)} (got ${JSON.stringify(this.outSoFar.slice(-300))}): ${error.message}`);
    });
  }

  get ended() {
    return this.child.exitCode !== null || this.child.signalCode !== null;
  }

  // Control frames over fd 3 (pty only): validated, or raw bytes for invalid-frame tests.
  sendControl(value) {
    this.control.write(typeof value === "string" ? value : frame(Control, value));
  }

  resize(rows, cols) {
    this.resizeId += 1;
    const id = this.resizeId;
    this.sendControl({ type: "resize", protocolVersion: PROTOCOL_VERSION, id, rows, cols });
    return id;
  }

  signalFrame(signal) {
    this.sendControl({ type: "signal", protocolVersion: PROTOCOL_VERSION, signal });
  }

  closeControl() {
    this.control.end();
  }

  // A signal to the wrapper's pid, as the daemon delivers one over pipes.
  kill(signal) {
    this.child.kill(signal);
  }

  // The daemon's forced cleanup: `signal --signal SIGKILL` bounded at 750 ms, then SIGKILL to
  // the wrapper's process group. Returns the signal run.
  async forceKill(runtimeInstanceId) {
    const r =
      this.execId && runtimeInstanceId
        ? await signalExec(this.workspaceId, this.execId, "SIGKILL", runtimeInstanceId, {
            timeoutMs: CLEANUP_BOUND_MS,
          })
        : null;
    try {
      process.kill(-this.child.pid, "SIGKILL");
    } catch (error) {
      if (error.code !== "ESRCH") throw error;
    }
    return r;
  }
}

export function signalExec(workspaceId, execId, signal, runtimeInstanceId, { timeoutMs } = {}) {
  return run(
    ["signal", "--workspace-id", workspaceId, "--exec-id", execId, "--signal", signal],
    lifecycleRequest(runtimeInstanceId),
    { timeoutMs },
  );
}

// A whole pipes exec of `argv`: resolves the `done` record.
export function execPipes(workspaceId, runtimeInstanceId, argv, extra = {}, stdin = "") {
  return new Exec(workspaceId, spawnEnvelope(runtimeInstanceId, argv, extra), { stdin }).done;
}

// Asks the C++ harness to restart part of the service; resolves its reply line.
export function serviceControl(command) {
  return new Promise((resolve, reject) => {
    const socket = net.connect(required("PASEO_CONFORMANCE_CONTROL"));
    let reply = "";
    socket.on("data", (d) => (reply += d));
    socket.on("error", reject);
    socket.on("end", () => {
      reply = reply.trim();
      if (reply.startsWith("ok")) resolve(reply);
      else reject(new Error(`${command}: ${reply}`));
    });
    socket.end(`${command}\n`);
  });
}

// Human-readable record of an exec for assertion messages.
export function show(result) {
  return JSON.stringify({
    timedOut: result.timedOut || undefined,
    wrapper: result.wrapper,
    events: result.events,
    violation: result.violation?.message,
    stdout: result.stdout?.toString().slice(0, 400),
    stderr: result.stderr.toString().slice(0, 400),
  });
}

// The exec ended by `signal`: a clean conversation whose exit names it, and a wrapper that
// mirrored it by dying of the same signal.
export function assertKilledBy(result, signal) {
  assert.equal(result.violation, null, show(result));
  assert.deepEqual(result.exit, { type: "exit", protocolVersion: PROTOCOL_VERSION, code: null, signal }, show(result));
  assert.deepEqual(result.wrapper, { code: null, signal }, `the wrapper mirrors it: ${show(result)}`);
}
