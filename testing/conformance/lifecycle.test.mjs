// describe and the lifecycle commands (create, inspect, pause, resume, destroy, reconcile) as
// the contract states them: one JSON request on stdin, one strict JSON response on stdout, a
// diagnostic and a non-zero exit for anything refused, idempotency, ownership by
// runtimeInstanceId.
import assert from "node:assert/strict";
import { after, describe, test } from "node:test";

import { OTHER_VERSION, DescribeResponse, LifecycleRequest, PROTOCOL_VERSION, parseSingle } from "./contract.mjs";
import {
  config,
  create,
  createInput,
  destroy,
  execPipes,
  inspect,
  lifecycle,
  lifecycleRequest,
  makeWorkspaceDir,
  newInstanceId,
  newWorkspaceId,
  refused,
  run,
  show,
} from "./driver.mjs";

const me = newInstanceId(); // this file's daemon
const other = newInstanceId(); // another daemon sharing the service
const made = []; // [workspaceId, owner] to destroy at the end

async function fresh(label, owner = me) {
  const ws = newWorkspaceId(label);
  const dir = makeWorkspaceDir(ws);
  const response = await create(ws, owner, createInput(ws, dir));
  made.push([ws, owner]);
  return { ws, dir, response };
}

after(async () => {
  for (const [ws, owner] of made) await lifecycle("destroy", ws, owner).catch(() => {});
});

test(`describe prints protocol ${PROTOCOL_VERSION} with pipes, pty and reconcile`, async () => {
  const r = await run(["describe"], undefined);
  assert.equal(r.code, 0, r.stderr);
  const description = parseSingle(DescribeResponse, r.stdout);
  assert.equal(description.protocolVersion, PROTOCOL_VERSION);
  assert.ok(description.modes.includes("pipes"), "the daemon refuses a runtime without pipes");
  assert.ok(description.modes.includes("pty"));
  assert.equal(description.reconcile, true);
  if (PROTOCOL_VERSION === 2) {
    // A v2 daemon without authentication refuses a runtime that says true.
    assert.deepEqual(description.requirements, { daemonAuthentication: false });
  }
});

test("manage-describe declares no operations: a non-zero exit, nothing on stdout", async () => {
  // v2's optional management commands; a v1 runtime has no such command at all.
  const r = await run(["manage-describe"], undefined);
  assert.notEqual(r.code, 0, `exit 0 would need a valid {protocolVersion, operations}: ${r.stdout}`);
  assert.equal(r.stdout, "");
  assert.notEqual(r.stderr.trim(), "");
  for (const op of ["validate-options", "preflight-release-backing"]) {
    const refusedOp = await run([op, "--workspace-id", "w"], undefined);
    assert.notEqual(refusedOp.code, 0, `${op} was accepted`);
  }
});

describe("create, inspect, pause, resume, destroy", () => {
  test("inspect of an unknown workspace is missing", async () => {
    const r = await inspect(newWorkspaceId("never"), me);
    assert.deepEqual(r, { type: "inspection", protocolVersion: PROTOCOL_VERSION, inspection: { status: "missing" } });
  });

  test("create returns ready state at /workspace with fresh content, then adopts", async () => {
    const ws = newWorkspaceId("create");
    const dir = makeWorkspaceDir(ws);
    assert.equal((await inspect(ws, me)).inspection.status, "missing");
    const first = await create(ws, me, createInput(ws, dir));
    made.push([ws, me]);
    assert.equal(first.type, "state");
    assert.equal(first.protocolVersion, PROTOCOL_VERSION);
    assert.equal(first.state.workspaceId, ws);
    assert.equal(first.state.lifecycle, "ready");
    assert.deepEqual(first.placement, { cwd: "/workspace" });
    assert.equal(first.materializedFreshContent, true, "the daemon fails a create without it");
    const again = await create(ws, me, createInput(ws, dir));
    assert.equal(again.type, "state");
    assert.equal(again.state.lifecycle, "ready");
    assert.equal(again.materializedFreshContent, false, "a second create adopts");
    const seen = await inspect(ws, me);
    assert.equal(seen.inspection.status, "ready");
    assert.equal(seen.inspection.state.workspaceId, ws);
    assert.equal(seen.inspection.state.lifecycle, "ready");
    assert.deepEqual(seen.inspection.placement, { cwd: "/workspace" });
    // What the daemon merges over every workload's env: the tool directory (Paseo's helper) in
    // front of the default PATH, and what of the sandbox is kept (its read-write workspace).
    assert.deepEqual(seen.inspection.state.lifecycleEnvironment, {
      PATH: `${config.toolDir}:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin`,
      PASEO_SANDBOX_KEPT: "/workspace",
    });
  });

  test("a discovery create is a workspace like any other", async () => {
    const ws = newWorkspaceId("discovery");
    const dir = makeWorkspaceDir(ws);
    const r = await create(ws, me, createInput(ws, dir, { purpose: "discovery" }));
    made.push([ws, me]);
    assert.equal(r.state.lifecycle, "ready");
    const result = await execPipes(ws, me, ["true"]);
    assert.equal(result.exit?.code, 0, show(result));
  });

  test("two concurrent creates of one workspace yield one workspace, one of them fresh", async () => {
    const ws = newWorkspaceId("race");
    const dir = makeWorkspaceDir(ws);
    const both = await Promise.all([create(ws, me, createInput(ws, dir)), create(ws, me, createInput(ws, dir))]);
    made.push([ws, me]);
    for (const r of both) assert.equal(r.state.lifecycle, "ready");
    assert.deepEqual(both.map((r) => r.materializedFreshContent).sort(), [false, true]);
    // One sandbox: a file written by one exec is seen by the next, and the workspace works.
    const write = await execPipes(ws, me, ["sh", "-c", "echo one > /tmp/marker"]);
    assert.equal(write.exit?.code, 0, show(write));
    const read = await execPipes(ws, me, ["cat", "/tmp/marker"]);
    assert.equal(read.stdout.toString(), "one\n", show(read));
    await destroy(ws, me);
    assert.equal((await inspect(ws, me)).inspection.status, "missing");
  });

  test("pause and resume are idempotent and exec needs ready", async () => {
    const { ws } = await fresh("pause");
    assert.deepEqual(await lifecycle("pause", ws, me), { type: "ok", protocolVersion: PROTOCOL_VERSION });
    const paused = await inspect(ws, me);
    assert.equal(paused.inspection.status, "paused");
    assert.equal(paused.inspection.state.lifecycle, "paused");
    assert.deepEqual(paused.inspection.placement, { cwd: "/workspace" });
    assert.deepEqual(await lifecycle("pause", ws, me), { type: "ok", protocolVersion: PROTOCOL_VERSION });
    const blocked = await execPipes(ws, me, ["true"]);
    assert.notEqual(blocked.exit?.code, 0, `exec in a paused workspace ran: ${show(blocked)}`);
    assert.equal(blocked.violation, null, show(blocked));
    for (let i = 0; i < 2; ++i) {
      const resumed = await lifecycle("resume", ws, me);
      assert.equal(resumed.type, "state");
      assert.equal(resumed.state.lifecycle, "ready");
      assert.deepEqual(resumed.placement, { cwd: "/workspace" });
      assert.equal(resumed.materializedFreshContent, undefined, "resume omits it");
    }
    assert.equal((await inspect(ws, me)).inspection.status, "ready");
    const works = await execPipes(ws, me, ["echo", "back"]);
    assert.equal(works.stdout.toString(), "back\n", show(works));
  });

  test("destroy is idempotent and leaves the workspace directory's content", async () => {
    const { ws, dir } = await fresh("destroy");
    const write = await execPipes(ws, me, ["sh", "-c", "echo kept > /workspace/file"]);
    assert.equal(write.exit?.code, 0, show(write));
    assert.deepEqual(await destroy(ws, me), { type: "ok", protocolVersion: PROTOCOL_VERSION });
    assert.equal((await inspect(ws, me)).inspection.status, "missing");
    assert.deepEqual(await destroy(ws, me), { type: "ok", protocolVersion: PROTOCOL_VERSION });
    assert.deepEqual(await destroy(newWorkspaceId("never"), me), { type: "ok", protocolVersion: PROTOCOL_VERSION });
    const { readFileSync } = await import("node:fs");
    assert.equal(readFileSync(`${dir}/file`, "utf8"), "kept\n", "destroy removes only owned resources");
  });
});

describe("refusals: a clear diagnostic, a non-zero exit, nothing created", () => {
  const ws = newWorkspaceId("refuse");
  let dir;
  const valid = () => JSON.parse(lifecycleRequest(me, { input: createInput(ws, dir) }));
  const expectNothing = async () => assert.equal((await inspect(ws, me)).inspection.status, "missing");

  test("requests with unknown keys at any level or another protocol version", async () => {
    dir = makeWorkspaceDir(ws);
    const mutations = {
      [`protocolVersion ${OTHER_VERSION}`]: (r) => (r.protocolVersion = OTHER_VERSION),
      "protocolVersion 0": (r) => (r.protocolVersion = 0),
      "protocolVersion \"1\"": (r) => (r.protocolVersion = "1"),
      "no protocolVersion": (r) => delete r.protocolVersion,
      "empty runtimeInstanceId": (r) => (r.runtimeInstanceId = ""),
      "no runtimeInstanceId": (r) => delete r.runtimeInstanceId,
      "no options": (r) => delete r.options,
      "unknown top-level key": (r) => (r.generation = 3),
      "unknown input key": (r) => (r.input.root = "/"),
      "unknown project key": (r) => (r.input.project.extra = 1),
      "unknown source key": (r) => (r.input.project.source.readOnly = false),
      "unknown placement key": (r) => (r.input.placement.cwd = "/"),
      "unknown option key": (r) => (r.options.networkHost = true),
      "git source": (r) =>
        (r.input.project.source = { kind: "git", url: "https://example.test/x.git", revision: "main" }),
      "unknown source kind": (r) => (r.input.project.source = { kind: "host-directory", path: dir }),
      "source outside every workspace root": (r) => (r.input.project.source.path = config.outside),
      "relative source path": (r) => (r.input.project.source.path = "ws"),
      "source path with ..": (r) => (r.input.project.source.path = `${dir}/../../outside`),
      "no input": (r) => delete r.input,
    };
    for (const [name, mutate] of Object.entries(mutations)) {
      const request = valid();
      mutate(request);
      await refused(["create", "--workspace-id", ws], `${JSON.stringify(request)}\n`).catch((e) => {
        throw new Error(`${name}: ${e.message}`);
      });
      await expectNothing();
    }
  });

  test("malformed stdin and malformed command lines", async () => {
    const good = `${JSON.stringify(valid())}\n`;
    await refused(["create", "--workspace-id", ws], "{not json\n");
    await refused(["create", "--workspace-id", ws], "");
    await refused(["create", "--workspace-id", ws], `${JSON.stringify(valid())}\n${JSON.stringify(valid())}\n`);
    await refused(["create"], good);
    await refused(["create", "--workspace-id"], good);
    await refused(["create", "--workspace-id", ws, "--extra"], good);
    await refused(["inspect", "--workspace-id", ws], `{"protocolVersion":${OTHER_VERSION},"runtimeInstanceId":"x","options":{}}\n`);
    await refused(["frobnicate", "--workspace-id", ws], good);
    await refused([], "");
    await expectNothing();
  });

  test("release-backing and merge-to-base are refused as not declared", async () => {
    for (const op of ["release-backing", "merge-to-base"]) {
      await refused([op, "--workspace-id", ws], lifecycleRequest(me));
    }
  });

  test("options are validated: a wrong socket or deployment starts nothing", async () => {
    const request = valid();
    request.options.socket = "/nonexistent/supervisor.sock";
    await refused(["create", "--workspace-id", ws], `${JSON.stringify(request)}\n`);
    const other = valid();
    other.options.deployment = "no-such-deployment";
    await refused(["create", "--workspace-id", ws], `${JSON.stringify(other)}\n`);
    await expectNothing();
  });
});

describe("ownership by runtimeInstanceId", () => {
  test("another daemon cannot create, destroy, pause, exec in or inspect a workspace it does not own", async () => {
    const { ws, dir } = await fresh("owned");
    await refused(["create", "--workspace-id", ws], lifecycleRequest(other, { input: createInput(ws, dir) }));
    await refused(["destroy", "--workspace-id", ws], lifecycleRequest(other));
    const pause = await run(["pause", "--workspace-id", ws], lifecycleRequest(other));
    assert.notEqual(pause.code, 0, `a foreign pause succeeded: ${pause.stdout}`);
    const seen = await inspect(ws, other);
    assert.equal(seen.inspection.status, "error", JSON.stringify(seen));
    assert.ok(seen.inspection.message.length > 0);
    const foreignExec = await execPipes(ws, other, ["sh", "-c", "touch /workspace/foreign"]);
    assert.notEqual(foreignExec.exit?.code, 0, show(foreignExec));
    const { existsSync } = await import("node:fs");
    assert.equal(existsSync(`${dir}/foreign`), false, "a foreign exec ran");
    // The owner still has it, untouched.
    assert.equal((await inspect(ws, me)).inspection.status, "ready");
    const works = await execPipes(ws, me, ["true"]);
    assert.equal(works.exit?.code, 0, show(works));
  });

  test("reconcile keeps what is listed, refuses foreign ownership, never touches another's", async () => {
    const { ws: mine } = await fresh("rec-mine");
    const { ws: theirs } = await fresh("rec-theirs", other);
    assert.deepEqual(await lifecycle("reconcile", undefined, me, { workspaceIds: [mine] }), {
      type: "ok",
      protocolVersion: PROTOCOL_VERSION,
    });
    assert.equal((await inspect(mine, me)).inspection.status, "ready", "reconcile removed a listed workspace");
    assert.equal((await inspect(theirs, other)).inspection.status, "ready", "reconcile removed another daemon's workspace");
    await refused(["reconcile"], lifecycleRequest(other, { workspaceIds: [mine] }));
    assert.equal((await inspect(mine, me)).inspection.status, "ready");
    assert.deepEqual(await lifecycle("reconcile", undefined, other, { workspaceIds: [theirs] }), {
      type: "ok",
      protocolVersion: PROTOCOL_VERSION,
    });
    assert.equal((await inspect(mine, me)).inspection.status, "ready");
  });

  test("reconcile may remove its own orphans, and only those", async () => {
    const { ws: kept } = await fresh("rec-kept");
    const { ws: orphan } = await fresh("rec-orphan");
    await lifecycle("reconcile", undefined, me, { workspaceIds: [kept] });
    assert.equal((await inspect(kept, me)).inspection.status, "ready");
    const status = (await inspect(orphan, me)).inspection.status;
    assert.ok(status === "missing" || status === "ready", `orphan is ${status}`);
  });

  test("a reconcile request is strict too", async () => {
    const request = JSON.parse(lifecycleRequest(me, { workspaceIds: [] }));
    request.dryRun = true;
    assert.equal(LifecycleRequest.safeParse(request).success, false);
    await refused(["reconcile"], `${JSON.stringify(request)}\n`);
  });
});
