// Real agent CLIs driven through the runtime exactly as Paseo's daemon drives them: the agent
// rootfs's `claude` and `codex`, each exec'd over pipes with the daemon's env merge (the
// envelope's env plus inspect's lifecycleEnvironment), against a scripted fake model API
// (testing/fake-model-api) served over HTTPS in the test's internet under the real API names,
// trusted through the test's CA (/opt/test-ca/ca.pem, a read-only tool root). The script asks
// for one shell command that writes proof.txt and commits it; the final answer comes only once
// the command's result was sent back. Needs the agent rootfs; skipped without it.
import assert from "node:assert/strict";
import { execFileSync, spawn } from "node:child_process";
import { readFileSync, statSync } from "node:fs";
import { after, before, describe, test } from "node:test";

import {
  config,
  create,
  createInput,
  destroy,
  execPipes,
  inspect,
  makeWorkspaceDir,
  newInstanceId,
  newWorkspaceId,
  show,
} from "./driver.mjs";

const agentProfile = process.env.PASEO_CONFORMANCE_AGENT_PROFILE ?? "";
const skip = agentProfile === "" ? "needs the agent rootfs (PASEO_AGENT_ROOTFS; testing/run-tests sets it)" : false;
const ca = process.env.PASEO_CONFORMANCE_CA;
const credentials = process.env.PASEO_CONFORMANCE_CREDENTIALS;
const me = newInstanceId();
const ws = newWorkspaceId("agent");
let dir;
let lifecycleEnvironment;

function modelLog() {
  return readFileSync(process.env.PASEO_CONFORMANCE_MODEL_LOG, "utf8")
    .split("\n")
    .filter(Boolean)
    .map((l) => JSON.parse(l));
}

// What the daemon sends: its env for the agent, with inspect's lifecycleEnvironment merged over.
function agentEnv(extra) {
  return { HOME: "/home/agent", LANG: "C.UTF-8", ...extra, ...lifecycleEnvironment };
}

function hostGit(...args) {
  return execFileSync("git", ["-c", `safe.directory=${dir}`, "-C", dir, ...args], { encoding: "utf8" });
}

// Runs one agent, then checks what only a real tool call could have done.
async function runAgent(name, api, argv, env) {
  const before = modelLog().filter((e) => e.dir === "reply").length;
  const started = Date.now();
  const r = await execPipes(ws, me, argv, { env: agentEnv(env), purpose: { kind: "agent" } });
  const ms = Date.now() - started;
  const replies = modelLog().filter((e) => e.dir === "reply").slice(before);
  const main = replies.filter((e) => e.kind === "main" && e.api === api);
  // For the closing note (docs/paseo.md): wall time and model requests of a real run.
  console.log(`# agent ${name}: ${ms} ms wall, ${main.length} model requests, ${replies.length} replies in all`);
  assert.equal(r.violation, null, show(r));
  assert.deepEqual(r.types, ["started", "eof", "exit"], show(r));
  assert.equal(r.exit.code, 0, show(r));
  assert.deepEqual(r.wrapper, { code: 0, signal: null }, "the exit is mirrored");
  // The command ran: the file and the commit are on the host, the agent's (run-as uid 4242).
  assert.equal(readFileSync(`${dir}/proof.txt`, "utf8"), "made-by-the-agent\n", show(r));
  assert.equal(statSync(`${dir}/proof.txt`).uid, 4242);
  assert.equal(hostGit("log", "-1", "--format=%s").trim(), "agent proof");
  const head = hostGit("rev-parse", "HEAD").trim();
  assert.equal(statSync(`${dir}/.git/objects/${head.slice(0, 2)}/${head.slice(2)}`).uid, 4242);
  // The scripted model was asked for the command, then got its result back, then answered.
  assert.ok(main.length >= 2, JSON.stringify(replies));
  assert.ok(main.some((e) => e.stop !== "end_turn"), "a tool call was asked for");
  assert.equal(main.at(-1).stop, "end_turn", JSON.stringify(main));
  return r;
}

// The workspace back to one commit and no proof, for the next agent.
function reset() {
  hostGit("reset", "-q", "--hard", "base");
  execFileSync("rm", ["-f", `${dir}/proof.txt`]);
}

before(async () => {
  if (skip) return;
  dir = makeWorkspaceDir(ws);
  await create(ws, me, createInput(ws, dir), {
    ...config.options,
    profile: agentProfile,
    credentials: ["claude", "codex"],
  });
  lifecycleEnvironment = (await inspect(ws, me)).inspection.state.lifecycleEnvironment;
  // The repository the agent commits to, made inside the sandbox as Paseo's git execs would.
  const init = await execPipes(ws, me, ["sh", "-c",
    "git init -q -b main && git -c user.email=p@example -c user.name=p commit -q --allow-empty -m base && git tag base"],
  { env: agentEnv({}) });
  assert.equal(init.exit?.code, 0, show(init));
});
after(async () => {
  if (!skip) await destroy(ws, me).catch(() => {});
});

describe("agents through the runtime", { skip }, () => {
  test("node is on the PATH Paseo's credential scripts get, and reads and refreshes ~/.claude", async () => {
    assert.match(lifecycleEnvironment.PATH, /\/usr\/local\/bin/);
    const read = await execPipes(ws, me, ["node", "-e",
      "const f=require('os').homedir()+'/.claude/.credentials.json';" +
      "console.log(JSON.parse(require('fs').readFileSync(f)).claudeAiOauth.accessToken);" +
      "require('fs').writeFileSync(require('os').homedir()+'/.claude/refreshed', 'new-token')"],
    { env: agentEnv({}) });
    assert.equal(read.exit?.code, 0, show(read));
    assert.equal(read.stdout.toString(), "conformance-access\n");
    // Read-write where the profile says so: the refresh is on the host, the agent's.
    assert.equal(readFileSync(`${credentials}/cred-claude/refreshed`, "utf8"), "new-token");
    assert.equal(statSync(`${credentials}/cred-claude/refreshed`).uid, 4242);
  });

  test("claude -p runs its Bash tool, writes a file and commits it; stream-json arrives whole", async () => {
    reset();
    const r = await runAgent("claude", "anthropic", [
      "claude", "-p", "Make the proof commit.", "--output-format", "stream-json", "--verbose",
      "--dangerously-skip-permissions",
    ], {
      ANTHROPIC_API_KEY: "sk-ant-conformance",
      NODE_EXTRA_CA_CERTS: ca,
      CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC: "1",
      DISABLE_TELEMETRY: "1",
      DISABLE_AUTOUPDATER: "1",
    });
    // fd 1 is stream-json: every line one JSON value, ending in the success result.
    const lines = r.stdout.toString().split("\n").filter(Boolean).map((l) => JSON.parse(l));
    const result = lines.at(-1);
    assert.equal(result.type, "result", JSON.stringify(result));
    assert.equal(result.subtype, "success");
    assert.match(result.result, /DONE: proof committed/);
    assert.ok(lines.some((l) => l.type === "assistant" &&
      l.message.content.some((c) => c.type === "tool_use" && c.name === "Bash")), "a Bash tool call");
  });

  // The CLI without -i (issue 26): codex reads stdin when it is not a terminal, and the CLI's
  // own stdin here is a pipe that stays open; the process's stdin must be at end-of-file.
  test("paseo-sandbox run without -i: codex exec ends, its stdin at end-of-file", async () => {
    const cliDir = makeWorkspaceDir(newWorkspaceId("cli-codex"));
    const args = ["--socket", config.options.socket, "run", "--deployment", config.options.deployment,
      "--profile", agentProfile, "--workspace", `${cliDir}:/workspace:rw`,
      "--env", "OPENAI_API_KEY=sk-conformance", "--env", `CODEX_CA_CERTIFICATE=${ca}`, "--",
      "codex", "exec", "--json", "--dangerously-bypass-approvals-and-sandbox", "--skip-git-repo-check",
      "--ephemeral", "-c", "analytics.enabled=false", "--disable", "plugins", "-m", "gpt-5.5",
      "Make the proof commit."];
    const child = spawn(process.env.PASEO_CONFORMANCE_CLI, args, { stdio: ["pipe", "pipe", "pipe"] });
    let out = "";
    let err = "";
    child.stdout.on("data", (d) => (out += d));
    child.stderr.on("data", (d) => (err += d));
    const timer = setTimeout(() => child.kill("SIGKILL"), 90_000);
    const [code, signal] = await new Promise((resolve) => child.once("close", (c, s) => resolve([c, s])));
    clearTimeout(timer);
    child.stdin.destroy();
    assert.equal(signal, null, `run never ended (killed at the deadline): ${err}`);
    assert.equal(code, 0, err);
    assert.match(out, /DONE: proof committed/);
  });

  test("codex exec runs its shell tool, writes a file and commits it", async () => {
    reset();
    const r = await runAgent("codex", "openai", [
      "codex", "exec", "--json", "--dangerously-bypass-approvals-and-sandbox", "--skip-git-repo-check",
      "--ephemeral", "-c", "analytics.enabled=false", "--disable", "plugins", "-m", "gpt-5.5",
      "Make the proof commit.",
    ], {
      OPENAI_API_KEY: "sk-conformance",
      CODEX_CA_CERTIFICATE: ca,
    });
    const events = r.stdout.toString().split("\n").filter(Boolean).map((l) => JSON.parse(l));
    assert.ok(events.some((e) => JSON.stringify(e).includes("DONE: proof committed")), r.stdout.toString());
  });
});
