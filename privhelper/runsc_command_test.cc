// Pins the flags every runsc call gets (runsc_command.h): a change that drops --network=none,
// adds --directfs or host networking, or logs more than `exec` fails here first.
#include "privhelper/runsc_command.h"

#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "gtest/gtest.h"

namespace paseo {
namespace {

const RunscFlags kFlags = {"/run/paseo-sandbox/runsc", "ptrace"};

// Every subcommand SandboxHost runs, with operands of the shape it uses.
const std::vector<std::vector<std::string>> kCalls = {
    {"run", "--detach", "--bundle", "/var/lib/paseo-sandbox/bundles/sb-1", "sb-1"},
    {"exec", "--process", "/b/process-p-1.json", "--internal-pid-file", "/b/process-p-1.pid",
     "sb-1"},
    {"kill", "--pid=7", "sb-1", "15"},
    {"kill", "--all", "sb-1", "KILL"},
    {"delete", "--force", "sb-1"},
    {"list", "--format=json"},
};

TEST(RunscArgv, FixedFlagsComeFirstForEveryCall) {
  for (const auto& args : kCalls) {
    std::vector<std::string> argv = RunscArgv(kFlags, args);
    ASSERT_GE(argv.size(), 4u + args.size()) << args[0];
    EXPECT_EQ(argv[0], "runsc");
    EXPECT_EQ(argv[1], "--root=/run/paseo-sandbox/runsc") << args[0];
    EXPECT_EQ(argv[2], "--platform=ptrace") << args[0];
    EXPECT_EQ(argv[3], "--network=none") << args[0];
    // The subcommand and its operands follow unchanged, last.
    EXPECT_EQ(std::vector<std::string>(argv.end() - static_cast<long>(args.size()), argv.end()),
              args)
        << args[0];
  }
}

TEST(RunscArgv, NeverDirectfsNorHostNetworking) {
  for (const auto& args : kCalls) {
    int network_flags = 0;
    for (const auto& a : RunscArgv(kFlags, args)) {
      EXPECT_FALSE(absl::StartsWith(a, "--directfs")) << args[0] << ": " << a;
      EXPECT_NE(a, "--network=host") << args[0];
      EXPECT_NE(a, "--network=sandbox") << args[0];
      network_flags += absl::StartsWith(a, "--network");
    }
    EXPECT_EQ(network_flags, 1) << args[0];
  }
}

TEST(RunscArgv, SandboxNetworkOnlyWhenAskedAndNeverHost) {
  std::vector<std::string> create = {"create", "--bundle", "/b", "sb-1"};
  std::vector<std::string> argv = RunscArgv(kFlags, create, RunscNetwork::kSandbox);
  EXPECT_EQ(argv[3], "--network=sandbox");
  int network_flags = 0;
  for (const auto& a : argv) {
    EXPECT_NE(a, "--network=host");
    EXPECT_FALSE(absl::StartsWith(a, "--directfs"));
    network_flags += absl::StartsWith(a, "--network");
  }
  EXPECT_EQ(network_flags, 1);
  EXPECT_EQ(RunscArgv(kFlags, create, RunscNetwork::kNone)[3], "--network=none");
  EXPECT_EQ(RunscArgv(kFlags, create)[3], "--network=none");
}

TEST(RunscArgv, OnlyExecWritesADebugLogToFd3) {
  for (const auto& args : kCalls) {
    std::vector<std::string> argv = RunscArgv(kFlags, args);
    bool logs = false;
    for (const auto& a : argv) logs |= absl::StartsWith(a, "--debug-log");
    EXPECT_EQ(logs, args[0] == "exec") << args[0];
    EXPECT_EQ(RunscWritesDebugLog(args), args[0] == "exec") << args[0];
  }
  std::vector<std::string> exec = RunscArgv(kFlags, kCalls[1]);
  EXPECT_EQ(exec[4], "--debug-log=/proc/self/fd/3");
  EXPECT_EQ(exec[5], "exec");
  EXPECT_FALSE(RunscWritesDebugLog({}));
}

// Regression (runsc 20240729): its -directfs defaults to true, so leaving the flag out gave the
// sentry direct access to the container's files. A runsc that has the flag is told false on
// every call, right after the fixed flags; one without it (20221219) is never given it.
TEST(RunscArgv, DirectfsIsTurnedOffOnEveryCallWhereRunscHasIt) {
  RunscFlags with = kFlags;
  with.has_directfs_flag = true;
  for (const auto& args : kCalls) {
    std::vector<std::string> argv = RunscArgv(with, args);
    EXPECT_EQ(argv[4], "--directfs=false") << args[0];
    int directfs = 0;
    for (const auto& a : argv) directfs += absl::StartsWith(a, "--directfs");
    EXPECT_EQ(directfs, 1) << args[0];
    EXPECT_EQ(std::vector<std::string>(argv.end() - static_cast<long>(args.size()), argv.end()), args);
  }
  EXPECT_EQ(RunscArgv(with, {"create", "--bundle", "/b", "sb-1"}, RunscNetwork::kSandbox)[4],
            "--directfs=false");
}

TEST(RunscArgv, TheConfiguredPlatformAndRootAreUsed) {
  std::vector<std::string> argv = RunscArgv({"/tmp/r", "kvm"}, {"list"});
  EXPECT_EQ(argv, (std::vector<std::string>{"runsc", "--root=/tmp/r", "--platform=kvm",
                                            "--network=none", "list"}));
}

}  // namespace
}  // namespace paseo
