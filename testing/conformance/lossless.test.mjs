// Lossless pipes: a workload writes 256 MiB (the decimal numbers 1, 2, 3, ... one per line, cut
// at 256 MiB, so a dropped, repeated or reordered piece changes the digest) to a reader that
// sleeps between reads. The reader gets every byte in order (sha256 of the whole stream) and
// the workload takes as long as the reader instead of anything being dropped -- the profile's
// output window (outputBufferBytes, set small by the harness) is far below 256 MiB. Then the
// same with the broker SIGKILLed twice while it runs.
import assert from "node:assert/strict";
import { createHash } from "node:crypto";
import { after, before, test } from "node:test";

import {
  Exec,
  create,
  createInput,
  destroy,
  makeWorkspaceDir,
  newInstanceId,
  newWorkspaceId,
  serviceControl,
  show,
  spawnEnvelope,
} from "./driver.mjs";

const TOTAL = 256 * 1024 * 1024;
const LAST = 32_000_000; // 1..LAST is more than 256 MiB of lines
const me = newInstanceId();
const ws = newWorkspaceId("lossless");
const writer = [
  "sh",
  "-c",
  `s=$(date +%s); seq 1 ${LAST} | head -c ${TOTAL}; e=$(date +%s); echo elapsed=$((e-s)) >&2`,
];
let expected;
let unthrottled;

// The digest of the first TOTAL bytes of "1\n2\n3\n...".
function expectedDigest() {
  const hash = createHash("sha256");
  let left = TOTAL;
  let n = 1;
  while (left > 0) {
    const parts = [];
    for (let i = 0; i < 100_000; ++i, ++n) parts.push(n);
    let chunk = Buffer.from(`${parts.join("\n")}\n`);
    if (chunk.length > left) chunk = chunk.subarray(0, left);
    hash.update(chunk);
    left -= chunk.length;
  }
  return hash.digest("hex");
}

before(async () => {
  expected = expectedDigest();
  await create(ws, me, createInput(ws, makeWorkspaceDir(ws)));
});
after(async () => {
  await destroy(ws, me);
});

// One exec of the writer; the reader keeps at most `rate` bytes/s (null: as fast as it can) by
// pausing the stream between reads; `killAt` lists fractions of the stream at which the broker
// is SIGKILLed.
async function transfer({ rate = null, killAt = [] }) {
  const e = new Exec(ws, spawnEnvelope(me, writer, { purpose: { kind: "agent" } }), { stdin: "", collectStdout: false, deadlineMs: 550_000 });
  const stdout = e.child.stdout;
  const hash = createHash("sha256");
  const kills = [];
  const pending = killAt.map((f) => Math.floor(TOTAL * f));
  let bytes = 0;
  let sleeps = 0;
  const began = Date.now();
  stdout.on("data", (chunk) => {
    hash.update(chunk);
    bytes += chunk.length;
    while (pending.length > 0 && bytes >= pending[0]) {
      pending.shift();
      kills.push(serviceControl("restart-broker"));
    }
    if (rate === null) return;
    const wait = began + (bytes / rate) * 1000 - Date.now();
    if (wait > 0) {
      sleeps += 1;
      stdout.pause();
      setTimeout(() => stdout.resume(), wait);
    }
  });
  const ended = new Promise((resolve) => stdout.once("close", resolve));
  const r = await e.done;
  await ended;
  const readerMs = Date.now() - began;
  await Promise.all(kills);
  const stderr = r.stderr.toString();
  const elapsed = Number(/elapsed=(\d+)/.exec(stderr)?.[1] ?? NaN);
  return { r, bytes, digest: hash.digest("hex"), readerMs, elapsed, sleeps, killsDone: kills.length };
}

function complete(t) {
  assert.equal(t.r.violation, null, show(t.r));
  assert.deepEqual(t.r.types, ["started", "eof", "exit"], show(t.r));
  assert.equal(t.r.exit.code, 0, show(t.r));
  assert.equal(t.bytes, TOTAL, `got ${t.bytes} of ${TOTAL} bytes`);
  assert.equal(t.digest, expected, "the bytes differ from what was written (dropped, repeated or reordered)");
  assert.ok(Number.isFinite(t.elapsed), `no elapsed time on stderr: ${t.r.stderr}`);
}

function report(name, t) {
  console.log(
    `# lossless ${name}: reader ${(t.readerMs / 1000).toFixed(1)} s, writer ${t.elapsed} s, ${t.sleeps} sleeps, ${t.killsDone} broker kills`,
  );
}

test("256 MiB to a reader as fast as it can: every byte, in order", { timeout: 600_000 }, async () => {
  unthrottled = await transfer({});
  report("unthrottled", unthrottled);
  complete(unthrottled);
});

// The slow reader takes at least 2.5 times the unthrottled run, and at least 20 s.
function slowRate() {
  assert.ok(unthrottled, "the unthrottled run is the baseline");
  const seconds = Math.max(20, (2.5 * unthrottled.readerMs) / 1000);
  return TOTAL / seconds;
}

// The writer waited for the reader: it ran about as long as the reader read (minus what the
// window and the pipes hold), and clearly longer than when nobody was slow.
function writerWaited(t) {
  assert.ok(t.sleeps > 100, `the reader slept only ${t.sleeps} times`);
  assert.ok(t.elapsed >= 0.7 * (t.readerMs / 1000) - 1, `writer took ${t.elapsed} s, reader ${t.readerMs} ms: bytes were not held back`);
  assert.ok(t.elapsed > unthrottled.elapsed, `writer took ${t.elapsed} s, ${unthrottled.elapsed} s unthrottled`);
}

test("256 MiB to a reader that sleeps between reads: every byte, and the writer waits", { timeout: 600_000 }, async () => {
  const t = await transfer({ rate: slowRate() });
  report("slow reader", t);
  complete(t);
  writerWaited(t);
});

test("the same with the broker SIGKILLed twice during it", { timeout: 600_000 }, async () => {
  const t = await transfer({ rate: slowRate(), killAt: [0.3, 0.6] });
  report("slow reader, broker killed twice", t);
  assert.equal(t.killsDone, 2);
  complete(t);
  writerWaited(t);
});
