// Git sources (project.source.kind "git"): cloned inside a new sandbox, through the sandbox's
// own network policy, into a workspace of its own (docs/paseo.md, "Git sources"). The server
// is testing/git-http-server.mjs in the test's internet: public.git, and private-repo.git that
// needs the deployment's registered git credential. Profiles (testing/conformance_test.cc):
// conformance-agent allows git.example:8180, conformance-nogit does not, conformance (the
// default) has no network at all. Needs the agent rootfs (git); skipped without it.
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { after, describe, test } from "node:test";

import {
  config,
  create,
  destroy,
  execPipes,
  inspect,
  lifecycle,
  lifecycleRequest,
  newInstanceId,
  newWorkspaceId,
  refused,
  run,
  show,
} from "./driver.mjs";
import { PROTOCOL_VERSION } from "./contract.mjs";

const agentProfile = process.env.PASEO_CONFORMANCE_AGENT_PROFILE ?? "";
const skip = agentProfile === "" ? "needs the agent rootfs (PASEO_AGENT_ROOTFS; testing/run-tests sets it)" : false;
const gitBase = process.env.PASEO_CONFORMANCE_GIT_BASE;
const token = process.env.PASEO_CONFORMANCE_GIT_TOKEN;
const me = newInstanceId();
const made = [];

function gitInput(ws, url, revision, extra = {}) {
  return {
    workspaceId: ws,
    project: { projectId: `project-${ws}`, source: { kind: "git", url, revision, ...extra } },
    placement: { kind: "existing" },
  };
}
const options = (profile, credentials = ["git"]) => ({ ...config.options, profile, credentials });
const createGit = (ws, input, profile = agentProfile, credentials) =>
  create(ws, me, input, options(profile, credentials));

function serverLog() {
  return readFileSync(process.env.PASEO_CONFORMANCE_GIT_LOG, "utf8")
    .split("\n")
    .filter(Boolean)
    .map((l) => JSON.parse(l));
}

// A refused create: a non-zero exit with the diagnostic, and no workspace left (inspect).
async function refusedCreate(ws, input, profile, credentials, pattern) {
  const r = await refused(
    ["create", "--workspace-id", ws],
    lifecycleRequest(me, { input, options: options(profile, credentials) }),
  );
  assert.match(r.stderr, pattern);
  assert.equal((await inspect(ws, me)).inspection.status, "missing", "a refused create leaves nothing");
  return r;
}

after(async () => {
  for (const ws of made) await destroy(ws, me).catch(() => {});
});

describe("git sources", { skip }, () => {
  test("a public repository is cloned at its revision, once; inspect sees it ready", async () => {
    const ws = newWorkspaceId("git-pub");
    const input = gitInput(ws, `${gitBase}/public.git`, "main");
    const first = await createGit(ws, input);
    made.push(ws);
    assert.equal(first.protocolVersion, PROTOCOL_VERSION);
    assert.equal(first.materializedFreshContent, true);
    assert.deepEqual(first.placement, { cwd: "/workspace" });
    const log = await execPipes(ws, me, ["git", "log", "--format=%s"], { env: { PATH: "/usr/bin:/bin" } });
    assert.equal(log.exit?.code, 0, show(log));
    assert.equal(log.stdout.toString(), "second\nfirst\n");
    // Idempotent: the same source again adopts it; another revision is another source.
    const again = await createGit(ws, input);
    assert.equal(again.materializedFreshContent, false);
    await refused(
      ["create", "--workspace-id", ws],
      lifecycleRequest(me, { input: gitInput(ws, `${gitBase}/public.git`, "v1"), options: options(agentProfile) }),
    );
    assert.equal((await inspect(ws, me)).inspection.status, "ready");
    // What the agent leaves is removed with the sandbox, a sticky directory included (the
    // privhelper has no CAP_FOWNER); the suite's leak check sees nothing left.
    const sticky = await execPipes(ws, me, ["sh", "-c",
      "mkdir -m 1777 sticky && echo x > sticky/f && mkdir -p a/b/c && chmod +t . && ln -s /etc etc-link"],
    { env: { PATH: "/usr/bin:/bin" } });
    assert.equal(sticky.exit?.code, 0, show(sticky));
    assert.deepEqual(await destroy(ws, me), { type: "ok", protocolVersion: PROTOCOL_VERSION });
    assert.equal((await inspect(ws, me)).inspection.status, "missing");
  });

  test("concurrent creates of one git workspace: one clones, the other waits for it", async () => {
    const ws = newWorkspaceId("git-conc");
    const input = gitInput(ws, `${gitBase}/slow-public.git`, "main");
    const [a, b] = await Promise.all([createGit(ws, input), createGit(ws, input)]);
    made.push(ws);
    assert.deepEqual([a.materializedFreshContent, b.materializedFreshContent].sort(), [false, true]);
    // Whoever answered second answered only once the clone was there.
    const log = await execPipes(ws, me, ["git", "log", "--format=%s"], { env: {} });
    assert.equal(log.stdout.toString(), "second\nfirst\n", show(log));
    await destroy(ws, me);
  });

  test("a create interrupted mid-clone is not adopted as ready: the next create clones again", async () => {
    const ws = newWorkspaceId("git-intr");
    const input = gitInput(ws, `${gitBase}/slow-public.git`, "main");
    // The daemon's runtime killed while the sandbox clones (each answer is 2 s late).
    const killed = await run(["create", "--workspace-id", ws],
      lifecycleRequest(me, { input, options: options(agentProfile) }), { timeoutMs: 1500 });
    assert.equal(killed.signal, "SIGKILL", JSON.stringify(killed));
    made.push(ws);
    const again = await createGit(ws, input);
    assert.equal(again.materializedFreshContent, true, "what was there was not the source");
    const log = await execPipes(ws, me, ["git", "log", "--format=%s"], { env: {} });
    assert.equal(log.stdout.toString(), "second\nfirst\n", show(log));
    await destroy(ws, me);
  });

  test("a tag and a subdirectory: checked out there, and placement.cwd is the subdirectory", async () => {
    const ws = newWorkspaceId("git-sub");
    const r = await createGit(ws, gitInput(ws, `${gitBase}/public.git`, "v1", { subdirectory: "pkg/app" }));
    made.push(ws);
    assert.deepEqual(r.placement, { cwd: "/workspace/pkg/app" });
    assert.deepEqual((await inspect(ws, me)).inspection.placement, { cwd: "/workspace/pkg/app" });
    const readme = await execPipes(ws, me, ["cat", "README", "pkg/app/main.txt"], { env: {} });
    assert.equal(readme.stdout.toString(), "conformance repo\napp\n", show(readme));
    await destroy(ws, me);
  });

  test("a private repository authenticates with the registered credential, which git keeps out of the clone", async () => {
    const ws = newWorkspaceId("git-priv");
    const before = serverLog().length;
    await createGit(ws, gitInput(ws, `${gitBase}/private-repo.git`, "main"));
    made.push(ws);
    const seen = serverLog().slice(before);
    assert.ok(seen.some((e) => e.repo === "private-repo.git" && e.authorized && e.presented === "credentials"),
      JSON.stringify(seen));
    const cfg = await execPipes(ws, me, ["git", "config", "--get", "remote.origin.url"], { env: {} });
    assert.equal(cfg.stdout.toString(), `${gitBase}/private-repo.git\n`);
    const grep = await execPipes(ws, me, ["grep", "-rl", token, "/workspace"], { env: {} });
    assert.equal(grep.stdout.toString(), "", "the token is nowhere in the workspace");
    await destroy(ws, me);
  });

  test("without the credential, a private repository is refused and nothing is left", async () => {
    const ws = newWorkspaceId("git-nocred");
    await refusedCreate(ws, gitInput(ws, `${gitBase}/private-repo.git`, "main"), agentProfile, [],
      /clone.*failed in the sandbox/s);
  });

  test("a host the profile does not allow is refused, naming it", async () => {
    const ws = newWorkspaceId("git-denied");
    const r = await refusedCreate(ws, gitInput(ws, `${gitBase}/public.git`, "main"),
      process.env.PASEO_CONFORMANCE_NOGIT_PROFILE, [], /does not allow git\.example on port 8180/);
    assert.match(r.stderr, /conformance-nogit/);
  });

  test("a profile without network is refused, saying so", async () => {
    const ws = newWorkspaceId("git-offline");
    await refusedCreate(ws, gitInput(ws, `${gitBase}/public.git`, "main"), config.options.profile, [],
      /has no network/);
  });

  test("a revision that does not exist, or one that would be an option, is refused", async () => {
    const ws = newWorkspaceId("git-badrev");
    await refusedCreate(ws, gitInput(ws, `${gitBase}/public.git`, "no-such-branch"), agentProfile, [],
      /checkout.*failed in the sandbox/s);
    await refusedCreate(ws, gitInput(ws, `${gitBase}/public.git`, "--upload-pack=touch /tmp/x"),
      agentProfile, [], /may not start with '-'/);
    await refusedCreate(ws, gitInput(ws, `${gitBase}/public.git`, "main", { subdirectory: "../.." }),
      agentProfile, [], /subdirectory/);
    await refusedCreate(ws, gitInput(ws, `${gitBase}/public.git`, "main", { subdirectory: "nope" }),
      agentProfile, [], /has no directory nope/);
    await refusedCreate(ws, gitInput(ws, "https://user:pw@git.example/public.git", "main"),
      agentProfile, [], /user name or password/);
  });
});
