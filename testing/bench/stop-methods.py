#!/usr/bin/env python3
"""Measures the ways to stop a runsc sandbox whose init is the shim's idle `init`
(docs/decisions.md, "how a sandbox is stopped"). Needs root.

  testing/bench/stop-methods.py SHIM [--samples N] [--runsc PATH] [--platform P]

--runsc: the runsc to drive (default: the project's pinned 20240729, installer/runsc-pin);
--platform: ptrace (default) or systrap.

SHIM: the built paseo-sandbox-shim (bazel-bin/sandbox/paseo-sandbox-shim). Runs in its own
network namespace (runsc's control sockets stay private) on a work dir under /tmp, with a
busybox rootfs, runsc flags as the privhelper's (--platform=ptrace --network=none), and one
`sleep` started by `runsc exec` in each sandbox besides its init. For every method it prints,
per sample, how long until the sentry (the sandbox's host process) has exited -- nothing can
run in the sandbox any more -- and until the whole teardown (runsc state gone) is done; once
with this process as a child subreaper that reaps at once (as the privhelper does after
decision 39), once leaving orphans to the machine's init.
"""
import ctypes
import json
import os
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

RUNSC = "/usr/local/lib/paseo-sandbox/runsc/20240729/runsc"
PLATFORM = "ptrace"
PR_SET_CHILD_SUBREAPER = 36


def unshare_net():
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.unshare(0x40000000) != 0:  # CLONE_NEWNET
        sys.exit("unshare(CLONE_NEWNET) failed")
    subprocess.run(["ip", "link", "set", "lo", "up"], check=False)


def set_subreaper(on):
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(PR_SET_CHILD_SUBREAPER, 1 if on else 0, 0, 0, 0)


class Reaper:
    """Reaps every child that is not a runsc we wait for ourselves, at once (SIGCHLD)."""

    def __init__(self):
        self.mine = set()
        self.lock = threading.Lock()
        self.stop = False
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.thread.start()

    def run(self):
        while not self.stop:
            try:
                # __WALL | WNOHANG on anything but our own runsc children would race
                # subprocess; use P_ALL waitid with WNOWAIT to peek first.
                info = os.waitid(os.P_ALL, 0, os.WEXITED | os.WNOHANG | os.WNOWAIT)
            except ChildProcessError:
                info = None
            if info is None:
                time.sleep(0.002)
                continue
            with self.lock:
                if info.si_pid in self.mine:
                    time.sleep(0.002)
                    continue
            try:
                os.waitpid(info.si_pid, os.WNOHANG)
            except ChildProcessError:
                pass


def runsc(root, *args, check=True, reaper=None):
    argv = [RUNSC, "--root=" + root, "--platform=" + PLATFORM, "--network=none", *args]
    # Files, not pipes: the sandbox `runsc create` starts inherits its stdio and keeps it open.
    with tempfile.TemporaryFile() as out_f, tempfile.TemporaryFile() as err_f:
        p = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=out_f, stderr=err_f)
        if reaper:
            with reaper.lock:
                reaper.mine.add(p.pid)
        p.wait()
        if reaper:
            with reaper.lock:
                reaper.mine.discard(p.pid)
        out_f.seek(0)
        err_f.seek(0)
        out, err = out_f.read(), err_f.read()
    if check and p.returncode != 0:
        raise RuntimeError(f"runsc {' '.join(args)}: {err.decode()}")
    return p.returncode, out.decode(), err.decode()


def write_bundle(work, cid, rootfs, shim):
    bundle = os.path.join(work, "bundles", cid)
    os.makedirs(bundle)
    mounts = [
        {"destination": "/proc", "type": "proc", "source": "proc", "options": ["nosuid", "noexec", "nodev"]},
        {"destination": "/dev", "type": "tmpfs", "source": "tmpfs", "options": ["nosuid", "strictatime", "mode=755", "size=65536k"]},
        {"destination": "/tmp", "type": "tmpfs", "source": "tmpfs", "options": ["nosuid", "nodev", "mode=1777", "size=67108864"]},
        {"destination": "/.paseo/shim", "type": "bind", "source": shim, "options": ["bind", "ro", "nosuid", "nodev"]},
    ]
    caps = {k: [] for k in ("bounding", "effective", "inheritable", "permitted", "ambient")}
    user = {"uid": 4242, "gid": 4242, "additionalGids": [4242]}
    config = {
        "ociVersion": "1.0.2",
        "process": {"terminal": False, "user": user, "args": ["/.paseo/shim", "init"],
                    "env": ["PATH=/bin"], "cwd": "/", "capabilities": caps, "noNewPrivileges": True},
        "root": {"path": rootfs, "readonly": True},
        "hostname": "sandbox",
        "mounts": mounts,
        "linux": {"namespaces": [{"type": t} for t in ("pid", "ipc", "uts", "mount", "network")],
                  "cgroupsPath": "/paseo-stop-bench/" + cid},
    }
    with open(os.path.join(bundle, "config.json"), "w") as f:
        json.dump(config, f)
    proc = dict(config["process"], args=["/bin/sleep", "100000"])
    with open(os.path.join(bundle, "sleep.json"), "w") as f:
        json.dump(proc, f)
    return bundle


def sentry_pid(root, cid):
    with open(os.path.join(root, f"{cid}_sandbox:{cid}.state")) as f:
        return json.load(f)["sandbox"]["pid"]


def wait_fd(fd, timeout=30):
    select.select([fd], [], [], timeout)


def start_sandbox(work, root, rootfs, shim, cid, reaper):
    bundle = write_bundle(work, cid, rootfs, shim)
    runsc(root, "create", "--bundle", bundle, cid, reaper=reaper)
    runsc(root, "start", cid, reaper=reaper)
    # One running command besides init, as an agent's shell would be.
    ex = subprocess.Popen([RUNSC, "--root=" + root, "--platform=" + PLATFORM, "--network=none",
                           "exec", "--process", os.path.join(bundle, "sleep.json"), cid],
                          stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                          stderr=subprocess.DEVNULL)
    if reaper:
        with reaper.lock:
            reaper.mine.add(ex.pid)
    time.sleep(0.3)  # the exec is running
    pid = sentry_pid(root, cid)
    return bundle, ex, os.pidfd_open(pid)


def stop(method, root, cid, pidfd, reaper):
    """Returns (ms until the sentry exited, ms until the teardown finished)."""
    t0 = time.monotonic()
    dead = None
    if method == "kill-all+delete-force":
        runsc(root, "kill", "--all", cid, "KILL", check=False, reaper=reaper)
        runsc(root, "delete", "--force", cid, reaper=reaper)
    elif method == "delete-force":
        runsc(root, "delete", "--force", cid, reaper=reaper)
    elif method == "kill-init+delete":
        # SIGKILL to the container's init only: its pid namespace ends, so every other process
        # in it dies too, and the sandbox ends as a container whose init exited does.
        runsc(root, "kill", cid, "KILL", reaper=reaper)
        wait_fd(pidfd)
        dead = time.monotonic()
        runsc(root, "delete", "--force", cid, reaper=reaper)
    elif method == "sigkill-sentry+delete":
        signal.pidfd_send_signal(pidfd, signal.SIGKILL)
        wait_fd(pidfd)
        dead = time.monotonic()
        runsc(root, "delete", "--force", cid, reaper=reaper)
    else:
        raise ValueError(method)
    end = time.monotonic()
    if dead is None:
        wait_fd(pidfd, 0)
        dead = end
    return (dead - t0) * 1000, (end - t0) * 1000


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    shim = os.path.abspath(sys.argv[1])
    samples = int(sys.argv[sys.argv.index("--samples") + 1]) if "--samples" in sys.argv else 5
    global RUNSC, PLATFORM
    if "--runsc" in sys.argv:
        RUNSC = sys.argv[sys.argv.index("--runsc") + 1]
    if "--platform" in sys.argv:
        PLATFORM = sys.argv[sys.argv.index("--platform") + 1]
    unshare_net()
    work = tempfile.mkdtemp(prefix="paseo-stop-bench-")
    os.chmod(work, 0o755)
    root = os.path.join(work, "runsc")
    os.makedirs(root)
    os.makedirs(os.path.join(work, "bundles"))
    rootfs = os.path.join(work, "rootfs")
    os.makedirs(os.path.join(rootfs, "bin"))
    for d in ("proc", "dev", "tmp", "sys", ".paseo"):
        os.makedirs(os.path.join(rootfs, d))
    open(os.path.join(rootfs, ".paseo", "shim"), "w").close()
    shutil.copy("/bin/busybox", os.path.join(rootfs, "bin", "busybox"))
    for tool in ("sleep", "true", "sh"):
        os.symlink("busybox", os.path.join(rootfs, "bin", tool))
    methods = ["kill-all+delete-force", "delete-force", "kill-init+delete",
               "sigkill-sentry+delete"]
    results = {}
    seq = 0
    try:
        for subreaper in (True, False):
            set_subreaper(subreaper)
            reaper = Reaper() if subreaper else None
            for i in range(samples):
                for m in methods:
                    seq += 1
                    cid = f"stop-{os.getpid()}-{seq}"
                    bundle, ex, pidfd = start_sandbox(work, root, rootfs, shim, cid, reaper)
                    dead_ms, total_ms = stop(m, root, cid, pidfd, reaper)
                    ex.wait()
                    os.close(pidfd)
                    shutil.rmtree(bundle)
                    results.setdefault((subreaper, m), []).append((dead_ms, total_ms))
            if reaper:
                reaper.stop = True
                reaper.thread.join()
    finally:
        for cid in os.listdir(root):
            if cid.endswith(".state"):
                runsc(root, "delete", "--force", cid.split("_")[0], check=False)
        shutil.rmtree(work, ignore_errors=True)
        # runsc removes each container's cgroup; the common parent is ours to remove.
        for hierarchy in os.listdir("/sys/fs/cgroup"):
            try:
                os.rmdir(os.path.join("/sys/fs/cgroup", hierarchy, "paseo-stop-bench"))
            except OSError:
                pass
    print(f"{'reaping':<22} {'method':<24} {'dead ms (median)':>17} {'done ms (median)':>17}")
    for (subreaper, m), v in results.items():
        dead = sorted(x[0] for x in v)[len(v) // 2]
        done = sorted(x[1] for x in v)[len(v) // 2]
        who = "subreaper, at once" if subreaper else "machine's init"
        print(f"{who:<22} {m:<24} {dead:>17.0f} {done:>17.0f}")


if __name__ == "__main__":
    main()
