// The contract's lifecycle operations (create, inspect, pause, resume, destroy, reconcile) and
// the `signal` cleanup path, over the public API: a Paseo workspace is the sandbox with key
// `paseo/<workspaceId>` in the chosen deployment, owned by the Paseo instance named in its
// `paseo.runtime-instance` label. Each operation waits on the event loop it is given and
// returns the response line to print, or a status whose message is the stderr diagnostic.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>

#include <kj/async.h>
#include <kj/timer.h>

#include "absl/status/statusor.h"
#include "runtime/protocol.h"
#include "schema/api.capnp.h"

namespace paseo::runtime {

inline constexpr char kKeyPrefix[] = "paseo/";
inline constexpr char kInstanceLabel[] = "paseo.runtime-instance";
inline constexpr char kWorkspaceLabel[] = "paseo.workspace";
inline constexpr char kSourceLabel[] = "paseo.source";
inline constexpr char kCwdLabel[] = "paseo.cwd";  // a git source's subdirectory, as placement.cwd
inline constexpr char kWorkspaceDestination[] = "/workspace";

// What every operation needs: the API, the event loop, who we are and where we work.
struct Session {
  kj::WaitScope& wait_scope;
  kj::Timer& timer;
  api::Supervisor::Client supervisor;
  std::string deployment;  // resolved (ResolveDeployment)
  std::string instance;    // runtimeInstanceId
  Options options;
  // How long `signal` waits for the workload to be gone.
  int64_t signal_wait_ms = 5000;
};

// options.deployment, else the only deployment the caller may use (Supervisor.info).
absl::StatusOr<std::string> ResolveDeployment(kj::WaitScope& wait_scope,
                                              api::Supervisor::Client& supervisor,
                                              const Options& options);

// The sandbox key of a workspace: "paseo/<workspaceId>", checked like any client key.
absl::StatusOr<std::string> SandboxKey(const std::string& workspace_id);

// A workspace's sandbox as found by its key.
struct Found {
  api::Sandbox::Client sandbox;
  std::string id, state, state_reason;
  std::map<std::string, std::string> labels;
  std::vector<std::string> tool_directories, kept;  // SandboxInfo.paths
  std::string profile, network_mode;
  std::vector<std::pair<std::string, std::vector<uint16_t>>> allow_names;  // network.allowNames
  int64_t created_ms = 0;
};
// What inspect reports as state.lifecycleEnvironment, which the daemon merges over every
// workload's env (docs/paseo.md): PATH with the sandbox's tool directories in front of the
// default (only if it has tools), and PASEO_SANDBOX_KEPT (only if anything is kept).
std::vector<std::pair<std::string, std::string>> LifecycleEnvironment(const Found& found);
// nullopt when there is none (or it is still being created).
absl::StatusOr<std::optional<Found>> FindWorkspace(Session& s, const std::string& workspace_id);
// An error naming the owner when `found` belongs to another Paseo instance.
absl::Status CheckOwned(const Session& s, const Found& found, const std::string& workspace_id);

absl::StatusOr<std::string> Create(Session& s, const std::string& workspace_id,
                                   const LifecycleRequest& request);
absl::StatusOr<std::string> Inspect(Session& s, const std::string& workspace_id);
absl::StatusOr<std::string> Pause(Session& s, const std::string& workspace_id);
absl::StatusOr<std::string> Resume(Session& s, const std::string& workspace_id);
absl::StatusOr<std::string> Destroy(Session& s, const std::string& workspace_id);
absl::StatusOr<std::string> Reconcile(Session& s, const LifecycleRequest& request);
// Process.signal, retried every 20 ms while the service answers "unavailable" because the
// process is still starting (startProcess has answered but runsc has not yet reported the
// workload's pid), until `deadline`. Any other failure, or that one at the deadline, rejects.
kj::Promise<void> SignalWhenStarted(api::Process::Client process, int signal, kj::Timer& timer,
                                   kj::TimePoint deadline);

// Sends `signal` to the workload started with exec id `exec_id` and returns once it is gone
// (bounded by signal_wait_ms); ok when it already ended or was released.
absl::Status SignalExec(Session& s, const std::string& workspace_id, const std::string& exec_id,
                        const std::string& signal);

}  // namespace paseo::runtime
