// exec with a pty: fd 3 stays open for `resize` and `signal` frames; every accepted resize is
// acknowledged on fd 4 with its id, after started and before eof, within the daemon's 1000 ms
// (even one sent before started); signal frames may arrive before started and are held; an
// invalid frame changes nothing; closing fd 3 is only the end of control.
import assert from "node:assert/strict";
import { after, before, test } from "node:test";

import {
  Exec,
  assertKilledBy,
  RESIZE_ACK_BOUND_MS,
  create,
  createInput,
  destroy,
  makeWorkspaceDir,
  newInstanceId,
  newWorkspaceId,
  show,
  spawnEnvelope,
} from "./driver.mjs";
import { PROTOCOL_VERSION, OTHER_VERSION } from "./contract.mjs";

const me = newInstanceId();
const ws = newWorkspaceId("pty");

before(async () => {
  await create(ws, me, createInput(ws, makeWorkspaceDir(ws)));
});
after(async () => {
  await destroy(ws, me);
});

const pty = (argv, rows = 24, cols = 80, extra = {}) =>
  new Exec(ws, spawnEnvelope(me, argv, { stdio: { kind: "pty", rows, cols, term: "xterm-256color" }, purpose: { kind: "terminal" }, ...extra }));

function clean(r, code = 0) {
  assert.equal(r.violation, null, show(r));
  assert.equal(r.types[0], "started", show(r));
  assert.deepEqual(r.types.slice(-2), ["eof", "exit"], show(r));
  assert.deepEqual(r.exit, { type: "exit", protocolVersion: PROTOCOL_VERSION, code, signal: null }, show(r));
  assert.deepEqual(r.wrapper, { code, signal: null }, show(r));
}

async function acked(e, id, sentAt) {
  const ack = await e.waitFor((ev) => ev.type === "resized" && ev.id === id, 10_000);
  const at = e.eventTimes.find(([ev]) => ev === ack)[1];
  assert.ok(at - sentAt <= RESIZE_ACK_BOUND_MS, `resize ${id} acknowledged after ${at - sentAt} ms`);
}

test("the workload runs on a terminal of the requested size; output is raw on fd 1", async () => {
  const e = pty(["sh", "-c", "stty size; tty; echo err >&2"], 24, 80);
  const r = await e.done;
  clean(r);
  const out = r.stdout.toString();
  assert.match(out, /^24 80\r\n/, out);
  assert.match(out, /\/dev\/pts\/\d+\r\n/, out);
  assert.match(out, /err\r\n/, "stderr is the terminal too");
});

test("resize is acknowledged in time with its id and changes the terminal", async () => {
  const e = pty(["sh", "-c", "stty size; read a; stty size; read b; stty size"], 24, 80);
  await e.waitFor("started");
  await e.waitForStdout("24 80");
  let sent = Date.now();
  const first = e.resize(40, 120);
  await acked(e, first, sent);
  e.child.stdin.write("\n");
  await e.waitForStdout("40 120");
  sent = Date.now();
  const ids = [e.resize(30, 100), e.resize(31, 101), e.resize(32, 102)];
  for (const id of ids) await acked(e, id, sent);
  const order = e.decoder.events.filter((ev) => ev.type === "resized").map((ev) => ev.id);
  assert.deepEqual(order, [first, ...ids], "acknowledged in the order sent");
  e.child.stdin.write("\n");
  const r = await e.done;
  clean(r);
  assert.match(r.stdout.toString(), /32 102/);
});

test("a resize sent before started is acknowledged after started, in time", async () => {
  const e = pty(["sh", "-c", "read a; stty size"], 24, 80);
  const sent = Date.now();
  const id = e.resize(50, 132);
  await acked(e, id, sent);
  e.child.stdin.write("\n");
  const r = await e.done;
  clean(r);
  assert.match(r.stdout.toString(), /50 132/);
});

test("input typed after a resize is read after the acknowledgement", async () => {
  const e = pty(["sh", "-c", "read line; stty size; echo line=$line"], 24, 80);
  await e.waitFor("started");
  const id = e.resize(33, 99);
  await acked(e, id, Date.now() - 1);
  e.child.stdin.write("typed\n");
  const r = await e.done;
  clean(r);
  assert.match(r.stdout.toString(), /33 99\r\nline=typed/);
});

test("a signal frame after started reaches the workload and is mirrored", async () => {
  const e = pty(["sh", "-c", "echo ready; exec sleep 1000"]);
  await e.waitForStdout("ready");
  e.signalFrame("SIGTERM");
  const r = await e.done;
  assertKilledBy(r, "SIGTERM");
});

test("a signal frame sent before started is held and delivered", async () => {
  const e = pty(["sleep", "1000"]);
  e.signalFrame("SIGTERM");
  const r = await e.done;
  assertKilledBy(r, "SIGTERM");
});

test("SIGINT, SIGHUP frames after started", async () => {
  for (const signal of ["SIGINT", "SIGHUP"]) {
    const e = pty(["sh", "-c", `trap "echo caught; exit 5" ${signal.slice(3)}; echo ready; while :; do sleep 0.05; done`]);
    await e.waitFor("started");
    await e.waitForStdout("ready");
    e.signalFrame(signal);
    const r = await e.done;
    clean(r, 5);
    assert.match(r.stdout.toString(), /caught/);
  }
});

test("invalid control frames change nothing: no ack, no resize, no signal", async () => {
  const e = pty(["sh", "-c", "read a; stty size"], 24, 80);
  await e.waitFor("started");
  for (const bad of [
    `{"type":"resize","protocolVersion":${PROTOCOL_VERSION},"id":90,"rows":0,"cols":80}\n`,
    `{"type":"resize","protocolVersion":${OTHER_VERSION},"id":91,"rows":30,"cols":80}\n`,
    `{"type":"resize","protocolVersion":${PROTOCOL_VERSION},"id":92,"rows":30,"cols":80,"x":1}\n`,
    `{"type":"signal","protocolVersion":${PROTOCOL_VERSION},"signal":"SIGKILL","pid":1}\n`,
  ]) {
    e.sendControl(bad);
  }
  await new Promise((resolve) => setTimeout(resolve, 1500));
  assert.ok(!e.decoder.events.some((ev) => ev.type === "resized"), JSON.stringify(e.decoder.events));
  if (!e.ended) e.child.stdin.write("\n");
  const r = await e.done;
  assert.equal(r.violation, null, show(r));
  if (r.exit) {
    assert.equal(r.exit.signal, null, `an invalid signal frame was delivered: ${show(r)}`);
    assert.match(r.stdout.toString(), /24 80/, "an invalid resize changed the terminal");
  } else {
    assert.ok(r.error, `neither exit nor error: ${show(r)}`);
  }
});

test("closing fd 3 ends control only; the workload runs on", async () => {
  const e = pty(["sh", "-c", "sleep 1; echo finished"]);
  await e.waitFor("started");
  e.closeControl();
  const r = await e.done;
  clean(r);
  assert.match(r.stdout.toString(), /finished/);
});

test("exit codes are mirrored over a pty", async () => {
  clean(await pty(["sh", "-c", "exit 7"]).done, 7);
});
