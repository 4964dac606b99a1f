// The suite's own instruments, checked before they judge the runtime: the schemas are strict at
// every level and the fd 4 decoder refuses every ordering and framing the contract forbids.
import assert from "node:assert/strict";
import test from "node:test";

import {
  OTHER_VERSION,
  PROTOCOL_VERSION,
  Control,
  DescribeResponse,
  EventDecoder,
  LifecycleRequest,
  LifecycleResponse,
  ProcessEvent,
  ProtocolViolation,
  frame,
} from "./contract.mjs";

const V = PROTOCOL_VERSION;
const started = `{"type":"started","protocolVersion":${V}}\n`;
const eof = `{"type":"eof","protocolVersion":${V}}\n`;
const resized = `{"type":"resized","protocolVersion":${V},"id":1}\n`;
const exit = `{"type":"exit","protocolVersion":${V},"code":0,"signal":null}\n`;
const error = `{"type":"error","protocolVersion":${V},"message":"boom"}\n`;

function decode(mode, bytes, chunk = bytes.length) {
  const d = new EventDecoder(mode);
  for (let i = 0; i < bytes.length; i += chunk) d.push(Buffer.from(bytes).subarray(i, i + chunk));
  d.finish();
  return d.events.map((e) => e.type);
}

test("decoder accepts the complete lifecycles, in chunks of any size", () => {
  for (const size of [1, 3, 7, 1000]) {
    assert.deepEqual(decode("pipes", started + eof + exit, size), ["started", "eof", "exit"]);
    assert.deepEqual(decode("pty", started + resized + resized + eof + exit, size), [
      "started",
      "resized",
      "resized",
      "eof",
      "exit",
    ]);
    assert.deepEqual(decode("pipes", error, size), ["error"]);
    assert.deepEqual(decode("pipes", started + error, size), ["started", "error"]);
  }
});

test("decoder refuses every forbidden order and framing", () => {
  const cases = [
    ["pipes", eof, /eof before started/],
    ["pipes", exit, /exit before started/],
    ["pipes", started + exit, /exit before eof/],
    ["pipes", started + started, /duplicate started/],
    ["pipes", started + eof + eof, /duplicate eof/],
    ["pipes", started + eof + exit + exit, /exit after exit/],
    ["pipes", started + eof + exit + eof, /eof after exit/],
    ["pipes", started + resized, /resized on a pipes exec/],
    ["pty", resized, /resized before started/],
    ["pty", started + eof + resized, /resized after eof/],
    ["pty", started + eof + exit + resized, /resized after exit/],
    ["pipes", started + error + eof, /eof after error/],
    ["pipes", started + "\n", /empty fd 4 frame/],
    ["pipes", "{nope}\n", /malformed/],
    ["pipes", `{"type":"started","protocolVersion":${OTHER_VERSION}}\n`, /schema/],
    ["pipes", `{"type":"started","protocolVersion":${V},"extra":1}\n`, /schema/],
    ["pipes", `{"type":"exit","protocolVersion":${V},"code":0}\n`, /schema/],
    ["pipes", started + eof + exit.slice(0, -1), /ended inside a frame/],
    ["pipes", started + eof, /incomplete/],
    ["pipes", "", /incomplete/],
  ];
  for (const [mode, bytes, pattern] of cases) {
    assert.throws(() => decode(mode, bytes), (e) => e instanceof ProtocolViolation && pattern.test(e.message), JSON.stringify(bytes));
  }
});

test(`schemas are strict at every nesting level and pin protocol version ${PROTOCOL_VERSION}`, () => {
  const request = {
    protocolVersion: V,
    runtimeInstanceId: "i",
    options: {},
    input: {
      workspaceId: "w",
      project: { projectId: "p", source: { kind: "directory", path: "/x" } },
      placement: { kind: "existing" },
    },
  };
  LifecycleRequest.parse(request);
  for (const mutate of [
    (r) => (r.extra = 1),
    (r) => (r.input.extra = 1),
    (r) => (r.input.project.extra = 1),
    (r) => (r.input.project.source.extra = 1),
    (r) => (r.input.placement.extra = 1),
    (r) => (r.protocolVersion = OTHER_VERSION),
    (r) => (r.runtimeInstanceId = ""),
  ]) {
    const copy = structuredClone(request);
    mutate(copy);
    assert.equal(LifecycleRequest.safeParse(copy).success, false, JSON.stringify(copy));
  }
  assert.equal(LifecycleResponse.safeParse({ type: "ok", protocolVersion: V, extra: 1 }).success, false);
  assert.equal(
    LifecycleResponse.safeParse({
      type: "state",
      protocolVersion: V,
      state: { workspaceId: "w", lifecycle: "ready", root: "/x" },
      placement: { cwd: "/workspace" },
    }).success,
    false,
  );
  assert.equal(DescribeResponse.safeParse({ protocolVersion: V, modes: ["pipes"], x: 1 }).success, false);
  assert.equal(ProcessEvent.safeParse({ type: "eof", protocolVersion: V, x: 1 }).success, false);
  assert.equal(Control.safeParse({ type: "resize", protocolVersion: V, id: 1, rows: 0, cols: 1 }).success, false);
  assert.equal(frame(ProcessEvent, { type: "eof", protocolVersion: V }), eof);
});

test(`describe's shape is version ${PROTOCOL_VERSION}'s`, () => {
  const v1 = { protocolVersion: V, modes: ["pipes"], reconcile: true };
  const v2 = { ...v1, requirements: { daemonAuthentication: false } };
  // v2 requires `requirements` (strict); v1 has no such key.
  assert.equal(DescribeResponse.safeParse(v1).success, V === 1);
  assert.equal(DescribeResponse.safeParse(v2).success, V === 2);
  assert.equal(
    DescribeResponse.safeParse({ ...v2, requirements: { daemonAuthentication: false, x: 1 } }).success,
    false,
  );
});
