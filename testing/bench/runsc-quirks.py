#!/usr/bin/env python3
"""Measures, on one runsc, each runsc behaviour docs/decisions.md records as a quirk ("runsc
quirks, measured on both releases", decision 49), and prints one line per quirk. Needs root.

  testing/bench/runsc-quirks.py RUNSC [--platform ptrace|systrap] [--agent-rootfs DIR]
                                [--only probe,...]

Runs in network namespaces of its own (nothing reaches the host's network; the one link is a
veth between two namespaces it made, with documentation addresses, and carries no traffic),
on a work dir under /tmp, with a busybox rootfs and a static statx probe compiled here. With
--agent-rootfs (a rootfs/build-rootfs --profile agent output's rootfs/), also what coreutils
does there, preload and all. Everything it starts is deleted at the end.
"""
import ctypes
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
stop_methods = __import__("stop-methods")

STATX_PROBE = r"""
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>
int main(int argc, char** argv) {
  struct statx b;
  long r = syscall(SYS_statx, AT_FDCWD, argc > 1 ? argv[1] : "/", AT_NO_AUTOMOUNT, STATX_BASIC_STATS, &b);
  printf("statx(AT_NO_AUTOMOUNT): %s\n", r == 0 ? "ok" : strerror(errno));
  return 0;
}
"""

TTY_CHECK = ("if (exec 3</dev/tty) 2>/dev/null; then echo ctty=yes; else echo ctty=no; fi; "
             "stty size >/dev/null 2>&1 && echo stty=yes || echo stty=no; "
             "[ -t 0 ] && echo isatty=yes || echo isatty=no; sleep 1")


class Quirks:
    def __init__(self, runsc, platform, agent_rootfs):
        self.runsc_path, self.platform, self.agent_rootfs = runsc, platform, agent_rootfs
        # The privhelper's fixed flags: --directfs=false where this runsc has the flag.
        flags = subprocess.run([runsc, "flags"], capture_output=True, text=True)
        self.fixed = ["--directfs=false"] if "\n  -directfs\n" in flags.stdout + flags.stderr else []
        self.work = tempfile.mkdtemp(prefix="paseo-quirks-")
        os.chmod(self.work, 0o755)
        self.root = os.path.join(self.work, "runsc")
        os.makedirs(self.root)
        self.rootfs = os.path.join(self.work, "rootfs")
        for d in ("bin", "proc", "dev", "tmp", "sys", "etc", "workspace", "home/u"):
            os.makedirs(os.path.join(self.rootfs, d))
        shutil.copy("/bin/busybox", os.path.join(self.rootfs, "bin", "busybox"))
        applets = subprocess.run(["/bin/busybox", "--list"], capture_output=True, text=True).stdout.split()
        for a in applets:
            if a != "busybox":
                os.symlink("busybox", os.path.join(self.rootfs, "bin", a))
        with open(os.path.join(self.rootfs, "etc", "passwd"), "w") as f:
            f.write("root:x:0:0:root:/root:/bin/sh\nu:x:4242:4242:u:/home/u:/bin/sh\n")
        src = os.path.join(self.work, "statx.c")
        with open(src, "w") as f:
            f.write(STATX_PROBE)
        subprocess.run(["gcc", "-static", "-O2", "-o", os.path.join(self.rootfs, "bin", "statx-probe"), src],
                       check=True)
        self.ws = os.path.join(self.work, "ws")
        os.makedirs(self.ws)
        with open(os.path.join(self.ws, "kept"), "w") as f:
            f.write("workspace-bytes\n")
        os.chmod(self.ws, 0o777)
        self.seq = 0
        self.results = []

    def argv(self, *args, network="none"):
        return [self.runsc_path, "--root=" + self.root, "--platform=" + self.platform,
                "--network=" + network, *self.fixed, *args]

    def run(self, *args, network="none", timeout=60, pre=None):
        with tempfile.TemporaryFile() as out_f, tempfile.TemporaryFile() as err_f:
            t0 = time.monotonic()
            try:
                p = subprocess.run(self.argv(*args, network=network), stdin=subprocess.DEVNULL,
                                   stdout=out_f, stderr=err_f, timeout=timeout, preexec_fn=pre)
                rc = p.returncode
            except subprocess.TimeoutExpired:
                rc = "timeout"
            took = (time.monotonic() - t0) * 1000
            out_f.seek(0)
            err_f.seek(0)
            return rc, out_f.read().decode(errors="replace"), err_f.read().decode(errors="replace"), took

    def bundle(self, args, rootfs=None, netns=None, workspace=False, terminal=False, env=None,
               extra_bind=(None, None)):
        self.seq += 1
        cid = f"q{os.getpid()}-{self.seq}"
        b = os.path.join(self.work, cid)
        os.makedirs(b)
        mounts = [
            {"destination": "/proc", "type": "proc", "source": "proc"},
            {"destination": "/dev", "type": "tmpfs", "source": "tmpfs", "options": ["nosuid", "mode=755"]},
            {"destination": "/tmp", "type": "tmpfs", "source": "tmpfs", "options": ["nosuid", "mode=1777"]},
        ]
        if workspace:
            mounts.append({"destination": "/workspace", "type": "bind", "source": self.ws,
                           "options": ["rbind", "rw"]})
        if extra_bind[0]:
            mounts.append({"destination": extra_bind[1], "type": "bind", "source": extra_bind[0],
                           "options": ["bind", "ro"]})
        ns = [{"type": t} for t in ("pid", "ipc", "uts", "mount")]
        ns.append({"type": "network", "path": netns} if netns else {"type": "network"})
        caps = {k: [] for k in ("bounding", "effective", "inheritable", "permitted", "ambient")}
        config = {
            "ociVersion": "1.0.2",
            "process": {"terminal": terminal, "user": {"uid": 4242, "gid": 4242}, "args": args,
                        "env": env or ["PATH=/bin:/usr/bin"], "cwd": "/", "capabilities": caps,
                        "noNewPrivileges": True},
            "root": {"path": rootfs or self.rootfs, "readonly": True},
            "hostname": "q",
            "mounts": mounts,
            "linux": {"namespaces": ns, "cgroupsPath": "/paseo-quirks/" + cid},
        }
        with open(os.path.join(b, "config.json"), "w") as f:
            json.dump(config, f)
        return cid, b

    def process_json(self, cid, args, env, terminal=False):
        path = os.path.join(self.work, cid, f"p{self.seq}-{len(args)}.json")
        caps = {k: [] for k in ("bounding", "effective", "inheritable", "permitted", "ambient")}
        with open(path, "w") as f:
            json.dump({"terminal": terminal, "user": {"uid": 4242, "gid": 4242}, "args": args,
                       "env": env, "cwd": "/", "capabilities": caps, "noNewPrivileges": True}, f)
        return path

    def sandbox(self, **kw):
        cid, b = self.bundle(["/bin/sleep", "100000"], **kw)
        network = "sandbox" if kw.get("netns") else "none"
        rc, out, err, _ = self.run("run", "--detach", "--bundle", b, cid, network=network)
        if rc != 0:
            raise RuntimeError(f"runsc run: {rc} {err.strip()[-300:]}")
        return cid

    def delete(self, cid):
        self.run("resume", cid)
        self.run("delete", "--force", cid)

    def note(self, quirk, result):
        self.results.append((quirk, result))
        print(f"{quirk}: {result}", flush=True)

    # --- the quirks ---------------------------------------------------------------------------
    def statx(self):
        cid = self.sandbox()
        rc, out, err, _ = self.run("exec", cid, "/bin/statx-probe", "/bin")
        self.note("statx AT_NO_AUTOMOUNT (busybox rootfs, static probe)", (out or err).strip().splitlines()[-1])
        self.delete(cid)
        if self.agent_rootfs:
            # As built (paseo-gvisor-compat.so in /etc/ld.so.preload), then with an empty file bound over
            # /etc/ld.so.preload: what coreutils does without the workaround.
            empty = os.path.join(self.work, "empty-preload")
            open(empty, "w").close()
            for label, preload in (("with the preload", None), ("without the preload", empty)):
                cid = self.sandbox(rootfs=self.agent_rootfs, extra_bind=(preload, "/etc/ld.so.preload"))
                for what, cmd in (("ls -l", "ls -l /usr/bin/sh /bin 2>&1 | cut -c1-60"),
                                  ("stat", "stat -c %F /bin /usr/bin/sh 2>&1"),
                                  ("cp -a", "cp -a /etc/hostname /tmp/x 2>&1 && echo copied")):
                    rc, out, err, _ = self.run("exec", cid, "/bin/sh", "-c", cmd)
                    self.note(f"agent rootfs {label}, {what} of symlinks",
                              " / ".join((out + err).strip().splitlines()) or f"rc {rc}")
                self.delete(cid)
        # The host's root in `runsc do` (the report: "Bad file descriptor" for ls -l).
        rc, out, err, _ = self.run("do", "/bin/sh", "-c", "ls -l /usr/bin/sh /bin 2>&1 | cut -c1-70")
        self.note("runsc do (host root), ls -l of symlinks", " / ".join((out + err).strip().splitlines()) or f"rc {rc}")

    def console(self):
        cid = self.sandbox()
        sock_path = os.path.join(self.work, "console.sock")
        srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        srv.bind(sock_path)
        srv.listen(1)
        srv.settimeout(20)
        # Without --detach runsc ignores the console socket (measured on 20221219).
        proc = subprocess.Popen(self.argv("exec", "--detach", "--console-socket", sock_path, cid,
                                          "/bin/sh", "-c", TTY_CHECK),
                                stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        text = ""
        try:
            conn, _ = srv.accept()
            _, fds, _, _ = socket.recv_fds(conn, 1024, 1)
            master = fds[0]
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline and "isatty=" not in text:
                try:
                    chunk = os.read(master, 4096)
                except OSError:
                    break
                if not chunk:
                    break
                text += chunk.decode(errors="replace")
            os.close(master)
            conn.close()
        except (socket.timeout, OSError) as e:
            text = f"no console fd: {e}"
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        if text.startswith("no console fd"):
            text += ": " + proc.stderr.read().decode(errors="replace").strip()[-200:]
        srv.close()
        self.note("exec --console-socket: the pty as controlling terminal",
                  " ".join(text.split()) or proc.stderr.read().decode()[-200:])
        self.delete(cid)

    def home(self):
        cid = self.sandbox()
        rc, out, err, _ = self.run("exec", "--process", self.process_json(cid, ["/bin/env"], ["PATH=/bin"]), cid)
        homes = [l for l in out.splitlines() if l.startswith("HOME=")]
        self.note("exec of an env without HOME", f"the process sees {homes[0]}" if homes else "no HOME added")
        self.delete(cid)

    def pause(self):
        cid = self.sandbox()
        rc, out, err, took = self.run("pause", cid)
        self.note("pause", f"rc {rc}, {took:.0f} ms")
        rc, out, err, _ = self.run("exec", cid, "/bin/true")
        self.note("exec while paused", "refused: " + err.strip().splitlines()[-1][-90:] if rc != 0 else "runs")
        rc, out, err, _ = self.run("kill", cid, "15")
        self.note("kill while paused", f"refused: {err.strip().splitlines()[-1][-90:]}" if rc != 0 else "accepted")
        rc, out, err, took = self.run("delete", "--force", cid, timeout=60)
        panic = "panic" in err
        self.note("delete --force while paused",
                  f"rc {rc}, {took:.0f} ms{', panics' if panic else ', no panic'}")
        self.delete(cid)

    def delete_timing(self):
        times = []
        for _ in range(3):
            cid = self.sandbox()
            rc, _, err, took = self.run("delete", "--force", cid)
            times.append(took)
        times.sort()
        self.note("delete --force of a live sandbox (orphans to the machine's init)",
                  f"median {times[1]:.0f} ms ({', '.join(f'{t:.0f}' for t in times)})")

    def init_reaping(self):
        # Does the container's init (pid 1 inside) inherit orphans, as on Linux? busybox sleep
        # never reaps, so an orphan stays a zombie under it.
        cid = self.sandbox()
        self.run("exec", cid, "/bin/sh", "-c", "sleep 0.2 & exit 0")
        time.sleep(0.8)
        rc, out, err, _ = self.run("exec", cid, "/bin/sh", "-c", "ps -o pid,ppid,stat,comm")
        zombies = [l for l in out.splitlines() if " Z " in f" {l} " or l.split()[2:3] == ["Z"]]
        self.note("an orphan under a non-reaping init", f"{len(zombies)} zombie(s) left: " +
                  "; ".join(" ".join(z.split()) for z in zombies) if zombies else "reaped (no zombie)")
        self.delete(cid)

    def network(self):
        # Two namespaces of our own: `outer` holds one veth end, `inner` (the sandbox's) the other.
        holder = subprocess.Popen(["unshare", "-n", "sleep", "300"])
        time.sleep(0.2)
        inner = f"/proc/{holder.pid}/ns/net"
        try:
            subprocess.run(["ip", "link", "add", "qa", "type", "veth", "peer", "name", "qb"], check=True)
            subprocess.run(["ip", "link", "set", "qb", "netns", str(holder.pid)], check=True)
            subprocess.run(["nsenter", "--net=" + inner, "ip", "addr", "add", "192.0.2.2/30", "dev", "qb"], check=True)
            subprocess.run(["nsenter", "--net=" + inner, "ip", "link", "set", "qb", "up"], check=True)
            cid, b = self.bundle(["/bin/sleep", "100000"], netns=inner)
            rc, out, err, _ = self.run("create", "--bundle", b, cid, network="sandbox")
            if rc == 0:
                rc, out, err, _ = self.run("start", cid, network="sandbox")
            refused = rc != 0 and "root network namespace" in err
            self.note("--network=sandbox in a non-root netns, /proc/sys/net as the kernel shows it",
                      "refused: cannot run with network enabled in root network namespace" if refused
                      else ("runs" if rc == 0 else f"fails otherwise: {err.strip()[-120:]}"))
            self.run("delete", "--force", cid)
            libc = ctypes.CDLL(None, use_errno=True)

            def hide():
                libc.unshare(0x00020000)  # CLONE_NEWNS
                libc.mount(None, b"/", None, 0x4000 | 0x80000, None)  # MS_REC | MS_SLAVE
                libc.mount(b"tmpfs", b"/proc/sys/net", b"tmpfs", 1, b"size=4k,mode=0555")
            hide = hide if refused else None
            rc, out, err, _ = self.run("create", "--bundle", b, cid, network="sandbox", pre=hide)
            if rc != 0:
                self.note("create", f"fails: {err.strip()[-160:]}")
                return
            # An address added between create and start: seen only if the interfaces are copied
            # at start.
            subprocess.run(["nsenter", "--net=" + inner, "ip", "addr", "add", "198.51.100.2/30", "dev", "qb"], check=True)
            rc, out, err, _ = self.run("start", cid, network="sandbox", pre=hide)
            if rc != 0:
                self.note("start", f"fails: {err.strip()[-160:]}")
            rc, out, err, _ = self.run("exec", cid, "/bin/ip", "-4", "addr")
            at_create = "192.0.2.2" in out
            at_start = "198.51.100.2" in out
            self.note("when the sandbox's interfaces are copied",
                      "at start" if at_start else ("at create" if at_create else f"neither: {out.strip()[-160:]}"))
            self.run("delete", "--force", cid)
        finally:
            holder.kill()
            holder.wait()
            subprocess.run(["ip", "link", "del", "qa"], stderr=subprocess.DEVNULL)

    def checkpoint(self):
        rc, _, _, cold = self.run_cold()
        cid = self.sandbox(workspace=True)
        image = os.path.join(self.work, "image")
        os.makedirs(image)
        rc, out, err, took = self.run("checkpoint", "--image-path=" + image, cid, timeout=120)
        if rc != 0:
            self.note("checkpoint of a sandbox with a workspace mount",
                      f"{'hangs (killed after 120 s)' if rc == 'timeout' else 'fails: ' + err.strip()[-160:]}")
            self.delete(cid)
            return
        size = sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(image) for f in fs)
        self.note("checkpoint of a sandbox with a workspace mount", f"{took:.0f} ms, image {size >> 10} KiB")
        self.run("delete", "--force", cid)
        cid2, b2 = self.bundle(["/bin/sleep", "100000"], workspace=True)
        rc, out, err, took = self.run("restore", "--image-path=" + image, "--bundle", b2, "--detach", cid2, timeout=120)
        if rc != 0:
            self.note("restore", f"fails: {err.strip()[-200:]}")
            self.delete(cid2)
            return
        rc, out, err, _ = self.run("exec", cid2, "/bin/cat", "/workspace/kept")
        self.note("restore of that image", f"{took:.0f} ms (a cold run --detach here: {cold:.0f} ms); "
                  f"the workspace afterwards: {out.strip() or err.strip()[-100:]}")
        self.delete(cid2)

    def run_cold(self):
        cid, b = self.bundle(["/bin/sleep", "100000"], workspace=True)
        r = self.run("run", "--detach", "--bundle", b, cid)
        self.delete(cid)
        return r

    def control_socket(self):
        cid = self.sandbox()
        abstract = any(f"runsc-sandbox.{cid}" in l for l in open("/proc/net/unix"))
        files = [n for n in os.listdir(self.root) if n.endswith(".sock")]
        self.note("the sandbox's control socket",
                  ("abstract @runsc-sandbox.<id> in the caller's netns" if abstract else "") +
                  (f"{' and ' if abstract else ''}<root>/{files[0]} (mode {oct(os.stat(os.path.join(self.root, files[0])).st_mode & 0o777)})" if files else ""))
        self.delete(cid)

    def cleanup(self):
        for n in os.listdir(self.root):
            if n.endswith(".state"):
                self.run("delete", "--force", n.split("_")[0])
        shutil.rmtree(self.work, ignore_errors=True)
        for hierarchy in os.listdir("/sys/fs/cgroup"):
            try:
                os.rmdir(os.path.join("/sys/fs/cgroup", hierarchy, "paseo-quirks"))
            except OSError:
                pass


def main():
    if len(sys.argv) < 2 or os.geteuid() != 0:
        sys.exit(__doc__)
    runsc = sys.argv[1]
    platform = sys.argv[sys.argv.index("--platform") + 1] if "--platform" in sys.argv else "ptrace"
    agent = sys.argv[sys.argv.index("--agent-rootfs") + 1] if "--agent-rootfs" in sys.argv else None
    stop_methods.unshare_net()
    version = subprocess.run([runsc, "--version"], capture_output=True, text=True).stdout.splitlines()[0]
    q = Quirks(runsc, platform, agent)
    print(f"== {version}, --platform={platform} {' '.join(q.fixed)}", flush=True)
    try:
        only = sys.argv[sys.argv.index("--only") + 1].split(",") if "--only" in sys.argv else None
        for probe in (q.control_socket, q.statx, q.console, q.home, q.init_reaping, q.pause,
                      q.delete_timing, q.network, q.checkpoint):
            if only and probe.__name__ not in only:
                continue
            try:
                probe()
            except Exception as e:  # one probe's trouble is its result, not the end of the run
                q.note(probe.__name__, f"probe failed: {e}")
    finally:
        q.cleanup()


if __name__ == "__main__":
    main()
