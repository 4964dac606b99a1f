// Small helpers shared by the root test suites (testing/harness.h) and the benchmark
// (testing/bench): files, commands, Bazel runfiles, sockets, processes. No gtest here; a
// failure that leaves nothing sensible to do ends the program with a message.
#pragma once

#include <sys/types.h>

#include <string>
#include <vector>

namespace paseo::testing {

// Prints "<program>: <why>" and exits 2.
[[noreturn]] void Die(const std::string& why);
// Dies with `what` and errno's text unless `ok`.
void Check(bool ok, const std::string& what);

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

// Waits at most `seconds` for child `pid` to end and stores its wait status. If it takes
// longer, SIGKILLs and reaps it and returns false: a hung child fails a test in seconds.
bool WaitPidWithin(pid_t pid, int seconds, int* status);

}  // namespace paseo::testing
