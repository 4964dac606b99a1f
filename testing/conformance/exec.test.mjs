// exec over pipes: fds 0, 1, 2 are the workload's own; fd 3 carries one spawn envelope; fd 4
// carries started -> eof -> exit (checked by the strict decoder on every exec); exit codes and
// signals mirrored; the exact environment; argv without a shell; workspace-relative cwd with
// every escape refused; signals to the wrapper forwarded; `signal --exec-id` idempotent and
// returning only once the workload is gone, within the daemon's 750 ms cleanup bound.
import assert from "node:assert/strict";
import { existsSync, mkdirSync, rmSync, symlinkSync } from "node:fs";
import { after, before, describe, test } from "node:test";

import {
  CLEANUP_BOUND_MS,
  Exec,
  config,
  assertKilledBy,
  create,
  createInput,
  destroy,
  execPipes,
  makeWorkspaceDir,
  newExecId,
  newInstanceId,
  newWorkspaceId,
  show,
  signalExec,
  spawnEnvelope,
} from "./driver.mjs";
import { PROTOCOL_VERSION, OTHER_VERSION } from "./contract.mjs";

const me = newInstanceId();
const ws = newWorkspaceId("exec");
let dir;
// Something in the wrapper's own environment that must never reach the workload.
process.env.PASEO_CONFORMANCE_CANARY = "inherited";

before(async () => {
  dir = makeWorkspaceDir(ws);
  mkdirSync(`${dir}/sub/deeper`, { recursive: true });
  symlinkSync("/etc", `${dir}/link-etc`);
  symlinkSync("hop", `${dir}/chain`); // chain -> hop -> ../.. : leaves the workspace in two steps
  symlinkSync("../..", `${dir}/hop`);
  symlinkSync("sub", `${dir}/link-sub`); // stays inside: allowed
  await create(ws, me, createInput(ws, dir));
});
after(async () => {
  await destroy(ws, me);
});

function ok(result, code = 0) {
  assert.equal(result.violation, null, show(result));
  assert.deepEqual(result.types, ["started", "eof", "exit"], show(result));
  assert.deepEqual(result.exit, { type: "exit", protocolVersion: PROTOCOL_VERSION, code, signal: null }, show(result));
  assert.deepEqual(result.wrapper, { code, signal: null }, `the wrapper mirrors the exit: ${show(result)}`);
}

// Refused: no valid lifecycle violation, no exit event (an `error` event or nothing), a non-zero
// wrapper exit, and the workload's marker never written.
function refusedExec(result, marker) {
  assert.equal(result.violation, null, show(result));
  assert.ok(!result.types.includes("exit"), `it ran: ${show(result)}`);
  assert.notEqual(result.wrapper.code, 0, show(result));
  if (marker) assert.equal(existsSync(marker), false, `the workload ran: ${show(result)}`);
}

describe("fds and exit status", () => {
  test("stdin, stdout and stderr carry raw bytes; events are started, eof, exit", async () => {
    const input = Buffer.from([0x00, 0x6f, 0xff, 0x0a, 0x80, 0x00]);
    const r = await execPipes(ws, me, ["sh", "-c", "cat; printf 'err\\000' >&2"], {}, input);
    ok(r);
    assert.deepEqual(r.stdout, input);
    assert.deepEqual(r.stderr, Buffer.from("err\0"));
  });

  test("a workload that reads no stdin and one whose stdin stays open until closed", async () => {
    ok(await execPipes(ws, me, ["true"]));
    const e = new Exec(ws, spawnEnvelope(me, ["sh", "-c", "read line; echo got $line"]));
    await e.waitFor("started");
    e.child.stdin.end("hello\n");
    const r = await e.done;
    ok(r);
    assert.equal(r.stdout.toString(), "got hello\n");
  });

  test("exit codes are mirrored", async () => {
    for (const code of [1, 3, 42, 255]) ok(await execPipes(ws, me, ["sh", "-c", `exit ${code}`]), code);
  });

  test("a workload killed by a signal: exit names it and the wrapper dies of it", async () => {
    for (const signal of ["SIGTERM", "SIGKILL", "SIGUSR1"]) {
      const r = await execPipes(ws, me, ["sh", "-c", `kill -${signal.slice(3)} $$`]);
      assert.equal(r.violation, null, show(r));
      assert.deepEqual(r.types, ["started", "eof", "exit"], show(r));
      assert.deepEqual(r.exit, { type: "exit", protocolVersion: PROTOCOL_VERSION, code: null, signal }, show(r));
      assert.deepEqual(r.wrapper, { code: null, signal }, `mirrored: ${show(r)}`);
    }
  });

  test("large output on both streams arrives whole", async () => {
    const r = await execPipes(ws, me, ["sh", "-c", "seq 1 200000; seq 1 100000 >&2"]);
    ok(r);
    const lines = (n) => Array.from({ length: n }, (_, i) => `${i + 1}\n`).join("");
    assert.equal(r.stdout.toString(), lines(200000));
    assert.equal(r.stderr.toString(), lines(100000));
  });
});

describe("argv, environment, cwd", () => {
  test("argv runs directly, never through a shell", async () => {
    const r = await execPipes(ws, me, ["echo", "$HOME", "a;b", "*", "$(id)", "`x`"]);
    ok(r);
    assert.equal(r.stdout.toString(), "$HOME a;b * $(id) `x`\n");
  });

  test("the environment is exactly the envelope's: nothing inherited, nothing added", async () => {
    const env = { PATH: "/usr/bin:/bin", FOO: "bar baz", EMPTY: "", "WITH=EQ": "x", UNICODE: "é✓" };
    delete env["WITH=EQ"]; // an '=' in a name cannot exist in an environment
    const r = await execPipes(ws, me, ["env"], { env });
    ok(r);
    const seen = r.stdout.toString().split("\n").filter(Boolean).sort();
    const want = Object.entries(env).map(([k, v]) => `${k}=${v}`).sort();
    assert.deepEqual(seen, want);
    const bare = await execPipes(ws, me, ["/usr/bin/env"], { env: {} });
    ok(bare);
    assert.equal(bare.stdout.toString(), "", "an empty env stays empty");
  });

  // The profile has a tool root (config.toolDir) holding a stand-in paseo-workspace-helper.
  test("the environment stays exact with a tool root registered: no tool dir added to PATH", async () => {
    for (const env of [{ PATH: "/usr/bin:/bin", A: "1" }, { A: "1" }, {}]) {
      const r = await execPipes(ws, me, ["env"], { env });
      ok(r);
      const seen = r.stdout.toString().split("\n").filter(Boolean).sort();
      assert.deepEqual(seen, Object.entries(env).map(([k, v]) => `${k}=${v}`).sort(), show(r));
    }
  });

  test("the daemon's helper exec: bare name, empty env, purpose workspace-helper", async () => {
    // Exactly what the daemon sends right after create: no PATH, no inspect, no merge.
    const r = await execPipes(ws, me, ["paseo-workspace-helper", "describe"], {
      env: {},
      purpose: { kind: "workspace-helper" },
    });
    ok(r);
    assert.equal(r.stdout.toString(), `helper describe\n${config.toolDir}/paseo-workspace-helper\n/workspace\n`);
    // And with the env an agent's exec carries (a PATH without the tool dir), from a subdir.
    const sub = await execPipes(ws, me, ["paseo-workspace-helper", "watch", "."], {
      env: { PATH: "/usr/bin:/bin" },
      cwd: "sub",
      purpose: { kind: "workspace-helper" },
    });
    ok(sub);
    assert.equal(sub.stdout.toString(), `helper watch .\n${config.toolDir}/paseo-workspace-helper\n/workspace/sub\n`);
  });

  test("a command found nowhere fails the exec with a diagnostic, and nothing runs", async () => {
    const r = await execPipes(ws, me, ["paseo-no-such-command"], { env: {} });
    assert.equal(r.violation, null, show(r));
    assert.ok(!r.types.includes("exit") || r.exit.code === 127, show(r));
    assert.notEqual(r.wrapper.code, 0, show(r));
  });

  test("cwd: the workspace root by default, workspace-relative otherwise", async () => {
    const cases = [
      [undefined, "/workspace"],
      [".", "/workspace"],
      ["sub", "/workspace/sub"],
      ["sub/deeper", "/workspace/sub/deeper"],
      ["sub/./deeper/..", "/workspace/sub"],
      ["link-sub", "/workspace/sub"],
    ];
    for (const [cwd, want] of cases) {
      const r = await execPipes(ws, me, ["pwd", "-P"], cwd === undefined ? {} : { cwd });
      ok(r);
      assert.equal(r.stdout.toString(), `${want}\n`, `cwd ${cwd}`);
    }
  });

  test("cwd escapes are refused and start nothing", async () => {
    const marker = `${dir}/escaped`;
    for (const cwd of ["..", "../..", "sub/../..", "/etc", "/workspace", "/", "link-etc", "link-etc/..", "chain", "chain/etc", "hop", "nonexistent", "sub\0x"]) {
      rmSync(marker, { force: true });
      const r = await execPipes(ws, me, ["sh", "-c", "touch /workspace/escaped"], { cwd });
      try {
        refusedExec(r, marker);
      } catch (error) {
        error.message = `cwd ${JSON.stringify(cwd)}: ${error.message}`;
        throw error;
      }
    }
  });

  test("a missing program fails the exec without breaking the protocol", async () => {
    const r = await execPipes(ws, me, ["/no/such/program"]);
    assert.equal(r.violation, null, show(r));
    assert.ok(r.error || (r.exit && r.exit.code !== 0), show(r));
    assert.notEqual(r.wrapper.code, 0, show(r));
  });
});

describe("the spawn envelope is strict", () => {
  const marker = () => `${dir}/envelope-ran`;
  const argv = ["sh", "-c", "touch /workspace/envelope-ran"];
  const cases = {
    "unknown key": (e) => (e.privileged = true),
    [`protocolVersion ${OTHER_VERSION}`]: (e) => (e.protocolVersion = OTHER_VERSION),
    "unknown purpose": (e) => (e.purpose = { kind: "root-shell" }),
    "unknown purpose key": (e) => (e.purpose.extra = 1),
    "unknown stdio key": (e) => (e.stdio.extra = 1),
    "empty argv": (e) => (e.argv = []),
    "non-string env value": (e) => (e.env.N = 1),
    "empty execId": (e) => (e.execId = ""),
    "no execId": (e) => delete e.execId,
    "no env": (e) => delete e.env,
    "unknown option key": (e) => (e.options.networkHost = true),
    "another daemon's runtimeInstanceId": (e) => (e.runtimeInstanceId = newInstanceId()),
    "type resize": (e) => (e.type = "resize"),
  };
  for (const [name, mutate] of Object.entries(cases)) {
    test(name, async () => {
      rmSync(marker(), { force: true });
      const envelope = spawnEnvelope(me, argv);
      mutate(envelope);
      const r = await new Exec(ws, `${JSON.stringify(envelope)}\n`).done;
      refusedExec(r, marker());
    });
  }

  test("no envelope at all, or not JSON", async () => {
    for (const bytes of ["", "{spawn\n", "\n"]) {
      const r = await new Exec(ws, bytes).done;
      refusedExec(r);
    }
  });

  test("an exec in a workspace that does not exist", async () => {
    const r = await new Exec(newWorkspaceId("absent"), spawnEnvelope(me, ["true"])).done;
    refusedExec(r);
  });

  test("an execId in use is refused; the running one is untouched", async () => {
    const first = new Exec(ws, spawnEnvelope(me, ["sh", "-c", "sleep 2; echo first"]));
    await first.waitFor("started");
    rmSync(marker(), { force: true });
    const again = await new Exec(ws, spawnEnvelope(me, argv, { execId: first.execId })).done;
    refusedExec(again, marker());
    const r = await first.done;
    ok(r);
    assert.equal(r.stdout.toString(), "first\n");
  });
});

// A workload that reports each of SIGINT, SIGTERM, SIGHUP on stdout and exits 9.
const trapping = [
  "sh",
  "-c",
  'for s in INT TERM HUP; do trap "echo caught-$s; exit 9" $s; done; echo ready; while :; do sleep 0.05; done',
];

describe("signals", () => {
  test("SIGINT, SIGTERM and SIGHUP sent to the wrapper reach the workload", async () => {
    for (const signal of ["SIGINT", "SIGTERM", "SIGHUP"]) {
      const e = new Exec(ws, spawnEnvelope(me, trapping));
      await e.waitFor("started");
      await e.waitForStdout("ready");
      e.kill(signal);
      const r = await e.done;
      ok(r, 9);
      assert.equal(r.stdout.toString(), `ready\ncaught-${signal.slice(3)}\n`);
    }
  });

  test("a forwarded SIGTERM that kills the workload is mirrored", async () => {
    const e = new Exec(ws, spawnEnvelope(me, ["sh", "-c", "echo ready; exec sleep 1000"]));
    await e.waitForStdout("ready");
    e.kill("SIGTERM");
    const r = await e.done;
    assertKilledBy(r, "SIGTERM");
  });

  // The daemon holds a signal until `started` and sends it at once: started must mean the
  // workload can be signalled, so this one must not be lost.
  test("a signal sent the moment started arrives is delivered", async () => {
    const e = new Exec(ws, spawnEnvelope(me, ["sleep", "1000"]), { deadlineMs: 20_000 });
    await e.waitFor("started");
    e.kill("SIGTERM");
    const r = await e.done;
    assert.equal(r.timedOut, false, `the signal was lost: ${show(r)}`);
    assert.deepEqual(r.exit, { type: "exit", protocolVersion: PROTOCOL_VERSION, code: null, signal: "SIGTERM" }, show(r));
  });

  test("signal --exec-id returns once the workload is gone, within the cleanup bound, idempotently", async () => {
    const e = new Exec(ws, spawnEnvelope(me, ["sleep", "1001"]));
    await e.waitFor("started");
    const first = await signalExec(ws, e.execId, "SIGKILL", me);
    assert.equal(first.code, 0, first.stderr);
    assert.ok(first.ms < CLEANUP_BOUND_MS, `signal took ${first.ms} ms; the daemon gives it ${CLEANUP_BOUND_MS}`);
    // Gone already when it returned: nothing in the sandbox runs `sleep 1001`.
    const ps = await execPipes(ws, me, ["ps", "-o", "args"]);
    assert.ok(!ps.stdout.toString().includes("sleep 1001"), ps.stdout.toString());
    const second = await signalExec(ws, e.execId, "SIGKILL", me);
    assert.equal(second.code, 0, `not idempotent: ${second.stderr}`);
    const r = await e.done;
    assert.equal(r.violation, null, show(r));
    assert.deepEqual(r.exit, { type: "exit", protocolVersion: PROTOCOL_VERSION, code: null, signal: "SIGKILL" }, show(r));
    const later = await signalExec(ws, e.execId, "SIGTERM", me);
    assert.equal(later.code, 0, `after completion it is already clean: ${later.stderr}`);
  });

  test("signal --exec-id SIGTERM ends a workload too", async () => {
    const e = new Exec(ws, spawnEnvelope(me, ["sleep", "1002"]));
    await e.waitFor("started");
    const s = await signalExec(ws, e.execId, "SIGTERM", me);
    assert.equal(s.code, 0, s.stderr);
    const ps = await execPipes(ws, me, ["ps", "-o", "args"]);
    assert.ok(!ps.stdout.toString().includes("sleep 1002"), ps.stdout.toString());
    const r = await e.done;
    assert.equal(r.exit?.signal, "SIGTERM", show(r));
  });

  test("the daemon's forced cleanup (signal SIGKILL, then the wrapper's group) is clean", async () => {
    const e = new Exec(ws, spawnEnvelope(me, ["sleep", "1003"]));
    await e.waitFor("started");
    const s = await e.forceKill(me);
    assert.equal(s.code, 0, `signal helper: ${s.code ?? s.signal} ${s.stderr}`);
    await e.wrapperExit;
    const ps = await execPipes(ws, me, ["ps", "-o", "args"]);
    assert.ok(!ps.stdout.toString().includes("sleep 1003"), ps.stdout.toString());
  });

  test("signal names only the workload of that workspace, that exec id and that owner", async () => {
    const e = new Exec(ws, spawnEnvelope(me, ["sleep", "1004"]));
    await e.waitFor("started");
    await signalExec(newWorkspaceId("elsewhere"), e.execId, "SIGKILL", me);
    await signalExec(ws, newExecId(), "SIGKILL", me);
    await signalExec(ws, e.execId, "SIGKILL", newInstanceId());
    const ps = await execPipes(ws, me, ["ps", "-o", "args"]);
    assert.ok(ps.stdout.toString().includes("sleep 1004"), `killed by a signal that did not name it: ${ps.stdout}`);
    const s = await signalExec(ws, e.execId, "SIGKILL", me);
    assert.equal(s.code, 0, s.stderr);
    await e.done;
  });

  test("an unknown signal name is refused and kills nothing", async () => {
    const e = new Exec(ws, spawnEnvelope(me, ["sleep", "1005"]));
    await e.waitFor("started");
    const s = await signalExec(ws, e.execId, "SIGBOGUS", me);
    assert.notEqual(s.code, 0);
    assert.ok(s.stderr.trim().length > 0);
    const ps = await execPipes(ws, me, ["ps", "-o", "args"]);
    assert.ok(ps.stdout.toString().includes("sleep 1005"), ps.stdout.toString());
    await signalExec(ws, e.execId, "SIGKILL", me);
    await e.done;
  });
});
