// Small helpers shared by the root test suites (testing/harness.h) and the benchmark
// (testing/bench): files, commands, Bazel runfiles, sockets, processes. No gtest here; a
// failure that leaves nothing sensible to do ends the program with a message.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace paseo::testing {

// Prints "<program>: <why>" and exits 2.
[[noreturn]] void Die(const std::string& why);
// Dies with `what` and errno's text unless `ok`.
void Check(bool ok, const std::string& what);

// The runsc the suites and the bench drive: $PASEO_RUNSC, else the project's pinned gVisor
// 20240729 (installer/runsc-pin, installed by installer/install-deps). testing/run-tests sets
// it to bookworm's /usr/bin/runsc for the compatibility subset.
std::string RunscPath();
// The gVisor platform the suites' services are configured with: $PASEO_RUNSC_PLATFORM, else
// "auto" (run-tests sets the one the privhelper's measured choice made, once per run).
std::string RunscPlatform();

// A file from the target's Bazel runfiles (needs TEST_SRCDIR and TEST_WORKSPACE).
std::string Runfile(const std::string& rel);
// Copies a binary out of Bazel's output tree (under root's 0700 home) so other users can run it.
void CopyExecutable(const std::string& from, const std::string& to);
// Runs a shell command; returns its stdout without trailing whitespace (dies if it fails).
std::string Capture(const std::string& cmd);

std::string ReadFile(const std::string& path);  // "" if unreadable
void WriteText(const std::string& path, const std::string& text);  // dies if it cannot
std::vector<std::string> ListDir(const std::string& dir);         // names, without . and ..

void LoopbackUp();  // brings `lo` up in the current network namespace
bool CanConnect(const std::string& unix_socket_path);
// The pids of `parent`'s child processes (of its main thread).
std::vector<pid_t> ChildrenOf(pid_t parent);
// A process's command line, its arguments joined by spaces ("" once it is gone).
std::string Cmdline(pid_t pid);
// Every process whose command line contains `needle`.
std::vector<pid_t> PidsMatching(const std::string& needle);
// A `Key:  N kB` field of /proc/<pid>/<file> (e.g. "status", "VmRSS:"), in KiB; 0 if absent.
uint64_t ProcKiB(pid_t pid, const std::string& file, const std::string& key);
uint64_t RssKiB(pid_t pid);  // VmRSS

// Starts argv (argv[0] is the path) through common/spawn: fds 0-2 are `in`, `out` and `err`
// and nothing else is open, the environment is `env`, and `in_child` (errno or 0) runs just
// before exec. Dies if it cannot.
pid_t SpawnStdio(const std::vector<std::string>& argv, int in, int out, int err,
                 const std::vector<std::string>& env, std::function<int()> in_child = nullptr);
// waitpid, retried on EINTR; returns the wait status.
int WaitPid(pid_t pid);

// Removes the empty cgroup `rel` ("/a/b") from every v1 hierarchy and from a v2 tree.
void RemoveCgroup(const std::string& rel);

// Waits at most `seconds` for child `pid` to end and stores its wait status. If it takes
// longer, SIGKILLs and reaps it and returns false: a hung child fails a test in seconds.
bool WaitPidWithin(pid_t pid, int seconds, int* status);

}  // namespace paseo::testing
