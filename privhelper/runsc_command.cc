// See runsc_command.h.
#include "privhelper/runsc_command.h"

#include "absl/strings/str_cat.h"

namespace paseo {

bool RunscWritesDebugLog(const std::vector<std::string>& args) {
  return !args.empty() && args[0] == "exec";
}

std::vector<std::string> RunscArgv(const RunscFlags& flags, const std::vector<std::string>& args,
                                   RunscNetwork network) {
  std::vector<std::string> argv = {
      "runsc",
      absl::StrCat("--root=", flags.root_dir),
      absl::StrCat("--platform=", flags.platform),
      network == RunscNetwork::kSandbox ? "--network=sandbox" : "--network=none",
  };
  if (flags.has_directfs_flag) argv.push_back("--directfs=false");
  if (RunscWritesDebugLog(args))
    argv.push_back(absl::StrCat("--debug-log=/proc/self/fd/", kRunscLogFd));
  argv.insert(argv.end(), args.begin(), args.end());
  return argv;
}

}  // namespace paseo
