#!/usr/bin/env python3
"""Measures runsc knobs for an agent's work (docs/performance.md, "workload"): the same steps in
a raw runsc sandbox over the agent rootfs (read-only) and a workspace bind, once per knob
setting, alternating, medians per step. Needs root.

  testing/bench/runsc-knobs.py RUNSC AGENT_ROOTFS REPO [--platform P] [--rounds N]

AGENT_ROOTFS: a rootfs/build-rootfs --profile agent output's rootfs/; REPO: a git repository
cloned into the workspace first (this project). Settings, each on top of the privhelper's own
flags (--directfs=false where runsc has it): the default; --overlay2=none; --overlay2=
root:memory; --file-access-mounts=exclusive (not safe for a workspace the host also edits:
shown for what it would buy); --directfs=true (never used: shown for what the gofer costs).
"""
import os
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
quirks = __import__("runsc-quirks")

STEPS = {
    "spawns": "i=0; while [ $i -lt 300 ]; do /bin/true; i=$((i+1)); done",
    "git_status": "git -C /workspace/clone status --porcelain >/dev/null",
    "ripgrep": "rg -l 'namespace paseo' /workspace/clone >/dev/null",
    "tar": "tar cf - -C /workspace clone | wc -c >/dev/null",
    "node_start": "for i in 1 2 3 4 5; do node -e 0; done",
}

SETTINGS = [
    ("default", []),
    ("overlay2=none", ["--overlay2=none"]),
    ("overlay2=root:memory", ["--overlay2=root:memory"]),
    ("file-access-mounts=exclusive", ["--file-access-mounts=exclusive"]),
    ("directfs=true (reference)", ["--directfs=true"]),
]


def main():
    if len(sys.argv) < 4 or os.geteuid() != 0:
        sys.exit(__doc__)
    runsc, rootfs, repo = sys.argv[1:4]
    platform = sys.argv[sys.argv.index("--platform") + 1] if "--platform" in sys.argv else "ptrace"
    rounds = int(sys.argv[sys.argv.index("--rounds") + 1]) if "--rounds" in sys.argv else 3
    quirks.stop_methods.unshare_net()
    q = quirks.Quirks(runsc, platform, rootfs)
    subprocess.run(["git", "clone", "-q", "--no-local", repo, os.path.join(q.ws, "clone")], check=True)
    subprocess.run(["chown", "-R", "4242:4242", q.ws], check=True)
    has_directfs = "  -directfs\n" in subprocess.run([runsc, "flags"], capture_output=True, text=True).stderr + \
        subprocess.run([runsc, "flags"], capture_output=True, text=True).stdout
    base_flags = ["--directfs=false"] if has_directfs else []
    times = {}
    try:
        for r in range(rounds):
            for name, extra in SETTINGS[r % len(SETTINGS):] + SETTINGS[:r % len(SETTINGS)]:
                if not has_directfs and "directfs" in name:
                    continue
                flags = base_flags + extra
                cid, b = q.bundle(["/bin/sleep", "100000"], rootfs=rootfs, workspace=True,
                                  env=["PATH=/usr/local/bin:/usr/bin:/bin", "HOME=/tmp"])
                argv = lambda *a: [runsc, "--root=" + q.root, "--platform=" + platform, "--network=none", *flags, *a]
                # A file, not a pipe: `run --detach` hands its stdio to the sandbox's init.
                with tempfile.TemporaryFile() as err:
                    p = subprocess.run(argv("run", "--detach", "--bundle", b, cid), stdin=subprocess.DEVNULL,
                                       stdout=subprocess.DEVNULL, stderr=err, timeout=60)
                    err.seek(0)
                    if p.returncode != 0:
                        times.setdefault(name, {})["error"] = err.read().decode()[-200:]
                        continue
                for step, cmd in STEPS.items():
                    t0 = time.monotonic()
                    e = subprocess.run(argv("exec", "--user", "4242:4242", "--env", "HOME=/tmp", "--env",
                                            "PATH=/usr/local/bin:/usr/bin:/bin", cid, "/bin/sh", "-c", cmd),
                                       stdin=subprocess.DEVNULL, capture_output=True, timeout=300)
                    ms = (time.monotonic() - t0) * 1000
                    if e.returncode != 0:
                        times.setdefault(name, {})["error"] = f"{step}: {e.stderr.decode()[-200:]}"
                    times.setdefault(name, {}).setdefault(step, []).append(ms)
                subprocess.run([runsc, "--root=" + q.root, "delete", "--force", cid], capture_output=True)
    finally:
        q.cleanup()
    print(f"{'setting':<32}" + "".join(f"{s:>12}" for s in STEPS) + f"{'total':>10}")
    for name, _ in SETTINGS:
        if name not in times:
            continue
        row = times[name]
        if "error" in row:
            print(f"{name:<32} error: {row['error']}")
            continue
        med = {s: sorted(v)[len(v) // 2] for s, v in row.items()}
        print(f"{name:<32}" + "".join(f"{med[s]:>12.0f}" for s in STEPS) + f"{sum(med.values()):>10.0f}")
    print("ms per step (median of each setting's rounds); each step is one `runsc exec` of sh -c.")


if __name__ == "__main__":
    main()
