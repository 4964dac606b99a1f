// Paseo's command workspace runtime contract, versions 1 and 2: the messages this runtime reads
// (lifecycle request on stdin, spawn envelope and control frames on fd 3) validated exactly as
// the contract's schemas say, and the messages it writes (responses on stdout, events on fd 4)
// as the compact JSON of the contract's examples (same key order) plus a newline.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace paseo::runtime {

// The contract version this process speaks, chosen once by its command line (`describe` has
// no request to carry one): 1 (the default, getpaseo/paseo #3360) or 2 (docs/paseo.md,
// "Protocol versions"). Every message read must carry it and every message written does; the
// other version's messages are refused. One operation per process, so a process-wide value.
inline constexpr int kOldestProtocolVersion = 1;
void UseProtocolVersion(int version);
int ProtocolVersion();

// The request's `options` (Paseo's trusted configuration for this runtime); see docs/paseo.md.
struct Options {
  std::optional<std::string> socket;      // the supervisor's socket
  std::optional<std::string> deployment;  // default: the only one the caller may use
  std::optional<std::string> profile;     // default: the deployment's default
  std::vector<std::string> credentials;   // credential directory names to mount
  // Broker reconnection budget of an exec, in milliseconds (default 60000).
  std::optional<int64_t> reconnect_ms;
};

struct DirectorySource {
  std::string path;
};
struct GitSource {
  std::string url, revision;
  std::optional<std::string> subdirectory;
};

struct CreateInput {
  std::string workspace_id;
  std::string project_id;
  std::variant<DirectorySource, GitSource> source;
  std::string placement_kind;  // validated in full; this runtime places every workspace alike
  bool discovery = false;
};

struct LifecycleRequest {
  std::string runtime_instance_id;
  std::optional<CreateInput> input;
  Options options;
  std::optional<std::vector<std::string>> workspace_ids;
};

struct PtyStdio {
  int64_t rows = 0, cols = 0;
  std::optional<std::string> term;
};

struct SpawnEnvelope {
  std::string runtime_instance_id;
  std::vector<std::string> argv;
  std::optional<std::string> cwd;
  std::vector<std::pair<std::string, std::string>> env;
  std::string purpose;
  Options options;
  std::string exec_id;
  std::optional<PtyStdio> pty;  // nullopt: pipes
};

struct ResizeControl {
  int64_t id = 0, rows = 0, cols = 0;
};
struct SignalControl {
  std::string signal;
};
using Control = std::variant<ResizeControl, SignalControl>;

// Each takes one message without its newline.
absl::StatusOr<LifecycleRequest> ParseLifecycleRequest(absl::string_view text);
absl::StatusOr<SpawnEnvelope> ParseSpawnEnvelope(absl::string_view text);
// A frame on fd 3 after the spawn envelope (a pty's resize or signal).
absl::StatusOr<Control> ParseControl(absl::string_view text);

// Signal names as Node spells them ("SIGTERM"), and back. 0 / empty when unknown.
int SignalNumber(absl::string_view name);
std::string SignalName(int number);

// Messages this runtime writes, each ending in "\n".
std::string DescribeResponse();
enum class Lifecycle { kReady, kPaused };
std::string StateResponse(absl::string_view workspace_id, Lifecycle lifecycle,
                          absl::string_view cwd, std::optional<bool> materialized_fresh_content);
std::string InspectionMissing();
// `lifecycle_environment` (KEY, VALUE pairs; none: no member) is what the daemon merges over
// every workload's env (state.lifecycleEnvironment).
std::string InspectionState(absl::string_view workspace_id, Lifecycle lifecycle,
                            absl::string_view cwd,
                            const std::vector<std::pair<std::string, std::string>>&
                                lifecycle_environment = {});
std::string InspectionError(absl::string_view message);
std::string OkResponse();
std::string StartedEvent();
std::string EofEvent();
std::string ResizedEvent(int64_t id);
// code or signal (exactly one set, as the workload ended).
std::string ExitEvent(std::optional<int> code, std::optional<std::string> signal);
std::string ErrorEvent(absl::string_view message);

}  // namespace paseo::runtime
