// Paseo's command workspace runtime contract, version 1 or 2, as this suite understands it:
// written from Paseo's published contract (packages/workspace-runtime-contract at commit 5f2747b
// of getpaseo/paseo: README.md, src/index.ts, examples/v1.json; version 2 from the same files at
// rkendel1/paseo-feltdb 4bb9a9b5, examples/v2.json), not from our implementation. Which version
// the suite checks is PASEO_CONFORMANCE_PROTOCOL (1 unless it says 2); the runtime is then run
// with `--protocol-version 2`, as a v2 daemon's configured command would.
// Every object is strict (z.strictObject): an unknown key is an error at every nesting level,
// exactly as Paseo's own parser treats what a runtime prints.
import { z } from "zod";

export const PROTOCOL_VERSION = Number(process.env.PASEO_CONFORMANCE_PROTOCOL ?? "1");
if (PROTOCOL_VERSION !== 1 && PROTOCOL_VERSION !== 2) {
  throw new Error(`PASEO_CONFORMANCE_PROTOCOL must be 1 or 2, not ${process.env.PASEO_CONFORMANCE_PROTOCOL}`);
}
// The version this suite does not speak: each refuses the other's messages.
export const OTHER_VERSION = 3 - PROTOCOL_VERSION;

const version = z.literal(PROTOCOL_VERSION);
const env = z.record(z.string(), z.string());
// Options are the runtime's own trusted configuration: any JSON value per key.
const options = z.record(z.string(), z.json());

export const ProjectSource = z.discriminatedUnion("kind", [
  z.strictObject({ kind: z.literal("directory"), path: z.string() }),
  z.strictObject({
    kind: z.literal("git"),
    url: z.string(),
    revision: z.string(),
    subdirectory: z.string().optional(),
  }),
]);

const WorktreeSource = z.discriminatedUnion("kind", [
  z.strictObject({ kind: z.literal("branch-off"), baseBranch: z.string(), branchName: z.string() }),
  z.strictObject({ kind: z.literal("checkout-branch"), branchName: z.string() }),
  z.strictObject({
    kind: z.enum(["checkout-change-request", "checkout-github-pr"]),
    forge: z.string().optional(),
    changeRequestNumber: z.number().optional(),
    githubPrNumber: z.number().optional(),
    headRef: z.string(),
    headRepositoryOwner: z.string().optional(),
    baseRefName: z.string(),
    checkoutRefs: z
      .array(z.strictObject({ remoteName: z.string().optional(), remoteRef: z.string() }))
      .optional(),
    localBranchName: z.string().optional(),
    pushRemoteUrl: z.string().optional(),
    trackOriginHead: z.boolean().optional(),
  }),
]);

const relativeCwd = z.string().optional();
export const PlacementIntent = z.discriminatedUnion("kind", [
  z.strictObject({ kind: z.literal("existing"), relativeCwd }),
  z.strictObject({
    kind: z.literal("branch"),
    branchName: z.string(),
    baseRef: z.string(),
    relativeCwd,
    worktreeSlug: z.string().optional(),
  }),
  z.strictObject({
    kind: z.literal("checkout"),
    ref: z.string(),
    relativeCwd,
    worktreeSlug: z.string().optional(),
  }),
  z.strictObject({
    kind: z.literal("resolved-worktree"),
    source: WorktreeSource,
    worktreeSlug: z.string(),
    relativeCwd,
  }),
]);

export const CreateInput = z.strictObject({
  workspaceId: z.string(),
  project: z.strictObject({ projectId: z.string(), source: ProjectSource }),
  placement: PlacementIntent,
  purpose: z.literal("discovery").optional(),
  markFirstAgentBranchAutoName: z.boolean().optional(),
  seedPaseoConfigFrom: z.string().optional(),
});

export const LifecycleRequest = z.strictObject({
  protocolVersion: version,
  runtimeInstanceId: z.string().min(1),
  input: CreateInput.optional(),
  options,
  workspaceIds: z.array(z.string()).optional(),
});

export const State = z.strictObject({
  workspaceId: z.string(),
  lifecycle: z.enum(["ready", "paused"]),
  lifecycleEnvironment: env.optional(),
});

// v2 lets a placement name a hostVisiblePath (the daemon then runs git there, on the host); the
// schema accepts it, and the suite checks that a sandbox runtime never sends one.
export const Placement =
  PROTOCOL_VERSION === 2
    ? z.strictObject({ cwd: z.string(), hostVisiblePath: z.string().optional() })
    : z.strictObject({ cwd: z.string() });

export const Inspection = z.discriminatedUnion("status", [
  z.strictObject({ status: z.literal("missing") }),
  z.strictObject({ status: z.literal("paused"), state: State, placement: Placement }),
  z.strictObject({ status: z.literal("ready"), state: State, placement: Placement }),
  z.strictObject({ status: z.literal("error"), message: z.string() }),
]);

export const LifecycleResponse = z.discriminatedUnion("type", [
  z.strictObject({
    type: z.literal("state"),
    protocolVersion: version,
    state: State,
    placement: Placement,
    materializedFreshContent: z.boolean().optional(),
  }),
  z.strictObject({ type: z.literal("inspection"), protocolVersion: version, inspection: Inspection }),
  z.strictObject({ type: z.literal("ok"), protocolVersion: version }),
]);

const describeV1 = {
  protocolVersion: version,
  modes: z.array(z.enum(["pipes", "pty"])),
  reconcile: z.boolean().optional().default(false),
};
export const DescribeResponse =
  PROTOCOL_VERSION === 2
    ? z.strictObject({
        ...describeV1,
        requirements: z.strictObject({ daemonAuthentication: z.boolean() }),
      })
    : z.strictObject(describeV1);

const purposeKinds = [
  "agent",
  "terminal",
  "git",
  "discovery",
  "workspace-helper",
  "workspace-script",
  "setup",
  "archive",
];
export const ProcessPurpose = z.discriminatedUnion(
  "kind",
  purposeKinds.map((kind) => z.strictObject({ kind: z.literal(kind) })),
);

export const Stdio = z.discriminatedUnion("kind", [
  z.strictObject({ kind: z.literal("pipes") }),
  z.strictObject({
    kind: z.literal("pty"),
    rows: z.number().int().positive(),
    cols: z.number().int().positive(),
    term: z.string().optional(),
  }),
]);

export const SpawnEnvelope = z.strictObject({
  type: z.literal("spawn"),
  protocolVersion: version,
  runtimeInstanceId: z.string().min(1),
  argv: z.array(z.string()).min(1),
  cwd: z.string().optional(),
  env,
  purpose: ProcessPurpose,
  options,
  execId: z.string().min(1),
  stdio: Stdio,
});

export const Control = z.discriminatedUnion("type", [
  SpawnEnvelope,
  z.strictObject({
    type: z.literal("resize"),
    protocolVersion: version,
    id: z.number().int().nonnegative(),
    rows: z.number().int().positive(),
    cols: z.number().int().positive(),
  }),
  z.strictObject({ type: z.literal("signal"), protocolVersion: version, signal: z.string() }),
]);

export const ProcessEvent = z.discriminatedUnion("type", [
  z.strictObject({ type: z.literal("started"), protocolVersion: version }),
  z.strictObject({ type: z.literal("eof"), protocolVersion: version }),
  z.strictObject({
    type: z.literal("resized"),
    protocolVersion: version,
    id: z.number().int().nonnegative(),
  }),
  z.strictObject({
    type: z.literal("exit"),
    protocolVersion: version,
    code: z.number().int().nullable(),
    signal: z.string().nullable(),
  }),
  z.strictObject({ type: z.literal("error"), protocolVersion: version, message: z.string() }),
]);

// One newline-terminated JSON frame, validated before it is written (what Paseo sends is always
// valid; tests that send invalid frames build their bytes by hand).
export function frame(schema, value) {
  return `${JSON.stringify(schema.parse(value))}\n`;
}

// Parses one whole stdout of a lifecycle command: exactly one JSON value (a trailing newline
// allowed), matching `schema`. Throws with the text otherwise.
export function parseSingle(schema, text) {
  let value;
  try {
    value = JSON.parse(text);
  } catch (error) {
    throw new Error(`stdout is not one JSON value (${error.message}): ${JSON.stringify(text)}`);
  }
  return schema.parse(value);
}

// The strict fd 4 decoder. Framing: newline-terminated UTF-8 JSON lines, chunks may split a
// frame anywhere; an empty line, malformed JSON, a schema mismatch or a partial frame at the
// end are fatal. Order: started -> (resized, pty only, after started and before eof)* -> eof ->
// exit, then nothing. An `error` event is accepted at any point before exit: it fails the
// process (Paseo cleans up and rejects), so it ends the conversation too -- nothing may follow
// it. Every violation throws a ProtocolViolation naming the rule.
export class ProtocolViolation extends Error {}

export class EventDecoder {
  constructor(mode) {
    if (mode !== "pipes" && mode !== "pty") throw new Error(`unknown mode ${mode}`);
    this.mode = mode;
    this.phase = "waiting-started";
    this.pending = Buffer.alloc(0);
    this.events = [];
  }

  // Feeds bytes; returns the complete events they finished, in order.
  push(chunk) {
    this.pending = Buffer.concat([this.pending, Buffer.from(chunk)]);
    const out = [];
    for (let nl = this.pending.indexOf(0x0a); nl >= 0; nl = this.pending.indexOf(0x0a)) {
      const line = this.pending.subarray(0, nl);
      this.pending = this.pending.subarray(nl + 1);
      const event = this.#parse(line);
      this.#advance(event);
      this.events.push(event);
      out.push(event);
    }
    return out;
  }

  // The fd closed: a partial frame or an unfinished lifecycle is fatal.
  finish() {
    if (this.pending.length > 0) {
      throw new ProtocolViolation(
        `fd 4 ended inside a frame (no newline): ${JSON.stringify(this.pending.toString())}`,
      );
    }
    if (this.phase !== "exit" && this.phase !== "error") {
      throw new ProtocolViolation(
        `fd 4 ended in phase ${this.phase}: the ${this.mode} lifecycle started -> eof -> exit is incomplete`,
      );
    }
  }

  #parse(line) {
    if (line.length === 0) throw new ProtocolViolation("empty fd 4 frame");
    let value;
    try {
      value = JSON.parse(new TextDecoder("utf-8", { fatal: true }).decode(line));
    } catch (error) {
      throw new ProtocolViolation(`malformed fd 4 frame ${JSON.stringify(line.toString())}: ${error.message}`);
    }
    const parsed = ProcessEvent.safeParse(value);
    if (!parsed.success) {
      throw new ProtocolViolation(
        `fd 4 frame violates the schema ${JSON.stringify(value)}: ${parsed.error.message}`,
      );
    }
    return parsed.data;
  }

  #advance(event) {
    const { phase, mode } = this;
    if (phase === "exit" || phase === "error") {
      throw new ProtocolViolation(`${event.type} after ${phase}`);
    }
    switch (event.type) {
      case "started":
        if (phase !== "waiting-started") throw new ProtocolViolation("duplicate started");
        this.phase = "started";
        return;
      case "resized":
        if (mode === "pipes") throw new ProtocolViolation("resized on a pipes exec");
        if (phase === "waiting-started") throw new ProtocolViolation("resized before started");
        if (phase === "eof") throw new ProtocolViolation("resized after eof");
        return;
      case "eof":
        if (phase === "waiting-started") throw new ProtocolViolation("eof before started");
        if (phase === "eof") throw new ProtocolViolation("duplicate eof");
        this.phase = "eof";
        return;
      case "exit":
        if (phase === "waiting-started") throw new ProtocolViolation("exit before started");
        if (phase === "started") throw new ProtocolViolation("exit before eof");
        this.phase = "exit";
        return;
      case "error":
        this.phase = "error";
        return;
    }
  }
}
