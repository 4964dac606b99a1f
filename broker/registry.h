// The broker's registry: every sandbox and process it knows, their states, and the decisions
// about them -- who may see or use what (authorization.h), which state allows which operation.
// It owns its containers; the RPC servers ask it and never touch them. No I/O happens here.
//
//   Registry registry(policy);
//   ASSIGN_OR_RETURN(BegunCreate begun, registry.BeginCreate(peer, {"work", "", {}}, now));
//   if (begun.created) {
//     ... ask the privhelper to create begun.sandbox->id ...
//     registry.FinishCreate(begun.sandbox->id);    // or AbortCreate(...) if that failed
//   }
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "broker/authorization.h"
#include "broker/process_io.h"
#include "common/process_exit.h"
#include "common/request_checks.h"
#include "schema/helper.capnp.h"

namespace paseo {

enum class SandboxState {
  kCreating,    // the privhelper is creating it; invisible to listings, nothing can start
  kRunning,     // usable
  kUnattached,  // adopted after a full restart (policy keep): usable, earlier output gone
  kPaused,      // frozen (runsc pause): nothing starts until resumed; resumes to resumes_to
  kOomKilled,   // the host's OOM killer stopped it: output readable, only delete is useful
  kStopped,     // it stopped by itself (its sentry or gofer exited): the same, with stop_reason
  kDeleting,    // the privhelper is deleting it
};

// The state's name in the public API (api.capnp SandboxInfo.state).
const char* StateName(SandboxState state);

// What a sandbox remembers of a released process that had a key (Sandbox.findProcess).
struct ReleasedProcess {
  std::string id;
  std::string key;
  ProcessExit exit;
};

// When ended processes are released by the service (api.capnp Process.release): a drained one
// (every stream read to its end) after kDrainedLinger or once the sandbox has more than
// kDrainedKept of them; any ended one kUndrainedLinger after its end or once the sandbox has
// more than kEndedKept of them, oldest first. The keys of the last kReleasedKeysKept released
// processes are remembered.
struct ReleaseRules {
  static constexpr kj::Duration kDrainedLinger = 60 * kj::SECONDS;
  static constexpr kj::Duration kUndrainedLinger = 3600 * kj::SECONDS;
  static constexpr size_t kDrainedKept = 64;
  static constexpr size_t kEndedKept = 1024;
  static constexpr size_t kReleasedKeysKept = 1024;
};

// A sandbox's network as the privhelper reported it (api.capnp NetworkInfo).
struct SandboxNetwork {
  std::string mode = "none";
  std::string address;  // empty for "none"
  std::vector<uint16_t> inbound_ports;
  std::vector<std::pair<std::string, std::vector<uint16_t>>> allow_names;  // name, its ports
};

// Where a sandbox's programs are found and what of it is kept (api.capnp SandboxPaths), as the
// privhelper reported them.
struct SandboxPaths {
  std::vector<std::string> tool_directories;
  std::vector<std::string> kept;
  std::string home;
};

struct SandboxRecord {
  std::string id;
  std::string deployment_id;
  std::string profile;
  uid_t owner_uid = 0;
  int64_t created_ms = 0;
  std::vector<std::pair<std::string, std::string>> labels;
  SandboxState state = SandboxState::kCreating;
  // The client's name for it (api.capnp SandboxSpec.key), unique in its deployment; empty: none.
  std::string key;
  // Set when the create succeeds (createSandbox's answer) or from an inventory.
  SandboxNetwork network;
  SandboxPaths paths;
  // What a paused sandbox is again once resumed (kRunning or kUnattached).
  SandboxState resumes_to = SandboxState::kRunning;
  // Why it stopped by itself (kStopped, kOomKilled); kept through a delete that fails.
  std::string stop_reason;
  bool oom_killed = false;
  uint64_t buffer_bytes = 8 << 20;  // output kept per stream (the profile's outputBufferBytes)
  std::vector<std::string> process_order;  // not released, in start order
  std::map<std::string, kj::Own<ProcessRecord>> processes;
  // Every key in use -> its process id, from the moment a start with it is accepted (so two
  // concurrent starts cannot both take it) until the process is released.
  std::map<std::string, std::string> process_keys;
  std::deque<ReleasedProcess> released;  // oldest first, at most kReleasedKeysKept
  // Output bytes of the processes released since this broker took the sandbox over (stats).
  uint64_t released_output_bytes = 0;
};

// What a client asks for when it creates a sandbox, as far as the registry decides it.
struct CreateRequest {
  std::string deployment_id;
  std::string profile;  // empty: the deployment's default
  std::vector<LabelView> labels;
  std::string key;  // empty: none
};

// What BeginCreate decided: a new sandbox in kCreating (`created`), or the existing one the
// request's key names (it may itself still be kCreating: the caller waits for that create).
struct BegunCreate {
  SandboxRecord* sandbox = nullptr;
  bool created = true;
};

class Registry {
 public:
  explicit Registry(helper::BrokerPolicy::Reader policy) : policy_(policy) {}

  // --- who may use what
  std::optional<helper::DeploymentPolicy::Reader> Deployment(const std::string& id) const;
  bool MayUseDeployment(const Peer& peer, const std::string& deployment_id) const;
  std::vector<std::string> DeploymentsFor(const Peer& peer) const;
  // permission-denied for a peer that may use no deployment at all.
  absl::Status RequireSomeDeployment(const Peer& peer) const;
  // The output kept per stream for a sandbox of `profile` in `deployment_id`.
  uint64_t BufferBytes(const std::string& deployment_id, const std::string& profile) const;

  // --- sandboxes
  // Checks the request and registers a new sandbox in kCreating with a fresh id, owned by
  // `peer`. The caller then has the privhelper create it and calls FinishCreate or AbortCreate.
  // With a key another sandbox of the deployment has, nothing is registered: that sandbox is
  // returned (created = false) if `peer`'s uid created it; already-exists if another uid did;
  // failed-precondition while it is being deleted, until the privhelper has stopped it (then
  // the key is free, though the old sandbox stays `deleting` until its teardown has ended).
  absl::StatusOr<BegunCreate> BeginCreate(const Peer& peer, const CreateRequest& request,
                                          int64_t now_ms);
  // kCreating -> kRunning. Null if it is gone.
  SandboxRecord* FinishCreate(const std::string& id);
  void AbortCreate(const std::string& id);

  // The sandbox if it exists and `peer` may use its deployment; not-found otherwise (the same
  // answer for "absent" and "not yours", so ids cannot be probed).
  absl::StatusOr<SandboxRecord*> Visible(const Peer& peer, const std::string& id);
  // The sandbox of `deployment_id` created with `key`; not-found if there is none, it is still
  // being created, or `peer` may not use the deployment.
  absl::StatusOr<SandboxRecord*> FindByKey(const Peer& peer, const std::string& deployment_id,
                                           const std::string& key);
  // Every sandbox `peer` may see, except those still being created, ordered by id.
  std::vector<const SandboxRecord*> List(const Peer& peer) const;

  // Marks a visible sandbox kDeleting and returns the state it had. Refused while it is being
  // created or deleted (Broker::DeleteSandbox answers a second delete itself), and without
  // `force` while a process still runs.
  absl::StatusOr<SandboxState> BeginDelete(const Peer& peer, const std::string& id, bool force);
  // The privhelper deleted it: every process still running ends as unknown, and it is gone.
  void FinishDelete(const std::string& id);
  // The privhelper could not delete it: it is usable again in its earlier state.
  void AbortDelete(const std::string& id, SandboxState before);
  // The privhelper answered the delete: nothing runs in it any more. It stays kDeleting until
  // FinishDelete, but its key is free: a create with the key makes a new sandbox.
  void Halted(const std::string& id);

  // Whether the privhelper must be asked to pause (resume) a visible sandbox: false if it is
  // paused (not paused) already; failed-precondition in a state that cannot be paused (resumed).
  absl::StatusOr<bool> BeginPause(const Peer& peer, const std::string& id);
  absl::StatusOr<bool> BeginResume(const Peer& peer, const std::string& id);
  // The privhelper paused (resumed) it: a running or adopted sandbox becomes kPaused (a paused
  // one what it was before). Any other state -- it stopped or is being deleted meanwhile -- stays.
  void FinishPause(const std::string& id);
  void FinishResume(const std::string& id);

  // A process may start only in a running (or adopted) sandbox: failed-precondition otherwise,
  // with the state and, for a stopped one, why.

  absl::StatusOr<SandboxRecord*> ForNewProcess(const Peer& peer, const std::string& id);
  // Adds a started process to its sandbox; not-found if the sandbox went meanwhile.
  absl::Status AddProcess(kj::Own<ProcessRecord> process);
  absl::StatusOr<ProcessRecord*> VisibleProcess(const Peer& peer, const std::string& sandbox_id,
                                                const std::string& process_id);

  // --- process keys and release
  // Takes `key` (if not empty) for a process about to start: already-exists if a process of
  // the sandbox has it, a start with it is under way, or a released process had it.
  absl::Status ReserveProcessKey(SandboxRecord& sb, const std::string& key,
                                 const std::string& process_id);
  // The start failed: the key is free again.
  void UnreserveProcessKey(const std::string& sandbox_id, const std::string& key);
  // The process of a visible sandbox started with `key`, or what is remembered of it once
  // released (exactly one is set); not-found otherwise.
  struct KeyedProcess {
    ProcessRecord* process = nullptr;
    const ReleasedProcess* released = nullptr;
  };
  absl::StatusOr<KeyedProcess> FindProcessByKey(const Peer& peer, const std::string& sandbox_id,
                                                const std::string& key);
  // Forgets an ended process (failed-precondition while it runs), remembering its key, and
  // returns it so the caller can free what it holds (its logs, the privhelper's part).
  absl::StatusOr<kj::Own<ProcessRecord>> Release(const std::string& sandbox_id,
                                                 const std::string& process_id);
  // The ended processes of `sb` that ReleaseRules says go now, in the order to release them.
  static std::vector<std::string> DueForRelease(const SandboxRecord& sb, kj::TimePoint now);
  // When DueForRelease will next name a process of `sb` by time alone (none: nothing ended).
  static std::optional<kj::TimePoint> NextReleaseAt(const SandboxRecord& sb);

  // The privhelper says the sandbox stopped by itself (`oom_killed`: the host's OOM killer did
  // it; a process of it ending oom-killed says the same). A running or adopted sandbox becomes
  // kStopped (kOomKilled); one being deleted stays kDeleting and comes back stopped if the delete
  // fails. The first reason stays, except that an OOM kill is the more specific one.
  void MarkStopped(const std::string& id, const std::string& reason, bool oom_killed);

  // Rebuilding after a broker restart: adds a sandbox as it is.
  SandboxRecord& Restore(std::unique_ptr<SandboxRecord> sandbox);
  SandboxRecord* Find(const std::string& id);
  // Every sandbox, ordered by id.
  std::vector<SandboxRecord*> All();
  size_t size() const { return sandboxes_.size(); }

 private:
  helper::BrokerPolicy::Reader policy_;
  std::map<std::string, std::unique_ptr<SandboxRecord>> sandboxes_;
  // (deployment, key) -> sandbox id, for every sandbox with a key, from BeginCreate until it is
  // gone (AbortCreate, FinishDelete).
  std::map<std::pair<std::string, std::string>, std::string> keys_;
  void Unindex(const SandboxRecord& sb);
};

}  // namespace paseo
