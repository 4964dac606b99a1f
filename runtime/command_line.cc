// See command_line.h.
#include "runtime/command_line.h"

#include <map>

#include "absl/strings/str_cat.h"
#include "runtime/protocol.h"

namespace paseo::runtime {
namespace {

struct OperationEntry {
  const char* name;
  Operation operation;
  std::vector<std::string> flags;
};

const std::vector<OperationEntry>& Operations() {
  static const auto* table = new std::vector<OperationEntry>{
      {"describe", Operation::kDescribe, {}},
      {"create", Operation::kCreate, {"--workspace-id"}},
      {"inspect", Operation::kInspect, {"--workspace-id"}},
      {"exec", Operation::kExec, {"--workspace-id"}},
      {"signal", Operation::kSignal, {"--workspace-id", "--exec-id", "--signal"}},
      {"pause", Operation::kPause, {"--workspace-id"}},
      {"resume", Operation::kResume, {"--workspace-id"}},
      {"destroy", Operation::kDestroy, {"--workspace-id"}},
      {"reconcile", Operation::kReconcile, {}},
  };
  return *table;
}

}  // namespace

absl::StatusOr<Invocation> ParseCommandLine(const std::vector<std::string>& all_args) {
  std::vector<std::string> args = all_args;
  int version = kOldestProtocolVersion;
  if (!args.empty() && args[0] == "--protocol-version") {
    if (args.size() < 2) return absl::InvalidArgumentError("--protocol-version needs a value");
    if (args[1] == "1") version = 1;
    else if (args[1] == "2") version = 2;
    else
      return absl::InvalidArgumentError(absl::StrCat(
          "--protocol-version: \"", args[1], "\" is not a version this runtime speaks (1 or 2)"));
    args.erase(args.begin(), args.begin() + 2);
  }
  if (args.empty()) return absl::InvalidArgumentError("no operation given");
  const std::string& name = args[0];
  if (name == "manage-describe" && version >= 2) {
    if (args.size() > 1)
      return absl::InvalidArgumentError(absl::StrCat(name, ": unexpected argument \"", args[1], "\""));
    Invocation inv{Operation::kManageDescribe, "", "", ""};
    inv.protocol_version = version;
    return inv;
  }
  if (name == "release-backing" || name == "merge-to-base" || name == "validate-options" ||
      name == "preflight-release-backing") {
    return absl::UnimplementedError(absl::StrCat(
        name, " is not supported by paseo-sandbox-runtime (neither describe nor manage-describe "
              "declares it)"));
  }
  const OperationEntry* entry = nullptr;
  for (const auto& e : Operations()) {
    if (name == e.name) entry = &e;
  }
  if (entry == nullptr) return absl::InvalidArgumentError(absl::StrCat("unknown operation \"", name, "\""));
  std::map<std::string, std::string> values;
  for (size_t i = 1; i < args.size(); i += 2) {
    const std::string& flag = args[i];
    if (std::find(entry->flags.begin(), entry->flags.end(), flag) == entry->flags.end())
      return absl::InvalidArgumentError(
          absl::StrCat(name, ": unexpected argument \"", flag, "\""));
    if (i + 1 >= args.size())
      return absl::InvalidArgumentError(absl::StrCat(name, ": ", flag, " needs a value"));
    if (!values.emplace(flag, args[i + 1]).second)
      return absl::InvalidArgumentError(absl::StrCat(name, ": ", flag, " given twice"));
  }
  for (const auto& flag : entry->flags) {
    auto it = values.find(flag);
    if (it == values.end()) return absl::InvalidArgumentError(absl::StrCat(name, ": ", flag, " is required"));
    if (it->second.empty())
      return absl::InvalidArgumentError(absl::StrCat(name, ": ", flag, " must not be empty"));
  }
  Invocation inv{entry->operation, values["--workspace-id"], values["--exec-id"],
                 values["--signal"]};
  inv.protocol_version = version;
  if (inv.operation == Operation::kSignal && SignalNumber(inv.signal) == 0)
    return absl::InvalidArgumentError(absl::StrCat("signal: unknown signal \"", inv.signal, "\""));
  return inv;
}

}  // namespace paseo::runtime
