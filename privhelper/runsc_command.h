// The runsc command line, and nothing else: the fixed global flags every runsc call gets,
// put in front of the subcommand the privhelper chose. A pure function so a test pins the
// flags (runsc_command_test.cc); RunscProcessRunner (runsc.h) is its only caller.
#pragma once

#include <string>
#include <vector>

namespace paseo {

struct RunscFlags {
  std::string root_dir;  // --root: runsc's state, <runDir>/runsc, root-only
  std::string platform;  // --platform: from the root-owned config ("ptrace" or "kvm")
  // `runsc run --detach` with network "sandbox" runs under a read-only tmpfs over /proc/sys/net
  // (SandboxNetworks probed that this runsc needs it; runsc.cc).
  bool hide_proc_sys_net = false;
  // The pinned runsc has a -directfs flag (20240729, where it defaults to true: the sentry would
  // open the container's files itself): every call says --directfs=false, so the gofer stays
  // between the sandbox and the host filesystem. 20221219 has no such flag and no directfs.
  bool has_directfs_flag = false;
};

// A call's network mode: `none` for every call but the `create` and `start` of a sandbox whose
// profile has network mode "sandbox" (gVisor's netstack on the veth in the namespace its spec
// names; runsc 20221219 copies the namespace's interfaces and routes at start).
// There is no host networking.
enum class RunscNetwork { kNone, kSandbox };

// The log fd `runsc exec` writes its debug log to (exit_status.h reads the wait status there).
inline constexpr int kRunscLogFd = 3;

// True for the one subcommand whose debug log the privhelper reads: `exec`. Every other call
// runs without --debug-log (it would otherwise need fd 3, and log to nobody).
bool RunscWritesDebugLog(const std::vector<std::string>& args);

// "runsc --root=<root> --platform=<platform> --network=none|sandbox
// [--directfs=false] [--debug-log=/proc/self/fd/3] <args...>". Never directfs (the gofer stays
// between the sandbox and the host filesystem)
// and never host networking: the flags come from here only, and `args` are subcommands and
// their operands the privhelper wrote itself (ids, paths in its own bundle).
std::vector<std::string> RunscArgv(const RunscFlags& flags, const std::vector<std::string>& args,
                                   RunscNetwork network = RunscNetwork::kNone);

}  // namespace paseo
