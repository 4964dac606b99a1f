// inspect is authoritative after either side restarts: after the broker is SIGKILLed (the
// privhelper starts a new one) and after the whole service is killed and started again (the
// harness's service keeps sandboxes across restarts: onRestart "keep"), the workspace is still
// ready, runs commands, and keeps its ownership. An exec running across a broker restart ends
// complete, with every byte.
import assert from "node:assert/strict";
import { after, before, test } from "node:test";

import {
  Exec,
  create,
  createInput,
  destroy,
  execPipes,
  inspect,
  makeWorkspaceDir,
  newInstanceId,
  newWorkspaceId,
  serviceControl,
  show,
  spawnEnvelope,
} from "./driver.mjs";

const me = newInstanceId();
const other = newInstanceId();
const ws = newWorkspaceId("restart");

before(async () => {
  await create(ws, me, createInput(ws, makeWorkspaceDir(ws)));
  const r = await execPipes(ws, me, ["sh", "-c", "echo before > /tmp/state"]);
  assert.equal(r.exit?.code, 0, show(r));
});
after(async () => {
  await destroy(ws, me);
  assert.equal((await inspect(ws, me)).inspection.status, "missing");
});

async function stillMine() {
  const seen = await inspect(ws, me);
  assert.equal(seen.inspection.status, "ready", JSON.stringify(seen));
  assert.equal(seen.inspection.state.workspaceId, ws);
  assert.deepEqual(seen.inspection.placement, { cwd: "/workspace" });
  assert.equal((await inspect(ws, other)).inspection.status, "error", "ownership survives");
  // The same sandbox: its /tmp still holds what was written before.
  const r = await execPipes(ws, me, ["cat", "/tmp/state"]);
  assert.equal(r.violation, null, show(r));
  assert.equal(r.stdout.toString(), "before\n", show(r));
}

test("after a broker restart", async () => {
  await serviceControl("restart-broker");
  await stillMine();
});

test("an exec running across a broker restart ends complete", async () => {
  const e = new Exec(ws, spawnEnvelope(me, ["sh", "-c", "i=0; while [ $i -lt 40 ]; do echo line$i; i=$((i+1)); sleep 0.1; done"]), { deadlineMs: 120_000 });
  await e.waitFor("started");
  await e.waitForStdout("line5\n");
  await serviceControl("restart-broker");
  const r = await e.done;
  assert.equal(r.violation, null, show(r));
  assert.deepEqual(r.types, ["started", "eof", "exit"], show(r));
  assert.equal(r.exit.code, 0, show(r));
  const want = Array.from({ length: 40 }, (_, i) => `line${i}\n`).join("");
  assert.equal(r.stdout.toString(), want, "every byte once, in order");
});

test("after a full service restart", async () => {
  await serviceControl("restart-service");
  await stillMine();
  const created = await create(ws, me, createInput(ws, makeWorkspaceDir(ws)));
  assert.equal(created.materializedFreshContent, false, "create after a restart adopts");
});
